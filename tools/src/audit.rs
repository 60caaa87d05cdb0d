//! `doic-agent audit`: the questions of seed 003 asked of an audit log
//! directory ([`agent::audit::read`]) or of a running agent's (`--url`,
//! [`fetch`]); the answers are [`doic::audit::query`]: `timeline`, `at`,
//! `explain`, `plot`, as text or `--json`. Lines that cannot be read come
//! back as warnings `FILE:LINE: cause` (`URL:LINE` for an agent's); the
//! rest of the log is still read. Records lost to a full feed (`gap`
//! records) are shown where they were lost.

pub mod fetch;

use std::fmt::Write as _;
use std::path::PathBuf;

use doic::audit::query::{AtView, Explain, Log, PeerExplain, Version, allocation};
use doic::audit::record::{parse_rfc3339, rfc3339};

use crate::cli::audit::{AuditArgs, AuditQuery};
use crate::svg::{Band, Chart, Series};

/// Why a question could not be answered.
#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    /// A running agent's records cannot be fetched.
    #[error(transparent)]
    Fetch(#[from] fetch::FetchError),
    /// The directory cannot be read.
    #[error("{}: cannot read the audit log", dir.display())]
    Read {
        /// The directory.
        dir: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A time argument is not RFC 3339.
    #[error("`{0}` is not an RFC 3339 time (2026-12-01T19:18:00Z)")]
    Time(String),
    /// No version has that sequence.
    #[error("no OCS version with sequence {0} in the log (see `audit timeline`)")]
    NoVersion(u64),
    /// More than one version has that sequence.
    #[error("sequence {seq} names several OCS ({targets}): add --target")]
    Ambiguous {
        /// The sequence.
        seq: u64,
        /// Their targets.
        targets: String,
    },
    /// The plot could not be written.
    #[error("{}: cannot write the plot", path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// An answer, and the lines of the log that could not be read.
#[derive(Debug)]
pub struct Output {
    /// What to print on stdout.
    pub text: String,
    /// `FILE:LINE: cause`, one per unreadable line.
    pub warnings: Vec<String>,
}

/// Answers `args`.
///
/// # Errors
/// The directory is unreadable, an argument is wrong, the plot cannot be
/// written.
pub fn run(args: &AuditArgs) -> Result<Output, AuditError> {
    let (lines, bad) = match &args.url {
        Some(url) => {
            let body = fetch::records(url)?;
            let (mut lines, mut bad) = (Vec::new(), Vec::new());
            agent::audit::read::read_from(
                std::path::Path::new(url),
                body.as_bytes(),
                &mut lines,
                &mut bad,
            );
            (lines, bad)
        }
        None => agent::audit::read::read_dir(&args.dir).map_err(|source| AuditError::Read {
            dir: args.dir.clone(),
            source,
        })?,
    };
    let warnings: Vec<String> = bad.iter().map(ToString::to_string).collect();
    let output = |text: String| Output {
        text,
        warnings: warnings.clone(),
    };
    let log = Log::read(&lines);
    let time = |t: &str| parse_rfc3339(t).ok_or_else(|| AuditError::Time(t.to_owned()));
    let json = |v: serde_json::Result<String>| v.unwrap_or_default() + "\n";
    let text = match &args.query {
        AuditQuery::Timeline { from, to } => {
            let from = from.as_deref().map(time).transpose()?;
            let to = to.as_deref().map(time).transpose()?;
            let t = log.timeline(from, to);
            if args.json {
                json(serde_json::to_string_pretty(&t))
            } else {
                timeline_text(&t)
            }
        }
        AuditQuery::At { time: t } => {
            let at = log.at(time(t)?);
            if args.json {
                json(serde_json::to_string_pretty(&at))
            } else {
                at_text(&at)
            }
        }
        AuditQuery::Explain {
            sequence,
            report,
            target,
        } => {
            let seq = sequence.or(*report).unwrap_or_default();
            let found: Vec<&Version> = log.find(seq, target.as_deref()).collect();
            let v = match found.as_slice() {
                // The agent's own PEER reports make no OCS version here.
                [] => match log.explain_peer(seq).filter(|_| target.is_none()) {
                    Some(e) if args.json => {
                        return Ok(output(json(serde_json::to_string_pretty(&e))));
                    }
                    Some(e) => return Ok(output(peer_explain_text(&e))),
                    None => return Err(AuditError::NoVersion(seq)),
                },
                [v] => *v,
                many => {
                    return Err(AuditError::Ambiguous {
                        seq,
                        targets: many
                            .iter()
                            .map(|v| format!("{} {}", v.report_type, v.target))
                            .collect::<Vec<_>>()
                            .join(", "),
                    });
                }
            };
            let e = log.explain(v);
            if args.json {
                json(serde_json::to_string_pretty(&e))
            } else {
                explain_text(&e)
            }
        }
        AuditQuery::Plot { out } => {
            let svg = plot(&log);
            std::fs::write(out, &svg).map_err(|source| AuditError::Write {
                path: out.clone(),
                source,
            })?;
            if args.json {
                json(serde_json::to_string(&serde_json::json!({
                    "out": out, "seconds": log.seconds.len(), "versions": log.versions.len(),
                })))
            } else {
                format!(
                    "{}: {} seconds, {} OCS versions\n",
                    out.display(),
                    log.seconds.len(),
                    log.versions.len()
                )
            }
        }
    };
    Ok(Output { text, warnings })
}

/// A reduction (`50 %`) or a rate (`200/s`).
fn abatement(loss: Option<u32>, rate: Option<u32>) -> String {
    rate.map_or_else(|| format!("{} %", loss.unwrap_or(0)), |r| format!("{r}/s"))
}

fn name(v: &Version) -> String {
    format!("{} {} #{}", v.report_type, v.target, v.sequence)
}

/// The timeline as a table.
#[must_use]
pub fn timeline_text(log: &Log) -> String {
    let mut s = String::new();
    for t in &log.starts {
        let _ = writeln!(s, "{t}  agent {} started", log.agent);
    }
    let row = |s: &mut String, c: [&str; 8]| {
        let _ = writeln!(
            s,
            "{:<24}  {:<24}  {:<8}  {:<34}  {:<22}  {:>8}  {:>9}  {:>8}",
            c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]
        );
    };
    row(
        &mut s,
        [
            "from",
            "until",
            "by",
            "ocs",
            "asks",
            "matched",
            "throttled",
            "diverted",
        ],
    );
    for v in &log.versions {
        let c = v.counts;
        row(
            &mut s,
            [
                &v.from,
                v.until.as_deref().unwrap_or("-"),
                v.until_by.as_deref().unwrap_or("-"),
                &format!("{}{}", name(v), if v.own { " (issued)" } else { "" }),
                &v.asks(),
                &c.matched.to_string(),
                &c.throttled.to_string(),
                &c.diverted.to_string(),
            ],
        );
    }
    for (t, g) in &log.gaps {
        let _ = writeln!(
            s,
            "{t}  gap: {} records lost before this time, the audit feed was full ({} reports, {} version events, {} issued, {} seconds)",
            g.total(),
            g.report,
            g.version,
            g.issued,
            g.second
        );
    }
    for (t, r) in &log.received {
        if !matches!(
            r.verdict.as_str(),
            "created" | "updated" | "rollover" | "ended"
        ) {
            let _ = writeln!(
                s,
                "{t}  ignored: {} report #{} from {} ({}): {}",
                r.report_type, r.sequence, r.peer, r.target, r.verdict
            );
        }
    }
    for (t, i) in &log.issued {
        let _ = writeln!(s, "{t}  issued: {}", issued_text(i));
    }
    s
}

/// An issued report and why: `host report #S for T to *: 120/s (10 %),
/// validity 10 s, from ...`.
fn issued_text(i: &doic::audit::record::IssuedEntry) -> String {
    let what = match (i.max_rate, i.loss_percent) {
        (Some(r), Some(p)) if i.report_type == "host" => format!("{r}/s ({p} % to loss clients)"),
        (r, p) => abatement(p, r),
    };
    format!(
        "{} report #{}{} to {}: {what}, validity {} s, {}",
        i.report_type,
        i.sequence,
        i.target
            .as_deref()
            .map_or_else(String::new, |t| format!(" for {t}")),
        i.to,
        i.validity,
        i.why()
    )
}

/// What was in force at a moment.
#[must_use]
pub fn at_text(at: &AtView) -> String {
    let mut s = format!("at {}:\n", at.time);
    if at.ocs.is_empty() {
        s += "  no OCS in force\n";
    }
    for (phase, v) in &at.ocs {
        let _ = writeln!(
            s,
            "  {}{} ({phase}, since {}): {}",
            name(v),
            if v.own { " (issued)" } else { "" },
            v.from,
            v.asks()
        );
    }
    s
}

/// The receipt chain.
#[must_use]
pub fn explain_text(e: &Explain) -> String {
    let v = &e.version;
    let c = v.counts;
    let mut s = format!("OCS {} (application {})\n", name(v), v.app_id);
    s += "1. requested: ";
    match &e.requested {
        Some((t, r)) => {
            let _ = writeln!(
                s,
                "OC-OLR received {t} from peer {}: {} report, {} {}, validity {} s",
                r.peer,
                r.report_type,
                r.algorithm,
                abatement(r.reduction_percentage, r.maximum_rate),
                r.validity
                    .map_or_else(|| "default".into(), |d| d.to_string())
            );
        }
        None if v.own && e.issued.is_empty() => {
            s += "issued by this agent (no record of its issue in the log)\n";
        }
        None if v.own => {
            for (t, i) in &e.issued {
                let _ = writeln!(s, "issued {t}: {}", issued_text(i));
            }
            let _ = writeln!(
                s,
                "   sent to: {}",
                if e.sent_to.is_empty() {
                    "no client".into()
                } else {
                    e.sent_to.join(", ")
                }
            );
        }
        None => s += "no received report in the log\n",
    }
    let _ = writeln!(
        s,
        "2. accepted: {} by workers {:?}; ignored while in force: {}",
        v.from,
        v.workers,
        if e.ignored.is_empty() {
            "none".into()
        } else {
            e.ignored
                .iter()
                .map(|i| {
                    format!(
                        "#{} at {} ({})",
                        i.report.sequence, i.time, i.report.verdict
                    )
                })
                .collect::<Vec<_>>()
                .join(", ")
        }
    );
    let _ = writeln!(
        s,
        "3. in force: from {} until {} ({}), state gone {}",
        v.from,
        v.until.as_deref().unwrap_or("the end of the log"),
        v.until_by.as_deref().unwrap_or("-"),
        v.removed.as_deref().unwrap_or("-")
    );
    let _ = writeln!(
        s,
        "4. treatment: matched {} = passed {} + diverted {} + throttled {} + delegated {}{}",
        c.matched,
        c.passed,
        c.diverted,
        c.throttled,
        c.delegated,
        if v.delegated.is_empty() {
            String::new()
        } else {
            format!(
                " (delegated to {})",
                v.delegated.iter().cloned().collect::<Vec<_>>().join(", ")
            )
        }
    );
    let _ = writeln!(s, "   {}", split_text(&v.split));
    s += "5. ";
    wide_text(&mut s, &e.agent_wide, &e.agent_wide_split);
    claim_text(&mut s, &e.claim, &e.cannot_show);
    s
}

/// The receipt chain of one of the agent's own PEER reports.
#[must_use]
pub fn peer_explain_text(e: &PeerExplain) -> String {
    let mut s = format!("own PEER report #{} (RFC 8581 §6.2.4)\n", e.sequence);
    let _ = writeln!(s, "1. decided {}:", e.decided);
    for c in &e.clients {
        let _ = writeln!(s, "   {}", issued_text(&c.report));
    }
    s += "2. allocated to, and until:\n";
    for c in &e.clients {
        let _ = writeln!(
            s,
            "   {} #{}: {}, validity {} s, issued {}, re-sent unchanged {} times, until {} ({})",
            c.report.to,
            c.report.sequence,
            allocation(c.report.loss_percent, c.report.max_rate),
            c.report.validity,
            c.issued,
            c.resent,
            c.until.as_deref().unwrap_or("the end of the log"),
            c.until_by.as_deref().unwrap_or("-")
        );
    }
    let _ = writeln!(
        s,
        "3. in force: from {} until {}",
        e.from,
        e.until.as_deref().unwrap_or("the end of the log")
    );
    let _ = write!(
        s,
        "4. treatment: no OCS version at this node; the agent-wide requests ({} seconds; own enforcement's answers included): ",
        e.seconds
    );
    wide_text(&mut s, &e.agent_wide, &e.agent_wide_split);
    claim_text(&mut s, &e.claim, &e.cannot_show);
    s
}

/// `agent-wide over those seconds: requests R = ...` and its split, with
/// the throttled by Result-Code over the requests.
fn wide_text(s: &mut String, w: &doic::audit::Totals, split: &doic::audit::Spread) {
    let _ = writeln!(
        s,
        "agent-wide over those seconds: requests {} = forwarded {} + diverted {} + throttled {} + no_route {}",
        w.requests, w.forwarded, w.diverted, w.throttled, w.no_route
    );
    let _ = writeln!(s, "   {}", split_text(split));
    for (code, n) in &split.throttled_by {
        let _ = writeln!(s, "   throttled {code}: {n} of {} requests", w.requests);
    }
}

/// The claim and what the records cannot show.
fn claim_text(s: &mut String, claim: &str, cannot_show: &[String]) {
    let _ = writeln!(s, "claim: {claim}");
    *s += "the records cannot show:\n";
    for c in cannot_show {
        let _ = writeln!(s, "  - {c}");
    }
}

/// `throttled by Result-Code 3004: 12, 5012: 3; diverted to s2: 40`.
fn split_text(split: &doic::audit::Spread) -> String {
    let list = |it: Vec<String>| {
        if it.is_empty() {
            "none".to_owned()
        } else {
            it.join(", ")
        }
    };
    format!(
        "throttled by Result-Code: {}; diverted to: {}",
        list(
            split
                .throttled_by
                .iter()
                .map(|(c, n)| format!("{c}: {n}"))
                .collect()
        ),
        list(
            split
                .diverted_to
                .iter()
                .map(|(p, n)| format!("{p}: {n}"))
                .collect()
        )
    )
}

/// The per-second plot: offered (requests), forwarded, diverted, throttled;
/// each version a band; the requested reduction (%) on the right axis.
#[must_use]
pub fn plot(log: &Log) -> String {
    let t0 = log
        .seconds
        .first()
        .map(|(t, _)| *t)
        .into_iter()
        .chain(log.versions.iter().filter_map(|v| parse_rfc3339(&v.from)))
        .min()
        .unwrap_or(0);
    #[expect(clippy::cast_precision_loss, reason = "seconds and counts on a chart")]
    let x = |t: u64| t.saturating_sub(t0) as f64 / 1000.0;
    #[expect(clippy::cast_precision_loss, reason = "counts on a chart")]
    let series = |n: &str, f: fn(&doic::audit::Totals) -> u64| Series {
        name: n.into(),
        points: log
            .seconds
            .iter()
            .map(|(t, s)| (x(*t), f(&s.totals) as f64))
            .collect(),
    };
    let end = log.seconds.last().map_or(t0, |(t, _)| *t);
    let until = |v: &Version| {
        v.removed
            .as_deref()
            .or(v.until.as_deref())
            .and_then(parse_rfc3339)
            .unwrap_or(end)
    };
    let bands: Vec<Band> = log
        .versions
        .iter()
        .map(|v| Band {
            label: format!("{} {}", name(v), v.asks()),
            from: x(parse_rfc3339(&v.from).unwrap_or(t0)),
            to: x(until(v)),
        })
        .collect();
    let mut reduction = Vec::new();
    for v in log.versions.iter().filter(|v| v.loss_percent.is_some()) {
        let p = f64::from(v.loss_percent.unwrap_or(0));
        let (a, b) = (x(parse_rfc3339(&v.from).unwrap_or(t0)), x(until(v)));
        reduction.extend([(a, 0.0), (a, p), (b, p), (b, 0.0)]);
    }
    let chart = Chart {
        title: format!("Audit log of {}", log.agent),
        x_label: format!("seconds since {}", rfc3339(t0)),
        y_label: "requests per second".into(),
        left: vec![
            series("offered", |t| t.requests),
            series("forwarded", |t| t.forwarded),
            series("diverted", |t| t.diverted),
            series("throttled", |t| t.throttled),
        ],
        right: Some((
            "requested reduction (%)".into(),
            vec![Series {
                name: "requested reduction".into(),
                points: reduction,
            }],
        )),
        note: "bands: OCS versions in force (and ending)".into(),
    };
    chart.render_with_bands(&bands)
}
