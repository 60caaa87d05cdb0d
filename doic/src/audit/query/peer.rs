//! The receipt chain of one of the agent's own PEER reports (RFC 8581
//! §6.2.4): they make no OCS version at this node (the agent is their
//! reporting node, not a reacting one), so the chain is read from the
//! `issued` records alone. The decision is the set of PEER records of the
//! control tick that made the sequence asked for: one per client allocation
//! (OC-Maximum-Rate, RFC 8582 §5), `*` for the loss report to the clients
//! without the rate algorithm (RFC 7683 §5.5), each with its sequence (one
//! tick numbers them in turn, RFC 7683 §5.2.1.4) and the inputs. Each
//! client's report lasts until the next record for it with a greater
//! sequence: renewed (same allocation), changed, or ended (validity 0); or
//! until a restart. The treatment is the agent-wide per-second records over
//! that interval, the answers of the agent's own enforcement (its 3004s
//! before routing, RFC 8581 §6.2.4) included; the records do not tell them
//! apart from the throttles of OCS versions and server protection: the
//! explanation says so among what the records cannot show.

use serde::Serialize;

use super::{Log, interval_phrase};
use crate::audit::record::{IssuedEntry, parse_rfc3339};
use crate::audit::{Spread, Totals};

/// One client's report in the decision.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PeerClient {
    /// The record of its issue (`to`: the client, or `*`).
    pub report: IssuedEntry,
    /// When this sequence was first issued, RFC 3339.
    pub issued: String,
    /// How many later records sent the same sequence again (unchanged).
    pub resent: usize,
    /// When the next version for the client was issued, RFC 3339.
    pub until: Option<String>,
    /// What it was: `renewed`, `changed` (to what), `ended (validity 0)`,
    /// `restart`.
    pub until_by: Option<String>,
}

/// The receipt chain of an own PEER report.
#[derive(Clone, Debug, Serialize)]
pub struct PeerExplain {
    /// The sequence asked for.
    pub sequence: u64,
    /// When the decision was made, RFC 3339.
    pub decided: String,
    /// Each client of the decision with its allocation and its interval
    /// (`*`: the loss report to the clients without the rate algorithm).
    pub clients: Vec<PeerClient>,
    /// The interval of the reports of `sequence`: from the decision until
    /// the last of them was replaced (absent: in force at the end of the
    /// log).
    pub from: String,
    /// Its end, RFC 3339.
    pub until: Option<String>,
    /// Agent-wide counts over the seconds it overlaps: requests =
    /// forwarded + diverted + throttled + no_route.
    pub agent_wide: Totals,
    /// How those throttled and diverted split (by Result-Code, by peer).
    pub agent_wide_split: Spread,
    /// The per-second records those counts come from.
    pub seconds: usize,
    /// The claim the records support.
    pub claim: String,
    /// What the records cannot show.
    pub cannot_show: Vec<String>,
}

fn own_peer(i: &IssuedEntry) -> bool {
    i.report_type == "peer" && i.target.is_none()
}

