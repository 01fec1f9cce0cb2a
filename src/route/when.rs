//! A route's `when`: a CEL expression (the `cel` crate, named only here) over
//! `subject` (a string), `headers` (a map of each header's first value, under its
//! name as sent and in lower case) and `body` (the payload as JSON when it is JSON, else `null`). Compiled
//! once, when the config loads ([`When::compile`]); evaluated per message
//! ([`When::holds`] on a message's [`Vars`]): anything but `true` (an evaluation
//! error such as a missing field or `null.type`, or a value that is not a bool) is
//! no match. The body is read ([`read_body`]) once per message, only for a `when`
//! that names it, straight into CEL's values, borrowing the payload's strings: no
//! JSON tree is built first. Bounded: an expression of at most
//! [`MAX_EXPRESSION`] bytes, nested at most as deep as the parser's limit; a body
//! nested at most as deep as serde_json's. Never a panic.

use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, LazyLock};

use cel::common::ast::{EntryExpr, Expr, IdedEntryExpr, IdedExpr};
use cel::common::types::{
    CelBool, CelDouble, CelInt, CelList, CelMap, CelMapKey, CelNull, CelString, CelUInt,
};
use cel::common::value::Val;
use cel::{Context, Env, Program, Value};
use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

/// The longest expression taken.
pub const MAX_EXPRESSION: usize = 4096;

/// The deepest expression taken (its tree: `a + b` is one level over `a` and
/// `b`). Evaluation recurses over the tree, on whatever thread delivers.
pub const MAX_DEPTH: usize = 32;

/// The parser's own stack: it recurses deeply (a hundred kilobytes per nested
/// parenthesis in a debug build), so it runs on a thread of its own, once per
/// expression at load.
const PARSER_STACK: usize = 128 << 20;

/// CEL's standard environment, built once (its functions and macros).
static ENV: LazyLock<Arc<Env>> = LazyLock::new(|| Arc::new(Env::stdlib()));

/// A compiled `when`.
#[derive(Clone)]
pub struct When {
    /// As written.
    source: String,
    program: Arc<Program>,
    /// Whether it names `body` (else the payload is never read for it).
    uses_body: bool,
    /// Whether it names `headers` (else their map is not made for it).
    uses_headers: bool,
    /// The body's top-level members it reads, when it reads the body only as
    /// `body.<name>` (`None`: the whole body).
    members: Option<Vec<String>>,
}

/// Why a `when` does not compile.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WhenError {
    /// Nothing to evaluate.
    #[error("an empty expression")]
    Empty,
    /// Longer than [`MAX_EXPRESSION`].
    #[error("{0} bytes, over {MAX_EXPRESSION}")]
    TooLong(usize),
    /// The parser's message (its first line per error).
    #[error("does not compile: {0}")]
    Syntax(String),
    /// Its tree is deeper than [`MAX_DEPTH`].
    #[error("nested deeper than {MAX_DEPTH} levels")]
    TooDeep,
    /// The parser could not run (no thread for it, or it failed).
    #[error("could not be compiled: {0}")]
    Parser(String),
}

impl When {
    /// Compiles `source`.
    ///
    /// # Errors
    /// [`WhenError`] when it is empty, too long or not CEL. (A variable it names
    /// that does not exist is an evaluation error: no match.)
    pub fn compile(source: &str) -> Result<When, WhenError> {
        if source.trim().is_empty() {
            return Err(WhenError::Empty);
        }
        if source.len() > MAX_EXPRESSION {
            return Err(WhenError::TooLong(source.len()));
        }
        let compiled = std::thread::scope(|s| {
            std::thread::Builder::new()
                .name("cel-parser".into())
                .stack_size(PARSER_STACK)
                .spawn_scoped(s, || ENV.compile(source))
                .map_err(|e| WhenError::Parser(e.to_string()))?
                .join()
                .map_err(|_| WhenError::Parser("the parser failed".into()))
        })?;
        let program = compiled.map_err(|e| {
            let lines: Vec<String> = e
                .to_string()
                .lines()
                .filter_map(|l| l.strip_prefix("ERROR: <input>:"))
                .map(str::to_string)
                .collect();
            WhenError::Syntax(lines.join("; "))
        })?;
        if depth(program.expression()) > MAX_DEPTH {
            return Err(WhenError::TooDeep);
        }
        let references = program.references();
        let uses_body = references.has_variable("body");
        let uses_headers = references.has_variable("headers");
        let members = body_members(program.expression());
        Ok(When {
            source: source.to_string(),
            program: Arc::new(program),
            uses_body,
            uses_headers,
            members,
        })
    }

