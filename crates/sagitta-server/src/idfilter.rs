//! Filter conditions on a row's id (`{"field": "id", ...}`), as Longbow's
//! clients send them in download tickets. The ticket's filter is parsed
//! once, by the store's parser ([`Filter::parse`]); [`split`] then takes
//! the conditions on `id` off its top-level AND (they test the row's id,
//! not a payload column) and leaves the rest to be bound and evaluated by
//! the store. The id conditions are tested on the ids of the rows the
//! payload filter passed.

use crate::error::{ApiError, ApiResult};
use sagitta_store::filter::{Filter, Op};
use sagitta_store::Id;
use serde_json::Value as Json;
use std::cmp::Ordering;

/// One condition on the id.
#[derive(Debug, Clone, PartialEq)]
pub struct IdCond {
    op: Op,
    values: Vec<Json>,
}

fn bad(msg: impl Into<String>) -> ApiError {
    ApiError::BadRequest(msg.into())
}

fn on_id(f: &Filter) -> bool {
    matches!(f, Filter::Cond { field, .. } if field == "id")
}

/// Parses `filter` (the store's grammar) and splits it into the payload
/// filter and the conditions on `id` (taken from a bare list, a top-level
/// `and`, or a lone condition; anywhere else they are refused with a clear
/// error).
pub fn split(filter: Option<&Json>) -> ApiResult<(Option<Filter>, Vec<IdCond>)> {
    let Some(f) = filter else {
        return Ok((None, Vec::new()));
    };
    let items = match Filter::parse(f)? {
        Filter::And(items) => items,
        f if on_id(&f) => vec![f],
        f => {
            nowhere_else(&f)?;
            return Ok((Some(f), Vec::new()));
        }
    };
    let mut rest = Vec::new();
    let mut conds = Vec::new();
    for c in items {
        match c {
            Filter::Cond { field, op, value } if field == "id" => conds.push(id_cond(op, value)?),
            c => {
                nowhere_else(&c)?;
                rest.push(c);
            }
        }
    }
    let rest = (!rest.is_empty()).then_some(Filter::And(rest));
    Ok((rest, conds))
}

/// Refuses a condition on `id` nested in `and` / `or` / `not`.
fn nowhere_else(f: &Filter) -> ApiResult<()> {
    let nested = match f {
        Filter::And(v) | Filter::Or(v) => v.iter().any(|c| on_id(c) || nowhere_else(c).is_err()),
        Filter::Not(c) => on_id(c) || nowhere_else(c).is_err(),
        Filter::Cond { .. } => false,
    };
    if nested {
        return Err(bad(
            "filter: conditions on `id` are taken at the top level only (a list, or one `and`)",
        ));
    }
    Ok(())
}

/// A parsed condition on `id`: its operator must compare, its values be
/// numbers or strings.
fn id_cond(op: Op, v: Json) -> ApiResult<IdCond> {
    let values = match (op, v) {
        (Op::Eq | Op::Ne | Op::Lt | Op::Le | Op::Gt | Op::Ge, v) => vec![v],
        (Op::In | Op::NotIn, Json::Array(a)) => a,
        (Op::In | Op::NotIn, _) => return Err(bad("filter on `id`: in / not_in take a list")),
        (o, _) => {
            return Err(bad(format!(
                "filter on `id`: operator {o:?} is not one of eq ne lt le gt ge in not_in"
            )))
        }
    };
    for v in &values {
        if !(v.is_number() || v.is_string()) {
            return Err(bad(format!(
                "filter on `id`: {v} is not a number or a string"
            )));
        }
    }
    Ok(IdCond { op, values })
}
/// `id` against `v`: numerically for integer ids (a numeric string is
/// its number; anything else is unequal and unordered), as strings for
/// string ids.
fn compare(id: &Id, v: &Json) -> Option<Ordering> {
    let num = |v: &Json| -> Option<i128> {
        match v {
            Json::Number(n) => n
                .as_i64()
                .map(i128::from)
                .or_else(|| n.as_u64().map(i128::from)),
            Json::String(s) => s.trim().parse::<i128>().ok(),
            _ => None,
        }
    };
    match id {
        Id::UInt(u) => Some(i128::from(*u).cmp(&num(v)?)),
        Id::Int(i) => Some(i128::from(*i).cmp(&num(v)?)),
        Id::Str(s) => match v {
            Json::String(w) => Some(s.as_str().cmp(w.as_str())),
            Json::Number(n) => Some(s.as_str().cmp(n.to_string().as_str())),
            _ => None,
        },
        Id::U128(x) => {
            let w = match v {
                Json::Number(n) => u128::from(n.as_u64()?),
                Json::String(w) => sagitta_store::parse_u128(w)?,
                _ => return None,
            };
            Some(x.cmp(&w))
        }
    }
}

