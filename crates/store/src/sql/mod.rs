//! [`SqlStore`]: the [`Store`] on SQLite (the default, one file) or Postgres (at scale).
//!
//! Both backends run the *same* SQL text: placeholders are `$1, $2, …` (SQLite reads
//! them as numbered parameters), timestamps are integer milliseconds, JSON is text,
//! and upserts use `ON CONFLICT … DO UPDATE`, which both understand. The [`on_db!`]
//! macro expands one body once per backend so each runs on its native driver with
//! its own types; only the migrations differ (identity columns).
//!
//! Every write transaction starts by taking the write lock (`BEGIN IMMEDIATE` on
//! SQLite) so concurrent writers queue on the busy timeout instead of failing with a
//! stale snapshot, and every phase change is a compare-and-set `UPDATE … WHERE phase
//! = $from` in the same transaction as its event.

mod rows;

use std::path::Path;
use std::str::FromStr;
use std::time::Duration;

use async_trait::async_trait;
use ferry_spec::{JobPhase, TrainJob};
use sqlx::migrate::Migrator;
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};
use sqlx::{AssertSqlSafe, Postgres, Sqlite, Transaction};
use uuid::Uuid;

use crate::error::{Result, StoreError};
use crate::records::{
    Event, JobFilter, JobRecord, MetricRow, ModelRecord, ObjectRecord, StatusPatch, now, rfc3339,
    to_millis,
};
use crate::store::Store;
use rows::{
    Decoder, EventRow, JobRow, MetricDbRow, ModelRow, ObjectRow, event_cols, job_cols, metric_cols,
    model_cols, object_cols,
};

/// Schema migrations for SQLite, embedded in the binary.
static SQLITE_MIGRATIONS: Migrator = sqlx::migrate!("./migrations/sqlite");
/// Schema migrations for Postgres, embedded in the binary.
static POSTGRES_MIGRATIONS: Migrator = sqlx::migrate!("./migrations/postgres");

/// How long a writer waits for SQLite's write lock before giving up.
const SQLITE_BUSY_TIMEOUT: Duration = Duration::from_secs(30);
/// The most metrics rows one [`Store::metrics`] call returns.
pub const MAX_METRICS_PAGE: u32 = 10_000;

/// A connection pool of either backend.
enum Pool {
    Sqlite(SqlitePool),
    Postgres(PgPool),
}

/// Runs `$body` with `$db` bound to the concrete pool of whichever backend is open.
/// The body is compiled once per backend, so it may use backend-specific types.
macro_rules! on_db {
    ($pool:expr, |$db:ident| $body:expr) => {
        match $pool {
            Pool::Sqlite($db) => $body,
            Pool::Postgres($db) => $body,
        }
    };
}

/// Appends an event row inside transaction `$tx` (`$from`: `Option<&str>`, `None` for a job's
/// first event); the one statement of how an event is written, for either backend.
macro_rules! append_event {
    ($tx:expr, $uid:expr, $at:expr, $from:expr, $to:expr, $reason:expr, $message:expr) => {
        sqlx::query(
            "INSERT INTO events (job_uid, at, from_phase, to_phase, reason, message) \
             VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .bind($uid)
        .bind($at)
        .bind($from)
        .bind($to)
        .bind($reason)
        .bind($message)
        .execute(&mut *$tx)
        .await
    };
}

/// Starting a transaction that already holds the write lock.
trait BeginWrite {
    /// The backend.
    type Db: sqlx::Database;
    /// `BEGIN IMMEDIATE` on SQLite, `BEGIN` on Postgres (row locks suffice there).
    async fn begin_write(&self) -> Result<Transaction<'static, Self::Db>, sqlx::Error>;
}

impl BeginWrite for SqlitePool {
    type Db = Sqlite;
    async fn begin_write(&self) -> Result<Transaction<'static, Sqlite>, sqlx::Error> {
        self.begin_with("BEGIN IMMEDIATE").await
    }
}

impl BeginWrite for PgPool {
    type Db = Postgres;
    async fn begin_write(&self) -> Result<Transaction<'static, Postgres>, sqlx::Error> {
        self.begin().await
    }
}

/// The [`Store`] on SQLite or Postgres; construct with [`SqlStore::open_sqlite`],
/// [`SqlStore::connect_postgres`] or [`crate::open`].
pub struct SqlStore {
    pool: Pool,
    location: String,
}

