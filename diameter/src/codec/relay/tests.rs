//! The relay scan and the in-place edits against the RFC 6733 §3 and §4
//! layouts they read and write.

use super::*;
use crate::codec::builder::experimental_result;
use crate::dictionary::{app, cmd, vendor};

fn request() -> Message {
    Message::request(cmd::FD_TEST, app::FD_TEST, true)
        .with_ids(0x11, 0x22)
        .with(Avp::str(code::SESSION_ID, "client.example.org;1;2"))
        .with(Avp::str(code::ORIGIN_HOST, "client.example.org"))
        .with(Avp::str(code::ORIGIN_REALM, "example.org"))
        .with(Avp::str(code::DESTINATION_REALM, "example.net"))
        // a 3GPP AVP with code 623 must not be taken for OC-OLR
        .with(Avp::vendor(
            623,
            Some(vendor::TGPP),
            crate::codec::Value::Enumerated(1),
        ))
        .with(Avp::str(code::ROUTE_RECORD, "a.example"))
        .with(Avp::i32(code::DRMP, 3))
        .with(Avp::str(code::ROUTE_RECORD, "b.example"))
        .with(Avp::grouped(
            code::OC_OLR,
            vec![Avp::u64(code::OC_SEQUENCE_NUMBER, 1)],
        ))
        .with(Avp::grouped(
            code::OC_OLR,
            vec![Avp::u64(code::OC_SEQUENCE_NUMBER, 2)],
        ))
        .with(experimental_result(10415, 5198))
}

#[test]
fn scan_finds_routing_avps_only_in_ietf_space() {
    let b = request().to_bytes().unwrap();
    let r = Routing::scan(&b).unwrap();
    assert_eq!(r.header.command_code, cmd::FD_TEST);
    assert_eq!(r.session_id(), Some(&b"client.example.org;1;2"[..]));
    assert_eq!(r.origin_host(), Some(&b"client.example.org"[..]));
    assert_eq!(r.destination_realm(), Some(&b"example.net"[..]));
    assert_eq!(r.destination_host(), None);
    assert_eq!(
        r.route_records().collect::<Vec<_>>(),
        vec![&b"a.example"[..], b"b.example"]
    );
    assert_eq!(r.route_record_count, 2);
    assert_eq!(r.oc_olr_count, 2);
    assert_eq!(r.oc_olrs().count(), 2);
    assert_eq!(r.drmp(), Some(3));
    assert_eq!(r.experimental_result_code(), Some((10415, 5198)));
    assert_eq!(r.result_code(), None);
}

/// RFC 7683 §7.1: one OC-Supported-Features per message; a second one
/// (a vendor AVP of the same code is another AVP) is found by the scan.
#[test]
fn scan_counts_a_second_oc_supported_features() {
    let features = || {
        Avp::grouped(
            code::OC_SUPPORTED_FEATURES,
            vec![Avp::u64(code::OC_FEATURE_VECTOR, 1)],
        )
    };
    let once = request().with(features());
    let b = once.to_bytes().unwrap();
    let r = Routing::scan(&b).unwrap();
    assert!(r.oc_supported_features().is_some());
    assert!(!r.oc_supported_features_repeated());
    let with_vendor = once.clone().with(Avp::vendor(
        code::OC_SUPPORTED_FEATURES,
        Some(vendor::TGPP),
        crate::codec::Value::Unsigned32(1),
    ));
    let b = with_vendor.to_bytes().unwrap();
    let r = Routing::scan(&b).unwrap();
    assert!(!r.oc_supported_features_repeated());
    let twice = request()
        .with(features())
        .with(Avp::u32(code::DRMP, 1))
        .with(features());
    let b = twice.to_bytes().unwrap();
    let r = Routing::scan(&b).unwrap();
    assert!(r.oc_supported_features_repeated());
}

