//! Trains three tiny models (Llama, Qwen2 with tied embeddings and QKV bias, and a LoRA
//! adapter on the Llama) and writes the engine's own logits next to them, for
//! `scripts/interop_check.py` to compare against transformers + peft (bar 5).
//!
//! `cargo run -p ferry-engine --example interop_export -- OUT_DIR`

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;

use candle_core::{Device, Tensor};
use ferry_engine::{
    Architecture, CheckpointConfig, DataConfig, DataFormat, LoraConfig, Method, ModelConfig,
    ModelSource, TrainConfig, load_tokenizer, logits_with_adapter, train_bpe, train_until,
    write_safetensors,
};

const TEXT: &str =
    "Mia had a brown fox. One windy day, Mia and the fox went to the lake. The fox yipped.";

fn arch(a: Architecture, tied: bool) -> ModelConfig {
    ModelConfig {
        architecture: a,
        vocab_size: 512,
        hidden_size: 64,
        intermediate_size: 160,
        num_layers: 2,
        num_heads: 4,
        num_kv_heads: 2,
        head_dim: None,
        rms_norm_eps: if a == Architecture::Qwen2 { 1e-6 } else { 1e-5 },
        rope_theta: if a == Architecture::Qwen2 { 1e6 } else { 1e4 },
        max_position_embeddings: 128,
        tie_word_embeddings: tied,
        attention_bias: false,
        initializer_range: 0.05,
        bos_token_id: None,
        eos_token_id: None,
    }
}

fn cfg(
    model: ModelSource,
    data: &Path,
    tok: Option<&Path>,
    dir: PathBuf,
    method: Method,
) -> TrainConfig {
    TrainConfig {
        model,
        tokenizer: tok.map(Path::to_path_buf),
        data: DataConfig {
            path: data.to_path_buf(),
            format: DataFormat::Text,
        },
        method,
        seq_len: 64,
        batch: 4,
        grad_accum: 1,
        lr: 5e-3,
        min_lr: None,
        warmup: 2,
        steps: Some(15),
        epochs: None,
        weight_decay: 0.0,
        beta1: 0.9,
        beta2: 0.95,
        eps: 1e-8,
        grad_clip: 1.0,
        checkpoint: CheckpointConfig {
            dir,
            every: 0,
            keep: 1,
        },
        seed: 1,
        precision: Default::default(),
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let out = PathBuf::from(
        std::env::args()
            .nth(1)
            .ok_or("usage: interop_export OUT_DIR")?,
    );
    std::fs::create_dir_all(&out)?;
    let stories =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("data/stories.txt"))?;
    let corpus = out.join("corpus.txt");
    std::fs::write(&corpus, &stories[..60_000])?;
    let tok_path = out.join("tokenizer.json");
    train_bpe(&[&corpus], 512, &tok_path)?;
    let tok = load_tokenizer(&tok_path)?;
    let ids: Vec<u32> = tok
        .encode(TEXT, false)
        .map_err(|e| e.to_string())?
        .get_ids()
        .to_vec();
    let never = AtomicBool::new(false);
    let mut sink = std::io::sink();
    let mut entries = Vec::new();
    let mut base_llama = None;
    for (name, a, tied) in [
        ("llama", Architecture::Llama, false),
        ("qwen2-tied", Architecture::Qwen2, true),
    ] {
        let c = cfg(
            ModelSource::Arch(arch(a, tied)),
            &corpus,
            Some(&tok_path),
            out.join(name),
            Method::Full,
        );
        let s = train_until(&c, None, &mut sink, &never)?;
        eprintln!("{name}: loss {:.3} after {} steps", s.final_loss, s.steps);
        if name == "llama" {
            base_llama = Some(s.checkpoint.clone());
        }
        entries.push((name.to_string(), s.checkpoint, None::<PathBuf>));
    }
    let base = base_llama.expect("llama trained");
    let lora = Method::Lora(LoraConfig {
        rank: 4,
        alpha: 16.0,
        dropout: 0.05,
        target_modules: [
            "q_proj",
            "k_proj",
            "v_proj",
            "o_proj",
            "gate_proj",
            "up_proj",
            "down_proj",
        ]
        .map(String::from)
        .to_vec(),
    });
    let c = cfg(
        ModelSource::Base(base.clone()),
        &corpus,
        None,
        out.join("llama-lora"),
        lora,
    );
    let s = train_until(&c, None, &mut sink, &never)?;
    eprintln!("llama-lora: loss {:.3}", s.final_loss);
    entries.push(("llama-lora".into(), base, Some(s.checkpoint)));

    let mut manifest = Vec::new();
    for (name, model, adapter) in entries {
        let rows = logits_with_adapter(&model, adapter.as_deref(), &ids)?;
        let (t, v) = (rows.len(), rows[0].len());
        let mut w = BTreeMap::new();
        w.insert(
            "logits".to_string(),
            Tensor::from_vec(rows.concat(), (t, v), &Device::Cpu)?,
        );
        let ids64: Vec<i64> = ids.iter().map(|&i| i as i64).collect();
        w.insert(
            "input_ids".to_string(),
            Tensor::from_vec(ids64, (1, t), &Device::Cpu)?,
        );
        let file = out.join(format!("{name}.engine_logits.safetensors"));
        write_safetensors(&file, &w)?;
        let rel = |p: &Path| {
            p.strip_prefix(&out)
                .map(|r| r.display().to_string())
                .unwrap_or_else(|_| p.display().to_string())
        };
        manifest.push(serde_json::json!({
            "name": name,
            "model": rel(&model),
            "adapter": adapter.as_deref().map(rel),
            "logits": rel(&file),
        }));
    }
    let doc = serde_json::json!({"text": TEXT, "models": manifest});
    std::fs::write(out.join("manifest.json"), serde_json::to_vec_pretty(&doc)?)?;
    std::fs::remove_file(&corpus)?;
    eprintln!("wrote {}", out.join("manifest.json").display());
    Ok(())
}
