//! Turning Python arguments (ints, numpy arrays, sequences, bytes) into the
//! keys and vectors the engine takes, each converted at most once.
//!
//! Float indexes take any numeric array-like, converted to float32 once;
//! a C-contiguous float32 array is read in place (zero-copy). Hamming
//! indexes take uint8 arrays of packed bits (or bool arrays of unpacked
//! bits, packed here). NPHD indexes take `bytes` or a list of them.

use numpy::{
    AllowTypeChange, PyArrayDescrMethods, PyArrayLikeDyn, PyReadonlyArray1, PyUntypedArray,
    PyUntypedArrayMethods,
};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyByteArray, PyBytes, PyInt, PyList, PyMemoryView, PyTuple};
use sagitta_index::{Space, VectorRef};
use sagitta_kernels::{DType, Metric};

/// The key that marks an empty result slot; refused as a user key.
pub const NO_KEY: u64 = u64::MAX;
/// [`NO_KEY`] as error messages name it.
pub const NO_KEY_NAME: &str = "18446744073709551615 (2**64 - 1)";

/// Keys from one int or a 1-D array-like of non-negative integers.
#[derive(Debug)]
pub struct Keys {
    /// The keys.
    pub keys: Vec<u64>,
    /// Whether a single (scalar) key was given.
    pub single: bool,
}

/// Checks that a write has one key per row.
pub fn check_key_count(keys: usize, rows: usize) -> PyResult<()> {
    if keys != rows {
        return Err(PyValueError::new_err(format!(
            "keys: got {keys} keys for {rows} vectors"
        )));
    }
    Ok(())
}

/// Checks the keys of a write against its rows: one key per row, and
/// none of them `reserved` (the key that marks a missing result, named
/// `reserved_name` in the error). An in-memory index's results mark a
/// missing row by that key alone; a collection's results carry counts,
/// so a collection takes every key ([`check_key_count`]).
pub fn check_write_keys<K: PartialEq>(
    keys: &[K],
    rows: usize,
    reserved: &K,
    reserved_name: &str,
) -> PyResult<()> {
    check_key_count(keys.len(), rows)?;
    if let Some(i) = keys.iter().position(|k| k == reserved) {
        return Err(PyValueError::new_err(format!(
            "keys: row {i}: key {reserved_name} is reserved to mark missing results"
        )));
    }
    Ok(())
}

fn numpy(py: Python<'_>) -> PyResult<Bound<'_, PyModule>> {
    PyModule::import(py, "numpy")
}

fn scalar_key(obj: &Bound<'_, PyAny>, arg: &str) -> PyResult<u64> {
    if obj.is_instance_of::<PyBool>() {
        return Err(PyTypeError::new_err(format!(
            "{arg}: keys are integers, got a bool"
        )));
    }
    let k: u64 = obj.extract().map_err(|_| {
        PyValueError::new_err(format!(
            "{arg}: key {obj} is outside 0..2**64-1 (keys are unsigned 64-bit integers)"
        ))
    })?;
    Ok(k)
}

/// Extracts keys. `arg` names the argument in error messages.
pub fn keys(obj: &Bound<'_, PyAny>, arg: &str) -> PyResult<Keys> {
    let py = obj.py();
    if obj.is_instance_of::<PyInt>() {
        return Ok(Keys {
            keys: vec![scalar_key(obj, arg)?],
            single: true,
        });
    }
    if let Ok(a) = obj.extract::<PyReadonlyArray1<'_, u64>>() {
        let keys = match a.as_slice() {
            Ok(s) => s.to_vec(),
            Err(_) => a.as_array().to_vec(),
        };
        return Ok(Keys {
            keys,
            single: false,
        });
    }
    let np = numpy(py)?;
    let arr = np.call_method1("asarray", (obj,))?;
    let arr = arr.cast::<PyUntypedArray>()?;
    if arr.ndim() == 0 {
        return Ok(Keys {
            keys: vec![scalar_key(&arr.call_method0("item")?, arg)?],
            single: true,
        });
    }
    if arr.ndim() != 1 {
        return Err(PyValueError::new_err(format!(
            "{arg}: expected one key or a 1-D array of keys, got an array of shape {:?}",
            arr.shape()
        )));
    }
    if arr.len() == 0 {
        return Ok(Keys {
            keys: Vec::new(),
            single: false,
        });
    }
    let kind: char = arr.dtype().getattr("kind")?.extract()?;
    match kind {
        'u' => {}
        'i' => {
            let min: i64 = arr.call_method0("min")?.extract()?;
            if min < 0 {
                return Err(PyValueError::new_err(format!(
                    "{arg}: key {min} is negative (keys are unsigned 64-bit integers)"
                )));
            }
        }
        _ => {
            return Err(PyTypeError::new_err(format!(
                "{arg}: keys must be integers, got dtype {}",
                arr.dtype()
            )))
        }
    }
    let u = arr.call_method1("astype", (np.getattr("uint64")?,))?;
    let a = u.extract::<PyReadonlyArray1<'_, u64>>()?;
    Ok(Keys {
        keys: a.as_array().to_vec(),
        single: false,
    })
}

