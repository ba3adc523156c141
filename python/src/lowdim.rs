//! `sagitta.LowDimIndex`: the certified exact kNN index for
//! low-dimensional data (`sagitta-lowdim`), with its kNN label vote.

use crate::errors::CorruptFileError;
use numpy::ndarray::Array2;
use numpy::{AllowTypeChange, IntoPyArray, PyArrayLikeDyn, PyUntypedArrayMethods};
use pyo3::exceptions::{PyOSError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyList;
use sagitta_lowdim::{LowDimError, LowDimIndex, LowDimScratch};
use std::path::PathBuf;
use std::sync::Arc;

/// Exact k-nearest-neighbour search over low-dimensional vectors (1 to 32
/// dimensions, squared Euclidean distance): a kd-tree searched branch and
/// bound, so every answer is the true top-k, ties broken by the lower row
/// number. Rows rounded to a few decimals are stored as exact ``int16``
/// codes. An optional integer label per row (0 to 65535) gives
/// ``classify``, the kNN vote.
#[derive(Debug)]
#[pyclass(name = "LowDimIndex", module = "sagitta", frozen)]
pub struct PyLowDimIndex {
    inner: LowDimIndex,
}

fn float_matrix(obj: &Bound<'_, PyAny>, arg: &str) -> PyResult<(Vec<f32>, usize, usize, bool)> {
    let arr: PyArrayLikeDyn<'_, f32, AllowTypeChange> = obj.extract().map_err(|e| {
        PyTypeError::new_err(format!(
            "{arg}: expected an array of numbers convertible to float32 ({e})"
        ))
    })?;
    let shape = arr.shape().to_vec();
    let (n, d, single) = match shape.as_slice() {
        [d] => (1, *d, true),
        [n, d] => (*n, *d, false),
        _ => {
            return Err(PyValueError::new_err(format!(
                "{arg}: expected a 1-D vector or a 2-D array of vectors, got shape {shape:?}"
            )))
        }
    };
    Ok((arr.as_array().iter().copied().collect(), n, d, single))
}

/// One query's vote: (label, count, share), most frequent first.
type Votes = Vec<(u16, u32, f64)>;

fn k_arg(k: i64) -> PyResult<usize> {
    usize::try_from(k)
        .ok()
        .filter(|&k| k > 0)
        .ok_or_else(|| PyValueError::new_err(format!("k: must be at least 1, got {k}")))
}

/// Converts a low-dimensional index error: damaged bytes raise
/// ``CorruptFileError``; bad input ``ValueError``, prefixed with the
/// argument at fault as the other indexes' errors are.
fn lowdim_err(e: LowDimError, arg: &str) -> PyErr {
    let prefix = match &e {
        LowDimError::Corrupt { .. } => return CorruptFileError::new_err(e.to_string()),
        LowDimError::ZeroK(_) | LowDimError::KTooLarge { .. } => "k",
        LowDimError::Empty | LowDimError::InvalidParameter { .. } | LowDimError::TooManyRows(_) => {
            ""
        }
        LowDimError::Dimensions { .. }
        | LowDimError::NotFinite { .. }
        | LowDimError::Row { .. } => arg,
    };
    if prefix.is_empty() {
        PyValueError::new_err(e.to_string())
    } else {
        PyValueError::new_err(format!("{prefix}: {e}"))
    }
}

#[pymethods]
impl PyLowDimIndex {
    /// Builds the index over ``vectors`` (``(n, dim)``), with one label per
    /// row if ``labels`` is given.
    #[new]
    #[pyo3(signature = (vectors, labels = None))]
    fn new(
        py: Python<'_>,
        vectors: &Bound<'_, PyAny>,
        labels: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let (rows, n, dim, single) = float_matrix(vectors, "vectors")?;
        if single {
            return Err(PyValueError::new_err(
                "vectors: expected a 2-D array of shape (rows, dim)",
            ));
        }
        let labels: Option<Vec<u16>> = match labels {
            None => None,
            Some(l) => {
                let l: Vec<i64> = l.extract().map_err(|e| {
                    PyTypeError::new_err(format!("labels: expected a sequence of integers ({e})"))
                })?;
                if l.len() != n {
                    return Err(PyValueError::new_err(format!(
                        "labels: {} labels for {n} rows",
                        l.len()
                    )));
                }
                Some(
                    l.into_iter()
                        .map(|x| {
                            u16::try_from(x).map_err(|_| {
                                PyValueError::new_err(format!("labels: {x} is outside 0..=65535"))
                            })
                        })
                        .collect::<PyResult<_>>()?,
                )
            }
        };
        if dim == 0 {
            return Err(PyValueError::new_err("vectors: 0 dimensions"));
        }
        let inner = py
            .detach(|| LowDimIndex::build(&rows, dim, labels.as_deref()))
            .map_err(|e| lowdim_err(e, "vectors"))?;
        Ok(PyLowDimIndex { inner })
    }

    /// Opens an index file written by ``save``, memory-mapped: rows are
    /// read from the page cache as searches touch them. The file is checked
    /// (checksums, structure) once; a damaged file raises
    /// ``CorruptFileError``.
    #[staticmethod]
    fn open(py: Python<'_>, path: PathBuf) -> PyResult<Self> {
        let file = std::fs::File::open(&path).map_err(|e| {
            PyOSError::new_err((
                e.raw_os_error().unwrap_or(0),
                e.to_string(),
                path.display().to_string(),
            ))
        })?;
        // SAFETY: the map is read-only; an index file is written once and
        // replaced by rename, never modified in place, by Sagitta.
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(|e| {
            PyOSError::new_err((
                e.raw_os_error().unwrap_or(0),
                e.to_string(),
                path.display().to_string(),
            ))
        })?;
        let inner = py
            .detach(|| LowDimIndex::from_shared(Arc::new(map)))
            .map_err(|e| lowdim_err(e.in_file(&path), "path"))?;
        Ok(PyLowDimIndex { inner })
    }

