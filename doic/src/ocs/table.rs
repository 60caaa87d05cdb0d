//! The reacting node's bounded table of OCSs keyed by (Application-Id, report
//! type, host / realm / peer): applying accepted reports with the sequence
//! rules of RFC 7683 §5.2.1.3 and RFC 8581 §6.2.3, lookup and selection for
//! a request (RFC 7683 §5.2.1.1), the probe and ramp of the controlled ending
//! (RFC 7683 §5.2.2, RFC 8581 §6.2.5), and the sweep of ended entries.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use super::{Ending, Ocs, OcsKey, Phase, sequence_is_newer};
use crate::audit::{Audit, Counters, OcsEvent, Verdict};
use crate::bucket::BucketConfig;
use crate::fxhash::FxMap;
use crate::loss::Prng;
use crate::rate::{Priority, RateControl};
use crate::report::{Abatement, Report, ReportType};

/// The reacting node's OCS tables for host, realm and peer reports, bounded.
#[derive(Debug)]
pub struct OcsTable {
    map: FxMap<(u32, ReportType), FxMap<String, Ocs>>,
    len: usize,
    max: usize,
    ending: Ending,
    rate: BucketConfig,
    epoch: Option<Instant>,
}

impl OcsTable {
    /// An empty table holding at most `max` entries.
    #[must_use]
    pub fn new(max: usize, ending: Ending, rate: BucketConfig) -> Self {
        Self {
            map: FxMap::default(),
            len: 0,
            max,
            ending,
            rate,
            epoch: None,
        }
    }

    /// The controlled-ending parameters.
    #[must_use]
    pub fn ending(&self) -> Ending {
        self.ending
    }

    /// New controlled-ending and rate-bucket parameters (a reload of
    /// `[doic]`): entries in force keep their versions, phases and buckets;
    /// the next ending and the next bucket made follow the new ones.
    pub fn set_params(&mut self, ending: Ending, rate: BucketConfig) {
        self.ending = ending;
        self.rate = rate;
    }

    /// Ends at once, recording [`OcsEvent::Untrusted`] at `now`, the host
    /// and peer entries whose id `untrusted` names: their reporting node is
    /// no longer trusted (RFC 7683 §10.2). Returns how many were removed.
    pub fn remove_untrusted(
        &mut self,
        now: Instant,
        untrusted: impl Fn(&str) -> bool,
        audit: &mut Audit,
    ) -> usize {
        let mut removed = 0;
        for ((_, rt), inner) in &mut self.map {
            if !matches!(rt, ReportType::Host | ReportType::Peer) {
                continue;
            }
            inner.retain(|id, o| {
                let keep = o.own || !untrusted(id);
                if !keep {
                    audit.version(o.record(now, OcsEvent::Untrusted, o.counts));
                    removed += 1;
                }
                keep
            });
        }
        self.map.retain(|_, m| !m.is_empty());
        self.len -= removed;
        removed
    }

    /// Number of entries (active or ending).
    #[must_use]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the table is empty.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Applies an accepted report for (`app_id`, its type, `id`) received at
    /// `now` (RFC 7683 §5.2.1.3, RFC 8581 §6.2.3).
    pub fn apply(
        &mut self,
        now: Instant,
        app_id: u32,
        id: &str,
        report: &Report,
        audit: &mut Audit,
    ) -> Verdict {
        self.apply_shared(now, app_id, id, report, None, audit)
    }

    /// As [`OcsTable::apply`], with the rate control of another worker's
    /// table for the same report (so that all workers share one bucket).
    pub fn apply_shared(
        &mut self,
        now: Instant,
        app_id: u32,
        id: &str,
        report: &Report,
        shared: Option<&RateControl>,
        audit: &mut Audit,
    ) -> Verdict {
        self.apply_as(now, (app_id, id), report, shared, false, audit)
    }