impl SqlStore {
    /// Opens (creating it and its directory if needed) the SQLite database at `path`,
    /// with WAL journaling, `synchronous=FULL`, foreign keys on and a busy timeout,
    /// and applies pending migrations.
    pub async fn open_sqlite(path: &Path) -> Result<Self> {
        let location = path.display().to_string();
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|source| StoreError::Io {
                path: dir.display().to_string(),
                source,
            })?;
        }
        let options = SqliteConnectOptions::new()
            .filename(path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Full)
            .foreign_keys(true)
            .busy_timeout(SQLITE_BUSY_TIMEOUT);
        let pool = SqlitePoolOptions::new()
            .max_connections(4)
            .connect_with(options)
            .await
            .map_err(|source| StoreError::Database {
                location: location.clone(),
                source,
            })?;
        Self::migrated(Pool::Sqlite(pool), location).await
    }

    /// A private SQLite database in memory, for unit tests; gone when dropped.
    pub async fn in_memory() -> Result<Self> {
        let location = "sqlite::memory:".to_owned();
        let options = SqliteConnectOptions::from_str(&location)
            .map_err(|source| StoreError::Database {
                location: location.clone(),
                source,
            })?
            .foreign_keys(true);
        // One connection that never expires: each in-memory connection is its own database.
        let pool = SqlitePoolOptions::new()
            .max_connections(1)
            .min_connections(1)
            .idle_timeout(None)
            .max_lifetime(None)
            .connect_with(options)
            .await
            .map_err(|source| StoreError::Database {
                location: location.clone(),
                source,
            })?;
        Self::migrated(Pool::Sqlite(pool), location).await
    }

    /// Connects to Postgres at `url` (`postgres://user:pass@host:port/db`) and applies
    /// pending migrations (serialised across processes by an advisory lock).
    pub async fn connect_postgres(url: &str) -> Result<Self> {
        let location = redact_password(url);
        let options = PgConnectOptions::from_str(url).map_err(|source| StoreError::Database {
            location: location.clone(),
            source,
        })?;
        let pool = PgPoolOptions::new()
            .max_connections(8)
            .acquire_timeout(Duration::from_secs(30))
            .connect_with(options)
            .await
            .map_err(|source| StoreError::Database {
                location: location.clone(),
                source,
            })?;
        Self::migrated(Pool::Postgres(pool), location).await
    }

    async fn migrated(pool: Pool, location: String) -> Result<Self> {
        let migrated = match &pool {
            Pool::Sqlite(p) => SQLITE_MIGRATIONS.run(p).await,
            Pool::Postgres(p) => POSTGRES_MIGRATIONS.run(p).await,
        };
        migrated.map_err(|source| StoreError::Migration {
            location: location.clone(),
            source,
        })?;
        Ok(Self { pool, location })
    }

    /// Wraps a driver error with the database location.
    fn db(&self) -> impl Fn(sqlx::Error) -> StoreError + '_ {
        move |source| StoreError::Database {
            location: self.location.clone(),
            source,
        }
    }

    fn decoder(&self) -> Decoder<'_> {
        Decoder {
            location: &self.location,
        }
    }

    /// `namespace/name` of a job for messages, or `uid …` when it is gone.
    async fn job_label(&self, uid: &str) -> String {
        match self.get_job_by_uid(uid).await {
            Ok(Some(job)) => format!("{}/{}", job.namespace, job.name),
            _ => format!("uid {uid}"),
        }
    }
}

/// Serialises a document for a text column.
fn to_json_text(what: &str, value: &impl serde::Serialize) -> Result<String> {
    serde_json::to_string(value).map_err(|e| StoreError::InvalidInput {
        what: what.to_owned(),
        detail: format!("it does not serialise as JSON ({e})"),
    })
}

fn is_unique_violation(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Database(d) if d.is_unique_violation())
}

fn is_foreign_key_violation(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Database(d) if d.is_foreign_key_violation())
}

fn job_not_found(uid: &str) -> StoreError {
    StoreError::NotFound {
        kind: "TrainJob".into(),
        id: format!("uid {uid}"),
    }
}

