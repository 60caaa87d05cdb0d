//! Admission of inbound connections that have not completed the
//! capabilities exchange (RFC 6733 §5.3: "When two Diameter peers establish
//! a transport connection, they MUST exchange the Capabilities Exchange
//! messages"; §5.6.1: "it is not, in the general case, possible to know the
//! identity of that peer until a CER is received from it"). Until the CER
//! is answered, nobody knows who is on the other end, so those connections
//! are capped: per source and in total.
//!
//! A source is an IPv4 address or an IPv6 /64 (one host usually holds a
//! whole /64). When the total is reached, a connection from a source that
//! holds fewer waiting connections than the heaviest source still gets in:
//! the heaviest source's oldest waiting connection is evicted in its place.
//! A flood from a few sources therefore cannot keep a new peer out; it only
//! churns its own connections.
//!
//! Sans-io: no sockets, no clocks. "Oldest" is the admission order. The
//! caller passes a handle `T` per connection (the tokio edge passes what
//! wakes the connection's task) and gets the evicted connection's handle
//! back.

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

/// Why a connection was refused at accept.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// The source already holds its share of waiting connections.
    #[error("too many connections waiting for CER from this source")]
    PerSource,
    /// Every waiting slot is taken and this source is among the heaviest.
    #[error("too many connections waiting for CER")]
    Total,
}

impl Refusal {
    /// The `reason` label of `doic_connections_refused_total`.
    #[must_use]
    pub fn label(self) -> &'static str {
        match self {
            Refusal::PerSource => "per_source_cap",
            Refusal::Total => "total_cap",
        }
    }
}

/// A waiting connection's place; give it back with [`Admission::release`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ticket {
    source: IpAddr,
    seq: u64,
}

/// A connection admitted, and the one evicted to make room, if any.
#[derive(Debug)]
pub struct Admitted<T> {
    /// The new connection's place.
    pub ticket: Ticket,
    /// The evicted connection: its source and its handle. It is no longer
    /// counted; the caller closes it.
    pub evicted: Option<(IpAddr, T)>,
}

/// Counters of connections closed before the capabilities exchange.
#[derive(Debug, Default)]
pub struct AdmissionStats {
    /// Refused at accept: the source's cap.
    pub refused_per_source: AtomicU64,
    /// Refused at accept: the total cap.
    pub refused_total: AtomicU64,
    /// Evicted to let a lighter source in.
    pub evicted: AtomicU64,
    /// Closed because no CER came within the CER timeout (counted by the
    /// connection).
    pub cer_timeouts: AtomicU64,
}

#[derive(Debug)]
struct Inner<T> {
    next: u64,
    total: usize,
    by_source: HashMap<IpAddr, VecDeque<(u64, T)>>,
}

/// The waiting connections, per source. Shared by every worker.
#[derive(Debug)]
pub struct Admission<T> {
    max_total: usize,
    max_per_source: usize,
    inner: Mutex<Inner<T>>,
    /// What was refused, evicted, timed out.
    pub stats: AdmissionStats,
}

/// The source a connection is counted under: the IPv4 address (also when
/// IPv4-mapped), or the IPv6 /64.
#[must_use]
pub fn source_of(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6((u128::from(v6) & !u128::from(u64::MAX)).into()),
        },
    }
}

