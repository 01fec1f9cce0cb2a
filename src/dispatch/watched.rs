//! A `watch` the dispatch loop follows: each change once, and once its sender is gone
//! (a source without a health URL never sends), never again, instead of a flag beside
//! the receiver that every `select!` arm must check.

use tokio::sync::watch;

/// A receiver whose [`Watched::next`] waits for the next value, forever once the
/// sender is gone.
#[derive(Debug)]
pub(super) struct Watched<T> {
    rx: watch::Receiver<T>,
    open: bool,
}

impl<T: Clone> Watched<T> {
    /// Follows `rx` from its current value, which is returned (and counts as seen).
    pub(super) fn new(mut rx: watch::Receiver<T>) -> (Watched<T>, T) {
        let now = rx.borrow_and_update().clone();
        (Watched { rx, open: true }, now)
    }

    /// The next value sent; pending forever once the sender is gone. Cancel-safe (a
    /// `select!` arm that loses sees the change next turn).
    pub(super) async fn next(&mut self) -> T {
        if self.open && self.rx.changed().await.is_ok() {
            return self.rx.borrow_and_update().clone();
        }
        self.open = false;
        std::future::pending().await
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// Nothing comes within a minute.
    async fn quiet(w: &mut Watched<i32>) -> bool {
        tokio::time::timeout(Duration::from_secs(60), w.next())
            .await
            .is_err()
    }

    #[tokio::test(start_paused = true)]
    async fn each_change_once_then_nothing_once_the_sender_is_gone() {
        let (tx, rx) = watch::channel(1);
        let (mut w, now) = Watched::new(rx);
        assert_eq!(now, 1);
        assert!(quiet(&mut w).await, "the current value counts as seen");
        tx.send(2).unwrap();
        tx.send(3).unwrap();
        assert_eq!(w.next().await, 3, "the latest value");
        assert!(quiet(&mut w).await);
        drop(tx);
        assert!(quiet(&mut w).await, "a closed watch never fires");
        assert!(!w.open);
    }
}
