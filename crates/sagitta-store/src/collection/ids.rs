//! A collection's ids: writes and lookups by the ids users give, and the
//! ids of stored keys (see [`crate::ids`] for the mapping).

use super::Collection;
use crate::error::{Result, StoreError};
use crate::ids::{Id, IdColumn, IdType, STRING_ID_FIELD};
use crate::payload::{Field, Payload, PayloadError, Value};
use sagitta_index::VectorRef;
use std::collections::HashMap;
use std::sync::atomic::Ordering;

/// An id type and whether it is still open, as one byte (`Inner::id_type`).
pub(super) fn pack(t: IdType, open: bool) -> u8 {
    let code = match t {
        IdType::UInt64 => 0,
        IdType::Int64 => 1,
        IdType::String => 2,
        IdType::UInt128 => 3,
    };
    code | if open { 0x80 } else { 0 }
}

fn unpack(b: u8) -> (IdType, bool) {
    let t = match b & 0x7f {
        1 => IdType::Int64,
        2 => IdType::String,
        3 => IdType::UInt128,
        _ => IdType::UInt64,
    };
    (t, b & 0x80 != 0)
}

impl Collection {
    /// The type of this collection's ids (an open one reads as uint64
    /// until the first write by ids fixes it; see
    /// [`crate::CollectionConfig::id_type_open`]).
    pub fn id_type(&self) -> IdType {
        unpack(self.inner.id_type.load(Ordering::Acquire)).0
    }

    /// Whether the id type is still open: the collection was created
    /// without one and nothing has been written to it by ids since.
    pub fn id_type_open(&self) -> bool {
        unpack(self.inner.id_type.load(Ordering::Acquire)).1
    }

    /// The id type a write of ids of type `given` writes under: an open
    /// type is fixed here, once, and recorded in the manifest before the
    /// write is logged (`given` when the collection is empty and `given`
    /// is a 64-bit type, else uint64). A read-only handle changes nothing.
    fn settle_id_type(&self, given: IdType) -> Result<IdType> {
        let (t, open) = unpack(self.inner.id_type.load(Ordering::Acquire));
        if !open || self.inner.mode != super::OpenMode::ReadWrite {
            return Ok(t);
        }
        // The manifest's lock serialises this with commits and with other
        // first writes (it is never taken while the writer lock is held).
        let mut mg = self.inner.manifest.lock();
        let (t, open) = unpack(self.inner.id_type.load(Ordering::Acquire));
        if !open {
            return Ok(t);
        }
        let fixed = if given.key_bits() == 64 && self.is_empty() {
            given
        } else {
            t
        };
        let mut m = mg.clone();
        m.generation += 1;
        m.config.id_type = Some(fixed.name().into());
        m.write(&self.inner.dir)?;
        *mg = m;
        self.inner
            .id_type
            .store(pack(fixed, false), Ordering::Release);
        Ok(fixed)
    }

    /// The key of `id`, or [`StoreError::InvalidId`] when it is not of
    /// this collection's id type.
    pub fn key_of(&self, id: &Id) -> Result<u64> {
        self.id_type()
            .key(id)
            .map_err(|source| StoreError::InvalidId { row: 0, source })
    }

    /// The keys of `ids` (see [`Collection::key_of`]).
    pub fn keys_of(&self, ids: &[Id]) -> Result<Vec<u64>> {
        let t = self.id_type();
        ids.iter()
            .enumerate()
            .map(|(row, id)| {
                t.key(id)
                    .map_err(|source| StoreError::InvalidId { row, source })
            })
            .collect()
    }

