//! Filter expressions over payload columns.
//!
//! One JSON form everywhere (Python, HTTP, Flight; see docs/API.md):
//!
//! ```json
//! {"and": [{"field": "lang", "op": "eq", "value": "en"},
//!          {"field": "year", "op": "ge", "value": 2020}]}
//! ```
//!
//! A condition is `{"field", "op", "value"}`; `and` / `or` take a list,
//! `not` one expression; a bare list is the AND of its items (the flat
//! form of Flight tickets). Operators: `eq` `ne` `lt` `le` `gt` `ge` (also
//! spelled `=`/`==` `!=` `<` `<=` `>` `>=`), `in`, `not_in` (`not in`,
//! `nin`), `is_null`, `is_not_null`, `contains` (tags).
//!
//! Semantics: a comparison, `in`, `not_in`, `ne` and `contains` are false
//! where the field is null (SQL-like); `not` is the complement, so
//! `not (year >= 2020)` includes rows without a year. A filter is parsed
//! once ([`Filter::parse`]), then bound to a schema ([`Filter::bind`]),
//! which checks field names, operator applicability and value types and
//! reports the offending field.

use crate::payload::{json_value, FieldType, PayloadError, Row, Schema, Value};
use crate::pindex::{self, cmp_num, Num, PayloadIndex};
use arrow_array::RecordBatch;
use parking_lot::Mutex;
use roaring::RoaringBitmap;
use sagitta_index::Bitset;
use std::ops::Bound as RB;
use std::sync::Arc;

/// Comparison operators of a condition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// Equal.
    Eq,
    /// Present and not equal.
    Ne,
    /// Less than.
    Lt,
    /// Less or equal.
    Le,
    /// Greater than.
    Gt,
    /// Greater or equal.
    Ge,
    /// Equal to one of a list.
    In,
    /// Present and equal to none of a list.
    NotIn,
    /// Null (missing).
    IsNull,
    /// Not null.
    IsNotNull,
    /// A tags field holding the value.
    Contains,
}

impl Op {
    fn parse(s: &str) -> Option<Op> {
        Some(match s.to_ascii_lowercase().as_str() {
            "eq" | "=" | "==" => Op::Eq,
            "ne" | "!=" | "<>" => Op::Ne,
            "lt" | "<" => Op::Lt,
            "le" | "<=" => Op::Le,
            "gt" | ">" => Op::Gt,
            "ge" | ">=" => Op::Ge,
            "in" => Op::In,
            "not_in" | "not in" | "nin" => Op::NotIn,
            "is_null" | "is null" => Op::IsNull,
            "is_not_null" | "is not null" => Op::IsNotNull,
            "contains" => Op::Contains,
            _ => return None,
        })
    }

    fn name(self) -> &'static str {
        match self {
            Op::Eq => "eq",
            Op::Ne => "ne",
            Op::Lt => "lt",
            Op::Le => "le",
            Op::Gt => "gt",
            Op::Ge => "ge",
            Op::In => "in",
            Op::NotIn => "not_in",
            Op::IsNull => "is_null",
            Op::IsNotNull => "is_not_null",
            Op::Contains => "contains",
        }
    }
}

/// A parsed (not yet schema-checked) filter expression.
#[derive(Debug, Clone, PartialEq)]
pub enum Filter {
    /// All of.
    And(Vec<Filter>),
    /// Any of.
    Or(Vec<Filter>),
    /// Complement.
    Not(Box<Filter>),
    /// One condition on one field.
    Cond {
        /// Field name.
        field: String,
        /// Operator.
        op: Op,
        /// The JSON value (absent for null tests).
        value: serde_json::Value,
    },
}

/// Deepest nesting accepted (bounds recursion on hostile input).
const MAX_DEPTH: usize = 64;

impl Filter {
    /// Parses the JSON text of a filter.
    pub fn from_json(text: &str) -> Result<Filter, PayloadError> {
        let v: serde_json::Value = serde_json::from_str(text)
            .map_err(|e| PayloadError::Filter(format!("not JSON: {e}")))?;
        Filter::parse(&v)
    }

    /// Parses a JSON value.
    pub fn parse(v: &serde_json::Value) -> Result<Filter, PayloadError> {
        Self::parse_at(v, 0)
    }

