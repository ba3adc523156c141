//! The read side of `sagitta.Collection`: `search` (dense, text or
//! hybrid), `get`, `contains` and `scan`.

use super::args::{arrow_table, bind_where, columns_arg, helpers};
use super::keys::{wide, KeyArg};
use super::PyCollection;
use crate::convert::{self, NO_KEY};
use crate::errors::{index_err, store_err};
use crate::index::{decode_rows, ivf_overrides, pool, positive, threads_arg, SearchResult};
use crate::keys128::{self, NO_KEY128};
use crate::text;
use numpy::PyArray1;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyTuple;
use sagitta_index::IndexError;
use sagitta_store::{Answer, CollectionSearch, Id, Query, StoreError};

/// The arguments of `Collection.search`, as Python passed them.
pub(super) struct SearchArgs<'a, 'py> {
    pub(super) queries: &'a Bound<'py, PyAny>,
    pub(super) k: i64,
    pub(super) filter: Option<&'a Bound<'py, PyAny>>,
    pub(super) r#where: Option<&'a Bound<'py, PyAny>>,
    pub(super) columns: Option<&'a Bound<'py, PyAny>>,
    pub(super) radius: Option<f64>,
    pub(super) exact: bool,
    pub(super) expansion: Option<i64>,
    pub(super) nprobe: Option<i64>,
    pub(super) refine: Option<i64>,
    pub(super) threads: Option<i64>,
    pub(super) text: Option<String>,
    pub(super) fusion: Option<&'a str>,
    pub(super) alpha: Option<f64>,
    pub(super) rrf_k: Option<f64>,
    pub(super) depth: Option<i64>,
}

