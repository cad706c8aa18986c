//! A sweep on a real `ferry up`: its jobs created from the template, no more of them live at
//! once than `maxParallel` allows, and `ferry get sweep` comparing them in one table.

use std::time::{Duration, Instant};

use serde_json::Value;

use crate::harness::Plane;

/// Three one-GPU jobs that print a metrics line with the loss their combination gives, then
/// sleep 2 s. The control plane has two GPUs: without `maxParallel: 1`, two would run at once.
/// `env.TAG` is written before `env.LOSS`, so the table's columns show the written order, not
/// the alphabetical one, survived the API and the store.
const SWEEP: &str = r#"apiVersion: ferry.dev/v1alpha1
kind: Sweep
metadata: {name: tags}
spec:
  template:
    metadata: {labels: {project: e2e}}
    spec:
      engine: command
      command: [sh, -c, 'echo "{\"step\": 7, \"loss\": $LOSS}"; sleep 2']
      resources: {gpusPerNode: 1}
  parameters:
    env.TAG: [x]
    env.LOSS: ['0.3', '0.1', '0.2']
  maxParallel: 1
"#;

/// The time of the job's first event into `to`, in milliseconds since the epoch.
fn entered(events: &[Value], to: &str) -> i64 {
    let e = events
        .iter()
        .find(|e| e["to"] == to && e["from"] != to)
        .unwrap_or_else(|| panic!("never {to}: {events:?}"));
    chrono::DateTime::parse_from_rfc3339(e["at"].as_str().unwrap())
        .unwrap()
        .timestamp_millis()
}

#[test]
fn a_sweep_runs_one_job_at_a_time_and_shows_its_parameters() {
    let plane = Plane::start(Some(2));
    let out = plane.apply("sweep.yaml", SWEEP);
    assert_eq!(out.trim(), "sweep/tags created");

    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let sweeps: Vec<Value> =
            serde_json::from_str(&plane.ok(&["get", "sweep", "tags", "-o", "json"])).unwrap();
        let status = &sweeps[0]["status"];
        if status["phases"]["Succeeded"] == 3 {
            assert_eq!(status["best"]["job"], "tags-1", "{status}");
            break;
        }
        assert!(
            status["phases"]["Failed"].is_null() && status["phases"]["Cancelled"].is_null(),
            "{status}"
        );
        assert!(
            Instant::now() < deadline,
            "sweep not done after 90 s: {}",
            plane.ok(&["describe", "sweep", "tags"])
        );
        std::thread::sleep(Duration::from_millis(300));
    }

    // One at a time: each job is admitted only after the one before it ended, and the later
    // ones were created held and released by the sweep.
    let mut ended_before = 0;
    for i in 0..3 {
        let name = format!("tags-{i}");
        let events = plane.events(&name);
        let admitted = entered(&events, "Admitted");
        assert!(
            admitted >= ended_before,
            "{name} admitted at {admitted}, before the previous job ended at {ended_before}"
        );
        ended_before = entered(&events, "Succeeded");
        let released = events.iter().any(|e| {
            e["reason"] == "Resumed"
                && e["message"]
                    .as_str()
                    .unwrap()
                    .starts_with("released by sweep tags")
        });
        assert_eq!(released, i > 0, "{name}: {events:?}");
        let job = plane.job(&name);
        assert_eq!(job["metadata"]["labels"]["project"], "e2e");
        assert_eq!(job["status"]["progress"]["step"], 7);
    }

    let table = plane.ok(&["get", "sweep", "tags"]);
    let lines: Vec<Vec<&str>> = table
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        lines,
        [
            vec!["NAME", "env.TAG", "env.LOSS", "PHASE", "STEP", "LOSS"],
            vec!["tags-0", "x", "0.3", "Succeeded", "7", "0.3000"],
            vec!["tags-1", "x", "0.1", "Succeeded", "7", "0.1000", "*"],
            vec!["tags-2", "x", "0.2", "Succeeded", "7", "0.2000"],
        ],
        "{table}"
    );
    let described = plane.ok(&["describe", "sweep", "tags"]);
    assert!(
        described.contains("Best:         tags-1 (loss 0.1000)")
            && described
                .contains("Parameter:    env.TAG: x\nParameter:    env.LOSS: 0.3, 0.1, 0.2"),
        "{described}"
    );
    let listed = plane.ok(&["get", "sweeps"]);
    assert!(listed.contains("3 Succeeded"), "{listed}");
    assert!(listed.contains("tags-1 (loss 0.1000)"), "{listed}");

    // Deleting the sweep deletes its jobs.
    assert_eq!(
        plane.ok(&["delete", "sweep", "tags"]).trim(),
        "sweep/tags deleted"
    );
    let jobs: Vec<Value> = serde_json::from_str(&plane.ok(&["get", "jobs", "-o", "json"])).unwrap();
    assert!(jobs.is_empty(), "{jobs:?}");
}
