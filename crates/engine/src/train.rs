//! The trainer: a [`TrainConfig`] in, one JSON metrics line per step out, Hugging Face
//! checkpoints (or PEFT adapters) on disk, exact resume from any checkpoint.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use candle_core::{Device, Tensor, Var};
use serde::{Deserialize, Serialize};
use serde_json::json;
use tokenizers::Tokenizer;

use crate::checkpoint::{
    OPTIMIZER_STATE, TRAINER_STATE, TrainerState, read_state, resolve_resume, write_atomically,
    write_json,
};
use crate::config::ModelConfig;
use crate::data::{DataConfig, DataFormat, Dataset, read_chat_jsonl, unigram_entropy};
use crate::error::{EngineError, Result};
use crate::model::{LORA_TARGETS, Lora, Model, Weights, init_weights, masked_cross_entropy};
use crate::optim::{AdamW, AdamWParams, global_norm, lr_at};
use crate::rng::Rng;
use crate::tokenize::{END_OF_TEXT, IM_END, load_tokenizer, train_bpe, write_tokenizer_config};
use crate::weights::{
    AdapterConfig, absolute, peft_key, read_adapter, read_model_dir, read_safetensors,
    write_safetensors,
};

/// Where the model to train comes from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum ModelSource {
    /// A fresh model of this shape (`vocabSize` is the BPE target when no tokenizer is given).
    Arch(ModelConfig),
    /// An existing Hugging Face model directory (config.json, model.safetensors, tokenizer.json).
    Base(PathBuf),
}

/// How weights are trained.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Method {
    /// Every weight trains.
    #[default]
    Full,
    /// Only LoRA adapters train; the base stays frozen.
    Lora(LoraConfig),
}

/// LoRA settings (PEFT's `r`, `lora_alpha`, `lora_dropout`, `target_modules`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LoraConfig {
    /// Adapter rank.
    pub rank: usize,
    /// Scale numerator; updates are multiplied by `alpha / rank`.
    pub alpha: f64,
    /// Dropout on adapter inputs.
    #[serde(default)]
    pub dropout: f64,
    /// Projections that get adapters (`q_proj`, `k_proj`, `v_proj`, `o_proj`, `gate_proj`, `up_proj`, `down_proj`).
    #[serde(default = "default_targets")]
    pub target_modules: Vec<String>,
}

fn default_targets() -> Vec<String> {
    vec!["q_proj".into(), "v_proj".into()]
}

/// Checkpoint cadence and retention.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CheckpointConfig {
    /// Directory holding `checkpoint-N/` folders.
    pub dir: PathBuf,
    /// Save every this many steps (0: only at the end).
    #[serde(default)]
    pub every: usize,
    /// Keep the newest this many checkpoints.
    #[serde(default = "default_keep")]
    pub keep: usize,
}

fn default_keep() -> usize {
    2
}

/// Numeric precision of the weights while training.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Precision {
    /// 32-bit floats (the only precision the CPU trainer runs).
    #[default]
    F32,
    /// bfloat16: accepted in the schema, rejected at start on CPU with an explanation.
    Bf16,
}

