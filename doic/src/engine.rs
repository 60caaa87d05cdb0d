//! The agent's DOIC core: the treatment of each request in the order of
//! RFC 8581 §5 (host/realm OCS first, then the next hop's peer OCS), diversion
//! before throttling (RFC 7683 §5.2.2, RFC 8581 §6.2.5), and the handling of
//! each answer (RFC 7683 §5.2.1.3, §5.1.3, §10; RFC 8581 §6.1.2, §6.2.3).
//!
//! Sans-io: time is an argument, nothing here reads a clock or does I/O.
//!
//! | module | what it implements |
//! | --- | --- |
//! | this one | the [`Doic`] core: state, own peer reports, replicas (reports and realm versions), timeouts |
//! | [`request`] | [`Doic::treat`]: the RFC 8581 §5 order, diversion, throttling |
//! | [`answer`] | [`Doic::on_answer`], [`Doic::local_answer`]: reports judged, answers rewritten |
//! | [`behalf`] | the reports made on behalf of protected servers, RFC 7683 §5.1.3 |
//! | [`idle`] | the idle fast path, one decision for `treat`, `on_answer` and the relay |
//! | [`reconfigure`] | [`Doic::reconfigure`]: a new `[doic]` at one instant, the state kept |

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::config::{DoicConfig, DoicConfigError};
use super::features::{self, OcSupportedFeatures};
use super::loss::Prng;
use super::ocs::{Ending, Ocs, OcsTable, Phase};
use super::realm::{Capacity, RealmBoard, RealmSynth};
use super::report::{Abatement, OcOlr, Report, ReportType};
use super::treatment::Replica;
use crate::audit::{Audit, Verdict};

pub mod answer;
pub mod behalf;
pub mod idle;
pub mod reconfigure;
pub mod request;

pub use idle::{AnswerFeatures, ClientMemo, IdleAnswer, IdleAvps, Offer};

/// An answer as the overload core needs to see it (decoded by the relay).
#[derive(Clone, Copy, Debug)]
pub struct AnswerView<'a> {
    /// Application-ID of the header.
    pub app_id: u32,
    /// Origin-Host.
    pub origin_host: &'a str,
    /// Origin-Realm.
    pub origin_realm: &'a str,
    /// Result-Code, if present.
    pub result_code: Option<u32>,
    /// Experimental-Result-Code, if present.
    pub experimental_result_code: Option<u32>,
    /// OC-Supported-Features, if present.
    pub features: Option<&'a OcSupportedFeatures>,
    /// Every OC-OLR AVP, in order.
    pub olrs: &'a [OcOlr],
}

/// The DOIC overload-control core of one agent (or one worker's view of it).
///
/// Call [`Doic::treat`] for every request before routing it, and
/// [`Doic::on_answer`] for every answer that matches a pending request (the
/// relay matches hop-by-hop identifiers and transport connection, RFC 7683
/// §10.1). [`Doic::poll_timeout`] / [`Doic::handle_timeout`] only tidy up:
/// expiry is evaluated against `now` on every call.
///
/// ```
/// use std::time::{Duration, Instant};
/// use diameter::codec::doic::{OcOlr, ReportType};
/// use doic::{
///     AnswerView, Candidate, Doic, DoicConfig, PeerPolicy, RequestView, Treatment,
/// };
///
/// let mut cfg = DoicConfig::default();
/// cfg.peers.insert("s1.example".into(), PeerPolicy { trusted: true, receive_reports: true, ..PeerPolicy::default() });
/// let mut core = Doic::new("agent.example", cfg, 42, 1_700_000_000).unwrap();
/// let t0 = Instant::now();
/// let req = RequestView {
///     app_id: 4,
///     command_code: 272,
///     from_peer: "client.example",
///     dest_realm: "example",
///     dest_host: Some("s1.example"),
///     features: None,
///     drmp: None,
/// };
/// let route = [Candidate { peer: "s1.example", server: Some("s1.example") }];
/// // No overload state: forward, with the agent's OC-Supported-Features.
/// let Treatment::Forward { tx, .. } = core.treat(t0, &req, &route) else {
///     unreachable!()
/// };
/// assert_eq!(core.request_features().source_id.as_deref(), Some("agent.example"));
/// // The answer carries a 100 % host report.
/// let mut olr = OcOlr::new(1, ReportType::Host);
/// olr.reduction_percentage = Some(100);
/// let olrs = [olr];
/// let answer = AnswerView {
///     app_id: 4,
///     origin_host: "s1.example",
///     origin_realm: "example",
///     result_code: Some(2001),
///     experimental_result_code: None,
///     features: None,
///     olrs: &olrs,
/// };
/// let act = core.on_answer(t0, &tx, "s1.example", &answer);
/// // The client sent no OC-Supported-Features: nothing DOIC goes back to it.
/// assert!(act.strip && act.add_features.is_none() && act.forward_reports.is_empty());
/// // The next request to s1 is throttled by the agent with 5012.
/// let t1 = t0 + Duration::from_millis(1);
/// let Treatment::Throttle { result, .. } = core.treat(t1, &req, &route) else {
///     unreachable!()
/// };
/// assert_eq!(result.code(), 5012);
/// ```
#[derive(Debug)]
pub struct Doic {
    cfg: DoicConfig,
    /// This core's `cfg`, named uniquely among every core's configurations
    /// ([`idle::config_id`]): what a [`ClientMemo`] was made under.
    config_id: u64,
    identity: String,
    vector: u64,
    /// The OC-Supported-Features of every relayed request (constant).
    request_features: OcSupportedFeatures,
    ocs: OcsTable,
    realms: RealmSynth,
    rng: Prng,
    audit: Audit,
    own_peer_report: Option<(Report, Instant)>,
    own_peer_reports: super::fxhash::FxMap<String, (Report, Instant)>,
    own_sequence: u64,
    /// The reports made on behalf of protected servers, by server, one per
    /// application ([`behalf`]).
    behalf: super::fxhash::FxMap<String, Vec<(u32, behalf::BehalfEntry)>>,
}

