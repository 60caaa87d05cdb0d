//! Simultaneous A/B measurement of the relay with and without a [`Subject`]
//! (the kernel telemetry program, or DOIC with no overload): two identical
//! relays (load client, agent with one worker, server), each in its own
//! network namespace with its own `lo`, run at the same time on the same
//! machine; the subject is on in one of them. Whatever else the machine does
//! slows both sides alike and cancels in the ratio of their rates.
//!
//! Each side is a child process (the benchmark binary with `--side`) that
//! enters its namespace before it starts any thread, then obeys one-line
//! commands on stdin and answers one line on stdout:
//!
//! | command | effect | answer |
//! | --- | --- | --- |
//! | `attach K` | the subject on: attach the program as the agent does (plus `K` extra copies on TC ingress and egress, to emulate a costlier program); for DOIC, load the side's agent with `[doic]` instead of its twin without | `ok` |
//! | `detach` | the subject off: detach every program; for DOIC, back to the agent without `[doic]` | `ok` |
//! | `measure S` | one closed-loop measurement of `S` seconds | a [`Sample`] |
//! | `quit` | stop the agent and exit | (none) |
//!
//! The parent pairs rounds so that an asymmetry between the namespaces
//! cancels too (see [`paired`]), and uses order statistics for a
//! distribution-free confidence interval of the median ([`median_ci`]).

use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use agent::agent::Agent;
use agent::ebpf::{Mode, Telemetry};
use anyhow::Context;
use tools::loadgen::{Identity, Pace, Server, ServerBehaviour};

/// What one side turns on and off between rounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Subject {
    /// The kernel telemetry program, attached in the agent's `[ebpf] mode`.
    Program,
    /// Overload control: two agents in the side, one with `[doic]` (DOIC
    /// active, no overload: the servers send no report), one without; the
    /// load client is pointed at one or the other.
    Doic,
    /// The durable audit log: two agents with `[doic]` in the side, one
    /// writing the audit log (`[audit] dir`), one not.
    Audit,
}

impl std::str::FromStr for Subject {
    type Err = anyhow::Error;

    fn from_str(s: &str) -> anyhow::Result<Self> {
        match s {
            "ebpf" => Ok(Self::Program),
            "doic" => Ok(Self::Doic),
            "audit" => Ok(Self::Audit),
            other => anyhow::bail!("subject {other:?}: expected ebpf, doic or audit"),
        }
    }
}

impl std::fmt::Display for Subject {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Program => "ebpf",
            Self::Doic => "doic",
            Self::Audit => "audit",
        })
    }
}

/// A network namespace created with `ip netns add` (its `lo` up), deleted
/// on drop.
#[derive(Debug)]
pub struct Netns {
    /// The namespace's name (under `/run/netns`).
    pub name: String,
}

fn ip(args: &[&str]) -> anyhow::Result<()> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .context("cannot run ip (iproute2)")?;
    anyhow::ensure!(
        out.status.success(),
        "ip {} failed: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr).trim()
    );
    Ok(())
}

impl Netns {
    /// Creates namespace `name` and brings its loopback up.
    ///
    /// # Errors
    /// When `ip` fails (no root, no iproute2).
    pub fn new(name: &str) -> anyhow::Result<Self> {
        // A namespace left by a killed run of the same name goes first.
        let _ = Command::new("ip")
            .args(["netns", "del", name])
            .stderr(Stdio::null())
            .status();
        ip(&["netns", "add", name])?;
        let ns = Self {
            name: name.to_owned(),
        };
        ip(&["-n", name, "link", "set", "lo", "up"])?;
        Ok(ns)
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .status();
    }
}

