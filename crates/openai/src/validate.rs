//! Request validation: the only way to turn client JSON into a [`GenerateRequest`].
//!
//! Every rejection names the offending parameter, the accepted range and the value
//! sent, so a client developer can fix the request from the error alone.

use serde::de::DeserializeOwned;

use crate::backend::{ChatMessage, GenerateRequest, Prompt, Role};
use crate::error::{Error, Result};
use crate::types::{
    ChatCompletionRequest, CompletionRequest, MessageContent, PromptInput, StopSequences,
};

/// OpenAI's limit on stop sequences.
pub const MAX_STOP_SEQUENCES: usize = 4;

/// OpenAI's default `max_tokens` for `/v1/completions`.
pub const COMPLETIONS_DEFAULT_MAX_TOKENS: u32 = 16;

/// A request that passed validation, with how the response must be shaped.
#[derive(Debug, Clone, PartialEq)]
pub struct ValidRequest {
    /// What the backend is asked to generate.
    pub generate: GenerateRequest,
    /// Answer with server-sent events.
    pub stream: bool,
    /// Streaming only: end with a chunk carrying `usage`.
    pub include_usage: bool,
}

/// Decodes a JSON body, telling syntax errors (400) from shape errors (422, with the
/// failing field's path). Never panics; serde_json bounds nesting depth.
pub fn decode_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let value: T = serde_path_to_error::deserialize(&mut de).map_err(|err| {
        let path = err.path().to_string();
        let inner = err.into_inner();
        match inner.classify() {
            serde_json::error::Category::Data => Error::JsonShape {
                path: if path == "." { "body".to_owned() } else { path },
                message: inner.to_string(),
            },
            serde_json::error::Category::Syntax
            | serde_json::error::Category::Eof
            | serde_json::error::Category::Io => Error::MalformedJson {
                message: inner.to_string(),
            },
        }
    })?;
    de.end().map_err(|e| Error::MalformedJson {
        message: e.to_string(),
    })?;
    Ok(value)
}

/// Validates a chat request; `default_max_tokens` applies when the client sets none.
pub fn chat(
    req: ChatCompletionRequest,
    request_id: String,
    default_max_tokens: u32,
) -> Result<ValidRequest> {
    check_model(&req.model)?;
    check_n(req.n)?;
    if req.logprobs == Some(true) {
        return Err(Error::invalid(
            "logprobs",
            "log-probabilities are not supported by this server; omit `logprobs`",
        ));
    }
    let max_tokens = match (req.max_completion_tokens, req.max_tokens) {
        (Some(v), _) => max_tokens("max_completion_tokens", v)?,
        (None, Some(v)) => max_tokens("max_tokens", v)?,
        (None, None) => default_max_tokens.max(1),
    };
    if req.messages.is_empty() {
        return Err(Error::invalid(
            "messages",
            "must contain at least one message, e.g. [{\"role\":\"user\",\"content\":\"Hi\"}]",
        ));
    }
    let mut messages = Vec::with_capacity(req.messages.len());
    for (i, m) in req.messages.into_iter().enumerate() {
        let content = match m.content {
            Some(MessageContent::Text(t)) => t,
            Some(MessageContent::Parts(parts)) => {
                let mut text = String::new();
                for (j, part) in parts.into_iter().enumerate() {
                    match (part.kind.as_str(), part.text) {
                        ("text", Some(t)) => text.push_str(&t),
                        ("text", None) => {
                            return Err(Error::invalid(
                                format!("messages[{i}].content[{j}].text"),
                                "a text part needs a `text` string",
                            ));
                        }
                        (other, _) => {
                            return Err(Error::invalid(
                                format!("messages[{i}].content[{j}].type"),
                                format!("only `text` content parts are supported, got `{other}`"),
                            ));
                        }
                    }
                }
                text
            }
            None if m.role == Role::Assistant => String::new(),
            None => {
                return Err(Error::invalid(
                    format!("messages[{i}].content"),
                    format!("is required for a `{}` message", m.role.as_str()),
                ));
            }
        };
        messages.push(ChatMessage {
            role: m.role,
            content,
        });
    }
    let include_usage = usage_wanted(req.stream, req.stream_options.as_ref());
    Ok(ValidRequest {
        generate: GenerateRequest {
            request_id,
            model: req.model,
            prompt: Prompt::Chat(messages),
            max_tokens,
            temperature: temperature(req.temperature)?,
            top_p: top_p(req.top_p)?,
            top_k: top_k(req.top_k)?,
            seed: req.seed.map(|s| s as u64),
            stop: stop(req.stop)?,
        },
        stream: req.stream.unwrap_or(false),
        include_usage,
    })
}

