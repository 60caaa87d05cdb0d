//! Realm reports the agent makes itself, for the mixed Destination-Host /
//! Destination-Realm case (seed 002; RFC 7683 §5.1.3 agent as reporting node,
//! §5.2.1.4 reporting-node OCS maintenance).
//!
//! Realm-routed requests are diverted away from servers with host reports. When
//! the servers of a realm together can no longer carry the realm's traffic, the
//! realm itself is overloaded: the agent makes a realm report (loss) for DOIC
//! clients, and applies the same report itself for clients that did not
//! receive it.
//!
//! Capacity model ([`Capacity`]): a server with a loss report of p % can take
//! (1 - p/100) of its fair share (1/n of the realm's demand); a server with a
//! rate report (RFC 8582, among them the limits the agent holds protected
//! servers to, [`crate::protect`]) takes its rate; a server without a report
//! is assumed to take up to `headroom` times its fair share. The realm's
//! reduction is `1 - mean(capacity)` in fair shares, rounded up to a whole
//! percent. The demand is the realm's arrival rate at the agent over the last
//! second, summed over every core ([`RealmBoard::demand`]), with what the DOIC
//! clients sent the report abate at the source added back: the report's own
//! abatement is not read as headroom.
//!
//! Hysteresis (RFC 7683 §5.2.3, "in a controlled fashion"): a report starts
//! when the realm is short by at least [`START`] percent, changes when the
//! estimate moves by [`STEP`] points or more, and ends (validity 0) when the
//! realm is no longer short; an estimate that weighs a measured demand does
//! so only once it has called for the change for [`DWELL`]. While a report
//! lasts, a new version renews it at half its validity. A realm short by a
//! steady amount keeps one version, its measured demand and its servers'
//! probing limits notwithstanding.
//!
//! With several workers each core keeps its own copy of every realm report
//! (the request path reads it without a lock), but the versions are the
//! agent's: a core whose estimate changes asks the one [`RealmBoard`] for the
//! next sequence number (or takes the version another core already made) and
//! sends the new version to the other cores as a [`RealmReplica`]; a core that
//! sends the report to a client sends that too, so that every core knows which
//! clients abate at the source and applies the report itself for the others.
//!
//! | module | what it holds |
//! | --- | --- |
//! | this one | [`RealmSynth`]: one core's copy, the estimate, the replicas it sends |
//! | [`board`] | [`RealmBoard`]: the agent's versions, one sequence space |

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::report::{Abatement, Report, ReportType};
use crate::audit::record::{IssuedEntry, RealmInputs};
use crate::audit::{Audit, Counters, IssuedRecord, OcsEvent, VersionRecord};
use crate::ocs::OcsKey;

pub mod board;

use board::Proposal;
pub use board::RealmBoard;

/// How often the realm capacity is re-evaluated without a new report.
pub(crate) const REEVALUATE: Duration = Duration::from_millis(100);
/// How long an estimate from measured demand calls for a change before it
/// makes a version.
pub const DWELL: Duration = Duration::from_millis(500);
/// Least shortage, in percent, that starts a report.
pub const START: u32 = 5;
/// Least change of the estimate, in percentage points, that makes a new
/// version of a report in force: the servers' limits probe and cut, and
/// are written into their own versions only when they move by a tenth
/// (`crate::protect::behalf`); the agent's buckets hold each protected
/// server to its limit whatever the realm report asks.
pub const STEP: u32 = 10;

/// A server's capacity as the realm estimate counts it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Capacity {
    /// A share of its fair share (1/n of the realm's demand): a loss
    /// report, a report ramping down.
    Share(f64),
    /// Requests per second: a rate report (RFC 8582 §5), the agent's limit
    /// for a protected server among them.
    Rate(f64),
}
/// Clients remembered per version as having received it.
const MAX_DELIVERED: usize = 1024;

/// One version of the agent's realm report for one (Application-ID, realm).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RealmVersion {
    /// Requested reduction; 0 when the realm is not overloaded.
    pub percent: u32,
    /// OC-Sequence-Number (0: no version yet).
    pub sequence: u64,
    /// When it was made: its validity counts from then.
    pub at: Instant,
    /// For an end of overload (`percent` 0): until when the end report
    /// (validity 0) is still sent.
    pub ending_until: Option<Instant>,
}

