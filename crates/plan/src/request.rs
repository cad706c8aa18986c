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
    /// Values the user pinned while leaving the rest of the layout to the search.
    #[serde(default)]
    pub pinned: Pinned,
}

/// Layout values fixed by the user under `parallelism: auto` (e.g. CLI `--micro-batch`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct Pinned {
    /// Sequences per GPU per forward pass.
    pub micro_batch: Option<u64>,
    /// Activation recomputation.
    pub recompute: Option<Recompute>,
}

/// The CLI's flag form (`ferry plan --model … --gpus N --gpu-mem 80GiB --mode … --micro-batch B
/// --seq-len S [--grad-ckpt] [--global-batch G]`), turned into a request by [`PlanFlags::into_request`].
#[derive(Debug, Clone, PartialEq)]
pub struct PlanFlags {
    /// Parsed config of `--model`.
    pub model: ModelShape,
    /// Name for rendered commands (the path or id given).
    pub model_name: String,
    /// `--gpus` (on one node).
    pub gpus: u64,
    /// `--gpu` kind (default H100-80GB).
    pub gpu: Option<GpuKind>,
    /// `--gpu-mem` (parsed with [`parse_bytes`]); default: the kind's memory.
    pub gpu_memory_bytes: Option<u64>,
    /// `--mode`: auto, full-mixed, full-bf16, lora, qlora.
    pub mode: String,
    /// `--lora-rank` (default 16).
    pub lora_rank: Option<u64>,
    /// `--micro-batch`.
    pub micro_batch: Option<u64>,
    /// `--seq-len`.
    pub seq_len: u64,
    /// `--grad-ckpt`: full recompute (HF gradient checkpointing).
    pub grad_ckpt: bool,
    /// `--global-batch`.
    pub global_batch: Option<u64>,
}

