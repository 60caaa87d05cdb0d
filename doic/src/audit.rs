//! The evidence trail of seed 003: every overload report received and what was
//! done with it, every version of every overload control state (RFC 7683
//! §5.2.1.1, RFC 8581 §6.2.1.2) with its sequence and validity, and per-version
//! treatment counters with their denominators (matched = passed + diverted +
//! throttled + delegated).
//!
//! Bounded: the newest records are kept, older ones are counted as dropped.
//! The durable form of the same records, one JSON line each, is [`record`];
//! the questions an operator asks of it (timeline, what was active at a
//! moment, the receipt chain of one version) are [`query`].

pub mod query;
pub mod record;

use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant};

use crate::report::{Abatement, OcsKey};
use diameter::codec::doic::OcOlr;

/// Destinations a core tells apart in its diverted counts
/// ([`Audit::peer_slot`]); the last slot counts all the others.
pub const DIVERT_SLOTS: usize = 8;

/// How the abated requests split: throttled by the code of their answer,
/// diverted by where they went (RFC 7683 §5.2.3 abatement, §8 answers),
/// counted where the decision is made, in fixed slots (nothing allocated
/// per request).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Split {
    /// Throttled, by [`crate::treatment::ThrottleAnswer::slot`] (3004,
    /// 5012, 5198).
    pub throttled_by: [u64; 3],
    /// Diverted, by the destination's [`Audit::peer_slot`].
    pub diverted_to: [u64; DIVERT_SLOTS],
}

/// [`Split`] with its slots named: the form of the records.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Spread {
    /// Throttled, by the Result-Code (or Experimental-Result-Code) of the
    /// answer, in decimal (`"5012"`: the keys of a JSON object).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub throttled_by: BTreeMap<String, u64>,
    /// Diverted, by the DiameterIdentity of the peer they went to
    /// (`other` beyond [`DIVERT_SLOTS`] - 1 peers on one worker).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub diverted_to: BTreeMap<String, u64>,
}

impl Spread {
    /// Adds `other` to it.
    pub fn add(&mut self, other: &Spread) {
        for (k, n) in &other.throttled_by {
            *self.throttled_by.entry(k.clone()).or_default() += n;
        }
        for (k, n) in &other.diverted_to {
            *self.diverted_to.entry(k.clone()).or_default() += n;
        }
    }

    /// What it counted beyond `earlier` (a later total of the same counts).
    #[must_use]
    pub fn since(&self, earlier: &Spread) -> Spread {
        let mut d = Spread::default();
        for (k, n) in &self.throttled_by {
            let e = earlier.throttled_by.get(k).copied().unwrap_or(0);
            if *n > e {
                d.throttled_by.insert(k.clone(), n - e);
            }
        }
        for (k, n) in &self.diverted_to {
            let e = earlier.diverted_to.get(k).copied().unwrap_or(0);
            if *n > e {
                d.diverted_to.insert(k.clone(), n - e);
            }
        }
        d
    }
}

impl Split {
    /// Counts a request throttled with the answer of `slot`.
    pub fn throttled(&mut self, slot: usize) {
        if let Some(n) = self.throttled_by.get_mut(slot) {
            *n += 1;
        }
    }

    /// Counts a request diverted to the peer of `slot`.
    pub fn diverted(&mut self, slot: usize) {
        if let Some(n) = self.diverted_to.get_mut(slot) {
            *n += 1;
        }
    }

    /// Its slots named: `peers` are the names of the diverted slots
    /// ([`Audit::peers`]).
    #[must_use]
    pub fn named(&self, peers: &[String]) -> Spread {
        let mut s = Spread::default();
        for (i, n) in self.throttled_by.iter().enumerate() {
            if *n > 0 {
                let code = crate::treatment::ThrottleAnswer::of_slot(i).code();
                s.throttled_by.insert(code.to_string(), *n);
            }
        }
        for (i, n) in self.diverted_to.iter().enumerate() {
            if *n > 0 {
                let name = peers.get(i).map_or("other", String::as_str);
                *s.diverted_to.entry(name.to_owned()).or_default() += n;
            }
        }
        s
    }
}

