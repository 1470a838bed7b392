//! A topic's route across the cluster, for the answers that speak for every broker of it
//! (the remoting QUERY_ASSIGNMENT, the gRPC QueryRoute and QueryAssignment): the
//! NameServer's, as RocketMQ's broker and Proxy ask theirs. Asked on the blocking pool, so
//! the core keeps serving meanwhile, and kept by each core for [`ROUTE_CACHE_TTL`] (as
//! RocketMQ's Proxy keeps its routes in a cache), so that clients asking for their
//! assignment or route under load do not open a NameServer connection each. Requests for a
//! topic whose route is being asked for meanwhile wait for that answer rather than ask too.

use std::cell::RefCell;
use std::collections::HashMap;
use std::future::Future;
use std::rc::Rc;
use std::task::{Poll, Waker};
use std::time::{Duration, Instant};

use shard::Clock;

use crate::front::Front;

/// How long a core answers from a route it was given before it asks the NameServer again:
/// short next to the clients' own route refresh (RocketMQ's: 30 s), so a broker that joins
/// or leaves is seen within it.
pub const ROUTE_CACHE_TTL: Duration = Duration::from_secs(2);
/// Topics whose route a core keeps at most: past it the oldest is forgotten.
pub const ROUTE_CACHE_ENTRIES_MAX: usize = 1024;

/// One core of a broker of the route.
#[derive(Debug, Clone, PartialEq)]
pub struct RouteCore {
    /// The broker (group) it belongs to, as registered.
    pub broker: String,
    /// Its RocketMQ broker name (`protocol::core_view`).
    pub broker_name: String,
    /// The core's direct address on the group's master.
    pub addr: String,
    pub read_queues: u32,
    pub write_queues: u32,
    pub perm: u32,
}

/// The cores of every broker serving `topic`, as the NameServers hold them: `Ok(None)` when
/// no live broker serves it, `Err` when none answered (or none is configured).
/// Answered from the core's [`RouteCache`] while the route it holds is fresh.
pub async fn cluster_cores(f: &Front, topic: &str) -> Result<Option<Vec<RouteCore>>, String> {
    if f.shared.config.namesrv_list().is_empty() {
        return Err("no NameServer is configured".into());
    }
    cached(&f.routes, &f.shared.clock, topic, || ask_namesrv(f, topic)).await
}

async fn ask_namesrv(f: &Front, topic: &str) -> Result<Option<Vec<RouteCore>>, String> {
    let shared = f.shared.clone();
    let name = topic.to_owned();
    let route = glommio::executor()
        .spawn_blocking(move || crate::registry::query_route(&shared, &name))
        .await?;
    Ok(route.map(|route| {
        protocol::core_view::core_routes(topic, &route)
            .into_iter()
            .map(|c| RouteCore {
                broker: c.broker.broker_name.clone(),
                broker_name: c.broker_name,
                addr: c.addr,
                read_queues: c.read_queues,
                write_queues: c.write_queues,
                perm: c.perm,
            })
            .collect()
    }))
}

/// What the NameServers said of a topic's route (see [`cluster_cores`]).
type RouteAnswer = Result<Option<Vec<RouteCore>>, String>;

/// The routes a core was given lately, by topic, each with when it came (by the broker's
/// clock). Only routes are kept: that no broker serves a topic is asked again each time
/// (it may be created a moment later), and so is a NameServer that did not answer.
#[derive(Debug, Default)]
pub struct RouteCache {
    entries: RefCell<HashMap<String, (Instant, Vec<RouteCore>)>>,
    /// The asks under way, by topic: as many as requests are being served at most.
    asking: RefCell<HashMap<String, Rc<Asking>>>,
}

/// An ask of the NameServers under way, whose answer the requests for the same topic that
/// came meanwhile share.
#[derive(Debug, Default)]
struct Asking {
    /// Set once the ask ended: its answer, or `None` when it was dropped unanswered (its
    /// request went away).
    answer: RefCell<Option<Option<RouteAnswer>>>,
    waiting: RefCell<Vec<Waker>>,
}

impl Asking {
    fn end(&self, answer: Option<RouteAnswer>) {
        *self.answer.borrow_mut() = Some(answer);
        for w in self.waiting.borrow_mut().drain(..) {
            w.wake();
        }
    }

    /// The ask's answer once it ended (`None`: it ended without one).
    async fn wait(&self) -> Option<RouteAnswer> {
        std::future::poll_fn(|cx| match &*self.answer.borrow() {
            Some(answer) => Poll::Ready(answer.clone()),
            None => {
                self.waiting.borrow_mut().push(cx.waker().clone());
                Poll::Pending
            }
        })
        .await
    }
}

/// Ends an ask however its request ends (answered or dropped), so that no request waits
/// for an answer that will not come.
struct AskUnderWay<'a> {
    cache: &'a RouteCache,
    topic: &'a str,
    asking: Rc<Asking>,
}

