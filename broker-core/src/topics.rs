//! The topic table. Core 0 owns the authoritative copy and its file; every core holds a
//! replica that core 0 updates through the mesh (`CoreMessage::TopicChanged`).
//!
//! Beside each topic's queues and permission the table keeps its RocketMQ 5 attributes
//! (`message.type`, …), set with `updateTopic -a +key=value` and checked by [`alter_attributes`]
//! as RocketMQ's broker checks them. The native protocol's `TopicConfig` (and so the
//! NameServer's registration) does not carry them; replication does (its TOPICS frame), so
//! a slave's topics have their master's attributes.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use protocol::{perm, TopicConfig};

/// RocketMQ's default topic: brokers that allow auto-creation register it, so producers can
/// find a broker for a topic nobody created yet.
pub const AUTO_CREATE_TOPIC_KEY: &str = "TBW102";

/// A topic's attributes by name (RocketMQ's `TopicConfig.attributes`), keys without the
/// `+`/`-` of a modification.
pub type Attributes = BTreeMap<String, String>;

#[derive(Debug, Clone, Default)]
pub struct TopicTable {
    topics: BTreeMap<String, TopicConfig>,
    /// The attributes of the topics that have any.
    attributes: BTreeMap<String, Attributes>,
    /// Queues of all topics together (each counting the larger of its read and write
    /// queues), kept as topics change so that checking `queues_max` costs nothing.
    queues: u64,
}

/// One row of topics.json and of the journal: name, read queues, write queues, perm, and
/// the attributes when the topic has any (a row without them is the 4-element form).
#[derive(serde::Serialize, serde::Deserialize)]
#[serde(untagged)]
enum Row {
    Plain(String, u32, u32, u32),
    WithAttributes(String, u32, u32, u32, Attributes),
}

fn row(t: &TopicConfig, attributes: &Attributes) -> Row {
    let (name, r, w, p) = (t.name.clone(), t.read_queues, t.write_queues, t.perm);
    if attributes.is_empty() {
        Row::Plain(name, r, w, p)
    } else {
        Row::WithAttributes(name, r, w, p, attributes.clone())
    }
}

fn queues_of(t: &TopicConfig) -> u64 {
    u64::from(t.read_queues.max(t.write_queues))
}

/// How topics.json is kept on disk: each change appended to a journal (`topics.log`, one
/// JSON row per line, fdatasynced) and the whole table rewritten only when the journal
/// holds more rows than `max(JOURNAL_ROWS_MIN, topics / 2)`: a creation costs one small
/// append, whatever the number of topics, and a rewrite of the table is paid once per
/// as many creations as half the table (amortised O(1) per creation).
#[derive(Debug, Default)]
pub struct TopicStore {
    journal_rows: usize,
}

/// Journal rows below which the table is never rewritten.
const JOURNAL_ROWS_MIN: usize = 1024;

/// What core 0 writes for one topic change, on the blocking thread.
pub enum TopicWrite {
    /// Append this topic's row (with its attributes) to the journal.
    Append(TopicConfig, Attributes),
    /// Rewrite topics.json with this table and empty the journal.
    Rewrite(TopicTable),
}

impl TopicStore {
    /// The write that persists `changed` (already upserted into `table`).
    pub fn write_for(&mut self, table: &TopicTable, changed: &TopicConfig) -> TopicWrite {
        if self.journal_rows + 1 > JOURNAL_ROWS_MIN.max(table.len() / 2) {
            self.journal_rows = 0;
            TopicWrite::Rewrite(table.clone())
        } else {
            self.journal_rows += 1;
            TopicWrite::Append(changed.clone(), table.attributes(&changed.name))
        }
    }

    /// The write after a deletion: the whole table (the journal only adds and replaces
    /// rows, so a deleted topic leaves it by a rewrite, which empties the journal).
    pub fn rewrite(&mut self, table: &TopicTable) -> TopicWrite {
        self.journal_rows = 0;
        TopicWrite::Rewrite(table.clone())
    }
}

