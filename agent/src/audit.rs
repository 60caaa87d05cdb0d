//! The durable audit log (`[audit]`): the evidence of seed 003 as JSON Lines
//! in a directory ([`doic::audit::record`]), so that an incident review can
//! ask what was requested, accepted, active and done (RFC 7683 §5.2.1.1,
//! §6.3; RFC 8581 §6.2) after the fact and across restarts.
//!
//! Who feeds it, never waiting: each worker at its control tick sends the
//! records its core kept since the last tick (received reports, OCS version
//! events: [`doic::audit::Audit::take_new`]; the REALM reports it made:
//! [`doic::audit::Audit::take_issued`]); the control thread sends the
//! agent's own peer reports and the HOST reports on behalf of protected
//! servers as it issues them and, once a second, the
//! agent-wide counts and each version's counts from the workers'
//! snapshots. Nothing is added to the request path: the counts are the
//! counters the cores already keep. All go over one bounded crossbeam feed
//! ([`crate::feed`], `[audit] feed_capacity` lines, [`FEED_CAPACITY`] by
//! default); a line that finds it full is dropped, counted in
//! `doic_audit_dropped_total` and, by kind, in the next `gap` record the
//! writer writes ([`doic::audit::record::GapEntry`]): records written +
//! dropped = records produced, and the log says where it is incomplete.
//!
//! | module | what it does |
//! | --- | --- |
//! | this one | [`Section`] (`[audit]`), [`AuditLog`]: the feed and the wall clock of the records |
//! | [`writer`] | the one writer thread: flush interval, size-based rotation, retention |
//! | [`read`] | reading a log directory back, every rotated file in order, malformed lines named |

use std::path::PathBuf;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use doic::audit::record::{GapEntry, Line, Record};
use serde::Deserialize;

use crate::feed::Feed;

pub mod read;
pub mod writer;

/// Lines the feed holds between two flushes of the writer. A line that
/// finds it full is lost (counted in `doic_audit_dropped_total`): the log
/// then lacks that receipt, and says how many are missing.
pub const FEED_CAPACITY: usize = 16_384;

/// `[audit]`: where and how the audit log is written. Without `dir` there
/// is no log.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Section {
    /// The directory of the log files (created if missing).
    pub dir: Option<PathBuf>,
    /// A file is closed and a new one begun once it reaches this size.
    pub max_file_bytes: u64,
    /// Files kept; the oldest are removed beyond it (retention: at most
    /// `max_files * max_file_bytes` bytes).
    pub max_files: usize,
    /// How often the writer writes what was fed and flushes, in ms.
    pub flush_ms: u64,
    /// Lines the feed holds between two flushes; beyond it lines are
    /// dropped and counted (a gap in the log).
    pub feed_capacity: usize,
}

impl Default for Section {
    fn default() -> Self {
        Self {
            dir: None,
            max_file_bytes: 64 * 1024 * 1024,
            max_files: 16,
            flush_ms: 1000,
            feed_capacity: FEED_CAPACITY,
        }
    }
}

/// A refused `[audit]` value: the key and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{key}: {why}")]
pub struct SectionError {
    /// The key, `audit.max_files`.
    pub key: &'static str,
    /// Why.
    pub why: String,
}

impl Section {
    /// Checks the values serde cannot; `doic`: whether overload control is
    /// on (the log records it).
    ///
    /// # Errors
    /// The first refused key.
    pub fn check(&self, doic: bool) -> Result<(), SectionError> {
        let bad = |key, why: &str| {
            Err(SectionError {
                key,
                why: why.into(),
            })
        };
        if let Some(dir) = &self.dir {
            if dir.as_os_str().is_empty() {
                return bad("audit.dir", "must name a directory");
            }
            if !doic {
                return bad(
                    "audit.dir",
                    "the audit log records overload control: it needs an enabled [doic] section",
                );
            }
        }
        if self.max_file_bytes < 4096 {
            return bad("audit.max_file_bytes", "must be at least 4096");
        }
        if self.max_files < 2 {
            return bad(
                "audit.max_files",
                "must be at least 2 (the file being written and one before it)",
            );
        }
        if !(10..=60_000).contains(&self.flush_ms) {
            return bad("audit.flush_ms", "must be between 10 and 60000");
        }
        if !(1..=1 << 20).contains(&self.feed_capacity) {
            return bad("audit.feed_capacity", "must be between 1 and 1048576");
        }
        Ok(())
    }
}

