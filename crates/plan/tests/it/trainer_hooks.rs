//! The launch of a TRL job (torchrun, DeepSpeed) as a real shell and a real Python run it:
//! `ferry_trainer.py` turns SIGTERM into one checkpoint at the next step end and an exit with
//! 143 and prints the Trainer's logs as Ferry metrics lines; a data file reaches TRL as the
//! directory `datasets` can load; a restart resumes from the newest complete checkpoint. A stand-in
//! `transformers` (the Trainer's callback protocol: `on_train_begin`, `on_step_end`, `on_save`,
//! `on_log`)
//! replaces the real one, which is checked on a GPU host (`scripts/gpu/trl_preempt.sh`).

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use ferry_plan::{JobLaunch, JobPaths};

/// The Trainer's loop as far as callbacks see it: one `on_step_end` per step, a save when a
/// callback asks for one, a stop when one asks for it.
const FAKE_TRANSFORMERS: &str = r#"
import time

class TrainerCallback:
    pass

class TrainerControl:
    def __init__(self):
        self.should_save = False
        self.should_training_stop = False

class TrainerState:
    global_step = 0
    max_steps = 0
    is_world_process_zero = True

class Trainer:
    def __init__(self, steps):
        self.callbacks = []
        self.steps = steps

    def add_callback(self, callback):
        self.callbacks.append(callback)

    def train(self):
        state, control = TrainerState(), TrainerControl()
        state.max_steps = self.steps
        for cb in self.callbacks:
            cb.on_train_begin(None, state, control)
        print("training", flush=True)
        for step in range(1, self.steps + 1):
            time.sleep(0.01)
            state.global_step = step
            for cb in self.callbacks:
                control = cb.on_step_end(None, state, control) or control
            if step % 10 == 0:
                logs = {"loss": 2.0 / step, "learning_rate": "2e-4", "note": "x", "bad": float("nan")}
                for cb in self.callbacks:
                    cb.on_log(None, state, control, logs=logs)
            if control.should_save:
                print(f"saved checkpoint-{step}", flush=True)
                control.should_save = False
                for cb in self.callbacks:
                    cb.on_save(None, state, control)
            if control.should_training_stop:
                break
        for cb in self.callbacks:
            cb.on_train_end(None, state, control)
        print("finished", flush=True)
"#;

/// Stands in for `trl.scripts.sft` and ms-swift's `swift.cli.sft`: prints what it was given,
/// waits if asked, then trains.
const FAKE_SFT: &str = r#"
import os, sys, time
import transformers
args = sys.argv[1:]
print("argv0", sys.argv[0], flush=True)
data = args[args.index("--dataset_name" if "--dataset_name" in args else "--dataset") + 1]
if "--add_version" in args:
    print("add_version", args[args.index("--add_version") + 1], flush=True)
import inspect
# Trainers built on this one read its signature (ms-swift picks `processing_class` by it).
print("trainer params", list(inspect.signature(transformers.Trainer.__init__).parameters), flush=True)
if "--tuner_type" in args or "--train_type" in args:
    # ms-swift 4 refuses the 3.x name.
    print("tuner", "--tuner_type" in args and "--train_type" not in args, flush=True)
if "--model_type" in args:
    import json
    print("extra", json.dumps(args[args.index("--model_type"):]), flush=True)
if "--resume_from_checkpoint" in args:
    print("resume", args[args.index("--resume_from_checkpoint") + 1], flush=True)
print("dataset", data, sorted(os.listdir(data)) if os.path.isdir(data) else "not a directory", flush=True)
if os.environ.get("FAKE_WAIT"):
    print("loading", flush=True)
    time.sleep(60)
transformers.Trainer(int(args[args.index("--max_steps") + 1])).train()
"#;

