//! Strategy search: enumerate (method, engine, tp, pp, dp, ZeRO, recompute, micro-batch) that
//! reach the global batch, keep those that fit with the safety margin, rank by tokens/s, and
//! record why the others were rejected.

use serde::Serialize;

use crate::error::{PlanError, Result};
use crate::memory::{MemoryBreakdown, Recipe, TrainSetup, training_memory, with_overheads};
use crate::model::{ModelShape, ParamCounts};
use crate::request::{
    Engine, FullPrecision, Layout, Method, MethodKind, Parallelism, PlanRequest, Recompute,
};
use crate::throughput::{StepShape, Throughput, estimate};

/// One evaluated layout.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub struct Candidate {
    /// Method.
    pub method: MethodKind,
    /// Launcher.
    pub engine: Engine,
    /// Numeric recipe.
    pub recipe: Recipe,
    /// LoRA rank (0 for full).
    pub lora_rank: u64,
    /// Layout.
    pub layout: Layout,
    /// Data-parallel size.
    pub dp: u64,
    /// Gradient-accumulation steps.
    pub grad_accum: u64,
    /// Sequences per optimizer step.
    pub global_batch: u64,
    /// Per-GPU memory.
    pub memory: MemoryBreakdown,
    /// Step time and tokens/s.
    pub throughput: Throughput,
    /// Memory available per GPU.
    pub available_bytes: u64,
}

impl Candidate {
    /// Fits with the safety margin and context.
    pub fn fits(&self) -> bool {
        self.memory.required_bytes <= self.available_bytes
    }

    /// Short layout text, e.g. `full/megatron tp=4 pp=2 dp=2 zero=1 recompute=selective mb=1 ga=16`.
    pub fn label(&self) -> String {
        let l = &self.layout;
        let method = match self.method {
            MethodKind::Full if self.recipe == Recipe::PureBf16 => "full-bf16".to_string(),
            MethodKind::Full => "full".to_string(),
            MethodKind::Lora => format!("lora(r={})", self.lora_rank),
            MethodKind::Qlora => format!("qlora(r={})", self.lora_rank),
        };
        let mut s = format!(
            "{method}/{} tp={} pp={} dp={} zero={} recompute={} mb={} ga={}",
            engine_name(self.engine),
            l.tp,
            l.pp,
            self.dp,
            l.zero,
            recompute_name(l.recompute),
            l.micro_batch,
            self.grad_accum
        );
        if l.cp > 1 {
            s.push_str(&format!(" cp={}", l.cp));
        }
        if l.ep > 1 {
            s.push_str(&format!(" ep={}", l.ep));
        }
        s
    }

    /// The largest memory term and its size, to say what overflowed.
    pub fn largest_term(&self) -> (&'static str, u64) {
        let m = &self.memory;
        [
            ("weights", m.weights),
            ("gradients", m.grads + m.ddp_buckets),
            ("optimizer states + master", m.optimizer + m.master),
            ("activations", m.activations + m.recompute),
            ("logits/loss", m.logits),
            ("weight copies", m.weight_copies),
            ("reference model", m.reference_model),
        ]
        .into_iter()
        .max_by_key(|(_, b)| *b)
        .expect("terms")
    }
}

/// Launcher display name.
pub fn engine_name(e: Engine) -> &'static str {
    match e {
        Engine::Auto => "auto",
        Engine::Megatron => "megatron",
        Engine::Torchrun => "torchrun",
        Engine::Deepspeed => "deepspeed",
        Engine::Swift => "swift",
    }
}

/// Recompute display name.
pub fn recompute_name(r: Recompute) -> &'static str {
    match r {
        Recompute::None => "none",
        Recompute::Selective => "selective",
        Recompute::Full => "full",
    }
}

/// A rejected layout and why.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub struct Rejection {
    /// Layout text.
    pub label: String,
    /// Bytes it needs per GPU.
    pub required_bytes: u64,
    /// Bytes available per GPU.
    pub available_bytes: u64,
    /// Term that overflowed the most.
    pub largest_term: String,
    /// Its size.
    pub largest_term_bytes: u64,
}

