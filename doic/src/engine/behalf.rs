//! The HOST reports the agent makes on behalf of protected servers (RFC 7683
//! §5.1.3, [`crate::protect`]) in a worker's core: each version as the
//! control path made it ([`crate::protect::OnBehalf`], one sequence space
//! for every worker), installed as a host OCS sharing the one bucket every
//! worker enforces, and put in the answers to authorised DOIC clients, the
//! server's and the agent's own throttle answers alike: OC-Maximum-Rate of
//! the client's share to a client that announced rate (RFC 8582), the
//! loss percentage to the others (RFC 7683 §7.7); an end version (validity
//! 0, §5.2.3) until it has been sent for a validity period.
//!
//! The client is not delegated the abatement: its requests still pass the
//! shared bucket, so one that keeps sending above its share is held by the
//! agent's own abatement.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use super::Doic;
use crate::audit::Verdict;
use crate::features::{self, Algorithm, OcSupportedFeatures};
use crate::protect::BehalfReport;
use crate::rate::RateControl;
use crate::report::{Abatement, OcOlr, Report};

/// A version as a worker's core holds it.
#[derive(Clone, Debug)]
pub(crate) struct BehalfEntry {
    report: Report,
    loss_percent: u32,
    /// Each client's share of the limit (RFC 8582 §6.1), requests/s.
    shares: Arc<BTreeMap<String, u32>>,
    until: Instant,
}

impl Doic {
    /// Puts a version of the HOST report the agent makes on behalf of the
    /// protected server `server` for `app_id`, with each client's share,
    /// sharing `rate` (the one bucket every worker enforces): the host OCS
    /// then throttles or diverts as a received report's would, and its
    /// audit records are marked as the agent's own. An identical version is
    /// a no-op, an older one ignored.
    pub fn put_behalf_report(
        &mut self,
        now: Instant,
        (app_id, server): (u32, &str),
        version: &BehalfReport,
        shares: &Arc<BTreeMap<String, u32>>,
        rate: Option<&RateControl>,
    ) {
        let v = self.ocs.apply_as(
            now,
            (app_id, server),
            &version.report,
            rate,
            true,
            &mut self.audit,
        );
        if matches!(
            v,
            Verdict::Created | Verdict::Updated | Verdict::Rollover | Verdict::Ended
        ) {
            self.realms.invalidate();
        }
        let entry = BehalfEntry {
            report: version.report.clone(),
            loss_percent: version.loss_percent,
            shares: shares.clone(),
            until: version.until,
        };
        let max = self.cfg.max_ocs;
        let list = self.behalf.entry(server.to_owned()).or_default();
        if let Some((_, e)) = list.iter_mut().find(|(a, _)| *a == app_id) {
            if e.report.sequence < entry.report.sequence {
                *e = entry;
            }
        } else if list.len() < max {
            list.push((app_id, entry));
        }
    }

    /// The OC-OLR the agent sends an authorised DOIC client `client` (its
    /// features `cf`) for the protected server `server` and `app_id` at
    /// `now`: its share as a rate to a rate client, else the loss
    /// percentage; `None` when no version is in force.
    #[must_use]
    pub fn behalf_olr(
        &self,
        now: Instant,
        (app_id, server): (u32, &str),
        client: &str,
        cf: &OcSupportedFeatures,
    ) -> Option<OcOlr> {
        let e = &self
            .behalf
            .get(server)?
            .iter()
            .find(|(a, e)| *a == app_id && now < e.until)?
            .1;
        let mut r = e.report.clone();
        r.abatement = if features::supports(cf, Algorithm::Rate) {
            let whole = match e.report.abatement {
                Abatement::Rate { per_second } => per_second,
                Abatement::Loss { .. } => 1,
            };
            Abatement::Rate {
                per_second: e.shares.get(client).copied().unwrap_or(whole).max(1),
            }
        } else {
            Abatement::Loss {
                percent: e.loss_percent,
            }
        };
        Some(r.to_olr())
    }

    /// Forgets the versions past their time.
    pub(super) fn sweep_behalf(&mut self, now: Instant) {
        if self.behalf.is_empty() {
            return;
        }
        self.behalf.retain(|_, list| {
            list.retain(|(_, e)| now < e.until);
            !list.is_empty()
        });
    }
}
