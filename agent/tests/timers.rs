//! The agent's timers on the test's paused clock: the agent runs on the
//! test's runtime ([`agent::agent::Agent::start_on`]) with the default
//! worker count, beside loadgen servers and clients on real loopback TCP.
//! The runtime advances its clock to the next timer whenever every task
//! waits, after a poll of the sockets finds nothing to read: loopback
//! delivers a write before the writer's next await, so what a peer sent is
//! read before time moves on. Minutes of protocol time pass in well under
//! a second.
//!
//! Tc (RFC 6733 §2.1), Tw and the watchdog's failover and failback (RFC
//! 3539 §3.4.1, Appendix A), the request timeout's 3002 (RFC 6733 §7.1.3:
//! DIAMETER_UNABLE_TO_DELIVER).

mod support;

use std::sync::atomic::Ordering;
use std::time::Duration;

use agent::agent::Agent;
use agent::peer::table::state;
use bytes::BytesMut;
use diameter::codec::Header;
use support::*;
use tokio::time::Instant;
use tools::loadgen::{Identity, Server, ServerBehaviour};

/// `t` lies within `[low, high]` seconds.
fn within(t: Duration, low: f64, high: f64) -> bool {
    t >= Duration::from_secs_f64(low) && t <= Duration::from_secs_f64(high)
}

#[tokio::test(start_paused = true)]
async fn a_refused_dial_is_retried_after_tc_and_an_open_peer_is_not_dialled() {
    // RFC 6733 §2.1: "Tc ... recommended value is 30 seconds". The port is
    // reserved but nothing listens yet: the first dial is refused.
    const TC: Duration = Duration::from_secs(30);
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let addr = socket.local_addr().unwrap();
    let mut config = agent_toml(None, "", &[("server1.example.net", addr, None)], "");
    config.node.tc_seconds = TC.as_secs_f64();
    let t0 = Instant::now();
    let agent = Agent::start_on(&tokio::runtime::Handle::current(), config).unwrap();
    let slot = agent.peers().all()[0].1.clone();
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_ne!(slot.state(), state::OKAY);
    let id = Identity::new("server1.example.net", "example.net");
    let server = Server::serve(socket.listen(64).unwrap(), id, ServerBehaviour::default()).unwrap();
    wait_until(2 * TC, || server.stats.cer.load(Ordering::Relaxed) == 1).await;
    let redial = t0.elapsed();
    assert!(
        within(redial, 30.0, 30.1),
        "redialled after {redial:?}, Tc {TC:?}"
    );
    wait_open(&agent, 1).await;
    // An open peer is not dialled again (the watchdog keeps it OKAY).
    tokio::time::sleep(3 * TC).await;
    assert_eq!(server.stats.cer.load(Ordering::Relaxed), 1);
    assert_eq!(slot.state(), state::OKAY);
    assert!(
        server.stats.dwr.load(Ordering::Relaxed) >= 10,
        "DWR every Tw"
    );
    agent.shutdown();
    agent.wait().await;
}

#[tokio::test(start_paused = true)]
async fn peer_that_stops_answering_dwr_goes_suspect_then_down() {
    // RFC 3539 §3.4.1: with Tw = 6 s (the minimum, jittered by +-2 s), a
    // silent peer gets a DWR after one Tw, is SUSPECT one Tw later and DOWN
    // one Tw after that.
    let silent = ServerBehaviour {
        answer_dwr: false,
        ..Default::default()
    };
    let s = one_server(Run::Here, silent, |_| {}).await;
    let slot = s.agent().peers().all()[0].1.clone();
    let t0 = Instant::now();
    wait_until(Duration::from_secs(10), || {
        s.servers[0].stats.dwr.load(Ordering::Relaxed) >= 1
    })
    .await;
    let t_dwr = t0.elapsed();
    assert!(within(t_dwr, 3.95, 8.05), "{t_dwr:?}");
    assert_eq!(slot.state(), state::OKAY);
    let t1 = Instant::now();
    wait_until(Duration::from_secs(10), || slot.state() == state::SUSPECT).await;
    let t_suspect = t1.elapsed();
    assert!(within(t_suspect, 3.95, 8.05), "{t_suspect:?}");
    // While SUSPECT, requests go nowhere else here: the realm has one peer.
    let mut c = s.client().await;
    c.write_raw(&request(9, "example.net", &[])).await.unwrap();
    assert_eq!(result_code(&answer(&mut c).await), Some(3002));
    let t2 = Instant::now();
    wait_until(Duration::from_secs(10), || slot.state() != state::SUSPECT).await;
    let t_down = t2.elapsed();
    assert!(within(t_down, 3.95, 8.05), "{t_down:?}");
    assert!(
        slot.state() == state::CLOSED || slot.state() == state::CONNECTING,
        "closed after DOWN"
    );
}

