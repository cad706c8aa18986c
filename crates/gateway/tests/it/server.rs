//! The gateway's own HTTP/1.1 server side, over raw sockets: malformed and
//! oversize requests, chunked bodies, `Expect: 100-continue`, pipelining,
//! keep-alive, HTTP/1.0, half-close, slow and idle clients, drain of idle
//! connections, and a replica that answers before reading the whole body.

use std::time::Duration;

use ferry_gateway::GatewayConfig;
use ferry_openai::MockConfig;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::common::*;

fn backend(model: &str, url: String) -> ferry_gateway::BackendConfig {
    ferry_gateway::BackendConfig {
        model: model.to_owned(),
        url,
        id: None,
    }
}

/// One response as read off the wire.
#[derive(Debug)]
struct Resp {
    status: u16,
    /// Lower-case `name: value` lines.
    head: String,
    body: Vec<u8>,
}

impl Resp {
    fn header(&self, name: &str) -> Option<&str> {
        self.head
            .lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
            .map(str::trim)
    }

    fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&self.body)))
    }
}

/// Reads more bytes into `buf`; false at EOF (or a reset), panics after 10 s.
async fn fill(s: &mut TcpStream, buf: &mut Vec<u8>) -> bool {
    let mut chunk = [0u8; 8192];
    match tokio::time::timeout(Duration::from_secs(10), s.read(&mut chunk)).await {
        Ok(Ok(0)) | Ok(Err(_)) => false,
        Ok(Ok(n)) => {
            buf.extend_from_slice(&chunk[..n]);
            true
        }
        Err(_) => panic!(
            "no answer within 10 s; have {:?}",
            String::from_utf8_lossy(buf)
        ),
    }
}

/// Reads one response (interim 1xx heads included as responses of their own);
/// None at EOF before a head. Bytes after it stay in `buf`.
async fn read_response(s: &mut TcpStream, buf: &mut Vec<u8>) -> Option<Resp> {
    let end = loop {
        if let Some(p) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break p + 4;
        }
        if !fill(s, buf).await {
            assert!(buf.is_empty(), "EOF inside a head: {buf:?}");
            return None;
        }
    };
    let text = String::from_utf8(buf[..end].to_vec()).unwrap();
    buf.drain(..end);
    let (line, rest) = text.split_once("\r\n").unwrap();
    assert!(line.starts_with("HTTP/1.1 "), "{line}");
    let status: u16 = line[9..12].parse().unwrap();
    let head = rest.to_ascii_lowercase();
    let mut r = Resp {
        status,
        head,
        body: Vec::new(),
    };
    if status < 200 {
        return Some(r);
    }
    if let Some(n) = r.header("content-length") {
        let n: usize = n.parse().unwrap();
        while buf.len() < n {
            assert!(fill(s, buf).await, "EOF inside a body");
        }
        r.body = buf.drain(..n).collect();
    } else if r.header("transfer-encoding") == Some("chunked") {
        loop {
            let line_end = loop {
                if let Some(p) = buf.windows(2).position(|w| w == b"\r\n") {
                    break p;
                }
                assert!(fill(s, buf).await, "EOF inside a chunk size");
            };
            let size =
                usize::from_str_radix(std::str::from_utf8(&buf[..line_end]).unwrap(), 16).unwrap();
            while buf.len() < line_end + 2 + size + 2 {
                assert!(fill(s, buf).await, "EOF inside a chunk");
            }
            r.body
                .extend_from_slice(&buf[line_end + 2..line_end + 2 + size]);
            assert_eq!(&buf[line_end + 2 + size..line_end + 4 + size], b"\r\n");
            buf.drain(..line_end + 4 + size);
            if size == 0 {
                break;
            }
        }
    } else {
        while fill(s, buf).await {}
        r.body = std::mem::take(buf);
    }
    Some(r)
}

/// Whether the gateway closed the connection (EOF or reset) within 5 s.
async fn closed(s: &mut TcpStream) -> bool {
    let mut chunk = [0u8; 1024];
    loop {
        match tokio::time::timeout(Duration::from_secs(5), s.read(&mut chunk)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return true,
            Ok(Ok(_)) => {}
            Err(_) => return false,
        }
    }
}

