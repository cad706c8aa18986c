//! Routes for generic objects (deployments, queues, priority classes, sweeps, cohorts), models
//! (listed, read and deleted), GPUs and the version.

use axum::Json;
use axum::extract::{Path, Query, State};
use ferry_spec::ResourceKind;
use ferry_store::{ModelRecord, ObjectRecord, StoreError};

use super::{ListQuery, doc_labels};
use crate::error::ApiError;
use crate::scope;
use crate::serving;
use crate::state::ControlPlane;

fn object_kind(kind: &str) -> Result<ResourceKind, ApiError> {
    match ResourceKind::from_name(kind) {
        Some(ResourceKind::TrainJob) | None => Err(ApiError::not_found(format!(
            "no resource type {kind:?}; use jobs, deployments, queues, priorityclasses, sweeps or \
             cohorts"
        ))),
        Some(k) => Ok(k),
    }
}

/// The namespace key of `kind`'s objects for a request naming `namespace` (`None`: the
/// cluster-wide route). Queues, priority classes and cohorts ignore it; other kinds need one.
fn namespace_key(kind: ResourceKind, namespace: Option<&str>) -> Result<&str, ApiError> {
    match namespace {
        _ if kind.is_cluster_scoped() => Ok(scope::CLUSTER),
        Some(ns) => Ok(ns),
        None => Err(ApiError::not_found(format!(
            "{} objects live in a namespace; use /api/v1/namespaces/NAMESPACE/{}/NAME",
            kind.as_str(),
            kind.plural()
        ))),
    }
}

fn not_found(kind: ResourceKind, namespace: &str, name: &str) -> ApiError {
    StoreError::NotFound {
        kind: kind.as_str().to_owned(),
        id: scope::qualified(kind, namespace, name),
    }
    .into()
}

/// The stored object with its live status (deployments' replicas, queues' usage, sweeps'
/// jobs).
async fn with_status(plane: &ControlPlane, record: ObjectRecord) -> Result<ObjectRecord, ApiError> {
    if record.kind == ResourceKind::Sweep.as_str() {
        return crate::sweep::with_status(plane, record).await;
    }
    Ok(crate::queue_view::with_status(
        plane,
        serving::with_status(plane, record),
    ))
}

/// `GET /api/v1/{kind}?namespace=NS&labelSelector=SEL`.
pub(crate) async fn list(
    State(plane): State<ControlPlane>,
    Path(kind): Path<String>,
    Query(q): Query<ListQuery>,
) -> Result<Json<Vec<ObjectRecord>>, ApiError> {
    let kind = object_kind(&kind)?;
    let selector = q.selector()?;
    // Queues, priority classes and cohorts are named across namespaces: all of them, always.
    let namespace = q.namespace.as_deref().filter(|_| !kind.is_cluster_scoped());
    let mut records = plane.store().list_objects(kind.as_str(), namespace).await?;
    if kind == ResourceKind::PriorityClass {
        records.extend(crate::admission::built_in_classes(&plane, &records));
    }
    if kind == ResourceKind::Queue {
        records.extend(crate::queue_view::built_in_queue(&plane, &records));
    }
    let mut out = Vec::with_capacity(records.len());
    for r in records
        .into_iter()
        .filter(|r| selector.matches(&doc_labels(&r.doc)))
    {
        out.push(with_status(&plane, r).await?);
    }
    Ok(Json(out))
}

/// `GET /api/v1/namespaces/{ns}/{kind}/{name}` (queues, priority classes, cohorts: any `ns`).
pub(crate) async fn get(
    State(plane): State<ControlPlane>,
    Path((ns, kind, name)): Path<(String, String, String)>,
) -> Result<Json<ObjectRecord>, ApiError> {
    find(&plane, &kind, Some(&ns), &name).await
}

/// `GET /api/v1/{kind}/{name}`: a queue, priority class or cohort.
pub(crate) async fn get_cluster_wide(
    State(plane): State<ControlPlane>,
    Path((kind, name)): Path<(String, String)>,
) -> Result<Json<ObjectRecord>, ApiError> {
    find(&plane, &kind, None, &name).await
}

/// One object; a priority class of `ferry up`'s own that no applied one replaces, and the
/// implicit `default` queue, are found too, as `list` shows them.
async fn find(
    plane: &ControlPlane,
    kind: &str,
    namespace: Option<&str>,
    name: &str,
) -> Result<Json<ObjectRecord>, ApiError> {
    let kind = object_kind(kind)?;
    let ns = namespace_key(kind, namespace)?;
    let mut record = plane.store().get_object(kind.as_str(), ns, name).await?;
    if record.is_none() {
        record = match kind {
            ResourceKind::PriorityClass => crate::admission::built_in_classes(plane, &[])
                .into_iter()
                .find(|c| c.name == name),
            ResourceKind::Queue if name == crate::admission::DEFAULT_QUEUE => {
                crate::queue_view::built_in_queue(plane, &[])
            }
            _ => None,
        };
    }
    match record {
        Some(r) => Ok(Json(with_status(plane, r).await?)),
        None => Err(not_found(kind, ns, name)),
    }
}

