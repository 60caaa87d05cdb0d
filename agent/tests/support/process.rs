//! Tests of the `doic-agent` binary as a child process: its stderr,
//! collected line by line on a thread while the test goes on, and the
//! runtime of the test's own peers beside it.

use std::io::{BufRead, BufReader};
use std::process::Child;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

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
