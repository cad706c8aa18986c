//! Ferry's scheduler: team queues with GPU quotas per flavor, cohorts with borrowing and
//! lending limits, named priorities, gang admission, preemption that never loops, and
//! topology-aware placement — pure logic driven by the control plane — plus a trace simulator.
//!
//! How the local runtime drives it (`ferry up --gpus 4`): a low-priority 4-GPU job runs, a
//! high-priority 2-GPU job arrives, the low one is preempted gracefully, the high one runs, then
//! the low one resumes.
//!
//! ```
//! use ferry_sched::{Cluster, Decision, PriorityClass, QueueSpec, Scheduler, Workload};
//!
//! let queue = QueueSpec::any_flavor("default", None, 4);
//! let mut s = Scheduler::new(Cluster::local(4, "local"), vec![queue], PriorityClass::standard())?;
//! s.submit(Workload::single("low", "default", Some("low"), 4, 0))?;
//! assert!(matches!(&s.cycle(0)[..], [Decision::Admit { id, .. }] if id == "low"));
//! s.checkpointed("low", 40)?;
//!
//! s.submit(Workload::single("high", "default", Some("high"), 2, 60))?;
//! // SIGTERM the low job; its GPUs stay its own until it has exited.
//! assert!(matches!(&s.cycle(60)[..], [Decision::Preempt { id, .. }] if id == "low"));
//! assert!(s.cycle(61).is_empty(), "one Preempt per victim, nothing admitted yet");
//! s.evicted("low")?; // it wrote its checkpoint and exited: requeued, keeping its age
//!
//! let d = s.cycle(90);
//! let [Decision::Admit { id, placement, .. }] = &d[..] else { panic!("{d:?}") };
//! assert_eq!((id.as_str(), placement[0].gpus.len()), ("high", 2));
//! assert!(s.cycle(91).is_empty(), "low needs all 4 GPUs: it waits, and is not preempted again");
//!
//! s.finished("high")?;
//! // The low job resumes from its checkpoint on all four GPUs.
//! let d = s.cycle(300);
//! assert!(matches!(&d[..], [Decision::Admit { id, placement, .. }]
//!     if id == "low" && placement[0].gpus == [0, 1, 2, 3]));
//! # Ok::<(), ferry_sched::SchedError>(())
//! ```
#![forbid(unsafe_code)]

pub mod config;
mod entitlement;
pub mod error;
pub mod pace;
mod pool;
pub mod scheduler;
pub mod sim;

pub use config::{
    ANY_FLAVOR, BorrowWithinCohort, Cluster, CohortSpec, DEFAULT_PRIORITY, Decision, FlavorQuota,
    MAX_CLUSTER_NODES, MAX_SPLIT_SLOWDOWN_PCT, Multifactor, Node, Options, PodPlacement,
    PreemptReason, PreemptionPolicy, PriorityClass, QueueSpec, ReclaimWithinCohort, StopPolicy,
    Time, Topology, WithinQueue, Workload,
};
pub use error::{Result, SchedError, unknown_priority, unknown_queue};
pub use scheduler::{
    CohortUsage, ExpectedStart, FORECAST_CYCLES, Forecast, ForecastStart, Forecasted, InLine,
    QueueUsage, Scheduler, WaitCause, Waiting,
};
pub use sim::{
    ClassStats, CohortShare, Estimates, FAIRNESS_TOLERANCE, ForecastAccuracy, GenSpec, JOB_COLUMNS,
    JobOutcome, Knowledge, MIN_SATURATED_S, MakespanBound, MakespanLimit, MissCause, Policy,
    Probes, Shape, ShareBreakdown, SimReport, Site, SizeMix, StartEstimates, TeamShare, TraceJob,
    check_replayable, cluster_with_gpus, cohort_shares, default_cluster, default_queues,
    describe_cohorts, describe_setup, entitlements, generated_trace, heeds_priorities,
    makespan_bound, parse_trace, read_trace, render_jobs_csv, render_svg, render_table,
    requiring_one_rack, simulate, simulate_knowing, simulate_probing, simulate_with, with_load,
    with_racks,
};