    /// As [`OcsTable::apply_shared`]; `own`: the report is the agent's,
    /// made on a protected server's behalf (its audit records say so).
    pub fn apply_as(
        &mut self,
        now: Instant,
        (app_id, id): (u32, &str),
        report: &Report,
        shared: Option<&RateControl>,
        own: bool,
        audit: &mut Audit,
    ) -> Verdict {
        let ending = self.ending;
        // Bring an existing entry up to date first, so an expiry is recorded
        // before the update that follows it.
        if let Some(inner) = self.map.get_mut(&(app_id, report.report_type))
            && let Some(o) = inner.get_mut(id)
            && !o.advance(now, ending, audit)
        {
            inner.remove(id);
            self.len -= 1;
        }
        let rate = self.rate.clone();
        let epoch = *self.epoch.get_or_insert(now);
        let inner = self.map.entry((app_id, report.report_type)).or_default();
        // One sequence space per reporting node (RFC 7683 §5.2.1.1, §7.3):
        // the agent's own reports for a server and the server's reports are
        // never compared. A server that reports for itself replaces the
        // report the agent made on its behalf (RFC 7683 §5.1.3 covers only
        // servers that do not support DOIC); the agent's versions, its end
        // among them, never touch the server's.
        if let Some(o) = inner.get(id)
            && o.own != own
        {
            if own {
                return Verdict::Stale;
            }
            if report.validity.is_zero() {
                return Verdict::NoState;
            }
            if let Some(o) = inner.remove(id) {
                audit.version(o.record(now, OcsEvent::Removed, o.counts));
                self.len -= 1;
            }
        }
        if let Some(o) = inner.get_mut(id) {
            let (newer, rollover) = sequence_is_newer(o.sequence, report.sequence);
            if !newer {
                // "MUST silently ignore ... The matching OCS MUST NOT be updated."
                return Verdict::Stale;
            }
            if report.validity.is_zero() {
                // "MUST update the OCS entry as being expired." The ending is
                // shaped by the report that was in force (RFC 7683 §6.3).
                // The agent's own report on a server's behalf ends when its
                // estimate no longer limits the server, the limit having
                // grown until it no longer bound (`crate::protect`): that was
                // the controlled ending (§5.2.3), and the entry goes. Probing
                // after it would refuse all but one request per interval to
                // a server with room, and, a probe's answer being what ends
                // probing, would stay on a worker that sees no more requests
                // for the server.
                let keep = !o.own && (o.phase != Phase::Active || o.begin_ending(now));
                let closed = o.counts;
                o.sequence = report.sequence;
                o.validity = Duration::ZERO;
                o.received_at = now;
                o.expires_at = now;
                o.counts = Counters::default();
                audit.version(o.record(now, OcsEvent::Ended, closed));
                o.delivered.clear();
                o.sent.clear();
                o.gates = None;
                if !keep {
                    audit.version(o.record(now, OcsEvent::Removed, Counters::default()));
                    inner.remove(id);
                    self.len -= 1;
                }
                return Verdict::Ended;
            }
            let closed = o.counts;
            o.sequence = report.sequence;
            o.abatement = report.abatement;
            o.validity = report.validity;
            o.received_at = now;
            o.expires_at = now + report.validity;
            o.counts = Counters::default();
            o.seen_first_step = 0;
            o.throttled_first_step = 0;
            o.phase = Phase::Active;
            o.gates = None;
            o.bucket = match (report.abatement, o.bucket.take()) {
                (Abatement::Rate { .. }, _) if shared.is_some() => shared.cloned(),
                // A new rate for an active rate OCS keeps the bucket's phase.
                (Abatement::Rate { per_second }, Some(b)) => {
                    b.set_rate(now, per_second);
                    Some(b)
                }
                (Abatement::Rate { per_second }, None) => {
                    Some(RateControl::new(epoch, now, per_second, &rate))
                }
                (Abatement::Loss { .. }, _) => None,
            };
            audit.version(o.record(now, OcsEvent::Updated, closed));
            o.delivered.clear();
            o.sent.clear();
            return if rollover {
                Verdict::Rollover
            } else {
                Verdict::Updated
            };
        }
        if report.validity.is_zero() {
            return Verdict::NoState;
        }
        if self.len >= self.max {
            return Verdict::TableFull;
        }
        let o = Ocs {
            key: OcsKey::new(app_id, report.report_type, id),
            sequence: report.sequence,
            abatement: report.abatement,
            validity: report.validity,
            received_at: now,
            expires_at: now + report.validity,
            phase: Phase::Active,
            counts: Counters::default(),
            own,
            bucket: match report.abatement {
                Abatement::Rate { .. } if shared.is_some() => shared.cloned(),
                Abatement::Rate { per_second } => {
                    Some(RateControl::new(epoch, now, per_second, &rate))
                }
                Abatement::Loss { .. } => None,
            },
            gates: None,
            delivered: HashSet::new(),
            sent: HashSet::new(),
            seen_first_step: 0,
            throttled_first_step: 0,
        };
        audit.version(o.record(now, OcsEvent::Created, Counters::default()));
        inner.insert(id.to_owned(), o);
        self.len += 1;
        Verdict::Created
    }

