//! [`Doic::on_answer`]: the handling of each answer to a pending request
//! (RFC 7683 §5.2.1.3 reports judged and applied, §5.1.2 and §10 what goes
//! downstream, RFC 8581 §6.1.2 and §6.2.3 peer reports, §6.2.4 the agent's
//! own), and [`Doic::local_answer`] for the answers the agent makes itself.

use std::time::Instant;

use super::idle::IdleAnswer;
use super::{AnswerView, Doic, capacity};
use crate::audit::{ReportRecord, Verdict};
use crate::features::{self, Algorithm, OcSupportedFeatures};
use crate::report::{OcOlr, Report, ReportType};
use crate::treatment::{
    AnswerActions, DIAMETER_OVERLOAD_RETRY_NOT_ALLOWED_TO_ANY, DIAMETER_TOO_BUSY, PendingTx,
    RampReplica, Replica, ReportReplica, RequestView, retry_allowed,
};

impl Doic {
    /// Handles an answer to the pending request `tx`, received from `from_peer`,
    /// and says what to change in it before relaying it to `tx.client`.
    pub fn on_answer(
        &mut self,
        now: Instant,
        tx: &PendingTx<'_>,
        from_peer: &str,
        ans: &AnswerView<'_>,
    ) -> AnswerActions {
        let mut out = AnswerActions {
            strip: ans.features.is_some() || !ans.olrs.is_empty(),
            add_features: None,
            forward_reports: Vec::new(),
            retry_on_alternate: retry_allowed(ans.experimental_result_code),
            replicate: Vec::new(),
        };
        if !out.strip
            && tx.client_features.is_none()
            && self.answer_idle(&tx.to_state()) == Some(IdleAnswer::Unchanged)
        {
            // Nothing to judge, no state to advance, a client that gets no
            // DOIC AVP (RFC 7683 §5.1.2): the answer goes back unchanged.
            return out;
        }
        let trusted = self.cfg.peer(from_peer).trusted;
        let host_algo = features::selected_algorithm(ans.features, self.vector);
        let peer_algo = features::selected_peer_algorithm(ans.features, self.vector);
        // Toward a DOIC client: the agent's features and its own peer report
        // (RFC 8581 §6.2.4), decided first so that a limit on the OC-OLRs of
        // one answer (`olrs_per_answer`) keeps room for it.
        let client_side = tx.client_features.as_deref().map(|cf| {
            let selected = match (&host_algo, trusted) {
                (Ok(a), true) if features::supports(cf, *a) => *a,
                _ => Algorithm::Loss,
            };
            // An upstream that selected nothing (no OC-Supported-Features:
            // a server without DOIC): the report made on its behalf decides
            // (rate to a rate client, RFC 8582 §6.3), unless the agent's own
            // realm report, loss (seed 002), goes in this answer.
            let realm_due = ans.origin_realm == tx.dest_realm
                && self
                    .realms
                    .report(now, ans.app_id, ans.origin_realm)
                    .is_some();
            let selected = match ans.features {
                None if !realm_due => self
                    .behalf_algorithm(now, (ans.app_id, ans.origin_host), cf)
                    .unwrap_or(selected),
                _ => selected,
            };
            let (add, own) =
                self.own_features(now, &tx.client, cf, tx.client_peer_report, selected);
            (selected, add, own)
        });
        let budget = self
            .cfg
            .olrs_per_answer
            .map_or(usize::MAX, usize::from)
            .saturating_sub(
                client_side
                    .as_ref()
                    .map_or(0, |c| usize::from(c.2.is_some())),
            );
        let mut fresh = [false; 3];
        let mut changed = false;
        for olr in ans.olrs {
            let (verdict, report) =
                self.judge(now, tx, from_peer, trusted, ans, olr, host_algo, peer_algo);
            if let Some(r) = report {
                let applied = matches!(
                    verdict,
                    Verdict::Created | Verdict::Updated | Verdict::Rollover | Verdict::Ended
                );
                if applied {
                    fresh[crate::report::slot(r.report_type)] = true;
                    changed |= r.report_type == ReportType::Host;
                }
                let id = match r.report_type {
                    ReportType::Host => ans.origin_host,
                    ReportType::Realm => ans.origin_realm,
                    _ => from_peer,
                };
                // Forward host and realm reports to a DOIC client that supports
                // their algorithm; peer reports never (RFC 8581 §6.2.5).
                let mut delivered_to = None;
                if r.report_type != ReportType::Peer
                    && let Some(cf) = &tx.client_features
                    && features::supports(cf, r.abatement.algorithm())
                    && accepted(&verdict)
                    && out.forward_reports.len() < budget
                {
                    if let Some(o) = self.ocs.get_mut(ans.app_id, r.report_type, id)
                        && o.sequence == r.sequence
                    {
                        o.mark_delivered(&tx.client);
                        delivered_to = Some(tx.client.clone().into_owned());
                    }
                    out.forward_reports.push(olr.clone());
                }
                if applied || delivered_to.is_some() {
                    let rate = self
                        .ocs
                        .peek(ans.app_id, r.report_type, id)
                        .and_then(|o| o.rate_control().cloned());
                    out.replicate.push(Replica::Report(ReportReplica {
                        at: now,
                        app_id: ans.app_id,
                        id: id.to_owned(),
                        report: r,
                        rate,
                        delivered_to,
                    }));
                }
            }
            self.audit.report(ReportRecord {
                at: now,
                from_peer: from_peer.to_owned(),
                app_id: ans.app_id,
                origin_host: ans.origin_host.to_owned(),
                origin_realm: ans.origin_realm.to_owned(),
                olr: olr.clone(),
                verdict,
                repeats: 0,
            });
        }
        if changed {
            self.realms.invalidate();
            let ocs = &self.ocs;
            let ramp = self.cfg.ramp;
            self.realms.refresh(
                now,
                ans.app_id,
                ans.origin_realm,
                |s| capacity(ocs, now, ramp, ans.app_id, s),
                &mut self.audit,
            );
            out.replicate
                .extend(self.realms.take_replicas().into_iter().map(Replica::Realm));
        }
        // Probes answered without a new report: the ramp may begin.
        let overload_error = ans.result_code == Some(DIAMETER_TOO_BUSY)
            || ans.experimental_result_code == Some(DIAMETER_OVERLOAD_RETRY_NOT_ALLOWED_TO_ANY);
        if trusted && !overload_error && from_peer == tx.upstream {
            let targets = [
                (ReportType::Host, ans.origin_host),
                (ReportType::Realm, ans.origin_realm),
                (ReportType::Peer, from_peer),
            ];
            for (rt, id) in targets {
                if !fresh[crate::report::slot(rt)]
                    && let Some(sequence) =
                        self.ocs
                            .note_answer(now, ans.app_id, rt, id, &mut self.audit)
                {
                    // Every worker ramps together.
                    out.replicate.push(Replica::Ramp(RampReplica {
                        at: now,
                        app_id: ans.app_id,
                        report_type: rt,
                        id: id.to_owned(),
                        sequence,
                    }));
                }
            }
        }
        let Some((selected, add, own)) = client_side else {
            // RFC 7683 §5.1.2: no DOIC AVP in an answer to a request without one.
            out.forward_reports.clear();
            return out;
        };
        out.add_features = Some(add);
        // The agent's own realm report (seed 002), when no realm report came
        // from upstream and the answer speaks for that realm with loss.
        let has_realm = out
            .forward_reports
            .iter()
            .any(|o| o.report_type == ReportType::Realm);
        if !has_realm
            && selected == Algorithm::Loss
            && ans.origin_realm == tx.dest_realm
            && out.forward_reports.len() < budget
            && let Some(r) = self.realms.report(now, ans.app_id, ans.origin_realm)
        {
            out.forward_reports.push(r.to_olr());
            self.realms
                .mark_delivered(ans.app_id, ans.origin_realm, &tx.client);
            out.replicate
                .extend(self.realms.take_replicas().into_iter().map(Replica::Realm));
        }
        // The report the agent makes on behalf of a protected server (RFC
        // 7683 §5.1.3), when none came from it.
        if out.forward_reports.len() < budget
            && !out
                .forward_reports
                .iter()
                .any(|o| o.report_type == ReportType::Host)
            && tx.client_features.is_some()
            && let Some(olr) =
                self.behalf_olr(now, (ans.app_id, ans.origin_host), &tx.client, selected)
        {
            out.forward_reports.push(olr);
        }
        // The agent's own peer report (RFC 8581 §6.2.4).
        out.forward_reports.extend(own);
        out
    }

