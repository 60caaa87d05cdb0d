//! The relaying half of a connection (RFC 6733 §6.1): requests from this
//! connection's peer are checked with the codec's relay scan (§7.1
//! Result-Codes), loop-checked (§6.1.3), routed (§6.1.5-6.1.7) and
//! dispatched; requests routed to this peer are written with a
//! Route-Record and a fresh Hop-by-Hop Identifier (§6.1.9); answers from
//! this peer are matched, checked at least as strictly as requests
//! ([`Routing::scan_answer`]) and sent back (§6.2), TOO_BUSY retried
//! elsewhere.
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

use super::{Conn, Pending};
use crate::peer::table::{PeerSlot, Relayed, ToConn};
use crate::relay::{self, AnswerFate};
use crate::routing::{self, PeerId, PeerView};
use diameter::codec::answer::put_error_answer;
use diameter::codec::avp::empty_avp;
use diameter::codec::forward::{put_relayed_request, put_relayed_request_cut};
use diameter::codec::header::{Header, finish};
use diameter::codec::{DecodeError, Routing};
use diameter::dictionary::code;
use diameter::peer::fsm::State;
use diameter::peer::watchdog::Watchdog;

/// At most one warning per connection per this interval for malformed
/// answers; the metric counts every one.
const WARN_EVERY: Duration = Duration::from_secs(10);

/// Rate limit of a connection's malformed-answer warning.
#[derive(Debug, Default)]
pub(super) struct WarnLimit {
    next: Option<Instant>,
    suppressed: u64,
}

impl WarnLimit {
    /// `Some(number not logged since the last line)` when a line may be
    /// logged at `now`.
    fn allow(&mut self, now: Instant) -> Option<u64> {
        if self.next.is_some_and(|t| now < t) {
            self.suppressed += 1;
            return None;
        }
        self.next = Some(now + WARN_EVERY);
        Some(std::mem::take(&mut self.suppressed))
    }
}

impl Conn {
    /// A request routed to this connection's peer.
    pub(super) fn send_upstream(&mut self, mut r: Relayed) {
        let usable =
            self.fsm.state() == State::Open && self.watchdog.as_ref().is_some_and(Watchdog::usable);
        let Some((id, slot)) = self.peer.clone() else {
            return relay::answer_locally(
                &self.shared,
                r,
                relay::UNABLE_TO_DELIVER,
                "peer not open",
            );
        };
        if !usable {
            slot.outstanding.fetch_sub(1, Ordering::Relaxed);
            r.tried.push(id);
            self.rotate = self.rotate.wrapping_add(1);
            if let Err((r, _)) = relay::dispatch(&self.shared, r, None, self.rotate) {
                relay::answer_locally(
                    &self.shared,
                    r,
                    relay::UNABLE_TO_DELIVER,
                    "peer not available",
                );
            }
            return;
        }
        let hbh = self.alloc_hbh();
        let start = self.out.len();
        match r.cut {
            Some((a, b)) => put_relayed_request_cut(
                &mut self.out,
                &r.msg,
                (a as usize, b as usize),
                &r.from,
                hbh,
                r.retransmit,
            ),
            None => put_relayed_request(&mut self.out, &r.msg, &r.from, hbh, r.retransmit),
        }
        if r.doic.is_some()
            && let Some(ov) = &self.shared.overload
        {
            self.out.extend_from_slice(ov.features_avp());
            finish(&mut self.out, start);
        }
        slot.stats.requests_out.fetch_add(1, Ordering::Relaxed);
        let deadline = Instant::now() + self.shared.config.request_timeout();
        if let Some(old) = self.pending.insert(hbh, Pending { r, deadline }) {
            // 2^32 identifiers later: the old one is long overdue.
            self.upstream_done();
            relay::answer_locally(
                &self.shared,
                old.r,
                relay::UNABLE_TO_DELIVER,
                "hop-by-hop identifier reused",
            );
        }
    }

