//! RocketMQ's broker stats on one core: what Apache RocketMQ's `BrokerStatsManager` keeps and
//! VIEW_BROKER_STATS_DATA (315) answers, so rocketmq-exporter and rocketmq-dashboard read
//! corvus as they read RocketMQ.
//!
//! Seven stats, by RocketMQ's names: `TOPIC_PUT_NUMS` and `TOPIC_PUT_SIZE` (key: the topic),
//! `GROUP_GET_NUMS`, `GROUP_GET_SIZE` and `SNDBCK_PUT_NUMS` (key: `topic@group`),
//! `BROKER_PUT_NUMS` and `BROKER_GET_NUMS` (key: the cluster name). Each is a counter of a
//! value (messages or bytes) and of the calls that added to it (batches), read over three
//! windows as RocketMQ's `StatsItem` reads them: a sample every 10 s, the last 7 kept (the
//! minute); every 10 min, the last 7 (the hour); every hour, the last 25 (the day). A
//! window's `sum` is the value added since its oldest sample, `tps` that sum per second of
//! the time since, `avgpt` the sum per call. RocketMQ reads the window up to its newest
//! sample; corvus reads it up to the live counter, so a send shows at once.
//!
//! Cost on the data path: a count is two map lookups by `&str` and three additions; a key
//! is allocated once, when first counted. The windows of all keys share the sample times,
//! so a key costs its counters only (about 0.6 KiB per stat). Bounded: at most
//! [`TOPIC_KEYS_MAX`] topics and [`GROUP_KEYS_MAX`] topic@group pairs per core; what is
//! counted past the cap goes to the key [`OVERFLOW_KEY`] (`%OVERFLOW%` as the topic, and as
//! the group), so totals stay true while the detail of the newest keys is lost. A key that
//! counted nothing for a whole day window (25 hours) is dropped at the hourly sample, which
//! frees room for new ones.

use broker_base::metrics::SizeCounts;
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// Topics counted per core; the rest are counted under [`OVERFLOW_KEY`].
pub const TOPIC_KEYS_MAX: usize = 10_000;
/// topic@group pairs counted per core; the rest are counted under [`OVERFLOW_KEY`].
pub const GROUP_KEYS_MAX: usize = 10_000;
/// The topic (and group) under which counts past the caps are kept.
pub const OVERFLOW_KEY: &str = "%OVERFLOW%";

/// Seconds between two samples of the minute window (RocketMQ: `samplingInSeconds`).
const MINUTE_STEP: Duration = Duration::from_secs(10);
/// Minute samples per hour sample (10 min) and per day sample (1 h).
const HOUR_EVERY: u64 = 60;
const DAY_EVERY: u64 = 360;

const MINUTE_LEN: usize = 7;
const HOUR_LEN: usize = 7;
const DAY_LEN: usize = 25;
const SLOTS: usize = MINUTE_LEN + HOUR_LEN + DAY_LEN;

/// The names of the stats, as VIEW_BROKER_STATS_DATA's `statsName` spells them.
pub mod name {
    pub const TOPIC_PUT_NUMS: &str = "TOPIC_PUT_NUMS";
    pub const TOPIC_PUT_SIZE: &str = "TOPIC_PUT_SIZE";
    pub const GROUP_GET_NUMS: &str = "GROUP_GET_NUMS";
    pub const GROUP_GET_SIZE: &str = "GROUP_GET_SIZE";
    pub const SNDBCK_PUT_NUMS: &str = "SNDBCK_PUT_NUMS";
    pub const BROKER_PUT_NUMS: &str = "BROKER_PUT_NUMS";
    pub const BROKER_GET_NUMS: &str = "BROKER_GET_NUMS";
}

/// RocketMQ's buckets of send latency (`putMessageDistributeTime`): their names and upper
/// bounds in milliseconds (the last is open).
pub const PUT_LATENCY_BUCKETS: [(&str, u64); 13] = [
    ("[<=0ms]", 1),
    ("[0~10ms]", 10),
    ("[10~50ms]", 50),
    ("[50~100ms]", 100),
    ("[100~200ms]", 200),
    ("[200~500ms]", 500),
    ("[500ms~1s]", 1000),
    ("[1~2s]", 2000),
    ("[2~3s]", 3000),
    ("[3~4s]", 4000),
    ("[4~5s]", 5000),
    ("[5~10s]", 10_000),
    ("[10s~]", u64::MAX),
];

