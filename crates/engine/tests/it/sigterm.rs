//! Graceful preemption with a real signal: the `ferry-engine-train` rank process gets SIGTERM
//! mid-run, writes a checkpoint of the step it finished, exits 0, and resumes from it.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use ferry_engine::{Architecture, ModelSource, read_state};

use crate::common::{TempDir, corpus, tiny_arch, tiny_config};

#[test]
fn sigterm_writes_a_checkpoint_exits_cleanly_and_the_run_resumes() {
    let dir = TempDir::new("sigterm");
    let (text, tok) = corpus(dir.path(), 20_000, 320);
    let mut cfg = tiny_config(
        ModelSource::Arch(tiny_arch(Architecture::Llama, false)),
        &text,
        Some(&tok),
        &dir.path().join("ck"),
        100_000,
    );
    let cfg_path = dir.path().join("train.json");
    std::fs::write(&cfg_path, serde_json::to_vec(&cfg).unwrap()).unwrap();
    let exe = env!("CARGO_BIN_EXE_ferry-engine-train");
    let mut child = Command::new(exe)
        .arg(&cfg_path)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut last_step = 0;
    for line in BufReader::new(child.stdout.take().unwrap()).lines() {
        let v: serde_json::Value = serde_json::from_str(&line.unwrap()).unwrap();
        last_step = v["step"].as_u64().unwrap() as usize;
        if last_step == 2 {
            let kill = Command::new("kill")
                .args(["-TERM", &child.id().to_string()])
                .status()
                .unwrap();
            assert!(kill.success());
        }
    }
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "trainer exited with {}", out.status);
    let summary: serde_json::Value = serde_json::from_slice(&out.stderr).unwrap();
    assert_eq!(summary["stoppedEarly"], true);
    assert_eq!(summary["steps"].as_u64().unwrap() as usize, last_step);
    assert!((2..100_000).contains(&last_step));
    let ck = dir
        .path()
        .join("ck")
        .join(format!("checkpoint-{last_step}"));
    assert_eq!(read_state(&ck).unwrap().step, last_step);

    // Resuming through FERRY_RESUME_FROM with a different plan is refused, naming the field.
    cfg.steps = Some(last_step + 2);
    std::fs::write(&cfg_path, serde_json::to_vec(&cfg).unwrap()).unwrap();
    let out = Command::new(exe)
        .arg(&cfg_path)
        .env("FERRY_RESUME_FROM", &ck)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("steps"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
