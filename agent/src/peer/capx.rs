//! RFC 6733 §5.3 capabilities exchange (CER/CEA): what the agent advertises
//! and how it judges what a peer advertises. Codec-independent: the driver
//! fills [`Capabilities`] from the decoded AVPs.

use std::net::IpAddr;

use crate::config::{Config, RELAY_APPLICATION_ID};

/// Result-Code 2001 DIAMETER_SUCCESS (RFC 6733 §7.1.2).
pub const SUCCESS: u32 = 2001;
/// Result-Code 3010 DIAMETER_UNKNOWN_PEER (RFC 6733 §7.1.3).
pub const UNKNOWN_PEER: u32 = 3010;
/// Result-Code 5010 DIAMETER_NO_COMMON_APPLICATION (RFC 6733 §7.1.5).
pub const NO_COMMON_APPLICATION: u32 = 5010;
/// Result-Code 4003 DIAMETER_ELECTION_LOST (RFC 6733 §7.1.4).
pub const ELECTION_LOST: u32 = 4003;

/// The capabilities a node advertises in CER or CEA (RFC 6733 §5.3.1,
/// §5.3.2).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Capabilities {
    /// Origin-Host.
    pub origin_host: String,
    /// Origin-Realm.
    pub origin_realm: String,
    /// Host-IP-Address values.
    pub host_ip_addresses: Vec<IpAddr>,
    /// Vendor-Id.
    pub vendor_id: u32,
    /// Product-Name.
    pub product_name: String,
    /// Firmware-Revision, if sent.
    pub firmware_revision: Option<u32>,
    /// Auth-Application-Id values, including those inside
    /// Vendor-Specific-Application-Id.
    pub auth_applications: Vec<u32>,
    /// Acct-Application-Id values, including those inside
    /// Vendor-Specific-Application-Id.
    pub acct_applications: Vec<u32>,
}

impl Capabilities {
    /// The agent's own capabilities from its configuration; `local_ip` is
    /// the local address of the connection, used when the configuration
    /// lists no Host-IP-Address.
    #[must_use]
    pub fn local(config: &Config, local_ip: IpAddr) -> Self {
        let host_ip_addresses = if config.node.host_ip_addresses.is_empty() {
            vec![local_ip]
        } else {
            config.node.host_ip_addresses.clone()
        };
        Self {
            origin_host: config.node.origin_host.clone(),
            origin_realm: config.node.origin_realm.clone(),
            host_ip_addresses,
            vendor_id: config.node.vendor_id,
            product_name: config.node.product_name.clone(),
            firmware_revision: Some(firmware_revision()),
            auth_applications: config.node.applications.clone(),
            acct_applications: Vec::new(),
        }
    }

    /// True when the node advertises the Relay application (0xffffffff).
    #[must_use]
    pub fn is_relay(&self) -> bool {
        self.auth_applications.contains(&RELAY_APPLICATION_ID)
            || self.acct_applications.contains(&RELAY_APPLICATION_ID)
    }

    /// The application ids both sides support. RFC 6733 §5.3: a node
    /// advertising Relay has common applications with every node, so the
    /// other side's applications are returned then.
    #[must_use]
    pub fn common_applications(&self, other: &Capabilities) -> Vec<u32> {
        let mine: Vec<u32> = self.all_applications().collect();
        let theirs: Vec<u32> = other.all_applications().collect();
        if self.is_relay() {
            return theirs;
        }
        if other.is_relay() {
            return mine;
        }
        mine.into_iter().filter(|a| theirs.contains(a)).collect()
    }

    fn all_applications(&self) -> impl Iterator<Item = u32> + '_ {
        self.auth_applications
            .iter()
            .chain(&self.acct_applications)
            .copied()
    }
}

/// The Firmware-Revision of this build: major * 10000 + minor * 100 + patch.
#[must_use]
pub fn firmware_revision() -> u32 {
    let v = |s: &str| s.parse::<u32>().unwrap_or(0);
    v(env!("CARGO_PKG_VERSION_MAJOR")) * 10_000
        + v(env!("CARGO_PKG_VERSION_MINOR")) * 100
        + v(env!("CARGO_PKG_VERSION_PATCH"))
}

