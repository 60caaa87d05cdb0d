//! RFC 6733 §6.1 request routing for a relay: Destination-Host delivered
//! directly to a connected peer (§6.1.5 step 1), otherwise the realm-based
//! routing table of §2.7 (realm + Application-Id -> next hops), with the
//! candidate choice of this agent: lowest priority first, then least
//! outstanding requests per unit of weight. Route-Record loop detection is
//! §6.1.3. Sans-io: the live state of the peers is read through [`PeerView`].
//! A reload replaces the table without a lock on the request path
//! ([`live`]).

use crate::config::Config;
use diameter::dictionary::app::RELAY as RELAY_APPLICATION_ID;

pub mod live;

/// Index of a peer in the agent's peer table.
pub type PeerId = usize;

/// What the router needs to know about the peers right now.
pub trait PeerView {
    /// The peer whose DiameterIdentity is `host` (any case), if known.
    fn by_host(&self, host: &str) -> Option<PeerId>;
    /// True when the peer's connection is open and its watchdog OKAY.
    fn usable(&self, id: PeerId) -> bool;
    /// Requests sent to the peer and not answered yet.
    fn outstanding(&self, id: PeerId) -> u32;
}

/// Why a request cannot be routed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum RouteError {
    /// No route for the realm and application, or the Destination-Host peer
    /// is not available: 3002 DIAMETER_UNABLE_TO_DELIVER.
    #[error("no route to the destination")]
    NoRoute,
    /// Routes exist but every candidate has already refused the request:
    /// 3004 DIAMETER_TOO_BUSY.
    #[error("every candidate refused the request")]
    AllBusy,
}

impl RouteError {
    /// The Result-Code of the answer the agent gives.
    #[must_use]
    pub fn result_code(self) -> u32 {
        match self {
            RouteError::NoRoute => 3002,
            RouteError::AllBusy => 3004,
        }
    }
}

/// One next hop of a route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Candidate {
    /// The peer.
    pub peer: PeerId,
    /// Lower is preferred.
    pub priority: u32,
    /// Share among equal priorities.
    pub weight: u32,
}

/// One realm route.
#[derive(Debug, Clone)]
struct Route {
    realm: String,
    application: Option<u32>,
    candidates: Vec<Candidate>,
}

/// The realm routing table. No I/O, no clock.
#[derive(Debug, Clone, Default)]
pub struct Router {
    routes: Vec<Route>,
}

/// What the router decided for one request.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Choice {
    /// The next hop.
    pub peer: PeerId,
    /// True when the request is pinned to this peer by its Destination-Host
    /// (it must not fail over elsewhere).
    pub pinned: bool,
}

impl Router {
    /// An empty table.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a route; routes for an exact application id are preferred over
    /// routes without one (wildcard).
    pub fn add_route(&mut self, realm: &str, application: Option<u32>, candidates: Vec<Candidate>) {
        self.routes.push(Route {
            realm: realm.to_ascii_lowercase(),
            application,
            candidates,
        });
    }

    /// The table of a configuration; `peer_id` maps a `[[peer]]` host to
    /// its id.
    #[must_use]
    pub fn from_config(config: &Config, peer_id: impl Fn(&str) -> Option<PeerId>) -> Self {
        let mut r = Self::new();
        for route in &config.routes {
            let candidates = route
                .peers
                .iter()
                .filter_map(|p| {
                    let (host, priority, weight) = p.parts();
                    peer_id(host).map(|peer| Candidate {
                        peer,
                        priority,
                        weight,
                    })
                })
                .collect();
            r.add_route(&route.realm, route.application, candidates);
        }
        r
    }

    fn route_for(&self, realm: &str, application: u32) -> Option<&Route> {
        let matching = |r: &&Route| r.realm.eq_ignore_ascii_case(realm);
        self.routes
            .iter()
            .filter(matching)
            .find(|r| r.application == Some(application))
            .or_else(|| {
                self.routes
                    .iter()
                    .filter(matching)
                    .find(|r| r.application.is_none())
            })
    }

    /// The route of `realm` for `application`, else for the relay
    /// application (any).
    fn realm_route(&self, realm: &str, application: u32) -> Result<&Route, RouteError> {
        self.route_for(realm, application)
            .or_else(|| self.route_for(realm, RELAY_APPLICATION_ID))
            .ok_or(RouteError::NoRoute)
    }

