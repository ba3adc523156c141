//! The kNN vote over a payload column: `POST /collections/{name}/classify`
//! runs a search and counts the labels (a payload field) of the k nearest
//! rows.

use crate::error::{ApiError, ApiResult};
use crate::ops::{bind, json_vector, payload_json, search, Knobs};
use crate::registry::Entry;
use serde::{Deserialize, Serialize};
use serde_json::Value as Json;
use std::collections::HashMap;
use utoipa::ToSchema;

/// A classify request: one query, the label column, k.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ClassifyRequest {
    /// The query vector.
    pub vector: Vec<f32>,
    /// The payload column holding each row's label.
    pub label: String,
    /// Neighbours that vote (1 to 10000; default 5).
    #[serde(default = "five")]
    #[schema(minimum = 1, maximum = 10000)]
    pub k: usize,
    /// Only rows this filter matches vote (see docs/API.md).
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub filter: Option<Json>,
    /// HNSW beam width (default: the collection's ef_search).
    #[serde(default)]
    pub ef: Option<usize>,
    /// Exact search (scan every vector): the vote of the true k nearest.
    #[serde(default)]
    pub exact: bool,
}

fn five() -> usize {
    5
}

/// One label's share of the vote.
#[derive(Debug, Serialize, ToSchema)]
pub struct LabelVote {
    /// The label (the payload value; null for rows without one).
    #[schema(value_type = Object)]
    pub label: Json,
    /// Neighbours carrying it.
    pub count: u32,
    /// `count` over the neighbours found.
    pub share: f64,
}

/// A neighbour that voted.
#[derive(Debug, Serialize, ToSchema)]
pub struct Voter {
    /// Key.
    pub id: u64,
    /// Distance under the collection's metric.
    pub score: f32,
    /// Its label.
    #[schema(value_type = Object)]
    pub label: Json,
}

/// The vote: labels most frequent first (ties: in the order of their JSON
/// text), and the neighbours that cast it, nearest first.
#[derive(Debug, Serialize, ToSchema)]
pub struct ClassifyResponse {
    /// Labels and their shares.
    pub votes: Vec<LabelVote>,
    /// The k nearest rows (fewer when the filter or the collection has
    /// fewer).
    pub neighbors: Vec<Voter>,
}

/// Runs a classify request.
pub fn run_classify(e: &Entry, req: ClassifyRequest) -> ApiResult<ClassifyResponse> {
    let coll = &e.coll;
    let schema = coll.schema();
    schema.field(&req.label).map_err(|_| {
        ApiError::BadRequest(format!(
            "label: the collection has no payload column {:?}",
            req.label
        ))
    })?;
    let query = json_vector(&coll.config().space, req.vector, 0)?;
    let pred = bind(coll, req.filter.as_ref())?;
    let knobs = Knobs {
        ef: req.ef,
        exact: req.exact,
        ..Knobs::default()
    };
    let hits = search(coll, &[query], req.k, &knobs, pred.as_ref())?
        .pop()
        .unwrap_or_default();
    let keys: Vec<u64> = hits.iter().map(|h| h.0).collect();
    let rows = payload_json(coll, &keys, Some(std::slice::from_ref(&req.label)))?;
    let neighbors: Vec<Voter> = hits
        .iter()
        .zip(rows)
        .map(|(&(id, score), row)| Voter {
            id,
            score,
            label: row
                .and_then(|mut r| r.remove(&req.label))
                .unwrap_or(Json::Null),
        })
        .collect();
    // Tally on the label's JSON text (an ordered key for any value).
    let mut values: HashMap<String, Json> = HashMap::new();
    let texts: Vec<String> = neighbors
        .iter()
        .map(|v| {
            let t = v.label.to_string();
            values.entry(t.clone()).or_insert_with(|| v.label.clone());
            t
        })
        .collect();
    let n = neighbors.len().max(1) as f64;
    let votes = sagitta_lowdim::tally(texts)
        .into_iter()
        .map(|(t, count)| LabelVote {
            label: values.remove(&t).unwrap_or(Json::Null),
            count,
            share: f64::from(count) / n,
        })
        .collect();
    Ok(ClassifyResponse { votes, neighbors })
}
