//! The requests that wait for a slot ([`Waiting`]): taken off the subscriptions at
//! once, so that nothing piles up in the client's buffer, and held in order up to a
//! bound in requests and bytes ([`WaitBound`], from `delivery.max_buffered` and
//! `delivery.max_buffered_bytes`); past it a request is shed (replied 503 at once).
//! Whether one may wait is [`may_wait`], pure.

use std::collections::VecDeque;

use tokio::time::Instant;

use crate::seam::service::ServiceRequest;

/// How much may wait: requests and their bytes (subject, headers and payload).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WaitBound {
    /// Requests at most.
    pub requests: usize,
    /// Bytes at most.
    pub bytes: u64,
}

/// Whether a request of `size` bytes may wait behind `requests` requests of `bytes`
/// bytes: fewer than the bound's requests wait, and their bytes with its own stay
/// within the bound's (a request larger than the whole bound never waits).
pub fn may_wait(bound: WaitBound, requests: usize, bytes: u64, size: u64) -> bool {
    requests < bound.requests && bytes.saturating_add(size) <= bound.bytes
}

/// What a request weighs while it waits: its subject, headers and payload.
pub fn size(request: &ServiceRequest) -> u64 {
    let m = &request.message;
    let headers: usize = m.headers.iter().map(|(n, v)| n.len() + v.len()).sum();
    let reply = request.reply.as_ref().map_or(0, String::len);
    u64::try_from(m.subject.len() + headers + m.payload.len() + reply).unwrap_or(u64::MAX)
}

/// The requests waiting, oldest first, with their bytes.
#[derive(Debug, Default)]
pub struct Waiting {
    queue: VecDeque<(ServiceRequest, Instant, u64)>,
    bytes: u64,
}

impl Waiting {
    /// Holds `request` (received at `at`) when the bound allows; false when it does
    /// not (the request is not kept: the caller sheds it).
    #[must_use]
    pub fn push(&mut self, bound: WaitBound, request: ServiceRequest, at: Instant) -> bool {
        let n = size(&request);
        if !may_wait(bound, self.queue.len(), self.bytes, n) {
            return false;
        }
        self.bytes += n;
        self.queue.push_back((request, at, n));
        true
    }

    /// The oldest request and when it was received.
    pub fn pop(&mut self) -> Option<(ServiceRequest, Instant)> {
        let (r, at, n) = self.queue.pop_front()?;
        self.bytes -= n;
        Some((r, at))
    }

    /// Whether none waits.
    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    /// How many wait.
    pub fn len(&self) -> usize {
        self.queue.len()
    }

    /// Their bytes.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::Message;
    use proptest::prelude::*;

    const B: WaitBound = WaitBound {
        requests: 3,
        bytes: 100,
    };

    #[test]
    fn the_bound_in_requests_and_bytes() {
        let table = [
            // (waiting, their bytes, its size, waits)
            (0, 0, 0, true),
            (0, 0, 100, true),
            (0, 0, 101, false),
            (2, 50, 50, true),
            (2, 50, 51, false),
            (3, 0, 0, false),
            (1, u64::MAX, 1, false),
        ];
        for (n, bytes, size, waits) in table {
            assert_eq!(may_wait(B, n, bytes, size), waits, "{n} {bytes} {size}");
        }
    }

    fn request(payload: usize) -> ServiceRequest {
        ServiceRequest {
            malformed: None,
            endpoint: 0,
            message: Message {
                subject: "s".into(),
                headers: vec![("a".into(), "b".into())],
                payload: bytes::Bytes::from(vec![0; payload]),
            },
            reply: Some("r".into()),
        }
    }

    proptest! {
        /// Whatever comes and goes, the queue stays within its bound, keeps its
        /// order, and its bytes are those of what it holds.
        #[test]
        fn never_over_the_bound(ops in proptest::collection::vec(proptest::option::of(0usize..60), 0..60)) {
            let mut w = Waiting::default();
            let mut model = VecDeque::new();
            let at = Instant::now();
            for op in ops {
                match op {
                    Some(p) => {
                        let r = request(p);
                        let fits = may_wait(B, w.len(), w.bytes(), size(&r));
                        prop_assert_eq!(w.push(B, r, at), fits);
                        if fits {
                            model.push_back(p);
                        }
                    }
                    None => {
                        let got = w.pop().map(|(r, _)| r.message.payload.len());
                        prop_assert_eq!(got, model.pop_front());
                    }
                }
                prop_assert!(w.len() <= B.requests);
                prop_assert!(w.bytes() <= B.bytes);
                let held: u64 = model.iter().map(|p| *p as u64 + 4).sum();
                prop_assert_eq!(w.bytes(), held);
            }
        }
    }
}
