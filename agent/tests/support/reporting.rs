//! A scripted DOIC reporting node on loopback (RFC 7683 §5.2): a Diameter
//! server that records the OC-Supported-Features of every request it
//! receives and attaches the OC-OLRs and OC-Supported-Features a test
//! scripts to its answers. With request/answer exchanges through the agent
//! and its configuration, the end-to-end and precision tests of overload
//! control.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agent::config::Config;
use bytes::{Bytes, BytesMut};
use diameter::codec::answer::put_error_answer;
use diameter::codec::doic::{OcOlr, OcSupportedFeatures, ReportType};
use diameter::codec::header::{begin, finish};
use diameter::codec::{Header, frame_len};
use diameter::codec::{MessageBuf, Routing};
use diameter::dictionary::code;
use diameter::dictionary::doic::OLR_DEFAULT_ALGO;
use doic::avps::DoicAvps;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tools::loadgen::{Client, Identity, TEST_APP};

use super::messages::request_e2e;
use super::node::{CLIENT, Upstream, agent_toml};

/// What the server puts in its next answers.
#[derive(Clone, Debug, Default)]
pub struct Script {
    /// OC-Supported-Features of the answers (the reporting node's choice).
    pub features: Option<OcSupportedFeatures>,
    /// OC-OLRs of the answers.
    pub olrs: Vec<OcOlr>,
    /// Attach the above to one answer only, then clear them.
    pub once: bool,
    /// Each answer's OC-OLRs one sequence number above the last answer's:
    /// a new version in every answer.
    pub rising: bool,
    /// Answer with Experimental-Result (3GPP vendor) of this code instead of
    /// Result-Code 2001.
    pub experimental: Option<u32>,
    /// Answer with this Result-Code instead of 2001 (e.g. 3004).
    pub result_code: Option<u32>,
    /// Answer no application request and close the connection once
    /// [`Seen::vanished`] holds this many (the next hop vanishes with
    /// requests pending at it). One shot: the script then answers again, on
    /// the next connection.
    pub vanish_after: Option<u64>,
}

/// What the server saw.
#[derive(Debug, Default)]
pub struct Seen {
    /// Application requests received.
    pub requests: AtomicU64,
    /// CERs received (one per connection the agent made).
    pub cer: AtomicU64,
    /// The OC-Supported-Features AVPs of the last request (all of them).
    pub last_features: Mutex<Vec<OcSupportedFeatures>>,
    /// Requests that carried no OC-Supported-Features.
    pub without_features: AtomicU64,
    /// End-to-End Identifiers of the requests left unanswered when the
    /// connection vanished ([`Script::vanish_after`]).
    pub vanished: Mutex<Vec<u32>>,
}

/// A scripted reporting server.
pub struct Reporter {
    pub addr: SocketAddr,
    pub host: String,
    pub seen: Arc<Seen>,
    pub script: Arc<Mutex<Script>>,
    stop: Arc<AtomicBool>,
}

