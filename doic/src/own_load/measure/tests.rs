//! The own-overload controller driven by measurement, on a simulated clock
//! and a simulated machine: each relayed request costs `cost` seconds of a
//! worker, each request the agent answers itself `cost / 10` (unless a
//! test says otherwise); the agent
//! holds each peer to its allocation while it reports (RFC 8582 §6.1, the
//! enforcement of `agent::overload::own`), so the next measurement sees
//! what that allocation did to the machine.

use std::time::{Duration, Instant};

use super::super::{OwnLoad, OwnLoadParams};
use super::{CpuUse, Estimator, EstimatorParams, Inputs};

const ME: &str = "agent.example.com";
const WORKERS: usize = 2;

/// A machine of `WORKERS` workers and the controller that protects it.
struct Sim {
    ctl: OwnLoad,
    now: Instant,
    /// Seconds of one worker per relayed request.
    cost: f64,
    /// Deterministic noise on each measured utilisation (relative, +-).
    noise: f64,
    seed: u64,
    /// What the last second looked like.
    utilisation: f64,
    delay: Duration,
    relayed: f64,
    /// How many times the reporting state changed.
    toggles: u32,
    /// A queue delay the host adds whatever the load (other tenants).
    host_delay: Duration,
    /// What an answer costs as a share of a relayed request.
    answer_share: f64,
}

impl Sim {
    fn new(params: OwnLoadParams, cost: f64) -> Self {
        let now = Instant::now();
        Self {
            ctl: OwnLoad::new(ME, params, now, 1_700_000_000_000),
            now,
            cost,
            noise: 0.0,
            seed: 0x2545_f491_4f6c_dd1d,
            utilisation: 0.0,
            delay: Duration::ZERO,
            relayed: 0.0,
            toggles: 0,
            host_delay: Duration::ZERO,
            answer_share: 0.1,
        }
    }

    /// A uniform value in -1..1 (xorshift).
    fn jitter(&mut self) -> f64 {
        self.seed ^= self.seed << 13;
        self.seed ^= self.seed >> 7;
        self.seed ^= self.seed << 17;
        #[expect(clippy::cast_precision_loss, reason = "a fraction")]
        let f = (self.seed >> 11) as f64 / (1u64 << 53) as f64;
        f * 2.0 - 1.0
    }

    /// One second with `offered` requests per second from each peer. The
    /// workers read what arrives, in order, as fast as they can; each
    /// peer's allocation passes at most its rate of what they read (the
    /// enforcement's bucket), the rest is answered.
    fn second(&mut self, offered: &[(&str, f64)]) {
        let reporting = self.ctl.is_reporting();
        let allocations: Vec<Option<f64>> = offered
            .iter()
            .map(|(peer, _)| {
                self.ctl
                    .allocation(peer)
                    .filter(|_| reporting)
                    .map(f64::from)
            })
            .collect();
        // Relayed and answered when a share `f` of the arrivals is read.
        let handled = |f: f64| {
            offered
                .iter()
                .zip(&allocations)
                .fold((0.0, 0.0), |(r, a), ((_, rate), alloc)| {
                    let read = f * rate;
                    let pass = alloc.map_or(read, |al| read.min(al));
                    (r + pass, a + read - pass)
                })
        };
        let factor = 1.0 + self.noise * self.jitter();
        #[expect(clippy::cast_precision_loss, reason = "a count")]
        let work = |(r, a): (f64, f64)| {
            factor * (r * self.cost + a * self.cost * self.answer_share) / WORKERS as f64
        };
        let all = work(handled(1.0));
        // A saturated worker reads what it can; the rest waits.
        let f = if all <= 1.0 {
            1.0
        } else {
            let (mut lo, mut hi) = (0.0, 1.0);
            for _ in 0..60 {
                let mid = f64::midpoint(lo, hi);
                if work(handled(mid)) <= 1.0 {
                    lo = mid;
                } else {
                    hi = mid;
                }
            }
            lo
        };
        let (relayed, answered) = handled(f);
        self.utilisation = all.min(1.0);
        self.relayed = relayed;
        self.delay = if all > 1.0 {
            Duration::from_millis(200)
        } else {
            Duration::from_micros(200)
        }
        .max(self.host_delay);
        let rates: Vec<(String, f64)> =
            offered.iter().map(|(p, r)| ((*p).to_owned(), *r)).collect();
        let utilisation = [self.utilisation; WORKERS];
        self.now += Duration::from_secs(1);
        self.ctl.handle_load(
            self.now,
            Inputs {
                rates: &rates,
                utilisation: &utilisation,
                queue_delay: self.delay,
                pending: 0,
                relayed: Some(self.relayed),
                // Its clients receive no reports: their excess stays.
                answered_reacting: 0.0,
                answered,
                left: &[],
                cpu: None,
            },
        );
        if self.ctl.is_reporting() != reporting {
            self.toggles += 1;
        }
    }

