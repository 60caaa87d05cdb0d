//! The agent's DOIC core: the treatment of each request in the order of
//! RFC 8581 §5 (host/realm OCS first, then the next hop's peer OCS), diversion
//! before throttling (RFC 7683 §5.2.2, RFC 8581 §6.2.5), and the handling of
//! each answer (RFC 7683 §5.2.1.3, §5.1.3, §10; RFC 8581 §6.1.2, §6.2.3).
//!
//! Sans-io: time is an argument, nothing here reads a clock or does I/O.

use std::borrow::Cow;
use std::time::{Duration, Instant};

use super::config::{DoicConfig, DoicConfigError};
use super::features::{self, Algorithm, OcSupportedFeatures};
use super::loss::Prng;
use super::ocs::{Ending, Ocs, OcsTable, Outcome, Phase};
use super::realm::RealmSynth;
use super::report::{Abatement, OcOlr, Report, ReportType};
use super::treatment::{
    AnswerActions, Candidate, Cause, DIAMETER_OVERLOAD_RETRY_NOT_ALLOWED_TO_ANY, DIAMETER_TOO_BUSY,
    PendingTx, Replica, RequestView, ThrottleAnswer, Treatment, TxState,
};
use crate::audit::{Audit, ReportRecord, Verdict};

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
/// cfg.peers.insert("s1.example".into(), PeerPolicy { trusted: true, receive_reports: true });
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
}

