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
}

pub struct PropertiesIter<'a> {
    rest: &'a [u8],
}

impl<'a> Iterator for PropertiesIter<'a> {
    type Item = (&'a str, &'a str);

    fn next(&mut self) -> Option<Self::Item> {
        while !self.rest.is_empty() {
            let end = self
                .rest
                .iter()
                .position(|&b| b == 2)
                .unwrap_or(self.rest.len());
            let entry = &self.rest[..end];
            self.rest = self.rest.get(end + 1..).unwrap_or(&[]);
            let Some(sep) = entry.iter().position(|&b| b == 1) else {
                continue;
            };
            let (Ok(k), Ok(v)) = (
                std::str::from_utf8(&entry[..sep]),
                std::str::from_utf8(&entry[sep + 1..]),
            ) else {
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

    #[test]
    fn parses_pairs_and_skips_garbage() {
        let raw = b"TAGS\x01TagA\x02junk\x02KEYS\x01a b\x02\xff\x01x\x02";
        let p = Properties::new(raw);
        let all: Vec<_> = p.iter().collect();
        assert_eq!(all, vec![("TAGS", "TagA"), ("KEYS", "a b")]);
        assert_eq!(p.get("KEYS"), Some("a b"));
        assert_eq!(p.get("NOPE"), None);
    }
}
