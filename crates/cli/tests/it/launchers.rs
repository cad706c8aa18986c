//! Launcher engines on `ferry up`: the planner renders the job's torchrun command, one
//! launcher process per node runs it with every GPU of the node, and a restart resumes
//! from the newest checkpoint. A stand-in `torchrun` on the job's `PATH` records what it
//! was given (no PyTorch here); plans that cannot run are refused at apply.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

use crate::harness::Plane;

/// Records its argv and GPUs, writes `checkpoint-<attempt>` (with `trainer_state.json`, written
/// last) into `--output_dir` like the HF Trainer, and fails its first attempt so the control plane restarts it.
const FAKE_TORCHRUN: &str = r#"#!/bin/sh
out="$FERRY_RUN_DIR/torchrun-node$NODE_RANK-attempt$FERRY_ATTEMPT"
printf '%s\n' "$@" > "$out.argv"
printf '%s\n' "${CUDA_VISIBLE_DEVICES:-}" > "$out.gpus"
dir=""
while [ $# -gt 0 ]; do
  if [ "$1" = "--output_dir" ]; then dir="$2"; fi
  shift
done
mkdir -p "$dir/checkpoint-$FERRY_ATTEMPT"
echo '{"model_type": "qwen2"}' > "$dir/checkpoint-$FERRY_ATTEMPT/config.json"
echo "{\"global_step\": $FERRY_ATTEMPT}" > "$dir/checkpoint-$FERRY_ATTEMPT/trainer_state.json"
[ "$FERRY_ATTEMPT" -ge 2 ]
"#;

fn job(name: &str, engine: &str, method: &str, model: &str, bin: &Path, data: &Path) -> String {
    format!(
        "apiVersion: ferry.dev/v1alpha1
kind: TrainJob
metadata: {{name: {name}}}
spec:
  engine: {engine}
  method: {method}
  model: {{source: hf, id: {model}}}
  data: {{path: {data}, format: chat}}
  resources: {{nodes: 1, gpusPerNode: 2, gpu: H100-80GB}}
  train: {{seqLen: 1024, lr: 2e-4, steps: 200}}
  checkpoint: {{every: 50, keep: 2}}
  onFailure: {{maxRestarts: 1, resume: latest}}
  env: {{PATH: '{bin}:/usr/bin:/bin'}}
",
        bin = bin.display(),
        data = data.display(),
    )
}

fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .lines()
        .map(str::to_owned)
        .collect()
}

/// The value following `flag` in an argv.
fn after<'a>(argv: &'a [String], flag: &str) -> &'a str {
    let i = argv
        .iter()
        .position(|a| a == flag)
        .unwrap_or_else(|| panic!("no {flag} in {argv:?}"));
    &argv[i + 1]
}

#[test]
fn a_torchrun_job_runs_the_planned_launch_once_per_node_and_resumes_after_a_failure() {
    let plane = Plane::start(Some(2));
    let bin = plane.home.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let torchrun = bin.join("torchrun");
    std::fs::write(&torchrun, FAKE_TORCHRUN).unwrap();
    std::fs::set_permissions(&torchrun, std::fs::Permissions::from_mode(0o755)).unwrap();
    let data = plane.home.path().join("chat.jsonl");
    std::fs::write(&data, "{\"messages\": []}\n").unwrap();

    let spec = job(
        "qwen-lora",
        "torchrun",
        "lora",
        "Qwen/Qwen2.5-0.5B",
        &bin,
        &data,
    );
    plane.apply("qwen-lora.yaml", &spec);
    let done = plane.wait_phase("qwen-lora", "Succeeded", Duration::from_secs(120));
    assert_eq!(done["status"]["restarts"], 1, "{done}");

    let run_dir = std::fs::read_dir(plane.home.path())
        .unwrap()
        .flatten()
        .flat_map(|e| walk(&e.path()))
        .find(|p| p.ends_with("torchrun-node0-attempt1.argv"))
        .and_then(|p| p.parent().map(Path::to_path_buf))
        .expect("the launcher ran");
    // One launcher process for the node, not one per GPU: torchrun starts those itself.
    for attempt in [1, 2] {
        assert!(
            !run_dir
                .join(format!("torchrun-node1-attempt{attempt}.argv"))
                .exists()
        );
        let gpus = lines(&run_dir.join(format!("torchrun-node0-attempt{attempt}.gpus")));
        assert_eq!(gpus, ["0,1"], "attempt {attempt} holds both GPUs");
    }

    let first = lines(&run_dir.join("torchrun-node0-attempt1.argv"));
    assert_eq!(after(&first, "--nproc-per-node"), "2");
    // TRL's script runs under Ferry's SIGTERM wrapper, importable from the run directory.
    assert_eq!(after(&first, "-m"), "ferry_trainer");
    assert_eq!(after(&first, "ferry_trainer"), "trl.scripts.sft");
    assert!(run_dir.join("ferry_trainer.py").is_file());
    assert_eq!(after(&first, "--model_name_or_path"), "Qwen/Qwen2.5-0.5B");
    // The data file reaches TRL as a directory `datasets` can load.
    let dataset = Path::new(after(&first, "--dataset_name"));
    assert_eq!(
        std::fs::canonicalize(dataset.join("train.jsonl")).unwrap(),
        std::fs::canonicalize(&data).unwrap()
    );
    assert_eq!(after(&first, "--max_length"), "1024");
    assert_eq!(after(&first, "--learning_rate"), "2e-4");
    assert!(first.contains(&"--use_peft".to_owned()), "{first:?}");
    // The job's step budget and checkpoint cadence reach the trainer.
    assert_eq!(after(&first, "--max_steps"), "200");
    assert_eq!(after(&first, "--save_steps"), "50");
    assert_eq!(after(&first, "--save_total_limit"), "2");
    assert!(
        !first.contains(&"--resume_from_checkpoint".to_owned()),
        "nothing to resume from on the first attempt: {first:?}"
    );
    let checkpoints = Path::new(after(&first, "--output_dir")).to_path_buf();
    assert!(checkpoints.join("checkpoint-1").is_dir());

    let second = lines(&run_dir.join("torchrun-node0-attempt2.argv"));
    assert_eq!(
        after(&second, "--resume_from_checkpoint"),
        checkpoints.join("checkpoint-1").to_str().unwrap(),
        "the restart resumes from the first attempt's checkpoint"
    );
}