impl<T> Admission<T> {
    /// At most `max_total` waiting connections, `max_per_source` from one
    /// source (both at least 1).
    #[must_use]
    pub fn new(max_total: usize, max_per_source: usize) -> Self {
        Self {
            max_total: max_total.max(1),
            max_per_source: max_per_source.max(1),
            inner: Mutex::new(Inner {
                next: 0,
                total: 0,
                by_source: HashMap::new(),
            }),
            stats: AdmissionStats::default(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner<T>> {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A connection from `ip` was accepted: admit it (perhaps evicting
    /// another) or refuse it.
    ///
    /// # Errors
    /// [`Refusal`] when the connection is to be closed at once (counted).
    pub fn admit(&self, ip: IpAddr, handle: T) -> Result<Admitted<T>, Refusal> {
        let source = source_of(ip);
        let mut g = self.lock();
        let inner = &mut *g;
        let own = inner.by_source.get(&source).map_or(0, VecDeque::len);
        if own >= self.max_per_source {
            self.stats
                .refused_per_source
                .fetch_add(1, Ordering::Relaxed);
            return Err(Refusal::PerSource);
        }
        let mut evicted = None;
        if inner.total >= self.max_total {
            // The heaviest source; among equals, the one whose oldest
            // connection is oldest.
            let heaviest = inner
                .by_source
                .iter()
                .max_by_key(|(_, q)| (q.len(), std::cmp::Reverse(q.front().map(|e| e.0))))
                .map(|(s, q)| (*s, q.len()));
            match heaviest {
                Some((victim, n)) if own < n => {
                    if let Some(q) = inner.by_source.get_mut(&victim)
                        && let Some((_, h)) = q.pop_front()
                    {
                        if q.is_empty() {
                            inner.by_source.remove(&victim);
                        }
                        inner.total -= 1;
                        evicted = Some((victim, h));
                        self.stats.evicted.fetch_add(1, Ordering::Relaxed);
                    }
                }
                _ => {
                    self.stats.refused_total.fetch_add(1, Ordering::Relaxed);
                    return Err(Refusal::Total);
                }
            }
        }
        let seq = inner.next;
        inner.next += 1;
        inner
            .by_source
            .entry(source)
            .or_default()
            .push_back((seq, handle));
        inner.total += 1;
        Ok(Admitted {
            ticket: Ticket { source, seq },
            evicted,
        })
    }

    /// The connection completed the exchange or closed. Releasing a ticket
    /// twice, or one that was evicted, does nothing.
    pub fn release(&self, ticket: &Ticket) {
        let mut g = self.lock();
        let inner = &mut *g;
        let Some(q) = inner.by_source.get_mut(&ticket.source) else {
            return;
        };
        if let Some(i) = q.iter().position(|e| e.0 == ticket.seq) {
            q.remove(i);
            inner.total -= 1;
        }
        if q.is_empty() {
            inner.by_source.remove(&ticket.source);
        }
    }

    /// Connections waiting for their capabilities exchange now.
    #[must_use]
    pub fn waiting(&self) -> usize {
        self.lock().total
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn the_source_cap_refuses_the_excess_and_a_release_makes_room() {
        let a = Admission::new(10, 2);
        let t1 = a.admit(ip("10.0.0.1"), 1).unwrap().ticket;
        a.admit(ip("10.0.0.1"), 2).unwrap();
        assert_eq!(a.admit(ip("10.0.0.1"), 3).unwrap_err(), Refusal::PerSource);
        a.admit(ip("10.0.0.2"), 4).unwrap();
        a.release(&t1);
        a.release(&t1);
        assert_eq!(a.waiting(), 2);
        a.admit(ip("10.0.0.1"), 5).unwrap();
        assert_eq!(a.stats.refused_per_source.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn at_the_total_cap_a_lighter_source_evicts_the_heaviest_sources_oldest() {
        let a = Admission::new(4, 3);
        for h in 1..=3 {
            a.admit(ip("10.0.0.1"), h).unwrap();
        }
        a.admit(ip("10.0.0.2"), 4).unwrap();
        let got = a.admit(ip("10.0.0.3"), 5).unwrap();
        assert_eq!(got.evicted, Some((ip("10.0.0.1"), 1)));
        assert_eq!(a.waiting(), 4);
        // 10.0.0.1 holds 2 now, like nobody lighter: 10.0.0.2 (1) may still
        // evict, 10.0.0.1 itself may not.
        assert_eq!(a.admit(ip("10.0.0.1"), 6).unwrap_err(), Refusal::Total);
        let got = a.admit(ip("10.0.0.2"), 7).unwrap();
        assert_eq!(got.evicted, Some((ip("10.0.0.1"), 2)));
        // Every source holds 1 or 2 and the newcomer 0: evicts the oldest
        // among the heaviest (10.0.0.2's first).
        let got = a.admit(ip("10.0.0.9"), 8).unwrap();
        assert_eq!(got.evicted, Some((ip("10.0.0.2"), 4)));
        assert_eq!(a.stats.evicted.load(Ordering::Relaxed), 3);
        assert_eq!(a.stats.refused_total.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn an_evicted_ticket_released_later_changes_nothing() {
        let a = Admission::new(1, 1);
        let t = a.admit(ip("10.0.0.1"), 1).unwrap().ticket;
        assert!(a.admit(ip("10.0.0.2"), 2).unwrap().evicted.is_some());
        a.release(&t);
        assert_eq!(a.waiting(), 1);
    }

    #[test]
    fn ipv6_counts_per_64_and_mapped_ipv4_as_ipv4() {
        assert_eq!(
            source_of(ip("2001:db8::1")),
            source_of(ip("2001:db8::ffff:2"))
        );
        assert_ne!(
            source_of(ip("2001:db8::1")),
            source_of(ip("2001:db8:0:1::1"))
        );
        assert_eq!(source_of(ip("::ffff:10.0.0.1")), ip("10.0.0.1"));
        let a = Admission::new(10, 1);
        a.admit(ip("2001:db8::1"), 1).unwrap();
        assert_eq!(
            a.admit(ip("2001:db8::2"), 2).unwrap_err(),
            Refusal::PerSource
        );
    }
}
