//! Fuzzes the capabilities exchange (RFC 6733 §5.3): arbitrary bytes as a
//! CER to a responder and as a CEA to an initiator, through the strict read
//! ([`capx::read_exchange`]) and the sans-io state machine. Any panic is a
//! bug; so is a broken invariant asserted here: a CER gets exactly one CEA,
//! the CEA the agent builds passes its own grammar check, a refused CER
//! closes the connection, and a CER that breaks its grammar never opens one.

#![no_main]

use std::time::Instant;

use bytes::BytesMut;
use diameter::codec::answer::put_capabilities;
use diameter::codec::{self, Capabilities, CheckOptions, Header};
use diameter::peer::capx;
use diameter::peer::fsm::{Fsm, Role, State, Transmit};
use libfuzzer_sys::fuzz_target;

fn local() -> Capabilities {
    Capabilities {
        origin_host: "agent.example.com".into(),
        origin_realm: "example.com".into(),
        host_ip_addresses: vec!["127.0.0.1".parse().unwrap()],
        product_name: "doic-agent".into(),
        auth_application_ids: vec![0xffff_ffff],
        ..Capabilities::default()
    }
}

fuzz_target!(|data: &[u8]| {
    // the connection frames the message first
    let Ok(Some(n)) = codec::frame_len(data) else {
        return;
    };
    let msg = &data[..n];
    let head = Header::read(msg);
    let read = capx::read_exchange(msg);
    if let Ok((caps, _)) = &read {
        codec::grammar::check(msg, CheckOptions::default()).expect("read means well formed");
        assert!(!caps.origin_host.is_empty() && !caps.origin_realm.is_empty());
    }

    // responder: the CER judgement
    let mut f = Fsm::new(Instant::now(), Role::Responder, local());
    let strict = read.is_ok();
    match read.clone() {
        Ok((caps, _)) => f.handle_cer(caps, true, false),
        Err(e) => {
            assert!(e.result_code() >= 3000);
            f.handle_bad_cer(e);
        }
    }
    let transmits: Vec<Transmit> = std::iter::from_fn(|| f.poll_transmit()).collect();
    assert_eq!(transmits.len(), 1, "exactly one CEA");
    let mut out = BytesMut::new();
    match &transmits[0] {
        Transmit::Cea { result_code } => {
            put_capabilities(&mut out, f.local(), Some((head, *result_code)), 0);
        }
        Transmit::CeaRefused(e) => {
            assert!(!strict);
            assert_eq!(f.state(), State::Closed, "a refused CER closes");
            capx::put_refused_cea(&mut out, f.local(), &head, e);
        }
        other => panic!("a CER is answered with a CEA, not {other:?}"),
    }
    if f.state() == State::Open {
        assert!(strict, "a malformed CER never opens a connection");
    }
    codec::grammar::check(&out, CheckOptions::default()).expect("the agent's CEA is well formed");

    // initiator: the same bytes as the CEA
    let mut f = Fsm::new(Instant::now(), Role::Initiator, local());
    let _ = f.poll_transmit();
    match read {
        Ok((caps, rc)) => f.handle_cea(caps, rc.unwrap_or(0)),
        Err(_) => {
            f.handle_bad_cea();
            assert_eq!(f.state(), State::Closed, "a malformed CEA closes");
        }
    }
});
