//! Megatron checkpoints: parameter names (Megatron-Core and the older
//! `language_model.encoder` spelling), `args` → [`ModelSpec`], the iteration tracker, and the
//! two on-disk formats ([`legacy`], [`dist`]). Both expose a [`CanonicalSource`].

pub mod dist;
pub mod legacy;
pub mod writer;

use std::ops::Range;
use std::path::{Path, PathBuf};

use crate::dtype::DType;
use crate::error::{CkptError, Result, io_err};
use crate::model::{Arch, LayerParam, ModelSpec, Param};
use crate::pickle::{Pickle, Value, as_f64, as_int, as_str};

/// Something that can produce rows of canonical parameters (a checkpoint being read).
pub trait CanonicalSource: Sync {
    /// The model the source holds.
    fn spec(&self) -> &ModelSpec;
    /// Fills `out` (exactly `rows.len() * spec.row_bytes(p)` bytes) with canonical rows of `p`.
    fn read_rows(&self, p: Param, rows: Range<usize>, out: &mut [u8]) -> Result<()>;
}

/// Parallel layout of a Megatron checkpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Parallel {
    /// Tensor-parallel size.
    pub tp: usize,
    /// Pipeline-parallel size.
    pub pp: usize,
    /// Virtual pipeline chunks per stage (1 without VPP).
    pub vpp: usize,
}

/// What a parameter name means, before layer numbering is made global.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameKind {
    /// A model-level parameter.
    Model(Param),
    /// A layer parameter with its index as written in the name.
    Layer(usize, LayerParam),
    /// Bookkeeping that carries no weights (`_extra_state`, rotary buffers).
    Skip,
}

/// Maps a layer-relative suffix (`self_attention.linear_qkv.weight`) to its parameter.
pub fn layer_suffix(s: &str) -> Option<LayerParam> {
    Some(match s {
        "input_layernorm.weight"
        | "self_attention.linear_qkv.layer_norm_weight"
        | "input_norm.weight" => LayerParam::InputNorm,
        "self_attention.linear_qkv.weight" | "self_attention.query_key_value.weight" => {
            LayerParam::Qkv
        }
        "self_attention.linear_qkv.bias" | "self_attention.query_key_value.bias" => {
            LayerParam::QkvBias
        }
        "self_attention.q_layernorm.weight" => LayerParam::QNorm,
        "self_attention.k_layernorm.weight" => LayerParam::KNorm,
        "self_attention.linear_proj.weight" | "self_attention.dense.weight" => LayerParam::Proj,
        "pre_mlp_layernorm.weight"
        | "mlp.linear_fc1.layer_norm_weight"
        | "post_attention_layernorm.weight"
        | "post_attention_norm.weight" => LayerParam::PreMlpNorm,
        "mlp.linear_fc1.weight" | "mlp.dense_h_to_4h.weight" => LayerParam::Fc1,
        "mlp.linear_fc2.weight" | "mlp.dense_4h_to_h.weight" => LayerParam::Fc2,
        _ => return None,
    })
}

/// Classifies a (flattened) state-dict key; `None` for names this crate does not know.
pub fn classify(name: &str) -> Option<NameKind> {
    if name.ends_with("_extra_state")
        || name.contains("._extra_state")
        || name.ends_with("rotary_pos_emb.inv_freq")
    {
        return Some(NameKind::Skip);
    }
    let name = name.strip_prefix("module.").unwrap_or(name);
    match name {
        "embedding.word_embeddings.weight" | "language_model.embedding.word_embeddings.weight" => {
            return Some(NameKind::Model(Param::Embedding));
        }
        "output_layer.weight"
        | "language_model.output_layer.weight"
        | "word_embeddings_for_head.weight" => {
            return Some(NameKind::Model(Param::Output));
        }
        "decoder.final_layernorm.weight"
        | "decoder.final_norm.weight"
        | "language_model.encoder.final_layernorm.weight"
        | "language_model.encoder.final_norm.weight" => {
            return Some(NameKind::Model(Param::FinalNorm));
        }
        _ => {}
    }
    let rest = name
        .strip_prefix("decoder.layers.")
        .or_else(|| name.strip_prefix("language_model.encoder.layers."))?;
    let (idx, suffix) = rest.split_once('.')?;
    let idx: usize = idx.parse().ok()?;
    layer_suffix(suffix).map(|lp| NameKind::Layer(idx, lp))
}

