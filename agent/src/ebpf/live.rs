//! The kernel program's life with a running agent: attached after the
//! agent starts, read by the control thread every tick (RFC 7068 §3.1: the
//! load a node receives, per peer, before any userspace work), the kernel
//! entries of closed connections removed after [`FORGET_GRACE`], detached
//! when the agent is done. What the readings mean to the agent is
//! `crate::telemetry`'s.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use tracing::{debug, info, warn};

use super::{GlobalCounters, PeerCounters, PeerRate, RateMeter, Telemetry};

/// How long a closed connection's counters stay in the kernel table after
/// the close: the last segments (FIN, final ACKs) arrive after the socket
/// is gone and would otherwise create the entry again.
pub const FORGET_GRACE: Duration = Duration::from_secs(2);

/// A connection event, in the order the connections saw them: opened
/// (true) or closed (false), by the peer's address.
pub type ConnEvent = (SocketAddr, bool);

/// One tick's reading of the counters.
#[derive(Debug, Default)]
pub struct Reading {
    /// Per-peer counters, summed over the CPUs.
    pub peers: Vec<PeerCounters>,
    /// The program's global counters, when they could be read.
    pub global: Option<GlobalCounters>,
    /// Per-peer rates since the previous reading.
    pub rates: Vec<PeerRate>,
}

/// The attached program and what the control thread keeps between ticks.
#[derive(Debug)]
struct Attached {
    telemetry: Telemetry,
    meter: RateMeter,
    /// Closed peers and when their entries may go.
    forget: HashMap<SocketAddr, Instant>,
}

/// The program as the running agent holds it (or none): attached and
/// detached from the agent's thread, read from the control thread.
#[derive(Debug, Default)]
pub struct Live {
    attached: AtomicBool,
    state: Mutex<Option<Attached>>,
    /// Counts the starts of the program and their ends: odd while one is
    /// in progress ([`Live::loads`]).
    loads: AtomicU64,
}

impl Live {
    /// Starts the program for `cfg` (the agent's resolved `[ebpf]` section)
    /// and attaches it ([`Live::attach`]); without it (a section that cannot
    /// work, no privileges, `mode = "off"`, not built) one line is logged.
    /// Returns true when the program is attached.
    pub fn start(&self, cfg: Result<super::Config, super::SectionError>) -> bool {
        let cfg = match cfg {
            Ok(c) => c,
            Err(e) => {
                warn!(key = %e.key, why = %e.why, "kernel telemetry not started");
                return false;
            }
        };
        self.loads.fetch_add(1, Ordering::Release);
        let telemetry = Telemetry::start_or_log(&cfg);
        if let Some(t) = &telemetry {
            info!(program_ids = ?t.program_ids(), ports = ?cfg.ports, "kernel telemetry started");
        }
        self.attach(telemetry);
        self.loads.fetch_add(1, Ordering::Release);
        self.is_attached()
    }

    /// How many times a load of the program began or ended (odd: one is in
    /// progress). Loading and verifying it runs in the agent's process and
    /// CPU share, a second and more in 0.02 of a CPU: the own load's
    /// measurement leaves an interval with a load in it out
    /// (`crate::runtime::control`).
    pub fn loads(&self) -> u64 {
        self.loads.load(Ordering::Acquire)
    }

    /// Takes ownership of a started program (or records that there is
    /// none); the next tick starts reading it.
    pub fn attach(&self, telemetry: Option<Telemetry>) {
        let attached = telemetry.is_some();
        *lock(&self.state) = telemetry.map(|telemetry| Attached {
            telemetry,
            meter: RateMeter::new(),
            forget: HashMap::new(),
        });
        self.attached.store(attached, Ordering::Relaxed);
    }

    /// Detaches the program from every interface (idempotent).
    pub fn detach(&self) {
        if let Some(a) = lock(&self.state).take() {
            info!(attachments = ?a.telemetry.attachments(), "kernel telemetry detached");
        }
        self.attached.store(false, Ordering::Relaxed);
    }

    /// True while the program is attached.
    #[must_use]
    pub fn is_attached(&self) -> bool {
        self.attached.load(Ordering::Relaxed)
    }

