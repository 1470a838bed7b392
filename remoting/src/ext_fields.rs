//! A command's `extFields`: string keys to string values, kept in key order so that encoding
//! is stable.
//!
//! Every request's header is decoded into one, so it is laid out for that: the keys and values
//! lie back to back in one string and the entries are spans into it, sorted by key. Decoding a
//! header of any number of fields makes two allocations, where a map of owned strings made
//! two per field and one per tree node; lookups compare the few keys a header has in place.
//! A value that is replaced or removed stays in the string until the map is dropped (headers
//! are built once and read, so nothing grows without bound in practice).

use std::fmt::{self, Write as _};

use serde::ser::{Serialize, SerializeMap, Serializer};

/// Where one key or value lies in [`ExtFields::text`].
#[derive(Clone, Copy)]
struct Span {
    start: usize,
    end: usize,
}

/// A key's first 8 bytes as a big-endian number (zero-padded): keys compare by it first, in
/// the same order as their bytes, so a search compares numbers and only reads two keys whose
/// first 8 bytes agree.
fn prefix(key: &str) -> u64 {
    let mut b = [0u8; 8];
    let n = key.len().min(8);
    b[..n].copy_from_slice(&key.as_bytes()[..n]);
    u64::from_be_bytes(b)
}

/// One entry: its key's [`prefix`], where its key and value lie.
#[derive(Clone, Copy)]
struct Entry {
    prefix: u64,
    key: Span,
    value: Span,
}

/// The `extFields` map. Iteration is in key order, as a `BTreeMap`'s.
#[derive(Clone, Default)]
pub struct ExtFields {
    /// Every key and value written so far, back to back.
    text: String,
    /// The entries, sorted by key (byte order), keys unique.
    entries: Vec<Entry>,
}

impl ExtFields {
    pub fn new() -> Self {
        ExtFields::default()
    }

    /// An empty map with room for `fields` entries of `text_bytes` bytes of keys and values.
    pub fn with_capacity(text_bytes: usize, fields: usize) -> Self {
        ExtFields {
            text: String::with_capacity(text_bytes),
            entries: Vec::with_capacity(fields),
        }
    }

    fn at(&self, s: Span) -> &str {
        &self.text[s.start..s.end]
    }

    fn find(&self, key: &str) -> Result<usize, usize> {
        let p = prefix(key);
        self.entries.binary_search_by(|e| {
            e.prefix.cmp(&p).then_with(|| {
                if key.len() <= 8 && e.key.end - e.key.start <= 8 {
                    // Equal prefixes of keys of at most 8 bytes: the shorter comes first.
                    (e.key.end - e.key.start).cmp(&key.len())
                } else {
                    self.at(e.key).cmp(key)
                }
            })
        })
    }

    fn push_text(&mut self, s: &str) -> Span {
        let start = self.text.len();
        self.text.push_str(s);
        Span {
            start,
            end: self.text.len(),
        }
    }

    fn put_value(&mut self, key: &str, value: Span) {
        match self.find(key) {
            Ok(i) => self.entries[i].value = value,
            Err(i) => {
                let k = self.push_text(key);
                self.entries.insert(
                    i,
                    Entry {
                        prefix: prefix(key),
                        key: k,
                        value,
                    },
                );
            }
        }
    }

    /// Adds `key` and `value` at the end, unordered: a decoder adds every field of a header
    /// so and then calls [`ExtFields::sort_added`] once, rather than searching for each.
    pub(crate) fn add_unsorted(&mut self, key: &str, value: &str) {
        let k = self.push_text(key);
        let v = self.push_text(value);
        self.entries.push(Entry {
            prefix: prefix(key),
            key: k,
            value: v,
        });
    }

    /// Puts the entries added by [`ExtFields::add_unsorted`] in key order; of a key added more
    /// than once, the last value stays, as if each had been set in turn.
    pub(crate) fn sort_added(&mut self) {
        let mut entries = std::mem::take(&mut self.entries);
        // Stable: equal keys keep the order they came in.
        entries.sort_by(|a, b| {
            a.prefix
                .cmp(&b.prefix)
                .then_with(|| self.at(a.key).cmp(self.at(b.key)))
        });
        // Of a run of equal keys the first entry stays, carrying the run's last value.
        entries.dedup_by(|later, kept| {
            let same = self.at(later.key) == self.at(kept.key);
            if same {
                kept.value = later.value;
            }
            same
        });
        self.entries = entries;
    }

    /// Sets `key` to `value`, replacing what it had.
    pub fn set(&mut self, key: &str, value: &str) {
        let v = self.push_text(value);
        self.put_value(key, v);
    }

    /// Sets `key` to `value` as `Display` writes it, with no string in between.
    pub fn set_display(&mut self, key: &str, value: impl fmt::Display) {
        let start = self.text.len();
        // Writing into a String cannot fail.
        let _ = write!(self.text, "{value}");
        let v = Span {
            start,
            end: self.text.len(),
        };
        self.put_value(key, v);
    }

    /// `BTreeMap::insert`'s form: sets `key` to `value` and returns the value it replaced.
    pub fn insert(&mut self, key: String, value: String) -> Option<String> {
        let old = self.get(&key).map(str::to_owned);
        self.set(&key, &value);
        old
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        self.find(key).ok().map(|i| self.at(self.entries[i].value))
    }

    pub fn contains_key(&self, key: &str) -> bool {
        self.find(key).is_ok()
    }

