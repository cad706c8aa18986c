//! Ferry's planner: from a model's `config.json` and a set of GPUs to a training (or serving)
//! plan — exact parameter counts, a per-GPU memory breakdown, a throughput estimate, the chosen
//! method and parallel layout with the reasons, and the launch commands that run it.
//!
//! Start with [`plan`] (training) or [`plan_serving`] (vLLM); [`ModelShape`] reads configs and
//! [`catalog`] knows well-known models offline. No I/O happens here beyond parsing strings.
#![forbid(unsafe_code)]

pub mod calibrate;
pub mod catalog;
pub mod error;
pub mod gpu;
pub mod job;
pub mod launch;
pub mod memory;
pub mod model;
pub mod render;
mod report;
pub mod request;
pub mod search;
pub mod serve;
pub mod throughput;

pub use catalog::shape_of;
pub use error::{PlanError, Result};
pub use gpu::{GpuKind, GpuSpec};
pub use job::{expected_run_s, request_for_job};
pub use launch::{JobLaunch, JobPaths, job_launch, launcher_for, render_options};
pub use memory::{
    MemoryBreakdown, Phase, Recipe, SavedTensor, ServeMemory, TrainSetup, saved_tensors,
    serve_memory, training_memory, with_overheads,
};
pub use model::{Arch, MlpKind, ModelShape, MoeShape, ParamCounts};
pub use render::{
    Launcher, RenderOptions, deepspeed_config, default_launcher, render_train, render_vllm,
};
pub use request::{
    Engine, FullPrecision, Layout, Method, MethodKind, Parallelism, Pinned, PlanFlags, PlanRequest,
    Recompute, ServeRequest, Task, parse_bytes,
};
pub use search::{Candidate, PlanReport, Rejection, plan, split_slowdown_pct};
pub use serve::{ServePlan, plan_serving};
pub use throughput::{Throughput, estimate};