/// A version of the agent's realm report one core made, or a client it sent
/// it to, for the other cores ([`crate::Doic::replicate`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RealmReplica {
    /// Application-ID.
    pub app_id: u32,
    /// The realm.
    pub realm: String,
    /// The servers of the realm, as the core that made the version saw them.
    pub servers: Vec<String>,
    /// The version.
    pub version: RealmVersion,
    /// A DOIC client this version was sent to (it abates at the source).
    pub delivered_to: Option<String>,
}

/// The agent's own realm report state for one (Application-ID, realm).
#[derive(Clone, Debug)]
pub struct RealmState {
    servers: Vec<String>,
    /// Requested reduction; 0 when the realm is not overloaded.
    pub percent: u32,
    /// OC-Sequence-Number of the current version.
    pub sequence: u64,
    /// Until when an end-of-overload report (validity 0) is still sent.
    ending_until: Option<Instant>,
    /// When the current version was made.
    made_at: Option<Instant>,
    computed_at: Option<Instant>,
    generation: u64,
    /// Whether the board has `servers`.
    noted: bool,
    delivered: HashSet<String>,
    /// Treatment counts of the current version (agent abating for clients
    /// that did not receive it).
    pub counts: Counters,
    /// Realm-routed requests seen since the last estimate.
    arrivals: u64,
    /// Of those, from DOIC clients sent the version (abated at the source).
    pub delegated_arrivals: u64,
    /// Since when `arrivals` counts.
    counted_since: Option<Instant>,
    /// Since when a measured estimate has called for a new version.
    calling: Option<Instant>,
}

impl RealmState {
    fn new(generation: u64) -> Self {
        Self {
            servers: Vec::new(),
            percent: 0,
            sequence: 0,
            ending_until: None,
            made_at: None,
            computed_at: None,
            generation,
            noted: false,
            delivered: HashSet::new(),
            counts: Counters::default(),
            arrivals: 0,
            delegated_arrivals: 0,
            counted_since: None,
            calling: None,
        }
    }

    /// Whether `client` was sent the current version.
    #[must_use]
    pub fn delivered_to(&self, client: &str) -> bool {
        self.delivered.contains(client)
    }

    /// The version held, for the other cores, with a client it was sent to.
    fn replica(&self, app_id: u32, realm: &str, client: Option<&str>) -> Option<RealmReplica> {
        Some(RealmReplica {
            app_id,
            realm: realm.to_owned(),
            servers: self.servers.clone(),
            version: RealmVersion {
                percent: self.percent,
                sequence: self.sequence,
                at: self.made_at?,
                ending_until: self.ending_until,
            },
            delivered_to: client.map(str::to_owned),
        })
    }

    /// Holds `v` from now on: a new version, nobody has it yet; the closed
    /// version's counts go to the audit record.
    fn hold(&mut self, v: &RealmVersion, key: OcsKey, validity: Duration, audit: &mut Audit) {
        let event = match (self.percent, v.percent) {
            (0, _) => OcsEvent::Created,
            (_, 0) => OcsEvent::Ended,
            _ => OcsEvent::Updated,
        };
        self.percent = v.percent;
        self.sequence = v.sequence;
        self.ending_until = v.ending_until;
        self.made_at = Some(v.at);
        let mut delegated: Vec<String> = self.delivered.drain().collect();
        delegated.sort();
        audit.version(VersionRecord {
            at: v.at,
            key,
            own: true,
            event,
            sequence: v.sequence,
            abatement: Abatement::Loss { percent: v.percent },
            validity: if v.percent == 0 {
                Duration::ZERO
            } else {
                validity
            },
            closed_counts: std::mem::take(&mut self.counts),
            delegated,
            sent_to: Vec::new(),
        });
    }
}

