//! What a jetrelay says of itself to NATS service discovery (ADR-32, service
//! `jetrelay`): the answers to `$SRV.PING`, `$SRV.INFO` and `$SRV.STATS`, built from
//! the instance and each source's readiness and counts. Each source is an endpoint
//! named after it (its subject: the stream it consumes), so that `nats micro` lists
//! them too. No payload, header, URL or secret is ever in an answer.
//!
//! A service source (`kind = "service"`) answers as its own service the same way
//! ([`service_answer`]): its endpoints, their subjects and queue group, and each
//! one's requests, errors and processing time as ADR-32 counts them
//! ([`ServiceStats`], which its runner records into).

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use serde_json::{Value, json};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use super::metrics::SourceCounts;
use super::readiness::{Consumes, SourceStatus};

/// The service name every jetrelay answers as.
pub const SERVICE: &str = "jetrelay";

/// Which discovery request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ask {
    /// `$SRV.PING…`
    Ping,
    /// `$SRV.INFO…`
    Info,
    /// `$SRV.STATS…`
    Stats,
}

impl Ask {
    /// Every request, with its verb in the subjects.
    pub const ALL: [(Ask, &'static str); 3] = [
        (Ask::Ping, "PING"),
        (Ask::Info, "INFO"),
        (Ask::Stats, "STATS"),
    ];
}

/// This process.
#[derive(Debug, Clone)]
pub struct Instance {
    /// Unique per process.
    pub id: String,
    /// The NATS connection's name (the pod's, in Kubernetes).
    pub name: String,
    /// jetrelay's version.
    pub version: String,
    /// When the process started.
    pub started: OffsetDateTime,
}

/// One source as discovery shows it.
#[derive(Debug, Clone)]
pub struct Announced {
    /// Its name.
    pub name: String,
    /// What it consumes.
    pub consumes: Consumes,
    /// Its readiness.
    pub status: SourceStatus,
    /// Its counts.
    pub counts: SourceCounts,
}

/// The answer to `ask`.
pub fn answer(ask: Ask, me: &Instance, sources: &[Announced]) -> Value {
    let mut v = json!({
        "name": SERVICE,
        "id": me.id,
        "version": me.version,
        "metadata": { "connection": me.name, "jetrelay.version": me.version },
    });
    match ask {
        Ask::Ping => v["type"] = json!("io.nats.micro.v1.ping_response"),
        Ask::Info => {
            v["type"] = json!("io.nats.micro.v1.info_response");
            v["description"] = json!("NATS JetStream to HTTP: the consumers this jetrelay runs");
            v["endpoints"] = sources.iter().map(info_endpoint).collect();
        }
        Ask::Stats => {
            v["type"] = json!("io.nats.micro.v1.stats_response");
            v["started"] = json!(me.started.format(&Rfc3339).unwrap_or_default());
            v["endpoints"] = sources.iter().map(stats_endpoint).collect();
        }
    }
    v
}

/// One endpoint of a service source as ADR-32 counts it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EndpointStats {
    /// Requests taken (answered or not).
    pub requests: u64,
    /// Requests answered with an error (`Nats-Service-Error`).
    pub errors: u64,
    /// The last error's text: `<code>:<reason>`.
    pub last_error: String,
    /// Time spent on the requests, in all.
    pub processing: Duration,
}

/// A service source's endpoints' counts, shared by its runner (which records) and its
/// discovery answers (which read). Cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct ServiceStats(Arc<Mutex<Vec<EndpointStats>>>);

impl ServiceStats {
    /// Counts for `endpoints` endpoints, all zero.
    pub fn new(endpoints: usize) -> ServiceStats {
        ServiceStats(Arc::new(Mutex::new(vec![
            EndpointStats::default();
            endpoints
        ])))
    }

    /// Endpoint `i` took a request that took `took`; `error` is `(code, reason)` when
    /// its reply said one.
    pub fn record(&self, i: usize, took: Duration, error: Option<(u16, &str)>) {
        // A poisoned lock holds plain counts: they are still counts.
        let mut all = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(e) = all.get_mut(i) {
            e.requests += 1;
            e.processing = e.processing.saturating_add(took);
            if let Some((code, reason)) = error {
                e.errors += 1;
                e.last_error = format!("{code}:{reason}");
            }
        }
    }

