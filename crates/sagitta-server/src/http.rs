//! HTTP/JSON (axum). Handlers parse, hand the work to the executor's pools
//! and map errors in one place ([`ApiError`]'s `IntoResponse`). The
//! OpenAPI document is generated from these handlers and the types in
//! [`crate::ops`].

use crate::api::*;
use crate::auth::{self, Role};
use crate::browse::{self, ScrollRequest, ScrollResponse, SegmentsResponse, WhoAmI};
use crate::classify::{ClassifyRequest, ClassifyResponse};
use crate::error::{ApiError, ApiResult, ErrorBody};
use crate::exec::Work;
use crate::fastjson::{self, WithVector};
use crate::ops;
use crate::State;
use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, MatchedPath, Request, State as AxState};
use axum::http::request::Parts;
use axum::http::{header, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;
use utoipa::OpenApi;

/// A JSON body whose every rejection is an [`ApiError`] (400, or 413 when
/// over the body limit). The content type is not checked.
#[derive(Debug)]
pub struct ApiJson<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for ApiJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        let bytes = body_bytes(req, state).await?;
        parse_object(&bytes, |b| serde_json::from_slice(b)).map(ApiJson)
    }
}

/// A request's body (400, or 413 when over the body limit).
async fn body_bytes<S: Send + Sync>(req: Request, state: &S) -> Result<Bytes, ApiError> {
    Bytes::from_request(req, state).await.map_err(|e| {
        if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::TooLarge(e.body_text())
        } else {
            ApiError::BadRequest(e.body_text())
        }
    })
}

/// [`ApiJson`] for a body whose query vector the fast path reads
/// ([`fastjson`]): the same answers, errors included.
#[derive(Debug)]
pub struct VectorJson<T>(pub T);

impl<S: Send + Sync, T: WithVector> FromRequest<S> for VectorJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        let bytes = body_bytes(req, state).await?;
        parse_object(&bytes, fastjson::from_slice).map(VectorJson)
    }
}

/// A request body that must be one JSON object.
fn parse_object<T>(
    bytes: &[u8],
    parse: impl FnOnce(&[u8]) -> serde_json::Result<T>,
) -> Result<T, ApiError> {
    if bytes.trim_ascii_start().first() != Some(&b'{') {
        return Err(ApiError::BadRequest(
            "the request body must be a JSON object".into(),
        ));
    }
    parse(bytes).map_err(|e| ApiError::BadRequest(format!("invalid JSON body: {e}")))
}

/// A JSON object body that may be left out (an empty body is `T`'s
/// default).
#[derive(Debug)]
pub struct JsonOrEmpty<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned + Default> FromRequest<S> for JsonOrEmpty<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        let empty = req
            .headers()
            .get(header::CONTENT_LENGTH)
            .is_some_and(|v| v.as_bytes() == b"0");
        if empty {
            return Ok(JsonOrEmpty(T::default()));
        }
        let bytes = Bytes::from_request(req, state)
            .await
            .map_err(|e| ApiError::BadRequest(e.body_text()))?;
        if bytes.trim_ascii().is_empty() {
            return Ok(JsonOrEmpty(T::default()));
        }
        parse_object(&bytes, |b| serde_json::from_slice(b)).map(JsonOrEmpty)
    }
}

/// The `{name}` path segment.
#[derive(Debug)]
pub struct Name(pub String);

impl<S: Send + Sync> FromRequestParts<S> for Name {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let axum::extract::Path(n) =
            axum::extract::Path::<String>::from_request_parts(parts, state)
                .await
                .map_err(|e| ApiError::BadRequest(e.body_text()))?;
        Ok(Name(n))
    }
}

type S = AxState<Arc<State>>;

async fn on_pool<T: Send + 'static>(
    st: &State,
    work: Work,
    f: impl FnOnce() -> ApiResult<T> + Send + 'static,
) -> ApiResult<T> {
    if !st.accepting.load(Ordering::Acquire) {
        return Err(ApiError::ShuttingDown);
    }
    st.exec.run(work, f).await
}

/// Liveness.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Health {
    /// `ok`.
    pub status: String,
}

