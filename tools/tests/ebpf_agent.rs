//! The `doic-agent` binary with its kernel telemetry (`[ebpf]`), against the
//! real kernel: it relays real Diameter traffic (RFC 6733 §2.8) from a load
//! client to an upstream server on loopback, and `/metrics` must show the
//! program attached and per-peer kernel counters equal to what the client
//! sent (requests, RFC 6733 §3 R bit) and to a packet capture on the same
//! interface (packets, bytes). After SIGTERM nothing is left loaded. Without
//! privileges, or with `mode = "off"`, the agent relays all the same and
//! shows `doic_ebpf_attached 0`.
//!
//! The same runs in a network namespace with the program on a veth (the
//! client in the other namespace).
//!
//! Needs root (CAP_BPF, CAP_NET_ADMIN, CAP_SYS_ADMIN), so the tests are
//! ignored by plain `cargo test`; `cargo xtask test --only ebpf` runs them
//! one at a time (the XDP hook on `lo` takes one program).

// The agent's test helpers; this file uses the capture and the namespaces
// only (the module allows what it leaves unused).
#[path = "../../agent/tests/support/mod.rs"]
mod support;
use support::process::rt;

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agent::ebpf::Direction;
use bytes::BytesMut;
use interop::process::free_port;
use support::capture::Capture;
use support::scratch::Scratch;
use tools::loadgen::{Client, Identity, Server, ServerBehaviour, TEST_APP, Traffic};

/// Requests the client sends, one at a time (each answered before the next,
/// so every request starts a segment and the kernel count is exact).
const REQUESTS: u64 = 300;

/// `text` as `TAG.toml` in a directory of its own, removed when the test
/// drops it.
fn write_config(tag: &str, text: &str) -> (Scratch, PathBuf) {
    let dir = Scratch::new(&format!("ebpf-agent-{tag}"));
    let p = dir.file(&format!("{tag}.toml"), text);
    (dir, p)
}

fn config(listen: u16, metrics: u16, upstream: SocketAddr, ebpf: &str) -> String {
    format!(
        "[node]\norigin_host = \"agent.example.com\"\norigin_realm = \"example.com\"\nlisten = [\"127.0.0.1:{listen}\"]\nworkers = 1\ntw_seconds = 60\n[metrics]\nlisten = \"127.0.0.1:{metrics}\"\n[[peer]]\nhost = \"s.example.net\"\nrealm = \"example.net\"\nconnect = \"{upstream}\"\n[[route]]\nrealm = \"example.net\"\npeers = [\"s.example.net\"]\n[accept]\nhosts = [\"*.example.org\"]\n{ebpf}"
    )
}

/// The agent process, its stderr collected line by line; killed on drop.
struct AgentProc {
    child: Child,
    stderr: Arc<Mutex<Vec<String>>>,
    metrics: String,
    /// The network namespace the agent runs in, if not the test's.
    netns: Option<String>,
}

impl AgentProc {
    /// Starts the agent and waits until it says it is listening (its
    /// telemetry started, or not).
    fn spawn(cfg: &PathBuf, metrics: u16, wrap: &[&str]) -> Self {
        let a = Self::launch(cfg, metrics, wrap);
        a.wait_for_line(Duration::from_secs(10), "INFO doic_agent: listening");
        a
    }

