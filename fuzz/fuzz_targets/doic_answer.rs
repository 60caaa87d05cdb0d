//! Fuzzes the DOIC core (RFC 7683 §5.1-§5.2, §10; RFC 8581 §5, §6; RFC
//! 8582): a [`Doic`] whose configuration comes from the first input byte is
//! fed a sequence of requests ([`Doic::treat`]), answers carrying arbitrary
//! OC-OLR and OC-Supported-Features AVPs ([`Doic::on_answer`], the AVPs
//! read from the bytes as the relay reads them) and timeouts. Any panic is a
//! bug; so is a broken invariant asserted here: decisions name a candidate
//! that exists, every request is counted once, no DOIC AVP goes to a client
//! that sent none, no upstream peer report is relayed, and the idle fast
//! path ([`Doic::answer_idle`]) decides what `on_answer` decides.

#![no_main]

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use diameter::codec::avp::{Avp, AvpIter};
use diameter::codec::doic::{OcSupportedFeatures, ReportType};
use diameter::codec::relay::Routing;
use diameter::codec::{CommandFlags, Message};
use diameter::dictionary::code;
use doic::avps::DoicAvps;
use doic::treatment::Replica;
use doic::{
    Algorithm, AnswerView, Candidate, Doic, DoicConfig, IdleAnswer, IdleAvps, PeerPolicy,
    RequestView, ThrottleResult, Treatment, TxState,
};
use libfuzzer_sys::fuzz_target;

const IDENTITY: &str = "agent.example";
const UPSTREAM: [&str; 3] = ["s1", "s2", "s3"];
const CLIENTS: [&str; 2] = ["client", "other"];

/// The configuration the first byte selects.
fn config(b: u8) -> DoicConfig {
    let mut cfg = DoicConfig {
        algorithms: if b & 1 != 0 {
            vec![Algorithm::Loss, Algorithm::Rate]
        } else {
            vec![Algorithm::Loss]
        },
        peer_report: b & 2 != 0,
        peer_algo: if b & 1 != 0 && b & 4 != 0 {
            Algorithm::Rate
        } else {
            Algorithm::Loss
        },
        throttle_result: match (b >> 3) & 3 {
            0 => ThrottleResult::Auto,
            1 => ThrottleResult::TooBusy,
            2 => ThrottleResult::UnableToComply,
            _ => ThrottleResult::RetryNotAllowed,
        },
        olrs_per_answer: (b & 0x20 != 0).then_some(1),
        max_ocs: 8,
        audit_records: 16,
        ..DoicConfig::default()
    };
    let trusted = PeerPolicy {
        trusted: true,
        receive_reports: true,
        ..PeerPolicy::default()
    };
    for p in UPSTREAM {
        cfg.peers.insert(p.into(), trusted);
    }
    cfg.peers.insert(
        "client".into(),
        PeerPolicy {
            trusted: b & 0x40 != 0,
            receive_reports: b & 0x80 != 0,
            ..PeerPolicy::default()
        },
    );
    cfg
}

/// A request the core forwarded, as the relay keeps it.
struct Pending {
    tx: TxState,
    client: &'static str,
    upstream: &'static str,
}

/// Reads bytes one at a time, zero when none is left.
struct Input<'a>(&'a [u8]);

impl<'a> Input<'a> {
    fn byte(&mut self) -> u8 {
        let (b, rest) = self.0.split_first().map_or((0, &[][..]), |(b, r)| (*b, r));
        self.0 = rest;
        b
    }

    fn take(&mut self, n: usize) -> &'a [u8] {
        let (a, b) = self.0.split_at(n.min(self.0.len()));
        self.0 = b;
        a
    }
}