impl Doic {
    /// A core for the agent whose DiameterIdentity is `identity`. `seed` seeds
    /// the per-core PRNG; `sequence_base` starts the sequence numbers of the
    /// agent's own reports (seconds since the Unix epoch at start satisfies
    /// RFC 7683 §5.2.1.4 across restarts).
    ///
    /// # Errors
    /// [`DoicConfigError`] when the configuration is unusable
    /// ([`DoicConfig::validate`]).
    pub fn new(
        identity: &str,
        cfg: DoicConfig,
        seed: u64,
        sequence_base: u64,
    ) -> Result<Self, DoicConfigError> {
        let board = Arc::new(RealmBoard::new(sequence_base, cfg.max_ocs));
        Self::build(identity, cfg, seed, sequence_base, (board, false))
    }

    /// [`Doic::new`] for one of several cores of one agent (one per
    /// worker): the agent's own realm reports take their versions from
    /// `board`, shared by all of them, so that every core sends the same
    /// report with the same sequence number (RFC 7683 §5.2.1.4). The
    /// versions a core makes reach the others through
    /// [`Doic::take_replicas`] and [`crate::AnswerActions::replicate`].
    ///
    /// # Errors
    /// [`DoicConfigError`] when the configuration is unusable
    /// ([`DoicConfig::validate`]).
    pub fn with_realm_board(
        identity: &str,
        cfg: DoicConfig,
        seed: u64,
        sequence_base: u64,
        board: Arc<RealmBoard>,
    ) -> Result<Self, DoicConfigError> {
        Self::build(identity, cfg, seed, sequence_base, (board, true))
    }

    /// A core; with `replicate`, it hands out its realm versions.
    fn build(
        identity: &str,
        cfg: DoicConfig,
        seed: u64,
        sequence_base: u64,
        (board, replicate): (Arc<RealmBoard>, bool),
    ) -> Result<Self, DoicConfigError> {
        cfg.validate()?;
        let vector = features::announced_vector(&cfg.algorithms, cfg.peer_report);
        let ending = Ending {
            probe_interval: cfg.probe_interval,
            ramp: cfg.ramp,
        };
        let bucket = cfg.rate.bucket_config()?;
        Ok(Self {
            ocs: OcsTable::new(cfg.max_ocs, ending, bucket),
            realms: RealmSynth::new(
                cfg.max_ocs,
                cfg.divert_headroom,
                Duration::from_secs(u64::from(cfg.realm_report_validity)),
                board,
                replicate,
            ),
            rng: Prng::new(seed),
            audit: Audit::new(cfg.audit_records),
            identity: identity.to_owned(),
            vector,
            request_features: features::request_features(vector, identity),
            cfg,
            config_id: idle::config_id(),
            own_peer_report: None,
            own_peer_reports: super::fxhash::FxMap::default(),
            own_sequence: sequence_base,
            behalf: super::fxhash::FxMap::default(),
        })
    }

