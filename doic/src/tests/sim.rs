//! A small in-memory Diameter network with a simulated clock: clients, agents
//! running the DOIC core, and servers that report overload. Requests and
//! answers are typed values; a request is carried hop by hop and its answer
//! comes back the same way, so every node sees what it would see on the wire.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use crate::engine::{AnswerView, Doic};
use crate::features::{
    self, Algorithm, OC_PEER_REPORT, OcSupportedFeatures, peer_supports_peer_report,
};
use crate::report::{Abatement, OcOlr, Report, ReportType};
use crate::treatment::{Candidate, RequestView, Treatment};
use crate::{DoicConfig, PeerPolicy};

pub(crate) use diameter::dictionary::result::SUCCESS;

/// A request on the simulated wire.
#[derive(Clone, Debug)]
pub(crate) struct Req {
    pub(crate) app_id: u32,
    pub(crate) command: u32,
    pub(crate) origin_host: String,
    pub(crate) dest_realm: String,
    pub(crate) dest_host: Option<String>,
    pub(crate) features: Option<OcSupportedFeatures>,
    pub(crate) drmp: Option<u8>,
}

impl Req {
    /// A realm-routed request from `origin`.
    pub(crate) fn realm(origin: &str, realm: &str) -> Self {
        Self {
            app_id: APP,
            command: 272,
            origin_host: origin.into(),
            dest_realm: realm.into(),
            dest_host: None,
            features: None,
            drmp: None,
        }
    }

    /// A host-routed request from `origin`.
    pub(crate) fn host(origin: &str, realm: &str, host: &str) -> Self {
        Self {
            dest_host: Some(host.into()),
            ..Self::realm(origin, realm)
        }
    }
}

/// The Application-ID used in the simulations (Gx).
pub(crate) const APP: u32 = 16_777_238;

/// An answer on the simulated wire.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Ans {
    pub(crate) origin_host: String,
    pub(crate) origin_realm: String,
    pub(crate) result_code: Option<u32>,
    pub(crate) experimental: Option<u32>,
    pub(crate) features: Option<OcSupportedFeatures>,
    pub(crate) olrs: Vec<OcOlr>,
    /// The nodes the request went through, for assertions (not on the wire).
    pub(crate) path: Vec<String>,
    /// What the last agent's core said about retrying elsewhere.
    pub(crate) retry_on_alternate: bool,
}

impl Ans {
    /// The result, Result-Code or Experimental-Result-Code.
    pub(crate) fn code(&self) -> u32 {
        self.experimental.or(self.result_code).unwrap_or(0)
    }

    /// The reports of type `rt`.
    pub(crate) fn reports(&self, rt: ReportType) -> Vec<&OcOlr> {
        self.olrs.iter().filter(|o| o.report_type == rt).collect()
    }

    /// The server that answered (last node of the path).
    pub(crate) fn served_by(&self) -> &str {
        self.path.last().map_or("", String::as_str)
    }
}

/// A server, and the overload reports it sends as a reporting node.
#[derive(Debug)]
pub(crate) struct Server {
    pub(crate) realm: String,
    /// Algorithm it selects for host/realm reports when offered.
    pub(crate) algo: Algorithm,
    /// Its reports, by type; sent in every answer to a DOIC request.
    pub(crate) reports: BTreeMap<i32, Report>,
    /// Requests received.
    pub(crate) received: u64,
    /// Requests received per second of simulated time.
    pub(crate) per_second: BTreeMap<u64, u64>,
    /// The last request received and the peer it came from.
    pub(crate) last: Option<(String, Req)>,
}

/// A DOIC client or agent: a [`Doic`] core plus its routes.
#[derive(Debug)]
pub(crate) struct Agent {
    pub(crate) core: Doic,
    /// Realm -> candidates (peer, server behind it).
    pub(crate) realm_routes: HashMap<String, Vec<(String, Option<String>)>>,
    /// Host -> peers toward it.
    pub(crate) host_routes: HashMap<String, Vec<String>>,
    /// Rotate the first choice of realm routes (load distribution).
    pub(crate) round_robin: bool,
    rr: usize,
    /// Whether this node originates requests (a client): it does not relay
    /// DOIC AVPs downstream and abates its own traffic.
    pub(crate) is_client: bool,
}

/// A node of the network.
#[derive(Debug)]
pub(crate) enum Node {
    Server(Box<Server>),
    Agent(Box<Agent>),
}

/// The network and its clock.
pub(crate) struct Net {
    start: Instant,
    now: Instant,
    nodes: HashMap<String, Node>,
}

impl Net {
    pub(crate) fn new() -> Self {
        let start = Instant::now();
        Self {
            start,
            now: start,
            nodes: HashMap::new(),
        }
    }

    pub(crate) fn now(&self) -> Instant {
        self.now
    }

    pub(crate) fn advance(&mut self, d: Duration) {
        self.now += d;
    }

