//! RocketMQ's SQL92 property filter (`MessageSelector.bySql`): the grammar of RocketMQ's
//! `SelectorParser.jj` and the evaluation of its `filter` module, over a message's
//! properties (all of them, `TAGS` and `KEYS` included, as strings).
//!
//! Grammar (keywords in any case):
//!
//! ```text
//! expr       := and (OR and)*
//! and        := equality (AND equality)*
//! equality   := comparison ( '=' comparison | '<>' comparison | IS NULL | IS NOT NULL )*
//! comparison := unary ( ('>' | '>=' | '<' | '<=') unary
//!                     | [NOT] BETWEEN unary AND unary
//!                     | [NOT] IN '(' string (',' string)* ')'
//!                     | [NOT] (CONTAINS | STARTSWITH | ENDSWITH) string )*
//! unary      := '+' unary | '-' unary | NOT unary | primary
//! primary    := literal | identifier | '(' expr ')'
//! literal    := 'string' ('' escapes a quote) | 123 | 123L | 1.5 | .5 | 1e3 | TRUE | FALSE | NULL
//! ```
//!
//! Identifiers are `[A-Za-z_$][A-Za-z0-9_$]*`; `-- …` and `/* … */` are comments.
//!
//! Semantics follow RocketMQ's evaluator, quirks included, so an expression selects the same
//! messages on corvus as on a RocketMQ broker:
//! * Three-valued logic: a missing property is NULL; a comparison with NULL is unknown, and
//!   only a true result selects the message. `AND`, `OR` and `NOT` are Kleene's.
//! * A property compared with a number is parsed as that number's type (`5` is a Java int,
//!   `3000000000` a long, `1.5` a double); a property that does not parse aborts the whole
//!   evaluation and the message is not selected (RocketMQ's evaluator throws, the broker
//!   logs and skips the message). Two properties compared by `<`, `>`, ... are both parsed as
//!   doubles.
//! * `<`, `<=`, `>`, `>=` and `BETWEEN` take numbers only: a string or boolean literal there
//!   is refused when the expression is parsed, as is `x BETWEEN 5 AND 1`.
//! * `NOT` binds tighter than comparisons (`NOT a = 5` is `(NOT a) = 5`, which is never
//!   true): write `NOT (a = 5)`.
//! * A float literal below Java's `Double.MIN_VALUE` (so `0.0`) is refused, as RocketMQ's
//!   parser does; write `0`.
//! * `x = NULL` is refused; use `x IS NULL`. `!=` is not RocketMQ's: use `<>`.

use std::cmp::Ordering;
use std::fmt;

/// Nesting deeper than this is refused: the parser recurses, and an expression comes from
/// the network.
pub const NESTING_MAX: usize = 64;

/// Longer expressions are refused.
pub const EXPRESSION_BYTES_MAX: usize = 16 * 1024;

/// Why an expression was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid SQL92 filter expression at character {at}: {message}")]
pub struct Sql92Error {
    /// Character (not byte) position in the expression, from 0.
    pub at: usize,
    pub message: String,
}

/// A parsed SQL92 filter: parse once, evaluate per message.
#[derive(Debug, Clone, PartialEq)]
pub struct Sql92Filter {
    expr: Expr,
}

impl Sql92Filter {
    pub fn parse(source: &str) -> Result<Sql92Filter, Sql92Error> {
        if source.len() > EXPRESSION_BYTES_MAX {
            return Err(Sql92Error {
                at: 0,
                message: format!(
                    "the expression is {} bytes, more than {EXPRESSION_BYTES_MAX}",
                    source.len()
                ),
            });
        }
        let tokens = lex(source)?;
        let mut p = Parser {
            tokens,
            pos: 0,
            depth: 0,
            end: source.chars().count(),
        };
        let e = p.or_expr()?;
        if let Some(t) = p.peek() {
            return Err(p.error_at(t.at, format!("unexpected {}", t.kind)));
        }
        let expr = as_boolean(e).map_err(|m| Sql92Error { at: 0, message: m })?;
        Ok(Sql92Filter { expr })
    }

    /// Whether a message whose properties `get` looks up is selected.
    pub fn matches<'a>(&self, get: impl Fn(&str) -> Option<&'a str>) -> bool {
        // The values of one evaluation live as long as the shorter of the expression and
        // the message.
        fn shorten<'s, 'a: 's>(v: Option<&'a str>) -> Option<&'s str> {
            v
        }
        let lookup = |k: &str| shorten(get(k));
        matches!(eval(&self.expr, &lookup), Ok(Value::Bool(true)))
    }
}

// ---------------------------------------------------------------------------------------------
// Values and the expression tree

