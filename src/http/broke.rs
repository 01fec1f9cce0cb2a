//! Why a request to the app got no answer, or an answer's body broke off, in terms
//! that do not depend on the client that sent it (`crate::http::forward` says what
//! each means for the message).

use std::io::ErrorKind;

/// Why a request got no answer, or an answer's body broke off.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Broke {
    /// The request's timeout ran out.
    pub timeout: bool,
    /// No connection could be made (nothing was sent).
    pub connect: bool,
    /// The TLS handshake failed, or the app refused it (a client certificate
    /// missing or not trusted): the app never saw the request.
    pub handshake: bool,
    /// The innermost I/O error's kind, when there is one.
    pub io: Option<ErrorKind>,
    /// Sending the request's body failed.
    pub body: bool,
    /// No OAuth2 token could be had (what `/ready` says): nothing was sent.
    pub token: Option<&'static str>,
    /// The innermost cause, for the log.
    pub cause: String,
}

impl Broke {
    /// A failure with only its cause known.
    pub(crate) fn other(cause: String) -> Broke {
        Broke {
            timeout: false,
            connect: false,
            handshake: false,
            io: None,
            body: false,
            token: None,
            cause,
        }
    }

    /// No OAuth2 token: `kind` says why.
    pub(crate) fn token(kind: &'static str) -> Broke {
        Broke {
            token: Some(kind),
            ..Broke::other(kind.to_string())
        }
    }

    /// What an error says: its innermost cause, and the kind of the innermost I/O
    /// error on the way there.
    pub(crate) fn of_error(e: &(dyn std::error::Error + 'static)) -> Broke {
        let mut io = None;
        let mut innermost = e;
        while let Some(next) = innermost.source() {
            innermost = next;
            if let Some(err) = next.downcast_ref::<std::io::Error>() {
                io = Some(err.kind());
            }
        }
        Broke {
            io,
            ..Broke::other(innermost.to_string())
        }
    }

    /// What reqwest's error says.
    pub(crate) fn of_reqwest(e: &reqwest::Error) -> Broke {
        Broke {
            timeout: e.is_timeout(),
            connect: e.is_connect(),
            handshake: (e.is_connect() && crate::tls::is_handshake_failure(e))
                || crate::tls::is_refused_handshake(e),
            body: e.is_body(),
            ..Broke::of_error(e)
        }
    }

    /// A connection that could not be made: `e` from the connect.
    pub(crate) fn connect(e: &std::io::Error) -> Broke {
        Broke {
            connect: true,
            io: Some(e.kind()),
            ..Broke::other(e.to_string())
        }
    }

    /// The request's time ran out.
    pub(crate) fn timed_out() -> Broke {
        Broke {
            timeout: true,
            ..Broke::other("the request timed out".into())
        }
    }
}
