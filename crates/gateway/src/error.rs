//! The crate's one error type, and its one mapping to an HTTP status and an
//! OpenAI-style error body (`{"error": {"message", "type", "param", "code"}}`).

use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, StatusCode, header};
use serde::Serialize;

/// Everything that can go wrong in the gateway, from a config file to a request.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Error {
    /// The config file could not be read.
    #[error("cannot read the gateway config {path}: {message}")]
    ConfigRead {
        /// Path of the file.
        path: String,
        /// The OS error.
        message: String,
    },
    /// A config field (file or flag) has a value the gateway cannot use.
    #[error("invalid gateway config `{field}`: {message}")]
    Config {
        /// Field path, e.g. `backends[2].url` or `--backend`.
        field: String,
        /// What is wrong and what would fix it.
        message: String,
    },
    /// A replica URL is not `http://host:port[/prefix]`.
    #[error("invalid replica URL {url:?} for model `{model}`: {message}")]
    BadUrl {
        /// The model the replica was registered for.
        model: String,
        /// The URL as given.
        url: String,
        /// What is wrong.
        message: String,
    },
    /// No `Authorization: Bearer` header while keys are configured (401).
    #[error(
        "no API key: send `Authorization: Bearer <key>` with a key the gateway operator issued"
    )]
    MissingKey,
    /// The key is not one of the configured keys (401).
    #[error("invalid API key (ending in `{suffix}`); ask the gateway operator for a valid key")]
    InvalidKey {
        /// The last four characters of the key, for the user to recognise it.
        suffix: String,
    },
    /// The key's requests-per-minute or tokens-per-minute budget is spent (429).
    #[error(
        "rate limit reached for team `{team}`: {limit_kind} limit {limit} per minute; retry after {retry_after_s} s"
    )]
    RateLimited {
        /// Team of the key.
        team: String,
        /// `requests` or `tokens`.
        limit_kind: &'static str,
        /// The limit.
        limit: u64,
        /// Seconds until the bucket holds enough again (`Retry-After`).
        retry_after_s: u64,
    },
    /// The body is larger than `maxBodyBytes` (413).
    #[error(
        "the request body exceeds the gateway's {limit}-byte limit; send a shorter prompt or raise maxBodyBytes"
    )]
    BodyTooLarge {
        /// The limit in bytes.
        limit: usize,
    },
    /// The body is not a JSON object with a string `model` (400).
    #[error("the request body is not valid JSON ({message}); send a JSON object with a `model`")]
    MalformedJson {
        /// The parser's message with line and column.
        message: String,
    },
    /// The body reading failed (client went away or sent a broken body) (400).
    #[error("the request body could not be read: {message}")]
    BodyRead {
        /// What failed.
        message: String,
    },
    /// The request head is not valid HTTP/1.x or frames its body in a way the
    /// gateway refuses (400; the connection is closed).
    #[error("malformed HTTP request: {message}")]
    BadRequest {
        /// What is wrong.
        message: String,
    },
    /// The request head is larger than the gateway accepts (431; the connection is closed).
    #[error(
        "the request head exceeds {limit} bytes or {headers} header fields; send fewer or shorter headers"
    )]
    HeadTooLarge {
        /// Largest head in bytes.
        limit: usize,
        /// Most header fields.
        headers: usize,
    },
    /// The client sent nothing, or not the whole request, in time (408; the
    /// connection is closed).
    #[error("the request did not arrive within {timeout:?}; send it at once")]
    RequestTimeout {
        /// The timeout.
        timeout: Duration,
    },
    /// The `model` names nothing this gateway routes to (404).
    #[error("the model `{0}` does not exist; list served models with GET /v1/models")]
    UnknownModel(String),
    /// No route for this method and path (404).
    #[error(
        "no route for {method} {path}; served: GET /v1/models, POST /v1/chat/completions, /v1/completions, /v1/embeddings"
    )]
    UnknownRoute {
        /// HTTP method.
        method: String,
        /// Path.
        path: String,
    },
    /// The model is known but has no replica left to try: none registered, or all draining (503).
    #[error("no healthy replica of model `{0}`; retry later")]
    NoReplica(String),
    /// Every attempt failed before a response started (502).
    #[error("upstream replica failed for model `{model}` after {attempts} attempt(s): {last}")]
    Upstream {
        /// The model.
        model: String,
        /// Attempts made.
        attempts: u32,
        /// The last failure.
        last: String,
    },
    /// The replica sent no response head within the first-byte timeout (504).
    #[error(
        "upstream replica for model `{model}` sent nothing within {timeout:?} (first-byte timeout)"
    )]
    FirstByteTimeout {
        /// The model.
        model: String,
        /// The timeout.
        timeout: Duration,
    },
    /// The gateway is shutting down (503).
    #[error("the gateway is shutting down; retry on another gateway")]
    Draining,
}

/// `Result` with the crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Serialize)]
struct Body<'a> {
    error: Detail<'a>,
}

#[derive(Serialize)]
struct Detail<'a> {
    message: String,
    #[serde(rename = "type")]
    kind: &'a str,
    param: Option<&'a str>,
    code: Option<&'a str>,
}

