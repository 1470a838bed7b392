//! The topic table. Core 0 owns the authoritative copy and its file; every core holds a
//! replica that core 0 updates through the mesh (`CoreMessage::TopicChanged`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use protocol::{perm, TopicConfig};

/// RocketMQ's default topic: brokers that allow auto-creation register it, so producers can
/// find a broker for a topic nobody created yet.
pub const AUTO_CREATE_TOPIC_KEY: &str = "TBW102";

#[derive(Debug, Clone, Default)]
pub struct TopicTable {
    topics: BTreeMap<String, TopicConfig>,
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

impl TopicTable {
    pub fn file(data_dir: &Path) -> PathBuf {
        data_dir.join("config").join("topics.json")
    }

    /// Loads the table; a missing file is an empty table.
    pub fn load(data_dir: &Path) -> Result<TopicTable, TopicError> {
        let path = Self::file(data_dir);
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(TopicTable::default()),
            Err(e) => {
                return Err(TopicError::Corrupt {
                    path,
                    message: e.to_string(),
                })
            }
        };
        let rows: Vec<(String, u32, u32, u32)> =
            serde_json::from_str(&text).map_err(|e| TopicError::Corrupt {
                path: path.clone(),
                message: e.to_string(),
            })?;
        let mut table = TopicTable::default();
        for (name, read_queues, write_queues, perm) in rows {
            let cfg = TopicConfig {
                name,
                read_queues,
                write_queues,
                perm,
            };
            validate_topic(&cfg).map_err(|e| TopicError::Corrupt {
                path: path.clone(),
                message: e.to_string(),
            })?;
            table.topics.insert(cfg.name.clone(), cfg);
        }
        Ok(table)
    }

    /// Writes the table durably: a temporary file, fsync, rename, fsync of the directory.
    pub fn persist(&self, data_dir: &Path) -> Result<(), TopicError> {
        let path = Self::file(data_dir);
        let err = |e: std::io::Error| TopicError::Persist {
            path: path.clone(),
            message: e.to_string(),
        };
        let dir = path.parent().unwrap_or(data_dir);
        std::fs::create_dir_all(dir).map_err(err)?;
        let rows: Vec<(&str, u32, u32, u32)> = self
            .topics
            .values()
            .map(|t| (t.name.as_str(), t.read_queues, t.write_queues, t.perm))
            .collect();
        let text = serde_json::to_string_pretty(&rows).map_err(|e| TopicError::Persist {
            path: path.clone(),
            message: e.to_string(),
        })?;
        let tmp = path.with_extension("json.tmp");
        {
            use std::io::Write;
            let mut f = std::fs::File::create(&tmp).map_err(err)?;
            f.write_all(text.as_bytes()).map_err(err)?;
            f.sync_all().map_err(err)?;
        }
        std::fs::rename(&tmp, &path).map_err(err)?;
        std::fs::File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(err)?;
        Ok(())
    }

    pub fn get(&self, name: &str) -> Option<&TopicConfig> {
        self.topics.get(name)
    }

    pub fn upsert(&mut self, cfg: TopicConfig) {
        self.topics.insert(cfg.name.clone(), cfg);
    }

    pub fn all(&self) -> Vec<TopicConfig> {
        self.topics.values().cloned().collect()
    }

    /// The queues the table would hold with `cfg` upserted: each topic counts the larger of
    /// its read and write queue counts.
    pub fn queues_with(&self, cfg: &TopicConfig) -> u64 {
        let queues = |t: &TopicConfig| u64::from(t.read_queues.max(t.write_queues));
        let others: u64 = self
            .topics
            .values()
            .filter(|t| t.name != cfg.name)
            .map(queues)
            .sum();
        others + queues(cfg)
    }
}

#[cfg(test)]
mod tests {
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
}
