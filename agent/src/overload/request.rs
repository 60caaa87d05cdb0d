//! The request side of DOIC in the relay: the idle fast path
//! ([`idle_forward`], the core's [`Doic::treat_idle`]), the full treatment
//! ([`treat_request`], [`Doic::treat`] in the order of RFC 8581 §5), the
//! treatment again before another next hop ([`retreat`]) and the agent's
//! answer to a throttled request ([`throttle_answer`], RFC 7683 §5.2.2, §8).
//!
//! Either way a received OC-Supported-Features is left out of the request
//! as it is written upstream ([`features_cut`], `Relayed::cut`: no copy)
//! and the agent's own follows the Route-Record (RFC 7683 §5.1.3, RFC 8581
//! §6.1.1).

use std::cell::RefCell;
use std::sync::Arc;
use std::time::Instant;

use bytes::{Bytes, BytesMut};

use super::cores::with_core;
use super::{MAX_CANDIDATES, Overload, RETRY_NOT_ALLOWED_VENDOR};
use crate::peer::table::PeerTable;
use crate::routing::{PeerId, Router};
use diameter::codec::answer::{Outcome, put_local_answer};
use diameter::codec::doic::FeaturesRef;
use diameter::codec::relay::{MessageBuf, Routing};
use diameter::codec::{Header, OcOlr};
use diameter::dictionary::code;
use doic::treatment::ThrottleAnswer;
use doic::{
    Candidate, Cause, ClientMemo, Doic, OcSupportedFeatures, Offer, ReportType, RequestView,
    Treatment,
};

pub(crate) use crate::relay::Decision;

/// What the treatment reads of the relay: the router and the peer table
/// (the candidates), the agent's identity (its throttle answers).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Route<'a> {
    /// The routing table.
    pub router: &'a Router,
    /// The peer table.
    pub table: &'a PeerTable,
    /// Origin-Host and Origin-Realm of the agent.
    pub origin: (&'a str, &'a str),
}

/// The request inputs the relay already decoded.
#[derive(Debug)]
pub(crate) struct RequestIn<'a> {
    /// The request bytes.
    pub msg: &'a Bytes,
    /// Its header.
    pub head: Header,
    /// Its relay scan.
    pub routing: &'a Routing<'a>,
    /// The downstream peer's identity.
    pub from: &'a str,
    /// Destination-Realm.
    pub realm: &'a str,
    /// Destination-Host.
    pub dest_host: Option<&'a str>,
    /// Peers that are not candidates (§6.1.7).
    pub excluded: &'a [PeerId],
    /// Rotation for ties.
    pub rotate: usize,
    /// The client's OC-Supported-Features as a first treatment recorded
    /// them (the request then no longer carries them).
    pub prior: Option<&'a OcSupportedFeatures>,
}

/// How the received OC-Supported-Features leave a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FeaturesCut {
    /// It carries none.
    None,
    /// One, at these bytes: left out as the request is written.
    One(u32, u32),
    /// Several: the request is copied without them.
    Several,
}

/// Where the request's OC-Supported-Features are: a second one is counted
/// by the relay scan ([`Routing::oc_supported_features_repeated`]), so the
/// rest of the request is not walked again.
pub(crate) fn features_cut(routing: &Routing<'_>) -> FeaturesCut {
    routing
        .oc_supported_features_span()
        .map_or(FeaturesCut::None, |span| cut_of(routing, span))
}

/// [`features_cut`] of a request whose first OC-Supported-Features is at
/// `offset` with bytes `avp`, already taken from `routing`.
fn cut_of(routing: &Routing<'_>, (offset, avp): (usize, &[u8])) -> FeaturesCut {
    if routing.oc_supported_features_repeated() {
        return FeaturesCut::Several;
    }
    let end = offset + avp.len();
    match (u32::try_from(offset), u32::try_from(end)) {
        (Ok(a), Ok(b)) => FeaturesCut::One(a, b),
        _ => FeaturesCut::Several,
    }
}

