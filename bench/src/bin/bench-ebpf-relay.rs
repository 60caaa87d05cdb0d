//! `bench-ebpf-relay`: the relay's throughput with the kernel telemetry
//! program attached against the same agent without it, in the same run.
//!
//! One agent (one worker) relays the built-in load client's requests to the
//! built-in server on loopback, as `bench-relay --builtin` does. Each round
//! measures the closed-loop rate three times: without the program, with it
//! (`--mode`, default `auto`: generic XDP on `lo`, plus TC egress, the
//! agent's defaults), and without again. The figure is the median over
//! rounds of `with / mean(without, without)`: the sandwich cancels a linear
//! drift of the machine's load. The two runs without give an A/A ratio per
//! round, whose spread measures the noise of this run; the run fails when
//! the figure is below `1 - tolerance - noise`, with noise 2.5 standard
//! errors of a median estimated from the A/A ratios (1.4826 x MAD / sqrt n).
//!
//! Needs root (CAP_BPF, CAP_NET_ADMIN) to attach.

use std::net::SocketAddr;

use clap::Parser;
use doic_agent::agent::Agent;
use doic_agent::loadgen::{Identity, Pace, Server, ServerBehaviour};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Debug, Parser)]
#[command(
    name = "bench-ebpf-relay",
    about = "Relay throughput with the kernel telemetry program attached vs without"
)]
struct Args {
    /// Seconds per measurement.
    #[arg(long, default_value_t = 3)]
    seconds: u64,
    /// Rounds (each measures both sides; the median ratio is reported).
    #[arg(long, default_value_t = 7)]
    rounds: usize,
    /// Outstanding requests of the closed loop.
    #[arg(long, default_value_t = 64)]
    outstanding: usize,
    /// Ingress attach mode, as in `[ebpf] mode`.
    #[arg(long, default_value = "auto")]
    mode: String,
    /// Largest accepted throughput loss with the program attached.
    #[arg(long, default_value_t = 0.03)]
    tolerance: f64,
}

fn agent(server: SocketAddr, mode: &str) -> anyhow::Result<Agent> {
    let text = format!(
        "[node]\norigin_host = \"agent.example.com\"\norigin_realm = \"example.com\"\nlisten = [\"127.0.0.1:0\"]\nworkers = 1\ntc_seconds = 1\n\
         [[peer]]\nhost = \"server.example.net\"\nrealm = \"example.net\"\nconnect = \"{server}\"\n\
         [[route]]\nrealm = \"example.net\"\npeers = [\"server.example.net\"]\n[accept]\nhosts = [\"*.example.org\"]\n\
         [ebpf]\ninterfaces = [\"lo\"]\nmode = \"{mode}\"\negress = true\n"
    );
    bench::relay::start_agent(&text)
}

/// CPU time of this process so far (user + system), in microseconds: on
/// `lo` the kernel's receive path, hooks included, mostly runs in the
/// sender's context and is charged here.
fn cpu_us() -> f64 {
    // SAFETY: getrusage fills the zeroed struct it is given.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointer to a rusage.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &raw mut u) };
    let tv = |t: libc::timeval| t.tv_sec as f64 * 1e6 + t.tv_usec as f64;
    tv(u.ru_utime) + tv(u.ru_stime)
}

/// Rate and CPU microseconds per answered request of one measurement.
fn measure_cpu(
    rt: &tokio::runtime::Runtime,
    addr: SocketAddr,
    outstanding: usize,
    seconds: u64,
) -> anyhow::Result<(f64, f64)> {
    let c0 = cpu_us();
    let r = bench::relay::measure(rt, addr, Pace::Closed(outstanding), seconds)?;
    let cpu = cpu_us() - c0;
    Ok((r.rate(), cpu / r.answered.max(1) as f64))
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    anyhow::ensure!(args.rounds > 0, "--rounds must be at least 1");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    let server = rt.block_on(Server::spawn(
        "127.0.0.1:0".parse()?,
        Identity::new("server.example.net", "example.net"),
        ServerBehaviour::default(),
    ))?;
    let agent = agent(server.addr, &args.mode)?;
    let addr = agent.local_addrs()[0];
    let kernel = &agent.shared().kernel;
    // Attach once up front: a refusal is an error here, not a fallback.
    anyhow::ensure!(
        doic_agent::telemetry::start(&agent),
        "the kernel program did not attach (root and the eBPF toolchain are needed)"
    );
    kernel.detach();
    println!(
        "bench-ebpf-relay: {} rounds x {} s x 3 (without, with, without), closed loop {} outstanding, 1 worker, mode {}",
        args.rounds, args.seconds, args.outstanding, args.mode
    );
    let (mut off, mut on, mut ratios, mut aa) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut cpu_ratios = Vec::new();
    for round in 0..args.rounds {
        kernel.detach();
        let (before, cpu_before) = measure_cpu(&rt, addr, args.outstanding, args.seconds)?;
        anyhow::ensure!(doic_agent::telemetry::start(&agent), "attach failed");
        let (with, cpu_with) = measure_cpu(&rt, addr, args.outstanding, args.seconds)?;
        kernel.detach();
        let (after, cpu_after) = measure_cpu(&rt, addr, args.outstanding, args.seconds)?;
        cpu_ratios.push(cpu_with / ((cpu_before + cpu_after) / 2.0));
        // The sandwich cancels a linear drift of the machine's load; the
        // two runs without measure the noise (A/A).
        let ratio = with / ((before + after) / 2.0);
        println!(
            "round {round}: without {before:>9.0}/s  with {with:>9.0}/s  without {after:>9.0}/s  ratio {ratio:.3}  A/A {:.3}  cpu/request {cpu_before:.2} {cpu_with:.2} {cpu_after:.2} us",
            after / before
        );
        off.push((before + after) / 2.0);
        on.push(with);
        ratios.push(ratio);
        aa.push(after / before);
    }
    let ratio = bench::relay::median(ratios);
    // Noise allowance: 2.5 standard errors of a median, the spread taken
    // from the A/A ratios (MAD scaled to a standard deviation).
    let aa_median = bench::relay::median(aa.clone());
    let mad = bench::relay::median(aa.iter().map(|r| (r - aa_median).abs()).collect());
    let noise = 2.5 * 1.4826 * mad / (args.rounds as f64).sqrt();
    let bound = 1.0 - args.tolerance - noise;
    println!(
        "median: without {:.0}/s, with {:.0}/s, paired ratio {ratio:.3}; A/A median {aa_median:.3}, noise allowance {noise:.3}; bound {bound:.3} (loss {:.1}% + noise)",
        bench::relay::median(off),
        bench::relay::median(on),
        args.tolerance * 100.0
    );
    println!(
        "cpu per relayed request (client, agent, server and the kernel's loopback path): with / without = {:.3} (median of rounds)",
        bench::relay::median(cpu_ratios)
    );
    agent.shutdown();
    agent.join();
    server.stop();
    anyhow::ensure!(
        ratio >= bound,
        "throughput with the program attached is {:.1}% below without, beyond the {:.1}% bound plus {:.1}% measured noise",
        (1.0 - ratio) * 100.0,
        args.tolerance * 100.0,
        noise * 100.0
    );
    Ok(())
}
