//! The relay without sockets: peers are slots of a real [`PeerTable`] whose
//! connections are in-memory queues the tests read, time is an argument.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};

use super::budget::{RetryConfig, RetryGate};
use super::pending::Upstream;
use super::*;
use crate::peer::table::state;
use crate::peer::test_link::Queue;
use crate::routing::Candidate;
use diameter::codec::{Message, avp::Avp};
use diameter::dictionary::code;

const AGENT: &str = "agent.example.com";
const CLIENT: &str = "client.example.org";
const TIMEOUT: Duration = Duration::from_secs(5);
const BACKLOG: usize = 1 << 20;

/// An agent with peers `s1`, `s2` (realm example.net, any application),
/// `s3` (example.net, application 4 only), each with an open connection.
struct World {
    table: PeerTable,
    router: Router,
    retry: RetryGate,
    conns: Vec<Arc<Queue>>,
}

impl World {
    fn new(retry: &RetryConfig) -> Self {
        let table = PeerTable::default();
        let mut conns = Vec::new();
        for (i, host) in ["s1.example.net", "s2.example.net", "s3.example.net"]
            .into_iter()
            .enumerate()
        {
            let id = table.lookup_or_add(host, Some("example.net")).unwrap();
            assert_eq!(id, i);
            let rx = Queue::with_capacity(4);
            let slot = table.get(id).unwrap();
            assert!(slot.try_open(i as u64, rx.link(), true, AGENT, None));
            slot.set_state(state::OKAY);
            conns.push(rx);
        }
        let c = |peer| Candidate {
            peer,
            priority: 0,
            weight: 1,
        };
        let mut router = Router::new();
        router.add_route("example.net", None, vec![c(0), c(1)]);
        router.add_route("example.net", Some(4), vec![c(2)]);
        Self {
            table,
            router,
            retry: RetryGate::new(retry),
            conns,
        }
    }

    fn relay(&self) -> Relay<'_> {
        Relay {
            origin: (AGENT, "example.com"),
            router: &self.router,
            table: &self.table,
            retry: &self.retry,
            upstream_backlog: BACKLOG,
            treat: None,
        }
    }

    fn slot(&self, id: PeerId) -> Arc<PeerSlot> {
        self.table.get(id).unwrap()
    }

    /// The request queued for peer `id`'s connection, if any.
    fn delivered(&mut self, id: PeerId) -> Option<Relayed> {
        if let Some(other) = self.conns[id].try_recv() {
            panic!("{other:?} instead of a request");
        }
        self.conns[id].request_taken()
    }

    /// The one peer a request was delivered to.
    fn delivered_anywhere(&mut self) -> (PeerId, Relayed) {
        let got: Vec<_> = (0..self.conns.len())
            .filter_map(|i| self.delivered(i).map(|r| (i, r)))
            .collect();
        assert_eq!(got.len(), 1, "delivered to exactly one peer");
        got.into_iter().next().unwrap()
    }
}

/// A proxiable request from the client with `avps` after its origin.
fn request(app: u32, hbh: u32, avps: Vec<Avp>) -> Bytes {
    let mut m = Message::request(272, app, true)
        .with_ids(hbh, 0xe2e)
        .with(Avp::str(code::SESSION_ID, "client.example.org;1"))
        .with(Avp::str(code::ORIGIN_HOST, CLIENT))
        .with(Avp::str(code::ORIGIN_REALM, "example.org"));
    for a in avps {
        m.push(a);
    }
    m.to_bytes().unwrap().freeze()
}

fn to_realm(app: u32, hbh: u32) -> Bytes {
    request(
        app,
        hbh,
        vec![Avp::str(code::DESTINATION_REALM, "example.net")],
    )
}

/// The request as the client's connection hands it to the relay.
fn relayed(msg: Bytes) -> (Relayed, Arc<Queue>) {
    let head = Header::read(&msg);
    let down = Queue::new();
    let reply = down.link();
    let r = Relayed {
        realm: Bytes::from_static(b"example.net"),
        msg,
        hbh: head.hop_by_hop,
        reply,
        pinned: false,
        tried: Vec::new(),
        retransmit: false,
        app: head.application_id,
        from: Arc::from(CLIENT),
        doic: None,
        cut: None,
        read_ns: 0,
    };
    (r, down)
}