    fn run(&mut self, seconds: u32, offered: &[(&str, f64)]) {
        for _ in 0..seconds {
            self.second(offered);
        }
    }

    fn allocated(&self, peers: &[&str]) -> u32 {
        peers.iter().filter_map(|p| self.ctl.allocation(p)).sum()
    }
}

/// 1 ms per request on each of two workers: 2,000 requests/s saturate it,
/// 1,600/s is its 80 % target.
const COST: f64 = 0.001;
const PEERS: [&str; 2] = ["c1.example.org", "c2.example.org"];

fn both(rate: f64) -> [(&'static str, f64); 2] {
    [(PEERS[0], rate), (PEERS[1], rate)]
}

#[test]
fn a_machine_that_becomes_slower_finds_itself_overloaded_and_its_new_capacity() {
    let mut sim = Sim::new(OwnLoadParams::measured(), COST);
    // 1,200/s on a machine for 2,000/s: 60 % busy, nothing to report.
    sim.run(20, &both(600.0));
    assert!(!sim.ctl.is_reporting());
    assert!(!sim.ctl.estimator().is_overloaded());
    assert!((sim.utilisation - 0.6).abs() < 1e-9);
    // The machine becomes twice as slow (another tenant, a smaller VM):
    // the same 1,200/s now needs 120 % of it.
    sim.cost = 2.0 * COST;
    sim.run(2, &both(600.0));
    assert!(sim.ctl.is_reporting(), "overloaded after two measurements");
    // Held to its allocations, the machine leaves saturation and settles
    // at the target utilisation, without queueing.
    sim.run(20, &both(600.0));
    let capacity = assert_settled(&sim);
    // The allocations use all of it.
    assert_eq!(f64::from(sim.allocated(&PEERS)), capacity);
    #[expect(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let capacity = capacity as u32;
    // Half as fast as at the start: its capacity at 80 % is below the
    // 800/s it relays at 80 % with no throttling work at all.
    assert!((700..=800).contains(&capacity), "{capacity}");
    assert_eq!(sim.toggles, 1);
}

/// Settled: the busiest worker at the target utilisation (80 %), no
/// queueing, and the capacity is what the agent relays.
fn assert_settled(sim: &Sim) -> f64 {
    assert!(
        (0.75..=0.85).contains(&sim.utilisation),
        "{}",
        sim.utilisation
    );
    assert!(sim.delay < Duration::from_millis(1));
    let capacity = f64::from(sim.ctl.capacity().expect("overloaded"));
    assert!(
        (capacity - sim.relayed).abs() <= 0.05 * sim.relayed,
        "{capacity} vs {}",
        sim.relayed
    );
    capacity
}

#[test]
fn the_capacity_follows_a_step_in_the_cost_of_a_request() {
    let mut sim = Sim::new(OwnLoadParams::measured(), COST);
    sim.run(30, &both(3000.0));
    let fast = assert_settled(&sim);
    sim.cost = 2.0 * COST;
    sim.run(30, &both(3000.0));
    let slow = assert_settled(&sim);
    // Twice the cost per request, relayed or answered: less than half the
    // capacity (answering the excess costs twice as much too).
    assert!(slow < 0.5 * fast, "{fast} -> {slow}");
    // And back.
    sim.cost = COST;
    sim.run(30, &both(3000.0));
    let again = assert_settled(&sim);
    assert!((again / fast - 1.0).abs() < 0.03, "{fast} -> {again}");
    assert_eq!(sim.toggles, 1, "never ended in between");
}

#[test]
fn answers_as_dear_as_relays_to_clients_that_keep_sending_do_not_shrink_the_capacity() {
    // Held to a small CPU share, each wake-up's cost dominates and an
    // answer costs what a relay does (docs/own-overload.md). Clients that
    // ignore the reports, at three times the machine: it is saturated
    // whatever it relays, and every request it does not relay it answers
    // at the same cost. Charging those answers to the relayed requests
    // would shrink the capacity by the target's fifth each second, to
    // nothing; relaying fewer did not relieve the machine, so it stops.
    let mut sim = Sim::new(OwnLoadParams::measured(), COST);
    sim.answer_share = 1.0;
    sim.run(5, &both(500.0));
    assert!(!sim.ctl.is_reporting());
    sim.run(30, &both(3000.0));
    assert!(sim.ctl.is_reporting());
    let capacity = f64::from(sim.ctl.capacity().expect("overloaded"));
    // 2,000/s saturate the machine, relayed or answered.
    assert!((1000.0..=2000.0).contains(&capacity), "{capacity}");
    assert!(
        sim.relayed >= 0.9 * capacity,
        "{} of {capacity}",
        sim.relayed
    );
    // Load falls back: the machine leaves saturation, the reports end.
    sim.run(20, &both(300.0));
    assert!(!sim.ctl.is_reporting());
    assert_eq!(sim.toggles, 2);
}

#[test]
fn load_steps_start_then_end_the_reports_and_the_machine_recovers() {
    let mut sim = Sim::new(OwnLoadParams::measured(), COST);
    sim.run(10, &both(500.0));
    assert!(!sim.ctl.is_reporting());
    // 3x the machine: reports within two measurements.
    sim.run(2, &both(3000.0));
    assert!(sim.ctl.is_reporting());
    sim.run(20, &both(3000.0));
    assert!(sim.utilisation <= 0.85, "{}", sim.utilisation);
    assert!(sim.delay < Duration::from_millis(1));
    // Load falls to a quarter of the machine: below 70 % for 3
    // measurements, then below 80 % of the capacity for 2 s (RFC 7683
    // §5.2.3: the reports end with validity 0).
    sim.run(3, &both(250.0));
    assert!(!sim.ctl.estimator().is_overloaded());
    sim.run(3, &both(250.0));
    assert!(!sim.ctl.is_reporting());
    assert!(sim.ctl.reports().all(super::super::OwnReport::is_end));
    assert_eq!(sim.toggles, 2);
}

#[test]
fn configured_capacity_bounds_the_measured_one() {
    let mut sim = Sim::new(OwnLoadParams::new(500), COST);
    // 1,000/s: 50 % of the machine, twice the configured capacity.
    sim.run(5, &both(500.0));
    assert!(sim.ctl.is_reporting());
    assert!(!sim.ctl.estimator().is_overloaded());
    assert_eq!(sim.ctl.capacity(), Some(500));
    assert_eq!(sim.allocated(&PEERS), 500);
    // Held to 500/s the machine is at 30 %: the configured bound decides.
    sim.run(30, &both(3000.0));
    assert!(!sim.ctl.estimator().is_overloaded());
    assert_eq!(sim.ctl.capacity(), Some(500));
    // A machine five times slower cannot take even that: the measured
    // capacity, smaller, applies.
    sim.cost = 5.0 * COST;
    sim.run(30, &both(500.0));
    assert!(sim.ctl.estimator().is_overloaded());
    let capacity = assert_settled(&sim);
    assert!(capacity < 500.0, "{capacity}");
    assert_eq!(f64::from(sim.allocated(&PEERS)), capacity);
}

#[test]
fn noise_between_the_thresholds_never_flaps() {
    // 80 % busy +- 8 %: between 70 % and 90 % the decision stays.
    let mut sim = Sim::new(OwnLoadParams::measured(), COST);
    sim.noise = 0.08;
    sim.run(600, &both(800.0));
    assert_eq!(sim.toggles, 0);
    assert!(!sim.ctl.estimator().is_overloaded());
    // Overloaded at 3x with the same noise: it enters once and stays.
    let mut sim = Sim::new(OwnLoadParams::measured(), COST);
    sim.noise = 0.08;
    sim.run(600, &both(3000.0));
    assert_eq!(sim.toggles, 1);
    assert!(sim.ctl.estimator().is_overloaded());
}

#[test]
fn a_short_spike_is_not_overload() {
    let mut sim = Sim::new(OwnLoadParams::measured(), COST);
    sim.run(5, &both(500.0));
    // One second at 3x, then back: fewer than `enter_after` measurements.
    sim.run(1, &both(3000.0));
    sim.run(10, &both(500.0));
    assert_eq!(sim.toggles, 0);
}

#[test]
fn queue_delay_counts_only_with_busy_workers() {
    // A host that delays every worker by 50 ms while they are 10 % busy:
    // the agent's load is not the cause; nothing to report.
    let mut sim = Sim::new(OwnLoadParams::measured(), COST);
    sim.host_delay = Duration::from_millis(50);
    sim.run(30, &both(100.0));
    assert!(!sim.ctl.estimator().is_overloaded());
    // The same delay with workers 80 % busy (below the 90 % utilisation
    // threshold): overloaded by its queue delay, and the agent holds its
    // clients until its workers are no busier than the low threshold.
    sim.run(2, &both(800.0));
    assert!(sim.ctl.estimator().is_overloaded());
    sim.run(1, &both(800.0));
    assert!(sim.ctl.is_reporting());
    sim.run(30, &both(800.0));
    assert!(sim.ctl.is_reporting());
    assert!(sim.utilisation <= 0.75, "{}", sim.utilisation);
    assert_eq!(sim.toggles, 1);
}

#[test]
fn a_near_idle_reading_while_overloaded_grows_the_capacity_boundedly() {
    let mut e = Estimator::new(EstimatorParams::default());
    let rates = vec![("c1".to_owned(), 3000.0)];
    let reading = |utilisation: &'static [f64]| Inputs {
        rates: &rates,
        utilisation,
        relayed: Some(1000.0),
        ..Inputs::default()
    };
    for _ in 0..3 {
        e.handle_load(&reading(&[1.0]));
    }
    assert!(e.is_overloaded());
    // A worker held off the CPU (a cgroup quota) reads as almost idle: it
    // counts as at `min_utilisation` (30 %), not as a thousand times the
    // capacity.
    e.handle_load(&reading(&[0.001]));
    let grown = e.estimate().expect("measured");
    assert!(grown <= 1000.0 * 0.8 / 0.3, "{grown}");
    assert!(grown > 800.0, "it grows back: {grown}");
}

