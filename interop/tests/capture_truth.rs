//! Wire truth, their side: messages from real freeDiameter and Erlang/OTP
//! peers, captured with dumpcap on loopback, decode with the agent's codec
//! (strictly, RFC 6733 §3-4) to the same fields tshark shows: command,
//! flags, identifiers, and every AVP's code, flags, vendor, length, data and
//! typed value, at every depth.

use std::collections::BTreeSet;
use std::time::Duration;

use bytes::Bytes;
use diameter::codec::{CheckOptions, Message, OcOlr, check};
use diameter::dictionary::{cmd, code};
use interop::compare::compare;
use interop::erl::{ErlClient, ErlServer, Olr, ReportType};
use interop::fd::{BenchSpec, FdRelay, FdServer};
use interop::tshark::{Capture, Tshark, WireMessage};

/// Decodes every captured message with our codec and compares it with
/// tshark's decode; returns the set of (command, is_request) seen.
fn check_all(what: &str, msgs: &[WireMessage]) -> BTreeSet<(u32, bool)> {
    assert!(!msgs.is_empty(), "{what}: nothing captured");
    let mut failures = Vec::new();
    let mut seen = BTreeSet::new();
    for w in msgs {
        seen.insert((w.command, w.is_request()));
        if w.malformed {
            failures.push(format!(
                "frame {}: tshark reports a malformed packet",
                w.frame
            ));
            continue;
        }
        // The codec's grammar, dictionary and flag-rule checks must accept
        // what real peers send.
        if let Err(e) = check(&w.raw, CheckOptions::default()) {
            failures.push(format!(
                "frame {} cmd {} request={}: our checks reject it: {e}",
                w.frame,
                w.command,
                w.is_request()
            ));
        }
        match Message::decode(Bytes::from(w.raw.clone())) {
            Err(e) => failures.push(format!(
                "frame {} cmd {}: our codec rejects it: {e}",
                w.frame, w.command
            )),
            Ok(ours) => {
                for m in compare(&ours, w) {
                    failures.push(format!("frame {} cmd {}: {m}", w.frame, w.command));
                }
            }
        }
        if failures.len() > 20 {
            break;
        }
    }
    assert!(failures.is_empty(), "{what}:\n{}", failures.join("\n"));
    seen
}

#[test]
fn freediameter_client_relay_and_server_traffic() {
    let server = FdServer::builder().threads(2).start().unwrap();
    let relay = FdRelay::builder(server.target(), server.realm())
        .threads(2)
        .start()
        .unwrap();
    let ports = [server.port(), relay.port()];
    let cap = Capture::start(&ports, Duration::from_secs(60)).unwrap();
    for (i, target) in [server.target(), relay.target()].into_iter().enumerate() {
        let mut client = BenchSpec::new(target).watchdog(6).connect().unwrap();
        for _ in 0..5 {
            let a = client.send(Duration::from_secs(5)).unwrap();
            assert_eq!(a.result_code, Some(2001));
            assert_eq!(a.origin_host.as_deref(), Some("server1.example.net"));
            assert!(a.echo_ok);
        }
        if i == 0 {
            // Idle past the client's watchdog timer (Tw = 6 s, jitter up
            // to 2 s): it sends DWR (RFC 3539 §3.4.1).
            std::thread::sleep(Duration::from_secs(9));
        }
        // Dropping the client stops it: DPR/DPA (RFC 6733 §5.4).
    }
    let tshark = Tshark::new().port(server.port()).port(relay.port());
    let msgs = cap.finish(&tshark).unwrap();
    let seen = check_all("freeDiameter traffic", &msgs);
    for (c, r) in [
        (cmd::CAPABILITIES_EXCHANGE, true),
        (cmd::CAPABILITIES_EXCHANGE, false),
        (cmd::FD_TEST, true),
        (cmd::FD_TEST, false),
        (cmd::DISCONNECT_PEER, true),
        (cmd::DISCONNECT_PEER, false),
    ] {
        assert!(
            seen.contains(&(c, r)),
            "command {c} request={r} not captured: {seen:?}"
        );
    }
    // The relay adds Route-Record to the requests it forwards (RFC 6733 §6.1.9).
    let relayed_req = msgs.iter().find(|m| {
        m.command == cmd::FD_TEST
            && m.is_request()
            && m.dst_port == server.port()
            && m.avp(code::ROUTE_RECORD, None).is_some()
    });
    assert!(
        relayed_req.is_some(),
        "no relayed Test-Request with Route-Record"
    );
}

