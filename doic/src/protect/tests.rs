//! The estimator against simulated servers on a simulated clock (1 ms steps):
//! a FIFO server that serves C requests/s and queues the rest (latency grows
//! without bound when overloaded), and one that answers 3004 above C per
//! tenth of a second (as `tools::loadgen`'s capacity does). In front of the
//! server, the agent's gate is the shared rate bucket of [`crate::rate`] at
//! the estimator's limit; clients send in bursts of 8.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use super::*;
use crate::rate::{Priority, RateControl, RateParams};

const C: f64 = 500.0;
const BASE: Duration = Duration::from_millis(1);
const CLIENT_TIMEOUT: Duration = Duration::from_secs(2);
const AGENT_TIMEOUT: Duration = Duration::from_secs(4);
const TICK_MS: u64 = 100;
const BURST: f64 = 8.0;

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Fifo,
    Rejecting,
}

/// What one simulated second showed.
#[derive(Clone, Copy, Debug, Default)]
struct Second {
    offered: u64,
    admitted: u64,
    throttled: u64,
    busy: u64,
    timeouts: u64,
    /// 2001 answers within the client timeout.
    goodput: u64,
    max_latency: Duration,
    limit: Option<u32>,
}

struct Sim {
    kind: Kind,
    origin: Instant,
    est: Estimator,
    gate: Option<RateControl>,
    queue: VecDeque<Duration>,
    credit: f64,
    tenth: (u64, f64),
    /// (answer time, sent, outcome), in answer-time order.
    inflight: VecDeque<(Duration, Duration, Outcome)>,
    arrivals: f64,
    tick_offered: u64,
    tick_throttled: u64,
    seconds: Vec<Second>,
    features: bool,
    offered_total: u64,
    answered_total: u64,
}

impl Sim {
    fn new(kind: Kind) -> Self {
        // A reproducible bucket phase (RFC 8582 §8.3.3 randomises it).
        crate::bucket::seed_thread_rng(0x5eed);
        Self {
            kind,
            origin: Instant::now(),
            est: Estimator::new(ProtectParams::default(), Mode::Auto),
            gate: None,
            queue: VecDeque::new(),
            credit: 0.0,
            tenth: (0, 0.0),
            inflight: VecDeque::new(),
            arrivals: 0.0,
            tick_offered: 0,
            tick_throttled: 0,
            seconds: Vec::new(),
            features: false,
            offered_total: 0,
            answered_total: 0,
        }
    }

    /// Runs `secs` seconds with offered load and capacity as functions of the
    /// time in seconds.
    fn run(&mut self, secs: u64, offered: impl Fn(f64) -> f64, capacity: impl Fn(f64) -> f64) {
        let start_ms = self.seconds.len() as u64 * 1000;
        for ms in start_ms..start_ms + secs * 1000 {
            let t = Duration::from_millis(ms);
            let now = self.origin + t;
            let sec = (ms / 1000) as usize;
            if self.seconds.len() <= sec {
                self.seconds.push(Second::default());
            }
            let x = t.as_secs_f64();
            // Clients: bursts of BURST requests.
            self.arrivals += offered(x) / 1000.0 / BURST;
            while self.arrivals >= 1.0 {
                self.arrivals -= 1.0;
                for _ in 0..BURST as u32 {
                    self.arrive(now, t, sec, capacity(x));
                }
            }
            // The FIFO server serves C/s from the head of its queue.
            if self.kind == Kind::Fifo {
                self.credit += capacity(x) / 1000.0;
                while self.credit >= 1.0 {
                    let Some(sent) = self.queue.pop_front() else {
                        break;
                    };
                    self.credit -= 1.0;
                    if t + BASE - sent > AGENT_TIMEOUT {
                        self.est
                            .handle_sample(AGENT_TIMEOUT, Outcome::Timeout, false);
                        self.seconds[sec].timeouts += 1;
                        self.answered_total += 1;
                    } else {
                        self.inflight.push_back((t + BASE, sent, Outcome::Answered));
                    }
                }
                if self.queue.is_empty() {
                    self.credit = self.credit.min(1.0);
                }
            }
            while self.inflight.front().is_some_and(|a| a.0 <= t) {
                let (at, sent, outcome) = self.inflight.pop_front().unwrap();
                let latency = at - sent;
                self.est.handle_sample(latency, outcome, self.features);
                self.answered_total += 1;
                let s = &mut self.seconds[sec];
                match outcome {
                    Outcome::Answered => {
                        s.goodput += u64::from(latency <= CLIENT_TIMEOUT);
                        s.max_latency = s.max_latency.max(latency);
                    }
                    Outcome::Busy => s.busy += 1,
                    Outcome::Timeout => s.timeouts += 1,
                }
            }
            if (ms + 1) % TICK_MS == 0 {
                let load = Load {
                    outstanding: (self.queue.len() + self.inflight.len()) as u64,
                    offered: self.tick_offered,
                    throttled: self.tick_throttled,
                };
                (self.tick_offered, self.tick_throttled) = (0, 0);
                self.est.handle_tick(now, load);
                self.apply(now);
                self.seconds[sec].limit = self.est.limit();
            }
        }
    }

