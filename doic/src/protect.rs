//! Closed-loop protection of an upstream server that sends no overload
//! reports: an adaptive rate limit per server, estimated from what a relay
//! sees on every answer. The agent then acts as the reporting node on the
//! server's behalf (RFC 7683 §5.1.3: a DOIC agent may take that role for a
//! non-supporting server) and abates for the clients that cannot.
//!
//! [`Estimator`] is sans-io: the caller records every answer's latency
//! (`now - sent`) and outcome with [`Estimator::handle_sample`] (or merges a
//! worker's [`Samples`] with [`Estimator::handle_samples`]), then calls
//! [`Estimator::handle_tick`] once per control tick with the server's
//! outstanding requests and the requests offered to and throttled for it
//! since the last tick, and reads [`Estimator::limit`]. Time is an argument.
//!
//! # The algorithm (docs/protect.md has the reasoning and references)
//!
//! - **Baseline**: the server's unloaded latency is the minimum answer
//!   latency over a window of `baseline_window` that forgets slowly (two
//!   half-windows; while a limit is in force it may only fall, so the
//!   controlled queue cannot raise its own reference).
//! - **Queue delay, now**: by Little's law the latency a request sent now
//!   will see is `outstanding / completion rate` (answers per second over
//!   `window`). It reacts at once, where answer latencies lag by the very
//!   queue wait they measure. The server is queueing when it exceeds the
//!   target `baseline * (1 + tolerance) + slack + agent delay`, the last
//!   being the agent's own lateness in the tick ([`Load::agent_delay`]): an
//!   agent starved of CPU reads every answer late, which is no queue at the
//!   server (RFC 7068 §1.2: the agent's own CPU and that of the servers
//!   behind it are different resources, overloaded apart).
//! - **Gradient decrease** (Netflix `GradientLimit`, Clearwater
//!   `load_monitor`): while queueing, the limit is the measured completion
//!   rate times `1 - (delay - target) / drain`, at least `floor` of it: the
//!   excess queue drains in about `drain`. The limit follows the completion
//!   rate, not its own last value, so repeated decreases do not compound.
//! - **Multiplicative decrease on 3004 and timeouts** (AIMD): at most once
//!   per `window`, the limit becomes the rate of successful answers times
//!   `1 - backoff`.
//! - **Additive probe**: while the limit binds (the server receives 90 % of
//!   it or more; requests throttled for less prove nothing) and the server
//!   is not queueing, the
//!   limit grows by `probe * max(limit, anchor)` per second, `anchor` being
//!   the highest completion rate seen in the episode (Clearwater: raise only
//!   when the limit is used). Beyond the anchor the step starts at a tenth
//!   after a cut for a queue (not after a 3004 back-off) and grows to the
//!   full step over 4 s (as CUBIC grows slowly
//!   near its last loss point, RFC 9438 §4.2): at the server's capacity the
//!   limit stays within a few percent of it, and a server whose capacity
//!   grew is still probed at the full step once no cut came for 4 s.
//! - **Slow start after an onset of 3004s**: the first cut of an overload
//!   made while the server also answered 3004 takes a rate that the
//!   rejections have eaten into (a server that spends part of each request's
//!   cost on every 3004 answers few 2001s while flooded), so from there the
//!   limit grows by `SLOW_START_GROWTH` of itself per second until the next
//!   3004 or queue above that level (as TCP's slow start until its first
//!   loss, RFC 5681 §3.1), then probes as above.
//! - **End**: offered load below `end_below` of the limit, the server not
//!   queueing, for `end_after`: the limit is lifted.
//! - **Native**: an answer carrying OC-Supported-Features shows a server
//!   that does DOIC itself ([`Mode::Auto`]); it is then never limited here
//!   (its own reports govern, RFC 7683 §5.1.3 only covers non-supporting
//!   servers).
//!
//! | module | what it holds |
//! | --- | --- |
//! | this one | [`Estimator`]: the limit of one server |
//! | [`behalf`] | [`OnBehalf`]: the HOST report made on the server's behalf, RFC 7683 §5.1.3, §5.2.1.4, §5.2.3 |
//! | [`config`] | [`ProtectConfig`]: the `[doic.protect]` section |
//! | [`gates`] | [`Gates`]: each DOIC client held to its share of the limit, the others to the rest |

