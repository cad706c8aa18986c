//! One module per command family; `run` dispatches.

mod apply;
mod convert;
mod demo;
mod engine;
mod gateway;
mod k8s;
mod logs;
mod plan;
mod resources;
mod scheduler_options;
mod sim;
mod up;

use std::process::ExitCode;

use clap::CommandFactory;

use crate::args::{Cli, Command};
use crate::client::Client;

pub use convert::ConvertArgs;
pub use demo::DemoArgs;
pub use engine::{EngineCommand, ServeArgs};
pub use gateway::{GatewayArgs, MockEngineArgs};
pub use k8s::{CrdsArgs, OperatorArgs, RenderArgs};
pub use plan::PlanArgs;
pub use sim::SimArgs;

/// Runs the parsed command line.
pub async fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    let client = Client::new(&cli.url);
    match cli.command {
        Command::Up(args) => up::run(args).await?,
        Command::Demo(args) => demo::run(&cli.url, args).await?,
        Command::Plan(args) => plan::run(args)?,
        Command::Convert(args) => convert::run(args)?,
        Command::Sim(args) => sim::run(args)?,
        Command::Serve(args) => engine::serve(args).await?,
        Command::Render(args) => k8s::render(args).await?,
        Command::Operator(args) => k8s::operator(args).await?,
        Command::Crds(args) => k8s::crds(args)?,
        Command::Gateway(args) => gateway::gateway(args).await?,
        Command::MockEngine(args) => gateway::mock_engine(args).await?,
        Command::Engine(cmd) => return engine::run(cmd),
        Command::Apply(args) => apply::run(&client, args).await?,
        Command::Get(args) => resources::get(&client, args).await?,
        Command::Describe(args) => resources::describe(&client, args).await?,
        Command::Logs(args) => logs::run(&client, args).await?,
        Command::Cancel(args) => resources::job_action(&client, "cancel", &args).await?,
        Command::Suspend(args) => resources::job_action(&client, "suspend", &args).await?,
        Command::Resume(args) => resources::job_action(&client, "resume", &args).await?,
        Command::Delete(args) => resources::delete(&client, args).await?,
        Command::Schema(args) => schema(args)?,
        Command::Version => version(&client).await,
        Command::Completions(args) => {
            let mut cmd = Cli::command();
            clap_complete::generate(args.shell, &mut cmd, "ferry", &mut std::io::stdout());
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Logs to stderr, filtered by `FERRY_LOG` (default `info`).
pub(crate) fn init_logging() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("FERRY_LOG")
                .unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .try_init();
}

/// Resolves at Ctrl-C or SIGTERM: how long-running commands learn to stop.
pub(crate) async fn shutdown_signal() {
    match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
        }
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

fn schema(args: crate::args::SchemaArgs) -> anyhow::Result<()> {
    let value = match args.kind {
        None => ferry_spec::json_schema_all(),
        Some(name) => {
            let kind = ferry_spec::ResourceKind::from_name(&name).ok_or_else(|| {
                anyhow::anyhow!("unknown kind {name:?}; use TrainJob, ModelDeployment, Queue, PriorityClass, Sweep or Cohort")
            })?;
            ferry_spec::json_schema(kind)
        }
    };
    println!("{}", serde_json::to_string_pretty(&value)?);
    Ok(())
}

async fn version(client: &Client) {
    println!("ferry {}", env!("CARGO_PKG_VERSION"));
    match client.get::<serde_json::Value>("/version").await {
        Ok(v) => println!(
            "control plane {} (schema {}, {} GPU(s), store {})",
            crate::output::cell(&v["version"]),
            crate::output::cell(&v["schemaVersion"]),
            crate::output::cell(&v["gpus"]),
            crate::output::cell(&v["store"]),
        ),
        Err(e) => println!("control plane: {e}"),
    }
}
