//! Kernel telemetry inside the running agent: the `[ebpf]` section of the
//! agent's configuration, the program's life with the agent (attached at
//! start, detached at exit), and what the control thread does with its
//! counters every tick. The counters measure the load offered to the agent
//! per peer, before any userspace work (RFC 7068 §3.1: the load a node
//! receives; RFC 8582 §5: per-peer rates), over RFC 6733 §2.1 TCP transport.
//!
//! The seam to the overload logic is [`KernelLoad`]: the control thread
//! writes it once per tick ([`Kernel::handle_tick`]) and the DOIC control
//! logic reads it ([`Kernel::load`]): per-peer arrival rates of Diameter
//! requests, measured in the kernel.
//!
//! ```toml
//! [ebpf]
//! interfaces = ["lo"]   # default
//! mode = "auto"         # default; "off" loads nothing
//! egress = true         # default: count what the agent sends too
//! ports = [3868]        # default: the agent's listen ports and its peers' ports
//! syn_guard = false     # default
//! syn_allow = []        # default with syn_guard: the [[peer]] connect addresses
//! ```

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::{Duration, Instant};

use serde::Deserialize;
use tracing::{debug, info, warn};

use crate::config::Config;
use crate::ebpf::{
    self, ConfigError, Direction, GlobalCounters, Mode, PeerCounters, PeerRate, Prefix, RateMeter,
    Telemetry,
};

/// How long a closed connection's counters stay in the kernel table after
/// the close: the last segments (FIN, final ACKs) arrive after the socket
/// is gone and would otherwise create the entry again.
pub const FORGET_GRACE: Duration = Duration::from_secs(2);

/// The `[ebpf]` section as written: every key optional. [`Section::resolve`]
/// fills the defaults that depend on the rest of the configuration.
#[derive(Debug, Clone, Default, Deserialize)]
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

