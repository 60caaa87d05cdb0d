//! The questions an incident review asks of the audit log (seed 003), asked
//! of its records in time order ([`Log::read`]): the OCS versions and issued
//! reports with their intervals ([`Log::timeline`]), what was in force at a
//! moment ([`Log::at`]), and the receipt chain of one version
//! ([`Log::explain`]): what was requested, whether and when this node
//! accepted it (RFC 7683 §5.2.1.1), when it was active and ending (§6.3),
//! the treatment counts with their denominators (matched = passed +
//! diverted + throttled + delegated), the claim they support, and what the
//! records cannot show.
//!
//! Every worker holds every version; their records are merged here: a
//! version starts at its first acceptance on any worker, its counts are the
//! sum of the counts each worker closed. A restart (a `start` record) ends
//! every version in force: the state was in memory. A `gap` record says
//! records were lost (the writer's feed was full): the answers near it are
//! narrower, and say so.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use super::record::{GapEntry, IssuedEntry, Line, Record, ReportEntry, SecondEntry, rfc3339};
use super::{Counters, Spread};

/// Which OCS: application, report type, target.
pub type Key = (u32, String, String);

/// One OCS version at this node, merged over the workers.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Version {
    /// Application-ID.
    pub app_id: u32,
    /// `host`, `realm` or `peer`.
    pub report_type: String,
    /// Host, realm or peer.
    pub target: String,
    /// OC-Sequence-Number.
    pub sequence: u64,
    /// Made by the agent (issued), not received.
    pub own: bool,
    /// Requested reduction (loss).
    pub loss_percent: Option<u32>,
    /// Requested rate (rate).
    pub max_rate: Option<u32>,
    /// Validity in seconds (0: the version that ends the condition).
    pub validity: f64,
    /// When it came in force (first worker), RFC 3339.
    pub from: String,
    /// When it stopped being in force (replaced, expired, ended, restart).
    pub until: Option<String>,
    /// What stopped it.
    pub until_by: Option<String>,
    /// When the state was gone (the controlled ending over).
    pub removed: Option<String>,
    /// Treatment counts, summed over the workers.
    pub counts: Counters,
    /// How their throttled and diverted split: by Result-Code, by
    /// destination peer.
    pub split: Spread,
    /// Whether every worker that held it closed its counts (otherwise the
    /// counts are those of the last second recorded, or partial).
    pub counts_closed: bool,
    /// The clients that were sent it and abate it themselves.
    pub delegated: BTreeSet<String>,
    /// The clients that were sent it and that the agent still held to it
    /// (its HOST reports on a server's behalf).
    pub sent_to: BTreeSet<String>,
    /// The workers that held it.
    pub workers: BTreeSet<usize>,
    #[serde(skip)]
    from_ms: u64,
    #[serde(skip)]
    until_ms: Option<u64>,
    #[serde(skip)]
    removed_ms: Option<u64>,
    #[serde(skip)]
    open: BTreeSet<usize>,
    #[serde(skip)]
    closed_any: bool,
}

impl Version {
    /// Its key.
    #[must_use]
    pub fn key(&self) -> Key {
        (self.app_id, self.report_type.clone(), self.target.clone())
    }

    /// What it asks for, in words.
    #[must_use]
    pub fn asks(&self) -> String {
        match (self.loss_percent, self.max_rate) {
            _ if self.validity == 0.0 && !self.own => "end (validity 0)".into(),
            (Some(p), _) => format!("{p} % reduction"),
            (_, Some(r)) => format!("at most {r} requests/s"),
            _ => "-".into(),
        }
    }

    fn active_at(&self, t: u64) -> Option<&'static str> {
        if t < self.from_ms || self.removed_ms.is_some_and(|r| t >= r) {
            return None;
        }
        match self.until_ms {
            Some(u) if t >= u => Some("ending"),
            _ if self.validity == 0.0 => Some("ending"),
            _ => Some("active"),
        }
    }
}

