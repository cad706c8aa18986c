//! Trainer tests: learning, exact resume (bar 4), LoRA in PEFT's format, checkpoint contents.

use std::sync::atomic::AtomicBool;

use ferry_engine::{
    Architecture, LoraConfig, Method, ModelSource, read_adapter, read_safetensors, read_state,
    train_until,
};

use crate::common::{Capture, TempDir, corpus, tiny_arch, tiny_config};

#[test]
fn interrupted_and_resumed_runs_match_the_uninterrupted_run_exactly() {
    let dir = TempDir::new("resume");
    let (text, tok) = corpus(dir.path(), 30_000, 320);
    let arch = ModelSource::Arch(tiny_arch(Architecture::Qwen2, true));
    let never = AtomicBool::new(false);

    let straight_dir = dir.path().join("straight");
    let cfg = tiny_config(arch.clone(), &text, Some(&tok), &straight_dir, 8);
    let mut straight = Capture::new(None);
    let summary = train_until(&cfg, None, &mut straight, &never).unwrap();
    assert_eq!(summary.steps, 8);
    assert!(!summary.stopped_early);
    let first = straight.losses()[0].1;
    assert!(
        summary.final_loss < first - 0.3,
        "loss did not fall: {first} -> {}",
        summary.final_loss
    );

    // Interrupt after step 3 (as SIGTERM would), then resume from the checkpoint root.
    let split_dir = dir.path().join("split");
    let cfg = tiny_config(arch, &text, Some(&tok), &split_dir, 8);
    let stop = AtomicBool::new(false);
    let mut part1 = Capture::new(Some((3, &stop)));
    let s1 = train_until(&cfg, None, &mut part1, &stop).unwrap();
    assert!(s1.stopped_early);
    assert_eq!(s1.steps, 3);
    assert_eq!(read_state(&s1.checkpoint).unwrap().step, 3);
    let mut part2 = Capture::new(None);
    let s2 = train_until(&cfg, Some(&split_dir), &mut part2, &never).unwrap();
    assert_eq!(s2.steps, 8);

    let mut resumed = part1.losses();
    resumed.extend(part2.losses());
    assert_eq!(resumed, straight.losses(), "loss curves differ");
    let a = read_safetensors(&summary.checkpoint.join("model.safetensors")).unwrap();
    let b = read_safetensors(&s2.checkpoint.join("model.safetensors")).unwrap();
    for (name, t) in &a {
        let d = (t - &b[name])
            .unwrap()
            .abs()
            .unwrap()
            .max_all()
            .unwrap()
            .to_scalar::<f32>()
            .unwrap();
        assert_eq!(d, 0.0, "{name} differs after resume");
    }
    for f in [
        "config.json",
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
        "generation_config.json",
        "optimizer.safetensors",
        "trainer_state.json",
    ] {
        assert!(summary.checkpoint.join(f).exists(), "checkpoint lacks {f}");
    }
    let cfg_json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(summary.checkpoint.join("config.json")).unwrap())
            .unwrap();
    assert_eq!(cfg_json["architectures"][0], "Qwen2ForCausalLM");
    assert_eq!(cfg_json["tie_word_embeddings"], true);
}

