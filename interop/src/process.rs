//! Process plumbing for the third-party peers: where their files are, private
//! run directories, free loopback ports, spawned daemons that stop when
//! dropped, and bounded waits for readiness.
//!
//! Nothing here speaks Diameter; it is the RFC 6733 §2.1 transport edge
//! (TCP on loopback) seen from the outside of the peers.

use std::fs;
use std::io::{self, Read, Seek, SeekFrom};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use crate::Error;

/// Directory of the peer artefacts built by `cargo xtask test --only interop`
/// (`test_app.fdx`, `bindlo.so`): `$DOIC_PEERS_DIR`, else `target/peers` of
/// the workspace.
#[must_use]
pub fn peers_dir() -> PathBuf {
    std::env::var_os("DOIC_PEERS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("..")
                .join("target")
                .join("peers")
        })
}

/// Directory of the project-owned support files (escript, shim source,
/// tshark dictionary additions): `interop/peers`.
#[must_use]
pub fn support_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("peers")
}

/// Fails with [`Error::Missing`] unless `path` exists.
pub(crate) fn require(path: &Path, hint: &str) -> Result<(), Error> {
    if path.exists() {
        Ok(())
    } else {
        Err(Error::Missing {
            path: path.to_path_buf(),
            hint: hint.to_owned(),
        })
    }
}

/// A private directory for one peer's configuration and log, removed on drop
/// unless `DOIC_INTEROP_KEEP` is set (then its path is printed).
#[derive(Debug)]
pub struct RunDir {
    path: PathBuf,
}

impl RunDir {
    /// Creates a fresh directory `<tmp>/doic-interop-<pid>-<n>-<tag>`.
    ///
    /// # Errors
    /// [`Error::Io`] when the directory cannot be created.
    pub fn new(tag: &str) -> Result<Self, Error> {
        static N: AtomicU32 = AtomicU32::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let path =
            std::env::temp_dir().join(format!("doic-interop-{}-{n}-{tag}", std::process::id()));
        if path.exists() {
            fs::remove_dir_all(&path).map_err(|e| Error::io(&path, e))?;
        }
        fs::create_dir_all(&path).map_err(|e| Error::io(&path, e))?;
        Ok(Self { path })
    }

    /// The directory.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Writes `name` in the directory and returns its path.
    ///
    /// # Errors
    /// [`Error::Io`] when the file cannot be written.
    pub fn write(&self, name: &str, contents: &str) -> Result<PathBuf, Error> {
        let p = self.path.join(name);
        fs::write(&p, contents).map_err(|e| Error::io(&p, e))?;
        Ok(p)
    }

    /// Spawns `cmd` as the daemon `name`, its output in `<dir>/<name>.log`.
    ///
    /// # Errors
    /// As [`Daemon::spawn`].
    pub fn spawn(&self, name: &str, cmd: Command) -> Result<Daemon, Error> {
        Daemon::spawn(name, cmd, &self.path.join(format!("{name}.log")))
    }

    /// [`spawn`](Self::spawn), then waits until the daemon's log shows
    /// `ready`, at most `timeout`.
    ///
    /// # Errors
    /// As [`Daemon::spawn`] and [`Daemon::wait_log`].
    pub fn spawn_ready(
        &self,
        name: &str,
        cmd: Command,
        ready: &str,
        timeout: Duration,
    ) -> Result<Daemon, Error> {
        let mut daemon = self.spawn(name, cmd)?;
        daemon.wait_log(ready, 0, timeout)?;
        Ok(daemon)
    }
}

impl Drop for RunDir {
    fn drop(&mut self) {
        if std::env::var_os("DOIC_INTEROP_KEEP").is_some() {
            eprintln!("interop: kept {}", self.path.display());
        } else {
            let _ = fs::remove_dir_all(&self.path);
        }
    }
}

/// First port [`free_port`] hands out: below the kernel's ephemeral range
/// (32768-60999 by default), so no outgoing connection can hold it.
pub const PORT_BASE: u16 = 20_000;
/// Number of ports [`free_port`] chooses from.
pub const PORT_SPAN: u16 = 12_000;