/// The answer written downstream: Hop-by-Hop Identifier, Result-Code,
/// Error-Message.
fn answer(down: &Queue) -> (u32, u32, String) {
    let Some(ToConn::Answer { msg, hbh, code: c }) = down.try_recv() else {
        panic!("no answer downstream")
    };
    let m = Message::decode(msg).unwrap();
    assert!(m.header.flags.is_error());
    assert_eq!(m.result_code(), Some(c));
    let why = m.find(code::ERROR_MESSAGE).and_then(Avp::as_str).unwrap();
    (hbh, c, why.to_owned())
}

/// What one upstream connection wrote, decoded.
fn written(out: &BytesMut) -> Message {
    Message::decode(Bytes::copy_from_slice(out)).unwrap()
}

fn route_records(m: &Message) -> Vec<String> {
    m.find_all(code::ROUTE_RECORD)
        .filter_map(Avp::as_str)
        .map(str::to_owned)
        .collect()
}

/// `relay.send_upstream` on peer `id`'s connection at `now`.
fn send_on(w: &World, up: &mut Upstream, id: PeerId, r: Relayed, now: Instant) -> BytesMut {
    let slot = w.slot(id);
    let mut out = BytesMut::new();
    let mut rotate = 0;
    w.relay().send_upstream(
        up,
        Some((id, &slot)),
        true,
        (now, &mut rotate),
        r,
        &mut out,
        None,
    );
    out
}

#[test]
fn requests_are_routed_by_realm_application_and_destination_host() {
    let mut w = World::new(&RetryConfig::default());
    let relay = w.relay();
    // Application 4 has its own route (s3); others take the wildcard.
    let (r, _) = relayed(to_realm(4, 1));
    relay.route(r, None, 0).unwrap();
    assert_eq!(w.delivered(2).map(|r| r.hbh), Some(1));
    for rotate in 0..2 {
        let (r, _) = relayed(to_realm(0, 2));
        w.relay().route(r, None, rotate).unwrap();
        let (peer, r) = w.delivered_anywhere();
        assert!(peer < 2, "the wildcard route: s1 or s2");
        assert!(!r.pinned);
    }
    // Destination-Host naming a known peer: that peer, pinned.
    let (r, _) = relayed(request(
        0,
        3,
        vec![
            Avp::str(code::DESTINATION_REALM, "example.net"),
            Avp::str(code::DESTINATION_HOST, "S3.example.net"),
        ],
    ));
    w.relay().route(r, Some("S3.example.net"), 0).unwrap();
    let r = w.delivered(2).expect("pinned to s3");
    assert!(r.pinned);
    assert_eq!(w.slot(2).outstanding.load(Ordering::Relaxed), 2);
    // No route for the realm: the request comes back, 3002.
    let (mut r, _) = relayed(to_realm(0, 4));
    r.realm = Bytes::from_static(b"nowhere.net");
    let (r, e) = w.relay().route(r, None, 0).unwrap_err();
    assert_eq!(Relay::refusal(&r, e, 0), Error::NoRoute);
    assert_eq!(Error::NoRoute.result_code(), 3002);
}

#[test]
fn the_3002_for_a_route_whose_peers_are_down_names_them_and_why() {
    let w = World::new(&RetryConfig::default());
    // RFC 6733 §7.1.3 DIAMETER_UNABLE_TO_DELIVER, its Error-Message (§7.3) saying
    // why the request could not be delivered.
    assert_eq!(
        w.relay().no_route_why(b"nowhere.net", 0),
        "no route for realm nowhere.net"
    );
    w.slot(0).set_state(state::CLOSED);
    w.slot(0).note_down(&"connection refused");
    assert_eq!(
        w.relay().no_route_why(b"example.net", 0),
        "no usable peer for realm example.net (peer s1.example.net down: connection refused; the others excluded)"
    );
    w.slot(1).set_state(state::SUSPECT);
    let (r, _) = relayed(to_realm(0, 1));
    let (r, e) = w.relay().route(r, None, 0).unwrap_err();
    assert_eq!(Relay::refusal(&r, e, 0), Error::NoRoute);
    assert_eq!(
        w.relay().no_route_why(&r.realm, r.app),
        "no peer up for realm example.net (peer s1.example.net down: connection refused; peer s2.example.net down)"
    );
    // Every peer up but excluded (the sender, RFC 6733 §6.1.7).
    assert_eq!(
        w.relay().no_route_why(b"example.net", 4),
        "no next hop for realm example.net: its peers are excluded (Route-Record, sender) or the Destination-Host peer is down"
    );
}

