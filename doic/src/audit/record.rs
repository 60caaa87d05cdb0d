//! The durable form of the evidence of seed 003: one JSON object per line
//! (JSON Lines), each with its schema version ([`SCHEMA`]), its wall-clock
//! time (RFC 3339, UTC, milliseconds) and the agent's DiameterIdentity.
//!
//! The receipts it keeps, in the order of seed 003's chain:
//! - [`Record::Report`]: an OC-OLR as received (RFC 7683 §7.3: sequence,
//!   validity, reduction or rate) and what was done with it (created,
//!   updated, stale, untrusted, not from peer: RFC 7683 §5.2.1.1, §10, RFC
//!   8581 §6.2.3);
//! - [`Record::Version`]: the life of one OCS version at this node (created,
//!   updated, expired, ended, ramping, removed: RFC 7683 §5.2.1.1, §6.3),
//!   the treatment counts it closes and the clients that were sent it;
//! - [`Record::Issued`]: a report the agent issues itself (its own PEER
//!   reports, RFC 8581 §6.2.4) with the inputs of the decision;
//! - [`Record::Second`]: the agent-wide requests of one second, requests =
//!   forwarded + diverted + throttled + no_route, and the counts of each OCS
//!   version in force;
//! - [`Record::Gap`]: records lost before this line because the writer's
//!   feed was full, by kind: the log says where it is incomplete.
//!
//! Nothing here reads a clock: times are given (milliseconds since the Unix
//! epoch) and [`rfc3339`] formats them.

use serde::{Deserialize, Serialize};

use super::{Counters, OcsEvent, ReportRecord, Spread, Totals, Verdict, VersionRecord};
use crate::report::{Abatement, ReportType};

/// The schema version every record carries (`v`).
pub const SCHEMA: u32 = 1;

/// One line of the audit log.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Line {
    /// Schema version ([`SCHEMA`]).
    pub v: u32,
    /// Wall-clock time, RFC 3339 UTC with milliseconds ([`rfc3339`]).
    pub time: String,
    /// The agent's DiameterIdentity.
    pub agent: String,
    /// The record.
    #[serde(flatten)]
    pub record: Record,
}

/// What one line records.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Record {
    /// The agent started writing (a restart begins here).
    Start(StartEntry),
    /// An OC-OLR received, with its verdict.
    Report(ReportEntry),
    /// An event of an OCS version.
    Version(VersionEntry),
    /// A report the agent issued itself.
    Issued(IssuedEntry),
    /// One second of agent-wide counts.
    Second(SecondEntry),
    /// Records lost since the previous line: the feed was full.
    Gap(GapEntry),
}

/// Records that were produced but not written (the writer's feed was full,
/// `doic_audit_dropped_total`), counted since the previous gap line.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GapEntry {
    /// Received reports lost.
    pub report: u64,
    /// OCS version events lost.
    pub version: u64,
    /// Issued reports lost.
    pub issued: u64,
    /// Per-second records lost.
    pub second: u64,
}

impl GapEntry {
    /// Every record lost.
    #[must_use]
    pub const fn total(&self) -> u64 {
        self.report + self.version + self.issued + self.second
    }
}

/// The agent started.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StartEntry {
    /// Its workers.
    pub workers: usize,
}

