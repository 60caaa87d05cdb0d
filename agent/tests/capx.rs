//! RFC 6733 §5.3 capabilities exchange on real TCP loopback: a CER that
//! breaks its grammar is answered with the defect and closed; a peer that
//! closes and reconnects at once is never refused 4003 (§5.6.4).

mod support;

use std::time::Duration;

use bytes::Bytes;
use diameter::codec::{Avp, Message, builder};
use diameter::dictionary::code;
use support::*;
use tools::loadgen::{Client, Identity, TEST_APP};

/// A CER from `client1.example.org`, AVPs with code `drop` left out, `extra`
/// inserted at `at`.
fn cer(drop: u32, at: usize, extra: Vec<Avp>) -> Vec<u8> {
    let caps = builder::Capabilities {
        origin_host: "client1.example.org".into(),
        origin_realm: "example.org".into(),
        host_ip_addresses: vec!["127.0.0.1".parse().unwrap()],
        product_name: "test".into(),
        auth_application_ids: vec![TEST_APP],
        ..Default::default()
    };
    let mut m: Message = builder::cer(&caps, 1, 2);
    m.avps.retain(|a| a.code != drop);
    for (i, a) in extra.into_iter().enumerate() {
        m.avps.insert(at + i, a);
    }
    m.to_bytes().unwrap().to_vec()
}

fn host(h: &str) -> Avp {
    Avp::str(code::ORIGIN_HOST, h)
}

/// Sends `cer`, expects a CEA with `rc`, Error-Message and Failed-AVP, then
/// the end of the connection; returns the Failed-AVP's content.
async fn refused(s: &Setup, cer: &[u8], rc: u32) -> Bytes {
    let id = Identity::new("client1.example.org", "example.org");
    let mut c = Client::connect_with_cer(s.addr, id, cer).await.unwrap();
    assert_eq!(c.cea_result, rc);
    let cea = Message::decode(c.cea.clone()).unwrap();
    assert!(cea.find(code::ERROR_MESSAGE).is_some(), "{cea:?}");
    let end = tokio::time::timeout(Duration::from_secs(5), c.read_message())
        .await
        .expect("the agent closes the connection");
    assert!(end.is_err(), "then the connection is closed");
    // no identity was taken from the refused CER
    assert!(
        s.agent()
            .peers()
            .all()
            .iter()
            .all(|(_, p)| !p.has_connection() || p.host.starts_with("server")),
        "a refused CER opens no peer"
    );
    match cea.find(code::FAILED_AVP).map(|a| &a.data) {
        Some(diameter::codec::AvpData::Bytes(b)) => b.clone(),
        other => panic!("Failed-AVP expected, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cer_with_two_origin_hosts_is_refused_5009_and_closed() {
    let s = setup(1).await;
    let failed = refused(&s, &cer(0, 1, vec![host("client2.example.org")]), 5009).await;
    // the second occurrence, as Failed-AVP holds it
    assert_eq!(&failed[..4], &code::ORIGIN_HOST.to_be_bytes());
    assert!(failed.windows(19).any(|w| w == b"client2.example.org"));

    // The case: an unacceptable name first, 63 acceptable ones after.
    let mut names = vec![host("evil.attacker.net")];
    names.extend((0..63).map(|i| host(&format!("c{i}.example.org"))));
    let failed = refused(&s, &cer(code::ORIGIN_HOST, 0, names), 5009).await;
    assert!(failed.windows(14).any(|w| w == b"c0.example.org"));

    // A well-formed CER from the same client is still accepted.
    let c = s.client().await;
    assert_eq!(c.cea_result, 2001);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cer_without_origin_realm_is_refused_5005_and_closed() {
    let s = setup(1).await;
    let failed = refused(&s, &cer(code::ORIGIN_REALM, 0, vec![]), 5005).await;
    // an example of the missing AVP: Origin-Realm's header
    assert_eq!(&failed[..4], &code::ORIGIN_REALM.to_be_bytes());
}

/// Connect, CER, one request, close, reconnect at once: the old connection
/// may still be registered on the other worker when the new CER arrives.
/// Four such clients run side by side, so the workers are busy when it does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn immediate_reconnects_are_never_refused_4003() {
    let servers = servers(1, Default::default()).await;
    let mut config = config_for(&servers, "");
    config.node.workers = None; // the default: one worker per core
    let s = start(servers, config).await;
    let mut loops = Vec::new();
    for n in 1..=4 {
        let addr = s.addr;
        loops.push(tokio::spawn(async move {
            let mut codes = std::collections::BTreeMap::<u32, u32>::new();
            for i in 0..50u32 {
                let id = Identity::new(&format!("client{n}.example.org"), "example.org");
                let mut c = Client::connect(addr, id, vec![TEST_APP]).await.unwrap();
                *codes.entry(c.cea_result).or_default() += 1;
                if c.cea_result == 2001 {
                    c.write_raw(&request(i, "example.net", &[])).await.unwrap();
                    assert_eq!(result_code(&answer(&mut c).await), Some(2001));
                }
            }
            codes
        }));
    }
    for l in loops {
        assert_eq!(l.await.unwrap(), [(2001, 50)].into(), "CEA Result-Codes");
    }
}

/// RFC 6733 §5.6 R-Conn-CER in R-Open: a second connection of a peer whose
/// connection is open and alive is still refused 4003; the first one stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_connection_to_a_live_peer_is_refused_4003() {
    let s = setup(1).await;
    let mut first = s.client().await;
    let id = Identity::new("client1.example.org", "example.org");
    let second = Client::connect(s.addr, id, vec![TEST_APP]).await.unwrap();
    assert_eq!(second.cea_result, 4003);
    first
        .write_raw(&request(1, "example.net", &[]))
        .await
        .unwrap();
    assert_eq!(result_code(&answer(&mut first).await), Some(2001));
}
