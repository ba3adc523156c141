//! The one error type of the server, and its mapping onto HTTP statuses and
//! gRPC (Flight) codes: one exhaustive `match` per edge.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use sagitta_index::IndexError;
use sagitta_store::StoreError;
use serde::Serialize;

/// Everything a request can fail with. Variants are user errors unless
/// documented otherwise; internal errors are logged in full and answered
/// with a generic message (no paths, no internals).
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// User error: the request is malformed or a value is out of range.
    #[error("{0}")]
    BadRequest(String),
    /// User error: the request body is larger than the server accepts.
    #[error("request body too large: {0}")]
    TooLarge(String),
    /// User error: no collection of this name.
    #[error("collection {0:?} not found")]
    NotFound(String),
    /// Something other than a collection exists already; the message says
    /// what.
    #[error("{0} already exists")]
    Exists(String),
    /// Something other than a collection is not there (an id, a
    /// namespace); the message says what.
    #[error("{0}")]
    Missing(String),
    /// An operation this server does not offer; the message says why and
    /// what to use instead.
    #[error("{0}")]
    Unsupported(String),
    /// User error: a collection of this name already exists.
    #[error("collection {0:?} already exists")]
    Conflict(String),
    /// User error: no API key, or an unknown one.
    #[error("missing or invalid API key")]
    Unauthenticated,
    /// User error: the key's role does not allow the operation.
    #[error("this API key may not {0}")]
    Forbidden(&'static str),
    /// Overload: the queue for this kind of work is full; retry later.
    #[error("server busy: {0} queue is full, retry later")]
    Busy(&'static str),
    /// Overload: the request did not finish within the server's timeout.
    #[error("request timed out after {0} ms")]
    Timeout(u64),
    /// The server is shutting down and takes no new work.
    #[error("server is shutting down")]
    ShuttingDown,
    /// A store error; user errors keep their message, environment and data
    /// errors become a generic message.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Internal error (a bug): logged, answered generically.
    #[error("internal error")]
    Internal(String),
}

impl From<sagitta_store::PayloadError> for ApiError {
    fn from(e: sagitta_store::PayloadError) -> Self {
        ApiError::Store(StoreError::Payload(e))
    }
}

impl From<IndexError> for ApiError {
    fn from(e: IndexError) -> Self {
        ApiError::Store(StoreError::Index(e))
    }
}

/// The class of an error: decides the HTTP status and the gRPC code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// 400 / INVALID_ARGUMENT.
    Invalid,
    /// 413 / INVALID_ARGUMENT.
    TooLarge,
    /// 404 / NOT_FOUND.
    NotFound,
    /// 409 / ALREADY_EXISTS.
    Conflict,
    /// 401 / UNAUTHENTICATED.
    Unauthenticated,
    /// 403 / PERMISSION_DENIED.
    Forbidden,
    /// 503 + Retry-After / UNAVAILABLE.
    Unavailable,
    /// 504 / DEADLINE_EXCEEDED.
    Timeout,
    /// 500 / INTERNAL.
    Internal,
    /// 501 / UNIMPLEMENTED.
    Unsupported,
    /// 507 Insufficient Storage / RESOURCE_EXHAUSTED: the disk under a
    /// collection is full; nothing of the request was written.
    StorageFull,
}

impl ApiError {
    /// The class of this error.
    pub fn class(&self) -> Class {
        match self {
            ApiError::BadRequest(_) => Class::Invalid,
            ApiError::TooLarge(_) => Class::TooLarge,
            ApiError::NotFound(_) | ApiError::Missing(_) => Class::NotFound,
            ApiError::Exists(_) => Class::Conflict,
            ApiError::Unsupported(_) => Class::Unsupported,
            ApiError::Conflict(_) => Class::Conflict,
            ApiError::Unauthenticated => Class::Unauthenticated,
            ApiError::Forbidden(_) => Class::Forbidden,
            ApiError::Busy(_) | ApiError::ShuttingDown => Class::Unavailable,
            ApiError::Timeout(_) => Class::Timeout,
            ApiError::Internal(_) => Class::Internal,
            ApiError::Store(e) if e.is_disk_full() => Class::StorageFull,
            ApiError::Store(e) => match e {
                StoreError::Index(_)
                | StoreError::Payload(_)
                | StoreError::Config(_)
                | StoreError::InvalidText(_)
                | StoreError::InvalidQuery(_)
                | StoreError::InvalidId { .. }
                | StoreError::DuplicateId { .. } => Class::Invalid,
                StoreError::ReadOnly { .. }
                | StoreError::AlreadyExists { .. }
                | StoreError::IdCollision { .. } => Class::Conflict,
                StoreError::NotACollection { .. } | StoreError::KeyNotFound { .. } => {
                    Class::NotFound
                }
                StoreError::Stalled { .. } => Class::Unavailable,
                StoreError::Io { .. }
                | StoreError::Optimizer(_)
                | StoreError::Model(_)
                | StoreError::Corrupt { .. }
                | StoreError::UnsupportedVersion { .. }
                | StoreError::Locked { .. } => Class::Internal,
            },
        }
    }

