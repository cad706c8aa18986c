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

#[test]
fn a_megatron_job_with_export_ends_with_a_registered_hf_model_and_its_lineage() {
    use std::time::Duration;

    use crate::harness::Plane;

    let plane = Plane::start(None);
    // A CPU machine cannot run Megatron-LM: the job's "training" writes a real
    // Megatron-Core TP=2/PP=2 checkpoint where Megatron's --save would.
    let src = repo_root().join("../shared/fixtures/megatron/llama-tp2-pp2/legacy");
    plane.apply(
        "megatron.yaml",
        &format!(
            r#"apiVersion: ferry.dev/v1alpha1
kind: TrainJob
metadata: {{name: mega}}
spec:
  engine: megatron
  method: full
  command: ["sh", "-c", "cp -r '{}'/. \"$FERRY_CHECKPOINT_DIR\""]
  resources: {{nodes: 1, procsPerNode: 1, gpusPerNode: 0}}
  export: {{format: hf, register: mega-hf}}
"#,
            src.display()
        ),
    );
    plane.wait_phase("mega", "Succeeded", Duration::from_secs(120));

    let models: Vec<Value> =
        serde_json::from_str(&plane.ok(&["get", "models", "-o", "json"])).unwrap();
    let model = models
        .iter()
        .find(|m| m["name"] == "mega-hf")
        .expect("mega-hf registered");
    assert_eq!(model["format"], "hf-safetensors");
    let job_uid = model["sourceJobUid"].as_str().expect("lineage: job");
    let checkpoint = model["checkpoint"].as_str().expect("lineage: checkpoint");
    assert!(
        checkpoint.contains(&format!("/mega/{job_uid}/checkpoints")),
        "{checkpoint}"
    );
    let dir = std::path::Path::new(model["path"].as_str().unwrap());
    let inspect = std::process::Command::new(ferry_bin())
        .args(["convert", "--inspect", dir.to_str().unwrap(), "-o", "json"])
        .output()
        .unwrap();
    assert!(inspect.status.success(), "{}", inspect.stderr_text());
    let report: Value = serde_json::from_str(&inspect.stdout_text()).unwrap();
    let text = report.to_string();
    assert!(
        text.contains("model.layers.3.mlp.down_proj.weight"),
        "{text}"
    );

    // engine: megatron without a command is planned at apply: LoRA, or no GPU to plan
    // for, is refused there with the field and the fix.
    let refuse = |name: &str, spec: &str, needles: &[&str]| {
        let bad = plane.write(
            &format!("{name}.yaml"),
            &format!("apiVersion: ferry.dev/v1alpha1\nkind: TrainJob\nmetadata: {{name: {name}}}\nspec: {{engine: megatron, model: {{source: hf, id: Qwen/Qwen2.5-7B}}, {spec}}}\n"),
        );
        let out = plane.ferry(&["apply", "-f", &bad]);
        assert!(!out.status.success(), "{name} was accepted");
        let err = out.stderr_text();
        for n in needles {
            assert!(err.contains(n), "{name}: no {n:?} in {err}");
        }
    };
    refuse(
        "lora",
        "method: lora, resources: {gpusPerNode: 8}",
        &["spec.method", "engine: torchrun or swift"],
    );
    refuse(
        "no-gpus",
        "method: full",
        &["spec.resources.gpusPerNode", "at least 1 GPU"],
    );
}