/// Moves the calling thread into network namespace `name`. Called before
/// any other thread exists, it moves the whole process: threads started
/// later inherit it.
///
/// # Errors
/// When the namespace does not exist or `setns` is refused.
pub fn enter(name: &str) -> anyhow::Result<()> {
    let path = format!("/run/netns/{name}");
    let file = File::open(&path).with_context(|| format!("open {path}"))?;
    // SAFETY: setns on a valid namespace fd affects only this thread.
    let rc = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
    anyhow::ensure!(rc == 0, "setns {path}: {}", std::io::Error::last_os_error());
    Ok(())
}

/// A CPU cgroup of its own with a bandwidth limit (cgroup v2 `cpu.max`, or
/// v1 `cpu.cfs_quota_us`), removed on drop. A side limited to a fraction
/// of a CPU it could otherwise exceed is CPU-bound at that limit: its rate
/// is the limit divided by its CPU time per request, whatever the rest of
/// the machine does, as long as the machine can grant the limit.
#[derive(Debug)]
pub struct CpuLimit {
    /// The cgroup's directory.
    pub dir: std::path::PathBuf,
}

impl CpuLimit {
    /// Creates cgroup `name` limited to `fraction` of one CPU, in periods
    /// of `period_us`.
    ///
    /// # Errors
    /// When neither a v2 hierarchy with the cpu controller nor a v1 cpu
    /// hierarchy is mounted, or the kernel refuses.
    pub fn new(name: &str, fraction: f64, period_us: u64) -> anyhow::Result<Self> {
        let v2 = std::path::Path::new("/sys/fs/cgroup");
        let v1 = std::path::Path::new("/sys/fs/cgroup/cpu");
        let controllers =
            std::fs::read_to_string(v2.join("cgroup.controllers")).unwrap_or_default();
        let dir = if controllers.split_whitespace().any(|c| c == "cpu") {
            let subtree = std::fs::read_to_string(v2.join("cgroup.subtree_control"))?;
            if !subtree.split_whitespace().any(|c| c == "cpu") {
                std::fs::write(v2.join("cgroup.subtree_control"), "+cpu")
                    .context("enable the cpu controller for child cgroups")?;
            }
            v2.join(name)
        } else if v1.join("cpu.cfs_quota_us").exists() {
            v1.join(name)
        } else {
            anyhow::bail!("no cgroup cpu controller mounted under /sys/fs/cgroup");
        };
        let _ = std::fs::remove_dir(&dir);
        std::fs::create_dir(&dir).with_context(|| format!("create {}", dir.display()))?;
        let limit = Self { dir };
        limit.set(fraction, period_us)?;
        Ok(limit)
    }

    /// Holds the cgroup to `fraction` of one CPU in periods of `period_us`
    /// from now on (the kernel's smallest quota is 1 ms).
    ///
    /// # Errors
    /// When the kernel refuses.
    pub fn set(&self, fraction: f64, period_us: u64) -> anyhow::Result<()> {
        let quota = ((fraction * period_us as f64) as u64).max(1000);
        let files = if self.dir.join("cpu.max").exists() {
            vec![("cpu.max", format!("{quota} {period_us}"))]
        } else {
            vec![
                ("cpu.cfs_period_us", period_us.to_string()),
                ("cpu.cfs_quota_us", quota.to_string()),
            ]
        };
        for (file, value) in files {
            let path = self.dir.join(file);
            std::fs::write(&path, &value)
                .with_context(|| format!("write {value} to {}", path.display()))?;
        }
        Ok(())
    }
}