fn post(path: &str, body: &str, extra: &str) -> String {
    format!(
        "POST {path} HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nContent-Length: {}\r\n{extra}\r\n{body}",
        body.len()
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_oversize_and_badly_framed_requests_get_4xx_and_a_close() {
    let mock = Mock::start(mock_cfg("m", 4)).await;
    let gw = Gw::start(GatewayConfig {
        max_body_bytes: 1_000,
        backends: vec![backend("m", mock.url())],
        ..gw_cfg()
    })
    .await;
    let big_header = format!(
        "GET /health HTTP/1.1\r\nHost: gw\r\nX-Big: {}\r\n\r\n",
        "a".repeat(40 * 1024)
    );
    let many_headers = format!(
        "GET /health HTTP/1.1\r\n{}\r\n",
        (0..100)
            .map(|i| format!("X-{i}: v\r\n"))
            .collect::<String>()
    );
    let ok_chat = chat("m", "hi", 2, false);
    let cases: Vec<(String, u16, &str)> = vec![
        ("GARBAGE\r\n\r\n".into(), 400, "invalid_request"),
        ("GET /health HTTP/9.9\r\n\r\n".into(), 400, "invalid_request"),
        (
            "GET /he alth HTTP/1.1\r\nHost: gw\r\n\r\n".into(),
            400,
            "invalid_request",
        ),
        (
            "GET /health HTTP/1.1\r\nBad Header: x\r\n\r\n".into(),
            400,
            "invalid_request",
        ),
        (big_header, 431, "request_header_fields_too_large"),
        (many_headers, 431, "request_header_fields_too_large"),
        (
            post("/v1/completions", "", "Content-Length: 2000\r\n")
                .replace("Content-Length: 0\r\n", ""),
            413,
            "request_too_large",
        ),
        (
            format!(
                "POST /v1/chat/completions HTTP/1.1\r\nContent-Length: {}\r\nTransfer-Encoding: chunked\r\n\r\n",
                ok_chat.len()
            ),
            400,
            "invalid_request",
        ),
        (
            "POST /v1/chat/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n".into(),
            400,
            "invalid_json",
        ),
        (
            "POST /v1/chat/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}XX0\r\n\r\n".into(),
            400,
            "invalid_json",
        ),
        (
            "POST /v1/chat/completions HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n".into(),
            400,
            "invalid_request",
        ),
        (
            "POST /v1/chat/completions HTTP/1.1\r\nContent-Length: 12x\r\n\r\n".into(),
            400,
            "invalid_request",
        ),
    ];
    for (raw, status, code) in cases {
        let mut s = TcpStream::connect(gw.addr).await.unwrap();
        s.write_all(raw.as_bytes()).await.unwrap();
        let mut buf = Vec::new();
        let r = read_response(&mut s, &mut buf)
            .await
            .unwrap_or_else(|| panic!("no answer to {raw:.80?}"));
        assert_eq!(r.status, status, "{raw:.80?}: {r:?}");
        assert_eq!(r.json()["error"]["code"], code, "{raw:.80?}");
        assert_eq!(r.header("connection"), Some("close"), "{raw:.80?}");
        assert!(
            closed(&mut s).await,
            "connection left open after {raw:.80?}"
        );
    }
    assert_eq!(mock.backend.stats().started, 0);
    // A well-formed chunked body, in odd pieces, is decoded and forwarded.
    let mut s = TcpStream::connect(gw.addr).await.unwrap();
    let (a, b) = ok_chat.split_at(7);
    let wire = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n{:x};ext=1\r\n{a}\r\n{:x}\r\n{b}\r\n0\r\nx-trailer: 1\r\n\r\n",
        a.len(),
        b.len()
    );
    for piece in wire.as_bytes().chunks(5) {
        s.write_all(piece).await.unwrap();
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let mut buf = Vec::new();
    let r = read_response(&mut s, &mut buf).await.unwrap();
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.json()["object"], "chat.completion");
    assert_eq!(mock.backend.stats().started, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_keep_alive_http10_and_expect_continue() {
    let mock = Mock::start(mock_cfg("m", 3)).await;
    let gw = Gw::start(GatewayConfig {
        backends: vec![backend("m", mock.url())],
        ..gw_cfg()
    })
    .await;
    // Four requests in one write: answered in order on one connection.
    let mut s = TcpStream::connect(gw.addr).await.unwrap();
    let mut wire = post(
        "/v1/completions",
        r#"{"model":"m","prompt":"a","max_tokens":2}"#,
        "",
    );
    wire.push_str("GET /health HTTP/1.1\r\nHost: gw\r\n\r\n");
    wire.push_str(&post("/v1/embeddings", r#"{"model":"m","input":"x"}"#, ""));
    wire.push_str("GET /v1/models HTTP/1.1\r\nHost: gw\r\n\r\n");
    s.write_all(wire.as_bytes()).await.unwrap();
    let mut buf = Vec::new();
    let r1 = read_response(&mut s, &mut buf).await.unwrap();
    assert_eq!(r1.json()["object"], "text_completion", "{r1:?}");
    assert!(r1.header("x-ferry-replica").is_some());
    let r2 = read_response(&mut s, &mut buf).await.unwrap();
    assert_eq!(r2.body, b"ok\n");
    assert!(r2.header("date").is_some_and(|d| d.ends_with("gmt")));
    let r3 = read_response(&mut s, &mut buf).await.unwrap();
    assert_eq!(r3.json()["data"][0]["object"], "embedding", "{r3:?}");
    let r4 = read_response(&mut s, &mut buf).await.unwrap();
    assert_eq!(r4.json()["data"][0]["id"], "m", "{r4:?}");
    for r in [&r1, &r2, &r3, &r4] {
        assert_eq!(r.status, 200);
        assert_eq!(r.header("connection"), None, "keep-alive is the default");
    }
    // The same connection carries more, streamed answers included (chunked).
    s.write_all(post("/v1/chat/completions", &chat("m", "x", 3, true), "").as_bytes())
        .await
        .unwrap();
    let r = read_response(&mut s, &mut buf).await.unwrap();
    assert_eq!(r.header("transfer-encoding"), Some("chunked"));
    let text = String::from_utf8(r.body).unwrap();
    assert!(text.ends_with("data: [DONE]\n\n"), "{text}");
    assert_eq!(text.matches("\"content\":\" ").count(), 3, "{text}");
    // `Connection: close` is honoured after the answer.
    s.write_all(b"GET /health HTTP/1.1\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let r = read_response(&mut s, &mut buf).await.unwrap();
    assert_eq!((r.status, r.header("connection")), (200, Some("close")));
    assert!(closed(&mut s).await);

    // HTTP/1.0: closed after the answer unless it asks for keep-alive; a stream
    // comes without chunked framing and ends with the connection.
    let mut s = TcpStream::connect(gw.addr).await.unwrap();
    s.write_all(b"GET /health HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
        .await
        .unwrap();
    let r = read_response(&mut s, &mut buf).await.unwrap();
    assert_eq!(r.header("connection"), Some("keep-alive"));
    let body = chat("m", "x", 2, true);
    s.write_all(
        format!(
            "POST /v1/chat/completions HTTP/1.0\r\nContent-Length: {}\r\nConnection: keep-alive\r\n\r\n{body}",
            body.len()
        )
        .as_bytes(),
    )
    .await
    .unwrap();
    let r = read_response(&mut s, &mut buf).await.unwrap();
    assert_eq!(r.status, 200);
    assert_eq!(r.header("transfer-encoding"), None);
    assert_eq!(r.header("connection"), Some("close"));
    let text = String::from_utf8(r.body).unwrap();
    assert!(text.ends_with("data: [DONE]\n\n"), "{text}");
    let mut s = TcpStream::connect(gw.addr).await.unwrap();
    s.write_all(b"GET /health HTTP/1.0\r\n\r\n").await.unwrap();
    let r = read_response(&mut s, &mut buf).await.unwrap();
    assert_eq!((r.status, r.header("connection")), (200, Some("close")));
    assert!(closed(&mut s).await);

    // Expect: 100-continue: the interim answer first, then the body is read.
    let mut s = TcpStream::connect(gw.addr).await.unwrap();
    let body = chat("m", "x", 2, false);
    s.write_all(
        format!(
            "POST /v1/chat/completions HTTP/1.1\r\nContent-Length: {}\r\nExpect: 100-continue\r\n\r\n",
            body.len()
        )
        .as_bytes(),
    )
    .await
    .unwrap();
    let interim = read_response(&mut s, &mut buf).await.unwrap();
    assert_eq!(interim.status, 100);
    s.write_all(body.as_bytes()).await.unwrap();
    let r = read_response(&mut s, &mut buf).await.unwrap();
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["object"], "chat.completion");
    // Over the limit with Expect: refused at once, no interim answer.
    let mut s = TcpStream::connect(gw.addr).await.unwrap();
    s.write_all(
        b"POST /v1/chat/completions HTTP/1.1\r\nContent-Length: 50000000\r\nExpect: 100-continue\r\n\r\n",
    )
    .await
    .unwrap();
    let r = read_response(&mut s, &mut buf).await.unwrap();
    assert_eq!(r.status, 413);
    assert!(closed(&mut s).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_close_slow_and_idle_clients_and_drain_of_idle_connections() {
    let mock = Mock::start(MockConfig {
        inter_token_delay: Duration::from_millis(20),
        ..mock_cfg("m", 10_000)
    })
    .await;
    let mut gw = Gw::start(GatewayConfig {
        backends: vec![backend("m", mock.url())],
        client_timeout_ms: 400,
        client_keep_alive_ms: 600,
        ..gw_cfg()
    })
    .await;
    // A client that half-closes while its stream runs is taken as gone: the
    // replica's generation is cancelled and the connection closed.
    let mut s = TcpStream::connect(gw.addr).await.unwrap();
    s.write_all(post("/v1/chat/completions", &chat("m", "go", 5_000, true), "").as_bytes())
        .await
        .unwrap();
    let mut buf = Vec::new();
    while !String::from_utf8_lossy(&buf).contains("\"content\":\" ") {
        assert!(fill(&mut s, &mut buf).await);
    }
    s.shutdown().await.unwrap();
    assert!(closed(&mut s).await, "half-closed client kept");
    let cancelled = eventually(Duration::from_secs(5), || {
        let st = mock.backend.stats();
        st.cancelled == 1 && st.active == 0
    })
    .await;
    assert!(cancelled, "{:?}", mock.backend.stats());

    // A head that never completes: 408 after clientTimeoutMs.
    let mut s = TcpStream::connect(gw.addr).await.unwrap();
    s.write_all(b"GET /health HTTP/1.1\r\nHost: sl")
        .await
        .unwrap();
    let mut buf = Vec::new();
    let r = read_response(&mut s, &mut buf).await.unwrap();
    assert_eq!(r.status, 408);
    assert_eq!(r.json()["error"]["code"], "request_timeout");
    assert!(closed(&mut s).await);
    drop(s);
    // A body that stops halfway: 408 too.
    let mut s = TcpStream::connect(gw.addr).await.unwrap();
    s.write_all(b"POST /v1/completions HTTP/1.1\r\nContent-Length: 50\r\n\r\n{\"model\"")
        .await
        .unwrap();
    let r = read_response(&mut s, &mut buf).await.unwrap();
    assert_eq!(r.status, 408);
    drop(s);
    // An idle keep-alive connection is closed after clientKeepAliveMs, silently.
    let mut s = TcpStream::connect(gw.addr).await.unwrap();
    s.write_all(b"GET /health HTTP/1.1\r\n\r\n").await.unwrap();
    assert_eq!(read_response(&mut s, &mut buf).await.unwrap().status, 200);
    let idle_since = std::time::Instant::now();
    assert!(closed(&mut s).await);
    assert!(buf.is_empty(), "{buf:?}");
    assert!(idle_since.elapsed() >= Duration::from_millis(500));

    // Drain: an idle keep-alive connection is closed at once, a busy one after
    // its answer, and `serve` returns well before the keep-alive timeout.
    let mut idle = TcpStream::connect(gw.addr).await.unwrap();
    idle.write_all(b"GET /health HTTP/1.1\r\n\r\n")
        .await
        .unwrap();
    assert_eq!(
        read_response(&mut idle, &mut buf).await.unwrap().status,
        200
    );
    let started = std::time::Instant::now();
    assert!(gw.shutdown().await);
    assert!(closed(&mut idle).await);
    assert!(
        started.elapsed() < Duration::from_millis(500),
        "{:?}",
        started.elapsed()
    );
}

/// A replica that reads only the request head, answers 413 and closes, the way
/// servers with a body limit do; counts requests.
/// A replica that answers a POST with 413 as soon as it has the head. With `lingering`
/// it then closes its sending side and reads (and drops) the rest, as nginx and uvicorn
/// do; without, it closes with the body unread and the kernel resets the connection.
async fn early_answering_replica(lingering: bool) -> std::net::SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut chunk).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                }
                let answer = if buf.starts_with(b"POST") {
                    let body = r#"{"error":{"message":"too big for me","code":"too_big"}}"#;
                    format!(
                        "HTTP/1.1 413 Payload Too Large\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                        body.len()
                    )
                } else {
                    "HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}".to_owned()
                };
                let _ = s.write_all(answer.as_bytes()).await;
                if lingering {
                    let _ = s.shutdown().await;
                    let drain = async { while let Ok(1..) = s.read(&mut chunk).await {} };
                    let _ = tokio::time::timeout(Duration::from_secs(5), drain).await;
                }
                // Else: close with the body unread; the kernel resets the connection.
            });
        }
    });
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_answering_before_reading_the_body_is_heard() {
    // 8 MiB: far more than the socket buffers hold, so the write fails or stalls.
    let body = chat("m", &"word ".repeat(8 * 1024 * 1024 / 5), 2, false);
    for lingering in [true, false] {
        let addr = early_answering_replica(lingering).await;
        let gw = Gw::start(GatewayConfig {
            max_body_bytes: 16 * 1024 * 1024,
            backends: vec![backend("m", format!("http://{addr}"))],
            ..gw_cfg()
        })
        .await;
        for _ in 0..3 {
            let (status, replica, text) =
                call(gw.addr, "POST", "/v1/chat/completions", &body, &[]).await;
            if !lingering && status == 502 {
                // The reset can reach the gateway before the answer does, and a reset
                // discards what was not read yet: then there is nothing to relay, and
                // the client gets a well-formed 502 naming the reset.
                assert!(text.contains("reset by peer"), "{text}");
                continue;
            }
            assert_eq!(status, 413, "lingering {lingering}: {text}");
            assert!(!replica.is_empty());
            assert!(text.contains("too big for me"), "{text}");
        }
    }
}

/// A small deterministic generator (xorshift64*), so failures replay.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// Mutated requests (bytes flipped, inserted, dropped, duplicated), written in
/// random pieces: every connection ends with well-formed answers or a plain close
/// in bounded time, and the gateway keeps serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutated_requests_in_random_pieces_get_well_formed_answers_or_a_close() {
    let mock = Mock::start(mock_cfg("m", 2)).await;
    let gw = Gw::start(GatewayConfig {
        max_body_bytes: 4_000,
        client_timeout_ms: 300,
        client_keep_alive_ms: 300,
        backends: vec![backend("m", mock.url())],
        ..gw_cfg()
    })
    .await;
    let chat_body = chat("m", "hello there", 2, false);
    let mut seed = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\nX-Session-Id: s\r\n\r\n{:x}\r\n{chat_body}\r\n0\r\n\r\n",
        chat_body.len()
    )
    .into_bytes();
    seed.extend_from_slice(
        post(
            "/v1/completions",
            r#"{"model":"m","prompt":"p","max_tokens":1}"#,
            "",
        )
        .as_bytes(),
    );
    seed.extend_from_slice(b"GET /health HTTP/1.1\r\n\r\n");
    let mut rng = Rng(0x5eed_1234_abcd_0001);
    let mut cases = Vec::new();
    for _ in 0..48 {
        let mut bytes = seed.clone();
        for _ in 0..1 + rng.below(4) {
            let at = rng.below(bytes.len());
            match rng.below(4) {
                0 => bytes[at] = rng.next() as u8,
                1 => bytes.insert(at, [b'\r', b'\n', b':', b' ', b'0', 0, 0xff][rng.below(7)]),
                2 => {
                    let n = rng.below(16).min(bytes.len() - at);
                    bytes.drain(at..at + n);
                }
                _ => {
                    let n = rng.below(64).min(bytes.len() - at);
                    let dup: Vec<u8> = bytes[at..at + n].to_vec();
                    bytes.splice(at..at, dup);
                }
            }
        }
        let pieces: Vec<usize> = (0..rng.below(6)).map(|_| 1 + rng.below(40)).collect();
        cases.push((bytes, pieces));
    }
    let mut tasks = Vec::new();
    for (bytes, pieces) in cases {
        let addr = gw.addr;
        tasks.push(tokio::spawn(async move {
            let mut s = TcpStream::connect(addr).await.unwrap();
            let mut rest = &bytes[..];
            for p in pieces {
                let (now, later) = rest.split_at(p.min(rest.len()));
                if s.write_all(now).await.is_err() {
                    break;
                }
                rest = later;
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            let _ = s.write_all(rest).await;
            let mut got = Vec::new();
            let read_all = async {
                let mut chunk = [0u8; 4096];
                while let Ok(n) = s.read(&mut chunk).await {
                    if n == 0 {
                        break;
                    }
                    got.extend_from_slice(&chunk[..n]);
                }
            };
            let ended = tokio::time::timeout(Duration::from_secs(5), read_all)
                .await
                .is_ok();
            (bytes, got, ended)
        }));
    }
    for t in tasks {
        let (sent, got, ended) = t.await.unwrap();
        let sent = String::from_utf8_lossy(&sent);
        assert!(ended, "connection still open after 5 s for {sent:?}");
        if got.is_empty() {
            continue;
        }
        let text = String::from_utf8_lossy(&got);
        assert!(text.starts_with("HTTP/1.1 "), "{sent:?} -> {text:?}");
        for line in text.split("\r\n").filter(|l| l.starts_with("HTTP/1.1 ")) {
            let status: u16 = line[9..12].parse().unwrap_or(0);
            assert!(
                (100..600).contains(&status) && status != 500,
                "{sent:?} -> {line:?}"
            );
        }
    }
    let (status, _, _) = call(gw.addr, "GET", "/health", "", &[]).await;
    assert_eq!(status, 200);
}