#[test]
fn lora_trains_only_adapters_saves_peft_format_and_resumes_exactly() {
    let dir = TempDir::new("lora");
    let (text, tok) = corpus(dir.path(), 20_000, 320);
    let never = AtomicBool::new(false);
    let base_cfg = tiny_config(
        ModelSource::Arch(tiny_arch(Architecture::Llama, false)),
        &text,
        Some(&tok),
        &dir.path().join("base"),
        3,
    );
    let base = train_until(&base_cfg, None, &mut Capture::new(None), &never).unwrap();
    let base_weights = read_safetensors(&base.checkpoint.join("model.safetensors")).unwrap();

    let mut cfg = tiny_config(
        ModelSource::Base(base.checkpoint.clone()),
        &text,
        None,
        &dir.path().join("lora"),
        6,
    );
    cfg.method = Method::Lora(LoraConfig {
        rank: 4,
        alpha: 8.0,
        dropout: 0.1,
        target_modules: vec!["q_proj".into(), "v_proj".into(), "down_proj".into()],
    });
    let mut full = Capture::new(None);
    let s = train_until(&cfg, None, &mut full, &never).unwrap();
    // Per layer: q (A 4x32, B 32x4) + v (A 4x32, B 16x4) + down (A 4x64, B 32x4); two layers.
    assert_eq!(
        s.trainable_parameters,
        2 * ((4 * 32 + 32 * 4) + (4 * 32 + 16 * 4) + (4 * 64 + 32 * 4))
    );
    let (acfg, aw) = read_adapter(&s.checkpoint).unwrap();
    assert_eq!(acfg.r, 4);
    assert_eq!(acfg.lora_alpha, 8.0);
    assert_eq!(aw.len(), 2 * 3 * 2);
    let key = "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight";
    assert_eq!(aw[key].dims(), &[4, 32]);
    let b_key = "base_model.model.model.layers.1.mlp.down_proj.lora_B.weight";
    assert_eq!(aw[b_key].dims(), &[32, 4]);
    let b_norm = aw[b_key]
        .abs()
        .unwrap()
        .sum_all()
        .unwrap()
        .to_scalar::<f32>()
        .unwrap();
    assert!(b_norm > 0.0, "lora_B never moved");
    assert!(
        !s.checkpoint.join("model.safetensors").exists(),
        "LoRA checkpoint must hold only the adapter"
    );
    // The base on disk is untouched.
    let again = read_safetensors(&base.checkpoint.join("model.safetensors")).unwrap();
    assert_eq!(again.len(), base_weights.len());

    let split = dir.path().join("lora-split");
    cfg.checkpoint.dir = split.clone();
    let stop = AtomicBool::new(false);
    let mut p1 = Capture::new(Some((2, &stop)));
    train_until(&cfg, None, &mut p1, &stop).unwrap();
    let mut p2 = Capture::new(None);
    train_until(&cfg, Some(&split), &mut p2, &never).unwrap();
    let mut resumed = p1.losses();
    resumed.extend(p2.losses());
    assert_eq!(
        resumed,
        full.losses(),
        "LoRA loss curves differ after resume (dropout RNG or data position lost)"
    );
}

#[test]
fn chat_sft_trains_on_assistant_tokens_and_bad_configs_name_the_field() {
    let dir = TempDir::new("chat");
    let chat = dir.path().join("chat.jsonl");
    let all = std::fs::read_to_string(crate::common::data_dir().join("chat.jsonl")).unwrap();
    std::fs::write(&chat, all.lines().take(200).collect::<Vec<_>>().join("\n")).unwrap();
    let mut cfg = tiny_config(
        ModelSource::Arch(tiny_arch(Architecture::Llama, true)),
        &chat,
        None,
        &dir.path().join("ck"),
        4,
    );
    cfg.data.format = ferry_engine::DataFormat::Chat;
    cfg.seq_len = 48;
    let s = train_until(&cfg, None, &mut Capture::new(None), &AtomicBool::new(false)).unwrap();
    assert!(s.final_loss.is_finite());
    assert!(
        s.unigram_entropy > 1.0,
        "entropy over assistant tokens: {}",
        s.unigram_entropy
    );
    assert!(s.checkpoint.join("tokenizer.json").exists());

    let mut bad = cfg.clone();
    bad.seq_len = 1000;
    let err =
        train_until(&bad, None, &mut Capture::new(None), &AtomicBool::new(false)).unwrap_err();
    assert!(err.to_string().contains("seqLen"), "{err}");
    let mut bad = cfg.clone();
    bad.method = Method::Lora(LoraConfig {
        rank: 2,
        alpha: 4.0,
        dropout: 0.0,
        target_modules: vec!["qkv".into()],
    });
    let err =
        train_until(&bad, None, &mut Capture::new(None), &AtomicBool::new(false)).unwrap_err();
    assert!(
        err.to_string().contains("method.lora.targetModules"),
        "{err}"
    );
    let json = r#"{"model":{"base":"/nope"},"data":{"path":"x","format":"text"},"seqLen":8,"batch":1,"lr":0.001,"steps":1,"checkpoint":{"dir":"/tmp/x"},"bogus":1}"#;
    let err = serde_json::from_str::<ferry_engine::TrainConfig>(json).unwrap_err();
    assert!(err.to_string().contains("bogus"), "{err}");
}
