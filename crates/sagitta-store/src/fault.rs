//! The store's file-system calls, in one place, so that faults can be
//! injected into them: with the cargo feature `failpoints` (tests only;
//! off in every build users get, where [`check`] is an empty inline
//! function), [`crate::failpoints`] arms rules that make a chosen call on
//! a chosen file fail with a chosen `errno`, as a failing disk, a full
//! file system or an exhausted address space would.
//!
//! What an injected fault does, per call:
//! - `Write`: half of the bytes are written, then the call fails (a disk
//!   that fills up in the middle of a write);
//! - `Fsync`: nothing is synced and the call fails (what was written may
//!   or may not reach the disk: the caller must not count it durable);
//! - every other call fails without doing anything.
//!
//! Faults on memory-mapped reads (`SIGBUS` on a page that cannot be read)
//! are outside this layer: they happen in page faults, not calls.

use crate::error::{io, Result};
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::Path;

/// A kind of file-system call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IoOp {
    /// Creating (or opening for writing) a file.
    Create,
    /// Writing bytes.
    Write,
    /// `fsync` / `fdatasync` of a file or a directory.
    Fsync,
    /// Renaming a file or a directory.
    Rename,
    /// Memory-mapping a file.
    Mmap,
    /// Opening a file to read it, or reading it whole.
    Read,
    /// Truncating a file.
    Truncate,
    /// Removing a file, or a directory with everything in it.
    Remove,
}

/// Fails with the armed fault's error when a rule matches this call (only
/// with the `failpoints` feature; otherwise always `Ok`).
#[inline(always)]
pub(crate) fn check(op: IoOp, path: &Path) -> std::io::Result<()> {
    #[cfg(feature = "failpoints")]
    {
        armed::check(op, path)
    }
    #[cfg(not(feature = "failpoints"))]
    {
        let _ = (op, path);
        Ok(())
    }
}

/// Creates (or truncates) `path` for writing.
pub(crate) fn create(path: &Path) -> Result<File> {
    check(IoOp::Create, path)
        .and_then(|()| {
            OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .open(path)
        })
        .map_err(io("create", path))
}

/// Opens `path` for reading.
pub(crate) fn open(path: &Path) -> Result<File> {
    check(IoOp::Read, path)
        .and_then(|()| File::open(path))
        .map_err(io("open", path))
}

/// Reads `path` whole (the raw error, so callers can tell `NotFound`).
pub(crate) fn read(path: &Path) -> std::io::Result<Vec<u8>> {
    check(IoOp::Read, path)?;
    std::fs::read(path)
}

/// Writes all of `bytes` to `out` (the file `path`).
pub(crate) fn write_all(out: &mut impl Write, bytes: &[u8], path: &Path) -> Result<()> {
    if let Err(e) = check(IoOp::Write, path) {
        // A disk that fills up part way: half the bytes land first.
        let _ = out.write_all(&bytes[..bytes.len() / 2]);
        return Err(io("write", path)(e));
    }
    out.write_all(bytes).map_err(io("write", path))
}

/// `fsync` of a file (data and metadata).
pub(crate) fn sync_all(file: &File, path: &Path) -> Result<()> {
    check(IoOp::Fsync, path)
        .and_then(|()| file.sync_all())
        .map_err(io("fsync", path))
}

/// `fdatasync` of a file.
pub(crate) fn sync_data(file: &File, path: &Path) -> Result<()> {
    check(IoOp::Fsync, path)
        .and_then(|()| file.sync_data())
        .map_err(io("fsync", path))
}

/// Truncates (or extends) a file to `len` bytes.
pub(crate) fn set_len(file: &File, len: u64, path: &Path) -> Result<()> {
    check(IoOp::Truncate, path)
        .and_then(|()| file.set_len(len))
        .map_err(io("truncate", path))
}

/// Renames `from` to `to` (reported against `to`).
pub(crate) fn rename(from: &Path, to: &Path) -> Result<()> {
    check(IoOp::Rename, to)
        .and_then(|()| std::fs::rename(from, to))
        .map_err(io("rename", to))
}