#[derive(Debug, Clone, PartialEq)]
enum Const {
    Null,
    Bool(bool),
    Int(i32),
    Long(i64),
    Double(f64),
    Str(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CmpOp {
    Lt,
    Le,
    Gt,
    Ge,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StrOp {
    Contains,
    StartsWith,
    EndsWith,
}

#[derive(Debug, Clone, PartialEq)]
enum Expr {
    Const(Const),
    Prop(String),
    Negate(Box<Expr>),
    Not(Box<Expr>),
    And(Box<Expr>, Box<Expr>),
    Or(Box<Expr>, Box<Expr>),
    Eq(Box<Expr>, Box<Expr>),
    Cmp(CmpOp, Box<Expr>, Box<Expr>),
    In {
        prop: String,
        list: Vec<String>,
        not: bool,
    },
    Str {
        op: StrOp,
        left: Box<Expr>,
        needle: String,
        not: bool,
    },
    /// A bare property where a boolean is wanted: never true (properties are strings).
    BoolCast(Box<Expr>),
}

impl Expr {
    /// Java's `instanceof BooleanExpression`: what may stand where a condition is wanted.
    fn is_boolean(&self) -> bool {
        match self {
            Expr::Const(c) => matches!(c, Const::Null | Const::Bool(_)),
            Expr::Prop(_) | Expr::Negate(_) => false,
            _ => true,
        }
    }
}

impl fmt::Display for Expr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Expr::Const(Const::Null) => f.write_str("NULL"),
            Expr::Const(Const::Bool(b)) => f.write_str(if *b { "TRUE" } else { "FALSE" }),
            Expr::Const(Const::Int(i)) => write!(f, "{i}"),
            Expr::Const(Const::Long(i)) => write!(f, "{i}"),
            Expr::Const(Const::Double(d)) => write!(f, "{d:?}"),
            Expr::Const(Const::Str(s)) => write!(f, "'{}'", s.replace('\'', "''")),
            Expr::Prop(p) => f.write_str(p),
            Expr::Negate(e) => write!(f, "-{e}"),
            _ => f.write_str("a condition"),
        }
    }
}

/// A value during evaluation: properties are borrowed from the message.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Value<'a> {
    Null,
    Bool(bool),
    Int(i32),
    Long(i64),
    Double(f64),
    Str(&'a str),
}

/// RocketMQ's evaluator threw (a property that does not parse as the number it is compared
/// with): the message is not selected, whatever the rest of the expression says.
#[derive(Debug)]
struct Abort;

fn eval<'a>(e: &'a Expr, get: &impl Fn(&str) -> Option<&'a str>) -> Result<Value<'a>, Abort> {
    Ok(match e {
        Expr::Const(c) => match c {
            Const::Null => Value::Null,
            Const::Bool(b) => Value::Bool(*b),
            Const::Int(i) => Value::Int(*i),
            Const::Long(i) => Value::Long(*i),
            Const::Double(d) => Value::Double(*d),
            Const::Str(s) => Value::Str(s),
        },
        Expr::Prop(name) => get(name).map_or(Value::Null, Value::Str),
        Expr::Negate(e) => match eval(e, get)? {
            // Java's int and long negation wraps.
            Value::Int(i) => Value::Int(i.wrapping_neg()),
            Value::Long(i) => Value::Long(i.wrapping_neg()),
            Value::Double(d) => Value::Double(-d),
            _ => Value::Null,
        },
        Expr::Not(e) => match truth(eval(e, get)?)? {
            Some(b) => Value::Bool(!b),
            None => Value::Null,
        },
        Expr::And(l, r) => {
            let lv = truth(eval(l, get)?)?;
            if lv == Some(false) {
                return Ok(Value::Bool(false));
            }
            let rv = truth(eval(r, get)?)?;
            match (lv, rv) {
                (_, Some(false)) => Value::Bool(false),
                (Some(true), Some(true)) => Value::Bool(true),
                _ => Value::Null,
            }
        }
        Expr::Or(l, r) => {
            let lv = truth(eval(l, get)?)?;
            if lv == Some(true) {
                return Ok(Value::Bool(true));
            }
            let rv = truth(eval(r, get)?)?;
            match (lv, rv) {
                (_, Some(true)) => Value::Bool(true),
                (Some(false), Some(false)) => Value::Bool(false),
                _ => Value::Null,
            }
        }
        Expr::Eq(l, r) => {
            let lv = eval(l, get)?;
            let rv = eval(r, get)?;
            match (lv, rv) {
                (Value::Null, Value::Null) => Value::Bool(true),
                (Value::Null, _) => Value::Null,
                (_, Value::Null) => Value::Bool(false),
                _ if java_equals(lv, rv) => Value::Bool(true),
                _ => Value::Bool(compare(lv, rv)? == 0),
            }
        }
        Expr::Cmp(op, l, r) => {
            let lv = eval(l, get)?;
            if lv == Value::Null {
                return Ok(Value::Null);
            }
            let rv = eval(r, get)?;
            if rv == Value::Null {
                return Ok(Value::Null);
            }
            let c = match (lv, rv) {
                // Two strings are compared as doubles, or not at all.
                (Value::Str(a), Value::Str(b)) => {
                    let a = java_double(a).ok_or(Abort)?;
                    let b = java_double(b).ok_or(Abort)?;
                    ordering(java_double_cmp(a, b))
                }
                _ => compare(lv, rv)?,
            };
            Value::Bool(match op {
                CmpOp::Lt => c < 0,
                CmpOp::Le => c <= 0,
                CmpOp::Gt => c > 0,
                CmpOp::Ge => c >= 0,
            })
        }
        Expr::In { prop, list, not } => match get(prop) {
            None => Value::Null,
            Some(v) => Value::Bool(list.iter().any(|x| x == v) ^ not),
        },
        Expr::Str {
            op,
            left,
            needle,
            not,
        } => match eval(left, get)? {
            Value::Str(s) => {
                let hit = match op {
                    StrOp::Contains => s.contains(needle.as_str()),
                    StrOp::StartsWith => s.starts_with(needle.as_str()),
                    StrOp::EndsWith => s.ends_with(needle.as_str()),
                };
                Value::Bool(hit ^ not)
            }
            _ => Value::Null,
        },
        Expr::BoolCast(e) => match eval(e, get)? {
            Value::Null => Value::Null,
            Value::Bool(b) => Value::Bool(b),
            _ => Value::Bool(false),
        },
    })
}