/// Vectors in the form the index's space takes.
#[derive(Debug)]
pub enum Rows<'py> {
    /// Float rows, `n * d` values row-major.
    Floats {
        /// The array (kept alive; read in place when contiguous).
        arr: PyArrayLikeDyn<'py, f32, AllowTypeChange>,
        /// A contiguous copy when the array is not C-contiguous.
        owned: Option<Vec<f32>>,
        /// Rows.
        n: usize,
        /// Components per row.
        d: usize,
        /// Whether one 1-D vector was given.
        single: bool,
    },
    /// Byte rows (packed bits, or NPHD codes of varying length).
    Bytes {
        /// All rows concatenated.
        data: Vec<u8>,
        /// `(start, end)` of each row in `data`.
        ranges: Vec<(usize, usize)>,
        /// Whether one vector was given.
        single: bool,
    },
}

impl Rows<'_> {
    /// Number of rows.
    pub fn len(&self) -> usize {
        match self {
            Rows::Floats { n, .. } => *n,
            Rows::Bytes { ranges, .. } => ranges.len(),
        }
    }

    /// Whether a single vector (not a batch) was given.
    pub fn single(&self) -> bool {
        match self {
            Rows::Floats { single, .. } | Rows::Bytes { single, .. } => *single,
        }
    }

    /// One [`VectorRef`] per row.
    pub fn refs(&self) -> Vec<VectorRef<'_>> {
        match self {
            Rows::Floats { arr, owned, d, .. } => {
                let all: &[f32] = match owned {
                    Some(v) => v,
                    None => arr.as_slice().unwrap_or(&[]),
                };
                if *d == 0 {
                    return Vec::new();
                }
                all.chunks_exact(*d).map(VectorRef::F32).collect()
            }
            Rows::Bytes { data, ranges, .. } => ranges
                .iter()
                .map(|&(a, b)| VectorRef::Bytes(&data[a..b]))
                .collect(),
        }
    }
}

fn shape_err(arg: &str, what: &str, shape: &[usize]) -> PyErr {
    PyValueError::new_err(format!(
        "{arg}: expected {what}, got an array of shape {shape:?}"
    ))
}

/// Extracts vectors for `space`; `arg` names the argument in errors.
pub fn rows<'py>(obj: &Bound<'py, PyAny>, space: &Space, arg: &str) -> PyResult<Rows<'py>> {
    match (space.dtype, space.metric) {
        (DType::B1, Metric::Nphd) => nphd_rows(obj, space, arg),
        (DType::B1, _) => bit_rows(obj, space, arg),
        _ => float_rows(obj, space, arg),
    }
}

fn float_rows<'py>(obj: &Bound<'py, PyAny>, space: &Space, arg: &str) -> PyResult<Rows<'py>> {
    if obj.is_instance_of::<PyBytes>() || obj.is_instance_of::<pyo3::types::PyString>() {
        return Err(PyTypeError::new_err(format!(
            "{arg}: expected an array of numbers, got {}",
            obj.get_type().name()?
        )));
    }
    let arr: PyArrayLikeDyn<'py, f32, AllowTypeChange> = obj.extract().map_err(|e| {
        PyTypeError::new_err(format!(
            "{arg}: expected an array of numbers convertible to float32 ({e})"
        ))
    })?;
    let shape = arr.shape().to_vec();
    let (n, d, single) = match shape.as_slice() {
        [d] => (1, *d, true),
        [n, d] => (*n, *d, false),
        _ => {
            return Err(shape_err(
                arg,
                "a 1-D vector or a 2-D array of vectors",
                &shape,
            ))
        }
    };
    if d != space.dims {
        return Err(PyValueError::new_err(format!(
            "{arg}: expected {} dimensions, got {d} (array of shape {shape:?})",
            space.dims
        )));
    }
    let owned = match arr.as_slice() {
        Ok(_) => None,
        Err(_) => Some(arr.as_array().iter().copied().collect()),
    };
    Ok(Rows::Floats {
        arr,
        owned,
        n,
        d,
        single,
    })
}

fn bytes_like(obj: &Bound<'_, PyAny>) -> Option<Vec<u8>> {
    if let Ok(b) = obj.cast::<PyBytes>() {
        return Some(b.as_bytes().to_vec());
    }
    if let Ok(b) = obj.cast::<PyByteArray>() {
        return Some(b.to_vec());
    }
    if obj.is_instance_of::<PyMemoryView>() {
        return obj.call_method0("tobytes").ok()?.extract::<Vec<u8>>().ok();
    }
    None
}

