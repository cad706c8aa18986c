//! The request path: route, authenticate, read and peek at the body, rate-limit,
//! pick a replica, forward, retry on another replica while nothing has been sent
//! to the client, then stream the answer back.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use bytes::{Bytes, BytesMut};
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use serde_json::Value;

use crate::body::{GwBody, Observer, ProxyBody};
use crate::config::GatewayConfig;
use crate::error::Error;
use crate::metrics::{Metrics, ReplicaLabels, RequestLabels};
use crate::registry::{Registry, Replica};
use crate::route::{Affinity, Router, hash_parts};
use crate::tenancy::{Tenancy, Tenant};
use crate::upstream::{SendError, UpstreamBody};

/// The HTTP client to replicas (pooled keep-alive connections).
pub(crate) type UpstreamClient = Client<HttpConnector, Full<Bytes>>;

/// Builds a pooled keep-alive client to replicas (health checks and polling;
/// requests go through [`crate::upstream`]).
pub(crate) fn upstream_client(cfg: &GatewayConfig) -> UpstreamClient {
    let mut connector = HttpConnector::new();
    connector.set_connect_timeout(Some(cfg.connect_timeout()));
    connector.set_nodelay(true);
    connector.enforce_http(true);
    Client::builder(hyper_util::rt::TokioExecutor::new())
        .pool_idle_timeout(cfg.pool_idle_timeout())
        .pool_timer(hyper_util::rt::TokioTimer::new())
        .build(connector)
}

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
    pub(crate) client: UpstreamClient,
    pub(crate) router: Router,
    pub(crate) draining: AtomicBool,
    session_header: HeaderName,
}

impl Shared {
    pub(crate) fn new(
        cfg: GatewayConfig,
        registry: Registry,
        tenancy: Tenancy,
    ) -> Result<Self, Error> {
        let client = upstream_client(&cfg);
        let session_header =
            HeaderName::from_bytes(cfg.session_header.to_ascii_lowercase().as_bytes())
                .map_err(|e| Error::config("sessionHeader", format!("not a header name: {e}")))?;
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
            client,
            router,
            draining: AtomicBool::new(false),
            session_header,
        })
    }

    /// Answers with a gateway error, counted in metrics and logged.
    fn reject(&self, err: Error, model: &str, team: &str, path: &str) -> Response<GwBody> {
        let resp: Response<GwBody> = err.response();
        self.metrics
            .requests
            .get_or_create(&RequestLabels {
                model: model.to_owned(),
                replica: String::new(),
                team: team.to_owned(),
                code: resp.status().as_u16().to_string(),
            })
            .inc();
        tracing::info!(
            target: "ferry_gateway::access",
            path,
            model,
            team,
            status = resp.status().as_u16(),
            outcome = "rejected",
            error = %err,
            "request"
        );
        resp
    }
}

/// Names the replica that answered, on every proxied answer.
const X_FERRY_REPLICA: HeaderName = HeaderName::from_static("x-ferry-replica");

/// Headers copied from the client to the replica (besides the session header).
const FORWARDED: [HeaderName; 5] = [
    header::ACCEPT,
    header::USER_AGENT,
    header::ACCEPT_ENCODING,
    HeaderName::from_static("x-request-id"),
    HeaderName::from_static("traceparent"),
];

fn json(status: StatusCode, body: impl Into<Bytes>) -> Response<GwBody> {
    let mut r = Response::new(GwBody::from(body.into()));
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

/// Entry point of every request.
pub(crate) async fn handle(
    lane: Arc<Lane>,
    req: Request<Incoming>,
) -> Result<Response<GwBody>, Infallible> {
    let arrival = Instant::now();
    let sh = &lane.sh;
    let path: &'static str = match req.uri().path() {
        "/v1/chat/completions" => "/v1/chat/completions",
        "/v1/completions" => "/v1/completions",
        "/v1/embeddings" => "/v1/embeddings",
        "/v1/models" => "/v1/models",
        "/health" => "/health",
        "/metrics" => "/metrics",
        _ => "",
    };
    let resp = match (req.method(), path) {
        (&Method::POST, "/v1/chat/completions" | "/v1/completions" | "/v1/embeddings") => {
            forward(&lane, req, path, arrival).await
        }
        (&Method::GET, "/v1/models") => models(sh, &req),
        (&Method::GET, "/health") => {
            if sh.draining.load(Ordering::Relaxed) {
                json(StatusCode::SERVICE_UNAVAILABLE, Error::Draining.body())
            } else {
                let mut r = Response::new(GwBody::from(Bytes::from_static(b"ok\n")));
                r.headers_mut()
                    .insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
                r
            }
        }
        (&Method::GET, "/metrics") => {
            let text = sh.metrics.render(&sh.registry, sh.router.signal_max_age);
            let mut r = Response::new(GwBody::from(text));
            r.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static(
                    "application/openmetrics-text; version=1.0.0; charset=utf-8",
                ),
            );
            r
        }
        _ => {
            let err = Error::UnknownRoute {
                method: req.method().to_string(),
                path: req.uri().path().chars().take(200).collect(),
            };
            sh.reject(err, "", "", "unmatched")
        }
    };
    Ok(resp)
}

