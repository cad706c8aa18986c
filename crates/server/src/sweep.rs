//! Sweeps on `ferry up`: a stored `Sweep` and the `TrainJob`s it expanded to.
//!
//! Applying a sweep stores it, then creates its jobs (`ferry_spec::Sweep::expand`), each
//! labelled `ferry.dev/sweep=<name>`; the jobs past `spec.maxParallel` are created suspended.
//! Each reconcile pass [`release`]s held jobs, lowest index first, while fewer than
//! `maxParallel` of the sweep's jobs are live. Everything is read back from the store — the
//! sweep, its jobs' phases and events — so a restarted control plane carries on where the last
//! one stopped. A sweep's status (its jobs per phase, one row per job, the best so far) is
//! computed when it is read. Deleting a sweep cancels its jobs and deletes them with it.

use std::collections::BTreeMap;

use ferry_spec::{
    JobPhase, SWEEP_INDEX_LABEL, SWEEP_LABEL, Sweep, SweepBest, SweepJob, SweepJobStatus,
    SweepStatus,
};
use ferry_store::{JobFilter, JobRecord, ObjectRecord, StoreError};
use serde_json::Value;

use crate::error::ApiError;
use crate::state::ControlPlane;

/// The kind name sweeps are stored under.
const KIND: &str = "Sweep";

/// The sweep a stored record holds; `None` for a document this version cannot read.
fn sweep_of(record: &ObjectRecord) -> Option<Sweep> {
    match serde_json::from_value(record.doc.clone()) {
        Ok(sweep) => Some(sweep),
        Err(e) => {
            tracing::warn!(sweep = %record.name, namespace = %record.namespace, error = %e,
                "stored sweep is unreadable; its jobs are left as they are");
            None
        }
    }
}

/// Whether `job` is one of sweep `namespace/name`'s jobs.
fn belongs(job: &JobRecord, namespace: &str, name: &str) -> bool {
    job.namespace == namespace
        && job.job.metadata.labels.get(SWEEP_LABEL).map(String::as_str) == Some(name)
}

/// A job's index in its sweep, from its label.
fn index_of(job: &JobRecord) -> Option<usize> {
    job.job.metadata.labels.get(SWEEP_INDEX_LABEL)?.parse().ok()
}

/// What applying a sweep does, decided before anything is stored.
pub(crate) struct Apply {
    /// Whether the sweep is stored already (with the same spec).
    exists: bool,
    /// The jobs to create: all of them for a new sweep, those missing for a stored one.
    missing: Vec<SweepJob>,
}

/// Decides what applying `sweep` (expanded to `jobs`) does: a new sweep creates every job; one
/// stored with the same spec and labels creates only the jobs missing (an apply a crash cut
/// short), nothing else; a changed one is refused, as is a job name another job has taken.
pub(crate) async fn plan_apply(
    plane: &ControlPlane,
    sweep: &Sweep,
    jobs: Vec<SweepJob>,
) -> Result<Apply, ApiError> {
    let m = &sweep.metadata;
    let stored = plane
        .store()
        .get_object(KIND, &m.namespace, &m.name)
        .await?;
    let exists = stored.is_some();
    if let Some(stored) = stored {
        let old = sweep_of(&stored).ok_or_else(|| {
            ApiError::internal(format!(
                "the stored Sweep {}/{} is unreadable; delete it with `ferry delete sweep {}`",
                m.namespace, m.name, m.name
            ))
        })?;
        let changed = changes(&old, sweep);
        if !changed.is_empty() {
            return Err(ApiError::conflict(format!(
                "Sweep {}/{} already exists and its {} changed; a sweep cannot change once applied: \
                 delete it first with `ferry delete sweep {}` (its jobs go with it), or apply the \
                 new one under another metadata.name",
                m.namespace,
                m.name,
                changed.join(", "),
                m.name
            )));
        }
    }
    let mut missing = Vec::new();
    for job in jobs {
        let jm = &job.job.metadata;
        match plane.store().get_job(&jm.namespace, &jm.name).await? {
            None => missing.push(job),
            Some(old) if belongs(&old, &m.namespace, &m.name) => {}
            Some(old) => {
                let owner = old
                    .job
                    .metadata
                    .labels
                    .get(SWEEP_LABEL)
                    .map_or_else(String::new, |s| format!(" (of sweep {s})"));
                return Err(ApiError::conflict(format!(
                    "Sweep {}/{} would create job {}, but a job of that name exists{owner}; \
                     rename the sweep, or delete that job with `ferry delete job {}` first",
                    m.namespace, m.name, jm.name, jm.name
                )));
            }
        }
    }
    Ok(Apply { exists, missing })
}

