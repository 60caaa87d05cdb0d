//! RFC 6733 §5.6 peer state machine of one transport connection, as seen by
//! the agent: Wait-Conn-Ack is the dial itself (the driver's business);
//! this machine starts at Wait-I-CEA (initiator, CER sent) or at the
//! responder's wait for CER, and covers Open, Closing (§5.4 DPR/DPA) and
//! Closed. The election of §5.6.4 is decided by the peer table, which sees
//! both connections, through [`crate::peer::capx::local_wins_election`].
//! Sans-io: transmissions are returned as [`Transmit`] values that the
//! driver encodes.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use super::capx::{self, CerVerdict, ExchangeError};
use crate::codec::builder::Capabilities;
use crate::dictionary::result;

/// Which side opened the transport connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The agent dialled (I- states).
    Initiator,
    /// The peer dialled (R- states).
    Responder,
}

/// State of the connection (RFC 6733 §5.6 names in the docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// Wait-I-CEA: CER sent, waiting for the CEA.
    WaitCea,
    /// Responder connection accepted, waiting for the CER.
    WaitCer,
    /// I-Open / R-Open.
    Open,
    /// Closing: DPR sent, waiting for the DPA (or the drain to end).
    Closing,
    /// Closed: the driver closes the socket.
    Closed,
}

/// Disconnect-Cause values (RFC 6733 §5.4.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DisconnectCause {
    /// REBOOTING (0).
    Rebooting = 0,
    /// BUSY (1).
    Busy = 1,
    /// DO_NOT_WANT_TO_TALK_TO_YOU (2).
    DoNotWantToTalkToYou = 2,
}

/// What the driver must send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transmit {
    /// A CER with the local capabilities.
    Cer,
    /// A CEA with this Result-Code answering the CER with this header.
    Cea {
        /// Result-Code of the CEA.
        result_code: u32,
    },
    /// A CEA refusing a malformed CER: the error's Result-Code, Failed-AVP
    /// and Error-Message (RFC 6733 §5.3, §7.1.5).
    CeaRefused(ExchangeError),
    /// A DPR with this cause.
    Dpr(DisconnectCause),
    /// A DPA (2001) answering the received DPR.
    Dpa,
}

/// What the driver is told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// The connection is open with these common applications.
    Open {
        /// Applications both sides support.
        common_applications: Vec<u32>,
    },
    /// The peer sent DPR: stop sending it requests; the connection closes
    /// once the DPA is written.
    PeerDisconnecting,
    /// The connection is to be closed now, for this reason.
    Close(&'static str),
}

/// The RFC 6733 §5.6 state machine of one connection. No I/O.
///
/// Call `handle_*`, then drain [`Fsm::poll_transmit`], [`Fsm::poll_event`]
/// and read [`Fsm::poll_timeout`], in that order.
#[derive(Debug)]
pub struct Fsm {
    role: Role,
    state: State,
    local: Capabilities,
    remote: Option<Capabilities>,
    deadline: Option<Instant>,
    transmits: VecDeque<Transmit>,
    events: VecDeque<Event>,
    dpa_received: bool,
    /// The peer sent requests after its DPA: it is not done yet.
    requests_after_dpa: bool,
    /// The peer sent DPR while requests of its own were still in flight:
    /// the DPA waits for their answers ([`Fsm::handle_answered`]).
    dpa_owed: bool,
}

/// How long a capabilities exchange may take by default (the agent's
/// `node.cer_timeout_seconds`).
pub const EXCHANGE_TIMEOUT: Duration = Duration::from_secs(5);

impl Fsm {
    /// A new connection with the default [`EXCHANGE_TIMEOUT`]. An initiator
    /// queues its CER at once.
    #[must_use]
    pub fn new(now: Instant, role: Role, local: Capabilities) -> Self {
        Self::with_exchange_timeout(now, role, local, EXCHANGE_TIMEOUT)
    }

    /// A new connection that is closed unless its capabilities exchange
    /// (CER received or CEA received, §5.3) completes within `timeout`.
    #[must_use]
    pub fn with_exchange_timeout(
        now: Instant,
        role: Role,
        local: Capabilities,
        timeout: Duration,
    ) -> Self {
        let mut fsm = Self {
            role,
            state: match role {
                Role::Initiator => State::WaitCea,
                Role::Responder => State::WaitCer,
            },
            local,
            remote: None,
            deadline: Some(now + timeout),
            transmits: VecDeque::new(),
            events: VecDeque::new(),
            dpa_received: false,
            requests_after_dpa: false,
            dpa_owed: false,
        };
        if role == Role::Initiator {
            fsm.transmits.push_back(Transmit::Cer);
        }
        fsm
    }