impl Drop for AskUnderWay<'_> {
    fn drop(&mut self) {
        self.cache.asking.borrow_mut().remove(self.topic);
        if self.asking.answer.borrow().is_none() {
            self.asking.end(None);
        }
    }
}

impl RouteCache {
    /// The route of `topic` if it came less than [`ROUTE_CACHE_TTL`] before `now`.
    fn get(&self, topic: &str, now: Instant) -> Option<Vec<RouteCore>> {
        let entries = self.entries.borrow();
        let (at, cores) = entries.get(topic)?;
        (now.saturating_duration_since(*at) < ROUTE_CACHE_TTL).then(|| cores.clone())
    }

    /// Keeps `cores` as the route of `topic` at `now`, making room when full: the stale
    /// routes go first, then the oldest.
    fn put(&self, topic: &str, now: Instant, cores: Vec<RouteCore>) {
        let mut entries = self.entries.borrow_mut();
        if entries.len() >= ROUTE_CACHE_ENTRIES_MAX && !entries.contains_key(topic) {
            entries.retain(|_, (at, _)| now.saturating_duration_since(*at) < ROUTE_CACHE_TTL);
            if entries.len() >= ROUTE_CACHE_ENTRIES_MAX {
                let oldest = entries
                    .iter()
                    .min_by_key(|(_, (at, _))| *at)
                    .map(|(t, _)| t.clone());
                if let Some(t) = oldest {
                    entries.remove(&t);
                }
            }
        }
        entries.insert(topic.to_owned(), (now, cores));
        debug_assert!(entries.len() <= ROUTE_CACHE_ENTRIES_MAX);
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.entries.borrow().len()
    }

    #[cfg(test)]
    fn asks_under_way(&self) -> usize {
        self.asking.borrow().len()
    }
}

/// The route of `topic` from `cache` while fresh by `clock`, else the answer of an ask for
/// it under way, else from `ask`, kept when it names brokers.
async fn cached<F, Fut>(cache: &RouteCache, clock: &Clock, topic: &str, ask: F) -> RouteAnswer
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = RouteAnswer>,
{
    if let Some(cores) = cache.get(topic, clock.now()) {
        return Ok(Some(cores));
    }
    let under_way = cache.asking.borrow().get(topic).cloned();
    if let Some(asking) = under_way {
        if let Some(answer) = asking.wait().await {
            return answer;
        }
        // The ask's request went away before its answer came: this one asks on its own.
        return ask_and_keep(cache, clock, topic, ask).await;
    }
    let asking = Rc::new(Asking::default());
    cache
        .asking
        .borrow_mut()
        .insert(topic.to_owned(), asking.clone());
    let under_way = AskUnderWay {
        cache,
        topic,
        asking,
    };
    let answer = ask_and_keep(cache, clock, topic, ask).await;
    under_way.asking.end(Some(answer.clone()));
    answer
}

