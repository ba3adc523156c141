//! The state every request handler shares: the collections, the pools,
//! the metrics and keys, whether new work is still taken, and the bound
//! addresses. Built once by [`crate::bind`]; handlers hold it in an `Arc`.

use crate::auth::Keys;
use crate::{exec, metrics, registry};
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
    /// Bound HTTP address.
    pub http_addr: String,
    /// Bound Flight address.
    pub flight_addr: String,
}
