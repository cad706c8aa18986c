//! Per-GPU memory of a training step, term by term, and of a vLLM deployment.
//!
//! The training model follows what PyTorch's caching allocator holds (what
//! `torch.cuda.max_memory_allocated()` reports), phase by phase of a step:
//!
//! * **forward end** — model states, every saved activation, the autocast weight cache (HF AMP)
//!   and the loss: bf16 logits, their fp32 copy and the fp32 log-softmax (10 bytes/token/vocab);
//! * **backward start** — the bf16 logits are gone, the log-softmax output, NLL gradient and
//!   log-softmax gradient are live together (12 bytes/token/vocab);
//! * **head backward** — the output head's weight gradient and its layout copy;
//! * **backward end / optimizer** — weights + gradients + optimizer states (+ fp32 master), plus,
//!   for a tied head, the embedding's second gradient contribution (a V×h buffer, 4 bytes/element).
//!
//! The peak is the largest phase. Saved activations are counted tensor by tensor for the HF
//! decoder layer (see [`saved_tensors`]), so sequence length, batch, GQA, MLP width, dtype
//! casts and recomputation all enter through physics, not fitted coefficients.

use serde::{Deserialize, Serialize};

use crate::gpu::GpuKind;
use crate::model::{MlpKind, ModelShape};
use crate::request::{Engine, Layout, MethodKind, Recompute, Task};

/// Numeric recipe of a run: which dtype each model state has.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Recipe {
    /// HF Trainer / torch AMP: fp32 weights and grads, fp32 Adam, bf16 autocast (`full-mixed`).
    HfAmp,
    /// Pure bf16 weights, grads and Adam states (`full-bf16`).
    PureBf16,
    /// DeepSpeed bf16: bf16 weights and grads, fp32 master + fp32 Adam in the optimizer.
    DeepspeedBf16,
    /// Megatron bf16: bf16 weights, fp32 main grads, fp32 master + Adam (distributed optimizer).
    MegatronBf16,
    /// FSDP full shard with a bf16 mixed-precision policy over fp32 sharded parameters.
    FsdpAmp,
    /// Frozen bf16 base, fp32 LoRA adapters (PEFT's default autocast of adapters), fp32 Adam.
    Lora,
    /// Frozen NF4 base (double quantisation), bf16 embeddings/head/norms, fp32 adapters.
    Qlora,
}

impl Recipe {
    /// The method this recipe belongs to.
    pub fn method(self) -> MethodKind {
        match self {
            Recipe::Lora => MethodKind::Lora,
            Recipe::Qlora => MethodKind::Qlora,
            _ => MethodKind::Full,
        }
    }
}

/// Everything that determines one GPU's memory.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TrainSetup<'a> {
    /// Model shapes.
    pub model: &'a ModelShape,
    /// Numeric recipe.
    pub recipe: Recipe,
    /// LoRA/QLoRA rank (ignored for full).
    pub lora_rank: u64,
    /// Parallel layout (tp, pp, cp, ep, zero, recompute, micro-batch).
    pub layout: Layout,
    /// Data-parallel size.
    pub dp: u64,
    /// Micro-batches per optimizer step per data-parallel rank (gradient accumulation).
    pub micro_batches: u64,
    /// Tokens per sequence.
    pub seq_len: u64,
    /// Objective (DPO doubles sequences and adds a reference model).
    pub task: Task,
    /// GPU kind (workspace and context sizes).
    pub gpu: GpuKind,
    /// Launcher: with `Torchrun` and no ZeRO sharding, data parallelism is PyTorch DDP, whose
    /// gradient buckets are a second copy of the gradients.
    pub engine: Engine,
}

/// One saved activation tensor of a decoder layer, per token.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub struct SavedTensor {
    /// What it is.
    pub name: &'static str,
    /// Bytes per token.
    pub bytes_per_token: u64,
    /// Kept under selective recompute (GEMM/attention inputs); element-wise ones are recomputed.
    pub kept_by_selective: bool,
}

/// Phases of a step whose memory is compared to find the peak.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// End of forward, loss being computed.
    ForwardEnd,
    /// Start of backward through the loss.
    BackwardStart,
    /// Output-head weight gradient.
    HeadBackward,
    /// Recomputing a layer during backward (full recompute).
    Recompute,
    /// End of backward and optimizer step.
    OptimizerStep,
}