/// Stands in for `torch.utils.data`: a DataLoader keeps its worker count and init function.
const FAKE_TORCH_DATA: &str = r#"
class DataLoader:
    def __init__(self, dataset=None, num_workers=0, worker_init_fn=None):
        self.num_workers = num_workers
        self.worker_init_fn = worker_init_fn
"#;

/// Run under `ferry_trainer` as the training module would be: makes a DataLoader with a
/// worker, sends its init function through pickle (as a spawned worker gets it), runs it in
/// a forked worker, checks the worker left the process group Ferry signals, and stops it as
/// the loader's shutdown does.
const WORKER_PROBE: &str = r#"
import os, pickle, signal, sys, time
import torch.utils.data as data
seen = []
loader = data.DataLoader([], num_workers=1, worker_init_fn=seen.append)
init = pickle.loads(pickle.dumps(data.DataLoader([], num_workers=1).worker_init_fn))
pid = os.fork()
if pid == 0:
    init(0)
    loader.worker_init_fn(3)
    print("loader's own init ran", seen == [3], flush=True)
    time.sleep(10)
    os._exit(0)
time.sleep(1)
print("worker left the rank's process group", os.getpgid(pid) != os.getpgid(0), flush=True)
# What the loader's own shutdown sends it.
os.kill(pid, signal.SIGTERM)
time.sleep(1)
done, status = os.waitpid(pid, os.WNOHANG)
print("worker ends on its parent's SIGTERM", done == pid and os.WIFSIGNALED(status), flush=True)
"#;

/// Ferry signals the whole process group: a DataLoader worker (ms-swift starts one by
/// default) must not get that SIGTERM, or the next batch fails before the checkpoint is
/// written (found on an H200), yet its parent must still be able to stop it (ignoring
/// SIGTERM instead hung the process at exit, also found there); the loader's own init runs.
#[test]
fn dataloader_workers_leave_the_signalled_group_and_their_init_still_runs() {
    let dir = tempfile::tempdir().unwrap();
    let site = dir.path().join("site");
    std::fs::create_dir_all(site.join("transformers")).unwrap();
    std::fs::create_dir_all(site.join("torch/utils/data")).unwrap();
    std::fs::write(site.join("transformers/__init__.py"), FAKE_TRANSFORMERS).unwrap();
    std::fs::write(site.join("torch/__init__.py"), "").unwrap();
    std::fs::write(site.join("torch/utils/__init__.py"), "").unwrap();
    std::fs::write(site.join("torch/utils/data/__init__.py"), FAKE_TORCH_DATA).unwrap();
    std::fs::write(site.join("probe.py"), WORKER_PROBE).unwrap();
    let launch = trl_launch(dir.path(), &dir.path().join("d.jsonl"), 1);
    std::fs::write(
        site.join("ferry_trainer.py"),
        &launch.files["ferry_trainer.py"],
    )
    .unwrap();
    let out = Command::new("python3")
        .args(["-m", "ferry_trainer", "probe"])
        .env("PYTHONPATH", &site)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("loader's own init ran True"),
        "{stdout}\n{stderr}"
    );
    assert!(
        stdout.contains("worker left the rank's process group True"),
        "{stdout}\n{stderr}"
    );
    assert!(
        stdout.contains("worker ends on its parent's SIGTERM True"),
        "{stdout}\n{stderr}"
    );
}

/// A scratch directory with a one-line chat data file called `name`.
fn workdir(name: &str) -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join(name);
    std::fs::write(&data, "{\"messages\": []}\n").unwrap();
    (dir, data)
}

/// The launch Ferry renders for a one-GPU TRL LoRA job of `steps` steps on `data`.
fn trl_launch(dir: &Path, data: &Path, steps: u32) -> JobLaunch {
    launch("torchrun", dir, data, steps)
}

/// The launch Ferry renders for a one-GPU LoRA job with `engine` (an HF Trainer engine).
fn launch(engine: &str, dir: &Path, data: &Path, steps: u32) -> JobLaunch {
    launch_with(engine, dir, data, steps, "")
}

