//! tshark as an independent Diameter decoder: capture on `lo` into a pcap
//! (bounded in time), decode a pcap into per-message data (RFC 6733 §3
//! header and §4 AVP trees, as Wireshark's dissector sees them), and detect
//! malformed packets and expert warnings.
//!
//! Wireshark 4.0 lacks OC-Maximum-Rate (RFC 8582, code 670) and does not
//! know freeDiameter's test_app. The project's additions
//! (`interop/peers/Custom.xml`) are bind-mounted over
//! `/usr/share/wireshark/diameter/Custom.xml` inside a private mount
//! namespace (`unshare -m`), the only place tshark 4.0 reads a Diameter
//! dictionary from; system files are never modified.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::Error;
use crate::pcap::{Dir, PcapWriter};
use crate::process::{Daemon, RunDir, require, support_dir};

/// The system Custom.xml that dictionary.xml includes.
const SYSTEM_CUSTOM: &str = "/usr/share/wireshark/diameter/Custom.xml";
/// Wireshark's expert severity for warnings (`PI_WARN`); errors are higher.
pub const SEVERITY_WARN: u32 = 0x0060_0000;

/// One expert-info item tshark attached to a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expert {
    /// Severity (`PI_CHAT` 0x200000, `PI_NOTE` 0x400000, `PI_WARN` 0x600000, `PI_ERROR` 0x800000).
    pub severity: u32,
    /// The message.
    pub message: String,
}

impl Expert {
    /// True for warnings and errors.
    #[must_use]
    pub fn is_warning(&self) -> bool {
        self.severity >= SEVERITY_WARN
    }
}

/// One AVP as tshark decoded it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct WireAvp {
    /// AVP Code.
    pub code: u32,
    /// AVP Flags (V 0x80, M 0x40, P 0x20).
    pub flags: u8,
    /// AVP Length (header included, padding excluded).
    pub length: u32,
    /// Vendor-ID when the V bit is set.
    pub vendor: Option<u32>,
    /// The dictionary name (e.g. `Origin-Host`), `None` when unknown to tshark.
    pub name: Option<String>,
    /// tshark's value text (integers in decimal, strings as text, unknown
    /// and grouped data as colon-separated hex).
    pub value: Option<String>,
    /// The data bytes of the AVP (after the header, without padding).
    pub data: Vec<u8>,
    /// Members of a Grouped AVP.
    pub children: Vec<WireAvp>,
    /// The IPv4 or IPv6 address of an Address AVP, as tshark prints it.
    pub address: Option<String>,
}

impl WireAvp {
    /// The first member with `code` (and `vendor`).
    #[must_use]
    pub fn child(&self, code: u32, vendor: Option<u32>) -> Option<&WireAvp> {
        self.children
            .iter()
            .find(|a| a.code == code && a.vendor == vendor)
    }
}

/// One Diameter message as tshark decoded it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct WireMessage {
    /// Frame number in the capture.
    pub frame: u64,
    /// TCP source port.
    pub src_port: u16,
    /// TCP destination port.
    pub dst_port: u16,
    /// Version (1).
    pub version: u8,
    /// Message Length.
    pub length: u32,
    /// Command Flags (R 0x80, P 0x40, E 0x20, T 0x10).
    pub flags: u8,
    /// Command Code.
    pub command: u32,
    /// Application-ID.
    pub application: u32,
    /// Hop-by-Hop Identifier.
    pub hop_by_hop: u32,
    /// End-to-End Identifier.
    pub end_to_end: u32,
    /// Top-level AVPs in wire order.
    pub avps: Vec<WireAvp>,
    /// The message bytes tshark dissected.
    pub raw: Vec<u8>,
    /// Expert items inside the Diameter layer.
    pub experts: Vec<Expert>,
    /// True when the frame carries a `_ws.malformed` item.
    pub malformed: bool,
    /// Expert items of the frame's other layers (Ethernet, IP, TCP): bad
    /// checksums (with [`Tshark::check_checksums`]), TCP sequence analysis.
    pub frame_experts: Vec<Expert>,
}

