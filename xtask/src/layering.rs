//! The layering of the workspace, held by a test (run by the `unit` stage)
//! rather than by hand: no cycle between the top-level modules of `agent`;
//! no clock read and no tokio, aya or quanta in `diameter` and `doic` (the
//! sans-io crates: time is an argument); no source file over
//! [`MAX_LINES`] lines in the crates of the product; no `mod.rs` in them
//! (one module-file style: `foo.rs` beside `foo/`).
//!
//! The scan is lexical: comments and string literals are blanked first, and
//! `#[cfg(test)]` items (and the files of `#[cfg(test)] mod x;`) are left
//! out of the checks of production code.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The longest source file the product's crates may hold.
pub(crate) const MAX_LINES: usize = 800;

/// Files allowed past [`MAX_LINES`], each with why a split would be worse.
/// Empty: every module is split along its seams.
const LONG_FILES_ALLOWED: &[(&str, &str)] = &[];

/// One source file of a crate: its module path below the crate root and its
/// code with comments and strings blanked.
#[derive(Debug)]
pub(crate) struct Source {
    /// The file, relative to the workspace.
    pub(crate) file: PathBuf,
    /// The module path (`["net", "conn"]` for `agent/src/net/conn.rs`); empty
    /// for the crate root.
    pub(crate) module: Vec<String>,
    /// The code, comments and literals blanked, line structure kept.
    pub(crate) code: String,
    /// Whether the file is a `#[cfg(test)]` module.
    pub(crate) test_only: bool,
}

/// Replaces comments and the contents of string and char literals with
/// spaces, keeping newlines (so that byte offsets give line numbers).
#[must_use]
pub(crate) fn blank(src: &str) -> String {
    let b = src.as_bytes();
    let mut out = b.to_vec();
    let mut i = 0;
    let space = |out: &mut Vec<u8>, from: usize, to: usize| {
        for c in &mut out[from..to] {
            if *c != b'\n' {
                *c = b' ';
            }
        }
    };
    while i < b.len() {
        match b[i] {
            b'/' if b.get(i + 1) == Some(&b'/') => {
                let end = src[i..].find('\n').map_or(b.len(), |n| i + n);
                space(&mut out, i, end);
                i = end;
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                let (mut depth, mut j) = (1, i + 2);
                while j < b.len() && depth > 0 {
                    if b[j] == b'/' && b.get(j + 1) == Some(&b'*') {
                        depth += 1;
                        j += 2;
                    } else if b[j] == b'*' && b.get(j + 1) == Some(&b'/') {
                        depth -= 1;
                        j += 2;
                    } else {
                        j += 1;
                    }
                }
                space(&mut out, i, j);
                i = j;
            }
            b'r' if matches!(b.get(i + 1), Some(b'#' | b'"'))
                && (i == 0 || !is_ident(b[i - 1])) =>
            {
                let hashes = b[i + 1..].iter().take_while(|&&c| c == b'#').count();
                if b.get(i + 1 + hashes) != Some(&b'"') {
                    i += 1;
                    continue;
                }
                let close = format!("\"{}", "#".repeat(hashes));
                let start = i + 2 + hashes;
                let end = src[start..]
                    .find(&close)
                    .map_or(b.len(), |n| start + n + close.len());
                space(&mut out, start, end.saturating_sub(close.len()).max(start));
                i = end;
            }
            b'"' => {
                let mut j = i + 1;
                while j < b.len() && b[j] != b'"' {
                    j += if b[j] == b'\\' { 2 } else { 1 };
                }
                space(&mut out, i + 1, j.min(b.len()));
                i = j + 1;
            }
            b'\'' => {
                // A char literal ('x', '\n', '\u{..}'), or a lifetime.
                let end = if b.get(i + 1) == Some(&b'\\') {
                    src[i + 2..].find('\'').map(|n| i + 2 + n)
                } else {
                    src[i + 1..]
                        .chars()
                        .next()
                        .map(|c| i + 1 + c.len_utf8())
                        .filter(|&e| b.get(e) == Some(&b'\''))
                };
                match end {
                    Some(e) => {
                        space(&mut out, i + 1, e);
                        i = e + 1;
                    }
                    None => i += 1,
                }
            }
            _ => i += 1,
        }
    }
    String::from_utf8(out).unwrap_or_default()
}

