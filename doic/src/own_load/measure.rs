//! The agent's own overload found by measurement (RFC 8581 §6.2.4: the
//! agent reports its own overload as a reporting node; RFC 7683 §5.2.1 and
//! RFC 8582 §6.1 leave to the reporting node how it knows it is overloaded
//! and how much it can take).
//!
//! [`Estimator`] is sans-io: each measurement ([`Inputs`], once a second)
//! says how busy each worker was ([`CpuUse`]: the CPU time the kernel
//! accounted to each worker thread and to the process over the interval,
//! against what the agent's cgroup quota allows, read without the workers'
//! help), how long work waited before the agent got to it (queue delay),
//! how many relayed requests wait for their answer (pending) and how many
//! requests per second each peer sent. From them it decides, with
//! hysteresis, whether the agent is overloaded and estimates its capacity
//! in requests per second:
//!
//! - **Utilisation** of the busiest worker: its CPU time over the
//!   interval divided by what it could have had, the interval or the
//!   cgroup's share of it (quota / period) when that is smaller; or the
//!   process's CPU time over the cgroup's share, when that is larger (the
//!   workers share one quota). A worker held to 0.1 CPU that uses 0.1 s of
//!   CPU a second is saturated, although the wall clock says 10 %.
//!
//! - **Overloaded** after `enter_after` consecutive measurements with the
//!   busiest worker's utilisation at `high_utilisation` or more while it
//!   falls behind (requests arrive more than 5 % faster than they are
//!   relayed, or work waits on it: a saturated worker with nothing waiting,
//!   as under a closed-loop client, is well used, not overloaded), or the
//!   queue delay at `high_delay` or more with that worker at
//!   `low_utilisation` or more (with idle workers a delay is the host's
//!   scheduling, not the agent's load; with busy ones the worker counts as
//!   at `high_utilisation` at least), or pending at `high_pending` or
//!   more; **no longer** after `leave_after` consecutive measurements with
//!   utilisation below `low_utilisation`, delay below `low_delay` and
//!   pending below half of `high_pending`, and the offered load within the
//!   capacity estimate (a machine idle because the agent holds its clients
//!   back is not out of overload). Between the two thresholds the
//!   decision stays as it was: noise around one threshold does not flap.
//! - **Capacity**: with the busiest worker's utilisation `u` and `r`
//!   requests per second relayed, each relayed request costs `u / r` of
//!   that worker (what the agent's own throttle answers cost included), so
//!   it can relay `r * target / u` at the target utilisation. Requests
//!   answered to clients that took the agent's report and keep to their
//!   allocation are the exception (`Inputs::answered_reacting`): their
//!   excess passes (what they are still answered is what they sent before
//!   the report reached them, read late: the backlog of the onset), so
//!   each counts as `answer_cost` of a relayed request,
//!   `(r + answer_cost * a) * target / u`. Charged to the relayed
//!   requests, a drain that answers thousands of them while it relays a
//!   few dozen would measure a capacity of a few dozen and hold the
//!   clients there long after the drain. The answers to clients that
//!   keep sending (they ignore the report, or receive none) stay charged
//!   to the relayed requests, which leaves room for answering them, with
//!   one exception: when the busiest worker is saturated, relays what its
//!   allocation allows, and answering every arrival it does not relay
//!   from those clients would alone take the target utilisation, relaying
//!   fewer cannot bring it to its target. Charged to the relays, those
//!   answers would shrink the capacity by the target's fifth a second, to
//!   nothing (answering `O` at `c` of a relay settles where
//!   `E = (target * C - c * O) / (1 - c)`, none once `c * O` reaches the
//!   target); the capacity then stays where it is. What an answer costs
//!   is found from the saturated measurements (`answer_cost` module), at
//!   first `answer_cost` of a relay. The rate is
//!   the relayed one, not the offered one: a saturated worker relays what
//!   it can, whatever arrives, so `r * target / u` stays the capacity when
//!   `u` is at 1 and the offered load is ten times that. Measurements with
//!   `u` below `min_utilisation` say too little and are not used (except
//!   while overloaded, so that a capacity that grew back is found); the
//!   others are smoothed (exponential, weight `smoothing`). The busiest
//!   worker decides: a connection is handled on one worker, and that worker
//!   is the one that falls behind.
//!
//! The capacity [`Estimator::capacity`] gives applies only while the
//! agent is overloaded by measurement; `[doic] own_capacity`, when set, is
//! an upper bound on it ([`super::OwnLoad`]).