#[test]
fn every_candidate_excluded_is_3002_and_every_candidate_refused_3004() {
    let w = World::new(&RetryConfig::default());
    // The only candidate is the sender (RFC 6733 §6.1.7): no route.
    let (mut r, _) = relayed(to_realm(4, 1));
    r.tried.push(2);
    let (r, e) = w.relay().route(r, None, 0).unwrap_err();
    assert_eq!(Relay::refusal(&r, e, 1), Error::NoRoute);
    // Both candidates tried after the request came: they refused it.
    let (mut r, _) = relayed(to_realm(0, 2));
    r.tried.extend([0, 1]);
    let (r, e) = w.relay().route(r, None, 0).unwrap_err();
    assert_eq!(e, RouteError::AllBusy);
    assert_eq!(Relay::refusal(&r, e, 0), Error::AllBusy);
    assert_eq!(Error::AllBusy.result_code(), 3004);
}

#[test]
fn a_route_record_naming_the_agent_is_a_loop_answered_3005() {
    let w = World::new(&RetryConfig::default());
    let relay = w.relay();
    let check = |msg: &Bytes| {
        let routing = Routing::scan(msg).unwrap();
        relay
            .check_request(Header::read(msg), &routing)
            .map(<[u8]>::to_vec)
    };
    let clean = request(
        0,
        1,
        vec![
            Avp::str(code::DESTINATION_REALM, "example.net"),
            Avp::str(code::ROUTE_RECORD, "other.example.org"),
        ],
    );
    assert_eq!(check(&clean), Ok(b"example.net".to_vec()));
    // §6.1.3: the agent's own identity, in any case, in a Route-Record.
    let looped = request(
        0,
        2,
        vec![
            Avp::str(code::DESTINATION_REALM, "example.net"),
            Avp::str(code::ROUTE_RECORD, "other.example.org"),
            Avp::str(code::ROUTE_RECORD, "AGENT.example.com"),
        ],
    );
    let why = check(&looped).unwrap_err();
    assert_eq!(why, Error::Looped);
    // §6.1.3 asks for the Result-Code only: no Failed-AVP.
    assert_eq!((why.result_code(), why.failed_avp()), (3005, None));
    let a = Message::decode(relay.local_answer(&looped, 3005, &why.to_string())).unwrap();
    assert_eq!(a.result_code(), Some(3005));
    assert!(a.header.flags.is_error());
    assert_eq!(a.header.hop_by_hop, 2);
    assert_eq!(a.origin_host(), Some(AGENT));
    assert!(a.find(code::FAILED_AVP).is_none());
}

