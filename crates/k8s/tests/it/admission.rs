//! Admission through Ferry's scheduler with Kueue's protocol, against the mocked API server:
//! two jobs compete for one 8-GPU node; the high-priority one preempts the low one by
//! suspension, the low one is reported evicted only once its pods are gone, and it is
//! unsuspended (pinned to the node) after the high one finishes. Then an operator restart
//! re-registers a running gang without preempting it.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use ferry_k8s::admission::{
    ANNOTATION_ADMITTED_AT, ANNOTATION_PLACEMENT, FORECAST_MAX_AGE_S, FORECAST_MIN_INTERVAL_S,
    cluster_from_nodes, queue_spec,
};
use ferry_k8s::cluster::{SchedulerInputs, priority_classes};
use ferry_k8s::crd::{TrainJobClusterStatus, TrainJobResource};
use ferry_k8s::{Admission, Admit, Gang, RenderOptions, SchedAdmission};
use ferry_sched::{Options, PodPlacement};
use ferry_spec::JobPhase;
use futures::channel::mpsc::UnboundedReceiver;
use k8s_openapi::api::core::v1::Node;
use serde_json::{Value, json};

use crate::mock::{Seen, Step, event, finish, not_found, reconciled, server, step};
use crate::specs::*;

const NS: &str = "team-a";
const JOBS: &str = "/apis/batch/v1/namespaces/team-a/jobs";
const PODS: &str = "/api/v1/namespaces/team-a/pods";
const NODE: &str = "gpu-node-1";

fn tj(name: &str) -> String {
    format!("/apis/ferry.dev/v1alpha1/namespaces/team-a/trainjobs/{name}")
}

/// What the API server answers to a patch of `TrainJob` `name`.
fn echo(name: &str) -> Value {
    serde_json::to_value(resource(name, "low", None)).unwrap()
}

fn svc(name: &str) -> String {
    format!("/api/v1/namespaces/team-a/services/{name}")
}

/// An 8-GPU single-node LoRA job in queue `team-a` at `priority`.
fn resource(name: &str, priority: &str, status: Option<TrainJobClusterStatus>) -> TrainJobResource {
    let mut spec = serde_json::to_value(job(SINGLE_NODE_LORA).spec).unwrap();
    spec["resources"]["gpusPerNode"] = json!(8);
    spec["priority"] = json!(priority);
    let v = json!({
        "metadata": {"name": name, "namespace": NS, "uid": format!("uid-{name}"), "generation": 1,
            "resourceVersion": "7", "finalizers": ["ferry.dev/cleanup"],
            "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": spec,
    });
    let mut r: TrainJobResource = serde_json::from_value(v).unwrap();
    r.status = status;
    r
}

fn node(name: &str, gpus: &str, labels: Value) -> Node {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": labels},
        "status": {"allocatable": {"nvidia.com/gpu": gpus, "cpu": "96"}},
    }))
    .unwrap()
}

/// One 8-GPU H100 node (flavor from GPU feature discovery's label), one queue of 8 GPUs, the
/// default policy.
fn admission() -> (SchedAdmission, UnboundedReceiver<()>) {
    admission_with(Options::default())
}

/// `admission` under the policy switches `options` (`ferry operator --scheduler-options`).
fn admission_with(options: Options) -> (SchedAdmission, UnboundedReceiver<()>) {
    admission_in(options, &[])
}

/// `admission_with` on a cluster that also has the PriorityClasses `classes`.
fn admission_in(
    options: Options,
    classes: &[k8s_openapi::api::scheduling::v1::PriorityClass],
) -> (SchedAdmission, UnboundedReceiver<()>) {
    let nodes = [
        node(NODE, "8", h100_in("r1")),
        node("cpu-node", "0", json!({})),
    ];
    admission_on(&nodes, 8, options, classes)
}

/// The labels of an H100 node in `rack`.
fn h100_in(rack: &str) -> Value {
    json!({"nvidia.com/gpu.product": "H100-80GB", "topology.kubernetes.io/rack": rack})
}

/// `admission_in` on `nodes`, the queue's nominal quota `nominal` GPUs.
fn admission_on(
    nodes: &[Node],
    nominal: i32,
    options: Options,
    classes: &[k8s_openapi::api::scheduling::v1::PriorityClass],
) -> (SchedAdmission, UnboundedReceiver<()>) {
    let cluster = cluster_from_nodes(nodes, None);
    let queues = parse(QUEUES)
        .into_iter()
        .filter_map(|r| match r {
            ferry_spec::Resource::Queue(q) if q.metadata.namespace == NS => Some(q),
            _ => None,
        })
        .map(|mut q| {
            q.spec.cohort = None;
            q.spec.quotas[0].nominal = nominal;
            q.spec.quotas[0].borrowing_limit = None;
            queue_spec(&q.metadata.namespace, &q.metadata.name, &q.spec)
        })
        .collect();
    let (tx, rx) = futures::channel::mpsc::unbounded();
    let inputs = SchedulerInputs {
        cluster,
        queues,
        cohorts: Vec::new(),
        priorities: priority_classes(classes),
    };
    let a = SchedAdmission::new(inputs, options, Some(tx))
        .unwrap()
        .with_clock(|| 1_000);
    (a, rx)
}

/// `admission()` on a clock the test moves, starting at 1,000 s.
fn clocked() -> (SchedAdmission, Arc<AtomicU64>) {
    let clock = Arc::new(AtomicU64::new(1_000));
    let read = clock.clone();
    let (a, _rx) = admission();
    (a.with_clock(move || read.load(Ordering::SeqCst)), clock)
}

/// Moves the test clock `by` seconds.
fn tick(clock: &AtomicU64, by: u64) {
    clock.fetch_add(by, Ordering::SeqCst);
}

fn gang(name: &str, suspend: bool, placement: Option<&str>, condition: Option<&str>) -> Value {
    let mut g = json!({"apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": NS}, "spec": {"suspend": suspend, "template": {}}});
    if let Some(p) = placement {
        g["metadata"]["annotations"] =
            json!({ANNOTATION_PLACEMENT: p, ANNOTATION_ADMITTED_AT: "1000"});
    }
    if let Some(c) = condition {
        g["status"] = json!({"conditions": [{"type": c, "status": "True"}]});
    }
    g
}

fn status_of(seen: &[Seen], name: &str) -> TrainJobClusterStatus {
    let s = seen
        .iter()
        .rev()
        .find(|s| s.uri.starts_with(&format!("{}/status", tj(name))))
        .expect("a status patch");
    serde_json::from_value(s.body["status"].clone()).unwrap()
}

fn pods(phases: &[&str]) -> Value {
    let items: Vec<Value> = phases
        .iter()
        .map(|p| json!({"metadata": {"name": "p"}, "status": {"phase": p}}))
        .collect();
    json!({"apiVersion": "v1", "kind": "PodList", "metadata": {}, "items": items})
}

/// The path of `name`'s gang (attempt 0).
fn gang_path(name: &str) -> String {
    format!("{JOBS}/{name}-0")
}

/// The operator reads `name`'s gang, which exists (`placement`, `condition` as given).
fn get_gang(name: &str, suspend: bool, placement: Option<&str>, condition: Option<&str>) -> Step {
    let answer = gang(&format!("{name}-0"), suspend, placement, condition);
    step("GET", gang_path(name), 200, answer)
}

/// The operator patches `name`'s gang (an apply, or a change of `suspend`); the server
/// answers with the gang as `suspend`.
fn patch_gang(name: &str, suspend: bool) -> Step {
    let answer = gang(&format!("{name}-0"), suspend, None, None);
    step("PATCH", gang_path(name), 200, answer)
}

/// The operator patches `TrainJob` `name`'s status.
fn patch_status(name: &str) -> Step {
    step("PATCH", format!("{}/status", tj(name)), 200, echo(name))
}

/// Steps of a first reconcile that creates the gang (finalizer already present).
fn create_steps(name: &str, suspended: bool) -> Vec<Step> {
    vec![
        not_found("GET", gang_path(name)),
        step(
            "PATCH",
            format!("/api/v1/namespaces/team-a/configmaps/{name}-0-launch"),
            200,
            json!({}),
        ),
        step("PATCH", svc(name), 200, json!({})),
        patch_gang(name, suspended),
        event(),
        patch_status(name),
    ]
}

/// Steps of a reconcile that admits `name`'s suspended gang: unsuspended (and pinned) in one
/// apply, an event, the status.
fn unsuspend_steps(name: &str) -> Vec<Step> {
    vec![
        get_gang(name, true, None, None),
        patch_gang(name, false),
        event(),
        patch_status(name),
    ]
}

/// Reconciles `job` once, `admission` deciding, against `steps`.
async fn run(
    admission: &Arc<SchedAdmission>,
    job: TrainJobResource,
    steps: Vec<Step>,
) -> Vec<Seen> {
    reconciled(&job, admission.clone(), steps).await
}

fn hostnames(pod_spec: &Value) -> Value {
    let terms = &pod_spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        ["nodeSelectorTerms"];
    let exprs = terms[0]["matchExpressions"].as_array().unwrap();
    let host = exprs
        .iter()
        .find(|e| e["key"] == "kubernetes.io/hostname")
        .expect("a hostname expression");
    assert!(
        exprs.iter().any(|e| e["key"] == "ferry.dev/gpu-flavor"),
        "the flavor expression is kept: {exprs:?}"
    );
    host["values"].clone()
}

