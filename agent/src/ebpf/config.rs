//! The `[ebpf]` section of the agent's configuration: where the kernel
//! telemetry program attaches, which TCP ports carry Diameter (RFC 6733 §2.1:
//! 3868 by default) and the optional SYN guard. [`Section`] is the section
//! as written (every key optional; `crate::config` gathers it);
//! [`Section::resolve`] fills the defaults that depend on the rest of the
//! agent's configuration and gives the loader's [`Config`].
//!
//! ```toml
//! [ebpf]
//! interfaces = ["lo"]      # default
//! mode = "auto"            # default; "auto" | "xdp-native" | "xdp-generic" | "tc" | "off"
//! egress = true            # default: also count the packets and bytes the host sends (TC egress)
//! ports = [3868]           # default: the agent's listen ports and its peers' ports
//! syn_guard = false        # default; drop SYNs to the ports from sources not in syn_allow
//! syn_allow = ["10.0.0.0/8", "2001:db8::/32", "192.0.2.7"]  # default with syn_guard: the [[peer]] connect addresses
//! ```

use std::fmt;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// The `[ebpf]` section as written: every key optional. [`Section::resolve`]
/// fills the defaults that depend on the rest of the configuration.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Section {
    /// Interfaces to attach to; default `["lo"]`.
    pub interfaces: Option<Vec<String>>,
    /// Attach mode; default `auto`.
    pub mode: Option<Mode>,
    /// Count sent traffic too (TC egress); default true.
    pub egress: Option<bool>,
    /// Diameter TCP ports; default the agent's listen ports and the ports of
    /// its `[[peer]]` connect addresses.
    pub ports: Option<Vec<u16>>,
    /// Drop SYNs from sources outside `syn_allow`; default false.
    #[serde(default)]
    pub syn_guard: bool,
    /// Sources allowed to connect with `syn_guard`; default the `[[peer]]`
    /// connect addresses.
    pub syn_allow: Option<Vec<Prefix>>,
}

/// What the defaults of a [`Section`] depend on in the rest of the agent's
/// configuration.
#[derive(Debug, Clone, Copy)]
pub struct Around<'a> {
    /// The listen addresses as configured (port 0: bound at start).
    pub listen: &'a [SocketAddr],
    /// The `[[peer]]` connect addresses.
    pub connect: &'a [SocketAddr],
    /// Whether `[accept]` admits peers by name (from any address).
    pub accept_by_name: bool,
}

/// An `[ebpf]` value that cannot work, as `check-config` prints it.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
#[error("{key}: {why}")]
pub struct SectionError {
    /// The dotted key.
    pub key: String,
    /// Why.
    pub why: String,
}

impl Section {
    /// The loader's configuration for an agent configured `around` whose
    /// listeners are bound to `bound` (the bound ports replace port 0).
    ///
    /// # Errors
    ///
    /// The dotted key and why, as `check-config` prints them.
    pub fn resolve(
        &self,
        around: &Around<'_>,
        bound: &[SocketAddr],
    ) -> Result<Config, SectionError> {
        let base = Config::default();
        let known = |addrs: &mut dyn Iterator<Item = &SocketAddr>| {
            let mut p: Vec<u16> = addrs.map(SocketAddr::port).filter(|&p| p != 0).collect();
            p.sort_unstable();
            p.dedup();
            p
        };
        let (ports, sides) = match &self.ports {
            Some(p) => (p.clone(), None),
            None => {
                let sides = Sides {
                    agent: known(&mut bound.iter().chain(around.listen)),
                    peers: known(&mut around.connect.iter()),
                };
                let mut p = [sides.agent.as_slice(), &sides.peers].concat();
                p.sort_unstable();
                p.dedup();
                (p, Some(sides))
            }
        };
        let syn_allow = match &self.syn_allow {
            Some(a) => a.clone(),
            None if self.syn_guard => {
                if around.accept_by_name {
                    return Err(SectionError {
                        key: "ebpf.syn_allow".into(),
                        why: "must list the sources of the peers [accept] admits by name (syn_guard is on and they may connect from any address)".into(),
                    });
                }
                let mut a: Vec<Prefix> = around
                    .connect
                    .iter()
                    .map(|s| Prefix {
                        addr: s.ip(),
                        len: if s.is_ipv4() { 32 } else { 128 },
                    })
                    .collect();
                a.dedup();
                a
            }
            None => Vec::new(),
        };
        let cfg = Config {
            interfaces: self.interfaces.clone().unwrap_or(base.interfaces),
            mode: self.mode.unwrap_or(base.mode),
            egress: self.egress.unwrap_or(base.egress),
            ports,
            sides,
            syn_guard: self.syn_guard,
            syn_allow,
        };
        cfg.validate().map_err(|e| explain(&e, self))?;
        Ok(cfg)
    }

