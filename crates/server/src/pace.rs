//! The time a running job has left, from the pace of its current attempt
//! (`ferry_sched::pace::Pace`, kept on its `LiveGang`): the scheduler's expected end and
//! `status.estimatedCompletionTime` in API answers.

/// Seconds `job`'s running attempt needs to reach `spec.train.steps` (else the total its
/// engine reported) at the pace `live` has seen, from `now_ms`; `None` without a step target,
/// for another attempt's gang, or before the pace is known.
pub(crate) fn time_left(
    job: &ferry_store::JobRecord,
    live: &crate::state::LiveGang,
    now_ms: u64,
) -> Option<u64> {
    (live.gang.attempt == job.attempt)
        .then(|| live.pace.time_left(job.job.spec.train.steps, now_ms))
        .flatten()
}