/// A received report that changed nothing (stale, untrusted, ...).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Ignored {
    /// When, RFC 3339.
    pub time: String,
    /// The report and its verdict.
    pub report: ReportEntry,
}

/// The log, merged and in time order.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Log {
    /// The agent's DiameterIdentity (of the last record).
    pub agent: String,
    /// When the agent started writing, each time (restarts).
    pub starts: Vec<String>,
    /// Every OCS version, in the order they came in force.
    pub versions: Vec<Version>,
    /// Every report received, with its time.
    pub received: Vec<(String, ReportEntry)>,
    /// Reports the agent issued itself.
    pub issued: Vec<(String, IssuedEntry)>,
    /// Where records were lost (the feed was full): each gap's time, and
    /// what was lost since the previous one.
    pub gaps: Vec<(String, GapEntry)>,
    /// Per-second counts.
    #[serde(skip)]
    pub seconds: Vec<(u64, SecondEntry)>,
}

/// What was in force at a moment.
#[derive(Clone, Debug, Serialize)]
pub struct AtView {
    /// The moment, RFC 3339.
    pub time: String,
    /// The versions in force, with `active` or `ending`.
    pub ocs: Vec<(String, Version)>,
}

/// The receipt chain of one version (seed 003).
#[derive(Clone, Debug, Serialize)]
pub struct Explain {
    /// The version.
    pub version: Version,
    /// The report that made it, as received (none for the agent's own).
    pub requested: Option<(String, ReportEntry)>,
    /// For the agent's own version: the records of its issue, with the
    /// decision's inputs (one per version; several when the version was
    /// made for several applications).
    pub issued: Vec<(String, IssuedEntry)>,
    /// For the agent's own version: the clients it was sent to (those that
    /// abate it themselves and those it still held to it), sorted.
    pub sent_to: Vec<String>,
    /// Reports for the same OCS while it was in force that changed nothing.
    pub ignored: Vec<Ignored>,
    /// Agent-wide counts over its interval (whole seconds it overlaps):
    /// requests = forwarded + diverted + throttled + no_route.
    pub agent_wide: super::Totals,
    /// How the agent-wide throttled and diverted of those seconds split.
    pub agent_wide_split: Spread,
    /// The claim the records support.
    pub claim: String,
    /// What the records cannot show.
    pub cannot_show: Vec<String>,
}

