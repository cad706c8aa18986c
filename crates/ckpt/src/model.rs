//! The network a checkpoint holds, independent of format: its hyper-parameters
//! ([`ModelSpec`]), its Megatron parameters in *canonical* global form ([`Param`]: TP shards
//! merged, layers numbered globally, `linear_fc1` as `[gate; up]`, QKV rows in Megatron's
//! per-query-group order, vocabulary padded), and the one table that maps canonical rows to
//! Hugging Face tensors ([`hf_tensors`]). Both conversion directions read that table.

use std::ops::Range;

use serde::Serialize;

use crate::dtype::DType;

/// Hugging Face architecture written into `config.json`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Arch {
    /// `LlamaForCausalLM` (also Mistral-shaped models without sliding window).
    Llama,
    /// `Qwen2ForCausalLM` (QKV bias).
    Qwen2,
    /// `Qwen3ForCausalLM` (per-head q/k RMSNorm, no QKV bias).
    Qwen3,
    /// `MistralForCausalLM`.
    Mistral,
}

impl Arch {
    /// The `architectures[0]` class name.
    pub fn class(self) -> &'static str {
        match self {
            Arch::Llama => "LlamaForCausalLM",
            Arch::Qwen2 => "Qwen2ForCausalLM",
            Arch::Qwen3 => "Qwen3ForCausalLM",
            Arch::Mistral => "MistralForCausalLM",
        }
    }

    /// The `model_type` string.
    pub fn model_type(self) -> &'static str {
        match self {
            Arch::Llama => "llama",
            Arch::Qwen2 => "qwen2",
            Arch::Qwen3 => "qwen3",
            Arch::Mistral => "mistral",
        }
    }

    /// Parses an architecture from a class name or model type.
    pub fn parse(s: &str) -> Option<Arch> {
        Some(match s {
            "LlamaForCausalLM" | "llama" => Arch::Llama,
            "Qwen2ForCausalLM" | "qwen2" => Arch::Qwen2,
            "Qwen3ForCausalLM" | "qwen3" => Arch::Qwen3,
            "MistralForCausalLM" | "mistral" => Arch::Mistral,
            _ => return None,
        })
    }
}

/// Hyper-parameters of a decoder-only GPT (RMSNorm, RoPE, SwiGLU, GQA).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ModelSpec {
    /// Target Hugging Face architecture.
    pub arch: Arch,
    /// Number of transformer layers.
    pub num_layers: usize,
    /// Model width.
    pub hidden: usize,
    /// SwiGLU inner width (per gate/up half).
    pub ffn: usize,
    /// Attention heads.
    pub heads: usize,
    /// Key/value heads (query groups).
    pub groups: usize,
    /// Width of one head (`kv_channels`).
    pub head_dim: usize,
    /// True vocabulary size (rows kept in HF).
    pub vocab: usize,
    /// Vocabulary padded as Megatron stores it (`>= vocab`).
    pub padded_vocab: usize,
    /// Output layer shares the embedding.
    pub tied: bool,
    /// QKV projection has a bias.
    pub qkv_bias: bool,
    /// Per-head q/k RMSNorm (Qwen3).
    pub qk_norm: bool,
    /// RoPE base.
    pub rope_theta: f64,
    /// RMSNorm epsilon.
    pub norm_eps: f64,
    /// Longest position the model was set up for.
    pub max_position: usize,
    /// Element type of the weights.
    pub dtype: DType,
    /// Standard deviation used at initialisation (HF `initializer_range`).
    pub initializer_range: f64,
}

/// One per-layer Megatron parameter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum LayerParam {
    /// Norm before attention.
    InputNorm,
    /// Fused QKV weight, rows grouped per query group `[q…|k|v]`.
    Qkv,
    /// Fused QKV bias, same row order.
    QkvBias,
    /// Per-head query RMSNorm (Qwen3).
    QNorm,
    /// Per-head key RMSNorm (Qwen3).
    KNorm,
    /// Attention output projection (row-parallel: TP splits columns).
    Proj,
    /// Norm before the MLP.
    PreMlpNorm,
    /// SwiGLU input projection, canonical rows `[gate (ffn) ; up (ffn)]`.
    Fc1,
    /// MLP output projection (row-parallel: TP splits columns).
    Fc2,
}

/// A canonical (global, merged) Megatron parameter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Param {
    /// Word embeddings `[padded_vocab, hidden]`.
    Embedding,
    /// A transformer layer's parameter, with its global layer index.
    Layer(usize, LayerParam),
    /// Final norm `[hidden]`.
    FinalNorm,
    /// Output layer `[padded_vocab, hidden]`.
    Output,
}

