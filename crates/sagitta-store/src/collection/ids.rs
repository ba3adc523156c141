//! A collection's ids: writes and lookups by the ids users give, and the
//! ids of stored keys (see [`crate::ids`] for the mapping).

use super::Collection;
use crate::error::{Result, StoreError};
use crate::ids::{Id, IdColumn, IdType, STRING_ID_FIELD};
use crate::payload::{Field, FieldType, Payload, PayloadError, Value};
use sagitta_index::VectorRef;
use std::collections::HashMap;

impl Collection {
    /// The type of this collection's ids.
    pub fn id_type(&self) -> IdType {
        self.inner.config.id_type
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

    /// The ids of `keys`: the key itself for integer ids; for string ids
    /// the stored string (`None` for a key that is not live).
    pub fn ids_of(&self, keys: &[u64]) -> Result<Vec<Option<Id>>> {
        let t = self.id_type();
        if t != IdType::String {
            return Ok(keys.iter().map(|&k| t.int_id(k)).collect());
        }
        let Ok((col, _)) = self.inner.schema.read().field(STRING_ID_FIELD) else {
            return Ok(vec![None; keys.len()]);
        };
        Ok(self
            .payload_rows(keys)?
            .into_iter()
            .map(|r| match r.as_deref().and_then(|r| r.get(col)) {
                Some(Value::Str(s)) => Some(Id::Str(s.clone())),
                _ => None,
            })
            .collect())
    }

    /// Inserts or replaces rows by the ids users give: checked against the
    /// collection's id type, an id repeated within the write refused, and
    /// for string ids the strings kept (column `_id`) and a second string
    /// with the key of a stored one refused ([`StoreError::IdCollision`]).
    /// Nothing is written on an error. Returns the keys written.
    pub fn upsert_ids(
        &self,
        ids: &IdColumn,
        vectors: &[VectorRef<'_>],
        payload: Option<&Payload>,
    ) -> Result<Vec<u64>> {
        let t = self.id_type();
        let keys = ids
            .keys(t)
            .map_err(|(row, source)| StoreError::InvalidId { row, source })?;
        let mut first: HashMap<u64, usize> = HashMap::with_capacity(keys.len());
        for (i, &k) in keys.iter().enumerate() {
            if let Some(&j) = first.get(&k) {
                return Err(match (ids.get(j), ids.get(i)) {
                    (Id::Str(old), Id::Str(new)) if old != new => {
                        StoreError::IdCollision { new, old, key: k }
                    }
                    (_, id) => StoreError::DuplicateId {
                        row: i,
                        id: id.to_string(),
                    },
                });
            }
            first.insert(k, i);
        }
        if t != IdType::String {
            if let Some(p) = payload {
                // Caught here, not only by the schema: `_id` is reserved.
                reserved(p)?;
            }
            self.upsert_with_payload(&keys, vectors, payload)?;
            return Ok(keys);
        }
        let IdColumn::Str(strings) = ids else {
            // Integers given to a string collection: their decimal strings.
            let strings: Vec<String> = (0..ids.len())
                .map(|i| match ids.get(i) {
                    Id::Str(s) => s,
                    id => id.to_string(),
                })
                .collect();
            return self.upsert_ids(&IdColumn::Str(strings), vectors, payload);
        };
        // Stored strings under the same keys must be these strings.
        let present: Vec<usize> = (0..keys.len())
            .filter(|&i| self.contains(keys[i]))
            .collect();
        if !present.is_empty() {
            let pk: Vec<u64> = present.iter().map(|&i| keys[i]).collect();
            let old = self.ids_of(&pk)?;
            for (&i, old) in present.iter().zip(old) {
                if let Some(Id::Str(old)) = old {
                    if old != strings[i] {
                        return Err(StoreError::IdCollision {
                            new: strings[i].clone(),
                            old,
                            key: keys[i],
                        });
                    }
                }
            }
        }
        let mut p = match payload {
            Some(p) => {
                reserved(p)?;
                p.clone()
            }
            None => Payload {
                rows: keys.len(),
                ..Payload::default()
            },
        };
        p.fields.push(Field {
            name: STRING_ID_FIELD.into(),
            ty: FieldType::String,
        });
        p.columns
            .push(strings.iter().map(|s| Value::Str(s.clone())).collect());
        self.upsert_with_payload(&keys, vectors, Some(&p))?;
        Ok(keys)
    }
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
