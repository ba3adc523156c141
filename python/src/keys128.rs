//! 128-bit keys in and out of Python (collections created with
//! `key_bits=128`).
//!
//! In: a Python `int` (0 .. 2**128 - 1), 16 `bytes` (big-endian), a string
//! (32 hexadecimal digits, `0x...`, a UUID, or decimal), a sequence of
//! those, a numpy array of 16-byte items (`V16` or `S16`, big-endian), an
//! `(n, 2)` integer array of (high, low) 64-bit halves, or a 1-D integer
//! array (keys below 2**64).
//!
//! Out: a single key is an `int`; arrays of keys are `(..., 2)` uint64
//! arrays of (high, low) halves, `2**128 - 1` marking an empty slot.

use crate::convert;
use numpy::ndarray::ArrayD;
use numpy::{IntoPyArray, PyReadonlyArray2, PyUntypedArray, PyUntypedArrayMethods};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyByteArray, PyBytes, PyInt, PyString};

/// The key that marks an empty result slot; refused as a user key.
pub const NO_KEY128: u128 = u128::MAX;

/// 128-bit keys as given.
#[derive(Debug)]
pub struct Keys128 {
    /// The keys.
    pub keys: Vec<u128>,
    /// Whether a single (scalar) key was given.
    pub single: bool,
}

/// One key given as a scalar (`None` for anything else: a sequence or
/// an array).
pub fn scalar(obj: &Bound<'_, PyAny>, arg: &str) -> PyResult<Option<u128>> {
    if obj.is_instance_of::<PyBool>() {
        return Err(PyTypeError::new_err(format!(
            "{arg}: keys are integers or 16 bytes, got a bool"
        )));
    }
    if obj.is_instance_of::<PyInt>() {
        return obj.extract::<u128>().map(Some).map_err(|_| {
            PyValueError::new_err(format!(
                "{arg}: key {obj} is outside 0..2**128-1 (keys are unsigned 128-bit integers)"
            ))
        });
    }
    let from_bytes = |raw: &[u8]| {
        <[u8; 16]>::try_from(raw)
            .map(|a| Some(u128::from_be_bytes(a)))
            .map_err(|_| {
                PyValueError::new_err(format!(
                    "{arg}: a key as bytes must be 16 bytes (big-endian), got {}",
                    raw.len()
                ))
            })
    };
    if let Ok(b) = obj.cast::<PyBytes>() {
        return from_bytes(b.as_bytes());
    }
    if let Ok(b) = obj.cast::<PyByteArray>() {
        return from_bytes(&b.to_vec());
    }
    if let Ok(s) = obj.cast::<PyString>() {
        let s = s.to_str()?;
        return sagitta_store::parse_u128(s).map(Some).ok_or_else(|| {
            PyValueError::new_err(format!(
                "{arg}: {s:?} is not a 128-bit key (32 hex digits, 0x..., a UUID or decimal)"
            ))
        });
    }
    Ok(None)
}

/// Extracts 128-bit keys. `arg` names the argument in error messages.
pub fn keys128(obj: &Bound<'_, PyAny>, arg: &str) -> PyResult<Keys128> {
    if let Some(k) = scalar(obj, arg)? {
        return Ok(Keys128 {
            keys: vec![k],
            single: true,
        });
    }
    if let Ok(arr) = obj.cast::<PyUntypedArray>() {
        return array(obj.py(), arr, arg);
    }
    if obj.hasattr("tobytes")? && obj.hasattr("dtype")? {
        // A numpy scalar (e.g. one item of a V16 array).
        let np = obj.py().import("numpy")?;
        let arr = np.call_method1("asarray", (obj,))?;
        return array(obj.py(), arr.cast::<PyUntypedArray>()?, arg);
    }
    let mut keys = Vec::new();
    for item in obj.try_iter().map_err(|_| {
        PyTypeError::new_err(format!(
            "{arg}: expected a 128-bit key (int, 16 bytes, str) or a sequence or array of them"
        ))
    })? {
        let item = item?;
        keys.push(scalar(&item, arg)?.ok_or_else(|| {
            PyTypeError::new_err(format!(
                "{arg}: expected 128-bit keys (int, 16 bytes, str), got {}",
                item.get_type()
            ))
        })?);
    }
    Ok(Keys128 {
        keys,
        single: false,
    })
}

fn array(py: Python<'_>, arr: &Bound<'_, PyUntypedArray>, arg: &str) -> PyResult<Keys128> {
    let dtype = arr.dtype();
    let kind: char = dtype.getattr("kind")?.extract()?;
    let itemsize: usize = dtype.getattr("itemsize")?.extract()?;
    let shape = arr.shape().to_vec();
    match kind {
        'V' | 'S' if itemsize == 16 && shape.len() <= 1 => {
            let np = py.import("numpy")?;
            let bytes = np
                .call_method1("ascontiguousarray", (arr,))?
                .call_method0("tobytes")?;
            let bytes = bytes.cast::<PyBytes>()?.as_bytes();
            let keys = bytes
                .chunks_exact(16)
                .map(|c| u128::from_be_bytes(c.try_into().unwrap_or([0; 16])))
                .collect();
            Ok(Keys128 {
                keys,
                single: shape.is_empty(),
            })
        }
        'u' | 'i' if shape.len() == 2 && shape[1] == 2 => {
            let np = py.import("numpy")?;
            if kind == 'i' && arr.len() > 0 {
                let min: i64 = arr.call_method0("min")?.extract()?;
                if min < 0 {
                    return Err(PyValueError::new_err(format!(
                        "{arg}: (high, low) halves must be non-negative, got {min}"
                    )));
                }
            }
            let u = arr.call_method1("astype", (np.getattr("uint64")?,))?;
            let a = u.extract::<PyReadonlyArray2<'_, u64>>()?;
            let keys = a
                .as_array()
                .rows()
                .into_iter()
                .map(|r| (u128::from(r[0]) << 64) | u128::from(r[1]))
                .collect();
            Ok(Keys128 {
                keys,
                single: false,
            })
        }
        'u' | 'i' if shape.len() <= 1 => {
            let k = convert::keys(arr.as_any(), arg)?;
            Ok(Keys128 {
                keys: k.keys.into_iter().map(u128::from).collect(),
                single: k.single,
            })
        }
        _ => Err(PyTypeError::new_err(format!(
            "{arg}: 128-bit keys as an array are V16/S16 items (big-endian), an (n, 2) \
             array of (high, low) halves, or 1-D integers; got dtype {dtype} shape {shape:?}"
        ))),
    }
}

/// `keys` as a uint64 array of shape `shape + (2,)`: (high, low) halves.
pub fn array128<'py>(
    py: Python<'py>,
    keys: &[u128],
    shape: &[usize],
) -> PyResult<Bound<'py, PyAny>> {
    let mut flat = Vec::with_capacity(keys.len() * 2);
    for &k in keys {
        flat.push((k >> 64) as u64);
        flat.push(k as u64);
    }
    let mut dims = shape.to_vec();
    dims.push(2);
    let a = ArrayD::from_shape_vec(dims, flat).map_err(|e| PyValueError::new_err(e.to_string()))?;
    Ok(a.into_pyarray(py).into_any())
}
