//! Pass-through of every endpoint, SSE chunk by chunk, error statuses, cancellation
//! of the upstream request when the client leaves, connection hygiene, and drain.

use std::io::{Read, Write};
use std::time::Duration;

use ferry_gateway::GatewayConfig;
use ferry_openai::MockConfig;
use http_body_util::BodyExt;
use serde_json::Value;

use crate::common::*;

fn backend(model: &str, url: String) -> ferry_gateway::BackendConfig {
    ferry_gateway::BackendConfig {
        model: model.to_owned(),
        url,
        id: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_endpoint_passes_through_and_streams_chunk_by_chunk() {
    let fast = Mock::start(mock_cfg("m", 6)).await;
    let slow = Mock::start(MockConfig {
        inter_token_delay: Duration::from_millis(100),
        ..mock_cfg("slow", 5)
    })
    .await;
    let gw = Gw::start(GatewayConfig {
        backends: vec![backend("m", fast.url()), backend("slow", slow.url())],
        ..gw_cfg()
    })
    .await;

    let (s, replica, body) = call(
        gw.addr,
        "POST",
        "/v1/chat/completions",
        &chat("m", "hello there", 4, false),
        &[],
    )
    .await;
    assert_eq!(s, 200, "{body}");
    assert_eq!(replica, fast.addr.to_string());
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["object"], "chat.completion");
    assert_eq!(v["usage"]["completion_tokens"], 4);

    let (s, _, body) = call(
        gw.addr,
        "POST",
        "/v1/completions",
        r#"{"model":"m","prompt":"once upon","max_tokens":3}"#,
        &[],
    )
    .await;
    assert_eq!(s, 200, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["object"], "text_completion");

    let (s, _, body) = call(
        gw.addr,
        "POST",
        "/v1/embeddings",
        r#"{"model":"m","input":["a b","c"]}"#,
        &[],
    )
    .await;
    assert_eq!(s, 200, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["data"].as_array().unwrap().len(), 2);

    // /v1/models lists both, with the replica's own entry once polled.
    assert!(
        eventually(Duration::from_secs(5), || {
            gw.registry
                .replicas()
                .iter()
                .all(|r| !r.announced.is_empty())
        })
        .await
    );
    let (s, _, body) = call(gw.addr, "GET", "/v1/models", "", &[]).await;
    assert_eq!(s, 200);
    let v: Value = serde_json::from_str(&body).unwrap();
    let ids: Vec<&str> = v["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["m", "slow"]);
    assert_eq!(v["data"][0]["owned_by"], "ferry-mock");

    // A stream of 5 tokens 100 ms apart: the first token reaches the client while
    // the replica is still generating, so the gateway did not buffer the answer.
    let resp = send(
        gw.addr,
        "POST",
        "/v1/chat/completions",
        &chat("slow", "tell", 5, true),
        &[],
    )
    .await;
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["content-type"], "text/event-stream");
    let mut body = resp.into_body();
    let mut text = String::new();
    let mut saw_token_while_generating = false;
    while let Some(frame) = body.frame().await {
        let frame = frame.unwrap();
        if let Some(d) = frame.data_ref() {
            let chunk = String::from_utf8_lossy(d);
            if chunk.contains("\"content\":\" ") && !saw_token_while_generating {
                saw_token_while_generating = slow.backend.stats().active == 1;
            }
            text.push_str(&chunk);
        }
    }
    assert!(
        saw_token_while_generating,
        "first token arrived only after the generation ended"
    );
    assert!(text.ends_with("data: [DONE]\n\n"), "{text}");
    assert_eq!(text.matches("\"content\":\" ").count(), 5);

    // The access record is written when the gateway drops the body, just after
    // the client has read its end.
    let needle = "ferry_gateway_completion_tokens_total{model=\"slow\",team=\"anonymous\"} 5";
    eventually(Duration::from_secs(2), || {
        gw.gateway.metrics_text().contains(needle)
    })
    .await;
    let metrics = gw.gateway.metrics_text();
    for needle in [
        "ferry_gateway_requests_total{model=\"m\"",
        "code=\"200\"",
        "ferry_gateway_time_to_first_token_seconds_bucket",
        "ferry_gateway_inter_token_latency_seconds_count{model=\"slow\"",
        "ferry_gateway_completion_tokens_total{model=\"slow\",team=\"anonymous\"} 5",
        "ferry_gateway_replica_healthy{replica=",
    ] {
        assert!(metrics.contains(needle), "{needle} missing from\n{metrics}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_get_openai_errors_and_never_reach_a_replica() {
    let mock = Mock::start(mock_cfg("m", 4)).await;
    let gw = Gw::start(GatewayConfig {
        max_body_bytes: 1_000,
        backends: vec![backend("m", mock.url())],
        ..gw_cfg()
    })
    .await;
    let big = chat("m", &"word ".repeat(400), 2, false);
    let cases: Vec<(&str, &str, String, u16, &str)> = vec![
        (
            "POST",
            "/v1/chat/completions",
            "{\"model\": \"m\", ".into(),
            400,
            "invalid_json",
        ),
        (
            "POST",
            "/v1/chat/completions",
            "[1,2]".into(),
            400,
            "invalid_json",
        ),
        (
            "POST",
            "/v1/chat/completions",
            r#"{"messages":[]}"#.into(),
            400,
            "invalid_json",
        ),
        (
            "POST",
            "/v1/chat/completions",
            chat("nope", "x", 2, false),
            404,
            "model_not_found",
        ),
        (
            "POST",
            "/v1/completions",
            big.clone(),
            413,
            "request_too_large",
        ),
        ("POST", "/v1/unknown", "{}".into(), 404, "unknown_url"),
        (
            "GET",
            "/v1/chat/completions",
            String::new(),
            404,
            "unknown_url",
        ),
    ];
    for (method, path, body, status, code) in cases {
        let (s, _, text) = call(gw.addr, method, path, &body, &[]).await;
        assert_eq!(s, status, "{method} {path} {body:.60}: {text}");
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["error"]["code"], code, "{text}");
        assert!(v["error"]["message"].as_str().unwrap().len() > 10);
    }
    assert_eq!(mock.backend.stats().started, 0);
    // A chunked body (no content-length) over the limit is cut off too.
    let mut s = std::net::TcpStream::connect(gw.addr).unwrap();
    write!(s, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n").unwrap();
    write!(s, "{:x}\r\n{big}\r\n0\r\n\r\n", big.len()).unwrap();
    let mut raw = String::new();
    let _ = s.read_to_string(&mut raw);
    assert!(raw.starts_with("HTTP/1.1 413"), "{raw}");
    // The replica's own 4xx passes through untouched and does not eject it.
    for _ in 0..5 {
        let (s, _, text) = call(
            gw.addr,
            "POST",
            "/v1/chat/completions",
            &chat("m", "x", 0, false),
            &[],
        )
        .await;
        assert_eq!(s, 400, "{text}");
        assert!(text.contains("max_tokens"), "{text}");
    }
    assert!(gw.registry.replicas()[0].healthy, "4xx must never eject");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_disconnect_cancels_upstream_and_no_connection_leaks() {
    let mock = Mock::start(MockConfig {
        inter_token_delay: Duration::from_millis(20),
        ..mock_cfg("m", 10_000)
    })
    .await;
    let gw = Gw::start(GatewayConfig {
        backends: vec![backend("m", mock.url())],
        pool_idle_timeout_ms: 300,
        health_interval_ms: 60_000,
        metrics_interval_ms: 60_000,
        ..gw_cfg()
    })
    .await;
    let port = mock.addr.port();
    for _ in 0..3 {
        let addr = gw.addr;
        tokio::task::spawn_blocking(move || {
            let mut s = std::net::TcpStream::connect(addr).unwrap();
            let body = chat("m", "go on", 5_000, true);
            write!(s, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}", body.len()).unwrap();
            let mut buf = [0u8; 4096];
            let mut seen = String::new();
            while !seen.contains("\"content\":\" ") {
                let n = s.read(&mut buf).unwrap();
                assert!(n > 0, "stream ended early: {seen}");
                seen.push_str(&String::from_utf8_lossy(&buf[..n]));
            }
            // Leave mid-stream.
        })
        .await
        .unwrap();
    }
    let cancelled = eventually(Duration::from_secs(5), || {
        let st = mock.backend.stats();
        st.cancelled == 3 && st.active == 0
    })
    .await;
    assert!(
        cancelled,
        "upstream generations not cancelled: {:?}",
        mock.backend.stats()
    );
    // Plenty of short requests, some refused by the replica, then idleness: the
    // pool closes every upstream connection.
    for i in 0..20 {
        let (s, _, _) = call(
            gw.addr,
            "POST",
            "/v1/completions",
            &format!(r#"{{"model":"m","prompt":"p","max_tokens":{}}}"#, i % 2),
            &[],
        )
        .await;
        assert!(s == 200 || s == 400);
    }
    assert!(
        established_to(port) >= 1,
        "the pool should keep a connection while busy"
    );
    let closed = eventually(Duration::from_secs(5), || established_to(port) == 0).await;
    assert!(
        closed,
        "{} upstream connections still open",
        established_to(port)
    );
    let metrics = gw.gateway.metrics_text();
    assert!(metrics.contains("code=\"499\"} 3"), "{metrics}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_drains_in_flight_streams_and_refuses_new_connections() {
    let mock = Mock::start(MockConfig {
        inter_token_delay: Duration::from_millis(30),
        ..mock_cfg("m", 20)
    })
    .await;
    let mut gw = Gw::start(GatewayConfig {
        backends: vec![backend("m", mock.url())],
        ..gw_cfg()
    })
    .await;
    let resp = send(
        gw.addr,
        "POST",
        "/v1/chat/completions",
        &chat("m", "long", 20, true),
        &[],
    )
    .await;
    assert_eq!(resp.status(), 200);
    let reader =
        tokio::spawn(async move { resp.into_body().collect().await.map(|c| c.to_bytes()) });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let addr = gw.addr;
    assert!(gw.shutdown().await, "drain did not finish");
    let body = reader.await.unwrap().unwrap();
    let text = String::from_utf8_lossy(&body);
    assert!(
        text.ends_with("data: [DONE]\n\n"),
        "stream cut by the drain: {text}"
    );
    assert_eq!(text.matches("\"content\":\" ").count(), 20);
    assert!(tokio::net::TcpStream::connect(addr).await.is_err());
}
