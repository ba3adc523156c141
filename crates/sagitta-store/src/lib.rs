//! # sagitta-store
//!
//! Everything on disk, and the one request model: the sealed,
//! memory-mapped [`Segment`] file (see `docs/FORMAT.md` and the
//! [`segment`] module docs), the [`Collection`] on a directory (write-ahead
//! [`wal`], mutable part, manifest, [`bloom`] filter, tombstones,
//! background optimizer; see the [`collection`] module docs), payload
//! columns and [`filter`]s, and the [`request`] model
//! ([`CollectionOptions`], [`Query`]) that every front end translates
//! into. What it owns and must not import: `crates/sagitta-store/README.md`.
//!
//! Depends on `sagitta-index` (the in-memory index it serialises and the
//! [`sagitta_index::GraphView`] search it reuses), `sagitta-kernels`,
//! `sagitta-text` (full text) and, with the default cargo feature `embed`,
//! `sagitta-embed`.

#[cfg(target_endian = "big")]
compile_error!(
    "sagitta-store maps little-endian files zero-copy and supports little-endian targets only"
);

pub mod bloom;
pub mod collection;
pub mod dirs;
mod durable;
pub mod embedder;
mod envelope;
mod error;
mod fault;
pub mod filter;
pub mod ids;
pub mod ipc;
mod keysearch;
pub mod limits;
pub mod payload;
pub mod pindex;
pub mod request;
pub mod segment;
mod trim;
pub mod wal;
mod warm;

pub use collection::{
    codes_named, default_codes, Collection, CollectionConfig, CollectionMetadata, CollectionStats,
    Durability, Export, ExportFile, ExportKind, IdWrite, OpenMode, PartEvent, PartSummary, Scan,
    ScanBatch, SearchRows, TextHit, MAX_FROZEN, PACE_MAX, STALL_TIMEOUT,
};
pub use embedder::Embedder;
pub use error::{ModelError, Result, StoreError};
pub use request::{
    Answer, CollectionOptions, CollectionSearch, Query, TextColumns, TextFieldOption,
    DEFAULT_DEPTH, DEFAULT_FUSION,
};
/// Fault injection into the store's file-system calls (tests only: cargo
/// feature `failpoints`; see the `fault` module's docs).
#[cfg(feature = "failpoints")]
pub mod failpoints {
    pub use crate::fault::armed::{clear, fired, inject, Fault};
    pub use crate::fault::IoOp;
}
pub use filter::Filter;
pub use ids::{parse_u128, string_key, u128_key, Id, IdColumn, IdError, IdType, STRING_ID_FIELD};
pub use payload::{Field, FieldType, Payload, PayloadError, Schema, Value};
pub use sagitta_text::{AnalyzerKind, Bm25, Fusion, TextFieldSpec};
pub use segment::{Segment, SegmentInfo, FORMAT_VERSION, OLDEST_SUPPORTED_VERSION};
pub use trim::set_release_hook;
