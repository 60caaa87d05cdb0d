//! The glue against the core: the encoded AVPs are the core's decisions,
//! and the idle fast path gives the bytes, transaction state and counters
//! of the full treatment.

use std::time::Instant;

use bytes::{Bytes, BytesMut};
use diameter::codec::CommandFlags;
use diameter::codec::avp::{Avp, AvpIter, RawAvp};
use diameter::codec::relay::{MessageBuf, Routing};
use diameter::dictionary::code;
use doic::avps::apply_answer;
use doic::{
    AnswerView, Candidate, Doic, DoicConfig, OcSupportedFeatures, RequestView, Treatment, TxState,
};

use super::cores::{reset, with_core};
use super::request::{FeaturesCut, features_cut};
use super::*;

fn is_features(a: &RawAvp<'_>) -> bool {
    a.vendor_id.is_none() && a.code == code::OC_SUPPORTED_FEATURES
}

/// `msg` without the `len` bytes of the top-level AVP at `offset`, its
/// Message Length set: the bytes [`MessageBuf::remove_avps`] leaves when
/// that AVP is the only one removed, in one copy (what
/// `diameter::codec::forward::put_relayed_request_cut` writes before the Route-Record).
fn without_avp(msg: &[u8], offset: usize, len: usize) -> Option<Bytes> {
    let end = offset.checked_add(len)?;
    let (head, tail) = (msg.get(..offset)?, msg.get(end..)?);
    if offset < diameter::codec::HEADER_LEN {
        return None;
    }
    let mut out = BytesMut::with_capacity(msg.len() - len);
    out.extend_from_slice(head);
    out.extend_from_slice(tail);
    diameter::codec::header::finish(&mut out, 0);
    Some(out.freeze())
}

/// The transaction state that travels with every relayed request stays
/// small, and a kept vector of 0 is loss (RFC 7683 §6.1).
#[test]
fn transaction_state_is_small_and_keeps_loss() {
    assert_eq!(std::mem::size_of::<Option<TxState>>(), 16);
    assert_eq!(
        doic::treatment::kept_vector(0).get(),
        doic::features::OLR_DEFAULT_ALGO
    );
}

/// The AVP appended to relayed requests is the one the core decides
/// (RFC 7683 §5.1.3, RFC 8581 §6.1.1), for every algorithm setting.
#[test]
fn encoded_features_are_the_cores_request_features() {
    for (algorithms, peer_report) in [
        (vec![doic::Algorithm::Loss], false),
        (vec![doic::Algorithm::Loss, doic::Algorithm::Rate], true),
    ] {
        let cfg = DoicConfig {
            algorithms,
            peer_report,
            ..DoicConfig::default()
        };
        let ov = Overload::new("agent.example.com", Some(cfg.clone()), 1).unwrap();
        let mut core = Doic::new("agent.example.com", cfg, 1, 1).unwrap();
        let req = RequestView {
            app_id: 4,
            command_code: 272,
            from_peer: "c",
            dest_realm: "r",
            dest_host: None,
            features: None,
            drmp: None,
        };
        let cands = [Candidate {
            peer: "s",
            server: Some("s"),
        }];
        assert!(matches!(
            core.treat(Instant::now(), &req, &cands),
            Treatment::Forward { index: 0, .. }
        ));
        let raw = AvpIter::new(ov.features_avp()).next().unwrap().unwrap();
        assert_eq!(
            &OcSupportedFeatures::from_raw(&raw).unwrap(),
            core.request_features()
        );
    }
}

/// A DOIC client's request: OC-Supported-Features between other AVPs.
fn client_request(features: &OcSupportedFeatures) -> Bytes {
    diameter::codec::Message::request(272, 4, true)
        .with(Avp::str(code::SESSION_ID, "client;1"))
        .with(Avp::str(code::ORIGIN_HOST, "client"))
        .with(features.to_avp())
        .with(Avp::str(code::DESTINATION_REALM, "realm"))
        .with(Avp::u32(code::RESULT_CODE, 7))
        .to_bytes()
        .unwrap()
        .freeze()
}

