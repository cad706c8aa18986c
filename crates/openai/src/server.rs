//! The OpenAI-compatible HTTP server: routes, SSE streaming, aggregation, metrics.
//!
//! Request path: concurrency permit → body (size-limited) → [`validate`] →
//! [`Backend::generate`] → wait for the first event (so refusals still get a proper
//! status code) → either an SSE stream or one aggregated JSON response.
//! A stream owns the backend's receiver: when the client disconnects, hyper drops
//! the body, which drops the receiver, which cancels the generation.

use std::convert::Infallible;
use std::future::{Future, IntoFuture};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::body::{Body, Bytes};
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, MatchedPath, Request, State};
use axum::http::{HeaderValue, Method, StatusCode, Uri, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::serve::ListenerExt;
use axum::{Json, Router};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};
use tokio::time::Instant;

use crate::backend::{
    Backend, BackendError, FinishReason, GenerateRequest, GenerationEvent, GenerationStream,
    Prompt, Role,
};
use crate::error::Error;
use crate::metrics::{self, Metrics};
use crate::types::{
    ChatChoice, ChatChunkChoice, ChatCompletionChunk, ChatCompletionRequest,
    ChatCompletionResponse, ChatDelta, CompletionChoice, CompletionRequest, CompletionResponse,
    ErrorBody, Model, ModelList, ResponseMessage, Usage,
};
use crate::validate::{self, ValidRequest};

/// Limits and defaults of one server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerConfig {
    /// Largest accepted request body in bytes; larger bodies get 413.
    pub max_body_bytes: usize,
    /// Requests handled at once (streams included); more get 429.
    pub max_concurrent_requests: usize,
    /// `max_tokens` for chat requests that set none (completions use OpenAI's 16).
    pub default_max_tokens: u32,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            max_body_bytes: 4 * 1024 * 1024,
            max_concurrent_requests: 1024,
            default_max_tokens: 512,
        }
    }
}

struct AppState {
    backend: Arc<dyn Backend>,
    cfg: ServerConfig,
    metrics: Metrics,
    permits: Arc<Semaphore>,
    next_id: AtomicU64,
    id_salt: u64,
}

type Shared = Arc<AppState>;

/// Builds the OpenAI-compatible router over `backend`.
///
/// Routes: `GET /v1/models`, `POST /v1/chat/completions`, `POST /v1/completions`,
/// `GET /health`, `GET /metrics`; anything else is a 404 with an OpenAI error body.
pub fn router(backend: Arc<dyn Backend>, cfg: ServerConfig) -> Router {
    let id_salt = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    let state: Shared = Arc::new(AppState {
        backend,
        permits: Arc::new(Semaphore::new(cfg.max_concurrent_requests.max(1))),
        metrics: Metrics::new(),
        next_id: AtomicU64::new(0),
        id_salt,
        cfg: cfg.clone(),
    });
    Router::new()
        .route("/v1/models", get(list_models))
        .route("/v1/chat/completions", post(chat_completions))
        .route("/v1/completions", post(completions))
        .route("/health", get(health))
        .route("/metrics", get(render_metrics))
        .fallback(unknown_route)
        .method_not_allowed_fallback(wrong_method)
        .layer(middleware::from_fn_with_state(
            state.clone(),
            count_requests,
        ))
        .layer(DefaultBodyLimit::max(cfg.max_body_bytes))
        .with_state(state)
}

/// Serves `router(backend, cfg)` on `listener` until `shutdown` resolves, then lets
/// in-flight requests (streams included) finish for at most `drain`.
///
/// Returns `Ok(true)` when every request finished within `drain`, `Ok(false)` when
/// the deadline cut some off.
pub async fn serve(
    listener: tokio::net::TcpListener,
    backend: Arc<dyn Backend>,
    cfg: ServerConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
    drain: Duration,
) -> std::io::Result<bool> {
    serve_router(listener, router(backend, cfg), shutdown, drain).await
}

