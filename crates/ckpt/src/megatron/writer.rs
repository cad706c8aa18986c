//! Writes a Megatron legacy checkpoint at any (TP, PP) from a [`CanonicalSource`]: one
//! `torch.save` file per rank with Megatron-Core parameter names, `args`, `iteration` and
//! `checkpoint_version`, the vocabulary padded with zero rows. One rank file and one tensor
//! shard are in memory at a time.

use std::path::Path;

use super::{CanonicalSource, Parallel};
use crate::error::{CkptError, Result, io_err};
use crate::hf::Progress;
use crate::model::{LayerParam, ModelSpec, Param, Split};
use crate::torch_write::{PickleWriter, TorchSaveWriter};

/// Options for writing a Megatron legacy checkpoint.
#[derive(Debug, Clone)]
pub struct MegatronWriteOptions {
    /// Tensor-parallel size.
    pub tp: usize,
    /// Pipeline-parallel size.
    pub pp: usize,
    /// Virtual pipeline chunks per stage (1: none; >1 writes `model0..model{V-1}`).
    pub vpp: usize,
    /// Iteration folder to write (`None`: `release`, as Megatron's own converters do).
    pub iteration: Option<u64>,
    /// `make_vocab_size_divisible_by` recorded in `args` (the source's padding must match).
    pub make_vocab_size_divisible_by: usize,
}

fn suffix(lp: LayerParam) -> &'static str {
    match lp {
        LayerParam::InputNorm => "input_layernorm.weight",
        LayerParam::Qkv => "self_attention.linear_qkv.weight",
        LayerParam::QkvBias => "self_attention.linear_qkv.bias",
        LayerParam::QNorm => "self_attention.q_layernorm.weight",
        LayerParam::KNorm => "self_attention.k_layernorm.weight",
        LayerParam::Proj => "self_attention.linear_proj.weight",
        LayerParam::PreMlpNorm => "pre_mlp_layernorm.weight",
        LayerParam::Fc1 => "mlp.linear_fc1.weight",
        LayerParam::Fc2 => "mlp.linear_fc2.weight",
    }
}

/// Entries of one rank's `model` (or `model{chunk}`) dict: (name, parameter) in Megatron's
/// order; `None` marks `_extra_state`.
fn rank_entries(
    spec: &ModelSpec,
    par: &Parallel,
    pp_rank: usize,
    chunk: usize,
) -> Vec<(String, Option<Param>)> {
    let lc = spec.num_layers / (par.pp * par.vpp);
    let mut v = Vec::new();
    if pp_rank == 0 && chunk == 0 {
        v.push((
            "embedding.word_embeddings.weight".to_string(),
            Some(Param::Embedding),
        ));
    }
    for i in 0..lc {
        let g = chunk * par.pp * lc + pp_rank * lc + i;
        for lp in spec.layer_params() {
            v.push((
                format!("decoder.layers.{i}.{}", suffix(lp)),
                Some(Param::Layer(g, lp)),
            ));
            let extra = match lp {
                LayerParam::Qkv => Some("self_attention.linear_qkv._extra_state"),
                LayerParam::Proj => Some("self_attention.linear_proj._extra_state"),
                LayerParam::Fc1 => Some("mlp.linear_fc1._extra_state"),
                LayerParam::Fc2 => Some("mlp.linear_fc2._extra_state"),
                _ => None,
            };
            if let Some(x) = extra {
                v.push((format!("decoder.layers.{i}.{x}"), None));
            }
        }
    }
    if pp_rank == par.pp - 1 && chunk == par.vpp - 1 {
        v.push((
            "decoder.final_layernorm.weight".to_string(),
            Some(Param::FinalNorm),
        ));
        if !spec.tied || par.pp > 1 {
            v.push(("output_layer.weight".to_string(), Some(Param::Output)));
            v.push(("output_layer._extra_state".to_string(), None));
        }
    }
    v
}

/// Local (per-rank) shape of a parameter.
pub fn local_shape(spec: &ModelSpec, p: Param, tp: usize) -> Vec<usize> {
    let mut s = spec.shape(p);
    match spec.split(p) {
        Split::Replicated => {}
        Split::Rows | Split::GateUp => s[0] /= tp,
        Split::Cols => s[1] /= tp,
    }
    s
}