fn is_ident(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

/// The byte ranges of `#[cfg(test)]` items in blanked `code`: from the
/// attribute to the end of the item (its matching `}` or its `;`).
#[must_use]
pub(crate) fn test_items(code: &str) -> Vec<(usize, usize)> {
    let b = code.as_bytes();
    let mut ranges = Vec::new();
    let mut from = 0;
    while let Some(n) = code[from..].find("#[cfg(test)]") {
        let start = from + n;
        let mut j = start + "#[cfg(test)]".len();
        let mut depth = 0usize;
        while j < b.len() {
            match b[j] {
                b'{' => depth += 1,
                b'}' => {
                    depth = depth.saturating_sub(1);
                    if depth == 0 {
                        j += 1;
                        break;
                    }
                }
                b';' if depth == 0 => {
                    j += 1;
                    break;
                }
                _ => {}
            }
            j += 1;
        }
        ranges.push((start, j.min(b.len())));
        from = j.min(b.len());
    }
    ranges
}

/// `code` with its `#[cfg(test)]` items blanked.
#[must_use]
pub(crate) fn without_tests(code: &str) -> String {
    let mut out = code.as_bytes().to_vec();
    for (s, e) in test_items(code) {
        for c in &mut out[s..e] {
            if *c != b'\n' {
                *c = b' ';
            }
        }
    }
    String::from_utf8(out).unwrap_or_default()
}

/// The names of the modules `code` declares as `#[cfg(test)] mod name;`.
fn test_module_files(code: &str) -> Vec<String> {
    test_items(code)
        .into_iter()
        .filter_map(|(s, e)| {
            let item = code[s + "#[cfg(test)]".len()..e].trim();
            let rest = item.strip_suffix(';')?;
            let name = rest.split_whitespace().last()?;
            rest.split_whitespace()
                .any(|w| w == "mod")
                .then(|| name.to_owned())
        })
        .collect()
}

/// Every `.rs` file under `src` of `krate` (a directory of the workspace
/// `root`), with its module path.
///
/// # Errors
/// A file or directory that cannot be read.
pub(crate) fn sources(root: &Path, krate: &str) -> std::io::Result<Vec<Source>> {
    let src = root.join(krate).join("src");
    let mut files = Vec::new();
    walk(&src, &mut files)?;
    files.sort();
    let mut out = Vec::new();
    for path in files {
        let rel = path.strip_prefix(&src).unwrap_or(&path);
        let mut module: Vec<String> = rel
            .with_extension("")
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect();
        if matches!(module.last().map(String::as_str), Some("mod")) {
            module.pop();
        }
        if module.len() == 1 && matches!(module[0].as_str(), "lib" | "main") {
            module.clear();
        }
        let code = blank(&std::fs::read_to_string(&path)?);
        out.push(Source {
            file: path.strip_prefix(root).unwrap_or(&path).to_owned(),
            module,
            code,
            test_only: false,
        });
    }
    // A file is test-only when its module, or one above it, is declared
    // `#[cfg(test)] mod name;`.
    let test_mods: BTreeSet<Vec<String>> = out
        .iter()
        .flat_map(|s| {
            test_module_files(&s.code).into_iter().map(|n| {
                let mut m = s.module.clone();
                m.push(n);
                m
            })
        })
        .collect();
    for s in &mut out {
        s.test_only = test_mods.iter().any(|t| s.module.starts_with(t));
    }
    Ok(out)
}

fn walk(dir: &Path, files: &mut Vec<PathBuf>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            walk(&path, files)?;
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
    Ok(())
}

/// The line (from 1) of byte `at` in `code`.
fn line_of(code: &str, at: usize) -> usize {
    code[..at].bytes().filter(|&c| c == b'\n').count() + 1
}

/// The first segments of the paths after `prefix` at byte `at` of `code`:
/// `a` for `prefix::a::b`, `a` and `b` for `prefix::{a::x, b}`.
fn first_segments(code: &str, at: usize) -> Vec<String> {
    let rest = code[at..].trim_start();
    let ident = |s: &str| -> String {
        s.trim_start()
            .bytes()
            .take_while(|&c| is_ident(c))
            .map(char::from)
            .collect()
    };
    let Some(group) = rest.strip_prefix('{') else {
        return vec![ident(rest)];
    };
    let (mut depth, mut start, mut names) = (0usize, 0usize, Vec::new());
    for (k, c) in group.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => {
                names.push(ident(&group[start..k]));
                break;
            }
            '}' => depth -= 1,
            ',' if depth == 0 => {
                names.push(ident(&group[start..k]));
                start = k + 1;
            }
            _ => {}
        }
    }
    names.retain(|n| !n.is_empty());
    names
}

