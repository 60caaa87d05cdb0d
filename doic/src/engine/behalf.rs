//! The HOST reports the agent makes on behalf of protected servers (RFC 7683
//! §5.1.3, [`crate::protect`]) in a worker's core: each version as the
//! control path made it ([`crate::protect::OnBehalf`], one sequence space
//! for every worker), installed as a host OCS sharing the one bucket every
//! worker enforces, and put in the server's answers to authorised DOIC
//! clients (never in the agent's own throttle answers: their Origin-Host is
//! the agent, and a reacting node keys a HOST report by it, RFC 7683
//! §5.2.1.3): OC-Maximum-Rate of the client's share to a client that
//! announced rate (RFC 8582), the answer's OC-Supported-Features selecting
//! rate (§6.3), the loss percentage to the others (RFC 7683 §7.7); an end
//! version (validity 0, §5.2.3) until it has been sent for a validity
//! period.
//!
//! The client is not delegated the abatement: each DOIC client sent the
//! report is held to its own share by its own bucket, the other clients to
//! the rest of the limit ([`crate::protect::Gates`]), so one that keeps
//! sending above its share is held by the agent's own abatement and one
//! within it loses nothing to the others' excess.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use super::Doic;
use crate::audit::Verdict;
use crate::features::{self, Algorithm, OcSupportedFeatures};
use crate::protect::{BehalfReport, Gates};
use crate::rate::RateControl;
use crate::report::{Abatement, OcOlr, ReportType};

/// A version as a worker's core holds it.
#[derive(Clone, Debug)]
pub(crate) struct BehalfEntry {
    version: BehalfReport,
    /// Each client's share of the limit (RFC 8582 §6.1), requests/s.
    shares: Arc<BTreeMap<String, u32>>,
    /// The buckets holding each DOIC client to its share (active versions).
    gates: Option<Arc<Gates>>,
}

impl Doic {
    /// Puts a version of the HOST report the agent makes on behalf of the
    /// protected server `server` for `app_id`, with each client's share,
    /// sharing `rate` (the one bucket at the limit every worker shares) and
    /// `gates` (each DOIC client's bucket at its share, one for the rest,
    /// shared likewise): the host OCS then throttles or diverts as a
    /// received report's would, a DOIC client by its own share, and its
    /// audit records are marked as the agent's own. An identical version is
    /// a no-op, an older one ignored.
    pub fn put_behalf_report(
        &mut self,
        now: Instant,
        (app_id, server): (u32, &str),
        version: &BehalfReport,
        shares: &Arc<BTreeMap<String, u32>>,
        (rate, gates): (Option<&RateControl>, Option<&Arc<Gates>>),
    ) {
        let v = self.ocs.apply_as(
            now,
            (app_id, server),
            &version.report,
            rate,
            true,
            &mut self.audit,
        );
        if let Some(o) = self.ocs.get_mut(app_id, ReportType::Host, server)
            && o.own
            && o.sequence == version.report.sequence
        {
            o.set_gates(gates.cloned());
        }
        if matches!(
            v,
            Verdict::Created | Verdict::Updated | Verdict::Rollover | Verdict::Ended
        ) {
            self.realms.invalidate();
        }
        let entry = BehalfEntry {
            version: version.clone(),
            shares: shares.clone(),
            gates: gates.cloned(),
        };
        let max = self.cfg.max_ocs;
        let list = self.behalf.entry(server.to_owned()).or_default();
        if let Some((_, e)) = list.iter_mut().find(|(a, _)| *a == app_id) {
            if e.version.report.sequence < entry.version.report.sequence {
                *e = entry;
            }
        } else if list.len() < max {
            list.push((app_id, entry));
        }
    }

    /// The algorithm of the report made on behalf of the protected server
    /// `server` for `app_id` that a client with features `cf` takes at
    /// `now`: rate when it announced rate (RFC 8582 §5), else loss; `None`
    /// when no version is in force. The answer that carries the report
    /// selects the same algorithm in its OC-Supported-Features (RFC 7683
    /// §5.1.2, RFC 8582 §6.3): a reacting node refuses a rate report in an
    /// answer that selects loss.
    #[must_use]
    pub fn behalf_algorithm(
        &self,
        now: Instant,
        (app_id, server): (u32, &str),
        cf: &OcSupportedFeatures,
    ) -> Option<Algorithm> {
        self.behalf_entry(now, app_id, server)?;
        Some(if features::supports(cf, Algorithm::Rate) {
            Algorithm::Rate
        } else {
            Algorithm::Loss
        })
    }

