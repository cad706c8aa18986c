//! `POST /api/v1/apply`: validate every document first, store them only if all are
//! valid, so bad input never leaves anything behind.

use axum::Json;
use axum::extract::{Query, State};
use axum::http::HeaderMap;
use ferry_spec::{FieldError, Resource, parse_value};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::engines::adapter_for;
use crate::error::ApiError;
use crate::state::ControlPlane;

/// Options of an apply request.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ApplyQuery {
    /// Validate only; store nothing.
    #[serde(default)]
    dry_run: bool,
}

/// What happened to one applied document.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Applied {
    kind: String,
    namespace: String,
    name: String,
    uid: Option<String>,
    /// `created`, `configured` (updated) or `valid` (dry run).
    action: String,
}

pub(crate) async fn apply(
    State(plane): State<ControlPlane>,
    Query(query): Query<ApplyQuery>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Result<Json<Vec<Applied>>, ApiError> {
    let source = headers
        .get("x-ferry-source")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("request body")
        .to_owned();
    let value: Value = serde_json::from_slice(&body)
        .map_err(|e| ApiError::bad_request(format!("{source}: body is not valid JSON: {e}")))?;
    let docs = match value {
        Value::Array(items) => items,
        other => vec![other],
    };
    let mut resources = Vec::with_capacity(docs.len());
    for doc in docs {
        let resource = parse_value(doc, &source)?;
        check_against_cluster(&plane, &resource, &source)?;
        resources.push(resource);
    }
    // Queues, priorities and gang sizes are checked together: a job may name a queue
    // applied in the same batch.
    let problems = crate::admission::check_batch(&plane, &resources).await?;
    if !problems.is_empty() {
        let many = resources.len() > 1;
        let problems = problems
            .into_iter()
            .map(|(i, mut p)| {
                if many {
                    let m = resources[i].metadata();
                    p.message =
                        format!("{} {}: {}", resources[i].kind().as_str(), m.name, p.message);
                }
                p
            })
            .collect();
        return Err(ApiError::invalid(&source, problems));
    }
    // Duplicate names are refused before anything is stored.
    for r in &resources {
        if let Resource::TrainJob(job) = r {
            let m = &job.metadata;
            if plane
                .store()
                .get_job(&m.namespace, &m.name)
                .await?
                .is_some()
            {
                return Err(ferry_store::StoreError::AlreadyExists {
                    kind: "TrainJob".into(),
                    namespace: m.namespace.clone(),
                    name: m.name.clone(),
                }
                .into());
            }
        }
    }
    let mut out = Vec::with_capacity(resources.len());
    for r in resources {
        let meta = r.metadata().clone();
        let kind = r.kind().as_str().to_owned();
        if query.dry_run {
            out.push(Applied {
                kind,
                namespace: meta.namespace,
                name: meta.name,
                uid: None,
                action: "valid".into(),
            });
            continue;
        }
        let (uid, action) = match &r {
            Resource::TrainJob(job) => {
                let rec = plane.store().create_job(job, "Created").await?;
                (rec.uid, "created")
            }
            other => {
                let existed = plane
                    .store()
                    .get_object(&kind, &meta.namespace, &meta.name)
                    .await?
                    .is_some();
                let rec = plane
                    .store()
                    .put_object(&kind, &meta.namespace, &meta.name, &other.to_value(), false)
                    .await?;
                (rec.uid, if existed { "configured" } else { "created" })
            }
        };
        out.push(Applied {
            kind,
            namespace: meta.namespace,
            name: meta.name,
            uid: Some(uid),
            action: action.into(),
        });
    }
    plane.wake();
    Ok(Json(out))
}

/// Checks that need the control plane's view: engines this build has, GPUs that exist.
fn check_against_cluster(
    plane: &ControlPlane,
    resource: &Resource,
    source: &str,
) -> Result<(), ApiError> {
    let Resource::TrainJob(job) = resource else {
        return Ok(());
    };
    let mut problems: Vec<FieldError> = Vec::new();
    match adapter_for(job) {
        Ok(adapter) => problems.extend(adapter.validate(job)),
        Err(e) => problems.push(e),
    }
    let need = job.spec.resources.total_gpus() as usize;
    let have = plane.inventory().len();
    if need > have {
        problems.push(FieldError::new(
            "spec.resources.gpusPerNode",
            format!(
                "the job needs {need} GPUs (nodes × gpusPerNode) but this control plane has {have}; ask for at most {have} or start `ferry up --gpus {need}`"
            ),
        ));
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(ApiError::invalid(source, problems))
    }
}
