//! The request model: what a user asks of a collection, parsed and
//! validated once, here, for every front end (the server's HTTP and
//! Flight protocols, Longbow's actions, the Python package, the cluster
//! client). The edges translate their wire formats into these types and
//! map [`crate::StoreError`] back onto their own errors; they make no
//! decision of their own.
//!
//! - [`CollectionOptions`] (`options.rs`): a collection's settings by
//!   name, and the one parser into a [`crate::CollectionConfig`].
//! - [`Query`] (`query.rs`): one search, dense, text or hybrid, its
//!   checks, and its [`Answer`]; [`crate::Collection::query`] runs it on
//!   one snapshot.

mod options;
mod query;

pub use options::{
    parse_dtype, parse_durability, parse_id_type, parse_kind, parse_metric, parse_space,
    CollectionOptions, TextColumns, TextFieldOption,
};
pub use query::{Answer, CollectionSearch, Query, DEFAULT_DEPTH, DEFAULT_FUSION};
