//! How `ferry up` configures the control plane.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// Where GPUs come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GpuSetting {
    /// Ask NVML; zero GPUs when there is no driver.
    Discover,
    /// Declare N virtual GPU slots (for testing on CPU machines).
    Virtual(u32),
}

/// Settings of one control-plane process.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// `$FERRY_HOME`: database, job run directories, checkpoints.
    pub home: PathBuf,
    /// Address of the REST API.
    pub listen: SocketAddr,
    /// Address of the in-process OpenAI gateway in front of the deployments' replicas
    /// (port 0: any free port, reported by `/version`); `None`: no gateway.
    pub gateway: Option<SocketAddr>,
    /// Database URL or path; `$FERRY_HOME/ferry.db` when `None`.
    pub store_url: Option<String>,
    /// GPU inventory.
    pub gpus: GpuSetting,
    /// How often the reconcile loop runs when nothing wakes it.
    pub tick: Duration,
    /// The `ferry` binary that built-in training ranks and serving replicas run
    /// (`ferry engine train`, `ferry serve`); this process's own executable by default.
    pub self_exe: PathBuf,
    /// Stop serving replicas when the control plane exits (the demo's private one does);
    /// `ferry up` leaves them serving and re-adopts them at its next start.
    pub stop_replicas_on_exit: bool,
    /// The scheduler's policy switches (`ferry up --scheduler-options`): what `ferry sim
    /// --options` simulated is what runs.
    pub scheduler: ferry_sched::Options,
    /// The named priorities jobs may give (`ferry up --priority-classes`): `low`, `normal`
    /// and `high` by default, plus the cluster's own.
    pub priorities: Vec<ferry_sched::PriorityClass>,
}

impl ServerConfig {
    /// Defaults for `home` and `listen`.
    pub fn new(home: PathBuf, listen: SocketAddr) -> Self {
        Self {
            home,
            listen,
            gateway: None,
            store_url: None,
            gpus: GpuSetting::Discover,
            tick: Duration::from_millis(500),
            self_exe: std::env::current_exe().unwrap_or_else(|_| PathBuf::from("ferry")),
            stop_replicas_on_exit: false,
            scheduler: ferry_sched::Options::default(),
            priorities: ferry_sched::PriorityClass::standard(),
        }
    }

    /// The database location actually used.
    pub fn store_location(&self) -> String {
        self.store_url
            .clone()
            .unwrap_or_else(|| self.home.join("ferry.db").to_string_lossy().into_owned())
    }
}
