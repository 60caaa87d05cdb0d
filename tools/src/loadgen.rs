//! Built-in loopback Diameter peers for the demo, the tests and the
//! benchmark: a server that answers every request 2001 (RFC 6733 §6.2
//! answer with Session-Id, Origin-Host/Realm, Result-Code, Proxy-Info), and
//! a load client with closed-loop (N outstanding) and open-loop (target
//! rate) modes. Both do the base protocol themselves: CER/CEA (§5.3),
//! DWR/DWA (§5.5), DPR/DPA (§5.4). Traffic is freeDiameter test_app's:
//! Test-Request, command 16777214, application 16777215. A server may be
//! held to a capacity ([`busy`]: it queues or rejects above it).

mod busy;

pub use busy::Busy;

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::{Buf, BufMut, Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use diameter::codec::answer::{put_base, put_capabilities, put_error_answer};
use diameter::codec::header::{begin, finish};
use diameter::codec::{AvpFlags, Capabilities, CommandFlags, Header, Routing, frame_len, put_avp};
use diameter::dictionary::{app, cmd, code};

/// test_app's application id (vendor-specific 16777215).
pub const TEST_APP: u32 = app::FD_TEST;
/// test_app's Test-Request command code.
pub const TEST_CMD: u32 = cmd::FD_TEST;

/// A peer's identity.
#[derive(Debug, Clone)]
pub struct Identity {
    /// Origin-Host.
    pub host: String,
    /// Origin-Realm.
    pub realm: String,
}

impl Identity {
    /// An identity.
    #[must_use]
    pub fn new(host: &str, realm: &str) -> Self {
        Self {
            host: host.into(),
            realm: realm.into(),
        }
    }

    fn caps(&self, ip: std::net::IpAddr, apps: Vec<u32>) -> Capabilities {
        Capabilities {
            origin_host: self.host.clone(),
            origin_realm: self.realm.clone(),
            host_ip_addresses: vec![ip],
            vendor_id: 0,
            product_name: "doic-loadgen".into(),
            firmware_revision: None,
            auth_application_ids: apps,
            ..Capabilities::default()
        }
    }
}

/// Counters of a [`Server`].
#[derive(Debug, Default)]
pub struct ServerStats {
    /// Requests (other than base protocol) received.
    pub requests: AtomicU64,
    /// Of which carried the T flag.
    pub retransmitted: AtomicU64,
    /// Of which were answered 3004 for want of capacity ([`Busy::Reject`]).
    pub rejected: AtomicU64,
    /// The wait in the queue, in microseconds, of the last request that
    /// arrived ([`Busy::Queue`]).
    pub queue_wait_us: AtomicU64,
    /// DWRs received.
    pub dwr: AtomicU64,
    /// DPRs received.
    pub dpr: AtomicU64,
    /// CERs received.
    pub cer: AtomicU64,
    /// The last application request received and the answer sent to it
    /// (for byte-level checks).
    pub last: std::sync::Mutex<Option<(Bytes, Bytes)>>,
    /// The capabilities of the last CER received.
    pub peer_capabilities: std::sync::Mutex<Option<Capabilities>>,
}

/// How a [`Server`] behaves.
#[derive(Debug, Clone)]
pub struct ServerBehaviour {
    /// Answer application requests (false: swallow them).
    pub answer_requests: bool,
    /// Answer DWRs (false: a peer that stops answering the watchdog).
    pub answer_dwr: bool,
    /// Result-Code of the answers.
    pub result_code: u32,
    /// Applications advertised in the CEA.
    pub applications: Vec<u32>,
    /// Answer with Experimental-Result (Vendor-Id, Experimental-Result-Code)
    /// instead of Result-Code.
    pub experimental_result: Option<(u32, u32)>,
    /// Requests per second the server serves, over all its connections;
    /// what it does past it is `busy`. `None`: no limit.
    pub capacity: Option<u32>,
    /// What the server does above `capacity`.
    pub busy: Busy,
    /// Answer with this defect (a broken peer).
    pub malformed: Option<Malformed>,
}

/// A defect a [`Server`] puts in its answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Malformed {
    /// A Result-Code AVP with 2 bytes of data (Unsigned32 needs 4).
    ResultCodeLength,
    /// The last AVP's length runs past the end of the message.
    TruncatedAvp,
    /// Neither Result-Code nor Experimental-Result.
    NoResultCode,
    /// Two Origin-Host AVPs.
    TwoOriginHosts,
}

