//! Agent configuration: the TOML file of `doic-agent run --config FILE`, its
//! defaults and its validation. Reads a file (or a string), nothing else.
//!
//! The identity keys map onto RFC 6733: `origin_host`/`origin_realm` are the
//! agent's DiameterIdentity (§4.3.1, §6.3, §6.4), `[[peer]]` entries are the
//! peer table (§2.6), `[[route]]` entries the realm-based routing table
//! (§2.7), and `tc_seconds`/`tw_seconds` the Tc (§2.1) and Tw (RFC 3539 §3.4.1)
//! timers.
//!
//! The file gathers the sections of the parts that use them: `[doic]` is
//! [`doic::DoicConfig`], `[ebpf]` is [`crate::ebpf::Section`], `[retry]` is
//! [`RetryConfig`] (the relay's retry budget). What serde cannot check is
//! checked in `validate` ([`Config::check_runnable`] included).

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use diameter::codec::Capabilities;
use diameter::peer::capx::firmware_revision;
use serde::Deserialize;

mod identity;
mod listen;
mod parse_error;
pub mod reload;
mod retry;
mod validate;

pub use identity::IdentityError;
pub use listen::Listen;
use parse_error::one_line;
pub use reload::Plan;
pub use retry::{RetryConfig, RetryConfigError};

/// A configuration that could not be read or is not valid. The message names
/// the file, the key and the reason.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("{file}: cannot read")]
    Read {
        /// The file.
        file: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not TOML of the expected shape.
    #[error("{file}: {message}")]
    Parse {
        /// The file.
        file: PathBuf,
        /// The parser's message (it names the key and the position).
        message: String,
    },
    /// A key has a value that is not acceptable.
    #[error("{file}: {key}: {why}")]
    Invalid {
        /// The file.
        file: PathBuf,
        /// The dotted key, e.g. `route[1].peers[0]`.
        key: String,
        /// Why the value is refused.
        why: String,
    },
}

/// The whole configuration file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// The agent's own identity, listeners and timers.
    pub node: Node,
    /// The metrics endpoint; absent means no endpoint.
    #[serde(default)]
    pub metrics: Option<Metrics>,
    /// Known peers (`[[peer]]`).
    #[serde(default, rename = "peer")]
    pub peers: Vec<PeerConfig>,
    /// Realm routes (`[[route]]`).
    #[serde(default, rename = "route")]
    pub routes: Vec<RouteConfig>,
    /// Inbound peers accepted by name pattern.
    #[serde(default)]
    pub accept: Accept,
    /// Kernel telemetry (`[ebpf]`); absent means the defaults of
    /// [`crate::ebpf::Section`].
    #[serde(default)]
    pub ebpf: Option<crate::ebpf::Section>,
    /// Diameter overload control (`[doic]`, RFC 7683/8581/8582); absent
    /// means the agent relays without DOIC.
    #[serde(default)]
    pub doic: Option<doic::DoicConfig>,
    /// The retry budget (`[retry]`); absent means its defaults.
    #[serde(default)]
    pub retry: RetryConfig,
    /// The durable audit log (`[audit]`); without `dir`, none.
    #[serde(default)]
    pub audit: crate::audit::Section,
}

