//! A topic's route across the cluster, for the answers that speak for every broker of it
//! (the remoting QUERY_ASSIGNMENT, the gRPC QueryRoute and QueryAssignment): the
//! NameServer's, as RocketMQ's broker and Proxy ask theirs. Asked on the blocking pool, so
//! the core keeps serving meanwhile, and kept by each core for [`ROUTE_CACHE_TTL`] (as
//! RocketMQ's Proxy keeps its routes in a cache), so that clients asking for their
//! assignment or route under load do not open a NameServer connection each.

use std::cell::RefCell;
use std::collections::HashMap;
use std::future::Future;
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

/// The routes a core was given lately, by topic, each with when it came (by the broker's
/// clock). Only routes are kept: that no broker serves a topic is asked again each time
/// (it may be created a moment later), and so is a NameServer that did not answer.
#[derive(Debug, Default)]
pub struct RouteCache {
    entries: RefCell<HashMap<String, (Instant, Vec<RouteCore>)>>,
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
}

/// The route of `topic` from `cache` while fresh by `clock`, else from `ask`, kept when it
/// names brokers.
async fn cached<F, Fut>(
    cache: &RouteCache,
    clock: &Clock,
    topic: &str,
    ask: F,
) -> Result<Option<Vec<RouteCore>>, String>
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = Result<Option<Vec<RouteCore>>, String>>,
{
    if let Some(cores) = cache.get(topic, clock.now()) {
        return Ok(Some(cores));
    }
    let answer = ask().await?;
    if let Some(cores) = &answer {
        cache.put(topic, clock.now(), cores.clone());
    }
    Ok(answer)
}

#[cfg(test)]
mod tests {
    use super::*;
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
        futures_lite::future::block_on(cached(cache, clock, topic, || async move {
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
}
