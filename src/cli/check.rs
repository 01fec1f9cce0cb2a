//! `jetrelay check`: the config checked, then the topology plan (a durable) or the
//! member's share of its group, as text, changing nothing.

use crate::config::{Config, OnMissing};
use crate::daemon::settings::Settings;
use crate::group::manage::GroupAdmin;
use crate::group::spec::Member;
use crate::nats::{MarkerBucket, Nats, NatsError};
use crate::outputs::{self, Capture, ManagedStream, Needs};
use crate::route::To;
use crate::source::settings::{Binding, DeadLetters, KindSettings, SourceSettings};
use crate::subject;
use crate::topology::{
    ConsumerPlan, StreamAction, StreamMode, StreamPlan, StreamSpec, Table, TopologyRequest,
};

/// What `check` prints and whether `run` could proceed.
#[derive(Debug)]
pub struct Report {
    /// The human-readable plan, one finding per line (tables follow their line).
    pub lines: Vec<String>,
    /// False when `run` would stop with an error.
    pub ok: bool,
}

/// The checks that need no server: the rules between keys ([`Settings`]) and the
/// app's side as `run` builds it (secret files, the TLS CA, the proxy). Passing, it
/// says so in one line (`config: ok …`), printed before anything connects.
///
/// # Errors
/// [`CheckError`] naming what is wrong.
pub fn offline(config: &Config) -> Result<Settings, CheckError> {
    let settings = Settings::from_config(config)?;
    for source in &settings.sources {
        let client = crate::http::app::AppClient::new(&source.client)?;
        crate::http::forward::Forwarder::new(&client, &source.target)?;
    }
    if let Some(path) = &settings.publish.token_file {
        crate::secret::SecretFile::load("publish.token_file", path)?;
    }
    if let Some(path) = &settings.admin_token_file {
        crate::secret::SecretFile::load("admin.token_file", path)?;
    }
    if let Some(tracing) = &settings.tracing {
        crate::http::collector::Collector::new(&tracing.collector)?;
    }
    Ok(settings)
}

/// `check --offline`: [`offline`], and what the NATS connection reads before it
/// connects (the credentials' files, its TLS files, the server addresses), without
/// connecting. Returns the line that says so.
///
/// # Errors
/// [`CheckError`] naming what is wrong; never one of reaching NATS.
pub async fn without_nats(config: &Config) -> Result<String, CheckError> {
    let settings = offline(config)?;
    Nats::check_offline(&settings.nats).await?;
    let app = app_lines(&settings, false).await.lines;
    let app: String = app.iter().map(|l| format!("\n{l}")).collect();
    Ok(format!(
        "{}{app}\noffline: every file the config names is readable; NATS was not contacted (`jetrelay check` where it is reachable prints the topology plan)",
        config_ok(&settings)
    ))
}

/// The lines that say the config passed [`offline`]: what each source consumes, and
/// its routes in the order they are tried.
pub fn config_ok(settings: &Settings) -> String {
    let [one] = settings.sources.as_slice() else {
        let mut out = format!("config: ok ({} sources)", settings.sources.len());
        for source in &settings.sources {
            out.push_str(&format!("\nsource {}: {}", source.name, consumes(source)));
            out.push_str(&max_age(source));
            out.push_str(&routes(source));
        }
        return out;
    };
    format!(
        "config: ok ({}){}{}",
        consumes(one),
        max_age(one),
        routes(one)
    )
}

/// What a source consumes, as the config says it.
fn consumes(source: &SourceSettings) -> String {
    let stream = match &source.kind {
        KindSettings::Stream(stream) => stream,
        KindSettings::Service(service) => {
            let spec = &service.spec;
            return format!(
                "source.kind = service, service {} {}, queue group {}",
                spec.name, spec.version, spec.queue_group
            );
        }
    };
    match &stream.binding {
        Binding::Durable(request) => format!("source.kind = durable, stream {}", request.stream),
        Binding::Group(member) => format!(
            "source.kind = {}, stream {}, group {}, member {}",
            member.flavour.name(),
            member.stream,
            member.group,
            member.member
        ),
    }
}

/// What a source does with a message too old to send (no limit: nothing).
fn max_age(source: &SourceSettings) -> String {
    match source.stream().and_then(|s| s.max_age) {
        Some(max) => format!(
            "\n  max age {}: an older message is dead-lettered as too_old (terminated without a DLQ), not sent",
            age(u64::try_from(max.as_millis()).unwrap_or(u64::MAX))
        ),
        None => String::new(),
    }
}