/// Readiness.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Ready {
    /// Whether the server takes requests.
    pub ready: bool,
    /// Collections served.
    pub collections: usize,
}

/// A dropped collection.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Dropped {
    /// Its name.
    pub dropped: String,
}

/// Liveness: answers while the process runs.
#[utoipa::path(get, path = "/health", tag = "server",
    responses((status = 200, body = Health)))]
async fn health() -> Json<Health> {
    Json(Health {
        status: "ok".into(),
    })
}

/// Readiness: 200 once collections are open, 503 while shutting down.
#[utoipa::path(get, path = "/ready", tag = "server",
    responses((status = 200, body = Ready), (status = 503, body = ErrorBody)))]
async fn ready(AxState(st): S) -> Response {
    if st.accepting.load(Ordering::Acquire) {
        Json(Ready {
            ready: true,
            collections: st.registry.all().len(),
        })
        .into_response()
    } else {
        ApiError::ShuttingDown.into_response()
    }
}

/// Prometheus metrics (text exposition format).
#[utoipa::path(get, path = "/metrics", tag = "server",
    responses((status = 200, content_type = "text/plain", body = String)))]
async fn metrics(AxState(st): S) -> ApiResult<Response> {
    // Not through the search pool's admission control: metrics must answer
    // when the server is overloaded.
    let st2 = st.clone();
    let text = tokio::task::spawn_blocking(move || {
        st2.metrics.render(
            &st2.registry,
            [
                ("search", st2.exec.pending(Work::Search)),
                ("ingest", st2.exec.pending(Work::Ingest)),
            ],
        )
    })
    .await
    .map_err(|e| ApiError::Internal(format!("metrics: {e}")))?;
    Ok(([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text).into_response())
}

/// Lists collections.
#[utoipa::path(get, path = "/collections", tag = "collections",
    responses((status = 200, body = CollectionList), (status = 401, body = ErrorBody)))]
async fn list_collections(AxState(st): S) -> ApiResult<Json<CollectionList>> {
    let st2 = st.clone();
    on_pool(&st, Work::Search, move || {
        Ok(Json(CollectionList {
            collections: st2
                .registry
                .all()
                .iter()
                .map(|e| ops::describe(e))
                .collect(),
        }))
    })
    .await
}

/// Creates a collection.
#[utoipa::path(post, path = "/collections", tag = "collections",
    request_body = CreateCollection,
    responses((status = 201, body = CollectionInfo), (status = 400, body = ErrorBody),
              (status = 409, body = ErrorBody)))]
async fn create_collection(
    AxState(st): S,
    ApiJson(req): ApiJson<CreateCollection>,
) -> ApiResult<(StatusCode, Json<CollectionInfo>)> {
    crate::registry::validate_name(&req.name)?;
    let cfg = ops::config_from(&req)?;
    let st2 = st.clone();
    let info = on_pool(&st, Work::Ingest, move || {
        let e = st2.registry.create(&req.name, cfg)?;
        Ok(ops::describe(&e))
    })
    .await?;
    Ok((StatusCode::CREATED, Json(info)))
}

/// Describes a collection.
#[utoipa::path(get, path = "/collections/{name}", tag = "collections",
    params(("name" = String, Path, description = "Collection name", pattern = r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$")),
    responses((status = 200, body = CollectionInfo), (status = 404, body = ErrorBody)))]
async fn describe_collection(AxState(st): S, Name(name): Name) -> ApiResult<Json<CollectionInfo>> {
    let e = st.registry.get(&name)?;
    on_pool(&st, Work::Search, move || Ok(Json(ops::describe(&e)))).await
}

/// Drops a collection and deletes its files.
#[utoipa::path(delete, path = "/collections/{name}", tag = "collections",
    params(("name" = String, Path, description = "Collection name", pattern = r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$")),
    responses((status = 200, body = Dropped), (status = 404, body = ErrorBody)))]
async fn drop_collection(AxState(st): S, Name(name): Name) -> ApiResult<Json<Dropped>> {
    crate::registry::validate_name(&name)?;
    st.registry.get(&name)?;
    let st2 = st.clone();
    on_pool(&st, Work::Ingest, move || {
        st2.registry.drop_collection(&name)?;
        Ok(Json(Dropped { dropped: name }))
    })
    .await
}

