//! The one error type of `sagitta-lowdim`.

use std::path::{Path, PathBuf};

/// Everything a low-dimensional index can refuse. Every variant is a user
/// error (bad input) except [`LowDimError::Corrupt`], a data error.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum LowDimError {
    /// User error: rows or a query with the wrong number of components
    /// (for rows: `got` is the remainder of a ragged buffer).
    #[error("wrong dimensions: expected {expected}, got {got}")]
    Dimensions {
        /// Dimensions of the index.
        expected: usize,
        /// Dimensions received.
        got: usize,
    },
    /// User error: a component is NaN or infinite.
    #[error("component {index} is not finite ({value})")]
    NotFinite {
        /// Position of the offending component.
        index: usize,
        /// Its value.
        value: f32,
    },
    /// User error: `k` must be at least 1.
    #[error("k must be at least 1, got {0}")]
    ZeroK(usize),
    /// User error: more neighbours asked for than the index has rows.
    #[error("k = {k} exceeds the {len} vectors in the index")]
    KTooLarge {
        /// The k asked for.
        k: usize,
        /// Rows in the index.
        len: usize,
    },
    /// User error: building an index from no rows.
    #[error("the index is empty")]
    Empty,
    /// User error: more rows than an index takes (fewer than 2^32 - 1).
    #[error("index is full ({0} rows)")]
    TooManyRows(usize),
    /// User error: a parameter is outside its valid range.
    #[error("invalid parameter {name} = {value}: {reason}")]
    InvalidParameter {
        /// Parameter name.
        name: &'static str,
        /// The value received, rendered.
        value: String,
        /// Why it was refused.
        reason: &'static str,
    },
    /// Data error: bytes handed to the parser are not a valid index (wrong
    /// magic, unsupported version, checksum mismatch, an inconsistent
    /// count or tree). Nothing was read past the check.
    #[error(
        "corrupt low-dimensional index{}: byte {offset}: {reason}",
        in_file(file)
    )]
    Corrupt {
        /// The file the bytes came from, when the caller named it
        /// ([`LowDimError::in_file`]); the parser sees only bytes.
        file: Option<PathBuf>,
        /// Byte offset (from the start of the index) of the field or
        /// array entry found wrong.
        offset: u64,
        /// What is wrong.
        reason: String,
    },
    /// User error: row `row` of the rows an index is built from was
    /// refused; nothing was built.
    #[error("row {row}: {source}")]
    Row {
        /// Position of the offending row.
        row: usize,
        /// Why it was refused.
        source: Box<LowDimError>,
    },
}

fn in_file(file: &Option<PathBuf>) -> String {
    file.as_ref()
        .map(|f| format!(" {}", f.display()))
        .unwrap_or_default()
}

impl LowDimError {
    /// `e` attributed to row `row` of the rows.
    pub fn at_row(row: usize, e: LowDimError) -> LowDimError {
        LowDimError::Row {
            row,
            source: Box::new(e),
        }
    }

    /// Names the file a [`LowDimError::Corrupt`] came from (other errors
    /// are returned as they are).
    pub fn in_file(self, path: &Path) -> LowDimError {
        match self {
            LowDimError::Corrupt { offset, reason, .. } => LowDimError::Corrupt {
                file: Some(path.to_path_buf()),
                offset,
                reason,
            },
            e => e,
        }
    }

    /// The error of bytes found wrong at `offset`.
    pub(crate) fn corrupt(offset: usize, reason: impl Into<String>) -> LowDimError {
        LowDimError::Corrupt {
            file: None,
            offset: offset as u64,
            reason: reason.into(),
        }
    }
}

/// Result alias for low-dimensional index operations.
pub type Result<T, E = LowDimError> = std::result::Result<T, E>;
