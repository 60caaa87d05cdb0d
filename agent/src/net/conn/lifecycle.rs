//! The life of an open connection after its capabilities exchange: the
//! watchdog of RFC 3539 §3.4 (RFC 6733 §5.5) and its actions (DWR, failover
//! of pending requests §5.5.4, close), the timers of the peer state machine
//! and the requests' 3002 timeouts, and the DPR with its drain (§5.4) when
//! the agent stops or a reload removes the peer.

use tokio::time::Instant;

use super::exchange::cer_timed_out;
use super::{Cause, Conn, READ_CHUNK, WRITE_CAPACITY};
use crate::peer::table::state;
use crate::relay;
use diameter::peer::fsm::{DisconnectCause, State};
use diameter::peer::watchdog::{Watchdog, WatchdogAction, WatchdogState};

impl Conn {
    pub(super) fn on_open(&mut self) {
        // Full-size buffers from now on.
        self.inbuf.reserve(READ_CHUNK);
        self.out.reserve(WRITE_CAPACITY);
        let Some((_, slot)) = &self.peer else {
            return;
        };
        let tw = self.ctx.config.tw();
        let seed = self.id ^ 0x2545_f491_4f6c_dd1d;
        let mut w = slot.take_watchdog(|| Watchdog::new(tw, seed));
        w.handle_connection_up(Instant::now().into_std());
        self.watchdog = Some(w);
        self.pump_watchdog();
        if self.ctx.stop.is_stopping() {
            self.stop();
        }
    }

    /// Publishes the watchdog state and performs its actions.
    pub(super) fn pump_watchdog(&mut self) {
        let Some(w) = self.watchdog.as_mut() else {
            return;
        };
        let mut actions = Vec::new();
        while let Some(a) = w.poll_action() {
            actions.push(a);
        }
        let ws = w.state();
        if let Some((_, slot)) = &self.peer {
            slot.set_watchdog_state(ws);
        }
        if let Some((_, slot)) = &self.peer
            && self.fsm.state() == State::Open
        {
            slot.set_state(if ws == WatchdogState::Okay {
                state::OKAY
            } else {
                state::SUSPECT
            });
        }
        for a in actions {
            match a {
                WatchdogAction::SendDwr => {
                    self.count(|st| &st.dwr_sent);
                    self.put_watchdog(None);
                }
                WatchdogAction::Failover => {
                    tracing::info!(peer = %self.peer_host(), "peer suspect: failing over pending requests");
                    self.fail_over_all();
                }
                WatchdogAction::CloseConnection => {
                    self.close_by_peer(Cause::WatchdogDown);
                }
                WatchdogAction::Failback | WatchdogAction::AttemptOpen => {}
            }
        }
    }

    /// The agent is stopping: DPR, then drain (RFC 6733 §5.4).
    pub(super) fn stop(&mut self) {
        self.disconnect(DisconnectCause::Rebooting);
    }

    /// The peer left the configuration (a reload, [`ToConn::Retire`]): DPR
    /// with DO_NOT_WANT_TO_TALK_TO_YOU (RFC 6733 §5.4.3: the peer is not to
    /// reconnect), then the drain of a stop; a connection still in its
    /// capabilities exchange closes at once.
    #[cold]
    pub(super) fn retire(&mut self) {
        tracing::debug!(peer = %self.peer_host(), "retired: DPR");
        self.retired = true;
        self.disconnect(DisconnectCause::DoNotWantToTalkToYou);
    }

    /// DPR with `cause`, then drain: pending requests are answered by the
    /// peer or, at 80 % of the drain, locally (RFC 6733 §5.4).
    pub(super) fn disconnect(&mut self, cause: DisconnectCause) {
        if self.closing_since.is_some() {
            return;
        }
        let now = Instant::now();
        self.closing_since = Some(now);
        if let Some((_, slot)) = &self.peer
            && self.fsm.state() == State::Open
        {
            slot.set_state(state::CLOSING);
        }
        self.fsm
            .handle_stop(now.into_std(), cause, self.ctx.config.drain());
        self.check_drained();
    }

    pub(super) fn handle_timers(&mut self) {
        self.ctx.relay.routes.refresh(&mut self.routes);
        let now = Instant::now();
        let waiting_cer = self.fsm.state() == State::WaitCer;
        self.fsm.handle_timeout(now.into_std());
        if waiting_cer && self.fsm.state() == State::Closed {
            cer_timed_out(&self.ctx);
        }
        if let Some(w) = self.watchdog.as_mut() {
            w.handle_timeout(now.into_std());
        }
        self.pump_watchdog();
        // Requests whose upstream answer is overdue get the agent's 3002.
        let slot = self.peer.as_ref().map(|(_, s)| &**s);
        let expired = self.ctx.relay.relay(self.routes.router()).handle_timeout(
            &mut self.upstream,
            slot,
            now.into_std(),
        );
        if expired > 0
            && let Some(suppressed) = self.undeliverable_warn.allow(now)
        {
            tracing::warn!(
                peer = %self.peer_host(),
                expired,
                cause = %relay::Error::Timeout,
                suppressed,
                "requests answered 3002 DIAMETER_UNABLE_TO_DELIVER"
            );
        }
        // Near the end of the drain, pending requests are answered locally
        // so that downstream peers still receive them before closing; those
        // of a peer removed by a reload go to the peers that remain.
        if let Some(since) = self.closing_since
            && !self.flushed_pending
            && now >= since + self.ctx.config.drain().mul_f64(0.8)
        {
            self.flushed_pending = true;
            self.leave_pending();
        }
        self.check_drained();
    }

    /// What is still pending at the end of a drain: answered 3002 when the
    /// agent stops, failed over (RFC 6733 §5.5.4) when only this peer was
    /// removed.
    pub(super) fn leave_pending(&mut self) {
        if self.retired {
            return self.fail_over_all();
        }
        let slot = self.peer.as_ref().map(|(_, s)| &**s);
        let relay = self.ctx.relay.relay(self.routes.router());
        relay.answer_all(&mut self.upstream, slot, relay::Error::ShuttingDown);
    }

    pub(super) fn fail_over_all(&mut self) {
        let from = self.peer.as_ref().map(|(id, s)| (*id, &**s));
        let now = Instant::now().into_std();
        self.ctx.relay.relay(self.routes.router()).fail_over_all(
            &mut self.upstream,
            from,
            now,
            &mut self.rotate,
        );
    }
}
