//! The local backend: each rank is a real child process of this machine, in its own process
//! group, under a `/bin/sh` wrapper that records its exit status on disk. Gangs launched by
//! this process are reaped through their `Child` handles; gangs from an earlier control-plane
//! process are judged from `/proc` (pid + start time, zombies count as dead) and exit records.

mod logs;
pub mod procfs;
mod records;

use std::collections::HashMap;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::process::{Child, Command};

use crate::runtime::LogStream;
use crate::{
    GangRecord, GangStatus, LaunchRequest, RankRecord, RankState, RankStatus, Result, Runtime,
    RuntimeError,
};
use procfs::Liveness;
use records::ExitRecord;

pub use records::WRAPPER;

/// [`GangRecord::backend`] value of gangs this runtime launches.
pub const BACKEND: &str = "local";

/// How often `terminate` re-checks ranks while waiting for them to end.
const TERMINATE_POLL: Duration = Duration::from_millis(20);

/// How long `terminate` waits for processes to vanish after SIGKILL.
const KILL_WAIT: Duration = Duration::from_secs(5);

/// Set in the environment of every rank that is given a GPU, over the control plane's own
/// environment and the request's: NVLink multicast (NVLS) stays off in NCCL, PyTorch's
/// symmetric memory and NVSHMEM, because a program that uses it can take a shared host's
/// GPUs out of service. A rank started with no GPU inherits whatever the parent has.
pub const GPU_RANK_ENV: &[(&str, &str)] = &[
    ("NCCL_NVLS_ENABLE", "0"),
    ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"),
    ("NVSHMEM_DISABLE_NVLS", "1"),
];

/// Runs gangs as child processes of this machine. Cheap to clone (shared state).
#[derive(Clone, Default)]
pub struct LocalRuntime {
    inner: Arc<Inner>,
}

/// Child handles of the gangs this process launched, by attempt directory.
#[derive(Default)]
struct Inner {
    gangs: Mutex<HashMap<PathBuf, Vec<OwnedRank>>>,
    /// GPU id → the CUDA ordinal ranks are given for it (ids not here are given as they are).
    cuda_ordinals: HashMap<String, String>,
}

/// A rank this process spawned: its `Child` (so it gets reaped) and, once reaped, its end.
struct OwnedRank {
    child: Child,
    ended: Option<RankState>,
}

impl std::fmt::Debug for LocalRuntime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalRuntime")
            .field("owned_gangs", &self.lock().len())
            .finish()
    }
}

impl LocalRuntime {
    /// A runtime that owns no gangs yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// A runtime that names GPUs to ranks by CUDA ordinal (`Inventory::cuda_ordinals`) rather
    /// than by the ids the request books them by: `CUDA_VISIBLE_DEVICES=0,1` with
    /// `CUDA_DEVICE_ORDER=PCI_BUS_ID` instead of UUIDs, which some tools cannot parse.
    pub fn with_cuda_ordinals(cuda_ordinals: HashMap<String, String>) -> Self {
        LocalRuntime {
            inner: Arc::new(Inner {
                gangs: Mutex::default(),
                cuda_ordinals,
            }),
        }
    }

    /// Reads the `gang.json` that `launch` leaves in `<run_dir>/attempt-<a>`: recovery for a
    /// control plane that crashed after launching but before persisting the record.
    pub fn recover(attempt_dir: &Path) -> Result<GangRecord> {
        let path = attempt_dir.join("gang.json");
        let text =
            std::fs::read_to_string(&path).map_err(RuntimeError::io("read gang record", &path))?;
        serde_json::from_str(&text).map_err(|e| RuntimeError::Io {
            action: "parse gang record",
            path,
            source: std::io::Error::new(std::io::ErrorKind::InvalidData, e),
        })
    }

