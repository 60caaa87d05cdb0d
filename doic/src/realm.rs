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
//! Capacity model: a server with a loss report of p % can take (1 - p/100) of
//! its fair share (1/n of the realm's traffic); with a rate report, the share it
//! actually admitted; a server without a report is assumed to take up to
//! `headroom` times its fair share. The realm's reduction is
//! `1 - mean(capacity)`, rounded up to a whole percent.
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
use crate::audit::{Audit, Counters, OcsEvent, VersionRecord};
use crate::ocs::OcsKey;

pub mod board;

use board::Proposal;
pub use board::RealmBoard;

/// How often the realm capacity is re-evaluated without a new report.
const REEVALUATE: Duration = Duration::from_millis(100);
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

    /// Re-evaluates (`app_id`, `realm`) with the servers a realm-routed request
    /// may go to; `capacity` gives a server's capacity as a share of its fair
    /// share (see the module docs).
    pub fn observe(
        &mut self,
        now: Instant,
        app_id: u32,
        realm: &str,
        servers: &[&str],
        capacity: impl Fn(&str) -> Option<f64>,
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
        if st.servers.is_empty() {
            return;
        }
        #[expect(clippy::cast_precision_loss, reason = "a handful of servers")]
        let n = st.servers.len() as f64;
        let mean: f64 = st
            .servers
            .iter()
            .map(|s| {
                capacity(s)
                    .unwrap_or(self.headroom)
                    .clamp(0.0, self.headroom)
            })
            .sum::<f64>()
            / n;
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
        if percent == st.percent {
            return;
        }
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
        capacity: impl Fn(&str) -> Option<f64>,
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
        self.observe(now, app_id, realm, &views, capacity, audit);
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
            |s| (s == "s1").then_some(0.7),
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
                "s1" => Some(0.7),
                "s2" => Some(0.2),
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
        assert!(r.report(t0 + Duration::from_secs(31), 1, "realm").is_none());
    }
}
