//! End-to-end smoke tests of the harness: every path answers 2001.

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
