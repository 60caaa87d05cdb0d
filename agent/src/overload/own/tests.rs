//! The own-load controller's inputs as the control thread gathers them:
//! the onset, the kernel's rates against the userspace counters, whose
//! excess passes.

use super::*;
use crate::ebpf::{Direction, PeerRate};

fn rate(peer: &str, direction: Direction, requests: f64) -> PeerRate {
    PeerRate {
        peer: peer.parse().unwrap(),
        direction,
        packets: requests,
        bytes: requests * 100.0,
        requests,
        answers: 0.0,
        syn: 0.0,
        exact: true,
    }
}

#[test]
fn only_the_excess_of_clients_that_keep_to_their_allocation_passes() {
    // Each held to 100/s and answered 400 for exceeding it since the
    // last measurement: an edge that took the report and sends 105/s
    // (what it is answered is the backlog read late), a DOIC client
    // that ignores it at 300/s, a client that receives no report.
    let client = |i: usize, host: &str, receives: bool| {
        let s = Arc::new(PeerSlot::new(host, "example.org", None));
        let l = &s.own_limit;
        l.active.store(true, Ordering::Relaxed);
        l.allocated.store(100, Ordering::Relaxed);
        l.receives.store(receives, Ordering::Relaxed);
        l.throttled.store(500, Ordering::Relaxed);
        (i, s)
    };
    let all = vec![
        client(0, "edge.example.org", true),
        client(1, "ignores.example.org", true),
        client(2, "plain.example.org", false),
    ];
    let rates: Vec<(String, f64)> = [
        ("edge.example.org", 105.0),
        ("ignores.example.org", 300.0),
        ("plain.example.org", 300.0),
    ]
    .map(|(h, r)| (h.to_owned(), r))
    .into();
    let now: BTreeMap<String, u64> = all.iter().map(|(_, s)| (s.host.clone(), 500)).collect();
    let before: BTreeMap<String, u64> = all.iter().map(|(_, s)| (s.host.clone(), 100)).collect();
    assert_eq!(passing(&all, &rates, &now, &before), 400);
    // At 111/s the edge is above its allocation beyond the tolerance:
    // its excess stays charged to the relayed requests.
    let mut above = rates.clone();
    above[0].1 = 111.0;
    assert_eq!(passing(&all, &above, &now, &before), 0);
}

#[test]
fn a_backlog_of_an_onset_measures_at_once_until_the_overload_is_found() {
    let ov = Overload::new("agent.example.com", Some(doic::DoicConfig::default()), 1).unwrap();
    // The quota's own pauses (49 ms in 1 ms per 50 ms) are no onset.
    assert!(!onset(&ov, Duration::from_millis(49)));
    assert!(onset(&ov, ONSET_BACKLOG));
    // Found overloaded (two measurements with the worker saturated and
    // work waiting): the measurements are once a second again.
    let rates = vec![("c1".to_owned(), 5000.0)];
    let t0 = Instant::now();
    {
        let mut guard = ov.own.controller.lock().unwrap();
        let ctl = guard.as_mut().unwrap();
        for s in 1..=2 {
            ctl.load.handle_load(
                t0 + Duration::from_secs(s),
                Inputs {
                    rates: &rates,
                    utilisation: &[1.0],
                    queue_delay: Duration::from_millis(500),
                    relayed: Some(1000.0),
                    ..Inputs::default()
                },
            );
        }
        assert!(ctl.load.estimator().is_overloaded());
    }
    assert!(!onset(&ov, Duration::from_secs(5)));
}

fn slot(host: &str, remote: Option<&str>, requests_in: u64) -> SlotCount {
    SlotCount {
        host: host.into(),
        remote: remote.map(|r| r.parse().unwrap()),
        requests_in,
    }
}

