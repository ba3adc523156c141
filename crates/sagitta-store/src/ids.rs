//! Ids as users give them: unsigned or signed 64-bit integers, 128-bit
//! unsigned integers, or strings.
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
//!   ([`crate::StoreError::IdCollision`]) instead of replacing each other;
//! - `uint128` (collections created with `key_bits = 128`): the key is
//!   [`u128_key`], the low 64 bits XOR a mix of the high 64 bits, and the
//!   high 64 bits are kept in [`STRING_ID_FIELD`] as an int64, so that key
//!   and column give the id back exactly; two ids with one key are caught
//!   as for strings. Lookups by id check the stored column
//!   ([`crate::Collection::live_keys`]), so an id never answers for another.
//!
//! Integer ids given as decimal strings (Longbow's clients send every id
//! as a string in `delete`) are read as integers in integer collections;
//! integers given to a string collection are their decimal strings. A
//! 128-bit id as text is 32 hexadecimal digits (the form results carry;
//! `0x` and UUID dashes allowed) or else a decimal integer.

use crate::payload::{FieldType, Value};
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
    /// Unsigned 128-bit integers (`key_bits = 128`).
    UInt128,
}

impl IdType {
    /// The name in configs, manifests and errors.
    pub fn name(self) -> &'static str {
        match self {
            IdType::UInt64 => "uint64",
            IdType::Int64 => "int64",
            IdType::String => "string",
            IdType::UInt128 => "uint128",
        }
    }

    /// Whether ids of this type are hashed to keys, the id kept in
    /// [`STRING_ID_FIELD`] (`string`, `uint128`).
    pub fn hashed(self) -> bool {
        matches!(self, IdType::String | IdType::UInt128)
    }

    /// The key width of collections with ids of this type.
    pub fn key_bits(self) -> u32 {
        if self == IdType::UInt128 {
            128
        } else {
            64
        }
    }

    /// Parses [`IdType::name`] (also `u64`, `i64`, `str`, `utf8`).
    pub fn parse(s: &str) -> Option<IdType> {
        Some(match s {
            "uint64" | "u64" => IdType::UInt64,
            "int64" | "i64" => IdType::Int64,
            "string" | "str" | "utf8" => IdType::String,
            "uint128" | "u128" => IdType::UInt128,
            _ => return None,
        })
    }

    /// The key of `id` in a collection with ids of this type, or why the
    /// id cannot be one of its ids.
    pub fn key(self, id: &Id) -> Result<u64, IdError> {
        Ok(match self.canonical(id)? {
            Id::UInt(u) => u,
            Id::Int(i) => i as u64,
            Id::Str(s) => string_key(&s),
            Id::U128(v) => u128_key(v),
        })
    }

    /// `id` in the form this type stores (an integer given to a string
    /// collection becomes its decimal string, a decimal string given to an
    /// integer collection its number), or why it cannot be one of its ids.
    pub fn canonical(self, id: &Id) -> Result<Id, IdError> {
        let wrong = || IdError {
            id: id.to_string(),
            want: self,
        };
        let key = match (self, id) {
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
            (IdType::UInt64, Id::U128(v)) => u64::try_from(*v).map_err(|_| wrong()),
            (IdType::Int64, Id::U128(v)) => {
                i64::try_from(*v).map(|i| i as u64).map_err(|_| wrong())
            }
            (IdType::String, Id::Str(s)) => return Ok(Id::Str(s.clone())),
            (IdType::String, id) => return Ok(Id::Str(id.to_string())),
            (IdType::UInt128, Id::U128(v)) => return Ok(Id::U128(*v)),
            (IdType::UInt128, Id::UInt(u)) => return Ok(Id::U128(u128::from(*u))),
            (IdType::UInt128, Id::Int(i)) => {
                return u128::try_from(*i).map(Id::U128).map_err(|_| wrong())
            }
            (IdType::UInt128, Id::Str(s)) => return parse_u128(s).map(Id::U128).ok_or_else(wrong),
        };
        key.map(|k| match self {
            IdType::Int64 => Id::Int(k as i64),
            _ => Id::UInt(k),
        })
    }

    /// What [`STRING_ID_FIELD`] holds for `id` (canonical, of this type)
    /// in a hashed collection: the string, or the high 64 bits of a
    /// 128-bit id as int64 bits. `None` for integer types.
    pub fn stored_value(self, id: &Id) -> Option<Value> {
        match (self, id) {
            (IdType::String, Id::Str(s)) => Some(Value::Str(s.clone())),
            (IdType::UInt128, Id::U128(v)) => Some(Value::Int((v >> 64) as u64 as i64)),
            _ => None,
        }
    }

    /// The payload type of [`STRING_ID_FIELD`] in a hashed collection.
    pub fn stored_type(self) -> Option<FieldType> {
        match self {
            IdType::String => Some(FieldType::String),
            IdType::UInt128 => Some(FieldType::Int64),
            _ => None,
        }
    }

    /// The id of a live `key` whose row holds `stored` in
    /// [`STRING_ID_FIELD`] (ignored for integer types); `None` where a
    /// hashed collection's row has no id (written before id types).
    pub fn id_of(self, key: u64, stored: Option<&Value>) -> Option<Id> {
        match (self, stored) {
            (IdType::String, Some(Value::Str(s))) => Some(Id::Str(s.clone())),
            (IdType::UInt128, Some(&Value::Int(hi))) => {
                let hi = hi as u64;
                Some(Id::U128(
                    (u128::from(hi) << 64) | u128::from(key ^ mix64(hi)),
                ))
            }
            (IdType::String | IdType::UInt128, _) => None,
            _ => self.int_id(key),
        }
    }

    /// The id of an integer key (`None` for `string` collections, whose
    /// ids are read from [`STRING_ID_FIELD`]).
    pub fn int_id(self, key: u64) -> Option<Id> {
        match self {
            IdType::UInt64 => Some(Id::UInt(key)),
            IdType::Int64 => Some(Id::Int(key as i64)),
            IdType::String | IdType::UInt128 => None,
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
    /// An unsigned 128-bit integer.
    U128(u128),
}

impl fmt::Display for Id {
    /// Integers in decimal, strings quoted, 128-bit ids as 32 hexadecimal
    /// digits.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Id::UInt(u) => write!(f, "{u}"),
            Id::Int(i) => write!(f, "{i}"),
            Id::Str(s) => write!(f, "{s:?}"),
            Id::U128(v) => write!(f, "{v:032x}"),
        }
    }
}