/// Reads `latest_checkpointed_iteration.txt` and returns the iteration folder it names.
pub fn resolve_iteration_dir(
    root: &Path,
    iteration: Option<u64>,
) -> Result<(PathBuf, Option<u64>)> {
    if let Some(it) = iteration {
        let d = root.join(format!("iter_{it:07}"));
        if !d.is_dir() {
            return Err(CkptError::Option {
                field: "iteration",
                reason: format!("{} does not exist", d.display()),
            });
        }
        return Ok((d, Some(it)));
    }
    let tracker = root.join("latest_checkpointed_iteration.txt");
    if tracker.is_file() {
        let t = std::fs::read_to_string(&tracker).map_err(io_err(&tracker))?;
        let t = t.trim();
        if t == "release" {
            return Ok((root.join("release"), None));
        }
        let it: u64 = t.parse().map_err(|_| {
            CkptError::format(
                &tracker,
                format!("`{t}` is neither an iteration number nor `release`"),
            )
        })?;
        return Ok((root.join(format!("iter_{it:07}")), Some(it)));
    }
    Ok((root.to_path_buf(), None))
}

fn arg<'a>(p: &'a Pickle, args: &Value, key: &str) -> Option<&'a Value> {
    p.attr(args, key)
        .or_else(|| p.get(args, key))
        .filter(|v| !matches!(v, Value::None))
}

fn arg_usize(p: &Pickle, args: &Value, key: &str) -> Option<usize> {
    arg(p, args, key)
        .and_then(as_int)
        .and_then(|i| usize::try_from(i).ok())
}

fn arg_bool(p: &Pickle, args: &Value, key: &str) -> Option<bool> {
    arg(p, args, key).and_then(as_int).map(|i| i != 0)
}

/// Sizes recorded in `args` about the parallel layout.
#[derive(Debug, Clone, Copy, Default)]
pub struct ArgsParallel {
    /// `tensor_model_parallel_size`.
    pub tp: Option<usize>,
    /// `pipeline_model_parallel_size`.
    pub pp: Option<usize>,
    /// `virtual_pipeline_model_parallel_size`.
    pub vpp: Option<usize>,
}

