//! RFC 6733 §13 TLS/TCP over real loopback connections, with the default
//! worker count: two agents relaying over TLS with mutual authentication
//! (one's TLS listener, the other's TLS `[[peer]]`), clients in bursts; a
//! client whose certificate names another host refused with 3010 and
//! closed; unknown CAs and expired certificates refused in the handshake,
//! on both sides; TLS 1.2 and 1.3 each; certificates reloaded for new
//! connections; check-config naming a bad file.

mod support;

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use agent::agent::Agent;
use agent::config::Config;
use agent::peer::table::state;
use agent::routing::PeerView;
use bytes::BytesMut;
use diameter::codec::Header;
use diameter::dictionary::code;
use support::pki::{Leaf, LeafKind, Pki};
use support::tls::{ClientSide, exchange_on, tls_connect, tls_exchange};
use support::*;
use tools::loadgen::ServerBehaviour;

const TLS12: &[&rustls::SupportedProtocolVersion] = &[&rustls::version::TLS12];
const TLS13: &[&rustls::SupportedProtocolVersion] = &[&rustls::version::TLS13];
const BOTH: &[&rustls::SupportedProtocolVersion] =
    &[&rustls::version::TLS12, &rustls::version::TLS13];

const EDGE: &str = "agent-b.example.com";

fn parse(t: &str) -> Config {
    let c = Config::from_str_named(t, Path::new("tls.toml")).unwrap();
    c.check_runnable(Path::new("tls.toml")).unwrap();
    c
}

/// The agent `EDGE` with a TLS listener (`tls`), routing example.net to
/// `server`, accepting `AGENT` and `*.example.org`.
fn edge_config(tls: &str, server: SocketAddr) -> Config {
    parse(&format!(
        "[node]\norigin_host = \"{EDGE}\"\norigin_realm = \"example.com\"\n\
         listen = [{{ addr = \"127.0.0.1:0\", tls = {tls} }}]\n\
         tc_seconds = 0.2\ntw_seconds = 6\ndrain_seconds = 2\nrequest_timeout_seconds = 5\n\
         [[peer]]\nhost = \"server1.example.net\"\nrealm = \"example.net\"\nconnect = \"{server}\"\n\
         [[peer]]\nhost = \"{AGENT}\"\nrealm = \"example.com\"\n\
         [[route]]\nrealm = \"example.net\"\npeers = [\"server1.example.net\"]\n\
         [accept]\nhosts = [\"*.example.org\"]\n"
    ))
}

/// The agent `AGENT`, plain listener for clients, dialling `EDGE` at
/// `edge` with TLS (`tls`), routing example.net there.
fn front_config(tls: &str, edge: SocketAddr) -> Config {
    parse(&format!(
        "[node]\norigin_host = \"{AGENT}\"\norigin_realm = \"example.com\"\nlisten = [\"127.0.0.1:0\"]\n\
         tc_seconds = 0.2\ntw_seconds = 6\ndrain_seconds = 2\nrequest_timeout_seconds = 5\n\
         [[peer]]\nhost = \"{EDGE}\"\nrealm = \"example.net\"\nconnect = \"{edge}\"\ntls = {tls}\n\
         [[route]]\nrealm = \"example.net\"\npeers = [\"{EDGE}\"]\n\
         [accept]\nhosts = [\"*.example.org\"]\n"
    ))
}

/// The edge agent with `tls` on its listener in front of one server; waits
/// until the server is up.
async fn edge(tls: &str) -> (Agent, tools::loadgen::Server) {
    let mut s = servers(1, ServerBehaviour::default()).await;
    let server = s.remove(0);
    let agent = start_agent(edge_config(tls, server.addr), 1).await;
    (agent, server)
}

fn trusts<'a>(leaf: &'a Leaf, ca: &'a Path) -> ClientSide<'a> {
    ClientSide {
        ca,
        leaf: Some(leaf),
        versions: BOTH,
        server: EDGE,
    }
}

fn slot_state(a: &Agent, host: &str) -> (u8, Option<String>) {
    let id = a.peers().by_host(host).unwrap();
    let slot = a.peers().get(id).unwrap();
    (slot.state(), slot.down_cause())
}

