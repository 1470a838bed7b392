//! Quotas: the rules (the `quotas` config key), the token bucket each core keeps per rule,
//! and how a process-wide limit is shared out among the cores. Pure: no clock of its own
//! (callers pass the time), no I/O; the per-core state and the exchange of shares over the
//! mesh live in `broker_core::quota`.
//!
//! A rule is `<scope>:<name>:<limit>=<value>`, rules separated by `,` or `;`:
//!
//! * scope `account` (an ACL access key; requests with none count as account `anonymous`),
//!   `topic`, or `group` (a consumer group, or a producer group for sends);
//! * limit `send_messages_per_sec`, `send_bytes_per_sec` (sends, counted in messages and
//!   body bytes), `pulls_per_sec` (pull and pop requests), or, for an account,
//!   `requests_per_sec` (every request it makes on any protocol: sends and pulls, and
//!   also heartbeats, offset queries and commits, lookups, admin requests) and
//!   `connections` (open at once, counted from each connection's first send or pull).
//!
//! For example `account:tenant-a:send_messages_per_sec=5000, topic:Orders:send_bytes_per_sec=10485760`.
//! A limit holds for the broker process as a whole: each core enforces a share of it, and
//! the shares follow where the demand is (see [`shares`]).

use std::fmt;
use std::time::{Duration, Instant};

/// Who a rule limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scope {
    Account,
    Topic,
    Group,
}

/// What a rule limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Limit {
    SendMessages,
    SendBytes,
    Pulls,
    /// Requests of an account, of any kind.
    Requests,
    /// Connections of an account open at once (counted from a connection's first send or
    /// pull, when its account is known).
    Connections,
}

impl Scope {
    const ALL: [(Scope, &'static str); 3] = [
        (Scope::Account, "account"),
        (Scope::Topic, "topic"),
        (Scope::Group, "group"),
    ];

    pub fn name(self) -> &'static str {
        name_in(&Scope::ALL, self)
    }
}

impl Limit {
    const ALL: [(Limit, &'static str); 5] = [
        (Limit::SendMessages, "send_messages_per_sec"),
        (Limit::SendBytes, "send_bytes_per_sec"),
        (Limit::Pulls, "pulls_per_sec"),
        (Limit::Requests, "requests_per_sec"),
        (Limit::Connections, "connections"),
    ];

    pub fn name(self) -> &'static str {
        name_in(&Limit::ALL, self)
    }

    /// The unit of its value, for remarks.
    pub fn unit(self) -> &'static str {
        match self {
            Limit::SendMessages => "messages/s",
            Limit::SendBytes => "bytes/s",
            Limit::Pulls | Limit::Requests => "requests/s",
            Limit::Connections => "connections",
        }
    }
}

