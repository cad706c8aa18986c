//! The bundled demo: corpus and a training config sized to learn on a 2-core CPU in minutes.
//!
//! The corpus (`data/`, see its README) is synthetic text written for Ferry, CC0-1.0, and
//! compiled into the binary, so `ferry demo` needs no download: simple English stories
//! interleaved with short ChatML conversations, so the model both continues text and
//! answers in the chat format `serve` uses.

use std::path::{Path, PathBuf};

use crate::config::{Architecture, ModelConfig};
use crate::data::{DataConfig, DataFormat};
use crate::error::{EngineError, Result};
use crate::tokenize::{IM_END, IM_START};
use crate::train::{CheckpointConfig, Method, ModelSource, Precision, TrainConfig};

/// Simple English stories (about 320 KB).
pub const DEMO_STORIES: &str = include_str!("../data/stories.txt");
/// Short question/answer chats, one JSON object per line.
pub const DEMO_CHAT: &str = include_str!("../data/chat.jsonl");

/// Writes the demo corpus (stories interleaved with ChatML-rendered chats) to `dir/demo.txt`.
pub fn write_demo_corpus(dir: &Path) -> Result<PathBuf> {
    std::fs::create_dir_all(dir).map_err(|e| EngineError::io(dir, e))?;
    let stories: Vec<&str> = DEMO_STORIES
        .split("\n\n")
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect();
    let mut chats = Vec::new();
    for (n, line) in DEMO_CHAT.lines().enumerate() {
        let v: serde_json::Value = serde_json::from_str(line).map_err(|e| EngineError::Json {
            path: format!("data/chat.jsonl:{}", n + 1),
            message: e.to_string(),
        })?;
        let mut s = String::new();
        for m in v["messages"].as_array().into_iter().flatten() {
            let role = m["role"].as_str().unwrap_or("user");
            let content = m["content"].as_str().unwrap_or("");
            s.push_str(&format!("{IM_START}{role}\n{content}{IM_END}\n"));
        }
        chats.push(s);
    }
    let mut out = String::with_capacity(DEMO_STORIES.len() + DEMO_CHAT.len());
    let n = stories.len().max(chats.len());
    for i in 0..n {
        if let Some(s) = stories.get(i) {
            out.push_str(s);
            out.push_str("\n\n");
        }
        if let Some(c) = chats.get(i) {
            out.push_str(c);
            out.push('\n');
        }
    }
    let path = dir.join("demo.txt");
    std::fs::write(&path, out).map_err(|e| EngineError::io(&path, e))?;
    Ok(path)
}

/// Names accepted by [`preset`], smallest first.
pub const PRESETS: [&str; 2] = ["tiny", "small"];

/// A from-scratch model shape by name (`model: {source: scratch, preset: NAME}`):
/// `tiny` (0.92M parameters with a 1024-token BPE) and `small` (5.25M with 2048); fewer when
/// the corpus's BPE stops short of that vocabulary (the demo corpus: 0.88M and 4.9M).
pub fn preset(name: &str) -> Option<ModelConfig> {
    let (vocab, hidden, inter, layers, heads, kv) = match name {
        "tiny" => (1024, 128, 384, 4, 4, 2),
        "small" => (2048, 256, 768, 6, 8, 4),
        _ => return None,
    };
    Some(ModelConfig {
        architecture: Architecture::Llama,
        vocab_size: vocab,
        hidden_size: hidden,
        intermediate_size: inter,
        num_layers: layers,
        num_heads: heads,
        num_kv_heads: kv,
        head_dim: None,
        rms_norm_eps: 1e-5,
        rope_theta: 10_000.0,
        max_position_embeddings: 256,
        tie_word_embeddings: true,
        attention_bias: false,
        initializer_range: 0.02,
        bos_token_id: None,
        eos_token_id: None,
    })
}

/// The preset `ferry demo` trains by default: `small` (4.9M parameters on the demo corpus; the
/// whole demo takes under 3 minutes on two cores with a release build).
pub const DEMO_PRESET: &str = "small";

/// The demo's training run: the [`DEMO_PRESET`] model trained from scratch on `corpus`,
/// checkpoints under `checkpoint_dir`.
pub fn demo_train_config(corpus: &Path, checkpoint_dir: &Path) -> TrainConfig {
    TrainConfig {
        model: ModelSource::Arch(preset(DEMO_PRESET).expect("the demo preset exists")),
        tokenizer: None,
        data: DataConfig {
            path: corpus.to_path_buf(),
            format: DataFormat::Text,
        },
        method: Method::Full,
        seq_len: 128,
        batch: 8,
        grad_accum: 1,
        lr: 3e-3,
        min_lr: Some(3e-4),
        warmup: 15,
        steps: Some(150),
        epochs: None,
        weight_decay: 0.01,
        beta1: 0.9,
        beta2: 0.95,
        eps: 1e-8,
        grad_clip: 1.0,
        checkpoint: CheckpointConfig {
            dir: checkpoint_dir.to_path_buf(),
            every: 50,
            keep: 1,
        },
        seed: 1,
        precision: Precision::F32,
    }
}
