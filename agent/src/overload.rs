//! DOIC in the running relay: RFC 7683 §5.1 (the agent's
//! OC-Supported-Features in every relayed request, SourceID replaced, RFC
//! 8581 §6.1), §5.2.2 and §8 (throttled requests answered 3004 / 5012 /
//! Experimental-Result 5198), §5.2.1 and §10 (reports of trusted peers
//! accepted, forwarded to DOIC clients, stripped otherwise), RFC 8581 §6.2.5
//! (peer reports never relayed) and RFC 8582 (the rate bucket shared by the
//! workers).
//!
//! Each worker thread owns one [`Doic`] core in a thread local: the
//! per-request path takes no lock. (A worker on a caller's runtime is not
//! a thread: it lends its core to the thread polling its task, `overload::hosted`.) A report accepted on one worker comes
//! back from [`Doic::on_answer`] as [`Replica`]s, which are put in the other
//! workers' inboxes (a mutex taken only when a report arrives; the request
//! path checks an atomic flag). The control thread ([`tick`], every 100 ms on
//! each worker) drives [`Doic::handle_timeout`] and publishes each worker's
//! [`Snapshot`] for `/metrics` and `GET /audit`.
//!
//! With `own_capacity`, the control thread also measures the agent's own
//! load and every worker sends the same own peer reports ([`own`]).

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use bytes::{Bytes, BytesMut};

use crate::agent::Shared;
use crate::clock::Clock;
use crate::routing::PeerId;
use diameter::codec::avp::{Avp, AvpIter, RawAvp};
use diameter::codec::header::finish;
use diameter::codec::relay::{MessageBuf, Routing};
use diameter::codec::{Header, builder};
use diameter::dictionary::code;
use doic::audit::Totals;
use doic::report::Abatement;
use doic::treatment::{Replica, ThrottleAnswer};
use doic::wire::{DoicAvps, apply_answer, text};
use doic::{
    AnswerView, Candidate, Doic, DoicConfig, OcSupportedFeatures, RequestView, Treatment, TxState,
};

pub(crate) mod hosted;
pub mod own;

/// Vendor-Id put in the Experimental-Result of a 5198 answer (3GPP; the code
/// is vendor practice, the vendor the deployment's choice).
pub const RETRY_NOT_ALLOWED_VENDOR: u32 = diameter::dictionary::vendor::TGPP;
/// Most candidates offered to the core for one request.
const MAX_CANDIDATES: usize = 4;

thread_local! {
    static WORKER: Cell<usize> = const { Cell::new(usize::MAX) };
    static CORE: RefCell<Option<Doic>> = const { RefCell::new(None) };
}

/// Marks the current thread as worker `index` (called once by the worker
/// thread at start).
pub(crate) fn set_worker(index: usize) {
    WORKER.with(|w| w.set(index));
}

/// Reports accepted elsewhere, waiting for one worker.
#[derive(Debug, Default)]
struct Inbox {
    ready: AtomicBool,
    items: Mutex<Vec<Replica>>,
}

/// An active overload control state, as published by a worker.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OcsRow {
    /// Application-ID.
    pub app_id: u32,
    /// `host`, `realm` or `peer`.
    pub report_type: &'static str,
    /// The host, realm or peer it is for.
    pub target: String,
    /// What it asks for.
    pub abatement: Abatement,
    /// OC-Sequence-Number in force.
    pub sequence: u64,
}

/// What one worker's core looked like at the last tick.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    /// Treatment totals.
    pub totals: Totals,
    /// Active OCS entries.
    pub ocs: Vec<OcsRow>,
    /// Received reports by verdict, over the retained trail.
    pub verdicts: BTreeMap<String, u64>,
    /// The evidence trail as JSON ([`doic::audit::Audit::to_json`]).
    pub audit: serde_json::Value,
}

/// DOIC state shared by the workers: configuration, inboxes, snapshots.
#[derive(Debug)]
pub struct Overload {
    cfg: DoicConfig,
    identity: String,
    /// The clock of every `now` given to the cores, request path included
    /// (RFC 8582 §8.3: the bucket's arrival times): the CPU's counter,
    /// about half the cost of `Instant::now` (docs/bucket.md).
    clock: Clock,
    origin: Instant,
    sequence_base: u64,
    inboxes: Vec<Inbox>,
    snapshots: Vec<Mutex<Snapshot>>,
    /// The agent's own overload (`own_capacity`).
    own: own::OwnState,
    /// The agent's OC-Supported-Features for requests, encoded once.
    features_avp: Bytes,
    /// The agent's OC-Supported-Features toward a DOIC client in an answer
    /// that selects nothing (loss), encoded once for each case: the client
    /// without peer reports, with them and OC-Peer-Algo loss, with them and
    /// OC-Peer-Algo rate ([`Doic::idle_answer_peer_algo`]).
    answer_avps: [Bytes; 3],
}

impl Overload {
    /// The DOIC state of an agent with `workers` workers, or `None` when
    /// `cfg` is `None` (DOIC off).
    #[must_use]
    pub fn new(identity: &str, cfg: Option<DoicConfig>, workers: usize) -> Option<Self> {
        cfg.map(|cfg| Self::with_clock(identity, cfg, workers, Clock::new()))
    }