use std::time::Duration;

use answer_cost::AnswerCost;

mod answer_cost;

/// The CPU the kernel accounted to the agent over one interval.
#[derive(Clone, Copy, Debug, Default)]
pub struct CpuUse<'a> {
    /// The interval (wall clock).
    pub interval: Duration,
    /// CPU time each worker thread used in it.
    pub workers: &'a [Duration],
    /// CPU time every thread of the process used in it; `None`: not
    /// measured.
    pub process: Option<Duration>,
    /// The share of one CPU the agent's cgroup allows (quota / period);
    /// `None`: no limit known.
    pub quota: Option<f64>,
    /// The share (0 to 1) of the cgroup's enforcement periods in the
    /// interval in which it ran out of quota; `None`: not measured.
    pub throttled: Option<f64>,
}

impl CpuUse<'_> {
    /// The busiest worker's utilisation (0 to 1, see the module
    /// documentation); 0 for an empty interval.
    #[must_use]
    pub fn utilisation(&self) -> f64 {
        let wall = self.interval.as_secs_f64();
        if wall <= 0.0 {
            return 0.0;
        }
        let quota = self.quota.filter(|q| *q > 0.0);
        let per_worker = wall * quota.map_or(1.0, |q| q.min(1.0));
        let busiest = self
            .workers
            .iter()
            .map(|w| w.as_secs_f64() / per_worker)
            .fold(0.0_f64, f64::max);
        let whole = match (self.process, quota) {
            (Some(p), Some(q)) => p.as_secs_f64() / (wall * q),
            _ => 0.0,
        };
        busiest.max(whole).clamp(0.0, 1.0)
    }
}

/// One measurement of the agent's own load.
#[derive(Clone, Copy, Debug, Default)]
pub struct Inputs<'a> {
    /// Requests per second received from each downstream peer, by
    /// DiameterIdentity.
    pub rates: &'a [(String, f64)],
    /// Busy share (0 to 1) of each worker over the interval, as the caller
    /// measured it; empty when not measured. The larger of this and
    /// [`CpuUse::utilisation`] of `cpu` counts.
    pub utilisation: &'a [f64],
    /// The CPU time the kernel accounted to the workers; `None`: not
    /// measured.
    pub cpu: Option<CpuUse<'a>>,
    /// The longest wait of work before the agent got to it, over the
    /// interval: a request's time from its read to its dispatch upstream,
    /// or the bytes unread in a connection's socket over the rate the
    /// agent reads it at.
    pub queue_delay: Duration,
    /// Relayed requests waiting for their answer.
    pub pending: u64,
    /// Requests per second the workers handled and relayed (not answered
    /// by the agent itself); `None`: the sum of `rates`.
    pub relayed: Option<f64>,
    /// Requests per second the agent answered itself for exceeding an
    /// allocation to clients that receive its reports and whose arrivals
    /// keep to their allocation (see the module documentation); the excess
    /// of the others is charged to the relayed requests, unless relaying
    /// fewer does not relieve the worker (see the module documentation).
    pub answered_reacting: f64,
    /// Requests per second the agent answered itself for exceeding an
    /// allocation, every client's (those of `answered_reacting` included).
    pub answered: f64,
    /// Peers whose connection closed or failed since the last measurement
    /// (RFC 8582 §8.2 note: the allocation is recomputed at once).
    pub left: &'a [String],
}

impl<'a> Inputs<'a> {
    /// A measurement of the arrival rates only.
    #[must_use]
    pub fn rates(rates: &'a [(String, f64)]) -> Self {
        Self {
            rates,
            ..Self::default()
        }
    }
}

impl<'a> From<&'a [(String, f64)]> for Inputs<'a> {
    fn from(rates: &'a [(String, f64)]) -> Self {
        Self::rates(rates)
    }
}

impl<'a> From<&'a Vec<(String, f64)>> for Inputs<'a> {
    fn from(rates: &'a Vec<(String, f64)>) -> Self {
        Self::rates(rates)
    }
}