#[test]
fn a_saturated_worker_that_keeps_up_is_not_overloaded() {
    // A closed-loop client keeps every worker busy: 100 % utilisation,
    // nothing waiting, every arrival relayed. Well used, not overloaded.
    let mut e = Estimator::new(EstimatorParams::default());
    let rates = vec![("c1".to_owned(), 1000.0)];
    for _ in 0..10 {
        e.handle_load(&saturated(&rates, 1000.0));
    }
    assert!(!e.is_overloaded());
    // The same workers with requests arriving 20 % faster than they are
    // relayed: they fall behind, which is overload.
    let faster = vec![("c1".to_owned(), 1200.0)];
    for _ in 0..2 {
        e.handle_load(&saturated(&faster, 1000.0));
    }
    assert!(e.is_overloaded());
}

#[test]
fn a_drain_of_answers_to_clients_that_react_keeps_the_capacity() {
    // The onset behind an edge that reacts to the agent's reports (RFC
    // 8581 §6.2.5, the agent chain): the report made the edge abate, and
    // what it sent before waits in the sockets, read and answered 3004 for
    // exceeding its allocation, thousands a second, while the agent
    // relays a few hundred.
    let drain = |reacting: f64| {
        let mut e = Estimator::new(EstimatorParams::default());
        let rates = vec![("edge.example.org".to_owned(), 20_000.0)];
        // Saturated, 2,000/s relayed and ten times that arriving: 1,600/s
        // at 80 %.
        for _ in 0..3 {
            e.handle_load(&Inputs {
                queue_delay: Duration::from_millis(500),
                ..saturated(&rates, 2000.0)
            });
        }
        assert!(e.is_overloaded());
        // Five seconds of the drain: 200/s relayed, 3,600/s answered (half
        // a relayed request's CPU each: the saturated worker's 2,000).
        for _ in 0..5 {
            e.handle_load(&Inputs {
                queue_delay: Duration::from_millis(500),
                answered_reacting: reacting,
                ..saturated(&rates, 200.0)
            });
        }
        e.estimate().expect("measured")
    };
    // The answers to a client that reacts count at their cost: the
    // capacity stays (200 + 0.5 x 3,600) x 0.8 = 1,600/s.
    let kept = drain(3600.0);
    assert!((kept - 1600.0).abs() < 1.0, "{kept}");
    // Charged to the 200/s relayed, as for clients that receive no report,
    // it falls towards 160/s within the drain and the edge would be held
    // there long after.
    let charged = drain(0.0);
    assert!(charged < 250.0, "{charged}");
}

