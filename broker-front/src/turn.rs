//! Work sharing between the connections of one core. A connection's reader starts a task
//! per request it decodes; without a bound, a client that pipelines thousands of tiny
//! requests (or whose socket always has bytes ready, so a read never suspends) would put all
//! of them in the core's run queue before another connection's reader ran once, and a paced
//! client's single request would wait behind them. A reader takes a [`Turn`]: after
//! [`TURN_REQUESTS_MAX`] requests or [`TURN_BYTES_MAX`] bytes it yields, going to the back
//! of the executor's queue, so every connection with work ready gets a turn in round robin
//! and the tasks it started run before it starts more.

/// Requests one connection starts before it lets the others have a turn.
pub const TURN_REQUESTS_MAX: u32 = 16;
/// Request bytes one connection takes in before it lets the others have a turn: a batch of
/// 4 MiB is one turn, and so are 16 small sends.
pub const TURN_BYTES_MAX: usize = 256 << 10;

/// What one connection took since it last yielded.
#[derive(Debug, Default)]
pub struct Turn {
    requests: u32,
    bytes: usize,
}

impl Turn {
    /// Counts a request of `bytes`; whether the turn is over (and a new one begun).
    pub fn took(&mut self, bytes: usize) -> bool {
        self.requests += 1;
        self.bytes = self.bytes.saturating_add(bytes);
        let over = self.requests >= TURN_REQUESTS_MAX || self.bytes >= TURN_BYTES_MAX;
        if over {
            *self = Turn::default();
        }
        over
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lanes::{Lane, Lanes};
    use std::cell::RefCell;
    use std::rc::Rc;

    #[test]
    fn a_turn_ends_after_its_requests_or_its_bytes() {
        let mut t = Turn::default();
        assert!((1..TURN_REQUESTS_MAX).all(|_| !t.took(100)));
        assert!(t.took(100));
        assert!(!t.took(100), "a new turn begins");
        let mut t = Turn::default();
        assert!(t.took(TURN_BYTES_MAX), "one large batch is a turn");
    }

    /// Two connections on one executor: one with 2,000 requests ready at once, one with a
    /// single request arriving just after. The single request is served within the first
    /// two turns of the flooder, not after its 2,000.
    #[test]
    fn a_flooding_connection_does_not_keep_a_paced_one_waiting() {
        let ex = glommio::LocalExecutorBuilder::default()
            .make()
            .expect("an executor");
        let served_before_paced = ex.run(async {
            // One lane, as a reader's turn ends there (`Lanes::turn_over`).
            let lanes = Rc::new(Lanes::new(0));
            let log: Rc<RefCell<Vec<&'static str>>> = Rc::default();
            let serve = |log: &Rc<RefCell<Vec<&'static str>>>, who: &'static str| {
                let log = log.clone();
                glommio::spawn_local(async move { log.borrow_mut().push(who) }).detach();
            };
            let flood = {
                let (log, lanes) = (log.clone(), lanes.clone());
                glommio::spawn_local(async move {
                    let mut turn = Turn::default();
                    for _ in 0..2_000 {
                        serve(&log, "flood");
                        if turn.took(64) {
                            lanes.turn_over(Lane::Bulk).await;
                        }
                    }
                })
            };
            let paced = {
                let (log, lanes) = (log.clone(), lanes.clone());
                glommio::spawn_local(async move {
                    let mut turn = Turn::default();
                    serve(&log, "paced");
                    if turn.took(64) {
                        lanes.turn_over(Lane::Bulk).await;
                    }
                })
            };
            flood.await;
            paced.await;
            let log = log.borrow();
            assert_eq!(log.len(), 2_001);
            log.iter().position(|w| *w == "paced").unwrap_or(usize::MAX)
        });
        assert!(
            served_before_paced <= 2 * TURN_REQUESTS_MAX as usize,
            "the paced request was served after {served_before_paced} of the flooder's"
        );
    }
}
