//! Raw rows as the database returns them, and their checked conversion into records.
//!
//! Rows derive `sqlx::FromRow` generically, so one definition decodes SQLite and
//! Postgres rows alike. Every column that could hold something this release cannot
//! read (a phase name, a JSON document, an out-of-range number) is checked here and
//! reported as [`StoreError::Corrupt`], never unwrapped.

use chrono::{DateTime, Utc};
use ferry_spec::{JobPhase, TrainJob};

use crate::error::{Result, StoreError};
use crate::records::{Event, JobRecord, MetricRow, ModelRecord, ObjectRecord, from_millis};

/// The column list every job query selects, matching [`JobRow`].
macro_rules! job_cols {
    () => {
        "uid, namespace, name, doc, phase, attempt, restarts, message, gpus, resumed_from, \
         created_at, updated_at, started_at, finished_at"
    };
}
pub(crate) use job_cols;

/// The column list every event query selects, matching [`EventRow`].
macro_rules! event_cols {
    () => {
        "id, job_uid, at, from_phase, to_phase, reason, message"
    };
}
pub(crate) use event_cols;

/// The column list every metrics query selects, matching [`MetricDbRow`].
macro_rules! metric_cols {
    () => {
        "id, job_uid, attempt, at, step, doc"
    };
}
pub(crate) use metric_cols;

/// The column list every object query selects, matching [`ObjectRow`].
macro_rules! object_cols {
    () => {
        "uid, kind, namespace, name, doc, generation, created_at, updated_at"
    };
}
pub(crate) use object_cols;

/// The column list every model query selects, matching [`ModelRow`].
macro_rules! model_cols {
    () => {
        "name, path, format, source_job_uid, checkpoint, created_at, labels"
    };
}
pub(crate) use model_cols;

/// Turns stored values into typed ones, naming the row and the database on failure.
pub(crate) struct Decoder<'a> {
    /// The database path or URL, for error messages.
    pub location: &'a str,
}

impl Decoder<'_> {
    fn corrupt(&self, what: impl Into<String>, detail: impl Into<String>) -> StoreError {
        StoreError::Corrupt {
            what: what.into(),
            location: self.location.to_owned(),
            detail: detail.into(),
        }
    }

    pub(crate) fn time(&self, what: &str, ms: i64) -> Result<DateTime<Utc>> {
        from_millis(ms)
            .ok_or_else(|| self.corrupt(what, format!("timestamp {ms} ms is out of range")))
    }

    fn opt_time(&self, what: &str, ms: Option<i64>) -> Result<Option<DateTime<Utc>>> {
        ms.map(|ms| self.time(what, ms)).transpose()
    }

    pub(crate) fn phase(&self, what: &str, text: &str) -> Result<JobPhase> {
        text.parse().map_err(|e: String| self.corrupt(what, e))
    }

    pub(crate) fn count(&self, what: &str, n: i64) -> Result<u32> {
        u32::try_from(n).map_err(|_| self.corrupt(what, format!("{n} is not a count")))
    }

    pub(crate) fn json<T: serde::de::DeserializeOwned>(&self, what: &str, text: &str) -> Result<T> {
        serde_json::from_str(text).map_err(|e| self.corrupt(what, e.to_string()))
    }
}

/// A `jobs` row.
#[derive(sqlx::FromRow)]
pub(crate) struct JobRow {
    uid: String,
    namespace: String,
    name: String,
    doc: String,
    phase: String,
    attempt: i64,
    restarts: i64,
    message: Option<String>,
    gpus: String,
    resumed_from: Option<String>,
    created_at: i64,
    updated_at: i64,
    started_at: Option<i64>,
    finished_at: Option<i64>,
}

impl JobRow {
    pub(crate) fn decode(self, d: &Decoder<'_>) -> Result<JobRecord> {
        let what = |col: &str| format!("job {}/{} column {col}", self.namespace, self.name);
        let job: TrainJob = d.json(&what("doc"), &self.doc)?;
        Ok(JobRecord {
            phase: d.phase(&what("phase"), &self.phase)?,
            attempt: d.count(&what("attempt"), self.attempt)?,
            restarts: d.count(&what("restarts"), self.restarts)?,
            gpus: d.json(&what("gpus"), &self.gpus)?,
            created_at: d.time(&what("created_at"), self.created_at)?,
            updated_at: d.time(&what("updated_at"), self.updated_at)?,
            started_at: d.opt_time(&what("started_at"), self.started_at)?,
            finished_at: d.opt_time(&what("finished_at"), self.finished_at)?,
            job,
            message: self.message,
            resumed_from: self.resumed_from,
            uid: self.uid,
            namespace: self.namespace,
            name: self.name,
        })
    }
}

/// An `events` row.
#[derive(sqlx::FromRow)]
pub(crate) struct EventRow {
    id: i64,
    job_uid: String,
    at: i64,
    from_phase: Option<String>,
    to_phase: String,
    reason: String,
    message: String,
}

impl EventRow {
    pub(crate) fn decode(self, d: &Decoder<'_>) -> Result<Event> {
        let what = format!("event {}", self.id);
        Ok(Event {
            at: d.time(&what, self.at)?,
            from: self
                .from_phase
                .as_deref()
                .map(|p| d.phase(&what, p))
                .transpose()?,
            to: d.phase(&what, &self.to_phase)?,
            id: self.id,
            job_uid: self.job_uid,
            reason: self.reason,
            message: self.message,
        })
    }
}

/// A `metrics` row.
#[derive(sqlx::FromRow)]
pub(crate) struct MetricDbRow {
    id: i64,
    job_uid: String,
    attempt: i64,
    at: i64,
    step: Option<i64>,
    doc: String,
}

impl MetricDbRow {
    pub(crate) fn decode(self, d: &Decoder<'_>) -> Result<MetricRow> {
        let what = format!("metrics row {}", self.id);
        Ok(MetricRow {
            attempt: d.count(&what, self.attempt)?,
            at: d.time(&what, self.at)?,
            values: d.json(&what, &self.doc)?,
            id: self.id,
            job_uid: self.job_uid,
            step: self.step,
        })
    }
}

/// An `objects` row.
#[derive(sqlx::FromRow)]
pub(crate) struct ObjectRow {
    uid: String,
    kind: String,
    namespace: String,
    name: String,
    doc: String,
    generation: i64,
    created_at: i64,
    updated_at: i64,
}

impl ObjectRow {
    pub(crate) fn decode(self, d: &Decoder<'_>) -> Result<ObjectRecord> {
        let what = format!("{} {}/{}", self.kind, self.namespace, self.name);
        Ok(ObjectRecord {
            doc: d.json(&what, &self.doc)?,
            created_at: d.time(&what, self.created_at)?,
            updated_at: d.time(&what, self.updated_at)?,
            uid: self.uid,
            kind: self.kind,
            namespace: self.namespace,
            name: self.name,
            generation: self.generation,
        })
    }
}

/// A `models` row.
#[derive(sqlx::FromRow)]
pub(crate) struct ModelRow {
    name: String,
    path: String,
    format: String,
    source_job_uid: Option<String>,
    checkpoint: Option<String>,
    created_at: i64,
    labels: String,
}

impl ModelRow {
    pub(crate) fn decode(self, d: &Decoder<'_>) -> Result<ModelRecord> {
        Ok(ModelRecord {
            created_at: d.time(&format!("model {}", self.name), self.created_at)?,
            labels: d.json(&format!("model {} labels", self.name), &self.labels)?,
            name: self.name,
            path: self.path,
            format: self.format,
            source_job_uid: self.source_job_uid,
            checkpoint: self.checkpoint,
        })
    }
}