/// An edge of the module graph: `from` names `to` at `file:line`.
#[derive(Debug, Clone)]
pub(crate) struct Edge {
    /// Where.
    pub(crate) at: String,
}

/// The graph of the top-level modules of a crate: which names which, by
/// `crate::x` or `super::x` paths outside comments, strings and test code.
#[must_use]
pub(crate) fn module_graph(sources: &[Source]) -> BTreeMap<String, BTreeMap<String, Edge>> {
    let tops: BTreeSet<String> = sources
        .iter()
        .filter_map(|s| s.module.first().cloned())
        .collect();
    let mut graph: BTreeMap<String, BTreeMap<String, Edge>> = BTreeMap::new();
    for s in sources.iter().filter(|s| !s.test_only) {
        let Some(from) = s.module.first() else {
            continue;
        };
        let code = without_tests(&s.code);
        let b = code.as_bytes();
        let mut targets = Vec::new();
        for (n, _) in code.match_indices("crate::") {
            if n > 0 && (is_ident(b[n - 1]) || b[n - 1] == b'$') {
                continue;
            }
            for t in first_segments(&code, n + "crate::".len()) {
                targets.push((n, t));
            }
        }
        for (n, _) in code.match_indices("super::") {
            if n > 0 && (is_ident(b[n - 1]) || b[n - 1] == b':') {
                continue;
            }
            // `super::super::x` from `a::b::c` is `a::x`.
            let mut depth = s.module.len();
            let mut k = n;
            while code[k..].starts_with("super::") {
                depth = depth.saturating_sub(1);
                k += "super::".len();
            }
            if depth == 0 {
                for t in first_segments(&code, k) {
                    targets.push((n, t));
                }
            }
        }
        for (n, to) in targets {
            if &to != from && tops.contains(&to) {
                graph
                    .entry(from.clone())
                    .or_default()
                    .entry(to)
                    .or_insert_with(|| Edge {
                        at: format!("{}:{}", s.file.display(), line_of(&code, n)),
                    });
            }
        }
    }
    graph
}

/// A cycle of the graph, as the modules in order with where each names the
/// next, or `None`.
#[must_use]
pub(crate) fn find_cycle(graph: &BTreeMap<String, BTreeMap<String, Edge>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        graph: &BTreeMap<String, BTreeMap<String, Edge>>,
        state: &mut BTreeMap<String, u8>,
        stack: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        state.insert(node.to_owned(), 1);
        stack.push(node.to_owned());
        for (next, edge) in graph.get(node).into_iter().flatten() {
            match state.get(next.as_str()).copied().unwrap_or(0) {
                1 => {
                    let from = stack.iter().position(|m| m == next).unwrap_or(0);
                    let mut cycle: Vec<String> = Vec::new();
                    for w in stack[from..].windows(2) {
                        let at = &graph[&w[0]][&w[1]].at;
                        cycle.push(format!("{} -> {} ({at})", w[0], w[1]));
                    }
                    cycle.push(format!("{node} -> {next} ({})", edge.at));
                    return Some(cycle);
                }
                0 => {
                    if let Some(c) = visit(next, graph, state, stack) {
                        return Some(c);
                    }
                }
                _ => {}
            }
        }
        stack.pop();
        state.insert(node.to_owned(), 2);
        None
    }
    let mut state = BTreeMap::new();
    for node in graph.keys() {
        if state.get(node.as_str()).copied().unwrap_or(0) == 0 {
            let mut stack = Vec::new();
            if let Some(c) = visit(node, graph, &mut state, &mut stack) {
                return Some(c);
            }
        }
    }
    None
}

/// What a sans-io crate may not name: clock reads and the I/O crates.
const SANS_IO_FORBIDDEN: &[&str] = &["Instant::now", "SystemTime::now", "quanta", "tokio", "aya"];

