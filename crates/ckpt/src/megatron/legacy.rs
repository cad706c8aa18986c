//! Megatron legacy checkpoints: `iter_NNNNNNN/mp_rank_TT[_PPP]/model_optim_rng.pt`, one
//! `torch.save` file per (TP, PP) rank holding `model` (or `model0..` with virtual pipeline)
//! and `args`. Opening parses only each file's pickle; tensor bytes are read when a
//! canonical row range is requested.

use std::collections::{BTreeMap, HashMap};
use std::ops::Range;
use std::path::{Path, PathBuf};

use super::writer::local_shape;
use super::{CanonicalSource, NameKind, Parallel, classify, resolve_iteration_dir, spec_from_args};
use crate::error::{CkptError, Result, io_err};
use crate::model::{Arch, ModelSpec, Param, Split};
use crate::pickle::Value;
use crate::torch::{TensorView, TorchFile};

/// An opened legacy checkpoint: layout, model and a view on every rank's tensors.
#[derive(Debug)]
pub struct LegacyCheckpoint {
    /// The iteration folder that was read.
    pub dir: PathBuf,
    /// The model.
    pub spec: ModelSpec,
    /// The parallel layout found on disk.
    pub parallel: Parallel,
    /// The iteration, when the tracker names one.
    pub iteration: Option<u64>,
    shards: HashMap<Param, Vec<TensorView>>,
}

/// Options for reading a Megatron checkpoint.
#[derive(Debug, Clone, Default)]
pub struct ReadOptions {
    /// Read this iteration instead of the tracker's.
    pub iteration: Option<u64>,
    /// True vocabulary size when `args` lacks it.
    pub vocab_size: Option<usize>,
    /// Force the HF architecture instead of inferring it from `args`.
    pub arch: Option<Arch>,
}

/// Lists `mp_rank_*` folders: (tp rank, pp rank) → checkpoint file.
pub fn rank_files(dir: &Path) -> Result<BTreeMap<(usize, usize), PathBuf>> {
    let mut out = BTreeMap::new();
    for e in std::fs::read_dir(dir).map_err(io_err(dir))? {
        let e = e.map_err(io_err(dir))?;
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(rest) = name.strip_prefix("mp_rank_") else {
            continue;
        };
        let parts: Vec<&str> = rest.split('_').collect();
        let nums: Option<Vec<usize>> = parts.iter().map(|p| p.parse().ok()).collect();
        let (tp, pp) = match nums.as_deref() {
            Some([t]) => (*t, 0),
            Some([t, p]) => (*t, *p),
            Some([_, _, _]) => {
                return Err(CkptError::format(
                    dir.join(&name),
                    "expert-parallel rank folders are not supported yet",
                ));
            }
            _ => continue,
        };
        let file = ["model_optim_rng.pt", "model_rng.pt"]
            .iter()
            .map(|f| e.path().join(f))
            .find(|p| p.is_file())
            .ok_or_else(|| {
                CkptError::format(
                    e.path(),
                    "rank folder has no model_optim_rng.pt (or model_rng.pt)",
                )
            })?;
        out.insert((tp, pp), file);
    }
    Ok(out)
}