#[test]
fn local_requests_and_missing_destination_realm_are_answered_by_the_agent() {
    let w = World::new(&RetryConfig::default());
    let relay = w.relay();
    let check = |msg: &Bytes| {
        let routing = Routing::scan(msg).unwrap();
        relay.check_request(Header::read(msg), &routing).map(|_| ())
    };
    // §6.1.4: Destination-Host is the agent, which has no application.
    let own = request(
        0,
        1,
        vec![
            Avp::str(code::DESTINATION_REALM, "example.net"),
            Avp::str(code::DESTINATION_HOST, AGENT),
        ],
    );
    assert_eq!(check(&own), Err(Error::ForTheAgent));
    assert_eq!(Error::ForTheAgent.result_code(), 3007);
    let mut plain = Message::decode(to_realm(0, 2)).unwrap();
    plain.header.flags = diameter::codec::CommandFlags(diameter::codec::CommandFlags::REQUEST);
    let plain = plain.to_bytes().unwrap().freeze();
    assert_eq!(check(&plain), Err(Error::NotProxiable));
    assert_eq!(Error::NotProxiable.result_code(), 3007);
    // 5005 names the missing AVP in Failed-AVP (§7.5).
    let no_realm = request(0, 3, Vec::new());
    assert_eq!(check(&no_realm), Err(Error::MissingRealm));
    let failed = Error::MissingRealm.failed_avp().unwrap();
    let (f, _) = diameter::codec::avp::AvpIter::new(&failed)
        .next()
        .unwrap()
        .map(|a| (a.code, ()))
        .unwrap();
    assert_eq!((Error::MissingRealm.result_code(), f), (5005, 283));
}

#[test]
fn upstream_requests_get_a_route_record_and_a_fresh_hop_by_hop_id() {
    let w = World::new(&RetryConfig::default());
    let mut up = Upstream::new(100, TIMEOUT);
    let (r, _) = relayed(to_realm(0, 7));
    let out = send_on(&w, &mut up, 0, r, Instant::now());
    let m = written(&out);
    assert_eq!(m.header.hop_by_hop, 101);
    assert_eq!(m.header.end_to_end, 0xe2e);
    assert!(!m.header.flags.is_retransmit());
    assert_eq!(route_records(&m), vec![CLIENT.to_owned()]);
    assert_eq!(w.slot(0).stats.requests_out.load(Ordering::Relaxed), 1);
    assert!(!up.is_empty());
}

#[test]
fn a_peer_that_fails_hands_its_requests_to_an_alternate_with_the_t_flag() {
    let mut w = World::new(&RetryConfig::default());
    let t0 = Instant::now();
    let (r, down) = relayed(to_realm(0, 7));
    w.relay().route(r, None, 0).unwrap();
    let (from, r) = w.delivered_anywhere();
    let other = 1 - from;
    let mut up = Upstream::new(0, TIMEOUT);
    let out = send_on(&w, &mut up, from, r, t0);
    let sent = written(&out).header.hop_by_hop;
    // A pinned request pending at the same peer cannot move.
    let host = w.slot(from).host.clone();
    let (r, pinned_down) = relayed(to_realm(0, 8));
    w.relay().route(r, Some(&host), 0).unwrap();
    let r = w.delivered(from).unwrap();
    assert!(r.pinned);
    send_on(&w, &mut up, from, r, t0);
    assert_eq!(w.slot(from).outstanding.load(Ordering::Relaxed), 2);

    // RFC 3539 Failover(): SUSPECT or DOWN.
    let slot = w.slot(from);
    let mut rotate = 0;
    w.relay()
        .fail_over_all(&mut up, Some((from, &slot)), t0, &mut rotate);
    assert!(up.is_empty());
    assert_eq!(slot.outstanding.load(Ordering::Relaxed), 0);
    assert_eq!(slot.stats.failovers.load(Ordering::Relaxed), 1);
    assert_eq!(w.retry.stats.failover.load(Ordering::Relaxed), 1);
    let (hbh, code, why) = answer(&pinned_down);
    assert_eq!(
        (hbh, code, why.as_str()),
        (8, 3002, "destination host unavailable")
    );

    let r = w.delivered(other).expect("resent to the alternate");
    assert!(r.retransmit && r.tried.contains(&from));
    let mut alt = Upstream::new(1000, TIMEOUT);
    let m = written(&send_on(&w, &mut alt, other, r, t0));
    assert!(m.header.flags.is_retransmit(), "T flag (§5.5.4)");
    assert_eq!(route_records(&m), vec![CLIENT.to_owned()]);
    assert!(down.try_recv().is_none(), "not answered by the agent");

    // The old peer's answer, after the failover, matches nothing.
    assert!(up.handle_answer(sent, &slot.stats).is_none());
    assert_eq!(slot.stats.answers_unmatched.load(Ordering::Relaxed), 1);
}

