//! Bar 2: the reconcile loop against a mocked API server — create, status update, a failed
//! gang restarted with resume, preemption by suspension, deletion through the finalizer,
//! and an operator that died mid-restart.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use ferry_k8s::crd::{TrainJobClusterStatus, TrainJobResource};
use ferry_k8s::{Admission, Admit, Context, Gang, RenderOptions};
use ferry_spec::JobPhase;
use serde_json::{Value, json};

use crate::mock::{EVENTS, Seen, Step, event, finish, not_found, reconciled, server, status, step};
use crate::specs::*;

const NS: &str = "team-a";
const JOB: &str = "qwen-lora";
const TJ: &str = "/apis/ferry.dev/v1alpha1/namespaces/team-a/trainjobs/qwen-lora";
const JOBS: &str = "/apis/batch/v1/namespaces/team-a/jobs";
const SVC: &str = "/api/v1/namespaces/team-a/services/qwen-lora";
const PODS: &str = "/api/v1/namespaces/team-a/pods";
/// The log of rank 0's pod in the scenarios that read it.
const RANK0_LOG: &str = "/api/v1/namespaces/team-a/pods/qwen-lora-0-0-abcde/log";

/// The scheduler's answer in most scenarios: run it, anywhere.
const ADMIT: Admit = Admit::Run(Vec::new());

struct Fixed(Admit);
impl Admission for Fixed {
    fn decide(&self, _job: &TrainJobResource, _gang: &Gang) -> Admit {
        self.0.clone()
    }
}

fn resource(finalized: bool, status: Option<TrainJobClusterStatus>) -> TrainJobResource {
    let job = job(SINGLE_NODE_LORA);
    let mut v = json!({
        "metadata": {"name": JOB, "namespace": NS, "uid": "uid-1", "generation": 1, "resourceVersion": "7"},
        "spec": serde_json::to_value(&job.spec).unwrap(),
    });
    if finalized {
        v["metadata"]["finalizers"] = json!(["ferry.dev/cleanup"]);
    }
    let mut r: TrainJobResource = serde_json::from_value(v).unwrap();
    r.status = status;
    r
}

fn running(attempt: u32, restarts: u32) -> TrainJobClusterStatus {
    TrainJobClusterStatus {
        phase: Some(JobPhase::Running),
        attempt,
        restarts,
        gang: Some(format!("{JOB}-{attempt}")),
        ..TrainJobClusterStatus::default()
    }
}

/// The path of attempt `attempt`'s gang, the batch Job `qwen-lora-<attempt>`.
fn gang_path(attempt: u32) -> String {
    format!("{JOBS}/{JOB}-{attempt}")
}

/// The API server's copy of attempt `attempt`'s gang, with `condition` set when given.
fn gang(attempt: u32, suspend: bool, condition: Option<&str>) -> Value {
    let mut g = json!({"apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": format!("{JOB}-{attempt}"), "namespace": NS}, "spec": {"suspend": suspend, "template": {}}});
    if let Some(c) = condition {
        g["status"] = json!({"conditions": [{"type": c, "status": "True"}]});
    }
    g
}

/// The operator reads attempt `attempt`'s gang, which exists.
fn get_gang(attempt: u32, suspend: bool, condition: Option<&str>) -> Step {
    step(
        "GET",
        gang_path(attempt),
        200,
        gang(attempt, suspend, condition),
    )
}

/// The operator patches attempt `attempt`'s gang (an apply, or a change of `suspend`); the
/// server answers with the gang as `suspend`.
fn patch_gang(attempt: u32, suspend: bool) -> Step {
    step(
        "PATCH",
        gang_path(attempt),
        200,
        gang(attempt, suspend, None),
    )
}

/// The operator finds the first attempt's gang the other way, sets its `suspend` (a
/// preemption suspends, an admission resumes), records an event and the job's status.
fn flip_suspend(job: &TrainJobResource, suspend: bool) -> Vec<Step> {
    vec![
        get_gang(0, !suspend, None),
        patch_gang(0, suspend),
        event(),
        patch_status(job),
    ]
}

/// The operator deletes attempt `attempt`'s gang, which exists.
fn delete_gang(attempt: u32, condition: Option<&str>) -> Step {
    step(
        "DELETE",
        gang_path(attempt),
        200,
        gang(attempt, false, condition),
    )
}

/// The operator applies the headless Service.
fn apply_service() -> Step {
    step("PATCH", SVC, 200, json!({}))
}

/// The operator applies attempt `attempt`'s launch files (the TRL wrapper) as a ConfigMap.
fn apply_launch_files(attempt: u32) -> Step {
    step(
        "PATCH",
        format!("/api/v1/namespaces/team-a/configmaps/{JOB}-{attempt}-launch"),
        200,
        json!({}),
    )
}

/// The operator patches the TrainJob (its finalizers); the server echoes `job`.
fn patch_job(job: &TrainJobResource) -> Step {
    step("PATCH", TJ, 200, ok_job(job))
}

