//! The control plane's error, and its one mapping to HTTP statuses and bodies.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use ferry_spec::{FieldError, SpecError};
use ferry_store::StoreError;
use serde::{Deserialize, Serialize};

/// An error the API returns: a status, a stable code, a one-line message and the
/// field problems when the input was invalid.
#[derive(Debug, Clone, thiserror::Error, Serialize, Deserialize)]
#[error("{message}")]
pub struct ApiError {
    /// HTTP status code.
    pub status: u16,
    /// Stable machine-readable code (`invalid`, `not_found`, `already_exists`, …).
    pub code: String,
    /// One line for people, naming the field or object and the fix.
    pub message: String,
    /// Each field problem when `code` is `invalid`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub problems: Vec<Problem>,
}

/// One field problem in an [`ApiError`].
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Problem {
    /// Dotted field path.
    pub field: String,
    /// What is wrong and the fix.
    pub message: String,
}

impl ApiError {
    fn new(status: StatusCode, code: &str, message: impl Into<String>) -> Self {
        Self {
            status: status.as_u16(),
            code: code.to_owned(),
            message: message.into(),
            problems: Vec::new(),
        }
    }

    /// 500: something on the server side failed.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", message)
    }

    /// 404: no such object.
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, "not_found", message)
    }

    /// 409: the request conflicts with the current state.
    pub fn conflict(message: impl Into<String>) -> Self {
        Self::new(StatusCode::CONFLICT, "conflict", message)
    }

    /// 422: the input is well-formed but some fields are wrong.
    pub fn invalid(source: &str, problems: Vec<FieldError>) -> Self {
        let lines: Vec<String> = problems.iter().map(ToString::to_string).collect();
        let mut e = Self::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid",
            format!("{source}: {}", lines.join("; ")),
        );
        e.problems = problems
            .into_iter()
            .map(|p| Problem {
                field: p.path,
                message: p.message,
            })
            .collect();
        e
    }

    /// 400: the body is not even well-formed.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "bad_request", message)
    }
}

impl From<SpecError> for ApiError {
    fn from(e: SpecError) -> Self {
        match e {
            SpecError::Syntax { .. } => ApiError::bad_request(e.to_string()),
            SpecError::Invalid {
                source_name,
                problems,
            } => ApiError::invalid(&source_name, problems),
            SpecError::Documents(_) => {
                let problems = e.problems().into_iter().cloned().collect();
                let mut api = ApiError::invalid("", problems);
                api.message = e.to_string();
                api
            }
        }
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        let (status, code) = match &e {
            StoreError::NotFound { .. } => (StatusCode::NOT_FOUND, "not_found"),
            StoreError::AlreadyExists { .. } => (StatusCode::CONFLICT, "already_exists"),
            StoreError::Conflict { .. } => (StatusCode::CONFLICT, "conflict"),
            StoreError::IllegalTransition { .. } => (StatusCode::CONFLICT, "illegal_transition"),
            StoreError::NotDeletable { .. } => (StatusCode::CONFLICT, "not_deletable"),
            StoreError::InvalidInput { .. } => (StatusCode::UNPROCESSABLE_ENTITY, "invalid"),
            StoreError::Corrupt { .. }
            | StoreError::Database { .. }
            | StoreError::Migration { .. }
            | StoreError::Io { .. } => (StatusCode::INTERNAL_SERVER_ERROR, "store"),
        };
        ApiError::new(status, code, e.to_string())
    }
}

impl From<ferry_runtime::RuntimeError> for ApiError {
    fn from(e: ferry_runtime::RuntimeError) -> Self {
        ApiError::internal(e.to_string())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        (status, axum::Json(serde_json::json!({ "error": self }))).into_response()
    }
}
