//! RocketMQ's properties string: `key 0x01 value 0x02` repeated.

/// A borrowed properties string. Entries that are not valid UTF-8 or lack a separator are
/// skipped rather than trusted.
#[derive(Debug, Clone, Copy)]
pub struct Properties<'a> {
    raw: &'a [u8],
}

impl<'a> Properties<'a> {
    pub fn new(raw: &'a [u8]) -> Self {
        Properties { raw }
    }

    pub fn iter(&self) -> PropertiesIter<'a> {
        PropertiesIter { rest: self.raw }
    }

    pub fn get(&self, key: &str) -> Option<&'a str> {
        self.iter().find(|(k, _)| *k == key).map(|(_, v)| v)
    }

    /// `get("UNIQ_KEY")`, found by searching for the key where an entry starts rather than
    /// walking every entry.
    pub fn uniq_key(&self) -> Option<&'a str> {
        static FINDER: std::sync::LazyLock<memchr::memmem::Finder<'static>> =
            std::sync::LazyLock::new(|| memchr::memmem::Finder::new(b"UNIQ_KEY\x01"));
        // The key holds no separator, so a match lies inside one entry, and the matches
        // found one after another never skip one that starts an entry.
        for at in FINDER.find_iter(self.raw) {
            if at != 0 && self.raw[at - 1] != 2 {
                continue;
            }
            let rest = &self.raw[at + FINDER.needle().len()..];
            let end = memchr::memchr(2, rest).unwrap_or(rest.len());
            if let Some(v) = utf8(&rest[..end]) {
                return Some(v);
            }
        }
        None
    }
}

/// The properties the store indexes (TAGS, KEYS, UNIQ_KEY), found in one pass.
///
/// Each value is exactly what [`Properties::get`] returns for its key: the first entry with
/// that key whose value is valid UTF-8. Keys are compared as bytes and only the values of
/// these three keys are checked for UTF-8, so the scan costs one pass over the bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IndexedProperties<'a> {
    pub tags: Option<&'a str>,
    /// Business keys, space separated (see [`IndexedProperties::keys`]).
    pub keys: Option<&'a str>,
    pub uniq_key: Option<&'a str>,
    /// Whether one of the scheduled-delivery keys ([`crate::timer::KEYS`]) is there: the
    /// record is held by the shard's timer until it is due (see [`crate::timer`]).
    pub timer: bool,
}

impl<'a> IndexedProperties<'a> {
    /// Scans a raw properties string once.
    pub fn scan(raw: &'a [u8]) -> Self {
        let mut found = IndexedProperties::default();
        let mut rest = raw;
        while !rest.is_empty() {
            let end = memchr::memchr(2, rest).unwrap_or(rest.len());
            let entry = &rest[..end];
            rest = rest.get(end + 1..).unwrap_or(&[]);
            let Some(sep) = memchr::memchr(1, entry) else {
                continue;
            };
            let slot = match &entry[..sep] {
                b"TAGS" => &mut found.tags,
                b"KEYS" => &mut found.keys,
                b"UNIQ_KEY" => &mut found.uniq_key,
                k => {
                    // Any entry naming a timer key marks the record, whatever its value:
                    // the shard then decides (`crate::timer::deliver_at_ms`) and refuses a
                    // bad one, so what is held never depends on a value read differently.
                    if crate::timer::KEYS.iter().any(|t| t.as_bytes() == k) {
                        found.timer = true;
                    }
                    continue;
                }
            };
            if slot.is_some() {
                continue;
            }
            // An invalid value is skipped, as `Properties::get` skips it.
            if let Some(v) = utf8(&entry[sep + 1..]) {
                *slot = Some(v);
            }
        }
        found
    }

    /// The business keys of KEYS (space separated, empty ones dropped).
    pub fn keys(&self) -> impl Iterator<Item = &'a str> {
        self.keys.unwrap_or("").split(' ').filter(|k| !k.is_empty())
    }

    /// Every key the IndexFile holds for this record: each of KEYS, then UNIQ_KEY.
    pub fn index_keys(&self) -> impl Iterator<Item = &'a str> {
        self.keys().chain(self.uniq_key)
    }

    /// The ConsumeQueue tag code (`crate::tag_hash` of TAGS, 0 without one).
    pub fn tag_hash(&self) -> i64 {
        self.tags.map(crate::tag_hash).unwrap_or(0)
    }
}