#[test]
fn plans_that_cannot_run_are_refused_at_apply_with_the_field() {
    let plane = Plane::start(Some(2));
    let bin = plane.home.path();
    let data = plane.home.path().join("chat.jsonl");
    let refuse = |name: &str, text: String, needles: &[&str]| {
        let path = plane.write(&format!("{name}.yaml"), &text);
        let out = plane.ferry(&["apply", "-f", &path]);
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(!out.status.success(), "{name} was accepted");
        for n in needles {
            assert!(err.contains(n), "{name}: no {n:?} in {err}");
        }
        assert!(
            plane.ferry(&["get", "job", name]).status.code() != Some(0),
            "{name} was stored"
        );
    };
    refuse(
        "megatron-lora",
        job(
            "megatron-lora",
            "megatron",
            "lora",
            "Qwen/Qwen2.5-0.5B",
            bin,
            &data,
        ),
        &["spec.method", "full weights"],
    );
    refuse(
        "unknown-model",
        job(
            "unknown-model",
            "torchrun",
            "lora",
            "acme/NotAModel-9B",
            bin,
            &data,
        ),
        &["spec.model.id", "acme/NotAModel-9B", "source: path"],
    );
    refuse(
        "too-big",
        job(
            "too-big",
            "deepspeed",
            "full",
            "meta-llama/Meta-Llama-3-70B",
            bin,
            &data,
        ),
        &["spec", "nothing fits"],
    );
}

fn walk(path: &Path) -> Vec<std::path::PathBuf> {
    if path.is_dir() {
        std::fs::read_dir(path)
            .map(|d| d.flatten().flat_map(|e| walk(&e.path())).collect())
            .unwrap_or_default()
    } else {
        vec![path.to_path_buf()]
    }
}

#[test]
fn plan_render_prints_the_jobs_own_values() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("chat.jsonl");
    let spec = job(
        "render",
        "torchrun",
        "lora",
        "Qwen/Qwen2.5-0.5B",
        dir.path(),
        &data,
    );
    let file = dir.path().join("job.yaml");
    std::fs::write(&file, spec).unwrap();
    let plan = |launcher: &str| {
        std::process::Command::new(crate::harness::ferry_bin())
            .args(["plan", "-f", file.to_str().unwrap(), "--render", launcher])
            .output()
            .unwrap()
    };
    let out = plan("torchrun");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for needle in [
        "--learning_rate 2e-4",
        "--max_steps 200",
        "--save_steps 50",
        "--save_total_limit 2",
        "--output_dir $FERRY_CHECKPOINT_DIR",
        &format!("--dataset_name {}", data.display()),
    ] {
        assert!(text.contains(needle), "no {needle:?} in {text}");
    }
    let out = plan("slurm");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("--render") && err.contains("\"slurm\""),
        "{err}"
    );
}
