//! Times the codec operations on the realistic request and prints one line
//! each: median ns per message over several rounds, the median ratio to the
//! copy anchor timed in the same round, and the target. Times are thread CPU
//! time, so other processes on the machine inflate them less. `--check`
//! exits with status 1 when a median misses its target both in ns and at the
//! reference speed (`bench::speed`).

use std::hint::black_box;

use bench::codec::{
    copy_anchor, encode, full_walk, realistic_answer, realistic_request, relay_answer_path,
    relay_fast_path,
};
use bench::speed::{Verdict, median};
use diameter::codec::Message;

const ROUNDS: usize = 21;

/// The copy anchor's median on a quiet machine of this kind, ns: the
/// reference speed at which the targets were set (see `bench::speed`).
const REFERENCE_ANCHOR_NS: f64 = 8.8;

/// CPU time of this thread in nanoseconds: on a shared machine it counts
/// only the time the benchmark actually ran, not the time it waited.
fn thread_cpu_ns() -> u128 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the call's duration.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u128 * 1_000_000_000 + ts.tv_nsec as u128
}

fn count_avps(avps: &[diameter::codec::Avp]) -> usize {
    avps.iter()
        .map(|a| {
            1 + a.children().map_or(0, |c| {
                if a.def()
                    .is_some_and(|d| d.ty == diameter::dictionary::AvpType::Grouped)
                {
                    count_avps(&c)
                } else {
                    0
                }
            })
        })
        .sum()
}

/// Thread CPU time per call of `f`, in ns, over `iters` calls.
fn time_ns(iters: u32, mut f: impl FnMut() -> usize) -> f64 {
    let t = thread_cpu_ns();
    let mut acc = 0usize;
    for _ in 0..iters {
        acc = acc.wrapping_add(f());
    }
    black_box(acc);
    (thread_cpu_ns() - t) as f64 / f64::from(iters)
}

fn main() -> std::process::ExitCode {
    let check = std::env::args().any(|a| a == "--check");
    // `--only NAME` times one operation (for profiling)
    let args: Vec<String> = std::env::args().collect();
    let only = args
        .iter()
        .position(|a| a == "--only")
        .and_then(|i| args.get(i + 1))
        .cloned();
    let m = realistic_request();
    let bytes = m.to_bytes().unwrap().freeze();
    let answer = realistic_answer().to_bytes().unwrap().freeze();
    assert!(
        relay_answer_path(&answer) > 0,
        "the answer passes the check"
    );
    let iters = 20_000;
    // warm up caches and the branch predictor
    if only.is_none() {
        time_ns(iters * 5, || {
            relay_fast_path(black_box(&bytes))
                + full_walk(black_box(&bytes))
                + encode(black_box(&m))
        });
    }
    type Op<'a> = Box<dyn FnMut() -> usize + 'a>;
    let mut ops: Vec<(&str, Op<'_>, Option<f64>)> = vec![
        (
            "relay_fast_path",
            Box::new(|| relay_fast_path(black_box(&bytes))),
            Some(100.0),
        ),
        (
            "relay_answer",
            Box::new(|| relay_answer_path(black_box(&answer))),
            None,
        ),
        (
            "full_walk",
            Box::new(|| full_walk(black_box(&bytes))),
            Some(300.0),
        ),
        (
            "decode_message",
            Box::new(|| Message::decode(black_box(bytes.clone())).map_or(0, |m| m.avps.len())),
            None,
        ),
        ("encode", Box::new(|| encode(black_box(&m))), Some(300.0)),
    ];
    ops.retain(|(name, _, _)| only.as_deref().is_none_or(|o| o == *name));
    // Each round times the anchor, then every operation, so that a change
    // in the machine's speed falls on both alike.
    let mut anchors = Vec::with_capacity(ROUNDS);
    let mut ns: Vec<Vec<f64>> = vec![Vec::with_capacity(ROUNDS); ops.len()];
    let mut in_anchors: Vec<Vec<f64>> = vec![Vec::with_capacity(ROUNDS); ops.len()];
    for _ in 0..ROUNDS {
        let anchor = time_ns(iters, || copy_anchor(black_box(&bytes)));
        anchors.push(anchor);
        for (i, (_, op, _)) in ops.iter_mut().enumerate() {
            let t = time_ns(iters, op);
            ns[i].push(t);
            in_anchors[i].push(t / anchor);
        }
    }
    let anchor = median(&mut anchors);
    let avps = count_avps(&m.avps);
    println!(
        "codec message: {} bytes, {avps} avps ({} top-level); anchor copy_anchor {anchor:.1} ns/msg \
         (reference {REFERENCE_ANCHOR_NS} ns); medians of {ROUNDS} rounds",
        bytes.len(),
        m.avps.len()
    );
    let mut ok = true;
    for (i, (name, _, target)) in ops.iter().enumerate() {
        let t = median(&mut ns[i]);
        let a = median(&mut in_anchors[i]);
        let verdict = match target {
            Some(bound) => {
                let v = Verdict::judge(t, a, *bound, REFERENCE_ANCHOR_NS);
                ok &= v.passed();
                format!("target {}", v.describe(*bound))
            }
            None => "no target".to_string(),
        };
        println!("codec {name:<16} {t:8.1} ns/msg  {a:5.2}x anchor  {verdict}");
    }
    if check && !ok {
        eprintln!("codec-check: a median missed its target");
        return std::process::ExitCode::FAILURE;
    }
    std::process::ExitCode::SUCCESS
}
