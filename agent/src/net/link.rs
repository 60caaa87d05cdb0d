//! A connection's two queues ([`Link`]), between workers: bounded tokio
//! channels, which work across runtimes and wake the receiving one.
//!
//! - Requests for the connection's peer: at most `node.upstream_queue`
//!   queued; a request that finds the queue full comes back to the relay
//!   ([`Undelivered::Full`]), which answers it 3004 at once (RFC 6733
//!   §7.1.3).
//! - Answers and notices for the connection: an answer is never dropped, so
//!   this queue is sized to be unable to fill. Each answer on it answers
//!   one of the connection's pending requests (every relayed request gets
//!   exactly one answer, through this queue), and the connection relays a
//!   request only while fewer than `node.max_pending_per_connection` are
//!   pending; a request stays pending until its answer is taken off the
//!   queue, so no more than that many answers are ever queued. The
//!   notices a connection can get, each at most once ([`ToConn::Close`] or
//!   [`ToConn::Replaced`], and [`ToConn::Retire`] from a reload), make the
//!   capacity that plus two. Should it fill all the same, the
//!   message is not dropped: a task waits for room, counted in
//!   [`IoStats::answer_queue_full`].
//!
//! The receiving task takes what is queued in batches (`recv_many`): one
//! wake-up, one release of the queue's permits, one write for all.
//!
//! A message queued from another worker than the connection's is a
//! hand-off between threads, counted in [`IoStats::handoffs`] (one relaxed
//! add, on that path only; docs/relay.md, "Throughput and cores").

use std::sync::Arc;
use std::sync::atomic::Ordering;

use tokio::sync::mpsc::error::TrySendError;
use tokio::sync::mpsc::{Receiver, Sender, channel};

use super::IoStats;
use crate::overload::current_worker;
use crate::peer::table::{Link, Relayed, ToConn, Undelivered};

/// The sending side of a connection's queues (the [`Link`] of its slot and
/// of its requests' replies).
#[derive(Debug)]
pub(crate) struct ConnLink {
    requests: Sender<Relayed>,
    msgs: Sender<ToConn>,
    io: Arc<IoStats>,
    /// The worker the connection runs on (`None`: not on a worker).
    worker: Option<usize>,
}

/// The receiving side, owned by the connection's task.
#[derive(Debug)]
pub(crate) struct Inbox {
    /// Requests for the connection's peer.
    pub(crate) requests: Receiver<Relayed>,
    /// Answers and notices for the connection.
    pub(crate) msgs: Receiver<ToConn>,
}

/// A connection's queues: `upstream` requests, `max_pending` answers (and
/// its two notices). Made by the connection's task, on its worker.
pub(crate) fn link(
    upstream: usize,
    max_pending: usize,
    io: Arc<IoStats>,
) -> (Arc<ConnLink>, Inbox) {
    let (requests, req_rx) = channel(upstream.max(1));
    let (msgs, msg_rx) = channel(max_pending.saturating_add(2));
    (
        Arc::new(ConnLink {
            requests,
            msgs,
            io,
            worker: current_worker(),
        }),
        Inbox {
            requests: req_rx,
            msgs: msg_rx,
        },
    )
}

impl Link for ConnLink {
    fn request(&self, r: Relayed) -> Result<(), (Relayed, Undelivered)> {
        self.note_handoff();
        self.requests.try_send(r).map_err(|e| match e {
            TrySendError::Full(r) => (r, Undelivered::Full),
            TrySendError::Closed(r) => (r, Undelivered::Gone),
        })
    }

    fn send(&self, m: ToConn) {
        self.note_handoff();
        match self.msgs.try_send(m) {
            Ok(()) | Err(TrySendError::Closed(_)) => {}
            Err(TrySendError::Full(m)) => self.overflow(m),
        }
    }
}

impl ConnLink {
    /// Counts a message queued from another worker than the connection's.
    #[inline]
    fn note_handoff(&self) {
        if let (Some(to), Some(from)) = (self.worker, current_worker())
            && to != from
        {
            self.io.handoffs.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The answer queue is full, which its capacity rules out (module
    /// docs): the message waits for room on a task of its own.
    #[cold]
    #[inline(never)]
    fn overflow(&self, m: ToConn) {
        self.io.answer_queue_full.fetch_add(1, Ordering::Relaxed);
        tracing::error!(
            cause = "answer queue full",
            "answer queued by a waiting task"
        );
        let tx = self.msgs.clone();
        tokio::spawn(async move {
            let _ = tx.send(m).await;
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn answer(hbh: u32) -> ToConn {
        ToConn::Answer {
            msg: Bytes::new(),
            hbh,
            code: 2001,
        }
    }

    #[tokio::test]
    async fn an_answer_that_finds_the_queue_full_is_not_dropped_but_counted() {
        let io = Arc::new(IoStats::default());
        // Room for one answer and the two notices.
        let (tx, mut rx) = link(1, 1, io.clone());
        for hbh in 0..4 {
            tx.send(answer(hbh));
        }
        assert_eq!(
            io.answer_queue_full
                .load(std::sync::atomic::Ordering::Relaxed),
            1
        );
        let mut got = Vec::new();
        for _ in 0..4 {
            let Some(ToConn::Answer { hbh, .. }) = rx.msgs.recv().await else {
                panic!("an answer")
            };
            got.push(hbh);
        }
        assert_eq!(got, [0, 1, 2, 3]);
    }
}