impl Drop for CpuLimit {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// Moves this process (every thread) into the cgroup at `dir`.
///
/// # Errors
/// When the kernel refuses.
pub fn join_cgroup(dir: &std::path::Path) -> anyhow::Result<()> {
    move_to_cgroup(dir, std::process::id())
}

/// Moves process `pid` (every thread of it) into the cgroup at `dir`.
///
/// # Errors
/// When the kernel refuses (no such process, no permission).
pub fn move_to_cgroup(dir: &std::path::Path, pid: u32) -> anyhow::Result<()> {
    let procs = dir.join("cgroup.procs");
    std::fs::write(&procs, pid.to_string())
        .with_context(|| format!("move {pid} into {}", procs.display()))
}

/// Restricts this process (the calling thread and the threads it starts
/// later) to CPU `cpu`.
///
/// # Errors
/// When the kernel refuses (no such CPU).
pub fn pin(cpu: usize) -> anyhow::Result<()> {
    pin_task(0, &[cpu])
}

/// Restricts thread `tid` (0: the calling one; threads it starts later
/// inherit it) to `cpus`.
///
/// # Errors
/// When the kernel refuses (no such thread or CPU).
pub fn pin_task(tid: i32, cpus: &[usize]) -> anyhow::Result<()> {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; CPU_SET and
    // sched_setaffinity only read and write the set given.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for &cpu in cpus {
            libc::CPU_SET(cpu, &mut set);
        }
        let rc =
            libc::sched_setaffinity(tid, std::mem::size_of::<libc::cpu_set_t>(), &raw const set);
        anyhow::ensure!(
            rc == 0,
            "pin thread {tid} to CPUs {cpus:?}: {}",
            std::io::Error::last_os_error()
        );
    }
    Ok(())
}

/// Restricts every thread of process `pid` (and the threads they start
/// later) to `cpus`.
///
/// # Errors
/// When its threads cannot be listed or one cannot be pinned.
pub fn pin_process(pid: u32, cpus: &[usize]) -> anyhow::Result<()> {
    let dir = format!("/proc/{pid}/task");
    for entry in std::fs::read_dir(&dir).with_context(|| format!("list {dir}"))? {
        let name = entry?.file_name();
        let Some(tid) = name.to_str().and_then(|t| t.parse::<i32>().ok()) else {
            continue;
        };
        pin_task(tid, cpus)?;
    }
    Ok(())
}

/// The CPUs this process may run on, lowest first.
///
/// # Errors
/// When the kernel refuses to say.
pub fn allowed_cpus() -> anyhow::Result<Vec<usize>> {
    // SAFETY: a zeroed cpu_set_t is a valid empty set that
    // sched_getaffinity fills; CPU_ISSET only reads it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        let rc = libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &raw mut set);
        anyhow::ensure!(
            rc == 0,
            "sched_getaffinity: {}",
            std::io::Error::last_os_error()
        );
        Ok((0..libc::CPU_SETSIZE as usize)
            .filter(|&c| libc::CPU_ISSET(c, &set))
            .collect())
    }
}

/// One side's measurement: rate, CPU per request of the whole side (client,
/// agent, server and the kernel's loopback path, all charged to the side's
/// process), and the kernel program's own run time per request.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sample {
    /// Answered requests per second.
    pub rate: f64,
    /// Process CPU time (user + system) per answered request, ns.
    pub cpu_ns: f64,
    /// Run time of the side's BPF programs per answered request, ns (0
    /// unless `kernel.bpf_stats_enabled` is 1 and a program is attached).
    pub bpf_ns: f64,
    /// CPU time of the measured agent's worker thread per answered request,
    /// ns: the relay's own cost, what limits a saturated relay.
    pub relay_ns: f64,
}

impl Sample {
    fn line(&self) -> String {
        format!(
            "{} {} {} {}",
            self.rate, self.cpu_ns, self.bpf_ns, self.relay_ns
        )
    }

    fn parse(line: &str) -> anyhow::Result<Self> {
        let v: Vec<f64> = line
            .split_whitespace()
            .map(str::parse)
            .collect::<Result<_, _>>()
            .with_context(|| format!("bad sample line {line:?}"))?;
        anyhow::ensure!(v.len() == 4, "bad sample line {line:?}");
        Ok(Self {
            rate: v[0],
            cpu_ns: v[1],
            bpf_ns: v[2],
            relay_ns: v[3],
        })
    }
}

