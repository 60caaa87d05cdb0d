//! Per-packet cost of the kernel program on live traffic, from the kernel's
//! own statistics (`kernel.bpf_stats_enabled`: `run_time_ns / run_cnt`), against
//! an XDP program that only passes, attached the same way to the same
//! interface and fed the same traffic. The statistics time each run, so both
//! figures include that timer; their difference is the program's net cost.
//!
//! Run by `cargo xtask test --only bench-ebpf` (root, bpffs mounted); prints
//! the figures and checks that the program ran once per received frame.

#[path = "support/handmade.rs"]
#[expect(dead_code, reason = "shared with ebpf_netns")]
mod handmade;
#[path = "support/netns.rs"]
#[expect(dead_code, reason = "shared with ebpf_netns")]
mod netns;

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::Command;
use std::thread;
use std::time::Duration;

use agent::ebpf::{self, Config, Mode, Telemetry};
use netns::{B4, VethPair, in_netns};

const EXCHANGES: u32 = 3000;
const ROUNDS: usize = 3;

/// `EXCHANGES` request/answer round trips on one connection, then close.
fn traffic(pair: &VethPair, port: u16) {
    let addr = SocketAddr::new(B4.parse().unwrap(), port);
    let listener = in_netns(&pair.b, move || TcpListener::bind(addr).unwrap());
    let server = thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        s.set_nodelay(true).unwrap();
        while let Some(req) = handmade::read_message(&mut s) {
            handmade::send(&mut s, &handmade::answer(&req, "server.example.net"), None);
        }
    });
    in_netns(&pair.a, move || {
        let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).unwrap();
        s.set_nodelay(true).unwrap();
        for i in 0..EXCHANGES {
            handmade::send(
                &mut s,
                &handmade::request(i, "client.example.net", 64),
                None,
            );
            handmade::read_message(&mut s).unwrap();
        }
    });
    server.join().unwrap();
}

/// `(run_time_ns, run_cnt)` of a program, from `bpftool prog show`.
fn stats(selector: &[&str]) -> (u64, u64) {
    let out = Command::new("bpftool")
        .args(["prog", "show"])
        .args(selector)
        .output()
        .expect("bpftool");
    let text = String::from_utf8_lossy(&out.stdout);
    let field = |name: &str| {
        text.split_whitespace()
            .skip_while(|w| *w != name)
            .nth(1)
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    (field("run_time_ns"), field("run_cnt"))
}

fn per_packet((ns, cnt): (u64, u64)) -> f64 {
    assert!(cnt > 0, "program never ran");
    ns as f64 / cnt as f64
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

const STATS: &str = "/proc/sys/kernel/bpf_stats_enabled";

/// Enables the kernel's BPF run statistics; restores the previous setting on
/// drop, also when the test panics.
struct StatsEnabled(String);

impl StatsEnabled {
    fn new() -> Self {
        let before = std::fs::read_to_string(STATS).unwrap_or_else(|_| "0".into());
        std::fs::write(STATS, "1").expect("enable bpf stats");
        StatsEnabled(before.trim().to_owned())
    }
}

impl Drop for StatsEnabled {
    fn drop(&mut self) {
        let _ = std::fs::write(STATS, &self.0);
    }
}

/// Removes the pins (which hold the programs loaded) on drop, also when the
/// test panics.
struct RemoveOnDrop(PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
#[ignore = "needs root and bpffs; run by `cargo xtask test --only bench-ebpf`"]
fn live_cost_against_an_empty_program() {
    let _stats = StatsEnabled::new();
    let pair = VethPair::new("live");
    let pin_dir = PathBuf::from(format!("/sys/fs/bpf/doic-live-{}", std::process::id()));
    std::fs::create_dir_all(&pin_dir).expect("bpffs mounted at /sys/fs/bpf");
    let _unpin = RemoveOnDrop(pin_dir.clone());
    ebpf::pin_for_test_run(&Config::default(), &pin_dir).expect("pin the anchor");
    let anchor = pin_dir.join(agent_ebpf_common::PROG_XDP_PASS);
    let anchor_s = anchor.to_string_lossy().into_owned();

    let (mut doic, mut empty) = (Vec::new(), Vec::new());
    let mut port = 3868;
    for _ in 0..ROUNDS {
        // The program, attached as the agent attaches it.
        let cfg = Config {
            interfaces: vec![pair.veth_b.clone()],
            mode: Mode::XdpGeneric,
            egress: false,
            ports: vec![port],
            ..Config::default()
        };
        let t = in_netns(&pair.b, move || Telemetry::start(&cfg)).expect("start");
        let id = t.program_ids()[0].to_string();
        traffic(&pair, port);
        let s = stats(&["id", &id]);
        let frames: u64 = t.read().unwrap().iter().map(|c| c.packets).sum();
        assert!(
            s.1 >= frames,
            "ran {} times for {frames} counted frames",
            s.1
        );
        doic.push(per_packet(s));
        drop(t);
        // The anchor, attached the same way, same traffic.
        // `nsenter`, not `ip -n`: the latter remounts /sys, hiding the bpffs pins.
        let net = format!("--net=/run/netns/{}", pair.b);
        let dev = pair.veth_b.clone();
        let attach = |on: bool| {
            let mut args = vec![net.as_str(), "ip", "link", "set", "dev", &dev, "xdpgeneric"];
            if on {
                args.extend(["pinned", &anchor_s]);
            } else {
                args.push("off");
            }
            assert!(
                Command::new("nsenter")
                    .args(&args)
                    .status()
                    .unwrap()
                    .success()
            );
        };
        let base = stats(&["pinned", &anchor_s]);
        attach(true);
        traffic(&pair, port + 1);
        attach(false);
        let after = stats(&["pinned", &anchor_s]);
        empty.push(per_packet((after.0 - base.0, after.1 - base.1)));
        port += 2;
    }
    let (d, e) = (median(doic), median(empty));
    println!(
        "live traffic, XDP generic on a veth, {EXCHANGES} Diameter round trips, median of {ROUNDS}: \
         doic_xdp {d:.1} ns/run, empty program {e:.1} ns/run, net {:.1} ns",
        d - e
    );
}
