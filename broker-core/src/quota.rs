//! One core's quota state: a token bucket per rule of the `quotas` key
//! (`broker_base::quota`), checked by the front ends before a request does any work, and
//! the exchange that keeps a process-wide limit process-wide without a shared lock.
//!
//! Each core enforces a share of every limit. Every [`EXCHANGE_INTERVAL`] a core tells
//! every other core, over the mesh ([`QuotaDemand`]), how much of each rule its clients asked
//! for lately (refused requests included); each core then sets its buckets' rates to its
//! share of the limit by demand (`broker_base::quota::shares`). A tenant whose connections
//! all land on one core gets nearly the whole limit there within one exchange, and the
//! shares of all cores add up to the limit.

use std::cell::RefCell;
use std::collections::HashMap;
use std::time::{Duration, Instant};

use broker_base::config::BrokerConfig;
use broker_base::error::{BrokerError, QuotaExceeded};
use broker_base::quota::{parse_rules, shares, Bucket, Limit, Rule, Scope};

use crate::core::Core;
use crate::mesh::QuotaDemand;

/// How often the cores exchange their demand and set their shares.
pub const EXCHANGE_INTERVAL: Duration = Duration::from_millis(100);

/// When a connection over its account's quota may try again: a slot frees up when one of
/// the account's connections closes, which the broker cannot foresee.
const CONNECTION_RETRY_AFTER_MS: u64 = 1_000;

/// What a request asks for, as the quotas see it.
#[derive(Debug, Clone, Copy)]
pub enum Ask<'a> {
    /// A send of `messages` messages of `bytes` body bytes to `topic` by producer `group`.
    Send {
        account: &'a str,
        topic: &'a str,
        group: &'a str,
        messages: u64,
        bytes: u64,
    },
    /// A pull or pop of `topic` by consumer `group`.
    Pull {
        account: &'a str,
        topic: &'a str,
        group: &'a str,
    },
    /// Any other request (a heartbeat, an offset query or commit, a lookup, an admin
    /// request): only an account's `requests_per_sec` counts it.
    Other { account: &'a str },
}

impl Ask<'_> {
    /// How much of `rule` this request takes, if the rule applies to it.
    fn amount(&self, rule: &Rule) -> Option<u64> {
        let (account, topic, group) = match *self {
            Ask::Send {
                account,
                topic,
                group,
                ..
            }
            | Ask::Pull {
                account,
                topic,
                group,
            } => (account, topic, group),
            Ask::Other { account } => (account, "", ""),
        };
        let who = match rule.scope {
            Scope::Account => account,
            Scope::Topic => topic,
            Scope::Group => group,
        };
        if who != rule.name {
            return None;
        }
        match (rule.limit, self) {
            (Limit::SendMessages, Ask::Send { messages, .. }) => Some(*messages),
            (Limit::SendBytes, Ask::Send { bytes, .. }) => Some(*bytes),
            (Limit::Pulls, Ask::Pull { .. }) => Some(1),
            (Limit::Requests, _) => Some(1),
            _ => None,
        }
    }
}

/// One rule on this core.
struct Kept {
    rule: Rule,
    key: String,
    bucket: Bucket,
    /// Asked since the last exchange (refused requests included).
    asked: u64,
    /// Each core's recent demand, per second (this core's own included; for
    /// `connections`, the connections open and asked for).
    demand: Vec<f64>,
    /// This core's share of the limit.
    share: f64,
}

#[derive(Default)]
struct State {
    /// The `quotas` text the rules were made from.
    text: String,
    rules: Vec<Kept>,
}

/// One core's quotas.
pub struct Quotas {
    core: u16,
    cores: u16,
    state: RefCell<State>,
    /// Connections open on this core per account, rules or not (so that a rule set later
    /// counts the connections already open).
    open: RefCell<HashMap<String, u64>>,
}

impl Quotas {
    pub fn new(core: u16, cores: u16) -> Quotas {
        Quotas {
            core,
            cores: cores.max(1),
            state: RefCell::default(),
            open: RefCell::default(),
        }
    }

    /// Takes the rules of `cfg` when they changed: new rules start at an even share.
    fn follow(&self, cfg: &BrokerConfig, now: Instant) {
        let mut st = self.state.borrow_mut();
        if st.text == cfg.quotas {
            return;
        }
        // Validated at start and at every change, so a failure here keeps no rules.
        let rules = parse_rules(&cfg.quotas).unwrap_or_default();
        let n = f64::from(self.cores);
        st.rules = rules
            .into_iter()
            .map(|rule| Kept {
                key: rule.key(),
                bucket: Bucket::new(rule.per_sec as f64 / n, now),
                asked: 0,
                demand: vec![0.0; usize::from(self.cores)],
                share: 1.0 / n,
                rule,
            })
            .collect();
        st.text = cfg.quotas.clone();
    }