/// The planner's answer for a training job.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub struct PlanReport {
    /// Model name as given.
    pub model_name: String,
    /// Model shapes (the renderers need them).
    pub model: ModelShape,
    /// Exact parameter counts.
    pub params: ParamCounts,
    /// Training FLOPs per token at the job's sequence length.
    pub flops_per_token: f64,
    /// GPU name.
    pub gpu: String,
    /// Memory per GPU, bytes.
    pub memory_per_gpu: u64,
    /// Nodes.
    pub nodes: u64,
    /// GPUs per node.
    pub gpus_per_node: u64,
    /// Tokens per sequence.
    pub seq_len: u64,
    /// The chosen plan.
    pub chosen: Candidate,
    /// Layouts that also fit, fastest first (up to 3).
    pub alternatives: Vec<Candidate>,
    /// Rejected layouts worth knowing about (closest to fitting, simplest first).
    pub rejected: Vec<Rejection>,
    /// Why this method and layout, in sentences.
    pub reasoning: Vec<String>,
    /// Candidates evaluated.
    pub evaluated: usize,
}

const GIB: f64 = (1u64 << 30) as f64;

/// Formats bytes as GiB with one decimal.
pub fn gib(bytes: u64) -> String {
    format!("{:.1} GiB", bytes as f64 / GIB)
}

fn check_request(req: &PlanRequest) -> Result<()> {
    let bad = |field: &str, reason: String| {
        Err(PlanError::InvalidRequest {
            field: field.to_string(),
            reason,
        })
    };
    if req.nodes == 0 {
        return bad(
            "resources.nodes",
            "0 nodes; a GPU job needs at least 1 node".into(),
        );
    }
    if req.gpus_per_node == 0 {
        return bad(
            "resources.gpusPerNode",
            "0 GPUs for a GPU job; set at least 1 (or use engine: builtin for CPU)".into(),
        );
    }
    if req.seq_len == 0 || req.seq_len > 1 << 24 {
        return bad(
            "train.seqLen",
            format!("{} must be between 1 and 16777216 tokens", req.seq_len),
        );
    }
    if req
        .pinned
        .micro_batch
        .is_some_and(|mb| mb == 0 || mb > 4096)
    {
        return bad("microBatch", "must be between 1 and 4096 sequences".into());
    }
    if req.global_batch > 1 << 32 {
        return bad(
            "train.globalBatch",
            format!(
                "{} sequences per step is beyond any real run",
                req.global_batch
            ),
        );
    }
    if req.nodes > 1 << 16 || req.gpus_per_node > 1 << 10 {
        return bad(
            "resources.nodes",
            "more than 65536 nodes or 1024 GPUs per node is not a real cluster".into(),
        );
    }
    if !(0.0..=0.5).contains(&req.safety_margin) {
        return bad(
            "safetyMargin",
            format!("{} is outside 0.0–0.5", req.safety_margin),
        );
    }
    if let Method::Lora { rank } | Method::Qlora { rank } = req.method
        && (rank == 0 || rank > req.model.hidden)
    {
        return bad(
            "method.rank",
            format!(
                "{rank} must be between 1 and hidden_size {}",
                req.model.hidden
            ),
        );
    }
    if let Parallelism::Fixed(l) = req.parallelism {
        let mp = l.tp * l.pp * l.cp;
        if l.tp == 0 || l.pp == 0 || l.cp == 0 || l.micro_batch == 0 {
            return bad(
                "parallelism",
                "tp, pp, cp and microBatch must be at least 1".into(),
            );
        }
        if l.micro_batch > 4096 || l.tp > 1024 || l.pp > 1024 || l.cp > 1024 {
            return bad(
                "parallelism.microBatch",
                "sizes above 4096 sequences or 1024-way parallelism are not supported".into(),
            );
        }
        if !req.gpus().is_multiple_of(mp) {
            return bad(
                "parallelism.tp",
                format!(
                    "tp × pp × cp = {mp} does not divide the {} GPUs; pick sizes whose product divides it",
                    req.gpus()
                ),
            );
        }
        if l.tp > req.gpus_per_node {
            return bad(
                "parallelism.tp",
                format!(
                    "{} exceeds gpusPerNode {}; tensor parallelism must stay inside a node",
                    l.tp, req.gpus_per_node
                ),
            );
        }
        if !req.model.kv_heads.is_multiple_of(l.tp) || !req.model.heads.is_multiple_of(l.tp) {
            return bad(
                "parallelism.tp",
                format!(
                    "{} does not divide num_key_value_heads {} (and num_attention_heads {}); \
                     Megatron splits query groups across tensor-parallel ranks",
                    l.tp, req.model.kv_heads, req.model.heads
                ),
            );
        }
        let dp = req.gpus() / mp;
        if l.ep > 1 && (req.model.moe.is_none() || !dp.is_multiple_of(l.ep)) {
            return bad(
                "parallelism.ep",
                format!(
                    "{} needs a mixture-of-experts model and must divide the data-parallel size {dp}",
                    l.ep
                ),
            );
        }
        if l.zero > 3 {
            return bad(
                "parallelism.zero",
                format!("{} is not a ZeRO stage (0–3)", l.zero),
            );
        }
        if !req.model.layers.is_multiple_of(l.pp) {
            return bad(
                "parallelism.pp",
                format!(
                    "{} does not divide num_hidden_layers {}",
                    l.pp, req.model.layers
                ),
            );
        }
    }
    Ok(())
}

