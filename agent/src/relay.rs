//! RFC 6733 §6.1 relay duties that span connections: dispatching a request
//! to the next hop chosen by the [`crate::routing::Router`], failover of
//! pending requests to an alternate peer with the T flag (§5.5.4), TOO_BUSY
//! retries, and the answers the agent gives itself when a request cannot be
//! delivered (3002), every candidate refused it (3004) or it looped (3005).
//! Experimental-Result 5198 (DIAMETER_OVERLOAD_RETRY_NOT_ALLOWED_TO_ANY) is
//! never retried elsewhere. Retries after 3004 and failovers are governed
//! by the retry budget ([`budget`]).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use bytes::{Bytes, BytesMut};

use crate::agent::Shared;
use crate::peer::table::{PeerSlot, Relayed, ToConn};
use crate::routing::{PeerId, RouteError};
use diameter::codec::answer::put_error_answer;

pub mod budget;

/// The Result-Codes the relay answers with itself (RFC 6733 §7.1), and
/// the vendor Experimental-Result-Code 5198, from the dictionary.
pub use diameter::dictionary::result::{
    APPLICATION_UNSUPPORTED, LOOP_DETECTED, MISSING_AVP, OVERLOAD_RETRY_NOT_ALLOWED_TO_ANY,
    TOO_BUSY, UNABLE_TO_DELIVER,
};

/// Sends `r` to the next hop the router picks, skipping `r.tried`.
/// `destination_host` is consulted only on the first attempt. A request
/// overload control treated before (a failover, a retry after 3004, a chosen
/// connection gone) is treated again for its new next hop, and may be
/// answered by the agent instead (through `r.reply`; `Ok` all the same).
///
/// # Errors
/// The request back with the reason it could not be dispatched.
#[expect(
    clippy::result_large_err,
    reason = "the request comes back by value on the cold path; boxing would allocate on it"
)]
pub(crate) fn dispatch(
    shared: &Shared,
    mut r: Relayed,
    destination_host: Option<&str>,
    rotate: usize,
) -> Result<(), (Relayed, RouteError)> {
    // A request overload control treated is treated again for its new next
    // hop (RFC 8581 §5): it may be throttled there, or sent elsewhere.
    if let Some(ov) = &shared.overload
        && r.doic.is_some()
    {
        match crate::overload::retreat(shared, ov, &r, destination_host, rotate) {
            crate::overload::Decision::Forward {
                peer,
                slot,
                pinned,
                msg,
                cut,
                tx,
            } => {
                if let Some(m) = msg {
                    // The client's features are already out of it.
                    r.msg = m;
                    r.cut = None;
                } else {
                    // Left out as it is written (the same bytes as before).
                    r.cut = cut;
                }
                // The client's features stay those first recorded.
                if let Some(prev) = r.doic.as_mut() {
                    prev.app_id = tx.app_id;
                }
                return dispatch_to(shared, r, (peer, slot), pinned, rotate);
            }
            crate::overload::Decision::Answer { msg, code } => {
                tracing::trace!(code, "doic throttled a rerouted request");
                let _ = r.reply.send(ToConn::Answer {
                    msg,
                    hbh: r.hbh,
                    code,
                });
                return Ok(());
            }
            crate::overload::Decision::Relay | crate::overload::Decision::Plain { .. } => {}
        }
    }
    route(shared, r, destination_host, rotate)
}