/// The feed of the audit log and the wall clock of its records: the
/// agent's clock at start paired with the system time at start.
#[derive(Debug)]
pub struct AuditLog {
    identity: String,
    feed: Feed<Line>,
    origin: Instant,
    origin_ms: u64,
    /// The last second's sums and their split (control thread).
    pub(crate) last: Mutex<(doic::audit::Totals, doic::audit::Spread)>,
    written: AtomicU64,
    /// Records fed or dropped, and those dropped by kind (the feed's own
    /// count is their sum): only a full feed touches these.
    produced: AtomicU64,
    lost: [AtomicU64; 4],
    /// The directory the writer writes (`GET /audit?records`).
    dir: std::sync::OnceLock<PathBuf>,
}

/// The most of the log `GET /audit?records` serves: the newest files that
/// fit (a whole log is up to `max_files * max_file_bytes`).
pub const SERVE_MAX_BYTES: u64 = 64 * 1024 * 1024;

/// The slot of a record's kind in [`AuditLog`]'s lost counts.
const fn kind_slot(r: &Record) -> Option<usize> {
    match r {
        Record::Report(_) => Some(0),
        Record::Version(_) => Some(1),
        Record::Issued(_) => Some(2),
        Record::Second(_) => Some(3),
        Record::Start(_) | Record::Gap(_) => None,
    }
}

impl AuditLog {
    /// The log of the agent `identity`, whose clock read `origin` now.
    #[must_use]
    pub fn new(identity: &str, origin: Instant, capacity: usize) -> Self {
        let origin_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        Self {
            identity: identity.to_owned(),
            feed: Feed::new("audit", capacity),
            origin,
            origin_ms,
            last: Mutex::default(),
            written: AtomicU64::new(0),
            produced: AtomicU64::new(0),
            lost: Default::default(),
            dir: std::sync::OnceLock::new(),
        }
    }

    /// The log's files, oldest first, as written: the newest files that
    /// fit in [`SERVE_MAX_BYTES`] (`GET /audit?records`; blocking).
    ///
    /// # Errors
    /// The directory or a file cannot be read.
    pub fn read_back(&self) -> std::io::Result<String> {
        let Some(dir) = self.dir.get() else {
            return Ok(String::new());
        };
        let files = writer::files(dir)?;
        let mut budget = SERVE_MAX_BYTES;
        let mut keep = Vec::new();
        for (_, path) in files.iter().rev() {
            let len = std::fs::metadata(path)?.len();
            if len > budget && !keep.is_empty() {
                break;
            }
            budget = budget.saturating_sub(len);
            keep.push(path);
        }
        let mut out = String::new();
        for path in keep.into_iter().rev() {
            out += &std::fs::read_to_string(path)?;
        }
        Ok(out)
    }

    /// Milliseconds since the Unix epoch of the agent's instant `at`.
    #[must_use]
    pub fn unix_ms(&self, at: Instant) -> u64 {
        let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        match at.checked_duration_since(self.origin) {
            Some(d) => self.origin_ms.saturating_add(ms(d)),
            None => self
                .origin_ms
                .saturating_sub(ms(self.origin.saturating_duration_since(at))),
        }
    }

    /// Feeds `record` of the instant `at`, never waiting; false (and
    /// counted) when the feed is full.
    pub fn send(&self, at: Instant, record: Record) -> bool {
        self.produced.fetch_add(1, Ordering::Relaxed);
        let slot = kind_slot(&record);
        let sent = self
            .feed
            .send(Line::new(&self.identity, self.unix_ms(at), record));
        if !sent && let Some(i) = slot {
            self.lost[i].fetch_add(1, Ordering::Relaxed);
        }
        sent
    }

    /// Records fed to the writer or dropped (`doic_audit_records_total`):
    /// written + dropped, once the writer has written what it holds.
    #[must_use]
    pub fn produced(&self) -> u64 {
        self.produced.load(Ordering::Relaxed)
    }

    /// The records lost since `seen` (the writer's last gap), by kind;
    /// `seen` becomes the counts now. `None` when nothing was lost.
    pub(crate) fn gap_since(&self, seen: &mut GapEntry) -> Option<GapEntry> {
        let now = |i: usize| self.lost[i].load(Ordering::Relaxed);
        let all = GapEntry {
            report: now(0),
            version: now(1),
            issued: now(2),
            second: now(3),
        };
        let gap = GapEntry {
            report: all.report - seen.report,
            version: all.version - seen.version,
            issued: all.issued - seen.issued,
            second: all.second - seen.second,
        };
        *seen = all;
        (gap.total() > 0).then_some(gap)
    }

