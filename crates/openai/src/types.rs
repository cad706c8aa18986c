//! Wire types of the OpenAI API subset Ferry serves: `/v1/models`,
//! `/v1/chat/completions` and `/v1/completions`, streamed or not.
//!
//! Requests are deliberately loose (numbers as `i64`/`f64`, unknown fields ignored as
//! OpenAI does) so that out-of-range values reach [`crate::validate`], which names the
//! parameter, instead of failing as an anonymous decode error. Responses serialize to
//! exactly what OpenAI's clients parse, and deserialize too, so the gateway can read
//! `usage` from replies it forwards.

use serde::{Deserialize, Serialize};

use crate::backend::{FinishReason, ModelInfo, Role};

/// `stop`: one string or a list of strings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum StopSequences {
    /// A single stop sequence.
    One(String),
    /// Several stop sequences (OpenAI allows up to 4).
    Many(Vec<String>),
}

impl StopSequences {
    /// The sequences as a list, whichever form was sent.
    pub fn into_vec(self) -> Vec<String> {
        match self {
            StopSequences::One(s) => vec![s],
            StopSequences::Many(v) => v,
        }
    }
}

/// `stream_options` of a streaming request.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamOptions {
    /// Send a last chunk with `usage` and no choices before `[DONE]`.
    #[serde(default)]
    pub include_usage: Option<bool>,
}

/// Message `content`: a string or a list of typed parts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum MessageContent {
    /// Plain text.
    Text(String),
    /// Multi-part content; only `{"type":"text","text":…}` parts are supported.
    Parts(Vec<ContentPart>),
}

/// One part of multi-part message content.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContentPart {
    /// Part type: `text` is supported, others (images, audio) are rejected.
    #[serde(rename = "type")]
    pub kind: String,
    /// Text of a `text` part.
    #[serde(default)]
    pub text: Option<String>,
}

/// A chat message as clients send it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequestMessage {
    /// Author role.
    pub role: Role,
    /// Content; may be null for assistant messages that only carried tool calls.
    #[serde(default)]
    pub content: Option<MessageContent>,
    /// Optional participant name (accepted, not used by templates).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// Body of `POST /v1/chat/completions`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ChatCompletionRequest {
    /// Served model id.
    pub model: String,
    /// The conversation so far.
    pub messages: Vec<RequestMessage>,
    /// Deprecated name of `max_completion_tokens`; either is accepted.
    #[serde(default)]
    pub max_tokens: Option<i64>,
    /// Upper bound on generated tokens.
    #[serde(default)]
    pub max_completion_tokens: Option<i64>,
    /// Sampling temperature, `0..=2` (default 1).
    #[serde(default)]
    pub temperature: Option<f64>,
    /// Nucleus sampling mass, `(0, 1]` (default 1).
    #[serde(default)]
    pub top_p: Option<f64>,
    /// Top-k sampling (vLLM extension); -1 or 0 disables it.
    #[serde(default)]
    pub top_k: Option<i64>,
    /// Number of choices; only 1 is supported.
    #[serde(default)]
    pub n: Option<i64>,
    /// Stream the answer as server-sent events.
    #[serde(default)]
    pub stream: Option<bool>,
    /// Options for streaming.
    #[serde(default)]
    pub stream_options: Option<StreamOptions>,
    /// Stop sequences.
    #[serde(default)]
    pub stop: Option<StopSequences>,
    /// Seed for reproducible sampling.
    #[serde(default)]
    pub seed: Option<i64>,
    /// Token log-probabilities; not supported (rejected when true).
    #[serde(default)]
    pub logprobs: Option<bool>,
}

/// `prompt` of a text completion: text, or token ids (not supported).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum PromptInput {
    /// One prompt.
    Text(String),
    /// A batch of prompts; only a batch of one is supported.
    Texts(Vec<String>),
    /// Token ids; rejected (Ferry tokenizes itself).
    Tokens(Vec<i64>),
    /// Batches of token ids; rejected.
    TokenBatches(Vec<Vec<i64>>),
}