/// Removes a file (the raw error, so callers can tell `NotFound`).
pub(crate) fn remove(path: &Path) -> std::io::Result<()> {
    check(IoOp::Remove, path)?;
    std::fs::remove_file(path)
}

/// Removes a directory and everything in it (the raw error).
pub(crate) fn remove_dir_all(path: &Path) -> std::io::Result<()> {
    check(IoOp::Remove, path)?;
    std::fs::remove_dir_all(path)
}

/// Fsyncs the directory holding `path` (makes a rename or create durable;
/// a fault armed for `path`'s name fails it too).
pub(crate) fn sync_dir(path: &Path) -> Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    check(IoOp::Fsync, path)
        .and_then(|()| File::open(dir))
        .and_then(|d| d.sync_all())
        .map_err(io("fsync dir", dir))
}

#[cfg(feature = "failpoints")]
pub(crate) mod armed {
    //! The armed rules (feature `failpoints`).
    use super::IoOp;
    use parking_lot::Mutex;
    use std::path::{Path, PathBuf};

    /// A fault to inject: calls `op` on files under `under` whose file
    /// name contains `name` let `after` matching calls pass, then fail
    /// `times` times with `errno`.
    #[derive(Debug, Clone)]
    pub struct Fault {
        /// The call.
        pub op: IoOp,
        /// Only paths under this directory (a test's own directory, so
        /// tests running at once do not see each other's faults).
        pub under: PathBuf,
        /// Only files whose name contains this ("" for any; the directory
        /// itself for a directory fsync).
        pub name: String,
        /// Matching calls let through before the first failure.
        pub after: u64,
        /// Failures before the rule disarms (`u64::MAX`: until cleared).
        pub times: u64,
        /// The error (`libc::EIO`, `libc::ENOSPC`, `libc::ENOMEM`, ...).
        pub errno: i32,
    }

    impl Fault {
        /// Every `op` on every file under `under`, from now on, with
        /// `errno`.
        pub fn new(op: IoOp, under: &Path, errno: i32) -> Fault {
            Fault {
                op,
                under: under.to_path_buf(),
                name: String::new(),
                after: 0,
                times: u64::MAX,
                errno,
            }
        }

        /// Only files whose name contains `name`.
        pub fn named(mut self, name: &str) -> Fault {
            self.name = name.into();
            self
        }

        /// Let `n` matching calls pass first.
        pub fn after(mut self, n: u64) -> Fault {
            self.after = n;
            self
        }

        /// Fail `n` times, then disarm.
        pub fn times(mut self, n: u64) -> Fault {
            self.times = n;
            self
        }
    }

    struct Armed {
        fault: Fault,
        seen: u64,
        fired: u64,
    }

    static RULES: Mutex<Vec<Armed>> = Mutex::new(Vec::new());

    /// Arms `fault`.
    pub fn inject(fault: Fault) {
        RULES.lock().push(Armed {
            fault,
            seen: 0,
            fired: 0,
        });
    }

    /// Disarms every fault under `under`; returns how many times they
    /// fired.
    pub fn clear(under: &Path) -> u64 {
        let mut rules = RULES.lock();
        let fired = rules
            .iter()
            .filter(|r| r.fault.under == under)
            .map(|r| r.fired)
            .sum();
        rules.retain(|r| r.fault.under != under);
        fired
    }

    /// How many times the faults armed under `under` have fired so far.
    pub fn fired(under: &Path) -> u64 {
        RULES
            .lock()
            .iter()
            .filter(|r| r.fault.under == under)
            .map(|r| r.fired)
            .sum()
    }

    pub(crate) fn check(op: IoOp, path: &Path) -> std::io::Result<()> {
        let mut rules = RULES.lock();
        for r in rules.iter_mut() {
            let f = &r.fault;
            let name = path.file_name().map(|n| n.to_string_lossy());
            if f.op != op
                || !path.starts_with(&f.under)
                || !name.as_deref().unwrap_or("").contains(f.name.as_str())
                || r.fired >= f.times
            {
                continue;
            }
            r.seen += 1;
            if r.seen > f.after {
                r.fired += 1;
                return Err(std::io::Error::from_raw_os_error(f.errno));
            }
        }
        Ok(())
    }
}