    /// The control thread's tick at `now`: applies the connection `events`
    /// to the pending removals, forgets the peers closed at least
    /// [`FORGET_GRACE`] ago, forwards the program's log lines, reads and
    /// sums the per-CPU counters and turns them into rates. `None` without
    /// the program or when the counters cannot be read (logged).
    pub fn handle_tick(
        &self,
        now: Instant,
        events: impl IntoIterator<Item = ConnEvent>,
    ) -> Option<Reading> {
        let mut state = lock(&self.state);
        let a = state.as_mut()?;
        for peer in due_for_removal(&mut a.forget, events, now) {
            match a.telemetry.forget(peer) {
                Ok(n) => debug!(%peer, entries = n, "kernel counters of a closed peer forgotten"),
                Err(e) => warn!(%peer, cause = %e, "cannot forget a closed peer's kernel counters"),
            }
        }
        a.telemetry.forward_log();
        let peers = match a.telemetry.read() {
            Ok(p) => p,
            Err(e) => {
                warn!(cause = %e, "cannot read the kernel counters");
                return None;
            }
        };
        let global = a.telemetry.global().ok();
        let rates = a.meter.handle_read(now, &peers);
        Some(Reading {
            peers,
            global,
            rates,
        })
    }
}

/// Applies connection events in order to the pending removals and returns
/// (and drops from `pending`) the peers whose grace is over at `now`.
fn due_for_removal(
    pending: &mut HashMap<SocketAddr, Instant>,
    events: impl IntoIterator<Item = ConnEvent>,
    now: Instant,
) -> Vec<SocketAddr> {
    for (peer, open) in events {
        if open {
            pending.remove(&peer);
        } else {
            pending.insert(peer, now + FORGET_GRACE);
        }
    }
    let due: Vec<SocketAddr> = pending
        .iter()
        .filter(|(_, at)| **at <= now)
        .map(|(p, _)| *p)
        .collect();
    for p in &due {
        pending.remove(p);
    }
    due
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_the_program_the_tick_reads_nothing() {
        let k = Live::default();
        k.attach(None);
        assert!(!k.is_attached());
        let closed: SocketAddr = "127.0.0.1:1".parse().unwrap();
        assert!(k.handle_tick(Instant::now(), [(closed, false)]).is_none());
    }

    /// A start counts as a load begun and ended whatever it gives (here
    /// `mode = "off"`: nothing attached), so the own load's measurement
    /// leaves its interval out; a section that cannot work loads nothing.
    #[test]
    fn a_start_counts_its_load_whatever_its_outcome() {
        let k = Live::default();
        let off = super::super::Config {
            mode: super::super::Mode::Off,
            ..super::super::Config::default()
        };
        assert!(!k.start(Ok(off)));
        assert_eq!(k.loads(), 2);
        let broken = super::super::SectionError {
            key: "ebpf.mode".into(),
            why: "test".into(),
        };
        assert!(!k.start(Err(broken)));
        assert_eq!(k.loads(), 2);
    }

    #[test]
    fn closed_peers_go_after_the_grace_unless_reopened() {
        let t0 = Instant::now();
        let (a, b, c): (SocketAddr, SocketAddr, SocketAddr) = (
            "127.0.0.1:40000".parse().unwrap(),
            "127.0.0.1:3869".parse().unwrap(),
            "127.0.0.1:40001".parse().unwrap(),
        );
        let mut pending = HashMap::new();
        // a closes; b closes then reopens (a redial); c opens then closes.
        let due = due_for_removal(
            &mut pending,
            vec![(a, false), (b, false), (b, true), (c, true), (c, false)],
            t0,
        );
        assert!(due.is_empty(), "nothing before the grace");
        let just_before = t0 + FORGET_GRACE - Duration::from_millis(1);
        assert!(due_for_removal(&mut pending, Vec::new(), just_before).is_empty());
        let mut due = due_for_removal(&mut pending, Vec::new(), t0 + FORGET_GRACE);
        due.sort();
        assert_eq!(due, [a, c]);
        assert!(pending.is_empty());
    }
}