/// Index status: `building` while accepted writes are being indexed.
#[utoipa::path(get, path = "/collections/{name}/index", tag = "collections",
    params(("name" = String, Path, description = "Collection name", pattern = r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$")),
    responses((status = 200, body = IndexStatus), (status = 404, body = ErrorBody)))]
async fn index_status(AxState(st): S, Name(name): Name) -> ApiResult<Json<IndexStatus>> {
    let e = st.registry.get(&name)?;
    let s = e.coll.stats();
    Ok(Json(ops::index_status(&e, &s)))
}

/// Seals the mutable part and waits until the background optimizer has
/// built and merged everything written before the call (with `compact`,
/// also rewrites every segment holding deleted rows). Searches and writes
/// go on meanwhile. A request that outlasts the server's timeout gets 504
/// while the work goes on: poll `/collections/{name}/index`.
#[utoipa::path(post, path = "/collections/{name}/optimize", tag = "collections",
    params(("name" = String, Path, description = "Collection name", pattern = r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$")),
    request_body(content = OptimizeRequest, description = "Optional; an empty body is `{}`"),
    responses((status = 200, body = IndexStatus), (status = 400, body = ErrorBody),
              (status = 404, body = ErrorBody), (status = 503, body = ErrorBody),
              (status = 504, body = ErrorBody)))]
async fn optimize(
    AxState(st): S,
    Name(name): Name,
    JsonOrEmpty(req): JsonOrEmpty<OptimizeRequest>,
) -> ApiResult<Json<IndexStatus>> {
    let e = st.registry.get(&name)?;
    if !st.accepting.load(Ordering::Acquire) {
        return Err(ApiError::ShuttingDown);
    }
    st.exec
        .run_wait("optimize", move || ops::run_optimize(&e, &req).map(Json))
        .await
}

/// Inserts or replaces rows; answers once they are durable under the
/// collection's WAL policy.
#[utoipa::path(post, path = "/collections/{name}/upsert", tag = "rows",
    params(("name" = String, Path, description = "Collection name", pattern = r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$")),
    request_body = UpsertRequest,
    responses((status = 200, body = UpsertResponse), (status = 400, body = ErrorBody),
              (status = 404, body = ErrorBody), (status = 413, body = ErrorBody),
              (status = 503, body = ErrorBody)))]
async fn upsert(
    AxState(st): S,
    Name(name): Name,
    VectorJson(req): VectorJson<UpsertRequest>,
) -> ApiResult<Json<UpsertResponse>> {
    let e = st.registry.get(&name)?;
    let st2 = st.clone();
    let rows = req.ids.len();
    let bytes = req.vectors.iter().map(|v| v.len() * 4 + 8).sum::<usize>();
    let r = on_pool(&st, Work::Ingest, move || ops::run_upsert(&e, req)).await?;
    st2.metrics
        .ingested("http", &name, rows as u64, bytes as u64);
    Ok(Json(r))
}

/// Reads rows by key.
#[utoipa::path(post, path = "/collections/{name}/get", tag = "rows",
    params(("name" = String, Path, description = "Collection name", pattern = r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$")),
    request_body = GetRequest,
    responses((status = 200, body = GetResponse), (status = 400, body = ErrorBody),
              (status = 404, body = ErrorBody)))]
async fn get_rows(
    AxState(st): S,
    Name(name): Name,
    ApiJson(req): ApiJson<GetRequest>,
) -> ApiResult<Json<GetResponse>> {
    let e = st.registry.get(&name)?;
    on_pool(&st, Work::Search, move || ops::run_get(&e, req).map(Json)).await
}

/// Deletes rows by key or by filter.
#[utoipa::path(post, path = "/collections/{name}/delete", tag = "rows",
    params(("name" = String, Path, description = "Collection name", pattern = r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$")),
    request_body = DeleteRequest,
    responses((status = 200, body = DeleteResponse), (status = 400, body = ErrorBody),
              (status = 404, body = ErrorBody)))]
