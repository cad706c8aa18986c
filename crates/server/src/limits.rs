//! Time limits of training runs: `spec.maxRuntimeSeconds` bounds one run (Slurm's `--time`),
//! `spec.maxTotalRuntimeSeconds` all runs together (Kueue's `maximumExecutionTimeSeconds`),
//! so a job preempted or restarted many times cannot run for ever.

use std::path::Path;

use ferry_spec::{BUDGET_NO_RESTART, JobPhase};
use ferry_store::{Event, JobRecord, StoreError};

use crate::reconcile::grace_of;
use crate::state::{ControlPlane, LiveGang};

/// Seconds the job spent `Running` in its earlier runs, from its event log: each interval
/// opens at a transition into `Running` and closes at the next one out of it (notes that
/// stay `Running` do not close it). The current run, still open, is left out: it is
/// measured from its launch.
pub(crate) fn past_run_seconds(events: &[Event]) -> u64 {
    run_seconds(events, None)
}

/// Seconds `job`'s ended runs took of its `spec.maxTotalRuntimeSeconds`, read from its events
/// (0 without a budget, without reading them).
pub(crate) async fn ended_runs_seconds(
    plane: &ControlPlane,
    job: &JobRecord,
) -> Result<u64, StoreError> {
    if job.job.spec.max_total_runtime_seconds.is_none() {
        return Ok(0);
    }
    Ok(past_run_seconds(&plane.store().events(&job.uid).await?))
}

/// Seconds the job spent `Running` by its `events`; with `now`, a run still open counts up to
/// it (what the API shows), without, only ended runs count.
pub(crate) fn run_seconds(events: &[Event], now: Option<chrono::DateTime<chrono::Utc>>) -> u64 {
    let mut total_ms = 0i64;
    let mut since = None;
    for e in events {
        match (since, e.to == JobPhase::Running) {
            (None, true) => since = Some(e.at),
            (Some(s), false) => {
                total_ms += (e.at - s).num_milliseconds().max(0);
                since = None;
            }
            _ => {}
        }
    }
    if let (Some(s), Some(now)) = (since, now) {
        total_ms += (now - s).num_milliseconds().max(0);
    }
    u64::try_from(total_ms / 1000).unwrap_or(0)
}

/// A limit a running attempt has reached, with the message to record.
#[derive(Debug, PartialEq)]
pub(crate) enum Overrun {
    /// This run reached `spec.maxRuntimeSeconds`: a failure under `onFailure`.
    Run(String),
    /// All runs together reached `spec.maxTotalRuntimeSeconds`: the job fails for good.
    Total(String),
}

/// How the running attempt `live` of `job` has spent `spec.maxTotalRuntimeSeconds` by `now_ms`
/// (Unix milliseconds), given `past_s` seconds of earlier runs; `None` while some is left.
pub(crate) fn budget_spent(
    job: &JobRecord,
    live: &LiveGang,
    past_s: u64,
    now_ms: u64,
) -> Option<String> {
    let budget = job.job.spec.max_total_runtime_seconds?;
    let ran_s = now_ms.saturating_sub(live.gang.launched_at_unix_ms) / 1000;
    (past_s + ran_s >= budget).then(|| {
        format!(
            "attempt {} ran {ran_s} s after {past_s} s of earlier runs, reaching \
             spec.maxTotalRuntimeSeconds ({budget} s)",
            job.attempt
        )
    })
}

/// Which limit, if any, the running attempt `live` of `job` has reached at `now_ms` (Unix
/// milliseconds), given `past_s` seconds of earlier runs.
pub(crate) fn overrun(
    job: &JobRecord,
    live: &LiveGang,
    past_s: u64,
    now_ms: u64,
    checkpoints: &Path,
) -> Option<Overrun> {
    let ran_s = now_ms.saturating_sub(live.gang.launched_at_unix_ms) / 1000;
    let spec = &job.job.spec;
    let stop = format!(
        "its ranks get SIGTERM and {} s to checkpoint into {}",
        grace_of(job).as_secs_f64(),
        checkpoints.display()
    );
    if let Some(spent) = budget_spent(job, live, past_s, now_ms) {
        return Some(Overrun::Total(format!(
            "{spent}; {stop}; {BUDGET_NO_RESTART}"
        )));
    }
    let limit = spec.max_runtime_seconds?;
    (ran_s >= limit).then(|| {
        Overrun::Run(format!(
            "attempt {} ran {ran_s} s, past spec.maxRuntimeSeconds ({limit} s); {stop}",
            job.attempt
        ))
    })
}

#[cfg(test)]
mod tests {
    use chrono::{Duration, TimeZone, Utc};

    use super::*;

    fn ev(id: i64, at_s: i64, from: Option<JobPhase>, to: JobPhase) -> Event {
        Event {
            id,
            job_uid: "j".into(),
            at: Utc.timestamp_opt(1_000_000, 0).unwrap() + Duration::seconds(at_s),
            from,
            to,
            reason: String::new(),
            message: String::new(),
        }
    }

    #[test]
    fn past_runs_add_up_closed_running_intervals_only() {
        use JobPhase::*;
        let events = [
            ev(1, 0, None, Queued),
            ev(2, 1, Some(Queued), Admitted),
            ev(3, 2, Some(Admitted), Running),
            // A note while running does not end the run.
            ev(4, 5, Some(Running), Running),
            ev(5, 12, Some(Running), Preempted),
            ev(6, 13, Some(Preempted), Queued),
            ev(7, 20, Some(Queued), Admitted),
            ev(8, 21, Some(Admitted), Running),
            ev(9, 25, Some(Running), Restarting),
            ev(10, 27, Some(Restarting), Running),
        ];
        // 2..12 and 21..25; the run opened at 27 is still going.
        assert_eq!(past_run_seconds(&events), 14);
        assert_eq!(past_run_seconds(&events[..3]), 0);
        // What the API shows counts the open run up to now (30 s): 14 + 3.
        let now = events[0].at + Duration::seconds(30);
        assert_eq!(run_seconds(&events, Some(now)), 17);
        assert_eq!(run_seconds(&events[..9], Some(now)), 14, "no run open");
    }
}