    /// Stops every rank still alive among those recorded by `rank-<r>.pid` files in
    /// `attempt_dir` (pid and start time verified): SIGTERM, `grace`, then SIGKILL. For a
    /// launch whose [`GangRecord`] was never persisted (the control plane died inside
    /// `launch`) and that [`LocalRuntime::recover`] cannot rebuild; relaunch as the next
    /// attempt afterwards. Returns the ranks that were signalled, in rank order.
    pub async fn sweep(attempt_dir: &Path, grace: Duration) -> Result<Vec<u32>> {
        let entries = std::fs::read_dir(attempt_dir)
            .map_err(RuntimeError::io("list attempt directory", attempt_dir))?;
        let mut live = Vec::new();
        for entry in entries {
            let entry = entry.map_err(RuntimeError::io("list attempt directory", attempt_dir))?;
            let name = entry.file_name();
            let Some(rank) = name
                .to_str()
                .and_then(|n| n.strip_prefix("rank-"))
                .and_then(|n| n.strip_suffix(".pid"))
                .and_then(|n| n.parse::<u32>().ok())
            else {
                continue;
            };
            let Some((pid, start_time)) = records::read_pid_record(&entry.path()) else {
                continue;
            };
            if pid > 0
                && pid <= i32::MAX as u32
                && procfs::liveness(pid, start_time) == Liveness::Alive
            {
                live.push((rank, pid, start_time));
            }
        }
        live.sort_unstable();
        let targets: Vec<(u32, u32)> = live.iter().map(|&(rank, pid, _)| (rank, pid)).collect();
        stop_groups(
            &targets,
            grace,
            &attempt_dir.join(records::STOP_RECORD),
            || {
                Ok(live
                    .iter()
                    .filter(|&&(_, pid, start)| procfs::liveness(pid, start) == Liveness::Alive)
                    .map(|&(rank, _, _)| rank)
                    .collect())
            },
        )
        .await?;
        Ok(live.into_iter().map(|(rank, _, _)| rank).collect())
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<PathBuf, Vec<OwnedRank>>> {
        // A panic elsewhere cannot leave the map half-updated: every update is one insert/remove.
        self.inner
            .gangs
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Spawns every rank; on any error the ranks already started are killed.
    async fn launch_gang(&self, req: LaunchRequest) -> Result<GangRecord> {
        let world = req.validate()?;
        if let Some(dir) = &req.working_dir
            && !dir.is_dir()
        {
            return Err(RuntimeError::request(
                "working_dir",
                format!(
                    "{} is not an existing directory; create it or leave working_dir unset",
                    dir.display()
                ),
            ));
        }
        let run_dir = std::path::absolute(&req.run_dir)
            .map_err(RuntimeError::io("resolve run_dir", &req.run_dir))?;
        let attempt_dir = run_dir.join(format!("attempt-{}", req.attempt));
        std::fs::create_dir_all(&attempt_dir)
            .map_err(RuntimeError::io("create attempt directory", &attempt_dir))?;
        if attempt_dir.join("gang.json").exists() {
            return Err(RuntimeError::request(
                "attempt",
                format!(
                    "{} already holds a launched gang (gang.json); launch the restart as attempt {}",
                    attempt_dir.display(),
                    req.attempt.saturating_add(1)
                ),
            ));
        }
        let master_port = free_port()?;
        let mut record = GangRecord {
            backend: BACKEND.to_string(),
            job: req.job.clone(),
            attempt: req.attempt,
            nodes: req.nodes,
            procs_per_node: req.procs_per_node,
            master_addr: "127.0.0.1".to_string(),
            master_port,
            attempt_dir: attempt_dir.clone(),
            launched_at_unix_ms: now_ms(),
            ranks: Vec::with_capacity(world as usize),
        };
        let mut owned = Vec::with_capacity(world as usize);
        for rank in 0..world {
            match spawn_rank(&req, &record, rank, &self.inner.cuda_ordinals) {
                Ok((rank_record, child)) => {
                    record.ranks.push(rank_record);
                    owned.push(OwnedRank { child, ended: None });
                }
                Err(e) => {
                    kill_spawned(&record, owned).await;
                    return Err(e);
                }
            }
        }
        let json = serde_json::to_string_pretty(&record).unwrap_or_default();
        if let Err(e) = records::write_atomic(&attempt_dir.join("gang.json"), &json) {
            kill_spawned(&record, owned).await;
            return Err(e);
        }
        self.lock().insert(attempt_dir, owned);
        Ok(record)
    }

    /// Checks that `gang` is a well-formed record of this backend.
    fn check_record(gang: &GangRecord) -> Result<()> {
        let invalid = |problem: String| RuntimeError::InvalidRecord {
            job: gang.job.clone(),
            attempt: gang.attempt,
            problem,
        };
        if gang.backend != BACKEND {
            return Err(invalid(format!(
                "was launched by the `{}` runtime, not `{BACKEND}`; hand it to that runtime",
                gang.backend
            )));
        }
        if gang.ranks.is_empty() {
            return Err(invalid(
                "lists no ranks; the record is truncated".to_string(),
            ));
        }
        for (i, rank) in gang.ranks.iter().enumerate() {
            if rank.rank as usize != i || rank.pid == 0 || rank.pid > i32::MAX as u32 {
                return Err(invalid(format!(
                    "ranks[{i}] has rank {} and pid {}; the record is corrupt",
                    rank.rank, rank.pid
                )));
            }
        }
        Ok(())
    }

    /// Every rank's status; reaps finished children of this process and makes sure each
    /// ended rank has an exit record on disk.
    fn statuses(&self, gang: &GangRecord) -> Result<Vec<RankStatus>> {
        Self::check_record(gang)?;
        let mut gangs = self.lock();
        let Some(owned) = gangs.get_mut(&gang.attempt_dir) else {
            drop(gangs);
            return Ok(gang.ranks.iter().map(adopted_status).collect());
        };
        let statuses: Vec<RankStatus> = gang
            .ranks
            .iter()
            .zip(owned.iter_mut())
            .map(|(record, own)| owned_status(record, own))
            .collect();
        if owned.iter().all(|own| own.ended.is_some()) {
            // Every child is reaped and its exit record written: from now on the records
            // alone tell the same story, as for an adopted gang.
            gangs.remove(&gang.attempt_dir);
        }
        Ok(statuses)
    }

    /// Status of one rank (for log following).
    fn rank_status(&self, gang: &GangRecord, rank: u32) -> Result<RankStatus> {
        let statuses = self.statuses(gang)?;
        statuses
            .into_iter()
            .nth(rank as usize)
            .ok_or_else(|| RuntimeError::NoSuchRank {
                job: gang.job.clone(),
                rank,
                world_size: gang.world_size(),
            })
    }

    async fn terminate_gang(&self, gang: &GangRecord, grace: Duration) -> Result<()> {
        let running = |statuses: Vec<RankStatus>| -> Vec<u32> {
            statuses
                .into_iter()
                .filter(|s| s.state == RankState::Running)
                .map(|s| s.rank)
                .collect()
        };
        // Only ranks seen alive now (own child not reaped, or pid + start time verified) are
        // signalled, so a recycled pid is never hit.
        let targets: Vec<(u32, u32)> = running(self.statuses(gang)?)
            .into_iter()
            .map(|rank| (rank, gang.ranks[rank as usize].pid))
            .collect();
        let record = gang.attempt_dir.join(records::STOP_RECORD);
        let stopped = stop_groups(&targets, grace, &record, || {
            Ok(running(self.statuses(gang)?))
        })
        .await;
        // Adopted ranks killed together with their wrapper left no record: write one now, so
        // they read as "killed by SIGKILL" rather than "lost", also after a restart.
        for status in self.statuses(gang)? {
            if status.state == RankState::Lost && targets.iter().any(|&(r, _)| r == status.rank) {
                let killed = RankState::Signaled {
                    signal: Signal::SIGKILL as i32,
                };
                records::ensure_exit_record(&gang.ranks[status.rank as usize].exit_path, &killed)?;
            }
        }
        stopped
    }

    fn adopt_gang(&self, gang: &GangRecord) -> Result<GangStatus> {
        Self::check_record(gang)?;
        let invalid = |problem: String| RuntimeError::InvalidRecord {
            job: gang.job.clone(),
            attempt: gang.attempt,
            problem,
        };
        if !gang.attempt_dir.is_dir() {
            return Err(invalid(format!(
                "its directory {} is gone, so exit records cannot be read; the attempt must be failed and restarted",
                gang.attempt_dir.display()
            )));
        }
        for rank in &gang.ranks {
            // The pid file is written at launch; a record that disagrees with it belongs to a
            // different launch of the same attempt directory.
            let on_disk = records::read_pid_record(&rank.pid_path);
            if rank.pid_path.exists() && on_disk != Some((rank.pid, rank.start_time)) {
                let found = match on_disk {
                    Some((pid, start)) => format!("pid {pid} started at tick {start}"),
                    None => "no readable pid record".to_string(),
                };
                return Err(invalid(format!(
                    "rank {} says pid {} started at tick {}, but {} holds {found}; the record belongs to another launch",
                    rank.rank,
                    rank.pid,
                    rank.start_time,
                    rank.pid_path.display(),
                )));
            }
        }
        let statuses = self.statuses(gang)?;
        Ok(GangStatus::from_ranks(gang, &statuses))
    }
}

#[async_trait::async_trait]
impl Runtime for LocalRuntime {
    fn backend(&self) -> &'static str {
        BACKEND
    }

    async fn launch(&self, req: LaunchRequest) -> Result<GangRecord> {
        self.launch_gang(req).await
    }

    async fn observe_ranks(&self, gang: &GangRecord) -> Result<Vec<RankStatus>> {
        self.statuses(gang)
    }

    async fn terminate(&self, gang: &GangRecord, grace: Duration) -> Result<()> {
        self.terminate_gang(gang, grace).await
    }

    async fn adopt(&self, gang: &GangRecord) -> Result<GangStatus> {
        self.adopt_gang(gang)
    }

    fn logs(&self, gang: &GangRecord, rank: u32, follow: bool) -> Result<LogStream> {
        Self::check_record(gang)?;
        gang.rank(rank)?;
        Ok(logs::stream(self.clone(), gang.clone(), rank, follow))
    }
}

/// Starts rank `rank` of `req` under the wrapper and returns its record and child handle.
fn spawn_rank(
    req: &LaunchRequest,
    gang: &GangRecord,
    rank: u32,
    cuda_ordinals: &HashMap<String, String>,
) -> Result<(RankRecord, Child)> {
    let dir = &gang.attempt_dir;
    let log_path = dir.join(format!("rank-{rank}.log"));
    let exit_path = dir.join(format!("rank-{rank}.exit"));
    let pid_path = dir.join(format!("rank-{rank}.pid"));
    for stale in [&exit_path, &pid_path] {
        match std::fs::remove_file(stale) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(RuntimeError::io("remove stale record", stale)(e)),
        }
    }
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log_path)
        .map_err(RuntimeError::io("open log file", &log_path))?;
    let log_err = log
        .try_clone()
        .map_err(RuntimeError::io("open log file", &log_path))?;
    let gpus = req.gpus_of(rank).to_vec();
    let node_rank = rank / req.procs_per_node;
    let local_rank = rank % req.procs_per_node;
    let gpu_env: &[(&str, &str)] = if gpus.is_empty() { &[] } else { GPU_RANK_ENV };
    let visible: Vec<&str> = gpus
        .iter()
        .map(|id| cuda_ordinals.get(id).unwrap_or(id).as_str())
        .collect();
    let mut cmd = Command::new("/bin/sh");
    cmd.arg("-c")
        .arg(WRAPPER)
        .arg(format!("ferry-rank-{rank}"))
        .arg(&exit_path)
        .args(&req.argv)
        .envs(&req.env)
        .env("MASTER_ADDR", &gang.master_addr)
        .env("MASTER_PORT", gang.master_port.to_string())
        .env("NNODES", req.nodes.to_string())
        .env("NODE_RANK", node_rank.to_string())
        .env("NPROC_PER_NODE", req.procs_per_node.to_string())
        .env("WORLD_SIZE", (req.nodes * req.procs_per_node).to_string())
        .env("RANK", rank.to_string())
        .env("LOCAL_RANK", local_rank.to_string())
        .env("CUDA_VISIBLE_DEVICES", visible.join(","))
        // Numbers in CUDA_VISIBLE_DEVICES count in PCI bus order (as nvidia-smi and NVML
        // do), not CUDA's default fastest-first.
        .env("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
        .env("FERRY_JOB", &req.job)
        .env("FERRY_ATTEMPT", req.attempt.to_string())
        .envs(gpu_env.iter().copied())
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(log_err)
        .process_group(0)
        .kill_on_drop(false);
    if let Some(dir) = &req.working_dir {
        cmd.current_dir(dir);
    }
    let mut child = cmd
        .spawn()
        .map_err(|source| RuntimeError::Spawn { rank, source })?;
    let started = child
        .id()
        .and_then(|pid| procfs::read_stat(pid).map(|stat| (pid, stat.start_time)));
    let Some((pid, start_time)) = started else {
        let _ = child.start_kill();
        return Err(RuntimeError::Spawn {
            rank,
            source: std::io::Error::other(
                "the wrapper vanished before its /proc entry could be read",
            ),
        });
    };
    let record = RankRecord {
        rank,
        node_rank,
        local_rank,
        gpus,
        pid,
        start_time,
        log_path,
        exit_path,
        pid_path,
    };
    if let Err(e) = records::write_atomic(&record.pid_path, &format!("{pid} {start_time}\n")) {
        let _ = signal_group(record.rank, record.pid, Signal::SIGKILL);
        return Err(e);
    }
    Ok((record, child))
}

