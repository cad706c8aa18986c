//! The foundation bars: a gang that talks, crash recovery, exact GPU accounting,
//! restarts with resume, cancel, and bad input that stores nothing.

use std::time::{Duration, Instant};

use serde_json::Value;

use crate::harness::{OutputText, Plane, http_get};

const MIN: Duration = Duration::from_secs(60);

#[test]
fn hello_gang_ranks_find_each_other() {
    let plane = Plane::start(None);
    let out = plane.ok(&["apply", "-f", "examples/hello-gang.yaml"]);
    assert_eq!(out.trim(), "trainjob/hello-gang created");
    let job = plane.wait_phase("hello-gang", "Succeeded", MIN);
    assert_eq!(job["status"]["restarts"], 0);

    let rank0 = plane.ok(&["logs", "hello-gang"]);
    assert!(rank0.contains("[0, 1, 2, 3]"), "{rank0}");
    for rank in 0..4 {
        let log = plane.ok(&["logs", "hello-gang", "--rank", &rank.to_string()]);
        assert!(log.contains(&format!("RANK={rank}\n")), "{log}");
        assert!(log.contains("WORLD_SIZE=4\n"), "{log}");
        assert!(log.contains(&format!("NODE_RANK={}\n", rank / 2)), "{log}");
        assert!(log.contains(&format!("LOCAL_RANK={}\n", rank % 2)), "{log}");
        assert!(
            log.contains("NNODES=2\n") && log.contains("NPROC_PER_NODE=2\n"),
            "{log}"
        );
        assert!(log.contains("MASTER_ADDR=127.0.0.1\n"), "{log}");
    }
    let missing = plane.ferry(&["logs", "hello-gang", "--rank", "4"]);
    assert!(!missing.status.success());
    assert!(
        missing.stderr_text().contains("ranks 0..3"),
        "{}",
        missing.stderr_text()
    );

    let reasons: Vec<String> = plane
        .events("hello-gang")
        .iter()
        .map(|e| {
            format!(
                "{}->{}",
                e["from"].as_str().unwrap_or("-"),
                e["to"].as_str().unwrap()
            )
        })
        .collect();
    assert_eq!(
        reasons,
        [
            "-->Pending",
            "Pending->Queued",
            "Queued->Admitted",
            "Admitted->Running",
            "Running->Succeeded"
        ]
    );
    let describe = plane.ok(&["describe", "job", "hello-gang"]);
    assert!(describe.contains("Phase:        Succeeded"), "{describe}");
    assert!(describe.contains("Completed"), "{describe}");

    // The REST API documents itself.
    let openapi: Value =
        serde_json::from_str(&http_get(&format!("{}/openapi.json", plane.url))).unwrap();
    assert_eq!(openapi["openapi"], "3.1.0");
    assert!(openapi["paths"]["/api/v1/apply"].is_object());
}

#[test]
fn a_crashed_control_plane_loses_no_job() {
    let mut plane = Plane::start(None);
    plane.ok(&["apply", "-f", "examples/sleeper.yaml"]);
    plane.wait_phase("sleeper", "Running", MIN);
    std::thread::sleep(Duration::from_secs(4));
    plane.kill_hard();
    std::thread::sleep(Duration::from_secs(2));
    plane.restart();

    let job = plane.wait_phase("sleeper", "Succeeded", 2 * MIN);
    assert_eq!(
        job["status"]["restarts"], 0,
        "the rank was re-adopted, not restarted"
    );
    assert_eq!(job["status"]["attempt"], 1);
    assert_eq!(
        job["status"]["progress"]["step"], 30,
        "metrics kept flowing after the restart"
    );
    let events = plane.events("sleeper");
    let restart = events
        .iter()
        .find(|e| e["reason"] == "ControlPlaneRestarted")
        .unwrap_or_else(|| panic!("no restart event: {events:?}"));
    assert_eq!(restart["from"], "Running");
    assert_eq!(restart["to"], "Running");
    assert!(
        restart["message"]
            .as_str()
            .unwrap()
            .contains("1 of 1 ranks still running"),
        "{restart}"
    );
    assert!(plane.ok(&["logs", "sleeper"]).contains("done"));
}

fn gpu_job(name: &str) -> String {
    format!(
        "apiVersion: ferry.dev/v1alpha1\nkind: TrainJob\nmetadata: {{name: {name}}}\nspec:\n  engine: command\n  command: [sh, -c, 'echo start $(date +%s.%N) gpus=$CUDA_VISIBLE_DEVICES; sleep 2; echo end $(date +%s.%N)']\n  resources: {{gpusPerNode: 1}}\n"
    )
}

