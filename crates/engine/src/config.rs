//! Model shape (`ModelConfig`), read from and written as a Hugging Face `config.json`.

use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::error::{EngineError, Result};

/// Which Hugging Face architecture a checkpoint declares; decides bias layout and `config.json`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Architecture {
    /// `LlamaForCausalLM` (also used for Mistral-style checkpoints without sliding window).
    Llama,
    /// `Qwen2ForCausalLM`: Llama plus biases on the q/k/v projections.
    Qwen2,
}

/// The decoder's shape: everything the forward pass needs to know besides the weights.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ModelConfig {
    /// Architecture family (`llama` or `qwen2`).
    #[serde(default = "default_arch")]
    pub architecture: Architecture,
    /// Vocabulary size (rows of the embedding matrix).
    pub vocab_size: usize,
    /// Width of the residual stream.
    pub hidden_size: usize,
    /// Width of the SwiGLU MLP.
    pub intermediate_size: usize,
    /// Number of decoder layers.
    pub num_layers: usize,
    /// Number of query heads.
    pub num_heads: usize,
    /// Number of key/value heads (grouped-query attention when smaller than `num_heads`).
    pub num_kv_heads: usize,
    /// Per-head width; defaults to `hidden_size / num_heads`.
    #[serde(default)]
    pub head_dim: Option<usize>,
    /// RMSNorm epsilon.
    #[serde(default = "default_eps")]
    pub rms_norm_eps: f64,
    /// RoPE base frequency.
    #[serde(default = "default_theta")]
    pub rope_theta: f64,
    /// Longest sequence (context window) the model accepts.
    pub max_position_embeddings: usize,
    /// Whether `lm_head` shares the embedding matrix.
    #[serde(default)]
    pub tie_word_embeddings: bool,
    /// Biases on q/k/v (Qwen2 always has them; Llama's `attention_bias` also adds one on o_proj).
    #[serde(default)]
    pub attention_bias: bool,
    /// Weight-init standard deviation (`initializer_range`).
    #[serde(default = "default_init")]
    pub initializer_range: f64,
    /// Beginning-of-sequence token id, if the tokenizer has one.
    #[serde(default)]
    pub bos_token_id: Option<u32>,
    /// End-of-sequence token id (generation stops there).
    #[serde(default)]
    pub eos_token_id: Option<u32>,
}

fn default_arch() -> Architecture {
    Architecture::Llama
}
fn default_eps() -> f64 {
    1e-5
}
fn default_theta() -> f64 {
    10_000.0
}
fn default_init() -> f64 {
    0.02
}

impl ModelConfig {
    /// Per-head width.
    pub fn head_dim(&self) -> usize {
        self.head_dim
            .unwrap_or(self.hidden_size / self.num_heads.max(1))
    }

    /// Whether q/k/v projections carry a bias.
    pub fn qkv_bias(&self) -> bool {
        self.architecture == Architecture::Qwen2 || self.attention_bias
    }

    /// Whether o_proj carries a bias (Llama's `attention_bias` only).
    pub fn o_bias(&self) -> bool {
        self.architecture == Architecture::Llama && self.attention_bias
    }

    /// Checks that the shape is buildable, naming the offending field.
    pub fn validate(&self) -> Result<()> {
        let positive = [
            ("vocabSize", self.vocab_size),
            ("hiddenSize", self.hidden_size),
            ("intermediateSize", self.intermediate_size),
            ("numLayers", self.num_layers),
            ("numHeads", self.num_heads),
            ("numKvHeads", self.num_kv_heads),
            ("maxPositionEmbeddings", self.max_position_embeddings),
        ];
        for (field, value) in positive {
            if value == 0 {
                return Err(EngineError::config(field, "must be greater than 0"));
            }
        }
        if !self.num_heads.is_multiple_of(self.num_kv_heads) {
            return Err(EngineError::config(
                "numKvHeads",
                format!(
                    "{} query heads cannot be grouped over {} key/value heads; use a divisor",
                    self.num_heads, self.num_kv_heads
                ),
            ));
        }
        if !self.head_dim().is_multiple_of(2) || self.head_dim() == 0 {
            return Err(EngineError::config(
                "headDim",
                format!(
                    "rotary embeddings need an even head_dim, got {}",
                    self.head_dim()
                ),
            ));
        }
        if self.rms_norm_eps <= 0.0 || self.rope_theta <= 0.0 {
            return Err(EngineError::config(
                "rmsNormEps/ropeTheta",
                "must be positive",
            ));
        }
        Ok(())
    }

