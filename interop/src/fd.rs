//! freeDiameter 1.2.1 peers on loopback: the `test_app` echo server, a
//! routing agent (`rt_default`, an RFC 6733 §2.8 relay), and the `test_app`
//! benchmark client.
//!
//! Every daemon gets a generated configuration in a private [`RunDir`]:
//! plain TCP only (no `TLS_Cred`, `SecPort = 0`, `No_TLS` and `No_SCTP` on
//! every `ConnectPeer`), `TcTimer = 5`, `TwTimer = 30`, incoming peers
//! accepted by `acl_wl` under common test TLDs. freeDiameter 1.2.1 ignores
//! loopback `ListenOn` addresses and binds the wildcard; the `bindlo.so`
//! shim (LD_PRELOAD) turns those binds into loopback binds.
//!
//! Test traffic is `test_app`: vendor-specific application 16777215 (vendor
//! 999999), Test-Request/Answer command 16777214 (R, P), Test-AVP 16777215
//! (vendor 999999, Integer32) echoed by the server; success is 2001.
//!
//! A `ConnectPeer` name must equal the Origin-Host of the peer's CEA
//! (RFC 6733 §5.3 is silent, freeDiameter enforces it), so a
//! [`PeerTarget`] always carries the identity the peer will announce.

use std::fmt::Write as _;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use crate::Error;
use crate::process::{Daemon, RunDir, free_port, peers_dir, require};

/// freeDiameter's extension directory on Debian.
pub const EXT_DIR: &str = "/usr/lib/freeDiameter";
/// test_app's vendor-specific application id.
pub const TEST_APP_ID: u32 = 16_777_215;
/// test_app's vendor id.
pub const TEST_VENDOR_ID: u32 = 999_999;
/// test_app's Test-Request/Answer command code.
pub const TEST_CMD: u32 = 16_777_214;
/// test_app's Test-AVP code (vendor [`TEST_VENDOR_ID`], Integer32).
pub const TEST_AVP: u32 = 16_777_215;

/// How long a daemon may take to initialise.
const START_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a connection may take to reach STATE_OPEN (one TcTimer + margin).
pub const OPEN_TIMEOUT: Duration = Duration::from_secs(15);
/// Domains acl_wl accepts (it rejects a bare `*`).
const ACL: &str = "*.net *.com *.org *.test *.example *.invalid *.localhost *.localdomain *.local *.lan *.internal";

/// A Diameter peer to connect to: its identity (the Origin-Host it puts in
/// its CEA) and its loopback address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerTarget {
    /// DiameterIdentity the peer announces.
    pub identity: String,
    /// Loopback address and port.
    pub addr: SocketAddr,
}

impl PeerTarget {
    /// A peer on 127.0.0.1.
    #[must_use]
    pub fn loopback(identity: &str, port: u16) -> Self {
        Self {
            identity: identity.to_owned(),
            addr: SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port),
        }
    }

    /// A peer at `addr`, which must be a loopback address.
    ///
    /// # Errors
    /// [`Error::NotLoopback`] otherwise.
    pub fn new(identity: &str, addr: SocketAddr) -> Result<Self, Error> {
        if !addr.ip().is_loopback() {
            return Err(Error::NotLoopback(addr.to_string()));
        }
        Ok(Self {
            identity: identity.to_owned(),
            addr,
        })
    }

    fn connect_peer_line(&self) -> String {
        format!(
            "ConnectPeer = \"{}\" {{ ConnectTo = \"{}\"; Port = {}; No_TLS; No_SCTP; }};\n",
            self.identity,
            self.addr.ip(),
            self.addr.port()
        )
    }
}

/// Paths of the freeDiameter artefacts, checked once per start.
struct Artefacts {
    test_app: PathBuf,
    shim: PathBuf,
}

