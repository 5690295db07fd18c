//! Helpers for this crate's unit tests: scratch sysfs-like trees.

use std::fs;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};

/// A scratch directory, removed on drop.
pub(crate) struct TempTree(pub(crate) PathBuf);

impl TempTree {
    /// A new empty directory under the system temp dir.
    pub(crate) fn new(tag: &str) -> TempTree {
        static N: AtomicU32 = AtomicU32::new(0);
        let p = std::env::temp_dir().join(format!(
            "verbs-test-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = fs::remove_dir_all(&p);
        fs::create_dir_all(&p).unwrap();
        TempTree(p)
    }

    /// Writes `content` to `rel`, creating its parent directories.
    pub(crate) fn file(&self, rel: &str, content: &str) {
        let p = self.0.join(rel);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, content).unwrap();
    }

    /// Creates the directory `rel`.
    pub(crate) fn dir(&self, rel: &str) {
        fs::create_dir_all(self.0.join(rel)).unwrap();
    }
}

impl Drop for TempTree {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// fd 0's identity and flags, to see that nothing adopted, changed or
/// closed it.
pub(crate) fn fd0_state() -> Option<(u64, u64, i32)> {
    let st = nix::sys::stat::fstat(0).ok()?;
    let flags = nix::fcntl::fcntl(0, nix::fcntl::FcntlArg::F_GETFL).unwrap_or(-1);
    Some((st.st_dev, st.st_ino, flags))
}