/// Replaces the password of a `scheme://user:password@host/…` URL with `***`.
pub(crate) fn redact_password(url: &str) -> String {
    let Some(scheme_end) = url.find("://") else {
        return url.to_owned();
    };
    let rest = &url[scheme_end + 3..];
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let authority = &rest[..authority_end];
    let Some(at) = authority.rfind('@') else {
        return url.to_owned();
    };
    let userinfo = &authority[..at];
    match userinfo.find(':') {
        Some(colon) => format!(
            "{}{}:***{}",
            &url[..scheme_end + 3],
            &userinfo[..colon],
            &rest[at..]
        ),
        None => url.to_owned(),
    }
}

#[async_trait]
impl Store for SqlStore {
    async fn create_job(&self, job: &TrainJob, reason: &str) -> Result<JobRecord> {
        let uid = Uuid::new_v4().to_string();
        let at = now();
        let mut doc = job.clone();
        doc.status = None;
        doc.metadata.uid = Some(uid.clone());
        doc.metadata.creation_timestamp = Some(rfc3339(at));
        let (namespace, name) = (doc.metadata.namespace.clone(), doc.metadata.name.clone());
        let text = to_json_text(&format!("TrainJob {namespace}/{name}"), &doc)?;
        let message = format!("TrainJob {namespace}/{name} stored");
        let row: JobRow = on_db!(&self.pool, |db| {
            let mut tx = db.begin_write().await.map_err(self.db())?;
            let inserted = sqlx::query_as(concat!(
                "INSERT INTO jobs (uid, namespace, name, doc, phase, created_at, updated_at) \
                 VALUES ($1, $2, $3, $4, $5, $6, $6) RETURNING ",
                job_cols!()
            ))
            .bind(&uid)
            .bind(&namespace)
            .bind(&name)
            .bind(&text)
            .bind(JobPhase::Pending.as_str())
            .bind(to_millis(at))
            .fetch_one(&mut *tx)
            .await;
            let row = match inserted {
                Ok(row) => row,
                Err(e) if is_unique_violation(&e) => {
                    return Err(StoreError::AlreadyExists {
                        kind: "TrainJob".into(),
                        namespace,
                        name,
                    });
                }
                Err(e) => return Err(self.db()(e)),
            };
            append_event!(
                tx,
                &uid,
                to_millis(at),
                None::<&str>,
                JobPhase::Pending.as_str(),
                reason,
                &message
            )
            .map_err(self.db())?;
            tx.commit().await.map_err(self.db())?;
            row
        });
        row.decode(&self.decoder())
    }

    async fn get_job(&self, namespace: &str, name: &str) -> Result<Option<JobRecord>> {
        let row: Option<JobRow> = on_db!(&self.pool, |db| {
            sqlx::query_as(concat!(
                "SELECT ",
                job_cols!(),
                " FROM jobs WHERE namespace = $1 AND name = $2"
            ))
            .bind(namespace)
            .bind(name)
            .fetch_optional(db)
            .await
            .map_err(self.db())?
        });
        row.map(|r| r.decode(&self.decoder())).transpose()
    }

    async fn get_job_by_uid(&self, uid: &str) -> Result<Option<JobRecord>> {
        let row: Option<JobRow> = on_db!(&self.pool, |db| {
            sqlx::query_as(concat!("SELECT ", job_cols!(), " FROM jobs WHERE uid = $1"))
                .bind(uid)
                .fetch_optional(db)
                .await
                .map_err(self.db())?
        });
        row.map(|r| r.decode(&self.decoder())).transpose()
    }

    async fn list_jobs(&self, filter: &JobFilter) -> Result<Vec<JobRecord>> {
        let mut sql = String::from(concat!("SELECT ", job_cols!(), " FROM jobs WHERE 1 = 1"));
        let mut n = 0;
        if filter.namespace.is_some() {
            n += 1;
            sql.push_str(&format!(" AND namespace = ${n}"));
        }
        if !filter.phases.is_empty() {
            let placeholders: Vec<String> = filter
                .phases
                .iter()
                .map(|_| {
                    n += 1;
                    format!("${n}")
                })
                .collect();
            sql.push_str(&format!(" AND phase IN ({})", placeholders.join(", ")));
        }
        sql.push_str(" ORDER BY seq");
        let rows: Vec<JobRow> = on_db!(&self.pool, |db| {
            let mut query = sqlx::query_as(AssertSqlSafe(sql));
            if let Some(namespace) = &filter.namespace {
                query = query.bind(namespace);
            }
            for phase in &filter.phases {
                query = query.bind(phase.as_str());
            }
            query.fetch_all(db).await.map_err(self.db())?
        });
        let decoder = self.decoder();
        rows.into_iter().map(|r| r.decode(&decoder)).collect()
    }