fn artefacts() -> Result<Artefacts, Error> {
    let hint = "run `cargo xtask test --only interop` to install the peers";
    require(std::path::Path::new("/usr/bin/freeDiameterd"), hint)?;
    let ext = peers_dir().join("ext");
    let a = Artefacts {
        test_app: ext.join("test_app.fdx"),
        shim: ext.join("bindlo.so"),
    };
    require(&a.test_app, hint)?;
    require(&a.shim, hint)?;
    Ok(a)
}

fn common_conf(identity: &str, realm: &str, port: u16, threads: u32) -> String {
    let mut c = String::new();
    let _ = writeln!(c, "Identity = \"{identity}\";");
    let _ = writeln!(c, "Realm = \"{realm}\";");
    let _ = writeln!(c, "Port = {port};");
    c.push_str("SecPort = 0;\nNo_SCTP;\nPrefer_TCP;\nTcTimer = 5;\nTwTimer = 30;\n");
    let _ = writeln!(c, "AppServThreads = {threads};");
    if port != 0 {
        c.push_str("ListenOn = \"127.0.0.1\";\n");
    }
    c
}

/// A running freeDiameter daemon (server or relay). Dropping it stops it.
#[derive(Debug)]
pub struct FdNode {
    daemon: Daemon,
    identity: String,
    realm: String,
    port: u16,
    // Declared last: the directory outlives the daemon that writes into it.
    dir: RunDir,
}

impl FdNode {
    fn start(
        role: &str,
        identity: &str,
        realm: &str,
        port: u16,
        conf: &str,
        dir: RunDir,
    ) -> Result<Self, Error> {
        let a = artefacts()?;
        let conf_path = dir.write(&format!("{role}.conf"), conf)?;
        let mut cmd = Command::new("freeDiameterd");
        cmd.arg("-c")
            .arg(&conf_path)
            .env("LD_PRELOAD", &a.shim)
            .env("DOIC_BIND_V4", "127.0.0.1")
            .env("DOIC_BIND_V6", "::1");
        let mut daemon = Daemon::spawn(role, cmd, &dir.path().join(format!("{role}.log")))?;
        daemon.wait_log("freeDiameterd daemon initialized", 0, START_TIMEOUT)?;
        Ok(Self {
            daemon,
            identity: identity.to_owned(),
            realm: realm.to_owned(),
            port,
            dir,
        })
    }

    /// Where to reach this node (its identity and 127.0.0.1:port).
    #[must_use]
    pub fn target(&self) -> PeerTarget {
        PeerTarget::loopback(&self.identity, self.port)
    }

    /// The node's DiameterIdentity.
    #[must_use]
    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// The node's realm.
    #[must_use]
    pub fn realm(&self) -> &str {
        &self.realm
    }

    /// The listening port on 127.0.0.1 (and ::1).
    #[must_use]
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The run directory (configuration and log).
    #[must_use]
    pub fn dir(&self) -> &std::path::Path {
        self.dir.path()
    }

    /// The process, for signals, logs and a hard kill in fault tests.
    pub fn daemon(&mut self) -> &mut Daemon {
        &mut self.daemon
    }

    /// The last state freeDiameter logged for its connection to `peer`
    /// (e.g. `STATE_OPEN`, `STATE_CLOSED`), if any.
    #[must_use]
    pub fn peer_state(&self, peer: &str) -> Option<String> {
        last_peer_state(&self.daemon.log(), peer)
    }

    /// Waits until the connection to `peer` is `STATE_OPEN`.
    ///
    /// # Errors
    /// [`Error::TimeoutLog`] or [`Error::Exited`].
    pub fn wait_peer_open(&mut self, peer: &str, timeout: Duration) -> Result<(), Error> {
        let what = format!("{peer} to be STATE_OPEN at {}", self.identity);
        let r = crate::process::wait_for(&what, timeout, || {
            self.daemon.ensure_running()?;
            Ok((self.peer_state(peer).as_deref() == Some("STATE_OPEN")).then_some(()))
        });
        r.map_err(|e| match e {
            Error::Timeout { what, after } => Error::TimeoutLog {
                what,
                after,
                log_tail: self.daemon.log_tail(30),
            },
            e => e,
        })
    }
}