/// Everything one training run needs; deserialised from the rank's config file (camelCase).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TrainConfig {
    /// The model to train.
    pub model: ModelSource,
    /// A `tokenizer.json`; omitted: the base model's, or a byte-level BPE trained on the data.
    #[serde(default)]
    pub tokenizer: Option<PathBuf>,
    /// Training data.
    pub data: DataConfig,
    /// `full` or `{lora: {...}}`.
    #[serde(default)]
    pub method: Method,
    /// Tokens per example.
    pub seq_len: usize,
    /// Examples per micro-batch.
    pub batch: usize,
    /// Micro-batches per optimizer step.
    #[serde(default = "one")]
    pub grad_accum: usize,
    /// Peak learning rate.
    pub lr: f64,
    /// Final learning rate of the cosine decay (default `lr / 10`).
    #[serde(default)]
    pub min_lr: Option<f64>,
    /// Linear warmup steps.
    #[serde(default)]
    pub warmup: usize,
    /// Optimizer steps; exclusive with `epochs`.
    #[serde(default)]
    pub steps: Option<usize>,
    /// Passes over the data; exclusive with `steps`.
    #[serde(default)]
    pub epochs: Option<f64>,
    /// AdamW decoupled weight decay (matrices only).
    #[serde(default)]
    pub weight_decay: f64,
    /// AdamW beta1.
    #[serde(default = "beta1")]
    pub beta1: f64,
    /// AdamW beta2.
    #[serde(default = "beta2")]
    pub beta2: f64,
    /// AdamW epsilon.
    #[serde(default = "adam_eps")]
    pub eps: f64,
    /// Clip the global gradient norm to this (0: no clipping).
    #[serde(default = "one_f")]
    pub grad_clip: f64,
    /// Checkpoint directory and cadence.
    pub checkpoint: CheckpointConfig,
    /// Seed for initialisation, data order and dropout.
    #[serde(default)]
    pub seed: u64,
    /// Weight precision.
    #[serde(default)]
    pub precision: Precision,
}

fn one() -> usize {
    1
}
fn one_f() -> f64 {
    1.0
}
fn beta1() -> f64 {
    0.9
}
fn beta2() -> f64 {
    0.95
}
fn adam_eps() -> f64 {
    1e-8
}

/// What a finished (or stopped) run produced.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TrainSummary {
    /// Steps completed in total (including those before a resume).
    pub steps: usize,
    /// Loss of the last step, in nats per token.
    pub final_loss: f64,
    /// Unigram entropy of the trained tokens, in nats: the bar the loss must beat.
    pub unigram_entropy: f64,
    /// The last checkpoint written.
    pub checkpoint: PathBuf,
    /// True when SIGTERM (or the stop flag) ended the run before its last step.
    pub stopped_early: bool,
    /// Parameters of the model.
    pub parameters: usize,
    /// Parameters that trained.
    pub trainable_parameters: usize,
}

/// What a rank process of the built-in trainer does (`ferry engine train CONFIG.json`):
/// reads the `TrainConfig` JSON the control plane wrote, resumes from `FERRY_RESUME_FROM`
/// when set, and trains with metrics on stdout.
pub fn train_rank(config: &Path) -> Result<TrainSummary> {
    let text = std::fs::read_to_string(config).map_err(|source| EngineError::Io {
        path: config.to_path_buf(),
        source,
    })?;
    let cfg: TrainConfig = serde_json::from_str(&text).map_err(|e| EngineError::Json {
        path: config.display().to_string(),
        message: e.to_string(),
    })?;
    let resume = std::env::var_os("FERRY_RESUME_FROM").map(PathBuf::from);
    train(&cfg, resume.as_deref(), &mut std::io::stdout())
}

/// Trains as `cfg` says, resuming from `resume_from` (a checkpoint or a checkpoint root) if
/// given, writing one JSON object per step to `metrics`.
///
/// SIGTERM is honoured: the current step finishes, a checkpoint is written, and the function
/// returns with `stopped_early` set, so a preempted rank can be resumed exactly.
pub fn train(
    cfg: &TrainConfig,
    resume_from: Option<&Path>,
    metrics: &mut dyn Write,
) -> Result<TrainSummary> {
    let stop = Arc::new(AtomicBool::new(false));
    let id = signal_hook::flag::register(signal_hook::consts::SIGTERM, Arc::clone(&stop))
        .map_err(|e| EngineError::io("<SIGTERM handler>", e))?;
    let out = train_until(cfg, resume_from, metrics, &stop);
    signal_hook::low_level::unregister(id);
    out
}