/// [`serve`] for a router the caller extended (extra routes, layers), e.g. the mock
/// engine's `router(..).merge(mock::control_router(..))`.
pub async fn serve_router(
    listener: tokio::net::TcpListener,
    app: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
    drain: Duration,
) -> std::io::Result<bool> {
    let (signalled_tx, signalled_rx) = tokio::sync::oneshot::channel::<()>();
    let signal = async move {
        shutdown.await;
        let _ = signalled_tx.send(());
    };
    // Streams end with small writes (last event, chunk terminator): without
    // TCP_NODELAY, Nagle holds them until the client's delayed ACK, ~40 ms per response.
    let listener = listener.tap_io(|tcp| {
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::debug!("TCP_NODELAY not set: {e}");
        }
    });
    let server = axum::serve(listener, app)
        .with_graceful_shutdown(signal)
        .into_future();
    let deadline = async move {
        match signalled_rx.await {
            Ok(()) => tokio::time::sleep(drain).await,
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        served = server => served.map(|()| true),
        () = deadline => {
            tracing::warn!(?drain, "shutdown deadline reached with requests still in flight");
            Ok(false)
        }
    }
}

async fn count_requests(State(st): State<Shared>, req: Request, next: Next) -> Response {
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map(|p| p.as_str().to_owned())
        .unwrap_or_else(|| "unmatched".to_owned());
    let resp = next.run(req).await;
    st.metrics.record_request(&route, resp.status().as_u16());
    resp
}

async fn unknown_route(method: Method, uri: Uri) -> Error {
    Error::UnknownRoute {
        method: method.to_string(),
        path: uri.path().to_owned(),
    }
}

async fn wrong_method(method: Method, uri: Uri) -> Error {
    let allowed = match uri.path() {
        "/v1/chat/completions" | "/v1/completions" => "POST",
        _ => "GET",
    };
    Error::MethodNotAllowed {
        method: method.to_string(),
        path: uri.path().to_owned(),
        allowed,
    }
}

async fn health(State(st): State<Shared>) -> Response {
    if st.backend.models().is_empty() {
        return (StatusCode::SERVICE_UNAVAILABLE, "no model loaded\n").into_response();
    }
    (StatusCode::OK, "ok\n").into_response()
}

async fn render_metrics(State(st): State<Shared>) -> Response {
    let model = st
        .backend
        .models()
        .into_iter()
        .next()
        .map(|m| m.id)
        .unwrap_or_default();
    let text = st.metrics.render(&model, st.backend.load());
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static(metrics::CONTENT_TYPE),
        )],
        text,
    )
        .into_response()
}

async fn list_models(State(st): State<Shared>) -> Json<ModelList> {
    Json(ModelList {
        object: "list".to_owned(),
        data: st.backend.models().into_iter().map(Model::from).collect(),
    })
}

/// Which endpoint a generation answers, which decides the JSON shapes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Endpoint {
    Chat,
    Completions,
}

impl Endpoint {
    fn id_prefix(self) -> &'static str {
        match self {
            Endpoint::Chat => "chatcmpl",
            Endpoint::Completions => "cmpl",
        }
    }

    fn prompt_param(self) -> &'static str {
        match self {
            Endpoint::Chat => "messages",
            Endpoint::Completions => "prompt",
        }
    }
}

fn error_response(err: Error, endpoint: Endpoint) -> Response {
    let (status, body) = err.for_endpoint(endpoint.prompt_param());
    (status, Json(body)).into_response()
}

async fn chat_completions(
    State(st): State<Shared>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let arrival = Instant::now();
    let endpoint = Endpoint::Chat;
    let result = async {
        let permit = acquire(&st)?;
        let bytes = read_body(body, st.cfg.max_body_bytes)?;
        let req: ChatCompletionRequest = validate::decode_json(&bytes)?;
        let valid = validate::chat(req, st.new_id(endpoint), st.cfg.default_max_tokens)?;
        Ok::<_, Error>((permit, valid))
    }
    .await;
    match result {
        Ok((permit, valid)) => generate(st, valid, endpoint, permit, arrival).await,
        Err(e) => error_response(e, endpoint),
    }
}

async fn completions(State(st): State<Shared>, body: Result<Bytes, BytesRejection>) -> Response {
    let arrival = Instant::now();
    let endpoint = Endpoint::Completions;
    let result = async {
        let permit = acquire(&st)?;
        let bytes = read_body(body, st.cfg.max_body_bytes)?;
        let req: CompletionRequest = validate::decode_json(&bytes)?;
        let valid = validate::completion(req, st.new_id(endpoint))?;
        Ok::<_, Error>((permit, valid))
    }
    .await;
    match result {
        Ok((permit, valid)) => generate(st, valid, endpoint, permit, arrival).await,
        Err(e) => error_response(e, endpoint),
    }
}