    /// Whether any quota applies (configured, or kept from before a change): when none
    /// does, [`Quotas::admit`] lets everything through without reading the clock.
    pub fn enforcing(&self, cfg: &BrokerConfig) -> bool {
        !cfg.quotas.is_empty() || !self.state.borrow().rules.is_empty()
    }

    /// Lets `ask` through, or refuses it with the first rule it is over, its value and
    /// when to retry. A refused ask takes nothing from any rule: every rule it falls under
    /// is checked before any is charged.
    pub fn admit(
        &self,
        ask: &Ask<'_>,
        cfg: &BrokerConfig,
        now: Instant,
    ) -> Result<(), BrokerError> {
        if !self.enforcing(cfg) {
            return Ok(());
        }
        self.follow(cfg, now);
        let mut st = self.state.borrow_mut();
        for kept in st.rules.iter_mut() {
            let Some(amount) = ask.amount(&kept.rule) else {
                continue;
            };
            kept.asked = kept.asked.saturating_add(amount);
            if let Err(retry_after_ms) = kept.bucket.check(amount, now) {
                return Err(BrokerError::quota(QuotaExceeded {
                    limit: kept.key.clone(),
                    value: format!("{} {}", kept.rule.per_sec, kept.rule.limit.unit()),
                    who: format!("{} `{}`", kept.rule.scope.name(), kept.rule.name),
                    retry_after_ms,
                }));
            }
        }
        for kept in st.rules.iter_mut() {
            if let Some(amount) = ask.amount(&kept.rule) {
                // Checked just above, at the same instant: there.
                let _ = kept.bucket.take(amount, now);
            }
        }
        Ok(())
    }

    /// Counts a connection of `account` (at its first send or pull), or refuses it with
    /// the account's `connections` rule when this core holds its share of them.
    pub fn connect(
        &self,
        account: &str,
        cfg: &BrokerConfig,
        now: Instant,
    ) -> Result<(), BrokerError> {
        let open = self.open.borrow().get(account).copied().unwrap_or(0);
        if !cfg.quotas.is_empty() {
            self.follow(cfg, now);
            let mut st = self.state.borrow_mut();
            let rules = st
                .rules
                .iter_mut()
                .filter(|k| k.rule.limit == Limit::Connections && k.rule.name == account);
            for kept in rules {
                kept.asked += 1;
                let here_max = (kept.rule.per_sec as f64 * kept.share).floor().max(1.0) as u64;
                if open >= here_max {
                    return Err(BrokerError::quota(QuotaExceeded {
                        limit: kept.key.clone(),
                        value: format!("{} {}", kept.rule.per_sec, kept.rule.limit.unit()),
                        who: format!("account `{account}` ({open} open on this core)"),
                        retry_after_ms: CONNECTION_RETRY_AFTER_MS,
                    }));
                }
            }
        }
        *self
            .open
            .borrow_mut()
            .entry(account.to_owned())
            .or_insert(0) += 1;
        Ok(())
    }

    /// A connection [`Quotas::connect`] counted has closed.
    pub fn disconnect(&self, account: &str) {
        let mut open = self.open.borrow_mut();
        if let Some(n) = open.get_mut(account) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                open.remove(account);
            }
        }
    }

    /// This core's demand per rule since the last exchange (per second over `period`),
    /// kept as its own, for the other cores.
    fn own_demand(&self, period: Duration) -> QuotaDemand {
        let mut st = self.state.borrow_mut();
        let secs = period.as_secs_f64().max(1e-3);
        let core = usize::from(self.core);
        let demands = st
            .rules
            .iter_mut()
            .map(|k| {
                let now = match k.rule.limit {
                    Limit::Connections => {
                        let open = self.open.borrow().get(&k.rule.name).copied().unwrap_or(0);
                        (open + k.asked) as f64
                    }
                    _ => k.asked as f64 / secs,
                };
                k.asked = 0;
                // Smoothed: a core's share does not swing with one quiet interval.
                let d = 0.5 * k.demand[core] + 0.5 * now;
                k.demand[core] = d;
                (k.key.clone(), d)
            })
            .collect();
        QuotaDemand {
            from: self.core,
            text: st.text.clone(),
            demands,
        }
    }

    /// Takes another core's demand (ignored when it runs other rules: a change is on its
    /// way to every core).
    pub fn took_demand(&self, d: &QuotaDemand) {
        let mut st = self.state.borrow_mut();
        if st.text != d.text {
            return;
        }
        let from = usize::from(d.from);
        for (key, demand) in &d.demands {
            if let Some(k) = st.rules.iter_mut().find(|k| &k.key == key) {
                if let Some(slot) = k.demand.get_mut(from) {
                    *slot = *demand;
                }
            }
        }
    }

    /// Sets each bucket's rate to this core's share of its limit.
    fn rebalance(&self, now: Instant) {
        let mut st = self.state.borrow_mut();
        let core = usize::from(self.core);
        for k in st.rules.iter_mut() {
            k.share = shares(&k.demand).get(core).copied().unwrap_or(0.0);
            k.bucket.set_rate(k.rule.per_sec as f64 * k.share, now);
        }
    }

    /// This core's rate for the rule named `key` (per second), if it has the rule.
    pub fn rate_of(&self, key: &str) -> Option<f64> {
        let st = self.state.borrow();
        st.rules
            .iter()
            .find(|k| k.key == key)
            .map(|k| k.bucket.rate_per_sec())
    }
}

