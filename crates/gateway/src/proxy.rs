//! The request path: route, authenticate, read and peek at the body, rate-limit,
//! pick a replica, forward, retry on another replica while nothing has been sent
//! to the client, then stream the answer back.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use bytes::Bytes;
use http::StatusCode;
use serde_json::Value;

use crate::body::{GwBody, Observer, ProxyBody};
use crate::config::GatewayConfig;
use crate::error::Error;
use crate::metrics::{Metrics, ReplicaLabels, RequestLabels};
use crate::registry::{Registry, Replica};
use crate::request::{Method, RequestHead, Route};
use crate::route::{Affinity, Router, hash_parts};
use crate::tenancy::{Tenancy, Tenant};
use crate::upstream::{Answer, SendError};

/// What one accept loop serves with: the gateway's shared state and which
/// thread's upstream connections it uses.
#[derive(Debug)]
pub(crate) struct Lane {
    pub(crate) sh: Arc<Shared>,
    /// Which pooled upstream connections are this thread's own.
    pub(crate) id: usize,
}

/// State shared by every request of one gateway.
#[derive(Debug)]
pub struct Shared {
    pub(crate) cfg: GatewayConfig,
    pub(crate) registry: Registry,
    pub(crate) tenancy: Tenancy,
    pub(crate) metrics: Metrics,
    pub(crate) router: Router,
    pub(crate) draining: AtomicBool,
    /// The session header's name, lower case (empty: none).
    pub(crate) session_header: Vec<u8>,
}

impl Shared {
    pub(crate) fn new(
        cfg: GatewayConfig,
        registry: Registry,
        tenancy: Tenancy,
    ) -> Result<Self, Error> {
        let session_header = cfg.session_header.to_ascii_lowercase().into_bytes();
        if !session_header
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(b))
        {
            return Err(Error::config(
                "sessionHeader",
                "not a header name: use letters, digits and '-', e.g. x-session-id",
            ));
        }
        let router = Router {
            policy: cfg.policy,
            load_bound: cfg.load_bound,
            signal_max_age: cfg.metrics_interval() * 3,
        };
        Ok(Self {
            cfg,
            registry,
            tenancy,
            metrics: Metrics::new(),
            router,
            draining: AtomicBool::new(false),
            session_header,
        })
    }

    /// Answers with a gateway error, counted in metrics and logged.
    pub(crate) fn reject(&self, err: Error, model: &str, team: &str, path: &str) -> Reply {
        let resp = Reply::error(&err);
        self.metrics
            .requests
            .get_or_create(&RequestLabels {
                model: model.to_owned(),
                replica: String::new(),
                team: team.to_owned(),
                code: resp.status.as_u16().to_string(),
            })
            .inc();
        tracing::info!(
            target: "ferry_gateway::access",
            path,
            model,
            team,
            status = resp.status.as_u16(),
            outcome = "rejected",
            error = %err,
            "request"
        );
        resp
    }
}

/// An answer to a client: status, the few headers the gateway sets itself, and
/// the body (a proxied body brings the replica's header lines).
#[derive(Debug)]
pub(crate) struct Reply {
    pub status: StatusCode,
    /// `Content-Type` of the gateway's own answers (proxied answers carry theirs).
    pub content_type: &'static str,
    /// `Retry-After` seconds (429).
    pub retry_after: Option<u64>,
    pub body: GwBody,
}

impl Reply {
    fn new(status: StatusCode, content_type: &'static str, body: GwBody) -> Reply {
        Reply {
            status,
            content_type,
            retry_after: None,
            body,
        }
    }

    /// The gateway's answer for `err`: its status, an OpenAI error body, and
    /// `Retry-After` on 429.
    pub(crate) fn error(err: &Error) -> Reply {
        let (status, ..) = err.classify();
        let mut r = Reply::new(status, "application/json", GwBody::Full(err.body()));
        if let Error::RateLimited { retry_after_s, .. } = err {
            r.retry_after = Some(*retry_after_s);
        }
        r
    }
}

/// A request as the connection read it: the head's bytes and what was parsed
/// from them, the forwarded header lines, and the whole body.
#[derive(Debug)]
pub(crate) struct Incoming<'a> {
    pub raw: &'a [u8],
    pub head: &'a RequestHead,
    /// Header lines for the replica (`name: value\r\n` each).
    pub forward: &'a [u8],
    pub body: Bytes,
}

impl Incoming<'_> {
    fn authorization(&self) -> Option<&[u8]> {
        self.head.authorization.clone().map(|r| &self.raw[r])
    }
}