impl Log {
    /// The log of `lines` (any order; sorted by time here, stable).
    #[must_use]
    pub fn read(lines: &[Line]) -> Self {
        let mut order: Vec<(u64, &Line)> = lines.iter().map(|l| (l.unix_ms(), l)).collect();
        order.sort_by_key(|(t, _)| *t);
        let mut log = Log::default();
        // (key, sequence) -> index in log.versions; (worker, key) -> sequence.
        let mut index: BTreeMap<(Key, u64), usize> = BTreeMap::new();
        let mut current: BTreeMap<(usize, Key), u64> = BTreeMap::new();
        for (t, line) in order {
            log.agent.clone_from(&line.agent);
            match &line.record {
                Record::Start(_) => {
                    for v in &mut log.versions {
                        if v.removed_ms.is_none() {
                            v.until_ms.get_or_insert(t);
                            v.until_by.get_or_insert_with(|| "restart".into());
                            v.removed_ms = Some(t);
                            v.open.clear();
                        }
                    }
                    current.clear();
                    index.clear();
                    log.starts.push(line.time.clone());
                }
                Record::Report(r) => log.received.push((line.time.clone(), r.clone())),
                Record::Issued(i) => log.issued.push((line.time.clone(), i.clone())),
                Record::Gap(g) => log.gaps.push((line.time.clone(), *g)),
                Record::Second(s) => {
                    for o in &s.ocs {
                        let k = (
                            (o.app_id, o.report_type.clone(), o.target.clone()),
                            o.sequence,
                        );
                        if let Some(&i) = index.get(&k)
                            && !log.versions[i].closed_any
                        {
                            log.versions[i].counts = o.counts;
                            log.versions[i].split.clone_from(&o.split);
                        }
                    }
                    log.seconds.push((t, s.clone()));
                }
                Record::Version(e) => {
                    let key: Key = (e.app_id, e.report_type.clone(), e.target.clone());
                    let prev = current.get(&(e.worker, key.clone())).copied();
                    let get = |seq: u64,
                               log: &mut Log,
                               index: &mut BTreeMap<(Key, u64), usize>|
                     -> usize {
                        *index.entry((key.clone(), seq)).or_insert_with(|| {
                            log.versions.push(Version {
                                app_id: e.app_id,
                                report_type: e.report_type.clone(),
                                target: e.target.clone(),
                                sequence: seq,
                                own: e.own,
                                loss_percent: e.loss_percent,
                                max_rate: e.max_rate,
                                validity: e.validity,
                                from: line.time.clone(),
                                from_ms: t,
                                ..Version::default()
                            });
                            log.versions.len() - 1
                        })
                    };
                    let close = |v: &mut Version, by: &str, counts: Counters, final_: bool| {
                        if v.until_ms.is_none() {
                            v.until_ms = Some(t);
                            v.until_by = Some(by.into());
                        }
                        if final_ {
                            if v.open.remove(&e.worker) || !v.closed_any {
                                if !v.closed_any {
                                    v.counts = Counters::default();
                                    v.split = Spread::default();
                                    v.closed_any = true;
                                }
                                v.counts.add_counts(&counts);
                                v.split.add(&e.split);
                            }
                            v.delegated.extend(e.delegated.iter().cloned());
                            v.sent_to.extend(e.sent_to.iter().cloned());
                        }
                    };
                    match e.event.as_str() {
                        "created" | "updated" | "ended" => {
                            if let Some(p) = prev.filter(|p| *p != e.sequence)
                                && let Some(&i) = index.get(&(key.clone(), p))
                            {
                                close(&mut log.versions[i], &e.event, e.counts, true);
                                if log.versions[i].open.is_empty() {
                                    log.versions[i].removed_ms.get_or_insert(t);
                                }
                            }
                            let i = get(e.sequence, &mut log, &mut index);
                            let v = &mut log.versions[i];
                            v.workers.insert(e.worker);
                            v.open.insert(e.worker);
                            if e.event == "ended" && v.until_ms.is_none() {
                                v.until_ms = Some(t);
                                v.until_by = Some("ended".into());
                            }
                            current.insert((e.worker, key), e.sequence);
                        }
                        "expired" => {
                            let i = get(e.sequence, &mut log, &mut index);
                            close(&mut log.versions[i], "expired", e.counts, false);
                        }
                        "removed" | "untrusted" => {
                            let i = get(e.sequence, &mut log, &mut index);
                            let v = &mut log.versions[i];
                            close(v, &e.event, e.counts, true);
                            if v.open.is_empty() {
                                v.removed_ms = Some(t);
                            }
                            current.remove(&(e.worker, key));
                        }
                        _ => {}
                    }
                }
            }
        }
        for v in &mut log.versions {
            v.counts_closed = v.closed_any && v.open.is_empty();
            v.until = v.until_ms.map(rfc3339);
            v.removed = v.removed_ms.map(rfc3339);
        }
        log
    }

    /// The versions and issued reports overlapping `[from, to)` (ms).
    #[must_use]
    pub fn timeline(&self, from: Option<u64>, to: Option<u64>) -> Log {
        let within = |a: u64, b: Option<u64>| {
            from.is_none_or(|f| b.is_none_or(|b| b > f)) && to.is_none_or(|t| a < t)
        };
        let at = |s: &str| super::record::parse_rfc3339(s).unwrap_or(0);
        Log {
            agent: self.agent.clone(),
            starts: self.starts.clone(),
            versions: self
                .versions
                .iter()
                .filter(|v| within(v.from_ms, v.removed_ms.or(v.until_ms)))
                .cloned()
                .collect(),
            received: self
                .received
                .iter()
                .filter(|(t, _)| within(at(t), Some(at(t) + 1)))
                .cloned()
                .collect(),
            issued: self
                .issued
                .iter()
                .filter(|(t, _)| within(at(t), Some(at(t) + 1)))
                .cloned()
                .collect(),
            gaps: self
                .gaps
                .iter()
                .filter(|(t, _)| within(at(t), Some(at(t) + 1)))
                .cloned()
                .collect(),
            seconds: self
                .seconds
                .iter()
                .filter(|(t, _)| within(*t, Some(t + 1)))
                .cloned()
                .collect(),
        }
    }