    /// The ids of `keys`: the key itself for integer ids; for hashed ids
    /// (string, 128-bit) the id kept with the row (`None` for a key that is
    /// not live).
    pub fn ids_of(&self, keys: &[u64]) -> Result<Vec<Option<Id>>> {
        let t = self.id_type();
        if !t.hashed() {
            return Ok(keys.iter().map(|&k| t.int_id(k)).collect());
        }
        let Ok((col, _)) = self.inner.schema.read().field(STRING_ID_FIELD) else {
            return Ok(vec![None; keys.len()]);
        };
        Ok(self
            .payload_values(keys, STRING_ID_FIELD, col)?
            .into_iter()
            .zip(keys)
            .map(|(v, &k)| v.and_then(|v| t.id_of(k, Some(&v))))
            .collect())
    }

    /// The key of `id` where it is live ([`Collection::live_keys`] of one
    /// id, without its allocations: an absent id costs a bloom probe).
    pub fn live_key(&self, id: &Id) -> Result<Option<u64>> {
        let key = self.key_of(id)?;
        let t = self.id_type();
        if !t.hashed() {
            return Ok(self.contains(key).then_some(key));
        }
        if !self.inner.bloom.read().may_contain(key) {
            return Ok(None);
        }
        let Ok(want) = t.canonical(id) else {
            return Ok(None);
        };
        let stored = self.ids_of(&[key])?;
        Ok((stored.into_iter().next().flatten() == Some(want)).then_some(key))
    }

    /// The key of each of `ids` where that id is live (`None` where it is
    /// not): for hashed ids the id kept with the row is checked, so an id
    /// never answers for another id with its key.
    pub fn live_keys(&self, ids: &[Id]) -> Result<Vec<Option<u64>>> {
        let t = self.id_type();
        let keys = self.keys_of(ids)?;
        if !t.hashed() {
            let live = self.contains_many(&keys);
            return Ok(keys
                .into_iter()
                .zip(live)
                .map(|(k, l)| l.then_some(k))
                .collect());
        }
        // The bloom filter answers most absent ids before any part is
        // searched or a row decoded; only the keys it may hold are looked up.
        let maybe: Vec<usize> = {
            let bloom = self.inner.bloom.read();
            (0..keys.len())
                .filter(|&i| bloom.may_contain(keys[i]))
                .collect()
        };
        let mut out = vec![None; ids.len()];
        if maybe.is_empty() {
            return Ok(out);
        }
        let probe: Vec<u64> = maybe.iter().map(|&i| keys[i]).collect();
        let stored = self.ids_of(&probe)?;
        for (&i, old) in maybe.iter().zip(stored) {
            let Ok(want) = t.canonical(&ids[i]) else {
                continue;
            };
            if old == Some(want) {
                out[i] = Some(keys[i]);
            }
        }
        Ok(out)
    }

