//! Payload indexes of a sealed segment, built once at seal time, read in
//! place from the memory map.
//!
//! ## Section layout (kind 15, little-endian)
//!
//! `fields u32 | 0 u32`, then per field of the payload schema (same order
//! as the Arrow section) `kind u32 | 0 u32 | offset u64 | len u64`, offsets
//! from the section start, each field's blob starting at a multiple of 8:
//!
//! * every blob starts with `nulls_len u64 | nulls` (a portable roaring
//!   bitmap of the slots where the field is null), padded to 8;
//! * kind 1 (int64, timestamp) and 2 (float64), *sorted*: `count u64`,
//!   `count` values (i64 / f64) ascending, then `count` u32 slots (the
//!   slot of each value);
//! * kind 3 (string, bool, tags), *inverted*: `values u64`,
//!   `values + 1` u64 offsets into the key bytes, the key bytes (UTF-8;
//!   bool keys are one byte 0 / 1), padded to 8, `values + 1` u64 offsets
//!   into the bitmap bytes, then one portable roaring bitmap of slots per
//!   key. Keys are sorted bytewise.
//!
//! Equality, `in` and `contains` read one bitmap per value; ranges
//! binary-search the sorted values and collect the slots of the range, so
//! a selective filter touches only what it selects.

use crate::payload::{FieldType, Schema, Value};
use arrow_array::cast::AsArray;
use arrow_array::types::{Float64Type, Int64Type, TimestampMicrosecondType};
use arrow_array::{Array, RecordBatch};
use arrow_buffer::Buffer;
use roaring::RoaringBitmap;
use std::collections::BTreeMap;
use std::ops::Bound as RangeBound;

const KIND_SORTED_I64: u32 = 1;
const KIND_SORTED_F64: u32 = 2;
const KIND_INVERTED: u32 = 3;

fn pad8(b: &mut Vec<u8>) {
    while !b.len().is_multiple_of(8) {
        b.push(0);
    }
}

fn put_bitmap(out: &mut Vec<u8>, bm: &RoaringBitmap) {
    // Serialising into a Vec cannot fail.
    let _ = bm.serialize_into(&mut *out);
}

/// Writes sorted (value, slot) pairs: `count u64`, the values, the slots.
fn put_sorted<T: Copy>(out: &mut Vec<u8>, pairs: &[(T, u32)], bytes: fn(T) -> [u8; 8]) {
    out.extend_from_slice(&(pairs.len() as u64).to_le_bytes());
    pairs
        .iter()
        .for_each(|p| out.extend_from_slice(&bytes(p.0)));
    pairs
        .iter()
        .for_each(|p| out.extend_from_slice(&p.1.to_le_bytes()));
}

/// Writes an inverted field's body: `values u64`, the key offsets, the
/// keys, padding, the bitmap offsets, the bitmaps; `keys` in order, one
/// bitmap per key.
fn put_inverted<'k, B: std::borrow::Borrow<RoaringBitmap>>(
    out: &mut Vec<u8>,
    keys: impl Iterator<Item = &'k [u8]> + Clone,
    bitmaps: impl Iterator<Item = B>,
) {
    let n = keys.clone().count();
    out.extend_from_slice(&(n as u64).to_le_bytes());
    let mut off = 0u64;
    out.extend_from_slice(&off.to_le_bytes());
    for k in keys.clone() {
        off += k.len() as u64;
        out.extend_from_slice(&off.to_le_bytes());
    }
    for k in keys {
        out.extend_from_slice(k);
    }
    pad8(out);
    let mut blobs = Vec::new();
    let mut offs = Vec::with_capacity(n + 1);
    offs.push(0u64);
    for bm in bitmaps {
        put_bitmap(&mut blobs, bm.borrow());
        offs.push(blobs.len() as u64);
    }
    offs.iter()
        .for_each(|o| out.extend_from_slice(&o.to_le_bytes()));
    out.extend_from_slice(&blobs);
}