#[tokio::test(start_paused = true)]
async fn a_silent_peer_is_failed_over_with_the_t_flag_and_failed_back_after_three_dwas() {
    // RFC 3539 §3.4.1 and Appendix A: SUSPECT fails the pending requests
    // over (RFC 6733 §5.5.4: with the T flag); DOWN closes; the new
    // connection is REOPEN and takes traffic again after three DWAs.
    let servers = servers(2, ServerBehaviour::default()).await;
    let mut config = config_for(&servers, "");
    config.node.workers = None;
    config.node.request_timeout_seconds = 600.0;
    let s = start_here(servers, config).await;
    let (server1, server2) = (&s.servers[0], &s.servers[1]);
    let slot1 = s.agent().peers().all()[0].1.clone();
    let mut c = s.client().await;
    // server1 swallows requests and DWRs from now on.
    server1.set_behaviour(ServerBehaviour {
        answer_dwr: false,
        answer_requests: false,
        ..Default::default()
    });
    let mut burst = BytesMut::new();
    for i in 0..40 {
        burst.extend_from_slice(&request(1000 + i, "example.net", &[]));
    }
    c.write_raw(&burst).await.unwrap();
    let mut answers = keep_open_until(&mut c, Duration::from_secs(30), || {
        slot1.state() == state::SUSPECT
    })
    .await;
    let swallowed = server1.stats.requests.load(Ordering::Relaxed);
    assert!(swallowed >= 10, "{swallowed} requests pending at server1");
    // Failed over at SUSPECT: every request answered by server2.
    answers.extend(
        keep_open_until(&mut c, Duration::from_secs(5), || {
            server2.stats.retransmitted.load(Ordering::Relaxed) >= swallowed
        })
        .await,
    );
    answers.extend(keep_open(&mut c, Duration::from_millis(100)).await);
    let mut got: Vec<(u32, Option<u32>)> = answers
        .iter()
        .map(|m| (Header::read(m).hop_by_hop, result_code(m)))
        .collect();
    got.sort_unstable();
    let want: Vec<(u32, Option<u32>)> = (1000..1040).map(|h| (h, Some(2001))).collect();
    assert_eq!(got, want, "each request its one answer");
    assert_eq!(
        server2.stats.retransmitted.load(Ordering::Relaxed),
        swallowed,
        "the failed-over requests carried the T flag, the others not"
    );
    // server1 answers again, but SUSPECT sends it nothing: DOWN, then a
    // new connection after Tc.
    server1.set_behaviour(ServerBehaviour::default());
    let dwr_before = server1.stats.dwr.load(Ordering::Relaxed);
    keep_open_until(&mut c, Duration::from_secs(30), || {
        server1.stats.cer.load(Ordering::Relaxed) == 2
    })
    .await;
    let reopened = Instant::now();
    // REOPEN: requests meanwhile all go to server2.
    let mut hbh = 2000;
    while slot1.state() != state::OKAY {
        assert!(
            reopened.elapsed() < Duration::from_secs(30),
            "never OKAY again"
        );
        c.write_raw(&request(hbh, "example.net", &[]))
            .await
            .unwrap();
        hbh += 1;
        let a = keep_open(&mut c, Duration::from_millis(500)).await;
        assert_eq!(a.len(), 1);
        assert_eq!(result_code(&a[0]), Some(2001));
    }
    assert_eq!(
        server1.stats.requests.load(Ordering::Relaxed),
        swallowed,
        "no request to server1 before failback"
    );
    assert!(
        server1.stats.dwr.load(Ordering::Relaxed) >= dwr_before + 3,
        "three DWAs before failback"
    );
    assert!(
        reopened.elapsed() >= Duration::from_secs(6),
        "failback took two Tw at least: {:?}",
        reopened.elapsed()
    );
    // Failed back: server1 takes its share again.
    for i in 0..20 {
        c.write_raw(&request(3000 + i, "example.net", &[]))
            .await
            .unwrap();
        assert_eq!(result_code(&answer(&mut c).await), Some(2001));
    }
    assert!(server1.stats.requests.load(Ordering::Relaxed) > swallowed);
}

#[tokio::test(start_paused = true)]
async fn an_unanswered_request_gets_3002_at_the_request_timeout() {
    // The upstream peer never answers; its watchdog stays OKAY. At the
    // request timeout the agent answers 3002 itself, once, and a late
    // answer would find nothing pending.
    let silent = ServerBehaviour {
        answer_requests: false,
        ..Default::default()
    };
    let s = one_server(Run::Here, silent, |config| {
        config.node.request_timeout_seconds = 20.0;
    })
    .await;
    let mut c = s.client().await;
    c.write_raw(&request(7, "example.net", &[])).await.unwrap();
    // The deadline is checked on the connection's 250 ms tick.
    let early = keep_open(&mut c, Duration::from_millis(19_900)).await;
    assert!(early.is_empty(), "answered before the timeout: {early:?}");
    let mut got = keep_open(&mut c, Duration::from_millis(500)).await;
    assert_eq!(got.len(), 1, "one answer between 19.9 s and 20.4 s");
    let m = got.pop().unwrap();
    assert_eq!(
        (Header::read(&m).hop_by_hop, result_code(&m)),
        (7, Some(3002))
    );
    assert_eq!(s.servers[0].stats.requests.load(Ordering::Relaxed), 1);
    assert_eq!(
        s.agent().peers().all()[0].1.state(),
        state::OKAY,
        "the peer answers its DWRs: a slow answer is not a dead peer"
    );
}