    pub(crate) fn server(&mut self, id: &str, realm: &str) {
        self.nodes.insert(
            id.into(),
            Node::Server(Box::new(Server {
                realm: realm.into(),
                algo: Algorithm::Loss,
                reports: BTreeMap::new(),
                received: 0,
                per_second: BTreeMap::new(),
                last: None,
            })),
        );
    }

    /// Adds an agent (or, with `is_client`, a DOIC client) trusting `trusted`.
    pub(crate) fn agent(
        &mut self,
        id: &str,
        mut cfg: DoicConfig,
        trusted: &[&str],
        is_client: bool,
    ) {
        for t in trusted {
            cfg.peers.insert(
                (*t).into(),
                PeerPolicy {
                    trusted: true,
                    receive_reports: true,
                    ..PeerPolicy::default()
                },
            );
        }
        let seed = id
            .bytes()
            .fold(17u64, |h, b| h.wrapping_mul(31).wrapping_add(u64::from(b)));
        self.nodes.insert(
            id.into(),
            Node::Agent(Box::new(Agent {
                core: Doic::new(id, cfg, seed, 1_000).unwrap(),
                realm_routes: HashMap::new(),
                host_routes: HashMap::new(),
                round_robin: false,
                rr: 0,
                is_client,
            })),
        );
    }

    pub(crate) fn agent_mut(&mut self, id: &str) -> &mut Agent {
        match self.nodes.get_mut(id) {
            Some(Node::Agent(a)) => a,
            _ => panic!("no agent {id}"),
        }
    }

    pub(crate) fn server_mut(&mut self, id: &str) -> &mut Server {
        match self.nodes.get_mut(id) {
            Some(Node::Server(s)) => s,
            _ => panic!("no server {id}"),
        }
    }

    /// Routes realm traffic of `at` through `(peer, server)` candidates.
    pub(crate) fn realm_route(&mut self, at: &str, realm: &str, cands: &[(&str, Option<&str>)]) {
        let c = cands
            .iter()
            .map(|(p, s)| ((*p).to_owned(), s.map(str::to_owned)))
            .collect();
        self.agent_mut(at).realm_routes.insert(realm.into(), c);
    }

    /// Routes host traffic of `at` for `host` through `peers`.
    pub(crate) fn host_route(&mut self, at: &str, host: &str, peers: &[&str]) {
        let p = peers.iter().map(|p| (*p).to_owned()).collect();
        self.agent_mut(at).host_routes.insert(host.into(), p);
    }

    /// Makes `server` report: `abatement` in a report of type `rt`.
    pub(crate) fn overload(
        &mut self,
        server: &str,
        rt: ReportType,
        seq: u64,
        abatement: Abatement,
        validity: u32,
    ) {
        let id = server.to_owned();
        let s = self.server_mut(server);
        if let Abatement::Rate { .. } = abatement {
            s.algo = Algorithm::Rate;
        }
        s.reports.insert(
            rt.value(),
            Report {
                report_type: rt,
                sequence: seq,
                validity: Duration::from_secs(u64::from(validity)),
                abatement,
                source_id: (rt == ReportType::Peer).then_some(id),
            },
        );
    }

    /// The client `origin` sends `req` (a client node abates first, if any).
    pub(crate) fn send(&mut self, req: Req) -> Ans {
        let origin = req.origin_host.clone();
        if matches!(self.nodes.get(&origin), Some(Node::Agent(_))) {
            self.deliver(&origin, &origin, req)
        } else {
            // A plain client without DOIC: sends to its first-hop agent.
            panic!("client {origin} has no node; use send_via")
        }
    }

    /// A non-DOIC client `req.origin_host` sends `req` to `first_hop`.
    pub(crate) fn send_via(&mut self, first_hop: &str, req: Req) -> Ans {
        let from = req.origin_host.clone();
        self.deliver(&from, first_hop, req)
    }

    /// `to` receives `req` from `from` and returns its answer.
    fn deliver(&mut self, from: &str, to: &str, req: Req) -> Ans {
        let now = self.now;
        let sec = (now - self.start).as_secs();
        let mut node = self
            .nodes
            .remove(to)
            .unwrap_or_else(|| panic!("no node {to}"));
        let ans = match &mut node {
            Node::Server(s) => {
                s.received += 1;
                *s.per_second.entry(sec).or_default() += 1;
                s.last = Some((from.to_owned(), req.clone()));
                server_answer(to, from, s, &req)
            }
            Node::Agent(a) => self.agent_handle(a, to, from, req),
        };
        self.nodes.insert(to.to_owned(), node);
        ans
    }

