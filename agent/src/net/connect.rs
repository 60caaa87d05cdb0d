//! Listeners (RFC 6733 §2.1: a node listens on TCP) and outbound
//! connections to configured peers with the Tc reconnect interval (§2.1:
//! "Tc ... recommended value is 30 seconds"). Each accepted connection runs
//! on the next worker in turn.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};

use crate::agent::Shared;
use crate::net::conn;
use crate::peer::fsm::Role;
use crate::routing::PeerId;

/// How long a dial may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Accepts connections until shutdown; each runs as a responder on the next
/// worker.
pub(crate) async fn listen(shared: Arc<Shared>, listener: std::net::TcpListener) {
    let listener = match TcpListener::from_std(listener) {
        Ok(l) => l,
        Err(e) => {
            tracing::error!(cause = %e, "cannot register listener");
            return;
        }
    };
    let mut shutdown = shared.shutdown.clone();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, remote)) => {
                    tracing::debug!(%remote, "accepted");
                    let Ok(std) = stream.into_std() else { continue };
                    let s = shared.clone();
                    shared.spawn_next(async move {
                        if let Ok(stream) = TcpStream::from_std(std) {
                            conn::run(s, stream, Role::Responder, None).await;
                        }
                    });
                }
                Err(e) => {
                    tracing::warn!(cause = %e, "failed to accept");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            _ = crate::agent::stopped(&mut shutdown) => break,
        }
    }
}

/// Keeps one connection to a configured peer: dial, run, wait Tc, again,
/// until shutdown. Skips dialling while an inbound connection from the peer
/// is open.
pub(crate) async fn dial_loop(shared: Arc<Shared>, peer: PeerId, addr: SocketAddr) {
    let mut shutdown = shared.shutdown.clone();
    let tc = shared.config.tc();
    loop {
        if *shutdown.borrow() {
            break;
        }
        let busy = shared.table.get(peer).is_none_or(|s| s.has_connection());
        if !busy {
            match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(addr)).await {
                Ok(Ok(stream)) => {
                    conn::run(shared.clone(), stream, Role::Initiator, Some(peer)).await;
                }
                Ok(Err(e)) => tracing::debug!(%addr, cause = %e, "connect failed"),
                Err(_) => tracing::debug!(%addr, "connect timed out"),
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(tc) => {}
            _ = crate::agent::stopped(&mut shutdown) => break,
        }
    }
}