impl Default for ServerBehaviour {
    fn default() -> Self {
        Self {
            answer_requests: true,
            answer_dwr: true,
            result_code: 2001,
            applications: vec![TEST_APP],
            experimental_result: None,
            capacity: None,
            busy: Busy::default(),
            malformed: None,
        }
    }
}

/// A Diameter server on loopback; dropping the stop flag's owner does not
/// stop it: call [`Server::stop`].
#[derive(Debug)]
pub struct Server {
    /// Where it listens.
    pub addr: SocketAddr,
    /// Its counters.
    pub stats: Arc<ServerStats>,
    stop: Arc<AtomicBool>,
    behaviour: Arc<std::sync::RwLock<ServerBehaviour>>,
    work: Arc<busy::Work>,
}

/// Accepts connections on `listener` until `stop` is set (checked every
/// 50 ms), serving each with its own task.
pub fn accept_until<F, Fut>(listener: TcpListener, stop: Arc<AtomicBool>, serve: F)
where
    F: Fn(TcpStream) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    tokio::spawn(async move {
        loop {
            let accepted = tokio::select! {
                a = listener.accept() => a,
                () = tokio::time::sleep(Duration::from_millis(50)) => {
                    if stop.load(Ordering::Relaxed) { break }
                    continue;
                }
            };
            let Ok((stream, _)) = accepted else { continue };
            tokio::spawn(serve(stream));
        }
    });
}

impl Server {
    /// Binds `addr` and serves every connection on the current runtime.
    ///
    /// # Errors
    /// When `addr` cannot be bound.
    pub async fn spawn(
        addr: SocketAddr,
        id: Identity,
        behaviour: ServerBehaviour,
    ) -> std::io::Result<Server> {
        Server::serve(TcpListener::bind(addr).await?, id, behaviour)
    }

    /// Serves every connection of `listener` on the current runtime (a
    /// test that reserved the address beforehand, say).
    ///
    /// # Errors
    /// When the listener's address cannot be read.
    pub fn serve(
        listener: TcpListener,
        id: Identity,
        behaviour: ServerBehaviour,
    ) -> std::io::Result<Server> {
        let addr = listener.local_addr()?;
        let stats = Arc::new(ServerStats::default());
        let stop = Arc::new(AtomicBool::new(false));
        let behaviour = Arc::new(std::sync::RwLock::new(behaviour));
        let work = Arc::new(busy::Work::default());
        let shared = Shared {
            id,
            stats: stats.clone(),
            stop: stop.clone(),
            behaviour: behaviour.clone(),
            work: work.clone(),
        };
        accept_until(listener, stop.clone(), move |stream| {
            let shared = shared.clone();
            async move {
                let _ = serve_conn(stream, shared).await;
            }
        });
        Ok(Server {
            addr,
            stats,
            stop,
            behaviour,
            work,
        })
    }

    /// Stops accepting and closes every connection (abruptly, like a
    /// killed process: no DPR).
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
    }

    /// How long a request arriving now would wait in the server's queue
    /// before its service begins ([`Busy::Queue`]).
    #[must_use]
    pub fn backlog(&self) -> Duration {
        self.work.backlog(tokio::time::Instant::now())
    }

    /// Changes the behaviour of the server's connections.
    pub fn set_behaviour(&self, b: ServerBehaviour) {
        *self
            .behaviour
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = b;
    }
}

/// Reads into `buf` until bytes arrive (true), or the peer closes or `stop`
/// is set (false; `stop` is looked at every 50 ms while nothing arrives).
///
/// # Errors
/// Read errors.
pub async fn read_unless_stopped(
    stream: &mut TcpStream,
    buf: &mut BytesMut,
    stop: &AtomicBool,
) -> std::io::Result<bool> {
    loop {
        let n = tokio::select! {
            r = stream.read_buf(buf) => r?,
            () = tokio::time::sleep(Duration::from_millis(50)) => {
                if stop.load(Ordering::Relaxed) { return Ok(false) }
                continue;
            }
        };
        return Ok(n != 0 && !stop.load(Ordering::Relaxed));
    }
}