/// Reads the model hyper-parameters from a Megatron `args` Namespace (or dict).
/// `vocab_override` replaces `args.vocab_size` when the checkpoint lacks it.
pub fn spec_from_args(
    p: &Pickle,
    args: &Value,
    file: &Path,
    vocab_override: Option<usize>,
) -> Result<(ModelSpec, ArgsParallel)> {
    let need = |k: &str| {
        arg_usize(p, args, k).ok_or_else(|| {
            CkptError::format(file, format!("`args.{k}` is missing; the checkpoint's args Namespace must record the model size"))
        })
    };
    let num_layers = need("num_layers")?;
    let hidden = need("hidden_size")?;
    let heads = need("num_attention_heads")?;
    let ffn = arg_usize(p, args, "ffn_hidden_size").unwrap_or(4 * hidden);
    let gqa = arg_bool(p, args, "group_query_attention").unwrap_or(false);
    let groups = if gqa {
        arg_usize(p, args, "num_query_groups").unwrap_or(heads)
    } else {
        heads
    };
    let head_dim = arg_usize(p, args, "kv_channels").unwrap_or(hidden / heads.max(1));
    let padded = arg_usize(p, args, "padded_vocab_size");
    let vocab = vocab_override.or_else(|| arg_usize(p, args, "vocab_size")).or(padded).ok_or_else(|| {
        CkptError::format(file, "`args.vocab_size` and `args.padded_vocab_size` are missing; pass the true vocabulary size (--vocab-size)")
    })?;
    if let Some(sw) = arg_bool(p, args, "swiglu")
        && !sw
    {
        return Err(CkptError::format(
            file,
            "`args.swiglu` is false: only SwiGLU (Llama/Qwen-style) models are converted",
        ));
    }
    if let Some(n) = arg(p, args, "normalization").and_then(as_str)
        && n != "RMSNorm"
    {
        return Err(CkptError::format(
            file,
            format!("`args.normalization` is `{n}`: only RMSNorm models are converted"),
        ));
    }
    if let Some(n) = arg_usize(p, args, "num_experts")
        && n > 0
    {
        return Err(CkptError::format(
            file,
            format!(
                "`args.num_experts` is {n}: mixture-of-experts checkpoints are not supported yet"
            ),
        ));
    }
    let tied = !arg_bool(p, args, "untie_embeddings_and_output_weights").unwrap_or(false);
    let qkv_bias = arg_bool(p, args, "add_qkv_bias").unwrap_or(false)
        || arg_bool(p, args, "add_bias_linear").unwrap_or(false);
    let qk_norm = arg_bool(p, args, "qk_layernorm").unwrap_or(false);
    let arch = if qk_norm {
        Arch::Qwen3
    } else if qkv_bias {
        Arch::Qwen2
    } else {
        Arch::Llama
    };
    let rope_theta = arg(p, args, "rotary_base")
        .and_then(as_f64)
        .unwrap_or(10000.0);
    let norm_eps = arg(p, args, "norm_epsilon")
        .or_else(|| arg(p, args, "layernorm_epsilon"))
        .and_then(as_f64)
        .unwrap_or(1e-5);
    let max_position = arg_usize(p, args, "max_position_embeddings")
        .or_else(|| arg_usize(p, args, "seq_length"))
        .unwrap_or(4096);
    let dtype = if arg_bool(p, args, "bf16").unwrap_or(false) {
        DType::BF16
    } else if arg_bool(p, args, "fp16").unwrap_or(false) {
        DType::F16
    } else {
        DType::F32
    };
    let spec = ModelSpec {
        arch,
        num_layers,
        hidden,
        ffn,
        heads,
        groups,
        head_dim,
        vocab,
        padded_vocab: padded.unwrap_or(vocab),
        tied,
        qkv_bias,
        qk_norm,
        rope_theta,
        norm_eps,
        max_position,
        dtype,
        initializer_range: arg(p, args, "init_method_std")
            .and_then(as_f64)
            .unwrap_or(0.02),
    };
    spec.check_bounds()
        .map_err(|r| CkptError::format(file, format!("args: {r}")))?;
    let par = ArgsParallel {
        tp: arg_usize(p, args, "tensor_model_parallel_size"),
        pp: arg_usize(p, args, "pipeline_model_parallel_size"),
        vpp: arg_usize(p, args, "virtual_pipeline_model_parallel_size"),
    };
    Ok((spec, par))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies_core_and_older_names() {
        assert_eq!(
            classify("decoder.layers.3.mlp.linear_fc1.weight"),
            Some(NameKind::Layer(3, LayerParam::Fc1))
        );
        assert_eq!(
            classify("language_model.encoder.layers.0.self_attention.query_key_value.weight"),
            Some(NameKind::Layer(0, LayerParam::Qkv))
        );
        assert_eq!(
            classify("language_model.encoder.final_norm.weight"),
            Some(NameKind::Model(Param::FinalNorm))
        );
        assert_eq!(
            classify("decoder.layers.0.self_attention.linear_qkv._extra_state"),
            Some(NameKind::Skip)
        );
        assert_eq!(
            classify("decoder.layers.0.mlp.experts.linear_fc1.weight0"),
            None
        );
    }
}
