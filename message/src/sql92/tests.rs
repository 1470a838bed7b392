use super::*;
use proptest::prelude::*;
use std::collections::HashMap;

fn props(pairs: &[(&str, &str)]) -> HashMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn selects(expr: &str, p: &HashMap<String, String>) -> bool {
    let f = Sql92Filter::parse(expr).unwrap_or_else(|e| panic!("{expr}: {e}"));
    f.matches(|k| p.get(k).map(String::as_str))
}

/// Expressions, and which of the messages below each selects (RocketMQ's answers).
#[test]
fn table_of_expressions_and_properties() {
    let msgs = [
        props(&[("a", "3"), ("b", "x"), ("TAGS", "TagA")]),
        props(&[("a", "10"), ("b", "y"), ("TAGS", "TagB")]),
        props(&[("a", "abc"), ("b", "x")]),
        props(&[("b", "z"), ("c", "2.5")]),
        props(&[("a", "-7"), ("c", "1e1"), ("TAGS", "TagA")]),
    ];
    let table: &[(&str, [bool; 5])] = &[
        ("a > 5", [false, true, false, false, false]),
        ("a >= 3", [true, true, false, false, false]),
        ("a < 5", [true, false, false, false, true]),
        ("a <= -7", [false, false, false, false, true]),
        ("a = 3", [true, false, false, false, false]),
        ("a <> 3", [false, true, false, false, true]),
        ("a BETWEEN 0 AND 3", [true, false, false, false, false]),
        ("a NOT BETWEEN 0 AND 3", [false, true, false, false, true]),
        ("a between -10 and 10", [true, true, false, false, true]),
        ("b = 'x'", [true, false, true, false, false]),
        ("b <> 'x'", [false, true, false, true, false]),
        ("b IN ('x', 'z')", [true, false, true, true, false]),
        ("b NOT IN ('x', 'z')", [false, true, false, false, false]),
        ("c IS NULL", [true, true, true, false, false]),
        ("c IS NOT NULL", [false, false, false, true, true]),
        ("a IS NULL", [false, false, false, true, false]),
        // `2` is a Java int: "2.5" and "1e1" do not parse as one (RocketMQ throws).
        ("c > 2", [false, false, false, false, false]),
        ("c = 10.0", [false, false, false, false, true]),
        ("c > 2.4", [false, false, false, true, true]),
        ("TAGS IN ('TagA')", [true, false, false, false, true]),
        (
            "TAGS is not null and TAGS in ('TagA', 'TagB')",
            [true, true, false, false, true],
        ),
        // a = 'abc' aborts the evaluation before b is looked at.
        ("a > 5 OR b = 'x'", [true, true, false, false, false]),
        ("b = 'x' OR a > 5", [true, true, true, false, false]),
        ("a > 0 AND b = 'x'", [true, false, false, false, false]),
        ("NOT (a > 5)", [true, false, false, false, true]),
        ("NOT (b = 'x')", [false, true, false, true, false]),
        (
            "(a > 5 OR a < 0) AND TAGS IS NOT NULL",
            [false, true, false, false, true],
        ),
        ("b CONTAINS 'x'", [true, false, true, false, false]),
        ("b NOT CONTAINS 'x'", [false, true, false, true, false]),
        ("TAGS STARTSWITH 'Tag'", [true, true, false, false, true]),
        ("TAGS ENDSWITH 'B'", [false, true, false, false, false]),
        ("TAGS NOT ENDSWITH 'B'", [true, false, false, false, true]),
        ("TRUE", [true, true, true, true, true]),
        ("FALSE", [false, false, false, false, false]),
        ("NOT FALSE", [true, true, true, true, true]),
        ("a", [false, false, false, false, false]),
        ("a > 5 -- a comment\n", [false, true, false, false, false]),
        ("/* before */ a > 5", [false, true, false, false, false]),
        ("A > 5", [false, false, false, false, false]),
        ("a > 5L", [false, true, false, false, false]),
        ("a > -8", [true, true, false, false, true]),
        ("a > +2", [true, true, false, false, false]),
        ("a > 3000000000", [false, false, false, false, false]),
        ("a < 3000000000", [true, true, false, false, true]),
        ("a = '3'", [true, false, false, false, false]),
        ("'3' = a", [true, false, false, false, false]),
        ("3 = a", [true, false, false, false, false]),
        ("a < c", [false, false, false, false, true]),
        ("c < a", [false, false, false, false, false]),
        ("a = TRUE", [false, false, false, false, false]),
        ("NOT a = 5", [false, false, false, false, false]),
    ];
    for (expr, want) in table {
        let got: Vec<bool> = msgs.iter().map(|m| selects(expr, m)).collect();
        assert_eq!(&got[..], &want[..], "{expr}");
    }
}