/// `[node]`: the agent itself.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Node {
    /// Origin-Host of the agent (RFC 6733 §6.3).
    pub origin_host: String,
    /// Origin-Realm of the agent (RFC 6733 §6.4).
    pub origin_realm: String,
    /// Listening addresses (IPv4 or IPv6): `"addr"` for TCP, `{ addr, tls
    /// = { cert, key, ca } }` for TLS/TCP (RFC 6733 §13.1).
    #[serde(default)]
    pub listen: Vec<Listen>,
    /// Worker threads; default one per core.
    #[serde(default)]
    pub workers: Option<usize>,
    /// Host-IP-Address values sent in CER/CEA; default: the local address of
    /// each connection.
    #[serde(default)]
    pub host_ip_addresses: Vec<IpAddr>,
    /// Application ids advertised in CER/CEA; default: Relay (0xffffffff).
    #[serde(default = "default_applications")]
    pub applications: Vec<u32>,
    /// Vendor-Id sent in CER/CEA (RFC 6733 §5.3.3).
    #[serde(default)]
    pub vendor_id: u32,
    /// Product-Name sent in CER/CEA (RFC 6733 §5.3.7).
    #[serde(default = "default_product_name")]
    pub product_name: String,
    /// Tc, the reconnect interval (RFC 6733 §2.1), in seconds.
    #[serde(default = "default_tc")]
    pub tc_seconds: f64,
    /// Tw, the watchdog interval (RFC 3539 §3.4.1), in seconds.
    #[serde(default = "default_tw")]
    pub tw_seconds: f64,
    /// The shutdown drain D, in seconds: pending requests wait for their
    /// upstream answers until 0.8 D (then 3002), connections close at D at
    /// the latest.
    #[serde(default = "default_drain")]
    pub drain_seconds: f64,
    /// How long a request may wait for its upstream answer before it is
    /// answered 3002 DIAMETER_UNABLE_TO_DELIVER, in seconds.
    #[serde(default = "default_request_timeout")]
    pub request_timeout_seconds: f64,
    /// How long a new connection may take to complete the capabilities
    /// exchange (CER/CEA, RFC 6733 §5.3) before it is closed, in seconds.
    #[serde(default = "default_cer_timeout")]
    pub cer_timeout_seconds: f64,
    /// Inbound connections that have not completed the capabilities
    /// exchange, at most, in total ([`crate::admission`]).
    #[serde(default = "default_max_pending_cer")]
    pub max_pending_cer: usize,
    /// The same, from one source address (an IPv6 /64).
    #[serde(default = "default_max_pending_cer_per_source")]
    pub max_pending_cer_per_source: usize,
    /// Accept queue of each listener (`listen(2)` backlog; the kernel caps
    /// it at `net.core.somaxconn`).
    #[serde(default = "default_listen_backlog")]
    pub listen_backlog: u32,
    /// Requests queued for one upstream connection, at most, waiting for its
    /// worker to write them; one more is answered 3004 at once
    /// (`crate::net::link`, RFC 6733 §7.1.3).
    #[serde(default = "default_upstream_queue")]
    pub upstream_queue: usize,
    /// Bytes of output an upstream connection may hold that its peer has not
    /// taken in; past them a request for that peer is answered 3004 at once
    /// instead of queued behind them.
    #[serde(default = "default_upstream_backlog_bytes")]
    pub upstream_backlog_bytes: usize,
    /// The kernel's receive and send buffers of every peer connection,
    /// accepted or dialled (`SO_RCVBUF`, `SO_SNDBUF`, bytes; Linux books
    /// twice the figure and caps it at `net.core.rmem_max` /
    /// `net.core.wmem_max`). Unset: the kernel sizes them itself, up to
    /// `net.ipv4.tcp_rmem` / `tcp_wmem`'s maximum (megabytes). A bound keeps
    /// what waits in the kernel between two nodes to a known amount of
    /// work: seconds of it in front of a small agent otherwise
    /// (docs/own-overload.md).
    #[serde(default)]
    pub socket_buffer_bytes: Option<u32>,
    /// Requests of one downstream connection relayed and not yet answered,
    /// at most; one more is answered 3004 at once. It also sizes the
    /// connection's answer queue, which therefore cannot fill
    /// (`crate::net::link`).
    #[serde(default = "default_max_pending_per_connection")]
    pub max_pending_per_connection: usize,
}

fn default_applications() -> Vec<u32> {
    vec![diameter::dictionary::app::RELAY]
}
fn default_product_name() -> String {
    "doic-agent".to_owned()
}
fn default_tc() -> f64 {
    30.0
}
fn default_tw() -> f64 {
    30.0
}
fn default_drain() -> f64 {
    5.0
}
fn default_request_timeout() -> f64 {
    10.0
}
fn default_cer_timeout() -> f64 {
    5.0
}
fn default_upstream_queue() -> usize {
    65_536
}
fn default_upstream_backlog_bytes() -> usize {
    16 << 20
}
fn default_max_pending_per_connection() -> usize {
    65_536
}
fn default_max_pending_cer() -> usize {
    256
}
fn default_max_pending_cer_per_source() -> usize {
    16
}
fn default_listen_backlog() -> u32 {
    4096
}

/// `[metrics]`: the Prometheus endpoint.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Metrics {
    /// Address of the HTTP listener serving `/metrics`.
    pub listen: SocketAddr,
}

