//! `ferry demo`: the quickstart, end to end on this machine. Trains a small Llama from
//! scratch on the bundled corpus with the built-in engine, registers the model, deploys
//! it behind the OpenAI API and streams a chat completion from it — every stage through
//! the control plane's API, as a user would drive it.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use ferry_server::{GpuSetting, ServerConfig};
use futures_util::StreamExt;
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::{Value, json};

use crate::client::Client;

/// Optimiser steps of the demo's training run.
const STEPS: u64 = 150;

/// Options of the demo.
#[derive(Debug, clap::Args)]
pub struct DemoArgs {
    /// Stop after the chat instead of serving the model until Ctrl-C.
    #[arg(long)]
    pub exit: bool,
    /// Keep the private control plane's FERRY_HOME (logs, database, model) afterwards.
    #[arg(long)]
    pub keep: bool,
    /// Always start a private control plane, even when one answers at `--url`.
    #[arg(long)]
    pub private: bool,
    /// Model to train: `small` (4.9M parameters on the demo corpus) or `tiny` (0.88M, about 3.5× faster).
    #[arg(long, default_value = ferry_engine::DEMO_PRESET,
          value_parser = clap::builder::PossibleValuesParser::new(ferry_engine::PRESETS))]
    pub preset: String,
}

/// A control plane the demo started itself.
struct Private {
    home: PathBuf,
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<Result<(), ferry_server::ApiError>>,
}

pub async fn run(url: &str, args: DemoArgs) -> anyhow::Result<()> {
    let shared = Client::new(url);
    let reachable = !args.private && shared.get::<Value>("/healthz").await.is_ok();
    let (client, private, home, suffix) = if reachable {
        println!("using the control plane at {url}");
        let home = std::env::temp_dir().join(format!("ferry-demo-data-{}", std::process::id()));
        // Names must not collide with an earlier demo on the same control plane.
        let suffix = format!("-{}", chrono::Utc::now().format("%Y%m%d%H%M%S"));
        (shared, None, home, suffix)
    } else {
        let (client, p) = start_private().await?;
        let home = p.home.clone();
        (client, Some(p), home, String::new())
    };
    let exit = args.exit || private.is_none();
    let result = chain(&client, &home, &suffix, &args.preset, exit).await;
    if let Some(p) = private {
        let _ = p.stop.send(());
        let _ = p.task.await;
        if args.keep {
            println!("kept {}", p.home.display());
        } else {
            let _ = std::fs::remove_dir_all(&p.home);
        }
    }
    result
}

