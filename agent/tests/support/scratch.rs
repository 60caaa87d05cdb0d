//! A test's own directory under the system's temporary directory: created
//! empty, removed with what it holds when the test drops it (also when the
//! test fails), so that test runs leave nothing behind.

use std::path::{Path, PathBuf};

/// A directory `doic-NAME-PID`, removed on drop.
#[derive(Debug)]
pub struct Scratch(PathBuf);

impl Scratch {
    /// The empty directory for `name` (unique within the test binary).
    pub fn new(name: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("doic-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        Scratch(dir)
    }

    /// `contents` written to the file `name` in the directory; its path.
    pub fn file(&self, name: &str, contents: impl AsRef<[u8]>) -> PathBuf {
        let p = self.0.join(name);
        std::fs::write(&p, contents).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        p
    }
}

impl std::ops::Deref for Scratch {
    type Target = Path;

    fn deref(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