#[test]
fn failover_without_an_alternate_is_3002() {
    let mut w = World::new(&RetryConfig::default());
    let t0 = Instant::now();
    let (r, down) = relayed(to_realm(4, 9));
    w.relay().route(r, None, 0).unwrap();
    let r = w.delivered(2).unwrap();
    let mut up = Upstream::new(0, TIMEOUT);
    send_on(&w, &mut up, 2, r, t0);
    let slot = w.slot(2);
    w.relay()
        .fail_over_all(&mut up, Some((2, &slot)), t0, &mut 0);
    let (hbh, code, why) = answer(&down);
    assert_eq!((hbh, code, why.as_str()), (9, 3002, "no alternate peer"));
}

#[test]
fn a_request_that_finds_its_next_hops_queue_full_is_answered_3004_at_once_and_counted() {
    // Application 4 routes to s3 only, whose queue holds 4 requests.
    let mut w = World::new(&RetryConfig::default());
    let mut downs = Vec::new();
    for hbh in 0..5 {
        let (r, down) = relayed(to_realm(4, hbh));
        w.relay().route(r, None, 0).unwrap();
        downs.push(down);
    }
    for down in &downs[..4] {
        assert!(down.try_recv().is_none(), "queued, not answered");
    }
    // RFC 6733 §7.1.3: the agent is too busy for that peer.
    let (hbh, code, why) = answer(&downs[4]);
    assert_eq!(
        (hbh, code, why.as_str()),
        (4, 3004, "agent too busy: the peer's request queue is full")
    );
    let slot = w.slot(2);
    assert_eq!(slot.stats.queue_full.load(Ordering::Relaxed), 1);
    assert_eq!(
        slot.outstanding.load(Ordering::Relaxed),
        4,
        "the refused one is not"
    );
    assert!(w.delivered(2).is_some(), "room for one again");
    let (r, down) = relayed(to_realm(4, 5));
    w.relay().route(r, None, 0).unwrap();
    assert!(down.try_recv().is_none());
    assert_eq!(slot.stats.queue_full.load(Ordering::Relaxed), 1);
}

#[test]
fn a_request_for_a_peer_that_does_not_take_in_its_backlog_is_answered_3004_at_once() {
    let w = World::new(&RetryConfig::default());
    let slot = w.slot(0);
    let mut up = Upstream::new(0, TIMEOUT);
    let mut out = BytesMut::from(&vec![0u8; BACKLOG - 1][..]);
    for hbh in [1, 2] {
        let (r, down) = relayed(to_realm(0, hbh));
        slot.outstanding.fetch_add(1, Ordering::Relaxed);
        w.relay().send_upstream(
            &mut up,
            Some((0, &slot)),
            true,
            (Instant::now(), &mut 0),
            r,
            &mut out,
            None,
        );
        if hbh == 1 {
            assert!(down.try_recv().is_none(), "below the backlog: written");
        } else {
            let (h, code, _) = answer(&down);
            assert_eq!((h, code), (2, 3004), "RFC 6733 §7.1.3");
        }
    }
    assert!(out.len() > BACKLOG);
    assert_eq!(slot.stats.queue_full.load(Ordering::Relaxed), 1);
    assert_eq!(
        slot.outstanding.load(Ordering::Relaxed),
        1,
        "only the written one"
    );
}

#[test]
fn no_answer_before_the_request_timeout_is_3002_and_the_late_answer_is_dropped() {
    let w = World::new(&RetryConfig::default());
    let t0 = Instant::now();
    let (r, down) = relayed(to_realm(0, 7));
    let slot = w.slot(0);
    slot.outstanding.fetch_add(1, Ordering::Relaxed);
    let mut up = Upstream::new(0, TIMEOUT);
    let sent = written(&send_on(&w, &mut up, 0, r, t0)).header.hop_by_hop;
    let relay = w.relay();
    let early = t0 + TIMEOUT - Duration::from_millis(1);
    assert_eq!(relay.handle_timeout(&mut up, Some(&slot), early), 0);
    assert!(down.try_recv().is_none(), "not yet");
    assert_eq!(relay.handle_timeout(&mut up, Some(&slot), t0 + TIMEOUT), 1);
    let (hbh, code, why) = answer(&down);
    assert_eq!(
        (hbh, code, why.as_str()),
        (7, 3002, "upstream answer timed out")
    );
    assert!(up.is_empty());
    assert_eq!(slot.outstanding.load(Ordering::Relaxed), 0);
    // Exactly one answer: the late one from upstream is dropped, counted.
    assert!(up.handle_answer(sent, &slot.stats).is_none());
    assert_eq!(slot.stats.answers_unmatched.load(Ordering::Relaxed), 1);
    assert!(down.try_recv().is_none());
}

