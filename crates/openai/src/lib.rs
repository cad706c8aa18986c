//! OpenAI-compatible serving layer shared by Ferry's built-in engine (`ferry serve`)
//! and its gateway.
//!
//! Start with [`Backend`]: implement it and hand it to [`router`] (or [`serve`]) to
//! put any token generator behind `/v1/models`, `/v1/chat/completions` and
//! `/v1/completions`, with SSE streaming, OpenAI error bodies and vLLM-named
//! Prometheus metrics. [`MockBackend`] is a deterministic stand-in engine.
#![forbid(unsafe_code)]

pub mod backend;
pub mod error;
pub mod metrics;
pub mod mock;
pub mod server;
pub mod stop;
pub mod types;
pub mod validate;

pub use backend::{
    Backend, BackendError, ChatMessage, FinishReason, GenerateRequest, GenerationEvent,
    GenerationStream, Load, ModelInfo, Prompt, Role,
};
pub use error::{Error, Result};
pub use metrics::Metrics;
pub use mock::{Failure, MockBackend, MockConfig, MockStats, control_router, embeddings_router};
pub use server::{ServerConfig, router, serve, serve_router};
pub use stop::{StopMatcher, StopStep};
pub use validate::ValidRequest;
