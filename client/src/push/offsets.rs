//! Broadcasting's offsets: every member consumes every queue, so its progress is its own and
//! lives in a local file rather than on the brokers.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Mutex;

use super::lock;
use crate::error::{ClientError, Result};
use crate::model::{MessageQueue, QueueOffset};

/// Broadcasting offsets: one JSON file per group, written with a temporary file and a rename.
pub(super) struct LocalOffsetStore {
    path: PathBuf,
    offsets: Mutex<BTreeMap<String, u64>>,
}

impl LocalOffsetStore {
    fn key(q: &MessageQueue) -> String {
        format!("{}@{}@{}", q.topic, q.broker_name, q.queue_id)
    }

    pub(super) fn open(path: PathBuf) -> Result<LocalOffsetStore> {
        let offsets = match std::fs::read_to_string(&path) {
            Ok(text) => serde_json::from_str(&text).map_err(|e| {
                ClientError::Config(format!("offsets file {} is corrupt: {e}", path.display()))
            })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => BTreeMap::new(),
            Err(e) => return Err(ClientError::io(&path.display().to_string(), &e)),
        };
        Ok(LocalOffsetStore {
            path,
            offsets: Mutex::new(offsets),
        })
    }

    pub(super) fn get(&self, q: &MessageQueue) -> Option<QueueOffset> {
        lock(&self.offsets)
            .get(&Self::key(q))
            .copied()
            .map(QueueOffset)
    }

    pub(super) fn set(&self, q: &MessageQueue, off: QueueOffset) {
        lock(&self.offsets).insert(Self::key(q), off.0);
    }

    pub(super) fn persist(&self) {
        let text = match serde_json::to_string(&*lock(&self.offsets)) {
            Ok(t) => t,
            Err(e) => {
                tracing::warn!(error = %e, "cannot encode offsets");
                return;
            }
        };
        let tmp = self.path.with_extension("json.tmp");
        let r = self
            .path
            .parent()
            .map_or(Ok(()), std::fs::create_dir_all)
            .and_then(|_| std::fs::write(&tmp, text))
            .and_then(|_| std::fs::rename(&tmp, &self.path));
        if let Err(e) = r {
            tracing::warn!(path = %self.path.display(), error = %e, "cannot write offsets");
        }
    }
}