    fn behalf_entry(&self, now: Instant, app_id: u32, server: &str) -> Option<&BehalfEntry> {
        self.behalf
            .get(server)?
            .iter()
            .find(|(a, e)| *a == app_id && now < e.version.until)
            .map(|(_, e)| e)
    }

    /// The OC-OLR the agent sends an authorised DOIC client `client` for the
    /// protected server `server` and `app_id` at `now`, in an answer that
    /// selects `algorithm` ([`Doic::behalf_algorithm`]): its share as a
    /// rate, or the loss percentage; `None` when no version is in force.
    /// A client without a share in this version is told the rest of the
    /// limit (it passes the rest bucket). The host OCS of the version
    /// remembers that `client` was sent it (`sent_to` of its audit
    /// records), and from then on the agent holds `client` to its own
    /// share ([`Gates::mark_doic`]).
    pub fn behalf_olr(
        &mut self,
        now: Instant,
        (app_id, server): (u32, &str),
        client: &str,
        algorithm: Algorithm,
    ) -> Option<OcOlr> {
        let e = self.behalf_entry(now, app_id, server)?;
        if let Some(g) = &e.gates
            && g.mark_doic(now, client, algorithm == Algorithm::Loss)
        {
            tracing::debug!(
                client,
                server,
                share = g.share_of(client),
                "a DOIC client held to its share of a protected server's limit"
            );
        }
        let mut r = e.version.report.clone();
        r.abatement = match algorithm {
            Algorithm::Rate => {
                let whole = match e.version.report.abatement {
                    Abatement::Rate { per_second } => per_second,
                    Abatement::Loss { .. } => 1,
                };
                // A client without a share in this version passes the rest
                // bucket: that rate is what it may send.
                let share = e.shares.get(client).copied();
                let rest = e.gates.as_ref().map(|g| g.rest_rate());
                Abatement::Rate {
                    per_second: share.or(rest).unwrap_or(whole).max(1),
                }
            }
            // Its own cut of the demand it was split from, where it has
            // a share (`crate::protect::behalf`).
            Algorithm::Loss => Abatement::Loss {
                percent: e.version.loss_for(client),
            },
        };
        if let Some(o) = self.ocs.get_mut(app_id, ReportType::Host, server)
            && o.sequence == r.sequence
        {
            o.mark_sent(client);
        }
        Some(r.to_olr())
    }

    /// Forgets the versions past their time.
    pub(super) fn sweep_behalf(&mut self, now: Instant) {
        if self.behalf.is_empty() {
            return;
        }
        self.behalf.retain(|_, list| {
            list.retain(|(_, e)| now < e.version.until);
            !list.is_empty()
        });
    }
}

#[cfg(test)]
mod tests {
    use std::borrow::Cow;
    use std::time::Duration;

    use super::*;
    use crate::audit::OcsEvent;
    use crate::engine::AnswerView;
    use crate::protect::OnBehalf;
    use crate::report::{OcOlr, ReportType};
    use crate::treatment::{AnswerActions, Candidate, PendingTx, RequestView, Treatment};
    use crate::{DoicConfig, PeerPolicy};
    use diameter::dictionary::doic::{OLR_DEFAULT_ALGO, OLR_RATE_ALGORITHM};

    const APP: u32 = 16_777_238;

    fn features(vector: u64) -> OcSupportedFeatures {
        OcSupportedFeatures {
            feature_vector: Some(vector),
            source_id: None,
            peer_algo: None,
        }
    }

    fn request<'a>(from: &'a str, f: Option<&'a OcSupportedFeatures>) -> RequestView<'a> {
        RequestView {
            app_id: APP,
            command_code: 272,
            from_peer: from,
            dest_realm: "realm",
            dest_host: Some("s1"),
            features: f,
            drmp: None,
        }
    }