/// The last `'<old>' -> '<new>'` state transition logged for `peer`.
fn last_peer_state(log: &str, peer: &str) -> Option<String> {
    let quoted = format!("'{peer}'");
    log.lines()
        .filter(|l| l.contains(&quoted) && l.contains("->"))
        .filter_map(|l| {
            let after = &l[l.rfind("->")? + 2..];
            let s = after.trim().trim_matches(|c| c == '\'' || c == '"');
            let s: String = s
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            s.starts_with("STATE_").then_some(s)
        })
        .next_back()
}

/// Starts the freeDiameter `test_app` echo server (`mode = server`,
/// `NoRelay`): it answers every Test-Request with 2001 and echoes Test-AVP.
#[derive(Debug)]
pub struct FdServer;

impl FdServer {
    /// A builder with the defaults `server1.example.net` / `example.net`.
    #[must_use]
    pub fn builder() -> FdServerBuilder {
        FdServerBuilder {
            identity: "server1.example.net".into(),
            realm: "example.net".into(),
            port: None,
            connect: Vec::new(),
            threads: 4,
        }
    }
}

/// Settings of an fD `test_app` server.
#[derive(Debug, Clone)]
pub struct FdServerBuilder {
    identity: String,
    realm: String,
    port: Option<u16>,
    connect: Vec<PeerTarget>,
    threads: u32,
}

impl FdServerBuilder {
    /// Sets the DiameterIdentity (default `server1.example.net`).
    #[must_use]
    pub fn identity(mut self, id: &str) -> Self {
        id.clone_into(&mut self.identity);
        self
    }

    /// Sets the realm (default `example.net`).
    #[must_use]
    pub fn realm(mut self, realm: &str) -> Self {
        realm.clone_into(&mut self.realm);
        self
    }

    /// Listens on this port (default: a free port).
    #[must_use]
    pub fn port(mut self, port: u16) -> Self {
        self.port = Some(port);
        self
    }

    /// Also dials out to `peer` (for a peer that does not dial out itself).
    #[must_use]
    pub fn connect_to(mut self, peer: PeerTarget) -> Self {
        self.connect.push(peer);
        self
    }

    /// Number of application threads (default 4).
    #[must_use]
    pub fn threads(mut self, n: u32) -> Self {
        self.threads = n.max(1);
        self
    }

    /// Writes the configuration and starts the daemon; returns once it is
    /// initialised (listening).
    ///
    /// # Errors
    /// Missing artefacts, spawn failure, or the daemon not initialising.
    pub fn start(self) -> Result<FdNode, Error> {
        let dir = RunDir::new("fd-server")?;
        let port = match self.port {
            Some(p) => p,
            None => free_port()?,
        };
        let ta = artefacts()?.test_app;
        dir.write("acl_wl.conf", &format!("ALLOW_IPSEC {ACL}\n"))?;
        let ta_conf = dir.write("test_app.conf", "mode = server;\nbenchmark;\n")?;
        let mut c = common_conf(&self.identity, &self.realm, port, self.threads);
        c.push_str("NoRelay;\n");
        let _ = writeln!(
            c,
            "LoadExtension = \"{EXT_DIR}/acl_wl.fdx\" : \"{}\";",
            dir.path().join("acl_wl.conf").display()
        );
        let _ = writeln!(
            c,
            "LoadExtension = \"{}\" : \"{}\";",
            ta.display(),
            ta_conf.display()
        );
        for p in &self.connect {
            c.push_str(&p.connect_peer_line());
        }
        FdNode::start("fd-server", &self.identity, &self.realm, port, &c, dir)
    }
}