fn models(sh: &Shared, req: &Request<Incoming>) -> Response<GwBody> {
    let auth = req
        .headers()
        .get(header::AUTHORIZATION)
        .map(HeaderValue::as_bytes);
    if let Err(e) = sh.tenancy.authenticate(auth) {
        return sh.reject(e, "", "unknown", "/v1/models");
    }
    let table = sh.registry.snapshot();
    let mut names: Vec<&String> = table.models.keys().collect();
    names.sort();
    let data: Vec<Value> = names
        .into_iter()
        .map(|name| {
            let announced = table.models[name].replicas().iter().find_map(|r| {
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
    json(
        StatusCode::OK,
        serde_json::to_vec(&body).unwrap_or_default(),
    )
}

fn content_length(h: &HeaderMap) -> Option<u64> {
    h.get(header::CONTENT_LENGTH)?.to_str().ok()?.parse().ok()
}

/// Reads a request body of at most `limit` bytes. A body that arrives as one
/// frame (the usual case) is passed on as it came, without copying.
async fn read_body(mut body: Incoming, limit: usize) -> Result<Bytes, Error> {
    let mut first: Option<Bytes> = None;
    let mut more: Option<BytesMut> = None;
    let mut total = 0usize;
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| Error::BodyRead {
            message: e.to_string(),
        })?;
        let Ok(data) = frame.into_data() else {
            continue;
        };
        total += data.len();
        if total > limit {
            return Err(Error::BodyTooLarge { limit });
        }
        match (&first, &mut more) {
            (None, _) => first = Some(data),
            (Some(f), None) => {
                let mut m = BytesMut::with_capacity(total.max(f.len() * 2));
                m.extend_from_slice(f);
                m.extend_from_slice(&data);
                more = Some(m);
            }
            (Some(_), Some(m)) => m.extend_from_slice(&data),
        }
    }
    Ok(match (first, more) {
        (_, Some(m)) => m.freeze(),
        (Some(f), None) => f,
        (None, None) => Bytes::new(),
    })
}

enum Attempt {
    Failed(Error),
    Answer(Response<UpstreamBody>),
}

async fn forward(
    lane: &Lane,
    req: Request<Incoming>,
    path: &'static str,
    arrival: Instant,
) -> Response<GwBody> {
    let sh = &lane.sh;
    let (parts, body) = req.into_parts();
    if sh.draining.load(Ordering::Relaxed) {
        return sh.reject(Error::Draining, "", "", path);
    }
    let auth = parts
        .headers
        .get(header::AUTHORIZATION)
        .map(HeaderValue::as_bytes);
    let tenant = match sh.tenancy.authenticate(auth) {
        Ok(t) => t,
        Err(e) => return sh.reject(e, "", "unknown", path),
    };
    let limit = sh.cfg.max_body_bytes;
    if content_length(&parts.headers).is_some_and(|n| n > limit as u64) {
        return sh.reject(Error::BodyTooLarge { limit }, "", &tenant.team, path);
    }
    let bytes = match read_body(body, limit).await {
        Ok(b) => b,
        Err(e) => return sh.reject(e, "", &tenant.team, path),
    };
    let peek = match crate::peek::peek(&bytes, sh.cfg.prefix_chars) {
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
    let affinity = match parts.headers.get(&sh.session_header) {
        Some(s) => Affinity::Session(hash_parts(&[peek.model.as_bytes(), s.as_bytes()])),
        None if !prefix.is_empty() => {
            Affinity::Prefix(hash_parts(&[peek.model.as_bytes(), prefix.as_bytes()]))
        }
        None => Affinity::None,
    };
    // The forwarded header lines, written once for every attempt. One pass over
    // the client's headers (a handful) instead of a lookup per name. Header values
    // cannot hold CR or LF, so a line cannot smuggle another header.
    let mut extra = Vec::with_capacity(128);
    for (name, v) in &parts.headers {
        if FORWARDED.contains(name) || *name == sh.session_header {
            extra.extend_from_slice(name.as_str().as_bytes());
            extra.extend_from_slice(b": ");
            extra.extend_from_slice(v.as_bytes());
            extra.extend_from_slice(b"\r\n");
        }
    }

    let mut tried: Vec<Arc<Replica>> = Vec::new();
    let mut last: Option<Error> = None;
    let mut held_5xx: Option<(Response<UpstreamBody>, Arc<Replica>)> = None;
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
        match attempt(lane, &replica, path, &extra, &bytes, &peek.model).await {
            Attempt::Answer(resp) if resp.status().is_server_error() && attempts < max => {
                sh.metrics.failure(replica.id(), "status_5xx");
                replica.record_failure("status_5xx");
                drop(guard);
                tried.push(replica.clone());
                held_5xx = Some((resp, replica));
            }
            Attempt::Answer(resp) => {
                if resp.status().is_server_error() {
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
    resp: Response<UpstreamBody>,
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
) -> Response<GwBody> {
    // Hop-by-hop headers were left out when the head was parsed.
    let (mut parts, incoming) = resp.into_parts();
    if let Some(v) = replica.id_header() {
        parts.headers.insert(X_FERRY_REPLICA, v.clone());
    }
    let sse = parts
        .headers
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"text/event-stream"));
    let obs = Observer {
        sh: sh.clone(),
        replica,
        _guard: guard,
        tenant,
        model,
        path,
        status: parts.status.as_u16(),
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
    let body = ProxyBody::new(incoming, lane, sh.cfg.idle_timeout(), obs);
    Response::from_parts(parts, GwBody::Proxy(Box::new(body)))
}