/// Entry point of every request.
pub(crate) async fn handle(lane: &Lane, req: &Incoming<'_>) -> Reply {
    let arrival = Instant::now();
    let sh = &lane.sh;
    let route = req.head.route;
    match (req.head.method, route) {
        (Method::Post, Route::Chat | Route::Completions | Route::Embeddings) => {
            forward(lane, req, route.path(), arrival).await
        }
        (Method::Get | Method::Head, Route::Models) => models(sh, req),
        (Method::Get | Method::Head, Route::Health) => {
            if sh.draining.load(Ordering::Relaxed) {
                Reply::error(&Error::Draining)
            } else {
                Reply::new(
                    StatusCode::OK,
                    "text/plain",
                    GwBody::Full(Bytes::from_static(b"ok\n")),
                )
            }
        }
        (Method::Get | Method::Head, Route::Metrics) => {
            let text = sh.metrics.render(&sh.registry, sh.router.signal_max_age);
            Reply::new(
                StatusCode::OK,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
                GwBody::from(text),
            )
        }
        _ => {
            let err = Error::UnknownRoute {
                method: String::from_utf8_lossy(&req.raw[req.head.method_text.clone()])
                    .into_owned(),
                path: String::from_utf8_lossy(&req.raw[req.head.path.clone()])
                    .chars()
                    .take(200)
                    .collect(),
            };
            sh.reject(err, "", "", "unmatched")
        }
    }
}

fn models(sh: &Shared, req: &Incoming<'_>) -> Reply {
    if let Err(e) = sh.tenancy.authenticate(req.authorization()) {
        return sh.reject(e, "", "unknown", "/v1/models");
    }
    let table = sh.registry.snapshot();
    let names = table.served_models();
    let data: Vec<Value> = names
        .into_iter()
        .map(|name| {
            let announced = table.models[&name].replicas().iter().find_map(|r| {
                r.announced()
                    .into_iter()
                    .find(|m| m.get("id").and_then(Value::as_str) == Some(name.as_str()))
            });
            announced.unwrap_or_else(|| {
                serde_json::json!({"id": name, "object": "model", "created": 0, "owned_by": "ferry"})
            })
        })
        .collect();
    let body = serde_json::json!({"object": "list", "data": data});
    Reply::new(
        StatusCode::OK,
        "application/json",
        GwBody::Full(Bytes::from(serde_json::to_vec(&body).unwrap_or_default())),
    )
}

enum Attempt {
    Failed(Error),
    Answer(Answer),
}

async fn forward(lane: &Lane, req: &Incoming<'_>, path: &'static str, arrival: Instant) -> Reply {
    let sh = &lane.sh;
    if sh.draining.load(Ordering::Relaxed) {
        return sh.reject(Error::Draining, "", "", path);
    }
    let tenant = match sh.tenancy.authenticate(req.authorization()) {
        Ok(t) => t,
        Err(e) => return sh.reject(e, "", "unknown", path),
    };
    // The connection read the body, within `maxBodyBytes`.
    let bytes = &req.body;
    let peek = match crate::peek::peek(bytes, sh.cfg.prefix_chars) {
        Ok(p) => p,
        Err(e) => {
            return sh.reject(
                Error::MalformedJson { message: e.0 },
                "",
                &tenant.team,
                path,
            );
        }
    };
    let table = sh.registry.snapshot();
    let Some(pool) = table.pool(&peek.model) else {
        return sh.reject(
            Error::UnknownModel(peek.model.to_string()),
            &peek.model,
            &tenant.team,
            path,
        );
    };
    let prefix = &peek.prefix;
    let estimated_prompt = (peek.prompt_bytes as u64).div_ceil(4).max(1);
    let completion_budget = if path == "/v1/embeddings" {
        0
    } else {
        peek.max_tokens()
            .unwrap_or(if path == "/v1/completions" { 16 } else { 256 })
    };
    let estimated_tokens = estimated_prompt + completion_budget;
    if let Err(e) = tenant.admit(estimated_tokens) {
        return sh.reject(e, &peek.model, &tenant.team, path);
    }
    let affinity = match req.head.session.clone() {
        Some(s) => Affinity::Session(hash_parts(&[peek.model.as_bytes(), &req.raw[s]])),
        None if !prefix.is_empty() => {
            Affinity::Prefix(hash_parts(&[peek.model.as_bytes(), prefix.as_bytes()]))
        }
        None => Affinity::None,
    };
    // The forwarded header lines were written once, when the head was parsed.
    let extra = req.forward;

    let mut tried: Vec<Arc<Replica>> = Vec::new();
    let mut last: Option<Error> = None;
    let mut held_5xx: Option<(Answer, Arc<Replica>)> = None;
    let max = sh.cfg.max_attempts;
    let mut attempts = 0;
    while attempts < max {
        let Some(replica) = sh.router.choose(pool, affinity, &tried) else {
            break;
        };
        attempts += 1;
        if let Some(prev) = tried.last() {
            sh.metrics
                .retries
                .get_or_create(&ReplicaLabels {
                    replica: prev.id().to_owned(),
                })
                .inc();
        }
        let guard = replica.start();
        match attempt(lane, &replica, path, extra, bytes, &peek.model).await {
            Attempt::Answer(resp) if resp.status.is_server_error() && attempts < max => {
                sh.metrics.failure(replica.id(), "status_5xx");
                replica.record_failure("status_5xx");
                drop(guard);
                tried.push(replica.clone());
                held_5xx = Some((resp, replica));
            }
            Attempt::Answer(resp) => {
                if resp.status.is_server_error() {
                    sh.metrics.failure(replica.id(), "status_5xx");
                    replica.record_failure("status_5xx");
                }
                return respond(
                    sh,
                    resp,
                    Some(lane.id),
                    replica,
                    guard,
                    tenant,
                    peek.model.into_owned(),
                    path,
                    attempts,
                    arrival,
                    estimated_tokens,
                    estimated_prompt,
                );
            }
            Attempt::Failed(e) => {
                drop(guard);
                tried.push(replica);
                last = Some(e);
            }
        }
    }
    if let Some((resp, replica)) = held_5xx {
        // Nowhere else to go: pass the replica's own error through.
        let guard = replica.start();
        return respond(
            sh,
            resp,
            None,
            replica,
            guard,
            tenant,
            peek.model.into_owned(),
            path,
            attempts,
            arrival,
            estimated_tokens,
            estimated_prompt,
        );
    }
    tenant.settle(estimated_tokens, 0);
    let err = match last {
        Some(e) => e,
        None => Error::NoReplica(peek.model.to_string()),
    };
    sh.reject(err, &peek.model, &tenant.team, path)
}

