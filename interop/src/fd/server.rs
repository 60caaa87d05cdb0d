//! The freeDiameter daemons that listen: the `test_app` echo server and
//! the `rt_default` routing agent (RFC 6733 §2.8 relay), with their
//! generated configurations.

use std::fmt::Write as _;

use super::{ACL, EXT_DIR, FdNode, OPEN_TIMEOUT, PeerTarget, artefacts, common_conf};
use crate::Error;
use crate::process::{RunDir, free_port};

/// Starts the freeDiameter `test_app` echo server (`mode = server`,
/// `NoRelay`): it answers every Test-Request with 2001 and echoes Test-AVP.
#[derive(Debug)]
pub struct FdServer;

impl FdServer {
    /// A builder with the defaults `server1.example.net` / `example.net`.
    #[must_use]
    pub fn builder() -> FdServerBuilder {
        FdServerBuilder {
            identity: "server1.example.net".into(),
            realm: "example.net".into(),
            port: None,
            connect: Vec::new(),
            threads: 4,
            tw: 30,
        }
    }
}

/// Settings of an fD `test_app` server.
#[derive(Debug, Clone)]
pub struct FdServerBuilder {
    identity: String,
    realm: String,
    port: Option<u16>,
    connect: Vec<PeerTarget>,
    threads: u32,
    tw: u32,
}

impl FdServerBuilder {
    /// Sets the DiameterIdentity (default `server1.example.net`).
    #[must_use]
    pub fn identity(mut self, id: &str) -> Self {
        id.clone_into(&mut self.identity);
        self
    }

    /// Sets the realm (default `example.net`).
    #[must_use]
    pub fn realm(mut self, realm: &str) -> Self {
        realm.clone_into(&mut self.realm);
        self
    }

    /// Listens on this port (default: a free port).
    #[must_use]
    pub fn port(mut self, port: u16) -> Self {
        self.port = Some(port);
        self
    }

    /// Also dials out to `peer` (for a peer that does not dial out itself).
    #[must_use]
    pub fn connect_to(mut self, peer: PeerTarget) -> Self {
        self.connect.push(peer);
        self
    }

    /// Number of application threads (default 4).
    #[must_use]
    pub fn threads(mut self, n: u32) -> Self {
        self.threads = n.max(1);
        self
    }

    /// Sets the RFC 3539 watchdog timer Tw in seconds (`TwTimer`, default
    /// 30; freeDiameter enforces at least 6 and adds jitter of up to 2 s).
    #[must_use]
    pub fn watchdog(mut self, secs: u32) -> Self {
        self.tw = secs.max(6);
        self
    }

    /// Writes the configuration and starts the daemon; returns once it is
    /// initialised (listening).
    ///
    /// # Errors
    /// Missing artefacts, spawn failure, or the daemon not initialising.
    pub fn start(self) -> Result<FdNode, Error> {
        let dir = RunDir::new("fd-server")?;
        let port = match self.port {
            Some(p) => p,
            None => free_port()?,
        };
        let ta = artefacts()?.test_app;
        dir.write("acl_wl.conf", &format!("ALLOW_IPSEC {ACL}\n"))?;
        let ta_conf = dir.write("test_app.conf", "mode = server;\nbenchmark;\n")?;
        let mut c = common_conf(&self.identity, &self.realm, port, self.threads, self.tw);
        c.push_str("NoRelay;\n");
        let _ = writeln!(
            c,
            "LoadExtension = \"{EXT_DIR}/acl_wl.fdx\" : \"{}\";",
            dir.path().join("acl_wl.conf").display()
        );
        let _ = writeln!(
            c,
            "LoadExtension = \"{}\" : \"{}\";",
            ta.display(),
            ta_conf.display()
        );
        for p in &self.connect {
            c.push_str(&p.connect_peer_line());
        }
        FdNode::start("fd-server", &self.identity, &self.realm, port, &c, dir)
    }
}

/// Starts a freeDiameter routing agent (`rt_default`): it relays requests
/// for one destination realm to one upstream peer.
#[derive(Debug)]
pub struct FdRelay;

impl FdRelay {
    /// A relay `relay1.example.com` / `example.com` that routes
    /// Destination-Realm `upstream_realm` to `upstream`.
    #[must_use]
    pub fn builder(upstream: PeerTarget, upstream_realm: &str) -> FdRelayBuilder {
        FdRelayBuilder {
            identity: "relay1.example.com".into(),
            realm: "example.com".into(),
            port: None,
            upstream,
            upstream_realm: upstream_realm.to_owned(),
            threads: 4,
            tw: 30,
        }
    }
}

/// Settings of an fD relay.
#[derive(Debug, Clone)]
pub struct FdRelayBuilder {
    identity: String,
    realm: String,
    port: Option<u16>,
    upstream: PeerTarget,
    upstream_realm: String,
    threads: u32,
    tw: u32,
}

impl FdRelayBuilder {
    /// Sets the DiameterIdentity (default `relay1.example.com`).
    #[must_use]
    pub fn identity(mut self, id: &str) -> Self {
        id.clone_into(&mut self.identity);
        self
    }

    /// Sets the realm (default `example.com`).
    #[must_use]
    pub fn realm(mut self, realm: &str) -> Self {
        realm.clone_into(&mut self.realm);
        self
    }

    /// Listens on this port (default: a free port).
    #[must_use]
    pub fn port(mut self, port: u16) -> Self {
        self.port = Some(port);
        self
    }

    /// Number of application threads (default 4).
    #[must_use]
    pub fn threads(mut self, n: u32) -> Self {
        self.threads = n.max(1);
        self
    }

    /// Sets the RFC 3539 watchdog timer Tw in seconds (`TwTimer`, default
    /// 30; freeDiameter enforces at least 6 and adds jitter of up to 2 s).
    #[must_use]
    pub fn watchdog(mut self, secs: u32) -> Self {
        self.tw = secs.max(6);
        self
    }

    /// Starts the relay and waits until its connection to the upstream peer
    /// is open.
    ///
    /// # Errors
    /// Missing artefacts, spawn failure, or no open upstream connection
    /// within [`OPEN_TIMEOUT`].
    pub fn start(self) -> Result<FdNode, Error> {
        let dir = RunDir::new("fd-relay")?;
        let port = match self.port {
            Some(p) => p,
            None => free_port()?,
        };
        dir.write("acl_wl.conf", &format!("ALLOW_IPSEC {ACL}\n"))?;
        let rt = dir.write(
            "rt_default.conf",
            &format!(
                "dr=\"{}\" : \"{}\" += 100 ;\n",
                self.upstream_realm, self.upstream.identity
            ),
        )?;
        let mut c = common_conf(&self.identity, &self.realm, port, self.threads, self.tw);
        let _ = writeln!(
            c,
            "LoadExtension = \"{EXT_DIR}/acl_wl.fdx\" : \"{}\";",
            dir.path().join("acl_wl.conf").display()
        );
        let _ = writeln!(
            c,
            "LoadExtension = \"{EXT_DIR}/rt_default.fdx\" : \"{}\";",
            rt.display()
        );
        c.push_str(&self.upstream.connect_peer_line());
        let mut node = FdNode::start("fd-relay", &self.identity, &self.realm, port, &c, dir)?;
        node.wait_peer_open(&self.upstream.identity, OPEN_TIMEOUT)?;
        Ok(node)
    }
}