/// Treatment counts for one OCS version.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Counters {
    /// Requests that matched the OCS while it was in force.
    pub matched: u64,
    /// Matched and not selected for abatement.
    pub passed: u64,
    /// Selected, sent to another candidate instead.
    pub diverted: u64,
    /// Selected and answered locally with an error.
    pub throttled: u64,
    /// Matched requests of a DOIC client that had received this report: the
    /// client abates at the source, the agent does not abate again
    /// (RFC 7683 §5.2.3).
    pub delegated: u64,
    /// How `throttled` and `diverted` split (named in the records:
    /// [`Spread`]).
    #[serde(skip)]
    pub split: Split,
}

impl Counters {
    /// Adds `other`'s counts to it (the split is summed apart, as a
    /// [`Spread`]).
    pub fn add_counts(&mut self, other: &Counters) {
        self.matched += other.matched;
        self.passed += other.passed;
        self.diverted += other.diverted;
        self.throttled += other.throttled;
        self.delegated += other.delegated;
    }
}

/// What happened to a received overload report.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// A new OCS was created.
    Created,
    /// The matching OCS was updated (greater sequence).
    Updated,
    /// Updated across an OC-Sequence-Number rollover (RFC 7683 §5.2.1.3).
    Rollover,
    /// Validity 0: the OCS now ends in a controlled fashion.
    Ended,
    /// Validity 0 for a condition without state: nothing to end.
    NoState,
    /// Sequence less than or equal to the stored one: silently ignored.
    Stale,
    /// From a peer not trusted for DOIC (RFC 7683 §10.2, §10.4).
    Untrusted,
    /// Peer report whose SourceID is not the sending peer (RFC 8581 §6.2.3).
    NotFromPeer,
    /// Outside the scope of the transaction (RFC 7683 §10.1), e.g. a realm
    /// report for a realm the request was not sent to.
    OutOfScope,
    /// Not acted upon: malformed or not supported, with the reason.
    Invalid(String),
    /// The OCS table is full (RFC 7683 §10.2 defence): not stored.
    TableFull,
}

/// One received report.
#[derive(Clone, Debug, PartialEq)]
pub struct ReportRecord {
    /// When the answer carrying it was handled.
    pub at: Instant,
    /// The peer the answer came from.
    pub from_peer: String,
    /// Application-ID of the answer.
    pub app_id: u32,
    /// Origin-Host of the answer.
    pub origin_host: String,
    /// Origin-Realm of the answer.
    pub origin_realm: String,
    /// The report as received.
    pub olr: OcOlr,
    /// What was done with it.
    pub verdict: Verdict,
    /// How many times the same report came again after this one, from the
    /// same peer in answers of the same origin, and was ignored as stale
    /// (RFC 7683 §5.2.1.3): a reporting node repeats its report in every
    /// answer, so a repeat is counted here, not kept as a record of its own
    /// (a trail of repeats would push out the records that matter, and
    /// rendering it would cost the worker that keeps it).
    pub repeats: u64,
}

impl ReportRecord {
    /// A hash of what makes two records the same report.
    fn identity(&self) -> u64 {
        use std::hash::{Hash, Hasher};
        let mut h = crate::fxhash::FxHasher::default();
        (
            &self.from_peer,
            self.app_id,
            &self.origin_host,
            &self.origin_realm,
        )
            .hash(&mut h);
        let o = &self.olr;
        (
            o.sequence_number,
            o.report_type.value(),
            o.reduction_percentage,
            o.validity_duration,
            &o.source_id,
            o.maximum_rate,
        )
            .hash(&mut h);
        h.finish()
    }

    /// Whether `other` is this report again.
    fn same_report(&self, other: &ReportRecord) -> bool {
        self.from_peer == other.from_peer
            && self.app_id == other.app_id
            && self.origin_host == other.origin_host
            && self.origin_realm == other.origin_realm
            && self.olr == other.olr
    }
}

impl Verdict {
    /// The verdict's name in metrics (`doic_reports_received_total{outcome}`).
    #[must_use]
    pub fn name(&self) -> &'static str {
        VERDICT_NAMES[self.index()]
    }

    fn index(&self) -> usize {
        match self {
            Verdict::Created => 0,
            Verdict::Updated => 1,
            Verdict::Rollover => 2,
            Verdict::Ended => 3,
            Verdict::NoState => 4,
            Verdict::Stale => 5,
            Verdict::Untrusted => 6,
            Verdict::NotFromPeer => 7,
            Verdict::OutOfScope => 8,
            Verdict::Invalid(_) => 9,
            Verdict::TableFull => 10,
        }
    }
}

