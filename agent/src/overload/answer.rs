//! The answer side of DOIC in the relay: the idle fast path
//! ([`idle_client_answer`], the core's [`doic::Doic::answer_idle`]) and the
//! full handling ([`treat_answer`], [`doic::Doic::on_answer`]: reports of
//! trusted peers judged and applied, RFC 7683 §5.2.1 and §10; forwarded to
//! DOIC clients or stripped, §5.1.2, RFC 8581 §6.2.5), the answer rewritten
//! for the client.

use bytes::{Bytes, BytesMut};

use super::Overload;
use super::cores::with_core;
use diameter::codec::Header;
use diameter::codec::header::finish;
use diameter::codec::relay::{MessageBuf, Routing};
use doic::avps::{DoicAvps, apply_answer, text};
use doic::treatment::retry_allowed;
use doic::{AnswerFeatures, AnswerView, IdleAnswer, TxState};

/// The idle answer to a DOIC client: when `tx` is a DOIC client's, the
/// answer carries no OC-Supported-Features and no OC-OLR, and this worker's
/// core says so ([`doic::Doic::answer_idle`]: idle, no peer report of the
/// agent's own), nothing is judged or advanced and the answer only gains
/// the agent's OC-Supported-Features (RFC 7683 §5.1.2, RFC 8581 §6.1.2):
/// which one ([`Overload::answer_features_avp`], encoded once), and whether
/// the request may be retried elsewhere (not after 5198;
/// `experimental_result_code` as the relay read it of `routing`). `None`:
/// [`treat_answer`] is needed. Out of line: the path without client
/// features only tests `tx.client_features` before calling it.
#[inline(never)]
pub(crate) fn idle_client_answer(
    ov: &Overload,
    tx: &TxState,
    routing: &Routing<'_>,
    experimental_result_code: Option<u32>,
) -> Option<(AnswerFeatures, bool)> {
    tx.client_features?;
    if routing.has_doic_avps() {
        return None;
    }
    let Some(IdleAnswer::Add(which)) = with_core(ov, |core, _| core.answer_idle(tx))? else {
        return None;
    };
    Some((which, retry_allowed(experimental_result_code)))
}

/// The idle answer to a client without OC-Supported-Features: when `tx` is
/// such a client's, the answer carries no DOIC AVP and this worker's core
/// is idle, it goes back unchanged (RFC 7683 §5.1.2: no DOIC AVP to judge
/// or strip, none to add, no state to advance); `Some` whether the request
/// may be retried elsewhere (only 5198 forbids it, seed 004;
/// `experimental_result_code` as the relay read it). `None`:
/// [`treat_answer`] is needed. Asked before the relay builds
/// [`treat_answer`]'s inputs.
#[inline]
pub(crate) fn idle_answer(
    ov: &Overload,
    tx: &TxState,
    routing: &Routing<'_>,
    experimental_result_code: Option<u32>,
) -> Option<bool> {
    (tx.client_features.is_none()
        && !routing.has_doic_avps()
        && with_core(ov, |core, _| core.answer_idle(tx))
            .is_none_or(|a| a == Some(IdleAnswer::Unchanged)))
    .then(|| retry_allowed(experimental_result_code))
}

/// `msg` with `avp` (whole, padded) appended and its Message Length set: the
/// bytes [`MessageBuf::append_avp`] gives for the same AVP, in one copy.
#[must_use]
pub(crate) fn with_avp(msg: &[u8], avp: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(msg.len() + avp.len());
    out.extend_from_slice(msg);
    out.extend_from_slice(avp);
    finish(&mut out, 0);
    out.freeze()
}

/// Handles an answer from `from_peer` to a request from `client` for
/// `dest_realm` treated with `tx`: reports judged and applied, the answer
/// rewritten for the client. Returns the answer to send downstream and
/// whether the request may be retried on an alternate path. The relay asks
/// [`idle_client_answer`] first for a DOIC client's transaction,
/// [`idle_answer`] for any other.
pub(crate) fn treat_answer(
    ov: &Overload,
    tx: &TxState,
    (client, dest_realm): (&str, &str),
    from_peer: &str,
    msg: &Bytes,
    routing: &Routing<'_>,
) -> (Option<Bytes>, bool) {
    let erc = routing.experimental_result_code().map(|(_, c)| c);
    if let Some(retry) = idle_answer(ov, tx, routing, erc) {
        return (None, retry);
    }
    let tx = tx.pending(client, dest_realm, from_peer);
    let head = Header::read(msg);
    let (doic, malformed) = match DoicAvps::read(routing) {
        Ok(d) => (d, false),
        Err(_) => (DoicAvps::default(), true),
    };
    let ans = AnswerView {
        app_id: head.application_id,
        origin_host: routing.origin_host().and_then(text).unwrap_or(""),
        origin_realm: routing.origin_realm().and_then(text).unwrap_or(""),
        result_code: routing.result_code(),
        experimental_result_code: erc,
        features: doic.features.as_ref(),
        olrs: &doic.olrs,
    };
    let now = ov.clock.now();
    let Some(mut act) = with_core(ov, |core, worker| {
        let mut act = core.on_answer(now, &tx, from_peer, &ans);
        ov.inboxes
            .publish(worker, std::mem::take(&mut act.replicate));
        act
    }) else {
        return (None, true);
    };
    // Undecodable DOIC AVPs never go onward (RFC 7683 §10.4 spirit: only
    // what the agent understood and accepted is relayed).
    act.strip |= malformed;
    let retry = act.retry_on_alternate;
    if !act.strip && act.add_features.is_none() && act.forward_reports.is_empty() {
        return (None, retry);
    }
    let Ok(mut buf) = MessageBuf::new(BytesMut::from(&msg[..])) else {
        return (None, retry);
    };
    match apply_answer(&mut buf, &act) {
        Ok(()) => (Some(buf.freeze()), retry),
        Err(_) => (None, retry),
    }
}