/// One core's copy of the realm reports made by the agent, bounded.
#[derive(Debug)]
pub struct RealmSynth {
    states: HashMap<(u32, String), RealmState>,
    max: usize,
    headroom: f64,
    validity: Duration,
    board: Arc<RealmBoard>,
    generation: u64,
    /// Whether other cores share the board (then [`Self::take_replicas`]
    /// is drained by the caller; a lone core keeps nothing).
    replicate: bool,
    /// Versions made and deliveries made here, for the other cores.
    outbox: Vec<RealmReplica>,
}

impl RealmSynth {
    /// A core's copy, its versions from `board` (shared by every core of
    /// the agent; a lone core has a board of its own). With `replicate`,
    /// the versions and deliveries made here wait in
    /// [`Self::take_replicas`] for the other cores.
    #[must_use]
    pub fn new(
        max: usize,
        headroom: f64,
        validity: Duration,
        board: Arc<RealmBoard>,
        replicate: bool,
    ) -> Self {
        Self {
            states: HashMap::new(),
            max,
            headroom,
            validity,
            board,
            generation: 0,
            replicate,
            outbox: Vec::new(),
        }
    }

    /// New `divert_headroom` and report validity (a reload of `[doic]`):
    /// the versions made are kept, the next estimate uses the new values.
    pub fn set_params(&mut self, headroom: f64, validity: Duration) {
        self.headroom = headroom;
        self.validity = validity;
        self.invalidate();
    }