/// CPU time of this process so far (user + system), ns.
fn cpu_ns() -> f64 {
    // SAFETY: getrusage fills the zeroed struct it is given.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointer to a rusage.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &raw mut u) };
    let tv = |t: libc::timeval| t.tv_sec as f64 * 1e9 + t.tv_usec as f64 * 1e3;
    tv(u.ru_utime) + tv(u.ru_stime)
}

/// Total `run_time_ns` of the BPF programs this process holds open, from
/// `/proc/self/fdinfo` (the kernel counts it while
/// `kernel.bpf_stats_enabled` is 1).
fn bpf_run_ns() -> f64 {
    let Ok(dir) = std::fs::read_dir("/proc/self/fdinfo") else {
        return 0.0;
    };
    let mut total = 0.0;
    for e in dir.flatten() {
        let Ok(text) = std::fs::read_to_string(e.path()) else {
            continue;
        };
        if !text.contains("prog_id:") {
            continue;
        }
        total += text
            .lines()
            .find_map(|l| l.strip_prefix("run_time_ns:"))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .unwrap_or(0.0);
    }
    total
}

/// Configuration of one side's agent: as `bench-relay --builtin`, with
/// `extra` sections (the `[ebpf]` section of the agent's defaults on `lo`
/// and the given mode, or `[doic]`).
fn agent_toml(server: SocketAddr, extra: &str) -> String {
    format!(
        "[node]\norigin_host = \"agent.example.com\"\norigin_realm = \"example.com\"\nlisten = [\"127.0.0.1:0\"]\nworkers = 1\ntc_seconds = 1\n\
         [[peer]]\nhost = \"server.example.net\"\nrealm = \"example.net\"\nconnect = \"{server}\"\n\
         [[route]]\nrealm = \"example.net\"\npeers = [\"server.example.net\"]\n[accept]\nhosts = [\"*.example.org\"]\n{extra}"
    )
}

/// The `[ebpf]` section of a side whose subject is the program.
fn ebpf_section(mode: &str) -> String {
    format!("[ebpf]\ninterfaces = [\"lo\"]\nmode = \"{mode}\"\negress = true\n")
}

/// CPU time of `agent`'s worker thread so far, ns.
fn relay_cpu_ns(agent: &Agent) -> f64 {
    agent
        .workers()
        .cpu_time(0)
        .map_or(0.0, |d| d.as_secs_f64() * 1e9)
}

/// Extra copies of the program on TC ingress and egress of the agent's
/// interfaces (on `lo`, the one program for both directions, attached
/// again): the same code run again per packet, a costlier program.
fn extra_copies(agent: &Agent, n: usize) -> anyhow::Result<Vec<Telemetry>> {
    let mut cfg = agent
        .config()
        .ebpf_config(agent.local_addrs())
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    cfg.mode = Mode::Tc;
    cfg.egress = true;
    (0..n)
        .map(|_| Telemetry::start(&cfg).context("extra copy"))
        .collect()
}

