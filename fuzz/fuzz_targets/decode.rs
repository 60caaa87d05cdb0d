//! Fuzzes the Diameter decoder (RFC 6733 §3-4): framing, the strict decode,
//! the relay fast path, grammar checks, the JSON round trip and in-place
//! edits. Any panic is a bug; so is a broken invariant asserted here.

#![no_main]

use bytes::{Bytes, BytesMut};
use diameter::codec::{self, CheckOptions, Message, MessageBuf, Routing, json};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // framing never claims more than it was given
    if let Ok(Some(n)) = codec::frame_len(data) {
        assert!(n <= data.len() && n >= codec::HEADER_LEN);
    }
    let _ = codec::grammar::check(data, CheckOptions::default());
    let routing = Routing::scan(data);
    match Message::decode(Bytes::copy_from_slice(data)) {
        Ok(m) => {
            // a strictly valid message passes the fast path too
            let r = routing.expect("fast path rejects a valid message");
            assert_eq!(r.route_records().count(), r.route_record_count as usize);
            // the JSON form gives back the same bytes
            let doc = json::to_json(data).expect("json of a valid message");
            assert_eq!(json::from_json(&doc).expect("json encodes"), data);
            // re-encoding gives a valid message of the same length
            let again = m.to_bytes().expect("encodes");
            assert_eq!(again.len(), data.len());
            Message::decode(again.freeze()).expect("re-encoded message decodes");
            for a in &m.avps {
                let _ = a.value();
            }
            // in-place edits keep it valid
            let mut buf = MessageBuf::new(BytesMut::from(data)).expect("header is valid");
            buf.set_hop_by_hop(0x0102_0304);
            buf.set_retransmit(true);
            let _ = buf.remove_avps(|a| a.code == 623 || a.code == 282);
            codec::validate(buf.as_bytes()).expect("edited message stays valid");
        }
        Err(e) => {
            assert!(e.offset() <= data.len());
            assert!(e.result_code() >= 3000);
        }
    }
});