    /// The current state.
    #[must_use]
    pub fn state(&self) -> State {
        self.state
    }

    /// Which side dialled.
    #[must_use]
    pub fn role(&self) -> Role {
        self.role
    }

    /// The local capabilities.
    #[must_use]
    pub fn local(&self) -> &Capabilities {
        &self.local
    }

    /// The peer's capabilities, once received.
    #[must_use]
    pub fn remote(&self) -> Option<&Capabilities> {
        self.remote.as_ref()
    }

    fn transition(&mut self, to: State) {
        if self.state != to {
            tracing::debug!(from = ?self.state, to = ?to, "peer transition");
            self.state = to;
        }
    }

    fn close(&mut self, why: &'static str) {
        self.transition(State::Closed);
        self.deadline = None;
        self.events.push_back(Event::Close(why));
    }

    /// A CER arrived. `known` says whether its Origin-Host is in the peer
    /// table or matches an accept pattern; `election_lost` whether the
    /// peer table already holds a connection to this peer that wins the
    /// §5.6.4 election.
    pub fn handle_cer(&mut self, remote: Capabilities, known: bool, election_lost: bool) {
        if self.state != State::WaitCer {
            // A CER on an open connection is not a valid event: answer it
            // 5012 DIAMETER_UNABLE_TO_COMPLY and keep the connection.
            self.transmits
                .push_back(Transmit::Cea { result_code: 5012 });
            return;
        }
        let verdict = if election_lost {
            CerVerdict::Refuse(result::ELECTION_LOST)
        } else {
            capx::judge_cer(&self.local, &remote, known)
        };
        self.remote = Some(remote);
        match verdict {
            // R-Accept, Process-CER, R-Snd-CEA  ->  R-Open
            CerVerdict::Accept(common_applications) => {
                self.transmits.push_back(Transmit::Cea {
                    result_code: result::SUCCESS,
                });
                self.transition(State::Open);
                self.deadline = None;
                self.events.push_back(Event::Open {
                    common_applications,
                });
            }
            // R-Reject  ->  Closed (after the CEA is written)
            CerVerdict::Refuse(result_code) => {
                self.transmits.push_back(Transmit::Cea { result_code });
                self.close("capabilities exchange refused");
            }
        }
    }

    /// A CER arrived that [`capx::read_exchange`] refused (R-Reject): the
    /// CEA carries the defect, then the connection closes (RFC 6733 §5.3).
    /// On an open connection the CER is answered like any CER there.
    pub fn handle_bad_cer(&mut self, error: ExchangeError) {
        if self.state != State::WaitCer {
            return self.handle_cer(Capabilities::default(), true, false);
        }
        self.transmits.push_back(Transmit::CeaRefused(error));
        self.close("malformed CER");
    }

    /// A CEA arrived that [`capx::read_exchange`] refused: Wait-I-CEA
    /// I-Rcv-CEA with an unusable CEA  ->  Closed (Error).
    pub fn handle_bad_cea(&mut self) {
        if self.state == State::WaitCea {
            self.close("malformed CEA");
        }
    }

    /// A CEA arrived with this Result-Code.
    pub fn handle_cea(&mut self, remote: Capabilities, result_code: u32) {
        if self.state != State::WaitCea {
            return; // Stray CEA: ignored.
        }
        let verdict = capx::judge_cea(&self.local, &remote, result_code);
        self.remote = Some(remote);
        match verdict {
            // Wait-I-CEA  I-Rcv-CEA  Process-CEA  ->  I-Open
            CerVerdict::Accept(common_applications) => {
                self.transition(State::Open);
                self.deadline = None;
                self.events.push_back(Event::Open {
                    common_applications,
                });
            }
            CerVerdict::Refuse(_) => self.close("peer refused the capabilities exchange"),
        }
    }