    fn parse_at(v: &serde_json::Value, depth: usize) -> Result<Filter, PayloadError> {
        use serde_json::Value as J;
        let err = |s: String| PayloadError::Filter(s);
        if depth > MAX_DEPTH {
            return Err(err(format!("nested deeper than {MAX_DEPTH} levels")));
        }
        let list = |v: &J, what: &str| -> Result<Vec<Filter>, PayloadError> {
            match v {
                J::Array(a) => a.iter().map(|x| Self::parse_at(x, depth + 1)).collect(),
                _ => Err(err(format!("{what:?} takes a list of expressions"))),
            }
        };
        match v {
            J::Array(_) => Ok(Filter::And(list(v, "and")?)),
            J::Object(o) => {
                if let Some(a) = o.get("and") {
                    if o.len() != 1 {
                        return Err(err("an \"and\" object has no other keys".into()));
                    }
                    return Ok(Filter::And(list(a, "and")?));
                }
                if let Some(a) = o.get("or") {
                    if o.len() != 1 {
                        return Err(err("an \"or\" object has no other keys".into()));
                    }
                    return Ok(Filter::Or(list(a, "or")?));
                }
                if let Some(a) = o.get("not") {
                    if o.len() != 1 {
                        return Err(err("a \"not\" object has no other keys".into()));
                    }
                    return Ok(Filter::Not(Box::new(Self::parse_at(a, depth + 1)?)));
                }
                let field = match o.get("field") {
                    Some(J::String(s)) => s.clone(),
                    Some(_) => return Err(err("\"field\" must be a string".into())),
                    None => {
                        return Err(err(format!(
                            "expected \"and\", \"or\", \"not\" or a condition with \"field\", \"op\", \"value\"; got keys {:?}",
                            o.keys().collect::<Vec<_>>()
                        )))
                    }
                };
                if let Some(k) = o
                    .keys()
                    .find(|k| !matches!(k.as_str(), "field" | "op" | "value"))
                {
                    return Err(PayloadError::Filter(format!(
                        "condition on {field:?}: unknown key {k:?}"
                    )));
                }
                let op_s = match o.get("op") {
                    Some(J::String(s)) => s.clone(),
                    _ => {
                        return Err(PayloadError::Operator {
                            field,
                            op: o.get("op").map(|v| v.to_string()).unwrap_or_default(),
                            reason: "is missing or not a string",
                        })
                    }
                };
                let op = Op::parse(&op_s).ok_or_else(|| PayloadError::Operator {
                    field: field.clone(),
                    op: op_s.clone(),
                    reason: "is unknown (eq ne lt le gt ge in not_in is_null is_not_null contains)",
                })?;
                let value = o.get("value").cloned().unwrap_or(J::Null);
                let needs_value = !matches!(op, Op::IsNull | Op::IsNotNull);
                if needs_value && value.is_null() {
                    return Err(PayloadError::Value {
                        field,
                        reason: format!("operator {:?} needs a non-null \"value\"", op.name()),
                    });
                }
                Ok(Filter::Cond { field, op, value })
            }
            _ => Err(err(format!("expected an object or a list, got {v}"))),
        }
    }

