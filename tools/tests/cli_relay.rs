//! The `doic-agent` binary: `check-config` errors, `demo --seconds`, `run`
//! with SIGTERM, and the metrics endpoint.

use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[path = "../../agent/tests/support/scratch.rs"]
#[expect(
    unreachable_pub,
    reason = "shared with the agent's tests, where it is a public module"
)]
mod scratch;
use scratch::Scratch;

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_doic-agent"))
}

#[test]
fn check_config_accepts_a_good_file_and_names_file_key_and_reason_otherwise() {
    let dir = Scratch::new("relay-cli-check");
    let good = dir.file(
        "good.toml",
        "[node]\norigin_host = \"agent.example.com\"\norigin_realm = \"example.com\"\nlisten = [\"127.0.0.1:3868\", \"[::1]:3868\"]\n[[peer]]\nhost = \"s.example.net\"\nrealm = \"example.net\"\nconnect = \"127.0.0.1:3869\"\n[[route]]\nrealm = \"example.net\"\npeers = [\"s.example.net\"]\n",
    );
    let out = bin().arg("check-config").arg(&good).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let bad = dir.file(
        "bad.toml",
        "[node]\norigin_host = \"agent.example.com\"\norigin_realm = \"example.com\"\n[[route]]\nrealm = \"example.net\"\npeers = [\"ghost.example.net\"]\n",
    );
    let out = bin().arg("check-config").arg(&bad).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    assert!(
        err.contains("bad.toml: route[0].peers[0]: `ghost.example.net` is not a [[peer]] host"),
        "{err}"
    );
    let out = bin()
        .arg("check-config")
        .arg("/nonexistent/x.toml")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8(out.stderr)
            .unwrap()
            .contains("/nonexistent/x.toml: cannot read")
    );
}

/// `[doic.protect]` and `[[peer]] doic` (docs/protect.md): a bad key or
/// value is named in one line.
#[test]
fn check_config_names_a_bad_protection_key_or_value() {
    let dir = Scratch::new("relay-cli-protect");
    let base = "[node]\norigin_host = \"agent.example.com\"\norigin_realm = \"example.com\"\nlisten = [\"127.0.0.1:0\"]\n[[peer]]\nhost = \"s.example.net\"\nrealm = \"example.net\"\n";
    let cases = [
        (
            "doic = \"protect\"\n[doic]\n[doic.protect]\nvalidity = 20\n",
            None,
        ),
        (
            "doic = \"sometimes\"\n",
            Some("peer.doic (line 8, column 8): unknown variant `sometimes`"),
        ),
        (
            "[doic]\n[doic.protect]\nfloor = 0\n",
            Some("doic.protect.floor = 0: must be in [0.01, 1]"),
        ),
        (
            "[doic]\n[doic.protect]\nvalidity = 0\n",
            Some("doic.protect.validity = 0"),
        ),
        (
            "[doic]\n[doic.protect]\nalgorithm = \"vegas\"\n",
            Some("doic.protect.algorithm (line 10, column 1): unknown field"),
        ),
    ];
    for (i, (tail, want)) in cases.iter().enumerate() {
        let p = dir.file(&format!("protect{i}.toml"), format!("{base}{tail}"));
        let out = bin().arg("check-config").arg(&p).output().unwrap();
        let err = String::from_utf8(out.stderr).unwrap();
        match want {
            None => assert!(out.status.success(), "{tail}: {err}"),
            Some(w) => {
                assert_eq!(out.status.code(), Some(1), "{tail}");
                assert_eq!(err.lines().count(), 1, "one line: {err}");
                assert!(err.contains(w), "{tail}: {err}");
            }
        }
    }
}

const DEMO: &str = r#"
[node]
origin_host = "agent.example.com"
origin_realm = "example.com"
listen = ["127.0.0.1:0"]
workers = 2
tc_seconds = 0.2
[metrics]
listen = "127.0.0.1:0"
[[peer]]
host = "server1.example.net"
realm = "example.net"
connect = "127.0.0.1:0"
[[peer]]
host = "server2.example.net"
realm = "example.net"
connect = "127.0.0.1:0"
[[route]]
realm = "example.net"
peers = ["server1.example.net", "server2.example.net"]
[accept]
hosts = ["*.example.org"]
"#;

#[test]
fn demo_relays_traffic_and_prints_a_line_per_second() {
    let dir = Scratch::new("relay-cli-demo");
    let cfg = dir.file("demo.toml", DEMO);
    let t0 = Instant::now();
    let out = bin()
        .args(["demo", "--relay", "--seconds", "3", "--config"])
        .arg(&cfg)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert!(t0.elapsed() < Duration::from_secs(20));
    let text = String::from_utf8(out.stdout).unwrap();
    let ticks = text.lines().filter(|l| l.starts_with("t=")).count();
    assert!(ticks >= 2, "{text}");
    let last = text.lines().last().unwrap();
    // "demo: sent N answered N (...), result codes {2001: N}"
    let num = |key: &str| -> u64 {
        let at = last.find(key).unwrap() + key.len();
        last[at..]
            .split_whitespace()
            .next()
            .unwrap()
            .trim_matches(|c: char| !c.is_ascii_digit())
            .parse()
            .unwrap()
    };
    let (sent, answered) = (num("sent "), num("answered "));
    assert!(sent > 100, "{last}");
    assert_eq!(sent, answered, "{last}");
    assert!(last.contains(&format!("{{2001: {sent}}}")), "{last}");
}

fn http_get(addr: &str, path: &str) -> String {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

#[test]
fn run_serves_metrics_and_stops_on_sigterm() {
    let dir = Scratch::new("relay-cli-run");
    let port = interop::process::free_port().unwrap();
    let cfg = dir.file(
        "run.toml",
        format!(
            "[node]\norigin_host = \"agent.example.com\"\norigin_realm = \"example.com\"\nlisten = [\"127.0.0.1:0\"]\nworkers = 1\n[metrics]\nlisten = \"127.0.0.1:{port}\"\n[[peer]]\nhost = \"s.example.net\"\nrealm = \"example.net\"\n"
        ),
    );
    let mut child = bin()
        .arg("run")
        .arg("--config")
        .arg(&cfg)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let addr = format!("127.0.0.1:{port}");
    let t0 = Instant::now();
    while std::net::TcpStream::connect(&addr).is_err() {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "metrics endpoint never came up"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let page = http_get(&addr, "/metrics");
    assert!(page.starts_with("HTTP/1.1 200 OK\r\n"), "{page}");
    assert!(page.contains("# TYPE doic_peer_state gauge"), "{page}");
    assert!(
        page.contains("doic_peer_state{peer=\"s.example.net\"} 0"),
        "{page}"
    );
    assert!(
        page.contains("doic_worker_utilisation{worker=\"0\"}"),
        "{page}"
    );
    assert!(
        page.contains(
            "doic_peer_watchdog_messages_total{peer=\"s.example.net\",message=\"dwr_sent\"} 0"
        ),
        "{page}"
    );
    assert!(http_get(&addr, "/nope").starts_with("HTTP/1.1 404"));
    // SIGTERM: the agent stops cleanly and exits 0.
    let pid = child.id() as i32;
    assert_eq!(unsafe_kill(pid), 0);
    let t0 = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            assert!(status.success(), "{status:?}");
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "no exit after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn unsafe_kill(pid: i32) -> i32 {
    Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .map_or(-1, |s| s.code().unwrap_or(-1))
}
