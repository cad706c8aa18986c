//! Job routes: list, get, events, logs, metrics, cancel, suspend, resume, delete.

use std::time::Duration;

use axum::Json;
use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::response::Response;
use ferry_runtime::GangRecord;
use ferry_spec::{JobPhase, TrainJob};
use ferry_store::{Event, JobFilter, JobRecord, MetricRow, StoreError};
use serde::Deserialize;

use super::ListQuery;
use crate::error::ApiError;
use crate::reconcile;
use crate::state::ControlPlane;

async fn find(plane: &ControlPlane, ns: &str, name: &str) -> Result<JobRecord, ApiError> {
    plane.store().get_job(ns, name).await?.ok_or_else(|| {
        ApiError::not_found(format!(
            "job {ns}/{name} not found; list jobs with `ferry get jobs -n {ns}`"
        ))
    })
}

async fn with_progress(plane: &ControlPlane, rec: &JobRecord) -> Result<TrainJob, ApiError> {
    let mut job = rec.to_train_job();
    if let Some(m) = plane.store().latest_metrics(&rec.uid).await?
        && let Some(status) = job.status.as_mut()
    {
        status.progress = Some(m.values);
    }
    if let Some(status) = job.status.as_mut() {
        status.estimated_completion_time = estimated_completion(plane, rec);
        if rec.phase == JobPhase::Queued
            && let Some(w) = plane.waiting(&rec.uid)
        {
            // Why it waits now, and when it starts if it is first in line.
            status.message = Some(w.reason);
            status.estimated_start_time = w
                .expected_start
                .and_then(|t| chrono::DateTime::from_timestamp(i64::try_from(t).ok()?, 0))
                .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true));
        }
        if rec.job.spec.max_total_runtime_seconds.is_some() {
            let events = plane.store().events(&rec.uid).await?;
            let now = chrono::Utc::now();
            status.run_seconds = Some(crate::limits::run_seconds(&events, Some(now)));
        }
    }
    Ok(job)
}

