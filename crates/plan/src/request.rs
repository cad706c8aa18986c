//! The planner's input: what to train or serve, on which GPUs, with which freedom.
//!
//! These types are the planner's own (serde, camelCase) so the spec crate can map its
//! `TrainJob` / `ModelDeployment` onto them without the planner depending on it.

use serde::{Deserialize, Serialize};

use crate::gpu::GpuKind;
use crate::model::ModelShape;

/// Training objective; it changes only labels and data, not memory, except DPO's reference model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub enum Task {
    /// Next-token pre-training.
    Pretrain,
    /// Supervised fine-tuning.
    #[default]
    Sft,
    /// Direct preference optimisation: a frozen reference model and 2 sequences per example.
    Dpo,
}

/// Numeric recipe of full fine-tuning.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub enum FullPrecision {
    /// bf16 compute with fp32 master weights and fp32 Adam states (the standard recipe).
    #[default]
    Mixed,
    /// Everything bf16, Adam states bf16 (8 bytes/param; less stable).
    Bf16,
}

/// Fine-tuning method.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase", tag = "kind")]
pub enum Method {
    /// Full if it fits, else LoRA, else QLoRA.
    #[default]
    Auto,
    /// Every weight trained.
    Full {
        /// Numeric recipe.
        #[serde(default)]
        precision: FullPrecision,
    },
    /// Low-rank adapters on every projection of a frozen bf16 base.
    Lora {
        /// Adapter rank.
        #[serde(default = "default_rank")]
        rank: u64,
    },
    /// LoRA on a 4-bit NF4 base (double quantisation).
    Qlora {
        /// Adapter rank.
        #[serde(default = "default_rank")]
        rank: u64,
    },
}

fn default_rank() -> u64 {
    16
}

/// Method kinds, for explanations and rendering.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, PartialOrd, Ord)]
#[serde(rename_all = "camelCase")]
pub enum MethodKind {
    /// Full fine-tuning.
    Full,
    /// LoRA.
    Lora,
    /// QLoRA.
    Qlora,
}

/// Activation recomputation (gradient checkpointing).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default, PartialOrd, Ord,
)]
#[serde(rename_all = "camelCase")]
pub enum Recompute {
    /// Keep every activation.
    #[default]
    None,
    /// Keep GEMM inputs, recompute cheap element-wise ops (norms, activation function).
    Selective,
    /// Keep only each layer's input; recompute the layer in backward.
    Full,
}

/// Launcher family; it decides the numeric recipe and which layouts exist.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub enum Engine {
    /// Let the planner pick (Megatron for TP/PP full runs, DeepSpeed for ZeRO, torchrun+PEFT for adapters).
    #[default]
    Auto,
    /// Megatron-LM `pretrain_gpt.py`: TP/PP/CP/SP, distributed optimizer.
    Megatron,
    /// torchrun + Hugging Face Trainer/PEFT (DDP or FSDP).
    Torchrun,
    /// DeepSpeed ZeRO via the HF Trainer.
    Deepspeed,
    /// ms-swift `swift sft` (HF + PEFT + DeepSpeed underneath).
    Swift,
}

/// A fixed layout, or freedom for the search.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase", tag = "kind")]
pub enum Parallelism {
    /// The planner searches every layout.
    #[default]
    Auto,
    /// The user fixed the layout; the planner checks and explains it.
    Fixed(Layout),
}

/// One parallel layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Hash)]
#[serde(rename_all = "camelCase")]
pub struct Layout {
    /// Tensor parallel size (with sequence parallelism when > 1).
    pub tp: u64,
    /// Pipeline parallel size.
    pub pp: u64,
    /// Context parallel size.
    #[serde(default = "one")]
    pub cp: u64,
    /// Expert parallel size (MoE only).
    #[serde(default = "one")]
    pub ep: u64,
    /// ZeRO stage 0–3 (3 = FSDP full shard with torchrun).
    #[serde(default)]
    pub zero: u8,
    /// Activation recomputation.
    #[serde(default)]
    pub recompute: Recompute,
    /// Sequences per GPU per forward pass.
    pub micro_batch: u64,
}

fn one() -> u64 {
    1
}

/// A training job for the planner.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PlanRequest {
    /// Model shapes (from config.json or the catalogue).
    pub model: ModelShape,
    /// Name used in rendered commands (hub id or path).
    pub model_name: String,
    /// Objective.
    #[serde(default)]
    pub task: Task,
    /// Method or auto.
    #[serde(default)]
    pub method: Method,
    /// Launcher or auto.
    #[serde(default)]
    pub engine: Engine,
    /// GPU model.
    pub gpu: GpuKind,
    /// Usable memory per GPU in bytes (0 = the GPU kind's nominal memory).
    #[serde(default)]
    pub gpu_memory_bytes: u64,
    /// Nodes.
    pub nodes: u64,
    /// GPUs per node.
    pub gpus_per_node: u64,
    /// Layout or auto.
    #[serde(default)]
    pub parallelism: Parallelism,
    /// Tokens per sequence.
    pub seq_len: u64,
    /// Sequences per optimizer step across all GPUs (0 = micro_batch × data-parallel size).
    #[serde(default)]
    pub global_batch: u64,
    /// Sequences in the dataset × epochs, for the total-time estimate (0 = unknown).
    #[serde(default)]
    pub train_sequences: u64,
    /// Fraction of memory kept free for fragmentation and spikes (default 0.10).
    #[serde(default = "default_margin")]
    pub safety_margin: f64,
}

fn default_margin() -> f64 {
    0.10
}

impl PlanRequest {
    /// A request with defaults for everything but the essentials.
    pub fn new(model: ModelShape, model_name: &str, gpu: GpuKind, gpus: u64, seq_len: u64) -> Self {
        PlanRequest {
            model,
            model_name: model_name.to_string(),
            task: Task::Sft,
            method: Method::Auto,
            engine: Engine::Auto,
            gpu,
            gpu_memory_bytes: 0,
            nodes: 1,
            gpus_per_node: gpus,
            parallelism: Parallelism::Auto,
            seq_len,
            global_batch: 0,
            train_sequences: 0,
            safety_margin: default_margin(),
        }
    }

    /// Total GPUs.
    pub fn gpus(&self) -> u64 {
        self.nodes * self.gpus_per_node
    }

    /// Memory per GPU, bytes.
    pub fn memory_per_gpu(&self) -> u64 {
        if self.gpu_memory_bytes > 0 {
            self.gpu_memory_bytes
        } else {
            self.gpu.spec().memory_bytes
        }
    }
}

/// A serving deployment for the planner (vLLM).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ServeRequest {
    /// Model shapes.
    pub model: ModelShape,
    /// Name used in the rendered command.
    pub model_name: String,
    /// GPU model.
    pub gpu: GpuKind,
    /// Usable memory per GPU in bytes (0 = nominal).
    #[serde(default)]
    pub gpu_memory_bytes: u64,
    /// GPUs available on the node.
    pub gpus_per_node: u64,
    /// Longest prompt + completion, tokens.
    pub max_model_len: u64,
    /// Sequences to hold at full length at once.
    pub concurrency: u64,
    /// vLLM `--gpu-memory-utilization` (default 0.90).
    #[serde(default = "default_util")]
    pub gpu_memory_utilization: f64,
    /// Weight bytes per parameter (2 = bf16).
    #[serde(default = "default_weight_bytes")]
    pub weight_bytes: f64,
}

fn default_util() -> f64 {
    0.90
}

fn default_weight_bytes() -> f64 {
    2.0
}
