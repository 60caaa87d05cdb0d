//! Faults on real TCP loopback: a server dies under load, the agent shuts
//! down with requests pending. (A server that stops answering the watchdog:
//! `timers.rs`, on a paused clock.)

mod support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use agent::peer::table::state;
use diameter::codec::Header;
use diameter::codec::answer::put_base;
use diameter::dictionary::{cmd, code};
use support::*;
use tools::loadgen::{Pace, ServerBehaviour, Traffic};

fn traffic() -> Traffic {
    Traffic {
        destination_realm: "example.net".into(),
        destination_host: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_one_of_two_servers_under_load_loses_no_request() {
    let s = setup(2).await;
    let mut c = s.client().await;
    let stop = AtomicBool::new(false);
    let t = traffic();
    let run = c.run(
        &t,
        Pace::Closed(64),
        Duration::from_millis(1500),
        Duration::from_secs(8),
        &stop,
    );
    let kill = async {
        tokio::time::sleep(Duration::from_millis(500)).await;
        // Like a killed process: connections drop without DPR, requests the
        // server had read stay unanswered.
        s.servers[0].set_behaviour(ServerBehaviour {
            answer_requests: false,
            ..Default::default()
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        s.servers[0].stop();
    };
    let (r, ()) = tokio::join!(run, kill);
    let r = r.unwrap();
    assert!(r.sent > 1000, "load ran: {r:?}");
    assert_eq!(r.sent, r.answered, "every request answered exactly once");
    assert_eq!(r.unmatched, 0, "no duplicate answers");
    assert_eq!(
        r.by_code.get(&2001),
        Some(&r.sent),
        "failover delivered them all: {:?}",
        r.by_code
    );
    let t_flagged = s.servers[1].stats.retransmitted.load(Ordering::Relaxed);
    assert!(
        t_flagged > 0,
        "pending requests were re-sent with the T flag"
    );
    let table = s.agent().peers().clone();
    let (_, slot) = &table.all()[0];
    assert!(slot.stats.failovers.load(Ordering::Relaxed) >= t_flagged);
    assert_ne!(slot.state(), state::OKAY);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_sends_dpr_and_answers_every_pending_request() {
    let servers = servers(
        1,
        ServerBehaviour {
            answer_requests: false,
            ..Default::default()
        },
    )
    .await;
    let config = config_for(&servers, "");
    let mut s = start(servers, config).await;
    let mut c = s.client().await;
    for i in 0..10 {
        c.write_raw(&request(500 + i, "example.net", &[]))
            .await
            .unwrap();
    }
    wait_until(Duration::from_secs(5), || {
        s.servers[0].stats.requests.load(Ordering::Relaxed) == 10
    })
    .await;
    let t0 = Instant::now();
    let stopping = s.stop();
    let reading = async {
        let mut answers = Vec::new();
        let mut dpr = false;
        while answers.len() < 10 || !dpr {
            let m = tokio::time::timeout(Duration::from_secs(10), c.read_message())
                .await
                .unwrap()
                .unwrap();
            let h = Header::read(&m);
            if h.is_request() {
                if h.command_code == cmd::DISCONNECT_PEER {
                    dpr = true;
                    let mut out = bytes::BytesMut::new();
                    put_base(
                        &mut out,
                        cmd::DISCONNECT_PEER,
                        ("client1.example.org", "example.org"),
                        Some(h),
                        0,
                        None,
                    );
                    c.write_raw(&out).await.unwrap();
                }
                continue;
            }
            answers.push((h.hop_by_hop, result_code(&m)));
        }
        answers
    };
    let ((), mut answers) = tokio::join!(stopping, reading);
    answers.sort_unstable();
    let expect: Vec<(u32, Option<u32>)> = (0..10).map(|i| (500 + i, Some(3002))).collect();
    assert_eq!(answers, expect);
    assert!(
        t0.elapsed() < Duration::from_secs(5),
        "drained within the deadline"
    );
    assert_eq!(
        s.servers[0].stats.dpr.load(Ordering::Relaxed),
        1,
        "the server got a DPR too"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pinned_requests_are_not_failed_over_realm_routed_ones_are() {
    let s = setup(2).await;
    let mut c = s.client().await;
    // server1 swallows requests, then dies.
    s.servers[0].set_behaviour(ServerBehaviour {
        answer_requests: false,
        ..Default::default()
    });
    // 40 realm-routed requests in one write: the agent dispatches them in
    // one go, alternating between the two servers (least outstanding).
    let sent_realm: u32 = 40;
    let mut burst = bytes::BytesMut::new();
    for i in 0..sent_realm {
        burst.extend_from_slice(&request(1000 + i, "example.net", &[]));
    }
    c.write_raw(&burst).await.unwrap();
    for i in 0..5 {
        let pinned = request(
            900 + i,
            "example.net",
            &[(code::DESTINATION_HOST, b"server1.example.net")],
        );
        c.write_raw(&pinned).await.unwrap();
    }
    wait_until(Duration::from_secs(5), || {
        s.servers[0].stats.requests.load(Ordering::Relaxed)
            + s.servers[1].stats.requests.load(Ordering::Relaxed)
            == u64::from(sent_realm) + 5
    })
    .await;
    let at_server1 = s.servers[0].stats.requests.load(Ordering::Relaxed);
    assert!(at_server1 >= 10, "{at_server1} requests reached server1");
    s.servers[0].stop();
    let mut pinned_codes = Vec::new();
    let mut realm_codes = Vec::new();
    while pinned_codes.len() + realm_codes.len() < 5 + sent_realm as usize {
        let m = answer(&mut c).await;
        let h = Header::read(&m);
        if (900..905).contains(&h.hop_by_hop) {
            pinned_codes.push(result_code(&m));
        } else {
            realm_codes.push(result_code(&m));
        }
    }
    assert_eq!(
        pinned_codes,
        vec![Some(3002); 5],
        "pinned: answered 3002, not moved"
    );
    assert!(
        realm_codes.iter().all(|c| *c == Some(2001)),
        "{realm_codes:?}"
    );
    assert!(
        s.servers[1].stats.retransmitted.load(Ordering::Relaxed) >= 5,
        "moved with the T flag"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn too_busy_is_retried_elsewhere_but_5198_is_not() {
    let s = setup(2).await;
    let mut c = s.client().await;
    // server1 answers 3004 TOO_BUSY: the agent tries server2.
    s.servers[0].set_behaviour(ServerBehaviour {
        result_code: 3004,
        ..Default::default()
    });
    for i in 0..20 {
        c.write_raw(&request(2000 + i, "example.net", &[]))
            .await
            .unwrap();
        assert_eq!(result_code(&answer(&mut c).await), Some(2001));
    }
    assert!(
        s.servers[0].stats.requests.load(Ordering::Relaxed) > 0,
        "server1 was tried"
    );
    // Both answer 3004: the client gets 3004 (every candidate refused).
    s.servers[1].set_behaviour(ServerBehaviour {
        result_code: 3004,
        ..Default::default()
    });
    c.write_raw(&request(3000, "example.net", &[]))
        .await
        .unwrap();
    assert_eq!(result_code(&answer(&mut c).await), Some(3004));
    // server1 answers Experimental-Result 5198: passed on, never retried.
    s.servers[0].set_behaviour(ServerBehaviour {
        experimental_result: Some((10415, 5198)),
        ..Default::default()
    });
    s.servers[1].set_behaviour(ServerBehaviour::default());
    let before = s.servers[1].stats.requests.load(Ordering::Relaxed);
    let mut got_5198 = 0;
    for i in 0..40 {
        c.write_raw(&request(4000 + i, "example.net", &[]))
            .await
            .unwrap();
        let m = answer(&mut c).await;
        let r = diameter::codec::Routing::scan(&m).unwrap();
        let experimental = r.experimental_result_code().map(|(_, c)| c);
        match (r.result_code(), experimental) {
            (None, Some(5198)) => got_5198 += 1,
            (Some(2001), None) => {}
            other => panic!("unexpected answer {other:?}"),
        }
    }
    let to_server2 = s.servers[1].stats.requests.load(Ordering::Relaxed) - before;
    assert!(got_5198 > 0, "some requests went to server1");
    assert_eq!(
        got_5198 + to_server2,
        40,
        "a 5198 request never reached server2"
    );
}