    /// [`Overload::new`] with DOIC on, every `now` read from `clock` (the
    /// agent on a caller's runtime follows that runtime's time,
    /// [`Clock::following`]).
    #[must_use]
    pub fn with_clock(identity: &str, cfg: DoicConfig, workers: usize, clock: Clock) -> Self {
        let sequence_base = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(1, |d| d.as_secs());
        let origin = clock.now();
        let base_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(1, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX / 2));
        // RFC 7683 §5.1.3 / RFC 8581 §6.1.1: the same AVP in every relayed
        // request (the core's `Doic::request_features`).
        let vector = doic::features::announced_vector(&cfg.algorithms, cfg.peer_report);
        let mut features_avp = BytesMut::with_capacity(64);
        if let Err(e) = doic::features::request_features(vector, identity)
            .to_avp()
            .encode(&mut features_avp)
        {
            tracing::error!(cause = %e, "cannot encode the agent's OC-Supported-Features");
        }
        // RFC 7683 §5.1.2, RFC 8581 §6.1.2: what `Doic::on_answer` adds for a
        // DOIC client when nothing is selected upstream.
        let answer_avp = |peer_report: bool, peer_algo: doic::Algorithm| {
            let f = doic::features::answer_features(
                Some(&OcSupportedFeatures::default()),
                peer_report,
                doic::Algorithm::Loss,
                peer_algo,
                identity,
            )
            .unwrap_or_default();
            let mut out = BytesMut::with_capacity(64);
            if let Err(e) = f.to_avp().encode(&mut out) {
                tracing::error!(cause = %e, "cannot encode the agent's answer OC-Supported-Features");
            }
            out.freeze()
        };
        let answer_avps = [
            answer_avp(false, doic::Algorithm::Loss),
            answer_avp(true, doic::Algorithm::Loss),
            answer_avp(true, doic::Algorithm::Rate),
        ];
        Self {
            answer_avps,
            features_avp: features_avp.freeze(),
            own: own::OwnState::new(identity, cfg.own_capacity, origin, base_ms),
            cfg,
            identity: identity.to_owned(),
            clock,
            origin,
            sequence_base,
            inboxes: (0..workers).map(|_| Inbox::default()).collect(),
            snapshots: (0..workers).map(|_| Mutex::default()).collect(),
        }
    }

    /// The agent's OC-Supported-Features AVP, encoded, as every relayed
    /// request carries it.
    #[must_use]
    pub fn features_avp(&self) -> &[u8] {
        &self.features_avp
    }

    /// The agent's OC-Supported-Features toward a DOIC client in an answer
    /// that selects nothing, encoded: `which` as [`idle_client_answer`]
    /// gives it (0: the client without peer reports; 1, 2: with them, and
    /// OC-Peer-Algo loss or rate). Empty for another value.
    #[must_use]
    pub fn answer_features_avp(&self, which: u8) -> &[u8] {
        self.answer_avps
            .get(usize::from(which))
            .map_or(&[][..], |b| &b[..])
    }

    /// The effective configuration.
    #[must_use]
    pub fn config(&self) -> &DoicConfig {
        &self.cfg
    }

    /// The snapshots of every worker, as of the last tick.
    #[must_use]
    pub fn snapshots(&self) -> Vec<Snapshot> {
        self.snapshots
            .iter()
            .map(|s| {
                s.lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .clone()
            })
            .collect()
    }

    /// Hands `replicas` to every worker but `from`.
    fn publish(&self, from: usize, replicas: Vec<Replica>) {
        if replicas.is_empty() {
            return;
        }
        for (i, inbox) in self.inboxes.iter().enumerate() {
            if i == from {
                continue;
            }
            inbox
                .items
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .extend(replicas.iter().cloned());
            inbox.ready.store(true, Ordering::Release);
        }
    }
}

/// Runs `f` on this worker's core (created on first use), after applying
/// what the other workers accepted.
fn with_core<R>(ov: &Overload, f: impl FnOnce(&mut Doic, usize) -> R) -> Option<R> {
    let worker = WORKER.with(Cell::get);
    CORE.with(|c| {
        let mut c = c.borrow_mut();
        if c.is_none() {
            let seed = ov.sequence_base ^ (worker as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
            match Doic::new(&ov.identity, ov.cfg.clone(), seed, ov.sequence_base) {
                Ok(d) => *c = Some(d),
                Err(e) => {
                    tracing::error!(cause = %e, "DOIC core not started");
                    return None;
                }
            }
        }
        let core = c.as_mut()?;
        // A plain load first: the swap (a locked write) only when a report
        // is waiting.
        if let Some(inbox) = ov.inboxes.get(worker)
            && inbox.ready.load(Ordering::Relaxed)
            && inbox.ready.swap(false, Ordering::Acquire)
        {
            let items = std::mem::take(
                &mut *inbox
                    .items
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner),
            );
            for r in &items {
                core.replicate(r);
            }
        }
        Some(f(core, worker))
    })
}

/// What the relay does with a request after the DOIC treatment.
#[derive(Debug)]
pub(crate) enum Decision {
    /// Send `msg` (rewritten) to `peer`, keeping `tx` with it.
    Forward {
        /// The next hop.
        peer: PeerId,
        /// Its slot, when at hand (saves the relay a table lookup).
        slot: Option<std::sync::Arc<crate::peer::table::PeerSlot>>,
        /// Whether it is pinned by Destination-Host.
        pinned: bool,
        /// The request without the OC-Supported-Features it came with, when
        /// it had one (`None`: send it as received).
        msg: Option<Bytes>,
        /// Transaction state for the answer.
        tx: TxState,
    },
    /// Answer with this message (throttled); nothing goes upstream.
    Answer {
        /// The answer.
        msg: Bytes,
        /// Its Result-Code or Experimental-Result-Code.
        code: u32,
    },
    /// Not for the core (no candidate, DOIC off): the relay routes as usual.
    Relay,
    /// No overload state: the relay routes as usual, keeping `tx` (the
    /// agent's features go up, the answer is looked at).
    Plain {
        /// Transaction state for the answer.
        tx: TxState,
        /// The bytes of the client's OC-Supported-Features, when it sent
        /// one: left out on the way upstream ([`crate::peer::table::Relayed::cut`]).
        cut: Option<(u32, u32)>,
    },
}

