//! Wire truth, our side: messages the agent's encoder builds, and the
//! answers it writes itself AVP by AVP, are decoded by tshark (an independent dissector) with no malformed packet and no expert
//! warning, and tshark sees the same value in every field (RFC 6733 §3
//! header, §4 AVPs; RFC 7683 §7, RFC 8581 §7 and RFC 8582 §7 DOIC AVPs).

use std::net::IpAddr;

use bytes::BytesMut;
use diameter::codec::answer::{Outcome, put_error_answer, put_local_answer};
use diameter::codec::builder::{self, Capabilities, ErrorAnswer};
use diameter::codec::{
    Avp, AvpIter, CheckOptions, Message, OcOlr, OcSupportedFeatures, ReportType, Value, check,
};
use diameter::dictionary::{app, cmd, code, doic, result, vendor};
use interop::compare::compare;
use interop::process::RunDir;
use interop::tshark::{Tshark, WireMessage};

/// Vendor-Id carried with Experimental-Result-Code 5198 in these tests (the
/// code is vendor-specific; the deployment picks the vendor).
const RETRY_VENDOR: u32 = vendor::TGPP;

fn caps() -> Capabilities {
    Capabilities {
        origin_host: "agent.example.com".into(),
        origin_realm: "example.com".into(),
        host_ip_addresses: vec![
            "127.0.0.1".parse::<IpAddr>().unwrap(),
            "::1".parse::<IpAddr>().unwrap(),
        ],
        vendor_id: 0,
        product_name: "doic-agent".into(),
        origin_state_id: Some(7),
        supported_vendor_ids: vec![vendor::FD_TEST],
        auth_application_ids: vec![app::RELAY],
        acct_application_ids: vec![],
        vendor_specific_auth_apps: vec![(vendor::FD_TEST, app::FD_TEST)],
        inband_security_ids: vec![0],
        firmware_revision: Some(1),
    }
}

/// OC-Supported-Features from the codec's typed builder (RFC 7683 §7.1,
/// RFC 8581 §7.1).
fn oc_supported_features(vector: u64, peer_algo: Option<u64>, source: Option<&str>) -> Avp {
    OcSupportedFeatures {
        feature_vector: Some(vector),
        source_id: source.map(str::to_owned),
        peer_algo,
    }
    .to_avp()
}

/// OC-OLR from the codec's typed builder (RFC 7683 §7.3, RFC 8581 §7.2,
/// RFC 8582 §7.2).
fn oc_olr(
    seq: u64,
    report_type: i32,
    pct: Option<u32>,
    rate: Option<u32>,
    source: Option<&str>,
) -> Avp {
    OcOlr {
        sequence_number: seq,
        report_type: ReportType::from_value(report_type),
        reduction_percentage: pct,
        validity_duration: Some(30),
        source_id: source.map(str::to_owned),
        maximum_rate: rate,
    }
    .to_avp()
}

fn test_request() -> Message {
    Message::request(cmd::FD_TEST, app::FD_TEST, true)
        .with_ids(0x1111_0001, 0x2222_0001)
        .with(Avp::str(code::SESSION_ID, "client1.example.org;1;42"))
        .with(Avp::str(code::ORIGIN_HOST, "client1.example.org"))
        .with(Avp::str(code::ORIGIN_REALM, "example.org"))
        .with(Avp::str(code::DESTINATION_REALM, "example.net"))
        .with(Avp::vendor(
            code::fd_test::TEST_AVP,
            Some(vendor::FD_TEST),
            Value::Integer32(-123_456),
        ))
        .with(oc_supported_features(
            doic::OLR_DEFAULT_ALGO | doic::OLR_RATE_ALGORITHM | doic::OC_PEER_REPORT,
            Some(doic::OLR_RATE_ALGORITHM),
            Some("agent.example.com"),
        ))
        .with(Avp::grouped(
            code::PROXY_INFO,
            vec![
                Avp::str(code::PROXY_HOST, "agent.example.com"),
                Avp::octets(code::PROXY_STATE, &b"\x00\x01state"[..]),
            ],
        ))
}