/// A string column's inverted body, from its rows sorted by value: the
/// keys are read from the column where they lie (a free-text column has
/// about as many distinct values as rows, and a map of copied keys to
/// bitmaps cost 50 MiB for 100,000 package descriptions).
fn put_inverted_strings(out: &mut Vec<u8>, arr: &arrow_array::StringArray) {
    let mut rows: Vec<u32> = (0..arr.len() as u32)
        .filter(|&i| !arr.is_null(i as usize))
        .collect();
    // Stable: the slots of one value stay ascending.
    rows.sort_by(|&a, &b| {
        arr.value(a as usize)
            .as_bytes()
            .cmp(arr.value(b as usize).as_bytes())
    });
    // Runs of one value: (first index into `rows`, end).
    let mut runs: Vec<(u32, u32)> = Vec::new();
    for (i, &r) in rows.iter().enumerate() {
        match runs.last_mut() {
            Some(run) if arr.value(rows[run.0 as usize] as usize) == arr.value(r as usize) => {
                run.1 = i as u32 + 1;
            }
            _ => runs.push((i as u32, i as u32 + 1)),
        }
    }
    let keys = runs
        .iter()
        .map(|&(s, _)| arr.value(rows[s as usize] as usize).as_bytes());
    let bitmaps = runs.iter().map(|&(s, e)| {
        rows[s as usize..e as usize]
            .iter()
            .copied()
            .collect::<RoaringBitmap>()
    });
    put_inverted(out, keys, bitmaps);
}

/// Builds the payload index section for `batch` (rows = slots).
pub fn build(schema: &Schema, batch: &RecordBatch) -> Vec<u8> {
    let nf = schema.len();
    let mut out = Vec::new();
    out.extend_from_slice(&(nf as u32).to_le_bytes());
    out.extend_from_slice(&0u32.to_le_bytes());
    let dir_at = out.len();
    out.resize(dir_at + nf * 24, 0);
    for (c, f) in schema.fields().iter().enumerate() {
        pad8(&mut out);
        let start = out.len();
        let arr = batch.column(c);
        let mut nulls = RoaringBitmap::new();
        for i in 0..arr.len() {
            if arr.is_null(i) {
                nulls.insert(i as u32);
            }
        }
        let mut nb = Vec::new();
        put_bitmap(&mut nb, &nulls);
        out.extend_from_slice(&(nb.len() as u64).to_le_bytes());
        out.extend_from_slice(&nb);
        pad8(&mut out);
        let kind = match f.ty {
            FieldType::Int64 | FieldType::Timestamp => {
                let vals: Vec<Option<i64>> = if f.ty == FieldType::Int64 {
                    arr.as_primitive::<Int64Type>().iter().collect()
                } else {
                    arr.as_primitive::<TimestampMicrosecondType>()
                        .iter()
                        .collect()
                };
                let mut pairs: Vec<(i64, u32)> = vals
                    .iter()
                    .enumerate()
                    .filter_map(|(i, v)| v.map(|v| (v, i as u32)))
                    .collect();
                pairs.sort_unstable();
                put_sorted(&mut out, &pairs, i64::to_le_bytes);
                KIND_SORTED_I64
            }
            FieldType::Float64 => {
                let mut pairs: Vec<(f64, u32)> = arr
                    .as_primitive::<Float64Type>()
                    .iter()
                    .enumerate()
                    .filter_map(|(i, v)| v.map(|v| (v, i as u32)))
                    .collect();
                pairs.sort_unstable_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
                put_sorted(&mut out, &pairs, f64::to_le_bytes);
                KIND_SORTED_F64
            }
            FieldType::String => {
                put_inverted_strings(&mut out, arr.as_string::<i32>());
                KIND_INVERTED
            }
            FieldType::Bool | FieldType::Tags => {
                let mut map: BTreeMap<Vec<u8>, RoaringBitmap> = BTreeMap::new();
                for i in 0..arr.len() {
                    if arr.is_null(i) {
                        continue;
                    }
                    match f.ty {
                        FieldType::Bool => {
                            let b = arr.as_boolean().value(i);
                            map.entry(vec![u8::from(b)]).or_default().insert(i as u32);
                        }
                        _ => {
                            let items = arr.as_list::<i32>().value(i);
                            if let Some(s) = items.as_string_opt::<i32>() {
                                for t in s.iter().flatten() {
                                    map.entry(t.as_bytes().to_vec())
                                        .or_default()
                                        .insert(i as u32);
                                }
                            }
                        }
                    }
                }
                put_inverted(&mut out, map.keys().map(Vec::as_slice), map.values());
                KIND_INVERTED
            }
        };
        let len = out.len() - start;
        let d = dir_at + c * 24;
        out[d..d + 4].copy_from_slice(&kind.to_le_bytes());
        out[d + 8..d + 16].copy_from_slice(&(start as u64).to_le_bytes());
        out[d + 16..d + 24].copy_from_slice(&(len as u64).to_le_bytes());
    }
    out
}