    /// Inserts or replaces rows by the ids users give (see
    /// [`Collection::write_ids`] with [`IdWrite::Upsert`]).
    pub fn upsert_ids(
        &self,
        ids: &IdColumn,
        vectors: &[VectorRef<'_>],
        payload: Option<&Payload>,
    ) -> Result<Vec<u64>> {
        self.write_ids(ids, vectors, payload, IdWrite::Upsert)
    }

    /// Writes rows by the ids users give: checked against the collection's
    /// id type, an id repeated within the write refused, and for hashed ids
    /// (string, 128-bit) the id kept (column `_id`) and a second id with
    /// the key of a stored one refused ([`StoreError::IdCollision`]).
    /// `mode` says what happens to ids already present. Nothing is written
    /// on an error. Returns the keys written.
    pub fn write_ids(
        &self,
        ids: &IdColumn,
        vectors: &[VectorRef<'_>],
        payload: Option<&Payload>,
        mode: IdWrite,
    ) -> Result<Vec<u64>> {
        if ids.len() != vectors.len() {
            return Err(StoreError::Config(format!(
                "{} ids for {} vectors",
                ids.len(),
                vectors.len()
            )));
        }
        if let Some(p) = payload {
            // Caught here, not only by the schema: `_id` is reserved.
            reserved(p)?;
        }
        let t = if ids.is_empty() {
            self.id_type()
        } else {
            self.settle_id_type(ids.id_type())?
        };
        let canon: Vec<Id> = (0..ids.len())
            .map(|row| {
                t.canonical(&ids.get(row))
                    .map_err(|source| StoreError::InvalidId { row, source })
            })
            .collect::<Result<_>>()?;
        let keys: Vec<u64> = canon
            .iter()
            .map(|id| t.key(id).expect("canonical ids have keys"))
            .collect();
        let mut first: HashMap<u64, usize> = HashMap::with_capacity(keys.len());
        for (i, &k) in keys.iter().enumerate() {
            if let Some(&j) = first.get(&k) {
                return Err(if canon[j] != canon[i] {
                    StoreError::IdCollision {
                        new: canon[i].text(),
                        old: canon[j].text(),
                        key: k,
                    }
                } else {
                    StoreError::DuplicateId {
                        row: i,
                        id: canon[i].to_string(),
                    }
                });
            }
            first.insert(k, i);
        }
        // Which ids are present, and (hashed) that stored ids under these
        // keys are these ids.
        // (Not needed for an upsert of integer ids: nothing to check.)
        let live = if t.hashed() || mode != IdWrite::Upsert {
            self.contains_many(&keys)
        } else {
            vec![false; keys.len()]
        };
        let present: Vec<usize> = (0..keys.len()).filter(|&i| live[i]).collect();
        if t.hashed() && !present.is_empty() {
            let pk: Vec<u64> = present.iter().map(|&i| keys[i]).collect();
            for (&i, old) in present.iter().zip(self.ids_of(&pk)?) {
                if let Some(old) = old.filter(|old| *old != canon[i]) {
                    return Err(StoreError::IdCollision {
                        new: canon[i].text(),
                        old: old.text(),
                        key: keys[i],
                    });
                }
            }
        }
        let keep: Vec<usize> = match mode {
            IdWrite::Upsert => (0..keys.len()).collect(),
            IdWrite::Add => {
                if let Some(&i) = present.first() {
                    return Err(StoreError::DuplicateId {
                        row: i,
                        id: canon[i].to_string(),
                    });
                }
                (0..keys.len()).collect()
            }
            IdWrite::AddOnce => (0..keys.len()).filter(|&i| !live[i]).collect(),
        };
        if keep.is_empty() {
            return Ok(Vec::new());
        }
        let all = keep.len() == keys.len();
        let keys: Vec<u64> = keep.iter().map(|&i| keys[i]).collect();
        let vectors: Vec<VectorRef<'_>> = if all {
            vectors.to_vec()
        } else {
            keep.iter().map(|&i| vectors[i]).collect()
        };
        let mut p = match payload {
            Some(p) if all => p.clone(),
            Some(p) => p.select(&keep),
            None => Payload {
                rows: keys.len(),
                ..Payload::default()
            },
        };
        if let Some(ty) = t.stored_type() {
            p.fields.push(Field {
                name: STRING_ID_FIELD.into(),
                ty,
            });
            p.columns.push(
                keep.iter()
                    .map(|&i| t.stored_value(&canon[i]).unwrap_or(Value::Null))
                    .collect(),
            );
        }
        let p = (!p.fields.is_empty()).then_some(p);
        self.upsert_with_payload(&keys, &vectors, p.as_ref())?;
        Ok(keys)
    }
}

/// What [`Collection::write_ids`] does with ids already present.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdWrite {
    /// Replace them.
    Upsert,
    /// Refuse the whole write ([`StoreError::DuplicateId`]).
    Add,
    /// Skip them (and write the rest).
    AddOnce,
}

fn reserved(p: &Payload) -> Result<()> {
    if p.fields.iter().any(|f| f.name == STRING_ID_FIELD) {
        return Err(StoreError::Payload(PayloadError::Value {
            field: STRING_ID_FIELD.into(),
            reason: "this payload column name is reserved (it holds string ids)".into(),
        }));
    }
    Ok(())
}
