//! The crate's error type and its one mapping to HTTP status and OpenAI error body.
//!
//! Every failure a client can see goes through [`Error::status_and_body`], a single
//! wildcard-free match, so a new variant (here or in [`BackendError`]) forces a
//! decision about its status code.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use crate::backend::BackendError;
use crate::types::{ErrorBody, ErrorDetail};

/// Why a request failed; rendered as OpenAI's `{"error": {...}}` body.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// A field has a value the API does not accept (400, names the field).
    #[error("invalid `{param}`: {message}")]
    InvalidParam {
        /// Request field, e.g. `max_tokens` or `messages[2].content`.
        param: String,
        /// What is wrong and what would fix it.
        message: String,
    },
    /// The body is not JSON at all (400).
    #[error("the request body is not valid JSON ({message}); send a JSON object")]
    MalformedJson {
        /// The parser's message with line and column.
        message: String,
    },
    /// The body is JSON but a field has the wrong type or is missing (422).
    #[error("invalid `{path}` in the request body: {message}")]
    JsonShape {
        /// Path of the failing field, e.g. `messages[0].role`.
        path: String,
        /// What serde expected.
        message: String,
    },
    /// The body exceeds the configured limit (413).
    #[error("the request body exceeds the {limit}-byte limit; send a shorter prompt")]
    BodyTooLarge {
        /// The limit in bytes (`ServerConfig::max_body_bytes`).
        limit: usize,
    },
    /// The server's concurrency limit is reached (429).
    #[error(
        "the server already handles {limit} requests, its limit; retry later or raise \
         max_concurrent_requests"
    )]
    TooManyRequests {
        /// The limit (`ServerConfig::max_concurrent_requests`).
        limit: usize,
    },
    /// No route matches the path (404).
    #[error(
        "no route for {method} {path}; served: /v1/models, /v1/chat/completions, /v1/completions, /health, /metrics"
    )]
    UnknownRoute {
        /// HTTP method.
        method: String,
        /// Request path.
        path: String,
    },
    /// The route exists but not for this method (405).
    #[error("{method} is not allowed on {path}; use {allowed}")]
    MethodNotAllowed {
        /// HTTP method sent.
        method: String,
        /// Request path.
        path: String,
        /// Method the route takes.
        allowed: &'static str,
    },
    /// The backend refused or failed the request.
    #[error(transparent)]
    Backend(#[from] BackendError),
}

/// `Result` with the crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// Shorthand for [`Error::InvalidParam`].
    pub fn invalid(param: impl Into<String>, message: impl Into<String>) -> Self {
        Error::InvalidParam {
            param: param.into(),
            message: message.into(),
        }
    }

    /// HTTP status and OpenAI error body; the only place statuses are chosen.
    pub fn status_and_body(&self) -> (StatusCode, ErrorBody) {
        use BackendError as B;
        const INVALID: &str = "invalid_request_error";
        let (status, kind, param, code): (StatusCode, &str, Option<String>, Option<&str>) =
            match self {
                Error::InvalidParam { param, .. } => {
                    (StatusCode::BAD_REQUEST, INVALID, Some(param.clone()), None)
                }
                Error::MalformedJson { .. } => {
                    (StatusCode::BAD_REQUEST, INVALID, None, Some("invalid_json"))
                }
                Error::JsonShape { path, .. } => (
                    StatusCode::UNPROCESSABLE_ENTITY,
                    INVALID,
                    Some(path.clone()),
                    Some("invalid_type"),
                ),
                Error::BodyTooLarge { .. } => (
                    StatusCode::PAYLOAD_TOO_LARGE,
                    INVALID,
                    None,
                    Some("request_too_large"),
                ),
                Error::TooManyRequests { .. } | Error::Backend(B::Overloaded) => (
                    StatusCode::TOO_MANY_REQUESTS,
                    "rate_limit_error",
                    None,
                    Some("overloaded"),
                ),
                Error::UnknownRoute { .. } => {
                    (StatusCode::NOT_FOUND, INVALID, None, Some("unknown_url"))
                }
                Error::MethodNotAllowed { .. } => (
                    StatusCode::METHOD_NOT_ALLOWED,
                    INVALID,
                    None,
                    Some("method_not_allowed"),
                ),
                Error::Backend(B::ModelNotFound(_)) => (
                    StatusCode::NOT_FOUND,
                    INVALID,
                    Some("model".to_owned()),
                    Some("model_not_found"),
                ),
                Error::Backend(B::PromptTooLong { .. }) => (
                    StatusCode::BAD_REQUEST,
                    INVALID,
                    Some("messages".to_owned()),
                    Some("context_length_exceeded"),
                ),
                Error::Backend(B::InvalidRequest(_)) => {
                    (StatusCode::BAD_REQUEST, INVALID, None, None)
                }
                Error::Backend(B::Unavailable(_)) => (
                    StatusCode::SERVICE_UNAVAILABLE,
                    "server_error",
                    None,
                    Some("unavailable"),
                ),
                Error::Backend(B::Internal(_)) => (
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "server_error",
                    None,
                    Some("internal_error"),
                ),
            };
        let body = ErrorBody {
            error: ErrorDetail {
                message: self.to_string(),
                kind: kind.to_owned(),
                param,
                code: code.map(str::to_owned),
            },
        };
        (status, body)
    }

    /// Like [`Error::status_and_body`], with the context-length error's `param`
    /// naming the field the endpoint actually takes (`prompt` or `messages`).
    pub(crate) fn for_endpoint(self, prompt_param: &'static str) -> (StatusCode, ErrorBody) {
        let (status, mut body) = self.status_and_body();
        if body.error.code.as_deref() == Some("context_length_exceeded") {
            body.error.param = Some(prompt_param.to_owned());
        }
        (status, body)
    }
}

