//! RFC 3539 Appendix A watchdog (DWR/DWA, RFC 6733 §5.5): the per-peer
//! control block with the states INITIAL, OKAY, SUSPECT, DOWN and REOPEN.
//! Sans-io: time is an argument and actions are returned, never performed.

use std::time::{Duration, Instant};

/// Watchdog status of a peer (RFC 3539 Appendix A, "Status").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WatchdogState {
    /// The peer has never been opened.
    Initial,
    /// The connection is up.
    Okay,
    /// Failover has been initiated on the connection.
    Suspect,
    /// The connection has been closed.
    Down,
    /// A closed connection is being reopened; three DWAs are needed.
    Reopen,
}

impl WatchdogState {
    /// A small number for metrics: 0 initial, 1 okay, 2 suspect, 3 down,
    /// 4 reopen.
    #[must_use]
    pub fn as_metric(self) -> u8 {
        match self {
            WatchdogState::Initial => 0,
            WatchdogState::Okay => 1,
            WatchdogState::Suspect => 2,
            WatchdogState::Down => 3,
            WatchdogState::Reopen => 4,
        }
    }
}

/// What the watchdog asks its driver to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WatchdogAction {
    /// SendWatchdog(): send a DWR to the peer.
    SendDwr,
    /// Failover(): move pending requests to alternate peers.
    Failover,
    /// Failback(): the peer may take traffic again.
    Failback,
    /// CloseConnection(): close the transport connection.
    CloseConnection,
    /// AttemptOpen(): try to open a transport connection.
    AttemptOpen,
}

/// Whether a received message is delivered or thrown away (REOPEN, DOWN and
/// INITIAL throw non-watchdog traffic away).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delivery {
    /// Process the message.
    Deliver,
    /// Discard it (RFC 3539 Appendix A `Throwaway()`).
    Throwaway,
}

/// The RFC 3539 watchdog of one peer. No I/O.
///
/// Call `handle_*`, then drain [`Watchdog::poll_action`] and read
/// [`Watchdog::poll_timeout`]; call [`Watchdog::handle_timeout`] when that
/// instant has passed.
#[derive(Debug)]
pub struct Watchdog {
    state: WatchdogState,
    pending: bool,
    num_dwa: i32,
    tw_init: Duration,
    deadline: Option<Instant>,
    rng: u64,
    actions: std::collections::VecDeque<WatchdogAction>,
}

impl Watchdog {
    /// A watchdog in state INITIAL with the timer value `tw_init` (TWINIT,
    /// RFC 3539 §3.4.1: default 30 s, not below 6 s) and a jitter seed.
    #[must_use]
    pub fn new(tw_init: Duration, seed: u64) -> Self {
        Self {
            state: WatchdogState::Initial,
            pending: false,
            num_dwa: 0,
            tw_init,
            deadline: None,
            rng: seed | 1,
            actions: std::collections::VecDeque::new(),
        }
    }

    /// The current status.
    #[must_use]
    pub fn state(&self) -> WatchdogState {
        self.state
    }

    /// True when a DWR is outstanding.
    #[must_use]
    pub fn pending(&self) -> bool {
        self.pending
    }