    /// A core with `clients` (and `s1`) trusted, a first version of the
    /// report on s1's behalf (10/s, 75 %) put in it with its shared bucket.
    struct Fixture {
        core: Doic,
        behalf: OnBehalf,
        version: BehalfReport,
        rate: RateControl,
        cfg: DoicConfig,
    }

    fn fixture(t0: Instant, trusted_peers: &[&str]) -> Fixture {
        let mut cfg = DoicConfig::default();
        let trusted = PeerPolicy {
            trusted: true,
            ..PeerPolicy::default()
        };
        for p in trusted_peers {
            cfg.peers.insert((*p).into(), trusted);
        }
        let core = Doic::new("agent", cfg.clone(), 1, 1).unwrap();
        let mut behalf = OnBehalf::new(t0, 1_700_000_000_000, Duration::from_secs(10));
        assert!(behalf.handle_limit(t0, Some(10), 75));
        let version = behalf.current().unwrap().clone();
        let bucket = cfg.rate.bucket_config().unwrap();
        let rate = RateControl::new(t0, t0, 10, &bucket);
        Fixture {
            core,
            behalf,
            version,
            rate,
            cfg,
        }
    }

    #[test]
    fn a_version_throttles_through_the_shared_bucket_and_goes_to_doic_clients_until_it_ends() {
        let t0 = Instant::now();
        let ms = |n: u64| t0 + Duration::from_millis(n);
        let Fixture {
            mut core,
            mut behalf,
            version,
            rate,
            cfg,
        } = fixture(t0, &["c", "l"]);
        let mut other = Doic::new("agent", cfg, 2, 1).unwrap();
        let shares = Arc::new(BTreeMap::from([("c".to_owned(), 4), ("n".to_owned(), 6)]));
        for c in [&mut core, &mut other] {
            c.put_behalf_report(t0, (APP, "s1"), &version, &shares, (Some(&rate), None));
        }
        // The audit trail says the report is the agent's own.
        let v = core.audit().versions().last().unwrap();
        assert!(v.own && v.event == OcsEvent::Created && v.key.report_type == ReportType::Host);
        // Two workers, one bucket: 10/s over both (RFC 8582 §8.3), the
        // excess of a non-DOIC client answered by the agent.
        let cand = [Candidate {
            peer: "s1",
            server: Some("s1"),
        }];
        let mut passed = 0;
        for i in 0..200 {
            let c = if i % 2 == 0 { &mut core } else { &mut other };
            if matches!(
                c.treat(ms(i * 5), &request("n", None), &cand),
                Treatment::Forward { .. }
            ) {
                passed += 1;
            }
        }
        // 1 s at 10/s, plus the bucket's tolerance (TAU1 = 5 T).
        assert!((8..=17).contains(&passed), "{passed} passed");
        // A rate client gets its share, a loss client the percentage.
        let rf = features(OLR_DEFAULT_ALGO | OLR_RATE_ALGORITHM);
        let lf = features(OLR_DEFAULT_ALGO);
        let r = core
            .behalf_olr(ms(1000), (APP, "s1"), "c", Algorithm::Rate)
            .unwrap();
        assert_eq!((r.maximum_rate, r.reduction_percentage), (Some(4), None));
        assert_eq!(r.sequence_number, version.report.sequence);
        assert_eq!(r.validity_duration, Some(10));
        let l = core
            .behalf_olr(ms(1000), (APP, "s1"), "l", Algorithm::Loss)
            .unwrap();
        assert_eq!((l.maximum_rate, l.reduction_percentage), (None, Some(75)));
        // ... and it goes in the server's answers to a DOIC client.
        let tx = PendingTx {
            app_id: APP,
            client: Cow::Borrowed("c"),
            client_features: Some(Cow::Borrowed(&rf)),
            client_peer_report: false,
            dest_realm: Cow::Borrowed("realm"),
            upstream: Cow::Borrowed("s1"),
        };
        let ans = AnswerView {
            app_id: APP,
            origin_host: "s1",
            origin_realm: "realm",
            result_code: Some(2001),
            experimental_result_code: None,
            features: None,
            olrs: &[],
        };
        let act = core.on_answer(ms(1000), &tx, "s1", &ans);
        assert_eq!(act.forward_reports, vec![r.clone()]);
        // The answer selects the report's algorithm (RFC 8582 §6.3): a
        // reacting node refuses a rate report in an answer selecting loss.
        let selected = |a: &AnswerActions| {
            a.add_features
                .as_ref()
                .and_then(|f| f.feature_vector)
                .map(|v| v & features::ALGORITHM_BITS)
        };
        assert_eq!(selected(&act), Some(OLR_RATE_ALGORITHM));
        let loss_tx = PendingTx {
            client: Cow::Borrowed("l"),
            client_features: Some(Cow::Borrowed(&lf)),
            ..tx.clone()
        };
        let act = core.on_answer(ms(1000), &loss_tx, "s1", &ans);
        assert_eq!(act.forward_reports, vec![l.clone()]);
        assert_eq!(selected(&act), Some(OLR_DEFAULT_ALGO));
        // The agent's own answers (Origin-Host the agent) carry none (RFC
        // 7683 §5.2.1.3: it would be held for the agent).
        for (who, f) in [("c", &rf), ("l", &lf)] {
            let act = core.local_answer(ms(1000), &request(who, Some(f)));
            assert!(act.forward_reports.is_empty(), "{:?}", act.forward_reports);
        }
        // Ended (RFC 7683 §5.2.3): validity 0, a greater sequence number,
        // sent for a validity period, then gone and the core idle again.
        assert!(behalf.handle_limit(ms(2000), None, 0));
        let end = behalf.current().unwrap().clone();
        core.put_behalf_report(ms(2000), (APP, "s1"), &end, &shares, (None, None));
        let e = core
            .behalf_olr(ms(2001), (APP, "s1"), "c", Algorithm::Rate)
            .unwrap();
        assert_eq!(e.validity_duration, Some(0));
        assert!(e.sequence_number > r.sequence_number);
        assert!(matches!(
            core.treat(ms(13_000), &request("n", None), &cand),
            Treatment::Forward { .. }
        ));
        core.handle_timeout(ms(13_000));
        assert!(
            core.behalf_olr(ms(13_000), (APP, "s1"), "c", Algorithm::Rate)
                .is_none()
        );
        assert!(core.is_idle());
    }