    /// Checks the section against the rest of the configuration before
    /// anything is bound (listen port 0 counts as a port to be bound).
    ///
    /// # Errors
    ///
    /// The dotted key and why.
    pub fn check(&self, around: &Around<'_>) -> Result<(), SectionError> {
        let unbound = around.listen.iter().any(|a| a.port() == 0);
        match self.resolve(around, &[]) {
            Err(e) if e.key == "ebpf.ports" && unbound && self.ports.is_none() => Ok(()),
            other => other.map(|_| ()),
        }
    }
}

/// A loader configuration error as a key and a reason.
fn explain(e: &ConfigError, section: &Section) -> SectionError {
    let (key, why) = match e {
        ConfigError::NoInterfaces => ("ebpf.interfaces", "must name at least one interface".into()),
        ConfigError::BadInterface { name } => (
            "ebpf.interfaces",
            format!("{name:?} is not an interface name (1 to 15 bytes, no '/', space or NUL)"),
        ),
        ConfigError::NoPorts if section.ports.is_none() => (
            "ebpf.ports",
            "no Diameter port to count: set ebpf.ports, or node.listen or a [[peer]] connect address".into(),
        ),
        ConfigError::NoPorts => ("ebpf.ports", "must name at least one port".into()),
        ConfigError::PortZero => ("ebpf.ports", "port 0 is not a valid port".into()),
        ConfigError::EmptyAllowList => (
            "ebpf.syn_allow",
            "is empty while syn_guard is on: every connection attempt would be dropped (list the peers' sources, or give [[peer]] connect addresses)".into(),
        ),
    };
    SectionError {
        key: key.into(),
        why,
    }
}

/// How the program is attached to each interface.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// Native XDP, else TC ingress (where XDP cannot serve, e.g. `lo` or a
    /// NIC without native XDP; generic XDP costs more there).
    #[default]
    Auto,
    /// Native (driver) XDP only; fail where the driver lacks it.
    XdpNative,
    /// Generic (SKB) XDP only.
    XdpGeneric,
    /// TC ingress classifier (TCX on kernels >= 6.6).
    Tc,
    /// Do not load the program.
    Off,
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Mode::Auto => "auto",
            Mode::XdpNative => "xdp-native",
            Mode::XdpGeneric => "xdp-generic",
            Mode::Tc => "tc",
            Mode::Off => "off",
        })
    }
}

/// The loader's configuration, as [`Section::resolve`] gives it for the
/// agent (tools that load the program alone parse it directly). Every field
/// has a default, so an empty one means: count on `lo`, port 3868, no SYN
/// guard.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Interfaces to attach to, by name.
    pub interfaces: Vec<String>,
    /// Attach mode for ingress.
    pub mode: Mode,
    /// Also attach a TC egress classifier, to count the packets and bytes
    /// sent to peers (the agent counts the messages it sends itself).
    pub egress: bool,
    /// TCP ports that carry Diameter (either end of a connection).
    pub ports: Vec<u16>,
    /// Which end listens on each of `ports`, where the agent knows it (its
    /// listeners, its peers' connect addresses): the program counts the
    /// messages of the segments that arrive at the agent, to a port it
    /// listens on or from one a peer listens on. `None` (ports given by
    /// hand): any end may listen on any of them.
    #[serde(skip)]
    pub sides: Option<Sides>,
    /// Drop TCP SYNs to `ports` from sources not in `syn_allow`.
    pub syn_guard: bool,
    /// Sources (addresses or prefixes) allowed to connect when `syn_guard` is on.
    pub syn_allow: Vec<Prefix>,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            interfaces: vec!["lo".to_owned()],
            mode: Mode::Auto,
            egress: true,
            ports: vec![3868],
            sides: None,
            syn_guard: false,
            syn_allow: Vec::new(),
        }
    }
}

/// The ports of [`Config::ports`] by the end that listens on them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Sides {
    /// Ports the agent listens on.
    pub agent: Vec<u16>,
    /// Ports the agent's peers listen on (it connects to them).
    pub peers: Vec<u16>,
}