/// How tensor parallelism splits a canonical parameter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Split {
    /// Same on every rank.
    Replicated,
    /// Contiguous row blocks (column-parallel layers, embeddings).
    Rows,
    /// `linear_fc1`: each rank holds `[its gate rows; its up rows]`.
    GateUp,
    /// Contiguous column blocks (row-parallel layers).
    Cols,
}

impl ModelSpec {
    /// Query heads per group.
    pub fn heads_per_group(&self) -> usize {
        self.heads / self.groups.max(1)
    }

    /// Per-layer parameters present in this model, in Megatron's state-dict order.
    pub fn layer_params(&self) -> Vec<LayerParam> {
        let mut v = vec![LayerParam::InputNorm, LayerParam::Qkv];
        if self.qkv_bias {
            v.push(LayerParam::QkvBias);
        }
        if self.qk_norm {
            v.push(LayerParam::QNorm);
            v.push(LayerParam::KNorm);
        }
        v.extend([
            LayerParam::Proj,
            LayerParam::PreMlpNorm,
            LayerParam::Fc1,
            LayerParam::Fc2,
        ]);
        v
    }

    /// Every canonical parameter, in global order (the output layer only when untied).
    pub fn params(&self) -> Vec<Param> {
        let mut v = vec![Param::Embedding];
        for l in 0..self.num_layers {
            v.extend(self.layer_params().into_iter().map(|p| Param::Layer(l, p)));
        }
        v.push(Param::FinalNorm);
        if !self.tied {
            v.push(Param::Output);
        }
        v
    }

    /// Canonical global shape of a parameter.
    pub fn shape(&self, p: Param) -> Vec<usize> {
        let qkv_rows = (self.heads + 2 * self.groups) * self.head_dim;
        match p {
            Param::Embedding | Param::Output => vec![self.padded_vocab, self.hidden],
            Param::FinalNorm => vec![self.hidden],
            Param::Layer(_, lp) => match lp {
                LayerParam::InputNorm | LayerParam::PreMlpNorm => vec![self.hidden],
                LayerParam::Qkv => vec![qkv_rows, self.hidden],
                LayerParam::QkvBias => vec![qkv_rows],
                LayerParam::QNorm | LayerParam::KNorm => vec![self.head_dim],
                LayerParam::Proj => vec![self.hidden, self.heads * self.head_dim],
                LayerParam::Fc1 => vec![2 * self.ffn, self.hidden],
                LayerParam::Fc2 => vec![self.hidden, self.ffn],
            },
        }
    }

    /// How tensor parallelism splits a parameter.
    pub fn split(&self, p: Param) -> Split {
        match p {
            Param::Embedding | Param::Output => Split::Rows,
            Param::FinalNorm => Split::Replicated,
            Param::Layer(_, lp) => match lp {
                LayerParam::InputNorm
                | LayerParam::PreMlpNorm
                | LayerParam::QNorm
                | LayerParam::KNorm => Split::Replicated,
                LayerParam::Qkv | LayerParam::QkvBias => Split::Rows,
                LayerParam::Fc1 => Split::GateUp,
                LayerParam::Proj | LayerParam::Fc2 => Split::Cols,
            },
        }
    }

    /// Bytes in one canonical row (product of trailing dims × element size).
    pub fn row_bytes(&self, p: Param) -> usize {
        self.shape(p)[1..].iter().product::<usize>() * self.dtype.size()
    }

    /// Rejects sizes no real model has (so hostile `args` cannot make us plan huge tables).
    pub fn check_bounds(&self) -> Result<(), String> {
        let limits = [
            ("num_layers", self.num_layers, 1 << 12),
            ("hidden", self.hidden, 1 << 18),
            ("ffn", self.ffn, 1 << 22),
            ("heads", self.heads, 1 << 14),
            ("groups", self.groups, 1 << 14),
            ("head_dim", self.head_dim, 1 << 14),
            ("vocab", self.vocab, 1 << 24),
            ("padded_vocab", self.padded_vocab, 1 << 24),
        ];
        for (name, v, max) in limits {
            if v > max {
                return Err(format!("{name} = {v} exceeds the supported maximum {max}"));
            }
        }
        Ok(())
    }