    /// Whether no realm is tracked.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.states.is_empty()
    }

    /// Marks the capacity estimates stale (a host report changed).
    pub fn invalidate(&mut self) {
        self.generation += 1;
    }

    /// The replicas made since the last call, for the other cores.
    pub fn take_replicas(&mut self) -> Vec<RealmReplica> {
        std::mem::take(&mut self.outbox)
    }

    /// A realm-routed request for (`app_id`, `realm`) that may go to
    /// `servers`: counted in the realm's demand, and the estimate
    /// re-evaluated when due; `capacity` gives a server's [`Capacity`]
    /// (see the module docs).
    pub fn observe(
        &mut self,
        now: Instant,
        app_id: u32,
        realm: &str,
        servers: &[&str],
        capacity: impl Fn(&str) -> Option<Capacity>,
        audit: &mut Audit,
    ) {
        self.evaluate(now, app_id, realm, servers, 1, capacity, audit);
    }

    /// Re-evaluates (`app_id`, `realm`) with `servers`, `arrived` requests
    /// more seen.
    #[expect(
        clippy::too_many_arguments,
        reason = "observe and refresh share it; the inputs are distinct"
    )]
    fn evaluate(
        &mut self,
        now: Instant,
        app_id: u32,
        realm: &str,
        servers: &[&str],
        arrived: u64,
        capacity: impl Fn(&str) -> Option<Capacity>,
        audit: &mut Audit,
    ) {
        let key = (app_id, realm.to_owned());
        let generation = self.generation;
        if !self.states.contains_key(&key) {
            if self.states.len() >= self.max {
                return;
            }
            self.states.insert(key.clone(), RealmState::new(generation));
        }
        let Some(st) = self.states.get_mut(&key) else {
            return;
        };
        st.arrivals += arrived;
        // The set of servers, in whatever order the relay prefers them now
        // (a set that changes from request to request, a realm of more
        // servers than candidates, is re-evaluated on the timer only).
        let same = st.servers.len() == servers.len()
            && servers.iter().all(|s| st.servers.iter().any(|t| t == s));
        if !same {
            st.servers = servers.iter().map(|s| (*s).to_owned()).collect();
            st.noted = false;
        }
        let forced = st.generation != generation;
        if !forced && st.computed_at.is_some_and(|t| now < t + REEVALUATE) {
            return;
        }
        st.computed_at = Some(now);
        st.generation = generation;
        if !st.noted {
            self.board.note_servers(app_id, realm, &st.servers);
            st.noted = true;
        }
        let seen = (
            std::mem::take(&mut st.arrivals),
            std::mem::take(&mut st.delegated_arrivals),
        );
        let from = st.counted_since.replace(now).unwrap_or(now);
        let demand = self.board.demand((from, now), app_id, realm, seen);
        if st.servers.is_empty() {
            return;
        }
        // What the DOIC clients sent the version abate at the source is
        // demand too (the fraction `held` of what they would send).
        let held = f64::from(st.percent.min(99)) / 100.0;
        let demand = demand.map(|(all, delegated)| all + delegated * held / (1.0 - held));
        let Some((mean, measured)) = mean_capacity(&st.servers, demand, self.headroom, capacity)
        else {
            // A rate to weigh and no demand measured yet.
            return;
        };
        let percent = if mean >= 1.0 {
            0
        } else {
            // Saturating conversion of a value in [0, 100].
            #[expect(
                clippy::cast_possible_truncation,
                clippy::cast_sign_loss,
                reason = "in 0..=100"
            )]
            {
                ((1.0 - mean) * 100.0 - 1e-9).ceil().clamp(0.0, 100.0) as u32
            }
        };
        let mut changed = match (st.percent, percent) {
            (0, p) => p >= START,
            (_, 0) => true,
            (h, p) => h.abs_diff(p) >= STEP,
        };
        // An estimate from measured demand against rates that probe and cut
        // tick by tick (`crate::protect`) changes the report only when it
        // has called for the change for `DWELL`; what servers declare (loss)
        // does at once.
        if !changed {
            st.calling = None;
        } else if measured {
            let since = *st.calling.get_or_insert(now);
            changed = now.saturating_duration_since(since) >= DWELL;
            if changed {
                st.calling = None;
            }
        }
        // RFC 7683 §5.2.1.4: a reacting node ignores a version it has, so
        // a report that lasts is renewed with a new one before it expires.
        let renew = st.percent > 0 && st.made_at.is_some_and(|t| now >= t + self.validity / 2);
        if !changed && !renew {
            return;
        }
        let percent = if changed { percent } else { st.percent };
        // RFC 7683 §5.2.1.4: a new sequence whenever the content changes,
        // from the agent's one sequence space.
        let proposal = self.board.propose(
            now,
            app_id,
            realm,
            st.sequence,
            percent,
            forced,
            self.validity,
        );
        let (Proposal::Made(v) | Proposal::Taken(v)) = &proposal;
        let ocs_key = OcsKey::new(app_id, ReportType::Realm, realm);
        st.hold(v, ocs_key, self.validity, audit);
        if let Proposal::Made(v) = proposal {
            tracing::debug!(
                app_id,
                realm,
                percent,
                sequence = v.sequence,
                "own realm report"
            );
            // The version is this core's: its record, once for the agent.
            audit.issued(issued_record(
                &v,
                (app_id, realm),
                self.validity,
                RealmInputs {
                    servers: st.servers.clone(),
                    limits: demand.map(|d| mean * d),
                    demand,
                    capacity_share: mean,
                    shortage_percent: percent,
                },
            ));
            if self.replicate
                && let Some(r) = st.replica(app_id, realm, None)
            {
                self.outbox.push(r);
            }
        }
    }

    /// Re-evaluates (`app_id`, `realm`) with the servers last observed (by
    /// any core), after a host report changed (so the answer carrying that
    /// report can already carry the realm report, seed 002 step 8).
    pub fn refresh(
        &mut self,
        now: Instant,
        app_id: u32,
        realm: &str,
        capacity: impl Fn(&str) -> Option<Capacity>,
        audit: &mut Audit,
    ) {
        let servers = match self.states.get(&(app_id, realm.to_owned())) {
            Some(st) if !st.servers.is_empty() => st.servers.clone(),
            // Realm-routed requests were treated by other cores only.
            _ => match self.board.servers(app_id, realm) {
                Some(s) => s,
                None => return,
            },
        };
        let views: Vec<&str> = servers.iter().map(String::as_str).collect();
        self.evaluate(now, app_id, realm, &views, 0, capacity, audit);
    }

    /// Applies a version or a delivery another core made: a newer version
    /// replaces the one held (sequence rules, RFC 7683 §5.2.1.4: an older
    /// or repeated one changes nothing), and a client that was sent the
    /// version held abates at the source.
    pub fn apply(&mut self, r: &RealmReplica, audit: &mut Audit) {
        let key = (r.app_id, r.realm.clone());
        if !self.states.contains_key(&key) {
            if self.states.len() >= self.max {
                return;
            }
            self.states
                .insert(key.clone(), RealmState::new(self.generation));
        }
        let Some(st) = self.states.get_mut(&key) else {
            return;
        };
        if r.version.sequence > st.sequence {
            if st.servers.is_empty() {
                st.servers.clone_from(&r.servers);
            }
            // The version's estimate is as fresh as this core's would be.
            st.computed_at = Some(r.version.at);
            let ocs_key = OcsKey::new(r.app_id, ReportType::Realm, &r.realm);
            st.hold(&r.version, ocs_key, self.validity, audit);
        }
        if let Some(client) = &r.delivered_to
            && st.sequence == r.version.sequence
            && st.delivered.len() < MAX_DELIVERED
        {
            st.delivered.insert(client.clone());
        }
    }

    /// The report to send for (`app_id`, `realm`) at `now`: an active report,
    /// or the end-of-overload report (validity 0) for a while after it ended.
    #[must_use]
    pub fn report(&self, now: Instant, app_id: u32, realm: &str) -> Option<Report> {
        let st = self.states.get(&(app_id, realm.to_owned()))?;
        let validity = if st.percent > 0 {
            self.validity
        } else if st.ending_until.is_some_and(|t| now < t) {
            Duration::ZERO
        } else {
            return None;
        };
        Some(Report {
            report_type: ReportType::Realm,
            sequence: st.sequence,
            validity,
            abatement: Abatement::Loss {
                percent: st.percent,
            },
            source_id: None,
        })
    }

    /// The state of (`app_id`, `realm`), if the agent has one.
    pub fn state_mut(&mut self, app_id: u32, realm: &str) -> Option<&mut RealmState> {
        self.states.get_mut(&(app_id, realm.to_owned()))
    }

    /// Remembers that `client` was sent the current version; the first time,
    /// the other cores are told too.
    pub fn mark_delivered(&mut self, app_id: u32, realm: &str, client: &str) {
        let Some(st) = self.states.get_mut(&(app_id, realm.to_owned())) else {
            return;
        };
        if st.made_at.is_none()
            || st.delivered.len() >= MAX_DELIVERED
            || st.delivered.contains(client)
        {
            return;
        }
        st.delivered.insert(client.to_owned());
        if self.replicate
            && let Some(r) = st.replica(app_id, realm, Some(client))
        {
            self.outbox.push(r);
        }
    }
}