impl AppState {
    fn new_id(&self, endpoint: Endpoint) -> String {
        let n = self.next_id.fetch_add(1, Ordering::Relaxed);
        format!("{}-{:016x}{:08x}", endpoint.id_prefix(), self.id_salt, n)
    }
}

fn acquire(st: &AppState) -> Result<OwnedSemaphorePermit, Error> {
    st.permits
        .clone()
        .try_acquire_owned()
        .map_err(|_| Error::TooManyRequests {
            limit: st.cfg.max_concurrent_requests,
        })
}

fn read_body(body: Result<Bytes, BytesRejection>, limit: usize) -> Result<Bytes, Error> {
    match body {
        Ok(b) => Ok(b),
        Err(rej) if rej.status() == StatusCode::PAYLOAD_TOO_LARGE => {
            Err(Error::BodyTooLarge { limit })
        }
        Err(rej) => Err(Error::MalformedJson {
            message: format!("the body could not be read: {}", rej.body_text()),
        }),
    }
}

/// Keeps the waiting/running gauges and cancellation counter true whatever way a
/// request ends, including the client vanishing mid-stream, and logs that end.
struct InFlight {
    st: Shared,
    id: String,
    model: String,
    arrival: Instant,
    running: bool,
    outcome: Option<&'static str>,
    _permit: OwnedSemaphorePermit,
}

impl InFlight {
    fn new(
        st: Shared,
        id: String,
        model: String,
        arrival: Instant,
        permit: OwnedSemaphorePermit,
    ) -> Self {
        st.metrics.add_waiting(1);
        Self {
            st,
            id,
            model,
            arrival,
            running: false,
            outcome: None,
            _permit: permit,
        }
    }

    fn first_token(&mut self) {
        if !self.running {
            self.running = true;
            self.st.metrics.add_waiting(-1);
            self.st.metrics.add_running(1);
        }
    }

    /// Marks how the generation ended (`completed`, `refused`, `failed`).
    fn finish(&mut self, outcome: &'static str) {
        self.outcome = Some(outcome);
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if self.running {
            self.st.metrics.add_running(-1);
        } else {
            self.st.metrics.add_waiting(-1);
        }
        if self.outcome.is_none() {
            self.st.metrics.record_cancelled(&self.model);
        }
        tracing::info!(
            id = %self.id,
            model = %self.model,
            outcome = self.outcome.unwrap_or("cancelled"),
            elapsed_ms = self.arrival.elapsed().as_millis() as u64,
            "generation ended"
        );
    }
}

/// Per-request timing for TTFT, inter-token and end-to-end metrics.
///
/// Inter-token gaps are buffered and observed in batches: the histogram sits behind
/// a mutex, and one observation per token from every core made it the hottest lock
/// of the server.
struct Timing {
    arrival: Instant,
    last_text: Option<Instant>,
    gap_histogram: Option<prometheus_client::metrics::histogram::Histogram>,
    gaps: Vec<f64>,
}

/// Gaps buffered per request before they are observed.
const GAP_BATCH: usize = 64;

impl Timing {
    fn new(arrival: Instant) -> Self {
        Self {
            arrival,
            last_text: None,
            gap_histogram: None,
            gaps: Vec::new(),
        }
    }

    fn on_text(&mut self, st: &AppState, model: &str, flight: &mut InFlight) {
        let now = Instant::now();
        match self.last_text {
            None => st.metrics.record_first_token(model, now - self.arrival),
            Some(prev) => {
                if self.gap_histogram.is_none() {
                    self.gap_histogram = Some(st.metrics.token_gap_histogram(model));
                }
                self.gaps.push((now - prev).as_secs_f64());
                if self.gaps.len() >= GAP_BATCH {
                    self.flush_gaps();
                }
            }
        }
        self.last_text = Some(now);
        flight.first_token();
    }