    /// Per-client enforcement of the shares on two workers' cores sharing
    /// one set of gates (`protect::Gates`): a DOIC client sent the report
    /// that keeps sending above its share is held to it, a light DOIC
    /// client within its share has every request forwarded, the client
    /// without DOIC gets the rest of the limit, and the server's total is
    /// the limit.
    #[test]
    fn each_doic_client_sent_the_report_is_held_to_its_share_on_every_worker() {
        let t0 = Instant::now();
        let ms = |n: u64| t0 + Duration::from_millis(n);
        let Fixture { mut core, cfg, .. } = fixture(t0, &["h", "l"]);
        let mut other = Doic::new("agent", cfg.clone(), 2, 1).unwrap();
        let mut behalf = OnBehalf::new(t0, 1_700_000_000_000, Duration::from_secs(10));
        assert!(behalf.handle_limit(t0, Some(100), 60));
        let version = behalf.current().unwrap().clone();
        let bucket = cfg.rate.bucket_config().unwrap();
        let rate = RateControl::new(t0, t0, 100, &bucket);
        let shares = Arc::new(BTreeMap::from([
            ("h".to_owned(), 50),
            ("l".to_owned(), 20),
            ("n".to_owned(), 30),
        ]));
        let gates = Arc::new(Gates::revise(None, (t0, t0), 100, &shares, &bucket));
        for c in [&mut core, &mut other] {
            c.put_behalf_report(
                t0,
                (APP, "s1"),
                &version,
                &shares,
                (Some(&rate), Some(&gates)),
            );
        }
        let rf = features(OLR_DEFAULT_ALGO | OLR_RATE_ALGORITHM);
        let cand = [Candidate {
            peer: "s1",
            server: Some("s1"),
        }];
        // Sent the report (in an answer of either worker): h and l are
        // DOIC clients now, held to their shares.
        for (c, who) in [(&mut core, "h"), (&mut other, "l")] {
            let r = c.behalf_olr(t0, (APP, "s1"), who, Algorithm::Rate).unwrap();
            assert_eq!(r.sequence_number, version.report.sequence);
        }
        assert_eq!(gates.rest_rate(), 30);
        // 10 s on a 1 ms clock, the requests alternating between the two
        // cores: h at 300/s, l at 15/s (within its 20), n at 200/s.
        let senders: [(&str, Option<&OcSupportedFeatures>, u64); 3] = [
            ("h", Some(&rf), 300),
            ("l", Some(&rf), 15),
            ("n", None, 200),
        ];
        let (mut passed, mut sent) = ([0u64; 3], [0u64; 3]);
        let mut k = 0u64;
        for t in 0..10_000 {
            for (i, (who, f, per_s)) in senders.iter().enumerate() {
                while sent[i] < (t + 1) * per_s / 1000 {
                    sent[i] += 1;
                    k += 1;
                    let c = if k.is_multiple_of(2) {
                        &mut core
                    } else {
                        &mut other
                    };
                    match c.treat(ms(t), &request(who, *f), &cand) {
                        Treatment::Forward { .. } => passed[i] += 1,
                        Treatment::Throttle { result, .. } => {
                            assert!([3004, 5012, 5198].contains(&result.code()));
                        }
                        other => panic!("{other:?}"),
                    }
                }
            }
        }
        let per_s = |n: u64| n as f64 / 10.0;
        assert!((49.0..=51.0).contains(&per_s(passed[0])), "h {passed:?}");
        assert_eq!(passed[1], sent[1], "l within its share: every request");
        assert!((29.0..=31.0).contains(&per_s(passed[2])), "n {passed:?}");
        assert!(per_s(passed.iter().sum()) <= 101.0, "{passed:?}");
    }