/// Starts a freeDiameter routing agent (`rt_default`): it relays requests
/// for one destination realm to one upstream peer.
#[derive(Debug)]
pub struct FdRelay;

impl FdRelay {
    /// A relay `relay1.example.com` / `example.com` that routes
    /// Destination-Realm `upstream_realm` to `upstream`.
    #[must_use]
    pub fn builder(upstream: PeerTarget, upstream_realm: &str) -> FdRelayBuilder {
        FdRelayBuilder {
            identity: "relay1.example.com".into(),
            realm: "example.com".into(),
            port: None,
            upstream,
            upstream_realm: upstream_realm.to_owned(),
            threads: 4,
        }
    }
}

/// Settings of an fD relay.
#[derive(Debug, Clone)]
pub struct FdRelayBuilder {
    identity: String,
    realm: String,
    port: Option<u16>,
    upstream: PeerTarget,
    upstream_realm: String,
    threads: u32,
}

impl FdRelayBuilder {
    /// Sets the DiameterIdentity (default `relay1.example.com`).
    #[must_use]
    pub fn identity(mut self, id: &str) -> Self {
        id.clone_into(&mut self.identity);
        self
    }

    /// Sets the realm (default `example.com`).
    #[must_use]
    pub fn realm(mut self, realm: &str) -> Self {
        realm.clone_into(&mut self.realm);
        self
    }

    /// Listens on this port (default: a free port).
    #[must_use]
    pub fn port(mut self, port: u16) -> Self {
        self.port = Some(port);
        self
    }

    /// Number of application threads (default 4).
    #[must_use]
    pub fn threads(mut self, n: u32) -> Self {
        self.threads = n.max(1);
        self
    }

    /// Starts the relay and waits until its connection to the upstream peer
    /// is open.
    ///
    /// # Errors
    /// Missing artefacts, spawn failure, or no open upstream connection
    /// within [`OPEN_TIMEOUT`].
    pub fn start(self) -> Result<FdNode, Error> {
        let dir = RunDir::new("fd-relay")?;
        let port = match self.port {
            Some(p) => p,
            None => free_port()?,
        };
        dir.write("acl_wl.conf", &format!("ALLOW_IPSEC {ACL}\n"))?;
        let rt = dir.write(
            "rt_default.conf",
            &format!(
                "dr=\"{}\" : \"{}\" += 100 ;\n",
                self.upstream_realm, self.upstream.identity
            ),
        )?;
        let mut c = common_conf(&self.identity, &self.realm, port, self.threads);
        let _ = writeln!(
            c,
            "LoadExtension = \"{EXT_DIR}/acl_wl.fdx\" : \"{}\";",
            dir.path().join("acl_wl.conf").display()
        );
        let _ = writeln!(
            c,
            "LoadExtension = \"{EXT_DIR}/rt_default.fdx\" : \"{}\";",
            rt.display()
        );
        c.push_str(&self.upstream.connect_peer_line());
        let mut node = FdNode::start("fd-relay", &self.identity, &self.realm, port, &c, dir)?;
        node.wait_peer_open(&self.upstream.identity, OPEN_TIMEOUT)?;
        Ok(node)
    }
}

/// One run of the `test_app` benchmark client: connect to a target, wait
/// for STATE_OPEN, send Test-Requests for `seconds` with at most
/// `concurrency` outstanding, wait for the answers, report.
#[derive(Debug, Clone)]
pub struct BenchSpec {
    target: PeerTarget,
    identity: String,
    realm: String,
    dest_realm: String,
    dest_host: Option<String>,
    seconds: u32,
    concurrency: u32,
    threads: u32,
}

impl BenchSpec {
    /// A run against `target` as `client1.example.org` / `example.org`,
    /// Destination-Realm `example.net`, 10 s, concurrency 100.
    #[must_use]
    pub fn new(target: PeerTarget) -> Self {
        Self {
            target,
            identity: "client1.example.org".into(),
            realm: "example.org".into(),
            dest_realm: "example.net".into(),
            dest_host: None,
            seconds: 10,
            concurrency: 100,
            threads: 4,
        }
    }

