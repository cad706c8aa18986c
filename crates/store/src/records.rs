//! The values the store hands out and takes in: jobs, events, metrics, objects, models.
//!
//! Every timestamp is a `DateTime<Utc>` truncated to whole milliseconds (that is what
//! the database keeps, so a value read back equals the value written), serialised as
//! RFC 3339. Records derive serde so the REST API can return them as they are.

use std::collections::BTreeMap;

use chrono::{DateTime, SecondsFormat, Utc};
use ferry_spec::{JobPhase, TrainJob, TrainJobSpec, TrainJobStatus};
use serde::{Deserialize, Serialize};

/// The current time, truncated to the millisecond precision the database keeps.
pub fn now() -> DateTime<Utc> {
    from_millis(Utc::now().timestamp_millis()).unwrap_or_default()
}

/// Milliseconds since the Unix epoch, the form timestamps take in the database.
pub(crate) fn to_millis(t: DateTime<Utc>) -> i64 {
    t.timestamp_millis()
}

/// The inverse of [`to_millis`]; `None` for values outside chrono's range.
pub(crate) fn from_millis(ms: i64) -> Option<DateTime<Utc>> {
    DateTime::from_timestamp_millis(ms)
}

/// RFC 3339 with milliseconds and `Z`, the form used in `TrainJobStatus`.
pub fn rfc3339(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// A stored training job: the spec as applied plus what the control plane observed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JobRecord {
    /// Identifier assigned at creation; stable across renames of nothing (names never change).
    pub uid: String,
    /// `metadata.namespace` of the job.
    pub namespace: String,
    /// `metadata.name` of the job.
    pub name: String,
    /// The document as applied, with `metadata.uid` and `metadata.creationTimestamp`
    /// filled in and `status` left `None` (see [`JobRecord::status`]).
    pub job: TrainJob,
    /// Where the job is in its life.
    pub phase: JobPhase,
    /// Current attempt (0 before the first launch).
    pub attempt: u32,
    /// Restarts so far.
    pub restarts: u32,
    /// Why the job is in its phase.
    pub message: Option<String>,
    /// GPU ids assigned to each rank of the current attempt.
    pub gpus: Vec<Vec<String>>,
    /// Checkpoint the current attempt resumed from.
    pub resumed_from: Option<String>,
    /// When the job was stored.
    pub created_at: DateTime<Utc>,
    /// When the row last changed.
    pub updated_at: DateTime<Utc>,
    /// When the job first became `Running`.
    pub started_at: Option<DateTime<Utc>>,
    /// When the job reached a terminal phase.
    pub finished_at: Option<DateTime<Utc>>,
}

impl JobRecord {
    /// The spec's status block for this record (without `progress`, which comes from
    /// [`crate::Store::latest_metrics`]).
    pub fn status(&self) -> TrainJobStatus {
        TrainJobStatus {
            phase: self.phase,
            message: self.message.clone(),
            restarts: self.restarts,
            attempt: self.attempt,
            gpus: self.gpus.clone(),
            start_time: self.started_at.map(rfc3339),
            completion_time: self.finished_at.map(rfc3339),
            resumed_from: self.resumed_from.clone(),
            progress: None,
            estimated_completion_time: None,
            estimated_start_time: None,
            run_seconds: None,
        }
    }

    /// The full resource as the API shows it: the applied document with its status.
    pub fn to_train_job(&self) -> TrainJob {
        let mut job = self.job.clone();
        job.status = Some(self.status());
        job
    }
}

/// One entry of a job's append-only event log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Event {
    /// Increases with every event in the database; orders events.
    pub id: i64,
    /// The job the event belongs to.
    pub job_uid: String,
    /// When it was recorded.
    pub at: DateTime<Utc>,
    /// The phase before (`None` for the creation event).
    pub from: Option<JobPhase>,
    /// The phase after (equal to `from` for notes).
    pub to: JobPhase,
    /// A short CamelCase reason, e.g. `Admitted`, `RankFailed`, `ControlPlaneRestarted`.
    pub reason: String,
    /// A human sentence with the details.
    pub message: String,
}