    /// Checks the filter against `schema` and resolves fields and values.
    pub fn bind(&self, schema: &Schema) -> Result<Bound, PayloadError> {
        Ok(match self {
            Filter::And(v) => {
                Bound::And(v.iter().map(|f| f.bind(schema)).collect::<Result<_, _>>()?)
            }
            Filter::Or(v) => Bound::Or(v.iter().map(|f| f.bind(schema)).collect::<Result<_, _>>()?),
            Filter::Not(f) => Bound::Not(Box::new(f.bind(schema)?)),
            Filter::Cond { field, op, value } => {
                let (idx, ty) = schema.field(field)?;
                let refuse = |reason: &'static str| PayloadError::Operator {
                    field: field.clone(),
                    op: op.name().into(),
                    reason,
                };
                let scalar = |v: &serde_json::Value| -> Result<Value, PayloadError> {
                    let ety = if ty == FieldType::Tags {
                        FieldType::String
                    } else {
                        ty
                    };
                    let v = match (ety, v) {
                        // An integer bound on a float column is fine.
                        (FieldType::Float64, serde_json::Value::Number(n)) => {
                            Value::Float(n.as_f64().unwrap_or(f64::NAN))
                        }
                        _ => json_value(field, ety, v)?,
                    };
                    if v.is_null() || matches!(v, Value::Float(x) if x.is_nan()) {
                        return Err(PayloadError::Value {
                            field: field.clone(),
                            reason: "the value must not be null or NaN".into(),
                        });
                    }
                    Ok(v)
                };
                let list = |v: &serde_json::Value| -> Result<Vec<Value>, PayloadError> {
                    match v {
                        serde_json::Value::Array(a) => a.iter().map(scalar).collect(),
                        _ => Err(PayloadError::Value {
                            field: field.clone(),
                            reason: format!("operator {:?} takes a list of values", op.name()),
                        }),
                    }
                };
                let cond = match op {
                    Op::IsNull => Cond::IsNull,
                    Op::IsNotNull => Cond::IsNotNull,
                    Op::Contains if ty == FieldType::Tags => Cond::Eq(scalar(value)?),
                    Op::Contains => return Err(refuse("applies to tags fields only")),
                    Op::Eq | Op::Ne if ty == FieldType::Tags => {
                        return Err(refuse("does not apply to tags (use contains or in)"))
                    }
                    Op::Eq => Cond::Eq(scalar(value)?),
                    Op::Ne => Cond::Ne(scalar(value)?),
                    Op::In => Cond::In(list(value)?),
                    Op::NotIn => Cond::NotIn(list(value)?),
                    Op::Lt | Op::Le | Op::Gt | Op::Ge => {
                        if !matches!(
                            ty,
                            FieldType::Int64 | FieldType::Float64 | FieldType::Timestamp
                        ) {
                            return Err(refuse("applies to int64, float64 and timestamp fields"));
                        }
                        let x = num_of(&scalar(value)?);
                        let (lo, hi) = match op {
                            Op::Lt => (RB::Unbounded, RB::Excluded(x)),
                            Op::Le => (RB::Unbounded, RB::Included(x)),
                            Op::Gt => (RB::Excluded(x), RB::Unbounded),
                            _ => (RB::Included(x), RB::Unbounded),
                        };
                        Cond::Range(lo, hi)
                    }
                };
                Bound::Cond {
                    field: idx,
                    name: field.clone(),
                    ty,
                    cond,
                }
            }
        })
    }
}

fn num_of(v: &Value) -> Num {
    match v {
        Value::Float(x) => Num::F(*x),
        Value::Int(x) | Value::Timestamp(x) => Num::I(*x),
        _ => Num::F(f64::NAN),
    }
}

/// A condition with its value resolved to the field's type.
#[derive(Debug, Clone, PartialEq)]
pub enum Cond {
    /// Equal (for tags: contains).
    Eq(Value),
    /// Present and not equal.
    Ne(Value),
    /// Equal to one of (tags: contains one of).
    In(Vec<Value>),
    /// Present and equal to none of.
    NotIn(Vec<Value>),
    /// Numeric range.
    Range(RB<Num>, RB<Num>),
    /// Null.
    IsNull,
    /// Not null.
    IsNotNull,
}

/// A filter checked against a schema.
#[derive(Debug, Clone, PartialEq)]
pub enum Bound {
    /// All of.
    And(Vec<Bound>),
    /// Any of.
    Or(Vec<Bound>),
    /// Complement.
    Not(Box<Bound>),
    /// A condition on field `field` (schema position).
    Cond {
        /// Position in the collection schema.
        field: usize,
        /// Its name (segments look fields up by name).
        name: String,
        /// Its type.
        ty: FieldType,
        /// The test.
        cond: Cond,
    },
}

fn in_range(x: Num, lo: &RB<Num>, hi: &RB<Num>) -> bool {
    let lo_ok = match lo {
        RB::Unbounded => true,
        RB::Included(b) => cmp_num(x, *b).is_ge(),
        RB::Excluded(b) => cmp_num(x, *b).is_gt(),
    };
    let hi_ok = match hi {
        RB::Unbounded => true,
        RB::Included(b) => cmp_num(x, *b).is_le(),
        RB::Excluded(b) => cmp_num(x, *b).is_lt(),
    };
    lo_ok && hi_ok
}

