//! `ferry gateway` in front of two `ferry mock-engine` processes: real processes,
//! real loopback HTTP. Requests spread over both replicas, `/v1/models` and errors
//! come from the gateway, and SIGTERM drains and exits cleanly.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::harness::{ferry_bin, http};

/// A `ferry` server process printing `listening on http://ADDR` first; killed on drop.
struct Proc {
    child: Child,
    addr: String,
}

impl Proc {
    fn start(args: &[&str]) -> Proc {
        let mut child = Command::new(ferry_bin())
            .args(args)
            .env("FERRY_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let addr = line
            .trim()
            .strip_prefix("listening on http://")
            .unwrap_or_else(|| panic!("ferry {args:?} printed {line:?}"))
            .to_owned();
        Proc { child, addr }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One HTTP/1.1 request; returns (status, headers, body).
#[test]
fn gateway_spreads_over_mock_engines_and_drains_on_sigterm() {
    let a = Proc::start(&[
        "mock-engine",
        "--listen",
        "127.0.0.1:0",
        "--model",
        "m",
        "--tokens",
        "4",
    ]);
    let b = Proc::start(&[
        "mock-engine",
        "--listen",
        "127.0.0.1:0",
        "--model",
        "m",
        "--tokens",
        "4",
    ]);
    let mut gw = Proc::start(&[
        "gateway",
        "--listen",
        "127.0.0.1:0",
        "--policy",
        "round-robin",
        "--backend",
        &format!("m=http://{}", a.addr),
        "--backend",
        &format!("m=http://{}", b.addr),
    ]);
    let mut replicas = std::collections::BTreeSet::new();
    for i in 0..4 {
        let body = format!(
            r#"{{"model":"m","messages":[{{"role":"user","content":"hi {i}"}}],"max_tokens":3}}"#
        );
        let (status, head, text) = http(&gw.addr, "POST", "/v1/chat/completions", &body);
        assert_eq!(status, 200, "{text}");
        assert!(text.contains("\"completion_tokens\":3"), "{text}");
        let replica = head
            .lines()
            .find_map(|l| l.strip_prefix("x-ferry-replica: "))
            .unwrap()
            .to_owned();
        replicas.insert(replica);
    }
    assert_eq!(replicas.len(), 2, "{replicas:?}");
    let (status, _, text) = http(&gw.addr, "GET", "/v1/models", "");
    assert_eq!(status, 200);
    assert!(text.contains("\"id\":\"m\""), "{text}");
    let (status, _, text) = http(
        &gw.addr,
        "POST",
        "/v1/completions",
        r#"{"model":"nope","prompt":"x"}"#,
    );
    assert_eq!(status, 404);
    assert!(text.contains("model_not_found"), "{text}");
    let (status, _, text) = http(&gw.addr, "GET", "/metrics", "");
    assert_eq!(status, 200);
    assert!(text.contains("ferry_gateway_requests_total"), "{text}");

    let term = Command::new("kill")
        .args(["-TERM", &gw.child.id().to_string()])
        .status()
        .unwrap();
    assert!(term.success());
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(s) = gw.child.try_wait().unwrap() {
            break s;
        }
        assert!(Instant::now() < deadline, "ferry gateway ignored SIGTERM");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "{status}");

    let hash = Command::new(ferry_bin())
        .args(["gateway", "--hash-key", "abc"])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&hash.stdout).trim(),
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    );
}
