//! The agent as reporting node for its own overload: RFC 8581 §6.2.4 (peer
//! reports in answers to peers that support them, SourceID = the agent),
//! RFC 8582 §5 (the peer-report algorithm chosen apart from the host/realm
//! one), §6.1 (a rate allocated to each reacting peer, one reporting-node
//! OCS per peer), §6.3 (the allocation recomputed when the set of reacting
//! peers changes), §6.5 and §7.2.1 (OC-Maximum-Rate, never 0 for a sending
//! peer, no OC-Reduction-Percentage), with the OCS
//! maintenance of RFC 7683 §5.2.1.4 (new sequence number on every change,
//! validity 0 at the end, kept long enough) and §5.2.3 (controlled ending).
//!
//! [`OwnLoad`] is sans-io: the control thread measures the request arrival
//! rate of each downstream peer and the workers' utilisation, queue delay
//! and pending transactions ([`Inputs`]), calls [`OwnLoad::handle_load`]
//! once per measurement with `now`, and hands the reports [`OwnLoad::reports`] lists
//! to every worker's core ([`super::Doic::put_own_peer_report`]).
//!
//! # Capacity
//!
//! The capacity is `[doic] own_capacity`, or the one found by measurement
//! while the agent is overloaded by measurement ([`Estimator`], module
//! `measure`), bounded by `own_capacity` when both are there. Without
//! either the agent does not report. A peer that left or failed since the
//! last measurement ([`Inputs::left`]) gives its share back at once (RFC
//! 8582 §8.2 note: the reporting node recomputes its allocation when
//! reacting nodes come and go).
//!
//! # Allocation rule
//!
//! RFC 8582 §6.1 leaves the split of the capacity to the reporting node.
//! The agent splits it in proportion to each peer's *demand*: a peer's
//! demand is its measured arrival rate, except while it is constrained by
//! its allocation (arrivals at 90 % of the allocation or more), when the
//! rate it is seen sending says nothing about what it would send: then its
//! demand is the larger of its current rate and the demand remembered from
//! when it was last unconstrained (at the onset of overload, for a peer that
//! abates from the start). Each sending peer first gets 1 request/s (a rate
//! of 0 would stop it entirely, RFC 8582 §7.2.1), the rest of the capacity
//! is divided in proportion to demand by largest remainder, so the
//! allocations add up to exactly the capacity (unless there are more sending
//! peers than requests per second of capacity, where each keeps 1/s).
//! Proportional shares keep every peer's relative load as it was, need no
//! knowledge of the peers beyond what is measured, and, unlike equal
//! shares, do not hand capacity to peers that would not use it (which
//! would make the total arrival rate fall and the report end and restart).
//!
//! # Peers without the rate algorithm
//!
//! RFC 8581 §6.1.2 lets the agent select another algorithm for the peer
//! reports of a peer that does not support rate: loss (every DOIC node
//! supports loss, RFC 8582 §5). The agent keeps one loss report for all
//! such peers (RFC 7683 §5.2.1.2: one loss OCS per application and report
//! type) asking for `ceil(100 * (1 - capacity / total demand))` percent:
//! with proportional allocation every peer's allocation is that same
//! fraction of its demand, so a loss peer abates exactly as much as a rate
//! peer. Peers that do not support peer reports at all get no report
//! (RFC 7683 §5.2.3: no report of a type the peer did not announce); their
//! load counts in the total, and the agent holds them to their allocation
//! itself (`agent::overload::own`).
//!
//! # When reports change
//!
//! - Start: the total arrival rate is above the capacity (`start_above`).
//! - Update (new sequence number, RFC 7683 §5.2.1.4): a peer's allocation
//!   differs from the one in force by more than `material` (relative, and
//!   at least 2 requests/s), or the loss percentage by 5 points or more, or
//!   half of the validity has passed (a reacting node ignores a report whose
//!   sequence it already has, RFC 8581 §6.2.3, so renewing the validity
//!   takes a new version).
//! - A peer that sends nothing for `end_after` while the overload lasts has
//!   its own report ended (validity 0); until then it keeps its share.
//! - End: the total arrival rate stays below `end_below` of the capacity
//!   for `end_after`; every report is then sent with validity 0 and kept for
//!   one validity period (long enough for any reacting OCS to end, RFC 7683
//!   §5.2.1.4), then dropped.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use super::report::{Abatement, Report, ReportType, Sequencer};

mod measure;
pub use measure::{CpuUse, Estimator, EstimatorParams, Inputs};