/// RocketMQ's evaluator throws on a property that is not the number it is compared with,
/// and the message is not selected even where the rest of the expression would be true.
#[test]
fn a_property_that_is_not_a_number_drops_the_message() {
    let p = props(&[("a", "abc"), ("b", "x")]);
    assert!(!selects("a > 5 OR b = 'x'", &p));
    // Short-circuit: the left side decides first.
    assert!(selects("b = 'x' OR a > 5", &p));
    assert!(!selects("a = 5", &p));
    // A Java int literal: a long property does not parse as one.
    assert!(!selects("a = 5 OR TRUE", &props(&[("a", "3000000000")])));
    assert!(selects("a = 3000000000", &props(&[("a", "3000000000")])));
    // Doubles take what Java's Double.valueOf takes.
    for (v, want) in [
        (" 6 ", true),
        ("6d", true),
        ("6.5f", true),
        ("Infinity", true),
        ("-Infinity", false),
        ("NaN", true),
        ("inf", false),
        ("0x10", false),
        ("", false),
    ] {
        assert_eq!(selects("a > 5.5", &props(&[("a", v)])), want, "{v:?}");
    }
}

#[test]
fn missing_properties_are_unknown_not_false() {
    let none = props(&[]);
    assert!(!selects("a > 5", &none));
    assert!(!selects("NOT (a > 5)", &none));
    assert!(!selects("a <> 5", &none));
    assert!(!selects("a NOT IN ('x')", &none));
    assert!(!selects("a NOT CONTAINS 'x'", &none));
    // Unknown OR true is true; unknown AND false is false, so its NOT is true.
    assert!(selects("a > 5 OR TRUE", &none));
    assert!(selects("NOT (a > 5 AND FALSE)", &none));
    assert!(!selects("NOT (a > 5 AND TRUE)", &none));
    // RocketMQ's equality: a NULL on the right (only) is false, not unknown.
    assert!(selects("NOT (5 = a)", &none));
    assert!(selects("5 <> a", &none));
}

#[test]
fn bad_expressions_are_refused_with_a_reason() {
    for (expr, says) in [
        ("", "expected a value"),
        ("a >", "found the end"),
        ("a > 'x'", "only numbers"),
        ("a BETWEEN 'a' AND 'b'", "only numbers"),
        ("a > TRUE", "only numbers"),
        ("a BETWEEN 5 AND 1", "lower bound is greater"),
        ("a = NULL", "IS NULL"),
        ("a != 5", "use '<>'"),
        ("a IN (1, 2)", "string literal"),
        ("5 IN ('a')", "needs a property"),
        ("(a > 5", "expected ')'"),
        ("a > 5)", "unexpected ')'"),
        ("a > 0.0", "write 0"),
        ("a > 1e999", "largest double"),
        ("a > 99999999999999999999", "64-bit"),
        ("'x'", "not a condition"),
        ("5 AND a", "not a condition"),
        ("a = 'x", "unterminated string"),
        ("a # 5", "unexpected character '#'"),
        ("a.b = 1", "unexpected character '.'"),
        ("a IS 5", "NULL"),
        ("a = 1 AND /* open", "unterminated"),
        ("(a > 1) > 2", "a condition cannot be compared"),
    ] {
        match Sql92Filter::parse(expr) {
            Ok(f) => panic!("{expr:?} was accepted: {f:?}"),
            Err(e) => assert!(
                e.to_string().contains(says),
                "{expr:?}: {e} (wanted {says:?})"
            ),
        }
    }
    let e = Sql92Filter::parse("a > 5 AND b >").unwrap_err();
    assert_eq!(e.at, 13);
    let deep = format!("{}a > 1{}", "(".repeat(100), ")".repeat(100));
    assert!(Sql92Filter::parse(&deep)
        .unwrap_err()
        .message
        .contains("nested"));
    let not_deep = format!("{}a > 1{}", "(".repeat(20), ")".repeat(20));
    assert!(Sql92Filter::parse(&not_deep).is_ok());
}

