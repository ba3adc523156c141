//! Keys given to a collection's lookups: 64-bit keys as they are, 128-bit
//! ids resolved through the collection's id check.

use super::PyCollection;
use crate::convert::{self, NO_KEY};
use crate::errors::store_err;
use crate::keys128;
use pyo3::prelude::*;
use sagitta_store::{Collection, Id, IdType};
use std::sync::Arc;

/// Whether `c` has 128-bit keys.
pub(super) fn wide(c: &Collection) -> bool {
    c.id_type() == IdType::UInt128
}

/// Keys given to a lookup, as the store looks them up.
pub(super) struct KeyArg {
    /// 64-bit keys: as given. 128-bit ids: the key of each live one,
    /// [`NO_KEY`] for the others.
    pub(super) keys: Vec<u64>,
    /// 128-bit ids only: whether each is live (its stored id checked, so
    /// an id never answers for another with the same 64-bit key).
    pub(super) live: Option<Vec<bool>>,
    /// Whether a single key was given.
    pub(super) single: bool,
}

impl KeyArg {
    /// The keys that may be live (every 64-bit key; live 128-bit ids).
    pub(super) fn known(self) -> Vec<u64> {
        match self.live {
            None => self.keys,
            Some(live) => self
                .keys
                .into_iter()
                .zip(live)
                .filter_map(|(k, l)| l.then_some(k))
                .collect(),
        }
    }
}

impl PyCollection {
    /// Reads keys given to a lookup: 64-bit keys as they are, 128-bit ids
    /// resolved through the collection's id check.
    pub(super) fn key_arg(
        &self,
        py: Python<'_>,
        c: &Arc<Collection>,
        keys: &Bound<'_, PyAny>,
        arg: &str,
    ) -> PyResult<KeyArg> {
        if !wide(c) {
            let k = convert::keys(keys, arg)?;
            return Ok(KeyArg {
                keys: k.keys,
                live: None,
                single: k.single,
            });
        }
        let k = keys128::keys128(keys, arg)?;
        let ids: Vec<Id> = k.keys.iter().map(|&v| Id::U128(v)).collect();
        let found = py.detach(|| c.live_keys(&ids)).map_err(store_err)?;
        Ok(KeyArg {
            keys: found.iter().map(|l| l.unwrap_or(NO_KEY)).collect(),
            live: Some(found.iter().map(Option::is_some).collect()),
            single: k.single,
        })
    }

    /// Keys of rows to update: every one must be stored (a 128-bit id
    /// that is not raises :class:`KeyError` here; a 64-bit key, in the
    /// store).
    pub(super) fn stored_keys(
        &self,
        py: Python<'_>,
        c: &Arc<Collection>,
        keys: &Bound<'_, PyAny>,
    ) -> PyResult<Vec<u64>> {
        let k = self.key_arg(py, c, keys, "keys")?;
        if let Some(row) = k.live.as_ref().and_then(|l| l.iter().position(|&x| !x)) {
            return Err(pyo3::exceptions::PyKeyError::new_err(format!(
                "row {row}: key is not in the collection (nothing written)"
            )));
        }
        Ok(k.keys)
    }
}