fn value_eq(v: &Value, want: &Value) -> bool {
    match (v, want) {
        (Value::Tags(t), Value::Str(s)) => t.iter().any(|x| x == s),
        (Value::Float(a), Value::Float(b)) => a == b,
        _ => v == want,
    }
}

impl Bound {
    /// Whether a row (values by schema position) passes.
    pub fn matches(&self, row: &[Value]) -> bool {
        match self {
            Bound::And(v) => v.iter().all(|b| b.matches(row)),
            Bound::Or(v) => v.iter().any(|b| b.matches(row)),
            Bound::Not(b) => !b.matches(row),
            Bound::Cond { field, cond, .. } => {
                let v = row.get(*field).unwrap_or(&Value::Null);
                if v.is_null() {
                    return matches!(cond, Cond::IsNull);
                }
                match cond {
                    Cond::IsNull => false,
                    Cond::IsNotNull => true,
                    Cond::Eq(w) => value_eq(v, w),
                    Cond::Ne(w) => !value_eq(v, w),
                    Cond::In(ws) => ws.iter().any(|w| value_eq(v, w)),
                    Cond::NotIn(ws) => !ws.iter().any(|w| value_eq(v, w)),
                    Cond::Range(lo, hi) => match v {
                        Value::Int(x) | Value::Timestamp(x) => in_range(Num::I(*x), lo, hi),
                        Value::Float(x) => in_range(Num::F(*x), lo, hi),
                        _ => false,
                    },
                }
            }
        }
    }

    /// A stable text form, the cache key of evaluated bitmaps.
    pub fn cache_key(&self) -> String {
        format!("{self:?}")
    }
}

/// Evaluated filters (slot bitmaps) by [`Bound::cache_key`], most
/// recently used first, at most [`CACHE_ENTRIES`].
#[derive(Debug, Default)]
pub struct FilterCache {
    entries: Mutex<Vec<(String, Arc<Bitset>)>>,
}

impl FilterCache {
    /// The bitmap cached under `key` (marked most recently used).
    pub fn get(&self, key: &str) -> Option<Arc<Bitset>> {
        let mut c = self.entries.lock();
        let i = c.iter().position(|(k, _)| k == key)?;
        let e = c.remove(i);
        let bits = e.1.clone();
        c.insert(0, e);
        Some(bits)
    }

    /// Caches `bits` under `key`, replacing any older entry.
    pub fn put(&self, key: String, bits: Arc<Bitset>) {
        let mut c = self.entries.lock();
        c.retain(|(k, _)| *k != key);
        c.insert(0, (key, bits));
        c.truncate(CACHE_ENTRIES);
    }
}

/// The payload of one sealed segment: the Arrow record batch (buffers
/// borrowed from the map) and the payload indexes, plus a small cache of
/// evaluated filters.
#[derive(Debug)]
pub struct SegmentPayload {
    schema: Schema,
    batch: RecordBatch,
    index: PayloadIndex,
    slots: usize,
    cache: FilterCache,
}

/// Evaluated filters kept per cache (per segment).
const CACHE_ENTRIES: usize = 32;

impl SegmentPayload {
    /// Wraps a decoded batch and index.
    pub fn new(schema: Schema, batch: RecordBatch, index: PayloadIndex) -> SegmentPayload {
        SegmentPayload {
            slots: batch.num_rows(),
            schema,
            batch,
            index,
            cache: FilterCache::default(),
        }
    }

    /// The segment's payload schema (a prefix of the collection's as it was
    /// when the segment was written).
    pub fn schema(&self) -> &Schema {
        &self.schema
    }

    /// Values of slot `slot` laid out by the collection `schema`.
    pub fn row(&self, schema: &Schema, slot: usize) -> Row {
        let mut row = vec![Value::Null; schema.len()];
        for (c, f) in self.schema.fields().iter().enumerate() {
            if let Some(i) = schema.index_of(&f.name) {
                row[i] = crate::payload::value_at(self.batch.column(c).as_ref(), f.ty, slot);
            }
        }
        row.into_boxed_slice()
    }