/// The payload index section of an open segment (bytes borrowed from the
/// map through `buf`).
#[derive(Debug)]
pub struct PayloadIndex {
    buf: Buffer,
    fields: Vec<(u32, usize, usize)>,
}

/// A failure to read the section: the caller reports it as corruption.
pub type Corrupt = String;

fn u64_at(b: &[u8], at: usize) -> Result<u64, Corrupt> {
    b.get(at..at + 8)
        .map(|s| {
            let mut x = [0u8; 8];
            x.copy_from_slice(s);
            u64::from_le_bytes(x)
        })
        .ok_or_else(|| format!("payload index: read past the end at {at}"))
}

fn u32_at(b: &[u8], at: usize) -> Result<u32, Corrupt> {
    b.get(at..at + 4)
        .map(|s| u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
        .ok_or_else(|| format!("payload index: read past the end at {at}"))
}

fn bitmap(b: &[u8]) -> Result<RoaringBitmap, Corrupt> {
    RoaringBitmap::deserialize_from(b).map_err(|e| format!("payload index: bad bitmap: {e}"))
}

/// A bound on a numeric value, as i64 or f64 depending on the column.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Num {
    /// Integer or timestamp.
    I(i64),
    /// Float.
    F(f64),
}

/// Orders two numeric bounds / values (an integer against a float
/// compares as f64).
pub fn cmp_num(a: Num, b: Num) -> std::cmp::Ordering {
    match (a, b) {
        (Num::I(x), Num::I(y)) => x.cmp(&y),
        (Num::F(x), Num::F(y)) => x.total_cmp(&y),
        (Num::I(x), Num::F(y)) => (x as f64).total_cmp(&y),
        (Num::F(x), Num::I(y)) => x.total_cmp(&(y as f64)),
    }
}

impl PayloadIndex {
    /// Reads the directory (O(fields)); `fields` is the segment's field
    /// count.
    pub fn open(buf: Buffer, fields: usize) -> Result<PayloadIndex, Corrupt> {
        let b = buf.as_slice();
        let n = u32_at(b, 0)? as usize;
        if n != fields {
            return Err(format!(
                "payload index has {n} fields, the payload section {fields}"
            ));
        }
        let mut dir = Vec::with_capacity(n);
        for c in 0..n {
            let d = 8 + c * 24;
            let kind = u32_at(b, d)?;
            let off = u64_at(b, d + 8)? as usize;
            let len = u64_at(b, d + 16)? as usize;
            if off.checked_add(len).is_none_or(|e| e > b.len()) || !off.is_multiple_of(8) {
                return Err(format!("payload index field {c} lies outside the section"));
            }
            dir.push((kind, off, len));
        }
        Ok(PayloadIndex { buf, fields: dir })
    }

    fn blob(&self, c: usize) -> Result<(u32, &[u8], usize), Corrupt> {
        let &(kind, off, len) = self
            .fields
            .get(c)
            .ok_or_else(|| format!("payload index: no field {c}"))?;
        let b = &self.buf.as_slice()[off..off + len];
        let nl = u64_at(b, 0)? as usize;
        if nl > b.len() {
            return Err("payload index: null bitmap past the end".into());
        }
        let body = (8 + nl).next_multiple_of(8);
        if body > b.len() {
            return Err("payload index: null bitmap past the end".into());
        }
        Ok((kind, b, body))
    }

