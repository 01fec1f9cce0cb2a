//! The `{"publish": [...]}` list read straight from the JSON text into outputs, with
//! no JSON tree in between: a tree costs ten to fifty times its text (every small
//! value its own allocation), so an answer of a few megabytes could take a gigabyte.
//! Here an answer of N bytes costs about N more (the strings it carries), and a list
//! longer than its bound is refused as soon as it is.
//!
//! What is wrong with a list that is JSON (a bad subject, a header that is not a
//! string, one message too many) is a [`Refusal`] of that list, and the rest of the
//! text is still read (skipped), so that a batch answer's other items keep their own
//! verdicts; text that is not JSON fails the whole read.

use std::borrow::Cow;
use std::fmt;

use base64::Engine;
use bytes::Bytes;
use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};

use super::{Author, MAX_HEADERS, Output, Refusal, check_header};
use crate::subject;

/// A list's outputs, or why they cannot be published.
pub(crate) type Outputs = Result<Vec<Output>, Refusal>;

/// A reader of one JSON shape, read through [`Seed`]: what it makes of an object, a
/// list or a string when that is its shape, and what of any other value, which is
/// read past (never kept) so that the rest of the text is still read.
pub(crate) trait Shape<'de>: Sized {
    /// What it reads.
    type Value;
    /// What it reads, for serde's messages.
    const EXPECTING: &'static str;

    /// An object.
    fn map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(self.other())
    }

    /// A list.
    fn seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(self.other())
    }

    /// A string.
    fn string(self, _: Cow<'_, str>) -> Self::Value {
        self.other()
    }

    /// Any value not of its shape.
    fn other(self) -> Self::Value;
}

/// Reads one value with its [`Shape`].
pub(crate) struct Seed<S>(pub(crate) S);