/// Validates a text-completion request (OpenAI's default of 16 tokens applies).
pub fn completion(req: CompletionRequest, request_id: String) -> Result<ValidRequest> {
    check_model(&req.model)?;
    check_n(req.n)?;
    if let Some(b) = req.best_of
        && b != 1
    {
        return Err(Error::invalid(
            "best_of",
            format!("only best_of=1 is supported, got {b}; omit `best_of`"),
        ));
    }
    if req.echo == Some(true) {
        return Err(Error::invalid(
            "echo",
            "echoing the prompt is not supported; omit `echo` and prepend the prompt yourself",
        ));
    }
    if let Some(l) = req.logprobs
        && l > 0
    {
        return Err(Error::invalid(
            "logprobs",
            "log-probabilities are not supported by this server; omit `logprobs`",
        ));
    }
    if req.suffix.as_deref().is_some_and(|s| !s.is_empty()) {
        return Err(Error::invalid(
            "suffix",
            "insertion (`suffix`) is not supported; omit it",
        ));
    }
    let prompt = match req.prompt {
        PromptInput::Text(t) => t,
        PromptInput::Texts(mut v) if v.len() == 1 => v.pop().unwrap_or_default(),
        PromptInput::Texts(v) if v.is_empty() => {
            return Err(Error::invalid("prompt", "must not be an empty list"));
        }
        PromptInput::Texts(v) => {
            return Err(Error::invalid(
                "prompt",
                format!(
                    "batched prompts are not supported (got {}); send one request per prompt",
                    v.len()
                ),
            ));
        }
        PromptInput::Tokens(_) | PromptInput::TokenBatches(_) => {
            return Err(Error::invalid(
                "prompt",
                "token-id prompts are not supported; send the prompt as text",
            ));
        }
    };
    let max_tokens = match req.max_tokens {
        Some(v) => max_tokens("max_tokens", v)?,
        None => COMPLETIONS_DEFAULT_MAX_TOKENS,
    };
    let include_usage = usage_wanted(req.stream, req.stream_options.as_ref());
    Ok(ValidRequest {
        generate: GenerateRequest {
            request_id,
            model: req.model,
            prompt: Prompt::Text(prompt),
            max_tokens,
            temperature: temperature(req.temperature)?,
            top_p: top_p(req.top_p)?,
            top_k: top_k(req.top_k)?,
            seed: req.seed.map(|s| s as u64),
            stop: stop(req.stop)?,
        },
        stream: req.stream.unwrap_or(false),
        include_usage,
    })
}

fn usage_wanted(stream: Option<bool>, opts: Option<&crate::types::StreamOptions>) -> bool {
    stream == Some(true) && opts.and_then(|o| o.include_usage) == Some(true)
}

fn check_model(model: &str) -> Result<()> {
    if model.trim().is_empty() {
        return Err(Error::invalid(
            "model",
            "must name a served model; list them with GET /v1/models",
        ));
    }
    Ok(())
}

fn check_n(n: Option<i64>) -> Result<()> {
    match n {
        None | Some(1) => Ok(()),
        Some(n) => Err(Error::invalid(
            "n",
            format!("only n=1 is supported, got {n}; send several requests for several answers"),
        )),
    }
}

fn max_tokens(param: &str, v: i64) -> Result<u32> {
    if v < 1 {
        return Err(Error::invalid(
            param,
            format!("must be at least 1, got {v}"),
        ));
    }
    u32::try_from(v)
        .map_err(|_| Error::invalid(param, format!("must be at most {}, got {v}", u32::MAX)))
}

fn temperature(v: Option<f64>) -> Result<f32> {
    match v {
        None => Ok(1.0),
        Some(t) if (0.0..=2.0).contains(&t) => Ok(t as f32),
        Some(t) => Err(Error::invalid(
            "temperature",
            format!("must be between 0 and 2, got {t}"),
        )),
    }
}

fn top_p(v: Option<f64>) -> Result<f32> {
    match v {
        None => Ok(1.0),
        Some(p) if p > 0.0 && p <= 1.0 => Ok(p as f32),
        Some(p) => Err(Error::invalid(
            "top_p",
            format!("must be greater than 0 and at most 1, got {p}"),
        )),
    }
}

