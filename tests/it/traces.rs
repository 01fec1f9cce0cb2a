//! Tracing end to end, against a fake OTLP collector that decodes the export with the
//! official protobuf types: the CONSUMER span of a delivery under the publisher's
//! context, a CLIENT span per attempt whose context reaches the app, the PRODUCER
//! span of outputs and of `/v1/publish` whose context the published messages carry,
//! batch links, unsampled and root traces, a collector going away mid-stream, and
//! the message age.

use std::time::Duration;

use async_nats::HeaderMap;
use async_nats::jetstream::{self, stream};
use opentelemetry_proto::tonic::trace::v1::Span;
use opentelemetry_proto::tonic::trace::v1::span::SpanKind;
use serde_json::{Value, json};

use crate::support::collector::{FakeCollector, Wire, attr, hex};
use crate::support::*;

const T: Duration = Duration::from_secs(30);
const TRACE: &str = "0af7651916cd43dd8448eb211c80319c";
const PARENT: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
const PUBLISH_TYPE: &str = "application/vnd.jetrelay.publish+json";

fn part(traceparent: &str, i: usize) -> &str {
    traceparent.split('-').nth(i).unwrap()
}

fn sampled(traceparent: &str) -> bool {
    u8::from_str_radix(part(traceparent, 3), 16).unwrap() & 1 == 1
}

fn of(spans: &[Span], kind: SpanKind) -> Vec<&Span> {
    spans.iter().filter(|s| s.kind == kind as i32).collect()
}

async fn stored_header(
    js: &jetstream::Context,
    stream: &str,
    seq: u64,
    name: &str,
) -> Option<String> {
    let s = js.get_stream(stream).await.unwrap();
    let m = s.get_raw_message(seq).await.unwrap();
    m.headers.get(name).map(|v| v.as_str().to_string())
}

async fn spans_until(c: &FakeCollector, what: &str, want: impl Fn(&[Span]) -> bool) -> Vec<Span> {
    eventually(what, T, || {
        let spans = c.spans();
        let ok = want(&spans);
        async move { ok }
    })
    .await;
    c.spans()
}

