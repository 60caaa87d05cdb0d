//! [`Doic::treat`]: the treatment of one request in the order of RFC 8581
//! §5 (host or realm OCS of the destination, then the peer OCS of the next
//! hop), diversion before throttling (RFC 7683 §5.2.2, RFC 8581 §6.2.5) and
//! the agent's own realm report (seed 002).

use std::borrow::Cow;
use std::time::Instant;

use super::idle::Offer;
use super::{Doic, capacity};
use crate::features::{self, OcSupportedFeatures};
use crate::ocs::{Ocs, Outcome};
use crate::report::ReportType;
use crate::treatment::{Candidate, Cause, PendingTx, RequestView, ThrottleAnswer, Treatment};

/// Outcome of the host/realm step.
enum FirstStep {
    Pass,
    Divert(usize),
    Throttle(ReportType),
}

impl Doic {
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
        let offer = req.features.map(|f| Offer::of(f, req.from_peer));
        let (kept, client_peer_report) = self.client_state(req.from_peer, offer);
        let client_features = req.features.filter(|_| kept);
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
            let who = (client_features.map(|_| req.from_peer), priority);
            let alt = (0..candidates.len()).filter(|i| *i != index).find(|i| {
                self.alternate_ok(now, app, &candidates[*i], req.dest_host.is_none(), who)
            });
            match alt {
                Some(i) => {
                    let slot = self.audit.peer_slot(candidates[i].peer);
                    self.ocs.count(key, Outcome::Diverted(slot));
                    index = i;
                }
                None => {
                    // RFC 8581 §6.2.5: not enough capacity to divert: throttle.
                    let slot = self.answer_slot(Cause::Peer);
                    self.ocs.count(key, Outcome::Throttled(slot));
                    return self.throttle(Cause::Peer);
                }
            }
        }

        self.forward(req, candidates, index, client_features, client_peer_report)
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
            let slot = self.audit.peer_slot(candidates[index].peer);
            self.audit.totals.split.diverted(slot);
            Treatment::Divert { index, tx }
        }
    }

    /// The slot of the answer to a request throttled for `cause`
    /// ([`ThrottleAnswer::slot`]): the throttled counts by Result-Code.
    fn answer_slot(&self, cause: Cause) -> usize {
        ThrottleAnswer::for_cause(cause, self.cfg.throttle_result).slot()
    }

    /// Counts a request the node answered before DOIC treatment, throttled
    /// with `result`: the enforcement of its own overload reports (RFC 8581
    /// §6.2.4). The agent-wide totals keep requests = forwarded + diverted +
    /// throttled + no_route over every request the node received.
    pub fn count_throttled_before_treatment(&mut self, result: ThrottleAnswer) {
        self.audit.totals.requests += 1;
        self.audit.totals.throttled += 1;
        self.audit.totals.split.throttled(result.slot());
    }

    fn throttle<'a>(&mut self, cause: Cause) -> Treatment<'a> {
        self.audit.totals.throttled += 1;
        let result = ThrottleAnswer::for_cause(cause, self.cfg.throttle_result);
        self.audit.totals.split.throttled(result.slot());
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
        priority: crate::rate::Priority,
    ) -> FirstStep {
        let ending = self.ocs.ending();
        let slot = self.answer_slot(Cause::Destination(ReportType::Host));
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
        } else if o.decide(
            now,
            (client.map(|_| req.from_peer), priority),
            ending,
            &mut self.rng,
        ) {
            o.counts.throttled += 1;
            o.counts.split.throttled(slot);
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
        priority: crate::rate::Priority,
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
        let slot = self.answer_slot(Cause::Destination(ReportType::Realm));
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
                    self.ocs.count(key, Outcome::Throttled(slot));
                    return FirstStep::Throttle(ReportType::Realm);
                }
            }
        } else if let Some(st) = self
            .realms
            .state_mut(app, realm)
            .filter(|st| st.percent > 0)
        {
            // The agent's own realm report (seed 002). A DOIC client that
            // received it abates realm traffic at the source. For the other
            // clients the agent applies it when diversion among several
            // servers cannot carry the realm; with one candidate its host OCS
            // is exact and decides alone below. Either way the host step then
            // does not throttle again (that would abate twice).
            //
            // When no server of the realm has a report of its own (each is
            // held to its limit by the agent, `protect::Gates`, or has none),
            // the host step below is exact: each server's gates admit what it
            // can serve and a request one refuses is diverted to one with
            // room. The realm's loss on top of them would abate twice: its
            // estimate weighs the demand of DOIC clients as if they abated
            // and lags the limits as they recover, so the servers would be
            // left idle while the agent refused requests (the demo episode
            // lost a tenth of its goodput after its peak so).
            let ocs = &self.ocs;
            let gated = || {
                candidates
                    .iter()
                    .filter_map(|c| c.server)
                    .all(|s| ocs.peek(app, ReportType::Host, s).is_none_or(|o| o.own))
            };
            st.counts.matched += 1;
            let delivered = client.is_some() && st.delivered_to(req.from_peer);
            if delivered {
                st.counts.delegated += 1;
                st.delegated_arrivals += 1;
                realm_abated = true;
            } else if candidates.len() > 1 && !gated() {
                if crate::loss::select_percent(&mut self.rng, st.percent) {
                    st.counts.throttled += 1;
                    st.counts.split.throttled(slot);
                    return FirstStep::Throttle(ReportType::Realm);
                }
                st.counts.passed += 1;
                realm_abated = true;
            } else {
                st.counts.passed += 1;
            }
        }
        // Host OCS of the first-choice server: divert when selected. A
        // DOIC client is held to its own share of a protected server's
        // limit (`protect::Gates`).
        let Some(server) = candidates[0].server else {
            return FirstStep::Pass;
        };
        let key = (app, ReportType::Host, server);
        let who = (client.map(|_| req.from_peer), priority);
        match self
            .ocs
            .select_from(now, key, who, &mut self.rng, &mut self.audit)
        {
            None => FirstStep::Pass,
            Some(false) => FirstStep::Pass,
            Some(true) => {
                let alt = (1..candidates.len())
                    .find(|i| self.alternate_ok(now, app, &candidates[*i], true, who));
                if let Some(i) = alt {
                    let slot = self.audit.peer_slot(candidates[i].peer);
                    self.ocs.count(key, Outcome::Diverted(slot));
                    FirstStep::Divert(i)
                } else if realm_abated
                    && !self
                        .ocs
                        .peek(app, ReportType::Host, server)
                        .is_some_and(|o| o.own)
                {
                    // The realm report already abated the realm's deficit;
                    // throttling again would abate twice. Not past the limit
                    // the agent holds a protected server to, though: the
                    // realm's estimate is a share, the server's limit is
                    // what it can serve (RFC 7683 §5.1.3, docs/protect.md).
                    self.ocs.count(key, Outcome::Passed);
                    FirstStep::Pass
                } else {
                    let slot = self.answer_slot(Cause::Destination(ReportType::Host));
                    self.ocs.count(key, Outcome::Throttled(slot));
                    FirstStep::Throttle(ReportType::Host)
                }
            }
        }
    }

    /// Whether `c` can take a diverted request: its peer has no active peer
    /// OCS or its abatement lets this request through, and (realm-routed) the
    /// same for its server's host OCS. Probing the alternate's own algorithm is
    /// what "spare allocation" means for loss and rate alike. `who` is the
    /// DOIC client (`None` without DOIC) and the request's priority.
    fn alternate_ok(
        &mut self,
        now: Instant,
        app: u32,
        c: &Candidate<'_>,
        realm_routed: bool,
        who: (Option<&str>, crate::rate::Priority),
    ) -> bool {
        // Probing does not count: only where the request goes is counted.
        let host = if realm_routed { c.server } else { None };
        if let Some(server) = host {
            let key = (app, ReportType::Host, server);
            if self
                .ocs
                .probe(now, key, who, &mut self.rng, &mut self.audit)
                == Some(true)
            {
                return false;
            }
        }
        let key = (app, ReportType::Peer, c.peer);
        if self
            .ocs
            .probe(now, key, who, &mut self.rng, &mut self.audit)
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
}
