//! Suspending and resuming a job at its user's request (`ferry suspend job` / `ferry resume job`,
//! the API's `/suspend` and `/resume`, `spec.suspend` applied or stored).
//!
//! `spec.suspend` is the wish and the phase `Suspended` its record: both are written in one
//! transition, and the reconcile loop brings a job whose phase disagrees with its spec in line
//! (a job created with `spec.suspend: true`). Suspending stops the ranks through the same path
//! as a cancel or a preemption — SIGTERM, `onFailure.graceSeconds` to checkpoint, the GPUs its
//! own until every rank has exited — and `admission::sync` then takes it out of the scheduler.
//! Resuming puts it back in its queue, to be admitted like any queued job and resume from its
//! latest checkpoint; asked while the ranks of the suspended run still exit, it is recorded as
//! `spec.suspend: false` and done once they have.

use ferry_spec::{JobPhase, TrainJobSpec};
use ferry_store::{JobRecord, StatusPatch, StoreError};

use crate::admission::queue_of;
use crate::checkpoint::{Layout, latest_checkpoint};
use crate::reconcile::{grace_of, stop};
use crate::state::ControlPlane;

/// `job`'s spec with `spec.suspend` set to `on`.
pub(crate) fn spec_with(job: &JobRecord, on: bool) -> TrainJobSpec {
    let mut spec = job.job.spec.clone();
    spec.suspend = on;
    spec
}

/// The command that undoes a suspension, for messages.
fn resume_command(job: &JobRecord) -> String {
    match job.namespace.as_str() {
        "default" => format!("`ferry resume job {}`", job.name),
        ns => format!("`ferry resume job {} -n {ns}`", job.name),
    }
}

/// Persists `job` (in its current phase, not ended) as `Suspended` — with `spec` as its new
/// spec when given — and stops its ranks, if any run, as a preemption does. `by` says who
/// asked (`suspended by request`). A [`StoreError::Conflict`] means the job moved meanwhile.
pub(crate) async fn suspend(
    plane: &ControlPlane,
    job: &JobRecord,
    spec: Option<TrainJobSpec>,
    by: &str,
) -> Result<JobRecord, StoreError> {
    let grace = grace_of(job);
    let message = if plane.live_gang(&job.uid).is_some() {
        format!(
            "{by}; its ranks get SIGTERM and up to {:.0}s to checkpoint, keeping their GPUs \
             until they exit; {} queues it again to resume from its latest checkpoint",
            grace.as_secs_f64(),
            resume_command(job)
        )
    } else {
        format!(
            "{by}; out of queue {} until {}",
            queue_of(&job.job),
            resume_command(job)
        )
    };
    let record = plane
        .store()
        .transition(
            &job.uid,
            job.phase,
            JobPhase::Suspended,
            "Suspended",
            &message,
            StatusPatch {
                spec,
                ..Default::default()
            },
        )
        .await?;
    // A no-op without ranks, or while they already stop (a preemption, a failed run).
    stop(plane, &job.uid, grace);
    plane.clear_waiting(&job.uid);
    plane.wake();
    Ok(record)
}

/// Whether the ranks of the suspended `job`'s run still exit (their GPUs are still theirs): it
/// cannot go back to its queue yet.
pub(crate) fn still_stopping(plane: &ControlPlane, job: &JobRecord) -> bool {
    plane.live_gang(&job.uid).is_some()
}

/// Persists the `Suspended` `job` as `Queued` again — with `spec` as its new spec when given —
/// saying which checkpoint it will resume from. Callers check [`still_stopping`] first
/// ([`request_resume`] while it is).
pub(crate) async fn resume(
    plane: &ControlPlane,
    job: &JobRecord,
    spec: Option<TrainJobSpec>,
    by: &str,
) -> Result<JobRecord, StoreError> {
    let from = match latest_checkpoint(&plane.checkpoint_dir(job), Layout::of(&job.job)) {
        Some(c) => format!("it will resume from {}", c.display()),
        None => "no checkpoint: it will start from scratch".to_owned(),
    };
    let message = format!("{by}; back in queue {}, {from}", queue_of(&job.job));
    let record = plane
        .store()
        .transition(
            &job.uid,
            JobPhase::Suspended,
            JobPhase::Queued,
            "Resumed",
            &message,
            StatusPatch {
                spec,
                ..Default::default()
            },
        )
        .await?;
    plane.wake();
    Ok(record)
}

/// Records a resume asked for (`by`) while the ranks of the suspended `job`'s run still stop:
/// `spec` (with `suspend: false`) is stored with a `ResumeRequested` event, and
/// [`follow_spec`] queues the job once they have exited.
pub(crate) async fn request_resume(
    plane: &ControlPlane,
    job: &JobRecord,
    spec: TrainJobSpec,
    by: &str,
) -> Result<JobRecord, StoreError> {
    let mut wanted = job.job.clone();
    wanted.spec = spec;
    let message = format!(
        "{by} while the ranks of its suspended run stop (grace period {:.0}s); it goes back to \
         queue {} once they have exited",
        grace_of(job).as_secs_f64(),
        queue_of(&job.job)
    );
    plane
        .store()
        .replace_spec(
            &job.uid,
            JobPhase::Suspended,
            &wanted,
            "ResumeRequested",
            &message,
        )
        .await
}

/// Brings a job whose phase disagrees with its stored `spec.suspend` in line (one created
/// with `spec.suspend: true`, or a write interrupted between the two): suspends it, or
/// resumes it once its ranks are gone. Returns the job as it is now.
pub(crate) async fn follow_spec(
    plane: &ControlPlane,
    job: &JobRecord,
) -> Result<Option<JobRecord>, StoreError> {
    let suspended = job.phase == JobPhase::Suspended;
    if job.phase.is_terminal() || job.job.spec.suspend == suspended {
        return Ok(None);
    }
    let result = if job.job.spec.suspend {
        let by = if job.phase == JobPhase::Pending {
            "created suspended (spec.suspend: true)"
        } else {
            "suspended as its spec asks (spec.suspend: true)"
        };
        suspend(plane, job, None, by).await
    } else if !still_stopping(plane, job) {
        resume(
            plane,
            job,
            None,
            "resumed as its spec asks (spec.suspend: false)",
        )
        .await
    } else {
        return Ok(None);
    };
    match result {
        Ok(record) => Ok(Some(record)),
        Err(StoreError::Conflict { .. }) => Ok(None),
        Err(e) => Err(e),
    }
}