impl TopicWrite {
    pub fn apply(&self, data_dir: &Path) -> Result<(), TopicError> {
        match self {
            TopicWrite::Append(t, attributes) => TopicTable::append(data_dir, t, attributes),
            TopicWrite::Rewrite(table) => table.persist(data_dir),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum TopicError {
    #[error("topic name `{0}` is invalid: 1-127 characters of [A-Za-z0-9_%|-]")]
    BadName(String),
    #[error("queue count {0} is out of bounds (1 to 1024)")]
    BadQueues(u32),
    #[error("cannot persist the topic table to {path}: {message}")]
    Persist { path: PathBuf, message: String },
    #[error("topic table file {path} is corrupt: {message}")]
    Corrupt { path: PathBuf, message: String },
    /// An attribute change RocketMQ refuses (its broker answers SYSTEM_ERROR with this
    /// text), or one corvus cannot honour.
    #[error("{0}")]
    BadAttribute(String),
    /// `message.type=MIXED`, which RocketMQ refuses as INVALID_PARAMETER unless
    /// `enableMixedMessageType`.
    #[error("MIXED message type is not supported.")]
    MixedMessageType,
}

/// The values an attribute may take.
enum AttributeValues {
    OneOf(&'static [&'static str]),
    /// A whole number in this range (bounds included).
    Range(i64, i64),
}

/// One of RocketMQ 5's topic attributes (`TopicAttributes.ALL`).
struct AttributeSpec {
    name: &'static str,
    /// Whether an existing topic may change it (else only its creation sets it).
    changeable: bool,
    values: AttributeValues,
    /// Why corvus refuses a value RocketMQ takes, when it does: the feature is not there.
    unsupported: fn(&str) -> Option<&'static str>,
}

/// RocketMQ 5.5's topic attributes, with the values corvus cannot honour.
const ATTRIBUTE_SPECS: [AttributeSpec; 6] = [
    AttributeSpec {
        name: "message.type",
        changeable: true,
        values: AttributeValues::OneOf(&[
            "UNSPECIFIED",
            "NORMAL",
            "FIFO",
            "DELAY",
            "TRANSACTION",
            "PRIORITY",
            "LITE",
            "MIXED",
        ]),
        unsupported: |_| None,
    },
    AttributeSpec {
        name: "queue.type",
        changeable: false,
        values: AttributeValues::OneOf(&["BatchCQ", "SimpleCQ"]),
        unsupported: |v| {
            (v == "BatchCQ").then_some(
                "corvus keeps SimpleCQ ConsumeQueues only: queue.type=BatchCQ is not supported",
            )
        },
    },
    AttributeSpec {
        name: "cleanup.policy",
        changeable: false,
        values: AttributeValues::OneOf(&["DELETE", "COMPACTION"]),
        unsupported: |v| {
            (v == "COMPACTION").then_some(
                "corvus does not compact topics: cleanup.policy=COMPACTION is not supported",
            )
        },
    },
    AttributeSpec {
        name: "reserve.time",
        changeable: true,
        values: AttributeValues::Range(-1, i64::MAX),
        unsupported: |_| Some("corvus has no tiered store: reserve.time is not supported"),
    },
    AttributeSpec {
        // Minutes a lite topic of a LITE parent may stay without a write before it is
        // removed with what it holds; -1: only when it has nothing left (`crate::lite`).
        name: "lite.topic.expiration",
        changeable: true,
        values: AttributeValues::Range(-1, 43_200),
        unsupported: |_| None,
    },
    AttributeSpec {
        // corvus's own: whether sends to the topic are deduplicated by UNIQ_KEY
        // (`crate::dedup`), overriding the broker's `dedup_enable`.
        name: crate::dedup::ATTRIBUTE,
        changeable: true,
        values: AttributeValues::OneOf(&["true", "false"]),
        unsupported: |_| None,
    },
];

/// The topic attribute names corvus knows (RocketMQ 5.5's, and `dedup.enable`).
pub const ATTRIBUTE_NAMES: [&str; 6] = [
    ATTRIBUTE_SPECS[0].name,
    ATTRIBUTE_SPECS[1].name,
    ATTRIBUTE_SPECS[2].name,
    ATTRIBUTE_SPECS[3].name,
    ATTRIBUTE_SPECS[4].name,
    ATTRIBUTE_SPECS[5].name,
];

/// A topic's attributes after the modification `modification` (`updateTopic -a`'s text:
/// `+key=value` adds or changes, `-key` deletes, comma-separated) of `current`, refused as
/// RocketMQ 5.3's broker refuses it (`AttributeParser.parseToMap`, then
/// `AttributeUtil.alterCurrentAttributes` against `TopicAttributes.ALL`), in its words. A
/// topic being created (`create`) takes additions only. An empty modification keeps
/// `current`.
pub fn alter_attributes(
    create: bool,
    current: &Attributes,
    modification: &str,
) -> Result<Attributes, TopicError> {
    let bad = |m: String| TopicError::BadAttribute(m);
    // AttributeParser.parseToMap: the signed keys and their values.
    let mut asked: Vec<(&str, &str)> = Vec::new();
    if !modification.is_empty() {
        for kv in modification.split(',') {
            let (key, value) = match kv.split_once('=') {
                Some((key, rest)) => {
                    if !key.contains('+') {
                        return Err(bad(format!("add/alter attribute format is wrong: {key}")));
                    }
                    // As RocketMQ splits on every `=` and takes the second part.
                    let value = rest.split('=').next().unwrap_or("");
                    if value.is_empty() {
                        return Err(bad(format!("attribute {key} has no value")));
                    }
                    (key, value)
                }
                None => {
                    if !kv.contains('-') {
                        return Err(bad(format!("delete attribute format is wrong: {kv}")));
                    }
                    (kv, "")
                }
            };
            if asked.iter().any(|(k, _)| *k == key) {
                return Err(bad(format!("key duplication: {key}")));
            }
            asked.push((key, value));
        }
    }
    if asked
        .iter()
        .any(|&(k, v)| k == "+message.type" && v == "MIXED")
    {
        return Err(TopicError::MixedMessageType);
    }
    // AttributeUtil.alterCurrentAttributes.
    let mut out = current.clone();
    let mut seen: Vec<&str> = Vec::new();
    for &(key, value) in &asked {
        let real = key.get(1..).unwrap_or("");
        if real.is_empty() || real.contains('+') || real.contains('-') {
            return Err(bad("kv string format wrong.".into()));
        }
        if seen.contains(&real) {
            return Err(bad(format!("alter duplication key. key: {real}")));
        }
        seen.push(real);
        let adds = key.starts_with('+');
        if create && !adds {
            return Err(bad(format!(
                "only add attribute is supported while creating topic. key: {real}"
            )));
        }
        if !adds && !key.starts_with('-') {
            return Err(bad(format!("wrong format key: {real}")));
        }
        if !adds && !current.contains_key(real) {
            return Err(bad(format!("attempt to delete a nonexistent key: {real}")));
        }
        let Some(spec) = ATTRIBUTE_SPECS.iter().find(|s| s.name == real) else {
            return Err(bad(format!("unsupported key: {real}")));
        };
        if !create && !spec.changeable {
            return Err(bad(format!(
                "attempt to update an unchangeable attribute. key: {real}"
            )));
        }
        if !adds {
            out.remove(real);
            continue;
        }
        match spec.values {
            AttributeValues::OneOf(set) if !set.contains(&value) => {
                return Err(bad(format!("value is not in set: [{}]", set.join(", "))));
            }
            AttributeValues::Range(min, max)
                if !value.parse::<i64>().is_ok_and(|n| (min..=max).contains(&n)) =>
            {
                return Err(bad(format!("value is not in range({min}, {max})")));
            }
            _ => {}
        }
        if let Some(why) = (spec.unsupported)(value) {
            return Err(bad(why.to_owned()));
        }
        out.insert(real.to_owned(), value.to_owned());
    }
    Ok(out)
}

/// RocketMQ's topic name rule (letters, digits, `_`, `-`, `%`, `|`), at most 127 bytes
/// (the record layout stores the length in one byte).
pub fn validate_topic_name(name: &str) -> Result<(), TopicError> {
    let ok = !name.is_empty()
        && name.len() <= message::TOPIC_LEN_MAX
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'%' | b'|'));
    if ok {
        Ok(())
    } else {
        Err(TopicError::BadName(name.to_owned()))
    }
}