    /// When [`Watchdog::handle_timeout`] is due.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.deadline
    }

    /// The next action for the driver, in order.
    #[must_use]
    pub fn poll_action(&mut self) -> Option<WatchdogAction> {
        self.actions.pop_front()
    }

    /// SetWatchdog(): Tw = TWINIT - 2 + 4 * random(), in milliseconds.
    fn set_watchdog(&mut self, now: Instant) {
        // xorshift64: a jitter source needs no cryptographic quality.
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        let jitter_ms = (self.rng % 4001) as i64 - 2000;
        let base = self.tw_init.as_millis() as i64;
        let tw = Duration::from_millis((base + jitter_ms).max(1) as u64);
        self.deadline = Some(now + tw);
    }

    fn transition(&mut self, to: WatchdogState) {
        if self.state != to {
            tracing::debug!(from = ?self.state, to = ?to, "watchdog transition");
            self.state = to;
        }
    }

    /// OnReceive(): a message (`is_dwa` for a DWA) arrived from the peer.
    /// Returns whether it is delivered or thrown away.
    pub fn handle_receive(&mut self, now: Instant, is_dwa: bool) -> Delivery {
        if is_dwa {
            self.pending = false;
        }
        match self.state {
            // OKAY  Receive DWA / non-DWA  SetWatchdog()  OKAY
            WatchdogState::Okay => {
                self.set_watchdog(now);
                Delivery::Deliver
            }
            // SUSPECT  Receive DWA / non-DWA  Failback() SetWatchdog()  OKAY
            WatchdogState::Suspect => {
                self.transition(WatchdogState::Okay);
                self.actions.push_back(WatchdogAction::Failback);
                self.set_watchdog(now);
                Delivery::Deliver
            }
            // REOPEN  Receive DWA & NumDWA == 2  NumDWA++ Failback()  OKAY
            // REOPEN  Receive DWA & NumDWA < 2   NumDWA++             REOPEN
            // REOPEN  Receive non-DWA            Throwaway()          REOPEN
            WatchdogState::Reopen => {
                if is_dwa {
                    self.num_dwa += 1;
                    if self.num_dwa == 3 {
                        self.transition(WatchdogState::Okay);
                        self.actions.push_back(WatchdogAction::Failback);
                    }
                    Delivery::Deliver
                } else {
                    Delivery::Throwaway
                }
            }
            // INITIAL / DOWN  Receive  Throwaway()
            WatchdogState::Initial | WatchdogState::Down => Delivery::Throwaway,
        }
    }

    /// OnTimerElapsed(): call when [`Watchdog::poll_timeout`] has passed.
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.deadline.is_none_or(|d| now < d) {
            return;
        }
        match self.state {
            WatchdogState::Okay => {
                if !self.pending {
                    // OKAY  Timer expires & !Pending  SendWatchdog() SetWatchdog() Pending = TRUE  OKAY
                    self.actions.push_back(WatchdogAction::SendDwr);
                    self.set_watchdog(now);
                    self.pending = true;
                } else {
                    // OKAY  Timer expires & Pending  Failover() SetWatchdog()  SUSPECT
                    self.transition(WatchdogState::Suspect);
                    self.actions.push_back(WatchdogAction::Failover);
                    self.set_watchdog(now);
                }
            }
            // SUSPECT  Timer expires  CloseConnection() SetWatchdog()  DOWN
            WatchdogState::Suspect => {
                self.transition(WatchdogState::Down);
                self.actions.push_back(WatchdogAction::CloseConnection);
                self.set_watchdog(now);
            }
            // INITIAL / DOWN  Timer expires  AttemptOpen() SetWatchdog()
            WatchdogState::Initial | WatchdogState::Down => {
                self.actions.push_back(WatchdogAction::AttemptOpen);
                self.set_watchdog(now);
            }
            WatchdogState::Reopen => {
                if !self.pending {
                    self.actions.push_back(WatchdogAction::SendDwr);
                    self.set_watchdog(now);
                    self.pending = true;
                } else {
                    if self.num_dwa < 0 {
                        self.transition(WatchdogState::Down);
                        self.actions.push_back(WatchdogAction::CloseConnection);
                    } else {
                        self.num_dwa = -1;
                    }
                    self.set_watchdog(now);
                }
            }
        }
    }

    /// OnConnectionUp(): the transport connection (and capability exchange)
    /// is up. INITIAL goes to OKAY; DOWN goes to REOPEN and sends a DWR.
    pub fn handle_connection_up(&mut self, now: Instant) {
        match self.state {
            WatchdogState::Initial => {
                self.transition(WatchdogState::Okay);
                self.set_watchdog(now);
            }
            WatchdogState::Down => {
                self.transition(WatchdogState::Reopen);
                self.num_dwa = 0;
                self.actions.push_back(WatchdogAction::SendDwr);
                self.set_watchdog(now);
                self.pending = true;
            }
            other => {
                tracing::debug!(state = ?other, "connection up in unexpected watchdog state");
            }
        }
    }

    /// OnConnectionDown(): the transport connection went down.
    pub fn handle_connection_down(&mut self, now: Instant) {
        let was = self.state;
        if was == WatchdogState::Initial {
            return;
        }
        self.transition(WatchdogState::Down);
        match was {
            WatchdogState::Okay => {
                self.actions.push_back(WatchdogAction::Failover);
                self.set_watchdog(now);
            }
            WatchdogState::Suspect | WatchdogState::Reopen => self.set_watchdog(now),
            WatchdogState::Initial | WatchdogState::Down => {}
        }
    }

    /// True when requests may be routed to this peer (OKAY only).
    #[must_use]
    pub fn usable(&self) -> bool {
        self.state == WatchdogState::Okay
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TW: Duration = Duration::from_secs(30);

    fn drain(w: &mut Watchdog) -> Vec<WatchdogAction> {
        std::iter::from_fn(|| w.poll_action()).collect()
    }

    /// Fires the timer at its deadline and returns the actions.
    fn fire(w: &mut Watchdog) -> (Instant, Vec<WatchdogAction>) {
        let at = w.poll_timeout().unwrap();
        w.handle_timeout(at);
        (at, drain(w))
    }

    #[test]
    fn jittered_timer_stays_within_two_seconds_of_twinit() {
        let t0 = Instant::now();
        for seed in 0..200 {
            let mut w = Watchdog::new(TW, seed);
            w.handle_connection_up(t0);
            let d = w.poll_timeout().unwrap() - t0;
            assert!(d >= TW - Duration::from_secs(2), "{d:?}");
            assert!(d <= TW + Duration::from_secs(2), "{d:?}");
        }
    }

    #[test]
    fn silent_peer_goes_suspect_after_tw_then_down_after_2tw() {
        let t0 = Instant::now();
        let mut w = Watchdog::new(TW, 7);
        w.handle_connection_up(t0);
        assert_eq!(w.state(), WatchdogState::Okay);
        // First expiry without traffic: a DWR goes out.
        let (t_dwr, a) = fire(&mut w);
        assert_eq!(a, vec![WatchdogAction::SendDwr]);
        assert!(w.pending());
        // Not yet due: nothing happens.
        w.handle_timeout(t_dwr + Duration::from_secs(27));
        assert!(drain(&mut w).is_empty());
        assert_eq!(w.state(), WatchdogState::Okay);
        // One Tw (28..32 s) after the unanswered DWR: SUSPECT and failover.
        let (t_s, a) = fire(&mut w);
        let since = t_s - t_dwr;
        assert!(since >= Duration::from_secs(28) && since <= Duration::from_secs(32));
        assert_eq!(w.state(), WatchdogState::Suspect);
        assert_eq!(a, vec![WatchdogAction::Failover]);
        assert!(!w.usable());
        // Two Tw after the DWR: DOWN and the connection is closed.
        let (t_d, a) = fire(&mut w);
        let since = t_d - t_dwr;
        assert!(since >= Duration::from_secs(56) && since <= Duration::from_secs(64));
        assert_eq!(w.state(), WatchdogState::Down);
        assert_eq!(a, vec![WatchdogAction::CloseConnection]);
        // DOWN: further expiries attempt to reopen.
        let (_, a) = fire(&mut w);
        assert_eq!(a, vec![WatchdogAction::AttemptOpen]);
    }

    #[test]
    fn traffic_resets_the_timer_and_suspect_fails_back_on_any_message() {
        let t0 = Instant::now();
        let mut w = Watchdog::new(TW, 3);
        w.handle_connection_up(t0);
        let before = w.poll_timeout().unwrap();
        let t1 = t0 + Duration::from_secs(20);
        assert_eq!(w.handle_receive(t1, false), Delivery::Deliver);
        assert!(w.poll_timeout().unwrap() > before);
        let _ = fire(&mut w); // DWR
        let _ = fire(&mut w); // SUSPECT
        assert_eq!(w.state(), WatchdogState::Suspect);
        let t2 = w.poll_timeout().unwrap() - Duration::from_secs(1);
        assert_eq!(w.handle_receive(t2, false), Delivery::Deliver);
        assert_eq!(w.state(), WatchdogState::Okay);
        assert_eq!(drain(&mut w), vec![WatchdogAction::Failback]);
    }

    #[test]
    fn dwa_clears_pending_so_next_expiry_sends_another_dwr() {
        let t0 = Instant::now();
        let mut w = Watchdog::new(TW, 11);
        w.handle_connection_up(t0);
        let (t, a) = fire(&mut w);
        assert_eq!(a, vec![WatchdogAction::SendDwr]);
        w.handle_receive(t + Duration::from_millis(5), true);
        assert!(!w.pending());
        let (_, a) = fire(&mut w);
        assert_eq!(a, vec![WatchdogAction::SendDwr]);
        assert_eq!(w.state(), WatchdogState::Okay);
    }

    #[test]
    fn reopen_needs_three_dwas_and_throws_other_traffic_away() {
        let t0 = Instant::now();
        let mut w = Watchdog::new(TW, 5);
        w.handle_connection_up(t0);
        w.handle_connection_down(t0 + Duration::from_secs(1));
        assert_eq!(w.state(), WatchdogState::Down);
        assert_eq!(drain(&mut w), vec![WatchdogAction::Failover]);
        let t = t0 + Duration::from_secs(2);
        w.handle_connection_up(t);
        assert_eq!(w.state(), WatchdogState::Reopen);
        assert_eq!(drain(&mut w), vec![WatchdogAction::SendDwr]);
        assert_eq!(w.handle_receive(t, false), Delivery::Throwaway);
        w.handle_receive(t, true);
        assert_eq!(w.state(), WatchdogState::Reopen);
        let (t, a) = fire(&mut w);
        assert_eq!(a, vec![WatchdogAction::SendDwr]);
        w.handle_receive(t, true);
        assert_eq!(w.state(), WatchdogState::Reopen);
        let (t, a) = fire(&mut w);
        assert_eq!(a, vec![WatchdogAction::SendDwr]);
        w.handle_receive(t, true);
        assert_eq!(w.state(), WatchdogState::Okay);
        assert_eq!(drain(&mut w), vec![WatchdogAction::Failback]);
    }

    #[test]
    fn reopen_without_answers_closes_again() {
        let t0 = Instant::now();
        let mut w = Watchdog::new(TW, 9);
        w.handle_connection_up(t0);
        w.handle_connection_down(t0);
        let _ = drain(&mut w);
        w.handle_connection_up(t0);
        let _ = drain(&mut w);
        // Pending DWR unanswered: first expiry marks NumDWA = -1 ...
        let (_, a) = fire(&mut w);
        assert!(a.is_empty());
        assert_eq!(w.state(), WatchdogState::Reopen);
        // ... and the second closes the connection.
        let (_, a) = fire(&mut w);
        assert_eq!(a, vec![WatchdogAction::CloseConnection]);
        assert_eq!(w.state(), WatchdogState::Down);
    }
}