/// Every message the wire-truth test sends through tshark, with a name.
fn messages() -> Vec<(&'static str, Message)> {
    let caps = caps();
    let cer = builder::cer(&caps, 0x0101_0101, 0x0202_0202);
    let cea = builder::cea(&cer.header, result::SUCCESS, &caps);
    let dwr = builder::dwr("agent.example.com", "example.com", Some(7), 3, 4);
    let dwa = builder::dwa(
        &dwr.header,
        result::SUCCESS,
        "server1.example.net",
        "example.net",
        None,
    );
    let dpr = builder::dpr("agent.example.com", "example.com", 0, 5, 6);
    let dpa = builder::dpa(
        &dpr.header,
        result::SUCCESS,
        "server1.example.net",
        "example.net",
    );
    let req = test_request();
    let loss = builder::answer(&req, result::SUCCESS, "server1.example.net", "example.net")
        .with(oc_supported_features(doic::OLR_DEFAULT_ALGO, None, None))
        .with(oc_olr(17, doic::HOST_REPORT, Some(50), None, None));
    let realm = builder::answer(&req, result::SUCCESS, "server1.example.net", "example.net")
        .with(oc_olr(18, doic::REALM_REPORT, Some(100), None, None));
    let rate_peer = builder::answer(&req, result::SUCCESS, "agent.example.com", "example.com")
        .with(oc_supported_features(
            doic::OLR_RATE_ALGORITHM | doic::OC_PEER_REPORT,
            Some(doic::OLR_RATE_ALGORITHM),
            Some("agent.example.com"),
        ))
        .with(oc_olr(
            19,
            doic::PEER_REPORT,
            None,
            Some(1500),
            Some("agent.example.com"),
        ));
    let raw = req.to_bytes().unwrap();
    // RFC 6733 §7.6: Experimental-Result takes the place of Result-Code.
    let retry = Message {
        header: builder::answer_header(&req.header, false),
        avps: Vec::new(),
    }
    .with(req.find(code::SESSION_ID).unwrap().clone())
    .with(Avp::str(code::ORIGIN_HOST, "agent.example.com"))
    .with(Avp::str(code::ORIGIN_REALM, "example.com"))
    .with(builder::experimental_result(
        RETRY_VENDOR,
        result::OVERLOAD_RETRY_NOT_ALLOWED_TO_ANY,
    ));
    let busy = ErrorAnswer::new(
        &req.header,
        &raw,
        result::TOO_BUSY,
        "agent.example.com",
        "example.com",
    )
    .error_message("overload: throttled by loss abatement")
    .error_reporting_host("agent.example.com")
    .build();
    // RFC 6733 §7.5: a 5014 answer carries the offending AVP in Failed-AVP.
    let mut bad = raw.to_vec();
    let test_avp_at = AvpIter::with_offset(&bad[20..], 20)
        .map(Result::unwrap)
        .find(|a| a.code == code::fd_test::TEST_AVP)
        .unwrap()
        .offset;
    bad[test_avp_at + 7] = 14; // Integer32 with a 2-byte value
    let err = Message::decode(bad.clone().into()).unwrap_err();
    assert_eq!(err.result_code(), result::INVALID_AVP_LENGTH);
    let failed =
        ErrorAnswer::for_decode_error(&req.header, &bad, &err, "agent.example.com", "example.com")
            .error_message("invalid AVP length")
            .build();
    // What the agent writes itself (`diameter::codec::answer`), decoded
    // back: a throttle answer with its DOIC AVPs, and the two error answers
    // above.
    let origin = ("agent.example.com", "example.com");
    let written = |put: &dyn Fn(&mut BytesMut)| {
        let mut out = BytesMut::new();
        put(&mut out);
        Message::decode(out.freeze()).unwrap()
    };
    let retry_written = written(&|o| {
        let outcome = Outcome::Experimental {
            vendor_id: RETRY_VENDOR,
            code: result::OVERLOAD_RETRY_NOT_ALLOWED_TO_ANY,
        };
        put_local_answer(o, &raw, origin, outcome, |o| {
            let features = oc_supported_features(
                doic::OLR_RATE_ALGORITHM | doic::OC_PEER_REPORT,
                Some(doic::OLR_RATE_ALGORITHM),
                Some("agent.example.com"),
            );
            let report = oc_olr(
                20,
                doic::PEER_REPORT,
                None,
                Some(700),
                Some("agent.example.com"),
            );
            features.encode(o).unwrap();
            report.encode(o).unwrap();
        });
    });
    let busy_written = written(&|o| {
        let why = "overload: the client is above its allocation";
        put_error_answer(o, &raw, origin, result::TOO_BUSY, None, why);
    });
    let failed_written = written(&|o| {
        let f = err.failed_avp().map(|f| &f[..]);
        put_error_answer(o, &bad, origin, err.result_code(), f, "invalid AVP length");
    });
    vec![
        ("CER", cer),
        ("CEA", cea),
        ("DWR", dwr),
        ("DWA", dwa),
        ("DPR", dpr),
        ("DPA", dpa),
        ("Test-Request with OC-Supported-Features", req),
        ("Test-Answer with host OLR (loss)", loss),
        ("Test-Answer with realm OLR", realm),
        ("Test-Answer with peer OLR (rate)", rate_peer),
        ("answer with Experimental-Result 5198", retry),
        ("3004 answer with E bit", busy),
        ("5014 answer with Failed-AVP", failed),
        (
            "5198 throttle answer with a peer OLR, as written",
            retry_written,
        ),
        ("3004 answer, as written", busy_written),
        ("5014 answer with Failed-AVP, as written", failed_written),
    ]
}