/// [`Verdict::name`] by index.
const VERDICT_NAMES: [&str; 11] = [
    "created",
    "updated",
    "rollover",
    "ended",
    "nostate",
    "stale",
    "untrusted",
    "notfrompeer",
    "outofscope",
    "invalid",
    "tablefull",
];

/// An event in the life of an OCS.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OcsEvent {
    /// First version of a new overload condition.
    Created,
    /// A new version (greater sequence) replaced the previous one.
    Updated,
    /// The validity ran out; the controlled ending begins.
    Expired,
    /// A report with validity 0 ended it; the controlled ending begins.
    Ended,
    /// Probes got answers without a new report: the ramp begins.
    Ramping,
    /// The ramp is over; the state is gone and traffic is unrestricted.
    Removed,
    /// A reload made its reporting peer untrusted (RFC 7683 §10.2: its
    /// reports are no longer honoured): the state is gone at once, without
    /// a controlled ending.
    Untrusted,
}

/// One OCS version event.
#[derive(Clone, Debug, PartialEq)]
pub struct VersionRecord {
    /// When it happened (for an expiry: the instant of expiry).
    pub at: Instant,
    /// Which OCS.
    pub key: OcsKey,
    /// The agent's own report (reporting side, e.g. the realm report of seed
    /// 002) rather than state made from a received one.
    pub own: bool,
    /// The event.
    pub event: OcsEvent,
    /// OC-Sequence-Number of the version in force after the event.
    pub sequence: u64,
    /// Its abatement.
    pub abatement: Abatement,
    /// Its validity.
    pub validity: Duration,
    /// Treatment counts of the version that this event closes (zero for
    /// `Created`).
    pub closed_counts: Counters,
    /// The DOIC clients that were sent the version this event closes
    /// (sorted).
    pub delegated: Vec<String>,
    /// The DOIC clients that were sent the version this event closes and
    /// that the agent still holds to it (sorted; the HOST reports on a
    /// server's behalf, RFC 7683 §5.1.3).
    pub sent_to: Vec<String>,
}

/// A report the agent issued (a HOST report on a server's behalf made by
/// the control path, a REALM report made by a core), as the durable log
/// records it.
#[derive(Clone, Debug, PartialEq)]
pub struct IssuedRecord {
    /// When it was issued.
    pub at: Instant,
    /// The record.
    pub entry: record::IssuedEntry,
}

/// Agent-wide treatment totals.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Totals {
    /// Requests treated.
    pub requests: u64,
    /// Forwarded to the first-choice next hop.
    pub forwarded: u64,
    /// Forwarded to another candidate.
    pub diverted: u64,
    /// Answered locally with an error.
    pub throttled: u64,
    /// Without any candidate next hop (answered 3002 by the relay); requests
    /// = forwarded + diverted + throttled + no_route.
    pub no_route: u64,
    /// How `throttled` and `diverted` split (named in the records:
    /// [`Spread`]).
    #[serde(skip)]
    pub split: Split,
}

impl Totals {
    /// Adds `other`'s counts to it (the split is summed apart, as a
    /// [`Spread`]).
    pub fn add_counts(&mut self, other: &Totals) {
        self.requests += other.requests;
        self.forwarded += other.forwarded;
        self.diverted += other.diverted;
        self.throttled += other.throttled;
        self.no_route += other.no_route;
    }
}

/// The evidence trail.
#[derive(Debug)]
pub struct Audit {
    cap: usize,
    reports: VecDeque<ReportRecord>,
    versions: VecDeque<VersionRecord>,
    /// Reports issued by this core (its REALM versions) not yet taken by
    /// [`Audit::take_issued`]: at most `cap`, older ones dropped.
    issued: VecDeque<IssuedRecord>,
    /// Records evicted because the trail was full.
    pub dropped: u64,
    /// Agent-wide totals.
    pub totals: Totals,
    /// Records of each kind ever kept, and of those already taken by
    /// [`Audit::take_new`].
    pushed: (u64, u64),
    taken: (u64, u64),
    /// The destinations of diverted requests, by slot ([`Audit::peer_slot`]).
    peers: Vec<String>,
    /// Reports received, by verdict ([`Verdict::name`]), ever.
    verdicts: [u64; VERDICT_NAMES.len()],
    /// The newest record of each report ([`ReportRecord::identity`]), by
    /// its number among the records ever kept.
    latest: crate::fxhash::FxMap<u64, u64>,
}