/// `has_doic_avps`, `has_oc_supported_features` and
/// `oc_supported_features_span` are what reading the
/// slots says: an IETF OC-Supported-Features or OC-OLR at top level, never
/// a vendor AVP of the same code (RFC 7683 §7).
#[test]
fn doic_presence_and_span_are_the_slots_reading() {
    let features = Avp::grouped(
        code::OC_SUPPORTED_FEATURES,
        vec![Avp::u64(code::OC_FEATURE_VECTOR, 1)],
    );
    let plain = Message::request(cmd::FD_TEST, app::FD_TEST, true)
        .with(Avp::str(code::ORIGIN_HOST, "client.example.org"))
        .with(Avp::vendor(
            code::OC_SUPPORTED_FEATURES,
            Some(vendor::TGPP),
            crate::codec::Value::Unsigned32(1),
        ))
        .with(Avp::vendor(
            623,
            Some(vendor::TGPP),
            crate::codec::Value::Enumerated(1),
        ));
    for m in [plain.clone(), plain.with(features), request()] {
        let b = m.to_bytes().unwrap();
        let r = Routing::scan(&b).unwrap();
        let read = r.oc_supported_features().is_some() || r.oc_olrs().next().is_some();
        assert_eq!(r.has_doic_avps(), read, "{m:?}");
        let span = r.oc_supported_features().map(|a| (a.offset, a.raw));
        assert_eq!(r.has_oc_supported_features(), span.is_some(), "{m:?}");
        assert_eq!(r.oc_supported_features_span(), span, "{m:?}");
    }
}

fn answer(avps: Vec<Avp>) -> bytes::BytesMut {
    let mut m = Message::new(cmd::FD_TEST, app::FD_TEST, CommandFlags(0)).with_ids(1, 2);
    m.avps = avps;
    m.to_bytes().unwrap()
}

fn origin() -> Vec<Avp> {
    vec![
        Avp::str(code::ORIGIN_HOST, "server.example.net"),
        Avp::str(code::ORIGIN_REALM, "example.net"),
    ]
}

#[test]
fn answers_are_checked_in_the_scan() {
    let ok = answer([origin(), vec![Avp::u32(code::RESULT_CODE, 2001)]].concat());
    assert_eq!(Routing::scan_answer(&ok).unwrap().result_code(), Some(2001));
    let er = answer([origin(), vec![experimental_result(10415, 5198)]].concat());
    let r = Routing::scan_answer(&er).unwrap();
    assert_eq!(r.experimental_result_code(), Some((10415, 5198)));

    // a Result-Code of 2 bytes: 5014 at the AVP
    let mut bad = answer(
        [
            origin(),
            vec![Avp::octets(code::RESULT_CODE, &b"\x07\xd1"[..])],
        ]
        .concat(),
    );
    let at = bad.len() - 12;
    let e = Routing::scan_answer(&bad).unwrap_err();
    assert_eq!((e.result_code(), e.offset()), (5014, at));
    // the same bytes pass the request scan: the check is the answer's
    assert!(Routing::scan(&bad).is_ok());
    bad[at + 7] = 0xf0;
    assert_eq!(Routing::scan_answer(&bad).unwrap_err().result_code(), 5014);

    let e = Routing::scan_answer(&answer(origin())).unwrap_err();
    assert_eq!(e.result_code(), 5005);
    assert_eq!(
        &e.failed_avp().unwrap()[..4],
        &code::RESULT_CODE.to_be_bytes()
    );

    let two = answer(
        [
            origin(),
            vec![
                Avp::u32(code::RESULT_CODE, 2001),
                Avp::u32(code::RESULT_CODE, 3004),
            ],
        ]
        .concat(),
    );
    let e = Routing::scan_answer(&two).unwrap_err();
    assert_eq!((e.result_code(), e.offset()), (5009, two.len() - 12));
    assert_eq!(e.failed_avp().unwrap()[..], two[two.len() - 12..]);

    let half = Avp::grouped(
        code::EXPERIMENTAL_RESULT,
        vec![Avp::u32(code::EXPERIMENTAL_RESULT_CODE, 5198)],
    );
    let e = Routing::scan_answer(&answer([origin(), vec![half]].concat())).unwrap_err();
    assert_eq!(e.result_code(), 5005);
    let short = Avp::grouped(
        code::EXPERIMENTAL_RESULT,
        vec![
            Avp::u32(code::VENDOR_ID, 10415),
            Avp::octets(code::EXPERIMENTAL_RESULT_CODE, &b"\x14"[..]),
        ],
    );
    let e = Routing::scan_answer(&answer([origin(), vec![short]].concat())).unwrap_err();
    assert_eq!(e.result_code(), 5014);
}

