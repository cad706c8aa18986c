//! The built-in engine from the command line: `ferry serve` (a model behind the OpenAI
//! API) and the hidden `ferry engine train` that the control plane runs as a rank.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use ferry_engine::{BuiltinBackend, ServeOptions};

/// `ferry serve`.
#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// Hugging Face model directory (config.json, model.safetensors, tokenizer.json).
    #[arg(long)]
    pub model: PathBuf,
    /// Name clients put in the `model` field; the directory's name when omitted.
    #[arg(long = "served-model-name", alias = "name")]
    pub name: Option<String>,
    /// A PEFT LoRA adapter served as its own model: `NAME=DIR` (repeatable).
    #[arg(long = "adapter", value_name = "NAME=DIR")]
    pub adapters: Vec<String>,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:8000")]
    pub listen: SocketAddr,
    /// Sequences generated at once; more wait in a queue.
    #[arg(long, default_value_t = 16)]
    pub max_running: usize,
    /// Requests allowed to wait for a slot before the server answers 429.
    #[arg(long, default_value_t = 256)]
    pub max_waiting: usize,
    /// Largest accepted request body, in bytes.
    #[arg(long, default_value_t = 4 * 1024 * 1024)]
    pub max_body_bytes: usize,
    /// Seconds in-flight requests get to finish after SIGTERM.
    #[arg(long, default_value_t = 10.0)]
    pub drain_seconds: f64,
}

/// `ferry engine …`: entry points of the built-in engine's processes.
#[derive(Debug, clap::Subcommand)]
pub enum EngineCommand {
    /// Train from a JSON `TrainConfig`, resuming from `FERRY_RESUME_FROM`; metrics on stdout.
    Train {
        /// The training config written by the control plane.
        config: PathBuf,
    },
}

/// Runs an engine entry point; the exit code is the rank's.
pub fn run(cmd: EngineCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        EngineCommand::Train { config } => {
            let summary = ferry_engine::train_rank(&config)?;
            // The summary goes to stderr so stdout stays one metrics object per line.
            eprintln!("{}", serde_json::to_string(&summary)?);
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn parse_adapter(spec: &str) -> anyhow::Result<(String, PathBuf)> {
    match spec.split_once('=') {
        Some((name, dir)) if !name.is_empty() && !dir.is_empty() => {
            Ok((name.to_owned(), PathBuf::from(dir)))
        }
        _ => bail!("--adapter {spec:?}: expected NAME=DIR, e.g. --adapter support-bot=./lora"),
    }
}

/// `ferry serve`: loads the model, then serves until SIGTERM or Ctrl-C.
pub async fn serve(args: ServeArgs) -> anyhow::Result<()> {
    crate::commands::init_logging();
    let name = match args.name {
        Some(n) => n,
        None => args
            .model
            .canonicalize()
            .ok()
            .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
            .unwrap_or_else(|| "model".to_owned()),
    };
    let adapters = args
        .adapters
        .iter()
        .map(|a| parse_adapter(a))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let opts = ServeOptions {
        max_running: args.max_running.max(1),
        max_waiting: args.max_waiting,
    };
    let model = args.model.clone();
    let loaded_name = name.clone();
    let backend = tokio::task::spawn_blocking(move || {
        BuiltinBackend::load(&loaded_name, &model, &adapters, opts)
    })
    .await??;
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    let cfg = ferry_openai::ServerConfig {
        max_body_bytes: args.max_body_bytes,
        max_concurrent_requests: opts.max_running + opts.max_waiting,
        ..Default::default()
    };
    println!(
        "serving {name} from {} on http://{}/v1",
        args.model.display(),
        listener.local_addr()?
    );
    ferry_openai::serve(
        listener,
        Arc::new(backend),
        cfg,
        crate::commands::shutdown_signal(),
        Duration::from_secs_f64(args.drain_seconds.max(0.0)),
    )
    .await?;
    Ok(())
}
