//! The HTTP client for the control plane's REST API.

use anyhow::{Context, anyhow};
use reqwest::{Method, Response};
use serde::de::DeserializeOwned;
use serde_json::Value;

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
        self.answer(req).await
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
        let message = serde_json::from_str::<Value>(&text)
            .ok()
            .and_then(|v| v["error"]["message"].as_str().map(str::to_owned))
            .unwrap_or_else(|| format!("control plane answered {status}: {text}"));
        Err(anyhow!(message))
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