impl WireMessage {
    /// True for a request (R bit).
    #[must_use]
    pub fn is_request(&self) -> bool {
        self.flags & 0x80 != 0
    }

    /// The first top-level AVP with `code` (and `vendor`).
    #[must_use]
    pub fn avp(&self, code: u32, vendor: Option<u32>) -> Option<&WireAvp> {
        self.avps
            .iter()
            .find(|a| a.code == code && a.vendor == vendor)
    }

    /// Expert warnings and errors (not notes or chats).
    #[must_use]
    pub fn warnings(&self) -> Vec<&Expert> {
        self.experts.iter().filter(|e| e.is_warning()).collect()
    }
}

/// How to run tshark.
#[derive(Debug, Clone)]
pub struct Tshark {
    ports: Vec<u16>,
    tls_ports: Vec<u16>,
    dictionary: bool,
    extra: Vec<String>,
}

impl Default for Tshark {
    fn default() -> Self {
        Self::new()
    }
}

impl Tshark {
    /// Decodes TCP port 3868 as Diameter, with the project's dictionary
    /// additions when a private mount namespace is possible.
    #[must_use]
    pub fn new() -> Self {
        Self {
            ports: vec![3868],
            tls_ports: Vec::new(),
            dictionary: true,
            extra: Vec::new(),
        }
    }

    /// Also decodes TCP `port` as Diameter.
    #[must_use]
    pub fn port(mut self, port: u16) -> Self {
        if !self.ports.contains(&port) {
            self.ports.push(port);
        }
        self
    }

    /// Decodes TCP `port` as TLS (RFC 6733 §13.1 TLS/TCP) instead.
    #[must_use]
    pub fn tls_port(mut self, port: u16) -> Self {
        self.ports.retain(|&p| p != port);
        self.tls_ports.push(port);
        self
    }

    /// Uses tshark's stock dictionary only (no Custom.xml bind mount).
    #[must_use]
    pub fn stock_dictionary(mut self) -> Self {
        self.dictionary = false;
        self
    }

    /// Turns on IPv4 and TCP checksum validation (bad checksums become
    /// expert errors).
    #[must_use]
    pub fn check_checksums(mut self) -> Self {
        for o in ["ip.check_checksum:TRUE", "tcp.check_checksum:TRUE"] {
            self.extra.push("-o".into());
            self.extra.push(o.into());
        }
        self
    }

