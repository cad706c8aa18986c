//! Ferry's scheduler: team queues with GPU quotas per flavor, cohorts with borrowing and
//! lending limits, named priorities, gang admission, preemption that never loops, and
//! topology-aware placement — pure logic driven by the control plane — plus a trace simulator.
#![forbid(unsafe_code)]

pub mod config;
pub mod error;
mod pool;
pub mod scheduler;
pub mod sim;

pub use config::{
    Cluster, Decision, FlavorQuota, Node, Options, PodPlacement, PreemptReason, PriorityClass,
    QueueSpec, Time, Workload,
};
pub use error::{Result, SchedError};
pub use scheduler::{QueueUsage, Scheduler};
pub use sim::{
    GenSpec, Policy, SimReport, SizeMix, TeamShare, TraceJob, cluster_with_gpus, default_cluster,
    default_queues, describe_setup, entitlements, generated_trace, parse_trace, read_trace,
    render_svg, render_table, simulate,
};