fn divisors_up_to(n: u64, max: u64) -> Vec<u64> {
    (1..=max.min(n)).filter(|d| n.is_multiple_of(*d)).collect()
}

/// Engines and recipes that can run `method` with model-parallel sizes (tp, pp).
fn engine_recipes(
    req: &PlanRequest,
    method: MethodKind,
    tp: u64,
    pp: u64,
) -> Vec<(Engine, Recipe)> {
    let precision = match req.method {
        Method::Full { precision } => precision,
        _ => FullPrecision::Mixed,
    };
    let model_parallel = tp * pp > 1;
    let engines: Vec<Engine> = match req.engine {
        Engine::Auto => match method {
            MethodKind::Full if model_parallel => vec![Engine::Megatron],
            MethodKind::Full => vec![Engine::Torchrun, Engine::Deepspeed],
            _ => vec![Engine::Torchrun],
        },
        e => vec![e],
    };
    let mut out = Vec::new();
    for e in engines {
        let recipe = match (method, e) {
            (MethodKind::Full, Engine::Megatron) => {
                if precision == FullPrecision::Bf16 {
                    continue; // Megatron keeps fp32 master weights.
                }
                Recipe::MegatronBf16
            }
            (_, Engine::Megatron) => continue, // Megatron-LM has no LoRA.
            (_, _) if model_parallel => continue, // HF stacks: data parallel only.
            (MethodKind::Full, _) if precision == FullPrecision::Bf16 => Recipe::PureBf16,
            (MethodKind::Full, Engine::Torchrun) => Recipe::HfAmp,
            (MethodKind::Full, _) => Recipe::DeepspeedBf16,
            (MethodKind::Lora, _) => Recipe::Lora,
            (MethodKind::Qlora, _) => Recipe::Qlora,
        };
        out.push((e, recipe));
    }
    out
}

fn zero_stages(engine: Engine, recipe: Recipe, dp: u64) -> Vec<u8> {
    if dp == 1 {
        return vec![0];
    }
    match (engine, recipe) {
        (Engine::Megatron, _) => vec![1, 0],
        (Engine::Torchrun, _) => vec![0, 3],
        (_, Recipe::Lora) | (_, Recipe::Qlora) => vec![0, 3],
        _ => vec![1, 2, 3],
    }
}

fn method_order(req: &PlanRequest) -> Vec<(MethodKind, u64)> {
    match req.method {
        Method::Auto => vec![
            (MethodKind::Full, 0),
            (MethodKind::Lora, 16),
            (MethodKind::Qlora, 16),
        ],
        Method::Full { .. } => vec![(MethodKind::Full, 0)],
        Method::Lora { rank } => vec![(MethodKind::Lora, rank)],
        Method::Qlora { rank } => vec![(MethodKind::Qlora, rank)],
    }
}

/// One point of the search space, before evaluation.
struct Choice {
    method: MethodKind,
    rank: u64,
    engine: Engine,
    recipe: Recipe,
    layout: Layout,
    dp: u64,
    global_batch: u64,
}

/// The throughput model's input for `req` run as `choice` says, its traffic between nodes at
/// `inter_node_share` of the GPU's network bandwidth.
fn step_shape<'a>(req: &'a PlanRequest, choice: &Choice, inter_node_share: f64) -> StepShape<'a> {
    let seq_len = if req.task == crate::request::Task::Dpo {
        2 * req.seq_len
    } else {
        req.seq_len
    };
    StepShape {
        model: &req.model,
        recipe: choice.recipe,
        engine: choice.engine,
        layout: choice.layout,
        dp: choice.dp,
        micro_batches: choice.global_batch / (choice.layout.micro_batch * choice.dp),
        seq_len,
        global_batch: choice.global_batch,
        gpu: req.gpu,
        gpus_per_node: req.gpus_per_node,
        inter_node_share,
        train_sequences: req.train_sequences,
    }
}

