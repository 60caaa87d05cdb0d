//! freeDiameter 1.2.1 peers on loopback: the `test_app` echo server, a
//! routing agent (`rt_default`, an RFC 6733 §2.8 relay), and the `test_app`
//! benchmark client.
//!
//! Every daemon gets a generated configuration in a private [`RunDir`]:
//! plain TCP (no `TLS_Cred`, `SecPort = 0`, `No_TLS` and `No_SCTP` on
//! every `ConnectPeer`) unless given [`FdTls`] credentials (then TLS/TCP on
//! connect, RFC 6733 §13.1: `TLS_Cred`, `TLS_CA`, the listener on
//! `SecPort`, `ConnectPeer` without `No_TLS`), `TcTimer = 5`, `TwTimer = 30` (settable), incoming peers
//! accepted by `acl_wl` under common test TLDs. freeDiameter 1.2.1 ignores
//! loopback `ListenOn` addresses and binds the wildcard; the `bindlo.so`
//! shim (LD_PRELOAD) turns those binds into loopback binds.
//!
//! Test traffic is `test_app`: vendor-specific application 16777215 (vendor
//! 999999), Test-Request/Answer command 16777214 (R, P), Test-AVP 16777215
//! (vendor 999999, Integer32) echoed by the server; success is 2001.
//!
//! A `ConnectPeer` name must equal the Origin-Host of the peer's CEA
//! (RFC 6733 §5.3 is silent, freeDiameter enforces it), so a
//! [`PeerTarget`] always carries the identity the peer will announce.

use std::fmt::Write as _;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::Error;
use crate::process::{Daemon, RunDir, peers_dir, require};

/// freeDiameter's extension directory on Debian.
pub const EXT_DIR: &str = "/usr/lib/freeDiameter";
/// test_app's vendor-specific application id, from the dictionary.
pub const TEST_APP_ID: u32 = diameter::dictionary::app::FD_TEST;
/// test_app's vendor id, from the dictionary.
pub const TEST_VENDOR_ID: u32 = diameter::dictionary::vendor::FD_TEST;
/// test_app's Test-Request/Answer command code, from the dictionary.
pub const TEST_CMD: u32 = diameter::dictionary::cmd::FD_TEST;
/// test_app's Test-AVP code (vendor [`TEST_VENDOR_ID`], Integer32), from
/// the dictionary.
pub const TEST_AVP: u32 = diameter::dictionary::code::fd_test::TEST_AVP;

/// How long a daemon may take to initialise.
const START_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a connection may take to reach STATE_OPEN (one TcTimer + margin).
pub const OPEN_TIMEOUT: Duration = Duration::from_secs(15);
/// Domains acl_wl accepts (it rejects a bare `*`).
const ACL: &str = "*.net *.com *.org *.test *.example *.invalid *.localhost *.localdomain *.local *.lan *.internal";

/// A Diameter peer to connect to: its identity (the Origin-Host it puts in
/// its CEA) and its loopback address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerTarget {
    /// DiameterIdentity the peer announces.
    pub identity: String,
    /// Loopback address and port.
    pub addr: SocketAddr,
}

impl PeerTarget {
    /// A peer on 127.0.0.1.
    #[must_use]
    pub fn loopback(identity: &str, port: u16) -> Self {
        Self {
            identity: identity.to_owned(),
            addr: SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port),
        }
    }

    /// A peer at `addr`, which must be a loopback address.
    ///
    /// # Errors
    /// [`Error::NotLoopback`] otherwise.
    pub fn new(identity: &str, addr: SocketAddr) -> Result<Self, Error> {
        if !addr.ip().is_loopback() {
            return Err(Error::NotLoopback(addr.to_string()));
        }
        Ok(Self {
            identity: identity.to_owned(),
            addr,
        })
    }

    /// The `ConnectPeer` line: plain TCP, or TLS on connect with `tls`.
    fn connect_peer_line(&self, tls: bool) -> String {
        format!(
            "ConnectPeer = \"{}\" {{ ConnectTo = \"{}\"; Port = {}; {}No_SCTP; }};\n",
            self.identity,
            self.addr.ip(),
            self.addr.port(),
            if tls { "" } else { "No_TLS; " }
        )
    }
}

