//! A tiny single-threaded broadcast notification: the shard's tasks all live on one
//! executor, so a `Cell` generation counter and a list of wakers are all that is needed.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

#[derive(Default)]
pub struct Signal {
    generation: Cell<u64>,
    wakers: RefCell<Vec<Waker>>,
}

impl Signal {
    pub fn notify_all(&self) {
        self.generation.set(self.generation.get().wrapping_add(1));
        let wakers = std::mem::take(&mut *self.wakers.borrow_mut());
        for w in wakers {
            w.wake();
        }
    }

    /// Resolves at the next `notify_all` after this call.
    pub fn wait(&self) -> SignalWait<'_> {
        SignalWait {
            signal: self,
            seen: self.generation.get(),
        }
    }

    /// Waits for a notification or the timeout, whichever comes first.
    pub async fn wait_timeout(&self, timeout: Duration) {
        futures_lite::future::or(self.wait(), async {
            glommio::timer::sleep(timeout).await;
        })
        .await
    }
}

pub struct SignalWait<'a> {
    signal: &'a Signal,
    seen: u64,
}

impl Future for SignalWait<'_> {
    type Output = ();
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.signal.generation.get() != self.seen {
            return Poll::Ready(());
        }
        let mut wakers = self.signal.wakers.borrow_mut();
        if !wakers.iter().any(|w| w.will_wake(cx.waker())) {
            wakers.push(cx.waker().clone());
        }
        Poll::Pending
    }
}
