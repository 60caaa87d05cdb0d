//! The freeDiameter `test_app` client: benchmark runs (send for S seconds
//! with concurrency C) and single requests, and the parsing of test_app's
//! reports.

use std::fmt::Write as _;
use std::time::Duration;

use super::{
    EXT_DIR, FdNode, FdTls, Listen, OPEN_TIMEOUT, PeerTarget, START_TIMEOUT, artefacts,
    common_conf, load_extension,
};
use crate::Error;
use crate::process::RunDir;

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
    tw: u32,
    tls: Option<FdTls>,
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
            tw: 30,
            tls: None,
        }
    }

    setters! {
        /// Sets the client's identity.
        identity(id: &str) => identity = id.to_owned();

        /// Sets the client's realm.
        realm(realm: &str) => realm = realm.to_owned();

        /// Destination-Realm of the requests.
        dest_realm(realm: &str) => dest_realm = realm.to_owned();

        /// Adds Destination-Host to the requests.
        dest_host(host: &str) => dest_host = Some(host.to_owned());

        /// Sending window in seconds (at least 1).
        seconds(s: u32) => seconds = s.max(1);

        /// Maximum outstanding requests (at least 1).
        concurrency(c: u32) => concurrency = c.max(1);

        /// Sets the client's RFC 3539 watchdog timer Tw in seconds (`TwTimer`,
        /// default 30, at least 6).
        watchdog(secs: u32) => tw = secs.max(6);

        /// Connects with TLS on connect (RFC 6733 §13.1), presenting these
        /// credentials.
        tls(tls: FdTls) => tls = Some(tls);
    }

    /// Starts the client and the sending window; [`BenchRun::wait`] reads
    /// the result. Between the two, a test may disturb the path (kill a
    /// relay, overload a server).
    ///
    /// # Errors
    /// Missing artefacts, spawn failure, or no STATE_OPEN with the target.
    pub fn start(self) -> Result<BenchRun, Error> {
        let mut node = self.launch(true)?;
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

    /// Starts the client without a sending window: each
    /// [`FdClient::send`] sends one Test-Request (for captures that want a
    /// handful of messages, not thousands).
    ///
    /// # Errors
    /// Missing artefacts, spawn failure, or no STATE_OPEN with the target.
    pub fn connect(self) -> Result<FdClient, Error> {
        Ok(FdClient {
            node: self.launch(false)?,
        })
    }

    fn launch(&self, bench: bool) -> Result<FdNode, Error> {
        let a = artefacts()?;
        let dir = RunDir::new("fd-client")?;
        let mut ta = format!(
            "mode = client;\nsignal = {};\ndest-realm = \"{}\";\n",
            libc::SIGUSR1,
            self.dest_realm
        );
        if bench {
            let _ = writeln!(ta, "benchmark {} {};", self.seconds, self.concurrency);
        }
        if let Some(h) = &self.dest_host {
            let _ = writeln!(ta, "dest-host = \"{h}\";");
        }
        let ta_conf = dir.write("test_app.conf", &ta)?;
        let rt = dir.write(
            "rt_default.conf",
            &format!("* : \"{}\" += 100 ;\n", self.target.identity),
        )?;
        let tls = self.tls.as_ref();
        let on = Listen::new(0, tls);
        let mut c = common_conf(&self.identity, &self.realm, on, self.threads, self.tw);
        c.push_str("NoRelay;\n");
        load_extension(&mut c, a.test_app.display(), &ta_conf);
        load_extension(&mut c, format_args!("{EXT_DIR}/rt_default.fdx"), &rt);
        c.push_str(&self.target.connect_peer_line(tls.is_some()));
        let mut node = FdNode::start("fd-client", &self.identity, &self.realm, 0, &c, dir)?;
        node.wait_peer_open(&self.target.identity, OPEN_TIMEOUT)?;
        Ok(node)
    }

    /// [`start`](Self::start), then [`BenchRun::wait`].
    ///
    /// # Errors
    /// As both.
    pub fn run(self) -> Result<BenchResult, Error> {
        self.start()?.wait()
    }

    /// The smoke check of a path: one second at 10 requests in flight (the
    /// spec's other settings, TLS included, kept), the result printed, and
    /// every request answered 2001.
    ///
    /// # Panics
    /// When the client cannot run or a request was not answered 2001 (a
    /// test's check).
    #[track_caller]
    pub fn run_all_ok(self) -> BenchResult {
        let r = self.seconds(1).concurrency(10).run().unwrap();
        eprintln!("{r}");
        assert!(r.all_answered_ok(), "{r}");
        r
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

/// A connected `test_app` client that sends one Test-Request per
/// [`send`](Self::send). Dropping it stops the daemon (which sends DPR).
#[derive(Debug)]
pub struct FdClient {
    node: FdNode,
}

/// test_app's report of one answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SingleAnswer {
    /// Result-Code (`None` when the answer had none).
    pub result_code: Option<u32>,
    /// Origin-Host of the answer.
    pub origin_host: Option<String>,
    /// True when the answer echoed the request's Test-AVP.
    pub echo_ok: bool,
}

impl FdClient {
    /// The client daemon.
    pub fn node(&mut self) -> &mut FdNode {
        &mut self.node
    }

    /// Sends one Test-Request and waits (at most `timeout`) for test_app to
    /// log its answer.
    ///
    /// # Errors
    /// [`Error::TimeoutLog`] when no answer arrives, [`Error::Exited`].
    pub fn send(&mut self, timeout: Duration) -> Result<SingleAnswer, Error> {
        let from = self.node.daemon.log().len();
        self.node.daemon.signal(libc::SIGUSR1)?;
        let end = self.node.daemon.wait_log("RECV ", from, timeout)?;
        // The line is complete once its newline is there.
        let log = &self.node.daemon;
        let line = crate::process::wait_for("the end of the RECV line", timeout, || {
            let text = crate::process::read_lossy(log.log_path(), end as u64);
            Ok(text.find('\n').map(|i| text[..i].to_owned()))
        })?;
        Ok(parse_recv(&line))
    }
}

/// Parses the rest of a test_app `RECV` line:
/// `<hex> (Ok) Status: 2001 From 'host' ('realm')`.
fn parse_recv(line: &str) -> SingleAnswer {
    let after = |key: &str| line.split(key).nth(1).map(str::trim_start);
    SingleAnswer {
        result_code: after("Status:")
            .and_then(|r| r.split_whitespace().next())
            .and_then(|n| n.parse().ok()),
        origin_host: after("From '")
            .and_then(|r| r.split('\'').next())
            .map(str::to_owned),
        echo_ok: line.contains("(Ok)"),
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
    fn parses_a_single_answer_line() {
        let a = parse_recv(
            "2a (Ok) Status: 2001 From 'server1.example.net' ('example.net') 0.000312 sec",
        );
        assert_eq!(a.result_code, Some(2001));
        assert_eq!(a.origin_host.as_deref(), Some("server1.example.net"));
        assert!(a.echo_ok);
        let b = parse_recv("2a (PROBLEM) Status: 3002 no_Origin-Host");
        assert_eq!(
            (b.result_code, b.origin_host, b.echo_ok),
            (Some(3002), None, false)
        );
    }

    #[test]
    fn rejects_a_log_without_results() {
        assert!(parse_bench("nothing here\n").is_err());
        assert!(parse_bench("------- app_test Benchmark results\n 3 messages sent\n").is_err());
    }
}
