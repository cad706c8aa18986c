//! Shared helpers: in-process mock replicas and gateways on loopback ports, mock
//! engine child processes, and a small HTTP client.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use ferry_gateway::{Gateway, GatewayConfig, Registry};
use ferry_openai::{MockBackend, MockConfig, ServerConfig};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio::sync::oneshot;

/// A mock replica served in this process.
pub struct Mock {
    pub addr: SocketAddr,
    pub backend: MockBackend,
    stop: Option<oneshot::Sender<()>>,
}

impl Mock {
    pub async fn start(cfg: MockConfig) -> Mock {
        let backend = MockBackend::new(cfg);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let app = ferry_openai::router(Arc::new(backend.clone()), ServerConfig::default())
            .merge(ferry_openai::control_router(backend.clone()))
            .merge(ferry_openai::embeddings_router(backend.clone()));
        let (tx, rx) = oneshot::channel::<()>();
        tokio::spawn(ferry_openai::serve_router(
            listener,
            app,
            async {
                let _ = rx.await;
            },
            Duration::from_millis(100),
        ));
        Mock {
            addr,
            backend,
            stop: Some(tx),
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

impl Drop for Mock {
    fn drop(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
    }
}

/// A default mock answering `model` with `tokens` tokens.
pub fn mock_cfg(model: &str, tokens: u32) -> MockConfig {
    MockConfig {
        models: vec![model.to_owned()],
        tokens_per_response: tokens,
        ..MockConfig::default()
    }
}

/// A gateway served in this process.
pub struct Gw {
    pub addr: SocketAddr,
    pub registry: Registry,
    pub gateway: Gateway,
    stop: Option<oneshot::Sender<()>>,
    pub done: Option<tokio::task::JoinHandle<std::io::Result<bool>>>,
}

impl Gw {
    pub async fn start(cfg: GatewayConfig) -> Gw {
        let (gateway, registry) = Gateway::new(cfg).unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (tx, rx) = oneshot::channel::<()>();
        let done = tokio::spawn(gateway.clone().serve(listener, async {
            let _ = rx.await;
        }));
        Gw {
            addr,
            registry,
            gateway,
            stop: Some(tx),
            done: Some(done),
        }
    }

    /// Starts the drain; returns what `serve` returned.
    pub async fn shutdown(&mut self) -> bool {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        self.done.take().unwrap().await.unwrap().unwrap()
    }
}

impl Drop for Gw {
    fn drop(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
    }
}

/// Quick config for tests: fast health checks, short ejections.
pub fn gw_cfg() -> GatewayConfig {
    GatewayConfig {
        health_interval_ms: 200,
        // Lenient: the whole suite shares two cores; passive ejection is the fast path.
        health_timeout_ms: 1_000,
        metrics_interval_ms: 200,
        eject_base_ms: 300,
        connect_timeout_ms: 300,
        drain_timeout_ms: 5_000,
        ..GatewayConfig::default()
    }
}

/// Sends one request on a fresh connection; returns the response with a streaming body.
pub async fn send(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: &str,
    headers: &[(&str, &str)],
) -> Response<Incoming> {
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(conn);
    let mut req = Request::builder()
        .method(method)
        .uri(format!("http://{addr}{path}"))
        .header("host", addr.to_string())
        .header("content-type", "application/json");
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    sender
        .send_request(req.body(Full::new(Bytes::from(body.to_owned()))).unwrap())
        .await
        .unwrap()
}

/// One request, read to the end: status, `x-ferry-replica`, body text.
pub async fn call(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: &str,
    headers: &[(&str, &str)],
) -> (u16, String, String) {
    let resp = send(addr, method, path, body, headers).await;
    let status = resp.status().as_u16();
    let replica = resp
        .headers()
        .get("x-ferry-replica")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    (
        status,
        replica,
        String::from_utf8_lossy(&bytes).into_owned(),
    )
}

pub fn chat(model: &str, content: &str, max_tokens: u32, stream: bool) -> String {
    serde_json::json!({
        "model": model,
        "messages": [{"role": "user", "content": content}],
        "max_tokens": max_tokens,
        "stream": stream,
    })
    .to_string()
}

/// Polls `cond` every 20 ms for up to `limit`; returns whether it became true.
pub async fn eventually(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + limit;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() > end {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Established TCP connections whose remote port is `port` (this process's
/// outgoing connections to a replica), from /proc/net/tcp{,6}.
pub fn established_to(port: u16) -> usize {
    let mut n = 0;
    for file in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(file) else {
            continue;
        };
        for line in text.lines().skip(1) {
            let cols: Vec<&str> = line.split_whitespace().collect();
            if cols.len() < 4 {
                continue;
            }
            let remote_port = cols[2]
                .rsplit(':')
                .next()
                .and_then(|p| u16::from_str_radix(p, 16).ok());
            if remote_port == Some(port) && cols[3] == "01" {
                n += 1;
            }
        }
    }
    n
}

/// The `mock_engine` example binary, built first (a no-op when fresh). `--workspace`, not
/// `-p ferry-gateway`: `cargo test --workspace` has already built it with the whole
/// workspace's features; resolving features for this one package would rebuild dozens of
/// dependencies with other features, inside the test, on CI's two cores.
pub fn mock_engine_binary() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let profile_dir = exe.parent().and_then(Path::parent).unwrap();
    let target_dir = profile_dir.parent().unwrap();
    let mut build = Command::new(env!("CARGO"));
    build
        .args(["build", "-q", "--workspace", "--example", "mock_engine"])
        .arg("--manifest-path")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml"))
        .env("CARGO_TARGET_DIR", target_dir);
    if profile_dir.file_name().is_some_and(|n| n == "release") {
        build.arg("--release");
    }
    assert!(
        build.status().unwrap().success(),
        "building the mock_engine example failed"
    );
    profile_dir.join("examples").join("mock_engine")
}

/// A `mock_engine` child process; killed on drop.
pub struct MockProc {
    pub child: Child,
    pub addr: SocketAddr,
}

impl MockProc {
    pub fn spawn(bin: &Path, listen: &str, extra: &[&str]) -> MockProc {
        let mut child = Command::new(bin)
            .args(["--listen", listen])
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let addr = line
            .trim()
            .strip_prefix("listening on http://")
            .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
            .parse()
            .unwrap();
        MockProc { child, addr }
    }

    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for MockProc {
    fn drop(&mut self) {
        self.kill();
    }
}