    /// The agent's OC-Supported-Features toward a DOIC peer, and its own peer
    /// report if one is in force and the peer supports peer reports and its
    /// algorithm. OC-Peer-Algo names the algorithm of that report, else the
    /// configured one, always one the peer offered (RFC 8581 §6.1.2,
    /// RFC 8582 §5, RFC 7683 §5.1.2).
    fn own_features(
        &self,
        now: Instant,
        peer_id: &str,
        peer: &OcSupportedFeatures,
        peer_report: bool,
        selected: Algorithm,
    ) -> (OcSupportedFeatures, Option<OcOlr>) {
        // The peer's own report if it can take its algorithm, else the one
        // for all peers (the loss report for peers without rate).
        let live = |e: &&(Report, Instant)| now < e.1;
        let own = self
            .own_peer_reports
            .get(peer_id)
            .filter(live)
            .filter(|(r, _)| features::supports(peer, r.abatement.algorithm()))
            .or(self.own_peer_report.as_ref().filter(live))
            .map(|(r, _)| r);
        let wanted = own.map_or(self.cfg.peer_algo, |r| r.abatement.algorithm());
        let peer_algo = if features::supports(peer, wanted) {
            wanted
        } else {
            Algorithm::Loss
        };
        let add =
            features::answer_features(Some(peer), peer_report, selected, peer_algo, &self.identity)
                .unwrap_or_default();
        let report = own
            .filter(|r| peer_report && r.abatement.algorithm() == peer_algo)
            .map(Report::to_olr);
        (add, report)
    }