    /// The expression as written.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Whether it reads the body.
    pub fn uses_body(&self) -> bool {
        self.uses_body
    }

    /// The body's top-level members it reads (`None`: it may read any of it).
    pub fn members(&self) -> Option<&[String]> {
        self.members.as_deref()
    }

    /// Whether it is `true` for the message `facts` describes.
    pub fn holds(&self, facts: &mut Vars<'_>) -> bool {
        let ctx = facts.context(self.uses_headers, self.uses_body);
        matches!(self.program.execute(ctx), Ok(Value::Bool(true)))
    }
}

/// How deep an expression's tree is (a leaf: 1), without recursion.
fn depth<'e>(root: &'e IdedExpr) -> usize {
    let mut deepest = 0;
    let mut open = vec![(root, 1)];
    while let Some((e, d)) = open.pop() {
        deepest = deepest.max(d);
        children(e, &mut |c: &'e IdedExpr| open.push((c, d + 1)));
    }
    deepest
}

/// The body's top-level members an expression reads, when it names `body` only as
/// `body.<name>` (a selection, `has()` included); `None` when it reads it any
/// other way (`body["x"]`, `size(body)`, `body` alone).
fn body_members<'e>(root: &'e IdedExpr) -> Option<Vec<String>> {
    let mut members: Vec<String> = Vec::new();
    let mut open = vec![root];
    while let Some(e) = open.pop() {
        match &e.expr {
            Expr::Select(sel) if matches!(&sel.operand.expr, Expr::Ident(n) if n == "body") => {
                if !members.contains(&sel.field) {
                    members.push(sel.field.clone());
                }
            }
            Expr::Ident(n) if n == "body" => return None,
            _ => children(e, &mut |c: &'e IdedExpr| open.push(c)),
        }
    }
    Some(members)
}

/// Hands each of an expression's direct children to `push`.
fn children<'e>(e: &'e IdedExpr, push: &mut impl FnMut(&'e IdedExpr)) {
    match &e.expr {
        Expr::Call(c) => {
            c.target.iter().for_each(|t| push(t));
            c.args.iter().for_each(&mut *push);
        }
        Expr::Comprehension(c) => {
            for part in [
                &c.iter_range,
                &c.accu_init,
                &c.loop_cond,
                &c.loop_step,
                &c.result,
            ] {
                push(part);
            }
        }
        Expr::List(l) => l.elements.iter().for_each(&mut *push),
        Expr::Map(m) => m.entries.iter().for_each(|en| entry(en, push)),
        Expr::Struct(st) => st.entries.iter().for_each(|en| entry(en, push)),
        Expr::Select(sel) => push(&sel.operand),
        Expr::Unspecified | Expr::Ident(_) | Expr::Literal(_) => {}
    }
}

/// A map or struct entry's expressions.
fn entry<'e>(en: &'e IdedEntryExpr, push: &mut impl FnMut(&'e IdedExpr)) {
    match &en.expr {
        EntryExpr::MapEntry(m) => {
            push(&m.key);
            push(&m.value);
        }
        EntryExpr::StructField(f) => push(&f.value),
    }
}

impl fmt::Debug for When {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("When").field(&self.source).finish()
    }
}

impl PartialEq for When {
    fn eq(&self, other: &Self) -> bool {
        self.source == other.source
    }
}

impl Eq for When {}

/// What `when` sees of one message: its `subject`, `headers` and `body`, made
/// into CEL's variables once, on the first evaluation that needs them (the
/// headers' map and the body only for one that names them), and shared by every
/// route's `when`.
pub struct Vars<'a> {
    subject: &'a str,
    headers: &'a [(String, String)],
    payload: &'a [u8],
    /// Made on first use (with `subject`); `headers` and `body` added when first
    /// needed.
    ctx: Option<Context<'a, 'a>>,
    with_headers: bool,
    with_body: bool,
    /// The body's top-level members any `when` may read (`None`: all of it).
    members: Option<Vec<&'a str>>,
}

impl<'a> Vars<'a> {
    /// The message's facts, nothing read yet.
    pub fn new(subject: &'a str, headers: &'a [(String, String)], payload: &'a [u8]) -> Self {
        Vars {
            subject,
            headers,
            payload,
            ctx: None,
            with_headers: false,
            with_body: false,
            members: None,
        }
    }

    /// The same, reading only these top-level members of the body (the union of
    /// what the `when`s that may run read; `None`: all of it).
    pub fn reading(mut self, members: Option<Vec<&'a str>>) -> Self {
        self.members = members;
        self
    }

