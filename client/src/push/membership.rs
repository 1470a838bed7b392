//! Membership: the heartbeats to every broker of the topics, each broker's view of the
//! group, and the watches that learn of a change at once.

use std::collections::BTreeSet;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use protocol::ConsumerHeartbeat;

use super::{lock, MessageModel, PushInner, ERROR_BACKOFF_MS, STOP_CHECK_MS};
use crate::error::{ClientError, Result};

/// Membership as one broker sees it.
pub(super) type View = protocol::GroupMembers;

/// Longest `WaitGroupChange` long poll.
const WATCH_WAIT_MS: u64 = 10_000;

impl PushInner {
    pub(super) fn heartbeat_all(&self) {
        let hb = ConsumerHeartbeat {
            group: self.settings.group.clone(),
            client_id: self.client_id.clone(),
            topics: self.topics(),
            broadcasting: self.settings.model == MessageModel::Broadcasting,
        };
        let mut changed = false;
        for addr in self.group_addrs() {
            match self.pull.inst.heartbeat(&addr, hb.clone()) {
                Ok(view) => changed |= self.update_view(&addr, view),
                Err(e) => {
                    tracing::warn!(%addr, error = %e, "heartbeat failed");
                    // The broker may be back elsewhere: the next beat goes by a fresh route.
                    for topic in &hb.topics {
                        self.pull.inst.note_failure(topic, &e);
                    }
                }
            }
        }
        if changed {
            self.kick();
        }
    }

    /// Starts a membership watch for each broker address of the routes that has none
    /// (clustering only); one whose address left the routes ends by itself.
    pub(super) fn ensure_watches(self: &Arc<Self>) -> Result<()> {
        if self.settings.model != MessageModel::Clustering || self.stopped() {
            return Ok(());
        }
        let mut threads = lock(&self.watch_threads);
        threads.retain(|t| !t.is_finished());
        for addr in self.group_addrs() {
            if !lock(&self.watched).insert(addr.clone()) {
                continue;
            }
            let me = Arc::clone(self);
            let watch_addr = addr.clone();
            let spawned = thread::Builder::new()
                .name("mq-watch".into())
                .spawn(move || me.watch_loop(watch_addr));
            match spawned {
                Ok(h) => threads.push(h),
                Err(e) => {
                    lock(&self.watched).remove(&addr);
                    return Err(ClientError::io("push consumer", &e));
                }
            }
        }
        Ok(())
    }

    /// Records a broker's membership view; true if it changed.
    fn update_view(&self, addr: &str, view: View) -> bool {
        if !view.retry_delay_levels_ms.is_empty() {
            *lock(&self.retry_levels_ms) = view.retry_delay_levels_ms.clone();
        }
        let mut views = lock(&self.views);
        let old = views.get(addr);
        let changed = match old {
            Some(o) => o.version != view.version || o.members != view.members,
            None => true,
        };
        views.insert(addr.to_owned(), view);
        changed
    }

    pub(super) fn heartbeat_loop(self: Arc<Self>) {
        let every = Duration::from_millis(self.settings.heartbeat_interval_ms);
        let never = AtomicBool::new(false);
        while self.pause(every, &never) {
            self.heartbeat_all();
            if let Err(e) = self.ensure_watches() {
                tracing::warn!(error = %e, "cannot start a membership watch");
            }
        }
    }

    /// Long-polls one broker for membership changes and triggers a rebalance on each.
    fn watch_loop(self: Arc<Self>, addr: String) {
        let never = AtomicBool::new(false);
        while !self.stopped() {
            if !self.group_addrs().contains(&addr) {
                // The broker is elsewhere now: its new address has a watch of its own.
                lock(&self.watched).remove(&addr);
                return;
            }
            let known = lock(&self.views).get(&addr).map_or(0, |v| v.version);
            let wait = Duration::from_millis(WATCH_WAIT_MS);
            let fut =
                match self
                    .pull
                    .inst
                    .wait_group_change(&addr, &self.settings.group, known, wait)
                {
                    Ok(f) => f,
                    Err(e) => {
                        tracing::debug!(%addr, error = %e, "membership watch failed");
                        self.pause(Duration::from_millis(ERROR_BACKOFF_MS), &never);
                        continue;
                    }
                };
            let frame = loop {
                if self.stopped() {
                    return;
                }
                if let Some(f) = fut.wait_for(Duration::from_millis(STOP_CHECK_MS)) {
                    break f;
                }
            };
            match frame.and_then(|f| crate::remoting::expect_success(&addr, f)) {
                Ok(f) => {
                    if let protocol::Command::GroupMembers(view) = f.header.command {
                        if self.update_view(&addr, view) {
                            self.kick();
                        }
                    }
                }
                Err(e) => {
                    tracing::debug!(%addr, error = %e, "membership watch failed");
                    self.pause(Duration::from_millis(ERROR_BACKOFF_MS), &never);
                }
            }
        }
    }

    /// The members every broker reports, with this one (it has just heartbeated).
    pub(super) fn members(&self) -> Vec<String> {
        let mut all: BTreeSet<String> = lock(&self.views)
            .values()
            .flat_map(|v| v.members.iter().cloned())
            .collect();
        all.insert(self.client_id.clone());
        all.into_iter().collect()
    }
}