/// Per-GPU memory, every term in bytes; `peak_bytes` compares with `max_memory_allocated()`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub struct MemoryBreakdown {
    /// Parameters held on this GPU (after TP/PP/ZeRO-3 division), in their storage dtype.
    pub weights: u64,
    /// Gradients held at the end of backward (after ZeRO-2 division).
    pub grads: u64,
    /// PyTorch DDP's flat all-reduce buckets (torchrun, dp > 1, no sharding): allocated when the
    /// model is wrapped and kept for the whole run, one gradient-sized copy
    /// (`gradient_as_bucket_view=False`, the default).
    pub ddp_buckets: u64,
    /// DDP's second bucket copy while buckets are rebuilt at the second iteration (forward and
    /// backward phases only; whether a rank still holds it at its peak depends on NCCL timing).
    pub ddp_rebuild: u64,
    /// FSDP full shard: the root module's gathered bf16 parameters (forward and backward), and
    /// at the end of backward its bf16 gradients and their fp32 reduce-scatter input.
    pub fsdp_root: u64,
    /// Adam first and second moments.
    pub optimizer: u64,
    /// fp32 master copy of bf16 weights (DeepSpeed/Megatron).
    pub master: u64,
    /// LoRA adapters with their gradients and Adam states (included in the three terms above).
    pub adapters: u64,
    /// bf16 copies of fp32 weights kept by autocast (HF AMP) or gathered by ZeRO-3/FSDP.
    pub weight_copies: u64,
    /// Saved activations at the start of backward (all in-flight micro-batches of the stage).
    pub activations: u64,
    /// One layer's activations re-created during backward under full recompute.
    pub recompute: u64,
    /// Logits and loss at their largest (backward start), on the last pipeline stage.
    pub logits: u64,
    /// Extra V×h gradient buffer of a tied embedding at the end of backward.
    pub tied_embedding_grad: u64,
    /// DPO reference model weights.
    pub reference_model: u64,
    /// cuBLAS workspaces and other allocator-resident buffers.
    pub workspace: u64,
    /// Largest phase: what `torch.cuda.max_memory_allocated()` should read.
    pub peak_bytes: u64,
    /// Which phase is the peak.
    pub peak_phase: Phase,
    /// Every phase's total, for the explanation.
    pub phases: Vec<(Phase, u64)>,
    /// Pipeline stage the peak belongs to (0 = first).
    pub peak_stage: u64,
    /// CUDA context, NCCL buffers: outside the allocator.
    pub context: u64,
    /// Reserve for allocator fragmentation (safety margin × peak).
    pub fragmentation_reserve: u64,
    /// peak + reserve + context: must not exceed the GPU's memory.
    pub required_bytes: u64,
}

const MIB: u64 = 1 << 20;

/// Bytes per element of the residual stream / activations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Flavour {
    /// fp32 residual stream with bf16 casts before every matmul (torch autocast).
    Amp,
    /// bf16 everywhere, every weight trainable.
    Bf16,
    /// bf16 frozen base, fp32 adapters: adapter inputs are cast to fp32 and saved.
    Lora,
    /// As LoRA over an NF4 base (same saved activations).
    Qlora,
}

fn flavour(recipe: Recipe) -> Flavour {
    match recipe {
        Recipe::HfAmp => Flavour::Amp,
        Recipe::PureBf16 | Recipe::DeepspeedBf16 | Recipe::MegatronBf16 | Recipe::FsdpAmp => {
            Flavour::Bf16
        }
        Recipe::Lora => Flavour::Lora,
        Recipe::Qlora => Flavour::Qlora,
    }
}

