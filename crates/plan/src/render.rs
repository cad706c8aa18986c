//! Launch rendering: the chosen plan as Megatron-LM flags, a torchrun + TRL/PEFT command, a
//! DeepSpeed JSON config, an ms-swift command, and `vllm serve` for deployments.
//!
//! Commands are returned as text (one flag per line, `\` continued) so they can be shown,
//! snapshot-tested, written into a pod spec or run by the local runtime.

use serde_json::json;

use crate::error::{PlanError, Result};
use crate::memory::Recipe;
use crate::model::{Arch, MlpKind};
use crate::request::{Engine, MethodKind, Recompute};
use crate::search::PlanReport;
use crate::serve::ServePlan;

/// Launch targets for a training plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Launcher {
    /// Megatron-LM `pretrain_gpt.py` under torchrun.
    Megatron,
    /// torchrun + TRL's SFT script (HF Trainer, PEFT, FSDP).
    Torchrun,
    /// `deepspeed` launcher + TRL's SFT script with a ZeRO config.
    Deepspeed,
    /// ms-swift `swift sft`.
    Swift,
}

impl Launcher {
    /// Every launcher, in the order help texts list them.
    pub const ALL: [Launcher; 4] = [
        Launcher::Megatron,
        Launcher::Torchrun,
        Launcher::Deepspeed,
        Launcher::Swift,
    ];

    /// The launcher called `name` (as [`Launcher::name`] spells it).
    pub fn from_name(name: &str) -> Option<Launcher> {
        Self::ALL.into_iter().find(|l| l.name() == name)
    }

    /// The launcher's name as `ferry plan --render` and `spec.engine` spell it.
    pub fn name(self) -> &'static str {
        match self {
            Launcher::Megatron => "megatron",
            Launcher::Torchrun => "torchrun",
            Launcher::Deepspeed => "deepspeed",
            Launcher::Swift => "swift",
        }
    }
}

/// Job-specific values the plan does not decide.
#[derive(Debug, Clone, PartialEq)]
pub struct RenderOptions {
    /// Training data (path or dataset name).
    pub data: String,
    /// Where checkpoints go.
    pub output_dir: String,
    /// Peak learning rate.
    pub lr: f64,
    /// Optimizer steps (Megatron `--train-iters`).
    pub train_iters: u64,
    /// Epochs (HF / swift).
    pub epochs: u64,
    /// File name the DeepSpeed config is written to.
    pub deepspeed_config_path: String,
    /// Save every N optimizer steps (`spec.checkpoint.every`); the launcher's own default
    /// when `None` (500 for Megatron and the HF Trainer).
    pub save_every: Option<u64>,
    /// Keep only the newest N checkpoints (HF / swift `--save_total_limit`).
    pub keep: Option<u64>,
    /// Stop after N optimizer steps (HF / swift `--max_steps`, which overrides epochs).
    pub max_steps: Option<u64>,
}

impl Default for RenderOptions {
    fn default() -> Self {
        RenderOptions {
            data: "/data/train.jsonl".to_string(),
            output_dir: "/ckpt/run".to_string(),
            lr: 1e-5,
            train_iters: 1000,
            epochs: 1,
            deepspeed_config_path: "ds_config.json".to_string(),
            save_every: None,
            keep: None,
            max_steps: None,
        }
    }
}

/// The launcher that matches the plan's engine.
pub fn default_launcher(report: &PlanReport) -> Launcher {
    match report.chosen.engine {
        Engine::Megatron => Launcher::Megatron,
        Engine::Deepspeed => Launcher::Deepspeed,
        Engine::Swift => Launcher::Swift,
        Engine::Torchrun | Engine::Auto => {
            if report.chosen.layout.zero > 0 && report.chosen.layout.zero < 3 {
                Launcher::Deepspeed
            } else {
                Launcher::Torchrun
            }
        }
    }
}

struct Cmd {
    lines: Vec<String>,
}

