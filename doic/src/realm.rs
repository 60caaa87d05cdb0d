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

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use super::report::{Abatement, Report, ReportType};
use crate::audit::{Audit, Counters, OcsEvent, VersionRecord};
use crate::ocs::OcsKey;

/// How often the realm capacity is re-evaluated without a new report.
const REEVALUATE: Duration = Duration::from_millis(100);
/// Clients remembered per version as having received it.
const MAX_DELIVERED: usize = 1024;

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
    computed_at: Option<Instant>,
    generation: u64,
    delivered: HashSet<String>,
    /// Treatment counts of the current version (agent abating for clients
    /// that did not receive it).
    pub counts: Counters,
}

impl RealmState {
    /// Whether `client` was sent the current version.
    #[must_use]
    pub fn delivered_to(&self, client: &str) -> bool {
        self.delivered.contains(client)
    }
}

/// All realm reports made by the agent, bounded.
#[derive(Debug)]
pub struct RealmSynth {
    states: HashMap<(u32, String), RealmState>,
    max: usize,
    headroom: f64,
    validity: Duration,
    next_sequence: u64,
    generation: u64,
}

impl RealmSynth {
    /// `sequence_base` must exceed any sequence sent before a restart
    /// (RFC 7683 §5.2.1.4; e.g. seconds since the Unix epoch at start).
    #[must_use]
    pub fn new(max: usize, headroom: f64, validity: Duration, sequence_base: u64) -> Self {
        Self {
            states: HashMap::new(),
            max,
            headroom,
            validity,
            next_sequence: sequence_base,
            generation: 0,
        }
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
            self.states.insert(
                key.clone(),
                RealmState {
                    servers: Vec::new(),
                    percent: 0,
                    sequence: 0,
                    ending_until: None,
                    computed_at: None,
                    generation,
                    delivered: HashSet::new(),
                    counts: Counters::default(),
                },
            );
        }
        let Some(st) = self.states.get_mut(&key) else {
            return;
        };
        let same = st.servers.len() == servers.len()
            && st.servers.iter().zip(servers).all(|(a, b)| a == b);
        if !same {
            st.servers = servers.iter().map(|s| (*s).to_owned()).collect();
        }
        if same
            && st.generation == generation
            && st.computed_at.is_some_and(|t| now < t + REEVALUATE)
        {
            return;
        }
        st.computed_at = Some(now);
        st.generation = generation;
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
        // RFC 7683 §5.2.1.4: increment the sequence whenever the content changes.
        self.next_sequence += 1;
        let closed = std::mem::take(&mut st.counts);
        let event = match (st.percent, percent) {
            (0, _) => OcsEvent::Created,
            (_, 0) => OcsEvent::Ended,
            _ => OcsEvent::Updated,
        };
        st.sequence = self.next_sequence;
        st.percent = percent;
        st.delivered.clear();
        st.ending_until = (percent == 0).then(|| now + self.validity);
        let validity = if percent == 0 {
            Duration::ZERO
        } else {
            self.validity
        };
        audit.version(VersionRecord {
            at: now,
            key: OcsKey::new(app_id, ReportType::Realm, realm),
            own: true,
            event,
            sequence: st.sequence,
            abatement: Abatement::Loss { percent },
            validity,
            closed_counts: closed,
        });
        tracing::debug!(app_id, realm, percent, "own realm report");
    }

    /// Re-evaluates (`app_id`, `realm`) with the servers last observed, after
    /// a host report changed (so the answer carrying that report can already
    /// carry the realm report, seed 002 step 8).
    pub fn refresh(
        &mut self,
        now: Instant,
        app_id: u32,
        realm: &str,
        capacity: impl Fn(&str) -> Option<f64>,
        audit: &mut Audit,
    ) {
        let Some(st) = self.states.get(&(app_id, realm.to_owned())) else {
            return;
        };
        let servers = st.servers.clone();
        let views: Vec<&str> = servers.iter().map(String::as_str).collect();
        self.observe(now, app_id, realm, &views, capacity, audit);
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

    /// Remembers that `client` was sent the current version.
    pub fn mark_delivered(&mut self, app_id: u32, realm: &str, client: &str) {
        if let Some(st) = self.state_mut(app_id, realm)
            && st.delivered.len() < MAX_DELIVERED
        {
            st.delivered.insert(client.to_owned());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn realm_overloaded_only_when_capacity_short() {
        let mut r = RealmSynth::new(8, 1.5, Duration::from_secs(30), 1000);
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