/// `[[peer]]`: one known peer.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PeerConfig {
    /// The peer's DiameterIdentity (its Origin-Host).
    pub host: String,
    /// The peer's realm.
    pub realm: String,
    /// Where the agent dials; absent for inbound-only peers.
    #[serde(default)]
    pub connect: Option<SocketAddr>,
    /// Its overload reports are believed (RFC 7683 §10.4); otherwise they
    /// are stripped and ignored.
    #[serde(default)]
    pub trusted: bool,
    /// Whether the agent protects it as a server without DOIC
    /// (docs/protect.md): `"auto"` (default: unless its answers carry
    /// OC-Supported-Features and it is trusted), `"native"` (never: it
    /// reports its own overload), `"protect"` (always).
    #[serde(default)]
    pub doic: doic::protect::Mode,
    /// TLS/TCP to this peer when the agent dials it (RFC 6733 §13.1):
    /// `ca` required, `cert` and `key` for mutual authentication.
    #[serde(default)]
    pub tls: Option<crate::tls::TlsFiles>,
}

/// `[[route]]`: a realm route.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouteConfig {
    /// The Destination-Realm routed by this entry.
    pub realm: String,
    /// The application id; absent matches every application.
    #[serde(default)]
    pub application: Option<u32>,
    /// The next hops, by host name or with priority and weight.
    pub peers: Vec<RoutePeer>,
}

/// One next hop of a route: a bare host name, or a table with priority and
/// weight.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
pub enum RoutePeer {
    /// `"server1.example.net"`: priority 0, weight 1.
    Host(String),
    /// `{ host = "...", priority = 0, weight = 1 }`.
    Weighted {
        /// The peer's host name (a `[[peer]]` entry).
        host: String,
        /// Lower is preferred; candidates of the lowest priority that can
        /// take the request are used first.
        #[serde(default)]
        priority: u32,
        /// Relative share among candidates of equal priority.
        #[serde(default = "default_weight")]
        weight: u32,
    },
}

fn default_weight() -> u32 {
    1
}

impl RoutePeer {
    /// `(host, priority, weight)` of this next hop.
    #[must_use]
    pub fn parts(&self) -> (&str, u32, u32) {
        match self {
            RoutePeer::Host(h) => (h, 0, 1),
            RoutePeer::Weighted {
                host,
                priority,
                weight,
            } => (host, *priority, *weight),
        }
    }
}

/// `[accept]`: inbound peers accepted without a `[[peer]]` entry.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Accept {
    /// Host name patterns: an exact name, or `*.suffix` matching any name
    /// that ends with `.suffix`.
    #[serde(default)]
    pub hosts: Vec<String>,
}

impl Accept {
    /// True when `host` matches one of the patterns.
    #[must_use]
    pub fn matches(&self, host: &str) -> bool {
        self.hosts.iter().any(|p| pattern_matches(p, host))
    }
}

/// True when `host` matches `pattern` (`*.suffix` or an exact name), without
/// regard to ASCII case.
#[must_use]
pub fn pattern_matches(pattern: &str, host: &str) -> bool {
    match pattern.strip_prefix('*') {
        Some(suffix) => {
            host.len() > suffix.len()
                && host
                    .get(host.len() - suffix.len()..)
                    .is_some_and(|tail| tail.eq_ignore_ascii_case(suffix))
        }
        None => pattern.eq_ignore_ascii_case(host),
    }
}

impl Config {
    /// The agent's own capabilities (RFC 6733 §5.3.1); `local_ip` is the
    /// local address of the connection, used when `[node]` lists no
    /// Host-IP-Address.
    #[must_use]
    pub fn capabilities(&self, local_ip: IpAddr) -> Capabilities {
        let host_ip_addresses = if self.node.host_ip_addresses.is_empty() {
            vec![local_ip]
        } else {
            self.node.host_ip_addresses.clone()
        };
        Capabilities {
            origin_host: self.node.origin_host.clone(),
            origin_realm: self.node.origin_realm.clone(),
            host_ip_addresses,
            vendor_id: self.node.vendor_id,
            product_name: self.node.product_name.clone(),
            firmware_revision: Some(firmware_revision()),
            auth_application_ids: self.node.applications.clone(),
            ..Capabilities::default()
        }
    }

