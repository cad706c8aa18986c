//! Bar 2: HF → Megatron legacy (tp, pp) → HF is bit-exact for random small models, and the
//! Megatron files this crate writes match the layout real Megatron-Core wrote.

use crate::common;

use std::collections::BTreeMap;
use std::path::Path;

use ferry_ckpt::hf::config_json;
use ferry_ckpt::model::hf_tensors;
use ferry_ckpt::safetensors::{StFile, StWriter};
use ferry_ckpt::torch::TorchFile;
use ferry_ckpt::{Arch, ConvertOptions, DType, ModelSpec, Target, convert};
use proptest::prelude::*;

/// Writes an HF folder with deterministic pseudo-random weights (split over two shards when asked).
fn write_random_hf(dir: &Path, spec: &ModelSpec, seed: u64, two_shards: bool) {
    std::fs::create_dir_all(dir).unwrap();
    let tensors = hf_tensors(spec);
    let mut state = seed | 1;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let split = if two_shards {
        tensors.len() / 2
    } else {
        tensors.len()
    };
    let mut map = serde_json::Map::new();
    for (i, part) in [&tensors[..split], &tensors[split..]]
        .into_iter()
        .enumerate()
    {
        if part.is_empty() {
            continue;
        }
        let name = if two_shards {
            format!("model-{:05}-of-00002.safetensors", i + 1)
        } else {
            "model.safetensors".into()
        };
        let decl: Vec<_> = part
            .iter()
            .map(|t| (t.name.clone(), spec.dtype, t.shape.clone()))
            .collect();
        let mut w = StWriter::create(&dir.join(&name), &decl, &BTreeMap::new()).unwrap();
        for t in part {
            let bytes: Vec<u8> = (0..t.nbytes(spec.dtype)).map(|_| next() as u8).collect();
            w.write(&t.name, &bytes).unwrap();
            map.insert(t.name.clone(), name.clone().into());
        }
        w.finish().unwrap();
    }
    if two_shards {
        let idx = serde_json::json!({"metadata": {}, "weight_map": map});
        std::fs::write(dir.join("model.safetensors.index.json"), idx.to_string()).unwrap();
    }
    std::fs::write(dir.join("config.json"), config_json(spec).to_string()).unwrap();
}

fn all_tensors(dir: &Path) -> BTreeMap<String, (DType, Vec<usize>, Vec<u8>)> {
    let mut out = BTreeMap::new();
    for f in ferry_ckpt::hf::safetensors_files(dir).unwrap() {
        for e in StFile::open(&f).unwrap().entries {
            out.insert(
                e.name.clone(),
                (e.dtype, e.shape.clone(), e.read_all().unwrap()),
            );
        }
    }
    out
}

#[derive(Debug, Clone)]
struct Case {
    spec: ModelSpec,
    tp: usize,
    pp: usize,
    vpp: usize,
    two_shards: bool,
    seed: u64,
}