/// The verdict on a received CER.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CerVerdict {
    /// Accept: answer CEA 2001; the common applications.
    Accept(Vec<u32>),
    /// Refuse with this Result-Code in the CEA, then close.
    Refuse(u32),
}

/// Judges a CER (RFC 6733 §5.3): `known` says whether the peer's
/// Origin-Host is in the peer table or matches an accept pattern.
#[must_use]
pub fn judge_cer(local: &Capabilities, remote: &Capabilities, known: bool) -> CerVerdict {
    if !known {
        return CerVerdict::Refuse(UNKNOWN_PEER);
    }
    let common = local.common_applications(remote);
    if common.is_empty() {
        return CerVerdict::Refuse(NO_COMMON_APPLICATION);
    }
    CerVerdict::Accept(common)
}

/// Judges a CEA received by the initiator: success with common
/// applications, or the reason to close.
#[must_use]
pub fn judge_cea(local: &Capabilities, remote: &Capabilities, result_code: u32) -> CerVerdict {
    if result_code != SUCCESS {
        return CerVerdict::Refuse(result_code);
    }
    let common = local.common_applications(remote);
    if common.is_empty() {
        return CerVerdict::Refuse(NO_COMMON_APPLICATION);
    }
    CerVerdict::Accept(common)
}

/// RFC 6733 §5.6.4 election: the node with the higher Origin-Host (compared
/// as octet strings) wins and keeps its initiator connection.
#[must_use]
pub fn local_wins_election(local_host: &str, remote_host: &str) -> bool {
    local_host.as_bytes() > remote_host.as_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caps(apps: &[u32]) -> Capabilities {
        Capabilities {
            origin_host: "x.example.org".into(),
            origin_realm: "example.org".into(),
            auth_applications: apps.to_vec(),
            ..Capabilities::default()
        }
    }

    #[test]
    fn unknown_peer_is_refused_with_3010() {
        assert_eq!(
            judge_cer(&caps(&[RELAY_APPLICATION_ID]), &caps(&[4]), false),
            CerVerdict::Refuse(3010)
        );
    }

    #[test]
    fn relay_has_common_applications_with_everyone() {
        assert_eq!(
            judge_cer(&caps(&[RELAY_APPLICATION_ID]), &caps(&[16777215]), true),
            CerVerdict::Accept(vec![16777215])
        );
        assert_eq!(
            judge_cer(&caps(&[4]), &caps(&[RELAY_APPLICATION_ID]), true),
            CerVerdict::Accept(vec![4])
        );
    }

    #[test]
    fn disjoint_applications_are_refused_with_5010() {
        assert_eq!(
            judge_cer(&caps(&[4]), &caps(&[16777215]), true),
            CerVerdict::Refuse(5010)
        );
        assert_eq!(
            judge_cer(&caps(&[4, 5]), &caps(&[5]), true),
            CerVerdict::Accept(vec![5])
        );
        let mut acct = caps(&[]);
        acct.acct_applications = vec![3];
        assert_eq!(
            judge_cer(&caps(&[3]), &acct, true),
            CerVerdict::Accept(vec![3])
        );
    }

    #[test]
    fn cea_failure_code_is_passed_on() {
        assert_eq!(
            judge_cea(&caps(&[4]), &caps(&[4]), 3010),
            CerVerdict::Refuse(3010)
        );
        assert_eq!(
            judge_cea(&caps(&[4]), &caps(&[4]), 2001),
            CerVerdict::Accept(vec![4])
        );
    }

    #[test]
    fn election_compares_origin_hosts_as_octets() {
        assert!(local_wins_election("b.example.com", "a.example.com"));
        assert!(!local_wins_election("a.example.com", "b.example.com"));
    }

    #[test]
    fn firmware_revision_encodes_the_package_version() {
        assert_eq!(firmware_revision(), 100); // 0.1.0
    }
}
