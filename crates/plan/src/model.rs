//! Model shapes read from a Hugging Face `config.json`, exact parameter counts and FLOPs per token.
//!
//! Parameter counts follow the module structure `transformers` builds for each architecture
//! (biases, norms, tied head counted once), so they equal `model.num_parameters()`.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::error::{PlanError, Result};

/// Architecture families the planner knows how to count and size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Arch {
    /// `llama` (Llama 2/3.x).
    Llama,
    /// `mistral`.
    Mistral,
    /// `qwen2` (Qwen2, Qwen2.5): QKV bias.
    Qwen2,
    /// `qwen3`: per-head q/k RMSNorm, no bias.
    Qwen3,
    /// `gemma` (Gemma 1): GeGLU, tied head.
    Gemma,
    /// `gpt2`: LayerNorm, learned positions, GELU MLP, biases everywhere.
    Gpt2,
    /// `mixtral`: sparse MoE MLP.
    Mixtral,
    /// `qwen2_moe`: MoE plus a gated shared expert.
    Qwen2Moe,
    /// `qwen3_moe`: MoE with q/k norm.
    Qwen3Moe,
}

impl Arch {
    /// Supported `model_type` strings, for error messages.
    pub const SUPPORTED: &'static str =
        "llama, mistral, qwen2, qwen3, gemma, gpt2, mixtral, qwen2_moe, qwen3_moe";

    fn from_model_type(t: &str) -> Option<Arch> {
        Some(match t {
            "llama" => Arch::Llama,
            "mistral" => Arch::Mistral,
            "qwen2" => Arch::Qwen2,
            "qwen3" => Arch::Qwen3,
            "gemma" => Arch::Gemma,
            "gpt2" => Arch::Gpt2,
            "mixtral" => Arch::Mixtral,
            "qwen2_moe" => Arch::Qwen2Moe,
            "qwen3_moe" => Arch::Qwen3Moe,
            _ => return None,
        })
    }

    fn from_architectures(a: &str) -> Option<Arch> {
        Some(match a {
            "LlamaForCausalLM" => Arch::Llama,
            "MistralForCausalLM" => Arch::Mistral,
            "Qwen2ForCausalLM" => Arch::Qwen2,
            "Qwen3ForCausalLM" => Arch::Qwen3,
            "GemmaForCausalLM" => Arch::Gemma,
            "GPT2LMHeadModel" => Arch::Gpt2,
            "MixtralForCausalLM" => Arch::Mixtral,
            "Qwen2MoeForCausalLM" => Arch::Qwen2Moe,
            "Qwen3MoeForCausalLM" => Arch::Qwen3Moe,
            _ => return None,
        })
    }
}

/// The MLP block's form.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum MlpKind {
    /// gate/up/down with SiLU or GELU gate (SwiGLU, GeGLU).
    Gated,
    /// fc → GELU → proj (GPT-2).
    Plain,
}

/// Mixture-of-experts MLP parameters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MoeShape {
    /// Routed experts per MoE layer.
    pub experts: u64,
    /// Experts each token is routed to.
    pub top_k: u64,
    /// Intermediate size of one routed expert.
    pub expert_intermediate: u64,
    /// Intermediate size of the always-on shared expert (Qwen2-MoE), if any.
    pub shared_intermediate: Option<u64>,
    /// How many of the layers are MoE layers (the rest use the dense MLP).
    pub moe_layers: u64,
}

/// Everything the planner needs to know about a decoder-only model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ModelShape {
    /// Architecture family.
    pub arch: Arch,
    /// hidden_size (n_embd).
    pub hidden: u64,
    /// num_hidden_layers (n_layer).
    pub layers: u64,
    /// num_attention_heads.
    pub heads: u64,
    /// num_key_value_heads (GQA groups).
    pub kv_heads: u64,
    /// head_dim.
    pub head_dim: u64,
    /// Dense MLP intermediate size.
    pub intermediate: u64,
    /// vocab_size.
    pub vocab: u64,
    /// Output head shares the embedding matrix.
    pub tied_embeddings: bool,
    /// max_position_embeddings (n_positions).
    pub max_positions: u64,
    /// Learned absolute position embeddings (GPT-2), rows = max_positions.
    pub learned_positions: bool,
    /// Bias on q/k/v projections.
    pub qkv_bias: bool,
    /// Bias on the attention output projection.
    pub o_bias: bool,
    /// Bias on MLP projections.
    pub mlp_bias: bool,
    /// Per-head RMSNorm on q and k (Qwen3).
    pub qk_norm: bool,
    /// LayerNorm with bias (GPT-2) instead of RMSNorm.
    pub layer_norm: bool,
    /// MLP form.
    pub mlp: MlpKind,
    /// MoE block, for sparse models.
    pub moe: Option<MoeShape>,
    /// RoPE base (rope_theta, or rope_parameters.rope_theta), 10000 when absent.
    pub rope_theta: f64,
    /// Norm epsilon (rms_norm_eps / layer_norm_epsilon).
    pub norm_eps: f64,
}

