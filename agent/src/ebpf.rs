//! Kernel telemetry: loads the `agent-ebpf` program, attaches it to the
//! configured interfaces and reads its per-peer counters of Diameter traffic
//! (RFC 6733 §2.1 TCP transport, §3 header recognition). The only module that
//! uses aya. [`config`] is the `[ebpf]` section; [`live`] the program's
//! life with a running agent (attach, per-tick reads, detach).
//!
//! The program is optional: when it cannot be loaded (no privileges, no BPF,
//! object not built) [`Telemetry::start`] returns a [`LoadError`], the agent
//! logs one line and exports `doic_ebpf_attached 0`, and everything else keeps
//! working.
//!
//! ```no_run
//! use agent::ebpf::{self, Config, Telemetry};
//!
//! // One log line and `None` when the program cannot run.
//! let telemetry = Telemetry::start_or_log(&Config::default());
//! let mut text = String::new();
//! match &telemetry {
//!     Some(t) => {
//!         let peers = t.read().unwrap_or_default();
//!         let global = t.global().ok();
//!         ebpf::render_prometheus(&mut text, true, &peers, global.as_ref());
//!     }
//!     None => ebpf::render_prometheus(&mut text, false, &[], None),
//! }
//! // Detaches from every interface.
//! drop(telemetry);
//! ```

mod attach;
pub mod config;
mod counters;
pub mod live;
mod log;
mod signals;

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::fmt;
use std::net::{IpAddr, SocketAddr};
#[cfg(feature = "probe")]
use std::os::fd::{AsFd, AsRawFd};
#[cfg(feature = "probe")]
use std::path::Path;

use agent_ebpf_common::{
    FLAG_SYN_GUARD, GLOBAL_INEXACT, GLOBAL_PORT_BITS, GLOBAL_TABLE_FULL, GLOBAL_UNPARSED,
    INEXACT_CAUSES, MAP_CONFIG, MAP_GLOBAL, MAP_PEERS, MAP_PEERS_OUT, MAP_SYN_ALLOW, PORT_WORDS,
    PROG_TC_EGRESS, PeerEntry, PeerKey,
};
#[cfg(feature = "probe")]
use agent_ebpf_common::{
    PROG_TC_INGRESS, PROG_TC_LOOPBACK, PROG_XDP, PROG_XDP_BENCH, PROG_XDP_PASS,
};
use aya::maps::{Array, LpmTrie, MapData, MapError, PerCpuArray, PerCpuHashMap, lpm_trie::Key};
use aya::programs::{ProgramError, TcAttachType};
#[cfg(feature = "probe")]
use aya::programs::{SchedClassifier, Xdp};
use aya::{Ebpf, EbpfError, EbpfLoader};
use tracing::{debug, info, warn};

pub use config::{
    Around, Config, ConfigError, Mode, Prefix, PrefixError, Section, SectionError, Sides,
    addr_from_key,
};
pub use counters::{
    Direction, GlobalCounters, PeerCounters, PeerRate, RateMeter, render_prometheus,
};

/// The object built by `agent/build.rs`; empty when the eBPF toolchain was
/// absent at build time.
static OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/agent-ebpf.o"));

/// True when this binary embeds the kernel program (the eBPF toolchain was
/// present when it was built).
#[must_use]
pub fn program_built() -> bool {
    !OBJECT.is_empty()
}