async fn delete_rows(
    AxState(st): S,
    Name(name): Name,
    ApiJson(req): ApiJson<DeleteRequest>,
) -> ApiResult<Json<DeleteResponse>> {
    let e = st.registry.get(&name)?;
    on_pool(&st, Work::Ingest, move || {
        ops::run_delete(&e, req).map(Json)
    })
    .await
}

/// Sets payload columns of stored rows (by key or by filter), their
/// vectors and other columns kept.
#[utoipa::path(post, path = "/collections/{name}/set_payload", tag = "rows",
    params(("name" = String, Path, description = "Collection name", pattern = r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$")),
    request_body = SetPayloadRequest,
    responses((status = 200, body = SetPayloadResponse), (status = 400, body = ErrorBody),
              (status = 404, body = ErrorBody)))]
async fn set_payload(
    AxState(st): S,
    Name(name): Name,
    ApiJson(req): ApiJson<SetPayloadRequest>,
) -> ApiResult<Json<SetPayloadResponse>> {
    let e = st.registry.get(&name)?;
    on_pool(&st, Work::Ingest, move || {
        ops::run_set_payload(&e, req).map(Json)
    })
    .await
}

/// Counts rows (matching a filter).
#[utoipa::path(post, path = "/collections/{name}/count", tag = "rows",
    params(("name" = String, Path, description = "Collection name", pattern = r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$")),
    request_body = CountRequest,
    responses((status = 200, body = CountResponse), (status = 400, body = ErrorBody),
              (status = 404, body = ErrorBody)))]
async fn count_rows(
    AxState(st): S,
    Name(name): Name,
    ApiJson(req): ApiJson<CountRequest>,
) -> ApiResult<Json<CountResponse>> {
    let e = st.registry.get(&name)?;
    on_pool(&st, Work::Search, move || ops::run_count(&e, req).map(Json)).await
}

/// k-nearest-neighbour search, one query (`vector`) or a batch
/// (`vectors`), with an optional filter.
#[utoipa::path(post, path = "/collections/{name}/search", tag = "search",
    params(("name" = String, Path, description = "Collection name", pattern = r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$")),
    request_body = SearchRequest,
    responses((status = 200, body = SearchResult), (status = 400, body = ErrorBody),
              (status = 404, body = ErrorBody), (status = 503, body = ErrorBody)))]
async fn search(
    AxState(st): S,
    Name(name): Name,
    VectorJson(req): VectorJson<SearchRequest>,
) -> ApiResult<Json<SearchResult>> {
    let e = st.registry.get(&name)?;
    let work = Work::search(req.vectors.is_none(), req.text.is_some(), req.exact);
    on_pool(&st, work, move || ops::run_search(&e, req).map(Json)).await
}

/// The kNN vote: the labels (a payload column) of the k nearest rows of
/// one query, with their counts and shares.
#[utoipa::path(post, path = "/collections/{name}/classify", tag = "search",
    params(("name" = String, Path, description = "Collection name", pattern = r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$")),
    request_body = ClassifyRequest,
    responses((status = 200, body = ClassifyResponse), (status = 400, body = ErrorBody),
              (status = 404, body = ErrorBody), (status = 503, body = ErrorBody)))]
async fn classify(
    AxState(st): S,
    Name(name): Name,
    ApiJson(req): ApiJson<ClassifyRequest>,
) -> ApiResult<Json<ClassifyResponse>> {
    let e = st.registry.get(&name)?;
    on_pool(&st, Work::Search, move || {
        crate::classify::run_classify(&e, req).map(Json)
    })
    .await
}

/// A collection's parts: its sealed segments (rows, tombstones, bytes,
/// index, when written) and frozen parts, the mutable part's size, and
/// the optimizer's totals.
#[utoipa::path(get, path = "/collections/{name}/segments", tag = "collections",
    params(("name" = String, Path, description = "Collection name", pattern = r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$")),
    responses((status = 200, body = SegmentsResponse), (status = 404, body = ErrorBody)))]
async fn segments(AxState(st): S, Name(name): Name) -> ApiResult<Json<SegmentsResponse>> {
    let e = st.registry.get(&name)?;
    on_pool(&st, Work::Search, move || Ok(Json(browse::segments(&e)))).await
}