/// Sends `r` to the next hop the router picks, skipping `r.tried`, as the
/// relay does without overload control ([`dispatch`] without the second
/// treatment). `destination_host` is consulted only on the first attempt.
///
/// # Errors
/// The request back with the reason it could not be dispatched.
#[expect(
    clippy::result_large_err,
    reason = "the request comes back by value on the cold path; boxing would allocate on it"
)]
pub(crate) fn route(
    shared: &Shared,
    mut r: Relayed,
    destination_host: Option<&str>,
    rotate: usize,
) -> Result<(), (Relayed, RouteError)> {
    let realm_bytes = r.realm.clone();
    let lossy;
    let realm = match std::str::from_utf8(&realm_bytes) {
        Ok(s) => s,
        Err(_) => {
            lossy = String::from_utf8_lossy(&realm_bytes).into_owned();
            lossy.as_str()
        }
    };
    let mut host = destination_host;
    loop {
        let choice = match shared
            .router
            .choose(&shared.table, host, realm, r.app, &r.tried, rotate)
        {
            Ok(c) => c,
            Err(e) => return Err((r, e)),
        };
        host = None;
        let Some(slot) = shared.table.get(choice.peer) else {
            return Err((r, RouteError::NoRoute));
        };
        let Some(tx) = slot.sender() else {
            r.tried.push(choice.peer);
            if choice.pinned {
                return Err((r, RouteError::NoRoute));
            }
            continue;
        };
        r.pinned = choice.pinned;
        slot.outstanding.fetch_add(1, Ordering::Relaxed);
        match tx.send(ToConn::Request(r)) {
            Ok(()) => return Ok(()),
            Err(e) => {
                slot.outstanding.fetch_sub(1, Ordering::Relaxed);
                let ToConn::Request(back) = e.0 else {
                    unreachable!("sent a request")
                };
                r = back;
                r.tried.push(choice.peer);
                if choice.pinned {
                    return Err((r, RouteError::NoRoute));
                }
            }
        }
    }
}

/// Sends `r` to `peer`, the next hop overload control chose among the
/// router's candidates (RFC 8581 §5: possibly a diversion), with its slot
/// when the caller has it. When that peer cannot take it any more, the
/// router picks another one.
///
/// # Errors
/// The request back with the reason it could not be dispatched.
#[expect(
    clippy::result_large_err,
    reason = "the request comes back by value on the cold path; boxing would allocate on it"
)]
pub(crate) fn dispatch_to(
    shared: &Shared,
    mut r: Relayed,
    (peer, slot): (PeerId, Option<Arc<PeerSlot>>),
    pinned: bool,
    rotate: usize,
) -> Result<(), (Relayed, RouteError)> {
    if let Some(slot) = slot.or_else(|| shared.table.get(peer))
        && let Some(tx) = slot.sender()
    {
        r.pinned = pinned;
        slot.outstanding.fetch_add(1, Ordering::Relaxed);
        match tx.send(ToConn::Request(r)) {
            Ok(()) => return Ok(()),
            Err(e) => {
                slot.outstanding.fetch_sub(1, Ordering::Relaxed);
                let ToConn::Request(back) = e.0 else {
                    unreachable!("sent a request")
                };
                r = back;
            }
        }
    }
    if pinned {
        return Err((r, RouteError::NoRoute));
    }
    r.tried.push(peer);
    dispatch(shared, r, None, rotate)
}

/// Builds the agent's own answer to `msg` with `result_code`.
#[must_use]
pub(crate) fn local_answer(shared: &Shared, msg: &[u8], result_code: u32, why: &str) -> Bytes {
    let mut out = BytesMut::with_capacity(256);
    put_error_answer(
        &mut out,
        msg,
        (
            &shared.config.node.origin_host,
            &shared.config.node.origin_realm,
        ),
        result_code,
        None,
        why,
    );
    out.freeze()
}

/// Answers a relayed request on behalf of the agent, through its reply
/// channel.
pub(crate) fn answer_locally(shared: &Shared, r: Relayed, result_code: u32, why: &str) {
    let msg = local_answer(shared, &r.msg, result_code, why);
    let _ = r.reply.send(ToConn::Answer {
        msg,
        hbh: r.hbh,
        code: result_code,
    });
}

