//! The queues between workers over real TCP (docs/relay.md, "Threads"): a
//! request that finds its upstream's queue full is answered 3004 at once
//! (RFC 6733 §7.1.3) and counted, and under bursts on several workers every
//! request gets exactly one answer (RFC 6733 §6.2).

mod support;

use std::collections::HashMap;
use std::time::Duration;

use bytes::BytesMut;
use diameter::codec::answer::put_capabilities;
use diameter::codec::{Capabilities, Header, frame_len};
use support::*;
use tokio::io::AsyncReadExt;
use tokio::net::{TcpSocket, TcpStream};
use tools::loadgen::{Client, Identity, ServerBehaviour, TEST_APP};

const SERVER: &str = "server1.example.net";

/// A server that completes the capabilities exchange and then never reads
/// again (a peer that hangs), with a small receive buffer so that the
/// agent's output to it backs up soon. The connection is held until the
/// returned sender is dropped.
async fn hung_server() -> (std::net::SocketAddr, tokio::sync::oneshot::Sender<()>) {
    let sock = TcpSocket::new_v4().unwrap();
    sock.set_recv_buffer_size(4096).unwrap();
    sock.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let listener = sock.listen(8).unwrap();
    let addr = listener.local_addr().unwrap();
    let (hold, held) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        let (mut s, _) = listener.accept().await.unwrap();
        let cer = read_one(&mut s).await;
        let mut out = BytesMut::new();
        let caps = Capabilities {
            origin_host: SERVER.into(),
            origin_realm: "example.net".into(),
            host_ip_addresses: vec![s.local_addr().unwrap().ip()],
            product_name: "hung".into(),
            auth_application_ids: vec![TEST_APP],
            ..Capabilities::default()
        };
        put_capabilities(&mut out, &caps, Some((Header::read(&cer), 2001)), 0);
        tokio::io::AsyncWriteExt::write_all(&mut s, &out)
            .await
            .unwrap();
        let _ = held.await;
        drop(s);
    });
    (addr, hold)
}

async fn read_one(s: &mut TcpStream) -> BytesMut {
    let mut buf = BytesMut::new();
    loop {
        if let Ok(Some(n)) = frame_len(&buf) {
            return buf.split_to(n);
        }
        assert_ne!(s.read_buf(&mut buf).await.unwrap(), 0, "CER");
    }
}

/// Writes `n` requests with Hop-by-Hop ids from `first`, `per_write` in
/// each write.
async fn pipeline(c: &mut Client, first: u32, n: u32, per_write: u32) {
    let mut hbh = first;
    while hbh < first + n {
        let mut burst = BytesMut::new();
        for _ in 0..per_write.min(first + n - hbh) {
            burst.extend_from_slice(&request(hbh, "example.net", &[]));
            hbh += 1;
        }
        c.write_raw(&burst).await.unwrap();
    }
}