#[tokio::test]
async fn a_delivery_is_a_consumer_span_under_the_publishers_context_and_its_outputs_continue_the_trace()
 {
    let collector = FakeCollector::start(Wire::HttpProtobuf).await;
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, "from-a-file\n").unwrap();
    let app = MockApp::start(|r, _| {
        if r.body[..] == b"publishes"[..] {
            let out = json!({"publish": [{"subject": "out.1", "data": "o"}]});
            Reply::status(200)
                .header("Content-Type", PUBLISH_TYPE)
                .body(out.to_string())
        } else {
            Reply::status(200)
        }
    })
    .await;
    let env = Env::start(&["in.>"]).await;
    let out = unique("OUT");
    atomic_stream(&env.js, &out, &["out.>"], true).await;
    let extra = format!(
        "[nats]\nname = \"relay-7\"\n[publish]\nallowed_subjects = [\"out.>\"]\n{}",
        collector.otel(&format!(
            "service_name = \"orders-relay\"\nheaders = {{ \"X-Tenant\" = \"t1\" }}\n\
             header_files = {{ \"Authorization\" = \"{}\" }}",
            token.display()
        ))
    );
    let relay = env.relay(&app, &extra).await;
    publish_with(
        &env.js,
        "in.a",
        "publishes",
        &[
            ("traceparent", PARENT),
            ("tracestate", "vendor=opaque"),
            ("baggage", "user=42"),
            ("Nats-Msg-Id", "order-1"),
        ],
    )
    .await;
    publish_with(&env.js, "in.b", "plain", &[]).await;
    eventually("both acked", T, || {
        consumer_drained(&env.js, &env.stream, &env.durable)
    })
    .await;
    let spans = spans_until(&collector, "3 + 2 spans", |s| s.len() >= 5).await;

    // The delivery of in.a: a CONSUMER span under the publisher's span.
    let consumers = of(&spans, SpanKind::Consumer);
    assert_eq!(consumers.len(), 2, "one per delivery: {spans:#?}");
    let a = consumers
        .iter()
        .find(|s| s.name == "process in.a")
        .expect("process in.a");
    assert_eq!(hex(&a.trace_id), TRACE);
    assert_eq!(hex(&a.parent_span_id), part(PARENT, 2));
    assert_eq!(a.trace_state, "vendor=opaque");
    for (k, v) in [
        ("messaging.system", "nats"),
        ("messaging.destination.name", "in.a"),
        ("messaging.consumer.group.name", env.durable.as_str()),
        ("messaging.message.id", "order-1"),
        ("messaging.message.delivery_count", "1"),
        ("jetrelay.stream", env.stream.as_str()),
        ("jetrelay.stream_sequence", "1"),
        ("jetrelay.outcome", "ack"),
        ("jetrelay.source", "default"),
    ] {
        assert_eq!(attr(a, k).as_deref(), Some(v), "{k}");
    }
    assert!(a.end_time_unix_nano >= a.start_time_unix_nano);

    // The request: a CLIENT span under it, whose context the app got.
    let client = of(&spans, SpanKind::Client)
        .into_iter()
        .find(|s| s.parent_span_id == a.span_id)
        .expect("the request's span under the delivery's");
    assert_eq!(attr(client, "http.request.method").as_deref(), Some("POST"));
    assert_eq!(attr(client, "url.full"), Some(app.url()));
    assert_eq!(
        attr(client, "http.response.status_code").as_deref(),
        Some("200")
    );
    let req = app
        .requests()
        .into_iter()
        .find(|r| r.body[..] == b"publishes"[..])
        .unwrap();
    let tp = req.header("traceparent").unwrap().to_string();
    assert_eq!(part(&tp, 1), TRACE);
    assert_eq!(
        part(&tp, 2),
        hex(&client.span_id),
        "the app's parent is the request span"
    );
    assert!(sampled(&tp));
    assert_eq!(
        req.header("tracestate"),
        Some("vendor=opaque"),
        "tracestate unchanged"
    );
    assert_eq!(req.header("baggage"), Some("user=42"), "baggage unchanged");

    // The output: a PRODUCER span under the delivery's, its context in the message.
    let producer = of(&spans, SpanKind::Producer);
    assert_eq!(producer.len(), 1);
    assert_eq!(producer[0].name, "publish out.1");
    assert_eq!(producer[0].parent_span_id, a.span_id);
    let carried = stored_header(&env.js, &out, 1, "traceparent")
        .await
        .unwrap();
    assert_eq!(
        part(&carried, 1),
        TRACE,
        "the next consumer continues the trace"
    );
    assert_eq!(part(&carried, 2), hex(&producer[0].span_id));
    assert_eq!(
        stored_header(&env.js, &out, 1, "baggage").await.as_deref(),
        Some("user=42")
    );

    // in.b had no context: a root of its own trace (sample_ratio 1.0).
    let b = consumers.iter().find(|s| s.name == "process in.b").unwrap();
    assert!(b.parent_span_id.is_empty(), "a root");
    assert_ne!(hex(&b.trace_id), TRACE);

    // The export: resource and the collector's headers.
    let export = &collector.exports()[0];
    assert_eq!(
        export.resource.get("service.name").map(String::as_str),
        Some("orders-relay")
    );
    assert_eq!(
        export
            .resource
            .get("service.instance.id")
            .map(String::as_str),
        Some("relay-7")
    );
    assert_eq!(
        export.headers.get("x-tenant").map(String::as_str),
        Some("t1")
    );
    assert_eq!(
        export.headers.get("authorization").map(String::as_str),
        Some("from-a-file")
    );
    assert_eq!(
        export.headers.get("content-type").map(String::as_str),
        Some("application/x-protobuf")
    );

    // The age of each message, when received and when settled.
    for stage in ["received", "settled"] {
        let count = format!("jetrelay_message_age_seconds_count{{stage=\"{stage}\"}}");
        assert_eq!(relay.metric(&count).await, 2.0, "{count}");
    }
    relay.stop().await.unwrap();
}

