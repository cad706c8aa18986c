//! Runs `tests/openai_client/test_client.py` (the official `openai` Python package)
//! against the `mock_server` example on a real loopback port.
//!
//! Skipped with a message when `python3 -c "import openai"` fails, unless
//! `FERRY_REQUIRE_OPENAI_CLIENT=1` is set (CI sets it), in which case a missing
//! client is a failure.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn openai_importable() -> bool {
    Command::new("python3")
        .args(["-c", "import openai"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// The example binary beside this test binary, (re)built first: `cargo test` builds
/// examples, but `cargo test --test it python_client` does not, and a stale binary
/// would test old code. A fresh build is a no-op taking about a second.
fn mock_server_binary() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("test binary lives in <target>/<profile>/deps");
    let target_dir = profile_dir.parent().expect("target dir");
    let mut build = Command::new(env!("CARGO"));
    build
        // `--workspace`: the features `cargo test --workspace` built it with (see the gateway's
        // tests); `-p ferry-openai` would rebuild dependencies with other features.
        .args(["build", "--workspace", "--example", "mock_server"])
        .arg("--manifest-path")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml"))
        .env("CARGO_TARGET_DIR", target_dir);
    if profile_dir.file_name().is_some_and(|n| n == "release") {
        build.arg("--release");
    }
    let status = build
        .status()
        .expect("run cargo build --example mock_server");
    assert!(status.success(), "building the mock_server example failed");
    profile_dir
        .join("examples")
        .join(format!("mock_server{}", std::env::consts::EXE_SUFFIX))
}

/// Kills the server when the test ends, however it ends.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn official_openai_client_passes_against_mock_server() {
    if !openai_importable() {
        assert!(
            std::env::var("FERRY_REQUIRE_OPENAI_CLIENT").as_deref() != Ok("1"),
            "FERRY_REQUIRE_OPENAI_CLIENT=1 but `import openai` fails: \
             pip install -r tests/openai_client/requirements.txt"
        );
        eprintln!(
            "skipped: python3 cannot import openai (pip install -r tests/openai_client/requirements.txt)"
        );
        return;
    }
    let mut child = Command::new(mock_server_binary())
        .args([
            "--listen",
            "127.0.0.1:0",
            "--model",
            "tiny",
            "--max-context",
            "512",
        ])
        .args(["--ttft-ms", "5", "--itl-ms", "2", "--tokens", "24"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("start mock_server");
    let stdout = child.stdout.take().expect("piped stdout");
    let server = Server(child);
    let mut line = String::new();
    BufReader::new(stdout)
        .read_line(&mut line)
        .expect("read the listening line");
    let base = line
        .trim()
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("unexpected first line from mock_server: {line:?}"))
        .to_owned();

    let script = workspace_root().join("tests/openai_client/test_client.py");
    let mut python = Command::new("python3")
        .arg(&script)
        .arg(format!("{base}/v1"))
        .arg("tiny")
        .spawn()
        .expect("start python3");
    let deadline = Instant::now() + Duration::from_secs(300);
    let status = loop {
        if let Some(status) = python.try_wait().expect("wait for python3") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = python.kill();
            let _ = python.wait();
            panic!("test_client.py did not finish within 300 s");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    drop(server);
    assert!(status.success(), "test_client.py failed: {status}");
}