impl Section {
    /// The loader's configuration for an agent configured by `config` whose
    /// listeners are bound to `bound` (the bound ports replace port 0).
    ///
    /// # Errors
    ///
    /// The dotted key and why, as `check-config` prints them.
    pub fn resolve(
        &self,
        config: &Config,
        bound: &[SocketAddr],
    ) -> Result<ebpf::Config, (String, String)> {
        let base = ebpf::Config::default();
        let ports = match &self.ports {
            Some(p) => p.clone(),
            None => {
                let mut p: Vec<u16> = bound
                    .iter()
                    .chain(&config.node.listen)
                    .chain(config.peers.iter().filter_map(|p| p.connect.as_ref()))
                    .map(SocketAddr::port)
                    .filter(|&p| p != 0)
                    .collect();
                p.sort_unstable();
                p.dedup();
                p
            }
        };
        let syn_allow = match &self.syn_allow {
            Some(a) => a.clone(),
            None if self.syn_guard => {
                if !config.accept.hosts.is_empty() {
                    return Err((
                        "ebpf.syn_allow".into(),
                        "must list the sources of the peers [accept] admits by name (syn_guard is on and they may connect from any address)".into(),
                    ));
                }
                let mut a: Vec<Prefix> = config
                    .peers
                    .iter()
                    .filter_map(|p| p.connect)
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
        let cfg = ebpf::Config {
            interfaces: self.interfaces.clone().unwrap_or(base.interfaces),
            mode: self.mode.unwrap_or(base.mode),
            egress: self.egress.unwrap_or(base.egress),
            ports,
            syn_guard: self.syn_guard,
            syn_allow,
        };
        cfg.validate().map_err(|e| explain(&e, self))?;
        Ok(cfg)
    }

    /// Checks the section against the rest of `config` before anything is
    /// bound (listen port 0 counts as a port to be bound).
    ///
    /// # Errors
    ///
    /// The dotted key and why.
    pub fn check(&self, config: &Config) -> Result<(), (String, String)> {
        let unbound = config.node.listen.iter().any(|a| a.port() == 0);
        match self.resolve(config, &[]) {
            Err((key, _)) if key == "ebpf.ports" && unbound && self.ports.is_none() => Ok(()),
            other => other.map(|_| ()),
        }
    }
}

/// A loader configuration error as a key and a reason.
fn explain(e: &ConfigError, section: &Section) -> (String, String) {
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
    (key.into(), why)
}

/// What the kernel measured over the last tick: the seam between the
/// control thread (which writes it) and the overload control logic (which
/// reads it). Empty when the program is not attached.
#[derive(Clone, Debug, Default)]
pub struct KernelLoad {
    /// When the counters behind these rates were read.
    pub at: Option<Instant>,
    /// Per-peer rates over the last tick, both directions, sorted by peer.
    pub rates: Vec<PeerRate>,
}

impl KernelLoad {
    /// Diameter requests per second received from `peer` (the remote
    /// address of a connection, as `TcpStream::peer_addr` gives it), or
    /// `None` when the kernel saw nothing from it in the last tick's window.
    #[must_use]
    pub fn arrival_rate(&self, peer: SocketAddr) -> Option<f64> {
        self.rates
            .iter()
            .find(|r| r.peer == peer && r.direction == Direction::FromPeer)
            .map(|r| r.requests)
    }

    /// Requests per second received, per peer address.
    pub fn arrival_rates(&self) -> impl Iterator<Item = (SocketAddr, f64)> + '_ {
        self.rates
            .iter()
            .filter(|r| r.direction == Direction::FromPeer)
            .map(|r| (r.peer, r.requests))
    }

    /// Requests per second received from all peers together.
    #[must_use]
    pub fn total_arrival_rate(&self) -> f64 {
        self.arrival_rates().map(|(_, r)| r).sum()
    }
}

/// The last read of the kernel counters, for `/metrics`.
#[derive(Debug, Default)]
struct View {
    peers: Vec<PeerCounters>,
    global: Option<GlobalCounters>,
}

/// The attached program and what the control thread keeps between ticks.
#[derive(Debug)]
struct Attached {
    telemetry: Telemetry,
    meter: RateMeter,
    /// Closed peers and when their entries may go.
    forget: HashMap<SocketAddr, Instant>,
}

/// Kernel telemetry as the running agent holds it: the attached program (or
/// none), the last counters read and the rates derived from them. Shared by
/// the control thread (ticks), the connections (opens, closes) and
/// `/metrics`.
#[derive(Debug, Default)]
pub struct Kernel {
    attached: AtomicBool,
    state: Mutex<Option<Attached>>,
    /// Connections opened (true) and closed (false), in order.
    events: Mutex<Vec<(SocketAddr, bool)>>,
    view: RwLock<View>,
    load: RwLock<Arc<KernelLoad>>,
}

impl Kernel {
    /// Takes ownership of a started program (or records that there is
    /// none); the next tick starts reading it.
    pub fn attach(&self, telemetry: Option<Telemetry>) {
        let attached = telemetry.is_some();
        *lock(&self.state) = telemetry.map(|telemetry| Attached {
            telemetry,
            meter: RateMeter::new(),
            forget: HashMap::new(),
        });
        self.attached.store(attached, Ordering::Relaxed);
    }

    /// Detaches the program from every interface (idempotent). The agent
    /// calls it once its connections are closed.
    pub fn detach(&self) {
        if let Some(a) = lock(&self.state).take() {
            info!(attachments = ?a.telemetry.attachments(), "kernel telemetry detached");
        }
        self.attached.store(false, Ordering::Relaxed);
        *self.view.write().unwrap_or_else(PoisonError::into_inner) = View::default();
        *self.load.write().unwrap_or_else(PoisonError::into_inner) = Arc::default();
    }

    /// True while the program is attached.
    #[must_use]
    pub fn is_attached(&self) -> bool {
        self.attached.load(Ordering::Relaxed)
    }

    /// Records that the connection to `peer` closed: its kernel entries are
    /// removed [`FORGET_GRACE`] later, so the table does not fill.
    pub fn note_closed(&self, peer: SocketAddr) {
        if self.is_attached() {
            lock(&self.events).push((peer, false));
        }
    }

