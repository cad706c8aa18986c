//! The HTTP/1.1 client to replicas, driven in the request's own task: no
//! connection task, no channel between the request and its socket. Keep-alive
//! connections are pooled per replica and per worker thread ("lane"), so a
//! request and its upstream connection stay on one thread. A connection goes back
//! to its pool when the replica's answer has been read to its end; one whose
//! answer was cut short (client gone, idle timeout, broken framing) is dropped,
//! which closes it and cancels the generation.

use std::io::ErrorKind;
use std::sync::Mutex;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use http::header::HeaderValue;
use http::uri::PathAndQuery;
use http::{StatusCode, Uri};
use tokio::net::TcpStream;

use crate::h1::{self, Decoded, Decoder};
use crate::registry::Replica;

/// Idle connections kept per replica (all lanes together); more are closed.
const MAX_IDLE: usize = 1024;

/// Read buffer growth step.
const READ_CHUNK: usize = 16 * 1024;

/// One keep-alive connection to a replica, with the bytes read but not yet used.
#[derive(Debug)]
pub(crate) struct Conn {
    io: TcpStream,
    buf: BytesMut,
    /// The last answer's end-to-end header lines (reused from answer to answer).
    lines: Vec<u8>,
}

impl Conn {
    /// Whether the replica has not closed the connection (nor sent anything
    /// unasked). Costs no system call unless the socket became readable.
    fn is_open(&self) -> bool {
        let mut probe = [0u8; 1];
        matches!(self.io.try_read(&mut probe), Err(e) if e.kind() == ErrorKind::WouldBlock)
    }

    fn reserve(&mut self) {
        if self.buf.capacity() - self.buf.len() < READ_CHUNK / 4 {
            self.buf.reserve(READ_CHUNK);
        }
    }
}

#[derive(Debug)]
struct Idle {
    lane: usize,
    since: Instant,
    conn: Conn,
}

/// A replica's idle connections.
#[derive(Debug, Default)]
pub(crate) struct ConnPool {
    idle: Mutex<Vec<Idle>>,
}

impl ConnPool {
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Idle>> {
        self.idle.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The most recently used idle connection of `lane` that is still open.
    fn take(&self, lane: usize, max_idle: Duration) -> Option<Conn> {
        let now = Instant::now();
        let mut idle = self.lock();
        while let Some(pos) = idle.iter().rposition(|i| i.lane == lane) {
            let it = idle.swap_remove(pos);
            if now.saturating_duration_since(it.since) < max_idle && it.conn.is_open() {
                return Some(it.conn);
            }
        }
        None
    }

    /// Returns a connection whose last answer was read to its end.
    fn put(&self, lane: usize, conn: Conn) {
        let mut idle = self.lock();
        if idle.len() < MAX_IDLE {
            idle.push(Idle {
                lane,
                since: Instant::now(),
                conn,
            });
        }
    }

    /// Closes connections idle for `max_idle` or more, and closed ones.
    pub(crate) fn sweep(&self, max_idle: Duration) {
        let now = Instant::now();
        self.lock()
            .retain(|i| now.saturating_duration_since(i.since) < max_idle && i.conn.is_open());
    }
}

/// Why an attempt failed before any answer came.
#[derive(Debug)]
pub(crate) enum SendError {
    /// No connection could be made (refused, unreachable, connect timeout).
    Connect(String),
    /// The connection broke while sending or before the answer's head, or the
    /// head was not valid HTTP/1.1.
    Send(String),
}

/// The request paths the gateway forwards, with their fixed origin-form URIs.
pub(crate) fn path_uri(base_path: &str, path: &'static str) -> Uri {
    if base_path.is_empty() {
        return Uri::from_static(path);
    }
    PathAndQuery::try_from(format!("{base_path}{path}"))
        .map(Uri::from)
        .unwrap_or_else(|_| Uri::from_static(path))
}

async fn connect(replica: &Replica, timeout: Duration) -> Result<Conn, SendError> {
    let addr = replica.upstream().authority();
    let io = match tokio::time::timeout(timeout, TcpStream::connect(addr)).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => return Err(SendError::Connect(format!("connect to {addr}: {e}"))),
        Err(_) => {
            return Err(SendError::Connect(format!(
                "connect to {addr}: no answer within {timeout:?}"
            )));
        }
    };
    let _ = io.set_nodelay(true);
    Ok(Conn {
        io,
        buf: BytesMut::new(),
        lines: Vec::new(),
    })
}

