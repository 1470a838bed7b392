//! RocketMQ's NameServer KV config (PUT_KV_CONFIG, GET_KV_CONFIG, DELETE_KV_CONFIG,
//! GET_KVLIST_BY_NAMESPACE): values by namespace and key, which mqadmin's `updateKvConfig`,
//! `deleteKvConfig` and `updateOrderConf` (namespace `ORDER_TOPIC_CONFIG`) set and clients
//! read. Kept in memory, and with `--kv-config-path` also in that file (RocketMQ's
//! `kvConfig.json` form, `{"configTable": {namespace: {key: value}}}`), rewritten whole at
//! each change (a temporary file, fsync, rename) and read at start.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;

#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct KvFile {
    #[serde(default)]
    config_table: BTreeMap<String, BTreeMap<String, String>>,
}

#[derive(Debug, Default)]
pub struct KvStore {
    path: Option<PathBuf>,
    table: BTreeMap<String, BTreeMap<String, String>>,
}

impl KvStore {
    /// The store kept in `path` (read now; empty when the file does not exist yet), or in
    /// memory only.
    pub fn open(path: Option<PathBuf>) -> Result<KvStore, String> {
        let table = match &path {
            Some(p) => match std::fs::read_to_string(p) {
                Ok(text) => {
                    serde_json::from_str::<KvFile>(&text)
                        .map_err(|e| format!("{}: {e}", p.display()))?
                        .config_table
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => BTreeMap::new(),
                Err(e) => return Err(format!("{}: {e}", p.display())),
            },
            None => BTreeMap::new(),
        };
        Ok(KvStore { path, table })
    }

    pub fn get(&self, namespace: &str, key: &str) -> Option<&str> {
        self.table.get(namespace)?.get(key).map(String::as_str)
    }

    pub fn namespace(&self, namespace: &str) -> Option<&BTreeMap<String, String>> {
        self.table.get(namespace).filter(|t| !t.is_empty())
    }

    /// Sets a value; written to the file before it returns.
    pub fn put(&mut self, namespace: &str, key: &str, value: &str) -> Result<(), String> {
        self.table
            .entry(namespace.to_owned())
            .or_default()
            .insert(key.to_owned(), value.to_owned());
        self.persist()
    }

    /// Removes a value (nothing to do when absent); written to the file before it returns.
    pub fn delete(&mut self, namespace: &str, key: &str) -> Result<(), String> {
        let Some(t) = self.table.get_mut(namespace) else {
            return Ok(());
        };
        if t.remove(key).is_none() {
            return Ok(());
        }
        if t.is_empty() {
            self.table.remove(namespace);
        }
        self.persist()
    }

    fn persist(&self) -> Result<(), String> {
        let Some(path) = &self.path else {
            return Ok(());
        };
        let err = |e: std::io::Error| format!("cannot write {}: {e}", path.display());
        let text = serde_json::to_string_pretty(&KvFile {
            config_table: self.table.clone(),
        })
        .map_err(|e| e.to_string())?;
        let dir = path.parent().filter(|d| !d.as_os_str().is_empty());
        if let Some(dir) = dir {
            std::fs::create_dir_all(dir).map_err(err)?;
        }
        let tmp = path.with_extension("json.tmp");
        let mut f = std::fs::File::create(&tmp).map_err(err)?;
        f.write_all(text.as_bytes()).map_err(err)?;
        f.sync_all().map_err(err)?;
        std::fs::rename(&tmp, path).map_err(err)?;
        if let Some(dir) = dir {
            std::fs::File::open(dir)
                .and_then(|d| d.sync_all())
                .map_err(err)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn values_survive_a_reopen_and_deletes_are_kept() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("namesrv").join("kvConfig.json");
        let mut kv = KvStore::open(Some(path.clone())).unwrap();
        assert_eq!(kv.get("ORDER_TOPIC_CONFIG", "T"), None);
        kv.put("ORDER_TOPIC_CONFIG", "T", "broker-a:4").unwrap();
        kv.put("NS", "k", "v").unwrap();
        kv.delete("NS", "k").unwrap();
        kv.delete("NS", "absent").unwrap();
        let back = KvStore::open(Some(path.clone())).unwrap();
        assert_eq!(back.get("ORDER_TOPIC_CONFIG", "T"), Some("broker-a:4"));
        assert!(back.namespace("NS").is_none());
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.contains("configTable"), "{text}");
        std::fs::write(&path, "{").unwrap();
        assert!(KvStore::open(Some(path)).is_err());
        // In memory only: nothing is written anywhere.
        let mut mem = KvStore::open(None).unwrap();
        mem.put("a", "b", "c").unwrap();
        assert_eq!(mem.get("a", "b"), Some("c"));
    }
}
