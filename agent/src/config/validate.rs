//! Validation of a parsed configuration: what serde cannot check (RFC 6733
//! §4.3.1 DiameterIdentity syntax of the identities, references from
//! `[[route]]` to `[[peer]]` (§2.7), the Tw floor of RFC 3539 §3.4.1, the caps
//! on connections and queues), and what `run` needs besides (something to
//! listen on or dial, TLS files that load, RFC 6733 §13).

use std::collections::HashSet;
use std::path::Path;

use super::identity::check_identity;
use super::{Config, ConfigError, listen};

impl Config {
    /// Checks what serde cannot: identities, references between sections,
    /// timer ranges, duplicates.
    pub(super) fn validate(&self, file: &Path) -> Result<(), ConfigError> {
        let bad = |key: String, why: String| ConfigError::Invalid {
            file: file.to_owned(),
            key,
            why,
        };
        check_identity(&self.node.origin_host)
            .map_err(|e| bad("node.origin_host".into(), e.to_string()))?;
        check_identity(&self.node.origin_realm)
            .map_err(|e| bad("node.origin_realm".into(), e.to_string()))?;
        if self.node.workers == Some(0) {
            return Err(bad("node.workers".into(), "must be at least 1".into()));
        }
        if self.node.applications.is_empty() {
            return Err(bad(
                "node.applications".into(),
                "must name at least one application id".into(),
            ));
        }
        for (key, v) in [
            ("node.tc_seconds", self.node.tc_seconds),
            ("node.tw_seconds", self.node.tw_seconds),
            ("node.drain_seconds", self.node.drain_seconds),
            (
                "node.request_timeout_seconds",
                self.node.request_timeout_seconds,
            ),
            ("node.cer_timeout_seconds", self.node.cer_timeout_seconds),
        ] {
            if !(v.is_finite() && v > 0.0 && v <= 86_400.0) {
                return Err(bad(
                    key.into(),
                    format!("{v} is not a duration in (0, 86400] seconds"),
                ));
            }
        }
        // RFC 3539 §3.4.1: Tw MUST NOT be set lower than 6 seconds.
        if self.node.tw_seconds < 6.0 {
            return Err(bad(
                "node.tw_seconds".into(),
                format!(
                    "{} is below 6 seconds, the minimum of RFC 3539 §3.4.1",
                    self.node.tw_seconds
                ),
            ));
        }
        self.check_connection_caps(file)?;
        let mut seen = HashSet::new();
        for (i, p) in self.peers.iter().enumerate() {
            check_identity(&p.host).map_err(|e| bad(format!("peer[{i}].host"), e.to_string()))?;
            check_identity(&p.realm).map_err(|e| bad(format!("peer[{i}].realm"), e.to_string()))?;
            if p.host.eq_ignore_ascii_case(&self.node.origin_host) {
                return Err(bad(
                    format!("peer[{i}].host"),
                    format!("`{}` is the agent's own origin_host", p.host),
                ));
            }
            if !seen.insert(p.host.to_ascii_lowercase()) {
                return Err(bad(
                    format!("peer[{i}].host"),
                    format!("`{}` is listed twice", p.host),
                ));
            }
        }
        for (i, r) in self.routes.iter().enumerate() {
            check_identity(&r.realm)
                .map_err(|e| bad(format!("route[{i}].realm"), e.to_string()))?;
            if r.peers.is_empty() {
                return Err(bad(
                    format!("route[{i}].peers"),
                    "must name at least one peer".into(),
                ));
            }
            for (j, rp) in r.peers.iter().enumerate() {
                let (host, _, weight) = rp.parts();
                if !seen.contains(&host.to_ascii_lowercase()) {
                    return Err(bad(
                        format!("route[{i}].peers[{j}]"),
                        format!("`{host}` is not a [[peer]] host"),
                    ));
                }
                if weight == 0 {
                    return Err(bad(
                        format!("route[{i}].peers[{j}].weight"),
                        "must be at least 1".into(),
                    ));
                }
            }
        }
        if let Some(d) = &self.doic {
            d.validate()
                .map_err(|e| bad("doic".into(), e.to_string()))?;
        }
        for (i, p) in self.accept.hosts.iter().enumerate() {
            let name = p.strip_prefix("*.").unwrap_or(p);
            if p == "*" || check_identity(name).is_err() {
                return Err(bad(
                    format!("accept.hosts[{i}]"),
                    format!("`{p}` is neither a host name nor `*.suffix`"),
                ));
            }
        }
        self.retry.check().map_err(|e| bad(e.key.into(), e.why))?;
        self.audit
            .check(self.doic_effective().is_some())
            .map_err(|e| bad(e.key.into(), e.why))?;
        if let Some(section) = &self.ebpf {
            let (listen, connect) = (self.listen_addrs(), self.connect_addrs());
            section
                .check(&self.ebpf_around(&listen, &connect))
                .map_err(|e| bad(e.key, e.why))?;
        }
        listen::check(
            &self.listen_addrs(),
            self.metrics.as_ref().map(|m| m.listen),
        )
        .map_err(|e| bad(e.key, e.why))?;
        Ok(())
    }

