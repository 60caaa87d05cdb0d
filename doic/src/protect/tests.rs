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
    /// 2001 answers later than [`LATE`] (the steady state's bound).
    late: u64,
    limit: Option<u32>,
}

/// Later than the steady state's queue allows (docs/protect.md: the queue
/// is held near twice the unloaded latency + 20 ms).
const LATE: Duration = Duration::from_millis(40);

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
    /// When the gate was first put in place, ms of simulated time.
    first_limit_ms: Option<u64>,
    /// A DOIC reacting node in front (an RFC 8581 chain), if any.
    edge: Option<Edge>,
    /// Requests admitted to the server in each tick.
    per_tick: Vec<u64>,
    tick_admitted: u64,
}

/// A reacting node in front of the agent (the chain's edge agent): it holds
/// the report the agent makes on the server's behalf ([`OnBehalf`]) as the
/// agent sends it, and abates at the source: with the rate algorithm
/// through its own bucket at the version's rate (RFC 8582 §8.3, the phase
/// kept across versions), with loss by dropping the version's percentage
/// (RFC 7683 §6).
struct Edge {
    rate: bool,
    behalf: OnBehalf,
    bucket: Option<RateControl>,
    percent: u32,
    rng: crate::loss::Prng,
    /// Its loss percentage as the agent makes it: the edge is the one
    /// client, its share the limit (`agent::overload::protect`).
    loss: ClientLoss,
}

impl Edge {
    fn new(rate: bool, origin: Instant) -> Self {
        Self {
            rate,
            behalf: OnBehalf::new(origin, 1_700_000_000_000, Duration::from_secs(10)),
            bucket: None,
            percent: 0,
            rng: crate::loss::Prng::new(7),
            loss: ClientLoss::default(),
        }
    }

    /// The agent's tick: a new version reaches the edge at once.
    fn follow(&mut self, now: Instant, origin: Instant, est: &Estimator) {
        if !self
            .behalf
            .handle_limit(now, est.limit(), est.loss_percent())
        {
            return;
        }
        match self.behalf.current() {
            Some(v) if !v.is_end() => {
                let r = v.rate();
                let shares = std::collections::BTreeMap::from([(String::new(), r)]);
                let arrivals = est.measures().offered_rate;
                let settle = Duration::from_secs(1);
                self.percent = self.loss.revise(now, &shares, |_| Some(arrivals), settle)[""];
                match &self.bucket {
                    Some(b) => b.set_rate(now, r),
                    None => {
                        let config = RateParams::default().bucket_config().unwrap();
                        self.bucket = Some(RateControl::new(origin, now, r, &config));
                    }
                }
            }
            _ => {
                (self.bucket, self.percent) = (None, 0);
                self.loss.clear();
            }
        }
    }