    async fn delete_job(&self, uid: &str) -> Result<bool> {
        let blocker: Option<(String, String, String)> = on_db!(&self.pool, |db| {
            let mut tx = db.begin_write().await.map_err(self.db())?;
            let deleted = sqlx::query("DELETE FROM jobs WHERE uid = $1 AND phase IN ($2, $3, $4)")
                .bind(uid)
                .bind(JobPhase::Succeeded.as_str())
                .bind(JobPhase::Failed.as_str())
                .bind(JobPhase::Cancelled.as_str())
                .execute(&mut *tx)
                .await
                .map_err(self.db())?;
            if deleted.rows_affected() == 1 {
                tx.commit().await.map_err(self.db())?;
                return Ok(true);
            }
            sqlx::query_as("SELECT namespace, name, phase FROM jobs WHERE uid = $1")
                .bind(uid)
                .fetch_optional(&mut *tx)
                .await
                .map_err(self.db())?
        });
        let Some((namespace, name, phase)) = blocker else {
            return Ok(false);
        };
        let job = format!("{namespace}/{name}");
        let phase = self.decoder().phase(&job, &phase)?;
        Err(StoreError::NotDeletable { job, name, phase })
    }

    async fn transition(
        &self,
        uid: &str,
        from: JobPhase,
        to: JobPhase,
        reason: &str,
        message: &str,
        patch: StatusPatch,
    ) -> Result<JobRecord> {
        if let Err(source) = from.check(to) {
            return Err(StoreError::IllegalTransition {
                job: self.job_label(uid).await,
                source,
            });
        }
        let at = now();
        let gpus = patch
            .gpus
            .as_ref()
            .map(|g| to_json_text("gpus", g))
            .transpose()?;
        let auto_start = (to == JobPhase::Running).then(|| to_millis(at));
        let finished = patch
            .finished_at
            .map(to_millis)
            .or_else(|| to.is_terminal().then(|| to_millis(at)));
        let status_message = patch
            .message
            .clone()
            .or_else(|| (!message.is_empty()).then(|| message.to_owned()));
        // A new spec keeps the stored metadata (which never changes); the phase's
        // compare-and-set below makes the write conditional as for any transition.
        let doc = match &patch.spec {
            None => None,
            Some(spec) => {
                let Some(current) = self.get_job_by_uid(uid).await? else {
                    return Err(job_not_found(uid));
                };
                let mut doc = current.job;
                doc.spec = spec.clone();
                doc.status = None;
                let label = format!("TrainJob {}/{}", doc.metadata.namespace, doc.metadata.name);
                Some(to_json_text(&label, &doc)?)
            }
        };
        let outcome: std::result::Result<JobRow, Option<(String, String, String)>> =
            on_db!(&self.pool, |db| {
                let mut tx = db.begin_write().await.map_err(self.db())?;
                let updated: Option<JobRow> = sqlx::query_as(concat!(
                    "UPDATE jobs SET phase = $3, \
                     attempt = COALESCE($4, attempt), \
                     restarts = COALESCE($5, restarts), \
                     gpus = COALESCE($6, gpus), \
                     resumed_from = COALESCE($7, resumed_from), \
                     started_at = COALESCE($8, started_at, $9), \
                     finished_at = COALESCE($10, finished_at), \
                     message = $11, \
                     updated_at = $12, \
                     doc = COALESCE($13, doc) \
                     WHERE uid = $1 AND phase = $2 RETURNING ",
                    job_cols!()
                ))
                .bind(uid)
                .bind(from.as_str())
                .bind(to.as_str())
                .bind(patch.attempt.map(i64::from))
                .bind(patch.restarts.map(i64::from))
                .bind(gpus.as_deref())
                .bind(patch.resumed_from.as_deref())
                .bind(patch.started_at.map(to_millis))
                .bind(auto_start)
                .bind(finished)
                .bind(status_message.as_deref())
                .bind(to_millis(at))
                .bind(doc.as_deref())
                .fetch_optional(&mut *tx)
                .await
                .map_err(self.db())?;
                match updated {
                    Some(row) => {
                        append_event!(
                            tx,
                            uid,
                            to_millis(at),
                            Some(from.as_str()),
                            to.as_str(),
                            reason,
                            message
                        )
                        .map_err(self.db())?;
                        tx.commit().await.map_err(self.db())?;
                        Ok(row)
                    }
                    None => Err(sqlx::query_as(
                        "SELECT namespace, name, phase FROM jobs WHERE uid = $1",
                    )
                    .bind(uid)
                    .fetch_optional(&mut *tx)
                    .await
                    .map_err(self.db())?),
                }
            });
        match outcome {
            Ok(row) => row.decode(&self.decoder()),
            Err(None) => Err(job_not_found(uid)),
            Err(Some((namespace, name, actual))) => {
                let actual = self
                    .decoder()
                    .phase(&format!("{namespace}/{name}"), &actual)?;
                Err(StoreError::Conflict {
                    namespace,
                    name,
                    expected: from,
                    actual,
                })
            }
        }
    }

