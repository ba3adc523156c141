//! Arguments of `sagitta.Collection` read from Python: payloads, filters,
//! column lists, text fields, and Arrow tables back to pyarrow (through
//! the `sagitta._payload` helper module).

use crate::errors::store_err;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};
use sagitta_store::filter::Bound as FilterBound;
use sagitta_store::payload;
use sagitta_store::{Collection, Filter, Payload, TextFieldOption};

/// The `sagitta._payload` helper module (pyarrow conversions).
pub(super) fn helpers(py: Python<'_>) -> PyResult<Bound<'_, PyModule>> {
    py.import("sagitta._payload")
}

/// A Python payload (dict, DataFrame, pyarrow Table or IPC bytes) read
/// into columns.
pub(super) fn payload_arg(py: Python<'_>, p: &Bound<'_, PyAny>) -> PyResult<Payload> {
    let bytes: Vec<u8> = helpers(py)?.call_method1("to_ipc", (p,))?.extract()?;
    py.detach(|| Payload::from_ipc(&bytes))
        .map_err(|e| store_err(e.into()))
}

/// `values=` of `set_payload`: one row. Columns of the schema are read
/// by its types (as a JSON upsert's); new ones are typed by pyarrow, as an
/// upsert's payload.
pub(super) fn values_arg(
    py: Python<'_>,
    c: &Collection,
    v: &Bound<'_, PyAny>,
) -> PyResult<Payload> {
    let schema = c.schema();
    let known: Vec<String> = schema.fields().iter().map(|f| f.name.clone()).collect();
    let (text, new): (String, Bound<'_, PyAny>) = helpers(py)?
        .call_method1("split_values", (v, known))?
        .extract()?;
    let obj: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| PyValueError::new_err(format!("values: {e}")))?;
    let mut p = Payload::from_json_rows(&[obj], &schema).map_err(|e| store_err(e.into()))?;
    if new.len()? > 0 {
        let added = payload_arg(py, &new)?;
        if added.rows != 1 {
            return Err(PyValueError::new_err("values: one value per column"));
        }
        p.fields.extend(added.fields);
        p.columns.extend(added.columns);
    }
    Ok(p)
}

/// A `where=` argument parsed and checked against the schema.
pub(super) fn bind_where(
    py: Python<'_>,
    c: &Collection,
    w: Option<&Bound<'_, PyAny>>,
) -> PyResult<Option<FilterBound>> {
    let Some(w) = w.filter(|w| !w.is_none()) else {
        return Ok(None);
    };
    let text: String = helpers(py)?.call_method1("filter_json", (w,))?.extract()?;
    let f = Filter::from_json(&text).map_err(|e| store_err(e.into()))?;
    c.bind_filter(&f).map(Some).map_err(store_err)
}

/// `text_fields=`: a list of names (English analyzer) or a dict of name →
/// analyzer.
pub(super) fn text_fields_arg(v: Option<&Bound<'_, PyAny>>) -> PyResult<Vec<TextFieldOption>> {
    let Some(v) = v.filter(|v| !v.is_none()) else {
        return Ok(Vec::new());
    };
    if let Ok(d) = v.cast::<PyDict>() {
        return d
            .iter()
            .map(|(k, a)| {
                Ok(TextFieldOption {
                    name: k.extract()?,
                    analyzer: Some(a.extract()?),
                })
            })
            .collect();
    }
    if v.extract::<String>().is_ok() {
        return Err(PyValueError::new_err(
            "text_fields: expected a list of column names or a dict {name: analyzer}, not a string",
        ));
    }
    Ok(v.extract::<Vec<String>>()
        .map_err(|_| {
            PyValueError::new_err(
                "text_fields: expected a list of column names or a dict {name: analyzer}",
            )
        })?
        .into_iter()
        .map(TextFieldOption::named)
        .collect())
}

/// `columns=`: `True` for all, a list of names, `False` / `None` for none.
pub(super) fn columns_arg(
    cols: Option<&Bound<'_, PyAny>>,
) -> PyResult<Option<Option<Vec<String>>>> {
    let Some(cols) = cols.filter(|c| !c.is_none()) else {
        return Ok(None);
    };
    if let Ok(b) = cols.extract::<bool>() {
        return Ok(b.then_some(None));
    }
    cols.extract::<Vec<String>>()
        .map(|v| Some(Some(v)))
        .map_err(|_| PyValueError::new_err("columns: expected True or a list of column names"))
}

/// An Arrow record batch as a pyarrow Table.
pub(super) fn arrow_table<'py>(
    py: Python<'py>,
    batch: &arrow_array::RecordBatch,
) -> PyResult<Bound<'py, PyAny>> {
    let bytes = payload::ipc_bytes(batch).map_err(|e| store_err(e.into()))?;
    helpers(py)?.call_method1("from_ipc", (PyBytes::new(py, &bytes),))
}
