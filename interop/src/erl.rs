//! The Erlang/OTP `diameter` peer (`interop/peers/dpeer.escript`): an
//! independent RFC 6733 stack, with OTP's own RFC 7683 dictionary
//! (`diameter_gen_doic_rfc7683`) for OC-Supported-Features and OC-OLR.
//!
//! - [`ErlServer`]: answers test_app Test-Request and base STR (default
//!   2001), echoes Test-AVP and Proxy-Info; with [`Olr`] it acts as an
//!   RFC 7683 §5.2.3 reporting node and puts an OTP-encoded OC-OLR into
//!   answers to requests that carried OC-Supported-Features.
//! - [`ErlClient`]: CER/CEA, then N requests with concurrency C; reports a
//!   Result-Code histogram and the DOIC AVPs it received.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use crate::Error;
use crate::fd::PeerTarget;
use crate::process::{Daemon, RunDir, port_or_free, require, support_dir};

/// Time for the Erlang VM to start and compile the test_app dictionary.
const START_TIMEOUT: Duration = Duration::from_secs(20);

fn escript() -> Result<PathBuf, Error> {
    let hint = "run `cargo xtask test --only interop` to install erlang-base, erlang-diameter and erlang-dev";
    require(std::path::Path::new("/usr/bin/escript"), hint)?;
    let s = support_dir().join("dpeer.escript");
    require(&s, "the escript is part of the repository")?;
    Ok(s)
}

/// OC-Report-Type of the Erlang server's OLR.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReportType {
    /// HOST_REPORT (0, RFC 7683 §7.6).
    Host,
    /// REALM_REPORT (1, RFC 7683 §7.6).
    Realm,
    /// PEER_REPORT (2, RFC 8581 §7.2.1), with SourceID = the server's identity.
    Peer,
}

/// An overload report the Erlang server puts into its answers. Host and
/// realm reports with the loss algorithm use OTP's own RFC 7683
/// dictionary; a peer report or a maximum rate switch the escript to its
/// RFC 8581/8582 grammar (OTP has none).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Olr {
    /// OC-Report-Type.
    pub report_type: ReportType,
    /// OC-Reduction-Percentage (0..=100), loss algorithm; ignored when
    /// `max_rate` is set.
    pub reduction_percentage: u32,
    /// OC-Sequence-Number.
    pub sequence: u64,
    /// OC-Validity-Duration, seconds.
    pub validity_secs: u32,
    /// OC-Maximum-Rate (RFC 8582 rate algorithm) instead of a percentage.
    pub max_rate: Option<u32>,
}

impl Olr {
    /// A loss-algorithm report of `report_type` asking for `percentage` reduction.
    #[must_use]
    pub fn loss(
        report_type: ReportType,
        percentage: u32,
        sequence: u64,
        validity_secs: u32,
    ) -> Self {
        Self {
            report_type,
            reduction_percentage: percentage,
            sequence,
            validity_secs,
            max_rate: None,
        }
    }

    /// A rate-algorithm report of `report_type` allowing `rate` requests/s.
    #[must_use]
    pub fn rate(report_type: ReportType, rate: u32, sequence: u64, validity_secs: u32) -> Self {
        Self {
            report_type,
            reduction_percentage: 0,
            sequence,
            validity_secs,
            max_rate: Some(rate),
        }
    }
}

/// Starts the Erlang server.
#[derive(Debug, Clone)]
pub struct ErlServer {
    identity: String,
    realm: String,
    port: Option<u16>,
    result_code: u32,
    olr: Option<Olr>,
    olr_always: bool,
}

impl ErlServer {
    /// A server `erl-server.example.net` / `example.net` answering 2001.
    #[must_use]
    pub fn builder() -> Self {
        Self {
            identity: "erl-server.example.net".into(),
            realm: "example.net".into(),
            port: None,
            result_code: 2001,
            olr: None,
            olr_always: false,
        }
    }

    setters! {
        /// Sets the DiameterIdentity.
        identity(id: &str) => identity = id.to_owned();

        /// Sets the realm.
        realm(realm: &str) => realm = realm.to_owned();

        /// Listens on this port (default: a free port).
        port(port: u16) => port = Some(port);

        /// Answers with this Result-Code instead of 2001 (e.g. 3004 TOO_BUSY).
        result_code(rc: u32) => result_code = rc;

        /// Adds this OC-OLR to answers of requests that carried
        /// OC-Supported-Features (RFC 7683 §5.2.3).
        olr(olr: Olr) => olr = Some(olr);
    }

