//! The idle fast path: what [`Doic::treat`] and [`Doic::on_answer`] decide
//! while the core holds no overload state, given without their full inputs.
//! RFC 7683 §5.1.3 and RFC 8581 §6.1.1 (every relayed request carries the
//! agent's OC-Supported-Features, encoded once here), §5.1.2 and RFC 8581
//! §6.1.2 (what a DOIC client's answer gains), §10.4 (DOIC AVPs of peers not
//! trusted for DOIC ignored).
//!
//! One decision, used by both: [`Doic::treat`] takes its idle branch and the
//! client's state from here, the relay calls [`Doic::treat_idle`] (or
//! [`Doic::treat_idle_remembered`], the client's state kept by the caller,
//! [`ClientMemo`]) and [`Doic::answer_idle`] before it builds the full
//! views. Neither reads a time: with no overload state nothing depends on
//! it.

use std::sync::atomic::{AtomicU64, Ordering};

use bytes::{Bytes, BytesMut};
use diameter::codec::doic::FeaturesRef;

use super::Doic;
use crate::config::DoicConfig;
use crate::features::{self, Algorithm, OC_PEER_REPORT, OcSupportedFeatures};
use crate::treatment::{TxState, features_of, kept_vector};

/// What the treatment takes of a request's OC-Supported-Features: its
/// feature bits and whether its SourceID is the sending peer's identity
/// (RFC 8581 §6.1.2). Read from the decoded AVP ([`Offer::of`]) or in place
/// ([`Offer::read`]), with the same result.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Offer {
    /// The OC-Feature-Vector (absent: loss only, RFC 7683 §7.2).
    pub vector: u64,
    /// Whether SourceID names the peer the request came from.
    pub source_is_sender: bool,
}

impl Offer {
    /// The offer of a decoded OC-Supported-Features received from `from_peer`.
    #[must_use]
    pub fn of(f: &OcSupportedFeatures, from_peer: &str) -> Offer {
        Offer {
            vector: f.features(),
            source_is_sender: f.source_id.as_deref() == Some(from_peer),
        }
    }

    /// The offer of an OC-Supported-Features read in place
    /// ([`FeaturesRef::from_raw`]), received from `from_peer`.
    #[must_use]
    pub fn read(f: &FeaturesRef<'_>, from_peer: &str) -> Offer {
        Offer {
            vector: f.features(),
            source_is_sender: f.source_id == Some(from_peer.as_bytes()),
        }
    }
}

/// A name for a core's configuration that no other configuration of any
/// core in the process has had: given to each core as it is made and at
/// each [`Doic::reconfigure`], so that a [`ClientMemo`] made under one
/// configuration is never taken for another's.
pub(crate) fn config_id() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// What [`Doic::treat_idle_remembered`] made of one client's [`Offer`]: the
/// client's state (`Doic::client_state`: its features kept, its peer
/// report support, RFC 7683 §10.4, RFC 8581 §6.1.2) under the core's
/// configuration of that moment. A client announces the same
/// OC-Supported-Features in every request (RFC 7683 §5.1.1), so the caller
/// keeps the memo with the offer and the sender it read them from and gives
/// it back with the next request of that sender: the same offer under the
/// same configuration of the same core takes the state without looking up
/// the client's policy again; another offer, a reload or another core's
/// configuration makes it anew.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClientMemo {
    /// The configuration it was made under ([`config_id`]).
    config: u64,
    offer: Offer,
    kept: bool,
    peer_report: bool,
}

/// Which of the agent's OC-Supported-Features an idle answer to a DOIC client
/// gains (loss selected: the answer selects nothing, RFC 7683 §5.1.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AnswerFeatures {
    /// For a client without peer-report support: the loss bit only.
    Plain,
    /// For a peer-report client: OC_PEER_REPORT, SourceID and OC-Peer-Algo
    /// loss (RFC 8581 §6.1.2).
    PeerReportLoss,
    /// As [`AnswerFeatures::PeerReportLoss`] with OC-Peer-Algo rate.
    PeerReportRate,
}

/// What [`Doic::on_answer`] does with an answer that carries no
/// OC-Supported-Features and no OC-OLR while the core is idle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IdleAnswer {
    /// Relayed unchanged: the client sent no OC-Supported-Features and gets
    /// no DOIC AVP (RFC 7683 §5.1.2).
    Unchanged,
    /// The agent's OC-Supported-Features added, nothing else
    /// ([`IdleAvps::answer`]).
    Add(AnswerFeatures),
}

