//! Every route and every error case of the OpenAI server, in process (`oneshot`)
//! and over real loopback TCP (disconnects, shutdown), against the mock backend.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use ferry_openai::{
    Backend, Failure, MockBackend, MockConfig, Prompt, ServerConfig, router, serve,
};
use ferry_openai::{ChatMessage, Role};
use http_body_util::BodyExt;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tower::ServiceExt;

fn mock(cfg: MockConfig) -> (MockBackend, Router) {
    mock_with(cfg, ServerConfig::default())
}

fn mock_with(cfg: MockConfig, server: ServerConfig) -> (MockBackend, Router) {
    let backend = MockBackend::new(cfg);
    let app = router(Arc::new(backend.clone()) as Arc<dyn Backend>, server);
    (backend, app)
}

fn tiny() -> MockConfig {
    MockConfig {
        models: vec!["tiny".into(), "tiny-lora".into()],
        tokens_per_response: 6,
        max_context: 32,
        ..MockConfig::default()
    }
}

async fn call(app: &Router, method: &str, path: &str, body: &str) -> (StatusCode, String) {
    let req = Request::builder()
        .method(method)
        .uri(path)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(body.to_owned()))
        .unwrap();
    let resp = app.clone().oneshot(req).await.unwrap();
    let status = resp.status();
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8(bytes.to_vec()).unwrap())
}

async fn post(app: &Router, path: &str, body: Value) -> (StatusCode, Value) {
    let (status, text) = call(app, "POST", path, &body.to_string()).await;
    let value = serde_json::from_str(&text).unwrap_or(Value::String(text));
    (status, value)
}

/// Splits an SSE body into its `data:` payloads.
fn sse_data(body: &str) -> Vec<String> {
    assert!(
        body.ends_with("\n\n"),
        "SSE body must end with a blank line: {body:?}"
    );
    body.split("\n\n")
        .filter(|e| !e.is_empty())
        .map(|e| {
            e.strip_prefix("data: ")
                .unwrap_or_else(|| panic!("not a data event: {e:?}"))
                .to_owned()
        })
        .collect()
}

fn chat_body(content: &str) -> Value {
    json!({"model": "tiny", "messages": [{"role": "user", "content": content}], "seed": 3})
}

fn expected_text(prompt: &Prompt, seed: u64, n: u32) -> String {
    (0..n)
        .map(|i| MockBackend::token_text(prompt, Some(seed), i))
        .collect()
}

fn user_prompt(content: &str) -> Prompt {
    Prompt::Chat(vec![ChatMessage {
        role: Role::User,
        content: content.into(),
    }])
}

fn assert_error(
    status: StatusCode,
    body: &Value,
    want: u16,
    param: Option<&str>,
    code: Option<&str>,
) {
    assert_eq!(status.as_u16(), want, "{body}");
    let err = &body["error"];
    assert!(
        err["message"].as_str().is_some_and(|m| !m.is_empty()),
        "{body}"
    );
    assert!(err["type"].is_string(), "{body}");
    assert_eq!(err["param"].as_str(), param, "{body}");
    assert_eq!(err["code"].as_str(), code, "{body}");
}

#[tokio::test]
async fn models_lists_every_served_model() {
    let (_, app) = mock(tiny());
    let (status, body) = call(&app, "GET", "/v1/models", "").await;
    assert_eq!(status, StatusCode::OK);
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["object"], "list");
    let ids: Vec<&str> = v["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["tiny", "tiny-lora"]);
    assert_eq!(v["data"][0]["object"], "model");
    assert_eq!(v["data"][0]["max_model_len"], 32);
}

