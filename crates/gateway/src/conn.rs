//! One client connection, served by the gateway's own HTTP/1.1 server code on a
//! Tokio `TcpStream`: request heads parsed by [`crate::request`], bodies by
//! Content-Length or chunked (within `maxBodyBytes`, else 413), `Expect:
//! 100-continue`, keep-alive and HTTP/1.0, pipelined requests answered in order,
//! timeouts for idle and slow clients, answers written head and body in one
//! write when they are ready together, SSE streams chunk by chunk. A client that
//! leaves (EOF or a reset) while its request is in flight drops the request, which
//! closes the replica connection and so cancels the generation. Buffers are per
//! connection and reused from request to request.

use std::future::{Future, poll_fn};
use std::io::ErrorKind;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio::time::{Instant, Sleep};

use crate::body::GwBody;
use crate::error::Error;
use crate::h1::{Decoded, Decoder, Framing};
use crate::proxy::{Incoming, Lane, Reply, Shared};
use crate::request::{self, BodyFraming, HeadError, Method, RequestHead};

/// Free space kept in the read buffer before each read.
const READ_RESERVE: usize = 4 * 1024;

/// Most bytes read ahead (pipelined requests) while a request is in flight;
/// beyond this the connection stops reading until the answer is out.
const READ_AHEAD_LIMIT: usize = 2 * request::MAX_REQUEST_HEAD;

/// Bodies (and body pieces) up to this size are copied behind the head so head
/// and body go out in one write; larger ones are written on their own.
const COPY_LIMIT: usize = 16 * 1024;

/// How long, and for how many bytes, a connection closed after an error answer
/// keeps reading (and dropping) what the client still sends, so that closing a
/// socket with unread data (which sends a reset) cannot destroy the answer
/// before the client read it.
const LINGER: Duration = Duration::from_secs(2);
const LINGER_BYTES: usize = 8 * 1024 * 1024;