/// What a write or read error looks like on a connection the replica closed.
fn stale_kind(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        ErrorKind::BrokenPipe
            | ErrorKind::ConnectionReset
            | ErrorKind::ConnectionAborted
            | ErrorKind::UnexpectedEof
    )
}

/// How one exchange on a connection failed.
struct Failed {
    /// Nothing of an answer came and the failure is what a connection the replica
    /// closed while idle looks like: a fresh connection may be tried.
    stale: bool,
    message: String,
}

/// Reads from the replica until a final (non-1xx) response head is complete.
/// `Ok(None)`: the replica closed the connection or the read failed (`err`).
fn poll_head(
    conn: &mut Conn,
    cx: &mut Context<'_>,
    got_any: &mut bool,
) -> Poll<Result<h1::Head, Failed>> {
    loop {
        if !conn.buf.is_empty() {
            *got_any = true;
            match h1::parse_head(&mut conn.buf, &mut conn.lines) {
                Ok(Some(head)) if head.status.is_informational() => continue,
                Ok(Some(head)) => return Poll::Ready(Ok(head)),
                Ok(None) => {}
                Err(e) => {
                    return Poll::Ready(Err(Failed {
                        stale: false,
                        message: e.to_owned(),
                    }));
                }
            }
        }
        match conn.io.poll_read_ready(cx) {
            Poll::Pending => return Poll::Pending,
            Poll::Ready(Err(e)) => {
                return Poll::Ready(Err(Failed {
                    stale: !*got_any && stale_kind(&e),
                    message: format!("reading the answer: {e}"),
                }));
            }
            Poll::Ready(Ok(())) => {}
        }
        conn.reserve();
        match conn.io.try_read_buf(&mut conn.buf) {
            Ok(0) => {
                return Poll::Ready(Err(Failed {
                    stale: !*got_any,
                    message: "the replica closed the connection before answering".to_owned(),
                }));
            }
            Ok(_) => {}
            Err(e) if e.kind() == ErrorKind::WouldBlock => {}
            Err(e) => {
                return Poll::Ready(Err(Failed {
                    stale: !*got_any && stale_kind(&e),
                    message: format!("reading the answer: {e}"),
                }));
            }
        }
    }
}

/// Writes the request (head and body, already in one buffer) and reads the
/// answer's head (skipping 1xx heads). The answer is read while the request is
/// still being written, so a replica that answers early (a 413 before the whole
/// body) and stops reading, or closes, is heard rather than taken for a broken
/// connection. Returns the head and whether the whole request went out.
async fn exchange(conn: &mut Conn, request: &[u8]) -> Result<(h1::Head, bool), Failed> {
    let mut written = 0;
    let mut got_any = false;
    let mut write_error: Option<std::io::Error> = None;
    // Usually the whole request fits in the socket buffer: one call, no waiting.
    match conn.io.try_write(request) {
        Ok(n) => written = n,
        Err(e) if e.kind() == ErrorKind::WouldBlock => {}
        Err(e) => write_error = Some(e),
    }
    if written < request.len() && write_error.is_none() {
        let outcome = std::future::poll_fn(|cx| {
            loop {
                if let Poll::Ready(r) = poll_head(conn, cx, &mut got_any) {
                    return Poll::Ready(Some(r));
                }
                match conn.io.poll_write_ready(cx) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(Err(e)) => {
                        write_error = Some(e);
                        return Poll::Ready(None);
                    }
                    Poll::Ready(Ok(())) => {}
                }
                match conn.io.try_write(&request[written..]) {
                    Ok(n) => {
                        written += n;
                        if written == request.len() {
                            return Poll::Ready(None);
                        }
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                    Err(e) => {
                        write_error = Some(e);
                        return Poll::Ready(None);
                    }
                }
            }
        })
        .await;
        match outcome {
            // An answer before the whole request went out.
            Some(Ok(head)) => return Ok((head, false)),
            Some(Err(f)) => return Err(f),
            None => {}
        }
    }
    if let Some(e) = write_error {
        // The replica may have answered and closed (or reset) without reading the
        // whole request: its answer is still in the socket's receive queue.
        let early = std::future::poll_fn(|cx| match poll_head(conn, cx, &mut got_any) {
            Poll::Ready(Ok(head)) => Poll::Ready(Some(head)),
            Poll::Ready(Err(_)) | Poll::Pending => Poll::Ready(None),
        })
        .await;
        if let Some(head) = early {
            return Ok((head, false));
        }
        return Err(Failed {
            stale: stale_kind(&e),
            message: format!("sending the request: {e}"),
        });
    }
    let head = std::future::poll_fn(|cx| poll_head(conn, cx, &mut got_any)).await?;
    Ok((head, true))
}