    /// A DPR arrived (I-Open/R-Open  Rcv-DPR  Snd-DPA  ->  Closed).
    ///
    /// RFC 6733 §5.4: the DPA "SHOULD contain an error if messages have
    /// recently been forwarded, and are likely in flight", because the
    /// receiver of the DPA closes the transport, and answers still on their
    /// way to the peer would be lost with it. So when requests the peer sent
    /// are still waiting for their answers (`in_flight`), the DPA is not sent
    /// yet: the peer is marked disconnecting at once (nothing new is routed
    /// to it), and the DPA follows their last answer
    /// ([`Fsm::handle_answered`]), or `bound` after the DPR at the latest. No
    /// request is then in flight when the DPA goes, so it carries 2001, and
    /// each of the peer's requests has had its one answer before it.
    pub fn handle_dpr(&mut self, now: Instant, in_flight: bool, bound: Duration) {
        self.events.push_back(Event::PeerDisconnecting);
        if in_flight && matches!(self.state, State::Open | State::Closing) {
            self.dpa_owed = true;
            self.transition(State::Closing);
            let by = now + bound;
            self.deadline = Some(self.deadline.map_or(by, |d| d.min(by)));
            return;
        }
        self.send_dpa_and_close();
    }

    /// Whether a DPA is owed to the peer (its DPR waits for its requests'
    /// answers): requests it still sends are answered by the agent.
    #[must_use]
    pub fn owes_dpa(&self) -> bool {
        self.dpa_owed
    }

    /// Every request the peer sent has been answered: the DPA owed to it, if
    /// any, goes now.
    pub fn handle_answered(&mut self) {
        if self.dpa_owed {
            self.send_dpa_and_close();
        }
    }

    fn send_dpa_and_close(&mut self) {
        self.dpa_owed = false;
        self.transmits.push_back(Transmit::Dpa);
        self.close("peer sent DPR");
    }

    /// A DPA arrived (Closing  Rcv-DPA  ->  Closed): the connection closes
    /// at the next [`Fsm::handle_drained`], when every pending request is
    /// answered too.
    pub fn handle_dpa(&mut self) {
        if self.state == State::Closing {
            self.dpa_received = true;
        }
    }

    /// The agent wants to leave: send DPR (Open  Stop  Snd-DPR  ->
    /// Closing). Connections not yet open simply close.
    pub fn handle_stop(&mut self, now: Instant, cause: DisconnectCause, drain: Duration) {
        match self.state {
            State::Open => {
                self.transmits.push_back(Transmit::Dpr(cause));
                self.transition(State::Closing);
                self.deadline = Some(now + drain);
            }
            State::WaitCea | State::WaitCer => self.close("stopping"),
            State::Closing | State::Closed => {}
        }
    }

    /// A request (other than CER, DWR, DPR) arrived. In Closing after the
    /// DPA, RFC 6733 §5.6 gives the peer no Send-Message event: a peer that
    /// sends anyway is still talking, so the connection stays up (its
    /// requests are answered) until the peer closes or the drain deadline
    /// passes, rather than closing under requests still on the wire.
    pub fn handle_request(&mut self) {
        if self.state == State::Closing && self.dpa_received {
            self.requests_after_dpa = true;
        }
    }

    /// In Closing, every pending request has been answered (the driver calls
    /// this whenever that is true): close if the DPA has arrived and the peer
    /// sent no request after it (otherwise the drain deadline closes).
    pub fn handle_drained(&mut self) {
        if self.state == State::Closing && self.dpa_received && !self.requests_after_dpa {
            self.close("disconnected");
        }
    }

