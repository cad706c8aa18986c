//! The `ferry gateway` and `ferry mock-engine` commands (flags and run loops), kept
//! here so the CLI, the benchmark and tests start the very same thing.

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use ferry_openai::{Failure, MockBackend, MockConfig, ServerConfig};

use crate::config::{GatewayConfig, Policy};
use crate::error::{Error, Result};
use crate::registry::Registry;
use crate::server::Gateway;

/// Flags of `ferry gateway`.
#[derive(Debug, Clone, clap::Args)]
pub struct GatewayArgs {
    /// Address to listen on (port 0 picks a free one; the chosen address is printed).
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,
    /// A replica, `MODEL=URL` (repeatable), e.g. `qwen=http://127.0.0.1:8000`.
    #[arg(long = "backend", value_name = "MODEL=URL")]
    pub backends: Vec<String>,
    /// YAML config file (policy, timeouts, keys, backends); flags override it.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Routing policy.
    #[arg(long, value_enum)]
    pub policy: Option<Policy>,
    /// Largest request body in bytes.
    #[arg(long)]
    pub max_body_bytes: Option<usize>,
    /// Print the SHA-256 to put in `keys[].sha256` for this key, and exit.
    #[arg(long, value_name = "KEY")]
    pub hash_key: Option<String>,
    /// Worker threads, each with its own event loop and upstream pool (like
    /// nginx's worker processes); default: the CPUs this process may run on.
    /// 0 serves on the command's own runtime instead.
    #[arg(long)]
    pub workers: Option<usize>,
    /// Also discover replicas from Kubernetes EndpointSlices labelled
    /// `ferry.dev/served-model` (kubeconfig or in-cluster config; `ferry gateway` only).
    #[arg(long)]
    pub kubernetes: bool,
    /// With --kubernetes: watch this namespace only (default: every namespace).
    #[arg(long, value_name = "NS", requires = "kubernetes")]
    pub namespace: Option<String>,
}

/// Flags of `ferry mock-engine`: an OpenAI-compatible engine simulator.
#[derive(Debug, Clone, clap::Args)]
pub struct MockEngineArgs {
    /// Address to listen on (port 0 picks a free one; the chosen address is printed).
    #[arg(long, default_value = "127.0.0.1:8000")]
    pub listen: SocketAddr,
    /// Model name served (repeatable; adapters are just more names).
    #[arg(long = "model", default_value = "mock")]
    pub models: Vec<String>,
    /// Tokens per answer when `max_tokens` does not cut it short.
    #[arg(long, default_value_t = 16)]
    pub tokens: u32,
    /// Time to first token, ms.
    #[arg(long, default_value_t = 0)]
    pub ttft_ms: u64,
    /// Delay between tokens, ms (overridden by --tokens-per-sec).
    #[arg(long, default_value_t = 0)]
    pub itl_ms: u64,
    /// Token rate per stream; sets the inter-token delay to 1/rate.
    #[arg(long)]
    pub tokens_per_sec: Option<f64>,
    /// Context window in tokens (one word = one token).
    #[arg(long, default_value_t = 2048)]
    pub max_context: u32,
    /// Generations at once; later ones queue (vllm:num_requests_waiting).
    #[arg(long, default_value_t = 256)]
    pub max_running: u32,
    /// Largest request body in bytes.
    #[arg(long, default_value_t = 4 * 1024 * 1024)]
    pub max_body_bytes: usize,
    /// Fail this fraction of requests with HTTP 500.
    #[arg(long)]
    pub error_rate: Option<f64>,
    /// Accept requests and never produce a token.
    #[arg(long)]
    pub hang: bool,
    /// Fail each generation after this many tokens.
    #[arg(long)]
    pub fail_after: Option<u32>,
}

/// Resolves when the process gets Ctrl-C or SIGTERM.
pub async fn shutdown_signal() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        () = term => {}
    }
}

impl GatewayArgs {
    /// The effective config: file, then flags on top.
    pub fn config(&self) -> Result<GatewayConfig> {
        let mut cfg = match &self.config {
            Some(p) => GatewayConfig::from_file(p)?,
            None => GatewayConfig::default(),
        };
        for b in &self.backends {
            cfg.backends.push(GatewayConfig::parse_backend_flag(b)?);
        }
        if let Some(p) = self.policy {
            cfg.policy = p;
        }
        if let Some(n) = self.max_body_bytes {
            cfg.max_body_bytes = n;
        }
        cfg.validate()?;
        Ok(cfg)
    }
}

/// Runs `ferry gateway` until Ctrl-C or SIGTERM.
pub async fn run_gateway(args: GatewayArgs) -> Result<()> {
    if args.kubernetes && args.hash_key.is_none() {
        return Err(Error::config(
            "--kubernetes",
            "this binary has no Kubernetes client; run `ferry gateway --kubernetes`",
        ));
    }
    run_gateway_with(args, |_| async {}).await
}

