//! An app's answer kept whole, for a caller that hands it on (a NATS request's
//! reply): its status, its headers and its body up to a bound, and whether the body
//! was longer than that bound.

use bytes::Bytes;

/// What the app answered, kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeptAnswer {
    /// The HTTP status.
    pub status: u16,
    /// Its headers in order (names lowercase); values that are not text are left
    /// out.
    pub headers: Vec<(String, String)>,
    /// The body, at most the bound asked for.
    pub body: Bytes,
    /// How many bytes were read in all when the body was over the bound (then `body`
    /// is empty: a cut body is never handed on as if whole).
    pub over: Option<usize>,
}

impl KeptAnswer {
    /// The value of header `name` (lowercase), the first when it repeats.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}