fn case() -> impl Strategy<Value = Case> {
    (
        (
            0usize..4,
            1usize..3,
            prop::sample::select(vec![2usize, 4]),
            1usize..7,
            1usize..4,
        ),
        (
            2usize..60,
            any::<bool>(),
            any::<bool>(),
            any::<bool>(),
            any::<bool>(),
            any::<bool>(),
        ),
        (
            any::<u64>(),
            any::<prop::sample::Index>(),
            any::<prop::sample::Index>(),
            any::<prop::sample::Index>(),
        ),
    )
        .prop_map(
            |(
                (g_pow, r, hd, layers, ffn_mul),
                (vocab, tied, bias, bf16, two, qk),
                (seed, tp_i, pp_i, vpp_i),
            )| {
                let groups = 1 << g_pow; // 1, 2, 4, 8
                let heads = groups * r;
                let hidden = 8;
                let ffn = 8 * ffn_mul;
                let spec = ModelSpec {
                    arch: match (bias, qk) {
                        (true, _) => Arch::Qwen2,
                        (false, true) => Arch::Qwen3,
                        (false, false) => Arch::Llama,
                    },
                    num_layers: layers,
                    hidden,
                    ffn,
                    heads,
                    groups,
                    head_dim: hd,
                    vocab,
                    padded_vocab: vocab,
                    tied,
                    qkv_bias: bias,
                    qk_norm: qk && !bias,
                    rope_theta: 10000.0,
                    norm_eps: 1e-6,
                    max_position: 64,
                    dtype: if bf16 { DType::BF16 } else { DType::F32 },
                    initializer_range: 0.02,
                };
                let tps: Vec<usize> = [1, 2, 4, 8]
                    .into_iter()
                    .filter(|t| groups % t == 0 && ffn % t == 0)
                    .collect();
                let pps: Vec<usize> = (1..=layers).filter(|p| layers % p == 0).collect();
                let pp = *pp_i.get(&pps);
                // virtual pipeline chunks only with pp > 1, and pp x vpp must divide the layers
                let vpps: Vec<usize> = (1..=layers / pp)
                    .filter(|v| *v == 1 || (pp > 1 && layers % (pp * v) == 0))
                    .collect();
                Case {
                    spec,
                    tp: *tp_i.get(&tps),
                    pp,
                    vpp: *vpp_i.get(&vpps),
                    two_shards: two,
                    seed,
                }
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, .. ProptestConfig::default() })]

    #[test]
    fn hf_to_megatron_to_hf_is_bit_exact(c in case()) {
        let tmp = tempfile::tempdir().unwrap();
        let hf = tmp.path().join("hf");
        let meg = tmp.path().join("meg");
        let back = tmp.path().join("back");
        write_random_hf(&hf, &c.spec, c.seed, c.two_shards);
        let to_meg = ConvertOptions { to: Target::Megatron { tp: c.tp, pp: c.pp }, vpp: c.vpp, ..ConvertOptions::default() };
        convert(&hf, &meg, &to_meg, &|_| {}).unwrap();
        let opts = ConvertOptions { workers: 3, shard_bytes: 4096, ..ConvertOptions::default() };
        let rep = convert(&meg, &back, &opts, &|_| {}).unwrap();
        let par = rep.source_parallel.unwrap();
        prop_assert_eq!((par.tp, par.pp, par.vpp), (c.tp, c.pp, c.vpp));
        let a = all_tensors(&hf);
        let b = all_tensors(&back);
        prop_assert_eq!(a.keys().collect::<Vec<_>>(), b.keys().collect::<Vec<_>>());
        for (k, v) in &a {
            prop_assert!(Some(v) == b.get(k), "tensor {} differs", k);
        }
        let ca: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(hf.join("config.json")).unwrap()).unwrap();
        let cb: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(back.join("config.json")).unwrap()).unwrap();
        prop_assert_eq!(ca, cb);
    }
}

/// Re-sharding a real fixture through HF gives back Megatron-Core's own rank files: same
/// names, shapes and bytes (vocabulary padding rows aside, which Megatron fills randomly).
#[test]
fn written_rank_files_match_megatron_core() {
    let fx = common::fixtures().join("megatron/llama-tp2-pp2");
    let tmp = tempfile::tempdir().unwrap();
    let hf = tmp.path().join("hf");
    let meg = tmp.path().join("meg");
    convert(&fx.join("legacy"), &hf, &ConvertOptions::default(), &|_| {}).unwrap();
    let opts = ConvertOptions {
        to: Target::Megatron { tp: 2, pp: 2 },
        target_iteration: Some(10),
        ..ConvertOptions::default()
    };
    convert(&hf, &meg, &opts, &|_| {}).unwrap();
    assert_eq!(
        std::fs::read_to_string(meg.join("latest_checkpointed_iteration.txt")).unwrap(),
        "10"
    );
    for rank in [
        "mp_rank_00_000",
        "mp_rank_01_000",
        "mp_rank_00_001",
        "mp_rank_01_001",
    ] {
        let orig = TorchFile::open(
            &fx.join("legacy/iter_0000010")
                .join(rank)
                .join("model_optim_rng.pt"),
        )
        .unwrap();
        let ours = TorchFile::open(
            &meg.join("iter_0000010")
                .join(rank)
                .join("model_optim_rng.pt"),
        )
        .unwrap();
        let mut a = Vec::new();
        let mut b = Vec::new();
        orig.pickle
            .flatten_dict(orig.pickle.get(orig.root(), "model").unwrap(), "", &mut a);
        ours.pickle
            .flatten_dict(ours.pickle.get(ours.root(), "model").unwrap(), "", &mut b);
        let names = |v: &Vec<(String, ferry_ckpt::pickle::Value)>| {
            let mut n: Vec<String> = v.iter().map(|x| x.0.clone()).collect();
            n.sort();
            n
        };
        assert_eq!(names(&a), names(&b), "{rank}");
        for (name, va) in &a {
            let vb = &b.iter().find(|x| &x.0 == name).unwrap().1;
            let (Some(ta), Some(tb)) = (orig.tensor_of(va), ours.tensor_of(vb)) else {
                assert!(
                    orig.tensor_of(va).is_none() && ours.tensor_of(vb).is_none(),
                    "{rank} {name}"
                );
                continue;
            };
            let (ta, tb) = (ta.unwrap(), tb.unwrap());
            assert_eq!(ta.shape, tb.shape, "{rank} {name}");
            let (ba, bb) = (ta.read_all().unwrap(), tb.read_all().unwrap());
            if name.contains("word_embeddings") || name.contains("output_layer") {
                // rank 1 holds padded rows 128..256 of which 250..256 are padding
                let keep = if rank.starts_with("mp_rank_01") {
                    122
                } else {
                    128
                } * 64
                    * 4;
                assert_eq!(ba[..keep], bb[..keep], "{rank} {name}");
                assert!(
                    bb[keep..].iter().all(|&x| x == 0),
                    "padding rows must be zero"
                );
            } else {
                assert_eq!(ba, bb, "{rank} {name}");
            }
        }
        let args = ours.pickle.get(ours.root(), "args").unwrap();
        let tp = ours
            .pickle
            .attr(args, "tensor_model_parallel_size")
            .unwrap();
        assert_eq!(tp, &ferry_ckpt::pickle::Value::Int(2));
    }
}

