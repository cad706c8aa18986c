//! The front for `ferry convert`: detect the source format, open it as a canonical source,
//! and write the requested target. Also [`inspect`] for `ferry convert --inspect`.

use std::path::{Path, PathBuf};
use std::time::Instant;

use serde::Serialize;

use crate::dtype::DType;
use crate::error::{CkptError, Result, io_err};
use crate::hf::{HfModel, HfWriteOptions, Progress, write_hf};
use crate::megatron::dist::DistCheckpoint;
use crate::megatron::legacy::{LegacyCheckpoint, ReadOptions, rank_files};
use crate::megatron::writer::{MegatronWriteOptions, write_legacy};
use crate::megatron::{CanonicalSource, Parallel, resolve_iteration_dir};
use crate::model::{Arch, ModelSpec, hf_tensors, pad_vocab};

/// A checkpoint format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Format {
    /// Megatron legacy (`mp_rank_*/model_optim_rng.pt`).
    MegatronLegacy,
    /// Megatron `torch_dist` (DCP `.metadata` + `*.distcp`).
    MegatronDist,
    /// Hugging Face folder (`config.json` + safetensors).
    Hf,
}

/// What to convert to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Target {
    /// Hugging Face safetensors.
    Hf,
    /// Megatron legacy at a tensor/pipeline layout.
    Megatron {
        /// Tensor-parallel size.
        tp: usize,
        /// Pipeline-parallel size.
        pp: usize,
    },
}

/// Options for [`convert`]; `Default` converts to HF with 5 GB shards.
#[derive(Debug, Clone)]
pub struct ConvertOptions {
    /// Target format.
    pub to: Target,
    /// Source iteration to read (default: the tracker's).
    pub iteration: Option<u64>,
    /// True vocabulary size, when the source does not record it.
    pub vocab_size: Option<usize>,
    /// Force the HF architecture.
    pub arch: Option<Arch>,
    /// Largest HF shard in bytes.
    pub shard_bytes: u64,
    /// Worker threads.
    pub workers: usize,
    /// Copy tokenizer files from here (HF target).
    pub tokenizer_dir: Option<PathBuf>,
    /// Megatron's `make_vocab_size_divisible_by` (Megatron target).
    pub make_vocab_size_divisible_by: usize,
    /// Virtual pipeline chunks per stage for a Megatron target (1: none).
    pub vpp: usize,
    /// Iteration folder for a Megatron target (`None`: `release`).
    pub target_iteration: Option<u64>,
    /// Write into a non-empty destination.
    pub overwrite: bool,
}

impl Default for ConvertOptions {
    fn default() -> Self {
        ConvertOptions {
            to: Target::Hf,
            iteration: None,
            vocab_size: None,
            arch: None,
            shard_bytes: crate::hf::DEFAULT_SHARD_BYTES,
            workers: 2,
            tokenizer_dir: None,
            make_vocab_size_divisible_by: 128,
            vpp: 1,
            target_iteration: None,
            overwrite: false,
        }
    }
}

/// What a conversion did.
#[derive(Debug, Clone, Serialize)]
pub struct ConvertReport {
    /// Detected source format.
    pub source_format: Format,
    /// Target written.
    pub target: Target,
    /// The model.
    pub spec: ModelSpec,
    /// Source parallel layout (Megatron sources).
    pub source_parallel: Option<Parallel>,
    /// Tensor bytes written.
    pub bytes: u64,
    /// Wall time in seconds.
    pub seconds: f64,
}

/// Detects the format of a checkpoint folder.
pub fn detect(src: &Path) -> Result<Format> {
    if !src.is_dir() {
        return Err(CkptError::Detect {
            path: src.to_path_buf(),
            reason: "not a directory".into(),
        });
    }
    if src.join("config.json").is_file()
        && (src.join("model.safetensors").is_file()
            || src.join("model.safetensors.index.json").is_file())
    {
        return Ok(Format::Hf);
    }
    let (dir, _) = resolve_iteration_dir(src, None)?;
    if dir.join(".metadata").is_file() || dir.join("metadata.json").is_file() {
        return Ok(Format::MegatronDist);
    }
    if dir.is_dir() && !rank_files(&dir)?.is_empty() {
        return Ok(Format::MegatronLegacy);
    }
    Err(CkptError::Detect {
        path: src.to_path_buf(),
        reason: "expected an HF folder (config.json + safetensors), a Megatron legacy folder (mp_rank_*), or torch_dist (.metadata)".into(),
    })
}

/// A source opened as canonical parameters.
pub enum Opened {
    /// Megatron legacy.
    Legacy(LegacyCheckpoint),
    /// Megatron torch_dist.
    Dist(DistCheckpoint),
    /// Hugging Face.
    Hf(HfModel),
}

impl Opened {
    /// The canonical view.
    pub fn source(&self) -> &dyn CanonicalSource {
        match self {
            Opened::Legacy(c) => c,
            Opened::Dist(c) => c,
            Opened::Hf(c) => c,
        }
    }

    /// Parallel layout (Megatron sources).
    pub fn parallel(&self) -> Option<Parallel> {
        match self {
            Opened::Legacy(c) => Some(c.parallel),
            Opened::Dist(c) => Some(c.parallel),
            Opened::Hf(_) => None,
        }
    }
}