/// The common case, decided by the core's idle fast path
/// ([`Doic::treat_idle`]) without its full treatment: no overload state on
/// this worker. Every request then goes to the router's first choice, so
/// the relay routes it as without DOIC; counted as forwarded. A DOIC
/// client's request (RFC 7683 §5.1.1) has its OC-Supported-Features read in
/// place ([`FeaturesRef`], no allocation) into the core's [`Offer`], or
/// taken from the connection's [`Offers`] when it repeats the one read
/// before, and cut out of the forwarded request as it is written. `None`:
/// the full treatment is needed (overload state, several or malformed
/// OC-Supported-Features).
pub(crate) fn idle_forward(
    ov: &Overload,
    app_id: u32,
    routing: &Routing<'_>,
    (from, offers): (&Arc<str>, &mut Offers),
) -> Option<Decision> {
    let Some(span) = routing.oc_supported_features_span() else {
        let tx = with_core(ov, |core, _| core.treat_idle(app_id, from, None))??;
        return Some(Decision::Plain { tx, cut: None });
    };
    idle_forward_client(ov, app_id, routing, span, (from, offers))
}

/// [`idle_forward`] for a DOIC client's request (`span`: where its
/// OC-Supported-Features are, [`Routing::oc_supported_features_span`]), out
/// of line so that the path without them stays as small as it was.
#[inline(never)]
fn idle_forward_client(
    ov: &Overload,
    app_id: u32,
    routing: &Routing<'_>,
    span: (usize, &[u8]),
    (from, offers): (&Arc<str>, &mut Offers),
) -> Option<Decision> {
    let FeaturesCut::One(start, end) = cut_of(routing, span) else {
        return None;
    };
    let offer = offers.read(span.1, routing, from)?;
    let memo = &mut offers.memo;
    let tx = with_core(ov, |core, _| {
        core.treat_idle_remembered(app_id, from, offer, memo)
    })??;
    Some(Decision::Plain {
        tx,
        cut: Some((start, end)),
    })
}

/// The last OC-Supported-Features a connection's client sent, as the idle
/// path read it: a client announces the same AVP in every request (RFC 7683
/// §5.1.1), so a request whose AVP has the same bytes, from the same peer,
/// gets the same [`Offer`] without reading it again. The offer is made of
/// those bytes and the sender alone: the client's policy and the agent's
/// `[doic]` are the core's, applied to it per request
/// ([`Doic::treat_idle_remembered`]: the state the core made of the offer
/// is kept here too, [`ClientMemo`], and taken again only under the same
/// configuration of the same core), so a reload or a change of trust
/// takes effect at once, and different features (other bytes) are read
/// anew.
#[derive(Debug, Default)]
pub(crate) struct Offers {
    /// The AVP (header, data, padding) and the sender it was read for
    /// (the connection's peer: the same `Arc`, compared by address first).
    avp: Vec<u8>,
    from: Option<Arc<str>>,
    offer: Option<Offer>,
    /// The core's state of the client for `offer`, dropped with it.
    memo: Option<ClientMemo>,
}

/// Longest OC-Supported-Features kept for reuse: a feature vector,
/// OC-Peer-Algo and a SourceID of ordinary length fit; a longer AVP is read
/// per request.
const OFFER_AVP_MAX: usize = 256;

impl Offers {
    /// The [`Offer`] of `routing`'s OC-Supported-Features (`avp`: its
    /// bytes, [`Routing::oc_supported_features_span`]) received from
    /// `from`: the one read before when the AVP's bytes and the sender are
    /// the same, else read in place ([`FeaturesRef::from_raw`]). `None` for
    /// a malformed AVP (never kept).
    pub(crate) fn read(
        &mut self,
        avp: &[u8],
        routing: &Routing<'_>,
        from: &Arc<str>,
    ) -> Option<Offer> {
        if let Some(o) = self.offer
            && self.avp == avp
            && self.from.as_ref().is_some_and(|f| same_peer(f, from))
        {
            return Some(o);
        }
        self.offer = None;
        self.memo = None;
        let raw = routing.oc_supported_features()?;
        let offer = Offer::read(&FeaturesRef::from_raw(&raw).ok()?, from);
        if avp.len() <= OFFER_AVP_MAX {
            self.avp.clear();
            self.avp.extend_from_slice(avp);
            self.from = Some(from.clone());
            self.offer = Some(offer);
        }
        Some(offer)
    }
}

/// Whether `a` and `b` name the same peer: the same `Arc` (a connection's
/// peer, every request), else the same identity.
fn same_peer(a: &Arc<str>, b: &Arc<str>) -> bool {
    Arc::ptr_eq(a, b) || **a == **b
}