/// One side of the A/B measurement, run in the child process: starts the
/// server and agent in the current (already entered) namespace, then serves
/// commands from stdin until `quit` or EOF.
///
/// # Errors
/// A failed start, attach or measurement (the parent sees the side exit).
///
/// With `doic_client` the load client sends OC-Supported-Features in every
/// request (a DOIC reacting node, RFC 7683 §5.1.1), and the agent with
/// `[doic]` trusts it for DOIC (RFC 7683 §10.4), so it takes the whole
/// DOIC client path: its features replaced upstream, the agent's own in
/// every answer. The agent without `[doic]` relays the AVP untouched.
pub fn serve_side(
    subject: Subject,
    mode: &str,
    outstanding: usize,
    doic_client: bool,
) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    let server = rt.block_on(Server::spawn(
        "127.0.0.1:0".parse()?,
        Identity::new("server.example.net", "example.net"),
        ServerBehaviour::default(),
    ))?;
    // The audit log's directory (subject `audit`), removed at the end.
    let audit_dir = std::env::temp_dir().join(format!("doic-ab-audit-{}", std::process::id()));
    // `agents[0]` is measured with the subject off, `agents[on]` with it on.
    let (agents, on) = match subject {
        Subject::Program => (
            vec![crate::relay::start_agent(&agent_toml(
                server.addr,
                &ebpf_section(mode),
            ))?],
            0,
        ),
        Subject::Doic => (
            vec![
                crate::relay::start_agent(&agent_toml(server.addr, ""))?,
                // The DOIC client is trusted for DOIC (RFC 7683 §10.4); the
                // plain comparison keeps the bare section.
                crate::relay::start_agent(&agent_toml(
                    server.addr,
                    &if doic_client {
                        format!(
                            "[doic]\n[doic.peers.\"{}\"]\ntrusted = true\n",
                            crate::relay::CLIENT_HOST
                        )
                    } else {
                        "[doic]\n".to_owned()
                    },
                ))?,
            ],
            1,
        ),
        Subject::Audit => {
            let _ = std::fs::remove_dir_all(&audit_dir);
            let logging = format!("[doic]\n[audit]\ndir = \"{}\"\n", audit_dir.display());
            (
                vec![
                    crate::relay::start_agent(&agent_toml(server.addr, "[doic]\n"))?,
                    crate::relay::start_agent(&agent_toml(server.addr, &logging))?,
                ],
                1,
            )
        }
    };
    if subject == Subject::Audit {
        anyhow::ensure!(
            agents[0]
                .overload()
                .is_some_and(|o| o.audit_log().is_none())
                && agents[1]
                    .overload()
                    .is_some_and(|o| o.audit_log().is_some()),
            "the audit log is not on exactly in the measured agent"
        );
    } else {
        anyhow::ensure!(
            agents[0].overload().is_none()
                && agents[on].overload().is_some() == (subject == Subject::Doic),
            "overload control is not on exactly in the measured DOIC agent"
        );
    }
    let agent = &agents[0];
    let mut current = 0;
    let mut extra = Vec::new();
    let mut out = std::io::stdout().lock();
    for line in std::io::stdin().lock().lines() {
        let line = line?;
        let mut words = line.split_whitespace();
        match (words.next(), words.next().map(str::parse::<u64>)) {
            (Some("attach"), Some(Ok(k))) => {
                match subject {
                    Subject::Program => {
                        anyhow::ensure!(
                            agent.start_kernel_telemetry(),
                            "the kernel program did not attach (root and the eBPF toolchain are needed)"
                        );
                        extra = extra_copies(agent, k as usize)?;
                    }
                    Subject::Doic | Subject::Audit => {
                        anyhow::ensure!(k == 0, "no extra copies of DOIC");
                        current = on;
                    }
                }
                writeln!(out, "ok")?;
            }
            (Some("detach"), None) => {
                extra.clear();
                agent.detach_kernel_telemetry();
                current = 0;
                writeln!(out, "ok")?;
            }
            (Some("measure"), Some(Ok(s))) => {
                let measured = &agents[current];
                let addr = measured.local_addrs()[0];
                let mut at_start = (0.0, 0.0, 0.0);
                let r = crate::relay::measure_as(
                    &rt,
                    addr,
                    (Pace::Closed(outstanding), s),
                    doic_client,
                    || {
                        at_start = (cpu_ns(), bpf_run_ns(), relay_cpu_ns(measured));
                    },
                )?;
                let n = r.answered.max(1) as f64;
                let sample = Sample {
                    rate: r.rate(),
                    cpu_ns: (cpu_ns() - at_start.0) / n,
                    bpf_ns: (bpf_run_ns() - at_start.1) / n,
                    relay_ns: (relay_cpu_ns(measured) - at_start.2) / n,
                };
                writeln!(out, "{}", sample.line())?;
            }
            (Some("quit"), None) => break,
            _ => anyhow::bail!("unknown command {line:?}"),
        }
        out.flush()?;
    }
    drop(extra);
    for a in agents {
        a.shutdown();
        a.join();
    }
    server.stop();
    if subject == Subject::Audit {
        let _ = std::fs::remove_dir_all(&audit_dir);
    }
    Ok(())
}