impl Id {
    /// The text form of this id: a string as it is, a 128-bit id as 32
    /// hexadecimal digits, an integer in decimal.
    pub fn text(&self) -> String {
        match self {
            Id::Str(s) => s.clone(),
            id => id.to_string(),
        }
    }
}

/// Reads a 128-bit id given as text: 32 hexadecimal digits (optionally
/// `0x`-prefixed or with UUID dashes), `0x` and fewer digits, or a decimal
/// integer.
pub fn parse_u128(s: &str) -> Option<u128> {
    let s = s.trim();
    if let Some(h) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        return (!h.is_empty() && h.len() <= 32)
            .then(|| u128::from_str_radix(h, 16).ok())
            .flatten();
    }
    let hex: String = s.chars().filter(|&c| c != '-').collect();
    if hex.len() == 32 && (hex.len() == s.len() || s.len() == 36) {
        return u128::from_str_radix(&hex, 16).ok();
    }
    if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) {
        return s.parse().ok();
    }
    None
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
    /// Unsigned 128-bit integers.
    U128(Vec<u128>),
}

impl IdColumn {
    /// Rows.
    pub fn len(&self) -> usize {
        match self {
            IdColumn::UInt(v) => v.len(),
            IdColumn::Int(v) => v.len(),
            IdColumn::Str(v) => v.len(),
            IdColumn::U128(v) => v.len(),
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
            IdColumn::U128(_) => IdType::UInt128,
        }
    }

    /// Row `i` as an [`Id`].
    pub fn get(&self, i: usize) -> Id {
        match self {
            IdColumn::UInt(v) => Id::UInt(v[i]),
            IdColumn::Int(v) => Id::Int(v[i]),
            IdColumn::Str(v) => Id::Str(v[i].clone()),
            IdColumn::U128(v) => Id::U128(v[i]),
        }
    }

    /// The keys of these ids in a collection with ids of type `t`.
    pub fn keys(&self, t: IdType) -> Result<Vec<u64>, (usize, IdError)> {
        match (t, self) {
            (IdType::UInt64, IdColumn::UInt(v)) => Ok(v.clone()),
            (IdType::Int64, IdColumn::Int(v)) => Ok(v.iter().map(|&i| i as u64).collect()),
            (IdType::String, IdColumn::Str(v)) => Ok(v.iter().map(|s| string_key(s)).collect()),
            (IdType::UInt128, IdColumn::U128(v)) => Ok(v.iter().map(|&x| u128_key(x)).collect()),
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

/// The splitmix64 finaliser.
fn mix64(x: u64) -> u64 {
    let mut h = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    h = (h ^ (h >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h = (h ^ (h >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

/// The 64-bit key of a 128-bit id: its low 64 bits XOR [`mix64`] of its
/// high 64 bits. With the high bits (kept in [`STRING_ID_FIELD`]) the key
/// gives the id back; ids that share their high bits never share a key.
/// Stable across versions (it is persisted).
pub fn u128_key(v: u128) -> u64 {
    (v as u64) ^ mix64((v >> 64) as u64)
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
    fn u128_keys_are_stable_and_invertible() {
        // Persisted: these values must never change.
        assert_eq!(u128_key(0), 0xe220_a839_7b1d_cdaf);
        assert_eq!(u128_key(1 << 64), 0x910a_2dec_8902_5cc1);
        let t = IdType::UInt128;
        for v in [
            0u128,
            1,
            u128::MAX,
            1 << 64,
            (7 << 64) | 9,
            0xdead_beef << 70,
        ] {
            let key = t.key(&Id::U128(v)).unwrap();
            assert_eq!(key, u128_key(v));
            let stored = t.stored_value(&Id::U128(v)).unwrap();
            assert_eq!(t.id_of(key, Some(&stored)), Some(Id::U128(v)));
        }
        assert_eq!(t.canonical(&Id::UInt(5)), Ok(Id::U128(5)));
        assert!(t.canonical(&Id::Int(-5)).is_err());
        assert_eq!(Id::U128(255).to_string(), format!("{:032x}", 255));
        assert_eq!(
            parse_u128(&Id::U128(u128::MAX).to_string()),
            Some(u128::MAX)
        );
        assert_eq!(parse_u128("0xff"), Some(255));
        assert_eq!(parse_u128("42"), Some(42));
        assert_eq!(parse_u128("00000000-0000-0000-0000-00000000002a"), Some(42));
        assert_eq!(parse_u128("x1"), None);
        assert_eq!(parse_u128(&"1".repeat(40)), None);
        assert!(IdType::UInt64.key(&Id::U128(1 << 64)).is_err());
        assert_eq!(IdType::UInt64.key(&Id::U128(3)), Ok(3));
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
        for t in [
            IdType::UInt64,
            IdType::Int64,
            IdType::String,
            IdType::UInt128,
        ] {
            assert_eq!(IdType::parse(t.name()), Some(t));
        }
    }
}