/// Reads the bytes of rank `r`'s shard of a canonical parameter.
pub fn shard_bytes(src: &dyn CanonicalSource, p: Param, tp: usize, r: usize) -> Result<Vec<u8>> {
    let spec = src.spec();
    let shape = spec.shape(p);
    let rb = spec.row_bytes(p);
    let es = spec.dtype.size();
    match spec.split(p) {
        Split::Replicated => {
            let mut b = vec![0u8; shape[0] * rb];
            src.read_rows(p, 0..shape[0], &mut b)?;
            Ok(b)
        }
        Split::Rows => {
            let per = shape[0] / tp;
            let mut b = vec![0u8; per * rb];
            src.read_rows(p, r * per..(r + 1) * per, &mut b)?;
            Ok(b)
        }
        Split::GateUp => {
            let f = shape[0] / 2;
            let per = f / tp;
            let mut b = vec![0u8; 2 * per * rb];
            let (gate, up) = b.split_at_mut(per * rb);
            src.read_rows(p, r * per..(r + 1) * per, gate)?;
            src.read_rows(p, f + r * per..f + (r + 1) * per, up)?;
            Ok(b)
        }
        Split::Cols => {
            let cols = shape[1];
            let lc = cols / tp;
            let mut full = vec![0u8; shape[0] * rb];
            src.read_rows(p, 0..shape[0], &mut full)?;
            let mut b = vec![0u8; shape[0] * lc * es];
            for row in 0..shape[0] {
                let s = row * cols * es + r * lc * es;
                b[row * lc * es..(row + 1) * lc * es].copy_from_slice(&full[s..s + lc * es]);
            }
            Ok(b)
        }
    }
}

fn args_pickle(
    w: &mut PickleWriter,
    spec: &ModelSpec,
    par: &Parallel,
    opts: &MegatronWriteOptions,
    iteration: u64,
) {
    w.global("argparse", "Namespace");
    w.empty_tuple();
    w.newobj();
    w.empty_dict();
    w.mark();
    let ints: [(&str, usize); 14] = [
        ("num_layers", spec.num_layers),
        ("hidden_size", spec.hidden),
        ("ffn_hidden_size", spec.ffn),
        ("num_attention_heads", spec.heads),
        ("num_query_groups", spec.groups),
        ("kv_channels", spec.head_dim),
        ("max_position_embeddings", spec.max_position),
        ("seq_length", spec.max_position),
        ("vocab_size", spec.vocab),
        ("padded_vocab_size", spec.padded_vocab),
        (
            "make_vocab_size_divisible_by",
            opts.make_vocab_size_divisible_by,
        ),
        ("tensor_model_parallel_size", par.tp),
        ("pipeline_model_parallel_size", par.pp),
        ("iteration", iteration as usize),
    ];
    for (k, v) in ints {
        w.str(k);
        w.int(v as i64);
    }
    let bools = [
        ("group_query_attention", spec.groups != spec.heads),
        ("use_rotary_position_embeddings", true),
        ("rotary_interleaved", false),
        ("swiglu", true),
        ("add_bias_linear", false),
        ("add_qkv_bias", spec.qkv_bias),
        ("qk_layernorm", spec.qk_norm),
        ("untie_embeddings_and_output_weights", !spec.tied),
        ("fp16", spec.dtype == crate::dtype::DType::F16),
        ("bf16", spec.dtype == crate::dtype::DType::BF16),
        ("use_legacy_models", false),
    ];
    for (k, v) in bools {
        w.str(k);
        w.bool(v);
    }
    for (k, v) in [
        ("rotary_base", spec.rope_theta),
        ("rotary_percent", 1.0),
        ("norm_epsilon", spec.norm_eps),
        ("init_method_std", spec.initializer_range),
    ] {
        w.str(k);
        w.float(v);
    }
    for (k, v) in [
        ("position_embedding_type", "rope"),
        ("normalization", "RMSNorm"),
        ("transformer_impl", "local"),
    ] {
        w.str(k);
        w.str(v);
    }
    for k in [
        "virtual_pipeline_model_parallel_size",
        "num_layers_per_virtual_pipeline_stage",
    ] {
        w.str(k);
        if par.vpp > 1 {
            w.int(if k.starts_with("virtual") {
                par.vpp
            } else {
                spec.num_layers / (par.pp * par.vpp)
            } as i64);
        } else {
            w.none();
        }
    }
    w.str("params_dtype");
    w.global("torch", spec.dtype.torch_name());
    w.setitems();
    w.build();
}

