//! Reacting-node overload control state: RFC 7683 §5.2.1.1 and §5.2.1.3 (host
//! and realm OCS, sequence rules with rollover, validity, "absence of OLR means
//! no change"), RFC 8581 §6.2.1.2 and §6.2.3 (peer OCS), RFC 8582 §6.2 and §6.4
//! (rate in the OCS), and the controlled ending of RFC 7683 §5.2.2 / §6.3 and
//! RFC 8581 §6.2.5 (probe, then ramp; see docs/doic.md).
//!
//! One OCS is [`Ocs`]; the bounded table of them, keyed by Application-Id,
//! report type and host, realm or peer, is [`OcsTable`] (`table`).
//!
//! Expiry is evaluated lazily against `now`, and recorded at the instant the
//! validity ran out, so no timer is needed for correctness.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::loss::{self, Prng};
use super::protect::Gates;
use super::rate::{Priority, RateControl};
use super::report::{Abatement, ReportType};
use crate::audit::{Audit, Counters, OcsEvent, VersionRecord};

/// Clients remembered per OCS version as having received the report.
const MAX_DELIVERED: usize = 1024;

pub use crate::report::OcsKey;

mod table;

pub use table::{OcsTable, Outcome};

/// RFC 7683 §5.2.1.3: a received sequence number replaces the stored one when
/// it is greater, or when it "has rolled over": from within 1 % of the maximum
/// of the Unsigned64 OC-Sequence-Number to within 1 % of its minimum.
#[must_use]
pub fn sequence_is_newer(stored: u64, received: u64) -> (bool, bool) {
    const ONE_PERCENT: u64 = u64::MAX / 100;
    let rollover = stored >= u64::MAX - ONE_PERCENT && received <= ONE_PERCENT;
    (received > stored || rollover, rollover)
}

/// Where an OCS is in its life.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Phase {
    /// The report is in force.
    Active,
    /// After a total reduction ended: one probe request per interval.
    Probing {
        /// When the next probe may go.
        next_probe: Instant,
    },
    /// Returning to full traffic: the abated share falls linearly to zero.
    Ramping {
        /// When the ramp began.
        since: Instant,
        /// The share abated at `since`.
        from: f64,
    },
}

/// How the controlled ending proceeds (RFC 7683 §6.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ending {
    /// Interval between probes after a total reduction.
    pub probe_interval: Duration,
    /// Length of the ramp.
    pub ramp: Duration,
}

/// One overload control state entry.
#[derive(Clone, Debug)]
pub struct Ocs {
    /// Its key.
    pub key: OcsKey,
    /// OC-Sequence-Number in force.
    pub sequence: u64,
    /// Abatement in force.
    pub abatement: Abatement,
    /// Validity of the version in force.
    pub validity: Duration,
    /// When the version in force was received.
    pub received_at: Instant,
    /// When it expires.
    pub expires_at: Instant,
    /// Where it is in its life.
    pub phase: Phase,
    /// Treatment counts of the version in force.
    pub counts: Counters,
    /// Made by the agent on a protected server's behalf (RFC 7683 §5.1.3,
    /// [`crate::protect`]), not received.
    pub own: bool,
    bucket: Option<RateControl>,
    /// The agent's own HOST report on a protected server's behalf: each
    /// DOIC client held to its share, the others to the rest of the limit
    /// ([`Gates`]); decides instead of `bucket` while active.
    gates: Option<Arc<Gates>>,
    delivered: HashSet<String>,
    /// Clients sent this version that the agent still holds to it (its own
    /// HOST reports on a server's behalf): named in the audit, never
    /// delegated.
    sent: HashSet<String>,
    /// Requests bound for this peer seen by the host/realm step (peer OCS only).
    seen_first_step: u64,
    /// Of those, throttled by the host/realm step.
    throttled_first_step: u64,
}

impl Ocs {
    fn record(&self, at: Instant, event: OcsEvent, closed: Counters) -> VersionRecord {
        VersionRecord {
            at,
            key: self.key.clone(),
            own: self.own,
            event,
            sequence: self.sequence,
            abatement: self.abatement,
            validity: self.validity,
            closed_counts: closed,
            delegated: {
                let mut d: Vec<String> = self.delivered.iter().cloned().collect();
                d.sort();
                d
            },
            sent_to: {
                let mut d: Vec<String> = self.sent.iter().cloned().collect();
                d.sort();
                d
            },
        }
    }

    /// The share of matching requests the version in force has abated so far.
    fn abated_share(&self) -> f64 {
        match self.abatement {
            Abatement::Loss { percent } => f64::from(percent) / 100.0,
            Abatement::Rate { per_second: 0 } => 1.0,
            Abatement::Rate { .. } => {
                let c = self.counts;
                let abated = c.diverted + c.throttled;
                if c.matched == 0 {
                    0.0
                } else {
                    #[expect(clippy::cast_precision_loss, reason = "ratio of counters")]
                    {
                        abated as f64 / c.matched as f64
                    }
                }
            }
        }
    }

