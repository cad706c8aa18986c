//! OpenAI-compatible serving layer shared by Ferry's built-in engine (`ferry serve`)
//! and its gateway.
//!
//! Start with [`Backend`]: implement it to put any token generator behind the
//! OpenAI HTTP API.
#![forbid(unsafe_code)]

pub mod backend;

pub use backend::{
    Backend, BackendError, ChatMessage, FinishReason, GenerateRequest, GenerationEvent,
    GenerationStream, ModelInfo, Prompt, Role,
};
