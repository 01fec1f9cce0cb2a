//! A connection to the app, made by jetrelay's own clients (`crate::http::h1`,
//! `crate::http::h2`): to the Unix socket when `http.unix_socket` is set, to the
//! URL's host and port otherwise (no delay: requests are written whole); and the
//! `Host` the URL names, which every client writes.

use std::io;
use std::path::Path;
use std::pin::Pin;
use std::task::{Context, Poll};

use reqwest::header::HeaderValue;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpStream, UnixStream};

use crate::http::broke::Broke;

/// Where a connection goes: the socket (every origin), or a host and port.
pub(crate) type OriginKey = (String, u16);

/// The origin `url` is sent to, given the socket.
pub(crate) fn origin(socket: Option<&Path>, url: &reqwest::Url) -> OriginKey {
    match socket {
        Some(_) => (String::new(), 0),
        None => (
            url.host_str().unwrap_or_default().to_string(),
            url.port_or_known_default().unwrap_or(80),
        ),
    }
}

/// `host[:port]` of `url`, the port only when it is not the scheme's default: what
/// the HTTP client writes when a request has no `Host` (`None` when it has no host).
pub(crate) fn host_header(url: &reqwest::Url) -> Option<HeaderValue> {
    let host = url.host_str()?;
    let value = match url.port() {
        Some(port) => HeaderValue::from_str(&format!("{host}:{port}")),
        None => HeaderValue::from_str(host),
    };
    value.ok()
}

/// An open connection to the app.
#[derive(Debug)]
pub(crate) enum Dialed {
    Tcp(TcpStream),
    Unix(UnixStream),
}

/// Connects to the socket, or to `url`'s host and port.
///
/// # Errors
/// [`Broke`] with `connect` set: nothing was sent.
pub(crate) async fn dial(socket: Option<&Path>, url: &reqwest::Url) -> Result<Dialed, Broke> {
    let dialed = match socket {
        Some(path) => UnixStream::connect(path).await.map(Dialed::Unix),
        None => {
            let host = url.host_str().unwrap_or_default();
            let host = host.trim_start_matches('[').trim_end_matches(']');
            let port = url.port_or_known_default().unwrap_or(80);
            TcpStream::connect((host, port)).await.map(|tcp| {
                // Headers and bodies are written whole: nothing gains from Nagle.
                tcp.set_nodelay(true).ok();
                Dialed::Tcp(tcp)
            })
        }
    };
    dialed.map_err(|e| Broke::connect(&e))
}

impl AsyncRead for Dialed {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Dialed::Tcp(s) => Pin::new(s).poll_read(cx, buf),
            Dialed::Unix(s) => Pin::new(s).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Dialed {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Dialed::Tcp(s) => Pin::new(s).poll_write(cx, buf),
            Dialed::Unix(s) => Pin::new(s).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Dialed::Tcp(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Dialed::Unix(s) => Pin::new(s).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Dialed::Tcp(s) => s.is_write_vectored(),
            Dialed::Unix(s) => s.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Dialed::Tcp(s) => Pin::new(s).poll_flush(cx),
            Dialed::Unix(s) => Pin::new(s).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Dialed::Tcp(s) => Pin::new(s).poll_shutdown(cx),
            Dialed::Unix(s) => Pin::new(s).poll_shutdown(cx),
        }
    }
}
