//! Kernel telemetry as the control side of the agent sees it: what the
//! kernel program measured at the last tick (per-peer counters for
//! `/metrics`, and arrival rates for overload control), and the feed of
//! connection events the connections send for it. The counters measure the
//! load offered to the agent per peer, before any userspace work (RFC 7068
//! §3.1: the load a node receives; RFC 8582 §5: per-peer rates), over RFC
//! 6733 §2.1 TCP transport. The program itself, its `[ebpf]` section and
//! its reads are `crate::ebpf`'s.
//!
//! The seam to the overload logic is [`KernelLoad`]: the control thread
//! writes it once per tick ([`Kernel::publish`]) and the DOIC control logic
//! reads it ([`Kernel::load`]): per-peer arrival rates of Diameter
//! requests, measured in the kernel.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Instant;

use crate::ebpf::live::{ConnEvent, Reading};
use crate::ebpf::{Direction, GlobalCounters, PeerCounters, PeerRate};
use crate::feed::Feed;

/// Connection events the feed holds between two ticks (a tick is 1 s).
/// When it is full an event is dropped and counted: a closed peer's
/// kernel entries then stay until the peer's address closes again, or a
/// redialled address loses its counters at the grace's end.
pub const EVENT_FEED_CAPACITY: usize = 16 * 1024;

/// What the kernel measured over the last tick: the seam between the
/// control thread (which writes it) and the overload control logic (which
/// reads it). Empty when the program is not attached.
#[derive(Clone, Debug, Default)]
pub struct KernelLoad {
    /// When the counters behind these rates were read.
    pub at: Option<Instant>,
    /// Per-peer rates over the last tick, both directions, sorted by peer.
    pub rates: Vec<PeerRate>,
}

impl KernelLoad {
    /// Diameter requests per second received from `peer` (the remote
    /// address of a connection, as `TcpStream::peer_addr` gives it), or
    /// `None` when the kernel saw nothing from it in the last tick's window,
    /// or could not count its requests exactly in that window (a segment
    /// out of sequence, a flow state lost, ...: [`PeerRate::exact`]); the
    /// caller then falls back to its own count for that peer.
    #[must_use]
    pub fn arrival_rate(&self, peer: SocketAddr) -> Option<f64> {
        self.rates
            .iter()
            .find(|r| r.peer == peer && r.direction == Direction::FromPeer)
            .filter(|r| r.exact)
            .map(|r| r.requests)
    }

    /// Requests per second received, per peer address.
    pub fn arrival_rates(&self) -> impl Iterator<Item = (SocketAddr, f64)> + '_ {
        self.rates
            .iter()
            .filter(|r| r.direction == Direction::FromPeer)
            .map(|r| (r.peer, r.requests))
    }

    /// Requests per second received from all peers together.
    #[must_use]
    pub fn total_arrival_rate(&self) -> f64 {
        self.arrival_rates().map(|(_, r)| r).sum()
    }
}

/// The last read of the kernel counters, for `/metrics`.
#[derive(Clone, Debug, Default)]
pub struct View {
    /// Per-peer counters.
    pub peers: Vec<PeerCounters>,
    /// The program's global counters.
    pub global: Option<GlobalCounters>,
}

/// Kernel telemetry as the running agent publishes it: whether the program
/// counts, the last counters read and the rates derived from them, and the
/// connections' events for the control thread. Shared by the control
/// thread (publishes), the connections (opens, closes) and `/metrics`.
#[derive(Debug)]
pub struct Kernel {
    counting: AtomicBool,
    /// Connections opened (true) and closed (false), in order.
    events: Feed<ConnEvent>,
    view: RwLock<View>,
    load: RwLock<Arc<KernelLoad>>,
}

impl Default for Kernel {
    fn default() -> Self {
        Self {
            counting: AtomicBool::new(false),
            events: Feed::new("connection_events", EVENT_FEED_CAPACITY),
            view: RwLock::default(),
            load: RwLock::default(),
        }
    }
}

impl Kernel {
    /// Records whether the program counts (attached) or not; when it stops,
    /// the last reading goes.
    pub fn set_counting(&self, counting: bool) {
        self.counting.store(counting, Ordering::Relaxed);
        if !counting {
            *self.view.write().unwrap_or_else(PoisonError::into_inner) = View::default();
            *self.load.write().unwrap_or_else(PoisonError::into_inner) = Arc::default();
        }
    }