/// The audit record of the version `v` of the realm report for (`app_id`,
/// `realm`) issued with `inputs` (RFC 7683 §5.1.3, seed 002).
fn issued_record(
    v: &RealmVersion,
    (app_id, realm): (u32, &str),
    validity: Duration,
    inputs: RealmInputs,
) -> IssuedRecord {
    IssuedRecord {
        at: v.at,
        entry: IssuedEntry {
            report_type: "realm".into(),
            to: "*".into(),
            sequence: v.sequence,
            loss_percent: Some(v.percent),
            max_rate: None,
            validity: if v.percent == 0 {
                0.0
            } else {
                validity.as_secs_f64()
            },
            target: Some(realm.to_owned()),
            app_ids: vec![app_id],
            inputs: None,
            server: None,
            realm: Some(inputs),
        },
    }
}

/// The mean capacity of `servers` in fair shares of `demand` (requests/s),
/// each at most `headroom`, and whether a rate was weighed against the
/// demand; `None` when a server has a rate and the demand is not known yet.
fn mean_capacity(
    servers: &[String],
    demand: Option<f64>,
    headroom: f64,
    capacity: impl Fn(&str) -> Option<Capacity>,
) -> Option<(f64, bool)> {
    #[expect(clippy::cast_precision_loss, reason = "a handful of servers")]
    let n = servers.len() as f64;
    let mut sum = 0.0;
    let mut measured = false;
    for s in servers {
        measured |= matches!(capacity(s), Some(Capacity::Rate(_)));
        let share = match capacity(s) {
            None => headroom,
            Some(Capacity::Share(f)) => f,
            Some(Capacity::Rate(r)) => match demand? {
                // No demand: whatever the rate, the realm is not short.
                d if d <= 0.0 => headroom,
                d => r * n / d,
            },
        };
        sum += share.clamp(0.0, headroom);
    }
    Some((sum / n, measured))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn realm_overloaded_only_when_capacity_short() {
        let board = Arc::new(RealmBoard::new(1000, 8));
        let mut r = RealmSynth::new(8, 1.5, Duration::from_secs(30), board, false);
        let mut a = Audit::new(10);
        let t0 = Instant::now();
        let servers = ["s1", "s2", "s3"];
        // S1 at 30 %: (0.7 + 1.5 + 1.5) / 3 > 1, diversion suffices.
        r.observe(
            t0,
            1,
            "realm",
            &servers,
            |s| (s == "s1").then_some(Capacity::Share(0.7)),
            &mut a,
        );
        assert!(r.report(t0, 1, "realm").is_none());
        // S2 at 80 % too: (0.7 + 0.2 + 1.5) / 3 = 0.8 -> realm 20 %.
        r.invalidate();
        r.observe(
            t0,
            1,
            "realm",
            &servers,
            |s| match s {
                "s1" => Some(Capacity::Share(0.7)),
                "s2" => Some(Capacity::Share(0.2)),
                _ => None,
            },
            &mut a,
        );
        let rep = r.report(t0, 1, "realm").unwrap();
        assert_eq!(rep.abatement, Abatement::Loss { percent: 20 });
        assert_eq!(rep.sequence, 1001);
        // Recovery: an end report with a new sequence, for one validity period.
        r.invalidate();
        r.observe(t0, 1, "realm", &servers, |_| None, &mut a);
        let end = r.report(t0, 1, "realm").unwrap();
        assert!(end.validity.is_zero());
        assert_eq!(end.sequence, 1002);
        // Each version issued is recorded once, with the estimate's inputs.
        let issued: Vec<_> = a.take_issued().into_iter().map(|i| i.entry).collect();
        let seen: Vec<_> = issued
            .iter()
            .map(|e| {
                (
                    e.sequence,
                    e.loss_percent,
                    e.validity,
                    e.realm.as_ref().unwrap().shortage_percent,
                )
            })
            .collect();
        assert_eq!(seen, [(1001, Some(20), 30.0, 20), (1002, Some(0), 0.0, 0)]);
        let first = issued[0].realm.as_ref().unwrap();
        assert_eq!(first.servers, servers);
        assert!((first.capacity_share - 0.8).abs() < 1e-9, "{first:?}");
        assert_eq!(
            (issued[0].target.as_deref(), &issued[0].app_ids[..]),
            (Some("realm"), &[1][..])
        );
        assert!(a.take_issued().is_empty(), "taken once");
        assert!(r.report(t0 + Duration::from_secs(31), 1, "realm").is_none());
    }
}