    /// Sets the client's identity.
    #[must_use]
    pub fn identity(mut self, id: &str) -> Self {
        id.clone_into(&mut self.identity);
        self
    }

    /// Sets the client's realm.
    #[must_use]
    pub fn realm(mut self, realm: &str) -> Self {
        realm.clone_into(&mut self.realm);
        self
    }

    /// Destination-Realm of the requests.
    #[must_use]
    pub fn dest_realm(mut self, realm: &str) -> Self {
        realm.clone_into(&mut self.dest_realm);
        self
    }

    /// Adds Destination-Host to the requests.
    #[must_use]
    pub fn dest_host(mut self, host: &str) -> Self {
        self.dest_host = Some(host.to_owned());
        self
    }

    /// Sending window in seconds (at least 1).
    #[must_use]
    pub fn seconds(mut self, s: u32) -> Self {
        self.seconds = s.max(1);
        self
    }

    /// Maximum outstanding requests (at least 1).
    #[must_use]
    pub fn concurrency(mut self, c: u32) -> Self {
        self.concurrency = c.max(1);
        self
    }

    /// Starts the client and the sending window; [`BenchRun::wait`] reads
    /// the result. Between the two, a test may disturb the path (kill a
    /// relay, overload a server).
    ///
    /// # Errors
    /// Missing artefacts, spawn failure, or no STATE_OPEN with the target.
    pub fn start(self) -> Result<BenchRun, Error> {
        let a = artefacts()?;
        let dir = RunDir::new("fd-client")?;
        let mut ta = format!(
            "mode = client;\nbenchmark {} {};\nsignal = {};\ndest-realm = \"{}\";\n",
            self.seconds,
            self.concurrency,
            libc::SIGUSR1,
            self.dest_realm
        );
        if let Some(h) = &self.dest_host {
            let _ = writeln!(ta, "dest-host = \"{h}\";");
        }
        let ta_conf = dir.write("test_app.conf", &ta)?;
        let rt = dir.write(
            "rt_default.conf",
            &format!("* : \"{}\" += 100 ;\n", self.target.identity),
        )?;
        let mut c = common_conf(&self.identity, &self.realm, 0, self.threads);
        c.push_str("NoRelay;\n");
        let _ = writeln!(
            c,
            "LoadExtension = \"{}\" : \"{}\";",
            a.test_app.display(),
            ta_conf.display()
        );
        let _ = writeln!(
            c,
            "LoadExtension = \"{EXT_DIR}/rt_default.fdx\" : \"{}\";",
            rt.display()
        );
        c.push_str(&self.target.connect_peer_line());
        let mut node = FdNode::start("fd-client", &self.identity, &self.realm, 0, &c, dir)?;
        node.wait_peer_open(&self.target.identity, OPEN_TIMEOUT)?;
        let from = node.daemon.log().len();
        node.daemon.signal(libc::SIGUSR1)?;
        node.daemon
            .wait_log("Starting benchmark client", from, START_TIMEOUT)?;
        Ok(BenchRun {
            node,
            spec: self,
            from,
        })
    }

    /// [`start`](Self::start), then [`BenchRun::wait`].
    ///
    /// # Errors
    /// As both.
    pub fn run(self) -> Result<BenchResult, Error> {
        self.start()?.wait()
    }
}

/// A benchmark client that is sending.
#[derive(Debug)]
pub struct BenchRun {
    node: FdNode,
    spec: BenchSpec,
    from: usize,
}

impl BenchRun {
    /// The client daemon.
    pub fn node(&mut self) -> &mut FdNode {
        &mut self.node
    }