/// An OC-OLR received (RFC 7683 §7.3).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReportEntry {
    /// The worker that handled the answer.
    pub worker: usize,
    /// The peer the answer came from.
    pub peer: String,
    /// Application-ID of the answer.
    pub app_id: u32,
    /// `host`, `realm`, `peer` or `other(N)` (RFC 7683 §7.6, RFC 8581 §7.2).
    pub report_type: String,
    /// What it is about: the Origin-Host (host), Origin-Realm (realm) or
    /// SourceID (peer).
    pub target: String,
    /// OC-Sequence-Number.
    pub sequence: u64,
    /// `loss` (OC-Reduction-Percentage) or `rate` (OC-Maximum-Rate).
    pub algorithm: String,
    /// OC-Reduction-Percentage.
    pub reduction_percentage: Option<u32>,
    /// OC-Maximum-Rate.
    pub maximum_rate: Option<u32>,
    /// OC-Validity-Duration in seconds.
    pub validity: Option<u32>,
    /// What was done with it: `created`, `updated`, `rollover`, `ended`,
    /// `no_state`, `stale`, `untrusted`, `not_from_peer`, `out_of_scope`,
    /// `invalid`, `table_full`.
    pub verdict: String,
    /// Why, for `invalid`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// An event of an OCS version (RFC 7683 §5.2.1.1, §6.3).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct VersionEntry {
    /// The worker whose core holds it (every worker holds every version).
    pub worker: usize,
    /// Application-ID.
    pub app_id: u32,
    /// `host`, `realm` or `peer`.
    pub report_type: String,
    /// Host, realm or peer.
    pub target: String,
    /// Made by the agent (on a server's behalf, or its realm report), not
    /// received.
    pub own: bool,
    /// `created`, `updated`, `expired`, `ended`, `ramping`, `removed`.
    pub event: String,
    /// OC-Sequence-Number in force after the event.
    pub sequence: u64,
    /// Its reduction (loss algorithm).
    pub loss_percent: Option<u32>,
    /// Its rate (rate algorithm).
    pub max_rate: Option<u32>,
    /// Its validity in seconds.
    pub validity: f64,
    /// Treatment counts of the version this event closes (`updated`,
    /// `ended`: the previous version; `removed`: this one); so far, for
    /// `expired` and `ramping`.
    pub counts: Counters,
    /// How those counts' throttled and diverted split: by Result-Code, by
    /// destination peer.
    #[serde(default)]
    pub split: Spread,
    /// The DOIC clients that were sent the version the event closes
    /// (they abate it themselves: delegated, RFC 7683 §5.2.3).
    #[serde(default)]
    pub delegated: Vec<String>,
}

/// A report the agent issued itself, with its decision's inputs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct IssuedEntry {
    /// `peer` (its own overload, RFC 8581 §6.2.4).
    pub report_type: String,
    /// The client it is for; `*` for the loss report to every client
    /// without the rate algorithm.
    pub to: String,
    /// OC-Sequence-Number.
    pub sequence: u64,
    /// OC-Reduction-Percentage (loss).
    pub loss_percent: Option<u32>,
    /// OC-Maximum-Rate (rate): the client's allocation.
    pub max_rate: Option<u32>,
    /// OC-Validity-Duration in seconds (0: the end of the condition).
    pub validity: f64,
    /// The decision's inputs.
    pub inputs: IssuedInputs,
}

/// What the agent measured when it issued its own report.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct IssuedInputs {
    /// The capacity it allocates (requests per second).
    pub capacity: u32,
    /// The arrival rate of all clients (requests per second).
    pub offered: f64,
    /// The busiest worker's utilisation, 0 to 1.
    pub utilisation: f64,
    /// The workers' queue delay, in milliseconds.
    pub queue_delay_ms: f64,
    /// Requests pending at upstream servers.
    pub pending: u64,
}

/// One second of counts.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SecondEntry {
    /// Agent-wide treatment in that second: requests = forwarded + diverted
    /// + throttled + no_route.
    pub totals: Totals,
    /// How that second's throttled and diverted split: by Result-Code, by
    /// destination peer.
    #[serde(default)]
    pub split: Spread,
    /// Each OCS version in force at the end of the second, with the counts
    /// of the version so far (all workers).
    pub ocs: Vec<OcsCount>,
}

/// The counts of one OCS version.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OcsCount {
    /// Application-ID.
    pub app_id: u32,
    /// `host`, `realm` or `peer`.
    pub report_type: String,
    /// Host, realm or peer.
    pub target: String,
    /// OC-Sequence-Number.
    pub sequence: u64,
    /// Its counts so far.
    pub counts: Counters,
    /// How its throttled and diverted split so far.
    #[serde(default)]
    pub split: Spread,
}

