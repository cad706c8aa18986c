//! The reconcile loop: moves every job one step closer to what its phase says.
//!
//! Each pass reads the jobs from the store, and for each one persists the next phase
//! *before* acting on it (launching, stopping). A crash between the two leaves a
//! state the next start finishes: a `Running` job whose processes never started is
//! found without a live gang and handled by its failure policy; a `Cancelled` job
//! whose processes still run is stopped.

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use ferry_runtime::{GangRecord, GangStatus, LocalRuntime, RankState};
use ferry_sched::pace::Pace;
use ferry_spec::{JobPhase, ModelSource, ResumePolicy};
use ferry_store::{JobFilter, JobRecord, StatusPatch, StoreError};

use crate::admission::{self, Admission};
use crate::checkpoint::{Layout, latest_checkpoint};
use crate::engines::{LaunchContext, adapter_for};
use crate::error::ApiError;
use crate::export;
use crate::inputs::Awaited;
use crate::limits::{self, Overrun};
use crate::metrics;
use crate::state::{ControlPlane, ExportState, LiveGang};

/// Runs forever: one recovery pass, then a reconcile pass per tick or wake-up.
pub(crate) async fn run(plane: ControlPlane) {
    if let Err(e) = recover(&plane).await {
        tracing::error!(error = %e, "recovering jobs from the previous run failed");
    }
    // Built at the first pass from the stored queues and jobs (what a restart re-adopted).
    let mut admission: Option<Admission> = None;
    loop {
        if let Err(e) = pass(&plane, &mut admission).await {
            tracing::warn!(error = %e, "reconcile pass failed; retrying next tick");
        }
        tokio::select! {
            _ = plane.woken() => {}
            _ = tokio::time::sleep(plane.config().tick) => {}
        }
    }
}

fn gang_of(value: serde_json::Value) -> Option<GangRecord> {
    serde_json::from_value(value).ok()
}

/// Re-adopts the processes a previous control-plane process left behind.
pub(crate) async fn recover(plane: &ControlPlane) -> Result<(), ApiError> {
    let store = plane.store();
    for job in store.list_jobs(&JobFilter::default()).await? {
        let stored = store.get_gang(&job.uid).await?;
        match job.phase {
            JobPhase::Running => {
                let attempt_dir = plane.run_dir(&job).join(format!("attempt-{}", job.attempt));
                let (gang, recovered) = match stored
                    .filter(|(a, _)| *a == job.attempt)
                    .and_then(|(_, v)| gang_of(v))
                {
                    Some(g) => (Some(g), false),
                    None => (LocalRuntime::recover(&attempt_dir).ok(), true),
                };
                let Some(gang) = gang else {
                    // Ranks may have started without their record reaching disk: stop any
                    // the pid files still name before the failure policy decides.
                    if let Err(e) = LocalRuntime::sweep(&attempt_dir, grace_of(&job)).await {
                        tracing::debug!(job = %job.uid, error = %e, "nothing to sweep");
                    }
                    store
                        .note(
                            &job.uid,
                            "ControlPlaneRestarted",
                            &format!(
                                "control plane restarted; attempt {} left no record of its processes",
                                job.attempt
                            ),
                        )
                        .await?;
                    fail(
                        plane,
                        &job,
                        "Lost",
                        "the attempt's processes were never recorded",
                    )
                    .await?;
                    continue;
                };
                if recovered {
                    store
                        .put_gang(
                            &job.uid,
                            job.attempt,
                            &serde_json::to_value(&gang).unwrap_or_default(),
                        )
                        .await?;
                }
                plane.runtime().adopt(&gang).await?;
                let ranks = plane.runtime().observe_ranks(&gang).await?;
                let alive = ranks
                    .iter()
                    .filter(|r| matches!(r.state, RankState::Running))
                    .count();
                store
                    .note(
                        &job.uid,
                        "ControlPlaneRestarted",
                        &format!(
                            "control plane restarted; re-adopted attempt {} with {alive} of {} ranks still running",
                            job.attempt,
                            ranks.len()
                        ),
                    )
                    .await?;
                let last_step = store
                    .latest_metrics(&job.uid)
                    .await?
                    .filter(|m| m.attempt == job.attempt)
                    .and_then(|m| m.step);
                plane.live().insert(
                    job.uid.clone(),
                    LiveGang {
                        gang,
                        draining: false,
                        metrics_offset: 0,
                        last_step,
                        pace: Pace::default(),
                        past_run_s: None,
                    },
                );
            }
            JobPhase::Admitted
            | JobPhase::Restarting
            | JobPhase::Preempted
            | JobPhase::Suspended => {
                // A suspended job stays so (the store says it is); ranks that were still
                // stopping are adopted and `admission::sync` counts their GPUs until they exit.
                let message = if job.phase == JobPhase::Suspended {
                    "control plane restarted; still suspended"
                } else {
                    "control plane restarted; continuing"
                };
                store
                    .note(&job.uid, "ControlPlaneRestarted", message)
                    .await?;
                if let Some(gang) = stored.and_then(|(_, v)| gang_of(v)) {
                    adopt_and_stop(plane, &job, gang).await?;
                }
            }
            phase if phase.is_terminal() => {
                if let Some(gang) = stored.and_then(|(_, v)| gang_of(v)) {
                    adopt_and_stop(plane, &job, gang).await?;
                }
            }
            _ => {}
        }
    }
    Ok(())
}