pub fn validate_topic(cfg: &TopicConfig) -> Result<(), TopicError> {
    validate_topic_name(&cfg.name)?;
    for q in [cfg.read_queues, cfg.write_queues] {
        if !(1..=1024).contains(&q) {
            return Err(TopicError::BadQueues(q));
        }
    }
    Ok(())
}

pub fn topic_config(name: &str, queues: u32) -> TopicConfig {
    TopicConfig {
        name: name.to_owned(),
        read_queues: queues,
        write_queues: queues,
        perm: perm::READ_WRITE,
    }
}

/// [`AUTO_CREATE_TOPIC_KEY`] as a broker with `auto_create_topic_enable` registers it and
/// answers for it (RocketMQ's brokers hold it as a topic of their own then): `queues`
/// (`default_topic_queue_nums`) queues, readable, writable and inherited by the topics
/// created from it. It is not in the topic table, and sends to it are refused, so its
/// queues stay empty.
pub fn auto_create_key_config(queues: u32) -> TopicConfig {
    TopicConfig {
        perm: perm::READ_WRITE | perm::INHERIT,
        ..topic_config(AUTO_CREATE_TOPIC_KEY, queues)
    }
}

impl TopicTable {
    pub fn file(data_dir: &Path) -> PathBuf {
        data_dir.join("config").join("topics.json")
    }