/// A condition's value: true, false or unknown. Anything else is Java's ClassCastException.
fn truth(v: Value<'_>) -> Result<Option<bool>, Abort> {
    match v {
        Value::Bool(b) => Ok(Some(b)),
        Value::Null => Ok(None),
        _ => Err(Abort),
    }
}

/// Java's `equals` between the boxed values: same type and same value (doubles by bits,
/// so NaN equals NaN and 0.0 is not -0.0).
fn java_equals(a: Value<'_>, b: Value<'_>) -> bool {
    match (a, b) {
        (Value::Bool(x), Value::Bool(y)) => x == y,
        (Value::Int(x), Value::Int(y)) => x == y,
        (Value::Long(x), Value::Long(y)) => x == y,
        (Value::Double(x), Value::Double(y)) => {
            java_double_cmp(x, y) == Ordering::Equal && x.is_nan() == y.is_nan()
        }
        (Value::Str(x), Value::Str(y)) => x == y,
        _ => false,
    }
}

fn ordering(o: Ordering) -> i32 {
    match o {
        Ordering::Less => -1,
        Ordering::Equal => 0,
        Ordering::Greater => 1,
    }
}

/// Java's `Double.compareTo`: -0.0 below 0.0, NaN above everything and equal to itself.
fn java_double_cmp(a: f64, b: f64) -> Ordering {
    match (a.is_nan(), b.is_nan()) {
        (false, false) => a.total_cmp(&b),
        (x, y) => x.cmp(&y),
    }
}

/// RocketMQ's `ComparisonExpression.__compare` with string conversion on: the right-hand
/// or left-hand value converted to the other's type, -1 when the types cannot meet.
fn compare(lv: Value<'_>, rv: Value<'_>) -> Result<i32, Abort> {
    use Value as V;
    let num = |s: &str, like: Value<'_>| -> Result<Value<'static>, Abort> {
        match like {
            V::Int(_) => s.parse::<i32>().map(V::Int).map_err(|_| Abort),
            V::Long(_) => s.parse::<i64>().map(V::Long).map_err(|_| Abort),
            V::Double(_) => java_double(s).map(V::Double).ok_or(Abort),
            _ => Err(Abort),
        }
    };
    let (lv, rv) = match (lv, rv) {
        // Java casts the Boolean to String here, and throws.
        (V::Bool(_), V::Str(_)) => return Err(Abort),
        (V::Str(s), V::Bool(_)) => (V::Bool(s.eq_ignore_ascii_case("true")), rv),
        (V::Int(_) | V::Long(_) | V::Double(_), V::Str(s)) => (lv, num(s, lv)?),
        (V::Str(s), V::Int(_) | V::Long(_) | V::Double(_)) => (num(s, rv)?, rv),
        _ => (lv, rv),
    };
    Ok(match (lv, rv) {
        (V::Bool(a), V::Bool(b)) => ordering(a.cmp(&b)),
        (V::Str(a), V::Str(b)) => ordering(a.cmp(b)),
        (V::Int(a), V::Int(b)) => ordering(a.cmp(&b)),
        (V::Int(a), V::Long(b)) => ordering(i64::from(a).cmp(&b)),
        (V::Long(a), V::Int(b)) => ordering(a.cmp(&i64::from(b))),
        (V::Long(a), V::Long(b)) => ordering(a.cmp(&b)),
        (V::Int(a), V::Double(b)) => ordering(java_double_cmp(f64::from(a), b)),
        (V::Double(a), V::Int(b)) => ordering(java_double_cmp(a, f64::from(b))),
        (V::Long(a), V::Double(b)) => ordering(java_double_cmp(a as f64, b)),
        (V::Double(a), V::Long(b)) => ordering(java_double_cmp(a, b as f64)),
        (V::Double(a), V::Double(b)) => ordering(java_double_cmp(a, b)),
        _ => -1,
    })
}