/// A replica's answer: its status and head (the header lines stay with the
/// connection), and its body still to read.
#[derive(Debug)]
pub(crate) struct Answer {
    pub status: StatusCode,
    /// `Content-Type: text/event-stream`.
    pub sse: bool,
    pub body: UpstreamBody,
}

/// Sends `head` (a complete request) to `replica`, on a pooled connection of
/// `lane` or a new one, and waits for the answer's head. A pooled connection the
/// replica closed meanwhile is replaced by a new one when nothing of an answer
/// came on it.
async fn send_raw(
    replica: &Replica,
    lane: usize,
    head: &[u8],
    connect_timeout: Duration,
    max_idle: Duration,
) -> Result<Answer, SendError> {
    loop {
        let (mut conn, pooled) = match replica.conns().take(lane, max_idle) {
            Some(c) => (c, true),
            None => (connect(replica, connect_timeout).await?, false),
        };
        match exchange(&mut conn, head).await {
            Ok((h, whole)) => {
                return Ok(Answer {
                    status: h.status,
                    sse: h.sse,
                    body: UpstreamBody {
                        decoder: Decoder::new(h.framing),
                        // A request not wholly sent leaves the connection unusable.
                        keep_alive: h.keep_alive && whole,
                        conn: Some(conn),
                    },
                });
            }
            Err(f) if f.stale && pooled => continue,
            Err(f) => {
                return Err(SendError::Send(format!(
                    "{} ({})",
                    f.message,
                    replica.upstream().authority()
                )));
            }
        }
    }
}

/// Sends one POST of `body` to `path` (origin form) on `replica`, on a pooled
/// connection of `lane` or a new one, and waits for the answer's head. `extra`
/// holds further request header lines (`name: value\r\n` each).
pub(crate) async fn send(
    replica: &Replica,
    lane: usize,
    path: &str,
    extra: &[u8],
    body: &Bytes,
    connect_timeout: Duration,
    max_idle: Duration,
) -> Result<Answer, SendError> {
    // Head and body in one buffer, written with one call; the buffer is the
    // thread's, reused from request to request (unless it grew large).
    let mut head = SCRATCH.take();
    head.clear();
    head.reserve(96 + path.len() + extra.len() + body.len());
    head.extend_from_slice(b"POST ");
    head.extend_from_slice(path.as_bytes());
    head.extend_from_slice(b" HTTP/1.1\r\nhost: ");
    head.extend_from_slice(replica.host_header().as_bytes());
    head.extend_from_slice(b"\r\ncontent-type: application/json\r\ncontent-length: ");
    crate::conn::push_decimal(&mut head, body.len() as u64);
    head.extend_from_slice(b"\r\n");
    head.extend_from_slice(extra);
    head.extend_from_slice(b"\r\n");
    head.extend_from_slice(body);
    let sent = send_raw(replica, lane, &head, connect_timeout, max_idle).await;
    if head.capacity() <= SCRATCH_KEEP {
        SCRATCH.set(head);
    }
    sent
}

/// Largest request buffer a thread keeps for the next request.
const SCRATCH_KEEP: usize = 64 * 1024;

thread_local! {
    /// The buffer requests to replicas are written into.
    static SCRATCH: std::cell::Cell<Vec<u8>> = const { std::cell::Cell::new(Vec::new()) };
}

/// The pool lane of health checks and polls (no worker has this id).
pub(crate) const BACKGROUND_LANE: usize = usize::MAX;

/// `GET path` on `replica` (health checks, load and model polls), on a pooled
/// connection of the background lane: the status and at most `limit` body bytes.
pub(crate) async fn get(
    replica: &Replica,
    path: &str,
    limit: usize,
    connect_timeout: Duration,
    max_idle: Duration,
) -> Result<(u16, Bytes), String> {
    let uri = replica.upstream().uri(path);
    let mut head = Vec::with_capacity(64 + path.len());
    head.extend_from_slice(b"GET ");
    head.extend_from_slice(uri.path().as_bytes());
    head.extend_from_slice(b" HTTP/1.1\r\nhost: ");
    head.extend_from_slice(replica.host_header().as_bytes());
    head.extend_from_slice(b"\r\naccept: */*\r\n\r\n");
    let answer = send_raw(replica, BACKGROUND_LANE, &head, connect_timeout, max_idle)
        .await
        .map_err(|e| match e {
            SendError::Connect(m) | SendError::Send(m) => m,
        })?;
    let mut body = answer.body;
    let mut out = BytesMut::new();
    loop {
        let piece = std::future::poll_fn(|cx| body.poll_data(cx, limit, &mut |_| {})).await;
        match piece {
            Some(Ok(b)) => {
                if out.len() + b.len() > limit {
                    return Err(format!("the answer to GET {path} exceeds {limit} bytes"));
                }
                out.extend_from_slice(&b);
            }
            Some(Err(e)) => return Err(e),
            None => break,
        }
    }
    body.recycle(replica, BACKGROUND_LANE);
    Ok((answer.status.as_u16(), out.freeze()))
}

