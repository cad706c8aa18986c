//! What rendering needs besides the specs: what the cluster offers, images, claim names,
//! and (for `--check`) what already exists in the cluster.

use std::collections::{BTreeMap, BTreeSet};

/// Label put on every object Ferry renders (`app.kubernetes.io/managed-by: ferry`).
pub const MANAGED_BY: (&str, &str) = ("app.kubernetes.io/managed-by", "ferry");
/// Label naming the `TrainJob` an object belongs to.
pub const LABEL_TRAIN_JOB: &str = "ferry.dev/train-job";
/// Label naming the attempt (0 for the first run, +1 per restart) of a training gang.
pub const LABEL_ATTEMPT: &str = "ferry.dev/attempt";
/// Label naming the `ModelDeployment` an object belongs to.
pub const LABEL_DEPLOYMENT: &str = "ferry.dev/model-deployment";
/// Label the gateway selects EndpointSlices with: the name clients put in `model`.
pub const LABEL_SERVED_MODEL: &str = "ferry.dev/served-model";
/// Kueue's label naming the LocalQueue a job goes to.
pub const KUEUE_QUEUE_LABEL: &str = "kueue.x-k8s.io/queue-name";
/// Kueue's label naming the WorkloadPriorityClass of a job.
pub const KUEUE_PRIORITY_LABEL: &str = "kueue.x-k8s.io/priority-class";
/// The annotation the Job controller sets on every pod of an Indexed Job.
pub const COMPLETION_INDEX_ANNOTATION: &str = "batch.kubernetes.io/job-completion-index";

/// Optional APIs and node labels of the target cluster; the operator fills it by discovery,
/// `ferry render` from flags.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cluster {
    /// The JobSet CRD (`jobset.x-k8s.io/v1alpha2`) is installed: training becomes a JobSet.
    pub jobset: bool,
    /// Kueue's CRDs are installed: Kueue admits, Ferry renders its queues.
    pub kueue: bool,
    /// KEDA is installed: autoscaling becomes a `ScaledObject` instead of an HPA.
    pub keda: bool,
    /// Node label holding the rack (e.g. `topology.kubernetes.io/rack`); gangs stay in one rack.
    pub rack_label: Option<String>,
    /// Bandwidth of the links between racks, as a percentage of that between nodes within one
    /// (an oversubscribed spine: 25 for 4:1). With it, a launcher job's plan says how much
    /// longer it runs split across racks (`SchedAdmission::with_inter_rack_bandwidth_pct`).
    pub inter_rack_bandwidth_pct: Option<u32>,
    /// Node label holding the GPU flavor (`H100-80GB`, …); used for node affinity.
    pub flavor_label: String,
    /// GPUs per node: multi-node jobs must use whole nodes.
    pub gpus_per_node: u32,
    /// Prometheus that KEDA queries for vLLM's waiting-requests metric.
    pub prometheus_url: String,
}

impl Default for Cluster {
    fn default() -> Self {
        Cluster {
            jobset: false,
            kueue: false,
            keda: false,
            rack_label: None,
            inter_rack_bandwidth_pct: None,
            flavor_label: "ferry.dev/gpu-flavor".into(),
            gpus_per_node: 8,
            prometheus_url: "http://prometheus-operated.monitoring.svc:9090".into(),
        }
    }
}

/// Container images.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Images {
    /// Image with torchrun, Megatron-LM, TRL/PEFT, DeepSpeed and ms-swift.
    pub trainer: String,
    /// vLLM's OpenAI server image.
    pub vllm: String,
}

impl Default for Images {
    fn default() -> Self {
        Images {
            trainer: "ghcr.io/ferry-dev/trainer:0.1.0".into(),
            vllm: "vllm/vllm-openai:v0.11.0".into(),
        }
    }
}

/// PersistentVolumeClaims (in each team namespace) mounted into every pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claims {
    /// Training data, mounted read-only at `/data`.
    pub data: String,
    /// Base models and exported models, mounted at `/models`.
    pub models: String,
    /// Checkpoints, mounted at `/checkpoints`.
    pub checkpoints: String,
}

impl Default for Claims {
    fn default() -> Self {
        Claims {
            data: "ferry-data".into(),
            models: "ferry-models".into(),
            checkpoints: "ferry-checkpoints".into(),
        }
    }
}

/// Everything rendering needs besides the specs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RenderOptions {
    /// What the cluster offers.
    pub cluster: Cluster,
    /// Images.
    pub images: Images,
    /// Claim names.
    pub claims: Claims,
    /// Size of the memory-backed `/dev/shm` (NCCL and data loaders need more than 64 MiB).
    pub shm_size: String,
    /// Rendezvous port of rank 0.
    pub master_port: u16,
    /// Port vLLM listens on.
    pub serve_port: u16,
}

impl Default for RenderOptions {
    fn default() -> Self {
        RenderOptions {
            cluster: Cluster::default(),
            images: Images::default(),
            claims: Claims::default(),
            shm_size: "16Gi".into(),
            master_port: 29500,
            serve_port: 8000,
        }
    }
}

/// What exists in the cluster, for `ferry render --check` and the operator's pre-flight.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClusterState {
    /// PersistentVolumeClaim names per namespace.
    pub claims: BTreeMap<String, BTreeSet<String>>,
    /// Ferry queue names per namespace (from `Queue` objects or Kueue `LocalQueue`s).
    pub queues: BTreeMap<String, BTreeSet<String>>,
}

/// Which attempt of a training gang to render, and whether it starts suspended.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Attempt {
    /// 0 for the first run, +1 per restart; part of the child object's name.
    pub number: u32,
    /// Create the gang suspended (Kueue's protocol: unsuspended once admitted).
    pub suspend: bool,
}

/// `Kind/namespace/name`, the prefix of every error about one resource.
pub(crate) fn object_id(kind: &str, ns: &str, name: &str) -> String {
    format!("{kind}/{ns}/{name}")
}

/// Ferry priority names → PriorityClass names and values.
pub const PRIORITIES: [(&str, i32); 3] = [("low", 1_000), ("normal", 10_000), ("high", 100_000)];

/// The PriorityClass a job's `priority` maps to: `ferry-<name>` for Ferry's own names, the
/// name itself for any other (cluster-defined) class.
pub fn priority_class(priority: Option<&str>) -> String {
    let p = priority.unwrap_or("normal");
    if PRIORITIES.iter().any(|(n, _)| *n == p) {
        format!("ferry-{p}")
    } else {
        p.to_owned()
    }
}

/// A DNS-1123 label form of a GPU flavor (`H100-80GB` → `h100-80gb`), for object names.
pub fn flavor_object_name(flavor: &str) -> String {
    flavor
        .to_ascii_lowercase()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect::<String>()
        .trim_matches('-')
        .to_owned()
}