/// The client feature sets the fast path must read as the full
/// treatment does (RFC 7683 §5.1.1, RFC 8581 §6.1.2).
fn client_feature_sets() -> Vec<OcSupportedFeatures> {
    use doic::features::{OC_PEER_REPORT, OLR_DEFAULT_ALGO, OLR_RATE_ALGORITHM};
    let f = |v: Option<u64>, s: Option<&str>, pa: Option<u64>| OcSupportedFeatures {
        feature_vector: v,
        source_id: s.map(str::to_owned),
        peer_algo: pa,
    };
    vec![
        f(
            Some(OLR_DEFAULT_ALGO | OLR_RATE_ALGORITHM | OC_PEER_REPORT),
            Some("client"),
            None,
        ),
        f(
            Some(OLR_DEFAULT_ALGO | OC_PEER_REPORT),
            Some("client"),
            None,
        ),
        f(Some(OLR_DEFAULT_ALGO | OLR_RATE_ALGORITHM), None, None),
        f(Some(OLR_DEFAULT_ALGO | OC_PEER_REPORT), None, None),
        f(
            Some(OLR_RATE_ALGORITHM | OC_PEER_REPORT),
            Some("client"),
            Some(OLR_DEFAULT_ALGO),
        ),
        f(None, None, None),
        // A SourceID naming another node: no peer-report support (RFC
        // 8581 §6.1.2), read in place all the same.
        f(
            Some(OLR_DEFAULT_ALGO | OC_PEER_REPORT),
            Some("elsewhere"),
            None,
        ),
    ]
}

fn doic_cfg(peer_algo: doic::Algorithm, trusted: bool) -> DoicConfig {
    let mut cfg = DoicConfig {
        algorithms: vec![doic::Algorithm::Loss, doic::Algorithm::Rate],
        peer_report: true,
        peer_algo,
        ..DoicConfig::default()
    };
    cfg.peers.insert(
        "client".into(),
        doic::config::PeerPolicy {
            trusted,
            receive_reports: true,
            ..doic::config::PeerPolicy::default()
        },
    );
    cfg
}

