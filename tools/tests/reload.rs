//! A reload of a running `doic-agent run` (two workers, real TCP on
//! loopback) under 1,000 requests/s: SIGHUP adds a peer and its route and
//! removes another peer. Every request is answered 2001; the peer that
//! stays keeps its connection (it received one CER in all); the removed
//! peer received DPR (RFC 6733 §5.4) and is not dialled again; the added
//! one is dialled and takes its route's requests. Then a broken file:
//! refused in one ERROR line (JSON) naming the file and the cause, and the
//! running configuration goes on relaying.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::{Duration, Instant};

use tools::loadgen::{Client, Identity, Pace, Report, Server, ServerBehaviour, TEST_APP, Traffic};

#[path = "../../agent/tests/support/mod.rs"]
mod support;
use interop::process::free_port;
use support::process::{AgentProcess, events, rt};
use support::scratch::Scratch;

/// The agent's file: listening on `listen` (Diameter, metrics), the
/// `peers` (host, realm, port) and the `routes` (realm, hosts).
/// `doic-agent run FILE` with JSON logs, once it listens.
fn run_agent(file: &Path) -> AgentProcess {
    let args: [&std::ffi::OsStr; 4] = [
        "run".as_ref(),
        file.as_os_str(),
        "--log-format".as_ref(),
        "json".as_ref(),
    ];
    let agent = AgentProcess::spawn(env!("CARGO_BIN_EXE_doic-agent"), &args);
    agent.wait_for("listening", |l| l.contains("\"listening\""));
    agent
}

/// Writes the configuration whole, then renames it into place: the agent
/// never reads half a file.
fn replace_whole(file: &Path, text: &str) {
    let tmp = file.with_extension("toml.new");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, file).unwrap();
}

fn config(
    (listen, metrics): (u16, u16),
    peers: &[(&str, &str, u16)],
    routes: &[(&str, &[&str])],
) -> String {
    let mut s = format!(
        "[node]\norigin_host = \"agent.example.com\"\norigin_realm = \"example.com\"\nlisten = [\"127.0.0.1:{listen}\"]\nworkers = 2\ntc_seconds = 0.2\n[metrics]\nlisten = \"127.0.0.1:{metrics}\"\n[accept]\nhosts = [\"*.example.org\"]\n"
    );
    for (host, realm, port) in peers {
        s += &format!(
            "[[peer]]\nhost = \"{host}\"\nrealm = \"{realm}\"\nconnect = \"127.0.0.1:{port}\"\n"
        );
    }
    for (realm, hosts) in routes {
        let hosts: Vec<String> = hosts.iter().map(|h| format!("\"{h}\"")).collect();
        s += &format!(
            "[[route]]\nrealm = \"{realm}\"\npeers = [{}]\n",
            hosts.join(", ")
        );
    }
    s
}