/// The request inputs the relay already decoded.
#[derive(Debug)]
pub(crate) struct RequestIn<'a> {
    /// The request bytes.
    pub msg: &'a Bytes,
    /// Its header.
    pub head: Header,
    /// Its relay scan.
    pub routing: &'a Routing<'a>,
    /// The downstream peer's identity.
    pub from: &'a str,
    /// Destination-Realm.
    pub realm: &'a str,
    /// Destination-Host.
    pub dest_host: Option<&'a str>,
    /// Peers that are not candidates (§6.1.7).
    pub excluded: &'a [PeerId],
    /// Rotation for ties.
    pub rotate: usize,
    /// The client's OC-Supported-Features as a first treatment recorded
    /// them (the request then no longer carries them).
    pub prior: Option<&'a OcSupportedFeatures>,
}

/// The common case, decided without the core's full treatment: no overload
/// state on this worker. Every request would then go to the router's first
/// choice ([`Doic::treat`] forwards to candidate 0), so the relay routes it
/// as without DOIC; counted as forwarded. A request without
/// OC-Supported-Features keeps a plain [`TxState`] (the agent is the
/// reacting node, RFC 7683 §5.1.3). A DOIC client's request (RFC 7683
/// §5.1.1) is read without allocating ([`client_features`]): its feature
/// vector and peer-report support go into the [`TxState`] as
/// [`Doic::treat`] records them, and its OC-Supported-Features are cut out
/// of the forwarded request as it is written (the bytes `remove_avps`
/// leaves; the agent's own follow the
/// Route-Record, RFC 7683 §5.1.3, RFC 8581 §6.1.1). `None`: the full
/// treatment is needed (overload state, or an AVP this reading does not
/// take: several OC-Supported-Features, a malformed or foreign SourceID).
pub(crate) fn idle_forward(
    ov: &Overload,
    msg: &Bytes,
    app_id: u32,
    routing: &Routing<'_>,
    from: &str,
) -> Option<Decision> {
    let Some(raw) = routing.oc_supported_features() else {
        return with_core(ov, |core, _| core.forward_if_idle())
            .unwrap_or(false)
            .then_some(Decision::Plain {
                tx: TxState {
                    app_id,
                    client_features: None,
                    client_peer_report: false,
                },
                cut: None,
            });
    };
    idle_forward_client(ov, msg, app_id, &raw, from)
}

/// [`idle_forward`] for a DOIC client's request (`raw`: its
/// OC-Supported-Features), out of line so that the path without them stays
/// as small as it was.
#[inline(never)]
fn idle_forward_client(
    ov: &Overload,
    msg: &Bytes,
    app_id: u32,
    raw: &RawAvp<'_>,
    from: &str,
) -> Option<Decision> {
    let client = client_features(raw, from)?;
    let rest = msg.get(raw.offset + raw.raw.len()..)?;
    if AvpIter::new(rest).any(|a| a.is_ok_and(|a| is_features(&a))) {
        return None;
    }
    let tx = with_core(ov, |core, _| {
        core.forward_client_if_idle(app_id, from, client)
    })??;
    let start = u32::try_from(raw.offset).ok()?;
    let end = u32::try_from(raw.offset + raw.raw.len()).ok()?;
    Some(Decision::Plain {
        tx,
        cut: Some((start, end)),
    })
}

/// The OC-Feature-Vector of a received OC-Supported-Features (absent: loss,
/// as [`OcSupportedFeatures::features`]) and whether its SourceID is
/// `from`, read in place; `None` for anything [`OcSupportedFeatures::from_raw`]
/// could refuse or read otherwise (a child of the wrong length, a SourceID
/// that is not `from`), left to the full treatment.
#[must_use]
pub(crate) fn client_features(raw: &RawAvp<'_>, from: &str) -> Option<(u64, bool)> {
    let (mut vector, mut peer_algo, mut source) = (None, false, None);
    for c in raw.children() {
        let c = c.ok()?;
        if c.vendor_id.is_some() {
            continue;
        }
        match c.code {
            code::OC_FEATURE_VECTOR if vector.is_none() => {
                vector = Some(u64::from_be_bytes(c.data.try_into().ok()?));
            }
            code::OC_PEER_ALGO if !peer_algo => {
                let _: [u8; 8] = c.data.try_into().ok()?;
                peer_algo = true;
            }
            code::SOURCE_ID if source.is_none() => {
                if from.is_empty() || c.data != from.as_bytes() {
                    return None;
                }
                source = Some(true);
            }
            _ => {}
        }
    }
    Some((
        vector.unwrap_or(doic::features::OLR_DEFAULT_ALGO),
        source.unwrap_or(false),
    ))
}

/// `msg` without the `len` bytes of the top-level AVP at `offset`, its
/// Message Length set: the bytes [`MessageBuf::remove_avps`] leaves when
/// that AVP is the only one removed, in one copy (what
/// `diameter::codec::forward::put_relayed_request_cut` writes before the Route-Record).
#[cfg(test)]
#[must_use]
pub(crate) fn without_avp(msg: &[u8], offset: usize, len: usize) -> Option<Bytes> {
    let end = offset.checked_add(len)?;
    let (head, tail) = (msg.get(..offset)?, msg.get(end..)?);
    if offset < diameter::codec::HEADER_LEN {
        return None;
    }
    let mut out = BytesMut::with_capacity(msg.len() - len);
    out.extend_from_slice(head);
    out.extend_from_slice(tail);
    finish(&mut out, 0);
    Some(out.freeze())
}