    /// Waits until test_app reports completion (every request answered),
    /// at most `seconds + 30 s`, and parses its last statistics block. When
    /// answers are missing at the deadline, returns the last block anyway
    /// (with `complete == false`) so the caller can count the losses.
    ///
    /// # Errors
    /// [`Error::Exited`] if the client died, [`Error::Parse`] if no
    /// statistics block was printed.
    pub fn wait(mut self) -> Result<BenchResult, Error> {
        let limit = Duration::from_secs(u64::from(self.spec.seconds) + 30);
        let complete = match self.node.daemon.wait_log("Test Complete", self.from, limit) {
            Ok(_) => true,
            Err(Error::TimeoutLog { .. }) => false,
            Err(e) => return Err(e),
        };
        let log = self.node.daemon.log();
        let mut r = parse_bench(&log[self.from.min(log.len())..])?;
        r.complete = complete;
        r.seconds = self.spec.seconds;
        r.concurrency = self.spec.concurrency;
        r.target = self.spec.target.clone();
        r.notes = log
            .lines()
            .filter(|l| {
                l.contains("ROUTING_ERROR")
                    || l.contains("DROPPED")
                    || l.contains("Unable to deliver")
            })
            .take(10)
            .map(str::to_owned)
            .collect();
        Ok(r)
    }
}

/// What the `test_app` benchmark client reported.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BenchResult {
    /// Where the client sent its requests.
    pub target: PeerTarget,
    /// Sending window, seconds.
    pub seconds: u32,
    /// Maximum outstanding requests.
    pub concurrency: u32,
    /// Test-Requests sent.
    pub sent: u64,
    /// Answers whose Result-Code was not 2001.
    pub errors: u64,
    /// Answers with Result-Code 2001.
    pub answered: u64,
    /// Fastest request-to-answer time.
    pub fastest: Duration,
    /// Slowest request-to-answer time.
    pub slowest: Duration,
    /// Average request-to-answer time.
    pub average: Duration,
    /// True when test_app saw an answer for every request.
    pub complete: bool,
    /// Routing errors and drops the client logged.
    pub notes: Vec<String>,
}

impl Default for PeerTarget {
    fn default() -> Self {
        Self::loopback("", 0)
    }
}

impl BenchResult {
    /// Requests that got no answer at all.
    #[must_use]
    pub fn unanswered(&self) -> u64 {
        self.sent.saturating_sub(self.answered + self.errors)
    }

    /// 2001 answers per second of the sending window.
    #[must_use]
    pub fn answers_per_s(&self) -> f64 {
        self.answered as f64 / f64::from(self.seconds.max(1))
    }

    /// True when something was sent and every request got a 2001 answer.
    #[must_use]
    pub fn all_answered_ok(&self) -> bool {
        self.complete && self.sent > 0 && self.answered == self.sent && self.errors == 0
    }
}

impl std::fmt::Display for BenchResult {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "target={} ({}) seconds={} concurrency={} sent={} answered={} errors={} unanswered={} answers_per_s={:.0} avg_latency={:?}",
            self.target.addr,
            self.target.identity,
            self.seconds,
            self.concurrency,
            self.sent,
            self.answered,
            self.errors,
            self.unanswered(),
            self.answers_per_s(),
            self.average
        )
    }
}

