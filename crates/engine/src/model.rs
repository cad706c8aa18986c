//! The Llama/Qwen2 decoder, written only with differentiable candle primitives.
//!
//! Candle's fused `rms_norm`, `softmax_last_dim`, `rope` and `sdpa` kernels have no backward
//! pass, so the same code path serves training (autograd through every op) and inference
//! (with a per-sequence KV cache). Weight names follow Hugging Face's `LlamaForCausalLM`.

use std::collections::BTreeMap;
use std::path::Path;

use candle_core::{D, DType, Device, IndexOp, Tensor};

use crate::config::ModelConfig;
use crate::error::{EngineError, Result};
use crate::rng::Rng;

/// Named tensors in Hugging Face naming, ordered so iteration is deterministic.
pub type Weights = BTreeMap<String, Tensor>;

/// A low-rank adapter attached to one projection: `y += scale * B(A(dropout(x)))`.
#[derive(Debug, Clone)]
pub(crate) struct Lora {
    /// `[rank, in]`, PEFT's `lora_A.weight`.
    pub a: Tensor,
    /// `[out, rank]`, PEFT's `lora_B.weight`.
    pub b: Tensor,
    /// `alpha / rank` (or `alpha / sqrt(rank)` for rsLoRA).
    pub scale: f64,
    /// Dropout probability applied to the adapter's input while training.
    pub dropout: f32,
}

/// A projection `x W^T (+ b)`, optionally with a LoRA adapter.
#[derive(Debug, Clone)]
pub(crate) struct Linear {
    pub weight: Tensor,
    pub bias: Option<Tensor>,
    pub lora: Option<Lora>,
}

impl Linear {
    fn forward(&self, x: &Tensor, rng: &mut Option<&mut Rng>) -> Result<Tensor> {
        let mut y = x.matmul(&self.weight.t()?)?;
        if let Some(b) = &self.bias {
            y = y.broadcast_add(b)?;
        }
        if let Some(l) = &self.lora {
            let xin = match rng {
                Some(r) if l.dropout > 0.0 => dropout(x, l.dropout, r)?,
                _ => x.clone(),
            };
            let delta = xin.matmul(&l.a.t()?)?.matmul(&l.b.t()?)?;
            y = (y + (delta * l.scale)?)?;
        }
        Ok(y)
    }
}

/// Inverted dropout with a mask drawn from our deterministic generator.
fn dropout(x: &Tensor, p: f32, rng: &mut Rng) -> Result<Tensor> {
    let keep = 1.0 / (1.0 - p);
    let mask: Vec<f32> = (0..x.elem_count())
        .map(|_| if rng.uniform() < p as f64 { 0.0 } else { keep })
        .collect();
    let mask = Tensor::from_vec(mask, x.shape(), x.device())?.to_dtype(x.dtype())?;
    Ok((x * mask)?)
}

#[derive(Debug, Clone)]
struct Layer {
    input_norm: Tensor,
    q: Linear,
    k: Linear,
    v: Linear,
    o: Linear,
    post_norm: Tensor,
    gate: Linear,
    up: Linear,
    down: Linear,
}

/// Keys and values of past positions for one sequence, so each new token costs one position.
#[derive(Debug, Clone, Default)]
pub struct KvCache {
    layers: Vec<Option<(Tensor, Tensor)>>,
    len: usize,
}

