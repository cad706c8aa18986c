//! One module per command family; `run` dispatches.

mod apply;
mod convert;
mod demo;
mod logs;
mod plan;
mod resources;
mod sim;
mod up;

use std::process::ExitCode;

use clap::CommandFactory;

use crate::args::{Cli, Command};
use crate::client::Client;

pub use convert::ConvertArgs;
pub use demo::DemoArgs;
pub use plan::PlanArgs;
pub use sim::SimArgs;

/// Runs the parsed command line.
pub async fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    let client = Client::new(&cli.url);
    match cli.command {
        Command::Up(args) => up::run(args).await?,
        Command::Demo(args) => demo::run(args).await?,
        Command::Plan(args) => plan::run(args)?,
        Command::Convert(args) => convert::run(args)?,
        Command::Sim(args) => sim::run(args)?,
        Command::Apply(args) => apply::run(&client, args).await?,
        Command::Get(args) => resources::get(&client, args).await?,
        Command::Describe(args) => resources::describe(&client, args).await?,
        Command::Logs(args) => logs::run(&client, args).await?,
        Command::Cancel(args) => resources::cancel(&client, args).await?,
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

fn schema(args: crate::args::SchemaArgs) -> anyhow::Result<()> {
    let value = match args.kind {
        None => ferry_spec::json_schema_all(),
        Some(name) => {
            let kind = ferry_spec::ResourceKind::from_name(&name).ok_or_else(|| {
                anyhow::anyhow!("unknown kind {name:?}; use TrainJob, ModelDeployment or Queue")
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
