//! The agent as an RFC 6733 relay on real TCP loopback: raw bytes in,
//! answers out.

mod support;

use std::sync::atomic::Ordering;

use diameter::codec::answer::{put_base, put_capabilities};
use diameter::codec::header::{begin, finish};
use diameter::codec::{CommandFlags, Header, Routing};
use diameter::dictionary::{cmd, code};
use support::*;
use tools::loadgen::put_mandatory_avp;
use tools::loadgen::{Client, Identity, TEST_APP};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_is_relayed_with_route_record_and_answer_restores_hop_by_hop() {
    let s = setup(1).await;
    let mut c = s.client().await;
    let req = request(
        0x0102_0304,
        "example.net",
        &[(code::PROXY_INFO, b"\0\0\x01\x18\x40\0\0\x0fproxy.x\0")],
    );
    c.write_raw(&req).await.unwrap();
    let ans = answer(&mut c).await;
    assert_eq!(result_code(&ans), Some(2001), "{ans:?}");
    let (up_req, up_ans) = s.servers[0].stats.last.lock().unwrap().clone().unwrap();
    // Upstream: new Hop-by-Hop, same End-to-End, a Route-Record naming the
    // peer the request came from (RFC 6733 §6.1.9), the rest untouched.
    let h = Header::read(&up_req);
    assert_ne!(h.hop_by_hop, 0x0102_0304);
    assert_eq!(h.end_to_end, 0x0102_0304 + 1000);
    let rr: Vec<&[u8]> = Routing::scan(&up_req).unwrap().route_records().collect();
    assert_eq!(rr, vec![&b"client1.example.org"[..]]);
    assert_eq!(&up_req[20..req.len()], &req[20..]);
    // Downstream: the server's answer byte for byte, but the original
    // Hop-by-Hop Identifier.
    assert_eq!(Header::read(&ans).hop_by_hop, 0x0102_0304);
    assert_eq!(&ans[..12], &up_ans[..12]);
    assert_eq!(&ans[16..], &up_ans[16..]);
    assert_eq!(result_code(&ans), Some(2001));
    // Proxy-Info came back.
    assert_eq!(avps(&ans).filter(|a| a.code == code::PROXY_INFO).count(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_request_is_answered_5014_and_the_connection_stays_up() {
    let s = setup(1).await;
    let mut c = s.client().await;
    let mut bad = request(7, "example.net", &[]);
    // The Destination-Realm AVP (last) claims more bytes than the message has.
    let at = bad.len() - 20;
    bad[at + 7] = 0xf0;
    c.write_raw(&bad).await.unwrap();
    let ans = answer(&mut c).await;
    let h = Header::read(&ans);
    assert_eq!(h.hop_by_hop, 7);
    assert_eq!(h.flags.0 & CommandFlags::REQUEST, 0);
    assert_eq!(
        h.flags.0 & CommandFlags::ERROR,
        0,
        "5014 is a permanent failure, not a protocol error"
    );
    assert_eq!(result_code(&ans), Some(5014));
    let failed = avps(&ans).find(|a| a.code == code::FAILED_AVP);
    let failed = failed.expect("Failed-AVP present");
    assert_eq!(&failed.data[..4], &code::DESTINATION_REALM.to_be_bytes());
    // Still up: the next request is relayed.
    c.write_raw(&request(8, "example.net", &[])).await.unwrap();
    let ans = answer(&mut c).await;
    assert_eq!(
        (Header::read(&ans).hop_by_hop, result_code(&ans)),
        (8, Some(2001))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_route_is_3002_loop_is_3005_missing_realm_is_5005() {
    let s = setup(1).await;
    let mut c = s.client().await;
    c.write_raw(&request(1, "nowhere.example", &[]))
        .await
        .unwrap();
    let ans = answer(&mut c).await;
    assert_eq!(result_code(&ans), Some(3002));
    assert_ne!(
        Header::read(&ans).flags.0 & CommandFlags::ERROR,
        0,
        "3xxx answers carry the E bit"
    );
    assert_eq!(
        Routing::scan(&ans)
            .unwrap()
            .session_id()
            .map(<[u8]>::to_vec),
        Some(b"client1.example.org;1;1".to_vec())
    );

    c.write_raw(&request(
        2,
        "example.net",
        &[(code::ROUTE_RECORD, AGENT.as_bytes())],
    ))
    .await
    .unwrap();
    assert_eq!(result_code(&answer(&mut c).await), Some(3005));

    let mut m = bytes::BytesMut::new();
    let st = begin(
        &mut m,
        CommandFlags::REQUEST | CommandFlags::PROXIABLE,
        1,
        4,
        3,
        3,
    );
    put_mandatory_avp(&mut m, code::SESSION_ID, b"x;1");
    finish(&mut m, st);
    c.write_raw(&m).await.unwrap();
    assert_eq!(result_code(&answer(&mut c).await), Some(5005));
    assert_eq!(
        s.servers[0].stats.requests.load(Ordering::Relaxed),
        0,
        "none of them went upstream"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn destination_host_goes_to_that_peer_only() {
    let s = setup(2).await;
    let mut c = s.client().await;
    for i in 0..20 {
        c.write_raw(&request(
            100 + i,
            "example.net",
            &[(code::DESTINATION_HOST, b"server2.example.net")],
        ))
        .await
        .unwrap();
        assert_eq!(result_code(&answer(&mut c).await), Some(2001));
    }
    assert_eq!(s.servers[0].stats.requests.load(Ordering::Relaxed), 0);
    assert_eq!(s.servers[1].stats.requests.load(Ordering::Relaxed), 20);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn realm_routed_requests_spread_over_both_servers() {
    let s = setup(2).await;
    let mut c = s.client().await;
    let t = tools::loadgen::Traffic {
        destination_realm: "example.net".into(),
        destination_host: None,
    };
    let stop = std::sync::atomic::AtomicBool::new(false);
    let r = c
        .run(
            &t,
            tools::loadgen::Pace::Closed(16),
            std::time::Duration::from_millis(500),
            std::time::Duration::from_secs(2),
            &stop,
        )
        .await
        .unwrap();
    assert_eq!(r.sent, r.answered);
    assert_eq!(r.by_code.get(&2001), Some(&r.sent));
    let a = s.servers[0].stats.requests.load(Ordering::Relaxed);
    let b = s.servers[1].stats.requests.load(Ordering::Relaxed);
    assert_eq!(a + b, r.sent);
    assert!(a > r.sent / 20 && b > r.sent / 20, "{a} vs {b}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_peer_is_refused_with_3010_and_closed() {
    let s = setup(1).await;
    let mut c = Client::connect(
        s.addr,
        Identity::new("intruder.example.bad", "example.bad"),
        vec![TEST_APP],
    )
    .await
    .unwrap();
    assert_eq!(c.cea_result, 3010);
    let end = tokio::time::timeout(std::time::Duration::from_secs(5), c.read_message())
        .await
        .unwrap();
    assert!(end.is_err(), "the agent closes the connection");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_common_application_is_refused_with_5010() {
    let servers = servers(1, Default::default()).await;
    let config = config_for(&servers, "applications = [16777215]");
    let s = start(servers, config).await;
    let c = Client::connect(
        s.addr,
        Identity::new("client1.example.org", "example.org"),
        vec![4],
    )
    .await
    .unwrap();
    assert_eq!(c.cea_result, 5010);
    let c = Client::connect(
        s.addr,
        Identity::new("client2.example.org", "example.org"),
        vec![TEST_APP],
    )
    .await
    .unwrap();
    assert_eq!(c.cea_result, 2001);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_answers_dwr_and_dpr() {
    let s = setup(1).await;
    let mut c = s.client().await;
    let mut m = bytes::BytesMut::new();
    put_base(
        &mut m,
        cmd::DEVICE_WATCHDOG,
        ("client1.example.org", "example.org"),
        None,
        55,
        None,
    );
    c.write_raw(&m).await.unwrap();
    let a = answer(&mut c).await;
    assert_eq!(
        (
            Header::read(&a).command_code,
            Header::read(&a).hop_by_hop,
            result_code(&a)
        ),
        (cmd::DEVICE_WATCHDOG, 55, Some(2001))
    );
    m.clear();
    put_base(
        &mut m,
        cmd::DISCONNECT_PEER,
        ("client1.example.org", "example.org"),
        None,
        56,
        Some(0),
    );
    c.write_raw(&m).await.unwrap();
    let a = answer(&mut c).await;
    assert_eq!(
        (Header::read(&a).command_code, result_code(&a)),
        (cmd::DISCONNECT_PEER, Some(2001))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e_bit_on_a_request_is_answered_3008_with_the_e_bit() {
    let s = setup(1).await;
    let mut c = s.client().await;
    let mut m = request(11, "example.net", &[]);
    m[4] |= CommandFlags::ERROR;
    c.write_raw(&m).await.unwrap();
    let ans = answer(&mut c).await;
    assert_eq!(result_code(&ans), Some(3008));
    assert_ne!(Header::read(&ans).flags.0 & CommandFlags::ERROR, 0);
    c.write_raw(&request(12, "example.net", &[])).await.unwrap();
    assert_eq!(result_code(&answer(&mut c).await), Some(2001));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relays_over_ipv6() {
    if std::net::TcpListener::bind("[::1]:0").is_err() {
        eprintln!("no IPv6 loopback here; skipped");
        return;
    }
    let id = Identity::new("server1.example.net", "example.net");
    let server = tools::loadgen::Server::spawn("[::1]:0".parse().unwrap(), id, Default::default())
        .await
        .unwrap();
    let text = format!(
        "[node]\norigin_host = \"{AGENT}\"\norigin_realm = \"example.com\"\nlisten = [\"[::1]:0\"]\nworkers = 1\n[[peer]]\nhost = \"server1.example.net\"\nrealm = \"example.net\"\nconnect = \"{}\"\n[[route]]\nrealm = \"example.net\"\npeers = [\"server1.example.net\"]\n[accept]\nhosts = [\"*.example.org\"]\n",
        server.addr
    );
    let config =
        agent::config::Config::from_str_named(&text, std::path::Path::new("v6.toml")).unwrap();
    let s = start(vec![server], config).await;
    assert!(s.addr.is_ipv6());
    let mut c = s.client().await;
    c.write_raw(&request(21, "example.net", &[])).await.unwrap();
    assert_eq!(result_code(&answer(&mut c).await), Some(2001));
    // The agent advertised its real (IPv6) address in the CER it sent
    // upstream (RFC 6733 §5.3.5 Host-IP-Address).
    let caps = s.servers[0]
        .stats
        .peer_capabilities
        .lock()
        .unwrap()
        .clone()
        .unwrap();
    assert_eq!(
        caps.host_ip_addresses,
        vec!["::1".parse::<std::net::IpAddr>().unwrap()]
    );
    assert_eq!(caps.origin_host, AGENT);
    assert_eq!(
        caps.auth_application_ids,
        vec![0xffff_ffff],
        "Relay application"
    );
    assert_eq!(caps.product_name, "doic-agent");
    assert!(caps.firmware_revision.is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_load_one_socket_call_carries_many_messages() {
    let s = setup(1).await;
    let mut c = s.client().await;
    let t = tools::loadgen::Traffic {
        destination_realm: "example.net".into(),
        destination_host: None,
    };
    let stop = std::sync::atomic::AtomicBool::new(false);
    let io = s.agent().io();
    let before = (
        io.reads.load(Ordering::Relaxed),
        io.messages_read.load(Ordering::Relaxed),
        io.writes.load(Ordering::Relaxed),
        io.bytes_written.load(Ordering::Relaxed),
    );
    let r = c
        .run(
            &t,
            tools::loadgen::Pace::Closed(256),
            std::time::Duration::from_millis(700),
            std::time::Duration::from_secs(5),
            &stop,
        )
        .await
        .unwrap();
    assert_eq!(r.sent, r.answered);
    let reads = io.reads.load(Ordering::Relaxed) - before.0;
    let msgs = io.messages_read.load(Ordering::Relaxed) - before.1;
    let writes = io.writes.load(Ordering::Relaxed) - before.2;
    let bytes = io.bytes_written.load(Ordering::Relaxed) - before.3;
    // Requests in from the client and answers in from the server.
    assert!(
        msgs >= 2 * r.sent,
        "{msgs} messages read for {} requests",
        r.sent
    );
    let per_read = msgs as f64 / reads as f64;
    let per_write = bytes as f64 / writes as f64;
    eprintln!(
        "{reads} reads carried {msgs} messages ({per_read:.1} each); {writes} writes carried {bytes} bytes ({per_write:.0} each)"
    );
    let msg_len = 140.0; // a test request or answer is 140-200 bytes
    assert!(per_read >= 4.0, "{per_read:.1} messages per read");
    assert!(per_write >= 4.0 * msg_len, "{per_write:.0} bytes per write");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cer_on_an_open_connection_is_answered_5012_and_the_connection_stays() {
    let s = setup(1).await;
    let mut c = s.client().await;
    let caps = diameter::codec::Capabilities {
        origin_host: "client1.example.org".into(),
        origin_realm: "example.org".into(),
        ..Default::default()
    };
    let mut m = bytes::BytesMut::new();
    put_capabilities(&mut m, &caps, None, 77);
    c.write_raw(&m).await.unwrap();
    let a = answer(&mut c).await;
    assert_eq!(
        (Header::read(&a).command_code, Header::read(&a).hop_by_hop),
        (cmd::CAPABILITIES_EXCHANGE, 77)
    );
    assert_eq!(result_code(&a), Some(5012));
    c.write_raw(&request(78, "example.net", &[])).await.unwrap();
    assert_eq!(result_code(&answer(&mut c).await), Some(2001));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_never_takes_the_agent_down() {
    let s = setup(1).await;
    // A small deterministic generator: junk of every length, some of it
    // starting like a Diameter header.
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for round in 0..200u32 {
        let mut c = s.client().await;
        let len = (round as usize * 7) % 300 + 1;
        let mut junk = Vec::with_capacity(len + 20);
        if round % 2 == 0 {
            // Plausible header: version 1, length covering the junk, request.
            let total = (len + 20) as u32;
            junk.extend_from_slice(&(0x0100_0000 | total).to_be_bytes());
            junk.extend_from_slice(&[
                0xc0, 0xff, 0xff, 0xfe, 0, 0xff, 0xff, 0xff, 0, 0, 0, 1, 0, 0, 0, 1,
            ]);
        }
        for _ in 0..len {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            junk.push(x as u8);
        }
        c.write_raw(&junk).await.unwrap();
        // Either an answer or a closed connection, within the bound.
        let _ = tokio::time::timeout(std::time::Duration::from_secs(5), c.read_message())
            .await
            .expect("the agent answers or closes, it does not hang");
        // One connection per peer (RFC 6733 §5.6.4): before the same client
        // connects again, the agent must have seen this connection end.
        drop(c);
        let table = s.agent().peers().clone();
        wait_until(std::time::Duration::from_secs(5), || {
            table
                .all()
                .iter()
                .all(|(_, p)| p.host != "client1.example.org" || !p.has_connection())
        })
        .await;
    }
    // Still relaying.
    let mut c = s.client().await;
    c.write_raw(&request(1, "example.net", &[])).await.unwrap();
    assert_eq!(result_code(&answer(&mut c).await), Some(2001));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unframeable_stream_is_answered_5011_then_closed() {
    let s = setup(1).await;
    let mut c = s.client().await;
    let mut m = request(31, "example.net", &[]);
    m[0] = 2; // version 2: the stream cannot be framed (RFC 6733 §3)
    c.write_raw(&m).await.unwrap();
    let a = answer(&mut c).await;
    assert_eq!(
        (Header::read(&a).hop_by_hop, result_code(&a)),
        (31, Some(5011))
    );
    let end = tokio::time::timeout(std::time::Duration::from_secs(5), c.read_message())
        .await
        .unwrap();
    assert!(end.is_err(), "then the connection is closed");
}

/// `n` requests on `c`, each answered 2001 before the next is written.
async fn relay_one_at_a_time(c: &mut Client, n: u32) {
    for hbh in 1..=n {
        c.write_raw(&request(hbh, "example.net", &[]))
            .await
            .unwrap();
        let ans = answer(c).await;
        assert_eq!(
            (Header::read(&ans).hop_by_hop, result_code(&ans)),
            (hbh, Some(2001))
        );
    }
}

/// Connection placement (`Workers::spawn_accepted`, docs/relay.md
/// "Throughput and cores"): on two workers, a lone client runs on the worker
/// of the upstream connection (peer 0's dial loop, worker 0), so its
/// requests and answers cross no thread, however many clients came and went
/// before it; a second client at the same time goes to the other worker,
/// and each of its requests crosses twice (RFC 6733 §2.1: one connection to
/// the server carries them all).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lone_client_shares_the_worker_of_its_upstream_connection() {
    let s = setup(1).await;
    let agent = s.agent();
    let io = agent.io();
    let conns = |w: usize, side: &str| {
        metric(
            agent,
            &format!("doic_worker_connections{{worker=\"{w}\",side=\"{side}\"}}"),
        )
    };
    assert_eq!(
        (conns(0, "dialed"), conns(1, "dialed")),
        (Some(1.0), Some(0.0))
    );
    for round in 0..3 {
        let mut c = s.client().await;
        assert_eq!(conns(0, "accepted"), Some(1.0), "round {round}");
        let before = io.handoffs.load(Ordering::Relaxed);
        relay_one_at_a_time(&mut c, 50).await;
        assert_eq!(
            io.handoffs.load(Ordering::Relaxed) - before,
            0,
            "round {round}: a lone client's requests crossed workers"
        );
        c.disconnect().await.unwrap();
        wait_until(std::time::Duration::from_secs(5), || {
            conns(0, "accepted") == Some(0.0)
        })
        .await;
    }
    let mut first = s.client().await;
    let mut second = Client::connect(
        s.addr,
        Identity::new("client2.example.org", "example.org"),
        vec![TEST_APP],
    )
    .await
    .unwrap();
    assert_eq!(second.cea_result, 2001);
    assert_eq!(
        (conns(0, "accepted"), conns(1, "accepted")),
        (Some(1.0), Some(1.0))
    );
    let before = io.handoffs.load(Ordering::Relaxed);
    relay_one_at_a_time(&mut first, 50).await;
    assert_eq!(io.handoffs.load(Ordering::Relaxed) - before, 0);
    relay_one_at_a_time(&mut second, 50).await;
    assert_eq!(
        io.handoffs.load(Ordering::Relaxed) - before,
        100,
        "the second client's 50 requests and 50 answers crossed"
    );
}
