//! # sagitta-text
//!
//! Full-text search for Sagitta: analyzers ([`analyzer`]), a growable
//! in-memory inverted index for the mutable part and for building
//! segments ([`mem`]), the text section of a segment file read in place
//! from the mapping ([`section`]), BM25 with collection-wide statistics
//! ([`bm25`]; the best documents of a part found without scoring every
//! posting, MaxScore, in `prune`), and the fusion of a dense and a text
//! ranking ([`fusion`]).
//!
//! Sits beside `sagitta-index` (it knows slots, not vectors); the store
//! wires it to collections.

pub mod analyzer;
pub mod bm25;
mod field;
pub mod fusion;
pub mod mem;
pub mod merge;
mod prune;
pub mod section;

pub use analyzer::{Analyzer, AnalyzerKind, TermCounts};
pub use bm25::{Accumulator, Bm25, TextQuery};
pub use field::{DocLens, FieldRead, Postings};
pub use fusion::{fuse, Fused, Fusion};
pub use mem::{MemField, MemText, TextFieldSpec};
pub use prune::Wanted;
pub use section::{SectionField, TextSection};

/// Longest text accepted in one field of one row or one query, in bytes.
pub const MAX_TEXT_BYTES: usize = 1 << 20;

/// Full-text errors.
#[derive(Debug, thiserror::Error)]
pub enum TextError {
    /// A text section failed a structural check.
    #[error("corrupt {0}")]
    Corrupt(String),
    /// A text section of a version this build does not read.
    #[error("text section version {0} is not supported (this build reads version {v})", v = section::VERSION)]
    Version(u32),
    /// Too much to encode in one section.
    #[error("text index too large: {0}")]
    TooLarge(String),
}