    pub fn journal(data_dir: &Path) -> PathBuf {
        data_dir.join("config").join("topics.log")
    }

    /// Loads the table: topics.json, then the journal's rows over it; a missing file is an
    /// empty table. A journal is folded into topics.json at once (so appends always start
    /// from an empty one). Its last line may be torn by a crash during an append that was
    /// never acknowledged: it is dropped, with a warning; a bad row before it is corruption.
    pub fn load(data_dir: &Path) -> Result<TopicTable, TopicError> {
        let path = Self::file(data_dir);
        let corrupt = |path: &Path, message: String| TopicError::Corrupt {
            path: path.to_owned(),
            message,
        };
        let mut table = TopicTable::default();
        if let Some(text) = read_if_there(&path).map_err(|e| corrupt(&path, e.to_string()))? {
            let rows: Vec<Row> =
                serde_json::from_str(&text).map_err(|e| corrupt(&path, e.to_string()))?;
            for r in rows {
                table
                    .load_row(r)
                    .map_err(|e| corrupt(&path, e.to_string()))?;
            }
        }
        let journal = Self::journal(data_dir);
        let Some(text) = read_if_there(&journal).map_err(|e| corrupt(&journal, e.to_string()))?
        else {
            return Ok(table);
        };
        let lines: Vec<&str> = text.split_inclusive('\n').collect();
        for (i, line) in lines.iter().enumerate() {
            let parsed = line
                .strip_suffix('\n')
                .ok_or_else(|| "no line end".to_owned())
                .and_then(|l| serde_json::from_str::<Row>(l).map_err(|e| e.to_string()))
                .and_then(|r| table.load_row(r).map_err(|e| e.to_string()));
            match parsed {
                Ok(()) => {}
                Err(e) if i + 1 == lines.len() => {
                    tracing::warn!(path = %journal.display(), error = %e, "dropped the torn last row of the topic journal (a creation that was never acknowledged)");
                }
                Err(e) => return Err(corrupt(&journal, format!("line {}: {e}", i + 1))),
            }
        }
        table.persist(data_dir)?;
        Ok(table)
    }

    fn load_row(&mut self, row: Row) -> Result<(), TopicError> {
        let ((name, read_queues, write_queues, perm), attributes) = match row {
            Row::Plain(n, r, w, p) => ((n, r, w, p), Attributes::new()),
            Row::WithAttributes(n, r, w, p, a) => ((n, r, w, p), a),
        };
        let cfg = TopicConfig {
            name,
            read_queues,
            write_queues,
            perm,
        };
        validate_topic(&cfg)?;
        self.set_attributes(&cfg.name, attributes);
        self.upsert(cfg);
        Ok(())
    }

