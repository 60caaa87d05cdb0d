//! [`Liveness`] of a connection's socket, for the reconnect race of RFC 6733
//! §5.6.4 (see [`crate::peer::table`]): a duplicate of the socket's
//! descriptor, polled without waiting, tells another worker that the peer
//! has closed (FIN, `POLLRDHUP`, even with unread bytes before it) or reset
//! (`POLLHUP`/`POLLERR`) the connection before the task owning it has read
//! that far.

use std::os::fd::{AsFd, AsRawFd, OwnedFd};

use tokio::net::TcpStream;

use crate::peer::table::Liveness;

/// A connection's socket, seen from any thread.
#[derive(Debug)]
pub(crate) struct SocketLiveness(OwnedFd);

impl SocketLiveness {
    /// A probe of `stream`; `None` when the descriptor cannot be duplicated
    /// (then the connection counts as alive).
    pub(crate) fn of(stream: &TcpStream) -> Option<Self> {
        stream.as_fd().try_clone_to_owned().ok().map(Self)
    }
}

impl Liveness for SocketLiveness {
    fn ended(&self) -> bool {
        let mut p = libc::pollfd {
            fd: self.0.as_raw_fd(),
            events: libc::POLLRDHUP,
            revents: 0,
        };
        // SAFETY: one valid pollfd for a descriptor this value owns; a zero
        // timeout never blocks.
        let n = unsafe { libc::poll(&raw mut p, 1, 0) };
        n > 0 && p.revents & (libc::POLLRDHUP | libc::POLLHUP | libc::POLLERR) != 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;

    #[tokio::test]
    async fn a_closed_or_reset_peer_is_seen_at_once() {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut c = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
        let (s, _) = l.accept().await.unwrap();
        let live = SocketLiveness::of(&s).unwrap();
        assert!(!live.ended(), "open and idle");
        c.write_all(b"unread").await.unwrap();
        c.shutdown().await.unwrap();
        drop(c);
        // the FIN arrives behind the unread bytes
        let t0 = std::time::Instant::now();
        while !live.ended() {
            assert!(t0.elapsed() < std::time::Duration::from_secs(5));
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
    }
}
