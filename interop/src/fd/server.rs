//! The freeDiameter daemons that listen: the `test_app` echo server and
//! the `rt_default` routing agent (RFC 6733 §2.8 relay), with their
//! generated configurations.
use super::{
    EXT_DIR, FdNode, FdTls, Listen, OPEN_TIMEOUT, PeerTarget, artefacts, common_conf, load_acl,
    load_extension,
};
use crate::Error;
use crate::process::{RunDir, port_or_free};

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
            tls: None,
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
    tls: Option<FdTls>,
}

impl FdServerBuilder {
    setters! {
        /// Sets the DiameterIdentity (default `server1.example.net`).
        identity(id: &str) => identity = id.to_owned();

        /// Sets the realm (default `example.net`).
        realm(realm: &str) => realm = realm.to_owned();

        /// Listens on this port (default: a free port).
        port(port: u16) => port = Some(port);

        /// TLS/TCP with these credentials: the listener on `SecPort`, TLS on
        /// every connection it dials (RFC 6733 §13.1).
        tls(tls: FdTls) => tls = Some(tls);
    }

    /// Also dials out to `peer` (for a peer that does not dial out itself).
    #[must_use]
    pub fn connect_to(mut self, peer: PeerTarget) -> Self {
        self.connect.push(peer);
        self
    }

    setters! {
        /// Number of application threads (default 4).
        threads(n: u32) => threads = n.max(1);

        /// Sets the RFC 3539 watchdog timer Tw in seconds (`TwTimer`, default
        /// 30; freeDiameter enforces at least 6 and adds jitter of up to 2 s).
        watchdog(secs: u32) => tw = secs.max(6);
    }

    /// Writes the configuration and starts the daemon; returns once it is
    /// initialised (listening).
    ///
    /// # Errors
    /// Missing artefacts, spawn failure, or the daemon not initialising.
    pub fn start(self) -> Result<FdNode, Error> {
        let dir = RunDir::new("fd-server")?;
        let port = port_or_free(self.port)?;
        let ta = artefacts()?.test_app;
        let ta_conf = dir.write("test_app.conf", "mode = server;\nbenchmark;\n")?;
        let tls = self.tls.as_ref();
        let on = Listen::new(port, tls);
        let mut c = common_conf(&self.identity, &self.realm, on, self.threads, self.tw);
        c.push_str("NoRelay;\n");
        load_acl(&mut c, &dir)?;
        load_extension(&mut c, ta.display(), &ta_conf);
        for p in &self.connect {
            c.push_str(&p.connect_peer_line(tls.is_some()));
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
    setters! {
        /// Sets the DiameterIdentity (default `relay1.example.com`).
        identity(id: &str) => identity = id.to_owned();

        /// Sets the realm (default `example.com`).
        realm(realm: &str) => realm = realm.to_owned();

        /// Listens on this port (default: a free port).
        port(port: u16) => port = Some(port);

        /// Number of application threads (default 4).
        threads(n: u32) => threads = n.max(1);

        /// Sets the RFC 3539 watchdog timer Tw in seconds (`TwTimer`, default
        /// 30; freeDiameter enforces at least 6 and adds jitter of up to 2 s).
        watchdog(secs: u32) => tw = secs.max(6);
    }

    /// Starts the relay and waits until its connection to the upstream peer
    /// is open.
    ///
    /// # Errors
    /// Missing artefacts, spawn failure, or no open upstream connection
    /// within [`OPEN_TIMEOUT`].
    pub fn start(self) -> Result<FdNode, Error> {
        let dir = RunDir::new("fd-relay")?;
        let port = port_or_free(self.port)?;
        let rt = dir.write(
            "rt_default.conf",
            &format!(
                "dr=\"{}\" : \"{}\" += 100 ;\n",
                self.upstream_realm, self.upstream.identity
            ),
        )?;
        let on = Listen::Tcp(port);
        let mut c = common_conf(&self.identity, &self.realm, on, self.threads, self.tw);
        load_acl(&mut c, &dir)?;
        load_extension(&mut c, format_args!("{EXT_DIR}/rt_default.fdx"), &rt);
        c.push_str(&self.upstream.connect_peer_line(false));
        let mut node = FdNode::start("fd-relay", &self.identity, &self.realm, port, &c, dir)?;
        node.wait_peer_open(&self.upstream.identity, OPEN_TIMEOUT)?;
        Ok(node)
    }
}
