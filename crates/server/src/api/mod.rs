//! The REST API: JSON over HTTP, one module per resource family.

mod apply;
mod jobs;
mod objects;
mod openapi;
#[cfg(test)]
pub(crate) mod tests;

use axum::Router;
use axum::routing::{get, post};

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

/// `?namespace=` filter shared by list routes.
#[derive(Debug, serde::Deserialize)]
pub(crate) struct NamespaceQuery {
    pub(crate) namespace: Option<String>,
}
