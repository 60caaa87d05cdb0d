//! The relaying half of a connection (RFC 6733 §6.1), a driver of the
//! sans-io [`Relay`]: requests from this connection's peer are checked with
//! the codec's relay scan (§7.1 Result-Codes), then by
//! [`Relay::check_request`] (loop check §6.1.3, local requests §6.1.4),
//! treated by overload control, routed (§6.1.5-6.1.7) and dispatched;
//! requests routed to this peer go through [`Relay::send_upstream`]
//! (Route-Record and a fresh Hop-by-Hop Identifier, §6.1.9); answers from
//! this peer are matched in the hop-by-hop table, checked at least as
//! strictly as requests ([`Routing::scan_answer`]) and sent back (§6.2),
//! TOO_BUSY retried elsewhere ([`Relay::retry_too_busy`]).
//!
//! Requests must carry exactly one Origin-Host and one Origin-Realm (§6.1.1,
//! `{ Origin-Host } { Origin-Realm }` in every request's grammar): 5005 or
//! 5009 with Failed-AVP (§7.1.5, §7.5). A request whose Destination-Host is
//! the agent's own identity is for local consumption (§6.1.4) and is not
//! relayed; the agent has no local application, so it is answered 3007
//! DIAMETER_APPLICATION_UNSUPPORTED (§7.1.3), as a non-proxiable request is.
//! A malformed answer is never forwarded (the defect would reach a client
//! that did not cause it): the request is answered 3002
//! DIAMETER_UNABLE_TO_DELIVER with an Error-Message naming the upstream peer
//! and the defect, and no Failed-AVP (§7.5: it names an AVP of the request).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::Bytes;
use tokio::time::Instant;

use super::Conn;
use crate::peer::table::{Relayed, ToConn};
use crate::relay::{self, AnswerFate, Relay};
use crate::routing::{PeerId, PeerView};
use diameter::codec::answer::put_error_answer;
use diameter::codec::header::Header;
use diameter::codec::{DecodeError, Routing};
use diameter::peer::fsm::State;
use diameter::peer::watchdog::Watchdog;

/// At most one warning per connection per this interval for malformed
/// answers; the metric counts every one.
const WARN_EVERY: Duration = Duration::from_secs(10);

/// Rate limit of a warning (a connection's malformed answers, a TLS
/// listener's refused handshakes).
#[derive(Debug, Default)]
pub(super) struct WarnLimit {
    next: Option<Instant>,
    suppressed: u64,
}

impl WarnLimit {
    /// `Some(number not logged since the last line)` when a line may be
    /// logged at `now`.
    pub(super) fn allow(&mut self, now: Instant) -> Option<u64> {
        if self.next.is_some_and(|t| now < t) {
            self.suppressed += 1;
            return None;
        }
        self.next = Some(now + WARN_EVERY);
        Some(std::mem::take(&mut self.suppressed))
    }
}

/// One request in this many has its age in the agent measured
/// ([`Conn::send_upstream`]).
pub(super) const AGE_SAMPLE: u32 = 16;

impl Conn {
    /// A request routed to this connection's peer: written with a
    /// Route-Record and a fresh Hop-by-Hop Identifier into the hop-by-hop
    /// table ([`Relay::send_upstream`]).
    pub(super) fn send_upstream(&mut self, r: Relayed) {
        self.relayed = self.relayed.wrapping_add(1);
        if r.read_ns != 0
            && self.relayed.is_multiple_of(AGE_SAMPLE)
            && let Some(ov) = &self.ctx.relay.overload
        {
            // How long the request waited in the agent between its read
            // and now: its queue delay, measured when the worker got to it.
            // One request in AGE_SAMPLE: the delay is a maximum over a tick
            // and a queue holds it for many requests in a row, while a
            // clock read per request cost the DOIC client's relay about 1 %
            // of its capacity (bench-relay-ab --subject doic --doic-client).
            let age = ov.now_ns().saturating_sub(r.read_ns);
            crate::overload::own::note_queue_delay(ov, Duration::from_nanos(age));
        }
        let usable =
            self.fsm.state() == State::Open && self.watchdog.as_ref().is_some_and(Watchdog::usable);
        let features = match &self.ctx.relay.overload {
            Some(ov) if r.doic.is_some() => Some(ov.features_avp()),
            _ => None,
        };
        let now = Instant::now().into_std();
        self.ctx.relay.relay(self.routes.router()).send_upstream(
            &mut self.upstream,
            self.peer.as_ref().map(|(id, s)| (*id, &**s)),
            usable,
            (now, &mut self.rotate),
            r,
            &mut self.out,
            features,
        );
    }

