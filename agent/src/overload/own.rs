//! The agent's own overload in the running relay (RFC 8581 §6.2.4, RFC 8582
//! §6.1): the control thread measures the request arrival rate of every
//! downstream peer once per tick, runs the [`OwnLoad`] controller when
//! `[doic] own_capacity` is set, and publishes its reports; each worker puts
//! them in its own core at its next tick (`overload::tick`), so that every worker
//! sends the same versions (sequence numbers are made once, by the
//! controller).
//!
//! The controller runs whether or not `own_capacity` is set: it also finds
//! the agent's overload by measurement ([`doic::own_load::Estimator`]),
//! from inputs the control thread reads without the workers' help (a
//! worker that runs without end in a small CPU share publishes nothing by
//! a tick of its own): each worker thread's CPU time, the process's, the
//! cgroup's quota and throttled periods ([`CpuMeter`], by way of
//! [`crate::host`]); the queue delay ([`note_queue_delay`]: the age of a
//! request from its read, stamped there with the overload control's
//! clock, to its dispatch upstream; the bytes waiting unread in each
//! peer's socket over the rate they are read at, [`Backlog`]; a tick's wait
//! on a worker's run queue); the relayed requests waiting for an answer
//! (`outstanding` of every peer) and the requests relayed per second
//! (received less those the agent answered for exceeding an allocation,
//! both counted by atomic increments as they are read). A peer whose
//! connection closed since the last measurement gives its share back at
//! once (RFC 8582 §8.2 note).
//!
//! While the agent reports, every client is held to its allocation
//! ([`enforce`]).
//!
//! The arrival rate of a peer comes from the kernel program when it is
//! attached and saw the peer's connection in the last window (it counts
//! requests as they arrive, before userspace queues fill: RFC 7068 §3.1),
//! mapped to the peer by the connection's remote address
//! ([`crate::peer::table::PeerSlot::remote`]); otherwise from the userspace
//! counter of requests received (`requests_in`) over the same interval.

use std::cell::Cell;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use super::Overload;
use crate::peer::table::{PeerSlot, PeerTable};
use crate::routing::PeerId;
use crate::telemetry::{Kernel, KernelLoad};
use doic::Doic;
use doic::own_load::{CpuUse, Inputs, OwnLoad, OwnLoadParams, OwnReport};
use doic::report::Abatement;

mod backlog;
mod cpu;
mod enforce;
pub(crate) use backlog::Backlog;
pub(crate) use cpu::{CpuInterval, CpuMeter};
pub use enforce::{ClientLimit, GRACE, TOLERANCE_FACTOR};
pub(crate) use enforce::{ClientLimits, enforce};

thread_local! {
    /// The generation of own reports this worker's core holds.
    static APPLIED: Cell<u64> = const { Cell::new(0) };
}

/// Installs `generation` as the generation of own reports this thread's
/// core holds and returns the one it replaces ([`super::hosted`] lends a
/// worker's to the thread that polls its task).
pub(super) fn swap_applied(generation: u64) -> u64 {
    APPLIED.with(|a| a.replace(generation))
}

/// Where a peer's arrival rate came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// The kernel program's per-address counters.
    Kernel,
    /// The relay's per-peer request counter.
    Userspace,
}

impl Source {
    /// The metric label.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Kernel => "kernel",
            Self::Userspace => "userspace",
        }
    }
}

/// One downstream peer as last measured.
#[derive(Clone, Debug, PartialEq)]
pub struct PeerLoad {
    /// Requests per second received from it.
    pub rate: f64,
    /// Where the rate came from.
    pub source: Source,
}

/// One client as `/metrics` shows it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClientView {
    /// The rate it is held to, while it is.
    pub allocated: Option<u32>,
    /// Its requests answered for exceeding it.
    pub throttled: u64,
    /// Whether it receives the agent's own peer report (its requests
    /// announce peer-report support).
    pub receives: bool,
}