    fn arrive(&mut self, now: Instant, t: Duration, sec: usize, capacity: f64) {
        self.offered_total += 1;
        self.tick_offered += 1;
        self.seconds[sec].offered += 1;
        if let Some(gate) = &self.gate
            && !gate.admit(now, Priority::Normal)
        {
            // Answered by the agent at once.
            self.tick_throttled += 1;
            self.seconds[sec].throttled += 1;
            self.answered_total += 1;
            return;
        }
        self.seconds[sec].admitted += 1;
        match self.kind {
            Kind::Fifo => self.queue.push_back(t),
            Kind::Rejecting => {
                let tenth = t.as_millis() as u64 / 100;
                if self.tenth.0 != tenth {
                    self.tenth = (tenth, 0.0);
                }
                let outcome = if self.tenth.1 >= capacity / 10.0 {
                    Outcome::Busy
                } else {
                    self.tenth.1 += 1.0;
                    Outcome::Answered
                };
                self.inflight.push_back((t + BASE, t, outcome));
            }
        }
    }

    fn apply(&mut self, now: Instant) {
        match (self.est.limit(), &self.gate) {
            (None, _) => self.gate = None,
            (Some(l), Some(g)) => g.set_rate(now, l),
            (Some(l), None) => {
                let config = RateParams::default().bucket_config().unwrap();
                self.gate = Some(RateControl::new(self.origin, now, l, &config));
            }
        }
    }

    fn secs(&self, from: u64, to: u64) -> &[Second] {
        &self.seconds[from as usize..to as usize]
    }

    fn every_request_answered(&self) -> bool {
        let outstanding = (self.queue.len() + self.inflight.len()) as u64;
        self.offered_total == self.answered_total + outstanding
    }
}

/// `inside` from `from` to `to` seconds, `outside` otherwise: a step of
/// offered load or capacity.
fn step(from: f64, to: f64, inside: f64, outside: f64) -> impl Fn(f64) -> f64 {
    move |x| {
        if (from..to).contains(&x) {
            inside
        } else {
            outside
        }
    }
}

/// Admitted within [0.9 C, 1.05 C] of `cap` in every second of `s`.
fn assert_admitted_near(s: &[Second], cap: f64, what: &str) {
    for (i, x) in s.iter().enumerate() {
        let a = x.admitted as f64;
        assert!(
            (0.9 * cap..=1.05 * cap).contains(&a),
            "{what}: second {i} of the window admitted {a}, capacity {cap}: {s:?}"
        );
    }
}

/// The limit moves by at most `bound` (peak to peak) over `s`.
fn assert_no_oscillation(s: &[Second], bound: f64, what: &str) {
    let limits: Vec<f64> = s.iter().filter_map(|x| x.limit).map(f64::from).collect();
    assert_eq!(limits.len(), s.len(), "{what}: the limit lapsed: {s:?}");
    let lo = limits.iter().copied().fold(f64::MAX, f64::min);
    let hi = limits.iter().copied().fold(0.0, f64::max);
    assert!(
        hi - lo <= bound,
        "{what}: limit between {lo} and {hi}: {s:?}"
    );
}

