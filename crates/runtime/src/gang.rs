//! The values that cross the [`Runtime`](crate::Runtime) seam: what to launch, what was
//! launched (persisted by the control plane), and how it is doing. Plain data, no I/O.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::RuntimeError;

/// Largest gang a request may ask for; bounds every per-rank allocation.
pub const MAX_WORLD_SIZE: u32 = 65_536;

/// Environment variables the runtime sets for every rank; a request may not set them itself.
pub const RESERVED_ENV: &[&str] = &[
    "MASTER_ADDR",
    "MASTER_PORT",
    "NNODES",
    "NODE_RANK",
    "NPROC_PER_NODE",
    "WORLD_SIZE",
    "RANK",
    "LOCAL_RANK",
    "CUDA_VISIBLE_DEVICES",
    "CUDA_DEVICE_ORDER",
    "FERRY_JOB",
    "FERRY_ATTEMPT",
];

/// Everything a runtime needs to start one attempt of a job as a gang of rank processes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LaunchRequest {
    /// Job uid: exported as `FERRY_JOB`; letters, digits, `.`, `_`, `-` so it is safe in paths.
    pub job: String,
    /// Attempt number (0 for the first run, +1 per restart): exported as `FERRY_ATTEMPT`
    /// and used to keep each attempt's logs and exit records apart.
    pub attempt: u32,
    /// Number of (simulated, for the local runtime) nodes; `NNODES`.
    pub nodes: u32,
    /// Rank processes per node; `NPROC_PER_NODE`.
    pub procs_per_node: u32,
    /// The command every rank runs (`argv[0]` is looked up in `PATH`).
    pub argv: Vec<String>,
    /// Extra environment for every rank, on top of the control plane's own environment.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Working directory of every rank; the control plane's own when `None`.
    #[serde(default)]
    pub working_dir: Option<PathBuf>,
    /// One entry per global rank: the device indices or UUIDs that rank may use, joined into
    /// `CUDA_VISIBLE_DEVICES`. An empty list means no GPU at all (`CUDA_VISIBLE_DEVICES=""`);
    /// an empty outer list means no rank gets a GPU.
    #[serde(default)]
    pub gpus_per_rank: Vec<Vec<String>>,
    /// Directory that receives `attempt-<a>/rank-<r>.{log,exit,pid}` and `attempt-<a>/gang.json`.
    pub run_dir: PathBuf,
}

impl LaunchRequest {
    /// `nodes × procs_per_node`, or an error naming the field when it is 0 or too large.
    pub fn world_size(&self) -> Result<u32, RuntimeError> {
        if self.nodes == 0 {
            return Err(RuntimeError::request("nodes", "must be 1 or more (got 0)"));
        }
        if self.procs_per_node == 0 {
            return Err(RuntimeError::request(
                "procs_per_node",
                "must be 1 or more (got 0)",
            ));
        }
        match self.nodes.checked_mul(self.procs_per_node) {
            Some(world) if world <= MAX_WORLD_SIZE => Ok(world),
            _ => Err(RuntimeError::request(
                "procs_per_node",
                format!(
                    "nodes × procs_per_node = {} × {} exceeds the limit of {MAX_WORLD_SIZE} ranks; ask for fewer",
                    self.nodes, self.procs_per_node
                ),
            )),
        }
    }