impl PlanFlags {
    /// Builds the request. `full-mixed` and `full-bf16` mean the HF/torch recipes measured in
    /// the fixture (torchrun engine), so a one-GPU plan predicts what that procedure measures.
    pub fn into_request(self) -> crate::Result<PlanRequest> {
        let method = Method::from_mode(&self.mode, self.lora_rank.unwrap_or(16))?;
        let gpu = self.gpu.unwrap_or(GpuKind::H100);
        let mut req = PlanRequest::new(self.model, &self.model_name, gpu, self.gpus, self.seq_len);
        req.method = method;
        if matches!(
            self.mode.as_str(),
            "full-mixed" | "full-bf16" | "lora" | "qlora"
        ) && self.gpus == 1
        {
            req.engine = Engine::Torchrun;
        }
        req.gpu_memory_bytes = self.gpu_memory_bytes.unwrap_or(0);
        req.global_batch = self.global_batch.unwrap_or(0);
        req.pinned = Pinned {
            micro_batch: self.micro_batch,
            recompute: self.grad_ckpt.then_some(Recompute::Full),
        };
        Ok(req)
    }
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
            pinned: Pinned::default(),
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

impl Method {
    /// Parses the CLI's `--mode`: `auto`, `full-mixed`, `full-bf16`, `lora`, `qlora`
    /// (`rank` applies to the adapter methods).
    pub fn from_mode(mode: &str, rank: u64) -> crate::Result<Method> {
        Ok(match mode {
            "auto" => Method::Auto,
            "full" | "full-mixed" => Method::Full {
                precision: FullPrecision::Mixed,
            },
            "full-bf16" => Method::Full {
                precision: FullPrecision::Bf16,
            },
            "lora" => Method::Lora { rank },
            "qlora" => Method::Qlora { rank },
            other => {
                return Err(crate::PlanError::InvalidRequest {
                    field: "mode".to_string(),
                    reason: format!(
                        "{other:?} is not one of auto, full-mixed, full-bf16, lora, qlora"
                    ),
                });
            }
        })
    }
}

/// Parses a memory size such as `80GiB`, `80GB`, `81920MiB`, `141G` or a plain byte count;
/// `field` names the flag or spec field in the error.
pub fn parse_bytes(text: &str, field: &str) -> crate::Result<u64> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let value: f64 = num.parse().map_err(|_| crate::PlanError::InvalidRequest {
        field: field.to_string(),
        reason: format!("{text:?} is not a size like 80GiB or 80GB"),
    })?;
    let scale = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "kib" | "ki" => 1024.0,
        "mib" | "mi" => 1024.0 * 1024.0,
        "gib" | "gi" | "g" => 1024.0 * 1024.0 * 1024.0,
        "tib" | "ti" => 1024f64.powi(4),
        "kb" | "k" => 1e3,
        "mb" | "m" => 1e6,
        "gb" => 1e9,
        "tb" => 1e12,
        other => {
            return Err(crate::PlanError::InvalidRequest {
                field: field.to_string(),
                reason: format!(
                    "unit {other:?} in {text:?} is not one of B, KiB, MiB, GiB, TiB, KB, MB, GB, TB"
                ),
            });
        }
    };
    Ok((value * scale).round() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse() {
        assert_eq!(parse_bytes("80GiB", "gpuMem").unwrap(), 80 << 30);
        assert_eq!(parse_bytes("80GB", "gpuMem").unwrap(), 80_000_000_000);
        assert_eq!(parse_bytes("512 MiB", "gpuMem").unwrap(), 512 << 20);
        let err = parse_bytes("lots", "--gpu-mem").unwrap_err().to_string();
        assert!(err.contains("--gpu-mem"), "{err}");
        assert!(parse_bytes("80XB", "--gpu-mem").is_err());
    }

    #[test]
    fn flags_pin_what_was_given() {
        let shape = crate::catalog::shape_of("Qwen/Qwen2.5-3B").unwrap();
        let req = PlanFlags {
            model: shape,
            model_name: "Qwen2.5-3B".into(),
            gpus: 1,
            gpu: Some(GpuKind::H200),
            gpu_memory_bytes: None,
            mode: "full-mixed".into(),
            lora_rank: None,
            micro_batch: Some(1),
            seq_len: 2048,
            grad_ckpt: true,
            global_batch: None,
        }
        .into_request()
        .unwrap();
        let report = crate::plan(&req).unwrap();
        assert_eq!(report.chosen.recipe, crate::Recipe::HfAmp);
        assert_eq!(report.chosen.layout.micro_batch, 1);
        assert_eq!(report.chosen.layout.recompute, Recompute::Full);
        // The fixture measured 50712194048 bytes for this row: the plan predicts within 1%.
        let err = report.chosen.memory.peak_bytes as f64 / 50_712_194_048.0 - 1.0;
        assert!(err.abs() < 0.01, "{err}");
    }

    #[test]
    fn modes_parse() {
        assert_eq!(
            Method::from_mode("full-bf16", 16).unwrap(),
            Method::Full {
                precision: FullPrecision::Bf16
            }
        );
        assert_eq!(
            Method::from_mode("qlora", 8).unwrap(),
            Method::Qlora { rank: 8 }
        );
        assert!(
            Method::from_mode("prefix-tuning", 8)
                .unwrap_err()
                .to_string()
                .contains("`mode`")
        );
    }

    #[test]
    fn request_json_is_camel_case_and_round_trips() {
        let shape = crate::catalog::shape_of("Qwen/Qwen2.5-0.5B").unwrap();
        let mut req = PlanRequest::new(shape, "Qwen/Qwen2.5-0.5B", crate::GpuKind::H100, 8, 2048);
        req.parallelism = Parallelism::Fixed(Layout {
            tp: 2,
            pp: 1,
            cp: 1,
            ep: 1,
            zero: 1,
            recompute: Recompute::Selective,
            micro_batch: 2,
        });
        let text = serde_json::to_string(&req).unwrap();
        assert!(
            text.contains("\"gpusPerNode\":8") && text.contains("\"microBatch\":2"),
            "{text}"
        );
        let back: PlanRequest = serde_json::from_str(&text).unwrap();
        assert_eq!(back, req);
    }
}
