//! The app's answer as the forwarder reads it, whichever client brought it (reqwest's
//! pool, or h2c's own connection, `crate::http::h2`): its status and headers, its
//! body in chunks.

use bytes::Bytes;
use reqwest::header::{CONTENT_LENGTH, HeaderMap};

use crate::http::broke::Broke;
use crate::http::h1::H1Answer;
use crate::http::h2::H2Answer;

/// An answer's head has arrived; its body is read in chunks.
pub(crate) enum AppAnswer {
    /// Through reqwest (`https://`, a proxy).
    Pooled(reqwest::Response),
    /// On a connection of jetrelay's HTTP/1.1 pool.
    H1(H1Answer),
    /// A stream on an h2c connection.
    H2(H2Answer),
}

impl AppAnswer {
    /// The status code.
    pub(crate) fn status(&self) -> u16 {
        match self {
            AppAnswer::Pooled(r) => r.status().as_u16(),
            AppAnswer::H1(a) => a.head.status.as_u16(),
            AppAnswer::H2(a) => a.head.status.as_u16(),
        }
    }

    /// The answer's headers.
    pub(crate) fn headers(&self) -> &HeaderMap {
        match self {
            AppAnswer::Pooled(r) => r.headers(),
            AppAnswer::H1(a) => &a.head.headers,
            AppAnswer::H2(a) => &a.head.headers,
        }
    }

    /// The body's length, when the answer says it.
    pub(crate) fn content_length(&self) -> Option<u64> {
        match self {
            AppAnswer::Pooled(r) => r.content_length(),
            AppAnswer::H1(_) | AppAnswer::H2(_) => self
                .headers()
                .get(CONTENT_LENGTH)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.parse().ok()),
        }
    }

    /// The body's next chunk; `None` at its end.
    ///
    /// # Errors
    /// [`Broke`] when the body broke off.
    pub(crate) async fn chunk(&mut self) -> Result<Option<Bytes>, Broke> {
        match self {
            AppAnswer::Pooled(r) => r.chunk().await.map_err(|e| Broke::of_reqwest(&e)),
            AppAnswer::H1(a) => a.chunk().await,
            AppAnswer::H2(a) => a.chunk().await,
        }
    }
}