/// The answer's DOIC AVPs read from `body` (AVPs after the answer's fixed
/// ones) as the relay reads them; `wrap` makes `body` the children of one
/// OC-OLR or OC-Supported-Features first. `None` when the relay would not
/// get that far (a malformed message).
fn answer_avps(origin_host: &str, rc: u32, wrap: u8, body: &[u8]) -> Option<DoicAvps> {
    let mut out = BytesMut::new();
    Message::new(272, 4, CommandFlags::default())
        .with(Avp::str(code::ORIGIN_HOST, origin_host))
        .with(Avp::str(code::ORIGIN_REALM, "example"))
        .with(Avp::u32(code::RESULT_CODE, rc))
        .encode(&mut out)
        .ok()?;
    match wrap % 3 {
        0 => out.extend_from_slice(body),
        w => {
            let avp_code = if w == 1 {
                code::OC_OLR
            } else {
                code::OC_SUPPORTED_FEATURES
            };
            // flags 0, then the 24-bit length (the body is short)
            let len = u32::try_from(8 + body.len()).ok()?;
            out.extend_from_slice(&avp_code.to_be_bytes());
            out.extend_from_slice(&len.to_be_bytes());
            out.extend_from_slice(body);
            out.resize(out.len().next_multiple_of(4), 0);
        }
    }
    let len = u32::try_from(out.len()).ok()?;
    if len > 0xff_ffff {
        return None;
    }
    out[1..4].copy_from_slice(&len.to_be_bytes()[1..]);
    let routing = Routing::scan(&out).ok()?;
    DoicAvps::read(&routing).ok()
}

fn the_features(bytes: &[u8]) -> OcSupportedFeatures {
    AvpIter::new(bytes)
        .next()
        .and_then(Result::ok)
        .and_then(|raw| OcSupportedFeatures::from_raw(&raw).ok())
        .expect("the encoded AVPs decode")
}

