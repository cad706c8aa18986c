//! `TrainJob`: one training or fine-tuning run, run as a gang of rank processes.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::lifecycle::JobPhase;
use crate::meta::ObjectMeta;
use crate::validate::Problems;

/// A training job: what to train, on what, how, and what to do on failure.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TrainJob {
    /// Always `ferry.dev/v1alpha1`.
    pub api_version: String,
    /// Always `TrainJob`.
    pub kind: String,
    /// Name, namespace, labels.
    pub metadata: ObjectMeta,
    /// What the user asked for.
    pub spec: TrainJobSpec,
    /// What the control plane observed; ignored on input.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<TrainJobStatus>,
}

/// What every runtime tells a user whose job's runs reached `spec.maxTotalRuntimeSeconds`
/// (a job that ended is not started again, whatever its spec says later).
pub const BUDGET_NO_RESTART: &str =
    "no restart: the budget covers all runs together; the checkpoints written so far are kept";

/// The desired state of a [`TrainJob`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TrainJobSpec {
    /// Which engine turns the job into processes.
    #[serde(default)]
    pub engine: EngineKind,
    /// For `engine: command`, or a launcher engine running your own launch script instead of
    /// the one Ferry renders: the program and its arguments, run once per rank.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub command: Vec<String>,
    /// For launcher engines whose command Ferry renders (torchrun, deepspeed, swift, and
    /// megatron without `spec.command`): arguments appended, after Ferry's own, to the
    /// training program's command line, e.g. `[--model_type, llama, --template, chatml]` for
    /// ms-swift on a local model it cannot identify by name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub extra_args: Vec<String>,
    /// Extra environment variables for every rank.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// Working directory of every rank; the directory `ferry apply` ran in when omitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub working_dir: Option<String>,
    /// The model to start from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<ModelRef>,
    /// What kind of training.
    #[serde(default)]
    pub task: Task,
    /// Full fine-tuning, LoRA, QLoRA, or `auto` (the planner decides).
    #[serde(default)]
    pub method: Method,
    /// LoRA settings for `method: lora|qlora`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lora: Option<LoraSpec>,
    /// Training data.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<DataSpec>,
    /// Nodes, processes and GPUs.
    #[serde(default)]
    pub resources: Resources,
    /// Parallel layout; every field left out is chosen by the planner (`parallelism: auto`).
    #[serde(default)]
    pub parallelism: Parallelism,
    /// Hyper-parameters.
    #[serde(default)]
    pub train: TrainParams,
    /// Where and how often to checkpoint.
    #[serde(default)]
    pub checkpoint: CheckpointSpec,
    /// The team queue that admits the job; `default` when omitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<String>,
    /// A named priority (`low`, `normal`, `high`, or a priority class).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<String>,
    /// What to do when a rank fails.
    #[serde(default)]
    pub on_failure: FailurePolicy,
    /// Wall-clock limit of one run, launch to exit (Slurm's `--time`, a Job's
    /// `activeDeadlineSeconds`): the scheduler backfills and plans reservations with it, and
    /// a run still going after it gets SIGTERM and `onFailure.graceSeconds` to checkpoint,
    /// then counts as a failure (`DeadlineExceeded`) under `onFailure`: restarted from the
    /// latest checkpoint while restarts remain. A restart or a resume is a new run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_runtime_seconds: Option<u64>,
    /// Wall-clock budget of all runs together (Kueue's `maximumExecutionTimeSeconds`):
    /// restarts and resumes after preemption carry what the earlier runs used. When the
    /// runs reach it, the running one gets SIGTERM and `onFailure.graceSeconds` to
    /// checkpoint, and the job fails with `BudgetExhausted`, without a restart.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_total_runtime_seconds: Option<u64>,
    /// Export the final checkpoint as a registered model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub export: Option<ExportSpec>,
    /// Hold the job (Kubernetes' `spec.suspend`, Slurm's `scontrol hold`/`suspend`): while
    /// true it leaves its queue, and a running job gets SIGTERM and `onFailure.graceSeconds`
    /// to checkpoint, as for a preemption (not a restart; its run time counts towards
    /// `maxTotalRuntimeSeconds`). Set back to false, it queues again and resumes from its
    /// latest checkpoint. `ferry suspend job` / `ferry resume job` set it.
    #[serde(default, skip_serializing_if = "is_false")]
    pub suspend: bool,
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// The longest `spec.maxRuntimeSeconds` accepted: a year.
pub(crate) const MAX_RUNTIME_LIMIT_S: u64 = 366 * 24 * 3600;

