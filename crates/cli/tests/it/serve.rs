//! The built-in engine through the control plane: a `builtin` TrainJob trains on the
//! CPU, its export registers a model with lineage, a `ModelDeployment` serves it as a
//! `ferry serve` replica, and the official `openai` Python client talks to it. Also
//! `ferry demo`, the README's main command, end to end.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::harness::{OutputText, Plane, ferry_bin, http, http_get, repo_root};

/// A tiny model trained by the control plane in about a minute on two cores.
fn train_job(name: &str, corpus: &str, register: &str) -> String {
    format!(
        r#"apiVersion: ferry.dev/v1alpha1
kind: TrainJob
metadata: {{name: {name}}}
spec:
  engine: builtin
  task: pretrain
  model: {{source: scratch, preset: tiny}}
  data: {{path: {corpus}, format: text}}
  train: {{seqLen: 64, globalBatch: 4, lr: 0.003, steps: 12}}
  checkpoint: {{every: 6, keep: 1}}
  export: {{format: hf, register: {register}}}
"#
    )
}

fn deployment(name: &str, model: &str) -> String {
    format!(
        r#"apiVersion: ferry.dev/v1alpha1
kind: ModelDeployment
metadata: {{name: {name}}}
spec:
  model: {{source: artifact, artifact: {model}}}
  engine: builtin
  replicas: 1
"#
    )
}