/// Each place in production code of `sources` that names a forbidden path,
/// as `file:line: what`.
#[must_use]
pub(crate) fn sans_io_violations(sources: &[Source]) -> Vec<String> {
    let mut found = Vec::new();
    for s in sources.iter().filter(|s| !s.test_only) {
        let code = without_tests(&s.code);
        let b = code.as_bytes();
        for word in SANS_IO_FORBIDDEN {
            for (n, _) in code.match_indices(word) {
                let before = n.checked_sub(1).map(|k| b[k]);
                let after = b.get(n + word.len()).copied();
                if before.is_some_and(is_ident) || after.is_some_and(is_ident) {
                    continue;
                }
                found.push(format!(
                    "{}:{}: {word}",
                    s.file.display(),
                    line_of(&code, n)
                ));
            }
        }
    }
    found
}

/// The normal (not dev-, not build-) dependencies of a crate's manifest
/// that a sans-io crate may not have.
#[must_use]
pub(crate) fn sans_io_dependencies(manifest: &str) -> Vec<String> {
    let mut section = String::new();
    let mut found = Vec::new();
    for line in manifest.lines().map(str::trim) {
        if line.starts_with('[') {
            section = line.to_owned();
            continue;
        }
        if section != "[dependencies]" {
            continue;
        }
        let name = line.split(['=', '.', ' ']).next().unwrap_or("");
        if ["tokio", "aya", "quanta"].contains(&name) {
            found.push(name.to_owned());
        }
    }
    found
}

/// Each file of `sources` over [`MAX_LINES`] lines not in the allow-list,
/// as `file: N lines`.
///
/// # Errors
/// A file that cannot be read.
pub(crate) fn long_files(root: &Path, sources: &[Source]) -> std::io::Result<Vec<String>> {
    let mut found = Vec::new();
    for s in sources {
        let lines = std::fs::read_to_string(root.join(&s.file))?.lines().count();
        let name = s.file.to_string_lossy().into_owned();
        if lines > MAX_LINES && !LONG_FILES_ALLOWED.iter().any(|(f, _)| *f == name) {
            found.push(format!("{name}: {lines} lines"));
        }
    }
    Ok(found)
}

/// The crates whose sources hold one module-file style.
pub(crate) const PRODUCT_CRATES: &[&str] = &[
    "diameter",
    "doic",
    "agent",
    "agent-ebpf",
    "tools",
    "bench",
    "interop",
    "xtask",
];

