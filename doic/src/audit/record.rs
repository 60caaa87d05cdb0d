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

use std::collections::BTreeMap;

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
    /// The DOIC clients that were sent the version the event closes and
    /// that the agent still holds to it (the HOST reports on a server's
    /// behalf, docs/protect.md).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sent_to: Vec<String>,
}

/// A report the agent issued itself, with its decision's inputs: its own
/// PEER reports (RFC 8581 §6.2.4), the HOST reports on behalf of servers
/// without DOIC (RFC 7683 §5.1.3), its REALM reports (RFC 7683 §5.1.3,
/// seed 002). One record per version: issued, renewed with a new validity,
/// changed, or ended (validity 0, §5.2.3).
///
/// The fields after `validity` came with the HOST and REALM records: a
/// line without them (an older PEER record) reads with them absent.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct IssuedEntry {
    /// `peer`, `host` or `realm`.
    pub report_type: String,
    /// Who it is for: the client of a PEER report; `*` for the loss report
    /// to every client without the rate algorithm, and for a HOST or REALM
    /// report (every authorised DOIC client whose answers it goes in: who
    /// was sent it is in the `version` records, `sent_to` and `delegated`).
    pub to: String,
    /// OC-Sequence-Number.
    pub sequence: u64,
    /// OC-Reduction-Percentage (loss).
    pub loss_percent: Option<u32>,
    /// OC-Maximum-Rate (rate): the client's allocation, or the server's
    /// limit.
    pub max_rate: Option<u32>,
    /// OC-Validity-Duration in seconds (0: the end of the condition).
    pub validity: f64,
    /// What it is about: the protected server (HOST), the realm (REALM);
    /// absent for the agent's own PEER reports.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// The Application-IDs it is made for (HOST, REALM).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub app_ids: Vec<u32>,
    /// The inputs of a PEER report: the agent's own load.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inputs: Option<IssuedInputs>,
    /// The inputs of a HOST report on a server's behalf.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<ServerInputs>,
    /// The inputs of a REALM report.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub realm: Option<RealmInputs>,
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

/// What the agent measured of a protected server when it issued a HOST
/// report on its behalf (docs/protect.md).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ServerInputs {
    /// Its estimated limit, requests per second (absent: lifted, the end).
    pub limit: Option<u32>,
    /// Its unloaded latency as estimated, in milliseconds.
    pub baseline_ms: Option<f64>,
    /// The mean latency of its last tick's answers, in milliseconds.
    pub latency_ms: Option<f64>,
    /// Requests sent to it and not answered.
    pub outstanding: u64,
    /// Requests offered toward it per second (relayed and throttled).
    pub offered: f64,
    /// Its answers other than 3004 per second.
    pub answered: f64,
    /// The OC-Reduction-Percentage each client with a share is sent if it
    /// takes loss: the cut of its own demand to its share
    /// (`crate::protect::ClientLoss`; `loss_percent` is for the others).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub client_loss: BTreeMap<String, u32>,
}

/// What the agent estimated of a realm when it issued a REALM report
/// (seed 002, `doic::realm`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RealmInputs {
    /// The realm's servers.
    pub servers: Vec<String>,
    /// Their summed capacity as the estimate counts it (limits, shares of
    /// loss reports, headroom), requests per second; absent when no
    /// demand was measured.
    pub limits: Option<f64>,
    /// The realm's demand at the agent, requests per second (all cores,
    /// with what the clients sent the report abate added back).
    pub demand: Option<f64>,
    /// The mean capacity in fair shares of the demand (below 1: short).
    pub capacity_share: f64,
    /// The shortage, percent: the reduction asked for (0: the end).
    pub shortage_percent: u32,
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

