//! Phase f: processed once. A durable with `delivery.idempotency_bucket`, under a
//! steady publisher, through the faults that bring a processed message back:
//!
//! - acks lost: a TCP proxy between jetrelay and nats-server drops every `+ACK` for
//!   longer than `ack_wait`, so the messages answered then are redelivered;
//! - the nats-server SIGKILLed and started again on its store;
//! - jetrelay SIGKILLed and another started on the same config: what it held comes
//!   back after `ack_wait`;
//! - ids re-sent after the stream's duplicate window (5 s here): the stream stores
//!   them again, as new messages with the same `Nats-Msg-Id`.
//!
//! Every published id must be answered 2xx, none twice, except an id first answered
//! within a second of the SIGKILL (in flight then, or just answered: the 2xx came,
//! the marker was not stored): those are counted apart, and any other duplicate is a failure of the
//! phase. A partition moving between group members is not run here.

use std::time::{Duration, Instant};

use async_nats::jetstream;
use axum::body::Bytes;

use super::proxy::AckDropper;
use super::{
    Clock, Ctx, Error, KEYS, Phase, PhaseResult, Publisher, Server, connect, create_stream,
    durable_source, free_port,
};

/// The phase's title in the report.
pub(crate) const TITLE: &str = "processed once: acks lost, nats-server and jetrelay killed, ids re-sent after the duplicate window";

/// The stream's duplicate window.
const WINDOW: Duration = Duration::from_secs(5);
/// Ids re-sent after the window.
const RESENT: u64 = 300;

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
    let marks = "idempotency_bucket = \"soak-marks\"\n".to_string();
    let via = [proxy.url().to_string()];
    p.relay_with(
        ctx,
        1,
        &via,
        durable_source(stream, "soak"),
        "none",
        marks.clone(),
    )
    .await?;
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
    p.relay_with(ctx, 2, &via, durable_source(stream, "soak"), "none", marks)
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

    clock.at(65.0).await;
    let first_ok = p.app.shared.rec.lock().unwrap().first_ok.clone();
    let mut r = p
        .finish(
            publisher,
            &js,
            stream,
            "acks lost, 1 SIGKILL of the server, 1 SIGKILL of jetrelay, ids re-sent",
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
