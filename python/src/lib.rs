//! The `sagitta._sagitta` extension module: Python bindings over
//! `sagitta-index` and `sagitta-store`. See `python/README.md`.

mod collection;
mod convert;
mod errors;
mod index;
mod keys128;
mod lowdim;
mod remote;
mod text;

use pyo3::prelude::*;

/// The instruction set the distance kernels dispatched to at start-up
/// (``"avx512"``, ``"avx2"``, ``"neon"`` or ``"scalar"``; capped by the
/// ``SAGITTA_ISA`` environment variable).
#[pyfunction]
fn isa() -> &'static str {
    sagitta_kernels::isa().name()
}

/// The 64-bit key of a string id (FNV-1a over UTF-8, then the splitmix64
/// finaliser): the store's one definition, persisted in every collection
/// with string ids.
#[pyfunction]
fn string_key(s: &str) -> u64 {
    sagitta_store::string_key(s)
}

#[pymodule]
fn _sagitta(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add_class::<index::PyIndex>()?;
    m.add_class::<index::SearchResult>()?;
    m.add_class::<lowdim::PyLowDimIndex>()?;
    m.add_class::<text::TextSearchResult>()?;
    m.add_class::<collection::PyCollection>()?;
    m.add_class::<collection::PyCollectionIter>()?;
    m.add(
        "CorruptFileError",
        py.get_type::<errors::CorruptFileError>(),
    )?;
    m.add("ReadOnlyError", py.get_type::<errors::ReadOnlyError>())?;
    m.add("LockedError", py.get_type::<errors::LockedError>())?;
    m.add("PayloadError", py.get_type::<errors::PayloadError>())?;
    m.add("NO_KEY", convert::NO_KEY)?;
    // The store's search limits, for front ends written in Python (the
    // cluster's HTTP service) to check with the same numbers.
    let limits = pyo3::types::PyDict::new(py);
    limits.set_item("k", sagitta_store::limits::MAX_K)?;
    limits.set_item("beam", sagitta_store::limits::MAX_BEAM)?;
    limits.set_item("depth", sagitta_store::limits::MAX_DEPTH)?;
    limits.set_item("batch_queries", sagitta_store::limits::MAX_BATCH_QUERIES)?;
    // The smallest segment_size a collection takes (sagitta.compat.iscc
    // seals by itself below it).
    limits.set_item(
        "min_segment_size",
        sagitta_store::collection::MIN_SEGMENT_SIZE,
    )?;
    m.add("LIMITS", limits)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_function(wrap_pyfunction!(isa, m)?)?;
    m.add_function(wrap_pyfunction!(string_key, m)?)?;
    m.add_function(wrap_pyfunction!(remote::publish, m)?)?;
    m.add_function(wrap_pyfunction!(remote::fetch, m)?)?;
    m.add_function(wrap_pyfunction!(remote::published, m)?)?;
    m.add(
        "RemoteStoreError",
        py.get_type::<remote::RemoteStoreError>(),
    )?;
    Ok(())
}