impl IssuedEntry {
    /// Why it was issued, in words: its decision's inputs.
    #[must_use]
    pub fn why(&self) -> String {
        let ms = |d: Option<f64>| d.map_or_else(|| "-".into(), |d| format!("{d:.1} ms"));
        if let Some(s) = &self.server {
            let limit = s
                .limit
                .map_or_else(|| "lifted".into(), |l| format!("{l} requests/s"));
            let mut why = format!(
                "from the server's limit {limit}, {:.0} requests/s offered toward it, {:.0} answered, latency {} against a baseline of {}, {} outstanding",
                s.offered,
                s.answered,
                ms(s.latency_ms),
                ms(s.baseline_ms),
                s.outstanding
            );
            if !s.client_loss.is_empty() {
                let each: Vec<String> = s
                    .client_loss
                    .iter()
                    .map(|(c, p)| format!("{c} {p} %"))
                    .collect();
                why.push_str(&format!(
                    "; loss clients the cut of their demand to their share: {}",
                    each.join(", ")
                ));
            }
            why
        } else if let Some(r) = &self.realm {
            let rate = |x: Option<f64>| x.map_or_else(|| "-".into(), |x| format!("{x:.0}"));
            format!(
                "from the realm's servers ({}) taking {} of {} requests/s demanded ({:.2} of their fair shares), short by {} %",
                r.servers.join(", "),
                rate(r.limits),
                rate(r.demand),
                r.capacity_share,
                r.shortage_percent
            )
        } else if let Some(i) = &self.inputs {
            format!(
                "from the agent's capacity {} requests/s, {:.0} requests/s offered, utilisation {:.2}, queue delay {:.1} ms, {} pending",
                i.capacity, i.offered, i.utilisation, i.queue_delay_ms, i.pending
            )
        } else {
            "(no inputs recorded)".into()
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
            sent_to: v.sent_to.clone(),
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

    /// A PEER record as schema 1 wrote it before the HOST and REALM ones.
    const OLD_ISSUED: &str = r#"{"v":1,"time":"2026-12-01T19:18:12.345Z","agent":"a","kind":"issued","report_type":"peer","to":"c1","sequence":5,"loss_percent":null,"max_rate":100,"validity":30.0,"inputs":{"capacity":200,"offered":350.0,"utilisation":0.9,"queue_delay_ms":2.5,"pending":4}}"#;

    #[test]
    fn an_old_issued_line_reads_with_the_new_fields_absent_and_writes_back_the_same() {
        let l: Line = serde_json::from_str(OLD_ISSUED).unwrap();
        let Record::Issued(i) = &l.record else {
            panic!("{l:?}")
        };
        assert_eq!((i.report_type.as_str(), i.sequence), ("peer", 5));
        assert_eq!(i.inputs.as_ref().map(|x| x.capacity), Some(200));
        assert_eq!((&i.target, &i.app_ids), (&None, &Vec::new()));
        assert_eq!((&i.server, &i.realm), (&None, &None));
        assert_eq!(serde_json::to_string(&l).unwrap(), OLD_ISSUED);
        assert!(i.why().contains("capacity 200 requests/s"), "{}", i.why());
    }

    #[test]
    fn host_and_realm_records_carry_their_own_inputs_and_read_back() {
        let host = IssuedEntry {
            report_type: "host".into(),
            to: "*".into(),
            sequence: 1_796_152_692_345,
            loss_percent: Some(67),
            max_rate: Some(200),
            validity: 10.0,
            target: Some("s1".into()),
            app_ids: vec![4],
            inputs: None,
            server: Some(ServerInputs {
                limit: Some(200),
                baseline_ms: Some(1.5),
                latency_ms: Some(40.0),
                outstanding: 12,
                offered: 600.0,
                answered: 198.0,
                client_loss: BTreeMap::from([("edge.example.com".into(), 70)]),
            }),
            realm: None,
        };
        let realm = IssuedEntry {
            report_type: "realm".into(),
            loss_percent: Some(67),
            max_rate: None,
            validity: 30.0,
            target: Some("example.net".into()),
            server: None,
            realm: Some(RealmInputs {
                servers: vec!["s1".into(), "s2".into()],
                limits: Some(400.0),
                demand: Some(1200.0),
                capacity_share: 0.333,
                shortage_percent: 67,
            }),
            ..host.clone()
        };
        for (e, has, lacks, why) in [
            (
                &host,
                r#""server":{"limit":200"#,
                "realm",
                "limit 200 requests/s, 600 requests/s offered toward it, 198 answered, latency 40.0 ms against a baseline of 1.5 ms, 12 outstanding; loss clients the cut of their demand to their share: edge.example.com 70 %",
            ),
            (
                &realm,
                r#""realm":{"servers":["s1","s2"]"#,
                "\"server\"",
                "taking 400 of 1200 requests/s demanded",
            ),
        ] {
            let l = Line::new("a", 0, Record::Issued(e.clone()));
            let text = serde_json::to_string(&l).unwrap();
            assert!(text.contains(has), "{text}");
            assert!(text.contains(r#""target":"#) && text.contains(r#""app_ids":[4]"#));
            assert!(
                !text.contains(r#""inputs""#) && !text.contains(&format!("\"{lacks}\":{{")),
                "{text}"
            );
            assert_eq!(serde_json::from_str::<Line>(&text).unwrap(), l);
            assert!(e.why().contains(why), "{}", e.why());
        }
    }

    #[test]
    fn an_old_version_line_reads_without_sent_to() {
        let old = r#"{"v":1,"time":"2026-12-01T19:18:12.345Z","agent":"a","kind":"version","worker":0,"app_id":4,"report_type":"host","target":"s1","own":true,"event":"ended","sequence":2,"loss_percent":null,"max_rate":200,"validity":0.0,"counts":{"matched":10,"passed":4,"diverted":0,"throttled":6,"delegated":0},"split":{"throttled_by":{"5012":6}},"delegated":[]}"#;
        let l: Line = serde_json::from_str(old).unwrap();
        let Record::Version(v) = &l.record else {
            panic!("{l:?}")
        };
        assert!(v.sent_to.is_empty());
        assert_eq!(v.counts.throttled, 6);
        assert_eq!(
            serde_json::to_string(&l).unwrap(),
            old,
            "sent_to left out when empty"
        );
    }
}
