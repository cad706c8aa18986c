//! Gradient tests (bar 3): every trainable tensor gets a gradient, and autograd agrees with
//! central finite differences in f64 on a tiny Qwen2-style model (GQA, QKV bias, tied embeddings).

use super::*;
use crate::config::Architecture;

fn tiny(arch: Architecture, tied: bool) -> ModelConfig {
    ModelConfig {
        architecture: arch,
        vocab_size: 23,
        hidden_size: 16,
        intermediate_size: 24,
        num_layers: 2,
        num_heads: 4,
        num_kv_heads: 2,
        head_dim: None,
        rms_norm_eps: 1e-6,
        rope_theta: 10_000.0,
        max_position_embeddings: 16,
        tie_word_embeddings: tied,
        attention_bias: false,
        initializer_range: 0.3,
        bos_token_id: None,
        eos_token_id: None,
    }
}

fn to_f64(w: &Weights, rng: &mut Rng) -> Weights {
    // Random (non-zero) biases and norms too, so their gradients are not trivially symmetric.
    w.iter()
        .map(|(k, v)| {
            let t = if k.ends_with(".bias") || k.ends_with("norm.weight") {
                let n = v.elem_count();
                let data: Vec<f64> = (0..n).map(|_| 1.0 + 0.3 * rng.normal()).collect();
                Tensor::from_vec(data, v.shape(), &Device::Cpu).unwrap()
            } else {
                v.to_dtype(DType::F64).unwrap()
            };
            (k.clone(), t)
        })
        .collect()
}

fn batch() -> (Tensor, Tensor, Tensor) {
    let ids: Vec<u32> = vec![1, 5, 9, 2, 22, 7, 3, 3, 0, 14, 8, 19];
    let x = Tensor::from_vec(ids.clone(), (2, 6), &Device::Cpu).unwrap();
    let targets: Vec<u32> = ids.iter().map(|i| (i * 7 + 3) % 23).collect();
    let y = Tensor::from_vec(targets, 12, &Device::Cpu).unwrap();
    let w: Vec<f64> = (0..12)
        .map(|i| if i % 5 == 4 { 0.0 } else { 1.0 })
        .collect();
    let w = Tensor::from_vec(w, 12, &Device::Cpu).unwrap();
    (x, y, w)
}

fn loss_of(cfg: &ModelConfig, w: &Weights) -> Tensor {
    let model = Model::new(cfg, w, Path::new("<test>")).unwrap();
    let (x, y, wt) = batch();
    let logits = model.forward(&x, None, None).unwrap();
    masked_cross_entropy(&logits, &y, &wt).unwrap()
}

#[test]
fn every_parameter_gets_a_nonzero_gradient() {
    for (arch, tied) in [(Architecture::Qwen2, true), (Architecture::Llama, false)] {
        let cfg = tiny(arch, tied);
        let mut rng = Rng::new(3);
        let w = init_weights(&cfg, &mut rng).unwrap();
        let vars: BTreeMap<String, candle_core::Var> = w
            .iter()
            .map(|(k, v)| (k.clone(), candle_core::Var::from_tensor(v).unwrap()))
            .collect();
        let tensors: Weights = vars
            .iter()
            .map(|(k, v)| (k.clone(), v.as_tensor().clone()))
            .collect();
        let grads = loss_of(&cfg, &tensors).backward().unwrap();
        assert_eq!(vars.len(), parameter_shapes(&cfg).len());
        for (name, var) in &vars {
            let g = grads
                .get(var.as_tensor())
                .unwrap_or_else(|| panic!("{arch:?}: no gradient reached {name}"));
            let norm = g
                .sqr()
                .unwrap()
                .sum_all()
                .unwrap()
                .to_scalar::<f32>()
                .unwrap();
            assert!(
                norm > 0.0 && norm.is_finite(),
                "{arch:?}: gradient of {name} is {norm}"
            );
        }
    }
}

#[test]
fn lora_adapters_get_gradients_and_the_base_stays_out_of_the_graph() {
    let cfg = tiny(Architecture::Llama, false);
    let mut rng = Rng::new(5);
    let w = init_weights(&cfg, &mut rng).unwrap();
    let mut model = Model::new(&cfg, &w, Path::new("<test>")).unwrap();
    let mut vars = Vec::new();
    for layer in 0..cfg.num_layers {
        for module in LORA_TARGETS {
            let lin = model.linear_mut(layer, module).unwrap();
            let (out, inp) = lin.weight.dims2().unwrap();
            let a = candle_core::Var::randn(0f32, 0.5, (2, inp), &Device::Cpu).unwrap();
            let b = candle_core::Var::randn(0f32, 0.5, (out, 2), &Device::Cpu).unwrap();
            lin.lora = Some(Lora {
                a: a.as_tensor().clone(),
                b: b.as_tensor().clone(),
                scale: 2.0,
                dropout: 0.1,
            });
            vars.push((format!("{layer}.{module}.A"), a));
            vars.push((format!("{layer}.{module}.B"), b));
        }
    }
    let (x, y, wt) = batch();
    let mut drop_rng = Rng::new(9);
    let logits = model.forward(&x, None, Some(&mut drop_rng)).unwrap();
    let grads = masked_cross_entropy(&logits, &y, &wt)
        .unwrap()
        .backward()
        .unwrap();
    for (name, var) in &vars {
        let g = grads
            .get(var.as_tensor())
            .unwrap_or_else(|| panic!("no gradient for {name}"));
        let n = g
            .abs()
            .unwrap()
            .sum_all()
            .unwrap()
            .to_scalar::<f32>()
            .unwrap();
        assert!(n > 0.0, "zero gradient for {name}");
    }
    assert!(
        grads.get(&w["model.embed_tokens.weight"]).is_none(),
        "frozen base got a gradient"
    );
}

