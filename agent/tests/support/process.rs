//! Tests of the `doic-agent` binary as a child process: its stderr,
//! collected line by line on a thread while the test goes on, and the
//! runtime of the test's own peers beside it.

use std::io::{BufRead, BufReader};
use std::process::Child;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use super::scratch::Scratch;

/// Takes `child`'s piped stderr and collects its lines as they come; the
/// reader ends (join it) once the child has exited and every line is in.
pub fn collect_lines(child: &mut Child) -> (Arc<Mutex<Vec<String>>>, JoinHandle<()>) {
    let lines = Arc::new(Mutex::new(Vec::new()));
    let (pipe, sink) = (child.stderr.take().unwrap(), lines.clone());
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(pipe).lines().map_while(Result::ok) {
            sink.lock().unwrap().push(line);
        }
    });
    (lines, reader)
}

/// A two-thread runtime for the test's own clients and servers.
pub fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// A `doic-agent` process (`bin`, its arguments) with its stderr collected
/// line by line; killed on drop if still running.
pub struct AgentProcess {
    child: Child,
    lines: Arc<Mutex<Vec<String>>>,
    reader: Option<JoinHandle<()>>,
    /// The files it reads (its configuration), removed after it is killed.
    files: Option<Scratch>,
}

impl AgentProcess {
    /// Starts `bin` with `args`, stdout discarded, `RUST_LOG` unset.
    pub fn spawn(bin: &str, args: &[&std::ffi::OsStr]) -> AgentProcess {
        let mut child = std::process::Command::new(bin)
            .args(args)
            .env_remove("RUST_LOG")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let (lines, reader) = collect_lines(&mut child);
        AgentProcess {
            child,
            lines,
            reader: Some(reader),
            files: None,
        }
    }

    /// The process with the directory of the files it reads, which lives as
    /// long as it does.
    pub fn holding(mut self, files: Scratch) -> AgentProcess {
        self.files = Some(files);
        self
    }

    /// Its process id.
    pub fn pid(&self) -> i32 {
        i32::try_from(self.child.id()).unwrap()
    }

    /// Sends it `signal`.
    pub fn signal(&self, signal: i32) {
        // SAFETY: signals the child this test started.
        unsafe { libc::kill(self.pid(), signal) };
    }

    /// Its stderr lines so far.
    pub fn lines(&self) -> Vec<String> {
        self.lines.lock().unwrap().clone()
    }

    /// Waits (10 s at most) for a line `ok` accepts.
    pub fn wait_for(&self, what: &str, ok: impl Fn(&str) -> bool) -> String {
        let t0 = std::time::Instant::now();
        loop {
            if let Some(l) = self.lines().into_iter().find(|l| ok(l)) {
                return l;
            }
            assert!(
                t0.elapsed() < std::time::Duration::from_secs(10),
                "no {what} line in:\n{}",
                self.lines().join("\n")
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    /// SIGTERM, then the exit status once every line is read.
    pub fn stop(&mut self) -> std::process::ExitStatus {
        self.signal(libc::SIGTERM);
        let t0 = std::time::Instant::now();
        loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                if let Some(r) = self.reader.take() {
                    r.join().unwrap();
                }
                return s;
            }
            assert!(t0.elapsed() < std::time::Duration::from_secs(15), "no exit");
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
}

impl Drop for AgentProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The JSON log lines (`--log-format json`) whose message is `message`.
pub fn events(lines: &[String], message: &str) -> Vec<serde_json::Value> {
    lines
        .iter()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|j| j["fields"]["message"] == message)
        .collect()
}
