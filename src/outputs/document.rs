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

use std::fmt;

use base64::Engine;
use bytes::Bytes;
use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};

use super::{Author, MAX_HEADERS, Output, Refusal, check_header};
use crate::subject;

/// A list's outputs, or why they cannot be published.
pub(crate) type Outputs = Result<Vec<Output>, Refusal>;

/// Reads a `publish` list: at most `max` messages, their headers checked for
/// `author`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct List {
    pub(crate) author: Author,
    pub(crate) max: usize,
}

impl<'de> DeserializeSeed<'de> for List {
    type Value = Outputs;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Outputs, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for List {
    type Value = Outputs;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a list of messages")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Outputs, A::Error> {
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
            match seq.next_element_seed(OutputSeed {
                author: self.author,
            })? {
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

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Outputs, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(Err(Refusal::Malformed("\"publish\" is not a list".into())))
    }

    fn visit_str<E: de::Error>(self, _: &str) -> Result<Outputs, E> {
        Ok(Err(Refusal::Malformed("\"publish\" is not a list".into())))
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Outputs, E> {
        self.visit_str("")
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Outputs, E> {
        self.visit_str("")
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Outputs, E> {
        self.visit_str("")
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Outputs, E> {
        self.visit_str("")
    }

    fn visit_unit<E: de::Error>(self) -> Result<Outputs, E> {
        self.visit_str("")
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

impl<'de> DeserializeSeed<'de> for OutputSeed {
    type Value = Result<Output, Wrong>;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for OutputSeed {
    type Value = Result<Output, Wrong>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a message")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let (mut subject, mut headers, mut payload) = (None, Vec::new(), None);
        let mut wrong: Option<Wrong> = None;
        while let Some(key) = map.next_key::<String>()? {
            if wrong.is_some() {
                map.next_value::<IgnoredAny>()?;
                continue;
            }
            let failed = match key.as_str() {
                "subject" => match map.next_value_seed(Text)? {
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
                    .next_value_seed(Headers {
                        out: &mut headers,
                        author: self.author,
                    })?
                    .err(),
                k @ ("data" | "data_base64") => {
                    let text = map.next_value_seed(Text)?;
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

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Err("not an object".into()))
    }

    fn visit_str<E: de::Error>(self, _: &str) -> Result<Self::Value, E> {
        Ok(Err("not an object".into()))
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
        self.visit_str("")
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> {
        self.visit_str("")
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> {
        self.visit_str("")
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
        self.visit_str("")
    }

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        self.visit_str("")
    }
}

/// A JSON string, or `None` for any other value (read past).
pub(crate) struct Text;

impl<'de> DeserializeSeed<'de> for Text {
    type Value = Option<String>;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Option<String>, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Text {
    type Value = Option<String>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Option<String>, E> {
        Ok(Some(v.to_string()))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Option<String>, E> {
        Ok(Some(v))
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Option<String>, E> {
        Ok(None)
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Option<String>, E> {
        Ok(None)
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Option<String>, E> {
        Ok(None)
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Option<String>, E> {
        Ok(None)
    }

    fn visit_unit<E: de::Error>(self) -> Result<Option<String>, E> {
        Ok(None)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Option<String>, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(None)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Option<String>, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(None)
    }
}

/// `{"Name": "value" | ["values"]}`: each value pushed onto the message's headers
/// as it is read, checked, and counted: past [`MAX_HEADERS`] values the rest is read
/// past, never kept (a list of 700,000 empty strings costs nothing more).
struct Headers<'h> {
    out: &'h mut Vec<(String, String)>,
    author: Author,
}

impl<'de> DeserializeSeed<'de> for Headers<'_> {
    type Value = Result<(), Wrong>;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Headers<'_> {
    type Value = Result<(), Wrong>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object of headers")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut wrong = None;
        while let Some(name) = map.next_key::<String>()? {
            if wrong.is_some() {
                map.next_value::<IgnoredAny>()?;
                continue;
            }
            wrong = map
                .next_value_seed(Values {
                    name: &name,
                    out: self.out,
                    author: self.author,
                })?
                .err();
        }
        Ok(wrong.map_or(Ok(()), Err))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Err("headers has the wrong type".into()))
    }

    fn visit_str<E: de::Error>(self, _: &str) -> Result<Self::Value, E> {
        Ok(Err("headers has the wrong type".into()))
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
        self.visit_str("")
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> {
        self.visit_str("")
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> {
        self.visit_str("")
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
        self.visit_str("")
    }

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        self.visit_str("")
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

impl<'de> DeserializeSeed<'de> for Values<'_> {
    type Value = Result<(), Wrong>;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Values<'_> {
    type Value = Result<(), Wrong>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string or a list of strings")
    }

    fn visit_str<E: de::Error>(mut self, v: &str) -> Result<Self::Value, E> {
        Ok(self.push(v.to_string()))
    }

    fn visit_string<E: de::Error>(mut self, v: String) -> Result<Self::Value, E> {
        Ok(self.push(v))
    }

    fn visit_seq<A: SeqAccess<'de>>(mut self, mut seq: A) -> Result<Self::Value, A::Error> {
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
            match seq.next_element_seed(Text)? {
                None => break,
                Some(Some(v)) => wrong = self.push(v).err(),
                Some(None) => wrong = Some(self.not_strings()),
            }
        }
        Ok(wrong.map_or(Ok(()), Err))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(Err(self.not_strings()))
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
        Ok(Err(self.not_strings()))
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> {
        Ok(Err(self.not_strings()))
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> {
        Ok(Err(self.not_strings()))
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
        Ok(Err(self.not_strings()))
    }

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(Err(self.not_strings()))
    }
}

/// The whole `{"publish": [...]}` document: nothing else in it.
pub(crate) struct Document {
    pub(crate) list: List,
}

impl<'de> DeserializeSeed<'de> for Document {
    type Value = Outputs;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Outputs, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Document {
    type Value = Outputs;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Outputs, A::Error> {
        let mut found: Option<Outputs> = None;
        let mut wrong = None;
        while let Some(key) = map.next_key::<String>()? {
            match key.as_str() {
                "publish" if found.is_none() => found = Some(map.next_value_seed(self.list)?),
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

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Outputs, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Err(Refusal::Malformed("not a JSON object".into())))
    }

    fn visit_str<E: de::Error>(self, _: &str) -> Result<Outputs, E> {
        Ok(Err(Refusal::Malformed("not a JSON object".into())))
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Outputs, E> {
        self.visit_str("")
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Outputs, E> {
        self.visit_str("")
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Outputs, E> {
        self.visit_str("")
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Outputs, E> {
        self.visit_str("")
    }

    fn visit_unit<E: de::Error>(self) -> Result<Outputs, E> {
        self.visit_str("")
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