    /// Records that a connection to `peer` opened: a removal still pending
    /// for the same address (an agent redialling a server's `address:port`)
    /// is cancelled, so the new connection keeps its counters.
    pub fn note_open(&self, peer: SocketAddr) {
        if self.is_attached() {
            lock(&self.events).push((peer, true));
        }
    }

    /// The control thread's tick at `now`: reads and sums the per-CPU
    /// counters, turns them into rates for [`Kernel::load`], and forgets the
    /// peers closed at least [`FORGET_GRACE`] ago.
    pub fn handle_tick(&self, now: Instant) {
        let mut state = lock(&self.state);
        let Some(a) = state.as_mut() else {
            return;
        };
        let events = std::mem::take(&mut *lock(&self.events));
        for peer in due_for_removal(&mut a.forget, events, now) {
            match a.telemetry.forget(peer) {
                Ok(n) => debug!(%peer, entries = n, "kernel counters of a closed peer forgotten"),
                Err(e) => warn!(%peer, error = %e, "cannot forget a closed peer's kernel counters"),
            }
        }
        let peers = match a.telemetry.read() {
            Ok(p) => p,
            Err(e) => {
                warn!(error = %e, "cannot read the kernel counters");
                return;
            }
        };
        let global = a.telemetry.global().ok();
        let rates = a.meter.handle_read(now, &peers);
        drop(state);
        *self.view.write().unwrap_or_else(PoisonError::into_inner) = View { peers, global };
        *self.load.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(KernelLoad {
            at: Some(now),
            rates,
        });
    }