/// Kills and reaps ranks started by a launch that then failed.
async fn kill_spawned(gang: &GangRecord, owned: Vec<OwnedRank>) {
    for (record, mut own) in gang.ranks.iter().zip(owned) {
        let _ = signal_group(record.rank, record.pid, Signal::SIGKILL);
        let _ = tokio::time::timeout(KILL_WAIT, own.child.wait()).await;
    }
}

/// Status of a rank this process spawned: reap it if it ended, then trust its exit record.
fn owned_status(record: &RankRecord, own: &mut OwnedRank) -> RankStatus {
    if own.ended.is_none() {
        match own.child.try_wait() {
            Ok(None) => {
                return RankStatus {
                    rank: record.rank,
                    state: RankState::Running,
                    ended_at_unix_ms: None,
                };
            }
            Ok(Some(status)) => {
                let state = state_of(status);
                // The wrapper writes the record unless it was itself killed; fill the gap so
                // the rank reads the same after a control-plane restart.
                let _ = records::ensure_exit_record(&record.exit_path, &state);
                own.ended = Some(state);
            }
            // The child cannot be waited on (should not happen): fall back to /proc + records.
            Err(_) => return adopted_status(record),
        }
    }
    match records::read_exit_record(&record.exit_path) {
        ExitRecord::Found(state, ended) => RankStatus {
            rank: record.rank,
            state,
            ended_at_unix_ms: ended,
        },
        ExitRecord::Missing => RankStatus {
            rank: record.rank,
            state: own.ended.clone().unwrap_or(RankState::Lost),
            ended_at_unix_ms: Some(now_ms()),
        },
    }
}