/// How the [`Estimator`] decides; see the module documentation.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct EstimatorParams {
    /// Utilisation of the busiest worker that signals overload.
    pub high_utilisation: f64,
    /// Utilisation below which it is over.
    pub low_utilisation: f64,
    /// Utilisation the capacity estimate aims at.
    pub target_utilisation: f64,
    /// Utilisation below which a measurement says nothing of the capacity.
    pub min_utilisation: f64,
    /// Queue delay that signals overload.
    pub high_delay: Duration,
    /// Queue delay below which it is over.
    pub low_delay: Duration,
    /// Pending transactions that signal overload.
    pub high_pending: u64,
    /// Consecutive measurements over a high threshold to become overloaded.
    pub enter_after: u32,
    /// Consecutive measurements under every low threshold to stop.
    pub leave_after: u32,
    /// Weight of a new capacity sample (0 to 1).
    pub smoothing: f64,
    /// CPU of a request the agent answers itself, as a share of a relayed
    /// request's (`Inputs::answered_reacting`).
    pub answer_cost: f64,
}

impl Default for EstimatorParams {
    /// Overloaded at 90 % utilisation or 20 ms queue delay twice in a row,
    /// over below 70 % and 5 ms for 3 s, capacity for 80 % utilisation.
    fn default() -> Self {
        Self {
            high_utilisation: 0.9,
            low_utilisation: 0.7,
            target_utilisation: 0.8,
            min_utilisation: 0.3,
            high_delay: Duration::from_millis(20),
            low_delay: Duration::from_millis(5),
            high_pending: 100_000,
            enter_after: 2,
            leave_after: 3,
            smoothing: 0.5,
            // A 3004 skips routing, the upstream write and the answer's
            // relay: less than a relayed request, more than nothing. Held
            // to a small CPU share, where what each wake-up costs dominates,
            // the agent answered 3004s at about the CPU of a relayed
            // request (docs/own-overload.md); one half errs on neither side
            // by more than a factor of two.
            answer_cost: 0.5,
        }
    }
}

/// Arrivals above the relayed rate by this share mean the busiest worker
/// falls behind (the rest is measurement noise between two counters).
const ARRIVAL_EXCESS: f64 = 0.05;

/// The allocation binds when the agent relays at least this share of it.
const BINDING: f64 = 0.9;

/// Growth of the pending transactions over a measurement, as a share of
/// the requests relayed in it, within which they count as steady.
const STEADY_PENDING: f64 = 0.1;

/// The own-overload decision and capacity estimate.
#[derive(Clone, Debug)]
pub struct Estimator {
    params: EstimatorParams,
    overloaded: bool,
    /// Consecutive measurements on the other side of the decision.
    streak: u32,
    estimate: Option<f64>,
    /// The utilisation of the last measurement.
    utilisation: f64,
    /// What a relayed request and an answer cost, from the saturated
    /// measurements.
    costs: AnswerCost,
    /// Pending transactions at the last measurement.
    pending: u64,
}

impl Estimator {
    /// An estimator that has measured nothing yet.
    #[must_use]
    pub fn new(params: EstimatorParams) -> Self {
        Self {
            params,
            overloaded: false,
            streak: 0,
            estimate: None,
            utilisation: 0.0,
            costs: AnswerCost::default(),
            pending: 0,
        }
    }