    /// True when the dictionary additions can be loaded here (root, or
    /// user namespaces, and a system Custom.xml to mount over).
    #[must_use]
    pub fn can_load_dictionary() -> bool {
        Path::new(SYSTEM_CUSTOM).is_file()
            && Command::new("unshare")
                .args(["-m", "true"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
    }

    fn command(&self, args: &[&str]) -> Result<Command, Error> {
        require(
            Path::new("/usr/bin/tshark"),
            "run `cargo xtask test --only interop` to install tshark",
        )?;
        let mut tshark_args: Vec<String> = Vec::new();
        for p in &self.ports {
            tshark_args.push("-d".into());
            tshark_args.push(format!("tcp.port=={p},diameter"));
        }
        for p in &self.tls_ports {
            tshark_args.push("-d".into());
            tshark_args.push(format!("tcp.port=={p},tls"));
        }
        tshark_args.extend(self.extra.iter().cloned());
        tshark_args.extend(args.iter().map(|s| (*s).to_owned()));
        let custom = support_dir().join("Custom.xml");
        let cmd = if self.dictionary && Self::can_load_dictionary() && custom.is_file() {
            let mut c = Command::new("unshare");
            c.args([
                "-m",
                "sh",
                "-c",
                "mount --bind \"$1\" \"$2\" && shift 2 && exec tshark \"$@\"",
                "tshark-diameter",
            ])
            .arg(&custom)
            .arg(SYSTEM_CUSTOM)
            .args(&tshark_args);
            c
        } else {
            let mut c = Command::new("tshark");
            c.args(&tshark_args);
            c
        };
        Ok(cmd)
    }

    /// Decodes every Diameter message of the capture at `pcap`.
    ///
    /// # Errors
    /// tshark failing or printing JSON this parser does not understand.
    pub fn decode(&self, pcap: &Path) -> Result<Vec<WireMessage>, Error> {
        let p = pcap.to_string_lossy().into_owned();
        let cmd = self.command(&[
            "-r",
            &p,
            "-n",
            "-Y",
            "diameter || _ws.malformed",
            "-T",
            "json",
            "-x",
            "--no-duplicate-keys",
        ])?;
        parse_json(&stdout_of(cmd)?)
    }

    /// How many frames of the capture at `pcap` match the display filter
    /// `filter` (e.g. `tls.app_data`, `diameter`).
    ///
    /// # Errors
    /// tshark failing.
    pub fn count(&self, pcap: &Path, filter: &str) -> Result<usize, Error> {
        let p = pcap.to_string_lossy().into_owned();
        let fields = ["-T", "fields", "-e", "frame.number"];
        let cmd = self.command(&[&["-r", &p, "-n", "-Y", filter][..], &fields].concat())?;
        let out = stdout_of(cmd)?;
        Ok(out.split(|&b| b == b'\n').filter(|l| !l.is_empty()).count())
    }

    /// Writes `messages` (client to server, in order, on one TCP stream to
    /// port 3868) into a pcap under `dir` and decodes it. `messages` are
    /// whole Diameter messages; requests and answers may be mixed, the
    /// direction only matters to TCP.
    ///
    /// # Errors
    /// As [`decode`](Self::decode), or the pcap not being writable.
    pub fn decode_messages(
        &self,
        dir: &Path,
        messages: &[Vec<u8>],
    ) -> Result<Vec<WireMessage>, Error> {
        let mut w = PcapWriter::new();
        let client = "127.0.0.1:40000"
            .parse()
            .map_err(|_| Error::parse("address", "bad literal"))?;
        let server = "127.0.0.1:3868"
            .parse()
            .map_err(|_| Error::parse("address", "bad literal"))?;
        let mut flow = w.open(client, server);
        for m in messages {
            let dir = if m.get(4).is_some_and(|f| f & 0x80 != 0) {
                Dir::ToServer
            } else {
                Dir::ToClient
            };
            w.send(&mut flow, dir, m);
        }
        w.close(&mut flow);
        let path = dir.join("messages.pcap");
        w.write_to(&path).map_err(|e| Error::io(&path, e))?;
        self.decode(&path)
    }
}

/// What tshark printed on stdout; an error when it failed.
fn stdout_of(mut cmd: Command) -> Result<Vec<u8>, Error> {
    let out = cmd.output().map_err(|source| Error::Spawn {
        program: "tshark".into(),
        source,
    })?;
    if !out.status.success() {
        return Err(Error::parse(
            "tshark",
            format!(
                "exit {}: {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ),
        ));
    }
    Ok(out.stdout)
}

/// A running capture on `lo` (dumpcap), bounded in time.
#[derive(Debug)]
pub struct Capture {
    daemon: Daemon,
    path: PathBuf,
    _dir: RunDir,
}

impl Capture {
    /// Starts capturing TCP traffic to or from any of `ports` on `lo` into
    /// a fresh pcap, for at most `max` (dumpcap stops by itself then).
    /// Returns once dumpcap reports it is capturing.
    ///
    /// # Errors
    /// dumpcap missing, failing (not root), or not starting in time.
    pub fn start(ports: &[u16], max: Duration) -> Result<Self, Error> {
        require(
            Path::new("/usr/bin/dumpcap"),
            "run `cargo xtask test --only interop` to install tshark",
        )?;
        let dir = RunDir::new("capture")?;
        let path = dir.path().join("capture.pcap");
        let filter = ports
            .iter()
            .map(|p| format!("tcp port {p}"))
            .collect::<Vec<_>>()
            .join(" or ");
        let mut cmd = Command::new("dumpcap");
        cmd.args(["-i", "lo", "-q", "-P", "-f", &filter, "-a"])
            .arg(format!("duration:{}", max.as_secs().max(1)))
            .arg("-w")
            .arg(&path);
        let mut daemon = Daemon::spawn("dumpcap", cmd, &dir.path().join("dumpcap.log"))?;
        daemon.wait_log("Capturing on", 0, Duration::from_secs(10))?;
        Ok(Self {
            daemon,
            path,
            _dir: dir,
        })
    }

    /// Stops the capture, waits until the file is complete, and decodes it.
    ///
    /// # Errors
    /// As [`Tshark::decode`].
    pub fn finish(mut self, tshark: &Tshark) -> Result<Vec<WireMessage>, Error> {
        self.stop()?;
        tshark.decode(&self.path)
    }

    /// Stops the capture and counts, for each (decoder, display filter),
    /// the frames [`Tshark::count`] finds.
    ///
    /// # Errors
    /// As [`Tshark::count`].
    pub fn finish_count(mut self, counts: &[(&Tshark, &str)]) -> Result<Vec<usize>, Error> {
        self.stop()?;
        counts.iter().map(|(t, f)| t.count(&self.path, f)).collect()
    }

    /// Stops dumpcap once the file is complete.
    fn stop(&mut self) -> Result<(), Error> {
        // On SIGINT dumpcap stops reading: packets still in the kernel
        // buffer would be lost. It appends to the file as it reads, so wait
        // until the file has stopped growing for half a second (at most 10 s).
        let size = || std::fs::metadata(&self.path).map(|m| m.len()).unwrap_or(0);
        let mut last = size();
        let mut stable = 0;
        for _ in 0..100 {
            std::thread::sleep(Duration::from_millis(100));
            let now = size();
            stable = if now == last { stable + 1 } else { 0 };
            last = now;
            if stable >= 5 {
                break;
            }
        }
        self.daemon.signal(libc::SIGINT)?;
        self.daemon.wait_exit(Duration::from_secs(5))?;
        Ok(())
    }

    /// The pcap file (complete only after [`finish`](Self::finish)).
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.path
    }
}

fn str_of(v: &Value) -> Option<&str> {
    match v {
        Value::String(s) => Some(s),
        Value::Array(a) => a.first().and_then(str_of),
        _ => None,
    }
}

fn num_of(v: Option<&Value>) -> Option<u64> {
    let s = str_of(v?)?;
    match s.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16).ok(),
        None => s.parse().ok(),
    }
}

