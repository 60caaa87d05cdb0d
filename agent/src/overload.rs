//! DOIC in the running relay: RFC 7683 §5.1 (the agent's
//! OC-Supported-Features in every relayed request, SourceID replaced, RFC
//! 8581 §6.1), §5.2.2 and §8 (throttled requests answered 3004 / 5012 /
//! Experimental-Result 5198), §5.2.1 and §10 (reports of trusted peers
//! accepted, forwarded to DOIC clients, stripped otherwise), RFC 8581 §6.2.5
//! (peer reports never relayed) and RFC 8582 (the rate bucket shared by the
//! workers).
//!
//! Each worker thread owns one [`Doic`] core in a thread local: the
//! per-request path takes no lock. (A worker on a caller's runtime is not
//! a thread: it lends its core to the thread polling its task, [`hosted`].)
//! A report accepted on one worker comes
//! back from [`Doic::on_answer`] as replicas, which go to the other
//! workers' bounded inboxes (the request path checks an atomic flag). The
//! control thread ([`tick`], every 100 ms on each worker) drives
//! [`Doic::handle_timeout`]; each worker sends its [`Snapshot`] back over a
//! bounded feed ([`crate::feed`]), and the control thread keeps the last one
//! of each for `/metrics` and `GET /audit`.
//!
//! The control thread also measures the agent's own load (utilisation,
//! queue delay, pending, arrival rates; `own_capacity` an upper bound),
//! every worker sends the same own peer reports, and while the agent is
//! overloaded every client is held to its allocation before routing
//! ([`own`]). With `[doic.protect]` (on by default) it estimates a limit
//! for every upstream server without DOIC and every worker enforces it and
//! reports it on the server's behalf ([`protect`], docs/protect.md).
//!
//! The agent's own realm reports (seed 002; RFC 7683 §5.1.3, §5.2.1.4) are
//! one per realm for the whole agent: every core takes its versions from
//! the one [`doic::realm::RealmBoard`] held here, and a version one core
//! makes ([`doic::Doic::take_replicas`] after a request, [`doic::Doic::on_answer`]
//! after an answer), or a client it sent it to, goes to the other workers'
//! inboxes like an accepted report.
//!
//! | module | what it holds |
//! | --- | --- |
//! | this one | [`Overload`]: the configuration, clock, inboxes and snapshots the workers share |
//! | [`cores`] | the thread-local core of each worker |
//! | [`hosted`] | the core of a worker on a caller's runtime, lent per poll |
//! | [`inbox`] | replicas between workers over bounded crossbeam queues |
//! | [`request`] | the request glue: idle fast path, full treatment, retreatment, throttle answers |
//! | [`answer`] | the answer glue: idle fast path, full handling |
//! | [`snapshot`] | what each worker sends the control thread at each tick |
//! | [`own`] | the agent's own overload: measurement, reports, each client held to its allocation (`own/enforce.rs`) |
//! | [`protect`] | upstream servers without DOIC: their limits, the reports made on their behalf |

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use crate::clock::Clock;
use crate::feed::Feed;
use crate::live::Live;
use doic::{AnswerFeatures, DoicConfig, IdleAvps};

pub mod answer;
pub mod cores;
pub(crate) mod hosted;
pub mod inbox;
pub mod own;
pub mod protect;
pub mod request;
pub mod snapshot;
#[cfg(test)]
mod tests;

pub(crate) use answer::{idle_answer, idle_client_answer, treat_answer, with_avp};
pub(crate) use cores::{current_worker, set_worker};
pub(crate) use request::{
    Decision, Offers, RequestIn, Route, idle_forward, retreat, treat_request,
};
pub use snapshot::SNAPSHOTS_PER_WORKER;
pub(crate) use snapshot::tick;
pub use snapshot::{OcsRow, Snapshot};

/// Vendor-Id put in the Experimental-Result of a 5198 answer (3GPP; the code
/// is vendor practice, the vendor the deployment's choice).
pub const RETRY_NOT_ALLOWED_VENDOR: u32 = diameter::dictionary::vendor::TGPP;
/// Most candidates offered to the core for one request.
const MAX_CANDIDATES: usize = 4;