/// Parameter counts, split the way memory is accounted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub struct ParamCounts {
    /// Total, tied head counted once: equals transformers' `num_parameters()`.
    pub total: u64,
    /// Token embedding matrix (vocab × hidden).
    pub embedding: u64,
    /// Learned position embeddings (GPT-2), else 0.
    pub positions: u64,
    /// Untied output head (0 when tied).
    pub lm_head: u64,
    /// One decoder layer (dense layer for MoE models without dense layers: one MoE layer).
    pub per_layer: u64,
    /// All decoder layers.
    pub layers: u64,
    /// Weights inside linear projections of all layers (quantisable, LoRA targets).
    pub linear: u64,
    /// Parameters a token actually uses (MoE: top-k experts only).
    pub active: u64,
}

fn get<'a>(obj: &'a Map<String, Value>, keys: &[&str]) -> Option<&'a Value> {
    keys.iter()
        .find_map(|k| obj.get(*k).filter(|v| !v.is_null()))
}

fn req_u64(obj: &Map<String, Value>, file: &str, keys: &[&str], hint: &str) -> Result<u64> {
    match get(obj, keys).and_then(Value::as_u64) {
        Some(v) if v > 0 => Ok(v),
        _ => Err(PlanError::MissingField {
            file: file.to_string(),
            field: keys[0].to_string(),
            hint: hint.to_string(),
        }),
    }
}

fn opt_u64(obj: &Map<String, Value>, keys: &[&str]) -> Option<u64> {
    get(obj, keys).and_then(Value::as_u64)
}

fn opt_bool(obj: &Map<String, Value>, key: &str, default: bool) -> bool {
    obj.get(key).and_then(Value::as_bool).unwrap_or(default)
}

impl ModelShape {
    /// Reads a `config.json` text; `file` names it in errors (a path or catalogue id).
    pub fn from_config_json(text: &str, file: &str) -> Result<ModelShape> {
        let value: Value = serde_json::from_str(text).map_err(|e| PlanError::ConfigSyntax {
            file: file.to_string(),
            reason: e.to_string(),
        })?;
        let obj = value.as_object().ok_or_else(|| PlanError::ConfigSyntax {
            file: file.to_string(),
            reason: "top level is not a JSON object".to_string(),
        })?;
        Self::from_config(obj, file)
    }