impl Error {
    /// Shorthand for [`Error::Config`].
    pub fn config(field: impl Into<String>, message: impl Into<String>) -> Self {
        Error::Config {
            field: field.into(),
            message: message.into(),
        }
    }

    /// HTTP status, OpenAI `type`, `param` and `code`; the only place statuses are chosen.
    pub fn classify(&self) -> (StatusCode, &'static str, Option<&'static str>, &'static str) {
        const INVALID: &str = "invalid_request_error";
        match self {
            Error::ConfigRead { .. } | Error::Config { .. } | Error::BadUrl { .. } => (
                StatusCode::INTERNAL_SERVER_ERROR,
                "server_error",
                None,
                "config_error",
            ),
            Error::MissingKey | Error::InvalidKey { .. } => {
                (StatusCode::UNAUTHORIZED, INVALID, None, "invalid_api_key")
            }
            Error::RateLimited { .. } => (
                StatusCode::TOO_MANY_REQUESTS,
                "rate_limit_error",
                None,
                "rate_limit_exceeded",
            ),
            Error::BodyTooLarge { .. } => (
                StatusCode::PAYLOAD_TOO_LARGE,
                INVALID,
                None,
                "request_too_large",
            ),
            Error::MalformedJson { .. } | Error::BodyRead { .. } => {
                (StatusCode::BAD_REQUEST, INVALID, None, "invalid_json")
            }
            Error::BadRequest { .. } => (StatusCode::BAD_REQUEST, INVALID, None, "invalid_request"),
            Error::HeadTooLarge { .. } => (
                StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
                INVALID,
                None,
                "request_header_fields_too_large",
            ),
            Error::RequestTimeout { .. } => (
                StatusCode::REQUEST_TIMEOUT,
                INVALID,
                None,
                "request_timeout",
            ),
            Error::UnknownModel(_) => (
                StatusCode::NOT_FOUND,
                INVALID,
                Some("model"),
                "model_not_found",
            ),
            Error::UnknownRoute { .. } => (StatusCode::NOT_FOUND, INVALID, None, "unknown_url"),
            Error::NoReplica(_) | Error::Draining => (
                StatusCode::SERVICE_UNAVAILABLE,
                "server_error",
                None,
                "unavailable",
            ),
            Error::Upstream { .. } => (
                StatusCode::BAD_GATEWAY,
                "server_error",
                None,
                "upstream_error",
            ),
            Error::FirstByteTimeout { .. } => (
                StatusCode::GATEWAY_TIMEOUT,
                "server_error",
                None,
                "upstream_timeout",
            ),
        }
    }

    /// The OpenAI error body as JSON bytes.
    pub fn body(&self) -> Bytes {
        let (_, kind, param, code) = self.classify();
        let body = Body {
            error: Detail {
                message: self.to_string(),
                kind,
                param,
                code: Some(code),
            },
        };
        Bytes::from(serde_json::to_vec(&body).unwrap_or_default())
    }

    /// A complete HTTP response: status, JSON body, and `Retry-After` on 429.
    pub fn response<B: From<Bytes>>(&self) -> http::Response<B> {
        let (status, ..) = self.classify();
        let mut resp = http::Response::new(B::from(self.body()));
        *resp.status_mut() = status;
        resp.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        if let Error::RateLimited { retry_after_s, .. } = self {
            resp.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(*retry_after_s));
        }
        resp
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_and_openai_bodies() {
        let cases: Vec<(Error, u16, &str)> = vec![
            (Error::MissingKey, 401, "invalid_api_key"),
            (
                Error::RateLimited {
                    team: "a".into(),
                    limit_kind: "requests",
                    limit: 2,
                    retry_after_s: 30,
                },
                429,
                "rate_limit_exceeded",
            ),
            (Error::BodyTooLarge { limit: 9 }, 413, "request_too_large"),
            (
                Error::MalformedJson {
                    message: "eof".into(),
                },
                400,
                "invalid_json",
            ),
            (Error::UnknownModel("m".into()), 404, "model_not_found"),
            (
                Error::BadRequest {
                    message: "x".into(),
                },
                400,
                "invalid_request",
            ),
            (
                Error::HeadTooLarge {
                    limit: 9,
                    headers: 2,
                },
                431,
                "request_header_fields_too_large",
            ),
            (Error::NoReplica("m".into()), 503, "unavailable"),
            (
                Error::Upstream {
                    model: "m".into(),
                    attempts: 3,
                    last: "refused".into(),
                },
                502,
                "upstream_error",
            ),
        ];
        for (err, status, code) in cases {
            let resp: http::Response<Bytes> = err.response();
            assert_eq!(resp.status().as_u16(), status, "{err:?}");
            let v: serde_json::Value = serde_json::from_slice(resp.body()).unwrap();
            assert_eq!(v["error"]["code"], code);
            assert!(!v["error"]["message"].as_str().unwrap().is_empty());
            assert!(v["error"]["type"].is_string());
            if status == 429 {
                assert_eq!(resp.headers()[header::RETRY_AFTER], "30");
            } else {
                assert!(resp.headers().get(header::RETRY_AFTER).is_none());
            }
        }
    }
}
