//! A bounded feed from the worker threads to the control thread: a
//! lock-free crossbeam channel of fixed capacity. A sender never waits:
//! when the feed is full the message is dropped and counted
//! ([`Feed::dropped`], `doic_feed_dropped_total{feed}`), and the
//! control thread drains the feed on its next tick. Each feed says what a
//! dropped message costs where it is declared.

use std::sync::atomic::{AtomicU64, Ordering};

use crossbeam_channel::{Receiver, Sender, TrySendError, bounded};

/// A bounded many-producer feed read by one consumer (the control thread).
#[derive(Debug)]
pub struct Feed<T> {
    name: &'static str,
    tx: Sender<T>,
    rx: Receiver<T>,
    dropped: AtomicU64,
}

impl<T> Feed<T> {
    /// A feed `name` (the metric label) holding at most `capacity` messages.
    #[must_use]
    pub fn new(name: &'static str, capacity: usize) -> Self {
        let (tx, rx) = bounded(capacity.max(1));
        Self {
            name,
            tx,
            rx,
            dropped: AtomicU64::new(0),
        }
    }

    /// Offers `msg` without waiting; false (and counted) when the feed is
    /// full.
    pub fn send(&self, msg: T) -> bool {
        match self.tx.try_send(msg) {
            Ok(()) => true,
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                self.dropped.fetch_add(1, Ordering::Relaxed);
                false
            }
        }
    }

    /// Takes what is queued now, in order (the consumer's side).
    pub fn drain(&self) -> impl Iterator<Item = T> + '_ {
        self.rx.try_iter()
    }

    /// Messages dropped because the feed was full.
    #[must_use]
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// The feed's name, as the metric labels it.
    #[must_use]
    pub fn name(&self) -> &'static str {
        self.name
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_feed_drops_and_counts_and_keeps_the_order_of_what_it_took() {
        let f = Feed::new("t", 3);
        for i in 0..5 {
            assert_eq!(f.send(i), i < 3);
        }
        assert_eq!(f.dropped(), 2);
        assert_eq!(f.drain().collect::<Vec<_>>(), [0, 1, 2]);
        assert!(f.send(9), "room again once drained");
        assert_eq!(f.drain().collect::<Vec<_>>(), [9]);
        assert_eq!(f.dropped(), 2);
    }
}