    async fn replace_spec(
        &self,
        uid: &str,
        phase: JobPhase,
        job: &TrainJob,
        reason: &str,
        message: &str,
    ) -> Result<JobRecord> {
        let Some(current) = self.get_job_by_uid(uid).await? else {
            return Err(job_not_found(uid));
        };
        if phase.is_terminal() {
            let m = &current.job.metadata;
            return Err(StoreError::InvalidInput {
                what: format!("TrainJob {}/{}", m.namespace, m.name),
                detail: format!(
                    "it has ended ({phase}) and an ended job's spec does not change; apply it \
                     under a new metadata.name"
                ),
            });
        }
        let mut doc = job.clone();
        doc.status = None;
        doc.metadata = current.job.metadata.clone();
        let label = format!("TrainJob {}/{}", doc.metadata.namespace, doc.metadata.name);
        let text = to_json_text(&label, &doc)?;
        let at = to_millis(now());
        let updated: Option<JobRow> = on_db!(&self.pool, |db| {
            let mut tx = db.begin_write().await.map_err(self.db())?;
            let row: Option<JobRow> = sqlx::query_as(concat!(
                "UPDATE jobs SET doc = $3, updated_at = $4 WHERE uid = $1 AND phase = $2 RETURNING ",
                job_cols!()
            ))
            .bind(uid)
            .bind(phase.as_str())
            .bind(&text)
            .bind(at)
            .fetch_optional(&mut *tx)
            .await
            .map_err(self.db())?;
            if row.is_some() {
                append_event!(
                    tx,
                    uid,
                    at,
                    Some(phase.as_str()),
                    phase.as_str(),
                    reason,
                    message
                )
                .map_err(self.db())?;
                tx.commit().await.map_err(self.db())?;
            }
            row
        });
        match updated {
            Some(row) => row.decode(&self.decoder()),
            None => {
                let now = self
                    .get_job_by_uid(uid)
                    .await?
                    .ok_or_else(|| job_not_found(uid))?;
                Err(StoreError::Conflict {
                    namespace: now.job.metadata.namespace,
                    name: now.job.metadata.name,
                    expected: phase,
                    actual: now.phase,
                })
            }
        }
    }

    async fn note(&self, uid: &str, reason: &str, message: &str) -> Result<Event> {
        let row: Option<EventRow> = on_db!(&self.pool, |db| {
            sqlx::query_as(concat!(
                "INSERT INTO events (job_uid, at, from_phase, to_phase, reason, message) \
                 SELECT uid, $2, phase, phase, $3, $4 FROM jobs WHERE uid = $1 RETURNING ",
                event_cols!()
            ))
            .bind(uid)
            .bind(to_millis(now()))
            .bind(reason)
            .bind(message)
            .fetch_optional(db)
            .await
            .map_err(self.db())?
        });
        row.ok_or_else(|| job_not_found(uid))?
            .decode(&self.decoder())
    }

    async fn events(&self, uid: &str) -> Result<Vec<Event>> {
        let rows: Vec<EventRow> = on_db!(&self.pool, |db| {
            sqlx::query_as(concat!(
                "SELECT ",
                event_cols!(),
                " FROM events WHERE job_uid = $1 ORDER BY id"
            ))
            .bind(uid)
            .fetch_all(db)
            .await
            .map_err(self.db())?
        });
        let decoder = self.decoder();
        rows.into_iter().map(|r| r.decode(&decoder)).collect()
    }