/// The operator patches the TrainJob's status; the server echoes `job`.
/// What restarting attempt 0's failed gang sends: read it, record the restart, tell, delete.
fn restart_of_failed(job: &TrainJobResource) -> Vec<Step> {
    vec![
        get_gang(0, false, Some("Failed")),
        patch_status(job),
        event(),
        delete_gang(0, Some("Failed")),
    ]
}

fn patch_status(job: &TrainJobResource) -> Step {
    step("PATCH", format!("{TJ}/status"), 200, ok_job(job))
}

/// Reconciles `job` once with the scheduler answering `admit`, against `steps`.
async fn run(job: &TrainJobResource, admit: Admit, steps: Vec<Step>) -> Vec<Seen> {
    reconciled(job, Arc::new(Fixed(admit)), steps).await
}

fn ctx(client: kube::Client, admit: Admit) -> Arc<Context> {
    Arc::new(Context::new(
        client,
        RenderOptions::default(),
        Arc::new(Fixed(admit)),
    ))
}

fn status_patch(seen: &[Seen]) -> TrainJobClusterStatus {
    let s = seen
        .iter()
        .rev()
        .find(|s| s.uri.starts_with(&format!("{TJ}/status")))
        .expect("a status patch");
    serde_json::from_value(s.body["status"].clone()).unwrap()
}

fn event_reasons(seen: &[Seen]) -> Vec<String> {
    seen.iter()
        .filter(|s| s.uri.starts_with(EVENTS))
        .map(|s| s.body["reason"].as_str().unwrap().to_owned())
        .collect()
}

fn ok_job(r: &TrainJobResource) -> Value {
    serde_json::to_value(r).unwrap()
}

#[tokio::test]
async fn create_adds_the_finalizer_applies_the_gang_and_records_status() {
    let job = resource(false, None);
    let service = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": JOB}});
    let seen = run(
        &job,
        ADMIT,
        vec![
            patch_job(&job),
            not_found("GET", gang_path(0)),
            apply_launch_files(0),
            step("PATCH", SVC, 200, service),
            patch_gang(0, false),
            event(),
            patch_status(&job),
        ],
    )
    .await;
    assert_eq!(
        seen[0].body["metadata"]["finalizers"],
        json!(["ferry.dev/cleanup"])
    );
    let apply = &seen[4];
    assert!(
        apply.uri.contains("fieldManager=ferry") && apply.uri.contains("force=true"),
        "{}",
        apply.uri
    );
    assert_eq!(
        apply.body["spec"]["suspend"], false,
        "admitted: created running"
    );
    assert_eq!(apply.body["metadata"]["ownerReferences"][0]["uid"], "uid-1");
    let st = status_patch(&seen);
    assert_eq!(st.phase, Some(JobPhase::Running));
    assert_eq!((st.attempt, st.restarts), (0, 0));
    assert_eq!(
        st.master_addr.as_deref(),
        Some("qwen-lora-0-0.qwen-lora.team-a.svc")
    );
    assert!(
        st.conditions
            .iter()
            .any(|c| c.type_ == "Admitted" && c.status == "True")
    );
    assert_eq!(event_reasons(&seen), ["Started"]);
}

/// A new job the scheduler keeps waiting: its gang is created suspended (Kueue's protocol),
/// with an event and the job's status.
fn create_suspended(job: &TrainJobResource) -> Vec<Step> {
    vec![
        not_found("GET", gang_path(0)),
        apply_launch_files(0),
        apply_service(),
        patch_gang(0, true),
        event(),
        patch_status(job),
    ]
}

#[tokio::test]
async fn not_admitted_is_created_suspended_then_unsuspended_on_admission() {
    let job = resource(true, None);
    let seen = run(
        &job,
        Admit::Wait("team-a is over quota".into()),
        create_suspended(&job),
    )
    .await;
    assert_eq!(
        seen[3].body["spec"]["suspend"], true,
        "Kueue protocol: created suspended"
    );
    let st = status_patch(&seen);
    assert_eq!(st.phase, Some(JobPhase::Queued));
    assert_eq!(st.message.as_deref(), Some("team-a is over quota"));

    // Status update: the scheduler admits it now.
    let job = resource(true, Some(st));
    let seen = run(&job, ADMIT, flip_suspend(&job, false)).await;
    assert_eq!(seen[1].body, json!({"spec": {"suspend": false}}));
    assert_eq!(status_patch(&seen).phase, Some(JobPhase::Running));
    assert_eq!(event_reasons(&seen), ["Admitted"]);
}