/// The trainer state being built up, with its trainable variables.
struct Setup {
    model: Model,
    model_cfg: ModelConfig,
    tokenizer: Tokenizer,
    tokenizer_path: PathBuf,
    /// Base weights (frozen under LoRA, the trainable set under full training).
    vars: Vec<(String, Var)>,
    adapter: Option<AdapterConfig>,
    base_dir: Option<PathBuf>,
}

fn validate(cfg: &TrainConfig) -> Result<()> {
    let checks = [
        ("seqLen", cfg.seq_len == 0, "must be at least 1"),
        ("batch", cfg.batch == 0, "must be at least 1"),
        ("gradAccum", cfg.grad_accum == 0, "must be at least 1"),
        (
            "lr",
            !(cfg.lr > 0.0 && cfg.lr.is_finite()),
            "must be a positive number",
        ),
        ("steps", cfg.steps == Some(0), "must be at least 1"),
        (
            "epochs",
            cfg.epochs.is_some_and(|e| e.is_nan() || e <= 0.0),
            "must be positive",
        ),
        (
            "beta1",
            !(0.0..1.0).contains(&cfg.beta1),
            "must be in [0, 1)",
        ),
        (
            "beta2",
            !(0.0..1.0).contains(&cfg.beta2),
            "must be in [0, 1)",
        ),
        (
            "gradClip",
            cfg.grad_clip < 0.0,
            "must be 0 (off) or positive",
        ),
    ];
    for (field, bad, msg) in checks {
        if bad {
            return Err(EngineError::config(field, msg));
        }
    }
    if cfg.steps.is_some() == cfg.epochs.is_some() {
        return Err(EngineError::config(
            "steps/epochs",
            "give exactly one of them",
        ));
    }
    if cfg.precision == Precision::Bf16 {
        return Err(EngineError::config(
            "precision",
            "bf16 training is not supported by the CPU engine; use f32",
        ));
    }
    if let Method::Lora(l) = &cfg.method {
        if l.rank == 0 {
            return Err(EngineError::config(
                "method.lora.rank",
                "must be at least 1",
            ));
        }
        if !(0.0..1.0).contains(&l.dropout) {
            return Err(EngineError::config(
                "method.lora.dropout",
                "must be in [0, 1)",
            ));
        }
        if l.target_modules.is_empty() {
            return Err(EngineError::config(
                "method.lora.targetModules",
                "name at least one projection",
            ));
        }
        for m in &l.target_modules {
            if !LORA_TARGETS.contains(&m.as_str()) {
                return Err(EngineError::config(
                    "method.lora.targetModules",
                    format!("`{m}` is not one of {LORA_TARGETS:?}"),
                ));
            }
        }
        if matches!(cfg.model, ModelSource::Arch(_)) {
            return Err(EngineError::config(
                "model",
                "LoRA needs a trained base: use `model: {base: DIR}`",
            ));
        }
    }
    Ok(())
}

/// Resolves the tokenizer: the checkpoint's, the configured one, the base model's, or a new BPE.
fn resolve_tokenizer(
    cfg: &TrainConfig,
    resume: Option<&Path>,
    vocab_target: usize,
) -> Result<(Tokenizer, PathBuf)> {
    let path = if let Some(r) = resume {
        r.join("tokenizer.json")
    } else if let Some(t) = &cfg.tokenizer {
        t.clone()
    } else if let ModelSource::Base(b) = &cfg.model {
        b.join("tokenizer.json")
    } else {
        let dir = &cfg.checkpoint.dir;
        std::fs::create_dir_all(dir).map_err(|e| EngineError::io(dir, e))?;
        let out = dir.join("tokenizer.json");
        let tok = match cfg.data.format {
            DataFormat::Text => train_bpe(&[&cfg.data.path], vocab_target, &out)?,
            DataFormat::Chat => {
                let text: String = read_chat_jsonl(&cfg.data.path)?
                    .into_iter()
                    .flatten()
                    .map(|(_, c)| c + "\n")
                    .collect();
                let corpus = dir.join(".bpe-corpus.txt");
                std::fs::write(&corpus, text).map_err(|e| EngineError::io(&corpus, e))?;
                let t = train_bpe(&[&corpus], vocab_target, &out);
                std::fs::remove_file(&corpus).ok();
                t?
            }
        };
        return Ok((tok, out));
    };
    Ok((load_tokenizer(&path)?, path))
}