    /// The column of field `name` in this segment and its type (`None`
    /// when the segment was written before the field existed).
    pub fn column_of(&self, name: &str) -> Option<(usize, FieldType)> {
        self.schema.field(name).ok()
    }

    /// The value of column `c` (stored as `ty`) at `slot`.
    pub fn value_in(&self, c: usize, ty: FieldType, slot: usize) -> Value {
        crate::payload::value_at(self.batch.column(c).as_ref(), ty, slot)
    }

    /// Hints the CPU to fetch column `c`'s value at `slot`.
    pub fn prefetch_in(&self, c: usize, slot: usize) {
        crate::payload::prefetch_value(self.batch.column(c).as_ref(), slot);
    }

    /// Hints the CPU to fetch slot `slot`'s values (see
    /// [`crate::payload::prefetch_value`]) before [`SegmentPayload::row`].
    pub fn prefetch_row(&self, slot: usize) {
        for c in self.batch.columns() {
            crate::payload::prefetch_value(c.as_ref(), slot);
        }
    }

    /// The slots passing `b`, intersected with `live` (the segment's own
    /// live slots), cached by filter.
    pub fn eval_cached(
        &self,
        b: &Bound,
        live: impl FnOnce() -> Bitset,
    ) -> Result<Arc<Bitset>, String> {
        let key = b.cache_key();
        if let Some(bits) = self.cache.get(&key) {
            return Ok(bits);
        }
        let bm = self.eval(b)?;
        let live = live();
        let mut matched = Bitset::new(live.len());
        for s in bm.iter() {
            if (s as usize) < live.len() {
                matched.insert(s as usize);
            }
        }
        let out = Arc::new(matched.and(&live));
        self.cache.put(key, out.clone());
        Ok(out)
    }

    fn universe(&self) -> RoaringBitmap {
        let mut u = RoaringBitmap::new();
        u.insert_range(0..self.slots as u32);
        u
    }

    /// The slots passing `b` (ignoring deletions).
    pub fn eval(&self, b: &Bound) -> Result<RoaringBitmap, String> {
        Ok(match b {
            Bound::And(v) => {
                let mut acc: Option<RoaringBitmap> = None;
                for x in v {
                    let r = self.eval(x)?;
                    acc = Some(match acc {
                        None => r,
                        Some(a) => a & r,
                    });
                    if acc.as_ref().is_some_and(RoaringBitmap::is_empty) {
                        break;
                    }
                }
                acc.unwrap_or_else(|| self.universe())
            }
            Bound::Or(v) => {
                let mut acc = RoaringBitmap::new();
                for x in v {
                    acc |= self.eval(x)?;
                }
                acc
            }
            Bound::Not(x) => self.universe() - self.eval(x)?,
            Bound::Cond { name, cond, .. } => {
                let Some(c) = self.schema.index_of(name) else {
                    // The field did not exist when this segment was written:
                    // null in every row.
                    return Ok(if matches!(cond, Cond::IsNull) {
                        self.universe()
                    } else {
                        RoaringBitmap::new()
                    });
                };
                let ix = &self.index;
                let eq = |v: &Value| -> Result<RoaringBitmap, String> {
                    match pindex::key_of(v) {
                        Some(k) => ix.lookup(c, &k),
                        None => {
                            let x = num_of(v);
                            ix.range(c, RB::Included(x), RB::Included(x))
                        }
                    }
                };
                let any = |vs: &[Value]| -> Result<RoaringBitmap, String> {
                    let mut acc = RoaringBitmap::new();
                    for v in vs {
                        acc |= eq(v)?;
                    }
                    Ok(acc)
                };
                let present =
                    || -> Result<RoaringBitmap, String> { Ok(self.universe() - ix.nulls(c)?) };
                match cond {
                    Cond::IsNull => ix.nulls(c)?,
                    Cond::IsNotNull => present()?,
                    Cond::Eq(v) => eq(v)?,
                    Cond::Ne(v) => present()? - eq(v)?,
                    Cond::In(vs) => any(vs)?,
                    Cond::NotIn(vs) => present()? - any(vs)?,
                    Cond::Range(lo, hi) => ix.range(c, *lo, *hi)?,
                }
            }
        })
    }
}
