//! Connections before the capabilities exchange (RFC 6733 §5.3) on real
//! TCP loopback: what an idle connection costs, the caps on connections
//! waiting for CER, the CER timeout.

mod support;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use support::*;
use tokio::net::{TcpSocket, TcpStream};

// The shipped binary's allocator, so that resident memory is measured as
// the agent has it in production.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Resident memory of this process (agent and test), in bytes.
fn rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap();
    kb * 1024
}

/// Raises the soft descriptor limit to the hard one; returns the limit.
fn raise_fd_limit() -> u64 {
    let mut l = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `l` is a valid rlimit for the kernel to fill and read.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut l), 0);
        l.rlim_cur = l.rlim_max;
        assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &l), 0);
    }
    l.rlim_cur
}

/// A TCP connection to `to` from the loopback address `from`.
async fn connect_from(from: Ipv4Addr, to: SocketAddr) -> std::io::Result<TcpStream> {
    let s = TcpSocket::new_v4()?;
    s.bind(SocketAddr::new(IpAddr::V4(from), 0))?;
    s.connect(to).await
}

/// The text of `doic_connections_closed_before_cer_total{reason}`.
fn closed_before_cer(s: &Setup, reason: &str) -> u64 {
    let page = agent::metrics::render(s.agent().metrics());
    let key = format!("doic_connections_closed_before_cer_total{{reason=\"{reason}\"}} ");
    page.lines()
        .find_map(|l| l.strip_prefix(&key))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {key} in {page}"))
}

/// Reads until the agent closes the connection.
async fn closed_within(c: &mut TcpStream, limit: Duration) {
    use tokio::io::AsyncReadExt;
    let mut buf = [0u8; 512];
    loop {
        match tokio::time::timeout(limit, c.read(&mut buf)).await {
            Ok(Ok(0) | Err(_)) => return,
            Ok(Ok(_)) => {}
            Err(_) => panic!("the agent kept the connection open for {limit:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_thousand_idle_connections_cost_little_and_a_peer_still_gets_in() {
    let limit = raise_fd_limit();
    let n = 3000.min((limit.saturating_sub(300) / 2) as usize);
    assert!(n >= 1000, "descriptor limit {limit} too low for the test");
    let servers = servers(1, Default::default()).await;
    // Caps and the CER timeout out of the way: this measures what each held
    // connection costs.
    let config = config_for(
        &servers,
        "max_pending_cer = 4000\nmax_pending_cer_per_source = 4000\ncer_timeout_seconds = 300",
    );
    let s = start(servers, config).await;
    let before = rss();
    let mut idle = Vec::with_capacity(n);
    for _ in 0..n {
        idle.push(connect_from(Ipv4Addr::LOCALHOST, s.addr).await.unwrap());
    }
    let admission = s.agent().admission().clone();
    wait_until(Duration::from_secs(30), || admission.waiting() == n).await;
    // Both ends of every connection live in this process.
    let per_conn = rss().saturating_sub(before) / n as u64;
    eprintln!("{n} idle connections: {per_conn} bytes of resident memory each");
    assert!(per_conn < 20_000, "{per_conn} bytes per idle connection");
    // During the flood a peer connects and is served.
    let mut c = s.client().await;
    c.write_raw(&request(7, "example.net", &[])).await.unwrap();
    assert_eq!(result_code(&answer(&mut c).await), Some(2001));
    assert_eq!(admission.waiting(), n, "the flood is still held");
    drop(idle);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_over_the_caps_are_closed_at_once_and_a_new_peer_still_gets_in() {
    let servers = servers(1, Default::default()).await;
    let config = config_for(
        &servers,
        "max_pending_cer = 24\nmax_pending_cer_per_source = 8\ncer_timeout_seconds = 60",
    );
    let s = start(servers, config).await;
    let admission = s.agent().admission().clone();
    let mut flood = Vec::new();
    for host in 2..=4 {
        for _ in 0..8 {
            let from = Ipv4Addr::new(127, 0, 0, host);
            flood.push(connect_from(from, s.addr).await.unwrap());
        }
        wait_until(Duration::from_secs(10), || {
            admission.waiting() == flood.len()
        })
        .await;
    }
    // A ninth from the same source: accepted and closed at once (well
    // before the CER timeout; main's fixed timeout was 10 s).
    let mut ninth = connect_from(Ipv4Addr::new(127, 0, 0, 4), s.addr)
        .await
        .unwrap();
    closed_within(&mut ninth, Duration::from_secs(5)).await;
    assert_eq!(closed_before_cer(&s, "per_source_cap"), 1);
    // The total is reached by other sources; a peer from a new one evicts
    // the oldest connection of the heaviest source and is served.
    let mut c = s.client().await;
    c.write_raw(&request(9, "example.net", &[])).await.unwrap();
    assert_eq!(result_code(&answer(&mut c).await), Some(2001));
    closed_within(&mut flood[0], Duration::from_secs(5)).await;
    assert_eq!(closed_before_cer(&s, "evicted"), 1);
    assert_eq!(closed_before_cer(&s, "total_cap"), 0);
    assert_eq!(admission.waiting(), 23);
}

#[tokio::test(start_paused = true)]
async fn the_cer_timeout_closes_silent_and_stalled_connections() {
    // On the test's paused clock: the timeout is exact to the tick.
    let servers = servers(1, Default::default()).await;
    let config = config_for(&servers, "cer_timeout_seconds = 30");
    let s = start_here(servers, config).await;
    let t0 = tokio::time::Instant::now();
    let mut silent = connect_from(Ipv4Addr::LOCALHOST, s.addr).await.unwrap();
    let mut stalled = connect_from(Ipv4Addr::LOCALHOST, s.addr).await.unwrap();
    {
        use tokio::io::AsyncWriteExt;
        // The first bytes of a CER header, then nothing.
        stalled.write_all(&[1, 0, 0, 200, 0x80]).await.unwrap();
    }
    for c in [&mut silent, &mut stalled] {
        closed_within(c, Duration::from_secs(40)).await;
        let took = t0.elapsed();
        assert!(
            took >= Duration::from_secs(30) && took < Duration::from_millis(30_300),
            "closed after {took:?}"
        );
    }
    assert_eq!(closed_before_cer(&s, "cer_timeout"), 2);
    assert_eq!(s.agent().admission().waiting(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_longer_than_64_kib_before_cer_is_answered_5015_and_closed() {
    use tokio::io::AsyncWriteExt;
    let s = setup(1).await;
    let mut c = connect_from(Ipv4Addr::LOCALHOST, s.addr).await.unwrap();
    // A CER header announcing 100 KiB, and the first 8 KiB of it.
    let mut msg = request(1, "example.net", &[]);
    msg.resize(100 * 1024, 0);
    msg[1..4].copy_from_slice(&(100u32 * 1024).to_be_bytes()[1..]);
    msg[4] = 0x80;
    msg[5..8].copy_from_slice(&diameter::dictionary::cmd::CAPABILITIES_EXCHANGE.to_be_bytes()[1..]);
    c.write_all(&msg[..8 * 1024]).await.unwrap();
    // Answered and closed, long before the CER timeout (5 s).
    let mut got = Vec::new();
    tokio::time::timeout(
        Duration::from_secs(4),
        tokio::io::AsyncReadExt::read_to_end(&mut c, &mut got),
    )
    .await
    .expect("closed in time")
    .unwrap();
    let n = diameter::codec::frame_len(&got).unwrap().unwrap();
    assert_eq!(result_code(&got[..n]), Some(5015));
}