fn setup(cfg: &TrainConfig, resume: Option<&Path>) -> Result<Setup> {
    let vocab_target = match &cfg.model {
        ModelSource::Arch(a) => a.vocab_size,
        ModelSource::Base(_) => 0,
    };
    let (tokenizer, found_at) = resolve_tokenizer(cfg, resume, vocab_target)?;
    // Keep our own copy beside the checkpoints: the file we found may be pruned later.
    let tokenizer_path = cfg.checkpoint.dir.join("tokenizer.json");
    let same_file = tokenizer_path.exists()
        && std::fs::canonicalize(&found_at).ok() == std::fs::canonicalize(&tokenizer_path).ok();
    if !same_file {
        std::fs::create_dir_all(&cfg.checkpoint.dir)
            .map_err(|e| EngineError::io(&cfg.checkpoint.dir, e))?;
        std::fs::copy(&found_at, &tokenizer_path)
            .map_err(|e| EngineError::io(&tokenizer_path, e))?;
    }
    let tok_vocab = tokenizer.get_vocab_size(true);
    let eos = tokenizer.token_to_id(END_OF_TEXT);
    let (model_cfg, weights, source, base_dir) = match (&cfg.model, resume, &cfg.method) {
        (ModelSource::Arch(a), _, _) => {
            let mut m = a.clone();
            m.vocab_size = tok_vocab;
            m.eos_token_id = eos.or(m.eos_token_id);
            m.bos_token_id = m.bos_token_id.or(eos);
            m.validate()?;
            if let Some(r) = resume {
                let p = r.join("model.safetensors");
                (m, read_safetensors(&p)?, p, None)
            } else {
                (
                    m.clone(),
                    init_weights(&m, &mut Rng::new(cfg.seed))?,
                    PathBuf::from("<init>"),
                    None,
                )
            }
        }
        (ModelSource::Base(b), Some(r), Method::Full) => {
            let m = ModelConfig::from_hf_file(&b.join("config.json"))?;
            let p = r.join("model.safetensors");
            (m, read_safetensors(&p)?, p, Some(b.clone()))
        }
        (ModelSource::Base(b), _, _) => {
            let (m, w) = read_model_dir(b)?;
            (m, w, b.join("model.safetensors"), Some(b.clone()))
        }
    };
    if tok_vocab > model_cfg.vocab_size {
        return Err(EngineError::config(
            "tokenizer",
            format!(
                "{} has {tok_vocab} tokens but the model's vocabulary is {}; use the model's tokenizer",
                tokenizer_path.display(),
                model_cfg.vocab_size
            ),
        ));
    }
    if cfg.seq_len > model_cfg.max_position_embeddings {
        return Err(EngineError::config(
            "seqLen",
            format!(
                "{} exceeds the model's context of {}",
                cfg.seq_len, model_cfg.max_position_embeddings
            ),
        ));
    }
    let lora = match &cfg.method {
        Method::Lora(l) => Some(l),
        Method::Full => None,
    };
    let mut vars = Vec::new();
    let mut tensors = Weights::new();
    for (name, t) in &weights {
        if lora.is_none() {
            let v = Var::from_tensor(t)?;
            tensors.insert(name.clone(), v.as_tensor().clone());
            vars.push((name.clone(), v));
        } else {
            tensors.insert(name.clone(), t.clone());
        }
    }
    let mut model = Model::new(&model_cfg, &tensors, &source)?;
    if lora.is_none() {
        // Only tensors the model uses train; anything extra in the file is carried but frozen.
        let used: std::collections::HashSet<String> = crate::model::parameter_shapes(&model_cfg)
            .into_iter()
            .map(|(n, _)| n)
            .collect();
        vars.retain(|(n, _)| used.contains(n));
    }
    let mut adapter = None;
    if let Some(l) = lora {
        let acfg = AdapterConfig {
            peft_type: "LORA".into(),
            task_type: "CAUSAL_LM".into(),
            r: l.rank,
            lora_alpha: l.alpha,
            lora_dropout: l.dropout,
            target_modules: l.target_modules.clone(),
            base_model_name_or_path: base_dir
                .as_deref()
                .map(|b| absolute(b).display().to_string()),
            bias: "none".into(),
            fan_in_fan_out: false,
            use_rslora: false,
            modules_to_save: None,
            init_lora_weights: true,
            inference_mode: true,
        };
        let saved = match resume {
            Some(r) => Some(read_adapter(r)?.1),
            None => None,
        };
        let mut rng = Rng::new(cfg.seed ^ 0x10aa);
        vars.clear();
        for layer in 0..model_cfg.num_layers {
            for module in &l.target_modules {
                let lin = model
                    .linear_mut(layer, module)
                    .expect("validated module name");
                let (out, inp) = lin.weight.dims2()?;
                let (ka, kb) = (peft_key(layer, module, "A"), peft_key(layer, module, "B"));
                let (a, b) = match &saved {
                    Some(w) => {
                        let get = |k: &str| {
                            w.get(k).cloned().ok_or_else(|| {
                                EngineError::weights(
                                    resume.unwrap_or(Path::new("")),
                                    format!("missing adapter tensor `{k}`"),
                                )
                            })
                        };
                        (get(&ka)?, get(&kb)?)
                    }
                    None => {
                        // PEFT's default: Kaiming-uniform A (bound 1/sqrt(in)), zero B.
                        let bound = 1.0 / (inp as f64).sqrt();
                        let data: Vec<f32> = (0..l.rank * inp)
                            .map(|_| ((rng.uniform() * 2.0 - 1.0) * bound) as f32)
                            .collect();
                        (
                            Tensor::from_vec(data, (l.rank, inp), &Device::Cpu)?,
                            Tensor::zeros((out, l.rank), candle_core::DType::F32, &Device::Cpu)?,
                        )
                    }
                };
                let (va, vb) = (Var::from_tensor(&a)?, Var::from_tensor(&b)?);
                lin.lora = Some(Lora {
                    a: va.as_tensor().clone(),
                    b: vb.as_tensor().clone(),
                    scale: acfg.scale(),
                    dropout: l.dropout as f32,
                });
                vars.push((ka, va));
                vars.push((kb, vb));
            }
        }
        adapter = Some(acfg);
    }
    Ok(Setup {
        model,
        model_cfg,
        tokenizer,
        tokenizer_path,
        vars,
        adapter,
        base_dir,
    })
}