/// The AVPs the idle path adds, encoded once from the configuration: the
/// agent's OC-Supported-Features for every relayed request
/// ([`Doic::request_features`]) and the three an idle answer to a DOIC
/// client may gain ([`AnswerFeatures`]).
#[derive(Clone, Debug, Default)]
pub struct IdleAvps {
    request: Bytes,
    answers: [Bytes; 3],
}

impl IdleAvps {
    /// The encoded AVPs of the agent `identity` under `cfg`. An AVP that
    /// cannot be encoded (an identity past the 24-bit AVP length) is logged
    /// and left empty.
    #[must_use]
    pub fn new(identity: &str, cfg: &DoicConfig) -> IdleAvps {
        let encode = |f: &OcSupportedFeatures, what: &str| {
            let mut out = BytesMut::with_capacity(64);
            if let Err(e) = f.to_avp().encode(&mut out) {
                tracing::error!(cause = %e, avp = what, "cannot encode the agent's OC-Supported-Features");
            }
            out.freeze()
        };
        let vector = features::announced_vector(&cfg.algorithms, cfg.peer_report);
        let answer = |peer_report: bool, peer_algo: Algorithm| {
            let f = features::answer_features(
                Some(&OcSupportedFeatures::default()),
                peer_report,
                Algorithm::Loss,
                peer_algo,
                identity,
            )
            .unwrap_or_default();
            encode(&f, "answer")
        };
        IdleAvps {
            request: encode(&features::request_features(vector, identity), "request"),
            answers: [
                answer(false, Algorithm::Loss),
                answer(true, Algorithm::Loss),
                answer(true, Algorithm::Rate),
            ],
        }
    }

    /// The agent's OC-Supported-Features AVP of every relayed request.
    #[must_use]
    pub fn request(&self) -> &[u8] {
        &self.request
    }

    /// The agent's OC-Supported-Features AVP an idle answer gains.
    #[must_use]
    pub fn answer(&self, which: AnswerFeatures) -> &[u8] {
        let i = match which {
            AnswerFeatures::Plain => 0,
            AnswerFeatures::PeerReportLoss => 1,
            AnswerFeatures::PeerReportRate => 2,
        };
        &self.answers[i]
    }
}

impl Doic {
    /// Whether no overload state exists (no OCS, no own realm state): every
    /// request is then forwarded to the first candidate.
    #[must_use]
    pub fn is_idle(&self) -> bool {
        self.ocs.is_empty() && self.realms.is_empty() && self.behalf.is_empty()
    }

    /// The client's DOIC state for the transaction of a request from
    /// `from_peer` with `offer`: whether its features are kept (it is
    /// trusted for DOIC and receives reports, RFC 7683 §10.4; otherwise the
    /// agent is the reacting node on its behalf), and whether it supports
    /// peer reports (RFC 8581 §6.1.2).
    pub(super) fn client_state(&self, from_peer: &str, offer: Option<Offer>) -> (bool, bool) {
        let Some(o) = offer else {
            return (false, false);
        };
        let policy = self.cfg.peer(from_peer);
        let kept = policy.trusted && policy.receive_reports;
        let peer_report =
            kept && self.cfg.peer_report && o.vector & OC_PEER_REPORT != 0 && o.source_is_sender;
        (kept, peer_report)
    }

    /// [`Doic::treat`] of a request with at least one candidate while the
    /// core [`Doic::is_idle`]: counted as treated and forwarded to the first
    /// candidate, with the transaction state `treat` keeps. `offer` is the
    /// request's OC-Supported-Features, if any. `None` when the core is not
    /// idle: the full treatment is needed.
    pub fn treat_idle(
        &mut self,
        app_id: u32,
        from_peer: &str,
        offer: Option<Offer>,
    ) -> Option<TxState> {
        if !self.is_idle() {
            return None;
        }
        let state = self.client_state(from_peer, offer);
        Some(self.forward_idle(app_id, offer, state))
    }

