//! `doic-agent demo` (the overload episode) end to end: the binary runs
//! the episode with `[doic]` and without control on loopback over TCP,
//! prints a line per second with the offered load stepping from half to
//! three times the servers' capacity and back, answers every request, and
//! compares goodput (RFC 7068 §3) in its summary.

use std::process::Command;
use std::time::{Duration, Instant};

/// Each server's capacity in these runs; two servers.
const CAPACITY: f64 = 300.0;

struct Episode {
    text: String,
}

impl Episode {
    /// Runs the demo with 2 s steps (14 s of load per run, two runs).
    fn run() -> Episode {
        let t0 = Instant::now();
        let out = Command::new(env!("CARGO_BIN_EXE_doic-agent"))
            .args(["demo", "--step", "2", "--capacity", "300"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        assert!(t0.elapsed() < Duration::from_secs(60), "bounded");
        Episode {
            text: String::from_utf8(out.stdout).unwrap(),
        }
    }

    /// The number after `key` on `line`.
    fn num(line: &str, key: &str) -> f64 {
        let at = line.find(key).unwrap_or_else(|| panic!("{key} in {line}")) + key.len();
        line[at..]
            .split(|c: char| !(c.is_ascii_digit() || c == '.'))
            .find(|s| !s.is_empty())
            .unwrap()
            .parse()
            .unwrap()
    }

    /// The summary line of the run `which` ("with [doic]" or "without control").
    fn summary(&self, which: &str) -> &str {
        self.text
            .lines()
            .find(|l| l.starts_with(&format!("demo: {which} ")) && l.contains("goodput"))
            .unwrap_or_else(|| panic!("summary of {which} in\n{}", self.text))
    }
}

#[test]
fn the_episode_steps_the_load_answers_every_request_and_compares_goodput() {
    let e = Episode::run();
    let t = &e.text;
    assert!(t.contains("episode with [doic]"), "{t}");
    assert!(t.contains("episode without control"), "{t}");
    let ticks: Vec<&str> = t.lines().filter(|l| l.starts_with("t=")).collect();
    assert!(ticks.len() >= 12, "a line per second in both runs:\n{t}");
    for l in &ticks {
        for key in ["goodput ", "throttled ", "diverted ", "limit ", "reports "] {
            assert!(l.contains(key), "{key} in {l}");
        }
    }
    // The offered load steps from half the capacity of both servers to
    // three times it.
    let offered: Vec<f64> = ticks.iter().map(|l| Episode::num(l, "offered ")).collect();
    let max = offered.iter().copied().fold(0.0, f64::max);
    assert_eq!(max, 3.0 * 2.0 * CAPACITY, "{offered:?}");
    assert!(offered.contains(&(2.0 * CAPACITY)), "{offered:?}");
    // Every request answered, in both runs (the agent's 3002 at the
    // clients' timeout at the latest).
    for which in ["with [doic]", "without control"] {
        let s = e.summary(which);
        assert_eq!(Episode::num(s, "unanswered "), 0.0, "{s}");
    }
    // Without control the FIFO servers' wait passes the timeout at 2x and
    // 3x: goodput falls well below what they could serve of the offered
    // load (0.5, 1, 1, 1, 1, 1, 0.5 x their capacity).
    let without = e.summary("without control");
    let share = Episode::num(without, "/s (");
    assert!(share < 0.7, "collapse without control: {without}");
    let last = t.lines().last().unwrap();
    assert!(
        last.starts_with("demo: goodput with [doic] ") && last.contains("without control"),
        "{last}"
    );
}

#[test]
fn with_doic_the_episode_keeps_goodput_near_what_the_servers_can_serve() {
    let e = Episode::run();
    let with = e.summary("with [doic]");
    let share = Episode::num(with, "/s (");
    eprintln!("{with}");
    assert!(share >= 0.95, "{with}");
}
