//! Starting `ferry up` on a free port with a private `FERRY_HOME`, and running CLI
//! commands against it.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// The repository root (examples are applied from there, as a user would).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

/// The `ferry` binary under test.
pub fn ferry_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_ferry"))
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// One control plane under test; killed when dropped.
pub struct Plane {
    pub home: tempfile::TempDir,
    pub url: String,
    listen: String,
    gpus: Option<u32>,
    /// Flags that name a settings file (`--scheduler-options`, `--priority-classes`).
    files: Vec<(String, PathBuf)>,
    child: Option<Child>,
}

impl Plane {
    /// Starts `ferry up` with `--gpus N` (virtual slots) when given.
    pub fn start(gpus: Option<u32>) -> Plane {
        Self::start_with(gpus, &[])
    }

    /// `start` with settings files: each `(flag, text)` is written to the plane's home and
    /// given as `flag FILE` (`("--scheduler-options", "holdForOwed: true")`).
    pub fn start_with(gpus: Option<u32>, files: &[(&str, &str)]) -> Plane {
        let port = free_port();
        let home = tempfile::tempdir().unwrap();
        let files = files
            .iter()
            .map(|(flag, text)| {
                let path = home
                    .path()
                    .join(format!("{}.yaml", flag.trim_start_matches('-')));
                std::fs::write(&path, text).unwrap();
                (flag.to_string(), path)
            })
            .collect();
        let mut plane = Plane {
            home,
            url: format!("http://127.0.0.1:{port}"),
            listen: format!("127.0.0.1:{port}"),
            gpus,
            files,
            child: None,
        };
        plane.spawn();
        plane
    }

    fn spawn(&mut self) {
        let mut cmd = Command::new(ferry_bin());
        cmd.args(["up", "--listen", &self.listen, "--gateway", "127.0.0.1:0"])
            .env("FERRY_HOME", self.home.path())
            .env("FERRY_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::from(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(self.home.path().join("up.log"))
                    .unwrap(),
            ));
        if let Some(n) = self.gpus {
            cmd.args(["--gpus", &n.to_string()]);
        }
        for (flag, path) in &self.files {
            cmd.arg(flag).arg(path);
        }
        self.child = Some(cmd.spawn().unwrap());
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if self
                .ferry(&["version"])
                .stdout_text()
                .contains("control plane")
                && self.healthy()
            {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "ferry up did not answer: {}",
                self.server_log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn healthy(&self) -> bool {
        std::net::TcpStream::connect(&self.listen).is_ok()
    }

    /// `kill -9` of the control plane (its rank processes keep running).
    pub fn kill_hard(&mut self) {
        if let Some(mut child) = self.child.take() {
            child.kill().unwrap();
            child.wait().unwrap();
        }
    }

    /// Starts the control plane again on the same home and port.
    pub fn restart(&mut self) {
        self.kill_hard();
        self.spawn();
    }

    /// What `ferry up` printed so far.
    pub fn server_log(&self) -> String {
        std::fs::read_to_string(self.home.path().join("up.log")).unwrap_or_default()
    }

    /// Runs a `ferry` client command from the repository root.
    pub fn ferry(&self, args: &[&str]) -> Output {
        Command::new(ferry_bin())
            .args(args)
            .current_dir(repo_root())
            .env("FERRY_URL", &self.url)
            .output()
            .unwrap()
    }

    /// Runs a client command that must succeed; returns its stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        let out = self.ferry(args);
        assert!(
            out.status.success(),
            "ferry {args:?} failed: {}\nserver log:\n{}",
            out.stderr_text(),
            self.server_log()
        );
        out.stdout_text()
    }

    /// The job as JSON.
    pub fn job(&self, name: &str) -> Value {
        serde_json::from_str(&self.ok(&["get", "job", name, "-o", "json"]))
            .map(|v: Value| v[0].clone())
            .unwrap()
    }