/// What every connection of a [`Server`] shares.
#[derive(Clone)]
struct Shared {
    id: Identity,
    stats: Arc<ServerStats>,
    stop: Arc<AtomicBool>,
    behaviour: Arc<std::sync::RwLock<ServerBehaviour>>,
    work: Arc<busy::Work>,
}

/// How long a connection sleeps, with nothing due, before it looks at the
/// stop flag again.
const STOP_POLL: Duration = Duration::from_millis(50);

async fn serve_conn(mut stream: TcpStream, sh: Shared) -> std::io::Result<()> {
    stream.set_nodelay(true)?;
    let ip = stream.local_addr()?.ip();
    let mut inbuf = BytesMut::with_capacity(256 * 1024);
    let mut out = BytesMut::with_capacity(64 * 1024);
    // Requests in the server's queue, in order: (answer due, request).
    let mut queued: VecDeque<(tokio::time::Instant, Bytes)> = VecDeque::new();
    let (id, stats) = (&sh.id, &sh.stats);
    loop {
        let wake = queued
            .front()
            .map_or_else(|| tokio::time::Instant::now() + STOP_POLL, |(due, _)| *due);
        tokio::select! {
            r = stream.read_buf(&mut inbuf) => {
                if r? == 0 || sh.stop.load(Ordering::Relaxed) {
                    return Ok(());
                }
            }
            () = tokio::time::sleep_until(wake) => {
                if sh.stop.load(Ordering::Relaxed) {
                    return Ok(());
                }
            }
        }
        let b = sh
            .behaviour
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        let o = (id.host.as_str(), id.realm.as_str());
        let mut close = false;
        while let Ok(Some(len)) = frame_len(&inbuf) {
            let m = inbuf.split_to(len).freeze();
            let h = Header::read(&m);
            if !h.is_request() {
                continue;
            }
            match h.command_code {
                cmd::CAPABILITIES_EXCHANGE => {
                    stats.cer.fetch_add(1, Ordering::Relaxed);
                    if let Ok((caps, _)) = Capabilities::read(&m) {
                        *stats
                            .peer_capabilities
                            .lock()
                            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(caps);
                    }
                    put_capabilities(
                        &mut out,
                        &id.caps(ip, b.applications.clone()),
                        Some((h, 2001)),
                        0,
                    );
                }
                cmd::DEVICE_WATCHDOG => {
                    stats.dwr.fetch_add(1, Ordering::Relaxed);
                    if b.answer_dwr {
                        put_base(&mut out, cmd::DEVICE_WATCHDOG, o, Some(h), 0, None);
                    }
                }
                cmd::DISCONNECT_PEER => {
                    stats.dpr.fetch_add(1, Ordering::Relaxed);
                    put_base(&mut out, cmd::DISCONNECT_PEER, o, Some(h), 0, None);
                    close = true;
                }
                _ => {
                    stats.requests.fetch_add(1, Ordering::Relaxed);
                    if h.flags.is_retransmit() {
                        stats.retransmitted.fetch_add(1, Ordering::Relaxed);
                    }
                    if !b.answer_requests {
                        continue;
                    }
                    let now = tokio::time::Instant::now();
                    let verdict = b
                        .capacity
                        .map_or(busy::Verdict::Serve, |c| sh.work.admit(now, c, b.busy));
                    match verdict {
                        busy::Verdict::Serve => put_answer(&mut out, &m, o, &b, stats, false),
                        busy::Verdict::Reject => {
                            stats.rejected.fetch_add(1, Ordering::Relaxed);
                            put_answer(&mut out, &m, o, &b, stats, true);
                        }
                        busy::Verdict::At(due) => {
                            let wait = due.saturating_duration_since(now);
                            let wait_us = wait.as_micros().min(u128::from(u64::MAX)) as u64;
                            stats.queue_wait_us.store(wait_us, Ordering::Relaxed);
                            queued.push_back((due, m));
                        }
                    }
                }
            }
        }
        // Answers whose turn is done leave in the queue's order.
        let now = tokio::time::Instant::now();
        while queued.front().is_some_and(|(due, _)| *due <= now) {
            if let Some((_, m)) = queued.pop_front() {
                put_answer(&mut out, &m, o, &b, stats, false);
            }
        }
        if !out.is_empty() {
            stream.write_all(&out).await?;
            out.clear();
        }
        if close {
            // The DPR sender closes (RFC 6733 §5.4); wait for it.
            let mut sink = [0u8; 512];
            while stream.read(&mut sink).await? > 0 {}
            return Ok(());
        }
    }
}