/// A client that leaves while the replica has not answered yet (long time to
/// first token): the gateway notices at once, closes its replica connection (the
/// engine cancels the generation) instead of holding it until the answer comes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_leaving_before_the_answer_frees_the_replica_connection() {
    let mock = Mock::start(MockConfig {
        time_to_first_token: Duration::from_secs(20),
        ..mock_cfg("m", 4)
    })
    .await;
    let gw = Gw::start(GatewayConfig {
        backends: vec![backend("m", mock.url())],
        health_interval_ms: 60_000,
        metrics_interval_ms: 60_000,
        pool_idle_timeout_ms: 300,
        ..gw_cfg()
    })
    .await;
    let port = mock.addr.port();
    // The first health check and poll (at start) leave idle connections: swept.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(eventually(Duration::from_secs(5), || established_to(port) == 0).await);
    for stream in [false, true] {
        let mut s = TcpStream::connect(gw.addr).await.unwrap();
        s.write_all(post("/v1/chat/completions", &chat("m", "slow", 4, stream), "").as_bytes())
            .await
            .unwrap();
        let waiting = eventually(Duration::from_secs(5), || mock.backend.stats().active == 1).await;
        assert!(waiting, "{:?}", mock.backend.stats());
        assert_eq!(established_to(port), 1);
        drop(s);
        let freed = eventually(Duration::from_secs(3), || {
            established_to(port) == 0 && mock.backend.stats().active == 0
        })
        .await;
        assert!(
            freed,
            "stream={stream}: {} replica connections, {:?}",
            established_to(port),
            mock.backend.stats()
        );
    }
    // The streamed answer had begun (its head came at once): counted as 499.
    let metrics = gw.gateway.metrics_text();
    assert!(metrics.contains("code=\"499\"} 1"), "{metrics}");
}