/// Java's `Double.valueOf(String)`, decimal forms: surrounding whitespace, a sign,
/// `NaN`, `Infinity`, digits with an optional point and exponent, an optional `f`/`d`
/// suffix. (Java's hexadecimal floats are not taken.)
fn java_double(s: &str) -> Option<f64> {
    let t = s.trim_matches(|c: char| c <= ' ');
    let (neg, body) = match t.as_bytes().first() {
        Some(b'-') => (true, &t[1..]),
        Some(b'+') => (false, &t[1..]),
        _ => (false, t),
    };
    let v = match body {
        "NaN" => f64::NAN,
        "Infinity" => f64::INFINITY,
        _ => {
            let body = body.strip_suffix(['f', 'F', 'd', 'D']).unwrap_or(body);
            let b = body.as_bytes();
            let mut i = 0;
            let digits = |i: &mut usize| {
                let from = *i;
                while *i < b.len() && b[*i].is_ascii_digit() {
                    *i += 1;
                }
                *i - from
            };
            let mut mantissa = digits(&mut i);
            if i < b.len() && b[i] == b'.' {
                i += 1;
                mantissa += digits(&mut i);
            }
            if mantissa == 0 {
                return None;
            }
            if i < b.len() && (b[i] == b'e' || b[i] == b'E') {
                i += 1;
                if i < b.len() && (b[i] == b'+' || b[i] == b'-') {
                    i += 1;
                }
                if digits(&mut i) == 0 {
                    return None;
                }
            }
            if i != b.len() {
                return None;
            }
            body.parse::<f64>().ok()?
        }
    };
    Some(if neg { -v } else { v })
}

// ---------------------------------------------------------------------------------------------
// Lexer

#[derive(Debug, Clone, PartialEq)]
enum Kind {
    Ident(String),
    Str(String),
    Decimal(String),
    Float(String),
    Not,
    And,
    Or,
    Between,
    In,
    True,
    False,
    Null,
    Is,
    Contains,
    StartsWith,
    EndsWith,
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    LParen,
    RParen,
    Comma,
    Plus,
    Minus,
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Kind::Ident(s) => write!(f, "identifier {s}"),
            Kind::Str(s) => write!(f, "string '{}'", s.replace('\'', "''")),
            Kind::Decimal(s) | Kind::Float(s) => write!(f, "number {s}"),
            Kind::Not => f.write_str("NOT"),
            Kind::And => f.write_str("AND"),
            Kind::Or => f.write_str("OR"),
            Kind::Between => f.write_str("BETWEEN"),
            Kind::In => f.write_str("IN"),
            Kind::True => f.write_str("TRUE"),
            Kind::False => f.write_str("FALSE"),
            Kind::Null => f.write_str("NULL"),
            Kind::Is => f.write_str("IS"),
            Kind::Contains => f.write_str("CONTAINS"),
            Kind::StartsWith => f.write_str("STARTSWITH"),
            Kind::EndsWith => f.write_str("ENDSWITH"),
            Kind::Eq => f.write_str("'='"),
            Kind::Ne => f.write_str("'<>'"),
            Kind::Lt => f.write_str("'<'"),
            Kind::Le => f.write_str("'<='"),
            Kind::Gt => f.write_str("'>'"),
            Kind::Ge => f.write_str("'>='"),
            Kind::LParen => f.write_str("'('"),
            Kind::RParen => f.write_str("')'"),
            Kind::Comma => f.write_str("','"),
            Kind::Plus => f.write_str("'+'"),
            Kind::Minus => f.write_str("'-'"),
        }
    }
}

#[derive(Debug, Clone)]
struct Token {
    kind: Kind,
    /// Character position.
    at: usize,
}

