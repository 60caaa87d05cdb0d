//! RFC 6733 §13 TLS/TCP against freeDiameter (GnuTLS, its `TLS_Cred` /
//! `TLS_CA`) in both directions: a freeDiameter client connects to the
//! agent's TLS listener on port 5658 with its certificate, the agent dials
//! the freeDiameter server's TLS port with its own, every request is
//! answered 2001; tshark sees TLS application data on 5658 and no
//! cleartext Diameter. A freeDiameter client whose certificate names
//! another host than its Origin-Host is refused.

#[path = "../../agent/tests/support/pki.rs"]
#[expect(
    unreachable_pub,
    reason = "shared with the agent's tests, where it is a public module"
)]
mod pki;

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use agent::agent::Agent;
use agent::config::Config;
use agent::peer::table::state;
use interop::fd::{BenchSpec, FdServer, FdTls, PeerTarget};
use interop::process::wait_for;
use interop::tshark::{Capture, Tshark};
use pki::{Leaf, LeafKind, Pki};

const AGENT: &str = "agent.example.com";
/// RFC 6733 §2.1: "Diameter ... TLS/TCP ... port 5658".
const DIAMETERS: u16 = 5658;

fn fd_tls(leaf: &Leaf, pki: &Pki) -> FdTls {
    FdTls {
        cert: leaf.cert.clone(),
        key: leaf.key.clone(),
        ca: pki.ca(),
    }
}

/// The freeDiameter test_app server over TLS, its certificate from `pki`.
fn fd_server(pki: &Pki) -> interop::fd::FdNode {
    let leaf = pki.leaf("server", "server1.example.net", LeafKind::default());
    FdServer::builder().tls(fd_tls(&leaf, pki)).start().unwrap()
}

/// An agent with a TLS listener on `listen` (mutual authentication),
/// dialling the fD server at `server` over TLS.
fn agent(pki: &Pki, listen: SocketAddr, server: &PeerTarget) -> Agent {
    let leaf = pki.leaf("agent", AGENT, LeafKind::default());
    let tls = leaf.toml(&pki.ca(), None);
    let t = format!(
        "[node]\norigin_host = \"{AGENT}\"\norigin_realm = \"example.com\"\n\
         listen = [{{ addr = \"{listen}\", tls = {tls} }}]\ntw_seconds = 6\ntc_seconds = 1\ndrain_seconds = 3\n\
         [[peer]]\nhost = \"{}\"\nrealm = \"example.net\"\nconnect = \"{}\"\ntls = {tls}\n\
         [[route]]\nrealm = \"example.net\"\npeers = [\"{}\"]\n[accept]\nhosts = [\"*.example.org\"]\n",
        server.identity, server.addr, server.identity
    );
    let config = Config::from_str_named(&t, Path::new("interop-tls.toml")).unwrap();
    config
        .check_runnable(Path::new("interop-tls.toml"))
        .unwrap();
    let agent = Agent::start(config).unwrap();
    let open = || {
        let peers = agent.peers().all();
        let up = peers
            .iter()
            .any(|(_, s)| s.host == server.identity && s.state() == state::OKAY);
        Ok(up.then_some(()))
    };
    wait_for("the server open over TLS", Duration::from_secs(20), open).unwrap();
    agent
}

#[test]
fn fd_client_tls_agent_tls_fd_server_and_only_tls_on_5658() {
    let pki = Pki::new("fd");
    let server = fd_server(&pki);
    let listen: SocketAddr = ([127, 0, 0, 1], DIAMETERS).into();
    let agent = agent(&pki, listen, &server.target());
    let capture = Capture::start(&[DIAMETERS], Duration::from_secs(60)).unwrap();
    let client_leaf = pki.leaf("client", "client1.example.org", LeafKind::default());
    let r = BenchSpec::new(PeerTarget::new(AGENT, listen).unwrap())
        .tls(fd_tls(&client_leaf, &pki))
        .run_all_ok();
    assert!(r.answered > 100, "{r}");
    agent.shutdown();
    agent.join();
    let as_tls = Tshark::new().tls_port(DIAMETERS);
    let as_diameter = Tshark::new().port(DIAMETERS);
    let n = capture
        .finish_count(&[
            (&as_tls, "tls.handshake.type == 1"),
            (&as_tls, "tls.app_data"),
            (&as_diameter, "diameter.cmd.code"),
        ])
        .unwrap();
    assert_eq!(
        n[0], 1,
        "one ClientHello: the fD client's, on connect (§13.1)"
    );
    assert!(
        n[1] as u64 >= r.answered / 10,
        "TLS application data: {n:?}"
    );
    assert_eq!(n[2], 0, "no cleartext Diameter on {DIAMETERS}: {n:?}");
}

#[test]
fn fd_client_whose_certificate_names_another_host_is_refused() {
    let pki = Pki::new("fd-wrong");
    let server = fd_server(&pki);
    let agent = agent(&pki, ([127, 0, 0, 1], 0).into(), &server.target());
    let at = PeerTarget::new(AGENT, agent.local_addrs()[0]).unwrap();
    let wrong = pki.leaf("wrong", "wrong.example.org", LeafKind::default());
    // It presents a certificate for wrong.example.org as client1.example.org:
    // answered 3010 and closed, so it never opens.
    let refused = BenchSpec::new(at).tls(fd_tls(&wrong, &pki)).connect();
    assert!(refused.is_err(), "a misnamed client never opens");
    assert!(
        agent
            .peers()
            .all()
            .iter()
            .all(|(_, s)| s.host != "client1.example.org" || s.state() != state::OKAY),
        "and the agent opened no peer for it"
    );
    agent.shutdown();
    agent.join();
}
