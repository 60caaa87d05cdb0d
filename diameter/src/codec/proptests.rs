//! Property tests of the codec against RFC 6733 §3-4: encode then decode is
//! the identity for every data type and for random message trees; boundary
//! sizes are accepted or rejected per type; any byte string decodes to a
//! value or an error, never a panic; length defects map to 5014/5015 at the
//! right offset.

use bytes::Bytes;
use proptest::prelude::*;

use super::avp::{Avp, AvpData, AvpFlags};
use super::header::{CommandFlags, HEADER_LEN, Header};
use super::json::{from_json, to_json};
use super::message::{Message, validate};
use super::relay::{MessageBuf, Routing};
use super::value::{Address, Time, Value};
use crate::dictionary::{self, AvpType, code};

fn ascii_ident() -> impl Strategy<Value = String> {
    "[a-z0-9][a-z0-9.-]{0,40}"
}

fn value_of(ty: AvpType) -> BoxedStrategy<Value> {
    match ty {
        AvpType::OctetString => proptest::collection::vec(any::<u8>(), 0..40)
            .prop_map(|v| Value::OctetString(v.into()))
            .boxed(),
        AvpType::Integer32 => any::<i32>().prop_map(Value::Integer32).boxed(),
        AvpType::Integer64 => any::<i64>().prop_map(Value::Integer64).boxed(),
        AvpType::Unsigned32 => any::<u32>().prop_map(Value::Unsigned32).boxed(),
        AvpType::Unsigned64 => any::<u64>().prop_map(Value::Unsigned64).boxed(),
        AvpType::Float32 => any::<u32>()
            .prop_map(|b| Value::Float32(f32::from_bits(b)))
            .boxed(),
        AvpType::Float64 => any::<u64>()
            .prop_map(|b| Value::Float64(f64::from_bits(b)))
            .boxed(),
        AvpType::Grouped => Just(Value::Grouped(Vec::new())).boxed(),
        AvpType::Address => prop_oneof![
            any::<[u8; 4]>().prop_map(|a| Value::Address(Address::Ip(std::net::IpAddr::from(a)))),
            any::<[u8; 16]>().prop_map(|a| Value::Address(Address::Ip(std::net::IpAddr::from(a)))),
            (3u16..400, proptest::collection::vec(any::<u8>(), 0..20)).prop_map(|(family, d)| {
                Value::Address(Address::Other {
                    family,
                    data: d.into(),
                })
            }),
        ]
        .boxed(),
        AvpType::Time => any::<u32>().prop_map(|t| Value::Time(Time(t))).boxed(),
        AvpType::Utf8String => ".{0,20}"
            .prop_map(|s| Value::Utf8String(s.into_bytes().into()))
            .boxed(),
        AvpType::DiameterIdentity => ascii_ident()
            .prop_map(|s| Value::DiameterIdentity(s.into_bytes().into()))
            .boxed(),
        AvpType::DiameterUri => ascii_ident()
            .prop_map(|s| Value::DiameterUri(format!("aaa://{s}:3868").into_bytes().into()))
            .boxed(),
        AvpType::Enumerated => any::<i32>().prop_map(Value::Enumerated).boxed(),
        AvpType::IpFilterRule => "[a-z0-9 .]{0,30}"
            .prop_map(|s| Value::IpFilterRule(format!("permit {s}").into_bytes().into()))
            .boxed(),
    }
}

fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Float32(x), Value::Float32(y)) => x.to_bits() == y.to_bits(),
        (Value::Float64(x), Value::Float64(y)) => x.to_bits() == y.to_bits(),
        _ => a == b,
    }
}

/// A leaf AVP of a random dictionary (non-grouped) entry or an unknown code.
fn leaf() -> BoxedStrategy<Avp> {
    let known: Vec<&'static dictionary::AvpDef> = dictionary::AVPS
        .iter()
        .filter(|d| d.ty != AvpType::Grouped)
        .collect();
    prop_oneof![
        3 => proptest::sample::select(known).prop_flat_map(|d| {
            let vendor = (d.vendor_id != 0).then_some(d.vendor_id);
            (value_of(d.ty), any::<bool>()).prop_map(move |(v, m)| {
                Avp::new(d.code, vendor, m, AvpData::Bytes(v.to_bytes()))
            })
        }),
        1 => (5000u32..6000, proptest::option::of(1u32..20), any::<bool>(), proptest::collection::vec(any::<u8>(), 0..13))
            .prop_map(|(c, v, m, d)| Avp::new(c, v, m, AvpData::Bytes(d.into()))),
    ]
    .boxed()
}

