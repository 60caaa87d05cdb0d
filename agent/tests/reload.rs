//! A reload on the agent's own clock (`Agent::start_on`, paused time): a
//! removed peer with requests pending gets DPR (RFC 6733 §5.4,
//! DO_NOT_WANT_TO_TALK_TO_YOU) at once; what it has not answered at 80 %
//! of the drain fails over to the peer that remains (§5.5.4, T flag), so
//! every request is answered; new requests take the new route at once; the
//! removed peer is not dialled again.

use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::BytesMut;
use diameter::codec::Header;
use tokio::time::Instant;
use tools::loadgen::{Server, ServerBehaviour};

mod support;
use support::*;

/// Drain of [`agent_toml`] (2 s): the pending requests leave at 80 %.
const FLUSH_AT: Duration = Duration::from_millis(1600);
/// The connection's timer tick that notices it.
const TICK: Duration = Duration::from_millis(250);

#[tokio::test(start_paused = true)]
async fn a_removed_peer_gets_dpr_and_its_pending_requests_fail_over_at_the_drain() {
    let silent = ServerBehaviour {
        answer_requests: false,
        ..ServerBehaviour::default()
    };
    let removed = servers(1, silent).await.remove(0);
    let id = tools::loadgen::Identity::new("server2.example.net", "example.net");
    let kept = Server::spawn(
        "127.0.0.1:0".parse().unwrap(),
        id,
        ServerBehaviour::default(),
    )
    .await
    .unwrap();
    let upstreams = [
        ("server1.example.net", removed.addr, None),
        ("server2.example.net", kept.addr, None),
    ];
    let mut config = agent_toml(Some(2), "", &upstreams, "");
    let mut new = config.clone();
    // First only the silent server routed, then only the other one.
    config.routes[0].peers.truncate(1);
    new.peers.remove(0);
    new.routes[0].peers.remove(0);
    let agent = launch(Run::Here, config, 2).await;
    let mut c = connect(agent.local_addrs()[0]).await;
    let mut out = BytesMut::new();
    for hbh in 1..=5 {
        out.extend_from_slice(&request(hbh, "example.net", &[]));
    }
    c.write_raw(&out).await.unwrap();
    let stats = |s: &Server| {
        let st = &s.stats;
        let load = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
        (load(&st.cer), load(&st.dpr), load(&st.requests))
    };
    wait_until(Duration::from_secs(5), || stats(&removed).2 == 5).await;

    let plan = agent.reload(new);
    let at = Instant::now();
    assert_eq!(plan.remove, ["server1.example.net"]);
    assert!(plan.add.is_empty() && plan.routes);
    wait_until(Duration::from_millis(50), || stats(&removed).1 == 1).await;
    // A new request takes the new route at once.
    c.write_raw(&request(6, "example.net", &[])).await.unwrap();
    let m = answer(&mut c).await;
    assert_eq!(
        (Header::read(&m).hop_by_hop, result_code(&m)),
        (6, Some(2001))
    );
    assert!(at.elapsed() < TICK, "{:?}", at.elapsed());
    // The five pending ones: failed over to the kept peer with the T flag
    // at 80 % of the drain, answered there.
    let mut got = Vec::new();
    for _ in 1..=5 {
        let m = answer(&mut c).await;
        got.push((Header::read(&m).hop_by_hop, result_code(&m)));
    }
    let waited = at.elapsed();
    assert!(
        waited >= FLUSH_AT && waited <= FLUSH_AT + TICK,
        "{waited:?}"
    );
    got.sort_unstable();
    assert_eq!(got, (1..=5).map(|h| (h, Some(2001))).collect::<Vec<_>>());
    assert_eq!(kept.stats.retransmitted.load(Ordering::Relaxed), 5);
    assert_eq!(stats(&kept), (1, 0, 6), "the kept peer's one connection");
    // The removed peer is not dialled again (Tc 0.2 s).
    let _ = keep_open(&mut c, Duration::from_secs(3)).await;
    assert_eq!(stats(&removed), (1, 1, 5));
    agent.shutdown();
    agent.wait().await;
}