    /// The versions in force at `t` (ms).
    #[must_use]
    pub fn at(&self, t: u64) -> AtView {
        AtView {
            time: rfc3339(t),
            ocs: self
                .versions
                .iter()
                .filter_map(|v| v.active_at(t).map(|p| (p.to_owned(), v.clone())))
                .collect(),
        }
    }

    /// The versions of sequence `seq` (and `target`, when given).
    pub fn find(&self, seq: u64, target: Option<&str>) -> impl Iterator<Item = &Version> {
        self.versions
            .iter()
            .filter(move |v| v.sequence == seq && target.is_none_or(|t| v.target == t))
    }

    /// The receipt chain of `v` (one of [`Log::find`]).
    #[must_use]
    pub fn explain(&self, v: &Version) -> Explain {
        let at = |s: &str| super::record::parse_rfc3339(s).unwrap_or(0);
        let same = |r: &ReportEntry| {
            r.app_id == v.app_id && r.report_type == v.report_type && r.target == v.target
        };
        let requested = self
            .received
            .iter()
            .find(|(t, r)| {
                same(r)
                    && r.sequence == v.sequence
                    && at(t).abs_diff(v.from_ms) < 60_000
                    && matches!(
                        r.verdict.as_str(),
                        "created" | "updated" | "rollover" | "ended"
                    )
            })
            .cloned();
        let end = v.removed_ms.or(v.until_ms).unwrap_or(u64::MAX);
        let ignored = self
            .received
            .iter()
            .filter(|(t, r)| {
                same(r)
                    && (v.from_ms..end).contains(&at(t))
                    && !matches!(
                        r.verdict.as_str(),
                        "created" | "updated" | "rollover" | "ended"
                    )
            })
            .map(|(t, r)| Ignored {
                time: t.clone(),
                report: r.clone(),
            })
            .collect();
        let mut wide = super::Totals::default();
        let mut wide_split = Spread::default();
        for (t, s) in &self.seconds {
            // A second record counts the second before it.
            if *t > v.from_ms && t.saturating_sub(1000) < end {
                wide_split.add(&s.split);
                wide.add_counts(&s.totals);
            }
        }
        let c = v.counts;
        let interval = interval_phrase(&v.from, v.until.as_deref(), v.removed.as_deref());
        let abated = c.diverted + c.throttled;
        #[expect(clippy::cast_precision_loss, reason = "a share of counters")]
        let share = if c.matched == 0 {
            0.0
        } else {
            abated as f64 / c.matched as f64 * 100.0
        };
        let issued: Vec<(String, IssuedEntry)> = self
            .issued
            .iter()
            .filter(|(_, i)| {
                v.own
                    && i.sequence == v.sequence
                    && i.report_type == v.report_type
                    && i.target.as_deref() == Some(v.target.as_str())
            })
            .cloned()
            .collect();
        let sent_to: Vec<String> = v.delegated.union(&v.sent_to).cloned().collect();
        let claim = if v.own {
            issued_claim(&self.agent, v, &issued, &sent_to, &interval, share)
        } else {
            format!(
                "A {} {} report ({}, sequence {}) for {} was in force at {} {interval}; of the {} requests it matched there, {}.",
                if v.own { "issued" } else { "received" },
                v.report_type.to_uppercase(),
                v.asks(),
                v.sequence,
                v.target,
                self.agent,
                c.matched,
                treated(c, share),
            )
        };
        let mut cannot_show = vec![
            format!("arrivals at {} from other paths than this agent", v.target),
            "the application outcome: retries, completed transactions, user impact".into(),
            "whether traffic was zero: only what this agent did with the requests it saw".into(),
        ];
        if v.own {
            cannot_show.push(format!(
                "whether the clients sent it abated at the source: only the requests this agent saw from them afterwards (the counts above){}",
                if issued.is_empty() {
                    "; the record of its issue is not in the log"
                } else {
                    ""
                }
            ));
        }
        if !v.delegated.is_empty() {
            cannot_show.push(format!(
                "how much the delegated clients ({}) abated at the source",
                v.delegated.iter().cloned().collect::<Vec<_>>().join(", ")
            ));
        }
        // A gap line counts what was lost up to it since the previous
        // flush (at most a minute, `audit.flush_ms`).
        let lost: u64 = self
            .gaps
            .iter()
            .filter(|(t, _)| (v.from_ms..end.saturating_add(60_000)).contains(&at(t)))
            .map(|(_, g)| g.total())
            .sum();
        if lost > 0 {
            cannot_show.push(format!(
                "{lost} records lost while it was in force (the audit feed was full, gaps in the log): the counts and reports above may be incomplete"
            ));
        }
        if !v.counts_closed {
            cannot_show.push(
                "its final counts: the version was not closed in the log (counts of the last second recorded)"
                    .into(),
            );
        }
        Explain {
            version: v.clone(),
            requested,
            issued,
            sent_to,
            ignored,
            agent_wide: wide,
            agent_wide_split: wide_split,
            claim,
            cannot_show,
        }
    }
}