/// Why the program is not running.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// `mode = "off"`.
    #[error("kernel telemetry is off in the configuration")]
    Disabled,
    /// The configuration cannot work.
    #[error("invalid [ebpf] configuration")]
    Config(#[from] ConfigError),
    /// The binary was built without the eBPF toolchain.
    #[error(
        "program not built (the eBPF toolchain was absent at build time; run `cargo xtask setup`)"
    )]
    NotBuilt,
    /// The kernel refused the object (no privileges, no BPF, verifier).
    #[error("cannot load the kernel program")]
    Load(#[source] EbpfError),
    /// A program the loader expects is missing from the object.
    #[error("program {name} missing from the object")]
    MissingProgram {
        /// The program's name.
        name: &'static str,
    },
    /// The kernel refused one program (verifier, privileges).
    #[error("cannot load program {name}")]
    Program {
        /// The program's name.
        name: &'static str,
        /// What aya reported.
        #[source]
        source: ProgramError,
    },
    /// Attaching to an interface failed in every allowed way.
    #[error("cannot attach {hook} to interface {interface}")]
    Attach {
        /// The interface name.
        interface: String,
        /// The last hook tried.
        hook: Hook,
        /// What aya reported for it.
        #[source]
        source: ProgramError,
    },
    /// A map the loader expects is missing from the object.
    #[error("map {name} missing from the object")]
    MissingMap {
        /// The map's name.
        name: &'static str,
    },
    /// Reading or writing a map failed.
    #[error("map {name}")]
    Map {
        /// The map's name.
        name: &'static str,
        /// What aya reported.
        #[source]
        source: MapError,
    },
    /// The kernel refused a test run.
    #[error("test run of {name} failed")]
    TestRun {
        /// The program's name.
        name: &'static str,
        /// What the kernel reported.
        #[source]
        source: std::io::Error,
    },
    /// Pinning to bpffs failed.
    #[error("cannot pin {what}")]
    Pin {
        /// What was pinned.
        what: String,
        /// What aya reported.
        #[source]
        source: aya::pin::PinError,
    },
}

/// Where one program is attached.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hook {
    /// XDP in the driver.
    XdpNative,
    /// XDP in the generic (SKB) path.
    XdpGeneric,
    /// TC ingress (TCX on kernels >= 6.6).
    TcIngress,
    /// TC egress (TCX on kernels >= 6.6).
    TcEgress,
    /// TC ingress of a loopback interface counting both directions, in
    /// place of TC ingress and TC egress: every segment sent on a loopback
    /// interface arrives on it, so one program run per segment sees it.
    TcLoopback,
}

impl fmt::Display for Hook {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Hook::XdpNative => "xdp-native",
            Hook::XdpGeneric => "xdp-generic",
            Hook::TcIngress => "tc-ingress",
            Hook::TcEgress => "tc-egress",
            Hook::TcLoopback => "tc-loopback",
        })
    }
}

/// One attachment: an interface and a hook.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attachment {
    /// The interface name.
    pub interface: String,
    /// The hook used.
    pub hook: Hook,
}

/// The loaded, attached program and its maps. Dropping it detaches every
/// program and frees the maps.
pub struct Telemetry {
    ebpf: Ebpf,
    attachments: Vec<Attachment>,
    log: log::KernelLog,
}

impl fmt::Debug for Telemetry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Telemetry")
            .field("attachments", &self.attachments)
            .finish_non_exhaustive()
    }
}

impl Telemetry {
    /// Loads the program, fills its configuration maps and attaches it to
    /// every configured interface: ingress per [`Mode`] (in `auto`, native XDP,
    /// else TC ingress), plus TC egress when `egress` is on. On a loopback
    /// interface with `egress` on, TC ingress and egress are one program
    /// ([`Hook::TcLoopback`]).
    /// Attachments are made in the calling thread's network namespace.
    ///
    /// # Errors
    ///
    /// [`LoadError::Disabled`] for `mode = "off"`, [`LoadError::NotBuilt`]
    /// without an embedded object, otherwise the first load, map or attach
    /// failure. Nothing stays attached after an error.
    pub fn start(cfg: &Config) -> Result<Self, LoadError> {
        if cfg.mode == Mode::Off {
            return Err(LoadError::Disabled);
        }
        cfg.validate()?;
        let _held = signals::SignalsHeldOff::new();
        let mut ebpf = load_object(cfg)?;
        write_config(&mut ebpf, cfg)?;
        let log = log::KernelLog::take(&mut ebpf, false);
        let mut attachments = Vec::new();
        for interface in &cfg.interfaces {
            let both = cfg.egress && attach::is_loopback(interface);
            let hook = attach::attach_ingress(&mut ebpf, interface, cfg.mode, both)?;
            attachments.push(Attachment {
                interface: interface.clone(),
                hook,
            });
            if cfg.egress && hook != Hook::TcLoopback {
                attach::attach_tc(&mut ebpf, PROG_TC_EGRESS, interface, TcAttachType::Egress)?;
                attachments.push(Attachment {
                    interface: interface.clone(),
                    hook: Hook::TcEgress,
                });
            }
        }
        info!(attachments = ?attachments, ports = ?cfg.ports, syn_guard = cfg.syn_guard, "kernel telemetry attached");
        Ok(Self {
            ebpf,
            attachments,
            log,
        })
    }