    fn agent_handle(&mut self, a: &mut Agent, me: &str, from: &str, mut req: Req) -> Ans {
        let now = self.now;
        let cands: Vec<(String, Option<String>)> = match &req.dest_host {
            Some(h) => a
                .host_routes
                .get(h)
                .map(|ps| {
                    ps.iter()
                        .map(|p| (p.clone(), (p == h).then(|| h.clone())))
                        .collect()
                })
                .unwrap_or_else(|| vec![(h.clone(), Some(h.clone()))]),
            None => {
                let mut c = a
                    .realm_routes
                    .get(&req.dest_realm)
                    .cloned()
                    .unwrap_or_default();
                if a.round_robin && !c.is_empty() {
                    let k = a.rr % c.len();
                    c.rotate_left(k);
                    a.rr += 1;
                }
                c
            }
        };
        let cand_views: Vec<Candidate<'_>> = cands
            .iter()
            .map(|(p, s)| Candidate {
                peer: p,
                server: s.as_deref(),
            })
            .collect();
        let features = req.features.clone();
        let view = RequestView {
            app_id: req.app_id,
            command_code: req.command,
            from_peer: from,
            dest_realm: &req.dest_realm,
            dest_host: req.dest_host.as_deref(),
            features: if a.is_client { None } else { features.as_ref() },
            drmp: req.drmp,
        };
        let (index, add, tx) = match a.core.treat(now, &view, &cand_views) {
            Treatment::Forward { index, tx } | Treatment::Divert { index, tx } => {
                (index, a.core.request_features().clone(), tx)
            }
            Treatment::Throttle { result, .. } => {
                // The agent's own answer carries its DOIC AVPs (RFC 8581 §6.2.4).
                let local = a.core.local_answer(now, &view);
                let keep = !a.is_client;
                return Ans {
                    origin_host: me.into(),
                    origin_realm: "agents".into(),
                    result_code: (!result.is_experimental()).then_some(result.code()),
                    experimental: result.is_experimental().then_some(result.code()),
                    features: local.add_features.filter(|_| keep),
                    olrs: if keep {
                        local.forward_reports
                    } else {
                        Vec::new()
                    },
                    path: vec![me.into()],
                    retry_on_alternate: true,
                };
            }
            Treatment::NoRoute => {
                return Ans {
                    origin_host: me.into(),
                    origin_realm: "agents".into(),
                    result_code: Some(3002),
                    experimental: None,
                    features: None,
                    olrs: Vec::new(),
                    path: vec![me.into()],
                    retry_on_alternate: true,
                };
            }
        };
        let upstream = cands[index].0.clone();
        let (state, client, dest_realm) = (
            tx.to_state(),
            tx.client.into_owned(),
            tx.dest_realm.into_owned(),
        );
        req.features = Some(add);
        let mut ans = self.deliver(me, &upstream, req);
        let view = AnswerView {
            app_id: state.app_id,
            origin_host: &ans.origin_host,
            origin_realm: &ans.origin_realm,
            result_code: ans.result_code,
            experimental_result_code: ans.experimental,
            features: ans.features.as_ref(),
            olrs: &ans.olrs,
        };
        let tx = state.pending(&client, &dest_realm, &upstream);
        let act = a.core.on_answer(now, &tx, &upstream, &view);
        // A client keeps the answer as received (its application sees it); an
        // agent strips the DOIC AVPs and adds what its core decided.
        if !a.is_client && act.strip {
            ans.features = None;
            ans.olrs.clear();
        }
        if !a.is_client {
            ans.features = act.add_features;
            ans.olrs = act.forward_reports;
        }
        ans.retry_on_alternate = act.retry_on_alternate;
        ans.path.insert(0, me.into());
        ans
    }
}

/// A server's answer: 2001, with OC-Supported-Features and its reports when the
/// request carried OC-Supported-Features (RFC 7683 §5.1.2), peer reports only
/// toward a peer that announced support with its own SourceID (RFC 8581 §6.1.2).
fn server_answer(me: &str, from: &str, s: &Server, req: &Req) -> Ans {
    let mut ans = Ans {
        origin_host: me.into(),
        origin_realm: s.realm.clone(),
        result_code: Some(SUCCESS),
        experimental: None,
        features: None,
        olrs: Vec::new(),
        path: vec![me.into()],
        retry_on_alternate: true,
    };
    let Some(f) = &req.features else {
        return ans;
    };
    let algo = if crate::features::supports(f, s.algo) {
        s.algo
    } else {
        Algorithm::Loss
    };
    let pr = peer_supports_peer_report(Some(f), from);
    let mut vector = algo.bit();
    if pr {
        vector |= OC_PEER_REPORT;
    }
    ans.features = Some(OcSupportedFeatures {
        feature_vector: Some(vector),
        source_id: pr.then(|| me.to_owned()),
        peer_algo: pr.then(|| algo.bit()),
    });
    for r in s.reports.values() {
        if r.report_type == ReportType::Peer && !pr {
            continue;
        }
        if r.abatement.algorithm() != algo {
            continue;
        }
        ans.olrs.push(r.to_olr());
    }
    let _ = features::OLR_DEFAULT_ALGO;
    ans
}

/// Counts answers by code.
pub(crate) fn tally(answers: &[Ans]) -> BTreeMap<u32, usize> {
    let mut m = BTreeMap::new();
    for a in answers {
        *m.entry(a.code()).or_default() += 1;
    }
    m
}
