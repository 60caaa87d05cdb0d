//! The built-in answering server: RFC 6733 §6.2 answers with Session-Id,
//! Origin-Host/Realm and Result-Code (or Experimental-Result, or a chosen
//! defect), the base protocol itself (CER/CEA §5.3, DWR/DWA §5.5, DPR/DPA
//! §5.4), optionally held to a capacity ([`super::busy`]).

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use diameter::codec::answer::{put_base, put_capabilities, put_error_answer};
use diameter::codec::header::{begin, finish};
use diameter::codec::{Capabilities, CommandFlags, Header, Routing, frame_len};
use diameter::dictionary::{cmd, code};

use super::busy::{self, Busy};
use super::{Identity, TEST_APP, put_mandatory_avp};

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

/// Which base-protocol request [`answer_base`] answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BaseRequest {
    /// CER (RFC 6733 §5.3), answered with a CEA of 2001.
    Capabilities,
    /// DWR (§5.5), answered with a DWA unless told not to.
    Watchdog,
    /// DPR (§5.4), answered with a DPA: the sender then closes.
    Disconnect,
}

/// Answers the base-protocol request of header `h` to a server `id`
/// reached at `ip` that offers `applications` into `out`: CER, DWR (when
/// `answer_dwr`) and DPR. `None` for any other request, left to the caller
/// (every loopback server of the tests serves the base protocol this way).
pub fn answer_base(
    out: &mut BytesMut,
    h: Header,
    (id, ip): (&Identity, std::net::IpAddr),
    applications: &[u32],
    answer_dwr: bool,
) -> Option<BaseRequest> {
    let o = (id.host.as_str(), id.realm.as_str());
    match h.command_code {
        cmd::CAPABILITIES_EXCHANGE => {
            put_capabilities(out, &id.caps(ip, applications.to_vec()), Some((h, 2001)), 0);
            Some(BaseRequest::Capabilities)
        }
        cmd::DEVICE_WATCHDOG => {
            if answer_dwr {
                put_base(out, cmd::DEVICE_WATCHDOG, o, Some(h), 0, None);
            }
            Some(BaseRequest::Watchdog)
        }
        cmd::DISCONNECT_PEER => {
            put_base(out, cmd::DISCONNECT_PEER, o, Some(h), 0, None);
            Some(BaseRequest::Disconnect)
        }
        _ => None,
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
            match answer_base(&mut out, h, (id, ip), &b.applications, b.answer_dwr) {
                Some(BaseRequest::Capabilities) => {
                    stats.cer.fetch_add(1, Ordering::Relaxed);
                    if let Ok((caps, _)) = Capabilities::read(&m) {
                        *stats
                            .peer_capabilities
                            .lock()
                            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(caps);
                    }
                }
                Some(BaseRequest::Watchdog) => {
                    stats.dwr.fetch_add(1, Ordering::Relaxed);
                }
                Some(BaseRequest::Disconnect) => {
                    stats.dpr.fetch_add(1, Ordering::Relaxed);
                    close = true;
                }
                None => {
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