/// What `/metrics` shows of the agent's own overload.
#[derive(Clone, Debug, Default)]
pub struct OwnView {
    /// The capacity of the last measurement (configured, or measured while
    /// overloaded by measurement); 0: none.
    pub capacity: u32,
    /// `own_capacity`, if set.
    pub configured: Option<u32>,
    /// Whether the agent is overloaded by measurement.
    pub measured: bool,
    /// The capacity estimate (requests per second), once measured.
    pub estimate: Option<f64>,
    /// The busiest worker's utilisation (0 to 1): its CPU time over what
    /// the interval and the cgroup's quota allow it.
    pub utilisation: f64,
    /// The share of one CPU the agent's cgroup allows, when limited.
    pub quota: Option<f64>,
    /// The share of the cgroup's periods throttled in the last second.
    pub throttled: Option<f64>,
    /// The longest queue delay of the last second.
    pub queue_delay: Duration,
    /// Relayed requests waiting for their answer.
    pub pending: u64,
    /// Per client: its limit.
    pub clients: BTreeMap<String, ClientView>,
    /// Total request arrival rate of the last measurement.
    pub total: f64,
    /// Whether the agent reports its own overload.
    pub reporting: bool,
    /// Per peer: its load.
    pub peers: BTreeMap<String, PeerLoad>,
    /// The reports in force (active and ending).
    pub reports: Vec<OwnReport>,
}

/// The control thread's side: the controller, the counters of the last
/// measurement, and what the workers apply.
#[derive(Debug)]
pub struct OwnState {
    /// Whether any client is held to its allocation.
    pub(crate) limits: ClientLimits,
    /// The longest wait of a tick on a worker since the last measurement,
    /// nanoseconds.
    queue_delay_ns: AtomicU64,
    /// The same since the last control tick (the protection's input).
    tick_delay_ns: AtomicU64,
    controller: Mutex<Option<Control>>,
    published: Mutex<Arc<[OwnReport]>>,
    generation: AtomicU64,
    view: Mutex<OwnView>,
}

/// Arrivals of a client within this share above its allocation still
/// count as keeping to it (its own bucket's tolerance, measurement noise).
const KEEPING_TO: f64 = 1.1;

#[derive(Debug)]
struct Control {
    load: OwnLoad,
    last: Option<(Instant, BTreeMap<String, u64>)>,
    /// Requests received, summed over the peers, at the last measurement.
    received: u64,
    /// Requests answered for exceeding an allocation, per client, at the
    /// last measurement.
    throttled: BTreeMap<String, u64>,
    /// The peers connected at the last measurement.
    open: BTreeSet<String>,
}

impl OwnState {
    /// The state for an agent with `capacity` (`None`: the agent reports
    /// its own overload only when it finds it by measurement). `base_ms` is
    /// the Unix time in milliseconds at `origin` (sequence numbers, RFC
    /// 7683 §5.2.1.4).
    #[must_use]
    pub fn new(identity: &str, capacity: Option<u32>, origin: Instant, base_ms: u64) -> Self {
        let params = OwnLoadParams {
            capacity,
            ..OwnLoadParams::measured()
        };
        let controller = Control {
            load: OwnLoad::new(identity, params, origin, base_ms),
            last: None,
            received: 0,
            throttled: BTreeMap::new(),
            open: BTreeSet::new(),
        };
        Self {
            limits: ClientLimits::default(),
            queue_delay_ns: AtomicU64::new(0),
            tick_delay_ns: AtomicU64::new(0),
            controller: Mutex::new(Some(controller)),
            published: Mutex::new(Arc::from(Vec::new())),
            generation: AtomicU64::new(0),
            view: Mutex::new(OwnView {
                capacity: capacity.unwrap_or(0),
                configured: capacity,
                ..OwnView::default()
            }),
        }
    }

