//! The shared state of one control-plane process.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use ferry_runtime::{GangRecord, Inventory, LocalRuntime, Runtime};
use ferry_store::{JobRecord, Store};
use tokio::sync::Notify;

use crate::config::{GpuSetting, ServerConfig};
use crate::error::ApiError;
use crate::serving::Deployments;

/// A gang the control plane is watching: running, or being stopped.
#[derive(Debug, Clone)]
pub(crate) struct LiveGang {
    pub(crate) gang: GangRecord,
    /// True while a `terminate` is under way; its GPUs stay taken until it ends.
    pub(crate) draining: bool,
    /// Bytes of rank 0's log already scanned for metrics lines.
    pub(crate) metrics_offset: u64,
    /// Highest metrics step stored for this attempt (lines at or below are skipped).
    pub(crate) last_step: Option<i64>,
    /// Steps over time seen in this attempt's metrics, for the scheduler's expected end.
    pub(crate) pace: ferry_sched::pace::Pace,
    /// Seconds the job's earlier runs used (`limits::ended_runs_seconds`), read from its events
    /// once per attempt when the job has a total runtime budget.
    pub(crate) past_run_s: Option<u64>,
}

/// Handle to the control plane; cheap to clone.
#[derive(Clone)]
pub struct ControlPlane {
    inner: Arc<Inner>,
}

struct Inner {
    config: ServerConfig,
    store: Arc<dyn Store>,
    runtime: Arc<dyn Runtime>,
    inventory: Inventory,
    wake: Notify,
    live: Mutex<HashMap<String, LiveGang>>,
    waiting: Mutex<HashMap<String, Waiting>>,
    deployments: Mutex<Deployments>,
    gateway: std::sync::OnceLock<GatewayLink>,
    views: Mutex<crate::queue_view::Views>,
    exports: Mutex<HashMap<String, ExportState>>,
    /// Taken shared while an apply stores what it was given, and exclusively while a model
    /// is deleted: a job or deployment naming the model is either seen by the delete's
    /// in-use check or stored after the model is gone.
    model_users: tokio::sync::RwLock<()>,
}

/// Why a queued job waits, and when it is expected to start, as of the last scheduling cycle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Waiting {
    /// The reason, as its `Waiting` event says it.
    pub(crate) reason: String,
    /// Unix seconds it is expected to start: the job first in line by its reservation, the
    /// others by the scheduler's forecast; `None` while work in its way has no expected end.
    pub(crate) expected_start: Option<u64>,
}

/// An export running beside the reconcile loop, or its outcome waiting to be recorded.
#[derive(Debug, Clone)]
pub(crate) enum ExportState {
    /// Still copying or converting.
    Running,
    /// Done: what `export::export` returned.
    Done(Result<Option<ferry_store::ModelRecord>, String>),
}

/// The in-process gateway the serving controller keeps up to date.
#[derive(Clone)]
pub(crate) struct GatewayLink {
    /// Where clients reach it, e.g. `http://127.0.0.1:8080`.
    pub(crate) url: String,
    /// Its replica registry.
    pub(crate) registry: ferry_gateway::Registry,
}

impl ControlPlane {
    /// Opens the store (moving queues and priority classes an older version kept per namespace,
    /// `scope::gather`) and the local runtime and discovers GPUs. Re-adoption of jobs a
    /// previous process left running happens in the reconcile loop's first pass.
    pub async fn start(config: ServerConfig) -> Result<Self, ApiError> {
        std::fs::create_dir_all(&config.home).map_err(|e| {
            ApiError::internal(format!(
                "cannot create FERRY_HOME {}: {e}; set FERRY_HOME to a writable directory",
                config.home.display()
            ))
        })?;
        let store = ferry_store::open(&config.store_location()).await?;
        crate::scope::gather(&*store).await?;
        let inventory = match config.gpus {
            GpuSetting::Discover => ferry_runtime::discover(),
            GpuSetting::Virtual(n) => Inventory::virtual_slots(n),
        };
        Ok(Self::with_parts(
            config,
            store,
            Arc::new(LocalRuntime::with_cuda_ordinals(inventory.cuda_ordinals())),
            inventory,
        ))
    }