#[test]
fn answers_match_their_request_once_and_unknown_ids_are_dropped_and_counted() {
    let w = World::new(&RetryConfig::default());
    let slot = w.slot(0);
    let mut up = Upstream::new(0, TIMEOUT);
    let (r, _) = relayed(to_realm(0, 7));
    let sent = written(&send_on(&w, &mut up, 0, r, Instant::now()))
        .header
        .hop_by_hop;
    assert!(
        up.handle_answer(sent.wrapping_add(1), &slot.stats)
            .is_none()
    );
    assert_eq!(slot.stats.answers_unmatched.load(Ordering::Relaxed), 1);
    let (r, _) = up.handle_answer(sent, &slot.stats).expect("its request");
    assert_eq!(r.hbh, 7, "the downstream identifier comes back");
    assert!(up.handle_answer(sent, &slot.stats).is_none(), "only once");
    assert_eq!(slot.stats.answers_unmatched.load(Ordering::Relaxed), 2);
}

#[test]
fn too_busy_is_retried_on_the_alternate_within_the_retry_budget() {
    let mut w = World::new(&RetryConfig {
        budget_percent: 0.0,
        min_retries_per_second: 1,
        overloaded_seconds: 0.0,
    });
    let t0 = Instant::now();
    // The first 3004 of the second is retried on the other candidate.
    let (r, _) = relayed(to_realm(0, 1));
    w.relay().retry_too_busy(r, 0, (t0, 0)).unwrap();
    let r = w.delivered(1).expect("retried on s2");
    assert_eq!(r.tried, vec![0]);
    assert_eq!(w.retry.stats.too_busy.load(Ordering::Relaxed), 1);
    // The second is over the budget: its 3004 goes to the client.
    let (r, _) = relayed(to_realm(0, 2));
    let back = w.relay().retry_too_busy(r, 0, (t0, 0)).unwrap_err();
    assert_eq!(back.hbh, 2);
    assert!(w.delivered(1).is_none());
    assert_eq!(w.retry.stats.refused_budget.load(Ordering::Relaxed), 1);
    // A second later the budget is back, but with no alternate left the
    // retry is refused and refunded.
    let t1 = t0 + Duration::from_secs(2);
    let (mut r, _) = relayed(to_realm(0, 3));
    r.tried.push(1);
    assert!(w.relay().retry_too_busy(r, 0, (t1, 0)).is_err());
    assert_eq!(
        w.retry.stats.refused_no_alternate.load(Ordering::Relaxed),
        1
    );
    let (r, _) = relayed(to_realm(0, 4));
    w.relay().retry_too_busy(r, 0, (t1, 0)).unwrap();
    assert!(w.delivered(1).is_some(), "the refund left the budget whole");
}

#[test]
fn too_busy_is_retried_unless_pinned() {
    assert_eq!(answer_fate(Some(3004), None, false), AnswerFate::Retry);
    assert_eq!(answer_fate(Some(3004), None, true), AnswerFate::Forward);
    assert_eq!(answer_fate(Some(2001), None, false), AnswerFate::Forward);
}

#[test]
fn retry_not_allowed_to_any_is_never_retried() {
    assert_eq!(
        answer_fate(Some(3004), Some(5198), false),
        AnswerFate::Forward
    );
    assert_eq!(answer_fate(None, Some(5198), false), AnswerFate::Forward);
}