    /// [`Telemetry::start`] for an agent that runs with or without the
    /// program: logs one line saying why there is none (info when `mode =
    /// "off"`, warn otherwise, with the cause chain) and returns `None`; the
    /// caller then exports `doic_ebpf_attached 0`.
    #[must_use]
    pub fn start_or_log(cfg: &Config) -> Option<Self> {
        match Self::start(cfg) {
            Ok(t) => Some(t),
            Err(LoadError::Disabled) => {
                info!("kernel telemetry off (ebpf.mode = \"off\")");
                None
            }
            Err(err) => {
                let mut cause = err.to_string();
                let mut source = std::error::Error::source(&err);
                while let Some(s) = source {
                    cause.push_str(": ");
                    cause.push_str(&s.to_string());
                    source = s.source();
                }
                warn!(%cause, "kernel telemetry unavailable; the agent runs without it");
                None
            }
        }
    }

    /// Where the program is attached.
    #[must_use]
    pub fn attachments(&self) -> &[Attachment] {
        &self.attachments
    }

    /// Kernel ids of the loaded programs (as `bpftool prog show id N` takes
    /// them).
    #[must_use]
    pub fn program_ids(&self) -> Vec<u32> {
        self.ebpf
            .programs()
            .filter_map(|(_, p)| p.info().ok())
            .map(|info| info.id())
            .collect()
    }

    /// Reads every peer's counters, summed over CPUs, in no particular order.
    ///
    /// # Errors
    ///
    /// [`LoadError::Map`] when the kernel refuses the read.
    pub fn read(&self) -> Result<Vec<PeerCounters>, LoadError> {
        read_peers(&self.ebpf)
    }

    /// Reads the counters not tied to a peer.
    ///
    /// # Errors
    ///
    /// [`LoadError::Map`] when the kernel refuses the read.
    pub fn global(&self) -> Result<GlobalCounters, LoadError> {
        read_global(&self.ebpf)
    }

    /// Forwards what the program logged since the last call (what it could
    /// not count) into the agent's tracing.
    pub fn forward_log(&mut self) {
        self.log.drain();
    }

    /// Forgets a peer's counters (both directions), for example once its
    /// connection is closed, so that the table (`MAX_PEERS` entries) does not
    /// fill with old ephemeral ports. Returns how many entries were removed.
    ///
    /// # Errors
    ///
    /// [`LoadError::Map`] when the kernel refuses the removal.
    pub fn forget(&mut self, peer: SocketAddr) -> Result<usize, LoadError> {
        forget_peer(&mut self.ebpf, peer)
    }
}

impl Drop for Telemetry {
    fn drop(&mut self) {
        // aya detaches each link when its program is dropped with `ebpf`.
        debug!(attachments = ?self.attachments, "detaching kernel telemetry");
    }
}

/// The peer maps and the direction each counts.
const PEER_MAPS: [(&str, Direction); 2] = [
    (MAP_PEERS, Direction::FromPeer),
    (MAP_PEERS_OUT, Direction::ToPeer),
];

/// Every peer's counters: each entry's per-CPU values summed, and the flows
/// of a peer (the entries of the segments arriving at the agent) summed
/// into it.
fn read_peers(ebpf: &Ebpf) -> Result<Vec<PeerCounters>, LoadError> {
    let mut out: Vec<PeerCounters> = Vec::new();
    let mut at: HashMap<(SocketAddr, Direction), usize> = HashMap::new();
    for (name, direction) in PEER_MAPS {
        let map = ebpf.map(name).ok_or(LoadError::MissingMap { name })?;
        let peers: PerCpuHashMap<&MapData, PeerKey, PeerEntry> =
            PerCpuHashMap::try_from(map).map_err(map_err(name))?;
        for entry in peers.iter() {
            match entry {
                Ok((key, values)) => {
                    let c =
                        PeerCounters::from_kernel(&key, direction, values.iter().map(|e| &e.stats));
                    match at.entry((c.peer, direction)) {
                        Entry::Occupied(i) => out[*i.get()].add(&c),
                        Entry::Vacant(v) => {
                            v.insert(out.len());
                            out.push(c);
                        }
                    }
                }
                // The entry went away between the key walk and the lookup.
                Err(MapError::KeyNotFound) => {}
                Err(source) => return Err(LoadError::Map { name, source }),
            }
        }
    }
    Ok(out)
}

