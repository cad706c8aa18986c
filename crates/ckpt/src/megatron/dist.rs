//! Megatron `torch_dist` checkpoints (megatron-core `dist_checkpointing`, PyTorch DCP
//! underneath): `metadata.json`, the pickled `.metadata` (global shapes, chunk offsets, and
//! where each item lives), and `__R_N.distcp` files of concatenated `torch.save` items.
//! Layer parameters are stacked on a leading global-layer axis; the common state (`args`) is
//! `common.pt` in older versions and a `common_state` item in megatron-core 0.19.

use std::collections::HashMap;
use std::ops::Range;
use std::path::{Path, PathBuf};

use super::legacy::ReadOptions;
use super::{
    CanonicalSource, NameKind, Parallel, classify, layer_suffix, resolve_iteration_dir,
    spec_from_args,
};
use crate::blob::Blob;
use crate::error::{CkptError, Result, io_err};
use crate::model::{ModelSpec, Param};
use crate::pickle::{Pickle, Value, as_int, as_str};
use crate::torch::{TensorView, TorchFile};

/// Largest `.metadata` file accepted.
pub const MAX_METADATA: u64 = 1 << 30;

/// One saved chunk of a global tensor, normalised to `[A, R, C]` (A = stacked layers or 1).
#[derive(Debug, Clone)]
struct Chunk {
    off: [usize; 3],
    size: [usize; 3],
    view: TensorView,
}

#[derive(Debug, Clone)]
struct GlobalTensor {
    /// Normalised global shape `[A, R, C]`.
    shape: [usize; 3],
    /// Global shape as saved.
    full: Vec<usize>,
    chunks: Vec<Chunk>,
    stacked: bool,
}

/// An item's location: file, byte offset, length.
#[derive(Debug, Clone)]
struct Location {
    file: String,
    offset: u64,
    length: u64,
}

/// An opened `torch_dist` checkpoint.
#[derive(Debug)]
pub struct DistCheckpoint {
    /// The iteration folder.
    pub dir: PathBuf,
    /// The model.
    pub spec: ModelSpec,
    /// Parallel layout recorded in `args` (the data itself is layout-free).
    pub parallel: Parallel,
    /// Iteration from the tracker.
    pub iteration: Option<u64>,
    tensors: HashMap<String, GlobalTensor>,
    map: HashMap<Param, (String, Option<usize>)>,
}

fn ints(p: &Pickle, v: &Value) -> Option<Vec<usize>> {
    p.seq(v)?
        .iter()
        .map(|x| as_int(x).and_then(|i| usize::try_from(i).ok()))
        .collect()
}

fn normalize(full: &[usize], stacked: bool) -> Option<[usize; 3]> {
    let (a, rest) = if stacked {
        (*full.first()?, &full[1..])
    } else {
        (1, full)
    };
    match rest {
        [] => Some([a, 1, 1]),
        [r] => Some([a, *r, 1]),
        [r, c] => Some([a, *r, *c]),
        _ => None,
    }
}

fn normalize_off(off: &[usize], stacked: bool) -> [usize; 3] {
    let (a, rest) = if stacked {
        (
            off.first().copied().unwrap_or(0),
            off.get(1..).unwrap_or(&[]),
        )
    } else {
        (0, off)
    };
    [
        a,
        rest.first().copied().unwrap_or(0),
        rest.get(1).copied().unwrap_or(0),
    ]
}