/// Returns a TCP port that is free on both 127.0.0.1 and ::1 and reserved
/// for this process until it exits, so tests can run in parallel, in one
/// process or many (nextest).
///
/// Ports come from [`PORT_BASE`]..[`PORT_BASE`]+[`PORT_SPAN`], outside the
/// ephemeral range. The reservation is an advisory `flock` on
/// `<tmp>/doic-interop-ports/<port>`, which the kernel releases when the
/// process ends, however it ends.
///
/// # Errors
/// [`Error::Io`] when no port can be reserved.
pub fn free_port() -> Result<u16, Error> {
    static HELD: Mutex<Vec<fs::File>> = Mutex::new(Vec::new());
    let dir = std::env::temp_dir().join("doic-interop-ports");
    fs::create_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;
    let seed = std::process::id().wrapping_mul(2_654_435_761)
        ^ std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
    let start = u16::try_from(seed % u32::from(PORT_SPAN)).unwrap_or(0);
    for i in 0..PORT_SPAN {
        let port = PORT_BASE + (start + i) % PORT_SPAN;
        let path = dir.join(port.to_string());
        let Ok(file) = fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
        else {
            continue;
        };
        // SAFETY: flock(2) on a descriptor we own; no memory is involved.
        let locked = unsafe {
            libc::flock(
                std::os::fd::AsRawFd::as_raw_fd(&file),
                libc::LOCK_EX | libc::LOCK_NB,
            )
        } == 0;
        if !locked {
            continue;
        }
        let free = TcpListener::bind((Ipv4Addr::LOCALHOST, port)).is_ok()
            && TcpListener::bind((Ipv6Addr::LOCALHOST, port)).is_ok();
        if free {
            HELD.lock().unwrap_or_else(|p| p.into_inner()).push(file);
            return Ok(port);
        }
    }
    Err(Error::Io {
        path: dir,
        source: io::Error::new(io::ErrorKind::AddrInUse, "no free loopback port found"),
    })
}

/// `port`, or else a [`free_port`].
///
/// # Errors
/// As [`free_port`].
pub fn port_or_free(port: Option<u16>) -> Result<u16, Error> {
    match port {
        Some(p) => Ok(p),
        None => free_port(),
    }
}

/// Polls `check` every 20 ms until it yields a value or `timeout` passes.
///
/// # Errors
/// Whatever `check` returns, or [`Error::Timeout`] naming `what`.
pub fn wait_for<T>(
    what: &str,
    timeout: Duration,
    mut check: impl FnMut() -> Result<Option<T>, Error>,
) -> Result<T, Error> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = check()? {
            return Ok(v);
        }
        if Instant::now() >= deadline {
            return Err(Error::Timeout {
                what: what.to_owned(),
                after: timeout,
            });
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// True when a TCP connection to `addr` succeeds within 200 ms.
#[must_use]
pub fn tcp_accepts(addr: SocketAddr) -> bool {
    TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok()
}

/// The local addresses of the TCP sockets listening on `port`, read from
/// `/proc/net/tcp` and `/proc/net/tcp6` (state 0A = LISTEN). Lets a test
/// prove that a peer listens on loopback only.
#[must_use]
pub fn tcp_listeners(port: u16) -> Vec<std::net::IpAddr> {
    let mut out = Vec::new();
    for (file, v6) in [("/proc/net/tcp", false), ("/proc/net/tcp6", true)] {
        let Ok(text) = fs::read_to_string(file) else {
            continue;
        };
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            let (Some(local), Some(state)) = (f.get(1), f.get(3)) else {
                continue;
            };
            let Some((addr, p)) = local.split_once(':') else {
                continue;
            };
            if *state != "0A" || u16::from_str_radix(p, 16).ok() != Some(port) {
                continue;
            }
            if let Some(ip) = proc_addr(addr, v6) {
                out.push(ip);
            }
        }
    }
    out
}

/// Decodes a `/proc/net/tcp*` address: 32-bit words in host (little-endian) order.
fn proc_addr(hex: &str, v6: bool) -> Option<std::net::IpAddr> {
    let words: Vec<u32> = (0..hex.len() / 8)
        .map(|i| u32::from_str_radix(hex.get(8 * i..8 * i + 8)?, 16).ok())
        .collect::<Option<_>>()?;
    let bytes: Vec<u8> = words
        .iter()
        .flat_map(|w| w.swap_bytes().to_be_bytes())
        .collect();
    if v6 {
        let b: [u8; 16] = bytes.try_into().ok()?;
        Some(std::net::IpAddr::from(b))
    } else {
        let b: [u8; 4] = bytes.try_into().ok()?;
        Some(std::net::IpAddr::from(b))
    }
}

