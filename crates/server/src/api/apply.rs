//! `POST /api/v1/apply`: validate every document first, store them only if all are
//! valid, so bad input never leaves anything behind.

use axum::Json;
use axum::extract::{Query, State};
use axum::http::HeaderMap;
use std::collections::BTreeMap;

use ferry_spec::{FieldError, Resource, SweepJob, parse_values};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::engines::adapter_for;
use crate::error::ApiError;
use crate::scope;
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
    /// Absent for kinds named across namespaces (queues, priority classes, cohorts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    namespace: Option<String>,
    name: String,
    uid: Option<String>,
    /// `created`, `configured` (updated), `unchanged` (a sweep applied again as it is) or
    /// `valid` (dry run).
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
    // Each sweep's jobs, by the sweep's place in `resources`.
    let mut sweep_jobs: Vec<(usize, Vec<SweepJob>)> = Vec::new();
    // Every document's problems, by its place, so a batch reports them all at once.
    let mut problems: Vec<(usize, FieldError)> = Vec::new();
    for resource in parse_values(docs, &source)? {
        let doc = resources.len();
        let found = match &resource {
            Resource::TrainJob(job) => job_problems(&plane, job),
            Resource::Sweep(sweep) => match sweep.expand() {
                Ok(jobs) => {
                    let found = sweep.job_problems(jobs.iter().flat_map(|j| {
                        job_problems(&plane, &j.job)
                            .into_iter()
                            .map(|p| (j.index, p))
                    }));
                    sweep_jobs.push((doc, jobs));
                    found
                }
                Err(expanding) => expanding,
            },
            _ => Vec::new(),
        };
        problems.extend(found.into_iter().map(|p| (doc, p)));
        resources.push(resource);
    }
    check_names(&resources, &sweep_jobs)?;
    // Queues, priorities and gang sizes are checked together: a job may name a queue
    // applied in the same batch, and a sweep's jobs are checked as the jobs they are.
    let mut checked = resources.clone();
    let mut origins: Vec<(usize, usize)> = Vec::new();
    for (doc, jobs) in &sweep_jobs {
        for job in jobs {
            checked.push(Resource::TrainJob(job.job.clone()));
            origins.push((*doc, job.index));
        }
    }
    let found = crate::admission::check_batch(&plane, &checked).await?;
    let mut of_sweeps: BTreeMap<usize, Vec<(usize, FieldError)>> = BTreeMap::new();
    for (i, p) in found {
        match i.checked_sub(resources.len()).map(|j| origins[j]) {
            Some((doc, index)) => of_sweeps.entry(doc).or_default().push((index, p)),
            None => problems.push((i, p)),
        }
    }
    for (doc, found) in of_sweeps {
        if let Resource::Sweep(sweep) = &resources[doc] {
            problems.extend(sweep.job_problems(found).into_iter().map(|p| (doc, p)));
        }
    }
    if !problems.is_empty() {
        problems.sort_by_key(|(i, _)| *i);
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
    // A job that exists may only have its time limits and `spec.suspend` changed; anything
    // else is refused before anything is stored.
    let mut limit_changes = Vec::with_capacity(resources.len());
    for r in &resources {
        limit_changes.push(match r {
            Resource::TrainJob(job) => spec_change(&plane, job).await?,
            _ => None,
        });
    }
    // A sweep that exists may only be applied again unchanged.
    let mut sweep_applies = BTreeMap::new();
    for (doc, jobs) in sweep_jobs {
        if let Resource::Sweep(sweep) = &resources[doc] {
            sweep_applies.insert(doc, crate::sweep::plan_apply(&plane, sweep, jobs).await?);
        }
    }
    // A model deleted meanwhile either sees these users and is refused, or is gone first.
    let _storing = plane.storing_model_users().await;
    let mut out = Vec::with_capacity(resources.len());
    for (doc, (r, change)) in resources.into_iter().zip(limit_changes).enumerate() {
        let meta = r.metadata().clone();
        let scope = r.kind();
        let kind = scope.as_str().to_owned();
        if query.dry_run {
            out.push(Applied {
                kind,
                namespace: scope::reported_namespace(scope, meta.namespace),
                name: meta.name,
                uid: None,
                action: "valid".into(),
            });
            continue;
        }
        let (uid, action) = match (&r, change) {
            (Resource::TrainJob(job), Some(change)) => {
                let rec = change.store(&plane, job).await?;
                (rec.uid, "configured")
            }
            (Resource::TrainJob(job), None) => {
                let rec = plane.store().create_job(job, "Created").await?;
                (rec.uid, "created")
            }
            (Resource::Sweep(sweep), _) => {
                let apply = sweep_applies.remove(&doc).ok_or_else(|| {
                    ApiError::internal(format!("sweep {} was not planned", meta.name))
                })?;
                crate::sweep::store(&plane, sweep, apply).await?
            }
            (other, _) => {
                // Queues, priority classes and cohorts: one of each name, whatever the
                // namespace; deployments per namespace.
                let namespace = scope::namespace_key(scope, &meta.namespace);
                let existed = plane
                    .store()
                    .get_object(&kind, namespace, &meta.name)
                    .await?
                    .is_some();
                let doc = scope::stored_doc(scope, other.to_value());
                let rec = plane
                    .store()
                    .put_object(&kind, namespace, &meta.name, &doc, false)
                    .await?;
                (rec.uid, if existed { "configured" } else { "created" })
            }
        };
        out.push(Applied {
            kind,
            namespace: scope::reported_namespace(scope, meta.namespace),
            name: meta.name,
            uid: Some(uid),
            action: action.into(),
        });
    }
    plane.wake();
    Ok(Json(out))
}