/// [`train`] without signal handling: stops (with a checkpoint) once `stop` turns true.
pub fn train_until(
    cfg: &TrainConfig,
    resume_from: Option<&Path>,
    metrics: &mut dyn Write,
    stop: &AtomicBool,
) -> Result<TrainSummary> {
    validate(cfg)?;
    let resume = resume_from.map(resolve_resume).transpose()?;
    let state = resume.as_deref().map(read_state).transpose()?;
    let s = setup(cfg, resume.as_deref())?;
    let data = Dataset::load(&cfg.data, &s.tokenizer, cfg.seq_len, cfg.seed)?;
    let entropy_ids: Vec<u32> = if data.stream.is_empty() {
        // Chat: the tokens the model learns to produce.
        let mut ids = Vec::new();
        for k in 0..data.len() {
            let (_, t, w) = data.batch(k, 1)?;
            let (t, w) = (t.to_vec1::<u32>()?, w.to_vec1::<f32>()?);
            ids.extend(t.iter().zip(&w).filter(|(_, w)| **w > 0.0).map(|(t, _)| *t));
        }
        ids
    } else {
        data.stream.clone()
    };
    let entropy = unigram_entropy(&entropy_ids);
    let per_step = cfg.batch * cfg.grad_accum;
    let total = match (cfg.steps, cfg.epochs) {
        (Some(s), _) => s,
        (None, Some(e)) => ((e * data.len() as f64) / per_step as f64).ceil().max(1.0) as usize,
        (None, None) => unreachable!("validated: steps or epochs"),
    };
    let hp = AdamWParams {
        beta1: cfg.beta1,
        beta2: cfg.beta2,
        eps: cfg.eps,
        weight_decay: cfg.weight_decay,
    };
    let mut opt = AdamW::new(s.vars.clone(), hp)?;
    let mut rng = Rng::new(cfg.seed ^ 0xd20d_20d2);
    let mut step = 0;
    let mut samples = 0;
    let mut last_loss = f64::NAN;
    if let (Some(r), Some(st)) = (resume.as_deref(), state.as_ref()) {
        if st.total_steps != total {
            return Err(EngineError::config(
                "steps",
                format!(
                    "the checkpoint was planned for {} steps, this config gives {total}; resume with the same config",
                    st.total_steps
                ),
            ));
        }
        let p = r.join(OPTIMIZER_STATE);
        let moments = read_safetensors(&p)?;
        opt.restore(&moments, st.step).map_err(|missing| {
            EngineError::weights(&p, format!("missing optimizer tensor `{missing}`"))
        })?;
        step = st.step;
        samples = st.samples_seen;
        rng = st.rng;
        last_loss = st.loss;
    }
    let trainable: usize = s.vars.iter().map(|(_, v)| v.as_tensor().elem_count()).sum();
    let min_lr = cfg.min_lr.unwrap_or(cfg.lr / 10.0);
    let mut last_ckpt = resume.clone();
    let mut stopped_early = false;
    let mut saved_at = state.as_ref().map(|s| s.step);
    while step < total {
        if stop.load(Ordering::SeqCst) {
            stopped_early = true;
            break;
        }
        let started = Instant::now();
        let mut acc: Option<Vec<Tensor>> = None;
        let mut loss_sum = 0.0;
        let mut tokens = 0usize;
        for _ in 0..cfg.grad_accum {
            let (x, y, w) = data.batch(samples, cfg.batch)?;
            samples += cfg.batch;
            tokens += x.elem_count();
            let logits = s.model.forward(&x, None, Some(&mut rng))?;
            let loss = masked_cross_entropy(&logits, &y, &w)?;
            let lv = loss.to_scalar::<f32>()? as f64;
            if !lv.is_finite() {
                return Err(EngineError::config(
                    "lr",
                    format!(
                        "loss became {lv} at step {}; lower the learning rate",
                        step + 1
                    ),
                ));
            }
            loss_sum += lv;
            let scaled = (loss / cfg.grad_accum as f64)?;
            let grads = scaled.backward()?;
            let gs: Vec<Tensor> = opt
                .params
                .iter()
                .map(|p| match grads.get(p.var.as_tensor()) {
                    Some(g) => Ok(g.clone()),
                    None => Ok(p.var.as_tensor().zeros_like()?),
                })
                .collect::<Result<_>>()?;
            acc = Some(match acc {
                None => gs,
                Some(prev) => prev
                    .iter()
                    .zip(&gs)
                    .map(|(a, b)| Ok((a + b)?))
                    .collect::<Result<_>>()?,
            });
        }
        let mut grads = acc.expect("grad_accum >= 1");
        let norm = global_norm(&grads)?;
        if cfg.grad_clip > 0.0 && norm > cfg.grad_clip {
            let f = cfg.grad_clip / (norm + 1e-6);
            grads = grads.iter().map(|g| Ok((g * f)?)).collect::<Result<_>>()?;
        }
        step += 1;
        let lr = lr_at(step, total, cfg.warmup, cfg.lr, min_lr);
        opt.update(&grads, lr)?;
        last_loss = loss_sum / cfg.grad_accum as f64;
        let secs = started.elapsed().as_secs_f64().max(1e-9);
        // `max_steps`: the control plane's pace needs the total, also for jobs given in epochs.
        let line = json!({
            "step": step,
            "max_steps": total,
            "loss": last_loss,
            "lr": lr,
            "grad_norm": norm,
            "tokens_per_s": tokens as f64 / secs,
        });
        writeln!(metrics, "{line}")
            .and_then(|_| metrics.flush())
            .map_err(|e| EngineError::io("<metrics output>", e))?;
        let interrupted = stop.load(Ordering::SeqCst);
        if step == total
            || interrupted
            || (cfg.checkpoint.every > 0 && step.is_multiple_of(cfg.checkpoint.every))
        {
            let st = TrainerState {
                step,
                total_steps: total,
                samples_seen: samples,
                rng,
                loss: last_loss,
                method: if s.adapter.is_some() { "lora" } else { "full" }.into(),
            };
            last_ckpt = Some(save(cfg, &s, &opt, &st)?);
            saved_at = Some(step);
        }
        if interrupted && step < total {
            stopped_early = true;
            break;
        }
    }
    if saved_at != Some(step) {
        let st = TrainerState {
            step,
            total_steps: total,
            samples_seen: samples,
            rng,
            loss: last_loss,
            method: if s.adapter.is_some() { "lora" } else { "full" }.into(),
        };
        last_ckpt = Some(save(cfg, &s, &opt, &st)?);
    }
    Ok(TrainSummary {
        steps: step,
        final_loss: last_loss,
        unigram_entropy: entropy,
        checkpoint: last_ckpt.expect("a checkpoint is written before returning"),
        stopped_early,
        parameters: s.model_cfg.num_parameters(),
        trainable_parameters: trainable,
    })
}