fn woke(rx: &mut UnboundedReceiver<()>) -> bool {
    let mut any = false;
    while let Ok(()) = rx.try_recv() {
        any = true;
    }
    any
}

#[tokio::test]
async fn high_priority_preempts_low_by_suspension_then_low_resumes() {
    let (admission, mut rx) = admission();
    let admission = Arc::new(admission);

    // 1. The low job arrives alone: admitted, created running and pinned to the node.
    let seen = run(
        &admission,
        resource("low", "low", None),
        create_steps("low", false),
    )
    .await;
    let low_gang = &seen[3].body;
    assert_eq!(low_gang["spec"]["suspend"], false);
    assert_eq!(
        hostnames(&low_gang["spec"]["template"]["spec"]),
        json!([NODE])
    );
    let placement: Vec<PodPlacement> = serde_json::from_str(
        low_gang["metadata"]["annotations"][ANNOTATION_PLACEMENT]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(placement[0].node, NODE);
    assert_eq!(placement[0].gpus.len(), 8);
    let low_status = status_of(&seen, "low");
    assert_eq!(low_status.phase, Some(JobPhase::Running));
    let low_annotation = serde_json::to_string(&placement).unwrap();

    // 2. The high job arrives: created suspended; the scheduler preempts the low one and
    //    wakes the operator to reconcile it.
    let seen = run(
        &admission,
        resource("high", "high", None),
        create_steps("high", true),
    )
    .await;
    assert_eq!(seen[3].body["spec"]["suspend"], true, "created suspended");
    let high_status = status_of(&seen, "high");
    assert_eq!(high_status.phase, Some(JobPhase::Queued));
    assert!(
        woke(&mut rx),
        "the preemption of another job wakes the operator"
    );

    // 3. The low job is suspended to preempt it.
    let steps = vec![
        get_gang("low", false, Some(&low_annotation), None),
        patch_gang("low", false),
        event(),
        patch_status("low"),
    ];
    let seen = run(&admission, resource("low", "low", Some(low_status)), steps).await;
    assert_eq!(seen[1].body, json!({"spec": {"suspend": true}}));
    let low_status = status_of(&seen, "low");
    assert_eq!(low_status.phase, Some(JobPhase::Preempted));
    assert!(
        low_status
            .message
            .as_deref()
            .unwrap()
            .contains("team-a/high"),
        "{:?}",
        low_status.message
    );

    // 4. Its pod is still terminating: not evicted yet, so the high job keeps waiting.
    let steps = vec![
        get_gang("low", true, None, None),
        step("GET", PODS, 200, pods(&["Running", "Succeeded"])),
    ];
    let seen = run(
        &admission,
        resource("low", "low", Some(low_status.clone())),
        steps,
    )
    .await;
    assert!(
        seen[1]
            .uri
            .contains("labelSelector=ferry.dev%2Ftrain-job%3Dlow%2Cferry.dev%2Fattempt%3D0"),
        "{}",
        seen[1].uri
    );
    assert_eq!(
        admission.decide(&resource("high", "high", None), &Gang::Suspended),
        Admit::Wait(
            "needs 8 GPU(s); 0 of 8 free; expected to start when the running work in its way \
             ends (status.estimatedStartTime)"
                .into()
        ),
        "GPUs stay the victim's until its pods are gone (it leaves at once, as far as the \
         forecast knows)"
    );

    // 5. Its pods are gone: evicted and requeued; the scheduler admits the high job.
    let steps = vec![
        get_gang("low", true, None, None),
        step("GET", PODS, 200, pods(&["Failed"])),
        event(),
        event(),
        patch_status("low"),
    ];
    let seen = run(&admission, resource("low", "low", Some(low_status)), steps).await;
    let low_status = status_of(&seen, "low");
    assert_eq!(low_status.phase, Some(JobPhase::Queued));
    // Requeued, it says why it waits now (the `Evicted` event keeps why it stopped).
    let why = low_status.message.as_deref().unwrap();
    assert!(
        why.starts_with("needs 8 GPU(s); 0 of 8 free; first in line, but some running work"),
        "{why}"
    );
    assert_eq!(
        (&seen[3].body["reason"], &seen[3].body["note"]),
        (&json!("Waiting"), &json!(why))
    );
    assert!(
        woke(&mut rx),
        "the admission of the high job wakes the operator"
    );

    // 6. The high job is pinned to the node and unsuspended in one apply.
    let high = resource("high", "high", Some(high_status));
    let seen = run(&admission, high, unsuspend_steps("high")).await;
    assert!(
        seen[1].uri.contains("fieldManager=ferry"),
        "{}",
        seen[1].uri
    );
    assert_eq!(seen[1].body["spec"]["suspend"], false);
    assert_eq!(
        hostnames(&seen[1].body["spec"]["template"]["spec"]),
        json!([NODE])
    );
    let high_status = status_of(&seen, "high");
    assert_eq!(high_status.phase, Some(JobPhase::Running));

    // 7. The high job completes: finished, and the low job is admitted again.
    let steps = vec![
        get_gang("high", false, None, Some("Complete")),
        event(),
        patch_status("high"),
    ];
    let seen = run(
        &admission,
        resource("high", "high", Some(high_status)),
        steps,
    )
    .await;
    assert_eq!(status_of(&seen, "high").phase, Some(JobPhase::Succeeded));
    assert!(
        woke(&mut rx),
        "the low job's readmission wakes the operator"
    );

    // 8. The low job is unsuspended on the node; its launch resumes from its checkpoint.
    let low = resource("low", "low", Some(low_status));
    let seen = run(&admission, low, unsuspend_steps("low")).await;
    let body = &seen[1].body;
    assert_eq!(body["spec"]["suspend"], false);
    let pod = &body["spec"]["template"]["spec"];
    assert_eq!(hostnames(pod), json!([NODE]));
    assert!(
        pod["containers"][0]["command"][2]
            .as_str()
            .unwrap()
            .contains("--resume_from_checkpoint"),
    );
    assert_eq!(status_of(&seen, "low").phase, Some(JobPhase::Running));
}

#[tokio::test]
async fn operator_restart_reregisters_running_gangs_without_preemption() {
    let (admission, _rx) = admission();
    let running = TrainJobClusterStatus {
        phase: Some(JobPhase::Running),
        gang: Some("low-0".into()),
        ..TrainJobClusterStatus::default()
    };
    let placement = format!(r#"[{{"node":"{NODE}","gpus":[0,1,2,3,4,5,6,7]}}]"#);
    let listed = json!({
        "apiVersion": "ferry.dev/v1alpha1", "kind": "TrainJobList", "metadata": {},
        "items": [serde_json::to_value(resource("low", "low", Some(running.clone()))).unwrap()],
    });
    let (client, task) = server(vec![
        step("GET", "/apis/ferry.dev/v1alpha1/trainjobs", 200, listed),
        get_gang("low", false, Some(&placement), None),
    ]);
    let restored = ferry_k8s::operator::restore_running(&client, false, &admission)
        .await
        .unwrap();
    finish(task).await;
    assert_eq!(restored, 1);

    // A same-priority job waits behind it; the running one keeps its node.
    let other = resource("other", "low", None);
    assert!(matches!(
        admission.decide(&other, &Gang::Absent),
        Admit::Wait(_)
    ));
    let gang_view = Gang::Running {
        placement: serde_json::from_str(&placement).unwrap(),
        admitted_at: Some(1000),
    };
    let low = resource("low", "low", Some(running));
    assert_eq!(
        admission.decide(&low, &gang_view),
        Admit::Run(serde_json::from_str(&placement).unwrap())
    );
    // It finishes: the waiting job is admitted on the freed node.
    admission.finished(&low);
    assert!(matches!(
        admission.decide(&other, &Gang::Suspended),
        Admit::Run(p) if p[0].node == NODE
    ));
}

#[test]
fn bad_queue_references_are_never_admissible_and_name_the_fix() {
    let (admission, _rx) = admission();
    let mut job = resource("lost", "low", None);
    job.spec.queue = Some("nope".into());
    let Admit::Never(why) = admission.decide(&job, &Gang::Absent) else {
        panic!("expected Never")
    };
    assert!(
        why.contains("team-a/nope") && why.contains("team-a/team-a"),
        "{why}"
    );

    let mut big = resource("big", "low", None);
    big.spec.resources.nodes = 2;
    let Admit::Never(why) = admission.decide(&big, &Gang::Absent) else {
        panic!("expected Never")
    };
    assert!(why.contains("2 pods x 8 GPUs"), "{why}");

    // A CPU-only gang asks the scheduler for nothing: it runs anywhere, in any namespace.
    let mut cpu = resource("cpu", "low", None);
    cpu.spec.resources.gpus_per_node = 0;
    cpu.spec.queue = Some("nope".into());
    assert_eq!(admission.decide(&cpu, &Gang::Absent), Admit::Run(vec![]));
}

/// A TrainJob may name any PriorityClass of the cluster (its pods get that class): Ferry's
/// scheduler ranks it by the class's value among Ferry's own, so `production` (50,000, between
/// `ferry-normal` and `ferry-high`) preempts a job that names no priority (`normal`), a `low`
/// one does not, nor does one of a higher class with `preemptionPolicy: Never`, and a class the
/// cluster lacks is refused with the names it has.
#[test]
fn a_cluster_priority_class_ranks_a_job_by_its_value() {
    let class = |v: Value| -> k8s_openapi::api::scheduling::v1::PriorityClass {
        serde_json::from_value(v).unwrap()
    };
    let classes = [
        class(json!({"metadata": {"name": "production"}, "value": 50_000})),
        class(
            json!({"metadata": {"name": "overnight"}, "value": 60_000, "preemptionPolicy": "Never"}),
        ),
    ];
    let (admission, _rx) = admission_in(Options::default(), &classes);
    let mut plain = resource("plain", "low", None);
    plain.spec.priority = None;
    let Admit::Run(placement) = admission.decide(&plain, &Gang::Absent) else {
        panic!("the node is free")
    };
    let plain_runs = Gang::Running {
        placement: Some(placement),
        admitted_at: Some(900),
    };
    assert!(matches!(
        admission.decide(&resource("batch", "low", None), &Gang::Absent),
        Admit::Wait(_)
    ));
    assert!(matches!(
        admission.decide(&resource("night", "overnight", None), &Gang::Absent),
        Admit::Wait(_)
    ));
    assert!(matches!(
        admission.decide(&plain, &plain_runs),
        Admit::Run(_)
    ));
    let urgent = resource("urgent", "production", None);
    assert!(matches!(
        admission.decide(&urgent, &Gang::Absent),
        Admit::Wait(_)
    ));
    assert!(matches!(
        admission.decide(&plain, &plain_runs),
        Admit::Preempt(why) if why.contains("team-a/urgent")
    ));
    let Admit::Never(why) = admission.decide(&resource("odd", "critical", None), &Gang::Absent)
    else {
        panic!("an unknown class is never admissible")
    };
    assert!(
        why.contains("`critical`") && why.contains("production"),
        "{why}"
    );
}

#[test]
fn a_time_limit_is_the_workloads_expected_duration() {
    let mut job = resource("capped", "low", None);
    assert_eq!(
        ferry_k8s::admission::workload(&job).expected_duration_s,
        None
    );
    job.spec.max_runtime_seconds = Some(7200);
    let w = ferry_k8s::admission::workload(&job);
    assert_eq!(w.expected_duration_s, Some(7200));
    assert_eq!(
        (w.id.as_str(), w.queue.as_str()),
        ("team-a/capped", "team-a/team-a")
    );
    // A gang that must stay in one rack asks the scheduler for exactly that.
    assert_eq!(w.topology, None);
    job.spec.resources.topology = Some(ferry_spec::Topology::Rack);
    assert_eq!(
        ferry_k8s::admission::workload(&job).topology,
        Some(ferry_sched::Topology::Rack)
    );
    // So does one that says how much longer it runs split across racks.
    assert_eq!(w.split_slowdown_pct, None);
    job.spec.resources.topology = None;
    job.spec.resources.split_slowdown_pct = Some(30);
    assert_eq!(
        ferry_k8s::admission::workload(&job).split_slowdown_pct,
        Some(30)
    );
}

#[test]
fn nodes_become_the_schedulers_cluster() {
    let mut cordoned = node("n3", "8", json!({"ferry.dev/gpu-flavor": "H100-80GB"}));
    cordoned.spec = Some(serde_json::from_value(json!({"unschedulable": true})).unwrap());
    let nodes = [
        node(
            "n2",
            "4",
            json!({"ferry.dev/gpu-flavor": "H200", "nvidia.com/gpu.product": "NVIDIA-H200",
                   "my/rack": "r7", "nvidia.com/gpu.clique": "nvl-1"}),
        ),
        node(
            "n1",
            "8",
            json!({"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}),
        ),
        cordoned,
        node("no-flavor", "8", json!({})),
        node("cpu", "0", json!({"ferry.dev/gpu-flavor": "H100-80GB"})),
    ];
    let c = cluster_from_nodes(&nodes, Some("my/rack"));
    let got: Vec<_> = c
        .nodes
        .iter()
        .map(|n| {
            (
                n.name.as_str(),
                n.gpus,
                n.flavor.as_str(),
                n.rack.as_deref(),
                n.nvlink_domain.as_deref(),
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            ("n1", 8, "NVIDIA-H100-80GB-HBM3", None, None),
            ("n2", 4, "H200", Some("r7"), Some("nvl-1")),
        ]
    );
}

#[test]
fn pinned_gangs_stay_schema_valid_and_pin_every_pod() {
    let placement: Vec<PodPlacement> = serde_json::from_str(
        r#"[{"node":"n-a","gpus":[0,1,2,3,4,5,6,7]},{"node":"n-b","gpus":[0,1,2,3,4,5,6,7]}]"#,
    )
    .unwrap();
    for jobset in [false, true] {
        let mut opts = RenderOptions::default();
        opts.cluster.jobset = jobset;
        let job = job(TWO_NODE_FULL);
        let mut objs = ferry_k8s::train::render(
            &job,
            ferry_k8s::Attempt {
                number: 0,
                suspend: false,
            },
            &opts,
        )
        .unwrap();
        ferry_k8s::train::pin(&mut objs.gang, &placement, 1234);
        crate::schema::assert_valid(&objs.all());
        let pod = if jobset {
            &objs.gang["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
        } else {
            &objs.gang["spec"]["template"]["spec"]
        };
        assert_eq!(hostnames(pod), json!(["n-a", "n-b"]));
        let ann = &objs.gang["metadata"]["annotations"];
        assert_eq!(ann[ANNOTATION_ADMITTED_AT], "1234");
        assert_eq!(
            Gang::observe(&objs.gang),
            Gang::Running {
                placement: Some(placement.clone()),
                admitted_at: Some(1234)
            }
        );
    }
}

#[test]
fn restored_gangs_keep_their_gpus_on_a_shared_node() {
    let (admission, _rx) = admission();
    let half = |name: &str| {
        let mut r = resource(name, "low", None);
        r.spec.resources.gpus_per_node = 4;
        r
    };
    let running = |gpus: &str| Gang::Running {
        placement: Some(
            serde_json::from_str(&format!(r#"[{{"node":"{NODE}","gpus":{gpus}}}]"#)).unwrap(),
        ),
        admitted_at: Some(900),
    };
    assert!(matches!(
        admission.decide(&half("a"), &running("[0,1,2,3]")),
        Admit::Run(_)
    ));
    // The same GPUs cannot be claimed twice: that gang is suspended, not double-booked.
    assert!(matches!(
        admission.decide(&half("dup"), &running("[2,3,4,5]")),
        Admit::Preempt(why) if why.contains("already held")
    ));
    assert!(matches!(
        admission.decide(&half("b"), &running("[4,5,6,7]")),
        Admit::Run(_)
    ));
    // The node is full: a new job waits, nobody is preempted.
    assert!(matches!(
        admission.decide(&half("c"), &Gang::Absent),
        Admit::Wait(_)
    ));
}

/// The API reads of one `scheduler_inputs`: `nodes`, the one queue of team-a, `classes`.
fn input_reads(nodes: &Value, classes: &Value) -> Vec<Step> {
    input_reads_with(nodes, classes, Some(8))
}

/// `input_reads`, with team-a's queue of `nominal` GPUs, or with no queue at all.
fn input_reads_with(nodes: &Value, classes: &Value, nominal: Option<u32>) -> Vec<Step> {
    let queue = nominal.map(|n| json!({"quotas": [{"flavor": "H100-80GB", "nominal": n}]}));
    input_reads_of(nodes, classes, queue, None)
}

/// The reads of the scheduler's inputs: team-a's queue with `queue_spec` (none without), the
/// Ferry Cohorts `cohorts` (`None`: their CRD is not installed, as before Ferry had one).
fn input_reads_of(
    nodes: &Value,
    classes: &Value,
    queue_spec: Option<Value>,
    cohorts: Option<Value>,
) -> Vec<Step> {
    let items = match queue_spec {
        Some(spec) => json!([{"apiVersion": "ferry.dev/v1alpha1", "kind": "Queue",
             "metadata": {"name": "team-a", "namespace": "team-a"}, "spec": spec}]),
        None => json!([]),
    };
    let queues = json!({"apiVersion": "ferry.dev/v1alpha1", "kind": "QueueList", "metadata": {}, "items": items});
    let cohorts = match cohorts {
        Some(items) => step(
            "GET",
            "/apis/ferry.dev/v1alpha1/cohorts",
            200,
            json!({"apiVersion": "ferry.dev/v1alpha1", "kind": "CohortList", "metadata": {}, "items": items}),
        ),
        None => not_found("GET", "/apis/ferry.dev/v1alpha1/cohorts"),
    };
    vec![
        step("GET", "/api/v1/nodes", 200, nodes.clone()),
        step("GET", "/apis/ferry.dev/v1alpha1/queues", 200, queues),
        cohorts,
        step(
            "GET",
            "/apis/scheduling.k8s.io/v1/priorityclasses",
            200,
            classes.clone(),
        ),
    ]
}

fn class_list(classes: &[(&str, i32)]) -> Value {
    let items: Vec<Value> = classes
        .iter()
        .map(|(name, value)| json!({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name}, "value": value}))
        .collect();
    json!({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClassList", "metadata": {}, "items": items})
}

/// The scheduler is built from the GPU nodes, the Queues, the Ferry Cohorts and the cluster's
/// PriorityClasses, re-read every minute: a change rebuilds it in place (a node that joined
/// takes a two-node gang, as does a Cohort with GPUs of its own for the queue to borrow; a new
/// class is one a job may name); only the last Queue's deletion, which turns Ferry's scheduler
/// off, ends the operator so its restart admits every job.
#[tokio::test(start_paused = true)]
async fn a_changed_node_queue_or_priority_class_set_rebuilds_the_scheduler_in_place() {
    let node_list = |nodes: Value| json!({"apiVersion": "v1", "kind": "NodeList", "metadata": {}, "items": nodes});
    let gpu_node = |name: &str| {
        json!({"metadata": {"name": name, "labels": {"ferry.dev/gpu-flavor": "H100-80GB"}},
               "status": {"allocatable": {"nvidia.com/gpu": "8"}}})
    };
    let one = node_list(json!([gpu_node("n1")]));
    let two = node_list(json!([gpu_node("n1"), gpu_node("n2")]));
    let classes = class_list(&[
        ("ferry-high", 100_000),
        ("production", 50_000),
        ("system-cluster-critical", 2_000_000_000),
    ]);
    let more = class_list(&[("production", 50_000), ("batch", 500)]);
    let mut wide = resource("wide", "low", None);
    wide.spec.resources.nodes = 2;
    let batch = resource("nightly", "batch", None);
    for (changed, nodes) in [
        // A node joined (and the queue grew): the two-node gang now fits.
        (input_reads_with(&two, &classes, Some(16)), &two),
        // A PriorityClass was created: a job may name it.
        (input_reads(&one, &more), &one),
        // A node joined, and a Cohort with 8 GPUs of its own was created for team-a's queue
        // (still of 8) to borrow from: the two-node gang now fits.
        (
            input_reads_of(
                &two,
                &classes,
                Some(json!({"cohort": "research",
                    "quotas": [{"flavor": "H100-80GB", "nominal": 8}]})),
                Some(
                    json!([{"apiVersion": "ferry.dev/v1alpha1", "kind": "Cohort",
                    "metadata": {"name": "research"},
                    "spec": {"quotas": [{"flavor": "any", "nominal": 8}]}}]),
                ),
            ),
            &two,
        ),
    ] {
        let (client, task) = server(
            [
                input_reads(&one, &classes),
                // First re-read: unchanged, keep going.
                input_reads(&one, &classes),
                changed,
                // The last Queue is deleted: the operator ends.
                input_reads_with(nodes, &more, None),
            ]
            .into_iter()
            .flatten()
            .collect(),
        );
        let initial = ferry_k8s::cluster::scheduler_inputs(&client, None)
            .await
            .unwrap();
        assert_eq!(initial.cluster.nodes.len(), 1);
        assert_eq!(initial.queues[0].name, "team-a/team-a");
        // Ferry's names on the scale of the `ferry-` classes its pods get, and the cluster's
        // own classes beside them; system classes are not for jobs.
        let named: Vec<(&str, i32)> = initial
            .priorities
            .iter()
            .map(|c| (c.name.as_str(), c.value))
            .collect();
        assert_eq!(
            named,
            [
                ("low", 1_000),
                ("normal", 10_000),
                ("high", 100_000),
                ("production", 50_000)
            ]
        );
        let sched = Arc::new(
            SchedAdmission::new(initial.clone(), Options::default(), None)
                .unwrap()
                .with_clock(|| 1_000),
        );
        assert!(matches!(
            sched.decide(&wide, &Gang::Absent),
            Admit::Never(_)
        ));
        assert!(matches!(
            sched.decide(&batch, &Gang::Absent),
            Admit::Never(_)
        ));
        ferry_k8s::operator::watch_inputs(&client, None, Some(initial), Some(sched.clone()))
            .await
            .unwrap();
        finish(task).await;
        if nodes == &two {
            assert!(matches!(sched.decide(&wide, &Gang::Absent), Admit::Run(p) if p.len() == 2));
        } else {
            assert!(matches!(sched.decide(&batch, &Gang::Absent), Admit::Run(_)));
        }
    }
}

/// A rebuild keeps what runs where it runs and what waits in its order: a job waiting for
/// a full node starts on a node that joined; a gang on a node that left is preempted, and
/// requeued once stopped; a waiting job whose queue is gone is told so at its next decision.
#[test]
fn a_rebuilt_scheduler_keeps_running_gangs_and_waiting_jobs() {
    let (admission, _rx) = admission();
    let (a, b) = (resource("a", "low", None), resource("b", "low", None));
    let Admit::Run(on) = admission.decide(&a, &Gang::Absent) else {
        panic!("a runs")
    };
    assert_eq!(on[0].node, NODE);
    assert!(matches!(
        admission.decide(&b, &Gang::Absent),
        Admit::Wait(_)
    ));
    let gpu = json!({"nvidia.com/gpu.product": "H100-80GB"});
    let inputs = |nodes: &[Node], nominal: u32, queue: &str| {
        let mut q = queue_spec(NS, queue, &Default::default());
        q.quotas = vec![ferry_sched::FlavorQuota {
            flavor: "H100-80GB".into(),
            nominal,
            borrowing_limit: None,
            lending_limit: None,
        }];
        SchedulerInputs {
            cluster: cluster_from_nodes(nodes, None),
            queues: vec![q],
            cohorts: Vec::new(),
            priorities: priority_classes(&[]),
        }
    };
    let both = [
        node(NODE, "8", gpu.clone()),
        node("gpu-node-2", "8", gpu.clone()),
    ];
    let r = admission.rebuild(inputs(&both, 16, "team-a")).unwrap();
    assert_eq!((r.kept, r.preempted.len(), r.dropped.len()), (2, 0, 0));
    // `a` was not moved; `b` started on the node that joined.
    assert!(matches!(admission.decide(&a, &Gang::Absent), Admit::Run(p) if p == on));
    let Admit::Run(b_on) = admission.decide(&b, &Gang::Absent) else {
        panic!("b runs on the new node")
    };
    assert_eq!(b_on[0].node, "gpu-node-2");

    // The first node leaves: `a` is preempted, then waits for `b`'s node.
    let r = admission
        .rebuild(inputs(
            &[node("gpu-node-2", "8", gpu.clone())],
            16,
            "team-a",
        ))
        .unwrap();
    assert_eq!(r.preempted, ["team-a/a"]);
    assert!(matches!(
        admission.decide(&a, &Gang::Absent),
        Admit::Preempt(why) if why.contains("the cluster changed under it")
    ));
    admission.evicted(&a);
    assert!(matches!(
        admission.decide(&a, &Gang::Absent),
        Admit::Wait(_)
    ));
    admission.finished(&b);
    assert!(
        matches!(admission.decide(&a, &Gang::Absent), Admit::Run(p) if p[0].node == "gpu-node-2")
    );

    // A waiting job whose queue is gone is dropped and refused at its next decision.
    let c = resource("c", "low", None);
    assert!(matches!(
        admission.decide(&c, &Gang::Absent),
        Admit::Wait(_)
    ));
    let r = admission
        .rebuild(inputs(&[node("gpu-node-2", "8", gpu)], 8, "other"))
        .unwrap();
    assert_eq!(r.dropped, ["team-a/c"]);
    assert!(
        matches!(admission.decide(&c, &Gang::Absent), Admit::Never(why) if why.contains("team-a"))
    );
}

/// A Queue stopped with `HoldAndDrain` (the operator rebuilds its scheduler for the changed
/// Queue) stops its running gang, saying so, and keeps it waiting, saying why, until the
/// Queue is released; then it runs again where it may.
#[test]
fn a_drained_queue_stops_its_gang_until_it_is_released() {
    let (admission, _rx) = admission();
    let a = resource("a", "low", None);
    let Admit::Run(on) = admission.decide(&a, &Gang::Absent) else {
        panic!("a runs")
    };
    let gpu = json!({"nvidia.com/gpu.product": "H100-80GB"});
    let inputs = |policy: &str| {
        let spec: ferry_spec::QueueSpec = serde_json::from_value(json!({
            "quotas": [{"flavor": "H100-80GB", "nominal": 8}],
            "stopPolicy": policy,
        }))
        .unwrap();
        SchedulerInputs {
            cluster: cluster_from_nodes(&[node(NODE, "8", gpu.clone())], None),
            queues: vec![queue_spec(NS, "team-a", &spec)],
            cohorts: Vec::new(),
            priorities: priority_classes(&[]),
        }
    };
    admission.rebuild(inputs("HoldAndDrain")).unwrap();
    let running = Gang::Running {
        placement: Some(on.clone()),
        admitted_at: Some(1_000),
    };
    assert!(matches!(
        admission.decide(&a, &running),
        Admit::Preempt(why) if why.contains("queue team-a/team-a was stopped (spec.stopPolicy: HoldAndDrain)")
    ));
    admission.evicted(&a);
    assert!(matches!(
        admission.decide(&a, &Gang::Suspended),
        Admit::Wait(why) if why.contains("queue team-a/team-a is held (spec.stopPolicy: HoldAndDrain)")
    ));
    admission.rebuild(inputs("None")).unwrap();
    assert!(matches!(admission.decide(&a, &Gang::Suspended), Admit::Run(p) if p == on));
}

/// A low-priority single-node job of `gpus` GPUs created at `created` (RFC 3339).
fn sized(name: &str, gpus: i32, created: &str) -> TrainJobResource {
    let mut r = resource(name, "low", None);
    r.spec.resources.gpus_per_node = gpus;
    r.metadata.creation_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        created.parse().unwrap(),
    ));
    r
}

/// Behind a half-node job already running: a whole-node gang, which must wait for it and so
/// holds the node, and a 10-minute half-node job created after the gang (not yet decided).
fn gang_and_short(admission: &SchedAdmission) -> (TrainJobResource, TrainJobResource) {
    let gang = sized("gang", 8, "2026-01-01T00:00:01Z");
    assert!(matches!(
        admission.decide(&gang, &Gang::Absent),
        Admit::Wait(_)
    ));
    let mut short = sized("short", 4, "2026-01-01T00:00:02Z");
    short.spec.max_runtime_seconds = Some(600);
    (gang, short)
}

/// A half-node job started without a time limit (nobody knows when it ends), then
/// `gang_and_short` behind it: the running job, the gang and the short job.
fn running_then_gang_and_short(
    admission: &SchedAdmission,
) -> (TrainJobResource, TrainJobResource, TrainJobResource) {
    let running = sized("running", 4, "2026-01-01T00:00:00Z");
    assert!(matches!(
        admission.decide(&running, &Gang::Absent),
        Admit::Run(_)
    ));
    let (gang, short) = gang_and_short(admission);
    (running, gang, short)
}

/// The short job backfills the free half of the node (`why`), and the gang still waits;
/// returns where the short job runs.
fn short_backfills_and_gang_waits(
    admission: &SchedAdmission,
    gang: &TrainJobResource,
    short: &TrainJobResource,
    why: &str,
) -> Vec<PodPlacement> {
    let Admit::Run(p) = admission.decide(short, &Gang::Suspended) else {
        panic!("{why}")
    };
    assert_eq!(p[0].node, NODE, "{why}");
    assert!(matches!(
        admission.decide(gang, &Gang::Suspended),
        Admit::Wait(_)
    ));
    p
}

/// Nobody knows when the running half-node job ends (given in epochs, no time limit), so
/// nobody knows when the whole-node gang behind it can start: the free half is lent to a
/// 10-minute job rather than left idle, and taken back (the job suspended) once the running job
/// ends and the gang can start. A loan never delays the gang.
#[test]
fn work_behind_a_gang_waiting_on_an_unknown_end_runs_on_loan_until_the_gang_can_start() {
    let (admission, _rx) = admission();
    let (running, gang, short) = running_then_gang_and_short(&admission);
    let Admit::Run(lent) = admission.decide(&short, &Gang::Absent) else {
        panic!("the free half is lent")
    };
    let short_runs = Gang::Running {
        placement: Some(lent),
        admitted_at: Some(1_000),
    };
    admission.finished(&running);
    assert!(matches!(
        admission.decide(&short, &short_runs),
        Admit::Preempt(why) if why.contains("gang")
    ));
    // Until the loan has stopped, its GPUs are not the gang's.
    assert!(matches!(
        admission.decide(&gang, &Gang::Suspended),
        Admit::Wait(_)
    ));
}

/// Once the running job's pace is measured, the scheduler knows when the gang can start: a
/// short job that ends before then backfills the free half as plain backfill, so when the
/// running job ends early the gang waits for it instead of preempting it.
#[test]
fn a_measured_pace_lets_short_work_backfill_before_a_reserved_gang() {
    let (admission, _rx) = admission();
    let (running, gang, short) = running_then_gang_and_short(&admission);
    // Its measured pace says 2,000 s more: the short job ends before the gang can start.
    admission.progress(&running, 2_000);
    let placement = short_backfills_and_gang_waits(
        &admission,
        &gang,
        &short,
        "ends before the measured end: it backfills",
    );
    short_is_not_taken_back(&admission, &running, &gang, &short, placement);
    // A job the scheduler does not run is not told anything (and nothing breaks).
    admission.progress(&gang, 10);
}

/// An operator that keeps reserved GPUs idle rather than lend them (`lendReservedNodes: false`
/// in `--scheduler-options`): the 10-minute job waits behind the gang, for nobody knows when
/// the running job ends. Once its measured pace says 2,000 s, the short job ends well before the
/// gang can start: the cycle the progress report runs admits it as backfill and wakes the
/// operator to unsuspend it (it was not the job being reconciled).
#[test]
fn a_measured_pace_that_lets_waiting_work_start_wakes_the_operator() {
    let (admission, mut rx) = admission_with(Options {
        lend_reserved_nodes: false,
        ..Options::default()
    });
    let (running, gang, short) = running_then_gang_and_short(&admission);
    assert!(matches!(
        admission.decide(&short, &Gang::Absent),
        Admit::Wait(_)
    ));
    woke(&mut rx);
    admission.progress(&running, 2_000);
    assert!(
        woke(&mut rx),
        "the admission the pace allows wakes the operator"
    );
    let placement = short_backfills_and_gang_waits(
        &admission,
        &gang,
        &short,
        "ends before the measured end: it backfills",
    );
    // The same pace told again changes nothing and wakes nobody.
    admission.progress(&running, 2_000);
    assert!(!woke(&mut rx));
    short_is_not_taken_back(&admission, &running, &gang, &short, placement);
}

/// The running job ends before the short backfilled job: the gang waits for it, it is not
/// preempted (it was backfill, not a loan).
fn short_is_not_taken_back(
    admission: &SchedAdmission,
    running: &TrainJobResource,
    gang: &TrainJobResource,
    short: &TrainJobResource,
    placement: Vec<PodPlacement>,
) {
    admission.finished(running);
    let short_runs = Gang::Running {
        placement: Some(placement),
        admitted_at: Some(1_000),
    };
    assert!(matches!(
        admission.decide(short, &short_runs),
        Admit::Run(_)
    ));
    assert!(matches!(
        admission.decide(gang, &Gang::Suspended),
        Admit::Wait(_)
    ));
}

/// After an operator restart the running job's pace is not measured yet (paces live in the
/// operator's memory); the estimate the last operator wrote into `status.estimatedCompletionTime`
/// stands for it, so the short job is admitted before the reserved gang as it was before.
#[test]
fn a_restored_job_keeps_its_persisted_estimate() {
    let (admission, _rx) = admission();
    let mut running = sized("running", 4, "2026-01-01T00:00:00Z");
    running.status = Some(TrainJobClusterStatus {
        phase: Some(JobPhase::Running),
        // The test clock is at 1,000 s: 2,000 s left.
        estimated_completion_time: Some("1970-01-01T00:50:00Z".into()),
        ..TrainJobClusterStatus::default()
    });
    let placement = format!(r#"[{{"node":"{NODE}","gpus":[0,1,2,3]}}]"#);
    let gang_view = Gang::Running {
        placement: serde_json::from_str(&placement).unwrap(),
        admitted_at: Some(900),
    };
    assert!(matches!(
        admission.decide(&running, &gang_view),
        Admit::Run(_)
    ));
    let (gang, short) = gang_and_short(&admission);
    short_backfills_and_gang_waits(
        &admission,
        &gang,
        &short,
        "the short job ends before the running one: it backfills",
    );
}

/// An edited time limit reaches the scheduler: a running job without one gives no end to plan
/// around (work behind the waiting gang could only go on loan); once `spec.maxRuntimeSeconds`
/// is set on it, a short job fits before the gang's latest start as plain backfill, and is not
/// taken back when the running job ends early.
#[test]
fn a_limit_set_on_a_running_job_lets_short_work_backfill() {
    let (admission, _rx) = admission();
    let (mut first, gang, short) = running_then_gang_and_short(&admission);
    first.spec.max_runtime_seconds = Some(3600);
    assert!(matches!(
        admission.decide(&first, &Gang::Absent),
        Admit::Run(_)
    ));
    let placement = short_backfills_and_gang_waits(
        &admission,
        &gang,
        &short,
        "ends before the running job's limit: it backfills",
    );
    short_is_not_taken_back(&admission, &first, &gang, &short, placement);
}

/// The gang first in line is told when it starts (what the operator writes as
/// `status.estimatedStartTime`) by its reservation: unknown while the running job in its way
/// has no expected end, then when its measured pace says it ends, at once (a forecast kept from
/// before the pace was told does not hold it back); a job the scheduler was never asked about,
/// and a running one, are told nothing.
#[test]
fn the_gang_first_in_line_is_told_when_it_starts() {
    let (admission, _rx) = admission();
    let (running, gang, short) = running_then_gang_and_short(&admission);
    assert_eq!(admission.expected_start(&gang), None, "no end known yet");
    admission.progress(&running, 2_000);
    // The operator's clock reads 1,000 s, so the kept forecast is younger than the interval.
    assert_eq!(admission.expected_start(&gang), Some(3_000));
    assert_eq!(admission.expected_start(&short), None);
    assert_eq!(admission.expected_start(&running), None);
}

/// A whole-node job running with a 1,000 s limit (it ends at 2,000 s), then three whole-node
/// jobs with limits of 100, 200 and 300 s: each is decided at 1,000 s, then asked once the
/// forecast may be replayed again. The first in line starts at the running job's end, by its
/// reservation; the two behind it are told their forecast starts in turn, and whom they start
/// after.
#[test]
fn every_queued_job_is_told_when_it_starts_in_turn() {
    let (admission, clock) = clocked();
    let jobs = limited(&admission, &[("a", 1, 100), ("b", 2, 200), ("c", 3, 300)]);
    tick(&clock, FORECAST_MIN_INTERVAL_S);
    let starts: Vec<_> = jobs.iter().map(|j| admission.expected_start(j)).collect();
    assert_eq!(starts, [Some(2_000), Some(2_100), Some(2_300)]);
    assert_eq!(
        admission.waiting(&jobs[2]).as_deref(),
        Some(
            "needs 8 GPU(s); 0 of 8 free; first in line: team-a/a; expected to start after \
             team-a/b (status.estimatedStartTime)"
        )
    );
}

/// A launcher job of a model the planner knows, given in steps and without a time limit, is
/// expected to run twice its plan's prediction (as on the local runtime): the gang behind it is
/// told its start from that before any pace is measured. A shorter time limit wins; a user's
/// command has no plan, so nothing is known of its end.
#[test]
fn a_planned_job_is_expected_to_run_twice_its_prediction() {
    let planned_ahead = |edit: &dyn Fn(&mut TrainJobResource)| {
        let (admission, _rx) = admission();
        let mut running = sized("running", 8, "2026-01-01T00:00:00Z");
        running.spec.train.steps = Some(200);
        edit(&mut running);
        assert!(matches!(
            admission.decide(&running, &Gang::Absent),
            Admit::Run(_)
        ));
        let gang = sized("gang", 8, "2026-01-01T00:00:01Z");
        assert!(matches!(
            admission.decide(&gang, &Gang::Absent),
            Admit::Wait(_)
        ));
        let planned = ferry_k8s::train::planned(&running.to_spec(), None).run_s;
        (admission.expected_start(&gang), planned)
    };
    let (start, planned) = planned_ahead(&|_| {});
    let planned = planned.expect("Qwen2.5-7B LoRA on 8 H100s plans");
    // 200 steps of 32 sequences of 2,048 tokens: minutes, not seconds or days.
    assert!((60..6 * 3600).contains(&planned), "{planned} s");
    assert_eq!(start, Some(1_000 + planned));
    let (start, _) = planned_ahead(&|j| j.spec.max_runtime_seconds = Some(planned / 2));
    assert_eq!(start, Some(1_000 + planned / 2));
    let (start, planned) = planned_ahead(&|j| j.spec.command = vec!["./train.sh".into()]);
    assert_eq!((start, planned), (None, None));
}

/// Two racks of two 8-GPU nodes, one node of each busy for 600 s: a two-node full fine-tune
/// could start now only across the racks. Told how slow the links between racks are, the
/// operator plans how much longer it would run split (its data-parallel gradients cross them),
/// and the scheduler has it wait the 600 s for one rack; not told, it starts split at once. A
/// LoRA job's adapters cross the links in no time, so it starts split even when told; so does a
/// job that gives its own figure.
#[test]
fn a_plans_split_slowdown_makes_a_gang_wait_for_one_rack_when_that_pays() {
    let decide = |inter_rack: Option<u32>, edit: &dyn Fn(&mut TrainJobResource)| {
        let nodes = ["a1", "a2", "b1", "b2"].map(|n| node(n, "8", h100_in(&n[..1])));
        let (admission, _rx) = admission_on(&nodes, 32, Options::default(), &[]);
        let admission = admission.with_inter_rack_bandwidth_pct(inter_rack);
        // Running where an earlier operator placed them (a new job would go to the fuller
        // rack): one node of each rack.
        for (name, on) in [("busy-a", "a1"), ("busy-b", "b1")] {
            let mut busy = sized(name, 8, "2026-01-01T00:00:00Z");
            busy.spec.max_runtime_seconds = Some(600);
            let placement = vec![PodPlacement {
                node: on.into(),
                gpus: (0..8).collect(),
            }];
            let running = Gang::Running {
                placement: Some(placement.clone()),
                admitted_at: Some(1_000),
            };
            let decided = admission.decide(&busy, &running);
            assert!(matches!(decided, Admit::Run(p) if p == placement), "{name}");
        }
        let mut gang = sized("gang", 8, "2026-01-01T00:00:02Z");
        gang.spec.resources.nodes = 2;
        gang.spec.method = ferry_spec::Method::Full;
        gang.spec.lora = None;
        gang.spec.train.steps = Some(2_000);
        edit(&mut gang);
        let split = ferry_k8s::train::planned(&gang.to_spec(), inter_rack).split_slowdown_pct;
        (admission.decide(&gang, &Gang::Absent), split)
    };
    let (told, split) = decide(Some(10), &|_| {});
    let pct = split.expect("a figure when the links are known");
    assert!(pct >= 100, "full fine-tuning over 10% links: {pct}%");
    match told {
        Admit::Wait(why) => assert!(why.contains("only across racks"), "{why}"),
        other => panic!("started split at {pct}%: {other:?}"),
    }
    let (untold, split) = decide(None, &|_| {});
    assert_eq!(split, None);
    assert!(
        matches!(untold, Admit::Run(p) if p.len() == 2),
        "untold waits"
    );
    let lora = |j: &mut TrainJobResource| {
        j.spec.method = ferry_spec::Method::Lora;
        j.spec.lora = resource("x", "low", None).spec.lora;
    };
    let (adapters, split) = decide(Some(10), &lora);
    assert!(split.is_some_and(|p| p < 10), "{split:?}");
    assert!(matches!(adapters, Admit::Run(p) if p.len() == 2));
    let (own, _) = decide(Some(10), &|j| j.spec.resources.split_slowdown_pct = Some(0));
    assert!(matches!(own, Admit::Run(p) if p.len() == 2));
}

/// Runs a whole-node job with a 1,000 s limit at the clock's time, then decides whole-node
/// jobs `(name, created second, limit)` behind it: they wait.
fn limited(admission: &SchedAdmission, behind: &[(&str, u32, u64)]) -> Vec<TrainJobResource> {
    let mut running = sized("running", 8, "2026-01-01T00:00:00Z");
    running.spec.max_runtime_seconds = Some(1_000);
    assert!(matches!(
        admission.decide(&running, &Gang::Absent),
        Admit::Run(_)
    ));
    queue(admission, behind)
}

/// Decides whole-node jobs `(name, created second, limit)`: they wait.
fn queue(admission: &SchedAdmission, jobs: &[(&str, u32, u64)]) -> Vec<TrainJobResource> {
    jobs.iter()
        .map(|&(name, created, limit)| {
            let mut job = sized(name, 8, &format!("2026-01-01T00:00:{created:02}Z"));
            job.spec.max_runtime_seconds = Some(limit);
            assert!(matches!(
                admission.decide(&job, &Gang::Absent),
                Admit::Wait(_)
            ));
            job
        })
        .collect()
}

/// Starts come from one kept forecast, replayed again only when asked and stale: the scheduler
/// changed since (a submit, a pace told) or it is `FORECAST_MAX_AGE_S` old; and never within
/// `FORECAST_MIN_INTERVAL_S` of the last one, however the scheduler changes meanwhile. A cycle
/// that decides nothing is no change.
#[test]
fn the_forecast_is_kept_until_the_scheduler_changes_or_it_ages() {
    let (admission, clock) = clocked();
    let replays = || admission.forecasts_replayed();
    let jobs = limited(&admission, &[("a", 1, 100), ("b", 2, 200)]);
    let r = replays();
    assert!(r >= 1, "asked at each wait");
    // The scheduler changed since (b arrived): replayed once, then kept for every question.
    tick(&clock, FORECAST_MIN_INTERVAL_S);
    assert_eq!(admission.expected_start(&jobs[1]), Some(2_100));
    assert_eq!(replays(), r + 1);
    admission.expected_start(&jobs[0]);
    admission.waiting(&jobs[1]);
    assert_eq!(replays(), r + 1, "nothing changed");
    // Reconciles that change nothing (a quiet cycle) keep it, past the interval.
    tick(&clock, FORECAST_MIN_INTERVAL_S + 1);
    assert!(matches!(
        admission.decide(&jobs[1], &Gang::Suspended),
        Admit::Wait(_)
    ));
    assert_eq!(admission.expected_start(&jobs[1]), Some(2_100));
    assert_eq!(replays(), r + 1, "a quiet cycle changes nothing");
    // A new job is a change: replayed as its wait is decided, and it is told its start.
    let c = queue(&admission, &[("c", 3, 300)]).remove(0);
    assert_eq!(replays(), r + 2);
    assert_eq!(admission.expected_start(&c), Some(2_300));
    // A pace told within the interval is a change too, but the kept forecast stands until the
    // interval has passed: then the new end moves the job behind the first in line.
    let running = sized("running", 8, "2026-01-01T00:00:00Z");
    admission.progress(&running, 500);
    tick(&clock, FORECAST_MIN_INTERVAL_S - 1);
    assert_eq!(admission.expected_start(&jobs[1]), Some(2_100), "kept");
    assert_eq!(replays(), r + 2);
    tick(&clock, 1);
    // The running job now ends at 1,011 + 500 = 1,511 s: a starts then, b 100 s later.
    assert_eq!(admission.expected_start(&jobs[1]), Some(1_611));
    assert_eq!(replays(), r + 3);
    // Unchanged, it is kept until it is as old as the bound, then replayed.
    tick(&clock, FORECAST_MAX_AGE_S - 1);
    admission.expected_start(&jobs[1]);
    assert_eq!(replays(), r + 3);
    tick(&clock, 1);
    admission.expected_start(&jobs[1]);
    assert_eq!(replays(), r + 4);
}

/// A job that arrives within `FORECAST_MIN_INTERVAL_S` of the last replay is not in the kept
/// forecast: it is told to come back when the next replay may run (`retell_in`), and then it
/// is told its start. Jobs the kept forecast covers, and running ones, have nothing to wait for.
#[test]
fn a_job_the_kept_forecast_missed_is_told_when_to_ask_again() {
    let (admission, clock) = clocked();
    let jobs = limited(&admission, &[("a", 1, 100), ("b", 2, 200)]);
    tick(&clock, FORECAST_MIN_INTERVAL_S);
    assert_eq!(admission.expected_start(&jobs[1]), Some(2_100));
    assert_eq!(admission.retell_in(&jobs[1]), None, "covered");
    tick(&clock, 2);
    let late = queue(&admission, &[("late", 3, 300)]).remove(0);
    assert_eq!(
        admission.expected_start(&late),
        None,
        "not in the kept forecast"
    );
    assert_eq!(
        admission.retell_in(&late),
        Some(FORECAST_MIN_INTERVAL_S - 2)
    );
    assert_eq!(admission.retell_in(&jobs[1]), None);
    tick(&clock, FORECAST_MIN_INTERVAL_S - 2);
    assert_eq!(admission.expected_start(&late), Some(2_300));
    assert_eq!(admission.retell_in(&late), None);
    let running = sized("running", 8, "2026-01-01T00:00:00Z");
    assert_eq!(admission.retell_in(&running), None, "not waiting");
}

/// A forecast replays on a copy of the scheduler with the admission's lock released: while it
/// runs, another reconcile decides (a new job is submitted and told why it waits) and asks for
/// starts, reading the forecast kept before without starting a second replay. (Were the lock
/// held, the reconcile inside the replay would deadlock: the test gives up after two minutes.)
#[test]
fn a_forecast_replays_without_holding_up_other_reconciles() {
    type Seen = (bool, Option<u64>, u64);
    let seen: Arc<std::sync::Mutex<Vec<Seen>>> = Arc::default();
    let (tx, rx) = std::sync::mpsc::channel();
    let record = seen.clone();
    std::thread::spawn(move || {
        let (admission, clock) = clocked();
        let jobs = limited(&admission, &[("a", 1, 100), ("b", 2, 200)]);
        let admission = admission.during_replay(move |a| {
            let before = a.forecasts_replayed();
            let c = sized("c", 8, "2026-01-01T00:00:09Z");
            let waits = matches!(a.decide(&c, &Gang::Absent), Admit::Wait(_));
            let start = a.expected_start(&c);
            record
                .lock()
                .unwrap()
                .push((waits, start, a.forecasts_replayed() - before));
        });
        let before = admission.forecasts_replayed();
        tick(&clock, FORECAST_MIN_INTERVAL_S);
        let b = admission.expected_start(&jobs[1]);
        tx.send((b, admission.forecasts_replayed() - before))
            .unwrap();
    });
    let (b, replayed) = rx
        .recv_timeout(std::time::Duration::from_secs(120))
        .expect("a reconcile waited on a forecast replay: the lock was held while it replayed");
    assert_eq!((b, replayed), (Some(2_100), 1));
    // Inside the replay: `c` was decided and told why it waits, with no start yet (the kept
    // forecast predates it) and no second replay.
    assert_eq!(*seen.lock().unwrap(), [(true, None, 0)]);
}

/// Why a queued gang waits follows the scheduler from one reconcile to the next, in
/// `status.message` and one `Waiting` event per change: first in line behind a running job
/// with no expected end, then told when it starts once that job's pace is measured; a job
/// queued behind it names it (and, the gang having no time limit, that its start is unknown),
/// then, once the gang runs on the whole node, waits first in line itself. A reconcile that
/// finds the same reason writes nothing.
#[tokio::test]
async fn a_queued_jobs_message_follows_why_it_waits_with_one_event_per_change() {
    let (admission, clock) = clocked();
    let admission = Arc::new(admission);
    let running = sized("running", 4, "2026-01-01T00:00:00Z");
    assert!(matches!(
        admission.decide(&running, &Gang::Absent),
        Admit::Run(_)
    ));
    let unknown = "needs 8 GPU(s); 4 of 8 free; first in line, but some running work in its \
                   way has no expected end (no time limit, no measured pace yet), so when it \
                   starts is unknown";
    let gang = sized("gang", 8, "2026-01-01T00:00:01Z");
    let seen = run(&admission, gang.clone(), create_steps("gang", true)).await;
    let st = status_of(&seen, "gang");
    assert_eq!(st.message.as_deref(), Some(unknown));
    assert!(seen[4].body["note"].as_str().unwrap().ends_with(unknown));
    let mut gang = gang;
    gang.status = Some(st);
    // Nothing changed: no event, no status write.
    run(
        &admission,
        gang.clone(),
        vec![get_gang("gang", true, None, None)],
    )
    .await;

    // The running job's measured pace: the gang is told when it starts.
    admission.progress(&running, 2_000);
    let known = "needs 8 GPU(s); 4 of 8 free; first in line: it starts when the running work \
                 in its way ends (status.estimatedStartTime)";
    let steps = vec![
        get_gang("gang", true, None, None),
        event(),
        patch_status("gang"),
    ];
    let seen = run(&admission, gang.clone(), steps).await;
    assert_eq!(
        (&seen[1].body["reason"], &seen[1].body["note"]),
        (&json!("Waiting"), &json!(known))
    );
    let st = status_of(&seen, "gang");
    assert_eq!(st.message.as_deref(), Some(known));
    assert_eq!(
        st.estimated_start_time.as_deref(),
        Some("1970-01-01T00:50:00Z")
    );
    gang.status = Some(st);
    run(
        &admission,
        gang.clone(),
        vec![get_gang("gang", true, None, None)],
    )
    .await;

    // A job behind the gang names it, once the forecast may be replayed again.
    tick(&clock, FORECAST_MIN_INTERVAL_S);
    let later = sized("later", 8, "2026-01-01T00:00:02Z");
    let seen = run(&admission, later.clone(), create_steps("later", true)).await;
    let st = status_of(&seen, "later");
    assert_eq!(
        st.message.as_deref(),
        Some(
            "needs 8 GPU(s); 4 of 8 free; first in line: team-a/gang; when it starts is \
             unknown: some work ahead of it has no expected end (no time limit, no measured \
             pace yet)"
        )
    );
    assert_eq!(st.estimated_start_time, None);
    let mut later = later;
    later.status = Some(st);

    // The running job ends and the gang takes the whole node: the job behind is first in line.
    admission.finished(&running);
    assert!(matches!(
        admission.decide(&gang, &Gang::Suspended),
        Admit::Run(_)
    ));
    let steps = vec![
        get_gang("later", true, None, None),
        event(),
        patch_status("later"),
    ];
    let seen = run(&admission, later.clone(), steps).await;
    let first = "needs 8 GPU(s); 0 of 8 free; first in line, but some running work in its way \
                 has no expected end (no time limit, no measured pace yet), so when it starts is \
                 unknown";
    assert_eq!(seen[1].body["note"], first);
    later.status = Some(status_of(&seen, "later"));
    assert_eq!(
        later.status.as_ref().unwrap().message.as_deref(),
        Some(first)
    );
    run(&admission, later, vec![get_gang("later", true, None, None)]).await;
    assert_eq!(admission.waiting(&gang), None, "the gang runs");
}

/// A job second in line is told by the operator when it starts, from the forecast, and whom it
/// starts after: `status.estimatedStartTime` and `status.message` at creation (the `Queued`
/// event carries the words, no `Waiting` event). When the running job's pace moves the
/// estimate, the new start is patched without an event: the words hold no time.
#[tokio::test]
async fn a_job_second_in_line_is_told_when_it_starts_and_after_whom() {
    let (admission, clock) = clocked();
    let admission = Arc::new(admission);
    // The running job ends at 2,000 s; the gang, first in line, runs 600 s from then.
    limited(&admission, &[("gang", 1, 600)]);
    tick(&clock, FORECAST_MIN_INTERVAL_S);
    let mut later = sized("later", 8, "2026-01-01T00:00:02Z");
    later.spec.max_runtime_seconds = Some(100);
    let seen = run(&admission, later.clone(), create_steps("later", true)).await;
    let behind = "needs 8 GPU(s); 0 of 8 free; first in line: team-a/gang; expected to start \
                  after team-a/gang (status.estimatedStartTime)";
    let st = status_of(&seen, "later");
    assert_eq!(st.message.as_deref(), Some(behind));
    assert_eq!(
        st.estimated_start_time.as_deref(),
        Some("1970-01-01T00:43:20Z"),
        "2,600 s"
    );
    assert_eq!(seen[4].body["reason"], "Queued");
    assert!(seen[4].body["note"].as_str().unwrap().ends_with(behind));
    later.status = Some(st);

    // Its pace says the running job ends at 1,005 + 495 = 1,500 s: the gang starts then, and
    // the job behind it 600 s later.
    let mut running = sized("running", 8, "2026-01-01T00:00:00Z");
    running.spec.max_runtime_seconds = Some(1_000);
    admission.progress(&running, 495);
    tick(&clock, FORECAST_MIN_INTERVAL_S);
    let steps = vec![get_gang("later", true, None, None), patch_status("later")];
    let seen = run(&admission, later, steps).await;
    let st = status_of(&seen, "later");
    assert_eq!(st.message.as_deref(), Some(behind));
    assert_eq!(
        st.estimated_start_time.as_deref(),
        Some("1970-01-01T00:35:00Z"),
        "2,100 s"
    );
}

/// `spec.suspend` on a running job: its gang is suspended as for a preemption, its GPUs stay
/// its own until its pods are gone, then the scheduler forgets it and the job waiting behind it
/// gets them; cleared, the job is queued again and readmitted (unsuspended) once they are free.
#[tokio::test]
async fn a_suspended_job_leaves_the_scheduler_once_its_pods_are_gone_and_resumes_when_cleared() {
    let (admission, _rx) = admission();
    let admission = Arc::new(admission);
    let seen = run(
        &admission,
        resource("low", "low", None),
        create_steps("low", false),
    )
    .await;
    let placement = seen[3].body["metadata"]["annotations"][ANNOTATION_PLACEMENT]
        .as_str()
        .unwrap()
        .to_owned();
    let low_status = status_of(&seen, "low");
    let next = resource("next", "low", None);
    assert!(matches!(
        admission.decide(&next, &Gang::Suspended),
        Admit::Wait(_)
    ));

    // 1. Suspended: the gang is suspended (its pods get SIGTERM and their grace period).
    let suspended = |status: Option<TrainJobClusterStatus>, suspend: bool| {
        let mut r = resource("low", "low", status);
        r.spec.suspend = suspend;
        r
    };
    let steps = vec![
        get_gang("low", false, Some(&placement), None),
        patch_gang("low", true),
        event(),
        patch_status("low"),
    ];
    let seen = run(&admission, suspended(Some(low_status), true), steps).await;
    assert_eq!(seen[1].body, json!({"spec": {"suspend": true}}));
    assert_eq!(seen[2].body["reason"], "Suspended");
    let low_status = status_of(&seen, "low");
    assert_eq!(low_status.phase, Some(JobPhase::Suspended));
    assert_eq!(low_status.restarts, 0, "a suspension is not a failure");
    assert!(low_status.running_since.is_none(), "its run is closed");
    let condition = |st: &TrainJobClusterStatus| {
        let c = st
            .conditions
            .iter()
            .find(|c| c.type_ == "Suspended")
            .unwrap();
        (c.status.clone(), c.reason.clone())
    };
    assert_eq!(condition(&low_status), ("True".into(), "Suspending".into()));

    // 2. A pod still exits: its GPUs are still its own.
    let steps = vec![
        get_gang("low", true, None, None),
        step("GET", PODS, 200, pods(&["Running"])),
    ];
    run(&admission, suspended(Some(low_status.clone()), true), steps).await;
    assert!(matches!(
        admission.decide(&next, &Gang::Suspended),
        Admit::Wait(_)
    ));

    // 3. Its pods are gone: the scheduler forgets it and the waiting job is admitted.
    let steps = vec![
        get_gang("low", true, None, None),
        step("GET", PODS, 200, pods(&["Failed"])),
        patch_status("low"),
    ];
    let seen = run(&admission, suspended(Some(low_status), true), steps).await;
    let low_status = status_of(&seen, "low");
    assert_eq!(low_status.phase, Some(JobPhase::Suspended));
    assert_eq!(condition(&low_status), ("True".into(), "Suspended".into()));
    assert!(matches!(
        admission.decide(&next, &Gang::Suspended),
        Admit::Run(_)
    ));
    // Nothing more to do while it stays suspended.
    let steps = vec![get_gang("low", true, None, None)];
    run(&admission, suspended(Some(low_status.clone()), true), steps).await;

    // 4. Cleared: queued again, waiting for the GPUs the other job now holds.
    let steps = vec![
        get_gang("low", true, None, None),
        event(),
        event(),
        patch_status("low"),
    ];
    let seen = run(&admission, suspended(Some(low_status), false), steps).await;
    assert_eq!(seen[1].body["reason"], "Resumed");
    assert_eq!(seen[2].body["reason"], "Waiting");
    let low_status = status_of(&seen, "low");
    assert_eq!(low_status.phase, Some(JobPhase::Queued));
    assert_eq!(condition(&low_status), ("False".into(), "Resumed".into()));

    // 5. The other job ends: the resumed one is unsuspended on the node, same attempt.
    admission.finished(&next);
    let seen = run(
        &admission,
        suspended(Some(low_status), false),
        unsuspend_steps("low"),
    )
    .await;
    assert_eq!(seen[1].body["spec"]["suspend"], false);
    let low_status = status_of(&seen, "low");
    assert_eq!(low_status.phase, Some(JobPhase::Running));
    assert_eq!((low_status.attempt, low_status.restarts), (0, 0));
}

/// The cluster's Ferry Cohorts are the scheduler's cohort tree: queue team-a (4 GPUs of its
/// own, in cohort `research`) borrows from `research`'s parent `org` (8 GPUs of its own) up to
/// research's borrowing limit of 4. An 8-GPU gang runs, which team-a's own quota never allows;
/// 4 more GPUs wait though a node is idle. A parent loop is refused naming the Cohort, and the
/// scheduler that was keeps running.
#[test]
fn the_cluster_cohort_tree_holds_a_queue_to_its_subtrees_limit() {
    let gpu = json!({"nvidia.com/gpu.product": "H100-80GB"});
    let nodes = [node(NODE, "8", gpu.clone()), node("gpu-node-2", "8", gpu)];
    let queue: ferry_spec::QueueSpec = serde_json::from_value(json!({
        "cohort": "research",
        "quotas": [{"flavor": "H100-80GB", "nominal": 4}],
    }))
    .unwrap();
    let cohort = |name: &str, spec: Value| {
        serde_json::from_value::<ferry_spec::CohortSpec>(spec)
            .unwrap()
            .to_sched(name)
    };
    let inputs = |org_parent: Option<&str>, research_borrows: u32| {
        let mut org = json!({"quotas": [{"flavor": "any", "nominal": 8}]});
        if let Some(p) = org_parent {
            org["parent"] = p.into();
        }
        SchedulerInputs {
            cluster: cluster_from_nodes(&nodes, None),
            queues: vec![queue_spec(NS, "team-a", &queue)],
            cohorts: vec![
                cohort("org", org),
                cohort(
                    "research",
                    json!({"parent": "org", "quotas": [{"flavor": "any", "nominal": 0, "borrowingLimit": research_borrows}]}),
                ),
            ],
            priorities: priority_classes(&[]),
        }
    };
    let admission = SchedAdmission::new(inputs(None, 4), Options::default(), None)
        .unwrap()
        .with_clock(|| 1_000);
    let a = resource("a", "low", None);
    assert!(matches!(
        admission.decide(&a, &Gang::Absent),
        Admit::Run(p) if p.len() == 1
    ));
    let mut b = resource("b", "low", None);
    b.spec.resources.gpus_per_node = 4;
    assert!(matches!(
        admission.decide(&b, &Gang::Absent),
        Admit::Wait(_)
    ));
    // A loop: refused naming the Cohort; the tree that was still holds team-a.
    let e = admission.rebuild(inputs(Some("research"), 4)).unwrap_err();
    let text = e.to_string();
    assert!(
        text.starts_with("Cohort/org: spec: Ferry's scheduler refused the cluster's cohort tree")
            && text.contains("its own ancestor"),
        "{text}"
    );
    assert!(matches!(
        admission.decide(&b, &Gang::Absent),
        Admit::Wait(_)
    ));
    // Without the Cohorts, research holds one queue and no GPUs: the queues are refused.
    let mut flat = inputs(None, 4);
    flat.cohorts.clear();
    let e = admission.rebuild(flat).unwrap_err();
    assert!(e.to_string().starts_with("Queue/*: spec.quotas:"), "{e}");
    // The limit is what held `b`: raised to 8, it runs beside `a` on the idle node.
    admission.rebuild(inputs(None, 8)).unwrap();
    assert!(matches!(
        admission.decide(&b, &Gang::Absent),
        Admit::Run(p) if p[0].node == "gpu-node-2"
    ));
}
