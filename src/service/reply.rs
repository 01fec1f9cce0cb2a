//! What a service source replies, pure: the app's answer handed on (its body and
//! `Content-Type`; a non-2xx with `Nats-Service-Error` and `Nats-Service-Error-Code`),
//! or jetrelay's own error reply when there is no answer to hand on (timeout 504,
//! the app unreachable, unhealthy or the source draining 503, too many requests
//! waiting 503 (shed), an answer over
//! `max_reply_bytes` or a broken one 502); and the `class` it counts as.

use bytes::Bytes;

use crate::app::answer::KeptAnswer;
use crate::policy::Outcome;
use crate::seam::service::Response;
use crate::seam::{Forwarded, HttpClass};

/// The reply header that carries an error's text (ADR-32).
pub const ERROR_HEADER: &str = "Nats-Service-Error";

/// The reply header that carries an error's code (ADR-32).
pub const ERROR_CODE_HEADER: &str = "Nats-Service-Error-Code";

/// Why jetrelay replied without asking the app.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unavailable {
    /// The health URL says the app is not healthy (or has not said yet).
    Unhealthy,
    /// The app could not be reached.
    Unreachable,
    /// The source is draining: it takes no more requests.
    Draining,
}

impl Unavailable {
    fn reason(self) -> &'static str {
        match self {
            Unavailable::Unhealthy => "the app is not healthy",
            Unavailable::Unreachable => "the app is unreachable",
            Unavailable::Draining => "the service is draining",
        }
    }
}

/// A reply and what it counts as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Replied {
    /// What is sent to the requester.
    pub reply: Response,
    /// The `class` label: the app's result class, or `unavailable` / `shed` /
    /// `too_large` / `malformed`.
    pub class: &'static str,
    /// The error the reply says, when it says one: `(code, reason)`.
    pub error: Option<(u16, String)>,
}

impl Replied {
    /// The error as [`crate::ops::announce::ServiceStats::record`] takes it.
    pub fn error(&self) -> Option<(u16, &str)> {
        self.error.as_ref().map(|(c, r)| (*c, r.as_str()))
    }
}

/// jetrelay's own error reply: an empty body and the two error headers.
pub fn own_error(code: u16, reason: &str, class: &'static str) -> Replied {
    Replied {
        reply: Response {
            headers: vec![
                (ERROR_HEADER.to_string(), reason.to_string()),
                (ERROR_CODE_HEADER.to_string(), code.to_string()),
            ],
            body: Bytes::new(),
        },
        class,
        error: Some((code, reason.to_string())),
    }
}

/// The reply to a request the app was not asked (503 at once).
pub fn unavailable(why: Unavailable) -> Replied {
    own_error(503, why.reason(), "unavailable")
}

/// The reply to a request the client could not take as it is (its header block, or
/// a subject that is not UTF-8; `why` says which): 400 at once, the app not asked.
pub fn malformed(why: &str) -> Replied {
    own_error(400, why, "malformed")
}

/// The reply to a request shed: too many were waiting for a slot (503 at once).
pub fn shed() -> Replied {
    own_error(503, "too many requests waiting", "shed")
}

/// The reply to a request the app was asked: `class` is the app's result's label.
pub fn of(f: &Forwarded, answer: Option<KeptAnswer>, class: &'static str) -> Replied {
    let Some(a) = answer else {
        return match (&f.outcome, f.class) {
            (_, HttpClass::Timeout) | (Outcome::Timeout, _) => {
                own_error(504, "the app did not answer in time", class)
            }
            (Outcome::Unreachable, _) => own_error(503, Unavailable::Unreachable.reason(), class),
            _ => own_error(
                502,
                &format!(
                    "no answer from the app: {}",
                    f.failure.as_ref().map_or("request failed", |n| n.kind)
                ),
                class,
            ),
        };
    };
    if let Some(read) = a.over {
        return own_error(
            502,
            &format!("the app's answer is over max_reply_bytes (at least {read} bytes)"),
            "too_large",
        );
    }
    let mut headers = Vec::with_capacity(3);
    if let Some(t) = a.header("content-type") {
        headers.push(("Content-Type".to_string(), t.to_string()));
    }
    let error = (!(200..300).contains(&a.status)).then(|| (a.status, reason(a.status).to_string()));
    if let Some((code, why)) = &error {
        headers.push((ERROR_HEADER.to_string(), why.clone()));
        headers.push((ERROR_CODE_HEADER.to_string(), code.to_string()));
    }
    Replied {
        reply: Response {
            headers,
            body: a.body,
        },
        class,
        error,
    }
}