/// Saved activations of one decoder layer, per token, as PyTorch autograd keeps them for an HF
/// model with SDPA (flash/efficient kernels: no s² term), no dropout.
///
/// Rules used: a matmul saves its input only when its weight needs a gradient; RMSNorm saves its
/// fp32 upcast input and (when its weight trains) the normalised bf16 tensor; SiLU/GELU save their
/// input; a product saves both factors; SDPA saves q, k, v, its output and a small log-sum-exp.
pub fn saved_tensors(model: &ModelShape, recipe: Recipe, lora_rank: u64) -> Vec<SavedTensor> {
    let fl = flavour(recipe);
    let h = model.hidden;
    let q = model.q_dim();
    let kv = model.kv_dim();
    let mut v: Vec<SavedTensor> = Vec::new();
    let mut push = |name, bytes: u64, kept| {
        v.push(SavedTensor {
            name,
            bytes_per_token: bytes,
            kept_by_selective: kept,
        })
    };
    // MLP widths a token passes through: dense, or top-k routed experts + shared expert.
    let (mlp_width, moe_extra) = match &model.moe {
        None => (model.intermediate, 0),
        Some(m) => {
            let routed = m.top_k * m.expert_intermediate + m.shared_intermediate.unwrap_or(0);
            // Router logits + softmax (fp32, per expert), the gathered expert inputs and
            // the weighted expert outputs (bf16, top-k copies of the hidden state).
            (routed, 8 * m.experts + 4 * m.top_k * h)
        }
    };
    let i = mlp_width;
    if model.mlp == MlpKind::Plain {
        // GPT-2 block: LayerNorm, fused c_attn, SDPA, c_proj, LayerNorm, c_fc, tanh-GELU, c_proj,
        // two residual dropouts (p = 0.1 by default: bool masks).
        let base = match fl {
            Flavour::Amp => 4,
            _ => 2,
        };
        push("ln_1 input", base * h, true);
        push("c_attn input", 2 * h, true);
        push("q, k, v", 6 * h, true);
        push("attention output", 2 * h, true);
        push("dropout masks", 2 * h, false);
        push("ln_2 input", base * h, true);
        push("c_fc input", 2 * h, true);
        push("GELU input", 2 * i, true);
        push("tanh-GELU intermediates", 8 * i, false);
        push("c_proj input", 2 * i, true);
        return v;
    }
    match fl {
        Flavour::Bf16 => {
            // Gemma's RMSNorm multiplies by (1 + weight) in fp32, so the normalised tensor it
            // keeps for the weight gradient is fp32.
            let normed = if model.arch == crate::model::Arch::Gemma {
                4 * h
            } else {
                2 * h
            };
            push("input_layernorm fp32 input", 4 * h, false);
            push("input_layernorm normalised", normed, false);
            push("q/k/v input", 2 * h, true);
            if model.qk_norm {
                push("q_norm/k_norm fp32 input + normalised", 6 * (q + kv), false);
            }
            push("q after RoPE", 2 * q, true);
            push("k after RoPE, v", 4 * kv, true);
            push("attention output (o_proj input)", 2 * q, true);
            push("post_attention_layernorm fp32 input", 4 * h, false);
            push("post_attention_layernorm normalised", normed, false);
            push("gate/up input", 2 * h, true);
            push("gate output (activation input)", 2 * i, true);
            push("activation output", 2 * i, false);
            push("up output", 2 * i, true);
            push("down_proj input", 2 * i, false);
        }
        Flavour::Amp => {
            push("input_layernorm input (fp32 residual)", 4 * h, true);
            push("input_layernorm normalised (fp32)", 4 * h, false);
            push(
                "bf16 casts of q/k/v input (one per projection)",
                6 * h,
                true,
            );
            if model.qk_norm {
                push("q_norm/k_norm fp32 input + normalised", 8 * (q + kv), false);
            }
            push("q after RoPE (bf16 cast for SDPA)", 2 * q, true);
            push("k after RoPE (bf16 cast), v", 4 * kv, true);
            push("attention output (o_proj input)", 2 * q, true);
            push(
                "post_attention_layernorm input (fp32 residual)",
                4 * h,
                true,
            );
            push("post_attention_layernorm normalised (fp32)", 4 * h, false);
            push("bf16 casts of gate/up input", 4 * h, true);
            push("gate output (activation input)", 2 * i, true);
            push("activation output", 2 * i, false);
            push("up output", 2 * i, true);
            push("down_proj input", 2 * i, false);
        }
        Flavour::Lora | Flavour::Qlora => {
            push("input_layernorm fp32 input", 4 * h, false);
            push("fp32 casts of q/k/v input for lora_A", 12 * h, true);
            if model.qk_norm {
                push("q_norm/k_norm fp32 input", 4 * (q + kv), false);
            }
            push("q after RoPE", 2 * q, true);
            push("k after RoPE, v", 4 * kv, true);
            push("attention output", 2 * q, true);
            push("fp32 cast of o_proj input for lora_A", 4 * q, true);
            push("post_attention_layernorm fp32 input", 4 * h, false);
            push("fp32 casts of gate/up input for lora_A", 8 * h, true);
            push("gate output (activation input)", 2 * i, true);
            push("activation output", 2 * i, false);
            push("up output", 2 * i, true);
            push("fp32 cast of down_proj input for lora_A", 4 * i, true);
            push("lora_A outputs (fp32, 7 projections)", 28 * lora_rank, true);
            // QLoRA adds nothing here: bitsandbytes' 4-bit matmul keeps only the quantised weight
            // for backward (it needs no input, the base weight does not train).
        }
    }
    if moe_extra > 0 {
        push(
            "MoE router probabilities and gathered expert inputs/outputs",
            moe_extra,
            true,
        );
    }
    v
}