    /// Writes the table durably (a temporary file, fsync, rename, fsync of the directory),
    /// then removes the journal it includes.
    pub fn persist(&self, data_dir: &Path) -> Result<(), TopicError> {
        let path = Self::file(data_dir);
        let err = |e: std::io::Error| TopicError::Persist {
            path: path.clone(),
            message: e.to_string(),
        };
        let dir = path.parent().unwrap_or(data_dir);
        std::fs::create_dir_all(dir).map_err(err)?;
        let rows: Vec<Row> = self
            .topics
            .values()
            .map(|t| {
                row(
                    t,
                    self.attributes.get(&t.name).unwrap_or(&Attributes::new()),
                )
            })
            .collect();
        let text = serde_json::to_string_pretty(&rows).map_err(|e| TopicError::Persist {
            path: path.clone(),
            message: e.to_string(),
        })?;
        crate::durable::replace(&path, text.as_bytes()).map_err(err)?;
        // Only once the table holding its rows is durable.
        match std::fs::remove_file(Self::journal(data_dir)) {
            Ok(()) => sync_dir(dir).map_err(err)?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(err(e)),
        }
        Ok(())
    }

    /// Appends one topic's row to the journal and fdatasyncs it (and the directory, when
    /// this append created the journal).
    fn append(data_dir: &Path, t: &TopicConfig, attributes: &Attributes) -> Result<(), TopicError> {
        use std::io::Write;
        let path = Self::journal(data_dir);
        let err = |e: std::io::Error| TopicError::Persist {
            path: path.clone(),
            message: e.to_string(),
        };
        let dir = path.parent().unwrap_or(data_dir);
        std::fs::create_dir_all(dir).map_err(err)?;
        let mut line =
            serde_json::to_string(&row(t, attributes)).map_err(|e| TopicError::Persist {
                path: path.clone(),
                message: e.to_string(),
            })?;
        line.push('\n');
        let created = !path.exists();
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(err)?;
        f.write_all(line.as_bytes()).map_err(err)?;
        f.sync_data().map_err(err)?;
        if created {
            sync_dir(dir).map_err(err)?;
        }
        Ok(())
    }

    pub fn get(&self, name: &str) -> Option<&TopicConfig> {
        self.topics.get(name)
    }

    pub fn len(&self) -> usize {
        self.topics.len()
    }

    pub fn is_empty(&self) -> bool {
        self.topics.is_empty()
    }

    pub fn upsert(&mut self, cfg: TopicConfig) {
        self.queues += queues_of(&cfg);
        if let Some(old) = self.topics.insert(cfg.name.clone(), cfg) {
            self.queues -= queues_of(&old);
        }
    }

    /// The topic's attributes (none for a topic without any, or one not in the table).
    pub fn attributes(&self, name: &str) -> Attributes {
        self.attributes.get(name).cloned().unwrap_or_default()
    }

    /// The value of the topic's attribute `key`, when it has one (no copy of the others).
    pub fn attribute(&self, name: &str, key: &str) -> Option<&str> {
        self.attributes.get(name)?.get(key).map(String::as_str)
    }

    /// Replaces the topic's attributes.
    pub fn set_attributes(&mut self, name: &str, attributes: Attributes) {
        if attributes.is_empty() {
            self.attributes.remove(name);
        } else {
            self.attributes.insert(name.to_owned(), attributes);
        }
    }

    /// Removes a topic (and its attributes); whether it was there.
    pub fn remove(&mut self, name: &str) -> bool {
        self.attributes.remove(name);
        match self.topics.remove(name) {
            Some(old) => {
                self.queues -= queues_of(&old);
                true
            }
            None => false,
        }
    }

    pub fn all(&self) -> Vec<TopicConfig> {
        self.topics.values().cloned().collect()
    }

    /// The queues the table would hold with `cfg` upserted: each topic counts the larger of
    /// its read and write queue counts.
    pub fn queues_with(&self, cfg: &TopicConfig) -> u64 {
        let replaced = self.topics.get(&cfg.name).map_or(0, queues_of);
        self.queues - replaced + queues_of(cfg)
    }
}

