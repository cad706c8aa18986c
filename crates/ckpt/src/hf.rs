//! The Hugging Face side: `config.json` ⇄ [`ModelSpec`], a streaming sharded safetensors
//! writer fed from any [`CanonicalSource`], and [`HfModel`], which reads an HF folder as a
//! canonical source for the reverse direction.

use std::collections::{BTreeMap, HashMap};
use std::ops::Range;
use std::path::{Path, PathBuf};

use serde_json::{Value as Json, json};

use crate::dtype::DType;
use crate::error::{CkptError, Result, io_err};
use crate::megatron::CanonicalSource;
use crate::model::{Arch, HfTensor, ModelSpec, Param, Segment, hf_tensors, param_sources};
use crate::pool;
use crate::safetensors::{StEntry, StFile, StWriter};

/// Default largest shard (5 GB, as `save_pretrained`).
pub const DEFAULT_SHARD_BYTES: u64 = 5_000_000_000;

/// Builds the HF `config.json` for a model.
pub fn config_json(spec: &ModelSpec) -> Json {
    let mut c = json!({
        "architectures": [spec.arch.class()],
        "model_type": spec.arch.model_type(),
        "hidden_size": spec.hidden,
        "intermediate_size": spec.ffn,
        "num_hidden_layers": spec.num_layers,
        "num_attention_heads": spec.heads,
        "num_key_value_heads": spec.groups,
        "head_dim": spec.head_dim,
        "vocab_size": spec.vocab,
        "rms_norm_eps": spec.norm_eps,
        "rope_theta": spec.rope_theta,
        "tie_word_embeddings": spec.tied,
        "max_position_embeddings": spec.max_position,
        "hidden_act": "silu",
        "initializer_range": spec.initializer_range,
        "torch_dtype": spec.dtype.torch_name(),
        "use_cache": true,
    });
    let m = c.as_object_mut().expect("object literal");
    match spec.arch {
        Arch::Llama | Arch::Mistral => {
            m.insert("attention_bias".into(), json!(spec.qkv_bias));
            m.insert("mlp_bias".into(), json!(false));
        }
        Arch::Qwen2 | Arch::Qwen3 => {
            m.insert("use_sliding_window".into(), json!(false));
            m.insert("sliding_window".into(), Json::Null);
            m.insert("max_window_layers".into(), json!(spec.num_layers));
            if spec.arch == Arch::Qwen3 {
                m.insert("attention_bias".into(), json!(spec.qkv_bias));
            }
        }
    }
    if spec.arch == Arch::Mistral {
        m.insert("sliding_window".into(), Json::Null);
    }
    c
}

/// Reads a model spec from an HF `config.json`; `padded_vocab` is set to the true vocabulary.
pub fn spec_from_config(path: &Path) -> Result<ModelSpec> {
    let text = std::fs::read_to_string(path).map_err(io_err(path))?;
    let c: Json = serde_json::from_str(&text)
        .map_err(|e| CkptError::format(path, format!("not JSON: {e}")))?;
    let num = |k: &str| c.get(k).and_then(Json::as_u64).map(|v| v as usize);
    let need = |k: &str| {
        num(k).ok_or_else(|| CkptError::format(path, format!("`{k}` is missing or not an integer")))
    };
    let arch_name = c
        .get("architectures")
        .and_then(|a| a.get(0))
        .and_then(Json::as_str)
        .or_else(|| c.get("model_type").and_then(Json::as_str))
        .unwrap_or("");
    let arch = Arch::parse(arch_name).ok_or_else(|| {
        CkptError::format(
            path,
            format!(
                "architecture `{arch_name}` is not supported (Llama, Qwen2, Qwen3, Mistral are)"
            ),
        )
    })?;
    let hidden = need("hidden_size")?;
    let heads = need("num_attention_heads")?;
    let head_dim = num("head_dim").unwrap_or(hidden / heads.max(1));
    let vocab = need("vocab_size")?;
    let qkv_bias = match arch {
        Arch::Qwen2 => true,
        _ => c
            .get("attention_bias")
            .and_then(Json::as_bool)
            .unwrap_or(false),
    };
    let dtype = c
        .get("torch_dtype")
        .or_else(|| c.get("dtype"))
        .and_then(Json::as_str)
        .and_then(DType::from_torch_name)
        .unwrap_or(DType::F32);
    Ok(ModelSpec {
        arch,
        num_layers: need("num_hidden_layers")?,
        hidden,
        ffn: need("intermediate_size")?,
        heads,
        groups: num("num_key_value_heads").unwrap_or(heads),
        head_dim,
        vocab,
        padded_vocab: vocab,
        tied: c
            .get("tie_word_embeddings")
            .and_then(Json::as_bool)
            .unwrap_or(false),
        qkv_bias,
        qk_norm: arch == Arch::Qwen3,
        rope_theta: c
            .get("rope_theta")
            .and_then(Json::as_f64)
            .unwrap_or(10000.0),
        norm_eps: c.get("rms_norm_eps").and_then(Json::as_f64).unwrap_or(1e-6),
        max_position: num("max_position_embeddings").unwrap_or(4096),
        dtype,
        initializer_range: c
            .get("initializer_range")
            .and_then(Json::as_f64)
            .unwrap_or(0.02),
    })
}

