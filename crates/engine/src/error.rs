//! The crate's single error type: every variant names the file or field at fault and what fixes it.

use std::path::PathBuf;

/// Everything that can go wrong while loading, training or serving a model.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// A file or directory could not be read or written.
    #[error("{path}: {source} (check that the path exists and is readable/writable)")]
    Io {
        /// The file or directory involved.
        path: PathBuf,
        /// The underlying I/O error.
        #[source]
        source: std::io::Error,
    },
    /// A JSON file (config, tokenizer, data line, trainer state) is malformed.
    #[error("{path}: invalid JSON: {message}")]
    Json {
        /// The file (with `:line` for JSONL data) that failed to parse.
        path: String,
        /// What serde reported.
        message: String,
    },
    /// A safetensors file is corrupt, truncated or misses a tensor.
    #[error("{path}: {message}")]
    Weights {
        /// The safetensors file (or model directory) at fault.
        path: PathBuf,
        /// What is wrong and, where possible, what would fix it.
        message: String,
    },
    /// A configuration value is out of range or inconsistent.
    #[error("invalid config field `{field}`: {message}")]
    Config {
        /// The field path, e.g. `method.lora.rank`.
        field: String,
        /// Why the value is rejected and what would be accepted.
        message: String,
    },
    /// The tokenizer could not be trained, loaded or applied.
    #[error("tokenizer {path}: {message}")]
    Tokenizer {
        /// The tokenizer file (or corpus) involved.
        path: String,
        /// The tokenizers crate's message.
        message: String,
    },
    /// The training data yields no usable example.
    #[error("data {path}: {message}")]
    Data {
        /// The data file at fault (with `:line` when one line is the problem).
        path: String,
        /// What is wrong with it.
        message: String,
    },
    /// A prompt does not fit the model's context window.
    #[error(
        "prompt has {prompt_tokens} tokens but the model's context is {max_context}; shorten the prompt"
    )]
    PromptTooLong {
        /// Tokens in the prompt.
        prompt_tokens: usize,
        /// The model's `max_position_embeddings`.
        max_context: usize,
    },
    /// A tensor operation failed (a shape bug or a numeric problem, e.g. non-finite loss).
    #[error("tensor error: {0}")]
    Tensor(#[from] candle_core::Error),
}

impl EngineError {
    /// Wraps an I/O error with the path it concerns.
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Self::Io {
            path: path.into(),
            source,
        }
    }

    /// Builds a config error for `field`.
    pub(crate) fn config(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self::Config {
            field: field.into(),
            message: message.into(),
        }
    }

    /// Builds a weights error for `path`.
    pub(crate) fn weights(path: impl Into<PathBuf>, message: impl Into<String>) -> Self {
        Self::Weights {
            path: path.into(),
            message: message.into(),
        }
    }
}

/// The crate's result alias.
pub type Result<T, E = EngineError> = std::result::Result<T, E>;