impl Config {
    /// Each port with its roles in the kernel's port bitmap
    /// (`agent_ebpf_common::PORT_LISTEN`, `PORT_PEER`).
    #[must_use]
    pub fn port_roles(&self) -> Vec<(u16, u64)> {
        use agent_ebpf_common::{PORT_LISTEN, PORT_PEER};
        self.ports
            .iter()
            .map(|&port| {
                let roles = match &self.sides {
                    None => PORT_LISTEN | PORT_PEER,
                    Some(s) => {
                        let has = |l: &[u16], role| if l.contains(&port) { role } else { 0 };
                        has(&s.agent, PORT_LISTEN) | has(&s.peers, PORT_PEER)
                    }
                };
                (port, roles)
            })
            .collect()
    }
}

/// A configuration value that cannot work.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ConfigError {
    /// No interface to attach to.
    #[error("ebpf.interfaces is empty")]
    NoInterfaces,
    /// An interface name the kernel cannot hold.
    #[error("ebpf.interfaces: invalid interface name {name:?}")]
    BadInterface {
        /// The name as configured.
        name: String,
    },
    /// No Diameter port.
    #[error("ebpf.ports is empty")]
    NoPorts,
    /// Port 0 cannot carry a connection.
    #[error("ebpf.ports: port 0 is not a valid port")]
    PortZero,
    /// The guard would refuse every connection.
    #[error(
        "ebpf.syn_guard is on but ebpf.syn_allow is empty: every connection attempt would be dropped"
    )]
    EmptyAllowList,
}

impl Config {
    /// Checks the values the types cannot.
    ///
    /// # Errors
    ///
    /// The first [`ConfigError`] found. A config with `mode = "off"` is always
    /// valid.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.mode == Mode::Off {
            return Ok(());
        }
        if self.interfaces.is_empty() {
            return Err(ConfigError::NoInterfaces);
        }
        if let Some(bad) = self
            .interfaces
            .iter()
            .find(|n| n.is_empty() || n.len() >= 16 || n.contains(['/', ' ', '\0']))
        {
            return Err(ConfigError::BadInterface { name: bad.clone() });
        }
        if self.ports.is_empty() {
            return Err(ConfigError::NoPorts);
        }
        if self.ports.contains(&0) {
            return Err(ConfigError::PortZero);
        }
        if self.syn_guard && self.syn_allow.is_empty() {
            return Err(ConfigError::EmptyAllowList);
        }
        Ok(())
    }
}

/// An address prefix such as `10.0.0.0/8` or `2001:db8::/32`; a bare address
/// means a single host.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Prefix {
    /// The address (bits past the prefix length are ignored).
    pub addr: IpAddr,
    /// Prefix length: 0..=32 for IPv4, 0..=128 for IPv6.
    pub len: u8,
}

impl Prefix {
    /// The prefix as the kernel trie stores it: IPv4 becomes IPv4-mapped IPv6
    /// (`::ffff:a.b.c.d`) with 96 added to the length.
    #[must_use]
    pub fn to_mapped(&self) -> ([u8; 16], u32) {
        match self.addr {
            IpAddr::V4(v4) => (v4.to_ipv6_mapped().octets(), u32::from(self.len) + 96),
            IpAddr::V6(v6) => (v6.octets(), u32::from(self.len)),
        }
    }
}

/// A prefix that does not parse.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("invalid address prefix {text:?}: expected ADDRESS or ADDRESS/LENGTH")]
pub struct PrefixError {
    text: String,
}

impl FromStr for Prefix {
    type Err = PrefixError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = || PrefixError { text: s.to_owned() };
        let (addr, len) = match s.split_once('/') {
            Some((a, l)) => (a, Some(l)),
            None => (s, None),
        };
        let addr: IpAddr = addr.parse().map_err(|_| err())?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let len = match len {
            Some(l) => l.parse::<u8>().map_err(|_| err())?,
            None => max,
        };
        if len > max {
            return Err(err());
        }
        Ok(Prefix { addr, len })
    }
}

impl fmt::Display for Prefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.len)
    }
}

