//! Times the codec operations on the realistic request and prints one line
//! each: median ns per message over several rounds, the ratio to the copy
//! anchor measured in the same run, and the target. Times are thread CPU
//! time, so other processes on the machine inflate them less. `--check` exits with
//! status 1 when a median misses its target.

use std::hint::black_box;

use bench::codec::{copy_anchor, encode, full_walk, realistic_request, relay_fast_path};
use doic_agent::codec::Message;

const ROUNDS: usize = 15;

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

fn count_avps(avps: &[doic_agent::codec::Avp]) -> usize {
    avps.iter()
        .map(|a| {
            1 + a.children().map_or(0, |c| {
                if a.def()
                    .is_some_and(|d| d.ty == doic_agent::dictionary::AvpType::Grouped)
                {
                    count_avps(&c)
                } else {
                    0
                }
            })
        })
        .sum()
}

fn median_ns(iters: u32, mut f: impl FnMut() -> usize) -> f64 {
    let mut samples = Vec::with_capacity(ROUNDS);
    for _ in 0..ROUNDS {
        let t = thread_cpu_ns();
        let mut acc = 0usize;
        for _ in 0..iters {
            acc = acc.wrapping_add(f());
        }
        black_box(acc);
        samples.push((thread_cpu_ns() - t) as f64 / f64::from(iters));
    }
    samples.sort_by(f64::total_cmp);
    samples[ROUNDS / 2]
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
    let iters = 20_000;
    // warm up caches and the branch predictor
    if only.is_none() {
        median_ns(iters, || {
            relay_fast_path(black_box(&bytes))
                + full_walk(black_box(&bytes))
                + encode(black_box(&m))
        });
    }
    let anchor = median_ns(iters, || copy_anchor(black_box(&bytes)));
    type Op<'a> = Box<dyn FnMut() -> usize + 'a>;
    let ops: Vec<(&str, Op<'_>, Option<f64>)> = vec![
        (
            "relay_fast_path",
            Box::new(|| relay_fast_path(black_box(&bytes))),
            Some(100.0),
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
    let avps = count_avps(&m.avps);
    println!(
        "codec message: {} bytes, {avps} avps ({} top-level); anchor copy_anchor {anchor:.1} ns/msg",
        bytes.len(),
        m.avps.len()
    );
    let mut ok = true;
    for (name, mut op, target) in ops {
        if only.as_deref().is_some_and(|o| o != name) {
            continue;
        }
        let ns = median_ns(iters, &mut op);
        let verdict = match target {
            Some(t) if ns <= t => format!("target <= {t:.0} ns: ok"),
            Some(t) => {
                ok = false;
                format!("target <= {t:.0} ns: MISSED")
            }
            None => "no target".to_string(),
        };
        println!(
            "codec {name:<16} {ns:8.1} ns/msg  {:5.2}x anchor  {verdict}",
            ns / anchor
        );
    }
    if check && !ok {
        eprintln!("codec-check: a median missed its target");
        return std::process::ExitCode::FAILURE;
    }
    std::process::ExitCode::SUCCESS
}