    /// Number of parameters of the full model.
    pub fn num_parameters(&self) -> usize {
        let (h, hd) = (self.hidden_size, self.head_dim());
        let q = self.num_heads * hd;
        let kv = self.num_kv_heads * hd;
        let mut attn = h * q + 2 * h * kv + q * h;
        if self.qkv_bias() {
            attn += q + 2 * kv;
        }
        if self.o_bias() {
            attn += h;
        }
        let mlp = 3 * h * self.intermediate_size;
        let layer = attn + mlp + 2 * h;
        let embed = self.vocab_size * h;
        let head = if self.tie_word_embeddings { 0 } else { embed };
        embed + head + self.num_layers * layer + h
    }

    /// The Hugging Face `config.json` describing this model (fp32 weights).
    pub fn to_hf_json(&self) -> Value {
        let (arch, model_type) = match self.architecture {
            Architecture::Llama => ("LlamaForCausalLM", "llama"),
            Architecture::Qwen2 => ("Qwen2ForCausalLM", "qwen2"),
        };
        let mut v = json!({
            "architectures": [arch],
            "model_type": model_type,
            "vocab_size": self.vocab_size,
            "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size,
            "num_hidden_layers": self.num_layers,
            "num_attention_heads": self.num_heads,
            "num_key_value_heads": self.num_kv_heads,
            "head_dim": self.head_dim(),
            "rms_norm_eps": self.rms_norm_eps,
            "rope_theta": self.rope_theta,
            "max_position_embeddings": self.max_position_embeddings,
            "tie_word_embeddings": self.tie_word_embeddings,
            "hidden_act": "silu",
            "initializer_range": self.initializer_range,
            "torch_dtype": "float32",
            "use_cache": true,
        });
        let obj = v.as_object_mut().expect("json object literal");
        match self.architecture {
            Architecture::Llama => {
                obj.insert("attention_bias".into(), json!(self.attention_bias));
                obj.insert("mlp_bias".into(), json!(false));
            }
            Architecture::Qwen2 => {
                obj.insert("use_sliding_window".into(), json!(false));
                obj.insert("sliding_window".into(), Value::Null);
                obj.insert("max_window_layers".into(), json!(self.num_layers));
            }
        }
        if let Some(id) = self.bos_token_id {
            obj.insert("bos_token_id".into(), json!(id));
        }
        if let Some(id) = self.eos_token_id {
            obj.insert("eos_token_id".into(), json!(id));
        }
        v
    }