impl LegacyCheckpoint {
    /// Opens the checkpoint under `root` (the folder holding the tracker, or an iteration folder).
    pub fn open(root: &Path, opts: &ReadOptions) -> Result<LegacyCheckpoint> {
        let (dir, iteration) = resolve_iteration_dir(root, opts.iteration)?;
        let files = rank_files(&dir)?;
        if files.is_empty() {
            return Err(CkptError::Detect {
                path: dir,
                reason: "no mp_rank_* folders".into(),
            });
        }
        let tp = files.keys().map(|k| k.0).max().unwrap_or(0) + 1;
        let pp = files.keys().map(|k| k.1).max().unwrap_or(0) + 1;
        for t in 0..tp {
            for p in 0..pp {
                if !files.contains_key(&(t, p)) {
                    return Err(CkptError::format(
                        &dir,
                        format!(
                            "rank folder for tp {t}, pp {p} is missing (found a {tp}x{pp} grid)"
                        ),
                    ));
                }
            }
        }
        let first = TorchFile::open(&files[&(0, 0)])?;
        let args = first
            .pickle
            .get(first.root(), "args")
            .cloned()
            .ok_or_else(|| {
                CkptError::format(
                    &files[&(0, 0)],
                    "no `args` entry; cannot discover the model size",
                )
            })?;
        let (mut spec, apar) =
            spec_from_args(&first.pickle, &args, &files[&(0, 0)], opts.vocab_size)?;
        if let Some(a) = opts.arch {
            spec.arch = a;
        }
        if let Some(t) = apar.tp
            && t != tp
        {
            return Err(CkptError::format(
                &dir,
                format!("args say tensor parallel {t} but {tp} TP rank folders exist"),
            ));
        }
        if let Some(p) = apar.pp
            && p != pp
        {
            return Err(CkptError::format(
                &dir,
                format!("args say pipeline parallel {p} but {pp} PP rank folders exist"),
            ));
        }
        let chunk_keys: Vec<String> = match first.pickle.get(first.root(), "model") {
            Some(_) => vec!["model".into()],
            None => (0..)
                .map(|v| format!("model{v}"))
                .take_while(|k| first.pickle.get(first.root(), k).is_some())
                .collect(),
        };
        if chunk_keys.is_empty() {
            return Err(CkptError::format(
                &files[&(0, 0)],
                "no `model` or `model0` entry in the checkpoint",
            ));
        }
        let vpp = chunk_keys.len();
        if spec.num_layers % (pp * vpp) != 0 {
            return Err(CkptError::format(
                &dir,
                format!(
                    "{} layers do not split evenly over {pp} stages x {vpp} chunks (uneven pipelines are not supported)",
                    spec.num_layers
                ),
            ));
        }
        let lc = spec.num_layers / (pp * vpp);
        let mut shards: HashMap<Param, Vec<Option<TensorView>>> = HashMap::new();
        let mut opened = Some(first);
        for (&(t, p), path) in &files {
            let tf = match opened.take() {
                Some(f) if (t, p) == (0, 0) => f,
                _ => TorchFile::open(path)?,
            };
            for (v, key) in chunk_keys.iter().enumerate() {
                let model = tf
                    .pickle
                    .get(tf.root(), key)
                    .ok_or_else(|| CkptError::format(path, format!("no `{key}` entry")))?;
                let mut flat: Vec<(String, Value)> = Vec::new();
                tf.pickle.flatten_dict(model, "", &mut flat);
                for (name, val) in flat {
                    let normalized =
                        name.replace("language_model.transformer.", "language_model.encoder.");
                    let kind = classify(&normalized);
                    let Some(tv) = tf.tensor_of(&val) else {
                        continue; // _extra_state (None / BytesIO) and other non-tensors
                    };
                    let param = match kind {
                        Some(NameKind::Skip) => continue,
                        None => {
                            return Err(CkptError::format(
                                path,
                                format!(
                                    "unknown parameter `{name}` (only dense GPT with RMSNorm/SwiGLU is supported)"
                                ),
                            ));
                        }
                        Some(NameKind::Model(Param::Embedding)) if p != 0 || v != 0 => continue,
                        Some(NameKind::Model(Param::Output))
                            if spec.tied || p != pp - 1 || v != vpp - 1 =>
                        {
                            continue;
                        }
                        Some(NameKind::Model(m)) => m,
                        Some(NameKind::Layer(i, lp)) => {
                            if i >= lc {
                                return Err(CkptError::format(
                                    path,
                                    format!(
                                        "`{name}`: local layer {i} but each chunk holds {lc} layers"
                                    ),
                                ));
                            }
                            Param::Layer(v * pp * lc + p * lc + i, lp)
                        }
                    };
                    let tv = tv.map_err(|e| e.in_file(path))?;
                    let slot = shards.entry(param).or_insert_with(|| vec![None; tp]);
                    slot[t] = Some(tv);
                }
            }
        }
        // The embedding fixes the padded vocabulary and the dtype.
        let emb = shards
            .get(&Param::Embedding)
            .and_then(|s| s[0].as_ref())
            .ok_or_else(|| {
                CkptError::format(&dir, "no word embedding on the first pipeline stage")
            })?;
        spec.padded_vocab = emb.shape[0] * tp;
        spec.dtype = emb.dtype;
        if spec.vocab > spec.padded_vocab {
            spec.vocab = spec.padded_vocab;
        }
        spec.check(tp).map_err(|r| CkptError::format(&dir, r))?;
        let mut done = HashMap::new();
        for param in spec.params() {
            let slot = shards.remove(&param).ok_or_else(|| {
                CkptError::format(&dir, format!("parameter {param:?} is missing"))
            })?;
            let want = local_shape(&spec, param, tp);
            let mut views = Vec::with_capacity(tp);
            for (r, s) in slot.into_iter().enumerate() {
                let s = s.ok_or_else(|| {
                    CkptError::format(
                        &dir,
                        format!("parameter {param:?} is missing on tp rank {r}"),
                    )
                })?;
                if s.shape != want || s.dtype != spec.dtype {
                    return Err(CkptError::format(
                        &dir,
                        format!(
                            "{param:?} on tp rank {r}: shape {:?} {:?}, expected {want:?} {:?}",
                            s.shape, s.dtype, spec.dtype
                        ),
                    ));
                }
                views.push(s);
            }
            done.insert(param, views);
        }
        Ok(LegacyCheckpoint {
            dir,
            spec,
            parallel: Parallel { tp, pp, vpp },
            iteration,
            shards: done,
        })
    }
}

