//! The app's answers under hostile shapes: memory in proportion to what an answer
//! carries (no JSON tree), and an answer that breaks off is no answer.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::support::daemon::Daemon;
use crate::support::*;

const T: Duration = Duration::from_secs(30);
const MB: u64 = 1024 * 1024;

/// A config for the built binary (so that its memory is its own).
fn binary_config(env: &Env, app_url: &str, extra: &str) -> String {
    format!(
        "[nats]\nservers = [\"{}\"]\n[source]\nstream = \"{}\"\nkind = \"durable\"\ndurable = \"{}\"\n\
         [http]\nurl = \"{app_url}\"\n[admin]\nlisten = \"127.0.0.1:0\"\n{extra}",
        env.nats.url(),
        env.stream,
        env.durable
    )
}

#[tokio::test]
async fn an_answer_of_n_megabytes_costs_a_small_multiple_of_n() {
    // Tiny items cost a JSON tree 10-50 times their text. ~29 MB of them: as a
    // publishing answer (over publish.max_messages: refused, the rest read past) and
    // as the answer to a one-message batch (more results than messages).
    let items = 1_600_000;
    let document = {
        let mut s = String::with_capacity(items * 20);
        s.push_str("{\"publish\": [");
        for i in 0..items {
            if i > 0 {
                s.push(',');
            }
            s.push_str("{\"subject\":\"o.a\"}");
        }
        s.push_str("]}");
        s
    };
    let results = {
        let mut s = String::with_capacity(items * 30);
        s.push_str("{\"results\": [");
        for i in 0..items {
            if i > 0 {
                s.push(',');
            }
            s.push_str("{\"id\":\"x\",\"action\":\"ack\"}");
        }
        s.push_str("]}");
        s
    };
    let size = document.len().max(results.len()) as u64;
    let (p, r) = (document, results);
    let app = MockApp::start(move |req, _| {
        if req.header("jetrelay-batch-size").is_some() {
            Reply::status(200)
                .header("Content-Type", "application/json")
                .body(r.clone())
        } else {
            Reply::status(200)
                .header("Content-Type", "application/vnd.jetrelay.publish+json")
                .body(p.clone())
        }
    })
    .await;
    for batch in [false, true] {
        let env = Env::start(&["big.>"]).await;
        let extra = format!(
            "[publish]\nallowed_subjects = [\"o.>\"]\nmax_bytes = 33554432\n\
             [consumer]\nmax_deliver = 1\n[delivery]\nbatch_size = {}\n",
            if batch { 100 } else { 1 }
        );
        let d = Daemon::start(&binary_config(&env, &app.url(), &extra)).await;
        d.wait_ready_body("ready", T, |code, _| code == 200).await;
        let before = d.peak_rss();
        publish(&env.js, "big.x", 1).await;
        eventually("settled", T, || {
            consumer_drained(&env.js, &env.stream, &env.durable)
        })
        .await;
        let grown = d.peak_rss().saturating_sub(before);
        assert!(
            grown <= 3 * size,
            "batch {batch}: an answer of {} MB took {} MB more",
            size / MB,
            grown / MB
        );
    }
}

/// An app on a raw socket: reads a request, writes `answer`, then does what `end`
/// says (close, or stall).
async fn raw_app(answer: &'static [u8], stall: bool) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/m", listener.local_addr().unwrap());
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            tokio::spawn(async move {
                // The request's head (the bodies here are small): up to its blank line.
                let mut buf = vec![0u8; 64 * 1024];
                let mut got = 0;
                while let Ok(n) = conn.read(&mut buf[got..]).await {
                    got += n;
                    if n == 0 || buf[..got].windows(4).any(|w| w == b"\r\n\r\n") {
                        break;
                    }
                }
                conn.write_all(answer).await.ok();
                if stall {
                    tokio::time::sleep(Duration::from_secs(3600)).await;
                }
            });
        }
    });
    url
}

#[tokio::test]
async fn an_answer_that_breaks_off_is_retried_never_acked_or_terminated() {
    let cases: [(&str, &'static [u8], bool, &str); 3] = [
        // A publishing 2xx cut after 30 bytes (its Content-Length says 100).
        (
            "cut publishing answer",
            b"HTTP/1.1 200 OK\r\nContent-Type: application/vnd.jetrelay.publish+json\r\nContent-Length: 100\r\n\r\n{\"publish\": [{\"subject\": \"o.1\"",
            false,
            "answer cut off",
        ),
        // A 4xx cut short: not taken as the status it began with.
        (
            "cut 400",
            b"HTTP/1.1 400 Bad Request\r\nContent-Length: 50\r\n\r\nno",
            false,
            "answer cut off",
        ),
        // A 2xx whose body never comes.
        (
            "stalled body",
            b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n  ",
            true,
            "timeout",
        ),
    ];
    for (what, answer, stall, kind) in cases {
        let url = raw_app(answer, stall).await;
        let env = Env::start(&["cut.>"]).await;
        let relay = Relay::ready(durable_config_for(
            env.nats.url(),
            &url,
            &env.stream,
            &env.durable,
            "[http]\ntimeout_ms = 500\n[publish]\nallowed_subjects = [\"o.>\"]\n\
             [consumer]\nmax_deliver = -1\n[delivery]\nretry_initial_ms = 100\nretry_max_ms = 200\n",
        ))
        .await;
        publish(&env.js, "cut.x", 1).await;
        eventually(what, T, || async { relay.settled("nak").await >= 2.0 }).await;
        let m = |s: &'static str| relay.metric(s);
        assert_eq!(
            m("jetrelay_messages_settled_total{action=\"ack\"}").await,
            0.0,
            "{what}"
        );
        assert_eq!(
            m("jetrelay_messages_settled_total{action=\"term\"}").await,
            0.0,
            "{what}"
        );
        let class = if kind == "timeout" {
            "timeout"
        } else {
            "error"
        };
        assert!(
            relay
                .metric(&format!(
                    "jetrelay_http_requests_total{{class=\"{class}\"}}"
                ))
                .await
                >= 2.0,
            "{what}"
        );
        relay.stop().await.unwrap();
    }
}

#[tokio::test]
async fn a_batch_answer_of_only_whitespace_before_the_timeout_acks_nothing() {
    let url = raw_app(
        b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n   \n  ",
        true,
    )
    .await;
    let env = Env::start(&["ws.>"]).await;
    let relay = Relay::ready(durable_config_for(
        env.nats.url(),
        &url,
        &env.stream,
        &env.durable,
        "[http]\ntimeout_ms = 300\n[delivery]\nbatch_size = 10\nretry_initial_ms = 100\n",
    ))
    .await;
    publish(&env.js, "ws.x", 3).await;
    eventually("retried", T, || async {
        relay
            .metric("jetrelay_http_requests_total{class=\"timeout\"}")
            .await
            >= 2.0
    })
    .await;
    assert_eq!(relay.settled("ack").await, 0.0);
    relay.stop().await.unwrap();
}