/// How a job becomes processes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum EngineKind {
    /// Let Ferry pick from the model, method and resources.
    #[default]
    Auto,
    /// Ferry's built-in candle engine (CPU-friendly).
    Builtin,
    /// Megatron-LM's `pretrain_gpt.py`.
    Megatron,
    /// ms-swift's `swift sft|rlhf|pt`.
    Swift,
    /// A torchrun-launched script (HF Transformers + PEFT).
    Torchrun,
    /// The DeepSpeed launcher.
    Deepspeed,
    /// Any command, run once per rank, like a Kubernetes Job.
    Command,
}

impl EngineKind {
    /// The name used in YAML.
    pub fn as_str(self) -> &'static str {
        match self {
            EngineKind::Auto => "auto",
            EngineKind::Builtin => "builtin",
            EngineKind::Megatron => "megatron",
            EngineKind::Swift => "swift",
            EngineKind::Torchrun => "torchrun",
            EngineKind::Deepspeed => "deepspeed",
            EngineKind::Command => "command",
        }
    }
}

/// Where a model's weights come from.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ModelRef {
    /// `hf` (a Hugging Face id), `path` (a local directory), `artifact` (a registered
    /// Ferry model) or `scratch` (a new model from `preset`).
    #[serde(default)]
    pub source: ModelSource,
    /// Hugging Face repository id, for `source: hf`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// Local directory with `config.json`, for `source: path`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// Registered model name, for `source: artifact`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub artifact: Option<String>,
    /// Architecture preset, for `source: scratch` (e.g. `tiny`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preset: Option<String>,
}

/// Kinds of [`ModelRef`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ModelSource {
    /// A Hugging Face repository id.
    #[default]
    Hf,
    /// A local directory.
    Path,
    /// A model registered in Ferry's store.
    Artifact,
    /// A freshly initialised model.
    Scratch,
}

/// What the training optimises.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Task {
    /// Next-token prediction on plain text.
    Pretrain,
    /// Supervised fine-tuning on chat data.
    #[default]
    Sft,
    /// Direct preference optimisation.
    Dpo,
}

/// Which weights train.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Method {
    /// The planner picks the cheapest method that fits.
    #[default]
    Auto,
    /// Every weight.
    Full,
    /// Low-rank adapters on a frozen 16-bit base.
    Lora,
    /// Low-rank adapters on a frozen 4-bit (NF4) base.
    Qlora,
}

/// Low-rank adapter settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LoraSpec {
    /// Adapter rank r.
    #[serde(default = "default_lora_rank")]
    pub rank: i32,
    /// Scaling numerator; the update is scaled by alpha / r.
    #[serde(default = "default_lora_alpha")]
    pub alpha: f64,
    /// Dropout on the adapter input.
    #[serde(default)]
    pub dropout: f64,
    /// Module names that get adapters (e.g. `q_proj`, `v_proj`); all linear layers when empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub target_modules: Vec<String>,
}

impl Default for LoraSpec {
    fn default() -> Self {
        Self {
            rank: default_lora_rank(),
            alpha: default_lora_alpha(),
            dropout: 0.0,
            target_modules: Vec::new(),
        }
    }
}

fn default_lora_rank() -> i32 {
    8
}
fn default_lora_alpha() -> f64 {
    16.0
}

/// Training data location and format.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DataSpec {
    /// File or directory with the data.
    pub path: String,
    /// How to read it.
    #[serde(default)]
    pub format: DataFormat,
}

/// Formats of [`DataSpec`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum DataFormat {
    /// Plain text, one document per line or per file.
    #[default]
    Text,
    /// JSONL with `{"messages": [{"role", "content"}]}` per line.
    Chat,
    /// JSONL with `prompt`, `chosen`, `rejected` (for DPO).
    Preference,
}

