//! A [`Link`] for unit tests of the table and the relay: both queues in
//! memory, the request queue bounded as the tokio edge's is.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use super::table::{Link, LinkRef, Relayed, ToConn, Undelivered};

/// A connection's queues, read by the test.
#[derive(Debug)]
pub(crate) struct Queue {
    requests: Mutex<VecDeque<Relayed>>,
    msgs: Mutex<VecDeque<ToConn>>,
    capacity: usize,
}

impl Queue {
    /// Queues holding at most `capacity` requests.
    pub(crate) fn with_capacity(capacity: usize) -> Arc<Self> {
        Arc::new(Self {
            requests: Mutex::new(VecDeque::new()),
            msgs: Mutex::new(VecDeque::new()),
            capacity,
        })
    }

    /// Queues of (practically) unbounded room.
    pub(crate) fn new() -> Arc<Self> {
        Self::with_capacity(usize::MAX)
    }

    /// The handle the relay and the table take.
    pub(crate) fn link(self: &Arc<Self>) -> LinkRef {
        self.clone()
    }

    /// The oldest queued request.
    pub(crate) fn request_taken(&self) -> Option<Relayed> {
        self.requests.lock().unwrap().pop_front()
    }

    /// The oldest queued answer or notice.
    pub(crate) fn try_recv(&self) -> Option<ToConn> {
        self.msgs.lock().unwrap().pop_front()
    }
}

impl Link for Queue {
    fn request(&self, r: Relayed) -> Result<(), (Relayed, Undelivered)> {
        let mut q = self.requests.lock().unwrap();
        if q.len() >= self.capacity {
            return Err((r, Undelivered::Full));
        }
        q.push_back(r);
        Ok(())
    }

    fn send(&self, m: ToConn) {
        self.msgs.lock().unwrap().push_back(m);
    }
}