impl Cmd {
    fn new(first: impl Into<String>) -> Self {
        Cmd {
            lines: vec![first.into()],
        }
    }
    fn arg(&mut self, a: impl Into<String>) -> &mut Self {
        self.lines.push(format!("  {}", a.into()));
        self
    }
    fn text(&self) -> String {
        self.lines.join(" \\\n") + "\n"
    }
}

fn torchrun_prefix(r: &PlanReport) -> Cmd {
    let mut c = Cmd::new("torchrun");
    c.arg(format!("--nnodes {}", r.nodes))
        .arg(format!("--nproc-per-node {}", r.gpus_per_node));
    if r.nodes > 1 {
        c.arg("--node-rank $NODE_RANK")
            .arg("--master-addr $MASTER_ADDR")
            .arg("--master-port 29500");
    } else {
        c.arg("--standalone");
    }
    c
}

/// The job's step budget and checkpoint cadence in HF Trainer flags (TRL and ms-swift
/// take the same ones); absent values keep the trainer's defaults.
fn trainer_cadence(cmd: &mut Cmd, o: &RenderOptions) {
    if let Some(n) = o.max_steps {
        cmd.arg(format!("--max_steps {n}"));
    }
    if let Some(n) = o.save_every {
        cmd.arg("--save_strategy steps")
            .arg(format!("--save_steps {n}"));
    }
    if let Some(n) = o.keep {
        cmd.arg(format!("--save_total_limit {n}"));
    }
}

fn unrenderable(target: &str, reason: &str) -> PlanError {
    PlanError::Unrenderable {
        target: target.to_string(),
        reason: reason.to_string(),
    }
}

/// Short float text: `1e-5`, `2.5e-6`, `0.9` (no binary-rounding tails).
fn float(x: f64) -> String {
    let s = format!("{x:.4e}");
    let (mantissa, exp) = s.split_once('e').unwrap_or((&s, "0"));
    let mantissa = mantissa.trim_end_matches('0').trim_end_matches('.');
    match exp {
        "0" => mantissa.to_string(),
        e => format!("{mantissa}e{e}"),
    }
}

/// Renders the training command for `launcher` (for DeepSpeed, the command; see
/// [`deepspeed_config`] for the JSON it points at).
pub fn render_train(r: &PlanReport, launcher: Launcher, o: &RenderOptions) -> Result<String> {
    match launcher {
        Launcher::Megatron => megatron(r, o),
        Launcher::Torchrun => hf(r, o, false),
        Launcher::Deepspeed => hf(r, o, true),
        Launcher::Swift => swift(r, o),
    }
}