#[test]
fn fifo_server_offered_1x_to_10x_is_held_at_capacity_with_a_short_queue() {
    for k in [1.0, 2.0, 3.0, 5.0, 10.0] {
        let mut sim = Sim::new(Kind::Fifo);
        // Half the capacity for 5 s (the baseline), then k times it.
        sim.run(35, |x| if x < 5.0 { C / 2.0 } else { k * C }, |_| C);
        let what = format!("fifo at {k}x");
        // Converged 3 s after the step.
        let steady = sim.secs(8, 35);
        if k > 1.0 {
            assert_admitted_near(steady, C, &what);
            assert_no_oscillation(steady, 0.1 * C, &what);
        }
        for (i, s) in steady.iter().enumerate() {
            assert!(
                s.goodput as f64 >= 0.95 * C.min(k * C),
                "{what}: goodput {} in second {i}: {steady:?}",
                s.goodput
            );
            // Queue delay bounded: 2 x the 3 ms baseline + 5 ms, with room
            // for one burst.
            assert!(
                s.max_latency <= Duration::from_millis(40),
                "{what}: latency {:?} in second {i}: {steady:?}",
                s.max_latency
            );
        }
        // During the transient (one tick of k x C before the first cut)
        // nothing waits half as long as the client's timeout.
        assert!(
            sim.seconds
                .iter()
                .all(|s| s.timeouts == 0 && s.max_latency < CLIENT_TIMEOUT / 2),
            "{what}: {:?}",
            sim.secs(4, 8)
        );
        assert!(sim.every_request_answered(), "{what}");
    }
}

#[test]
fn server_answering_3004_above_capacity_is_held_at_capacity() {
    for k in [2.0, 3.0, 5.0, 10.0] {
        let mut sim = Sim::new(Kind::Rejecting);
        sim.run(35, |x| if x < 5.0 { C / 2.0 } else { k * C }, |_| C);
        let what = format!("3004 server at {k}x");
        let steady = sim.secs(10, 35);
        assert_admitted_near(steady, C, &what);
        // AIMD's sawtooth: down by `backoff` on 3004, up by the probe.
        assert_no_oscillation(steady, 0.15 * C, &what);
        for s in steady {
            assert!(s.goodput as f64 >= 0.9 * C, "{what}: {steady:?}");
            assert!(s.busy as f64 <= 0.05 * C, "{what}: {steady:?}");
        }
        assert!(sim.every_request_answered(), "{what}");
    }
}

#[test]
fn a_step_in_capacity_is_followed_up_and_down() {
    let mut sim = Sim::new(Kind::Fifo);
    let capacity = step(20.0, 40.0, 2.0 * C, C);
    sim.run(60, |x| if x < 5.0 { C / 2.0 } else { 3.0 * C }, capacity);
    // Up: the probe reaches the doubled capacity within 10 s.
    assert_admitted_near(sim.secs(30, 40), 2.0 * C, "capacity doubled");
    // Down: the gradient follows within 3 s and the queue never reaches the
    // client timeout.
    assert_admitted_near(sim.secs(43, 60), C, "capacity halved");
    assert_no_oscillation(sim.secs(43, 60), 0.1 * C, "capacity halved");
    let transient = sim.secs(40, 43);
    assert!(
        transient.iter().all(|s| s.max_latency < CLIENT_TIMEOUT / 4),
        "{transient:?}"
    );
    assert!(sim.every_request_answered());
}

