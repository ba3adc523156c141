//! `sagitta.CollectionIterator`: a lazy walk over a collection's keys or
//! (key, vector) pairs.

use crate::errors::store_err;
use crate::index::decode_rows;
use pyo3::exceptions::PyStopIteration;
use pyo3::prelude::*;
use pyo3::types::PyTuple;
use sagitta_index::Space;
use sagitta_store::{Collection, Id};
use std::sync::{Arc, Mutex};

/// A lazy iterator over a collection's keys or (key, vector) pairs.
#[pyclass(name = "CollectionIterator", module = "sagitta", frozen)]
pub struct PyCollectionIter {
    pub(super) it: Mutex<Box<dyn Iterator<Item = (u64, Vec<u8>)> + Send>>,
    pub(super) space: Space,
    pub(super) items: bool,
    /// The collection, when its keys are 128-bit ids to look up.
    pub(super) wide: Option<Arc<Collection>>,
}

impl std::fmt::Debug for PyCollectionIter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PyCollectionIter")
            .field("items", &self.items)
            .finish()
    }
}

#[pymethods]
impl PyCollectionIter {
    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let next = py.detach(|| self.it.lock().unwrap_or_else(|e| e.into_inner()).next());
        let Some((key, v)) = next else {
            return Err(PyStopIteration::new_err(()));
        };
        let key = match &self.wide {
            None => key.into_pyobject(py)?.into_any(),
            Some(c) => match py.detach(|| c.ids_of(&[key])).map_err(store_err)?.pop() {
                Some(Some(Id::U128(v))) => v.into_pyobject(py)?.into_any(),
                _ => key.into_pyobject(py)?.into_any(),
            },
        };
        if !self.items {
            return Ok(key);
        }
        let vector = decode_rows(py, self.space, vec![Some(v)], true)?;
        Ok(PyTuple::new(py, [key, vector])?.into_any())
    }
}