/// Both workers fully busy, nothing waiting, `relayed` per second relayed.
fn saturated(rates: &[(String, f64)], relayed: f64) -> Inputs<'_> {
    Inputs {
        rates,
        utilisation: &[1.0, 1.0],
        relayed: Some(relayed),
        ..Inputs::default()
    }
}

/// One worker held to `quota` of one CPU by a cgroup (period 100 ms), as
/// the agent's control thread sees it: the runtime's busy share reads 0
/// (a worker that never parks submits none), the kernel's per-peer counts
/// are absent, so the arrival rates are the requests read; what the
/// kernel accounts (the thread's CPU time, the throttled periods) and the
/// bytes waiting unread in the sockets (the queue delay: backlog over the
/// rate it is read) are what there is. Each relayed request costs `cost`
/// of CPU, each request the agent answers itself for exceeding an
/// allocation `cost / 10`; requests the worker does not get to wait in
/// the sockets, in order.
struct QuotaSim {
    ctl: OwnLoad,
    now: Instant,
    quota: f64,
    cost: f64,
    /// Requests waiting unread.
    backlog: f64,
    /// Relayed in the last second.
    relayed: f64,
    delay: Duration,
    toggles: u32,
    /// Seconds simulated.
    t: u32,
    /// When the estimator first found overload.
    found_at: Option<u32>,
}

