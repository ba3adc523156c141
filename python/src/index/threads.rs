//! Thread pools for an explicit `threads=N` and the `threads=` argument,
//! shared by `Index` and `Collection` searches.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use rayon::ThreadPool;
use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};

/// Rayon pools for explicit `threads=N`, built once per size.
pub(crate) static POOLS: LazyLock<Mutex<HashMap<usize, Arc<ThreadPool>>>> =
    LazyLock::new(|| Mutex::new(HashMap::new()));

pub(crate) fn pool(threads: usize) -> PyResult<Arc<ThreadPool>> {
    let mut pools = POOLS.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(p) = pools.get(&threads) {
        return Ok(p.clone());
    }
    let p = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .map_err(|e| {
            PyValueError::new_err(format!("threads: cannot start {threads} threads: {e}"))
        })?;
    let p = Arc::new(p);
    pools.insert(threads, p.clone());
    Ok(p)
}

/// `None` → 0 (all cores); otherwise at least 1.
pub(crate) fn threads_arg(threads: Option<i64>) -> PyResult<usize> {
    match threads {
        None => Ok(0),
        Some(t) if t >= 1 => Ok(usize::try_from(t).unwrap_or(usize::MAX).min(1024)),
        Some(t) => Err(PyValueError::new_err(format!(
            "threads: must be at least 1 (or None for all cores), got {t}"
        ))),
    }
}