    /// Reads an already-parsed `config.json` object.
    pub fn from_config(obj: &Map<String, Value>, file: &str) -> Result<ModelShape> {
        let model_type = obj.get("model_type").and_then(Value::as_str);
        let arch_name = obj
            .get("architectures")
            .and_then(Value::as_array)
            .and_then(|a| a.first())
            .and_then(Value::as_str);
        let arch = match (model_type, arch_name) {
            (Some(t), _) => Arch::from_model_type(t),
            (None, Some(a)) => Arch::from_architectures(a),
            (None, None) => {
                return Err(PlanError::MissingField {
                    file: file.to_string(),
                    field: "model_type".to_string(),
                    hint: "the architecture family, e.g. \"llama\" or \"qwen2\"".to_string(),
                });
            }
        }
        .ok_or_else(|| PlanError::UnknownArchitecture {
            file: file.to_string(),
            model_type: model_type.or(arch_name).unwrap_or_default().to_string(),
            supported: Arch::SUPPORTED.to_string(),
        })?;

        let f = file;
        let hidden = req_u64(obj, f, &["hidden_size", "n_embd"], "model width")?;
        let layers = req_u64(
            obj,
            f,
            &["num_hidden_layers", "n_layer"],
            "number of decoder layers",
        )?;
        let heads = req_u64(
            obj,
            f,
            &["num_attention_heads", "n_head"],
            "number of attention heads",
        )?;
        let vocab = req_u64(obj, f, &["vocab_size"], "tokenizer vocabulary size")?;
        let kv_heads = opt_u64(obj, &["num_key_value_heads"]).unwrap_or(heads);
        if kv_heads == 0 || heads % kv_heads != 0 {
            return Err(PlanError::InconsistentConfig {
                file: f.to_string(),
                field: "num_key_value_heads".to_string(),
                reason: format!("{kv_heads} does not divide num_attention_heads = {heads}"),
            });
        }
        let head_dim = match opt_u64(obj, &["head_dim"]) {
            Some(d) if d > 0 => d,
            _ => {
                if hidden % heads != 0 {
                    return Err(PlanError::InconsistentConfig {
                        file: f.to_string(),
                        field: "head_dim".to_string(),
                        reason: format!(
                            "absent, and hidden_size {hidden} is not divisible by num_attention_heads {heads}"
                        ),
                    });
                }
                hidden / heads
            }
        };
        let max_positions =
            opt_u64(obj, &["max_position_embeddings", "n_positions", "n_ctx"]).unwrap_or(2048);
        let tied_default = matches!(arch, Arch::Gemma | Arch::Gpt2);
        let tied_embeddings = opt_bool(obj, "tie_word_embeddings", tied_default);

        let mut shape = ModelShape {
            arch,
            hidden,
            layers,
            heads,
            kv_heads,
            head_dim,
            intermediate: 0,
            vocab,
            tied_embeddings,
            max_positions,
            learned_positions: false,
            qkv_bias: false,
            o_bias: false,
            mlp_bias: false,
            qk_norm: false,
            layer_norm: false,
            mlp: MlpKind::Gated,
            moe: None,
            rope_theta: obj
                .get("rope_theta")
                .and_then(Value::as_f64)
                .or_else(|| {
                    obj.get("rope_parameters")
                        .and_then(|r| r.get("rope_theta"))
                        .and_then(Value::as_f64)
                })
                .unwrap_or(10000.0),
            norm_eps: get(
                obj,
                &["rms_norm_eps", "layer_norm_epsilon", "layer_norm_eps"],
            )
            .and_then(Value::as_f64)
            .unwrap_or(1e-6),
        };
        match arch {
            Arch::Gpt2 => {
                shape.intermediate = opt_u64(obj, &["n_inner"]).unwrap_or(4 * hidden);
                shape.learned_positions = true;
                shape.qkv_bias = true;
                shape.o_bias = true;
                shape.mlp_bias = true;
                shape.layer_norm = true;
                shape.mlp = MlpKind::Plain;
                if hidden % heads != 0 {
                    return Err(PlanError::InconsistentConfig {
                        file: f.to_string(),
                        field: "n_head".to_string(),
                        reason: format!("{heads} does not divide n_embd = {hidden}"),
                    });
                }
            }
            Arch::Llama | Arch::Mistral | Arch::Gemma | Arch::Qwen2 | Arch::Qwen3 => {
                shape.intermediate =
                    req_u64(obj, f, &["intermediate_size"], "MLP intermediate size")?;
                let attn_bias = opt_bool(obj, "attention_bias", false);
                match arch {
                    Arch::Llama => {
                        shape.qkv_bias = attn_bias;
                        shape.o_bias = attn_bias;
                        shape.mlp_bias = opt_bool(obj, "mlp_bias", false);
                    }
                    Arch::Qwen2 => shape.qkv_bias = true,
                    Arch::Qwen3 => {
                        shape.qkv_bias = attn_bias;
                        shape.o_bias = attn_bias;
                        shape.qk_norm = true;
                    }
                    Arch::Gemma => {
                        shape.qkv_bias = attn_bias;
                        shape.o_bias = attn_bias;
                    }
                    _ => {}
                }
            }
            Arch::Mixtral | Arch::Qwen2Moe | Arch::Qwen3Moe => {
                let experts = req_u64(
                    obj,
                    f,
                    &["num_local_experts", "num_experts"],
                    "number of routed experts",
                )?;
                let top_k = req_u64(
                    obj,
                    f,
                    &["num_experts_per_tok"],
                    "experts each token is routed to",
                )?;
                shape.intermediate =
                    req_u64(obj, f, &["intermediate_size"], "MLP intermediate size")?;
                let (expert_intermediate, shared_intermediate, moe_layers) =
                    if arch == Arch::Mixtral {
                        (shape.intermediate, None, layers)
                    } else {
                        let ei = req_u64(
                            obj,
                            f,
                            &["moe_intermediate_size"],
                            "intermediate size of one expert",
                        )?;
                        let shared = if arch == Arch::Qwen2Moe {
                            Some(req_u64(
                                obj,
                                f,
                                &["shared_expert_intermediate_size"],
                                "intermediate size of the shared expert",
                            )?)
                        } else {
                            None
                        };
                        let step = opt_u64(obj, &["decoder_sparse_step"]).unwrap_or(1).max(1);
                        let dense_only: Vec<u64> = obj
                            .get("mlp_only_layers")
                            .and_then(Value::as_array)
                            .map(|a| a.iter().filter_map(Value::as_u64).collect())
                            .unwrap_or_default();
                        let moe_layers = (0..layers)
                            .filter(|i| !dense_only.contains(i) && (i + 1) % step == 0)
                            .count() as u64;
                        (ei, shared, moe_layers)
                    };
                if arch == Arch::Qwen2Moe {
                    shape.qkv_bias = true;
                }
                if arch == Arch::Qwen3Moe {
                    shape.qk_norm = true;
                    shape.qkv_bias = opt_bool(obj, "attention_bias", false);
                    shape.o_bias = shape.qkv_bias;
                }
                if top_k > experts {
                    return Err(PlanError::InconsistentConfig {
                        file: f.to_string(),
                        field: "num_experts_per_tok".to_string(),
                        reason: format!("{top_k} exceeds the number of experts {experts}"),
                    });
                }
                shape.moe = Some(MoeShape {
                    experts,
                    top_k,
                    expert_intermediate,
                    shared_intermediate,
                    moe_layers,
                });
            }
        }
        shape.check_bounds(file)?;
        Ok(shape)
    }