/// The parent's handle on one side (a child process in its namespace).
#[derive(Debug)]
pub struct Side {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Side {
    /// Starts `exe` (this benchmark) as a side in namespace `netns`, on
    /// CPU `cpu` if given.
    ///
    /// # Errors
    /// When the process cannot start.
    pub fn spawn(
        exe: &std::path::Path,
        netns: &str,
        subject: Subject,
        mode: &str,
        (outstanding, doic_client): (usize, bool),
        cpu: Option<usize>,
        cgroup: Option<&std::path::Path>,
    ) -> anyhow::Result<Self> {
        let mut cmd = Command::new(exe);
        cmd.args(["--side", netns, "--mode", mode])
            .args(["--subject", &subject.to_string()])
            .args(["--outstanding", &outstanding.to_string()]);
        if doic_client {
            cmd.arg("--doic-client");
        }
        if let Some(c) = cpu {
            cmd.args(["--cpu", &c.to_string()]);
        }
        if let Some(c) = cgroup {
            cmd.arg("--cgroup").arg(c);
        }
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .with_context(|| format!("starting {}", exe.display()))?;
        let stdin = child.stdin.take().context("no stdin")?;
        let stdout = BufReader::new(child.stdout.take().context("no stdout")?);
        Ok(Self {
            child,
            stdin,
            stdout,
        })
    }

    /// Sends one command (without waiting for its answer).
    ///
    /// # Errors
    /// When the side has exited.
    pub fn send(&mut self, cmd: &str) -> anyhow::Result<()> {
        writeln!(self.stdin, "{cmd}").context("side exited")?;
        self.stdin.flush().context("side exited")
    }

    /// Reads the answer to the last command.
    ///
    /// # Errors
    /// When the side exited (its error is on stderr).
    pub fn answer(&mut self) -> anyhow::Result<String> {
        let mut line = String::new();
        anyhow::ensure!(
            self.stdout.read_line(&mut line)? > 0,
            "a side exited (see its error above)"
        );
        Ok(line.trim().to_owned())
    }

    /// Sends a command and expects `ok`.
    ///
    /// # Errors
    /// Any other answer.
    pub fn command(&mut self, cmd: &str) -> anyhow::Result<()> {
        self.send(cmd)?;
        let a = self.answer()?;
        anyhow::ensure!(a == "ok", "{cmd}: {a}");
        Ok(())
    }

    /// Reads a [`Sample`] answered to `measure`.
    ///
    /// # Errors
    /// A side that exited or a malformed line.
    pub fn sample(&mut self) -> anyhow::Result<Sample> {
        Sample::parse(&self.answer()?)
    }
}

impl Drop for Side {
    fn drop(&mut self) {
        let _ = writeln!(self.stdin, "quit");
        let _ = self.stdin.flush();
        let _ = self.child.wait();
    }
}

/// Measures both sides at the same time for `seconds`.
///
/// # Errors
/// When a side fails.
pub fn measure_both(sides: &mut [Side; 2], seconds: u64) -> anyhow::Result<[Sample; 2]> {
    for s in sides.iter_mut() {
        s.send(&format!("measure {seconds}"))?;
    }
    Ok([sides[0].sample()?, sides[1].sample()?])
}

/// The ratio of two rounds paired so that a constant asymmetry between
/// the sides cancels: in the first round side 0 is the subject (`x0 / y0`),
/// in the second side 1 (`x1 / y1`, side 1 over side 0). With side 0
/// running `k` times as fast as side 1 for reasons of its own, the first
/// ratio carries `k` and the second `1/k`; their geometric mean does not.
#[must_use]
pub fn paired(first: [Sample; 2], second: [Sample; 2]) -> f64 {
    ((first[0].rate / first[1].rate) * (second[1].rate / second[0].rate)).sqrt()
}

/// One cycle's four simultaneous measurements: the program in side 0, in
/// side 1, then in neither, twice.
#[derive(Debug, Clone, Copy)]
pub struct Cycle {
    /// Program in side 0, then in side 1.
    pub with: [[Sample; 2]; 2],
    /// No program, twice.
    pub without: [[Sample; 2]; 2],
}

/// [`paired`] for any per-sample quantity `f`.
fn paired_by(first: [Sample; 2], second: [Sample; 2], f: impl Fn(Sample) -> f64) -> f64 {
    ((f(first[0]) / f(first[1])) * (f(second[1]) / f(second[0]))).sqrt()
}

impl Cycle {
    /// Rate with the program over rate without ([`paired`]).
    #[must_use]
    pub fn throughput(&self) -> f64 {
        paired(self.with[0], self.with[1])
    }