    /// Seed 002 with two protected servers: the realm short by two thirds,
    /// the agent makes its REALM report, yet a client without DOIC is
    /// answered by the servers' gates and diversion alone: every request
    /// the two limits admit is forwarded (where the realm's loss on top of
    /// them abated twice and left the servers idle), and no more.
    #[test]
    fn a_realm_of_protected_servers_is_held_by_their_gates_not_by_the_realm_report_too() {
        let t0 = Instant::now();
        let ms = |n: u64| t0 + Duration::from_millis(n);
        let Fixture { mut core, cfg, .. } = fixture(t0, &["n"]);
        let bucket = cfg.rate.bucket_config().unwrap();
        let shares = Arc::new(BTreeMap::new());
        for server in ["s1", "s2"] {
            let mut behalf = OnBehalf::new(t0, 1_700_000_000_000, Duration::from_secs(10));
            assert!(behalf.handle_limit(t0, Some(20), 67));
            let version = behalf.current().unwrap().clone();
            let rate = RateControl::new(t0, t0, 20, &bucket);
            let gates = Arc::new(Gates::revise(None, (t0, t0), 20, &shares, &bucket));
            core.put_behalf_report(
                t0,
                (APP, server),
                &version,
                &shares,
                (Some(&rate), Some(&gates)),
            );
        }
        let cand = [
            Candidate {
                peer: "s1",
                server: Some("s1"),
            },
            Candidate {
                peer: "s2",
                server: Some("s2"),
            },
        ];
        let realm_routed = RequestView {
            dest_host: None,
            ..request("n", None)
        };
        // 120/s for 6 s against 2 x 20/s on a 1 ms clock; counted from 2 s.
        let (mut passed, mut sent) = (0u64, 0u64);
        for t in 0..6_000u64 {
            while sent < (t + 1) * 120 / 1000 {
                sent += 1;
                let forwarded = matches!(
                    core.treat(ms(t), &realm_routed, &cand),
                    Treatment::Forward { .. } | Treatment::Divert { .. }
                );
                if t >= 2_000 && forwarded {
                    passed += 1;
                }
            }
        }
        let report = core.realms.report(ms(6_000), APP, "realm");
        assert!(
            report.as_ref().is_some_and(
                |r| matches!(r.abatement, Abatement::Loss { percent } if percent >= 50)
            ),
            "the realm is short and reported: {report:?}"
        );
        let per_s = passed as f64 / 4.0;
        assert!(
            (38.0..=41.0).contains(&per_s),
            "{per_s}/s of 40/s forwarded"
        );
    }

