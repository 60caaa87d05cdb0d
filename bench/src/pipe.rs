//! A plain byte pipe between a client and a server: the anchor a Diameter
//! relay is compared with in `bench-relay`. It accepts on loopback,
//! connects to the server once per accepted connection and copies bytes
//! both ways, decoding nothing, so its cost is what any TCP hop costs (two
//! more sockets, a read and a write per segment and direction). A relay
//! (RFC 6733 §2.8, §6.1.9) does that work and more: what it adds over the
//! pipe is its own cost.
//!
//! `socat` is used when it is on PATH (the `bench-relay` stage installs
//! it); otherwise the same pipe runs in this process, a thread per
//! direction of each connection with blocking reads and writes, as socat
//! does with one process and `poll`.

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

/// Bytes a pipe thread reads at most at once (socat's default buffer).
const BUFFER: usize = 8192;

/// How long [`BytePipe::start`] waits for socat to listen.
const READY_TIMEOUT: Duration = Duration::from_secs(10);

/// A running byte pipe from [`BytePipe::addr`] to the server; stopped on
/// drop.
#[derive(Debug)]
pub struct BytePipe {
    addr: SocketAddr,
    kind: Kind,
}

#[derive(Debug)]
enum Kind {
    /// A `socat` child process.
    Socat(Child),
    /// The pipe of this process: its accept thread and stop flag.
    Threads {
        stop: Arc<AtomicBool>,
        accept: Option<JoinHandle<()>>,
    },
}

impl BytePipe {
    /// Starts a pipe to `server` on a free loopback port: socat when it is
    /// on PATH, else the pipe of this process.
    ///
    /// # Errors
    /// No free port, socat failing to start or to listen in time.
    pub fn start(server: SocketAddr) -> io::Result<BytePipe> {
        if have_socat() {
            BytePipe::socat(server)
        } else {
            BytePipe::threads(server)
        }
    }

    /// Where clients connect.
    #[must_use]
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// What carries the bytes: `socat` or `threads`.
    #[must_use]
    pub fn name(&self) -> &'static str {
        match self.kind {
            Kind::Socat(_) => "socat",
            Kind::Threads { .. } => "threads",
        }
    }

    /// `socat` accepting on a free loopback port, a child process per
    /// connection (`fork`), Nagle off on both sides as the agent has it.
    fn socat(server: SocketAddr) -> io::Result<BytePipe> {
        let port = interop::process::free_port().map_err(io::Error::other)?;
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let child = Command::new("socat")
            .arg(format!(
                "TCP-LISTEN:{port},bind=127.0.0.1,reuseaddr,fork,nodelay"
            ))
            .arg(format!("TCP:{server},nodelay"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()?;
        let mut pipe = BytePipe {
            addr,
            kind: Kind::Socat(child),
        };
        let t0 = Instant::now();
        // Listening once a connection is accepted; the probe connection
        // makes socat connect to the server once, which closes it again.
        while TcpStream::connect(addr).is_err() {
            if let Kind::Socat(child) = &mut pipe.kind
                && let Some(status) = child.try_wait()?
            {
                return Err(io::Error::other(format!("socat exited with {status}")));
            }
            if t0.elapsed() > READY_TIMEOUT {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("socat not listening on {addr} after {READY_TIMEOUT:?}"),
                ));
            }
            thread::sleep(Duration::from_millis(20));
        }
        Ok(pipe)
    }

    /// The pipe of this process.
    fn threads(server: SocketAddr) -> io::Result<BytePipe> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let accept = {
            let stop = Arc::clone(&stop);
            thread::Builder::new()
                .name("byte-pipe".into())
                .spawn(move || accept_loop(&listener, server, &stop))?
        };
        Ok(BytePipe {
            addr,
            kind: Kind::Threads {
                stop,
                accept: Some(accept),
            },
        })
    }
}

impl Drop for BytePipe {
    fn drop(&mut self) {
        match &mut self.kind {
            Kind::Socat(child) => {
                let _ = child.kill();
                let _ = child.wait();
            }
            Kind::Threads { stop, accept } => {
                stop.store(true, Ordering::Release);
                // Wake the accept thread; it sees the flag and returns.
                let _ = TcpStream::connect(self.addr);
                if let Some(h) = accept.take() {
                    let _ = h.join();
                }
            }
        }
    }
}

fn have_socat() -> bool {
    Command::new("socat")
        .arg("-V")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Accepts until `stop`; each connection gets its own server connection
/// and two copying threads, which end when either side closes.
fn accept_loop(listener: &TcpListener, server: SocketAddr, stop: &AtomicBool) {
    for client in listener.incoming() {
        if stop.load(Ordering::Acquire) {
            return;
        }
        let Ok(client) = client else { continue };
        let Ok(upstream) = TcpStream::connect(server) else {
            // The client sees its connection closed, as with socat.
            continue;
        };
        let _ = (client.set_nodelay(true), upstream.set_nodelay(true));
        let (Ok(client2), Ok(upstream2)) = (client.try_clone(), upstream.try_clone()) else {
            continue;
        };
        let _ = thread::Builder::new()
            .name("byte-pipe-up".into())
            .spawn(move || copy(client, upstream));
        let _ = thread::Builder::new()
            .name("byte-pipe-down".into())
            .spawn(move || copy(upstream2, client2));
    }
}

/// Copies `from` to `to` until end of stream or an error, then closes
/// both directions of the pair so that the other thread ends too.
fn copy(mut from: TcpStream, mut to: TcpStream) {
    let mut buf = [0u8; BUFFER];
    loop {
        match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if to.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
        }
    }
    let _ = to.shutdown(Shutdown::Write);
    let _ = from.shutdown(Shutdown::Read);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An echo server that answers each read with the same bytes.
    fn echo() -> SocketAddr {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        thread::spawn(move || {
            for s in l.incoming().take(2) {
                let mut s = s.unwrap();
                thread::spawn(move || {
                    let mut buf = [0u8; 1024];
                    while let Ok(n) = s.read(&mut buf) {
                        if n == 0 || s.write_all(&buf[..n]).is_err() {
                            break;
                        }
                    }
                });
            }
        });
        addr
    }

    fn round_trip(pipe: &BytePipe) {
        let mut c = TcpStream::connect(pipe.addr()).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let msg: Vec<u8> = (0..20_000u32).map(|i| (i % 251) as u8).collect();
        c.write_all(&msg).unwrap();
        let mut back = vec![0u8; msg.len()];
        c.read_exact(&mut back).unwrap();
        assert_eq!(back, msg);
        // Closing the client's side reaches the server, whose close comes
        // back as end of stream.
        c.shutdown(Shutdown::Write).unwrap();
        let mut rest = Vec::new();
        c.read_to_end(&mut rest).unwrap();
        assert!(rest.is_empty());
    }

    #[test]
    fn the_thread_pipe_carries_bytes_both_ways_and_passes_on_the_close() {
        let pipe = BytePipe::threads(echo()).unwrap();
        assert_eq!(pipe.name(), "threads");
        round_trip(&pipe);
    }

    #[test]
    fn socat_carries_bytes_both_ways_where_installed() {
        if !have_socat() {
            eprintln!("socat not installed: nothing to test");
            return;
        }
        let pipe = BytePipe::socat(echo()).unwrap();
        assert_eq!(pipe.name(), "socat");
        round_trip(&pipe);
    }
}