fn lex(src: &str) -> Result<Vec<Token>, Sql92Error> {
    let chars: Vec<char> = src.chars().collect();
    let err = |at: usize, message: String| Sql92Error { at, message };
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let at = i;
        if matches!(c, ' ' | '\t' | '\n' | '\r' | '\u{c}') {
            i += 1;
            continue;
        }
        if c == '-' && chars.get(i + 1) == Some(&'-') {
            while i < chars.len() && chars[i] != '\n' && chars[i] != '\r' {
                i += 1;
            }
            continue;
        }
        if c == '/' && chars.get(i + 1) == Some(&'*') {
            i += 2;
            loop {
                if i + 1 >= chars.len() {
                    return Err(err(at, "unterminated /* comment".into()));
                }
                if chars[i] == '*' && chars[i + 1] == '/' {
                    i += 2;
                    break;
                }
                i += 1;
            }
            continue;
        }
        let kind = match c {
            '\'' => {
                let mut s = String::new();
                i += 1;
                loop {
                    match chars.get(i) {
                        None => return Err(err(at, "unterminated string literal".into())),
                        Some('\'') if chars.get(i + 1) == Some(&'\'') => {
                            s.push('\'');
                            i += 2;
                        }
                        Some('\'') => {
                            i += 1;
                            break;
                        }
                        Some(&ch) => {
                            s.push(ch);
                            i += 1;
                        }
                    }
                }
                out.push(Token {
                    kind: Kind::Str(s),
                    at,
                });
                continue;
            }
            '0'..='9' | '.' => {
                let (kind, end) = number(&chars, i)
                    .ok_or_else(|| err(at, format!("unexpected character '{c}'")))?;
                i = end;
                out.push(Token { kind, at });
                continue;
            }
            'a'..='z' | 'A'..='Z' | '_' | '$' => {
                let from = i;
                while i < chars.len()
                    && (chars[i].is_ascii_alphanumeric() || chars[i] == '_' || chars[i] == '$')
                {
                    i += 1;
                }
                let word: String = chars[from..i].iter().collect();
                let kind = match word.to_ascii_uppercase().as_str() {
                    "NOT" => Kind::Not,
                    "AND" => Kind::And,
                    "OR" => Kind::Or,
                    "BETWEEN" => Kind::Between,
                    "IN" => Kind::In,
                    "TRUE" => Kind::True,
                    "FALSE" => Kind::False,
                    "NULL" => Kind::Null,
                    "IS" => Kind::Is,
                    "CONTAINS" => Kind::Contains,
                    "STARTSWITH" => Kind::StartsWith,
                    "ENDSWITH" => Kind::EndsWith,
                    _ => Kind::Ident(word),
                };
                out.push(Token { kind, at });
                continue;
            }
            '=' => Kind::Eq,
            '<' => match chars.get(i + 1) {
                Some('>') => {
                    i += 1;
                    Kind::Ne
                }
                Some('=') => {
                    i += 1;
                    Kind::Le
                }
                _ => Kind::Lt,
            },
            '>' => match chars.get(i + 1) {
                Some('=') => {
                    i += 1;
                    Kind::Ge
                }
                _ => Kind::Gt,
            },
            '!' if chars.get(i + 1) == Some(&'=') => {
                return Err(err(at, "'!=' is not SQL92: use '<>'".into()));
            }
            '(' => Kind::LParen,
            ')' => Kind::RParen,
            ',' => Kind::Comma,
            '+' => Kind::Plus,
            '-' => Kind::Minus,
            other => return Err(err(at, format!("unexpected character '{other}'"))),
        };
        i += 1;
        out.push(Token { kind, at });
    }
    Ok(out)
}