/// The period of the cgroup's quota.
const PERIOD: Duration = Duration::from_millis(100);

impl QuotaSim {
    fn new(quota: f64, cost: f64) -> Self {
        let now = Instant::now();
        Self {
            ctl: OwnLoad::new(ME, OwnLoadParams::measured(), now, 1_700_000_000_000),
            now,
            quota,
            cost,
            backlog: 0.0,
            relayed: 0.0,
            delay: Duration::ZERO,
            toggles: 0,
            t: 0,
            found_at: None,
        }
    }

    /// The requests per second the quota relays with nothing throttled.
    fn capacity(&self) -> f64 {
        self.quota / self.cost
    }

    fn second(&mut self, offered: &[(&str, f64)]) {
        let reporting = self.ctl.is_reporting();
        let arriving: f64 = offered.iter().map(|(_, r)| r).sum();
        let admitted: f64 = offered
            .iter()
            .map(|(p, r)| match self.ctl.allocation(p) {
                Some(a) if reporting => r.min(f64::from(a)),
                _ => *r,
            })
            .sum();
        let kept = if arriving > 0.0 {
            admitted / arriving
        } else {
            1.0
        };
        let mean_cost = self.cost * (kept + (1.0 - kept) / 10.0);
        let queue = self.backlog + arriving;
        let read = queue.min(self.quota / mean_cost);
        self.backlog = queue - read;
        let cpu = read * mean_cost;
        let saturated = cpu >= 0.99 * self.quota;
        self.relayed = read * kept;
        // The queue delay the agent measures: the backlog at the rate it is
        // read, and with the quota spent, the rest of a period the worker
        // waits for the next one.
        let pause = if saturated {
            PERIOD.mul_f64(1.0 - self.quota)
        } else {
            Duration::from_micros(200)
        };
        let backlog = if read > 0.0 {
            Duration::from_secs_f64((self.backlog / read).min(10.0))
        } else {
            Duration::from_secs(1)
        };
        self.delay = pause.max(backlog);
        let share = if arriving > 0.0 { read / arriving } else { 0.0 };
        let rates: Vec<(String, f64)> = offered
            .iter()
            .map(|(p, r)| ((*p).to_owned(), r * share))
            .collect();
        let workers = [Duration::from_secs_f64(cpu)];
        self.now += Duration::from_secs(1);
        self.t += 1;
        self.ctl.handle_load(
            self.now,
            Inputs {
                rates: &rates,
                // The runtime's busy time of a worker that never parks.
                utilisation: &[0.0],
                cpu: Some(CpuUse {
                    interval: Duration::from_secs(1),
                    workers: &workers,
                    process: Some(Duration::from_secs_f64(cpu * 1.02)),
                    quota: Some(self.quota),
                    throttled: Some(if saturated { 1.0 } else { 0.0 }),
                }),
                queue_delay: self.delay,
                pending: 0,
                relayed: Some(self.relayed),
                answered_reacting: 0.0,
                answered: read * (1.0 - kept),
                left: &[],
            },
        );
        if self.ctl.estimator().is_overloaded() && self.found_at.is_none() {
            self.found_at = Some(self.t);
        }
        if self.ctl.is_reporting() != reporting {
            self.toggles += 1;
        }
    }

