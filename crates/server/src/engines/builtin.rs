//! `engine: builtin`: Ferry's candle trainer, run as `ferry engine train CONFIG.json` in
//! one CPU process. The job's spec becomes the engine's `TrainConfig`, written beside the
//! attempt's logs so a failed run can be replayed by hand.

use ferry_engine::{
    CheckpointConfig, DataConfig, DataFormat as EngineData, LoraConfig, Method as EngineMethod,
    ModelSource as EngineModel, Precision, TrainConfig,
};
use ferry_runtime::LaunchRequest;
use ferry_spec::{DataFormat, FieldError, Method, ModelSource, TrainJob};

use super::{EngineAdapter, LaunchContext, in_working_dir, request};

/// The built-in engine's adapter.
pub(super) struct BuiltinEngine;

impl EngineAdapter for BuiltinEngine {
    fn name(&self) -> &'static str {
        "builtin"
    }

    fn validate(&self, job: &TrainJob) -> Vec<FieldError> {
        let spec = &job.spec;
        let mut problems = Vec::new();
        if spec.resources.world_size() > 1 {
            problems.push(FieldError::new(
                "spec.resources",
                "the built-in engine trains in one process; set nodes: 1 and procsPerNode: 1, or pick a distributed engine (torchrun, megatron)",
            ));
        }
        if spec.resources.total_gpus() > 0 {
            problems.push(FieldError::new(
                "spec.resources.gpusPerNode",
                "the built-in engine trains on the CPU; set gpusPerNode: 0 or pick a GPU engine (torchrun, megatron, swift)",
            ));
        }
        match spec.model.as_ref().map(|m| m.source) {
            None => problems.push(FieldError::new(
                "spec.model",
                "is required for engine: builtin, e.g. {source: scratch, preset: tiny} or {source: path, path: ./my-model}",
            )),
            Some(ModelSource::Hf) => problems.push(FieldError::new(
                "spec.model.source",
                "the built-in engine does not download from the Hugging Face hub; download the model and use source: path",
            )),
            Some(ModelSource::Scratch) => {
                let preset = spec.model.as_ref().and_then(|m| m.preset.as_deref());
                if preset.and_then(ferry_engine::preset).is_none() {
                    problems.push(FieldError::new(
                        "spec.model.preset",
                        format!(
                            "{} is not a built-in preset; use one of {}",
                            preset.map_or("(none)".to_owned(), |p| format!("`{p}`")),
                            ferry_engine::PRESETS.join(", ")
                        ),
                    ));
                }
                if matches!(spec.method, Method::Lora | Method::Qlora) {
                    problems.push(FieldError::new(
                        "spec.method",
                        "LoRA needs a trained base model; use method: full for a model from scratch",
                    ));
                }
            }
            Some(ModelSource::Path | ModelSource::Artifact) => {}
        }
        if spec.method == Method::Qlora {
            problems.push(FieldError::new(
                "spec.method",
                "the built-in engine has no 4-bit base; use method: lora",
            ));
        }
        match &spec.data {
            None => problems.push(FieldError::new(
                "spec.data",
                "is required for engine: builtin: {path: FILE, format: text|chat}",
            )),
            Some(d) if d.format == DataFormat::Preference => problems.push(FieldError::new(
                "spec.data.format",
                "the built-in engine trains on text or chat data; preference data (DPO) needs engine: swift",
            )),
            Some(_) => {}
        }
        problems
    }

    fn launch(&self, ctx: &LaunchContext<'_>) -> Result<LaunchRequest, FieldError> {
        let cfg = train_config(ctx)?;
        let path = ctx
            .run_dir
            .join(format!("train-config-{}.json", ctx.attempt));
        let text = serde_json::to_string_pretty(&cfg).map_err(|e| {
            FieldError::new("spec", format!("cannot encode the training config: {e}"))
        })?;
        std::fs::create_dir_all(&ctx.run_dir)
            .and_then(|()| std::fs::write(&path, text))
            .map_err(|e| {
                FieldError::new(
                    "spec",
                    format!(
                        "cannot write {}: {e}; check FERRY_HOME is writable",
                        path.display()
                    ),
                )
            })?;
        let argv = vec![
            ctx.self_exe.to_string_lossy().into_owned(),
            "engine".into(),
            "train".into(),
            path.to_string_lossy().into_owned(),
        ];
        Ok(request(ctx, argv))
    }
}

