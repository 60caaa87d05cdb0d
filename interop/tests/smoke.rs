//! End-to-end smoke tests of the harness: every path answers 2001.

use interop::erl::{ErlClient, ErlServer, Olr, ReportType};
use interop::fd::{BenchSpec, FdRelay, FdServer};

#[test]
fn fd_client_to_fd_server_direct() {
    let server = FdServer::builder().start().unwrap();
    BenchSpec::new(server.target()).run_all_ok();
}

#[test]
fn fd_client_via_fd_relay_to_fd_server() {
    let server = FdServer::builder().start().unwrap();
    let relay = FdRelay::builder(server.target(), server.realm())
        .start()
        .unwrap();
    BenchSpec::new(relay.target()).run_all_ok();
}

#[test]
fn erlang_client_to_fd_server() {
    let server = FdServer::builder().start().unwrap();
    let r = ErlClient::new(&server.target())
        .n(500)
        .concurrency(10)
        .run()
        .unwrap();
    assert_eq!(r.peer_host, "server1.example.net", "{}", r.output);
    assert!(r.all_answered_ok(), "{}", r.output);
}

#[test]
fn fd_client_to_erlang_server() {
    let server = ErlServer::builder().start().unwrap();
    BenchSpec::new(server.target()).run_all_ok();
}

#[test]
fn erlang_client_via_fd_relay_to_fd_server() {
    let server = FdServer::builder().start().unwrap();
    let relay = FdRelay::builder(server.target(), server.realm())
        .start()
        .unwrap();
    let r = ErlClient::new(&relay.target())
        .n(300)
        .concurrency(10)
        .proxy_info()
        .run()
        .unwrap();
    assert!(r.all_answered_ok(), "{}", r.output);
}

/// RFC 7683 §5.2.3: the reporting node answers a DOIC request with
/// OC-Supported-Features and its OC-OLR; a request without
/// OC-Supported-Features gets neither.
#[test]
fn erlang_reporting_node_sends_olr_only_to_doic_requests() {
    let olr = Olr::loss(ReportType::Host, 40, 9, 20);
    let server = ErlServer::builder().olr(olr).start().unwrap();
    let r = ErlClient::new(&server.target()).n(50).doic().run().unwrap();
    assert!(r.all_answered_ok(), "{}", r.output);
    assert_eq!(
        (r.oc_supported_features, r.oc_olr),
        (50, 50),
        "{}",
        r.output
    );
    assert_eq!(r.first_features["feature_vector"], "1");
    assert_eq!(r.first_olr["sequence"], "9");
    assert_eq!(r.first_olr["report_type"], "0");
    assert_eq!(r.first_olr["reduction_percentage"], "40");
    assert_eq!(r.first_olr["validity_duration"], "20");
    let plain = ErlClient::new(&server.target()).n(20).run().unwrap();
    assert_eq!(
        (plain.oc_supported_features, plain.oc_olr),
        (0, 0),
        "{}",
        plain.output
    );
}

/// For a peer that does not dial out itself, the fD server dials it.
#[test]
fn fd_server_dials_out_to_a_listening_peer() {
    let erl = ErlServer::builder()
        .identity("erl-peer.example.com")
        .start()
        .unwrap();
    let mut server = FdServer::builder()
        .connect_to(erl.target())
        .start()
        .unwrap();
    server
        .wait_peer_open("erl-peer.example.com", interop::fd::OPEN_TIMEOUT)
        .unwrap();
    assert_eq!(
        server.peer_state("erl-peer.example.com").as_deref(),
        Some("STATE_OPEN")
    );
}

/// A killed peer (SIGKILL, no DPR) is seen as a closed connection.
#[test]
fn a_killed_server_closes_the_relay_connection() {
    let mut server = FdServer::builder().start().unwrap();
    let mut relay = FdRelay::builder(server.target(), server.realm())
        .start()
        .unwrap();
    server.daemon().kill().unwrap();
    let id = server.identity().to_owned();
    interop::process::wait_for(
        "relay to notice",
        std::time::Duration::from_secs(10),
        || {
            relay.daemon().ensure_running()?;
            Ok(relay.peer_state(&id).filter(|s| s != "STATE_OPEN"))
        },
    )
    .unwrap();
}

/// freeDiameter binds the wildcard address; the shim keeps it on loopback.
#[test]
fn fd_server_listens_on_loopback_only() {
    let server = FdServer::builder().start().unwrap();
    let addrs = interop::process::tcp_listeners(server.port());
    assert!(!addrs.is_empty(), "no listener on port {}", server.port());
    assert!(addrs.iter().all(|a| a.is_loopback()), "{addrs:?}");
    assert!(
        addrs.contains(&std::net::Ipv4Addr::LOCALHOST.into()),
        "{addrs:?}"
    );
}

/// Non-2001 answers are counted as such by both clients, not as successes.
#[test]
fn error_answers_are_counted_as_errors() {
    let server = ErlServer::builder().result_code(3004).start().unwrap();
    let erl = ErlClient::new(&server.target())
        .n(30)
        .concurrency(3)
        .run()
        .unwrap();
    assert!(!erl.all_answered_ok());
    assert_eq!(erl.result_codes.get("3004"), Some(&30), "{}", erl.output);
    let fd = BenchSpec::new(server.target())
        .seconds(1)
        .concurrency(5)
        .run()
        .unwrap();
    assert!(!fd.all_answered_ok(), "{fd}");
    assert!(
        fd.sent > 0 && fd.errors == fd.sent && fd.answered == 0,
        "{fd}"
    );
}

/// RFC 8581/8582: a peer report with the rate algorithm, encoded by OTP
/// with the escript's grammar, reaches a client that supports both.
#[test]
fn erlang_reporting_node_sends_a_rate_peer_report() {
    let olr = Olr::rate(ReportType::Peer, 1200, 5, 30);
    let server = ErlServer::builder().olr(olr).start().unwrap();
    let r = ErlClient::new(&server.target())
        .n(10)
        .doic_vector(0x15)
        .run()
        .unwrap();
    assert!(r.all_answered_ok(), "{}", r.output);
    assert_eq!(r.oc_olr, 10, "{}", r.output);
    let f = &r.first_features;
    assert_eq!(
        (f["feature_vector"].as_str(), f["peer_algo"].as_str()),
        ("20", "4"),
        "{}",
        r.output
    );
    assert_eq!(f["source_id"], "erl-server.example.net");
    let o = &r.first_olr;
    assert_eq!(o["report_type"], "2");
    assert_eq!(o["max_rate"], "1200");
    assert_eq!(o["reduction_percentage"], "-");
    assert_eq!(o["source_id"], "erl-server.example.net");
}

/// The same paths over IPv6 loopback: the shim binds [::] to ::1.
#[test]
fn fd_and_erlang_clients_over_ipv6_loopback() {
    let server = FdServer::builder().start().unwrap();
    let v6 = interop::fd::PeerTarget::new(
        server.identity(),
        std::net::SocketAddr::new(std::net::Ipv6Addr::LOCALHOST.into(), server.port()),
    )
    .unwrap();
    let r = BenchSpec::new(v6.clone())
        .seconds(1)
        .concurrency(5)
        .run()
        .unwrap();
    assert!(r.all_answered_ok(), "{r}");
    let e = ErlClient::new(&v6).n(50).run().unwrap();
    assert!(e.all_answered_ok(), "{}", e.output);
}
