//! The one error type of `sagitta-index`.

use sagitta_kernels::KernelError;

/// Everything an index operation can refuse. Every variant is a user error
/// (bad input), except where documented as internal.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum IndexError {
    /// User error: a vector or query has the wrong number of components.
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
    /// User error: an int8 index got a component it cannot store exactly.
    #[error(
        "component {index} = {value} is not an integer in [-128, 127] (int8 index under {metric})"
    )]
    OutOfRange {
        /// Position of the offending component.
        index: usize,
        /// Its value.
        value: f32,
        /// The metric, which decides how floats are quantized.
        metric: &'static str,
    },
    /// User error: `add` of a key that is already present (use `upsert`).
    #[error("key {0} already exists (use upsert to replace it)")]
    DuplicateKey(u64),
    /// User error: `k` must be at least 1.
    #[error("k must be at least 1, got {0}")]
    ZeroK(usize),
    /// User error: training or using an IVF model with no vectors.
    #[error("the index is empty")]
    Empty,
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
    /// User error: the vector passed does not match the index's data type
    /// (floats to a binary index, bytes to a float index).
    #[error("expected {expected} input for a {dtype:?} index")]
    WrongInputKind {
        /// The input kind the index takes.
        expected: &'static str,
        /// The index's storage type.
        dtype: sagitta_kernels::DType,
    },
    /// User error: the filter bitmap covers more slots than the index has
    /// (one made before the index grew is fine: newer slots are excluded).
    #[error("filter covers {got} slots, the index has {expected}")]
    FilterSize {
        /// Slots in the index.
        expected: usize,
        /// Slots the filter covers.
        got: usize,
    },
    /// User error: the index is full (more than 2^32 - 2 slots).
    #[error("index is full ({0} slots)")]
    Full(usize),
    /// User error: metric / dtype combination or a binary code is invalid.
    #[error(transparent)]
    Kernel(#[from] KernelError),
    /// User error: row `row` of a batch was refused; nothing in the batch
    /// was applied.
    #[error("row {row}: {source}")]
    Row {
        /// Position of the offending row in the batch.
        row: usize,
        /// Why it was refused.
        source: Box<IndexError>,
    },
}

impl IndexError {
    /// `e` attributed to row `row` of a batch.
    pub fn at_row(row: usize, e: IndexError) -> IndexError {
        IndexError::Row {
            row,
            source: Box::new(e),
        }
    }
}

/// Result alias for index operations.
pub type Result<T, E = IndexError> = std::result::Result<T, E>;