/// Each `mod.rs` under the `src` of `crates`: a module with children is
/// `foo.rs` beside `foo/`, one style in every crate.
///
/// # Errors
/// A directory that cannot be read.
pub(crate) fn mod_rs_files(root: &Path, crates: &[&str]) -> std::io::Result<Vec<String>> {
    let mut found = Vec::new();
    for krate in crates {
        let src = root.join(krate).join("src");
        if !src.is_dir() {
            continue;
        }
        let mut files = Vec::new();
        walk(&src, &mut files)?;
        found.extend(
            files
                .iter()
                .filter(|f| f.file_name().is_some_and(|n| n == "mod.rs"))
                .map(|f| f.strip_prefix(root).unwrap_or(f).display().to_string()),
        );
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn root() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .expect("xtask sits in the workspace")
            .to_owned()
    }

    fn source(module: &[&str], code: &str) -> Source {
        Source {
            file: PathBuf::from(format!("{}.rs", module.join("/"))),
            module: module.iter().map(|m| (*m).to_owned()).collect(),
            code: blank(code),
            test_only: false,
        }
    }

    #[test]
    fn the_agent_modules_form_no_cycle() {
        let sources = sources(&root(), "agent").unwrap();
        let graph = module_graph(&sources);
        assert!(graph.len() > 5, "the scan sees the modules: {graph:?}");
        if let Some(cycle) = find_cycle(&graph) {
            panic!(
                "the top-level modules of agent form a cycle:\n  {}",
                cycle.join("\n  ")
            );
        }
    }

    #[test]
    fn the_sans_io_crates_read_no_clock_and_name_no_io_crate() {
        for krate in ["diameter", "doic"] {
            let sources = sources(&root(), krate).unwrap();
            assert!(!sources.is_empty());
            let found = sans_io_violations(&sources);
            assert!(
                found.is_empty(),
                "{krate} reads a clock or names tokio, aya or quanta:\n  {}",
                found.join("\n  ")
            );
            let manifest = std::fs::read_to_string(root().join(krate).join("Cargo.toml")).unwrap();
            let deps = sans_io_dependencies(&manifest);
            assert!(deps.is_empty(), "{krate} depends on {deps:?}");
        }
    }

    #[test]
    fn no_source_file_is_over_the_limit() {
        let mut found = Vec::new();
        for krate in ["diameter", "doic", "agent", "tools"] {
            found.extend(long_files(&root(), &sources(&root(), krate).unwrap()).unwrap());
            let tests = root().join(krate).join("tests");
            if tests.is_dir() {
                let mut files = Vec::new();
                walk(&tests, &mut files).unwrap();
                for f in files {
                    let lines = std::fs::read_to_string(&f).unwrap().lines().count();
                    if lines > MAX_LINES {
                        found.push(format!("{}: {lines} lines", f.display()));
                    }
                }
            }
        }
        assert!(
            found.is_empty(),
            "split these along a seam (or allow them in LONG_FILES_ALLOWED, saying why):\n  {}",
            found.join("\n  ")
        );
    }

    #[test]
    fn no_mod_rs_in_the_product_crates() {
        let found = mod_rs_files(&root(), PRODUCT_CRATES).unwrap();
        assert!(
            found.is_empty(),
            "rename each to foo.rs beside foo/ (git mv):\n  {}",
            found.join("\n  ")
        );
    }

    // The checks themselves, on made-up code: each must be able to fail.

    #[test]
    fn a_mod_rs_is_found() {
        let dir = std::env::temp_dir().join(format!("layering-mod-rs-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("k/src/a")).unwrap();
        std::fs::write(dir.join("k/src/a/mod.rs"), "").unwrap();
        std::fs::write(dir.join("k/src/b.rs"), "").unwrap();
        let found = mod_rs_files(&dir, &["k"]).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(found, ["k/src/a/mod.rs"]);
    }

    #[test]
    fn a_cycle_is_found_and_named_with_where() {
        let s = [
            source(&["a"], "use crate::b::X;\n"),
            source(&["b", "c"], "fn f() { super::super::a::g() }\n"),
            source(&["d"], "use crate::{a, b::Y};\n"),
        ];
        let graph = module_graph(&s);
        let cycle = find_cycle(&graph).expect("a -> b -> a");
        assert_eq!(cycle, ["a -> b (a.rs:1)", "b -> a (b/c.rs:1)"], "{graph:?}");
        // Without the path back there is none; comments, strings and test
        // code do not count.
        let s = [
            source(&["a"], "use crate::b::X;\n"),
            source(
                &["b"],
                "// crate::a\nconst S: &str = \"crate::a\";\n#[cfg(test)]\nmod tests { use crate::a; }\n",
            ),
        ];
        assert!(find_cycle(&module_graph(&s)).is_none());
    }

    #[test]
    fn clock_reads_and_io_crates_are_found_outside_tests_only() {
        let s = [source(
            &["x"],
            "fn f() { let t = std::time::Instant::now(); }\nuse tokio::time;\n#[cfg(test)]\nmod tests { fn g() { quanta::Instant::now(); } }\n/* aya */ fn aya_like() {}\n",
        )];
        assert_eq!(
            sans_io_violations(&s),
            ["x.rs:1: Instant::now", "x.rs:2: tokio"]
        );
        assert_eq!(
            sans_io_dependencies(
                "[dependencies]\ntokio.workspace = true\nbytes = \"1\"\n[dev-dependencies]\naya = \"1\"\n"
            ),
            ["tokio"]
        );
    }

    #[test]
    fn blanking_keeps_code_and_lines() {
        let code =
            "let a = 'x'; // c\nlet s = r#\"crate::a\"#; fn f<'a>(x: &'a str) {}\n/* x\n y */ z";
        let b = blank(code);
        assert_eq!(b.lines().count(), code.lines().count());
        assert!(!b.contains("crate::a") && !b.contains("// c") && !b.contains('y'));
        assert!(b.contains("fn f<'a>(x: &'a str)") && b.ends_with(" z"));
    }
}