    /// Lines dropped because the feed was full (`doic_audit_dropped_total`).
    #[must_use]
    pub fn dropped(&self) -> u64 {
        self.feed.dropped()
    }

    /// Lines written to the log (`doic_audit_lines_total`).
    #[must_use]
    pub fn written(&self) -> u64 {
        self.written.load(Ordering::Relaxed)
    }

    pub(crate) fn drain(&self) -> impl Iterator<Item = Line> + '_ {
        self.feed.drain()
    }

    pub(crate) fn note_written(&self, n: u64) {
        self.written.fetch_add(n, Ordering::Relaxed);
    }
}

/// Feeds what `worker`'s core recorded since its last tick (worker, at its
/// control tick).
pub(crate) fn feed_worker(log: &AuditLog, worker: usize, audit: &mut doic::audit::Audit) {
    use doic::audit::record::{ReportEntry, VersionEntry};
    let (reports, versions) = audit.take_new();
    for r in &reports {
        log.send(r.at, Record::Report(ReportEntry::of(worker, r)));
    }
    for i in audit.take_issued() {
        log.send(i.at, Record::Issued(i.entry));
    }
    for v in &versions {
        log.send(
            v.at,
            Record::Version(VersionEntry::of(worker, v, audit.peers())),
        );
    }
}

/// Feeds the second ending at `now` (control thread, once a second): the
/// agent-wide counts since the last second, from `sum` (the workers'
/// snapshots' totals so far and their split,
/// [`crate::overload::Overload::second_totals`]), and `ocs`, each version
/// in force with its counts so far.
pub(crate) fn feed_second(
    log: &AuditLog,
    (sum, sum_split, ocs): (
        doic::audit::Totals,
        doic::audit::Spread,
        Vec<doic::audit::record::OcsCount>,
    ),
    now: Instant,
) {
    use doic::audit::Totals;
    use doic::audit::record::SecondEntry;
    let (prev, prev_split) = std::mem::replace(
        &mut *log
            .last
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner),
        (sum, sum_split.clone()),
    );
    let split = sum_split.since(&prev_split);
    let totals = Totals {
        requests: sum.requests.saturating_sub(prev.requests),
        forwarded: sum.forwarded.saturating_sub(prev.forwarded),
        diverted: sum.diverted.saturating_sub(prev.diverted),
        throttled: sum.throttled.saturating_sub(prev.throttled),
        no_route: sum.no_route.saturating_sub(prev.no_route),
        ..Totals::default()
    };
    log.send(now, Record::Second(SecondEntry { totals, split, ocs }));
}

/// Feeds the agent's own peer reports as issued at `now` (control thread,
/// when their generation changes), with the decision's inputs.
pub(crate) fn feed_issued<'a>(
    log: &AuditLog,
    now: Instant,
    reports: impl Iterator<Item = &'a doic::own_load::OwnReport>,
    inputs: &doic::audit::record::IssuedInputs,
) {
    use doic::audit::record::{IssuedEntry, abatement_fields, report_type_name};
    for r in reports {
        let (loss_percent, max_rate) = abatement_fields(r.report.abatement);
        log.send(
            now,
            Record::Issued(IssuedEntry {
                report_type: report_type_name(r.report.report_type),
                to: r.peer.clone().unwrap_or_else(|| "*".into()),
                sequence: r.report.sequence,
                loss_percent,
                max_rate,
                validity: r.report.validity.as_secs_f64(),
                target: None,
                app_ids: Vec::new(),
                inputs: Some(inputs.clone()),
                server: None,
                realm: None,
            }),
        );
    }
}