    /// The counts now.
    pub fn snapshot(&self) -> Vec<EndpointStats> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// A service source as discovery shows it.
#[derive(Debug, Clone)]
pub struct ServiceAbout {
    /// The process (its id is this service instance's).
    pub instance: Instance,
    /// The service's name.
    pub service: String,
    /// Its version.
    pub version: String,
    /// The source's name.
    pub source: String,
    /// Its queue group.
    pub queue_group: String,
    /// Its endpoints: name and subject.
    pub endpoints: Vec<(String, String)>,
}

/// The answer to `ask` for a service source, with its endpoints' counts now.
pub fn service_answer(ask: Ask, s: &ServiceAbout, stats: &[EndpointStats]) -> Value {
    let me = &s.instance;
    let mut v = json!({
        "name": s.service,
        "id": me.id,
        "version": s.version,
        "metadata": {
            "connection": me.name,
            "jetrelay.version": me.version,
            "jetrelay.source": s.source,
        },
    });
    let endpoint = |(name, subject): &(String, String)| json!({ "name": name, "subject": subject, "queue_group": s.queue_group });
    match ask {
        Ask::Ping => v["type"] = json!("io.nats.micro.v1.ping_response"),
        Ask::Info => {
            v["type"] = json!("io.nats.micro.v1.info_response");
            v["description"] = json!("an HTTP app's endpoints, answered through jetrelay");
            v["endpoints"] = s
                .endpoints
                .iter()
                .map(|e| {
                    let mut e = endpoint(e);
                    e["metadata"] = json!({});
                    e
                })
                .collect();
        }
        Ask::Stats => {
            v["type"] = json!("io.nats.micro.v1.stats_response");
            v["started"] = json!(me.started.format(&Rfc3339).unwrap_or_default());
            v["endpoints"] = s
                .endpoints
                .iter()
                .enumerate()
                .map(|(i, e)| {
                    let c = stats.get(i).cloned().unwrap_or_default();
                    let total = u64::try_from(c.processing.as_nanos()).unwrap_or(u64::MAX);
                    let mut e = endpoint(e);
                    e["num_requests"] = json!(c.requests);
                    e["num_errors"] = json!(c.errors);
                    e["last_error"] = json!(c.last_error);
                    e["processing_time"] = json!(total);
                    e["average_processing_time"] =
                        json!(total.checked_div(c.requests).unwrap_or(0));
                    e
                })
                .collect();
        }
    }
    v
}

fn info_endpoint(s: &Announced) -> Value {
    let st = &s.status;
    let mut metadata = json!({
        "stream": s.consumes.stream,
        "consumer": s.consumes.consumer,
        "state": st.state.name(),
        "ready": st.ready.to_string(),
        "pinned": st.pinned.to_string(),
        "paused": st.paused.to_string(),
        "concurrency_limit": st.concurrency_limit.to_string(),
    });
    if let Some(g) = &s.consumes.group {
        metadata["group"] = json!(g);
    }
    if let Some(m) = &st.member {
        metadata["member"] = json!(m);
    }
    json!({
        "name": s.name,
        "subject": s.consumes.stream,
        "queue_group": "",
        "metadata": metadata,
    })
}

fn stats_endpoint(s: &Announced) -> Value {
    let c = &s.counts;
    let total = u64::try_from(c.processing.as_nanos()).unwrap_or(u64::MAX);
    let average = total.checked_div(c.processed).unwrap_or(0);
    json!({
        "name": s.name,
        "subject": s.consumes.stream,
        "queue_group": "",
        "num_requests": c.received,
        "num_errors": c.dead_lettered + c.terminated,
        "last_error": "",
        "processing_time": total,
        "average_processing_time": average,
        "data": {
            "received": c.received,
            "acked": c.acked,
            "retried": c.retried,
            "terminated": c.terminated,
            "dead_lettered": c.dead_lettered,
            "in_flight": c.in_flight,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::readiness::{Readout, State};

    fn view() -> Announced {
        Announced {
            name: "orders".into(),
            consumes: Consumes {
                stream: "ORDERS".into(),
                consumer: "cg-m1".into(),
                group: Some("cg".into()),
            },
            status: SourceStatus {
                shown: Readout {
                    ready: true,
                    state: State::Consuming,
                    reason: String::new(),
                    member: Some("m1".into()),
                    pinned: true,
                    partitions: vec![0, 1],
                    concurrency_limit: 32,
                    paused: false,
                },
                facts: Default::default(),
            },
            counts: SourceCounts {
                received: 10,
                acked: 7,
                retried: 1,
                terminated: 1,
                dead_lettered: 1,
                processing: std::time::Duration::from_millis(90),
                processed: 9,
                in_flight: 1,
            },
        }
    }

    fn me() -> Instance {
        Instance {
            id: "ID1".into(),
            name: "pod-a".into(),
            version: "0.1.0".into(),
            started: OffsetDateTime::UNIX_EPOCH,
        }
    }

    #[test]
    fn a_service_answers_as_itself_with_its_endpoints_counts() {
        let about = ServiceAbout {
            instance: me(),
            service: "orders".into(),
            version: "1.0.0".into(),
            source: "rpc".into(),
            queue_group: "q".into(),
            endpoints: vec![
                ("create".into(), "orders.create".into()),
                ("cancel".into(), "orders.cancel".into()),
            ],
        };
        let stats = ServiceStats::new(2);
        stats.record(1, std::time::Duration::from_millis(3), None);
        stats.record(
            1,
            std::time::Duration::from_millis(1),
            Some((404, "Not Found")),
        );
        stats.record(7, std::time::Duration::from_millis(1), None);
        let ping = service_answer(Ask::Ping, &about, &stats.snapshot());
        assert_eq!(
            (&ping["name"], &ping["version"], &ping["type"]),
            (
                &json!("orders"),
                &json!("1.0.0"),
                &json!("io.nats.micro.v1.ping_response")
            )
        );
        assert_eq!(ping["metadata"]["jetrelay.source"], "rpc");
        let info = service_answer(Ask::Info, &about, &stats.snapshot());
        assert_eq!(info["endpoints"][1]["subject"], "orders.cancel");
        assert_eq!(info["endpoints"][1]["queue_group"], "q");
        assert_eq!(info["endpoints"][1]["metadata"], json!({}));
        let st = service_answer(Ask::Stats, &about, &stats.snapshot());
        let cancel = &st["endpoints"][1];
        assert_eq!(cancel["num_requests"], 2);
        assert_eq!(cancel["num_errors"], 1);
        assert_eq!(cancel["last_error"], "404:Not Found");
        assert_eq!(cancel["processing_time"], 4_000_000);
        assert_eq!(cancel["average_processing_time"], 2_000_000);
        assert_eq!(st["endpoints"][0]["num_requests"], 0);
    }

    #[test]
    fn answers_have_the_adr32_shapes() {
        let ping = answer(Ask::Ping, &me(), &[view()]);
        assert_eq!(ping["type"], "io.nats.micro.v1.ping_response");
        assert_eq!(ping["name"], "jetrelay");
        assert_eq!(ping["id"], "ID1");
        assert!(ping.get("endpoints").is_none());
        let info = answer(Ask::Info, &me(), &[view()]);
        assert_eq!(info["type"], "io.nats.micro.v1.info_response");
        assert_eq!(info["metadata"]["connection"], "pod-a");
        let e = &info["endpoints"][0];
        assert_eq!(e["name"], "orders");
        assert_eq!(e["metadata"]["state"], "consuming");
        assert_eq!(e["metadata"]["member"], "m1");
        assert_eq!(e["metadata"]["group"], "cg");
        assert_eq!(e["metadata"]["pinned"], "true");
        assert_eq!(e["metadata"]["concurrency_limit"], "32");
        let stats = answer(Ask::Stats, &me(), &[view()]);
        assert_eq!(stats["type"], "io.nats.micro.v1.stats_response");
        assert_eq!(stats["started"], "1970-01-01T00:00:00Z");
        let e = &stats["endpoints"][0];
        assert_eq!(e["num_requests"], 10);
        assert_eq!(e["num_errors"], 2);
        assert_eq!(e["average_processing_time"], 10_000_000);
        assert_eq!(e["data"]["acked"], 7);
    }
}
