//! The seam between the OpenAI HTTP layer and whatever produces tokens.
//!
//! The HTTP layer owns this trait; engines (the built-in candle engine, the mock
//! backend, later remote replicas) implement it. Requests reaching a backend have
//! already been validated: `max_tokens >= 1`, `0 <= temperature <= 2`,
//! `0 < top_p <= 1`, at least one chat message, `n == 1`.
//!
//! Contract for implementors:
//! - [`Backend::generate`] returns quickly (it may tokenize, it must not generate);
//!   errors it can detect up front (unknown model, prompt longer than the context)
//!   are returned from it so the server can answer with the right HTTP status.
//! - The stream then yields exactly one [`GenerationEvent::Started`], any number of
//!   [`GenerationEvent::Text`] deltas, and ends with one
//!   [`GenerationEvent::Finished`] or one [`GenerationEvent::Error`].
//! - When the receiver is dropped (client disconnected) the backend stops work for
//!   that request: `Sender::send` fails or `Sender::is_closed` turns true.
//! - Stop sequences are the backend's job: text after a stop sequence is never
//!   sent, and the stop sequence itself is not included.

use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

/// Something that can generate text for the OpenAI endpoints.
pub trait Backend: Send + Sync + 'static {
    /// Models served, as listed by `/v1/models` and accepted in `model` fields.
    fn models(&self) -> Vec<ModelInfo>;

    /// Starts one generation; dropping the returned stream cancels it.
    fn generate(&self, req: GenerateRequest) -> Result<GenerationStream, BackendError>;

    /// The engine's own view of its load, exported as vLLM's gauges on `/metrics`.
    ///
    /// The default `None` makes the server derive running/waiting from its own
    /// in-flight requests (waiting = no token yet, running = streaming tokens).
    fn load(&self) -> Option<Load> {
        None
    }
}

/// An engine's load, as a router (Ferry's gateway, vLLM's router) reads it.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Load {
    /// Sequences in the running batch (`vllm:num_requests_running`).
    pub running: u32,
    /// Sequences queued, not yet scheduled (`vllm:num_requests_waiting`).
    pub waiting: u32,
    /// Fraction of KV-cache blocks in use, `0..=1` (`vllm:kv_cache_usage_perc`), if known.
    pub kv_cache_usage: Option<f64>,
}

/// One servable model (a base model or a LoRA adapter on top of one).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelInfo {
    /// Name clients put in the `model` field.
    pub id: String,
    /// Organisation shown in `owned_by` (OpenAI clients display it).
    pub owned_by: String,
    /// Unix seconds when the model was loaded, shown as `created`.
    pub created: u64,
    /// Context window in tokens (prompt + completion), if known; vLLM's `max_model_len`.
    pub max_model_len: Option<u32>,
    /// For an adapter, the id of the base model it applies to; vLLM's `parent`.
    pub parent: Option<String>,
}

impl ModelInfo {
    /// A model named `id`, owned by "ferry", created now, with no known context limit.
    pub fn new(id: impl Into<String>) -> Self {
        let created = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        Self {
            id: id.into(),
            owned_by: "ferry".to_owned(),
            created,
            max_model_len: None,
            parent: None,
        }
    }
}

/// What to continue: raw text (`/v1/completions`) or a conversation (`/v1/chat/completions`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Prompt {
    /// Raw text, tokenized as is.
    Text(String),
    /// Chat messages; the backend applies its chat template and the assistant prefix.
    Chat(Vec<ChatMessage>),
}

/// Who said a chat message; chat templates switch on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Instructions from the application.
    System,
    /// OpenAI's newer name for system instructions; templates usually treat it as `System`.
    Developer,
    /// The end user.
    User,
    /// The model's earlier replies.
    Assistant,
    /// Results of tool calls.
    Tool,
}

impl Role {
    /// The role name as chat templates expect it (`"system"`, `"user"`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            Role::System => "system",
            Role::Developer => "developer",
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Tool => "tool",
        }
    }
}