#[test]
fn megatron_target_checks_divisibility() {
    let tmp = tempfile::tempdir().unwrap();
    let fx = common::fixtures().join("megatron/llama-tp1-pp1");
    let hf = tmp.path().join("hf");
    convert(&fx.join("legacy"), &hf, &ConvertOptions::default(), &|_| {}).unwrap();
    // 2 query groups cannot be split over 4 ranks; 2 layers cannot be split over 3 stages.
    for (tp, pp) in [(4, 1), (1, 3)] {
        let o = ConvertOptions {
            to: Target::Megatron { tp, pp },
            ..ConvertOptions::default()
        };
        let e = convert(&hf, &tmp.path().join(format!("m{tp}{pp}")), &o, &|_| {}).unwrap_err();
        assert!(
            e.to_string().contains(if tp == 4 { "tp" } else { "pp" }),
            "{e}"
        );
    }
}

/// Virtual pipeline: chunk `v` of stage `p` holds global layers `v*PP*Lc + p*Lc ..` (Megatron's
/// interleaved order), written as `model0..model{V-1}`, and reads back to the same model.
#[test]
fn virtual_pipeline_layout_follows_megatron() {
    let fx = common::fixtures().join("megatron/llama-tp2-pp2");
    let tmp = tempfile::tempdir().unwrap();
    let hf = tmp.path().join("hf");
    let meg = tmp.path().join("meg");
    let back = tmp.path().join("back");
    convert(&fx.join("legacy"), &hf, &ConvertOptions::default(), &|_| {}).unwrap();
    let opts = ConvertOptions {
        to: Target::Megatron { tp: 2, pp: 2 },
        vpp: 2,
        ..ConvertOptions::default()
    };
    convert(&hf, &meg, &opts, &|_| {}).unwrap();
    // 4 layers, PP=2, VPP=2 → Lc=1; stage 1 chunk 0 holds global layer 1, chunk 1 holds layer 3
    let f = TorchFile::open(&meg.join("release/mp_rank_00_001/model_optim_rng.pt")).unwrap();
    let hf_t = all_tensors(&hf);
    for (chunk, layer) in [("model0", 1), ("model1", 3)] {
        let m = f.pickle.get(f.root(), chunk).unwrap();
        let v = f
            .pickle
            .get(m, "decoder.layers.0.input_layernorm.weight")
            .unwrap();
        let got = f.tensor_of(v).unwrap().unwrap().read_all().unwrap();
        assert_eq!(
            got,
            hf_t[&format!("model.layers.{layer}.input_layernorm.weight")].2,
            "{chunk}"
        );
    }
    let rep = convert(&meg, &back, &ConvertOptions::default(), &|_| {}).unwrap();
    assert_eq!(rep.source_parallel.unwrap().vpp, 2);
    assert!(common::logits_diff(&back, &fx) < 1e-3);
}
