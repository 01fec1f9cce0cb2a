//! The config parsed once into what each component takes ("parse, don't
//! validate"): the consumer the daemon requires, the group membership, the pull
//! limits and timings, the retry policy and the dispatcher's knobs. Every invariant
//! that spans components is written here, once:
//!
//! - the consumer's `max_ack_pending` is `delivery.max_buffered` (a durable's and a
//!   member's alike), so that the server never hands over more than is held;
//! - pull expiry, heartbeats and keep-alives follow `consumer.ack_wait_ms`;
//! - an elastic member's acks are always confirmed (its consumer is deleted when its
//!   partitions move: an ack the server had not processed would be lost with it).
//!
//! A value that does not parse is a [`ConfigError`] naming its key, never a default.

use std::net::SocketAddr;
use std::time::Duration;

use crate::capacity::{Limits, PullTiming};
use crate::config::{
    AckMode, Config, ConfigError, NatsConfig, OtelProtocol, Problem, SourceSpec, SourceView,
};
use url::Url;

use crate::app::headers::Pass;
use crate::dispatch::{Batching, OutputRules};
use crate::group::model::Flavour;
use crate::group::spec::{Member, Template};
use crate::http::app::{ClientSettings, ProxySettings};
use crate::http::collector::{CollectorSettings, Exported, Protocol};
use crate::http::credentials::CredentialFiles;
use crate::http::forward::{AnswerLimits, TargetSettings};
use crate::http::oauth2::OAuth2Settings;
use crate::http::probe::HealthProbe;
use crate::http::signing::SigningFiles;
use crate::nats::{Auth, Connection, Tls};
use crate::ops::traces::{AppTarget, SourceTrace, TraceSettings};
use crate::outputs::Rules;
use crate::pace::PaceSettings;
use crate::policy::{Policy, StatusSet};
use crate::route::{Route, To, When};
use crate::service::wait::WaitBound;
use crate::service::{ServiceEndpoint, ServiceSpec};
use crate::source::settings::{
    Binding, DeadLetters, Idempotency, KindSettings, Retry, ServiceSettings, SourceSettings,
    StreamSettings, dlq_duplicate_window,
};
use crate::tls::ClientCertFiles;
use crate::topology::{ConsumerSpec, StreamSpec, TopologyRequest};
use crate::trace::encode::Resource;

/// Everything the daemon's components take from the config: what the process
/// shares, and its sources.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The connection to NATS.
    pub nats: Connection,
    /// Span export (`[otel]` with an endpoint), or none.
    pub tracing: Option<Tracing>,
    /// Metrics over OTLP (`otel.metrics`), or none.
    pub metrics_export: Option<MetricsExport>,
    /// The sources, in the config's order (one, named `default`, for `[source]`).
    pub sources: Vec<SourceSettings>,
    /// Requests in flight across all sources (`budget.max_in_flight`; 0: off).
    pub budget: u32,
    /// The slots of it kept for each source, never lent (`budget.reserve`).
    pub budget_reserve: u32,
    /// The drain's grace.
    pub shutdown_grace: Duration,
    /// What the app may publish through jetrelay.
    pub publish: Publishing,
    /// Whether to answer NATS service discovery (`admin.announce`).
    pub announce: bool,
    /// The file of the bearer token `/drain` requires (`admin.token_file`), when set.
    pub admin_token_file: Option<String>,
}

/// `[publish]`, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Publishing {
    /// Allowed subjects and the limits per answer or request.
    pub rules: Rules,
    /// An answer's (or request's) messages commit as one atomic batch.
    pub atomic: bool,
    /// The local publish endpoint's address, when on.
    pub listen: Option<SocketAddr>,
    /// The file of the token the endpoint requires, when one is set.
    pub token_file: Option<String>,
    /// How long a target stream's duplicate window must keep the outputs' ids: an
    /// input whose ack was lost comes again after its redelivery delay (the ack
    /// wait, or the longest `consumer.backoff_ms`), and the app answers within
    /// `http.timeout_ms`.
    pub window_needed: Duration,
}