    /// Checks that the sizes are consistent and divisible by `tp` (1 for a plain check).
    pub fn check(&self, tp: usize) -> Result<(), String> {
        self.check_bounds()?;
        if self.num_layers == 0
            || self.hidden == 0
            || self.heads == 0
            || self.groups == 0
            || self.head_dim == 0
            || self.ffn == 0
        {
            return Err("layers, hidden, heads, groups, head_dim and ffn must all be > 0".into());
        }
        if !self.heads.is_multiple_of(self.groups) {
            return Err(format!(
                "heads ({}) must be a multiple of query groups ({})",
                self.heads, self.groups
            ));
        }
        if self.vocab == 0 || self.vocab > self.padded_vocab {
            return Err(format!(
                "vocab ({}) must be in 1..=padded vocab ({})",
                self.vocab, self.padded_vocab
            ));
        }
        if tp == 0
            || !self.groups.is_multiple_of(tp)
            || !self.ffn.is_multiple_of(tp)
            || !self.padded_vocab.is_multiple_of(tp)
        {
            return Err(format!(
                "tensor parallel size {tp} must divide query groups ({}), ffn ({}) and padded vocab ({})",
                self.groups, self.ffn, self.padded_vocab
            ));
        }
        Ok(())
    }
}

/// A run of canonical rows that forms a run of rows of a Hugging Face tensor.
#[derive(Debug, Clone, PartialEq)]
pub struct Segment {
    /// The canonical parameter.
    pub param: Param,
    /// Rows of the canonical parameter.
    pub param_rows: Range<usize>,
    /// Rows of the HF tensor they become.
    pub hf_rows: Range<usize>,
}

/// One Hugging Face tensor and where its rows come from.
#[derive(Debug, Clone, PartialEq)]
pub struct HfTensor {
    /// Name in the HF state dict.
    pub name: String,
    /// Shape.
    pub shape: Vec<usize>,
    /// Row sources, covering the tensor in order.
    pub segments: Vec<Segment>,
}

impl HfTensor {
    /// Size in bytes for an element type.
    pub fn nbytes(&self, dtype: DType) -> usize {
        self.shape.iter().product::<usize>() * dtype.size()
    }
}

fn whole(name: String, spec: &ModelSpec, p: Param) -> HfTensor {
    let shape = spec.shape(p);
    let rows = shape[0];
    HfTensor {
        name,
        shape,
        segments: vec![Segment {
            param: p,
            param_rows: 0..rows,
            hf_rows: 0..rows,
        }],
    }
}

/// QKV rows for q (`which = 0`), k (1) or v (2) taken group by group.
fn qkv_part(name: String, spec: &ModelSpec, p: Param, which: usize) -> HfTensor {
    let hd = spec.head_dim;
    let r = spec.heads_per_group();
    let block = (r + 2) * hd;
    let (start, len) = match which {
        0 => (0, r * hd),
        1 => (r * hd, hd),
        _ => ((r + 1) * hd, hd),
    };
    let mut segments = Vec::with_capacity(spec.groups);
    for g in 0..spec.groups {
        let s = g * block + start;
        segments.push(Segment {
            param: p,
            param_rows: s..s + len,
            hf_rows: g * len..(g + 1) * len,
        });
    }
    let mut shape = spec.shape(p);
    shape[0] = spec.groups * len;
    HfTensor {
        name,
        shape,
        segments,
    }
}