/// Appends the answer `b` gives to the application request `m` (3004 when
/// `too_busy`) and keeps both as the server's last exchange.
fn put_answer(
    out: &mut BytesMut,
    m: &Bytes,
    o: (&str, &str),
    b: &ServerBehaviour,
    stats: &ServerStats,
    too_busy: bool,
) {
    let at = out.len();
    let (rc, experimental) = if too_busy {
        (3004, None)
    } else {
        (b.result_code, b.experimental_result)
    };
    match (b.malformed, experimental) {
        (Some(d), _) => put_malformed_answer(out, m, o, d),
        (None, None) => put_error_answer(out, m, o, rc, None, ""),
        (None, Some((vendor, code))) => put_experimental_answer(out, m, o, vendor, code),
    }
    let answer = Bytes::copy_from_slice(&out[at..]);
    *stats
        .last
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner) = Some((m.clone(), answer));
}

/// What a client sends.
#[derive(Debug, Clone)]
pub struct Traffic {
    /// Destination-Realm.
    pub destination_realm: String,
    /// Destination-Host, if any.
    pub destination_host: Option<String>,
}

/// The outcome of a load run.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// Requests sent.
    pub sent: u64,
    /// Answers received (each matched to one request).
    pub answered: u64,
    /// Answers by Result-Code.
    pub by_code: BTreeMap<u32, u64>,
    /// Answers that matched no outstanding request (duplicates).
    pub unmatched: u64,
    /// Latencies in microseconds, sorted.
    pub latencies_us: Vec<u32>,
    /// Wall time of the run.
    pub elapsed: Duration,
    /// True when the agent sent DPR.
    pub got_dpr: bool,
    /// Answers that fail the codec's answer check
    /// ([`diameter::codec::Routing::scan_answer`]).
    pub malformed: u64,
}

impl Report {
    /// Answers per second.
    #[must_use]
    pub fn rate(&self) -> f64 {
        self.answered as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// A latency percentile (0..=100) in microseconds.
    #[must_use]
    pub fn percentile_us(&self, p: f64) -> u32 {
        if self.latencies_us.is_empty() {
            return 0;
        }
        let i = ((p / 100.0) * (self.latencies_us.len() - 1) as f64).round() as usize;
        self.latencies_us[i.min(self.latencies_us.len() - 1)]
    }
}

/// How a client paces its requests.
#[derive(Debug, Clone, Copy)]
pub enum Pace {
    /// Keep this many requests outstanding.
    Closed(usize),
    /// Send at this many requests per second, whatever comes back.
    Open(u64),
}

/// A load client connected to one peer (the agent, or a server directly).
#[derive(Debug)]
pub struct Client {
    stream: TcpStream,
    id: Identity,
    inbuf: BytesMut,
    next: u32,
    /// OC-Supported-Features put in every request, encoded ([`Client::announce_doic`]).
    features: Option<Bytes>,
    /// Result-Code of the CEA.
    pub cea_result: u32,
    /// The CEA as received.
    pub cea: Bytes,
}

impl Client {
    /// Connects and does the capabilities exchange (advertising test_app).
    ///
    /// # Errors
    /// Connection or framing errors, or no CEA within 5 seconds.
    pub async fn connect(
        addr: SocketAddr,
        id: Identity,
        applications: Vec<u32>,
    ) -> std::io::Result<Client> {
        let stream = TcpStream::connect(addr).await?;
        let ip = stream.local_addr()?.ip();
        let mut out = BytesMut::new();
        put_capabilities(&mut out, &id.caps(ip, applications), None, 1);
        Self::exchange(stream, id, &out).await
    }