    fn flush_gaps(&mut self) {
        if let Some(h) = &self.gap_histogram {
            for gap in self.gaps.drain(..) {
                h.observe(gap);
            }
        }
    }
}

impl Drop for Timing {
    fn drop(&mut self) {
        self.flush_gaps();
    }
}

/// Prompts above this size are handed to the backend on a blocking thread, since
/// `Backend::generate` tokenizes synchronously and must not stall the async workers.
const BLOCKING_PROMPT_BYTES: usize = 64 * 1024;

async fn start_generation(
    backend: &Arc<dyn Backend>,
    req: GenerateRequest,
) -> Result<GenerationStream, BackendError> {
    let size = match &req.prompt {
        Prompt::Text(t) => t.len(),
        Prompt::Chat(msgs) => msgs.iter().map(|m| m.content.len()).sum(),
    };
    if size <= BLOCKING_PROMPT_BYTES {
        return backend.generate(req);
    }
    let backend = backend.clone();
    tokio::task::spawn_blocking(move || backend.generate(req))
        .await
        .unwrap_or_else(|e| {
            Err(BackendError::Internal(format!(
                "the backend failed while starting the generation: {e}"
            )))
        })
}

async fn generate(
    st: Shared,
    valid: ValidRequest,
    endpoint: Endpoint,
    permit: OwnedSemaphorePermit,
    arrival: Instant,
) -> Response {
    let model = valid.generate.model.clone();
    let id = valid.generate.request_id.clone();
    if !st.backend.models().iter().any(|m| m.id == model) {
        return error_response(BackendError::ModelNotFound(model).into(), endpoint);
    }
    let mut flight = InFlight::new(st.clone(), id.clone(), model.clone(), arrival, permit);
    let mut rx = match start_generation(&st.backend, valid.generate).await {
        Ok(rx) => rx,
        Err(e) => {
            flight.finish("refused");
            return error_response(e.into(), endpoint);
        }
    };
    // Wait for the first event so that refusals still become proper HTTP errors.
    let mut pending = None;
    let prompt_tokens = match rx.recv().await {
        Some(GenerationEvent::Started { prompt_tokens }) => prompt_tokens,
        Some(GenerationEvent::Error(e)) => {
            flight.finish("refused");
            return error_response(e.into(), endpoint);
        }
        Some(other) => {
            // A backend that skips `Started` still gets served; usage counts 0 prompt tokens.
            pending = Some(other);
            0
        }
        None => {
            flight.finish("failed");
            return error_response(
                BackendError::Internal(
                    "the backend ended the generation before starting it".into(),
                )
                .into(),
                endpoint,
            );
        }
    };
    st.metrics.record_prompt(&model, prompt_tokens);
    let timing = Timing::new(arrival);
    let created = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let shape = Shape {
        endpoint,
        id,
        created,
        model,
    };
    if valid.stream {
        let stream = SseStream {
            st,
            rx,
            pending,
            shape,
            include_usage: valid.include_usage,
            prompt_tokens,
            usage: None,
            phase: match endpoint {
                Endpoint::Chat => Phase::RoleChunk,
                Endpoint::Completions => Phase::Body,
            },
            timing,
            flight,
        };
        let body = Body::from_stream(futures_util::stream::unfold(stream, |mut s| async move {
            s.next_frame().await.map(|b| (Ok::<_, Infallible>(b), s))
        }));
        return (
            [
                (
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("text/event-stream"),
                ),
                (header::CACHE_CONTROL, HeaderValue::from_static("no-cache")),
            ],
            body,
        )
            .into_response();
    }
    aggregate(st, rx, pending, shape, prompt_tokens, timing, flight).await
}

/// Identity fields repeated in every response object of one request.
struct Shape {
    endpoint: Endpoint,
    id: String,
    created: u64,
    model: String,
}

impl Shape {
    fn chat_chunk(
        &self,
        delta: ChatDelta,
        finish_reason: Option<FinishReason>,
    ) -> ChatCompletionChunk {
        ChatCompletionChunk {
            id: self.id.clone(),
            object: "chat.completion.chunk".to_owned(),
            created: self.created,
            model: self.model.clone(),
            choices: vec![ChatChunkChoice {
                index: 0,
                delta,
                finish_reason,
                logprobs: None,
            }],
            usage: None,
        }
    }

