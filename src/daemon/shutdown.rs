//! OS signals: SIGTERM and SIGINT are one stream of [`Signals`] (the first starts the
//! shutdown, a second one ends the process at once), SIGHUP another (a reload: it
//! never ends the process); `crate::seam::time::Deadline` bounds every step of the
//! shutdown that follows. Nothing else touches signals.

/// SIGTERM and SIGINT, listened to from the start so that none is missed between
/// the first and the second.
#[derive(Debug)]
pub struct Signals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
}

/// SIGHUP: a reload. Listened to from the start, so that it never takes the default
/// action (ending the process).
#[derive(Debug)]
pub struct Hangup(tokio::signal::unix::Signal);

impl Hangup {
    /// Installs the handler.
    ///
    /// # Errors
    /// When the signal handler cannot be installed.
    pub fn install() -> std::io::Result<Hangup> {
        use tokio::signal::unix::{SignalKind, signal};
        Ok(Hangup(signal(SignalKind::hangup())?))
    }

    /// Completes on the next SIGHUP (cancel-safe).
    pub async fn next(&mut self) {
        self.0.recv().await;
    }
}

impl Signals {
    /// Installs the handlers.
    ///
    /// # Errors
    /// When the signal handlers cannot be installed.
    pub fn install() -> std::io::Result<Signals> {
        use tokio::signal::unix::{SignalKind, signal};
        Ok(Signals {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
        })
    }

    /// Completes on the next SIGTERM or SIGINT, with its name.
    pub async fn next(&mut self) -> &'static str {
        // Either branch completing ends the wait; the other is dropped, which is fine
        // (`recv` is cancel-safe).
        tokio::select! {
            _ = self.term.recv() => "SIGTERM",
            _ = self.int.recv() => "SIGINT",
        }
    }
}