    /// Reads and validates a configuration file.
    ///
    /// # Errors
    /// [`ConfigError`] naming the file, the key and why.
    pub fn from_file(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            file: path.to_owned(),
            source,
        })?;
        Self::from_str_named(&text, path)
    }

    /// Parses and validates configuration text; `file` names it in errors.
    ///
    /// # Errors
    /// [`ConfigError`] naming the file, the key and why.
    pub fn from_str_named(text: &str, file: &Path) -> Result<Self, ConfigError> {
        let config: Config = toml::from_str(text).map_err(|e| ConfigError::Parse {
            file: file.to_owned(),
            message: one_line(&e, text),
        })?;
        config.validate(file)?;
        Ok(config)
    }

    /// The `node.listen` addresses, in order.
    #[must_use]
    pub fn listen_addrs(&self) -> Vec<SocketAddr> {
        self.node.listen.iter().map(|l| l.addr).collect()
    }

    /// Loads the TLS material of every TLS listener and `[[peer]]` (RFC 6733
    /// §13): what `run` uses, and what `check-config` checks.
    ///
    /// # Errors
    /// The first listener or peer whose files do not load, by key
    /// (`node.listen[1].tls`, `peer[0].tls`), and the file.
    pub fn tls_material(&self) -> Result<crate::tls::Material, crate::tls::ReloadError> {
        use crate::tls::{ClientTls, Material, ReloadError, ServerTls, TlsError};
        fn part<T>(
            key: String,
            load: Result<T, TlsError>,
        ) -> Result<(String, std::sync::Arc<T>), ReloadError> {
            match load {
                Ok(t) => Ok((key, std::sync::Arc::new(t))),
                Err(source) => Err(ReloadError { key, source }),
            }
        }
        let mut m = Material::default();
        for (i, l) in self.node.listen.iter().enumerate() {
            if let Some(files) = &l.tls {
                let key = format!("node.listen[{i}].tls");
                m.servers.push(part(key, ServerTls::load(files))?);
            }
        }
        for (i, p) in self.peers.iter().enumerate() {
            if let Some(files) = &p.tls {
                m.clients
                    .push(part(format!("peer[{i}].tls"), ClientTls::load(files))?);
            }
        }
        Ok(m)
    }

    /// The `[doic]` section with the `trusted` flags of the `[[peer]]`
    /// entries folded into its per-peer policies; `None` when DOIC is off
    /// (no section, or `enabled = false`).
    #[must_use]
    pub fn doic_effective(&self) -> Option<doic::DoicConfig> {
        let mut d = self.doic.clone().filter(|d| d.enabled)?;
        for p in self.peers.iter().filter(|p| p.trusted) {
            d.peers.entry(p.host.clone()).or_default().trusted = true;
        }
        for p in self
            .peers
            .iter()
            .filter(|p| p.doic != doic::protect::Mode::Auto)
        {
            d.peers.entry(p.host.clone()).or_default().protect = p.doic;
        }
        Some(d)
    }

    /// The `[[peer]]` connect addresses, in order.
    fn connect_addrs(&self) -> Vec<SocketAddr> {
        self.peers.iter().filter_map(|p| p.connect).collect()
    }

    /// What the `[ebpf]` defaults depend on (`listen`, `connect`: the
    /// [`Config::listen_addrs`], [`Config::connect_addrs`]).
    fn ebpf_around<'a>(
        &'a self,
        listen: &'a [SocketAddr],
        connect: &'a [SocketAddr],
    ) -> crate::ebpf::Around<'a> {
        crate::ebpf::Around {
            listen,
            connect,
            accept_by_name: !self.accept.hosts.is_empty(),
        }
    }

    /// The kernel program's configuration for this agent whose listeners
    /// are bound to `bound`: the `[ebpf]` section (or its defaults) with the
    /// defaults that depend on the rest of this configuration filled in.
    ///
    /// # Errors
    /// The dotted key and why.
    pub fn ebpf_config(
        &self,
        bound: &[SocketAddr],
    ) -> Result<crate::ebpf::Config, crate::ebpf::SectionError> {
        let section = self.ebpf.clone().unwrap_or_default();
        let (listen, connect) = (self.listen_addrs(), self.connect_addrs());
        section.resolve(&self.ebpf_around(&listen, &connect), bound)
    }

    /// Worker threads to run: the configured number, or one per core.
    #[must_use]
    pub fn worker_count(&self) -> usize {
        self.node.workers.unwrap_or_else(|| {
            std::thread::available_parallelism()
                .map(std::num::NonZero::get)
                .unwrap_or(1)
        })
    }

    /// Tc as a [`Duration`].
    #[must_use]
    pub fn tc(&self) -> Duration {
        Duration::from_secs_f64(self.node.tc_seconds)
    }

    /// Tw as a [`Duration`].
    #[must_use]
    pub fn tw(&self) -> Duration {
        Duration::from_secs_f64(self.node.tw_seconds)
    }

    /// The shutdown drain deadline as a [`Duration`].
    #[must_use]
    pub fn drain(&self) -> Duration {
        Duration::from_secs_f64(self.node.drain_seconds)
    }

    /// The per-request upstream timeout as a [`Duration`].
    #[must_use]
    pub fn request_timeout(&self) -> Duration {
        Duration::from_secs_f64(self.node.request_timeout_seconds)
    }

    /// The capabilities exchange timeout as a [`Duration`].
    #[must_use]
    pub fn cer_timeout(&self) -> Duration {
        Duration::from_secs_f64(self.node.cer_timeout_seconds)
    }
}