/// One message of a conversation, with content already flattened to text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChatMessage {
    /// Who said it.
    pub role: Role,
    /// What was said (text parts of multi-part content are concatenated).
    pub content: String,
}

/// A validated generation request handed to a [`Backend`].
#[derive(Debug, Clone, PartialEq)]
pub struct GenerateRequest {
    /// Server-assigned id (`chatcmpl-…` / `cmpl-…`), for logs and tracing.
    pub request_id: String,
    /// Model id as given by the client; one of [`Backend::models`] or `ModelNotFound`.
    pub model: String,
    /// Text or conversation to continue.
    pub prompt: Prompt,
    /// Upper bound on generated tokens, at least 1; the backend may stop earlier at
    /// its context limit and report [`FinishReason::Length`].
    pub max_tokens: u32,
    /// Sampling temperature in `0..=2`; 0 means greedy.
    pub temperature: f32,
    /// Nucleus sampling mass in `(0, 1]`; 1 disables it.
    pub top_p: f32,
    /// Keep only the `k` most likely tokens (vLLM extension); `None` disables it.
    pub top_k: Option<u32>,
    /// Seed for reproducible sampling; `None` lets the backend choose.
    pub seed: Option<u64>,
    /// Stop sequences (at most 4, none empty); generation ends before the first match.
    pub stop: Vec<String>,
}

/// The receiving end of a generation; dropping it cancels the generation.
pub type GenerationStream = mpsc::Receiver<GenerationEvent>;

/// One step of a generation, in order: `Started`, `Text`*, then `Finished` or `Error`.
#[derive(Debug, Clone, PartialEq)]
pub enum GenerationEvent {
    /// The prompt was accepted; its length feeds `usage.prompt_tokens`.
    Started {
        /// Tokens in the prompt after templating.
        prompt_tokens: u32,
    },
    /// Newly generated text (may hold several tokens or part of one character's bytes
    /// already assembled into valid UTF-8).
    Text {
        /// Text to append.
        delta: String,
    },
    /// Generation ended normally.
    Finished {
        /// Why it ended (`finish_reason`).
        reason: FinishReason,
        /// Tokens generated, for `usage.completion_tokens`.
        completion_tokens: u32,
    },
    /// Generation failed after it started.
    Error(BackendError),
}

/// Why a generation ended, as OpenAI's `finish_reason` spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    /// End-of-sequence token or a stop sequence.
    Stop,
    /// `max_tokens` or the context window reached.
    Length,
}

impl FinishReason {
    /// The `finish_reason` string.
    pub fn as_str(self) -> &'static str {
        match self {
            FinishReason::Stop => "stop",
            FinishReason::Length => "length",
        }
    }
}

/// Why a backend could not serve a request; the server maps each to an HTTP status.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BackendError {
    /// The `model` field names no served model (HTTP 404).
    #[error("the model `{0}` does not exist; list served models with GET /v1/models")]
    ModelNotFound(String),
    /// Prompt and completion cannot fit the context window (HTTP 400, `context_length_exceeded`).
    #[error(
        "this model's maximum context length is {max_context} tokens, but the prompt has \
         {prompt_tokens} tokens; shorten the prompt or the messages"
    )]
    PromptTooLong {
        /// Tokens in the templated prompt.
        prompt_tokens: u32,
        /// The model's context window.
        max_context: u32,
    },
    /// The request is valid OpenAI but this backend cannot honour it (HTTP 400).
    #[error("{0}")]
    InvalidRequest(String),
    /// Too many requests queued; the client should retry later (HTTP 429).
    #[error("the server is overloaded; retry later")]
    Overloaded,
    /// The backend is not ready or is shutting down (HTTP 503).
    #[error("the model is unavailable: {0}")]
    Unavailable(String),
    /// A bug or an engine failure (HTTP 500).
    #[error("internal error: {0}")]
    Internal(String),
}