/// A replica's response body, read from its connection as the client's side asks
/// for it.
#[derive(Debug)]
pub(crate) struct UpstreamBody {
    conn: Option<Conn>,
    decoder: Decoder,
    keep_alive: bool,
}

impl UpstreamBody {
    /// Whether the whole body has been read.
    pub(crate) fn is_end_stream(&self) -> bool {
        self.decoder.is_done()
    }

    /// Body bytes still expected, when known.
    pub(crate) fn remaining(&self) -> Option<u64> {
        self.decoder.remaining()
    }

    /// The answer's end-to-end header lines (`name: value\r\n` each), until the
    /// body is complete and its connection recycled.
    pub(crate) fn head_lines(&self) -> &[u8] {
        self.conn.as_ref().map_or(&[], |c| &c.lines[..])
    }

    /// The next body bytes: everything already received (up to `limit` bytes, in
    /// one buffer), else waits for more. `each` sees every piece as framed by the
    /// replica (a chunk, or what one read returned). `None` at the end.
    pub(crate) fn poll_data(
        &mut self,
        cx: &mut Context<'_>,
        limit: usize,
        each: &mut dyn FnMut(&Bytes),
    ) -> Poll<Option<Result<Bytes, String>>> {
        let Some(conn) = self.conn.as_mut() else {
            return Poll::Ready(None);
        };
        loop {
            let mut first: Option<Bytes> = None;
            let mut more: Option<BytesMut> = None;
            loop {
                let got =
                    first.as_ref().map_or(0, Bytes::len) + more.as_ref().map_or(0, BytesMut::len);
                if got >= limit {
                    break;
                }
                match self.decoder.decode(&mut conn.buf) {
                    Ok(Decoded::Data(b)) => {
                        each(&b);
                        match (&first, &mut more) {
                            (None, _) => first = Some(b),
                            (Some(f), None) => {
                                let mut m = BytesMut::with_capacity(f.len() + b.len());
                                m.extend_from_slice(f);
                                m.extend_from_slice(&b);
                                more = Some(m);
                            }
                            (Some(_), Some(m)) => m.extend_from_slice(&b),
                        }
                    }
                    Ok(Decoded::NeedMore | Decoded::Done) => break,
                    Err(e) => return Poll::Ready(Some(Err(e.to_owned()))),
                }
            }
            if let Some(m) = more {
                return Poll::Ready(Some(Ok(m.freeze())));
            }
            if let Some(b) = first {
                return Poll::Ready(Some(Ok(b)));
            }
            if self.decoder.is_done() {
                return Poll::Ready(None);
            }
            match conn.io.poll_read_ready(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Err(e)) => return Poll::Ready(Some(Err(e.to_string()))),
                Poll::Ready(Ok(())) => {}
            }
            conn.reserve();
            match conn.io.try_read_buf(&mut conn.buf) {
                Ok(0) => {
                    self.keep_alive = false;
                    return match self.decoder.eof() {
                        Ok(()) => Poll::Ready(None),
                        Err(e) => Poll::Ready(Some(Err(e.to_owned()))),
                    };
                }
                Ok(_) => {}
                Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                Err(e) => return Poll::Ready(Some(Err(e.to_string()))),
            }
        }
    }

    /// Once the body is complete: puts its connection back in `replica`'s pool of
    /// `lane` when it can carry another request (otherwise it is closed).
    pub(crate) fn recycle(&mut self, replica: &Replica, lane: usize) {
        if let Some(conn) = self.conn.take()
            && self.keep_alive
            && self.decoder.is_done()
            && conn.buf.is_empty()
        {
            replica.conns().put(lane, conn);
        }
    }
}

/// The `Host` header for a replica.
pub(crate) fn host_value(authority: &str) -> HeaderValue {
    HeaderValue::from_str(authority).unwrap_or_else(|_| HeaderValue::from_static("localhost"))
}