/// Body of `POST /v1/completions`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CompletionRequest {
    /// Served model id.
    pub model: String,
    /// Text to continue.
    pub prompt: PromptInput,
    /// Upper bound on generated tokens (OpenAI's default is 16).
    #[serde(default)]
    pub max_tokens: Option<i64>,
    /// Sampling temperature, `0..=2` (default 1).
    #[serde(default)]
    pub temperature: Option<f64>,
    /// Nucleus sampling mass, `(0, 1]` (default 1).
    #[serde(default)]
    pub top_p: Option<f64>,
    /// Top-k sampling (vLLM extension); -1 or 0 disables it.
    #[serde(default)]
    pub top_k: Option<i64>,
    /// Number of choices; only 1 is supported.
    #[serde(default)]
    pub n: Option<i64>,
    /// Server-side candidates; only 1 is supported.
    #[serde(default)]
    pub best_of: Option<i64>,
    /// Stream the answer as server-sent events.
    #[serde(default)]
    pub stream: Option<bool>,
    /// Options for streaming.
    #[serde(default)]
    pub stream_options: Option<StreamOptions>,
    /// Stop sequences.
    #[serde(default)]
    pub stop: Option<StopSequences>,
    /// Seed for reproducible sampling.
    #[serde(default)]
    pub seed: Option<i64>,
    /// Echo the prompt before the completion; not supported (rejected when true).
    #[serde(default)]
    pub echo: Option<bool>,
    /// Token log-probabilities; not supported (rejected when set).
    #[serde(default)]
    pub logprobs: Option<i64>,
    /// Text after the insertion point; not supported (rejected when non-empty).
    #[serde(default)]
    pub suffix: Option<String>,
}

/// Token accounting of one request.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Tokens in the (templated) prompt.
    pub prompt_tokens: u32,
    /// Tokens generated.
    pub completion_tokens: u32,
    /// Sum of both.
    pub total_tokens: u32,
}

impl Usage {
    /// Usage with `total_tokens` computed.
    pub fn new(prompt_tokens: u32, completion_tokens: u32) -> Self {
        Self {
            prompt_tokens,
            completion_tokens,
            total_tokens: prompt_tokens.saturating_add(completion_tokens),
        }
    }
}

/// The assistant's reply in a non-streamed chat completion.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResponseMessage {
    /// Always `assistant`.
    pub role: Role,
    /// Generated text.
    pub content: String,
}

/// One choice of a non-streamed chat completion.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChatChoice {
    /// Position among choices (always 0).
    pub index: u32,
    /// The reply.
    pub message: ResponseMessage,
    /// Why generation ended.
    pub finish_reason: Option<FinishReason>,
    /// Always null (log-probabilities are not supported).
    pub logprobs: Option<serde_json::Value>,
}

/// Response of a non-streamed `POST /v1/chat/completions`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChatCompletionResponse {
    /// `chatcmpl-…`.
    pub id: String,
    /// Always `chat.completion`.
    pub object: String,
    /// Unix seconds.
    pub created: u64,
    /// Model that answered.
    pub model: String,
    /// Exactly one choice.
    pub choices: Vec<ChatChoice>,
    /// Token accounting.
    pub usage: Usage,
}

/// Incremental content of a streamed chat choice.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChatDelta {
    /// `assistant` in the first chunk only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<Role>,
    /// New text, absent in the first and last chunks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
}

/// One choice of a streamed chat chunk.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChatChunkChoice {
    /// Position among choices (always 0).
    pub index: u32,
    /// What changed.
    pub delta: ChatDelta,
    /// Set in the last content chunk.
    pub finish_reason: Option<FinishReason>,
    /// Always null.
    pub logprobs: Option<serde_json::Value>,
}

/// One `data:` event of a streamed chat completion.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChatCompletionChunk {
    /// Same id in every chunk of a stream.
    pub id: String,
    /// Always `chat.completion.chunk`.
    pub object: String,
    /// Unix seconds, same in every chunk.
    pub created: u64,
    /// Model that answers.
    pub model: String,
    /// One choice, or none in the final usage chunk.
    pub choices: Vec<ChatChunkChoice>,
    /// Set only in the final chunk when `stream_options.include_usage` is true.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
}

/// One choice of a text completion (streamed or not).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompletionChoice {
    /// Position among choices (always 0).
    pub index: u32,
    /// Generated text (the whole text, or the new part in a stream chunk).
    pub text: String,
    /// Why generation ended; null in stream chunks until the last.
    pub finish_reason: Option<FinishReason>,
    /// Always null.
    pub logprobs: Option<serde_json::Value>,
}