impl Settings {
    /// Parses a config (which [`Config::problems`] found nothing wrong with).
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] naming every value that does not parse.
    pub fn from_config(c: &Config) -> Result<Settings, ConfigError> {
        let mut p: Vec<Problem> = Vec::new();
        let views = c.source_views().map_err(ConfigError::Invalid)?;
        let single = c.sources.is_empty();
        let sources: Vec<SourceSettings> = views
            .iter()
            .filter_map(|v| {
                let at = Keys::of(&v.name, single);
                source(v, &at, &mut p)
            })
            .collect();
        let tracing = tracing(c, &mut p);
        let metrics_export = metrics_export(c, &mut p);
        if !p.is_empty() || sources.len() != views.len() {
            return Err(ConfigError::Invalid(p));
        }
        Ok(Settings {
            nats: connection(&c.nats),
            tracing,
            metrics_export,
            sources,
            budget: c.budget.max_in_flight,
            budget_reserve: c.budget.reserve,
            shutdown_grace: Duration::from_millis(c.delivery.shutdown_grace_ms),
            publish: publishing(c),
            announce: c.admin.announce,
            admin_token_file: (!c.admin.token_file.is_empty()).then(|| c.admin.token_file.clone()),
        })
    }

    /// Requests to the app that may run at once, all sources together: what the
    /// app's connection pool and the admin port's caps are sized by.
    pub fn max_in_flight(&self) -> usize {
        self.sources.iter().map(|s| s.max_in_flight).sum()
    }

    /// The source of this name.
    pub fn source(&self, name: &str) -> Option<&SourceSettings> {
        self.sources.iter().find(|s| s.name == name)
    }
}

/// Where a source's keys are written: `source.` of the single form, else
/// `sources.<name>.`, so that a problem names the key the user wrote.
struct Keys(String);

impl Keys {
    fn of(name: &str, single: bool) -> Keys {
        Keys(if single {
            "source.".into()
        } else {
            format!("sources.{name}.")
        })
    }

    /// The key of the source's own `key`.
    fn at(&self, key: &str) -> String {
        format!("{}{key}", self.0)
    }
}

/// A source's view of the config (`[source]`, or `[sources.<name>]` over the
/// top-level tables) parsed into its settings; `None` (with the problems in `p`)
/// when a value does not parse.
fn source(v: &SourceView, at: &Keys, p: &mut Vec<Problem>) -> Option<SourceSettings> {
    let c = &v.config;
    let d = &c.delivery;
    let retry = status_set(p, "http.retry_statuses", &c.http.retry_statuses);
    let term = status_set(p, "http.term_statuses", &c.http.term_statuses);
    let spec = c.source.spec();
    if spec.is_none() {
        p.push(Problem::new(at.at("kind"), "is required"));
    }
    let (target, client, health) = (target(c, p), client(c, p), health(c, p));
    let (Some(retry), Some(term), Some(spec), Some(target), Some(client)) =
        (retry, term, spec, target, client)
    else {
        return None;
    };
    let kind = match spec {
        SourceSpec::Service {
            service,
            version,
            queue_group,
            endpoints,
            max_reply_bytes,
        } => KindSettings::Service(ServiceSettings {
            targets: endpoints
                .iter()
                .map(|e| with_path(&target, &e.path))
                .collect(),
            spec: ServiceSpec {
                name: service,
                version,
                queue_group,
                endpoints: endpoints
                    .into_iter()
                    .map(|e| ServiceEndpoint {
                        name: e.name,
                        subject: e.subject,
                    })
                    .collect(),
                max_reply_bytes: usize::try_from(max_reply_bytes).unwrap_or(usize::MAX),
                connection: c.nats.name.clone(),
                wait: WaitBound {
                    requests: usize::try_from(d.max_buffered).unwrap_or(usize::MAX),
                    bytes: d.max_buffered_bytes,
                },
            },
        }),
        stream => KindSettings::Stream(Box::new(stream_settings(v, stream, &target, at, p)?)),
    };
    Some(SourceSettings {
        name: v.name.clone(),
        trace: SourceTrace {
            name: v.name.clone(),
            consumer_group: consumer_group(c),
            app: app_target(&target.url),
        },
        client,
        health,
        policy: Policy {
            retry,
            term,
            retry_initial: Duration::from_millis(d.retry_initial_ms),
            retry_max: Duration::from_millis(d.retry_max_ms),
            retry_after_max: Duration::from_millis(d.retry_after_max_ms),
            max_attempts: u32::try_from(c.consumer.max_deliver)
                .ok()
                .filter(|n| *n > 0),
        },
        max_in_flight: d.max_in_flight as usize,
        pace: pace(d),
        weight: v.weight,
        target,
        kind,
    })
}