/// Treats one request (RFC 8581 §5 order) and applies the decision to its
/// bytes.
pub(crate) fn treat_request(route: &Route<'_>, ov: &Overload, r: &RequestIn<'_>) -> Decision {
    // Candidates in the router's order of preference (fixed arrays: no
    // allocation on the per-request path).
    let Ok((choices, found)) = route.router.choose_many::<MAX_CANDIDATES>(
        route.table,
        r.dest_host,
        r.realm,
        r.head.application_id,
        r.excluded,
        r.rotate,
    ) else {
        return Decision::Relay;
    };
    let mut ids = [(PeerId::default(), false); MAX_CANDIDATES];
    let mut slots: [Option<std::sync::Arc<crate::peer::table::PeerSlot>>; MAX_CANDIDATES] =
        Default::default();
    let mut n = 0;
    for c in &choices[..found] {
        let Some(slot) = route.table.get(c.peer) else {
            break;
        };
        ids[n] = (c.peer, c.pinned);
        slots[n] = Some(slot);
        n += 1;
    }
    if n == 0 {
        return Decision::Relay;
    }
    let mut candidates = [Candidate {
        peer: "",
        server: None,
    }; MAX_CANDIDATES];
    for (c, s) in candidates.iter_mut().zip(slots.iter().flatten()) {
        *c = Candidate {
            peer: &s.host,
            server: Some(&s.host),
        };
    }
    let candidates = &candidates[..n];
    let received = r.routing.oc_supported_features();
    // A malformed OC-Supported-Features: the client is treated as not
    // supporting DOIC; the AVP is replaced on the way up.
    let features = match r.prior {
        Some(f) => Some(f.clone()),
        None => received
            .as_ref()
            .and_then(|a| OcSupportedFeatures::from_raw(a).ok()),
    };
    let view = RequestView {
        app_id: r.head.application_id,
        command_code: r.head.command_code,
        from_peer: r.from,
        dest_realm: r.realm,
        dest_host: r.dest_host,
        features: features.as_ref(),
        drmp: r.routing.drmp().and_then(|d| u8::try_from(d).ok()),
    };
    let now = ov.clock.now();
    let treat = |core: &mut Doic, w| treat_shared(ov, (core, w), now, &view, candidates);
    let out = with_core(ov, |core, w| match treat(core, w) {
        // The core's `request_features` are constant: encoded once in
        // `Overload::features_avp`.
        Treatment::Forward { index, tx, .. } | Treatment::Divert { index, tx, .. } => {
            // RFC 7683 §5.1.3, RFC 8581 §6.1.1: one OC-Supported-Features,
            // the agent's; a received one is left out as the request is
            // written, several are removed here (the only copy).
            let (msg, cut) = match features_cut(r.routing) {
                FeaturesCut::None => (None, None),
                FeaturesCut::One(a, b) => (None, Some((a, b))),
                FeaturesCut::Several => {
                    let Ok(mut buf) = MessageBuf::new(BytesMut::from(&r.msg[..])) else {
                        return Decision::Relay;
                    };
                    if buf.remove_avps(is_features).is_err() {
                        return Decision::Relay;
                    }
                    (Some(buf.freeze()), None)
                }
            };
            let (peer, pinned) = ids[index];
            tracing::trace!(peer = %candidates[index].peer, diverted = index != 0, "doic forward");
            Decision::Forward {
                peer,
                slot: None,
                pinned,
                msg,
                cut,
                tx: tx.to_state(),
            }
        }
        Treatment::Throttle { result, cause } => {
            tracing::trace!(?cause, code = result.code(), "doic throttle");
            if cause == Cause::Destination(ReportType::Host)
                && let Some(first) = &slots[0]
            {
                // The first choice's host OCS threw it: what its protection
                // counts as offered and throttled (docs/protect.md).
                first.sensed.record_throttled();
            }
            // The report made on the server's behalf (RFC 7683 §5.1.3) is
            // not in the agent's own answer: its Origin-Host is the agent,
            // and a reacting node would hold the report for the agent
            // itself (§5.2.1.3). Each DOIC client is held to its own share,
            // so one within it has its requests relayed and receives the
            // report in the server's answers.
            let act = core.local_answer(now, &view);
            let msg = throttle_answer(route, r.msg, result, &act);
            Decision::Answer {
                msg,
                code: result.code(),
            }
        }
        Treatment::NoRoute => Decision::Relay,
    });
    match out {
        Some(Decision::Forward {
            peer,
            pinned,
            msg,
            cut,
            tx,
            ..
        }) => {
            // The chosen candidate's slot goes with the decision.
            let slot = ids[..n]
                .iter()
                .position(|(id, _)| *id == peer)
                .and_then(|i| slots[i].take());
            Decision::Forward {
                peer,
                slot,
                pinned,
                msg,
                cut,
                tx,
            }
        }
        Some(d) => d,
        None => Decision::Relay,
    }
}