fn save(cfg: &TrainConfig, s: &Setup, opt: &AdamW, st: &TrainerState) -> Result<PathBuf> {
    write_atomically(&cfg.checkpoint.dir, st.step, cfg.checkpoint.keep, |dir| {
        let named: Weights = s
            .vars
            .iter()
            .map(|(n, v)| (n.clone(), v.as_tensor().clone()))
            .collect();
        match &s.adapter {
            None => {
                write_json(dir, "config.json", &s.model_cfg.to_hf_json())?;
                write_safetensors(&dir.join("model.safetensors"), &named)?;
            }
            Some(a) => {
                write_json(dir, "adapter_config.json", a)?;
                write_safetensors(&dir.join("adapter_model.safetensors"), &named)?;
                if let Some(b) = &s.base_dir {
                    std::fs::write(dir.join("BASE_MODEL"), absolute(b).display().to_string())
                        .map_err(|e| EngineError::io(dir.join("BASE_MODEL"), e))?;
                }
            }
        }
        let mut eos: Vec<u32> = s.model_cfg.eos_token_id.into_iter().collect();
        if let Some(e) = s.tokenizer.token_to_id(IM_END) {
            eos.push(e);
        }
        write_json(
            dir,
            "generation_config.json",
            &json!({"bos_token_id": s.model_cfg.bos_token_id, "eos_token_id": eos, "do_sample": true}),
        )?;
        let tok_dst = dir.join("tokenizer.json");
        std::fs::copy(&s.tokenizer_path, &tok_dst).map_err(|e| EngineError::io(&tok_dst, e))?;
        write_tokenizer_config(dir, &s.tokenizer)?;
        write_safetensors(&dir.join(OPTIMIZER_STATE), &opt.state())?;
        write_json(dir, TRAINER_STATE, st)
    })
}
