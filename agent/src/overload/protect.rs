//! Protection of upstream servers without DOIC in the running relay
//! (docs/protect.md; RFC 7683 §5.1.3: the agent as reporting node on behalf
//! of a server that does not support DOIC). The control thread runs one
//! [`Estimator`] per upstream server every 100 ms tick ([`control_tick`]),
//! fed by what the relay sensed of its answers
//! ([`crate::peer::sensed::Sensed`]: latency, 3004, timeouts,
//! OC-Supported-Features), its outstanding requests, and the requests
//! relayed to it and throttled for it. While a server's limit binds, the
//! control thread keeps one shared rate bucket ([`RateControl`], RFC 8582
//! §8.3) at the limit and one HOST report version ([`OnBehalf`]) for it;
//! each worker puts the version in its core at its next tick ([`apply`]),
//! as a host OCS sharing that bucket (`Doic::put_behalf_report`), with the
//! [`Gates`] that hold each DOIC client sent the report to its share of the
//! limit and the other clients to the rest. The core
//! then answers the excess at once (3004 / 5012 / 5198 as `throttle_result`
//! says) and diverts realm-routed requests to a server with headroom first
//! (RFC 8581 §5), as for a received host report. So every worker enforces
//! the same limit, and one sequence space exists.
//!
//! The limit moves every tick by the bucket's rate alone (an atomic store,
//! [`RateControl::set_rate`]); a new report version, replicated to the
//! workers, only when it starts, changes materially, is renewed or ends.
//! A server with `[[peer]] doic = "native"`, or whose answers carry
//! OC-Supported-Features while it is trusted (`doic = "auto"`: its own
//! reports then govern), is never limited.

use std::cell::Cell;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use super::Overload;
use super::own::label;
use crate::peer::table::PeerTable;
use doic::Doic;
use doic::own_load::split;
use doic::protect::gates::source_demand;
use doic::protect::{BehalfReport, ClientLoss, Estimator, Gates, Load, Mode, OnBehalf};
use doic::rate::RateControl;

/// Most applications a server's report is made for.
const MAX_APPS: usize = 16;

thread_local! {
    /// The generation of protection reports this worker's core holds.
    static APPLIED: Cell<u64> = const { Cell::new(0) };
}

/// Installs `generation` as the generation of protection reports this
/// thread's core holds and returns the one it replaces ([`super::hosted`]).
pub(super) fn swap_applied(generation: u64) -> u64 {
    APPLIED.with(|a| a.replace(generation))
}

/// One report version as every worker puts it in its core.
#[derive(Clone, Debug)]
pub struct Published {
    /// The protected server.
    pub server: String,
    /// The applications of its traffic (one host OCS each, one bucket).
    pub apps: Vec<u32>,
    /// The version.
    pub report: BehalfReport,
    /// Each client's share of the limit when the version was made.
    pub shares: Arc<BTreeMap<String, u32>>,
    /// The shared bucket at the limit (`None` once the limit is lifted).
    pub rate: Option<RateControl>,
    /// Each DOIC client's bucket at its share, and the rest's (`None` once
    /// the limit is lifted).
    pub gates: Option<Arc<Gates>>,
}

/// What `/metrics` shows of one protected server.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ServerView {
    /// Its DiameterIdentity.
    pub peer: String,
    /// It does DOIC itself: never limited.
    pub native: bool,
    /// The limit in force, requests per second.
    pub limit: Option<u32>,
    /// Its unloaded latency as estimated.
    pub baseline: Option<Duration>,
    /// The mean latency of the last tick's answers.
    pub latency: Option<Duration>,
    /// Requests sent to it and not answered.
    pub outstanding: u64,
    /// Requests answered by the agent because its limit bound.
    pub throttled: u64,
    /// Report versions made on its behalf.
    pub reports_issued: u64,
}

#[derive(Debug)]
struct Server {
    est: Estimator,
    behalf: OnBehalf,
    rate: Option<RateControl>,
    gates: Option<Arc<Gates>>,
    apps: BTreeSet<u32>,
    last_out: u64,
    shares: Arc<BTreeMap<String, u32>>,
    /// The demands the shares were split from, and when.
    split_from: BTreeMap<String, f64>,
    split_at: Option<Instant>,
    /// Each client's loss percentage, corrected by its arrivals.
    losses: ClientLoss,
    view: ServerView,
}

/// How long a client's arrival rate takes to show a new loss percentage:
/// [`measure_demands`] smooths over about a second.
const LOSS_SETTLE: Duration = Duration::from_secs(1);

/// A downstream peer's request arrival rate, smoothed over about a second.
#[derive(Debug, Default)]
struct Demand {
    last_in: u64,
    rate: f64,
}