#[tokio::test]
async fn a_retried_message_ends_its_span_with_the_retry_and_its_delay_and_goes_on_in_the_same_trace()
 {
    let collector = FakeCollector::start(Wire::Grpc).await;
    let app = MockApp::start(|_, before| Reply::status(if before == 0 { 503 } else { 200 })).await;
    let env = Env::start(&["in.>"]).await;
    let extra = format!("[delivery]\nretry_initial_ms = 100\n{}", collector.otel(""));
    let relay = env.relay(&app, &extra).await;
    publish_with(&env.js, "in.a", "x", &[("traceparent", PARENT)]).await;
    eventually("acked", T, || {
        consumer_drained(&env.js, &env.stream, &env.durable)
    })
    .await;
    let spans = spans_until(&collector, "two deliveries", |s| {
        of(s, SpanKind::Consumer).len() >= 2
    })
    .await;
    let consumers = of(&spans, SpanKind::Consumer);
    let (first, second) = (consumers[0], consumers[1]);
    assert_eq!(attr(first, "jetrelay.outcome").as_deref(), Some("retry"));
    assert_eq!(
        attr(first, "jetrelay.retry_delay_ms").as_deref(),
        Some("100")
    );
    assert_eq!(
        attr(first, "messaging.message.delivery_count").as_deref(),
        Some("1")
    );
    assert_eq!(attr(second, "jetrelay.outcome").as_deref(), Some("ack"));
    assert_eq!(
        attr(second, "messaging.message.delivery_count").as_deref(),
        Some("2")
    );
    for c in [first, second] {
        assert_eq!(hex(&c.trace_id), TRACE);
        assert_eq!(hex(&c.parent_span_id), part(PARENT, 2));
    }
    let failed = of(&spans, SpanKind::Client)
        .into_iter()
        .find(|s| s.parent_span_id == first.span_id)
        .unwrap();
    assert_eq!(
        attr(failed, "http.response.status_code").as_deref(),
        Some("503")
    );
    let status = failed.status.as_ref().expect("an error status");
    assert_eq!(status.code, 2, "STATUS_CODE_ERROR");
    relay.stop().await.unwrap();
}

#[tokio::test]
async fn an_unsampled_parent_reaches_the_app_unsampled_and_exports_nothing() {
    let collector = FakeCollector::start(Wire::HttpProtobuf).await;
    let app = MockApp::ok().await;
    let env = Env::start(&["in.>"]).await;
    // Roots are never sampled here: only the marker message's trace is exported.
    let relay = env.relay(&app, &collector.otel("sample_ratio = 0.0")).await;
    let unsampled = PARENT.replace("-01", "-00");
    publish_with(
        &env.js,
        "in.a",
        "unsampled",
        &[("traceparent", unsampled.as_str())],
    )
    .await;
    publish_with(&env.js, "in.a", "root", &[]).await;
    let marker = "00-11111111111111111111111111111111-2222222222222222-01";
    publish_with(&env.js, "in.a", "marker", &[("traceparent", marker)]).await;
    eventually("acked", T, || {
        consumer_drained(&env.js, &env.stream, &env.durable)
    })
    .await;
    let spans = spans_until(&collector, "the marker's spans", |s| s.len() >= 2).await;
    assert!(
        spans.iter().all(|s| hex(&s.trace_id) == part(marker, 1)),
        "only the sampled trace is exported: {spans:#?}"
    );
    let reqs = app.requests();
    let to = |body: &[u8]| {
        reqs.iter()
            .find(|r| r.body[..] == body[..])
            .and_then(|r| r.header("traceparent"))
            .unwrap()
            .to_string()
    };
    let u = to(b"unsampled");
    assert_eq!(part(&u, 1), TRACE, "the trace goes on");
    assert!(!sampled(&u), "unsampled: {u}");
    let r = to(b"root");
    assert!(!sampled(&r), "a root not sampled by the ratio: {r}");
    relay.stop().await.unwrap();
}

