//! Payload columns: typed, nullable metadata stored beside each vector.
//!
//! A collection has one [`Schema`] (ordered fields, each with a
//! [`FieldType`]); it only grows: a write naming a new column adds it (old
//! rows read it as null), a write giving an existing column another type is
//! refused with [`PayloadError::TypeConflict`]. A row is held as values by
//! field position ([`Row`]); in the WAL it is written self-describing
//! ([`encode_row`]: names and types travel with the values, so replay can
//! grow the schema), in sealed segments as one Arrow IPC stream section
//! plus the payload indexes of [`crate::pindex`].
//!
//! One concern per file:
//! - `schema.rs`: [`FieldType`], [`Field`], [`Schema`];
//! - `value.rs`: [`Value`] and [`Row`];
//! - `error.rs`: [`PayloadError`];
//! - `columns.rs`: [`Payload`], a user's columns for a batch of rows;
//! - `arrow.rs`: Arrow input (IPC streams, record batches) as a `Payload`;
//! - `json.rs`: JSON rows and values;
//! - `time.rs`: RFC 3339 timestamps;
//! - `batch.rs`: the stored record batch ([`BatchBuilder`], [`value_at`])
//!   and its IPC stream;
//! - `wal.rs`: the WAL's row encoding.

mod arrow;
mod batch;
mod columns;
mod error;
mod json;
mod schema;
mod time;
mod value;
mod wal;

pub use batch::{ipc_bytes, prefetch_value, to_record_batch, value_at, write_ipc, BatchBuilder};
pub use columns::Payload;
pub use error::PayloadError;
pub use json::json_value;
pub use schema::{Field, FieldType, Schema};
pub use time::{format_rfc3339, parse_rfc3339};
pub use value::{Row, Value};
pub use wal::{decode_row, encode_row, MAX_ROW_BYTES};