/// The reason phrase of an HTTP status (RFC 9110), or its class's.
pub fn reason(status: u16) -> &'static str {
    match status {
        300 => "Multiple Choices",
        301 => "Moved Permanently",
        302 => "Found",
        304 => "Not Modified",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        409 => "Conflict",
        410 => "Gone",
        413 => "Content Too Large",
        415 => "Unsupported Media Type",
        422 => "Unprocessable Content",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        s if s < 300 => "Informational",
        s if s < 400 => "Redirection",
        s if s < 500 => "Client Error",
        _ => "Server Error",
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn forwarded(outcome: Outcome, class: HttpClass, failure: Option<&'static str>) -> Forwarded {
        Forwarded::fake(outcome, class, Duration::from_millis(1), failure)
    }

    fn answer(status: u16, body: &'static [u8], over: Option<usize>) -> KeptAnswer {
        KeptAnswer {
            status,
            headers: vec![
                ("content-type".into(), "application/json".into()),
                ("x-other".into(), "1".into()),
            ],
            body: Bytes::from_static(body),
            over,
        }
    }

    fn header<'a>(v: &'a Replied, name: &str) -> Option<&'a str> {
        v.reply
            .headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    #[test]
    fn replies_table() {
        let answered = |s| {
            forwarded(
                Outcome::Answered {
                    status: s,
                    retry_after: None,
                    action: None,
                },
                HttpClass::Status(s),
                None,
            )
        };
        // (what happened, the answer, code, body, class)
        type Case = (
            Forwarded,
            Option<KeptAnswer>,
            Option<u16>,
            &'static [u8],
            &'static str,
        );
        let cases: Vec<Case> = vec![
            (
                answered(200),
                Some(answer(200, b"{\"id\":1}", None)),
                None,
                b"{\"id\":1}",
                "2xx",
            ),
            (
                answered(201),
                Some(answer(201, b"", None)),
                None,
                b"",
                "2xx",
            ),
            (
                answered(404),
                Some(answer(404, b"no such order", None)),
                Some(404),
                b"no such order",
                "4xx",
            ),
            (
                answered(500),
                Some(answer(500, b"boom", None)),
                Some(500),
                b"boom",
                "5xx",
            ),
            (
                answered(200),
                Some(answer(200, b"", Some(2_000_000))),
                Some(502),
                b"",
                "too_large",
            ),
            (
                answered(404),
                Some(answer(404, b"", Some(9))),
                Some(502),
                b"",
                "too_large",
            ),
            (
                forwarded(Outcome::Timeout, HttpClass::Timeout, Some("timeout")),
                None,
                Some(504),
                b"",
                "timeout",
            ),
            (
                forwarded(
                    Outcome::Unreachable,
                    HttpClass::Error,
                    Some("connection refused"),
                ),
                None,
                Some(503),
                b"",
                "error",
            ),
            (
                forwarded(
                    Outcome::TransportError,
                    HttpClass::Error,
                    Some("connection reset"),
                ),
                None,
                Some(502),
                b"",
                "error",
            ),
        ];
        for (i, (f, a, code, body, class)) in cases.into_iter().enumerate() {
            let label = crate::ops::metrics::class_name(f.class);
            let label = if class == "too_large" { label } else { class };
            let v = of(&f, a, label);
            assert_eq!(v.error.as_ref().map(|e| e.0), code, "case {i}");
            assert_eq!(&v.reply.body[..], body, "case {i}");
            assert_eq!(v.class, class, "case {i}");
            assert_eq!(
                header(&v, ERROR_CODE_HEADER).map(str::to_string),
                code.map(|c| c.to_string()),
                "case {i}: the code header"
            );
            assert_eq!(
                header(&v, ERROR_HEADER).is_some(),
                code.is_some(),
                "case {i}"
            );
            assert_eq!(
                header(&v, "x-other"),
                None,
                "case {i}: only the type is handed on"
            );
        }
    }

    #[test]
    fn an_answer_keeps_its_type_and_an_error_its_reason() {
        let f = forwarded(
            Outcome::Answered {
                status: 404,
                retry_after: None,
                action: None,
            },
            HttpClass::Status(404),
            None,
        );
        let v = of(&f, Some(answer(404, b"gone", None)), "4xx");
        assert_eq!(header(&v, "Content-Type"), Some("application/json"));
        assert_eq!(header(&v, ERROR_HEADER), Some("Not Found"));
        assert_eq!(v.error(), Some((404, "Not Found")));
        let v = unavailable(Unavailable::Unhealthy);
        assert_eq!(
            (v.class, v.error().map(|e| e.0)),
            ("unavailable", Some(503))
        );
        assert_eq!(header(&v, ERROR_HEADER), Some("the app is not healthy"));
        assert_eq!(
            (reason(400), reason(408)),
            ("Bad Request", "Request Timeout")
        );
        assert_eq!(reason(418), "Client Error");
        assert_eq!(reason(599), "Server Error");
    }
}