/// What a stream source (`spec`: a durable or a group member) takes besides what
/// every source does.
fn stream_settings(
    v: &SourceView,
    spec: SourceSpec,
    target: &TargetSettings,
    at: &Keys,
    p: &mut Vec<Problem>,
) -> Option<StreamSettings> {
    let c = &v.config;
    let d = &c.delivery;
    let ack_wait = Duration::from_millis(c.consumer.ack_wait_ms);
    let limits = Limits {
        max_batch: d.max_batch,
        max_buffered: d.max_buffered,
        max_bytes: d.max_buffered_bytes,
    };
    let confirmed_acks = d.ack == AckMode::Confirmed || matches!(spec, SourceSpec::Elastic { .. });
    let binding = binding(c, spec, limits, confirmed_acks)?;
    Some(StreamSettings {
        binding,
        retry: Retry {
            on_missing: c.topology.on_missing,
            initial: Duration::from_millis(c.topology.retry_initial_ms),
            max: Duration::from_millis(c.topology.retry_max_ms),
        },
        limits,
        ack_wait,
        timing: PullTiming::for_ack_wait(ack_wait),
        progress_every: ack_wait / 2,
        ordering: c.ordering(),
        confirmed_acks,
        unhealthy_handover: Duration::from_millis(c.http.unhealthy_handover_ms),
        dead_letters: dead_letters(c, ack_wait),
        batch: (d.batch_size > 1).then(|| Batching {
            size: d.batch_size as usize,
            max_bytes: d.batch_max_bytes,
            wait: Duration::from_millis(d.batch_wait_ms),
        }),
        outputs: Some(OutputRules {
            rules: publish_rules(c),
            atomic: c.publish.atomic,
        })
        .filter(|o| o.rules.enabled()),
        idempotency: idempotency(c),
        max_age: (d.max_age_ms > 0).then(|| Duration::from_millis(d.max_age_ms)),
        unwrap_cloudevents: c.http.unwrap_cloudevents,
        routes: routes(v, target, at, p)?,
    })
}

/// `target` with its path replaced by `path` (none: as it is).
fn with_path(target: &TargetSettings, path: &str) -> TargetSettings {
    let mut url = target.url.clone();
    if !path.is_empty() {
        url.set_path(path);
        url.set_query(None);
    }
    TargetSettings {
        url,
        ..target.clone()
    }
}

/// A source's routes, parsed: each one's match, and its target (the source's with
/// the route's path, or the route's URL) or action.
fn routes(
    v: &SourceView,
    target: &TargetSettings,
    at: &Keys,
    p: &mut Vec<Problem>,
) -> Option<Vec<Route<TargetSettings>>> {
    let mut out = Vec::with_capacity(v.routes.len());
    for (i, r) in v.routes.iter().enumerate() {
        let to = match (r.action, r.url.as_str()) {
            (Some(skip), _) => To::Skip(skip),
            (None, "") => To::Target(with_path(target, &r.path)),
            (None, raw) => To::Target(TargetSettings {
                url: url(p, &at.at(&format!("routes[{i}].url")), raw)?,
                ..target.clone()
            }),
        };
        out.push(Route {
            name: if r.name.is_empty() {
                i.to_string()
            } else {
                r.name.clone()
            },
            subjects: r.subjects.clone(),
            headers: r.headers.clone().into_iter().collect(),
            when: when(p, &at.at(&format!("routes[{i}]")), &r.when)?,
            to,
        });
    }
    Some(out)
}

/// A route's `when`, compiled (empty: none); `None` when it does not compile (a
/// problem at `key`; `Config::problems` has refused it already).
fn when(p: &mut Vec<Problem>, key: &str, source: &str) -> Option<Option<When>> {
    if source.is_empty() {
        return Some(None);
    }
    match When::compile(source) {
        Ok(w) => Some(Some(w)),
        Err(e) => {
            p.push(Problem::new(key, format!("when: {e}")));
            None
        }
    }
}

/// Where a stream source gets its messages: the durable's topology, or the group
/// membership; `None` for a service (which has its own settings).
fn binding(c: &Config, spec: SourceSpec, limits: Limits, confirmed_acks: bool) -> Option<Binding> {
    let member = |flavour, stream, group, member, auto_join: Option<u64>| {
        Binding::Group(Member {
            flavour,
            stream,
            group,
            member,
            template: template(c),
            limits,
            confirmed_acks,
            auto_join: auto_join.map(Duration::from_millis),
        })
    };
    Some(match spec {
        SourceSpec::Durable { .. } => Binding::Durable(topology_request(c)),
        SourceSpec::Static {
            stream,
            group,
            member: m,
        } => member(Flavour::Static, stream, group, m, None),
        SourceSpec::Elastic {
            stream,
            group,
            member: m,
            auto_join_timeout_ms,
        } => member(Flavour::Elastic, stream, group, m, auto_join_timeout_ms),
        SourceSpec::Service { .. } => return None,
    })
}

