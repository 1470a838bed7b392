//! The one place mqadmin prints results. Every command builds a typed result and hands it
//! to [`Output::emit`], which prints it as text or, with `--json`, as JSON: a result's
//! serde form on one line, or one line per element for results scripts read as JSON lines
//! (messages, per-queue rows). Commands never print to stdout themselves.

use std::collections::BTreeMap;
use std::io::{self, Write};

use base64::Engine;
use serde::ser::{SerializeMap, Serializer};
use serde::Serialize;

/// How results are printed: `--json` or not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Text,
    Json,
}

/// A command's result, printable both ways.
pub trait Render: Serialize {
    /// The text form: whole lines, each ending in `\n`.
    fn text(&self, w: &mut dyn Write) -> io::Result<()>;

    /// The JSON form. By default the result's serde form on one line; results printed as
    /// JSON lines write one line per element instead.
    fn json(&self, w: &mut dyn Write) -> io::Result<()> {
        json_line(w, self)
    }
}

/// Writes one JSON document and a newline.
/// A time people read in text output: `yyyy-MM-dd HH:mm:ss.SSS` (UTC); `--json` keeps the
/// milliseconds since the epoch.
pub fn time_text(ms: i64) -> String {
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms.max(0) as u64);
    humantime::format_rfc3339_millis(t)
        .to_string()
        .replace('T', " ")
        .trim_end_matches('Z')
        .to_owned()
}

pub fn json_line<T: Serialize + ?Sized>(w: &mut dyn Write, value: &T) -> io::Result<()> {
    serde_json::to_writer(&mut *w, value)?;
    w.write_all(b"\n")
}

/// Renders a result in a format into bytes (what [`Output::emit`] writes).
pub fn render<R: Render + ?Sized>(format: Format, result: &R) -> io::Result<Vec<u8>> {
    let mut buf = Vec::new();
    match format {
        Format::Text => result.text(&mut buf)?,
        Format::Json => result.json(&mut buf)?,
    }
    Ok(buf)
}

/// Standard output in the format the command line chose.
pub struct Output {
    format: Format,
}

impl Output {
    pub fn new(format: Format) -> Self {
        Self { format }
    }

    /// Prints one result at once (a streaming command emits each record as it comes, so
    /// each is on the terminal, or in the pipe, before the command waits for the next).
    pub fn emit<R: Render + ?Sized>(&mut self, result: &R) -> io::Result<()> {
        let bytes = render(self.format, result)?;
        let mut out = io::stdout().lock();
        out.write_all(&bytes)?;
        out.flush()
    }
}

/// A list printed one element per line in JSON (JSON lines: no enclosing array) and one
/// element after the other in text.
#[derive(Debug, Serialize)]
#[serde(transparent)]
pub struct Lines<T>(pub Vec<T>);

impl<T: Render> Render for Lines<T> {
    fn text(&self, w: &mut dyn Write) -> io::Result<()> {
        self.0.iter().try_for_each(|r| r.text(w))
    }

    fn json(&self, w: &mut dyn Write) -> io::Result<()> {
        self.0.iter().try_for_each(|r| json_line(w, r))
    }
}

/// A message body in JSON: `"body"` as UTF-8 text when it is, else base64 with
/// `"body_encoding": "base64"` beside it. Used flattened into its message.
#[derive(Debug)]
pub struct Body<'a>(pub &'a [u8]);

impl Serialize for Body<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match std::str::from_utf8(self.0) {
            Ok(text) => {
                let mut map = s.serialize_map(Some(1))?;
                map.serialize_entry("body", text)?;
                map.end()
            }
            Err(_) => {
                let mut map = s.serialize_map(Some(2))?;
                let encoded = base64::engine::general_purpose::STANDARD.encode(self.0);
                map.serialize_entry("body", &encoded)?;
                map.serialize_entry("body_encoding", "base64")?;
                map.end()
            }
        }
    }
}

impl Body<'_> {
    /// The body as text (invalid UTF-8 replaced), as the text outputs print it.
    pub fn lossy(&self) -> std::borrow::Cow<'_, str> {
        String::from_utf8_lossy(self.0)
    }
}

/// Message properties as a JSON object (a repeated name keeps its last value).
#[derive(Debug)]
pub struct Properties<'a>(pub &'a [(String, String)]);

impl Serialize for Properties<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let map: BTreeMap<&str, &str> = self
            .0
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        s.collect_map(map)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    #[derive(Serialize)]
    struct Row {
        n: u32,
    }

    impl Render for Row {
        fn text(&self, w: &mut dyn Write) -> io::Result<()> {
            writeln!(w, "n={}", self.n)
        }
    }

    fn text_of<R: Render>(r: &R) -> String {
        String::from_utf8(render(Format::Text, r).unwrap()).unwrap()
    }

    fn json_of<R: Render>(r: &R) -> String {
        String::from_utf8(render(Format::Json, r).unwrap()).unwrap()
    }

    #[test]
    fn times_read_as_utc_dates() {
        assert_eq!(time_text(0), "1970-01-01 00:00:00.000");
        assert_eq!(time_text(1_796_500_850_199), "2026-12-05 20:00:50.199");
    }

    #[test]
    fn one_result_is_one_json_line_and_its_text() {
        assert_eq!(json_of(&Row { n: 3 }), "{\"n\":3}\n");
        assert_eq!(text_of(&Row { n: 3 }), "n=3\n");
    }

    #[test]
    fn lines_print_one_json_document_per_element() {
        let rows = Lines(vec![Row { n: 1 }, Row { n: 2 }]);
        assert_eq!(json_of(&rows), "{\"n\":1}\n{\"n\":2}\n");
        assert_eq!(text_of(&rows), "n=1\nn=2\n");
        assert_eq!(json_of(&Lines::<Row>(Vec::new())), "");
    }

    #[test]
    fn bodies_are_text_when_utf8_else_base64() {
        #[derive(Serialize)]
        struct M<'a> {
            id: u8,
            #[serde(flatten)]
            body: Body<'a>,
        }
        let v = serde_json::to_value(M {
            id: 1,
            body: Body(b"hello"),
        })
        .unwrap();
        assert_eq!(v, json!({"id": 1, "body": "hello"}));
        let v = serde_json::to_value(M {
            id: 1,
            body: Body(&[0xff, 0x00, 0xfe]),
        })
        .unwrap();
        assert_eq!(
            v,
            json!({"id": 1, "body": "/wD+", "body_encoding": "base64"})
        );
        assert_eq!(Body(&[b'a', 0xff]).lossy(), "a\u{fffd}");
    }

    #[test]
    fn properties_are_an_object() {
        let props = vec![
            ("shop".to_owned(), "north".to_owned()),
            ("TAGS".to_owned(), "A".to_owned()),
            ("shop".to_owned(), "south".to_owned()),
        ];
        let v: Value = serde_json::to_value(Properties(&props)).unwrap();
        assert_eq!(v, json!({"shop": "south", "TAGS": "A"}));
    }
}
