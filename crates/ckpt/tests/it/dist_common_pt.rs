//! Older megatron-core versions keep the torch_dist common state in `common.pt` rather than a
//! `common_state` item: when present it is the source of `args`.

use crate::common;

use ferry_ckpt::torch_write::{PickleWriter, TorchSaveWriter};
use ferry_ckpt::{ConvertOptions, convert};

#[test]
fn common_pt_supplies_args() {
    let fx = common::fixtures().join("megatron/qwen2-tp2-pp1");
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("ckpt");
    let it = src.join("iter_0000010");
    std::fs::create_dir_all(&it).unwrap();
    for e in std::fs::read_dir(fx.join("torch_dist/iter_0000010")).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), it.join(e.file_name())).unwrap();
    }
    std::fs::write(src.join("latest_checkpointed_iteration.txt"), "10").unwrap();

    let mut w = PickleWriter::new();
    w.empty_dict();
    w.mark();
    w.str("args");
    w.global("argparse", "Namespace");
    w.empty_tuple();
    w.newobj();
    w.empty_dict();
    w.mark();
    for (k, v) in [
        ("num_layers", 2),
        ("hidden_size", 64),
        ("ffn_hidden_size", 176),
        ("num_attention_heads", 4),
        ("num_query_groups", 2),
        ("kv_channels", 16),
        ("vocab_size", 250),
        ("padded_vocab_size", 256),
        ("max_position_embeddings", 77),
    ] {
        w.str(k);
        w.int(v);
    }
    for k in [
        "group_query_attention",
        "add_qkv_bias",
        "untie_embeddings_and_output_weights",
        "swiglu",
    ] {
        w.str(k);
        w.bool(true);
    }
    w.str("rotary_base");
    w.float(1e6);
    w.str("norm_epsilon");
    w.float(1e-6);
    w.setitems();
    w.build();
    w.setitems();
    let tw = TorchSaveWriter::create(&it.join("common.pt"), "common", &w.finish()).unwrap();
    tw.finish().unwrap();

    let dst = tmp.path().join("hf");
    convert(&src, &dst, &ConvertOptions::default(), &|_| {}).unwrap();
    let cfg: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dst.join("config.json")).unwrap()).unwrap();
    assert_eq!(
        cfg["max_position_embeddings"], 77,
        "args must come from common.pt"
    );
    assert_eq!(cfg["architectures"][0], "Qwen2ForCausalLM");
    assert!(common::logits_diff(&dst, &fx) < 1e-3);
}