/// Nodes, processes and GPUs of a job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Resources {
    /// Number of nodes (machines) in the gang.
    #[serde(default = "one")]
    pub nodes: i32,
    /// Rank processes per node; one per GPU when omitted (at least one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub procs_per_node: Option<i32>,
    /// GPUs per node; 0 for CPU-only jobs.
    #[serde(default)]
    pub gpus_per_node: i32,
    /// GPU flavor (e.g. `H100-80GB`); any when omitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<String>,
    /// Keep every node of the gang in one rack (`rack`) or NVLink domain (`nvlinkDomain`),
    /// waiting until one has room. Without it the gang stays in one when one has room, and
    /// otherwise starts across them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topology: Option<Topology>,
    /// How much longer (percent) this gang runs with its nodes in more than one rack, e.g. 30
    /// for tensor parallelism across nodes, 0 for data parallelism with small gradients. The
    /// scheduler then waits for one rack while that costs less than running split; it replaces
    /// the cluster's `splitSlowdownPct` for this job. Not with `topology` (which always waits).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub split_slowdown_pct: Option<i32>,
}

/// The largest [`Resources::split_slowdown_pct`]: a split run eleven times as long.
pub const MAX_SPLIT_SLOWDOWN_PCT: i32 = 1000;

/// A topology domain a gang can be required to stay in ([`Resources::topology`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum Topology {
    /// One rack (the node label the cluster names racks by).
    Rack,
    /// One NVLink domain (e.g. one NVL72 enclosure).
    NvlinkDomain,
}

impl Topology {
    /// Its name in specs (`rack`, `nvlinkDomain`).
    pub fn name(self) -> &'static str {
        match self {
            Topology::Rack => "rack",
            Topology::NvlinkDomain => "nvlinkDomain",
        }
    }
}

fn one() -> i32 {
    1
}

impl Default for Resources {
    fn default() -> Self {
        Self {
            nodes: 1,
            procs_per_node: None,
            gpus_per_node: 0,
            gpu: None,
            topology: None,
            split_slowdown_pct: None,
        }
    }
}

impl Resources {
    /// Rank processes per node after defaults: `procsPerNode`, else one per GPU, else 1.
    pub fn effective_procs_per_node(&self) -> u32 {
        let procs = self.procs_per_node.unwrap_or(self.gpus_per_node.max(1));
        procs.max(1) as u32
    }

    /// Total GPUs the gang needs.
    pub fn total_gpus(&self) -> u32 {
        (self.nodes.max(0) as u32) * (self.gpus_per_node.max(0) as u32)
    }

    /// Total rank processes of the gang.
    pub fn world_size(&self) -> u32 {
        (self.nodes.max(0) as u32) * self.effective_procs_per_node()
    }

    /// GPUs given to each rank process.
    pub fn gpus_per_proc(&self) -> u32 {
        (self.gpus_per_node.max(0) as u32) / self.effective_procs_per_node()
    }
}

/// A parallel layout; every field left out is chosen by the planner.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Parallelism {
    /// Tensor-parallel size.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tp: Option<i32>,
    /// Pipeline-parallel size.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pp: Option<i32>,
    /// Context-parallel size.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cp: Option<i32>,
    /// Expert-parallel size (MoE).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ep: Option<i32>,
    /// Virtual pipeline stages per rank.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vpp: Option<i32>,
    /// ZeRO stage 0–3 (FSDP counts as 3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zero: Option<i32>,
    /// Activation recomputation: `none`, `selective` or `full`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recompute: Option<String>,
    /// Micro-batch size per data-parallel rank.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub micro_batch: Option<i32>,
}

impl Parallelism {
    /// True when the planner chooses everything.
    pub fn is_auto(&self) -> bool {
        *self == Parallelism::default()
    }
}

/// Hyper-parameters; engines fill in their own defaults for what is left out.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TrainParams {
    /// Tokens per sequence.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seq_len: Option<i64>,
    /// Sequences per optimiser step, across all ranks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub global_batch: Option<i64>,
    /// Peak learning rate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lr: Option<f64>,
    /// Passes over the data.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub epochs: Option<f64>,
    /// Optimiser steps; overrides `epochs`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steps: Option<i64>,
    /// Linear warm-up steps.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warmup_steps: Option<i64>,
    /// Random seed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<i64>,
}

/// Checkpoint location and cadence.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CheckpointSpec {
    /// Directory for checkpoints; `$FERRY_HOME/jobs/<namespace>/<name>/checkpoints` when omitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dir: Option<String>,
    /// Save every N optimiser steps.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub every: Option<i64>,
    /// Keep the newest N checkpoints.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keep: Option<i32>,
}

