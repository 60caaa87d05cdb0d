//! Listeners (RFC 6733 §2.1: a node listens on TCP) and outbound
//! connections to configured peers with the Tc reconnect interval (§2.1:
//! "Tc ... recommended value is 30 seconds"). Each accepted connection runs
//! on the worker [`crate::workers::place`] picks, once [`crate::admission`]
//! lets it wait for its CER (§5.3); the excess is closed at once.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::net::ConnCtx;
use crate::net::conn::{self, Waiting};
use crate::net::stream::{HandshakeError, Stream};
use crate::routing::PeerId;
use crate::tls::{ClientTls, ServerTls};
use crate::workers::Workers;
use diameter::peer::fsm::Role;

/// At most one log line per this interval about connections closed before
/// CER; the line counts the others.
const REFUSAL_LOG_INTERVAL: Duration = Duration::from_secs(10);

/// Sets the accept queue of a listening socket (Linux: `listen` on a
/// listening socket changes its backlog; the kernel caps it at
/// `net.core.somaxconn`).
///
/// # Errors
/// The `listen(2)` error.
pub(crate) fn set_backlog(l: &std::net::TcpListener, backlog: u32) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let backlog = libc::c_int::try_from(backlog).unwrap_or(libc::c_int::MAX);
    // SAFETY: the descriptor is a socket owned by `l` for the whole call.
    if unsafe { libc::listen(l.as_raw_fd(), backlog) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Sets a socket's kernel receive and send buffers to `bytes` each
/// (`SO_RCVBUF`, `SO_SNDBUF`; `node.socket_buffer_bytes`). Set on a
/// listener, they are what its accepted connections start with; set on a
/// socket before it connects, the window it offers in its SYN fits them.
///
/// # Errors
/// The `setsockopt(2)` error.
pub(crate) fn set_buffers(fd: &impl std::os::fd::AsRawFd, bytes: u32) -> std::io::Result<()> {
    let v = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
    for opt in [libc::SO_RCVBUF, libc::SO_SNDBUF] {
        // SAFETY: the descriptor is a socket owned by the caller for the
        // whole call; `v` outlives it and its size is passed.
        let r = unsafe {
            libc::setsockopt(
                fd.as_raw_fd(),
                libc::SOL_SOCKET,
                opt,
                (&raw const v).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if r != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Connects to `addr`, the socket's buffers first set to `buffers` when
/// given ([`set_buffers`]).
async fn connect(addr: SocketAddr, buffers: Option<u32>) -> std::io::Result<TcpStream> {
    let Some(bytes) = buffers else {
        return TcpStream::connect(addr).await;
    };
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    set_buffers(&socket, bytes)?;
    socket.connect(addr).await
}

/// Rate-limited warnings about connections closed before their CER.
#[derive(Default)]
struct RefusalLog {
    last: Option<Instant>,
    unlogged: u64,
}

impl RefusalLog {
    fn note(&mut self, source: IpAddr, cause: &dyn std::fmt::Display, next: &'static str) {
        let now = Instant::now();
        if self
            .last
            .is_some_and(|t| now.duration_since(t) < REFUSAL_LOG_INTERVAL)
        {
            self.unlogged += 1;
            return;
        }
        tracing::warn!(
            %source,
            %cause,
            others_since_last = self.unlogged,
            next,
            "closing connection before capabilities exchange"
        );
        self.last = Some(now);
        self.unlogged = 0;
    }
}

/// How long a dial may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// After the first failed dial of a peer, one warning per this many
/// failures (the count in the line); every failure is logged at DEBUG.
const DIAL_WARN_EVERY: u64 = 10;

/// Failed dials of one peer since it was last reached: the first one and
/// every [`DIAL_WARN_EVERY`]th are warnings, a change of cause too.
#[derive(Default)]
struct DialFailures {
    count: u64,
    last_cause: String,
}

impl DialFailures {
    /// Records a failed dial of `peer` at `addr`; true when it was logged
    /// at WARN.
    fn failed(&mut self, peer: &str, addr: SocketAddr, cause: &str, tc: Duration) -> bool {
        self.count += 1;
        let warn = self.count % DIAL_WARN_EVERY == 1 || cause != self.last_cause;
        if warn {
            tracing::warn!(
                %peer,
                %addr,
                %cause,
                failures = self.count,
                retry_every = ?tc,
                "cannot connect to peer; retrying"
            );
        } else {
            tracing::debug!(%peer, %addr, %cause, failures = self.count, "connect failed");
        }
        cause.clone_into(&mut self.last_cause);
        warn
    }

    /// Records that `peer` was reached at `addr` (its capabilities exchange
    /// follows; `peer up` says when it opens).
    fn connected(&mut self, peer: &str, addr: SocketAddr) {
        if self.count > 0 {
            tracing::info!(%peer, %addr, failures = self.count, "connected to peer after failed attempts");
        }
        *self = Self::default();
    }
}

/// Warns about each route that lists `peer` and has no peer up (RFC 6733
/// §6.1.5: its requests are answered 3002).
fn warn_routes_without_peer_up(ctx: &ConnCtx, peer: PeerId) {
    let table = &ctx.relay.table;
    let routes = ctx.relay.routes.held();
    for (realm, peers) in routes.router().realms_of(peer) {
        if peers
            .iter()
            .all(|&p| table.get(p).is_none_or(|s| !s.is_open()))
        {
            tracing::warn!(
                %realm,
                peers = %table.describe_down(&peers),
                "route has no peer up: its requests are answered 3002"
            );
        }
    }
}

/// The dialled connection's stream: TCP, or TLS after its handshake.
async fn secure(
    tcp: TcpStream,
    tls: Option<&ClientTls>,
    host: &str,
) -> Result<Stream, HandshakeError> {
    match tls {
        None => Ok(Stream::Tcp(tcp)),
        Some(tls) => Stream::connect(tcp, tls, host, CONNECT_TIMEOUT).await,
    }
}

/// Accepts connections until shutdown; each runs as a responder on the
/// worker [`crate::workers::place`] picks.
pub(crate) async fn listen(
    ctx: Arc<ConnCtx>,
    workers: Arc<Workers>,
    listener: std::net::TcpListener,
    tls: Option<Arc<ServerTls>>,
) {
    let tls = tls.map(|m| Arc::new(conn::TlsListener::new(m)));
    let listener = match TcpListener::from_std(listener) {
        Ok(l) => l,
        Err(e) => {
            tracing::error!(cause = %e, "cannot register listener");
            return;
        }
    };
    let stop = ctx.stop.clone();
    let mut log = RefusalLog::default();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, remote)) => {
                    tracing::debug!(%remote, "accepted");
                    let evict = Arc::new(Notify::new());
                    let admitted = match ctx.admission.admit(remote.ip(), evict.clone()) {
                        Ok(a) => a,
                        Err(refusal) => {
                            drop(stream);
                            log.note(remote.ip(), &refusal, "closed at once; the source may retry");
                            continue;
                        }
                    };
                    if let Some((source, handle)) = admitted.evicted {
                        handle.notify_one();
                        let cause = "a lighter source needed the place of its oldest connection waiting for CER";
                        log.note(source, &cause, "evicted; the source may retry");
                    }
                    let waiting = Waiting { ticket: admitted.ticket, evict };
                    let Ok(std) = stream.into_std() else {
                        ctx.admission.release(&waiting.ticket);
                        continue;
                    };
                    let s = ctx.clone();
                    let tls = tls.clone();
                    workers.spawn_accepted(async move {
                        match TcpStream::from_std(std) {
                            Ok(stream) => conn::accept(s, stream, waiting, tls).await,
                            Err(_) => s.admission.release(&waiting.ticket),
                        }
                    });
                }
                Err(e) => {
                    tracing::warn!(cause = %e, "failed to accept");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            () = stop.stopped() => break,
        }
    }
}

/// Keeps one connection to a configured peer: dial, run, wait Tc, again,
/// until shutdown. Skips dialling while an inbound connection from the peer
/// is open. With `tls` each connection starts with the TLS handshake
/// (RFC 6733 §13.1).
pub(crate) async fn dial_loop(
    ctx: Arc<ConnCtx>,
    peer: PeerId,
    addr: SocketAddr,
    tls: Option<Arc<ClientTls>>,
) {
    let stop = ctx.stop.clone();
    let tc = ctx.config.tc();
    let buffers = ctx.config.node.socket_buffer_bytes;
    let mut failures = DialFailures::default();
    loop {
        if stop.is_stopping() {
            break;
        }
        let slot = ctx.relay.table.get(peer);
        if slot.as_ref().is_none_or(|s| s.is_retired()) {
            // Removed by a reload: its connection (if any) says DPR.
            break;
        }
        let busy = slot.as_ref().is_none_or(|s| s.has_connection());
        if let (false, Some(slot)) = (busy, slot) {
            let since = Instant::now();
            let cause = match tokio::time::timeout(CONNECT_TIMEOUT, connect(addr, buffers)).await {
                Ok(Ok(tcp)) => match secure(tcp, tls.as_deref(), &slot.host).await {
                    Ok(stream) => {
                        failures.connected(&slot.host, addr);
                        let c = ctx.clone();
                        conn::run(c, stream, Role::Initiator, Some(peer), None, since).await;
                        None
                    }
                    Err(e) => Some(e.to_string()),
                },
                Ok(Err(e)) => Some(e.to_string()),
                Err(_) => Some(format!("no answer within {CONNECT_TIMEOUT:?}")),
            };
            if let Some(cause) = cause {
                slot.note_down(&cause);
                if failures.failed(&slot.host, addr, &cause, tc) {
                    warn_routes_without_peer_up(&ctx, peer);
                }
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(tc) => {}
            () = stop.stopped() => break,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Connections the kernel completes on a listener nobody accepts from.
    async fn completed(l: &std::net::TcpListener, n: usize) -> usize {
        let addr = l.local_addr().unwrap();
        let dials = (0..n).map(|_| {
            tokio::spawn(async move {
                tokio::time::timeout(Duration::from_secs(2), TcpStream::connect(addr)).await
            })
        });
        let mut held = Vec::new();
        for d in dials.collect::<Vec<_>>() {
            if let Ok(Ok(Ok(s))) = d.await {
                held.push(s);
            }
        }
        held.len()
    }

    /// A socket option's value (`getsockopt(2)`, `SOL_SOCKET`).
    fn sockopt(fd: &impl std::os::fd::AsRawFd, opt: libc::c_int) -> libc::c_int {
        let mut v: libc::c_int = 0;
        let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: `v` and `len` outlive the call, `len` is `v`'s size.
        let r = unsafe {
            libc::getsockopt(
                fd.as_raw_fd(),
                libc::SOL_SOCKET,
                opt,
                (&raw mut v).cast(),
                &raw mut len,
            )
        };
        assert_eq!(r, 0, "{}", std::io::Error::last_os_error());
        v
    }

    #[tokio::test]
    async fn bounded_buffers_are_what_accepted_and_dialled_connections_get() {
        // Linux books twice the figure set (socket(7), SO_RCVBUF).
        let bytes = 16_384;
        let bounded = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        set_buffers(&bounded, bytes).unwrap();
        bounded.set_nonblocking(true).unwrap();
        let bounded = TcpListener::from_std(bounded).unwrap();
        let dialled = connect(bounded.local_addr().unwrap(), Some(bytes))
            .await
            .unwrap();
        let (accepted, _) = bounded.accept().await.unwrap();
        for s in [&accepted, &dialled] {
            assert_eq!(sockopt(s, libc::SO_RCVBUF), 2 * 16_384);
            assert_eq!(sockopt(s, libc::SO_SNDBUF), 2 * 16_384);
        }
        // Unset: the kernel's own sizes (net.ipv4.tcp_rmem's default).
        let free = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let dialled = connect(free.local_addr().unwrap(), None).await.unwrap();
        let (accepted, _) = free.accept().await.unwrap();
        for s in [&accepted, &dialled] {
            assert_ne!(sockopt(s, libc::SO_RCVBUF), 2 * 16_384);
        }
    }

    #[tokio::test]
    async fn the_backlog_holds_a_burst_that_the_default_drops() {
        // The kernel caps every backlog at net.core.somaxconn.
        let somaxconn: usize = std::fs::read_to_string("/proc/sys/net/core/somaxconn")
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(4096);
        let n = somaxconn.min(600);
        let sized = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        set_backlog(&sized, 4096).unwrap();
        assert_eq!(completed(&sized, n).await, n);
        // std's default backlog (128) against the same burst.
        let default = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        assert!(n <= 200 || completed(&default, n).await < n);
    }
}
