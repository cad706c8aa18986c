//! Shared helpers: temp dirs, a tiny corpus, tiny configs, metric capture.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use ferry_engine::{
    Architecture, CheckpointConfig, DataConfig, DataFormat, Method, ModelConfig, ModelSource,
    TrainConfig, train_bpe,
};

/// A fresh directory under the system temp dir, removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> Self {
        static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = N.fetch_add(1, Ordering::SeqCst);
        let p =
            std::env::temp_dir().join(format!("ferry-engine-it-{tag}-{}-{n}", std::process::id()));
        std::fs::remove_dir_all(&p).ok();
        std::fs::create_dir_all(&p).unwrap();
        Self(p)
    }
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        std::fs::remove_dir_all(&self.0).ok();
    }
}

/// The crate's own demo data directory.
pub fn data_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("data")
}

/// Writes the first `bytes` of the demo stories to `dir/text.txt` and a BPE of `vocab` tokens.
pub fn corpus(dir: &Path, bytes: usize, vocab: usize) -> (PathBuf, PathBuf) {
    let text = std::fs::read_to_string(data_dir().join("stories.txt")).unwrap();
    let mut cut = bytes.min(text.len());
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    let path = dir.join("text.txt");
    std::fs::write(&path, &text[..cut]).unwrap();
    let tok = dir.join("tokenizer.json");
    train_bpe(&[&path], vocab, &tok).unwrap();
    (path, tok)
}

pub fn tiny_arch(arch: Architecture, tied: bool) -> ModelConfig {
    ModelConfig {
        architecture: arch,
        vocab_size: 320,
        hidden_size: 32,
        intermediate_size: 64,
        num_layers: 2,
        num_heads: 4,
        num_kv_heads: 2,
        head_dim: None,
        rms_norm_eps: 1e-5,
        rope_theta: 10_000.0,
        max_position_embeddings: 64,
        tie_word_embeddings: tied,
        attention_bias: false,
        initializer_range: 0.05,
        bos_token_id: None,
        eos_token_id: None,
    }
}

pub fn tiny_config(
    model: ModelSource,
    data: &Path,
    tok: Option<&Path>,
    ckpt: &Path,
    steps: usize,
) -> TrainConfig {
    TrainConfig {
        model,
        tokenizer: tok.map(Path::to_path_buf),
        data: DataConfig {
            path: data.to_path_buf(),
            format: DataFormat::Text,
        },
        method: Method::Full,
        seq_len: 24,
        batch: 4,
        grad_accum: 2,
        lr: 3e-3,
        min_lr: None,
        warmup: 2,
        steps: Some(steps),
        epochs: None,
        weight_decay: 0.01,
        beta1: 0.9,
        beta2: 0.95,
        eps: 1e-8,
        grad_clip: 1.0,
        checkpoint: CheckpointConfig {
            dir: ckpt.to_path_buf(),
            every: 0,
            keep: 3,
        },
        seed: 42,
        precision: Default::default(),
    }
}

/// Metrics sink that parses each line and raises `stop` once `stop_at` is logged.
pub struct Capture<'a> {
    pub lines: Vec<serde_json::Value>,
    buf: Vec<u8>,
    pub stop_at: Option<(u64, &'a AtomicBool)>,
}

impl<'a> Capture<'a> {
    pub fn new(stop_at: Option<(u64, &'a AtomicBool)>) -> Self {
        Self {
            lines: Vec::new(),
            buf: Vec::new(),
            stop_at,
        }
    }
    pub fn losses(&self) -> Vec<(u64, f64)> {
        self.lines
            .iter()
            .map(|l| (l["step"].as_u64().unwrap(), l["loss"].as_f64().unwrap()))
            .collect()
    }
}

impl Write for Capture<'_> {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.buf.extend_from_slice(b);
        while let Some(pos) = self.buf.iter().position(|&c| c == b'\n') {
            let line: Vec<u8> = self.buf.drain(..=pos).collect();
            let v: serde_json::Value = serde_json::from_slice(&line).expect("metrics line is JSON");
            for key in [
                "step",
                "max_steps",
                "loss",
                "lr",
                "grad_norm",
                "tokens_per_s",
            ] {
                assert!(
                    v.get(key).is_some_and(|x| x.is_number()),
                    "metrics line lacks {key}: {v}"
                );
            }
            if let Some((at, flag)) = self.stop_at
                && v["step"].as_u64() == Some(at)
            {
                flag.store(true, Ordering::SeqCst);
            }
            self.lines.push(v);
        }
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
