//! The spans jetrelay records, as plain data: made on the delivery path, queued,
//! encoded later off it (`super::encode`). Attribute keys are static; values are
//! borrowed static text, owned text or integers.

use super::context::SpanContext;

/// What a span is, in OTLP's numbering.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpanKind {
    /// A request jetrelay serves (a NATS request to a service source).
    Server = 2,
    /// A request jetrelay makes (to the app).
    Client = 3,
    /// A message jetrelay publishes.
    Producer = 4,
    /// A message jetrelay processes.
    Consumer = 5,
}

/// An attribute's value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    /// Static text.
    Str(&'static str),
    /// Text.
    Text(Box<str>),
    /// An integer.
    Int(i64),
}

impl From<&'static str> for Value {
    fn from(s: &'static str) -> Value {
        Value::Str(s)
    }
}

impl From<String> for Value {
    fn from(s: String) -> Value {
        Value::Text(s.into_boxed_str())
    }
}

impl From<i64> for Value {
    fn from(n: i64) -> Value {
        Value::Int(n)
    }
}

impl From<u64> for Value {
    fn from(n: u64) -> Value {
        Value::Int(i64::try_from(n).unwrap_or(i64::MAX))
    }
}

impl From<u32> for Value {
    fn from(n: u32) -> Value {
        Value::Int(i64::from(n))
    }
}

/// A link to another span (a batch request's to each message's span).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpanLink {
    /// The span linked to.
    pub context: SpanContext,
    /// What varies per linked message.
    pub attributes: Vec<(&'static str, Value)>,
}

/// A finished span.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Span {
    /// Its own context (trace, span id, flags, tracestate).
    pub context: SpanContext,
    /// Its parent's span id, when it has one.
    pub parent: Option<[u8; 8]>,
    /// Whether the parent is another process's (a message's context).
    pub parent_remote: bool,
    /// What it is.
    pub kind: SpanKind,
    /// `process <subject>`, `POST`, `publish <subject>`.
    pub name: Box<str>,
    /// Start, Unix nanoseconds.
    pub start_ns: u64,
    /// End, Unix nanoseconds.
    pub end_ns: u64,
    /// Its attributes.
    pub attributes: Vec<(&'static str, Value)>,
    /// Its links.
    pub links: Vec<SpanLink>,
    /// An error status, with its description.
    pub error: Option<Box<str>>,
}

impl Span {
    /// About how many bytes it takes queued (for the queue's bound).
    pub fn size(&self) -> usize {
        let value = |v: &Value| match v {
            Value::Text(t) => t.len() + 16,
            _ => 16,
        };
        let attrs = |a: &[(&'static str, Value)]| -> usize {
            a.iter().map(|(k, v)| k.len() + value(v) + 8).sum()
        };
        let state = |c: &SpanContext| c.tracestate.as_ref().map_or(0, String::len);
        std::mem::size_of::<Span>()
            + self.name.len()
            + state(&self.context)
            + attrs(&self.attributes)
            + self
                .links
                .iter()
                .map(|l| std::mem::size_of::<SpanLink>() + state(&l.context) + attrs(&l.attributes))
                .sum::<usize>()
            + self.error.as_ref().map_or(0, |e| e.len())
    }
}
