//! `ferry demo`: the quickstart, end to end, on this machine — a private control
//! plane on a free port with its own `FERRY_HOME`, a gang job through it, its logs
//! and events.

use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use ferry_server::{GpuSetting, ServerConfig};
use serde_json::Value;

use crate::client::Client;

const HELLO_GANG_PY: &str = include_str!("../../../../examples/hello_gang.py");
const HELLO_GANG_YAML: &str = include_str!("../../../../examples/hello-gang.yaml");

/// Options of the demo.
#[derive(Debug, clap::Args)]
pub struct DemoArgs {
    /// Keep the demo's FERRY_HOME (logs, database) instead of deleting it.
    #[arg(long)]
    pub keep: bool,
}

pub async fn run(args: DemoArgs) -> anyhow::Result<()> {
    let home = tempfile_dir()?;
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let listen = format!("127.0.0.1:{port}").parse()?;
    let mut config = ServerConfig::new(home.clone(), listen);
    config.gpus = GpuSetting::Virtual(0);
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(ferry_server::run(config, async {
        let _ = stop_rx.await;
    }));
    let client = Client::new(&format!("http://{listen}"));
    wait_until_up(&client).await?;
    println!(
        "control plane up at http://{listen} (FERRY_HOME={})",
        home.display()
    );

    let result = hello_gang(&client, &home).await;

    let _ = stop_tx.send(());
    let _ = server.await;
    if args.keep {
        println!("kept {}", home.display());
    } else {
        let _ = std::fs::remove_dir_all(&home);
    }
    result
}

fn tempfile_dir() -> anyhow::Result<std::path::PathBuf> {
    let dir = std::env::temp_dir().join(format!("ferry-demo-{}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    Ok(dir)
}

async fn wait_until_up(client: &Client) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if client.get::<Value>("/healthz").await.is_ok() {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("the demo's control plane did not come up within 20 s");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Polls a job until it reaches a terminal phase; returns the job.
pub async fn wait_job(client: &Client, name: &str, timeout: Duration) -> anyhow::Result<Value> {
    let deadline = Instant::now() + timeout;
    let path = format!("/api/v1/namespaces/default/jobs/{name}");
    loop {
        let job: Value = client.get(&path).await?;
        let phase = job["status"]["phase"].as_str().unwrap_or("").to_owned();
        if matches!(phase.as_str(), "Succeeded" | "Failed" | "Cancelled") {
            return Ok(job);
        }
        if Instant::now() > deadline {
            bail!("job {name} still {phase} after {timeout:?}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn hello_gang(client: &Client, home: &std::path::Path) -> anyhow::Result<()> {
    println!("\n[1/1] a gang of 2 nodes × 2 ranks that must find each other");
    let script = home.join("hello_gang.py");
    std::fs::write(&script, HELLO_GANG_PY)?;
    let mut docs = ferry_spec::parse_documents(HELLO_GANG_YAML, "examples/hello-gang.yaml")?;
    let ferry_spec::Resource::TrainJob(job) = &mut docs[0] else {
        bail!("examples/hello-gang.yaml is not a TrainJob");
    };
    job.spec.command = vec!["python3".into(), script.to_string_lossy().into_owned()];
    let body = Value::Array(vec![docs[0].to_value()]);
    let _: Value = client.post("/api/v1/apply", &body, "demo").await?;
    let job = wait_job(client, "hello-gang", Duration::from_secs(120)).await?;
    let base = "/api/v1/namespaces/default/jobs/hello-gang";
    let log = client
        .send(reqwest::Method::GET, &format!("{base}/logs?rank=0"), None)
        .await?
        .text()
        .await?;
    let events: Vec<Value> = client.get(&format!("{base}/events")).await?;
    for e in &events {
        println!(
            "  {}  {:>9} -> {:<9}  {}",
            e["at"].as_str().unwrap_or(""),
            e["from"].as_str().unwrap_or("-"),
            e["to"].as_str().unwrap_or(""),
            e["message"].as_str().unwrap_or("")
        );
    }
    let collected = log.lines().find(|l| l.starts_with('[')).unwrap_or("(none)");
    println!("  rank 0 collected RANKs {collected}");
    if job["status"]["phase"] != "Succeeded" {
        bail!(
            "hello-gang ended {}: {}",
            job["status"]["phase"],
            job["status"]["message"]
        );
    }
    Ok(())
}