    /// Call when [`Fsm::poll_timeout`] has passed.
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.deadline.is_some_and(|d| now >= d) {
            if self.dpa_owed {
                return self.send_dpa_and_close();
            }
            match self.state {
                State::WaitCea => self.close("no CEA in time"),
                State::WaitCer => self.close("no CER in time"),
                State::Closing => self.close("drain deadline passed"),
                State::Open | State::Closed => self.deadline = None,
            }
        }
    }

    /// The next message to send.
    #[must_use]
    pub fn poll_transmit(&mut self) -> Option<Transmit> {
        self.transmits.pop_front()
    }

    /// The next event for the driver.
    #[must_use]
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// When [`Fsm::handle_timeout`] is due.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.deadline
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dictionary::app::RELAY as RELAY_APPLICATION_ID;

    fn caps(host: &str, apps: &[u32]) -> Capabilities {
        Capabilities {
            origin_host: host.into(),
            origin_realm: "example.org".into(),
            auth_application_ids: apps.to_vec(),
            ..Capabilities::default()
        }
    }

    fn drain(f: &mut Fsm) -> (Vec<Transmit>, Vec<Event>) {
        (
            std::iter::from_fn(|| f.poll_transmit()).collect(),
            std::iter::from_fn(|| f.poll_event()).collect(),
        )
    }

    #[test]
    fn initiator_sends_cer_and_opens_on_successful_cea() {
        let now = Instant::now();
        let mut f = Fsm::new(
            now,
            Role::Initiator,
            caps("agent.example.com", &[RELAY_APPLICATION_ID]),
        );
        assert_eq!(f.state(), State::WaitCea);
        assert_eq!(drain(&mut f).0, vec![Transmit::Cer]);
        f.handle_cea(caps("s.example.net", &[16777215]), 2001);
        assert_eq!(f.state(), State::Open);
        assert_eq!(
            drain(&mut f).1,
            vec![Event::Open {
                common_applications: vec![16777215]
            }]
        );
        assert_eq!(f.poll_timeout(), None);
    }

    #[test]
    fn initiator_closes_when_cea_refuses_or_never_comes() {
        let now = Instant::now();
        let mut f = Fsm::new(now, Role::Initiator, caps("a.example.com", &[4]));
        f.handle_cea(caps("s.example.net", &[4]), 3010);
        assert_eq!(f.state(), State::Closed);
        let mut f = Fsm::new(now, Role::Initiator, caps("a.example.com", &[4]));
        f.handle_timeout(now + EXCHANGE_TIMEOUT - Duration::from_millis(1));
        assert_eq!(f.state(), State::WaitCea);
        f.handle_timeout(now + EXCHANGE_TIMEOUT);
        assert_eq!(f.state(), State::Closed);
    }

    #[test]
    fn responder_without_cer_closes_at_its_configured_timeout() {
        let now = Instant::now();
        let t = Duration::from_millis(1500);
        let mut f =
            Fsm::with_exchange_timeout(now, Role::Responder, caps("a.example.com", &[4]), t);
        assert_eq!(f.poll_timeout(), Some(now + t));
        f.handle_timeout(now + t - Duration::from_millis(1));
        assert_eq!(f.state(), State::WaitCer);
        f.handle_timeout(now + t);
        assert_eq!(f.state(), State::Closed);
        assert_eq!(drain(&mut f).1, vec![Event::Close("no CER in time")]);
    }

    #[test]
    fn initiator_closes_on_a_malformed_cea() {
        let now = Instant::now();
        let mut f = Fsm::new(now, Role::Initiator, caps("a.example.com", &[4]));
        let _ = drain(&mut f);
        f.handle_bad_cea();
        assert_eq!(f.state(), State::Closed);
        let (t, e) = drain(&mut f);
        assert!(t.is_empty(), "an answer is not answered");
        assert_eq!(e, vec![Event::Close("malformed CEA")]);
    }

    #[test]
    fn responder_refuses_unknown_peer_with_3010_then_closes() {
        let mut f = Fsm::new(
            Instant::now(),
            Role::Responder,
            caps("a.example.com", &[RELAY_APPLICATION_ID]),
        );
        f.handle_cer(caps("who.example.org", &[4]), false, false);
        let (t, e) = drain(&mut f);
        assert_eq!(t, vec![Transmit::Cea { result_code: 3010 }]);
        assert!(matches!(e[..], [Event::Close(_)]));
        assert_eq!(f.state(), State::Closed);
    }

    #[test]
    fn responder_refuses_no_common_application_with_5010() {
        let mut f = Fsm::new(
            Instant::now(),
            Role::Responder,
            caps("a.example.com", &[16777215]),
        );
        f.handle_cer(caps("c.example.org", &[4]), true, false);
        assert_eq!(drain(&mut f).0, vec![Transmit::Cea { result_code: 5010 }]);
        assert_eq!(f.state(), State::Closed);
    }

    #[test]
    fn responder_that_lost_the_election_answers_4003() {
        let mut f = Fsm::new(Instant::now(), Role::Responder, caps("z.example.com", &[4]));
        f.handle_cer(caps("c.example.org", &[4]), true, true);
        assert_eq!(drain(&mut f).0, vec![Transmit::Cea { result_code: 4003 }]);
    }

    #[test]
    fn open_connection_stops_with_dpr_then_closes_when_drained_or_late() {
        let now = Instant::now();
        let mut f = Fsm::new(now, Role::Responder, caps("a.example.com", &[4]));
        f.handle_cer(caps("c.example.org", &[4]), true, false);
        let _ = drain(&mut f);
        f.handle_stop(now, DisconnectCause::Rebooting, Duration::from_secs(2));
        assert_eq!(f.state(), State::Closing);
        assert_eq!(
            drain(&mut f).0,
            vec![Transmit::Dpr(DisconnectCause::Rebooting)]
        );
        f.handle_drained();
        assert_eq!(f.state(), State::Closing, "the DPA is awaited");
        f.handle_dpa();
        f.handle_drained();
        assert_eq!(f.state(), State::Closed);
        // The other order: DPA first, then the last pending answer.
        let mut f = Fsm::new(now, Role::Responder, caps("a.example.com", &[4]));
        f.handle_cer(caps("c.example.org", &[4]), true, false);
        f.handle_stop(now, DisconnectCause::Rebooting, Duration::from_secs(2));
        f.handle_dpa();
        assert_eq!(
            f.state(),
            State::Closing,
            "pending requests are drained first"
        );
        f.handle_drained();
        assert_eq!(f.state(), State::Closed);

        let mut f = Fsm::new(now, Role::Responder, caps("a.example.com", &[4]));
        f.handle_cer(caps("c.example.org", &[4]), true, false);
        f.handle_stop(now, DisconnectCause::Rebooting, Duration::from_secs(2));
        f.handle_timeout(now + Duration::from_secs(2));
        assert_eq!(f.state(), State::Closed);
    }

    /// An open connection the agent stopped at `now` (DPR sent, drain 2 s).
    fn stopped(now: Instant) -> Fsm {
        let mut f = Fsm::new(now, Role::Responder, caps("a.example.com", &[4]));
        f.handle_cer(caps("c.example.org", &[4]), true, false);
        f.handle_stop(now, DisconnectCause::Rebooting, Duration::from_secs(2));
        f
    }

    #[test]
    fn peer_that_sends_after_its_dpa_keeps_the_connection_until_the_deadline() {
        let now = Instant::now();
        let mut f = stopped(now);
        // Requests before the DPA were on the wire when the DPR left.
        f.handle_request();
        f.handle_dpa();
        f.handle_drained();
        assert_eq!(f.state(), State::Closed, "nothing after the DPA");

        let mut f = stopped(now);
        f.handle_dpa();
        f.handle_request();
        f.handle_drained();
        assert_eq!(f.state(), State::Closing, "the peer is still sending");
        f.handle_timeout(now + Duration::from_millis(1999));
        assert_eq!(f.state(), State::Closing);
        f.handle_timeout(now + Duration::from_secs(2));
        assert_eq!(f.state(), State::Closed);
    }

    #[test]
    fn received_dpr_is_answered_with_dpa_and_closes() {
        let mut f = Fsm::new(Instant::now(), Role::Responder, caps("a.example.com", &[4]));
        f.handle_cer(caps("c.example.org", &[4]), true, false);
        let _ = drain(&mut f);
        f.handle_dpr(Instant::now(), false, Duration::from_secs(1));
        let (t, e) = drain(&mut f);
        assert_eq!(t, vec![Transmit::Dpa]);
        assert_eq!(e[0], Event::PeerDisconnecting);
        assert_eq!(f.state(), State::Closed);
    }

    #[test]
    fn a_dpr_with_requests_in_flight_is_answered_after_their_answers() {
        let now = Instant::now();
        let bound = Duration::from_secs(3);
        let open = || {
            let mut f = Fsm::new(now, Role::Responder, caps("a.example.com", &[4]));
            f.handle_cer(caps("c.example.org", &[4]), true, false);
            let _ = drain(&mut f);
            f
        };
        // The last answer goes out: the DPA follows it.
        let mut f = open();
        f.handle_dpr(now, true, bound);
        let (t, e) = drain(&mut f);
        assert!(t.is_empty(), "no DPA while requests are in flight");
        assert_eq!(e, vec![Event::PeerDisconnecting]);
        assert!(f.owes_dpa());
        assert_eq!(f.poll_timeout(), Some(now + bound));
        f.handle_timeout(now + bound - Duration::from_millis(1));
        assert!(drain(&mut f).0.is_empty());
        f.handle_answered();
        let (t, e) = drain(&mut f);
        assert_eq!(t, vec![Transmit::Dpa]);
        assert_eq!(e, vec![Event::Close("peer sent DPR")]);
        assert!(!f.owes_dpa());
        // Answers that never come: the DPA goes at the bound all the same.
        let mut f = open();
        f.handle_dpr(now, true, bound);
        let _ = drain(&mut f);
        f.handle_timeout(now + bound);
        let (t, e) = drain(&mut f);
        assert_eq!(t, vec![Transmit::Dpa]);
        assert_eq!(e, vec![Event::Close("peer sent DPR")]);
    }
}
