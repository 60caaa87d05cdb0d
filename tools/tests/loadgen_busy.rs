//! The built-in server held to a capacity, over real TCP: in the FIFO mode
//! it serves one request after another at C/s from one queue across its
//! connections (on the test's paused clock, to the millisecond), and in
//! the rejecting mode it answers 3004 above C counted over all its
//! connections.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::BytesMut;
use diameter::codec::{Header, Routing};
use tokio::time::Instant;
use tools::loadgen::{Busy, Client, Identity, Server, ServerBehaviour, TEST_APP, Traffic};

const MS: Duration = Duration::from_millis(1);

fn traffic() -> Traffic {
    Traffic {
        destination_realm: "example.net".into(),
        destination_host: None,
    }
}

async fn server(busy: Busy, capacity: u32) -> Server {
    let addr: SocketAddr = "127.0.0.1:0".parse().unwrap();
    let behaviour = ServerBehaviour {
        capacity: Some(capacity),
        busy,
        ..Default::default()
    };
    Server::spawn(
        addr,
        Identity::new("s.example.net", "example.net"),
        behaviour,
    )
    .await
    .unwrap()
}

async fn client(s: &Server, host: &str) -> Client {
    Client::connect(s.addr, Identity::new(host, "example.org"), vec![TEST_APP])
        .await
        .unwrap()
}

/// Writes `hbhs` as requests in one write.
async fn send(c: &mut Client, hbhs: &[u32]) {
    let mut out = BytesMut::new();
    for &h in hbhs {
        c.put_request(&mut out, &traffic(), h);
    }
    c.write_raw(&out).await.unwrap();
}

/// Reads one answer: (Hop-by-Hop, Result-Code, when it arrived).
async fn answer(c: &mut Client) -> (u32, u32, Instant) {
    let m = c.read_message().await.unwrap();
    let at = Instant::now();
    let rc = Routing::scan_answer(&m).unwrap().result_code().unwrap();
    (Header::read(&m).hop_by_hop, rc, at)
}

/// The Result-Codes of the next `n` answers.
async fn codes(c: &mut Client, n: usize) -> Vec<u32> {
    let mut v = Vec::with_capacity(n);
    for _ in 0..n {
        v.push(answer(c).await.1);
    }
    v
}

#[tokio::test(start_paused = true)]
async fn the_fifo_server_answers_each_request_when_its_turn_at_c_per_second_is_done() {
    // 100/s: 10 ms of service each, one queue for both connections.
    let s = server(Busy::Queue, 100).await;
    let mut a = client(&s, "a.example.org").await;
    let mut b = client(&s, "b.example.org").await;
    let t0 = Instant::now();
    send(&mut a, &[1, 2, 3]).await;
    tokio::time::sleep(MS).await;
    send(&mut b, &[11, 12]).await;
    // a's three take 0-10, 10-20, 20-30 ms; b's queue behind them.
    for (hbh, done) in [(1, 10), (2, 20), (3, 30)] {
        let (h, rc, at) = answer(&mut a).await;
        assert_eq!((h, rc), (hbh, 2001));
        assert_eq!(at - t0, done * MS, "request {hbh}");
    }
    for (hbh, done) in [(11, 40), (12, 50)] {
        let (h, rc, at) = answer(&mut b).await;
        assert_eq!((h, rc), (hbh, 2001));
        assert_eq!(at - t0, done * MS, "request {hbh}");
    }
    assert_eq!(s.backlog(), Duration::ZERO);
    // Overloaded, the wait grows without bound: 50 at once, the last one
    // waits 49 turns, whatever the client's patience.
    let t1 = Instant::now();
    let hbhs: Vec<u32> = (100..150).collect();
    send(&mut a, &hbhs).await;
    tokio::time::sleep(MS).await;
    assert_eq!(s.backlog(), 499 * MS);
    let mut last = t1;
    for &hbh in &hbhs {
        let (h, rc, at) = answer(&mut a).await;
        assert_eq!((h, rc), (hbh, 2001), "in order");
        last = at;
    }
    assert_eq!(last - t1, 500 * MS);
    assert_eq!(
        s.stats.rejected.load(std::sync::atomic::Ordering::Relaxed),
        0
    );
    s.stop();
}

#[tokio::test(start_paused = true)]
async fn the_rejecting_server_answers_3004_above_c_over_all_its_connections() {
    // 100/s: a tenth of a second's burst is 10 requests, whichever
    // connection they come on.
    let s = server(Busy::Reject { cost: 0.0 }, 100).await;
    let mut a = client(&s, "a.example.org").await;
    let mut b = client(&s, "b.example.org").await;
    send(&mut a, &(1..=6).collect::<Vec<_>>()).await;
    tokio::time::sleep(MS).await;
    send(&mut b, &(11..=16).collect::<Vec<_>>()).await;
    assert_eq!(codes(&mut a, 6).await, [2001; 6], "a came first");
    assert_eq!(
        codes(&mut b, 6).await,
        [2001, 2001, 2001, 2001, 3004, 3004],
        "server-wide"
    );
    // Answered at once: capacity comes back at 100/s.
    tokio::time::sleep(20 * MS).await;
    send(&mut b, &[20, 21, 22]).await;
    assert_eq!(codes(&mut b, 3).await, [2001, 2001, 3004]);
    assert_eq!(
        s.stats.rejected.load(std::sync::atomic::Ordering::Relaxed),
        3
    );
    s.stop();
}

#[tokio::test(start_paused = true)]
async fn each_rejection_takes_its_cost_from_the_capacity() {
    // 100/s, a rejection costs half a request: after a burst of 10 served,
    // 4 rejections take the time of 2 requests.
    let s = server(Busy::Reject { cost: 0.5 }, 100).await;
    let mut a = client(&s, "a.example.org").await;
    send(&mut a, &(1..=14).collect::<Vec<_>>()).await;
    codes(&mut a, 14).await;
    // 100 ms of work queued, plus 20 ms of rejections: 32 ms later one
    // request's time is free again, not three.
    tokio::time::sleep(32 * MS).await;
    send(&mut a, &[20, 21]).await;
    assert_eq!(codes(&mut a, 2).await, [2001, 3004]);
    s.stop();
}