    /// Connects and sends `cer` as given (well formed or not) as its CER;
    /// [`Client::cea`] is the answer.
    ///
    /// # Errors
    /// As [`Client::connect`].
    pub async fn connect_with_cer(
        addr: SocketAddr,
        id: Identity,
        cer: &[u8],
    ) -> std::io::Result<Client> {
        Self::exchange(TcpStream::connect(addr).await?, id, cer).await
    }

    async fn exchange(mut stream: TcpStream, id: Identity, cer: &[u8]) -> std::io::Result<Client> {
        stream.set_nodelay(true)?;
        stream.write_all(cer).await?;
        let mut c = Client {
            stream,
            id,
            inbuf: BytesMut::with_capacity(256 * 1024),
            next: 1,
            features: None,
            cea_result: 0,
            cea: Bytes::new(),
        };
        let m = tokio::time::timeout(Duration::from_secs(5), c.read_message())
            .await
            .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "no CEA"))??;
        let (_, rc) = Capabilities::read(&m).map_err(std::io::Error::other)?;
        c.cea_result = rc.unwrap_or(0);
        c.cea = m;
        Ok(c)
    }

    /// The client's own address (the agent sees it as the peer's address).
    ///
    /// # Errors
    /// When the socket has no address any more.
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.stream.local_addr()
    }

    /// Reads one whole message.
    ///
    /// # Errors
    /// EOF or framing errors.
    pub async fn read_message(&mut self) -> std::io::Result<Bytes> {
        loop {
            if let Some(n) = frame_len(&self.inbuf).map_err(std::io::Error::other)? {
                return Ok(self.inbuf.split_to(n).freeze());
            }
            if self.stream.read_buf(&mut self.inbuf).await? == 0 {
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
        }
    }

    /// Writes raw bytes.
    ///
    /// # Errors
    /// Write errors.
    pub async fn write_raw(&mut self, b: &[u8]) -> std::io::Result<()> {
        self.stream.write_all(b).await
    }

    /// Makes the client a DOIC reacting node (RFC 7683 §5.1.1, RFC 8581
    /// §6.1.1): every request it sends from now on carries
    /// OC-Supported-Features with the loss, rate and peer-report bits and
    /// its own identity as SourceID.
    pub fn announce_doic(&mut self) {
        let f = diameter::codec::doic::OcSupportedFeatures {
            feature_vector: Some(
                diameter::dictionary::doic::OLR_DEFAULT_ALGO
                    | diameter::dictionary::doic::OLR_RATE_ALGORITHM
                    | diameter::dictionary::doic::OC_PEER_REPORT,
            ),
            source_id: Some(self.id.host.clone()),
            peer_algo: None,
        };
        let mut out = BytesMut::with_capacity(64);
        // An AVP of three small children always encodes.
        if f.to_avp().encode(&mut out).is_ok() {
            self.features = Some(out.freeze());
        }
    }

    /// Appends one test request with Hop-by-Hop `hbh` to `out`.
    pub fn put_request(&self, out: &mut BytesMut, t: &Traffic, hbh: u32) {
        let s = begin(
            out,
            CommandFlags::REQUEST | CommandFlags::PROXIABLE,
            TEST_CMD,
            TEST_APP,
            hbh,
            hbh,
        );
        let sid = format!("{};{};{}", self.id.host, std::process::id(), hbh);
        put_mandatory_avp(out, code::SESSION_ID, sid.as_bytes());
        put_mandatory_avp(out, code::ORIGIN_HOST, self.id.host.as_bytes());
        put_mandatory_avp(out, code::ORIGIN_REALM, self.id.realm.as_bytes());
        put_mandatory_avp(out, code::DESTINATION_REALM, t.destination_realm.as_bytes());
        if let Some(h) = &t.destination_host {
            put_mandatory_avp(out, code::DESTINATION_HOST, h.as_bytes());
        }
        // Test-AVP (vendor 999999, code 16777215, Integer32): a vendor AVP
        // the agent does not know and relays untouched.
        out.put_u32(16_777_215);
        out.put_u32(0xc000_0010);
        out.put_u32(999_999);
        out.put_u32(hbh);
        if let Some(f) = &self.features {
            out.extend_from_slice(f);
        }
        finish(out, s);
    }

    /// Sends requests for `duration` (or until `stop`), at `pace`, then
    /// waits up to `grace` for the last answers. Answers DWR and DPR.
    ///
    /// # Errors
    /// I/O errors; a closed connection ends the run without error.
    pub async fn run(
        &mut self,
        t: &Traffic,
        pace: Pace,
        duration: Duration,
        grace: Duration,
        stop: &AtomicBool,
    ) -> std::io::Result<Report> {
        let mut report = Report::default();
        let mut sent_at: HashMap<u32, Instant> = HashMap::new();
        let mut out = BytesMut::with_capacity(64 * 1024);
        let start = Instant::now();
        let end = start + duration;
        let mut latencies = Vec::new();
        let mut open_sent: u64 = 0;
        let mut sending = true;
        loop {
            let now = Instant::now();
            if sending && (now >= end || stop.load(Ordering::Relaxed) || report.got_dpr) {
                sending = false;
            }
            if !sending && (sent_at.is_empty() || now >= end + grace) {
                break;
            }
            if sending {
                let want = match pace {
                    Pace::Closed(n) => n.saturating_sub(sent_at.len()),
                    Pace::Open(rate) => {
                        let due = (now - start).as_secs_f64() * rate as f64;
                        (due as u64).saturating_sub(open_sent) as usize
                    }
                };
                for _ in 0..want.min(4096) {
                    self.next = self.next.wrapping_add(1);
                    let hbh = self.next;
                    self.put_request(&mut out, t, hbh);
                    sent_at.insert(hbh, now);
                    report.sent += 1;
                    open_sent += 1;
                }
            }
            if !out.is_empty() {
                self.stream.write_all(&out).await?;
                out.clear();
            }
            let wait = match pace {
                Pace::Open(_) if sending => Duration::from_millis(1),
                _ => Duration::from_millis(20),
            };
            let read = tokio::time::timeout(wait, self.stream.read_buf(&mut self.inbuf)).await;
            match read {
                Ok(Ok(0)) => break,
                Ok(Ok(_)) => {}
                Ok(Err(e)) if e.kind() == std::io::ErrorKind::ConnectionReset => break,
                Ok(Err(e)) => return Err(e),
                Err(_) => continue,
            }
            let now = Instant::now();
            while let Ok(Some(n)) = frame_len(&self.inbuf) {
                let m = self.inbuf.split_to(n).freeze();
                let h = Header::read(&m);
                if h.is_request() {
                    let o = (self.id.host.as_str(), self.id.realm.as_str());
                    match h.command_code {
                        cmd::DEVICE_WATCHDOG => {
                            put_base(&mut out, cmd::DEVICE_WATCHDOG, o, Some(h), 0, None)
                        }
                        cmd::DISCONNECT_PEER => {
                            put_base(&mut out, cmd::DISCONNECT_PEER, o, Some(h), 0, None);
                            report.got_dpr = true;
                        }
                        _ => {
                            put_error_answer(&mut out, &m, o, 3001, None, "");
                        }
                    }
                    continue;
                }
                match sent_at.remove(&h.hop_by_hop) {
                    Some(at) => {
                        report.answered += 1;
                        let us = (now - at).as_micros().min(u128::from(u32::MAX)) as u32;
                        latencies.push(us);
                        let code = match diameter::codec::Routing::scan_answer(&m) {
                            Ok(r) => r
                                .result_code()
                                .or(r.experimental_result_code().map(|(_, c)| c))
                                .unwrap_or(0),
                            Err(_) => {
                                report.malformed += 1;
                                0
                            }
                        };
                        *report.by_code.entry(code).or_default() += 1;
                    }
                    None => report.unmatched += 1,
                }
            }
        }
        if !out.is_empty() {
            let _ = self.stream.write_all(&out).await;
        }
        // Rates are per second of sending, not of waiting for stragglers.
        report.elapsed = start.elapsed().min(duration).max(Duration::from_millis(1));
        latencies.sort_unstable();
        report.latencies_us = latencies;
        Ok(report)
    }

    /// Sends DPR and waits (up to a second) for the DPA.
    ///
    /// # Errors
    /// I/O errors.
    pub async fn disconnect(mut self) -> std::io::Result<()> {
        let mut out = BytesMut::new();
        let o = (self.id.host.clone(), self.id.realm.clone());
        put_base(
            &mut out,
            cmd::DISCONNECT_PEER,
            (&o.0, &o.1),
            None,
            7,
            Some(0),
        );
        self.stream.write_all(&out).await?;
        let _ = tokio::time::timeout(Duration::from_secs(1), async {
            while let Ok(m) = self.read_message().await {
                let h = Header::read(&m);
                if !h.is_request() && h.command_code == cmd::DISCONNECT_PEER {
                    break;
                }
            }
        })
        .await;
        self.inbuf.advance(self.inbuf.len());
        Ok(())
    }
}

