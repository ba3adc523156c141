//! The text parts of both protocols' requests and answers: the fusion
//! arguments, the text fields of a create request (translated into the
//! store's options) and of a collection's description. The search itself
//! is the store's [`sagitta_store::Query`].

use crate::error::{ApiError, ApiResult};
use sagitta_store::{Collection, Fusion, Payload, TextColumns, TextFieldOption};
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

impl TextFieldReq {
    /// The store's option for this field (the store parses the analyzer).
    pub fn option(&self) -> TextFieldOption {
        match self {
            TextFieldReq::Name(n) => TextFieldOption::named(n.clone()),
            TextFieldReq::Spec { name, analyzer } => TextFieldOption {
                name: name.clone(),
                analyzer: analyzer.clone(),
            },
        }
    }
}

/// The text fields of a collection created by a DoPut whose first batch
/// has `payload`, as the server's `columns` setting and the store's rule
/// ([`TextColumns::fields`]) choose them (None: no text fields).
pub fn first_put_text_fields(
    columns: &TextColumns,
    payload: Option<&Payload>,
) -> Option<Vec<TextFieldReq>> {
    let fields = columns.fields(payload.map_or(&[][..], |p| &p.fields));
    (!fields.is_empty()).then(|| {
        fields
            .into_iter()
            .map(|f| TextFieldReq::Spec {
                name: f.name,
                analyzer: f.analyzer,
            })
            .collect()
    })
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
