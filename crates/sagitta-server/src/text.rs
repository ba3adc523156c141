//! Text and hybrid search for both protocols: the fusion arguments, the
//! search itself (run on the search pool; a query embedded there when the
//! collection has a model and no vector is given), and the text fields
//! of a create request.

use crate::error::{ApiError, ApiResult};
use crate::ops::{check_k, Knobs, OwnedVector};
use sagitta_store::filter::Bound;
use sagitta_store::{
    AnalyzerKind, Collection, CollectionSearch, Fusion, TextFieldSpec, TextHit, TextSearch,
};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// A text field of a create request: a name (English analyzer) or a name
/// with its analyzer.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum TextFieldReq {
    /// A payload string column, English analyzer.
    Name(String),
    /// A payload string column and its analyzer.
    Spec {
        /// The column.
        name: String,
        /// `en` (lower-casing, English stop words, Snowball stemming;
        /// default) or `simple` (lower-casing only).
        #[serde(default)]
        analyzer: Option<String>,
    },
}

/// The text fields of a create request.
pub fn text_fields(req: &[TextFieldReq]) -> ApiResult<Vec<TextFieldSpec>> {
    req.iter()
        .map(|f| {
            let (name, a) = match f {
                TextFieldReq::Name(n) => (n, None),
                TextFieldReq::Spec { name, analyzer } => (name, analyzer.as_deref()),
            };
            let a = a.unwrap_or("en");
            let analyzer = AnalyzerKind::parse(a).ok_or_else(|| {
                ApiError::BadRequest(format!(
                    "text_fields: {name:?}: unknown analyzer {a:?} (en or simple)"
                ))
            })?;
            Ok(TextFieldSpec::new(name.clone(), analyzer))
        })
        .collect()
}

/// A text field as a collection describes it.
#[derive(Debug, Serialize, ToSchema)]
pub struct TextFieldInfo {
    /// The payload column.
    pub name: String,
    /// Its analyzer.
    pub analyzer: String,
}

/// The text fields of a collection.
pub fn text_field_info(coll: &Collection) -> Vec<TextFieldInfo> {
    coll.config()
        .text
        .iter()
        .map(|f| TextFieldInfo {
            name: f.name.clone(),
            analyzer: f.analyzer.name().into(),
        })
        .collect()
}

/// `fusion` / `alpha` / `rrf_k` as a fusion (None: the default, alpha
/// 0.3).
/// `alpha` alone selects the weighted sum (Longbow's meaning: 1.0 dense
/// only, 0.0 text only).
pub fn fusion_of(
    fusion: Option<&str>,
    alpha: Option<f32>,
    rrf_k: Option<f32>,
) -> ApiResult<Option<Fusion>> {
    Fusion::from_args(fusion, alpha, rrf_k).map_err(ApiError::BadRequest)
}

/// A text or hybrid search: `vector` (None: text only, or the text
/// embedded by the collection's model) and `text`, fused.
#[allow(clippy::too_many_arguments)]
pub fn search(
    coll: &Collection,
    text: &str,
    vector: Option<&OwnedVector>,
    k: usize,
    fusion: Option<Fusion>,
    depth: Option<usize>,
    knobs: &Knobs,
    pred: Option<&Bound>,
) -> ApiResult<Vec<TextHit>> {
    let k = check_k(k, coll.len())?;
    if k == 0 {
        return Ok(Vec::new());
    }
    let s = TextSearch {
        text,
        vector: vector.map(OwnedVector::as_ref),
        k,
        fusion,
        depth,
        opts: CollectionSearch {
            ef: knobs.ef,
            exact: knobs.exact,
            nprobe: knobs.nprobe,
            refine: knobs.refine,
            predicate: pred,
            ..CollectionSearch::default()
        },
    };
    Ok(coll.search_text(&s)?)
}