/// The longest number token at `i` (RocketMQ's DECIMAL_LITERAL or FLOATING_POINT_LITERAL)
/// and where it ends; `None` for a lone `.`.
fn number(chars: &[char], i: usize) -> Option<(Kind, usize)> {
    let digits = |mut j: usize| {
        while j < chars.len() && chars[j].is_ascii_digit() {
            j += 1;
        }
        j
    };
    // An exponent at `j`, if a whole one is there: where it ends.
    let exponent = |j: usize| -> Option<usize> {
        if !matches!(chars.get(j), Some('e' | 'E')) {
            return None;
        }
        let mut k = j + 1;
        if matches!(chars.get(k), Some('+' | '-')) {
            k += 1;
        }
        let end = digits(k);
        (end > k).then_some(end)
    };
    let text = |from: usize, to: usize| chars[from..to].iter().collect::<String>();
    let int_end = digits(i);
    if int_end == i {
        // `.5`, `.5e3`
        let frac_end = digits(i + 1);
        if frac_end == i + 1 {
            return None;
        }
        let end = exponent(frac_end).unwrap_or(frac_end);
        return Some((Kind::Float(text(i, end)), end));
    }
    if chars.get(int_end) == Some(&'.') {
        let frac_end = digits(int_end + 1);
        let end = exponent(frac_end).unwrap_or(frac_end);
        return Some((Kind::Float(text(i, end)), end));
    }
    if let Some(end) = exponent(int_end) {
        return Some((Kind::Float(text(i, end)), end));
    }
    // DECIMAL_LITERAL is "0" or a digit string without a leading zero, with an optional L.
    let end = if chars[i] == '0' { i + 1 } else { int_end };
    let end = if chars[i] != '0' && matches!(chars.get(end), Some('l' | 'L')) {
        end + 1
    } else {
        end
    };
    Some((Kind::Decimal(text(i, end)), end))
}

// ---------------------------------------------------------------------------------------------
// Parser

struct Parser {
    tokens: Vec<Token>,
    pos: usize,
    depth: usize,
    /// The expression's length in characters: where "the end" is.
    end: usize,
}

/// Checks made while building (RocketMQ throws them from its parser): a message for the user.
type Built = Result<Expr, String>;

fn as_boolean(e: Expr) -> Built {
    if e.is_boolean() {
        Ok(e)
    } else if matches!(e, Expr::Prop(_)) {
        Ok(Expr::BoolCast(Box::new(e)))
    } else {
        Err(format!("{e} is not a condition"))
    }
}

fn check_less_than_operand(e: &Expr) -> Result<(), String> {
    match e {
        Expr::Const(Const::Int(_) | Const::Long(_) | Const::Double(_)) => Ok(()),
        Expr::Const(c) => Err(format!(
            "{} cannot be compared with <, <=, >, >= or BETWEEN: only numbers can",
            Expr::Const(c.clone())
        )),
        e if e.is_boolean() => {
            Err("a condition cannot be compared with <, <=, >, >= or BETWEEN".into())
        }
        _ => Ok(()),
    }
}

fn create_cmp(op: CmpOp, l: Expr, r: Expr) -> Built {
    check_less_than_operand(&l)?;
    check_less_than_operand(&r)?;
    Ok(Expr::Cmp(op, Box::new(l), Box::new(r)))
}

fn create_equal(l: Expr, r: Expr) -> Built {
    for e in [&l, &r] {
        if matches!(e, Expr::Const(Const::Null)) {
            return Err("NULL cannot be compared with = or <>: use IS NULL or IS NOT NULL".into());
        }
    }
    if let (Expr::Const(_), Expr::Const(_)) = (&l, &r) {
        if l.is_boolean() && !r.is_boolean() {
            return Err(format!("{l} cannot be compared with {r}"));
        }
    }
    Ok(Expr::Eq(Box::new(l), Box::new(r)))
}

fn create_between(v: Expr, low: Expr, high: Expr) -> Built {
    if let (Expr::Const(lc), Expr::Const(hc)) = (&low, &high) {
        if matches!(lc, Const::Null) || matches!(hc, Const::Null) {
            return Err("the bounds of BETWEEN cannot be NULL".into());
        }
        fn value(c: &Const) -> Value<'_> {
            match c {
                Const::Null => Value::Null,
                Const::Bool(b) => Value::Bool(*b),
                Const::Int(i) => Value::Int(*i),
                Const::Long(i) => Value::Long(*i),
                Const::Double(d) => Value::Double(*d),
                Const::Str(s) => Value::Str(s.as_str()),
            }
        }
        match compare(value(hc), value(lc)) {
            Ok(c) if c < 0 => {
                return Err(format!(
                    "BETWEEN {low} AND {high}: the lower bound is greater than the upper one"
                ))
            }
            Ok(_) => {}
            Err(Abort) => {
                return Err(format!(
                    "BETWEEN {low} AND {high}: bounds of different types"
                ))
            }
        }
    }
    Ok(Expr::And(
        Box::new(create_cmp(CmpOp::Ge, v.clone(), low)?),
        Box::new(create_cmp(CmpOp::Le, v, high)?),
    ))
}

fn create_not_between(v: Expr, low: Expr, high: Expr) -> Built {
    Ok(Expr::Or(
        Box::new(create_cmp(CmpOp::Lt, v.clone(), low)?),
        Box::new(create_cmp(CmpOp::Gt, v, high)?),
    ))
}