#[tokio::test]
async fn failed_gang_restarts_from_the_latest_checkpoint_and_counts_across_recreation() {
    let job = resource(true, Some(running(0, 0)));
    let seen = run(&job, ADMIT, restart_of_failed(&job)).await;
    let st = status_patch(&seen);
    assert_eq!(
        (st.phase, st.restarts, st.attempt),
        (Some(JobPhase::Restarting), 1, 1)
    );
    assert!(
        seen[1].uri.starts_with(&format!("{TJ}/status")),
        "status is written before the delete"
    );
    assert_eq!(seen[3].body["propagationPolicy"], "Background");

    // The next reconcile recreates the gang as attempt 1, resuming.
    let job = resource(true, Some(st));
    let seen = run(
        &job,
        ADMIT,
        vec![
            not_found("GET", gang_path(1)),
            not_found("DELETE", gang_path(0)),
            apply_launch_files(1),
            apply_service(),
            patch_gang(1, false),
            event(),
            patch_status(&job),
        ],
    )
    .await;
    let pod = &seen[4].body["spec"]["template"]["spec"];
    let env = pod["containers"][0]["env"].as_array().unwrap();
    assert!(
        env.contains(&json!({"name": "FERRY_ATTEMPT", "value": "1"})),
        "{env:?}"
    );
    let script = pod["containers"][0]["command"][2].as_str().unwrap();
    assert!(
        script.contains("--resume_from_checkpoint \"$FERRY_RESUME_FROM\""),
        "{script}"
    );
    assert!(
        script.contains("/checkpoints/team-a/qwen-lora/checkpoint-*"),
        "{script}"
    );
    let st = status_patch(&seen);
    assert_eq!(
        (st.phase, st.restarts, st.attempt),
        (Some(JobPhase::Running), 1, 1)
    );
    assert!(
        st.message
            .unwrap()
            .contains("resuming from the latest checkpoint")
    );
}

#[tokio::test]
async fn exhausted_restarts_fail_the_job() {
    let job = resource(true, Some(running(2, 2)));
    let seen = run(
        &job,
        ADMIT,
        vec![
            get_gang(2, false, Some("Failed")),
            event(),
            patch_status(&job),
        ],
    )
    .await;
    assert_failed_for_good(&status_patch(&seen), 2, "RestartsExhausted");
}

/// The job failed with no restart after `restarts`, its `Failed` condition saying `reason`.
fn assert_failed_for_good(st: &TrainJobClusterStatus, restarts: u32, reason: &str) {
    assert_eq!((st.phase, st.restarts), (Some(JobPhase::Failed), restarts));
    assert!(
        st.conditions
            .iter()
            .any(|c| c.type_ == "Failed" && c.reason == reason),
        "{:?}",
        st.conditions
    );
}

#[tokio::test]
async fn preemption_suspends_the_gang() {
    let job = resource(true, Some(running(0, 0)));
    let seen = run(
        &job,
        Admit::Preempt("team-b reclaims its quota".into()),
        flip_suspend(&job, true),
    )
    .await;
    assert_eq!(seen[1].body, json!({"spec": {"suspend": true}}));
    let st = status_patch(&seen);
    assert_eq!(st.phase, Some(JobPhase::Preempted));
    assert_eq!(st.restarts, 0, "a preemption is not a failure");
    assert_eq!(event_reasons(&seen), ["Preempted"]);
}

#[tokio::test]
async fn deletion_cleans_up_then_drops_the_finalizer() {
    let mut job = resource(true, Some(running(1, 1)));
    job.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        "2026-01-01T00:00:00Z".parse().unwrap(),
    ));
    let seen = run(
        &job,
        ADMIT,
        vec![
            delete_gang(1, None),
            not_found("DELETE", SVC),
            patch_job(&job),
            event(),
        ],
    )
    .await;
    assert_eq!(seen[2].body["metadata"]["finalizers"], json!([]));
    assert_eq!(
        seen[2].body["metadata"]["resourceVersion"], "7",
        "optimistic concurrency"
    );
}

#[tokio::test]
async fn operator_restart_mid_restart_neither_loses_nor_double_counts() {
    // The previous operator wrote restarts=1/attempt=1 and died before deleting attempt 0.
    let job = resource(
        true,
        Some(TrainJobClusterStatus {
            phase: Some(JobPhase::Restarting),
            ..running(1, 1)
        }),
    );
    let seen = run(
        &job,
        ADMIT,
        vec![
            not_found("GET", gang_path(1)),
            delete_gang(0, Some("Failed")),
            apply_launch_files(1),
            apply_service(),
            patch_gang(1, false),
            event(),
            patch_status(&job),
        ],
    )
    .await;
    let st = status_patch(&seen);
    assert_eq!((st.restarts, st.attempt), (1, 1), "counted once");

    // And a reconcile that re-runs after everything was applied changes nothing.
    // (Rank 0's pod is looked up for metrics; it has none yet.)
    let job = resource(true, Some(st.clone()));
    let no_pods = json!({"apiVersion": "v1", "kind": "PodList", "metadata": {}, "items": []});
    let steps = vec![get_gang(1, false, None), step("GET", PODS, 200, no_pods)];
    let seen = run(&job, ADMIT, steps).await;
    assert_eq!(seen.len(), 2, "no writes when nothing changed");
}

#[tokio::test]
async fn terminal_jobs_are_left_alone() {
    let job = resource(
        true,
        Some(TrainJobClusterStatus {
            phase: Some(JobPhase::Succeeded),
            ..running(0, 0)
        }),
    );
    assert!(run(&job, ADMIT, vec![]).await.is_empty());
}