/// `publish.allowed_subjects` and the bounds per answer or request.
fn publish_rules(c: &Config) -> Rules {
    Rules {
        allowed: c.publish.allowed_subjects.clone(),
        max_messages: c.publish.max_messages as usize,
        max_bytes: c.publish.max_bytes,
    }
}

/// `[publish]`, parsed: the endpoint's side.
fn publishing(c: &Config) -> Publishing {
    Publishing {
        rules: publish_rules(c),
        atomic: c.publish.atomic,
        listen: c.publish.listen_addr(),
        token_file: (!c.publish.token_file.is_empty()).then(|| c.publish.token_file.clone()),
        window_needed: c
            .consumer
            .backoff_ms
            .iter()
            .copied()
            .map(Duration::from_millis)
            .fold(Duration::from_millis(c.consumer.ack_wait_ms), Duration::max)
            + Duration::from_millis(c.http.timeout_ms),
    }
}

/// A URL the config's rules checked, parsed; a problem naming `key` if it does not.
fn url(p: &mut Vec<Problem>, key: &str, value: &str) -> Option<Url> {
    match Url::parse(value) {
        Ok(u) => Some(u),
        Err(e) => {
            // A user:password in the URL is never echoed.
            let shown = crate::config::redact(value);
            p.push(Problem::new(key, format!("{shown:?} is not a URL: {e}")));
            None
        }
    }
}

/// `[http]`, parsed: what the app's client is built from.
fn client(c: &Config, p: &mut Vec<Problem>) -> Option<ClientSettings> {
    let h = &c.http;
    let file = |path: &str| (!path.is_empty()).then(|| path.to_string());
    let proxy = match h.proxy.as_str() {
        "" => None,
        raw => Some(ProxySettings {
            url: url(p, "http.proxy", raw)?,
            credentials_file: file(&h.proxy_credentials_file),
        }),
    };
    Some(ClientSettings {
        tls_ca_file: file(&h.tls_ca_file),
        tls_client: (!h.tls_cert_file.is_empty()).then(|| ClientCertFiles {
            cert_file: h.tls_cert_file.clone(),
            key_file: h.tls_key_file.clone(),
        }),
        proxy,
        credentials: CredentialFiles {
            headers: h.headers.clone(),
            bearer_token_file: file(&h.bearer_token_file),
            header_files: h.header_files.clone(),
        },
        signing: (!h.signing.secret_file.is_empty()).then(|| SigningFiles {
            secret_file: h.signing.secret_file.clone(),
            previous_secret_file: file(&h.signing.previous_secret_file),
        }),
        oauth2: oauth2(c, p)?,
        pool: c.delivery.max_in_flight as usize,
        unix_socket: (!h.unix_socket.is_empty()).then(|| h.unix_socket.clone().into()),
        version: h.version,
        max_concurrent_streams: h.max_concurrent_streams,
    })
}

/// `[http.oauth2]`, parsed (`Some(None)`: off; `None`: a problem was added).
fn oauth2(c: &Config, p: &mut Vec<Problem>) -> Option<Option<OAuth2Settings>> {
    let o = &c.http.oauth2;
    if o.token_url.is_empty() {
        return Some(None);
    }
    Some(Some(OAuth2Settings {
        token_url: url(p, "http.oauth2.token_url", &o.token_url)?,
        client_id: o.client_id.clone(),
        client_secret_file: o.client_secret_file.clone(),
        scopes: o.scopes.clone(),
        audience: o.audience.clone(),
    }))
}

/// `[http]` (and the bounds of `[publish]`), parsed: where a source's messages go.
fn target(c: &Config, p: &mut Vec<Problem>) -> Option<TargetSettings> {
    let h = &c.http;
    Some(TargetSettings {
        url: url(p, "http.url", &h.url)?,
        timeout: Duration::from_millis(h.timeout_ms),
        pass: Pass::new(&h.pass_headers),
        format: h.format,
        limits: AnswerLimits {
            publish_bytes: c.publish.max_bytes,
            publish_messages: c.publish.max_messages as usize,
        },
    })
}

