//! Phase f: processed once. An elastic group of two members (two jetrelay processes,
//! `delivery.idempotency_bucket`), under a steady publisher, through the faults that
//! bring a processed message back:
//!
//! - acks lost: a TCP proxy between jetrelay and nats-server drops every `+ACK` for
//!   longer than `ack_wait`, so the messages answered then are redelivered;
//! - the nats-server SIGKILLed and started again on its store;
//! - jetrelay SIGKILLed and another started on the same config: what it held comes
//!   back after `ack_wait`;
//! - ids re-sent after the stream's duplicate window (5 s here): the stream stores
//!   them again, as new messages with the same `Nats-Msg-Id`;
//! - partitions moving between members: m2 dropped from the membership while acks
//!   are lost (what it answered comes back through m1's consumer), then added back.
//!
//! Every published id must be answered 2xx, none twice, except an id first answered
//! within a second of the SIGKILL (in flight then, or just answered: the 2xx came,
//! the marker was not stored): those are counted apart, and any other duplicate is a failure of the
//! phase.

use std::time::{Duration, Instant};

use async_nats::jetstream;
use axum::body::Bytes;

use super::proxy::AckDropper;
use super::{
    Clock, Ctx, Error, KEYS, PARTITIONS, Phase, PhaseResult, Publisher, Server, connect,
    create_stream, free_port, group_cli,
};

/// The phase's title in the report.
pub(crate) const TITLE: &str = "processed once: acks lost, nats-server and jetrelay killed, ids re-sent after the duplicate window, partitions moving between members";

/// The stream's duplicate window.
const WINDOW: Duration = Duration::from_secs(5);
/// Ids re-sent after the window.
const RESENT: u64 = 300;

/// `jetrelay_duplicates_suppressed_total` of a running instance (0 when it does not answer).
async fn suppressed(r: &super::Relay) -> f64 {
    r.metrics()
        .await
        .and_then(|m| super::metric(&m, "jetrelay_duplicates_suppressed_total"))
        .unwrap_or(0.0)
}