/// Removes every entry of `peer`: both directions, and each of its flows.
fn forget_peer(ebpf: &mut Ebpf, peer: SocketAddr) -> Result<usize, LoadError> {
    let addr = match peer.ip() {
        IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
        IpAddr::V6(v6) => v6.octets(),
    };
    let mut removed = 0;
    for (name, _) in PEER_MAPS {
        let mut peers: PerCpuHashMap<&mut MapData, PeerKey, PeerEntry> =
            PerCpuHashMap::try_from(map_mut(ebpf, name)?).map_err(map_err(name))?;
        let mut keys = Vec::new();
        for key in peers.keys() {
            match key {
                Ok(k) if k.addr == addr && k.port == peer.port() => keys.push(k),
                Ok(_) | Err(MapError::KeyNotFound) => {}
                Err(source) => return Err(LoadError::Map { name, source }),
            }
        }
        for key in keys {
            match peers.remove(&key) {
                Ok(()) => removed += 1,
                Err(MapError::KeyNotFound) => {}
                // Older kernels report a missing key as a plain ENOENT.
                Err(MapError::SyscallError(e))
                    if e.io_error.raw_os_error() == Some(libc::ENOENT) => {}
                Err(source) => return Err(LoadError::Map { name, source }),
            }
        }
    }
    Ok(removed)
}

fn read_global(ebpf: &Ebpf) -> Result<GlobalCounters, LoadError> {
    let map = ebpf
        .map(MAP_GLOBAL)
        .ok_or(LoadError::MissingMap { name: MAP_GLOBAL })?;
    let global: PerCpuArray<&MapData, u64> =
        PerCpuArray::try_from(map).map_err(map_err(MAP_GLOBAL))?;
    let sum = |index: u32| -> Result<u64, LoadError> {
        let values = global.get(&index, 0).map_err(map_err(MAP_GLOBAL))?;
        Ok(values.iter().fold(0u64, |a, v| a.wrapping_add(*v)))
    };
    let mut inexact = [0; INEXACT_CAUSES as usize];
    for (cause, v) in (0..INEXACT_CAUSES).zip(inexact.iter_mut()) {
        *v = sum(GLOBAL_INEXACT + cause)?;
    }
    Ok(GlobalCounters {
        unparsed: sum(GLOBAL_UNPARSED)?,
        table_full: sum(GLOBAL_TABLE_FULL)?,
        inexact,
    })
}

#[cfg(feature = "probe")]
/// The program loaded with its maps but attached nowhere: packets are fed to
/// it with the kernel's test run (`BPF_PROG_TEST_RUN`), exactly as a hook
/// would run it, and the counters read back. For tests of the parse path and
/// for benchmarks; needs the same privileges as [`Telemetry`].
pub struct Probe {
    ebpf: Ebpf,
    log: log::KernelLog,
}

#[cfg(feature = "probe")]
impl fmt::Debug for Probe {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Probe").finish_non_exhaustive()
    }
}

#[cfg(feature = "probe")]
/// Which program a [`Probe`] runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProbeHook {
    /// The XDP program; returns an XDP action (1 drop, 2 pass).
    Xdp,
    /// The TC ingress classifier; returns a TC action (-1 next, 2 shot).
    TcIngress,
    /// The TC egress classifier.
    TcEgress,
    /// The TC classifier of a loopback interface (both directions).
    TcLoopback,
}

#[cfg(feature = "probe")]
impl Probe {
    /// Loads the programs with the maps filled from `cfg`.
    ///
    /// # Errors
    ///
    /// As [`Telemetry::start`], without the attach errors.
    pub fn load(cfg: &Config) -> Result<Self, LoadError> {
        cfg.validate()?;
        let mut ebpf = load_object(cfg)?;
        write_config(&mut ebpf, cfg)?;
        let log = log::KernelLog::take(&mut ebpf, true);
        {
            let xdp: &mut Xdp = program(&mut ebpf, PROG_XDP)?;
            xdp.load().map_err(|source| LoadError::Program {
                name: PROG_XDP,
                source,
            })?;
        }
        for name in [PROG_TC_INGRESS, PROG_TC_EGRESS, PROG_TC_LOOPBACK] {
            let tc: &mut SchedClassifier = program(&mut ebpf, name)?;
            tc.load()
                .map_err(|source| LoadError::Program { name, source })?;
        }
        Ok(Self { ebpf, log })
    }