/// Sends `n` requests in writes of `burst` and checks each gets its 2001.
async fn burst_through(addr: SocketAddr, n: u32, burst: u32) {
    let mut c = connect(addr).await;
    let mut answered = vec![false; n as usize];
    let mut hbh = 0;
    while hbh < n {
        let mut out = BytesMut::new();
        for _ in 0..burst.min(n - hbh) {
            out.extend_from_slice(&request(hbh, "example.net", &[]));
            hbh += 1;
        }
        c.write_raw(&out).await.unwrap();
    }
    for _ in 0..n {
        let a = answer(&mut c).await;
        assert_eq!(result_code(&a), Some(2001));
        let h = Header::read(&a).hop_by_hop as usize;
        assert!(!answered[h], "one answer per request");
        answered[h] = true;
    }
    assert!(answered.iter().all(|a| *a));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_agents_relay_over_tls_with_mutual_authentication() {
    let pki = Pki::new("mutual");
    let edge_leaf = pki.leaf("edge", EDGE, LeafKind::default());
    let front_leaf = pki.leaf("front", AGENT, LeafKind::default());
    let (b, server) = edge(&edge_leaf.toml(&pki.ca(), None)).await;
    let tls_addr = b.local_addrs()[0];
    let a = start_agent(front_config(&front_leaf.toml(&pki.ca(), None), tls_addr), 1).await;
    wait_open(&b, 2).await;
    burst_through(a.local_addrs()[0], 1000, 50).await;
    // Requests longer than a TLS record (16 KiB) cross the TLS hop whole.
    let mut c = connect(a.local_addrs()[0]).await;
    let long = vec![b'u'; 200 * 1024];
    let mut out = BytesMut::new();
    for hbh in 0..5 {
        out.extend_from_slice(&request(hbh, "example.net", &[(code::USER_NAME, &long)]));
    }
    c.write_raw(&out).await.unwrap();
    for _ in 0..5 {
        assert_eq!(result_code(&answer(&mut c).await), Some(2001));
    }
    // The hop between the agents is TLS: a plain CER to the TLS listener
    // is no TLS ClientHello and gets no CEA.
    let plain = tools::loadgen::Client::connect(
        tls_addr,
        tools::loadgen::Identity::new(CLIENT, "example.org"),
        vec![tools::loadgen::TEST_APP],
    )
    .await;
    assert!(
        plain.is_err(),
        "cleartext Diameter is not answered on a TLS listener"
    );
    // A client certificate is required where `ca` is set.
    let anonymous = ClientSide {
        ca: &pki.ca(),
        leaf: None,
        versions: BOTH,
        server: EDGE,
    };
    assert!(
        tls_exchange(tls_addr, &anonymous, CLIENT, false)
            .await
            .is_err()
    );
    stop(a);
    stop(b);
    server.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_naming_another_host_is_refused_3010_and_closed() {
    let pki = Pki::new("names");
    let edge_leaf = pki.leaf("edge", EDGE, LeafKind::default());
    let (b, server) = edge(&edge_leaf.toml(&pki.ca(), None)).await;
    let addr = b.local_addrs()[0];
    let ca = pki.ca();
    let ca = ca.as_path();
    let try_as = |leaf: Leaf| async move {
        tls_exchange(addr, &trusts(&leaf, ca), CLIENT, true)
            .await
            .unwrap()
    };
    // §13: the certificate's names against the CER's Origin-Host.
    let wrong = try_as(pki.leaf("wrong", "wrong.example.org", LeafKind::default())).await;
    assert_eq!(wrong.cea_result, 3010, "DIAMETER_UNKNOWN_PEER");
    assert!(wrong.closed_after, "and the connection is closed");
    assert!(
        b.peers().by_host(CLIENT).is_none(),
        "the refused CER added no peer"
    );
    let right = try_as(pki.leaf("right", CLIENT, LeafKind::default())).await;
    assert_eq!(right.cea_result, 2001);
    assert!(!right.closed_after, "an accepted peer stays connected");
    // No subjectAltName: the subject CN is the name.
    let cn = try_as(pki.leaf(
        "cn",
        CLIENT,
        LeafKind {
            cn_only: true,
            ..LeafKind::default()
        },
    ))
    .await;
    assert_eq!(cn.cea_result, 2001);

    // The dialling side checks the CEA's Origin-Host the same way: a
    // server certificate for another name is refused after the CEA.
    let misnamed = pki.leaf("misnamed", "other.example.com", LeafKind::default());
    let (c, server2) = edge(&misnamed.toml(&pki.ca(), None)).await;
    let front_leaf = pki.leaf("front", AGENT, LeafKind::default());
    let a = Agent::start(front_config(
        &front_leaf.toml(&pki.ca(), None),
        c.local_addrs()[0],
    ))
    .unwrap();
    wait_until(Duration::from_secs(10), || {
        slot_state(&a, EDGE)
            .1
            .is_some_and(|c| c.contains("certificate does not name the Origin-Host"))
    })
    .await;
    assert_ne!(slot_state(&a, EDGE).0, state::OKAY);
    stop(a);
    stop(b);
    stop(c);
    server.stop();
    server2.stop();
}

/// A TLS peer whose records rustls refuses (here after a CER refused 3010)
/// and that goes on sending while the agent lingers in its close: the agent
/// stops in time. (rustls 0.23, built with debug assertions, panics in the
/// connection's task when one `process_new_packets` meets a second bad
/// record after the first, "assertion failed: !self.sent_fatal_alert",
/// rustls issue #959; without debug assertions, as the agent ships, it
/// does not. That task's end no longer holds its worker's shutdown
/// forever, as it did in a CI run of the freeDiameter interop test with a
/// misnamed client certificate.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_sending_records_tls_refuses_in_the_close_does_not_hold_the_stop() {
    let pki = Pki::new("refused-records");
    let edge_leaf = pki.leaf("edge", EDGE, LeafKind::default());
    let (b, server) = edge(&edge_leaf.toml(&pki.ca(), None)).await;
    let addr = b.local_addrs()[0];
    let ca = pki.ca();
    // Refused 3010 (its certificate names another host): the agent closes
    // and reads on until the peer closes (the linger).
    let leaf = pki.leaf("wrong", "wrong.example.org", LeafKind::default());
    let mut s = tls_connect(addr, &trusts(&leaf, ca.as_path()))
        .await
        .unwrap();
    let version = s.get_ref().1.protocol_version().unwrap();
    let e = exchange_on(&mut s, version, CLIENT, false).await.unwrap();
    assert_eq!(e.cea_result, 3010);
    // Application data records that do not decrypt, written past TLS.
    let mut junk = vec![0x17, 0x03, 0x03, 0x00, 0x40];
    junk.extend([0xA5; 64]);
    for _ in 0..5 {
        if tokio::io::AsyncWriteExt::write_all(s.get_mut().0, &junk)
            .await
            .is_err()
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Joined on a thread of its own: a stop that never ends fails the test
    // instead of holding it.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        b.shutdown();
        b.join();
        let _ = tx.send(());
    });
    let stopped = tokio::task::spawn_blocking(move || rx.recv_timeout(Duration::from_secs(20)))
        .await
        .unwrap();
    assert!(stopped.is_ok(), "the agent did not stop within 20 s");
    server.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_cas_and_expired_certificates_are_refused_in_the_handshake() {
    let pki = Pki::new("trust");
    let stranger = Pki::new("stranger");
    let edge_leaf = pki.leaf("edge", EDGE, LeafKind::default());
    let (b, server) = edge(&edge_leaf.toml(&pki.ca(), None)).await;
    let addr = b.local_addrs()[0];
    let ca = pki.ca();
    for (what, leaf) in [
        (
            "unknown CA",
            stranger.leaf("c", CLIENT, LeafKind::default()),
        ),
        (
            "expired",
            pki.leaf(
                "old",
                CLIENT,
                LeafKind {
                    expired: true,
                    ..LeafKind::default()
                },
            ),
        ),
    ] {
        for versions in [TLS12, TLS13] {
            let side = ClientSide {
                ca: &ca,
                leaf: Some(&leaf),
                versions,
                server: EDGE,
            };
            let r = tls_exchange(addr, &side, CLIENT, false).await;
            assert!(
                r.is_err(),
                "{what} client certificate ({versions:?}) refused: {r:?}"
            );
        }
    }
    assert!(b.peers().by_host(CLIENT).is_none());

    // The dialling agent refuses a server certificate from a CA it does
    // not trust, and an expired one.
    let front_leaf = pki.leaf("front", AGENT, LeafKind::default());
    let distrust = front_leaf.toml(&stranger.ca(), None);
    let a = Agent::start(front_config(&distrust, addr)).unwrap();
    let old = pki.leaf(
        "edge-old",
        EDGE,
        LeafKind {
            expired: true,
            ..LeafKind::default()
        },
    );
    let (c, server2) = edge(&old.toml(&pki.ca(), None)).await;
    let a2 = Agent::start(front_config(
        &front_leaf.toml(&pki.ca(), None),
        c.local_addrs()[0],
    ))
    .unwrap();
    for (agent, why) in [(&a, "UnknownIssuer"), (&a2, "certificate expired")] {
        let t0 = std::time::Instant::now();
        while !slot_state(agent, EDGE).1.is_some_and(|c| c.contains(why)) {
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "{:?}",
                slot_state(agent, EDGE)
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_ne!(slot_state(agent, EDGE).0, state::OKAY);
    }
    stop(a);
    stop(a2);
    stop(b);
    stop(c);
    server.stop();
    server2.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_1_2_and_1_3_are_each_negotiated_and_versions_are_enforced() {
    let pki = Pki::new("versions");
    let edge_leaf = pki.leaf("edge", EDGE, LeafKind::default());
    let client = pki.leaf("client", CLIENT, LeafKind::default());
    let ca = pki.ca();
    let (b, server) = edge(&edge_leaf.toml(&ca, None)).await;
    for (versions, expect) in [
        (TLS12, rustls::ProtocolVersion::TLSv1_2),
        (TLS13, rustls::ProtocolVersion::TLSv1_3),
    ] {
        let side = ClientSide {
            ca: &ca,
            leaf: Some(&client),
            versions,
            server: EDGE,
        };
        let x = tls_exchange(b.local_addrs()[0], &side, CLIENT, false)
            .await
            .unwrap();
        assert_eq!((x.version, x.cea_result), (expect, 2001));
    }
    // A listener limited to 1.3 refuses a 1.2-only client.
    let (only13, server2) = edge(&edge_leaf.toml(&ca, Some("[\"1.3\"]"))).await;
    let side = ClientSide {
        ca: &ca,
        leaf: Some(&client),
        versions: TLS12,
        server: EDGE,
    };
    assert!(
        tls_exchange(only13.local_addrs()[0], &side, CLIENT, false)
            .await
            .is_err()
    );
    // Agent to agent on each version.
    let front_leaf = pki.leaf("front", AGENT, LeafKind::default());
    for v in ["[\"1.2\"]", "[\"1.3\"]"] {
        let a = start_agent(
            front_config(&front_leaf.toml(&ca, Some(v)), b.local_addrs()[0]),
            1,
        )
        .await;
        burst_through(a.local_addrs()[0], 200, 20).await;
        let a_down = a;
        a_down.shutdown();
        a_down.wait().await;
    }
    stop(b);
    stop(only13);
    server.stop();
    server2.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reloaded_certificates_serve_new_connections_and_a_bad_file_keeps_the_old() {
    let old_ca = Pki::new("old");
    let new_ca = Pki::new("new");
    let edge_leaf = old_ca.leaf("edge", EDGE, LeafKind::default());
    // The client trusts both CAs and is signed by the old one.
    let client = old_ca.leaf("client", CLIENT, LeafKind::default());
    let (b, server) = edge(&edge_leaf.toml(&old_ca.ca(), None)).await;
    let addr = b.local_addrs()[0];
    let (old_path, new_path) = (old_ca.ca(), new_ca.ca());
    assert!(
        tls_exchange(addr, &trusts(&client, &old_path), CLIENT, false)
            .await
            .is_ok()
    );
    assert!(
        tls_exchange(addr, &trusts(&client, &new_path), CLIENT, false)
            .await
            .is_err()
    );
    // An open connection made before the reload.
    let kept = trusts(&client, &old_path);
    let before = tls_exchange(addr, &kept, CLIENT, false);
    let before = before.await.unwrap();
    assert_eq!(before.cea_result, 2001);

    // The same files rewritten with a leaf of the new CA.
    let fresh = new_ca.leaf("fresh", EDGE, LeafKind::default());
    std::fs::copy(&fresh.cert, &edge_leaf.cert).unwrap();
    std::fs::copy(&fresh.key, &edge_leaf.key).unwrap();
    assert!(
        tls_exchange(addr, &trusts(&client, &new_path), CLIENT, false)
            .await
            .is_err(),
        "not before reload"
    );
    b.reload_tls().unwrap();
    let x = tls_exchange(addr, &trusts(&client, &new_path), CLIENT, false)
        .await
        .unwrap();
    assert_eq!(x.cea_result, 2001);

    // A broken key file is refused, naming it; the material in use stays.
    std::fs::write(&edge_leaf.key, "not a key\n").unwrap();
    let e = b.reload_tls().unwrap_err();
    assert_eq!(e.len(), 1);
    let line = e[0].to_string();
    assert!(line.starts_with("node.listen[0].tls: "), "{line}");
    assert!(
        line.contains(&edge_leaf.key.display().to_string()),
        "{line}"
    );
    let x = tls_exchange(addr, &trusts(&client, &new_path), CLIENT, false)
        .await
        .unwrap();
    assert_eq!(x.cea_result, 2001);
    stop(b);
    server.stop();
}

#[test]
fn check_config_names_the_tls_file_it_cannot_use() {
    let pki = Pki::new("check");
    let leaf = pki.leaf("edge", EDGE, LeafKind::default());
    let base = |tls: &str| {
        format!(
            "[node]\norigin_host = \"{EDGE}\"\norigin_realm = \"example.com\"\n\
             listen = [\"127.0.0.1:0\", {{ addr = \"127.0.0.1:0\", tls = {tls} }}]\n"
        )
    };
    let refused = |tls: &str| {
        let c = Config::from_str_named(&base(tls), Path::new("t.toml")).unwrap();
        c.check_runnable(Path::new("t.toml"))
            .unwrap_err()
            .to_string()
    };
    let missing = pki.dir.join("missing.pem");
    let e = refused(&format!(
        "{{ cert = \"{}\", key = \"{}\" }}",
        missing.display(),
        leaf.key.display()
    ));
    assert!(
        e.starts_with(&format!(
            "t.toml: node.listen[1].tls: {}: cannot read",
            missing.display()
        )),
        "{e}"
    );
    assert_eq!(e.lines().count(), 1);
    // A key file in place of the certificate.
    let e = refused(&format!(
        "{{ cert = \"{}\", key = \"{}\" }}",
        leaf.key.display(),
        leaf.key.display()
    ));
    assert!(
        e.contains(&format!("{}: no CERTIFICATE in it", leaf.key.display())),
        "{e}"
    );
    let e = refused(&format!("{{ key = \"{}\" }}", leaf.key.display()));
    assert!(e.ends_with("node.listen[1].tls: cert is required"), "{e}");
    let e = refused(&format!(
        "{{ cert = \"{}\", key = \"{}\", versions = [] }}",
        leaf.cert.display(),
        leaf.key.display()
    ));
    assert!(e.contains("versions: must name at least one"), "{e}");
    // A [[peer]] with TLS needs the CA to verify the server against.
    let t = format!(
        "{}[[peer]]\nhost = \"s.example.net\"\nrealm = \"example.net\"\nconnect = \"127.0.0.1:1\"\ntls = {{ cert = \"{}\", key = \"{}\" }}\n",
        base(&leaf.toml(&pki.ca(), None)),
        leaf.cert.display(),
        leaf.key.display()
    );
    let c = Config::from_str_named(&t, Path::new("t.toml")).unwrap();
    let e = c
        .check_runnable(Path::new("t.toml"))
        .unwrap_err()
        .to_string();
    assert_eq!(e, "t.toml: peer[0].tls: ca is required");
    // Both forms of a listener in one list; a table with an unknown key is refused.
    let ok =
        Config::from_str_named(&base(&leaf.toml(&pki.ca(), None)), Path::new("t.toml")).unwrap();
    assert!(ok.node.listen[0].tls.is_none() && ok.node.listen[1].tls.is_some());
    ok.check_runnable(Path::new("t.toml")).unwrap();
    let bad = base(&leaf.toml(&pki.ca(), None)).replace("addr =", "adress =");
    assert!(Config::from_str_named(&bad, Path::new("t.toml")).is_err());
}