    /// Writes the agent's own answer to a request from this peer (cold
    /// path: the codec's error answer reads Session-Id and Proxy-Info from
    /// the request).
    pub(super) fn answer_error(&mut self, req: &[u8], code: u32, failed: Option<&[u8]>, why: &str) {
        let o = self.origin();
        let (h, r) = (o.0.to_owned(), o.1.to_owned());
        put_error_answer(&mut self.out, req, (&h, &r), code, failed, why);
        if let Some((_, slot)) = &self.peer {
            PeerSlot::count(&slot.stats.answers_out, code);
        }
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
        if !head.flags.is_proxiable() {
            return self.answer_error(
                &msg,
                relay::APPLICATION_UNSUPPORTED,
                None,
                "non-proxiable request for an agent without local applications",
            );
        }
        let own = &self.shared.config.node.origin_host;
        if routing::has_looped(own, routing.route_records()) {
            return self.answer_error(&msg, relay::LOOP_DETECTED, None, "route-record loop");
        }
        if routing
            .destination_host()
            .is_some_and(|h| h.eq_ignore_ascii_case(own.as_bytes()))
        {
            // §6.1.4: for local consumption; no local application (§7.1.3).
            return self.answer_error(
                &msg,
                relay::APPLICATION_UNSUPPORTED,
                None,
                "request for the agent itself, which has no local application",
            );
        }
        let Some(realm) = routing.destination_realm() else {
            let f = empty_avp(code::DESTINATION_REALM);
            return self.answer_error(
                &msg,
                relay::MISSING_AVP,
                Some(&f),
                "missing Destination-Realm",
            );
        };
        if self.closing_since.is_some() {
            // The agent is stopping (RFC 6733 §5.4): after its DPR nothing
            // new goes upstream; the request is answered at once.
            return self.answer_error(
                &msg,
                relay::UNABLE_TO_DELIVER,
                None,
                "agent is shutting down",
            );
        }
        if self.fsm.owes_dpa() {
            // The peer sent DPR and waits for its DPA: a request it still
            // sends is not relayed (it would hold the DPA back), but answered.
            return self.answer_error(&msg, relay::UNABLE_TO_DELIVER, None, "connection closing");
        }
        let realm = msg.slice_ref(realm);
        let dest_host = routing
            .destination_host()
            .map(|h| String::from_utf8_lossy(h).into_owned());
        // RFC 6733 §6.1.7 predictive loop avoidance: peers named in a
        // Route-Record, and the sender itself, are not candidates.
        let mut tried: Vec<PeerId> = routing
            .route_records()
            .filter_map(|rr| self.shared.table.by_host(&String::from_utf8_lossy(rr)))
            .collect();
        let (from, sender) = match &self.peer {
            Some((id, slot)) => (slot.host_arc(), Some(*id)),
            None => (Arc::from(""), None),
        };
        tried.extend(sender);
        let excluded = tried.len();
        // One step of the tie rotation per request, whoever routes it.
        self.rotate = self.rotate.wrapping_add(1);
        let decision = match &self.shared.overload {
            None => crate::overload::Decision::Relay,
            Some(ov) => {
                match crate::overload::idle_forward(ov, &msg, head.application_id, &routing, &from)
                {
                    Some(d) => d,
                    None => crate::overload::treat_request(
                        &self.shared,
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
                    PeerSlot::count(&slot.stats.answers_out, code);
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
        };
        let sent = match to {
            Some((to, pinned)) => relay::dispatch_to(&self.shared, r, to, pinned, self.rotate),
            None => relay::route(&self.shared, r, dest_host.as_deref(), self.rotate),
        };
        match sent {
            Ok(()) => {
                self.inflight_down += 1;
                self.shared.retry.note_request();
            }
            Err((r, e)) => {
                // Every candidate eliminated by §6.1.7 is 3002, not 3004.
                let code = if r.tried.len() == excluded {
                    relay::UNABLE_TO_DELIVER
                } else {
                    e.result_code()
                };
                let why = if code == relay::UNABLE_TO_DELIVER {
                    "no route"
                } else {
                    "every candidate refused"
                };
                self.answer_error(&r.msg, code, None, why);
            }
        }
    }

    /// An answer from this connection's peer to a request the agent relayed.
    pub(super) fn relay_answer(&mut self, msg: Bytes, head: Header) {
        let Some(p) = self.pending.remove(&head.hop_by_hop) else {
            tracing::trace!(hop_by_hop = head.hop_by_hop, "answer to no pending request");
            return;
        };
        self.upstream_done();
        let routing = match Routing::scan_answer(&msg) {
            Ok(r) => r,
            Err(e) => return self.malformed_answer(p, &e),
        };
        let rc = routing.result_code();
        let erc = routing.experimental_result_code().map(|(_, code)| code);
        let code = rc.or(erc).unwrap_or(0);
        let mut retry_ok = true;
        let mut rewritten = None;
        let mut append = None;
        if let Some(ov) = &self.shared.overload
            && let Some(tx) = p.r.doic.as_ref()
            && tx.client_features.is_some()
            && let Some((features, retry)) = crate::overload::idle_client_answer(ov, tx, &routing)
        {
            // A DOIC client and nothing to judge: the agent's features are
            // appended as the answer is written (`ToConn::AnswerWith`).
            (append, retry_ok) = (Some(features), retry);
        } else if let Some(ov) = &self.shared.overload
            && let Some(tx) = p.r.doic.as_ref()
        {
            let from_peer = self.peer.as_ref().map_or("", |(_, s)| s.host.as_str());
            let realm = std::str::from_utf8(&p.r.realm).unwrap_or("");
            // Never retried elsewhere after 5198 (retry_on_alternate).
            (rewritten, retry_ok) = crate::overload::treat_answer(
                ov,
                tx,
                (&p.r.from, realm),
                from_peer,
                &msg,
                &routing,
            );
        }
        let mut msg = rewritten.unwrap_or(msg);
        if let Some((id, slot)) = &self.peer {
            PeerSlot::count(&slot.stats.answers_in, code);
            let now = Instant::now().into_std();
            if rc == Some(relay::TOO_BUSY) {
                self.shared.retry.handle_too_busy(now, *id);
            }
            if retry_ok && relay::answer_fate(rc, erc, p.r.pinned) == AnswerFate::Retry {
                self.rotate = self.rotate.wrapping_add(1);
                match relay::retry_too_busy(&self.shared, p.r, *id, (now, self.rotate)) {
                    Ok(()) => return,
                    Err(r) => {
                        if let Some(f) = append
                            && let Some(ov) = &self.shared.overload
                        {
                            msg = crate::overload::with_avp(&msg, ov.answer_features_avp(f));
                        }
                        let _ = r.reply.send(ToConn::Answer {
                            msg,
                            hbh: r.hbh,
                            code,
                        });
                        return;
                    }
                }
            }
        }
        let _ = p.r.reply.send(match append {
            Some(features) => ToConn::AnswerWith {
                msg,
                features,
                hbh: p.r.hbh,
                code,
            },
            None => ToConn::Answer {
                msg,
                hbh: p.r.hbh,
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
    fn malformed_answer(&mut self, p: Pending, e: &DecodeError) {
        let host = self.peer.as_ref().map_or("", |(_, s)| s.host.as_str());
        if let Some((_, slot)) = &self.peer {
            PeerSlot::count(&slot.stats.answers_malformed, e.result_code());
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
        relay::answer_locally(&self.shared, p.r, relay::UNABLE_TO_DELIVER, &why);
        self.check_drained();
    }
}