#[tokio::test]
async fn deployment_is_applied_and_ready_replicas_mirrored() {
    let d = match parse(DEPLOY_FIXED).remove(0) {
        ferry_spec::Resource::ModelDeployment(d) => d,
        _ => unreachable!(),
    };
    let md: ferry_k8s::crd::ModelDeploymentResource = serde_json::from_value(json!({
        "metadata": {"name": "qwen-chat", "namespace": NS, "uid": "uid-2"},
        "spec": serde_json::to_value(&d.spec).unwrap(),
    }))
    .unwrap();
    let md_path = "/apis/ferry.dev/v1alpha1/namespaces/team-a/modeldeployments/qwen-chat";
    let deploy = "/apis/apps/v1/namespaces/team-a/deployments/qwen-chat";
    let (client, task) = server(vec![
        step("PATCH", deploy, 200, json!({})),
        step(
            "PATCH",
            "/api/v1/namespaces/team-a/services/qwen-chat",
            200,
            json!({}),
        ),
        step(
            "GET",
            deploy,
            200,
            json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "qwen-chat"}, "status": {"readyReplicas": 1, "replicas": 2}}),
        ),
        step(
            "PATCH",
            format!("{md_path}/status"),
            200,
            serde_json::to_value(&md).unwrap(),
        ),
        event(),
    ]);
    ferry_k8s::operator::reconcile_deployment(Arc::new(md), ctx(client, ADMIT))
        .await
        .unwrap();
    let seen = finish(task).await;
    assert!(seen[0].uri.contains("fieldManager=ferry"));
    assert_eq!(
        seen[0].body["metadata"]["ownerReferences"][0]["kind"],
        "ModelDeployment"
    );
    assert_eq!(seen[3].body["status"]["phase"], "Degraded");
    assert_eq!(seen[3].body["status"]["readyReplicas"], 1);
    assert_eq!(seen[4].body["reason"], "Degraded");
}

#[tokio::test]
async fn running_gang_mirrors_rank_zeros_latest_metrics_line_into_progress() {
    let job = resource(true, Some(running(0, 0)));
    let rank0 = json!({"apiVersion": "v1", "kind": "PodList", "metadata": {}, "items": [
        {"metadata": {"name": "qwen-lora-0-0-abcde"}, "status": {"phase": "Running"}}]});
    let log = "loading model\n{\"step\":10,\"loss\":1.9,\"lr\":0.0002}\nnot json {\n\
               {\"step\":11,\"loss\":1.85,\"tokens_per_s\":5120.5}\n{\"step\":12,\"lo";
    let seen = run(
        &job,
        ADMIT,
        vec![
            get_gang(0, false, None),
            step("GET", PODS, 200, rank0),
            step("GET", RANK0_LOG, 200, Value::String(log.into())),
            patch_status(&job),
        ],
    )
    .await;
    assert!(
        seen[1]
            .uri
            .contains("batch.kubernetes.io%2Fjob-completion-index%3D0"),
        "{}",
        seen[1].uri
    );
    let q = &seen[2].uri;
    assert!(
        q.contains("container=trainer") && q.contains("tailLines=200") && q.contains("limitBytes="),
        "{q}"
    );
    let st = status_patch(&seen);
    assert_eq!(
        st.progress,
        Some(json!({"step": 11, "loss": 1.85, "tokens_per_s": 5120.5}))
    );
    assert_eq!(st.phase, Some(JobPhase::Running));

    // A container that has not started yet (400) leaves the status untouched.
    let job = resource(true, Some(st));
    let pending = json!({"apiVersion": "v1", "kind": "PodList", "metadata": {}, "items": [
        {"metadata": {"name": "qwen-lora-0-0-abcde"}}]});
    run(
        &job,
        ADMIT,
        vec![
            get_gang(0, false, None),
            step("GET", PODS, 200, pending),
            step("GET", RANK0_LOG, 400, status(400, "BadRequest")),
        ],
    )
    .await;
}

/// Admits everything and records every time left it is told (job name, seconds).
#[derive(Default)]
struct Recording(std::sync::Mutex<Vec<(String, u64)>>);
impl Admission for Recording {
    fn decide(&self, _job: &TrainJobResource, _gang: &Gang) -> Admit {
        ADMIT
    }
    fn progress(&self, job: &TrainJobResource, remaining_s: u64) {
        use kube::ResourceExt;
        self.0.lock().unwrap().push((job.name_any(), remaining_s));
    }
}

/// 2026-01-01T00:00:00Z in Unix milliseconds: the operator's clock when a scenario starts.
const T0_MS: u64 = 1_767_225_600_000;

/// Steps of a reconcile of the running gang that reads rank 0's log, `log`, and writes the
/// status.
fn read_metrics(job: &TrainJobResource, log: &str) -> Vec<Step> {
    let rank0 = json!({"apiVersion": "v1", "kind": "PodList", "metadata": {}, "items": [
        {"metadata": {"name": "qwen-lora-0-0-abcde"}, "status": {"phase": "Running"}}]});
    vec![
        get_gang(0, false, None),
        step("GET", PODS, 200, rank0),
        step("GET", RANK0_LOG, 200, Value::String(log.into())),
        patch_status(job),
    ]
}