/// Waits (10 s at most) until `ok`.
fn wait_until(what: &str, ok: impl Fn() -> bool) {
    let t0 = Instant::now();
    while !ok() {
        assert!(t0.elapsed() < Duration::from_secs(10), "{what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A client of the agent, each with its own name (one connection per
/// peer, RFC 6733 §5.6.4).
async fn client(agent: SocketAddr) -> Client {
    static NEXT: AtomicU32 = AtomicU32::new(1);
    let host = format!("c{}.example.org", NEXT.fetch_add(1, Ordering::Relaxed));
    let c = Client::connect(agent, Identity::new(&host, "example.org"), vec![TEST_APP])
        .await
        .unwrap();
    assert_eq!(c.cea_result, 2001);
    c
}

/// `c` sending to `realm` at `pace` for `seconds`.
async fn send(c: &mut Client, realm: &str, pace: Pace, seconds: f64) -> Report {
    let t = Traffic {
        destination_realm: realm.into(),
        destination_host: None,
    };
    let never = AtomicBool::new(false);
    let (run, grace) = (Duration::from_secs_f64(seconds), Duration::from_secs(5));
    c.run(&t, pace, run, grace, &never).await.unwrap()
}

/// A new client sending to `realm` at `pace` for `seconds`.
async fn load(agent: SocketAddr, realm: &str, pace: Pace, seconds: f64) -> Report {
    send(&mut client(agent).await, realm, pace, seconds).await
}

/// Every request answered, each 2001.
fn all_ok(r: &Report, what: &str) {
    assert!(r.sent > 0, "{what}: nothing sent");
    assert_eq!(r.answered, r.sent, "{what}: {r:?}");
    assert_eq!(
        r.by_code.get(&2001),
        Some(&r.sent),
        "{what}: {:?}",
        r.by_code
    );
    assert_eq!(
        (r.unmatched, r.malformed, r.got_dpr),
        (0, 0, false),
        "{what}"
    );
}

#[test]
fn sighup_adds_and_removes_peers_under_load_and_a_broken_file_changes_nothing() {
    let rt = rt();
    let server = |host: &'static str, realm: &'static str| {
        rt.block_on(async {
            Server::spawn(
                "127.0.0.1:0".parse().unwrap(),
                Identity::new(host, realm),
                ServerBehaviour::default(),
            )
            .await
            .unwrap()
        })
    };
    let kept = server("a.example.net", "example.net");
    let removed = server("b.example.net", "example.net");
    let added = server("n.new.example", "new.example");
    let port = |s: &Server| s.addr.port();
    let (listen, metrics) = (free_port().unwrap(), free_port().unwrap());
    let dir = Scratch::new("reload");
    let file = dir.join("agent.toml");
    let write = |text: &str| replace_whole(&file, text);
    write(&config(
        (listen, metrics),
        &[
            ("a.example.net", "example.net", port(&kept)),
            ("b.example.net", "example.net", port(&removed)),
        ],
        &[("example.net", &["a.example.net", "b.example.net"])],
    ));
    let mut agent = run_agent(&file);
    let count = |s: &Server| {
        (
            s.stats.cer.load(Ordering::Relaxed),
            s.stats.dpr.load(Ordering::Relaxed),
        )
    };
    wait_until("both peers up", || {
        count(&kept).0 == 1 && count(&removed).0 == 1
    });
    // Both take requests: the route spreads them.
    let addr: SocketAddr = format!("127.0.0.1:{listen}").parse().unwrap();
    let warm = rt.block_on(load(addr, "example.net", Pace::Closed(16), 0.3));
    all_ok(&warm, "before");
    assert!(removed.stats.requests.load(Ordering::Relaxed) > 0);

    let mut older = rt.block_on(client(addr));
    // 1,000 requests/s for 4 s; the reload 1.5 s in.
    let under_load = rt.spawn(load(addr, "example.net", Pace::Open(1000), 4.0));
    std::thread::sleep(Duration::from_millis(1500));
    write(&config(
        (listen, metrics),
        &[
            ("a.example.net", "example.net", port(&kept)),
            ("n.new.example", "new.example", port(&added)),
        ],
        &[
            ("example.net", &["a.example.net"]),
            ("new.example", &["n.new.example"]),
        ],
    ));
    agent.signal(libc::SIGHUP);
    let done = agent.wait_for("reloaded", |l| l.contains("\"configuration reloaded\""));
    let done: serde_json::Value = serde_json::from_str(&done).unwrap();
    assert_eq!(done["level"], "INFO");
    assert_eq!(done["fields"]["added"], 1);
    assert_eq!(done["fields"]["removed"], 1);
    assert_eq!(done["fields"]["needs_restart"], 0);
    // RFC 6733 §5.4: the removed peer is sent DPR.
    wait_until("DPR to the removed peer", || count(&removed).1 == 1);
    wait_until("the added peer dialled", || count(&added).0 == 1);
    let report = rt.block_on(under_load).unwrap();
    all_ok(&report, "under load");
    assert!(report.sent >= 3000, "{report:?}");
    // The new route reaches the added peer, from a connection opened
    // before the reload too.
    let before = added.stats.requests.load(Ordering::Relaxed);
    let fresh = rt.block_on(send(&mut older, "new.example", Pace::Closed(16), 0.3));
    all_ok(&fresh, "new route");
    rt.block_on(older.disconnect()).unwrap();
    assert_eq!(
        added.stats.requests.load(Ordering::Relaxed) - before,
        fresh.sent
    );
    // The removed peer's series leave /metrics, the added one's come.
    let endpoint: SocketAddr = format!("127.0.0.1:{metrics}").parse().unwrap();
    let body = rt.block_on(support::node::http_get(endpoint, "/metrics"));
    let series = |host: &str| body.contains(&format!("doic_peer_state{{peer=\"{host}\"}}"));
    assert!(series("a.example.net") && series("n.new.example"), "{body}");
    assert!(!series("b.example.net"), "{body}");
    // The kept peer's one connection throughout; the removed one is not
    // dialled again (Tc is 0.2 s).
    std::thread::sleep(Duration::from_millis(600));
    assert_eq!(count(&kept), (1, 0), "the kept peer was reconnected");
    assert_eq!(
        count(&removed),
        (1, 1),
        "the removed peer was dialled again"
    );

    // A broken file, reloaded by `doic-agent reload --pid`: one ERROR line
    // naming it and the cause; the running configuration stays.
    write(&config(
        (listen, metrics),
        &[("a.example.net", "example.net", port(&kept))],
        &[("example.net", &["ghost.example.net"])],
    ));
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_doic-agent"))
        .args(["reload", "--pid", &agent.pid().to_string()])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let refused = "reload refused: the running configuration stays";
    agent.wait_for("refused", |l| l.contains(refused));
    let lines = agent.lines();
    let errors: Vec<&String> = lines.iter().filter(|l| l.contains("\"ERROR\"")).collect();
    assert_eq!(errors.len(), 1, "{errors:?}");
    let refusal = &events(&lines, refused)[0];
    assert_eq!(refusal["level"], "ERROR");
    assert_eq!(refusal["fields"]["file"], file.display().to_string());
    assert_eq!(
        refusal["fields"]["cause"],
        format!(
            "{}: route[0].peers[0]: `ghost.example.net` is not a [[peer]] host",
            file.display()
        )
    );
    for realm in ["example.net", "new.example"] {
        let r = rt.block_on(load(addr, realm, Pace::Closed(16), 0.3));
        all_ok(&r, realm);
    }
    assert_eq!(count(&added), (1, 0));
    assert_eq!(count(&kept), (1, 0));
    // A process that is not there: one line, exit 1.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_doic-agent"))
        .args(["reload", "--pid", "999999999"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.starts_with("doic-agent: reload: cannot signal process 999999999: ")
            && err.lines().count() == 1,
        "{err}"
    );
    assert!(agent.stop().success());
    for s in [&kept, &removed, &added] {
        s.stop();
    }
}

/// The peers' DOIC modes as `GET /peers` shows them.
fn doic_modes(rt: &tokio::runtime::Runtime, metrics: u16) -> Vec<(String, String)> {
    let endpoint: SocketAddr = format!("127.0.0.1:{metrics}").parse().unwrap();
    let body = rt.block_on(support::node::http_get(endpoint, "/peers"));
    let json = body.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    let v: serde_json::Value = serde_json::from_str(json).unwrap();
    v.as_array()
        .unwrap()
        .iter()
        .filter(|p| p["doic"].is_object())
        .map(|p| {
            let s = |v: &serde_json::Value| v.as_str().unwrap_or_default().to_owned();
            (s(&p["name"]), s(&p["doic"]["mode"]))
        })
        .collect()
}

/// `[doic]` on SIGHUP: a new section and a peer's `doic` mode applied
/// live (the reload line says `doic`, nothing needs a restart, the peer
/// keeps its one connection); a `[doic]` that does not validate refused in
/// one ERROR line naming the key, the running section kept; DOIC turned
/// off logged as needing a restart.
#[test]
fn sighup_applies_a_doic_change_and_refuses_a_bad_one() {
    let rt = rt();
    let server = rt.block_on(async {
        Server::spawn(
            "127.0.0.1:0".parse().unwrap(),
            Identity::new("a.example.net", "example.net"),
            ServerBehaviour::default(),
        )
        .await
        .unwrap()
    });
    let (listen, metrics) = (free_port().unwrap(), free_port().unwrap());
    let dir = Scratch::new("reload-doic");
    let file = dir.join("agent.toml");
    let base = config(
        (listen, metrics),
        &[("a.example.net", "example.net", server.addr.port())],
        &[("example.net", &["a.example.net"])],
    );
    let write = |doic: &str, peer: &str| {
        let text = base.replace(
            &format!("connect = \"127.0.0.1:{}\"\n", server.addr.port()),
            &format!("connect = \"127.0.0.1:{}\"\n{peer}", server.addr.port()),
        ) + doic;
        replace_whole(&file, &text);
    };
    write("[doic]\nthrottle_result = \"too_busy\"\n", "");
    let mut agent = run_agent(&file);
    let cer = || server.stats.cer.load(Ordering::Relaxed);
    wait_until("the peer up", || cer() == 1);
    let addr: SocketAddr = format!("127.0.0.1:{listen}").parse().unwrap();
    let peer = ("a.example.net".to_owned(), "auto".to_owned());
    assert_eq!(doic_modes(&rt, metrics), [peer]);

    write(
        "[doic]\nthrottle_result = \"retry_not_allowed\"\n[doic.protect]\nbackoff = 0.8\n",
        "doic = \"native\"\n",
    );
    agent.signal(libc::SIGHUP);
    let done = agent.wait_for("reloaded", |l| l.contains("\"configuration reloaded\""));
    let done: serde_json::Value = serde_json::from_str(&done).unwrap();
    assert_eq!(done["fields"]["doic"], true, "{done}");
    assert_eq!(done["fields"]["needs_restart"], 0, "{done}");
    let native = ("a.example.net".to_owned(), "native".to_owned());
    assert_eq!(doic_modes(&rt, metrics), std::slice::from_ref(&native));
    all_ok(
        &rt.block_on(load(addr, "example.net", Pace::Closed(16), 0.3)),
        "after",
    );

    // RFC 7683 §6.3 needs a probe interval: refused, the section kept.
    write("[doic]\nprobe_interval = 0\n", "");
    agent.signal(libc::SIGHUP);
    let refused = "reload refused: the running configuration stays";
    agent.wait_for("refused", |l| l.contains(refused));
    let refusal = &events(&agent.lines(), refused)[0];
    assert_eq!(refusal["level"], "ERROR");
    let cause = refusal["fields"]["cause"].as_str().unwrap();
    assert!(cause.contains("doic.probe_interval"), "{cause}");
    assert_eq!(doic_modes(&rt, metrics), [native]);

    // DOIC turned off: the cores exist from start; needs a restart.
    write("[doic]\nenabled = false\n", "");
    agent.signal(libc::SIGHUP);
    agent.wait_for("warned", |l| {
        l.contains("\"WARN\"") && l.contains("\"key\":\"doic\"")
    });
    all_ok(
        &rt.block_on(load(addr, "example.net", Pace::Closed(16), 0.3)),
        "last",
    );
    assert_eq!(cer(), 1, "the peer kept its connection");
    assert!(agent.stop().success());
    server.stop();
}
