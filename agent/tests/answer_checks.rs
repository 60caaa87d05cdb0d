//! On real TCP loopback, with two workers: answers from upstream are checked
//! at least as strictly as requests (a malformed one is never forwarded, its
//! request is answered 3002 by the agent), requests without Origin-Host or
//! Origin-Realm are answered 5005, and a request whose Destination-Host is
//! the agent is answered locally (RFC 6733 §6.1.4), not relayed.

mod common;

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bytes::BytesMut;
use common::*;
use diameter::codec::Routing;
use diameter::wire::{self, Head, avp, flags};
use tools::loadgen::{Malformed, Pace, ServerBehaviour, Traffic};

fn traffic() -> Traffic {
    Traffic {
        destination_realm: "example.net".into(),
        destination_host: None,
    }
}

/// The Error-Message of an answer.
fn error_message(m: &[u8]) -> String {
    wire::avps(m, 20, m.len())
        .map(Result::unwrap)
        .find(|a| a.code == avp::ERROR_MESSAGE)
        .map(|a| String::from_utf8_lossy(wire::slice(m, a.data)).into_owned())
        .unwrap_or_default()
}

/// The Failed-AVP's first AVP code.
fn failed_avp_code(m: &[u8]) -> Option<u32> {
    let f = wire::avps(m, 20, m.len())
        .map(Result::unwrap)
        .find(|a| a.code == avp::FAILED_AVP)?;
    let d = wire::slice(m, f.data);
    Some(u32::from_be_bytes(d[..4].try_into().unwrap()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_answers_are_never_forwarded_and_each_request_gets_one_3002() {
    for (defect, code) in [
        (Malformed::ResultCodeLength, 5014),
        (Malformed::TruncatedAvp, 5014),
        (Malformed::NoResultCode, 5005),
        (Malformed::TwoOriginHosts, 5009),
    ] {
        let behaviour = ServerBehaviour {
            malformed: Some(defect),
            ..Default::default()
        };
        let servers = servers(1, behaviour).await;
        let config = config_for(&servers, "");
        let s = start(servers, config).await;
        let mut c = s.client().await;

        // A burst: 40 requests in one write, each answered once.
        let mut burst = BytesMut::new();
        for hbh in 1..=40 {
            burst.extend_from_slice(&request(hbh, "example.net", &[]));
        }
        c.write_raw(&burst).await.unwrap();
        let mut seen = HashSet::new();
        for _ in 1..=40 {
            let ans = answer(&mut c).await;
            let h = Head::read(&ans);
            assert!(seen.insert(h.hbh), "{defect:?}: one answer per request");
            assert_eq!(h.e2e, h.hbh + 1000, "{defect:?}: the client's End-to-End");
            Routing::scan_answer(&ans).expect("a well-formed answer");
            assert_eq!(result_code(&ans), Some(3002), "{defect:?}");
            assert_ne!(h.flags & flags::ERROR, 0, "{defect:?}: 3002 has the E bit");
            let why = error_message(&ans);
            assert!(
                why.contains("server1.example.net") && why.contains("malformed answer"),
                "{defect:?}: {why}"
            );
            let origin = Routing::scan(&ans).unwrap().origin_host().unwrap().to_vec();
            assert_eq!(
                origin,
                AGENT.as_bytes(),
                "{defect:?}: the agent's own answer"
            );
        }
        assert_eq!(seen, (1..=40).collect(), "{defect:?}");

        // Under closed-loop load: sent == answered, none malformed.
        let stop = AtomicBool::new(false);
        let r = c
            .run(
                &traffic(),
                Pace::Closed(32),
                Duration::from_millis(300),
                Duration::from_secs(8),
                &stop,
            )
            .await
            .unwrap();
        assert!(r.sent > 32, "{defect:?}: load ran: {r:?}");
        assert_eq!(r.sent, r.answered, "{defect:?}: every request answered");
        assert_eq!((r.unmatched, r.malformed), (0, 0), "{defect:?}: {r:?}");
        assert_eq!(r.by_code.get(&3002), Some(&r.sent), "{defect:?}: {r:?}");

        let shared = s.agent().shared().clone();
        let (_, slot) = &shared.table.all()[0];
        let counted = slot.stats.answers_malformed.lock().unwrap().clone();
        assert_eq!(
            counted.into_iter().collect::<Vec<_>>(),
            vec![(code, 40 + r.sent)],
            "{defect:?}: counted per peer by the defect's Result-Code"
        );
        let page = agent::metrics::render(&shared);
        let line = format!(
            "doic_peer_answers_malformed_total{{peer=\"server1.example.net\",result_code=\"{code}\"}} {}",
            40 + r.sent
        );
        assert!(page.contains(&line), "{defect:?}: {line} in the metrics");
    }
}

/// The usual test request without its `missing` AVP.
fn request_without(hbh: u32, missing: u32) -> BytesMut {
    let full = request(hbh, "example.net", &[]);
    let h = Head::read(&full);
    let mut out = BytesMut::new();
    let s = wire::begin(&mut out, h.flags, h.cmd, h.app, h.hbh, h.e2e);
    for a in wire::avps(&full, 20, full.len()).map(Result::unwrap) {
        if a.code != missing {
            wire::put_avp(&mut out, a.code, wire::slice(&full, a.data));
        }
    }
    wire::finish(&mut out, s);
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_without_origin_are_5005_and_for_the_agent_are_answered_locally() {
    let s = setup(1).await;
    let mut c = s.client().await;
    let mut burst = BytesMut::new();
    burst.extend_from_slice(&request_without(1, avp::ORIGIN_HOST));
    burst.extend_from_slice(&request_without(2, avp::ORIGIN_REALM));
    burst.extend_from_slice(&request(
        3,
        "example.net",
        &[(avp::ORIGIN_HOST, b"second.example.org")],
    ));
    burst.extend_from_slice(&request(
        4,
        "example.net",
        &[(avp::DESTINATION_HOST, AGENT.to_uppercase().as_bytes())],
    ));
    c.write_raw(&burst).await.unwrap();
    let mut got = Vec::new();
    for _ in 0..4 {
        let ans = answer(&mut c).await;
        Routing::scan_answer(&ans).expect("a well-formed answer");
        got.push((
            Head::read(&ans).hbh,
            result_code(&ans),
            failed_avp_code(&ans),
        ));
        if Head::read(&ans).hbh == 4 {
            assert!(
                error_message(&ans).contains("agent itself"),
                "{}",
                error_message(&ans)
            );
            assert_ne!(
                Head::read(&ans).flags & flags::ERROR,
                0,
                "3007 has the E bit"
            );
        }
    }
    got.sort_unstable();
    assert_eq!(
        got,
        vec![
            (1, Some(5005), Some(avp::ORIGIN_HOST)),
            (2, Some(5005), Some(avp::ORIGIN_REALM)),
            (3, Some(5009), Some(avp::ORIGIN_HOST)),
            (4, Some(3007), None),
        ]
    );
    assert_eq!(
        s.servers[0].stats.requests.load(Ordering::Relaxed),
        0,
        "none of them went upstream"
    );
    // The connection stays up: the next request is relayed.
    c.write_raw(&request(5, "example.net", &[])).await.unwrap();
    let ans = answer(&mut c).await;
    assert_eq!((Head::read(&ans).hbh, result_code(&ans)), (5, Some(2001)));
}