impl DistCheckpoint {
    /// Opens the checkpoint under `root` (tracker folder or iteration folder).
    pub fn open(root: &Path, opts: &ReadOptions) -> Result<DistCheckpoint> {
        let (dir, iteration) = resolve_iteration_dir(root, opts.iteration)?;
        let mj = dir.join("metadata.json");
        if mj.is_file() {
            let text = std::fs::read_to_string(&mj).map_err(io_err(&mj))?;
            let v: serde_json::Value = serde_json::from_str(&text)
                .map_err(|e| CkptError::format(&mj, format!("not JSON: {e}")))?;
            let backend = v
                .get("sharded_backend")
                .and_then(|b| b.as_str())
                .unwrap_or("");
            if backend != "torch_dist" {
                return Err(CkptError::format(
                    &mj,
                    format!("sharded_backend `{backend}` is not supported (only torch_dist)"),
                ));
            }
        }
        let mpath = dir.join(".metadata");
        let mblob = Blob::open(&mpath)?;
        if mblob.len() > MAX_METADATA {
            return Err(CkptError::format(
                &mpath,
                "larger than 1 GiB; refusing to parse",
            ));
        }
        let meta = crate::pickle::parse(&mblob.read_all()?).map_err(|e| e.in_file(&mpath))?;
        let root_v = meta.root.clone();
        let sdm = meta
            .attr(&root_v, "state_dict_metadata")
            .and_then(|v| meta.dict(v))
            .ok_or_else(|| {
                CkptError::format(&mpath, "no state_dict_metadata; not a DCP metadata file")
            })?;
        let sd = meta
            .attr(&root_v, "storage_data")
            .and_then(|v| meta.dict(v))
            .ok_or_else(|| {
                CkptError::format(
                    &mpath,
                    "no storage_data; written by an unsupported storage writer",
                )
            })?;
        // (fqn, offsets) → location
        let mut locs: HashMap<(String, Vec<usize>), Location> = HashMap::new();
        for (k, v) in sd {
            let fqn = meta
                .attr(k, "fqn")
                .and_then(as_str)
                .unwrap_or("")
                .to_string();
            let off = meta
                .attr(k, "offset")
                .and_then(|o| ints(&meta, o))
                .unwrap_or_default();
            let file = meta.attr(v, "relative_path").and_then(as_str);
            let offset = meta.attr(v, "offset").and_then(as_int);
            let length = meta.attr(v, "length").and_then(as_int);
            let (Some(file), Some(offset), Some(length)) = (file, offset, length) else {
                return Err(CkptError::format(
                    &mpath,
                    format!("storage entry for `{fqn}` lacks relative_path/offset/length"),
                ));
            };
            if file.contains('/') || file.contains("..") || offset < 0 || length < 0 {
                return Err(CkptError::format(
                    &mpath,
                    format!("storage entry for `{fqn}` names an invalid file `{file}` or range"),
                ));
            }
            locs.insert(
                (fqn, off),
                Location {
                    file: file.to_string(),
                    offset: offset as u64,
                    length: length as u64,
                },
            );
        }
        let mut files: HashMap<String, Blob> = HashMap::new();
        let mut item = |loc: &Location| -> Result<Blob> {
            if !files.contains_key(&loc.file) {
                files.insert(loc.file.clone(), Blob::open(&dir.join(&loc.file))?);
            }
            files[&loc.file]
                .slice(loc.offset, loc.length)
                .map_err(|e| e.in_file(dir.join(&loc.file)))
        };
        // Common state: args.
        let common = dir.join("common.pt");
        let (cpk, args) = if common.is_file() {
            let tf = TorchFile::open(&common)?;
            let a = tf.pickle.get(tf.root(), "args").cloned();
            (tf.pickle, a)
        } else {
            let key = locs
                .keys()
                .find(|(f, _)| f.starts_with("common_state"))
                .cloned()
                .ok_or_else(|| {
                    CkptError::format(
                        &dir,
                        "neither common.pt nor a common_state item; cannot find `args`",
                    )
                })?;
            let tf = TorchFile::from_blob(item(&locs[&key])?)
                .map_err(|e| e.in_file(dir.join(&locs[&key].file)))?;
            let r = tf.root().clone();
            let d = tf
                .pickle
                .seq(&r)
                .and_then(|s| s.first().cloned())
                .unwrap_or(r);
            let a = tf.pickle.get(&d, "args").cloned();
            (tf.pickle, a)
        };
        let args = args.ok_or_else(|| CkptError::format(&dir, "the common state has no `args`"))?;
        let (mut spec, apar) = spec_from_args(&cpk, &args, &dir, opts.vocab_size)?;
        if let Some(a) = opts.arch {
            spec.arch = a;
        }
        // Tensors.
        let mut tensors = HashMap::new();
        let mut map = HashMap::new();
        for (k, v) in sdm {
            let Some(fqn) = as_str(k) else { continue };
            let prefix_stripped = fqn.strip_prefix("model.").unwrap_or(fqn);
            let (Some(size), Some(chunks)) = (
                meta.attr(v, "size").and_then(|s| ints(&meta, s)),
                meta.attr(v, "chunks"),
            ) else {
                continue; // bytes items (common state, _extra_state, optimizer scalars)
            };
            let kind = classify(prefix_stripped);
            let (param, layer, stacked) = match kind {
                Some(NameKind::Skip) => continue,
                Some(NameKind::Model(p)) => (p, None, false),
                Some(NameKind::Layer(i, lp)) => (Param::Layer(i, lp), Some(i), false),
                None => match prefix_stripped
                    .strip_prefix("decoder.layers.")
                    .and_then(layer_suffix)
                {
                    Some(lp) => (Param::Layer(0, lp), None, true),
                    None if fqn.starts_with("optimizer") || fqn.starts_with("rng_state") => {
                        continue;
                    }
                    None => {
                        return Err(CkptError::format(
                            &mpath,
                            format!(
                                "unknown tensor `{fqn}` (only dense GPT with RMSNorm/SwiGLU is supported)"
                            ),
                        ));
                    }
                },
            };
            if stacked && size.first() != Some(&spec.num_layers) {
                return Err(CkptError::format(
                    &mpath,
                    format!(
                        "`{fqn}`: stacked shape {size:?} does not lead with the {} layers",
                        spec.num_layers
                    ),
                ));
            }
            let shape3 = normalize(&size, stacked).ok_or_else(|| {
                CkptError::format(
                    &mpath,
                    format!("`{fqn}`: global shape {size:?} is not supported"),
                )
            })?;
            let mut out_chunks = Vec::new();
            for c in meta.seq(chunks).unwrap_or(&[]) {
                let (Some(off), Some(sz)) = (
                    meta.attr(c, "offsets").and_then(|o| ints(&meta, o)),
                    meta.attr(c, "sizes").and_then(|o| ints(&meta, o)),
                ) else {
                    return Err(CkptError::format(
                        &mpath,
                        format!("`{fqn}`: chunk without offsets/sizes"),
                    ));
                };
                let loc = locs.get(&(fqn.to_string(), off.clone())).ok_or_else(|| {
                    CkptError::format(
                        &mpath,
                        format!("`{fqn}`: chunk at {off:?} has no storage entry"),
                    )
                })?;
                let path = dir.join(&loc.file);
                let tf = TorchFile::from_blob(item(loc)?).map_err(|e| e.in_file(&path))?;
                let view = tf
                    .tensor_of(tf.root())
                    .ok_or_else(|| {
                        CkptError::format(
                            &path,
                            format!("`{fqn}` item at {} is not a tensor", loc.offset),
                        )
                    })?
                    .map_err(|e| e.in_file(&path))?;
                if view.shape != sz {
                    return Err(CkptError::format(
                        &path,
                        format!(
                            "`{fqn}` chunk shape {:?} differs from metadata {sz:?}",
                            view.shape
                        ),
                    ));
                }
                let o3 = normalize_off(&off, stacked);
                let s3 = normalize(&sz, stacked).unwrap_or([0; 3]);
                if (0..3).any(|d| o3[d] + s3[d] > shape3[d]) {
                    return Err(CkptError::format(
                        &mpath,
                        format!("`{fqn}`: chunk {off:?}+{sz:?} lies outside {size:?}"),
                    ));
                }
                out_chunks.push(Chunk {
                    off: o3,
                    size: s3,
                    view,
                });
            }
            tensors.insert(
                fqn.to_string(),
                GlobalTensor {
                    shape: shape3,
                    full: size.clone(),
                    chunks: out_chunks,
                    stacked,
                },
            );
            match param {
                Param::Layer(_, lp) if stacked => {
                    for l in 0..shape3[0] {
                        map.insert(Param::Layer(l, lp), (fqn.to_string(), Some(l)));
                    }
                }
                _ => {
                    map.insert(param, (fqn.to_string(), layer.map(|_| 0)));
                }
            }
        }
        let (emb_name, _) = map
            .get(&Param::Embedding)
            .ok_or_else(|| CkptError::format(&mpath, "no word embedding tensor"))?;
        let emb = &tensors[emb_name];
        spec.padded_vocab = emb.full[0];
        spec.dtype = emb
            .chunks
            .first()
            .map(|c| c.view.dtype)
            .ok_or_else(|| CkptError::format(&mpath, "embedding has no chunks"))?;
        if spec.vocab > spec.padded_vocab {
            spec.vocab = spec.padded_vocab;
        }
        spec.check(1).map_err(|r| CkptError::format(&dir, r))?;
        for p in spec.params() {
            let (name, layer) = map
                .get(&p)
                .ok_or_else(|| CkptError::format(&mpath, format!("parameter {p:?} is missing")))?;
            let t = &tensors[name];
            let per: Vec<usize> = if t.stacked {
                t.full[1..].to_vec()
            } else {
                t.full.clone()
            };
            if per != spec.shape(p) || layer.is_some_and(|l| l >= t.shape[0]) {
                return Err(CkptError::format(
                    &mpath,
                    format!(
                        "`{name}`: shape {:?} does not match the model ({:?} per layer)",
                        t.full,
                        spec.shape(p)
                    ),
                ));
            }
            if t.chunks.iter().any(|c| c.view.dtype != spec.dtype) {
                return Err(CkptError::format(
                    &mpath,
                    format!("`{name}`: mixed dtypes are not supported"),
                ));
            }
        }
        let parallel = Parallel {
            tp: apar.tp.unwrap_or(1),
            pp: apar.pp.unwrap_or(1),
            vpp: apar.vpp.unwrap_or(1),
        };
        Ok(DistCheckpoint {
            dir,
            spec,
            parallel,
            iteration,
            tensors,
            map,
        })
    }
}