/// How the controller decides; see the module documentation.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct OwnLoadParams {
    /// The agent's configured capacity in requests per second (`[doic]
    /// own_capacity`): the capacity while not overloaded by measurement, an
    /// upper bound on the measured one; `None`: measurement only.
    pub capacity: Option<u32>,
    /// Reporting starts when the total arrival rate exceeds
    /// `capacity * start_above`.
    pub start_above: f64,
    /// Reporting ends when the total arrival rate stays below
    /// `capacity * end_below` ...
    pub end_below: f64,
    /// ... for this long.
    pub end_after: Duration,
    /// OC-Validity-Duration of the reports (renewed at half of it).
    pub validity: Duration,
    /// Relative change of a peer's allocation that makes a new version.
    pub material: f64,
    /// How the capacity is found by measurement ([`Estimator`]).
    pub estimator: EstimatorParams,
}

impl OwnLoadParams {
    /// The defaults for a capacity: start above it, end below 80 % of it
    /// for 2 s, validity 10 s, a new version when an allocation moves by
    /// more than 10 %.
    #[must_use]
    pub fn new(capacity: u32) -> Self {
        Self {
            capacity: Some(capacity),
            ..Self::measured()
        }
    }

    /// The defaults without a configured capacity: the agent reports its
    /// own overload only when it finds it by measurement.
    #[must_use]
    pub fn measured() -> Self {
        Self {
            capacity: None,
            start_above: 1.0,
            end_below: 0.8,
            end_after: Duration::from_secs(2),
            validity: Duration::from_secs(10),
            material: 0.1,
            estimator: EstimatorParams::default(),
        }
    }
}

/// One of the agent's own peer reports, as every worker must hold it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OwnReport {
    /// The peer it is for; `None` for the loss report sent to every peer
    /// that supports peer reports but not the rate algorithm.
    pub peer: Option<String>,
    /// The report (type PEER, SourceID = the agent).
    pub report: Report,
    /// Until when it goes in answers (its validity, or for an end report
    /// the period it is kept).
    pub until: Instant,
}

impl OwnReport {
    /// Whether it is an end report (validity 0).
    #[must_use]
    pub fn is_end(&self) -> bool {
        self.report.validity.is_zero()
    }
}

/// What the controller keeps per reacting peer (reporting-node OCS, RFC
/// 8582 §6.1).
#[derive(Clone, Debug)]
struct PeerState {
    allocation: u32,
    demand: f64,
    sent_at: Instant,
    /// Since when it has sent nothing.
    idle_since: Option<Instant>,
}

/// The overload of the agent itself, and the reports it makes for it.
///
/// Call [`OwnLoad::handle_load`] with each measurement, then read
/// [`OwnLoad::reports`] when [`OwnLoad::generation`] changed.
#[derive(Debug)]
pub struct OwnLoad {
    params: OwnLoadParams,
    estimator: Estimator,
    /// The capacity of the last measurement (configured or measured).
    capacity: Option<u32>,
    identity: String,
    sequence: Sequencer,
    reporting: bool,
    below_since: Option<Instant>,
    peers: BTreeMap<String, PeerState>,
    loss: Option<(u32, Instant)>,
    reports: BTreeMap<Option<String>, OwnReport>,
    generation: u64,
    total: f64,
}

impl OwnLoad {
    /// A controller for the agent `identity`. `origin` and
    /// `sequence_base_ms` (milliseconds since the Unix epoch at `origin`)
    /// make the sequence numbers: a timestamp in milliseconds, or the last
    /// one plus one, so they grow across restarts (RFC 7683 §5.2.1.4 note).
    #[must_use]
    pub fn new(
        identity: &str,
        params: OwnLoadParams,
        origin: Instant,
        sequence_base_ms: u64,
    ) -> Self {
        Self {
            params,
            estimator: Estimator::new(params.estimator),
            capacity: params.capacity,
            identity: identity.to_owned(),
            sequence: Sequencer::new(origin, sequence_base_ms),
            reporting: false,
            below_since: None,
            peers: BTreeMap::new(),
            loss: None,
            reports: BTreeMap::new(),
            generation: 0,
            total: 0.0,
        }
    }

    /// The parameters.
    #[must_use]
    pub fn params(&self) -> &OwnLoadParams {
        &self.params
    }

    /// The capacity of the last measurement: the measured one (bounded by
    /// the configured one) while overloaded by measurement, else the
    /// configured one.
    #[must_use]
    pub fn capacity(&self) -> Option<u32> {
        self.capacity
    }

    /// The estimator (whether overloaded by measurement, its estimate).
    #[must_use]
    pub fn estimator(&self) -> &Estimator {
        &self.estimator
    }

    /// Whether the agent is reporting its own overload.
    #[must_use]
    pub fn is_reporting(&self) -> bool {
        self.reporting
    }