/// Progress of a running conversion.
#[derive(Debug, Clone)]
pub struct Progress {
    /// Bytes of output written so far.
    pub bytes_done: u64,
    /// Bytes the output will hold.
    pub bytes_total: u64,
    /// Tensors written so far.
    pub tensors_done: usize,
    /// Tensors the output will hold.
    pub tensors_total: usize,
    /// The tensor just written.
    pub current: String,
}

/// How to write the HF side.
#[derive(Debug, Clone)]
pub struct HfWriteOptions {
    /// Largest shard in bytes.
    pub shard_bytes: u64,
    /// Worker threads assembling tensors.
    pub workers: usize,
    /// Folder whose tokenizer files are copied next to the weights.
    pub tokenizer_dir: Option<PathBuf>,
    /// Extra `__metadata__` for every shard.
    pub metadata: BTreeMap<String, String>,
}

impl Default for HfWriteOptions {
    fn default() -> Self {
        HfWriteOptions {
            shard_bytes: DEFAULT_SHARD_BYTES,
            workers: 2,
            tokenizer_dir: None,
            metadata: BTreeMap::new(),
        }
    }
}

/// What a write produced.
#[derive(Debug, Clone, serde::Serialize)]
pub struct WriteSummary {
    /// Files written (relative names).
    pub files: Vec<String>,
    /// Tensors written.
    pub tensors: usize,
    /// Bytes of tensor data written.
    pub bytes: u64,
    /// Largest single tensor assembled, in bytes.
    pub largest_tensor: u64,
}

/// Tokenizer and chat-template files copied along with the weights.
pub const TOKENIZER_FILES: &[&str] = &[
    "tokenizer.json",
    "tokenizer_config.json",
    "tokenizer.model",
    "special_tokens_map.json",
    "vocab.json",
    "merges.txt",
    "chat_template.jinja",
];

/// Assembles one HF tensor from canonical rows.
fn assemble(src: &dyn CanonicalSource, t: &HfTensor) -> Result<Vec<u8>> {
    let spec = src.spec();
    let mut buf = vec![0u8; t.nbytes(spec.dtype)];
    for seg in &t.segments {
        let rb = spec.row_bytes(seg.param);
        src.read_rows(
            seg.param,
            seg.param_rows.clone(),
            &mut buf[seg.hf_rows.start * rb..seg.hf_rows.end * rb],
        )?;
    }
    Ok(buf)
}