fn span(log: &str) -> (f64, f64, String) {
    let field = |prefix: &str| {
        let line = log
            .lines()
            .find(|l| l.starts_with(prefix))
            .unwrap_or_else(|| panic!("{log}"));
        line.split_whitespace()
            .nth(1)
            .unwrap()
            .parse::<f64>()
            .unwrap()
    };
    let gpus = log
        .split("gpus=")
        .nth(1)
        .unwrap()
        .lines()
        .next()
        .unwrap()
        .to_owned();
    (field("start "), field("end "), gpus)
}

#[test]
fn one_gpu_is_never_given_to_two_jobs() {
    let plane = Plane::start(Some(1));
    plane.apply("a.yaml", &gpu_job("gpu-a"));
    plane.apply("b.yaml", &gpu_job("gpu-b"));
    plane.wait_phase("gpu-a", "Succeeded", MIN);
    plane.wait_phase("gpu-b", "Succeeded", MIN);
    let (a_start, a_end, a_gpus) = span(&plane.ok(&["logs", "gpu-a"]));
    let (b_start, b_end, b_gpus) = span(&plane.ok(&["logs", "gpu-b"]));
    assert_eq!(a_gpus, "0");
    assert_eq!(b_gpus, "0");
    let table = plane.ok(&["get", "gpus"]);
    let rows: Vec<Vec<&str>> = table
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        rows,
        [
            vec!["INDEX", "NAME", "MEMORY", "CUDA", "ID"],
            vec!["0", "virtual", "0", "GiB", "0", "0"]
        ],
        "the GPU and what its ranks see in CUDA_VISIBLE_DEVICES: {table}"
    );
    assert!(
        a_end <= b_start || b_end <= a_start,
        "overlap: a {a_start}..{a_end}, b {b_start}..{b_end}"
    );
    assert!(a_end <= b_start, "FIFO: the first applied runs first");
    let waited = plane
        .events("gpu-b")
        .iter()
        .any(|e| e["reason"] == "Waiting");
    assert!(waited, "gpu-b recorded why it waited");
}

#[test]
fn a_failed_rank_restarts_the_gang_from_the_latest_checkpoint() {
    let plane = Plane::start(None);
    let spec = r#"apiVersion: ferry.dev/v1alpha1
kind: TrainJob
metadata: {name: flaky}
spec:
  engine: command
  command: [sh, -c, 'if [ -z "$FERRY_RESUME_FROM" ]; then mkdir -p "$FERRY_CHECKPOINT_DIR/step-7"; [ "$RANK" = 1 ] && exit 3; sleep 30; fi; echo "resumed from $FERRY_RESUME_FROM"']
  resources: {nodes: 1, procsPerNode: 2}
  onFailure: {maxRestarts: 1, backoffSeconds: 0.2, graceSeconds: 2}
"#;
    plane.apply("flaky.yaml", spec);
    let job = plane.wait_phase("flaky", "Succeeded", MIN);
    assert_eq!(job["status"]["restarts"], 1);
    assert_eq!(job["status"]["attempt"], 2);
    let resumed = job["status"]["resumedFrom"].as_str().unwrap();
    assert!(resumed.ends_with("checkpoints/step-7"), "{resumed}");
    assert!(
        plane
            .ok(&["logs", "flaky", "--rank", "1"])
            .contains("resumed from")
    );
    let events = plane.events("flaky");
    let failed = events
        .iter()
        .find(|e| e["to"] == "Restarting")
        .expect("a restart event");
    assert_eq!(failed["reason"], "RankFailed");
    assert!(
        failed["message"].as_str().unwrap().contains("rank 1"),
        "{failed}"
    );
}