async fn ask_and_keep<F, Fut>(cache: &RouteCache, clock: &Clock, topic: &str, ask: F) -> RouteAnswer
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = RouteAnswer>,
{
    let answer = ask().await?;
    if let Some(cores) = &answer {
        cache.put(topic, clock.now(), cores.clone());
    }
    Ok(answer)
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_lite::future;
    use std::cell::Cell;

    fn core_of(broker: &str) -> RouteCore {
        RouteCore {
            broker: broker.into(),
            broker_name: format!("{broker}-0"),
            addr: "127.0.0.1:10911".into(),
            read_queues: 4,
            write_queues: 4,
            perm: protocol::perm::READ_WRITE,
        }
    }

    /// Asks through the cache, counting the asks that reached the "NameServer".
    fn route(
        cache: &RouteCache,
        clock: &Clock,
        topic: &str,
        answer: Result<Option<Vec<RouteCore>>, String>,
        asks: &Cell<u32>,
    ) -> Result<Option<Vec<RouteCore>>, String> {
        future::block_on(cached(cache, clock, topic, || async move {
            asks.set(asks.get() + 1);
            answer
        }))
    }

    fn brokers(answer: &Result<Option<Vec<RouteCore>>, String>) -> Vec<String> {
        match answer {
            Ok(Some(cores)) => cores.iter().map(|c| c.broker.clone()).collect(),
            _ => Vec::new(),
        }
    }

    #[test]
    fn a_route_is_asked_once_while_fresh_and_again_once_it_is_stale() {
        let (cache, clock, asks) = (RouteCache::default(), Clock::manual(), Cell::new(0));
        let first = route(&cache, &clock, "T", Ok(Some(vec![core_of("a")])), &asks);
        assert_eq!(brokers(&first), ["a"]);
        for _ in 0..100 {
            let again = route(&cache, &clock, "T", Ok(Some(vec![core_of("b")])), &asks);
            assert_eq!(brokers(&again), ["a"], "answered from the cache");
        }
        assert_eq!(asks.get(), 1);
        clock.advance(ROUTE_CACHE_TTL - Duration::from_millis(1));
        let fresh = route(&cache, &clock, "T", Ok(Some(vec![core_of("b")])), &asks);
        assert_eq!((brokers(&fresh), asks.get()), (vec!["a".to_owned()], 1));
        clock.advance(Duration::from_millis(1));
        let renewed = route(&cache, &clock, "T", Ok(Some(vec![core_of("b")])), &asks);
        assert_eq!(brokers(&renewed), ["b"], "a broker that joined is seen");
        assert_eq!(asks.get(), 2);
        let other = route(&cache, &clock, "U", Ok(Some(vec![core_of("c")])), &asks);
        assert_eq!((brokers(&other), asks.get()), (vec!["c".to_owned()], 3));
    }

    #[test]
    fn no_route_and_no_answer_are_asked_again_each_time() {
        let (cache, clock, asks) = (RouteCache::default(), Clock::manual(), Cell::new(0));
        assert_eq!(route(&cache, &clock, "T", Ok(None), &asks), Ok(None));
        assert!(route(&cache, &clock, "T", Err("down".into()), &asks).is_err());
        let created = route(&cache, &clock, "T", Ok(Some(vec![core_of("a")])), &asks);
        assert_eq!(
            brokers(&created),
            ["a"],
            "a topic created meanwhile is found at once"
        );
        assert_eq!(asks.get(), 3);
    }

    #[test]
    fn the_cache_keeps_at_most_its_bound_and_forgets_the_oldest_first() {
        let (cache, clock, asks) = (RouteCache::default(), Clock::manual(), Cell::new(0));
        for i in 0..ROUTE_CACHE_ENTRIES_MAX + 10 {
            clock.advance(Duration::from_micros(1));
            let topic = format!("T{i}");
            route(&cache, &clock, &topic, Ok(Some(vec![core_of("a")])), &asks).ok();
        }
        assert_eq!(cache.len(), ROUTE_CACHE_ENTRIES_MAX);
        let n = ROUTE_CACHE_ENTRIES_MAX + 10;
        assert_eq!(asks.get() as usize, n);
        // The newest are still kept; the first ones were forgotten.
        route(&cache, &clock, &format!("T{}", n - 1), Ok(None), &asks).ok();
        assert_eq!(asks.get() as usize, n);
        route(&cache, &clock, "T0", Ok(None), &asks).ok();
        assert_eq!(asks.get() as usize, n + 1);
    }

    /// An ask that answers `answer` on its second poll, counting itself in `asks`.
    fn slow_ask<'a>(
        answer: RouteAnswer,
        asks: &'a Cell<u32>,
    ) -> impl FnOnce() -> std::pin::Pin<Box<dyn Future<Output = RouteAnswer>>> + 'a {
        move || {
            asks.set(asks.get() + 1);
            Box::pin(async move {
                future::yield_now().await;
                answer
            })
        }
    }

    #[test]
    fn requests_that_come_while_a_route_is_asked_for_share_its_answer() {
        let (cache, clock, asks) = (RouteCache::default(), Clock::manual(), Cell::new(0));
        let a = || Ok(Some(vec![core_of("a")]));
        let (first, (second, third)) = future::block_on(future::zip(
            cached(&cache, &clock, "T", slow_ask(a(), &asks)),
            future::zip(
                cached(&cache, &clock, "T", slow_ask(a(), &asks)),
                cached(&cache, &clock, "T", slow_ask(a(), &asks)),
            ),
        ));
        assert_eq!(asks.get(), 1, "one ask for three requests");
        for answer in [&first, &second, &third] {
            assert_eq!(brokers(answer), ["a"]);
        }
        // A failed ask is shared too, and not kept.
        let (down, down_too) = future::block_on(future::zip(
            cached(&cache, &clock, "U", slow_ask(Err("down".into()), &asks)),
            cached(&cache, &clock, "U", slow_ask(Err("down".into()), &asks)),
        ));
        assert!(down.is_err() && down_too.is_err());
        assert_eq!((asks.get(), cache.asks_under_way()), (2, 0));
    }

    #[test]
    fn a_request_whose_ask_went_away_unanswered_asks_on_its_own() {
        let (cache, clock, asks) = (RouteCache::default(), Clock::manual(), Cell::new(0));
        let mut asker = Box::pin(cached(&cache, &clock, "T", slow_ask(Ok(None), &asks)));
        let mut waiter = Box::pin(cached(
            &cache,
            &clock,
            "T",
            slow_ask(Ok(Some(vec![core_of("b")])), &asks),
        ));
        assert!(future::block_on(future::poll_once(&mut asker)).is_none());
        assert!(future::block_on(future::poll_once(&mut waiter)).is_none());
        assert_eq!(
            asks.get(),
            1,
            "the second request waits for the first one's ask"
        );
        drop(asker);
        assert_eq!(cache.asks_under_way(), 0);
        let answer = future::block_on(waiter);
        assert_eq!(brokers(&answer), ["b"]);
        assert_eq!(asks.get(), 2);
    }
}