/// What a pace scenario saw: the body of every status patch, and every time left the
/// admission was told.
struct Paced {
    patches: Vec<Value>,
    told: Vec<(String, u64)>,
}

impl Paced {
    /// The status the `i`-th status patch wrote.
    fn status(&self, i: usize) -> TrainJobClusterStatus {
        serde_json::from_value(self.patches[i].clone()).unwrap()
    }
}

/// One operator (one `Context`, its clock starting at `T0_MS`) reconciles the running gang
/// of `job` once per log in `logs`, `apart_s` seconds apart on its clock, then once more
/// after the gang completed.
async fn pace_scenario(job: &TrainJobResource, kueue: bool, logs: &[&str], apart_s: u64) -> Paced {
    let mut steps: Vec<Step> = logs.iter().flat_map(|l| read_metrics(job, l)).collect();
    steps.extend([
        get_gang(0, false, Some("Complete")),
        event(),
        patch_status(job),
    ]);
    let (client, task) = server(steps);
    let clock = Arc::new(AtomicU64::new(T0_MS));
    let admission = Arc::new(Recording::default());
    let mut opts = RenderOptions::default();
    opts.cluster.kueue = kueue;
    let read = clock.clone();
    let ctx = Context::new(client, opts, admission.clone())
        .with_clock(move || read.load(Ordering::SeqCst));
    let ctx = Arc::new(ctx);
    for _ in logs {
        ferry_k8s::reconcile(Arc::new(job.clone()), ctx.clone())
            .await
            .unwrap();
        clock.fetch_add(apart_s * 1000, Ordering::SeqCst);
    }
    ferry_k8s::reconcile(Arc::new(job.clone()), ctx)
        .await
        .unwrap();
    let patches = finish(task)
        .await
        .into_iter()
        .filter(|s| s.uri.starts_with(&format!("{TJ}/status")))
        .map(|s| s.body["status"].clone())
        .collect();
    let told = admission.0.lock().unwrap().clone();
    Paced { patches, told }
}

/// The operator's clock (as `estimatedCompletionTime` writes it) `s` seconds after `T0_MS`.
fn at(s: u64) -> String {
    k8s_openapi::jiff::Timestamp::from_second((T0_MS / 1000 + s) as i64)
        .unwrap()
        .to_string()
}

#[tokio::test]
async fn a_measured_pace_sets_the_estimated_completion_and_tells_the_scheduler() {
    let job = resource(true, Some(running(0, 0)));
    // The HF Trainer's lines under ferry_trainer.py: the job is given in epochs, so the
    // engine's `max_steps` is the target.
    let logs = [
        "{\"step\":100,\"max_steps\":1100,\"loss\":2.0}\n",
        "{\"step\":150,\"max_steps\":1100,\"loss\":1.9}\n",
        "{\"step\":300,\"max_steps\":1100,\"loss\":1.5}\n",
    ];
    let seen = pace_scenario(&job, false, &logs, 5).await;
    let eta = |i: usize| seen.status(i).estimated_completion_time;
    assert_eq!(eta(0), None, "one read is no pace");
    assert_eq!(eta(1), None, "5 s is too short a base");
    // Read at 10 s: 800 steps at 50 ms a step (200 steps in 10 s) end 40 s later.
    assert_eq!(eta(2), Some(at(50)));
    assert_eq!(seen.status(2).progress.unwrap()["step"], 300);
    assert_eq!(seen.told, [("qwen-lora".to_owned(), 40)]);
    // It succeeded: the estimate is removed by name (a merge patch keeps what it omits).
    let last = &seen.patches[3];
    assert_eq!(last["phase"], "Succeeded");
    assert_eq!(
        last.as_object().unwrap().get("estimatedCompletionTime"),
        Some(&Value::Null)
    );

    // The job's own `spec.train.steps` wins over the engine's total: 1,700 steps to go.
    let mut capped = job.clone();
    capped.spec.train.steps = Some(2_000);
    let seen = pace_scenario(&capped, false, &[logs[0], logs[2]], 10).await;
    assert_eq!(seen.status(1).estimated_completion_time, Some(at(10 + 85)));
    assert_eq!(seen.told, [("qwen-lora".to_owned(), 85)]);
}

#[tokio::test]
async fn under_kueue_the_estimate_is_set_but_no_scheduler_is_told() {
    let job = resource(true, Some(running(0, 0)));
    let logs = [
        "{\"step\":0,\"max_steps\":100}\n",
        "{\"step\":10,\"max_steps\":100}\n",
    ];
    let seen = pace_scenario(&job, true, &logs, 30).await;
    // 3 s a step, 90 to go.
    assert_eq!(seen.status(1).estimated_completion_time, Some(at(30 + 270)));
    assert!(seen.told.is_empty(), "{:?}", seen.told);
}