    /// Slots where field `c` is null.
    pub fn nulls(&self, c: usize) -> Result<RoaringBitmap, Corrupt> {
        let (_, b, _) = self.blob(c)?;
        let nl = u64_at(b, 0)? as usize;
        bitmap(b.get(8..8usize.saturating_add(nl)).unwrap_or(&[]))
    }

    /// Slots whose value of field `c` equals the key (inverted fields).
    pub fn lookup(&self, c: usize, key: &[u8]) -> Result<RoaringBitmap, Corrupt> {
        let (kind, b, at) = self.blob(c)?;
        if kind != KIND_INVERTED {
            return Err("payload index: not an inverted field".into());
        }
        let n = u64_at(b, at)? as usize;
        if n > b.len() / 8 {
            return Err("payload index: value count past the end".into());
        }
        let koffs = at + 8;
        let kbytes = koffs + (n + 1) * 8;
        let kend = u64_at(b, koffs + n * 8)? as usize;
        if kend > b.len() {
            return Err("payload index: keys past the end".into());
        }
        let boffs = (kbytes + kend).next_multiple_of(8);
        let bbytes = boffs + (n + 1) * 8;
        let key_of = |i: usize| -> Result<&[u8], Corrupt> {
            let s = u64_at(b, koffs + i * 8)? as usize;
            let e = u64_at(b, koffs + i * 8 + 8)? as usize;
            b.get(kbytes.saturating_add(s)..kbytes.saturating_add(e.max(s)))
                .ok_or_else(|| "payload index: key past the end".to_string())
        };
        let (mut lo, mut hi) = (0usize, n);
        while lo < hi {
            let mid = (lo + hi) / 2;
            if key_of(mid)? < key {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        if lo < n && key_of(lo)? == key {
            let s = u64_at(b, boffs + lo * 8)? as usize;
            let e = u64_at(b, boffs + lo * 8 + 8)? as usize;
            let bm = b
                .get(bbytes.saturating_add(s)..bbytes.saturating_add(e.max(s)))
                .ok_or_else(|| "payload index: bitmap past the end".to_string())?;
            bitmap(bm)
        } else {
            Ok(RoaringBitmap::new())
        }
    }

    /// Slots whose value of field `c` lies in the range (sorted fields).
    pub fn range(
        &self,
        c: usize,
        lo: RangeBound<Num>,
        hi: RangeBound<Num>,
    ) -> Result<RoaringBitmap, Corrupt> {
        let (kind, b, at) = self.blob(c)?;
        if kind != KIND_SORTED_I64 && kind != KIND_SORTED_F64 {
            return Err("payload index: not a sorted field".into());
        }
        let n = u64_at(b, at)? as usize;
        if n > b.len() / 12 {
            return Err("payload index: value count past the end".into());
        }
        let vals = at + 8;
        let slots = vals + n * 8;
        if slots + n * 4 > b.len() {
            return Err("payload index: sorted values past the end".into());
        }
        let val = |i: usize| -> Num {
            let mut x = [0u8; 8];
            x.copy_from_slice(&b[vals + i * 8..vals + i * 8 + 8]);
            if kind == KIND_SORTED_I64 {
                Num::I(i64::from_le_bytes(x))
            } else {
                Num::F(f64::from_le_bytes(x))
            }
        };
        let less = cmp_num;
        // First index whose value passes the lower bound.
        let first = |pred: &dyn Fn(Num) -> bool| {
            let (mut lo, mut hi) = (0usize, n);
            while lo < hi {
                let mid = (lo + hi) / 2;
                if pred(val(mid)) {
                    hi = mid;
                } else {
                    lo = mid + 1;
                }
            }
            lo
        };
        let start = match lo {
            RangeBound::Unbounded => 0,
            RangeBound::Included(x) => first(&|v| less(v, x).is_ge()),
            RangeBound::Excluded(x) => first(&|v| less(v, x).is_gt()),
        };
        let end = match hi {
            RangeBound::Unbounded => n,
            RangeBound::Included(x) => first(&|v| less(v, x).is_gt()),
            RangeBound::Excluded(x) => first(&|v| less(v, x).is_ge()),
        };
        let mut ids: Vec<u32> = (start..end.max(start))
            .map(|i| {
                let o = slots + i * 4;
                u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]])
            })
            .collect();
        ids.sort_unstable();
        ids.dedup();
        Ok(RoaringBitmap::from_sorted_iter(ids).unwrap_or_default())
    }
}