/// Response of `POST /v1/completions`, and each chunk of its stream.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompletionResponse {
    /// `cmpl-…`.
    pub id: String,
    /// Always `text_completion`.
    pub object: String,
    /// Unix seconds.
    pub created: u64,
    /// Model that answered.
    pub model: String,
    /// One choice, or none in the final usage chunk of a stream.
    pub choices: Vec<CompletionChoice>,
    /// Always set when not streaming; in a stream only in the final usage chunk.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
}

/// One entry of `GET /v1/models`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Model {
    /// Model id to put in requests.
    pub id: String,
    /// Always `model`.
    pub object: String,
    /// Unix seconds.
    pub created: u64,
    /// Owner shown by clients.
    pub owned_by: String,
    /// Context window in tokens (vLLM field).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_model_len: Option<u32>,
    /// Base model of an adapter (vLLM field).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<String>,
}

impl From<ModelInfo> for Model {
    fn from(info: ModelInfo) -> Self {
        Self {
            id: info.id,
            object: "model".to_owned(),
            created: info.created,
            owned_by: info.owned_by,
            max_model_len: info.max_model_len,
            parent: info.parent,
        }
    }
}

/// Response of `GET /v1/models`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelList {
    /// Always `list`.
    pub object: String,
    /// Served models.
    pub data: Vec<Model>,
}

/// OpenAI's error envelope: `{"error": {...}}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    /// The error.
    pub error: ErrorDetail,
}

/// Fields of an OpenAI error.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorDetail {
    /// Human-readable explanation, naming the field and the fix.
    pub message: String,
    /// Error class (`invalid_request_error`, `server_error`, …).
    #[serde(rename = "type")]
    pub kind: String,
    /// Offending request field, if one.
    pub param: Option<String>,
    /// Machine-readable code (`model_not_found`, `context_length_exceeded`, …).
    pub code: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chat_request_accepts_openai_shapes_and_ignores_unknown_fields() {
        let body = r#"{
            "model": "m", "messages": [
                {"role": "system", "content": "be brief"},
                {"role": "user", "content": [{"type": "text", "text": "hi"}]},
                {"role": "assistant", "content": null}
            ],
            "stop": "END", "stream": true, "stream_options": {"include_usage": true},
            "max_completion_tokens": 7, "frequency_penalty": 0, "user": "u1",
            "logit_bias": {"1": 2}
        }"#;
        let req: ChatCompletionRequest = serde_json::from_str(body).unwrap();
        assert_eq!(req.messages.len(), 3);
        assert_eq!(req.messages[2].content, None);
        assert_eq!(
            req.stop.map(StopSequences::into_vec),
            Some(vec!["END".to_owned()])
        );
        assert_eq!(req.max_completion_tokens, Some(7));
        assert_eq!(req.stream_options.unwrap().include_usage, Some(true));
    }

    #[test]
    fn completion_prompt_forms_decode_to_the_right_variant() {
        let decode = |p: &str| {
            serde_json::from_str::<CompletionRequest>(&format!(r#"{{"model":"m","prompt":{p}}}"#))
                .unwrap()
                .prompt
        };
        assert_eq!(decode(r#""a""#), PromptInput::Text("a".into()));
        assert_eq!(
            decode(r#"["a","b"]"#),
            PromptInput::Texts(vec!["a".into(), "b".into()])
        );
        assert_eq!(decode("[1,2]"), PromptInput::Tokens(vec![1, 2]));
        assert_eq!(
            decode("[[1],[2]]"),
            PromptInput::TokenBatches(vec![vec![1], vec![2]])
        );
    }

    #[test]
    fn chunk_omits_absent_usage_and_delta_fields() {
        let chunk = ChatCompletionChunk {
            id: "chatcmpl-1".into(),
            object: "chat.completion.chunk".into(),
            created: 1,
            model: "m".into(),
            choices: vec![ChatChunkChoice {
                index: 0,
                delta: ChatDelta {
                    role: None,
                    content: Some("x".into()),
                },
                finish_reason: None,
                logprobs: None,
            }],
            usage: None,
        };
        let v = serde_json::to_value(&chunk).unwrap();
        assert!(v.get("usage").is_none());
        assert_eq!(
            v["choices"][0]["delta"],
            serde_json::json!({"content": "x"})
        );
        assert_eq!(v["choices"][0]["finish_reason"], serde_json::Value::Null);
    }
}