/// A source's routes, one line each (none: nothing).
fn routes(source: &SourceSettings) -> String {
    let mut out = String::new();
    for r in source.stream().map_or(&[][..], |s| &s.routes) {
        let subjects = match r.subjects.as_slice() {
            [] => "any subject".to_string(),
            s => s.join(", "),
        };
        let headers: String = r
            .headers
            .iter()
            .map(|(n, v)| format!(" and {n}: {v}"))
            .collect();
        let when = r
            .when
            .as_ref()
            .map(|w| format!(" when {}", w.source()))
            .unwrap_or_default();
        let to = match &r.to {
            To::Skip(skip) => format!("{} without a request", skip.name()),
            // A user:password in the URL is never printed.
            To::Target(target) => format!("POST {}", crate::config::redact(target.url.as_str())),
        };
        out.push_str(&format!(
            "\n  route {}: {subjects}{headers}{when} -> {to}",
            r.name
        ));
    }
    out
}

/// The app's transport, per source: its Unix socket (there, a socket, and — `online`
/// — accepting a connection) and, under h2c and `online`, whether the app speaks
/// HTTP/2. A socket that is missing or refuses is a warning (the app may not be up
/// yet: `run` holds the messages until it is); an app that answers h2c's preface in
/// anything but HTTP/2 is not (`run` would hold every message), so `ok` is false.
async fn app_lines(settings: &Settings, online: bool) -> Report {
    use crate::app::transport::HttpVersion;
    use crate::http::h2c::{Spoken, speaks_h2};
    let mut report = Report {
        lines: Vec::new(),
        ok: true,
    };
    let several = settings.sources.len() > 1;
    for source in &settings.sources {
        let of = if several {
            format!(" (source {})", source.name)
        } else {
            String::new()
        };
        let socket = source.client.unix_socket.as_deref();
        if let Some(path) = socket {
            let state = socket_state(path, online).await;
            report
                .lines
                .push(format!("app socket {}{of}: {state}", path.display()));
        }
        if online && source.client.version == HttpVersion::H2c {
            let within = std::time::Duration::from_secs(2);
            let line = match speaks_h2(socket, &source.target.url, within).await {
                Spoken::Http2 => "speaks HTTP/2".to_string(),
                Spoken::Unknown => "not reached: whether it speaks HTTP/2 is not known".into(),
                Spoken::NotHttp2 => {
                    report.ok = false;
                    format!(
                        "{}: run would hold every message",
                        crate::http::h2c::NOT_HTTP2
                    )
                }
            };
            report.lines.push(format!("app (h2c){of}: {line}"));
        }
        if online {
            oauth2_line(source, &of, &mut report).await;
        }
    }
    report
}

/// `[http.oauth2]`, when set: whether its token endpoint gives a token. One that
/// refuses the client (or answers no token) is not ok: `run` would hold every
/// message. One that cannot be reached is a warning, as an app's missing socket is.
async fn oauth2_line(source: &SourceSettings, of: &str, report: &mut Report) {
    use crate::http::oauth2::TokenError;
    // Built as `offline` built it already: it cannot fail here.
    let Ok(client) = crate::http::app::AppClient::new(&source.client) else {
        return;
    };
    let Some(asked) = client.try_token(std::time::Duration::from_secs(5)).await else {
        return;
    };
    let line = match asked {
        Ok(()) => "a token was fetched".to_string(),
        Err(e @ TokenError::Unreachable) => {
            format!(
                "warning: {} (run holds the messages until it answers)",
                e.kind()
            )
        }
        Err(e) => {
            report.ok = false;
            format!("error: {}: run would hold every message", e.kind())
        }
    };
    report.lines.push(format!("app oauth2{of}: {line}"));
}

/// Whether `path` is there, a socket and (`connect`) accepts a connection, as a line.
async fn socket_state(path: &std::path::Path, connect: bool) -> String {
    use std::os::unix::fs::FileTypeExt;
    const HELD: &str = "run holds the messages until the app is there";
    match std::fs::metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            format!("warning: missing (the app may not be up yet; {HELD})")
        }
        Err(e) => format!("warning: cannot be read ({e}; {HELD})"),
        Ok(m) if !m.file_type().is_socket() => {
            format!("warning: is not a socket ({HELD})")
        }
        Ok(_) if !connect => "exists and is a socket".into(),
        Ok(_) => match tokio::net::UnixStream::connect(path).await {
            Ok(_) => "exists, is a socket and accepts a connection".into(),
            Err(e) => format!("warning: exists but refuses a connection ({e}; {HELD})"),
        },
    }
}