pub mod behalf;
pub mod config;
pub mod gates;

pub use behalf::{BehalfReport, ClientLoss, OnBehalf};
pub use config::{ProtectConfig, ProtectConfigError};
pub use gates::Gates;

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

/// Whether a server is protected (`[[peer]] doic`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// Protected until one of its answers carries OC-Supported-Features.
    #[default]
    Auto,
    /// Never protected: it reports its own overload.
    Native,
    /// Always protected, whatever its answers carry.
    Protect,
}

/// The estimator's knobs; [`ProtectParams::default`] gives the defaults
/// documented in docs/protect.md.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ProtectParams {
    /// Latency above `baseline * (1 + tolerance) + slack` is queueing.
    pub tolerance: f64,
    /// Absolute allowance added to the latency target.
    pub slack: Duration,
    /// The time in which the gradient decrease drains the excess queue.
    pub drain: Duration,
    /// Additive increase per second, as a fraction of the larger of the
    /// limit and the episode's highest completion rate.
    pub probe: f64,
    /// Multiplicative decrease on 3004 or a timeout.
    pub backoff: f64,
    /// The gradient decrease keeps at least this fraction of the
    /// completion rate.
    pub floor: f64,
    /// The limit never goes below this many requests per second (RFC 8582
    /// §7.2.1: a rate of 0 would stop a client entirely).
    pub min_limit: u32,
    /// The window over which rates are measured; also the least time
    /// between two decreases on 3004.
    pub window: Duration,
    /// How long the unloaded latency is remembered.
    pub baseline_window: Duration,
    /// Answers in `window`, or requests outstanding, needed to judge the
    /// latency.
    pub min_samples: u64,
    /// The limit ends after the offered load stayed below
    /// `end_below * limit` ...
    pub end_below: f64,
    /// ... for this long.
    pub end_after: Duration,
}

impl Default for ProtectParams {
    fn default() -> Self {
        Self {
            tolerance: 1.0,
            slack: Duration::from_millis(20),
            drain: Duration::from_millis(500),
            probe: 0.1,
            backoff: 0.05,
            floor: 0.1,
            min_limit: 1,
            window: Duration::from_millis(500),
            baseline_window: Duration::from_secs(30),
            min_samples: 20,
            end_below: 0.8,
            end_after: Duration::from_secs(2),
        }
    }
}

/// How an answer (or its absence) came out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Any answer but 3004 from the server.
    Answered,
    /// 3004 DIAMETER_TOO_BUSY from the server.
    Busy,
    /// No answer within the relay's timeout (the agent answered 3002).
    Timeout,
}

/// Answers seen for one server, mergeable: each worker fills its own and the
/// control thread merges them (no shared counter on the request path).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Samples {
    /// Answers other than 3004.
    pub answered: u64,
    /// 3004 answers.
    pub busy: u64,
    /// Requests that timed out.
    pub timeouts: u64,
    /// Answers carrying OC-Supported-Features.
    pub with_features: u64,
    /// The least latency of an answer other than 3004.
    pub min_latency: Option<Duration>,
    /// The sum of the latencies of the answers other than 3004.
    pub latency_sum: Duration,
}

impl Samples {
    /// Records one answer (`latency = now - sent`) or timeout.
    pub fn record(&mut self, latency: Duration, outcome: Outcome, features: bool) {
        self.with_features += u64::from(features);
        match outcome {
            Outcome::Answered => {
                self.answered += 1;
                self.latency_sum += latency;
                self.min_latency = Some(self.min_latency.map_or(latency, |m| m.min(latency)));
            }
            Outcome::Busy => self.busy += 1,
            Outcome::Timeout => self.timeouts += 1,
        }
    }

