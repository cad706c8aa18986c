//! `ferry gateway` (the OpenAI-compatible router, standalone) and `ferry mock-engine`
//! (an engine simulator for tests and benchmarks); both live in `ferry-gateway`.

use anyhow::Context;

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

/// Runs the gateway until Ctrl-C or SIGTERM, then drains. With `--kubernetes`, a
/// watcher on EndpointSlices keeps each model's replica set in the registry.
pub async fn gateway(args: GatewayArgs) -> anyhow::Result<()> {
    init_logs();
    if !args.kubernetes || args.hash_key.is_some() {
        ferry_gateway::cmd::run_gateway(args).await?;
        return Ok(());
    }
    let client = ferry_k8s::cluster::connect()
        .await
        .context("--kubernetes needs a cluster: set KUBECONFIG or run the gateway in a pod")?;
    let namespace = args.namespace.clone();
    ferry_gateway::cmd::run_gateway_with(args, move |registry| async move {
        ferry_k8s::endpoints::watch_replicas(client, namespace.as_deref(), move |model, replicas| {
            let Some(replicas) = replicas else {
                registry.forget_model(model);
                return;
            };
            if let Err(e) = registry.set_replicas(model, replicas) {
                tracing::warn!(model, error = %e, "EndpointSlice replicas rejected; keeping the previous set");
            }
        })
        .await;
    })
    .await?;
    Ok(())
}

/// Runs the mock engine until Ctrl-C or SIGTERM.
pub async fn mock_engine(args: MockEngineArgs) -> anyhow::Result<()> {
    init_logs();
    ferry_gateway::cmd::run_mock_engine(args).await?;
    Ok(())
}
