//! `ferry gateway` (the OpenAI-compatible router, standalone) and `ferry mock-engine`
//! (an engine simulator for tests and benchmarks); both live in `ferry-gateway`.

pub use ferry_gateway::cmd::{GatewayArgs, MockEngineArgs};

fn init_logs() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("FERRY_LOG")
                .unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .try_init();
}

/// Runs the gateway until Ctrl-C or SIGTERM, then drains.
pub async fn gateway(args: GatewayArgs) -> anyhow::Result<()> {
    init_logs();
    ferry_gateway::cmd::run_gateway(args).await?;
    Ok(())
}

/// Runs the mock engine until Ctrl-C or SIGTERM.
pub async fn mock_engine(args: MockEngineArgs) -> anyhow::Result<()> {
    init_logs();
    ferry_gateway::cmd::run_mock_engine(args).await?;
    Ok(())
}
