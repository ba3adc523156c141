//! The write side of `sagitta.Collection`: `add`, `add_once`, `upsert`,
//! `remove` and `set_payload`, translated into the store's writes.

use super::args::{bind_where, payload_arg, values_arg};
use super::keys::wide;
use super::PyCollection;
use crate::convert;
use crate::errors::{index_err, store_err};
use crate::keys128;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use sagitta_index::IndexError;
use sagitta_store::{Collection, IdColumn, IdWrite, Payload, StoreError};
use std::sync::Arc;

/// Which write a batch of keys and vectors is.
#[derive(Debug)]
pub(super) enum WriteKind {
    Add,
    AddOnce,
    Upsert(Option<Payload>),
}

impl PyCollection {
    /// `upsert`: rows with their payload, or (``vectors=None``) the
    /// payload's text to embed.
    pub(super) fn upsert_impl(
        &self,
        py: Python<'_>,
        keys: &Bound<'_, PyAny>,
        vectors: &Bound<'_, PyAny>,
        payload: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let payload = payload
            .filter(|p| !p.is_none())
            .map(|p| payload_arg(py, p))
            .transpose()?;
        if vectors.is_none() {
            let c = self.coll()?;
            if wide(&c) {
                return Err(PyValueError::new_err(
                    "vectors: None (embedding) is not supported with 128-bit keys yet",
                ));
            }
            let keys = convert::keys(keys, "keys")?;
            let p = payload.ok_or_else(|| {
                PyValueError::new_err("vectors: None needs a payload with the text to embed")
            })?;
            return py
                .detach(|| c.upsert_embedding(&keys.keys, &p))
                .map_err(store_err);
        }
        self.write(py, keys, vectors, WriteKind::Upsert(payload))
            .map(|_| ())
    }

    /// `remove`: by keys or by a filter.
    pub(super) fn remove_impl(
        &self,
        py: Python<'_>,
        keys: Option<&Bound<'_, PyAny>>,
        r#where: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<usize> {
        let c = self.coll()?;
        match (keys, bind_where(py, &c, r#where)?) {
            (Some(keys), None) => {
                let keys = self.key_arg(py, &c, keys, "keys")?.known();
                py.detach(|| c.remove(&keys)).map_err(store_err)
            }
            (None, Some(f)) => py.detach(|| c.remove_where(&f)).map_err(store_err),
            _ => Err(PyValueError::new_err(
                "remove: give either keys or where=, not both",
            )),
        }
    }

    /// `set_payload`: by keys with one row each or one row for all, or by
    /// a filter with one row for all.
    pub(super) fn set_payload_impl(
        &self,
        py: Python<'_>,
        keys: Option<&Bound<'_, PyAny>>,
        payload: Option<&Bound<'_, PyAny>>,
        r#where: Option<&Bound<'_, PyAny>>,
        values: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<usize> {
        let c = self.coll()?;
        let payload = payload
            .filter(|p| !p.is_none())
            .map(|p| payload_arg(py, p))
            .transpose()?;
        let values = values
            .filter(|v| !v.is_none())
            .map(|v| values_arg(py, &c, v))
            .transpose()?;
        let filter = bind_where(py, &c, r#where)?;
        match (keys.filter(|k| !k.is_none()), filter, payload, values) {
            (Some(keys), None, Some(p), None) => {
                let keys = self.stored_keys(py, &c, keys)?;
                py.detach(|| c.set_payload(&keys, &p)).map_err(store_err)
            }
            (Some(keys), None, None, Some(v)) => {
                let keys = self.stored_keys(py, &c, keys)?;
                let p = v.select(&vec![0; keys.len()]);
                py.detach(|| c.set_payload(&keys, &p)).map_err(store_err)
            }
            (None, Some(f), None, Some(v)) => {
                py.detach(|| c.set_payload_where(&f, &v)).map_err(store_err)
            }
            _ => Err(PyValueError::new_err(
                "set_payload: give keys with payload= (one row per key) or with values= \
                 (one value per column, for every key), or where= with values=",
            )),
        }
    }

    /// [`PyCollection::write`] with 128-bit keys.
    fn write128(
        &self,
        py: Python<'_>,
        c: &Arc<Collection>,
        keys: &Bound<'_, PyAny>,
        vectors: &Bound<'_, PyAny>,
        kind: WriteKind,
    ) -> PyResult<usize> {
        let keys = keys128::keys128(keys, "keys")?;
        let rows = convert::rows(vectors, &c.config().space, "vectors")?;
        convert::check_key_count(keys.keys.len(), rows.len())?;
        let single = rows.single() && keys.single;
        let refs = rows.refs();
        let ids = IdColumn::U128(keys.keys);
        let n = refs.len();
        py.detach(|| match &kind {
            WriteKind::Add => c.write_ids(&ids, &refs, None, IdWrite::Add).map(|_| n),
            WriteKind::AddOnce => c
                .write_ids(&ids, &refs, None, IdWrite::AddOnce)
                .map(|k| k.len()),
            WriteKind::Upsert(p) => c
                .write_ids(&ids, &refs, p.as_ref(), IdWrite::Upsert)
                .map(|_| n),
        })
        .map_err(|e| match e {
            StoreError::Index(IndexError::Row { source, .. }) if single => {
                index_err(*source, "vectors")
            }
            e => store_err(e),
        })
    }

    /// Writes a batch of keys and vectors (`kind`: add, add once or
    /// upsert); returns the rows written.
    pub(super) fn write(
        &self,
        py: Python<'_>,
        keys: &Bound<'_, PyAny>,
        vectors: &Bound<'_, PyAny>,
        kind: WriteKind,
    ) -> PyResult<usize> {
        let c = self.coll()?;
        if wide(&c) {
            return self.write128(py, &c, keys, vectors, kind);
        }
        let keys = convert::keys(keys, "keys")?;
        let rows = convert::rows(vectors, &c.config().space, "vectors")?;
        convert::check_key_count(keys.keys.len(), rows.len())?;
        let single = rows.single() && keys.single;
        let refs = rows.refs();
        py.detach(|| match &kind {
            WriteKind::Add => c.add(&keys.keys, &refs).map(|()| refs.len()),
            WriteKind::AddOnce => c.add_once(&keys.keys, &refs),
            WriteKind::Upsert(p) => c
                .upsert_with_payload(&keys.keys, &refs, p.as_ref())
                .map(|()| refs.len()),
        })
        .map_err(|e| match e {
            StoreError::Index(IndexError::Row { source, .. }) if single => {
                index_err(*source, "vectors")
            }
            e => store_err(e),
        })
    }
}