    async fn put_gang(&self, uid: &str, attempt: u32, gang: &serde_json::Value) -> Result<()> {
        let text = to_json_text("gang record", gang)?;
        let result = on_db!(&self.pool, |db| {
            sqlx::query(
                "INSERT INTO gangs (job_uid, attempt, doc, updated_at) VALUES ($1, $2, $3, $4) \
                 ON CONFLICT (job_uid) DO UPDATE SET attempt = excluded.attempt, \
                 doc = excluded.doc, updated_at = excluded.updated_at",
            )
            .bind(uid)
            .bind(i64::from(attempt))
            .bind(&text)
            .bind(to_millis(now()))
            .execute(db)
            .await
            .map(|_| ())
        });
        match result {
            Err(e) if is_foreign_key_violation(&e) => Err(job_not_found(uid)),
            other => other.map_err(self.db()),
        }
    }

    async fn get_gang(&self, uid: &str) -> Result<Option<(u32, serde_json::Value)>> {
        let row: Option<(i64, String)> = on_db!(&self.pool, |db| {
            sqlx::query_as("SELECT attempt, doc FROM gangs WHERE job_uid = $1")
                .bind(uid)
                .fetch_optional(db)
                .await
                .map_err(self.db())?
        });
        let Some((attempt, doc)) = row else {
            return Ok(None);
        };
        let decoder = self.decoder();
        let what = format!("gang of job uid {uid}");
        Ok(Some((
            decoder.count(&what, attempt)?,
            decoder.json(&what, &doc)?,
        )))
    }

    async fn append_metrics(
        &self,
        uid: &str,
        attempt: u32,
        lines: &[serde_json::Value],
    ) -> Result<()> {
        if lines.is_empty() {
            return Ok(());
        }
        let at = to_millis(now());
        let rows = lines
            .iter()
            .map(|line| {
                let step = line.get("step").and_then(serde_json::Value::as_i64);
                to_json_text("metrics line", line).map(|text| (step, text))
            })
            .collect::<Result<Vec<_>>>()?;
        let result: std::result::Result<(), sqlx::Error> = on_db!(&self.pool, |db| {
            let mut tx = db.begin_write().await.map_err(self.db())?;
            for (step, text) in &rows {
                let inserted = sqlx::query(
                    "INSERT INTO metrics (job_uid, attempt, at, step, doc) VALUES ($1, $2, $3, $4, $5)",
                )
                .bind(uid)
                .bind(i64::from(attempt))
                .bind(at)
                .bind(*step)
                .bind(text)
                .execute(&mut *tx)
                .await;
                if let Err(e) = inserted {
                    if is_foreign_key_violation(&e) {
                        return Err(job_not_found(uid));
                    }
                    return Err(self.db()(e));
                }
            }
            tx.commit().await
        });
        match result {
            Err(e) if is_foreign_key_violation(&e) => Err(job_not_found(uid)),
            other => other.map_err(self.db()),
        }
    }

    async fn metrics(&self, uid: &str, after_id: i64, limit: u32) -> Result<Vec<MetricRow>> {
        let limit = i64::from(limit.min(MAX_METRICS_PAGE));
        let rows: Vec<MetricDbRow> = on_db!(&self.pool, |db| {
            sqlx::query_as(concat!(
                "SELECT ",
                metric_cols!(),
                " FROM metrics WHERE job_uid = $1 AND id > $2 ORDER BY id LIMIT $3"
            ))
            .bind(uid)
            .bind(after_id)
            .bind(limit)
            .fetch_all(db)
            .await
            .map_err(self.db())?
        });
        let decoder = self.decoder();
        rows.into_iter().map(|r| r.decode(&decoder)).collect()
    }

    async fn latest_metrics(&self, uid: &str) -> Result<Option<MetricRow>> {
        let row: Option<MetricDbRow> = on_db!(&self.pool, |db| {
            sqlx::query_as(concat!(
                "SELECT ",
                metric_cols!(),
                " FROM metrics WHERE job_uid = $1 ORDER BY id DESC LIMIT 1"
            ))
            .bind(uid)
            .fetch_optional(db)
            .await
            .map_err(self.db())?
        });
        row.map(|r| r.decode(&self.decoder())).transpose()
    }