/// The downstream peers' demands and when they were last measured.
#[derive(Debug, Default)]
struct Demands {
    at: Option<Instant>,
    peers: BTreeMap<String, Demand>,
}

/// The control thread's side: the estimators, what the workers apply, and
/// what `/metrics` shows.
#[derive(Debug)]
pub struct ProtectState {
    servers: Mutex<BTreeMap<String, Server>>,
    demands: Mutex<Demands>,
    published: Mutex<Arc<[Published]>>,
    generation: AtomicU64,
    view: Mutex<Vec<ServerView>>,
    origin: Instant,
    base_ms: u64,
}

impl ProtectState {
    /// The state of an agent started at `origin`, `base_ms` the Unix time
    /// in milliseconds then (sequence numbers, RFC 7683 §5.2.1.4).
    #[must_use]
    pub fn new(origin: Instant, base_ms: u64) -> Self {
        Self {
            servers: Mutex::new(BTreeMap::new()),
            demands: Mutex::new(Demands::default()),
            published: Mutex::new(Arc::from(Vec::new())),
            generation: AtomicU64::new(0),
            view: Mutex::new(Vec::new()),
            origin,
            base_ms,
        }
    }

    /// What `/metrics` shows, one row per upstream server.
    #[must_use]
    pub fn view(&self) -> Vec<ServerView> {
        self.view
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The versions the workers hold (active and ending).
    #[must_use]
    pub fn published(&self) -> Arc<[Published]> {
        self.published
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// One control tick at `now` (every 100 ms, before the workers' ticks):
/// every upstream server's estimator moves, its bucket follows the limit,
/// and changed report versions are published.
pub(crate) fn control_tick(table: &PeerTable, ov: &Overload, now: Instant) {
    // The `[doic]` in force: a reload's takes effect from this tick.
    let doic = ov.config();
    let cfg = &doic.protect;
    if !cfg.enabled {
        return;
    }
    let st = &ov.protect;
    let Ok(bucket) = doic.rate.bucket_config() else {
        return;
    };
    let slots = table.all();
    let demands = measure_demands(st, &slots, now);
    // The agent's own lateness this tick: a starved agent reads every
    // answer late, which is no queue at the server.
    let agent_delay = super::own::take_tick_delay(ov);
    let mut servers = st.servers.lock().unwrap_or_else(PoisonError::into_inner);
    let mut changed = false;
    for (_, slot) in slots {
        let policy = doic.peer(&slot.host);
        if policy.protect == Mode::Native && !servers.contains_key(&slot.host) {
            continue;
        }
        let taken = slot.sensed.take();
        let out = slot.stats.requests_out.load(Ordering::Relaxed);
        if slot.connect.is_none() && out == 0 && !servers.contains_key(&slot.host) {
            // Neither dialled nor sent a request: a client, not a server.
            continue;
        }
        let s = servers.entry(slot.host.clone()).or_insert_with(|| Server {
            est: Estimator::new(cfg.params(), policy.protect),
            behalf: OnBehalf::new(st.origin, st.base_ms, cfg.validity()),
            rate: None,
            gates: None,
            apps: BTreeSet::new(),
            last_out: out,
            shares: Arc::default(),
            split_from: BTreeMap::new(),
            split_at: None,
            losses: ClientLoss::default(),
            view: ServerView {
                peer: slot.host.clone(),
                ..ServerView::default()
            },
        });
        // A reload's new knobs apply to what was learnt: the limit in force
        // and the baseline stay.
        if s.est.params() != &cfg.params() || s.est.mode() != policy.protect {
            s.est.reconfigure(cfg.params(), policy.protect);
        }
        let mut samples = taken.samples;
        if !policy.trusted {
            // Its reports would be stripped and ignored (RFC 7683 §10.4):
            // announcing DOIC does not make it govern itself here.
            samples.with_features = 0;
        }
        let admitted = out.saturating_sub(s.last_out);
        s.last_out = out;
        let outstanding = u64::from(slot.outstanding.load(Ordering::Relaxed));
        s.est.handle_samples(&samples);
        s.est.handle_tick(
            now,
            Load {
                outstanding,
                offered: admitted + taken.throttled,
                throttled: taken.throttled,
                agent_delay,
            },
        );
        let new_app = taken.app != 0 && s.apps.len() < MAX_APPS && s.apps.insert(taken.app);
        let limit = s.est.limit();
        match (limit, &s.rate) {
            (Some(l), None) => s.rate = Some(RateControl::new(st.origin, now, l, &bucket)),
            (Some(l), Some(r)) if r.bucket().rate() != l => r.set_rate(now, l),
            (None, Some(_)) => s.rate = None,
            _ => {}
        }
        match (limit, &s.gates) {
            (Some(l), Some(g)) => g.follow(now, l),
            (None, Some(_)) => {
                // The episode is over: the next one splits afresh.
                s.gates = None;
                s.split_from.clear();
                s.split_at = None;
                s.losses.clear();
            }
            _ => {}
        }
        let versioned = s.behalf.handle_limit(now, limit, s.est.loss_percent());
        if versioned && let Some((rate, end)) = s.behalf.current().map(|r| (r.rate(), r.is_end())) {
            s.view.reports_issued += 1;
            if !end {
                // RFC 8582 §6.1: the limit split among the clients by
                // demand, fixed for the version; a DOIC client abating to
                // its share keeps the demand it was split from.
                let since = (
                    s.split_at
                        .map_or(Duration::ZERO, |t| now.saturating_duration_since(t)),
                    cfg.validity(),
                );
                let held = |c: &str| {
                    let share = s.gates.as_ref().and_then(|g| g.share_of(c))?;
                    Some((share, *s.split_from.get(c)?))
                };
                let mut from: BTreeMap<String, f64> = demands
                    .iter()
                    .map(|(c, r)| (c.clone(), source_demand(*r, held(c), since)))
                    .collect();
                // A held client between two requests is still a client.
                for c in s.split_from.keys() {
                    if !from.contains_key(c) && held(c).is_some() {
                        from.insert(c.clone(), source_demand(0.0, held(c), since));
                    }
                }
                from.retain(|_, r| *r >= 0.5);
                let d: Vec<(&str, f64)> = from.iter().map(|(c, r)| (c.as_str(), *r)).collect();
                let shares = Arc::new(
                    split(rate, &d)
                        .into_iter()
                        .map(|(c, n)| (c.to_owned(), n))
                        .collect(),
                );
                s.shares = shares;
                s.split_from = from;
                s.split_at = Some(now);
                // A loss client's cut is of its demand, not of what reaches
                // the agent already cut by it.
                let arrivals: BTreeMap<&str, f64> =
                    demands.iter().map(|(c, r)| (c.as_str(), *r)).collect();
                let losses =
                    s.losses
                        .revise(now, &s.shares, |c| arrivals.get(c).copied(), LOSS_SETTLE);
                s.behalf.set_losses(losses);
                // Each DOIC client held to its share, the others to the
                // rest of the limit.
                let l = limit.unwrap_or(rate);
                s.gates = Some(Arc::new(Gates::revise(
                    s.gates.as_deref(),
                    (st.origin, now),
                    l,
                    &s.shares,
                    &bucket,
                )));
            }
            // The version as made, its clients' losses in.
            if let Some(r) = s.behalf.current() {
                log_version(&slot.host, r, &s.est);
                if let Some(log) = ov.audit_log() {
                    let apps = s.apps.iter().copied().collect();
                    let inputs = server_inputs(&s.est, (limit, outstanding), r);
                    crate::audit::feed_behalf(log, now, (&slot.host, apps), r, inputs);
                }
            }
        }
        changed |= versioned || (new_app && s.behalf.current().is_some());
        s.view.native = s.est.is_native();
        s.view.limit = limit;
        s.view.baseline = s.est.baseline();
        s.view.latency = s.est.measures().latency;
        s.view.outstanding = outstanding;
        s.view.throttled += taken.throttled;
    }
    if changed {
        let published: Arc<[Published]> = servers
            .iter()
            .filter_map(|(name, s)| {
                s.behalf.current().map(|r| Published {
                    server: name.clone(),
                    apps: s.apps.iter().copied().collect(),
                    report: r.clone(),
                    shares: s.shares.clone(),
                    rate: s.rate.clone(),
                    gates: s.gates.clone(),
                })
            })
            .collect();
        *st.published.lock().unwrap_or_else(PoisonError::into_inner) = published;
        st.generation.fetch_add(1, Ordering::Release);
        // Applied at each worker's next request, not only at its tick.
        ov.inboxes.wake_all();
    }
    *st.view.lock().unwrap_or_else(PoisonError::into_inner) =
        servers.values().map(|s| s.view.clone()).collect();
}

/// Every downstream peer's request arrival rate at `now` (the relay's
/// per-peer counter, smoothed over about a second), those sending.
fn measure_demands(
    st: &ProtectState,
    slots: &[(crate::routing::PeerId, Arc<crate::peer::table::PeerSlot>)],
    now: Instant,
) -> Vec<(String, f64)> {
    let mut d = st.demands.lock().unwrap_or_else(PoisonError::into_inner);
    let dt =
        d.at.replace(now)
            .map_or(0.0, |at| now.saturating_duration_since(at).as_secs_f64());
    let mut out = Vec::new();
    for (_, slot) in slots {
        let n = slot.stats.requests_in.load(Ordering::Relaxed);
        let e = d.peers.entry(slot.host.clone()).or_insert(Demand {
            last_in: n,
            rate: 0.0,
        });
        if dt > 0.0 {
            #[expect(clippy::cast_precision_loss, reason = "a rate")]
            let r = n.saturating_sub(e.last_in) as f64 / dt;
            // About a second: 0.3 of each 100 ms tick.
            e.rate += 0.3 * (r - e.rate);
        }
        e.last_in = n;
        if e.rate >= 0.5 {
            out.push((slot.host.clone(), e.rate));
        }
    }
    out
}

/// The inputs of a version made for a server (its audit record).
fn server_inputs(
    est: &Estimator,
    (limit, outstanding): (Option<u32>, u64),
    r: &BehalfReport,
) -> doic::audit::record::ServerInputs {
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let m = est.measures();
    doic::audit::record::ServerInputs {
        limit,
        baseline_ms: est.baseline().map(ms),
        latency_ms: m.latency.map(ms),
        outstanding,
        offered: m.offered_rate,
        answered: m.answered_rate,
        client_loss: (*r.losses).clone(),
    }
}

fn log_version(server: &str, r: &BehalfReport, est: &Estimator) {
    let m = est.measures();
    if r.is_end() {
        tracing::info!(
            peer = server,
            sequence = r.report.sequence,
            "protection ended: the server's load is below its limit"
        );
    } else {
        tracing::info!(
            peer = server,
            limit = r.rate(),
            loss_percent = r.loss_percent,
            sequence = r.report.sequence,
            offered = m.offered_rate,
            answered = m.answered_rate,
            delay_ms = m.delay.map(|d| d.as_secs_f64() * 1000.0),
            baseline_ms = est.baseline().map(|d| d.as_secs_f64() * 1000.0),
            "server overloaded: the agent limits it and reports on its behalf"
        );
    }
}

/// Puts the published versions in this worker's core when they changed
/// since it last did (worker tick).
pub(crate) fn apply(ov: &Overload, core: &mut Doic, now: Instant) {
    let generation = ov.protect.generation.load(Ordering::Acquire);
    if APPLIED.with(Cell::get) == generation {
        return;
    }
    for p in ov.protect.published().iter() {
        for app in &p.apps {
            core.put_behalf_report(
                now,
                (*app, &p.server),
                &p.report,
                &p.shares,
                (p.rate.as_ref(), p.gates.as_ref()),
            );
        }
    }
    APPLIED.with(|a| a.set(generation));
}

/// The protection metrics, Prometheus text format.
pub(crate) fn render(ov: &Overload, o: &mut String) {
    let rows = ov.protect.view();
    if rows.is_empty() {
        return;
    }
    type Value = fn(&ServerView) -> Option<String>;
    let metrics: [(&str, &str, &str, Value); 7] = [
        (
            "doic_protect_limit",
            "The rate limit the agent holds an upstream server to (requests per second; absent: not limited).",
            "gauge",
            |r| r.limit.map(|l| l.to_string()),
        ),
        (
            "doic_protect_native",
            "Whether the upstream server does DOIC itself (never limited by the agent).",
            "gauge",
            |r| Some(u8::from(r.native).to_string()),
        ),
        (
            "doic_protect_latency_baseline_seconds",
            "The upstream server's unloaded answer latency as estimated.",
            "gauge",
            |r| r.baseline.map(|d| format!("{:.6}", d.as_secs_f64())),
        ),
        (
            "doic_protect_latency_seconds",
            "The mean answer latency of the upstream server over the last 100 ms.",
            "gauge",
            |r| r.latency.map(|d| format!("{:.6}", d.as_secs_f64())),
        ),
        (
            "doic_protect_outstanding",
            "Requests sent to the upstream server and not answered yet.",
            "gauge",
            |r| Some(r.outstanding.to_string()),
        ),
        (
            "doic_protect_throttled_total",
            "Requests for the upstream server the agent answered itself because its limit bound.",
            "counter",
            |r| Some(r.throttled.to_string()),
        ),
        (
            "doic_protect_reports_total",
            "HOST report versions the agent made on the upstream server's behalf (RFC 7683 §5.1.3).",
            "counter",
            |r| Some(r.reports_issued.to_string()),
        ),
    ];
    for (name, help, kind, value) in metrics {
        let _ = writeln!(o, "# HELP {name} {help}\n# TYPE {name} {kind}");
        for r in &rows {
            if let Some(v) = value(r) {
                let _ = writeln!(o, "{name}{{peer=\"{}\"}} {v}", label(&r.peer));
            }
        }
    }
}
