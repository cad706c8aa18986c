//! A deterministic engine simulator: serves the OpenAI API without a model, for the
//! tests here and the gateway's `ferry mock-engine`.
//!
//! It "tokenizes" by whitespace (one word = one token), answers with words picked
//! by a hash of the prompt, seed and position (same request → same text), waits a
//! configurable time to first token and between tokens, honours `max_tokens`, stop
//! sequences and its context window, and can be told, even while serving, to fail
//! a fraction of requests, hang, or break after n tokens. Counters let tests check
//! that a client disconnect really cancelled the generation.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use axum::extract::State;
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::{Deserialize, Serialize};
use tokio::sync::{Semaphore, mpsc};

use crate::backend::{
    Backend, BackendError, FinishReason, GenerateRequest, GenerationEvent, GenerationStream, Load,
    ModelInfo, Prompt,
};
use crate::stop::{StopMatcher, StopStep};

/// How the mock misbehaves; switchable at run time with [`MockBackend::set_failure`]
/// or `POST /mock/failure` (see [`control_router`]), e.g. `{"mode":"error_rate","rate":0.5}`.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
#[serde(tag = "mode", rename_all = "snake_case", deny_unknown_fields)]
pub enum Failure {
    /// Serve every request.
    #[default]
    None,
    /// Refuse this fraction (0..=1) of requests with an internal error (HTTP 500),
    /// chosen deterministically from the request count.
    ErrorRate {
        /// Fraction of requests refused.
        rate: f64,
    },
    /// Accept requests, report the prompt, then never produce a token.
    Hang,
    /// Produce this many tokens, then fail the generation with an internal error.
    FailAfter {
        /// Tokens produced before the failure.
        tokens: u32,
    },
}

/// Settings of a [`MockBackend`].
#[derive(Debug, Clone, PartialEq)]
pub struct MockConfig {
    /// Model ids served (the first is the "main" one shown in metrics).
    pub models: Vec<String>,
    /// Tokens in a full answer when `max_tokens` does not cut it short.
    pub tokens_per_response: u32,
    /// Delay before the first token.
    pub time_to_first_token: Duration,
    /// Delay between tokens.
    pub inter_token_delay: Duration,
    /// Context window (prompt + completion tokens).
    pub max_context: u32,
    /// Generations running at once, like an engine's batch; later ones wait (and
    /// count in `vllm:num_requests_waiting`). `running / max_running` is reported as
    /// KV-cache usage.
    pub max_running: u32,
    /// Misbehaviour at start.
    pub failure: Failure,
}

impl Default for MockConfig {
    fn default() -> Self {
        Self {
            models: vec!["mock".to_owned()],
            tokens_per_response: 16,
            time_to_first_token: Duration::ZERO,
            inter_token_delay: Duration::ZERO,
            max_context: 2048,
            max_running: 256,
            failure: Failure::None,
        }
    }
}

/// Counters of what the mock did, for assertions in tests (`GET /mock/stats`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct MockStats {
    /// Generations accepted.
    pub started: u64,
    /// Generations that ran to `Finished`.
    pub completed: u64,
    /// Generations abandoned because the receiver was dropped.
    pub cancelled: u64,
    /// Generations that ended in an injected failure (up front or mid-stream).
    pub failed: u64,
    /// Generations currently producing tokens or waiting for their first one.
    pub active: u64,
}

#[derive(Debug, Default)]
struct Counters {
    requests: AtomicU64,
    started: AtomicU64,
    completed: AtomicU64,
    cancelled: AtomicU64,
    failed: AtomicU64,
    waiting: AtomicU64,
    running: AtomicU64,
}

/// The simulated engine; cheap to clone (clones share state).
#[derive(Debug, Clone)]
pub struct MockBackend {
    cfg: Arc<MockConfig>,
    failure: Arc<RwLock<Failure>>,
    counters: Arc<Counters>,
    slots: Arc<Semaphore>,
    created: u64,
}