/// [`launch`] with more spec lines (`extra`, indented as spec fields).
fn launch_with(engine: &str, dir: &Path, data: &Path, steps: u32, extra: &str) -> JobLaunch {
    let yaml = format!(
        "apiVersion: ferry.dev/v1alpha1\nkind: TrainJob\nmetadata: {{name: j}}\nspec:\n  engine: {engine}\n  method: lora\n  model: {{source: hf, id: Qwen/Qwen2.5-0.5B}}\n  resources: {{nodes: 1, gpusPerNode: 1, gpu: H100-80GB}}\n  train: {{steps: {steps}}}\n  checkpoint: {{every: 100000}}\n{extra}"
    );
    let job = match ferry_spec::parse_documents(&yaml, "j.yaml")
        .unwrap()
        .remove(0)
    {
        ferry_spec::Resource::TrainJob(j) => j,
        other => panic!("{other:?}"),
    };
    let shape = ferry_plan::shape_of("Qwen/Qwen2.5-0.5B").unwrap();
    let request = ferry_plan::request_for_job(&job, shape, "Qwen/Qwen2.5-0.5B").unwrap();
    let report = ferry_plan::plan(&request).unwrap();
    let paths = JobPaths {
        data: data.to_string_lossy().into_owned(),
        checkpoint_dir: dir.join("ckpt").to_string_lossy().into_owned(),
        config_dir: dir.join("config dir").to_string_lossy().into_owned(),
    };
    ferry_plan::job_launch(&job, &report, &paths).unwrap()
}

/// Writes the launch's files, the stand-ins, and a `torchrun` that runs the module it is
/// given with python3; starts the script.
fn start(dir: &Path, launch: &JobLaunch, wait_before_training: bool) -> Child {
    let config = dir.join("config dir");
    std::fs::create_dir_all(&config).unwrap();
    for (name, text) in &launch.files {
        std::fs::write(config.join(name), text).unwrap();
    }
    let site = dir.join("site");
    std::fs::create_dir_all(site.join("transformers")).unwrap();
    std::fs::create_dir_all(site.join("trl/scripts")).unwrap();
    std::fs::write(site.join("transformers/__init__.py"), FAKE_TRANSFORMERS).unwrap();
    std::fs::write(site.join("trl/__init__.py"), "").unwrap();
    std::fs::write(site.join("trl/scripts/__init__.py"), "").unwrap();
    std::fs::write(site.join("trl/scripts/sft.py"), FAKE_SFT).unwrap();
    std::fs::create_dir_all(site.join("swift/cli")).unwrap();
    std::fs::write(site.join("swift/__init__.py"), "").unwrap();
    std::fs::write(site.join("swift/cli/__init__.py"), "").unwrap();
    std::fs::write(site.join("swift/cli/sft.py"), FAKE_SFT).unwrap();
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    // torchrun's own flags end at `-m`; the worker is `python3 -m MODULE ARGS`.
    let torchrun = "#!/bin/sh\nwhile [ \"$1\" != \"-m\" ]; do shift; done\nexec python3 \"$@\"\n";
    let path = bin.join("torchrun");
    std::fs::write(&path, torchrun).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut cmd = Command::new(&launch.argv()[0]);
    cmd.args(&launch.argv()[1..])
        .env("PATH", format!("{}:/usr/bin:/bin", bin.display()))
        .env("PYTHONPATH", &site)
        .env("MASTER_PORT", "29500")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if wait_before_training {
        cmd.env("FAKE_WAIT", "1");
    }
    cmd.spawn().expect("/bin/sh runs the launch script")
}

