//! Consumer-group test helpers.

use async_nats::jetstream;
use jetrelay::group::manage::GroupAdmin;
use jetrelay::nats::Nats;

use super::{MockApp, NatsServer};

pub async fn admin(nats: &NatsServer) -> GroupAdmin {
    admin_at(nats.url()).await
}

/// An administrator connected to any server list (comma-separated URLs).
pub async fn admin_at(servers: &str) -> GroupAdmin {
    let cfg = jetrelay::config::NatsConfig {
        servers: servers.split(',').map(str::to_string).collect(),
        ..Default::default()
    };
    GroupAdmin::new(
        Nats::connect(&jetrelay::daemon::settings::connection(&cfg), false)
            .await
            .unwrap(),
    )
}

/// A server, a stream partitioning `o.*` into `n`, and static group `cg` on it with
/// `members`; returns (server, context, stream, admin).
pub async fn static_group(
    n: u32,
    members: &[&str],
) -> (NatsServer, jetstream::Context, String, GroupAdmin) {
    let nats = NatsServer::start().await;
    let (_, js) = super::client(&nats).await;
    let stream = super::unique("S");
    partitioned_stream(&js, &stream, "o", n).await;
    let admin = admin(&nats).await;
    let members = members.iter().map(|m| m.to_string()).collect();
    admin
        .create_static(
            &stream,
            "cg",
            jetrelay::group::model::GroupConfig::new_static(n, vec![], members, vec![]),
        )
        .await
        .unwrap();
    (nats, js, stream, admin)
}

/// A server, a stream with subjects `e.*`, and elastic group `eg` on it partitioning
/// by the token over `n`, with `members` added; returns (server, context, stream, admin).
pub async fn elastic_group(
    n: u32,
    members: &[&str],
) -> (NatsServer, jetstream::Context, String, GroupAdmin) {
    let nats = NatsServer::start().await;
    let (_, js) = super::client(&nats).await;
    let stream = super::unique("E");
    super::create_stream(&js, &stream, &["e.*"]).await;
    let admin = admin(&nats).await;
    create_elastic_eg(&admin, &stream, n).await;
    if !members.is_empty() {
        let members: Vec<String> = members.iter().map(|m| m.to_string()).collect();
        admin.add(&stream, "eg", &members).await.unwrap();
    }
    (nats, js, stream, admin)
}

/// Elastic group `eg` on `stream` (subjects `e.*`), partitioning by the token over `n`,
/// with no members.
pub async fn create_elastic_eg(admin: &GroupAdmin, stream: &str, n: u32) {
    let filters = vec![jetrelay::group::model::PartitioningFilter {
        filter: "e.*".into(),
        wildcards: vec![1],
    }];
    admin
        .create_elastic(
            stream,
            "eg",
            jetrelay::group::model::GroupConfig::new_elastic(n, filters, -1, -1),
        )
        .await
        .unwrap();
}

/// A stream whose subjects `<prefix>.*` are stored as `<p>.<prefix>.<token>`.
pub async fn partitioned_stream(js: &jetstream::Context, name: &str, prefix: &str, n: u32) {
    js.create_stream(jetstream::stream::Config {
        name: name.to_string(),
        subjects: vec![format!("{prefix}.*")],
        subject_transform: Some(jetstream::stream::SubjectTransform {
            source: format!("{prefix}.*"),
            destination: format!("{{{{partition({n},1)}}}}.{prefix}.{{{{wildcard(1)}}}}"),
        }),
        ..Default::default()
    })
    .await
    .unwrap();
}

pub fn member_config(
    nats: &NatsServer,
    app: &MockApp,
    kind: &str,
    stream: &str,
    group: &str,
    member: &str,
    extra: &str,
) -> jetrelay::config::Config {
    member_config_at(nats.url(), app, kind, stream, group, member, extra)
}

/// [`member_config`] for any server list (comma-separated URLs).
pub fn member_config_at(
    servers: &str,
    app: &MockApp,
    kind: &str,
    stream: &str,
    group: &str,
    member: &str,
    extra: &str,
) -> jetrelay::config::Config {
    use figment::providers::{Format, Toml};
    let base = format!(
        "[nats]\nservers = \"{servers}\"\n[source]\nstream = \"{stream}\"\nkind = \"{kind}\"\ngroup = \"{group}\"\nmember = \"{member}\"\n\
         [consumer]\nack_wait_ms = 2000\n[topology]\nretry_initial_ms = 50\nretry_max_ms = 200\n\
         [http]\nurl = \"{}\"\n[admin]\nlisten = \"127.0.0.1:0\"\n[log]\nlevel = \"warn\"\n",
        app.url()
    );
    jetrelay::config::Config::from_figment(
        figment::Figment::from(Toml::string(&base)).merge(Toml::string(extra)),
    )
    .unwrap()
}

/// Publishes `per_key` messages for each of `keys` tokens, interleaved; every body is
/// unique across calls. On a cluster a publish may find the stream without a leader
/// (a node just killed): it is sent again, with its body as `Nats-Msg-Id` so that one
/// stored before its PubAck was lost is stored once, for up to 30 s.
pub async fn publish_keys(js: &jetstream::Context, prefix: &str, keys: u32, per_key: u32) {
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    for _ in 0..per_key {
        for k in 0..keys {
            let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let body = format!("{k}-{n}");
            let give_up = std::time::Instant::now() + std::time::Duration::from_secs(30);
            loop {
                let mut headers = async_nats::HeaderMap::new();
                headers.insert("Nats-Msg-Id", body.as_str());
                let sent = match js
                    .publish_with_headers(format!("{prefix}.{k}"), headers, body.clone().into())
                    .await
                {
                    Ok(ack) => ack.await.map(drop).map_err(|e| e.to_string()),
                    Err(e) => Err(e.to_string()),
                };
                match sent {
                    Ok(()) => break,
                    Err(_) if std::time::Instant::now() < give_up => {
                        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
                    }
                    Err(e) => panic!("publish of {body}: {e}"),
                }
            }
        }
    }
}

/// Every message body seen by the apps, deduplicated.
pub fn bodies(apps: &[&MockApp]) -> std::collections::BTreeSet<String> {
    apps.iter()
        .flat_map(|a| a.requests())
        .filter(|r| r.status == 200)
        .map(|r| String::from_utf8_lossy(&r.body).into_owned())
        .collect()
}

/// Per key, the bodies' sequence numbers must be increasing in arrival order.
pub fn assert_key_order(app: &MockApp) {
    assert_key_order_across(&[app]);
}

/// Per key, the bodies' sequence numbers must be increasing in arrival order across
/// every app (one instance's, then the next one's after a handover).
pub fn assert_key_order_across(apps: &[&MockApp]) {
    let mut reqs: Vec<_> = apps.iter().flat_map(|a| a.requests()).collect();
    reqs.sort_by_key(|r| r.at);
    let mut last: std::collections::HashMap<String, u64> = Default::default();
    for r in reqs.iter().filter(|r| r.status == 200) {
        let key = r.header("nats-subject").unwrap().to_string();
        let seq = r.seq();
        if let Some(prev) = last.insert(key.clone(), seq) {
            assert!(seq > prev, "{key}: {seq} after {prev}");
        }
    }
}