    /// The entry for (`app_id`, `rt`, `id`) brought up to `now`, if any
    /// (RFC 7683 §5.2.2: "determine if that request matches an active OCS").
    pub fn lookup(
        &mut self,
        now: Instant,
        app_id: u32,
        rt: ReportType,
        id: &str,
        audit: &mut Audit,
    ) -> Option<&mut Ocs> {
        let inner = self.map.get_mut(&(app_id, rt))?;
        let alive = inner.get_mut(id)?.advance(now, self.ending, audit);
        if !alive {
            inner.remove(id);
            self.len -= 1;
            return None;
        }
        inner.get_mut(id)
    }

    /// The entry without advancing it (for reading).
    #[must_use]
    pub fn peek(&self, app_id: u32, rt: ReportType, id: &str) -> Option<&Ocs> {
        self.map.get(&(app_id, rt))?.get(id)
    }

    /// Whether a matching request is selected for abatement; counts it as
    /// matched, and as passed when not selected. The caller records the
    /// outcome of a selected request with [`OcsTable::count`].
    pub fn select(
        &mut self,
        now: Instant,
        key: (u32, ReportType, &str),
        priority: Priority,
        rng: &mut Prng,
        audit: &mut Audit,
    ) -> Option<bool> {
        self.select_from(now, key, (None, priority), rng, audit)
    }

    /// [`OcsTable::select`] for a request from the DOIC client `who.0`
    /// (`None`: a client without DOIC), which the gates of a report made on
    /// a server's behalf hold to its share.
    pub fn select_from(
        &mut self,
        now: Instant,
        key: (u32, ReportType, &str),
        who: (Option<&str>, Priority),
        rng: &mut Prng,
        audit: &mut Audit,
    ) -> Option<bool> {
        let ending = self.ending;
        let o = self.lookup(now, key.0, key.1, key.2, audit)?;
        o.counts.matched += 1;
        let selected = o.select(now, who, ending, rng);
        if !selected {
            o.counts.passed += 1;
        }
        Some(selected)
    }

    /// Whether a request would be selected, without counting it (an
    /// alternate being considered for diversion). A rate OCS that lets it
    /// through has admitted it.
    pub fn probe(
        &mut self,
        now: Instant,
        key: (u32, ReportType, &str),
        who: (Option<&str>, Priority),
        rng: &mut Prng,
        audit: &mut Audit,
    ) -> Option<bool> {
        let ending = self.ending;
        let o = self.lookup(now, key.0, key.1, key.2, audit)?;
        Some(o.select(now, who, ending, rng))
    }

    /// Counts a request sent under this OCS after a [`OcsTable::probe`] let
    /// it through: matched and passed.
    pub fn count_passed(&mut self, key: (u32, ReportType, &str)) {
        if let Some(o) = self.get_mut(key.0, key.1, key.2) {
            o.counts.matched += 1;
            o.counts.passed += 1;
        }
    }

    /// Records the outcome of a matched request.
    pub fn count(&mut self, key: (u32, ReportType, &str), outcome: Outcome) {
        if let Some(o) = self.get_mut(key.0, key.1, key.2) {
            let c = &mut o.counts;
            match outcome {
                Outcome::Passed => c.passed += 1,
                Outcome::Diverted(slot) => {
                    c.diverted += 1;
                    c.split.diverted(slot);
                }
                Outcome::Throttled(slot) => {
                    c.throttled += 1;
                    c.split.throttled(slot);
                }
                Outcome::Delegated => c.delegated += 1,
            }
        }
    }

    /// RFC 8581 §5 bookkeeping on a peer OCS: a request bound for the peer went
    /// through the host/realm step and was (or was not) throttled there.
    pub fn note_first_step(&mut self, app_id: u32, peer: &str, throttled: bool) {
        if let Some(o) = self.get_mut(app_id, ReportType::Peer, peer)
            && o.phase == Phase::Active
        {
            o.seen_first_step += 1;
            o.throttled_first_step += u64::from(throttled);
        }
    }