    /// Adds the OC-OLR to every answer, even to requests without
    /// OC-Supported-Features (a non-conformant reporting node).
    #[must_use]
    pub fn olr_always(mut self) -> Self {
        self.olr_always = true;
        self
    }

    /// Starts the server and waits until it listens.
    ///
    /// # Errors
    /// Missing Erlang packages, spawn failure, or no `LISTENING` line.
    pub fn start(self) -> Result<ErlNode, Error> {
        let script = escript()?;
        let port = port_or_free(self.port)?;
        let dir = RunDir::new("erl-server")?;
        let mut cmd = Command::new("escript");
        cmd.arg(&script)
            .arg("server")
            .args(["--addr", "127.0.0.1", "--port", &port.to_string()])
            .args(["--host", &self.identity, "--realm", &self.realm])
            .args(["--result-code", &self.result_code.to_string()]);
        if let Some(o) = self.olr {
            let kind = match o.report_type {
                ReportType::Host => "host",
                ReportType::Realm => "realm",
                ReportType::Peer => "peer",
            };
            cmd.arg("--olr").arg(format!(
                "{kind}:{}:{}:{}",
                o.reduction_percentage, o.sequence, o.validity_secs
            ));
            if let Some(r) = o.max_rate {
                cmd.args(["--max-rate", &r.to_string()]);
            }
        }
        if self.olr_always {
            cmd.arg("--olr-always");
        }
        let daemon = dir.spawn_ready("erl-server", cmd, "LISTENING", START_TIMEOUT)?;
        Ok(ErlNode {
            daemon,
            identity: self.identity,
            realm: self.realm,
            port,
            _dir: dir,
        })
    }
}

/// A running Erlang server. Dropping it stops it.
#[derive(Debug)]
pub struct ErlNode {
    daemon: Daemon,
    identity: String,
    realm: String,
    port: u16,
    _dir: RunDir,
}

impl ErlNode {
    /// Where to reach the server.
    #[must_use]
    pub fn target(&self) -> PeerTarget {
        PeerTarget::loopback(&self.identity, self.port)
    }

    /// The server's realm.
    #[must_use]
    pub fn realm(&self) -> &str {
        &self.realm
    }

    /// The process (log, signals, hard kill).
    pub fn daemon(&mut self) -> &mut Daemon {
        &mut self.daemon
    }
}

/// Which application the Erlang client speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum App {
    /// freeDiameter's test_app (Test-Request, vendor-specific app 16777215).
    Test,
    /// The common application 0 (STR/STA).
    Base,
}

/// One run of the Erlang client.
#[derive(Debug, Clone)]
pub struct ErlClient {
    target: std::net::SocketAddr,
    n: u32,
    concurrency: u32,
    app: App,
    identity: String,
    realm: String,
    dest_realm: String,
    dest_host: Option<String>,
    timeout_ms: u32,
    proxy_info: bool,
    doic: Option<u64>,
    watchdog_ms: Option<u32>,
    linger_ms: u32,
    doic_source_id: bool,
}

impl ErlClient {
    /// N = 1000 test_app requests with concurrency 10 to `target`, as
    /// `erl-client.example.org`, Destination-Realm `example.net`. The
    /// client accepts whatever Origin-Host the peer's CEA carries.
    #[must_use]
    pub fn new(target: &PeerTarget) -> Self {
        Self {
            target: target.addr,
            n: 1000,
            concurrency: 10,
            app: App::Test,
            identity: "erl-client.example.org".into(),
            realm: "example.org".into(),
            dest_realm: "example.net".into(),
            dest_host: None,
            timeout_ms: 5000,
            proxy_info: false,
            doic: None,
            watchdog_ms: None,
            linger_ms: 0,
            doic_source_id: false,
        }
    }