/// Outcome of the host/realm step.
enum FirstStep {
    Pass,
    Divert(usize),
    Throttle(ReportType),
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
                sequence_base,
            ),
            rng: Prng::new(seed),
            audit: Audit::new(cfg.audit_records),
            identity: identity.to_owned(),
            vector,
            request_features: features::request_features(vector, identity),
            cfg,
            own_peer_report: None,
            own_peer_reports: super::fxhash::FxMap::default(),
            own_sequence: sequence_base,
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

    /// Applies a report another worker's core accepted ([`AnswerActions::replicate`]),
    /// so that every worker abates with the same states and, for the rate
    /// algorithm, the same shared bucket. The sequence rules make replicas
    /// idempotent and order-tolerant: an older replica is ignored.
    pub fn replicate(&mut self, r: &Replica) {
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

    /// Decides the treatment of a request (RFC 8581 §5 order). `candidates`
    /// are the next hops in the relay's order of preference.
    pub fn treat<'a>(
        &mut self,
        now: Instant,
        req: &RequestView<'a>,
        candidates: &[Candidate<'a>],
    ) -> Treatment<'a> {
        self.audit.totals.requests += 1;
        if candidates.is_empty() {
            self.audit.totals.no_route += 1;
            return Treatment::NoRoute;
        }
        // RFC 7683 §10.4: DOIC AVPs from untrusted peers are stripped; a client
        // that may not receive reports cannot abate at the source either.
        let client_features = req.features.filter(|_| {
            let policy = self.cfg.peer(req.from_peer);
            policy.trusted && policy.receive_reports
        });
        let client_peer_report = self.cfg.peer_report
            && features::peer_supports_peer_report(client_features, req.from_peer);
        if self.is_idle() {
            // No overload state at all: nothing can select, divert or count
            // this request (the common case, kept cheap).
            return self.forward(req, candidates, 0, client_features, client_peer_report);
        }
        let priority = self.cfg.priority(req.app_id, req.command_code, req.drmp);
        let app = req.app_id;

        // Step 1: host or realm OCS of the destination.
        let first = match req.dest_host {
            Some(host) => self.host_step(now, req, client_features, host, priority),
            None => self.realm_step(now, req, client_features, candidates, priority),
        };
        self.ocs.note_first_step(
            app,
            candidates[0].peer,
            matches!(first, FirstStep::Throttle(_)),
        );
        let mut index = match first {
            FirstStep::Throttle(rt) => return self.throttle(Cause::Destination(rt)),
            FirstStep::Pass => 0,
            FirstStep::Divert(i) => i,
        };

        // Step 2: the peer OCS of the chosen next hop, for what survived step 1.
        let key = (app, ReportType::Peer, candidates[index].peer);
        if let Some(selected) = self
            .ocs
            .select(now, key, priority, &mut self.rng, &mut self.audit)
            && selected
        {
            let alt = (0..candidates.len()).filter(|i| *i != index).find(|i| {
                self.alternate_ok(now, app, &candidates[*i], req.dest_host.is_none(), priority)
            });
            match alt {
                Some(i) => {
                    self.ocs.count(key, Outcome::Diverted);
                    index = i;
                }
                None => {
                    // RFC 8581 §6.2.5: not enough capacity to divert: throttle.
                    self.ocs.count(key, Outcome::Throttled);
                    return self.throttle(Cause::Peer);
                }
            }
        }

        self.forward(req, candidates, index, client_features, client_peer_report)
    }

    /// The OC-Supported-Features the agent puts in every request it relays
    /// (RFC 7683 §5.1.3, RFC 8581 §6.1.1: its vector and its own SourceID),
    /// replacing any received one.
    #[must_use]
    pub fn request_features(&self) -> &OcSupportedFeatures {
        &self.request_features
    }

    /// Counts one request as treated and forwarded to the first candidate
    /// when the core [`Doic::is_idle`] (what [`Doic::treat`] would decide for
    /// a client without OC-Supported-Features, cheaper); false otherwise.
    pub fn forward_if_idle(&mut self) -> bool {
        if !self.is_idle() {
            return false;
        }
        self.audit.totals.requests += 1;
        self.audit.totals.forwarded += 1;
        true
    }

    /// [`Doic::forward_if_idle`] for a request that carried
    /// OC-Supported-Features: counted as forwarded to the first candidate
    /// when the core [`Doic::is_idle`], with the transaction state
    /// [`Doic::treat`] would keep (`None` otherwise). `client` is the
    /// received OC-Feature-Vector (absent: loss, [`OcSupportedFeatures::features`])
    /// and whether its SourceID is `from_peer`'s identity: RFC 7683 §10.4
    /// (DOIC AVPs of peers not trusted for DOIC are ignored), RFC 8581 §6.1.2
    /// (peer-report support).
    pub fn forward_client_if_idle(
        &mut self,
        app_id: u32,
        from_peer: &str,
        (vector, source_is_sender): (u64, bool),
    ) -> Option<TxState> {
        if !self.forward_if_idle() {
            return None;
        }
        let policy = self.cfg.peer(from_peer);
        let client_features = (policy.trusted && policy.receive_reports)
            .then(|| super::treatment::kept_vector(vector));
        Some(TxState {
            app_id,
            client_features,
            client_peer_report: self.cfg.peer_report
                && client_features.is_some_and(|v| v.get() & features::OC_PEER_REPORT != 0)
                && source_is_sender,
        })
    }

    /// What [`Doic::on_answer`] does with an answer that carries no
    /// OC-Supported-Features and no OC-OLR, for a DOIC client whose
    /// OC-Feature-Vector is `client_vector`, when the core [`Doic::is_idle`]
    /// and holds no peer report of the agent's own: nothing to judge or
    /// advance, and the agent's OC-Supported-Features added (RFC 7683
    /// §5.1.2, loss selected since the answer selects nothing; RFC 8581
    /// §6.1.2, OC-Peer-Algo the configured algorithm if the client offered
    /// it, else loss). Returns that OC-Peer-Algo, or `None` when the full
    /// [`Doic::on_answer`] is needed.
    #[must_use]
    pub fn idle_answer_peer_algo(&self, client_vector: u64) -> Option<Algorithm> {
        if !self.is_idle() || self.own_peer_report.is_some() || !self.own_peer_reports.is_empty() {
            return None;
        }
        let wanted = self.cfg.peer_algo;
        Some(
            if features::supports(&super::treatment::features_of(client_vector), wanted) {
                wanted
            } else {
                Algorithm::Loss
            },
        )
    }

    /// Whether no overload state exists (no OCS, no own realm state): every
    /// request is then forwarded to the first candidate.
    #[must_use]
    pub fn is_idle(&self) -> bool {
        self.ocs.is_empty() && self.realms.is_empty()
    }

    /// Forwards to `candidates[index]` with the agent's OC-Supported-Features
    /// (RFC 7683 §5.1.3 / RFC 8581 §6.1.1: every relayed request carries them,
    /// with the agent's own SourceID).
    fn forward<'a>(
        &mut self,
        req: &RequestView<'a>,
        candidates: &[Candidate<'a>],
        index: usize,
        client_features: Option<&'a OcSupportedFeatures>,
        client_peer_report: bool,
    ) -> Treatment<'a> {
        let tx = PendingTx {
            app_id: req.app_id,
            client: Cow::Borrowed(req.from_peer),
            client_features: client_features.map(Cow::Borrowed),
            client_peer_report,
            dest_realm: Cow::Borrowed(req.dest_realm),
            upstream: Cow::Borrowed(candidates[index].peer),
        };
        if index == 0 {
            self.audit.totals.forwarded += 1;
            Treatment::Forward { index, tx }
        } else {
            self.audit.totals.diverted += 1;
            Treatment::Divert { index, tx }
        }
    }

    fn throttle<'a>(&mut self, cause: Cause) -> Treatment<'a> {
        self.audit.totals.throttled += 1;
        let result = ThrottleAnswer::for_cause(cause, self.cfg.throttle_result);
        tracing::trace!(?cause, code = result.code(), "throttled");
        Treatment::Throttle { result, cause }
    }

    /// Whether the client abates this report itself: it is a DOIC node, it was
    /// sent this version of the report, and it supports the report's algorithm.
    fn delegated(client: Option<&OcSupportedFeatures>, o: &Ocs, from: &str) -> bool {
        client.is_some_and(|f| features::supports(f, o.abatement.algorithm()))
            && o.delivered_to(from)
    }

    /// Host-routed request: the host OCS of Destination-Host. Diversion is not
    /// possible (every path ends at that host), so selection means throttling,
    /// unless the client was sent the report and abates at the source.
    fn host_step(
        &mut self,
        now: Instant,
        req: &RequestView<'_>,
        client: Option<&OcSupportedFeatures>,
        host: &str,
        priority: super::rate::Priority,
    ) -> FirstStep {
        let ending = self.ocs.ending();
        let Some(o) = self
            .ocs
            .lookup(now, req.app_id, ReportType::Host, host, &mut self.audit)
        else {
            return FirstStep::Pass;
        };
        // One lookup: decide and count on the entry itself.
        o.counts.matched += 1;
        if Self::delegated(client, o, req.from_peer) {
            o.counts.delegated += 1;
            FirstStep::Pass
        } else if o.decide(now, priority, ending, &mut self.rng) {
            o.counts.throttled += 1;
            FirstStep::Throttle(ReportType::Host)
        } else {
            o.counts.passed += 1;
            FirstStep::Pass
        }
    }

    /// Realm-routed request: the realm OCS (received, or made by the agent),
    /// then the host OCS of the first-choice server, diverting to another
    /// server when it is selected (seed 002).
    fn realm_step(
        &mut self,
        now: Instant,
        req: &RequestView<'_>,
        client: Option<&OcSupportedFeatures>,
        candidates: &[Candidate<'_>],
        priority: super::rate::Priority,
    ) -> FirstStep {
        let app = req.app_id;
        let realm = req.dest_realm;
        // Keep the agent's own view of the realm's capacity current.
        // With a single server the host report says all there is to say: no
        // realm report is made (it would double the OC-OLRs of the answer,
        // which application grammars with `[ OC-OLR ]` refuse, as the OTP
        // interop test showed).
        if candidates.iter().filter(|c| c.server.is_some()).count() > 1 {
            let servers: Vec<&str> = candidates.iter().filter_map(|c| c.server).collect();
            let ocs = &self.ocs;
            let ramp = self.cfg.ramp;
            self.realms.observe(
                now,
                app,
                realm,
                &servers,
                |s| capacity(ocs, now, ramp, app, s),
                &mut self.audit,
            );
        }
        let key = (app, ReportType::Realm, realm);
        let mut realm_abated = false;
        if let Some(o) = self
            .ocs
            .lookup(now, app, ReportType::Realm, realm, &mut self.audit)
        {
            if Self::delegated(client, o, req.from_peer) {
                o.counts.matched += 1;
                o.counts.delegated += 1;
            } else {
                if let Some(true) =
                    self.ocs
                        .select(now, key, priority, &mut self.rng, &mut self.audit)
                {
                    self.ocs.count(key, Outcome::Throttled);
                    return FirstStep::Throttle(ReportType::Realm);
                }
            }
        } else if let Some(st) = self.realms.state_mut(app, realm) {
            // The agent's own realm report (seed 002). A DOIC client that
            // received it abates realm traffic at the source. For the other
            // clients the agent applies it when diversion among several
            // servers cannot carry the realm; with one candidate its host OCS
            // is exact and decides alone below. Either way the host step then
            // does not throttle again (that would abate twice).
            if st.percent > 0 {
                st.counts.matched += 1;
                let delivered = client.is_some() && st.delivered_to(req.from_peer);
                if delivered {
                    st.counts.delegated += 1;
                    realm_abated = true;
                } else if candidates.len() > 1 {
                    if super::loss::select_percent(&mut self.rng, st.percent) {
                        st.counts.throttled += 1;
                        return FirstStep::Throttle(ReportType::Realm);
                    }
                    st.counts.passed += 1;
                    realm_abated = true;
                } else {
                    st.counts.passed += 1;
                }
            }
        }
        // Host OCS of the first-choice server: divert when selected.
        let Some(server) = candidates[0].server else {
            return FirstStep::Pass;
        };
        let key = (app, ReportType::Host, server);
        match self
            .ocs
            .select(now, key, priority, &mut self.rng, &mut self.audit)
        {
            None => FirstStep::Pass,
            Some(false) => FirstStep::Pass,
            Some(true) => {
                let alt = (1..candidates.len())
                    .find(|i| self.alternate_ok(now, app, &candidates[*i], true, priority));
                if let Some(i) = alt {
                    self.ocs.count(key, Outcome::Diverted);
                    FirstStep::Divert(i)
                } else if realm_abated {
                    // The realm report already abated the realm's deficit;
                    // throttling again would abate twice.
                    self.ocs.count(key, Outcome::Passed);
                    FirstStep::Pass
                } else {
                    self.ocs.count(key, Outcome::Throttled);
                    FirstStep::Throttle(ReportType::Host)
                }
            }
        }
    }

    /// Whether `c` can take a diverted request: its peer has no active peer
    /// OCS or its abatement lets this request through, and (realm-routed) the
    /// same for its server's host OCS. Probing the alternate's own algorithm is
    /// what "spare allocation" means for loss and rate alike.
    fn alternate_ok(
        &mut self,
        now: Instant,
        app: u32,
        c: &Candidate<'_>,
        realm_routed: bool,
        priority: super::rate::Priority,
    ) -> bool {
        // Probing does not count: only where the request goes is counted.
        let host = if realm_routed { c.server } else { None };
        if let Some(server) = host {
            let key = (app, ReportType::Host, server);
            if self
                .ocs
                .probe(now, key, priority, &mut self.rng, &mut self.audit)
                == Some(true)
            {
                return false;
            }
        }
        let key = (app, ReportType::Peer, c.peer);
        if self
            .ocs
            .probe(now, key, priority, &mut self.rng, &mut self.audit)
            == Some(true)
        {
            return false;
        }
        if let Some(server) = host {
            self.ocs.count_passed((app, ReportType::Host, server));
        }
        self.ocs.count_passed(key);
        true
    }

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
            retry_on_alternate: ans.experimental_result_code
                != Some(DIAMETER_OVERLOAD_RETRY_NOT_ALLOWED_TO_ANY),
            replicate: Vec::new(),
        };
        if !out.strip && tx.client_features.is_none() && self.is_idle() {
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
                    fresh[super::report::slot(r.report_type)] = true;
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
                    out.replicate.push(Replica {
                        at: now,
                        app_id: ans.app_id,
                        id: id.to_owned(),
                        report: r,
                        rate,
                        delivered_to,
                    });
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
                if !fresh[super::report::slot(rt)] {
                    self.ocs
                        .note_answer(now, ans.app_id, rt, id, &mut self.audit);
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
        let report = match super::report::normalise(olr, algo) {
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

/// A server's capacity as a share of its fair share, from its host OCS (see
/// [`super::realm`]); `None` when it has no report.
fn capacity(ocs: &OcsTable, now: Instant, ramp: Duration, app: u32, server: &str) -> Option<f64> {
    let o = ocs.peek(app, ReportType::Host, server)?;
    let abated = match o.phase {
        Phase::Active if now < o.expires_at => match o.abatement {
            Abatement::Loss { percent } => f64::from(percent) / 100.0,
            Abatement::Rate { per_second: 0 } => 1.0,
            Abatement::Rate { .. } => {
                let c = o.counts;
                if c.matched == 0 {
                    0.0
                } else {
                    #[expect(clippy::cast_precision_loss, reason = "ratio of counters")]
                    {
                        (c.throttled + c.diverted) as f64 / c.matched as f64
                    }
                }
            }
        },
        Phase::Active => return None,
        Phase::Probing { .. } => 1.0,
        Phase::Ramping { since, from } => {
            let done = now.saturating_duration_since(since).as_secs_f64()
                / ramp.as_secs_f64().max(f64::MIN_POSITIVE);
            (from * (1.0 - done)).max(0.0)
        }
    };
    Some(1.0 - abated)
}