    /// [`Doic::treat_idle`] of a request from `from_peer` with `offer`, the
    /// client's state taken from `memo` when it was made for this offer
    /// under this core's configuration, else made and left in `memo`. The
    /// caller gives back a memo only with requests of the peer it was made
    /// for. The same transaction state and counts as [`Doic::treat_idle`].
    pub fn treat_idle_remembered(
        &mut self,
        app_id: u32,
        from_peer: &str,
        offer: Offer,
        memo: &mut Option<ClientMemo>,
    ) -> Option<TxState> {
        if !self.is_idle() {
            return None;
        }
        let state = match *memo {
            Some(m) if m.config == self.config_id && m.offer == offer => (m.kept, m.peer_report),
            _ => {
                let (kept, peer_report) = self.client_state(from_peer, Some(offer));
                *memo = Some(ClientMemo {
                    config: self.config_id,
                    offer,
                    kept,
                    peer_report,
                });
                (kept, peer_report)
            }
        };
        Some(self.forward_idle(app_id, Some(offer), state))
    }

    /// The idle forward of a request with `offer` from a client in `state`
    /// ([`Doic::client_state`]): counted, with its transaction state.
    fn forward_idle(
        &mut self,
        app_id: u32,
        offer: Option<Offer>,
        (kept, client_peer_report): (bool, bool),
    ) -> TxState {
        self.audit.totals.requests += 1;
        self.audit.totals.forwarded += 1;
        TxState {
            app_id,
            client_features: offer.filter(|_| kept).map(|o| kept_vector(o.vector)),
            client_peer_report,
        }
    }

