//! `ferry gateway` without the rest of the CLI, for the benchmark:
//! `cargo run --release -p ferry-gateway --example gateway -- --listen 127.0.0.1:8080 --backend m=http://127.0.0.1:8000`.
//! Access logs go to stderr when `FERRY_LOG` is set (e.g. `FERRY_LOG=info`).

use clap::Parser;

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    args: ferry_gateway::cmd::GatewayArgs,
    /// Worker threads (default: one per core).
    #[arg(long)]
    threads: Option<usize>,
}

fn main() -> Result<(), String> {
    let cli = Cli::parse();
    if let Ok(filter) = std::env::var("FERRY_LOG") {
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
            .with_writer(std::io::stderr)
            .init();
    }
    let mut rt = tokio::runtime::Builder::new_multi_thread();
    rt.enable_all();
    if let Some(n) = cli.threads {
        rt.worker_threads(n);
    }
    let rt = rt.build().map_err(|e| e.to_string())?;
    rt.block_on(ferry_gateway::cmd::run_gateway(cli.args))
        .map_err(|e| e.to_string())
}
