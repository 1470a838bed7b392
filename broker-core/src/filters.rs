//! SQL92 property filters on the pull path: each core keeps the expressions its pulls use,
//! parsed once (`message::sql92`), and checks each record a pull read against them.
//! A pull without a SQL92 filter never comes here.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

use message::sql92::{Sql92Error, Sql92Filter};
use message::RecordView;

/// Distinct expressions a core keeps parsed; past this the cache starts over (an
/// expression is parsed again at its next pull, microseconds).
const EXPRESSIONS_MAX: usize = 1024;

/// One core's parsed expressions, by their text. Refused expressions are kept too, so a
/// client retrying a bad one costs a lookup.
#[derive(Default)]
pub struct Sql92Cache {
    parsed: RefCell<HashMap<String, Result<Rc<Sql92Filter>, Sql92Error>>>,
}

impl Sql92Cache {
    pub fn get(&self, expression: &str) -> Result<Rc<Sql92Filter>, Sql92Error> {
        if let Some(r) = self.parsed.borrow().get(expression) {
            return r.clone();
        }
        let r = Sql92Filter::parse(expression).map(Rc::new);
        let mut parsed = self.parsed.borrow_mut();
        if parsed.len() >= EXPRESSIONS_MAX {
            parsed.clear();
        }
        parsed.insert(expression.to_owned(), r.clone());
        r
    }
}

/// Whether a stored record is selected by `filter`: its properties, all of them, as
/// strings. A record that does not parse is not selected (the read path has checked it).
pub fn selects(filter: &Sql92Filter, record: &[u8]) -> bool {
    match RecordView::parse(record) {
        Ok(v) => {
            let props = v.properties();
            filter.matches(|k| props.get(k))
        }
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_once_and_remembers_refusals() {
        let c = Sql92Cache::default();
        let a = c.get("a > 1").unwrap();
        let b = c.get("a > 1").unwrap();
        assert!(Rc::ptr_eq(&a, &b));
        assert!(c.get("a >").is_err());
        assert!(c.get("a >").is_err());
    }

    #[test]
    fn selects_by_the_records_properties() {
        let props = [("TAGS", "TagA"), ("a", "7")];
        let fields = message::MessageFields {
            topic: "T",
            body: b"x",
            properties: &props,
            ..Default::default()
        };
        let mut rec = Vec::new();
        message::encode_record(&fields, &mut rec).unwrap();
        let c = Sql92Cache::default();
        assert!(selects(&c.get("a > 5 AND TAGS = 'TagA'").unwrap(), &rec));
        assert!(!selects(&c.get("a > 7").unwrap(), &rec));
        assert!(!selects(&c.get("a > 5").unwrap(), b"not a record"));
    }
}