/// The one sentence of an issued version: what the agent decided and why,
/// to whom it went, what it did itself.
fn issued_claim(
    agent: &str,
    v: &Version,
    issued: &[(String, IssuedEntry)],
    sent_to: &[String],
    interval: &str,
    share: f64,
) -> String {
    let c = v.counts;
    let asks = if v.validity == 0.0 {
        "end (validity 0)".to_owned()
    } else {
        v.asks()
    };
    let why = issued
        .first()
        .map_or_else(String::new, |(t, i)| format!(", decided {t} {}", i.why()));
    let sent = if sent_to.is_empty() {
        "it was sent to no client".to_owned()
    } else {
        format!(
            "it was sent to {} client{} ({})",
            sent_to.len(),
            if sent_to.len() == 1 { "" } else { "s" },
            sent_to.join(", ")
        )
    };
    format!(
        "{agent} issued a {} report for {} (sequence {}, {asks}){why}, in force {interval}; {sent}, and of the {} requests it matched at this agent, {}.",
        v.report_type.to_uppercase(),
        v.target,
        v.sequence,
        c.matched,
        treated(c, share),
    )
}

/// An interval in words: `from A until B (ending until C)`, or still in
/// force at the end of the log.
fn interval_phrase(from: &str, until: Option<&str>, removed: Option<&str>) -> String {
    match (until, removed) {
        (Some(u), Some(r)) if u != r => format!("from {from} until {u} (ending until {r})"),
        (Some(u), _) => format!("from {from} until {u}"),
        (None, _) => format!("from {from} and still in force at the end of the log"),
    }
}

/// What was done with the matched requests of `c`, `share` percent of
/// them abated: `9 were throttled, 0 diverted and 6 passed (60.0 %
/// abated)`.
fn treated(c: Counters, share: f64) -> String {
    format!(
        "{} were throttled, {} diverted and {} passed ({share:.1} % abated{})",
        c.throttled,
        c.diverted,
        c.passed,
        if c.delegated > 0 {
            format!(
                "; {} delegated to clients that abate themselves",
                c.delegated
            )
        } else {
            String::new()
        },
    )
}

mod peer;
pub use peer::{PeerClient, PeerExplain, allocation};

#[cfg(test)]
mod tests;