/// Span export: what the tracer and the collector client take.
#[derive(Debug, Clone)]
pub struct Tracing {
    /// Sampling, the resource, the names spans carry.
    pub settings: TraceSettings,
    /// Where and how spans are sent.
    pub collector: CollectorSettings,
}

/// `[otel]`'s spans, parsed: `None` without an endpoint.
fn tracing(c: &Config, p: &mut Vec<Problem>) -> Option<Tracing> {
    let o = &c.otel;
    if o.endpoint.is_empty() {
        return None;
    }
    Some(Tracing {
        settings: TraceSettings {
            sample_ratio: o.sample_ratio,
            resource: resource(c),
        },
        collector: collector(c, Exported::Traces, "otel.endpoint", &o.endpoint, p)?,
    })
}

/// Metrics over OTLP: what `/metrics` shows, exported every so often.
#[derive(Debug, Clone)]
pub struct MetricsExport {
    /// The resource they are exported with.
    pub resource: Resource,
    /// Where and how they are sent.
    pub collector: CollectorSettings,
    /// How often.
    pub every: Duration,
}

/// `[otel]`'s metrics, parsed: `None` unless `otel.metrics`.
fn metrics_export(c: &Config, p: &mut Vec<Problem>) -> Option<MetricsExport> {
    let o = &c.otel;
    if !o.metrics {
        return None;
    }
    let (key, endpoint) = if o.metrics_endpoint.is_empty() {
        ("otel.endpoint", &o.endpoint)
    } else {
        ("otel.metrics_endpoint", &o.metrics_endpoint)
    };
    Some(MetricsExport {
        resource: resource(c),
        collector: collector(c, Exported::Metrics, key, endpoint, p)?,
        every: Duration::from_millis(o.metrics_interval_ms),
    })
}

/// The resource spans and metrics are exported with.
fn resource(c: &Config) -> Resource {
    let o = &c.otel;
    Resource {
        service_name: o.service_name.clone(),
        instance_id: c.nats.name.clone(),
        attributes: o.resource_attributes.clone().into_iter().collect(),
    }
}

/// The collector `signal` is sent to (`key`: where its URL is written).
fn collector(
    c: &Config,
    signal: Exported,
    key: &str,
    endpoint: &str,
    p: &mut Vec<Problem>,
) -> Option<CollectorSettings> {
    let o = &c.otel;
    Some(CollectorSettings {
        signal,
        endpoint: url(p, key, endpoint)?,
        protocol: match o.protocol {
            OtelProtocol::HttpProtobuf => Protocol::HttpProtobuf,
            OtelProtocol::Grpc => Protocol::Grpc,
        },
        credentials: CredentialFiles {
            headers: o.headers.clone(),
            bearer_token_file: None,
            header_files: o.header_files.clone(),
        },
    })
}

/// `messaging.consumer.group.name` of a source's spans: the durable, or
/// `<group>/<member>`.
/// `delivery.idempotency_*`, when a bucket is named.
fn idempotency(c: &Config) -> Option<Idempotency> {
    let d = &c.delivery;
    (!d.idempotency_bucket.is_empty()).then(|| Idempotency {
        bucket: d.idempotency_bucket.clone(),
        ttl: Duration::from_millis(d.idempotency_ttl_ms),
        key: d.idempotency_key,
        scope: if is_group(c) {
            c.source.group.clone()
        } else {
            c.source.durable.clone()
        },
    })
}

fn consumer_group(c: &Config) -> String {
    if is_group(c) {
        format!("{}/{}", c.source.group, c.source.member)
    } else {
        c.source.durable.clone()
    }
}

/// Whether the source is a group member.
fn is_group(c: &Config) -> bool {
    c.source
        .kind
        .is_some_and(crate::config::SourceKind::is_group)
}

/// The app as a source's request spans name it.
fn app_target(app_url: &Url) -> AppTarget {
    let mut shown = app_url.clone();
    // Never credentials in a span (a user:password in `http.url` is sent to the app as
    // Basic authorization, never shown).
    // Err only for a URL that cannot carry credentials: then it has none to clear.
    shown.set_username("").unwrap_or_default();
    shown.set_password(None).unwrap_or_default();
    AppTarget {
        url: shown.to_string(),
        host: app_url.host_str().unwrap_or("").to_string(),
        port: app_url.port_or_known_default().unwrap_or(0),
    }
}