#[test]
fn a_step_in_offered_load_is_limited_then_released() {
    let mut sim = Sim::new(Kind::Fifo);
    let offered = step(5.0, 25.0, 5.0 * C, C / 2.0);
    sim.run(35, offered, |_| C);
    assert_admitted_near(sim.secs(8, 25), C, "5x");
    // Within 3 s of the step the goodput is back at capacity.
    assert!(sim.secs(8, 25).iter().all(|s| s.goodput as f64 >= 0.95 * C));
    // The limit is lifted within end_after (2 s) plus a second once the load
    // falls, and nothing is throttled after.
    let after = sim.secs(28, 35);
    assert!(
        after.iter().all(|s| s.limit.is_none() && s.throttled == 0),
        "{after:?}"
    );
    assert!(sim.secs(0, 5).iter().all(|s| s.limit.is_none()));
    assert!(sim.every_request_answered());
}

#[test]
fn a_server_that_stalls_then_recovers_is_probed_back_to_capacity() {
    let mut sim = Sim::new(Kind::Fifo);
    let capacity = |x: f64| if (10.0..13.0).contains(&x) { 0.0 } else { C };
    sim.run(40, |x| if x < 5.0 { C / 2.0 } else { 2.0 * C }, capacity);
    // Stalled: within a second the limit is at its floor.
    let stalled = sim.secs(11, 13);
    assert!(stalled.iter().all(|s| s.limit == Some(1)), "{stalled:?}");
    // Recovered: back at capacity within 12 s, steady after.
    assert_admitted_near(sim.secs(25, 40), C, "recovered");
    assert_no_oscillation(sim.secs(25, 40), 0.1 * C, "recovered");
    assert!(sim.every_request_answered());
}

#[test]
fn a_server_announcing_doic_is_native_and_never_limited() {
    let mut sim = Sim::new(Kind::Fifo);
    sim.features = true;
    sim.run(10, |x| if x < 2.0 { C / 2.0 } else { 3.0 * C }, |_| C);
    assert!(sim.est.is_native());
    assert!(
        sim.seconds
            .iter()
            .all(|s| s.limit.is_none() && s.throttled == 0)
    );
    // The protect mode ignores what the answers carry.
    let mut est = Estimator::new(ProtectParams::default(), Mode::Protect);
    est.handle_sample(BASE, Outcome::Answered, true);
    est.handle_tick(Instant::now(), Load::default());
    assert!(!est.is_native());
}

#[test]
fn samples_merge_and_loss_follows_offered_over_limit() {
    let mut a = Samples::default();
    a.record(Duration::from_millis(3), Outcome::Answered, false);
    a.record(Duration::from_millis(1), Outcome::Busy, true);
    let mut b = Samples::default();
    b.record(Duration::from_millis(2), Outcome::Answered, false);
    b.record(Duration::from_secs(4), Outcome::Timeout, false);
    a.merge(&b);
    assert_eq!(
        (a.answered, a.busy, a.timeouts, a.with_features),
        (2, 1, 1, 1)
    );
    assert_eq!(a.min_latency, Some(Duration::from_millis(2)));
    assert_eq!(a.mean_latency(), Some(Duration::from_micros(2500)));

    let mut sim = Sim::new(Kind::Fifo);
    sim.run(15, |x| if x < 5.0 { C / 2.0 } else { 4.0 * C }, |_| C);
    // Offered 2,000/s against a limit near 500/s: about 75 % loss.
    let loss = sim.est.loss_percent();
    assert!((72..=77).contains(&loss), "{loss}");
}

#[test]
fn the_baseline_forgets_when_not_limited_and_only_falls_when_limited() {
    let t0 = Instant::now();
    let half = Duration::from_secs(15);
    let mut m = ForgettingMin::default();
    m.update(t0, half, Duration::from_millis(2), true);
    m.update(t0 + half, half, Duration::from_millis(5), true);
    assert_eq!(m.get(), Some(Duration::from_millis(2)));
    m.update(t0 + 2 * half, half, Duration::from_millis(5), true);
    assert_eq!(m.get(), Some(Duration::from_millis(5)));
    m.update(t0 + 4 * half, half, Duration::from_millis(9), false);
    assert_eq!(m.get(), Some(Duration::from_millis(5)));
}