    /// Rejects sizes beyond any real model, so every later product fits in 64 bits.
    fn check_bounds(&self, file: &str) -> Result<()> {
        let mut limits: Vec<(&str, u64, u64)> = vec![
            ("hidden_size", self.hidden, 1 << 16),
            ("num_hidden_layers", self.layers, 1 << 10),
            ("num_attention_heads", self.heads, 1 << 10),
            ("head_dim", self.head_dim, 1 << 10),
            ("intermediate_size", self.intermediate, 1 << 20),
            ("vocab_size", self.vocab, 1 << 22),
            ("max_position_embeddings", self.max_positions, 1 << 24),
        ];
        if let Some(m) = &self.moe {
            limits.push(("num_experts", m.experts, 1 << 10));
            limits.push(("moe_intermediate_size", m.expert_intermediate, 1 << 20));
            limits.push((
                "shared_expert_intermediate_size",
                m.shared_intermediate.unwrap_or(0),
                1 << 20,
            ));
        }
        for (field, value, max) in limits {
            if value > max {
                return Err(PlanError::InconsistentConfig {
                    file: file.to_string(),
                    field: field.to_string(),
                    reason: format!("{value} exceeds {max}, larger than any supported model"),
                });
            }
        }
        Ok(())
    }

    /// Width of the query projection output (heads × head_dim).
    pub fn q_dim(&self) -> u64 {
        self.heads * self.head_dim
    }

    /// Width of each of the key and value projection outputs.
    pub fn kv_dim(&self) -> u64 {
        self.kv_heads * self.head_dim
    }

    fn norm_params(&self) -> u64 {
        if self.layer_norm {
            2 * self.hidden
        } else {
            self.hidden
        }
    }

    /// Attention block: (linear weights, other params).
    fn attention_params(&self) -> (u64, u64) {
        let h = self.hidden;
        let linear = h * self.q_dim() + 2 * h * self.kv_dim() + self.q_dim() * h;
        let mut other = 0;
        if self.qkv_bias {
            other += self.q_dim() + 2 * self.kv_dim();
        }
        if self.o_bias {
            other += h;
        }
        if self.qk_norm {
            other += 2 * self.head_dim;
        }
        (linear, other)
    }

