//! What the sources share of the app: one pooled client per distinct client settings
//! (TLS, proxy, credentials — in practice one per app origin), its pool the sum of
//! the sharing sources' `max_in_flight`; one health probe per distinct client and
//! health URL; and each source's forwarder (its target, through its client). A
//! reload builds them again from the new settings, keeping every client and probe
//! whose settings did not change (so that its connections and its verdict stay).

use tokio::sync::watch;

use crate::http::app::{AppClient, ClientSettings};
use crate::http::client::ClientError;
use crate::http::forward::Forwarder;
use crate::http::probe::HealthProbe;
use crate::seam::Health;
use crate::source::settings::SourceSettings;

/// One client, and the settings it was built from (its pool included).
#[derive(Debug, Clone)]
struct Client {
    settings: ClientSettings,
    client: AppClient,
}

/// One health probe: of which client, which URL and timing, and its verdicts.
#[derive(Debug, Clone)]
struct Probe {
    client: ClientSettings,
    probe: Option<HealthProbe>,
    health: watch::Receiver<Health>,
}

/// The clients and probes in use.
#[derive(Debug, Clone, Default)]
pub(super) struct Apps {
    clients: Vec<Client>,
    probes: Vec<Probe>,
}

/// What one source sends through, and whether it is what it had before.
#[derive(Debug, Clone)]
pub(super) struct SourceApp {
    /// Its client (its routes' and endpoints' targets are sent through it too).
    pub(super) client: AppClient,
    /// Its target through its client.
    pub(super) forwarder: Forwarder,
    /// Whether its app is healthy.
    pub(super) app_healthy: watch::Receiver<Health>,
    /// A client or probe was built anew for it (a reload must hand it on).
    pub(super) rebuilt: bool,
}

/// The client settings sources share a client by: everything but the pool.
fn shared_key(c: &ClientSettings) -> ClientSettings {
    ClientSettings {
        pool: 0,
        ..c.clone()
    }
}

impl Apps {
    /// The clients, probes and forwarders for `sources`, reusing what `previous`
    /// has built from the same settings.
    ///
    /// # Errors
    /// [`ClientError`] when a client or a target cannot be built.
    pub(super) fn build(
        sources: &[SourceSettings],
        previous: &Apps,
    ) -> Result<(Apps, Vec<SourceApp>), ClientError> {
        let mut apps = Apps::default();
        // Each distinct client, its pool the sum of its sources' in-flight limits;
        // `of[i]`: source i's.
        let mut wanted: Vec<ClientSettings> = Vec::new();
        let mut of = Vec::with_capacity(sources.len());
        for s in sources {
            let key = shared_key(&s.client);
            match wanted.iter().position(|w| shared_key(w) == key) {
                Some(at) => {
                    wanted[at].pool += s.max_in_flight;
                    of.push(at);
                }
                None => {
                    of.push(wanted.len());
                    wanted.push(ClientSettings {
                        pool: s.max_in_flight,
                        ..key
                    });
                }
            }
        }
        let mut rebuilt = Vec::with_capacity(wanted.len());
        for settings in wanted {
            let kept = previous.clients.iter().find(|c| c.settings == settings);
            rebuilt.push(kept.is_none());
            let client = match kept {
                Some(c) => c.client.clone(),
                None => {
                    let client = AppClient::new(&settings)?;
                    // An OAuth2 token is fetched at start (one task per client built).
                    if settings.oauth2.is_some() {
                        let warm = client.clone();
                        tokio::spawn(async move { warm.prefetch_token().await });
                    }
                    client
                }
            };
            apps.clients.push(Client { settings, client });
        }
        let mut out = Vec::with_capacity(sources.len());
        for (s, at) in sources.iter().zip(of) {
            let client = apps.clients[at].client.clone();
            let key = shared_key(&s.client);
            let (health, probe_rebuilt) = apps.probe(&client, &key, s, previous, rebuilt[at]);
            out.push(SourceApp {
                forwarder: Forwarder::new(&client, &s.target)?,
                client,
                app_healthy: health,
                rebuilt: rebuilt[at] || probe_rebuilt,
            });
        }
        Ok((apps, out))
    }

    /// The health watch of `source`'s client and health URL: one already made for
    /// them (now, or before when its client was kept), else a new probe seeded with
    /// what the previous one of that URL said. Returns whether it is new.
    fn probe(
        &mut self,
        client: &AppClient,
        key: &ClientSettings,
        source: &SourceSettings,
        previous: &Apps,
        client_rebuilt: bool,
    ) -> (watch::Receiver<Health>, bool) {
        let same = |p: &&Probe| p.client == *key && p.probe == source.health;
        if let Some(p) = self.probes.iter().find(same) {
            return (p.health.clone(), false);
        }
        if !client_rebuilt && let Some(p) = previous.probes.iter().find(same) {
            self.probes.push(p.clone());
            return (p.health.clone(), false);
        }
        let seed = previous
            .probes
            .iter()
            .find(|p| p.probe.is_some() && p.probe == source.health)
            .map(|p| *p.health.borrow());
        let health = crate::http::probe::watch(client.clone(), source.health.clone(), seed);
        self.probes.push(Probe {
            client: key.clone(),
            probe: source.health.clone(),
            health: health.clone(),
        });
        (health, true)
    }
}