/// Status of a rank not spawned by this process: `/proc` first (so a rank that writes its
/// record and exits between two checks is never reported lost), then its exit record.
fn adopted_status(record: &RankRecord) -> RankStatus {
    let running = RankStatus {
        rank: record.rank,
        state: RankState::Running,
        ended_at_unix_ms: None,
    };
    if procfs::liveness(record.pid, record.start_time) == Liveness::Alive {
        return running;
    }
    match records::read_exit_record(&record.exit_path) {
        ExitRecord::Found(state, ended) => RankStatus {
            rank: record.rank,
            state,
            ended_at_unix_ms: ended,
        },
        ExitRecord::Missing => RankStatus {
            rank: record.rank,
            state: RankState::Lost,
            ended_at_unix_ms: None,
        },
    }
}

/// Maps the wrapper's wait status to a rank state.
fn state_of(status: ExitStatus) -> RankState {
    match (status.code(), status.signal()) {
        (Some(code), _) => RankState::Exited { code },
        (None, Some(signal)) => RankState::Signaled { signal },
        (None, None) => RankState::Lost,
    }
}

/// Signals the process group `pgid` of `rank`; a group that is already gone is not an error.
fn signal_group(rank: u32, pgid: u32, signal: Signal) -> Result<()> {
    match killpg(Pid::from_raw(pgid as i32), signal) {
        Ok(()) | Err(nix::errno::Errno::ESRCH) => Ok(()),
        Err(source) => Err(RuntimeError::Signal {
            rank,
            pgid,
            signal: signal.as_str(),
            source,
        }),
    }
}

