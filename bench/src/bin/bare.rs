//! Contender (a): the bare minimum. One durable pull consumer; fetch up to the free
//! capacity, POST each message, ack after a 2xx; nothing else. The reference limit.
//!
//!     bare <nats-url> <stream> <durable> <http-url> <in-flight> [<partitions>]
//!
//! With `<http-url>` `none`, each message is acked at once, without a request: the
//! bare pull → ack loop (what a route that settles without a request is held to).
//!
//! With `<partitions>`, the consumer filters on `0.>` … `<partitions-1>.>` like a
//! group member owning every partition (but not pinned): the server-side cost of
//! the group's consumer shape without jetrelay.

use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::{self, consumer::pull};
use futures::StreamExt;
use tokio::sync::Semaphore;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let args: Vec<String> = std::env::args().collect();
    let (url, stream, durable, target) = (&args[1], &args[2], &args[3], args[4].clone());
    let in_flight: usize = args[5].parse()?;
    let filter_subjects: Vec<String> = match args.get(6) {
        Some(n) => (0..n.parse::<u32>()?).map(|p| format!("{p}.>")).collect(),
        None => Vec::new(),
    };
    let js = jetstream::new(async_nats::connect(url).await?);
    let consumer = js
        .get_stream(stream)
        .await?
        .get_or_create_consumer(
            durable,
            pull::Config {
                durable_name: Some(durable.clone()),
                max_ack_pending: in_flight as i64 * 4,
                filter_subjects,
                ..Default::default()
            },
        )
        .await?;
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(in_flight)
        .build()?;
    let slots = Arc::new(Semaphore::new(in_flight));
    println!("ready");
    loop {
        let free = slots.available_permits().max(1);
        let mut batch = consumer
            .fetch()
            .max_messages(free)
            .expires(Duration::from_secs(1))
            .messages()
            .await?;
        while let Some(msg) = batch.next().await {
            let Ok(msg) = msg else { continue };
            let permit = slots.clone().acquire_owned().await?;
            let (http, target) = (http.clone(), target.clone());
            tokio::spawn(async move {
                let ok = target == "none"
                    || http
                        .post(&target)
                        .body(msg.payload.clone())
                        .send()
                        .await
                        .is_ok_and(|r| r.status().is_success());
                if ok {
                    let _ = msg.ack().await;
                }
                drop(permit);
            });
        }
    }
}