/// A gang that should no longer run (its job finished, is suspended or between attempts):
/// adopt it and stop whatever still runs, within the job's grace period (counted from the
/// SIGTERM an earlier control-plane process sent, if it did).
async fn adopt_and_stop(
    plane: &ControlPlane,
    job: &JobRecord,
    gang: GangRecord,
) -> Result<(), ApiError> {
    let uid = job.uid.as_str();
    if matches!(plane.runtime().adopt(&gang).await?, GangStatus::Running)
        || plane
            .runtime()
            .observe_ranks(&gang)
            .await?
            .iter()
            .any(|r| matches!(r.state, RankState::Running))
    {
        plane.live().insert(
            uid.to_owned(),
            LiveGang {
                gang,
                draining: false,
                metrics_offset: 0,
                last_step: None,
                pace: Pace::default(),
                past_run_s: None,
            },
        );
        stop(plane, uid, grace_of(job));
    }
    Ok(())
}

/// Stops a live gang in the background: SIGTERM, grace, SIGKILL. Its GPUs stay taken
/// until every rank has ended.
pub(crate) fn stop(plane: &ControlPlane, uid: &str, grace: Duration) {
    let gang = {
        let mut live = plane.live();
        match live.get_mut(uid) {
            Some(lg) if !lg.draining => {
                lg.draining = true;
                lg.gang.clone()
            }
            _ => return,
        }
    };
    let plane = plane.clone();
    let uid = uid.to_owned();
    tokio::spawn(async move {
        if let Err(e) = plane.runtime().terminate(&gang, grace).await {
            tracing::warn!(job = %uid, error = %e, "stopping ranks failed");
            if matches!(e, ferry_runtime::RuntimeError::Unkillable { .. }) {
                // A rank that survives SIGKILL keeps its GPUs: never hand them out twice.
                return;
            }
        }
        let mut live = plane.live();
        if live
            .get(&uid)
            .is_some_and(|lg| lg.gang.attempt == gang.attempt)
        {
            live.remove(&uid);
        }
        drop(live);
        plane.wake();
    });
}