/// The hex bytes of a `-x` raw field (`[hex, pos, len, mask, type]`).
fn raw_bytes(v: Option<&Value>) -> Vec<u8> {
    let Some(hex) = v.and_then(str_of) else {
        return Vec::new();
    };
    (0..hex.len() / 2)
        .filter_map(|i| u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok())
        .collect()
}

/// Lists the items of a field that `--no-duplicate-keys` turns into an
/// array only when it repeats.
fn items(v: Option<&Value>) -> Vec<&Value> {
    match v {
        None => Vec::new(),
        Some(Value::Array(a)) if a.iter().all(Value::is_object) => a.iter().collect(),
        Some(o) => vec![o],
    }
}

/// Lists the raw fields: one `[hex, ...]` or several `[[hex, ...], ...]`.
fn raw_items(v: Option<&Value>) -> Vec<&Value> {
    match v {
        Some(Value::Array(a)) if a.first().is_some_and(Value::is_array) => a.iter().collect(),
        Some(x) => vec![x],
        None => Vec::new(),
    }
}

fn collect_experts(v: &Value, out: &mut Vec<Expert>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                if k == "_ws.expert" {
                    for e in items(Some(x)) {
                        out.push(Expert {
                            severity: u32::try_from(
                                num_of(e.get("_ws.expert.severity")).unwrap_or(0),
                            )
                            .unwrap_or(u32::MAX),
                            message: e
                                .get("_ws.expert.message")
                                .and_then(str_of)
                                .unwrap_or_default()
                                .to_owned(),
                        });
                    }
                } else {
                    collect_experts(x, out);
                }
            }
        }
        Value::Array(a) => a.iter().for_each(|x| collect_experts(x, out)),
        _ => {}
    }
}

fn has_key(v: &Value, key: &str) -> bool {
    match v {
        Value::Object(m) => m.iter().any(|(k, x)| k == key || has_key(x, key)),
        Value::Array(a) => a.iter().any(|x| has_key(x, key)),
        _ => false,
    }
}