#[test]
fn origin_is_exactly_one_host_and_one_realm() {
    let b = request().to_bytes().unwrap();
    Routing::scan(&b).unwrap().check_origin("request").unwrap();
    let mut m = request();
    m.avps.retain(|a| a.code != code::ORIGIN_REALM);
    let b = m.to_bytes().unwrap();
    let e = Routing::scan(&b)
        .unwrap()
        .check_origin("request")
        .unwrap_err();
    assert_eq!(e.result_code(), 5005);
    assert_eq!(
        &e.failed_avp().unwrap()[..4],
        &code::ORIGIN_REALM.to_be_bytes()
    );
    let b = request()
        .with(Avp::str(code::ORIGIN_HOST, "evil.example.org"))
        .to_bytes()
        .unwrap();
    let e = Routing::scan(&b)
        .unwrap()
        .check_origin("request")
        .unwrap_err();
    assert_eq!((e.result_code(), e.offset()), (5009, b.len() - 24));
    // Route-Records repeat freely
    assert_eq!(Routing::scan(&b).unwrap().route_record_count, 2);
}

#[test]
fn scan_rejects_bad_lengths() {
    let mut b = request().to_bytes().unwrap();
    b[20 + 7] = 3; // Session-Id length 3 < 8
    let e = Routing::scan(&b).unwrap_err();
    assert_eq!((e.result_code(), e.offset()), (5014, 20));
    // an AVP overrunning the message: answered, with it in Failed-AVP,
    // and the stream still framed
    let mut b = request().to_bytes().unwrap();
    let at = 20 + Avp::str(code::SESSION_ID, "client.example.org;1;2").encoded_len();
    b[at + 6] = 0x10; // 4 KiB more than it has
    let e = Routing::scan(&b).unwrap_err();
    assert_eq!((e.result_code(), e.offset()), (5014, at));
    assert!(!e.is_framing_error());
    assert_eq!(
        &e.failed_avp().unwrap()[..4],
        &code::ORIGIN_HOST.to_be_bytes()
    );
}

#[test]
fn huge_avp_lengths_fail_instead_of_looping() {
    // AVP Lengths near 2^24 must not wrap the 4-byte rounding to zero
    for length in [0x00ff_fffdu32, 0x00ff_fffe, 0x00ff_ffff] {
        let mut b = request().to_bytes().unwrap();
        b[20 + 5..20 + 8].copy_from_slice(&length.to_be_bytes()[1..]);
        let e = Routing::scan(&b).unwrap_err();
        assert_eq!((e.result_code(), e.offset()), (5014, 20));
        let e = crate::codec::validate(&b).unwrap_err();
        assert_eq!((e.result_code(), e.offset()), (5014, 20));
    }
}

#[test]
fn edits_in_place_keep_the_message_valid() {
    let req = request();
    let mut m = MessageBuf::from_message(&req).unwrap();
    let before = m.len();
    m.set_hop_by_hop(0xdead_beef);
    m.set_retransmit(true);
    m.append_avp(&Avp::str(code::ROUTE_RECORD, "agent.example.net"))
        .unwrap();
    let removed = m
        .remove_avps(|a| a.code == code::OC_OLR && a.vendor_id.is_none())
        .unwrap();
    assert_eq!(removed, 2);
    let d = Message::decode(m.clone().freeze()).unwrap();
    assert_eq!(d.header.hop_by_hop, 0xdead_beef);
    assert!(d.header.flags.is_retransmit());
    assert_eq!(d.header.end_to_end, 0x22);
    assert_eq!(d.header.length as usize, m.len());
    assert!(m.len() < before);
    assert_eq!(d.find_all(code::ROUTE_RECORD).count(), 3);
    assert_eq!(d.find_all(code::OC_OLR).count(), 0);
    // the 3GPP AVP 623 survived
    assert!(d.find_vendor(623, Some(vendor::TGPP)).is_some());
    // everything else is byte-identical, in order
    let mut expect = req.clone();
    expect
        .avps
        .retain(|a| !(a.code == code::OC_OLR && a.vendor_id.is_none()));
    expect.push(Avp::str(code::ROUTE_RECORD, "agent.example.net"));
    expect.header.hop_by_hop = 0xdead_beef;
    expect.header.flags = expect.header.flags.with(CommandFlags::RETRANSMIT, true);
    assert_eq!(m.as_bytes(), &expect.to_bytes().unwrap()[..]);
}