    /// The message a client sees: user errors verbatim, internal ones
    /// generic (the detail goes to the log).
    pub fn public_message(&self) -> String {
        match self.class() {
            Class::StorageFull => {
                // The detail names server paths: the log has it.
                tracing::warn!(error = %self, "storage full");
                "storage full: the disk under this collection has no room left; nothing of this \
                 request was written (retry once space is freed)"
                    .into()
            }
            Class::Internal => {
                tracing::error!(error = %self, detail = ?self, "internal error");
                match self {
                    ApiError::Store(StoreError::Corrupt { .. }) => {
                        "internal error: stored data failed validation (see the server log)".into()
                    }
                    ApiError::Store(StoreError::Io { .. }) => {
                        "internal error: storage I/O failed (see the server log)".into()
                    }
                    _ => "internal error (see the server log)".into(),
                }
            }
            _ => self.to_string(),
        }
    }

    /// A stable machine-readable code.
    pub fn code(&self) -> &'static str {
        match self.class() {
            Class::Invalid => "invalid_argument",
            Class::TooLarge => "too_large",
            Class::NotFound => "not_found",
            Class::Conflict => "already_exists",
            Class::Unauthenticated => "unauthenticated",
            Class::Forbidden => "permission_denied",
            Class::Unavailable => "unavailable",
            Class::Timeout => "deadline_exceeded",
            Class::Internal => "internal",
            Class::Unsupported => "unimplemented",
            Class::StorageFull => "resource_exhausted",
        }
    }

    /// The HTTP status.
    pub fn status(&self) -> StatusCode {
        match self.class() {
            Class::Invalid => StatusCode::BAD_REQUEST,
            Class::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            Class::NotFound => StatusCode::NOT_FOUND,
            Class::Conflict => StatusCode::CONFLICT,
            Class::Unauthenticated => StatusCode::UNAUTHORIZED,
            Class::Forbidden => StatusCode::FORBIDDEN,
            Class::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
            Class::Timeout => StatusCode::GATEWAY_TIMEOUT,
            Class::Internal => StatusCode::INTERNAL_SERVER_ERROR,
            Class::Unsupported => StatusCode::NOT_IMPLEMENTED,
            Class::StorageFull => StatusCode::INSUFFICIENT_STORAGE,
        }
    }

    /// The gRPC status for Flight.
    pub fn to_status(&self) -> tonic::Status {
        let msg = self.public_message();
        match self.class() {
            Class::Invalid | Class::TooLarge => tonic::Status::invalid_argument(msg),
            Class::NotFound => tonic::Status::not_found(msg),
            Class::Conflict => tonic::Status::already_exists(msg),
            Class::Unauthenticated => tonic::Status::unauthenticated(msg),
            Class::Forbidden => tonic::Status::permission_denied(msg),
            Class::Unavailable => tonic::Status::unavailable(msg),
            Class::Timeout => tonic::Status::deadline_exceeded(msg),
            Class::Internal => tonic::Status::internal(msg),
            Class::Unsupported => tonic::Status::unimplemented(msg),
            Class::StorageFull => tonic::Status::resource_exhausted(msg),
        }
    }
}

impl From<ApiError> for tonic::Status {
    fn from(e: ApiError) -> Self {
        e.to_status()
    }
}

/// The JSON body of every HTTP error.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ErrorBody {
    /// The error.
    pub error: ErrorDetail,
}

/// What went wrong.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ErrorDetail {
    /// Stable code: invalid_argument, too_large, not_found, already_exists,
    /// unauthenticated, permission_denied, unavailable, deadline_exceeded,
    /// resource_exhausted (disk full), internal, unimplemented.
    pub code: String,
    /// Human-readable message.
    pub message: String,
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status();
        let body = ErrorBody {
            error: ErrorDetail {
                code: self.code().into(),
                message: self.public_message(),
            },
        };
        let mut r = (status, axum::Json(body)).into_response();
        if status == StatusCode::SERVICE_UNAVAILABLE {
            r.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        if status == StatusCode::UNAUTHORIZED {
            r.headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        r
    }
}

/// Result alias of the server.
pub type ApiResult<T> = Result<T, ApiError>;