    /// Takes `key` out; its value, if it had one.
    pub fn remove(&mut self, key: &str) -> Option<String> {
        let i = self.find(key).ok()?;
        let e = self.entries.remove(i);
        Some(self.at(e.value).to_owned())
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The entries in key order.
    pub fn iter(&self) -> Iter<'_> {
        Iter {
            fields: self,
            entries: self.entries.iter(),
        }
    }

    /// The keys in order.
    pub fn keys(&self) -> impl Iterator<Item = &str> + '_ {
        self.entries.iter().map(|e| self.at(e.key))
    }

    /// Sets every entry of `other` here.
    pub fn extend_from(&mut self, other: &ExtFields) {
        self.text.reserve(other.text.len());
        for (k, v) in other.iter() {
            self.set(k, v);
        }
    }
}

/// [`ExtFields::iter`]: `(key, value)` in key order.
#[derive(Clone)]
pub struct Iter<'a> {
    fields: &'a ExtFields,
    entries: std::slice::Iter<'a, Entry>,
}

impl<'a> Iterator for Iter<'a> {
    type Item = (&'a str, &'a str);
    fn next(&mut self) -> Option<Self::Item> {
        let e = self.entries.next()?;
        Some((self.fields.at(e.key), self.fields.at(e.value)))
    }
    fn size_hint(&self) -> (usize, Option<usize>) {
        self.entries.size_hint()
    }
}

impl<'a> IntoIterator for &'a ExtFields {
    type Item = (&'a str, &'a str);
    type IntoIter = Iter<'a>;
    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

impl<K: AsRef<str>, V: AsRef<str>> Extend<(K, V)> for ExtFields {
    fn extend<I: IntoIterator<Item = (K, V)>>(&mut self, iter: I) {
        for (k, v) in iter {
            self.set(k.as_ref(), v.as_ref());
        }
    }
}

impl<K: AsRef<str>, V: AsRef<str>> FromIterator<(K, V)> for ExtFields {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> Self {
        let mut fields = ExtFields::new();
        fields.extend(iter);
        fields
    }
}

/// `fields["key"]`, as a map's index: panics when the key is absent.
impl std::ops::Index<&str> for ExtFields {
    type Output = str;
    fn index(&self, key: &str) -> &str {
        match self.get(key) {
            Some(v) => v,
            None => panic!("no extFields key {key:?}"),
        }
    }
}

impl PartialEq for ExtFields {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}

impl Eq for ExtFields {}

impl fmt::Debug for ExtFields {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

impl Serialize for ExtFields {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(self.len()))?;
        for (k, v) in self.iter() {
            map.serialize_entry(k, v)?;
        }
        map.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_keys_in_order_and_replaces_values() {
        let mut f = ExtFields::new();
        f.set("topic", "T");
        f.set("a", "group");
        f.set_display("queueId", 7);
        assert_eq!(f.insert("topic".into(), "U".into()), Some("T".into()));
        assert_eq!(f.insert("b".into(), String::new()), None);
        let all: Vec<(&str, &str)> = f.iter().collect();
        assert_eq!(
            all,
            [("a", "group"), ("b", ""), ("queueId", "7"), ("topic", "U")]
        );
        assert_eq!(f.get("queueId"), Some("7"));
        assert_eq!(f.get("queue"), None);
        assert_eq!(f.remove("a"), Some("group".into()));
        assert!(!f.contains_key("a"));
        assert_eq!(f.len(), 3);
        assert_eq!(
            format!("{f:?}"),
            r#"{"b": "", "queueId": "7", "topic": "U"}"#
        );
    }

    #[test]
    fn orders_keys_by_their_bytes_whatever_their_length() {
        let keys = [
            "b",
            "a",
            "ab",
            "a\u{0}",
            "abcdefgh",
            "abcdefg",
            "abcdefghi",
            "abcdefgha",
            "abcdefgh\u{0}",
            "topic",
            "AccessKey",
            "",
            "z",
            "zzzzzzzzzzzz",
        ];
        let mut f = ExtFields::new();
        for (i, k) in keys.iter().enumerate() {
            f.set_display(k, i);
        }
        let mut sorted = keys.to_vec();
        sorted.sort();
        assert_eq!(f.keys().collect::<Vec<_>>(), sorted);
        for (i, k) in keys.iter().enumerate() {
            assert_eq!(f.get(k), Some(i.to_string().as_str()), "{k:?}");
        }
        for absent in ["c", "abc", "abcdefgz", "abcdefghij", "a\u{0}\u{0}"] {
            assert_eq!(f.get(absent), None, "{absent:?}");
        }
    }

    #[test]
    fn added_unsorted_then_sorted_is_as_if_set_in_turn() {
        let pairs = [
            ("b", "1"),
            ("topic", "T"),
            ("a", "x"),
            ("b", "2"),
            ("abcdefghi", "y"),
        ];
        let mut added = ExtFields::new();
        let mut set = ExtFields::new();
        for (k, v) in pairs {
            added.add_unsorted(k, v);
            set.set(k, v);
        }
        added.sort_added();
        assert_eq!(added, set);
        assert_eq!(added.get("b"), Some("2"));
        assert_eq!(added.len(), 4);
    }

    #[test]
    fn equal_by_entries_not_by_history() {
        let mut a = ExtFields::new();
        a.set("k", "old");
        a.set("k", "v");
        a.set("x", "1");
        let b: ExtFields = [("x", "1"), ("k", "v")].into_iter().collect();
        assert_eq!(a, b);
        let mut c = ExtFields::new();
        c.extend_from(&b);
        assert_eq!(c, a);
        assert_eq!(serde_json::to_string(&c).unwrap(), r#"{"k":"v","x":"1"}"#);
    }
}