/// Writes the model held by `src` as an HF folder: config, generation config, safetensors shards
/// (with an index when there is more than one), tokenizer files.
pub fn write_hf(
    src: &dyn CanonicalSource,
    dst: &Path,
    opts: &HfWriteOptions,
    progress: &dyn Fn(Progress),
) -> Result<WriteSummary> {
    let spec = src.spec().clone();
    std::fs::create_dir_all(dst).map_err(io_err(dst))?;
    let tensors = hf_tensors(&spec);
    let es = spec.dtype;
    // Plan shards.
    let mut shards: Vec<Vec<usize>> = vec![Vec::new()];
    let mut cur = 0u64;
    for (i, t) in tensors.iter().enumerate() {
        let n = t.nbytes(es) as u64;
        if cur > 0 && cur + n > opts.shard_bytes {
            shards.push(Vec::new());
            cur = 0;
        }
        shards.last_mut().expect("non-empty").push(i);
        cur += n;
    }
    let nshards = shards.len();
    let names: Vec<String> = (0..nshards)
        .map(|i| {
            if nshards == 1 {
                "model.safetensors".to_string()
            } else {
                format!("model-{:05}-of-{nshards:05}.safetensors", i + 1)
            }
        })
        .collect();
    let total: u64 = tensors.iter().map(|t| t.nbytes(es) as u64).sum();
    let largest = tensors
        .iter()
        .map(|t| t.nbytes(es) as u64)
        .max()
        .unwrap_or(0);
    let mut meta = opts.metadata.clone();
    meta.insert("format".into(), "pt".into());
    let mut weight_map = BTreeMap::new();
    let mut done_bytes = 0u64;
    let mut done_tensors = 0usize;
    let budget = (largest as usize).max(64 << 20);
    for (s, idxs) in shards.iter().enumerate() {
        let path = dst.join(&names[s]);
        let decl: Vec<(String, DType, Vec<usize>)> = idxs
            .iter()
            .map(|&i| (tensors[i].name.clone(), es, tensors[i].shape.clone()))
            .collect();
        let mut w = StWriter::create(&path, &decl, &meta)?;
        let jobs: Vec<&HfTensor> = idxs.iter().map(|&i| &tensors[i]).collect();
        pool::ordered(
            &jobs,
            opts.workers,
            budget,
            |t| t.nbytes(es),
            |t| assemble(src, t),
            |i, bytes| {
                w.write(&jobs[i].name, &bytes)?;
                done_bytes += bytes.len() as u64;
                done_tensors += 1;
                weight_map.insert(jobs[i].name.clone(), names[s].clone());
                progress(Progress {
                    bytes_done: done_bytes,
                    bytes_total: total,
                    tensors_done: done_tensors,
                    tensors_total: tensors.len(),
                    current: jobs[i].name.clone(),
                });
                Ok(())
            },
        )?;
        w.finish()?;
    }
    let mut files = names.clone();
    if nshards > 1 {
        let index = json!({"metadata": {"total_size": total}, "weight_map": weight_map});
        write_json(&dst.join("model.safetensors.index.json"), &index)?;
        files.push("model.safetensors.index.json".into());
    }
    write_json(&dst.join("config.json"), &config_json(&spec))?;
    write_json(
        &dst.join("generation_config.json"),
        &json!({"_from_model_config": true}),
    )?;
    files.push("config.json".into());
    files.push("generation_config.json".into());
    if let Some(tok) = &opts.tokenizer_dir {
        for f in TOKENIZER_FILES {
            let from = tok.join(f);
            if from.is_file() {
                std::fs::copy(&from, dst.join(f)).map_err(io_err(&from))?;
                files.push((*f).to_string());
            }
        }
    }
    Ok(WriteSummary {
        files,
        tensors: tensors.len(),
        bytes: total,
        largest_tensor: largest,
    })
}

pub(crate) fn write_json(path: &Path, v: &Json) -> Result<()> {
    let mut s =
        serde_json::to_string_pretty(v).map_err(|e| CkptError::format(path, e.to_string()))?;
    s.push('\n');
    std::fs::write(path, s).map_err(io_err(path))
}

/// An HF model folder opened as a canonical source (for HF → Megatron).
#[derive(Debug)]
pub struct HfModel {
    /// The folder.
    pub dir: PathBuf,
    /// The model, with `padded_vocab` set for the target layout.
    pub spec: ModelSpec,
    tensors: HashMap<String, StEntry>,
    sources: HashMap<Param, Vec<(String, Segment)>>,
}