/// What to do when a rank fails.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FailurePolicy {
    /// Restarts allowed before the job fails; 0 fails on the first error.
    #[serde(default)]
    pub max_restarts: i32,
    /// Where a restarted attempt resumes from.
    #[serde(default)]
    pub resume: ResumePolicy,
    /// First restart delay in seconds; doubles on every restart, capped at 300.
    #[serde(default = "default_backoff")]
    pub backoff_seconds: f64,
    /// Seconds between SIGTERM and SIGKILL when stopping the job.
    #[serde(default = "default_grace")]
    pub grace_seconds: f64,
}

fn default_backoff() -> f64 {
    5.0
}
fn default_grace() -> f64 {
    30.0
}

impl Default for FailurePolicy {
    fn default() -> Self {
        Self {
            max_restarts: 0,
            resume: ResumePolicy::Latest,
            backoff_seconds: default_backoff(),
            grace_seconds: default_grace(),
        }
    }
}

impl FailurePolicy {
    /// Delay before restart number `restart` (1-based): exponential, capped at 300 s.
    pub fn backoff(&self, restart: u32) -> std::time::Duration {
        let exp = restart.saturating_sub(1).min(16);
        let secs = (self.backoff_seconds.max(0.0) * f64::from(1u32 << exp)).min(300.0);
        std::time::Duration::from_secs_f64(secs)
    }
}

/// Where a restarted attempt resumes from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ResumePolicy {
    /// The newest complete checkpoint (`FERRY_RESUME_FROM`).
    #[default]
    Latest,
    /// Start over.
    None,
}

/// Export of the final checkpoint.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ExportSpec {
    /// Target format: `hf` (safetensors + config.json).
    #[serde(default = "default_export_format")]
    pub format: String,
    /// Register the exported model under this name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub register: Option<String>,
}

fn default_export_format() -> String {
    "hf".into()
}

/// What the control plane observed of a [`TrainJob`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TrainJobStatus {
    /// Current phase.
    pub phase: JobPhase,
    /// Why it is in this phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Restarts so far.
    #[serde(default)]
    pub restarts: u32,
    /// Current attempt number (0 before the first launch).
    #[serde(default)]
    pub attempt: u32,
    /// GPU ids assigned, one list per rank.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gpus: Vec<Vec<String>>,
    /// RFC 3339 time the first attempt started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<String>,
    /// RFC 3339 time the job reached a terminal phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_time: Option<String>,
    /// Checkpoint the current attempt resumed from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resumed_from: Option<String>,
    /// Latest metrics line the engine printed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<serde_json::Value>,
    /// RFC 3339 time the running attempt is expected to reach `spec.train.steps`, at the pace
    /// its metrics lines show (absent until that pace is known, and once it stops running).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub estimated_completion_time: Option<String>,
    /// RFC 3339 time a queued job is expected to start, by the time limits or measured pace of
    /// the work ahead of it: for the job first in line for its GPUs, when the running work in
    /// its way ends; for the others, from the scheduler's forecast of the queue (absent while
    /// some of that work has no expected end).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub estimated_start_time: Option<String>,
    /// Seconds its runs have been running, the ended ones and the current one: what
    /// `spec.maxTotalRuntimeSeconds` counts (shown for jobs with that budget).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_seconds: Option<u64>,
}

impl TrainJob {
    pub(crate) fn validate(&self, problems: &mut Problems) {
        self.metadata.validate(problems);
        self.spec.validate(problems);
    }
}

impl TrainJobSpec {
    /// Whether Ferry renders the launch (a launcher engine without the user's own
    /// `spec.command`): where `spec.extraArgs` applies and the planner's command runs.
    pub fn renders_launch(&self) -> bool {
        matches!(
            self.engine,
            EngineKind::Torchrun | EngineKind::Deepspeed | EngineKind::Swift | EngineKind::Megatron
        ) && self.command.is_empty()
    }