    /// [`Doic::on_answer`] of an answer to a request treated with `tx` that
    /// carries no OC-Supported-Features and no OC-OLR, while the core is
    /// idle (and, toward a DOIC client, holds no peer report of the agent's
    /// own): nothing to judge or advance. Toward a DOIC client the answer
    /// gains the agent's OC-Supported-Features, OC-Peer-Algo the configured
    /// algorithm if the client offered it, else loss (RFC 8581 §6.1.2).
    /// `None` when the full `on_answer` is needed.
    #[must_use]
    pub fn answer_idle(&self, tx: &TxState) -> Option<IdleAnswer> {
        if !self.is_idle() {
            return None;
        }
        let Some(vector) = tx.client_features else {
            return Some(IdleAnswer::Unchanged);
        };
        if self.own_peer_report.is_some() || !self.own_peer_reports.is_empty() {
            return None;
        }
        let wanted = self.cfg.peer_algo;
        let rate = wanted == Algorithm::Rate
            && features::supports(&features_of(vector.get()), Algorithm::Rate);
        Some(IdleAnswer::Add(match (tx.client_peer_report, rate) {
            (false, _) => AnswerFeatures::Plain,
            (true, false) => AnswerFeatures::PeerReportLoss,
            (true, true) => AnswerFeatures::PeerReportRate,
        }))
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use diameter::codec::avp::{Avp, AvpIter};

    use super::*;
    use crate::config::PeerPolicy;
    use crate::engine::AnswerView;
    use crate::features::{OLR_DEFAULT_ALGO, OLR_RATE_ALGORITHM};
    use crate::report::{OcOlr, ReportType};
    use crate::treatment::{Candidate, RequestView, Treatment};

    fn cfg(peer_algo: Algorithm, trusted: bool) -> DoicConfig {
        let mut cfg = DoicConfig {
            algorithms: vec![Algorithm::Loss, Algorithm::Rate],
            peer_report: true,
            peer_algo,
            ..DoicConfig::default()
        };
        cfg.peers.insert(
            "client".into(),
            PeerPolicy {
                trusted,
                receive_reports: true,
                ..PeerPolicy::default()
            },
        );
        cfg.peers.insert(
            "s1".into(),
            PeerPolicy {
                trusted: true,
                receive_reports: true,
                ..PeerPolicy::default()
            },
        );
        cfg
    }

    fn feature_sets() -> Vec<Option<OcSupportedFeatures>> {
        let f = |v: Option<u64>, s: Option<&str>| {
            Some(OcSupportedFeatures {
                feature_vector: v,
                source_id: s.map(str::to_owned),
                peer_algo: None,
            })
        };
        let all = OLR_DEFAULT_ALGO | OLR_RATE_ALGORITHM | OC_PEER_REPORT;
        vec![
            None,
            f(None, None),
            f(Some(all), Some("client")),
            f(Some(all), Some("elsewhere")),
            f(Some(all), None),
            f(Some(OLR_DEFAULT_ALGO | OC_PEER_REPORT), Some("client")),
            f(Some(OLR_RATE_ALGORITHM), Some("client")),
            f(Some(0), Some("client")),
        ]
    }

    fn request<'a>(features: Option<&'a OcSupportedFeatures>) -> RequestView<'a> {
        RequestView {
            app_id: 4,
            command_code: 272,
            from_peer: "client",
            dest_realm: "example",
            dest_host: None,
            features,
            drmp: None,
        }
    }

    const ROUTE: [Candidate<'static>; 2] = [
        Candidate {
            peer: "s1",
            server: Some("s1"),
        },
        Candidate {
            peer: "s2",
            server: Some("s2"),
        },
    ];

    fn plain_answer() -> AnswerView<'static> {
        AnswerView {
            app_id: 4,
            origin_host: "s1",
            origin_realm: "example",
            result_code: Some(2001),
            experimental_result_code: None,
            features: None,
            olrs: &[],
        }
    }

    /// The in-place reading of OC-Supported-Features is the decoded one.
    #[test]
    fn offer_read_in_place_is_the_decoded_offer() {
        for f in feature_sets().into_iter().flatten() {
            let b = f.to_avp().to_bytes().unwrap();
            let raw = AvpIter::new(&b).next().unwrap().unwrap();
            let r = FeaturesRef::from_raw(&raw).unwrap();
            assert_eq!(r.to_owned(), OcSupportedFeatures::from_raw(&raw).unwrap());
            for from in ["client", "elsewhere", ""] {
                assert_eq!(
                    Offer::read(&r, from),
                    Offer::of(&f, from),
                    "{f:?} from {from}"
                );
            }
        }
        // A SourceID that is no DiameterIdentity is refused alike.
        let bad = Avp::grouped(
            diameter::dictionary::code::OC_SUPPORTED_FEATURES,
            vec![Avp::str(diameter::dictionary::code::SOURCE_ID, "a b")],
        );
        let b = bad.to_bytes().unwrap();
        let raw = AvpIter::new(&b).next().unwrap().unwrap();
        assert!(FeaturesRef::from_raw(&raw).is_err());
        assert!(OcSupportedFeatures::from_raw(&raw).is_err());
    }

    /// While idle, `treat_idle` is `treat`: the same transaction state and
    /// the same counters, for every client offer and trust.
    #[test]
    fn idle_treatment_is_the_full_treatment() {
        let t0 = Instant::now();
        for (algo, trusted) in [
            (Algorithm::Rate, true),
            (Algorithm::Loss, true),
            (Algorithm::Rate, false),
        ] {
            let mut fast = Doic::new("agent", cfg(algo, trusted), 1, 1).unwrap();
            let mut full = Doic::new("agent", cfg(algo, trusted), 1, 1).unwrap();
            let mut remembered = Doic::new("agent", cfg(algo, trusted), 1, 1).unwrap();
            let mut memo = None;
            for f in feature_sets() {
                let offer = f.as_ref().map(|f| Offer::of(f, "client"));
                let tx = fast.treat_idle(4, "client", offer).unwrap();
                if let Some(o) = offer {
                    // Made, then taken from the memo: the same state.
                    for _ in 0..2 {
                        let r = remembered.treat_idle_remembered(4, "client", o, &mut memo);
                        assert_eq!(r, Some(tx), "{f:?}, trusted {trusted}");
                    }
                } else {
                    remembered.treat_idle(4, "client", None).unwrap();
                }
                let Treatment::Forward { index: 0, tx: ftx } =
                    full.treat(t0, &request(f.as_ref()), &ROUTE)
                else {
                    panic!("not forwarded");
                };
                assert_eq!(tx, ftx.to_state(), "{f:?}, trusted {trusted}");
                // And the answer: unchanged, or the features `on_answer` adds.
                let act = full.on_answer(t0, &ftx, "s1", &plain_answer());
                let avps = IdleAvps::new("agent", &cfg(algo, trusted));
                match fast.answer_idle(&tx).unwrap() {
                    IdleAnswer::Unchanged => {
                        assert!(act.add_features.is_none() && !act.strip, "{f:?}");
                    }
                    IdleAnswer::Add(which) => {
                        let raw = AvpIter::new(avps.answer(which)).next().unwrap().unwrap();
                        assert_eq!(
                            Some(OcSupportedFeatures::from_raw(&raw).unwrap()),
                            act.add_features,
                            "{f:?}"
                        );
                    }
                }
                assert!(act.forward_reports.is_empty());
            }
            assert_eq!(fast.audit().totals, full.audit().totals);
            let once = fast.audit().totals;
            let twice = remembered.audit().totals;
            assert_eq!(twice.requests, once.requests * 2 - 1, "one of each offer");
        }
    }

    /// A memo is taken only under the configuration it was made under: a
    /// reload that withdraws the client's reports or its trust (RFC 7683
    /// §10.4) applies to the next request, one that gives them back too,
    /// and a memo of another core is made anew.
    #[test]
    fn a_memo_is_made_anew_after_a_reload_and_on_another_core() {
        let t0 = Instant::now();
        let all = OLR_DEFAULT_ALGO | OLR_RATE_ALGORITHM | OC_PEER_REPORT;
        let offer = Offer {
            vector: all,
            source_is_sender: true,
        };
        let mut core = Doic::new("agent", cfg(Algorithm::Rate, true), 1, 1).unwrap();
        let mut memo = None;
        let tx = core.treat_idle_remembered(4, "client", offer, &mut memo);
        assert_eq!(tx.map(|t| t.client_peer_report), Some(true));
        let mut no_reports = cfg(Algorithm::Rate, true);
        no_reports.peers.get_mut("client").unwrap().receive_reports = false;
        core.reconfigure(t0, &no_reports).unwrap();
        let tx = core.treat_idle_remembered(4, "client", offer, &mut memo);
        assert_eq!(tx, core.treat_idle(4, "client", Some(offer)));
        assert_eq!(
            tx.map(|t| (t.client_features, t.client_peer_report)),
            Some((None, false))
        );
        core.reconfigure(t0, &cfg(Algorithm::Rate, true)).unwrap();
        let tx = core.treat_idle_remembered(4, "client", offer, &mut memo);
        assert_eq!(tx.map(|t| t.client_peer_report), Some(true), "given back");
        core.reconfigure(t0, &cfg(Algorithm::Rate, false)).unwrap();
        let tx = core.treat_idle_remembered(4, "client", offer, &mut memo);
        assert_eq!(tx.map(|t| t.client_features), Some(None), "not trusted");
        // Another core of the same configuration as the memo's first one.
        let mut other = Doic::new("agent", cfg(Algorithm::Rate, false), 1, 1).unwrap();
        let mut memo = None;
        core.reconfigure(t0, &cfg(Algorithm::Rate, true)).unwrap();
        core.treat_idle_remembered(4, "client", offer, &mut memo);
        let tx = other.treat_idle_remembered(4, "client", offer, &mut memo);
        assert_eq!(tx.map(|t| t.client_features), Some(None), "its own policy");
    }

    /// With overload state the idle path declines, and counts nothing.
    #[test]
    fn idle_path_declines_with_overload_state() {
        let t0 = Instant::now();
        let mut core = Doic::new("agent", cfg(Algorithm::Loss, true), 1, 1).unwrap();
        let Treatment::Forward { tx, .. } = core.treat(t0, &request(None), &ROUTE) else {
            panic!("not forwarded");
        };
        let mut olr = OcOlr::new(1, ReportType::Host);
        olr.reduction_percentage = Some(50);
        let olrs = [olr];
        let ans = AnswerView {
            olrs: &olrs,
            ..plain_answer()
        };
        core.on_answer(t0, &tx, "s1", &ans);
        let before = core.audit().totals;
        assert_eq!(core.treat_idle(4, "client", None), None);
        assert_eq!(core.answer_idle(&tx.to_state()), None);
        assert_eq!(core.audit().totals, before);
        // Once the report has ended and been swept, idle again.
        core.handle_timeout(t0 + Duration::from_secs(3600));
        assert!(core.treat_idle(4, "client", None).is_some());
    }

    /// The request AVP is the core's `request_features`.
    #[test]
    fn request_avp_is_the_cores_request_features() {
        let core = Doic::new("agent", cfg(Algorithm::Rate, true), 1, 1).unwrap();
        let avps = IdleAvps::new("agent", &cfg(Algorithm::Rate, true));
        let raw = AvpIter::new(avps.request()).next().unwrap().unwrap();
        assert_eq!(
            &OcSupportedFeatures::from_raw(&raw).unwrap(),
            core.request_features()
        );
    }
}