/// DOIC state shared by the workers: configuration, inboxes, snapshots.
#[derive(Debug)]
pub struct Overload {
    /// `[doic]`, replaced by a reload ([`Overload::reconfigure`]): each
    /// core takes a new one at its next use after the wake-up, the control
    /// thread at its next tick.
    cfg: Live<DoicConfig>,
    /// `[doic.protect] enabled` of the current `cfg`, read per answer.
    protecting: AtomicBool,
    identity: String,
    /// The clock of every `now` given to the cores, request path included
    /// (RFC 8582 §8.3: the bucket's arrival times): the CPU's counter,
    /// about half the cost of `Instant::now` (docs/bucket.md).
    clock: Clock,
    /// When the agent started: the reference of the audit trail's times.
    origin: Instant,
    sequence_base: u64,
    /// The versions of the agent's own realm reports, one sequence space
    /// for every worker's core (seed 002, RFC 7683 §5.2.1.4); a core
    /// locks it only when its estimate of a realm changes.
    realm_board: Arc<doic::realm::RealmBoard>,
    inboxes: inbox::Inboxes,
    /// The last snapshot of each worker (written by the control thread).
    snapshots: Vec<Mutex<Snapshot>>,
    /// Each worker's snapshot at its tick, to the control thread: at most
    /// [`SNAPSHOTS_PER_WORKER`] ticks' worth per worker. A snapshot that
    /// finds it full is dropped and counted; `/metrics` and `GET /audit`
    /// then show that worker's previous one until its next tick.
    snapshot_feed: Feed<(usize, Snapshot, bool)>,
    /// The agent's own overload (`own_capacity`).
    own: own::OwnState,
    /// Protection of upstream servers without DOIC (`[doic.protect]`).
    protect: protect::ProtectState,
    /// The AVPs of the idle fast path, encoded once ([`IdleAvps`]).
    avps: IdleAvps,
    /// The durable audit log (`[audit] dir`), fed at the control ticks.
    audit_log: std::sync::OnceLock<Arc<crate::audit::AuditLog>>,
}

impl Overload {
    /// The DOIC state of an agent with `workers` workers, or `None` when
    /// `cfg` is `None` (DOIC off).
    #[must_use]
    pub fn new(identity: &str, cfg: Option<DoicConfig>, workers: usize) -> Option<Self> {
        cfg.map(|cfg| Self::with_clock(identity, cfg, workers, Clock::new()))
    }