/// `msg` with `avp` (whole, padded) appended and its Message Length set: the
/// bytes [`MessageBuf::append_avp`] gives for the same AVP, in one copy.
#[must_use]
pub(crate) fn with_avp(msg: &[u8], avp: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(msg.len() + avp.len());
    out.extend_from_slice(msg);
    out.extend_from_slice(avp);
    finish(&mut out, 0);
    out.freeze()
}

/// Treats one request (RFC 8581 §5 order) and applies the decision to its
/// bytes.
pub(crate) fn treat_request(shared: &Shared, ov: &Overload, r: &RequestIn<'_>) -> Decision {
    // Candidates in the router's order of preference (fixed arrays: no
    // allocation on the per-request path).
    let Ok((choices, found)) = shared.router.choose_many::<MAX_CANDIDATES>(
        &shared.table,
        r.dest_host,
        r.realm,
        r.head.application_id,
        r.excluded,
        r.rotate,
    ) else {
        return Decision::Relay;
    };
    let mut ids = [(PeerId::default(), false); MAX_CANDIDATES];
    let mut slots: [Option<std::sync::Arc<crate::peer::table::PeerSlot>>; MAX_CANDIDATES] =
        Default::default();
    let mut n = 0;
    for c in &choices[..found] {
        let Some(slot) = shared.table.get(c.peer) else {
            break;
        };
        ids[n] = (c.peer, c.pinned);
        slots[n] = Some(slot);
        n += 1;
    }
    if n == 0 {
        return Decision::Relay;
    }
    let mut candidates = [Candidate {
        peer: "",
        server: None,
    }; MAX_CANDIDATES];
    for (c, s) in candidates.iter_mut().zip(slots.iter().flatten()) {
        *c = Candidate {
            peer: &s.host,
            server: Some(&s.host),
        };
    }
    let candidates = &candidates[..n];
    let received = r.routing.oc_supported_features();
    // A malformed OC-Supported-Features: the client is treated as not
    // supporting DOIC; the AVP is replaced on the way up.
    let features = match r.prior {
        Some(f) => Some(f.clone()),
        None => received
            .as_ref()
            .and_then(|a| OcSupportedFeatures::from_raw(a).ok()),
    };
    let view = RequestView {
        app_id: r.head.application_id,
        command_code: r.head.command_code,
        from_peer: r.from,
        dest_realm: r.realm,
        dest_host: r.dest_host,
        features: features.as_ref(),
        drmp: r.routing.drmp().and_then(|d| u8::try_from(d).ok()),
    };
    let out = with_core(ov, |core, _| {
        // An idle core reads no time (the clock costs more than the rest of
        // its decision); the origin stands in for it.
        let now = if core.is_idle() {
            ov.origin
        } else {
            ov.clock.now()
        };
        let t = core.treat(now, &view, candidates);
        match t {
            // The core's `request_features` are constant: encoded once in
            // `Overload::features_avp`.
            Treatment::Forward { index, tx, .. } | Treatment::Divert { index, tx, .. } => {
                // RFC 7683 §5.1.3, RFC 8581 §6.1.1: one OC-Supported-Features,
                // the agent's; a received one is removed (the only copy).
                let msg = if received.is_some() {
                    let Ok(mut buf) = MessageBuf::new(BytesMut::from(&r.msg[..])) else {
                        return Decision::Relay;
                    };
                    if buf.remove_avps(is_features).is_err() {
                        return Decision::Relay;
                    }
                    Some(buf.freeze())
                } else {
                    None
                };
                let (peer, pinned) = ids[index];
                tracing::trace!(peer = %candidates[index].peer, diverted = index != 0, "doic forward");
                Decision::Forward {
                    peer,
                    slot: None,
                    pinned,
                    msg,
                    tx: tx.to_state(),
                }
            }
            Treatment::Throttle { result, cause } => {
                tracing::trace!(?cause, code = result.code(), "doic throttle");
                let act = core.local_answer(now, &view);
                let msg = throttle_answer(shared, r.msg, result, &act);
                Decision::Answer {
                    msg,
                    code: result.code(),
                }
            }
            Treatment::NoRoute => Decision::Relay,
        }
    });
    match out {
        Some(Decision::Forward {
            peer,
            pinned,
            msg,
            tx,
            ..
        }) => {
            // The chosen candidate's slot goes with the decision.
            let slot = ids[..n]
                .iter()
                .position(|(id, _)| *id == peer)
                .and_then(|i| slots[i].take());
            Decision::Forward {
                peer,
                slot,
                pinned,
                msg,
                tx,
            }
        }
        Some(d) => d,
        None => Decision::Relay,
    }
}