    /// The lines the programs logged since the last call (also forwarded to
    /// tracing, as the agent does).
    pub fn take_log(&mut self) -> Vec<String> {
        self.log.drain()
    }

    /// Runs `frame` (starting with its Ethernet header) through one program
    /// once and returns the program's return value.
    ///
    /// # Errors
    ///
    /// [`LoadError::TestRun`] when the kernel refuses the run (for example a
    /// frame shorter than an Ethernet header).
    pub fn run(&self, hook: ProbeHook, frame: &[u8]) -> Result<i32, LoadError> {
        let name = match hook {
            ProbeHook::Xdp => PROG_XDP,
            ProbeHook::TcIngress => PROG_TC_INGRESS,
            ProbeHook::TcEgress => PROG_TC_EGRESS,
            ProbeHook::TcLoopback => PROG_TC_LOOPBACK,
        };
        let prog = self
            .ebpf
            .program(name)
            .ok_or(LoadError::MissingProgram { name })?;
        let fd = prog
            .fd()
            .map_err(|source| LoadError::Program { name, source })?;
        test_run(fd.as_fd().as_raw_fd(), frame)
            .map_err(|source| LoadError::TestRun { name, source })
    }

    /// Reads every peer's counters, as [`Telemetry::read`].
    ///
    /// # Errors
    ///
    /// [`LoadError::Map`] when the kernel refuses the read.
    pub fn read(&self) -> Result<Vec<PeerCounters>, LoadError> {
        read_peers(&self.ebpf)
    }

    /// Reads the counters not tied to a peer, as [`Telemetry::global`].
    ///
    /// # Errors
    ///
    /// [`LoadError::Map`] when the kernel refuses the read.
    pub fn global(&self) -> Result<GlobalCounters, LoadError> {
        read_global(&self.ebpf)
    }

    /// Forgets a peer's counters, as [`Telemetry::forget`].
    ///
    /// # Errors
    ///
    /// [`LoadError::Map`] when the kernel refuses the removal.
    pub fn forget(&mut self, peer: SocketAddr) -> Result<usize, LoadError> {
        forget_peer(&mut self.ebpf, peer)
    }
}

#[cfg(feature = "probe")]
/// `BPF_PROG_TEST_RUN` (`union bpf_attr`, member `test`).
#[repr(C)]
#[derive(Default)]
struct TestRunAttr {
    prog_fd: u32,
    retval: u32,
    data_size_in: u32,
    data_size_out: u32,
    data_in: u64,
    data_out: u64,
    repeat: u32,
    duration: u32,
    ctx_size_in: u32,
    ctx_size_out: u32,
    ctx_in: u64,
    ctx_out: u64,
    flags: u32,
    cpu: u32,
    batch_size: u32,
    /// Explicit, so that it is zero: the kernel rejects non-zero bytes past
    /// the fields it knows.
    pad: u32,
}

#[cfg(feature = "probe")]
fn test_run(prog_fd: i32, frame: &[u8]) -> Result<i32, std::io::Error> {
    const BPF_PROG_TEST_RUN: libc::c_long = 10;
    let len = u32::try_from(frame.len())
        .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
    let mut attr = TestRunAttr {
        prog_fd: prog_fd as u32,
        data_size_in: len,
        data_in: frame.as_ptr() as u64,
        repeat: 1,
        ..TestRunAttr::default()
    };
    // SAFETY: `attr` is a valid, zero-padded `bpf_attr` prefix of the given
    // size; `data_in` points to `len` readable bytes that outlive the call;
    // no output buffers are given.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            BPF_PROG_TEST_RUN,
            &raw mut attr,
            size_of::<TestRunAttr>() as u32,
        )
    };
    if rc < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(attr.retval as i32)
}