    /// Writes the index to ``path`` (through a temporary file, fsynced and
    /// renamed into place).
    fn save(&self, py: Python<'_>, path: PathBuf) -> PyResult<()> {
        let bytes = self.inner.as_bytes();
        py.detach(|| -> std::io::Result<()> {
            use std::io::Write;
            let tmp = path.with_extension("tmp");
            let mut f = std::fs::File::create(&tmp)?;
            f.write_all(bytes)?;
            f.sync_all()?;
            std::fs::rename(&tmp, &path)?;
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                std::fs::File::open(dir)?.sync_all()?;
            }
            Ok(())
        })
        .map_err(|e| {
            PyOSError::new_err((
                e.raw_os_error().unwrap_or(0),
                e.to_string(),
                path.display().to_string(),
            ))
        })
    }

    /// The exact ``k`` nearest rows of each query: ``(ids, distances)``,
    /// arrays of shape ``(k,)`` for one query or ``(queries, k)``; squared
    /// Euclidean distances, nearest first, ties by row number.
    fn search<'py>(
        &self,
        py: Python<'py>,
        queries: &Bound<'py, PyAny>,
        k: i64,
    ) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyAny>)> {
        let k = k_arg(k)?;
        let (q, n, d, single) = float_matrix(queries, "queries")?;
        let view = self.inner.view();
        if d != view.dim() {
            return Err(PyValueError::new_err(format!(
                "queries: expected {} dimensions, got {d}",
                view.dim()
            )));
        }
        let (ids, dists) = py
            .detach(|| -> Result<(Vec<u64>, Vec<f64>), LowDimError> {
                let mut scratch = LowDimScratch::default();
                let (mut ids, mut dists) = (Vec::with_capacity(n * k), Vec::with_capacity(n * k));
                for row in q.chunks_exact(d) {
                    for h in view.search(row, k, &mut scratch)? {
                        ids.push(u64::from(h.id));
                        dists.push(h.dist);
                    }
                }
                Ok((ids, dists))
            })
            .map_err(|e| lowdim_err(e, "queries"))?;
        if single {
            return Ok((
                ids.into_pyarray(py).into_any(),
                dists.into_pyarray(py).into_any(),
            ));
        }
        let shape = (n, k);
        let ids =
            Array2::from_shape_vec(shape, ids).map_err(|e| PyValueError::new_err(e.to_string()))?;
        let dists = Array2::from_shape_vec(shape, dists)
            .map_err(|e| PyValueError::new_err(e.to_string()))?;
        Ok((
            ids.into_pyarray(py).into_any(),
            dists.into_pyarray(py).into_any(),
        ))
    }

    /// The kNN vote: for one query, a list of ``(label, count, share)`` of
    /// the exact ``k`` nearest rows, most frequent first (ties: the smaller
    /// label); for several, one such list per query.
    fn classify<'py>(
        &self,
        py: Python<'py>,
        queries: &Bound<'py, PyAny>,
        k: i64,
    ) -> PyResult<Bound<'py, PyAny>> {
        let k = k_arg(k)?;
        let (q, _, d, single) = float_matrix(queries, "queries")?;
        let view = self.inner.view();
        if d != view.dim() {
            return Err(PyValueError::new_err(format!(
                "queries: expected {} dimensions, got {d}",
                view.dim()
            )));
        }
        let votes = py
            .detach(|| -> Result<Vec<Votes>, LowDimError> {
                let mut scratch = LowDimScratch::default();
                q.chunks_exact(d)
                    .map(|row| {
                        Ok(view
                            .classify(row, k, &mut scratch)?
                            .iter()
                            .map(|s| (s.label, s.count, s.share))
                            .collect())
                    })
                    .collect()
            })
            .map_err(|e| lowdim_err(e, "queries"))?;
        if single {
            return Ok(PyList::new(py, &votes[0])?.into_any());
        }
        Ok(PyList::new(py, votes)?.into_any())
    }

    /// Number of rows.
    fn __len__(&self) -> usize {
        self.inner.view().len()
    }

    /// Dimensions of the rows.
    #[getter]
    fn dim(&self) -> usize {
        self.inner.view().dim()
    }

    /// Whether rows carry labels (``classify`` needs them).
    #[getter]
    fn has_labels(&self) -> bool {
        self.inner.view().has_labels()
    }

    /// ``s`` when rows are stored exactly as ``int16`` codes ``value × s``
    /// (data on a decimal grid), ``None`` when kept as float32.
    #[getter]
    fn grid_scale(&self) -> Option<f64> {
        self.inner.view().grid_scale()
    }

    /// The file format version of its bytes (an opened older file is read
    /// as written; ``save`` of a new index writes the newest).
    #[getter]
    fn format_version(&self) -> u32 {
        self.inner.view().format_version()
    }

    /// Size of the index in bytes (as saved).
    #[getter]
    fn nbytes(&self) -> usize {
        self.inner.as_bytes().len()
    }

    fn __repr__(&self) -> String {
        let v = self.inner.view();
        format!(
            "LowDimIndex(rows={}, dim={}, grid_scale={:?}, labels={})",
            v.len(),
            v.dim(),
            v.grid_scale(),
            v.has_labels()
        )
    }
}