    /// Waits until a line of the log contains `what`.
    fn wait_for_line(&self, within: Duration, what: &str) {
        let t0 = Instant::now();
        while !self.log().contains(what) {
            assert!(t0.elapsed() < within, "no {what:?} in: {}", self.log());
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Starts the agent.
    fn launch(cfg: &PathBuf, metrics: u16, wrap: &[&str]) -> Self {
        let bin = env!("CARGO_BIN_EXE_doic-agent");
        let mut cmd = match wrap.split_first() {
            Some((first, rest)) => {
                let mut c = Command::new(first);
                c.args(rest).arg(bin);
                c
            }
            None => Command::new(bin),
        };
        let mut child = cmd
            .arg("run")
            .arg("--config")
            .arg(cfg)
            .env(
                "RUST_LOG",
                "doic_agent=info,agent::agent=info,agent::telemetry=info,agent::ebpf=info,doic::kernel=warn",
            )
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let (stderr, _reader) = support::process::collect_lines(&mut child);
        AgentProc {
            child,
            stderr,
            metrics: format!("127.0.0.1:{metrics}"),
            netns: None,
        }
    }

    fn metrics(&self) -> Option<String> {
        let addr = self.metrics.clone();
        match &self.netns {
            Some(ns) => support::netns::in_netns(ns, move || http_metrics(&addr)),
            None => http_metrics(&addr),
        }
    }

    fn in_netns(mut self, ns: &str) -> Self {
        self.netns = Some(ns.to_owned());
        self
    }
}

fn http_metrics(addr: &str) -> Option<String> {
    {
        let mut s = std::net::TcpStream::connect(addr).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
        write!(s, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").ok()?;
        let mut out = String::new();
        s.read_to_string(&mut out).ok()?;
        Some(out)
    }
}

impl AgentProc {
    /// Polls `/metrics` until `ok` holds; panics with the page and the log
    /// after `limit`.
    fn wait_for(&self, limit: Duration, what: &str, ok: impl Fn(&str) -> bool) -> String {
        let t0 = Instant::now();
        loop {
            if let Some(page) = self.metrics()
                && ok(&page)
            {
                return page;
            }
            assert!(
                t0.elapsed() < limit,
                "{what} not seen within {limit:?}\npage:\n{}\nlog:\n{}",
                self.metrics().unwrap_or_default(),
                self.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The agent's stderr so far, without terminal colour codes.
    fn log(&self) -> String {
        let raw = self.stderr.lock().unwrap().join("\n");
        let mut out = String::with_capacity(raw.len());
        let mut chars = raw.chars();
        while let Some(c) = chars.next() {
            if c == '\u{1b}' {
                // CSI: ESC [ parameters final-letter
                for c in chars.by_ref() {
                    if c.is_ascii_alphabetic() {
                        break;
                    }
                }
            } else {
                out.push(c);
            }
        }
        out
    }

    /// SIGTERM, then the exit status within 15 s.
    fn terminate(mut self) -> (std::process::ExitStatus, String) {
        let pid = self.child.id().to_string();
        assert!(
            Command::new("kill")
                .args(["-TERM", &pid])
                .status()
                .unwrap()
                .success()
        );
        let t0 = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                // Let the reader thread take the last lines.
                std::thread::sleep(Duration::from_millis(100));
                let log = self.log();
                return (status, log);
            }
            assert!(
                t0.elapsed() < Duration::from_secs(15),
                "no exit after SIGTERM"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for AgentProc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The value of one sample line `name{labels} value`, if present.
fn sample(page: &str, series: &str) -> Option<u64> {
    page.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

fn kernel(page: &str, metric: &str, peer: SocketAddr, dir: &str) -> Option<u64> {
    sample(
        page,
        &format!("doic_kernel_{metric}_total{{peer=\"{peer}\",direction=\"{dir}\"}}"),
    )
}

/// The kernel program ids the agent logged when it attached.
fn program_ids(log: &str) -> Vec<u32> {
    let Some(line) = log.lines().find(|l| l.contains("kernel telemetry started")) else {
        return Vec::new();
    };
    let Some(list) = line
        .split("program_ids=[")
        .nth(1)
        .and_then(|r| r.split(']').next())
    else {
        return Vec::new();
    };
    list.split(',')
        .filter_map(|n| n.trim().parse().ok())
        .collect()
}

fn prog_loaded(id: u32) -> bool {
    Command::new("bpftool")
        .args(["prog", "show", "id", &id.to_string()])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Sends `n` requests one at a time through the agent, each answered 2001
/// before the next goes.
async fn one_at_a_time(c: &mut Client, n: u64) {
    let traffic = Traffic {
        destination_realm: "example.net".into(),
        destination_host: None,
    };
    for i in 0..n {
        let mut out = BytesMut::new();
        c.put_request(&mut out, &traffic, 1000 + i as u32);
        c.write_raw(&out).await.unwrap();
        let answer = tokio::time::timeout(Duration::from_secs(5), c.read_message())
            .await
            .expect("an answer within 5 s")
            .unwrap();
        // The R bit is clear: an answer.
        assert_eq!(answer[4] & 0x80, 0);
        let rc = diameter::codec::Routing::scan(&answer)
            .ok()
            .and_then(|r| r.result_code());
        assert_eq!(rc, Some(2001), "request {i}");
    }
}

async fn upstream() -> Server {
    Server::spawn(
        "127.0.0.1:0".parse().unwrap(),
        Identity::new("s.example.net", "example.net"),
        ServerBehaviour::default(),
    )
    .await
    .unwrap()
}

const UP: &str = "doic_peer_state{peer=\"s.example.net\"} 2";

#[test]
#[ignore = "needs root: attaches the kernel program to lo"]
fn on_lo_the_kernel_counts_equal_what_the_client_sent_and_sigterm_detaches() {
    let rt = rt();
    let server = rt.block_on(upstream());
    let (listen, metrics) = (free_port().unwrap(), free_port().unwrap());
    let (_dir, cfg) = write_config(
        "lo",
        &config(
            listen,
            metrics,
            server.addr,
            "[ebpf]\ninterfaces = [\"lo\"]\nmode = \"auto\"\n",
        ),
    );
    let capture = Capture::start("lo", listen);
    let agent = AgentProc::spawn(&cfg, metrics, &[]);
    let page = agent.wait_for(Duration::from_secs(10), "upstream peer open", |p| {
        p.contains(UP)
    });
    assert!(
        page.contains("\ndoic_ebpf_attached 1\n"),
        "{page}\n{}",
        agent.log()
    );
    let ids = program_ids(&agent.log());
    assert!(!ids.is_empty(), "{}", agent.log());
    assert!(ids.iter().all(|&id| prog_loaded(id)));

    // The upstream connection may predate the attachment: count from here.
    let up_before = kernel(&page, "answers", server.addr, "in").unwrap_or(0);
    let mut client = rt
        .block_on(Client::connect(
            format!("127.0.0.1:{listen}").parse().unwrap(),
            Identity::new("client1.example.org", "example.org"),
            vec![TEST_APP],
        ))
        .unwrap();
    assert_eq!(client.cea_result, 2001);
    let me = client.local_addr().unwrap();
    rt.block_on(one_at_a_time(&mut client, REQUESTS));

    // CER + the requests in. The CEA and the answers out (TC egress) are
    // packets and bytes: the agent counts the messages it writes itself.
    let page = agent.wait_for(Duration::from_secs(5), "the client's requests", |p| {
        kernel(p, "requests", me, "in") == Some(REQUESTS + 1)
            && kernel(p, "packets", me, "out").unwrap_or(0) > 0
    });
    assert_eq!(kernel(&page, "answers", me, "in"), Some(0));
    assert_eq!(kernel(&page, "answers", me, "out"), Some(0));
    assert_eq!(kernel(&page, "requests", me, "out"), Some(0));
    assert_eq!(kernel(&page, "syn", me, "in"), Some(1));
    assert_eq!(kernel(&page, "syn_dropped", me, "in"), Some(0));
    // The upstream leg is counted too (its port is a peer connect port):
    // the agent relayed every request and got every answer.
    let served = server
        .stats
        .requests
        .load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(served, REQUESTS);
    // The upstream leg is counted too (its port is a peer connect port):
    // every answer in since the client began.
    let page = agent.wait_for(Duration::from_secs(5), "the upstream leg", |p| {
        kernel(p, "answers", server.addr, "in").unwrap_or(0) >= up_before + REQUESTS
    });
    assert_eq!(
        kernel(&page, "answers", server.addr, "in"),
        Some(up_before + REQUESTS)
    );
    // On `lo` the agent's own segments arrive too; the one program there
    // counts them once, as sent to the client, and nothing for the agent's
    // own listen address.
    let listener: SocketAddr = format!("127.0.0.1:{listen}").parse().unwrap();
    for dir in ["in", "out"] {
        assert_eq!(kernel(&page, "packets", listener, dir), None, "{dir}");
    }

    // Packets and bytes from the client, and to it, equal the capture's
    // (received from it, sent to it), once both have seen the last ACK (the
    // capture reads asynchronously).
    for (dir, label) in [(Direction::FromPeer, "in"), (Direction::ToPeer, "out")] {
        let t0 = Instant::now();
        let (mut kp, mut cp) = ((None, None), (0, 0));
        while t0.elapsed() < Duration::from_secs(5) {
            let page = agent.metrics().unwrap();
            kp = (
                kernel(&page, "packets", me, label),
                kernel(&page, "bytes", me, label),
            );
            cp = capture
                .counts()
                .get(&(me, dir))
                .copied()
                .unwrap_or_default();
            if kp == (Some(cp.0), Some(cp.1)) {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        assert_eq!(kp, (Some(cp.0), Some(cp.1)), "kernel vs capture, {label}");
        // At least a SYN (or SYN-ACK), the final handshake ACK (or the CEA),
        // the CER and every request, or every answer.
        assert!(cp.0 >= REQUESTS + 2, "{label}: {cp:?}");
    }

    // What the program cannot count it says in the agent's log (aya-log,
    // docs/ebpf.md): a connection whose first segment is no Diameter header.
    let mut junk = std::net::TcpStream::connect(listener).unwrap();
    let junk_port = junk.local_addr().unwrap().port();
    junk.write_all(&[0xEE; 64]).unwrap();
    let said = format!("port {junk_port} not counted exactly: bytes where a header should start");
    let t0 = Instant::now();
    while !agent.log().contains(&said) {
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "no kernel log line \"{said}\":\n{}",
            agent.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        agent
            .log()
            .lines()
            .any(|l| l.contains("WARN doic::kernel") && l.contains(&said)),
        "{}",
        agent.log()
    );
    drop(junk);

    // A closed connection's entries are forgotten (after the grace).
    rt.block_on(client.disconnect()).unwrap();
    let gone = format!("peer=\"{me}\"");
    agent.wait_for(
        Duration::from_secs(8),
        "the closed client's entries forgotten",
        |p| !p.contains(&gone) && p.contains("doic_ebpf_attached 1"),
    );

    let (status, log) = agent.terminate();
    assert!(status.success(), "{status:?}\n{log}");
    assert!(log.contains("kernel telemetry detached"), "{log}");
    for id in ids {
        assert!(!prog_loaded(id), "program {id} still loaded after exit");
    }
    let link = Command::new("ip")
        .args(["-d", "link", "show", "dev", "lo"])
        .output()
        .unwrap();
    let link = String::from_utf8_lossy(&link.stdout);
    assert!(!link.contains("doic_xdp"), "{link}");
    server.stop();
}

#[test]
#[ignore = "needs root: loads the kernel program"]
fn sigterms_while_the_program_loads_stop_the_agent_at_once() {
    // A SIGTERM taken by the thread that loads the program while the kernel
    // verifies it made the verifier give up and aya verify it again with its
    // log on, for 15 s and more (`ebpf::signals::SignalsHeldOff`). Where in the load
    // one signal lands is a matter of timing, so one every 20 ms from the
    // agent's start until it says it stops: the second or so of the load is
    // covered.
    let rt = rt();
    let server = rt.block_on(upstream());
    let (listen, metrics) = (free_port().unwrap(), free_port().unwrap());
    let (_dir, cfg) = write_config(
        "stop-loading",
        &config(
            listen,
            metrics,
            server.addr,
            "[ebpf]\ninterfaces = [\"lo\"]\nmode = \"tc\"\n",
        ),
    );
    let mut agent = AgentProc::launch(&cfg, metrics, &[]);
    agent.wait_for_line(Duration::from_secs(10), "INFO agent::agent: agent started");
    let pid = i32::try_from(agent.child.id()).unwrap();
    let t0 = Instant::now();
    let status = loop {
        if let Some(s) = agent.child.try_wait().unwrap() {
            break s;
        }
        if !agent.log().contains("INFO doic_agent: stopping") {
            // SAFETY: a signal to the child this test started and has not
            // reaped (try_wait above returned None).
            unsafe { libc::kill(pid, libc::SIGTERM) };
        }
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "no exit after SIGTERM: {}",
            agent.log()
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let took = t0.elapsed();
    std::thread::sleep(Duration::from_millis(100));
    let log = agent.log();
    assert!(status.success(), "{status:?}\n{log}");
    assert!(
        took < Duration::from_secs(5),
        "stopped after {took:?}\n{log}"
    );
    // The load was under way: it finished, then the agent stopped and
    // detached the program.
    let at = |what: &str| {
        log.find(what)
            .unwrap_or_else(|| panic!("no {what:?}: {log}"))
    };
    assert!(at("kernel telemetry attached") < at("INFO doic_agent: stopping"));
    assert!(log.contains("kernel telemetry detached"), "{log}");
    server.stop();
}

/// Relays with the program off (or refused) and shows the gauge at 0.
fn relays_without_the_program(tag: &str, ebpf: &str, wrap: &[&str], why: &str) {
    let rt = rt();
    let server = rt.block_on(upstream());
    let (listen, metrics) = (free_port().unwrap(), free_port().unwrap());
    let (_dir, cfg) = write_config(tag, &config(listen, metrics, server.addr, ebpf));
    let agent = AgentProc::spawn(&cfg, metrics, wrap);
    agent.wait_for(Duration::from_secs(10), "upstream peer open", |p| {
        p.contains(UP)
    });
    let mut client = rt
        .block_on(Client::connect(
            format!("127.0.0.1:{listen}").parse().unwrap(),
            Identity::new("client1.example.org", "example.org"),
            vec![TEST_APP],
        ))
        .unwrap();
    rt.block_on(one_at_a_time(&mut client, 50));
    let page = agent.metrics().unwrap();
    assert!(page.contains("\ndoic_ebpf_attached 0\n"), "{page}");
    assert!(!page.contains("doic_kernel_packets_total{"), "{page}");
    assert_eq!(
        sample(
            &page,
            "doic_peer_requests_sent_total{peer=\"s.example.net\"}"
        ),
        Some(50)
    );
    let (status, log) = agent.terminate();
    assert!(status.success(), "{status:?}\n{log}");
    let lines: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("kernel telemetry"))
        .collect();
    assert_eq!(lines.len(), 1, "one line says why: {log}");
    assert!(lines[0].contains(why), "{log}");
    server.stop();
}

#[test]
#[ignore = "needs root to show that the off switch is what keeps it off"]
fn mode_off_relays_and_shows_the_program_detached() {
    relays_without_the_program(
        "off",
        "[ebpf]\nmode = \"off\"\n",
        &[],
        "ebpf.mode = \"off\"",
    );
}

#[test]
#[ignore = "needs root to drop the capabilities it then lacks"]
fn without_privileges_the_agent_relays_and_says_why_in_one_line() {
    // Root without any capability: the kernel refuses the program.
    relays_without_the_program(
        "nocaps",
        "[ebpf]\ninterfaces = [\"lo\"]\n",
        &[
            "setpriv",
            "--inh-caps=-all",
            "--ambient-caps=-all",
            "--bounding-set=-all",
            "--",
        ],
        "kernel telemetry unavailable",
    );
}

#[test]
fn check_config_refuses_an_unusable_ebpf_section_in_one_line() {
    // check-config: one precise line.
    let (_dir, cfg) = write_config(
        "bad",
        "[node]\norigin_host = \"agent.example.com\"\norigin_realm = \"example.com\"\nlisten = [\"127.0.0.1:3868\"]\n[ebpf]\nsyn_guard = true\n",
    );
    let out = Command::new(env!("CARGO_BIN_EXE_doic-agent"))
        .arg("check-config")
        .arg(&cfg)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("bad.toml: ebpf.syn_allow: is empty while syn_guard is on"),
        "{err}"
    );
}

#[test]
#[ignore = "needs root: creates network namespaces and attaches to a veth"]
fn in_a_netns_on_a_veth_the_kernel_counts_equal_the_capture_and_the_client() {
    use support::netns::{B4, VethPair, in_netns, link_details};
    const LISTEN: u16 = 3868;
    let pair = VethPair::new("agent");
    // The upstream server lives in the agent's namespace, on its loopback.
    let (server_rt, server) = in_netns(&pair.b, || {
        let rt = rt();
        let server = rt.block_on(async {
            Server::spawn(
                "127.0.0.1:3869".parse().unwrap(),
                Identity::new("s.example.net", "example.net"),
                ServerBehaviour::default(),
            )
            .await
            .unwrap()
        });
        (rt, server)
    });
    let (_dir, cfg) = write_config(
        "veth",
        &format!(
            "[node]\norigin_host = \"agent.example.com\"\norigin_realm = \"example.com\"\nlisten = [\"{B4}:{LISTEN}\"]\nworkers = 1\ntw_seconds = 60\n[metrics]\nlisten = \"127.0.0.1:9464\"\n[[peer]]\nhost = \"s.example.net\"\nrealm = \"example.net\"\nconnect = \"{}\"\n[[route]]\nrealm = \"example.net\"\npeers = [\"s.example.net\"]\n[accept]\nhosts = [\"*.example.org\"]\n[ebpf]\ninterfaces = [\"{}\"]\nmode = \"auto\"\n",
            server.addr, pair.veth_b
        ),
    );
    let dev = pair.veth_b.clone();
    let capture = in_netns(&pair.b, move || Capture::start(&dev, LISTEN));
    let agent = AgentProc::spawn(&cfg, 9464, &["ip", "netns", "exec", &pair.b]).in_netns(&pair.b);
    agent.wait_for(Duration::from_secs(10), "upstream peer open", |p| {
        p.contains(UP) && p.contains("\ndoic_ebpf_attached 1\n")
    });
    assert!(
        link_details(&pair.b, &pair.veth_b).contains("doic_xdp"),
        "{}",
        link_details(&pair.b, &pair.veth_b)
    );
    let ids = program_ids(&agent.log());
    assert!(!ids.is_empty(), "{}", agent.log());

    // The client, in the other namespace, across the veth.
    let (client_rt, client, me) = in_netns(&pair.a, || {
        let rt = rt();
        let mut c = rt
            .block_on(Client::connect(
                format!("{B4}:{LISTEN}").parse().unwrap(),
                Identity::new("client1.example.org", "example.org"),
                vec![TEST_APP],
            ))
            .unwrap();
        rt.block_on(one_at_a_time(&mut c, REQUESTS));
        let me = c.local_addr().unwrap();
        (rt, c, me)
    });
    // CER + the requests in; what the agent sends back is packets and bytes.
    let page = agent.wait_for(Duration::from_secs(5), "the client's requests", |p| {
        kernel(p, "requests", me, "in") == Some(REQUESTS + 1)
    });
    assert_eq!(kernel(&page, "syn", me, "in"), Some(1));
    assert_eq!(kernel(&page, "answers", me, "in"), Some(0));
    assert_eq!(kernel(&page, "answers", me, "out"), Some(0));
    // Packets and bytes, both directions, equal the capture on the veth.
    let t0 = Instant::now();
    loop {
        let page = agent.metrics().unwrap();
        let counts = capture.counts();
        let mut same = true;
        let mut report = String::new();
        for (dir, label) in [(Direction::FromPeer, "in"), (Direction::ToPeer, "out")] {
            let cap = counts.get(&(me, dir)).copied().unwrap_or_default();
            let ker = (
                kernel(&page, "packets", me, label).unwrap_or(0),
                kernel(&page, "bytes", me, label).unwrap_or(0),
            );
            same &= cap == ker && cap.0 > REQUESTS;
            report.push_str(&format!("{label}: kernel {ker:?} capture {cap:?}; "));
        }
        if same {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(5), "{report}");
        std::thread::sleep(Duration::from_millis(100));
    }
    // The upstream leg is on the namespace's loopback, where nothing is
    // attached: no series for the server.
    assert!(
        !page.contains(&format!("peer=\"{}\"", server.addr)),
        "{page}"
    );

    let (status, log) = agent.terminate();
    assert!(status.success(), "{status:?}\n{log}");
    assert!(!link_details(&pair.b, &pair.veth_b).contains("doic_xdp"));
    for id in ids {
        assert!(!prog_loaded(id), "program {id} still loaded after exit");
    }
    drop((client, client_rt));
    server.stop();
    drop(server_rt);
}

#[test]
#[ignore = "needs root: attaches the kernel program to lo"]
fn the_control_thread_hands_per_peer_arrival_rates_to_the_overload_logic() {
    let rt = rt();
    let server = rt.block_on(upstream());
    let text = format!(
        "[node]\norigin_host = \"agent.example.com\"\norigin_realm = \"example.com\"\nlisten = [\"127.0.0.1:0\"]\nworkers = 1\ntw_seconds = 60\n[[peer]]\nhost = \"s.example.net\"\nrealm = \"example.net\"\nconnect = \"{}\"\n[[route]]\nrealm = \"example.net\"\npeers = [\"s.example.net\"]\n[accept]\nhosts = [\"*.example.org\"]\n[ebpf]\ninterfaces = [\"lo\"]\n",
        server.addr
    );
    let config =
        agent::config::Config::from_str_named(&text, std::path::Path::new("rates.toml")).unwrap();
    let agent = agent::agent::Agent::start(config).unwrap();
    assert!(agent.start_kernel_telemetry());
    let kernel = agent.kernel().clone();
    let mut client = rt
        .block_on(Client::connect(
            agent.local_addrs()[0],
            Identity::new("client1.example.org", "example.org"),
            vec![TEST_APP],
        ))
        .unwrap();
    let me = client.local_addr().unwrap();
    // Steady load for about four ticks, one request at a time. The client's
    // own rate moves from tick to tick with the machine's load (2 047 to
    // 5 104/s in one run here): each kernel rate is compared with what the
    // client sent in the same interval, not with its average over the run.
    let t0 = Instant::now();
    let mut sent = 0u64;
    let mut samples = vec![(t0, 0u64)];
    let mut windows = Vec::new();
    let mut last_at = None;
    while t0.elapsed() < Duration::from_millis(4500) {
        rt.block_on(one_at_a_time(&mut client, 20));
        sent += 20;
        samples.push((Instant::now(), sent));
        let load = kernel.load();
        if load.at != last_at {
            if let Some(r) = load.arrival_rate(me) {
                assert!(load.total_arrival_rate() >= r);
                windows.push((last_at, load.at, r));
            }
            last_at = load.at;
        }
    }
    // What the client had sent by `t`: its last count taken before, one
    // batch (20) at most behind.
    let sent_by = |t: Instant| {
        samples
            .iter()
            .rev()
            .find(|(at, _)| *at <= t)
            .map_or(0, |(_, n)| *n)
    };
    // The first window may cover the connection's start: judge the rest.
    assert!(windows.len() >= 2, "{windows:?}");
    for (from, to, r) in &windows[1..] {
        let (Some(from), Some(to)) = (from, to) else {
            panic!("a window without its start: {windows:?}");
        };
        let dt = to.saturating_duration_since(*from).as_secs_f64();
        let client = (sent_by(*to) - sent_by(*from)) as f64 / dt;
        // Each end of the client's count may lag by a batch.
        let slack = 2.0 * 20.0 / dt + 0.05 * client;
        assert!(
            (r - client).abs() <= slack,
            "kernel arrival rate {r:.0}/s vs client {client:.0}/s in the same {dt:.3} s: {windows:?}"
        );
    }
    // Idle: the rate falls to zero within two ticks.
    let t1 = Instant::now();
    loop {
        if kernel.load().arrival_rate(me) == Some(0.0) {
            break;
        }
        assert!(t1.elapsed() < Duration::from_secs(3), "{:?}", kernel.load());
        std::thread::sleep(Duration::from_millis(50));
    }
    rt.block_on(client.disconnect()).unwrap();
    agent.shutdown();
    agent.join();
    assert!(!kernel.is_attached(), "detached once the agent is done");
    server.stop();
}
