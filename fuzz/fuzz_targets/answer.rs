//! Fuzzes the relay's answer check (RFC 6733 §6.2, §7.1): the scan that
//! finds Result-Code, Experimental-Result and the DOIC AVPs and rejects a
//! malformed answer ([`Routing::scan_answer`]), and the answer the agent
//! writes in its place (3002 with the defect in Error-Message). Any panic is
//! a bug; so is a broken invariant asserted here.

#![no_main]

use bytes::BytesMut;
use diameter::codec::Routing;
use diameter::codec::answer::put_error_answer;
use libfuzzer_sys::fuzz_target;

/// The request the agent answers in place of a malformed answer.
const REQUEST: &[u8] = include_bytes!("../corpus/decode/test-request.bin");

fuzz_target!(|data: &[u8]| {
    match Routing::scan_answer(data) {
        Ok(r) => {
            // what the relay reads from an answer that passed is there
            assert!(Routing::scan(data).is_ok(), "the request scan agrees");
            assert!(r.origin_host().is_some() && r.origin_realm().is_some());
            assert!(
                r.result_code().is_some() || r.experimental_result_code().is_some(),
                "an outcome to count and to judge"
            );
            let _ = (r.oc_supported_features(), r.oc_olrs().count());
        }
        Err(e) => {
            assert!(e.offset() <= data.len(), "defect inside the message");
            // the agent's own answer in its place passes the same check
            let why = format!(
                "malformed answer from upstream.example.net: {e} ({})",
                e.result_code_name()
            );
            let mut out = BytesMut::new();
            put_error_answer(
                &mut out,
                REQUEST,
                ("agent.example.com", "example.com"),
                3002,
                None,
                &why,
            );
            let own = Routing::scan_answer(&out).expect("the agent's answer is well formed");
            assert_eq!(own.result_code(), Some(3002));
        }
    }
});