const GROUPED: [(u32, u32); 6] = [
    (code::PROXY_INFO, 0),
    (code::VENDOR_SPECIFIC_APPLICATION_ID, 0),
    (code::OC_OLR, 0),
    (code::OC_SUPPORTED_FEATURES, 0),
    (code::LOAD, 0),
    (649, dictionary::vendor::TGPP),
];

fn tree() -> impl Strategy<Value = Avp> {
    leaf().prop_recursive(4, 40, 6, |inner| {
        (
            proptest::sample::select(&GROUPED[..]),
            proptest::collection::vec(inner, 0..6),
        )
            .prop_map(|((c, v), children)| {
                let vendor = (v != 0).then_some(v);
                Avp::new(c, vendor, true, AvpData::Grouped(children))
            })
    })
}

fn message() -> impl Strategy<Value = Message> {
    (
        any::<u32>(),
        any::<u32>(),
        0u32..0x0100_0000,
        any::<u32>(),
        0u8..0x40,
        proptest::collection::vec(tree(), 0..12),
    )
        .prop_map(|(h, e, cmd, app, f, avps)| {
            // any flags but the E bit on a request (3008)
            let mut flags = CommandFlags(f << 2 | (f & 0x03));
            if flags.is_request() && flags.is_error() {
                flags = flags.with(CommandFlags::ERROR, false);
            }
            let mut m = Message::new(cmd, app, flags).with_ids(h, e);
            m.avps = avps;
            m
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn every_type_round_trips(ty in proptest::sample::select(&dictionary::ALL_TYPES[..]), seed in any::<u64>()) {
        let mut runner = proptest::test_runner::TestRunner::new_with_rng(
            ProptestConfig::default(),
            proptest::test_runner::TestRng::from_seed(proptest::test_runner::RngAlgorithm::ChaCha, &{
                let mut s = [0u8; 32];
                s[..8].copy_from_slice(&seed.to_le_bytes());
                s
            }),
        );
        let v = value_of(ty).new_tree(&mut runner).unwrap().current();
        let b = v.to_bytes();
        prop_assert_eq!(b.len(), v.encoded_len());
        let back = Value::decode(ty, &b).unwrap();
        prop_assert!(same(&back, &v), "{:?} != {:?}", back, v);
    }

    #[test]
    fn fixed_size_types_reject_every_other_size(n in 0usize..20) {
        for (ty, size) in [(AvpType::Integer32, 4), (AvpType::Unsigned32, 4), (AvpType::Float32, 4),
            (AvpType::Enumerated, 4), (AvpType::Time, 4), (AvpType::Integer64, 8),
            (AvpType::Unsigned64, 8), (AvpType::Float64, 8)] {
            let r = Value::decode(ty, &Bytes::from(vec![0u8; n]));
            prop_assert_eq!(r.is_ok(), n == size, "{:?} with {} bytes", ty, n);
            if let Err(e) = r {
                prop_assert!(e.length);
            }
        }
        // an IPv4 address needs 2 + 4 bytes, IPv6 2 + 16
        let mut v4 = vec![0, 1];
        v4.resize(n, 7);
        prop_assert_eq!(Value::decode(AvpType::Address, &v4.into()).is_ok(), n == 6);
        let mut v6 = vec![0, 2];
        v6.resize(n.max(2), 7);
        prop_assert_eq!(Value::decode(AvpType::Address, &v6.into()).is_ok(), n == 18);
    }

    #[test]
    fn random_trees_round_trip(m in message()) {
        let b = m.to_bytes().unwrap().freeze();
        prop_assert_eq!(b.len(), m.encoded_len());
        let h = validate(&b).unwrap();
        prop_assert_eq!(h.length as usize, b.len());
        let d = Message::decode(b.clone()).unwrap();
        prop_assert_eq!(d.to_bytes().unwrap().freeze(), b.clone());
        prop_assert_eq!(d.avps.len(), m.avps.len());
        // the JSON form gives back the same bytes
        prop_assert_eq!(from_json(&to_json(&b).unwrap()).unwrap(), b.to_vec());
        // the relay view sees the same top-level AVPs
        let r = Routing::scan(&b).unwrap();
        let rr = m.avps.iter().filter(|a| a.code == code::ROUTE_RECORD && a.vendor_id.is_none()).count();
        prop_assert_eq!(r.route_record_count as usize, rr);
        prop_assert_eq!(r.route_records().count(), rr);
        let olr = m.avps.iter().filter(|a| a.code == code::OC_OLR && a.vendor_id.is_none()).count();
        prop_assert_eq!(r.oc_olrs().count(), olr);
    }

    #[test]
    fn removing_avps_in_place_matches_rebuilding(m in message(), drop_code in proptest::sample::select(vec![code::OC_OLR, code::PROXY_INFO, code::ROUTE_RECORD, 649])) {
        let mut buf = MessageBuf::from_message(&m).unwrap();
        let n = buf.remove_avps(|a| a.code == drop_code).unwrap();
        let mut expect = m.clone();
        expect.avps.retain(|a| a.code != drop_code);
        prop_assert_eq!(n, m.avps.len() - expect.avps.len());
        prop_assert_eq!(buf.as_bytes(), &expect.to_bytes().unwrap()[..]);
    }

    #[test]
    fn random_bytes_never_panic(body in proptest::collection::vec(any::<u8>(), 0..200), mut hdr in any::<[u8; 20]>(), fix in any::<bool>()) {
        if fix {
            // a plausible header so that the AVP decoder is reached
            hdr[0] = 1;
            let len = (HEADER_LEN + body.len()) as u32;
            hdr[1..4].copy_from_slice(&len.to_be_bytes()[1..]);
            hdr[4] &= 0xdf;
        }
        let mut b = hdr.to_vec();
        b.extend_from_slice(&body);
        let r = Message::decode(Bytes::from(b.clone()));
        let _ = Routing::scan(&b);
        let _ = super::grammar::check(&b, super::CheckOptions::default());
        let _ = super::frame_len(&b);
        let _ = super::frame_len(&body);
        if let Ok(m) = r {
            // whatever decodes re-encodes to a message that decodes
            let j = to_json(&b).unwrap();
            prop_assert_eq!(from_json(&j).unwrap(), b.clone());
            prop_assert!(Message::decode(m.to_bytes().unwrap().freeze()).is_ok());
        } else if let Err(e) = r {
            prop_assert!(e.offset() <= b.len());
            prop_assert!(e.result_code() >= 3000);
        }
    }

    #[test]
    fn mutated_messages_never_panic(m in message(), pos in any::<usize>(), byte in any::<u8>()) {
        let mut b = m.to_bytes().unwrap().to_vec();
        let i = pos % b.len();
        b[i] = byte;
        if let Ok(d) = Message::decode(Bytes::from(b.clone())) {
            prop_assert_eq!(from_json(&to_json(&b).unwrap()).unwrap(), b.clone());
            let _ = d.avps.iter().map(Avp::value).count();
        }
        let _ = Routing::scan(&b);
    }

    #[test]
    fn a_bad_avp_length_is_5014_at_its_offset(m in message(), which in any::<usize>(), short in prop_oneof![0usize..8, 0x00ff_ff00usize..0x0100_0000]) {
        prop_assume!(!m.avps.is_empty());
        let k = which % m.avps.len();
        let mut b = m.to_bytes().unwrap().to_vec();
        let off = HEADER_LEN + m.avps[..k].iter().map(Avp::encoded_len).sum::<usize>();
        b[off + 5..off + 8].copy_from_slice(&(short as u32).to_be_bytes()[1..]);
        let e = Message::decode(Bytes::from(b.clone())).unwrap_err();
        prop_assert_eq!(e.result_code(), 5014);
        prop_assert_eq!(e.offset(), off);
        let e = Routing::scan(&b).unwrap_err();
        prop_assert_eq!((e.result_code(), e.offset()), (5014, off));
        // Failed-AVP carries the AVP's code
        prop_assert_eq!(&e.failed_avp().unwrap()[..4], &b[off..off + 4]);
    }

    #[test]
    fn a_wrong_message_length_is_5015(m in message(), delta in 1u32..64) {
        let mut b = m.to_bytes().unwrap().to_vec();
        let len = b.len() as u32 + 4 * delta;
        b[1..4].copy_from_slice(&len.to_be_bytes()[1..]);
        let e = Message::decode(Bytes::from(b.clone())).unwrap_err();
        prop_assert_eq!((e.result_code(), e.offset()), (5015, 1));
        // the framer waits for the missing bytes instead
        prop_assert_eq!(super::frame_len(&b).unwrap(), None);
    }

    #[test]
    fn headers_round_trip(h in any::<(u8, u32, u32, u32, u32)>(), cmd in 0u32..0x0100_0000) {
        let hdr = Header {
            version: 1,
            length: 20,
            flags: CommandFlags(h.0 & !CommandFlags::ERROR),
            command_code: cmd,
            application_id: h.1,
            hop_by_hop: h.2,
            end_to_end: h.3,
        };
        let mut out = Vec::new();
        hdr.encode(&mut out);
        prop_assert_eq!(Header::decode(&out).unwrap(), hdr);
        let _ = h.4;
        let _ = AvpFlags(0);
    }
}