    /// What `run` (and `check-config`) refuses besides what [`Config::validate`]
    /// does: an agent that listens on nothing and dials nothing. Fragments
    /// of a file (a section read alone) need not pass it.
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] naming `node.listen`.
    pub fn check_runnable(&self, file: &Path) -> Result<(), ConfigError> {
        let dials = self.peers.iter().any(|p| p.connect.is_some());
        listen::check_some(&self.listen_addrs(), dials).map_err(|e| ConfigError::Invalid {
            file: file.to_owned(),
            key: e.key,
            why: e.why,
        })?;
        self.tls_material()
            .map(|_| ())
            .map_err(|e| ConfigError::Invalid {
                file: file.to_owned(),
                key: e.key,
                why: e.source.to_string(),
            })
    }

    /// The caps on connections waiting for CER and the listen backlog.
    fn check_connection_caps(&self, file: &Path) -> Result<(), ConfigError> {
        let n = &self.node;
        let bad = |key: &str, why: String| ConfigError::Invalid {
            file: file.to_owned(),
            key: key.into(),
            why,
        };
        if !(1..=1_000_000).contains(&n.max_pending_cer) {
            return Err(bad(
                "node.max_pending_cer",
                format!("{} is not in [1, 1000000]", n.max_pending_cer),
            ));
        }
        if !(1..=n.max_pending_cer).contains(&n.max_pending_cer_per_source) {
            return Err(bad(
                "node.max_pending_cer_per_source",
                format!(
                    "{} is not in [1, node.max_pending_cer = {}]",
                    n.max_pending_cer_per_source, n.max_pending_cer
                ),
            ));
        }
        if !(1..=65_535).contains(&n.listen_backlog) {
            return Err(bad(
                "node.listen_backlog",
                format!("{} is not in [1, 65535]", n.listen_backlog),
            ));
        }
        for (key, v) in [
            ("node.upstream_queue", n.upstream_queue),
            (
                "node.max_pending_per_connection",
                n.max_pending_per_connection,
            ),
        ] {
            if !(1..=1_000_000).contains(&v) {
                return Err(bad(key, format!("{v} is not in [1, 1000000]")));
            }
        }
        // Below the 64 MiB at which a peer that does not read is dropped.
        if !(4096..=32 << 20).contains(&n.upstream_backlog_bytes) {
            return Err(bad(
                "node.upstream_backlog_bytes",
                format!("{} is not in [4096, 33554432]", n.upstream_backlog_bytes),
            ));
        }
        if let Some(b) = n.socket_buffer_bytes
            && !(2048..=64 << 20).contains(&b)
        {
            return Err(bad(
                "node.socket_buffer_bytes",
                format!("{b} is not in [2048, 67108864]"),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::config::DEMO_CONFIG;
    use crate::config::tests::parse;

    #[test]
    fn route_to_unknown_peer_is_refused_with_its_key() {
        let e = parse(
            r#"[node]
origin_host = "a.example.com"
origin_realm = "example.com"
[[route]]
realm = "example.net"
peers = ["nobody.example.net"]
"#,
        )
        .unwrap_err()
        .to_string();
        assert_eq!(
            e,
            "t.toml: route[0].peers[0]: `nobody.example.net` is not a [[peer]] host"
        );
    }

    #[test]
    fn tw_below_six_seconds_is_refused() {
        let e = parse("[node]\norigin_host = \"a.b\"\norigin_realm = \"b\"\ntw_seconds = 5\n")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("node.tw_seconds") && e.contains("RFC 3539"),
            "{e}"
        );
    }

    #[test]
    fn connection_caps_default_safely_and_bad_values_are_named() {
        let c = parse(DEMO_CONFIG).unwrap();
        assert_eq!(c.cer_timeout(), Duration::from_secs(5));
        assert_eq!(
            (c.node.max_pending_cer, c.node.max_pending_cer_per_source),
            (256, 16)
        );
        assert_eq!(c.node.listen_backlog, 4096);
        assert_eq!(
            (c.node.upstream_queue, c.node.max_pending_per_connection),
            (65_536, 65_536)
        );
        assert_eq!(c.node.upstream_backlog_bytes, 16 << 20);
        assert_eq!(c.node.socket_buffer_bytes, None);
        let node = "[node]\norigin_host = \"a.b\"\norigin_realm = \"b\"\n";
        for (extra, want) in [
            (
                "max_pending_cer = 0",
                "t.toml: node.max_pending_cer: 0 is not in [1, 1000000]",
            ),
            (
                "max_pending_cer = 8\nmax_pending_cer_per_source = 9",
                "t.toml: node.max_pending_cer_per_source: 9 is not in [1, node.max_pending_cer = 8]",
            ),
            (
                "listen_backlog = 0",
                "t.toml: node.listen_backlog: 0 is not in [1, 65535]",
            ),
            (
                "upstream_backlog_bytes = 100",
                "t.toml: node.upstream_backlog_bytes: 100 is not in [4096, 33554432]",
            ),
            (
                "socket_buffer_bytes = 1024",
                "t.toml: node.socket_buffer_bytes: 1024 is not in [2048, 67108864]",
            ),
            (
                "upstream_queue = 0",
                "t.toml: node.upstream_queue: 0 is not in [1, 1000000]",
            ),
            (
                "max_pending_per_connection = 1000001",
                "t.toml: node.max_pending_per_connection: 1000001 is not in [1, 1000000]",
            ),
            (
                "cer_timeout_seconds = 0",
                "t.toml: node.cer_timeout_seconds: 0 is not a duration in (0, 86400] seconds",
            ),
        ] {
            let e = parse(&format!("{node}{extra}\n")).unwrap_err().to_string();
            assert_eq!(e, want);
        }
    }

    #[test]
    fn bad_identity_and_bad_pattern_are_refused() {
        let e = parse("[node]\norigin_host = \"a..b\"\norigin_realm = \"b\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("node.origin_host"), "{e}");
        let e = parse(
            "[node]\norigin_host = \"a.b\"\norigin_realm = \"b\"\n[accept]\nhosts = [\"*\"]\n",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("accept.hosts[0]"), "{e}");
    }
}