/// The configuration `doic-agent demo` runs when no file is given: the agent
/// on 127.0.0.1:3868 in front of two loopback servers.
pub const DEMO_CONFIG: &str = r#"
[node]
origin_host = "agent.example.com"
origin_realm = "example.com"
listen = ["127.0.0.1:3868"]
tw_seconds = 6
tc_seconds = 1

[metrics]
listen = "127.0.0.1:9464"

[[peer]]
host = "server1.example.net"
realm = "example.net"
connect = "127.0.0.1:3869"

[[peer]]
host = "server2.example.net"
realm = "example.net"
connect = "127.0.0.1:3870"

[[route]]
realm = "example.net"
peers = ["server1.example.net", "server2.example.net"]

[accept]
hosts = ["*.example.org"]
"#;

#[cfg(test)]
mod tests {
    use super::*;

    pub(super) fn parse(s: &str) -> Result<Config, ConfigError> {
        Config::from_str_named(s, Path::new("t.toml"))
    }

    #[test]
    fn the_documented_example_parses_with_defaults() {
        let c = parse(DEMO_CONFIG).unwrap();
        assert_eq!(c.node.origin_host, "agent.example.com");
        assert_eq!(c.peers.len(), 2);
        assert_eq!(c.routes[0].peers[1].parts(), ("server2.example.net", 0, 1));
        assert_eq!(c.node.applications, vec![diameter::dictionary::app::RELAY]);
        assert_eq!(c.tw(), Duration::from_secs(6));
        assert_eq!(c.request_timeout(), Duration::from_secs(10));
        assert_eq!(
            c.metrics.unwrap().listen,
            "127.0.0.1:9464".parse::<SocketAddr>().unwrap()
        );
    }

    #[test]
    fn weighted_route_peers_parse() {
        let c = parse(
            r#"[node]
origin_host = "a.example.com"
origin_realm = "example.com"
listen = ["127.0.0.1:3868"]
[[peer]]
host = "s.example.net"
realm = "example.net"
[[route]]
realm = "example.net"
application = 4
peers = [{ host = "s.example.net", priority = 2, weight = 5 }]
"#,
        )
        .unwrap();
        assert_eq!(c.routes[0].peers[0].parts(), ("s.example.net", 2, 5));
        assert_eq!(c.routes[0].application, Some(4));
    }

    #[test]
    fn unknown_key_is_named() {
        let e = parse("[node]\norigin_host = \"a.b\"\norigin_realm = \"b\"\nlisten_on = []\n")
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("t.toml: "), "{e}");
        assert!(e.contains("listen_on"), "{e}");
        let e = parse("[node]\norigin_host = \"a.b\"\norigin_realm = \"b\"\nlisten = [\"x\"]\n")
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("t.toml: node.listen (line 4, column 11): "),
            "{e}"
        );
        assert!(e.contains("socket address"), "{e}");
    }

    #[test]
    fn retry_budget_has_safe_defaults_and_bad_values_are_refused() {
        let c = parse(DEMO_CONFIG).unwrap();
        assert_eq!(c.retry, RetryConfig::default());
        assert!((c.retry.budget_percent - 10.0).abs() < f64::EPSILON);
        let e = parse(
            "[node]\norigin_host = \"a.b\"\norigin_realm = \"b\"\n[retry]\nbudget_percent = 150\n",
        )
        .unwrap_err()
        .to_string();
        assert_eq!(
            e,
            "t.toml: retry.budget_percent: 150 is not a percentage in [0, 100]"
        );
        let e = parse("[node]\norigin_host = \"a.b\"\norigin_realm = \"b\"\n[retry]\noverloaded_seconds = -1\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("retry.overloaded_seconds"), "{e}");
    }

    #[test]
    fn patterns_match_suffixes_only() {
        assert!(pattern_matches("*.example.org", "client1.example.org"));
        assert!(pattern_matches("*.example.org", "CLIENT1.Example.ORG"));
        assert!(!pattern_matches("*.example.org", "example.org"));
        assert!(!pattern_matches(
            "*.example.org",
            "client1.example.org.evil"
        ));
        assert!(pattern_matches("a.example.org", "a.example.org"));
        assert!(!pattern_matches("a.example.org", "b.example.org"));
    }
}