/// Every [`EXCHANGE_INTERVAL`], for good: this core's demand to every other core, and its
/// shares set from what they all said. Nothing to do without rules or with one core.
pub async fn exchange(core: std::rc::Rc<Core>) {
    let mut last = Instant::now();
    loop {
        glommio::timer::sleep(EXCHANGE_INTERVAL).await;
        let cfg = core.config();
        if cfg.quotas.is_empty() || core.shared.cores < 2 {
            continue;
        }
        let now = Instant::now();
        core.quotas.follow(&cfg, now);
        let demand = core.quotas.own_demand(now.saturating_duration_since(last));
        last = now;
        for peer in (0..core.shared.cores).filter(|&c| c != core.id) {
            // A full inbox skips one exchange: the shares stay as they are until the next.
            let _ = core.at_core(peer, demand.clone()).await;
        }
        core.quotas.rebalance(Instant::now());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(quotas: &str) -> BrokerConfig {
        BrokerConfig {
            quotas: quotas.into(),
            ..BrokerConfig::default()
        }
    }

    fn send<'a>(account: &'a str, messages: u64) -> Ask<'a> {
        Ask::Send {
            account,
            topic: "T",
            group: "P",
            messages,
            bytes: messages * 100,
        }
    }

    #[test]
    fn an_account_over_its_quota_is_refused_with_the_rule_and_others_are_not() {
        let q = Quotas::new(0, 1);
        let c = cfg("account:noisy:send_messages_per_sec=50");
        let t0 = Instant::now();
        assert!((0..50).all(|_| q.admit(&send("noisy", 1), &c, t0).is_ok()));
        let e = q.admit(&send("noisy", 1), &c, t0).unwrap_err();
        let text = e.to_string();
        assert!(
            text.contains("account:noisy:send_messages_per_sec = 50 messages/s"),
            "{text}"
        );
        assert_eq!(e.retry_after_ms(), Some(20));
        assert_eq!(e.code(), protocol::ResponseCode::FlowControl);
        // Another account, and pulls of the same one, are not limited by it.
        assert!((0..500).all(|_| q.admit(&send("calm", 1), &c, t0).is_ok()));
        let pull = Ask::Pull {
            account: "noisy",
            topic: "T",
            group: "C",
        };
        assert!(q.admit(&pull, &c, t0).is_ok());
        // Without rules, everything passes; a change of the rules applies at once.
        let none = cfg("");
        assert!(q.admit(&send("noisy", 1_000), &none, t0).is_ok());
        let bytes = cfg("topic:T:send_bytes_per_sec=1000");
        assert!(q.admit(&send("x", 10), &bytes, t0).is_ok());
        assert!(q.admit(&send("x", 1), &bytes, t0).is_err());
    }

    #[test]
    fn a_send_refused_by_one_rule_takes_nothing_from_the_others() {
        let q = Quotas::new(0, 1);
        let c = cfg("account:a:send_messages_per_sec=10,topic:T:send_messages_per_sec=5");
        let t0 = Instant::now();
        assert!((0..5).all(|_| q.admit(&send("a", 1), &c, t0).is_ok()));
        // The topic's rule refuses these; the account's tokens stay.
        for _ in 0..20 {
            let e = q.admit(&send("a", 1), &c, t0).unwrap_err();
            assert!(e.to_string().contains("topic:T:"), "{e}");
        }
        // The account still has 5 of its 10 for another topic.
        let other = |n| Ask::Send {
            account: "a",
            topic: "U",
            group: "P",
            messages: n,
            bytes: n * 100,
        };
        assert!((0..5).all(|_| q.admit(&other(1), &c, t0).is_ok()));
        let e = q.admit(&other(1), &c, t0).unwrap_err();
        assert!(e.to_string().contains("account:a:"), "{e}");
    }

    #[test]
    fn an_accounts_requests_of_every_kind_count_against_its_requests_per_sec() {
        let q = Quotas::new(0, 1);
        let c = cfg("account:busy:requests_per_sec=30,account:busy:send_messages_per_sec=1000");
        let t0 = Instant::now();
        let other = |account| Ask::Other { account };
        let pull = Ask::Pull {
            account: "busy",
            topic: "T",
            group: "C",
        };
        // Ten of each kind: the 30 of a second's burst.
        for _ in 0..10 {
            assert!(q.admit(&other("busy"), &c, t0).is_ok());
            assert!(q.admit(&send("busy", 5), &c, t0).is_ok());
            assert!(q.admit(&pull, &c, t0).is_ok());
        }
        for ask in [other("busy"), send("busy", 1), pull] {
            let e = q.admit(&ask, &c, t0).unwrap_err();
            let text = e.to_string();
            assert!(
                text.contains("account:busy:requests_per_sec = 30 requests/s"),
                "{ask:?}: {text}"
            );
            assert_eq!(e.code(), protocol::ResponseCode::FlowControl);
            assert_eq!(e.retry_after_ms(), Some(34), "one request at 30/s");
        }
        // A second later the account's requests are let through again.
        let t1 = t0 + Duration::from_secs(1);
        assert!(q.admit(&other("busy"), &c, t1).is_ok());
        // Other accounts are not limited, and a send or pull rule leaves other requests be.
        assert!((0..500).all(|_| q.admit(&other("calm"), &c, t0).is_ok()));
        let sends_only = cfg("account:busy:send_messages_per_sec=1");
        assert!((0..500).all(|_| q.admit(&other("busy"), &sends_only, t0).is_ok()));
    }

    #[test]
    fn an_account_holds_at_most_its_connections_and_a_close_makes_room() {
        let q = Quotas::new(0, 1);
        let c = cfg("account:a:connections=2");
        let t0 = Instant::now();
        assert!(q.connect("a", &c, t0).is_ok() && q.connect("a", &c, t0).is_ok());
        let e = q.connect("a", &c, t0).unwrap_err();
        assert!(
            e.to_string()
                .contains("account:a:connections = 2 connections"),
            "{e}"
        );
        assert!(
            q.connect("b", &c, t0).is_ok(),
            "another account is not limited"
        );
        q.disconnect("a");
        assert!(q.connect("a", &c, t0).is_ok());
        // Counted without a rule too: a rule set later sees the connections open.
        let q = Quotas::new(0, 1);
        assert!(q.connect("a", &cfg(""), t0).is_ok());
        assert!(q.connect("a", &cfg("account:a:connections=1"), t0).is_err());
    }

    /// Two cores: the one whose clients ask gets nearly all of the limit after one exchange,
    /// and the two rates add up to the limit.
    #[test]
    fn shares_follow_the_demand_exchanged_between_cores() {
        let c = cfg("group:G:pulls_per_sec=1000");
        let t0 = Instant::now();
        let (a, b) = (Quotas::new(0, 2), Quotas::new(1, 2));
        let pull = Ask::Pull {
            account: "any",
            topic: "T",
            group: "G",
        };
        // Core 0 starts at half: 500 in its burst, then refusals.
        let passed = (0..2_000)
            .filter(|_| a.admit(&pull, &c, t0).is_ok())
            .count();
        assert_eq!(passed, 500);
        b.follow(&c, t0);
        let period = Duration::from_millis(100);
        let (da, db) = (a.own_demand(period), b.own_demand(period));
        a.took_demand(&db);
        b.took_demand(&da);
        a.rebalance(t0);
        b.rebalance(t0);
        let (ra, rb) = (
            a.rate_of("group:G:pulls_per_sec").unwrap(),
            b.rate_of("group:G:pulls_per_sec").unwrap(),
        );
        assert!((ra + rb - 1000.0).abs() < 1e-6, "{ra} + {rb}");
        assert!(ra >= 870.0 && rb <= 130.0, "{ra} / {rb}");
        // A demand from other rules (a change on its way) is ignored.
        let stale = QuotaDemand {
            from: 1,
            text: "group:G:pulls_per_sec=5".into(),
            demands: vec![("group:G:pulls_per_sec".into(), 1e9)],
        };
        a.took_demand(&stale);
        a.rebalance(t0);
        assert!((a.rate_of("group:G:pulls_per_sec").unwrap() - ra).abs() < 1e-6);
    }
}