/// Connects (once, no retry) and reports what `run` would find: the source's
/// topology (or the member's share of its group), the dead-letter stream, the
/// processed-once markers' bucket, and the streams the allowed publish subjects go
/// to, as they will be once `run` made its additive changes.
///
/// # Errors
/// [`CheckError`] when the config does not parse, or the server cannot be reached
/// or is too old.
pub async fn check(config: &Config) -> Result<Report, CheckError> {
    let settings = offline(config)?;
    let app = app_lines(&settings, true).await;
    let nats = Nats::connect(&settings.nats, false)
        .await
        .map_err(|e| match e {
            e @ NatsError::Connect { .. } => CheckError::Unreachable(e),
            e => CheckError::Nats(e),
        })?;
    nats.check_server_version()?;
    // The streams run creates or extends, as they will be.
    let mut planned: Vec<StreamSpec> = Vec::new();
    let mut whole = app;
    let several = settings.sources.len() > 1;
    for source in &settings.sources {
        if several {
            whole.lines.push(format!("source {}:", source.name));
        }
        let stream = match &source.kind {
            KindSettings::Stream(stream) => stream,
            KindSettings::Service(service) => {
                let spec = &service.spec;
                whole.lines.extend(spec.endpoints.iter().map(|e| {
                    format!(
                        "endpoint {}: requests on {} in queue group {} (no stream, no consumer)",
                        e.name, e.subject, spec.queue_group
                    )
                }));
                continue;
            }
        };
        let mut one = match &stream.binding {
            Binding::Durable(request) => {
                let (report, plan) = report(&nats, request, stream.retry.on_missing).await;
                if request.stream_mode == StreamMode::Managed {
                    planned.extend(plan.and_then(|p| p.after()));
                }
                report
            }
            Binding::Group(member) => group_report(&nats, member).await,
        };
        if let Some(dlq) = &stream.dead_letters {
            let mut lines = dead_letters(&nats, dlq, &dlq.replicas_of, &mut planned).await;
            one.lines.append(&mut lines);
        }
        if let Some(i) = &stream.idempotency {
            let (ok, line) = markers(&nats, &i.bucket).await;
            one.ok &= ok;
            one.lines.push(line);
        }
        whole.ok &= one.ok;
        whole.lines.append(&mut one.lines);
    }
    let mut report = whole;
    let mut lines = publishing(&nats, config, &settings, &planned).await;
    report.lines.append(&mut lines);
    Ok(report)
}

/// A member's consumer is the group's business: the group and this member's share.
async fn group_report(nats: &Nats, member: &Member) -> Report {
    match GroupAdmin::new(nats.clone())
        .member_info(
            member.flavour,
            &member.stream,
            &member.group,
            &member.member,
        )
        .await
    {
        Ok(m) => Report {
            lines: vec![format!(
                "group {}: member {} in membership {}, partitions {:?}, consumer {}, active {}, pinned {}",
                member.group,
                m.member,
                m.in_membership,
                m.partitions,
                m.consumer,
                m.active,
                m.pinned
            )],
            ok: true,
        },
        Err(e) => Report {
            lines: vec![format!("group {}: {e}", member.group)],
            ok: false,
        },
    }
}

/// The captures of `pattern`: what the server has now, with the streams `run` will
/// create or extend in their place.
async fn captures(
    nats: &Nats,
    pattern: &str,
    planned: &[StreamSpec],
) -> Result<Vec<Capture>, String> {
    let mut found = nats
        .capturing(pattern)
        .await
        .map_err(|e| crate::ops::telemetry::chain(&e))?;
    for spec in planned {
        if spec.subjects.iter().any(|s| subject::overlaps(s, pattern)) {
            let exists = found.iter().position(|c| c.stream == spec.name);
            let mut capture = Capture::planned(spec);
            if let Some(i) = exists {
                capture.planned = false;
                found[i] = capture;
            } else {
                found.push(capture);
            }
        }
    }
    Ok(found)
}