/// Why a connection ends.
enum End {
    /// Close without a word: EOF, reset, idle keep-alive timeout, drain.
    Quiet,
    /// Answer with this error, then close.
    Answer(Error, &'static str),
}

/// One client connection's state, reused from request to request.
struct Client {
    io: TcpStream,
    rbuf: BytesMut,
    wbuf: Vec<u8>,
    /// The forwarded header lines of the current request.
    forward: Vec<u8>,
    timer: Pin<Box<Sleep>>,
}

/// Serves one client connection until it closes, fails, idles out, or the
/// gateway drains (`stop` turns true: an idle connection closes at once, a busy
/// one after its current answer).
pub(crate) async fn serve(lane: Arc<Lane>, io: TcpStream, mut stop: watch::Receiver<bool>) {
    let sh = lane.sh.clone();
    let mut c = Client {
        io,
        rbuf: BytesMut::with_capacity(READ_RESERVE * 2),
        wbuf: Vec::with_capacity(1024),
        forward: Vec::with_capacity(128),
        timer: Box::pin(tokio::time::sleep(sh.cfg.client_keep_alive())),
    };
    loop {
        let (raw, head) = match c.read_head(&sh, &mut stop).await {
            Ok(h) => h,
            Err(End::Quiet) => return,
            Err(End::Answer(err, path)) => return c.fail(&sh, err, path).await,
        };
        let body = match c.read_body(&sh, &head).await {
            Ok(b) => b,
            Err(End::Quiet) => return,
            Err(End::Answer(err, path)) => return c.fail(&sh, err, path).await,
        };
        let Client {
            io, rbuf, forward, ..
        } = &mut c;
        let req = Incoming {
            raw: &raw,
            head: &head,
            forward,
            body,
        };
        let reply = {
            let handled = crate::proxy::handle(&lane, &req);
            tokio::pin!(handled);
            let mut watching = true;
            poll_fn(|cx| {
                if let Poll::Ready(r) = handled.as_mut().poll(cx) {
                    return Poll::Ready(Some(r));
                }
                if poll_gone(io, rbuf, &mut watching, cx) {
                    // Dropping the handler drops its replica connection.
                    return Poll::Ready(None);
                }
                Poll::Pending
            })
            .await
        };
        let Some(reply) = reply else { return };
        let keep_alive = head.keep_alive && !sh.draining.load(Ordering::Relaxed);
        match c.write_reply(&sh, reply, &head, keep_alive).await {
            Ok(true) => {}
            Ok(false) | Err(()) => return,
        }
    }
}

/// Whether the client went away: EOF or an error on its side of the connection.
/// Bytes it sent meanwhile (pipelined requests) are kept in `rbuf`, up to
/// [`READ_AHEAD_LIMIT`]; past that the connection stops looking (`watching`).
fn poll_gone(
    io: &TcpStream,
    rbuf: &mut BytesMut,
    watching: &mut bool,
    cx: &mut Context<'_>,
) -> bool {
    while *watching {
        match io.poll_read_ready(cx) {
            Poll::Pending => return false,
            Poll::Ready(Err(_)) => return true,
            Poll::Ready(Ok(())) => {}
        }
        if rbuf.len() >= READ_AHEAD_LIMIT {
            *watching = false;
            return false;
        }
        rbuf.reserve(READ_RESERVE);
        match io.try_read_buf(rbuf) {
            // A half-close counts as leaving, as with nginx and hyper.
            Ok(0) => return true,
            Ok(_) => {}
            Err(e) if e.kind() == ErrorKind::WouldBlock => {}
            Err(_) => return true,
        }
    }
    false
}

/// What one wait on the client's socket brought.
enum Woke {
    Readable,
    Timeout,
    Stop,
    Error,
}

impl Client {
    /// Reads until a request head is complete and takes it off the buffer.
    async fn read_head(
        &mut self,
        sh: &Shared,
        stop: &mut watch::Receiver<bool>,
    ) -> Result<(Bytes, RequestHead), End> {
        let mut started = !self.rbuf.is_empty();
        self.timer.as_mut().reset(
            Instant::now()
                + if started {
                    sh.cfg.client_timeout()
                } else {
                    sh.cfg.client_keep_alive()
                },
        );
        loop {
            if !self.rbuf.is_empty() {
                match request::parse_head(&self.rbuf, &sh.session_header, &mut self.forward) {
                    Ok(Some(head)) => {
                        let raw = self.rbuf.split_to(head.len).freeze();
                        return Ok((raw, head));
                    }
                    Ok(None) => {}
                    Err(HeadError::TooLarge) => {
                        return Err(End::Answer(
                            Error::HeadTooLarge {
                                limit: request::MAX_REQUEST_HEAD,
                                headers: request::MAX_REQUEST_HEADERS,
                            },
                            "unmatched",
                        ));
                    }
                    Err(HeadError::Malformed(m)) => {
                        return Err(End::Answer(
                            Error::BadRequest {
                                message: m.to_owned(),
                            },
                            "unmatched",
                        ));
                    }
                }
                if !started {
                    started = true;
                    self.timer
                        .as_mut()
                        .reset(Instant::now() + sh.cfg.client_timeout());
                }
            }
            let idle = self.rbuf.is_empty();
            let io = &self.io;
            let timer = &mut self.timer;
            let woke = tokio::select! {
                biased;
                r = poll_fn(|cx| io.poll_read_ready(cx)) => match r {
                    Ok(()) => Woke::Readable,
                    Err(_) => Woke::Error,
                },
                () = timer.as_mut() => Woke::Timeout,
                _ = stop.changed(), if idle => Woke::Stop,
            };
            match woke {
                Woke::Readable => {}
                Woke::Stop | Woke::Error => return Err(End::Quiet),
                Woke::Timeout if idle => return Err(End::Quiet),
                Woke::Timeout => {
                    return Err(End::Answer(
                        Error::RequestTimeout {
                            timeout: sh.cfg.client_timeout(),
                        },
                        "unmatched",
                    ));
                }
            }
            self.rbuf.reserve(READ_RESERVE);
            match self.io.try_read_buf(&mut self.rbuf) {
                Ok(0) => return Err(End::Quiet),
                Ok(_) => {}
                Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                Err(_) => return Err(End::Quiet),
            }
        }
    }