/// Send latencies since start, as RocketMQ's store counts them for its runtime info.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PutLatency {
    /// Sends per bucket of [`PUT_LATENCY_BUCKETS`].
    pub buckets: [u64; 13],
    pub max_ms: u64,
}

impl PutLatency {
    pub fn record(&mut self, d: Duration) {
        let ms = u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        let i = PUT_LATENCY_BUCKETS
            .iter()
            .position(|&(_, below)| ms < below)
            .unwrap_or(PUT_LATENCY_BUCKETS.len() - 1);
        self.buckets[i] += 1;
        self.max_ms = self.max_ms.max(ms);
    }

    /// RocketMQ's text: `[<=0ms]:0 [0~10ms]:12 …`.
    pub fn text(&self) -> String {
        let mut out = String::new();
        for ((name, _), n) in PUT_LATENCY_BUCKETS.iter().zip(self.buckets) {
            if !out.is_empty() {
                out.push(' ');
            }
            out.push_str(name);
            out.push(':');
            out.push_str(&n.to_string());
        }
        out
    }
}

/// One window of a stat, as RocketMQ's `StatsSnapshot`.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Snapshot {
    pub sum: u64,
    pub tps: f64,
    pub avgpt: f64,
    /// The calls that added to `sum`.
    pub times: u64,
}

impl Snapshot {
    /// Adds another core's (or stat's) snapshot of the same window.
    pub fn add(&mut self, other: &Snapshot) {
        self.sum += other.sum;
        self.tps += other.tps;
        self.times += other.times;
        self.avgpt = if self.times > 0 {
            self.sum as f64 / self.times as f64
        } else {
            0.0
        };
    }
}

/// A stat over its three windows, as RocketMQ's `BrokerStatsData`.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct StatsData {
    pub minute: Snapshot,
    pub hour: Snapshot,
    pub day: Snapshot,
}