/// [`Doic::treat`] on worker `w`'s core, then what the core made for the
/// other workers goes to their inboxes: a new version of the agent's own
/// realm report (nothing, and no allocation, on almost every request).
fn treat_shared<'a>(
    ov: &Overload,
    (core, w): (&mut Doic, usize),
    now: Instant,
    view: &RequestView<'a>,
    candidates: &[Candidate<'a>],
) -> Treatment<'a> {
    let t = core.treat(now, view, candidates);
    ov.inboxes.publish(w, core.take_replicas());
    t
}

/// Treats a request again before it goes to another next hop: a failover,
/// a retry after 3004, or a chosen connection that went away. RFC 8581 §5
/// applies to every forwarding decision, so the alternate's peer OCS and the
/// destination's host/realm OCS are consulted again, with `r.tried` out of
/// the candidates (RFC 6733 §6.1.7). The client's DOIC support is the one the
/// first treatment recorded.
pub(crate) fn retreat(
    route: &Route<'_>,
    ov: &Overload,
    r: &crate::peer::table::Relayed,
    dest_host: Option<&str>,
    rotate: usize,
) -> Decision {
    let Ok(routing) = Routing::scan(&r.msg) else {
        return Decision::Relay;
    };
    let Ok(realm) = std::str::from_utf8(&r.realm) else {
        return Decision::Relay;
    };
    // The client's features as first recorded: its vector, and its own
    // identity as SourceID when it supports peer reports (RFC 8581 §6.1.2).
    let prior = r.doic.and_then(|t| {
        t.client_features.map(|v| OcSupportedFeatures {
            source_id: t.client_peer_report.then(|| r.from.to_string()),
            ..doic::treatment::features_of(v.get())
        })
    });
    treat_request(
        route,
        ov,
        &RequestIn {
            msg: &r.msg,
            head: Header::read(&r.msg),
            routing: &routing,
            from: &r.from,
            realm,
            dest_host,
            excluded: &r.tried,
            rotate,
            prior: prior.as_ref(),
        },
    )
}

fn is_features(a: &diameter::codec::avp::RawAvp<'_>) -> bool {
    a.vendor_id.is_none() && a.code == code::OC_SUPPORTED_FEATURES
}

/// The agent's answer to a throttled request: Result-Code 3004 or 5012, or
/// Experimental-Result 5198 without Result-Code (RFC 6733 §7.6), with the
/// DOIC AVPs `act` gives (RFC 7683 §5.1.2: none to a non-DOIC client),
/// written straight into its buffer (under overload the agent answers as
/// many as arrive).
pub(super) fn throttle_answer(
    route: &Route<'_>,
    req: &[u8],
    result: ThrottleAnswer,
    act: &doic::AnswerActions,
) -> Bytes {
    let mut out = BytesMut::with_capacity(256);
    put_throttle_answer(&mut out, route, req, result, act);
    out.freeze()
}

/// [`throttle_answer`] appended to `out` (a connection's output buffer).
pub(super) fn put_throttle_answer(
    out: &mut BytesMut,
    route: &Route<'_>,
    req: &[u8],
    result: ThrottleAnswer,
    act: &doic::AnswerActions,
) {
    let outcome = if result.is_experimental() {
        Outcome::Experimental {
            vendor_id: RETRY_NOT_ALLOWED_VENDOR,
            code: result.code(),
        }
    } else {
        Outcome::Result(result.code())
    };
    put_local_answer(out, req, route.origin, outcome, |out| {
        put_doic_avps(out, act);
    });
}