impl PyCollection {
    /// `search`: a text or hybrid search when `text` is given, else a
    /// dense one.
    pub(super) fn search_impl(&self, py: Python<'_>, a: SearchArgs<'_, '_>) -> PyResult<Py<PyAny>> {
        let SearchArgs {
            queries,
            k,
            filter,
            r#where,
            columns,
            radius,
            exact,
            expansion,
            nprobe,
            refine,
            threads,
            text,
            fusion,
            alpha,
            rrf_k,
            depth,
        } = a;
        let c = self.coll()?;
        let k = usize::try_from(k)
            .ok()
            .filter(|&k| k > 0)
            .ok_or_else(|| PyValueError::new_err(format!("k: must be at least 1, got {k}")))?;
        // Translated into the store's Query (Python ints to unsigned
        // ones); the store checks it: k's limit, the knobs, text-only
        // settings without a text, a NaN radius.
        let fusion = text::fusion_arg(fusion, alpha, rrf_k)?;
        let depth = depth.map(|d| positive("depth", d)).transpose()?;
        if let Some(text) = text {
            let ef = expansion.map(|e| positive("expansion", e)).transpose()?;
            let (nprobe, refine) = ivf_overrides(nprobe, refine)?;
            if wide(&c) {
                return Err(PyValueError::new_err(
                    "text: text searches are not supported with 128-bit keys yet",
                ));
            }
            let allowed = filter.map(|f| convert::keys(f, "filter")).transpose()?;
            let predicate = bind_where(py, &c, r#where)?;
            let columns = columns_arg(columns)?;
            let opts = CollectionSearch {
                ef,
                exact,
                filter: allowed.as_ref().map(|a| a.keys.as_slice()),
                predicate: predicate.as_ref(),
                radius: radius.map(|r| r as f32),
                nprobe,
                refine,
            };
            let (keys, r) = text::search(py, &c, Some(queries), &text, k, fusion, depth, opts)?;
            let r = match columns {
                None => r,
                Some(cols) => {
                    let batch = py
                        .detach(|| c.payload_table(&keys, cols.as_deref()))
                        .map_err(store_err)?;
                    text::with_payload(py, r, arrow_table(py, &batch)?.unbind())?
                }
            };
            return Ok(r.into_any());
        }
        let ef = expansion.map(|e| positive("expansion", e)).transpose()?;
        let (nprobe, refine) = ivf_overrides(nprobe, refine)?;
        let threads = threads_arg(threads)?;
        let allowed = filter
            .map(|f| self.key_arg(py, &c, f, "filter").map(KeyArg::known))
            .transpose()?;
        let predicate = bind_where(py, &c, r#where)?;
        let columns = columns_arg(columns)?;
        let rows = convert::rows(queries, &c.config().space, "queries")?;
        let single = rows.single();
        let refs = rows.refs();
        let n = refs.len();
        let opts = CollectionSearch {
            ef,
            exact,
            filter: allowed.as_deref(),
            predicate: predicate.as_ref(),
            radius: radius.map(|r| r as f32),
            nprobe,
            refine,
        };
        let q = Query {
            fusion,
            depth,
            opts,
            ..Query::dense(refs, k)
        };
        // With columns, each hit's payload is the row of the part and slot
        // that answered (`search_rows`), not read again by key: a row
        // overwritten or removed meanwhile cannot lend another version's
        // payload, or none.
        let run = || match &columns {
            None => match c.query(&q)? {
                Answer::Dense(found) => Ok((found, None)),
                Answer::Fused(_) => Err(StoreError::InvalidQuery("not a dense query".into())),
            },
            Some(cols) => {
                let r = c.search_rows(&q, false)?;
                let batch = r.payload_table(k, cols.as_deref())?;
                Ok((r.hits, Some(batch)))
            }
        };
        let (found, batch) = py
            .detach(|| {
                if threads == 0 {
                    run()
                } else {
                    match pool(threads) {
                        Ok(p) => p.install(run),
                        Err(_) => run(),
                    }
                }
            })
            .map_err(|e| match e {
                StoreError::Index(IndexError::Row { source, .. }) if single => {
                    index_err(*source, "queries")
                }
                StoreError::Index(e) => index_err(e, "queries"),
                e => store_err(e),
            })?;
        let mut keys_out = vec![NO_KEY; n * k];
        let mut dist_out = vec![f32::INFINITY; n * k];
        let mut counts = vec![0i64; n];
        for (i, row) in found.iter().enumerate() {
            for (j, nb) in row.iter().enumerate().take(k) {
                keys_out[i * k + j] = nb.key;
                dist_out[i * k + j] = nb.distance;
            }
            counts[i] = row.len().min(k) as i64;
        }
        let table = match batch {
            None => None,
            Some(batch) => Some(arrow_table(py, &batch)?.unbind()),
        };
        let wide_keys = if wide(&c) {
            let ids = py.detach(|| c.ids_of(&keys_out)).map_err(store_err)?;
            let ids: Vec<u128> = ids
                .into_iter()
                .map(|id| match id {
                    Some(Id::U128(v)) => v,
                    _ => NO_KEY128,
                })
                .collect();
            let shape: Vec<usize> = if single { vec![k] } else { vec![n, k] };
            Some(keys128::array128(py, &ids, &shape)?.unbind())
        } else {
            None
        };
        let r = SearchResult::new(py, keys_out, dist_out, counts, k, single)?;
        let r = match wide_keys {
            Some(keys) => r.with_keys(keys),
            None => r,
        };
        Ok(Py::new(
            py,
            match table {
                Some(t) => r.with_payload(t),
                None => r,
            },
        )?
        .into_any())
    }

    /// `get`: vectors, and with `payload` / `columns` their payload rows.
    pub(super) fn get_impl<'py>(
        &self,
        py: Python<'py>,
        keys: &Bound<'py, PyAny>,
        payload: bool,
        columns: Option<Vec<String>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let c = self.coll()?;
        let keys = self.key_arg(py, &c, keys, "keys")?;
        let flat = &keys.keys;
        let found: Vec<Option<Vec<u8>>> = py.detach(|| {
            let mut found = c.get_raw_many(flat);
            if let Some(live) = &keys.live {
                for (f, &l) in found.iter_mut().zip(live) {
                    if !l {
                        *f = None;
                    }
                }
            }
            found
        });
        let vectors = decode_rows(py, c.config().space, found, keys.single)?;
        if !payload && columns.is_none() {
            return Ok(vectors);
        }
        let batch = py
            .detach(|| c.payload_table(flat, columns.as_deref()))
            .map_err(store_err)?;
        let table = arrow_table(py, &batch)?;
        Ok(PyTuple::new(py, [vectors, table])?.into_any())
    }

    /// `contains`: whether each key is live.
    pub(super) fn contains_impl<'py>(
        &self,
        py: Python<'py>,
        keys: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let c = self.coll()?;
        let keys = self.key_arg(py, &c, keys, "keys")?;
        let hits: Vec<bool> = match keys.live {
            Some(live) => live,
            None => py.detach(|| c.contains_many(&keys.keys)),
        };
        if keys.single {
            Ok(pyo3::types::PyBool::new(py, hits[0]).to_owned().into_any())
        } else {
            Ok(PyArray1::from_vec(py, hits).into_any())
        }
    }

    /// `scan`: live keys passing a filter, with payload columns.
    pub(super) fn scan_impl<'py>(
        &self,
        py: Python<'py>,
        r#where: Option<&Bound<'py, PyAny>>,
        columns: Option<Vec<String>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let c = self.coll()?;
        let f = bind_where(py, &c, r#where)?;
        let (keys, batch) = py
            .detach(|| {
                let keys = c.keys_where(f.as_ref())?;
                let batch = c.payload_table(&keys, columns.as_deref())?;
                Ok((keys, batch))
            })
            .map_err(store_err)?;
        let table = arrow_table(py, &batch)?;
        helpers(py)?.call_method1("with_keys", (table, PyArray1::from_vec(py, keys)))
    }
}