    /// Checks every field that can be checked without I/O and returns the world size; on
    /// failure, the first problem found, naming its field.
    pub fn validate(&self) -> Result<u32, RuntimeError> {
        validate_job_id(&self.job)?;
        let world = self.world_size()?;
        if self.argv.is_empty() || self.argv[0].is_empty() {
            return Err(RuntimeError::request(
                "argv",
                "is empty; give the command each rank runs, e.g. [\"python3\", \"train.py\"]",
            ));
        }
        for (i, arg) in self.argv.iter().enumerate() {
            if arg.contains('\0') {
                return Err(RuntimeError::request(
                    format!("argv[{i}]"),
                    "contains a NUL byte, which no process argument can hold; remove it",
                ));
            }
        }
        for (key, value) in &self.env {
            if key.is_empty() || key.contains('=') || key.contains('\0') {
                return Err(RuntimeError::request(
                    format!("env.{key}"),
                    "is not a valid variable name (empty, or holds `=` or NUL); rename it",
                ));
            }
            if value.contains('\0') {
                return Err(RuntimeError::request(
                    format!("env.{key}"),
                    "value contains a NUL byte; remove it",
                ));
            }
            if RESERVED_ENV.contains(&key.as_str()) {
                return Err(RuntimeError::request(
                    format!("env.{key}"),
                    "is set by the runtime for every rank; remove it from env (GPUs go in gpus_per_rank)",
                ));
            }
        }
        if !self.gpus_per_rank.is_empty() && self.gpus_per_rank.len() != world as usize {
            return Err(RuntimeError::request(
                "gpus_per_rank",
                format!(
                    "has {} entries but the gang has {world} ranks; give one list per rank, or none at all for a CPU-only job",
                    self.gpus_per_rank.len()
                ),
            ));
        }
        for (rank, ids) in self.gpus_per_rank.iter().enumerate() {
            for id in ids {
                if id.is_empty()
                    || id.contains(',')
                    || id.contains('\0')
                    || id.contains(char::is_whitespace)
                {
                    return Err(RuntimeError::request(
                        format!("gpus_per_rank[{rank}]"),
                        format!(
                            "GPU id {id:?} is empty or holds a comma, NUL or space; use a device index or UUID"
                        ),
                    ));
                }
            }
        }
        if self.run_dir.as_os_str().is_empty() {
            return Err(RuntimeError::request(
                "run_dir",
                "is empty; give the directory for logs and exit records",
            ));
        }
        Ok(world)
    }

    /// The devices assigned to `rank`, empty when it has none.
    pub fn gpus_of(&self, rank: u32) -> &[String] {
        self.gpus_per_rank
            .get(rank as usize)
            .map(Vec::as_slice)
            .unwrap_or(&[])
    }
}

/// Checks a job uid is non-empty, short and made only of path-safe characters.
fn validate_job_id(job: &str) -> Result<(), RuntimeError> {
    let safe = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
    if job.is_empty() || job.len() > 253 || job.starts_with('.') || !job.chars().all(safe) {
        return Err(RuntimeError::request(
            "job",
            format!(
                "{job:?} is not a usable job uid: use 1–253 letters, digits, `.`, `_` or `-`, not starting with `.`"
            ),
        ));
    }
    Ok(())
}

/// What a runtime returns from `launch`: enough to observe, terminate and re-adopt the gang
/// after a control-plane restart. The control plane persists it (it is JSON-serialisable).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GangRecord {
    /// Which runtime launched it (`"local"`); another runtime refuses the record.
    pub backend: String,
    /// Job uid, as in the request.
    pub job: String,
    /// Attempt number, as in the request.
    pub attempt: u32,
    /// `NNODES` the ranks were given.
    pub nodes: u32,
    /// `NPROC_PER_NODE` the ranks were given.
    pub procs_per_node: u32,
    /// `MASTER_ADDR` the ranks were given.
    pub master_addr: String,
    /// `MASTER_PORT` the ranks were given.
    pub master_port: u16,
    /// Absolute `<run_dir>/attempt-<a>` directory holding this attempt's files.
    pub attempt_dir: PathBuf,
    /// Wall-clock launch time, milliseconds since the Unix epoch.
    pub launched_at_unix_ms: u64,
    /// One entry per global rank, in rank order.
    pub ranks: Vec<RankRecord>,
}

/// One rank process of a launched gang.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RankRecord {
    /// Global rank (`RANK`).
    pub rank: u32,
    /// Node index (`NODE_RANK`).
    pub node_rank: u32,
    /// Rank within its node (`LOCAL_RANK`).
    pub local_rank: u32,
    /// Devices in its `CUDA_VISIBLE_DEVICES` (empty: none).
    pub gpus: Vec<String>,
    /// Pid of the rank's wrapper shell, which is also its process-group id.
    pub pid: u32,
    /// Start time of that pid in clock ticks since boot (`/proc/<pid>/stat` field 22), so a
    /// recycled pid is never mistaken for the rank.
    pub start_time: u64,
    /// File receiving the rank's stdout and stderr.
    pub log_path: PathBuf,
    /// File the wrapper writes the exit status to, atomically, when the rank ends.
    pub exit_path: PathBuf,
    /// File holding `<pid> <start_time>`, for recovery when the record itself was not persisted.
    pub pid_path: PathBuf,
}

