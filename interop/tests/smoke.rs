//! End-to-end smoke tests of the harness: every path answers 2001.

use interop::erl::{ErlClient, ErlServer, Olr};
use interop::fd::{BenchSpec, FdRelay, FdServer};

#[test]
fn fd_client_to_fd_server_direct() {
    let server = FdServer::builder().start().unwrap();
    let r = BenchSpec::new(server.target())
        .seconds(1)
        .concurrency(10)
        .run()
        .unwrap();
    eprintln!("{r}");
    assert!(r.all_answered_ok(), "{r}");
}

#[test]
fn fd_client_via_fd_relay_to_fd_server() {
    let server = FdServer::builder().start().unwrap();
    let relay = FdRelay::builder(server.target(), server.realm())
        .start()
        .unwrap();
    let r = BenchSpec::new(relay.target())
        .seconds(1)
        .concurrency(10)
        .run()
        .unwrap();
    eprintln!("{r}");
    assert!(r.all_answered_ok(), "{r}");
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
    let r = BenchSpec::new(server.target())
        .seconds(1)
        .concurrency(10)
        .run()
        .unwrap();
    eprintln!("{r}");
    assert!(r.all_answered_ok(), "{r}");
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
    let olr = Olr {
        realm_report: false,
        reduction_percentage: 40,
        sequence: 9,
        validity_secs: 20,
    };
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