/// Refuses a batch that names one job twice, itself or through its sweeps' jobs (`a-1` and
/// sweep `a`'s second job), before anything is stored.
fn check_names(
    resources: &[Resource],
    sweep_jobs: &[(usize, Vec<SweepJob>)],
) -> Result<(), ApiError> {
    let mut seen: BTreeMap<(&str, &str), String> = BTreeMap::new();
    let jobs = resources
        .iter()
        .filter_map(|r| match r {
            Resource::TrainJob(job) => {
                Some((&job.metadata, format!("TrainJob {}", job.metadata.name)))
            }
            _ => None,
        })
        .chain(sweep_jobs.iter().flat_map(|(doc, jobs)| {
            let sweep = &resources[*doc].metadata().name;
            jobs.iter()
                .map(move |j| (&j.job.metadata, format!("sweep {sweep}'s job {}", j.index)))
        }));
    for (meta, what) in jobs {
        if let Some(first) = seen.insert((&meta.namespace, &meta.name), what.clone()) {
            return Err(ApiError::conflict(format!(
                "job {}/{} is named twice in this batch ({first} and {what}); rename one",
                meta.namespace, meta.name
            )));
        }
    }
    Ok(())
}

/// The problems of one job that need the control plane's view: its engine's own checks
/// (engines this build has), and GPUs that exist.
fn job_problems(plane: &ControlPlane, job: &ferry_spec::TrainJob) -> Vec<FieldError> {
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
    problems
}

/// The fields of a stored job's spec that `ferry apply` may change: its time limits, which a
/// user raises when a long job needs more than was first asked, and `suspend`, which holds or
/// releases it.
const CHANGEABLE: [&str; 3] = ["maxRuntimeSeconds", "maxTotalRuntimeSeconds", "suspend"];

/// What `ferry apply` changes on a stored job that has not ended.
pub(crate) struct SpecChange {
    old: ferry_store::JobRecord,
    /// The changed time limits, for the event (`spec.maxRuntimeSeconds: 60 s -> 90 s`); empty
    /// when none changed.
    limits: String,
}