/// Opens a source of a known format (HF is padded for `target_tp`).
pub fn open(src: &Path, format: Format, opts: &ConvertOptions) -> Result<Opened> {
    let ro = ReadOptions {
        iteration: opts.iteration,
        vocab_size: opts.vocab_size,
        arch: opts.arch,
    };
    Ok(match format {
        Format::MegatronLegacy => Opened::Legacy(LegacyCheckpoint::open(src, &ro)?),
        Format::MegatronDist => Opened::Dist(DistCheckpoint::open(src, &ro)?),
        Format::Hf => {
            let tp = match opts.to {
                Target::Megatron { tp, .. } => tp,
                Target::Hf => 1,
            };
            let spec = crate::hf::spec_from_config(&src.join("config.json"))?;
            Opened::Hf(HfModel::open(
                src,
                Some(pad_vocab(spec.vocab, opts.make_vocab_size_divisible_by, tp)),
            )?)
        }
    })
}

/// Converts the checkpoint at `src` into `dst` (format detected), calling `progress` as tensors land.
pub fn convert(
    src: &Path,
    dst: &Path,
    opts: &ConvertOptions,
    progress: &dyn Fn(Progress),
) -> Result<ConvertReport> {
    let t0 = Instant::now();
    let format = detect(src)?;
    if dst.exists()
        && !opts.overwrite
        && std::fs::read_dir(dst)
            .map_err(io_err(dst))?
            .next()
            .is_some()
    {
        return Err(CkptError::Option {
            field: "dst",
            reason: format!(
                "{} exists and is not empty; choose an empty folder or pass --overwrite",
                dst.display()
            ),
        });
    }
    if opts.workers == 0 {
        return Err(CkptError::Option {
            field: "workers",
            reason: "must be at least 1".into(),
        });
    }
    let opened = open(src, format, opts)?;
    let source = opened.source();
    let bytes = match opts.to {
        Target::Hf => {
            if format == Format::Hf {
                return Err(CkptError::Option {
                    field: "to",
                    reason: "the source is already HF; use --to megatron".into(),
                });
            }
            let mut meta = std::collections::BTreeMap::new();
            meta.insert("ferry_source".into(), src.display().to_string());
            let ho = HfWriteOptions {
                shard_bytes: opts.shard_bytes,
                workers: opts.workers,
                tokenizer_dir: opts.tokenizer_dir.clone(),
                metadata: meta,
            };
            write_hf(source, dst, &ho, progress)?.bytes
        }
        Target::Megatron { tp, pp } => {
            let mo = MegatronWriteOptions {
                tp,
                pp,
                vpp: opts.vpp,
                iteration: opts.target_iteration,
                make_vocab_size_divisible_by: opts.make_vocab_size_divisible_by,
            };
            write_legacy(source, dst, &mo, progress)?
        }
    };
    Ok(ConvertReport {
        source_format: format,
        target: opts.to,
        spec: source.spec().clone(),
        source_parallel: opened.parallel(),
        bytes,
        seconds: t0.elapsed().as_secs_f64(),
    })
}

/// One row of the parameter table printed by `--inspect` (HF names, as converted).
#[derive(Debug, Clone, Serialize)]
pub struct ParamRow {
    /// HF tensor name.
    pub name: String,
    /// Shape.
    pub shape: Vec<usize>,
    /// Element type.
    pub dtype: DType,
}

/// What `ferry convert --inspect` shows.
#[derive(Debug, Clone, Serialize)]
pub struct Inspection {
    /// Detected format.
    pub format: Format,
    /// The model.
    pub spec: ModelSpec,
    /// Parallel layout (Megatron sources).
    pub parallel: Option<Parallel>,
    /// Parameter count.
    pub parameters: u64,
    /// The tensors an HF conversion would write.
    pub tensors: Vec<ParamRow>,
}

impl Inspection {
    /// A plain-text summary and parameter table for terminals (`ferry convert --inspect`).
    pub fn render_table(&self) -> String {
        use std::fmt::Write as _;
        let s = &self.spec;
        let mut out = String::new();
        let _ = writeln!(out, "format:     {:?}", self.format);
        if let Some(p) = self.parallel {
            let _ = writeln!(out, "parallel:   tp={} pp={} vpp={}", p.tp, p.pp, p.vpp);
        }
        let _ = writeln!(
            out,
            "model:      {} ({} layers, hidden {}, ffn {}, heads {}/{} kv, head_dim {})",
            s.arch.class(),
            s.num_layers,
            s.hidden,
            s.ffn,
            s.heads,
            s.groups,
            s.head_dim
        );
        let _ = writeln!(
            out,
            "vocab:      {} (padded {}){}",
            s.vocab,
            s.padded_vocab,
            if s.tied { ", tied embeddings" } else { "" }
        );
        let _ = writeln!(out, "dtype:      {}", s.dtype.torch_name());
        let _ = writeln!(out, "parameters: {}", self.parameters);
        let w = self
            .tensors
            .iter()
            .map(|t| t.name.len())
            .max()
            .unwrap_or(4)
            .max(4);
        let _ = writeln!(out, "{:<w$}  {:<16}  dtype", "name", "shape");
        for t in &self.tensors {
            let _ = writeln!(
                out,
                "{:<w$}  {:<16}  {}",
                t.name,
                format!("{:?}", t.shape),
                t.dtype.safetensors_name()
            );
        }
        out
    }
}

/// Opens a checkpoint and describes it without converting anything.
pub fn inspect(src: &Path, opts: &ConvertOptions) -> Result<Inspection> {
    let format = detect(src)?;
    let opened = open(src, format, opts)?;
    let spec = opened.source().spec().clone();
    let tensors: Vec<ParamRow> = hf_tensors(&spec)
        .into_iter()
        .map(|t| ParamRow {
            name: t.name,
            shape: t.shape,
            dtype: spec.dtype,
        })
        .collect();
    let parameters = tensors
        .iter()
        .map(|t| t.shape.iter().product::<usize>() as u64)
        .sum();
    Ok(Inspection {
        format,
        spec,
        parallel: opened.parallel(),
        parameters,
        tensors,
    })
}
