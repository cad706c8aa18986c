//! Shared test helpers: fixture paths, an HF folder loader, and a minimal f32 reference forward
//! pass for Llama/Qwen2-style models (plain loops; enough for the tiny fixture models).

#![allow(dead_code)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use ferry_ckpt::DType;
use ferry_ckpt::hf::safetensors_files;
use ferry_ckpt::safetensors::StFile;

/// `<workspace root>/../shared/fixtures`.
pub fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/fixtures")
}

/// Tensors of an HF folder as f32, with shapes.
pub fn load_hf(dir: &Path) -> HashMap<String, (Vec<usize>, Vec<f32>)> {
    let mut out = HashMap::new();
    for f in safetensors_files(dir).unwrap() {
        for e in StFile::open(&f).unwrap().entries {
            assert_eq!(e.dtype, DType::F32, "{}", e.name);
            let b = e.read_all().unwrap();
            let v = b
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect();
            out.insert(e.name.clone(), (e.shape.clone(), v));
        }
    }
    out
}

/// The config fields the reference forward needs.
#[derive(Debug, Clone)]
pub struct Cfg {
    pub layers: usize,
    pub hidden: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    pub vocab: usize,
    pub eps: f32,
    pub theta: f64,
    pub tied: bool,
}

impl Cfg {
    pub fn read(dir: &Path) -> Cfg {
        let c: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("config.json")).unwrap())
                .unwrap();
        let u = |k: &str| c[k].as_u64().unwrap() as usize;
        Cfg {
            layers: u("num_hidden_layers"),
            hidden: u("hidden_size"),
            heads: u("num_attention_heads"),
            kv_heads: u("num_key_value_heads"),
            head_dim: u("head_dim"),
            vocab: u("vocab_size"),
            eps: c["rms_norm_eps"].as_f64().unwrap() as f32,
            theta: c["rope_theta"].as_f64().unwrap(),
            tied: c["tie_word_embeddings"].as_bool().unwrap(),
        }
    }
}

fn rmsnorm(x: &[f32], w: &[f32], eps: f32) -> Vec<f32> {
    let ms = x.iter().map(|v| v * v).sum::<f32>() / x.len() as f32;
    let r = 1.0 / (ms + eps).sqrt();
    x.iter().zip(w).map(|(a, b)| a * r * b).collect()
}

/// y = W x (+ b) with W `[out, in]`.
fn linear(x: &[f32], w: &[f32], b: Option<&[f32]>) -> Vec<f32> {
    let n = x.len();
    let out = w.len() / n;
    (0..out)
        .map(|o| {
            let row = &w[o * n..(o + 1) * n];
            let s: f32 = row.iter().zip(x).map(|(a, b)| a * b).sum();
            s + b.map_or(0.0, |b| b[o])
        })
        .collect()
}

fn rope(v: &mut [f32], pos: usize, hd: usize, theta: f64) {
    let half = hd / 2;
    for i in 0..half {
        let inv = 1.0 / theta.powf((2 * i) as f64 / hd as f64);
        let ang = pos as f64 * inv;
        let (s, c) = (ang.sin() as f32, ang.cos() as f32);
        let (a, b) = (v[i], v[i + half]);
        v[i] = a * c - b * s;
        v[i + half] = b * c + a * s;
    }
}

