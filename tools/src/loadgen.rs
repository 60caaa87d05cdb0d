//! Built-in loopback Diameter peers for the demo, the tests and the
//! benchmarks: a server ([`server`]) that answers every request 2001
//! (RFC 6733 §6.2 answer with Session-Id, Origin-Host/Realm, Result-Code,
//! Proxy-Info), optionally held to a capacity ([`busy`]: it queues FIFO or
//! rejects with 3004 above it), and a load client with closed-loop (N
//! outstanding), open-loop (target rate) and stepped open-loop modes, whose
//! counts can be watched live. Both do the base protocol themselves:
//! CER/CEA (§5.3), DWR/DWA (§5.5), DPR/DPA (§5.4). Traffic is freeDiameter
//! test_app's: Test-Request, command 16777214, application 16777215.

mod busy;
mod server;

pub use busy::Busy;
pub use server::{
    BaseRequest, Malformed, Server, ServerBehaviour, ServerStats, accept_until, answer_base,
    read_unless_stopped,
};

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::{Buf, BufMut, Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use diameter::codec::answer::{put_base, put_capabilities, put_error_answer};
use diameter::codec::header::{begin, finish};
use diameter::codec::{AvpFlags, Capabilities, CommandFlags, Header, frame_len, put_avp};
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
    /// Latencies of the 2001 answers alone, in microseconds, sorted (what
    /// goodput counts: [`Report::goodput`]).
    pub ok_latencies_us: Vec<u32>,
    /// Wall time of the run.
    pub elapsed: Duration,
    /// True when the agent sent DPR.
    pub got_dpr: bool,
    /// Answers that fail the codec's answer check
    /// ([`diameter::codec::Routing::scan_answer`]).
    pub malformed: u64,
    /// Answers that carried an OC-OLR (an overload report, RFC 7683 §7.3).
    pub with_olr: u64,
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
        percentile(&self.latencies_us, p)
    }

    /// A percentile (0..=100) of the 2001 answers' latencies in
    /// microseconds.
    #[must_use]
    pub fn ok_percentile_us(&self, p: f64) -> u32 {
        percentile(&self.ok_latencies_us, p)
    }

    /// Goodput: 2001 answers received within `timeout` of their request,
    /// per second of sending (RFC 7068 §3: useful throughput). Answers
    /// later than a client would wait count for nothing.
    #[must_use]
    pub fn goodput(&self, timeout: Duration) -> f64 {
        let t = timeout.as_micros().min(u128::from(u32::MAX)) as u32;
        let within = self.ok_latencies_us.partition_point(|&us| us <= t);
        within as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

/// The `p` percentile (0..=100) of sorted `v` (0 when empty).
fn percentile(v: &[u32], p: f64) -> u32 {
    if v.is_empty() {
        return 0;
    }
    let i = ((p / 100.0) * (v.len() - 1) as f64).round() as usize;
    v[i.min(v.len() - 1)]
}

/// How a client paces its requests.
#[derive(Debug, Clone, Copy)]
pub enum Pace {
    /// Keep this many requests outstanding.
    Closed(usize),
    /// Send at this many requests per second, whatever comes back.
    Open(u64),
    /// Open loop in steps: `step` at `shares[0] x base` requests per
    /// second, then `step` at `shares[1] x base`, and so on; nothing after
    /// the last.
    Steps {
        /// Requests per second of share 1.
        base: u64,
        /// How long each step lasts.
        step: Duration,
        /// Each step's multiple of `base`.
        shares: &'static [f64],
    },
}

impl Pace {
    /// Requests an open-loop pace has sent by `elapsed` (`None`: closed
    /// loop).
    fn due(&self, elapsed: Duration) -> Option<u64> {
        match *self {
            Pace::Closed(_) => None,
            Pace::Open(rate) => Some((elapsed.as_secs_f64() * rate as f64) as u64),
            Pace::Steps { base, step, shares } => {
                let (t, s) = (elapsed.as_secs_f64(), step.as_secs_f64().max(1e-3));
                let mut due = 0.0;
                for (i, share) in shares.iter().enumerate() {
                    let within = (t - i as f64 * s).clamp(0.0, s);
                    due += within * share * base as f64;
                }
                Some(due as u64)
            }
        }
    }

    /// The offered rate `elapsed` into the run (requests per second; 0 for
    /// a closed loop).
    #[must_use]
    pub fn rate_at(&self, elapsed: Duration) -> f64 {
        match *self {
            Pace::Closed(_) => 0.0,
            Pace::Open(rate) => rate as f64,
            Pace::Steps { base, step, shares } => {
                let i = (elapsed.as_secs_f64() / step.as_secs_f64().max(1e-3)) as usize;
                shares.get(i).map_or(0.0, |s| s * base as f64)
            }
        }
    }
}

/// A client's running counts, for a live display while [`Client::run`]
/// goes on ([`Client::watch`]).
#[derive(Debug, Default)]
pub struct Live {
    /// Requests sent.
    pub sent: AtomicU64,
    /// Answers received.
    pub answered: AtomicU64,
    /// 2001 answers received within the timeout given to [`Client::watch`].
    pub ok_in_time: AtomicU64,
    timeout_us: u32,
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
    /// Running counts ([`Client::watch`]).
    live: Option<Arc<Live>>,
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
            live: None,
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

    /// Keeps running counts from now on, 2001 answers counted as in time
    /// when they come within `timeout` of their request.
    pub fn watch(&mut self, timeout: Duration) -> Arc<Live> {
        let live = Arc::new(Live {
            timeout_us: timeout.as_micros().min(u128::from(u32::MAX)) as u32,
            ..Live::default()
        });
        self.live = Some(live.clone());
        live
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
        let mut ok_latencies = Vec::new();
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
                let want = match (pace, pace.due(now - start)) {
                    (Pace::Closed(n), _) => n.saturating_sub(sent_at.len()),
                    (_, due) => due.unwrap_or(0).saturating_sub(open_sent) as usize,
                };
                let want = want.min(4096);
                if let Some(l) = &self.live {
                    l.sent.fetch_add(want as u64, Ordering::Relaxed);
                }
                for _ in 0..want {
                    self.next = self.next.wrapping_add(1);
                    let hbh = self.next;
                    self.put_request(&mut out, t, hbh);
                    sent_at.insert(hbh, now);
                    report.sent += 1;
                    open_sent += 1;
                }
            }
            if !out.is_empty() {
                self.write_reading(&mut out).await?;
            }
            let wait = match pace {
                Pace::Open(_) | Pace::Steps { .. } if sending => Duration::from_millis(1),
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
                            Ok(r) => {
                                if r.oc_olrs().next().is_some() {
                                    report.with_olr += 1;
                                }
                                r.result_code()
                                    .or(r.experimental_result_code().map(|(_, c)| c))
                                    .unwrap_or(0)
                            }
                            Err(_) => {
                                report.malformed += 1;
                                0
                            }
                        };
                        *report.by_code.entry(code).or_default() += 1;
                        if code == 2001 {
                            ok_latencies.push(us);
                        }
                        if let Some(l) = &self.live {
                            l.answered.fetch_add(1, Ordering::Relaxed);
                            if code == 2001 && us <= l.timeout_us {
                                l.ok_in_time.fetch_add(1, Ordering::Relaxed);
                            }
                        }
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
        ok_latencies.sort_unstable();
        report.ok_latencies_us = ok_latencies;
        Ok(report)
    }

    /// Writes all of `out` while reading what arrives meanwhile into the
    /// input buffer, as a client does that reads and writes at once: one
    /// that only wrote while the relay's window was closed would stop
    /// reading its answers, and the relay, finding its answers unread,
    /// would close it. Stops writing (and drops the rest of `out`) when the
    /// peer ends the connection: the next read sees it.
    ///
    /// # Errors
    /// Write errors.
    async fn write_reading(&mut self, out: &mut BytesMut) -> std::io::Result<()> {
        use std::io::ErrorKind::{ConnectionReset, WouldBlock};
        while !out.is_empty() {
            tokio::select! {
                w = self.stream.writable() => {
                    w?;
                    match self.stream.try_write(out) {
                        Ok(n) => out.advance(n),
                        Err(e) if e.kind() == WouldBlock => {}
                        Err(e) => return Err(e),
                    }
                }
                r = self.stream.readable() => {
                    r?;
                    self.inbuf.reserve(64 * 1024);
                    match self.stream.try_read_buf(&mut self.inbuf) {
                        Ok(0) => break,
                        Ok(_) => {}
                        Err(e) if e.kind() == WouldBlock => {}
                        Err(e) if e.kind() == ConnectionReset => break,
                        Err(e) => return Err(e),
                    }
                }
            }
        }
        out.clear();
        Ok(())
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stepped_pace_offers_each_step_its_share_of_the_base_rate() {
        static SHARES: [f64; 3] = [0.5, 2.0, 1.0];
        let p = Pace::Steps {
            base: 1000,
            step: Duration::from_secs(1),
            shares: &SHARES,
        };
        let s = Duration::from_secs_f64;
        assert_eq!(p.due(s(0.5)), Some(250));
        assert_eq!(p.due(s(1.0)), Some(500));
        assert_eq!(p.due(s(1.5)), Some(1500));
        assert_eq!(p.due(s(3.0)), Some(3500));
        // Nothing after the last step.
        assert_eq!(p.due(s(9.0)), Some(3500));
        assert_eq!(p.rate_at(s(1.2)), 2000.0);
        assert_eq!(p.rate_at(s(3.5)), 0.0);
        assert_eq!(Pace::Closed(4).due(s(1.0)), None);
        assert_eq!(Pace::Open(100).due(s(2.0)), Some(200));
    }

    #[test]
    fn goodput_counts_2001_answers_within_the_timeout_per_second() {
        let r = Report {
            ok_latencies_us: vec![1_000, 1_999_999, 2_000_000, 2_000_001, 9_000_000],
            elapsed: Duration::from_secs(2),
            ..Report::default()
        };
        assert_eq!(r.goodput(Duration::from_secs(2)), 1.5);
        assert_eq!(r.ok_percentile_us(0.0), 1_000);
        assert_eq!(r.ok_percentile_us(100.0), 9_000_000);
    }
}