impl Audit {
    /// A trail keeping the newest `cap` records of each kind.
    #[must_use]
    pub fn new(cap: usize) -> Self {
        Self {
            cap: cap.max(1),
            reports: VecDeque::new(),
            versions: VecDeque::new(),
            issued: VecDeque::new(),
            dropped: 0,
            totals: Totals::default(),
            pushed: (0, 0),
            taken: (0, 0),
            peers: Vec::new(),
            verdicts: [0; VERDICT_NAMES.len()],
            latest: crate::fxhash::FxMap::default(),
        }
    }

    /// The slot of `peer` in the diverted counts ([`Split::diverted_to`]):
    /// its own for the first [`DIVERT_SLOTS`] - 1 destinations seen (a name
    /// stored once), the last one for any other. Called when a request is
    /// diverted, never on the plain forwarding path.
    pub fn peer_slot(&mut self, peer: &str) -> usize {
        if let Some(i) = self.peers.iter().position(|p| p == peer) {
            return i;
        }
        if self.peers.len() < DIVERT_SLOTS - 1 {
            self.peers.push(peer.to_owned());
            return self.peers.len() - 1;
        }
        DIVERT_SLOTS - 1
    }

    /// The names of the diverted slots ([`Split::named`]).
    #[must_use]
    pub fn peers(&self) -> &[String] {
        &self.peers
    }

    /// Records a received report.
    ///
    /// A stale repeat of the newest record of the same report is counted in
    /// that record ([`ReportRecord::repeats`]), not kept again.
    pub fn report(&mut self, r: ReportRecord) {
        self.verdicts[r.verdict.index()] += 1;
        let id = r.identity();
        if r.verdict == Verdict::Stale
            && let Some(&n) = self.latest.get(&id)
            && let Some(i) = n.checked_sub(self.pushed.0 - self.reports.len() as u64)
            && let Some(kept) = usize::try_from(i)
                .ok()
                .and_then(|i| self.reports.get_mut(i))
            && kept.same_report(&r)
        {
            kept.repeats += 1;
            return;
        }
        tracing::debug!(from = %r.from_peer, seq = r.olr.sequence_number, verdict = ?r.verdict, "overload report");
        if self.reports.len() == self.cap {
            self.reports.pop_front();
            self.dropped += 1;
        }
        self.reports.push_back(r);
        if self.latest.len() >= self.cap {
            // Bounded: the map is only a shortcut to the newest records.
            self.latest.clear();
        }
        self.latest.insert(id, self.pushed.0);
        self.pushed.0 += 1;
    }

    /// Reports received ever, by verdict name ([`Verdict::name`]), those
    /// counted only in a record's repeats included.
    pub fn verdict_counts(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        VERDICT_NAMES
            .iter()
            .zip(self.verdicts)
            .filter(|(_, n)| *n > 0)
            .map(|(name, n)| (*name, n))
    }

    /// Records an OCS version event.
    pub fn version(&mut self, v: VersionRecord) {
        tracing::debug!(key = ?v.key, event = ?v.event, seq = v.sequence, "ocs version");
        if self.versions.len() == self.cap {
            self.versions.pop_front();
            self.dropped += 1;
        }
        self.versions.push_back(v);
        self.pushed.1 += 1;
    }

    /// Records a report this core issued (a version it made, once).
    pub fn issued(&mut self, r: IssuedRecord) {
        if self.issued.len() == self.cap {
            self.issued.pop_front();
            self.dropped += 1;
        }
        self.issued.push_back(r);
    }

    /// The issued reports recorded since the last call, oldest first
    /// (for the durable log, at the worker's tick).
    pub fn take_issued(&mut self) -> Vec<IssuedRecord> {
        self.issued.drain(..).collect()
    }

    /// The records kept since the last call, oldest first: what the durable
    /// log has not been given yet (records evicted meanwhile are in
    /// [`Audit::dropped`]).
    pub fn take_new(&mut self) -> (Vec<ReportRecord>, Vec<VersionRecord>) {
        fn newer<T: Clone>(q: &VecDeque<T>, pushed: u64, taken: &mut u64) -> Vec<T> {
            let fresh = usize::try_from(pushed - *taken)
                .unwrap_or(usize::MAX)
                .min(q.len());
            *taken = pushed;
            q.iter().skip(q.len() - fresh).cloned().collect()
        }
        (
            newer(&self.reports, self.pushed.0, &mut self.taken.0),
            newer(&self.versions, self.pushed.1, &mut self.taken.1),
        )
    }

