//! The per-core serving mode (`serve_workers` over `SO_REUSEPORT` listeners) and the
//! gateway's own upstream connection pool: reuse, and a pooled connection the
//! replica closed being replaced without a client-visible error.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use ferry_gateway::{Gateway, GatewayConfig, bind_workers};
use ferry_openai::MockConfig;
use http_body_util::BodyExt;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::common::*;

fn backend(model: &str, url: String) -> ferry_gateway::BackendConfig {
    ferry_gateway::BackendConfig {
        model: model.to_owned(),
        url,
        id: None,
    }
}

/// A bare HTTP/1.1 replica: answers every request with a small JSON body and
/// keep-alive; with `close_after` it closes each connection 50 ms after its first
/// answer (what uvicorn does to idle keep-alive connections, only sooner).
async fn bare_replica(close_after: bool) -> (std::net::SocketAddr, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    // Connections that carried at least one chat completion.
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = accepted.clone();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            let count = count.clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut counted = false;
                loop {
                    // Read one request: head, then Content-Length bytes.
                    let mut chunk = [0u8; 4096];
                    let head_end = loop {
                        if let Some(p) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                            break p + 4;
                        }
                        match s.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                    };
                    let head = String::from_utf8_lossy(&buf[..head_end]).to_ascii_lowercase();
                    let len: usize = head
                        .lines()
                        .find_map(|l| l.strip_prefix("content-length:"))
                        .and_then(|v| v.trim().parse().ok())
                        .unwrap_or(0);
                    while buf.len() < head_end + len {
                        match s.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                    }
                    buf.drain(..head_end + len);
                    // Count connections that carried a completion (not health checks).
                    if !counted && head.starts_with("post /v1/chat/completions") {
                        counted = true;
                        count.fetch_add(1, Ordering::SeqCst);
                    }
                    let body = r#"{"id":"x","object":"chat.completion","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}}"#;
                    let resp = format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                        body.len()
                    );
                    if s.write_all(resp.as_bytes()).await.is_err() {
                        return;
                    }
                    if close_after {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        return;
                    }
                }
            });
        }
    });
    (addr, accepted)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_connections_are_reused_and_stale_ones_replaced() {
    let (keep, keep_accepts) = bare_replica(false).await;
    let (close, close_accepts) = bare_replica(true).await;
    let gw = Gw::start(GatewayConfig {
        backends: vec![
            backend("keep", format!("http://{keep}")),
            backend("close", format!("http://{close}")),
        ],
        health_interval_ms: 60_000,
        metrics_interval_ms: 60_000,
        ..gw_cfg()
    })
    .await;
    for i in 0..5 {
        let (s, _, body) = call(
            gw.addr,
            "POST",
            "/v1/chat/completions",
            &chat("keep", "hi", 2, false),
            &[],
        )
        .await;
        assert_eq!(s, 200, "request {i}: {body}");
    }
    assert_eq!(
        keep_accepts.load(Ordering::SeqCst),
        1,
        "sequential requests should share one pooled upstream connection"
    );
    for i in 0..4 {
        let (s, _, body) = call(
            gw.addr,
            "POST",
            "/v1/chat/completions",
            &chat("close", "hi", 2, false),
            &[],
        )
        .await;
        assert_eq!(
            s, 200,
            "request {i} after the replica closed its connection: {body}"
        );
        tokio::time::sleep(Duration::from_millis(120)).await;
    }
    assert_eq!(
        close_accepts.load(Ordering::SeqCst),
        4,
        "one fresh connection per request"
    );
    let metrics = gw.gateway.metrics_text();
    assert!(
        !metrics.contains("ferry_gateway_upstream_failures_total{"),
        "a closed idle connection is not a replica failure:\n{metrics}"
    );
    assert!(
        metrics
            .contains("ferry_gateway_prompt_tokens_total{model=\"close\",team=\"anonymous\"} 12"),
        "usage read from the replica's bodies:\n{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_core_workers_serve_and_drain_in_flight_streams() {
    let mock = Mock::start(MockConfig {
        inter_token_delay: Duration::from_millis(30),
        ..mock_cfg("m", 10)
    })
    .await;
    let (gateway, _registry) = Gateway::new(GatewayConfig {
        backends: vec![backend("m", mock.url())],
        ..gw_cfg()
    })
    .unwrap();
    let listeners = bind_workers("127.0.0.1:0".parse().unwrap(), 3).unwrap();
    assert_eq!(listeners.len(), 3);
    let addr = listeners[0].local_addr().unwrap();
    assert!(
        listeners.iter().all(|l| l.local_addr().unwrap() == addr),
        "every worker listens on the same port"
    );
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let served = tokio::spawn(gateway.serve_workers(listeners, async {
        let _ = stop_rx.await;
    }));
    let mut tasks = Vec::new();
    for i in 0..24 {
        tasks.push(tokio::spawn(async move {
            call(
                addr,
                "POST",
                "/v1/completions",
                &format!(r#"{{"model":"m","prompt":"p{i}","max_tokens":1}}"#),
                &[],
            )
            .await
        }));
    }
    for t in tasks {
        let (s, replica, body) = t.await.unwrap();
        assert_eq!(s, 200, "{body}");
        assert!(!replica.is_empty());
    }
    // A stream in flight when shutdown starts runs to its end.
    let resp = send(
        addr,
        "POST",
        "/v1/chat/completions",
        &chat("m", "long", 10, true),
        &[],
    )
    .await;
    assert_eq!(resp.status(), 200);
    stop_tx.send(()).unwrap();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    let text = String::from_utf8_lossy(&body);
    assert!(text.ends_with("data: [DONE]\n\n"), "{text}");
    assert!(served.await.unwrap().unwrap(), "workers drained in time");
    assert!(
        tokio::net::TcpStream::connect(addr).await.is_err(),
        "no worker listens after shutdown"
    );
}