    /// Writes the agent's own answer to a request from this peer (cold
    /// path: the codec's error answer reads Session-Id and Proxy-Info from
    /// the request).
    pub(super) fn answer_error(&mut self, req: &[u8], code: u32, failed: Option<&[u8]>, why: &str) {
        let o = self.origin();
        let (h, r) = (o.0.to_owned(), o.1.to_owned());
        put_error_answer(&mut self.out, req, (&h, &r), code, failed, why);
        if let Some((_, slot)) = &self.peer {
            slot.stats.answers_out.add(code);
        }
        if code == relay::UNABLE_TO_DELIVER
            && let Some(suppressed) = self.undeliverable_warn.allow(Instant::now())
        {
            tracing::warn!(
                peer = %self.peer_host(),
                cause = %why,
                suppressed,
                "request answered 3002 DIAMETER_UNABLE_TO_DELIVER"
            );
        }
    }

    /// Answers a request the relay refuses, with `why`'s Result-Code,
    /// Failed-AVP and description.
    #[cold]
    pub(super) fn refuse(&mut self, req: &[u8], why: relay::Error) {
        let failed = why.failed_avp();
        self.answer_error(req, why.result_code(), failed.as_deref(), &why.to_string());
    }

    /// Answers a request with the Result-Code, Failed-AVP and description
    /// of its defect.
    #[cold]
    fn answer_defect(&mut self, req: &[u8], e: &DecodeError) {
        let why = e.to_string();
        self.answer_error(req, e.result_code(), e.failed_avp().map(|f| &f[..]), &why);
    }

