//! The deploy files (`deploy/`, docs/deploy.md), each checked as the tool
//! that reads it would: the example `agent.toml` by `doic-agent
//! check-config`, the systemd unit by `systemd-analyze verify`, the
//! Kubernetes manifests parsed as YAML with the fields the agent needs, the
//! Containerfile built where an engine can, else its instructions parsed.

#[path = "../../agent/tests/support/mod.rs"]
mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use agent::config::Config;
use serde_yaml::Value;
use support::node::{gauge, http_get};
use support::scratch::Scratch;

const BIN: &str = env!("CARGO_BIN_EXE_doic-agent");

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(path)
}

fn read(path: &str) -> String {
    std::fs::read_to_string(repo(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn scratch(name: &str) -> Scratch {
    Scratch::new(&format!("deploy-{name}"))
}

/// `doic-agent check-config FILE`: its stdout, asserting exit status 0.
fn check_config(file: &Path) -> String {
    let out = Command::new(BIN)
        .args(["check-config", file.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}: {}",
        file.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn the_example_config_has_every_section_and_check_config_accepts_it() {
    let file = repo("deploy/agent.toml");
    let out = check_config(&file);
    assert!(
        out.ends_with(": ok (4 peers, 2 routes, 2 workers)\n"),
        "{out}"
    );
    let text = read("deploy/agent.toml");
    for section in [
        "[node]",
        "[metrics]",
        "[[peer]]",
        "[[route]]",
        "[accept]",
        "[ebpf]",
        "[retry]",
        "[doic]",
        "[doic.rate]",
        "[[doic.priority_rules]]",
        "[doic.peers.",
        "[doic.protect]",
    ] {
        assert!(
            text.lines().any(|l| l.starts_with(section)),
            "deploy/agent.toml has no {section}"
        );
    }
    let config = Config::from_file(&file).unwrap();
    assert!(config.metrics.is_some() && config.ebpf.is_some() && config.doic.is_some());
}

fn yaml(path: &str) -> Value {
    serde_yaml::from_str(&read(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn str_of<'a>(v: &'a Value, what: &str) -> &'a str {
    v.as_str()
        .unwrap_or_else(|| panic!("{what} is not a string: {v:?}"))
}

#[test]
fn the_configmap_embeds_the_example_config_unchanged() {
    let cm = yaml("deploy/k8s/configmap.yaml");
    assert_eq!(cm["apiVersion"], "v1");
    assert_eq!(cm["kind"], "ConfigMap");
    let embedded = str_of(&cm["data"]["agent.toml"], "data.agent.toml");
    let example = read("deploy/agent.toml");
    let first = embedded
        .lines()
        .zip(example.lines())
        .position(|(a, b)| a != b);
    assert!(
        embedded == example,
        "deploy/k8s/configmap.yaml and deploy/agent.toml differ (line {:?} of the file)",
        first.map(|i| i + 1)
    );
}

/// A YAML list of strings.
fn strings<'a>(v: &'a Value, what: &str) -> Vec<&'a str> {
    v.as_sequence()
        .unwrap_or_else(|| panic!("{what} is not a list"))
        .iter()
        .map(|s| str_of(s, what))
        .collect()
}

fn container<'a>(pod: &'a Value, list: &str, name: &str) -> &'a Value {
    pod[list]
        .as_sequence()
        .unwrap_or_else(|| panic!("no {list}"))
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no {list} named {name}"))
}

#[test]
fn the_daemonset_runs_on_the_host_network_with_the_capabilities_and_probes() {
    let ds = yaml("deploy/k8s/daemonset.yaml");
    let cm = yaml("deploy/k8s/configmap.yaml");
    assert_eq!(ds["apiVersion"], "apps/v1");
    assert_eq!(ds["kind"], "DaemonSet");
    assert_eq!(ds["metadata"]["namespace"], cm["metadata"]["namespace"]);
    let labels = &ds["spec"]["template"]["metadata"]["labels"];
    for (k, v) in ds["spec"]["selector"]["matchLabels"].as_mapping().unwrap() {
        assert_eq!(&labels[k], v, "the selector matches the pods");
    }
    let pod = &ds["spec"]["template"]["spec"];
    assert_eq!(pod["hostNetwork"], true);
    assert_eq!(pod["dnsPolicy"], "ClusterFirstWithHostNet");

    let agent = container(pod, "containers", "doic-agent");
    let caps = &agent["securityContext"]["capabilities"];
    let added = strings(&caps["add"], "capabilities.add");
    assert_eq!(added, ["BPF", "NET_ADMIN", "PERFMON", "NET_BIND_SERVICE"]);
    assert_eq!(caps["drop"][0], "ALL");
    assert_eq!(agent["securityContext"]["allowPrivilegeEscalation"], false);
    assert_eq!(agent["securityContext"]["readOnlyRootFilesystem"], true);

    // The probes reach the metrics listener of the configuration.
    let config = Config::from_file(&repo("deploy/agent.toml")).unwrap();
    let metrics_port = config.metrics.unwrap().listen.port();
    let ready = &agent["readinessProbe"]["httpGet"];
    assert_eq!(ready["path"], "/health");
    assert_eq!(ready["port"].as_u64(), Some(u64::from(metrics_port)));
    assert_eq!(
        agent["livenessProbe"]["tcpSocket"]["port"].as_u64(),
        Some(u64::from(metrics_port))
    );
    let ports: Vec<u64> = agent["ports"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|p| p["containerPort"].as_u64().unwrap())
        .collect();
    let diameter = u64::from(config.node.listen[0].addr.port());
    assert_eq!(ports, [diameter, u64::from(metrics_port)]);

    // The agent runs the file the init container writes from the ConfigMap
    // mounted where the init container reads it.
    let init = container(pod, "initContainers", "identity");
    assert_eq!(init["image"], agent["image"]);
    let config_volume = pod["volumes"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "config")
        .unwrap();
    assert_eq!(config_volume["configMap"]["name"], cm["metadata"]["name"]);
    let args = strings(&agent["args"], "args");
    assert_eq!(args, ["run", "/run/doic-agent/agent.toml"]);
    let script = str_of(&init["command"][2], "the init script");
    assert!(script.contains("/etc/doic-agent/agent.toml") && script.contains(args[1]));

    // Run the init script on the example as the pod would, for node
    // "node-7": each agent gets its own Diameter identity, and the result is
    // a configuration the agent accepts.
    let dir = scratch("init");
    let script = script
        .replace(
            "/etc/doic-agent/agent.toml",
            repo("deploy/agent.toml").to_str().unwrap(),
        )
        .replace(args[1], dir.join("agent.toml").to_str().unwrap());
    let ran = Command::new(str_of(&init["command"][0], "shell"))
        .args([str_of(&init["command"][1], "-c"), &script])
        .env("NODE_NAME", "node-7")
        .status()
        .unwrap();
    assert!(ran.success());
    check_config(&dir.join("agent.toml"));
    let node = Config::from_file(&dir.join("agent.toml")).unwrap().node;
    assert_eq!(node.origin_host, "node-7.agents.edge.example.com");
    assert_eq!(node.origin_realm, config.node.origin_realm);
}

/// `key=value` lines of one section of a unit file.
fn unit_keys<'a>(unit: &'a str, section: &str) -> Vec<(&'a str, &'a str)> {
    let mut inside = false;
    let mut keys = Vec::new();
    for line in unit.lines().map(str::trim) {
        if line.starts_with('[') {
            inside = line == section;
        } else if inside && !line.starts_with('#') && !line.is_empty() {
            let (k, v) = line.split_once('=').unwrap();
            keys.push((k, v));
        }
    }
    keys
}

#[test]
fn the_systemd_unit_is_hardened_and_systemd_analyze_verifies_it() {
    let unit = read("deploy/systemd/doic-agent.service");
    let service = unit_keys(&unit, "[Service]");
    let get = |k: &str| {
        service
            .iter()
            .find(|(key, _)| *key == k)
            .map(|(_, v)| *v)
            .unwrap_or_else(|| panic!("no {k}= in [Service]"))
    };
    assert_eq!(
        get("AmbientCapabilities"),
        "CAP_BPF CAP_NET_ADMIN CAP_PERFMON CAP_NET_BIND_SERVICE"
    );
    assert_eq!(get("CapabilityBoundingSet"), get("AmbientCapabilities"));
    assert_eq!(get("ExecReload"), "/bin/kill -HUP $MAINPID");
    assert_eq!(get("NoNewPrivileges"), "yes");
    assert_eq!(get("ProtectSystem"), "strict");
    assert_eq!(get("DynamicUser"), "yes");
    assert_eq!(get("User"), "doic-agent");
    assert!(get("ExecStart").starts_with("/usr/local/bin/doic-agent run "));
    let config = get("ExecStart").rsplit(' ').next().unwrap();
    assert_eq!(
        get("ExecStartPre"),
        format!("/usr/local/bin/doic-agent check-config {config}")
    );

    let have = Command::new("systemd-analyze")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !have {
        eprintln!(
            "systemd-analyze verify skipped: systemd-analyze is not installed (Debian package systemd)"
        );
        return;
    }
    // The unit as installed, with the binary where this build put it
    // (verify checks that each command exists).
    let dir = scratch("systemd");
    let file = dir.join("doic-agent.service");
    std::fs::write(&file, unit.replace("/usr/local/bin/doic-agent", BIN)).unwrap();
    let out = Command::new("systemd-analyze")
        .args(["verify", "--man=no", file.to_str().unwrap()])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stderr.is_empty(),
        "verify: {stderr}"
    );
    // Exposure 0 (locked down) .. 10 (unprotected); at most 3, "OK".
    let out = Command::new("systemd-analyze")
        .args(["security", "--offline=yes", "--threshold=30"])
        .arg(&file)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "security: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `doic_ebpf_attached` of the agent run as the unit runs it: user nobody,
/// no new privileges, `caps` (setpriv names: `bpf`, `net_admin`, ...) as its
/// ambient, inheritable and bounding sets.
fn attached_with(caps: &[String]) -> f64 {
    let dir = scratch("caps");
    let file = dir.join(format!("{}.toml", caps.join("-")));
    let config = "[node]\norigin_host = \"agent.example.com\"\norigin_realm = \"example.com\"\nlisten = [\"127.0.0.1:0\"]\nworkers = 1\n[metrics]\nlisten = \"127.0.0.1:0\"\n[ebpf]\ninterfaces = [\"lo\"]\n";
    std::fs::write(&file, config).unwrap();
    let set: String = caps.iter().map(|c| format!(",+{c}")).collect();
    let mut child = Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--no-new-privs",
        ])
        .arg(format!("--inh-caps=-all{set}"))
        .arg(format!("--ambient-caps=-all{set}"))
        .arg(format!("--bounding-set=-all{set}"))
        .args([BIN, "run"])
        .arg(&file)
        .env("RUST_LOG", "info")
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (lines, reader) = support::process::collect_lines(&mut child);
    // `listening` comes once the kernel telemetry has started, or not, and
    // names the metrics address.
    let t0 = Instant::now();
    let addr = loop {
        let listening = lines
            .lock()
            .unwrap()
            .iter()
            .find(|l| l.contains("doic_agent: listening"))
            .and_then(|l| {
                l.split("metrics=http://")
                    .nth(1)?
                    .split('/')
                    .next()
                    .map(str::to_owned)
            });
        if let Some(a) = listening {
            break a.parse().unwrap();
        }
        let log = lines.lock().unwrap().join("\n");
        assert!(t0.elapsed() < Duration::from_secs(10), "no start: {log}");
        assert!(child.try_wait().unwrap().is_none(), "exited: {log}");
        std::thread::sleep(Duration::from_millis(20));
    };
    let page = support::process::rt().block_on(http_get(addr, "/metrics"));
    let _ = child.kill();
    let _ = child.wait();
    let _ = reader.join();
    gauge(&page, "doic_ebpf_attached").unwrap_or_else(|| panic!("{page}"))
}