    /// An answer came from the target of (`app_id`, `rt`, `id`) without a new
    /// report: a probing entry begins its ramp (the probe succeeded). Returns
    /// the sequence of the entry that began it, for the other workers
    /// ([`OcsTable::ramp_replicated`]).
    pub fn note_answer(
        &mut self,
        now: Instant,
        app_id: u32,
        rt: ReportType,
        id: &str,
        audit: &mut Audit,
    ) -> Option<u64> {
        self.begin_ramp(now, (app_id, rt, id), None, audit)
    }

    /// Another worker's probe for the entry of `sequence` was answered clean
    /// at `at` ([`OcsTable::note_answer`] there): this worker's entry, when it
    /// holds the same version and is probing, ramps from `at` too, so that
    /// every worker abates the same share (RFC 7683 §6.3, docs/doic.md "The
    /// ramp").
    pub fn ramp_replicated(
        &mut self,
        at: Instant,
        (app_id, rt, id): (u32, ReportType, &str),
        sequence: u64,
        audit: &mut Audit,
    ) {
        let _ = self.begin_ramp(at, (app_id, rt, id), Some(sequence), audit);
    }

    fn begin_ramp(
        &mut self,
        now: Instant,
        (app_id, rt, id): (u32, ReportType, &str),
        sequence: Option<u64>,
        audit: &mut Audit,
    ) -> Option<u64> {
        let o = self.lookup(now, app_id, rt, id, audit)?;
        if !matches!(o.phase, Phase::Probing { .. }) || sequence.is_some_and(|s| s != o.sequence) {
            return None;
        }
        o.phase = Phase::Ramping {
            since: now,
            from: 1.0,
        };
        audit.version(o.record(now, OcsEvent::Ramping, o.counts));
        Some(o.sequence)
    }

    /// Removes entries whose ending is over; returns how many were removed.
    pub fn sweep(&mut self, now: Instant, audit: &mut Audit) -> usize {
        let ending = self.ending;
        let mut removed = 0;
        for inner in self.map.values_mut() {
            inner.retain(|_, o| {
                let keep = o.advance(now, ending, audit);
                removed += usize::from(!keep);
                keep
            });
        }
        self.map.retain(|_, m| !m.is_empty());
        self.len -= removed;
        removed
    }

    /// The next instant at which an entry changes phase by time alone.
    #[must_use]
    pub fn next_deadline(&self) -> Option<Instant> {
        self.map
            .values()
            .flat_map(FxMap::values)
            .map(|o| match o.phase {
                Phase::Active => o.expires_at,
                Phase::Probing { next_probe } => next_probe,
                Phase::Ramping { since, .. } => since + self.ending.ramp,
            })
            .min()
    }

    /// All entries, for inspection.
    pub fn iter(&self) -> impl Iterator<Item = &Ocs> {
        self.map.values().flat_map(FxMap::values)
    }

    /// Mutable entry without advancing (for delivery bookkeeping).
    pub fn get_mut(&mut self, app_id: u32, rt: ReportType, id: &str) -> Option<&mut Ocs> {
        self.map.get_mut(&(app_id, rt))?.get_mut(id)
    }
}