/// Writes one AVP with the M bit and no Vendor-Id by the codec's
/// [`put_avp`]: the AVPs of test messages.
///
/// # Panics
/// For data longer than 2^24 bytes (the load generator's are a few bytes).
pub fn put_mandatory_avp(out: &mut BytesMut, code: u32, data: &[u8]) {
    put_avp(out, code, AvpFlags(AvpFlags::MANDATORY), None, data).expect("a short avp");
}

/// Begins an answer to `req`: header, Session-Id when the request has one,
/// Origin-Host and Origin-Realm. Returns the start for [`finish`].
fn begin_answer(out: &mut BytesMut, req: &[u8], origin: (&str, &str)) -> usize {
    let h = Header::read(req);
    let flags = h.flags.0 & CommandFlags::PROXIABLE;
    let (cmd, app) = (h.command_code, h.application_id);
    let start = begin(out, flags, cmd, app, h.hop_by_hop, h.end_to_end);
    if let Ok(r) = Routing::scan(req)
        && let Some(sid) = r.session_id()
    {
        put_mandatory_avp(out, code::SESSION_ID, sid);
    }
    put_mandatory_avp(out, code::ORIGIN_HOST, origin.0.as_bytes());
    put_mandatory_avp(out, code::ORIGIN_REALM, origin.1.as_bytes());
    start
}

