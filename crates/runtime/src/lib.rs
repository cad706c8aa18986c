//! Ferry's runtime: the [`Runtime`] seam the control plane drives (launch, observe,
//! terminate, adopt and read the logs of a gang of rank processes), its local backend
//! [`LocalRuntime`], and the GPU [`Inventory`]. Start with [`Runtime`] and [`LaunchRequest`].
//!
//! Invariants: this crate decides nothing about admission (the scheduler does) and knows no
//! job spec; a rank's exit status reaches disk without the control plane's help, so a
//! `kill -9` of the control plane loses nothing; a recorded pid is only trusted (or
//! signalled) while its `/proc` start time still matches.
//!
//! ```no_run
//! # async fn demo() -> Result<(), ferry_runtime::RuntimeError> {
//! use std::time::Duration;
//! use ferry_runtime::{LaunchRequest, LocalRuntime, Runtime, GangStatus};
//!
//! let runtime = LocalRuntime::new();
//! let gang = runtime
//!     .launch(LaunchRequest {
//!         job: "hello-7f3a".into(),
//!         attempt: 0,
//!         nodes: 2,
//!         procs_per_node: 2,
//!         argv: vec!["python3".into(), "hello_gang.py".into()],
//!         env: Default::default(),
//!         working_dir: None,
//!         gpus_per_rank: vec![], // CPU only: every rank gets CUDA_VISIBLE_DEVICES=""
//!         run_dir: "/var/lib/ferry/runs/hello-7f3a".into(),
//!     })
//!     .await?;
//! // Persist `gang` (it is serde) before relying on it; after a restart, `adopt` it.
//! // Poll every second; on a failed or lost rank, stop the rest (SIGTERM, 30 s, SIGKILL).
//! let (poll, grace) = (Duration::from_secs(1), Duration::from_secs(30));
//! let status = ferry_runtime::supervise(&runtime, &gang, poll, grace).await?;
//! assert!(status != GangStatus::Running);
//! # Ok(()) }
//! ```
#![forbid(unsafe_code)]

/// The crate's error type.
mod error;
/// Launch requests, gang records and statuses: the plain data crossing the seam.
mod gang;
/// GPU discovery through NVML, and virtual GPU slots.
pub mod gpu;
/// The local backend: child processes, exit records, `/proc` checks, log files.
pub mod local;
/// All ranks' logs in one line-prefixed stream.
mod merged_logs;
/// The `Runtime` trait and helpers that work over any backend.
mod runtime;

pub use error::{Result, RuntimeError};
pub use gang::{
    GangRecord, GangStatus, LaunchRequest, MAX_WORLD_SIZE, RESERVED_ENV, RankRecord, RankState,
    RankStatus,
};
pub use gpu::{Gpu, GpuSource, Inventory, discover};
pub use local::LocalRuntime;
pub use merged_logs::{merged_logs, prefix_lines};
pub use runtime::{LogStream, Runtime, supervise, wait};