#[tokio::test]
async fn a_batch_request_is_one_client_span_linked_to_each_messages_delivery() {
    let collector = FakeCollector::start(Wire::Grpc).await;
    let app = MockApp::ok().await;
    let env = Env::start(&["in.>"]).await;
    let parents: Vec<String> = (1..=3)
        .map(|i| format!("00-{i:032x}-{i:016x}-01"))
        .collect();
    for p in &parents {
        publish_with(&env.js, "in.a", "x", &[("traceparent", p.as_str())]).await;
    }
    let extra = format!(
        "[delivery]\nbatch_size = 3\nbatch_wait_ms = 500\n{}",
        collector.otel("")
    );
    let relay = env.relay(&app, &extra).await;
    eventually("acked", T, || {
        consumer_drained(&env.js, &env.stream, &env.durable)
    })
    .await;
    let spans = spans_until(&collector, "3 deliveries and a request", |s| s.len() >= 4).await;
    let consumers = of(&spans, SpanKind::Consumer);
    let clients = of(&spans, SpanKind::Client);
    assert_eq!((consumers.len(), clients.len()), (3, 1), "{spans:#?}");
    let request = clients[0];
    let mut linked: Vec<String> = request.links.iter().map(|l| hex(&l.span_id)).collect();
    let mut delivered: Vec<String> = consumers.iter().map(|c| hex(&c.span_id)).collect();
    linked.sort();
    delivered.sort();
    assert_eq!(linked, delivered, "a link to each message's delivery span");
    assert_eq!(
        attr(request, "messaging.batch.message_count").as_deref(),
        Some("3")
    );
    assert_eq!(
        attr(request, "http.request.method").as_deref(),
        Some("POST")
    );
    // The request carries the batch span's context; each item its delivery's.
    let req = &app.requests()[0];
    assert_eq!(
        part(req.header("traceparent").unwrap(), 2),
        hex(&request.span_id)
    );
    let doc: Value = serde_json::from_slice(&req.body).unwrap();
    for item in doc["messages"].as_array().unwrap() {
        let tp = item["headers"]["traceparent"][0].as_str().unwrap();
        let c = consumers
            .iter()
            .find(|c| hex(&c.span_id) == part(tp, 2))
            .unwrap();
        assert_eq!(
            hex(&c.trace_id),
            part(tp, 1),
            "the item continues its own trace"
        );
    }
    relay.stop().await.unwrap();
}

#[tokio::test]
async fn the_publish_endpoint_makes_a_producer_span_under_the_callers_context() {
    let collector = FakeCollector::start(Wire::HttpProtobuf).await;
    let app = MockApp::ok().await;
    let env = Env::start(&["in.>"]).await;
    let out = unique("OUT");
    atomic_stream(&env.js, &out, &["out.>"], true).await;
    let extra = format!(
        "[publish]\nallowed_subjects = [\"out.>\"]\nlisten = \"127.0.0.1:0\"\n{}",
        collector.otel("")
    );
    let relay = env.relay(&app, &extra).await;
    let resp = http()
        .post(format!(
            "http://{}/v1/publish/out.x",
            relay.publish.unwrap()
        ))
        .header("Content-Type", "application/octet-stream")
        .header("traceparent", PARENT)
        .header("baggage", "user=42")
        .body("hello")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    // Without a traceparent: no span, nothing carried.
    let resp = http()
        .post(format!(
            "http://{}/v1/publish/out.y",
            relay.publish.unwrap()
        ))
        .header("Content-Type", "application/octet-stream")
        .body("untraced")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let spans = spans_until(&collector, "the producer span", |s| !s.is_empty()).await;
    assert_eq!(spans.len(), 1, "{spans:#?}");
    let p = &spans[0];
    assert_eq!(p.kind, SpanKind::Producer as i32);
    assert_eq!(p.name, "publish out.x");
    assert_eq!(hex(&p.trace_id), TRACE);
    assert_eq!(hex(&p.parent_span_id), part(PARENT, 2));
    let carried = stored_header(&env.js, &out, 1, "traceparent")
        .await
        .unwrap();
    assert_eq!(part(&carried, 1), TRACE);
    assert_eq!(part(&carried, 2), hex(&p.span_id));
    assert_eq!(
        stored_header(&env.js, &out, 1, "baggage").await.as_deref(),
        Some("user=42")
    );
    assert_eq!(stored_header(&env.js, &out, 2, "traceparent").await, None);
    relay.stop().await.unwrap();
}