/// `job` with a total runtime budget of `budget_s`, running since `T0_MS` after earlier runs
/// of `earlier_s` seconds.
fn budgeted(budget_s: u64, earlier_s: u64) -> TrainJobResource {
    let mut status = running(0, 0);
    status.run_seconds = earlier_s;
    status.running_since = Some(at(0));
    let mut job = resource(true, Some(status));
    job.spec.max_total_runtime_seconds = Some(budget_s);
    job
}

/// Reconciles `job` once per `(clock_s, steps)`, on one operator whose clock reads `T0_MS +
/// clock_s` at each; returns each reconcile's action and what the server saw.
async fn at_times(
    job: &TrainJobResource,
    admit: Admit,
    runs: Vec<(u64, Vec<Step>)>,
) -> (Vec<kube::runtime::controller::Action>, Vec<Seen>) {
    let times: Vec<u64> = runs.iter().map(|r| r.0).collect();
    let (client, task) = server(runs.into_iter().flat_map(|r| r.1).collect());
    let clock = Arc::new(AtomicU64::new(T0_MS));
    let read = clock.clone();
    let ctx = Arc::new(
        Context::new(client, RenderOptions::default(), Arc::new(Fixed(admit)))
            .with_clock(move || read.load(Ordering::SeqCst)),
    );
    let mut actions = Vec::new();
    for t in times {
        clock.store(T0_MS + t * 1000, Ordering::SeqCst);
        actions.push(
            ferry_k8s::reconcile(Arc::new(job.clone()), ctx.clone())
                .await
                .unwrap(),
        );
    }
    (actions, finish(task).await)
}

/// `spec.maxTotalRuntimeSeconds` on Kubernetes: the operator keeps the seconds of ended runs
/// (`status.runSeconds`) and when the current one started (`status.runningSince`); while the
/// job runs it checks again no later than the budget's end, and once runs add up to the
/// budget it suspends the gang (the pods get SIGTERM and their grace period) and the job fails
/// for good, `BudgetExhausted`, whatever restarts are left.
#[tokio::test]
async fn runs_add_up_against_the_total_runtime_budget_and_the_last_is_stopped() {
    let job = budgeted(100, 60);
    let log = "{\"step\":10,\"loss\":1.9}\n";
    // At 41 s the run reads its metrics as before, then the gang is suspended.
    let mut reached = read_metrics(&job, log);
    reached.pop();
    reached.extend([patch_gang(0, true), event(), patch_status(&job)]);
    let (actions, seen) = at_times(
        &job,
        ADMIT,
        vec![(30, read_metrics(&job, log)), (41, reached)],
    )
    .await;
    // 60 + 30 s used: checked again when the 10 s left are over.
    assert_eq!(
        actions[0],
        kube::runtime::controller::Action::requeue(std::time::Duration::from_secs(10))
    );
    let suspend = seen
        .iter()
        .find(|s| s.uri.starts_with(&gang_path(0)) && s.body == json!({"spec": {"suspend": true}}));
    assert!(suspend.is_some(), "the gang is suspended: {seen:#?}");
    let st = status_patch(&seen);
    assert_eq!(st.phase, Some(JobPhase::Failed));
    assert_eq!(st.restarts, 0);
    assert_eq!(st.run_seconds, 101, "the last run's 41 s are counted");
    let failed = st.conditions.iter().find(|c| c.type_ == "Failed").unwrap();
    assert_eq!(failed.reason, "BudgetExhausted");
    assert!(
        failed
            .message
            .contains("attempt 0 ran 41 s after 60 s of earlier runs")
            && failed
                .message
                .contains("spec.maxTotalRuntimeSeconds (100 s)")
            && failed.message.contains("no restart"),
        "{}",
        failed.message
    );
    let last = seen
        .iter()
        .rev()
        .find(|s| s.uri.starts_with(&format!("{TJ}/status")))
        .unwrap();
    assert_eq!(
        last.body["status"]["runningSince"],
        Value::Null,
        "removed by name"
    );
    assert_eq!(event_reasons(&seen), ["BudgetExhausted"]);
}

/// A gang that fails after its runs spent the budget is not restarted (a restart the budget
/// would stop at once), though `onFailure.maxRestarts` allows it.
#[tokio::test]
async fn a_failure_that_spent_the_budget_is_not_restarted() {
    let job = budgeted(100, 95);
    assert!(job.spec.on_failure.max_restarts > 0);
    let (_, seen) = at_times(
        &job,
        ADMIT,
        vec![(
            10,
            vec![
                get_gang(0, false, Some("Failed")),
                event(),
                patch_status(&job),
            ],
        )],
    )
    .await;
    let st = status_patch(&seen);
    assert_failed_for_good(&st, 0, "BudgetExhausted");
    assert_eq!(st.run_seconds, 105);

    // With budget left, the same failure restarts, and the ended run is counted.
    let job = budgeted(100, 50);
    let (_, seen) = at_times(&job, ADMIT, vec![(10, restart_of_failed(&job))]).await;
    let st = status_patch(&seen);
    assert_eq!((st.phase, st.restarts), (Some(JobPhase::Restarting), 1));
    assert_eq!((st.run_seconds, st.running_since), (60, None));
}

