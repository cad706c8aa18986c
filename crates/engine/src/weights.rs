//! Reading and writing model directories: Hugging Face layout and PEFT LoRA adapters.
//!
//! Safetensors are parsed by the `safetensors` crate, which validates the header against the
//! file length before anything is allocated, so a corrupt file is an error naming it, never a panic.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use candle_core::{DType, Device, Tensor};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::config::ModelConfig;
use crate::error::{EngineError, Result};
use crate::model::{LORA_TARGETS, Lora, Model, Weights, module_path};

/// PEFT's prefix in front of Hugging Face module paths inside `adapter_model.safetensors`.
pub const PEFT_PREFIX: &str = "base_model.model.";

/// Reads one safetensors file into f32 tensors, naming the file in any error.
pub fn read_safetensors(path: &Path) -> Result<Weights> {
    let bytes = std::fs::read(path).map_err(|e| EngineError::io(path, e))?;
    let map = candle_core::safetensors::load_buffer(&bytes, &Device::Cpu).map_err(|e| {
        EngineError::weights(
            path,
            format!("not a valid safetensors file ({e}); re-export or re-download it"),
        )
    })?;
    let mut out = Weights::new();
    for (k, v) in map {
        let v = if v.dtype() == DType::F32 || v.dtype().is_int() {
            v
        } else {
            v.to_dtype(DType::F32)?
        };
        out.insert(k, v);
    }
    Ok(out)
}

/// Writes tensors as safetensors with PyTorch's `format: pt` metadata, via a temp file and rename.
pub fn write_safetensors(path: &Path, weights: &Weights) -> Result<()> {
    let tmp = path.with_extension("safetensors.tmp");
    let metadata: HashMap<String, String> = [("format".to_string(), "pt".to_string())].into();
    let tensors: Vec<(&String, Tensor)> = weights
        .iter()
        .map(|(k, v)| Ok((k, v.contiguous()?)))
        .collect::<Result<_>>()?;
    safetensors::serialize_to_file(tensors.iter().map(|(k, v)| (*k, v)), Some(metadata), &tmp)
        .map_err(|e| EngineError::weights(&tmp, format!("cannot write safetensors: {e}")))?;
    std::fs::rename(&tmp, path).map_err(|e| EngineError::io(path, e))
}

/// Reads `config.json` and all weights (`model.safetensors` or a sharded index) of a model directory.
pub fn read_model_dir(dir: &Path) -> Result<(ModelConfig, Weights)> {
    if !dir.is_dir() {
        return Err(EngineError::weights(
            dir,
            "model directory does not exist; pass a directory holding config.json and model.safetensors",
        ));
    }
    let cfg = ModelConfig::from_hf_file(&dir.join("config.json"))?;
    let single = dir.join("model.safetensors");
    let index = dir.join("model.safetensors.index.json");
    let mut weights = Weights::new();
    if single.exists() {
        weights = read_safetensors(&single)?;
    } else if index.exists() {
        let text = std::fs::read_to_string(&index).map_err(|e| EngineError::io(&index, e))?;
        let v: Value = serde_json::from_str(&text).map_err(|e| EngineError::Json {
            path: index.display().to_string(),
            message: e.to_string(),
        })?;
        let map = v
            .get("weight_map")
            .and_then(Value::as_object)
            .ok_or_else(|| EngineError::weights(&index, "has no `weight_map` object"))?;
        let mut files: Vec<&str> = map.values().filter_map(Value::as_str).collect();
        files.sort_unstable();
        files.dedup();
        for f in files {
            if f.contains("..") || f.contains('/') {
                return Err(EngineError::weights(
                    &index,
                    format!("shard name `{f}` escapes the model directory"),
                ));
            }
            weights.extend(read_safetensors(&dir.join(f))?);
        }
    } else {
        return Err(EngineError::weights(
            dir,
            "no model.safetensors or model.safetensors.index.json; only safetensors checkpoints are supported",
        ));
    }
    Ok((cfg, weights))
}