    /// The DOIC AVPs of an answer the agent makes itself to `req` (a throttle
    /// answer, 3002, ...): nothing for a request without OC-Supported-Features
    /// (RFC 7683 §5.1.2) or from a peer not trusted or not authorised for DOIC
    /// (§10.4); otherwise the agent's OC-Supported-Features and, toward a peer
    /// supporting peer reports, its own peer report, which goes in all answers
    /// to such peers (RFC 8581 §6.2.4).
    #[must_use]
    pub fn local_answer(&self, now: Instant, req: &RequestView<'_>) -> AnswerActions {
        let policy = self.cfg.peer(req.from_peer);
        let mut out = AnswerActions {
            retry_on_alternate: true,
            ..AnswerActions::default()
        };
        let Some(cf) = req
            .features
            .filter(|_| policy.trusted && policy.receive_reports)
        else {
            return out;
        };
        let pr =
            self.cfg.peer_report && features::peer_supports_peer_report(Some(cf), req.from_peer);
        let (add, own) = self.own_features(now, req.from_peer, cf, pr, Algorithm::Loss);
        out.add_features = Some(add);
        out.forward_reports.extend(own);
        out
    }

    /// Decides what one received OLR is worth, and applies it if accepted.
    #[expect(
        clippy::too_many_arguments,
        reason = "one call site; the inputs are distinct"
    )]
    fn judge(
        &mut self,
        now: Instant,
        tx: &PendingTx<'_>,
        from_peer: &str,
        trusted: bool,
        ans: &AnswerView<'_>,
        olr: &OcOlr,
        host_algo: Result<Algorithm, features::SelectionError>,
        peer_algo: Result<Algorithm, features::SelectionError>,
    ) -> (Verdict, Option<Report>) {
        if !trusted {
            // RFC 7683 §10.2: MUST NOT honor or forward OLRs from untrusted peers.
            return (Verdict::Untrusted, None);
        }
        if from_peer != tx.upstream || ans.app_id != tx.app_id {
            // RFC 7683 §10.1: only a proper answer to a pending request counts.
            return (Verdict::OutOfScope, None);
        }
        let (algo, id) = match olr.report_type {
            ReportType::Other(v) => {
                return (Verdict::Invalid(format!("unknown report type {v}")), None);
            }
            ReportType::Host => (host_algo, ans.origin_host),
            ReportType::Realm => {
                if ans.origin_realm != tx.dest_realm {
                    // RFC 7683 §10.1: a realm the request was not sent to.
                    return (Verdict::OutOfScope, None);
                }
                (host_algo, ans.origin_realm)
            }
            ReportType::Peer => {
                if !self.cfg.peer_report {
                    return (Verdict::Invalid("peer reports not supported".into()), None);
                }
                if olr.source_id.as_deref() != Some(from_peer) {
                    // RFC 8581 §6.2.3: MUST ignore.
                    return (Verdict::NotFromPeer, None);
                }
                (peer_algo, from_peer)
            }
        };
        let algo = match algo {
            Ok(a) => a,
            Err(e) => return (Verdict::Invalid(e.to_string()), None),
        };
        let report = match crate::report::normalise(olr, algo) {
            Ok(r) => r,
            Err(e) => return (Verdict::Invalid(e.to_string()), None),
        };
        let verdict = self
            .ocs
            .apply(now, ans.app_id, id, &report, &mut self.audit);
        (verdict, Some(report))
    }
}

/// Whether a report with this verdict may be passed on to a DOIC client.
fn accepted(v: &Verdict) -> bool {
    matches!(
        v,
        Verdict::Created
            | Verdict::Updated
            | Verdict::Rollover
            | Verdict::Ended
            | Verdict::Stale
            | Verdict::NoState
    )
}