/// The dead-letter stream: the managed one's plan, and whether `jetrelay dlq` can
/// read what stores the letters.
async fn dead_letters(
    nats: &Nats,
    dlq: &DeadLetters,
    source_stream: &str,
    planned: &mut Vec<StreamSpec>,
) -> Vec<String> {
    let mut lines = Vec::new();
    if let Some(spec) = &dlq.managed {
        match nats.plan_owned(spec, source_stream).await {
            Ok(plan) => {
                lines.push(match &plan.action {
                    StreamAction::Keep => format!("dlq stream {}: exists, no change", spec.name),
                    StreamAction::Create(s) => format!(
                        "dlq stream {}: would be created with subjects {:?} (direct gets, file storage, {} replica(s), max age {}, duplicate window {})",
                        s.name,
                        s.subjects,
                        s.replicas,
                        age(s.max_age_ms),
                        age(s.duplicate_window_ms)
                    ),
                    StreamAction::AddSubjects { added, .. } => {
                        format!("dlq stream {}: would get the subjects {added:?}", spec.name)
                    }
                });
                if !plan.untouched.is_empty() {
                    lines.push(format!(
                        "dlq stream {}: differs from what [dlq] asks for (never changed):\n{}",
                        spec.name,
                        Table(&plan.untouched)
                    ));
                }
                planned.extend(plan.after());
            }
            Err(e) => lines.push(format!(
                "dlq stream {}: {}",
                spec.name,
                crate::ops::telemetry::chain(&e)
            )),
        }
    }
    match captures(nats, &dlq.subject, planned).await {
        Ok(streams) => lines.extend(crate::dead_letter::stored::findings(
            &dlq.subject,
            &streams,
            dlq.stream.as_deref(),
        )),
        Err(e) => lines.push(format!("dlq {}: cannot read the streams: {e}", dlq.subject)),
    }
    lines
}

/// The processed-once markers' bucket: there (with per-key TTLs), to be made, or one
/// `run` refuses (not ok).
async fn markers(nats: &Nats, bucket: &str) -> (bool, String) {
    match nats.marker_bucket(bucket).await {
        Ok(MarkerBucket::Ready { replicas, markers }) => (
            true,
            format!(
                "idempotency bucket {bucket}: exists with per-key TTLs, {replicas} replica(s), {markers} marker(s)"
            ),
        ),
        Ok(MarkerBucket::Missing) => (
            true,
            format!(
                "idempotency bucket {bucket}: would be created (1 replica, file storage, per-key TTLs; in a cluster, create it yourself with the replicas you want)"
            ),
        ),
        Ok(MarkerBucket::NoTtl) => (
            false,
            NatsError::MarkersNoTtl(bucket.to_string()).to_string(),
        ),
        Err(e) => (
            false,
            format!(
                "idempotency bucket {bucket}: {}",
                crate::ops::telemetry::chain(&e)
            ),
        ),
    }
}

/// For each allowed publish subject: the streams that capture it, and what would go
/// wrong there (`crate::outputs::findings`).
async fn publishing(
    nats: &Nats,
    config: &Config,
    settings: &Settings,
    planned: &[StreamSpec],
) -> Vec<String> {
    let mut lines = Vec::new();
    let needs = Needs {
        atomic: settings.publish.atomic,
        window: settings.publish.window_needed,
        managed: managed_streams(config, settings),
    };
    for pattern in &settings.publish.rules.allowed {
        match captures(nats, pattern, planned).await {
            Ok(streams) => lines.extend(outputs::findings(pattern, &streams, &needs)),
            Err(e) => lines.push(format!("publish {pattern}: cannot read the streams: {e}")),
        }
    }
    lines
}

/// Each source's managed stream, named by the key of its table: where the user
/// writes it (`sources.<name>.topology.managed_stream` of several sources).
fn managed_streams(config: &Config, settings: &Settings) -> Vec<ManagedStream> {
    let single = config.sources.is_empty();
    settings
        .sources
        .iter()
        .filter_map(|source| match source.stream().map(|s| &s.binding) {
            Some(Binding::Durable(request)) if request.stream_mode == StreamMode::Managed => {
                Some(ManagedStream {
                    stream: request.stream.clone(),
                    key: if single {
                        "topology.managed_stream".into()
                    } else {
                        format!("sources.{}.topology.managed_stream", source.name)
                    },
                })
            }
            _ => None,
        })
        .collect()
}

