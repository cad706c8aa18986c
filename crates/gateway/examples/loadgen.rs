//! A closed-loop HTTP/1.1 load generator for the gateway benchmark.
//!
//! `loadgen --url http://127.0.0.1:8080/v1/chat/completions --concurrency 32 --seconds 10`
//!
//! Each of `--concurrency` workers holds one keep-alive connection and sends the
//! body (`--body`, a chat request to model `--model` by default) back to back,
//! reading every response to its end. After `--warmup` seconds it records the
//! latency of each request for `--seconds`. Prints one JSON line:
//! `{"rps":…, "p50_ms":…, "p99_ms":…, "max_ms":…, "ok":…, "errors":…}`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use clap::Parser;
use http_body_util::{BodyExt, Full};
use hyper::Request;
use hyper_util::rt::TokioIo;

#[derive(Parser, Clone)]
struct Args {
    /// Endpoint to POST to.
    #[arg(long)]
    url: String,
    /// Model name for the default body.
    #[arg(long, default_value = "mock")]
    model: String,
    /// Request body (JSON); a small chat request by default.
    #[arg(long)]
    body: Option<String>,
    /// Ask for a streamed (SSE) answer in the default body.
    #[arg(long)]
    stream: bool,
    /// `max_tokens` in the default body.
    #[arg(long, default_value_t = 16)]
    max_tokens: u32,
    /// Workers (connections), each with one request in flight.
    #[arg(long, default_value_t = 16)]
    concurrency: usize,
    /// Measured seconds.
    #[arg(long, default_value_t = 10.0)]
    seconds: f64,
    /// Unmeasured seconds first.
    #[arg(long, default_value_t = 2.0)]
    warmup: f64,
    /// Runtime threads.
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// API key sent as `Authorization: Bearer KEY`.
    #[arg(long, default_value = "bench")]
    key: String,
    /// Stop after this many requests in all (no warm-up; `--seconds` still caps
    /// the run): a fixed amount of work, for instruction counts under callgrind.
    #[arg(long)]
    requests: Option<u64>,
}

struct Tally {
    lat_us: Vec<u32>,
    errors: u64,
}

async fn worker(
    uri: hyper::Uri,
    auth: http::HeaderValue,
    body: Bytes,
    start: Instant,
    warm: Duration,
    end: Duration,
    budget: Arc<AtomicU64>,
) -> Tally {
    let mut t = Tally {
        lat_us: Vec::new(),
        errors: 0,
    };
    let host = uri.authority().map(|a| a.to_string()).unwrap_or_default();
    // Origin-form request target (`/v1/...`), as browsers and SDKs send it; some
    // servers (uvicorn) do not route absolute-form targets.
    let target: hyper::Uri = uri
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .parse()
        .expect("path");
    'reconnect: while start.elapsed() < end {
        let stream = match tokio::net::TcpStream::connect(&host).await {
            Ok(s) => s,
            Err(_) => {
                t.errors += 1;
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let Ok((mut send, conn)) =
            hyper::client::conn::http1::handshake(TokioIo::new(stream)).await
        else {
            t.errors += 1;
            continue;
        };
        tokio::spawn(conn);
        while start.elapsed() < end {
            // Claim one request of the budget (u64::MAX when unbounded).
            if budget
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
                .is_err()
            {
                break 'reconnect;
            }
            let req = Request::post(target.clone())
                .header("host", &host)
                .header("content-type", "application/json")
                .header("authorization", auth.clone())
                .body(Full::new(body.clone()))
                .expect("request");
            let t0 = Instant::now();
            let ok = match send.send_request(req).await {
                Ok(resp) => {
                    let status = resp.status();
                    resp.into_body().collect().await.is_ok() && status.is_success()
                }
                Err(_) => false,
            };
            let dt = t0.elapsed();
            if start.elapsed() >= warm && start.elapsed() < end {
                if ok {
                    t.lat_us.push(dt.as_micros().min(u32::MAX as u128) as u32);
                } else {
                    t.errors += 1;
                }
            }
            if !ok || send.ready().await.is_err() {
                continue 'reconnect;
            }
        }
    }
    t
}

fn main() {
    let args = Args::parse();
    let body = args.body.clone().unwrap_or_else(|| {
        format!(
            r#"{{"model":"{}","messages":[{{"role":"user","content":"Tell me about ferries and rivers."}}],"max_tokens":{},"seed":1,"stream":{}}}"#,
            args.model, args.max_tokens, args.stream
        )
    });
    let uri: hyper::Uri = args
        .url
        .parse()
        .expect("--url must be http://host:port/path");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(args.threads.max(1))
        .enable_all()
        .build()
        .expect("runtime");
    let auth = http::HeaderValue::from_str(&format!("Bearer {}", args.key))
        .expect("--key must be printable ASCII");
    let warm = if args.requests.is_some() {
        Duration::ZERO
    } else {
        Duration::from_secs_f64(args.warmup)
    };
    let budget = Arc::new(AtomicU64::new(args.requests.unwrap_or(u64::MAX)));
    let end = warm + Duration::from_secs_f64(args.seconds);
    let t0 = Instant::now();
    let tallies = rt.block_on(async {
        let start = Instant::now();
        let body = Bytes::from(body);
        let handles: Vec<_> = (0..args.concurrency)
            .map(|_| {
                tokio::spawn(worker(
                    uri.clone(),
                    auth.clone(),
                    body.clone(),
                    start,
                    warm,
                    end,
                    budget.clone(),
                ))
            })
            .collect();
        let mut out = Vec::new();
        for h in handles {
            if let Ok(t) = h.await {
                out.push(t);
            }
        }
        out
    });
    let elapsed = (t0.elapsed().as_secs_f64() - warm.as_secs_f64()).max(1e-9);
    let mut lat: Vec<u32> = tallies
        .iter()
        .flat_map(|t| t.lat_us.iter().copied())
        .collect();
    let errors: u64 = tallies.iter().map(|t| t.errors).sum();
    lat.sort_unstable();
    let pct = |p: f64| -> f64 {
        if lat.is_empty() {
            return f64::NAN;
        }
        let i = ((lat.len() as f64 - 1.0) * p).round() as usize;
        f64::from(lat[i]) / 1000.0
    };
    println!(
        r#"{{"rps":{:.1},"p50_ms":{:.3},"p99_ms":{:.3},"max_ms":{:.3},"ok":{},"errors":{}}}"#,
        lat.len() as f64 / elapsed.min(args.seconds),
        pct(0.50),
        pct(0.99),
        lat.last().map_or(f64::NAN, |v| f64::from(*v) / 1000.0),
        lat.len(),
        errors
    );
}