impl CanonicalSource for DistCheckpoint {
    fn spec(&self) -> &ModelSpec {
        &self.spec
    }

    fn read_rows(&self, p: Param, rows: Range<usize>, out: &mut [u8]) -> Result<()> {
        let (name, layer) = self.map.get(&p).ok_or_else(|| {
            CkptError::format(
                &self.dir,
                format!("parameter {p:?} is not in this checkpoint"),
            )
        })?;
        let t = &self.tensors[name];
        let a = layer.unwrap_or(0);
        let [_, gr, gc] = t.shape;
        let es = self.spec.dtype.size();
        if rows.end > gr || out.len() != rows.len() * gc * es {
            return Err(CkptError::format(
                &self.dir,
                format!(
                    "`{name}`: rows {rows:?} / buffer {} do not fit {:?}",
                    out.len(),
                    t.full
                ),
            ));
        }
        let mut covered = 0usize;
        let mut tmp = Vec::new();
        for c in &t.chunks {
            if a < c.off[0] || a >= c.off[0] + c.size[0] {
                continue;
            }
            let r0 = rows.start.max(c.off[1]);
            let r1 = rows.end.min(c.off[1] + c.size[1]);
            if r0 >= r1 {
                continue;
            }
            let cc = c.size[2];
            let start = ((a - c.off[0]) * c.size[1] + (r0 - c.off[1])) * cc;
            let n = (r1 - r0) * cc;
            covered += n;
            if cc == gc {
                let o = (r0 - rows.start) * gc * es;
                c.view.read_flat(start, &mut out[o..o + n * es])?;
            } else {
                tmp.resize(n * es, 0);
                c.view.read_flat(start, &mut tmp)?;
                for (i, r) in (r0..r1).enumerate() {
                    let dst = ((r - rows.start) * gc + c.off[2]) * es;
                    out[dst..dst + cc * es].copy_from_slice(&tmp[i * cc * es..(i + 1) * cc * es]);
                }
            }
        }
        if covered != rows.len() * gc {
            return Err(CkptError::format(
                &self.dir,
                format!(
                    "`{name}`: saved chunks cover {covered} of {} requested elements (missing or overlapping shards)",
                    rows.len() * gc
                ),
            ));
        }
        Ok(())
    }
}
