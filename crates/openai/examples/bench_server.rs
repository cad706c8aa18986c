//! Overhead of the OpenAI layer over bare axum, measured side by side in one process.
//!
//! `cargo run -p ferry-openai --example bench_server [-- --connections 32 --requests 200]`
//!
//! Peers, on loopback with the same keep-alive HTTP/1.1 load generator:
//! - `bare axum`: a handler returning the mock's exact chat response bytes (JSON), or
//!   the same SSE event bytes as a stream, with no parsing, validation or metrics;
//! - `ferry-openai`: [`ferry_openai::router`] over a zero-delay [`MockBackend`]
//!   (16 tokens), i.e. body decoding, validation, generation channel, SSE framing,
//!   usage accounting and Prometheus metrics.
//!
//! Prints requests/s and p50/p99 latency for each, and the ratios ferry/bare.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::http::{Request, header};
use axum::response::IntoResponse;
use axum::routing::post;
use axum::serve::ListenerExt;
use ferry_openai::{MockBackend, MockConfig, ServerConfig, router};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;

const CHAT: &str = r#"{"model":"mock","messages":[{"role":"user","content":"Tell me about ferries."}],"max_tokens":16,"seed":1}"#;
const CHAT_STREAM: &str = r#"{"model":"mock","messages":[{"role":"user","content":"Tell me about ferries."}],"max_tokens":16,"seed":1,"stream":true}"#;

async fn spawn(app: Router) -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    // Both peers get the same listener setting as `ferry_openai::serve` (TCP_NODELAY).
    let listener = listener.tap_io(|tcp| {
        let _ = tcp.set_nodelay(true);
    });
    tokio::spawn(async move { axum::serve(listener, app).await.expect("serve") });
    addr
}

/// One keep-alive connection issuing `requests` POSTs in sequence; returns latencies.
async fn client(
    addr: std::net::SocketAddr,
    body: &'static str,
    requests: usize,
) -> Result<Vec<Duration>, String> {
    let stream = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|e| e.to_string())?;
    stream.set_nodelay(true).map_err(|e| e.to_string())?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(conn);
    let mut lat = Vec::with_capacity(requests);
    for _ in 0..requests {
        let req = Request::post("/v1/chat/completions")
            .header(header::HOST, "bench")
            .header(header::CONTENT_TYPE, "application/json")
            .body(Full::new(Bytes::from_static(body.as_bytes())))
            .map_err(|e| e.to_string())?;
        sender.ready().await.map_err(|e| format!("{e:?}"))?;
        let start = Instant::now();
        let resp = sender
            .send_request(req)
            .await
            .map_err(|e| format!("{e:?}"))?;
        if !resp.status().is_success() {
            return Err(format!("status {}", resp.status()));
        }
        let bytes = resp
            .into_body()
            .collect()
            .await
            .map_err(|e| e.to_string())?
            .to_bytes();
        lat.push(start.elapsed());
        if bytes.is_empty() {
            return Err("empty body".into());
        }
    }
    Ok(lat)
}

struct Measured {
    rps: f64,
    p50: Duration,
    p99: Duration,
}

async fn load(
    addr: std::net::SocketAddr,
    body: &'static str,
    conns: usize,
    requests: usize,
) -> Measured {
    // Warm up connections, allocator and metric families.
    let _ = client(addr, body, 20).await.expect("warm-up");
    let start = Instant::now();
    let tasks: Vec<_> = (0..conns)
        .map(|_| tokio::spawn(client(addr, body, requests)))
        .collect();
    let mut all = Vec::with_capacity(conns * requests);
    for t in tasks {
        all.extend(t.await.expect("join").expect("client"));
    }
    let elapsed = start.elapsed();
    all.sort();
    let pick = |q: f64| all[((all.len() as f64 * q) as usize).min(all.len() - 1)];
    Measured {
        rps: all.len() as f64 / elapsed.as_secs_f64(),
        p50: pick(0.50),
        p99: pick(0.99),
    }
}

