//! Ids as users give them: unsigned or signed 64-bit integers, or strings.
//!
//! The store indexes 64-bit keys. A collection records the type of its ids
//! ([`IdType`], fixed at creation, kept in the manifest) and this module
//! maps ids to keys and back, in one place for every front end:
//! - `uint64`: the id is the key;
//! - `int64`: the key is the id's two's-complement bits (negative ids
//!   allowed, read back as they were given);
//! - `string`: the key is [`string_key`] of the UTF-8 bytes, and the string
//!   itself is kept in the reserved payload column [`STRING_ID_FIELD`], so
//!   that results carry it and two strings with one key are caught
//!   ([`crate::StoreError::IdCollision`]) instead of replacing each other.
//!
//! Integer ids given as decimal strings (Longbow's clients send every id
//! as a string in `delete`) are read as integers in integer collections;
//! integers given to a string collection are their decimal strings.

use std::fmt;

/// The reserved payload column that holds the ids of a `string`
/// collection.
pub const STRING_ID_FIELD: &str = "_id";

/// The type of a collection's ids.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum IdType {
    /// Unsigned 64-bit integers (the default).
    #[default]
    UInt64,
    /// Signed 64-bit integers.
    Int64,
    /// UTF-8 strings.
    String,
}

impl IdType {
    /// The name in configs, manifests and errors.
    pub fn name(self) -> &'static str {
        match self {
            IdType::UInt64 => "uint64",
            IdType::Int64 => "int64",
            IdType::String => "string",
        }
    }

    /// Parses [`IdType::name`] (also `u64`, `i64`, `str`, `utf8`).
    pub fn parse(s: &str) -> Option<IdType> {
        Some(match s {
            "uint64" | "u64" => IdType::UInt64,
            "int64" | "i64" => IdType::Int64,
            "string" | "str" | "utf8" => IdType::String,
            _ => return None,
        })
    }

    /// The key of `id` in a collection with ids of this type, or why the
    /// id cannot be one of its ids.
    pub fn key(self, id: &Id) -> Result<u64, IdError> {
        let wrong = || IdError {
            id: id.to_string(),
            want: self,
        };
        match (self, id) {
            (IdType::UInt64, Id::UInt(u)) => Ok(*u),
            (IdType::UInt64, Id::Int(i)) => u64::try_from(*i).map_err(|_| wrong()),
            (IdType::UInt64, Id::Str(s)) => s.trim().parse::<u64>().map_err(|_| wrong()),
            (IdType::Int64, Id::Int(i)) => Ok(*i as u64),
            (IdType::Int64, Id::UInt(u)) => {
                i64::try_from(*u).map(|i| i as u64).map_err(|_| wrong())
            }
            (IdType::Int64, Id::Str(s)) => s
                .trim()
                .parse::<i64>()
                .map(|i| i as u64)
                .map_err(|_| wrong()),
            (IdType::String, Id::Str(s)) => Ok(string_key(s)),
            (IdType::String, Id::UInt(u)) => Ok(string_key(&u.to_string())),
            (IdType::String, Id::Int(i)) => Ok(string_key(&i.to_string())),
        }
    }

    /// The id of an integer key (`None` for `string` collections, whose
    /// ids are read from [`STRING_ID_FIELD`]).
    pub fn int_id(self, key: u64) -> Option<Id> {
        match self {
            IdType::UInt64 => Some(Id::UInt(key)),
            IdType::Int64 => Some(Id::Int(key as i64)),
            IdType::String => None,
        }
    }
}

impl fmt::Display for IdType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One id, as a user gave it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Id {
    /// An unsigned integer.
    UInt(u64),
    /// A signed integer.
    Int(i64),
    /// A string.
    Str(String),
}

impl fmt::Display for Id {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Id::UInt(u) => write!(f, "{u}"),
            Id::Int(i) => write!(f, "{i}"),
            Id::Str(s) => write!(f, "{s:?}"),
        }
    }
}

/// An id that is not of a collection's id type.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("id {id} is not a valid {want} id")]
pub struct IdError {
    /// The id, as given.
    pub id: String,
    /// The collection's id type.
    pub want: IdType,
}