    /// Adds `other`'s answers to these.
    pub fn merge(&mut self, other: &Samples) {
        self.answered += other.answered;
        self.busy += other.busy;
        self.timeouts += other.timeouts;
        self.with_features += other.with_features;
        self.latency_sum += other.latency_sum;
        self.min_latency = match (self.min_latency, other.min_latency) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
    }

    /// Whether nothing was recorded.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.answered + self.busy + self.timeouts == 0
    }

    /// The mean latency of the answers other than 3004.
    #[must_use]
    pub fn mean_latency(&self) -> Option<Duration> {
        (self.answered > 0).then(|| self.latency_sum.div_f64(self.answered as f64))
    }
}

/// The server's load at a tick, as the relay counts it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Load {
    /// Requests sent to it and not answered yet.
    pub outstanding: u64,
    /// Requests for it since the last tick, throttled ones included.
    pub offered: u64,
    /// Of those, the ones the agent answered itself.
    pub throttled: u64,
    /// The agent's own lateness in the tick: the longest a piece of work
    /// waited in the agent (a request from its read to its dispatch, the
    /// bytes unread in a socket at the rate they are read, a tick on a
    /// worker's queue; the own-load estimator's queue delay). Every answer
    /// may have been read that much late, so it widens the latency target:
    /// an agent starved of CPU must not take its own delay for a queue at
    /// the server.
    pub agent_delay: Duration,
}

/// One tick's record in the rate window.
#[derive(Clone, Copy, Debug)]
struct TickRecord {
    span: Duration,
    samples: Samples,
    load: Load,
}

/// A minimum that forgets: the least of the current and the previous
/// half-window.
#[derive(Clone, Copy, Debug, Default)]
struct ForgettingMin {
    current: Option<Duration>,
    previous: Option<Duration>,
    since: Option<Instant>,
}

impl ForgettingMin {
    fn get(&self) -> Option<Duration> {
        match (self.current, self.previous) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Takes `sample`; with `forget` false the minimum may only fall.
    fn update(&mut self, now: Instant, half: Duration, sample: Duration, forget: bool) {
        let since = *self.since.get_or_insert(now);
        if forget && now.saturating_duration_since(since) >= half {
            self.previous = self.current;
            self.current = None;
            self.since = Some(now);
        }
        self.current = Some(self.current.map_or(sample, |m| m.min(sample)));
    }
}

/// What the estimator saw at the last tick, for metrics and reports.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Measures {
    /// Answers other than 3004 per second over the window.
    pub answered_rate: f64,
    /// All answers per second over the window.
    pub completion_rate: f64,
    /// Requests offered per second over the window.
    pub offered_rate: f64,
    /// Requests admitted (offered, not throttled) per second over the window.
    pub admitted_rate: f64,
    /// The latency a request sent now will see (Little's law), if judged.
    pub delay: Option<Duration>,
    /// The mean latency of the last tick's answers.
    pub latency: Option<Duration>,
    /// Outstanding requests at the last tick.
    pub outstanding: u64,
}

/// The adaptive limit of one upstream server. See the module documentation
/// for the algorithm and the call order.
#[derive(Clone, Debug)]
pub struct Estimator {
    params: ProtectParams,
    mode: Mode,
    native: bool,
    pending: Samples,
    window: VecDeque<TickRecord>,
    last_tick: Option<Instant>,
    baseline: ForgettingMin,
    limit: Option<f64>,
    anchor: f64,
    last_backoff: Option<Instant>,
    calm_since: Option<Instant>,
    /// The last tick's fastest answer was later than the target.
    slow_before: bool,
    /// When the limit was last cut for a queue at the server.
    last_cut: Option<Instant>,
    /// The limit at the onset cut of an overload that began with 3004s:
    /// growing fast from there until a cut above it.
    slow_start: Option<f64>,
    measures: Measures,
}