    /// A request from this connection's peer: check (the codec's relay
    /// scan, RFC 6733 §7.1 Result-Codes), loop check (§6.1.3), route
    /// (§6.1.6-6.1.7), dispatch (§6.1.9).
    pub(super) fn relay_request(&mut self, msg: Bytes, head: Header) {
        if let Some((_, slot)) = &self.peer {
            slot.stats.requests_in.fetch_add(1, Ordering::Relaxed);
        }
        let routing = match Routing::scan(&msg).and_then(|r| {
            r.check_origin("request")?;
            Ok(r)
        }) {
            Ok(r) => r,
            Err(e) => return self.answer_defect(&msg, &e),
        };
        let relay = self.ctx.relay.relay(self.routes.router());
        let realm = match relay.check_request(head, &routing) {
            Ok(realm) => realm,
            Err(why) => return self.refuse(&msg, why),
        };
        if self.closing_since.is_some() {
            // The agent is stopping, or this peer was removed (RFC 6733
            // §5.4): after its DPR nothing new goes upstream; the request is
            // answered at once.
            let why = if self.retired {
                relay::Error::ConnectionClosing
            } else {
                relay::Error::ShuttingDown
            };
            return self.refuse(&msg, why);
        }
        if self.fsm.owes_dpa() {
            // The peer sent DPR and waits for its DPA: a request it still
            // sends is not relayed (it would hold the DPA back), but answered.
            return self.refuse(&msg, relay::Error::ConnectionClosing);
        }
        if self.inflight_down >= self.ctx.config.node.max_pending_per_connection {
            // The bound that keeps the answer queue from filling
            // (`net::link`): the agent is too busy for more from this peer.
            return self.refuse(&msg, relay::Error::TooManyPending);
        }
        // The agent's own overload: a client above its allocation has the
        // excess answered here, before routing and DOIC treatment (one
        // relaxed load while no client is held to one).
        if let Some(ov) = &self.ctx.relay.overload
            && ov.own_enforcing()
            && let Some((_, slot)) = &self.peer
            && let Some(code) = crate::overload::own::enforce(
                &mut self.out,
                ov,
                &self.ctx.relay.doic_route(self.routes.router()),
                slot,
                &msg,
                head,
                &routing,
            )
        {
            slot.stats.answers_out.add(code);
            return;
        }
        let realm = msg.slice_ref(realm);
        let dest_host = routing
            .destination_host()
            .map(|h| String::from_utf8_lossy(h).into_owned());
        // RFC 6733 §6.1.7 predictive loop avoidance: peers named in a
        // Route-Record, and the sender itself, are not candidates.
        let mut tried: Vec<PeerId> = routing
            .route_records()
            .filter_map(|rr| self.ctx.relay.table.by_host(&String::from_utf8_lossy(rr)))
            .collect();
        let (from, sender) = match &self.peer {
            Some((id, slot)) => (slot.host_arc(), Some(*id)),
            None => (Arc::from(""), None),
        };
        tried.extend(sender);
        let excluded = tried.len();
        // One step of the tie rotation per request, whoever routes it.
        self.rotate = self.rotate.wrapping_add(1);
        let decision = match &self.ctx.relay.overload {
            None => crate::overload::Decision::Relay,
            Some(ov) => {
                match crate::overload::idle_forward(
                    ov,
                    head.application_id,
                    &routing,
                    (&from, &mut self.offers),
                ) {
                    Some(d) => d,
                    None => crate::overload::treat_request(
                        &self.ctx.relay.doic_route(self.routes.router()),
                        ov,
                        &crate::overload::RequestIn {
                            msg: &msg,
                            head,
                            routing: &routing,
                            from: &from,
                            realm: &String::from_utf8_lossy(&realm),
                            dest_host: dest_host.as_deref(),
                            excluded: &tried,
                            rotate: self.rotate,
                            prior: None,
                        },
                    ),
                }
            }
        };
        let mut cut = None;
        let (msg, doic, to) = match decision {
            crate::overload::Decision::Answer { msg, code } => {
                self.out.extend_from_slice(&msg);
                if let Some((_, slot)) = &self.peer {
                    slot.stats.answers_out.add(code);
                }
                return;
            }
            crate::overload::Decision::Forward {
                peer,
                slot,
                pinned,
                msg: rewritten,
                cut: c,
                tx,
            } => {
                cut = c;
                (
                    rewritten.unwrap_or(msg),
                    Some(tx),
                    Some(((peer, slot), pinned)),
                )
            }
            crate::overload::Decision::Plain { tx, cut: c } => {
                cut = c;
                (msg, Some(tx), None)
            }
            crate::overload::Decision::Relay => (msg, None, None),
        };
        let r = Relayed {
            realm,
            msg,
            hbh: head.hop_by_hop,
            reply: self.tx.clone(),
            pinned: false,
            tried,
            retransmit: head.flags.is_retransmit(),
            app: head.application_id,
            from,
            doic,
            cut,
            read_ns: self.read_ns,
        };
        let relay = self.ctx.relay.relay(self.routes.router());
        let sent = match to {
            Some((to, pinned)) => relay.dispatch_to(r, to, pinned, self.rotate),
            None => relay.route(r, dest_host.as_deref(), self.rotate),
        };
        match sent {
            Ok(()) => {
                self.inflight_down += 1;
                self.ctx.relay.retry.note_request();
            }
            Err((r, e)) => match Relay::refusal(&r, e, excluded) {
                relay::Error::NoRoute => self.refuse_undeliverable(&r),
                why => self.refuse(&r.msg, why),
            },
        }
    }

    /// Answers 3002 a request the router found no next hop for, naming the
    /// realm and its peers that are down in Error-Message.
    #[cold]
    #[inline(never)]
    fn refuse_undeliverable(&mut self, r: &Relayed) {
        let why = self
            .ctx
            .relay
            .relay(self.routes.router())
            .no_route_why(&r.realm, r.app);
        self.answer_error(&r.msg, relay::UNABLE_TO_DELIVER, None, &why);
    }

