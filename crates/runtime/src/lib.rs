//! Ferry's runtime: the [`Runtime`] seam the control plane drives (launch, observe,
//! terminate, adopt, logs of a gang of rank processes), its local backend
//! [`LocalRuntime`], and the GPU [`Inventory`]. Start with [`Runtime`] and [`LaunchRequest`].
#![forbid(unsafe_code)]

mod error;
mod gang;
pub mod gpu;
pub mod local;
mod merged_logs;
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