    setters! {
        /// Sets the RFC 3539 watchdog timer Tw (OTP accepts 6 s and more, and
        /// adds up to 2 s of jitter either way).
        watchdog(tw: Duration) => watchdog_ms = Some(u32::try_from(tw.as_millis()).unwrap_or(u32::MAX).max(6000));

        /// Keeps the connection up this long after the last answer (to observe
        /// DWR/DWA), then disconnects.
        linger(d: Duration) => linger_ms = u32::try_from(d.as_millis()).unwrap_or(u32::MAX);

        /// Number of requests.
        n(n: u32) => n = n;

        /// Requests in flight.
        concurrency(c: u32) => concurrency = c.max(1);

        /// The application.
        app(app: App) => app = app;

        /// Sets the client's identity.
        identity(id: &str) => identity = id.to_owned();

        /// Destination-Realm of the requests.
        dest_realm(realm: &str) => dest_realm = realm.to_owned();

        /// Adds Destination-Host to the requests.
        dest_host(host: &str) => dest_host = Some(host.to_owned());

        /// Per-request answer timeout.
        timeout(t: Duration) => timeout_ms = u32::try_from(t.as_millis()).unwrap_or(u32::MAX);
    }

    /// Adds Proxy-Info to each request and checks answers return it.
    #[must_use]
    pub fn proxy_info(mut self) -> Self {
        self.proxy_info = true;
        self
    }

    /// Adds OC-Supported-Features (loss algorithm) to each test_app request.
    #[must_use]
    pub fn doic(self) -> Self {
        self.doic_vector(1)
    }

    setters! {
        /// Adds OC-Supported-Features with this OC-Feature-Vector (e.g. 0x15:
        /// loss, rate and peer report) to each test_app request.
        doic_vector(vector: u64) => doic = Some(vector);
    }

    /// Adds SourceID = the client's identity to its OC-Supported-Features:
    /// with OC_PEER_REPORT in the vector, it then supports peer reports
    /// (RFC 8581 §6.1.1).
    #[must_use]
    pub fn doic_source_id(mut self) -> Self {
        self.doic_source_id = true;
        self
    }

    /// Runs the client to completion (bounded by the per-request timeout
    /// times the requests per worker, plus startup).
    ///
    /// # Errors
    /// Spawn failure, a timeout, or output without a `RESULT` line.
    pub fn run(self) -> Result<ErlResult, Error> {
        let script = escript()?;
        let dir = RunDir::new("erl-client")?;
        let mut cmd = Command::new("escript");
        cmd.arg(&script)
            .arg("client")
            .arg("--connect")
            .arg(self.target.to_string())
            .args(["--n", &self.n.to_string()])
            .args(["--concurrency", &self.concurrency.to_string()])
            .args([
                "--app",
                if self.app == App::Test {
                    "test"
                } else {
                    "base"
                },
            ])
            .args(["--host", &self.identity, "--realm", &self.realm])
            .args(["--dest-realm", &self.dest_realm])
            .args(["--timeout", &self.timeout_ms.to_string()]);
        if let Some(h) = &self.dest_host {
            cmd.args(["--dest-host", h]);
        }
        if self.proxy_info {
            cmd.arg("--proxy-info");
        }
        if let Some(v) = self.doic {
            cmd.args(["--doic-vector", &v.to_string()]);
        }
        if self.doic_source_id {
            cmd.arg("--doic-source-id");
        }
        if let Some(w) = self.watchdog_ms {
            cmd.args(["--watchdog", &w.to_string()]);
        }
        cmd.args(["--linger", &self.linger_ms.to_string()]);
        let mut daemon = dir.spawn("erl-client", cmd)?;
        let per_worker = u64::from(self.n / self.concurrency.max(1) + 1);
        let bound = START_TIMEOUT
            + Duration::from_millis(u64::from(self.linger_ms))
            + Duration::from_millis(
                u64::from(self.timeout_ms)
                    .saturating_mul(per_worker)
                    .min(600_000),
            );
        let status = daemon.wait_exit(bound)?;
        let mut r = parse_client(&daemon.log())?;
        r.exit_ok = status.success();
        Ok(r)
    }
}

/// What the Erlang client reported.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ErlResult {
    /// Origin-Host of the peer's CEA.
    pub peer_host: String,
    /// Requests sent.
    pub sent: u64,
    /// Requests answered (any Result-Code).
    pub answered: u64,
    /// Requests without an answer.
    pub no_answer: u64,
    /// Answers per second over the run.
    pub rate: u64,
    /// Answers by Result-Code text (`2001`, `exp:0:5198`, `proxy_info_missing:2001`).
    pub result_codes: BTreeMap<String, u64>,
    /// Unanswered requests by reason.
    pub errors: BTreeMap<String, u64>,
    /// Answers that carried OC-Supported-Features.
    pub oc_supported_features: u64,
    /// Answers that carried OC-OLR.
    pub oc_olr: u64,
    /// The first OC-OLR received, as (name, value) pairs (`sequence`,
    /// `report_type`, `reduction_percentage`, `validity_duration`,
    /// `max_rate`, `source_id`; `-` when absent).
    pub first_olr: BTreeMap<String, String>,
    /// The first OC-Supported-Features received (`feature_vector`,
    /// `peer_algo`, `source_id`).
    pub first_features: BTreeMap<String, String>,
    /// True when the client exited 0 (all answers 2001).
    pub exit_ok: bool,
    /// The whole output.
    pub output: String,
}