#[test]
fn restarts_run_out_and_the_job_fails() {
    let plane = Plane::start(None);
    let spec = "apiVersion: ferry.dev/v1alpha1\nkind: TrainJob\nmetadata: {name: doomed}\nspec:\n  engine: command\n  command: [sh, -c, 'exit 5']\n  onFailure: {maxRestarts: 2, backoffSeconds: 0.1}\n";
    plane.apply("doomed.yaml", spec);
    let deadline = std::time::Instant::now() + MIN;
    let job = loop {
        let job = plane.job("doomed");
        if job["status"]["phase"] == "Failed" {
            break job;
        }
        assert!(std::time::Instant::now() < deadline, "{job}");
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(job["status"]["restarts"], 2);
    assert_eq!(job["status"]["attempt"], 3);
    assert!(
        job["status"]["message"]
            .as_str()
            .unwrap()
            .contains("all 2 restarts used"),
        "{job}"
    );
}

#[test]
fn cancel_stops_every_rank_gracefully() {
    let plane = Plane::start(None);
    plane.ok(&["apply", "-f", "examples/sleeper.yaml"]);
    plane.wait_phase("sleeper", "Running", MIN);
    std::thread::sleep(Duration::from_secs(2));
    let out = plane.ok(&["cancel", "job", "sleeper"]);
    assert_eq!(out.trim(), "trainjob/sleeper cancelled");
    // The rank traps SIGTERM and checkpoints before exiting.
    plane.wait_log("sleeper", "SIGTERM at step", Duration::from_secs(20));
    let again = plane.ferry(&["cancel", "sleeper"]);
    assert!(!again.status.success());
    assert!(
        again.stderr_text().contains("already finished"),
        "{}",
        again.stderr_text()
    );
    plane.ok(&["delete", "job", "sleeper"]);
    assert_eq!(plane.ok(&["get", "jobs", "-o", "json"]).trim(), "[]");
}

#[test]
fn a_run_past_its_time_limit_is_stopped_gracefully_and_fails() {
    let plane = Plane::start(None);
    let spec = "apiVersion: ferry.dev/v1alpha1\nkind: TrainJob\nmetadata: {name: capped}\nspec:\n  engine: command\n  command: [python3, examples/sleeper.py, '60']\n  maxRuntimeSeconds: 3\n  onFailure: {maxRestarts: 0, graceSeconds: 5}\n";
    plane.apply("capped.yaml", spec);
    let job = plane.wait_phase("capped", "Failed", MIN);
    let message = job["status"]["message"].as_str().unwrap();
    assert!(
        message.contains("past spec.maxRuntimeSeconds (3 s)") && message.contains("no restarts"),
        "{job}"
    );
    let failed = plane
        .events("capped")
        .into_iter()
        .find(|e| e["to"] == "Failed")
        .expect("a Failed event");
    assert_eq!(failed["reason"], "DeadlineExceeded", "{failed}");
    // The rank got SIGTERM, not SIGKILL: it wrote its checkpoint on the way out, near its
    // limit, long before its 60 steps.
    let log = plane.wait_log("capped", "SIGTERM at step", Duration::from_secs(20));
    assert!(!log.contains("\"step\": 30"), "{log}");
}

/// `spec.maxTotalRuntimeSeconds` counts every run: a job whose runs each fail after 2 s, with
/// restarts to spare, is stopped for good (`BudgetExhausted`, no restart) once its runs add up
/// to the 5 s budget, whatever its `onFailure.maxRestarts` — either while a run goes on, or when
/// a run fails having spent the rest (no run is started that the budget would stop at once,
/// which a slow machine once showed: "attempt 3 ran 0 s after 5 s of earlier runs").
#[test]
fn runs_add_up_against_the_total_runtime_budget() {
    let plane = Plane::start(None);
    let spec = "apiVersion: ferry.dev/v1alpha1\nkind: TrainJob\nmetadata: {name: budgeted}\nspec:\n  engine: command\n  command: [sh, -c, 'sleep 2; exit 1']\n  maxTotalRuntimeSeconds: 5\n  onFailure: {maxRestarts: 8, backoffSeconds: 0.1, graceSeconds: 2}\n";
    plane.apply("budgeted.yaml", spec);
    let job = plane.wait_phase("budgeted", "Failed", MIN);
    let events = plane.events("budgeted");
    let failed = events
        .iter()
        .find(|e| e["to"] == "Failed")
        .expect("a Failed event");
    assert_eq!(failed["reason"], "BudgetExhausted", "{events:#?}");
    let message = failed["message"].as_str().unwrap();
    assert!(
        message.contains("spec.maxTotalRuntimeSeconds (5 s)") && message.contains("no restart"),
        "{message}"
    );
    // Earlier runs were counted: at least one ended by its own failure and was restarted,
    // and restarts were left when the budget ended the job.
    let restarts = job["status"]["restarts"].as_u64().unwrap();
    assert!((1..8).contains(&restarts), "{job}");
    let runs = events
        .iter()
        .filter(|e| e["to"] == "Running" && e["from"] != "Running")
        .count();
    assert_eq!(runs as u64, restarts + 1, "{events:#?}");
    let past: u64 = message
        .split(" s of earlier runs")
        .next()
        .and_then(|m| m.rsplit(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no earlier-run time in {message:?}"));
    // Each earlier run lasted about 2 s (whole seconds are summed, so at least 1 s each), and
    // together they stayed under the budget the last run then reached.
    assert!(past >= restarts && past < 5, "{message}");
}

/// A running job's time budget can be raised by applying it again with only its time limits
/// changed (the one part of a stored spec that may change): the job goes on past the old
/// budget, with a `LimitsChanged` event saying what changed. Any other change, and any change
/// to a job that has ended, is refused naming the fields, and nothing is stored.
#[test]
fn a_running_jobs_budget_can_be_raised_by_applying_it_again() {
    let plane = Plane::start(None);
    let job = |budget: u64, sleep: u64| {
        format!(
            "apiVersion: ferry.dev/v1alpha1\nkind: TrainJob\nmetadata: {{name: extended}}\nspec:\n  engine: command\n  command: [sh, -c, 'sleep {sleep}']\n  maxTotalRuntimeSeconds: {budget}\n"
        )
    };
    let first = plane.write("extended.yaml", &job(4, 7));
    plane.ok(&["apply", "-f", &first]);
    plane.wait_phase("extended", "Running", MIN);
    let raised = plane.write("raised.yaml", &job(60, 7));
    let out = plane.ok(&["apply", "-f", &raised]);
    assert!(out.contains("configured"), "{out}");
    let other = plane.write("other.yaml", &job(60, 9));
    let refused = plane.ferry(&["apply", "-f", &other]);
    assert!(!refused.status.success());
    let err = refused.stderr_text();
    assert!(
        err.contains("spec.command cannot change") && err.contains("maxTotalRuntimeSeconds"),
        "{err}"
    );
    // Past the old budget of 4 s, the job runs on to its end.
    let done = plane.wait_phase("extended", "Succeeded", MIN);
    let events = plane.events("extended");
    let changed = events
        .iter()
        .find(|e| e["reason"] == "LimitsChanged")
        .unwrap_or_else(|| panic!("no LimitsChanged event: {events:#?}"));
    assert_eq!(
        changed["message"], "spec.maxTotalRuntimeSeconds: 4 s -> 60 s",
        "{changed}"
    );
    assert_eq!(
        done["spec"]["command"][2], "sleep 7",
        "the refused change stored nothing"
    );
    assert_eq!(done["spec"]["maxTotalRuntimeSeconds"], 60);
    let ran = done["status"]["runSeconds"]
        .as_u64()
        .expect("runSeconds with a budget");
    assert!((6..60).contains(&ran), "{done}");
    let described = plane.ok(&["describe", "job", "extended"]);
    assert!(
        described.contains(&format!("{ran} s of 60 s (spec.maxTotalRuntimeSeconds")),
        "{described}"
    );
    // An ended job's limits do not change.
    let late = plane.write("late.yaml", &job(90, 7));
    let refused = plane.ferry(&["apply", "-f", &late]);
    assert!(!refused.status.success());
    let err = refused.stderr_text();
    assert!(err.contains("it has ended (Succeeded)"), "{err}");
}

/// A running job's expected completion comes from the pace of its metrics lines towards
/// `spec.train.steps`: shown in `get -o json`, `get -o wide` and `describe`, and gone once
/// it has finished.
#[test]
fn a_running_job_shows_when_it_will_finish_at_its_measured_pace() {
    // On a GPU, so the scheduler is told the job's pace too (`Scheduler::progress`).
    let plane = Plane::start(Some(1));
    let spec = "apiVersion: ferry.dev/v1alpha1\nkind: TrainJob\nmetadata: {name: paced}\nspec:\n  engine: command\n  command: [python3, examples/sleeper.py, '30']\n  resources: {gpusPerNode: 1}\n  train: {steps: 30}\n";
    plane.apply("paced.yaml", spec);
    plane.wait_phase("paced", "Running", MIN);
    // The pace is trusted after 10 s of steps.
    let deadline = Instant::now() + Duration::from_secs(25);
    let (job, eta) = loop {
        let job = plane.job("paced");
        if let Some(eta) = job["status"]["estimatedCompletionTime"].as_str() {
            let eta = chrono::DateTime::parse_from_rfc3339(eta).expect("RFC 3339");
            break (job.clone(), eta);
        }
        assert!(Instant::now() < deadline, "no expected completion: {job}");
        std::thread::sleep(Duration::from_millis(300));
    };
    // One step a second: the steps left, from now, give or take the polling.
    let step = job["status"]["progress"]["step"].as_i64().expect("a step");
    let left = (eta.with_timezone(&chrono::Utc) - chrono::Utc::now()).num_seconds();
    assert!(
        (left - (30 - step)).abs() <= 4,
        "{left} s left at step {step}: {job}"
    );
    let wide = plane.ok(&["get", "jobs", "-o", "wide"]);
    assert!(wide.lines().next().unwrap().contains("LEFT"), "{wide}");
    let described = plane.ok(&["describe", "job", "paced"]);
    assert!(described.contains("at the measured pace"), "{described}");
    let done = plane.wait_phase("paced", "Succeeded", MIN);
    assert!(
        done["status"]["estimatedCompletionTime"].is_null(),
        "{done}"
    );
}

/// Each bad input: a non-zero exit, one line on stderr naming the field and the fix,
/// and nothing stored.
#[test]
fn bad_input_is_refused_with_one_clear_line() {
    let plane = Plane::start(Some(1));
    let good = "apiVersion: ferry.dev/v1alpha1\nkind: TrainJob\nmetadata: {name: ok}\nspec:\n  engine: command\n  command: [\"true\"]\n  resources: {nodes: 1, gpusPerNode: 0}\n";
    let cases = [
        (
            "malformed",
            "kind: TrainJob\nspec: [oops\n".to_owned(),
            "not valid YAML",
        ),
        (
            "unknown-field",
            good.replace("nodes: 1", "nodez: 1"),
            "spec.resources.nodez: unknown field; did you mean `nodes`?",
        ),
        (
            "negative-gpus",
            good.replace("gpusPerNode: 0", "gpusPerNode: -1"),
            "spec.resources.gpusPerNode: must be 0 or more (got -1)",
        ),
        (
            "unknown-engine",
            good.replace("engine: command", "engine: pytorch"),
            "spec.engine: must be one of",
        ),
        (
            "too-many-gpus",
            good.replace("gpusPerNode: 0", "gpusPerNode: 2"),
            "spec.resources.gpusPerNode: the job needs 2 GPUs",
        ),
        (
            "zero-time-limit",
            good.replace(
                "  engine: command\n",
                "  engine: command\n  maxRuntimeSeconds: 0\n",
            ),
            "spec.maxRuntimeSeconds: must be between 1 and",
        ),
        (
            "zero-budget",
            good.replace(
                "  engine: command\n",
                "  engine: command\n  maxTotalRuntimeSeconds: 0\n",
            ),
            "spec.maxTotalRuntimeSeconds: must be between 1 and",
        ),
        (
            "extra-args-on-command",
            good.replace(
                "  engine: command\n",
                "  engine: command\n  extraArgs: [--lr, '1']\n",
            ),
            "spec.extraArgs: is only for launcher engines whose command Ferry renders",
        ),
        ("missing-file", String::new(), "cannot read"),
    ];
    for (name, text, expect) in cases {
        let path = if name == "missing-file" {
            plane
                .home
                .path()
                .join("nope.yaml")
                .to_string_lossy()
                .into_owned()
        } else {
            plane.write(&format!("{name}.yaml"), &text)
        };
        let out = plane.ferry(&["apply", "-f", &path]);
        let err = out.stderr_text();
        assert!(!out.status.success(), "{name}: accepted");
        assert_eq!(err.lines().count(), 1, "{name}: {err}");
        assert!(err.starts_with("error: "), "{name}: {err}");
        assert!(err.contains(expect), "{name}: {err}");
    }
    assert_eq!(plane.ok(&["get", "jobs", "-o", "json"]).trim(), "[]");

    let path = plane.write("good.yaml", good);
    plane.ok(&["apply", "-f", &path]);
    let dup = plane.ferry(&["apply", "-f", &path]);
    assert!(!dup.status.success());
    let err = dup.stderr_text();
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("default/ok already exists") && err.contains("metadata.name"),
        "{err}"
    );
    let jobs: Vec<Value> = serde_json::from_str(&plane.ok(&["get", "jobs", "-o", "json"])).unwrap();
    assert_eq!(jobs.len(), 1);

    // A model that is not registered cannot be deleted; the line names it and where to look.
    let gone = plane.ferry(&["delete", "model", "no-such"]);
    assert!(!gone.status.success());
    let err = gone.stderr_text();
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("Model no-such not found") && err.contains("ferry get models"),
        "{err}"
    );
}