impl KvCache {
    /// Positions already in the cache.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing has been cached yet.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// A decoder ready to run: configuration, weights (possibly shared with training `Var`s) and RoPE tables.
#[derive(Debug, Clone)]
pub struct Model {
    cfg: ModelConfig,
    embed: Tensor,
    layers: Vec<Layer>,
    norm: Tensor,
    lm_head: Option<Linear>,
    cos: Tensor,
    sin: Tensor,
}

/// Which projections of a layer LoRA may target, with their Hugging Face module names.
pub const LORA_TARGETS: [&str; 7] = [
    "q_proj",
    "k_proj",
    "v_proj",
    "o_proj",
    "gate_proj",
    "up_proj",
    "down_proj",
];

/// The Hugging Face module path of projection `module` in layer `layer`.
pub(crate) fn module_path(layer: usize, module: &str) -> String {
    let block = if ["gate_proj", "up_proj", "down_proj"].contains(&module) {
        "mlp"
    } else {
        "self_attn"
    };
    format!("model.layers.{layer}.{block}.{module}")
}

/// Every (name, shape) a model of `cfg` has, in Hugging Face naming.
pub fn parameter_shapes(cfg: &ModelConfig) -> Vec<(String, Vec<usize>)> {
    let (h, hd) = (cfg.hidden_size, cfg.head_dim());
    let (q, kv, ff) = (
        cfg.num_heads * hd,
        cfg.num_kv_heads * hd,
        cfg.intermediate_size,
    );
    let mut out = vec![(
        "model.embed_tokens.weight".to_string(),
        vec![cfg.vocab_size, h],
    )];
    for i in 0..cfg.num_layers {
        let p = |m: &str| format!("model.layers.{i}.{m}");
        out.push((p("input_layernorm.weight"), vec![h]));
        out.push((p("post_attention_layernorm.weight"), vec![h]));
        for (m, o, inp) in [
            ("q_proj", q, h),
            ("k_proj", kv, h),
            ("v_proj", kv, h),
            ("o_proj", h, q),
        ] {
            out.push((p(&format!("self_attn.{m}.weight")), vec![o, inp]));
            let bias = if m == "o_proj" {
                cfg.o_bias()
            } else {
                cfg.qkv_bias()
            };
            if bias {
                out.push((p(&format!("self_attn.{m}.bias")), vec![o]));
            }
        }
        for (m, o, inp) in [
            ("gate_proj", ff, h),
            ("up_proj", ff, h),
            ("down_proj", h, ff),
        ] {
            out.push((p(&format!("mlp.{m}.weight")), vec![o, inp]));
        }
    }
    out.push(("model.norm.weight".to_string(), vec![h]));
    if !cfg.tie_word_embeddings {
        out.push(("lm_head.weight".to_string(), vec![cfg.vocab_size, h]));
    }
    out
}

/// Fresh weights: normal(0, initializer_range) matrices, unit norms, zero biases.
pub fn init_weights(cfg: &ModelConfig, rng: &mut Rng) -> Result<Weights> {
    let mut w = Weights::new();
    for (name, shape) in parameter_shapes(cfg) {
        let n: usize = shape.iter().product();
        let data: Vec<f32> = if name.ends_with("norm.weight") {
            vec![1.0; n]
        } else if name.ends_with(".bias") {
            vec![0.0; n]
        } else {
            (0..n)
                .map(|_| (rng.normal() * cfg.initializer_range) as f32)
                .collect()
        };
        w.insert(name, Tensor::from_vec(data, shape, &Device::Cpu)?);
    }
    Ok(w)
}

impl Model {
    /// Builds a model from named tensors, checking that every tensor exists with the right shape.
    ///
    /// `source` names the file the weights came from, for error messages.
    pub fn new(cfg: &ModelConfig, weights: &Weights, source: &Path) -> Result<Self> {
        cfg.validate()?;
        for (name, shape) in parameter_shapes(cfg) {
            let t = weights.get(&name).ok_or_else(|| {
                EngineError::weights(
                    source,
                    format!("missing tensor `{name}`; the weights do not match config.json"),
                )
            })?;
            if t.dims() != shape.as_slice() {
                return Err(EngineError::weights(
                    source,
                    format!(
                        "tensor `{name}` has shape {:?} but config.json implies {shape:?}",
                        t.dims()
                    ),
                ));
            }
        }
        // f64 is kept (the finite-difference check needs it); everything else runs in f32.
        let dtype = match weights["model.embed_tokens.weight"].dtype() {
            DType::F64 => DType::F64,
            _ => DType::F32,
        };
        let get = |n: &str| -> Result<Tensor> { Ok(weights[n].to_dtype(dtype)?) };
        let lin = |base: &str| -> Result<Linear> {
            let bias_name = format!("{base}.bias");
            Ok(Linear {
                weight: get(&format!("{base}.weight"))?,
                bias: match weights.get(&bias_name) {
                    Some(_) => Some(get(&bias_name)?),
                    None => None,
                },
                lora: None,
            })
        };
        let mut layers = Vec::with_capacity(cfg.num_layers);
        for i in 0..cfg.num_layers {
            let p = |m: &str| format!("model.layers.{i}.{m}");
            layers.push(Layer {
                input_norm: get(&p("input_layernorm.weight"))?,
                q: lin(&p("self_attn.q_proj"))?,
                k: lin(&p("self_attn.k_proj"))?,
                v: lin(&p("self_attn.v_proj"))?,
                o: lin(&p("self_attn.o_proj"))?,
                post_norm: get(&p("post_attention_layernorm.weight"))?,
                gate: lin(&p("mlp.gate_proj"))?,
                up: lin(&p("mlp.up_proj"))?,
                down: lin(&p("mlp.down_proj"))?,
            });
        }
        let lm_head = if cfg.tie_word_embeddings {
            None
        } else {
            Some(lin("lm_head")?)
        };
        let (cos, sin) = rope_tables(cfg)?;
        let (cos, sin) = (cos.to_dtype(dtype)?, sin.to_dtype(dtype)?);
        Ok(Self {
            cfg: cfg.clone(),
            embed: get("model.embed_tokens.weight")?,
            layers,
            norm: get("model.norm.weight")?,
            lm_head,
            cos,
            sin,
        })
    }