/// Lists the safetensors files of an HF folder (from the index when present).
pub fn safetensors_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let index = dir.join("model.safetensors.index.json");
    if index.is_file() {
        let text = std::fs::read_to_string(&index).map_err(io_err(&index))?;
        let v: Json = serde_json::from_str(&text)
            .map_err(|e| CkptError::format(&index, format!("not JSON: {e}")))?;
        let map = v
            .get("weight_map")
            .and_then(Json::as_object)
            .ok_or_else(|| CkptError::format(&index, "no `weight_map` object"))?;
        let mut files: Vec<String> = map
            .values()
            .filter_map(|f| f.as_str().map(str::to_string))
            .collect();
        files.sort();
        files.dedup();
        return Ok(files.into_iter().map(|f| dir.join(f)).collect());
    }
    let single = dir.join("model.safetensors");
    if single.is_file() {
        return Ok(vec![single]);
    }
    Err(CkptError::Detect {
        path: dir.to_path_buf(),
        reason: "no model.safetensors or model.safetensors.index.json".into(),
    })
}

impl HfModel {
    /// Opens an HF folder; `padded_vocab` pads the vocabulary as the target Megatron layout needs.
    pub fn open(dir: &Path, padded_vocab: Option<usize>) -> Result<HfModel> {
        let mut spec = spec_from_config(&dir.join("config.json"))?;
        let mut tensors = HashMap::new();
        for f in safetensors_files(dir)? {
            for e in StFile::open(&f)?.entries {
                tensors.insert(e.name.clone(), e);
            }
        }
        if let Some(e) = tensors.get("model.embed_tokens.weight") {
            spec.dtype = e.dtype;
        }
        spec.padded_vocab = padded_vocab.unwrap_or(spec.vocab).max(spec.vocab);
        spec.check(1)
            .map_err(|r| CkptError::format(dir.join("config.json"), r))?;
        let table = hf_tensors(&spec);
        for t in &table {
            let e = tensors.get(&t.name).ok_or_else(|| {
                CkptError::format(
                    dir,
                    format!("tensor `{}` is missing from the safetensors files", t.name),
                )
            })?;
            if e.shape != t.shape || e.dtype != spec.dtype {
                return Err(CkptError::format(
                    dir,
                    format!(
                        "`{}` is {:?} {:?}; config.json implies {:?} {:?}",
                        t.name, e.shape, e.dtype, t.shape, spec.dtype
                    ),
                ));
            }
        }
        let mut sources = HashMap::new();
        for p in spec.params().into_iter().chain([Param::Output]) {
            sources.insert(p, param_sources(&spec, &table, p));
        }
        Ok(HfModel {
            dir: dir.to_path_buf(),
            spec,
            tensors,
            sources,
        })
    }
}

impl CanonicalSource for HfModel {
    fn spec(&self) -> &ModelSpec {
        &self.spec
    }

    fn read_rows(&self, p: Param, rows: Range<usize>, out: &mut [u8]) -> Result<()> {
        let rb = self.spec.row_bytes(p);
        if out.len() != rows.len() * rb {
            return Err(CkptError::format(
                &self.dir,
                format!(
                    "{p:?}: buffer of {} bytes for {} rows",
                    out.len(),
                    rows.len()
                ),
            ));
        }
        out.fill(0); // rows no HF tensor covers are vocabulary padding
        let srcs = self
            .sources
            .get(&p)
            .ok_or_else(|| CkptError::format(&self.dir, format!("no source for {p:?}")))?;
        for (name, seg) in srcs {
            let a = seg.param_rows.start.max(rows.start);
            let b = seg.param_rows.end.min(rows.end);
            if a >= b {
                continue;
            }
            let hf_row = seg.hf_rows.start + (a - seg.param_rows.start);
            let e = &self.tensors[name];
            e.read_at(
                (hf_row * rb) as u64,
                &mut out[(a - rows.start) * rb..(b - rows.start) * rb],
            )?;
        }
        Ok(())
    }
}