/// Logits `[seq, vocab]` for one sequence.
pub fn forward(cfg: &Cfg, w: &HashMap<String, (Vec<usize>, Vec<f32>)>, ids: &[i64]) -> Vec<f32> {
    let g = |n: &str| -> &[f32] { &w.get(n).unwrap_or_else(|| panic!("missing {n}")).1 };
    let opt = |n: &str| w.get(n).map(|t| t.1.as_slice());
    let (h, hd, nh, nk) = (cfg.hidden, cfg.head_dim, cfg.heads, cfg.kv_heads);
    let s = ids.len();
    let emb = g("model.embed_tokens.weight");
    let mut x: Vec<Vec<f32>> = ids
        .iter()
        .map(|&i| emb[i as usize * h..(i as usize + 1) * h].to_vec())
        .collect();
    for l in 0..cfg.layers {
        let p = format!("model.layers.{l}");
        let mut qs = Vec::new();
        let mut ks = Vec::new();
        let mut vs = Vec::new();
        for (t, xt) in x.iter().enumerate() {
            let hn = rmsnorm(xt, g(&format!("{p}.input_layernorm.weight")), cfg.eps);
            let mut q = linear(
                &hn,
                g(&format!("{p}.self_attn.q_proj.weight")),
                opt(&format!("{p}.self_attn.q_proj.bias")),
            );
            let mut k = linear(
                &hn,
                g(&format!("{p}.self_attn.k_proj.weight")),
                opt(&format!("{p}.self_attn.k_proj.bias")),
            );
            let v = linear(
                &hn,
                g(&format!("{p}.self_attn.v_proj.weight")),
                opt(&format!("{p}.self_attn.v_proj.bias")),
            );
            for hh in 0..nh {
                rope(&mut q[hh * hd..(hh + 1) * hd], t, hd, cfg.theta);
            }
            for hh in 0..nk {
                rope(&mut k[hh * hd..(hh + 1) * hd], t, hd, cfg.theta);
            }
            qs.push(q);
            ks.push(k);
            vs.push(v);
        }
        let scale = 1.0 / (hd as f32).sqrt();
        for t in 0..s {
            let mut att = vec![0f32; nh * hd];
            for hh in 0..nh {
                let kh = hh / (nh / nk);
                let q = &qs[t][hh * hd..(hh + 1) * hd];
                let sc: Vec<f32> = (0..=t)
                    .map(|u| {
                        q.iter()
                            .zip(&ks[u][kh * hd..(kh + 1) * hd])
                            .map(|(a, b)| a * b)
                            .sum::<f32>()
                            * scale
                    })
                    .collect();
                let m = sc.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
                let e: Vec<f32> = sc.iter().map(|v| (v - m).exp()).collect();
                let z: f32 = e.iter().sum();
                for (u, eu) in e.iter().enumerate() {
                    for d in 0..hd {
                        att[hh * hd + d] += eu / z * vs[u][kh * hd + d];
                    }
                }
            }
            let o = linear(&att, g(&format!("{p}.self_attn.o_proj.weight")), None);
            for (a, b) in x[t].iter_mut().zip(o) {
                *a += b;
            }
            let hn = rmsnorm(
                &x[t],
                g(&format!("{p}.post_attention_layernorm.weight")),
                cfg.eps,
            );
            let gate = linear(&hn, g(&format!("{p}.mlp.gate_proj.weight")), None);
            let up = linear(&hn, g(&format!("{p}.mlp.up_proj.weight")), None);
            let act: Vec<f32> = gate
                .iter()
                .zip(&up)
                .map(|(a, b)| a / (1.0 + (-a).exp()) * b)
                .collect();
            let d = linear(&act, g(&format!("{p}.mlp.down_proj.weight")), None);
            for (a, b) in x[t].iter_mut().zip(d) {
                *a += b;
            }
        }
    }
    let head = if cfg.tied {
        g("model.embed_tokens.weight")
    } else {
        g("lm_head.weight")
    };
    let mut out = Vec::with_capacity(s * cfg.vocab);
    for xt in &x {
        let hn = rmsnorm(xt, g("model.norm.weight"), cfg.eps);
        out.extend(linear(&hn, head, None));
    }
    out
}

/// Max |a - b| over two equally long slices.
pub fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

/// `input_ids` `[b, s]` and `logits` `[b, s, v]` from a fixture's reference.safetensors.
pub fn reference(fixture: &Path) -> (Vec<Vec<i64>>, Vec<f32>) {
    let f = StFile::open(&fixture.join("reference.safetensors")).unwrap();
    let ids = f.get("input_ids").unwrap();
    let (b, s) = (ids.shape[0], ids.shape[1]);
    let raw = ids.read_all().unwrap();
    let flat: Vec<i64> = raw
        .chunks_exact(8)
        .map(|c| i64::from_le_bytes(c.try_into().unwrap()))
        .collect();
    let rows = (0..b).map(|i| flat[i * s..(i + 1) * s].to_vec()).collect();
    let lg = f.get("logits").unwrap().read_all().unwrap();
    (
        rows,
        lg.chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect(),
    )
}

/// Max abs difference of the HF folder's logits from the fixture's reference.
pub fn logits_diff(hf: &Path, fixture: &Path) -> f32 {
    let cfg = Cfg::read(hf);
    let w = load_hf(hf);
    let (ids, want) = reference(fixture);
    let mut got = Vec::new();
    for row in &ids {
        got.extend(forward(&cfg, &w, row));
    }
    max_abs_diff(&got, &want)
}