    /// The report records, oldest first.
    pub fn reports(&self) -> impl Iterator<Item = &ReportRecord> {
        self.reports.iter()
    }

    /// The OCS version records, oldest first.
    pub fn versions(&self) -> impl Iterator<Item = &VersionRecord> {
        self.versions.iter()
    }

    /// The trail as JSON for operators (CLI queries, metrics endpoints), with
    /// times in seconds since `origin`.
    #[must_use]
    pub fn to_json(&self, origin: Instant) -> serde_json::Value {
        use serde_json::json;
        let secs = |t: Instant| t.saturating_duration_since(origin).as_secs_f64();
        let abatement = |a: Abatement| match a {
            Abatement::Loss { percent } => json!({ "loss_percent": percent }),
            Abatement::Rate { per_second } => json!({ "max_rate": per_second }),
        };
        let counts = |c: Counters| {
            json!({
                "matched": c.matched, "passed": c.passed, "diverted": c.diverted,
                "throttled": c.throttled, "delegated": c.delegated,
            })
        };
        let reports: Vec<_> = self
            .reports
            .iter()
            .map(|r| {
                json!({
                    "at": secs(r.at), "from_peer": r.from_peer, "app_id": r.app_id,
                    "origin_host": r.origin_host, "origin_realm": r.origin_realm,
                    "sequence": r.olr.sequence_number, "report_type": r.olr.report_type.value(),
                    "reduction_percentage": r.olr.reduction_percentage,
                    "maximum_rate": r.olr.maximum_rate,
                    "validity_duration": r.olr.validity_duration,
                    "source_id": r.olr.source_id,
                    "verdict": format!("{:?}", r.verdict),
                    "repeats": r.repeats,
                })
            })
            .collect();
        let versions: Vec<_> = self
            .versions
            .iter()
            .map(|v| {
                json!({
                    "at": secs(v.at), "app_id": v.key.app_id,
                    "report_type": v.key.report_type.value(), "id": v.key.id, "own": v.own,
                    "event": format!("{:?}", v.event), "sequence": v.sequence,
                    "abatement": abatement(v.abatement),
                    "validity": v.validity.as_secs_f64(),
                    "closed_counts": counts(v.closed_counts),
                })
            })
            .collect();
        let t = self.totals;
        json!({
            "reports": reports,
            "versions": versions,
            "dropped": self.dropped,
            "totals": {
                "requests": t.requests, "forwarded": t.forwarded,
                "diverted": t.diverted, "throttled": t.throttled, "no_route": t.no_route,
            },
        })
    }
}