/// The lookup key of an equality value in an inverted field.
pub fn key_of(v: &Value) -> Option<Vec<u8>> {
    match v {
        Value::Str(s) => Some(s.as_bytes().to_vec()),
        Value::Bool(b) => Some(vec![u8::from(*b)]),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::payload::{to_record_batch, Field};

    /// The inverted body as a map of copied keys to bitmaps writes it
    /// (how string columns were indexed before they were sorted in place).
    fn by_map(arr: &arrow_array::StringArray) -> Vec<u8> {
        let mut map: BTreeMap<Vec<u8>, RoaringBitmap> = BTreeMap::new();
        for i in 0..arr.len() {
            if !arr.is_null(i) {
                map.entry(arr.value(i).as_bytes().to_vec())
                    .or_default()
                    .insert(i as u32);
            }
        }
        let mut out = vec![];
        out.extend_from_slice(&(map.len() as u64).to_le_bytes());
        let mut off = 0u64;
        out.extend_from_slice(&off.to_le_bytes());
        for k in map.keys() {
            off += k.len() as u64;
            out.extend_from_slice(&off.to_le_bytes());
        }
        map.keys().for_each(|k| out.extend_from_slice(k));
        pad8(&mut out);
        let mut blobs = vec![];
        let mut offs = vec![0u64];
        for bm in map.values() {
            bm.serialize_into(&mut blobs).unwrap();
            offs.push(blobs.len() as u64);
        }
        offs.iter()
            .for_each(|o| out.extend_from_slice(&o.to_le_bytes()));
        out.extend_from_slice(&blobs);
        out
    }

    #[test]
    fn string_columns_index_to_the_same_bytes_and_answer_lookups() {
        let schema = Schema::new(vec![Field {
            name: "s".into(),
            ty: FieldType::String,
        }])
        .unwrap();
        // Repeated values, nulls, an empty string, prefixes of each other
        // and non-ASCII text, out of order.
        let vals: Vec<Option<String>> = (0..5_000u32)
            .map(|i| match i % 11 {
                0 => None,
                1 => Some(String::new()),
                2 => Some(format!("ab{}", i % 7)),
                3 => Some("ab".into()),
                4 => Some(format!("ü{}", i % 3)),
                _ => Some(format!("row {}", (i * 7919) % 1_000)),
            })
            .collect();
        let rows: Vec<Option<Vec<Value>>> = vals
            .iter()
            .map(|v| v.as_ref().map(|s| vec![Value::Str(s.clone())]))
            .collect();
        let batch = to_record_batch(&schema, rows.iter().map(|r| r.as_deref())).unwrap();
        let arr = batch.column(0).as_string::<i32>();
        let mut body = vec![];
        put_inverted_strings(&mut body, arr);
        assert_eq!(body, by_map(arr));

        let section = build(&schema, &batch);
        let idx = PayloadIndex::open(Buffer::from_vec(section), 1).unwrap();
        let mut distinct: Vec<&String> = vals.iter().flatten().collect();
        distinct.sort();
        distinct.dedup();
        for v in distinct {
            let want: RoaringBitmap = (0..vals.len() as u32)
                .filter(|&i| vals[i as usize].as_ref() == Some(v))
                .collect();
            assert_eq!(idx.lookup(0, v.as_bytes()).unwrap(), want, "{v:?}");
        }
        assert!(idx.lookup(0, b"absent").unwrap().is_empty());
        let nulls: RoaringBitmap = (0..vals.len() as u32)
            .filter(|&i| vals[i as usize].is_none())
            .collect();
        assert_eq!(idx.nulls(0).unwrap(), nulls);
    }
}