fn top_k(v: Option<i64>) -> Result<Option<u32>> {
    match v {
        None | Some(-1) | Some(0) => Ok(None),
        Some(k) if k > 0 => Ok(Some(u32::try_from(k).unwrap_or(u32::MAX))),
        Some(k) => Err(Error::invalid(
            "top_k",
            format!("must be a positive integer, or -1 to disable, got {k}"),
        )),
    }
}

fn stop(v: Option<StopSequences>) -> Result<Vec<String>> {
    let stops = v.map(StopSequences::into_vec).unwrap_or_default();
    if stops.len() > MAX_STOP_SEQUENCES {
        return Err(Error::invalid(
            "stop",
            format!(
                "at most {MAX_STOP_SEQUENCES} stop sequences are allowed, got {}",
                stops.len()
            ),
        ));
    }
    if let Some(i) = stops.iter().position(String::is_empty) {
        return Err(Error::invalid(
            format!("stop[{i}]"),
            "stop sequences must not be empty",
        ));
    }
    Ok(stops)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn chat_req(v: serde_json::Value) -> Result<ValidRequest> {
        let req: ChatCompletionRequest = decode_json(v.to_string().as_bytes())?;
        chat(req, "chatcmpl-t".into(), 100)
    }

    fn completion_req(v: serde_json::Value) -> Result<ValidRequest> {
        let req: CompletionRequest = decode_json(v.to_string().as_bytes())?;
        completion(req, "cmpl-t".into())
    }

    fn param_of(r: Result<ValidRequest>) -> String {
        match r {
            Err(Error::InvalidParam { param, .. }) => param,
            other => panic!("expected InvalidParam, got {other:?}"),
        }
    }

    fn base() -> serde_json::Value {
        json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]})
    }

    fn with(mut v: serde_json::Value, key: &str, val: serde_json::Value) -> serde_json::Value {
        v[key] = val;
        v
    }

    #[test]
    fn valid_chat_gets_defaults_and_flattened_parts() {
        let v = chat_req(json!({"model": "m", "messages": [
            {"role": "system", "content": "s"},
            {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}
        ], "stop": ["x", "y"], "seed": 5, "top_k": -1}))
        .unwrap();
        assert!(!v.stream);
        let g = v.generate;
        assert_eq!(g.max_tokens, 100);
        assert_eq!(g.temperature, 1.0);
        assert_eq!(g.top_p, 1.0);
        assert_eq!(g.top_k, None);
        assert_eq!(g.seed, Some(5));
        assert_eq!(g.stop, vec!["x", "y"]);
        assert_eq!(
            g.prompt,
            Prompt::Chat(vec![
                ChatMessage {
                    role: Role::System,
                    content: "s".into()
                },
                ChatMessage {
                    role: Role::User,
                    content: "ab".into()
                },
            ])
        );
    }

    #[test]
    fn max_completion_tokens_wins_over_max_tokens() {
        let v = chat_req(with(
            with(base(), "max_tokens", json!(3)),
            "max_completion_tokens",
            json!(9),
        ));
        assert_eq!(v.unwrap().generate.max_tokens, 9);
    }

    #[test]
    fn out_of_range_values_name_their_param() {
        assert_eq!(
            param_of(chat_req(with(base(), "max_tokens", json!(0)))),
            "max_tokens"
        );
        assert_eq!(
            param_of(chat_req(with(base(), "max_tokens", json!(-5)))),
            "max_tokens"
        );
        assert_eq!(
            param_of(chat_req(with(base(), "max_completion_tokens", json!(0)))),
            "max_completion_tokens"
        );
        assert_eq!(
            param_of(chat_req(with(base(), "temperature", json!(2.5)))),
            "temperature"
        );
        assert_eq!(
            param_of(chat_req(with(base(), "temperature", json!(-0.1)))),
            "temperature"
        );
        assert_eq!(param_of(chat_req(with(base(), "top_p", json!(0)))), "top_p");
        assert_eq!(
            param_of(chat_req(with(base(), "top_p", json!(1.01)))),
            "top_p"
        );
        assert_eq!(
            param_of(chat_req(with(base(), "top_k", json!(-3)))),
            "top_k"
        );
        assert_eq!(param_of(chat_req(with(base(), "n", json!(2)))), "n");
        assert_eq!(
            param_of(chat_req(with(base(), "logprobs", json!(true)))),
            "logprobs"
        );
        assert_eq!(
            param_of(chat_req(with(
                base(),
                "stop",
                json!(["a", "b", "c", "d", "e"])
            ))),
            "stop"
        );
        assert_eq!(
            param_of(chat_req(with(base(), "stop", json!(["a", ""])))),
            "stop[1]"
        );
        assert_eq!(
            param_of(chat_req(with(base(), "model", json!("")))),
            "model"
        );
        assert_eq!(
            param_of(chat_req(with(base(), "messages", json!([])))),
            "messages"
        );
        assert_eq!(
            param_of(chat_req(with(
                base(),
                "messages",
                json!([{"role": "user", "content": null}])
            ))),
            "messages[0].content"
        );
        assert_eq!(
            param_of(chat_req(with(
                base(),
                "messages",
                json!([{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}])
            ))),
            "messages[0].content[0].type"
        );
    }

    #[test]
    fn range_error_message_states_limit_and_value() {
        let err = chat_req(with(base(), "temperature", json!(3))).unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains("temperature") && msg.contains("between 0 and 2") && msg.contains('3'),
            "{msg}"
        );
    }

    #[test]
    fn completions_accept_text_and_single_list_and_reject_the_rest() {
        let ok = completion_req(json!({"model": "m", "prompt": ["once"], "stream": true,
            "stream_options": {"include_usage": true}}))
        .unwrap();
        assert_eq!(ok.generate.prompt, Prompt::Text("once".into()));
        assert_eq!(ok.generate.max_tokens, COMPLETIONS_DEFAULT_MAX_TOKENS);
        assert!(ok.stream && ok.include_usage);
        let p = |v| param_of(completion_req(v));
        assert_eq!(p(json!({"model": "m", "prompt": ["a", "b"]})), "prompt");
        assert_eq!(p(json!({"model": "m", "prompt": []})), "prompt");
        assert_eq!(p(json!({"model": "m", "prompt": [1, 2]})), "prompt");
        assert_eq!(
            p(json!({"model": "m", "prompt": "a", "echo": true})),
            "echo"
        );
        assert_eq!(
            p(json!({"model": "m", "prompt": "a", "best_of": 2})),
            "best_of"
        );
        assert_eq!(
            p(json!({"model": "m", "prompt": "a", "logprobs": 3})),
            "logprobs"
        );
        assert_eq!(
            p(json!({"model": "m", "prompt": "a", "suffix": "z"})),
            "suffix"
        );
        assert_eq!(
            p(json!({"model": "m", "prompt": "a", "max_tokens": 0})),
            "max_tokens"
        );
    }

    #[test]
    fn include_usage_needs_stream() {
        let v = chat_req(with(
            base(),
            "stream_options",
            json!({"include_usage": true}),
        ))
        .unwrap();
        assert!(!v.include_usage);
    }

    #[test]
    fn decode_errors_tell_syntax_from_shape_and_give_the_path() {
        let syntax = decode_json::<ChatCompletionRequest>(b"{\"model\": ").unwrap_err();
        assert!(matches!(syntax, Error::MalformedJson { .. }), "{syntax:?}");
        let trailing =
            decode_json::<ChatCompletionRequest>(br#"{"model":"m","messages":[]} x"#).unwrap_err();
        assert!(
            matches!(trailing, Error::MalformedJson { .. }),
            "{trailing:?}"
        );
        let shape = decode_json::<ChatCompletionRequest>(
            br#"{"model":"m","messages":[{"role":"wizard","content":"x"}]}"#,
        )
        .unwrap_err();
        match shape {
            Error::JsonShape { path, .. } => assert_eq!(path, "messages[0].role"),
            other => panic!("expected JsonShape, got {other:?}"),
        }
        let wrong_type = decode_json::<ChatCompletionRequest>(
            br#"{"model":"m","messages":[],"max_tokens":"ten"}"#,
        )
        .unwrap_err();
        match wrong_type {
            Error::JsonShape { path, .. } => assert_eq!(path, "max_tokens"),
            other => panic!("expected JsonShape, got {other:?}"),
        }
        let missing = decode_json::<ChatCompletionRequest>(br#"{"messages":[]}"#).unwrap_err();
        assert!(matches!(missing, Error::JsonShape { .. }), "{missing:?}");
        let not_object = decode_json::<ChatCompletionRequest>(b"true").unwrap_err();
        match not_object {
            Error::JsonShape { path, .. } => assert_eq!(path, "body"),
            other => panic!("expected JsonShape, got {other:?}"),
        }
        let deep = "[".repeat(10_000);
        assert!(decode_json::<serde_json::Value>(deep.as_bytes()).is_err());
    }
}