#[tokio::test]
async fn with_export_off_trace_headers_pass_through_unchanged() {
    let app = MockApp::ok().await;
    let env = Env::start(&["in.>"]).await;
    let relay = env.relay(&app, "").await;
    publish_with(
        &env.js,
        "in.a",
        "x",
        &[
            ("traceparent", PARENT),
            ("tracestate", "a=1"),
            ("baggage", "b=2"),
        ],
    )
    .await;
    eventually("acked", T, || {
        consumer_drained(&env.js, &env.stream, &env.durable)
    })
    .await;
    let req = &app.requests()[0];
    assert_eq!(req.header("traceparent"), Some(PARENT));
    assert_eq!(req.header("tracestate"), Some("a=1"));
    assert_eq!(req.header("baggage"), Some("b=2"));
    relay.stop().await.unwrap();
}

#[tokio::test]
async fn a_collector_that_refuses_stalls_or_goes_down_mid_stream_never_holds_delivery_up() {
    for how in ["refuse", "stall", "down"] {
        let collector = FakeCollector::start(Wire::HttpProtobuf).await;
        let app = MockApp::ok().await;
        let env = Env::start(&["in.>"]).await;
        let relay = env.relay(&app, &collector.otel("")).await;
        publish(&env.js, "in.a", 20).await;
        spans_until(&collector, "the first spans", |s| s.len() >= 40).await;
        match how {
            "refuse" => collector.refuse(),
            "stall" => collector.stall(),
            _ => collector.down(),
        }
        publish(&env.js, "in.a", 500).await;
        eventually(&format!("{how}: all 520 acked"), T, || {
            consumer_drained(&env.js, &env.stream, &env.durable)
        })
        .await;
        assert_eq!(app.arrivals(), 520);
        if how != "stall" {
            // A stalled export is dropped only at its timeout (10 s): the unit tests
            // count that one in virtual time.
            eventually(&format!("{how}: the lost spans counted"), T, || async {
                relay.metric("jetrelay_otel_spans_dropped_total").await >= 1000.0
            })
            .await;
        }
        let stopped = tokio::time::Instant::now();
        relay.stop().await.unwrap();
        assert!(
            stopped.elapsed() < Duration::from_secs(20),
            "{how}: the stop is bounded by the grace, not by the collector"
        );
    }
}

#[tokio::test]
async fn a_dead_letter_carries_the_context_of_the_delivery_that_ended_it() {
    let collector = FakeCollector::start(Wire::HttpProtobuf).await;
    let app = MockApp::start(|_, _| Reply::status(400)).await;
    let env = Env::start(&["in.>"]).await;
    let dlq = unique("DLQ");
    env.js
        .create_stream(stream::Config {
            name: dlq.clone(),
            subjects: vec![format!("{dlq}.letters")],
            ..Default::default()
        })
        .await
        .unwrap();
    let extra = format!("[dlq]\nsubject = \"{dlq}.letters\"\n{}", collector.otel(""));
    let relay = env.relay(&app, &extra).await;
    publish_with(
        &env.js,
        "in.a",
        "bad",
        &[("traceparent", PARENT), ("baggage", "user=42")],
    )
    .await;
    eventually("dead-lettered", T, || {
        consumer_drained(&env.js, &env.stream, &env.durable)
    })
    .await;
    let spans = spans_until(&collector, "the delivery", |s| {
        !of(s, SpanKind::Consumer).is_empty()
    })
    .await;
    let c = of(&spans, SpanKind::Consumer)[0];
    assert_eq!(attr(c, "jetrelay.outcome").as_deref(), Some("dlq"));
    assert_eq!(
        c.status.as_ref().map(|s| s.code),
        Some(2),
        "an error status"
    );
    let tp = stored_header(&env.js, &dlq, 1, "traceparent")
        .await
        .expect("a traceparent");
    assert_eq!(part(&tp, 1), TRACE);
    assert_eq!(
        part(&tp, 2),
        hex(&c.span_id),
        "the letter hangs below the delivery"
    );
    assert_eq!(
        stored_header(&env.js, &dlq, 1, "baggage").await.as_deref(),
        Some("user=42")
    );
    relay.stop().await.unwrap();
}