impl IntoResponse for Error {
    fn into_response(self) -> Response {
        let (status, body) = self.status_and_body();
        (status, axum::Json(body)).into_response()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_variant_maps_to_the_documented_status_and_type() {
        type Case = (
            Error,
            u16,
            &'static str,
            Option<&'static str>,
            Option<&'static str>,
        );
        let cases: Vec<Case> = vec![
            (
                Error::invalid("top_p", "x"),
                400,
                "invalid_request_error",
                Some("top_p"),
                None,
            ),
            (
                Error::MalformedJson {
                    message: "eof".into(),
                },
                400,
                "invalid_request_error",
                None,
                Some("invalid_json"),
            ),
            (
                Error::JsonShape {
                    path: "messages[0].role".into(),
                    message: "x".into(),
                },
                422,
                "invalid_request_error",
                Some("messages[0].role"),
                Some("invalid_type"),
            ),
            (
                Error::BodyTooLarge { limit: 10 },
                413,
                "invalid_request_error",
                None,
                Some("request_too_large"),
            ),
            (
                Error::TooManyRequests { limit: 1 },
                429,
                "rate_limit_error",
                None,
                Some("overloaded"),
            ),
            (
                BackendError::Overloaded.into(),
                429,
                "rate_limit_error",
                None,
                Some("overloaded"),
            ),
            (
                BackendError::ModelNotFound("x".into()).into(),
                404,
                "invalid_request_error",
                Some("model"),
                Some("model_not_found"),
            ),
            (
                BackendError::PromptTooLong {
                    prompt_tokens: 9,
                    max_context: 4,
                }
                .into(),
                400,
                "invalid_request_error",
                Some("messages"),
                Some("context_length_exceeded"),
            ),
            (
                BackendError::InvalidRequest("x".into()).into(),
                400,
                "invalid_request_error",
                None,
                None,
            ),
            (
                BackendError::Unavailable("x".into()).into(),
                503,
                "server_error",
                None,
                Some("unavailable"),
            ),
            (
                BackendError::Internal("x".into()).into(),
                500,
                "server_error",
                None,
                Some("internal_error"),
            ),
        ];
        for (err, status, kind, param, code) in cases {
            let (s, body) = err.status_and_body();
            assert_eq!(s.as_u16(), status, "{err:?}");
            assert_eq!(body.error.kind, kind, "{err:?}");
            assert_eq!(body.error.param.as_deref(), param, "{err:?}");
            assert_eq!(body.error.code.as_deref(), code, "{err:?}");
            assert!(!body.error.message.is_empty());
        }
    }

    #[test]
    fn context_length_param_follows_the_endpoint() {
        let err: Error = BackendError::PromptTooLong {
            prompt_tokens: 9,
            max_context: 4,
        }
        .into();
        let (_, body) = err.for_endpoint("prompt");
        assert_eq!(body.error.param.as_deref(), Some("prompt"));
        assert!(body.error.message.contains("9 tokens"));
        assert!(body.error.message.contains("4 tokens"));
    }
}
