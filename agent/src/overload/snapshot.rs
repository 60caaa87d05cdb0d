//! What each worker's core sends the control thread at every control tick
//! ([`tick`], over a bounded feed, [`crate::feed`]; the control thread keeps
//! the last one of each worker, [`Overload::collect_snapshots`]):
//! its treatment totals, active OCS entries and received-report verdicts
//! for `/metrics` ([`crate::metrics`] renders them), and its evidence trail
//! for `GET /audit` ([`doic::audit::Audit::to_json`]).

use std::collections::BTreeMap;

use doic::audit::record::OcsCount;
use doic::audit::{Spread, Totals};
use doic::report::Abatement;

use super::Overload;
use super::cores::with_core;
use crate::feed::Feed;

/// Snapshots each worker may have in flight to the control thread (one per
/// 100 ms tick).
pub const SNAPSHOTS_PER_WORKER: usize = 4;

/// An active overload control state, as published by a worker.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OcsRow {
    /// Application-ID.
    pub app_id: u32,
    /// `host`, `realm` or `peer`.
    pub report_type: &'static str,
    /// The host, realm or peer it is for.
    pub target: String,
    /// What it asks for.
    pub abatement: Abatement,
    /// OC-Sequence-Number in force.
    pub sequence: u64,
    /// Treatment counts of the version in force.
    pub counts: doic::audit::Counters,
    /// How its throttled and diverted split, named.
    pub split: doic::audit::Spread,
}

/// What one worker's core looked like at the last tick.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    /// Treatment totals.
    pub totals: Totals,
    /// How their throttled and diverted split, named (the core's slots are
    /// its own).
    pub totals_split: doic::audit::Spread,
    /// Active OCS entries.
    pub ocs: Vec<OcsRow>,
    /// Received reports by verdict, over the retained trail.
    pub verdicts: BTreeMap<String, u64>,
    /// The evidence trail as JSON ([`doic::audit::Audit::to_json`]).
    pub audit: serde_json::Value,
}

/// One control tick on the current worker: expiry and ramps
/// ([`Doic::handle_timeout`]), replicas applied, snapshot sent to the
/// control thread (`full` also renders the audit trail).
pub(crate) fn tick(ov: &Overload, full: bool) {
    let now = ov.clock.now();
    let snap = with_core(ov, |core, worker| {
        super::own::apply(ov, core, now);
        super::protect::apply(ov, core, now);
        core.handle_timeout(now);
        if let Some(log) = ov.audit_log() {
            crate::audit::feed_worker(log, worker, core.audit_mut());
        }
        let audit = core.audit();
        let verdicts = audit
            .verdict_counts()
            .map(|(v, n)| (v.to_owned(), n))
            .collect();
        let ocs = core
            .ocs()
            .iter()
            .map(|o| OcsRow {
                app_id: o.key.app_id,
                report_type: match o.key.report_type {
                    doic::ReportType::Host => "host",
                    doic::ReportType::Realm => "realm",
                    doic::ReportType::Peer => "peer",
                    _ => "other",
                },
                target: o.key.id.clone(),
                abatement: o.abatement,
                sequence: o.sequence,
                counts: o.counts,
                split: o.counts.split.named(audit.peers()),
            })
            .collect();
        (
            worker,
            Snapshot {
                totals: audit.totals,
                totals_split: audit.totals.split.named(audit.peers()),
                ocs,
                verdicts,
                audit: if full {
                    audit.to_json(ov.origin)
                } else {
                    serde_json::Value::Null
                },
            },
        )
    });
    if let Some((worker, snap)) = snap {
        ov.snapshot_feed.send((worker, snap, full));
    }
}

impl Overload {
    /// Takes the snapshots the workers sent since the last call and makes
    /// them the ones `/metrics` and `GET /audit` show (the control thread's,
    /// every tick). A snapshot without its audit trail keeps the trail of
    /// the one before.
    pub(crate) fn collect_snapshots(&self) {
        for (worker, mut snap, full) in self.snapshot_feed.drain() {
            let Some(slot) = self.snapshots.get(worker) else {
                continue;
            };
            let mut slot = slot
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if !full {
                snap.audit = std::mem::take(&mut slot.audit);
            }
            *slot = snap;
        }
    }

    /// Calls `f` with each worker's last snapshot in turn, without copying
    /// it (the audit log's second, [`Overload::second_totals`]).
    pub(crate) fn each_snapshot(&self, mut f: impl FnMut(&Snapshot)) {
        for slot in &self.snapshots {
            f(&slot
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner));
        }
    }

    /// The agent-wide treatment totals so far and each version in force with
    /// its counts so far, summed over the workers' last snapshots (the audit
    /// log's second, [`crate::audit::feed_second`]).
    pub(crate) fn second_totals(&self) -> (Totals, Spread, Vec<OcsCount>) {
        let mut sum = Totals::default();
        let mut sum_split = Spread::default();
        let mut ocs: BTreeMap<(u32, &str, String, u64), (doic::audit::Counters, Spread)> =
            BTreeMap::new();
        self.each_snapshot(|s| {
            sum_split.add(&s.totals_split);
            sum.add_counts(&s.totals);
            for o in &s.ocs {
                let (c, split) = ocs
                    .entry((o.app_id, o.report_type, o.target.clone(), o.sequence))
                    .or_default();
                split.add(&o.split);
                c.add_counts(&o.counts);
            }
        });
        let ocs = ocs
            .into_iter()
            .map(
                |((app_id, rt, target, sequence), (counts, split))| OcsCount {
                    app_id,
                    report_type: rt.to_owned(),
                    target,
                    sequence,
                    counts,
                    split,
                },
            )
            .collect();
        (sum, sum_split, ocs)
    }

    /// The feed of the workers' snapshots (its drop count, for `/metrics`).
    #[must_use]
    pub fn snapshot_feed(&self) -> &Feed<(usize, Snapshot, bool)> {
        &self.snapshot_feed
    }
}