    fn run(&mut self, seconds: u32, offered: &[(&str, f64)]) {
        for _ in 0..seconds {
            self.second(offered);
        }
    }
}

/// 20 µs of CPU per relayed request in 0.1 CPU: 5,000 requests/s.
const QUOTA: f64 = 0.1;
const QUOTA_COST: f64 = 20e-6;

#[test]
fn cpu_use_is_measured_against_the_quota() {
    let one = [Duration::from_millis(100)];
    let cpu = CpuUse {
        interval: Duration::from_secs(1),
        workers: &one,
        quota: Some(0.1),
        ..CpuUse::default()
    };
    // 0.1 s of CPU in a second is all 0.1 CPU allows.
    assert!((cpu.utilisation() - 1.0).abs() < 1e-9);
    // Without a limit, 10 % of the wall clock.
    let free = CpuUse { quota: None, ..cpu };
    assert!((free.utilisation() - 0.1).abs() < 1e-9);
    // Two workers sharing the quota: each reads half, the process all.
    let two = [Duration::from_millis(50); 2];
    let shared = CpuUse {
        workers: &two,
        process: Some(Duration::from_millis(100)),
        ..cpu
    };
    assert!((shared.utilisation() - 1.0).abs() < 1e-9);
    assert_eq!(CpuUse::default().utilisation(), 0.0);
}