    /// The total arrival rate of the last measurement.
    #[must_use]
    pub fn total_rate(&self) -> f64 {
        self.total
    }

    /// The rate allocated to `peer` while reporting.
    #[must_use]
    pub fn allocation(&self, peer: &str) -> Option<u32> {
        self.peers.get(peer).map(|p| p.allocation)
    }

    /// Changes whenever [`OwnLoad::reports`] does.
    #[must_use]
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// The reports in force (active and ending), by peer.
    pub fn reports(&self) -> impl Iterator<Item = &OwnReport> {
        self.reports.values()
    }

    /// Takes a measurement made at `now`: the request arrival rate of each
    /// downstream peer (requests per second, by DiameterIdentity) and, when
    /// measured, the workers' utilisation, queue delay and pending
    /// transactions ([`Inputs`], [`Estimator`]).
    pub fn handle_load<'i>(&mut self, now: Instant, inputs: impl Into<Inputs<'i>>) {
        let inputs = inputs.into();
        let rates = inputs.rates;
        let before = self.generation;
        // Ending reports kept long enough are dropped.
        self.reports.retain(|_, r| !(r.is_end() && now >= r.until));
        self.estimator.handle_load(&inputs);
        self.capacity = match (self.params.capacity, self.estimator.capacity()) {
            (Some(c), Some(e)) => Some(c.min(e)),
            (c, e) => c.or(e),
        };
        let total: f64 = rates.iter().map(|(_, r)| r.max(0.0)).sum();
        self.total = total;
        // RFC 8582 §8.2 note: a peer that left or failed no longer takes a
        // share; its report ends and the others' are recomputed now.
        for p in inputs.left {
            if self.peers.remove(p).is_some() {
                self.end(now, Some(p.clone()));
            }
        }
        let Some(capacity) = self.capacity else {
            if self.reporting {
                tracing::info!(rate = total, "own overload: reporting ends (no capacity)");
                self.end_all(now);
            }
            return;
        };
        let cap = f64::from(capacity);
        if !self.reporting {
            if total > cap * self.params.start_above {
                tracing::info!(rate = total, capacity, "own overload: reporting starts");
                self.reporting = true;
                self.below_since = None;
                self.allocate(now, capacity, rates);
            }
        } else if total < cap * self.params.end_below {
            let since = *self.below_since.get_or_insert(now);
            if now.saturating_duration_since(since) >= self.params.end_after {
                tracing::info!(rate = total, "own overload: reporting ends");
                self.end_all(now);
            } else {
                self.allocate(now, capacity, rates);
            }
        } else {
            self.below_since = None;
            self.allocate(now, capacity, rates);
        }
        if self.generation != before {
            tracing::debug!(generation = self.generation, "own peer reports changed");
        }
    }

    /// Recomputes the allocations and publishes the versions that changed.
    fn allocate(&mut self, now: Instant, capacity: u32, rates: &[(String, f64)]) {
        // Demand per sending peer (see the module documentation), with when
        // it fell silent for a peer keeping its share.
        let mut demands: Vec<(String, f64, Option<Instant>)> = Vec::new();
        for (peer, rate) in rates {
            let rate = rate.max(0.0);
            if rate <= 0.0 {
                continue;
            }
            let demand = match self.peers.get(peer.as_str()) {
                Some(p) if rate >= 0.9 * f64::from(p.allocation) => p.demand.max(rate),
                _ => rate,
            };
            demands.push((peer.clone(), demand, None));
        }
        // A peer silent for less than `end_after` keeps its share (a slow
        // peer's empty window is not an end); after that its report ends.
        let mut stopped = Vec::new();
        for (peer, p) in &self.peers {
            if demands.iter().any(|(q, _, _)| q == peer) {
                continue;
            }
            let since = p.idle_since.unwrap_or(now);
            if now.saturating_duration_since(since) < self.params.end_after {
                demands.push((peer.clone(), p.demand, Some(since)));
            } else {
                stopped.push(peer.clone());
            }
        }
        for p in stopped {
            self.peers.remove(&p);
            self.end(now, Some(p));
        }
        let view: Vec<(&str, f64)> = demands.iter().map(|(p, d, _)| (p.as_str(), *d)).collect();
        let allocations: Vec<u32> = split(capacity, &view).into_iter().map(|(_, a)| a).collect();
        let total_demand: f64 = demands.iter().map(|(_, d, _)| d).sum();
        let half = self.params.validity / 2;
        for ((peer, demand, idle_since), allocation) in demands.into_iter().zip(allocations) {
            let prev = self.peers.get(&peer);
            let changed = prev.is_none_or(|p| {
                let old = f64::from(p.allocation);
                let diff = (f64::from(allocation) - old).abs();
                (diff > self.params.material * old && diff >= 2.0)
                    || now.saturating_duration_since(p.sent_at) >= half
            });
            let (allocation, sent_at) = match prev {
                Some(p) if !changed => (p.allocation, p.sent_at),
                _ => {
                    self.publish(
                        now,
                        Some(peer.clone()),
                        Abatement::Rate {
                            per_second: allocation,
                        },
                    );
                    (allocation, now)
                }
            };
            self.peers.insert(
                peer,
                PeerState {
                    allocation,
                    demand,
                    sent_at,
                    idle_since,
                },
            );
        }
        // The loss report for peers without the rate algorithm.
        let percent = crate::loss::reduction_to(f64::from(capacity), total_demand);
        let renew = match self.loss {
            None => true,
            Some((old, at)) => {
                old.abs_diff(percent) >= 5 || now.saturating_duration_since(at) >= half
            }
        };
        if renew {
            self.loss = Some((percent, now));
            self.publish(now, None, Abatement::Loss { percent });
        }
    }

    /// Ends every report (validity 0).
    fn end_all(&mut self, now: Instant) {
        self.reporting = false;
        self.below_since = None;
        let peers: Vec<String> = std::mem::take(&mut self.peers).into_keys().collect();
        for p in peers {
            self.end(now, Some(p));
        }
        if self.loss.take().is_some() {
            self.end(now, None);
        }
    }

    /// Replaces the report for `peer` by its end version.
    fn end(&mut self, now: Instant, peer: Option<String>) {
        let Some(prev) = self.reports.get(&peer) else {
            return;
        };
        if prev.is_end() {
            return;
        }
        let abatement = prev.report.abatement;
        self.put(now, peer, Duration::ZERO, abatement);
    }

    /// Puts a new version of the report for `peer`.
    fn publish(&mut self, now: Instant, peer: Option<String>, abatement: Abatement) {
        self.put(now, peer, self.params.validity, abatement);
    }

    /// A new version (new sequence) of the report for `peer`, with
    /// `validity` (zero ends it), kept for the configured validity.
    fn put(
        &mut self,
        now: Instant,
        peer: Option<String>,
        validity: Duration,
        abatement: Abatement,
    ) {
        let sequence = self.sequence.next(now);
        let report = self.report(sequence, validity, abatement);
        tracing::debug!(peer = ?peer, ?abatement, sequence, ?validity, "own peer report");
        self.reports.insert(
            peer.clone(),
            OwnReport {
                peer,
                report,
                until: now + self.params.validity,
            },
        );
        self.generation += 1;
    }

    fn report(&self, sequence: u64, validity: Duration, abatement: Abatement) -> Report {
        Report {
            report_type: ReportType::Peer,
            sequence,
            validity,
            abatement,
            source_id: Some(self.identity.clone()),
        }
    }
}

