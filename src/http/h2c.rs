//! Whether the app speaks HTTP/2 at all: under `http.version = "h2c"` a request that
//! broke may be the app's doing or an app that answers only HTTP/1 (which closes
//! the connection at HTTP/2's preface, or answers it with an HTTP/1 error). The
//! connection preface is sent on a connection of its own; an HTTP/2 server's first
//! frame is its SETTINGS, anything else (or the connection closed) is a server that
//! does not speak HTTP/2. `check` asks the same.

use std::path::Path;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Why an app under h2c is held, in `/ready` and the log.
pub const NOT_HTTP2: &str = "the app does not speak HTTP/2 (http.version = \"h2c\")";

/// The client's connection preface (RFC 9113 §3.4) and an empty SETTINGS frame.
const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\x04\0\0\0\0\0";

/// A SETTINGS frame's type (RFC 9113 §6.5).
const SETTINGS: u8 = 0x4;

/// What the preface got back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Spoken {
    /// The server's first frame is SETTINGS on stream 0.
    Http2,
    /// Anything else, or the connection closed: not an HTTP/2 server.
    NotHttp2,
    /// No connection, or no answer in time: nothing is known.
    Unknown,
}

/// Whether the server at `url` (over `socket` when set) speaks HTTP/2 by prior
/// knowledge, asked within `within`.
pub async fn speaks_h2(socket: Option<&Path>, url: &reqwest::Url, within: Duration) -> Spoken {
    let asked = async {
        match socket {
            Some(path) => ask(tokio::net::UnixStream::connect(path).await?).await,
            None => {
                let host = url.host_str().unwrap_or_default();
                let host = host.trim_start_matches('[').trim_end_matches(']');
                let port = url.port_or_known_default().unwrap_or(80);
                ask(tokio::net::TcpStream::connect((host, port)).await?).await
            }
        }
    };
    match tokio::time::timeout(within, asked).await {
        Ok(Ok(spoken)) => spoken,
        Ok(Err(_)) | Err(_) => Spoken::Unknown,
    }
}

/// Sends the preface and reads the first frame's header.
async fn ask(mut io: impl AsyncRead + AsyncWrite + Unpin) -> std::io::Result<Spoken> {
    // A server that closes at once may refuse the write: that says as much as a close.
    if io.write_all(PREFACE).await.is_err() {
        return Ok(Spoken::NotHttp2);
    }
    let mut head = [0u8; 9];
    let mut read = 0;
    while read < head.len() {
        match io.read(&mut head[read..]).await {
            Ok(0) | Err(_) => return Ok(Spoken::NotHttp2),
            Ok(n) => read += n,
        }
    }
    Ok(first_frame(&head))
}

/// A frame header (RFC 9113 §4.1): SETTINGS on stream 0 is HTTP/2's first frame.
fn first_frame(head: &[u8; 9]) -> Spoken {
    let stream = u32::from_be_bytes([head[5] & 0x7f, head[6], head[7], head[8]]);
    if head[3] == SETTINGS && stream == 0 {
        Spoken::Http2
    } else {
        Spoken::NotHttp2
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_frames_table() {
        let cases: &[(&[u8; 9], Spoken)] = &[
            (b"\0\0\x06\x04\0\0\0\0\0", Spoken::Http2),
            (b"\0\0\0\x04\x01\0\0\0\0", Spoken::Http2),
            (b"HTTP/1.1 ", Spoken::NotHttp2),
            (b"\0\0\x08\x07\0\0\0\0\0", Spoken::NotHttp2),
            (b"\0\0\0\x04\0\0\0\0\x01", Spoken::NotHttp2),
        ];
        for (head, want) in cases {
            assert_eq!(first_frame(head), *want, "{head:?}");
        }
    }

    #[tokio::test]
    async fn a_closed_or_http1_answer_is_not_http2() {
        for answer in [&b""[..], b"HTTP/1.1 400 Bad Request\r\n\r\n"] {
            let (mut ours, mut theirs) = tokio::io::duplex(1024);
            let server = tokio::spawn(async move {
                let mut buf = [0u8; PREFACE.len()];
                theirs.read_exact(&mut buf).await.unwrap();
                theirs.write_all(answer).await.unwrap();
            });
            let spoken = async { ask(&mut ours).await.unwrap() };
            let (s, _) = tokio::join!(spoken, server);
            assert_eq!(s, Spoken::NotHttp2, "{answer:?}");
        }
    }
}