impl GangRecord {
    /// Number of ranks.
    pub fn world_size(&self) -> u32 {
        self.ranks.len() as u32
    }

    /// The record of global rank `rank`, or an error naming the valid range.
    pub fn rank(&self, rank: u32) -> Result<&RankRecord, RuntimeError> {
        self.ranks
            .get(rank as usize)
            .filter(|r| r.rank == rank)
            .ok_or_else(|| RuntimeError::NoSuchRank {
                job: self.job.clone(),
                rank,
                world_size: self.world_size(),
            })
    }

    /// The log file of `rank` (stdout and stderr, interleaved as written).
    pub fn log_path(&self, rank: u32) -> Result<&Path, RuntimeError> {
        Ok(&self.rank(rank)?.log_path)
    }
}

/// How one rank is doing, as far as the runtime can tell.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum RankState {
    /// Its process is alive.
    Running,
    /// It ended with this exit status (as its wrapper shell saw it: a command killed by
    /// signal N shows as 128+N).
    Exited {
        /// Exit status.
        code: i32,
    },
    /// Its wrapper was killed by this signal: SIGKILL from `terminate` or the OOM killer, or a
    /// SIGTERM that came before the wrapper had set its trap (the command had not started).
    Signaled {
        /// Signal number.
        signal: i32,
    },
    /// Its process is gone and left no exit record.
    Lost,
    /// Its exit record exists but cannot be read back.
    Unreadable {
        /// Why, naming the file.
        message: String,
    },
}

/// One rank's state and, once it ended, when.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RankStatus {
    /// Global rank.
    pub rank: u32,
    /// Its state.
    pub state: RankState,
    /// When it ended (exit record's modification time), milliseconds since the Unix epoch.
    pub ended_at_unix_ms: Option<u64>,
}

impl RankStatus {
    /// True once the rank can no longer change state.
    pub fn is_finished(&self) -> bool {
        !matches!(self.state, RankState::Running)
    }
}

/// How a whole gang is doing: the control plane acts on this.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum GangStatus {
    /// No rank has failed or vanished, and at least one is still running.
    Running,
    /// Every rank exited with status 0.
    Succeeded,
    /// A rank failed; the earliest to end is named. Other ranks may still be running:
    /// the control plane should `terminate` the gang.
    Failed {
        /// Global rank that failed first.
        rank: u32,
        /// Its exit status, when it exited.
        exit_code: Option<i32>,
        /// The signal that ended it, when known (a shell status of 128+N is read as signal N).
        signal: Option<i32>,
        /// One line for users, naming the rank and its log file.
        message: String,
    },
    /// A rank's process is gone with no exit record (killed with the wrapper, or files lost).
    Lost {
        /// Lowest such rank.
        rank: u32,
        /// One line for users.
        message: String,
    },
}

impl GangStatus {
    /// True for every state except `Running`.
    pub fn is_terminal(&self) -> bool {
        !matches!(self, GangStatus::Running)
    }