    /// [`Overload::new`] with DOIC on, every `now` read from `clock` (the
    /// agent on a caller's runtime follows that runtime's time,
    /// [`Clock::following`]).
    #[must_use]
    pub fn with_clock(identity: &str, cfg: DoicConfig, workers: usize, clock: Clock) -> Self {
        let sequence_base = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(1, |d| d.as_secs());
        let origin = clock.now();
        let base_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(1, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX / 2));
        let realm_board = Arc::new(doic::realm::RealmBoard::new(sequence_base, cfg.max_ocs));
        Self {
            // RFC 7683 §5.1.3 / RFC 8581 §6.1.1: the same AVP in every
            // relayed request; RFC 7683 §5.1.2, RFC 8581 §6.1.2: what
            // `Doic::on_answer` adds for a DOIC client when nothing is
            // selected upstream.
            avps: IdleAvps::new(identity, &cfg),
            own: own::OwnState::new(identity, cfg.own_capacity, origin, base_ms),
            protect: protect::ProtectState::new(origin, base_ms),
            protecting: AtomicBool::new(cfg.protect.enabled),
            cfg: Live::new(cfg),
            identity: identity.to_owned(),
            clock,
            origin,
            sequence_base,
            realm_board,
            inboxes: inbox::Inboxes::new(workers, inbox::CAPACITY),
            snapshots: (0..workers).map(|_| Mutex::default()).collect(),
            snapshot_feed: Feed::new("snapshots", SNAPSHOTS_PER_WORKER * workers.max(1)),
            audit_log: std::sync::OnceLock::new(),
        }
    }

    /// The agent's OC-Supported-Features AVP, encoded, as every relayed
    /// request carries it.
    #[must_use]
    pub fn features_avp(&self) -> &[u8] {
        self.avps.request()
    }

    /// The agent's OC-Supported-Features toward a DOIC client in an answer
    /// that selects nothing, encoded: `which` as [`idle_client_answer`]
    /// gives it.
    #[must_use]
    pub fn answer_features_avp(&self, which: AnswerFeatures) -> &[u8] {
        self.avps.answer(which)
    }

    /// Whether the agent protects upstream servers without DOIC
    /// (`[doic.protect] enabled`): the relay then records what it senses
    /// of their answers.
    #[must_use]
    pub fn protecting(&self) -> bool {
        self.protecting.load(Ordering::Relaxed)
    }

    /// The clock of the overload control (the control thread's ticks).
    #[must_use]
    pub fn now(&self) -> Instant {
        self.clock.now()
    }

    /// The same clock in monotonic nanoseconds (one counter read: the
    /// request path's stamps).
    #[inline]
    #[must_use]
    pub fn now_ns(&self) -> u64 {
        self.clock.now_ns()
    }

    /// The effective configuration (a lock: not for the request path,
    /// where each core has its own, [`doic::Doic::config`]).
    #[must_use]
    pub fn config(&self) -> Arc<DoicConfig> {
        self.cfg.current()
    }

    /// Replaces `[doic]` (a reload): every worker's core applies it at its
    /// next use ([`doic::Doic::reconfigure`] at that instant; a core
    /// already at this configuration is not touched), the control thread
    /// at its next tick. The keys read only at start keep their running
    /// values ([`DoicConfig::start_only_changes`]); `new` was validated by
    /// the reload's check.
    pub fn reconfigure(&self, new: &DoicConfig) {
        let cfg = new.clone().keeping_start_only(&self.cfg.current());
        self.protecting
            .store(cfg.protect.enabled, Ordering::Relaxed);
        self.cfg.publish(cfg);
        // The request path's check of its inbox is the one load that
        // brings each core to the new section.
        self.inboxes.wake_all();
    }

    /// The agent's DiameterIdentity.
    #[must_use]
    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// Whether any client is held to its allocation ([`own::enforce`]): one
    /// relaxed load.
    #[inline]
    #[must_use]
    pub fn own_enforcing(&self) -> bool {
        self.own.limits.enforcing()
    }

    /// Starts feeding the durable audit log (`[audit] dir`) over a feed of
    /// `capacity` lines: a log whose times are this overload control's
    /// clock. Once; `None` if already set.
    pub fn start_audit_log(&self, capacity: usize) -> Option<Arc<crate::audit::AuditLog>> {
        let log = Arc::new(crate::audit::AuditLog::new(
            &self.identity,
            self.origin,
            capacity,
        ));
        self.audit_log.set(log.clone()).ok().map(|()| log)
    }

    /// The durable audit log, when `[audit] dir` is set.
    #[must_use]
    pub fn audit_log(&self) -> Option<&Arc<crate::audit::AuditLog>> {
        self.audit_log.get()
    }

    /// Replicas dropped because a worker's inbox was full ([`inbox`]).
    #[must_use]
    pub fn replicas_dropped(&self) -> u64 {
        self.inboxes.dropped()
    }

    /// The snapshots of every worker, as of the last tick.
    #[must_use]
    pub fn snapshots(&self) -> Vec<Snapshot> {
        self.snapshots
            .iter()
            .map(|s| {
                s.lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .clone()
            })
            .collect()
    }
}

/// The agent's own overload as the control thread last measured it.
#[must_use]
pub fn own_view(ov: &Overload) -> own::OwnView {
    ov.own.view()
}

/// The upstream servers' protection as the control thread last measured it.
#[must_use]
pub fn protect_view(ov: &Overload) -> Vec<protect::ServerView> {
    ov.protect.view()
}

/// The evidence of every worker as JSON (`GET /audit`,
/// [`doic::audit::workers_json`]).
#[must_use]
pub fn audit_json(ov: &Overload) -> serde_json::Value {
    doic::audit::workers_json(&ov.identity, ov.snapshots().into_iter().map(|s| s.audit))
}