/// The run ends when its gang failed (the `Failed` condition's time), not when an operator
/// that was down for minutes finally sees it: the downtime is not counted, and the budget it
/// would have spent is still there for the restart.
#[tokio::test]
async fn a_run_is_counted_until_its_gang_failed_not_until_the_operator_saw_it() {
    let job = budgeted(100, 50);
    let mut steps = restart_of_failed(&job);
    let mut failed = gang(0, false, Some("Failed"));
    failed["status"]["conditions"][0]["lastTransitionTime"] = json!(at(30));
    steps[0] = step("GET", gang_path(0), 200, failed);
    let (_, seen) = at_times(&job, ADMIT, vec![(500, steps)]).await;
    let st = status_patch(&seen);
    assert_eq!((st.phase, st.restarts), (Some(JobPhase::Restarting), 1));
    assert_eq!(st.run_seconds, 80, "50 s before, 30 s until the failure");
}

/// A preempted run's seconds are kept, and the scheduler plans the job's next run with what
/// is left of the budget when that is tighter than its per-run limit.
#[tokio::test]
async fn a_preempted_run_is_counted_and_the_scheduler_plans_with_what_is_left() {
    let job = budgeted(100, 20);
    let (_, seen) = at_times(
        &job,
        Admit::Preempt("team-b reclaims its quota".into()),
        vec![(50, flip_suspend(&job, true))],
    )
    .await;
    let st = status_patch(&seen);
    assert_eq!(st.phase, Some(JobPhase::Preempted));
    assert_eq!((st.run_seconds, st.running_since.clone()), (70, None));
    let mut requeued = job.clone();
    requeued.status = Some(st);
    assert_eq!(
        ferry_k8s::admission::workload(&requeued).expected_duration_s,
        Some(30)
    );
    requeued.spec.max_runtime_seconds = Some(10);
    assert_eq!(
        ferry_k8s::admission::workload(&requeued).expected_duration_s,
        Some(10)
    );
}

/// A scheduler that keeps the job waiting, first in line, due to start at `0`.
struct FirstInLine(u64);
impl Admission for FirstInLine {
    fn decide(&self, _job: &TrainJobResource, _gang: &Gang) -> Admit {
        Admit::Wait("queued in team-a: first in line".into())
    }
    fn expected_start(&self, _job: &TrainJobResource) -> Option<u64> {
        Some(self.0)
    }
}

/// A queued job first in line carries the scheduler's expected start as
/// `status.estimatedStartTime`; once admitted, the estimate is removed by name.
#[tokio::test]
async fn a_queued_job_first_in_line_shows_when_it_starts() {
    let job = resource(true, None);
    let seen = reconciled(
        &job,
        Arc::new(FirstInLine(1_767_225_600)),
        create_suspended(&job),
    )
    .await;
    let st = status_patch(&seen);
    assert_eq!(st.phase, Some(JobPhase::Queued));
    assert_eq!(
        st.estimated_start_time.as_deref(),
        Some("2026-01-01T00:00:00Z")
    );
    let job = resource(true, Some(st));
    let seen = run(&job, ADMIT, flip_suspend(&job, false)).await;
    let last = seen.last().unwrap();
    assert_eq!(last.body["status"]["phase"], "Running");
    assert_eq!(
        last.body["status"]
            .as_object()
            .unwrap()
            .get("estimatedStartTime"),
        Some(&Value::Null)
    );
}

/// A scheduler whose kept forecast predates the job: it waits, and the next replay may run in
/// 3 s.
struct Missed;
impl Admission for Missed {
    fn decide(&self, _job: &TrainJobResource, _gang: &Gang) -> Admit {
        Admit::Wait("queued in team-a".into())
    }
    fn retell_in(&self, _job: &TrainJobResource) -> Option<u64> {
        Some(3)
    }
}

/// A job the kept forecast does not cover yet is reconciled again when the next replay may
/// run (`Admission::retell_in`), not at the minute's reconcile, so it is told its start within
/// seconds of arriving.
#[tokio::test]
async fn a_job_the_forecast_missed_is_reconciled_when_the_next_can_tell_it() {
    let job = resource(true, None);
    let (client, task) = crate::mock::strict_server(create_suspended(&job));
    let ctx = Context::new(client, RenderOptions::default(), Arc::new(Missed));
    let action = ferry_k8s::reconcile(Arc::new(job.clone()), Arc::new(ctx))
        .await
        .unwrap();
    assert_eq!(
        action,
        kube::runtime::controller::Action::requeue(std::time::Duration::from_secs(3))
    );
    let seen = finish(task).await;
    assert_eq!(status_patch(&seen).phase, Some(JobPhase::Queued));
}