/// A spawned peer process with its output in a log file. It runs in its own
/// process group; dropping it sends SIGTERM to that group, waits up to two
/// seconds, then sends SIGKILL.
#[derive(Debug)]
pub struct Daemon {
    name: String,
    child: Child,
    log: PathBuf,
    status: Option<ExitStatus>,
}

impl Daemon {
    /// Spawns `cmd` with stdin closed and stdout and stderr appended to `log`.
    ///
    /// # Errors
    /// [`Error::Spawn`] when the program cannot be started.
    pub fn spawn(name: &str, mut cmd: Command, log: &Path) -> Result<Self, Error> {
        let out = fs::File::create(log).map_err(|e| Error::io(log, e))?;
        let err = out.try_clone().map_err(|e| Error::io(log, e))?;
        cmd.stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .process_group(0);
        let child = cmd.spawn().map_err(|source| Error::Spawn {
            program: format!("{:?}", cmd.get_program()),
            source,
        })?;
        tracing::debug!(name, pid = child.id(), log = %log.display(), "peer started");
        Ok(Self {
            name: name.to_owned(),
            child,
            log: log.to_path_buf(),
            status: None,
        })
    }

    /// The process id.
    #[must_use]
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The name given at spawn time.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The log file (stdout and stderr).
    #[must_use]
    pub fn log_path(&self) -> &Path {
        &self.log
    }

    /// The whole log so far (lossy UTF-8; empty when unreadable).
    #[must_use]
    pub fn log(&self) -> String {
        read_lossy(&self.log, 0)
    }

    /// The last `n` lines of the log.
    #[must_use]
    pub fn log_tail(&self, n: usize) -> String {
        let text = self.log();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }

    /// The exit status, if the process has ended.
    ///
    /// # Errors
    /// [`Error::Io`] when the status cannot be read.
    pub fn try_status(&mut self) -> Result<Option<ExitStatus>, Error> {
        if self.status.is_none() {
            self.status = self.child.try_wait().map_err(|e| Error::io(&self.log, e))?;
        }
        Ok(self.status)
    }

    /// Fails with [`Error::Exited`] (with the log tail) when the process ended.
    ///
    /// # Errors
    /// [`Error::Exited`] when the process is no longer running.
    pub fn ensure_running(&mut self) -> Result<(), Error> {
        match self.try_status()? {
            None => Ok(()),
            Some(status) => Err(Error::Exited {
                name: self.name.clone(),
                status: status.to_string(),
                log_tail: self.log_tail(30),
            }),
        }
    }

    /// Waits until the log contains `needle` (searching from byte `from`),
    /// the process exits, or `timeout` passes. Returns the byte offset just
    /// after the match.
    ///
    /// # Errors
    /// [`Error::Exited`] or [`Error::Timeout`].
    pub fn wait_log(
        &mut self,
        needle: &str,
        from: usize,
        timeout: Duration,
    ) -> Result<usize, Error> {
        let what = format!("{:?} in the log of {}", needle, self.name);
        let log = self.log.clone();
        wait_for(&what, timeout, || {
            let text = read_lossy(&log, from as u64);
            if let Some(i) = text.find(needle) {
                return Ok(Some(from + i + needle.len()));
            }
            self.ensure_running()?;
            Ok(None)
        })
        .map_err(|e| self.with_tail(e))
    }

    /// Waits for the process to exit by itself, at most `timeout`.
    ///
    /// # Errors
    /// [`Error::Timeout`] (the process is then killed on drop).
    pub fn wait_exit(&mut self, timeout: Duration) -> Result<ExitStatus, Error> {
        let what = format!("exit of {}", self.name);
        wait_for(&what, timeout, || self.try_status()).map_err(|e| self.with_tail(e))
    }