    /// Polls the job until its phase is `phase`, failing after `timeout`.
    pub fn wait_phase(&self, name: &str, phase: &str, timeout: Duration) -> Value {
        let deadline = Instant::now() + timeout;
        loop {
            let job = self.job(name);
            if job["status"]["phase"] == phase {
                return job;
            }
            let terminal = ["Succeeded", "Failed", "Cancelled"];
            if terminal.contains(&job["status"]["phase"].as_str().unwrap_or("")) {
                panic!(
                    "job {name} ended {} while waiting for {phase}: {}\n{}",
                    job["status"]["phase"],
                    self.ok(&["describe", "job", name]),
                    self.ok(&["logs", name])
                );
            }
            assert!(
                Instant::now() < deadline,
                "job {name} not {phase} after {timeout:?}: {}",
                self.ok(&["describe", "job", name])
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Polls rank 0's log until it contains `needle`, failing after `timeout`; returns it.
    pub fn wait_log(&self, name: &str, needle: &str, timeout: Duration) -> String {
        let deadline = Instant::now() + timeout;
        loop {
            // A job just marked Running may have no rank log yet: `ferry logs` says so and fails.
            let out = self.ferry(&["logs", name]);
            let log = out.stdout_text();
            if log.contains(needle) {
                return log;
            }
            assert!(
                Instant::now() < deadline,
                "no {needle:?} in the log of {name}: {log}{}",
                out.stderr_text()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// The job's events as JSON, through the REST API.
    pub fn events(&self, name: &str) -> Vec<Value> {
        let url = format!("{}/api/v1/namespaces/default/jobs/{name}/events", self.url);
        http_get_json(&url)
    }

    /// Writes `text` to `file` in the plane's home and applies it; `ferry apply`'s output.
    pub fn apply(&self, file: &str, text: &str) -> String {
        let path = self.write(file, text);
        self.ok(&["apply", "-f", &path])
    }

    /// Writes `text` to a file in the plane's home and returns its path.
    pub fn write(&self, file: &str, text: &str) -> String {
        let path = self.home.path().join(file);
        std::fs::write(&path, text).unwrap();
        path.to_string_lossy().into_owned()
    }
}

impl Drop for Plane {
    fn drop(&mut self) {
        self.kill_hard();
    }
}

/// One HTTP/1.1 request over std's TCP to `addr` (`host:port`): the status, the head in
/// lower case and the body.
pub fn http(addr: &str, method: &str, path: &str, body: &str) -> (u16, String, String) {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap();
    let status = head[9..12].parse().unwrap();
    (status, head.to_ascii_lowercase(), body.to_owned())
}

/// A tiny HTTP/1.1 GET over std's TCP, so the tests check the API without the CLI.
pub fn http_get_json(url: &str) -> Vec<Value> {
    let body = http_get(url);
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("{url}: {e}: {body}"))
}

/// GET `url`, returning the body of a 200 answer.
pub fn http_get(url: &str) -> String {
    use std::io::{Read, Write};
    let rest = url.strip_prefix("http://").unwrap();
    let (host, path) = rest.split_once('/').unwrap();
    let mut s = std::net::TcpStream::connect(host).unwrap();
    write!(
        s,
        "GET /{path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with("HTTP/1.1 200"), "{url}: {head}");
    if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        dechunk(body)
    } else {
        body.to_owned()
    }
}

fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if n == 0 {
            break;
        }
        out.push_str(&rest[..n]);
        body = &rest[n + 2..];
    }
    out
}

/// Text helpers on a finished command.
pub trait OutputText {
    /// stdout as text.
    fn stdout_text(&self) -> String;
    /// stderr as text.
    fn stderr_text(&self) -> String;
}

impl OutputText for Output {
    fn stdout_text(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }
    fn stderr_text(&self) -> String {
        String::from_utf8_lossy(&self.stderr).into_owned()
    }
}