/// The parts of a sweep that differ between `old` and `new`, by field path.
fn changes(old: &Sweep, new: &Sweep) -> Vec<String> {
    let mut out = Vec::new();
    let (a, b) = (&old.spec, &new.spec);
    if a.template.metadata != b.template.metadata {
        out.push("spec.template.metadata".to_owned());
    }
    let fields = |spec: &ferry_spec::TrainJobSpec| match serde_json::to_value(spec) {
        Ok(Value::Object(map)) => map,
        _ => serde_json::Map::new(),
    };
    let (fa, fb) = (fields(&a.template.spec), fields(&b.template.spec));
    let mut keys: Vec<&String> = fa.keys().chain(fb.keys()).collect();
    keys.sort();
    keys.dedup();
    for k in keys {
        if fa.get(k) != fb.get(k) {
            out.push(format!("spec.template.spec.{k}"));
        }
    }
    if a.parameters != b.parameters {
        out.push("spec.parameters".to_owned());
    }
    if a.max_parallel != b.max_parallel {
        out.push("spec.maxParallel".to_owned());
    }
    if a.metric != b.metric {
        out.push("spec.metric".to_owned());
    }
    let (ma, mb) = (&old.metadata, &new.metadata);
    if ma.labels != mb.labels || ma.annotations != mb.annotations {
        out.push("metadata.labels or annotations".to_owned());
    }
    out
}

/// Stores the sweep (when new) and then its missing jobs, in index order: the sweep first, so
/// that a crash between leaves a sweep whose re-apply creates the rest. Returns its uid and
/// what was done (`created`, `configured` when jobs were missing, else `unchanged`).
pub(crate) async fn store(
    plane: &ControlPlane,
    sweep: &Sweep,
    apply: Apply,
) -> Result<(String, &'static str), ApiError> {
    let m = &sweep.metadata;
    let record = if apply.exists {
        plane
            .store()
            .get_object(KIND, &m.namespace, &m.name)
            .await?
            .ok_or_else(|| {
                ApiError::conflict(format!(
                    "Sweep {}/{} was deleted while being applied; apply it again",
                    m.namespace, m.name
                ))
            })?
    } else {
        let mut doc = serde_json::to_value(sweep)
            .map_err(|e| ApiError::internal(format!("a sweep did not serialize: {e}")))?;
        if let Value::Object(map) = &mut doc {
            map.remove("status");
        }
        plane
            .store()
            .put_object(KIND, &m.namespace, &m.name, &doc, true)
            .await?
    };
    let created = apply.missing.len();
    for job in apply.missing {
        plane.store().create_job(&job.job, "Created").await?;
    }
    let action = match (apply.exists, created) {
        (false, _) => "created",
        (true, 0) => "unchanged",
        (true, _) => "configured",
    };
    Ok((record.uid, action))
}

/// Releases held jobs of every sweep with `spec.maxParallel`: while fewer of its jobs than
/// that are live (not ended, not suspended), the held one with the lowest index is queued
/// again. A job is held when the sweep created it suspended (`Sweep::holds`) and it was never
/// resumed since: one a user resumed, then suspended, is the user's to resume. `active` (the
/// unfinished jobs) is updated with the released ones.
pub(crate) async fn release(
    plane: &ControlPlane,
    active: &mut [JobRecord],
    catalog: &mut crate::inputs::LazyCatalog,
) -> Result<(), StoreError> {
    let sweeps = plane.store().list_objects(KIND, None).await?;
    for record in &sweeps {
        let Some(sweep) = sweep_of(record) else {
            continue;
        };
        let Some(limit) = sweep.spec.max_parallel else {
            continue;
        };
        let (ns, name) = (&record.namespace, &record.name);
        let mine: Vec<usize> = (0..active.len())
            .filter(|&i| belongs(&active[i], ns, name))
            .collect();
        let live = mine
            .iter()
            .filter(|&&i| active[i].phase != JobPhase::Suspended)
            .count();
        let mut free = usize::try_from(limit).unwrap_or(0).saturating_sub(live);
        if free == 0 {
            continue;
        }
        let mut held: Vec<(usize, usize)> = mine
            .iter()
            .filter(|&&i| active[i].phase == JobPhase::Suspended)
            .filter_map(|&i| index_of(&active[i]).map(|index| (index, i)))
            .filter(|&(index, _)| sweep.holds(index))
            .collect();
        held.sort_unstable();
        for (index, i) in held {
            if free == 0 {
                break;
            }
            let job = &active[i];
            if crate::suspend::still_stopping(plane, job) || was_resumed(plane, job).await? {
                continue;
            }
            // Released into a queue, it would skip the wait for its model (`inputs`) and fail
            // at launch: it stays held until the model is registered.
            let input = catalog.job_input(plane, job).await?;
            if matches!(input, Some(crate::inputs::Awaited::Waiting(_))) {
                continue;
            }
            let by = format!(
                "released by sweep {name} (job {index}; spec.maxParallel: {limit}, {live} of its jobs live)"
            );
            let spec = crate::suspend::spec_with(job, false);
            match crate::suspend::resume(plane, job, Some(spec), &by).await {
                Ok(updated) => {
                    active[i] = updated;
                    free -= 1;
                }
                // Someone else moved it (a cancel, a resume): the next pass decides again.
                Err(StoreError::Conflict { .. }) => {}
                Err(e) => return Err(e),
            }
        }
    }
    Ok(())
}