/// The query of a delete: `along=queue/a,cohort/b`, the other queues and cohorts the same
/// command deletes (`ferry delete -f`), so that deleting the first of two queues that share a
/// cohort is judged by what is left once both are gone.
#[derive(Debug, Default, serde::Deserialize)]
pub(crate) struct DeleteQuery {
    #[serde(default)]
    along: Option<String>,
}

impl DeleteQuery {
    /// Each `kind/name` of `along`; an unknown kind is refused, naming it.
    fn along(&self) -> Result<Vec<(ResourceKind, String)>, ApiError> {
        let Some(along) = self.along.as_deref().filter(|a| !a.is_empty()) else {
            return Ok(Vec::new());
        };
        along
            .split(',')
            .map(|item| {
                let (kind, name) = item.split_once('/').unwrap_or(("", item));
                let kind = ResourceKind::from_name(kind)
                    .filter(|k| k.is_cluster_scoped())
                    .ok_or_else(|| {
                        ApiError::bad_request(format!(
                            "along: {item:?} is not KIND/NAME of a queue, cohort or priority \
                             class (e.g. queue/nlp)"
                        ))
                    })?;
                Ok((kind, name.to_owned()))
            })
            .collect()
    }
}

/// `DELETE /api/v1/namespaces/{ns}/{kind}/{name}` (queues, priority classes, cohorts: any
/// `ns`).
pub(crate) async fn delete(
    State(plane): State<ControlPlane>,
    Path((ns, kind, name)): Path<(String, String, String)>,
    Query(q): Query<DeleteQuery>,
) -> Result<Json<serde_json::Value>, ApiError> {
    remove(&plane, &kind, Some(&ns), &name, &q.along()?).await
}

/// `DELETE /api/v1/{kind}/{name}`: a queue, priority class or cohort.
pub(crate) async fn delete_cluster_wide(
    State(plane): State<ControlPlane>,
    Path((kind, name)): Path<(String, String)>,
    Query(q): Query<DeleteQuery>,
) -> Result<Json<serde_json::Value>, ApiError> {
    remove(&plane, &kind, None, &name, &q.along()?).await
}

async fn remove(
    plane: &ControlPlane,
    kind: &str,
    namespace: Option<&str>,
    name: &str,
    along: &[(ResourceKind, String)],
) -> Result<Json<serde_json::Value>, ApiError> {
    let kind = object_kind(kind)?;
    let ns = namespace_key(kind, namespace)?;
    crate::admission::check_delete(plane, kind, name, along).await?;
    let deleted = if kind == ResourceKind::Sweep {
        crate::sweep::delete(plane, ns, name).await?
    } else {
        plane.store().delete_object(kind.as_str(), ns, name).await?
    };
    if deleted {
        Ok(Json(
            serde_json::json!({"deleted": scope::qualified(kind, ns, name)}),
        ))
    } else {
        Err(not_found(kind, ns, name))
    }
}

/// `GET /api/v1/models?labelSelector=SEL`, matched against the labels each model took from
/// the job that exported it.
pub(crate) async fn models(
    State(plane): State<ControlPlane>,
    Query(q): Query<ListQuery>,
) -> Result<Json<Vec<ModelRecord>>, ApiError> {
    let selector = q.selector()?;
    let mut models = plane.store().list_models().await?;
    models.retain(|m| selector.matches(&m.labels));
    Ok(Json(models))
}

/// `GET /api/v1/models/{name}`: one registered model.
pub(crate) async fn model(
    State(plane): State<ControlPlane>,
    Path(name): Path<String>,
) -> Result<Json<ModelRecord>, ApiError> {
    match plane.store().get_model(&name).await? {
        Some(m) => Ok(Json(m)),
        None => Err(StoreError::NotFound {
            kind: "Model".into(),
            id: name,
        }
        .into()),
    }
}

/// `DELETE /api/v1/models/{name}`: unregisters a model no deployment or unfinished job uses
/// (409 naming them otherwise) and removes its files when Ferry wrote them under
/// `$FERRY_HOME/models/`.
pub(crate) async fn delete_model(
    State(plane): State<ControlPlane>,
    Path(name): Path<String>,
) -> Result<Json<crate::models::Deleted>, ApiError> {
    Ok(Json(crate::models::delete(&plane, &name).await?))
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