impl Serialize for Prefix {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Prefix {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// Maps a kernel key address back to an [`IpAddr`]: IPv4-mapped addresses of
/// family 4 become IPv4.
#[must_use]
pub fn addr_from_key(addr: [u8; 16], family: u8) -> IpAddr {
    let v6 = Ipv6Addr::from(addr);
    match (family, v6.to_ipv4_mapped()) {
        (4, Some(v4)) => IpAddr::V4(v4),
        _ => IpAddr::V6(v6),
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::config::Config as AgentConfig;

    /// An agent configuration: two listeners, one peer to dial.
    fn agent_config(extra: &str) -> AgentConfig {
        let text = format!(
            "[node]\norigin_host = \"agent.example.com\"\norigin_realm = \"example.com\"\nlisten = [\"127.0.0.1:3868\", \"[::1]:3870\"]\n[[peer]]\nhost = \"s.example.net\"\nrealm = \"example.net\"\nconnect = \"192.0.2.7:3869\"\n{extra}"
        );
        AgentConfig::from_str_named(&text, Path::new("t.toml")).unwrap()
    }

    #[test]
    fn defaults_match_the_documented_section() {
        let c: Config = toml::from_str("").unwrap();
        assert_eq!(c, Config::default());
        assert_eq!(c.interfaces, ["lo"]);
        assert_eq!(c.ports, [3868]);
        assert_eq!(c.mode, Mode::Auto);
        assert!(!c.syn_guard);
        assert!(c.validate().is_ok());
    }

    #[test]
    fn parses_every_field() {
        let c: Config = toml::from_str(
            r#"
            interfaces = ["eth0", "lo"]
            mode = "xdp-generic"
            egress = false
            ports = [3868, 3869]
            syn_guard = true
            syn_allow = ["10.0.0.0/8", "::1", "192.0.2.7"]
            "#,
        )
        .unwrap();
        assert_eq!(c.mode, Mode::XdpGeneric);
        assert!(!c.egress);
        assert_eq!(c.syn_allow[0].len, 8);
        assert_eq!(c.syn_allow[1].len, 128);
        assert_eq!(c.syn_allow[2].len, 32);
        assert!(c.validate().is_ok());
        for (text, mode) in [
            ("auto", Mode::Auto),
            ("xdp-native", Mode::XdpNative),
            ("tc", Mode::Tc),
            ("off", Mode::Off),
        ] {
            let c: Config = toml::from_str(&format!("mode = {text:?}")).unwrap();
            assert_eq!(c.mode, mode);
            assert_eq!(c.mode.to_string(), text);
        }
    }

    #[test]
    fn rejects_bad_values() {
        assert!(toml::from_str::<Config>(r#"mode = "xdp""#).is_err());
        assert!(toml::from_str::<Config>("colour = 1").is_err());
        assert!(toml::from_str::<Config>(r#"syn_allow = ["10.0.0.0/33"]"#).is_err());
        assert!(toml::from_str::<Config>(r#"syn_allow = ["host"]"#).is_err());
        assert!(toml::from_str::<Config>("ports = [70000]").is_err());
        let with = |f: fn(&mut Config)| {
            let mut c = Config::default();
            f(&mut c);
            c.validate()
        };
        assert_eq!(
            with(|c| c.interfaces.clear()),
            Err(ConfigError::NoInterfaces)
        );
        assert!(matches!(
            with(|c| c.interfaces = vec!["a-very-long-ifname".into()]),
            Err(ConfigError::BadInterface { .. })
        ));
        assert_eq!(with(|c| c.ports.clear()), Err(ConfigError::NoPorts));
        assert_eq!(with(|c| c.ports = vec![0]), Err(ConfigError::PortZero));
        assert_eq!(
            with(|c| c.syn_guard = true),
            Err(ConfigError::EmptyAllowList)
        );
        assert_eq!(
            with(|c| {
                c.mode = Mode::Off;
                c.ports.clear();
            }),
            Ok(())
        );
    }

    #[test]
    fn prefixes_map_to_the_kernel_layout() {
        let p: Prefix = "10.1.0.0/16".parse().unwrap();
        let (addr, len) = p.to_mapped();
        assert_eq!(len, 112);
        assert_eq!(&addr[..12], &[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff]);
        assert_eq!(&addr[12..], &[10, 1, 0, 0]);
        let p: Prefix = "2001:db8::/32".parse().unwrap();
        assert_eq!(p.to_mapped().1, 32);
        assert_eq!(p.to_string(), "2001:db8::/32");
        assert_eq!(
            addr_from_key(addr, 4),
            "10.1.0.0".parse::<IpAddr>().unwrap()
        );
        assert_eq!(
            addr_from_key(Ipv6Addr::LOCALHOST.octets(), 6),
            "::1".parse::<IpAddr>().unwrap()
        );
    }

    #[test]
    fn defaults_count_the_listen_and_peer_ports_on_lo() {
        let c = agent_config("");
        let e = c.ebpf_config(&[]).unwrap();
        assert_eq!(e.interfaces, ["lo"]);
        assert_eq!(e.mode, Mode::Auto);
        assert!(!e.syn_guard);
        assert_eq!(e.ports, [3868, 3869, 3870]);
        // The agent listens on 3868 and 3870, its peer on 3869: segments to
        // the first two and from the third arrive at the agent.
        use agent_ebpf_common::{PORT_LISTEN, PORT_PEER};
        assert_eq!(
            e.port_roles(),
            [(3868, PORT_LISTEN), (3869, PORT_PEER), (3870, PORT_LISTEN)]
        );
        // A listener bound to port 0 contributes the port it got.
        let bound: SocketAddr = "127.0.0.1:41000".parse().unwrap();
        let e = c.ebpf_config(&[bound]).unwrap();
        assert!(e.ports.contains(&41000));
        assert!(e.port_roles().contains(&(41000, PORT_LISTEN)));
        // A port both ends listen on has both roles; ports given by hand
        // have both too (which end listens on them is not known).
        let c = agent_config(
            "[[peer]]\nhost = \"t.example.net\"\nrealm = \"example.net\"\nconnect = \"192.0.2.8:3868\"\n",
        );
        let e = c.ebpf_config(&[]).unwrap();
        assert_eq!(e.port_roles()[0], (3868, PORT_LISTEN | PORT_PEER));
        let c = agent_config("[ebpf]\nports = [3869]\n");
        let e = c.ebpf_config(&[]).unwrap();
        assert_eq!(e.port_roles(), [(3869, PORT_LISTEN | PORT_PEER)]);
    }

    #[test]
    fn syn_guard_allows_the_configured_peers_by_default() {
        let c = agent_config("[ebpf]\nsyn_guard = true\n");
        let e = c.ebpf_config(&[]).unwrap();
        assert_eq!(e.syn_allow, ["192.0.2.7/32".parse::<Prefix>().unwrap()]);
    }

    #[test]
    fn check_config_names_the_key_and_the_reason() {
        let text = |extra: &str| {
            format!(
                "[node]\norigin_host = \"agent.example.com\"\norigin_realm = \"example.com\"\n{extra}"
            )
        };
        let err = |extra: &str| {
            AgentConfig::from_str_named(&text(extra), Path::new("t.toml"))
                .unwrap_err()
                .to_string()
        };
        assert_eq!(
            err("[ebpf]\nports = []\n"),
            "t.toml: ebpf.ports: must name at least one port"
        );
        assert!(
            err("[ebpf]\n").starts_with("t.toml: ebpf.ports: no Diameter port to count"),
            "{}",
            err("[ebpf]\n")
        );
        assert!(
            err("listen = [\"127.0.0.1:3868\"]\n[ebpf]\ninterfaces = [\"a/b\"]\n")
                .starts_with("t.toml: ebpf.interfaces: \"a/b\" is not an interface name")
        );
        assert!(
            err("listen = [\"127.0.0.1:3868\"]\n[ebpf]\nsyn_guard = true\n")
                .starts_with("t.toml: ebpf.syn_allow: is empty while syn_guard is on")
        );
        assert!(
            err("listen = [\"127.0.0.1:3868\"]\n[accept]\nhosts = [\"*.example.org\"]\n[ebpf]\nsyn_guard = true\n")
                .starts_with("t.toml: ebpf.syn_allow: must list the sources")
        );
        assert!(
            err("listen = [\"127.0.0.1:3868\"]\n[ebpf]\nmode = \"fast\"\n").contains("fast"),
            "{}",
            err("listen = [\"127.0.0.1:3868\"]\n[ebpf]\nmode = \"fast\"\n")
        );
        // mode = "off" needs nothing; port 0 listeners are filled at start.
        AgentConfig::from_str_named(&text("[ebpf]\nmode = \"off\"\n"), Path::new("t.toml"))
            .unwrap();
        AgentConfig::from_str_named(&text("listen = [\"127.0.0.1:0\"]\n"), Path::new("t.toml"))
            .unwrap();
    }
}