#[tokio::test]
async fn oversized_and_forged_trace_headers_never_reach_the_app_nor_fail_the_message() {
    // 61,589 bytes each, as the audit sent them.
    let big_state = format!("{}k=v", "k=v,".repeat(15_396));
    let big_baggage = format!("k={}", "v".repeat(61_587));
    assert_eq!((big_state.len(), big_baggage.len()), (61_587, 61_589));
    for export in [false, true] {
        let collector = FakeCollector::start(Wire::HttpProtobuf).await;
        // An app that refuses what it takes for an attack: any baggage (it trusts
        // none under pass_headers), or a tracestate over the W3C bound.
        let app = MockApp::start(|r, _| {
            let refused = r.header("baggage").is_some()
                || r.header("tracestate").is_some_and(|s| s.len() > 512);
            Reply::status(if refused { 400 } else { 200 })
        })
        .await;
        let env = Env::start(&["in.>"]).await;
        let otel = if export {
            collector.otel("")
        } else {
            String::new()
        };
        let extra = format!("[http]\npass_headers = [\"X-Trace\"]\n{otel}");
        let relay = env.relay(&app, &extra).await;
        // One each: the server takes at most 64 KiB of headers per message.
        for (name, value) in [("tracestate", &big_state), ("baggage", &big_baggage)] {
            publish_with(
                &env.js,
                "in.a",
                "big",
                &[("traceparent", PARENT), (name, value), ("X-Trace", "1")],
            )
            .await;
        }
        publish_with(
            &env.js,
            "in.a",
            "forged",
            &[
                ("traceparent", PARENT),
                ("baggage", "tenant=admin,role=root"),
                ("X-Trace", "2"),
            ],
        )
        .await;
        eventually("all acked", T, || {
            consumer_drained(&env.js, &env.stream, &env.durable)
        })
        .await;
        let requests = app.requests();
        assert_eq!(requests.len(), 3, "export {export}: one request each");
        for r in &requests {
            assert_eq!(r.status, 200, "export {export}");
            assert_eq!(r.header("baggage"), None, "export {export}");
            assert!(r.header("X-Trace").is_some(), "export {export}");
            assert!(r.header("traceparent").is_some(), "export {export}");
            if !export {
                assert_eq!(r.header("traceparent"), Some(PARENT));
                assert_eq!(r.header("tracestate"), None);
            }
        }
        let relay_ref = &relay;
        eventually("three acks counted", T, || async move {
            relay_ref.settled("ack").await == 3.0
        })
        .await;
        assert_eq!(
            relay.settled("term").await,
            0.0,
            "export {export}: nothing terminated"
        );
        for header in ["tracestate", "baggage"] {
            let sample = format!(
                "jetrelay_trace_headers_dropped_total{{header=\"{header}\",reason=\"oversized\"}}"
            );
            assert_eq!(
                relay.metric(&sample).await,
                1.0,
                "export {export}: {sample}"
            );
        }
        relay.stop().await.unwrap();
    }
}