/// Writes the checkpoint; returns the number of bytes of tensor data written.
pub fn write_legacy(
    src: &dyn CanonicalSource,
    dst: &Path,
    opts: &MegatronWriteOptions,
    progress: &dyn Fn(Progress),
) -> Result<u64> {
    let spec = src.spec().clone();
    let par = Parallel {
        tp: opts.tp,
        pp: opts.pp,
        vpp: opts.vpp,
    };
    spec.check(opts.tp).map_err(|r| CkptError::Option {
        field: "tp",
        reason: r,
    })?;
    if opts.pp == 0 || opts.vpp == 0 || !spec.num_layers.is_multiple_of(opts.pp * opts.vpp) {
        return Err(CkptError::Option {
            field: "pp",
            reason: format!(
                "pp ({}) x vpp ({}) must divide the {} layers",
                opts.pp, opts.vpp, spec.num_layers
            ),
        });
    }
    if opts.vpp > 1 && opts.pp == 1 {
        return Err(CkptError::Option {
            field: "vpp",
            reason: "virtual pipeline stages need pp > 1".into(),
        });
    }
    if !spec.padded_vocab.is_multiple_of(opts.tp) {
        return Err(CkptError::Option {
            field: "tp",
            reason: format!(
                "padded vocabulary {} is not divisible by {}",
                spec.padded_vocab, opts.tp
            ),
        });
    }
    let (iter_dir, tracker, iteration) = match opts.iteration {
        Some(i) => (format!("iter_{i:07}"), i.to_string(), i),
        None => ("release".to_string(), "release".to_string(), 0),
    };
    std::fs::create_dir_all(dst).map_err(io_err(dst))?;
    let spec_ref = &spec;
    let all: Vec<(String, Option<Param>)> = (0..opts.pp)
        .flat_map(|pr| (0..opts.vpp).flat_map(move |v| rank_entries(spec_ref, &par, pr, v)))
        .collect();
    let total: u64 = all
        .iter()
        .filter_map(|(_, p)| *p)
        .map(|p| {
            (local_shape(&spec, p, opts.tp).iter().product::<usize>() * spec.dtype.size() * opts.tp)
                as u64
        })
        .sum();
    let ntensors = all.iter().filter(|e| e.1.is_some()).count() * opts.tp;
    let mut done = 0u64;
    let mut done_t = 0usize;
    for pr in 0..opts.pp {
        let per_chunk: Vec<Vec<(String, Option<Param>)>> = (0..opts.vpp)
            .map(|v| rank_entries(&spec, &par, pr, v))
            .collect();
        for t in 0..opts.tp {
            let folder = if opts.pp > 1 {
                format!("mp_rank_{t:02}_{pr:03}")
            } else {
                format!("mp_rank_{t:02}")
            };
            let dir = dst.join(&iter_dir).join(folder);
            std::fs::create_dir_all(&dir).map_err(io_err(&dir))?;
            let mut w = PickleWriter::new();
            w.empty_dict();
            w.mark();
            w.str("args");
            args_pickle(&mut w, &spec, &par, opts, iteration);
            w.str("checkpoint_version");
            w.float(3.0);
            w.str("iteration");
            w.int(iteration as i64);
            let mut key = 0usize;
            for (v, entries) in per_chunk.iter().enumerate() {
                let model_key = if opts.vpp > 1 {
                    format!("model{v}")
                } else {
                    "model".to_string()
                };
                w.str(&model_key);
                w.ordered_dict();
                w.mark();
                for (name, p) in entries {
                    w.str(name);
                    match p {
                        Some(p) => {
                            w.tensor(
                                &key.to_string(),
                                spec.dtype,
                                &local_shape(&spec, *p, opts.tp),
                            );
                            key += 1;
                        }
                        None => w.none(),
                    }
                }
                w.setitems();
            }
            w.setitems();
            let path = dir.join("model_optim_rng.pt");
            let mut tw = TorchSaveWriter::create(&path, "model_optim_rng", &w.finish())?;
            let mut key = 0usize;
            for (name, p) in per_chunk.iter().flatten() {
                let Some(p) = p else { continue };
                let bytes = shard_bytes(src, *p, opts.tp, t)?;
                tw.storage(&key.to_string(), &bytes)?;
                key += 1;
                done += bytes.len() as u64;
                done_t += 1;
                progress(Progress {
                    bytes_done: done,
                    bytes_total: total,
                    tensors_done: done_t,
                    tensors_total: ntensors,
                    current: name.clone(),
                });
            }
            tw.finish()?;
        }
    }
    let tracker_path = dst.join("latest_checkpointed_iteration.txt");
    std::fs::write(&tracker_path, tracker).map_err(io_err(&tracker_path))?;
    Ok(done)
}