/// Stops the process groups of `targets` (rank, pgid): SIGTERM to each, a wait of up to
/// `grace` while `running` still lists any of them, then SIGKILL to every one — also to
/// groups whose leader already ended, so children that ignored SIGTERM do not linger (each
/// leader was verified alive moments ago, so its group id cannot have been recycled) — and
/// a wait until none is running. The first signalling error is returned after all that.
///
/// `record` (`records::STOP_RECORD` of the attempt) keeps when SIGTERM was first sent, written
/// just after sending it: when it exists — an earlier control-plane process started the stop
/// and died — no second SIGTERM is sent and the grace period runs from that time.
async fn stop_groups(
    targets: &[(u32, u32)],
    grace: Duration,
    record: &Path,
    mut running: impl FnMut() -> Result<Vec<u32>>,
) -> Result<()> {
    let mut first_error = None;
    let mut signal_all = |signal: Signal| {
        for &(rank, pgid) in targets {
            if let Err(e) = signal_group(rank, pgid, signal) {
                first_error.get_or_insert(e);
            }
        }
    };
    let mut still_running = || -> Result<Option<u32>> {
        let now = running()?;
        Ok(targets
            .iter()
            .map(|&(rank, _)| rank)
            .find(|rank| now.contains(rank)))
    };
    let mut unrecorded = None;
    let deadline = match records::read_stop_record(record) {
        Some(sent_ms) => {
            let ends_ms = sent_ms.saturating_add(grace.as_millis() as u64);
            Instant::now() + Duration::from_millis(ends_ms.saturating_sub(now_ms()))
        }
        None => {
            let sent_ms = now_ms();
            signal_all(Signal::SIGTERM);
            if !targets.is_empty() {
                // Reported last: only a restart in the grace period would notice (it would
                // signal once more), so the stop goes on.
                unrecorded = records::write_atomic(record, &format!("{sent_ms}\n")).err();
            }
            Instant::now() + grace
        }
    };
    while still_running()?.is_some() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        tokio::time::sleep(TERMINATE_POLL.min(left)).await;
    }
    signal_all(Signal::SIGKILL);
    let deadline = Instant::now() + KILL_WAIT;
    while let Some(rank) = still_running()? {
        if Instant::now() >= deadline {
            let pid = targets
                .iter()
                .find(|&&(r, _)| r == rank)
                .map_or(0, |&(_, pid)| pid);
            return Err(RuntimeError::Unkillable {
                rank,
                pid,
                waited_ms: KILL_WAIT.as_millis() as u64,
            });
        }
        tokio::time::sleep(TERMINATE_POLL).await;
    }
    first_error.or(unrecorded).map_or(Ok(()), Err)
}