impl Estimator {
    /// An estimator for a server in `mode`; no limit until it is overloaded.
    #[must_use]
    pub fn new(params: ProtectParams, mode: Mode) -> Self {
        Self {
            params,
            mode,
            native: mode == Mode::Native,
            pending: Samples::default(),
            window: VecDeque::new(),
            last_tick: None,
            baseline: ForgettingMin::default(),
            limit: None,
            anchor: 0.0,
            last_backoff: None,
            calm_since: None,
            slow_before: false,
            last_cut: None,
            slow_start: None,
            measures: Measures::default(),
        }
    }

    /// The parameters.
    #[must_use]
    pub fn params(&self) -> &ProtectParams {
        &self.params
    }

    /// New parameters and mode (a reload of `[doic.protect]` or of the
    /// server's `[[peer]] doic`): what was learnt stays (the limit in force,
    /// the latency baseline, the window) and the next tick follows the new
    /// targets and steps; a server now [`Mode::Native`] leaves protection
    /// at that tick (its limit ends), one now [`Mode::Protect`] is protected
    /// whatever its answers carry.
    pub fn reconfigure(&mut self, params: ProtectParams, mode: Mode) {
        self.params = params;
        if mode != self.mode {
            self.mode = mode;
            self.native = mode == Mode::Native;
        }
    }

    /// The mode it runs in.
    #[must_use]
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// Records one answer or timeout (the time is that of the next tick).
    pub fn handle_sample(&mut self, latency: Duration, outcome: Outcome, features: bool) {
        self.pending.record(latency, outcome, features);
    }

    /// Merges the answers a worker recorded since the last tick.
    pub fn handle_samples(&mut self, samples: &Samples) {
        self.pending.merge(samples);
    }

    /// Whether the server does DOIC itself, so the agent never limits it.
    #[must_use]
    pub fn is_native(&self) -> bool {
        self.native
    }

    /// The limit in force, requests per second; `None` when not limited.
    #[must_use]
    pub fn limit(&self) -> Option<u32> {
        self.limit.map(|l| round_rate(l).max(self.params.min_limit))
    }

    /// The server's unloaded latency as estimated.
    #[must_use]
    pub fn baseline(&self) -> Option<Duration> {
        self.baseline.get()
    }

    /// What the last tick measured.
    #[must_use]
    pub fn measures(&self) -> &Measures {
        &self.measures
    }

    /// The loss percentage that brings the offered load to the limit
    /// (RFC 7683 §6: OC-Reduction-Percentage), 0 when not limited.
    #[must_use]
    pub fn loss_percent(&self) -> u32 {
        let (Some(limit), offered) = (self.limit(), self.measures.offered_rate) else {
            return 0;
        };
        crate::loss::reduction_to(f64::from(limit), offered)
    }

    /// One control tick at `now`: takes the answers recorded since the last
    /// tick and the server's `load`, and moves the limit.
    pub fn handle_tick(&mut self, now: Instant, load: Load) {
        let samples = std::mem::take(&mut self.pending);
        if self.mode == Mode::Auto && samples.with_features > 0 {
            self.native = true;
        }
        if self.native {
            self.limit = None;
            return;
        }
        // Every answer counts for the baseline, the first tick's too (they
        // are the least delayed at the onset of an overload).
        if let Some(min) = samples.min_latency {
            self.baseline.update(
                now,
                self.params.baseline_window / 2,
                min,
                self.limit.is_none(),
            );
        }
        let Some(last) = self.last_tick.replace(now) else {
            return;
        };
        let span = now.saturating_duration_since(last);
        self.window.push_back(TickRecord {
            span,
            samples,
            load,
        });
        let mut covered: Duration = self.window.iter().map(|r| r.span).sum();
        while self.window.len() > 1 && covered - self.window[0].span >= self.params.window {
            covered -= self.window[0].span;
            self.window.pop_front();
        }
        if covered.is_zero() {
            return;
        }
        self.measure(covered, &samples, load);
        self.decide(now, &samples, load.agent_delay);
    }