/// Per-token bytes of one layer under a recompute policy (input of the layer for `Full`).
fn layer_bytes(model: &ModelShape, recipe: Recipe, rank: u64, recompute: Recompute) -> u64 {
    let tensors = saved_tensors(model, recipe, rank);
    let input = layer_input_bytes(model, recipe);
    match recompute {
        Recompute::None => tensors.iter().map(|t| t.bytes_per_token).sum(),
        Recompute::Selective => {
            // Keep GEMM/attention inputs; recomputing norms needs the layer's residual inputs.
            tensors
                .iter()
                .filter(|t| t.kept_by_selective)
                .map(|t| t.bytes_per_token)
                .sum::<u64>()
                + 2 * input
        }
        Recompute::Full => input,
    }
}

/// Bytes per token of a layer's input (the residual stream): fp32 under AMP, else bf16.
fn layer_input_bytes(model: &ModelShape, recipe: Recipe) -> u64 {
    match flavour(recipe) {
        Flavour::Amp => 4 * model.hidden,
        _ => 2 * model.hidden,
    }
}

/// Storage bytes per parameter: (trainable weight, grad, master, optimizer states).
fn state_bytes(recipe: Recipe) -> (f64, f64, f64, f64) {
    match recipe {
        Recipe::HfAmp | Recipe::FsdpAmp => (4.0, 4.0, 0.0, 8.0),
        Recipe::PureBf16 => (2.0, 2.0, 0.0, 4.0),
        Recipe::DeepspeedBf16 => (2.0, 2.0, 4.0, 8.0),
        Recipe::MegatronBf16 => (2.0, 4.0, 4.0, 8.0),
        // Adapters: fp32 weights and grads, fp32 Adam.
        Recipe::Lora | Recipe::Qlora => (4.0, 4.0, 0.0, 8.0),
    }
}

/// NF4 with double quantisation: 4 bits + an 8-bit absmax per 64 weights + fp32 absmax-of-absmax
/// per 256 blocks ≈ 0.516 bytes per parameter.
pub const NF4_BYTES_PER_PARAM: f64 = 0.5 + 1.0 / 64.0 + 4.0 / (64.0 * 256.0);

fn divu(a: u64, b: u64) -> u64 {
    a.div_ceil(b.max(1))
}

/// Product of `factors` divided (rounding up) by `divisor`, saturating at u64::MAX.
fn mul_div(factors: &[u64], divisor: u64) -> u64 {
    let product = factors
        .iter()
        .fold(1u128, |acc, &f| acc.saturating_mul(f as u128));
    u64::try_from(product.div_ceil(divisor.max(1) as u128)).unwrap_or(u64::MAX)
}

/// Saturating sum.
fn sum(terms: &[u64]) -> u64 {
    terms.iter().fold(0u64, |acc, &t| acc.saturating_add(t))
}

/// Computes the per-GPU breakdown for one setup; the worst pipeline stage is reported.
pub fn training_memory(s: &TrainSetup<'_>) -> MemoryBreakdown {
    let stages: Vec<u64> = if s.layout.pp > 1 {
        vec![0, s.layout.pp - 1]
    } else {
        vec![0]
    };
    let mut best: Option<MemoryBreakdown> = None;
    for stage in stages {
        let m = stage_memory(s, stage);
        if best.as_ref().is_none_or(|b| m.peak_bytes > b.peak_bytes) {
            best = Some(m);
        }
    }
    best.expect("at least one stage")
}