#[cfg(feature = "probe")]
/// Loads the object, fills the maps from `cfg` and pins the XDP program, its
/// benchmark variant (`PROG_XDP_BENCH`) and the empty anchor program under
/// `dir` (on a mounted bpffs), without
/// attaching anything: for `bpftool prog run` benchmarks. The pins keep the
/// programs and their maps alive after the process exits; remove `dir` to
/// free them.
///
/// # Errors
///
/// As [`Telemetry::start`], plus [`LoadError::Pin`].
pub fn pin_for_test_run(cfg: &Config, dir: &Path) -> Result<(), LoadError> {
    let mut ebpf = load_object(cfg)?;
    write_config(&mut ebpf, cfg)?;
    for name in [PROG_XDP, PROG_XDP_BENCH, PROG_XDP_PASS] {
        let prog: &mut Xdp = program(&mut ebpf, name)?;
        prog.load()
            .map_err(|source| LoadError::Program { name, source })?;
        let path = dir.join(name);
        prog.pin(&path).map_err(|source| LoadError::Pin {
            what: path.display().to_string(),
            source,
        })?;
    }
    Ok(())
}

/// Loads the object with the port bitmap of `cfg` in place.
fn load_object(cfg: &Config) -> Result<Ebpf, LoadError> {
    if OBJECT.is_empty() {
        return Err(LoadError::NotBuilt);
    }
    let mut words = [0u64; PORT_WORDS as usize];
    for (port, roles) in cfg.port_roles() {
        words[usize::from(port >> 5)] |= roles << ((port & 31) * 2);
    }
    EbpfLoader::new()
        .override_global(GLOBAL_PORT_BITS, &words, true)
        .load(OBJECT)
        .map_err(LoadError::Load)
}

fn map_err(name: &'static str) -> impl Fn(MapError) -> LoadError {
    move |source| LoadError::Map { name, source }
}

fn map_mut<'a>(
    ebpf: &'a mut Ebpf,
    name: &'static str,
) -> Result<&'a mut aya::maps::Map, LoadError> {
    ebpf.map_mut(name).ok_or(LoadError::MissingMap { name })
}

/// Flags and SYN allow trie (the ports are set at load time).
fn write_config(ebpf: &mut Ebpf, cfg: &Config) -> Result<(), LoadError> {
    let flags = if cfg.syn_guard { FLAG_SYN_GUARD } else { 0 };
    let mut config: Array<&mut MapData, u32> =
        Array::try_from(map_mut(ebpf, MAP_CONFIG)?).map_err(map_err(MAP_CONFIG))?;
    config.set(0, flags, 0).map_err(map_err(MAP_CONFIG))?;
    let mut allow: LpmTrie<&mut MapData, [u8; 16], u8> =
        LpmTrie::try_from(map_mut(ebpf, MAP_SYN_ALLOW)?).map_err(map_err(MAP_SYN_ALLOW))?;
    for prefix in &cfg.syn_allow {
        let (addr, len) = prefix.to_mapped();
        allow
            .insert(&Key::new(len, addr), 1, 0)
            .map_err(map_err(MAP_SYN_ALLOW))?;
    }
    Ok(())
}

fn program<'a, T>(ebpf: &'a mut Ebpf, name: &'static str) -> Result<&'a mut T, LoadError>
where
    &'a mut T: TryFrom<&'a mut aya::programs::Program, Error = ProgramError>,
{
    let prog = ebpf
        .program_mut(name)
        .ok_or(LoadError::MissingProgram { name })?;
    prog.try_into()
        .map_err(|source| LoadError::Program { name, source })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn off_means_no_program_and_no_error() {
        let cfg = Config {
            mode: Mode::Off,
            ..Config::default()
        };
        assert!(matches!(Telemetry::start(&cfg), Err(LoadError::Disabled)));
        assert!(Telemetry::start_or_log(&cfg).is_none());
    }

    #[test]
    fn an_invalid_config_is_refused_before_loading() {
        let cfg = Config {
            ports: Vec::new(),
            ..Config::default()
        };
        assert!(matches!(
            Telemetry::start(&cfg),
            Err(LoadError::Config(ConfigError::NoPorts))
        ));
    }

    #[cfg(feature = "probe")]
    #[test]
    fn test_run_attr_matches_the_kernel_layout() {
        // `union bpf_attr` member `test`: 76 bytes of fields, 8-byte aligned.
        assert_eq!(size_of::<TestRunAttr>(), 80);
        assert_eq!(std::mem::offset_of!(TestRunAttr, data_in), 16);
        assert_eq!(std::mem::offset_of!(TestRunAttr, repeat), 32);
        assert_eq!(std::mem::offset_of!(TestRunAttr, ctx_in), 48);
        assert_eq!(std::mem::offset_of!(TestRunAttr, flags), 64);
        assert_eq!(std::mem::offset_of!(TestRunAttr, batch_size), 72);
    }
}