#[cfg(test)]
mod hysteresis {
    use super::*;

    const APP: u32 = 1;
    const SERVERS: [&str; 2] = ["s1", "s2"];

    /// A lone core's realm reports of `validity`, its audit, the start.
    fn synth(validity: u64) -> (RealmSynth, Audit, Instant) {
        let board = Arc::new(RealmBoard::new(1000, 8));
        let r = RealmSynth::new(8, 1.5, Duration::from_secs(validity), board, false);
        (r, Audit::new(100), Instant::now())
    }

    /// Offers `rate` realm-routed requests per second for `ms` from `*t`
    /// (one every millisecond or so), from a DOIC client sent the report
    /// when `delegated`, the servers' rate reports wobbling as the agent's
    /// probing limits do (0.98 and 1.06 of 100 and 300 per second,
    /// alternating every 100 ms).
    /// Returns the sequence numbers of the versions seen.
    fn offer(
        r: &mut RealmSynth,
        a: &mut Audit,
        t: &mut Instant,
        rate: u64,
        ms: u64,
        delegated: bool,
    ) -> Vec<u64> {
        let mut seen = Vec::new();
        let begin = *t;
        let end = *t + Duration::from_millis(ms);
        while *t < end {
            let tick = t.duration_since(begin).as_millis() / 100;
            let wobble = if tick.is_multiple_of(2) { 0.98 } else { 1.06 };
            let cap = |s: &str| {
                Some(Capacity::Rate(
                    wobble * if s == "s1" { 100.0 } else { 300.0 },
                ))
            };
            r.observe(*t, APP, "realm", &SERVERS, cap, a);
            if delegated && let Some(st) = r.state_mut(APP, "realm") {
                st.delegated_arrivals += 1;
            }
            if let Some(rep) = r.report(*t, APP, "realm")
                && seen.last() != Some(&rep.sequence)
            {
                seen.push(rep.sequence);
            }
            *t += Duration::from_micros(1_000_000 / rate);
        }
        seen
    }

