//! The gateway's own HTTP/1.1 client against a scripted raw-socket replica:
//! interim 1xx heads, chunked bodies streamed piece by piece, a pooled connection
//! the replica closed while idle, close-delimited bodies, and a garbage head.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use http_body_util::BodyExt;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;

use crate::common::*;
use ferry_gateway::GatewayConfig;

/// Reads one request; returns its method, or None at EOF.
async fn read_request(s: &mut TcpStream, buf: &mut Vec<u8>) -> Option<String> {
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
            let len: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .map_or(0, |v| v.trim().parse().unwrap());
            while buf.len() < end + 4 + len {
                let mut more = [0u8; 4096];
                let n = s.read(&mut more).await.ok()?;
                if n == 0 {
                    return None;
                }
                buf.extend_from_slice(&more[..n]);
            }
            buf.drain(..end + 4 + len);
            return head.split(' ').next().map(str::to_owned);
        }
        let mut more = [0u8; 4096];
        let n = s.read(&mut more).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&more[..n]);
    }
}

const JSON_OK: &str = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 11\r\n\r\n{\"n\":\"ok\"}\n";

/// Serves POSTs by script step (a shared counter); GETs (health, metrics) get an
/// empty list.
async fn replica(listener: TcpListener, step: Arc<AtomicUsize>, go_on: Arc<Notify>) {
    loop {
        let Ok((mut s, _)) = listener.accept().await else {
            return;
        };
        let step = step.clone();
        let go_on = go_on.clone();
        tokio::spawn(async move {
            let mut buf = Vec::new();
            while let Some(method) = read_request(&mut s, &mut buf).await {
                if method != "post" {
                    let body = "{\"object\":\"list\",\"data\":[]}";
                    let r = format!(
                        "HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = s.write_all(r.as_bytes()).await;
                    continue;
                }
                match step.fetch_add(1, Ordering::SeqCst) {
                    0 => {
                        // An interim head, then a chunked stream in pieces; the
                        // rest only once the client has seen the first event.
                        let _ = s.write_all(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\nx-extra: 1\r\n\r\n").await;
                        let _ = s.write_all(b"b\r\ndata: one\n\n\r\n").await;
                        go_on.notified().await;
                        let _ = s.write_all(b"b\r\ndata: two\n\n").await;
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        let _ = s.write_all(b"\r\n0\r\n\r\n").await;
                    }
                    1 => {
                        // Answer, then close while the connection sits in the pool.
                        let _ = s.write_all(JSON_OK.as_bytes()).await;
                        return;
                    }
                    3 => {
                        // Close-delimited body.
                        let _ = s.write_all(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nconnection: close\r\n\r\n{\"n\":").await;
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        let _ = s.write_all(b"\"eof\"}").await;
                        return;
                    }
                    4 => {
                        let _ = s.write_all(b"SSH-2.0-OpenSSH_9.2\r\n\r\n").await;
                        return;
                    }
                    _ => {
                        let _ = s.write_all(JSON_OK.as_bytes()).await;
                    }
                }
            }
        });
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn own_client_handles_interim_heads_chunks_stale_connections_and_garbage() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let up = listener.local_addr().unwrap();
    let step = Arc::new(AtomicUsize::new(0));
    let go_on = Arc::new(Notify::new());
    tokio::spawn(replica(listener, step.clone(), go_on.clone()));
    let gw = Gw::start(GatewayConfig {
        max_attempts: 1,
        backends: vec![ferry_gateway::BackendConfig {
            model: "raw".to_owned(),
            url: format!("http://{up}"),
            id: None,
        }],
        ..gw_cfg()
    })
    .await;
    let body = chat("raw", "hi", 4, true);

    // 0: streamed through event by event, after an interim head.
    let resp = send(gw.addr, "POST", "/v1/chat/completions", &body, &[]).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["x-extra"], "1");
    assert!(
        resp.headers()
            .get("transfer-encoding")
            .is_none_or(|v| v == "chunked")
    );
    let mut b = resp.into_body();
    let first = b.frame().await.unwrap().unwrap().into_data().unwrap();
    assert_eq!(
        &first[..],
        b"data: one\n\n",
        "the first event arrives alone"
    );
    go_on.notify_one();
    let rest = b.collect().await.unwrap().to_bytes();
    assert_eq!(&rest[..], b"data: two\n\n");

    // 1 then 2: the second request finds the pooled connection closed by the
    // replica and goes out on a new one; the client never notices.
    for _ in 0..2 {
        let (s, _, text) = call(gw.addr, "POST", "/v1/chat/completions", &body, &[]).await;
        assert_eq!((s, text.as_str()), (200, "{\"n\":\"ok\"}\n"));
    }
    // 3: a body delimited by the end of the connection.
    let (s, _, text) = call(gw.addr, "POST", "/v1/chat/completions", &body, &[]).await;
    assert_eq!((s, text.as_str()), (200, "{\"n\":\"eof\"}"));
    // 4: not HTTP at all: a 502 naming the replica, not a hang or a crash.
    let (s, _, text) = call(gw.addr, "POST", "/v1/chat/completions", &body, &[]).await;
    assert_eq!(s, 502, "{text}");
    assert!(text.contains("malformed"), "{text}");
    // 5: the gateway still works afterwards.
    let (s, _, text) = call(gw.addr, "POST", "/v1/chat/completions", &body, &[]).await;
    assert_eq!((s, text.as_str()), (200, "{\"n\":\"ok\"}\n"));
    assert_eq!(step.load(Ordering::SeqCst), 6);
}