    fn measure(&mut self, covered: Duration, samples: &Samples, load: Load) {
        let secs = covered.as_secs_f64();
        let mut total = Samples::default();
        let (mut offered, mut throttled) = (0u64, 0u64);
        for r in &self.window {
            total.merge(&r.samples);
            offered += r.load.offered;
            throttled += r.load.throttled;
        }
        let completions = total.answered + total.busy;
        let completion_rate = completions as f64 / secs;
        // Enough answers to judge, or enough requests waiting that their
        // number alone shows a queue (the first tick of an overload).
        let enough =
            completions >= self.params.min_samples || load.outstanding >= self.params.min_samples;
        let delay = enough.then(|| {
            if completion_rate > 0.0 {
                Duration::from_secs_f64((load.outstanding as f64 / completion_rate).min(3600.0))
            } else {
                Duration::from_secs(3600)
            }
        });
        self.measures = Measures {
            answered_rate: total.answered as f64 / secs,
            completion_rate,
            offered_rate: offered as f64 / secs,
            admitted_rate: offered.saturating_sub(throttled) as f64 / secs,
            delay,
            latency: samples.mean_latency(),
            outstanding: load.outstanding,
        };
    }

    fn decide(&mut self, now: Instant, samples: &Samples, agent_delay: Duration) {
        let p = self.params;
        let m = self.measures;
        let target = self
            .baseline
            .get()
            .map(|b| b.mul_f64(1.0 + p.tolerance) + p.slack + agent_delay);
        // CoDel: a standing queue delays even the fastest answer of a tick,
        // here of two ticks in a row (one slow tick is scheduling jitter or
        // a burst); a burst caught in `outstanding` does not. More than a
        // tick's worth of requests waiting is a queue at once, before any
        // answer shows it.
        //
        // A tick without any answer is slow only with requests outstanding
        // (an idle tick shows nothing), and it is no proof of a queue on its
        // own: requests sent just before the tick to a server that answers in
        // microseconds are outstanding too. After an idle spell the window
        // holds no completion, so their number alone would read as an endless
        // delay and cut a healthy server's limit to its floor; two such ticks
        // in a row are a stall.
        let tick = self.window.back().map_or(Duration::ZERO, |r| r.span);
        let slow = match (samples.min_latency, target) {
            (Some(min), Some(t)) => min > t,
            (None, _) => samples.is_empty() && m.outstanding > 0,
            (Some(_), None) => false,
        };
        // Little's law with the window's completion rate also misreads the
        // first tick of load after an idle spell (the window's rate is that
        // of the idle time): it counts only when this tick's answers were
        // slow on average too, as they are behind a queue that forms.
        let mean_fast = match (samples.mean_latency(), target) {
            (Some(mean), Some(t)) => mean <= t,
            _ => false,
        };
        let standing = (slow && self.slow_before)
            || (!samples.is_empty() && !mean_fast && m.delay.is_some_and(|d| d > tick));
        self.slow_before = slow;
        let queueing = match (m.delay, target) {
            (Some(d), Some(t)) if standing && d > t => Some((d - t).as_secs_f64()),
            _ => None,
        };
        let busy = samples.busy + samples.timeouts > 0;
        let tick_rate = samples.answered as f64 / self.window_tail_secs().max(1e-3);
        let basis = m.answered_rate.max(tick_rate);
        let min = f64::from(p.min_limit);
        let mut cut: Option<f64> = None;
        if let Some(excess) = queueing {
            let gradient = (1.0 - excess / p.drain.as_secs_f64()).clamp(p.floor, 1.0);
            cut = Some(basis * gradient);
            // A queue shows the capacity itself: the probe beyond it starts
            // slowly from here (not after a 3004, whose back-off has its own
            // cadence: a server answering 3004 above C is held at C by the
            // probe's full step between back-offs).
            self.last_cut = Some(now);
        }
        let backoff_due = self
            .last_backoff
            .is_none_or(|at| now.saturating_duration_since(at) >= p.window);
        if busy && backoff_due {
            let aimd = basis * (1.0 - p.backoff);
            cut = Some(cut.map_or(aimd, |c| c.min(aimd)));
            self.last_backoff = Some(now);
        }
        if let Some(new) = cut {
            let new = new.max(min);
            // Where the probe returns: the capacity as measured now, but a
            // cut forgets at most a fifth of the capacity seen before (a
            // tick of jitter, or a stalled server, must not ratchet it
            // down; a real fall takes a few cuts).
            self.anchor = if self.limit.is_none() {
                basis
            } else {
                basis.max(ANCHOR_KEEP * self.anchor)
            };
            self.slow_start = match (self.limit, self.slow_start) {
                // The onset: with 3004s in the window, the 2001 rate is
                // what the rejections left of the capacity.
                (None, _) => self
                    .window
                    .iter()
                    .any(|r| r.samples.busy > 0)
                    .then_some(new),
                // A cut above where it began: the capacity is found.
                (Some(limit), Some(from)) if limit > from => None,
                // The onset's queue still draining: from the lower limit.
                (Some(_), Some(from)) => Some(from.min(new)),
                (Some(_), None) => None,
            };
            self.limit = Some(new);
            self.calm_since = None;
            return;
        }
        let Some(limit) = self.limit else {
            return;
        };
        self.anchor = self.anchor.max(m.answered_rate);
        if busy {
            // A 3004 within the back-off window: hold.
            self.calm_since = None;
            return;
        }
        // The limit binds when the server receives about that much: requests
        // throttled by a gate below its share, or by a bucket admitting fewer
        // than its rate, are no sign that the server takes more.
        let binding = m.admitted_rate >= BINDING * limit;
        let dt = self.window_tail_secs();
        if binding && self.slow_start.is_some() {
            self.limit = Some(limit * (1.0 + SLOW_START_GROWTH * dt));
        } else if binding {
            // Back toward the last measured capacity within about a window,
            // then additively beyond it.
            let gap = (self.anchor - limit).max(0.0) * (dt / p.window.as_secs_f64()).min(1.0);
            // Beyond the capacity last measured, slowly at first after a
            // cut (that capacity is likely the server's), faster the longer
            // it holds: the full step `PROBE_RAMP` after the cut (CUBIC's
            // slow growth near the last loss point, RFC 9438 §4.2).
            let since_cut = self
                .last_cut
                .map_or(PROBE_RAMP, |t| now.saturating_duration_since(t));
            let ramp = if limit < self.anchor {
                1.0
            } else {
                (since_cut.as_secs_f64() / PROBE_RAMP.as_secs_f64()).clamp(PROBE_SLOWEST, 1.0)
            };
            let step = p.probe * limit.max(self.anchor) * dt * ramp;
            self.limit = Some(limit + gap + step);
        }
        if m.offered_rate < p.end_below * limit {
            let since = *self.calm_since.get_or_insert(now);
            if now.saturating_duration_since(since) >= p.end_after {
                self.limit = None;
                self.anchor = 0.0;
                self.calm_since = None;
                self.last_backoff = None;
                self.slow_start = None;
            }
        } else {
            self.calm_since = None;
        }
    }

    /// The length of the last tick, seconds.
    fn window_tail_secs(&self) -> f64 {
        self.window.back().map_or(0.0, |r| r.span.as_secs_f64())
    }
}

/// The share of the limit the server must receive for the limit to bind
/// (and the probe to raise it).
const BINDING: f64 = 0.9;

/// How long after a cut the probe beyond the last capacity takes to reach
/// its full step.
const PROBE_RAMP: Duration = Duration::from_secs(4);

/// The probe's least share of its step right after a cut.
const PROBE_SLOWEST: f64 = 0.1;

/// The slow start's growth per second, a share of the limit (5 % per
/// 100 ms tick): from the half of the capacity a 10x flood of 3004s leaves
/// back to it in about 1.5 s.
const SLOW_START_GROWTH: f64 = 0.5;

/// The share of the capacity seen before that a cut keeps as the probe's
/// target.
const ANCHOR_KEEP: f64 = 0.8;

/// A rate as a whole number of requests per second.
fn round_rate(rate: f64) -> u32 {
    // Clamped into u32's range first.
    rate.round().clamp(0.0, f64::from(u32::MAX)) as u32
}

#[cfg(test)]
mod tests;