    /// Takes one measurement.
    pub fn handle_load(&mut self, inputs: &Inputs<'_>) {
        let p = &self.params;
        let u = inputs
            .utilisation
            .iter()
            .copied()
            .fold(0.0_f64, f64::max)
            .max(inputs.cpu.map_or(0.0, |c| c.utilisation()))
            .clamp(0.0, 1.0);
        self.utilisation = u;
        let total: f64 = inputs.rates.iter().map(|(_, r)| r.max(0.0)).sum();
        let relayed = inputs.relayed.unwrap_or(total);
        // Queue delay counts with busy workers: with idle ones it is the
        // host's scheduling, which holding clients back would not change.
        // With busy ones the worker is as loaded as the high threshold says,
        // whatever its busy share.
        let delayed = inputs.queue_delay >= p.high_delay && u >= p.low_utilisation;
        let u_cost = if delayed {
            u.max(p.high_utilisation)
        } else {
            u
        };
        // A busy worker alone is a well-used agent, not an overloaded one (a
        // closed-loop client saturates it with nothing waiting): overload is
        // a busy worker that falls behind, work waiting on it (queue delay)
        // or requests arriving faster than it relays them (the kernel's
        // per-peer counts see arrivals before userspace reads them).
        let behind = total > relayed * (1.0 + ARRIVAL_EXCESS);
        let saturated = u >= p.high_utilisation && behind;
        let answered = inputs.answered.max(inputs.answered_reacting).max(0.0);
        // Relayed requests whose answers the worker had not yet handled cost
        // it less in this measurement than they will: only a measurement in
        // which the pending transactions held about steady says what a relay
        // costs.
        #[expect(clippy::cast_precision_loss, reason = "a count")]
        let grown = inputs.pending.saturating_sub(self.pending) as f64;
        self.pending = inputs.pending;
        if saturated && grown <= STEADY_PENDING * relayed {
            self.costs.observe(u, relayed, answered);
        }
        // Saturated, relaying what the allocation allows, with answering
        // every arrival it does not relay from clients that keep sending at
        // or above the target utilisation: relaying fewer would not bring
        // the worker to its target, it would only answer more. An answer
        // costs what the saturated measurements showed, or until they show
        // it `answer_cost` of a relay, this measurement's utilisation shared
        // out at that ratio.
        let binding = self.estimate.is_some_and(|e| relayed >= BINDING * e);
        let answer = self.costs.costs().map_or_else(
            || u * p.answer_cost / (relayed + p.answer_cost * answered),
            |(_, y)| y,
        );
        // Only the answers to clients that keep sending: those to clients
        // that react count at their own cost already (`answered_reacting`).
        let keep_sending = if answered > 0.0 {
            (answered - inputs.answered_reacting.max(0.0)).max(0.0) / answered
        } else {
            1.0
        };
        let answers_fill = saturated
            && binding
            && answer.is_finite()
            && answer * (total - relayed) * keep_sending >= p.target_utilisation;
        // While overloaded every measurement counts, one below
        // `min_utilisation` as if at it: a machine held well below its
        // target sees its capacity grow back, by at most that factor per
        // measurement, never by a near-zero busy share.
        let work = relayed + p.answer_cost * inputs.answered_reacting.max(0.0);
        if (u >= p.min_utilisation || self.overloaded) && work > 0.0 {
            let mut sample = work * p.target_utilisation / u_cost.max(p.min_utilisation);
            if answers_fill {
                // Charged to the relayed requests, the answers to clients that
                // keep sending would shrink the capacity a fifth a second, to
                // nothing: it stays.
                sample = sample.max(self.estimate.unwrap_or(sample));
            }
            let e = self
                .estimate
                .map_or(sample, |e| e + p.smoothing * (sample - e));
            self.estimate = Some(e);
        }
        let high = saturated || delayed || inputs.pending >= p.high_pending;
        // Over only when the load offered would fit: a machine that is idle
        // because the agent holds its clients back is not out of overload.
        let low = u < p.low_utilisation
            && inputs.queue_delay < p.low_delay
            && inputs.pending < p.high_pending / 2
            && self.estimate.is_none_or(|e| total <= e);
        tracing::debug!(
            utilisation = u,
            relayed,
            arriving = total,
            answered_reacting = inputs.answered_reacting,
            answered = inputs.answered,
            queue_delay_ms = inputs.queue_delay.as_secs_f64() * 1000.0,
            pending = inputs.pending,
            estimate = self.estimate.unwrap_or(0.0),
            answers_fill,
            high,
            low,
            "own load measured"
        );
        let crossing = if self.overloaded { low } else { high };
        self.streak = if crossing { self.streak + 1 } else { 0 };
        let needed = if self.overloaded {
            p.leave_after
        } else {
            p.enter_after
        };
        if self.streak >= needed {
            self.overloaded = !self.overloaded;
            self.streak = 0;
            tracing::info!(
                overloaded = self.overloaded,
                utilisation = u,
                queue_delay_ms = inputs.queue_delay.as_secs_f64() * 1000.0,
                pending = inputs.pending,
                estimate = self.estimate.unwrap_or(0.0),
                "own overload by measurement"
            );
        }
    }

    /// Whether the agent is overloaded by measurement.
    #[must_use]
    pub fn is_overloaded(&self) -> bool {
        self.overloaded
    }

    /// The capacity estimate in requests per second, while overloaded by
    /// measurement (at least 1).
    #[must_use]
    pub fn capacity(&self) -> Option<u32> {
        #[expect(
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            reason = "clamped to 1..=u32::MAX"
        )]
        let c = |e: f64| e.round().clamp(1.0, f64::from(u32::MAX)) as u32;
        self.estimate.filter(|_| self.overloaded).map(c)
    }

    /// The busiest worker's utilisation in the last measurement (0 to 1).
    #[must_use]
    pub fn utilisation(&self) -> f64 {
        self.utilisation
    }

    /// The capacity estimate, whether or not the agent is overloaded.
    #[must_use]
    pub fn estimate(&self) -> Option<f64> {
        self.estimate
    }
}

#[cfg(test)]
mod tests;