/// TLS credentials of a freeDiameter peer (RFC 6733 §13): its certificate
/// and key (`TLS_Cred`) and the CA it trusts (`TLS_CA`), PEM files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FdTls {
    /// The peer's certificate.
    pub cert: PathBuf,
    /// Its private key.
    pub key: PathBuf,
    /// The CA its peers' certificates must chain to.
    pub ca: PathBuf,
}

/// Paths of the freeDiameter artefacts, checked once per start.
struct Artefacts {
    test_app: PathBuf,
    shim: PathBuf,
}

fn artefacts() -> Result<Artefacts, Error> {
    let hint = "run `cargo xtask test --only interop` to install the peers";
    require(std::path::Path::new("/usr/bin/freeDiameterd"), hint)?;
    let ext = peers_dir().join("ext");
    let a = Artefacts {
        test_app: ext.join("test_app.fdx"),
        shim: ext.join("bindlo.so"),
    };
    require(&a.test_app, hint)?;
    require(&a.shim, hint)?;
    Ok(a)
}

/// Where a daemon listens: `Port` for TCP, or `SecPort` for TLS/TCP with
/// its credentials (port 0: nowhere).
#[derive(Clone, Copy)]
enum Listen<'a> {
    Tcp(u16),
    Tls(u16, &'a FdTls),
}

impl<'a> Listen<'a> {
    fn new(port: u16, tls: Option<&'a FdTls>) -> Self {
        tls.map_or(Listen::Tcp(port), |t| Listen::Tls(port, t))
    }

    fn port(self) -> u16 {
        match self {
            Listen::Tcp(p) | Listen::Tls(p, _) => p,
        }
    }
}

/// The settings every daemon shares.
fn common_conf(identity: &str, realm: &str, on: Listen<'_>, threads: u32, tw: u32) -> String {
    let mut c = String::new();
    let _ = writeln!(c, "Identity = \"{identity}\";");
    let _ = writeln!(c, "Realm = \"{realm}\";");
    match on {
        Listen::Tcp(port) => {
            let _ = writeln!(c, "Port = {port};\nSecPort = 0;");
        }
        Listen::Tls(port, t) => {
            let _ = writeln!(c, "Port = 0;\nSecPort = {port};");
            let _ = writeln!(
                c,
                "TLS_Cred = \"{}\", \"{}\";\nTLS_CA = \"{}\";",
                t.cert.display(),
                t.key.display(),
                t.ca.display()
            );
        }
    }
    c.push_str("No_SCTP;\nPrefer_TCP;\nTcTimer = 5;\n");
    let _ = writeln!(c, "TwTimer = {tw};");
    let _ = writeln!(c, "AppServThreads = {threads};");
    if on.port() != 0 {
        c.push_str("ListenOn = \"127.0.0.1\";\n");
    }
    c
}

/// Appends a `LoadExtension` line: the extension `ext` with its
/// configuration file `conf`.
fn load_extension(c: &mut String, ext: impl std::fmt::Display, conf: &Path) {
    let _ = writeln!(c, "LoadExtension = \"{ext}\" : \"{}\";", conf.display());
}

/// Writes the `acl_wl` whitelist (the loopback peers) into `dir` and loads
/// it.
fn load_acl(c: &mut String, dir: &RunDir) -> Result<(), Error> {
    let conf = dir.write("acl_wl.conf", &format!("ALLOW_IPSEC {ACL}\n"))?;
    load_extension(c, format_args!("{EXT_DIR}/acl_wl.fdx"), &conf);
    Ok(())
}

/// A running freeDiameter daemon (server or relay). Dropping it stops it.
#[derive(Debug)]
pub struct FdNode {
    daemon: Daemon,
    identity: String,
    realm: String,
    port: u16,
    // Declared last: the directory outlives the daemon that writes into it.
    dir: RunDir,
}

impl FdNode {
    fn start(
        role: &str,
        identity: &str,
        realm: &str,
        port: u16,
        conf: &str,
        dir: RunDir,
    ) -> Result<Self, Error> {
        let a = artefacts()?;
        let conf_path = dir.write(&format!("{role}.conf"), conf)?;
        let mut cmd = Command::new("freeDiameterd");
        cmd.arg("-c")
            .arg(&conf_path)
            .env("LD_PRELOAD", &a.shim)
            .env("DOIC_BIND_V4", "127.0.0.1")
            .env("DOIC_BIND_V6", "::1");
        let daemon =
            dir.spawn_ready(role, cmd, "freeDiameterd daemon initialized", START_TIMEOUT)?;
        Ok(Self {
            daemon,
            identity: identity.to_owned(),
            realm: realm.to_owned(),
            port,
            dir,
        })
    }