#[test]
fn autograd_agrees_with_finite_differences() {
    let cfg = tiny(Architecture::Qwen2, true);
    let mut rng = Rng::new(11);
    let w = to_f64(&init_weights(&cfg, &mut rng).unwrap(), &mut rng);
    let vars: Weights = w.clone();
    let var_map: BTreeMap<String, candle_core::Var> = vars
        .iter()
        .map(|(k, v)| (k.clone(), candle_core::Var::from_tensor(v).unwrap()))
        .collect();
    let tensors: Weights = var_map
        .iter()
        .map(|(k, v)| (k.clone(), v.as_tensor().clone()))
        .collect();
    let grads = loss_of(&cfg, &tensors).backward().unwrap();
    let h = 1e-5;
    let mut checked = 0;
    for (name, var) in &var_map {
        let g = grads
            .get(var.as_tensor())
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1::<f64>()
            .unwrap();
        let base = w[name].flatten_all().unwrap().to_vec1::<f64>().unwrap();
        // Two coordinates per tensor: the one with the largest gradient and a random one.
        let big = (0..g.len())
            .max_by(|&a, &b| g[a].abs().total_cmp(&g[b].abs()))
            .unwrap();
        for idx in [big, rng.below(g.len())] {
            let eval = |delta: f64| {
                let mut data = base.clone();
                data[idx] += delta;
                let mut w2 = w.clone();
                w2.insert(
                    name.clone(),
                    Tensor::from_vec(data, w[name].shape(), &Device::Cpu).unwrap(),
                );
                loss_of(&cfg, &w2).to_scalar::<f64>().unwrap()
            };
            let fd = (eval(h) - eval(-h)) / (2.0 * h);
            let err = (fd - g[idx]).abs();
            assert!(
                err <= 1e-6 + 1e-4 * g[idx].abs().max(fd.abs()),
                "{name}[{idx}]: autograd {} vs finite difference {fd}",
                g[idx]
            );
            checked += 1;
        }
    }
    assert!(checked >= 2 * parameter_shapes(&cfg).len());
}

#[test]
fn cached_generation_matches_the_full_forward() {
    let cfg = tiny(Architecture::Qwen2, false);
    let w = init_weights(&cfg, &mut Rng::new(2)).unwrap();
    let model = Model::new(&cfg, &w, Path::new("<test>")).unwrap();
    let ids: Vec<u32> = vec![3, 1, 4, 1, 5, 9, 2, 6];
    let full = model
        .forward(
            &Tensor::new(ids.as_slice(), &Device::Cpu)
                .unwrap()
                .unsqueeze(0)
                .unwrap(),
            None,
            None,
        )
        .unwrap()
        .to_vec2::<f32>()
        .unwrap();
    let mut cache = KvCache::default();
    let prefix = Tensor::new(&ids[..5], &Device::Cpu)
        .unwrap()
        .unsqueeze(0)
        .unwrap();
    let mut rows = model
        .forward(&prefix, Some(&mut cache), None)
        .unwrap()
        .to_vec2::<f32>()
        .unwrap();
    for &id in &ids[5..] {
        let one = Tensor::new(&[id], &Device::Cpu)
            .unwrap()
            .unsqueeze(0)
            .unwrap();
        rows.extend(
            model
                .forward(&one, Some(&mut cache), None)
                .unwrap()
                .to_vec2::<f32>()
                .unwrap(),
        );
    }
    assert_eq!(cache.len(), ids.len());
    for (a, b) in full.iter().flatten().zip(rows.iter().flatten()) {
        assert!((a - b).abs() < 1e-5, "{a} vs {b}");
    }
    let too_long = Tensor::zeros((1, 17), DType::U32, &Device::Cpu).unwrap();
    assert!(matches!(
        model.forward(&too_long, None, None),
        Err(EngineError::PromptTooLong {
            prompt_tokens: 17,
            max_context: 16
        })
    ));
}
