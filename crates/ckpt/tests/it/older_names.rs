//! Older Megatron-LM checkpoints (`language_model.encoder…` names in nested dicts) read the
//! same as Megatron-Core ones: a real fixture re-written in that spelling converts to HF and
//! still reproduces Megatron's logits.

use crate::common;

use ferry_ckpt::hf::HfModel;
use ferry_ckpt::megatron::CanonicalSource;
use ferry_ckpt::megatron::writer::{local_shape, shard_bytes};
use ferry_ckpt::model::{LayerParam, Param};
use ferry_ckpt::torch_write::{PickleWriter, TorchSaveWriter};
use ferry_ckpt::{ConvertOptions, convert};

fn old_suffix(lp: LayerParam) -> &'static str {
    match lp {
        LayerParam::InputNorm => "input_norm.weight",
        LayerParam::Qkv => "self_attention.query_key_value.weight",
        LayerParam::QkvBias => "self_attention.query_key_value.bias",
        LayerParam::Proj => "self_attention.dense.weight",
        LayerParam::PreMlpNorm => "post_attention_norm.weight",
        LayerParam::Fc1 => "mlp.dense_h_to_4h.weight",
        LayerParam::Fc2 => "mlp.dense_4h_to_h.weight",
        LayerParam::QNorm | LayerParam::KNorm => unreachable!("not in this fixture"),
    }
}

#[test]
fn language_model_encoder_names_convert() {
    let fx = common::fixtures().join("megatron/llama-tp1-pp1");
    let tmp = tempfile::tempdir().unwrap();
    let hf = tmp.path().join("hf");
    convert(&fx.join("legacy"), &hf, &ConvertOptions::default(), &|_| {}).unwrap();
    let src = HfModel::open(&hf, Some(256)).unwrap();
    let spec = src.spec().clone();

    // args copied from the real checkpoint, model re-written with the older nested names
    let orig = ferry_ckpt::torch::TorchFile::open(
        &fx.join("legacy/iter_0000010/mp_rank_00/model_optim_rng.pt"),
    )
    .unwrap();
    let args = orig.pickle.get(orig.root(), "args").unwrap();
    let attr_i = |k: &str| match orig.pickle.attr(args, k) {
        Some(ferry_ckpt::pickle::Value::Int(i)) => *i,
        other => panic!("{k}: {other:?}"),
    };

    let mut tensors: Vec<(String, Param)> = Vec::new();
    let mut w = PickleWriter::new();
    w.empty_dict();
    w.mark();
    w.str("args");
    w.global("argparse", "Namespace");
    w.empty_tuple();
    w.newobj();
    w.empty_dict();
    w.mark();
    for k in [
        "num_layers",
        "hidden_size",
        "ffn_hidden_size",
        "num_attention_heads",
        "num_query_groups",
        "kv_channels",
        "vocab_size",
        "padded_vocab_size",
    ] {
        w.str(k);
        w.int(attr_i(k));
    }
    w.str("group_query_attention");
    w.bool(true);
    w.str("untie_embeddings_and_output_weights");
    w.bool(true);
    w.str("swiglu");
    w.bool(true);
    w.str("norm_epsilon");
    w.float(1e-5);
    w.str("max_position_embeddings");
    w.int(32);
    w.setitems();
    w.build();
    w.str("model");
    w.empty_dict();
    w.mark();
    w.str("language_model");
    w.empty_dict();
    w.mark();
    {
        w.str("embedding");
        w.empty_dict();
        w.mark();
        w.str("word_embeddings");
        w.empty_dict();
        w.mark();
        w.str("weight");
        let key = tensors.len().to_string();
        w.tensor(&key, spec.dtype, &spec.shape(Param::Embedding));
        tensors.push((key, Param::Embedding));
        w.setitems();
        w.setitems();

        w.str("encoder");
        w.empty_dict();
        w.mark();
        for l in 0..spec.num_layers {
            for lp in spec.layer_params() {
                let p = Param::Layer(l, lp);
                w.str(&format!("layers.{l}.{}", old_suffix(lp)));
                let key = tensors.len().to_string();
                w.tensor(&key, spec.dtype, &local_shape(&spec, p, 1));
                tensors.push((key, p));
            }
        }
        w.str("final_norm.weight");
        let key = tensors.len().to_string();
        w.tensor(&key, spec.dtype, &spec.shape(Param::FinalNorm));
        tensors.push((key, Param::FinalNorm));
        w.setitems();

        w.str("output_layer");
        w.empty_dict();
        w.mark();
        w.str("weight");
        let key = tensors.len().to_string();
        w.tensor(&key, spec.dtype, &spec.shape(Param::Output));
        tensors.push((key, Param::Output));
        w.setitems();
    }
    w.setitems();
    w.setitems();
    w.setitems();

    let old = tmp.path().join("old");
    let rank = old.join("iter_0000010/mp_rank_00");
    std::fs::create_dir_all(&rank).unwrap();
    std::fs::write(old.join("latest_checkpointed_iteration.txt"), "10").unwrap();
    let mut tw = TorchSaveWriter::create(
        &rank.join("model_optim_rng.pt"),
        "model_optim_rng",
        &w.finish(),
    )
    .unwrap();
    for (key, p) in &tensors {
        tw.storage(key, &shard_bytes(&src, *p, 1, 0).unwrap())
            .unwrap();
    }
    tw.finish().unwrap();

    let back = tmp.path().join("back");
    convert(&old, &back, &ConvertOptions::default(), &|_| {}).unwrap();
    let diff = common::logits_diff(&back, &fx);
    assert!(diff < 1e-3, "older names: max abs logit diff {diff}");
}