fn parse_avp(v: &Value) -> WireAvp {
    let mut a = WireAvp {
        code: u32::try_from(num_of(v.get("diameter.avp.code")).unwrap_or(0)).unwrap_or(0),
        flags: u8::try_from(num_of(v.get("diameter.avp.flags")).unwrap_or(0)).unwrap_or(0),
        length: u32::try_from(num_of(v.get("diameter.avp.len")).unwrap_or(0)).unwrap_or(0),
        vendor: num_of(v.get("diameter.avp.vendorId")).and_then(|x| u32::try_from(x).ok()),
        ..WireAvp::default()
    };
    let Some(m) = v.as_object() else { return a };
    if let Some(u) = m.get("diameter.avp.unknown") {
        a.value = str_of(u).map(str::to_owned);
        a.data = raw_bytes(m.get("diameter.avp.unknown_raw"));
    } else if let Some((k, val)) = m.iter().find(|(k, _)| {
        k.starts_with("diameter.")
            && !k.starts_with("diameter.avp.")
            && k.as_str() != "diameter.vendorId"
            && !k.ends_with("_raw")
            && !k.ends_with("_tree")
            && m.contains_key(&format!("{k}_raw"))
    }) {
        a.name = Some(k["diameter.".len()..].to_owned());
        a.value = str_of(val).map(str::to_owned);
        a.data = raw_bytes(m.get(&format!("{k}_raw")));
        if let Some(tree) = m.get(&format!("{k}_tree")) {
            a.address = tree.as_object().and_then(|t| {
                t.iter()
                    .find(|(tk, _)| tk.ends_with(".IPv4") || tk.ends_with(".IPv6"))
                    .and_then(|(_, v)| str_of(v))
                    .map(str::to_owned)
            });
            a.children = items(tree.get("diameter.avp_tree"))
                .into_iter()
                .map(parse_avp)
                .collect();
        }
    }
    a
}

fn parse_message(
    frame: u64,
    ports: (u16, u16),
    d: &Value,
    raw: &[u8],
    malformed: bool,
) -> WireMessage {
    let get = |k: &str| num_of(d.get(k)).unwrap_or(0);
    let mut experts = Vec::new();
    collect_experts(d, &mut experts);
    WireMessage {
        frame,
        src_port: ports.0,
        dst_port: ports.1,
        version: u8::try_from(get("diameter.version")).unwrap_or(0),
        length: u32::try_from(get("diameter.length")).unwrap_or(0),
        flags: u8::try_from(get("diameter.flags")).unwrap_or(0),
        command: u32::try_from(get("diameter.cmd.code")).unwrap_or(0),
        application: u32::try_from(get("diameter.applicationId")).unwrap_or(0),
        hop_by_hop: u32::try_from(get("diameter.hopbyhopid")).unwrap_or(0),
        end_to_end: u32::try_from(get("diameter.endtoendid")).unwrap_or(0),
        avps: items(d.get("diameter.avp_tree"))
            .into_iter()
            .map(parse_avp)
            .collect(),
        raw: raw.to_vec(),
        experts,
        malformed: malformed || has_key(d, "_ws.malformed"),
        frame_experts: Vec::new(),
    }
}