    async fn put_object(
        &self,
        kind: &str,
        namespace: &str,
        name: &str,
        doc: &serde_json::Value,
        create_only: bool,
    ) -> Result<ObjectRecord> {
        let text = to_json_text(&format!("{kind} {namespace}/{name}"), doc)?;
        let at = to_millis(now());
        let uid = Uuid::new_v4().to_string();
        let result: std::result::Result<ObjectRow, sqlx::Error> = on_db!(&self.pool, |db| {
            let query = if create_only {
                sqlx::query_as(concat!(
                    "INSERT INTO objects (uid, kind, namespace, name, doc, generation, created_at, updated_at) \
                     VALUES ($1, $2, $3, $4, $5, 1, $6, $6) RETURNING ",
                    object_cols!()
                ))
            } else {
                sqlx::query_as(concat!(
                    "INSERT INTO objects (uid, kind, namespace, name, doc, generation, created_at, updated_at) \
                     VALUES ($1, $2, $3, $4, $5, 1, $6, $6) \
                     ON CONFLICT (kind, namespace, name) DO UPDATE SET doc = excluded.doc, \
                     generation = objects.generation + 1, updated_at = excluded.updated_at \
                     RETURNING ",
                    object_cols!()
                ))
            };
            query
                .bind(&uid)
                .bind(kind)
                .bind(namespace)
                .bind(name)
                .bind(&text)
                .bind(at)
                .fetch_one(db)
                .await
        });
        match result {
            Ok(row) => row.decode(&self.decoder()),
            Err(e) if is_unique_violation(&e) => Err(StoreError::AlreadyExists {
                kind: kind.to_owned(),
                namespace: namespace.to_owned(),
                name: name.to_owned(),
            }),
            Err(e) => Err(self.db()(e)),
        }
    }

    async fn get_object(
        &self,
        kind: &str,
        namespace: &str,
        name: &str,
    ) -> Result<Option<ObjectRecord>> {
        let row: Option<ObjectRow> = on_db!(&self.pool, |db| {
            sqlx::query_as(concat!(
                "SELECT ",
                object_cols!(),
                " FROM objects WHERE kind = $1 AND namespace = $2 AND name = $3"
            ))
            .bind(kind)
            .bind(namespace)
            .bind(name)
            .fetch_optional(db)
            .await
            .map_err(self.db())?
        });
        row.map(|r| r.decode(&self.decoder())).transpose()
    }

    async fn list_objects(&self, kind: &str, namespace: Option<&str>) -> Result<Vec<ObjectRecord>> {
        let rows: Vec<ObjectRow> = on_db!(&self.pool, |db| {
            let fetched = match namespace {
                Some(namespace) => {
                    sqlx::query_as(concat!(
                        "SELECT ",
                        object_cols!(),
                        " FROM objects WHERE kind = $1 AND namespace = $2 ORDER BY seq"
                    ))
                    .bind(kind)
                    .bind(namespace)
                    .fetch_all(db)
                    .await
                }
                None => {
                    sqlx::query_as(concat!(
                        "SELECT ",
                        object_cols!(),
                        " FROM objects WHERE kind = $1 ORDER BY seq"
                    ))
                    .bind(kind)
                    .fetch_all(db)
                    .await
                }
            };
            fetched.map_err(self.db())?
        });
        let decoder = self.decoder();
        rows.into_iter().map(|r| r.decode(&decoder)).collect()
    }

    async fn move_object(
        &self,
        kind: &str,
        namespace: &str,
        name: &str,
        to_namespace: &str,
        doc: &serde_json::Value,
    ) -> Result<Option<ObjectRecord>> {
        let text = to_json_text(&format!("{kind} {to_namespace}/{name}"), doc)?;
        let result: std::result::Result<Option<ObjectRow>, sqlx::Error> =
            on_db!(&self.pool, |db| {
                sqlx::query_as(concat!(
                    "UPDATE objects SET namespace = $4, doc = $5 \
                     WHERE kind = $1 AND namespace = $2 AND name = $3 RETURNING ",
                    object_cols!()
                ))
                .bind(kind)
                .bind(namespace)
                .bind(name)
                .bind(to_namespace)
                .bind(&text)
                .fetch_optional(db)
                .await
            });
        match result {
            Ok(row) => row.map(|r| r.decode(&self.decoder())).transpose(),
            Err(e) if is_unique_violation(&e) => Err(StoreError::AlreadyExists {
                kind: kind.to_owned(),
                namespace: to_namespace.to_owned(),
                name: name.to_owned(),
            }),
            Err(e) => Err(self.db()(e)),
        }
    }