async fn attempt(
    lane: &Lane,
    replica: &Replica,
    path: &str,
    extra: &[u8],
    body: &Bytes,
    model: &str,
) -> Attempt {
    let sh = &lane.sh;
    let timeout = sh.cfg.first_byte_timeout();
    let uri = replica.path_uri(path);
    let sent = crate::upstream::send(
        replica,
        lane.id,
        uri.path(),
        extra,
        body,
        sh.cfg.connect_timeout(),
        sh.cfg.pool_idle_timeout(),
    );
    match tokio::time::timeout(timeout, sent).await {
        Ok(Ok(resp)) => Attempt::Answer(resp),
        Ok(Err(e)) => {
            let (kind, msg) = match e {
                SendError::Connect(m) => ("connect", m),
                SendError::Send(m) => ("send", m),
            };
            sh.metrics.failure(replica.id(), kind);
            replica.record_failure(kind);
            Attempt::Failed(Error::Upstream {
                model: model.to_owned(),
                attempts: 1,
                last: format!("replica {}: {msg}", replica.id()),
            })
        }
        Err(_) => {
            sh.metrics.failure(replica.id(), "first_byte_timeout");
            replica.record_failure("first_byte_timeout");
            Attempt::Failed(Error::FirstByteTimeout {
                model: model.to_owned(),
                timeout,
            })
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn respond(
    sh: &Arc<Shared>,
    resp: Answer,
    lane: Option<usize>,
    replica: Arc<Replica>,
    guard: crate::registry::InFlightGuard,
    tenant: Arc<Tenant>,
    model: String,
    path: &'static str,
    attempts: u32,
    arrival: Instant,
    estimated_tokens: u64,
    estimated_prompt: u64,
) -> Reply {
    // Hop-by-hop headers were left out when the head was parsed; the connection
    // writes `x-ferry-replica`.
    let Answer { status, sse, body } = resp;
    let obs = Observer {
        sh: sh.clone(),
        replica,
        guard: Some(guard),
        tenant,
        model,
        path,
        status: status.as_u16(),
        attempts,
        arrival,
        estimated_tokens,
        estimated_prompt,
        sse,
        first_text: None,
        last_text: None,
        gaps: Vec::new(),
        events: 0,
        keep: Vec::new(),
        first_piece: None,
        overflow: false,
        usage: None,
        outcome: None,
    };
    let body = ProxyBody::new(body, lane, sh.cfg.idle_timeout(), obs);
    Reply {
        status,
        content_type: "",
        retry_after: None,
        body: GwBody::Proxy(Box::new(body)),
    }
}