#[test]
fn the_units_capabilities_are_what_the_kernel_program_needs_and_each_is_needed() {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let setpriv = Command::new("setpriv")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !(root && setpriv && agent::ebpf::program_built()) {
        eprintln!(
            "capability check skipped: it needs root (to drop to nobody with given capabilities), setpriv and a binary with the kernel program (root {root}, setpriv {setpriv}, built {})",
            agent::ebpf::program_built()
        );
        return;
    }
    let unit = read("deploy/systemd/doic-agent.service");
    let ambient = unit_keys(&unit, "[Service]")
        .into_iter()
        .find(|(k, _)| *k == "AmbientCapabilities")
        .map(|(_, v)| v)
        .unwrap();
    let caps: Vec<String> = ambient
        .split(' ')
        .map(|c| c.strip_prefix("CAP_").unwrap().to_ascii_lowercase())
        .collect();
    assert_eq!(attached_with(&caps), 1.0, "attached with {ambient}");
    for needed in ["bpf", "net_admin", "perfmon"] {
        let fewer: Vec<String> = caps.iter().filter(|c| *c != needed).cloned().collect();
        assert_eq!(attached_with(&fewer), 0.0, "attached without {needed}");
    }
}

/// The Containerfile's instructions: (keyword, arguments), continuation
/// lines joined, comments dropped.
fn instructions(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut pending = String::new();
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('#') || (line.is_empty() && pending.is_empty()) {
            continue;
        }
        if let Some(head) = line.strip_suffix('\\') {
            pending += head;
            pending.push(' ');
            continue;
        }
        pending += line;
        let (k, rest) = pending.split_once(' ').unwrap_or((&pending, ""));
        out.push((k.to_ascii_uppercase(), rest.trim().to_owned()));
        pending.clear();
    }
    assert!(pending.is_empty(), "a continuation line ends the file");
    out
}

