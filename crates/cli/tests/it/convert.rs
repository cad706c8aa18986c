//! `ferry convert` from the command line: a real Megatron-Core fixture to HF files.

use serde_json::Value;

use crate::harness::{OutputText, ferry_bin, repo_root};

#[test]
fn convert_turns_a_megatron_fixture_into_hf_files() {
    let src = repo_root().join("../shared/fixtures/megatron/llama-tp2-pp2/legacy");
    let dst = tempfile::tempdir().unwrap();
    let out_dir = dst.path().join("hf");
    let out = std::process::Command::new(ferry_bin())
        .args([
            "convert",
            src.to_str().unwrap(),
            out_dir.to_str().unwrap(),
            "-o",
            "json",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", out.stderr_text());
    let report: Value = serde_json::from_str(&out.stdout_text()).unwrap();
    assert_eq!(report["source_parallel"]["tp"], 2);
    assert_eq!(report["source_parallel"]["pp"], 2);
    for file in ["config.json", "model.safetensors", "generation_config.json"] {
        assert!(out_dir.join(file).is_file(), "{file} missing");
    }

    let bad = std::process::Command::new(ferry_bin())
        .args([
            "convert",
            src.to_str().unwrap(),
            out_dir.to_str().unwrap(),
            "--to",
            "onnx",
        ])
        .output()
        .unwrap();
    assert!(!bad.status.success());
    let err = bad.stderr_text();
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("--to: unknown format"), "{err}");
}
