//! Batch direct get (nats-server 2.11+): a page of a stream's messages in one request,
//! without a consumer and without touching the stream's state. async-nats 0.51's
//! `DirectGetRequest` has no `batch`, so the request goes to
//! `$JS.API.DIRECT.GET.<stream>` with a reply inbox subscribed first, and the replies
//! are read until the `204 EOB` status that ends the batch. With `multi_last`, one
//! request reads the last message of many subjects (the idempotency markers).
//!
//! Each reply is a stored message with `Nats-Sequence`, `Nats-Subject`,
//! `Nats-Time-Stamp` and, in a batch, `Nats-Num-Pending` and `Nats-Last-Sequence`;
//! the EOB carries `Nats-Num-Pending` (matching messages left after the page) and
//! `Nats-Last-Sequence`. The stream needs `allow_direct`: without it nobody answers.

use bytes::Bytes;
use futures::StreamExt;
use serde::Serialize;

use super::Nats;
use crate::dead_letter::stored::Stored;

/// One page request.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct PageRequest {
    /// The first sequence to look at.
    pub seq: u64,
    /// At most this many messages.
    pub batch: usize,
    /// At most this many bytes (the server stops after the message that crosses it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_bytes: Option<usize>,
    /// Only messages on this subject (wildcards allowed).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_by_subj: Option<String>,
    /// Start at the first message stored at or after this time (RFC 3339); `seq` is
    /// then left out.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub start_time: Option<String>,
    /// Not beyond this sequence (a stable snapshot across pages).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub up_to_seq: Option<u64>,
    /// The last message of each of these subjects (at most 1024 matches); `seq` is
    /// then left out.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub multi_last: Option<Vec<String>>,
}

/// One page.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Page {
    /// The messages, in sequence order.
    pub messages: Vec<Stored>,
    /// Matching messages after this page (0: the end).
    pub pending: u64,
    /// The last sequence the server looked at (the next page starts after it).
    pub last_seq: Option<u64>,
}

/// Why a page could not be read.
#[derive(Debug, thiserror::Error)]
pub enum DirectError {
    /// Nobody answers direct gets for the stream.
    #[error(
        "stream {0} does not answer direct gets, so its dead letters cannot be read: set allow_direct: true on it (nats stream edit {0} --allow-direct; a stream jetrelay creates with dlq.manage = true has it)"
    )]
    NotEnabled(String),
    /// The server refused the request.
    #[error("the server refused the direct get: {0}")]
    Refused(String),
    /// The answer stopped before the end of the batch.
    #[error("no answer from the server in time")]
    Timeout,
    /// The request could not be made.
    #[error("cannot read the stream")]
    Nats(#[source] super::Cause),
}

/// The headers direct get adds to each message.
const DIRECT_HEADERS: [&str; 6] = [
    "Nats-Stream",
    "Nats-Sequence",
    "Nats-Time-Stamp",
    "Nats-Subject",
    "Nats-Num-Pending",
    "Nats-Last-Sequence",
];

impl Nats {
    /// Reads one page of `stream`.
    ///
    /// # Errors
    /// [`DirectError`].
    pub async fn direct_page(&self, stream: &str, req: &PageRequest) -> Result<Page, DirectError> {
        let mut body = serde_json::to_value(req).map_err(|e| DirectError::Nats(e.into()))?;
        if (req.start_time.is_some() || req.multi_last.is_some())
            && let Some(map) = body.as_object_mut()
        {
            map.remove("seq");
        }
        let inbox = self.client.new_inbox();
        let mut replies = self
            .client
            .subscribe(inbox.clone())
            .await
            .map_err(|e| DirectError::Nats(e.into()))?;
        self.client
            .publish_with_reply(
                format!("$JS.API.DIRECT.GET.{stream}"),
                inbox,
                Bytes::from(body.to_string()),
            )
            .await
            .map_err(|e| DirectError::Nats(e.into()))?;
        let mut page = Page::default();
        loop {
            let Ok(Some(m)) = tokio::time::timeout(self.patience, replies.next()).await else {
                return Err(DirectError::Timeout);
            };
            let header = |name: &str| {
                m.headers
                    .as_ref()
                    .and_then(|h| h.get(name))
                    .map(|v| v.as_str().to_string())
            };
            let number = |name: &str| header(name).and_then(|v| v.parse::<u64>().ok());
            match m.status.map(u16::from) {
                None => {
                    let Some(seq) = number("Nats-Sequence") else {
                        return Err(DirectError::Refused("a reply without Nats-Sequence".into()));
                    };
                    page.pending = number("Nats-Num-Pending").unwrap_or(0);
                    page.last_seq = Some(seq);
                    // By name: async-nats keeps headers in a hash map, and output that
                    // changes order from run to run is hard to read and to compare.
                    let mut headers: Vec<(String, String)> = m
                        .headers
                        .iter()
                        .flat_map(|h| h.iter())
                        .filter(|(n, _)| !DIRECT_HEADERS.contains(&n.as_ref()))
                        .flat_map(|(n, values)| {
                            values
                                .iter()
                                .map(move |v| (n.to_string(), v.as_str().to_string()))
                        })
                        .collect();
                    headers.sort_by_cached_key(|(n, _)| n.to_ascii_lowercase());
                    page.messages.push(Stored {
                        seq,
                        subject: header("Nats-Subject").unwrap_or_default(),
                        time: header("Nats-Time-Stamp").unwrap_or_default(),
                        headers,
                        payload: m.payload,
                    });
                }
                // The end of the batch.
                Some(204) => {
                    page.pending = number("Nats-Num-Pending").unwrap_or(0);
                    if let Some(last) = number("Nats-Last-Sequence") {
                        page.last_seq = Some(last);
                    }
                    return Ok(page);
                }
                // No (more) message matches.
                Some(404) => {
                    page.pending = 0;
                    return Ok(page);
                }
                Some(503) => return Err(DirectError::NotEnabled(stream.to_string())),
                Some(code) => {
                    let why = m.description.unwrap_or_default();
                    return Err(DirectError::Refused(format!("{code} {why}")));
                }
            }
        }
    }
}
