//! The crate's one error type: every variant names the field, file or rank at fault
//! and what would fix it, because these messages reach `ferry` users verbatim.

use std::path::PathBuf;

/// Why a runtime operation failed.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// A [`LaunchRequest`](crate::LaunchRequest) field is out of range or malformed.
    #[error("launch request `{field}`: {problem}")]
    InvalidRequest {
        /// Field path inside the request, e.g. `env.RANK` or `gpus_per_rank[3]`.
        field: String,
        /// What is wrong and how to fix it.
        problem: String,
    },

    /// A file or directory the runtime needs could not be read or written.
    #[error("{action} `{path}`: {source} (check that the directory exists and is writable)")]
    Io {
        /// What the runtime was doing, e.g. "create log file".
        action: &'static str,
        /// The file or directory involved.
        path: PathBuf,
        /// The operating system's reason.
        #[source]
        source: std::io::Error,
    },

    /// `/bin/sh` (the rank wrapper) could not be started for a rank.
    #[error(
        "start rank {rank} through /bin/sh: {source} (Ferry's rank wrapper needs a POSIX /bin/sh)"
    )]
    Spawn {
        /// Global rank that failed to start.
        rank: u32,
        /// The operating system's reason.
        #[source]
        source: std::io::Error,
    },

    /// No free TCP port could be reserved on 127.0.0.1 for `MASTER_PORT`.
    #[error("find a free MASTER_PORT on 127.0.0.1: {0} (is the loopback interface up?)")]
    NoFreePort(#[source] std::io::Error),

    /// A persisted [`GangRecord`](crate::GangRecord) does not fit this runtime or is inconsistent.
    #[error("gang record of job `{job}` attempt {attempt}: {problem}")]
    InvalidRecord {
        /// Job uid from the record.
        job: String,
        /// Attempt number from the record.
        attempt: u32,
        /// What is inconsistent and how to fix it.
        problem: String,
    },

    /// A rank number outside the gang was asked for.
    #[error(
        "rank {rank} does not exist in job `{job}`: its world size is {world_size} (ranks 0..{world_size})"
    )]
    NoSuchRank {
        /// Job uid.
        job: String,
        /// The rank asked for.
        rank: u32,
        /// Number of ranks in the gang.
        world_size: u32,
    },

    /// Sending a signal to a rank's process group failed for a reason other than "already gone".
    #[error(
        "send {signal} to process group {pgid} (rank {rank}): {source} (is the control plane running as the user that launched the job?)"
    )]
    Signal {
        /// Global rank.
        rank: u32,
        /// Process group id (the rank wrapper's pid).
        pgid: u32,
        /// Signal name.
        signal: &'static str,
        /// The operating system's reason.
        #[source]
        source: nix::errno::Errno,
    },

    /// A rank's process outlived SIGKILL (usually stuck in uninterruptible I/O).
    #[error(
        "rank {rank} (pid {pid}) is still alive {waited_ms} ms after SIGKILL; it is stuck in the kernel (check `cat /proc/{pid}/stack`, e.g. a hung NFS or GPU driver call)"
    )]
    Unkillable {
        /// Global rank.
        rank: u32,
        /// Its wrapper's pid.
        pid: u32,
        /// How long the runtime waited.
        waited_ms: u64,
    },
}

/// Result alias used throughout the crate.
pub type Result<T, E = RuntimeError> = std::result::Result<T, E>;

impl RuntimeError {
    /// Shorthand for [`RuntimeError::Io`], used with `map_err`.
    pub(crate) fn io(
        action: &'static str,
        path: impl Into<PathBuf>,
    ) -> impl FnOnce(std::io::Error) -> Self {
        let path = path.into();
        move |source| RuntimeError::Io {
            action,
            path,
            source,
        }
    }

    /// Shorthand for [`RuntimeError::InvalidRequest`].
    pub(crate) fn request(field: impl Into<String>, problem: impl Into<String>) -> Self {
        RuntimeError::InvalidRequest {
            field: field.into(),
            problem: problem.into(),
        }
    }
}
