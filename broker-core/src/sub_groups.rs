//! Subscription group configs (RocketMQ's `GroupConfig`, set by mqadmin's
//! updateSubGroup): a small table core 0 owns and keeps in `<data dir>/config/subscription_groups.json`,
//! rewritten whole at every change (a temporary file, fsync, rename, fsync of the directory),
//! since changes are rare and the table is small. Other cores reach it through the mesh
//! (`mesh::SubGroupOp`).
//!
//! What takes effect: `retryMaxTimes` bounds the reconsumes of a RocketMQ client's send-back
//! (CONSUMER_SEND_MSG_BACK) before the message goes to the DLQ; the attribute
//! `priority.factor` sets how many of the group's pops of a PRIORITY topic read the higher
//! priorities first ([`crate::priority`]). The other fields are stored and listed only.
//!
//! Beside them, the same table keeps how each group consumes each topic when the broker
//! assigns its queues (RocketMQ's message request modes, set by mqadmin's setConsumeMode,
//! asked by QUERY_ASSIGNMENT), in `<data dir>/config/message_request_modes.json`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

const FILE: &str = "subscription_groups.json";
const MODES_FILE: &str = "message_request_modes.json";

pub use broker_base::config::MessageRequestMode as ConsumeMode;

/// How one group consumes one topic: RocketMQ's `SetMessageRequestModeRequestBody`, in its
/// JSON form.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RequestMode {
    pub topic: String,
    pub consumer_group: String,
    pub mode: ConsumeMode,
    /// In POP mode, how many members after each one also get its queues; 0 or less: every
    /// member pops every broker.
    #[serde(default)]
    pub pop_share_queue_num: i32,
}
/// The config field of a group's attributes (RocketMQ 5's `SubscriptionGroupConfig.attributes`).
const ATTRIBUTES: &str = "attributes";

/// One subscription group's config as a front end gave it: a JSON object in RocketMQ's
/// `GroupConfig` form (`groupName`, `retryMaxTimes`, ...). The kernel keeps,
/// persists and lists it whole, fields it does not know included; the front ends read it.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(try_from = "Map<String, Value>", into = "Map<String, Value>")]
pub struct GroupConfig {
    name: String,
    fields: Map<String, Value>,
}

impl GroupConfig {
    /// The JSON key of the group's name.
    pub const NAME_KEY: &'static str = "groupName";