    fn completion(
        &self,
        text: String,
        finish_reason: Option<FinishReason>,
        usage: Option<Usage>,
    ) -> CompletionResponse {
        CompletionResponse {
            id: self.id.clone(),
            object: "text_completion".to_owned(),
            created: self.created,
            model: self.model.clone(),
            choices: vec![CompletionChoice {
                index: 0,
                text,
                finish_reason,
                logprobs: None,
            }],
            usage,
        }
    }

    /// One SSE event carrying new text.
    fn text_event(&self, delta: String) -> Bytes {
        match self.endpoint {
            Endpoint::Chat => sse_json(&self.chat_chunk(
                ChatDelta {
                    role: None,
                    content: Some(delta),
                },
                None,
            )),
            Endpoint::Completions => sse_json(&self.completion(delta, None, None)),
        }
    }

    /// The SSE event carrying `finish_reason`.
    fn finish_event(&self, reason: FinishReason) -> Bytes {
        match self.endpoint {
            Endpoint::Chat => sse_json(&self.chat_chunk(ChatDelta::default(), Some(reason))),
            Endpoint::Completions => sse_json(&self.completion(String::new(), Some(reason), None)),
        }
    }

    /// The final SSE event with `usage` and no choices (`stream_options.include_usage`).
    fn usage_event(&self, usage: Usage) -> Bytes {
        match self.endpoint {
            Endpoint::Chat => {
                let mut chunk = self.chat_chunk(ChatDelta::default(), None);
                chunk.choices.clear();
                chunk.usage = Some(usage);
                sse_json(&chunk)
            }
            Endpoint::Completions => {
                let mut chunk = self.completion(String::new(), None, Some(usage));
                chunk.choices.clear();
                sse_json(&chunk)
            }
        }
    }
}

fn sse_json<T: serde::Serialize>(value: &T) -> Bytes {
    // Serializing these plain structs cannot fail; fall back to an empty object anyway.
    let json = serde_json::to_string(value).unwrap_or_else(|_| "{}".to_owned());
    Bytes::from(format!("data: {json}\n\n"))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    RoleChunk,
    Body,
    Usage,
    Done,
    End,
}

/// State of one SSE response; dropping it drops the backend receiver (cancellation).
struct SseStream {
    st: Shared,
    rx: GenerationStream,
    pending: Option<GenerationEvent>,
    shape: Shape,
    include_usage: bool,
    prompt_tokens: u32,
    usage: Option<Usage>,
    phase: Phase,
    timing: Timing,
    flight: InFlight,
}

impl SseStream {
    /// Next body frame: waits for one event, then appends whatever else is already
    /// buffered (up to 64 KiB), so a fast backend costs one write per burst, not per token.
    async fn next_frame(&mut self) -> Option<Bytes> {
        let first = self.next_event(true).await?;
        let mut frame: Option<Vec<u8>> = None;
        while frame.as_ref().map_or(first.len(), Vec::len) < 64 * 1024 {
            match self.next_event(false).await {
                Some(more) => frame
                    .get_or_insert_with(|| first.to_vec())
                    .extend_from_slice(&more),
                None => break,
            }
        }
        Some(frame.map_or(first, Bytes::from))
    }