/// An answer to `req` with the defect `d` (and otherwise 2001).
fn put_malformed_answer(out: &mut BytesMut, req: &[u8], origin: (&str, &str), d: Malformed) {
    let start = begin_answer(out, req, origin);
    let ok = 2001u32.to_be_bytes();
    match d {
        Malformed::ResultCodeLength => put_mandatory_avp(out, code::RESULT_CODE, &ok[2..]),
        Malformed::NoResultCode => {}
        Malformed::TwoOriginHosts => {
            put_mandatory_avp(out, code::ORIGIN_HOST, b"evil.example.net");
            put_mandatory_avp(out, code::RESULT_CODE, &ok);
        }
        Malformed::TruncatedAvp => {
            put_mandatory_avp(out, code::RESULT_CODE, &ok);
            let at = out.len();
            put_mandatory_avp(out, code::PRODUCT_NAME, b"abcd");
            // AVP Length 12 + 16: past the end of the message
            out[at + 7] += 16;
        }
    }
    finish(out, start);
}

/// An answer to `req` with Experimental-Result { Vendor-Id, Experimental-Result-Code }
/// (RFC 6733 §7.6) instead of Result-Code.
fn put_experimental_answer(
    out: &mut BytesMut,
    req: &[u8],
    origin: (&str, &str),
    vendor: u32,
    code: u32,
) {
    let start = begin_answer(out, req, origin);
    let mut inner = BytesMut::new();
    put_mandatory_avp(&mut inner, code::VENDOR_ID, &vendor.to_be_bytes());
    put_mandatory_avp(
        &mut inner,
        code::EXPERIMENTAL_RESULT_CODE,
        &code.to_be_bytes(),
    );
    put_mandatory_avp(out, code::EXPERIMENTAL_RESULT, &inner);
    finish(out, start);
}
