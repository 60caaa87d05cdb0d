//! On real TCP loopback, with two workers: answers from upstream are checked
//! at least as strictly as requests (a malformed one is never forwarded, its
//! request is answered 3002 by the agent), requests without Origin-Host or
//! Origin-Realm are answered 5005, and a request whose Destination-Host is
//! the agent is answered locally (RFC 6733 §6.1.4), not relayed.

mod support;

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bytes::BytesMut;
use diameter::codec::Routing;
use diameter::codec::header::{begin, finish};
use diameter::codec::{CommandFlags, Header};
use diameter::dictionary::code;
use support::*;
use tools::loadgen::put_mandatory_avp;
use tools::loadgen::{Malformed, Pace, ServerBehaviour, Traffic};

fn traffic() -> Traffic {
    Traffic {
        destination_realm: "example.net".into(),
        destination_host: None,
    }
}

/// The Error-Message of an answer.
fn error_message(m: &[u8]) -> String {
    avps(m)
        .find(|a| a.code == code::ERROR_MESSAGE)
        .map(|a| String::from_utf8_lossy(a.data).into_owned())
        .unwrap_or_default()
}

/// The Failed-AVP's first AVP code.
fn failed_avp_code(m: &[u8]) -> Option<u32> {
    let f = avps(m).find(|a| a.code == code::FAILED_AVP)?;
    let d = f.data;
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
            let h = Header::read(&ans);
            assert!(
                seen.insert(h.hop_by_hop),
                "{defect:?}: one answer per request"
            );
            assert_eq!(
                h.end_to_end,
                h.hop_by_hop + 1000,
                "{defect:?}: the client's End-to-End"
            );
            Routing::scan_answer(&ans).expect("a well-formed answer");
            assert_eq!(result_code(&ans), Some(3002), "{defect:?}");
            assert_ne!(
                h.flags.0 & CommandFlags::ERROR,
                0,
                "{defect:?}: 3002 has the E bit"
            );
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

        let sources = s.agent().metrics().clone();
        let (_, slot) = &s.agent().peers().all()[0];
        let counted = slot.stats.answers_malformed.snapshot();
        assert_eq!(
            counted.into_iter().collect::<Vec<_>>(),
            vec![(code, 40 + r.sent)],
            "{defect:?}: counted per peer by the defect's Result-Code"
        );
        let page = agent::metrics::render(&sources);
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
    let h = Header::read(&full);
    let mut out = BytesMut::new();
    let (cmd, app) = (h.command_code, h.application_id);
    let s = begin(&mut out, h.flags.0, cmd, app, h.hop_by_hop, h.end_to_end);
    for a in avps(&full) {
        if a.code != missing {
            put_mandatory_avp(&mut out, a.code, a.data);
        }
    }
    finish(&mut out, s);
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_without_origin_are_5005_and_for_the_agent_are_answered_locally() {
    let s = setup(1).await;
    let mut c = s.client().await;
    let mut burst = BytesMut::new();
    burst.extend_from_slice(&request_without(1, code::ORIGIN_HOST));
    burst.extend_from_slice(&request_without(2, code::ORIGIN_REALM));
    burst.extend_from_slice(&request(
        3,
        "example.net",
        &[(code::ORIGIN_HOST, b"second.example.org")],
    ));
    burst.extend_from_slice(&request(
        4,
        "example.net",
        &[(code::DESTINATION_HOST, AGENT.to_uppercase().as_bytes())],
    ));
    c.write_raw(&burst).await.unwrap();
    let mut got = Vec::new();
    for _ in 0..4 {
        let ans = answer(&mut c).await;
        Routing::scan_answer(&ans).expect("a well-formed answer");
        got.push((
            Header::read(&ans).hop_by_hop,
            result_code(&ans),
            failed_avp_code(&ans),
        ));
        if Header::read(&ans).hop_by_hop == 4 {
            assert!(
                error_message(&ans).contains("agent itself"),
                "{}",
                error_message(&ans)
            );
            assert_ne!(
                Header::read(&ans).flags.0 & CommandFlags::ERROR,
                0,
                "3007 has the E bit"
            );
        }
    }
    got.sort_unstable();
    assert_eq!(
        got,
        vec![
            (1, Some(5005), Some(code::ORIGIN_HOST)),
            (2, Some(5005), Some(code::ORIGIN_REALM)),
            (3, Some(5009), Some(code::ORIGIN_HOST)),
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
    assert_eq!(
        (Header::read(&ans).hop_by_hop, result_code(&ans)),
        (5, Some(2001))
    );
}
