//! Mapping of Sagitta's typed errors onto Python exceptions.
//!
//! User errors become `ValueError` with a message that starts with the
//! argument at fault; I/O errors become `OSError` (its subclasses, such as
//! `FileNotFoundError`, chosen by errno); damaged or foreign files become
//! `sagitta.CorruptFileError`, a subclass of `OSError`.

use pyo3::exceptions::{
    PyFileExistsError, PyFileNotFoundError, PyKeyError, PyOSError, PyRuntimeError, PyValueError,
};
use pyo3::PyErr;
use sagitta_index::IndexError;
use sagitta_store::StoreError;

pyo3::create_exception!(
    sagitta,
    CorruptFileError,
    PyOSError,
    "A file is truncated, damaged, not a Sagitta file, or written by a format version this build cannot read."
);

pyo3::create_exception!(
    sagitta,
    ReadOnlyError,
    PyRuntimeError,
    "A mutation was attempted on a read-only index (one opened from a file with Index.open)."
);

pyo3::create_exception!(
    sagitta,
    LockedError,
    PyOSError,
    "Another process has the collection open for writing (one writer per collection)."
);

pyo3::create_exception!(
    sagitta,
    PayloadError,
    PyValueError,
    "Bad payload columns or filter expression: an unknown field, a value of the wrong type, an unknown operator, a column whose type conflicts with the collection's schema. The message names the field."
);

/// Converts an index error; `arg` names the argument the vectors came in
/// (`"vectors"`, `"queries"`), used for errors about vector contents.
pub fn index_err(e: IndexError, arg: &str) -> PyErr {
    let prefix = match &e {
        IndexError::ZeroK(_) => "k",
        IndexError::DuplicateKey(_) => "keys",
        IndexError::Row { source, .. } if matches!(**source, IndexError::DuplicateKey(_)) => "keys",
        IndexError::Empty | IndexError::InvalidParameter { .. } | IndexError::Full(_) => "",
        _ => arg,
    };
    if prefix.is_empty() {
        PyValueError::new_err(e.to_string())
    } else {
        PyValueError::new_err(format!("{prefix}: {e}"))
    }
}

/// Converts a store error.
pub fn store_err(e: StoreError) -> PyErr {
    match e {
        StoreError::Io { op, path, source } => {
            let path = path.display().to_string();
            match source.raw_os_error() {
                // OSError(errno, strerror, filename) picks the subclass
                // (FileNotFoundError, PermissionError, ...) from errno.
                Some(errno) => PyOSError::new_err((errno, format!("{op}: {source}"), path)),
                None => PyOSError::new_err(format!("{op} {path}: {source}")),
            }
        }
        e @ (StoreError::Corrupt { .. } | StoreError::UnsupportedVersion { .. }) => {
            CorruptFileError::new_err(e.to_string())
        }
        StoreError::Index(e) => index_err(e, "vectors"),
        e @ StoreError::Locked { .. } => LockedError::new_err(e.to_string()),
        e @ StoreError::ReadOnly { .. } => ReadOnlyError::new_err(e.to_string()),
        e @ StoreError::AlreadyExists { .. } => PyFileExistsError::new_err(e.to_string()),
        e @ StoreError::NotACollection { .. } => PyFileNotFoundError::new_err(e.to_string()),
        StoreError::Config(msg) => PyValueError::new_err(msg),
        e @ (StoreError::InvalidText(_) | StoreError::InvalidQuery(_)) => {
            PyValueError::new_err(e.to_string())
        }
        e @ StoreError::Model(_) => PyOSError::new_err(e.to_string()),
        e @ StoreError::Optimizer(_) => PyOSError::new_err(e.to_string()),
        // OSError(ENOSPC, ...) when the flush failed for want of room, as
        // a write refused by a full disk is.
        e @ StoreError::Stalled { .. } if e.is_disk_full() => {
            PyOSError::new_err((libc_enospc(), e.to_string()))
        }
        e @ StoreError::Stalled { .. } => PyOSError::new_err(e.to_string()),
        StoreError::Payload(e) => PayloadError::new_err(e.to_string()),
        e @ StoreError::KeyNotFound { .. } => PyKeyError::new_err(e.to_string()),
        e @ (StoreError::InvalidId { .. }
        | StoreError::DuplicateId { .. }
        | StoreError::IdCollision { .. }) => PyValueError::new_err(e.to_string()),
    }
}

/// The error for mutating a read-only index.
pub fn read_only(op: &str) -> PyErr {
    ReadOnlyError::new_err(format!(
        "{op}: this index was opened from a file and is read-only"
    ))
}

/// `ENOSPC` on Linux and macOS.
fn libc_enospc() -> i32 {
    28
}