impl Log {
    /// The receipt chain of the agent's own PEER report of sequence `seq`
    /// (none: no such record in the log).
    #[must_use]
    pub fn explain_peer(&self, seq: u64) -> Option<PeerExplain> {
        let at = |s: &str| parse_rfc3339(s).unwrap_or(0);
        let (decided, _) = self
            .issued
            .iter()
            .find(|(_, i)| own_peer(i) && i.sequence == seq)?;
        let t0 = at(decided);
        let restart = |after: u64| self.starts.iter().map(|s| at(s)).find(|s| *s > after);
        let clients: Vec<PeerClient> = self
            .issued
            .iter()
            .filter(|(t, i)| own_peer(i) && t == decided)
            .map(|(_, i)| {
                let first = self
                    .issued
                    .iter()
                    .find(|(_, j)| own_peer(j) && j.to == i.to && j.sequence == i.sequence)
                    .map_or(t0, |(t, _)| at(t));
                let later =
                    |(t, j): &&(String, IssuedEntry)| own_peer(j) && j.to == i.to && at(t) > first;
                let resent = self
                    .issued
                    .iter()
                    .filter(later)
                    .filter(|(_, j)| j.sequence == i.sequence)
                    .count();
                let next = self
                    .issued
                    .iter()
                    .filter(later)
                    .find(|(_, j)| j.sequence > i.sequence);
                let end = match (next, restart(first)) {
                    (Some((t, _)), Some(r)) if r < at(t) => Some((r, "restart".to_owned())),
                    (Some((t, j)), _) => Some((at(t), successor(i, j))),
                    (None, Some(r)) => Some((r, "restart".to_owned())),
                    (None, None) => None,
                };
                PeerClient {
                    report: i.clone(),
                    issued: crate::audit::record::rfc3339(first),
                    resent,
                    until: end.as_ref().map(|(t, _)| crate::audit::record::rfc3339(*t)),
                    until_by: end.map(|(_, by)| by),
                }
            })
            .collect();
        let mine = || clients.iter().filter(|c| c.report.sequence == seq);
        let open = mine().any(|c| c.until.is_none());
        let end_ms = mine()
            .filter_map(|c| c.until.as_deref().map(at))
            .max()
            .filter(|_| !open);
        let mut wide = Totals::default();
        let mut split = Spread::default();
        let mut seconds = 0;
        for (t, s) in &self.seconds {
            // A second record counts the second before it.
            if *t > t0 && t.saturating_sub(1000) < end_ms.unwrap_or(u64::MAX) {
                wide.add_counts(&s.totals);
                split.add(&s.split);
                seconds += 1;
            }
        }
        let until = end_ms.map(crate::audit::record::rfc3339);
        let claim = peer_claim(self, seq, (decided, until.as_deref()), &clients, &wide);
        let mut cannot_show = vec![
            "whether each client abated at the source: only the requests this agent saw from them afterwards (the agent-wide counts)".to_owned(),
            "which clients received it: a client that does not announce peer reports gets none and is held to its allocation by the agent itself (RFC 7683 §5.2.3); the records of its issue do not say which".into(),
            "arrivals at the servers from other paths than this agent".into(),
            "which of the throttles were the agent's own enforcement of the report: the per-second records count its answers (before routing) with those of OCS versions and server protection (`doic_own_client_throttled_total` in /metrics counts the own ones per client)".into(),
            "the application outcome: retries, completed transactions, user impact".into(),
        ];
        let lost: u64 = self
            .gaps
            .iter()
            .filter(|(t, _)| {
                (t0..end_ms.unwrap_or(u64::MAX).saturating_add(60_000)).contains(&at(t))
            })
            .map(|(_, g)| g.total())
            .sum();
        if lost > 0 {
            cannot_show.push(format!(
                "{lost} records lost while it was in force (the audit feed was full, gaps in the log): the records above may be incomplete"
            ));
        }
        Some(PeerExplain {
            sequence: seq,
            decided: decided.clone(),
            clients,
            from: decided.clone(),
            until,
            agent_wide: wide,
            agent_wide_split: split,
            seconds,
            claim,
            cannot_show,
        })
    }
}

/// What the next version `j` of a client's report `i` was.
fn successor(i: &IssuedEntry, j: &IssuedEntry) -> String {
    if j.validity == 0.0 {
        "ended (validity 0)".into()
    } else if (j.loss_percent, j.max_rate) == (i.loss_percent, i.max_rate) {
        format!("renewed (#{})", j.sequence)
    } else {
        format!(
            "changed (#{}: {})",
            j.sequence,
            allocation(j.loss_percent, j.max_rate)
        )
    }
}

/// An allocation in words: `200 requests/s` or `20 % reduction`.
#[must_use]
pub fn allocation(loss: Option<u32>, rate: Option<u32>) -> String {
    match (rate, loss) {
        (Some(r), _) => format!("{r} requests/s"),
        (_, Some(p)) => format!("{p} % reduction"),
        _ => "-".into(),
    }
}

/// The one sentence: what the agent decided and why, to whom, and what the
/// agent-wide records show over its interval.
fn peer_claim(
    log: &Log,
    seq: u64,
    (decided, until): (&str, Option<&str>),
    clients: &[PeerClient],
    w: &Totals,
) -> String {
    let why = clients
        .first()
        .map_or_else(String::new, |c| format!(" {}", c.report.why()));
    let allocated: Vec<String> = clients
        .iter()
        .map(|c| {
            format!(
                "{} {}",
                c.report.to,
                allocation(c.report.loss_percent, c.report.max_rate)
            )
        })
        .collect();
    #[expect(clippy::cast_precision_loss, reason = "a share of counters")]
    let share = if w.requests == 0 {
        0.0
    } else {
        w.throttled as f64 / w.requests as f64 * 100.0
    };
    format!(
        "{} issued its own PEER report #{seq} decided {decided}{why}; it allocated {}; in force {}; agent-wide over those seconds, of {} requests {} were throttled ({share:.1} %), {} forwarded, {} diverted and {} had no route.",
        log.agent,
        allocated.join(", "),
        interval_phrase(decided, until, None),
        w.requests,
        w.throttled,
        w.forwarded,
        w.diverted,
        w.no_route,
    )
}