    /// The next SSE event; with `wait` false, `None` also means "nothing ready yet".
    async fn next_event(&mut self, wait: bool) -> Option<Bytes> {
        loop {
            match self.phase {
                Phase::RoleChunk => {
                    self.phase = Phase::Body;
                    return Some(sse_json(&self.shape.chat_chunk(
                        ChatDelta {
                            role: Some(Role::Assistant),
                            content: Some(String::new()),
                        },
                        None,
                    )));
                }
                Phase::Body => {
                    let event = match self.pending.take() {
                        Some(e) => Some(e),
                        None if wait => self.rx.recv().await,
                        None => match self.rx.try_recv() {
                            Ok(e) => Some(e),
                            Err(mpsc::error::TryRecvError::Empty) => return None,
                            Err(mpsc::error::TryRecvError::Disconnected) => None,
                        },
                    };
                    match event {
                        Some(GenerationEvent::Started { .. }) => continue,
                        Some(GenerationEvent::Text { delta }) => {
                            if delta.is_empty() {
                                continue;
                            }
                            self.timing
                                .on_text(&self.st, &self.shape.model, &mut self.flight);
                            return Some(self.shape.text_event(delta));
                        }
                        Some(GenerationEvent::Finished {
                            reason,
                            completion_tokens,
                        }) => {
                            self.flight.finish("completed");
                            self.st.metrics.record_finished(
                                &self.shape.model,
                                reason,
                                completion_tokens,
                                self.timing.arrival.elapsed(),
                            );
                            self.usage = Some(Usage::new(self.prompt_tokens, completion_tokens));
                            self.phase = if self.include_usage {
                                Phase::Usage
                            } else {
                                Phase::Done
                            };
                            return Some(self.shape.finish_event(reason));
                        }
                        Some(GenerationEvent::Error(e)) => {
                            self.flight.finish("failed");
                            self.phase = Phase::Done;
                            return Some(stream_error(e.into(), self.shape.endpoint));
                        }
                        None => {
                            self.flight.finish("failed");
                            self.phase = Phase::Done;
                            return Some(stream_error(
                                BackendError::Internal(
                                    "the backend stopped without finishing the generation".into(),
                                )
                                .into(),
                                self.shape.endpoint,
                            ));
                        }
                    }
                }
                Phase::Usage => {
                    self.phase = Phase::Done;
                    let usage = self.usage.unwrap_or_default();
                    return Some(self.shape.usage_event(usage));
                }
                Phase::Done => {
                    self.phase = Phase::End;
                    return Some(Bytes::from_static(b"data: [DONE]\n\n"));
                }
                Phase::End => return None,
            }
        }
    }
}

/// An error after the stream started: OpenAI-style error object as an SSE event
/// (what vLLM does); the status line has already gone out as 200.
fn stream_error(err: Error, endpoint: Endpoint) -> Bytes {
    let (_, body): (StatusCode, ErrorBody) = err.for_endpoint(endpoint.prompt_param());
    sse_json(&body)
}

async fn aggregate(
    st: Shared,
    mut rx: GenerationStream,
    mut pending: Option<GenerationEvent>,
    shape: Shape,
    prompt_tokens: u32,
    mut timing: Timing,
    mut flight: InFlight,
) -> Response {
    let mut text = String::new();
    loop {
        let event = match pending.take() {
            Some(e) => Some(e),
            None => rx.recv().await,
        };
        match event {
            Some(GenerationEvent::Started { .. }) => {}
            Some(GenerationEvent::Text { delta }) => {
                if !delta.is_empty() {
                    timing.on_text(&st, &shape.model, &mut flight);
                    text.push_str(&delta);
                }
            }
            Some(GenerationEvent::Finished {
                reason,
                completion_tokens,
            }) => {
                flight.finish("completed");
                st.metrics.record_finished(
                    &shape.model,
                    reason,
                    completion_tokens,
                    timing.arrival.elapsed(),
                );
                let usage = Usage::new(prompt_tokens, completion_tokens);
                let body = match shape.endpoint {
                    Endpoint::Chat => serde_json::to_value(ChatCompletionResponse {
                        id: shape.id,
                        object: "chat.completion".to_owned(),
                        created: shape.created,
                        model: shape.model,
                        choices: vec![ChatChoice {
                            index: 0,
                            message: ResponseMessage {
                                role: Role::Assistant,
                                content: text,
                            },
                            finish_reason: Some(reason),
                            logprobs: None,
                        }],
                        usage,
                    }),
                    Endpoint::Completions => {
                        serde_json::to_value(shape.completion(text, Some(reason), Some(usage)))
                    }
                };
                return match body {
                    Ok(v) => Json(v).into_response(),
                    Err(e) => error_response(
                        BackendError::Internal(format!("could not encode the response: {e}"))
                            .into(),
                        shape.endpoint,
                    ),
                };
            }
            Some(GenerationEvent::Error(e)) => {
                flight.finish("failed");
                return error_response(e.into(), shape.endpoint);
            }
            None => {
                flight.finish("failed");
                return error_response(
                    BackendError::Internal(
                        "the backend stopped without finishing the generation".into(),
                    )
                    .into(),
                    shape.endpoint,
                );
            }
        }
    }
}
