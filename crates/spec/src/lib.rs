//! Ferry's resource types and the rules that make them valid.
//!
//! One set of Rust structs is the YAML format, the REST API body and (later) the
//! Kubernetes CRD. This crate does no I/O: it turns text or JSON values into typed,
//! validated resources and reports *every* problem at once, each naming its field
//! path and the fix.
#![forbid(unsafe_code)]

mod adopt;
mod cohort;
mod deployment;
mod error;
mod foreign;
mod kueue;
mod lifecycle;
mod meta;
mod metrics_line;
mod parse;
mod priority_class;
mod priority_classes;
mod quantity;
mod queue;
mod resource_quota;
mod schema;
mod selector;
mod sweep;
#[cfg(feature = "sched")]
mod to_sched;
mod train_job;
mod validate;
mod volcano;

pub use adopt::{Adopted, adopt};
pub use cohort::{Cohort, CohortQuota, CohortSpec};
pub use deployment::{
    Autoscaling, DEFAULT_SCALE_METRIC, ModelDeployment, ModelDeploymentSpec, ModelDeploymentStatus,
    ScaleProvider, ServeEngine,
};
pub use error::{FieldError, SelectorError, SpecError};
pub use foreign::{QueueObjects, holds_kubernetes_objects};
pub use kueue::{CLUSTER_QUEUE_FIELDS, KUEUE_GROUP, KueueQueues, LocalQueue, read_kueue_queues};
pub use lifecycle::{JobPhase, TransitionError};
pub use meta::{API_VERSION, ObjectMeta, validate_name};
pub use metrics_line::{MAX_METRICS_LINE, parse_metrics_line};
pub use parse::{Resource, ResourceKind, parse_documents, parse_value, parse_values};
pub use priority_class::{MAX_PRIORITY_VALUE, PreemptionPolicy, PriorityClass, PriorityClassSpec};
pub use priority_classes::{ClusterPriorityClass, ClusterPriorityClasses, read_priority_classes};
pub use quantity::quantity;
pub use queue::{
    BorrowPolicy, BorrowWithinCohort, FlavorQuota, Preemption, Queue, QueueSpec,
    ReclaimWithinCohort, StopPolicy, WithinQueue,
};
pub use resource_quota::{NamespaceQuotas, read_resource_quotas};
pub use schema::{json_schema, json_schema_all};
pub use selector::LabelSelector;
pub use sweep::{
    DEFAULT_SWEEP_METRIC, JobTemplate, MAX_SWEEP_JOBS, SWEEP_INDEX_LABEL, SWEEP_LABEL,
    SWEEP_PARAMETERS_ANNOTATION, Sweep, SweepBest, SweepJob, SweepJobStatus, SweepSpec,
    SweepStatus, TemplateMeta, show_value, sweep_job_name,
};
pub use train_job::{
    BUDGET_NO_RESTART, CheckpointSpec, DataFormat, DataSpec, EngineKind, ExportSpec, FailurePolicy,
    LoraSpec, MAX_SPLIT_SLOWDOWN_PCT, Method, ModelRef, ModelSource, Parallelism, Resources,
    ResumePolicy, Task, Topology, TrainJob, TrainJobSpec, TrainJobStatus, TrainParams,
};
pub use volcano::{
    VOLCANO_COHORT, VOLCANO_GROUP, VOLCANO_QUEUE_FIELDS, VOLCANO_ROOT, VolcanoQueue, VolcanoQueues,
    read_volcano_queues,
};