fn stage_memory(s: &TrainSetup<'_>, stage: u64) -> MemoryBreakdown {
    let model = s.model;
    let l = s.layout;
    let tp = l.tp.max(1);
    let pp = l.pp.max(1);
    let cp = l.cp.max(1);
    let dp = s.dp.max(1);
    let ep = l.ep.max(1);
    let first = stage == 0;
    let last = stage == pp - 1;
    let p = model.params();
    let vh = model.vocab * model.hidden;

    // ---- parameters on this GPU ----
    let layers_here = model.layers.div_ceil(pp);
    let expert_params = model.moe.as_ref().map_or(0, |m| {
        m.moe_layers
            * m.experts
            * match model.mlp {
                MlpKind::Gated => 3 * model.hidden * m.expert_intermediate,
                MlpKind::Plain => 2 * model.hidden * m.expert_intermediate,
            }
    });
    let layer_params_all = p.layers - expert_params + expert_params / ep;
    let layer_params = divu(layer_params_all * layers_here / model.layers, tp);
    let linear_here = divu(
        (p.linear - expert_params + expert_params / ep) * layers_here / model.layers,
        tp,
    );
    let mut embed_here = 0;
    let mut head_here = 0; // untied head, or the tied copy on the last stage when pp > 1
    if first {
        embed_here += divu(p.embedding, tp) + p.positions;
    }
    if last {
        if model.tied_embeddings {
            if pp > 1 {
                head_here = divu(p.embedding, tp);
            }
        } else {
            head_here = divu(p.lm_head, tp);
        }
    }
    let params_here = layer_params + embed_here + head_here;

    let recipe = s.recipe;
    let (wb, gb, mb, ob) = state_bytes(recipe);
    let zero = l.zero;
    let shard = |bytes: f64, stage_needed: u8| -> u64 {
        if zero >= stage_needed && dp > 1 {
            (bytes / dp as f64).ceil() as u64
        } else {
            bytes.ceil() as u64
        }
    };

    let (weights, grads, optimizer, master, adapters, trainable_linear_here);
    match recipe {
        Recipe::Lora | Recipe::Qlora => {
            let adapter_params = divu(
                s.model.lora_params(s.lora_rank) * layers_here / model.layers,
                tp,
            );
            let base = if recipe == Recipe::Qlora {
                (linear_here as f64) * NF4_BYTES_PER_PARAM
                    + 2.0 * (params_here - linear_here) as f64
            } else {
                2.0 * params_here as f64
            };
            let w_adapter = adapter_params as f64 * wb;
            weights = shard(base, 3) + w_adapter as u64;
            grads = (adapter_params as f64 * gb) as u64;
            optimizer = (adapter_params as f64 * ob) as u64;
            master = 0;
            adapters = (adapter_params as f64 * (wb + gb + ob)) as u64;
            trainable_linear_here = 0;
        }
        _ => {
            weights = shard(params_here as f64 * wb, 3);
            grads = shard(params_here as f64 * gb, 2);
            optimizer = shard(params_here as f64 * ob, 1);
            master = shard(params_here as f64 * mb, 1);
            adapters = 0;
            trainable_linear_here = linear_here;
        }
    }

    // ---- weight copies: autocast cache (HF AMP) or ZeRO-3 gathered layers ----
    let head_linear = if last { divu(vh, tp) } else { 0 };
    let gathered = if zero >= 3 && dp > 1 {
        // Current and prefetched layer, gathered in bf16.
        2 * 2 * (layer_params_all / model.layers / tp)
    } else {
        0
    };
    let (cache_fwd, cache_bwd) = if recipe == Recipe::HfAmp {
        let all = 2 * (trainable_linear_here + head_linear);
        if l.recompute == Recompute::Full {
            (all, 2 * head_linear) // only the head's cast is saved outside checkpoints
        } else {
            (all, all)
        }
    } else {
        (gathered, gathered)
    };

    // ---- activations ----
    let seqs = if s.task == Task::Dpo { 2 } else { 1 };
    let tokens = l.micro_batch * seqs * s.seq_len / cp; // per micro-batch on this GPU
    let inflight = (pp - stage).min(s.micro_batches.max(1));
    let per_layer = layer_bytes(model, recipe, s.lora_rank, l.recompute);
    let activations = mul_div(&[layers_here, inflight, tokens, per_layer], tp);
    let recompute = if l.recompute == Recompute::Full {
        divu(
            tokens * layer_bytes(model, recipe, s.lora_rank, Recompute::None),
            tp,
        )
    } else {
        0
    };

    // ---- logits and loss (last stage) ----
    let vt = if last {
        divu(model.vocab * tokens, tp)
    } else {
        0
    };
    // HF: bf16 logits, their fp32 copy and the fp32 log-softmax (10 B); in backward the
    // log-softmax output, NLL gradient and log-softmax gradient (12 B). Megatron's vocab-parallel
    // cross entropy keeps the bf16 logits and one fp32 buffer that becomes the softmax in place
    // (6 B), and its backward turns that buffer into the gradient in place before the bf16 cast
    // (8 B).
    let (fwd_bytes, bwd_bytes) = if recipe == Recipe::MegatronBf16 {
        (6, 8)
    } else {
        (10, 12)
    };
    let logits_fwd = vt.saturating_mul(fwd_bytes);
    let logits_bwd = vt.saturating_mul(bwd_bytes);
    let head_trains = recipe.method() == MethodKind::Full && last;
    // The head's weight gradient comes out of the matmul in bf16 and is then either cast to the
    // grad dtype (fp32) or copied to the parameter's layout (bf16): two V×h buffers at once.
    let head_grad_transient = if head_trains {
        ((2.0 + gb) * divu(vh, tp) as f64) as u64
    } else {
        0
    };
    let tied_embedding_grad =
        if model.tied_embeddings && recipe.method() == MethodKind::Full && first {
            4 * divu(vh, tp)
        } else {
            0
        };

    // DPO: frozen reference model (full method only; adapters reuse the base).
    let reference_model = if s.task == Task::Dpo && recipe.method() == MethodKind::Full {
        shard(2.0 * params_here as f64, 3)
    } else {
        0
    };

    let hopper = matches!(s.gpu, GpuKind::H100 | GpuKind::H200 | GpuKind::H800);
    let workspace = if hopper { 64 * MIB } else { 16 * MIB };

    // Gradients already resident at backward start: Megatron's persistent main-grad buffer,
    // or gradients accumulated over earlier micro-batches.
    let grads_early = if recipe == Recipe::MegatronBf16 || s.micro_batches > 1 {
        grads
    } else {
        0
    };
    let ddp_buckets = if s.engine == Engine::Torchrun && zero == 0 && dp > 1 {
        grads
    } else {
        0
    };
    // DDP rebuilds its buckets in gradient-ready order at the second iteration's forward; the
    // old buckets are released only once their last all-reduce is done with, so a rank can hold
    // two copies through forward and the start of backward (measured: 3 of 4 DDP runs had both
    // at the peak on some rank). The optimizer step sees one.
    let ddp_rebuild = ddp_buckets;
    // FSDP2 full shard: the root module (embedding, final norm, untied head) is not resharded
    // after forward, so its bf16 parameters stay gathered through forward and backward; its
    // gradients are reduce-scattered last, from a bf16 gradient cast to the fp32 reduce dtype,
    // while every other sharded gradient and the optimizer states are resident.
    let fsdp = recipe == Recipe::FsdpAmp && zero >= 3 && dp > 1;
    let root_params = embed_here + head_here;
    let (fsdp_root_live, fsdp_root_reduce) = if fsdp {
        (2 * root_params, 8 * root_params)
    } else {
        (0, 0)
    };
    let transient = ddp_rebuild + fsdp_root_live;
    // Sums saturate: absurd shapes give u64::MAX ("does not fit"), never an overflow panic.
    let states = sum(&[
        weights,
        optimizer,
        master,
        reference_model,
        workspace,
        ddp_buckets,
    ]);
    let fwd_end = sum(&[
        states,
        grads_early,
        cache_fwd,
        activations,
        logits_fwd,
        transient,
    ]);
    let bwd_start = sum(&[
        states,
        grads_early,
        cache_bwd,
        activations,
        logits_bwd,
        transient,
    ]);
    let head_bwd = sum(&[
        states,
        grads_early,
        cache_bwd,
        activations,
        vt.saturating_mul(2),
        head_grad_transient,
        transient,
    ]);
    let head_grad = if head_trains {
        divu(vh, tp) * gb as u64
    } else {
        0
    };
    let recompute_phase = sum(&[
        states,
        grads_early.max(head_grad),
        activations,
        recompute,
        cache_bwd,
        transient,
    ]);
    let opt_step = sum(&[
        states,
        grads,
        tied_embedding_grad,
        gathered,
        fsdp_root_reduce,
    ]);
    let mut phases = vec![
        (Phase::ForwardEnd, fwd_end),
        (Phase::BackwardStart, bwd_start),
    ];
    if head_trains {
        phases.push((Phase::HeadBackward, head_bwd));
    }
    if l.recompute == Recompute::Full {
        phases.push((Phase::Recompute, recompute_phase));
    }
    phases.push((Phase::OptimizerStep, opt_step));
    // The earliest phase wins a tie (it is reached first).
    let (peak_phase, peak_bytes) = phases
        .iter()
        .rev()
        .copied()
        .max_by_key(|(_, b)| *b)
        .expect("phases");
    MemoryBreakdown {
        weights,
        grads,
        ddp_buckets,
        ddp_rebuild,
        fsdp_root: fsdp_root_reduce.max(fsdp_root_live),
        optimizer,
        master,
        adapters,
        weight_copies: cache_bwd.max(cache_fwd),
        activations,
        recompute,
        logits: logits_bwd,
        tied_embedding_grad,
        reference_model,
        workspace,
        peak_bytes,
        peak_phase,
        phases,
        peak_stage: stage,
        context: 0,
        fragmentation_reserve: 0,
        required_bytes: peak_bytes,
    }
}