/// A service source's request: a SERVER span under the requester's `traceparent`
/// (named for the subject, with its endpoint and source), a CLIENT child for the POST
/// whose context reaches the app, and the reply's error on the SERVER span.
#[tokio::test]
async fn a_service_request_is_a_server_span_under_the_requesters_context_with_a_client_child() {
    let collector = FakeCollector::start(Wire::HttpProtobuf).await;
    let nats = NatsServer::start().await;
    let (nc, _) = client(&nats).await;
    let app = MockApp::start(|r, _| {
        if r.body.as_ref() == b"missing" {
            Reply::status(404).body("no such order")
        } else {
            Reply::status(200).body("ok")
        }
    })
    .await;
    let svc = unique("svc").to_lowercase();
    let config = format!(
        "[nats]\nservers = \"{}\"\n[http]\nurl = \"{}\"\n[admin]\nlisten = \"127.0.0.1:0\"\n[log]\nlevel = \"warn\"\n{}\n[sources.rpc]\nkind = \"service\"\nservice = \"{svc}\"\nversion = \"1.0.0\"\nqueue_group = \"q\"\nendpoints = [ {{ name = \"create\", subject = \"{svc}.create\", path = \"/messages\" }} ]\n",
        nats.url(),
        app.url(),
        collector.otel("")
    );
    let relay = Relay::ready(
        jetrelay::config::Config::from_figment(figment::Figment::from(
            <figment::providers::Toml as figment::providers::Format>::string(&config),
        ))
        .unwrap(),
    )
    .await;
    for (body, want) in [("o-1", None), ("missing", Some("404"))] {
        let mut h = HeaderMap::new();
        h.insert("traceparent", PARENT);
        let reply = tokio::time::timeout(
            T,
            nc.request_with_headers(format!("{svc}.create"), h, body.to_string().into()),
        )
        .await
        .unwrap()
        .unwrap();
        let code = reply
            .headers
            .as_ref()
            .and_then(|h| h.get("Nats-Service-Error-Code"))
            .map(|v| v.as_str().to_string());
        assert_eq!(code.as_deref(), want, "{body}");
    }
    let spans = spans_until(&collector, "two SERVER spans, two CLIENT", |s| {
        of(s, SpanKind::Server).len() == 2 && of(s, SpanKind::Client).len() == 2
    })
    .await;
    let servers = of(&spans, SpanKind::Server);
    for server in &servers {
        assert_eq!(hex(&server.trace_id), TRACE);
        assert_eq!(hex(&server.parent_span_id), part(PARENT, 2));
        assert_eq!(server.name, format!("process {svc}.create"));
        assert_eq!(attr(server, "jetrelay.endpoint").as_deref(), Some("create"));
        assert_eq!(attr(server, "jetrelay.source").as_deref(), Some("rpc"));
        let clients: Vec<_> = of(&spans, SpanKind::Client)
            .into_iter()
            .filter(|c| c.parent_span_id == server.span_id)
            .collect();
        assert_eq!(clients.len(), 1, "one POST under each request");
        assert_eq!(hex(&clients[0].trace_id), TRACE);
    }
    assert!(
        servers
            .iter()
            .any(|s| attr(s, "error.type").as_deref() == Some("404")),
        "the 404 reply marks its span: {servers:?}"
    );
    // The app saw the CLIENT spans' contexts, in the request's trace.
    for r in app.requests() {
        let tp = r.header("traceparent").unwrap();
        assert_eq!(part(tp, 1), TRACE);
        assert!(
            of(&spans, SpanKind::Client)
                .iter()
                .any(|c| hex(&c.span_id) == part(tp, 2))
        );
    }
    relay.stop().await.unwrap();
}

/// OpenTelemetry's own variables, as an operator injects them into the pod, configure
/// the export of a `jetrelay run` whose config has no endpoint; where `[otel]` sets
/// the same thing it wins.
#[tokio::test]
async fn opentelemetrys_own_variables_configure_the_export_and_otel_wins() {
    let collector = FakeCollector::start(Wire::HttpProtobuf).await;
    let app = MockApp::ok().await;
    let env = Env::start(&["in.>"]).await;
    let config = format!(
        "[nats]\nservers = [\"{}\"]\n[source]\nstream = \"{}\"\nkind = \"durable\"\ndurable = \"{}\"\n\
         [http]\nurl = \"{}\"\n[admin]\nlisten = \"127.0.0.1:0\"\n\
         [otel]\nservice_name = \"from-the-file\"\n",
        env.nats.url(),
        env.stream,
        env.durable,
        app.url()
    );
    let endpoint = format!("http://{}", collector.addr);
    let _d = crate::support::daemon::Daemon::start_with_env(
        &config,
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
            ("OTEL_SERVICE_NAME", "from-the-variable"),
            (
                "OTEL_RESOURCE_ATTRIBUTES",
                "deployment.environment=staging,k8s.pod.name=relay-0",
            ),
            ("OTEL_EXPORTER_OTLP_HEADERS", "x-api-key=a%2Bb%3D"),
            ("OTEL_TRACES_SAMPLER", "parentbased_always_on"),
        ],
    )
    .await;
    publish_with(&env.js, "in.a", "x", &[]).await;
    eventually("a span exported", T, || async {
        !collector.spans().is_empty()
    })
    .await;
    let export = &collector.exports()[0];
    let resource = |k: &str| export.resource.get(k).map(String::as_str);
    assert_eq!(
        resource("service.name"),
        Some("from-the-file"),
        "[otel] wins"
    );
    assert_eq!(resource("deployment.environment"), Some("staging"));
    assert_eq!(resource("k8s.pod.name"), Some("relay-0"));
    assert_eq!(
        export.headers.get("x-api-key").map(String::as_str),
        Some("a+b="),
        "percent-decoded, a + kept"
    );
    // A sampler jetrelay does not have is exit 64, naming the variable.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.toml");
    std::fs::write(&path, &config).unwrap();
    let out = tokio::process::Command::new(crate::support::daemon::BIN)
        .args(["check", "--offline", "--config"])
        .arg(&path)
        .env_remove("JETRELAY_CONFIG")
        .env("OTEL_TRACES_SAMPLER", "jaeger_remote")
        .output()
        .await
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(64), "{err}");
    assert!(
        err.contains("OTEL_TRACES_SAMPLER (otel.sample_ratio): \"jaeger_remote\""),
        "{err}"
    );
}