    /// Starts the controlled ending at `at`. Returns `false` when the state can
    /// simply go: the previous report asked for 0 % (RFC 7683 §6.3 "unless the
    /// previous overload report stated 0% reduction").
    fn begin_ending(&mut self, at: Instant) -> bool {
        let share = self.abated_share();
        self.bucket = None;
        self.gates = None;
        if share <= 0.0 {
            return false;
        }
        self.phase = if self.abatement.is_total() || share >= 1.0 {
            Phase::Probing { next_probe: at }
        } else {
            Phase::Ramping {
                since: at,
                from: share,
            }
        };
        true
    }

    /// Brings the phase up to `now`; `false` when the entry is gone.
    fn advance(&mut self, now: Instant, ending: Ending, audit: &mut Audit) -> bool {
        if self.phase == Phase::Active && now >= self.expires_at {
            let at = self.expires_at;
            audit.version(self.record(at, OcsEvent::Expired, self.counts));
            if !self.begin_ending(at) {
                audit.version(self.record(at, OcsEvent::Removed, Counters::default()));
                return false;
            }
        }
        if let Phase::Ramping { since, .. } = self.phase
            && now >= since + ending.ramp
        {
            audit.version(self.record(since + ending.ramp, OcsEvent::Removed, self.counts));
            return false;
        }
        true
    }

    /// Whether the agent should abate a request matching this OCS at `now`
    /// from `client` (the DOIC client's identity, `None` for a client
    /// without DOIC: only the gates of a report made on a server's behalf
    /// tell them apart). For a peer OCS under loss, the share of requests
    /// bound for the peer already throttled by the host/realm step counts
    /// (RFC 8581 §5).
    fn select(
        &mut self,
        now: Instant,
        (client, priority): (Option<&str>, Priority),
        ending: Ending,
        rng: &mut Prng,
    ) -> bool {
        match self.phase {
            Phase::Active => match self.abatement {
                Abatement::Loss { percent } => {
                    if self.key.report_type == ReportType::Peer && self.seen_first_step > 0 {
                        #[expect(clippy::cast_precision_loss, reason = "ratio of counters")]
                        let already =
                            self.throttled_first_step as f64 / self.seen_first_step as f64;
                        let share = loss::remaining_share(f64::from(percent) / 100.0, already);
                        loss::select_share(rng, share)
                    } else {
                        loss::select_percent(rng, percent)
                    }
                }
                Abatement::Rate { .. } => match (&self.gates, &self.bucket) {
                    (Some(g), _) => !g.admit(now, client, priority),
                    (None, Some(b)) => !b.admit(now, priority),
                    (None, None) => false,
                },
            },
            Phase::Probing { next_probe } => {
                if now >= next_probe {
                    self.phase = Phase::Probing {
                        next_probe: now + ending.probe_interval,
                    };
                    false
                } else {
                    true
                }
            }
            Phase::Ramping { since, from } => {
                let done = now.saturating_duration_since(since).as_secs_f64()
                    / ending.ramp.as_secs_f64().max(f64::MIN_POSITIVE);
                loss::select_share(rng, from * (1.0 - done))
            }
        }
    }

    /// The rate control of a rate OCS (shared with other workers' tables).
    #[must_use]
    pub fn rate_control(&self) -> Option<&RateControl> {
        self.bucket.as_ref()
    }

    /// Whether a request from `client` (`None`: not a DOIC client) matching
    /// this OCS at `now` is selected for abatement (not counted; the caller
    /// counts the outcome on the entry).
    pub fn decide(
        &mut self,
        now: Instant,
        who: (Option<&str>, Priority),
        ending: Ending,
        rng: &mut Prng,
    ) -> bool {
        self.select(now, who, ending, rng)
    }

    /// The per-client gates of the agent's own report in force, if any.
    #[must_use]
    pub fn gates(&self) -> Option<&Arc<Gates>> {
        self.gates.as_ref()
    }

    /// Holds the clients of the agent's own active rate report to their
    /// shares with `gates` (RFC 7683 §5.1.3, [`Gates`]); ignored for a
    /// received report or one that is ending.
    pub fn set_gates(&mut self, gates: Option<Arc<Gates>>) {
        if self.own && self.phase == Phase::Active && self.bucket.is_some() {
            self.gates = gates;
        }
    }

    /// Whether `client` has been sent this version of the report.
    #[must_use]
    pub fn delivered_to(&self, client: &str) -> bool {
        self.delivered.contains(client)
    }

    /// Remembers that `client` was sent this version of the agent's own
    /// report and is still held to it by the agent (bounded as
    /// [`Self::mark_delivered`]; for the audit only).
    pub fn mark_sent(&mut self, client: &str) {
        if self.sent.len() < MAX_DELIVERED && !self.sent.contains(client) {
            self.sent.insert(client.to_owned());
        }
    }

    /// Remembers that `client` was sent this version (bounded; past the bound
    /// the agent keeps abating for further clients itself, the safe side).
    pub fn mark_delivered(&mut self, client: &str) {
        if self.delivered.len() < MAX_DELIVERED && !self.delivered.contains(client) {
            self.delivered.insert(client.to_owned());
        }
    }
}