    /// Reads the request's whole body (at most `maxBodyBytes`), sending `100
    /// Continue` first when the client asked for it and nothing of the body came.
    async fn read_body(&mut self, sh: &Shared, head: &RequestHead) -> Result<Bytes, End> {
        let limit = sh.cfg.max_body_bytes;
        let path = match head.route.path() {
            "" => "unmatched",
            p => p,
        };
        let too_large = || End::Answer(Error::BodyTooLarge { limit }, path);
        let needed = match head.framing {
            BodyFraming::None => return Ok(Bytes::new()),
            BodyFraming::Length(n) if n > limit as u64 => return Err(too_large()),
            BodyFraming::Length(n) => Some(n as usize),
            BodyFraming::Chunked => None,
        };
        if head.expect_continue && self.rbuf.is_empty() {
            self.wbuf.clear();
            self.wbuf
                .extend_from_slice(b"HTTP/1.1 100 Continue\r\n\r\n");
            write_all(
                &self.io,
                &self.wbuf,
                &mut self.timer,
                sh.cfg.client_timeout(),
            )
            .await
            .map_err(|()| End::Quiet)?;
        }
        let mut armed = false;
        let mut decoder = Decoder::new(Framing::Chunked);
        let mut chunked = BytesMut::new();
        loop {
            match needed {
                // The whole body in the buffer: passed on without a copy.
                Some(n) if self.rbuf.len() >= n => return Ok(self.rbuf.split_to(n).freeze()),
                Some(n) => {
                    // Grow with what arrives, not with what was announced.
                    let want = (n - self.rbuf.len()).min(64 * 1024);
                    self.rbuf.reserve(want);
                }
                None => loop {
                    match decoder.decode(&mut self.rbuf) {
                        Ok(Decoded::Data(b)) => {
                            if chunked.len() + b.len() > limit {
                                return Err(too_large());
                            }
                            chunked.extend_from_slice(&b);
                        }
                        Ok(Decoded::Done) => return Ok(chunked.freeze()),
                        Ok(Decoded::NeedMore) => {
                            self.rbuf.reserve(READ_RESERVE);
                            break;
                        }
                        Err(m) => {
                            return Err(End::Answer(
                                Error::BodyRead {
                                    message: format!("bad chunked encoding: {m}"),
                                },
                                path,
                            ));
                        }
                    }
                },
            }
            if !armed {
                armed = true;
                self.timer
                    .as_mut()
                    .reset(Instant::now() + sh.cfg.client_timeout());
            }
            let io = &self.io;
            let timer = &mut self.timer;
            let readable = poll_fn(|cx| {
                if let Poll::Ready(r) = io.poll_read_ready(cx) {
                    return Poll::Ready(r.is_ok());
                }
                if timer.as_mut().poll(cx).is_ready() {
                    return Poll::Ready(false);
                }
                Poll::Pending
            })
            .await;
            if !readable {
                return Err(End::Answer(
                    Error::RequestTimeout {
                        timeout: sh.cfg.client_timeout(),
                    },
                    path,
                ));
            }
            match self.io.try_read_buf(&mut self.rbuf) {
                Ok(0) => return Err(End::Quiet),
                Ok(_) => {}
                Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                Err(_) => return Err(End::Quiet),
            }
        }
    }