impl ErlResult {
    /// Answers with Result-Code 2001.
    #[must_use]
    pub fn ok(&self) -> u64 {
        self.result_codes.get("2001").copied().unwrap_or(0)
    }

    /// True when every request was answered with 2001.
    #[must_use]
    pub fn all_answered_ok(&self) -> bool {
        self.exit_ok && self.sent > 0 && self.ok() == self.sent
    }
}

fn kv(words: &[&str]) -> BTreeMap<String, String> {
    words
        .iter()
        .filter_map(|w| w.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

fn num(m: &BTreeMap<String, String>, k: &str) -> u64 {
    m.get(k).and_then(|v| v.parse().ok()).unwrap_or(0)
}

/// Parses the client's output (see the escript header for the format).
fn parse_client(out: &str) -> Result<ErlResult, Error> {
    let mut r = ErlResult {
        output: out.to_owned(),
        ..ErlResult::default()
    };
    let mut have_result = false;
    for line in out.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["CEA", rest @ ..] => {
                r.peer_host = kv(rest).get("origin_host").cloned().unwrap_or_default();
            }
            ["RESULT", rest @ ..] => {
                let m = kv(rest);
                r.sent = num(&m, "sent");
                r.answered = num(&m, "answered");
                r.no_answer = num(&m, "no_answer");
                r.rate = num(&m, "rate");
                have_result = true;
            }
            ["RC", code, count] => {
                r.result_codes
                    .insert((*code).to_owned(), count.parse().unwrap_or(0));
            }
            ["ERROR", reason @ .., count] => {
                r.errors
                    .insert(reason.join(" "), count.parse().unwrap_or(0));
            }
            ["DOIC", rest @ ..] => {
                let m = kv(rest);
                r.oc_supported_features = num(&m, "oc_supported_features");
                r.oc_olr = num(&m, "oc_olr");
            }
            ["OC-OLR", rest @ ..] => r.first_olr = kv(rest),
            ["OC-SUPPORTED-FEATURES", rest @ ..] => r.first_features = kv(rest),
            ["CONNECT-FAILED", ..] => {
                return Err(Error::parse("Erlang client output", line.to_owned()));
            }
            _ => {}
        }
    }
    if !have_result {
        return Err(Error::parse(
            "Erlang client output",
            format!("no RESULT line in:\n{out}"),
        ));
    }
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_client_output() {
        let out = "\
CEA origin_host=erl-server.example.net origin_realm=example.net auth_app_ids=[0] vendor_specific_app_ids=[{999999,[16777215]}]
RESULT app=test sent=20 answered=19 no_answer=1 elapsed_s=0.002 rate=10204
RC 2001 18
RC exp:0:5198 1
ERROR timeout 1
DOIC oc_supported_features=19 oc_olr=18
OC-SUPPORTED-FEATURES feature_vector=1
OC-OLR sequence=7 report_type=0 reduction_percentage=50 validity_duration=30
";
        let r = parse_client(out).unwrap();
        assert_eq!(r.peer_host, "erl-server.example.net");
        assert_eq!(
            (r.sent, r.answered, r.no_answer, r.rate),
            (20, 19, 1, 10204)
        );
        assert_eq!(r.ok(), 18);
        assert_eq!(r.result_codes["exp:0:5198"], 1);
        assert_eq!(r.errors["timeout"], 1);
        assert_eq!((r.oc_supported_features, r.oc_olr), (19, 18));
        assert_eq!(r.first_olr["reduction_percentage"], "50");
        assert_eq!(r.first_features["feature_vector"], "1");
        assert!(!r.all_answered_ok());
    }

    #[test]
    fn output_without_result_is_an_error() {
        assert!(parse_client("CEA origin_host=x\n").is_err());
        assert!(parse_client("CONNECT-FAILED {error,timeout}\nRESULT sent=1\n").is_err());
    }
}