/// `bytes` as text if valid UTF-8. Values are nearly always ASCII, checked here without the
/// general decoder's call.
#[inline]
fn utf8(bytes: &[u8]) -> Option<&str> {
    if bytes.is_ascii() {
        // SAFETY: ASCII bytes are valid UTF-8.
        Some(unsafe { std::str::from_utf8_unchecked(bytes) })
    } else {
        std::str::from_utf8(bytes).ok()
    }
}

pub struct PropertiesIter<'a> {
    rest: &'a [u8],
}

impl<'a> Iterator for PropertiesIter<'a> {
    type Item = (&'a str, &'a str);

    fn next(&mut self) -> Option<Self::Item> {
        while !self.rest.is_empty() {
            let end = memchr::memchr(2, self.rest).unwrap_or(self.rest.len());
            let entry = &self.rest[..end];
            self.rest = self.rest.get(end + 1..).unwrap_or(&[]);
            let Some(sep) = memchr::memchr(1, entry) else {
                continue;
            };
            let (Some(k), Some(v)) = (utf8(&entry[..sep]), utf8(&entry[sep + 1..])) else {
                continue;
            };
            return Some((k, v));
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `uniq_key` finds what `get` finds, over every string of up to six of the pieces that
    /// matter (the key, separators, a value, a byte that is not UTF-8).
    #[test]
    fn uniq_key_is_what_get_finds() {
        let pieces: &[&[u8]] = &[b"UNIQ_KEY", b"\x01", b"\x02", b"v", b"\xff", b"_KEY"];
        for len in 0..=6u32 {
            for n in 0..pieces.len().pow(len) {
                let mut raw = Vec::new();
                let mut m = n;
                for _ in 0..len {
                    raw.extend_from_slice(pieces[m % pieces.len()]);
                    m /= pieces.len();
                }
                let p = Properties::new(&raw);
                assert_eq!(p.uniq_key(), p.get("UNIQ_KEY"), "in {raw:?}");
            }
        }
    }

    #[test]
    fn parses_pairs_and_skips_garbage() {
        let raw = b"TAGS\x01TagA\x02junk\x02KEYS\x01a b\x02\xff\x01x\x02";
        let p = Properties::new(raw);
        let all: Vec<_> = p.iter().collect();
        assert_eq!(all, vec![("TAGS", "TagA"), ("KEYS", "a b")]);
        assert_eq!(p.get("KEYS"), Some("a b"));
        assert_eq!(p.get("NOPE"), None);
    }

    /// The one-pass scan must agree with `Properties::get` on anything, garbage included.
    #[test]
    fn indexed_scan_agrees_with_get() {
        let cases: &[&[u8]] = &[
            b"",
            b"TAGS\x01TagA\x02KEYS\x01a b\x02UNIQ_KEY\x01U1\x02__CRC\x0100000000\x02",
            b"TAGS\x01\xff\x02TAGS\x01second\x02",
            b"TAGS\x01x\x02TAGS\x01y\x02KEYS",
            b"KEYS\x01k1  k2\x02UNIQ_KEY\x01u\x01v\x02TAGS\x01t",
            b"\x02\x02TAGS\x02UNIQ_KEY\x01\x02",
            b"TAGS\x01Tag__CRC\x0112345678\x02",
            b"\xffTAGS\x01no\x02",
        ];
        for raw in cases {
            let p = Properties::new(raw);
            let s = IndexedProperties::scan(raw);
            assert_eq!(s.tags, p.get("TAGS"), "{raw:?}");
            assert_eq!(s.keys, p.get("KEYS"), "{raw:?}");
            assert_eq!(s.uniq_key, p.get("UNIQ_KEY"), "{raw:?}");
        }
        // Pseudo-random bytes drawn mostly from the separators and key letters.
        let alphabet = b"\x01\x02TAGSKEYUNIQ_\xff\xc3\xa9 a";
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for _ in 0..20_000 {
            let mut raw = Vec::new();
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let n = (x % 40) as usize;
            for _ in 0..n {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                raw.push(alphabet[(x % alphabet.len() as u64) as usize]);
            }
            let p = Properties::new(&raw);
            let s = IndexedProperties::scan(&raw);
            assert_eq!(s.tags, p.get("TAGS"), "{raw:?}");
            assert_eq!(s.keys, p.get("KEYS"), "{raw:?}");
            assert_eq!(s.uniq_key, p.get("UNIQ_KEY"), "{raw:?}");
        }
    }
}
