//! Installation of the third-party Diameter peers the `interop` stage runs
//! against: freeDiameter 1.2.1 (daemon, extensions, and its `test_app.fdx`
//! built from the Debian source package), Erlang/OTP `diameter`, tshark, and
//! the loopback bind shim. Every step checks first and does only what is
//! missing, so a warm machine pays nothing.
//!
//! Output (the interop harness reads it through `DOIC_PEERS_DIR`, default
//! `<target>/peers`, `<target>` being cargo's target directory):
//! - `<target>/peers/src/freediameter-*/`: `apt-get source freediameter`
//! - `<target>/peers/ext/test_app.fdx`: freeDiameter's test application
//! - `<target>/peers/ext/bindlo.so`: LD_PRELOAD shim from `interop/peers/bindlo.c`

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, bail};

use crate::setup::apt;
use crate::util::{root, run_cmd};

/// Debian packages of the peers, tshark, and the build deps of `test_app.fdx`.
const PACKAGES: &[&str] = &[
    "tshark",
    "freediameterd",
    "freediameter-extensions",
    "libfreediameter-dev",
    "erlang-base",
    "erlang-diameter",
    "erlang-dev",
    "flex",
    "bison",
    "gcc",
    "libc6-dev",
    "libgnutls28-dev",
    "libgcrypt20-dev",
    "dpkg-dev",
];

/// Where the built peer artefacts live (`DOIC_PEERS_DIR` or `<target>/peers`).
pub(crate) fn dir() -> PathBuf {
    std::env::var_os("DOIC_PEERS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| crate::util::target_dir().join("peers"))
}

/// Installs and builds everything the interop harness needs.
pub(crate) fn install() -> anyhow::Result<()> {
    let t0 = Instant::now();
    preseed_tshark()?;
    apt(PACKAGES)?;
    let t_apt = t0.elapsed();
    let dir = dir();
    let ext = dir.join("ext");
    fs::create_dir_all(&ext).with_context(|| format!("cannot create {}", ext.display()))?;
    let src = fd_source(&dir.join("src"))?;
    let t_src = t0.elapsed();
    build_test_app(&src, &ext.join("test_app.fdx"))?;
    build_shim(&ext.join("bindlo.so"))?;
    eprintln!(
        "peers ready in {}: apt {:.1}s, source {:.1}s, build {:.1}s",
        dir.display(),
        t_apt.as_secs_f64(),
        (t_src - t_apt).as_secs_f64(),
        (t0.elapsed() - t_src).as_secs_f64()
    );
    Ok(())
}

/// tshark's postinst asks whether non-root users may capture; answer "no"
/// up front so a non-interactive install never waits on debconf.
fn preseed_tshark() -> anyhow::Result<()> {
    if installed("wireshark-common") {
        return Ok(());
    }
    let mut cmd = Command::new("sh");
    cmd.args([
        "-c",
        "echo 'wireshark-common wireshark-common/install-setuid boolean false' | debconf-set-selections",
    ]);
    run_cmd(&mut cmd)
}

fn installed(package: &str) -> bool {
    Command::new("dpkg-query")
        .args(["-W", "-f=${Status}", package])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).contains("install ok installed"))
        .unwrap_or(false)
}

/// Unpacks the Debian source of freeDiameter under `cache` (once) and returns
/// the unpacked tree.
fn fd_source(cache: &Path) -> anyhow::Result<PathBuf> {
    if let Some(tree) = unpacked(cache) {
        return Ok(tree);
    }
    ensure_deb_src()?;
    fs::create_dir_all(cache).with_context(|| format!("cannot create {}", cache.display()))?;
    let mut cmd = Command::new("apt-get");
    cmd.args(["source", "-q", "freediameter"])
        .current_dir(cache);
    run_cmd(&mut cmd)?;
    unpacked(cache).with_context(|| {
        format!(
            "apt-get source freediameter left no extensions/test_app under {}",
            cache.display()
        )
    })
}

fn unpacked(cache: &Path) -> Option<PathBuf> {
    fs::read_dir(cache)
        .ok()?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("freediameter-"))
                && p.join("extensions/test_app/test_app.c").is_file()
        })
}