fn decode_all(tshark: &Tshark, msgs: &[(&str, Message)]) -> Vec<WireMessage> {
    let dir = RunDir::new("encode-truth").unwrap();
    let bytes: Vec<Vec<u8>> = msgs
        .iter()
        .map(|(_, m)| m.to_bytes().unwrap().to_vec())
        .collect();
    let decoded = tshark.decode_messages(dir.path(), &bytes).unwrap();
    assert_eq!(
        decoded.len(),
        msgs.len(),
        "tshark saw {} messages",
        decoded.len()
    );
    decoded
}

#[test]
fn our_messages_decode_cleanly_in_tshark_with_the_same_fields() {
    assert!(
        Tshark::can_load_dictionary(),
        "tshark's dictionary additions need a private mount namespace (root)"
    );
    let msgs = messages();
    let decoded = decode_all(&Tshark::new().check_checksums(), &msgs);
    let mut failures = Vec::new();
    for ((name, ours), theirs) in msgs.iter().zip(&decoded) {
        if theirs.malformed {
            failures.push(format!("{name}: tshark reports a malformed packet"));
        }
        for w in theirs.warnings() {
            failures.push(format!("{name}: tshark expert warning: {}", w.message));
        }
        // The pcap writer's Ethernet/IPv4/TCP framing: checksums verified,
        // sequence analysis clean.
        for e in theirs.frame_experts.iter().filter(|e| e.is_warning()) {
            failures.push(format!("{name}: tshark frame expert: {}", e.message));
        }
        for m in compare(ours, theirs) {
            failures.push(format!("{name}: {m}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn doic_values_reach_tshark_by_name() {
    let msgs = messages();
    let decoded = decode_all(&Tshark::new(), &msgs);
    let rate = &decoded[9];
    let olr = rate.avp(code::OC_OLR, None).expect("OC-OLR");
    let field = |c: u32| {
        let a = olr
            .child(c, None)
            .unwrap_or_else(|| panic!("OC-OLR child {c}"));
        (
            a.name.clone().unwrap_or_default(),
            a.value.clone().unwrap_or_default(),
        )
    };
    assert_eq!(
        field(code::OC_SEQUENCE_NUMBER),
        ("OC-Sequence-Number".into(), "19".into())
    );
    assert_eq!(
        field(code::OC_REPORT_TYPE),
        ("OC-Report-Type".into(), "2".into())
    );
    assert_eq!(
        field(code::OC_MAXIMUM_RATE),
        ("OC-Maximum-Rate".into(), "1500".into())
    );
    assert_eq!(
        field(code::SOURCE_ID),
        ("SourceID".into(), "agent.example.com".into())
    );
    let er = decoded[10]
        .avp(code::EXPERIMENTAL_RESULT, None)
        .expect("Experimental-Result");
    let erc = er.child(code::EXPERIMENTAL_RESULT_CODE, None).unwrap();
    assert_eq!(erc.value.as_deref(), Some("5198"));
    assert!(
        decoded[11].flags & 0x20 != 0,
        "3004 answers carry the E bit"
    );
}

/// The dictionary additions are what names OC-Maximum-Rate: without them
/// tshark 4.0 reports it as an unknown AVP (an expert warning).
#[test]
fn stock_tshark_lacks_oc_maximum_rate() {
    let msgs = messages();
    let decoded = decode_all(&Tshark::new().stock_dictionary(), &msgs);
    let olr = decoded[9].avp(code::OC_OLR, None).unwrap();
    let rate = olr.child(code::OC_MAXIMUM_RATE, None).unwrap();
    assert_eq!(rate.name, None);
    assert_eq!(rate.data, 1500u32.to_be_bytes());
    assert!(
        decoded[9]
            .warnings()
            .iter()
            .any(|w| w.message.contains("670"))
    );
}

/// A message split over several TCP segments is reassembled by tshark.
#[test]
fn a_message_larger_than_one_segment_is_reassembled() {
    let big = "x".repeat(100_000);
    let mut m = test_request();
    m.push(Avp::str(code::USER_NAME, &big));
    let msgs = vec![("large Test-Request", m)];
    let decoded = decode_all(&Tshark::new(), &msgs);
    assert!(!decoded[0].malformed);
    let diffs = compare(&msgs[0].1, &decoded[0]);
    assert!(diffs.is_empty(), "{diffs:?}");
}

/// The comparison is not vacuous: a changed value, a changed flag and a
/// different message are all reported, at the right place.
#[test]
fn the_comparison_reports_every_kind_of_difference() {
    let msgs = messages();
    let decoded = decode_all(&Tshark::new(), &msgs);
    let (_, rate) = &msgs[9];
    let mut changed = rate.clone();
    let olr = changed
        .avps
        .iter_mut()
        .find(|a| a.code == code::OC_OLR)
        .unwrap();
    let mut children = olr.children().unwrap();
    children[0] = Avp::u64(code::OC_SEQUENCE_NUMBER, 20);
    *olr = Avp::grouped(code::OC_OLR, children);
    changed.header.flags.0 |= 0x10;
    let diffs = compare(&changed, &decoded[9]);
    let seen = |path: &str, field: &str| {
        diffs
            .iter()
            .any(|m| m.path.contains(path) && m.field == field)
    };
    assert!(seen("header", "flags"), "{diffs:#?}");
    assert!(
        seen("OC-OLR(623)/OC-Sequence-Number(624)", "value"),
        "{diffs:#?}"
    );
    assert!(
        seen("OC-OLR(623)/OC-Sequence-Number(624)", "data"),
        "{diffs:#?}"
    );
    assert!(seen("message", "bytes"), "{diffs:#?}");
    assert!(!compare(&msgs[0].1, &decoded[1]).is_empty());
}

/// tshark flags a broken AVP length, and the harness surfaces it.
#[test]
fn a_malformed_message_is_detected() {
    let mut bytes = test_request().to_bytes().unwrap().to_vec();
    // Session-Id is the first AVP: claim it is longer than the message.
    bytes[20 + 5..20 + 8].copy_from_slice(&[0x00, 0xff, 0xf0]);
    let dir = RunDir::new("malformed").unwrap();
    let decoded = Tshark::new().decode_messages(dir.path(), &[bytes]).unwrap();
    assert_eq!(decoded.len(), 1);
    assert!(
        decoded[0].malformed || !decoded[0].warnings().is_empty(),
        "{:#?}",
        decoded[0]
    );
}

/// With checksum validation on, tshark does flag a bad TCP checksum, so
/// the clean result above means the pcap writer's checksums are right.
#[test]
fn a_bad_tcp_checksum_is_flagged() {
    use interop::pcap::{Dir, PcapWriter};
    let mut w = PcapWriter::new();
    let mut flow = w.open(
        "127.0.0.1:40000".parse().unwrap(),
        "127.0.0.1:3868".parse().unwrap(),
    );
    w.send(
        &mut flow,
        Dir::ToServer,
        &test_request().to_bytes().unwrap(),
    );
    let mut file = w.bytes().to_vec();
    // Walk to the fourth record (SYN, SYN-ACK, ACK, then the request).
    let mut at = 24;
    for _ in 0..3 {
        let caplen = u32::from_le_bytes(file[at + 8..at + 12].try_into().unwrap()) as usize;
        at += 16 + caplen;
    }
    let tcp_checksum = at + 16 + 14 + 20 + 16;
    file[tcp_checksum] ^= 0xff;
    let dir = RunDir::new("bad-checksum").unwrap();
    let path = dir.path().join("bad.pcap");
    std::fs::write(&path, &file).unwrap();
    let decoded = Tshark::new().check_checksums().decode(&path).unwrap();
    assert_eq!(decoded.len(), 1);
    assert!(
        decoded[0].frame_experts.iter().any(|e| e.is_warning()),
        "{:?}",
        decoded[0].frame_experts
    );
}

/// Our messages also pass our own grammar, dictionary and flag-rule checks,
/// and the typed DOIC AVPs read back what was built.
#[test]
fn our_messages_pass_our_checks_and_doic_avps_read_back() {
    for (name, m) in messages() {
        let bytes = m.to_bytes().unwrap();
        if let Err(e) = check(&bytes, CheckOptions::default()) {
            panic!("{name}: {e}");
        }
    }
    let (_, rate) = &messages()[9];
    let olr = OcOlr::from_avp(rate.find(code::OC_OLR).unwrap()).unwrap();
    assert_eq!(olr.sequence_number, 19);
    assert_eq!(olr.report_type, ReportType::Peer);
    assert_eq!(olr.maximum_rate, Some(1500));
    assert_eq!(olr.source_id.as_deref(), Some("agent.example.com"));
    assert_eq!(olr.reduction_percentage, None);
    let f = OcSupportedFeatures::from_avp(rate.find(code::OC_SUPPORTED_FEATURES).unwrap()).unwrap();
    assert_eq!(
        f.feature_vector,
        Some(doic::OLR_RATE_ALGORITHM | doic::OC_PEER_REPORT)
    );
    assert_eq!(f.peer_algo, Some(doic::OLR_RATE_ALGORITHM));
}