/// Parses the last "app_test Benchmark results" block of a test_app log.
fn parse_bench(log: &str) -> Result<BenchResult, Error> {
    let start = log
        .rfind("app_test Benchmark results")
        .ok_or_else(|| Error::parse("test_app log", "no benchmark results block"))?;
    let block = &log[start..];
    let mut r = BenchResult::default();
    let mut seen = 0;
    for line in block.lines().take(12) {
        let words: Vec<&str> = line.split_whitespace().collect();
        let num_before = |w: &str| -> Option<u64> {
            let i = words.iter().position(|x| *x == w)?;
            words.get(i.checked_sub(1)?)?.parse().ok()
        };
        let secs_after = |w: &str| -> Option<Duration> {
            let i = words.iter().position(|x| *x == w)?;
            let v: f64 = words.get(i + 1)?.parse().ok()?;
            Some(Duration::from_secs_f64(v))
        };
        if line.contains("messages sent") {
            r.sent = num_before("messages").unwrap_or(0);
            seen += 1;
        } else if line.contains("error(s) received") {
            r.errors = num_before("error(s)").unwrap_or(0);
            seen += 1;
        } else if line.contains("answer(s) received") {
            r.answered = num_before("answer(s)").unwrap_or(0);
            seen += 1;
        } else if let Some(d) = secs_after("fastest:") {
            r.fastest = d;
        } else if let Some(d) = secs_after("slowest:") {
            r.slowest = d;
        } else if let Some(d) = secs_after("Average:") {
            r.average = d;
        }
    }
    if seen < 3 {
        return Err(Error::parse(
            "test_app log",
            "incomplete benchmark results block",
        ));
    }
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    const BLOCK: &str = "\
12:00:01  NOTI   ------- app_test Benchmark results, end sending +0s ---------
12:00:01  NOTI    Executing for: 1.000100 sec
12:00:01  NOTI      10 messages sent
12:00:01  NOTI      0 error(s) received
12:00:01  NOTI      9 answer(s) received
12:00:02  NOTI   ------- app_test Benchmark results, end sending +1s ---------
12:00:02  NOTI    Executing for: 2.000100 sec
12:00:02  NOTI      1234 messages sent
12:00:02  NOTI      4 error(s) received
12:00:02  NOTI      1230 answer(s) received
12:00:02  NOTI      Overall:
12:00:02  NOTI        fastest: 0.000150 sec.
12:00:02  NOTI        slowest: 0.020000 sec.
12:00:02  NOTI        Average: 0.000800 sec.
12:00:02  NOTI      Throughput: 615 messages / sec
12:00:02  NOTI   --------------- Test Complete --------------
";

    #[test]
    fn parses_the_last_block() {
        let r = parse_bench(BLOCK).unwrap();
        assert_eq!((r.sent, r.errors, r.answered), (1234, 4, 1230));
        assert_eq!(r.fastest, Duration::from_micros(150));
        assert_eq!(r.slowest, Duration::from_millis(20));
        assert_eq!(r.average, Duration::from_micros(800));
        assert_eq!(r.unanswered(), 0);
    }

    #[test]
    fn rejects_a_log_without_results() {
        assert!(parse_bench("nothing here\n").is_err());
        assert!(parse_bench("------- app_test Benchmark results\n 3 messages sent\n").is_err());
    }

    #[test]
    fn finds_the_last_state_of_a_peer() {
        let log = "\
20:55:16  NOTI   'STATE_CLOSED'\t-> 'STATE_WAITCNXACK'\t'server1.example.net'
20:55:16  NOTI   'STATE_CLOSED'\t-> 'STATE_OPEN'\t'other.example.net'
20:55:16  NOTI   'STATE_WAITCEA'\t-> 'STATE_OPEN'\t'server1.example.net'
";
        assert_eq!(
            last_peer_state(log, "server1.example.net").as_deref(),
            Some("STATE_OPEN")
        );
        assert_eq!(last_peer_state(log, "nobody.example.net"), None);
        let log = "20:55:19  NOTI   'STATE_CLOSED'\t-> STATE_ZOMBIE (terminated)\t'server1.example.net'\n";
        assert_eq!(
            last_peer_state(log, "server1.example.net").as_deref(),
            Some("STATE_ZOMBIE")
        );
    }

    #[test]
    fn refuses_non_loopback_targets() {
        let a: SocketAddr = "192.0.2.1:3868".parse().unwrap();
        assert!(matches!(
            PeerTarget::new("x.example.net", a),
            Err(Error::NotLoopback(_))
        ));
        let a: SocketAddr = "[::1]:3868".parse().unwrap();
        assert!(PeerTarget::new("x.example.net", a).is_ok());
    }
}
