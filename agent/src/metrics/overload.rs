//! The DOIC metrics in the Prometheus text format: treatment totals,
//! received reports by verdict and the overload control states in force,
//! summed over the workers' last snapshots
//! ([`crate::overload::Snapshot`]), replicas dropped, and the agent's own
//! overload ([`crate::overload::own`]). Renders only: the state is the
//! workers'.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use doic::audit::Totals;

use crate::overload::Overload;

/// The DOIC metrics, Prometheus text format.
pub(crate) fn render(ov: &Overload, o: &mut String) {
    let snaps = ov.snapshots();
    let mut t = Totals::default();
    let mut verdicts: BTreeMap<String, u64> = BTreeMap::new();
    let mut ocs: BTreeMap<(&'static str, String), u64> = BTreeMap::new();
    for s in &snaps {
        t.add_counts(&s.totals);
        for (k, v) in &s.verdicts {
            *verdicts.entry(k.clone()).or_insert(0) += v;
        }
    }
    // Every worker holds the same states (replicated): the first one counts.
    if let Some(s) = snaps.first() {
        for r in &s.ocs {
            *ocs.entry((r.report_type, r.target.clone())).or_insert(0) += 1;
        }
    }
    let _ = writeln!(
        o,
        "# HELP doic_requests_treated_total Requests treated by overload control, by treatment.\n# TYPE doic_requests_treated_total counter"
    );
    for (k, v) in [
        ("forwarded", t.forwarded),
        ("diverted", t.diverted),
        ("throttled", t.throttled),
        ("no_route", t.no_route),
    ] {
        let _ = writeln!(o, "doic_requests_treated_total{{treatment=\"{k}\"}} {v}");
    }
    let _ = writeln!(
        o,
        "# HELP doic_reports_received_total Overload reports received, by verdict (retained trail).\n# TYPE doic_reports_received_total counter"
    );
    for (k, v) in &verdicts {
        let _ = writeln!(o, "doic_reports_received_total{{outcome=\"{k}\"}} {v}");
    }
    let _ = writeln!(
        o,
        "# HELP doic_ocs_active Overload control states in force.\n# TYPE doic_ocs_active gauge"
    );
    for ((ty, target), n) in &ocs {
        let _ = writeln!(
            o,
            "doic_ocs_active{{type=\"{ty}\",target=\"{}\"}} {n}",
            target.replace(['"', '\\', '\n'], "_")
        );
    }
    let _ = writeln!(
        o,
        "# HELP doic_replicas_dropped_total Accepted reports not handed to another worker: its inbox was full.\n# TYPE doic_replicas_dropped_total counter\ndoic_replicas_dropped_total {}",
        ov.replicas_dropped()
    );
    if let Some(log) = ov.audit_log() {
        let _ = writeln!(
            o,
            "# HELP doic_audit_dropped_total Audit log lines lost: the writer's feed was full.\n# TYPE doic_audit_dropped_total counter\ndoic_audit_dropped_total {}\n# HELP doic_audit_lines_total Audit log lines written.\n# TYPE doic_audit_lines_total counter\ndoic_audit_lines_total {}\n# HELP doic_audit_records_total Audit records produced: written or dropped.\n# TYPE doic_audit_records_total counter\ndoic_audit_records_total {}",
            log.dropped(),
            log.written(),
            log.produced()
        );
    }
    crate::overload::own::render(ov, o);
    crate::overload::protect::render(ov, o);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every DOIC family is rendered, the dropped replicas included, with
    /// no worker snapshot yet.
    #[test]
    fn every_doic_family_is_rendered() {
        let ov = Overload::new("agent", Some(doic::DoicConfig::default()), 2).unwrap();
        let mut o = String::new();
        render(&ov, &mut o);
        for line in [
            "# TYPE doic_requests_treated_total counter",
            "doic_requests_treated_total{treatment=\"forwarded\"} 0",
            "# TYPE doic_reports_received_total counter",
            "# TYPE doic_ocs_active gauge",
            "# TYPE doic_replicas_dropped_total counter",
            "doic_replicas_dropped_total 0",
        ] {
            assert!(o.lines().any(|l| l == line), "{line} in\n{o}");
        }
    }
}