impl MockBackend {
    /// A mock with `cfg`.
    pub fn new(cfg: MockConfig) -> Self {
        let failure = Arc::new(RwLock::new(cfg.failure));
        let created = ModelInfo::new("").created;
        let slots = Arc::new(Semaphore::new(cfg.max_running.max(1) as usize));
        Self {
            cfg: Arc::new(cfg),
            failure,
            counters: Arc::default(),
            slots,
            created,
        }
    }

    /// Changes the misbehaviour for requests arriving from now on.
    pub fn set_failure(&self, failure: Failure) {
        *self.failure.write().unwrap_or_else(|p| p.into_inner()) = failure;
    }

    /// What the mock has done so far.
    pub fn stats(&self) -> MockStats {
        let c = &self.counters;
        MockStats {
            started: c.started.load(Ordering::SeqCst),
            completed: c.completed.load(Ordering::SeqCst),
            cancelled: c.cancelled.load(Ordering::SeqCst),
            failed: c.failed.load(Ordering::SeqCst),
            active: c.waiting.load(Ordering::SeqCst) + c.running.load(Ordering::SeqCst),
        }
    }

    /// The text the mock produces for `prompt` with `seed`, word by word (each entry
    /// is one token, with its leading space); tests use it to predict answers.
    pub fn token_text(prompt: &Prompt, seed: Option<u64>, index: u32) -> String {
        let h = mix(prompt_hash(prompt) ^ mix(seed.unwrap_or(0)) ^ u64::from(index));
        let word = WORDS[(h % WORDS.len() as u64) as usize];
        format!(" {word}")
    }

    /// Prompt length in mock tokens: whitespace-separated words, plus 2 per chat
    /// message for its role markers and 1 for the assistant prefix.
    pub fn count_prompt_tokens(prompt: &Prompt) -> u32 {
        let n = match prompt {
            Prompt::Text(t) => t.split_whitespace().count(),
            Prompt::Chat(msgs) => {
                msgs.iter()
                    .map(|m| m.content.split_whitespace().count() + 2)
                    .sum::<usize>()
                    + 1
            }
        };
        u32::try_from(n).unwrap_or(u32::MAX)
    }

    fn current_failure(&self) -> Failure {
        *self.failure.read().unwrap_or_else(|p| p.into_inner())
    }
}

impl Backend for MockBackend {
    fn models(&self) -> Vec<ModelInfo> {
        self.cfg
            .models
            .iter()
            .map(|id| ModelInfo {
                id: id.clone(),
                owned_by: "ferry-mock".to_owned(),
                created: self.created,
                max_model_len: Some(self.cfg.max_context),
                parent: None,
            })
            .collect()
    }

    fn generate(&self, req: GenerateRequest) -> Result<GenerationStream, BackendError> {
        if !self.cfg.models.contains(&req.model) {
            return Err(BackendError::ModelNotFound(req.model));
        }
        let nth = self.counters.requests.fetch_add(1, Ordering::SeqCst);
        let failure = self.current_failure();
        if let Failure::ErrorRate { rate } = failure {
            // Deterministic: request n fails when the running failure quota crosses an integer.
            let rate = rate.clamp(0.0, 1.0);
            let due = ((nth + 1) as f64 * rate).floor() > (nth as f64 * rate).floor();
            if due {
                self.counters.failed.fetch_add(1, Ordering::SeqCst);
                return Err(BackendError::Internal(format!(
                    "mock failure injected (error rate {rate})"
                )));
            }
        }
        let prompt_tokens = Self::count_prompt_tokens(&req.prompt);
        if prompt_tokens >= self.cfg.max_context {
            return Err(BackendError::PromptTooLong {
                prompt_tokens,
                max_context: self.cfg.max_context,
            });
        }
        self.counters.started.fetch_add(1, Ordering::SeqCst);
        let (tx, rx) = mpsc::channel(16);
        let job = Job {
            cfg: self.cfg.clone(),
            counters: self.counters.clone(),
            slots: self.slots.clone(),
            failure,
            prompt_tokens,
            req,
        };
        tokio::spawn(job.run(tx));
        Ok(rx)
    }

