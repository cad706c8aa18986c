//! Real HTTP on loopback: `ferry_openai::serve` over `BuiltinBackend`, 16 concurrent streaming
//! chat clients, each ending with a usage chunk and `data: [DONE]`.

use std::sync::Arc;
use std::time::Duration;

use ferry_engine::serve::{BuiltinBackend, ServeOptions};
use ferry_openai::ServerConfig;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::serve::model_dir;

async fn post(addr: std::net::SocketAddr, path: &str, body: &str) -> String {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let req = format!(
        "POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    s.read_to_end(&mut out).await.unwrap();
    let raw = String::from_utf8(out).unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap();
    if !head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        return raw;
    }
    // De-chunk: `SIZE\r\nDATA\r\n` ... `0\r\n\r\n`.
    let mut rest = body;
    let mut joined = String::new();
    loop {
        let (size, tail) = rest.split_once("\r\n").unwrap();
        let n = usize::from_str_radix(size.trim(), 16).unwrap();
        if n == 0 {
            break;
        }
        joined.push_str(&tail[..n]);
        rest = &tail[n + 2..];
    }
    format!("{head}\r\n\r\n{joined}")
}

#[test]
fn sixteen_concurrent_sse_clients_complete_with_usage_over_http() {
    let backend =
        Arc::new(BuiltinBackend::load("tiny", model_dir(), &[], ServeOptions::default()).unwrap());
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(ferry_openai::serve(
            listener,
            backend,
            ServerConfig::default(),
            async move {
                let _ = stop_rx.await;
            },
            Duration::from_secs(5),
        ));
        let mut clients = Vec::new();
        for i in 0..16 {
            clients.push(tokio::spawn(async move {
                let body = format!(
                    r#"{{"model":"tiny","messages":[{{"role":"user","content":"What is {i} plus 2?"}}],"max_tokens":10,"stream":true,"stream_options":{{"include_usage":true}},"seed":{i}}}"#
                );
                post(addr, "/v1/chat/completions", &body).await
            }));
        }
        for c in clients {
            let resp = c.await.unwrap();
            assert!(resp.starts_with("HTTP/1.1 200"), "{resp}");
            assert!(resp.trim_end().ends_with("data: [DONE]"), "{resp}");
            let usage_line = resp
                .lines()
                .rfind(|l| l.starts_with("data: {") && l.contains("\"usage\":{"))
                .unwrap_or_else(|| panic!("no usage chunk: {resp}"));
            let v: serde_json::Value = serde_json::from_str(&usage_line["data: ".len()..]).unwrap();
            let u = &v["usage"];
            let (p, c) = (u["prompt_tokens"].as_u64().unwrap(), u["completion_tokens"].as_u64().unwrap());
            assert!(p > 0 && (1..=10).contains(&c), "{u}");
            assert_eq!(u["total_tokens"].as_u64().unwrap(), p + c);
        }
        let resp = post(addr, "/v1/chat/completions", r#"{"model":"nope","messages":[{"role":"user","content":"hi"}]}"#).await;
        assert!(resp.starts_with("HTTP/1.1 404"), "{resp}");
        assert!(resp.contains("\"error\""), "{resp}");
        stop_tx.send(()).unwrap();
        assert!(server.await.unwrap().unwrap());
    });
}
