//! Ferry's Kubernetes backend.
//!
//! Two layers, as in kube-rs: a pure layer that turns Ferry specs (and the planner's
//! launch commands) into Kubernetes objects — no I/O, snapshot- and schema-tested — and an
//! operator layer on kube 5 that applies them, admits, preempts, restarts from checkpoints
//! and mirrors status. CRDs are generated from the spec crate's schemas.
#![forbid(unsafe_code)]

mod error;

/// Admission with Kueue's protocol, decided by Ferry's scheduler.
pub mod admission;
/// Reading the cluster: optional APIs, claims and queues (`--check`).
pub mod cluster;
/// Ferry's CRDs, generated from the spec types, and the cluster-side resource types.
pub mod crd;
/// The gateway's replicas, discovered from EndpointSlices labelled with the served model.
pub mod endpoints;
/// Lease-based leader election.
pub mod leader;
/// The reconcile loop (`ferry operator`).
pub mod operator;
/// What rendering needs besides the specs (cluster capabilities, images, claims).
pub mod options;
/// Training progress from rank 0's metrics lines (`pods/log`).
pub mod progress;
/// Every object a file of resources becomes, checked before rendering.
pub mod render;
/// `ModelDeployment` → vLLM Deployment, Service, HPA or KEDA ScaledObject.
pub mod serve;
/// `Queue`s → Namespaces, ResourceQuotas, LimitRanges, PriorityClasses, Kueue objects.
pub mod tenancy;
/// `TrainJob` → JobSet, or Indexed Job + headless Service, with correct rank wiring.
pub mod train;

pub use admission::{Admission, Admit, AdmitAll, Gang, SchedAdmission};
pub use crd::{TrainJobClusterStatus, TrainJobResource, crd_files, crds};
pub use endpoints::{SliceState, replicas_by_model, watch_replicas};
pub use error::{K8sError, Result};
pub use operator::{Context, FIELD_MANAGER, FINALIZER, reconcile};
pub use options::{Attempt, Claims, Cluster, ClusterState, Images, RenderOptions};
pub use render::{check, expand_sweeps, render, to_yaml, warnings};
