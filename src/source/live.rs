//! What a reload may change of a running source, by kind: the dispatcher's
//! [`Live`] settings for a stream, the service runner's [`Served`] for a service.
//! Each source has one channel of it (boot and reload send on it alike); the
//! runner of its kind follows its own part.

use std::sync::Arc;

use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::dispatch::Live;
use crate::http::forward::Forwarder;
use crate::service::Served;

/// A source's live settings.
#[derive(Debug, Clone)]
pub enum SourceLive {
    /// A stream source's dispatcher's.
    Stream(Arc<Live<Forwarder>>),
    /// A service source's runner's.
    Service(Arc<Served<Forwarder>>),
}

impl SourceLive {
    /// A stream source's.
    pub fn stream(&self) -> Option<Arc<Live<Forwarder>>> {
        match self {
            SourceLive::Stream(l) => Some(Arc::clone(l)),
            SourceLive::Service(_) => None,
        }
    }

    /// A service source's.
    pub fn service(&self) -> Option<Arc<Served<Forwarder>>> {
        match self {
            SourceLive::Service(s) => Some(Arc::clone(s)),
            SourceLive::Stream(_) => None,
        }
    }
}

/// The task that hands on one part of a source's live settings; it ends when
/// dropped.
pub(super) struct Following(JoinHandle<()>);

impl Drop for Following {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// `part` of what `live` carries, now and after every reload; `None` when `live`
/// is not of that kind (a source's kind never changes while it runs: a reload that
/// changes it is refused whole).
pub(super) fn follow<T: Send + Sync + 'static>(
    live: &watch::Receiver<SourceLive>,
    part: fn(&SourceLive) -> Option<Arc<T>>,
) -> Option<(watch::Receiver<Arc<T>>, Following)> {
    let mut live = live.clone();
    let now = part(&live.borrow_and_update())?;
    let (tx, rx) = watch::channel(now);
    let task = tokio::spawn(async move {
        while live.changed().await.is_ok() {
            let Some(now) = part(&live.borrow_and_update()) else {
                continue;
            };
            if tx.send(now).is_err() {
                return;
            }
        }
    });
    Some((rx, Following(task)))
}

#[cfg(test)]
mod tests {

    use super::*;
    use crate::pace::PaceSettings;
    use crate::policy::Policy;

    fn served() -> SourceLive {
        SourceLive::Service(Arc::new(Served {
            endpoints: Vec::new(),
            pace: PaceSettings {
                adaptive: false,
                min_in_flight: 1,
                max_in_flight: 1,
                rate_per_s: 0,
                burst: 1,
            },
            app_healthy: watch::channel(crate::seam::Health::Healthy).1,
            policy: Policy::for_tests(),
        }))
    }

    #[tokio::test]
    async fn a_part_follows_every_reload_and_another_kind_is_none() {
        let (tx, rx) = watch::channel(served());
        assert!(follow(&rx, SourceLive::stream).is_none());
        let (mut part, following) = follow(&rx, SourceLive::service).unwrap();
        let next = served();
        tx.send_replace(next.clone());
        part.changed().await.unwrap();
        assert!(Arc::ptr_eq(&part.borrow(), &next.service().unwrap()));
        // Dropped, it stops following: the part's sender is gone.
        drop(following);
        tokio::task::yield_now().await;
        assert!(part.changed().await.is_err());
    }
}