    /// What `/metrics` shows.
    #[must_use]
    pub fn view(&self) -> OwnView {
        self.view
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// Work waited `delay` on a worker before it ran: a request between its
/// read and its dispatch upstream (the relay, per request), a tick on the
/// worker's run queue (worker, every 100 ms), or the bytes unread in a
/// peer's socket at the rate the agent reads them (control thread,
/// [`backlog`]). The longest since the last reading is the queue delay of
/// the own-load estimator and the agent's own lateness of the server's
/// protection ([`take_tick_delay`]): one signal for both.
#[inline]
pub(crate) fn note_queue_delay(ov: &Overload, delay: Duration) {
    let ns = u64::try_from(delay.as_nanos()).unwrap_or(u64::MAX);
    // A load first: the request path writes only a new maximum.
    for a in [&ov.own.queue_delay_ns, &ov.own.tick_delay_ns] {
        if a.load(Ordering::Relaxed) < ns {
            a.fetch_max(ns, Ordering::Relaxed);
        }
    }
}

/// The backlog at a tick (the bytes unread in the peers' sockets, over the
/// rate they are read at) from which the own load is measured at once
/// rather than at the next second, while the agent is not overloaded: at
/// ten times its capacity the backlog grows by nine seconds of work a
/// second, and its peer report rides on its answers, so the seconds before
/// the measurement are what the clients' abatement cannot undo (RFC 7683
/// §5.2: reports travel in answers). Five times the estimator's
/// `high_delay`: above a cgroup's quota pauses (49 ms in 1 ms per 50 ms).
pub(crate) const ONSET_BACKLOG: Duration = Duration::from_millis(100);

/// Whether the own load should be measured now (control thread, at a tick
/// whose socket backlog is `backlog`): the agent is not overloaded by
/// measurement and the backlog has reached [`ONSET_BACKLOG`].
pub(crate) fn onset(ov: &Overload, backlog: Duration) -> bool {
    backlog >= ONSET_BACKLOG
        && ov
            .own
            .controller
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
            .is_some_and(|c| !c.load.estimator().is_overloaded())
}

/// Starts the own load's readings again (control thread): the interval
/// since the last measurement held work that is not load, so its rates,
/// queue delay and CPU say nothing of the agent's capacity. The next
/// [`control_tick`] takes its counts as the start of the next interval and
/// measures nothing.
pub(crate) fn restart(ov: &Overload) {
    let own = &ov.own;
    if let Some(ctl) = own
        .controller
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .as_mut()
    {
        ctl.last = None;
    }
    own.queue_delay_ns.store(0, Ordering::Relaxed);
}

/// The longest queue delay on a worker since the last call (control
/// thread, every tick): how late the agent itself read what arrived.
pub(crate) fn take_tick_delay(ov: &Overload) -> Duration {
    Duration::from_nanos(ov.own.tick_delay_ns.swap(0, Ordering::Relaxed))
}

/// Requests answered since the last measurement for exceeding an
/// allocation to clients whose excess passes: clients that receive the
/// agent's reports and whose arrivals (`rates`: the kernel's count at the
/// socket when the program is attached) keep to their allocation. What
/// such a client is still answered 3004 is what it sent before the report
/// reached it, read from the sockets now (the drain of an onset); a client
/// that ignores the report, or receives none, goes on sending its excess,
/// and answering it stays charged to the relayed requests
/// ([`doic::own_load::Inputs::answered_reacting`]) as long as relaying
/// fewer relieves the agent ([`doic::own_load::Inputs::answered`]).
fn passing(
    all: &[(PeerId, Arc<PeerSlot>)],
    rates: &[(String, f64)],
    now: &BTreeMap<String, u64>,
    before: &BTreeMap<String, u64>,
) -> u64 {
    let keeps_to = |host: &str, allocated: u32| {
        rates
            .iter()
            .find(|(p, _)| p == host)
            .is_some_and(|(_, r)| *r <= KEEPING_TO * f64::from(allocated))
    };
    let passing: BTreeSet<&str> = all
        .iter()
        .filter(|(_, s)| s.own_limit.receives())
        .filter(|(_, s)| {
            s.own_limit
                .allocated()
                .is_some_and(|a| keeps_to(&s.host, a))
        })
        .map(|(_, s)| s.host.as_str())
        .collect();
    passing
        .into_iter()
        .map(|h| {
            let n = now.get(h).copied().unwrap_or(0);
            n.saturating_sub(before.get(h).copied().unwrap_or(0))
        })
        .sum()
}

/// Measures every peer's arrival rate at `now` with the workers'
/// `utilisation` (0 to 1, the runtime's busy share, for workers whose CPU
/// time is not measured) and the CPU the kernel accounted (`cpu`), runs the
/// controller, then sets the clients' limits (control thread, once per
/// second, after the kernel tick, and at a tick whose backlog is an
/// [`onset`]).
pub(crate) fn control_tick(
    table: &PeerTable,
    kernel: &Kernel,
    ov: &Overload,
    now: Instant,
    utilisation: &[f64],
    cpu: Option<&CpuInterval>,
) {
    let own = &ov.own;
    let mut guard = own
        .controller
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    let Some(ctl) = guard.as_mut() else {
        return;
    };
    let kernel = kernel.is_attached().then(|| kernel.load());
    let kernel = kernel.filter(|k| {
        k.at.is_some_and(|at| now.saturating_duration_since(at) < Duration::from_secs(3))
    });
    let all = table.all();
    let slots: Vec<SlotCount> = all
        .iter()
        .map(|(_, slot)| SlotCount {
            host: slot.host.clone(),
            remote: slot.remote(),
            requests_in: slot.stats.requests_in.load(Ordering::Relaxed),
        })
        .collect();
    let peers = measure(&slots, kernel.as_deref(), ctl.last.as_ref(), now);
    let received: u64 = slots.iter().map(|s| s.requests_in).sum();
    let mut throttled = BTreeMap::<String, u64>::new();
    for (_, s) in &all {
        *throttled.entry(s.host.clone()).or_default() += s.own_limit.throttled();
    }
    let pending: u64 = all
        .iter()
        .map(|(_, s)| u64::from(s.outstanding.load(Ordering::Relaxed)))
        .sum();
    let open: BTreeSet<String> = all
        .iter()
        // Connected and its watchdog OKAY: a closed, closing or suspect
        // peer has left or failed (RFC 8582 §8.2 note).
        .filter(|(_, s)| s.state() == crate::peer::table::state::OKAY)
        .map(|(_, s)| s.host.clone())
        .collect();
    let left: Vec<String> = ctl.open.difference(&open).cloned().collect();
    let counts = slots.into_iter().map(|s| (s.host, s.requests_in)).collect();
    let previous = ctl.last.replace((now, counts));
    let received_before = std::mem::replace(&mut ctl.received, received);
    let throttled_before = std::mem::replace(&mut ctl.throttled, throttled);
    ctl.open = open;
    let queue_delay = Duration::from_nanos(own.queue_delay_ns.swap(0, Ordering::Relaxed));
    let Some((at, _)) = previous else {
        return;
    };
    let dt = now.saturating_duration_since(at).as_secs_f64().max(1e-3);
    #[expect(clippy::cast_precision_loss, reason = "a rate")]
    let rate = |n: u64| n as f64 / dt;
    let throttled_since = ctl
        .throttled
        .values()
        .sum::<u64>()
        .saturating_sub(throttled_before.values().sum());
    let relayed = rate((received.saturating_sub(received_before)).saturating_sub(throttled_since));
    let rates: Vec<(String, f64)> = peers.iter().map(|(p, l)| (p.clone(), l.rate)).collect();
    let answered_reacting = rate(passing(&all, &rates, &ctl.throttled, &throttled_before));
    let before = ctl.load.generation();
    let measured: Vec<Duration> = cpu
        .map(|c| c.workers.iter().flatten().copied().collect())
        .unwrap_or_default();
    let cpu_use = cpu.map(|c| CpuUse {
        interval: c.interval,
        workers: &measured,
        process: c.process,
        quota: c.quota,
        throttled: c.throttled,
    });
    ctl.load.handle_load(
        now,
        Inputs {
            rates: &rates,
            utilisation,
            cpu: cpu_use,
            queue_delay,
            pending,
            relayed: Some(relayed),
            answered_reacting,
            answered: rate(throttled_since),
            left: &left,
        },
    );
    if ctl.load.generation() != before {
        if let Some(log) = ov.audit_log() {
            let inputs = doic::audit::record::IssuedInputs {
                capacity: ctl.load.capacity().unwrap_or(0),
                offered: ctl.load.total_rate(),
                utilisation: ctl.load.estimator().utilisation(),
                queue_delay_ms: queue_delay.as_secs_f64() * 1000.0,
                pending,
            };
            crate::audit::feed_issued(log, now, ctl.load.reports(), &inputs);
        }
        let reports: Arc<[OwnReport]> = ctl.load.reports().cloned().collect();
        *own.published.lock().unwrap_or_else(PoisonError::into_inner) = reports;
        own.generation
            .store(ctl.load.generation(), Ordering::Release);
    }
    enforce::update(ov, &ctl.load, all.iter().map(|(_, s)| &**s), now);
    // `/metrics` leaves out accepted peers that are gone, as the peer table
    // does ([`crate::peer::table::PeerTable::present`]); they were measured
    // above all the same, so that their return is no jump in the rates.
    let mut peers = peers;
    peers.retain(|host, _| !all.iter().any(|(_, s)| s.is_gone() && s.host == *host));
    let clients = all
        .iter()
        .filter(|(_, s)| !s.is_gone())
        .map(|(_, s)| {
            let l = &s.own_limit;
            let v = ClientView {
                allocated: l.allocated(),
                throttled: l.throttled(),
                receives: l.receives(),
            };
            (s.host.clone(), v)
        })
        .collect();
    let view = OwnView {
        capacity: ctl.load.capacity().unwrap_or(0),
        configured: ctl.load.params().capacity,
        measured: ctl.load.estimator().is_overloaded(),
        estimate: ctl.load.estimator().estimate(),
        utilisation: ctl.load.estimator().utilisation(),
        quota: cpu.and_then(|c| c.quota),
        throttled: cpu.and_then(|c| c.throttled),
        queue_delay,
        pending,
        clients,
        total: ctl.load.total_rate(),
        reporting: ctl.load.is_reporting(),
        peers,
        reports: ctl.load.reports().cloned().collect(),
    };
    *own.view.lock().unwrap_or_else(PoisonError::into_inner) = view;
}

/// One peer slot's counter, as read by the control thread.
#[derive(Clone, Debug)]
pub(crate) struct SlotCount {
    pub(crate) host: String,
    pub(crate) remote: Option<SocketAddr>,
    pub(crate) requests_in: u64,
}

/// How far the agent's own count of a peer's requests may exceed the
/// kernel's before the kernel is taken to have missed some, as a share of
/// the kernel's rate (with [`KERNEL_SLACK_RPS`] on top). The two are read
/// at the same tick but count different moments (the kernel a request's
/// arrival at the socket, the agent its read), so at a steady rate they
/// differ by the requests between the two at each end of the interval
/// (300.6 read against 298.6 arrived per second, say).
const KERNEL_SLACK: f64 = 0.05;

/// The requests per second the agent's count may exceed the kernel's by
/// beyond [`KERNEL_SLACK`].
const KERNEL_SLACK_RPS: f64 = 2.0;

/// The arrival rate of each peer at `now`: the kernel's rate for the
/// connection's remote address when the kernel has one and counted it
/// exactly over the interval (`KernelLoad::arrival_rate`), else the
/// userspace counter's increase since `last` (nothing before a first
/// reading); the userspace count when it exceeds the kernel's by more than
/// [`KERNEL_SLACK`] and [`KERNEL_SLACK_RPS`] (the requests the agent read arrived: a kernel count
/// well below it missed some).
pub(crate) fn measure(
    slots: &[SlotCount],
    kernel: Option<&KernelLoad>,
    last: Option<&(Instant, BTreeMap<String, u64>)>,
    now: Instant,
) -> BTreeMap<String, PeerLoad> {
    let mut peers = BTreeMap::new();
    for slot in slots {
        let from_kernel = kernel
            .zip(slot.remote)
            .and_then(|(k, addr)| k.arrival_rate(addr));
        let userspace = last.map(|(at, prev)| {
            let dt = now.saturating_duration_since(*at).as_secs_f64();
            let before = prev.get(&slot.host).copied().unwrap_or(0);
            #[expect(clippy::cast_precision_loss, reason = "a rate")]
            let rate = slot.requests_in.saturating_sub(before) as f64 / dt.max(1e-3);
            rate
        });
        let load = match (from_kernel, userspace) {
            (Some(k), Some(u)) if u > k * (1.0 + KERNEL_SLACK) + KERNEL_SLACK_RPS => {
                Some(PeerLoad {
                    rate: u,
                    source: Source::Userspace,
                })
            }
            (Some(rate), _) => Some(PeerLoad {
                rate,
                source: Source::Kernel,
            }),
            (None, Some(rate)) => Some(PeerLoad {
                rate,
                source: Source::Userspace,
            }),
            (None, None) => None,
        };
        if let Some(l) = load {
            peers.insert(slot.host.clone(), l);
        }
    }
    peers
}

/// Puts the published own reports in this worker's core, when they changed
/// since it last did (worker tick).
pub(crate) fn apply(ov: &Overload, core: &mut Doic, now: Instant) {
    let generation = ov.own.generation.load(Ordering::Acquire);
    if APPLIED.with(Cell::get) == generation {
        return;
    }
    let reports = ov
        .own
        .published
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    for r in reports.iter() {
        core.put_own_peer_report(now, r.peer.as_deref(), r.report.clone(), r.until);
    }
    APPLIED.with(|a| a.set(generation));
}

/// The own-overload metrics, Prometheus text format.
pub(crate) fn render(ov: &Overload, o: &mut String) {
    let v = ov.own.view();
    let _ = writeln!(
        o,
        "# HELP doic_own_capacity_rps The agent's own capacity (requests per second): the measured one while overloaded by measurement (at most own_capacity), else own_capacity; 0: none.\n# TYPE doic_own_capacity_rps gauge\ndoic_own_capacity_rps {}",
        v.capacity
    );
    if let Some(e) = v.estimate {
        let _ = writeln!(
            o,
            "# HELP doic_own_estimated_capacity_rps The capacity the agent measures for itself at its target utilisation.\n# TYPE doic_own_estimated_capacity_rps gauge\ndoic_own_estimated_capacity_rps {e:.1}"
        );
    }
    let _ = writeln!(
        o,
        "# HELP doic_own_load_rps Requests per second received from all peers (last measurement).\n# TYPE doic_own_load_rps gauge\ndoic_own_load_rps {:.1}",
        v.total
    );
    let _ = writeln!(
        o,
        "# HELP doic_own_overload Whether the agent reports its own overload.\n# TYPE doic_own_overload gauge\ndoic_own_overload {}",
        u8::from(v.reporting)
    );
    let _ = writeln!(
        o,
        "# HELP doic_own_measured_overload Whether the agent finds itself overloaded by measurement (utilisation, queue delay, pending).\n# TYPE doic_own_measured_overload gauge\ndoic_own_measured_overload {}",
        u8::from(v.measured)
    );
    let _ = writeln!(
        o,
        "# HELP doic_own_queue_delay_seconds The longest wait of work in the agent in the last second: a request between its read and its dispatch upstream, a tick on a worker's queue, or the bytes unread in a peer's socket at the rate they are read.\n# TYPE doic_own_queue_delay_seconds gauge\ndoic_own_queue_delay_seconds {:.6}",
        v.queue_delay.as_secs_f64()
    );
    if let Some(q) = v.quota {
        let _ = writeln!(
            o,
            "# HELP doic_own_cpu_quota The share of one CPU the agent's cgroup allows (cpu.max or cpu.cfs_quota_us).\n# TYPE doic_own_cpu_quota gauge\ndoic_own_cpu_quota {q:.4}"
        );
    }
    if let Some(t) = v.throttled {
        let _ = writeln!(
            o,
            "# HELP doic_own_cpu_throttled_ratio The share of the cgroup's CPU periods in the last second in which it ran out of quota.\n# TYPE doic_own_cpu_throttled_ratio gauge\ndoic_own_cpu_throttled_ratio {t:.3}"
        );
    }
    let _ = writeln!(
        o,
        "# HELP doic_own_pending Relayed requests waiting for their answer.\n# TYPE doic_own_pending gauge\ndoic_own_pending {}",
        v.pending
    );
    let _ = writeln!(
        o,
        "# HELP doic_own_peer_load_rps Requests per second offered by each peer, and where the rate was measured.\n# TYPE doic_own_peer_load_rps gauge"
    );
    for (p, l) in &v.peers {
        let _ = writeln!(
            o,
            "doic_own_peer_load_rps{{peer=\"{}\",source=\"{}\"}} {:.1}",
            label(p),
            l.source.as_str(),
            l.rate
        );
    }
    let _ = writeln!(
        o,
        "# HELP doic_own_client_allocated_rps The rate each client is held to while the agent is overloaded.\n# TYPE doic_own_client_allocated_rps gauge"
    );
    for (p, c) in &v.clients {
        if let Some(a) = c.allocated {
            let _ = writeln!(
                o,
                "doic_own_client_allocated_rps{{peer=\"{}\"}} {a}",
                label(p)
            );
        }
    }
    let _ = writeln!(
        o,
        "# HELP doic_own_client_throttled_total Requests of each client answered at once for exceeding its allocation.\n# TYPE doic_own_client_throttled_total counter"
    );
    for (p, c) in &v.clients {
        if c.throttled > 0 {
            let _ = writeln!(
                o,
                "doic_own_client_throttled_total{{peer=\"{}\"}} {}",
                label(p),
                c.throttled
            );
        }
    }
    // A report is in force only toward a client that receives it: one
    // whose requests announce peer-report support (RFC 7683 §5.2.3).
    let receives = |r: &OwnReport| {
        r.peer
            .as_ref()
            .is_none_or(|p| v.clients.get(p).is_some_and(|c| c.receives))
    };
    let _ = writeln!(
        o,
        "# HELP doic_own_reports_active The agent's own peer reports in force toward clients that receive them (1), or ending with validity 0 (0); peer \"*\" is the loss report for peers without rate.\n# TYPE doic_own_reports_active gauge"
    );
    for r in v.reports.iter().filter(|r| receives(r)) {
        let _ = writeln!(
            o,
            "doic_own_reports_active{{peer=\"{}\"}} {}",
            r.peer.as_deref().map_or_else(|| "*".into(), label),
            u8::from(!r.is_end())
        );
    }
    let _ = writeln!(
        o,
        "# HELP doic_own_rate_allocated_rps OC-Maximum-Rate of the agent's own peer report to each client that receives it.\n# TYPE doic_own_rate_allocated_rps gauge"
    );
    for r in v.reports.iter().filter(|r| receives(r)) {
        if let (Some(p), Abatement::Rate { per_second }, false) =
            (&r.peer, r.report.abatement, r.is_end())
        {
            let _ = writeln!(
                o,
                "doic_own_rate_allocated_rps{{peer=\"{}\"}} {per_second}",
                label(p)
            );
        }
    }
}

/// `s` as a Prometheus label value.
pub(super) fn label(s: &str) -> String {
    s.replace(['"', '\\', '\n'], "_")
}

#[cfg(test)]
mod tests;