#[tokio::test]
async fn chat_non_streaming_returns_text_and_usage() {
    let (_, app) = mock(tiny());
    let (status, v) = post(&app, "/v1/chat/completions", chat_body("one two three")).await;
    assert_eq!(status, StatusCode::OK, "{v}");
    assert_eq!(v["object"], "chat.completion");
    assert!(v["id"].as_str().unwrap().starts_with("chatcmpl-"));
    assert_eq!(v["choices"][0]["message"]["role"], "assistant");
    assert_eq!(
        v["choices"][0]["message"]["content"],
        expected_text(&user_prompt("one two three"), 3, 6)
    );
    assert_eq!(v["choices"][0]["finish_reason"], "stop");
    // 3 words + 2 role markers + 1 assistant prefix.
    assert_eq!(
        v["usage"],
        json!({"prompt_tokens": 6, "completion_tokens": 6, "total_tokens": 12})
    );
}

#[tokio::test]
async fn max_tokens_and_max_completion_tokens_cut_with_length() {
    let (_, app) = mock(tiny());
    let mut body = chat_body("hi");
    body["max_tokens"] = json!(2);
    let (_, v) = post(&app, "/v1/chat/completions", body.clone()).await;
    assert_eq!(v["choices"][0]["finish_reason"], "length");
    assert_eq!(v["usage"]["completion_tokens"], 2);
    body["max_completion_tokens"] = json!(4);
    let (_, v) = post(&app, "/v1/chat/completions", body).await;
    assert_eq!(v["usage"]["completion_tokens"], 4);
}