    /// A realm of two protected servers held to 100 and 300 requests/s
    /// (RFC 7683 §5.1.3 reports on their behalf, RFC 8582 rates) and
    /// offered three times that: one report version of 67 %, whatever the
    /// limits' probing; the DOIC client that abates at the source on it
    /// does not end it; when the demand falls below the realm's capacity,
    /// the report ends with validity 0 (RFC 7683 §5.2.3).
    #[test]
    fn a_realm_short_by_a_steady_amount_keeps_one_version_until_it_ends() {
        let (mut r, mut a, mut t) = synth(30);
        // Short by 2 %, less than a step: no report.
        let none = offer(&mut r, &mut a, &mut t, 410, 3000, false);
        assert!(none.is_empty(), "no report for a 2 % shortage: {none:?}");
        // Three times the realm's capacity: 1 - 400/1200 = 67 %, once the
        // demand's window (a second) holds it.
        let onset = offer(&mut r, &mut a, &mut t, 1200, 2000, false);
        assert!(!onset.is_empty() && onset.len() <= 3, "{onset:?}");
        let v = offer(&mut r, &mut a, &mut t, 1200, 5000, false);
        assert_eq!(v, onset[onset.len() - 1..], "one version, not one per tick");
        let rep = r.report(t, APP, "realm").unwrap();
        assert!(
            matches!(rep.abatement, Abatement::Loss { percent } if (65..=69).contains(&percent)),
            "{rep:?}"
        );
        // The clients abate at the source: 1,200 x 0.33 reaches the agent,
        // all of it from DOIC clients sent the version. Not headroom.
        let held = offer(&mut r, &mut a, &mut t, 400, 5000, true);
        assert_eq!(held, v, "the report holds while the realm is short");
        // The demand falls to 300/s (100/s abated at the source reaching
        // the agent): no longer short, the report ends with validity 0.
        // It may step down on the way (each step a new version, 10 points or
        // more), as the measured demand follows.
        let ended = offer(&mut r, &mut a, &mut t, 100, 3000, true);
        assert!(ended.len() >= 2 && ended.is_sorted(), "{ended:?}");
        let end = r.report(t, APP, "realm").unwrap();
        assert!(end.validity.is_zero(), "{end:?}");
        // It stays ended at the same demand.
        let after = offer(&mut r, &mut a, &mut t, 300, 3000, false);
        assert_eq!(after, vec![end.sequence], "no new version: {after:?}");
    }

    /// A report that lasts is renewed at half its validity (a reacting node
    /// ignores a version it holds, RFC 7683 §5.2.1.4), the same percentage.
    #[test]
    fn a_lasting_report_is_renewed_at_half_its_validity() {
        let (mut r, mut a, mut t) = synth(4);
        offer(&mut r, &mut a, &mut t, 1200, 2000, false);
        let v = offer(&mut r, &mut a, &mut t, 1200, 4100, false);
        assert_eq!(v.len(), 3, "renewed every 2 s: {v:?}");
        let rep = r.report(t, APP, "realm").unwrap();
        assert_eq!(rep.validity, Duration::from_secs(4));
    }
}