/// Treats a request again before it goes to another next hop: a failover,
/// a retry after 3004, or a chosen connection that went away. RFC 8581 §5
/// applies to every forwarding decision, so the alternate's peer OCS and the
/// destination's host/realm OCS are consulted again, with `r.tried` out of
/// the candidates (RFC 6733 §6.1.7). The client's DOIC support is the one the
/// first treatment recorded.
pub(crate) fn retreat(
    shared: &Shared,
    ov: &Overload,
    r: &crate::peer::table::Relayed,
    dest_host: Option<&str>,
    rotate: usize,
) -> Decision {
    let Ok(routing) = Routing::scan(&r.msg) else {
        return Decision::Relay;
    };
    let Ok(realm) = std::str::from_utf8(&r.realm) else {
        return Decision::Relay;
    };
    // The client's features as first recorded: its vector, and its own
    // identity as SourceID when it supports peer reports (RFC 8581 §6.1.2).
    let prior = r.doic.and_then(|t| {
        t.client_features.map(|v| OcSupportedFeatures {
            source_id: t.client_peer_report.then(|| r.from.to_string()),
            ..doic::treatment::features_of(v.get())
        })
    });
    treat_request(
        shared,
        ov,
        &RequestIn {
            msg: &r.msg,
            head: Header::read(&r.msg),
            routing: &routing,
            from: &r.from,
            realm,
            dest_host,
            excluded: &r.tried,
            rotate,
            prior: prior.as_ref(),
        },
    )
}

fn is_features(a: &diameter::codec::avp::RawAvp<'_>) -> bool {
    a.vendor_id.is_none() && a.code == code::OC_SUPPORTED_FEATURES
}

/// The agent's answer to a throttled request: Result-Code 3004 or 5012, or
/// Experimental-Result 5198 without Result-Code (RFC 6733 §7.6), with the
/// DOIC AVPs `act` gives (RFC 7683 §5.1.2: none to a non-DOIC client).
fn throttle_answer(
    shared: &Shared,
    req: &[u8],
    result: ThrottleAnswer,
    act: &doic::AnswerActions,
) -> Bytes {
    let header = Header::read(req);
    let node = &shared.config.node;
    let mut a = builder::ErrorAnswer::new(
        &header,
        req,
        result.code(),
        &node.origin_host,
        &node.origin_realm,
    );
    if result.is_experimental() {
        a = a.experimental_result(RETRY_NOT_ALLOWED_VENDOR, result.code());
    }
    if let Some(f) = &act.add_features {
        a = a.avp(f.to_avp());
    }
    for o in &act.forward_reports {
        a = a.avp(o.to_avp());
    }
    let mut m = a.build();
    if result.is_experimental() {
        m.avps
            .retain(|x: &Avp| !(x.vendor_id.is_none() && x.code == code::RESULT_CODE));
    }
    let mut out = BytesMut::with_capacity(256);
    if let Err(e) = m.encode(&mut out) {
        tracing::error!(cause = %e, "cannot encode a throttle answer");
    }
    out.freeze()
}

/// The idle answer to a DOIC client: when `tx` is a DOIC client's, the
/// answer carries no OC-Supported-Features and no OC-OLR, and this worker's
/// core is idle with no peer report of the agent's own
/// ([`Doic::idle_answer_peer_algo`]), nothing is judged or advanced and the
/// answer only gains the agent's OC-Supported-Features (RFC 7683 §5.1.2,
/// RFC 8581 §6.1.2): that AVP, encoded once, and whether the request may be
/// retried elsewhere (not after 5198). `None`: [`treat_answer`] is needed.
/// The AVP is given as its index for [`Overload::answer_features_avp`].
/// Out of line: the path without client features only tests
/// `tx.client_features` before calling it.
#[inline(never)]
pub(crate) fn idle_client_answer(
    ov: &Overload,
    tx: &TxState,
    routing: &Routing<'_>,
) -> Option<(u8, bool)> {
    let vector = tx.client_features?.get();
    if routing.oc_supported_features().is_some() || routing.oc_olrs().next().is_some() {
        return None;
    }
    let peer_algo = with_core(ov, |core, _| core.idle_answer_peer_algo(vector))??;
    let which = match (tx.client_peer_report, peer_algo) {
        (false, _) => 0,
        (true, doic::Algorithm::Loss) => 1,
        (true, doic::Algorithm::Rate) => 2,
    };
    let retry = routing.experimental_result_code().map(|(_, c)| c)
        != Some(doic::treatment::DIAMETER_OVERLOAD_RETRY_NOT_ALLOWED_TO_ANY);
    Some((which, retry))
}

/// Handles an answer from `from_peer` to a request from `client` for
/// `dest_realm` treated with `tx`: reports judged and applied, the answer
/// rewritten for the client. Returns the answer to send downstream and
/// whether the request may be retried on an alternate path. The relay asks
/// [`idle_client_answer`] first for a DOIC client's transaction.
pub(crate) fn treat_answer(
    ov: &Overload,
    tx: &TxState,
    (client, dest_realm): (&str, &str),
    from_peer: &str,
    msg: &Bytes,
    routing: &Routing<'_>,
) -> (Option<Bytes>, bool) {
    if tx.client_features.is_none()
        && routing.oc_supported_features().is_none()
        && routing.oc_olrs().next().is_none()
        && with_core(ov, |core, _| core.is_idle()).unwrap_or(true)
    {
        // No DOIC AVP to judge or strip, none to add for a client that sent
        // none (RFC 7683 §5.1.2), no state to advance: unchanged. Only 5198
        // forbids a retry (seed 004).
        let retry = routing.experimental_result_code().map(|(_, c)| c)
            != Some(doic::treatment::DIAMETER_OVERLOAD_RETRY_NOT_ALLOWED_TO_ANY);
        return (None, retry);
    }
    let tx = tx.pending(client, dest_realm, from_peer);
    let head = Header::read(msg);
    let (doic, malformed) = match DoicAvps::read(routing) {
        Ok(d) => (d, false),
        Err(_) => (DoicAvps::default(), true),
    };
    let ans = AnswerView {
        app_id: head.application_id,
        origin_host: routing.origin_host().and_then(text).unwrap_or(""),
        origin_realm: routing.origin_realm().and_then(text).unwrap_or(""),
        result_code: routing.result_code(),
        experimental_result_code: routing.experimental_result_code().map(|(_, c)| c),
        features: doic.features.as_ref(),
        olrs: &doic.olrs,
    };
    let now = ov.clock.now();
    let Some(mut act) = with_core(ov, |core, worker| {
        let mut act = core.on_answer(now, &tx, from_peer, &ans);
        ov.publish(worker, std::mem::take(&mut act.replicate));
        act
    }) else {
        return (None, true);
    };
    // Undecodable DOIC AVPs never go onward (RFC 7683 §10.4 spirit: only
    // what the agent understood and accepted is relayed).
    act.strip |= malformed;
    let retry = act.retry_on_alternate;
    if !act.strip && act.add_features.is_none() && act.forward_reports.is_empty() {
        return (None, retry);
    }
    let Ok(mut buf) = MessageBuf::new(BytesMut::from(&msg[..])) else {
        return (None, retry);
    };
    match apply_answer(&mut buf, &act) {
        Ok(()) => (Some(buf.freeze()), retry),
        Err(_) => (None, retry),
    }
}

