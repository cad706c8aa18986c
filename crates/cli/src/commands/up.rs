//! `ferry up`: the control plane in the foreground.

use std::path::PathBuf;

use anyhow::Context;
use ferry_server::{GpuSetting, ServerConfig};

use crate::args::UpArgs;

/// `$FERRY_HOME`, else `~/.ferry`.
pub fn ferry_home(explicit: Option<PathBuf>) -> anyhow::Result<PathBuf> {
    if let Some(home) = explicit {
        return Ok(home);
    }
    let user_home = std::env::var_os("HOME")
        .context("neither FERRY_HOME nor HOME is set; set FERRY_HOME to a writable directory")?;
    Ok(PathBuf::from(user_home).join(".ferry"))
}

pub async fn run(args: UpArgs) -> anyhow::Result<()> {
    crate::commands::init_logging();
    let mut config = ServerConfig::new(ferry_home(args.home)?, args.listen);
    config.store_url = args.store;
    config.gateway = match args.gateway.as_str() {
        "off" | "none" | "" => None,
        addr => Some(addr.parse().with_context(|| {
            format!("--gateway {addr:?}: expected ADDR:PORT (e.g. 127.0.0.1:8080) or off")
        })?),
    };
    if let Some(n) = args.gpus {
        config.gpus = GpuSetting::Virtual(n);
    }
    config.scheduler = super::scheduler_options::load(args.scheduler_options.as_deref())?;
    if let Some(path) = &args.priority_classes {
        let (classes, notes) = super::scheduler_options::priority_classes(path)?;
        for note in notes {
            eprintln!("note: {note}");
        }
        config.priorities = classes;
        tracing::info!(
            file = %path.display(),
            classes = %super::scheduler_options::describe_classes(&config.priorities),
            "priority classes"
        );
    }
    let shutdown = async {
        crate::commands::shutdown_signal().await;
        tracing::info!(
            "shutting down; running jobs keep running and are re-adopted at the next start"
        );
    };
    ferry_server::run(config, shutdown).await?;
    Ok(())
}