/// Splits `capacity` among peers in proportion to their demand, each at
/// least 1. The shares above that 1 are apportioned by largest remainder
/// (Hamilton's method): each peer first gets the floor of its exact share,
/// then the units the floors left over go one each to the peers with the
/// largest fractional parts. So the sum is exactly `capacity` whenever
/// there are at most `capacity` peers and some demand, and a float product
/// such as `99.0 * d / d` that lands just below an integer costs no unit.
#[must_use]
pub fn split<'a>(capacity: u32, demands: &[(&'a str, f64)]) -> Vec<(&'a str, u32)> {
    let n = u32::try_from(demands.len()).unwrap_or(u32::MAX);
    let rest = capacity.saturating_sub(n);
    let total: f64 = demands.iter().map(|(_, d)| d.max(0.0)).sum();
    if total <= 0.0 || rest == 0 {
        return demands.iter().map(|(p, _)| (*p, 1)).collect();
    }
    let exact: Vec<f64> = demands
        .iter()
        .map(|(_, d)| f64::from(rest) * d.max(0.0) / total)
        .collect();
    #[expect(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        reason = "0..=rest by construction"
    )]
    let mut shares: Vec<u32> = exact
        .iter()
        .map(|e| e.floor().min(f64::from(rest)) as u32)
        .collect();
    let given: u32 = shares.iter().sum();
    let mut order: Vec<usize> = (0..shares.len()).collect();
    order.sort_by(|&a, &b| {
        let (fa, fb) = (exact[a] - exact[a].floor(), exact[b] - exact[b].floor());
        fb.total_cmp(&fa).then(a.cmp(&b))
    });
    for &i in order.iter().take(rest.saturating_sub(given) as usize) {
        shares[i] += 1;
    }
    demands
        .iter()
        .zip(shares)
        .map(|((p, _), s)| (*p, 1 + s))
        .collect()
}

#[cfg(test)]
mod tests;