/// Fetches what the real server answers, so the bare peer sends identical bytes.
async fn capture(addr: std::net::SocketAddr, body: &'static str) -> Vec<Bytes> {
    let stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .expect("handshake");
    tokio::spawn(conn);
    let req = Request::post("/v1/chat/completions")
        .header(header::HOST, "bench")
        .body(Full::new(Bytes::from_static(body.as_bytes())))
        .expect("request");
    let bytes = sender
        .send_request(req)
        .await
        .expect("send")
        .into_body()
        .collect()
        .await
        .expect("body")
        .to_bytes();
    let text = String::from_utf8_lossy(&bytes).into_owned();
    if text.starts_with("data: ") {
        text.split_inclusive("\n\n")
            .map(|e| Bytes::from(e.to_owned()))
            .collect()
    } else {
        vec![bytes]
    }
}

fn main() -> Result<(), String> {
    let mut conns = 32usize;
    let mut requests = 200usize;
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args.next().ok_or(format!("{flag} needs a value"))?;
        let n: usize = value
            .parse()
            .map_err(|_| format!("{flag}: not a number: {value}"))?;
        match flag.as_str() {
            "--connections" => conns = n,
            "--requests" => requests = n,
            other => return Err(format!("unknown flag {other}")),
        }
    }
    let rt = tokio::runtime::Runtime::new().map_err(|e| e.to_string())?;
    rt.block_on(async move {
        let mock = MockBackend::new(MockConfig {
            tokens_per_response: 16,
            ..MockConfig::default()
        });
        let ferry = spawn(router(Arc::new(mock), ServerConfig::default())).await;
        let json = capture(ferry, CHAT).await;
        let sse = capture(ferry, CHAT_STREAM).await;
        let json_body = json[0].clone();
        let bare = spawn(Router::new().route(
            "/v1/chat/completions",
            post(move |req: axum::extract::Request| {
                let json_body = json_body.clone();
                let sse = sse.clone();
                async move {
                    let body = axum::body::to_bytes(req.into_body(), 1 << 20)
                        .await
                        .unwrap_or_default();
                    if body.windows(13).any(|w| w == b"\"stream\":true") {
                        let events = futures_util::stream::iter(
                            sse.into_iter().map(Ok::<_, std::convert::Infallible>),
                        );
                        (
                            [(header::CONTENT_TYPE, "text/event-stream")],
                            Body::from_stream(events),
                        )
                            .into_response()
                    } else {
                        ([(header::CONTENT_TYPE, "application/json")], json_body).into_response()
                    }
                }
            }),
        ))
        .await;
        println!("{conns} connections x {requests} requests, 16 tokens per answer, loopback");
        println!(
            "{:<28} {:>10} {:>10} {:>10}",
            "target", "req/s", "p50 ms", "p99 ms"
        );
        for (label, body) in [("chat, JSON", CHAT), ("chat, SSE stream", CHAT_STREAM)] {
            let b = load(bare, body, conns, requests).await;
            let f = load(ferry, body, conns, requests).await;
            let ms = |d: Duration| d.as_secs_f64() * 1e3;
            println!(
                "{:<28} {:>10.0} {:>10.3} {:>10.3}",
                format!("bare axum, {label}"),
                b.rps,
                ms(b.p50),
                ms(b.p99)
            );
            println!(
                "{:<28} {:>10.0} {:>10.3} {:>10.3}",
                format!("ferry-openai, {label}"),
                f.rps,
                ms(f.p50),
                ms(f.p99)
            );
            println!(
                "ratio ferry/bare, {label}: throughput {:.2}x, p50 {:.2}x, p99 {:.2}x",
                f.rps / b.rps,
                ms(f.p50) / ms(b.p50),
                ms(f.p99) / ms(b.p99)
            );
        }
        Ok(())
    })
}
