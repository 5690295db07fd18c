//! The fake sysfs tree libibverbs discovers an emulated device through,
//! and its idempotent, concurrency-safe installation. The emulator names
//! the files ([`Tree::files`]); this module writes them.
//!
//! Paths are relative to the tree root (libibverbs' `SYSFS_PATH`). The
//! tree is built in a temporary sibling directory and renamed into place,
//! so readers never see a half-written tree and concurrent writers do not
//! clash (the loser of the rename discards its copy). The root carries a
//! marker file with the layout version and a hash of the contents; a tree
//! whose marker differs is replaced, a non-empty directory without a
//! marker is left alone (an error).

use std::fs;
use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};

/// One emulator's tree.
#[derive(Debug, Clone)]
pub struct Tree {
    /// The emulator's name (`mlx5-emu`): names the default location
    /// (`/tmp/<name>-<uid>/`) and the marker file (`.<name>-layout`).
    pub name: &'static str,
    /// The variable choosing the location (`MLX5_EMU_SYSFS`).
    pub env: &'static str,
    /// Bump when the set of files or their format changes.
    pub layout_version: u32,
    /// Every file of the tree: `(relative path, contents)`.
    pub files: Vec<(String, String)>,
}

impl Tree {
    /// The marker file at the root of a tree written by this emulator.
    pub fn marker(&self) -> String {
        format!(".{}-layout", self.name)
    }

    /// The layout stamp: version and a hash of every path and content, so any
    /// change of the tree yields a new stamp.
    pub fn stamp(&self) -> String {
        // FNV-1a, 64 bit: stable across builds and platforms.
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        let mut eat = |bytes: &[u8]| {
            for &b in bytes.iter().chain(std::iter::once(&0u8)) {
                h ^= u64::from(b);
                h = h.wrapping_mul(0x0000_0100_0000_01b3);
            }
        };
        for (p, c) in &self.files {
            eat(p.as_bytes());
            eat(c.as_bytes());
        }
        format!("v{}-{h:016x}", self.layout_version)
    }

    /// The default location: `/tmp/<name>-<uid>/sysfs-<stamp>`.
    pub fn default_root(&self) -> PathBuf {
        // SAFETY: getuid has no preconditions.
        let uid = unsafe { libc::getuid() };
        PathBuf::from(format!("/tmp/{}-{uid}", self.name)).join(format!("sysfs-{}", self.stamp()))
    }

    fn marker_of(&self, root: &Path) -> Option<String> {
        fs::read_to_string(root.join(self.marker())).ok()
    }

    /// Writes the whole tree (and the marker, last) under `dir`.
    fn write_tree(&self, dir: &Path, stamp: &str) -> io::Result<()> {
        for (rel, content) in &self.files {
            let path = dir.join(rel);
            if let Some(parent) = path.parent() {
                fs::create_dir_all(parent)?;
            }
            fs::write(&path, content)?;
        }
        fs::write(dir.join(self.marker()), format!("{stamp}\n"))
    }

    /// Makes `root` hold the current tree: returns at once if it already does,
    /// otherwise writes a copy next to it and renames it into place (replacing
    /// an older tree of ours).
    pub fn install(&self, root: &Path) -> io::Result<()> {
        let stamp = self.stamp();
        let want = format!("{stamp}\n");
        if self.marker_of(root).as_deref() == Some(want.as_str()) {
            return Ok(());
        }
        let parent = root
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        fs::create_dir_all(parent)?;
        let name = root
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let tmp = parent.join(unique(&format!("{name}.tmp")));
        fs::DirBuilder::new().mode(0o755).create(&tmp)?;
        if let Err(e) = self.write_tree(&tmp, &stamp) {
            let _ = fs::remove_dir_all(&tmp);
            return Err(e);
        }
        let result = self.place(root, &tmp, parent, &name, &want);
        if tmp.exists() {
            let _ = fs::remove_dir_all(&tmp);
        }
        result
    }