async fn start_private() -> anyhow::Result<(Client, Private)> {
    let home = std::env::temp_dir().join(format!("ferry-demo-{}", std::process::id()));
    std::fs::create_dir_all(&home).with_context(|| format!("cannot create {}", home.display()))?;
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let listen = format!("127.0.0.1:{port}").parse()?;
    let mut config = ServerConfig::new(home.clone(), listen);
    config.gpus = GpuSetting::Virtual(0);
    config.gateway = Some("127.0.0.1:0".parse()?);
    config.stop_replicas_on_exit = true;
    config.tick = Duration::from_millis(200);
    let (stop, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(ferry_server::run(config, async {
        let _ = stop_rx.await;
    }));
    let client = Client::new(&format!("http://{listen}"));
    let deadline = Instant::now() + Duration::from_secs(20);
    while client.get::<Value>("/healthz").await.is_err() {
        if task.is_finished() {
            bail!("the demo's control plane stopped while starting; see the log above");
        }
        if Instant::now() > deadline {
            bail!("the demo's control plane did not come up within 20 s");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    println!(
        "started a private control plane at http://{listen} (FERRY_HOME={})",
        home.display()
    );
    Ok((client, Private { home, stop, task }))
}

/// Train → register → deploy → chat.
async fn chain(
    client: &Client,
    home: &Path,
    suffix: &str,
    preset: &str,
    exit: bool,
) -> anyhow::Result<()> {
    let t0 = Instant::now();
    let job = format!("demo-train{suffix}");
    let model = format!("ferry-demo{suffix}");
    let deployment = format!("ferry-demo{suffix}");

    println!(
        "\n[1/4] train a {preset} Llama from scratch on the bundled corpus (CPU, built-in engine)"
    );
    let corpus = ferry_engine::write_demo_corpus(&home.join("corpus"))?;
    println!(
        "      corpus: {} (synthetic stories and chats written for Ferry, CC0-1.0)",
        corpus.display()
    );
    let train_yaml = format!(
        r#"apiVersion: ferry.dev/v1alpha1
kind: TrainJob
metadata: {{name: {job}}}
spec:
  engine: builtin
  task: pretrain
  method: full
  model: {{source: scratch, preset: {preset}}}
  data: {{path: {corpus}, format: text}}
  train: {{seqLen: 128, globalBatch: 8, lr: 0.003, steps: {STEPS}, warmupSteps: 15}}
  checkpoint: {{every: 50, keep: 1}}
  export: {{format: hf, register: {model}}}
"#,
        corpus = corpus.display(),
    );
    apply(client, &train_yaml, "demo/train.yaml").await?;
    let finished = follow_training(client, &job).await?;
    let base = format!("/api/v1/namespaces/default/jobs/{job}");
    if finished["status"]["phase"] != "Succeeded" {
        let log = client
            .send(reqwest::Method::GET, &format!("{base}/logs?rank=0"), None)
            .await?
            .text()
            .await?;
        let tail: Vec<&str> = log.lines().rev().take(5).collect();
        bail!(
            "training ended {}: {}\nlast log lines:\n{}",
            finished["status"]["phase"],
            finished["status"]["message"].as_str().unwrap_or(""),
            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
        );
    }
    let summary = training_summary(client, &base).await?;
    let (loss, entropy) = (
        summary["finalLoss"].as_f64(),
        summary["unigramEntropy"].as_f64(),
    );
    let (Some(loss), Some(entropy)) = (loss, entropy) else {
        bail!("the training log has no summary line with finalLoss and unigramEntropy");
    };
    println!(
        "      final loss {loss:.3} nats/token vs the corpus's unigram entropy {entropy:.3} nats/token ({} parameters)",
        summary["parameters"]
    );
    if loss >= entropy {
        bail!("the model did not learn beyond unigram statistics (loss {loss:.3} ≥ {entropy:.3})");
    }

    println!("\n[2/4] register the model");
    let models: Vec<Value> = client.get("/api/v1/models").await?;
    let record = models
        .iter()
        .find(|m| m["name"] == model.as_str())
        .with_context(|| {
            format!("model {model} was not registered; see `ferry describe job {job}`")
        })?;
    println!(
        "      {} ({}) at {}\n      lineage: job {} checkpoint {}",
        model,
        record["format"].as_str().unwrap_or(""),
        record["path"].as_str().unwrap_or(""),
        job,
        record["checkpoint"].as_str().unwrap_or("")
    );

    println!("\n[3/4] deploy it behind the OpenAI API (built-in engine)");
    let deploy_yaml = format!(
        r#"apiVersion: ferry.dev/v1alpha1
kind: ModelDeployment
metadata: {{name: {deployment}}}
spec:
  model: {{source: artifact, artifact: {model}}}
  engine: builtin
  replicas: 1
"#
    );
    apply(client, &deploy_yaml, "demo/deploy.yaml").await?;
    let replica = wait_ready(client, &deployment).await?;
    println!("      replica ready at {replica}/v1");
    // Clients use the gateway when the control plane runs one; it routes by model name.
    let version: Value = client.get("/version").await?;
    let endpoint = match version["gateway"].as_str() {
        Some(gateway) => {
            wait_routed(gateway, &deployment).await?;
            println!("      routed by the gateway at {gateway}/v1");
            gateway.to_owned()
        }
        None => replica,
    };

    println!("\n[4/4] chat (streamed)");
    let question = "What is the honey like?";
    println!("      user: {question}");
    print!("      {deployment}: ");
    let usage = stream_chat(&endpoint, &deployment, question).await?;
    println!(
        "\n      ({} prompt + {} completion tokens)",
        usage["prompt_tokens"], usage["completion_tokens"]
    );
    println!(
        "\ndone in {:.0} s. Try it yourself:",
        t0.elapsed().as_secs_f64()
    );
    println!(
        "  curl -s {endpoint}/v1/chat/completions -H 'content-type: application/json' \\\n    -d '{{\"model\": \"{deployment}\", \"messages\": [{{\"role\": \"user\", \"content\": \"What is the grass like?\"}}], \"max_tokens\": 32}}'"
    );
    if !exit {
        println!("serving until Ctrl-C");
        crate::commands::shutdown_signal().await;
    }
    Ok(())
}

async fn apply(client: &Client, yaml: &str, source: &str) -> anyhow::Result<()> {
    let docs = ferry_spec::parse_documents(yaml, source)?;
    let body = Value::Array(docs.iter().map(|d| d.to_value()).collect());
    let _: Value = client.post("/api/v1/apply", &body, source).await?;
    Ok(())
}

/// Shows a progress bar from the job's metrics until it finishes; returns the job.
async fn follow_training(client: &Client, job: &str) -> anyhow::Result<Value> {
    let base = format!("/api/v1/namespaces/default/jobs/{job}");
    let bar = ProgressBar::new(STEPS);
    bar.set_style(
        ProgressStyle::with_template("      {bar:30} {pos}/{len} steps  {msg}  [{elapsed}]")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let deadline = Instant::now() + Duration::from_secs(30 * 60);
    let mut after = 0;
    loop {
        let record: Value = client.get(&base).await?;
        let metrics: Vec<Value> = client
            .get(&format!("{base}/metrics?after={after}"))
            .await
            .unwrap_or_default();
        if let Some(last) = metrics.last() {
            after = last["id"].as_i64().unwrap_or(after);
            let v = &last["values"];
            bar.set_position(v["step"].as_u64().unwrap_or(0));
            bar.set_message(format!(
                "loss {:.3}  {:.0} tokens/s",
                v["loss"].as_f64().unwrap_or(f64::NAN),
                v["tokens_per_s"].as_f64().unwrap_or(0.0)
            ));
        }
        let phase = record["status"]["phase"].as_str().unwrap_or("");
        if matches!(phase, "Succeeded" | "Failed" | "Cancelled") {
            bar.finish();
            return Ok(record);
        }
        if Instant::now() > deadline {
            bar.abandon();
            bail!("training still {phase} after 30 minutes; see `ferry logs {job}`");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The engine's summary line (`{"steps", "finalLoss", "unigramEntropy", …}`) from rank 0's log.
async fn training_summary(client: &Client, base: &str) -> anyhow::Result<Value> {
    let log = client
        .send(reqwest::Method::GET, &format!("{base}/logs?rank=0"), None)
        .await?
        .text()
        .await?;
    log.lines()
        .rev()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|v| v.get("finalLoss").is_some())
        .context("the training log has no summary line")
}

async fn wait_ready(client: &Client, name: &str) -> anyhow::Result<String> {
    let path = format!("/api/v1/namespaces/default/deployments/{name}");
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let record: Value = client.get(&path).await?;
        let status = &record["doc"]["status"];
        if let Some(url) = status["endpoints"][0].as_str() {
            return Ok(url.to_owned());
        }
        if status["phase"] == "Failed" {
            bail!(
                "deployment {name} failed: {}",
                status["message"].as_str().unwrap_or("")
            );
        }
        if Instant::now() > deadline {
            bail!(
                "deployment {name} not ready after 120 s: {}",
                status["message"].as_str().unwrap_or("")
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Waits until the gateway lists `model` (it learns replicas from the serving controller).
async fn wait_routed(gateway: &str, model: &str) -> anyhow::Result<()> {
    let http = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(resp) = http.get(format!("{gateway}/v1/models")).send().await
            && let Ok(v) = resp.json::<Value>().await
            && v["data"]
                .as_array()
                .is_some_and(|ms| ms.iter().any(|m| m["id"] == model))
        {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("the gateway at {gateway} did not list model {model} within 30 s");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Streams one chat completion to stdout; returns its `usage`.
async fn stream_chat(endpoint: &str, model: &str, question: &str) -> anyhow::Result<Value> {
    use std::io::Write;
    let body = json!({
        "model": model,
        "messages": [{"role": "user", "content": question}],
        "max_tokens": 48,
        "temperature": 0.0,
        "stream": true,
        "stream_options": {"include_usage": true},
    });
    let resp = reqwest::Client::new()
        .post(format!("{endpoint}/v1/chat/completions"))
        .json(&body)
        .send()
        .await?;
    if !resp.status().is_success() {
        bail!(
            "chat completion failed: {} {}",
            resp.status(),
            resp.text().await?
        );
    }
    let mut stream = resp.bytes_stream();
    let mut pending = String::new();
    let mut usage = Value::Null;
    while let Some(chunk) = stream.next().await {
        pending.push_str(&String::from_utf8_lossy(&chunk?));
        while let Some(end) = pending.find("\n\n") {
            let event: String = pending.drain(..end + 2).collect();
            let Some(data) = event.trim().strip_prefix("data: ") else {
                continue;
            };
            if data == "[DONE]" {
                continue;
            }
            let v: Value = serde_json::from_str(data).context("a stream event is not JSON")?;
            if let Some(text) = v["choices"][0]["delta"]["content"].as_str() {
                print!("{text}");
                let _ = std::io::stdout().flush();
            }
            if !v["usage"].is_null() {
                usage = v["usage"].clone();
            }
        }
    }
    Ok(usage)
}