/// `http.health_url` and its timing, parsed.
fn health(c: &Config, p: &mut Vec<Problem>) -> Option<HealthProbe> {
    let h = &c.http;
    if h.health_url.is_empty() {
        return None;
    }
    Some(HealthProbe {
        url: url(p, "http.health_url", &h.health_url)?,
        interval: Duration::from_millis(h.health_interval_ms),
        timeout: Duration::from_millis(h.health_timeout_ms),
        threshold: h.health_threshold,
    })
}

/// `[nats]`, parsed: what [`Nats::connect`](crate::nats::Nats::connect) takes (the
/// daemon's, and the `jetrelay group` and `jetrelay dlq` commands').
pub fn connection(n: &NatsConfig) -> Connection {
    let file = |path: &str| (!path.is_empty()).then(|| path.to_string());
    let auth = if !n.creds_file.is_empty() {
        Auth::Creds(n.creds_file.clone())
    } else if !n.nkey_seed_file.is_empty() {
        Auth::NkeySeed(n.nkey_seed_file.clone())
    } else if !n.token_file.is_empty() {
        Auth::Token(n.token_file.clone())
    } else if !n.user.is_empty() {
        Auth::UserPassword {
            user: n.user.clone(),
            password_file: n.password_file.clone(),
        }
    } else {
        Auth::None
    };
    Connection {
        servers: n.servers.clone(),
        name: n.name.clone(),
        auth,
        tls: Tls {
            ca_file: file(&n.tls_ca_file),
            client: file(&n.tls_cert_file).map(|cert| (cert, n.tls_key_file.clone())),
            required: n.tls_required,
            first: n.tls_first,
        },
        connect_timeout: Duration::from_millis(n.connect_timeout_ms),
        request_timeout: Duration::from_millis(n.request_timeout_ms),
        reconnect_delay: Duration::from_millis(n.reconnect_delay_ms),
        reconnect_delay_max: Duration::from_millis(n.reconnect_delay_max_ms),
        max_reconnects: usize::try_from(n.max_reconnects).ok().filter(|m| *m > 0),
    }
}

fn dead_letters(c: &Config, ack_wait: Duration) -> Option<DeadLetters> {
    let d = &c.dlq;
    if d.subject.is_empty() {
        return None;
    }
    let stream = (!d.stream.is_empty()).then(|| d.stream.clone());
    let managed = stream.as_ref().filter(|_| d.manage).map(|name| StreamSpec {
        name: name.clone(),
        subjects: vec![d.subject.clone()],
        max_age_ms: d.max_age_ms,
        duplicate_window_ms: u64::try_from(
            dlq_duplicate_window(ack_wait, Duration::from_millis(d.max_age_ms)).as_millis(),
        )
        .unwrap_or(u64::MAX),
        allow_direct: true,
        // `jetrelay dlq replay --fast --to` a subject the DLQ stream captures.
        allow_batched: true,
        // File storage, one replica (the source stream's, read when it is created),
        // limits, discard old, no other limit.
        ..StreamSpec::default()
    });
    Some(DeadLetters {
        subject: d.subject.clone(),
        stream,
        replicas_of: c.source.stream.clone(),
        managed,
    })
}

fn status_set(p: &mut Vec<Problem>, key: &str, patterns: &[String]) -> Option<StatusSet> {
    match StatusSet::parse(patterns) {
        Ok(set) => Some(set),
        Err(e) => {
            p.push(Problem::new(key, e.to_string()));
            None
        }
    }
}

/// The member consumer template: what a member's consumer takes from `[consumer]`
/// and `[delivery]`.
fn template(c: &Config) -> Template {
    let d = durable_consumer(c);
    Template {
        ack_wait_ms: d.ack_wait_ms,
        max_deliver: d.max_deliver,
        max_ack_pending: d.max_ack_pending,
        backoff_ms: d.backoff_ms,
        deliver_policy: d.deliver_policy,
    }
}

/// The durable consumer the config requires; a member's consumer takes the same
/// template.
fn durable_consumer(c: &Config) -> ConsumerSpec {
    ConsumerSpec {
        name: c.source.durable.clone(),
        durable: true,
        filter_subjects: c.source.filter_subjects.clone(),
        deliver_policy: c.consumer.deliver_policy.as_str().to_string(),
        ack_explicit: true,
        ack_wait_ms: c.consumer.ack_wait_ms,
        max_deliver: c.consumer.max_deliver,
        // The server never hands over more than is held.
        max_ack_pending: i64::from(c.delivery.max_buffered),
        backoff_ms: c.consumer.backoff_ms.clone(),
        priority: None,
        inactive_threshold_ms: 0,
        pull: true,
    }
}