    /// The config `fields` hold; they must name the group (a non-empty `groupName`).
    pub fn new(fields: Map<String, Value>) -> Result<GroupConfig, String> {
        match fields.get(Self::NAME_KEY) {
            Some(Value::String(name)) if !name.is_empty() => Ok(GroupConfig {
                name: name.clone(),
                fields,
            }),
            _ => Err(format!("{} is required", Self::NAME_KEY)),
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn fields(&self) -> &Map<String, Value> {
        &self.fields
    }
}

impl TryFrom<Map<String, Value>> for GroupConfig {
    type Error = String;

    fn try_from(fields: Map<String, Value>) -> Result<Self, String> {
        GroupConfig::new(fields)
    }
}

impl From<GroupConfig> for Map<String, Value> {
    fn from(g: GroupConfig) -> Self {
        g.fields
    }
}

#[derive(Debug, Clone, Default)]
pub struct SubGroupTable {
    groups: BTreeMap<String, GroupConfig>,
    /// By (topic, group).
    modes: BTreeMap<(String, String), RequestMode>,
}

#[derive(Debug, thiserror::Error)]
pub enum SubGroupError {
    #[error("cannot read {path}: {message}")]
    Load { path: PathBuf, message: String },
    #[error("cannot write {path}: {message}")]
    Persist { path: PathBuf, message: String },
}

impl SubGroupTable {
    pub fn file(data_dir: &Path) -> PathBuf {
        data_dir.join("config").join(FILE)
    }

    pub fn modes_file(data_dir: &Path) -> PathBuf {
        data_dir.join("config").join(MODES_FILE)
    }

    /// The table in `data_dir`, empty when there are no files yet.
    pub fn load(data_dir: &Path) -> Result<SubGroupTable, SubGroupError> {
        let groups: Vec<GroupConfig> = load_list(&Self::file(data_dir))?;
        let modes: Vec<RequestMode> = load_list(&Self::modes_file(data_dir))?;
        Ok(SubGroupTable {
            groups: groups.into_iter().map(|g| (g.name.clone(), g)).collect(),
            modes: modes
                .into_iter()
                .map(|m| ((m.topic.clone(), m.consumer_group.clone()), m))
                .collect(),
        })
    }

    /// Writes the table durably (see [`crate::durable::replace`]).
    pub fn persist(&self, data_dir: &Path) -> Result<(), SubGroupError> {
        persist_list(&Self::file(data_dir), self.groups.values())?;
        persist_list(&Self::modes_file(data_dir), self.modes.values())
    }

    /// Stores `cfg` in place of the group's config. Its `attributes` change the group's
    /// current ones as RocketMQ's broker changes them (`AttributeUtil.alterCurrentAttributes`,
    /// as `updateSubGroup -a +key=value,-key` sends them): `+key` sets, `-key` removes, a plain
    /// key (a config read back and sent again) sets; none keeps the current ones.
    pub fn upsert(&mut self, mut cfg: GroupConfig) {
        let current = self
            .groups
            .get(&cfg.name)
            .and_then(|g| g.fields.get(ATTRIBUTES))
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        let asked = cfg
            .fields
            .get(ATTRIBUTES)
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        let mut merged = current;
        for (key, value) in asked {
            if let Some(name) = key.strip_prefix('-') {
                merged.remove(name);
            } else {
                merged.insert(key.strip_prefix('+').unwrap_or(&key).to_owned(), value);
            }
        }
        if merged.is_empty() {
            cfg.fields.remove(ATTRIBUTES);
        } else {
            cfg.fields
                .insert(ATTRIBUTES.to_owned(), Value::Object(merged));
        }
        self.groups.insert(cfg.name.clone(), cfg);
    }

    /// Whether the group was there.
    pub fn remove(&mut self, group: &str) -> bool {
        self.groups.remove(group).is_some()
    }

    pub fn get(&self, group: &str) -> Option<&GroupConfig> {
        self.groups.get(group)
    }

    pub fn all(&self) -> Vec<GroupConfig> {
        self.groups.values().cloned().collect()
    }

    /// Sets how a group consumes a topic.
    pub fn set_mode(&mut self, mode: RequestMode) {
        let key = (mode.topic.clone(), mode.consumer_group.clone());
        self.modes.insert(key, mode);
    }

    /// How `group` consumes `topic`, when it was set.
    pub fn mode(&self, topic: &str, group: &str) -> Option<&RequestMode> {
        self.modes.get(&(topic.to_owned(), group.to_owned()))
    }
}

/// The JSON list in `path`; empty when there is no file.
fn load_list<T: serde::de::DeserializeOwned>(path: &Path) -> Result<Vec<T>, SubGroupError> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => {
            return Err(SubGroupError::Load {
                path: path.to_owned(),
                message: e.to_string(),
            })
        }
    };
    serde_json::from_str(&text).map_err(|e| SubGroupError::Load {
        path: path.to_owned(),
        message: e.to_string(),
    })
}