impl Reporter {
    pub async fn spawn(host: &str) -> Reporter {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let seen = Arc::new(Seen::default());
        let script = Arc::new(Mutex::new(Script::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let id = Identity::new(host, "example.net");
        let (s, sc, st) = (seen.clone(), script.clone(), stop.clone());
        tools::loadgen::accept_until(listener, stop.clone(), move |stream| {
            let (s, sc, st, id) = (s.clone(), sc.clone(), st.clone(), id.clone());
            async move {
                let _ = serve(stream, id, s, sc, st).await;
            }
        });
        Reporter {
            addr,
            host: host.into(),
            seen,
            script,
            stop,
        }
    }

    pub fn set(&self, s: Script) {
        *self.script.lock().unwrap() = s;
    }

    pub fn requests(&self) -> u64 {
        self.seen.requests.load(Ordering::Relaxed)
    }
}

impl Drop for Reporter {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

async fn serve(
    mut stream: TcpStream,
    id: Identity,
    seen: Arc<Seen>,
    script: Arc<Mutex<Script>>,
    stop: Arc<AtomicBool>,
) -> std::io::Result<()> {
    stream.set_nodelay(true)?;
    let ip = stream.local_addr()?.ip();
    let mut inbuf = BytesMut::with_capacity(256 * 1024);
    let mut out = BytesMut::with_capacity(64 * 1024);
    let o = (id.host.as_str(), id.realm.as_str());
    loop {
        if !tools::loadgen::read_unless_stopped(&mut stream, &mut inbuf, &stop).await? {
            return Ok(());
        }
        while let Ok(Some(len)) = frame_len(&inbuf) {
            let m = inbuf.split_to(len).freeze();
            let h = Header::read(&m);
            if !h.is_request() {
                continue;
            }
            match tools::loadgen::answer_base(&mut out, h, (&id, ip), &[TEST_APP], true) {
                Some(tools::loadgen::BaseRequest::Capabilities) => {
                    seen.cer.fetch_add(1, Ordering::Relaxed);
                }
                Some(_) => {}
                None => {
                    seen.requests.fetch_add(1, Ordering::Relaxed);
                    let feats = features_of(&m);
                    if feats.is_empty() {
                        seen.without_features.fetch_add(1, Ordering::Relaxed);
                    }
                    *seen.last_features.lock().unwrap() = feats;
                    let s = {
                        let mut g = script.lock().unwrap();
                        if let Some(n) = g.vanish_after {
                            let mut v = seen.vanished.lock().unwrap();
                            v.push(h.end_to_end);
                            if v.len() as u64 >= n {
                                // Closed with requests pending at the agent.
                                g.vanish_after = None;
                                return Ok(());
                            }
                            continue;
                        }
                        let s = g.clone();
                        if g.rising {
                            for o in &mut g.olrs {
                                o.sequence_number += 1;
                            }
                        }
                        if g.once {
                            g.olrs.clear();
                            g.features = None;
                            g.once = false;
                        }
                        s
                    };
                    out.extend_from_slice(&scripted_answer(&m, o, &s));
                }
            }
        }
        if !out.is_empty() {
            stream.write_all(&out).await?;
            out.clear();
        }
    }
}

/// An OC-OLR of type `rt`: `percent` % reduction, sequence `seq`, validity
/// `validity` seconds (`None`: left out).
pub fn olr(seq: u64, rt: ReportType, percent: u32, validity: Option<u32>) -> OcOlr {
    let mut o = OcOlr::new(seq, rt);
    o.reduction_percentage = Some(percent);
    o.validity_duration = validity;
    o
}

/// A reporting node's OC-Supported-Features.
pub fn server_features(vector: u64, source: &str) -> OcSupportedFeatures {
    OcSupportedFeatures {
        feature_vector: Some(vector),
        source_id: Some(source.into()),
        peer_algo: None,
    }
}

/// `s`'s next answer carries `olrs` and its OC-Supported-Features with
/// `vector`.
pub fn report_once(s: &Reporter, vector: u64, olrs: Vec<OcOlr>) {
    s.set(Script {
        features: Some(server_features(vector, &s.host)),
        olrs,
        once: true,
        ..Script::default()
    });
}

/// `s`'s next answer carries a host loss report of `percent` % (sequence
/// 1, 60 s).
pub fn host_loss_once(s: &Reporter, percent: u32) {
    report_once(
        s,
        OLR_DEFAULT_ALGO,
        vec![olr(1, ReportType::Host, percent, Some(60))],
    );
}

/// Every OC-Supported-Features AVP of a message.
pub fn features_of(m: &[u8]) -> Vec<OcSupportedFeatures> {
    diameter::codec::avp::AvpIter::with_offset(&m[20..], 20)
        .filter_map(Result::ok)
        .filter(|a| a.vendor_id.is_none() && a.code == code::OC_SUPPORTED_FEATURES)
        .filter_map(|a| OcSupportedFeatures::from_raw(&a).ok())
        .collect()
}

/// The peer reports (the agent's own, RFC 8581) of a message.
pub fn own_reports(m: &[u8]) -> Vec<OcOlr> {
    olrs_of(m)
        .into_iter()
        .filter(|o| o.report_type == ReportType::Peer)
        .collect()
}

/// The OC-OLRs of a message.
pub fn olrs_of(m: &[u8]) -> Vec<OcOlr> {
    DoicAvps::read(&Routing::scan(m).unwrap()).unwrap().olrs
}

/// The OC-OLRs of type `rt` in `answers` (RFC 7683 §7.6), in order.
pub fn reports_in(answers: &[Bytes], rt: ReportType) -> Vec<OcOlr> {
    answers
        .iter()
        .flat_map(|a| olrs_of(a))
        .filter(|o| o.report_type == rt)
        .collect()
}

fn scripted_answer(req: &[u8], o: (&str, &str), s: &Script) -> Bytes {
    let mut a = BytesMut::new();
    let rc = if s.experimental.is_some() {
        0
    } else {
        s.result_code.unwrap_or(2001)
    };
    put_error_answer(&mut a, req, o, rc, None, "");
    let mut b = MessageBuf::new(a).unwrap();
    if let Some(code) = s.experimental {
        b.remove_avps(|x| x.vendor_id.is_none() && x.code == code::RESULT_CODE)
            .unwrap();
        b.append_avp(&diameter::codec::builder::experimental_result(10415, code))
            .unwrap();
    }
    if let Some(f) = &s.features {
        b.append_avp(&f.to_avp()).unwrap();
    }
    for olr in &s.olrs {
        b.append_avp(&olr.to_avp()).unwrap();
    }
    b.freeze()
}

/// The agent's configuration in front of `servers` (host, address, trusted),
/// with `workers` workers, a metrics listener and `doic` as the `[doic]`
/// section body (None: no section).
pub fn agent_config(servers: &[(&Reporter, bool)], doic: Option<&str>, workers: usize) -> Config {
    let upstreams: Vec<Upstream<'_>> = servers
        .iter()
        .map(|(s, trusted)| (s.host.as_str(), s.addr, Some(*trusted)))
        .collect();
    let mut tail = String::from("[metrics]\nlisten = \"127.0.0.1:0\"\n");
    if let Some(d) = doic {
        tail += "[doic]\n";
        tail += d;
        tail += "\n";
    }
    agent_toml(Some(workers), "", &upstreams, &tail)
}

/// A test request for example.net, End-to-End = Hop-by-Hop ^ 0x5555_0000;
/// `features` adds an OC-Supported-Features, `dest_host` a
/// Destination-Host.
pub fn doic_request(
    hbh: u32,
    features: Option<&OcSupportedFeatures>,
    dest_host: Option<&str>,
) -> Bytes {
    let extra: Vec<(u32, &[u8])> = dest_host
        .iter()
        .map(|h| (code::DESTINATION_HOST, h.as_bytes()))
        .collect();
    let out = request_e2e(hbh, hbh ^ 0x5555_0000, "example.net", &extra);
    let mut b = MessageBuf::new(out).unwrap();
    if let Some(f) = features {
        b.append_avp(&f.to_avp()).unwrap();
    }
    b.freeze()
}

/// A client's OC-Supported-Features.
pub fn client_features(vector: u64) -> OcSupportedFeatures {
    OcSupportedFeatures {
        feature_vector: Some(vector),
        source_id: Some(CLIENT.into()),
        peer_algo: None,
    }
}

/// Sends `n` requests (pipelined, `window` at a time) starting at
/// Hop-by-Hop `hbh0`; returns the answers in Hop-by-Hop order, asserting
/// exactly one answer per request.
pub async fn exchange(
    c: &mut Client,
    hbh0: u32,
    n: u32,
    window: u32,
    features: Option<&OcSupportedFeatures>,
) -> Vec<Bytes> {
    exchange_to(c, hbh0, n, window, features, None).await
}

/// Sends `c` one request with `features` every 250 ms, for up to 10 s,
/// until an answer carries a report of type `rt` with validity 0 (its end,
/// RFC 7683 §5.2.3); returns that report.
pub async fn await_end(
    c: &mut Client,
    hbh0: u32,
    features: &OcSupportedFeatures,
    rt: ReportType,
) -> Option<OcOlr> {
    for i in 0..40 {
        let a = exchange(c, hbh0 + i, 1, 1, Some(features)).await;
        if let Some(o) = reports_in(&a, rt)
            .into_iter()
            .find(|o| o.validity_duration == Some(0))
        {
            return Some(o);
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    None
}

/// [`exchange`] with a Destination-Host.
pub async fn exchange_to(
    c: &mut Client,
    hbh0: u32,
    n: u32,
    window: u32,
    features: Option<&OcSupportedFeatures>,
    dest_host: Option<&str>,
) -> Vec<Bytes> {
    let mut answers: Vec<Option<Bytes>> = vec![None; n as usize];
    let mut sent = 0u32;
    let mut got = 0u32;
    while got < n {
        let mut batch = BytesMut::new();
        while sent < n && sent - got < window {
            batch.extend_from_slice(&doic_request(hbh0 + sent, features, dest_host));
            sent += 1;
        }
        if !batch.is_empty() {
            c.write_raw(&batch).await.unwrap();
        }
        let m = tokio::time::timeout(Duration::from_secs(10), c.read_message())
            .await
            .expect("an answer in time")
            .unwrap();
        let h = Header::read(&m);
        if h.is_request() {
            continue;
        }
        let i = h.hop_by_hop.wrapping_sub(hbh0) as usize;
        assert!(i < n as usize, "answer to an unknown request {h:?}");
        assert!(answers[i].is_none(), "two answers to request {i}");
        answers[i] = Some(m);
        got += 1;
    }
    answers.into_iter().map(Option::unwrap).collect()
}

/// How often [`send_regardless`] writes a burst.
pub const BURST_EVERY: Duration = Duration::from_millis(50);

/// Sends at `rate` per second for `run`, one burst of every request due in
/// one write each `BURST_EVERY`, regardless of what the answers say;
/// returns every answer (one per request: [`exchange`] checks it).
pub async fn send_regardless(
    mut c: Client,
    rate: f64,
    run: Duration,
    features: Option<OcSupportedFeatures>,
) -> Vec<Bytes> {
    let t0 = Instant::now();
    let (mut sent, mut hbh) = (0u32, 1u32);
    let mut all = Vec::new();
    while t0.elapsed() < run {
        #[expect(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let due = (t0.elapsed().as_secs_f64() * rate) as u32;
        if due > sent {
            let k = due - sent;
            all.extend(exchange(&mut c, hbh, k, k, features.as_ref()).await);
            hbh += k;
            sent = due;
        }
        tokio::time::sleep(BURST_EVERY).await;
    }
    all
}

/// Result-Code, or Experimental-Result-Code, of an answer.
pub fn code_of(m: &[u8]) -> u32 {
    let r = Routing::scan(m).unwrap();
    r.result_code()
        .or(r.experimental_result_code().map(|(_, c)| c))
        .unwrap_or(0)
}

/// Whether an answer carries a Result-Code AVP at all.
pub fn has_result_code(m: &[u8]) -> bool {
    Routing::scan(m).unwrap().result_code().is_some()
}