/// How much longer (percent) `chosen`, planned for `req`, runs when its nodes are split across
/// racks whose links carry `inter_rack_pct`% of the bandwidth between nodes within one rack
/// (an oversubscribed spine): its data- and expert-parallel traffic between nodes slows, what
/// stays within a node does not. 0 for a job on one node; at most the most a job may give
/// (`ferry_spec::MAX_SPLIT_SLOWDOWN_PCT`).
/// The scheduler weighs it against the wait for one rack (`splitSlowdownPct`).
pub fn split_slowdown_pct(req: &PlanRequest, chosen: &Candidate, inter_rack_pct: u32) -> u32 {
    if req.nodes <= 1 || inter_rack_pct >= 100 {
        return 0;
    }
    let choice = Choice {
        method: chosen.method,
        rank: chosen.lora_rank,
        engine: chosen.engine,
        recipe: chosen.recipe,
        layout: chosen.layout,
        dp: chosen.dp,
        global_batch: chosen.global_batch,
    };
    let share = f64::from(inter_rack_pct.max(1)) / 100.0;
    let split = estimate(&step_shape(req, &choice, share)).step_s;
    let within = chosen.throughput.step_s;
    let most = ferry_spec::MAX_SPLIT_SLOWDOWN_PCT.unsigned_abs();
    let pct = ((split / within - 1.0) * 100.0).round();
    if pct.is_finite() {
        (pct.max(0.0) as u32).min(most)
    } else {
        most
    }
}

fn evaluate(req: &PlanRequest, choice: Choice) -> Candidate {
    let Choice {
        method,
        rank,
        engine,
        recipe,
        layout,
        dp,
        global_batch,
    } = choice;
    let grad_accum = global_batch / (layout.micro_batch * dp);
    let setup = TrainSetup {
        model: &req.model,
        recipe,
        lora_rank: rank,
        layout,
        dp,
        micro_batches: grad_accum,
        seq_len: req.seq_len,
        task: req.task,
        gpu: req.gpu,
        engine,
    };
    let memory = with_overheads(
        training_memory(&setup),
        req.gpu,
        req.gpus(),
        req.safety_margin,
    );
    let throughput = estimate(&step_shape(req, &choice, 1.0));
    Candidate {
        method,
        engine,
        recipe,
        lora_rank: rank,
        layout,
        dp,
        grad_accum,
        global_batch,
        memory,
        throughput,
        available_bytes: req.memory_per_gpu(),
    }
}

/// (tp, pp, cp) triples to try. Context parallelism is tried for sequences of 32K tokens and
/// more, where activations rather than model states dominate.
fn layouts(req: &PlanRequest) -> Vec<(u64, u64, u64)> {
    if let Parallelism::Fixed(l) = req.parallelism {
        return vec![(l.tp, l.pp, l.cp)];
    }
    let cps: &[u64] = if req.seq_len >= 32768 {
        &[1, 2, 4]
    } else {
        &[1]
    };
    let gpus = req.gpus();
    let mut out = Vec::new();
    for tp in divisors_up_to(gpus, req.gpus_per_node.min(8)) {
        // Megatron splits query groups across TP ranks: tp must divide the kv heads.
        if !req.model.kv_heads.is_multiple_of(tp) || !req.model.heads.is_multiple_of(tp) {
            continue;
        }
        for pp in divisors_up_to(gpus / tp, req.model.layers) {
            if !req.model.layers.is_multiple_of(pp) || pp > 16 {
                continue;
            }
            for &cp in cps {
                if (gpus / (tp * pp)).is_multiple_of(cp) && req.seq_len.is_multiple_of(2 * cp) {
                    out.push((tp, pp, cp));
                }
            }
        }
    }
    out
}