/// Rows in storage order, a page at a time, optionally filtered.
#[utoipa::path(post, path = "/collections/{name}/scroll", tag = "rows",
    params(("name" = String, Path, description = "Collection name", pattern = r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$")),
    request_body = ScrollRequest,
    responses((status = 200, body = ScrollResponse), (status = 400, body = ErrorBody),
              (status = 404, body = ErrorBody), (status = 503, body = ErrorBody)))]
async fn scroll(
    AxState(st): S,
    Name(name): Name,
    ApiJson(req): ApiJson<ScrollRequest>,
) -> ApiResult<Json<ScrollResponse>> {
    let e = st.registry.get(&name)?;
    on_pool(&st, Work::Search, move || {
        browse::run_scroll(&e, req).map(Json)
    })
    .await
}

/// The role of the presented API key (401 for an unknown key).
#[utoipa::path(get, path = "/whoami", tag = "server",
    responses((status = 200, body = WhoAmI), (status = 401, body = ErrorBody)))]
async fn whoami(AxState(st): S, headers: axum::http::HeaderMap) -> ApiResult<Json<WhoAmI>> {
    let key = auth::bearer(
        headers.get(header::AUTHORIZATION).map(|v| v.as_bytes()),
        headers.get("x-api-key").map(|v| v.as_bytes()),
    );
    let role = st
        .keys
        .role(key.as_deref())
        .ok_or(ApiError::Unauthenticated)?;
    Ok(Json(WhoAmI {
        role: role.name().into(),
        auth: st.keys.enabled(),
    }))
}

/// The OpenAPI document.
#[derive(Debug, OpenApi)]
#[openapi(
    info(title = "Sagitta", description = "Vector search over HTTP/JSON. Arrow Flight is served on its own port (see docs/SERVER.md)."),
    paths(health, ready, metrics, list_collections, create_collection, describe_collection,
          drop_collection, index_status, optimize, segments, upsert, get_rows, delete_rows, set_payload, count_rows, scroll,
          search, classify, whoami),
    modifiers(&BearerAuth),
    security(("api_key" = [])),
    tags((name = "collections"), (name = "rows"), (name = "search"), (name = "server"))
)]
pub struct ApiDoc;

struct BearerAuth;

impl utoipa::Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityScheme};
        let c = openapi.components.get_or_insert_with(Default::default);
        c.add_security_scheme(
            "api_key",
            SecurityScheme::Http(Http::new(HttpAuthScheme::Bearer)),
        );
    }
}

/// The OpenAPI document as pretty JSON (what `docs/openapi.json` holds).
pub fn openapi_json() -> String {
    let mut s = ApiDoc::openapi()
        .to_pretty_json()
        .unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"));
    s.push('\n');
    s
}

async fn openapi() -> Response {
    ([(header::CONTENT_TYPE, "application/json")], openapi_json()).into_response()
}

async fn docs_page() -> Html<&'static str> {
    Html(include_str!("docs.html"))
}

async fn not_found() -> ApiError {
    ApiError::NotFound("no such route".into())
}

/// Role a route needs (`None`: open to all).
fn role_for(method: &Method, route: &str) -> Option<Role> {
    match route {
        "/health" | "/ready" | "/openapi.json" | "/docs" | "/ui" | "/ui/" | "/ui/{*file}" => None,
        "/collections" if method == Method::POST => Some(Role::Admin),
        "/collections/{name}" if method == Method::DELETE => Some(Role::Admin),
        r if r.ends_with("/upsert")
            || r.ends_with("/delete")
            || r.ends_with("/set_payload")
            || r.ends_with("/optimize") =>
        {
            Some(Role::Write)
        }
        _ => Some(Role::Read),
    }
}

/// The API key a request carries (`Authorization: Bearer` or `x-api-key`).
fn presented_key(h: &axum::http::HeaderMap) -> Option<Vec<u8>> {
    auth::bearer(
        h.get(header::AUTHORIZATION).map(|v| v.as_bytes()),
        h.get("x-api-key").map(|v| v.as_bytes()),
    )
}

