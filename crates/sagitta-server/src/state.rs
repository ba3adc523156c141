//! The state every request handler shares: the collections, the pools,
//! the metrics and keys, whether new work is still taken, and the bound
//! addresses, and the namespaces Longbow's clients made. Built once by
//! [`crate::bind`]; handlers hold it in an `Arc`.

use crate::auth::Keys;
use crate::{exec, metrics, registry};
use parking_lot::Mutex;
use std::collections::BTreeSet;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

/// What every request handler shares.
#[derive(Debug)]
pub struct State {
    /// Collections.
    pub registry: Arc<registry::Registry>,
    /// Pools.
    pub exec: exec::Exec,
    /// Metrics.
    pub metrics: Arc<metrics::Metrics>,
    /// API keys.
    pub keys: Keys,
    /// False once shutdown began: new work is refused.
    pub accepting: AtomicBool,
    /// Largest body.
    pub max_body: usize,
    /// Text fields of collections a DoPut creates ([`crate::ServerConfig`]).
    pub text_columns: sagitta_store::TextColumns,
    /// Bound HTTP address.
    pub http_addr: String,
    /// Bound Flight address.
    pub flight_addr: String,
    /// Longbow's namespaces ([`crate::longbow`]).
    pub namespaces: Namespaces,
}

/// The namespace every collection belongs to.
pub const DEFAULT_NAMESPACE: &str = "default";

/// Namespaces: `default` (every collection) and the names made by
/// Longbow's `CreateNamespace`. As in Longbow, they live in memory only (a
/// collection does not need one; its name is its identity).
#[derive(Debug)]
pub struct Namespaces(pub(crate) Mutex<BTreeSet<String>>);

impl Default for Namespaces {
    fn default() -> Self {
        Namespaces(Mutex::new(BTreeSet::from([DEFAULT_NAMESPACE.to_string()])))
    }
}