/// One control tick on the current worker: expiry and ramps
/// ([`Doic::handle_timeout`]), replicas applied, snapshot published
/// (`full` also renders the audit trail).
pub(crate) fn tick(ov: &Overload, full: bool) {
    let now = ov.clock.now();
    let snap = with_core(ov, |core, worker| {
        own::apply(ov, core, now);
        core.handle_timeout(now);
        let audit = core.audit();
        let mut verdicts = BTreeMap::new();
        for r in audit.reports() {
            let v = format!("{:?}", r.verdict);
            let v = v.split('(').next().unwrap_or("").to_ascii_lowercase();
            *verdicts.entry(v).or_insert(0) += 1;
        }
        let ocs = core
            .ocs()
            .iter()
            .map(|o| OcsRow {
                app_id: o.key.app_id,
                report_type: match o.key.report_type {
                    doic::ReportType::Host => "host",
                    doic::ReportType::Realm => "realm",
                    doic::ReportType::Peer => "peer",
                    _ => "other",
                },
                target: o.key.id.clone(),
                abatement: o.abatement,
                sequence: o.sequence,
            })
            .collect();
        (
            worker,
            Snapshot {
                totals: audit.totals,
                ocs,
                verdicts,
                audit: if full {
                    audit.to_json(ov.origin)
                } else {
                    serde_json::Value::Null
                },
            },
        )
    });
    if let Some((worker, mut snap)) = snap
        && let Some(slot) = ov.snapshots.get(worker)
    {
        let mut slot = slot
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if !full {
            snap.audit = std::mem::take(&mut slot.audit);
        }
        *slot = snap;
    }
}

