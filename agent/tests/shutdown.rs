//! Shutdown on real TCP loopback (RFC 6733 §5.4) with the default worker
//! count: thousands of requests pending at a server that does not answer,
//! then the agent stops. Every request a client sends gets exactly one
//! answer, whether the client stops sending at the DPR or keeps sending
//! (many requests per write) well past it, and the connection ends with a
//! FIN after the last answer, never with a reset. A client that stops
//! reading does not hold the stop: it ends within the drain and the close's
//! linger.

mod support;

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use bytes::BytesMut;
use diameter::codec::Header;
use diameter::codec::answer::put_base;
use diameter::dictionary::cmd;
use support::*;
use tools::loadgen::{Client, Pace, ServerBehaviour, TEST_CMD, Traffic};

/// Requests left pending at the server when the agent stops.
const PENDING: u32 = 3000;
/// `node.drain_seconds` by default.
const DEFAULT_DRAIN: f64 = 5.0;
/// The drain of the client that keeps sending: its last bursts must fall
/// between the 0.8 D answers and D, a window of 0.2 D, which 8 s makes
/// 1.6 s (ten bursts take about 0.3 s; the margin is for a starved CPU).
const LONG_DRAIN: f64 = 8.0;
/// Requests per write.
const BURST: u32 = 50;
/// Writes the client still sends once every pending request is answered.
const AFTER_FLUSH: u32 = 10;

/// The load tests run one at a time: on a small machine two of them side
/// by side would mostly measure each other.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn traffic() -> Traffic {
    Traffic {
        destination_realm: "example.net".into(),
        destination_host: None,
    }
}

/// One server that swallows requests, an agent with the default worker
/// count and a drain of `drain` seconds in front of it.
async fn silent_server_setup(drain: f64) -> Setup {
    silent_server_with_timeout(Run::Pinned, drain, 60.0).await
}

/// [`silent_server_setup`] with a request timeout of `timeout` seconds, the
/// agent run as `run` says.
async fn silent_server_with_timeout(run: Run, drain: f64, timeout: f64) -> Setup {
    let silent = ServerBehaviour {
        answer_requests: false,
        ..Default::default()
    };
    one_server(run, silent, |config| {
        config.node.drain_seconds = drain;
        config.node.request_timeout_seconds = timeout;
    })
    .await
}

/// What the client saw.
#[derive(Debug, Default)]
struct Seen {
    sent: u64,
    answered: u64,
    unmatched: u64,
    not_3002: u64,
    dpr: bool,
    /// How the connection ended: `None` for a clean EOF.
    end: Option<std::io::ErrorKind>,
    outstanding: HashSet<u32>,
}

impl Seen {
    /// Handles one message from the agent: answers its DPR and DWR,
    /// matches answers.
    fn take(&mut self, m: &[u8], out: &mut BytesMut) {
        let h = Header::read(m);
        let o = ("client1.example.org", "example.org");
        if h.is_request() {
            if h.command_code == cmd::DISCONNECT_PEER {
                self.dpr = true;
            }
            put_base(out, h.command_code, o, Some(h), 0, None);
            return;
        }
        if self.outstanding.remove(&h.hop_by_hop) {
            self.answered += 1;
            if result_code(m) != Some(3002) {
                self.not_3002 += 1;
            }
        } else {
            self.unmatched += 1;
        }
    }

    /// Reads for `wait`, taking every message that arrives.
    async fn read_for(&mut self, c: &mut Client, wait: Duration) -> bool {
        let until = tokio::time::Instant::now() + wait;
        let mut out = BytesMut::new();
        let mut open = true;
        while let Ok(r) = tokio::time::timeout_at(until, c.read_message()).await {
            match r {
                Ok(m) => self.take(&m, &mut out),
                Err(e) => {
                    self.end = (e.kind() != std::io::ErrorKind::UnexpectedEof).then_some(e.kind());
                    open = false;
                    break;
                }
            }
        }
        if open && !out.is_empty() && c.write_raw(&out).await.is_err() {
            open = false;
        }
        open
    }
}