fn megatron(r: &PlanReport, o: &RenderOptions) -> Result<String> {
    let c = &r.chosen;
    if c.method != MethodKind::Full {
        return Err(unrenderable(
            "megatron",
            "Megatron-LM pretrain_gpt.py trains full weights only; run LoRA/QLoRA with torchrun or swift",
        ));
    }
    if c.recipe == Recipe::PureBf16 {
        return Err(unrenderable(
            "megatron",
            "Megatron keeps fp32 master weights; choose precision: mixed",
        ));
    }
    let m = &r.model;
    let l = &c.layout;
    let mut cmd = torchrun_prefix(r);
    cmd.arg("pretrain_gpt.py")
        .arg(format!("--tensor-model-parallel-size {}", l.tp))
        .arg(format!("--pipeline-model-parallel-size {}", l.pp));
    if l.cp > 1 {
        cmd.arg(format!("--context-parallel-size {}", l.cp));
    }
    if l.tp > 1 {
        cmd.arg("--sequence-parallel");
    }
    if l.zero >= 1 {
        cmd.arg("--use-distributed-optimizer");
    }
    cmd.arg(format!("--num-layers {}", m.layers))
        .arg(format!("--hidden-size {}", m.hidden))
        .arg(format!("--ffn-hidden-size {}", m.intermediate))
        .arg(format!("--num-attention-heads {}", m.heads));
    if m.kv_heads != m.heads {
        cmd.arg("--group-query-attention")
            .arg(format!("--num-query-groups {}", m.kv_heads));
    }
    if m.head_dim * m.heads != m.hidden {
        cmd.arg(format!("--kv-channels {}", m.head_dim));
    }
    cmd.arg(format!("--seq-length {}", r.seq_len)).arg(format!(
        "--max-position-embeddings {}",
        m.max_positions.max(r.seq_len)
    ));
    if m.arch == Arch::Gpt2 {
        cmd.arg("--position-embedding-type learned_absolute")
            .arg("--normalization LayerNorm");
    } else {
        cmd.arg("--position-embedding-type rope")
            .arg(format!("--rotary-base {}", m.rope_theta))
            .arg("--normalization RMSNorm")
            .arg(format!("--norm-epsilon {}", m.norm_eps));
        if m.mlp == MlpKind::Gated {
            cmd.arg("--swiglu");
        }
        if !m.mlp_bias && !m.o_bias {
            cmd.arg("--disable-bias-linear");
        }
        if m.qkv_bias && !m.o_bias {
            cmd.arg("--add-qkv-bias");
        }
    }
    if m.qk_norm {
        cmd.arg("--qk-layernorm");
    }
    if !m.tied_embeddings {
        cmd.arg("--untie-embeddings-and-output-weights");
    }
    if let Some(moe) = &m.moe {
        cmd.arg(format!("--num-experts {}", moe.experts))
            .arg(format!("--moe-router-topk {}", moe.top_k))
            .arg(format!("--moe-ffn-hidden-size {}", moe.expert_intermediate));
        if let Some(s) = moe.shared_intermediate {
            cmd.arg(format!("--moe-shared-expert-intermediate-size {s}"));
        }
        if l.ep > 1 {
            cmd.arg(format!("--expert-model-parallel-size {}", l.ep));
        }
    }
    cmd.arg("--attention-backend flash")
        .arg(format!("--micro-batch-size {}", l.micro_batch))
        .arg(format!("--global-batch-size {}", c.global_batch))
        .arg("--bf16");
    match l.recompute {
        Recompute::None => {}
        Recompute::Selective => {
            cmd.arg("--recompute-granularity selective");
        }
        Recompute::Full => {
            cmd.arg("--recompute-granularity full")
                .arg("--recompute-method uniform")
                .arg("--recompute-num-layers 1");
        }
    }
    cmd.arg(format!("--lr {}", float(o.lr)))
        .arg(format!("--min-lr {}", float(o.lr / 10.0)))
        .arg("--lr-decay-style cosine")
        .arg("--lr-warmup-fraction 0.03")
        .arg("--weight-decay 0.1")
        .arg("--clip-grad 1.0")
        .arg(format!("--train-iters {}", o.train_iters))
        .arg("--tokenizer-type HuggingFaceTokenizer")
        .arg(format!("--tokenizer-model {}", r.model_name))
        .arg(format!("--data-path {}", o.data))
        .arg("--split 100,0,0")
        .arg(format!("--load {}/base", o.output_dir))
        .arg(format!("--save {}", o.output_dir))
        .arg("--finetune")
        .arg(format!("--save-interval {}", o.save_every.unwrap_or(500)))
        // On SIGTERM (preemption, a time limit) the ranks agree, save and exit.
        .arg("--exit-signal-handler")
        .arg("--log-interval 10");
    Ok(cmd.text())
}

