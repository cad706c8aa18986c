//! The REST API: JSON over HTTP, one module per resource family.

mod apply;
mod jobs;
mod objects;
mod openapi;
#[cfg(test)]
pub(crate) mod tests;

use std::collections::BTreeMap;

use axum::Router;
use axum::routing::{get, post};
use ferry_spec::LabelSelector;

use crate::error::ApiError;
use crate::state::ControlPlane;

/// The control plane's HTTP routes.
pub fn router(plane: ControlPlane) -> Router {
    Router::new()
        .route(
            "/healthz",
            get(|| async { axum::Json(serde_json::json!({"ok": true})) }),
        )
        .route("/version", get(objects::version))
        .route("/openapi.json", get(openapi::document))
        .route("/api/v1/apply", post(apply::apply))
        .route("/api/v1/jobs", get(jobs::list))
        .route(
            "/api/v1/namespaces/{ns}/jobs/{name}",
            get(jobs::get).delete(jobs::delete),
        )
        .route(
            "/api/v1/namespaces/{ns}/jobs/{name}/events",
            get(jobs::events),
        )
        .route("/api/v1/namespaces/{ns}/jobs/{name}/logs", get(jobs::logs))
        .route(
            "/api/v1/namespaces/{ns}/jobs/{name}/metrics",
            get(jobs::metrics),
        )
        .route(
            "/api/v1/namespaces/{ns}/jobs/{name}/cancel",
            post(jobs::cancel),
        )
        .route(
            "/api/v1/namespaces/{ns}/jobs/{name}/suspend",
            post(jobs::suspend),
        )
        .route(
            "/api/v1/namespaces/{ns}/jobs/{name}/resume",
            post(jobs::resume),
        )
        .route("/api/v1/gpus", get(objects::gpus))
        .route("/api/v1/models", get(objects::models))
        .route(
            "/api/v1/models/{name}",
            get(objects::model).delete(objects::delete_model),
        )
        .route("/api/v1/{kind}", get(objects::list))
        .route(
            "/api/v1/{kind}/{name}",
            get(objects::get_cluster_wide).delete(objects::delete_cluster_wide),
        )
        .route(
            "/api/v1/namespaces/{ns}/{kind}/{name}",
            get(objects::get).delete(objects::delete),
        )
        .with_state(plane)
}

/// `?namespace=` and `?labelSelector=`, the filters every list route takes.
#[derive(Debug, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ListQuery {
    /// Only this namespace's objects (ignored where a kind is named across namespaces).
    pub(crate) namespace: Option<String>,
    /// Only the objects whose labels match, in Kubernetes' selector syntax.
    label_selector: Option<String>,
}

impl ListQuery {
    /// The `labelSelector` parsed (an absent one selects everything); one that does not parse
    /// is a 400 whose message is the parse error.
    pub(crate) fn selector(&self) -> Result<LabelSelector, ApiError> {
        match &self.label_selector {
            None => Ok(LabelSelector::default()),
            Some(text) => {
                LabelSelector::parse(text).map_err(|e| ApiError::bad_request(e.to_string()))
            }
        }
    }
}

/// The labels of a stored document (`metadata.labels`; none when it has none).
pub(crate) fn doc_labels(doc: &serde_json::Value) -> BTreeMap<String, String> {
    serde_json::from_value(doc["metadata"]["labels"].clone()).unwrap_or_default()
}