impl<'de, S: Shape<'de>> DeserializeSeed<'de> for Seed<S> {
    type Value = S::Value;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<S::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de, S: Shape<'de>> Visitor<'de> for Seed<S> {
    type Value = S::Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(S::EXPECTING)
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<S::Value, A::Error> {
        self.0.map(map)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<S::Value, A::Error> {
        self.0.seq(seq)
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<S::Value, E> {
        Ok(self.0.string(Cow::Borrowed(v)))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<S::Value, E> {
        Ok(self.0.string(Cow::Owned(v)))
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<S::Value, E> {
        Ok(self.0.other())
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<S::Value, E> {
        Ok(self.0.other())
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<S::Value, E> {
        Ok(self.0.other())
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<S::Value, E> {
        Ok(self.0.other())
    }

    fn visit_unit<E: de::Error>(self) -> Result<S::Value, E> {
        Ok(self.0.other())
    }
}

/// Reads a `publish` list: at most `max` messages, their headers checked for
/// `author`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct List {
    pub(crate) author: Author,
    pub(crate) max: usize,
}

impl<'de> Shape<'de> for List {
    type Value = Outputs;
    const EXPECTING: &'static str = "a list of messages";

    fn seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Outputs, A::Error> {
        let mut out = Vec::new();
        let mut refusal = None;
        let mut i = 0;
        loop {
            if refusal.is_some() {
                // Already refused: the rest is read past, not kept.
                if seq.next_element::<IgnoredAny>()?.is_none() {
                    break;
                }
                continue;
            }
            if out.len() == self.max {
                if seq.next_element::<IgnoredAny>()?.is_some() {
                    refusal = Some(Refusal::TooMany { max: self.max });
                    continue;
                }
                break;
            }
            match seq.next_element_seed(Seed(OutputSeed {
                author: self.author,
            }))? {
                None => break,
                Some(Ok(o)) => out.push(o),
                Some(Err(Wrong::Malformed(why))) => {
                    refusal = Some(Refusal::Malformed(format!("item {i}: {why}")));
                }
                Some(Err(Wrong::TooManyHeaders)) => {
                    refusal = Some(Refusal::TooManyHeaders { max: MAX_HEADERS });
                }
            }
            i += 1;
        }
        Ok(match refusal {
            Some(r) => Err(r),
            None => Ok(out),
        })
    }

    fn other(self) -> Outputs {
        Err(Refusal::Malformed("\"publish\" is not a list".into()))
    }
}

/// What is wrong with one message of a list.
#[derive(Debug)]
enum Wrong {
    /// Not of the documented shape, or a header it may not carry.
    Malformed(String),
    /// More than [`MAX_HEADERS`] header values.
    TooManyHeaders,
}

impl From<String> for Wrong {
    fn from(why: String) -> Wrong {
        Wrong::Malformed(why)
    }
}

impl From<&str> for Wrong {
    fn from(why: &str) -> Wrong {
        Wrong::Malformed(why.to_string())
    }
}

/// One message of a list: `subject`, `headers`, `data` or `data_base64`.
struct OutputSeed {
    author: Author,
}

impl<'de> Shape<'de> for OutputSeed {
    type Value = Result<Output, Wrong>;
    const EXPECTING: &'static str = "a message";

    fn map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let (mut subject, mut headers, mut payload) = (None, Vec::new(), None);
        let mut wrong: Option<Wrong> = None;
        while let Some(key) = map.next_key::<String>()? {
            if wrong.is_some() {
                map.next_value::<IgnoredAny>()?;
                continue;
            }
            let failed = match key.as_str() {
                "subject" => match map.next_value_seed(Seed(Text))? {
                    Some(s) => match subject::validate_publish_subject(&s) {
                        Ok(()) => {
                            subject = Some(s);
                            None
                        }
                        Err(e) => Some(format!("subject {s:?} {e}").into()),
                    },
                    None => Some("subject has the wrong type".into()),
                },
                "headers" => map
                    .next_value_seed(Seed(Headers {
                        out: &mut headers,
                        author: self.author,
                    }))?
                    .err(),
                k @ ("data" | "data_base64") => {
                    let text = map.next_value_seed(Seed(Text))?;
                    match (text, payload.is_some()) {
                        (_, true) => Some("has both data and data_base64".into()),
                        (None, _) => Some(format!("{k} has the wrong type").into()),
                        (Some(s), false) if k == "data" => {
                            payload = Some(Bytes::from(s));
                            None
                        }
                        (Some(s), false) => {
                            match base64::engine::general_purpose::STANDARD.decode(s.as_bytes()) {
                                Ok(bytes) => {
                                    payload = Some(Bytes::from(bytes));
                                    None
                                }
                                Err(e) => Some(format!("data_base64 is not base64: {e}").into()),
                            }
                        }
                    }
                }
                other => {
                    map.next_value::<IgnoredAny>()?;
                    Some(format!("unknown field {other:?}").into())
                }
            };
            wrong = wrong.or(failed);
        }
        if let Some(why) = wrong {
            return Ok(Err(why));
        }
        Ok(match subject {
            Some(subject) => Ok(Output {
                subject,
                headers,
                payload: payload.unwrap_or_default(),
            }),
            None => Err("has no subject".into()),
        })
    }

    fn other(self) -> Self::Value {
        Err("not an object".into())
    }
}

/// A JSON string, or `None` for any other value (read past).
pub(crate) struct Text;

impl<'de> Shape<'de> for Text {
    type Value = Option<String>;
    const EXPECTING: &'static str = "a string";

    fn string(self, v: Cow<'_, str>) -> Option<String> {
        Some(v.into_owned())
    }

    fn other(self) -> Option<String> {
        None
    }
}

/// `{"Name": "value" | ["values"]}`: each value pushed onto the message's headers
/// as it is read, checked, and counted: past [`MAX_HEADERS`] values the rest is read
/// past, never kept (a list of 700,000 empty strings costs nothing more).
struct Headers<'h> {
    out: &'h mut Vec<(String, String)>,
    author: Author,
}

impl<'de> Shape<'de> for Headers<'_> {
    type Value = Result<(), Wrong>;
    const EXPECTING: &'static str = "an object of headers";

    fn map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut wrong = None;
        while let Some(name) = map.next_key::<String>()? {
            if wrong.is_some() {
                map.next_value::<IgnoredAny>()?;
                continue;
            }
            wrong = map
                .next_value_seed(Seed(Values {
                    name: &name,
                    out: self.out,
                    author: self.author,
                }))?
                .err();
        }
        Ok(wrong.map_or(Ok(()), Err))
    }

    fn other(self) -> Self::Value {
        Err("headers has the wrong type".into())
    }
}

/// A header's value: a string or a list of strings, each pushed as `(name, value)`
/// once checked; anything else is wrong.
struct Values<'h> {
    name: &'h str,
    out: &'h mut Vec<(String, String)>,
    author: Author,
}

impl Values<'_> {
    /// Checks and keeps one value; wrong past [`MAX_HEADERS`].
    fn push(&mut self, value: String) -> Result<(), Wrong> {
        if self.out.len() >= MAX_HEADERS {
            return Err(Wrong::TooManyHeaders);
        }
        check_header(self.name, std::slice::from_ref(&value), self.author)?;
        self.out.push((self.name.to_string(), value));
        Ok(())
    }

    fn not_strings(&self) -> Wrong {
        Wrong::Malformed(format!("header {:?}: values are strings", self.name))
    }
}

