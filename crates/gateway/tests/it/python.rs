//! Bar 1: `tests/openai_client/test_client.py` (the official `openai` package) through
//! the gateway, with keys and a rate-limited key.
//!
//! Upstream: a `mock_engine` process by default; set `FERRY_GATEWAY_UPSTREAM=URL`
//! and `FERRY_GATEWAY_UPSTREAM_MODEL=NAME` to run the same checks against another
//! engine (e.g. `ferry serve`). Skipped with a message when `import openai` fails,
//! unless `FERRY_REQUIRE_OPENAI_CLIENT=1` (CI) makes that a failure.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use ferry_gateway::{GatewayConfig, KeyConfig};

use crate::common::*;

fn openai_importable() -> bool {
    Command::new("python3")
        .args(["-c", "import openai"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn official_openai_client_through_the_gateway() {
    if !openai_importable() {
        assert!(
            std::env::var("FERRY_REQUIRE_OPENAI_CLIENT").as_deref() != Ok("1"),
            "FERRY_REQUIRE_OPENAI_CLIENT=1 but `import openai` fails: pip install -r tests/openai_client/requirements.txt"
        );
        eprintln!("skipped: python3 cannot import openai");
        return;
    }
    let (_proc, upstream, model) = match std::env::var("FERRY_GATEWAY_UPSTREAM") {
        Ok(url) => {
            let model = std::env::var("FERRY_GATEWAY_UPSTREAM_MODEL")
                .expect("FERRY_GATEWAY_UPSTREAM_MODEL names the upstream's model");
            (None, url, model)
        }
        Err(_) => {
            let bin = tokio::task::spawn_blocking(mock_engine_binary)
                .await
                .unwrap();
            let p = MockProc::spawn(
                &bin,
                "127.0.0.1:0",
                &[
                    "--model",
                    "tiny",
                    "--max-context",
                    "512",
                    "--ttft-ms",
                    "5",
                    "--itl-ms",
                    "2",
                    "--tokens",
                    "24",
                ],
            );
            let url = format!("http://{}", p.addr);
            (Some(p), url, "tiny".to_owned())
        }
    };
    let gw = Gw::start(GatewayConfig {
        keys: vec![
            KeyConfig::from_plain("python", "sk-python", None, None),
            KeyConfig::from_plain("limited", "sk-limited", Some(5), None),
        ],
        ..gw_cfg()
    })
    .await;
    gw.registry.upsert(&model, "upstream", &upstream).unwrap();
    // Let the poller fetch the replica's /v1/models (max_model_len feeds the script).
    assert!(
        eventually(Duration::from_secs(10), || {
            gw.registry
                .replicas()
                .iter()
                .all(|r| !r.announced.is_empty())
        })
        .await,
        "the upstream's /v1/models was never read"
    );
    let script =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/openai_client/test_client.py");
    let base = format!("http://{}/v1", gw.addr);
    let status = tokio::task::spawn_blocking(move || {
        Command::new("python3")
            .arg(script)
            .arg(base)
            .arg(model)
            .args(["--api-key", "sk-python", "--rate-limited-key", "sk-limited"])
            .status()
            .unwrap()
    })
    .await
    .unwrap();
    assert!(
        status.success(),
        "test_client.py failed through the gateway: {status}"
    );
}