    /// Writes `reply`. Returns whether the connection can carry another request;
    /// `Err` when it broke (the client left, or stopped reading for too long) or the
    /// replica's body broke off (the client's answer is cut short).
    async fn write_reply(
        &mut self,
        sh: &Shared,
        reply: Reply,
        head: &RequestHead,
        keep_alive: bool,
    ) -> Result<bool, ()> {
        let timeout = sh.cfg.client_timeout();
        let w = &mut self.wbuf;
        w.clear();
        w.extend_from_slice(b"HTTP/1.1 ");
        w.extend_from_slice(reply.status.as_str().as_bytes());
        w.push(b' ');
        w.extend_from_slice(reply.status.canonical_reason().unwrap_or("").as_bytes());
        w.extend_from_slice(b"\r\n");
        let mut keep_alive = keep_alive;
        match reply.body {
            GwBody::Full(body) => {
                w.extend_from_slice(b"content-type: ");
                w.extend_from_slice(reply.content_type.as_bytes());
                w.extend_from_slice(b"\r\n");
                if let Some(s) = reply.retry_after {
                    w.extend_from_slice(b"retry-after: ");
                    push_decimal(w, s);
                    w.extend_from_slice(b"\r\n");
                }
                w.extend_from_slice(b"date: ");
                w.extend_from_slice(&crate::date::now());
                w.extend_from_slice(b"\r\ncontent-length: ");
                push_decimal(w, body.len() as u64);
                w.extend_from_slice(b"\r\n");
                end_head(w, keep_alive, head.http11);
                if head.method == Method::Head {
                    write_all(&self.io, w, &mut self.timer, timeout).await?;
                } else if body.len() <= COPY_LIMIT {
                    w.extend_from_slice(&body);
                    write_all(&self.io, w, &mut self.timer, timeout).await?;
                } else {
                    write_all(&self.io, w, &mut self.timer, timeout).await?;
                    write_all(&self.io, &body, &mut self.timer, timeout).await?;
                }
                Ok(keep_alive)
            }
            GwBody::Proxy(mut p) => {
                w.extend_from_slice(p.head_lines());
                if let Some(id) = p.replica().id_header() {
                    w.extend_from_slice(b"x-ferry-replica: ");
                    w.extend_from_slice(id.as_bytes());
                    w.extend_from_slice(b"\r\n");
                }
                let chunked = match p.remaining() {
                    Some(n) => {
                        w.extend_from_slice(b"content-length: ");
                        push_decimal(w, n);
                        w.extend_from_slice(b"\r\n");
                        false
                    }
                    None if head.http11 => {
                        w.extend_from_slice(b"transfer-encoding: chunked\r\n");
                        true
                    }
                    None => {
                        // HTTP/1.0: the body ends when the connection does.
                        keep_alive = false;
                        false
                    }
                };
                end_head(w, keep_alive, head.http11);
                let Client {
                    io,
                    rbuf,
                    wbuf,
                    timer,
                    ..
                } = self;
                let mut watching = true;
                loop {
                    let step = poll_fn(|cx| match p.poll_next(cx) {
                        Poll::Ready(piece) => Poll::Ready(Some(piece)),
                        // Nothing more yet: what is gathered goes out first.
                        Poll::Pending if !wbuf.is_empty() => Poll::Ready(None),
                        Poll::Pending if poll_gone(io, rbuf, &mut watching, cx) => {
                            Poll::Ready(Some(Some(Err(String::new()))))
                        }
                        Poll::Pending => Poll::Pending,
                    })
                    .await;
                    match step {
                        None => {
                            write_all(io, wbuf, timer, timeout).await?;
                            wbuf.clear();
                        }
                        Some(Some(Ok(data))) => {
                            if data.len() <= COPY_LIMIT {
                                frame(wbuf, &data, chunked);
                            } else {
                                if chunked {
                                    push_hex(wbuf, data.len());
                                    wbuf.extend_from_slice(b"\r\n");
                                }
                                write_all(io, wbuf, timer, timeout).await?;
                                wbuf.clear();
                                write_all(io, &data, timer, timeout).await?;
                                if chunked {
                                    wbuf.extend_from_slice(b"\r\n");
                                }
                            }
                            if p.is_done() {
                                if chunked {
                                    wbuf.extend_from_slice(b"0\r\n\r\n");
                                }
                                write_all(io, wbuf, timer, timeout).await?;
                                return Ok(keep_alive);
                            }
                        }
                        Some(Some(Err(_))) => {
                            // The replica's body broke off, or the client left: the
                            // answer cannot be completed, the connection closes.
                            let _ = write_all(io, wbuf, timer, timeout).await;
                            return Err(());
                        }
                        Some(None) => {
                            if chunked {
                                wbuf.extend_from_slice(b"0\r\n\r\n");
                            }
                            write_all(io, wbuf, timer, timeout).await?;
                            return Ok(keep_alive);
                        }
                    }
                }
            }
        }
    }