pub(crate) async fn phase(ctx: &Ctx) -> Result<PhaseResult, Error> {
    let mut p = Phase::new(ctx, "f", TITLE, (10, 100)).await?;
    let mut server = Server::start(&ctx.nats_bin, p.dir.join("nats"), free_port(), vec![]).await?;
    let proxy = AckDropper::start(&server.url()).await?;
    let js = connect(&[server.url()]).await?;
    let stream = "SOAK_F";
    create_stream(
        &js,
        jetstream::stream::Config {
            name: stream.into(),
            subjects: vec!["soakf.*".into()],
            duplicate_window: WINDOW,
            ..Default::default()
        },
    )
    .await?;
    let url = server.url();
    let partitions = PARTITIONS.to_string();
    let create = [
        "elastic",
        "create",
        stream,
        "g",
        &partitions,
        "--filter",
        "soakf.*",
    ];
    group_cli(
        &ctx.relay_bin,
        &url,
        &[&create[..], &["--wildcards", "1"]].concat(),
    )
    .await?;
    group_cli(
        &ctx.relay_bin,
        &url,
        &["elastic", "add", stream, "g", "m1", "m2"],
    )
    .await?;
    let member = |m: &str| {
        format!("stream = \"{stream}\"\nkind = \"elastic\"\ngroup = \"g\"\nmember = \"{m}\"")
    };
    let marks = "idempotency_bucket = \"soak-marks\"\n".to_string();
    // Both members through the proxy: a window of lost acks hits them both.
    let via = [proxy.url().to_string()];
    for (tag, m) in [(1, "m1"), (2, "m2")] {
        p.relay_with(ctx, tag, &via, member(m), "none", marks.clone())
            .await?;
    }
    let clock = Clock::new(ctx.scale);
    p.t0 = clock.t0;
    let publisher = Publisher::start(js.clone(), "f", ctx.rate, |id| {
        format!("soakf.k{}", id % KEYS)
    });

    clock.at(10.0).await;
    let held = p.relays[0].held().await;
    let at = Instant::now();
    proxy.drop_acks(true);
    tokio::time::sleep(Duration::from_millis(super::ACK_WAIT_MS + 2000)).await;
    proxy.drop_acks(false);
    p.fault(
        format!(
            "acks dropped for {} ms ({} dropped)",
            super::ACK_WAIT_MS + 2000,
            proxy.dropped()
        ),
        at,
        None,
        held,
    );

    clock.at(25.0).await;
    let held = p.relays[0].held().await;
    let at = Instant::now();
    server.kill().await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    server.start_again().await?;
    p.fault("nats-server SIGKILL, down 3 s".into(), at, None, held);

    clock.at(40.0).await;
    let held = p.relays[0].held().await;
    let killed = Instant::now();
    p.relays[0].kill().await;
    p.fault("jetrelay SIGKILL".into(), killed, Some(1), held);
    p.relay_with(ctx, 3, &via, member("m1"), "none", marks)
        .await?;

    clock.at(50.0).await;
    // The first ids again, their window long past: stored as new messages.
    let mut resent = 0;
    for id in 0..RESENT {
        let mut headers = async_nats::HeaderMap::new();
        headers.insert("Nats-Msg-Id", format!("f-{id}").as_str());
        let ack = js
            .publish_with_headers(
                format!("soakf.k{}", id % KEYS),
                headers,
                Bytes::from(id.to_string()),
            )
            .await?
            .await?;
        if !ack.duplicate {
            resent += 1;
        }
    }
    p.notes.push(format!(
        "{resent} of {RESENT} ids re-sent after the duplicate window were stored again"
    ));
    p.fault(
        format!("{resent} ids re-sent"),
        Instant::now(),
        None,
        String::new(),
    );

    clock.at(55.0).await;
    // m2's partitions move to m1 while acks are lost: what m2 answered meanwhile
    // comes back through m1's consumer.
    let held = p.relays[1].held().await;
    let before = suppressed(&p.relays[2]).await;
    let at = Instant::now();
    proxy.drop_acks(true);
    group_cli(
        &ctx.relay_bin,
        &url,
        &["elastic", "drop", stream, "g", "m2"],
    )
    .await?;
    tokio::time::sleep(Duration::from_millis(super::ACK_WAIT_MS + 1000)).await;
    proxy.drop_acks(false);
    p.fault(
        "m2 dropped from the membership while acks were lost: its partitions move to m1".into(),
        at,
        None,
        held,
    );

    clock.at(65.0).await;
    let moved_back = suppressed(&p.relays[2]).await - before;
    p.notes.push(format!(
        "the move: m1 acked {moved_back:.0} messages of m2's partitions as processed before (m2 had answered them; their acks were lost)"
    ));
    let at = Instant::now();
    group_cli(&ctx.relay_bin, &url, &["elastic", "add", stream, "g", "m2"]).await?;
    p.fault(
        "m2 added back: partitions move to it again".into(),
        at,
        None,
        String::new(),
    );

    clock.at(75.0).await;
    let first_ok = p.app.shared.rec.lock().unwrap().first_ok.clone();
    let mut r = p
        .finish(
            publisher,
            &js,
            // The group's work-queue stream holds the member consumers.
            &format!("{stream}-g"),
            "acks lost, 1 SIGKILL of the server, 1 SIGKILL of jetrelay, ids re-sent, partitions moved twice",
        )
        .await;
    // Which duplicates the SIGKILL explains: first answered in the second before it.
    let counts = r.dup_list.clone();
    let (mut explained, mut unexplained) = (0usize, Vec::new());
    for id in counts {
        let first = first_ok.get(&id).copied();
        // A request in flight at the kill is answered by the app after it: its 2xx
        // was never read, its marker never written.
        let near_kill = first.is_some_and(|t| {
            let apart = if t <= killed {
                killed.duration_since(t)
            } else {
                t.duration_since(killed)
            };
            apart < Duration::from_secs(1)
        });
        if near_kill {
            explained += 1;
        } else {
            unexplained.push(id);
        }
    }
    r.details.push(format!(
        "duplicates: {} ids answered 2xx more than once; {explained} first answered within a second of jetrelay's SIGKILL (in flight or just answered then: 2xx given, marker not stored); {} otherwise{}",
        r.dup_ids,
        unexplained.len(),
        if unexplained.is_empty() {
            String::new()
        } else {
            format!(" (first ones: {:?})", &unexplained[..unexplained.len().min(10)])
        }
    ));
    if !unexplained.is_empty() {
        r.notes.push(format!(
            "{} duplicates not explained by the SIGKILL: processed-once broken",
            unexplained.len()
        ));
        r.unexplained_dups = unexplained.len();
    }
    drop(server);
    Ok(r)
}