#[test]
fn erlang_traffic_with_doic_and_watchdog() {
    let olr = Olr::loss(ReportType::Realm, 25, 3, 60);
    let erl = ErlServer::builder().olr(olr).start().unwrap();
    let fd = FdServer::builder().threads(2).start().unwrap();
    let cap = Capture::start(
        &[erl.target().addr.port(), fd.port()],
        Duration::from_secs(60),
    )
    .unwrap();
    let to_erl = ErlClient::new(&erl.target())
        .n(20)
        .concurrency(2)
        .doic()
        .proxy_info()
        .watchdog(Duration::from_secs(6))
        .linger(Duration::from_millis(9000))
        .run()
        .unwrap();
    assert!(to_erl.all_answered_ok(), "{}", to_erl.output);
    assert_eq!(to_erl.oc_olr, 20, "{}", to_erl.output);
    let to_fd = ErlClient::new(&fd.target())
        .n(20)
        .concurrency(2)
        .run()
        .unwrap();
    assert!(to_fd.all_answered_ok(), "{}", to_fd.output);
    let tshark = Tshark::new().port(erl.target().addr.port()).port(fd.port());
    let msgs = cap.finish(&tshark).unwrap();
    let seen = check_all("Erlang/OTP traffic", &msgs);
    for (c, r) in [
        (cmd::CAPABILITIES_EXCHANGE, true),
        (cmd::CAPABILITIES_EXCHANGE, false),
        (cmd::DEVICE_WATCHDOG, true),
        (cmd::DEVICE_WATCHDOG, false),
        (cmd::FD_TEST, true),
        (cmd::FD_TEST, false),
        (cmd::DISCONNECT_PEER, true),
        (cmd::DISCONNECT_PEER, false),
    ] {
        assert!(
            seen.contains(&(c, r)),
            "command {c} request={r} not captured: {seen:?}"
        );
    }
    // OTP's own encoding of OC-OLR, as tshark reads it.
    let answer = msgs
        .iter()
        .find(|m| {
            m.command == cmd::FD_TEST && !m.is_request() && m.avp(code::OC_OLR, None).is_some()
        })
        .expect("an answer with OC-OLR");
    let olr = answer.avp(code::OC_OLR, None).unwrap();
    let v = |c| olr.child(c, None).and_then(|a| a.value.clone());
    assert_eq!(v(code::OC_SEQUENCE_NUMBER).as_deref(), Some("3"));
    assert_eq!(v(code::OC_REPORT_TYPE).as_deref(), Some("1"));
    assert_eq!(v(code::OC_REDUCTION_PERCENTAGE).as_deref(), Some("25"));
    assert_eq!(v(code::OC_VALIDITY_DURATION).as_deref(), Some("60"));
}

/// The RFC 8581/8582 AVPs as OTP encodes them (OC-Maximum-Rate, SourceID,
/// OC-Peer-Algo, PEER_REPORT) decode the same in our codec and in tshark.
#[test]
fn erlang_rate_peer_report_traffic() {
    let erl = ErlServer::builder()
        .olr(Olr::rate(ReportType::Peer, 1200, 5, 30))
        .start()
        .unwrap();
    let port = erl.target().addr.port();
    let cap = Capture::start(&[port], Duration::from_secs(60)).unwrap();
    let r = ErlClient::new(&erl.target())
        .n(5)
        .concurrency(1)
        .doic_vector(0x15)
        .run()
        .unwrap();
    assert!(r.all_answered_ok(), "{}", r.output);
    let msgs = cap.finish(&Tshark::new().port(port)).unwrap();
    check_all("Erlang/OTP RFC 8581/8582 traffic", &msgs);
    let answer = msgs
        .iter()
        .find(|m| m.command == cmd::FD_TEST && !m.is_request())
        .expect("a Test-Answer");
    assert!(answer.warnings().is_empty(), "{:?}", answer.warnings());
    let olr = answer.avp(code::OC_OLR, None).expect("OC-OLR");
    let v = |c| olr.child(c, None).and_then(|a| a.value.clone());
    assert_eq!(v(code::OC_REPORT_TYPE).as_deref(), Some("2"));
    assert_eq!(v(code::OC_MAXIMUM_RATE).as_deref(), Some("1200"));
    assert_eq!(
        v(code::SOURCE_ID).as_deref(),
        Some("erl-server.example.net")
    );
    // The codec's typed reader agrees with tshark on OTP's encoding.
    let ours = Message::decode(Bytes::from(answer.raw.clone())).unwrap();
    let typed = OcOlr::from_avp(ours.find(code::OC_OLR).unwrap()).unwrap();
    assert_eq!(typed.report_type, diameter::codec::ReportType::Peer);
    assert_eq!(typed.maximum_rate, Some(1200));
    assert_eq!(typed.sequence_number, 5);
    assert_eq!(typed.source_id.as_deref(), Some("erl-server.example.net"));
    let feat = answer
        .avp(code::OC_SUPPORTED_FEATURES, None)
        .expect("OC-Supported-Features");
    assert_eq!(
        feat.child(code::OC_PEER_ALGO, None)
            .and_then(|a| a.value.clone())
            .as_deref(),
        Some("4")
    );
}