fn read_if_there(path: &Path) -> std::io::Result<Option<String>> {
    match std::fs::read_to_string(path) {
        Ok(t) => Ok(Some(t)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

fn sync_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::File::open(dir).and_then(|d| d.sync_all())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn names_follow_rocketmq_rules() {
        assert!(validate_topic_name("TopicTest").is_ok());
        assert!(validate_topic_name("%RETRY%group_1").is_ok());
        assert!(validate_topic_name("").is_err());
        assert!(validate_topic_name("has space").is_err());
        assert!(validate_topic_name(&"x".repeat(128)).is_err());
    }

    #[test]
    fn persist_and_load() {
        let dir = tempfile::tempdir().unwrap();
        let mut t = TopicTable::default();
        t.upsert(topic_config("A", 4));
        t.upsert(topic_config("B", 8));
        t.persist(dir.path()).unwrap();
        let back = TopicTable::load(dir.path()).unwrap();
        assert_eq!(back.all(), t.all());
        assert!(TopicTable::load(&dir.path().join("missing"))
            .unwrap()
            .all()
            .is_empty());
    }

    #[test]
    fn creations_append_to_a_journal_until_it_is_worth_rewriting_the_table() {
        let dir = tempfile::tempdir().unwrap();
        let mut table = TopicTable::default();
        let mut store = TopicStore::default();
        let mut rewrites = 0;
        for i in 0..3000 {
            let t = topic_config(&format!("T{i}"), 1 + i % 8);
            table.upsert(t.clone());
            let w = store.write_for(&table, &t);
            rewrites += usize::from(matches!(w, TopicWrite::Rewrite(_)));
            w.apply(dir.path()).unwrap();
        }
        // 1024 appends, then a rewrite by the 1025th creation; 1025 more (the bound is now
        // half the table), a rewrite by the 2051st; the 949 since are in the journal.
        assert_eq!(rewrites, 2);
        let journal = std::fs::read_to_string(TopicTable::journal(dir.path())).unwrap();
        assert_eq!(journal.lines().count(), 3000 - 2051);
        // An update counts its queues once.
        let t = topic_config("T0", 64);
        assert_eq!(table.queues_with(&t), table.queues - 1 + 64);
        table.upsert(t.clone());
        store.write_for(&table, &t).apply(dir.path()).unwrap();
        let back = TopicTable::load(dir.path()).unwrap();
        assert_eq!(back.all(), table.all());
        assert_eq!(back.queues, table.queues);
        // Loading folded the journal into topics.json.
        assert!(!TopicTable::journal(dir.path()).exists());
    }

    #[test]
    fn a_torn_last_journal_row_is_dropped_and_an_earlier_bad_one_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let mut table = TopicTable::default();
        let a = topic_config("A", 4);
        table.upsert(a.clone());
        table.persist(dir.path()).unwrap();
        let b = topic_config("B", 2);
        TopicWrite::Append(b.clone(), Attributes::new())
            .apply(dir.path())
            .unwrap();
        let journal = TopicTable::journal(dir.path());
        let mut text = std::fs::read_to_string(&journal).unwrap();
        text.push_str("[\"C\",2,");
        std::fs::write(&journal, &text).unwrap();
        let back = TopicTable::load(dir.path()).unwrap();
        assert_eq!(back.all(), vec![a.clone(), b.clone()]);

        std::fs::write(&journal, "[\"C\",2\n[\"D\",1,1,6]\n").unwrap();
        let err = TopicTable::load(dir.path()).unwrap_err().to_string();
        assert!(err.contains("line 1"), "{err}");
    }

    #[test]
    fn a_deleted_topic_is_gone_after_a_reload_even_with_a_journal() {
        let dir = tempfile::tempdir().unwrap();
        let mut table = TopicTable::default();
        let mut store = TopicStore::default();
        for (name, q) in [("A", 4), ("B", 2)] {
            let t = topic_config(name, q);
            table.upsert(t.clone());
            store.write_for(&table, &t).apply(dir.path()).unwrap();
        }
        assert!(TopicTable::journal(dir.path()).exists());
        assert!(table.remove("A"));
        assert!(!table.remove("A"));
        assert_eq!(table.queues_with(&topic_config("C", 1)), 3);
        store.rewrite(&table).apply(dir.path()).unwrap();
        let back = TopicTable::load(dir.path()).unwrap();
        assert!(back.get("A").is_none());
        assert_eq!(back.get("B").map(|t| t.read_queues), Some(2));
    }

    #[test]
    fn attributes_survive_a_reload_from_the_table_and_from_the_journal() {
        let dir = tempfile::tempdir().unwrap();
        let mut table = TopicTable::default();
        let mut store = TopicStore::default();
        let fifo = Attributes::from([("message.type".to_owned(), "FIFO".to_owned())]);
        let a = topic_config("A", 4);
        table.upsert(a.clone());
        table.set_attributes("A", fifo.clone());
        table.persist(dir.path()).unwrap();
        let b = topic_config("B", 2);
        table.upsert(b.clone());
        table.set_attributes(
            "B",
            Attributes::from([("message.type".into(), "DELAY".into())]),
        );
        store.write_for(&table, &b).apply(dir.path()).unwrap();
        let c = topic_config("C", 1);
        table.upsert(c.clone());
        store.write_for(&table, &c).apply(dir.path()).unwrap();
        assert!(TopicTable::journal(dir.path()).exists());
        let back = TopicTable::load(dir.path()).unwrap();
        assert_eq!(back.attributes("A"), fifo);
        assert_eq!(back.attributes("B")["message.type"], "DELAY");
        assert!(back.attributes("C").is_empty());
        // A table written before attributes existed (4-element rows) still loads.
        let text = std::fs::read_to_string(TopicTable::file(dir.path())).unwrap();
        assert!(
            text.contains("\"C\",\n    1,\n    1,\n    6\n  ]"),
            "{text}"
        );
        // Deleting a topic drops its attributes: one created again under the name has none.
        let mut back = back;
        assert!(back.remove("A"));
        back.upsert(a);
        assert!(back.attributes("A").is_empty());
    }

    #[test]
    fn attribute_changes_are_checked_as_rocketmq_checks_them() {
        let none = Attributes::new();
        let fifo = alter_attributes(true, &none, "+message.type=FIFO").unwrap();
        assert_eq!(
            fifo,
            Attributes::from([("message.type".into(), "FIFO".into())])
        );
        // No modification keeps what the topic has; a change replaces one value.
        assert_eq!(alter_attributes(false, &fifo, "").unwrap(), fifo);
        let delay = alter_attributes(false, &fifo, "+message.type=DELAY").unwrap();
        assert_eq!(delay["message.type"], "DELAY");
        assert!(alter_attributes(false, &fifo, "-message.type")
            .unwrap()
            .is_empty());
        let refused = |create: bool, current: &Attributes, m: &str| {
            alter_attributes(create, current, m)
                .unwrap_err()
                .to_string()
        };
        assert_eq!(
            refused(true, &none, "+colour=red"),
            "unsupported key: colour"
        );
        assert!(
            refused(true, &none, "+message.type=URGENT").starts_with("value is not in set: ["),
            "a bad value is refused"
        );
        assert_eq!(
            refused(true, &none, "message.type=FIFO"),
            "add/alter attribute format is wrong: message.type"
        );
        assert_eq!(
            refused(true, &none, "-message.type"),
            "only add attribute is supported while creating topic. key: message.type"
        );
        assert_eq!(
            refused(false, &none, "-message.type"),
            "attempt to delete a nonexistent key: message.type"
        );
        assert_eq!(
            refused(false, &none, "+queue.type=SimpleCQ"),
            "attempt to update an unchangeable attribute. key: queue.type"
        );
        assert_eq!(
            refused(true, &none, "+message.type=FIFO,+message.type=NORMAL"),
            "key duplication: +message.type"
        );
        assert!(matches!(
            alter_attributes(true, &none, "+message.type=MIXED"),
            Err(TopicError::MixedMessageType)
        ));
        // What corvus cannot honour is refused, not stored and ignored.
        assert!(refused(true, &none, "+cleanup.policy=COMPACTION").contains("not supported"));
        assert!(refused(true, &none, "+queue.type=BatchCQ").contains("not supported"));
        assert_eq!(
            alter_attributes(true, &none, "+queue.type=SimpleCQ,+cleanup.policy=DELETE")
                .unwrap()
                .len(),
            2
        );
    }
}