impl SpecChange {
    /// Stores `job`'s spec: with the phase change a changed `spec.suspend` asks for (suspended
    /// or resumed, `crate::suspend`), or as a plain spec change.
    async fn store(
        self,
        plane: &ControlPlane,
        job: &ferry_spec::TrainJob,
    ) -> Result<ferry_store::JobRecord, ApiError> {
        let old = &self.old;
        let suspended = old.phase == ferry_spec::JobPhase::Suspended;
        let also = if self.limits.is_empty() {
            String::new()
        } else {
            format!("; {}", self.limits)
        };
        let spec = Some(job.spec.clone());
        let rec = if job.spec.suspend && !suspended {
            let by = format!("suspended by ferry apply (spec.suspend: true){also}");
            crate::suspend::suspend(plane, old, spec, &by).await?
        } else if !job.spec.suspend && suspended && crate::suspend::still_stopping(plane, old) {
            let by = format!("resume requested by ferry apply (spec.suspend: false){also}");
            crate::suspend::request_resume(plane, old, job.spec.clone(), &by).await?
        } else if !job.spec.suspend && suspended {
            let by = format!("resumed by ferry apply (spec.suspend: false){also}");
            crate::suspend::resume(plane, old, spec, &by).await?
        } else {
            let (reason, message) = if self.limits.is_empty() {
                let s = job.spec.suspend;
                ("SpecChanged", format!("spec.suspend: {} -> {s}", !s))
            } else {
                ("LimitsChanged", self.limits)
            };
            plane
                .store()
                .replace_spec(&old.uid, old.phase, job, reason, &message)
                .await?
        };
        Ok(rec)
    }
}

/// For a job whose name is taken: the change to store when `job` differs from it only in its
/// time limits and `spec.suspend` and it has not ended; `None` when the name is free; an error
/// naming what may not change otherwise (an identical spec is a duplicate, as before).
async fn spec_change(
    plane: &ControlPlane,
    job: &ferry_spec::TrainJob,
) -> Result<Option<SpecChange>, ApiError> {
    let m = &job.metadata;
    let Some(old) = plane.store().get_job(&m.namespace, &m.name).await? else {
        return Ok(None);
    };
    let (before, after) = (spec_fields(&old.job.spec), spec_fields(&job.spec));
    let mut keys: Vec<&String> = before.keys().chain(after.keys()).collect();
    keys.sort();
    keys.dedup();
    let changed: Vec<&String> = keys
        .into_iter()
        .filter(|k| before.get(*k) != after.get(*k))
        .collect();
    if changed.is_empty() {
        return Err(ferry_store::StoreError::AlreadyExists {
            kind: "TrainJob".into(),
            namespace: m.namespace.clone(),
            name: m.name.clone(),
        }
        .into());
    }
    let fixed: Vec<String> = changed
        .iter()
        .filter(|k| !CHANGEABLE.contains(&k.as_str()))
        .map(|k| format!("spec.{k}"))
        .collect();
    let why = if !fixed.is_empty() {
        format!(
            "its {} cannot change (only spec.maxRuntimeSeconds, spec.maxTotalRuntimeSeconds \
             and spec.suspend can, while it has not ended)",
            fixed.join(", ")
        )
    } else if old.phase.is_terminal() {
        format!(
            "it has ended ({}), so its time limits and spec.suspend no longer change anything",
            old.phase
        )
    } else {
        let show = |v: Option<&Value>| v.map_or_else(|| "none".to_owned(), |v| format!("{v} s"));
        let limits = changed
            .iter()
            .filter(|k| k.as_str() != "suspend")
            .map(|k| {
                format!(
                    "spec.{k}: {} -> {}",
                    show(before.get(*k)),
                    show(after.get(*k))
                )
            })
            .collect::<Vec<_>>()
            .join("; ");
        return Ok(Some(SpecChange { old, limits }));
    };
    Err(ApiError::conflict(format!(
        "TrainJob {}/{} already exists and {why}; pick another metadata.name or remove the \
         old one with `ferry delete job {}` first",
        m.namespace, m.name, m.name
    )))
}

/// A spec's fields by their YAML names (absent ones left out).
fn spec_fields(spec: &ferry_spec::TrainJobSpec) -> serde_json::Map<String, Value> {
    match serde_json::to_value(spec) {
        Ok(Value::Object(map)) => map,
        _ => serde_json::Map::new(),
    }
}