    /// The OC-Feature-Vector announced in every request.
    #[must_use]
    pub fn vector(&self) -> u64 {
        self.vector
    }

    /// The evidence trail.
    #[must_use]
    pub fn audit(&self) -> &Audit {
        &self.audit
    }

    /// The evidence trail, to take what is new for the durable log
    /// ([`Audit::take_new`]).
    pub fn audit_mut(&mut self) -> &mut Audit {
        &mut self.audit
    }

    /// The reacting-node OCS tables.
    #[must_use]
    pub fn ocs(&self) -> &OcsTable {
        &self.ocs
    }

    /// The OCS entry for (`app_id`, `rt`, `id`), without advancing it.
    #[must_use]
    pub fn ocs_entry(&self, app_id: u32, rt: ReportType, id: &str) -> Option<&Ocs> {
        self.ocs.peek(app_id, rt, id)
    }

    /// The realm report the agent makes for (`app_id`, `realm`) at `now`.
    #[must_use]
    pub fn own_realm_report(&self, now: Instant, app_id: u32, realm: &str) -> Option<Report> {
        self.realms.report(now, app_id, realm)
    }

    /// When [`Doic::handle_timeout`] next has work.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.ocs.next_deadline()
    }

    /// Removes finished entries and records expiries up to `now`.
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.ocs.sweep(now, &mut self.audit) > 0 {
            self.realms.invalidate();
        }
        self.sweep_behalf(now);
    }

    /// Sets (or with `None` ends) the agent's own peer report for every
    /// downstream peer that supports peer reports (RFC 8581 §6.2.4). The
    /// control path calls this when the agent itself is overloaded.
    pub fn set_own_peer_report(
        &mut self,
        now: Instant,
        abatement: Option<Abatement>,
        validity: Duration,
    ) {
        let prev = self.own_peer_report.as_ref().map(|(r, _)| r.abatement);
        self.own_peer_report = Some(self.own_report(now, prev, abatement, validity));
    }

    /// Sets (or with `None` ends) the agent's own peer report for one
    /// downstream peer, overriding the one for all peers: RFC 8582 §6.1, a rate
    /// allocated to each reacting node, kept as a separate reporting-node OCS
    /// per peer (RFC 8581 §6.2.1.1). At most `max_ocs` peers are kept.
    pub fn set_own_peer_report_for(
        &mut self,
        now: Instant,
        peer: &str,
        abatement: Option<Abatement>,
        validity: Duration,
    ) {
        let prev = self.own_peer_reports.get(peer).map(|(r, _)| r.abatement);
        if prev.is_none() && self.own_peer_reports.len() >= self.cfg.max_ocs {
            return;
        }
        let entry = self.own_report(now, prev, abatement, validity);
        self.own_peer_reports.insert(peer.to_owned(), entry);
    }

    /// Puts a version of the agent's own peer report made elsewhere (by the
    /// own-overload controller, [`super::own_load::OwnLoad`]), sequence
    /// number included, so that every worker's core sends the same report:
    /// for `peer`, or with `None` for every peer without one of its own
    /// (RFC 8581 §6.2.4). It goes in answers until `until`. An identical
    /// version is a no-op; an older one (lower sequence) is ignored. At
    /// most `max_ocs` peers are kept (versions past `until` make room).
    pub fn put_own_peer_report(
        &mut self,
        now: Instant,
        peer: Option<&str>,
        report: Report,
        until: Instant,
    ) {
        self.own_sequence = self.own_sequence.max(report.sequence);
        let Some(p) = peer else {
            if self
                .own_peer_report
                .as_ref()
                .is_none_or(|(r, _)| r.sequence <= report.sequence)
            {
                self.own_peer_report = Some((report, until));
            }
            return;
        };
        if let Some(e) = self.own_peer_reports.get_mut(p) {
            if e.0.sequence <= report.sequence {
                *e = (report, until);
            }
            return;
        }
        if self.own_peer_reports.len() >= self.cfg.max_ocs {
            // Full: forget the versions no longer sent.
            self.own_peer_reports.retain(|_, (_, u)| now < *u);
            if self.own_peer_reports.len() >= self.cfg.max_ocs {
                return;
            }
        }
        self.own_peer_reports.insert(p.to_owned(), (report, until));
    }

    /// A new version of an own peer report; sequence numbers come from one
    /// counter, so every new version is greater (RFC 7683 §5.2.1.4).
    fn own_report(
        &mut self,
        now: Instant,
        prev: Option<Abatement>,
        abatement: Option<Abatement>,
        validity: Duration,
    ) -> (Report, Instant) {
        self.own_sequence += 1;
        let (abatement, validity) = match abatement {
            Some(a) => (a, validity),
            None => (
                prev.unwrap_or(Abatement::Loss { percent: 0 }),
                Duration::ZERO,
            ),
        };
        let report = Report {
            report_type: ReportType::Peer,
            sequence: self.own_sequence,
            validity,
            abatement,
            source_id: Some(self.identity.clone()),
        };
        // An end report is sent for the validity period it ends (30 s).
        let until = now
            + if validity.is_zero() {
                super::report::DEFAULT_VALIDITY
            } else {
                validity
            };
        (report, until)
    }

    /// Applies what another worker's core handed out
    /// ([`crate::AnswerActions::replicate`], [`Doic::take_replicas`]): a report it
    /// accepted, so that every worker abates with the same states and, for
    /// the rate algorithm, the same shared bucket; the start of a ramp its
    /// probe's answer began (every worker ramps together); or a version of
    /// the agent's own realm report, or a client it was sent to. The sequence
    /// rules make replicas idempotent and order-tolerant: an older replica
    /// is ignored.
    pub fn replicate(&mut self, r: &Replica) {
        let r = match r {
            Replica::Report(r) => r,
            Replica::Realm(r) => return self.realms.apply(r, &mut self.audit),
            Replica::Ramp(r) => {
                let key = (r.app_id, r.report_type, r.id.as_str());
                return self
                    .ocs
                    .ramp_replicated(r.at, key, r.sequence, &mut self.audit);
            }
        };
        let rt = r.report.report_type;
        let v = self.ocs.apply_shared(
            r.at,
            r.app_id,
            &r.id,
            &r.report,
            r.rate.as_ref(),
            &mut self.audit,
        );
        if rt == ReportType::Host
            && matches!(
                v,
                Verdict::Created | Verdict::Updated | Verdict::Rollover | Verdict::Ended
            )
        {
            self.realms.invalidate();
        }
        if let Some(client) = &r.delivered_to
            && let Some(o) = self.ocs.get_mut(r.app_id, rt, &r.id)
            && o.sequence == r.report.sequence
        {
            o.mark_delivered(client);
        }
    }

    /// What this core made while treating requests, for the other workers'
    /// cores ([`Doic::replicate`]): versions of the agent's own realm reports
    /// (seed 002). Empty, and free, on every request that changed none.
    #[must_use]
    pub fn take_replicas(&mut self) -> Vec<Replica> {
        self.realms
            .take_replicas()
            .into_iter()
            .map(Replica::Realm)
            .collect()
    }

    /// The OC-Supported-Features the agent puts in every request it relays
    /// (RFC 7683 §5.1.3, RFC 8581 §6.1.1: its vector and its own SourceID),
    /// replacing any received one.
    #[must_use]
    pub fn request_features(&self) -> &OcSupportedFeatures {
        &self.request_features
    }
}

/// A server's capacity for the realm estimate, from its host OCS (see
/// [`super::realm`]); `None` when it has no report.
pub(crate) fn capacity(
    ocs: &OcsTable,
    now: Instant,
    ramp: Duration,
    app: u32,
    server: &str,
) -> Option<Capacity> {
    let o = ocs.peek(app, ReportType::Host, server)?;
    let abated = match o.phase {
        Phase::Active if now < o.expires_at => match o.abatement {
            Abatement::Loss { percent } => f64::from(percent) / 100.0,
            Abatement::Rate { per_second: 0 } => 1.0,
            Abatement::Rate { per_second } => return Some(Capacity::Rate(f64::from(per_second))),
        },
        Phase::Active => return None,
        Phase::Probing { .. } => 1.0,
        Phase::Ramping { since, from } => {
            let done = now.saturating_duration_since(since).as_secs_f64()
                / ramp.as_secs_f64().max(f64::MIN_POSITIVE);
            (from * (1.0 - done)).max(0.0)
        }
    };
    Some(Capacity::Share(1.0 - abated))
}