    /// The variables, with `body` when `body` is asked for.
    fn context(&mut self, headers: bool, body: bool) -> &Context<'a, 'a> {
        let subject = self.subject;
        let ctx = self.ctx.get_or_insert_with(|| {
            let mut ctx = Context::with_env(Arc::clone(&ENV));
            ctx.add_variable_as_val("subject", Box::new(CelString::from(subject)));
            ctx
        });
        if headers && !self.with_headers {
            let mut first: HashMap<CelMapKey<'a>, Box<dyn Val + 'a>> =
                HashMap::with_capacity(self.headers.len());
            for (n, v) in self.headers {
                let value = || Box::new(CelString::from(v.as_str())) as Box<dyn Val + 'a>;
                first
                    .entry(CelMapKey::from(n.as_str()))
                    .or_insert_with(value);
                // In lower case too: header names are matched in any case elsewhere
                // (a route's `headers`, `header:NAME` ordering), so `headers["tenant"]`
                // finds a `Tenant` header.
                if n.bytes().any(|b| b.is_ascii_uppercase()) {
                    first
                        .entry(CelMapKey::from(n.to_ascii_lowercase()))
                        .or_insert_with(value);
                }
            }
            ctx.add_variable_as_val("headers", Box::new(CelMap::from(first)));
            self.with_headers = true;
        }
        if body && !self.with_body {
            ctx.add_variable_as_val("body", read_body(self.payload, self.members.as_deref()));
            self.with_body = true;
        }
        ctx
    }

    /// Whether the body has been read (for the tests: at most once, and only when
    /// a `when` names it).
    pub fn body_read(&self) -> bool {
        self.with_body
    }
}

impl fmt::Debug for Vars<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Vars")
            .field("subject", &self.subject)
            .field("body_read", &self.with_body)
            .finish_non_exhaustive()
    }
}

/// `payload` as JSON (UTF-8, one value) in CEL's values, strings borrowed from
/// it; `null` when it is not JSON. With `members`, an object keeps only those of
/// its top-level members (the others are checked as JSON, never built).
pub fn read_body<'a>(payload: &'a [u8], members: Option<&[&str]>) -> Box<dyn Val + 'a> {
    if std::str::from_utf8(payload).is_err() {
        return Box::new(CelNull);
    }
    let mut de = serde_json::Deserializer::from_slice(payload);
    let seed = Json { only: members };
    match seed.deserialize(&mut de).and_then(|v| de.end().map(|()| v)) {
        Ok(v) => v,
        Err(_) => Box::new(CelNull),
    }
}

/// Reads one JSON value into CEL's values; of an object, only the members `only`
/// names when given (at the top level: nested values are read whole).
#[derive(Clone, Copy)]
struct Json<'o> {
    only: Option<&'o [&'o str]>,
}

/// A whole value.
const WHOLE: Json<'static> = Json { only: None };

