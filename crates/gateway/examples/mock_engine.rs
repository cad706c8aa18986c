//! `ferry mock-engine` without the rest of the CLI, for this crate's tests and the
//! benchmark: `cargo run --release -p ferry-gateway --example mock_engine -- --help`.

use clap::Parser;

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    args: ferry_gateway::cmd::MockEngineArgs,
}

#[tokio::main]
async fn main() -> Result<(), String> {
    let cli = Cli::parse();
    ferry_gateway::cmd::run_mock_engine(cli.args)
        .await
        .map_err(|e| e.to_string())
}