    fn validate(&self, p: &mut Problems) {
        let r = &self.resources;
        p.at_least("spec.resources.nodes", i64::from(r.nodes), 1);
        if let Some(procs) = r.procs_per_node {
            p.at_least("spec.resources.procsPerNode", i64::from(procs), 1);
        }
        p.at_least("spec.resources.gpusPerNode", i64::from(r.gpus_per_node), 0);
        if let Some(pct) = r.split_slowdown_pct {
            if !(0..=MAX_SPLIT_SLOWDOWN_PCT).contains(&pct) {
                p.push(
                    "spec.resources.splitSlowdownPct",
                    format!(
                        "must be 0 to {MAX_SPLIT_SLOWDOWN_PCT} (percent longer run time split \
                         across racks; got {pct})"
                    ),
                );
            }
            if let Some(t) = r.topology {
                p.push(
                    "spec.resources.splitSlowdownPct",
                    format!(
                        "has no effect with topology: {} (the gang always waits for one); drop \
                         one of them",
                        t.name()
                    ),
                );
            }
        }
        if r.gpus_per_node > 0 {
            let procs = r.effective_procs_per_node() as i32;
            if r.procs_per_node.is_some_and(|n| n > 0) && r.gpus_per_node % procs != 0 {
                p.push(
                    "spec.resources.procsPerNode",
                    format!(
                        "must divide gpusPerNode ({}) so every rank gets the same GPUs (got {procs}); use {} or leave it out",
                        r.gpus_per_node, r.gpus_per_node
                    ),
                );
            }
        }
        p.at_least(
            "spec.onFailure.maxRestarts",
            i64::from(self.on_failure.max_restarts),
            0,
        );
        if self.on_failure.backoff_seconds < 0.0 || !self.on_failure.backoff_seconds.is_finite() {
            p.push(
                "spec.onFailure.backoffSeconds",
                format!(
                    "must be 0 or more (got {})",
                    self.on_failure.backoff_seconds
                ),
            );
        }
        if self.on_failure.grace_seconds < 0.0 || !self.on_failure.grace_seconds.is_finite() {
            p.push(
                "spec.onFailure.graceSeconds",
                format!("must be 0 or more (got {})", self.on_failure.grace_seconds),
            );
        }
        match self.engine {
            EngineKind::Command if self.command.is_empty() => p.push(
                "spec.command",
                "is required for engine: command; give the program and its arguments, e.g. [\"python3\", \"train.py\"]",
            ),
            EngineKind::Command => {}
            EngineKind::Builtin if !self.command.is_empty() => p.push(
                "spec.command",
                "is not used by engine: builtin (Ferry runs its own trainer); remove it, or set engine: command to run your program",
            ),
            // `auto` with a command is the command engine; launcher engines may run the
            // user's own launch script.
            EngineKind::Auto
            | EngineKind::Megatron
            | EngineKind::Torchrun
            | EngineKind::Deepspeed
            | EngineKind::Swift
                if !self.command.is_empty() => {}
            _ if self.model.is_none() => p.push(
                "spec.model",
                format!(
                    "is required for engine: {}; e.g. model: {{source: hf, id: Qwen/Qwen2.5-7B-Instruct}}",
                    self.engine.as_str()
                ),
            ),
            _ => {}
        }
        if let Some(m) = &self.model {
            m.validate("spec.model", p);
        }
        for (i, arg) in self.command.iter().enumerate() {
            if arg.contains('\0') {
                p.push(format!("spec.command[{i}]"), "must not contain NUL bytes");
            }
        }
        if !self.extra_args.is_empty() && !self.renders_launch() {
            p.push(
                "spec.extraArgs",
                format!(
                    "is only for launcher engines whose command Ferry renders (torchrun, deepspeed, swift, megatron without spec.command), not engine: {}{}; put the arguments in spec.command",
                    self.engine.as_str(),
                    if self.command.is_empty() { "" } else { " with spec.command" }
                ),
            );
        }
        for (i, arg) in self.extra_args.iter().enumerate() {
            if arg.contains('\0') {
                p.push(format!("spec.extraArgs[{i}]"), "must not contain NUL bytes");
            }
        }
        for key in self.env.keys() {
            let ok = !key.is_empty()
                && !key.starts_with(|c: char| c.is_ascii_digit())
                && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
            if !ok {
                p.push(
                    format!("spec.env.{key}"),
                    "is not a valid environment variable name; use letters, digits and '_', not starting with a digit",
                );
            }
        }
        if let Some(lora) = &self.lora {
            p.at_least("spec.lora.rank", i64::from(lora.rank), 1);
            if !(0.0..1.0).contains(&lora.dropout) {
                p.push(
                    "spec.lora.dropout",
                    format!("must be in [0, 1) (got {})", lora.dropout),
                );
            }
            if matches!(self.method, Method::Full) {
                p.push(
                    "spec.lora",
                    "is set but method is full; remove it or set method: lora",
                );
            }
        }
        let par = &self.parallelism;
        for (field, value) in [
            ("tp", par.tp),
            ("pp", par.pp),
            ("cp", par.cp),
            ("ep", par.ep),
            ("vpp", par.vpp),
            ("microBatch", par.micro_batch),
        ] {
            if let Some(v) = value {
                p.at_least(&format!("spec.parallelism.{field}"), i64::from(v), 1);
            }
        }
        if let Some(z) = par.zero
            && !(0..=3).contains(&z)
        {
            p.push(
                "spec.parallelism.zero",
                format!("must be 0, 1, 2 or 3 (got {z})"),
            );
        }
        if let Some(rc) = &par.recompute
            && !matches!(rc.as_str(), "none" | "selective" | "full")
        {
            p.push(
                "spec.parallelism.recompute",
                format!("must be none, selective or full (got {rc:?})"),
            );
        }
        let t = &self.train;
        for (field, value) in [
            ("seqLen", t.seq_len),
            ("globalBatch", t.global_batch),
            ("steps", t.steps),
        ] {
            if let Some(v) = value {
                p.at_least(&format!("spec.train.{field}"), v, 1);
            }
        }
        if let Some(w) = t.warmup_steps {
            p.at_least("spec.train.warmupSteps", w, 0);
        }
        if let Some(lr) = t.lr
            && !(lr > 0.0 && lr.is_finite())
        {
            p.push(
                "spec.train.lr",
                format!("must be a positive number (got {lr})"),
            );
        }
        if let Some(e) = t.epochs
            && !(e > 0.0 && e.is_finite())
        {
            p.push(
                "spec.train.epochs",
                format!("must be a positive number (got {e})"),
            );
        }
        if let Some(every) = self.checkpoint.every {
            p.at_least("spec.checkpoint.every", every, 1);
        }
        if let Some(keep) = self.checkpoint.keep {
            p.at_least("spec.checkpoint.keep", i64::from(keep), 1);
        }
        if let Some(q) = &self.queue
            && let Err(msg) = crate::meta::validate_name(q)
        {
            p.push("spec.queue", msg);
        }
        for (field, limit) in [
            ("spec.maxRuntimeSeconds", self.max_runtime_seconds),
            (
                "spec.maxTotalRuntimeSeconds",
                self.max_total_runtime_seconds,
            ),
        ] {
            if let Some(limit) = limit
                && !(1..=MAX_RUNTIME_LIMIT_S).contains(&limit)
            {
                p.push(
                    field,
                    format!(
                        "must be between 1 and {MAX_RUNTIME_LIMIT_S} (a year; got {limit}); leave it out for no limit"
                    ),
                );
            }
        }
        if let Some(export) = &self.export {
            if export.format != "hf" {
                p.push(
                    "spec.export.format",
                    format!(
                        "must be hf (got {:?}); only Hugging Face safetensors export exists",
                        export.format
                    ),
                );
            }
            if let Some(name) = &export.register
                && let Err(msg) = crate::meta::validate_name(name)
            {
                p.push("spec.export.register", msg);
            }
        }
    }
}

impl ModelRef {
    pub(crate) fn validate(&self, path: &str, p: &mut Problems) {
        let (field, value, example) = match self.source {
            ModelSource::Hf => ("id", &self.id, "Qwen/Qwen2.5-7B-Instruct"),
            ModelSource::Path => ("path", &self.path, "/models/qwen2.5-7b"),
            ModelSource::Artifact => ("artifact", &self.artifact, "qwen-sft-v1"),
            ModelSource::Scratch => ("preset", &self.preset, "tiny"),
        };
        if value.as_deref().is_none_or(str::is_empty) {
            let source = serde_json::to_value(self.source).unwrap_or_default();
            p.push(
                format!("{path}.{field}"),
                format!(
                    "is required for source: {}; e.g. {field}: {example}",
                    source.as_str().unwrap_or("?")
                ),
            );
        }
    }
}
