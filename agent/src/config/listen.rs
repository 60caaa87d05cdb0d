//! `node.listen` and `metrics.listen` as binding them would take them
//! (RFC 6733 §2.1: the agent listens for Diameter on TCP): `check-config`
//! refuses what `run` could not bind, before anything is bound.
//!
//! A `node.listen` entry is an address (`"127.0.0.1:3868"`, TCP) or a table
//! `{ addr = "0.0.0.0:5658", tls = { cert, key, ca } }`: TLS/TCP (RFC 6733
//! §13.1, port 5658 by convention; `crate::tls`).

use std::net::SocketAddr;

use serde::Deserialize;

use crate::tls::TlsFiles;

/// One `node.listen` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listen {
    /// The address to bind.
    pub addr: SocketAddr,
    /// TLS on every accepted connection; `None`: plain TCP.
    pub tls: Option<TlsFiles>,
}

impl From<SocketAddr> for Listen {
    fn from(addr: SocketAddr) -> Self {
        Self { addr, tls: None }
    }
}

/// The table form of an entry.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ListenTable {
    addr: SocketAddr,
    #[serde(default)]
    tls: Option<TlsFiles>,
}

impl<'de> Deserialize<'de> for Listen {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Listen;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an address or { addr, tls }")
            }
            fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<Listen, E> {
                s.parse::<SocketAddr>().map(Listen::from).map_err(E::custom)
            }
            fn visit_map<M: serde::de::MapAccess<'de>>(self, m: M) -> Result<Listen, M::Error> {
                let t = ListenTable::deserialize(serde::de::value::MapAccessDeserializer::new(m))?;
                Ok(Listen {
                    addr: t.addr,
                    tls: t.tls,
                })
            }
        }
        d.deserialize_any(V)
    }
}

/// A listener key binding would refuse.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct ListenError {
    /// The dotted key (`node.listen[1]`, `metrics.listen`).
    pub(super) key: String,
    /// Why.
    pub(super) why: String,
}

/// A listener, or some peer to dial (`dials`: a `[[peer]]` has a
/// `connect` address; an agent that only dials is one): else the agent
/// would neither accept nor open a connection.
pub(super) fn check_some(listen: &[SocketAddr], dials: bool) -> Result<(), ListenError> {
    if listen.is_empty() && !dials {
        return Err(ListenError {
            key: "node.listen".into(),
            why: "is empty and no [[peer]] has a connect address: the agent would neither accept nor open a connection".into(),
        });
    }
    Ok(())
}

/// An address twice, the metrics endpoint on a Diameter address. Port 0
/// (any free port) never conflicts.
pub(super) fn check(listen: &[SocketAddr], metrics: Option<SocketAddr>) -> Result<(), ListenError> {
    let bad = |key: String, why: String| ListenError { key, why };
    for (i, a) in listen.iter().enumerate() {
        if let Some(j) = listen[..i].iter().position(|b| clash(a, b)) {
            return Err(bad(
                format!("node.listen[{i}]"),
                format!("{a} overlaps node.listen[{j}] ({})", listen[j]),
            ));
        }
    }
    if let Some(m) = metrics
        && let Some(i) = listen.iter().position(|b| clash(&m, b))
    {
        return Err(bad(
            "metrics.listen".into(),
            format!(
                "{m} is a Diameter listener too (node.listen[{i}] = {})",
                listen[i]
            ),
        ));
    }
    Ok(())
}

/// True when binding `a` and `b` both fails: the same port (not 0) on the
/// same address, or under a wildcard covering the other.
fn clash(a: &SocketAddr, b: &SocketAddr) -> bool {
    a.port() != 0 && a.port() == b.port() && (a.ip() == b.ip() || covers(a, b) || covers(b, a))
}

/// A wildcard covers its family's addresses; `[::]` (dual stack, the
/// kernel's default) IPv4's as well.
fn covers(w: &SocketAddr, x: &SocketAddr) -> bool {
    w.ip().is_unspecified() && (w.is_ipv6() || w.is_ipv4() == x.is_ipv4())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addrs(a: &[&str]) -> Vec<SocketAddr> {
        a.iter().map(|s| s.parse().unwrap()).collect()
    }

    fn key_of(listen: &[&str], metrics: Option<&str>) -> Option<String> {
        check_some(&addrs(listen), false)
            .and_then(|()| check(&addrs(listen), metrics.map(|m| m.parse().unwrap())))
            .err()
            .map(|e| e.key)
    }

    #[test]
    fn overlapping_listeners_are_refused_with_their_key() {
        assert_eq!(key_of(&[], None).as_deref(), Some("node.listen"));
        // An agent that only dials its peers listens on nothing.
        assert_eq!(check_some(&[], true), Ok(()));
        let twice = key_of(&["127.0.0.1:3868", "127.0.0.1:3868"], None);
        assert_eq!(twice.as_deref(), Some("node.listen[1]"));
        let v4 = key_of(&["0.0.0.0:3868", "10.0.0.1:3868"], None);
        assert_eq!(v4.as_deref(), Some("node.listen[1]"));
        let dual = key_of(&["10.0.0.1:3868", "[::]:3868"], None);
        assert_eq!(dual.as_deref(), Some("node.listen[1]"));
        let m = key_of(&["127.0.0.1:3868"], Some("0.0.0.0:3868"));
        assert_eq!(m.as_deref(), Some("metrics.listen"));
    }

    #[test]
    fn bindable_listeners_pass() {
        assert_eq!(key_of(&["127.0.0.1:3868", "[::1]:3868"], None), None);
        assert_eq!(key_of(&["0.0.0.0:3868", "[::1]:3868"], None), None);
        assert_eq!(
            key_of(&["127.0.0.1:0", "127.0.0.1:0"], Some("127.0.0.1:0")),
            None
        );
        assert_eq!(key_of(&["127.0.0.1:3868"], Some("127.0.0.1:9464")), None);
    }
}
