//! Index arguments from Python: names and values checked, parameter errors
//! reported under the Python names (`connectivity`, not `m`).

use crate::errors::{index_err, store_err};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use sagitta_index::{HnswParams, IndexError, IndexKind, IvfParams, Space};
use sagitta_kernels::DType;
use sagitta_store::request::{parse_dtype, parse_kind, parse_metric};

/// An index error with the store's parameter names (`m`, `ef_search`,
/// ...) turned into the Python ones (`connectivity`, `expansion_search`).
pub(super) fn rename_param(e: IndexError) -> IndexError {
    match e {
        IndexError::InvalidParameter {
            name,
            value,
            reason,
        } => IndexError::InvalidParameter {
            name: match name {
                "m" => "connectivity",
                "ef_construction" => "expansion_add",
                "ef_search" => "expansion_search",
                "dims" => "ndim",
                other => other,
            },
            value,
            reason,
        },
        other => other,
    }
}

/// `v` as a count of at least 1, or a `ValueError` naming `name`.
pub(crate) fn positive(name: &str, v: i64) -> PyResult<usize> {
    usize::try_from(v)
        .ok()
        .filter(|&v| v > 0)
        .ok_or_else(|| PyValueError::new_err(format!("{name}: must be at least 1, got {v}")))
}

/// Parses the arguments of `Index(...)` into a space, a kind and HNSW
/// parameters (validated later by `Index::new`; see [`param_err`]).
/// `Collection.create(...)` hands its own to the store's
/// `CollectionOptions` instead.
#[allow(clippy::too_many_arguments)]
pub(super) fn index_args(
    ndim: i64,
    metric: &str,
    dtype: Option<&str>,
    kind: &str,
    connectivity: i64,
    expansion_add: i64,
    expansion_search: i64,
) -> PyResult<(Space, IndexKind, HnswParams)> {
    // Names are read by the store's one parser of them (the same words
    // and errors as a collection's options).
    let metric_v = parse_metric(metric).map_err(store_err)?;
    let dtype_v = match dtype {
        None if metric_v.is_binary() => DType::B1,
        None => DType::F32,
        Some(d) => parse_dtype(d).map_err(store_err)?,
    };
    let kind_v = parse_kind(kind).map_err(store_err)?;
    let ndim = usize::try_from(ndim)
        .map_err(|_| PyValueError::new_err(format!("ndim: must be in 1..=65536, got {ndim}")))?;
    let space =
        Space::new(ndim, metric_v, dtype_v).map_err(|e| index_err(rename_param(e), "ndim"))?;
    let params = HnswParams {
        m: usize::try_from(connectivity).unwrap_or(0),
        ef_construction: usize::try_from(expansion_add).unwrap_or(0),
        ef_search: usize::try_from(expansion_search).unwrap_or(0),
        ..HnswParams::default()
    };
    Ok((space, kind_v, params))
}

/// An index-parameter error under the Python argument names, showing the
/// value the caller passed (negative values were clamped to 0 on the way).
pub(crate) fn param_err(
    e: IndexError,
    connectivity: i64,
    expansion_add: i64,
    expansion_search: i64,
) -> PyErr {
    let e = match rename_param(e) {
        IndexError::InvalidParameter {
            name,
            reason,
            value,
        } => {
            let value = match name {
                "connectivity" => connectivity.to_string(),
                "expansion_add" => expansion_add.to_string(),
                "expansion_search" => expansion_search.to_string(),
                _ => value,
            };
            IndexError::InvalidParameter {
                name,
                value,
                reason,
            }
        }
        other => other,
    };
    index_err(e, "")
}

/// IVF parameters from the Python arguments.
pub(super) fn ivf_args(
    bits: i64,
    partitions: Option<i64>,
    nprobe: i64,
    refine: Option<i64>,
    seed: Option<u64>,
) -> PyResult<IvfParams> {
    let bits = u8::try_from(bits)
        .ok()
        .filter(|b| (1..=8).contains(b))
        .ok_or_else(|| PyValueError::new_err(format!("bits: must be in 1..=8, got {bits}")))?;
    let partitions = partitions.map(|p| positive("partitions", p)).transpose()?;
    let refine = refine
        .map(|r| {
            usize::try_from(r)
                .map_err(|_| PyValueError::new_err(format!("refine: must be >= 0, got {r}")))
        })
        .transpose()?;
    let p = IvfParams {
        bits,
        partitions,
        nprobe: positive("nprobe", nprobe)?,
        refine,
        seed: seed.unwrap_or(IvfParams::default().seed),
        ..IvfParams::default()
    };
    p.validate().map_err(|e| index_err(e, ""))?;
    Ok(p)
}

/// `nprobe` / `refine` search overrides.
pub(crate) fn ivf_overrides(
    nprobe: Option<i64>,
    refine: Option<i64>,
) -> PyResult<(Option<usize>, Option<usize>)> {
    let nprobe = nprobe.map(|p| positive("nprobe", p)).transpose()?;
    let refine = refine
        .map(|r| {
            usize::try_from(r)
                .map_err(|_| PyValueError::new_err(format!("refine: must be >= 0, got {r}")))
        })
        .transpose()?;
    Ok((nprobe, refine))
}
