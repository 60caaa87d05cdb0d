//! The `decode` and `encode` subcommands, run as the built binary: the JSON
//! shape, `encode(decode(x)) == x` on real messages, and one-line errors
//! with exit status 1 for malformed input (RFC 6733 §7.1 Result-Codes).

use std::io::Write;
use std::process::{Command, Output, Stdio};

#[path = "../../agent/tests/support/scratch.rs"]
#[expect(
    unreachable_pub,
    reason = "shared with the agent's tests, where it is a public module"
)]
mod scratch;
use scratch::Scratch;

const SAMPLES: &[&str] = &[
    "cer",
    "dwr",
    "test-request",
    "test-answer",
    "throttled-answer",
];

fn sample(name: &str) -> String {
    let p = format!("{}/tests/data/{name}.hex", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(p).unwrap().trim().to_string()
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

fn run(args: &[&str], stdin: &[u8]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_doic-agent"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    input.write_all(stdin).unwrap();
    drop(input);
    child.wait_with_output().unwrap()
}

fn ok_stdout(o: &Output) -> String {
    assert!(
        o.status.success(),
        "stderr: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout.clone()).unwrap()
}

/// Exit status 1, nothing on stdout, exactly one line on stderr, no panic.
fn one_line_error(o: &Output) -> String {
    assert_eq!(
        o.status.code(),
        Some(1),
        "stdout: {}",
        String::from_utf8_lossy(&o.stdout)
    );
    assert!(o.stdout.is_empty());
    let err = String::from_utf8(o.stderr.clone()).unwrap();
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(!err.contains("panicked"), "{err}");
    err
}

#[test]
fn decode_prints_the_documented_json() {
    let out = ok_stdout(&run(&["decode", &sample("cer")], b""));
    let j: serde_json::Value = serde_json::from_str(&out).unwrap();
    let h = &j["header"];
    assert_eq!(h["version"], 1);
    assert_eq!(h["length"], 236);
    assert_eq!(h["flags"]["request"], true);
    assert_eq!(h["flags"]["proxiable"], false);
    assert_eq!(h["flags"]["error"], false);
    assert_eq!(h["flags"]["retransmit"], false);
    assert_eq!(h["command_code"], 257);
    assert_eq!(h["application_id"], 0);
    assert_eq!(h["hop_by_hop"], 0x1234_5678);
    assert_eq!(h["end_to_end"], 0x9abc_def0u32);
    let avps = j["avps"].as_array().unwrap();
    assert_eq!(avps[0]["code"], 264);
    assert_eq!(avps[0]["vendor_id"], serde_json::Value::Null);
    assert_eq!(avps[0]["flags"]["mandatory"], true);
    assert_eq!(avps[0]["flags"]["vendor"], false);
    assert_eq!(avps[0]["flags"]["protected"], false);
    assert_eq!(avps[0]["name"], "Origin-Host");
    assert_eq!(avps[0]["type"], "DiameterIdentity");
    assert_eq!(avps[0]["value"], "client.example.org");
    assert_eq!(avps[3]["value"], "::1");
    let vsai = avps
        .iter()
        .find(|a| a["name"] == "Vendor-Specific-Application-Id")
        .unwrap();
    assert!(vsai.get("value").is_none());
    assert_eq!(vsai["avps"][0]["value"], 999_999);
}

#[test]
fn decode_distinguishes_3gpp_and_doic_avps_and_keeps_u64_exact() {
    let out = ok_stdout(&run(&["decode", &sample("test-answer")], b""));
    let j: serde_json::Value = serde_json::from_str(&out).unwrap();
    let avps = j["avps"].as_array().unwrap();
    let olr = avps.iter().find(|a| a["code"] == 623).unwrap();
    assert_eq!(olr["name"], "OC-OLR");
    assert_eq!(olr["avps"][0]["value"].as_u64(), Some(u64::MAX));
    let test_avp = avps.iter().find(|a| a["vendor_id"] == 999_999).unwrap();
    assert_eq!(test_avp["name"], "Test-AVP");
    assert_eq!(test_avp["value"], -12345);
    let out = ok_stdout(&run(&["decode", &sample("test-request")], b""));
    let j: serde_json::Value = serde_json::from_str(&out).unwrap();
    let unknown = j["avps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["code"] == 4242)
        .unwrap();
    assert_eq!(unknown["name"], serde_json::Value::Null);
    assert_eq!(unknown["type"], "OctetString");
    assert_eq!(unknown["value"], "deadbeef01");
}

#[test]
fn encode_of_decode_is_the_identity_on_every_sample() {
    for name in SAMPLES {
        let hex = sample(name);
        let json = ok_stdout(&run(&["decode", &hex], b""));
        let back = ok_stdout(&run(&["encode"], json.as_bytes()));
        assert_eq!(back.trim(), hex, "{name}");
    }
}

#[test]
fn decode_reads_stdin_hex_stdin_binary_and_files() {
    let hex = sample("dwr");
    let expect = ok_stdout(&run(&["decode", &hex], b""));
    assert_eq!(
        ok_stdout(&run(&["decode"], format!("{hex}\n").as_bytes())),
        expect
    );
    assert_eq!(ok_stdout(&run(&["decode"], &unhex(&hex))), expect);
    let dir = Scratch::new("cli-codec");
    let bin = dir.file("dwr.bin", unhex(&hex));
    assert_eq!(
        ok_stdout(&run(&["decode", "--file", bin.to_str().unwrap()], b"")),
        expect
    );
    let json = dir.file("dwr.json", &expect);
    assert_eq!(
        ok_stdout(&run(&["encode", "--file", json.to_str().unwrap()], b"")).trim(),
        hex
    );
}

#[test]
fn malformed_messages_fail_with_offset_and_result_code() {
    let hex = sample("dwr");
    // truncated: the header says 80 bytes
    let err = one_line_error(&run(&["decode", &hex[..hex.len() - 8]], b""));
    assert!(err.contains("offset 1") && err.contains("5015"), "{err}");
    // Origin-Host AVP Length 7 (below the 8-byte header)
    let mut b = unhex(&hex);
    b[20 + 7] = 7;
    let bad: String = b.iter().map(|x| format!("{x:02x}")).collect();
    let err = one_line_error(&run(&["decode", &bad], b""));
    assert!(
        err.contains("offset 20")
            && err.contains("5014")
            && err.contains("DIAMETER_INVALID_AVP_LENGTH"),
        "{err}"
    );
    // version 2
    let err = one_line_error(&run(&["decode", &format!("02{}", &hex[2..])], b""));
    assert!(err.contains("offset 0") && err.contains("5011"), "{err}");
    // E bit on a request
    let mut b = unhex(&hex);
    b[4] |= 0x20;
    let bad: String = b.iter().map(|x| format!("{x:02x}")).collect();
    let err = one_line_error(&run(&["decode", &bad], b""));
    assert!(err.contains("offset 4") && err.contains("3008"), "{err}");
    // grammar check: a DWR without Origin-Realm
    let j = ok_stdout(&run(&["decode", &hex], b""));
    let mut doc: serde_json::Value = serde_json::from_str(&j).unwrap();
    doc["avps"].as_array_mut().unwrap().remove(1);
    let no_realm = ok_stdout(&run(&["encode"], doc.to_string().as_bytes()));
    let err = one_line_error(&run(&["decode", "--check", no_realm.trim()], b""));
    assert!(
        err.contains("5005") && err.contains("Origin-Realm"),
        "{err}"
    );
}

#[test]
fn bad_text_input_fails_with_one_line() {
    let err = one_line_error(&run(&["decode", "01zz"], b""));
    assert!(err.contains("hex") && err.contains("character 2"), "{err}");
    one_line_error(&run(&["decode"], b""));
    let err = one_line_error(&run(&["encode"], b"{\"header\": "));
    assert!(err.contains("invalid json"), "{err}");
    let err = one_line_error(&run(
        &["encode"],
        br#"{"header":{"command_code":280},"avps":[{"code":264,"value":7}]}"#,
    ));
    assert!(err.contains("avps[0].value"), "{err}");
    let err = one_line_error(&run(&["decode", "--file", "/nonexistent/doic"], b""));
    assert!(err.contains("/nonexistent/doic"), "{err}");
}

#[test]
fn random_garbage_never_panics() {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for n in 0..40 {
        let mut b = vec![1u8];
        for _ in 0..(n * 7 % 90) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            b.push(x as u8);
        }
        let o = run(&["decode"], &b);
        assert!(!String::from_utf8_lossy(&o.stderr).contains("panicked"));
        assert!(o.status.code() == Some(0) || o.status.code() == Some(1));
    }
}

#[test]
fn the_readme_sample_decodes_and_round_trips() {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md")).unwrap();
    let line = readme
        .lines()
        .find(|l| l.starts_with("cargo run --release --bin doic-agent -- decode "))
        .expect("README's decode command");
    let hex = line.rsplit(' ').next().unwrap();
    let json = ok_stdout(&run(&["decode", "--check", hex], b""));
    let j: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(j["header"]["command"], "Capabilities-Exchange-Request");
    assert_eq!(ok_stdout(&run(&["encode"], json.as_bytes())).trim(), hex);
}

/// Exit status 2, nothing on stdout, clap's whole message on stderr.
fn usage_error(args: &[&str]) -> String {
    let o = run(args, b"");
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    assert!(o.stdout.is_empty());
    String::from_utf8(o.stderr).unwrap()
}

#[test]
fn a_bad_command_line_prints_what_is_wrong_and_the_usage() {
    assert_eq!(
        usage_error(&["decode", "--bogus"]),
        "error: unexpected argument '--bogus' found\n\n  tip: to pass '--bogus' as a value, use '-- --bogus'\n\nUsage: doic-agent decode [OPTIONS] [HEX]\n\nFor more information, try '--help'.\n"
    );
    for cmd in ["run", "check-config"] {
        assert_eq!(
            usage_error(&[cmd]),
            format!(
                "error: the following required arguments were not provided:\n  <FILE|--config <FILE>>\n\nUsage: doic-agent {cmd} <FILE|--config <FILE>>\n\nFor more information, try '--help'.\n"
            )
        );
    }
    let err = usage_error(&["run", "a.toml", "--log-format", "xml"]);
    assert!(
        err.starts_with("error: invalid value 'xml' for '--log-format <FORMAT>'\n"),
        "{err}"
    );
    assert!(err.contains("[possible values: text, json]"), "{err}");
    let o = run(&["run", "a.toml", "--log-level", "loud"], b"");
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(
        String::from_utf8(o.stderr).unwrap(),
        "doic-agent: --log-level loud: `loud` is not a level (expected a level such as `info`, or directives such as `info,agent::net=debug`)\n"
    );
}

const NODE: &str = "[node]\norigin_host = \"agent.example.com\"\norigin_realm = \"example.com\"\n";

#[test]
fn check_config_takes_the_file_as_run_does_either_way() {
    let dir = Scratch::new("cli-check-config");
    let good = dir.file(
        "good.toml",
        format!("{NODE}listen = [\"127.0.0.1:3868\"]\nworkers = 1\n"),
    );
    let path = good.to_str().unwrap();
    let expected = format!("{path}: ok (0 peers, 0 routes, 1 workers)\n");
    for args in [
        ["check-config", path, ""],
        ["check-config", "--config", path],
    ] {
        let args: Vec<&str> = args.into_iter().filter(|a| !a.is_empty()).collect();
        let out = run(&args, b"");
        assert!(out.status.success(), "{out:?}");
        assert!(out.stderr.is_empty());
        assert_eq!(String::from_utf8(out.stdout).unwrap(), expected);
    }
}

#[test]
fn check_config_refuses_what_run_would_refuse_in_one_precise_line() {
    let cases = [
        (
            "empty.toml",
            "listen = []\n",
            "node.listen: is empty and no [[peer]] has a connect address: the agent would neither accept nor open a connection",
        ),
        (
            "twice.toml",
            "listen = [\"127.0.0.1:3868\", \"[::1]:3868\", \"127.0.0.1:3868\"]\n",
            "node.listen[2]: 127.0.0.1:3868 overlaps node.listen[0] (127.0.0.1:3868)",
        ),
        (
            "wildcard.toml",
            "listen = [\"127.0.0.1:3868\", \"[::]:3868\"]\n",
            "node.listen[1]: [::]:3868 overlaps node.listen[0] (127.0.0.1:3868)",
        ),
        (
            "metrics.toml",
            "listen = [\"0.0.0.0:3868\"]\n[metrics]\nlisten = \"127.0.0.1:3868\"\n",
            "metrics.listen: 127.0.0.1:3868 is a Diameter listener too (node.listen[0] = 0.0.0.0:3868)",
        ),
        (
            "workers.toml",
            "listen = [\"127.0.0.1:3868\"]\nworkers = \"two\"\n",
            "node.workers (line 5, column 11): invalid type: string \"two\", expected a whole number (0 or more)",
        ),
        (
            "address.toml",
            "listen = [\"localhost\"]\n",
            "node.listen (line 4, column 11): invalid socket address syntax",
        ),
    ];
    let dir = Scratch::new("cli-refuses");
    for (name, tail, why) in cases {
        let file = dir.file(name, format!("{NODE}{tail}"));
        let out = run(&["check-config", file.to_str().unwrap()], b"");
        let err = one_line_error(&out);
        assert_eq!(
            err,
            format!("doic-agent: {}: {why}\n", file.display()),
            "{name}"
        );
        // `run` refuses it with the same words, before binding anything.
        let o = run(
            &["run", file.to_str().unwrap(), "--log-format", "json"],
            b"",
        );
        assert_eq!(o.status.code(), Some(1), "{name}: {o:?}");
        let line: serde_json::Value = serde_json::from_slice(&o.stderr).unwrap();
        assert_eq!(line["fields"]["message"], "cannot run the agent");
        assert_eq!(
            line["fields"]["cause"],
            format!("{}: {why}", file.display()),
            "{name}"
        );
    }
    // Distinct ports, an IPv4 wildcard beside IPv6 loopback, port 0 twice:
    // all bindable, all accepted.
    let ok = dir.file(
        "ok.toml",
        format!(
            "{NODE}listen = [\"0.0.0.0:3868\", \"[::1]:3868\", \"127.0.0.1:0\", \"127.0.0.1:0\"]\n[metrics]\nlisten = \"127.0.0.1:9464\"\n"
        ),
    );
    assert!(
        run(&["check-config", ok.to_str().unwrap()], b"")
            .status
            .success()
    );
}

#[test]
fn run_names_the_listener_it_cannot_bind() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let dir = Scratch::new("cli-taken");
    let file = dir.file(
        "taken.toml",
        format!("{NODE}listen = [\"127.0.0.1:0\"]\n[metrics]\nlisten = \"127.0.0.1:{port}\"\n"),
    );
    let o = run(&["run", "--config", file.to_str().unwrap()], b"");
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    let err = String::from_utf8(o.stderr).unwrap();
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(!err.contains('\u{1b}'), "{err}");
    assert!(
        err.contains(&format!(
            "ERROR doic_agent: cannot run the agent cause=metrics.listen: cannot listen on 127.0.0.1:{port}: Address already in use (os error 98)"
        )),
        "{err}"
    );
}