#[tokio::test]
async fn completions_non_streaming_and_stop_sequences() {
    let (_, app) = mock(tiny());
    let prompt = Prompt::Text("the river".into());
    let (status, v) = post(
        &app,
        "/v1/completions",
        json!({"model": "tiny", "prompt": "the river", "seed": 9, "max_tokens": 4}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{v}");
    assert_eq!(v["object"], "text_completion");
    assert!(v["id"].as_str().unwrap().starts_with("cmpl-"));
    assert_eq!(v["choices"][0]["text"], expected_text(&prompt, 9, 4));
    assert_eq!(
        v["usage"],
        json!({"prompt_tokens": 2, "completion_tokens": 4, "total_tokens": 6})
    );

    let second = MockBackend::token_text(&prompt, Some(9), 1);
    let (_, v) = post(
        &app,
        "/v1/completions",
        json!({"model": "tiny", "prompt": "the river", "seed": 9, "max_tokens": 4, "stop": second}),
    )
    .await;
    let text = v["choices"][0]["text"].as_str().unwrap();
    assert!(
        !text.contains(second.as_str()),
        "{text:?} must stop before {second:?}"
    );
    assert_eq!(v["choices"][0]["finish_reason"], "stop");
}

#[tokio::test]
async fn chat_stream_has_role_chunk_deltas_finish_usage_and_done() {
    let (_, app) = mock(tiny());
    let mut body = chat_body("a b");
    body["stream"] = json!(true);
    body["stream_options"] = json!({"include_usage": true});
    let (status, text) = call(&app, "POST", "/v1/chat/completions", &body.to_string()).await;
    assert_eq!(status, StatusCode::OK);
    let events = sse_data(&text);
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"));
    let chunks: Vec<Value> = events[..events.len() - 1]
        .iter()
        .map(|e| serde_json::from_str(e).unwrap())
        .collect();
    let id = chunks[0]["id"].clone();
    assert!(
        chunks
            .iter()
            .all(|c| c["id"] == id && c["object"] == "chat.completion.chunk")
    );
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    let content: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert_eq!(content, expected_text(&user_prompt("a b"), 3, 6));
    let finish = &chunks[chunks.len() - 2];
    assert_eq!(finish["choices"][0]["finish_reason"], "stop");
    let usage = &chunks[chunks.len() - 1];
    assert_eq!(usage["choices"], json!([]));
    assert_eq!(
        usage["usage"],
        json!({"prompt_tokens": 5, "completion_tokens": 6, "total_tokens": 11})
    );
    assert!(
        chunks[..chunks.len() - 1]
            .iter()
            .all(|c| c.get("usage").is_none())
    );
}

#[tokio::test]
async fn completion_stream_without_usage_option_sends_no_usage() {
    let (_, app) = mock(tiny());
    let body = json!({"model": "tiny", "prompt": "x", "stream": true, "max_tokens": 3, "seed": 1});
    let (status, text) = call(&app, "POST", "/v1/completions", &body.to_string()).await;
    assert_eq!(status, StatusCode::OK);
    let events = sse_data(&text);
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"));
    let chunks: Vec<Value> = events[..events.len() - 1]
        .iter()
        .map(|e| serde_json::from_str(e).unwrap())
        .collect();
    assert!(
        chunks
            .iter()
            .all(|c| c.get("usage").is_none() && c["object"] == "text_completion")
    );
    let text: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["text"].as_str())
        .collect();
    assert_eq!(text, expected_text(&Prompt::Text("x".into()), 1, 3));
    assert_eq!(
        chunks.last().unwrap()["choices"][0]["finish_reason"],
        "length"
    );
}

#[tokio::test]
async fn invalid_parameters_get_400_naming_the_param() {
    let (_, app) = mock(tiny());
    let cases = [
        ("max_tokens", json!(0)),
        ("max_tokens", json!(-1)),
        ("max_completion_tokens", json!(0)),
        ("temperature", json!(2.1)),
        ("top_p", json!(0)),
        ("n", json!(3)),
    ];
    for (param, value) in cases {
        let mut body = chat_body("x");
        body[param] = value;
        let (status, v) = post(&app, "/v1/chat/completions", body).await;
        assert_error(status, &v, 400, Some(param), None);
        assert_eq!(v["error"]["type"], "invalid_request_error");
    }
    let (status, v) = post(
        &app,
        "/v1/chat/completions",
        json!({"model": "tiny", "messages": []}),
    )
    .await;
    assert_error(status, &v, 400, Some("messages"), None);
    let (status, v) = post(
        &app,
        "/v1/completions",
        json!({"model": "tiny", "prompt": "x", "max_tokens": 0}),
    )
    .await;
    assert_error(status, &v, 400, Some("max_tokens"), None);
}

#[tokio::test]
async fn unknown_model_is_404_model_not_found() {
    let (_, app) = mock(tiny());
    let mut body = chat_body("x");
    body["model"] = json!("gpt-5");
    let (status, v) = post(&app, "/v1/chat/completions", body).await;
    assert_error(status, &v, 404, Some("model"), Some("model_not_found"));
    assert!(v["error"]["message"].as_str().unwrap().contains("gpt-5"));
    let (status, v) = post(
        &app,
        "/v1/completions",
        json!({"model": "nope", "prompt": "x"}),
    )
    .await;
    assert_error(status, &v, 404, Some("model"), Some("model_not_found"));
}

#[tokio::test]
async fn prompt_too_long_is_400_context_length_exceeded() {
    let (_, app) = mock(tiny());
    let long = "w ".repeat(40);
    let (status, v) = post(&app, "/v1/chat/completions", chat_body(&long)).await;
    assert_error(
        status,
        &v,
        400,
        Some("messages"),
        Some("context_length_exceeded"),
    );
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("32 tokens"),
        "{v}"
    );
    let (status, v) = post(
        &app,
        "/v1/completions",
        json!({"model": "tiny", "prompt": long, "stream": true}),
    )
    .await;
    assert_error(
        status,
        &v,
        400,
        Some("prompt"),
        Some("context_length_exceeded"),
    );
}