    /// Where to reach this node (its identity and 127.0.0.1:port).
    #[must_use]
    pub fn target(&self) -> PeerTarget {
        PeerTarget::loopback(&self.identity, self.port)
    }

    /// The node's DiameterIdentity.
    #[must_use]
    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// The node's realm.
    #[must_use]
    pub fn realm(&self) -> &str {
        &self.realm
    }

    /// The listening port on 127.0.0.1 (and ::1).
    #[must_use]
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The run directory (configuration and log).
    #[must_use]
    pub fn dir(&self) -> &std::path::Path {
        self.dir.path()
    }

    /// The process, for signals, logs and a hard kill in fault tests.
    pub fn daemon(&mut self) -> &mut Daemon {
        &mut self.daemon
    }

    /// The last state freeDiameter logged for its connection to `peer`
    /// (e.g. `STATE_OPEN`, `STATE_CLOSED`), if any.
    #[must_use]
    pub fn peer_state(&self, peer: &str) -> Option<String> {
        last_peer_state(&self.daemon.log(), peer)
    }

    /// Waits until the connection to `peer` is `STATE_OPEN`.
    ///
    /// # Errors
    /// [`Error::TimeoutLog`] or [`Error::Exited`].
    pub fn wait_peer_open(&mut self, peer: &str, timeout: Duration) -> Result<(), Error> {
        let what = format!("{peer} to be STATE_OPEN at {}", self.identity);
        let r = crate::process::wait_for(&what, timeout, || {
            self.daemon.ensure_running()?;
            Ok((self.peer_state(peer).as_deref() == Some("STATE_OPEN")).then_some(()))
        });
        r.map_err(|e| match e {
            Error::Timeout { what, after } => Error::TimeoutLog {
                what,
                after,
                log_tail: self.daemon.log_tail(30),
            },
            e => e,
        })
    }
}

/// The last `'<old>' -> '<new>'` state transition logged for `peer`.
fn last_peer_state(log: &str, peer: &str) -> Option<String> {
    let quoted = format!("'{peer}'");
    log.lines()
        .filter(|l| l.contains(&quoted) && l.contains("->"))
        .filter_map(|l| {
            let after = &l[l.rfind("->")? + 2..];
            let s = after.trim().trim_matches(|c| c == '\'' || c == '"');
            let s: String = s
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            s.starts_with("STATE_").then_some(s)
        })
        .next_back()
}

impl Default for PeerTarget {
    fn default() -> Self {
        Self::loopback("", 0)
    }
}

mod client;
mod server;

pub use client::{BenchResult, BenchRun, BenchSpec, FdClient, SingleAnswer};
pub use server::{FdRelay, FdRelayBuilder, FdServer, FdServerBuilder};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_last_state_of_a_peer() {
        let log = "\
20:55:16  NOTI   'STATE_CLOSED'\t-> 'STATE_WAITCNXACK'\t'server1.example.net'
20:55:16  NOTI   'STATE_CLOSED'\t-> 'STATE_OPEN'\t'other.example.net'
20:55:16  NOTI   'STATE_WAITCEA'\t-> 'STATE_OPEN'\t'server1.example.net'
";
        assert_eq!(
            last_peer_state(log, "server1.example.net").as_deref(),
            Some("STATE_OPEN")
        );
        assert_eq!(last_peer_state(log, "nobody.example.net"), None);
        let log = "20:55:19  NOTI   'STATE_CLOSED'\t-> STATE_ZOMBIE (terminated)\t'server1.example.net'\n";
        assert_eq!(
            last_peer_state(log, "server1.example.net").as_deref(),
            Some("STATE_ZOMBIE")
        );
    }

    #[test]
    fn refuses_non_loopback_targets() {
        let a: SocketAddr = "192.0.2.1:3868".parse().unwrap();
        assert!(matches!(
            PeerTarget::new("x.example.net", a),
            Err(Error::NotLoopback(_))
        ));
        let a: SocketAddr = "[::1]:3868".parse().unwrap();
        assert!(PeerTarget::new("x.example.net", a).is_ok());
    }
}