    /// True while the program is attached.
    #[must_use]
    pub fn is_attached(&self) -> bool {
        self.counting.load(Ordering::Relaxed)
    }

    /// Records that the connection to `peer` closed: its kernel entries are
    /// removed [`crate::ebpf::live::FORGET_GRACE`] later, so the table does
    /// not fill.
    pub fn note_closed(&self, peer: SocketAddr) {
        if self.is_attached() {
            self.events.send((peer, false));
        }
    }

    /// Records that a connection to `peer` opened: a removal still pending
    /// for the same address (an agent redialling a server's `address:port`)
    /// is cancelled, so the new connection keeps its counters.
    pub fn note_open(&self, peer: SocketAddr) {
        if self.is_attached() {
            self.events.send((peer, true));
        }
    }

    /// The connection events since the last call (the control thread's).
    pub fn take_events(&self) -> impl Iterator<Item = ConnEvent> + '_ {
        self.events.drain()
    }

    /// The feed of connection events (its drop count, for `/metrics`).
    #[must_use]
    pub fn events(&self) -> &Feed<ConnEvent> {
        &self.events
    }

    /// Publishes the control thread's `reading` at `now`: the counters for
    /// `/metrics`, the rates for [`Kernel::load`].
    pub fn publish(&self, now: Instant, reading: Reading) {
        let Reading {
            peers,
            global,
            rates,
        } = reading;
        *self.view.write().unwrap_or_else(PoisonError::into_inner) = View { peers, global };
        *self.load.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(KernelLoad {
            at: Some(now),
            rates,
        });
    }

    /// The rates of the last tick (empty before the second tick and
    /// without the program).
    #[must_use]
    pub fn load(&self) -> Arc<KernelLoad> {
        self.load
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The counters of the last tick.
    #[must_use]
    pub fn view(&self) -> View {
        self.view
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_the_program_no_event_is_queued() {
        let k = Kernel::default();
        k.set_counting(false);
        k.note_closed("127.0.0.1:1".parse().unwrap());
        k.note_open("127.0.0.1:1".parse().unwrap());
        assert_eq!(k.take_events().count(), 0);
        assert!(k.load().rates.is_empty());
        k.set_counting(true);
        k.note_closed("127.0.0.1:1".parse().unwrap());
        assert_eq!(k.take_events().count(), 1);
    }

    #[test]
    fn a_full_event_feed_drops_and_counts() {
        let k = Kernel::default();
        k.set_counting(true);
        let peer: SocketAddr = "127.0.0.1:2".parse().unwrap();
        for _ in 0..=EVENT_FEED_CAPACITY {
            k.note_open(peer);
        }
        assert_eq!(k.events().dropped(), 1);
        assert_eq!(k.take_events().count(), EVENT_FEED_CAPACITY);
    }

    #[test]
    fn the_load_seam_gives_arrival_rates_of_requests_from_each_peer() {
        let a: SocketAddr = "10.0.0.1:5000".parse().unwrap();
        let b: SocketAddr = "[2001:db8::1]:3868".parse().unwrap();
        let rate = |peer, direction, requests| PeerRate {
            peer,
            direction,
            packets: 0.0,
            bytes: 0.0,
            requests,
            answers: 0.0,
            syn: 0.0,
            exact: true,
        };
        let load = KernelLoad {
            at: Some(Instant::now()),
            rates: vec![
                rate(a, Direction::FromPeer, 100.0),
                rate(a, Direction::ToPeer, 7.0),
                rate(b, Direction::FromPeer, 50.0),
            ],
        };
        assert_eq!(load.arrival_rate(a), Some(100.0));
        assert_eq!(load.arrival_rate(b), Some(50.0));
        assert_eq!(load.arrival_rate("10.0.0.2:5000".parse().unwrap()), None);
        assert_eq!(load.total_arrival_rate(), 150.0);
        // A rate the kernel could not count exactly is not given.
        let mut inexact = load.clone();
        inexact.rates[0].exact = false;
        assert_eq!(inexact.arrival_rate(a), None);
        assert_eq!(inexact.arrival_rate(b), Some(50.0));
    }
}