/// Runs the launch to its end; asserts it succeeded and returns its stdout.
fn run_to_end(dir: &Path, launch: &JobLaunch) -> String {
    let out = start(dir, launch, false).wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// Reads stdout until a line starts with `prefix`; returns the lines read.
fn read_until(lines: &mut impl Iterator<Item = String>, prefix: &str) -> Vec<String> {
    let mut seen = Vec::new();
    for line in lines.by_ref() {
        let done = line.starts_with(prefix);
        seen.push(line);
        if done {
            return seen;
        }
    }
    panic!("no line starting with {prefix:?} in {seen:#?}");
}

fn sigterm(child: &Child) {
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

/// Waits for the exit (at most 30 s) and returns (code, the rest of stdout, stderr).
fn finish(
    mut child: Child,
    lines: impl Iterator<Item = String>,
) -> (Option<i32>, Vec<String>, String) {
    let deadline = Instant::now() + Duration::from_secs(30);
    let rest: Vec<String> = lines.collect();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(
            Instant::now() < deadline,
            "still running 30 s after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut err = String::new();
    std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut err).unwrap();
    (status.code(), rest, err)
}

#[test]
fn sigterm_during_training_saves_one_checkpoint_at_the_step_end_and_exits_143() {
    let (dir, data) = workdir("my chats.jsonl");
    let launch = trl_launch(dir.path(), &data, 100_000);
    let head = sigterm_mid_training(dir.path(), &launch);
    assert!(
        head[0].starts_with("argv0 ") && head[0].ends_with("/trl/scripts/sft.py"),
        "TRL's script runs as `python -m` would run it: {head:#?}"
    );
    let dataset = head.iter().find(|l| l.starts_with("dataset ")).unwrap();
    assert!(
        dataset.ends_with("['train.jsonl']"),
        "the data file reaches TRL as a directory holding train.jsonl: {dataset}"
    );
}

#[test]
fn an_ms_swift_job_checkpoints_on_sigterm_too_and_keeps_its_checkpoints_where_ferry_looks() {
    let (dir, data) = workdir("chat.jsonl");
    // A local model ms-swift cannot name needs its model type and template: `extraArgs`
    // reach the program as written, after Ferry's flags.
    let launch = launch_with(
        "swift",
        dir.path(),
        &data,
        100_000,
        "  extraArgs: [--model_type, llama, --template, \"chat ml's $HOME\"]\n",
    );
    let head = sigterm_mid_training(dir.path(), &launch);
    assert!(
        head.iter()
            .any(|l| l == r#"extra ["--model_type", "llama", "--template", "chat ml's $HOME"]"#),
        "{head:#?}"
    );
    assert!(
        head[0].starts_with("argv0 ") && head[0].ends_with("/swift/cli/sft.py"),
        "ms-swift's entry point runs as its CLI would run it: {head:#?}"
    );
    assert!(
        head.iter().any(|l| l == "trainer params ['self', 'steps']"),
        "the hooked Trainer keeps its signature: {head:#?}"
    );
    assert!(
        head.iter().any(|l| l == "tuner True"),
        "ms-swift 4's --tuner_type: {head:#?}"
    );
    assert!(
        head.iter().any(|l| l == "add_version false"),
        "no per-run v<N>-<time>/ folder under the checkpoint directory: {head:#?}"
    );
    let dataset = head.iter().find(|l| l.starts_with("dataset ")).unwrap();
    assert!(
        dataset.ends_with("not a directory"),
        "ms-swift loads data files itself: {dataset}"
    );
}

/// Starts `launch`, sends SIGTERM once it trains, and asserts one checkpoint at a step end and
/// exit 143; returns the lines printed before training.
fn sigterm_mid_training(dir: &Path, launch: &JobLaunch) -> Vec<String> {
    assert!(launch.files.contains_key("ferry_trainer.py"));
    let mut child = start(dir, launch, false);
    let mut lines = BufReader::new(child.stdout.take().unwrap())
        .lines()
        .map(Result::unwrap);
    let head = read_until(&mut lines, "training");
    std::thread::sleep(Duration::from_millis(300));
    sigterm(&child);
    let (code, rest, err) = finish(child, lines);
    assert_eq!(code, Some(143), "stdout {rest:#?}\nstderr {err}");
    let saves: Vec<&String> = rest.iter().filter(|l| l.starts_with("saved ")).collect();
    assert_eq!(saves.len(), 1, "one checkpoint: {rest:#?}");
    let step: u32 = saves[0]["saved checkpoint-".len()..].parse().unwrap();
    assert!(step >= 5, "saved at a step end after some training: {step}");
    assert!(
        !rest.iter().any(|l| l == "finished"),
        "exits, not finishes: {rest:#?}"
    );
    assert!(
        err.contains(&format!(
            "ferry: checkpoint-{step} saved after SIGTERM; exiting"
        )),
        "{err}"
    );
    head
}

#[test]
fn sigterm_before_training_exits_at_once_without_a_checkpoint() {
    let (dir, data) = workdir("chat.jsonl");
    let launch = trl_launch(dir.path(), &data, 100);
    let mut child = start(dir.path(), &launch, true);
    let mut lines = BufReader::new(child.stdout.take().unwrap())
        .lines()
        .map(Result::unwrap);
    read_until(&mut lines, "loading");
    let stopped = Instant::now();
    sigterm(&child);
    let (code, rest, err) = finish(child, lines);
    assert_eq!(code, Some(143), "stdout {rest:#?}\nstderr {err}");
    assert!(
        stopped.elapsed() < Duration::from_secs(20),
        "did not wait out the load"
    );
    assert!(!rest.iter().any(|l| l.starts_with("saved ")), "{rest:#?}");
    assert!(err.contains("SIGTERM before training started"), "{err}");
}

#[test]
fn the_trainers_logs_become_metrics_lines_with_the_step_and_the_total() {
    let (dir, data) = workdir("chat.jsonl");
    let launch = trl_launch(dir.path(), &data, 25);
    let stdout = run_to_end(dir.path(), &launch);
    let metrics: Vec<serde_json::Value> = stdout
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}")))
        .collect();
    assert_eq!(
        metrics.len(),
        2,
        "a line per log, steps 10 and 20: {stdout}"
    );
    assert_eq!(metrics[1]["step"], 20);
    assert_eq!(metrics[1]["max_steps"], 25);
    assert_eq!(metrics[1]["loss"], 0.1);
    assert_eq!(
        metrics[1]["learning_rate"], 2e-4,
        "numbers logged as text are numbers"
    );
    assert!(
        metrics[1].get("note").is_none() && metrics[1].get("bad").is_none(),
        "text and NaN are left out: {}",
        metrics[1]
    );
}

#[test]
fn a_hub_dataset_name_passes_through_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let launch = trl_launch(dir.path(), Path::new("trl-lib/Capybara"), 3);
    let stdout = run_to_end(dir.path(), &launch);
    assert!(
        stdout.contains("dataset trl-lib/Capybara not a directory"),
        "{stdout}"
    );
    assert!(stdout.contains("finished"), "{stdout}");
}

#[test]
fn a_restart_resumes_from_the_newest_complete_checkpoint() {
    let (dir, data) = workdir("chat.jsonl");
    let ckpt = dir.path().join("ckpt");
    // checkpoint-7 was cut off by SIGKILL: the Trainer writes trainer_state.json last.
    for (step, complete) in [(5, true), (7, false), (40, true), (41, false)] {
        let d = ckpt.join(format!("checkpoint-{step}"));
        std::fs::create_dir_all(&d).unwrap();
        if complete {
            std::fs::write(d.join("trainer_state.json"), "{}").unwrap();
        }
    }
    let launch = trl_launch(dir.path(), &data, 3);
    let stdout = run_to_end(dir.path(), &launch);
    let resume = format!("resume {}", ckpt.join("checkpoint-40").display());
    assert!(stdout.lines().any(|l| l == resume), "{stdout}");
}