/// Reads canonical rows of a TP-split parameter from per-rank views (shared with torch_dist tests).
pub(crate) fn read_split_rows(
    spec: &ModelSpec,
    p: Param,
    shards: &[TensorView],
    rows: Range<usize>,
    out: &mut [u8],
    where_: &Path,
) -> Result<()> {
    let tp = shards.len();
    let rb = spec.row_bytes(p);
    if out.len() != rows.len() * rb {
        return Err(CkptError::format(
            where_,
            format!(
                "{p:?}: buffer of {} bytes for {} rows",
                out.len(),
                rows.len()
            ),
        ));
    }
    let shape = spec.shape(p);
    let es = spec.dtype.size();
    match spec.split(p) {
        Split::Replicated => {
            shards[0].read_flat(rows.start * rb / es, out)?;
            let mut other = vec![0u8; out.len()];
            for (r, s) in shards.iter().enumerate().skip(1) {
                s.read_flat(rows.start * rb / es, &mut other)?;
                if other != out {
                    return Err(CkptError::format(
                        where_,
                        format!("{p:?} should be identical on every TP rank but rank {r} differs"),
                    ));
                }
            }
        }
        Split::Rows | Split::GateUp => {
            let per = shape[0] / tp;
            let half = shape[0] / 2;
            let hper = half / tp;
            let locate = |i: usize| -> (usize, usize) {
                if spec.split(p) == Split::Rows {
                    (i / per, i % per)
                } else {
                    let (h, j) = (i / half, i % half);
                    (j / hper, h * hper + j % hper)
                }
            };
            let mut i = rows.start;
            while i < rows.end {
                let (rank, local) = locate(i);
                let mut n = 1;
                while i + n < rows.end && locate(i + n) == (rank, local + n) {
                    n += 1;
                }
                let o = (i - rows.start) * rb;
                shards[rank].read_flat(local * rb / es, &mut out[o..o + n * rb])?;
                i += n;
            }
        }
        Split::Cols => {
            let cols = shape[1];
            let lc = cols / tp;
            let mut tmp = vec![0u8; rows.len() * lc * es];
            for (r, s) in shards.iter().enumerate() {
                s.read_flat(rows.start * lc, &mut tmp)?;
                for row in 0..rows.len() {
                    let dst = row * cols * es + r * lc * es;
                    out[dst..dst + lc * es]
                        .copy_from_slice(&tmp[row * lc * es..(row + 1) * lc * es]);
                }
            }
        }
    }
    Ok(())
}

impl CanonicalSource for LegacyCheckpoint {
    fn spec(&self) -> &ModelSpec {
        &self.spec
    }

    fn read_rows(&self, p: Param, rows: Range<usize>, out: &mut [u8]) -> Result<()> {
        let shards = self.shards.get(&p).ok_or_else(|| {
            CkptError::format(
                &self.dir,
                format!("parameter {p:?} is not in this checkpoint"),
            )
        })?;
        read_split_rows(&self.spec, p, shards, rows, out, &self.dir)
    }
}