/// Runs `ferry gateway` like [`run_gateway`], with `feed(registry)` running beside the
/// server (e.g. EndpointSlice discovery calling [`Registry::set_replicas`]); the feed is
/// stopped when the gateway has drained. `--hash-key` returns before anything starts.
pub async fn run_gateway_with<F, Fut>(args: GatewayArgs, feed: F) -> Result<()>
where
    F: FnOnce(Registry) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    if let Some(key) = &args.hash_key {
        println!("{}", crate::config::hash_key(key));
        return Ok(());
    }
    let cfg = args.config()?;
    if cfg.backends.is_empty() && !args.kubernetes {
        tracing::warn!(
            "no --backend and no backends in the config: every model is unknown until replicas are registered"
        );
    }
    let (gw, registry) = Gateway::new(cfg)?;
    let feed = AbortOnDrop(tokio::spawn(feed(registry)));
    let served = serve(&args, gw).await;
    drop(feed);
    served
}

/// Stops a spawned task when the command returns, however it returns.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

async fn serve(args: &GatewayArgs, gw: Gateway) -> Result<()> {
    let workers = args.workers.unwrap_or_else(|| {
        std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
    });
    let served = if workers == 0 {
        let listener = bind(args.listen).await?;
        gw.serve(listener, shutdown_signal()).await
    } else {
        let listeners = crate::server::bind_workers(args.listen, workers).map_err(|e| {
            Error::config("--listen", format!("cannot listen on {}: {e}", args.listen))
        })?;
        if let Some(local) = listeners.first().and_then(|l| l.local_addr().ok()) {
            println!("listening on http://{local}");
            tracing::info!(workers, "gateway serving");
            let _ = std::io::stdout().flush();
        }
        gw.serve_workers(listeners, shutdown_signal()).await
    };
    let drained = served.map_err(|e| Error::config("--listen", e.to_string()))?;
    if !drained {
        tracing::warn!("some requests were still in flight at the drain deadline");
    }
    Ok(())
}

async fn bind(addr: SocketAddr) -> Result<tokio::net::TcpListener> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| Error::config("--listen", format!("cannot listen on {addr}: {e}")))?;
    let local = listener
        .local_addr()
        .map_err(|e| Error::config("--listen", e.to_string()))?;
    println!("listening on http://{local}");
    let _ = std::io::stdout().flush();
    Ok(listener)
}

impl MockEngineArgs {
    /// The mock's settings.
    pub fn mock_config(&self) -> Result<MockConfig> {
        let inter_token_delay = match self.tokens_per_sec {
            Some(r) if r > 0.0 && r.is_finite() => Duration::from_secs_f64(1.0 / r),
            Some(_) => {
                return Err(Error::config(
                    "--tokens-per-sec",
                    "must be a positive number",
                ));
            }
            None => Duration::from_millis(self.itl_ms),
        };
        let failure = match (self.error_rate, self.hang, self.fail_after) {
            (None, false, None) => Failure::None,
            (Some(rate), false, None) if (0.0..=1.0).contains(&rate) => Failure::ErrorRate { rate },
            (Some(_), false, None) => {
                return Err(Error::config("--error-rate", "must be within 0..=1"));
            }
            (None, true, None) => Failure::Hang,
            (None, false, Some(tokens)) => Failure::FailAfter { tokens },
            _ => {
                return Err(Error::config(
                    "--error-rate/--hang/--fail-after",
                    "pick at most one",
                ));
            }
        };
        Ok(MockConfig {
            models: self.models.clone(),
            tokens_per_response: self.tokens,
            time_to_first_token: Duration::from_millis(self.ttft_ms),
            inter_token_delay,
            max_context: self.max_context,
            max_running: self.max_running,
            failure,
        })
    }
}

/// Runs `ferry mock-engine` until Ctrl-C or SIGTERM. Besides the OpenAI routes it
/// serves `/v1/embeddings`, `GET /mock/stats` and `POST /mock/failure`.
pub async fn run_mock_engine(args: MockEngineArgs) -> Result<()> {
    let mock = MockBackend::new(args.mock_config()?);
    let server = ServerConfig {
        max_body_bytes: args.max_body_bytes,
        ..ServerConfig::default()
    };
    let app = ferry_openai::router(Arc::new(mock.clone()), server)
        .merge(ferry_openai::control_router(mock.clone()))
        .merge(ferry_openai::mock::embeddings_router(mock));
    let listener = bind(args.listen).await?;
    ferry_openai::serve_router(listener, app, shutdown_signal(), Duration::from_secs(5))
        .await
        .map_err(|e| Error::config("--listen", e.to_string()))?;
    Ok(())
}