impl StatsData {
    pub fn add(&mut self, other: &StatsData) {
        self.minute.add(&other.minute);
        self.hour.add(&other.hour);
        self.day.add(&other.day);
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Count {
    value: u64,
    times: u64,
}

/// A counter and its samples: slots `[0, 7)` the minute window, `[7, 14)` the hour, `[14,
/// 39)` the day, each a ring whose position and times the table keeps for every series.
#[derive(Debug, Clone)]
struct Series {
    now: Count,
    slots: [Count; SLOTS],
}

impl Default for Series {
    fn default() -> Self {
        // Samples taken before the key existed saw nothing: zeros.
        Series {
            now: Count::default(),
            slots: [Count::default(); SLOTS],
        }
    }
}

impl Series {
    fn add(&mut self, value: u64) {
        self.now.value = self.now.value.wrapping_add(value);
        self.now.times = self.now.times.wrapping_add(1);
    }
}

/// One window's ring: where its slots start in a series, its sample times, the next slot.
#[derive(Debug, Clone)]
struct Window {
    base: usize,
    at: Vec<Instant>,
    len: usize,
    next: usize,
}

impl Window {
    fn new(base: usize, len: usize, start: Instant) -> Self {
        // The first sample is the table's start, when every counter was zero.
        Window {
            base,
            at: vec![start],
            len,
            next: 1 % len,
        }
    }

    fn sample(&self, series: &mut Series) {
        series.slots[self.base + self.next] = series.now;
    }

    fn advance(&mut self, now: Instant) {
        if self.at.len() < self.len {
            self.at.push(now);
        } else {
            self.at[self.next] = now;
        }
        self.next = (self.next + 1) % self.len;
    }

    /// The ring position `back` samples before the newest (0: the newest), clamped to the
    /// oldest one taken.
    fn position(&self, back: usize) -> usize {
        let taken = self.at.len();
        let back = back.min(taken - 1);
        (self.next + self.len - 1 - back) % self.len
    }

    /// The series over this window: from its oldest sample to the live counter.
    fn read(&self, s: &Series, now: Instant) -> Snapshot {
        self.read_from(s, self.position(usize::MAX), now)
    }

    /// The series from the newest sample at least `span` old (else the oldest) to `now`.
    fn read_over(&self, s: &Series, span: Duration, now: Instant) -> Snapshot {
        let taken = self.at.len();
        let pos = (0..taken)
            .map(|back| self.position(back))
            .find(|&p| now.saturating_duration_since(self.at[p]) >= span)
            .unwrap_or_else(|| self.position(usize::MAX));
        self.read_from(s, pos, now)
    }

    fn read_from(&self, s: &Series, pos: usize, now: Instant) -> Snapshot {
        let first = s.slots[self.base + pos];
        let sum = s.now.value.wrapping_sub(first.value);
        let times = s.now.times.wrapping_sub(first.times);
        let span_ms = now.saturating_duration_since(self.at[pos]).as_millis();
        Snapshot {
            sum,
            tps: if span_ms > 0 {
                sum as f64 * 1000.0 / span_ms as f64
            } else {
                0.0
            },
            avgpt: if times > 0 {
                sum as f64 / times as f64
            } else {
                0.0
            },
            times,
        }
    }
}

#[derive(Debug, Default, Clone)]
struct TopicStats {
    put_nums: Series,
    put_size: Series,
    /// Each send's size per message, in RocketMQ's message-size buckets.
    sizes: SizeCounts,
    /// What [`BrokerStats::publish`] last gave the metrics.
    published: Totals,
    published_sizes: SizeCounts,
}

impl TopicStats {
    fn totals(&self) -> Totals {
        Totals {
            messages: self.put_nums.now.value,
            bytes: self.put_size.now.value,
        }
    }
}

#[derive(Debug, Default, Clone)]
struct GroupStats {
    get_nums: Series,
    get_size: Series,
    send_back_nums: Series,
    /// Messages of the topic the group sent to its dead-letter topic, and how many of them
    /// [`BrokerStats::publish`] gave the metrics.
    dead_letters: u64,
    published_dead_letters: u64,
    published: Totals,
}

impl GroupStats {
    fn totals(&self) -> Totals {
        Totals {
            messages: self.get_nums.now.value,
            bytes: self.get_size.now.value,
        }
    }
}

/// What changed since the last [`BrokerStats::publish`], for the metrics.
#[derive(Debug, PartialEq, Eq)]
pub enum Published<'a> {
    /// A topic's growth (messages and bytes stored, and the sizes of the sends) since the
    /// last publish.
    Topic(&'a str, Totals, SizeCounts),
    /// A topic@group's growth (messages and bytes handed out).
    Group(&'a str, &'a str, Totals),
    /// A topic dropped from the table (idle for a day): its series can go.
    TopicGone(&'a str),
    GroupGone(&'a str, &'a str),
    /// A topic@group's messages sent to the group's dead-letter topic since the last publish.
    DeadLetters(&'a str, &'a str, u64),
}

fn growth(now: Totals, published: &mut Totals) -> Option<Totals> {
    let grew = Totals {
        messages: now.messages.wrapping_sub(published.messages),
        bytes: now.bytes.wrapping_sub(published.bytes),
    };
    *published = now;
    (grew != Totals::default()).then_some(grew)
}

/// Per-key totals for the metrics: (messages, bytes).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Totals {
    pub messages: u64,
    pub bytes: u64,
}

/// One core's broker stats.
#[derive(Debug)]
pub struct BrokerStats {
    cluster: String,
    topics: HashMap<String, TopicStats>,
    /// topic → group → stats, so a count looks up by two `&str` without building a key.
    groups: HashMap<String, HashMap<String, GroupStats>>,
    group_keys: usize,
    /// What was counted past the caps (not in the maps, so the caps bound the maps).
    overflow_topic: TopicStats,
    overflow_group: GroupStats,
    broker_put: Series,
    broker_get: Series,
    minute: Window,
    hour: Window,
    day: Window,
    minute_samples: u64,
    /// Latencies of the sends this core took.
    pub put_latency: PutLatency,
    /// Keys dropped since the last publish.
    gone_topics: Vec<String>,
    gone_groups: Vec<(String, String)>,
    topics_max: usize,
    groups_max: usize,
}

impl BrokerStats {
    /// A table for the broker of cluster `cluster` (the key of the BROKER_* stats), started
    /// at `now`.
    pub fn new(cluster: &str, now: Instant) -> Self {
        Self::with_caps(cluster, now, TOPIC_KEYS_MAX, GROUP_KEYS_MAX)
    }

    /// As [`BrokerStats::new`], with other caps (for tests).
    pub fn with_caps(cluster: &str, now: Instant, topics_max: usize, groups_max: usize) -> Self {
        BrokerStats {
            cluster: cluster.to_owned(),
            topics: HashMap::new(),
            groups: HashMap::new(),
            group_keys: 0,
            overflow_topic: TopicStats::default(),
            overflow_group: GroupStats::default(),
            broker_put: Series::default(),
            broker_get: Series::default(),
            minute: Window::new(0, MINUTE_LEN, now),
            hour: Window::new(MINUTE_LEN, HOUR_LEN, now),
            day: Window::new(MINUTE_LEN + HOUR_LEN, DAY_LEN, now),
            minute_samples: 0,
            put_latency: PutLatency::default(),
            gone_topics: Vec::new(),
            gone_groups: Vec::new(),
            topics_max: topics_max.max(1),
            groups_max: groups_max.max(1),
        }
    }

    fn topic(&mut self, topic: &str) -> &mut TopicStats {
        if !self.topics.contains_key(topic) {
            if topic == OVERFLOW_KEY || self.topics.len() >= self.topics_max {
                return &mut self.overflow_topic;
            }
            self.topics.insert(topic.to_owned(), TopicStats::default());
        }
        match self.topics.get_mut(topic) {
            Some(t) => t,
            None => unreachable!("inserted above"),
        }
    }

    fn group(&mut self, topic: &str, group: &str) -> &mut GroupStats {
        let known = self
            .groups
            .get(topic)
            .is_some_and(|g| g.contains_key(group));
        if !known {
            if topic == OVERFLOW_KEY || self.group_keys >= self.groups_max {
                return &mut self.overflow_group;
            }
            self.groups
                .entry(topic.to_owned())
                .or_default()
                .insert(group.to_owned(), GroupStats::default());
            self.group_keys += 1;
        }
        match self.groups.get_mut(topic).and_then(|g| g.get_mut(group)) {
            Some(g) => g,
            None => unreachable!("inserted above"),
        }
    }

    /// A batch of `messages` (of `bytes` in all) stored in `topic`.
    pub fn put(&mut self, topic: &str, messages: u64, bytes: u64) {
        let t = self.topic(topic);
        t.put_nums.add(messages);
        t.put_size.add(bytes);
        // As RocketMQ's `rocketmq_message_size`: one observation per send, of its bytes per
        // message.
        t.sizes.observe(bytes / messages.max(1));
        self.broker_put.add(messages);
    }

    /// A batch of `messages` (of `bytes`) of `topic` handed to `group`.
    pub fn got(&mut self, topic: &str, group: &str, messages: u64, bytes: u64) {
        if messages == 0 {
            return;
        }
        let g = self.group(topic, group);
        g.get_nums.add(messages);
        g.get_size.add(bytes);
        self.broker_get.add(messages);
    }

    /// A message of `topic` that `group` sent back to be consumed again.
    pub fn sent_back(&mut self, topic: &str, group: &str) {
        self.group(topic, group).send_back_nums.add(1);
    }

    /// A message of `topic` that `group` gave up on: it went to the group's dead-letter topic.
    pub fn dead_lettered(&mut self, topic: &str, group: &str) {
        self.group(topic, group).dead_letters += 1;
    }

    /// Takes the samples due at `now`: called often (every second), it samples the minute
    /// window every 10 s, the hour window every 10 min, the day window every hour, and at
    /// the day sample drops keys that counted nothing for a whole day window.
    pub fn tick(&mut self, now: Instant) {
        let newest = self.minute.at[self.minute.position(0)];
        if now.saturating_duration_since(newest) < MINUTE_STEP {
            return;
        }
        self.minute_samples += 1;
        let n = self.minute_samples;
        let (hour_due, day_due) = (n.is_multiple_of(HOUR_EVERY), n.is_multiple_of(DAY_EVERY));
        if day_due {
            self.drop_idle();
        }
        let BrokerStats {
            topics,
            groups,
            overflow_topic,
            overflow_group,
            broker_put,
            broker_get,
            minute,
            hour,
            day,
            ..
        } = self;
        let sample = |s: &mut Series| {
            minute.sample(s);
            if hour_due {
                hour.sample(s);
            }
            if day_due {
                day.sample(s);
            }
        };
        for t in topics.values_mut().chain([overflow_topic]) {
            sample(&mut t.put_nums);
            sample(&mut t.put_size);
        }
        for g in groups
            .values_mut()
            .flat_map(|g| g.values_mut())
            .chain([overflow_group])
        {
            sample(&mut g.get_nums);
            sample(&mut g.get_size);
            sample(&mut g.send_back_nums);
        }
        sample(broker_put);
        sample(broker_get);
        minute.advance(now);
        if hour_due {
            hour.advance(now);
        }
        if day_due {
            day.advance(now);
        }
    }

    /// Drops the keys whose counters did not move over a full day window.
    fn drop_idle(&mut self) {
        let day = &self.day;
        if day.at.len() < day.len {
            return;
        }
        let oldest = day.base + day.position(usize::MAX);
        let idle = |s: &Series| s.slots[oldest] == s.now;
        let gone = &mut self.gone_topics;
        self.topics.retain(|k, t| {
            let keep = !(idle(&t.put_nums) && idle(&t.put_size));
            if !keep {
                gone.push(k.clone());
            }
            keep
        });
        let mut kept = 0;
        let gone = &mut self.gone_groups;
        for (topic, by_group) in self.groups.iter_mut() {
            by_group.retain(|group, g| {
                let keep = !(idle(&g.get_nums) && idle(&g.get_size) && idle(&g.send_back_nums));
                if !keep {
                    gone.push((topic.clone(), group.clone()));
                }
                keep
            });
            kept += by_group.len();
        }
        self.groups.retain(|_, g| !g.is_empty());
        self.group_keys = kept;
    }

    fn series(&self, stats_name: &str, key: &str) -> Option<&Series> {
        let group_key = || {
            let (topic, group) = key.split_once('@')?;
            if topic == OVERFLOW_KEY && group == OVERFLOW_KEY {
                return Some(&self.overflow_group);
            }
            self.groups.get(topic)?.get(group)
        };
        let topic_key = || {
            if key == OVERFLOW_KEY {
                return Some(&self.overflow_topic);
            }
            self.topics.get(key)
        };
        match stats_name {
            name::TOPIC_PUT_NUMS => topic_key().map(|t| &t.put_nums),
            name::TOPIC_PUT_SIZE => topic_key().map(|t| &t.put_size),
            name::GROUP_GET_NUMS => group_key().map(|g| &g.get_nums),
            name::GROUP_GET_SIZE => group_key().map(|g| &g.get_size),
            name::SNDBCK_PUT_NUMS => group_key().map(|g| &g.send_back_nums),
            name::BROKER_PUT_NUMS if key == self.cluster => Some(&self.broker_put),
            name::BROKER_GET_NUMS if key == self.cluster => Some(&self.broker_get),
            _ => None,
        }
    }

    /// The stat `stats_name` of `key` over its three windows, or `None` when this core never
    /// counted it (RocketMQ's broker answers "not exist" then).
    pub fn view(&self, stats_name: &str, key: &str, now: Instant) -> Option<StatsData> {
        // As RocketMQ creates a stat at its first count: one never counted is not there,
        // though its key counted other stats.
        let s = self.series(stats_name, key).filter(|s| s.now.times > 0)?;
        Some(StatsData {
            minute: self.minute.read(s, now),
            hour: self.hour.read(s, now),
            day: self.day.read(s, now),
        })
    }

    /// Messages per second stored (`put`) or handed out (`!put`) over the last 10 s, 60 s
    /// and 600 s, as RocketMQ's runtime info `putTps` and `getTransferedTps` give them.
    pub fn broker_tps(&self, put: bool, now: Instant) -> [f64; 3] {
        self.broker_rates(put, now).map(|r| r.0)
    }

    /// As [`BrokerStats::broker_tps`], with the batches (calls) per second beside.
    pub fn broker_rates(&self, put: bool, now: Instant) -> [(f64, f64); 3] {
        let s = if put {
            &self.broker_put
        } else {
            &self.broker_get
        };
        let rate = |w: &Window, secs: u64| {
            let snap = w.read_over(s, Duration::from_secs(secs), now);
            let calls = if snap.sum > 0 && snap.tps > 0.0 {
                snap.tps * snap.times as f64 / snap.sum as f64
            } else {
                0.0
            };
            (snap.tps, calls)
        };
        [
            rate(&self.minute, 10),
            rate(&self.minute, 60),
            rate(&self.hour, 600),
        ]
    }

    /// Batches stored since start (RocketMQ's `putMessageTimesTotal`).
    pub fn put_batches(&self) -> u64 {
        self.broker_put.now.times
    }

    /// Every topic counted, with what was stored in it (and [`OVERFLOW_KEY`] once
    /// something was counted past the cap).
    pub fn topic_totals(&self) -> impl Iterator<Item = (&str, Totals)> {
        let overflow = (self.overflow_topic.put_nums.now.times > 0)
            .then_some((OVERFLOW_KEY, &self.overflow_topic));
        self.topics
            .iter()
            .map(|(k, t)| (k.as_str(), t))
            .chain(overflow)
            .map(|(k, t)| {
                (
                    k,
                    Totals {
                        messages: t.put_nums.now.value,
                        bytes: t.put_size.now.value,
                    },
                )
            })
    }

    /// Every topic@group counted, with what the group was handed of the topic (and
    /// [`OVERFLOW_KEY`] for both once something was counted past the cap).
    pub fn group_totals(&self) -> impl Iterator<Item = (&str, &str, Totals)> {
        let overflow = (self.overflow_group.get_nums.now.times > 0
            || self.overflow_group.send_back_nums.now.times > 0)
            .then_some((OVERFLOW_KEY, OVERFLOW_KEY, &self.overflow_group));
        self.groups
            .iter()
            .flat_map(|(topic, by_group)| {
                by_group
                    .iter()
                    .map(move |(group, g)| (topic.as_str(), group.as_str(), g))
            })
            .chain(overflow)
            .map(|(t, g, s)| {
                (
                    t,
                    g,
                    Totals {
                        messages: s.get_nums.now.value,
                        bytes: s.get_size.now.value,
                    },
                )
            })
    }

    /// Hands `f` what grew since the last call, key by key (the overflow keys included),
    /// and the keys dropped since. Keys that did not grow are not visited with a growth.
    pub fn publish(&mut self, mut f: impl FnMut(Published<'_>)) {
        for k in self.gone_topics.drain(..) {
            f(Published::TopicGone(&k));
        }
        for (t, g) in self.gone_groups.drain(..) {
            f(Published::GroupGone(&t, &g));
        }
        let overflow = [(OVERFLOW_KEY, &mut self.overflow_topic)];
        for (k, t) in self
            .topics
            .iter_mut()
            .map(|(k, t)| (k.as_str(), t))
            .chain(overflow)
        {
            if let Some(g) = growth(t.totals(), &mut t.published) {
                let sizes = t.sizes.since(&t.published_sizes);
                t.published_sizes = t.sizes;
                f(Published::Topic(k, g, sizes));
            }
        }
        let overflow = [(OVERFLOW_KEY, OVERFLOW_KEY, &mut self.overflow_group)];
        for (topic, group, s) in self
            .groups
            .iter_mut()
            .flat_map(|(topic, by_group)| {
                by_group
                    .iter_mut()
                    .map(move |(group, g)| (topic.as_str(), group.as_str(), g))
            })
            .chain(overflow)
        {
            if let Some(g) = growth(s.totals(), &mut s.published) {
                f(Published::Group(topic, group, g));
            }
            if s.dead_letters != s.published_dead_letters {
                let grew = s.dead_letters.wrapping_sub(s.published_dead_letters);
                s.published_dead_letters = s.dead_letters;
                f(Published::DeadLetters(topic, group, grew));
            }
        }
    }

    /// The topic keys and topic@group keys held (without the overflow keys).
    /// The topic keys and topic@group keys held.
    pub fn key_counts(&self) -> (usize, usize) {
        (self.topics.len(), self.group_keys)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    #[test]
    fn a_put_shows_at_once_in_every_window() {
        let t0 = Instant::now();
        let mut b = BrokerStats::new("c", t0);
        b.put("T", 10, 1000);
        b.put("T", 5, 500);
        let v = b.view(name::TOPIC_PUT_NUMS, "T", t0 + secs(5)).unwrap();
        assert_eq!(v.minute.sum, 15);
        assert_eq!(v.hour.sum, 15);
        assert_eq!(v.day.sum, 15);
        assert!((v.minute.tps - 3.0).abs() < 1e-9, "{}", v.minute.tps);
        assert!((v.minute.avgpt - 7.5).abs() < 1e-9);
        let size = b.view(name::TOPIC_PUT_SIZE, "T", t0 + secs(5)).unwrap();
        assert_eq!(size.minute.sum, 1500);
        let all = b.view(name::BROKER_PUT_NUMS, "c", t0 + secs(5)).unwrap();
        assert_eq!(all.minute.sum, 15);
    }

    fn published(b: &mut BrokerStats) -> Vec<String> {
        let mut out = Vec::new();
        b.publish(|p| {
            out.push(match p {
                Published::Topic(t, g, sizes) => {
                    format!("Topic({t:?}, {g:?}, sends {})", sizes.count())
                }
                p => format!("{p:?}"),
            })
        });
        out.sort();
        out
    }

    #[test]
    fn publish_gives_the_growth_since_the_last_publish() {
        let t0 = Instant::now();
        let mut b = BrokerStats::with_caps("c", t0, 1, 1);
        b.put("T", 2, 20);
        b.put("U", 1, 10);
        b.got("T", "g", 1, 5);
        let first = published(&mut b);
        assert_eq!(
            first,
            [
                r#"Group("T", "g", Totals { messages: 1, bytes: 5 })"#,
                r#"Topic("%OVERFLOW%", Totals { messages: 1, bytes: 10 }, sends 1)"#,
                r#"Topic("T", Totals { messages: 2, bytes: 20 }, sends 1)"#,
            ]
        );
        assert!(published(&mut b).is_empty(), "nothing grew");
        b.dead_lettered("T", "g");
        b.dead_lettered("T", "g");
        assert_eq!(published(&mut b), [r#"DeadLetters("T", "g", 2)"#]);
        b.put("T", 1, 10);
        assert_eq!(
            published(&mut b),
            [r#"Topic("T", Totals { messages: 1, bytes: 10 }, sends 1)"#]
        );
    }

    #[test]
    fn put_latency_reads_as_rocketmq_writes_it() {
        let mut l = PutLatency::default();
        l.record(Duration::from_micros(300));
        l.record(Duration::from_millis(12));
        l.record(Duration::from_secs(20));
        assert_eq!(l.max_ms, 20_000);
        let text = l.text();
        assert!(
            text.starts_with("[<=0ms]:1 [0~10ms]:0 [10~50ms]:1 "),
            "{text}"
        );
        assert!(text.ends_with("[5~10s]:0 [10s~]:1"), "{text}");
        assert_eq!(text.split(' ').count(), 13);
    }

    #[test]
    fn unknown_keys_and_names_are_not_found() {
        let t0 = Instant::now();
        let mut b = BrokerStats::new("c", t0);
        b.put("T", 1, 1);
        assert!(b.view(name::TOPIC_PUT_NUMS, "U", t0).is_none());
        assert!(b.view(name::GROUP_GET_NUMS, "T@g", t0).is_none());
        assert!(b.view(name::GROUP_GET_NUMS, "T", t0).is_none());
        assert!(b.view(name::BROKER_PUT_NUMS, "other-cluster", t0).is_none());
        assert!(b.view("NO_SUCH_STAT", "T", t0).is_none());
        b.got("T", "g", 3, 30);
        assert!(b.view(name::SNDBCK_PUT_NUMS, "T@g", t0).is_none());
        b.sent_back("T", "g");
        assert_eq!(b.view(name::GROUP_GET_NUMS, "T@g", t0).unwrap().day.sum, 3);
        assert_eq!(b.view(name::GROUP_GET_SIZE, "T@g", t0).unwrap().day.sum, 30);
        assert_eq!(b.view(name::SNDBCK_PUT_NUMS, "T@g", t0).unwrap().day.sum, 1);
        assert_eq!(b.view(name::BROKER_GET_NUMS, "c", t0).unwrap().day.sum, 3);
    }

    #[test]
    fn the_minute_window_forgets_what_is_older_than_its_samples() {
        let t0 = Instant::now();
        let mut b = BrokerStats::new("c", t0);
        b.put("T", 100, 100);
        // Ten minutes of samples every 10 s, with one message each 10 s after the first.
        for i in 1..=60u64 {
            b.tick(t0 + secs(10 * i));
            b.put("T", 1, 1);
        }
        let now = t0 + secs(605);
        let v = b.view(name::TOPIC_PUT_NUMS, "T", now).unwrap();
        // The 7 minute samples are those of 540 s to 600 s: the 7 messages since the oldest,
        // over 65 s.
        assert_eq!(v.minute.sum, 7, "{v:?}");
        assert!((v.minute.tps - 7.0 / 65.0).abs() < 1e-9, "{}", v.minute.tps);
        // The hour window has its start and the 10-minute sample: it reaches back to t0.
        assert_eq!(v.hour.sum, 160);
        let tps = b.broker_tps(true, now);
        // 10 s: from the sample at 590 s (the newest at least 10 s old), the 2 messages
        // since, over 15 s.
        assert!((tps[0] - 2.0 / 15.0).abs() < 1e-9, "{tps:?}");
    }

    #[test]
    fn tick_samples_only_every_ten_seconds() {
        let t0 = Instant::now();
        let mut b = BrokerStats::new("c", t0);
        b.put("T", 1, 1);
        b.tick(t0 + secs(3));
        b.tick(t0 + secs(9));
        b.put("T", 1, 1);
        // No sample yet: the minute window still reaches back to t0.
        let v = b.view(name::TOPIC_PUT_NUMS, "T", t0 + secs(9)).unwrap();
        assert_eq!(v.minute.sum, 2);
        b.tick(t0 + secs(10));
        b.put("T", 1, 1);
        let tps10 = b.broker_tps(true, t0 + secs(20))[0];
        assert!((tps10 - 0.1).abs() < 1e-9, "{tps10}");
    }

    #[test]
    fn keys_past_the_cap_are_counted_under_the_overflow_key() {
        let t0 = Instant::now();
        let mut b = BrokerStats::with_caps("c", t0, 2, 2);
        b.put("A", 1, 10);
        b.put("B", 1, 10);
        b.put("C", 1, 10);
        b.put("D", 2, 20);
        b.put("A", 1, 10);
        assert_eq!(b.key_counts().0, 2);
        assert_eq!(
            b.view(name::TOPIC_PUT_NUMS, OVERFLOW_KEY, t0)
                .unwrap()
                .day
                .sum,
            3
        );
        assert!(b.view(name::TOPIC_PUT_NUMS, "C", t0).is_none());
        assert_eq!(b.view(name::TOPIC_PUT_NUMS, "A", t0).unwrap().day.sum, 2);
        // The broker totals miss nothing.
        assert_eq!(b.view(name::BROKER_PUT_NUMS, "c", t0).unwrap().day.sum, 6);

        b.got("A", "g1", 1, 1);
        b.got("A", "g2", 1, 1);
        b.got("A", "g3", 4, 4);
        b.sent_back("B", "g1");
        let over = format!("{OVERFLOW_KEY}@{OVERFLOW_KEY}");
        assert_eq!(b.view(name::GROUP_GET_NUMS, &over, t0).unwrap().day.sum, 4);
        assert_eq!(b.view(name::SNDBCK_PUT_NUMS, &over, t0).unwrap().day.sum, 1);
        assert_eq!(b.key_counts().1, 2);
        let totals: u64 = b.group_totals().map(|(_, _, t)| t.messages).sum();
        assert_eq!(totals, 6);
    }

    #[test]
    fn keys_idle_for_a_day_are_dropped() {
        let t0 = Instant::now();
        let mut b = BrokerStats::with_caps("c", t0, 1, 1);
        b.put("old", 1, 1);
        b.got("old", "g", 1, 1);
        // 28 hours of samples, "live" counted every hour.
        let mut t = t0;
        for i in 1..=(28 * 360u64) {
            t = t0 + secs(10 * i);
            b.tick(t);
            if i.is_multiple_of(360) {
                b.put("live", 1, 1);
            }
        }
        // "old" was dropped at a day sample once it had not moved for a whole day window,
        // then "live" took its room (counted under the overflow key until then).
        assert!(b.view(name::TOPIC_PUT_NUMS, "old", t).is_none());
        assert!(b.view(name::GROUP_GET_NUMS, "old@g", t).is_none());
        assert_eq!(b.key_counts(), (1, 0));
        let gone = published(&mut b);
        assert!(gone.contains(&r#"TopicGone("old")"#.to_owned()), "{gone:?}");
        assert!(
            gone.contains(&r#"GroupGone("old", "g")"#.to_owned()),
            "{gone:?}"
        );
        let live = b.view(name::TOPIC_PUT_NUMS, "live", t).unwrap();
        assert!(live.day.sum >= 2, "{live:?}");
        let counted: u64 = b.topic_totals().map(|(_, t)| t.messages).sum();
        assert_eq!(counted, 28);
    }
}