/// Adds the outside-allocator terms and the fragmentation reserve to a breakdown.
pub fn with_overheads(
    mut m: MemoryBreakdown,
    gpu: GpuKind,
    world: u64,
    margin: f64,
) -> MemoryBreakdown {
    let nccl = if world > 1 { 512 * MIB } else { 0 };
    m.context = gpu.spec().context_bytes + nccl;
    m.fragmentation_reserve = (m.peak_bytes as f64 * margin).ceil() as u64;
    m.required_bytes = sum(&[m.peak_bytes, m.fragmentation_reserve, m.context]);
    m
}

/// Memory of a vLLM deployment on one tensor-parallel group.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub struct ServeMemory {
    /// Tensor-parallel size.
    pub tp: u64,
    /// Weights per GPU.
    pub weights: u64,
    /// Activation/profiling reserve and CUDA graphs per GPU.
    pub runtime_reserve: u64,
    /// KV-cache bytes per token per GPU.
    pub kv_bytes_per_token: u64,
    /// KV cache per GPU.
    pub kv_cache: u64,
    /// Tokens the KV cache holds.
    pub tokens_fit: u64,
    /// Tokens needed: max_model_len × concurrency.
    pub tokens_needed: u64,
}

/// KV cache and tokens that fit for a TP size at a memory utilisation.
pub fn serve_memory(
    model: &ModelShape,
    memory_per_gpu: u64,
    util: f64,
    weight_bytes: f64,
    tp: u64,
    max_model_len: u64,
    concurrency: u64,
) -> ServeMemory {
    let p = model.params();
    let weights = (p.total as f64 * weight_bytes / tp as f64).ceil() as u64;
    // vLLM profiles a forward of max_num_batched_tokens (8192 by default) and captures CUDA graphs.
    let act =
        8192 * (4 * model.hidden + 2 * model.intermediate.max(model.hidden) + 4 * model.vocab) / tp;
    let runtime_reserve = act + 1024 * MIB;
    let budget = (memory_per_gpu as f64 * util) as u64;
    let kv_per_token = divu(model.kv_bytes_per_token(2), tp.min(model.kv_heads).max(1)).max(1);
    let kv_cache = budget.saturating_sub(weights + runtime_reserve);
    ServeMemory {
        tp,
        weights,
        runtime_reserve,
        kv_bytes_per_token: kv_per_token,
        kv_cache,
        tokens_fit: kv_cache / kv_per_token,
        tokens_needed: max_model_len * concurrency,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::shape_of;

    fn per_layer(id: &str, recipe: Recipe, rank: u64) -> (u64, ModelShape) {
        let m = shape_of(id).unwrap();
        let sum = saved_tensors(&m, recipe, rank)
            .iter()
            .map(|t| t.bytes_per_token)
            .sum();
        (sum, m)
    }

    #[test]
    fn saved_tensors_match_the_documented_formulas() {
        let (bf16, m) = per_layer("meta-llama/Meta-Llama-3-8B", Recipe::PureBf16, 16);
        let (h, q, kv, i) = (m.hidden, m.q_dim(), m.kv_dim(), m.intermediate);
        assert_eq!(bf16, 16 * h + 4 * q + 4 * kv + 8 * i);
        let (amp, _) = per_layer("meta-llama/Meta-Llama-3-8B", Recipe::HfAmp, 16);
        assert_eq!(amp, 26 * h + 4 * q + 4 * kv + 8 * i);
        let (lora, _) = per_layer("meta-llama/Meta-Llama-3-8B", Recipe::Lora, 64);
        assert_eq!(lora, 28 * h + 8 * q + 4 * kv + 10 * i + 28 * 64);
        let (qlora, _) = per_layer("meta-llama/Meta-Llama-3-8B", Recipe::Qlora, 64);
        assert_eq!(qlora, lora);
        // Qwen3's q/k norms add their fp32 inputs and normalised copies.
        let (q3, m3) = per_layer("Qwen/Qwen3-8B", Recipe::PureBf16, 16);
        let base = 16 * m3.hidden + 4 * m3.q_dim() + 4 * m3.kv_dim() + 8 * m3.intermediate;
        assert_eq!(q3, base + 6 * (m3.q_dim() + m3.kv_dim()));
    }

    #[test]
    fn nf4_with_double_quantisation_is_about_half_a_byte() {
        assert!((NF4_BYTES_PER_PARAM - 0.516).abs() < 0.001);
    }

    fn setup<'a>(m: &'a ModelShape, layout: Layout, dp: u64, micro_batches: u64) -> TrainSetup<'a> {
        TrainSetup {
            model: m,
            recipe: Recipe::MegatronBf16,
            lora_rank: 16,
            layout,
            dp,
            micro_batches,
            seq_len: 4096,
            task: Task::Sft,
            gpu: GpuKind::H100,
            engine: Engine::Megatron,
        }
    }

    const ONE: Layout = Layout {
        tp: 1,
        pp: 1,
        cp: 1,
        ep: 1,
        zero: 0,
        recompute: Recompute::None,
        micro_batch: 1,
    };

    #[test]
    fn parallelism_divides_the_right_terms() {
        let m = shape_of("Qwen/Qwen2.5-14B").unwrap();
        let base = training_memory(&setup(&m, ONE, 8, 8));
        let zero1 = training_memory(&setup(&m, Layout { zero: 1, ..ONE }, 8, 8));
        assert_eq!(zero1.weights, base.weights);
        assert_eq!(zero1.optimizer, base.optimizer.div_ceil(8));
        assert_eq!(zero1.master, base.master.div_ceil(8));
        let tp4 = training_memory(&setup(&m, Layout { tp: 4, ..ONE }, 2, 8));
        assert!((tp4.weights as f64 / base.weights as f64 - 0.25).abs() < 0.01);
        assert!((tp4.activations as f64 / base.activations as f64 - 0.25).abs() < 0.01);
        let cp2 = training_memory(&setup(&m, Layout { cp: 2, ..ONE }, 4, 8));
        assert!((cp2.activations as f64 / base.activations as f64 - 0.5).abs() < 0.01);
    }

    #[test]
    fn first_pipeline_stage_holds_pp_micro_batches_in_flight() {
        let m = shape_of("Qwen/Qwen2.5-14B").unwrap();
        let pp4 = Layout { pp: 4, ..ONE };
        let many = stage_memory(&setup(&m, pp4, 2, 16), 0);
        let last = stage_memory(&setup(&m, pp4, 2, 16), 3);
        assert_eq!(many.activations, 4 * last.activations);
        let two = stage_memory(&setup(&m, pp4, 2, 2), 0);
        assert_eq!(two.activations, 2 * last.activations);
        // Only the last stage computes logits.
        assert_eq!(many.logits, 0);
        assert!(last.logits > 0);
    }

    #[test]
    fn data_parallel_terms_belong_to_their_launcher() {
        let m = shape_of("meta-llama/Meta-Llama-3-8B").unwrap();
        let at = |recipe, engine, zero, dp| {
            training_memory(&TrainSetup {
                recipe,
                engine,
                dp,
                layout: Layout { zero, ..ONE },
                ..setup(&m, ONE, dp, 1)
            })
        };
        // DDP: one persistent bucket copy, and the rebuild copy outside the optimizer step.
        let ddp = at(Recipe::HfAmp, Engine::Torchrun, 0, 2);
        assert_eq!(ddp.ddp_buckets, ddp.grads);
        assert_eq!(ddp.ddp_rebuild, ddp.grads);
        let single = at(Recipe::HfAmp, Engine::Torchrun, 0, 1);
        assert_eq!(single.ddp_buckets + single.ddp_rebuild, 0);
        assert_eq!(
            at(Recipe::DeepspeedBf16, Engine::Deepspeed, 0, 2).ddp_buckets,
            0
        );
        let opt = |b: &MemoryBreakdown| {
            b.phases
                .iter()
                .find(|(p, _)| *p == Phase::OptimizerStep)
                .unwrap()
                .1
        };
        assert_eq!(opt(&ddp) - opt(&single), ddp.ddp_buckets);
        // FSDP full shard: the root (embedding + untied head) gathered in bf16, reduced in fp32.
        let fsdp = at(Recipe::FsdpAmp, Engine::Torchrun, 3, 2);
        let p = m.params();
        assert_eq!(fsdp.fsdp_root, 8 * (p.embedding + p.lm_head));
        assert_eq!(at(Recipe::FsdpAmp, Engine::Torchrun, 0, 2).fsdp_root, 0);
        // Megatron's vocab-parallel cross entropy works in place: 8 B per logit, not HF's 12.
        let mega = at(Recipe::MegatronBf16, Engine::Megatron, 1, 1);
        let hf = at(Recipe::PureBf16, Engine::Torchrun, 0, 1);
        assert_eq!(mega.logits * 12, hf.logits * 8);
    }

    #[test]
    fn kv_cache_fills_what_weights_leave() {
        let m = shape_of("meta-llama/Meta-Llama-3-8B").unwrap();
        let s1 = serve_memory(&m, 85_520_809_984, 0.9, 2.0, 1, 8192, 1);
        let s2 = serve_memory(&m, 85_520_809_984, 0.9, 2.0, 2, 8192, 1);
        assert_eq!(s1.kv_bytes_per_token, 131_072);
        assert_eq!(s2.kv_bytes_per_token, 65_536);
        assert!(s2.tokens_fit > 2 * s1.tokens_fit);
    }
}
