//! Ferry's metadata store: jobs and their append-only event log, gang records for
//! re-adopting processes, ingested metrics, generic objects (deployments, queues)
//! and the model registry, on SQLite (default, `$FERRY_HOME/ferry.db`) or Postgres.
//!
//! Start with [`open`], which returns the [`Store`] trait object the control plane
//! holds. Every job phase change goes through [`Store::transition`]: one transaction
//! that checks the state machine, compare-and-sets the phase and appends the event.
#![forbid(unsafe_code)]

mod error;
mod records;
mod sql;
mod store;

pub use error::{Result, StoreError};
pub use records::{
    Event, JobFilter, JobRecord, MetricRow, ModelRecord, ObjectRecord, StatusPatch, now, rfc3339,
};
pub use sql::{MAX_METRICS_PAGE, SqlStore};
pub use store::Store;

use std::path::Path;
use std::sync::Arc;

/// Opens the store named by `url_or_path`: `postgres://…` or `postgresql://…` connects
/// to Postgres; `sqlite::memory:` is a private in-memory database; `sqlite://PATH`,
/// `sqlite:PATH` or a plain path opens (creating) a SQLite file.
pub async fn open(url_or_path: &str) -> Result<Arc<dyn Store>> {
    let store =
        if url_or_path.starts_with("postgres://") || url_or_path.starts_with("postgresql://") {
            SqlStore::connect_postgres(url_or_path).await?
        } else if url_or_path == "sqlite::memory:" {
            SqlStore::in_memory().await?
        } else {
            let path = url_or_path
                .strip_prefix("sqlite://")
                .or_else(|| url_or_path.strip_prefix("sqlite:"))
                .unwrap_or(url_or_path);
            let path = path.split_once('?').map_or(path, |(p, _)| p);
            SqlStore::open_sqlite(Path::new(path)).await?
        };
    Ok(Arc::new(store))
}