/// Feeds a version of the HOST report issued on behalf of the protected
/// `server` for `app_ids` at `now` (control thread, when a version is
/// made: issued, renewed, changed, ended), with the decision's inputs.
pub(crate) fn feed_behalf(
    log: &AuditLog,
    now: Instant,
    (server, app_ids): (&str, Vec<u32>),
    r: &doic::protect::BehalfReport,
    inputs: doic::audit::record::ServerInputs,
) {
    use doic::audit::record::{IssuedEntry, abatement_fields};
    let (loss_percent, max_rate) = abatement_fields(r.report.abatement);
    log.send(
        now,
        Record::Issued(IssuedEntry {
            report_type: "host".into(),
            to: "*".into(),
            sequence: r.report.sequence,
            // The loss clients' percentage of the same version.
            loss_percent: loss_percent.or(Some(r.loss_percent)),
            max_rate,
            validity: r.report.validity.as_secs_f64(),
            target: Some(server.to_owned()),
            app_ids,
            inputs: None,
            server: Some(inputs),
            realm: None,
        }),
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use doic::audit::record::StartEntry;

    #[test]
    fn a_full_feed_drops_and_counts_and_never_waits() {
        let log = AuditLog::new("agent.example", Instant::now(), 3);
        let at = Instant::now();
        let sent: Vec<bool> = (0..5)
            .map(|_| log.send(at, Record::Start(StartEntry { workers: 1 })))
            .collect();
        assert_eq!(sent, [true, true, true, false, false]);
        assert_eq!(log.dropped(), 2);
        assert_eq!(log.drain().count(), 3);
        assert!(log.send(at, Record::Start(StartEntry { workers: 1 })));
        assert_eq!(log.dropped(), 2);
        assert_eq!(log.produced(), 6);
    }

    #[test]
    fn a_gap_counts_by_kind_what_was_lost_since_the_last_one() {
        use doic::audit::record::SecondEntry;
        let log = AuditLog::new("agent.example", Instant::now(), 1);
        let at = Instant::now();
        let mut seen = GapEntry::default();
        assert_eq!(log.gap_since(&mut seen), None, "nothing lost");
        for _ in 0..4 {
            log.send(at, Record::Second(SecondEntry::default()));
        }
        let gap = log.gap_since(&mut seen).unwrap();
        assert_eq!((gap.second, gap.total()), (3, 3), "one kept, three lost");
        assert_eq!(log.gap_since(&mut seen), None, "counted once");
        assert_eq!(log.dropped(), 3);
    }

    #[test]
    fn records_carry_the_wall_clock_of_their_instant() {
        let origin = Instant::now();
        let log = AuditLog::new("a", origin, 4);
        let later = log.unix_ms(origin + Duration::from_millis(1500));
        assert_eq!(later - log.unix_ms(origin), 1500);
        let now_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis();
        assert!(u128::from(log.unix_ms(origin)).abs_diff(now_ms) < 5_000);
    }

    #[test]
    fn the_section_refuses_what_it_cannot_honour() {
        let ok = Section {
            dir: Some("/var/log/doic".into()),
            ..Section::default()
        };
        assert_eq!(ok.check(true), Ok(()));
        assert_eq!(ok.check(false).unwrap_err().key, "audit.dir");
        assert_eq!(Section::default().check(false), Ok(()), "off needs nothing");
        let keys = [
            Section {
                max_file_bytes: 100,
                ..ok.clone()
            },
            Section {
                max_files: 1,
                ..ok.clone()
            },
            Section {
                flush_ms: 0,
                ..ok.clone()
            },
            Section {
                feed_capacity: 0,
                ..ok.clone()
            },
        ]
        .map(|s| s.check(true).unwrap_err().key);
        assert_eq!(
            keys,
            [
                "audit.max_file_bytes",
                "audit.max_files",
                "audit.flush_ms",
                "audit.feed_capacity"
            ]
        );
    }
}

#[cfg(test)]
mod config_tests {
    use std::path::Path;

    use crate::config::{Config, DEMO_CONFIG};

    #[test]
    fn check_config_names_the_audit_key_it_refuses() {
        let parse = |tail: &str| {
            Config::from_str_named(&format!("{DEMO_CONFIG}{tail}"), Path::new("t.toml"))
                .map_err(|e| e.to_string())
        };
        let on = parse("[doic]\n[audit]\ndir = \"/var/log/doic\"\nmax_files = 4\n").unwrap();
        assert_eq!(on.audit.max_files, 4);
        assert_eq!(on.audit.flush_ms, 1000, "the default");
        assert!(parse("").unwrap().audit.dir.is_none(), "off by default");
        for (tail, key) in [
            ("[audit]\ndir = \"/var/log/doic\"\n", "audit.dir"),
            (
                "[doic]\n[audit]\ndir = \"/x\"\nflush_ms = 0\n",
                "audit.flush_ms",
            ),
            (
                "[doic]\n[audit]\ndir = \"/x\"\nmax_files = 1\n",
                "audit.max_files",
            ),
            ("[doic]\n[audit]\ndir = \"/x\"\nsize = 1\n", "size"),
        ] {
            let e = parse(tail).unwrap_err();
            assert!(e.contains(key), "{tail}: {e}");
        }
    }
}