#[test]
fn a_saturated_worker_in_a_tenth_of_a_cpu_finds_its_overload_within_two_seconds() {
    let mut sim = QuotaSim::new(QUOTA, QUOTA_COST);
    let c = sim.capacity();
    // Half the capacity: 50 % of the quota, no backlog, nothing found.
    sim.run(10, &both(c / 4.0));
    assert!(!sim.ctl.estimator().is_overloaded());
    assert!((sim.ctl.estimator().utilisation() - 0.5).abs() < 0.01);
    // 2x: every input the worker would publish itself reads 0 (busy share
    // 0, rates capped at what it reads), yet its CPU time against the
    // quota and the backlog find it within `enter_after` measurements.
    sim.run(2, &both(c));
    assert_eq!(sim.found_at, Some(12), "found in the second measurement");
    sim.run(1, &both(c));
    assert!(sim.ctl.is_reporting());
    // The capacity measured is what the quota relays at the target
    // utilisation, near 80 % of C.
    let capacity = f64::from(sim.ctl.capacity().expect("overloaded"));
    assert!((0.6 * c..=0.9 * c).contains(&capacity), "{capacity} of {c}");
    // Held to it, the backlog stops growing and drains: what the sockets
    // held is read within a few seconds and the queue delay falls to the
    // quota's own pause.
    sim.run(20, &both(c));
    assert!(sim.backlog < 0.05 * c, "backlog {}", sim.backlog);
    assert!(sim.relayed >= 0.6 * c, "goodput {} of {c}", sim.relayed);
    assert_eq!(sim.toggles, 1);
}

#[test]
fn the_same_worker_with_only_the_runtime_s_busy_share_finds_nothing() {
    // What the agent measured before: busy share 0, no queue delay from a
    // tick that never ran: 2x for 10 s and nothing found.
    let mut e = Estimator::new(EstimatorParams::default());
    let rates = vec![("c1".to_owned(), 5000.0)];
    for _ in 0..10 {
        e.handle_load(&Inputs {
            rates: &rates,
            utilisation: &[0.0],
            relayed: Some(5000.0),
            ..Inputs::default()
        });
    }
    assert!(!e.is_overloaded());
    // The same second with the thread's CPU time against the quota and the
    // delay of the backlog: found.
    let one = [Duration::from_millis(100)];
    for _ in 0..2 {
        e.handle_load(&Inputs {
            rates: &rates,
            utilisation: &[0.0],
            cpu: Some(CpuUse {
                interval: Duration::from_secs(1),
                workers: &one,
                quota: Some(0.1),
                ..CpuUse::default()
            }),
            queue_delay: Duration::from_millis(500),
            relayed: Some(5000.0),
            ..Inputs::default()
        });
    }
    assert!(e.is_overloaded());
}

#[test]
fn an_idle_worker_in_a_tenth_of_a_cpu_is_never_overloaded() {
    let mut sim = QuotaSim::new(QUOTA, QUOTA_COST);
    let c = sim.capacity();
    // 30 % of the quota for a minute, with a 1 % of C step now and then.
    for i in 0..60 {
        let r = if i % 7 == 0 { 0.16 * c } else { 0.15 * c };
        sim.second(&both(r));
    }
    assert_eq!(sim.found_at, None);
    assert_eq!(sim.toggles, 0);
    assert!(sim.ctl.estimator().utilisation() < 0.4);
}

#[test]
fn recovery_ends_the_overload_after_the_hysteresis_and_only_once() {
    let mut sim = QuotaSim::new(QUOTA, QUOTA_COST);
    let c = sim.capacity();
    sim.run(20, &both(c));
    assert!(sim.ctl.is_reporting());
    // The load falls to 20 % of C: the estimator needs `leave_after` (3)
    // measurements below every low threshold, the reports then `end_after`
    // (2 s) below 80 % of the capacity.
    sim.run(2, &both(0.1 * c));
    assert!(
        sim.ctl.estimator().is_overloaded(),
        "not before 3 measurements"
    );
    assert!(sim.ctl.is_reporting());
    sim.run(8, &both(0.1 * c));
    assert!(!sim.ctl.estimator().is_overloaded());
    assert!(!sim.ctl.is_reporting());
    assert!(sim.ctl.reports().all(super::super::OwnReport::is_end));
    assert_eq!(sim.toggles, 2);
    // And it stays so.
    sim.run(30, &both(0.1 * c));
    assert_eq!(sim.toggles, 2);
}
