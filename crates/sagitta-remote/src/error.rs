//! The errors of object-storage operations.

use std::path::PathBuf;

/// What went wrong publishing to or fetching from object storage.
#[derive(Debug, thiserror::Error)]
pub enum RemoteError {
    /// The collection (local side) refused: I/O, corruption, a directory
    /// already holding a collection.
    #[error(transparent)]
    Store(#[from] sagitta_store::StoreError),
    /// The object store refused (network, permissions, a full disk).
    #[error("object store: {0}")]
    ObjectStore(#[from] object_store::Error),
    /// A local file could not be read or written.
    #[error("{op} {path}: {source}")]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// An object's bytes are not what its version file says (checksum or
    /// length), or a version file is malformed.
    #[error("corrupt object {object}: {reason}")]
    Corrupt { object: String, reason: String },
    /// Nothing has been published under this location yet.
    #[error("no collection published at {0}")]
    NothingPublished(String),
    /// Another writer published the same version first: two writers share
    /// one location.
    #[error("version {version} at {location} was published by another writer")]
    Conflict { location: String, version: u64 },
    /// The location is not one this build can open.
    #[error("bad object store location {0:?}: {1}")]
    Location(String, String),
}

/// A `map_err` adapter for local I/O errors.
pub(crate) fn io(
    op: &'static str,
    path: &std::path::Path,
) -> impl FnOnce(std::io::Error) -> RemoteError {
    let path = path.to_path_buf();
    move |source| RemoteError::Io { op, path, source }
}

pub type Result<T> = std::result::Result<T, RemoteError>;