/// A working container engine and the base images present: the build
/// needs no network then.
fn engine(images: &[String]) -> Result<&'static str, String> {
    for engine in ["podman", "docker"] {
        let Ok(info) = Command::new(engine).arg("info").output() else {
            continue;
        };
        if !info.status.success() {
            return Err(format!(
                "{engine} is installed but its engine does not answer"
            ));
        }
        for image in images {
            let present = Command::new(engine)
                .args(["image", "inspect", image])
                .output()
                .is_ok_and(|o| o.status.success());
            if !present {
                return Err(format!(
                    "{engine}: base image {image} is not present locally"
                ));
            }
        }
        return Ok(engine);
    }
    Err("no podman or docker".into())
}

#[test]
fn the_containerfile_is_multi_stage_and_runs_unprivileged() {
    let text = read("deploy/container/Containerfile");
    let ins = instructions(&text);
    const KNOWN: &[&str] = &[
        "FROM",
        "ARG",
        "RUN",
        "COPY",
        "WORKDIR",
        "USER",
        "EXPOSE",
        "ENTRYPOINT",
        "CMD",
        "ENV",
        "LABEL",
    ];
    for (k, args) in &ins {
        assert!(
            KNOWN.contains(&k.as_str()),
            "unknown instruction {k} {args}"
        );
        assert!(!args.is_empty(), "{k} without arguments");
    }
    let mut args: Vec<(String, String)> = Vec::new();
    let subst = |s: &str, args: &[(String, String)]| {
        args.iter()
            .fold(s.to_owned(), |s, (k, v)| s.replace(&format!("${{{k}}}"), v))
    };
    let mut stages: Vec<(String, Vec<(String, String)>)> = Vec::new();
    for (k, rest) in &ins {
        match k.as_str() {
            "ARG" if stages.is_empty() => {
                let (name, value) = rest.split_once('=').unwrap_or((rest, ""));
                args.push((name.to_owned(), value.to_owned()));
            }
            "FROM" => {
                let (image, name) = rest
                    .split_once(" AS ")
                    .unwrap_or_else(|| panic!("FROM {rest} names no stage"));
                stages.push((name.trim().to_owned(), Vec::new()));
                stages
                    .last_mut()
                    .unwrap()
                    .1
                    .push((k.clone(), subst(image, &args)));
            }
            _ => stages
                .last_mut()
                .expect("an instruction before FROM")
                .1
                .push((k.clone(), rest.clone())),
        }
    }
    assert!(stages.len() >= 2, "multi-stage");
    let (build_name, build) = &stages[0];
    assert!(
        build.iter().any(|(k, a)| k == "RUN"
            && a.contains("cargo build --release --locked -p tools --bin doic-agent")),
        "the build stage builds the release binary"
    );
    let (_, run) = stages.last().unwrap();
    let user = run
        .iter()
        .rev()
        .find(|(k, _)| k == "USER")
        .map(|(_, a)| a.as_str())
        .expect("the final stage sets USER");
    let uid = user.split(':').next().unwrap();
    assert!(uid != "0" && uid != "root", "runs as {user}");
    let copies: Vec<&str> = run
        .iter()
        .filter(|(k, _)| k == "COPY")
        .map(|(_, a)| a.as_str())
        .collect();
    assert!(
        copies.contains(
            &format!("--from={build_name} /out/doic-agent /usr/local/bin/doic-agent").as_str()
        ),
        "{copies:?}"
    );
    for c in copies.iter().filter(|c| !c.starts_with("--from=")) {
        let src = c.split(' ').next().unwrap();
        assert!(repo(src).exists(), "COPY {src}: not in the repository");
    }
    let json = |k: &str| -> Vec<String> {
        let (_, a) = run.iter().find(|(key, _)| key == k).unwrap();
        serde_json::from_str(a).unwrap_or_else(|e| panic!("{k} {a}: not exec form: {e}"))
    };
    assert_eq!(json("ENTRYPOINT"), ["/usr/local/bin/doic-agent"]);
    assert_eq!(json("CMD"), ["run", "/etc/doic-agent/agent.toml"]);
    assert!(copies.contains(&"deploy/agent.toml /etc/doic-agent/agent.toml"));

    let images: Vec<String> = stages.iter().map(|(_, s)| s[0].1.clone()).collect();
    match engine(&images) {
        Ok(engine) => {
            let out = Command::new(engine)
                .args(["build", "-f", "deploy/container/Containerfile", "-t"])
                .args(["doic-agent:test", "."])
                .current_dir(repo(""))
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{engine} build: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Err(why) => eprintln!("Containerfile not built ({why}); its instructions were checked"),
    }
}