    /// Answers a request that cannot be served (bad head, body too large or late)
    /// and closes the connection, reading and dropping what the client still sends
    /// for a while so the answer is not lost to a reset.
    async fn fail(mut self, sh: &Shared, err: Error, path: &'static str) {
        let reply = sh.reject(err, "", "", path);
        let head = RequestHead {
            len: 0,
            method: Method::Other,
            method_text: 0..0,
            path: 0..0,
            route: request::Route::Other,
            http11: true,
            framing: BodyFraming::None,
            keep_alive: false,
            expect_continue: false,
            authorization: None,
            session: None,
        };
        if self.write_reply(sh, reply, &head, false).await.is_err() {
            return;
        }
        let _ = tokio::io::AsyncWriteExt::shutdown(&mut self.io).await;
        let io = &self.io;
        let mut scratch = BytesMut::with_capacity(16 * 1024);
        let mut dropped = 0;
        let _ = tokio::time::timeout(LINGER, async {
            while dropped < LINGER_BYTES {
                if io.readable().await.is_err() {
                    return;
                }
                scratch.clear();
                match io.try_read_buf(&mut scratch) {
                    Ok(0) => return,
                    Ok(n) => dropped += n,
                    Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                    Err(_) => return,
                }
            }
        })
        .await;
    }
}

/// Ends a response head: the connection header when needed, and the empty line.
fn end_head(w: &mut Vec<u8>, keep_alive: bool, http11: bool) {
    if !keep_alive {
        w.extend_from_slice(b"connection: close\r\n");
    } else if !http11 {
        w.extend_from_slice(b"connection: keep-alive\r\n");
    }
    w.extend_from_slice(b"\r\n");
}

/// Appends a body piece, as a chunk when `chunked`.
fn frame(w: &mut Vec<u8>, data: &[u8], chunked: bool) {
    if data.is_empty() {
        return;
    }
    if chunked {
        push_hex(w, data.len());
        w.extend_from_slice(b"\r\n");
        w.extend_from_slice(data);
        w.extend_from_slice(b"\r\n");
    } else {
        w.extend_from_slice(data);
    }
}

/// Writes all of `buf`; waits for the client to read at most `timeout` at a time.
async fn write_all(
    io: &TcpStream,
    mut buf: &[u8],
    timer: &mut Pin<Box<Sleep>>,
    timeout: Duration,
) -> Result<(), ()> {
    let mut armed = false;
    while !buf.is_empty() {
        match io.try_write(buf) {
            Ok(0) => return Err(()),
            Ok(n) => {
                buf = &buf[n..];
                armed = false;
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                if !armed {
                    armed = true;
                    timer.as_mut().reset(Instant::now() + timeout);
                }
                let ready = poll_fn(|cx| {
                    if let Poll::Ready(r) = io.poll_write_ready(cx) {
                        return Poll::Ready(r.is_ok());
                    }
                    if timer.as_mut().poll(cx).is_ready() {
                        return Poll::Ready(false);
                    }
                    Poll::Pending
                })
                .await;
                if !ready {
                    return Err(());
                }
            }
            Err(_) => return Err(()),
        }
    }
    Ok(())
}

/// Appends `n` in decimal (response heads here, request heads in `upstream`).
pub(crate) fn push_decimal(out: &mut Vec<u8>, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[at..]);
}

/// Appends `n` in lower-case hex (a chunk size).
fn push_hex(out: &mut Vec<u8>, mut n: usize) {
    let mut digits = [0u8; 16];
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b"0123456789abcdef"[n % 16];
        n /= 16;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[at..]);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_and_frames() {
        for n in [0u64, 9, 10, 12345, u64::MAX] {
            let mut out = Vec::new();
            push_decimal(&mut out, n);
            assert_eq!(out, n.to_string().into_bytes());
        }
        for n in [0usize, 15, 16, 255, 65536, usize::MAX] {
            let mut out = Vec::new();
            push_hex(&mut out, n);
            assert_eq!(out, format!("{n:x}").into_bytes());
        }
        let mut w = Vec::new();
        frame(&mut w, b"data: x\n\n", true);
        frame(&mut w, b"", true);
        frame(&mut w, b"ab", false);
        assert_eq!(w, b"9\r\ndata: x\n\n\r\nab");
    }
}