    /// The same statistic with no program anywhere (A/A): 1 but for the
    /// method's own error.
    #[must_use]
    pub fn aa(&self) -> f64 {
        paired(self.without[0], self.without[1])
    }

    /// CPU time per request with the program over without.
    #[must_use]
    pub fn cpu(&self) -> f64 {
        paired_by(self.with[0], self.with[1], |s| s.cpu_ns)
    }

    /// [`Cycle::cpu`] with no program anywhere (A/A).
    #[must_use]
    pub fn aa_cpu(&self) -> f64 {
        paired_by(self.without[0], self.without[1], |s| s.cpu_ns)
    }

    /// The relay worker's CPU time per request with the subject over without
    /// (its inverse is the relay's capacity ratio).
    #[must_use]
    pub fn relay(&self) -> f64 {
        paired_by(self.with[0], self.with[1], |s| s.relay_ns)
    }

    /// [`Cycle::relay`] with the subject off in both sides (A/A).
    #[must_use]
    pub fn aa_relay(&self) -> f64 {
        paired_by(self.without[0], self.without[1], |s| s.relay_ns)
    }

    /// CPU time per second used by the side with the program over the side
    /// without: 1 when both are CPU-bound at the same limit.
    #[must_use]
    pub fn busy(&self) -> f64 {
        paired_by(self.with[0], self.with[1], |s| s.cpu_ns * s.rate)
    }

    /// The program's run time per request over the CPU time per request of
    /// the side without it, mean of both rounds.
    #[must_use]
    pub fn program_share(&self) -> f64 {
        let [a, b] = self.with;
        (a[0].bpf_ns / a[1].cpu_ns + b[1].bpf_ns / b[0].cpu_ns) / 2.0
    }