/// The name of a report type in the records.
#[must_use]
pub fn report_type_name(rt: ReportType) -> String {
    match rt {
        ReportType::Host => "host".into(),
        ReportType::Realm => "realm".into(),
        ReportType::Peer => "peer".into(),
        ReportType::Other(n) => format!("other({n})"),
    }
}

/// The name of a verdict in the records, and its reason.
#[must_use]
pub fn verdict_name(v: &Verdict) -> (&'static str, Option<String>) {
    let name = match v {
        Verdict::Created => "created",
        Verdict::Updated => "updated",
        Verdict::Rollover => "rollover",
        Verdict::Ended => "ended",
        Verdict::NoState => "no_state",
        Verdict::Stale => "stale",
        Verdict::Untrusted => "untrusted",
        Verdict::NotFromPeer => "not_from_peer",
        Verdict::OutOfScope => "out_of_scope",
        Verdict::Invalid(why) => return ("invalid", Some(why.clone())),
        Verdict::TableFull => "table_full",
    };
    (name, None)
}

/// The name of an OCS event in the records.
#[must_use]
pub const fn event_name(e: OcsEvent) -> &'static str {
    match e {
        OcsEvent::Created => "created",
        OcsEvent::Updated => "updated",
        OcsEvent::Expired => "expired",
        OcsEvent::Ended => "ended",
        OcsEvent::Ramping => "ramping",
        OcsEvent::Removed => "removed",
        OcsEvent::Untrusted => "untrusted",
    }
}

/// `(loss_percent, max_rate)` of an abatement.
#[must_use]
pub const fn abatement_fields(a: Abatement) -> (Option<u32>, Option<u32>) {
    match a {
        Abatement::Loss { percent } => (Some(percent), None),
        Abatement::Rate { per_second } => (None, Some(per_second)),
    }
}

impl ReportEntry {
    /// The record of a received report handled on `worker`.
    #[must_use]
    pub fn of(worker: usize, r: &ReportRecord) -> Self {
        let target = match r.olr.report_type {
            ReportType::Realm => r.origin_realm.clone(),
            ReportType::Peer => r.olr.source_id.clone().unwrap_or_default(),
            _ => r.origin_host.clone(),
        };
        let (verdict, reason) = verdict_name(&r.verdict);
        Self {
            worker,
            peer: r.from_peer.clone(),
            app_id: r.app_id,
            report_type: report_type_name(r.olr.report_type),
            target,
            sequence: r.olr.sequence_number,
            algorithm: if r.olr.maximum_rate.is_some() {
                "rate"
            } else {
                "loss"
            }
            .into(),
            reduction_percentage: r.olr.reduction_percentage,
            maximum_rate: r.olr.maximum_rate,
            validity: r.olr.validity_duration,
            verdict: verdict.into(),
            reason,
        }
    }
}

impl VersionEntry {
    /// The record of a version event on `worker`, whose diverted slots
    /// name `peers` ([`super::Audit::peers`]).
    #[must_use]
    pub fn of(worker: usize, v: &VersionRecord, peers: &[String]) -> Self {
        let (loss_percent, max_rate) = abatement_fields(v.abatement);
        Self {
            worker,
            app_id: v.key.app_id,
            report_type: report_type_name(v.key.report_type),
            target: v.key.id.clone(),
            own: v.own,
            event: event_name(v.event).into(),
            sequence: v.sequence,
            loss_percent,
            max_rate,
            validity: v.validity.as_secs_f64(),
            counts: v.closed_counts,
            split: v.closed_counts.split.named(peers),
            delegated: v.delegated.clone(),
        }
    }
}

impl Line {
    /// A line of `agent` at `unix_ms` (milliseconds since the Unix epoch).
    #[must_use]
    pub fn new(agent: &str, unix_ms: u64, record: Record) -> Self {
        Self {
            v: SCHEMA,
            time: rfc3339(unix_ms),
            agent: agent.to_owned(),
            record,
        }
    }

    /// Its time in milliseconds since the Unix epoch (0 if unreadable).
    #[must_use]
    pub fn unix_ms(&self) -> u64 {
        parse_rfc3339(&self.time).unwrap_or(0)
    }
}