/// Adds a `deb-src` entry derived from the machine's own Debian source list
/// (same mirror, same keyring) when none exists, then refreshes the index.
fn ensure_deb_src() -> anyhow::Result<()> {
    let mut lists = vec![PathBuf::from("/etc/apt/sources.list")];
    if let Ok(rd) = fs::read_dir("/etc/apt/sources.list.d") {
        lists.extend(rd.filter_map(Result::ok).map(|e| e.path()));
    }
    let mut deb822 = None;
    let mut one_line = None;
    for path in &lists {
        let name = path.to_string_lossy();
        if !(name.ends_with(".list") || name.ends_with(".sources")) {
            continue;
        }
        let Ok(text) = fs::read_to_string(path) else {
            continue;
        };
        if text
            .lines()
            .any(|l| l.trim_start().starts_with("deb-src") || is_types_deb_src(l))
        {
            return Ok(());
        }
        if name.ends_with(".sources") && deb822.is_none() {
            deb822 = debian_stanza(&text);
        } else if one_line.is_none() {
            one_line = text
                .lines()
                .find(|l| l.starts_with("deb ") && l.contains("debian") && !l.contains("security"))
                .map(|l| format!("deb-src{}\n", &l[3..]));
        }
    }
    let (file, body) = match (deb822, one_line) {
        (Some(stanza), _) => ("doic-deb-src.sources", stanza),
        (None, Some(line)) => ("doic-deb-src.list", line),
        (None, None) => bail!("no Debian apt source found to derive a deb-src entry from"),
    };
    let path = Path::new("/etc/apt/sources.list.d").join(file);
    eprintln!("+ write {}", path.display());
    fs::write(&path, body).with_context(|| format!("cannot write {}", path.display()))?;
    let mut cmd = Command::new("apt-get");
    cmd.args(["update", "-q"]);
    run_cmd(&mut cmd)
}

fn is_types_deb_src(line: &str) -> bool {
    let l = line.trim();
    l.starts_with("Types:") && l.split_whitespace().any(|w| w == "deb-src")
}

/// The first deb822 stanza of `text` that names a Debian archive (not the
/// security one), rewritten to `Types: deb-src` with its first suite only.
fn debian_stanza(text: &str) -> Option<String> {
    text.split("\n\n").find_map(|stanza| {
        let is_deb = stanza
            .lines()
            .any(|l| l.trim() == "Types: deb" || l.trim().starts_with("Types: deb "));
        let uri = stanza.lines().find(|l| l.starts_with("URIs:"))?;
        if !is_deb || !uri.contains("debian") || uri.contains("security") {
            return None;
        }
        let mut out = String::new();
        for l in stanza.lines() {
            if l.starts_with("Types:") {
                out.push_str("Types: deb-src\n");
            } else if let Some(suites) = l.strip_prefix("Suites:") {
                let first = suites.split_whitespace().next()?;
                out.push_str(&format!("Suites: {first}\n"));
            } else if !l.trim_start().starts_with('#') {
                out.push_str(l);
                out.push('\n');
            }
        }
        Some(out)
    })
}

/// Builds `test_app.fdx` from the freeDiameter source tree against the
/// installed Debian libfdcore/libfdproto (Debian does not ship it).
fn build_test_app(src: &Path, out: &Path) -> anyhow::Result<()> {
    if out.is_file() {
        return Ok(());
    }
    let ta = src.join("extensions/test_app");
    let build = out.with_extension("build");
    fs::create_dir_all(&build)?;
    let ta_s = ta.to_string_lossy().into_owned();
    run_cmd(
        Command::new("bison")
            .args([
                "--name-prefix=ta_conf",
                "--defines",
                "--output-file=ta_conf.tab.c",
            ])
            .arg(ta.join("ta_conf.y"))
            .current_dir(&build),
    )?;
    run_cmd(
        Command::new("flex")
            .args(["-Pta_conf", "-olex.ta_conf.c"])
            .arg(ta.join("ta_conf.l"))
            .current_dir(&build),
    )?;
    let tmp = out.with_extension("fdx.tmp");
    let mut gcc = Command::new("gcc");
    gcc.args(["-O2", "-g", "-fPIC", "-shared", "-w"])
        .arg(format!("-I{ta_s}"))
        .arg("-I.")
        .arg("-o")
        .arg(&tmp);
    for f in [
        "test_app.c",
        "ta_dict.c",
        "ta_cli.c",
        "ta_bench.c",
        "ta_serv.c",
    ] {
        gcc.arg(ta.join(f));
    }
    gcc.args([
        "lex.ta_conf.c",
        "ta_conf.tab.c",
        "-lfdcore",
        "-lfdproto",
        "-lpthread",
    ])
    .current_dir(&build);
    run_cmd(&mut gcc)?;
    fs::rename(&tmp, out)?;
    fs::remove_dir_all(&build)?;
    Ok(())
}

/// Builds the loopback bind shim when its source is newer than the output.
fn build_shim(out: &Path) -> anyhow::Result<()> {
    let src = root().join("interop/peers/bindlo.c");
    let fresh = match (fs::metadata(&src), fs::metadata(out)) {
        (Ok(s), Ok(o)) => o.modified()? >= s.modified()?,
        (Err(e), _) => return Err(e).with_context(|| format!("cannot read {}", src.display())),
        _ => false,
    };
    if fresh {
        return Ok(());
    }
    let tmp = out.with_extension("so.tmp");
    run_cmd(
        Command::new("gcc")
            .args(["-O2", "-shared", "-fPIC", "-Wall", "-Werror", "-o"])
            .arg(&tmp)
            .arg(&src)
            .arg("-ldl"),
    )?;
    fs::rename(&tmp, out)?;
    Ok(())
}