impl<'de> DeserializeSeed<'de> for Json<'_> {
    type Value = Box<dyn Val + 'de>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Json<'_> {
    type Value = Box<dyn Val + 'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(Box::new(CelNull))
    }
    fn visit_bool<E>(self, v: bool) -> Result<Self::Value, E> {
        Ok(Box::new(CelBool::from(v)))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Self::Value, E> {
        Ok(Box::new(CelInt::from(v)))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Self::Value, E> {
        // An integer as `int` where it fits (`body.n == 1`), `uint` beyond.
        Ok(match i64::try_from(v) {
            Ok(i) => Box::new(CelInt::from(i)),
            Err(_) => Box::new(CelUInt::from(v)),
        })
    }
    fn visit_f64<E>(self, v: f64) -> Result<Self::Value, E> {
        Ok(Box::new(CelDouble::from(v)))
    }
    fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> {
        Ok(Box::new(CelString::from(v)))
    }
    fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
        Ok(Box::new(CelString::from(v.to_string())))
    }
    fn visit_string<E>(self, v: String) -> Result<Self::Value, E> {
        Ok(Box::new(CelString::from(v)))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut s: A) -> Result<Self::Value, A::Error> {
        let mut out = Vec::with_capacity(s.size_hint().unwrap_or(0).min(64));
        while let Some(v) = s.next_element_seed(WHOLE)? {
            out.push(v);
        }
        Ok(Box::new(CelList::from(out)))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<Self::Value, A::Error> {
        let mut out = HashMap::with_capacity(m.size_hint().unwrap_or(0).min(64));
        while let Some(k) = m.next_key_seed(Name)? {
            if self.only.is_some_and(|only| !only.contains(&k.as_ref())) {
                m.next_value::<IgnoredAny>()?;
                continue;
            }
            let v = m.next_value_seed(WHOLE)?;
            let key = match k {
                Cow::Borrowed(b) => CelMapKey::from(b),
                Cow::Owned(o) => CelMapKey::from(o),
            };
            out.insert(key, v);
        }
        Ok(Box::new(CelMap::from(out)))
    }
}

/// Reads an object's member name as a map key, borrowed where it can be.
struct Name;

impl<'de> DeserializeSeed<'de> for Name {
    type Value = Cow<'de, str>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for Name {
    type Value = Cow<'de, str>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a member name")
    }
    fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> {
        Ok(Cow::Borrowed(v))
    }
    fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
        Ok(Cow::Owned(v.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect()
    }

    fn holds(expr: &str, subject: &str, h: &[(&str, &str)], payload: &[u8]) -> bool {
        let h = headers(h);
        When::compile(expr)
            .unwrap()
            .holds(&mut Vars::new(subject, &h, payload))
    }

    #[test]
    fn when_table() {
        let order = br#"{"type": "order.created", "n": 1, "price": 9.75, "items": [{"sku": "a"}],
            "tenant": "t\u00e9", "big": 18446744073709551615, "none": null}"#;
        let h = [("Tenant", "prod"), ("Tenant", "second"), ("X-Ver", "2")];
        let cases: &[(&str, bool)] = &[
            (
                r#"body.type == "order.created" && headers["Tenant"] != "test""#,
                true,
            ),
            (r#"headers["Tenant"] == "prod""#, true),
            (
                r#"headers["tenant"] == "prod" && headers["x-ver"] == "2""#,
                true,
            ),
            (r#"headers["TENANT"] == "prod""#, false),
            (r#"headers["Tenant"] == "second""#, false),
            ("body.n == 1", true),
            ("body.n == 1.0", true),
            ("body.price > 9.5", true),
            ("body.big > 1", true),
            (r#"body.tenant == "té""#, true),
            (r#"body.items.exists(i, i.sku == "a")"#, true),
            ("has(body.type) && !has(body.zzz)", true),
            ("body.none == null", true),
            (
                r#"subject.startsWith("orders.") && subject.matches("^orders\\.[a-z]+$")"#,
                true,
            ),
            // Errors and non-bools are no match.
            ("body.missing == 1", false),
            (r#"headers["Absent"] == "a""#, false),
            ("null.type == 1", false),
            ("body.none.type == 1", false),
            ("1 / 0 == 1", false),
            ("body.n", false),
            (r#""true""#, false),
            ("nobody == 1", false),
        ];
        for (expr, want) in cases {
            assert_eq!(holds(expr, "orders.eu", &h, order), *want, "{expr}");
        }
        // Not JSON: body is null.
        for payload in [&b"not json"[..], b"{\"a\": 1} trailing", b"\xff\xfe", b""] {
            assert!(holds("body == null", "s", &[], payload), "{payload:?}");
            assert!(!holds("body.type == \"x\"", "s", &[], payload));
        }
        assert!(holds("body == 7", "s", &[], b" 7 "));
    }

    #[test]
    fn what_does_not_compile_is_said() {
        for (expr, says) in [
            ("", "empty"),
            ("  ", "empty"),
            ("body.type ==", "1:13: Syntax error"),
            ("'unterminated", "Syntax error"),
            (&"(".repeat(200), "Syntax error"),
            (&format!("1{} == 1", "+1".repeat(500)), "nested deeper"),
            (
                &format!("{}1{} == 1", "[".repeat(60), "]".repeat(60)),
                "nested deeper",
            ),
        ] {
            let e = When::compile(expr).unwrap_err().to_string();
            assert!(e.contains(says), "{expr}: {e}");
            assert!(!e.contains('\n'), "one line: {e}");
        }
        let long = format!("body.a == \"{}\"", "x".repeat(MAX_EXPRESSION));
        assert!(matches!(When::compile(&long), Err(WhenError::TooLong(_))));
        // Long flat chains are shallow (CEL balances `&&` and `||`).
        let wide = format!("true{}", " && subject != \"x\"".repeat(150));
        assert!(holds(&wide, "s", &[], b""));
        let deep = format!("1{} > 1", "+1".repeat(MAX_DEPTH - 4));
        assert!(holds(&deep, "s", &[], b""));
        // Parentheses are no level of their own.
        let parens = format!("{}1{} == 1", "(".repeat(90), ")".repeat(90));
        assert!(holds(&parens, "s", &[], b""));
        for (expr, want) in [
            ("body.type == \"a\"", Some(vec!["type"])),
            (
                "has(body.a) && body.b.exists(i, i > 1) && body.a == 1",
                Some(vec!["a", "b"]),
            ),
            ("subject == \"a\"", Some(vec![])),
            ("body[\"type\"] == \"a\"", None),
            ("size(body) > 0", None),
            ("type(body) == map", None),
            ("body == null", None),
        ] {
            let w = When::compile(expr).unwrap();
            let got = w
                .members()
                .map(|m| m.iter().map(String::as_str).collect::<Vec<_>>());
            assert_eq!(got, want, "{expr}");
        }
        assert!(When::compile("body.type == \"a\"").unwrap().uses_body());
        assert!(!When::compile("subject == \"a\"").unwrap().uses_body());
    }

    #[test]
    fn the_body_is_read_once_and_only_for_a_when_that_names_it() {
        let (h, payload) = (headers(&[]), br#"{"a": 1}"#);
        let mut vars = Vars::new("s", &h, payload);
        let subject = When::compile("subject == \"s\"").unwrap();
        assert!(subject.holds(&mut vars));
        assert!(!vars.body_read());
        let body = When::compile("body.a == 1").unwrap();
        assert!(body.holds(&mut vars));
        assert!(vars.body_read());
        assert!(body.holds(&mut vars) && subject.holds(&mut vars));
        // Reading only some members: those are there, whatever else the body has.
        let payload = br#"{"skip": [1, {"deep": "x\u00e9"}], "a": {"b": [true]}, "c": 2}"#;
        let mut vars = Vars::new("s", &h, payload).reading(Some(vec!["a", "c"]));
        let both = When::compile("body.a.b[0] && body.c == 2 && !has(body.skip)").unwrap();
        assert!(both.holds(&mut vars));
        let mut vars = Vars::new("s", &h, b"[1, 2]").reading(Some(vec!["a"]));
        assert!(
            When::compile("body[1] == 2").unwrap().holds(&mut vars),
            "not an object: whole"
        );
        let mut vars = Vars::new("s", &h, b"{\"a\": 1} x").reading(Some(vec!["a"]));
        assert!(
            When::compile("body == null").unwrap().holds(&mut vars),
            "not JSON"
        );
    }

    /// Any JSON value (nested, escaped, numbers of every kind).
    fn json() -> impl proptest::strategy::Strategy<Value = serde_json::Value> {
        use proptest::prelude::*;
        let leaf = prop_oneof![
            Just(serde_json::Value::Null),
            any::<bool>().prop_map(serde_json::Value::from),
            any::<i64>().prop_map(serde_json::Value::from),
            any::<u64>().prop_map(serde_json::Value::from),
            any::<f64>()
                .prop_filter("finite", |f| f.is_finite())
                .prop_map(serde_json::Value::from),
            ".{0,12}".prop_map(serde_json::Value::from),
        ];
        leaf.prop_recursive(4, 32, 6, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..6).prop_map(serde_json::Value::from),
                proptest::collection::btree_map("[a-z\"\\\\]{0,4}", inner, 0..6)
                    .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest::proptest! {
        /// Whatever the body, `when` answers, never panics, and agrees with the
        /// JSON it was given.
        #[test]
        fn when_over_random_json_bodies(body in json(), bytes in proptest::collection::vec(proptest::arbitrary::any::<u8>(), 0..64)) {
            let payload = serde_json::to_vec(&body).unwrap();
            let h = headers(&[("A", "1")]);
            for expr in [
                "body.type == \"x\"",
                "has(body.a) && body.a > 1",
                "size(body) > 2",
                "body.exists(k, k == \"a\")",
                "type(body) == map && body.all(k, k != \"\")",
                "body[0] == null",
                "body == null",
            ] {
                let w = When::compile(expr).unwrap();
                let _ = w.holds(&mut Vars::new("s", &h, &payload));
                let _ = w.holds(&mut Vars::new("s", &h, &bytes));
            }
            let is_null = When::compile("body == null").unwrap();
            proptest::prop_assert_eq!(
                is_null.holds(&mut Vars::new("s", &h, &payload)),
                body.is_null()
            );
            if let serde_json::Value::Object(m) = &body {
                let has_a = When::compile("has(body.a)").unwrap();
                proptest::prop_assert_eq!(has_a.holds(&mut Vars::new("s", &h, &payload)), m.contains_key("a"));
                let mut only_a = Vars::new("s", &h, &payload).reading(Some(vec!["a"]));
                proptest::prop_assert_eq!(has_a.holds(&mut only_a), m.contains_key("a"));
            }
        }
    }
}
