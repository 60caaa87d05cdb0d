//! The `[ebpf]` section of the agent's configuration: where the kernel
//! telemetry program attaches, which TCP ports carry Diameter (RFC 6733 §2.1:
//! 3868 by default) and the optional SYN guard.
//!
//! ```toml
//! [ebpf]
//! interfaces = ["lo"]
//! mode = "auto"            # "auto" | "xdp-native" | "xdp-generic" | "tc" | "off"
//! egress = true            # also count what the host sends (TC egress)
//! ports = [3868]
//! syn_guard = false        # drop SYNs to the ports from sources not in syn_allow
//! syn_allow = ["10.0.0.0/8", "2001:db8::/32", "192.0.2.7"]
//! ```

use std::fmt;
use std::net::{IpAddr, Ipv6Addr};
use std::str::FromStr;

use serde::{Deserialize, Serialize};

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

/// The `[ebpf]` configuration section. Every field has a default, so an empty
/// section (or none) means: count on `lo`, port 3868, no SYN guard.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Interfaces to attach to, by name.
    pub interfaces: Vec<String>,
    /// Attach mode for ingress.
    pub mode: Mode,
    /// Also attach a TC egress classifier, to count traffic sent to peers.
    pub egress: bool,
    /// TCP ports that carry Diameter (either end of a connection).
    pub ports: Vec<u16>,
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
            syn_guard: false,
            syn_allow: Vec::new(),
        }
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
    use super::*;

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
}
