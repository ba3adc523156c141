//! Stored vectors back to Python values (`get`, a collection's `items`).

use numpy::ndarray::Array2;
use numpy::IntoPyArray;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList};
use sagitta_index::Space;
use sagitta_kernels::{DType, Metric};

/// The numpy dtype `get` returns for a storage type.
fn numpy_dtype(d: DType) -> &'static str {
    match d {
        DType::F32 => "float32",
        DType::F16 => "float16",
        DType::I8 => "int8",
        DType::B1 => "uint8",
        DType::Sq8 | DType::Sq16 => "float32",
    }
}

/// Stored bytes of a vector → a Python value (numpy row, or bytes for
/// NPHD codes).
pub(crate) fn decode_rows<'py>(
    py: Python<'py>,
    space: Space,
    found: Vec<Option<Vec<u8>>>,
    single: bool,
) -> PyResult<Bound<'py, PyAny>> {
    if space.metric == Metric::Nphd {
        let items: Vec<Bound<'py, PyAny>> = found
            .into_iter()
            .map(|r| match r {
                Some(b) => {
                    let len = sagitta_kernels::nphd_code_len(&b).min(b.len().saturating_sub(1));
                    PyBytes::new(py, &b[1..=len]).into_any()
                }
                None => py.None().into_bound(py),
            })
            .collect();
        return one_or_list(py, items, single);
    }
    // Scalar-quantized rows come back dequantized, as float32.
    let found: Vec<Option<Vec<u8>>> = if space.dtype.is_quantized() {
        found
            .into_iter()
            .map(|r| {
                r.and_then(|b| space.decode_floats(&b))
                    .map(|v| v.iter().flat_map(|x| x.to_ne_bytes()).collect())
            })
            .collect()
    } else {
        found
    };
    let vb = if space.dtype.is_quantized() {
        space.dims * 4
    } else {
        space.vector_bytes()
    };
    let mut flat = Vec::with_capacity(found.iter().flatten().count() * vb);
    for r in found.iter().flatten() {
        flat.extend_from_slice(&r[..vb]);
    }
    let m = flat.len() / vb.max(1);
    let matrix = Array2::from_shape_vec((m, vb), flat)
        .map_err(|e| PyValueError::new_err(e.to_string()))?
        .into_pyarray(py)
        .call_method1("view", (numpy_dtype(space.dtype),))?;
    let mut next = 0usize;
    let mut items = Vec::with_capacity(found.len());
    for r in &found {
        if r.is_some() {
            items.push(matrix.get_item(next)?);
            next += 1;
        } else {
            items.push(py.None().into_bound(py));
        }
    }
    one_or_list(py, items, single)
}

/// The first item for a single key (None if there is none), else a list.
fn one_or_list<'py>(
    py: Python<'py>,
    items: Vec<Bound<'py, PyAny>>,
    single: bool,
) -> PyResult<Bound<'py, PyAny>> {
    if single {
        Ok(items
            .into_iter()
            .next()
            .unwrap_or_else(|| py.None().into_bound(py)))
    } else {
        Ok(PyList::new(py, items)?.into_any())
    }
}
