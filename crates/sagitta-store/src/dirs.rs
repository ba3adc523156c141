//! A collection's directory as a whole: removing it durably. Through the
//! fault-injected I/O layer ([`crate::fault`]) like every other file call
//! of the store.
//!
//! [`collections_in`] lists a data directory (one collection per
//! subdirectory). Removing is: rename the directory to a tombstone name in its parent (a
//! hidden name, `.dropped-…`, never a collection's), fsync the parent (from
//! here on the collection is gone, even after a crash), delete the
//! tombstone's files, fsync the parent again. Tombstones an interrupted
//! removal left behind are deleted by [`clean_tombstones`] (the server runs
//! it when it opens its data directory).

use crate::collection::Collection;
use crate::error::{io, Result};
use crate::fault;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// The prefix of a tombstone's name.
pub const TOMBSTONE_PREFIX: &str = ".dropped-";

/// Whether `name` (a file name in a data directory) is a tombstone.
pub fn is_tombstone(name: &str) -> bool {
    name.starts_with(TOMBSTONE_PREFIX)
}

/// How a removal ended once the directory was gone from its name.
#[derive(Debug)]
pub enum Removed {
    /// Every file deleted.
    Clean,
    /// The tombstone (still holding files) could not be deleted:
    /// [`clean_tombstones`] retries it.
    Left {
        /// The tombstone.
        path: PathBuf,
        /// Why.
        error: std::io::Error,
    },
}

/// The names of the subdirectories of `root` holding a collection,
/// sorted; `root` is created if missing (the raw error).
pub fn collections_in(root: &Path) -> std::io::Result<Vec<String>> {
    std::fs::create_dir_all(root)?;
    let mut names: Vec<String> = std::fs::read_dir(root)?
        .filter_map(|e| e.ok())
        .filter(|e| Collection::exists(&e.path()))
        .filter_map(|e| e.file_name().to_str().map(str::to_owned))
        .filter(|n| !is_tombstone(n))
        .collect();
    names.sort();
    Ok(names)
}

/// Removes the directory `dir` (see the module docs). An error means the
/// rename, or the fsync that makes it durable, failed (after a failed
/// fsync the directory may be a tombstone already, deleted at the next
/// [`clean_tombstones`]); once the rename is durable, a failure to delete
/// the files is [`Removed::Left`].
pub fn remove_dir(dir: &Path) -> Result<Removed> {
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let parent = match dir.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let name = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tomb = parent.join(format!(
        "{TOMBSTONE_PREFIX}{name}-{}-{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    ));
    fault::rename(dir, &tomb)?;
    fault::sync_dir(&tomb)?;
    if let Err(error) = fault::remove_dir_all(&tomb) {
        return Ok(Removed::Left { path: tomb, error });
    }
    fault::sync_dir(&tomb)?;
    Ok(Removed::Clean)
}

/// Deletes the tombstones under `root` (left by removals a crash or an
/// I/O error interrupted), then fsyncs `root`; the tombstones that could
/// not be deleted, with why.
pub fn clean_tombstones(root: &Path) -> Result<Vec<(PathBuf, std::io::Error)>> {
    let mut failed = Vec::new();
    let mut removed = false;
    let rd = std::fs::read_dir(root).map_err(io("list", root))?;
    for e in rd.filter_map(|e| e.ok()) {
        if !is_tombstone(&e.file_name().to_string_lossy()) {
            continue;
        }
        let p = e.path();
        match fault::remove_dir_all(&p) {
            Ok(()) => removed = true,
            Err(err) => failed.push((p, err)),
        }
    }
    if removed {
        fault::sync_dir(&root.join(TOMBSTONE_PREFIX))?;
    }
    Ok(failed)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_removed_directory_is_gone_and_tombstones_are_cleaned() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("c");
        std::fs::create_dir_all(dir.join("sub")).unwrap();
        std::fs::write(dir.join("sub/f"), b"x").unwrap();
        assert!(matches!(remove_dir(&dir).unwrap(), Removed::Clean));
        assert!(!dir.exists());
        assert_eq!(std::fs::read_dir(root.path()).unwrap().count(), 0);
        // A tombstone left behind (a crash between rename and delete).
        let tomb = root.path().join(".dropped-c-1-0");
        std::fs::create_dir_all(&tomb).unwrap();
        std::fs::write(tomb.join("f"), b"x").unwrap();
        std::fs::create_dir_all(root.path().join("kept")).unwrap();
        assert!(clean_tombstones(root.path()).unwrap().is_empty());
        assert!(!tomb.exists() && root.path().join("kept").exists());
        assert_eq!(collections_in(root.path()).unwrap(), Vec::<String>::new());
        // A missing directory: an error, nothing touched.
        assert!(remove_dir(&root.path().join("nope")).is_err());
    }

    #[cfg(feature = "failpoints")]
    #[test]
    fn a_failed_rename_keeps_the_directory_and_a_failed_delete_leaves_a_tombstone() {
        use crate::failpoints::{self, Fault, IoOp};
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("c");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("f"), b"x").unwrap();
        failpoints::inject(Fault::new(IoOp::Rename, root.path(), libc::EIO).times(1));
        assert!(remove_dir(&dir).is_err());
        assert!(dir.join("f").exists());
        failpoints::inject(Fault::new(IoOp::Remove, root.path(), libc::EIO).times(1));
        let Removed::Left { path, .. } = remove_dir(&dir).unwrap() else {
            panic!("the delete was to fail")
        };
        assert!(!dir.exists() && path.join("f").exists());
        assert_eq!(failpoints::clear(root.path()), 2);
        assert!(clean_tombstones(root.path()).unwrap().is_empty());
        assert!(!path.exists());
    }
}