    /// Dense MLP of width `inter`: (linear weights, biases).
    fn mlp_params(&self, inter: u64) -> (u64, u64) {
        let h = self.hidden;
        match self.mlp {
            MlpKind::Gated => (3 * h * inter, if self.mlp_bias { 2 * inter + h } else { 0 }),
            MlpKind::Plain => (2 * h * inter, if self.mlp_bias { inter + h } else { 0 }),
        }
    }

    /// Exact parameter counts.
    pub fn params(&self) -> ParamCounts {
        let h = self.hidden;
        let (attn_lin, attn_other) = self.attention_params();
        let norms = 2 * self.norm_params();
        let (dense_lin, dense_other) = self.mlp_params(self.intermediate);
        let embedding = self.vocab * h;
        let positions = if self.learned_positions {
            self.max_positions * h
        } else {
            0
        };
        let lm_head = if self.tied_embeddings {
            0
        } else {
            self.vocab * h
        };
        let final_norm = self.norm_params();

        let dense_layer = attn_lin + attn_other + norms + dense_lin + dense_other;
        let (layers, linear, active_layers, per_layer) = match &self.moe {
            None => (
                self.layers * dense_layer,
                self.layers * (attn_lin + dense_lin),
                self.layers * dense_layer,
                dense_layer,
            ),
            Some(m) => {
                let (e_lin, _) = self.mlp_params(m.expert_intermediate);
                let router = h * m.experts;
                let (shared_lin, shared_gate) = match m.shared_intermediate {
                    Some(si) => (self.mlp_params(si).0, h),
                    None => (0, 0),
                };
                let moe_layer = attn_lin
                    + attn_other
                    + norms
                    + router
                    + m.experts * e_lin
                    + shared_lin
                    + shared_gate;
                let moe_active = attn_lin
                    + attn_other
                    + norms
                    + router
                    + m.top_k * e_lin
                    + shared_lin
                    + shared_gate;
                let dense_layers = self.layers - m.moe_layers;
                (
                    m.moe_layers * moe_layer + dense_layers * dense_layer,
                    m.moe_layers * (attn_lin + m.experts * e_lin + shared_lin)
                        + dense_layers * (attn_lin + dense_lin),
                    m.moe_layers * moe_active + dense_layers * dense_layer,
                    if m.moe_layers > 0 {
                        moe_layer
                    } else {
                        dense_layer
                    },
                )
            }
        };
        let outer = embedding + positions + lm_head + final_norm;
        ParamCounts {
            total: outer + layers,
            embedding,
            positions,
            lm_head,
            per_layer,
            layers,
            linear,
            active: outer + active_layers,
        }
    }

    /// Trainable parameters of LoRA rank `r` on every attention and MLP projection
    /// (`q,k,v,o,gate,up,down`, the experts included; GPT-2: `c_attn,c_proj,c_fc`).
    pub fn lora_params(&self, r: u64) -> u64 {
        let h = self.hidden;
        let attn = if self.mlp == MlpKind::Plain {
            // c_attn (h → 3h) and c_proj (h → h).
            r * (h + 3 * h) + r * (h + h)
        } else {
            r * (h + self.q_dim()) + 2 * r * (h + self.kv_dim()) + r * (self.q_dim() + h)
        };
        let mlp = |inter: u64| match self.mlp {
            MlpKind::Gated => 3 * r * (h + inter),
            MlpKind::Plain => 2 * r * (h + inter),
        };
        match &self.moe {
            None => self.layers * (attn + mlp(self.intermediate)),
            Some(m) => {
                let moe_mlp = m.experts * mlp(m.expert_intermediate)
                    + m.shared_intermediate.map(mlp).unwrap_or(0);
                m.moe_layers * (attn + moe_mlp)
                    + (self.layers - m.moe_layers) * (attn + mlp(self.intermediate))
            }
        }
    }