/// Authentication, timeout and metrics around every request.
async fn guard(AxState(st): S, req: Request, next: Next) -> Response {
    let t0 = Instant::now();
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map_or("unmatched".to_string(), |m| m.as_str().to_string());
    let collection = req
        .uri()
        .path()
        .strip_prefix("/collections/")
        .and_then(|p| p.split('/').next())
        .filter(|n| st.registry.contains(n))
        .unwrap_or("")
        .to_string();
    if let Some(need) = role_for(req.method(), &route) {
        let key = presented_key(req.headers());
        if let Err(e) = st.keys.check(key.as_deref(), need) {
            st.metrics.rejected("unauthenticated");
            let mut r = e.into_response();
            crate::ui::security_headers(&mut r);
            st.metrics.observe(
                "http",
                &route,
                &collection,
                r.status().as_str(),
                t0.elapsed(),
            );
            return r;
        }
    }
    let method = req.method().clone();
    let timeout = st.exec.timeout() + std::time::Duration::from_millis(500);
    let mut r = match tokio::time::timeout(timeout, next.run(req)).await {
        Ok(r) => r,
        Err(_) => {
            st.metrics.rejected("timeout");
            ApiError::Timeout(timeout.as_millis() as u64).into_response()
        }
    };
    crate::ui::security_headers(&mut r);
    if r.status() == StatusCode::PAYLOAD_TOO_LARGE {
        st.metrics.rejected("body_too_large");
    }
    let elapsed = t0.elapsed();
    tracing::debug!(
        %method,
        route = %route,
        collection = %collection,
        status = r.status().as_u16(),
        elapsed_us = elapsed.as_micros() as u64,
        "http request"
    );
    st.metrics
        .observe("http", &route, &collection, r.status().as_str(), elapsed);
    r
}

/// The HTTP router.
pub fn router(st: Arc<State>) -> Router {
    Router::new()
        .route("/health", get(health))
        .route("/ready", get(ready))
        .route("/metrics", get(metrics))
        .route("/openapi.json", get(openapi))
        .route("/docs", get(docs_page))
        .route(
            "/collections",
            get(list_collections).post(create_collection),
        )
        .route(
            "/collections/{name}",
            get(describe_collection).delete(drop_collection),
        )
        .route("/collections/{name}/index", get(index_status))
        .route("/collections/{name}/optimize", post(optimize))
        .route("/collections/{name}/segments", get(segments))
        .route("/collections/{name}/scroll", post(scroll))
        .route("/whoami", get(whoami))
        .route("/ui", get(crate::ui::root))
        .route("/ui/", get(crate::ui::index))
        .route("/ui/{*file}", get(crate::ui::file))
        .route("/collections/{name}/upsert", post(upsert))
        .route("/collections/{name}/get", post(get_rows))
        .route("/collections/{name}/delete", post(delete_rows))
        .route("/collections/{name}/set_payload", post(set_payload))
        .route("/collections/{name}/count", post(count_rows))
        .route("/collections/{name}/search", post(search))
        .route("/collections/{name}/classify", post(classify))
        .fallback(not_found)
        .method_not_allowed_fallback(|| async {
            (
                StatusCode::METHOD_NOT_ALLOWED,
                Json(ErrorBody {
                    error: crate::error::ErrorDetail {
                        code: "method_not_allowed".into(),
                        message: "method not allowed on this route".into(),
                    },
                }),
            )
        })
        .layer(axum::middleware::from_fn_with_state(st.clone(), guard))
        .layer(axum::extract::DefaultBodyLimit::max(st.max_body))
        .with_state(st)
}

#[cfg(test)]
mod tests {
    /// The committed `docs/openapi.json` is what the code generates; run
    /// `cargo run -p sagitta-cli -- openapi > docs/openapi.json` after
    /// changing the API.
    #[test]
    fn committed_openapi_matches_the_code() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/openapi.json");
        let committed = std::fs::read_to_string(&path).unwrap_or_default();
        let generated = super::openapi_json();
        assert!(
            committed == generated,
            "docs/openapi.json is out of date: run `cargo run -p sagitta-cli -- openapi > docs/openapi.json`"
        );
    }
}