/// Loads a Hugging Face model directory into a runnable model.
pub fn load_model(dir: &Path) -> Result<Model> {
    let (cfg, weights) = read_model_dir(dir)?;
    let source = if dir.join("model.safetensors").exists() {
        dir.join("model.safetensors")
    } else {
        dir.to_path_buf()
    };
    Model::new(&cfg, &weights, &source)
}

/// PEFT's `adapter_config.json` (the subset Ferry reads and writes).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AdapterConfig {
    /// Always `"LORA"`.
    pub peft_type: String,
    /// Always `"CAUSAL_LM"`.
    pub task_type: String,
    /// LoRA rank.
    pub r: usize,
    /// LoRA alpha; the update is scaled by `alpha / r`.
    pub lora_alpha: f64,
    /// Dropout on the adapter input during training.
    #[serde(default)]
    pub lora_dropout: f64,
    /// Module names (e.g. `q_proj`) that carry adapters.
    pub target_modules: Vec<String>,
    /// Where the base model lives.
    #[serde(default)]
    pub base_model_name_or_path: Option<String>,
    /// `"none"`: biases are not trained.
    #[serde(default = "bias_none")]
    pub bias: String,
    /// False: weights are stored `[out, in]`.
    #[serde(default)]
    pub fan_in_fan_out: bool,
    /// rsLoRA scaling (`alpha / sqrt(r)`).
    #[serde(default)]
    pub use_rslora: bool,
    /// Not supported by Ferry: extra fully-trained modules.
    #[serde(default)]
    pub modules_to_save: Option<Vec<String>>,
    /// PEFT's init flag; Ferry uses PEFT's default (Kaiming-uniform A, zero B).
    #[serde(default = "yes")]
    pub init_lora_weights: bool,
    /// Inference mode flag PEFT writes when saving.
    #[serde(default = "yes")]
    pub inference_mode: bool,
}

fn bias_none() -> String {
    "none".into()
}
fn yes() -> bool {
    true
}

impl AdapterConfig {
    /// The factor applied to `B A x`.
    pub fn scale(&self) -> f64 {
        if self.use_rslora {
            self.lora_alpha / (self.r as f64).sqrt()
        } else {
            self.lora_alpha / self.r as f64
        }
    }
}

/// The PEFT key of adapter matrix `ab` (`"A"` or `"B"`) on `module` in `layer`.
pub fn peft_key(layer: usize, module: &str, ab: &str) -> String {
    format!(
        "{PEFT_PREFIX}{}.lora_{ab}.weight",
        module_path(layer, module)
    )
}

/// Reads a PEFT adapter directory (`adapter_config.json` + `adapter_model.safetensors`).
pub fn read_adapter(dir: &Path) -> Result<(AdapterConfig, Weights)> {
    let cfg_path = dir.join("adapter_config.json");
    let text = std::fs::read_to_string(&cfg_path).map_err(|e| EngineError::io(&cfg_path, e))?;
    let cfg: AdapterConfig = serde_json::from_str(&text).map_err(|e| EngineError::Json {
        path: cfg_path.display().to_string(),
        message: e.to_string(),
    })?;
    if cfg.peft_type != "LORA" || cfg.fan_in_fan_out || cfg.bias != "none" {
        return Err(EngineError::weights(
            &cfg_path,
            "only plain LoRA adapters (peft_type LORA, bias none, fan_in_fan_out false) are supported",
        ));
    }
    if cfg.modules_to_save.as_ref().is_some_and(|m| !m.is_empty()) {
        return Err(EngineError::weights(
            &cfg_path,
            "modules_to_save is not supported; remove it",
        ));
    }
    let weights = read_safetensors(&dir.join("adapter_model.safetensors"))?;
    Ok((cfg, weights))
}