/// One reconcile pass over every job that is not finished.
pub(crate) async fn pass(
    plane: &ControlPlane,
    admission: &mut Option<Admission>,
) -> Result<(), ApiError> {
    let store = plane.store();
    let mut active = store.list_jobs(&JobFilter::unfinished()).await?;

    // Gangs whose job has finished (cancelled, failed, deleted) or is suspended are stopped
    // (a suspension that raced a launch leaves ranks started after it).
    let active_uids: HashMap<&str, &JobRecord> =
        active.iter().map(|j| (j.uid.as_str(), j)).collect();
    let orphans: Vec<String> = plane
        .live()
        .iter()
        .filter(|(uid, lg)| {
            !lg.draining
                && active_uids
                    .get(uid.as_str())
                    .is_none_or(|j| j.phase == JobPhase::Suspended)
        })
        .map(|(uid, _)| uid.clone())
        .collect();
    for uid in orphans {
        let grace = match store.get_job_by_uid(&uid).await? {
            Some(job) => grace_of(&job),
            None => Duration::from_secs(5),
        };
        stop(plane, &uid, grace);
    }

    // A job whose phase disagrees with its `spec.suspend` is suspended or resumed first.
    for job in &mut active {
        if let Some(record) = crate::suspend::follow_spec(plane, job).await? {
            *job = record;
        }
    }
    // Sweeps below their `spec.maxParallel` release their next held jobs.
    // What jobs starting from registered models wait for, read once for the pass.
    let mut catalog = crate::inputs::LazyCatalog::default();
    crate::sweep::release(plane, &mut active, &mut catalog).await?;

    // New jobs enter their queue before the scheduler looks.
    for job in &mut active {
        if job.phase != JobPhase::Pending {
            continue;
        }
        // A job starting from a model another job has yet to register waits for it here,
        // holding no place in a queue.
        let (to, reason, message) = match catalog.job_input(plane, job).await? {
            Some(Awaited::Waiting(m)) if job.message.as_ref() == Some(&m) => continue,
            Some(Awaited::Waiting(m)) => (JobPhase::Pending, "WaitingForModel", m),
            Some(Awaited::Missing(m)) => (JobPhase::Failed, "ModelNotFound", m),
            Some(Awaited::Ready(_)) | None => (JobPhase::Queued, "", String::new()),
        };
        if to != JobPhase::Queued {
            match store
                .transition(
                    &job.uid,
                    JobPhase::Pending,
                    to,
                    reason,
                    &message,
                    StatusPatch::default(),
                )
                .await
            {
                Ok(record) => *job = record,
                Err(StoreError::Conflict { .. }) => {}
                Err(e) => return Err(e.into()),
            }
            continue;
        }
        let res = store
            .transition(
                &job.uid,
                JobPhase::Pending,
                JobPhase::Queued,
                "Queued",
                &format!(
                    "waiting in queue {} for {} GPU(s)",
                    job.job
                        .spec
                        .queue
                        .as_deref()
                        .unwrap_or(admission::DEFAULT_QUEUE),
                    job.job.spec.resources.total_gpus()
                ),
                StatusPatch::default(),
            )
            .await;
        match res {
            Ok(record) => *job = record,
            Err(StoreError::Conflict { .. }) => {}
            Err(e) => return Err(e.into()),
        }
    }
    admission::schedule(plane, admission, &active).await?;

    for job in &active {
        let outcome = match job.phase {
            JobPhase::Queued if job.job.spec.resources.total_gpus() == 0 => {
                admit_without_gpus(plane, job).await
            }
            JobPhase::Admitted if gpus_still_busy(plane, job) => Ok(()),
            JobPhase::Admitted => launch(plane, job, JobPhase::Admitted).await,
            JobPhase::Running => observe(plane, job).await,
            JobPhase::Restarting => {
                let due = job.updated_at
                    + chrono::Duration::from_std(job.job.spec.on_failure.backoff(job.restarts))
                        .unwrap_or_default();
                let draining = plane.live_gang(&job.uid).is_some();
                if chrono::Utc::now() >= due && !draining {
                    launch(plane, job, JobPhase::Restarting).await
                } else {
                    Ok(())
                }
            }
            _ => Ok(()),
        };
        match outcome {
            Ok(()) => {}
            // Someone else (the API, a cancel) moved the job first: next pass decides again.
            Err(StoreError::Conflict { .. }) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// Whether any of an admitted job's GPUs is still used by another gang's ranks (one being
/// preempted or stopped): the scheduler's books never hand a GPU out twice, and this keeps
/// that true on the machine even when the books were rebuilt.
fn gpus_still_busy(plane: &ControlPlane, job: &JobRecord) -> bool {
    let mine: BTreeSet<&String> = job.gpus.iter().flatten().collect();
    plane.live().iter().any(|(uid, lg)| {
        uid != &job.uid
            && lg
                .gang
                .ranks
                .iter()
                .flat_map(|r| r.gpus.iter())
                .any(|g| mine.contains(g))
    })
}

/// SIGTERM-to-SIGKILL grace of a job's ranks.
pub(crate) fn grace_of(job: &JobRecord) -> Duration {
    Duration::from_secs_f64(job.job.spec.on_failure.grace_seconds.max(0.0))
}

/// Persists the unfinished `job` as `Cancelled` (`message` says by whom) and stops its ranks,
/// if any run, with its grace period: a `ferry cancel`, and a deleted sweep's jobs. A
/// [`StoreError::Conflict`] means the job moved meanwhile.
pub(crate) async fn cancel(
    plane: &ControlPlane,
    job: &JobRecord,
    message: &str,
) -> Result<JobRecord, StoreError> {
    let record = plane
        .store()
        .transition(
            &job.uid,
            job.phase,
            JobPhase::Cancelled,
            "Cancelled",
            message,
            StatusPatch::default(),
        )
        .await?;
    stop(plane, &job.uid, grace_of(job));
    plane.wake();
    Ok(record)
}

/// A job that needs no GPU is admitted as soon as it is queued.
async fn admit_without_gpus(plane: &ControlPlane, job: &JobRecord) -> Result<(), StoreError> {
    plane
        .store()
        .transition(
            &job.uid,
            JobPhase::Queued,
            JobPhase::Admitted,
            "Admitted",
            "admitted (no GPUs needed)",
            StatusPatch {
                gpus: Some(Vec::new()),
                ..Default::default()
            },
        )
        .await
        .map(drop)
}

/// Persists `Running` for the next attempt, then starts its processes.
async fn launch(plane: &ControlPlane, job: &JobRecord, from: JobPhase) -> Result<(), StoreError> {
    let store = plane.store();
    let attempt = job.attempt + 1;
    let checkpoint_dir = plane.checkpoint_dir(job);
    let resume_from = match job.job.spec.on_failure.resume {
        ResumePolicy::Latest if attempt > 1 => {
            latest_checkpoint(&checkpoint_dir, Layout::of(&job.job))
        }
        _ => None,
    };
    let model_dir = match resolve_model_dir(plane, job).await {
        Ok(dir) => dir,
        Err(message) => {
            store
                .transition(
                    &job.uid,
                    from,
                    JobPhase::Failed,
                    "ModelNotFound",
                    &message,
                    StatusPatch::default(),
                )
                .await?;
            return Ok(());
        }
    };
    let adapter = match adapter_for(&job.job) {
        Ok(a) => a,
        Err(e) => {
            store
                .transition(
                    &job.uid,
                    from,
                    JobPhase::Failed,
                    "EngineUnavailable",
                    &e.to_string(),
                    StatusPatch::default(),
                )
                .await?;
            return Ok(());
        }
    };
    let (reason, message) = match (&resume_from, from) {
        (Some(ckpt), _) => (
            "Started",
            format!(
                "attempt {attempt} started, resuming from {}",
                ckpt.display()
            ),
        ),
        (None, JobPhase::Restarting) => (
            "Started",
            format!("attempt {attempt} started from scratch (no checkpoint found)"),
        ),
        (None, _) => ("Started", format!("attempt {attempt} started")),
    };
    let record = store
        .transition(
            &job.uid,
            from,
            JobPhase::Running,
            reason,
            &message,
            StatusPatch {
                attempt: Some(attempt),
                resumed_from: resume_from
                    .as_ref()
                    .map(|p| p.to_string_lossy().into_owned()),
                ..Default::default()
            },
        )
        .await?;
    let ctx = LaunchContext {
        job: &record,
        attempt,
        run_dir: plane.run_dir(&record),
        checkpoint_dir: checkpoint_dir.clone(),
        resume_from,
        gpus_per_rank: record.gpus.clone(),
        model_dir,
        self_exe: &plane.config().self_exe,
    };
    let launched = match adapter.launch(&ctx) {
        Ok(req) => {
            if let Err(e) = std::fs::create_dir_all(&checkpoint_dir) {
                Err(format!(
                    "cannot create checkpoint directory {}: {e}",
                    checkpoint_dir.display()
                ))
            } else {
                plane.runtime().launch(req).await.map_err(|e| e.to_string())
            }
        }
        Err(e) => Err(e.to_string()),
    };
    match launched {
        Ok(gang) => {
            store
                .put_gang(
                    &job.uid,
                    attempt,
                    &serde_json::to_value(&gang).unwrap_or_default(),
                )
                .await?;
            plane.live().insert(
                job.uid.clone(),
                LiveGang {
                    gang,
                    draining: false,
                    metrics_offset: 0,
                    last_step: None,
                    pace: Pace::default(),
                    past_run_s: None,
                },
            );
        }
        Err(message) => {
            store
                .transition(
                    &job.uid,
                    JobPhase::Running,
                    JobPhase::Failed,
                    "LaunchFailed",
                    &message,
                    StatusPatch::default(),
                )
                .await?;
        }
    }
    Ok(())
}

/// Checks a running gang: ingests metrics, and finishes or fails the job when it ends.
async fn observe(plane: &ControlPlane, job: &JobRecord) -> Result<(), StoreError> {
    let Some(live) = plane.live_gang(&job.uid) else {
        return fail(
            plane,
            job,
            "Lost",
            "the control plane holds no record of this attempt's processes",
        )
        .await;
    };
    if live.draining || live.gang.attempt != job.attempt {
        return Ok(());
    }
    let status = match plane.runtime().observe(&live.gang).await {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(job = %job.uid, error = %e, "observing ranks failed");
            return Ok(());
        }
    };
    ingest_metrics(plane, job, &live).await?;
    match status {
        GangStatus::Running => {
            let past_s = past_runs(plane, job, &live).await?;
            let now_ms = u64::try_from(chrono::Utc::now().timestamp_millis()).unwrap_or(0);
            match limits::overrun(job, &live, past_s, now_ms, &plane.checkpoint_dir(job)) {
                Some(Overrun::Run(message)) => fail(plane, job, "DeadlineExceeded", &message).await,
                Some(Overrun::Total(message)) => {
                    give_up(plane, job, "BudgetExhausted", &message).await
                }
                None => Ok(()),
            }
        }
        GangStatus::Succeeded => {
            if store_succeeded(plane, job, &live).await? {
                plane.live().remove(&job.uid);
            }
            Ok(())
        }
        GangStatus::Failed { message, .. } => {
            fail_within_budget(plane, job, &live, "RankFailed", &message).await
        }
        GangStatus::Lost { message, .. } => {
            fail_within_budget(plane, job, &live, "RankLost", &message).await
        }
    }
}

/// A failed run restarts under `spec.onFailure` unless it has spent what is left of
/// `spec.maxTotalRuntimeSeconds`: then the job ends (`BudgetExhausted`) rather than start a
/// run the budget would stop at once.
async fn fail_within_budget(
    plane: &ControlPlane,
    job: &JobRecord,
    live: &LiveGang,
    reason: &str,
    message: &str,
) -> Result<(), StoreError> {
    let past_s = past_runs(plane, job, live).await?;
    let now_ms = u64::try_from(chrono::Utc::now().timestamp_millis()).unwrap_or(0);
    match limits::budget_spent(job, live, past_s, now_ms) {
        Some(spent) => {
            let message = format!("{message}; {spent}; {}", ferry_spec::BUDGET_NO_RESTART);
            give_up(plane, job, "BudgetExhausted", &message).await
        }
        None => fail(plane, job, reason, message).await,
    }
}

/// Seconds the job's earlier runs used, for a job with `spec.maxTotalRuntimeSeconds` (0
/// without one): read from its events the first time this attempt is checked, then kept.
async fn past_runs(
    plane: &ControlPlane,
    job: &JobRecord,
    live: &LiveGang,
) -> Result<u64, StoreError> {
    if let Some(s) = live.past_run_s {
        return Ok(s);
    }
    let s = limits::ended_runs_seconds(plane, job).await?;
    if let Some(entry) = plane.live().get_mut(&job.uid) {
        entry.past_run_s = Some(s);
    }
    Ok(s)
}

/// The ranks all exited 0: export the model when the spec asks, then record success.
/// The export (a copy, or a Megatron conversion that can take minutes) runs beside the
/// loop so other jobs keep moving; the job stays `Running` until it is done, and a
/// control plane that restarts meanwhile simply exports again (export is idempotent).
/// Returns true once the outcome is recorded.
async fn store_succeeded(
    plane: &ControlPlane,
    job: &JobRecord,
    live: &LiveGang,
) -> Result<bool, StoreError> {
    let ranks = live.gang.world_size();
    let outcome = if export::export_name(job).is_none() {
        Ok(None)
    } else {
        let state = plane.exports().get(&job.uid).cloned();
        match state {
            None => {
                plane
                    .exports()
                    .insert(job.uid.clone(), ExportState::Running);
                let (plane, job) = (plane.clone(), job.clone());
                tokio::spawn(async move {
                    let result = export::export(&plane, &job).await;
                    plane
                        .exports()
                        .insert(job.uid.clone(), ExportState::Done(result));
                    plane.wake();
                });
                return Ok(false);
            }
            Some(ExportState::Running) => return Ok(false),
            Some(ExportState::Done(result)) => {
                plane.exports().remove(&job.uid);
                result
            }
        }
    };
    let (to, reason, message) = match outcome {
        Ok(None) => (
            JobPhase::Succeeded,
            "Completed",
            format!("all {ranks} ranks exited 0"),
        ),
        Ok(Some(model)) => {
            plane
                .store()
                .note(
                    &job.uid,
                    "Exported",
                    &format!(
                        "registered model {} ({}) at {} from checkpoint {}",
                        model.name,
                        model.format,
                        model.path,
                        model.checkpoint.as_deref().unwrap_or("-")
                    ),
                )
                .await?;
            (
                JobPhase::Succeeded,
                "Completed",
                format!(
                    "all {ranks} ranks exited 0; model {} registered",
                    model.name
                ),
            )
        }
        Err(message) => (JobPhase::Failed, "ExportFailed", message),
    };
    plane
        .store()
        .transition(
            &job.uid,
            JobPhase::Running,
            to,
            reason,
            &message,
            StatusPatch::default(),
        )
        .await?;
    Ok(true)
}

/// The directory `spec.model` names: a path (relative to the working directory) or a
/// registered model; `None` for models built from scratch or fetched by the engine.
async fn resolve_model_dir(
    plane: &ControlPlane,
    job: &JobRecord,
) -> Result<Option<std::path::PathBuf>, String> {
    let Some(model) = &job.job.spec.model else {
        return Ok(None);
    };
    match model.source {
        ModelSource::Path => Ok(model
            .path
            .as_deref()
            .map(|p| crate::engines::in_working_dir(&job.job, p))),
        ModelSource::Artifact => {
            let name = model.artifact.as_deref().unwrap_or("");
            crate::serving::awaited_dir(plane, name, "spec.model.artifact", Some(&job.uid))
                .await
                .map(Some)
                .map_err(|e| e.to_string())
        }
        ModelSource::Hf | ModelSource::Scratch => Ok(None),
    }
}

/// A rank failed: stop the rest, then restart (with backoff) or fail the job.
async fn fail(
    plane: &ControlPlane,
    job: &JobRecord,
    reason: &str,
    message: &str,
) -> Result<(), StoreError> {
    let policy = &job.job.spec.on_failure;
    let max = policy.max_restarts.max(0) as u32;
    if job.restarts < max {
        let restarts = job.restarts + 1;
        let delay = policy.backoff(restarts);
        plane
            .store()
            .transition(
                &job.uid,
                JobPhase::Running,
                JobPhase::Restarting,
                reason,
                &format!(
                    "{message}; restart {restarts} of {max} in {:.1}s",
                    delay.as_secs_f64()
                ),
                StatusPatch {
                    restarts: Some(restarts),
                    ..Default::default()
                },
            )
            .await?;
        stop(plane, &job.uid, grace_of(job));
        Ok(())
    } else {
        let note = if max == 0 {
            "no restarts allowed (spec.onFailure.maxRestarts is 0)".to_owned()
        } else {
            format!("all {max} restarts used")
        };
        give_up(plane, job, reason, &format!("{message}; {note}")).await
    }
}

/// The running job fails for good (no restart); its ranks get SIGTERM and the grace period.
async fn give_up(
    plane: &ControlPlane,
    job: &JobRecord,
    reason: &str,
    message: &str,
) -> Result<(), StoreError> {
    plane
        .store()
        .transition(
            &job.uid,
            JobPhase::Running,
            JobPhase::Failed,
            reason,
            message,
            StatusPatch::default(),
        )
        .await?;
    stop(plane, &job.uid, grace_of(job));
    Ok(())
}

async fn ingest_metrics(
    plane: &ControlPlane,
    job: &JobRecord,
    live: &LiveGang,
) -> Result<(), StoreError> {
    let Some(rank0) = live.gang.ranks.first() else {
        return Ok(());
    };
    let (lines, offset) = match metrics::scan(&rank0.log_path, live.metrics_offset) {
        Ok(r) => r,
        Err(e) => {
            tracing::warn!(job = %job.uid, error = %e, "reading metrics failed");
            return Ok(());
        }
    };
    let fresh: Vec<serde_json::Value> = lines
        .into_iter()
        .filter(|l| {
            let step = l.get("step").and_then(serde_json::Value::as_i64);
            live.last_step
                .is_none_or(|last| step.is_some_and(|s| s > last))
        })
        .collect();
    let last_step = fresh
        .iter()
        .filter_map(|l| l.get("step").and_then(serde_json::Value::as_i64))
        .max()
        .or(live.last_step);
    if !fresh.is_empty() {
        plane
            .store()
            .append_metrics(&job.uid, job.attempt, &fresh)
            .await?;
    }
    if let Some(entry) = plane.live().get_mut(&job.uid) {
        entry.metrics_offset = offset;
        entry.last_step = last_step;
        if let Some(step) = last_step.filter(|_| !fresh.is_empty()) {
            let now_ms = u64::try_from(chrono::Utc::now().timestamp_millis()).unwrap_or(0);
            entry.pace.observe(step, now_ms);
        }
        if let Some(total) = fresh
            .iter()
            .rev()
            .find_map(|l| l.get("max_steps").and_then(serde_json::Value::as_i64))
        {
            entry.pace.observe_total(total);
        }
    }
    Ok(())
}