/// Whether the job was ever resumed: then its suspension now is a user's, not the sweep's.
async fn was_resumed(plane: &ControlPlane, job: &JobRecord) -> Result<bool, StoreError> {
    let events = plane.store().events(&job.uid).await?;
    Ok(events.iter().any(|e| e.reason == "Resumed"))
}

/// The sweep's record with its live status: its jobs per phase, one row per combination
/// (parameters, phase, latest step and metric), and the best succeeded job by `spec.metric`.
pub(crate) async fn with_status(
    plane: &ControlPlane,
    mut record: ObjectRecord,
) -> Result<ObjectRecord, ApiError> {
    let Some(sweep) = sweep_of(&record) else {
        return Ok(record);
    };
    let jobs = plane
        .store()
        .list_jobs(&JobFilter {
            namespace: Some(record.namespace.clone()),
            phases: Vec::new(),
        })
        .await?;
    let mut by_index: BTreeMap<usize, &JobRecord> = BTreeMap::new();
    for job in &jobs {
        if belongs(job, &record.namespace, &record.name)
            && let Some(index) = index_of(job)
        {
            by_index.insert(index, job);
        }
    }
    let metric = &sweep.spec.metric;
    let mut status = SweepStatus::default();
    for index in 0..sweep.combinations() {
        let job = by_index.get(&index);
        let latest = match job {
            Some(job) => plane.store().latest_metrics(&job.uid).await?,
            None => None,
        };
        let row = SweepJobStatus {
            name: ferry_spec::sweep_job_name(&record.name, index),
            index: u32::try_from(index).unwrap_or(u32::MAX),
            parameters: sweep.combination_at(index),
            phase: job.map(|j| j.phase),
            step: latest.as_ref().and_then(|m| m.step),
            value: latest
                .as_ref()
                .and_then(|m| m.values.get(metric.as_str()))
                .and_then(Value::as_f64)
                .filter(|v| v.is_finite()),
        };
        if let Some(phase) = row.phase {
            *status.phases.entry(phase.as_str().to_owned()).or_default() += 1;
        }
        if row.phase == Some(JobPhase::Succeeded)
            && let Some(value) = row.value
            && status.best.as_ref().is_none_or(|b| value < b.value)
        {
            status.best = Some(SweepBest {
                job: row.name.clone(),
                value,
            });
        }
        status.jobs.push(row);
    }
    if let Value::Object(doc) = &mut record.doc {
        doc.insert(
            "status".into(),
            serde_json::to_value(&status).unwrap_or_default(),
        );
    }
    Ok(record)
}

/// Deletes sweep `namespace/name` with its jobs: the unfinished ones are cancelled first (the
/// held ones before the others, so none is released meanwhile), then every job is deleted,
/// then the sweep. While some cancelled job's ranks still stop, the answer is a conflict saying
/// so, and the sweep stays until a later delete finds them gone. `Ok(false)` when there is no
/// such sweep.
pub(crate) async fn delete(
    plane: &ControlPlane,
    namespace: &str,
    name: &str,
) -> Result<bool, ApiError> {
    if plane
        .store()
        .get_object(KIND, namespace, name)
        .await?
        .is_none()
    {
        return Ok(false);
    }
    let mut stopping = 0;
    for _ in 0..5 {
        let mut jobs: Vec<JobRecord> = plane
            .store()
            .list_jobs(&JobFilter {
                namespace: Some(namespace.to_owned()),
                phases: Vec::new(),
            })
            .await?
            .into_iter()
            .filter(|j| belongs(j, namespace, name) && !j.phase.is_terminal())
            .collect();
        if jobs.is_empty() {
            break;
        }
        jobs.sort_by_key(|j| j.phase != JobPhase::Suspended);
        let message = format!(
            "cancelled: its sweep {name} is being deleted; ranks get SIGTERM, then SIGKILL after the grace period"
        );
        for job in &jobs {
            match crate::reconcile::cancel(plane, job, &message).await {
                // A conflict: it moved meanwhile; the next round reads it again.
                Ok(_) | Err(StoreError::Conflict { .. }) => {}
                Err(e) => return Err(e.into()),
            }
        }
    }
    let jobs = plane
        .store()
        .list_jobs(&JobFilter {
            namespace: Some(namespace.to_owned()),
            phases: Vec::new(),
        })
        .await?;
    for job in jobs.iter().filter(|j| belongs(j, namespace, name)) {
        if !job.phase.is_terminal() {
            return Err(ApiError::conflict(format!(
                "sweep {namespace}/{name}: job {} kept changing phase while being cancelled; delete the sweep again",
                job.name
            )));
        }
        if plane.live_gang(&job.uid).is_some() {
            stopping += 1;
            continue;
        }
        plane.store().delete_job(&job.uid).await?;
    }
    if stopping > 0 {
        return Err(ApiError::conflict(format!(
            "sweep {namespace}/{name} is still stopping the ranks of {stopping} of its jobs (cancelled); \
             try again in a few seconds"
        )));
    }
    Ok(plane.store().delete_object(KIND, namespace, name).await?)
}

#[cfg(test)]
mod tests;