thread_local! {
    /// The DOIC AVPs of this thread's last throttle answer that had any,
    /// encoded.
    static THROTTLE_AVPS: RefCell<EncodedAvps> = RefCell::new(EncodedAvps::default());
}

/// DOIC AVPs and their encoding.
#[derive(Default)]
struct EncodedAvps {
    features: Option<OcSupportedFeatures>,
    reports: Vec<OcOlr>,
    bytes: Vec<u8>,
}

/// Appends `act`'s OC-Supported-Features and OC-OLRs. Under overload one
/// worker answers thousands of requests a second with the same ones (the
/// agent's features, the report in force), so they are encoded when they
/// change and copied otherwise: encoding each answer's anew was about a
/// sixth of what a 3004 cost the agent (docs/own-overload.md).
fn put_doic_avps(out: &mut BytesMut, act: &doic::AnswerActions) {
    if act.add_features.is_none() && act.forward_reports.is_empty() {
        return;
    }
    THROTTLE_AVPS.with(|cache| {
        let mut c = cache.borrow_mut();
        if c.features != act.add_features || c.reports != act.forward_reports {
            let mut bytes = std::mem::take(&mut c.bytes);
            bytes.clear();
            let avps = act.add_features.iter().map(OcSupportedFeatures::to_avp);
            for a in avps.chain(act.forward_reports.iter().map(OcOlr::to_avp)) {
                if let Err(e) = a.encode(&mut bytes) {
                    tracing::error!(cause = %e, "cannot encode a throttle answer's DOIC AVP");
                }
            }
            *c = EncodedAvps {
                features: act.add_features.clone(),
                reports: act.forward_reports.clone(),
                bytes,
            };
        }
        out.extend_from_slice(&c.bytes);
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use diameter::codec::avp::AvpIter;

    fn olr(sequence: u64, percent: u32) -> OcOlr {
        let mut o = OcOlr::new(sequence, ReportType::Peer);
        o.reduction_percentage = Some(percent);
        o.source_id = Some("agent.example.net".into());
        o
    }

    fn act(reports: Vec<OcOlr>) -> doic::AnswerActions {
        doic::AnswerActions {
            add_features: Some(OcSupportedFeatures {
                feature_vector: Some(1),
                source_id: Some("agent.example.net".into()),
                ..OcSupportedFeatures::default()
            }),
            forward_reports: reports,
            ..doic::AnswerActions::default()
        }
    }

    /// What `put_doic_avps` appends, and the OC-OLRs in it.
    fn put(a: &doic::AnswerActions) -> (Vec<u8>, Vec<OcOlr>) {
        let mut out = BytesMut::new();
        put_doic_avps(&mut out, a);
        let olrs = AvpIter::new(&out)
            .map(Result::unwrap)
            .filter(|r| r.code == code::OC_OLR)
            .map(|r| OcOlr::from_raw(&r).unwrap())
            .collect();
        (out.to_vec(), olrs)
    }

    #[test]
    fn throttle_answers_carry_their_own_doic_avps_whatever_came_before() {
        let one = act(vec![olr(1, 30)]);
        let two = act(vec![olr(2, 60)]);
        let none = doic::AnswerActions::default();
        let encoded = |a: &doic::AnswerActions| {
            let mut b = Vec::new();
            a.add_features
                .as_ref()
                .unwrap()
                .to_avp()
                .encode(&mut b)
                .unwrap();
            for r in &a.forward_reports {
                r.to_avp().encode(&mut b).unwrap();
            }
            b
        };
        // Alternating versions (a report renewed, then an older answer's
        // actions), and answers without DOIC AVPs in between.
        for (a, want) in [
            (&one, 1),
            (&one, 1),
            (&two, 2),
            (&none, 0),
            (&one, 1),
            (&two, 2),
        ] {
            let (bytes, olrs) = put(a);
            if want == 0 {
                assert!(bytes.is_empty());
                continue;
            }
            assert_eq!(bytes, encoded(a), "the same bytes as encoding them anew");
            assert_eq!(olrs.len(), 1);
            assert_eq!(olrs[0].sequence_number, want);
        }
        // Features alone, then none at all.
        let features_only = act(Vec::new());
        let (bytes, olrs) = put(&features_only);
        assert_eq!((bytes, olrs.len()), (encoded(&features_only), 0));
    }
}
