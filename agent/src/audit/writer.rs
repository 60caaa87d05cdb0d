//! The one writer of the audit log: a thread that, every `flush_ms`, takes
//! what the feed holds and appends it, one JSON object per line, to the
//! current file of the directory, then flushes. Files are
//! `audit-NNNNNNNN.jsonl`, numbered on across restarts (a restart begins a
//! new file with a `start` record); a file that reaches `max_file_bytes` is
//! closed and the next begun; beyond `max_files` the oldest are removed.
//!
//! Lines that found the feed full are written as a `gap` record, by kind,
//! at the next flush ([`doic::audit::record::GapEntry`]): the log says where
//! it is incomplete, and its lines + the gaps' counts = the records
//! produced.
//!
//! A write that fails is logged (warn, with the file and the cause) and its
//! lines are counted as lost; the writer carries on with a new file.

use std::fs::{self, File, OpenOptions};
use std::io::{self, BufWriter, Write as _};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use doic::audit::record::{GapEntry, Line, Record, StartEntry};

use super::{AuditLog, Section};

/// The log could not be started.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    /// The directory could not be created or read.
    #[error("audit.dir {}: cannot use the directory", dir.display())]
    Dir {
        /// The directory.
        dir: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// A file could not be opened.
    #[error("cannot open audit file {}", path.display())]
    Open {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// The writer thread could not be started.
    #[error("cannot start the audit writer thread")]
    Thread(#[source] io::Error),
}

/// The name of the `index`th file.
#[must_use]
pub fn file_name(index: u64) -> String {
    format!("audit-{index:08}.jsonl")
}

/// The index of a file name of the log, if it is one.
#[must_use]
pub fn file_index(name: &str) -> Option<u64> {
    name.strip_prefix("audit-")?
        .strip_suffix(".jsonl")?
        .parse()
        .ok()
}

/// The log files of `dir`, oldest first.
///
/// # Errors
/// The directory cannot be read.
pub fn files(dir: &Path) -> io::Result<Vec<(u64, PathBuf)>> {
    let mut v: Vec<(u64, PathBuf)> = fs::read_dir(dir)?
        .filter_map(Result::ok)
        .filter_map(|e| Some((file_index(e.file_name().to_str()?)?, e.path())))
        .collect();
    v.sort();
    Ok(v)
}

/// The files being written.
struct Files {
    dir: PathBuf,
    index: u64,
    out: BufWriter<File>,
    size: u64,
    max_file_bytes: u64,
    max_files: usize,
}

impl Files {
    fn open(dir: &Path, section: &Section) -> Result<Self, WriteError> {
        let dir_err = |source| WriteError::Dir {
            dir: dir.to_owned(),
            source,
        };
        fs::create_dir_all(dir).map_err(dir_err)?;
        let last = files(dir).map_err(dir_err)?.last().map_or(0, |(i, _)| *i);
        let (out, _) = Self::create(dir, last + 1)?;
        let f = Self {
            dir: dir.to_owned(),
            index: last + 1,
            out,
            size: 0,
            max_file_bytes: section.max_file_bytes,
            max_files: section.max_files,
        };
        f.retain();
        Ok(f)
    }

    fn create(dir: &Path, index: u64) -> Result<(BufWriter<File>, PathBuf), WriteError> {
        let path = dir.join(file_name(index));
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(|source| WriteError::Open {
                path: path.clone(),
                source,
            })?;
        Ok((BufWriter::with_capacity(64 * 1024, file), path))
    }

    fn path(&self) -> PathBuf {
        self.dir.join(file_name(self.index))
    }

    /// Appends one line; rotates first when the file is full.
    fn append(&mut self, line: &[u8]) -> io::Result<()> {
        if self.size > 0 && self.size + line.len() as u64 + 1 > self.max_file_bytes {
            self.rotate()?;
        }
        self.out.write_all(line)?;
        self.out.write_all(b"\n")?;
        self.size += line.len() as u64 + 1;
        Ok(())
    }

    fn rotate(&mut self) -> io::Result<()> {
        self.out.flush()?;
        let (out, _) = Self::create(&self.dir, self.index + 1).map_err(io::Error::other)?;
        self.index += 1;
        self.out = out;
        self.size = 0;
        self.retain();
        Ok(())
    }

    /// Removes the oldest files beyond `max_files`.
    fn retain(&self) {
        let Ok(all) = files(&self.dir) else {
            return;
        };
        let excess = all.len().saturating_sub(self.max_files);
        for (_, path) in all.into_iter().take(excess) {
            if let Err(e) = fs::remove_file(&path) {
                tracing::warn!(file = %path.display(), cause = %e, "cannot remove an old audit file");
            }
        }
    }
}

/// The writer thread.
#[derive(Debug)]
pub struct Writer {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Writer {
    /// Opens a new file in `section.dir`, writes the `start` record of an
    /// agent with `workers` workers, and starts the thread.
    ///
    /// # Errors
    /// The directory or file cannot be used, or the thread not started.
    pub fn spawn(
        log: Arc<AuditLog>,
        section: &Section,
        workers: usize,
    ) -> Result<Self, WriteError> {
        let dir = section.dir.clone().unwrap_or_default();
        let mut files = Files::open(&dir, section)?;
        let _ = log.dir.set(dir);
        let start = Line::new(
            &log.identity,
            log.unix_ms(log.origin),
            Record::Start(StartEntry { workers }),
        );
        write_lines(&log, &mut files, std::iter::once(start));
        let stop = Arc::new(AtomicBool::new(false));
        let every = Duration::from_millis(section.flush_ms);
        let s = stop.clone();
        let thread = std::thread::Builder::new()
            .name("audit-writer".into())
            .spawn(move || {
                tracing::info!(file = %files.path().display(), "audit log open");
                let mut next = Instant::now() + every;
                let mut seen = GapEntry::default();
                loop {
                    let stopping = s.load(Ordering::Relaxed);
                    if stopping || Instant::now() >= next {
                        let gap = log.gap_since(&mut seen).map(|g| {
                            tracing::warn!(lost = g.total(), file = %files.path().display(), cause = "feed full", "audit log gap: records lost");
                            Line::new(&log.identity, log.unix_ms(Instant::now()), Record::Gap(g))
                        });
                        write_lines(&log, &mut files, gap.into_iter().chain(log.drain()));
                        next = Instant::now() + every;
                    }
                    if stopping {
                        return;
                    }
                    std::thread::sleep(every.min(Duration::from_millis(20)));
                }
            })
            .map_err(WriteError::Thread)?;
        Ok(Self {
            stop,
            thread: Some(thread),
        })
    }

    /// Writes what is fed, flushes and ends the thread (idempotent).
    pub fn stop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        self.stop();
    }
}

fn write_lines(log: &AuditLog, files: &mut Files, lines: impl Iterator<Item = Line>) {
    let mut n = 0;
    let mut buf = Vec::with_capacity(512);
    for line in lines {
        buf.clear();
        if serde_json::to_writer(&mut buf, &line).is_err() {
            continue;
        }
        if let Err(e) = files.append(&buf) {
            tracing::warn!(file = %files.path().display(), cause = %e, "audit log write failed, line lost");
            continue;
        }
        n += 1;
    }
    if let Err(e) = files.out.flush() {
        tracing::warn!(file = %files.path().display(), cause = %e, "audit log flush failed");
    }
    log.note_written(n);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("doic-audit-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn files_rotate_by_size_and_the_oldest_go_beyond_the_retention() {
        let d = dir("rotate");
        let section = Section {
            dir: Some(d.clone()),
            max_file_bytes: 4096,
            max_files: 3,
            flush_ms: 10,
            ..Section::default()
        };
        let log = Arc::new(AuditLog::new("agent.example", Instant::now(), 10_000));
        let mut w = Writer::spawn(log.clone(), &section, 2).unwrap();
        for _ in 0..1000 {
            log.send(Instant::now(), Record::Start(StartEntry { workers: 9 }));
        }
        w.stop();
        let all = files(&d).unwrap();
        assert_eq!(all.len(), 3, "retention: {all:?}");
        for (_, p) in &all {
            assert!(fs::metadata(p).unwrap().len() <= 4096);
        }
        assert_eq!(log.written(), 1001);
        assert_eq!(log.produced(), 1000, "the start line is the writer's own");
        // A restart begins the next file.
        let last = all.last().unwrap().0;
        let mut w = Writer::spawn(log, &section, 2).unwrap();
        w.stop();
        assert_eq!(files(&d).unwrap().last().unwrap().0, last + 1);
        let _ = fs::remove_dir_all(&d);
    }

    #[test]
    fn what_a_full_feed_lost_is_a_gap_line_by_kind() {
        use doic::audit::record::SecondEntry;
        let d = dir("gap");
        let section = Section {
            dir: Some(d.clone()),
            // Nothing written before `stop`: all five are sent first.
            flush_ms: 60_000,
            ..Section::default()
        };
        let log = Arc::new(AuditLog::new("agent.example", Instant::now(), 2));
        let mut w = Writer::spawn(log.clone(), &section, 1).unwrap();
        for _ in 0..5 {
            log.send(Instant::now(), Record::Second(SecondEntry::default()));
        }
        w.stop();
        let (lines, bad) = super::super::read::read_dir(&d).unwrap();
        assert!(bad.is_empty(), "{bad:?}");
        let kinds: Vec<&Record> = lines.iter().map(|l| &l.record).collect();
        let gap = GapEntry {
            second: 3,
            ..GapEntry::default()
        };
        assert!(matches!(kinds[0], Record::Start(_)));
        assert_eq!(kinds[1], &Record::Gap(gap), "before what was kept");
        assert_eq!(kinds.len(), 4, "start, gap, the two kept: {kinds:?}");
        assert_eq!(log.written(), 4);
        assert_eq!(log.produced(), 5);
        assert_eq!(log.dropped(), 3);
        let _ = fs::remove_dir_all(&d);
    }

    #[test]
    fn file_names_sort_and_read_back() {
        assert_eq!(file_name(7), "audit-00000007.jsonl");
        assert_eq!(file_index("audit-00000007.jsonl"), Some(7));
        assert_eq!(file_index("audit-7.json"), None);
        assert_eq!(file_index("other.jsonl"), None);
    }
}