    async fn delete_object(&self, kind: &str, namespace: &str, name: &str) -> Result<bool> {
        let affected = on_db!(&self.pool, |db| {
            sqlx::query("DELETE FROM objects WHERE kind = $1 AND namespace = $2 AND name = $3")
                .bind(kind)
                .bind(namespace)
                .bind(name)
                .execute(db)
                .await
                .map_err(self.db())?
                .rows_affected()
        });
        Ok(affected > 0)
    }

    async fn register_model(&self, model: &ModelRecord) -> Result<ModelRecord> {
        let labels = to_json_text(&format!("model {} labels", model.name), &model.labels)?;
        let result: std::result::Result<ModelRow, sqlx::Error> = on_db!(&self.pool, |db| {
            sqlx::query_as(concat!(
                "INSERT INTO models \
                 (name, path, format, source_job_uid, checkpoint, created_at, labels) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING ",
                model_cols!()
            ))
            .bind(&model.name)
            .bind(&model.path)
            .bind(&model.format)
            .bind(model.source_job_uid.as_deref())
            .bind(model.checkpoint.as_deref())
            .bind(to_millis(model.created_at))
            .bind(&labels)
            .fetch_one(db)
            .await
        });
        match result {
            Ok(row) => row.decode(&self.decoder()),
            Err(e) if is_unique_violation(&e) => Err(StoreError::AlreadyExists {
                kind: "Model".into(),
                namespace: String::new(),
                name: model.name.clone(),
            }),
            Err(e) => Err(self.db()(e)),
        }
    }

    async fn get_model(&self, name: &str) -> Result<Option<ModelRecord>> {
        let row: Option<ModelRow> = on_db!(&self.pool, |db| {
            sqlx::query_as(concat!(
                "SELECT ",
                model_cols!(),
                " FROM models WHERE name = $1"
            ))
            .bind(name)
            .fetch_optional(db)
            .await
            .map_err(self.db())?
        });
        row.map(|r| r.decode(&self.decoder())).transpose()
    }

    async fn list_models(&self) -> Result<Vec<ModelRecord>> {
        let rows: Vec<ModelRow> = on_db!(&self.pool, |db| {
            sqlx::query_as(concat!(
                "SELECT ",
                model_cols!(),
                " FROM models ORDER BY seq"
            ))
            .fetch_all(db)
            .await
            .map_err(self.db())?
        });
        let decoder = self.decoder();
        rows.into_iter().map(|r| r.decode(&decoder)).collect()
    }

    async fn delete_model(&self, name: &str) -> Result<bool> {
        let affected = on_db!(&self.pool, |db| {
            sqlx::query("DELETE FROM models WHERE name = $1")
                .bind(name)
                .execute(db)
                .await
                .map_err(self.db())?
                .rows_affected()
        });
        Ok(affected > 0)
    }

    async fn schema_version(&self) -> Result<i64> {
        let version: Option<i64> = on_db!(&self.pool, |db| {
            sqlx::query_scalar("SELECT MAX(version) FROM _sqlx_migrations WHERE success")
                .fetch_one(db)
                .await
                .map_err(self.db())?
        });
        Ok(version.unwrap_or(0))
    }

    fn location(&self) -> &str {
        &self.location
    }

    async fn close(&self) {
        on_db!(&self.pool, |db| db.close().await)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_redacted_from_urls() {
        assert_eq!(
            redact_password("postgres://ferry:s3cret@127.0.0.1:55432/ferry"),
            "postgres://ferry:***@127.0.0.1:55432/ferry"
        );
        assert_eq!(
            redact_password("postgres://ferry@localhost/db?sslmode=disable"),
            "postgres://ferry@localhost/db?sslmode=disable"
        );
        assert_eq!(
            redact_password("/home/me/.ferry/ferry.db"),
            "/home/me/.ferry/ferry.db"
        );
        assert_eq!(
            redact_password("postgresql://u:p%40ss@h/db"),
            "postgresql://u:***@h/db"
        );
    }
}