/// The outcome of a request that matched an OCS.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Not selected.
    Passed,
    /// Selected and diverted, to the peer of this slot
    /// ([`crate::audit::Audit::peer_slot`]).
    Diverted(usize),
    /// Selected and throttled, answered as this slot says
    /// ([`crate::treatment::ThrottleAnswer::slot`]).
    Throttled(usize),
    /// Left to the DOIC client, which received the report.
    Delegated,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::OcOlr;

    const ENDING: Ending = Ending {
        probe_interval: Duration::from_secs(1),
        ramp: Duration::from_secs(10),
    };

    fn table() -> (OcsTable, Prng, Audit) {
        (
            OcsTable::new(4, ENDING, BucketConfig::two_priorities()),
            Prng::new(1),
            Audit::new(100),
        )
    }

    fn report(seq: u64, percent: u32, validity: Option<u32>) -> Report {
        let mut o = OcOlr::new(seq, crate::report::ReportType::Host);
        o.reduction_percentage = Some(percent);
        o.validity_duration = validity;
        crate::report::normalise(&o, crate::features::Algorithm::Loss).unwrap()
    }

    #[test]
    fn sequence_rules() {
        // RFC 7683 §5.2.1.3: greater updates; less or equal is ignored.
        let (mut t, _r, mut a) = table();
        let now = Instant::now();
        assert_eq!(
            t.apply(now, 1, "s1", &report(5, 10, None), &mut a),
            Verdict::Created
        );
        assert_eq!(
            t.apply(now, 1, "s1", &report(5, 90, None), &mut a),
            Verdict::Stale
        );
        assert_eq!(
            t.apply(now, 1, "s1", &report(4, 90, None), &mut a),
            Verdict::Stale
        );
        assert_eq!(
            t.peek(1, ReportType::Host, "s1").unwrap().abatement,
            Abatement::Loss { percent: 10 },
            "a stale report MUST NOT update the OCS"
        );
        assert_eq!(
            t.apply(now, 1, "s1", &report(6, 90, None), &mut a),
            Verdict::Updated
        );
        assert_eq!(t.peek(1, ReportType::Host, "s1").unwrap().sequence, 6);
    }

    #[test]
    fn sequence_rollover_boundaries() {
        // RFC 7683 §5.2.1.3: within 1 % of max to within 1 % of min.
        let one = u64::MAX / 100;
        assert_eq!(sequence_is_newer(u64::MAX, 0), (true, true));
        assert_eq!(sequence_is_newer(u64::MAX - one, one), (true, true));
        assert_eq!(sequence_is_newer(u64::MAX - one - 1, one), (false, false));
        assert_eq!(sequence_is_newer(u64::MAX, one + 1), (false, false));
        assert_eq!(sequence_is_newer(3, 4), (true, false));
        let (mut t, _r, mut a) = table();
        let now = Instant::now();
        t.apply(now, 1, "s1", &report(u64::MAX - 3, 10, None), &mut a);
        assert_eq!(
            t.apply(now, 1, "s1", &report(2, 20, None), &mut a),
            Verdict::Rollover
        );
        assert_eq!(t.peek(1, ReportType::Host, "s1").unwrap().sequence, 2);
    }

    #[test]
    fn validity_expiry_is_recorded_at_expiry_and_ramps() {
        let (mut t, _r, mut a) = table();
        let t0 = Instant::now();
        t.apply(t0, 1, "s1", &report(1, 50, Some(5)), &mut a);
        let at = t0 + Duration::from_secs(7);
        let o = t.lookup(at, 1, ReportType::Host, "s1", &mut a).unwrap();
        assert!(matches!(o.phase, Phase::Ramping { from, .. } if (from - 0.5).abs() < 1e-9));
        let expired = a.versions().find(|v| v.event == OcsEvent::Expired).unwrap();
        assert_eq!(expired.at, t0 + Duration::from_secs(5));
        // The ramp ends 10 s after expiry, then the entry is gone.
        assert!(
            t.lookup(
                t0 + Duration::from_secs(15),
                1,
                ReportType::Host,
                "s1",
                &mut a
            )
            .is_none()
        );
        assert!(t.is_empty());
        assert!(a.versions().any(|v| v.event == OcsEvent::Removed));
    }

    #[test]
    fn zero_validity_ends_and_zero_percent_goes_at_once() {
        // RFC 7683 §5.2.1.3: validity 0 marks the entry expired; §6.3: no ramp
        // after a 0 % report.
        let (mut t, _r, mut a) = table();
        let now = Instant::now();
        t.apply(now, 1, "s1", &report(1, 30, None), &mut a);
        assert_eq!(
            t.apply(now, 1, "s1", &report(2, 30, Some(0)), &mut a),
            Verdict::Ended
        );
        assert!(matches!(
            t.peek(1, ReportType::Host, "s1").unwrap().phase,
            Phase::Ramping { .. }
        ));
        t.apply(now, 1, "s2", &report(1, 0, None), &mut a);
        t.apply(now, 1, "s2", &report(2, 0, Some(0)), &mut a);
        assert!(t.peek(1, ReportType::Host, "s2").is_none());
        assert_eq!(
            t.apply(now, 1, "s3", &report(1, 10, Some(0)), &mut a),
            Verdict::NoState
        );
    }

    #[test]
    fn the_agents_own_report_ends_at_once_where_a_received_one_probes() {
        // A report of 100 % ended: received, the entry probes (RFC 7683
        // §6.3); the agent's own on a server's behalf goes (its estimate's
        // growth to no limit was the controlled ending, §5.2.3), also when
        // its entry had already expired into its ramp.
        let (mut t, _r, mut a) = table();
        let now = Instant::now();
        for (id, own) in [("received", false), ("own", true)] {
            t.apply_as(now, (1, id), &report(1, 100, None), None, own, &mut a);
            assert_eq!(
                t.apply_as(now, (1, id), &report(2, 0, Some(0)), None, own, &mut a),
                Verdict::Ended
            );
        }
        assert!(matches!(
            t.peek(1, ReportType::Host, "received").unwrap().phase,
            Phase::Probing { .. }
        ));
        assert!(t.peek(1, ReportType::Host, "own").is_none());
        let removed = a
            .versions()
            .filter(|v| v.event == OcsEvent::Removed)
            .count();
        assert_eq!(removed, 1, "the own entry's removal recorded");
        t.apply_as(
            now,
            (1, "late"),
            &report(1, 50, Some(5)),
            None,
            true,
            &mut a,
        );
        let later = now + Duration::from_secs(7);
        assert!(
            t.lookup(later, 1, ReportType::Host, "late", &mut a)
                .is_some()
        );
        t.apply_as(
            later,
            (1, "late"),
            &report(2, 0, Some(0)),
            None,
            true,
            &mut a,
        );
        assert!(t.peek(1, ReportType::Host, "late").is_none());
    }

    #[test]
    fn total_reduction_probes_then_ramps() {
        // RFC 7683 §6.3: after 100 %, probe before converging.
        let (mut t, mut r, mut a) = table();
        let t0 = Instant::now();
        t.apply(t0, 1, "s1", &report(1, 100, Some(2)), &mut a);
        let key = (1, ReportType::Host, "s1");
        let p = Priority::Normal;
        assert_eq!(t.select(t0, key, p, &mut r, &mut a), Some(true));
        let t1 = t0 + Duration::from_secs(2);
        assert_eq!(
            t.select(t1, key, p, &mut r, &mut a),
            Some(false),
            "first probe"
        );
        assert_eq!(t.select(t1, key, p, &mut r, &mut a), Some(true));
        let t2 = t1 + Duration::from_millis(999);
        assert_eq!(t.select(t2, key, p, &mut r, &mut a), Some(true));
        assert_eq!(
            t.select(t1 + ENDING.probe_interval, key, p, &mut r, &mut a),
            Some(false)
        );
        // The probe's answer comes back clean: ramp from 100 %, on this
        // worker and, replicated, on another one that was probing too.
        let (mut other, _, mut other_audit) = table();
        other.apply(t0, 1, "s1", &report(1, 100, Some(2)), &mut other_audit);
        let began = t
            .note_answer(t2, 1, ReportType::Host, "s1", &mut a)
            .unwrap();
        assert_eq!(began, 1);
        assert!(
            t.note_answer(t2, 1, ReportType::Host, "s1", &mut a)
                .is_none(),
            "once"
        );
        other.ramp_replicated(t2, key, began + 1, &mut other_audit);
        assert!(
            matches!(
                other.peek(1, ReportType::Host, "s1").unwrap().phase,
                Phase::Probing { .. }
            ),
            "another version's ramp is not this one's"
        );
        other.ramp_replicated(t2, key, began, &mut other_audit);
        assert!(matches!(
            other.peek(1, ReportType::Host, "s1").unwrap().phase,
            Phase::Ramping { since, .. } if since == t2
        ));
        let half = t2 + Duration::from_secs(5);
        let passed = (0..10_000)
            .filter(|_| t.select(half, key, p, &mut r, &mut a) == Some(false))
            .count();
        assert!(
            (4_800..5_200).contains(&passed),
            "half way through the ramp: {passed}"
        );
    }

    #[test]
    fn table_is_bounded() {
        // RFC 7683 §10.2: forged reports cannot exhaust memory.
        let (mut t, _r, mut a) = table();
        let now = Instant::now();
        for i in 0..4 {
            assert_eq!(
                t.apply(now, 1, &format!("h{i}"), &report(1, 5, None), &mut a),
                Verdict::Created
            );
        }
        assert_eq!(
            t.apply(now, 1, "h9", &report(1, 5, None), &mut a),
            Verdict::TableFull
        );
        assert_eq!(t.len(), 4);
        // Expired and finished entries free their places.
        t.sweep(now + Duration::from_secs(41), &mut a);
        assert_eq!(
            t.apply(now, 1, "h9", &report(1, 5, None), &mut a),
            Verdict::Created
        );
    }
}