/// Reads the answers to `n` requests with ids from `first`: the
/// Result-Code of each, in the order they came; fails on an unknown id or
/// a second answer to one.
async fn answers(c: &mut Client, first: u32, n: u32, limit: Duration) -> Vec<(u32, u32)> {
    let mut seen: HashMap<u32, u32> = HashMap::new();
    let mut order = Vec::new();
    let until = tokio::time::Instant::now() + limit;
    while order.len() < n as usize {
        let m = tokio::time::timeout_at(until, answer(c))
            .await
            .unwrap_or_else(|_| panic!("{} of {n} answers in time", order.len()));
        let hbh = Header::read(&m).hop_by_hop;
        assert!((first..first + n).contains(&hbh), "unknown id {hbh}");
        let code = result_code(&m).unwrap_or(0);
        assert!(seen.insert(hbh, code).is_none(), "{hbh} answered twice");
        order.push((hbh, code));
    }
    order
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_upstream_queue_answers_3004_at_once_and_counts_it() {
    // RFC 6733 §7.1.3: the agent is too busy for the hung peer; the client
    // SHOULD try another. The default worker count, the peer's output
    // backed up, many requests per write.
    let (addr, _hold) = hung_server().await;
    let mut config = agent_toml(None, "", &[(SERVER, addr, None)], "");
    config.node.upstream_queue = 64;
    config.node.upstream_backlog_bytes = 64 << 10;
    config.node.request_timeout_seconds = 6.0;
    config.node.tw_seconds = 30.0;
    let agent = launch(Run::Pinned, config, 1).await;
    let mut c = connect(agent.local_addrs()[0]).await;
    const N: u32 = 20_000;
    pipeline(&mut c, 1, N, 500).await;
    let got = answers(&mut c, 1, N, Duration::from_secs(40)).await;
    let busy = got.iter().filter(|(_, code)| *code == 3004).count();
    let timed_out = got.iter().filter(|(_, code)| *code == 3002).count();
    assert_eq!(
        busy + timed_out,
        N as usize,
        "3004 at once, else 3002 on timeout"
    );
    assert!(busy >= N as usize / 4, "{busy} of {N} answered 3004");
    // At once: every 3004 before the first 3002 (the 6 s request timeout).
    let first_timeout = got.iter().position(|(_, code)| *code == 3002);
    let last_busy = got.iter().rposition(|(_, code)| *code == 3004);
    assert!(last_busy < first_timeout || first_timeout.is_none());
    eprintln!("{busy} answered 3004 at once, {timed_out} 3002 after the timeout");
    let counted = metric(
        &agent,
        &format!("doic_queue_full_total{{queue=\"upstream\",peer=\"{SERVER}\"}}"),
    );
    assert_eq!(counted, Some(busy as f64));
    assert_eq!(
        metric(&agent, "doic_queue_full_total{queue=\"answers\"}"),
        Some(0.0)
    );
    stop(agent);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_a_burst_on_two_workers_every_request_gets_exactly_one_answer() {
    // RFC 6733 §6.2: answers cross from the upstream connections' worker to
    // each client's; none is lost or answered twice. The default
    // configuration: any request that finds a queue full is answered 3004
    // by the agent, counted.
    let s = servers(2, ServerBehaviour::default()).await;
    let mut config = config_for(&s, "");
    assert_eq!(config.node.workers, Some(2));
    config.node.request_timeout_seconds = 30.0;
    let setup = start(s, config).await;
    const CLIENTS: u32 = 4;
    const N: u32 = 5_000;
    let mut tasks = Vec::new();
    for i in 0..CLIENTS {
        // One connection per peer (RFC 6733 §5.6.4): a name each.
        let id = Identity::new(&format!("client{}.example.org", i + 1), "example.org");
        let mut c = Client::connect(setup.addr, id, vec![TEST_APP])
            .await
            .unwrap();
        assert_eq!(c.cea_result, 2001);
        tasks.push(tokio::spawn(async move {
            let first = 1 + i * N;
            pipeline(&mut c, first, N, 250).await;
            answers(&mut c, first, N, Duration::from_secs(60)).await
        }));
    }
    let mut ok = 0;
    let mut busy = 0;
    for t in tasks {
        for (_, code) in t.await.unwrap() {
            match code {
                2001 => ok += 1,
                3004 => busy += 1,
                other => panic!("Result-Code {other}"),
            }
        }
    }
    assert_eq!(ok + busy, CLIENTS * N);
    let served: u64 = setup
        .servers
        .iter()
        .map(|s| s.stats.requests.load(std::sync::atomic::Ordering::Relaxed))
        .sum();
    assert_eq!(served, u64::from(ok), "every 2001 came from a server");
    let agent = setup.agent();
    let counted: f64 = ["server1.example.net", "server2.example.net"]
        .iter()
        .map(|p| {
            metric(
                agent,
                &format!("doic_queue_full_total{{queue=\"upstream\",peer=\"{p}\"}}"),
            )
            .unwrap()
        })
        .sum();
    assert_eq!(counted, f64::from(busy), "each 3004 counted");
    assert_eq!(
        metric(agent, "doic_queue_full_total{queue=\"answers\"}"),
        Some(0.0)
    );
    eprintln!("{ok} relayed, {busy} answered 3004 at a full queue");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_pending_bound_of_a_connection_requests_are_answered_3004_at_once() {
    // The bound that keeps a connection's answer queue from filling
    // (docs/relay.md, "Threads"): with 8 requests pending toward a hung
    // peer, the next ones are answered 3004 at once (RFC 6733 §7.1.3); the
    // 8 get their 3002 at the request timeout.
    let (addr, _hold) = hung_server().await;
    let mut config = agent_toml(None, "", &[(SERVER, addr, None)], "");
    config.node.max_pending_per_connection = 8;
    config.node.request_timeout_seconds = 3.0;
    config.node.tw_seconds = 30.0;
    let agent = launch(Run::Pinned, config, 1).await;
    let mut c = connect(agent.local_addrs()[0]).await;
    pipeline(&mut c, 1, 20, 20).await;
    let got = answers(&mut c, 1, 20, Duration::from_secs(20)).await;
    let (busy, rest) = got.split_at(12);
    assert!(
        busy.iter().all(|(hbh, code)| *code == 3004 && *hbh > 8),
        "{got:?}"
    );
    assert!(
        rest.iter().all(|(hbh, code)| *code == 3002 && *hbh <= 8),
        "{got:?}"
    );
    stop(agent);
}