#[test]
fn keywords_are_case_insensitive_and_strings_escape_quotes() {
    let p = props(&[("name", "it's"), ("n", "4")]);
    assert!(selects("name = 'it''s' and n between 1 AND 5", &p));
    assert!(selects("name Is Not Null oR n > 100", &p));
    assert!(selects("name in ('x', 'it''s')", &p));
}

// ---------------------------------------------------------------------------------------------
// Property tests: generated expressions against a reference evaluation.

/// A generated condition over integer-valued (or missing) properties p0..p3 and string
/// properties s0..s1: printed as SQL and evaluated directly.
#[derive(Debug, Clone)]
enum G {
    Cmp(usize, &'static str, i32),
    Between(usize, i32, i32, bool),
    In(usize, Vec<&'static str>, bool),
    StrEq(usize, &'static str, bool),
    IsNull(usize, bool),
    Lit(bool),
    Not(Box<G>),
    And(Box<G>, Box<G>),
    Or(Box<G>, Box<G>),
}

const WORDS: [&str; 4] = ["red", "green", "it's", ""];

fn gen() -> impl Strategy<Value = G> {
    let leaf = prop_oneof![
        (
            0..4usize,
            prop::sample::select(vec!["=", "<>", "<", "<=", ">", ">="]),
            -5..5i32
        )
            .prop_map(|(p, op, n)| G::Cmp(p, op, n)),
        (0..4usize, -5..5i32, 0..5i32, any::<bool>()).prop_map(|(p, lo, w, not)| G::Between(
            p,
            lo,
            lo + w,
            not
        )),
        (
            0..2usize,
            prop::collection::vec(prop::sample::select(WORDS.to_vec()), 1..3),
            any::<bool>()
        )
            .prop_map(|(p, l, not)| G::In(p, l, not)),
        (
            0..2usize,
            prop::sample::select(WORDS.to_vec()),
            any::<bool>()
        )
            .prop_map(|(p, w, ne)| G::StrEq(p, w, ne)),
        (0..4usize, any::<bool>()).prop_map(|(p, not)| G::IsNull(p, not)),
        any::<bool>().prop_map(G::Lit),
    ];
    leaf.prop_recursive(4, 24, 2, |inner| {
        prop_oneof![
            inner.clone().prop_map(|g| G::Not(Box::new(g))),
            (inner.clone(), inner.clone()).prop_map(|(a, b)| G::And(Box::new(a), Box::new(b))),
            (inner.clone(), inner).prop_map(|(a, b)| G::Or(Box::new(a), Box::new(b))),
        ]
    })
}

fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

fn sql(g: &G) -> String {
    match g {
        G::Cmp(p, op, n) => format!("p{p} {op} {n}"),
        G::Between(p, lo, hi, not) => {
            format!(
                "p{p} {}BETWEEN {lo} AND {hi}",
                if *not { "NOT " } else { "" }
            )
        }
        G::In(p, l, not) => format!(
            "s{p} {}IN ({})",
            if *not { "NOT " } else { "" },
            l.iter().map(|w| quote(w)).collect::<Vec<_>>().join(", ")
        ),
        G::StrEq(p, w, ne) => format!("s{p} {} {}", if *ne { "<>" } else { "=" }, quote(w)),
        G::IsNull(p, not) => format!("p{p} IS {}NULL", if *not { "NOT " } else { "" }),
        G::Lit(b) => if *b { "TRUE" } else { "false" }.into(),
        G::Not(g) => format!("NOT ({})", sql(g)),
        G::And(a, b) => format!("({}) AND ({})", sql(a), sql(b)),
        G::Or(a, b) => format!("({}) or ({})", sql(a), sql(b)),
    }
}

/// The reference: SQL's three-valued logic written out plainly.
fn reference(g: &G, ints: &[Option<i32>; 4], strs: &[Option<&str>; 2]) -> Option<bool> {
    match g {
        G::Cmp(p, op, n) => ints[*p].map(|v| match *op {
            "=" => v == *n,
            "<>" => v != *n,
            "<" => v < *n,
            "<=" => v <= *n,
            ">" => v > *n,
            _ => v >= *n,
        }),
        G::Between(p, lo, hi, not) => ints[*p].map(|v| (*lo <= v && v <= *hi) != *not),
        G::In(p, l, not) => strs[*p].map(|v| l.contains(&v) != *not),
        G::StrEq(p, w, ne) => strs[*p].map(|v| (v == *w) != *ne),
        G::IsNull(p, not) => Some(ints[*p].is_none() != *not),
        G::Lit(b) => Some(*b),
        G::Not(g) => reference(g, ints, strs).map(|b| !b),
        G::And(a, b) => match (reference(a, ints, strs), reference(b, ints, strs)) {
            (Some(false), _) | (_, Some(false)) => Some(false),
            (Some(true), Some(true)) => Some(true),
            _ => None,
        },
        G::Or(a, b) => match (reference(a, ints, strs), reference(b, ints, strs)) {
            (Some(true), _) | (_, Some(true)) => Some(true),
            (Some(false), Some(false)) => Some(false),
            _ => None,
        },
    }
}

proptest! {
    #[test]
    fn evaluation_agrees_with_the_reference(
        g in gen(),
        ints in prop::array::uniform4(prop::option::of(-6..6i32)),
        strs in prop::array::uniform2(prop::option::of(prop::sample::select(WORDS.to_vec()))),
    ) {
        let text = sql(&g);
        let f = Sql92Filter::parse(&text).map_err(|e| TestCaseError::fail(format!("{text}: {e}")))?;
        let ints_s: Vec<Option<String>> = ints.iter().map(|v| v.map(|n| n.to_string())).collect();
        let got = f.matches(|k: &str| {
            let (kind, i) = k.split_at(1);
            let i: usize = i.parse().ok()?;
            match kind {
                "p" => ints_s.get(i)?.as_deref(),
                "s" => *strs.get(i)?,
                _ => None,
            }
        });
        prop_assert_eq!(got, reference(&g, &ints, &strs) == Some(true), "{}", text);
    }

    /// Printing an expression's tree back and parsing it again gives the same tree.
    #[test]
    fn generated_expressions_round_trip(g in gen()) {
        let text = sql(&g);
        let a = Sql92Filter::parse(&text).map_err(|e| TestCaseError::fail(format!("{text}: {e}")))?;
        let spaced = text.replace('(', " ( ").replace(')', " ) ");
        let b = Sql92Filter::parse(&spaced).map_err(|e| TestCaseError::fail(format!("{spaced}: {e}")))?;
        prop_assert_eq!(a, b);
    }

    #[test]
    fn no_input_panics_the_parser(s in "\\PC{0,80}") {
        if let Ok(f) = Sql92Filter::parse(&s) {
            let _ = f.matches(|_| Some("1"));
            let _ = f.matches(|_| None);
        }
    }

    /// Sequences of the grammar's own tokens find the parser's corners faster than text.
    #[test]
    fn no_token_sequence_panics_the_parser(
        toks in prop::collection::vec(prop::sample::select(vec![
            "a", "b", "(", ")", "NOT", "AND", "OR", "BETWEEN", "IN", "IS", "NULL", "TRUE",
            "FALSE", "CONTAINS", "STARTSWITH", "ENDSWITH", "=", "<>", "<", "<=", ">", ">=",
            ",", "+", "-", "1", "0", "2147483648", "1.5", ".5", "1e3", "'x'", "''", "5L",
        ]), 0..24),
        vals in prop::collection::vec(prop::sample::select(vec!["1", "-1", "x", "1.5", "true", ""]), 2),
    ) {
        let s = toks.join(" ");
        if let Ok(f) = Sql92Filter::parse(&s) {
            let _ = f.matches(|k| if k == "a" { Some(vals[0]) } else if k == "b" { Some(vals[1]) } else { None });
            let _ = f.matches(|_| None);
        }
    }
}
