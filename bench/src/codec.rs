//! The codec workload: a realistic Diameter request (about 600 bytes, 30
//! AVPs, some grouped) and the operations the benchmarks time.

use diameter::codec::{
    Avp, CommandFlags, Message, OcOlr, OcSupportedFeatures, ReportType, Routing, Value, validate,
};
use diameter::dictionary::{app, cmd, code, doic, vendor};

/// A realistic proxiable request of 608 bytes and 28 AVPs (22 top-level,
/// 3 of them grouped): session and routing AVPs, a
/// Vendor-Specific-Application-Id, DOIC OC-Supported-Features, DRMP,
/// Route-Records, Proxy-Info, 3GPP vendor AVPs and application payload.
pub fn realistic_request() -> Message {
    let mut m = Message::request(cmd::FD_TEST, app::FD_TEST, true)
        .with_ids(0x1234_5678, 0x9abc_def0)
        .with(Avp::str(
            code::SESSION_ID,
            "client1.example.org;1700000000;424242;77",
        ))
        .with(Avp::i32(code::DRMP, 4))
        .with(Avp::grouped(
            code::VENDOR_SPECIFIC_APPLICATION_ID,
            vec![
                Avp::u32(code::VENDOR_ID, vendor::FD_TEST),
                Avp::u32(code::AUTH_APPLICATION_ID, app::FD_TEST),
            ],
        ))
        .with(Avp::i32(code::AUTH_SESSION_STATE, 1))
        .with(Avp::str(code::ORIGIN_HOST, "client1.example.org"))
        .with(Avp::str(code::ORIGIN_REALM, "example.org"))
        .with(Avp::str(code::DESTINATION_REALM, "example.net"))
        .with(Avp::str(code::DESTINATION_HOST, "server1.example.net"))
        .with(Avp::str(
            code::USER_NAME,
            "sip:+15551234567;phone-context=ims.mnc001.mcc001.3gppnetwork.org@ims.example.org",
        ))
        .with(Avp::u32(code::ORIGIN_STATE_ID, 1_700_000_000))
        .with(
            OcSupportedFeatures {
                feature_vector: Some(
                    doic::OLR_DEFAULT_ALGO | doic::OLR_RATE_ALGORITHM | doic::OC_PEER_REPORT,
                ),
                source_id: Some("edge1.example.org".into()),
                peer_algo: None,
            }
            .to_avp(),
        )
        .with(Avp::base(
            code::EVENT_TIMESTAMP,
            Value::Time(diameter::codec::Time(3_973_615_832)),
        ));
    for i in 0..2 {
        m.push(Avp::vendor(
            code::fd_test::TEST_AVP,
            Some(vendor::FD_TEST),
            Value::Integer32(i * 1000 - 2500),
        ));
    }
    m.push(Avp::u32(code::SUPPORTED_VENDOR_ID, vendor::TGPP));
    m.push(Avp::vendor(623, Some(vendor::TGPP), Value::Enumerated(0)));
    m.push(Avp::vendor(648, Some(vendor::TGPP), Value::Enumerated(1)));
    m.push(Avp::octets(code::CLASS, &b"class-0123456789abcdef"[..]));
    m.push(Avp::str(code::ROUTE_RECORD, "edge1.example.org"));
    m.push(Avp::str(code::ROUTE_RECORD, "dra1.example.org"));
    m.push(Avp::grouped(
        code::PROXY_INFO,
        vec![
            Avp::str(code::PROXY_HOST, "dra1.example.org"),
            Avp::octets(code::PROXY_STATE, &b"\x00\x01\x02\x03\x04\x05"[..]),
        ],
    ));
    m.push(Avp::u64(code::ACCOUNTING_SUB_SESSION_ID, 42));
    m
}

/// The relay fast path: header and routing AVPs only; returns a value that
/// depends on what was read.
#[inline]
pub fn relay_fast_path(buf: &[u8]) -> usize {
    match Routing::scan(buf) {
        Ok(r) => {
            r.destination_realm().map_or(0, <[u8]>::len)
                + r.destination_host().map_or(0, <[u8]>::len)
                + r.session_id().map_or(0, <[u8]>::len)
                + r.route_record_count as usize
                + usize::from(r.oc_supported_features().is_some())
        }
        Err(_) => 0,
    }
}

/// An answer to [`realistic_request`] as a DOIC reacting node sends it
/// (about 300 bytes, 14 top-level AVPs): Session-Id, Result-Code 2001,
/// origin, OC-Supported-Features and a host OC-OLR, 3GPP vendor AVPs and
/// application payload, the request's Proxy-Info.
pub fn realistic_answer() -> Message {
    let mut m = Message::new(
        cmd::FD_TEST,
        app::FD_TEST,
        CommandFlags(CommandFlags::PROXIABLE),
    )
    .with_ids(0x1234_5678, 0x9abc_def0)
    .with(Avp::str(
        code::SESSION_ID,
        "client1.example.org;1700000000;424242;77",
    ))
    .with(Avp::i32(code::DRMP, 4))
    .with(Avp::i32(code::AUTH_SESSION_STATE, 1))
    .with(Avp::u32(code::RESULT_CODE, 2001))
    .with(Avp::str(code::ORIGIN_HOST, "server1.example.net"))
    .with(Avp::str(code::ORIGIN_REALM, "example.net"))
    .with(
        OcSupportedFeatures {
            feature_vector: Some(doic::OLR_DEFAULT_ALGO),
            source_id: None,
            peer_algo: None,
        }
        .to_avp(),
    )
    .with(OcOlr::new(7, ReportType::Host).to_avp());
    m.push(Avp::vendor(
        code::fd_test::TEST_AVP,
        Some(vendor::FD_TEST),
        Value::Integer32(-2500),
    ));
    m.push(Avp::vendor(623, Some(vendor::TGPP), Value::Enumerated(0)));
    m.push(Avp::octets(code::CLASS, &b"class-0123456789abcdef"[..]));
    m.push(Avp::grouped(
        code::PROXY_INFO,
        vec![
            Avp::str(code::PROXY_HOST, "dra1.example.org"),
            Avp::octets(code::PROXY_STATE, &b"\x00\x01\x02\x03\x04\x05"[..]),
        ],
    ));
    m
}

/// The relay's answer path: the checked scan
/// ([`Routing::scan_answer`]) and what the relay reads from an answer;
/// returns a value that depends on what was read.
#[inline]
pub fn relay_answer_path(buf: &[u8]) -> usize {
    match Routing::scan_answer(buf) {
        Ok(r) => {
            r.result_code().map_or(0, |c| c as usize)
                + r.experimental_result_code().map_or(0, |(_, c)| c as usize)
                + usize::from(r.oc_supported_features().is_some())
                + r.oc_olr_count as usize
        }
        Err(_) => 0,
    }
}

/// The full walk: every AVP at every depth, every known value validated.
#[inline]
pub fn full_walk(buf: &[u8]) -> usize {
    validate(buf).map_or(0, |h| h.length as usize)
}

/// Encodes the request into a fresh buffer.
#[inline]
pub fn encode(m: &Message) -> usize {
    m.to_bytes().map_or(0, |b| b.len())
}

/// The anchor: copying the message into a fresh buffer, which any relay
/// does at least once.
#[inline]
pub fn copy_anchor(buf: &[u8]) -> usize {
    buf.to_vec().len()
}