/// The evidence of every worker of an agent as JSON (`GET /audit`): its
/// DiameterIdentity and, in worker order, each worker's trail
/// ([`Audit::to_json`]).
#[must_use]
pub fn workers_json(
    identity: &str,
    trails: impl IntoIterator<Item = serde_json::Value>,
) -> serde_json::Value {
    let workers: Vec<_> = trails
        .into_iter()
        .enumerate()
        .map(|(i, audit)| serde_json::json!({ "worker": i, "audit": audit }))
        .collect();
    serde_json::json!({ "identity": identity, "workers": workers })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::ReportType;

    #[test]
    fn trail_is_bounded_and_counts_drops() {
        let mut a = Audit::new(2);
        let now = Instant::now();
        for seq in 0..5 {
            a.version(VersionRecord {
                at: now,
                key: OcsKey::new(1, ReportType::Host, "s1"),
                own: false,
                event: OcsEvent::Created,
                sequence: seq,
                abatement: Abatement::Loss { percent: 1 },
                validity: Duration::ZERO,
                closed_counts: Counters::default(),
                delegated: Vec::new(),
                sent_to: Vec::new(),
            });
            if seq == 1 {
                assert_eq!(a.take_new().1.len(), 2, "both kept so far");
            }
        }
        let (_, fresh) = a.take_new();
        assert_eq!(
            fresh.iter().map(|v| v.sequence).collect::<Vec<_>>(),
            [3, 4],
            "what is still kept of what came since"
        );
        assert!(a.take_new().1.is_empty());
        assert_eq!(a.versions().count(), 2);
        assert_eq!(a.versions().next().unwrap().sequence, 3);
        assert_eq!(a.dropped, 3);
        let j = a.to_json(now);
        assert_eq!(j["versions"].as_array().unwrap().len(), 2);
        assert_eq!(j["versions"][0]["sequence"], 3);
        assert_eq!(j["versions"][0]["event"], "Created");
        assert_eq!(j["versions"][0]["abatement"]["loss_percent"], 1);
        assert_eq!(j["dropped"], 3);
    }

    #[test]
    fn divert_slots_name_the_first_destinations_and_pool_the_rest() {
        let mut a = Audit::new(1);
        let mut split = Split::default();
        for i in 0..10 {
            let slot = a.peer_slot(&format!("p{i}"));
            split.diverted_to[slot] += 1;
        }
        assert_eq!(a.peer_slot("p3"), 3, "a name keeps its slot");
        split.throttled_by[0] += 2;
        split.throttled_by[2] += 1;
        let named = split.named(a.peers());
        assert_eq!(named.diverted_to["p0"], 1);
        assert_eq!(named.diverted_to["other"], 3, "p7, p8, p9");
        assert_eq!(named.diverted_to.len(), DIVERT_SLOTS);
        assert_eq!(
            named.throttled_by.into_iter().collect::<Vec<_>>(),
            [("3004".to_owned(), 2), ("5198".to_owned(), 1)]
        );
        let later = Spread {
            throttled_by: [("3004".to_owned(), 5)].into(),
            diverted_to: [("p0".to_owned(), 1), ("p1".to_owned(), 4)].into(),
        };
        let d = later.since(&split.named(a.peers()));
        assert_eq!(d.throttled_by, [("3004".to_owned(), 3)].into());
        assert_eq!(d.diverted_to, [("p1".to_owned(), 3)].into());
    }

    #[test]
    fn workers_json_names_the_agent_and_each_worker() {
        let trails = [serde_json::json!({"reports": []}), serde_json::Value::Null];
        let v = workers_json("agent.example", trails);
        assert_eq!(v["identity"], "agent.example");
        assert_eq!(v["workers"][0]["worker"], 0);
        assert_eq!(v["workers"][0]["audit"]["reports"], serde_json::json!([]));
        assert_eq!(v["workers"][1]["worker"], 1);
        assert!(v["workers"][1]["audit"].is_null());
        assert_eq!(v["workers"].as_array().map(Vec::len), Some(2));
    }

    fn received(seq: u64, verdict: Verdict, at: Instant) -> ReportRecord {
        let mut olr = OcOlr::new(seq, crate::report::ReportType::Host);
        olr.reduction_percentage = Some(50);
        ReportRecord {
            at,
            from_peer: "core.example".into(),
            app_id: 4,
            origin_host: "s1.example".into(),
            origin_realm: "example".into(),
            olr,
            verdict,
            repeats: 0,
        }
    }

    #[test]
    fn a_report_repeated_in_every_answer_is_one_record_with_its_repeats() {
        // A reporting node sends its report in every answer (RFC 7683
        // §5.2.1.3: the repeats are stale, silently ignored): 10,000 answers
        // make one record, not a full trail of repeats.
        let t0 = Instant::now();
        let mut a = Audit::new(100);
        a.report(received(7, Verdict::Created, t0));
        for _ in 0..9_999 {
            a.report(received(7, Verdict::Stale, t0));
        }
        let kept: Vec<_> = a.reports().collect();
        assert_eq!(kept.len(), 1);
        assert_eq!(
            (kept[0].verdict.clone(), kept[0].repeats),
            (Verdict::Created, 9_999)
        );
        assert_eq!(a.dropped, 0);
        // The counts by verdict are of every report received.
        let counts: BTreeMap<_, _> = a.verdict_counts().collect();
        assert_eq!(counts, [("created", 1), ("stale", 9_999)].into());
        // A new version is a record of its own; a stale report of another
        // content (an older sequence) too.
        a.report(received(8, Verdict::Updated, t0));
        a.report(received(8, Verdict::Stale, t0));
        a.report(received(6, Verdict::Stale, t0));
        let kept: Vec<_> = a
            .reports()
            .map(|r| (r.olr.sequence_number, r.repeats))
            .collect();
        assert_eq!(kept, [(7, 9_999), (8, 1), (6, 0)]);
        // Once the record left the trail, a repeat is kept again.
        for seq in 100..200 {
            a.report(received(seq, Verdict::Created, t0));
        }
        a.report(received(8, Verdict::Stale, t0));
        assert_eq!(
            a.reports()
                .last()
                .map(|r| (r.olr.sequence_number, r.repeats)),
            Some((8, 0))
        );
        assert_eq!(a.reports().count(), 100);
    }
}
