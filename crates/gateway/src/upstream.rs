//! Keep-alive HTTP/1.1 connections to replicas, pooled per replica and per worker
//! thread ("lane"), so a request, its upstream connection and that connection's
//! task stay on one thread. A connection goes back to its pool when the replica's
//! answer has been read to its end; one whose answer was cut short (client gone,
//! idle timeout) is dropped, which closes it and cancels the generation.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderValue};
use http::uri::PathAndQuery;
use http::{Method, Request, Response, Uri};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;

use crate::registry::Replica;

/// The sending half of one upstream connection.
pub(crate) type Sender = SendRequest<Full<Bytes>>;

/// Idle connections kept per replica (all lanes together); more are closed.
const MAX_IDLE: usize = 1024;

#[derive(Debug)]
struct Idle {
    lane: usize,
    since: Instant,
    tx: Sender,
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
    fn take(&self, lane: usize, max_idle: Duration) -> Option<Sender> {
        let now = Instant::now();
        let mut idle = self.lock();
        while let Some(pos) = idle.iter().rposition(|i| i.lane == lane) {
            let it = idle.swap_remove(pos);
            if !it.tx.is_closed() && now.saturating_duration_since(it.since) < max_idle {
                return Some(it.tx);
            }
        }
        None
    }

    /// Returns a connection whose last answer was read to its end.
    pub(crate) fn put(&self, lane: usize, tx: Sender) {
        if tx.is_closed() {
            return;
        }
        let mut idle = self.lock();
        if idle.len() < MAX_IDLE {
            idle.push(Idle {
                lane,
                since: Instant::now(),
                tx,
            });
        }
    }

    /// Closes connections idle for `max_idle` or more, and closed ones.
    pub(crate) fn sweep(&self, max_idle: Duration) {
        let now = Instant::now();
        self.lock()
            .retain(|i| !i.tx.is_closed() && now.saturating_duration_since(i.since) < max_idle);
    }
}

/// Why an attempt failed before any answer came.
#[derive(Debug)]
pub(crate) enum SendError {
    /// No connection could be made (refused, unreachable, connect timeout).
    Connect(String),
    /// The connection broke while sending or before the answer's head.
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

fn chain(e: &dyn std::error::Error) -> String {
    let mut msg = e.to_string();
    let mut src = e.source();
    while let Some(s) = src {
        msg.push_str(": ");
        msg.push_str(&s.to_string());
        src = s.source();
    }
    msg
}

async fn connect(replica: &Replica, timeout: Duration) -> Result<Sender, SendError> {
    let addr = replica.upstream().authority();
    let stream = match tokio::time::timeout(timeout, tokio::net::TcpStream::connect(addr)).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => return Err(SendError::Connect(format!("connect to {addr}: {e}"))),
        Err(_) => {
            return Err(SendError::Connect(format!(
                "connect to {addr}: no answer within {timeout:?}"
            )));
        }
    };
    let _ = stream.set_nodelay(true);
    let (tx, conn) = hyper::client::conn::http1::Builder::new()
        .handshake(TokioIo::new(stream))
        .await
        .map_err(|e| SendError::Connect(format!("handshake with {addr}: {}", chain(&e))))?;
    tokio::spawn(async move {
        if let Err(e) = conn.await {
            tracing::debug!(error = %e, "upstream connection ended with an error");
        }
    });
    Ok(tx)
}

/// Sends one POST to `replica` on a pooled connection of `lane` (or a new one) and
/// waits for the answer's head. A pooled connection the replica closed meanwhile
/// is replaced by a new one when the request provably was not sent.
pub(crate) async fn send(
    replica: &Replica,
    lane: usize,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
    connect_timeout: Duration,
    max_idle: Duration,
) -> Result<(Response<Incoming>, Sender), SendError> {
    let mut req = Request::new(Full::new(body));
    *req.method_mut() = Method::POST;
    *req.uri_mut() = uri;
    *req.headers_mut() = headers;
    req.headers_mut()
        .insert(header::HOST, replica.host_header().clone());
    loop {
        let (mut tx, pooled) = match replica.conns().take(lane, max_idle) {
            Some(tx) => (tx, true),
            None => (connect(replica, connect_timeout).await?, false),
        };
        if tx.ready().await.is_err() {
            if pooled {
                continue;
            }
            return Err(SendError::Connect(format!(
                "connection to {} closed at once",
                replica.upstream().authority()
            )));
        }
        match tx.try_send_request(req).await {
            Ok(resp) => return Ok((resp, tx)),
            Err(mut e) => match e.take_message() {
                // Never written: safe to send again on a fresh connection.
                Some(back) if pooled => req = back,
                _ => return Err(SendError::Send(chain(e.error()))),
            },
        }
    }
}

/// The `Host` header for a replica.
pub(crate) fn host_value(authority: &str) -> HeaderValue {
    HeaderValue::from_str(authority).unwrap_or_else(|_| HeaderValue::from_static("localhost"))
}
