//! The service benchmark's reference: the bare minimum of a NATS responder in front
//! of an HTTP app. One queue subscription; each request POSTed to the app (at most
//! `<in-flight>` at once), the answer's body and `Content-Type` sent back as the
//! reply; nothing else (no health, no limits, no error headers, no metrics).
//!
//!     bare_service <nats-url> <subject> <http-url> <in-flight>

use std::sync::Arc;

use futures::StreamExt;
use tokio::sync::Semaphore;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let args: Vec<String> = std::env::args().collect();
    let (url, subject, target) = (&args[1], args[2].clone(), args[3].clone());
    let in_flight: usize = args[4].parse()?;
    let nc = async_nats::connect(url).await?;
    let mut sub = nc.queue_subscribe(subject, "q".to_string()).await?;
    nc.flush().await?;
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(in_flight)
        .build()?;
    let slots = Arc::new(Semaphore::new(in_flight));
    println!("ready");
    while let Some(msg) = sub.next().await {
        let Some(reply) = msg.reply.clone() else {
            continue;
        };
        let permit = slots.clone().acquire_owned().await?;
        let (http, target, nc) = (http.clone(), target.clone(), nc.clone());
        tokio::spawn(async move {
            if let Ok(resp) = http.post(&target).body(msg.payload).send().await {
                let mut headers = async_nats::HeaderMap::new();
                if let Some(t) = resp
                    .headers()
                    .get("content-type")
                    .and_then(|v| v.to_str().ok())
                {
                    headers.insert("Content-Type", t);
                }
                if let Ok(body) = resp.bytes().await {
                    let _ = nc.publish_with_headers(reply, headers, body).await;
                }
            }
            drop(permit);
        });
    }
    Ok(())
}