impl<'de> Shape<'de> for Values<'_> {
    type Value = Result<(), Wrong>;
    const EXPECTING: &'static str = "a string or a list of strings";

    fn string(mut self, v: Cow<'_, str>) -> Self::Value {
        self.push(v.into_owned())
    }

    fn seq<A: SeqAccess<'de>>(mut self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut wrong = None;
        loop {
            if wrong.is_some() || self.out.len() >= MAX_HEADERS {
                // Read past, nothing kept: one more value is one too many.
                if seq.next_element::<IgnoredAny>()?.is_none() {
                    break;
                }
                wrong = wrong.or(Some(Wrong::TooManyHeaders));
                continue;
            }
            match seq.next_element_seed(Seed(Text))? {
                None => break,
                Some(Some(v)) => wrong = self.push(v).err(),
                Some(None) => wrong = Some(self.not_strings()),
            }
        }
        Ok(wrong.map_or(Ok(()), Err))
    }

    fn other(self) -> Self::Value {
        Err(self.not_strings())
    }
}

/// The whole `{"publish": [...]}` document: nothing else in it.
pub(crate) struct Document {
    pub(crate) list: List,
}

impl<'de> Shape<'de> for Document {
    type Value = Outputs;
    const EXPECTING: &'static str = "a JSON object";

    fn map<A: MapAccess<'de>>(self, mut map: A) -> Result<Outputs, A::Error> {
        let mut found: Option<Outputs> = None;
        let mut wrong = None;
        while let Some(key) = map.next_key::<String>()? {
            match key.as_str() {
                "publish" if found.is_none() => found = Some(map.next_value_seed(Seed(self.list))?),
                other => {
                    map.next_value::<IgnoredAny>()?;
                    wrong = wrong.or(Some(if other == "publish" {
                        "\"publish\" twice".to_string()
                    } else {
                        format!("unknown field {other:?}")
                    }));
                }
            }
        }
        if let Some(why) = wrong {
            return Ok(Err(Refusal::Malformed(why)));
        }
        Ok(found.unwrap_or_else(|| Err(Refusal::Malformed("no \"publish\" list".into()))))
    }

    fn other(self) -> Outputs {
        Err(Refusal::Malformed("not a JSON object".into()))
    }
}

/// Reads a whole JSON text with `seed`: the text must be one JSON value and nothing
/// after it.
///
/// # Errors
/// serde_json's own, for text that is not JSON.
pub(crate) fn read<'de, S: DeserializeSeed<'de>>(
    body: &'de [u8],
    seed: S,
) -> Result<S::Value, serde_json::Error> {
    let mut de = serde_json::Deserializer::from_slice(body);
    let value = seed.deserialize(&mut de)?;
    de.end()?;
    Ok(value)
}