    fn load(&self) -> Option<Load> {
        let c = &self.counters;
        let running = c.running.load(Ordering::SeqCst);
        Some(Load {
            running: u32::try_from(running).unwrap_or(u32::MAX),
            waiting: u32::try_from(c.waiting.load(Ordering::SeqCst)).unwrap_or(u32::MAX),
            kv_cache_usage: Some(running as f64 / f64::from(self.cfg.max_running.max(1))),
        })
    }
}

/// One simulated generation.
struct Job {
    cfg: Arc<MockConfig>,
    counters: Arc<Counters>,
    slots: Arc<Semaphore>,
    failure: Failure,
    prompt_tokens: u32,
    req: GenerateRequest,
}

/// Where a generation is, so the counters are released however it ends.
struct Phase<'a> {
    counters: &'a Counters,
    running: bool,
}

impl<'a> Phase<'a> {
    fn new(counters: &'a Counters) -> Self {
        counters.waiting.fetch_add(1, Ordering::SeqCst);
        Self {
            counters,
            running: false,
        }
    }

    fn run(&mut self) {
        if !self.running {
            self.running = true;
            self.counters.waiting.fetch_sub(1, Ordering::SeqCst);
            self.counters.running.fetch_add(1, Ordering::SeqCst);
        }
    }
}

impl Drop for Phase<'_> {
    fn drop(&mut self) {
        let gauge = if self.running {
            &self.counters.running
        } else {
            &self.counters.waiting
        };
        gauge.fetch_sub(1, Ordering::SeqCst);
    }
}

enum End {
    Completed,
    Cancelled,
    Failed,
}

impl Job {
    async fn run(self, tx: mpsc::Sender<GenerationEvent>) {
        let counters = self.counters.clone();
        let end = {
            let mut phase = Phase::new(&counters);
            self.generate(&tx, &mut phase).await
        };
        let counter = match end {
            End::Completed => &counters.completed,
            End::Cancelled => &counters.cancelled,
            End::Failed => &counters.failed,
        };
        counter.fetch_add(1, Ordering::SeqCst);
    }

    /// Sends one event, or reports that the client went away; waiting is cancellable.
    async fn send(tx: &mpsc::Sender<GenerationEvent>, event: GenerationEvent) -> bool {
        tx.send(event).await.is_ok()
    }

    async fn pause(tx: &mpsc::Sender<GenerationEvent>, delay: Duration) -> bool {
        if delay.is_zero() {
            return !tx.is_closed();
        }
        tokio::select! {
            () = tokio::time::sleep(delay) => true,
            () = tx.closed() => false,
        }
    }

    async fn generate(&self, tx: &mpsc::Sender<GenerationEvent>, phase: &mut Phase<'_>) -> End {
        let started = GenerationEvent::Started {
            prompt_tokens: self.prompt_tokens,
        };
        if !Self::send(tx, started).await {
            return End::Cancelled;
        }
        if self.failure == Failure::Hang {
            tx.closed().await;
            return End::Cancelled;
        }
        let _slot = tokio::select! {
            slot = self.slots.clone().acquire_owned() => match slot {
                Ok(slot) => slot,
                Err(_) => return End::Cancelled,
            },
            () = tx.closed() => return End::Cancelled,
        };
        phase.run();
        if !Self::pause(tx, self.cfg.time_to_first_token).await {
            return End::Cancelled;
        }
        let room = self.cfg.max_context - self.prompt_tokens;
        let limit = self.req.max_tokens.min(room);
        let natural = self.cfg.tokens_per_response;
        let mut stops = StopMatcher::new(self.req.stop.clone());
        let mut produced = 0u32;
        while produced < limit.min(natural) {
            if let Failure::FailAfter { tokens: n } = self.failure
                && produced >= n
            {
                let err = BackendError::Internal(format!("mock failure injected after {n} tokens"));
                let _ = Self::send(tx, GenerationEvent::Error(err)).await;
                return End::Failed;
            }
            if produced > 0 && !Self::pause(tx, self.cfg.inter_token_delay).await {
                return End::Cancelled;
            }
            let piece = MockBackend::token_text(&self.req.prompt, self.req.seed, produced);
            produced += 1;
            match stops.push(&piece) {
                StopStep::Continue(delta) => {
                    if !delta.is_empty() && !Self::send(tx, GenerationEvent::Text { delta }).await {
                        return End::Cancelled;
                    }
                }
                StopStep::Stopped(delta) => {
                    if !delta.is_empty() && !Self::send(tx, GenerationEvent::Text { delta }).await {
                        return End::Cancelled;
                    }
                    return self.finish(tx, FinishReason::Stop, produced).await;
                }
            }
        }
        let rest = stops.flush();
        if !rest.is_empty() && !Self::send(tx, GenerationEvent::Text { delta: rest }).await {
            return End::Cancelled;
        }
        let reason = if produced < natural {
            FinishReason::Length
        } else {
            FinishReason::Stop
        };
        self.finish(tx, reason, produced).await
    }