    /// Training FLOPs per token at sequence length `seq`: 6 × active parameters that do matmuls
    /// (embedding lookup excluded, output head included) plus the causal attention term
    /// 6 × layers × seq × q_dim (QKᵀ and AV, forward ×1 and backward ×2, halved by the mask).
    pub fn train_flops_per_token(&self, seq: u64) -> f64 {
        let p = self.params();
        let matmul = p.active - p.embedding - p.positions + self.vocab * self.hidden;
        let matmul = if self.tied_embeddings {
            matmul
        } else {
            matmul - self.vocab * self.hidden
        };
        6.0 * matmul as f64 + 6.0 * (self.layers * seq * self.q_dim()) as f64
    }

    /// KV-cache bytes per token at `bytes` per element: 2 · layers · kv_heads · head_dim · bytes.
    pub fn kv_bytes_per_token(&self, bytes: u64) -> u64 {
        2 * self.layers * self.kv_dim() * bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str) -> String {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        std::fs::read_to_string(
            root.join("../shared/fixtures/planner/configs")
                .join(format!("{name}.json")),
        )
        .unwrap()
    }

    #[test]
    fn fixture_counts_equal_transformers() {
        // params_total and lora trainable counts from fixtures/planner/README.md (transformers 5.17).
        for (name, total, lora16) in [
            ("Qwen2.5-0.5B", 494_032_768u64, 8_798_208u64),
            ("Llama-3.2-1B", 1_235_814_400, 11_272_192),
            ("Qwen2.5-3B", 3_085_938_688, 29_933_568),
            ("Qwen2.5-7B", 7_615_616_512, 40_370_176),
        ] {
            let s = ModelShape::from_config_json(&fixture(name), name).unwrap();
            assert_eq!(s.params().total, total, "{name}");
            assert_eq!(s.lora_params(16), lora16, "{name}");
        }
    }

    #[test]
    fn missing_field_is_named() {
        let err = ModelShape::from_config_json(
            r#"{"model_type":"llama","hidden_size":64,"num_attention_heads":4,"vocab_size":10,"intermediate_size":128}"#,
            "cfg.json",
        )
        .unwrap_err();
        assert!(err.to_string().contains("`num_hidden_layers`"), "{err}");
        assert!(err.to_string().contains("cfg.json"), "{err}");
    }

    #[test]
    fn unknown_architecture_is_named() {
        let err = ModelShape::from_config_json(r#"{"model_type":"mamba"}"#, "m.json").unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains("`model_type`") && msg.contains("mamba"),
            "{msg}"
        );
    }

    #[test]
    fn bad_json_is_reported() {
        let err = ModelShape::from_config_json("{not json", "x.json").unwrap_err();
        assert!(matches!(err, PlanError::ConfigSyntax { .. }));
    }

    #[test]
    fn hostile_numbers_are_errors_not_panics() {
        let base: Value = serde_json::from_str(&fixture("Qwen2.5-7B")).unwrap();
        let fields = [
            "hidden_size",
            "num_hidden_layers",
            "num_attention_heads",
            "num_key_value_heads",
            "intermediate_size",
            "vocab_size",
            "max_position_embeddings",
            "head_dim",
        ];
        let values = [
            Value::from(0u64),
            Value::from(u64::MAX),
            Value::from(1u64 << 40),
            Value::from(-3i64),
            Value::from(2.5f64),
            Value::from("7"),
            Value::Null,
        ];
        for field in fields {
            for v in &values {
                let mut cfg = base.clone();
                cfg[field] = v.clone();
                let text = cfg.to_string();
                if let Ok(shape) = ModelShape::from_config_json(&text, "fuzz.json") {
                    // Whatever parses must count and size without overflow.
                    let _ = shape.params();
                    let _ = shape.lora_params(64);
                    let _ = shape.train_flops_per_token(1 << 20);
                }
            }
        }
        // Truncations of a real config never panic either.
        let text = fixture("Qwen2.5-0.5B");
        for cut in (0..text.len()).step_by(7) {
            let _ = ModelShape::from_config_json(&text[..cut], "cut.json");
        }
    }

    #[test]
    fn kv_heads_must_divide_heads() {
        let err = ModelShape::from_config_json(
            r#"{"model_type":"llama","hidden_size":64,"num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":3,"vocab_size":10,"intermediate_size":128}"#,
            "c.json",
        )
        .unwrap_err();
        assert!(err.to_string().contains("num_key_value_heads"), "{err}");
    }
}