/// Plans a training job: the fastest layout that fits, with its reasons and the rejected ones.
pub fn plan(req: &PlanRequest) -> Result<PlanReport> {
    check_request(req)?;
    let gpus = req.gpus();
    let mut all: Vec<Candidate> = Vec::new();
    let mut batch_reachable = false;
    let fixed = match req.parallelism {
        Parallelism::Fixed(l) => Some(l),
        Parallelism::Auto => None,
    };
    for (method, rank) in method_order(req) {
        for (tp, pp, cp) in layouts(req) {
            let dp = gpus / (tp * pp * cp);
            // CP, like TP and PP, exists only in Megatron.
            for (engine, base_recipe) in engine_recipes(req, method, tp, pp * cp) {
                let zeros = match fixed {
                    Some(l) => vec![l.zero],
                    None => zero_stages(engine, base_recipe, dp),
                };
                // Expert parallelism (Megatron, MoE models): experts split over ranks of the
                // data-parallel group.
                let eps: Vec<u64> = match (fixed, &req.model.moe) {
                    (Some(l), _) => vec![l.ep],
                    (None, Some(moe)) if engine == Engine::Megatron => [1u64, 2, 4, 8]
                        .into_iter()
                        .filter(|&ep| dp.is_multiple_of(ep) && moe.experts.is_multiple_of(ep))
                        .collect(),
                    _ => vec![1],
                };
                let recomputes = match (fixed, req.pinned.recompute) {
                    (Some(l), _) => vec![l.recompute],
                    (None, Some(r)) => vec![r],
                    (None, None) => vec![Recompute::None, Recompute::Selective, Recompute::Full],
                };
                let micro_batches: Vec<u64> = match (fixed, req.pinned.micro_batch) {
                    (Some(l), _) => vec![l.micro_batch],
                    (None, Some(mb)) => vec![mb],
                    (None, None) => vec![1, 2, 4, 8, 16],
                };
                for (&zero, &ep) in zeros.iter().flat_map(|z| eps.iter().map(move |e| (z, e))) {
                    // torchrun + FSDP full shard keeps fp32 sharded parameters and gathers
                    // bf16 copies per layer instead of autocast-caching the whole model.
                    let recipe = if base_recipe == Recipe::HfAmp && zero == 3 && dp > 1 {
                        Recipe::FsdpAmp
                    } else {
                        base_recipe
                    };
                    for &recompute in &recomputes {
                        for &mb in &micro_batches {
                            let global = if req.global_batch > 0 {
                                req.global_batch
                            } else {
                                mb * dp * pp.max(1)
                            };
                            if !global.is_multiple_of(mb * dp) {
                                continue;
                            }
                            batch_reachable = true;
                            let layout = Layout {
                                tp,
                                pp,
                                cp,
                                ep,
                                zero,
                                recompute,
                                micro_batch: mb,
                            };
                            all.push(evaluate(
                                req,
                                Choice {
                                    method,
                                    rank,
                                    engine,
                                    recipe,
                                    layout,
                                    dp,
                                    global_batch: global,
                                },
                            ));
                        }
                    }
                }
            }
        }
    }
    if !batch_reachable {
        let dps: Vec<u64> = layouts(req)
            .iter()
            .map(|(tp, pp, cp)| gpus / (tp * pp * cp))
            .collect();
        let mut dps = dps;
        dps.sort();
        dps.dedup();
        return Err(PlanError::UnreachableBatch {
            global_batch: req.global_batch,
            reason: format!(
                "it must be a multiple of micro-batch × data-parallel size, and the data-parallel \
                 sizes possible on {gpus} GPUs for this method are {dps:?}; use a multiple of {}",
                dps.first().copied().unwrap_or(1)
            ),
        });
    }

    // Pick the method: the first in order (full → lora → qlora) with a fitting layout.
    let mut reasoning = Vec::new();
    let mut rejected = Vec::new();
    let methods = method_order(req);
    let mut chosen_method = None;
    for (method, _) in &methods {
        let of_method: Vec<&Candidate> = all.iter().filter(|c| c.method == *method).collect();
        if of_method.iter().any(|c| c.fits()) {
            chosen_method = Some(*method);
            break;
        }
        if let Some(closest) = of_method.iter().min_by_key(|c| c.memory.required_bytes) {
            let (term, bytes) = closest.largest_term();
            reasoning.push(format!(
                "{} rejected: even the most memory-frugal layout ({}) needs {} per GPU of {} \
                 (largest term: {term} {})",
                method_name(*method),
                closest.label(),
                gib(closest.memory.required_bytes),
                gib(closest.available_bytes),
                gib(bytes)
            ));
            rejected.push(rejection(closest));
        }
    }
    let Some(method) = chosen_method else {
        let closest = all
            .iter()
            .min_by_key(|c| c.memory.required_bytes)
            .expect("candidates exist when the batch is reachable");
        let (term, bytes) = closest.largest_term();
        return Err(PlanError::NothingFits {
            reason: format!(
                "the closest layout {} needs {} per GPU but {} has {} (largest term: {term} {}); \
                 add GPUs, use larger GPUs, shorten train.seqLen or choose method: qlora",
                closest.label(),
                gib(closest.memory.required_bytes),
                req.gpu.spec().name,
                gib(closest.available_bytes),
                gib(bytes)
            ),
        });
    };

    let mut fitting: Vec<&Candidate> = all
        .iter()
        .filter(|c| c.method == method && c.fits())
        .collect();
    fitting.sort_by(|a, b| {
        b.throughput
            .tokens_per_s
            .partial_cmp(&a.throughput.tokens_per_s)
            .unwrap_or(std::cmp::Ordering::Equal)
            .then(simplicity(a).cmp(&simplicity(b)))
    });
    let chosen = fitting[0].clone();
    let alternatives: Vec<Candidate> = fitting
        .iter()
        .skip(1)
        .filter(|c| c.label() != chosen.label())
        .take(3)
        .map(|c| (*c).clone())
        .collect();

    // Simpler layouts of the chosen method where no variant (recompute, micro-batch) fits
    // explain the model parallelism: each with its most frugal variant.
    // (model-parallel size, zero, tp, pp, engine) → (any variant fits, most frugal variant)
    type GroupKey = (u64, u8, u64, u64, u8);
    let mut groups: std::collections::BTreeMap<GroupKey, (bool, &Candidate)> =
        std::collections::BTreeMap::new();
    for c in all
        .iter()
        .filter(|c| c.method == method && simplicity(c).0 <= simplicity(&chosen).0)
    {
        let key = (
            c.layout.tp * c.layout.pp,
            c.layout.zero,
            c.layout.tp,
            c.layout.pp,
            c.engine as u8,
        );
        let slot = groups.entry(key).or_insert((false, c));
        slot.0 |= c.fits();
        if c.memory.required_bytes < slot.1.memory.required_bytes {
            slot.1 = c;
        }
    }
    for (_, c) in groups
        .into_values()
        .filter(|(any_fits, _)| !any_fits)
        .take(5)
    {
        rejected.push(rejection(c));
    }

    reasoning.extend(explain(req, &chosen, &alternatives));
    Ok(PlanReport {
        model_name: req.model_name.clone(),
        model: req.model.clone(),
        params: req.model.params(),
        flops_per_token: req.model.train_flops_per_token(req.seq_len),
        gpu: req.gpu.spec().name.to_string(),
        memory_per_gpu: req.memory_per_gpu(),
        nodes: req.nodes,
        gpus_per_node: req.gpus_per_node,
        seq_len: req.seq_len,
        chosen,
        alternatives,
        rejected,
        reasoning,
        evaluated: all.len(),
    })
}