/// A request pending at `from` must move (its peer went SUSPECT or DOWN,
/// RFC 3539 Failover()): pinned requests are answered 3002, others are
/// re-sent to an alternate peer with the T flag, or answered 3002 when
/// there is none. Never refused by the retry budget, but counted in it
/// ([`budget::RetryBudget::note_failover`]).
pub(crate) fn fail_over(
    shared: &Shared,
    from: PeerId,
    slot: &Arc<PeerSlot>,
    mut r: Relayed,
    (now, rotate): (Instant, usize),
) {
    if r.pinned {
        answer_locally(shared, r, UNABLE_TO_DELIVER, "destination host unavailable");
        return;
    }
    slot.stats.failovers.fetch_add(1, Ordering::Relaxed);
    shared.retry.note_failover(now);
    if !r.tried.contains(&from) {
        r.tried.push(from);
    }
    r.retransmit = true;
    if let Err((r, _)) = dispatch(shared, r, None, rotate) {
        answer_locally(shared, r, UNABLE_TO_DELIVER, "no alternate peer");
    }
}

/// A realm-routed request `r` was answered 3004 TOO_BUSY by `from` at
/// `now` (RFC 7683 §8): it goes to the next candidate when the retry budget
/// allows it, and never to a peer that answered 3004 lately. With DOIC,
/// [`dispatch`] treats the retry again for its new next hop (RFC 8581 §5):
/// an OCS in force there abates retries as it abates every request.
///
/// # Errors
/// The request back when it is not retried: its 3004 goes to the client as
/// it came.
#[expect(
    clippy::result_large_err,
    reason = "the request comes back by value on the cold path; boxing would allocate on it"
)]
pub(crate) fn retry_too_busy(
    shared: &Shared,
    mut r: Relayed,
    from: PeerId,
    (now, rotate): (Instant, usize),
) -> Result<(), Relayed> {
    let gate = &shared.retry;
    r.tried.push(from);
    if gate.try_retry(now).is_err() {
        gate.stats.refused_budget.fetch_add(1, Ordering::Relaxed);
        tracing::trace!(hop_by_hop = r.hbh, "retry budget spent, 3004 forwarded");
        return Err(r);
    }
    let excluded = gate.overloaded_into(now, &mut r.tried);
    match dispatch(shared, r, None, rotate) {
        Ok(()) => {
            gate.stats.too_busy.fetch_add(1, Ordering::Relaxed);
            Ok(())
        }
        Err((r, _)) => {
            gate.refund(now);
            let why = if excluded > 0 {
                &gate.stats.refused_overloaded
            } else {
                &gate.stats.refused_no_alternate
            };
            why.fetch_add(1, Ordering::Relaxed);
            Err(r)
        }
    }
}

/// What to do with an answer received from upstream.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum AnswerFate {
    /// Pass it on to the downstream peer.
    Forward,
    /// Try the next candidate (the upstream peer answered 3004 TOO_BUSY and
    /// the request is not pinned).
    Retry,
}

/// Decides an answer's fate from its Result-Code, Experimental-Result-Code
/// and whether its request is pinned. 5198 is always forwarded.
#[must_use]
pub(crate) fn answer_fate(
    result_code: Option<u32>,
    experimental: Option<u32>,
    pinned: bool,
) -> AnswerFate {
    if experimental == Some(OVERLOAD_RETRY_NOT_ALLOWED_TO_ANY) || pinned {
        return AnswerFate::Forward;
    }
    if result_code == Some(TOO_BUSY) {
        AnswerFate::Retry
    } else {
        AnswerFate::Forward
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn too_busy_is_retried_unless_pinned() {
        assert_eq!(answer_fate(Some(3004), None, false), AnswerFate::Retry);
        assert_eq!(answer_fate(Some(3004), None, true), AnswerFate::Forward);
        assert_eq!(answer_fate(Some(2001), None, false), AnswerFate::Forward);
    }

    #[test]
    fn retry_not_allowed_to_any_is_never_retried() {
        assert_eq!(
            answer_fate(Some(3004), Some(5198), false),
            AnswerFate::Forward
        );
        assert_eq!(answer_fate(None, Some(5198), false), AnswerFate::Forward);
    }
}