/// The idle fast path for a DOIC client ([`idle_forward`], then
/// [`treat_answer`]) gives the bytes and transaction state of the full
/// treatment ([`Doic::treat`] with `remove_avps`, then
/// [`Doic::on_answer`] with `apply_answer`): the client's features cut
/// out of the forwarded request (RFC 7683 §5.1.3, RFC 8581 §6.1.1), the
/// agent's own OC-Supported-Features in the answer with loss selected
/// and, toward a peer-report client, SourceID and OC-Peer-Algo (RFC 7683
/// §5.1.2, RFC 8581 §6.1.2). Each feature set is sent twice on one
/// connection's [`Offers`]: read, then reused; the next set is read anew.
#[test]
fn idle_doic_client_fast_path_is_byte_identical_to_full_treatment() {
    let answer = diameter::codec::Message::new(272, 4, CommandFlags::default())
        .with(Avp::str(code::SESSION_ID, "client;1"))
        .with(Avp::u32(code::RESULT_CODE, 2001))
        .with(Avp::str(code::ORIGIN_HOST, "server"))
        .with(Avp::str(code::ORIGIN_REALM, "realm"))
        .to_bytes()
        .unwrap()
        .freeze();
    let cands = [Candidate {
        peer: "server",
        server: Some("server"),
    }];
    let t0 = Instant::now();
    let mut checked = 0;
    for (peer_algo, trusted) in [
        (doic::Algorithm::Rate, true),
        (doic::Algorithm::Loss, true),
        (doic::Algorithm::Rate, false),
    ] {
        let cfg = doic_cfg(peer_algo, trusted);
        let ov = Overload::new("agent", Some(cfg.clone()), 1).unwrap();
        // This thread's core is made from `ov` on first use.
        reset();
        let mut full = Doic::new("agent", cfg, 1, 1).unwrap();
        let mut offers = Offers::default();
        let twice = client_feature_sets()
            .into_iter()
            .flat_map(|cf| [cf.clone(), cf]);
        for cf in twice {
            let msg = client_request(&cf);
            let routing = Routing::scan(&msg).unwrap();
            let Some(Decision::Plain {
                tx,
                cut: Some((a, b)),
            }) = idle_forward(&ov, 4, &routing, (&Arc::from("client"), &mut offers))
            else {
                panic!("no fast path for {cf:?}");
            };
            // As the connection writes it (`put_relayed_request_cut`),
            // and as `without_avp` gives it.
            let mut written = BytesMut::new();
            diameter::codec::forward::put_relayed_request_cut(
                &mut written,
                &msg,
                (a as usize, b as usize),
                "client",
                9,
                false,
            );
            let fast_msg = without_avp(&msg, a as usize, (b - a) as usize).unwrap();
            let received =
                OcSupportedFeatures::from_raw(&routing.oc_supported_features().unwrap()).unwrap();
            let view = RequestView {
                app_id: 4,
                command_code: 272,
                from_peer: "client",
                dest_realm: "realm",
                dest_host: None,
                features: Some(&received),
                drmp: None,
            };
            let Treatment::Forward {
                index: 0,
                tx: full_tx,
            } = full.treat(t0, &view, &cands)
            else {
                panic!("full treatment did not forward");
            };
            let mut buf = MessageBuf::new(BytesMut::from(&msg[..])).unwrap();
            assert_eq!(buf.remove_avps(is_features).unwrap(), 1);
            let full_msg = buf.freeze();
            assert_eq!(fast_msg, full_msg, "forwarded request for {cf:?}");
            let mut full_written = BytesMut::new();
            diameter::codec::forward::put_relayed_request(
                &mut full_written,
                &full_msg,
                "client",
                9,
                false,
            );
            assert_eq!(written, full_written, "written request for {cf:?}");
            assert_eq!(tx, full_tx.to_state(), "transaction state for {cf:?}");
            assert_eq!(tx.client_features.is_some(), trusted);

            let scan = Routing::scan(&answer).unwrap();
            // As the relay does: the idle answer when it applies, else
            // the treatment.
            let erc = scan.experimental_result_code().map(|(_, c)| c);
            let idle = idle_client_answer(&ov, &tx, &scan, erc);
            assert_eq!(idle.is_some(), trusted, "idle answer path for {cf:?}");
            let (fast_answer, retry) = match idle {
                Some((which, retry)) => (
                    Some(with_avp(&answer, ov.answer_features_avp(which))),
                    retry,
                ),
                None => treat_answer(&ov, &tx, ("client", "realm"), "server", &answer, &scan),
            };
            let pending = full_tx.to_state();
            let act = full.on_answer(
                t0,
                &pending.pending("client", "realm", "server"),
                "server",
                &AnswerView {
                    app_id: 4,
                    origin_host: "server",
                    origin_realm: "realm",
                    result_code: Some(2001),
                    experimental_result_code: None,
                    features: None,
                    olrs: &[],
                },
            );
            assert_eq!(retry, act.retry_on_alternate);
            let full_answer = if act.add_features.is_some() || act.strip {
                let mut buf = MessageBuf::new(BytesMut::from(&answer[..])).unwrap();
                apply_answer(&mut buf, &act).unwrap();
                Some(buf.freeze())
            } else {
                None
            };
            assert_eq!(fast_answer, full_answer, "answer for {cf:?}");
            assert_eq!(fast_answer.is_some(), trusted, "RFC 7683 §5.1.2");
            checked += 1;
        }
        let counted = with_core(&ov, |core, _| core.audit().totals).unwrap();
        assert_eq!(counted, full.audit().totals);
    }
    assert_eq!(checked, 42);
}