    /// The peers of the route a request for `realm` and `application`
    /// takes, or `None` without one (for the agent's 3002 Error-Message and
    /// the warning that a route has no peer up: cold paths).
    #[must_use]
    pub fn route_peers(&self, realm: &str, application: u32) -> Option<Vec<PeerId>> {
        let route = self.realm_route(realm, application).ok()?;
        Some(route.candidates.iter().map(|c| c.peer).collect())
    }

    /// The realms of the routes that list `peer`.
    pub fn realms_of(&self, peer: PeerId) -> impl Iterator<Item = (&str, Vec<PeerId>)> + '_ {
        self.routes
            .iter()
            .filter(move |r| r.candidates.iter().any(|c| c.peer == peer))
            .map(|r| {
                (
                    r.realm.as_str(),
                    r.candidates.iter().map(|c| c.peer).collect(),
                )
            })
    }

    /// Every route: its realm, its application (`None`: any) and its
    /// peers (for `GET /health`: a cold path).
    pub fn routes(&self) -> impl Iterator<Item = (&str, Option<u32>, Vec<PeerId>)> + '_ {
        self.routes.iter().map(|r| {
            (
                r.realm.as_str(),
                r.application,
                r.candidates.iter().map(|c| c.peer).collect(),
            )
        })
    }

    /// True when the table has a route for `realm` and `application`.
    #[must_use]
    pub fn has_route(&self, realm: &str, application: u32) -> bool {
        self.route_for(realm, application).is_some()
    }

    /// Chooses the next hop of a request.
    ///
    /// `destination_host` names a peer: delivered directly when that peer
    /// is known (pinned; [`RouteError::NoRoute`] when it is not usable).
    /// Otherwise the realm route of `realm` and `application` is used:
    /// candidates in `tried` are skipped; among the usable rest, the lowest
    /// priority wins, then the smallest `(outstanding + 1) / weight`, then
    /// the first listed after `rotate` (which spreads ties).
    ///
    /// # Errors
    /// [`RouteError::NoRoute`] when nothing routes there,
    /// [`RouteError::AllBusy`] when every candidate is in `tried`.
    pub fn choose(
        &self,
        view: &impl PeerView,
        destination_host: Option<&str>,
        realm: &str,
        application: u32,
        tried: &[PeerId],
        rotate: usize,
    ) -> Result<Choice, RouteError> {
        if let Some(host) = destination_host
            && let Some(peer) = view.by_host(host)
        {
            return if view.usable(peer) && !tried.contains(&peer) {
                Ok(Choice { peer, pinned: true })
            } else {
                Err(RouteError::NoRoute)
            };
        }
        Self::pick(
            self.realm_route(realm, application)?,
            view,
            tried,
            &[],
            rotate,
        )
    }

    /// The first `N` next hops of a request in order of preference: what
    /// [`Router::choose`] gives, then what it would give with that choice
    /// added to `tried`, and so on (one route lookup). A pinned choice
    /// (Destination-Host names a peer) comes alone. Returns the choices and
    /// how many of them are valid (at least one).
    ///
    /// # Errors
    /// As [`Router::choose`], when not even one next hop is found.
    pub fn choose_many<const N: usize>(
        &self,
        view: &impl PeerView,
        destination_host: Option<&str>,
        realm: &str,
        application: u32,
        tried: &[PeerId],
        rotate: usize,
    ) -> Result<([Choice; N], usize), RouteError> {
        let mut out = [Choice::default(); N];
        if N == 0 {
            return Ok((out, 0));
        }
        let route = match destination_host.and_then(|h| view.by_host(h)) {
            Some(_) => {
                out[0] = self.choose(view, destination_host, realm, application, tried, rotate)?;
                return Ok((out, 1));
            }
            None => self.realm_route(realm, application)?,
        };
        let mut chosen = [PeerId::default(); 16];
        let max = N.min(chosen.len());
        let mut n = 0;
        while n < max {
            match Self::pick(route, view, tried, &chosen[..n], rotate) {
                Ok(c) => {
                    out[n] = c;
                    chosen[n] = c.peer;
                    n += 1;
                }
                Err(e) if n == 0 => return Err(e),
                Err(_) => break,
            }
        }
        Ok((out, n))
    }

    /// The best usable candidate of `route` in neither `tried` nor `chosen`.
    fn pick(
        route: &Route,
        view: &impl PeerView,
        tried: &[PeerId],
        chosen: &[PeerId],
        rotate: usize,
    ) -> Result<Choice, RouteError> {
        let n = route.candidates.len();
        let mut best: Option<(u32, u64, Candidate)> = None;
        let mut any_untried = false;
        for k in 0..n {
            let c = route.candidates[(k + rotate) % n];
            if tried.contains(&c.peer) || chosen.contains(&c.peer) {
                continue;
            }
            any_untried = true;
            if !view.usable(c.peer) {
                continue;
            }
            // Compare (outstanding + 1) / weight without division:
            // scaled by the product of weights across candidates would
            // overflow, so scale by a fixed 2^16.
            let load =
                ((u64::from(view.outstanding(c.peer)) + 1) << 16) / u64::from(c.weight.max(1));
            let better = match best {
                None => true,
                Some((p, l, _)) => (c.priority, load) < (p, l),
            };
            if better {
                best = Some((c.priority, load, c));
            }
        }
        match best {
            Some((_, _, c)) => Ok(Choice {
                peer: c.peer,
                pinned: false,
            }),
            None if !(any_untried || tried.is_empty() && chosen.is_empty()) => {
                Err(RouteError::AllBusy)
            }
            None => Err(RouteError::NoRoute),
        }
    }
}