/// Attaches adapter tensors to `model` (unmerged, so they can train or run as-is).
pub(crate) fn attach_adapter(
    model: &mut Model,
    cfg: &AdapterConfig,
    weights: &Weights,
    source: &Path,
) -> Result<()> {
    let layers = model.config().num_layers;
    let mut attached = 0;
    for module in &cfg.target_modules {
        if !LORA_TARGETS.contains(&module.as_str()) {
            return Err(EngineError::config(
                "target_modules",
                format!("`{module}` is not a projection; use some of {LORA_TARGETS:?}"),
            ));
        }
        for layer in 0..layers {
            let (ka, kb) = (peft_key(layer, module, "A"), peft_key(layer, module, "B"));
            let (Some(a), Some(b)) = (weights.get(&ka), weights.get(&kb)) else {
                return Err(EngineError::weights(
                    source,
                    format!("missing adapter tensor `{ka}` or `{kb}`"),
                ));
            };
            let lin = model
                .linear_mut(layer, module)
                .expect("module name checked above");
            let (out, inp) = lin.weight.dims2()?;
            if a.dims() != [cfg.r, inp] || b.dims() != [out, cfg.r] {
                return Err(EngineError::weights(
                    source,
                    format!(
                        "adapter `{ka}`/`{kb}` shapes {:?}/{:?} do not fit [{}, {inp}]/[{out}, {}]",
                        a.dims(),
                        b.dims(),
                        cfg.r,
                        cfg.r
                    ),
                ));
            }
            lin.lora = Some(Lora {
                a: a.clone(),
                b: b.clone(),
                scale: cfg.scale(),
                dropout: cfg.lora_dropout as f32,
            });
            attached += 1;
        }
    }
    if attached == 0 {
        return Err(EngineError::weights(source, "adapter targets no module"));
    }
    Ok(())
}

/// Folds every attached adapter into its base weight (`W += scale * B A`) for fast inference.
pub(crate) fn merge_adapters(model: &mut Model) -> Result<()> {
    for layer in 0..model.config().num_layers {
        for module in LORA_TARGETS {
            let lin = model.linear_mut(layer, module).expect("known module");
            if let Some(l) = lin.lora.take() {
                lin.weight = (&lin.weight + (l.b.matmul(&l.a)? * l.scale)?)?;
            }
        }
    }
    Ok(())
}

/// Loads a base model and, optionally, a PEFT adapter merged into it.
pub fn load_model_with_adapter(dir: &Path, adapter: Option<&Path>) -> Result<Model> {
    let mut model = load_model(dir)?;
    if let Some(adir) = adapter {
        let (acfg, aw) = read_adapter(adir)?;
        attach_adapter(
            &mut model,
            &acfg,
            &aw,
            &adir.join("adapter_model.safetensors"),
        )?;
        merge_adapters(&mut model)?;
    }
    Ok(model)
}

/// fp32 logits of `model_dir` (with an optional PEFT adapter) for `input_ids`, one row per position.
pub fn logits_with_adapter(
    model_dir: &Path,
    adapter: Option<&Path>,
    input_ids: &[u32],
) -> Result<Vec<Vec<f32>>> {
    if input_ids.is_empty() {
        return Err(EngineError::config(
            "input_ids",
            "must hold at least one token",
        ));
    }
    let model = load_model_with_adapter(model_dir, adapter)?;
    let vocab = model.config().vocab_size;
    if let Some(bad) = input_ids.iter().find(|&&i| i as usize >= vocab) {
        return Err(EngineError::config(
            "input_ids",
            format!("token id {bad} is outside the vocabulary of {vocab}"),
        ));
    }
    let ids = Tensor::new(input_ids, &Device::Cpu)?.unsqueeze(0)?;
    let out = model.forward(&ids, None, None)?;
    Ok(out.to_vec2::<f32>()?)
}

/// fp32 logits of the Hugging Face model in `model_dir` for `input_ids`, one row per position.
///
/// The converter's tests compare these with Megatron's reference logits.
pub fn logits(model_dir: &Path, input_ids: &[u32]) -> Result<Vec<Vec<f32>>> {
    logits_with_adapter(model_dir, None, input_ids)
}

/// Absolute form of `p` for configs that other tools read later.
pub(crate) fn absolute(p: &Path) -> PathBuf {
    std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf())
}