/// Feature AVPs the fast path does not read are left to the full
/// treatment: a SourceID that is no DiameterIdentity (RFC 6733 §4.3.1), a
/// child of the wrong length (RFC 7683 §7.2), two OC-Supported-Features.
#[test]
fn unusual_client_features_take_the_full_treatment() {
    let ov = Overload::new("agent", Some(doic_cfg(doic::Algorithm::Rate, true)), 1).unwrap();
    reset();
    let other = OcSupportedFeatures {
        feature_vector: Some(1),
        source_id: Some("not an identity".into()),
        peer_algo: None,
    };
    let short = Avp::grouped(
        code::OC_SUPPORTED_FEATURES,
        vec![Avp::u32(code::OC_FEATURE_VECTOR, 1)],
    );
    let twice = diameter::codec::Message::request(272, 4, true)
        .with(Avp::str(code::ORIGIN_HOST, "client"))
        .with(OcSupportedFeatures::default().to_avp())
        .with(OcSupportedFeatures::default().to_avp());
    let short = diameter::codec::Message::request(272, 4, true).with(short);
    for msg in [
        client_request(&other),
        short.to_bytes().unwrap().freeze(),
        twice.to_bytes().unwrap().freeze(),
    ] {
        let routing = Routing::scan(&msg).unwrap();
        assert!(
            idle_forward(
                &ov,
                4,
                &routing,
                (&Arc::from("client"), &mut Offers::default())
            )
            .is_none()
        );
    }
    // Two are removed by a copy, not cut.
    let twice = twice.to_bytes().unwrap().freeze();
    let routing = Routing::scan(&twice).unwrap();
    assert_eq!(features_cut(&routing), FeaturesCut::Several);
    // Nothing was counted: the full treatment will count them.
    let counted = with_core(&ov, |core, _| core.audit().totals).unwrap();
    assert_eq!(counted.requests, 0);
}

/// A connection's [`Offers`] gives the offer [`doic::Offer::read`] makes
/// of the AVP in every case: reused only for the same bytes from the same
/// sender, read again when the client announces other features, never kept
/// for a malformed AVP (RFC 7683 §5.1: the features are those of each
/// transaction).
#[test]
fn offers_are_reused_only_for_the_same_avp_from_the_same_peer() {
    let mut sets: Vec<Bytes> = client_feature_sets().iter().map(client_request).collect();
    let bad = OcSupportedFeatures {
        feature_vector: Some(1),
        source_id: Some("not an identity".into()),
        peer_algo: None,
    };
    sets.push(client_request(&bad));
    let fresh = |msg: &Bytes, from: &str| {
        let routing = Routing::scan(msg).unwrap();
        let raw = routing.oc_supported_features().unwrap();
        diameter::codec::doic::FeaturesRef::from_raw(&raw)
            .ok()
            .map(|f| doic::Offer::read(&f, from))
    };
    let mut offers = Offers::default();
    let mut check = |msg: &Bytes, from: &Arc<str>| {
        let routing = Routing::scan(msg).unwrap();
        let (_, avp) = routing.oc_supported_features_span().unwrap();
        assert_eq!(
            offers.read(avp, &routing, from),
            fresh(msg, from),
            "from {from}"
        );
    };
    // Every pair of AVPs in both orders, each twice in a row, one sender
    // (one `Arc`, as a connection's peer).
    for from in ["client", "elsewhere"] {
        let from = Arc::from(from);
        for a in &sets {
            for b in &sets {
                for msg in [a, a, b, b, a] {
                    check(msg, &from);
                }
            }
        }
    }
    // The same AVP from one sender, then another; each name a new `Arc`.
    for msg in &sets {
        for from in ["client", "client", "elsewhere", "elsewhere", "client"] {
            check(msg, &Arc::from(from));
        }
    }
}

/// A worker's snapshot reaches `/metrics` only through the control
/// thread's collection of the feed; one without the trail keeps the last
/// trail; a full feed drops and counts.
#[test]
fn snapshots_reach_metrics_through_the_bounded_feed() {
    let ov = Overload::new("agent", Some(DoicConfig::default()), 1).unwrap();
    reset();
    set_worker(0);
    tick(&ov, true);
    assert!(
        ov.snapshots()[0].audit.is_null(),
        "not before it is collected"
    );
    ov.collect_snapshots();
    let audit = ov.snapshots()[0].audit.clone();
    assert!(!audit.is_null(), "collected");
    tick(&ov, false);
    ov.collect_snapshots();
    assert_eq!(ov.snapshots()[0].audit, audit, "the last trail is kept");
    for _ in 0..=SNAPSHOTS_PER_WORKER {
        tick(&ov, false);
    }
    assert_eq!(ov.snapshot_feed().dropped(), 1);
    assert_eq!(ov.snapshot_feed().drain().count(), SNAPSHOTS_PER_WORKER);
}