/// RFC 6733 §6.1.3: a request whose Route-Record AVPs contain the agent's
/// own identity has looped (3005 DIAMETER_LOOP_DETECTED).
#[must_use]
pub fn has_looped<'a>(own_host: &str, route_records: impl IntoIterator<Item = &'a [u8]>) -> bool {
    route_records
        .into_iter()
        .any(|r| r.eq_ignore_ascii_case(own_host.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    struct View {
        hosts: Vec<&'static str>,
        usable: Vec<bool>,
        outstanding: Vec<u32>,
    }

    impl PeerView for View {
        fn by_host(&self, host: &str) -> Option<PeerId> {
            self.hosts.iter().position(|h| h.eq_ignore_ascii_case(host))
        }
        fn usable(&self, id: PeerId) -> bool {
            self.usable[id]
        }
        fn outstanding(&self, id: PeerId) -> u32 {
            self.outstanding[id]
        }
    }

    fn view() -> View {
        View {
            hosts: vec!["s1.net", "s2.net", "s3.net", "client.org"],
            usable: vec![true, true, true, true],
            outstanding: vec![0, 0, 0, 0],
        }
    }

    fn c(peer: PeerId, priority: u32, weight: u32) -> Candidate {
        Candidate {
            peer,
            priority,
            weight,
        }
    }

    fn router() -> Router {
        let mut r = Router::new();
        r.add_route(
            "example.net",
            None,
            vec![c(0, 0, 1), c(1, 0, 1), c(2, 1, 1)],
        );
        r.add_route("example.net", Some(4), vec![c(2, 0, 1)]);
        r
    }

    #[test]
    fn destination_host_of_a_connected_peer_is_delivered_directly_and_pinned() {
        let v = view();
        let ch = router()
            .choose(&v, Some("S2.NET"), "other.realm", 16777215, &[], 0)
            .unwrap();
        assert_eq!(
            ch,
            Choice {
                peer: 1,
                pinned: true
            }
        );
    }

    #[test]
    fn destination_host_of_an_unusable_peer_is_not_rerouted() {
        let mut v = view();
        v.usable[1] = false;
        let e = router()
            .choose(&v, Some("s2.net"), "example.net", 0, &[], 0)
            .unwrap_err();
        assert_eq!(e.result_code(), 3002);
    }

    #[test]
    fn unknown_destination_host_falls_back_to_realm_routing() {
        let v = view();
        let ch = router()
            .choose(&v, Some("far.away.net"), "example.net", 0, &[], 0)
            .unwrap();
        assert!(!ch.pinned);
        assert!(ch.peer < 2);
    }

    #[test]
    fn choose_many_is_repeated_choose_with_each_choice_tried() {
        let r = router();
        for (host, realm, app) in [
            (None, "example.net", 0),
            (None, "EXAMPLE.net", 4),
            (Some("s2.net"), "example.net", 0),
            (Some("far.away.net"), "example.net", 0),
        ] {
            for rotate in 0..3 {
                let mut v = view();
                v.outstanding[0] = 3;
                let (got, n) = r
                    .choose_many::<4>(&v, host, realm, app, &[], rotate)
                    .unwrap();
                let mut tried = Vec::new();
                let mut want = Vec::new();
                let mut h = host;
                while let Ok(c) = r.choose(&v, h, realm, app, &tried, rotate) {
                    want.push(c);
                    tried.push(c.peer);
                    h = None;
                    if c.pinned {
                        break;
                    }
                }
                assert_eq!(&got[..n], &want[..], "{host:?} {realm} {app} {rotate}");
            }
        }
        assert_eq!(
            r.choose_many::<4>(&view(), None, "nowhere.net", 0, &[], 0),
            Err(RouteError::NoRoute)
        );
    }

    #[test]
    fn no_route_for_realm_is_3002() {
        let e = router()
            .choose(&view(), None, "nowhere.net", 0, &[], 0)
            .unwrap_err();
        assert_eq!(e, RouteError::NoRoute);
        assert_eq!(e.result_code(), 3002);
    }

    #[test]
    fn exact_application_route_wins_over_wildcard() {
        let ch = router()
            .choose(&view(), None, "EXAMPLE.net", 4, &[], 0)
            .unwrap();
        assert_eq!(ch.peer, 2);
    }

    #[test]
    fn least_outstanding_first_then_priority_fallback() {
        let r = router();
        let mut v = view();
        v.outstanding = vec![5, 2, 0, 0];
        assert_eq!(
            r.choose(&v, None, "example.net", 0, &[], 0).unwrap().peer,
            1
        );
        // Priority 1 (s3) only when no priority-0 candidate is usable.
        v.usable[0] = false;
        v.usable[1] = false;
        assert_eq!(
            r.choose(&v, None, "example.net", 0, &[], 0).unwrap().peer,
            2
        );
    }

    #[test]
    fn weights_share_load_in_proportion() {
        let mut r = Router::new();
        r.add_route("w.net", None, vec![c(0, 0, 3), c(1, 0, 1)]);
        let mut v = view();
        let mut sent = [0u32; 2];
        for i in 0..400 {
            let p = r.choose(&v, None, "w.net", 0, &[], i).unwrap().peer;
            sent[p] += 1;
            v.outstanding[p] += 1; // nothing is answered: outstanding grows
        }
        assert_eq!(sent[0] + sent[1], 400);
        let ratio = f64::from(sent[0]) / f64::from(sent[1]);
        assert!((2.8..=3.2).contains(&ratio), "{sent:?}");
    }

    #[test]
    fn ties_are_spread_by_rotation() {
        let mut r = Router::new();
        r.add_route("t.net", None, vec![c(0, 0, 1), c(1, 0, 1)]);
        let v = view();
        let a = r.choose(&v, None, "t.net", 0, &[], 0).unwrap().peer;
        let b = r.choose(&v, None, "t.net", 0, &[], 1).unwrap().peer;
        assert_ne!(a, b);
    }

    #[test]
    fn tried_candidates_are_skipped_and_exhaustion_is_too_busy() {
        let r = router();
        let v = view();
        let ch = r.choose(&v, None, "example.net", 0, &[0], 0).unwrap();
        assert_eq!(ch.peer, 1);
        let e = r
            .choose(&v, None, "example.net", 0, &[0, 1, 2], 0)
            .unwrap_err();
        assert_eq!(e, RouteError::AllBusy);
        assert_eq!(e.result_code(), 3004);
    }

    #[test]
    fn loop_is_detected_in_route_records_case_insensitively() {
        let rr: Vec<&[u8]> = vec![b"client.org", b"AGENT.example.com"];
        assert!(has_looped("agent.example.com", rr.iter().copied()));
        assert!(!has_looped("other.example.com", rr.iter().copied()));
    }
}
