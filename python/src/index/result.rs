//! `sagitta.SearchResult`: the result of a dense search, as numpy arrays.

use numpy::ndarray::Array2;
use numpy::{IntoPyArray, PyArray1};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyTuple;

/// Results of :meth:`Index.search`.
///
/// ``keys`` (uint64) and ``distances`` (float32) have shape ``(n, k)`` for
/// a batch of ``n`` queries, or ``(k,)`` for one 1-D query. Each row is
/// sorted nearest first; slots past ``counts[i]`` (fewer matches than
/// ``k`` because of a filter or a radius) hold key :data:`NO_KEY`
/// (``2**64 - 1``, which reads as ``-1`` through ``keys.astype(np.int64)``)
/// and distance ``+inf``. ``counts`` is an int64 array of shape ``(n,)``,
/// or an int for one query. Unpacks as ``keys, distances = result``.
#[derive(Debug)]
#[pyclass(name = "SearchResult", module = "sagitta", frozen, get_all)]
pub struct SearchResult {
    /// Matched keys, nearest first (uint64).
    keys: Py<PyAny>,
    /// Distances of the matches (float32, smaller is nearer).
    distances: Py<PyAny>,
    /// Number of valid matches per query.
    counts: Py<PyAny>,
    /// Payload columns of the matches (a pyarrow Table with one row per
    /// entry of ``keys`` in row-major order, null where there is no
    /// match), when the search asked for them; else ``None``.
    payload: Py<PyAny>,
}

impl SearchResult {
    /// Wraps flat result buffers (`n * k` entries) as numpy arrays; one
    /// 1-D query (`single`) gives 1-D arrays and an int count.
    pub(crate) fn new(
        py: Python<'_>,
        keys_out: Vec<u64>,
        dist_out: Vec<f32>,
        counts: Vec<i64>,
        k: usize,
        single: bool,
    ) -> PyResult<SearchResult> {
        let n = counts.len();
        let (keys, distances, counts) = if single {
            (
                PyArray1::from_vec(py, keys_out).into_any(),
                PyArray1::from_vec(py, dist_out).into_any(),
                counts
                    .first()
                    .copied()
                    .unwrap_or(0)
                    .into_pyobject(py)?
                    .into_any(),
            )
        } else {
            let shape = |e: numpy::ndarray::ShapeError| PyValueError::new_err(e.to_string());
            (
                Array2::from_shape_vec((n, k), keys_out)
                    .map_err(shape)?
                    .into_pyarray(py)
                    .into_any(),
                Array2::from_shape_vec((n, k), dist_out)
                    .map_err(shape)?
                    .into_pyarray(py)
                    .into_any(),
                PyArray1::from_vec(py, counts).into_any(),
            )
        };
        Ok(SearchResult {
            keys: keys.unbind(),
            distances: distances.unbind(),
            counts: counts.unbind(),
            payload: py.None(),
        })
    }

    /// The same result with other keys (128-bit keys as (high, low)
    /// halves).
    pub(crate) fn with_keys(self, keys: Py<PyAny>) -> SearchResult {
        SearchResult { keys, ..self }
    }

    /// The same result carrying a payload table.
    pub(crate) fn with_payload(self, payload: Py<PyAny>) -> SearchResult {
        SearchResult { payload, ..self }
    }
}

#[pymethods]
impl SearchResult {
    fn __iter__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        Ok(
            PyTuple::new(py, [self.keys.clone_ref(py), self.distances.clone_ref(py)])?
                .try_iter()?
                .into_any(),
        )
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        let shape = self.keys.bind(py).getattr("shape")?.repr()?.to_string();
        Ok(format!("SearchResult(shape={shape})"))
    }
}
