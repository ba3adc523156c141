//! Filter conditions on a row's id (`{"field": "id", ...}`), as Longbow's
//! clients send them in download tickets. Payload filters are the store's;
//! these are split off the top-level AND and tested on the ids of the rows
//! the payload filter passed.

use crate::error::{ApiError, ApiResult};
use sagitta_store::Id;
use serde_json::Value as Json;
use std::cmp::Ordering;

/// One condition on the id.
#[derive(Debug, Clone, PartialEq)]
pub struct IdCond {
    op: Op,
    values: Vec<Json>,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Op {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    In,
    NotIn,
}

fn bad(msg: impl Into<String>) -> ApiError {
    ApiError::BadRequest(msg.into())
}

fn is_id_cond(c: &Json) -> bool {
    c.get("field").and_then(Json::as_str) == Some("id")
}

/// Splits `filter` into the payload filter and the conditions on `id`
/// (taken from a bare list or a top-level `and`; anywhere else they are
/// refused with a clear error).
pub fn split(filter: Option<Json>) -> ApiResult<(Option<Json>, Vec<IdCond>)> {
    let Some(f) = filter else {
        return Ok((None, Vec::new()));
    };
    let (items, wrap) = match f {
        Json::Array(items) => (items, false),
        Json::Object(ref m) if m.len() == 1 && m.get("and").is_some_and(Json::is_array) => {
            let Some(Json::Array(items)) = m.get("and").cloned() else {
                return Ok((Some(f), Vec::new()));
            };
            (items, true)
        }
        f if is_id_cond(&f) => (vec![f], false),
        f => {
            nowhere_else(&f)?;
            return Ok((Some(f), Vec::new()));
        }
    };
    let mut rest = Vec::new();
    let mut conds = Vec::new();
    for c in items {
        if is_id_cond(&c) {
            conds.push(parse(&c)?);
        } else {
            nowhere_else(&c)?;
            rest.push(c);
        }
    }
    let rest = match (rest.is_empty(), wrap) {
        (true, _) => None,
        (false, false) => Some(Json::Array(rest)),
        (false, true) => Some(serde_json::json!({ "and": rest })),
    };
    Ok((rest, conds))
}

/// Refuses a condition on `id` nested in `or` / `not`.
fn nowhere_else(f: &Json) -> ApiResult<()> {
    let nested = match f {
        Json::Array(a) => a.iter().any(|c| is_id_cond(c) || nowhere_else(c).is_err()),
        Json::Object(m) => m
            .iter()
            .filter(|(k, _)| matches!(k.as_str(), "and" | "or" | "not"))
            .any(|(_, v)| is_id_cond(v) || nowhere_else(v).is_err()),
        _ => false,
    };
    if nested {
        return Err(bad(
            "filter: conditions on `id` are taken at the top level only (a list, or one `and`)",
        ));
    }
    Ok(())
}

fn parse(c: &Json) -> ApiResult<IdCond> {
    let op = c.get("op").and_then(Json::as_str).unwrap_or("eq");
    let op = match op.to_ascii_lowercase().as_str() {
        "eq" | "=" | "==" => Op::Eq,
        "ne" | "!=" | "<>" => Op::Ne,
        "lt" | "<" => Op::Lt,
        "le" | "<=" => Op::Le,
        "gt" | ">" => Op::Gt,
        "ge" | ">=" => Op::Ge,
        "in" => Op::In,
        "not_in" | "not in" | "nin" => Op::NotIn,
        o => {
            return Err(bad(format!(
                "filter on `id`: operator {o:?} is not one of eq ne lt le gt ge in not_in"
            )))
        }
    };
    let v = c
        .get("value")
        .cloned()
        .ok_or_else(|| bad("filter on `id`: no `value`"))?;
    let values = match (op, v) {
        (Op::In | Op::NotIn, Json::Array(a)) => a,
        (Op::In | Op::NotIn, _) => return Err(bad("filter on `id`: in / not_in take a list")),
        (_, v) => vec![v],
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
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    #[test]
    fn id_conditions_are_split_and_tested() {
        let (rest, c) = split(Some(json!([
            {"field": "id", "op": "lt", "value": "100"},
            {"field": "category", "op": "eq", "value": "tech"}
        ])))
        .unwrap();
        assert_eq!(
            rest,
            Some(json!([{"field": "category", "op": "eq", "value": "tech"}]))
        );
        assert!(c[0].test(&Id::UInt(99)));
        assert!(!c[0].test(&Id::UInt(100)));
        assert!(c[0].test(&Id::Int(-5)));
        let (rest, c) = split(Some(
            json!({"and": [{"field": "id", "op": "In", "value": ["a", 7]}]}),
        ))
        .unwrap();
        assert_eq!(rest, None);
        assert!(c[0].test(&Id::Str("a".into())));
        assert!(c[0].test(&Id::Str("7".into())));
        assert!(c[0].test(&Id::UInt(7)));
        assert!(!c[0].test(&Id::Str("b".into())));
        // A non-numeric value never equals an integer id.
        let (_, c) = split(Some(json!([{"field": "id", "op": "eq", "value": "x"}]))).unwrap();
        assert!(!c[0].test(&Id::UInt(1)));
        // Nested, or a bad operator: refused.
        assert!(split(Some(
            json!({"or": [{"field": "id", "op": "eq", "value": 1}]})
        ))
        .is_err());
        assert!(split(Some(json!([{"field": "id", "op": "contains", "value": 1}]))).is_err());
        assert!(split(Some(
            json!([{"field": "id", "op": "eq", "value": {"a": 1}}])
        ))
        .is_err());
        // No id condition: the filter passes through unchanged.
        let f = json!({"or": [{"field": "a", "op": "eq", "value": 1}]});
        assert_eq!(split(Some(f.clone())).unwrap(), (Some(f), Vec::new()));
    }
}