/// Writes `items` to `path` as a JSON list, durably (see [`crate::durable::replace`]).
fn persist_list<'a, T: serde::Serialize + 'a>(
    path: &Path,
    items: impl Iterator<Item = &'a T>,
) -> Result<(), SubGroupError> {
    let err = |message: String| SubGroupError::Persist {
        path: path.to_owned(),
        message,
    };
    let list: Vec<&T> = items.collect();
    let text = serde_json::to_string_pretty(&list).map_err(|e| err(e.to_string()))?;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| err(e.to_string()))?;
    }
    crate::durable::replace(path, text.as_bytes()).map_err(|e| err(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn group(name: &str, retry_max_times: i64) -> GroupConfig {
        let mut fields = Map::new();
        fields.insert(GroupConfig::NAME_KEY.into(), name.into());
        fields.insert("retryMaxTimes".into(), retry_max_times.into());
        fields.insert("aFieldOfALaterRelease".into(), Value::Bool(true));
        GroupConfig::new(fields).unwrap()
    }

    fn with_attributes(name: &str, attributes: Value) -> GroupConfig {
        let mut fields = Map::new();
        fields.insert(GroupConfig::NAME_KEY.into(), name.into());
        fields.insert(ATTRIBUTES.into(), attributes);
        GroupConfig::new(fields).unwrap()
    }

    fn attributes(t: &SubGroupTable, name: &str) -> Option<Value> {
        t.get(name).unwrap().fields().get(ATTRIBUTES).cloned()
    }

    #[test]
    fn attributes_change_as_rocketmq_changes_them() {
        let mut t = SubGroupTable::default();
        t.upsert(with_attributes(
            "G",
            serde_json::json!({"+priority.factor": "30", "+other": "x"}),
        ));
        assert_eq!(
            attributes(&t, "G"),
            Some(serde_json::json!({"priority.factor": "30", "other": "x"}))
        );
        // An update without attributes keeps them.
        t.upsert(group("G", 3));
        assert_eq!(
            attributes(&t, "G"),
            Some(serde_json::json!({"priority.factor": "30", "other": "x"}))
        );
        t.upsert(with_attributes(
            "G",
            serde_json::json!({"-other": "", "priority.factor": "50"}),
        ));
        assert_eq!(
            attributes(&t, "G"),
            Some(serde_json::json!({"priority.factor": "50"}))
        );
        t.upsert(with_attributes(
            "G",
            serde_json::json!({"-priority.factor": ""}),
        ));
        assert_eq!(attributes(&t, "G"), None);
    }

    #[test]
    fn groups_survive_a_reload_whole_and_a_removal_is_kept() {
        let dir = tempfile::tempdir().unwrap();
        assert!(SubGroupTable::load(dir.path()).unwrap().all().is_empty());
        let mut t = SubGroupTable::default();
        let g = group("G1", 3);
        t.upsert(g.clone());
        t.upsert(group("G2", 16));
        t.persist(dir.path()).unwrap();
        let back = SubGroupTable::load(dir.path()).unwrap();
        assert_eq!(back.get("G1"), Some(&g));
        assert_eq!(back.all().len(), 2);
        let mut back = back;
        assert!(back.remove("G2"));
        assert!(!back.remove("G2"));
        back.persist(dir.path()).unwrap();
        let names: Vec<String> = SubGroupTable::load(dir.path())
            .unwrap()
            .all()
            .into_iter()
            .map(|g| g.name().to_owned())
            .collect();
        assert_eq!(names, ["G1"]);
        std::fs::write(SubGroupTable::file(dir.path()), "[{").unwrap();
        assert!(SubGroupTable::load(dir.path()).is_err());
        std::fs::write(SubGroupTable::file(dir.path()), r#"[{"retryMaxTimes":1}]"#).unwrap();
        assert!(SubGroupTable::load(dir.path()).is_err());
    }

    #[test]
    fn request_modes_survive_a_reload_and_a_second_set_replaces_the_first() {
        let dir = tempfile::tempdir().unwrap();
        let mut t = SubGroupTable::default();
        // RocketMQ's SetMessageRequestModeRequestBody as mqadmin sends it.
        let pop: RequestMode = serde_json::from_str(
            r#"{"consumerGroup":"G","mode":"POP","popShareQueueNum":0,"topic":"T"}"#,
        )
        .unwrap();
        t.set_mode(pop.clone());
        t.set_mode(RequestMode {
            topic: "T2".into(),
            consumer_group: "G".into(),
            mode: ConsumeMode::Pull,
            pop_share_queue_num: -1,
        });
        t.persist(dir.path()).unwrap();
        let mut back = SubGroupTable::load(dir.path()).unwrap();
        assert_eq!(back.mode("T", "G"), Some(&pop));
        assert_eq!(
            back.mode("T2", "G").map(|m| m.mode),
            Some(ConsumeMode::Pull)
        );
        assert_eq!(back.mode("T", "H"), None);
        back.set_mode(RequestMode {
            pop_share_queue_num: 2,
            ..pop
        });
        back.persist(dir.path()).unwrap();
        let again = SubGroupTable::load(dir.path()).unwrap();
        assert_eq!(again.mode("T", "G").map(|m| m.pop_share_queue_num), Some(2));
    }
}