/// Sends `n` requests in writes of [`BURST`], starting at Hop-by-Hop `next`.
async fn send(c: &mut Client, seen: &mut Seen, next: &mut u32, n: u32) -> bool {
    let t = traffic();
    let mut out = BytesMut::new();
    for _ in 0..n {
        c.put_request(&mut out, &t, *next);
        seen.outstanding.insert(*next);
        seen.sent += 1;
        *next += 1;
        if out.len() > 64 * 1024 || next.is_multiple_of(BURST) {
            if c.write_raw(&out).await.is_err() {
                return false;
            }
            out.clear();
        }
    }
    out.is_empty() || c.write_raw(&out).await.is_ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_answers_every_request_of_a_client_that_keeps_sending() {
    let _one = ONE_AT_A_TIME.lock().await;
    let mut s = silent_server_setup(LONG_DRAIN).await;
    let mut c = s.client().await;
    let mut seen = Seen::default();
    let mut next = 1;
    assert!(send(&mut c, &mut seen, &mut next, PENDING).await);
    wait_until(Duration::from_secs(10), || {
        s.servers[0].stats.requests.load(Ordering::Relaxed) == u64::from(PENDING)
    })
    .await;
    let t0 = Instant::now();
    let client = async {
        // A burst every 20 ms, through the DPR (answered), the local 3002
        // of every pending request at 80 % of the drain (6.4 s), and ten
        // bursts more; then the client stops and reads to the end.
        let mut after_flush = 0;
        let mut open = true;
        while open && after_flush < AFTER_FLUSH && t0.elapsed() < Duration::from_secs(20) {
            open = send(&mut c, &mut seen, &mut next, BURST).await
                && seen.read_for(&mut c, Duration::from_millis(20)).await;
            if (1..=PENDING).all(|h| !seen.outstanding.contains(&h)) {
                after_flush += 1;
            }
        }
        let stopped_sending = t0.elapsed();
        while open && t0.elapsed() < Duration::from_secs(30) {
            open = seen.read_for(&mut c, Duration::from_millis(100)).await;
        }
        // The end of stream seen, the client closes too.
        drop(c);
        stopped_sending
    };
    let ((), stopped_sending) = tokio::join!(s.stop(), client);
    assert!(seen.dpr, "the agent sent DPR: {seen:?}");
    assert!(
        seen.sent > u64::from(PENDING + AFTER_FLUSH * BURST),
        "the client kept sending after the flush: {seen:?}"
    );
    assert_eq!(
        (seen.sent, seen.unmatched, seen.end),
        (seen.answered, 0, None),
        "sent == answered, no duplicate, a clean end of stream (client stopped sending after {stopped_sending:?})"
    );
    assert_eq!(seen.not_3002, 0, "{seen:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_answers_every_request_of_a_client_that_stops_at_the_dpr() {
    let _one = ONE_AT_A_TIME.lock().await;
    let mut s = silent_server_setup(DEFAULT_DRAIN).await;
    let mut c = s.client().await;
    let stop = AtomicBool::new(false);
    let t = traffic();
    // Open loop at 3000 requests per second (a write every millisecond): the
    // client stops sending when it reads the DPR and waits for the rest.
    let run = async {
        let r = c
            .run(
                &t,
                Pace::Open(3000),
                Duration::from_secs(20),
                Duration::from_secs(10),
                &stop,
            )
            .await;
        // Every answer in, the client closes.
        drop(c);
        r
    };
    let at_server = s.servers[0].stats.clone();
    let stopping = async {
        wait_until(Duration::from_secs(10), || {
            at_server.requests.load(Ordering::Relaxed) >= u64::from(PENDING)
        })
        .await;
        s.stop().await;
    };
    let (r, ()) = tokio::join!(run, stopping);
    let r = r.unwrap();
    assert!(r.got_dpr, "{r:?}");
    assert!(r.sent >= u64::from(PENDING), "{}", r.sent);
    assert_eq!((r.sent, r.unmatched), (r.answered, 0), "{:?}", r.by_code);
    assert_eq!(r.by_code.get(&3002), Some(&r.sent), "{:?}", r.by_code);
}

/// Requests of the client that stops reading: their answers (over 15 MB)
/// are more than the sockets between it and the agent hold.
const UNREAD: u32 = 150_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stop_ends_in_time_when_a_client_does_not_read_its_answers() {
    // A client that stops reading with megabytes of answers queued toward
    // it: its DPA never comes, the drain (2 s) ends its connection, and the
    // close writes what the socket takes for at most the linger, then gives
    // the peer up. The agent has stopped within the drain and the linger.
    let _one = ONE_AT_A_TIME.lock().await;
    let mut s = setup(1).await;
    let mut c = s.client().await;
    let mut seen = Seen::default();
    let mut next = 1;
    assert!(send(&mut c, &mut seen, &mut next, UNREAD).await);
    // Every request answered into the agent's queue toward the client
    // (relayed, or 3004 above `max_pending_per_connection`).
    let table = s.agent().peers().clone();
    let answered = || -> u64 {
        table
            .all()
            .iter()
            .filter(|(_, p)| p.host == "client1.example.org")
            .map(|(_, p)| p.stats.answers_out.total())
            .sum()
    };
    wait_until(Duration::from_secs(30), || answered() >= u64::from(UNREAD)).await;
    let t0 = Instant::now();
    let bound = Duration::from_secs(2) + agent::net::conn::CLOSE_LINGER + Duration::from_secs(4);
    // Joined on a thread of its own: an agent that never stops fails the
    // test instead of holding it.
    let agent = s.agent.take().unwrap();
    agent.shutdown();
    let (done, stopped) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        agent.join();
        let _ = done.send(());
    });
    let stopped =
        tokio::task::spawn_blocking(move || stopped.recv_timeout(Duration::from_secs(30)))
            .await
            .unwrap();
    let took = t0.elapsed();
    drop(c);
    assert!(stopped.is_ok(), "the agent did not stop within 30 s");
    assert!(
        took <= bound,
        "the agent stopped after {took:?}, above {bound:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_behind_the_peers_dpr_in_the_same_write_is_answered() {
    let s = setup(1).await;
    let mut c = s.client().await;
    let mut out = BytesMut::new();
    let o = ("client1.example.org", "example.org");
    put_base(&mut out, cmd::DISCONNECT_PEER, o, None, 77, Some(0));
    out.extend_from_slice(&request(78, "example.net", &[]));
    c.write_raw(&out).await.unwrap();
    let mut got = Vec::new();
    while let Ok(Ok(m)) = tokio::time::timeout(Duration::from_secs(10), c.read_message()).await {
        let h = Header::read(&m);
        got.push((h.command_code, h.hop_by_hop, result_code(&m)));
    }
    got.sort_unstable_by_key(|&(_, hbh, _)| hbh);
    assert_eq!(
        got,
        vec![
            (cmd::DISCONNECT_PEER, 77, Some(2001)),
            (TEST_CMD, 78, Some(3002))
        ],
        "the DPA and the request's one answer, then the end of stream"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_sent_past_the_drain_are_answered_or_counted_never_reset() {
    let _one = ONE_AT_A_TIME.lock().await;
    let mut s = silent_server_setup(2.0).await;
    let table = s.agent().peers().clone();
    let mut c = s.client().await;
    let mut seen = Seen::default();
    let mut next = 1;
    let client = async {
        // A client that ignores the DPR: it sends until it reads the end of
        // stream, then one write more, then closes.
        let t0 = Instant::now();
        let mut open = true;
        while open && t0.elapsed() < Duration::from_secs(20) {
            open = send(&mut c, &mut seen, &mut next, BURST).await
                && seen.read_for(&mut c, Duration::from_millis(20)).await;
        }
        assert!(send(&mut c, &mut seen, &mut next, BURST).await);
        drop(c);
    };
    let ((), ()) = tokio::join!(s.stop(), client);
    let discarded: u64 = table
        .all()
        .iter()
        .filter(|(_, p)| p.host == "client1.example.org")
        .map(|(_, p)| p.stats.requests_discarded.load(Ordering::Relaxed))
        .sum();
    assert!(seen.dpr, "{seen:?}");
    assert_eq!(seen.end, None, "the agent's FIN, not a reset: {seen:?}");
    assert!(discarded >= u64::from(BURST), "{discarded} {seen:?}");
    assert_eq!(
        seen.sent,
        seen.answered + discarded,
        "each request answered or counted: {seen:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_peer_that_sends_dpr_with_requests_in_flight_gets_their_answers_before_the_dpa() {
    // RFC 6733 §5.4: the receiver of the DPA closes the transport, so a DPA
    // sent while the peer's requests are still in flight would lose their
    // answers. A server that never answers, a request timeout of 1 s: the
    // answers are the agent's 3002s, a second after the DPR (on the test's
    // paused clock).
    let s = silent_server_with_timeout(Run::Here, DEFAULT_DRAIN, 1.0).await;
    let mut c = s.client().await;
    let mut out = BytesMut::new();
    for hbh in 1..=40 {
        out.extend_from_slice(&request(hbh, "example.net", &[]));
    }
    let o = ("client1.example.org", "example.org");
    put_base(&mut out, cmd::DISCONNECT_PEER, o, None, 99, Some(0));
    // A request behind the DPR, in the same write: answered, not relayed.
    out.extend_from_slice(&request(100, "example.net", &[]));
    c.write_raw(&out).await.unwrap();
    let mut got = Vec::new();
    while let Ok(Ok(m)) = tokio::time::timeout(Duration::from_secs(10), c.read_message()).await {
        let h = Header::read(&m);
        got.push((h.command_code, h.hop_by_hop, result_code(&m)));
    }
    let dpa = got
        .iter()
        .position(|&(cmd, _, _)| cmd == cmd::DISCONNECT_PEER);
    assert_eq!(dpa, Some(got.len() - 1), "the DPA comes last: {got:?}");
    assert_eq!(got[got.len() - 1], (cmd::DISCONNECT_PEER, 99, Some(2001)));
    let mut answers: Vec<(u32, Option<u32>)> = got[..got.len() - 1]
        .iter()
        .map(|&(_, h, rc)| (h, rc))
        .collect();
    answers.sort_unstable();
    let want: Vec<(u32, Option<u32>)> = (1..=40).chain([100]).map(|h| (h, Some(3002))).collect();
    assert_eq!(answers, want, "each request its one answer, before the DPA");
    assert_eq!(
        s.servers[0].stats.requests.load(Ordering::Relaxed),
        40,
        "the request behind the DPR was not relayed"
    );
}