/// When a running job reaches `spec.train.steps` (or its engine's own total) at its measured pace.
fn estimated_completion(plane: &ControlPlane, rec: &JobRecord) -> Option<String> {
    let live = plane
        .live_gang(&rec.uid)
        .filter(|_| rec.phase == JobPhase::Running)?;
    let now = chrono::Utc::now();
    let left = crate::pace::time_left(rec, &live, u64::try_from(now.timestamp_millis()).ok()?)?;
    let at = now + chrono::Duration::seconds(i64::try_from(left).ok()?);
    Some(at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
}

/// `GET /api/v1/jobs?namespace=NS&labelSelector=SEL`.
pub(crate) async fn list(
    State(plane): State<ControlPlane>,
    Query(q): Query<ListQuery>,
) -> Result<Json<Vec<TrainJob>>, ApiError> {
    let selector = q.selector()?;
    let jobs = plane
        .store()
        .list_jobs(&JobFilter {
            namespace: q.namespace,
            phases: Vec::new(),
        })
        .await?;
    let mut out = Vec::with_capacity(jobs.len());
    for rec in jobs
        .iter()
        .filter(|rec| selector.matches(&rec.job.metadata.labels))
    {
        out.push(with_progress(&plane, rec).await?);
    }
    Ok(Json(out))
}

pub(crate) async fn get(
    State(plane): State<ControlPlane>,
    Path((ns, name)): Path<(String, String)>,
) -> Result<Json<TrainJob>, ApiError> {
    let rec = find(&plane, &ns, &name).await?;
    Ok(Json(with_progress(&plane, &rec).await?))
}

pub(crate) async fn events(
    State(plane): State<ControlPlane>,
    Path((ns, name)): Path<(String, String)>,
) -> Result<Json<Vec<Event>>, ApiError> {
    let rec = find(&plane, &ns, &name).await?;
    Ok(Json(plane.store().events(&rec.uid).await?))
}

/// `?after=ID&limit=N` for metrics pages.
#[derive(Debug, Deserialize)]
pub(crate) struct MetricsQuery {
    #[serde(default)]
    after: i64,
    #[serde(default = "default_limit")]
    limit: u32,
}

fn default_limit() -> u32 {
    1000
}

pub(crate) async fn metrics(
    State(plane): State<ControlPlane>,
    Path((ns, name)): Path<(String, String)>,
    Query(q): Query<MetricsQuery>,
) -> Result<Json<Vec<MetricRow>>, ApiError> {
    let rec = find(&plane, &ns, &name).await?;
    Ok(Json(
        plane
            .store()
            .metrics(&rec.uid, q.after, q.limit.min(10_000))
            .await?,
    ))
}

/// `?rank=N&follow=true` for logs.
#[derive(Debug, Deserialize)]
pub(crate) struct LogsQuery {
    #[serde(default)]
    rank: u32,
    #[serde(default)]
    follow: bool,
}

pub(crate) async fn logs(
    State(plane): State<ControlPlane>,
    Path((ns, name)): Path<(String, String)>,
    Query(q): Query<LogsQuery>,
) -> Result<Response, ApiError> {
    let mut rec = find(&plane, &ns, &name).await?;
    // Following a job that has not started yet waits for its first attempt.
    let gang = loop {
        if let Some((_, value)) = plane.store().get_gang(&rec.uid).await? {
            let gang: GangRecord = serde_json::from_value(value).map_err(|e| {
                ApiError::internal(format!(
                    "stored rank record of job {ns}/{name} is unreadable: {e}"
                ))
            })?;
            break gang;
        }
        if !q.follow || rec.phase.is_terminal() {
            return Err(ApiError::not_found(format!(
                "job {ns}/{name} has no logs yet: it is {} and no rank has started",
                rec.phase
            )));
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        rec = find(&plane, &ns, &name).await?;
    };
    if q.rank >= gang.world_size() {
        return Err(ApiError::bad_request(format!(
            "rank {} does not exist; job {ns}/{name} has ranks 0..{}",
            q.rank,
            gang.world_size().saturating_sub(1)
        )));
    }
    let stream = plane.runtime().logs(&gang, q.rank, q.follow)?;
    Response::builder()
        .header("content-type", "text/plain; charset=utf-8")
        .body(Body::from_stream(stream))
        .map_err(|e| ApiError::internal(e.to_string()))
}

/// The outcome of one try of a job action against the freshest record.
enum Try {
    /// Answered: the job as the action left it.
    Done(Box<TrainJob>),
    /// The phase changed under the compare-and-set: read the record again.
    Again,
}

impl Try {
    /// A transition's result: done, again on a conflict, else the error.
    fn of(result: Result<JobRecord, StoreError>) -> Result<Try, ApiError> {
        match result {
            Ok(updated) => Ok(Try::Done(Box::new(updated.to_train_job()))),
            Err(StoreError::Conflict { .. }) => Ok(Try::Again),
            Err(e) => Err(e.into()),
        }
    }
}

/// Runs `act` on the freshest record of job `ns/name`, again while the reconcile loop changes
/// its phase under the compare-and-set (at most five tries): what cancel, suspend and resume
/// share. A finished job is refused, naming `action`.
async fn act_on<F, Fut>(
    plane: &ControlPlane,
    ns: &str,
    name: &str,
    action: &str,
    mut act: F,
) -> Result<Json<TrainJob>, ApiError>
where
    F: FnMut(JobRecord) -> Fut,
    Fut: std::future::Future<Output = Result<Try, ApiError>>,
{
    for _ in 0..5 {
        let rec = find(plane, ns, name).await?;
        if rec.phase.is_terminal() {
            return Err(ApiError::conflict(format!(
                "job {ns}/{name} already finished ({}); nothing to {action}",
                rec.phase
            )));
        }
        if let Try::Done(job) = act(rec).await? {
            return Ok(Json(*job));
        }
    }
    Err(ApiError::conflict(format!(
        "job {ns}/{name} kept changing phase; try the {action} again"
    )))
}

/// The message of a job cancelled through the API.
const CANCELLED_BY_REQUEST: &str =
    "cancelled by request; ranks get SIGTERM, then SIGKILL after the grace period";

pub(crate) async fn cancel(
    State(plane): State<ControlPlane>,
    Path((ns, name)): Path<(String, String)>,
) -> Result<Json<TrainJob>, ApiError> {
    let plane = &plane;
    act_on(plane, &ns, &name, "cancel", move |rec| async move {
        Try::of(reconcile::cancel(plane, &rec, CANCELLED_BY_REQUEST).await)
    })
    .await
}

/// `POST …/suspend`: the job leaves its queue, or its ranks stop gracefully as for a
/// preemption (`crate::suspend`); a suspended job is answered as it is.
pub(crate) async fn suspend(
    State(plane): State<ControlPlane>,
    Path((ns, name)): Path<(String, String)>,
) -> Result<Json<TrainJob>, ApiError> {
    let plane = &plane;
    act_on(plane, &ns, &name, "suspend", move |rec| async move {
        if rec.phase == JobPhase::Suspended {
            return Ok(Try::Done(Box::new(with_progress(plane, &rec).await?)));
        }
        let spec = crate::suspend::spec_with(&rec, true);
        Try::of(crate::suspend::suspend(plane, &rec, Some(spec), "suspended by request").await)
    })
    .await
}

/// `POST …/resume`: a suspended job goes back to its queue, to resume from its latest
/// checkpoint once admitted; one whose ranks still stop is answered still `Suspended` with
/// `spec.suspend: false`, and goes back once they have exited.
pub(crate) async fn resume(
    State(plane): State<ControlPlane>,
    Path((ns, name)): Path<(String, String)>,
) -> Result<Json<TrainJob>, ApiError> {
    let (plane, ns, name) = (&plane, ns.as_str(), name.as_str());
    act_on(plane, ns, name, "resume", move |rec| async move {
        if rec.phase != JobPhase::Suspended {
            return Err(ApiError::conflict(format!(
                "job {ns}/{name} is not suspended ({}); nothing to resume",
                rec.phase
            )));
        }
        if !rec.job.spec.suspend {
            // Asked for already: it goes back once its ranks have exited.
            return Ok(Try::Done(Box::new(with_progress(plane, &rec).await?)));
        }
        let spec = crate::suspend::spec_with(&rec, false);
        if crate::suspend::still_stopping(plane, &rec) {
            let by = "resume requested";
            return Try::of(crate::suspend::request_resume(plane, &rec, spec, by).await);
        }
        Try::of(crate::suspend::resume(plane, &rec, Some(spec), "resumed by request").await)
    })
    .await
}

pub(crate) async fn delete(
    State(plane): State<ControlPlane>,
    Path((ns, name)): Path<(String, String)>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let rec = find(&plane, &ns, &name).await?;
    if !rec.phase.is_terminal() {
        return Err(ApiError::conflict(format!(
            "job {ns}/{name} is {}; cancel it first with `ferry cancel job {name}`",
            rec.phase
        )));
    }
    if plane.live_gang(&rec.uid).is_some() {
        return Err(ApiError::conflict(format!(
            "job {ns}/{name} is still stopping its ranks; try again in a few seconds"
        )));
    }
    plane.store().delete_job(&rec.uid).await?;
    Ok(Json(serde_json::json!({"deleted": format!("{ns}/{name}")})))
}