/// The engine's config for this attempt; spec fields left out get the engine's defaults.
fn train_config(ctx: &LaunchContext<'_>) -> Result<TrainConfig, FieldError> {
    let job = &ctx.job.job;
    let spec = &job.spec;
    let model_ref = spec
        .model
        .as_ref()
        .ok_or_else(|| FieldError::new("spec.model", "is required for engine: builtin"))?;
    let model = match model_ref.source {
        ModelSource::Scratch => {
            let name = model_ref.preset.as_deref().unwrap_or("");
            EngineModel::Arch(ferry_engine::preset(name).ok_or_else(|| {
                FieldError::new(
                    "spec.model.preset",
                    format!("use one of {}", ferry_engine::PRESETS.join(", ")),
                )
            })?)
        }
        _ => EngineModel::Base(ctx.model_dir.clone().ok_or_else(|| {
            FieldError::new(
                "spec.model",
                "names no model directory the control plane could find",
            )
        })?),
    };
    let data = spec
        .data
        .as_ref()
        .ok_or_else(|| FieldError::new("spec.data", "is required for engine: builtin"))?;
    let format = match data.format {
        DataFormat::Text => EngineData::Text,
        DataFormat::Chat => EngineData::Chat,
        DataFormat::Preference => {
            return Err(FieldError::new(
                "spec.data.format",
                "preference data needs engine: swift",
            ));
        }
    };
    let lora = matches!(spec.method, Method::Lora)
        || (spec.method == Method::Auto && model_ref.source != ModelSource::Scratch);
    let method = if lora {
        let l = spec.lora.clone().unwrap_or_default();
        EngineMethod::Lora(LoraConfig {
            rank: l.rank.max(1) as usize,
            alpha: l.alpha,
            dropout: l.dropout,
            // The spec's "all linear layers when empty".
            target_modules: if l.target_modules.is_empty() {
                [
                    "q_proj",
                    "k_proj",
                    "v_proj",
                    "o_proj",
                    "gate_proj",
                    "up_proj",
                    "down_proj",
                ]
                .map(String::from)
                .to_vec()
            } else {
                l.target_modules
            },
        })
    } else {
        EngineMethod::Full
    };
    let t = &spec.train;
    let steps = t.steps.map(|s| s.max(1) as usize);
    let epochs = match steps {
        Some(_) => None,
        None => Some(t.epochs.unwrap_or(1.0)),
    };
    let lr = t.lr.unwrap_or(if lora { 1e-3 } else { 3e-3 });
    let warmup = match t.warmup_steps {
        Some(w) => w.max(0) as usize,
        None => steps.map_or(10, |s| (s / 10).max(1)),
    };
    Ok(TrainConfig {
        model,
        tokenizer: None,
        data: DataConfig {
            path: in_working_dir(job, &data.path),
            format,
        },
        method,
        seq_len: t.seq_len.unwrap_or(128).max(1) as usize,
        batch: t.global_batch.unwrap_or(8).max(1) as usize,
        grad_accum: 1,
        lr,
        min_lr: Some(lr / 10.0),
        warmup,
        steps,
        epochs,
        weight_decay: 0.01,
        beta1: 0.9,
        beta2: 0.95,
        eps: 1e-8,
        grad_clip: 1.0,
        checkpoint: CheckpointConfig {
            dir: ctx.checkpoint_dir.clone(),
            every: spec.checkpoint.every.unwrap_or(0).max(0) as usize,
            keep: spec.checkpoint.keep.unwrap_or(2).max(1) as usize,
        },
        seed: t.seed.unwrap_or(1) as u64,
        precision: Precision::F32,
    })
}