/// A scheduler whose reason for keeping the job waiting the test changes; `None` admits it.
struct Reasons(std::sync::Mutex<Option<String>>);
impl Reasons {
    fn set(&self, why: Option<&str>) {
        *self.0.lock().unwrap() = why.map(str::to_owned);
    }
}
impl Admission for Reasons {
    fn decide(&self, job: &TrainJobResource, _gang: &Gang) -> Admit {
        self.waiting(job)
            .map_or(Admit::Run(Vec::new()), Admit::Wait)
    }
    fn waiting(&self, _job: &TrainJobResource) -> Option<String> {
        self.0.lock().unwrap().clone()
    }
}

/// A queued job's `status.message` is why it waits now, and a `Waiting` event is written
/// once per change of that reason: not at creation (the `Queued` event says it), not at a
/// reconcile that finds the same reason; once admitted, the message is the running one.
#[tokio::test]
async fn a_queued_job_says_why_it_waits_now_with_one_event_per_change() {
    let reasons = Arc::new(Reasons(std::sync::Mutex::new(Some(
        "needs 8 GPU(s); 0 of 8 free".into(),
    ))));
    let job = resource(true, None);
    let seen = reconciled(&job, reasons.clone(), create_suspended(&job)).await;
    assert_eq!(event_reasons(&seen), ["Queued"]);
    let st = status_patch(&seen);
    assert_eq!(st.message.as_deref(), Some("needs 8 GPU(s); 0 of 8 free"));

    // The same reason again: nothing is written, no event.
    let job = resource(true, Some(st));
    reconciled(&job, reasons.clone(), vec![get_gang(0, true, None)]).await;

    // Another job is now first in line: the message follows, with one event.
    let behind = "needs 8 GPU(s); 0 of 8 free; first in line: team-a/big";
    reasons.set(Some(behind));
    let steps = vec![get_gang(0, true, None), event(), patch_status(&job)];
    let seen = reconciled(&job, reasons.clone(), steps).await;
    assert_eq!(event_reasons(&seen), ["Waiting"]);
    assert_eq!(seen[1].body["note"], behind);
    let st = status_patch(&seen);
    assert_eq!(st.message.as_deref(), Some(behind));
    let job = resource(true, Some(st));
    reconciled(&job, reasons.clone(), vec![get_gang(0, true, None)]).await;

    // Admitted: the running message, and no `Waiting` event.
    reasons.set(None);
    let seen = reconciled(&job, reasons, flip_suspend(&job, false)).await;
    assert_eq!(event_reasons(&seen), ["Admitted"]);
    assert_eq!(
        status_patch(&seen).message.as_deref(),
        Some("attempt 0 admitted")
    );
}

/// Reconciles `job` once under Kueue against exactly `steps`.
async fn under_kueue(job: &TrainJobResource, steps: Vec<Step>) -> Vec<Seen> {
    let (client, task) = crate::mock::strict_server(steps);
    let mut opts = RenderOptions::default();
    opts.cluster.kueue = true;
    let ctx = Context::new(client, opts, Arc::new(Fixed(ADMIT)));
    ferry_k8s::reconcile(Arc::new(job.clone()), Arc::new(ctx))
        .await
        .unwrap();
    finish(task).await
}

/// Under Kueue, which would unsuspend a gang its workload is admitted for, a suspended job's
/// gang is deleted (its pods get their grace period); cleared, the job is queued again once
/// that gang is gone, and its gang is created anew, suspended, for Kueue to admit.
#[tokio::test]
async fn under_kueue_a_suspended_jobs_gang_is_deleted_and_created_anew_when_resumed() {
    let mut job = resource(true, Some(running(0, 0)));
    job.spec.suspend = true;
    let steps = vec![
        get_gang(0, false, None),
        delete_gang(0, None),
        event(),
        patch_status(&job),
    ];
    let seen = under_kueue(&job, steps).await;
    assert_eq!(event_reasons(&seen), ["Suspended"]);
    let st = status_patch(&seen);
    assert_eq!(st.phase, Some(JobPhase::Suspended));

    // Cleared while the deleted gang is still there: it waits.
    let mut job = resource(true, Some(st));
    let terminating = {
        let mut g = gang(0, false, None);
        g["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        g
    };
    under_kueue(&job, vec![step("GET", gang_path(0), 200, terminating)]).await;
    job.spec.suspend = true;
    under_kueue(&job, vec![not_found("GET", gang_path(0))]).await;

    // Gone: queued again, with a new suspended gang of the same attempt.
    job.spec.suspend = false;
    let mut steps = vec![not_found("GET", gang_path(0)), event()];
    steps.extend(create_suspended(&job).into_iter().skip(1));
    let seen = under_kueue(&job, steps).await;
    assert_eq!(event_reasons(&seen), ["Resumed", "Queued"]);
    assert_eq!(seen[4].body["spec"]["suspend"], true, "for Kueue to admit");
    let st = status_patch(&seen);
    assert_eq!(
        (st.phase, st.attempt, st.restarts),
        (Some(JobPhase::Queued), 0, 0)
    );
}