    /// An answer from this connection's peer to a request the agent relayed.
    pub(super) fn relay_answer(&mut self, msg: Bytes, head: Header) {
        let Some((_, slot)) = &self.peer else {
            return;
        };
        let Some((r, sent)) = self.upstream.handle_answer(head.hop_by_hop, &slot.stats) else {
            return;
        };
        slot.outstanding.fetch_sub(1, Ordering::Relaxed);
        let routing = match Routing::scan_answer(&msg) {
            Ok(r) => r,
            Err(e) => return self.malformed_answer(r, &e),
        };
        let rc = routing.result_code();
        let erc = routing.experimental_result_code().map(|(_, code)| code);
        let code = rc.or(erc).unwrap_or(0);
        let native = routing.has_oc_supported_features();
        let mut retry_ok = true;
        let mut rewritten = None;
        let mut append = None;
        if let Some(ov) = &self.ctx.relay.overload
            && let Some(tx) = r.doic.as_ref()
            && tx.client_features.is_some()
            && let Some((features, retry)) =
                crate::overload::idle_client_answer(ov, tx, &routing, erc)
        {
            // A DOIC client and nothing to judge: the agent's features are
            // appended as the answer is written (`ToConn::AnswerWith`).
            (append, retry_ok) = (Some(features), retry);
        } else if let Some(ov) = &self.ctx.relay.overload
            && let Some(tx) = r.doic.as_ref()
            && let Some(retry) = crate::overload::idle_answer(ov, tx, &routing, erc)
        {
            // Nothing to judge, add or strip: the answer goes unchanged.
            retry_ok = retry;
        } else if let Some(ov) = &self.ctx.relay.overload
            && let Some(tx) = r.doic.as_ref()
        {
            let from_peer = self.peer.as_ref().map_or("", |(_, s)| s.host.as_str());
            let realm = std::str::from_utf8(&r.realm).unwrap_or("");
            // Never retried elsewhere after 5198 (retry_on_alternate).
            (rewritten, retry_ok) =
                crate::overload::treat_answer(ov, tx, (&r.from, realm), from_peer, &msg, &routing);
        }
        let mut msg = rewritten.unwrap_or(msg);
        if let Some((id, slot)) = &self.peer {
            slot.stats.answers_in.add(code);
            let now = Instant::now().into_std();
            if self
                .ctx
                .relay
                .overload
                .as_ref()
                .is_some_and(|o| o.protecting())
            {
                // What the peer's protection senses (docs/protect.md).
                let outcome = if rc == Some(relay::TOO_BUSY) {
                    doic::protect::Outcome::Busy
                } else {
                    doic::protect::Outcome::Answered
                };
                let latency = now.saturating_duration_since(sent);
                slot.sensed
                    .record(latency, outcome, native, head.application_id);
            }
            if rc == Some(relay::TOO_BUSY) {
                self.ctx.relay.retry.handle_too_busy(now, *id);
            }
            if retry_ok && relay::answer_fate(rc, erc, r.pinned) == AnswerFate::Retry {
                self.rotate = self.rotate.wrapping_add(1);
                match self.ctx.relay.relay(self.routes.router()).retry_too_busy(
                    r,
                    *id,
                    (now, self.rotate),
                ) {
                    Ok(()) => return,
                    Err(r) => {
                        if let Some(f) = append
                            && let Some(ov) = &self.ctx.relay.overload
                        {
                            msg = crate::overload::with_avp(&msg, ov.answer_features_avp(f));
                        }
                        r.reply.send(ToConn::Answer {
                            msg,
                            hbh: r.hbh,
                            code,
                        });
                        return;
                    }
                }
            }
        }
        r.reply.send(match append {
            Some(features) => ToConn::AnswerWith {
                msg,
                features,
                hbh: r.hbh,
                code,
            },
            None => ToConn::Answer {
                msg,
                hbh: r.hbh,
                code,
            },
        });
        self.check_drained();
    }

    /// An answer from this connection's peer that fails
    /// [`Routing::scan_answer`]: not forwarded; the request is answered 3002
    /// with the defect and the peer in Error-Message.
    #[cold]
    #[inline(never)]
    fn malformed_answer(&mut self, r: Relayed, e: &DecodeError) {
        let host = self.peer.as_ref().map_or("", |(_, s)| s.host.as_str());
        if let Some((_, slot)) = &self.peer {
            slot.stats.answers_malformed.add(e.result_code());
        }
        if let Some(suppressed) = self.malformed_warn.allow(Instant::now()) {
            tracing::warn!(
                peer = %host,
                cause = %e,
                result_code = e.result_code(),
                suppressed,
                "malformed answer not forwarded, request answered 3002"
            );
        }
        let why = format!(
            "malformed answer from {host}: {e} ({})",
            e.result_code_name()
        );
        self.ctx
            .relay
            .relay(self.routes.router())
            .answer_locally_with(r, relay::UNABLE_TO_DELIVER, &why);
        self.check_drained();
    }
}
