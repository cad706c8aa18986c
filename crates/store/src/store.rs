//! The `Store` seam: everything the control plane persists goes through this trait.
//!
//! The trait is dyn-compatible (`Arc<dyn Store>`); [`crate::SqlStore`] implements it
//! for SQLite and Postgres. The store holds no business rules beyond the one the
//! brief puts here: a job phase changes only along `ferry_spec::JobPhase::can_become`,
//! atomically with its event.

use async_trait::async_trait;
use ferry_spec::{JobPhase, TrainJob};

use crate::error::Result;
use crate::records::{
    Event, JobFilter, JobRecord, MetricRow, ModelRecord, ObjectRecord, StatusPatch,
};

/// Persistence for jobs, their events, gangs and metrics, generic objects and models.
#[async_trait]
pub trait Store: Send + Sync {
    /// Stores a new job in phase `Pending` with a fresh uid and its first event
    /// (`None → Pending`, with `reason`), in one transaction. A taken
    /// `(namespace, name)` gives [`crate::StoreError::AlreadyExists`].
    async fn create_job(&self, job: &TrainJob, reason: &str) -> Result<JobRecord>;

    /// The job named `name` in `namespace`, if any.
    async fn get_job(&self, namespace: &str, name: &str) -> Result<Option<JobRecord>>;

    /// The job with this uid, if any.
    async fn get_job_by_uid(&self, uid: &str) -> Result<Option<JobRecord>>;

    /// Jobs matching `filter`, oldest first.
    async fn list_jobs(&self, filter: &JobFilter) -> Result<Vec<JobRecord>>;

    /// Deletes a finished job with its events, gang and metrics. `Ok(false)` when no
    /// job has this uid; [`crate::StoreError::NotDeletable`] when it is not terminal.
    async fn delete_job(&self, uid: &str) -> Result<bool>;

    /// Moves a job `from → to` in one transaction: checks the state machine, does a
    /// compare-and-set on the phase ([`crate::StoreError::Conflict`] when the job is
    /// no longer in `from`), applies `patch` (a new spec included), sets `finished_at` on terminal phases
    /// and `started_at` on the first `Running`, and appends the event.
    async fn transition(
        &self,
        uid: &str,
        from: JobPhase,
        to: JobPhase,
        reason: &str,
        message: &str,
        patch: StatusPatch,
    ) -> Result<JobRecord>;

    /// Replaces the stored spec of a job that is still in phase `phase` (a compare-and-set,
    /// [`crate::StoreError::Conflict`] otherwise) and appends an event (`reason`, `message`)
    /// without a phase change, in one transaction. Callers decide which fields may change
    /// (the API allows the time limits only); a job that has ended is never changed.
    async fn replace_spec(
        &self,
        uid: &str,
        phase: JobPhase,
        job: &TrainJob,
        reason: &str,
        message: &str,
    ) -> Result<JobRecord>;

    /// Appends an event without a phase change (`from = to =` the current phase),
    /// e.g. `ControlPlaneRestarted`.
    async fn note(&self, uid: &str, reason: &str, message: &str) -> Result<Event>;

    /// The job's events, oldest first.
    async fn events(&self, uid: &str) -> Result<Vec<Event>>;

    /// Records the runtime's description of an attempt's ranks (pids, start times,
    /// log paths), replacing the previous attempt's, so a restarted control plane
    /// can re-adopt the processes.
    async fn put_gang(&self, uid: &str, attempt: u32, gang: &serde_json::Value) -> Result<()>;

    /// The last gang record put for the job, with its attempt.
    async fn get_gang(&self, uid: &str) -> Result<Option<(u32, serde_json::Value)>>;

    /// Appends metrics lines an engine printed during `attempt`.
    async fn append_metrics(
        &self,
        uid: &str,
        attempt: u32,
        lines: &[serde_json::Value],
    ) -> Result<()>;

    /// Up to `limit` metrics rows with id greater than `after_id`, oldest first.
    async fn metrics(&self, uid: &str, after_id: i64, limit: u32) -> Result<Vec<MetricRow>>;

    /// The newest metrics row of the job.
    async fn latest_metrics(&self, uid: &str) -> Result<Option<MetricRow>>;

    /// Creates or replaces a generic object. With `create_only`, an existing object
    /// gives [`crate::StoreError::AlreadyExists`]; otherwise an update keeps the uid
    /// and creation time and increments the generation.
    async fn put_object(
        &self,
        kind: &str,
        namespace: &str,
        name: &str,
        doc: &serde_json::Value,
        create_only: bool,
    ) -> Result<ObjectRecord>;

    /// One generic object, if it exists.
    async fn get_object(
        &self,
        kind: &str,
        namespace: &str,
        name: &str,
    ) -> Result<Option<ObjectRecord>>;

    /// Objects of a kind, in one namespace or all, oldest first.
    async fn list_objects(&self, kind: &str, namespace: Option<&str>) -> Result<Vec<ObjectRecord>>;

    /// Moves a generic object to `to_namespace`, its document replaced by `doc` (the same
    /// object, e.g. without the namespace it named), keeping its uid, generation and times: a
    /// change of where it is kept, not an update. `Ok(None)` when it does not exist; a taken
    /// target gives [`crate::StoreError::AlreadyExists`].
    async fn move_object(
        &self,
        kind: &str,
        namespace: &str,
        name: &str,
        to_namespace: &str,
        doc: &serde_json::Value,
    ) -> Result<Option<ObjectRecord>>;

    /// Deletes a generic object; `Ok(false)` when it did not exist.
    async fn delete_object(&self, kind: &str, namespace: &str, name: &str) -> Result<bool>;

    /// Registers a model artifact; a taken name gives [`crate::StoreError::AlreadyExists`].
    async fn register_model(&self, model: &ModelRecord) -> Result<ModelRecord>;

    /// One registered model, if it exists.
    async fn get_model(&self, name: &str) -> Result<Option<ModelRecord>>;

    /// Every registered model, oldest first.
    async fn list_models(&self) -> Result<Vec<ModelRecord>>;

    /// Unregisters a model (the row only: its files are the caller's); `Ok(false)` when no
    /// model has this name. The name may be registered again afterwards.
    async fn delete_model(&self, name: &str) -> Result<bool>;

    /// The newest applied schema migration (for `ferry version` and health checks).
    async fn schema_version(&self) -> Result<i64>;

    /// Where the data lives (path or URL, without passwords), for logs and errors.
    fn location(&self) -> &str;

    /// Closes the connections gracefully; later calls fail.
    async fn close(&self);
}