fn hf(r: &PlanReport, o: &RenderOptions, deepspeed: bool) -> Result<String> {
    let c = &r.chosen;
    let l = &c.layout;
    if l.tp > 1 || l.pp > 1 {
        return Err(unrenderable(
            if deepspeed { "deepspeed" } else { "torchrun" },
            "the HF Trainer does not do tensor/pipeline parallelism; render with megatron",
        ));
    }
    let mut cmd = if deepspeed {
        let mut d = Cmd::new("deepspeed");
        d.arg(format!("--num_nodes {}", r.nodes))
            .arg(format!("--num_gpus {}", r.gpus_per_node));
        if r.nodes > 1 {
            d.arg("--hostfile /etc/ferry/hostfile")
                .arg("--master_addr $MASTER_ADDR");
        }
        d
    } else {
        torchrun_prefix(r)
    };
    cmd.arg("-m trl.scripts.sft")
        .arg(format!("--model_name_or_path {}", r.model_name))
        .arg(format!("--dataset_name {}", o.data))
        .arg(format!("--output_dir {}", o.output_dir))
        .arg(format!("--per_device_train_batch_size {}", l.micro_batch))
        .arg(format!("--gradient_accumulation_steps {}", c.grad_accum))
        .arg(format!("--max_length {}", r.seq_len))
        .arg(format!("--learning_rate {}", float(o.lr)))
        .arg(format!("--num_train_epochs {}", o.epochs))
        // Booleans take a value: transformers 5 made `bf16` an optional bool, which fails
        // bare ("expected one argument"); `true` parses in every version.
        .arg("--bf16 true");
    trainer_cadence(&mut cmd, o);
    if c.recipe != Recipe::HfAmp && c.recipe != Recipe::FsdpAmp {
        cmd.arg("--dtype bfloat16");
    }
    if l.recompute != Recompute::None {
        cmd.arg("--gradient_checkpointing true");
    }
    match c.method {
        MethodKind::Full => {}
        MethodKind::Lora | MethodKind::Qlora => {
            cmd.arg("--use_peft true")
                .arg(format!("--lora_r {}", c.lora_rank))
                .arg(format!("--lora_alpha {}", 2 * c.lora_rank))
                .arg("--lora_target_modules all-linear");
            if c.method == MethodKind::Qlora {
                cmd.arg("--load_in_4bit true")
                    .arg("--bnb_4bit_quant_type nf4")
                    .arg("--use_bnb_nested_quant true");
            }
        }
    }
    if deepspeed {
        cmd.arg(format!("--deepspeed {}", o.deepspeed_config_path));
    } else if l.zero >= 3 && c.dp > 1 {
        cmd.arg("--fsdp \"full_shard auto_wrap\"");
    }
    Ok(cmd.text())
}

/// The DeepSpeed JSON config of a data-parallel plan.
pub fn deepspeed_config(r: &PlanReport) -> Result<String> {
    let c = &r.chosen;
    let l = &c.layout;
    if l.tp > 1 || l.pp > 1 {
        return Err(unrenderable(
            "deepspeed",
            "this plan uses Megatron tensor/pipeline parallelism; render with megatron",
        ));
    }
    let mut zero = json!({
        "stage": l.zero,
        "overlap_comm": true,
        "contiguous_gradients": true,
        "reduce_bucket_size": 200_000_000u64,
    });
    if l.zero <= 2 {
        zero["allgather_bucket_size"] = json!(200_000_000u64);
    } else {
        zero["stage3_prefetch_bucket_size"] = json!(50_000_000u64);
        zero["stage3_param_persistence_threshold"] = json!(1_000_000u64);
        zero["stage3_gather_16bit_weights_on_model_save"] = json!(true);
    }
    let config = json!({
        "train_batch_size": c.global_batch,
        "train_micro_batch_size_per_gpu": l.micro_batch,
        "gradient_accumulation_steps": c.grad_accum,
        "gradient_clipping": 1.0,
        "bf16": { "enabled": true },
        "zero_optimization": zero,
        "steps_per_print": 10,
        "wall_clock_breakdown": false
    });
    Ok(serde_json::to_string_pretty(&config).expect("json") + "\n")
}