    /// Whether a request passes the edge.
    fn passes(&mut self, now: Instant) -> bool {
        if self.rate {
            self.bucket
                .as_ref()
                .is_none_or(|b| b.admit(now, Priority::Normal))
        } else {
            !crate::loss::select_percent(&mut self.rng, self.percent)
        }
    }
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
            first_limit_ms: None,
            edge: None,
            per_tick: Vec::new(),
            tick_admitted: 0,
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
                        s.late += u64::from(latency > LATE);
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
                    agent_delay: Duration::ZERO,
                };
                (self.tick_offered, self.tick_throttled) = (0, 0);
                self.per_tick.push(std::mem::take(&mut self.tick_admitted));
                self.est.handle_tick(now, load);
                self.apply(now);
                if let Some(e) = &mut self.edge {
                    e.follow(now, self.origin, &self.est);
                }
                self.seconds[sec].limit = self.est.limit();
            }
        }
    }

    fn arrive(&mut self, now: Instant, t: Duration, sec: usize, capacity: f64) {
        if let Some(e) = &mut self.edge
            && !e.passes(now)
        {
            // Abated at the source: never reaches the agent.
            return;
        }
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
        self.tick_admitted += 1;
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
                let ms = now.saturating_duration_since(self.origin).as_millis() as u64;
                self.first_limit_ms.get_or_insert(ms);
                let mut config = RateParams::default().bucket_config().unwrap();
                // A loss edge is held with the loss client's tolerance
                // (`Gates`: the agent sent it the loss report).
                if self.edge.as_ref().is_some_and(|e| !e.rate) {
                    config = crate::protect::gates::loss_config(&config);
                }
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

/// The onset (RFC 7068 §3: what an overload costs before control binds):
/// offered k x C after 5 s at C/2 to the FIFO server. The first limit
/// comes at the first tick after the step; until then one tick admits
/// k C x 0.1 s, a queue of (k - 1) C x 0.1 s, so the longest wait is
/// (k - 1) x 100 ms (measured: 108, 216, 410, 907 ms at 2x, 3x, 5x, 10x)
/// and nothing times out at the client (T = 2 s) up to 10x. The answers
/// later than the steady state's 40 ms are those served while that queue
/// drains: at most C x (2 (k - 1) x 100 ms + `drain`) (measured: 242,
/// 430, 620, 971).
#[test]
fn the_onset_of_an_overload_costs_one_tick_of_excess_and_its_drain() {
    let p = ProtectParams::default();
    let tick = Duration::from_millis(TICK_MS).as_secs_f64();
    for k in [2.0, 3.0, 5.0, 10.0] {
        let mut sim = Sim::new(Kind::Fifo);
        sim.run(12, |x| if x < 5.0 { C / 2.0 } else { k * C }, |_| C);
        let what = format!("onset at {k}x");
        let first = sim.first_limit_ms.expect("a limit");
        let late: u64 = sim.seconds.iter().map(|s| s.late).sum();
        let timeouts: u64 = sim.seconds.iter().map(|s| s.timeouts).sum();
        let max = sim.seconds.iter().map(|s| s.max_latency).max().unwrap();
        let goodput: u64 = sim.seconds.iter().map(|s| s.goodput).sum();
        eprintln!(
            "{what}: first limit at {first} ms, {late} later than {LATE:?}, max {max:?}, {timeouts} timeouts"
        );
        assert!(
            (5_000..5_000 + TICK_MS).contains(&first),
            "{what}: first limit at {first} ms"
        );
        assert_eq!(timeouts, 0, "{what}");
        let longest = Duration::from_secs_f64((k - 1.0) * tick) + Duration::from_millis(20);
        assert!(max <= longest, "{what}: {max:?} above {longest:?}");
        let bound = C * (2.0 * (k - 1.0) * tick + p.drain.as_secs_f64());
        assert!(
            late as f64 <= bound,
            "{what}: {late} answers later than {LATE:?}, bound {bound}: {:?}",
            sim.secs(4, 8)
        );
        // Every answer was goodput: 5 s at C/2, 7 s at C.
        assert!(
            goodput as f64 >= 0.98 * (5.0 * C / 2.0 + 7.0 * C),
            "{what}: goodput {goodput}"
        );
        assert!(sim.every_request_answered(), "{what}");
    }
}

/// The standard deviation of the requests admitted to the server per tick
/// from `from` seconds on.
fn per_tick_sd(sim: &Sim, from: u64) -> f64 {
    let v = &sim.per_tick[(from * 1000 / TICK_MS) as usize..];
    let n = v.len() as f64;
    let mean = v.iter().sum::<u64>() as f64 / n;
    (v.iter().map(|&x| (x as f64 - mean).powi(2)).sum::<f64>() / n).sqrt()
}

/// Smoothness with an RFC 8581 chain: a reacting node in front of the
/// agent offering 5x C abates at the source on the report the agent makes
/// on the server's behalf. Under rate (RFC 8582) its bucket at the
/// version's rate shapes what reaches the server: the arrivals per 100 ms
/// vary by at most 4 % of their mean. Under loss (RFC 7683 §6) it drops the
/// percentage the agent makes for it ([`ClientLoss`]: the cut of its demand
/// to its share), so the agent next to the server answers little of the
/// excess itself, and what passes varies as random drops in whole percents
/// do: issue 12's target, rate at most a third of loss, holds. The goodput
/// stays at C either way.
///
/// Measured here: sd 0.9 under rate, 7.3 under loss (of 50 per tick),
/// goodput 1.00 / 0.96 C, the agent answering none of the loss edge's
/// excess: its fraction aims at its share, rounded to the whole percent
/// at or below the cut, and the agent holds it with the loss client's
/// tolerance ([`crate::protect::gates::LOSS_TOLERANCE`]). Aimed at 1.10 x
/// its share with the rate client's 10 ms, the agent's bucket trimmed the
/// excess and shaped what passed: loss sd 5.2, goodput 0.96 C; aimed at the
/// share with 10 ms, the bucket trimmed the random peaks and nothing filled
/// the troughs: goodput 0.93 C. Before the loss client's
/// own cut, the version's percentage of the load reaching the agent
/// settled at 1 - sqrt(1/5) = 55 % where 80 % is right, the agent's bucket
/// answered the rest of the excess and shaped what passed as under rate
/// (sd 0.9, the agent answering about 30 % of the excess). Under rate it
/// was 2.4 while a version was made only when the limit moved by 10 %: the
/// edge held each version's rate while the limit crept on (the limit
/// between 490 and 561); with versions at 2 % and the probe slow beyond the
/// capacity just after a cut, the limit stays within 494-506.
#[test]
fn a_chain_reaches_the_server_smoothly_under_rate_and_loss() {
    let mut sd = [0.0; 2];
    for (i, rate) in [true, false].into_iter().enumerate() {
        let mut sim = Sim::new(Kind::Fifo);
        sim.edge = Some(Edge::new(rate, sim.origin));
        sim.run(30, |x| if x < 5.0 { C / 2.0 } else { 5.0 * C }, |_| C);
        sd[i] = per_tick_sd(&sim, 10);
        let s = sim.secs(10, 30);
        let goodput: u64 = s.iter().map(|s| s.goodput).sum();
        let throttled: u64 = s.iter().map(|s| s.throttled).sum();
        let excess = 20.0 * 4.0 * C;
        eprintln!(
            "chain {}: sd {:.1} per {TICK_MS} ms, goodput {:.2} C, the agent answered {:.3} of the excess: {:?}",
            if rate { "rate" } else { "loss" },
            sd[i],
            goodput as f64 / 20.0 / C,
            throttled as f64 / excess,
            sim.secs(10, 14)
        );
        assert!(
            goodput as f64 >= 0.95 * 20.0 * C,
            "goodput {goodput} in 20 s"
        );
        assert!(
            throttled as f64 <= 0.05 * excess,
            "the agent answered {throttled} of an excess of {excess}"
        );
    }
    assert!(
        sd[0] <= 0.04 * C * TICK_MS as f64 / 1000.0,
        "rate: sd {:.1} per {TICK_MS} ms",
        sd[0]
    );
    assert!(
        sd[0] <= sd[1] / 3.0,
        "sd per {TICK_MS} ms: rate {:.1}, loss {:.1}",
        sd[0],
        sd[1]
    );
}

mod ticks;
