//! The HTTP client for the control plane's REST API.

use anyhow::{Context, anyhow};
use reqwest::{Method, Response};
use serde::de::DeserializeOwned;
use serde_json::Value;

/// The control plane's refusal of a request: its one-line message, and each field problem
/// (`field: message`) for `report` to list.
#[derive(Debug)]
pub struct Refusal {
    /// The server's message.
    pub message: String,
    /// What the request's body was read from (`x-ferry-source`), when it had one.
    pub source: Option<String>,
    /// Each field problem, `field: message` (empty unless the input was invalid).
    pub problems: Vec<String>,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Refusal {}

/// Talks to one control plane.
pub struct Client {
    base: String,
    http: reqwest::Client,
}

impl Client {
    /// A client for the control plane at `base` (e.g. `http://127.0.0.1:7070`).
    pub fn new(base: &str) -> Self {
        Self {
            base: base.trim_end_matches('/').to_owned(),
            http: reqwest::Client::new(),
        }
    }

    /// Sends a request and returns the response when it succeeded, or the server's
    /// one-line error otherwise.
    pub async fn send(
        &self,
        method: Method,
        path: &str,
        body: Option<(&Value, &str)>,
    ) -> anyhow::Result<Response> {
        let url = format!("{}{path}", self.base);
        let mut req = self.http.request(method, &url);
        if let Some((json, source)) = body {
            req = req.json(json).header("x-ferry-source", source);
        }
        self.answer(req)
            .await
            .map_err(|e| match e.downcast::<Refusal>() {
                Ok(mut refusal) => {
                    refusal.source = body.map(|(_, source)| source.to_owned());
                    refusal.into()
                }
                Err(e) => e,
            })
    }

    /// The response to `req` when it succeeded, or the server's one-line error otherwise.
    async fn answer(&self, req: reqwest::RequestBuilder) -> anyhow::Result<Response> {
        let resp = req.send().await.map_err(|e| {
            let cause = if e.is_connect() {
                "connection refused".to_owned()
            } else {
                e.to_string()
            };
            anyhow!(
                "cannot reach the control plane at {} ({cause}); start it with `ferry up` or set FERRY_URL",
                self.base
            )
        })?;
        if resp.status().is_success() {
            return Ok(resp);
        }
        let status = resp.status();
        let text = resp.text().await.unwrap_or_default();
        let body = serde_json::from_str::<Value>(&text).unwrap_or_default();
        let message = body["error"]["message"]
            .as_str()
            .map(str::to_owned)
            .unwrap_or_else(|| format!("control plane answered {status}: {text}"));
        let problems = (body["error"]["problems"].as_array().into_iter().flatten())
            .map(|p| {
                let (field, message) = (p["field"].as_str(), p["message"].as_str());
                match (field.unwrap_or_default(), message.unwrap_or_default()) {
                    ("", message) => message.to_owned(),
                    (field, message) => format!("{field}: {message}"),
                }
            })
            .collect();
        Err(Refusal {
            message,
            source: None,
            problems,
        }
        .into())
    }

    /// GET and decode JSON.
    pub async fn get<T: DeserializeOwned>(&self, path: &str) -> anyhow::Result<T> {
        self.send(Method::GET, path, None)
            .await?
            .json()
            .await
            .with_context(|| format!("unreadable answer from {path}"))
    }

    /// GET with query parameters, each percent-encoded (a label selector holds `=`, `!`, `,`,
    /// spaces and parentheses), and decode JSON.
    pub async fn get_query<T: DeserializeOwned>(
        &self,
        path: &str,
        query: &[(&str, &str)],
    ) -> anyhow::Result<T> {
        let req = self.http.get(format!("{}{path}", self.base)).query(query);
        self.answer(req)
            .await?
            .json()
            .await
            .with_context(|| format!("unreadable answer from {path}"))
    }

    /// POST a JSON body and decode the JSON answer.
    pub async fn post<T: DeserializeOwned>(
        &self,
        path: &str,
        body: &Value,
        source: &str,
    ) -> anyhow::Result<T> {
        self.send(Method::POST, path, Some((body, source)))
            .await?
            .json()
            .await
            .with_context(|| format!("unreadable answer from {path}"))
    }

    /// DELETE and decode the JSON answer.
    pub async fn delete(&self, path: &str) -> anyhow::Result<Value> {
        self.send(Method::DELETE, path, None)
            .await?
            .json()
            .await
            .with_context(|| format!("unreadable answer from {path}"))
    }
}