/// Lower is simpler: less model parallelism, less sharding, less recompute.
fn simplicity(c: &Candidate) -> (u64, u8, Recompute, u64) {
    (
        c.layout.tp * c.layout.pp * c.layout.cp,
        c.layout.zero,
        c.layout.recompute,
        u64::MAX - c.layout.micro_batch,
    )
}

fn rejection(c: &Candidate) -> Rejection {
    let (term, bytes) = c.largest_term();
    Rejection {
        label: c.label(),
        required_bytes: c.memory.required_bytes,
        available_bytes: c.available_bytes,
        largest_term: term.to_string(),
        largest_term_bytes: bytes,
    }
}

/// Method display name.
pub fn method_name(m: MethodKind) -> &'static str {
    match m {
        MethodKind::Full => "full fine-tuning",
        MethodKind::Lora => "LoRA",
        MethodKind::Qlora => "QLoRA",
    }
}

fn explain(req: &PlanRequest, c: &Candidate, alternatives: &[Candidate]) -> Vec<String> {
    let mut r = Vec::new();
    let m = &c.memory;
    let l = &c.layout;
    match req.method {
        Method::Auto => r.push(format!(
            "method: {} — the first of full → LoRA → QLoRA that fits {} × {} with a {:.0}% margin",
            method_name(c.method),
            req.gpus(),
            req.gpu.spec().name,
            req.safety_margin * 100.0
        )),
        _ => r.push(format!("method: {} (as requested)", method_name(c.method))),
    }
    let states = m.weights + m.grads + m.optimizer + m.master;
    r.push(format!(
        "model states take {} per GPU (weights {}, gradients {}, optimizer {}{}), activations {}, \
         logits/loss {}; peak {} at {:?}, {} with fragmentation reserve and CUDA context",
        gib(states),
        gib(m.weights),
        gib(m.grads),
        gib(m.optimizer),
        if m.master > 0 {
            format!(", fp32 master {}", gib(m.master))
        } else {
            String::new()
        },
        gib(m.activations + m.recompute),
        gib(m.logits),
        gib(m.peak_bytes),
        m.peak_phase,
        gib(m.required_bytes)
    ));
    if l.tp > 1 {
        r.push(format!(
            "tensor parallel {} inside a node (NVLink), with sequence parallelism: divides weights, \
             gradients and activations by {}; it divides num_key_value_heads = {}",
            l.tp, l.tp, req.model.kv_heads
        ));
    }
    if l.pp > 1 {
        r.push(format!(
            "pipeline parallel {}: {} layers per stage; with {} micro-batches per step the 1F1B \
             bubble is (p−1)/m = {:.1}% of compute",
            l.pp,
            req.model.layers / l.pp,
            c.grad_accum,
            100.0 * (l.pp as f64 - 1.0) / c.grad_accum as f64
        ));
    }
    if let (Some(moe), true) = (&req.model.moe, l.ep > 1) {
        r.push(format!(
            "expert parallel {}: each rank of the data-parallel group holds {} of the {} experts \
             per MoE layer; tokens reach their top-{} experts by all-to-all ({:.2} s/step)",
            l.ep,
            moe.experts / l.ep,
            moe.experts,
            moe.top_k,
            c.throughput.ep_comm_s
        ));
    }
    if c.dp > 1 {
        let zero_text = match (c.engine, l.zero) {
            (Engine::Megatron, 1) => "distributed optimizer (ZeRO-1): fp32 master and Adam states sharded across data-parallel ranks".to_string(),
            (Engine::Torchrun, 3) => "FSDP full shard: parameters, gradients and optimizer states sharded".to_string(),
            (_, 0) => "plain data parallel: every rank holds full model states".to_string(),
            (_, z) => format!("ZeRO-{z}: {} sharded across data-parallel ranks", match z {
                1 => "optimizer states",
                2 => "optimizer states and gradients",
                _ => "optimizer states, gradients and parameters",
            }),
        };
        r.push(format!("data parallel {}: {zero_text}", c.dp));
    }
    r.push(format!(
        "recompute {}: {}",
        recompute_name(l.recompute),
        match l.recompute {
            Recompute::None => "every activation fits, so no forward is repeated",
            Recompute::Selective => "element-wise activations are recomputed; GEMM inputs kept",
            Recompute::Full =>
                "only each layer's input is kept; backward re-runs the layer (+⅓ compute)",
        }
    ));
    r.push(format!(
        "batch: micro-batch {} × data-parallel {} × accumulation {} = {} sequences of {} tokens",
        l.micro_batch, c.dp, c.grad_accum, c.global_batch, req.seq_len
    ));
    let t = &c.throughput;
    r.push(format!(
        "throughput: {:.0} tokens/s ({:.2} s/step; compute {:.2} s at {:.0}% MFU, bubble {:.2} s, \
         TP comm {:.2} s, exposed DP comm {:.2} s){}",
        t.tokens_per_s,
        t.step_s,
        t.compute_s,
        t.mfu * 100.0,
        t.bubble_s,
        t.tp_comm_s,
        t.dp_comm_s,
        t.total_hours
            .map(|h| format!("; {h:.1} h for the dataset"))
            .unwrap_or_default()
    ));
    if let Some(next) = alternatives.first() {
        r.push(format!(
            "runner-up: {} at {:.0} tokens/s ({:.0}% slower)",
            next.label(),
            next.throughput.tokens_per_s,
            100.0 * (1.0 - next.throughput.tokens_per_s / t.tokens_per_s)
        ));
    }
    if req.seq_len > req.model.max_positions {
        r.push(format!(
            "warning: train.seqLen {} exceeds the model's max_position_embeddings {}",
            req.seq_len, req.model.max_positions
        ));
    }
    r
}