/// A duration in milliseconds as people read it: `7d`, `2h`, `2m`, `30s`; `forever`
/// for 0.
fn age(ms: u64) -> String {
    const UNITS: [(u64, &str); 4] = [
        (86_400_000, "d"),
        (3_600_000, "h"),
        (60_000, "m"),
        (1000, "s"),
    ];
    if ms == 0 {
        return "forever".into();
    }
    UNITS
        .iter()
        .find(|(unit, _)| ms.is_multiple_of(*unit))
        .map_or_else(
            || format!("{ms}ms"),
            |(unit, name)| format!("{}{name}", ms / unit),
        )
}

/// Why `check` could not report.
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    /// The config does not parse into settings.
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    /// NATS is too old, or what the connection reads is wrong.
    #[error(transparent)]
    Nats(#[from] NatsError),
    /// NATS cannot be reached: `--offline` checks the rest without it.
    #[error(
        "NATS cannot be reached (`jetrelay check --offline` checks the config and the files it names without it)"
    )]
    Unreachable(#[source] NatsError),
    /// The app's side cannot be set up (a secret file, the TLS CA, the proxy).
    #[error(transparent)]
    App(#[from] crate::http::client::ClientError),
    /// A secret file of the endpoint cannot be used.
    #[error(transparent)]
    Secret(#[from] crate::secret::SecretError),
    /// The running config cannot be read (`--diff-running`).
    #[error(transparent)]
    Running(#[from] crate::http::running::RunningError),
    /// What the admin port answered is not a config (`--diff-running`).
    #[error("not a running config: {0}")]
    NotAConfig(String),
}

/// Reads the topology and describes the plan; `ok` is false where `run` would stop
/// (a conflicting consumer, or something missing with `on_missing = "fail"`). Also
/// returns the stream's plan, when there is one.
pub async fn report(
    nats: &Nats,
    req: &TopologyRequest,
    on_missing: OnMissing,
) -> (Report, Option<StreamPlan>) {
    let waits = on_missing == OnMissing::Retry;
    let stream = &req.stream;
    let plan = match nats.plan(req).await {
        Ok(p) => p,
        Err(e) => {
            let (ok, what) = match (e.is_missing(), waits) {
                (true, true) => (true, "; run waits for it"),
                (true, false) => (false, "; run would stop (topology.on_missing = \"fail\")"),
                (false, _) => (false, ""),
            };
            let report = Report {
                lines: vec![format!("stream {stream}: {e}{what}")],
                ok,
            };
            return (report, None);
        }
    };
    let mut lines = vec![match &plan.stream.action {
        StreamAction::Keep => format!("stream {stream}: exists, no change"),
        StreamAction::Create(s) => {
            let flags: Vec<&str> = [
                (s.allow_direct, "allow_direct"),
                (s.allow_atomic, "allow_atomic"),
                (s.allow_msg_ttl, "allow_msg_ttl"),
            ]
            .iter()
            .filter(|(on, _)| *on)
            .map(|(_, name)| *name)
            .collect();
            let flags = if flags.is_empty() {
                String::new()
            } else {
                format!(", {}", flags.join(", "))
            };
            format!(
                "stream {stream}: would be created with subjects {:?}{flags}",
                s.subjects
            )
        }
        StreamAction::AddSubjects { added, .. } => {
            format!("stream {stream}: would get the subjects {added:?}")
        }
    }];
    if !plan.stream.untouched.is_empty() {
        lines.push(format!(
            "stream {stream}: differs from topology.managed_stream (never changed):\n{}",
            Table(&plan.stream.untouched)
        ));
    }
    let name = &req.consumer.name;
    let (line, ok) = match &plan.consumer {
        ConsumerPlan::Keep => (format!("consumer {name}: exists and matches"), true),
        ConsumerPlan::Create => (format!("consumer {name}: would be created"), true),
        ConsumerPlan::Missing if waits => (
            format!("consumer {name}: missing (topology.consumer = \"bind\"); run waits for it"),
            true,
        ),
        ConsumerPlan::Missing => (
            format!(
                "consumer {name}: missing (topology.consumer = \"bind\"); run would stop (topology.on_missing = \"fail\")"
            ),
            false,
        ),
        ConsumerPlan::Conflict(rows) => (
            format!(
                "consumer {name}: exists with a different configuration; run would stop:\n{}",
                Table(rows)
            ),
            false,
        ),
    };
    lines.push(line);
    (Report { lines, ok }, Some(plan.stream))
}