    /// Renames the finished copy `tmp` to `root`, coping with a tree that is
    /// already there (current: keep it; older of ours: replace it).
    fn place(
        &self,
        root: &Path,
        tmp: &Path,
        parent: &Path,
        name: &str,
        want: &str,
    ) -> io::Result<()> {
        for _ in 0..8 {
            if fs::rename(tmp, root).is_ok() {
                return Ok(());
            }
            // Something is in the way.
            match self.marker_of(root) {
                Some(m) if m == want => return Ok(()),
                Some(_) => {
                    // An older tree of ours: move it aside, then retry.
                    let old = parent.join(unique(&format!("{name}.old")));
                    if fs::rename(root, &old).is_ok() {
                        let _ = fs::remove_dir_all(&old);
                    }
                }
                None => {
                    // An empty directory may go; anything else is not ours.
                    if fs::remove_dir(root).is_err() && root.exists() {
                        return Err(io::Error::new(
                            io::ErrorKind::AlreadyExists,
                            format!(
                                "{} exists and is not an {} sysfs tree (no {}); \
                                 refusing to replace it",
                                root.display(),
                                self.name,
                                self.marker()
                            ),
                        ));
                    }
                }
            }
        }
        Err(io::Error::other(format!(
            "could not install the sysfs tree at {}",
            root.display()
        )))
    }

    /// The constructor's set-up: writes the tree where [`Tree::env`] says
    /// (or at [`Tree::default_root`]) and sets `SYSFS_PATH` to it unless
    /// already set. Returns the tree's location.
    pub fn setup(&self) -> io::Result<PathBuf> {
        let root = match std::env::var_os(self.env).filter(|v| !v.is_empty()) {
            Some(dir) => PathBuf::from(dir),
            None => {
                let root = self.default_root();
                if let Some(parent) = root.parent() {
                    ensure_private_dir(parent)?;
                }
                root
            }
        };
        self.install(&root)?;
        if std::env::var_os("SYSFS_PATH").is_none() {
            // Runs in the constructor, before the program's own threads exist.
            std::env::set_var("SYSFS_PATH", &root);
        }
        Ok(root)
    }
}

/// A name unique to this process and moment, for temporary siblings.
fn unique(tag: &str) -> String {
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() };
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!(".{tag}-{pid}-{nanos}")
}

/// Creates `/tmp/<name>-<uid>` (mode 0700) if needed and checks that it
/// is a real directory owned by us.
fn ensure_private_dir(dir: &Path) -> io::Result<()> {
    match fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    let md = fs::symlink_metadata(dir)?;
    // SAFETY: getuid has no preconditions.
    let uid = unsafe { libc::getuid() };
    if !md.is_dir() || md.uid() != uid {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!("{} is not a directory owned by uid {uid}", dir.display()),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree() -> Tree {
        Tree {
            name: "emu-core-test",
            env: "EMU_CORE_TEST_SYSFS",
            layout_version: 1,
            files: vec![
                ("class/infiniband_verbs/abi_version".into(), "6\n".into()),
                (
                    "class/infiniband_verbs/uverbs0/dev".into(),
                    "231:192\n".into(),
                ),
            ],
        }
    }

    fn scratch(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(unique(&format!("emu-core-test-{tag}")));
        fs::create_dir_all(&d).expect("scratch dir");
        d
    }

    #[test]
    fn install_is_idempotent_and_replaces_old_trees() {
        let t = tree();
        let base = scratch("install");
        let root = base.join("sysfs");
        t.install(&root).expect("first install");
        let dev = fs::read_to_string(root.join("class/infiniband_verbs/uverbs0/dev")).unwrap();
        assert_eq!(dev, "231:192\n");
        t.install(&root).expect("second install (no-op)");
        // An older tree of ours is replaced.
        fs::write(root.join(t.marker()), "v0-old\n").unwrap();
        fs::write(root.join("stale"), "x").unwrap();
        t.install(&root).expect("replacing an old tree");
        assert!(!root.join("stale").exists());
        assert_eq!(t.marker_of(&root), Some(format!("{}\n", t.stamp())));
        // A foreign non-empty directory is left alone.
        let foreign = base.join("foreign");
        fs::create_dir_all(&foreign).unwrap();
        fs::write(foreign.join("mine"), "keep").unwrap();
        assert!(t.install(&foreign).is_err());
        assert_eq!(fs::read_to_string(foreign.join("mine")).unwrap(), "keep");
        // No temporary siblings are left behind.
        let leftovers: Vec<_> = fs::read_dir(&base)
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().starts_with('.'))
            .collect();
        assert!(leftovers.is_empty(), "{leftovers:?}");
        fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn the_stamp_follows_the_contents() {
        let a = tree();
        let mut b = tree();
        b.files[0].1 = "7\n".into();
        assert_ne!(a.stamp(), b.stamp());
        assert_eq!(a.stamp(), tree().stamp());
    }
}