    /// The model's configuration.
    pub fn config(&self) -> &ModelConfig {
        &self.cfg
    }

    /// A mutable handle on the projection at Hugging Face module path `path` (e.g. `model.layers.0.self_attn.q_proj`).
    pub(crate) fn linear_mut(&mut self, layer: usize, module: &str) -> Option<&mut Linear> {
        let l = self.layers.get_mut(layer)?;
        Some(match module {
            "q_proj" => &mut l.q,
            "k_proj" => &mut l.k,
            "v_proj" => &mut l.v,
            "o_proj" => &mut l.o,
            "gate_proj" => &mut l.gate,
            "up_proj" => &mut l.up,
            "down_proj" => &mut l.down,
            _ => return None,
        })
    }

    /// Runs the decoder on `ids` (`[batch, seq]`, u32) and returns logits `[batch * seq, vocab]`.
    ///
    /// With a cache (batch 1 only), positions continue after the cached ones and the cache grows.
    /// With `rng`, LoRA dropout is active (training); without, the pass is deterministic.
    pub fn forward(
        &self,
        ids: &Tensor,
        mut cache: Option<&mut KvCache>,
        mut rng: Option<&mut Rng>,
    ) -> Result<Tensor> {
        let (b, t) = ids.dims2()?;
        let offset = cache.as_ref().map_or(0, |c| c.len);
        if offset + t > self.cfg.max_position_embeddings {
            return Err(EngineError::PromptTooLong {
                prompt_tokens: offset + t,
                max_context: self.cfg.max_position_embeddings,
            });
        }
        if let Some(c) = cache.as_deref_mut()
            && c.layers.len() != self.layers.len()
        {
            c.layers = vec![None; self.layers.len()];
        }
        let cos = self.cos.narrow(0, offset, t)?;
        let sin = self.sin.narrow(0, offset, t)?;
        let mask = causal_mask(t, offset, ids.device())?.to_dtype(self.cos.dtype())?;
        let mut x = self.embed.index_select(&ids.flatten_all()?, 0)?;
        for (i, layer) in self.layers.iter().enumerate() {
            let h = rms_norm(&x, &layer.input_norm, self.cfg.rms_norm_eps)?;
            let kv = cache.as_deref_mut().map(|c| &mut c.layers[i]);
            let a = self.attention(layer, &h, b, t, &cos, &sin, &mask, kv, &mut rng)?;
            x = (x + a)?;
            let h = rms_norm(&x, &layer.post_norm, self.cfg.rms_norm_eps)?;
            let g = layer.gate.forward(&h, &mut rng)?.silu()?;
            let u = layer.up.forward(&h, &mut rng)?;
            x = (x + layer.down.forward(&(g * u)?, &mut rng)?)?;
        }
        if let Some(c) = cache {
            c.len += t;
        }
        let x = rms_norm(&x, &self.norm, self.cfg.rms_norm_eps)?;
        match &self.lm_head {
            Some(head) => head.forward(&x, &mut rng),
            None => Ok(x.matmul(&self.embed.t()?)?),
        }
    }

