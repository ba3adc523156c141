//! Text and hybrid search from Python: argument parsing for
//! `Collection.search(text=...)` and its result, `TextSearchResult`.

use crate::convert;
use crate::errors::{index_err, store_err};
use numpy::PyArray1;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use sagitta_index::IndexError;
use sagitta_store::{Collection, CollectionSearch, Fusion, Query, StoreError};

/// The result of a text or hybrid search: 1-D arrays, best first.
///
/// ``keys`` (uint64) and ``scores`` (float32, the fused score, larger is
/// better; the BM25 score for a text-only search), and each leg's part:
/// ``dense_distances`` / ``dense_ranks`` (the row's distance and rank,
/// from 1, in the dense leg) and ``text_scores`` / ``text_ranks`` (its
/// BM25 score and rank in the text leg); NaN and -1 where the row was not
/// in that leg. ``payload``: a pyarrow Table of the rows' payload when
/// ``columns`` was given, else ``None``. Unpacks as ``keys, scores =
/// result``.
#[derive(Debug)]
#[pyclass(name = "TextSearchResult", module = "sagitta", frozen, get_all)]
pub struct TextSearchResult {
    keys: Py<PyAny>,
    scores: Py<PyAny>,
    dense_distances: Py<PyAny>,
    dense_ranks: Py<PyAny>,
    text_scores: Py<PyAny>,
    text_ranks: Py<PyAny>,
    payload: Py<PyAny>,
}

#[pymethods]
impl TextSearchResult {
    fn __iter__(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let t = (self.keys.clone_ref(py), self.scores.clone_ref(py)).into_pyobject(py)?;
        Ok(t.call_method0("__iter__")?.unbind())
    }

    fn __len__(&self, py: Python<'_>) -> PyResult<usize> {
        self.keys.bind(py).len()
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        Ok(format!(
            "TextSearchResult(keys={}, scores={})",
            self.keys.bind(py).repr()?,
            self.scores.bind(py).repr()?
        ))
    }
}

/// `fusion=` / `alpha=` / `rrf_k=` as a [`Fusion`] (None: the default).
pub fn fusion_arg(
    fusion: Option<&str>,
    alpha: Option<f64>,
    rrf_k: Option<f64>,
) -> PyResult<Option<Fusion>> {
    Fusion::from_args(fusion, alpha.map(|a| a as f32), rrf_k.map(|k| k as f32))
        .map_err(PyValueError::new_err)
}

/// Runs a text or hybrid search for `Collection.search(text=...)`.
#[allow(clippy::too_many_arguments)]
pub fn search(
    py: Python<'_>,
    c: &Collection,
    queries: Option<&Bound<'_, PyAny>>,
    text: &str,
    k: usize,
    fusion: Option<Fusion>,
    depth: Option<usize>,
    opts: CollectionSearch<'_>,
) -> PyResult<(Vec<u64>, Py<TextSearchResult>)> {
    let rows = match queries.filter(|q| !q.is_none()) {
        Some(q) => Some(convert::rows(q, &c.config().space, "queries")?),
        None => None,
    };
    let vector = match &rows {
        Some(r) if r.len() != 1 => {
            return Err(PyValueError::new_err(format!(
                "queries: a text search takes one query vector, got {}",
                r.len()
            )))
        }
        Some(r) => r.refs().first().copied(),
        None => None,
    };
    let q = Query {
        fusion,
        depth,
        opts,
        ..Query::text(text, vector, k)
    };
    let hits = py.detach(|| c.search_text(&q)).map_err(|e| match e {
        StoreError::Index(IndexError::Row { source, .. }) => index_err(*source, "queries"),
        StoreError::Index(e) => index_err(e, "queries"),
        e => store_err(e),
    })?;
    let keys: Vec<u64> = hits.iter().map(|h| h.key).collect();
    let arr_f = |v: Vec<f32>| PyArray1::from_vec(py, v).into_any().unbind();
    let arr_i = |v: Vec<i32>| PyArray1::from_vec(py, v).into_any().unbind();
    let r = TextSearchResult {
        keys: PyArray1::from_vec(py, keys.clone()).into_any().unbind(),
        scores: arr_f(hits.iter().map(|h| h.score).collect()),
        dense_distances: arr_f(
            hits.iter()
                .map(|h| h.dense.map_or(f32::NAN, |d| d.1))
                .collect(),
        ),
        dense_ranks: arr_i(
            hits.iter()
                .map(|h| h.dense.map_or(-1, |d| d.0 as i32))
                .collect(),
        ),
        text_scores: arr_f(
            hits.iter()
                .map(|h| h.text.map_or(f32::NAN, |t| t.1))
                .collect(),
        ),
        text_ranks: arr_i(
            hits.iter()
                .map(|h| h.text.map_or(-1, |t| t.0 as i32))
                .collect(),
        ),
        payload: py.None(),
    };
    Ok((keys, Py::new(py, r)?))
}

/// Attaches a payload table to a result.
pub fn with_payload(
    py: Python<'_>,
    r: Py<TextSearchResult>,
    table: Py<PyAny>,
) -> PyResult<Py<TextSearchResult>> {
    let r = r.get();
    Py::new(
        py,
        TextSearchResult {
            keys: r.keys.clone_ref(py),
            scores: r.scores.clone_ref(py),
            dense_distances: r.dense_distances.clone_ref(py),
            dense_ranks: r.dense_ranks.clone_ref(py),
            text_scores: r.text_scores.clone_ref(py),
            text_ranks: r.text_ranks.clone_ref(py),
            payload: table,
        },
    )
}