#[tokio::test]
async fn large_prompts_start_off_the_async_workers_and_still_map_errors() {
    let (_, app) = mock(MockConfig {
        max_context: 100_000,
        ..tiny()
    });
    // ~200 KiB prompt: beyond the blocking threshold, within the context.
    let big = "w ".repeat(100_000 - 10);
    let (status, v) = post(
        &app,
        "/v1/completions",
        json!({"model": "tiny", "prompt": big, "max_tokens": 2}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{v}");
    assert_eq!(v["usage"]["prompt_tokens"], 99_990);
    let too_big = "w ".repeat(100_001);
    let (status, v) = post(
        &app,
        "/v1/completions",
        json!({"model": "tiny", "prompt": too_big}),
    )
    .await;
    assert_error(
        status,
        &v,
        400,
        Some("prompt"),
        Some("context_length_exceeded"),
    );
}

#[tokio::test]
async fn bad_json_is_400_and_wrong_shape_is_422_with_path() {
    let (_, app) = mock(tiny());
    let (status, text) = call(
        &app,
        "POST",
        "/v1/chat/completions",
        "{\"model\": \"tiny\",",
    )
    .await;
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_error(status, &v, 400, None, Some("invalid_json"));
    let (status, v) = post(
        &app,
        "/v1/chat/completions",
        json!({"model": "tiny", "messages": [{"role": "user", "content": 5}]}),
    )
    .await;
    assert_error(
        status,
        &v,
        422,
        Some("messages[0].content"),
        Some("invalid_type"),
    );
    let (status, v) = post(&app, "/v1/completions", json!({"prompt": "x"})).await;
    assert_eq!(status.as_u16(), 422, "{v}");
    assert!(
        v["error"]["message"].as_str().unwrap().contains("model"),
        "{v}"
    );
}

#[tokio::test]
async fn oversize_body_is_413() {
    let (_, app) = mock_with(
        tiny(),
        ServerConfig {
            max_body_bytes: 1024,
            ..ServerConfig::default()
        },
    );
    let (status, v) = post(&app, "/v1/chat/completions", chat_body(&"x".repeat(2000))).await;
    assert_error(status, &v, 413, None, Some("request_too_large"));
    assert!(
        v["error"]["message"].as_str().unwrap().contains("1024"),
        "{v}"
    );
    let (status, _) = post(&app, "/v1/chat/completions", chat_body("small")).await;
    assert_eq!(status, StatusCode::OK);
}

#[tokio::test]
async fn unknown_route_is_404_with_openai_body() {
    let (_, app) = mock(tiny());
    let (status, v) = post(&app, "/v1/embeddings", json!({})).await;
    assert_error(status, &v, 404, None, Some("unknown_url"));
}

#[tokio::test]
async fn concurrency_limit_answers_429_then_recovers() {
    let (backend, app) = mock_with(
        MockConfig {
            failure: Failure::Hang,
            ..tiny()
        },
        ServerConfig {
            max_concurrent_requests: 1,
            ..ServerConfig::default()
        },
    );
    let mut body = chat_body("x");
    body["stream"] = json!(true);
    let req = Request::post("/v1/chat/completions")
        .body(Body::from(body.to_string()))
        .unwrap();
    let hanging = app.clone().oneshot(req).await.unwrap();
    assert_eq!(hanging.status(), StatusCode::OK);
    let (status, v) = post(&app, "/v1/chat/completions", chat_body("y")).await;
    assert_error(status, &v, 429, None, Some("overloaded"));
    drop(hanging);
    backend.set_failure(Failure::None);
    let (status, _) = post(&app, "/v1/chat/completions", chat_body("y")).await;
    assert_eq!(status, StatusCode::OK);
}

#[tokio::test]
async fn backend_failures_map_to_5xx_and_stream_errors_end_with_done() {
    let (backend, app) = mock(MockConfig {
        failure: Failure::ErrorRate { rate: 1.0 },
        ..tiny()
    });
    let (status, v) = post(&app, "/v1/chat/completions", chat_body("x")).await;
    assert_error(status, &v, 500, None, Some("internal_error"));
    assert_eq!(v["error"]["type"], "server_error");

    backend.set_failure(Failure::FailAfter { tokens: 2 });
    let (status, v) = post(&app, "/v1/chat/completions", chat_body("x")).await;
    assert_error(status, &v, 500, None, Some("internal_error"));

    let mut body = chat_body("x");
    body["stream"] = json!(true);
    let (status, text) = call(&app, "POST", "/v1/chat/completions", &body.to_string()).await;
    assert_eq!(status, StatusCode::OK);
    let events = sse_data(&text);
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"));
    let err: Value = serde_json::from_str(&events[events.len() - 2]).unwrap();
    assert_eq!(err["error"]["code"], "internal_error");
    let deltas = events.iter().filter(|e| e.contains("\"content\"")).count();
    assert_eq!(
        deltas, 3,
        "role chunk + 2 tokens before the failure: {events:?}"
    );
}

#[tokio::test]
async fn health_and_metrics_reflect_traffic() {
    let (_, app) = mock(tiny());
    let (status, body) = call(&app, "GET", "/health", "").await;
    assert_eq!((status, body.as_str()), (StatusCode::OK, "ok\n"));
    post(&app, "/v1/chat/completions", chat_body("a b c")).await;
    post(
        &app,
        "/v1/completions",
        json!({"model": "tiny", "prompt": "x", "max_tokens": 0}),
    )
    .await;
    let req = Request::get("/metrics").body(Body::empty()).unwrap();
    let resp = app.clone().oneshot(req).await.unwrap();
    assert!(
        resp.headers()[header::CONTENT_TYPE]
            .to_str()
            .unwrap()
            .starts_with("text/plain")
    );
    let text = String::from_utf8(
        resp.into_body()
            .collect()
            .await
            .unwrap()
            .to_bytes()
            .to_vec(),
    )
    .unwrap();
    for line in [
        "ferry:http_requests_total{route=\"/v1/chat/completions\",status=\"200\"} 1",
        "ferry:http_requests_total{route=\"/v1/completions\",status=\"400\"} 1",
        "ferry:http_requests_total{route=\"/health\",status=\"200\"} 1",
        "vllm:prompt_tokens_total{model_name=\"tiny\"} 6",
        "vllm:generation_tokens_total{model_name=\"tiny\"} 6",
        "vllm:time_to_first_token_seconds_count{model_name=\"tiny\"} 1",
        "vllm:e2e_request_latency_seconds_count{model_name=\"tiny\"} 1",
        "vllm:inter_token_latency_seconds_count{model_name=\"tiny\"} 5",
        "vllm:num_requests_running{model_name=\"tiny\"} 0",
        "vllm:num_requests_waiting{model_name=\"tiny\"} 0",
    ] {
        assert!(text.contains(line), "missing {line:?} in\n{text}");
    }
}

#[tokio::test]
async fn health_is_503_without_models() {
    let (_, app) = mock(MockConfig {
        models: vec![],
        ..tiny()
    });
    let (status, _) = call(&app, "GET", "/health", "").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
}

async fn spawn_server(app: Router) -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    addr
}

async fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    for _ in 0..400 {
        if cond() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("timed out waiting for {what}");
}

fn raw_post(path: &str, body: &str) -> String {
    format!(
        "POST {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
}

#[tokio::test]
async fn client_disconnect_mid_stream_cancels_generation() {
    let (backend, app) = mock(MockConfig {
        tokens_per_response: 10_000,
        inter_token_delay: Duration::from_millis(5),
        max_context: 100_000,
        ..tiny()
    });
    let addr = spawn_server(app.clone()).await;
    let mut body = chat_body("x");
    body["stream"] = json!(true);
    body["max_tokens"] = json!(10_000);
    let mut sock = tokio::net::TcpStream::connect(addr).await.unwrap();
    sock.write_all(raw_post("/v1/chat/completions", &body.to_string()).as_bytes())
        .await
        .unwrap();
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    while seen.windows(6).filter(|w| w == b"data: ").count() < 3 {
        let n = sock.read(&mut buf).await.unwrap();
        assert!(n > 0, "server closed early");
        seen.extend_from_slice(&buf[..n]);
    }
    assert!(seen.starts_with(b"HTTP/1.1 200"));
    assert_eq!(backend.stats().active, 1);
    drop(sock);
    wait_for("cancellation", || backend.stats().cancelled == 1).await;
    wait_for("no active generation", || backend.stats().active == 0).await;
    assert_eq!(backend.stats().completed, 0);
    let (_, text) = call(&app, "GET", "/metrics", "").await;
    assert!(
        text.contains("ferry:requests_cancelled_total{model_name=\"tiny\"} 1"),
        "{text}"
    );
}

#[tokio::test]
async fn client_disconnect_while_waiting_non_streaming_cancels_generation() {
    let (backend, app) = mock(MockConfig {
        failure: Failure::Hang,
        ..tiny()
    });
    let addr = spawn_server(app).await;
    let mut sock = tokio::net::TcpStream::connect(addr).await.unwrap();
    sock.write_all(raw_post("/v1/chat/completions", &chat_body("x").to_string()).as_bytes())
        .await
        .unwrap();
    wait_for("generation start", || backend.stats().started == 1).await;
    drop(sock);
    wait_for("cancellation", || backend.stats().cancelled == 1).await;
    assert_eq!(backend.stats().active, 0);
}

#[tokio::test]
async fn serve_drains_then_gives_up_at_the_deadline() {
    let backend = MockBackend::new(MockConfig {
        failure: Failure::Hang,
        ..tiny()
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(serve(
        listener,
        Arc::new(backend.clone()),
        ServerConfig::default(),
        async move {
            let _ = stop_rx.await;
        },
        Duration::from_millis(200),
    ));
    let mut body = chat_body("x");
    body["stream"] = json!(true);
    let mut sock = tokio::net::TcpStream::connect(addr).await.unwrap();
    sock.write_all(raw_post("/v1/chat/completions", &body.to_string()).as_bytes())
        .await
        .unwrap();
    wait_for("generation start", || backend.stats().started == 1).await;
    stop_tx.send(()).unwrap();
    let finished_in_time = tokio::time::timeout(Duration::from_secs(10), server)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(!finished_in_time, "a hanging stream cannot drain");

    // With nothing in flight, shutdown completes cleanly.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let clean = serve(
        listener,
        Arc::new(MockBackend::new(tiny())),
        ServerConfig::default(),
        async {},
        Duration::from_secs(5),
    );
    assert!(
        tokio::time::timeout(Duration::from_secs(10), clean)
            .await
            .unwrap()
            .unwrap()
    );
}

#[tokio::test]
async fn mock_queues_beyond_max_running_and_reports_vllm_load() {
    let (backend, app) = mock(MockConfig {
        max_running: 1,
        tokens_per_response: 1000,
        inter_token_delay: Duration::from_millis(20),
        max_context: 100_000,
        ..tiny()
    });
    let mut body = chat_body("x");
    body["stream"] = json!(true);
    body["max_tokens"] = json!(1000);
    let first = app
        .clone()
        .oneshot(
            Request::post("/v1/chat/completions")
                .body(Body::from(body.to_string()))
                .unwrap(),
        )
        .await
        .unwrap();
    let second = app
        .clone()
        .oneshot(
            Request::post("/v1/chat/completions")
                .body(Body::from(body.to_string()))
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(
        (first.status(), second.status()),
        (StatusCode::OK, StatusCode::OK)
    );
    wait_for("one running, one waiting", || {
        backend
            .load()
            .is_some_and(|l| l.running == 1 && l.waiting == 1)
    })
    .await;
    let (_, text) = call(&app, "GET", "/metrics", "").await;
    for line in [
        "vllm:num_requests_running{model_name=\"tiny\"} 1",
        "vllm:num_requests_waiting{model_name=\"tiny\"} 1",
        "vllm:kv_cache_usage_perc{model_name=\"tiny\"} 1",
    ] {
        assert!(text.contains(line), "missing {line:?} in\n{text}");
    }
    drop(first);
    wait_for("the queued request to run", || {
        backend
            .load()
            .is_some_and(|l| l.running == 1 && l.waiting == 0)
    })
    .await;
    drop(second);
    wait_for("both cancelled", || backend.stats().cancelled == 2).await;
}

#[tokio::test]
async fn control_routes_switch_failure_modes_at_run_time() {
    let backend = MockBackend::new(tiny());
    let app = router(Arc::new(backend.clone()), ServerConfig::default())
        .merge(ferry_openai::control_router(backend.clone()));
    let (status, v) = post(
        &app,
        "/mock/failure",
        json!({"mode": "error_rate", "rate": 1.0}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{v}");
    let (status, _) = post(&app, "/v1/chat/completions", chat_body("x")).await;
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
    let (status, _) = post(&app, "/mock/failure", json!({"mode": "explode"})).await;
    assert_eq!(status.as_u16(), 422);
    let (status, _) = post(&app, "/mock/failure", json!({"mode": "none"})).await;
    assert_eq!(status, StatusCode::OK);
    let (status, _) = post(&app, "/v1/chat/completions", chat_body("x")).await;
    assert_eq!(status, StatusCode::OK);
    let (status, text) = call(&app, "GET", "/mock/stats", "").await;
    assert_eq!(status, StatusCode::OK);
    let stats: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(
        (stats["failed"].as_u64(), stats["completed"].as_u64()),
        (Some(1), Some(1)),
        "{stats}"
    );
}

#[tokio::test]
async fn wrong_method_is_405_with_openai_body() {
    let (_, app) = mock(tiny());
    let (status, text) = call(&app, "GET", "/v1/chat/completions", "").await;
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_error(status, &v, 405, None, Some("method_not_allowed"));
    assert!(
        v["error"]["message"].as_str().unwrap().contains("POST"),
        "{v}"
    );
}

/// Every truncation and many single-byte corruptions of valid bodies get a 2xx or a
/// 4xx with an OpenAI error body: never a 5xx, never a panic.
#[tokio::test]
async fn mangled_bodies_never_cause_server_errors() {
    let (_, app) = mock(tiny());
    let bodies = [
        (
            "/v1/chat/completions",
            r#"{"model":"tiny","messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}],"max_tokens":3,"stop":["a"],"stream":true,"stream_options":{"include_usage":true},"temperature":0.5}"#,
        ),
        (
            "/v1/completions",
            r#"{"model":"tiny","prompt":["a b"],"max_tokens":2,"top_p":0.9,"seed":-4,"n":1}"#,
        ),
    ];
    let replacements = [b'"', b'{', b']', b'0', b'-', b'x', 0xff, b' '];
    let mut checked = 0;
    for (path, body) in bodies {
        let bytes = body.as_bytes();
        let mut variants: Vec<Vec<u8>> = (0..bytes.len()).map(|n| bytes[..n].to_vec()).collect();
        for i in (0..bytes.len()).step_by(3) {
            for r in replacements {
                let mut v = bytes.to_vec();
                v[i] = r;
                variants.push(v);
            }
        }
        for v in variants {
            let req = Request::post(path).body(Body::from(v.clone())).unwrap();
            let resp = app.clone().oneshot(req).await.unwrap();
            let status = resp.status();
            let out = resp.into_body().collect().await.unwrap().to_bytes();
            let shown = String::from_utf8_lossy(&v);
            assert!(
                status.is_success() || status.is_client_error(),
                "{status} for {shown}"
            );
            if status.is_client_error() {
                let err: Value =
                    serde_json::from_slice(&out).unwrap_or_else(|e| panic!("{e}: {shown}"));
                assert!(err["error"]["message"].is_string(), "{err} for {shown}");
            }
            checked += 1;
        }
    }
    assert!(checked > 400, "only {checked} variants");
}