/// A TCP port that was free on 127.0.0.1 a moment ago, for `MASTER_PORT`.
fn free_port() -> Result<u16> {
    let listener =
        std::net::TcpListener::bind(("127.0.0.1", 0)).map_err(RuntimeError::NoFreePort)?;
    Ok(listener
        .local_addr()
        .map_err(RuntimeError::NoFreePort)?
        .port())
}

/// Milliseconds since the Unix epoch.
fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::runtime::wait;

    const PRINT_ENV: &str = "import os, json; print(json.dumps({k: os.environ.get(k) for k in \
        ('NCCL_NVLS_ENABLE','TORCH_SYMM_MEM_DISABLE_MULTICAST','NVSHMEM_DISABLE_NVLS','CARGO_PKG_NAME',\
        'CUDA_VISIBLE_DEVICES','CUDA_DEVICE_ORDER')}))";

    /// Runs one rank per entry of `gpus_per_rank` printing its environment; returns the gang
    /// and each rank's printed environment.
    async fn print_env(
        rt: &LocalRuntime,
        gpus_per_rank: Vec<Vec<String>>,
        env: BTreeMap<String, String>,
    ) -> (GangRecord, Vec<BTreeMap<String, Option<String>>>) {
        let dir = tempfile::tempdir().unwrap();
        let req = LaunchRequest {
            job: "env-1".to_string(),
            attempt: 0,
            nodes: 1,
            procs_per_node: gpus_per_rank.len() as u32,
            argv: ["python3", "-c", PRINT_ENV].map(String::from).to_vec(),
            env,
            working_dir: None,
            gpus_per_rank,
            run_dir: dir.path().to_path_buf(),
        };
        let gang = rt.launch(req).await.unwrap();
        let status = tokio::time::timeout(
            Duration::from_secs(60),
            wait(rt, &gang, Duration::from_millis(20)),
        )
        .await
        .expect("gang ended")
        .unwrap();
        assert_eq!(status, crate::GangStatus::Succeeded);
        let envs = (0..gang.world_size())
            .map(|rank| {
                let log = std::fs::read_to_string(gang.log_path(rank).unwrap()).unwrap();
                serde_json::from_str(log.trim()).unwrap()
            })
            .collect();
        (gang, envs)
    }

    #[tokio::test]
    async fn ranks_on_gpus_always_run_with_nvlink_multicast_off() {
        let mut env = BTreeMap::new();
        // A spec asking for multicast does not get it on a GPU rank.
        env.insert("NCCL_NVLS_ENABLE".to_string(), "1".to_string());
        let rt = LocalRuntime::new();
        let (_gang, envs) = print_env(&rt, vec![vec!["0".to_string()], vec![]], env).await;
        let read = |rank: usize| envs[rank].clone();
        let gpu_rank = read(0);
        for (key, value) in GPU_RANK_ENV {
            assert_eq!(gpu_rank[*key].as_deref(), Some(*value), "{key}");
        }
        // The parent's environment (here, cargo's) is inherited by every rank.
        let inherited = std::env::var("CARGO_PKG_NAME").ok();
        assert_eq!(inherited.as_deref(), Some("ferry-runtime"));
        assert_eq!(gpu_rank["CARGO_PKG_NAME"], inherited);
        let cpu_rank = read(1);
        assert_eq!(cpu_rank["CARGO_PKG_NAME"], inherited);
        // Without a GPU, the request's own value stands.
        assert_eq!(cpu_rank["NCCL_NVLS_ENABLE"].as_deref(), Some("1"));
    }

    #[tokio::test]
    async fn ranks_see_gpus_by_cuda_ordinal_while_the_gang_books_them_by_id() {
        let ordinals = HashMap::from([
            ("GPU-aaa".to_string(), "0".to_string()),
            ("GPU-bbb".to_string(), "1".to_string()),
        ]);
        let rt = LocalRuntime::with_cuda_ordinals(ordinals);
        let gpus = vec![
            vec!["GPU-bbb".to_string()],
            vec!["GPU-aaa".to_string(), "5".to_string()],
        ];
        let (gang, envs) = print_env(&rt, gpus.clone(), BTreeMap::new()).await;
        assert_eq!(envs[0]["CUDA_VISIBLE_DEVICES"].as_deref(), Some("1"));
        assert_eq!(
            envs[1]["CUDA_VISIBLE_DEVICES"].as_deref(),
            Some("0,5"),
            "an id without an ordinal is given as it is"
        );
        for env in &envs {
            assert_eq!(env["CUDA_DEVICE_ORDER"].as_deref(), Some("PCI_BUS_ID"));
        }
        let booked: Vec<Vec<String>> = gang.ranks.iter().map(|r| r.gpus.clone()).collect();
        assert_eq!(
            booked, gpus,
            "the record keeps the ids the control plane booked"
        );
    }
}