#[test]
fn the_kernel_rate_of_the_connection_wins_else_the_userspace_counter() {
    let t0 = Instant::now();
    let t1 = t0 + Duration::from_secs(2);
    let last = (
        t0,
        BTreeMap::from([("c1".to_owned(), 100), ("c2".to_owned(), 100)]),
    );
    let kernel = KernelLoad {
        at: Some(t1),
        rates: vec![
            rate("127.0.0.1:40001", Direction::FromPeer, 900.0),
            rate("127.0.0.1:40001", Direction::ToPeer, 5.0),
            rate("127.0.0.1:3868", Direction::FromPeer, 1.0),
        ],
    };
    let slots = [
        slot("c1", Some("127.0.0.1:40001"), 1100),
        slot("c2", Some("127.0.0.1:40002"), 700),
        slot("c3", None, 50),
    ];
    let m = measure(&slots, Some(&kernel), Some(&last), t1);
    // c1: the kernel saw its connection: its requests from the peer.
    assert_eq!(
        m["c1"],
        PeerLoad {
            rate: 900.0,
            source: Source::Kernel
        }
    );
    // c2: nothing from the kernel for its address: (700 - 100) / 2 s.
    assert_eq!(
        m["c2"],
        PeerLoad {
            rate: 300.0,
            source: Source::Userspace
        }
    );
    // c3: new since the last reading: all of its count.
    assert_eq!(m["c3"].rate, 25.0);
    // Without the program: userspace for every peer.
    let m = measure(&slots, None, Some(&last), t1);
    assert_eq!(m["c1"].source, Source::Userspace);
    assert_eq!(m["c1"].rate, 500.0);
    // A kernel count below what the agent read missed requests: the
    // userspace count.
    let low = KernelLoad {
        at: Some(t1),
        rates: vec![rate("127.0.0.1:40001", Direction::FromPeer, 10.0)],
    };
    let m = measure(&slots, Some(&low), Some(&last), t1);
    assert_eq!(
        m["c1"],
        PeerLoad {
            rate: 500.0,
            source: Source::Userspace
        }
    );
    // A userspace count a little above the kernel's is the two counts'
    // different moments, not a miss: the kernel's ((1100 - 100) / 2 s =
    // 500 read, 490 arrived).
    let close = KernelLoad {
        at: Some(t1),
        rates: vec![rate("127.0.0.1:40001", Direction::FromPeer, 490.0)],
    };
    let m = measure(&slots, Some(&close), Some(&last), t1);
    assert_eq!(
        m["c1"],
        PeerLoad {
            rate: 490.0,
            source: Source::Kernel
        }
    );
    // No earlier reading and no kernel: nothing to say yet.
    assert!(measure(&slots, None, None, t1).is_empty());
    // The kernel could not count c1 exactly in the interval (a segment
    // out of sequence, say): its own count for c1, the kernel's for none.
    let mut inexact = kernel.clone();
    inexact.rates[0].exact = false;
    let m = measure(&slots, Some(&inexact), Some(&last), t1);
    assert_eq!(
        m["c1"],
        PeerLoad {
            rate: 500.0,
            source: Source::Userspace
        }
    );
}

/// An interval with work in it that is not load (the kernel program's
/// load and verification in the agent's CPU share) is not measured: after
/// [`restart`] the next measurement takes its counts as the start, and the
/// one after it measures the requests from there, not the ones before.
#[test]
fn a_restart_leaves_the_interval_before_it_unmeasured() {
    use std::path::Path;

    use crate::config::{Config, DEMO_CONFIG};
    use crate::peer::table::PeerTable;
    use crate::telemetry::Kernel;

    let text = format!("{DEMO_CONFIG}[doic]\n");
    let config = Config::from_str_named(&text, Path::new("t.toml")).unwrap();
    let table = PeerTable::from_config(&config);
    let kernel = Kernel::default();
    let ov = Overload::new("agent.example.com", config.doic.clone(), 1).unwrap();
    let (_, slot) = table.all().into_iter().next().unwrap();
    let t0 = Instant::now();
    let at = |s: u64| t0 + Duration::from_secs(s);
    let tick = |s: u64| control_tick(&table, &kernel, &ov, at(s), &[0.5], None);
    tick(0);
    // 3,000 requests in the second of the restart: not a rate of 3,000/s.
    slot.stats.requests_in.fetch_add(3_000, Ordering::Relaxed);
    restart(&ov);
    tick(1);
    assert!(ov.own.view().peers.is_empty(), "nothing measured");
    slot.stats.requests_in.fetch_add(500, Ordering::Relaxed);
    tick(2);
    let view = ov.own.view();
    assert_eq!(view.total, 500.0, "{view:?}");
    // Without the restart the same counts read 3,000/s then 500/s.
    let ov = Overload::new("agent.example.com", config.doic.clone(), 1).unwrap();
    let tick = |s: u64| control_tick(&table, &kernel, &ov, at(s), &[0.5], None);
    tick(2);
    slot.stats.requests_in.fetch_add(3_000, Ordering::Relaxed);
    tick(3);
    assert_eq!(ov.own.view().total, 3_000.0);
}