/// Metrics over OTLP (`OTEL_METRICS_EXPORTER=otlp`, every `OTEL_METRIC_EXPORT_INTERVAL`
/// ms): what `/metrics` shows reaches the collector under OpenTelemetry's messaging
/// names where one exists, `jetrelay.*` otherwise, over gRPC here.
#[tokio::test]
async fn metrics_go_over_otlp_under_the_messaging_names() {
    use opentelemetry_proto::tonic::metrics::v1::metric::Data;
    use opentelemetry_proto::tonic::metrics::v1::number_data_point::Value as Number;
    let collector = FakeCollector::start(Wire::Grpc).await;
    let app = MockApp::ok().await;
    let env = Env::start(&["in.>"]).await;
    let config = format!(
        "[nats]\nservers = [\"{}\"]\n[source]\nstream = \"{}\"\nkind = \"durable\"\ndurable = \"{}\"\n\
         [http]\nurl = \"{}\"\n[admin]\nlisten = \"127.0.0.1:0\"\n{}",
        env.nats.url(),
        env.stream,
        env.durable,
        app.url(),
        collector.otel("sample_ratio = 0.0")
    );
    let _d = crate::support::daemon::Daemon::start_with_env(
        &config,
        &[
            ("OTEL_METRICS_EXPORTER", "otlp"),
            ("OTEL_METRIC_EXPORT_INTERVAL", "1000"),
        ],
    )
    .await;
    publish_with(&env.js, "in.a", "x", &[]).await;
    publish_with(&env.js, "in.b", "y", &[]).await;
    let consumed = || {
        collector
            .exports()
            .iter()
            .flat_map(|e| e.metrics.clone())
            .filter(|m| m.name == "messaging.client.consumed.messages")
            .filter_map(|m| match m.data {
                Some(Data::Sum(s)) => Some(s),
                _ => None,
            })
            .flat_map(|s| s.data_points)
            .filter_map(|p| match p.value {
                Some(Number::AsDouble(v)) => Some(v),
                _ => None,
            })
            .fold(0.0, f64::max)
    };
    eventually("both messages counted over OTLP", T, || async {
        consumed() >= 2.0
    })
    .await;
    let last = collector
        .exports()
        .into_iter()
        .rev()
        .find(|e| !e.metrics.is_empty())
        .unwrap();
    let names: Vec<&str> = last.metrics.iter().map(|m| m.name.as_str()).collect();
    assert!(names.contains(&"messaging.process.duration"), "{names:?}");
    assert!(names.contains(&"jetrelay.messages_settled"), "{names:?}");
    assert!(
        names
            .iter()
            .all(|n| n.starts_with("jetrelay.") || n.starts_with("messaging.")),
        "{names:?}"
    );
    let duration = last
        .metrics
        .iter()
        .find(|m| m.name == "messaging.process.duration")
        .unwrap();
    assert_eq!(duration.unit, "s");
    let Some(Data::Histogram(h)) = &duration.data else {
        panic!("a histogram: {duration:?}");
    };
    let point = &h.data_points[0];
    assert_eq!(point.bucket_counts.len(), point.explicit_bounds.len() + 1);
    assert_eq!(point.bucket_counts.iter().sum::<u64>(), point.count);
    assert_eq!(
        last.resource.get("service.name").map(String::as_str),
        Some("jetrelay")
    );
}
