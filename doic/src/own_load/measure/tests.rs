//! The own-overload controller driven by measurement, on a simulated clock
//! and a simulated machine: each relayed request costs `cost` seconds of a
//! worker, each request the agent answers itself `cost / 10`; the agent
//! holds each peer to its allocation while it reports (RFC 8582 §6.1, the
//! enforcement of `agent::overload::own`), so the next measurement sees
//! what that allocation did to the machine.

use std::time::{Duration, Instant};

use super::super::{OwnLoad, OwnLoadParams};
use super::{Estimator, EstimatorParams, Inputs};

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

    /// One second with `offered` requests per second from each peer.
    fn second(&mut self, offered: &[(&str, f64)]) {
        let reporting = self.ctl.is_reporting();
        let (mut relayed, mut answered) = (0.0, 0.0);
        for (peer, rate) in offered {
            let admitted = match self.ctl.allocation(peer) {
                Some(a) if reporting => rate.min(f64::from(a)),
                _ => *rate,
            };
            relayed += admitted;
            answered += rate - admitted;
        }
        #[expect(clippy::cast_precision_loss, reason = "a count")]
        let work = (relayed * self.cost + answered * self.cost / 10.0) / WORKERS as f64;
        let work = work * (1.0 + self.noise * self.jitter());
        // A saturated worker relays what it can; the rest waits.
        let share = (1.0 / work).min(1.0);
        self.utilisation = work.min(1.0);
        self.relayed = relayed * share;
        self.delay = if work > 1.0 {
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
                left: &[],
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

/// Both workers fully busy, nothing waiting, `relayed` per second relayed.
fn saturated(rates: &[(String, f64)], relayed: f64) -> Inputs<'_> {
    Inputs {
        rates,
        utilisation: &[1.0, 1.0],
        relayed: Some(relayed),
        ..Inputs::default()
    }
}