fuzz_target!(|data: &[u8]| {
    static T0: OnceLock<Instant> = OnceLock::new();
    let mut now = *T0.get_or_init(Instant::now);
    let mut input = Input(data);
    let cfg = config(input.byte());
    let limit = cfg.olrs_per_answer;
    let avps = IdleAvps::new(IDENTITY, &cfg);
    let Ok(mut core) = Doic::new(IDENTITY, cfg, 7, 1) else {
        return;
    };
    let mut pending: Vec<Pending> = Vec::new();
    while !input.0.is_empty() {
        match input.byte() % 4 {
            // A request.
            0 => {
                let b = input.byte();
                let client = CLIENTS[usize::from(b & 1)];
                let dest_host = match (b >> 1) & 3 {
                    0 => None,
                    i => Some(UPSTREAM[usize::from(i - 1)]),
                };
                let features = (b & 0x08 != 0).then(|| OcSupportedFeatures {
                    feature_vector: (b & 0x10 != 0).then(|| u64::from(input.byte() & 0x0f)),
                    source_id: (b & 0x20 != 0).then(|| client.to_owned()),
                    peer_algo: None,
                });
                let n = 1 + usize::from(input.byte() % 3);
                let candidates: Vec<Candidate<'_>> = UPSTREAM[..n]
                    .iter()
                    .map(|p| Candidate {
                        peer: p,
                        server: Some(p),
                    })
                    .collect();
                let drmp = (b & 0x40 != 0).then(|| input.byte() % 16);
                let req = RequestView {
                    app_id: 4,
                    command_code: 272,
                    from_peer: client,
                    dest_realm: "example",
                    dest_host,
                    features: features.as_ref(),
                    drmp,
                };
                let idle = core.is_idle();
                match core.treat(now, &req, &candidates) {
                    Treatment::Forward { index, tx } | Treatment::Divert { index, tx } => {
                        assert!(index < n, "a candidate that exists");
                        assert!(!idle || index == 0, "idle: the first choice");
                        if features.is_none() {
                            assert!(tx.client_features.is_none());
                        }
                        if pending.len() < 64 {
                            pending.push(Pending {
                                tx: tx.to_state(),
                                client,
                                upstream: UPSTREAM[index],
                            });
                        }
                    }
                    Treatment::Throttle { result, .. } => {
                        assert!(!idle, "nothing throttles an idle core");
                        assert!(matches!(result.code(), 3004 | 5012 | 5198));
                        let act = core.local_answer(now, &req);
                        if features.is_none() {
                            assert!(act.add_features.is_none() && act.forward_reports.is_empty());
                        }
                    }
                    Treatment::NoRoute => panic!("there is a candidate"),
                }
            }
            // An answer with arbitrary DOIC AVPs.
            1 => {
                if pending.is_empty() {
                    continue;
                }
                let p = pending.swap_remove(usize::from(input.byte()) % pending.len());
                let b = input.byte();
                let from_peer = if b & 1 == 0 {
                    p.upstream
                } else {
                    UPSTREAM[usize::from(b >> 1) % 3]
                };
                let origin_host = UPSTREAM[usize::from(b >> 3) % 3];
                let rc = match (b >> 5) & 3 {
                    0 => 2001,
                    1 => 3004,
                    2 => 5012,
                    _ => 3002,
                };
                let wrap = input.byte();
                let len = usize::from(input.byte());
                let body = input.take(len);
                let Some(doic) = answer_avps(origin_host, rc, wrap, body) else {
                    continue;
                };
                let plain = doic.features.is_none() && doic.olrs.is_empty();
                let idle = if plain { core.answer_idle(&p.tx) } else { None };
                let ans = AnswerView {
                    app_id: 4,
                    origin_host,
                    origin_realm: "example",
                    result_code: Some(rc),
                    experimental_result_code: None,
                    features: doic.features.as_ref(),
                    olrs: &doic.olrs,
                };
                let tx = p.tx.pending(p.client, "example", p.upstream);
                let act = core.on_answer(now, &tx, from_peer, &ans);
                assert!(act.retry_on_alternate, "no 5198 in these answers");
                if p.tx.client_features.is_none() {
                    // RFC 7683 §5.1.2.
                    assert!(act.add_features.is_none() && act.forward_reports.is_empty());
                }
                for o in &act.forward_reports {
                    // RFC 8581 §6.2.5: upstream peer reports never go on.
                    if o.report_type == ReportType::Peer {
                        assert_eq!(o.source_id.as_deref(), Some(IDENTITY));
                    }
                }
                if let Some(l) = limit {
                    assert!(act.forward_reports.len() <= usize::from(l));
                }
                assert_eq!(act.strip, !plain, "received DOIC AVPs are stripped");
                match idle {
                    Some(IdleAnswer::Unchanged) => {
                        assert!(act.add_features.is_none() && act.forward_reports.is_empty());
                    }
                    Some(IdleAnswer::Add(which)) => {
                        assert_eq!(act.add_features, Some(the_features(avps.answer(which))));
                        assert!(act.forward_reports.is_empty());
                    }
                    None => {}
                }
                for r in &act.replicate {
                    if let Replica::Report(r) = r {
                        assert!(!matches!(r.report.report_type, ReportType::Other(_)));
                    }
                }
            }
            // Time passes.
            2 => {
                now += Duration::from_millis(u64::from(input.byte()) * 250);
                core.handle_timeout(now);
            }
            // A request on the idle fast path.
            _ => {
                let b = input.byte();
                let offer = (b & 1 != 0).then_some(doic::Offer {
                    vector: u64::from(b >> 4),
                    source_is_sender: b & 2 != 0,
                });
                let idle = core.is_idle();
                let before = core.audit().totals.requests;
                match core.treat_idle(4, CLIENTS[usize::from(b >> 2) & 1], offer) {
                    Some(tx) => {
                        assert!(idle);
                        assert!(offer.is_some() || tx.client_features.is_none());
                    }
                    None => assert!(!idle && core.audit().totals.requests == before),
                }
            }
        }
        let t = core.audit().totals;
        assert_eq!(
            t.requests,
            t.forwarded + t.diverted + t.throttled + t.no_route,
            "every request counted once"
        );
    }
});