    async fn finish(
        &self,
        tx: &mpsc::Sender<GenerationEvent>,
        reason: FinishReason,
        completion_tokens: u32,
    ) -> End {
        let event = GenerationEvent::Finished {
            reason,
            completion_tokens,
        };
        if Self::send(tx, event).await {
            End::Completed
        } else {
            End::Cancelled
        }
    }
}

/// Routes to steer a running mock over HTTP, to merge beside [`crate::router`]:
/// `GET /mock/stats` returns [`MockStats`]; `POST /mock/failure` with a [`Failure`]
/// as JSON (`{"mode":"hang"}`, `{"mode":"fail_after","tokens":3}`, …) switches the
/// misbehaviour for new requests.
pub fn control_router(mock: MockBackend) -> Router {
    Router::new()
        .route(
            "/mock/stats",
            get(|State(m): State<MockBackend>| async move { Json(m.stats()) }),
        )
        .route(
            "/mock/failure",
            post(
                |State(m): State<MockBackend>, Json(f): Json<Failure>| async move {
                    m.set_failure(f);
                    Json(f)
                },
            ),
        )
        .with_state(mock)
}

/// Body of `POST /v1/embeddings` as the mock reads it.
#[derive(Debug, Deserialize)]
struct EmbeddingsRequest {
    model: String,
    input: EmbeddingsInput,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum EmbeddingsInput {
    One(String),
    Many(Vec<String>),
}

/// Dimensions of the mock's embeddings.
pub const EMBEDDING_DIMS: usize = 8;

/// `POST /v1/embeddings` for the mock: one deterministic unit vector of
/// [`EMBEDDING_DIMS`] floats per input string (same text → same vector), with
/// `usage.prompt_tokens` counted in mock tokens; unknown models get OpenAI's 404.
pub fn embeddings_router(mock: MockBackend) -> Router {
    Router::new()
        .route(
            "/v1/embeddings",
            post(
                |State(m): State<MockBackend>, body: axum::body::Bytes| async move {
                    use axum::response::IntoResponse;
                    let req: EmbeddingsRequest = match serde_json::from_slice(&body) {
                        Ok(r) => r,
                        Err(e) => {
                            return crate::Error::MalformedJson {
                                message: e.to_string(),
                            }
                            .into_response();
                        }
                    };
                    if !m.cfg.models.contains(&req.model) {
                        return crate::Error::from(BackendError::ModelNotFound(req.model))
                            .into_response();
                    }
                    let inputs = match req.input {
                        EmbeddingsInput::One(s) => vec![s],
                        EmbeddingsInput::Many(v) => v,
                    };
                    let mut tokens = 0usize;
                    let data: Vec<serde_json::Value> = inputs
                        .iter()
                        .enumerate()
                        .map(|(i, text)| {
                            tokens += text.split_whitespace().count();
                            let p = Prompt::Text(text.clone());
                            let raw: Vec<f64> = (0..EMBEDDING_DIMS as u64)
                                .map(|d| (mix(prompt_hash(&p) ^ d) % 2001) as f64 / 1000.0 - 1.0)
                                .collect();
                            let norm = raw.iter().map(|x| x * x).sum::<f64>().sqrt().max(1e-9);
                            let v: Vec<f64> = raw.iter().map(|x| x / norm).collect();
                            serde_json::json!({"object": "embedding", "index": i, "embedding": v})
                        })
                        .collect();
                    Json(serde_json::json!({
                        "object": "list",
                        "data": data,
                        "model": req.model,
                        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
                    }))
                    .into_response()
                },
            ),
        )
        .with_state(mock)
}

fn mix(mut x: u64) -> u64 {
    // splitmix64 finaliser: cheap, well-spread, stable across Rust versions.
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

fn prompt_hash(prompt: &Prompt) -> u64 {
    // FNV-1a over the prompt text and roles.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut feed = |bytes: &[u8]| {
        for b in bytes {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    };
    match prompt {
        Prompt::Text(t) => feed(t.as_bytes()),
        Prompt::Chat(msgs) => {
            for m in msgs {
                feed(m.role.as_str().as_bytes());
                feed(b"\0");
                feed(m.content.as_bytes());
                feed(b"\0");
            }
        }
    }
    h
}

const WORDS: [&str; 32] = [
    "river", "ferry", "harbor", "current", "lantern", "rope", "tide", "oar", "dock", "gull",
    "mist", "bank", "crossing", "deck", "wake", "pier", "island", "keel", "sail", "stone",
    "willow", "bridge", "ripple", "fog", "anchor", "shore", "reed", "heron", "channel", "buoy",
    "lock", "pilot",
];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::{ChatMessage, Role};

    fn request(prompt: Prompt, max_tokens: u32, stop: Vec<String>) -> GenerateRequest {
        GenerateRequest {
            request_id: "t".into(),
            model: "mock".into(),
            prompt,
            max_tokens,
            temperature: 1.0,
            top_p: 1.0,
            top_k: None,
            seed: Some(7),
            stop,
        }
    }

    async fn collect(mut rx: GenerationStream) -> Vec<GenerationEvent> {
        let mut out = Vec::new();
        while let Some(e) = rx.recv().await {
            out.push(e);
        }
        out
    }

    fn text_of(events: &[GenerationEvent]) -> String {
        events
            .iter()
            .filter_map(|e| match e {
                GenerationEvent::Text { delta } => Some(delta.as_str()),
                _ => None,
            })
            .collect()
    }

    #[tokio::test]
    async fn same_request_same_text_and_protocol_order() {
        let mock = MockBackend::new(MockConfig::default());
        let prompt = Prompt::Text("a b c".into());
        let a = collect(mock.generate(request(prompt.clone(), 5, vec![])).unwrap()).await;
        let b = collect(mock.generate(request(prompt.clone(), 5, vec![])).unwrap()).await;
        assert_eq!(a, b);
        assert_eq!(
            a.first(),
            Some(&GenerationEvent::Started { prompt_tokens: 3 })
        );
        assert_eq!(
            a.last(),
            Some(&GenerationEvent::Finished {
                reason: FinishReason::Length,
                completion_tokens: 5
            })
        );
        let expected: String = (0..5)
            .map(|i| MockBackend::token_text(&prompt, Some(7), i))
            .collect();
        assert_eq!(text_of(&a), expected);
        assert_eq!(mock.stats().completed, 2);
        assert_eq!(mock.stats().active, 0);
    }

    #[tokio::test]
    async fn natural_end_is_stop_and_context_limits_length() {
        let mock = MockBackend::new(MockConfig {
            tokens_per_response: 3,
            max_context: 10,
            ..MockConfig::default()
        });
        let ev = collect(
            mock.generate(request(Prompt::Text("x".into()), 100, vec![]))
                .unwrap(),
        )
        .await;
        assert!(matches!(
            ev.last(),
            Some(GenerationEvent::Finished {
                reason: FinishReason::Stop,
                completion_tokens: 3
            })
        ));
        let chat = Prompt::Chat(vec![ChatMessage {
            role: Role::User,
            content: "1 2 3 4".into(),
        }]);
        assert_eq!(MockBackend::count_prompt_tokens(&chat), 7);
        let mock = MockBackend::new(MockConfig {
            max_context: 9,
            ..MockConfig::default()
        });
        let ev = collect(mock.generate(request(chat.clone(), 100, vec![])).unwrap()).await;
        assert!(matches!(
            ev.last(),
            Some(GenerationEvent::Finished {
                reason: FinishReason::Length,
                completion_tokens: 2
            })
        ));
        let too_long = mock.generate(request(Prompt::Text("w ".repeat(9)), 1, vec![]));
        assert_eq!(
            too_long.err(),
            Some(BackendError::PromptTooLong {
                prompt_tokens: 9,
                max_context: 9
            })
        );
    }

    #[tokio::test]
    async fn stop_sequence_cuts_the_answer() {
        let mock = MockBackend::new(MockConfig::default());
        let prompt = Prompt::Text("p".into());
        let third = MockBackend::token_text(&prompt, Some(7), 2);
        let full: String = (0..2)
            .map(|i| MockBackend::token_text(&prompt, Some(7), i))
            .collect();
        let ev = collect(
            mock.generate(request(prompt.clone(), 10, vec![third.clone()]))
                .unwrap(),
        )
        .await;
        let text = text_of(&ev);
        assert!(
            full.starts_with(&text) && !text.contains(&third),
            "{text:?}"
        );
        assert!(matches!(
            ev.last(),
            Some(GenerationEvent::Finished {
                reason: FinishReason::Stop,
                ..
            })
        ));
    }

    #[tokio::test]
    async fn unknown_model_and_error_rate() {
        let mock = MockBackend::new(MockConfig {
            failure: Failure::ErrorRate { rate: 0.5 },
            ..MockConfig::default()
        });
        let mut req = request(Prompt::Text("x".into()), 1, vec![]);
        req.model = "nope".into();
        assert_eq!(
            mock.generate(req).err(),
            Some(BackendError::ModelNotFound("nope".into()))
        );
        let failures = (0..10)
            .filter(|_| {
                mock.generate(request(Prompt::Text("x".into()), 1, vec![]))
                    .is_err()
            })
            .count();
        assert_eq!(failures, 5);
        mock.set_failure(Failure::None);
        assert!(
            mock.generate(request(Prompt::Text("x".into()), 1, vec![]))
                .is_ok()
        );
    }

    #[tokio::test]
    async fn fail_after_n_and_hang_are_observable() {
        let mock = MockBackend::new(MockConfig {
            failure: Failure::FailAfter { tokens: 2 },
            ..MockConfig::default()
        });
        let ev = collect(
            mock.generate(request(Prompt::Text("x".into()), 10, vec![]))
                .unwrap(),
        )
        .await;
        assert_eq!(
            ev.iter()
                .filter(|e| matches!(e, GenerationEvent::Text { .. }))
                .count(),
            2
        );
        assert!(matches!(
            ev.last(),
            Some(GenerationEvent::Error(BackendError::Internal(_)))
        ));
        assert_eq!(mock.stats().failed, 1);

        mock.set_failure(Failure::Hang);
        let mut rx = mock
            .generate(request(Prompt::Text("x".into()), 10, vec![]))
            .unwrap();
        assert!(matches!(
            rx.recv().await,
            Some(GenerationEvent::Started { .. })
        ));
        let nothing = tokio::time::timeout(Duration::from_millis(50), rx.recv()).await;
        assert!(nothing.is_err(), "a hanging mock must not send anything");
        assert_eq!(mock.stats().active, 1);
        drop(rx);
        for _ in 0..100 {
            if mock.stats().cancelled == 1 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert_eq!(mock.stats().cancelled, 1);
        assert_eq!(mock.stats().active, 0);
    }
}