    /// Assembles a control plane from its parts (tests use this with their own store).
    pub fn with_parts(
        config: ServerConfig,
        store: Arc<dyn Store>,
        runtime: Arc<dyn Runtime>,
        inventory: Inventory,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                config,
                store,
                runtime,
                inventory,
                wake: Notify::new(),
                live: Mutex::new(HashMap::new()),
                waiting: Mutex::new(HashMap::new()),
                deployments: Mutex::new(HashMap::new()),
                gateway: std::sync::OnceLock::new(),
                views: Mutex::new(Default::default()),
                exports: Mutex::new(HashMap::new()),
                model_users: tokio::sync::RwLock::new(()),
            }),
        }
    }

    /// The store.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.inner.store
    }

    /// The runtime.
    pub fn runtime(&self) -> &Arc<dyn Runtime> {
        &self.inner.runtime
    }

    /// The GPUs this control plane hands out.
    pub fn inventory(&self) -> &Inventory {
        &self.inner.inventory
    }

    /// The settings it runs with.
    pub fn config(&self) -> &ServerConfig {
        &self.inner.config
    }

    /// Asks the reconcile loop to run now instead of at its next tick.
    pub fn wake(&self) {
        self.inner.wake.notify_one();
    }

    pub(crate) async fn woken(&self) {
        self.inner.wake.notified().await;
    }

    /// `$FERRY_HOME/jobs/<namespace>/<name>/<uid>`: logs, exit records, checkpoints.
    pub fn run_dir(&self, job: &JobRecord) -> PathBuf {
        self.inner
            .config
            .home
            .join("jobs")
            .join(&job.namespace)
            .join(&job.name)
            .join(&job.uid)
    }

    /// Where the job's checkpoints go: `spec.checkpoint.dir`, else `<run dir>/checkpoints`.
    pub fn checkpoint_dir(&self, job: &JobRecord) -> PathBuf {
        match &job.job.spec.checkpoint.dir {
            Some(dir) => {
                let dir = PathBuf::from(dir);
                match (&job.job.spec.working_dir, dir.is_relative()) {
                    (Some(wd), true) => PathBuf::from(wd).join(dir),
                    _ => dir,
                }
            }
            None => self.run_dir(job).join("checkpoints"),
        }
    }

    pub(crate) fn live(&self) -> std::sync::MutexGuard<'_, HashMap<String, LiveGang>> {
        self.inner.live.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Connects the gateway; the serving controller registers ready replicas in it.
    pub(crate) fn set_gateway(&self, link: GatewayLink) {
        let _ = self.inner.gateway.set(link);
    }

    /// The in-process gateway, when `ferry up` runs one.
    pub(crate) fn gateway(&self) -> Option<&GatewayLink> {
        self.inner.gateway.get()
    }

    /// Serving replicas by deployment uid.
    pub(crate) fn deployments(&self) -> std::sync::MutexGuard<'_, Deployments> {
        self.inner
            .deployments
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    /// The gang of a job as last launched or adopted, if the control plane holds one.
    pub(crate) fn live_gang(&self, uid: &str) -> Option<LiveGang> {
        self.live().get(uid).cloned()
    }

    /// Records why a queued job is waiting; returns true when the reason changed
    /// (so the caller writes one event per change, not one per tick).
    pub(crate) fn set_waiting(&self, uid: &str, reason: &str, expected_start: Option<u64>) -> bool {
        let mut waiting = self.inner.waiting.lock().unwrap_or_else(|p| p.into_inner());
        let now = Waiting {
            reason: reason.to_owned(),
            expected_start,
        };
        waiting
            .insert(uid.to_owned(), now)
            .is_none_or(|before| before.reason != reason)
    }

    /// Why a queued job waits, as of the last scheduling cycle.
    pub(crate) fn waiting(&self, uid: &str) -> Option<Waiting> {
        let waiting = self.inner.waiting.lock().unwrap_or_else(|p| p.into_inner());
        waiting.get(uid).cloned()
    }

    /// What each queue and cohort holds and who waits in each queue, as of the last
    /// scheduling cycle (for `ferry get queues`, `ferry get cohorts` and `ferry describe`).
    pub(crate) fn views(&self) -> crate::queue_view::Views {
        self.inner
            .views
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Keeps what the last scheduling cycle left (see [`Self::views`]).
    pub(crate) fn set_views(&self, views: crate::queue_view::Views) {
        *self.inner.views.lock().unwrap_or_else(|p| p.into_inner()) = views;
    }

    /// Exports by job uid (see `reconcile::store_succeeded`).
    pub(crate) fn exports(&self) -> std::sync::MutexGuard<'_, HashMap<String, ExportState>> {
        self.inner.exports.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Held by an apply while it stores jobs and deployments (see `Inner::model_users`).
    pub(crate) async fn storing_model_users(&self) -> tokio::sync::RwLockReadGuard<'_, ()> {
        self.inner.model_users.read().await
    }

    /// Held by a model delete from its in-use check to its removal (see `Inner::model_users`).
    pub(crate) async fn deleting_model(&self) -> tokio::sync::RwLockWriteGuard<'_, ()> {
        self.inner.model_users.write().await
    }

    pub(crate) fn clear_waiting(&self, uid: &str) {
        let mut waiting = self.inner.waiting.lock().unwrap_or_else(|p| p.into_inner());
        waiting.remove(uid);
    }
}