/// A uint8 matrix (or vector) from an array-like: uint8 arrays as they
/// are, bool arrays of `dims` unpacked bits packed, lists converted.
fn u8_array<'py>(
    obj: &Bound<'py, PyAny>,
    space: &Space,
    arg: &str,
) -> PyResult<Bound<'py, PyUntypedArray>> {
    let np = numpy(obj.py())?;
    let arr = if let Ok(a) = obj.cast::<PyUntypedArray>() {
        let kind: char = a.dtype().getattr("kind")?.extract()?;
        let is_u8 = a.dtype().is_equiv_to(&numpy::dtype::<u8>(obj.py()));
        if kind == 'b' && a.shape().last() == Some(&space.dims) {
            np.call_method(
                "packbits",
                (a,),
                Some(&[("axis", -1)].into_py_dict(obj.py())?),
            )?
        } else if is_u8 {
            a.clone().into_any()
        } else {
            return Err(PyTypeError::new_err(format!(
                "{arg}: binary vectors are uint8 arrays of packed bits (see numpy.packbits) \
                 or bool arrays of {} bits, got dtype {}",
                space.dims,
                a.dtype()
            )));
        }
    } else {
        np.call_method1("asarray", (obj, np.getattr("uint8")?))
            .map_err(|e| PyTypeError::new_err(format!("{arg}: expected packed-bit bytes ({e})")))?
    };
    Ok(arr.cast_into::<PyUntypedArray>()?)
}

use pyo3::types::IntoPyDict;

fn matrix_rows(arr: &Bound<'_, PyUntypedArray>) -> PyResult<(Vec<u8>, usize, usize, bool)> {
    let shape = arr.shape().to_vec();
    let (n, w, single) = match shape.as_slice() {
        [w] => (1, *w, true),
        [n, w] => (*n, *w, false),
        _ => (0, 0, false),
    };
    if shape.len() > 2 {
        return Ok((Vec::new(), usize::MAX, usize::MAX, false));
    }
    let flat = arr
        .call_method0("tobytes")?
        .cast_into::<PyBytes>()?
        .as_bytes()
        .to_vec();
    Ok((flat, n, w, single))
}

fn bit_rows<'py>(obj: &Bound<'py, PyAny>, space: &Space, arg: &str) -> PyResult<Rows<'py>> {
    let width = space.dims / 8;
    if let Some(b) = bytes_like(obj) {
        if b.len() != width {
            return Err(PyValueError::new_err(format!(
                "{arg}: expected {width} bytes of packed bits ({} bits), got {} bytes",
                space.dims,
                b.len()
            )));
        }
        return Ok(Rows::Bytes {
            ranges: vec![(0, b.len())],
            data: b,
            single: true,
        });
    }
    let arr = u8_array(obj, space, arg)?;
    let (data, n, w, single) = matrix_rows(&arr)?;
    if w == usize::MAX {
        return Err(shape_err(
            arg,
            "a 1-D code or a 2-D array of codes",
            arr.shape(),
        ));
    }
    if w != width {
        return Err(PyValueError::new_err(format!(
            "{arg}: expected {width} bytes of packed bits ({} bits) per vector, got {w} \
             (array of shape {:?})",
            space.dims,
            arr.shape()
        )));
    }
    Ok(Rows::Bytes {
        ranges: (0..n).map(|i| (i * w, (i + 1) * w)).collect(),
        data,
        single,
    })
}

fn nphd_rows<'py>(obj: &Bound<'py, PyAny>, space: &Space, arg: &str) -> PyResult<Rows<'py>> {
    if let Some(b) = bytes_like(obj) {
        return Ok(Rows::Bytes {
            ranges: vec![(0, b.len())],
            data: b,
            single: true,
        });
    }
    if obj.is_instance_of::<PyList>() || obj.is_instance_of::<PyTuple>() {
        let mut data = Vec::new();
        let mut ranges = Vec::new();
        for (i, item) in obj.try_iter()?.enumerate() {
            let item = item?;
            let code = match bytes_like(&item) {
                Some(b) => b,
                None => {
                    let a = u8_array(&item, space, arg)?;
                    let (flat, _, _, single) = matrix_rows(&a)?;
                    if !single {
                        return Err(PyTypeError::new_err(format!(
                            "{arg}: row {i}: expected bytes or a 1-D uint8 array"
                        )));
                    }
                    flat
                }
            };
            let start = data.len();
            data.extend_from_slice(&code);
            ranges.push((start, data.len()));
        }
        return Ok(Rows::Bytes {
            data,
            ranges,
            single: false,
        });
    }
    let arr = u8_array(obj, space, arg)?;
    let (data, n, w, single) = matrix_rows(&arr)?;
    if w == usize::MAX {
        return Err(shape_err(
            arg,
            "bytes, a list of bytes, or a uint8 array",
            arr.shape(),
        ));
    }
    Ok(Rows::Bytes {
        ranges: (0..n).map(|i| (i * w, (i + 1) * w)).collect(),
        data,
        single,
    })
}