/// The ids of one write, in one of the three types.
#[derive(Debug, Clone, PartialEq)]
pub enum IdColumn {
    /// Unsigned integers.
    UInt(Vec<u64>),
    /// Signed integers.
    Int(Vec<i64>),
    /// Strings.
    Str(Vec<String>),
}

impl IdColumn {
    /// Rows.
    pub fn len(&self) -> usize {
        match self {
            IdColumn::UInt(v) => v.len(),
            IdColumn::Int(v) => v.len(),
            IdColumn::Str(v) => v.len(),
        }
    }

    /// Whether there are no rows.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The id type a new collection gets from these ids.
    pub fn id_type(&self) -> IdType {
        match self {
            IdColumn::UInt(_) => IdType::UInt64,
            IdColumn::Int(_) => IdType::Int64,
            IdColumn::Str(_) => IdType::String,
        }
    }

    /// Row `i` as an [`Id`].
    pub fn get(&self, i: usize) -> Id {
        match self {
            IdColumn::UInt(v) => Id::UInt(v[i]),
            IdColumn::Int(v) => Id::Int(v[i]),
            IdColumn::Str(v) => Id::Str(v[i].clone()),
        }
    }

    /// The keys of these ids in a collection with ids of type `t`.
    pub fn keys(&self, t: IdType) -> Result<Vec<u64>, (usize, IdError)> {
        match (t, self) {
            (IdType::UInt64, IdColumn::UInt(v)) => Ok(v.clone()),
            (IdType::Int64, IdColumn::Int(v)) => Ok(v.iter().map(|&i| i as u64).collect()),
            (IdType::String, IdColumn::Str(v)) => Ok(v.iter().map(|s| string_key(s)).collect()),
            _ => (0..self.len())
                .map(|i| t.key(&self.get(i)).map_err(|e| (i, e)))
                .collect(),
        }
    }
}

/// The 64-bit key of a string id: FNV-1a over the UTF-8 bytes, then the
/// splitmix64 finaliser. Stable across versions (it is persisted).
pub fn string_key(s: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in s.as_bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h ^= h >> 30;
    h = h.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h ^= h >> 27;
    h = h.wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn string_keys_are_stable() {
        // Persisted: these values must never change.
        assert_eq!(string_key(""), 0xf52a_15e9_a9b5_e89b);
        assert_eq!(string_key("ISCC:KACYPXW445FTYNJ3"), 0xd53e_d829_0099_f6a8);
        assert_ne!(string_key("a"), string_key("b"));
    }

    #[test]
    fn ids_map_to_keys_by_type() {
        assert_eq!(IdType::UInt64.key(&Id::UInt(7)), Ok(7));
        assert_eq!(IdType::UInt64.key(&Id::Str(" 42 ".into())), Ok(42));
        assert!(IdType::UInt64.key(&Id::Int(-1)).is_err());
        assert!(IdType::UInt64.key(&Id::Str("x".into())).is_err());
        assert_eq!(IdType::Int64.key(&Id::Int(-2)), Ok(u64::MAX - 1));
        assert_eq!(IdType::Int64.int_id(u64::MAX - 1), Some(Id::Int(-2)));
        assert_eq!(IdType::Int64.key(&Id::Str("-2".into())), Ok(u64::MAX - 1));
        assert!(IdType::Int64.key(&Id::UInt(u64::MAX)).is_err());
        assert_eq!(IdType::String.key(&Id::UInt(5)), Ok(string_key("5")));
        assert_eq!(
            IdColumn::Int(vec![3, -3]).keys(IdType::Int64).unwrap(),
            [3, (-3i64) as u64]
        );
        let e = IdColumn::Int(vec![3, -3]).keys(IdType::UInt64).unwrap_err();
        assert_eq!(e.0, 1);
        assert_eq!(e.1.to_string(), "id -3 is not a valid uint64 id");
        for t in [IdType::UInt64, IdType::Int64, IdType::String] {
            assert_eq!(IdType::parse(t.name()), Some(t));
        }
    }
}