/// Fields a transition may change besides the phase; `None` leaves a field as it is.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StatusPatch {
    /// New attempt number.
    pub attempt: Option<u32>,
    /// New restart count.
    pub restarts: Option<u32>,
    /// GPU ids per rank (an empty list clears the assignment).
    pub gpus: Option<Vec<Vec<String>>>,
    /// Checkpoint the attempt resumes from.
    pub resumed_from: Option<String>,
    /// Overrides the start time (set automatically on the first `Running`).
    pub started_at: Option<DateTime<Utc>>,
    /// Overrides the finish time (set automatically on terminal phases).
    pub finished_at: Option<DateTime<Utc>>,
    /// Overrides the job's status message (the transition's message otherwise).
    pub message: Option<String>,
    /// Replaces the stored spec in the same write (metadata is kept), for a phase change the
    /// spec asks for, such as `spec.suspend`.
    pub spec: Option<TrainJobSpec>,
}

/// Which jobs [`crate::Store::list_jobs`] returns.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct JobFilter {
    /// Only this namespace; every namespace when `None`.
    pub namespace: Option<String>,
    /// Only these phases; every phase when empty.
    pub phases: Vec<JobPhase>,
}

impl JobFilter {
    /// Every job that has not ended, in every namespace: what a control plane still acts on.
    pub fn unfinished() -> JobFilter {
        JobFilter {
            namespace: None,
            phases: JobPhase::ALL
                .into_iter()
                .filter(|p| !p.is_terminal())
                .collect(),
        }
    }
}

/// One metrics line an engine printed, as ingested.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MetricRow {
    /// Increases with every row; pass the last one seen as `after_id` to page.
    pub id: i64,
    /// The job the line belongs to.
    pub job_uid: String,
    /// The attempt that printed it.
    pub attempt: u32,
    /// When it was ingested.
    pub at: DateTime<Utc>,
    /// The line's integer `step`, when it has one.
    pub step: Option<i64>,
    /// The whole line (`{"step","loss","lr","grad_norm","tokens_per_s", ...}`).
    pub values: serde_json::Value,
}

/// A generic stored resource (`ModelDeployment`, `Queue`, later kinds).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectRecord {
    /// Identifier assigned at creation; kept across updates.
    pub uid: String,
    /// Resource kind, e.g. `Queue`.
    pub kind: String,
    /// Namespace of the object.
    pub namespace: String,
    /// Name of the object.
    pub name: String,
    /// The document as last put.
    pub doc: serde_json::Value,
    /// 1 at creation, +1 on every update: lets controllers notice new specs.
    pub generation: i64,
    /// When it was created.
    pub created_at: DateTime<Utc>,
    /// When it was last put.
    pub updated_at: DateTime<Utc>,
}

/// A registered model artifact, with the lineage that produced it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ModelRecord {
    /// Unique name, e.g. `qwen-sft-v1`.
    pub name: String,
    /// Where the artifact lives (a directory or an object-store URL).
    pub path: String,
    /// Its format, e.g. `hf-safetensors`, `megatron-torch-dist`, `peft`.
    pub format: String,
    /// The job that produced it, if any.
    pub source_job_uid: Option<String>,
    /// The checkpoint it was exported from, if any.
    pub checkpoint: Option<String>,
    /// When it was registered.
    pub created_at: DateTime<Utc>,
    /// The labels of the job that exported it (`ferry get models -l`), none for a model
    /// registered otherwise.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
}

impl ModelRecord {
    /// A model registered now, with no lineage yet.
    pub fn new(
        name: impl Into<String>,
        path: impl Into<String>,
        format: impl Into<String>,
    ) -> Self {
        Self {
            name: name.into(),
            path: path.into(),
            format: format.into(),
            source_job_uid: None,
            checkpoint: None,
            created_at: now(),
            labels: BTreeMap::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_round_trip_through_millis() {
        let t = now();
        assert_eq!(from_millis(to_millis(t)), Some(t));
        assert_eq!(t.timestamp_subsec_nanos() % 1_000_000, 0);
        let s = rfc3339(from_millis(1_700_000_000_123).unwrap());
        assert_eq!(s, "2023-11-14T22:13:20.123Z");
    }
}
