//! Routes for generic objects (deployments, queues, priority classes), models, GPUs and the
//! version.

use axum::Json;
use axum::extract::{Path, Query, State};
use ferry_spec::ResourceKind;
use ferry_store::{ModelRecord, ObjectRecord};

use super::NamespaceQuery;
use crate::error::ApiError;
use crate::serving;
use crate::state::ControlPlane;

fn object_kind(kind: &str) -> Result<&'static str, ApiError> {
    match ResourceKind::from_name(kind) {
        Some(ResourceKind::TrainJob) | None => Err(ApiError::not_found(format!(
            "no resource type {kind:?}; use jobs, deployments, queues or priorityclasses"
        ))),
        Some(k) => Ok(k.as_str()),
    }
}

/// The stored object with its live status (deployments' replicas, queues' usage).
fn with_status(plane: &ControlPlane, record: ObjectRecord) -> ObjectRecord {
    crate::queue_view::with_status(plane, serving::with_status(plane, record))
}

pub(crate) async fn list(
    State(plane): State<ControlPlane>,
    Path(kind): Path<String>,
    Query(q): Query<NamespaceQuery>,
) -> Result<Json<Vec<ObjectRecord>>, ApiError> {
    let kind = object_kind(&kind)?;
    // Priority classes are named across namespaces, as a job's `spec.priority` is.
    let namespace = q.namespace.as_deref().filter(|_| kind != "PriorityClass");
    let mut records = plane.store().list_objects(kind, namespace).await?;
    if kind == "PriorityClass" {
        records.extend(crate::admission::built_in_classes(&plane, &records));
    }
    if kind == "Queue" {
        records.extend(crate::queue_view::built_in_queue(&plane, &records));
    }
    Ok(Json(
        records
            .into_iter()
            .map(|r| with_status(&plane, r))
            .collect(),
    ))
}

pub(crate) async fn get(
    State(plane): State<ControlPlane>,
    Path((ns, kind, name)): Path<(String, String, String)>,
) -> Result<Json<ObjectRecord>, ApiError> {
    let kind = object_kind(&kind)?;
    let stored = plane.store().get_object(kind, &ns, &name).await?;
    let built_in = || match kind {
        "Queue" if name == crate::admission::DEFAULT_QUEUE => {
            crate::queue_view::built_in_queue(&plane, &[])
        }
        _ => None,
    };
    stored
        .or_else(built_in)
        .map(|r| Json(with_status(&plane, r)))
        .ok_or_else(|| ApiError::not_found(format!("{kind} {ns}/{name} not found")))
}

pub(crate) async fn delete(
    State(plane): State<ControlPlane>,
    Path((ns, kind, name)): Path<(String, String, String)>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let kind = object_kind(&kind)?;
    crate::admission::check_delete(&plane, kind, &name).await?;
    if plane.store().delete_object(kind, &ns, &name).await? {
        Ok(Json(serde_json::json!({"deleted": format!("{ns}/{name}")})))
    } else {
        Err(ApiError::not_found(format!("{kind} {ns}/{name} not found")))
    }
}

pub(crate) async fn models(
    State(plane): State<ControlPlane>,
) -> Result<Json<Vec<ModelRecord>>, ApiError> {
    Ok(Json(plane.store().list_models().await?))
}

pub(crate) async fn gpus(State(plane): State<ControlPlane>) -> Json<ferry_runtime::Inventory> {
    Json(plane.inventory().clone())
}

pub(crate) async fn version(
    State(plane): State<ControlPlane>,
) -> Result<Json<serde_json::Value>, ApiError> {
    Ok(Json(serde_json::json!({
        "version": env!("CARGO_PKG_VERSION"),
        "schemaVersion": plane.store().schema_version().await?,
        "store": plane.store().location(),
        "gpus": plane.inventory().len(),
        "gateway": plane.gateway().map(|g| g.url.clone()),
    })))
}