fn openai_importable() -> bool {
    Command::new("python3")
        .args(["-c", "import openai"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// The deployment as the API reports it, once its status has an endpoint.
fn wait_endpoint(plane: &Plane, name: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let out = plane.ok(&["get", "deployment", name, "-o", "json"]);
        let doc: Value = serde_json::from_str::<Vec<Value>>(&out).unwrap()[0].clone();
        if let Some(url) = doc["status"]["endpoints"][0].as_str() {
            assert_eq!(doc["status"]["phase"], "Ready", "{doc}");
            return url.to_owned();
        }
        assert_ne!(doc["status"]["phase"], "Failed", "{doc}");
        assert!(
            Instant::now() < deadline,
            "deployment {name} never ready: {doc}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn port_closed(url: &str) -> bool {
    let addr = url.trim_start_matches("http://");
    std::net::TcpStream::connect(addr).is_err()
}

#[test]
fn builtin_job_exports_a_model_that_a_deployment_serves_to_the_openai_client() {
    let plane = Plane::start(None);
    let corpus = ferry_engine::write_demo_corpus(&plane.home.path().join("corpus")).unwrap();
    let corpus = corpus.to_string_lossy();
    // One file chains the whole way: a job, a second job continuing from the model the first
    // registers, and a deployment of that model. Both wait for it without failing.
    let chain = format!(
        "{}---\n{}---\n{}",
        train_job("tiny-lm", &corpus, "tiny-lm-v1"),
        train_job("tiny-lm-more", &corpus, "tiny-lm-v2")
            .replace(
                "{source: scratch, preset: tiny}",
                "{source: artifact, artifact: tiny-lm-v1}"
            )
            .replace(
                "{name: tiny-lm-more}",
                "{name: tiny-lm-more, labels: {stage: sft}}"
            ),
        deployment("tiny-chat", "tiny-lm-v1")
    );
    plane.apply("train.yaml", &chain);
    let (mut job_waited, mut deployment_waited) = (false, false);
    loop {
        let deployment: Value = serde_json::from_str::<Vec<Value>>(&plane.ok(&[
            "get",
            "deployment",
            "tiny-chat",
            "-o",
            "json",
        ]))
        .unwrap()[0]["status"]
            .clone();
        let next = plane.job("tiny-lm-more");
        let first = plane.job("tiny-lm");
        assert_ne!(deployment["phase"], "Failed", "{deployment}");
        assert_ne!(next["status"]["phase"], "Failed", "{next}");
        let waits = |phase: &Value, message: &Value| {
            phase == "Pending"
                && message.as_str().is_some_and(|m| {
                    m.contains("waiting for model \"tiny-lm-v1\"") && m.contains("default/tiny-lm ")
                })
        };
        deployment_waited |= waits(&deployment["phase"], &deployment["message"]);
        job_waited |= waits(&next["status"]["phase"], &next["status"]["message"]);
        if first["status"]["phase"] == "Succeeded" {
            break;
        }
        assert_ne!(first["status"]["phase"], "Failed", "{first}");
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(
        job_waited && deployment_waited,
        "while tiny-lm trained, the job after it and the deployment did not say they wait for its model"
    );
    // Once the model is registered, the second job is queued and runs from it.
    plane.wait_phase("tiny-lm-more", "Succeeded", Duration::from_secs(600));
    let reasons: Vec<String> = plane
        .events("tiny-lm-more")
        .iter()
        .filter_map(|e| e["reason"].as_str().map(str::to_owned))
        .collect();
    let at = |r: &str| reasons.iter().position(|x| x == r);
    assert!(
        at("WaitingForModel") < at("Queued") && at("WaitingForModel").is_some(),
        "waiting did not come before queueing: {reasons:?}"
    );
    assert_eq!(
        reasons.iter().filter(|r| *r == "WaitingForModel").count(),
        1,
        "the wait is recorded once, not on every pass: {reasons:?}"
    );
    // Its model carries its labels: a selector finds it, and only it.
    let selected: Vec<Value> =
        serde_json::from_str(&plane.ok(&["get", "models", "-l", "stage=sft", "-o", "json"]))
            .unwrap();
    let names: Vec<&str> = selected.iter().filter_map(|m| m["name"].as_str()).collect();
    assert_eq!(names, ["tiny-lm-v2"], "{selected:?}");
    assert_eq!(selected[0]["labels"]["stage"], "sft");

    // Metrics lines reached the store, and the export event names the model.
    let metrics = plane.ok(&["describe", "job", "tiny-lm"]);
    assert!(metrics.contains("Exported"), "{metrics}");
    assert!(metrics.contains("tiny-lm-v1"), "{metrics}");

    // The model is registered with its lineage: the job and the checkpoint it came from.
    let models: Vec<Value> =
        serde_json::from_str(&plane.ok(&["get", "models", "-o", "json"])).unwrap();
    let model = models
        .iter()
        .find(|m| m["name"] == "tiny-lm-v1")
        .expect("registered model");
    assert_eq!(model["format"], "hf-safetensors");
    let job_uid = model["sourceJobUid"].as_str().expect("lineage: source job");
    let checkpoint = model["checkpoint"].as_str().expect("lineage: checkpoint");
    assert!(
        checkpoint.contains(&format!("/tiny-lm/{job_uid}/"))
            && checkpoint.ends_with("checkpoint-12"),
        "{checkpoint} is not job {job_uid}'s final checkpoint"
    );
    let path = Path::new(model["path"].as_str().unwrap());
    for file in ["config.json", "model.safetensors", "tokenizer.json"] {
        assert!(path.join(file).is_file(), "{} lacks {file}", path.display());
    }
    assert!(
        !path.join("optimizer.safetensors").exists(),
        "optimizer state was exported"
    );

    // Registering the same name again is refused at export time, and says how to fix it.
    plane.apply(
        "again.yaml",
        &train_job("tiny-lm-again", &corpus, "tiny-lm-v1"),
    );
    let failed = plane.wait_phase("tiny-lm-again", "Failed", Duration::from_secs(600));
    let message = failed["status"]["message"].as_str().unwrap_or("");
    assert!(
        message.contains("already registered") && message.contains("spec.export.register"),
        "{message}"
    );

    // A deployment of an unknown model fails with a message naming the field.
    plane.apply("bad-deploy.yaml", &deployment("nowhere", "no-such-model"));
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let out = plane.ok(&["get", "deployment", "nowhere", "-o", "json"]);
        let doc: Value = serde_json::from_str::<Vec<Value>>(&out).unwrap()[0].clone();
        if doc["status"]["phase"] == "Failed" {
            let msg = doc["status"]["message"].as_str().unwrap_or("");
            assert!(
                msg.contains("spec.model.artifact") && msg.contains("no-such-model"),
                "{msg}"
            );
            break;
        }
        assert!(
            Instant::now() < deadline,
            "bad deployment not Failed: {doc}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }

    // The deployment applied with the job serves the model it waited for.
    let endpoint = wait_endpoint(&plane, "tiny-chat");
    let table = plane.ok(&["get", "deployments"]);
    assert!(
        table.contains("tiny-chat") && table.contains("Ready") && table.contains(&endpoint),
        "{table}"
    );
    let models = http_get(&format!("{endpoint}/v1/models"));
    assert!(models.contains("\"tiny-chat\""), "{models}");

    // The control plane's gateway routes the deployment's name to the replica.
    let version: Value =
        serde_json::from_str(&http_get(&format!("{}/version", plane.url))).unwrap();
    let gateway = version["gateway"]
        .as_str()
        .expect("ferry up runs a gateway")
        .to_owned();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !http_get(&format!("{gateway}/v1/models")).contains("\"tiny-chat\"") {
        assert!(
            Instant::now() < deadline,
            "the gateway never listed tiny-chat"
        );
        std::thread::sleep(Duration::from_millis(200));
    }

    // The official client, straight at `ferry serve` and through the gateway.
    if openai_importable() {
        let script = repo_root().join("tests/openai_client/test_client.py");
        for base in [&endpoint, &gateway] {
            let status = Command::new("python3")
                .arg(&script)
                .arg(format!("{base}/v1"))
                .arg("tiny-chat")
                .args(["--concurrency", "16"])
                .status()
                .unwrap();
            assert!(
                status.success(),
                "the openai client failed against {base} (its stderr is above); server log:\n{}",
                plane.server_log()
            );
        }
    } else {
        assert!(
            std::env::var("FERRY_REQUIRE_OPENAI_CLIENT").as_deref() != Ok("1"),
            "FERRY_REQUIRE_OPENAI_CLIENT=1 but `import openai` fails"
        );
        eprintln!("skipped the openai client run: python3 cannot import openai");
    }

    // The model cannot be deleted while the deployment serves it; the line names it.
    let refused = plane.ferry(&["delete", "model", "tiny-lm-v1"]);
    assert!(!refused.status.success());
    let err = refused.stderr_text();
    assert!(
        err.contains("ModelDeployment default/tiny-chat (spec.model)"),
        "{err}"
    );

    // Deleting the deployment stops its replica.
    plane.ok(&["delete", "deployment", "tiny-chat"]);
    let deadline = Instant::now() + Duration::from_secs(30);
    while !port_closed(&endpoint) {
        assert!(
            Instant::now() < deadline,
            "replica at {endpoint} still serving after delete"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // ... and the gateway forgets its name: unknown (404), not unavailable (503).
    let chat = r#"{"model": "tiny-chat", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}"#;
    let addr = gateway.trim_start_matches("http://");
    loop {
        let (status, _, text) = http(addr, "POST", "/v1/chat/completions", chat);
        if status == 404 {
            assert!(text.contains("model_not_found"), "{text}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the gateway still answers {status} for a deleted deployment: {text}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    plane.ok(&["delete", "deployment", "nowhere"]);

    // Unused now (the job that started from it has ended): it goes with the files its export
    // wrote, and the name is free.
    let deleted = plane.ok(&["delete", "model", "tiny-lm-v1"]);
    assert!(
        deleted.starts_with("model tiny-lm-v1 deleted (files removed: ")
            && deleted.contains(&path.display().to_string()),
        "{deleted}"
    );
    assert!(!path.exists(), "{} still exists", path.display());
    let models = plane.ok(&["get", "models"]);
    assert!(
        !models.contains("tiny-lm-v1 ") && models.contains("tiny-lm-v2"),
        "{models}"
    );
}

#[test]
fn ferry_serve_refuses_missing_and_corrupt_model_dirs_with_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no-model-here");
    let out = Command::new(ferry_bin())
        .args(["serve", "--model"])
        .arg(&missing)
        .args(["--listen", "127.0.0.1:0"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("no-model-here") && err.contains("does not exist"),
        "{err}"
    );

    // A model directory whose safetensors file is cut short.
    let corrupt = dir.path().join("corrupt");
    std::fs::create_dir_all(&corrupt).unwrap();
    let corpus = ferry_engine::write_demo_corpus(dir.path()).unwrap();
    let tok = ferry_engine::train_bpe(&[&corpus], 300, &corrupt.join("tokenizer.json")).unwrap();
    drop(tok);
    let cfg = ferry_engine::preset("tiny").unwrap();
    std::fs::write(corrupt.join("config.json"), cfg.to_hf_json().to_string()).unwrap();
    std::fs::write(
        corrupt.join("model.safetensors"),
        b"\x10\x00\x00\x00\x00\x00\x00\x00{\"a\":",
    )
    .unwrap();
    let out = Command::new(ferry_bin())
        .args(["serve", "--model"])
        .arg(&corrupt)
        .args(["--listen", "127.0.0.1:0"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("model.safetensors"), "{err}");
}

#[test]
fn demo_trains_registers_deploys_and_chats() {
    let tmp = tempfile::tempdir().unwrap();
    let out = Command::new(ferry_bin())
        .args(["demo", "--exit", "--private"])
        .env("TMPDIR", tmp.path())
        .env("FERRY_LOG", "warn")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "ferry demo failed:\n{stdout}\n{stderr}"
    );
    for stage in [
        "[1/4]",
        "[2/4]",
        "[3/4]",
        "[4/4]",
        "lineage: job demo-train",
        "curl -s http://",
    ] {
        assert!(stdout.contains(stage), "no {stage:?} in:\n{stdout}");
    }
    // "final loss L nats/token vs the corpus's unigram entropy H nats/token", with L < H.
    let line = stdout
        .lines()
        .find(|l| l.contains("final loss"))
        .expect("loss line");
    let numbers: Vec<f64> = line
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect();
    assert!(numbers.len() >= 2 && numbers[0] < numbers[1], "{line}");
    // "(N parameters)": the trained model's count, at most the preset's (its vocabulary is
    // the corpus's BPE, which can stop short of the preset's size).
    let params: usize = line
        .rsplit_once('(')
        .and_then(|(_, rest)| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .expect("parameter count on the loss line");
    let preset = ferry_engine::preset(ferry_engine::DEMO_PRESET).unwrap();
    assert!(params > 0 && params <= preset.num_parameters(), "{line}");
    // The chat printed a non-empty answer and its token usage.
    let usage = stdout
        .lines()
        .find(|l| l.contains("completion tokens)"))
        .expect("usage line");
    assert!(!usage.contains("+ 0 completion"), "{usage}");
    // The private control plane stopped its replica and removed its home.
    let endpoint = stdout
        .lines()
        .find_map(|l| l.trim().strip_prefix("replica ready at "))
        .map(|u| u.trim_end_matches("/v1").to_owned())
        .expect("endpoint line");
    assert!(port_closed(&endpoint), "the demo left {endpoint} serving");
    let left: Vec<_> = std::fs::read_dir(tmp.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert!(left.is_empty(), "the demo left {left:?} behind");
}