    /// Sends `signal` (e.g. `libc::SIGUSR1`) to the process.
    ///
    /// # Errors
    /// [`Error::Io`] when the signal cannot be delivered.
    pub fn signal(&self, signal: i32) -> Result<(), Error> {
        let pid = i32::try_from(self.child.id()).unwrap_or(i32::MAX);
        // SAFETY: kill(2) with a pid we spawned and still own (not yet reaped
        // when `status` is None); it has no memory-safety preconditions.
        let rc = unsafe { libc::kill(pid, signal) };
        if rc == 0 {
            Ok(())
        } else {
            Err(Error::io(&self.log, io::Error::last_os_error()))
        }
    }

    /// Kills the process group at once with SIGKILL (a crash, for fault
    /// tests: no DPR, no FIN handshake at the Diameter level) and reaps it.
    ///
    /// # Errors
    /// [`Error::Io`] when waiting fails.
    pub fn kill(&mut self) -> Result<ExitStatus, Error> {
        if let Some(s) = self.try_status()? {
            return Ok(s);
        }
        let pgid = i32::try_from(self.child.id()).unwrap_or(i32::MAX);
        // SAFETY: signals the process group we created with process_group(0);
        // the leader is not reaped yet, so the id still names our group.
        unsafe { libc::kill(-pgid, libc::SIGKILL) };
        let s = self.child.wait().map_err(|e| Error::io(&self.log, e))?;
        self.status = Some(s);
        Ok(s)
    }

    /// Stops the process (SIGTERM to its group, SIGKILL after two seconds)
    /// and returns its exit status.
    ///
    /// # Errors
    /// [`Error::Io`] when waiting fails.
    pub fn stop(&mut self) -> Result<ExitStatus, Error> {
        if let Some(s) = self.try_status()? {
            return Ok(s);
        }
        let pgid = i32::try_from(self.child.id()).unwrap_or(i32::MAX);
        // SAFETY: signals the process group we created with process_group(0);
        // the leader is not reaped yet, so the id still names our group.
        unsafe { libc::kill(-pgid, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(2);
        while Instant::now() < deadline {
            if let Some(s) = self.try_status()? {
                return Ok(s);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        // SAFETY: as above; the leader is still not reaped.
        unsafe { libc::kill(-pgid, libc::SIGKILL) };
        let s = self.child.wait().map_err(|e| Error::io(&self.log, e))?;
        self.status = Some(s);
        tracing::debug!(name = %self.name, "peer killed after SIGTERM timeout");
        Ok(s)
    }

    fn with_tail(&self, e: Error) -> Error {
        match e {
            Error::Timeout { what, after } => Error::TimeoutLog {
                what,
                after,
                log_tail: self.log_tail(30),
            },
            other => other,
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.stop();
    }
}

/// Reads a file from byte `from` as lossy UTF-8 (empty when unreadable).
pub(crate) fn read_lossy(path: &Path, from: u64) -> String {
    let mut buf = Vec::new();
    if let Ok(mut f) = fs::File::open(path)
        && f.seek(SeekFrom::Start(from)).is_ok()
    {
        let _ = f.read_to_end(&mut buf);
    }
    String::from_utf8_lossy(&buf).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_proc_net_addresses() {
        assert_eq!(
            proc_addr("0100007F", false),
            Some("127.0.0.1".parse().unwrap())
        );
        assert_eq!(
            proc_addr("00000000", false),
            Some("0.0.0.0".parse().unwrap())
        );
        assert_eq!(
            proc_addr("00000000000000000000000001000000", true),
            Some("::1".parse().unwrap())
        );
        assert_eq!(proc_addr("zz", false), None);
    }

    #[test]
    fn free_ports_are_distinct_bindable_and_outside_the_ephemeral_range() {
        let ports: Vec<u16> = (0..20).map(|_| free_port().unwrap()).collect();
        let mut sorted = ports.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), ports.len());
        for p in ports {
            assert!((PORT_BASE..PORT_BASE + PORT_SPAN).contains(&p));
            TcpListener::bind((Ipv4Addr::LOCALHOST, p)).unwrap();
            TcpListener::bind((Ipv6Addr::LOCALHOST, p)).unwrap();
        }
    }

    #[test]
    fn sees_a_listener_of_this_process() {
        let l = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let port = l.local_addr().unwrap().port();
        assert_eq!(
            tcp_listeners(port),
            vec![std::net::IpAddr::from(Ipv4Addr::LOCALHOST)]
        );
    }
}