    /// CPU seconds per second of each side, mean over the cycle.
    #[must_use]
    pub fn utilisation(&self) -> f64 {
        let all = self.with.iter().chain(&self.without).flatten();
        all.map(|s| s.cpu_ns * s.rate / 1e9).sum::<f64>() / 8.0
    }
}

/// `P(X <= k)` for `X ~ Binomial(n, 1/2)`.
fn binom_half_cdf(n: usize, k: usize) -> f64 {
    let mut c = 1.0f64; // C(n, 0)
    let mut sum = 0.0;
    for i in 0..=k.min(n) {
        if i > 0 {
            c = c * (n + 1 - i) as f64 / i as f64;
        }
        sum += c;
    }
    sum / 2f64.powi(n as i32)
}

/// A distribution-free confidence interval of the median of `v` (at least
/// `level`, for example 0.95): the `k`-th smallest and `k`-th largest values
/// with the largest `k` such that `P(Binomial(n, 1/2) < k) <= (1 - level)/2`.
/// `None` when `v` is too short for that level (fewer than 6 values at 95%).
#[must_use]
pub fn median_ci(v: &[f64], level: f64) -> Option<(f64, f64)> {
    let n = v.len();
    let tail = (1.0 - level) / 2.0;
    // k = 1-based rank: the interval [v(k), v(n+1-k)] misses the median with
    // probability 2 P(X <= k - 1).
    let k = (1..=n / 2)
        .take_while(|&k| binom_half_cdf(n, k - 1) <= tail)
        .last()?;
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    Some((s[k - 1], s[n - k]))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(rate: f64) -> Sample {
        Sample {
            rate,
            cpu_ns: 0.0,
            bpf_ns: 0.0,
            relay_ns: 0.0,
        }
    }

    #[test]
    fn pairing_cancels_a_constant_asymmetry() {
        // Side 0 is 7% faster; the subject loses 2% in both rounds.
        let k = 1.07;
        let first = [s(100.0 * k * 0.98), s(100.0)];
        let second = [s(100.0 * k), s(100.0 * 0.98)];
        assert!((paired(first, second) - 0.98).abs() < 1e-12);
    }

    #[test]
    fn a_cycle_separates_the_program_from_the_sides_asymmetry() {
        // Side 1 is 5% slower and uses 5% more CPU per request for reasons
        // of its own; the program costs 4% CPU per request; both sides are
        // CPU-bound at 0.3 CPU.
        let side = |slow: f64, cost: f64| {
            let cpu_ns = 3000.0 * slow * cost;
            Sample {
                rate: 0.3e9 / cpu_ns,
                cpu_ns,
                bpf_ns: if cost > 1.0 { 40.0 } else { 0.0 },
                relay_ns: 1000.0 * slow * cost,
            }
        };
        let c = Cycle {
            with: [
                [side(1.0, 1.04), side(1.05, 1.0)],
                [side(1.0, 1.0), side(1.05, 1.04)],
            ],
            without: [[side(1.0, 1.0), side(1.05, 1.0)]; 2],
        };
        assert!((c.throughput() - 1.0 / 1.04).abs() < 1e-12);
        assert!((c.cpu() - 1.04).abs() < 1e-12);
        assert!((c.aa() - 1.0).abs() < 1e-12);
        assert!((c.aa_cpu() - 1.0).abs() < 1e-12);
        assert!((c.relay() - 1.04).abs() < 1e-12);
        assert!((c.aa_relay() - 1.0).abs() < 1e-12);
        assert!((c.busy() - 1.0).abs() < 1e-12);
        assert!((c.utilisation() - 0.3).abs() < 1e-12);
        let share = (40.0 / 3150.0 + 40.0 / 3000.0) / 2.0;
        assert!((c.program_share() - share).abs() < 1e-12);
    }

    #[test]
    fn median_ci_matches_the_binomial_tables() {
        // n = 5 has no 95% interval (2 / 32 > 0.05); n = 6 gives the
        // extremes (2 / 64 = 3.1%); n = 20 gives ranks 6 and 15 (a 95.9%
        // interval, the usual table value).
        let v: Vec<f64> = (1..=20).map(f64::from).collect();
        assert_eq!(median_ci(&v[..5], 0.95), None);
        assert_eq!(median_ci(&v[..6], 0.95), Some((1.0, 6.0)));
        assert_eq!(median_ci(&v, 0.95), Some((6.0, 15.0)));
    }

    #[test]
    fn samples_round_trip_through_their_line() {
        let x = Sample {
            rate: 41_234.5,
            cpu_ns: 23_456.25,
            bpf_ns: 312.5,
            relay_ns: 700.0,
        };
        assert_eq!(Sample::parse(&x.line()).unwrap(), x);
        assert!(Sample::parse("1 2").is_err());
        assert!(Sample::parse("1 2 3").is_err());
        assert!(Sample::parse("1 x 3").is_err());
    }
}
