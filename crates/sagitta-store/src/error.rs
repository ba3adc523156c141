//! The one error type of `sagitta-store`.

use sagitta_index::IndexError;
use std::path::PathBuf;

/// Everything a store operation can fail with.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// Environment error: the operating system refused an I/O call.
    #[error("{op} {path}: {source}")]
    Io {
        /// What was being done ("open", "write", "rename", ...).
        op: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// Data error: a file is truncated or its bytes are inconsistent.
    #[error("corrupt file {file}: at byte {offset}: {reason}")]
    Corrupt {
        /// The file.
        file: PathBuf,
        /// Byte offset where the problem was found.
        offset: u64,
        /// What is wrong.
        reason: String,
    },
    /// Data error: the file was written by a format version this build
    /// cannot read.
    #[error(
        "{file}: format version {found} is not readable by this build (reads {oldest}..={newest})"
    )]
    UnsupportedVersion {
        /// The file.
        file: PathBuf,
        /// Version in the file.
        found: u32,
        /// Oldest version this build reads.
        oldest: u32,
        /// Newest version this build reads.
        newest: u32,
    },
    /// Environment error: another process holds the collection's writer
    /// lock.
    #[error("{dir}: another writer has this collection open (open it read-only, or close the other writer)")]
    Locked {
        /// The collection directory.
        dir: PathBuf,
    },
    /// User error: a write on a collection opened read-only.
    #[error("{op}: the collection is open read-only")]
    ReadOnly {
        /// The refused operation.
        op: &'static str,
    },
    /// User error: `create` on a directory that already holds a collection.
    #[error("{dir}: a collection already exists here")]
    AlreadyExists {
        /// The directory.
        dir: PathBuf,
    },
    /// User error: `open` on a directory with no collection manifest.
    #[error("{dir}: not a collection (no MANIFEST)")]
    NotACollection {
        /// The directory.
        dir: PathBuf,
    },
    /// User error: a collection setting is invalid.
    #[error("invalid collection config: {0}")]
    Config(String),
    /// User error: a text query or text field that cannot be used (too
    /// long, no searchable terms, no text fields, bad fusion settings).
    #[error("invalid text query: {0}")]
    InvalidText(String),
    /// User error: a search request that cannot run as given (see
    /// [`crate::Query::check`]: text-only settings without a text, a
    /// text query with several vectors, a NaN radius).
    #[error("invalid query: {0}")]
    InvalidQuery(String),
    /// The collection's embedding model cannot be used: this build has
    /// none, the collection has none, or the model is missing, unreadable
    /// or failed (see [`ModelError`](crate::ModelError)).
    #[error("embedding model: {0}")]
    Model(ModelError),
    /// User error from the index layer (bad query, bad k, ...).
    #[error(transparent)]
    Index(#[from] IndexError),
    /// Environment error: the write was refused, nothing of it logged,
    /// because the mutable part is full and [`MAX_FROZEN`] frozen parts
    /// wait for a flush that fails (`reason`: its error, e.g. a full disk)
    /// or has not finished one for [`STALL_TIMEOUT`]. Memory stays
    /// bounded; writes are taken again once a flush gets through (retry).
    ///
    /// [`MAX_FROZEN`]: crate::collection::MAX_FROZEN
    /// [`STALL_TIMEOUT`]: crate::collection::STALL_TIMEOUT
    #[error("writes stalled: the mutable part is full and {frozen} frozen parts wait to be flushed ({reason}); nothing of this write was logged, retry once space is free")]
    Stalled {
        /// Frozen parts waiting.
        frozen: usize,
        /// Why they wait: the flush's last error, or that it is slow.
        reason: String,
    },
    /// Environment error: background work (flushing the mutable part,
    /// building or merging segments) failed, e.g. with a full disk. The
    /// collection keeps serving and taking writes into its log; the
    /// optimizer retries.
    #[error("background optimizer: {0}")]
    Optimizer(String),
    /// User error in payload columns or a filter expression.
    #[error(transparent)]
    Payload(#[from] crate::payload::PayloadError),
    /// User error: an id that is not of the collection's id type.
    #[error("row {row}: {source}")]
    InvalidId {
        /// Row of the write (0 for a single id).
        row: usize,
        /// What is wrong.
        source: crate::ids::IdError,
    },
    /// User error: one id given twice in one write. Nothing is written.
    #[error("row {row}: id {id} is given twice in this write (nothing written)")]
    DuplicateId {
        /// The second row with it.
        row: usize,
        /// The id.
        id: String,
    },
    /// User error: a payload update names a key that is not stored.
    /// Nothing is written.
    #[error("row {row}: key {key} is not in the collection (nothing written)")]
    KeyNotFound {
        /// The row of the update.
        row: usize,
        /// The key.
        key: u64,
    },
    /// User error: two different string ids with one 64-bit key (in one
    /// write, or a new id and a stored one). Nothing is written.
    #[error("string ids {new:?} and {old:?} have the same key {key:#018x}: nothing written")]
    IdCollision {
        /// The id being written.
        new: String,
        /// The id already holding the key.
        old: String,
        /// Their key.
        key: u64,
    },
}

/// Result alias for store operations.
pub type Result<T, E = StoreError> = std::result::Result<T, E>;

pub(crate) fn io<'a>(
    op: &'static str,
    path: &'a std::path::Path,
) -> impl FnOnce(std::io::Error) -> StoreError + 'a {
    move |source| StoreError::Io {
        op,
        path: path.to_path_buf(),
        source,
    }
}

impl StoreError {
    /// Whether this is the file system running out of room: no space
    /// (`ENOSPC`), a quota (`EDQUOT`) or a file-size limit (`EFBIG`), or
    /// writes stalled behind a flush that failed so.
    pub fn is_disk_full(&self) -> bool {
        use std::io::ErrorKind::{FileTooLarge, QuotaExceeded, StorageFull};
        match self {
            StoreError::Io { source, .. } => {
                matches!(source.kind(), StorageFull | QuotaExceeded | FileTooLarge)
            }
            StoreError::Stalled { reason, .. } | StoreError::Optimizer(reason) => {
                reason.contains(DISK_FULL_MARK)
            }
            _ => false,
        }
    }
}

/// Put in a stall's reason, or a background task's error, when it failed
/// for want of room, so that [`StoreError::is_disk_full`] can say so (a
/// server answers 507 for it, not 500).
pub(crate) const DISK_FULL_MARK: &str = "disk full: ";

/// Why a collection's embedding model could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    /// Build error: this build has no embedding models (the store was
    /// compiled without its cargo feature `embed`).
    #[error("this build has no embedding models: rebuild with the `embed` feature")]
    NotBuilt,
    /// User error: the collection has no embedding model, and the call
    /// needs one (it gave text and no vector). Holds what to do instead.
    #[error("this collection has no embedding model{0}")]
    NoModel(&'static str),
    /// Environment error: a file of the model is not there.
    #[error(
        "model file {} is missing: run scripts/fetch-model (or set SAGITTA_MODELS)",
        .0.display()
    )]
    MissingFile(std::path::PathBuf),
    /// Environment error: the model could not be loaded, or embedding
    /// failed (the model's own message).
    #[error("{0}")]
    Failed(String),
}

impl From<ModelError> for StoreError {
    fn from(e: ModelError) -> StoreError {
        StoreError::Model(e)
    }
}