/// `unix_ms` as RFC 3339 UTC with milliseconds, `2026-12-01T19:18:12.345Z`
/// (fixed width: the strings sort as the times do).
#[must_use]
pub fn rfc3339(unix_ms: u64) -> String {
    let secs = unix_ms / 1000;
    let days = i64::try_from(secs / 86_400).unwrap_or(i64::MAX / 2);
    let rem = secs % 86_400;
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60,
        unix_ms % 1000
    )
}

/// Milliseconds since the Unix epoch of an RFC 3339 time (`Z` or an offset;
/// fractional seconds optional; a date alone is its midnight UTC).
#[must_use]
pub fn parse_rfc3339(s: &str) -> Option<u64> {
    let s = s.trim();
    let num = |t: &str| -> Option<i64> {
        (!t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()))
            .then(|| t.parse().ok())
            .flatten()
    };
    let (date, time) = s.split_once(['T', 't', ' ']).unwrap_or((s, "00:00:00Z"));
    let mut dp = date.splitn(3, '-');
    let (y, m, d) = (num(dp.next()?)?, num(dp.next()?)?, num(dp.next()?)?);
    if !(1..=12).contains(&m) || !(1..=31).contains(&d) {
        return None;
    }
    let (clock, offset_min) = if let Some(c) = time.strip_suffix(['Z', 'z']) {
        (c, 0)
    } else if let Some(i) = time.rfind(['+', '-']) {
        let (c, off) = time.split_at(i);
        let (oh, om) = off[1..].split_once(':')?;
        let o = num(oh)? * 60 + num(om)?;
        (c, if off.starts_with('-') { -o } else { o })
    } else {
        (time, 0)
    };
    let (hms, frac) = clock.split_once('.').unwrap_or((clock, ""));
    let mut tp = hms.splitn(3, ':');
    let (h, mi, sec) = (num(tp.next()?)?, num(tp.next()?)?, num(tp.next()?)?);
    if h > 23 || mi > 59 || sec > 60 {
        return None;
    }
    let ms = if frac.is_empty() {
        0
    } else {
        let f = &frac[..frac.len().min(3)];
        num(f)? * 10_i64.pow(3 - u32::try_from(f.len()).ok()?)
    };
    let days = days_from_civil(y, m, d);
    let t = ((days * 86_400 + h * 3600 + mi * 60 + sec) - offset_min * 60) * 1000 + ms;
    u64::try_from(t).ok()
}

// Days since 1970-01-01 and the civil date (H. Hinnant's algorithms).
fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = if m > 2 { m - 3 } else { m + 9 };
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_rfc3339_utc_and_read_back() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000Z");
        // 2026-12-01T19:18:12.345Z
        let t = 1_796_152_692_345;
        assert_eq!(rfc3339(t), "2026-12-01T19:18:12.345Z");
        assert_eq!(parse_rfc3339("2026-12-01T19:18:12.345Z"), Some(t));
        assert_eq!(parse_rfc3339("2026-12-01T20:18:12.345+01:00"), Some(t));
        assert_eq!(parse_rfc3339("2000-02-29T00:00:00Z"), Some(951_782_400_000));
        assert_eq!(
            parse_rfc3339("2026-12-01"),
            parse_rfc3339("2026-12-01T00:00:00Z")
        );
        assert_eq!(parse_rfc3339("2026-13-01T00:00:00Z"), None);
        assert_eq!(parse_rfc3339("yesterday"), None);
        for ms in [1, 999, 86_399_999, 4_102_444_800_000] {
            assert_eq!(parse_rfc3339(&rfc3339(ms)), Some(ms));
        }
    }

    #[test]
    fn a_line_is_one_json_object_with_its_schema_kind_time_and_agent() {
        let l = Line::new("agent.example", 0, Record::Start(StartEntry { workers: 2 }));
        let s = serde_json::to_string(&l).unwrap();
        assert_eq!(
            s,
            r#"{"v":1,"time":"1970-01-01T00:00:00.000Z","agent":"agent.example","kind":"start","workers":2}"#
        );
        assert_eq!(serde_json::from_str::<Line>(&s).unwrap(), l);
    }
}