/// The name of `v` in a table of values and names.
fn name_in<T: PartialEq + Copy>(all: &[(T, &'static str)], v: T) -> &'static str {
    all.iter().find(|(x, _)| *x == v).map_or("", |(_, n)| n)
}

/// The value named `name` in a table of values and names.
fn named<T: Copy>(all: &[(T, &'static str)], name: &str) -> Option<T> {
    all.iter().find(|(_, n)| *n == name).map(|(x, _)| *x)
}

/// The account of a request that carries no access key.
pub const ANONYMOUS: &str = "anonymous";

/// One quota rule.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Rule {
    pub scope: Scope,
    pub name: String,
    pub limit: Limit,
    /// Per second (for `connections`: at once), for the whole broker process.
    pub per_sec: u64,
}

impl Rule {
    /// The rule's name as it is set, without its value: the remark's and the metric's.
    pub fn key(&self) -> String {
        format!("{}:{}:{}", self.scope.name(), self.name, self.limit.name())
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}={}", self.key(), self.per_sec)
    }
}

/// Parses the `quotas` key; a rule that is not one says which and why.
pub fn parse_rules(text: &str) -> Result<Vec<Rule>, String> {
    let mut rules: Vec<Rule> = Vec::new();
    for part in text
        .split([',', ';'])
        .map(str::trim)
        .filter(|p| !p.is_empty())
    {
        let bad = |why: &str| {
            format!("quota rule `{part}`: {why} (form: <account|topic|group>:<name>:<send_messages_per_sec|send_bytes_per_sec|pulls_per_sec|requests_per_sec|connections>=<value>)")
        };
        let (lhs, value) = part.split_once('=').ok_or_else(|| bad("no `=`"))?;
        let mut fields = lhs.trim().splitn(3, ':');
        let (Some(scope), Some(name), Some(limit)) = (fields.next(), fields.next(), fields.next())
        else {
            return Err(bad("three `:`-separated fields are needed"));
        };
        let scope = named(&Scope::ALL, scope.trim()).ok_or_else(|| bad("unknown scope"))?;
        let limit = named(&Limit::ALL, limit.trim()).ok_or_else(|| bad("unknown limit"))?;
        let name = name.trim();
        if name.is_empty() {
            return Err(bad("empty name"));
        }
        let per_sec: u64 = value
            .trim()
            .parse()
            .ok()
            .filter(|v| *v > 0)
            .ok_or_else(|| bad("the value must be a whole number above 0"))?;
        let rule = Rule {
            scope,
            name: name.to_owned(),
            limit,
            per_sec,
        };
        if matches!(rule.limit, Limit::Connections | Limit::Requests)
            && rule.scope != Scope::Account
        {
            return Err(bad(&format!(
                "`{}` is a limit of an account",
                rule.limit.name()
            )));
        }
        if rules.iter().any(|r| r.key() == rule.key()) {
            return Err(bad("set twice"));
        }
        rules.push(rule);
    }
    Ok(rules)
}

/// A token bucket: `rate` tokens a second, holding at most `burst`. A request larger than
/// the burst (a large batch) is let through when the bucket is full and leaves it in debt,
/// so it is neither refused for ever nor free.
#[derive(Debug, Clone)]
pub struct Bucket {
    rate_per_sec: f64,
    burst: f64,
    tokens: f64,
    at: Instant,
}

/// How much a bucket holds: this long at its rate.
pub const BURST: Duration = Duration::from_millis(1_000);

impl Bucket {
    pub fn new(rate_per_sec: f64, now: Instant) -> Bucket {
        let burst = rate_per_sec * BURST.as_secs_f64();
        Bucket {
            rate_per_sec,
            burst,
            tokens: burst,
            at: now,
        }
    }

    /// Runs at `rate_per_sec` from now on (the core's share changed); the tokens held stay,
    /// within the new burst.
    pub fn set_rate(&mut self, rate_per_sec: f64, now: Instant) {
        self.refill(now);
        self.rate_per_sec = rate_per_sec;
        self.burst = rate_per_sec * BURST.as_secs_f64();
        self.tokens = self.tokens.min(self.burst);
    }

    pub fn rate_per_sec(&self) -> f64 {
        self.rate_per_sec
    }

    fn refill(&mut self, now: Instant) {
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.rate_per_sec).min(self.burst);
        self.at = now;
    }

    /// Takes `n` tokens, or says in how many ms they would be there.
    pub fn take(&mut self, n: u64, now: Instant) -> Result<(), u64> {
        self.check(n, now)?;
        self.tokens -= n as f64;
        Ok(())
    }

    /// Whether `n` tokens are there now, without taking them; if not, in how many ms they
    /// would be.
    pub fn check(&mut self, n: u64, now: Instant) -> Result<(), u64> {
        self.refill(now);
        let need = (n as f64).min(self.burst);
        if self.tokens >= need && self.tokens > 0.0 {
            return Ok(());
        }
        let wait_sec = if self.rate_per_sec > 0.0 {
            (need.max(1.0) - self.tokens) / self.rate_per_sec
        } else {
            BURST.as_secs_f64()
        };
        Err((wait_sec * 1_000.0).ceil().max(1.0) as u64)
    }
}

/// The share of a process-wide limit each core enforces, from what each asked for lately
/// (`demand[core]`, in the limit's units a second): in proportion to the demand, with every
/// core keeping a floor of `1 / (4 x cores)` of the limit between them so a core whose
/// clients just arrived is not at zero. The shares add up to 1 when every core uses the
/// same demands; cores exchange them over the mesh, so they agree within one exchange.
pub fn shares(demand: &[f64]) -> Vec<f64> {
    let n = demand.len().max(1) as f64;
    let total: f64 = demand.iter().map(|d| d.max(0.0)).sum();
    if total <= 0.0 {
        return vec![1.0 / n; demand.len()];
    }
    let floor = 1.0 / (4.0 * n);
    let rest = 1.0 - floor * n;
    demand
        .iter()
        .map(|d| floor + rest * d.max(0.0) / total)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_parse_and_bad_ones_say_why() {
        let r = parse_rules(
            " account:tenant-a:send_messages_per_sec=5000; topic:Orders:send_bytes_per_sec = 1024 ,group:G:pulls_per_sec=10,",
        )
        .unwrap();
        assert_eq!(r.len(), 3);
        assert_eq!(r[0].key(), "account:tenant-a:send_messages_per_sec");
        assert_eq!(
            (r[1].scope, r[1].limit, r[1].per_sec),
            (Scope::Topic, Limit::SendBytes, 1024)
        );
        assert_eq!(r[2].to_string(), "group:G:pulls_per_sec=10");
        assert!(parse_rules("").unwrap().is_empty());
        for (bad, why) in [
            ("tenant:a:send_messages_per_sec=1", "unknown scope"),
            ("account:a:messages=1", "unknown limit"),
            ("account:a:pulls_per_sec=0", "above 0"),
            ("account:a:pulls_per_sec", "no `=`"),
            ("account::pulls_per_sec=3", "empty name"),
            (
                "topic:T:requests_per_sec=3",
                "`requests_per_sec` is a limit of an account",
            ),
            (
                "group:G:connections=3",
                "`connections` is a limit of an account",
            ),
            (
                "account:a:pulls_per_sec=1,account:a:pulls_per_sec=2",
                "set twice",
            ),
        ] {
            let e = parse_rules(bad).unwrap_err();
            assert!(e.contains(why), "{bad}: {e}");
        }
    }

    #[test]
    fn a_bucket_lets_its_rate_through_and_says_when_to_retry() {
        let t0 = Instant::now();
        let mut b = Bucket::new(100.0, t0);
        // A second's burst, then refusals with the wait for one more token.
        assert!((0..100).all(|_| b.take(1, t0).is_ok()));
        let wait = b.take(1, t0).unwrap_err();
        assert_eq!(wait, 10);
        // 100 ms later: 10 more.
        let t1 = t0 + Duration::from_millis(100);
        assert!((0..10).all(|_| b.take(1, t1).is_ok()));
        assert!(b.take(1, t1).is_err());
        // A batch larger than the burst goes through a full bucket and leaves it in debt.
        let t2 = t1 + Duration::from_secs(5);
        assert!(b.take(250, t2).is_ok());
        let wait = b.take(1, t2).unwrap_err();
        assert_eq!(wait, 1_510, "150 tokens of debt and one more at 100/s");
        // A lower share keeps at most its new burst.
        let t3 = t2 + Duration::from_secs(10);
        b.set_rate(10.0, t3);
        assert!((0..10).all(|_| b.take(1, t3).is_ok()));
        assert!(b.take(1, t3).is_err());
    }

    #[test]
    fn shares_follow_demand_keep_a_floor_and_add_up_to_one() {
        let s = shares(&[0.0, 0.0]);
        assert_eq!(s, vec![0.5, 0.5]);
        let s = shares(&[300.0, 0.0, 100.0, 0.0]);
        let sum: f64 = s.iter().sum();
        assert!((sum - 1.0).abs() < 1e-9, "{s:?}");
        assert!(s[0] > s[2] && s[2] > s[1], "{s:?}");
        assert!((s[1] - 1.0 / 16.0).abs() < 1e-9, "the floor: {s:?}");
        assert_eq!(shares(&[5.0]), vec![1.0]);
    }
}