    /// Folds per-rank states into the gang's: a failure wins over a loss, which wins over
    /// running ranks; success needs every rank to have exited 0.
    pub fn from_ranks(gang: &GangRecord, ranks: &[RankStatus]) -> GangStatus {
        let log_of = |rank: u32| {
            gang.rank(rank)
                .map(|r| r.log_path.display().to_string())
                .unwrap_or_default()
        };
        // End times come from file timestamps, which the kernel keeps at clock-tick grain: a
        // rank stopped (SIGTERM/SIGKILL) because another failed can read as ending in the same
        // millisecond. On such a tie the rank that was not stopped is the first to end.
        let stopped = |status: &GangStatus| matches!(status, GangStatus::Failed { signal: Some(s), .. } if *s == 15 || *s == 9);
        let first_failure = ranks
            .iter()
            .filter_map(|r| {
                failure_of(r, &log_of(r.rank)).map(|status| {
                    let end = r.ended_at_unix_ms.unwrap_or(u64::MAX);
                    ((end, stopped(&status), r.rank), status)
                })
            })
            .min_by_key(|(key, _)| *key);
        if let Some((_, status)) = first_failure {
            return status;
        }
        if let Some(lost) = ranks.iter().find(|r| r.state == RankState::Lost) {
            let rank = lost.rank;
            return GangStatus::Lost {
                rank,
                message: format!(
                    "rank {rank} is gone and left no exit record (killed together with its wrapper, or its files were removed); see {}",
                    log_of(rank)
                ),
            };
        }
        if ranks.iter().any(|r| r.state == RankState::Running) || ranks.is_empty() {
            return GangStatus::Running;
        }
        GangStatus::Succeeded
    }
}

/// The `Failed` status a rank implies, or `None` when it has not failed.
fn failure_of(status: &RankStatus, log: &str) -> Option<GangStatus> {
    let rank = status.rank;
    match &status.state {
        RankState::Running | RankState::Lost | RankState::Exited { code: 0 } => None,
        RankState::Exited { code } => {
            let code = *code;
            let signal = (129..=128 + 64).contains(&code).then_some(code - 128);
            let hint = match (code, signal) {
                (127, _) => " (command not found: check argv[0] and PATH)".to_string(),
                (126, _) => " (command not executable: check its permissions)".to_string(),
                (_, Some(sig)) => format!(" (the shell's report of signal {sig})"),
                _ => String::new(),
            };
            Some(GangStatus::Failed {
                rank,
                exit_code: Some(code),
                signal,
                message: format!("rank {rank} exited with status {code}{hint}; see {log}"),
            })
        }
        RankState::Signaled { signal } => Some(GangStatus::Failed {
            rank,
            exit_code: None,
            signal: Some(*signal),
            message: format!("rank {rank} was killed by signal {signal}; see {log}"),
        }),
        RankState::Unreadable { message } => Some(GangStatus::Failed {
            rank,
            exit_code: None,
            signal: None,
            message: format!("rank {rank}: {message}"),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Rank 1 fails, the runtime stops rank 0 with SIGTERM, and both exit records carry the
    /// same millisecond (file times move in clock ticks): rank 1 is named, not rank 0.
    #[test]
    fn a_rank_stopped_because_another_failed_is_not_named_on_a_tied_end() {
        let rank = |r: u32| RankRecord {
            rank: r,
            node_rank: 0,
            local_rank: r,
            gpus: Vec::new(),
            pid: 1,
            start_time: 0,
            log_path: PathBuf::from(format!("rank-{r}.log")),
            exit_path: PathBuf::new(),
            pid_path: PathBuf::new(),
        };
        let gang = GangRecord {
            backend: "local".into(),
            job: "j".into(),
            attempt: 0,
            nodes: 1,
            procs_per_node: 2,
            master_addr: "127.0.0.1".into(),
            master_port: 1,
            attempt_dir: PathBuf::new(),
            launched_at_unix_ms: 0,
            ranks: vec![rank(0), rank(1)],
        };
        let ended = |r: u32, code: i32, at: u64| RankStatus {
            rank: r,
            state: RankState::Exited { code },
            ended_at_unix_ms: Some(at),
        };
        let named = |ranks: &[RankStatus]| match GangStatus::from_ranks(&gang, ranks) {
            GangStatus::Failed { rank, .. } => rank,
            other => panic!("{other:?}"),
        };
        assert_eq!(named(&[ended(0, 143, 1000), ended(1, 3, 1000)]), 1);
        // A real earlier end still wins, whatever ended it.
        assert_eq!(named(&[ended(0, 143, 999), ended(1, 3, 1000)]), 0);
        // Two plain failures at once: the lower rank.
        assert_eq!(named(&[ended(0, 2, 1000), ended(1, 3, 1000)]), 0);
    }
}
