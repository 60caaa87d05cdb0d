//! Fuzzes the relay's view of a message (RFC 6733 §3 framing, §6.1.9
//! relaying): the input is framed with the agent's limit as a connection
//! frames it, scanned once ([`Routing::scan`], [`Routing::scan_answer`]),
//! read through every accessor, and edited as the relay edits what it
//! forwards ([`MessageBuf`], [`forward::put_relayed_request_cut`]). Any
//! panic is a bug; so is an edit that leaves the message unframeable or
//! changes a byte it should not.

#![no_main]

use bytes::BytesMut;
use diameter::codec::header::{self, HEADER_LEN, frame_len_max};
use diameter::codec::{Avp, MessageBuf, Routing, forward};
use diameter::dictionary::code;
use libfuzzer_sys::fuzz_target;

/// The agent's acceptance limit once a peer is open.
const LIMIT: usize = 1 << 20;

/// The message frames as one whole message of its own length.
fn framed(m: &[u8]) -> bool {
    matches!(frame_len_max(m, LIMIT + 1024), Ok(Some(n)) if n == m.len())
}

fuzz_target!(|data: &[u8]| {
    let Ok(Some(n)) = frame_len_max(data, LIMIT) else {
        return;
    };
    assert!((HEADER_LEN..=data.len()).contains(&n), "framing stays inside");
    let msg = &data[..n];
    let Ok(r) = Routing::scan(msg) else {
        // a message the scan refuses is answered, not edited
        return;
    };
    let h = header::Header::read(msg);
    assert_eq!(h, r.header, "one header, read two ways");

    // every accessor, within the message
    for v in [
        r.session_id(),
        r.origin_host(),
        r.origin_realm(),
        r.destination_host(),
        r.destination_realm(),
    ]
    .into_iter()
    .flatten()
    {
        assert!(v.len() < msg.len());
    }
    assert_eq!(r.route_records().count(), r.route_record_count as usize);
    assert_eq!(r.oc_olrs().count(), r.oc_olr_count as usize);
    assert_eq!(r.loads().count(), r.load_count as usize);
    let _ = (r.result_code(), r.experimental_result_code(), r.drmp());
    let _ = (r.oc_supported_features(), r.check_origin("request"));
    if Routing::scan_answer(msg).is_ok() {
        assert!(r.origin_host().is_some() && r.origin_realm().is_some());
    }

    // the relayed copy: the same bytes, without the OC-OLR when there is
    // one, with a Route-Record, a new Hop-by-Hop id and the T flag
    let cut = r.oc_olrs().next().map(|a| (a.offset, a.offset + a.raw.len()));
    let mut out = BytesMut::from(&b"earlier output"[..]);
    let before = out.len();
    match cut {
        Some(c) => forward::put_relayed_request_cut(&mut out, msg, c, "agent.example", 7, true),
        None => forward::put_relayed_request(&mut out, msg, "agent.example", 7, true),
    }
    assert_eq!(&out[..before], b"earlier output", "earlier output untouched");
    let relayed = &out[before..];
    assert!(framed(relayed), "the relayed copy frames");
    let rr = Routing::scan(relayed).expect("the relayed copy scans");
    assert_eq!(rr.header.hop_by_hop, 7);
    assert_eq!(rr.header.end_to_end, h.end_to_end);
    assert!(rr.header.flags.is_retransmit());
    assert_eq!(rr.route_record_count, r.route_record_count + 1);
    assert_eq!(rr.route_records().last(), Some(&b"agent.example"[..]));
    if cut.is_none() {
        assert_eq!(&relayed[HEADER_LEN..n], &msg[HEADER_LEN..]);
    }

    // in-place edits keep the framing valid and the rest of the bytes
    let Ok(mut b) = MessageBuf::new(BytesMut::from(msg)) else {
        panic!("a scanned message wraps");
    };
    b.set_hop_by_hop(0xdead_beef);
    b.set_end_to_end(0x0bad_cafe);
    b.set_retransmit(true);
    b.set_retransmit(false);
    assert_eq!(b.header().hop_by_hop, 0xdead_beef);
    assert_eq!(b.header().end_to_end, 0x0bad_cafe);
    assert_eq!(b.header().flags.is_retransmit(), false);
    assert_eq!(&b.as_bytes()[HEADER_LEN..], &msg[HEADER_LEN..]);
    if b.append_avp(&Avp::str(code::ROUTE_RECORD, "agent.example")).is_ok() {
        assert!(framed(b.as_bytes()), "append keeps framing");
    }
    let removed = b
        .remove_avps(|a| a.code == code::OC_OLR && a.vendor_id.is_none())
        .expect("a scanned message's top-level avps are sound");
    assert_eq!(removed, r.oc_olr_count as usize);
    assert!(framed(b.as_bytes()), "removal keeps framing");
    let after = b.routing().expect("an edited message scans");
    assert_eq!(after.oc_olr_count, 0);
});