/// The Hugging Face tensors of the model, in the order they are written.
pub fn hf_tensors(spec: &ModelSpec) -> Vec<HfTensor> {
    let mut out = Vec::new();
    let mut emb = whole("model.embed_tokens.weight".into(), spec, Param::Embedding);
    emb.shape[0] = spec.vocab;
    emb.segments[0].param_rows = 0..spec.vocab;
    emb.segments[0].hf_rows = 0..spec.vocab;
    out.push(emb);
    for l in 0..spec.num_layers {
        let pre = format!("model.layers.{l}");
        let lp = |x| Param::Layer(l, x);
        out.push(whole(
            format!("{pre}.input_layernorm.weight"),
            spec,
            lp(LayerParam::InputNorm),
        ));
        let qkv = lp(LayerParam::Qkv);
        out.push(qkv_part(
            format!("{pre}.self_attn.q_proj.weight"),
            spec,
            qkv,
            0,
        ));
        out.push(qkv_part(
            format!("{pre}.self_attn.k_proj.weight"),
            spec,
            qkv,
            1,
        ));
        out.push(qkv_part(
            format!("{pre}.self_attn.v_proj.weight"),
            spec,
            qkv,
            2,
        ));
        if spec.qkv_bias {
            let b = lp(LayerParam::QkvBias);
            out.push(qkv_part(format!("{pre}.self_attn.q_proj.bias"), spec, b, 0));
            out.push(qkv_part(format!("{pre}.self_attn.k_proj.bias"), spec, b, 1));
            out.push(qkv_part(format!("{pre}.self_attn.v_proj.bias"), spec, b, 2));
        }
        if spec.qk_norm {
            out.push(whole(
                format!("{pre}.self_attn.q_norm.weight"),
                spec,
                lp(LayerParam::QNorm),
            ));
            out.push(whole(
                format!("{pre}.self_attn.k_norm.weight"),
                spec,
                lp(LayerParam::KNorm),
            ));
        }
        out.push(whole(
            format!("{pre}.self_attn.o_proj.weight"),
            spec,
            lp(LayerParam::Proj),
        ));
        out.push(whole(
            format!("{pre}.post_attention_layernorm.weight"),
            spec,
            lp(LayerParam::PreMlpNorm),
        ));
        let fc1 = lp(LayerParam::Fc1);
        let f = spec.ffn;
        out.push(HfTensor {
            name: format!("{pre}.mlp.gate_proj.weight"),
            shape: vec![f, spec.hidden],
            segments: vec![Segment {
                param: fc1,
                param_rows: 0..f,
                hf_rows: 0..f,
            }],
        });
        out.push(HfTensor {
            name: format!("{pre}.mlp.up_proj.weight"),
            shape: vec![f, spec.hidden],
            segments: vec![Segment {
                param: fc1,
                param_rows: f..2 * f,
                hf_rows: 0..f,
            }],
        });
        out.push(whole(
            format!("{pre}.mlp.down_proj.weight"),
            spec,
            lp(LayerParam::Fc2),
        ));
    }
    out.push(whole("model.norm.weight".into(), spec, Param::FinalNorm));
    if !spec.tied {
        let mut head = whole("lm_head.weight".into(), spec, Param::Output);
        head.shape[0] = spec.vocab;
        head.segments[0].param_rows = 0..spec.vocab;
        head.segments[0].hf_rows = 0..spec.vocab;
        out.push(head);
    }
    out
}

/// The HF segments that make up a canonical parameter's rows (rows not covered are padding: zeros).
/// With tied embeddings the output layer is read from `model.embed_tokens.weight`.
pub fn param_sources(spec: &ModelSpec, tensors: &[HfTensor], p: Param) -> Vec<(String, Segment)> {
    let want = if p == Param::Output && spec.tied {
        Param::Embedding
    } else {
        p
    };
    let mut v: Vec<(String, Segment)> = tensors
        .iter()
        .flat_map(|t| {
            t.segments
                .iter()
                .filter(|s| s.param == want)
                .map(|s| (t.name.clone(), s.clone()))
        })
        .collect();
    v.sort_by_key(|(_, s)| s.param_rows.start);
    v
}

/// Megatron's vocabulary padding: the next multiple of `divisible_by * tp`.
pub fn pad_vocab(vocab: usize, divisible_by: usize, tp: usize) -> usize {
    let m = (divisible_by * tp).max(1);
    vocab.div_ceil(m) * m
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn spec() -> ModelSpec {
        ModelSpec {
            arch: Arch::Llama,
            num_layers: 2,
            hidden: 8,
            ffn: 12,
            heads: 4,
            groups: 2,
            head_dim: 2,
            vocab: 10,
            padded_vocab: 16,
            tied: false,
            qkv_bias: true,
            qk_norm: false,
            rope_theta: 1e4,
            norm_eps: 1e-5,
            max_position: 32,
            dtype: DType::F32,
            initializer_range: 0.02,
        }
    }

    #[test]
    fn qkv_segments_cover_every_row_once() {
        let s = spec();
        let t = hf_tensors(&s);
        let srcs = param_sources(&s, &t, Param::Layer(1, LayerParam::Qkv));
        let mut covered = vec![0; s.shape(Param::Layer(1, LayerParam::Qkv))[0]];
        for (_, seg) in &srcs {
            for r in seg.param_rows.clone() {
                covered[r] += 1;
            }
        }
        assert!(covered.iter().all(|&c| c == 1), "{covered:?}");
        // group 1's q rows follow group 0's k and v rows
        let q = t
            .iter()
            .find(|x| x.name == "model.layers.1.self_attn.q_proj.weight")
            .unwrap();
        assert_eq!(q.segments[1].param_rows, 8..12);
    }

    #[test]
    fn vocab_padding_follows_megatron() {
        assert_eq!(pad_vocab(250, 128, 1), 256);
        assert_eq!(pad_vocab(250, 128, 4), 512);
        assert_eq!(pad_vocab(256, 128, 2), 256);
    }
}
