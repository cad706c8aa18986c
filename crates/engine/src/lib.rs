//! Ferry's built-in engine: a Llama/Qwen2 decoder in candle that trains on a CPU (full or LoRA)
//! and serves completions, with Hugging Face and PEFT file formats so other tools read its output.
//!
//! Start with [`train`] (a [`TrainConfig`] in, metrics lines out), [`logits`] (reference
//! forward pass for converter tests) and `serve::BuiltinBackend` (the OpenAI backend).
#![forbid(unsafe_code)]

mod checkpoint;
mod config;
mod data;
mod demo;
mod error;
mod model;
mod optim;
mod rng;
pub mod serve;
mod tokenize;
mod train;
mod weights;

pub use checkpoint::{
    OPTIMIZER_STATE, TRAINER_STATE, TrainerState, latest_checkpoint, list_checkpoints, read_state,
    resolve_resume,
};
pub use config::{Architecture, ModelConfig};
pub use data::{DataConfig, DataFormat, unigram_entropy};
pub use demo::{
    DEMO_CHAT, DEMO_PRESET, DEMO_STORIES, PRESETS, demo_train_config, preset, write_demo_corpus,
};
pub use error::{EngineError, Result};
pub use model::{KvCache, Model, Weights, init_weights, masked_cross_entropy, parameter_shapes};
pub use optim::lr_at;
pub use rng::Rng;
pub use serve::{BuiltinBackend, ServeOptions};
pub use tokenize::{ChatTemplate, ChatTokens, load_tokenizer, train_bpe};
pub use train::{
    CheckpointConfig, LoraConfig, Method, ModelSource, Precision, TrainConfig, TrainSummary, train,
    train_rank, train_until,
};
pub use weights::{
    AdapterConfig, load_model, load_model_with_adapter, logits, logits_with_adapter, read_adapter,
    read_model_dir, read_safetensors, write_safetensors,
};