    /// Reads a Hugging Face `config.json` (Llama, Qwen2 or Mistral without sliding window).
    pub fn from_hf_file(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|e| EngineError::io(path, e))?;
        let v: Value = serde_json::from_str(&text).map_err(|e| EngineError::Json {
            path: path.display().to_string(),
            message: e.to_string(),
        })?;
        Self::from_hf_json(&v).map_err(|e| match e {
            EngineError::Config { field, message } => EngineError::Config {
                field: format!("{}: {field}", path.display()),
                message,
            },
            other => other,
        })
    }

    /// Interprets a parsed Hugging Face config.
    pub fn from_hf_json(v: &Value) -> Result<Self> {
        let model_type = v
            .get("model_type")
            .and_then(Value::as_str)
            .unwrap_or("llama");
        let architecture = match model_type {
            "llama" | "mistral" => Architecture::Llama,
            "qwen2" => Architecture::Qwen2,
            other => {
                return Err(EngineError::config(
                    "model_type",
                    format!(
                        "`{other}` is not supported; the built-in engine runs llama, mistral and qwen2"
                    ),
                ));
            }
        };
        let usize_field = |name: &str| -> Result<usize> {
            v.get(name)
                .and_then(Value::as_u64)
                .map(|x| x as usize)
                .ok_or_else(|| EngineError::config(name, "missing or not a non-negative integer"))
        };
        let opt_usize = |name: &str| v.get(name).and_then(Value::as_u64).map(|x| x as usize);
        let f64_or = |name: &str, d: f64| v.get(name).and_then(Value::as_f64).unwrap_or(d);
        let bool_or = |name: &str, d: bool| v.get(name).and_then(Value::as_bool).unwrap_or(d);
        if let Some(scaling) = v.get("rope_scaling")
            && !scaling.is_null()
        {
            return Err(EngineError::config(
                "rope_scaling",
                "scaled RoPE is not supported by the built-in engine; remove it or use another engine",
            ));
        }
        let num_heads = usize_field("num_attention_heads")?;
        let first_id = |name: &str| -> Option<u32> {
            match v.get(name) {
                Some(Value::Number(n)) => n.as_u64().map(|x| x as u32),
                Some(Value::Array(a)) => a.first().and_then(Value::as_u64).map(|x| x as u32),
                _ => None,
            }
        };
        let cfg = Self {
            architecture,
            vocab_size: usize_field("vocab_size")?,
            hidden_size: usize_field("hidden_size")?,
            intermediate_size: usize_field("intermediate_size")?,
            num_layers: usize_field("num_hidden_layers")?,
            num_heads,
            num_kv_heads: opt_usize("num_key_value_heads").unwrap_or(num_heads),
            head_dim: opt_usize("head_dim"),
            rms_norm_eps: f64_or("rms_norm_eps", 1e-6),
            rope_theta: f64_or("rope_theta", 10_000.0),
            max_position_embeddings: opt_usize("max_position_embeddings").unwrap_or(2048),
            tie_word_embeddings: bool_or("tie_word_embeddings", false),
            attention_bias: architecture == Architecture::Llama && bool_or("attention_bias", false),
            initializer_range: f64_or("initializer_range", 0.02),
            bos_token_id: first_id("bos_token_id"),
            eos_token_id: first_id("eos_token_id"),
        };
        cfg.validate()?;
        Ok(cfg)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixtures() -> std::path::PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/fixtures")
    }

    #[test]
    fn reads_every_megatron_fixture_config_and_round_trips() {
        let dir = fixtures().join("megatron");
        let mut seen = 0;
        for entry in std::fs::read_dir(&dir).expect("fixtures/megatron exists") {
            let path = entry.unwrap().path().join("expected_config.json");
            if !path.exists() {
                continue;
            }
            let cfg = ModelConfig::from_hf_file(&path).unwrap();
            assert_eq!(cfg.head_dim(), 16);
            let again = ModelConfig::from_hf_json(&cfg.to_hf_json()).unwrap();
            assert_eq!(again, cfg);
            if cfg.architecture == Architecture::Qwen2 {
                assert!(cfg.qkv_bias() && !cfg.o_bias());
                assert_eq!(cfg.rope_theta, 1e6);
                assert_eq!(cfg.rms_norm_eps, 1e-6);
            }
            seen += 1;
        }
        assert_eq!(seen, 4);
    }

    #[test]
    fn rejects_bad_grouping_naming_the_field() {
        let v = json!({"model_type":"llama","vocab_size":10,"hidden_size":8,"intermediate_size":8,
            "num_hidden_layers":1,"num_attention_heads":4,"num_key_value_heads":3});
        let err = ModelConfig::from_hf_json(&v).unwrap_err().to_string();
        assert!(err.contains("numKvHeads"), "{err}");
        let v = json!({"model_type":"gpt2"});
        let err = ModelConfig::from_hf_json(&v).unwrap_err().to_string();
        assert!(err.contains("model_type"), "{err}");
    }
}