    /// RFC 7683 §5.2.1.1 (one OCS per host, its sequence numbers the
    /// reporting node's) and §5.1.3 (the agent reports only for servers
    /// that do not support DOIC): a protected server whose answers turn out
    /// to carry OC-Supported-Features and its own HOST report governs at
    /// once: its report, with its small sequence number, replaces the
    /// agent's (no stale verdict against the agent's sequence space), is
    /// relayed to the DOIC client instead of the agent's, and the agent's end
    /// version (validity 0, the agent's sequence) ends only the agent's
    /// report toward clients, never the server's OCS.
    #[test]
    fn a_server_that_reports_itself_replaces_the_report_made_on_its_behalf() {
        let t0 = Instant::now();
        let ms = |n: u64| t0 + Duration::from_millis(n);
        let Fixture {
            mut core,
            mut behalf,
            version,
            rate,
            ..
        } = fixture(t0, &["c", "s1"]);
        let shares = Arc::new(BTreeMap::from([("c".to_owned(), 10)]));
        core.put_behalf_report(t0, (APP, "s1"), &version, &shares, (Some(&rate), None));
        let rf = features(OLR_DEFAULT_ALGO | OLR_RATE_ALGORITHM);
        let tx = PendingTx {
            app_id: APP,
            client: Cow::Borrowed("c"),
            client_features: Some(Cow::Borrowed(&rf)),
            client_peer_report: false,
            dest_realm: Cow::Borrowed("realm"),
            upstream: Cow::Borrowed("s1"),
        };
        // The server's own report: sequence 7, loss 30 %.
        let sf = features(OLR_DEFAULT_ALGO);
        let mut own = OcOlr::new(7, ReportType::Host);
        own.reduction_percentage = Some(30);
        own.validity_duration = Some(10);
        let olrs = [own.clone()];
        let ans = AnswerView {
            app_id: APP,
            origin_host: "s1",
            origin_realm: "realm",
            result_code: Some(2001),
            experimental_result_code: None,
            features: Some(&sf),
            olrs: &olrs,
        };
        let act = core.on_answer(ms(100), &tx, "s1", &ans);
        let host: Vec<_> = act
            .forward_reports
            .iter()
            .filter(|o| o.report_type == ReportType::Host)
            .collect();
        assert_eq!(host, vec![&own], "the server's report, not the agent's");
        let o = core.ocs.peek(APP, ReportType::Host, "s1").unwrap();
        assert_eq!((o.sequence, o.own), (7, false));
        // The agent stops reporting on the server's behalf: its end under
        // its own sequence does not end the server's report.
        assert!(behalf.handle_limit(ms(200), None, 0));
        let end = behalf.current().unwrap().clone();
        core.put_behalf_report(ms(200), (APP, "s1"), &end, &shares, (None, None));
        let o = core.ocs.peek(APP, ReportType::Host, "s1").unwrap();
        assert_eq!(
            (o.sequence, o.own, o.validity),
            (7, false, Duration::from_secs(10))
        );
        // Nor does a late active version of the agent's.
        core.put_behalf_report(ms(200), (APP, "s1"), &version, &shares, (Some(&rate), None));
        assert_eq!(
            core.ocs.peek(APP, ReportType::Host, "s1").unwrap().sequence,
            7
        );
        // An answer without the server's report carries the agent's end.
        let bare = AnswerView { olrs: &[], ..ans };
        let act = core.on_answer(ms(300), &tx, "s1", &bare);
        let e = act
            .forward_reports
            .iter()
            .find(|o| o.report_type == ReportType::Host)
            .expect("the agent's end");
        assert_eq!(e.validity_duration, Some(0));
        assert_eq!(e.sequence_number, end.report.sequence);
        // The server's 30 % governs a client without DOIC, not the agent's
        // 10/s.
        let cand = [Candidate {
            peer: "s1",
            server: Some("s1"),
        }];
        let passed = (0..200)
            .filter(|i| {
                matches!(
                    core.treat(ms(400 + i * 5), &request("n", None), &cand),
                    Treatment::Forward { .. }
                )
            })
            .count();
        assert!((110..=170).contains(&passed), "{passed} of 200 passed");
    }
}