/// The topology a durable requires.
pub fn topology_request(c: &Config) -> TopologyRequest {
    let managed = c.topology.managed_stream.as_ref().map(|m| StreamSpec {
        name: c.source.stream.clone(),
        ..m.clone()
    });
    TopologyRequest {
        stream: c.source.stream.clone(),
        stream_mode: c.topology.stream,
        managed,
        consumer: durable_consumer(c),
        consumer_mode: c.topology.consumer,
    }
}

/// `[delivery]`'s concurrency and rate keys.
pub fn pace(d: &crate::config::DeliveryConfig) -> PaceSettings {
    PaceSettings {
        adaptive: d.concurrency == crate::config::Concurrency::Adaptive,
        min_in_flight: d.min_in_flight,
        max_in_flight: d.max_in_flight,
        rate_per_s: d.rate_limit_per_s,
        burst: d.rate_limit_burst,
    }
}

#[cfg(test)]
mod tests {

    use super::*;

    /// The one source of a config.
    fn settings(toml: &str) -> SourceSettings {
        let c = Config::from_toml(&[toml]).unwrap();
        Settings::from_config(&c).unwrap().sources.remove(0)
    }

    /// The one source of a config, a stream's.
    fn stream(toml: &str) -> StreamSettings {
        match settings(toml).kind {
            KindSettings::Stream(s) => *s,
            KindSettings::Service(_) => panic!("a stream source"),
        }
    }

    const MEMBER: &str = "[source]\nstream = \"S\"\ngroup = \"g\"\nmember = \"m\"\n\
                          [http]\nurl = \"http://127.0.0.1:1/x\"\n\
                          [delivery]\nmax_buffered = 77\n[consumer]\nack_wait_ms = 4000\n\
                          deliver_policy = \"new\"\n";

    fn with_kind(kind: &str) -> String {
        MEMBER.replace(
            "member = \"m\"\n",
            &format!("member = \"m\"\nkind = \"{kind}\"\n"),
        )
    }

    #[test]
    fn max_ack_pending_is_max_buffered_for_durables_and_members() {
        let durable = stream(
            "[source]\nstream = \"S\"\nkind = \"durable\"\ndurable = \"d\"\n\
             [http]\nurl = \"http://127.0.0.1:1/x\"\n[delivery]\nmax_buffered = 77\n",
        );
        let Binding::Durable(req) = &durable.binding else {
            panic!("a durable");
        };
        assert_eq!(req.consumer.max_ack_pending, 77);
        assert_eq!(durable.limits.max_buffered, 77);
        for kind in ["static", "elastic"] {
            let s = stream(&with_kind(kind));
            let Binding::Group(m) = &s.binding else {
                panic!("a member");
            };
            assert_eq!(m.template.max_ack_pending, 77, "{kind}");
            assert_eq!(m.limits.max_buffered, 77, "{kind}");
            assert_eq!(m.template.deliver_policy, "new", "{kind}");
        }
    }

    #[test]
    fn timings_follow_the_ack_wait_and_elastic_acks_are_confirmed() {
        let s = stream(&with_kind("elastic"));
        assert_eq!(s.progress_every, Duration::from_secs(2));
        assert_eq!(s.timing, PullTiming::for_ack_wait(Duration::from_secs(4)));
        assert!(s.confirmed_acks, "elastic acks are always confirmed");
        let s = stream(&with_kind("static"));
        assert!(!s.confirmed_acks);
    }

    #[test]
    fn a_status_list_that_does_not_parse_is_an_error_not_an_empty_set() {
        let mut c = Config::from_toml(&[
            "[source]\nstream = \"S\"\nkind = \"durable\"\ndurable = \"d\"\n\
             [http]\nurl = \"http://127.0.0.1:1/x\"\n",
        ])
        .unwrap();
        // Built by hand, past the rules: parsing still refuses it.
        c.http.term_statuses = vec!["4x4".into()];
        let err = Settings::from_config(&c).unwrap_err();
        assert_eq!(err.problems()[0].key, "http.term_statuses");
    }
}