/// Parses `tshark -T json -x --no-duplicate-keys` output.
fn parse_json(out: &[u8]) -> Result<Vec<WireMessage>, Error> {
    let v: Value =
        serde_json::from_slice(out).map_err(|e| Error::parse("tshark json", e.to_string()))?;
    let frames = v
        .as_array()
        .ok_or_else(|| Error::parse("tshark json", "not an array of packets"))?;
    let mut msgs = Vec::new();
    for f in frames {
        let l = &f["_source"]["layers"];
        let frame = num_of(l["frame"].get("frame.number")).unwrap_or(0);
        let ports = (
            u16::try_from(num_of(l["tcp"].get("tcp.srcport")).unwrap_or(0)).unwrap_or(0),
            u16::try_from(num_of(l["tcp"].get("tcp.dstport")).unwrap_or(0)).unwrap_or(0),
        );
        let malformed = l.get("_ws.malformed").is_some();
        let mut frame_experts = Vec::new();
        if let Some(m) = l.as_object() {
            for (k, layer) in m {
                if k != "diameter" && !k.ends_with("_raw") {
                    collect_experts(layer, &mut frame_experts);
                }
            }
        }
        let layers = items(l.get("diameter"));
        let raws = raw_items(l.get("diameter_raw"));
        if layers.is_empty() && malformed {
            msgs.push(WireMessage {
                frame,
                src_port: ports.0,
                dst_port: ports.1,
                malformed,
                frame_experts,
                ..WireMessage::default()
            });
            continue;
        }
        for (i, d) in layers.into_iter().enumerate() {
            let raw = raw_bytes(raws.get(i).copied());
            let mut m = parse_message(frame, ports, d, &raw, malformed);
            m.frame_experts.clone_from(&frame_experts);
            msgs.push(m);
        }
    }
    Ok(msgs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_grouped_avp_and_experts() {
        let json = br#"[{"_source":{"layers":{
            "frame":{"frame.number":"4"},
            "tcp":{"tcp.srcport":"40000","tcp.dstport":"3868"},
            "diameter_raw":["0100001c",0,28,0,1],
            "diameter":{
              "diameter.version":"0x01","diameter.length":"28","diameter.flags":"0xc0",
              "diameter.cmd.code":"257","diameter.applicationId":"0",
              "diameter.hopbyhopid":"0x00000001","diameter.endtoendid":"0x00000002",
              "diameter.avp_tree":[
                {"diameter.avp.code":"268","diameter.avp.flags":"0x40","diameter.avp.len":"12",
                 "diameter.Result-Code":"2001","diameter.Result-Code_raw":["000007d1",0,4,0,7]},
                {"diameter.avp.code":"670","diameter.avp.flags":"0x00","diameter.avp.len":"12",
                 "diameter.avp.code_tree":{"x":{"_ws.expert":{"_ws.expert.message":"Unknown AVP 670",
                   "_ws.expert.severity":"6291456"}}},
                 "diameter.avp.unknown":"00:00:00:64","diameter.avp.unknown_raw":["00000064",0,4,0,30]},
                {"diameter.avp.code":"623","diameter.avp.flags":"0x00","diameter.avp.len":"24",
                 "diameter.OC-OLR":"..","diameter.OC-OLR_raw":["00",0,1,0,30],
                 "diameter.OC-OLR_tree":{"diameter.avp_tree":
                   {"diameter.avp.code":"627","diameter.avp.flags":"0x00","diameter.avp.len":"12",
                    "diameter.OC-Reduction-Percentage":"50",
                    "diameter.OC-Reduction-Percentage_raw":["00000032",0,4,0,7]}}}
              ]}}}}]"#;
        let m = parse_json(json).unwrap();
        assert_eq!(m.len(), 1);
        let m = &m[0];
        assert_eq!((m.frame, m.src_port, m.dst_port), (4, 40000, 3868));
        assert_eq!(
            (m.flags, m.command, m.hop_by_hop, m.end_to_end),
            (0xc0, 257, 1, 2)
        );
        assert!(m.is_request());
        assert_eq!(m.raw, vec![1, 0, 0, 0x1c]);
        assert_eq!(m.avps[0].name.as_deref(), Some("Result-Code"));
        assert_eq!(m.avps[0].value.as_deref(), Some("2001"));
        assert_eq!(m.avps[0].data, vec![0, 0, 7, 0xd1]);
        assert_eq!(m.avps[1].name, None);
        assert_eq!(m.avps[1].data, vec![0, 0, 0, 100]);
        let olr = m.avp(623, None).unwrap();
        assert_eq!(olr.children.len(), 1);
        assert_eq!(olr.child(627, None).unwrap().value.as_deref(), Some("50"));
        assert_eq!(m.warnings().len(), 1);
        assert!(m.warnings()[0].message.contains("670"));
        assert!(!m.malformed);
    }

    #[test]
    fn garbage_json_is_an_error() {
        assert!(parse_json(b"{").is_err());
        assert!(parse_json(b"{}").is_err());
        assert!(parse_json(b"[]").unwrap().is_empty());
    }
}