    #[allow(clippy::too_many_arguments)] // one attention block's inputs; bundling them hides nothing
    fn attention(
        &self,
        layer: &Layer,
        x: &Tensor,
        b: usize,
        t: usize,
        cos: &Tensor,
        sin: &Tensor,
        mask: &Tensor,
        cache: Option<&mut Option<(Tensor, Tensor)>>,
        rng: &mut Option<&mut Rng>,
    ) -> Result<Tensor> {
        let (nh, nkv, hd) = (
            self.cfg.num_heads,
            self.cfg.num_kv_heads,
            self.cfg.head_dim(),
        );
        let heads = |y: Tensor, n: usize| -> Result<Tensor> {
            Ok(y.reshape((b, t, n, hd))?.transpose(1, 2)?.contiguous()?)
        };
        let q = heads(layer.q.forward(x, rng)?, nh)?;
        let k = heads(layer.k.forward(x, rng)?, nkv)?;
        let v = heads(layer.v.forward(x, rng)?, nkv)?;
        let q = rope(&q, cos, sin)?;
        let mut k = rope(&k, cos, sin)?;
        let mut v = v;
        if let Some(slot) = cache {
            if let Some((pk, pv)) = slot.as_ref() {
                k = Tensor::cat(&[pk, &k], 2)?;
                v = Tensor::cat(&[pv, &v], 2)?;
            }
            *slot = Some((k.clone(), v.clone()));
        }
        let k = repeat_kv(&k, nh / nkv)?;
        let v = repeat_kv(&v, nh / nkv)?;
        let scores = (q.matmul(&k.t()?.contiguous()?)? * (1.0 / (hd as f64).sqrt()))?;
        let probs = softmax_last(&scores.broadcast_add(mask)?)?;
        let out = probs.matmul(&v)?; // [b, nh, t, hd]
        let out = out.transpose(1, 2)?.reshape((b * t, nh * hd))?;
        layer.o.forward(&out, rng)
    }
}

/// RMSNorm from primitives: `x / sqrt(mean(x^2) + eps) * w` over the last dimension.
pub(crate) fn rms_norm(x: &Tensor, w: &Tensor, eps: f64) -> Result<Tensor> {
    let ms = x.sqr()?.mean_keepdim(D::Minus1)?;
    let inv = (ms + eps)?.sqrt()?.recip()?;
    Ok(x.broadcast_mul(&inv)?.broadcast_mul(w)?)
}

/// Softmax over the last dimension from primitives (the max shift is a constant for autograd).
pub(crate) fn softmax_last(x: &Tensor) -> Result<Tensor> {
    let max = x.max_keepdim(D::Minus1)?.detach();
    let e = x.broadcast_sub(&max)?.exp()?;
    let s = e.sum_keepdim(D::Minus1)?;
    Ok(e.broadcast_div(&s)?)
}

/// Log-softmax over the last dimension from primitives.
pub(crate) fn log_softmax_last(x: &Tensor) -> Result<Tensor> {
    let max = x.max_keepdim(D::Minus1)?.detach();
    let shifted = x.broadcast_sub(&max)?;
    let lse = shifted.exp()?.sum_keepdim(D::Minus1)?.log()?;
    Ok(shifted.broadcast_sub(&lse)?)
}

/// Mean next-token cross-entropy over positions with non-zero `weights` (`[n]`), in nats.
pub fn masked_cross_entropy(logits: &Tensor, targets: &Tensor, weights: &Tensor) -> Result<Tensor> {
    let logp = log_softmax_last(logits)?;
    let picked = logp.gather(&targets.unsqueeze(1)?, 1)?.squeeze(1)?;
    let weights = weights.to_dtype(logits.dtype())?;
    let total = weights.sum_all()?;
    let nll = (picked.neg()? * &weights)?.sum_all()?;
    Ok(nll.broadcast_div(&total)?)
}

/// Hugging Face's rotate-half RoPE: `x*cos + rotate_half(x)*sin` on `[b, h, t, d]`.
fn rope(x: &Tensor, cos: &Tensor, sin: &Tensor) -> Result<Tensor> {
    let d = x.dim(D::Minus1)?;
    let x1 = x.narrow(D::Minus1, 0, d / 2)?;
    let x2 = x.narrow(D::Minus1, d / 2, d / 2)?;
    let rotated = Tensor::cat(&[&x2.neg()?, &x1], D::Minus1)?;
    Ok((x.broadcast_mul(cos)? + rotated.broadcast_mul(sin)?)?)
}

/// Cosine and sine tables `[max_pos, head_dim]` with the frequencies repeated twice (HF layout).
fn rope_tables(cfg: &ModelConfig) -> Result<(Tensor, Tensor)> {
    let hd = cfg.head_dim();
    let n = cfg.max_position_embeddings;
    let inv: Vec<f64> = (0..hd / 2)
        .map(|i| 1.0 / cfg.rope_theta.powf((2 * i) as f64 / hd as f64))
        .collect();
    let mut cos = Vec::with_capacity(n * hd);
    let mut sin = Vec::with_capacity(n * hd);
    for p in 0..n {
        for _half in 0..2 {
            for f in &inv {
                let a = p as f64 * f;
                cos.push(a.cos() as f32);
                sin.push(a.sin() as f32);
            }
        }
    }
    Ok((
        Tensor::from_vec(cos, (n, hd), &Device::Cpu)?,
        Tensor::from_vec(sin, (n, hd), &Device::Cpu)?,
    ))
}

/// Additive mask `[t, offset + t]`: 0 where query `i` may see key `j`, -inf after it.
fn causal_mask(t: usize, offset: usize, dev: &Device) -> Result<Tensor> {
    let total = offset + t;
    let data: Vec<f32> = (0..t)
        .flat_map(|i| {
            (0..total).map(move |j| {
                if j <= i + offset {
                    0.0
                } else {
                    f32::NEG_INFINITY
                }
            })
        })
        .collect();
    Ok(Tensor::from_vec(data, (t, total), dev)?)
}

/// Repeats each key/value head `n` times in place (HF's `repeat_kv`): `[b, kv, t, d] -> [b, kv*n, t, d]`.
fn repeat_kv(x: &Tensor, n: usize) -> Result<Tensor> {
    if n == 1 {
        return Ok(x.clone());
    }
    let (b, kv, t, d) = x.dims4()?;
    Ok(x.unsqueeze(2)?
        .broadcast_as((b, kv, n, t, d))?
        .reshape((b, kv * n, t, d))?)
}

/// Returns the last row of `[n, vocab]` logits as a vector.
pub(crate) fn last_row(logits: &Tensor) -> Result<Vec<f32>> {
    let n = logits.dim(0)?;
    Ok(logits.i(n - 1)?.to_dtype(DType::F32)?.to_vec1::<f32>()?)
}

#[cfg(test)]
mod tests;