    /// The rates of the last tick (empty before the second tick and
    /// without the program).
    #[must_use]
    pub fn load(&self) -> Arc<KernelLoad> {
        self.load
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Appends the kernel metrics (`doic_ebpf_attached`, the per-peer
    /// `doic_kernel_*_total` counters of the last tick) to a `/metrics` page.
    pub fn render(&self, out: &mut String) {
        let view = self.view.read().unwrap_or_else(PoisonError::into_inner);
        ebpf::render_prometheus(out, self.is_attached(), &view.peers, view.global.as_ref());
    }
}

/// Applies connection events in order to the pending removals and returns
/// (and drops from `pending`) the peers whose grace is over at `now`.
fn due_for_removal(
    pending: &mut HashMap<SocketAddr, Instant>,
    events: Vec<(SocketAddr, bool)>,
    now: Instant,
) -> Vec<SocketAddr> {
    for (peer, open) in events {
        if open {
            pending.remove(&peer);
        } else {
            pending.insert(peer, now + FORGET_GRACE);
        }
    }
    let due: Vec<SocketAddr> = pending
        .iter()
        .filter(|(_, at)| **at <= now)
        .map(|(p, _)| *p)
        .collect();
    for p in &due {
        pending.remove(p);
    }
    due
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Starts the kernel telemetry of a started agent as its `[ebpf]` section
/// says (the ports of its bound listeners filled in) and hands it to the
/// control thread. Without the program (no privileges, `mode = "off"`, not
/// built) one line is logged and `doic_ebpf_attached` stays 0. Returns true
/// when the program is attached.
pub fn start(agent: &crate::agent::Agent) -> bool {
    let shared = agent.shared();
    let section = shared.config.ebpf.clone().unwrap_or_default();
    let cfg = match section.resolve(&shared.config, agent.local_addrs()) {
        Ok(c) => c,
        Err((key, why)) => {
            warn!(%key, %why, "kernel telemetry not started");
            return false;
        }
    };
    let telemetry = Telemetry::start_or_log(&cfg);
    if let Some(t) = &telemetry {
        info!(program_ids = ?t.program_ids(), ports = ?cfg.ports, "kernel telemetry started");
    }
    shared.kernel.attach(telemetry);
    shared.kernel.is_attached()
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    fn config(extra: &str) -> Config {
        let text = format!(
            "[node]\norigin_host = \"agent.example.com\"\norigin_realm = \"example.com\"\nlisten = [\"127.0.0.1:3868\", \"[::1]:3870\"]\n[[peer]]\nhost = \"s.example.net\"\nrealm = \"example.net\"\nconnect = \"192.0.2.7:3869\"\n{extra}"
        );
        Config::from_str_named(&text, Path::new("t.toml")).unwrap()
    }

    #[test]
    fn defaults_count_the_listen_and_peer_ports_on_lo() {
        let c = config("");
        let s = Section::default();
        let e = s.resolve(&c, &[]).unwrap();
        assert_eq!(e.interfaces, ["lo"]);
        assert_eq!(e.mode, Mode::Auto);
        assert!(!e.syn_guard);
        assert_eq!(e.ports, [3868, 3869, 3870]);
        // A listener bound to port 0 contributes the port it got.
        let bound: SocketAddr = "127.0.0.1:41000".parse().unwrap();
        let e = s.resolve(&c, &[bound]).unwrap();
        assert!(e.ports.contains(&41000));
    }

    #[test]
    fn syn_guard_allows_the_configured_peers_by_default() {
        let c = config("[ebpf]\nsyn_guard = true\n");
        let e = c.ebpf.as_ref().unwrap().resolve(&c, &[]).unwrap();
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
            Config::from_str_named(&text(extra), Path::new("t.toml"))
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
        Config::from_str_named(&text("[ebpf]\nmode = \"off\"\n"), Path::new("t.toml")).unwrap();
        Config::from_str_named(&text("listen = [\"127.0.0.1:0\"]\n"), Path::new("t.toml")).unwrap();
    }

    #[test]
    fn without_the_program_the_tick_is_a_no_op_and_the_gauge_is_zero() {
        let k = Kernel::default();
        k.attach(None);
        k.note_closed("127.0.0.1:1".parse().unwrap());
        k.handle_tick(Instant::now());
        assert!(k.load().rates.is_empty());
        k.note_open("127.0.0.1:1".parse().unwrap());
        assert!(lock(&k.events).is_empty());
        let mut out = String::new();
        k.render(&mut out);
        assert!(out.contains("\ndoic_ebpf_attached 0\n"), "{out}");
        assert!(!out.contains("doic_kernel_packets_total{"), "{out}");
    }

    #[test]
    fn closed_peers_go_after_the_grace_unless_reopened() {
        let t0 = Instant::now();
        let (a, b, c): (SocketAddr, SocketAddr, SocketAddr) = (
            "127.0.0.1:40000".parse().unwrap(),
            "127.0.0.1:3869".parse().unwrap(),
            "127.0.0.1:40001".parse().unwrap(),
        );
        let mut pending = HashMap::new();
        // a closes; b closes then reopens (a redial); c opens then closes.
        let due = due_for_removal(
            &mut pending,
            vec![(a, false), (b, false), (b, true), (c, true), (c, false)],
            t0,
        );
        assert!(due.is_empty(), "nothing before the grace");
        let just_before = t0 + FORGET_GRACE - Duration::from_millis(1);
        assert!(due_for_removal(&mut pending, Vec::new(), just_before).is_empty());
        let mut due = due_for_removal(&mut pending, Vec::new(), t0 + FORGET_GRACE);
        due.sort();
        assert_eq!(due, [a, c]);
        assert!(pending.is_empty());
    }

    #[test]
    fn the_load_seam_gives_arrival_rates_of_requests_from_each_peer() {
        let a: SocketAddr = "10.0.0.1:5000".parse().unwrap();
        let b: SocketAddr = "[2001:db8::1]:3868".parse().unwrap();
        let rate = |peer, direction, requests| PeerRate {
            peer,
            direction,
            packets: 0.0,
            bytes: 0.0,
            requests,
            answers: 0.0,
            syn: 0.0,
        };
        let load = KernelLoad {
            at: Some(Instant::now()),
            rates: vec![
                rate(a, Direction::FromPeer, 100.0),
                rate(a, Direction::ToPeer, 7.0),
                rate(b, Direction::FromPeer, 50.0),
            ],
        };
        assert_eq!(load.arrival_rate(a), Some(100.0));
        assert_eq!(load.arrival_rate(b), Some(50.0));
        assert_eq!(load.arrival_rate("10.0.0.2:5000".parse().unwrap()), None);
        assert_eq!(load.total_arrival_rate(), 150.0);
    }
}