/// The DOIC metrics, Prometheus text format.
pub(crate) fn render_metrics(ov: &Overload, o: &mut String) {
    let snaps = ov.snapshots();
    let mut t = Totals::default();
    let mut verdicts: BTreeMap<String, u64> = BTreeMap::new();
    let mut ocs: BTreeMap<(&'static str, String), u64> = BTreeMap::new();
    for s in &snaps {
        t.requests += s.totals.requests;
        t.forwarded += s.totals.forwarded;
        t.diverted += s.totals.diverted;
        t.throttled += s.totals.throttled;
        t.no_route += s.totals.no_route;
        for (k, v) in &s.verdicts {
            *verdicts.entry(k.clone()).or_insert(0) += v;
        }
    }
    // Every worker holds the same states (replicated): the first one counts.
    if let Some(s) = snaps.first() {
        for r in &s.ocs {
            *ocs.entry((r.report_type, r.target.clone())).or_insert(0) += 1;
        }
    }
    let _ = writeln!(
        o,
        "# HELP doic_requests_treated_total Requests treated by overload control, by treatment.\n# TYPE doic_requests_treated_total counter"
    );
    for (k, v) in [
        ("forwarded", t.forwarded),
        ("diverted", t.diverted),
        ("throttled", t.throttled),
        ("no_route", t.no_route),
    ] {
        let _ = writeln!(o, "doic_requests_treated_total{{treatment=\"{k}\"}} {v}");
    }
    let _ = writeln!(
        o,
        "# HELP doic_reports_received_total Overload reports received, by verdict (retained trail).\n# TYPE doic_reports_received_total counter"
    );
    for (k, v) in &verdicts {
        let _ = writeln!(o, "doic_reports_received_total{{outcome=\"{k}\"}} {v}");
    }
    let _ = writeln!(
        o,
        "# HELP doic_ocs_active Overload control states in force.\n# TYPE doic_ocs_active gauge"
    );
    for ((ty, target), n) in &ocs {
        let _ = writeln!(
            o,
            "doic_ocs_active{{type=\"{ty}\",target=\"{}\"}} {n}",
            target.replace(['"', '\\', '\n'], "_")
        );
    }
    own::render(ov, o);
}

/// The agent's own overload as the control thread last measured it.
#[must_use]
pub fn own_view(ov: &Overload) -> own::OwnView {
    ov.own.view()
}

/// The evidence of every worker as JSON (`GET /audit`).
#[must_use]
pub fn audit_json(ov: &Overload) -> serde_json::Value {
    let workers: Vec<_> = ov
        .snapshots()
        .into_iter()
        .enumerate()
        .map(|(i, s)| serde_json::json!({ "worker": i, "audit": s.audit }))
        .collect();
    serde_json::json!({ "identity": ov.identity, "workers": workers })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The transaction state that travels with every relayed request stays
    /// small, and a kept vector of 0 is loss (RFC 7683 §6.1).
    #[test]
    fn transaction_state_is_small_and_keeps_loss() {
        assert_eq!(std::mem::size_of::<Option<TxState>>(), 16);
        assert_eq!(
            doic::treatment::kept_vector(0).get(),
            doic::features::OLR_DEFAULT_ALGO
        );
    }

    /// The AVP appended to relayed requests is the one the core decides
    /// (RFC 7683 §5.1.3, RFC 8581 §6.1.1), for every algorithm setting.
    #[test]
    fn encoded_features_are_the_cores_request_features() {
        for (algorithms, peer_report) in [
            (vec![doic::Algorithm::Loss], false),
            (vec![doic::Algorithm::Loss, doic::Algorithm::Rate], true),
        ] {
            let cfg = DoicConfig {
                algorithms,
                peer_report,
                ..DoicConfig::default()
            };
            let ov = Overload::new("agent.example.com", Some(cfg.clone()), 1).unwrap();
            let mut core = Doic::new("agent.example.com", cfg, 1, 1).unwrap();
            let req = RequestView {
                app_id: 4,
                command_code: 272,
                from_peer: "c",
                dest_realm: "r",
                dest_host: None,
                features: None,
                drmp: None,
            };
            let cands = [Candidate {
                peer: "s",
                server: Some("s"),
            }];
            assert!(matches!(
                core.treat(ov.origin, &req, &cands),
                Treatment::Forward { index: 0, .. }
            ));
            let raw = AvpIter::new(ov.features_avp()).next().unwrap().unwrap();
            assert_eq!(
                &OcSupportedFeatures::from_raw(&raw).unwrap(),
                core.request_features()
            );
        }
    }

    /// A DOIC client's request: OC-Supported-Features between other AVPs.
    fn client_request(features: &OcSupportedFeatures) -> Bytes {
        diameter::codec::Message::request(272, 4, true)
            .with(Avp::str(code::SESSION_ID, "client;1"))
            .with(Avp::str(code::ORIGIN_HOST, "client"))
            .with(features.to_avp())
            .with(Avp::str(code::DESTINATION_REALM, "realm"))
            .with(Avp::u32(code::RESULT_CODE, 7))
            .to_bytes()
            .unwrap()
            .freeze()
    }

    /// The client feature sets the fast path must read as the full
    /// treatment does (RFC 7683 §5.1.1, RFC 8581 §6.1.2).
    fn client_feature_sets() -> Vec<OcSupportedFeatures> {
        use doic::features::{OC_PEER_REPORT, OLR_DEFAULT_ALGO, OLR_RATE_ALGORITHM};
        let f = |v: Option<u64>, s: Option<&str>, pa: Option<u64>| OcSupportedFeatures {
            feature_vector: v,
            source_id: s.map(str::to_owned),
            peer_algo: pa,
        };
        vec![
            f(
                Some(OLR_DEFAULT_ALGO | OLR_RATE_ALGORITHM | OC_PEER_REPORT),
                Some("client"),
                None,
            ),
            f(
                Some(OLR_DEFAULT_ALGO | OC_PEER_REPORT),
                Some("client"),
                None,
            ),
            f(Some(OLR_DEFAULT_ALGO | OLR_RATE_ALGORITHM), None, None),
            f(Some(OLR_DEFAULT_ALGO | OC_PEER_REPORT), None, None),
            f(
                Some(OLR_RATE_ALGORITHM | OC_PEER_REPORT),
                Some("client"),
                Some(OLR_DEFAULT_ALGO),
            ),
            f(None, None, None),
        ]
    }

    fn doic_cfg(peer_algo: doic::Algorithm, trusted: bool) -> DoicConfig {
        let mut cfg = DoicConfig {
            algorithms: vec![doic::Algorithm::Loss, doic::Algorithm::Rate],
            peer_report: true,
            peer_algo,
            ..DoicConfig::default()
        };
        cfg.peers.insert(
            "client".into(),
            doic::config::PeerPolicy {
                trusted,
                receive_reports: true,
            },
        );
        cfg
    }

    /// The idle fast path for a DOIC client ([`idle_forward`], then
    /// [`treat_answer`]) gives the bytes and transaction state of the full
    /// treatment ([`Doic::treat`] with `remove_avps`, then
    /// [`Doic::on_answer`] with `apply_answer`): the client's features cut
    /// out of the forwarded request (RFC 7683 §5.1.3, RFC 8581 §6.1.1), the
    /// agent's own OC-Supported-Features in the answer with loss selected
    /// and, toward a peer-report client, SourceID and OC-Peer-Algo (RFC 7683
    /// §5.1.2, RFC 8581 §6.1.2).
    #[test]
    fn idle_doic_client_fast_path_is_byte_identical_to_full_treatment() {
        let answer =
            diameter::codec::Message::new(272, 4, diameter::codec::CommandFlags::default())
                .with(Avp::str(code::SESSION_ID, "client;1"))
                .with(Avp::u32(code::RESULT_CODE, 2001))
                .with(Avp::str(code::ORIGIN_HOST, "server"))
                .with(Avp::str(code::ORIGIN_REALM, "realm"))
                .to_bytes()
                .unwrap()
                .freeze();
        let cands = [Candidate {
            peer: "server",
            server: Some("server"),
        }];
        let mut checked = 0;
        for (peer_algo, trusted) in [
            (doic::Algorithm::Rate, true),
            (doic::Algorithm::Loss, true),
            (doic::Algorithm::Rate, false),
        ] {
            let cfg = doic_cfg(peer_algo, trusted);
            let ov = Overload::new("agent", Some(cfg.clone()), 1).unwrap();
            // This thread's core is made from `ov` on first use.
            CORE.with(|c| *c.borrow_mut() = None);
            let mut full = Doic::new("agent", cfg, 1, 1).unwrap();
            for cf in client_feature_sets() {
                let msg = client_request(&cf);
                let routing = Routing::scan(&msg).unwrap();
                let Some(Decision::Plain {
                    tx,
                    cut: Some((a, b)),
                }) = idle_forward(&ov, &msg, 4, &routing, "client")
                else {
                    panic!("no fast path for {cf:?}");
                };
                // As the connection writes it (`put_relayed_request_cut`),
                // and as `without_avp` gives it.
                let mut written = BytesMut::new();
                diameter::codec::forward::put_relayed_request_cut(
                    &mut written,
                    &msg,
                    (a as usize, b as usize),
                    "client",
                    9,
                    false,
                );
                let fast_msg = without_avp(&msg, a as usize, (b - a) as usize).unwrap();
                let received =
                    OcSupportedFeatures::from_raw(&routing.oc_supported_features().unwrap())
                        .unwrap();
                let view = RequestView {
                    app_id: 4,
                    command_code: 272,
                    from_peer: "client",
                    dest_realm: "realm",
                    dest_host: None,
                    features: Some(&received),
                    drmp: None,
                };
                let Treatment::Forward {
                    index: 0,
                    tx: full_tx,
                } = full.treat(ov.origin, &view, &cands)
                else {
                    panic!("full treatment did not forward");
                };
                let mut buf = MessageBuf::new(BytesMut::from(&msg[..])).unwrap();
                assert_eq!(buf.remove_avps(is_features).unwrap(), 1);
                let full_msg = buf.freeze();
                assert_eq!(fast_msg, full_msg, "forwarded request for {cf:?}");
                let mut full_written = BytesMut::new();
                diameter::codec::forward::put_relayed_request(
                    &mut full_written,
                    &full_msg,
                    "client",
                    9,
                    false,
                );
                assert_eq!(written, full_written, "written request for {cf:?}");
                assert_eq!(tx, full_tx.to_state(), "transaction state for {cf:?}");
                assert_eq!(tx.client_features.is_some(), trusted);

                let scan = Routing::scan(&answer).unwrap();
                // As the relay does: the idle answer when it applies, else
                // the treatment.
                let idle = idle_client_answer(&ov, &tx, &scan);
                assert_eq!(idle.is_some(), trusted, "idle answer path for {cf:?}");
                let (fast_answer, retry) = match idle {
                    Some((which, retry)) => (
                        Some(with_avp(&answer, ov.answer_features_avp(which))),
                        retry,
                    ),
                    None => treat_answer(&ov, &tx, ("client", "realm"), "server", &answer, &scan),
                };
                let pending = full_tx.to_state();
                let act = full.on_answer(
                    ov.origin,
                    &pending.pending("client", "realm", "server"),
                    "server",
                    &AnswerView {
                        app_id: 4,
                        origin_host: "server",
                        origin_realm: "realm",
                        result_code: Some(2001),
                        experimental_result_code: None,
                        features: None,
                        olrs: &[],
                    },
                );
                assert_eq!(retry, act.retry_on_alternate);
                let full_answer = if act.add_features.is_some() || act.strip {
                    let mut buf = MessageBuf::new(BytesMut::from(&answer[..])).unwrap();
                    apply_answer(&mut buf, &act).unwrap();
                    Some(buf.freeze())
                } else {
                    None
                };
                assert_eq!(fast_answer, full_answer, "answer for {cf:?}");
                assert_eq!(fast_answer.is_some(), trusted, "RFC 7683 §5.1.2");
                checked += 1;
            }
            let counted = with_core(&ov, |core, _| core.audit().totals).unwrap();
            assert_eq!(counted, full.audit().totals);
        }
        assert_eq!(checked, 18);
    }

    /// Feature AVPs the fast path does not read are left to the full
    /// treatment: a SourceID naming another node (RFC 8581 §6.1.2), a child
    /// of the wrong length (RFC 7683 §7.2), two OC-Supported-Features.
    #[test]
    fn unusual_client_features_take_the_full_treatment() {
        let ov = Overload::new("agent", Some(doic_cfg(doic::Algorithm::Rate, true)), 1).unwrap();
        CORE.with(|c| *c.borrow_mut() = None);
        let other = OcSupportedFeatures {
            feature_vector: Some(1),
            source_id: Some("elsewhere".into()),
            peer_algo: None,
        };
        let short = Avp::grouped(
            code::OC_SUPPORTED_FEATURES,
            vec![Avp::u32(code::OC_FEATURE_VECTOR, 1)],
        );
        let twice = diameter::codec::Message::request(272, 4, true)
            .with(Avp::str(code::ORIGIN_HOST, "client"))
            .with(OcSupportedFeatures::default().to_avp())
            .with(OcSupportedFeatures::default().to_avp());
        let short = diameter::codec::Message::request(272, 4, true).with(short);
        for msg in [
            client_request(&other),
            short.to_bytes().unwrap().freeze(),
            twice.to_bytes().unwrap().freeze(),
        ] {
            let routing = Routing::scan(&msg).unwrap();
            assert!(idle_forward(&ov, &msg, 4, &routing, "client").is_none());
        }
        // Nothing was counted: the full treatment will count them.
        let counted = with_core(&ov, |core, _| core.audit().totals).unwrap();
        assert_eq!(counted.requests, 0);
    }
}