fn decimal(text: &str) -> Result<Const, String> {
    let digits = text.strip_suffix(['l', 'L']).unwrap_or(text);
    let v: i64 = digits
        .parse()
        .map_err(|_| format!("{text} does not fit in a 64-bit integer"))?;
    Ok(match i32::try_from(v) {
        Ok(i) => Const::Int(i),
        Err(_) => Const::Long(v),
    })
}

fn float(text: &str) -> Result<Const, String> {
    let v: f64 = text
        .parse()
        .map_err(|_| format!("{text} is not a number"))?;
    if v.is_infinite() {
        return Err(format!("{text} is greater than the largest double"));
    }
    // RocketMQ's parser refuses a float below Double.MIN_VALUE (4.9e-324), 0.0 included.
    if v < f64::from_bits(1) {
        return Err(format!(
            "{text} is less than the smallest positive double (RocketMQ refuses it; write 0 for zero)"
        ));
    }
    Ok(Const::Double(v))
}

impl Parser {
    fn peek(&self) -> Option<&Token> {
        self.tokens.get(self.pos)
    }

    fn peek_kind(&self, ahead: usize) -> Option<&Kind> {
        self.tokens.get(self.pos + ahead).map(|t| &t.kind)
    }

    fn eat(&mut self, k: &Kind) -> bool {
        if self.peek_kind(0) == Some(k) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    fn here(&self) -> usize {
        match self.peek() {
            Some(t) => t.at,
            None => self.end,
        }
    }

    fn error_at(&self, at: usize, message: String) -> Sql92Error {
        Sql92Error { at, message }
    }

    fn expected(&self, what: &str) -> Sql92Error {
        match self.peek() {
            Some(t) => self.error_at(t.at, format!("expected {what}, found {}", t.kind)),
            None => self.error_at(self.here(), format!("expected {what}, found the end")),
        }
    }

    /// Wraps a semantic check's message with the position it applies to.
    fn built(&self, at: usize, b: Built) -> Result<Expr, Sql92Error> {
        b.map_err(|m| self.error_at(at, m))
    }

    fn or_expr(&mut self) -> Result<Expr, Sql92Error> {
        self.depth += 1;
        if self.depth > NESTING_MAX {
            return Err(self.error_at(self.here(), format!("nested more than {NESTING_MAX} deep")));
        }
        let mut left = self.and_expr()?;
        while self.peek_kind(0) == Some(&Kind::Or) {
            let at = self.here();
            self.pos += 1;
            let right = self.and_expr()?;
            let b = as_boolean(left)
                .and_then(|l| Ok(Expr::Or(Box::new(l), Box::new(as_boolean(right)?))));
            left = self.built(at, b)?;
        }
        self.depth -= 1;
        Ok(left)
    }

    fn and_expr(&mut self) -> Result<Expr, Sql92Error> {
        let mut left = self.equality()?;
        while self.peek_kind(0) == Some(&Kind::And) {
            let at = self.here();
            self.pos += 1;
            let right = self.equality()?;
            let b = as_boolean(left)
                .and_then(|l| Ok(Expr::And(Box::new(l), Box::new(as_boolean(right)?))));
            left = self.built(at, b)?;
        }
        Ok(left)
    }

    fn equality(&mut self) -> Result<Expr, Sql92Error> {
        let mut left = self.comparison()?;
        loop {
            let at = self.here();
            match self.peek_kind(0) {
                Some(Kind::Eq) => {
                    self.pos += 1;
                    let right = self.comparison()?;
                    left = self.built(at, create_equal(left, right))?;
                }
                Some(Kind::Ne) => {
                    self.pos += 1;
                    let right = self.comparison()?;
                    let eq = self.built(at, create_equal(left, right))?;
                    left = Expr::Not(Box::new(eq));
                }
                Some(Kind::Is) => {
                    self.pos += 1;
                    let not = self.eat(&Kind::Not);
                    if !self.eat(&Kind::Null) {
                        return Err(self.expected(if not { "NULL" } else { "NULL or NOT NULL" }));
                    }
                    let is_null = Expr::Eq(Box::new(left), Box::new(Expr::Const(Const::Null)));
                    left = if not {
                        Expr::Not(Box::new(is_null))
                    } else {
                        is_null
                    };
                }
                _ => return Ok(left),
            }
        }
    }

    fn string_literal(&mut self) -> Result<String, Sql92Error> {
        match self.peek_kind(0) {
            Some(Kind::Str(s)) => {
                let s = s.clone();
                self.pos += 1;
                Ok(s)
            }
            _ => Err(self.expected("a string literal")),
        }
    }

    fn string_list(&mut self) -> Result<Vec<String>, Sql92Error> {
        if !self.eat(&Kind::LParen) {
            return Err(self.expected("'('"));
        }
        let mut list = vec![self.string_literal()?];
        while self.eat(&Kind::Comma) {
            list.push(self.string_literal()?);
        }
        if !self.eat(&Kind::RParen) {
            return Err(self.expected("',' or ')'"));
        }
        Ok(list)
    }

    fn comparison(&mut self) -> Result<Expr, Sql92Error> {
        let mut left = self.unary()?;
        loop {
            let at = self.here();
            let op = match self.peek_kind(0) {
                Some(Kind::Gt) => Some(CmpOp::Gt),
                Some(Kind::Ge) => Some(CmpOp::Ge),
                Some(Kind::Lt) => Some(CmpOp::Lt),
                Some(Kind::Le) => Some(CmpOp::Le),
                _ => None,
            };
            if let Some(op) = op {
                self.pos += 1;
                let right = self.unary()?;
                left = self.built(at, create_cmp(op, left, right))?;
                continue;
            }
            // NOT here only when the keyword after it continues a comparison (LOOKAHEAD(2)).
            let not = self.peek_kind(0) == Some(&Kind::Not)
                && matches!(
                    self.peek_kind(1),
                    Some(
                        Kind::Between
                            | Kind::In
                            | Kind::Contains
                            | Kind::StartsWith
                            | Kind::EndsWith
                    )
                );
            let k = if not { 1 } else { 0 };
            match self.peek_kind(k) {
                Some(Kind::Between) => {
                    self.pos += k + 1;
                    let low = self.unary()?;
                    if !self.eat(&Kind::And) {
                        return Err(self.expected("AND"));
                    }
                    let high = self.unary()?;
                    let b = if not {
                        create_not_between(left, low, high)
                    } else {
                        create_between(left, low, high)
                    };
                    left = self.built(at, b)?;
                }
                Some(Kind::In) => {
                    self.pos += k + 1;
                    let list = self.string_list()?;
                    let Expr::Prop(prop) = left else {
                        return Err(self
                            .error_at(at, format!("IN needs a property on its left, not {left}")));
                    };
                    left = Expr::In { prop, list, not };
                }
                Some(Kind::Contains | Kind::StartsWith | Kind::EndsWith) => {
                    let op = match self.peek_kind(k) {
                        Some(Kind::Contains) => StrOp::Contains,
                        Some(Kind::StartsWith) => StrOp::StartsWith,
                        _ => StrOp::EndsWith,
                    };
                    self.pos += k + 1;
                    let needle = self.string_literal()?;
                    if left.is_boolean() {
                        return Err(self.error_at(
                            at,
                            "a condition cannot be the left side of CONTAINS, STARTSWITH or ENDSWITH"
                                .into(),
                        ));
                    }
                    left = Expr::Str {
                        op,
                        left: Box::new(left),
                        needle,
                        not,
                    };
                }
                _ => return Ok(left),
            }
        }
    }

    fn unary(&mut self) -> Result<Expr, Sql92Error> {
        self.depth += 1;
        if self.depth > NESTING_MAX {
            return Err(self.error_at(self.here(), format!("nested more than {NESTING_MAX} deep")));
        }
        let at = self.here();
        let e = match self.peek_kind(0) {
            Some(Kind::Plus) => {
                self.pos += 1;
                self.unary()?
            }
            Some(Kind::Minus) => {
                self.pos += 1;
                Expr::Negate(Box::new(self.unary()?))
            }
            Some(Kind::Not) => {
                self.pos += 1;
                let e = self.unary()?;
                let b = self.built(at, as_boolean(e))?;
                Expr::Not(Box::new(b))
            }
            _ => self.primary()?,
        };
        self.depth -= 1;
        Ok(e)
    }

    fn primary(&mut self) -> Result<Expr, Sql92Error> {
        let Some(t) = self.peek().cloned() else {
            return Err(self.expected("a value"));
        };
        self.pos += 1;
        let c = match t.kind {
            Kind::Str(s) => Const::Str(s),
            Kind::Decimal(s) => decimal(&s).map_err(|m| self.error_at(t.at, m))?,
            Kind::Float(s) => float(&s).map_err(|m| self.error_at(t.at, m))?,
            Kind::True => Const::Bool(true),
            Kind::False => Const::Bool(false),
            Kind::Null => Const::Null,
            Kind::Ident(name) => return Ok(Expr::Prop(name)),
            Kind::LParen => {
                let e = self.or_expr()?;
                if !self.eat(&Kind::RParen) {
                    return Err(self.expected("')'"));
                }
                return Ok(e);
            }
            _ => {
                self.pos -= 1;
                return Err(self.expected("a value"));
            }
        };
        Ok(Expr::Const(c))
    }
}

#[cfg(test)]
mod tests;