/// `swift sft` as users write it: ms-swift's CLI reads the gang's shape from the environment
/// and starts `torchrun ... swift/cli/sft.py` itself.
fn swift(r: &PlanReport, o: &RenderOptions) -> Result<String> {
    let mut env = format!("NPROC_PER_NODE={}", r.gpus_per_node);
    if r.nodes > 1 {
        env.push_str(&format!(
            " NNODES={} NODE_RANK=$NODE_RANK MASTER_ADDR=$MASTER_ADDR MASTER_PORT=29500",
            r.nodes
        ));
    }
    swift_args(r, o, Cmd::new(format!("{env} swift sft")))
}

/// The same run as [`render_train`]`(.., Launcher::Swift, ..)` with torchrun started directly
/// on `-m swift.cli.sft` (what the `swift` CLI runs), so a wrapper module can be put in front
/// of ms-swift's entry point as it is for TRL's.
pub(crate) fn render_swift_torchrun(r: &PlanReport, o: &RenderOptions) -> Result<String> {
    let mut head = torchrun_prefix(r);
    head.arg("-m swift.cli.sft");
    swift_args(r, o, head)
}

fn swift_args(r: &PlanReport, o: &RenderOptions, mut cmd: Cmd) -> Result<String> {
    let c = &r.chosen;
    let l = &c.layout;
    if l.tp > 1 || l.pp > 1 {
        return Err(unrenderable(
            "swift",
            "`swift sft` is data-parallel; this plan needs Megatron tensor/pipeline parallelism \
             (render with megatron)",
        ));
    }
    // ms-swift 4 names it `--tuner_type` (3.x: `--train_type`, which 4 refuses).
    cmd.arg(format!("--model {}", r.model_name)).arg(format!(
        "--tuner_type {}",
        if c.method == MethodKind::Full {
            "full"
        } else {
            "lora"
        }
    ));
    cmd.arg(format!("--dataset {}", o.data))
        .arg("--torch_dtype bfloat16")
        .arg(format!("--per_device_train_batch_size {}", l.micro_batch))
        .arg(format!("--gradient_accumulation_steps {}", c.grad_accum))
        .arg(format!("--max_length {}", r.seq_len))
        .arg(format!("--learning_rate {}", float(o.lr)))
        .arg(format!("--num_train_epochs {}", o.epochs))
        .arg(format!(
            "--gradient_checkpointing {}",
            l.recompute != Recompute::None
        ));
    trainer_cadence(&mut cmd, o);
    if c.method != MethodKind::Full {
        cmd.arg(format!("--lora_rank {}", c.lora_rank))
            .arg(format!("--lora_alpha {}", 2 * c.lora_rank))
            .arg("--target_modules all-linear");
    }
    if c.method == MethodKind::Qlora {
        cmd.arg("--quant_method bnb")
            .arg("--quant_bits 4")
            .arg("--bnb_4bit_quant_type nf4")
            .arg("--bnb_4bit_use_double_quant true");
    }
    if c.dp > 1 && l.zero > 0 {
        cmd.arg(format!("--deepspeed zero{}", l.zero));
    }
    // Checkpoints go to the output directory itself, not to a new `v<N>-<time>/` under it
    // for every run, so a restart finds them (ms-swift adds that folder by default).
    cmd.arg(format!("--output_dir {}", o.output_dir))
        .arg("--add_version false");
    Ok(cmd.text())
}

/// `vllm serve` for a deployment plan.
pub fn render_vllm(p: &ServePlan) -> String {
    let mut cmd = Cmd::new(format!("vllm serve {}", p.model_name));
    cmd.arg(format!("--tensor-parallel-size {}", p.memory.tp))
        .arg(format!("--max-model-len {}", p.max_model_len))
        .arg(format!(
            "--gpu-memory-utilization {}",
            p.gpu_memory_utilization
        ))
        .arg(format!("--max-num-seqs {}", p.concurrency.max(1)))
        .arg("--dtype bfloat16");
    cmd.text()
}