impl IdCond {
    /// Whether `id` passes.
    pub fn test(&self, id: &Id) -> bool {
        let c = |v: &Json| compare(id, v);
        let first = self.values.first();
        match self.op {
            Op::Eq => first.and_then(c) == Some(Ordering::Equal),
            Op::Ne => first.and_then(c).is_some_and(|o| o != Ordering::Equal),
            Op::Lt => first.and_then(c) == Some(Ordering::Less),
            Op::Le => first.and_then(c).is_some_and(|o| o != Ordering::Greater),
            Op::Gt => first.and_then(c) == Some(Ordering::Greater),
            Op::Ge => first.and_then(c).is_some_and(|o| o != Ordering::Less),
            Op::In => self.values.iter().any(|v| c(v) == Some(Ordering::Equal)),
            Op::NotIn => self.values.iter().all(|v| c(v) != Some(Ordering::Equal)),
            // Not made by [`split`].
            Op::IsNull | Op::IsNotNull | Op::Contains => false,
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    fn split(f: Json) -> ApiResult<(Option<Filter>, Vec<IdCond>)> {
        super::split(Some(&f))
    }

    #[test]
    fn id_conditions_are_split_and_tested() {
        let (rest, c) = split(json!([
            {"field": "id", "op": "lt", "value": "100"},
            {"field": "category", "op": "eq", "value": "tech"}
        ]))
        .unwrap();
        let want = json!([{"field": "category", "op": "eq", "value": "tech"}]);
        assert_eq!(rest, Some(Filter::parse(&want).unwrap()));
        assert!(c[0].test(&Id::UInt(99)));
        assert!(!c[0].test(&Id::UInt(100)));
        assert!(c[0].test(&Id::Int(-5)));
        let (rest, c) =
            split(json!({"and": [{"field": "id", "op": "In", "value": ["a", 7]}]})).unwrap();
        assert_eq!(rest, None);
        assert!(c[0].test(&Id::Str("a".into())));
        assert!(c[0].test(&Id::Str("7".into())));
        assert!(c[0].test(&Id::UInt(7)));
        assert!(!c[0].test(&Id::Str("b".into())));
        // A lone condition on the id.
        let (rest, c) = split(json!({"field": "id", "op": "ge", "value": 3})).unwrap();
        assert!(rest.is_none() && c[0].test(&Id::UInt(3)) && !c[0].test(&Id::UInt(2)));
        // A non-numeric value never equals an integer id.
        let (_, c) = split(json!([{"field": "id", "op": "eq", "value": "x"}])).unwrap();
        assert!(!c[0].test(&Id::UInt(1)));
        // Nested, a bad operator, a bad value, or a malformed filter: refused.
        assert!(split(json!({"or": [{"field": "id", "op": "eq", "value": 1}]})).is_err());
        assert!(split(json!({"not": {"field": "id", "op": "eq", "value": 1}})).is_err());
        assert!(split(json!([{"field": "id", "op": "contains", "value": 1}])).is_err());
        assert!(split(json!([{"field": "id", "op": "nope", "value": 1}])).is_err());
        assert!(split(json!([{"field": "id", "op": "in", "value": 1}])).is_err());
        assert!(split(json!([{"field": "id", "op": "eq", "value": {"a": 1}}])).is_err());
        assert!(split(json!({"and": [], "x": 1})).is_err());
        // No id condition: the filter passes through as parsed.
        let f = json!({"or": [{"field": "a", "op": "eq", "value": 1}]});
        assert_eq!(
            split(f.clone()).unwrap(),
            (Some(Filter::parse(&f).unwrap()), Vec::new())
        );
    }
}
