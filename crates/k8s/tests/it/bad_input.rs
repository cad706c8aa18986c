//! Bar 5: bad input fails before anything is created, with every problem named.

use std::collections::{BTreeMap, BTreeSet};

use ferry_k8s::{ClusterState, K8sError, RenderOptions, render};

use crate::specs::*;

fn message(r: Result<Vec<serde_json::Value>, K8sError>) -> String {
    match r {
        Ok(objs) => panic!("expected an error, rendered {} objects", objs.len()),
        Err(e) => e.to_string(),
    }
}

/// What rendering `text` beside the teams' queues fails with (no cluster state).
fn rejected(text: &str) -> String {
    message(render(
        &parse_all(&[QUEUES, text]),
        &RenderOptions::default(),
        None,
    ))
}

#[test]
fn gpu_count_not_a_multiple_of_the_node_size() {
    let text = TWO_NODE_FULL.replace("gpusPerNode: 8", "gpusPerNode: 6");
    let msg = rejected(&text);
    assert!(msg.contains("spec.resources.gpusPerNode"), "{msg}");
    assert!(
        msg.contains("12 GPUs is not a multiple of the node size 8"),
        "{msg}"
    );
    let text = SINGLE_NODE_LORA.replace("gpusPerNode: 1", "gpusPerNode: 12");
    let msg = rejected(&text);
    assert!(msg.contains("do not fit on one node of 8"), "{msg}");
}

#[test]
fn namespace_without_a_queue() {
    let text = SINGLE_NODE_LORA.replace("namespace: team-a", "namespace: team-c");
    let msg = rejected(&text);
    assert!(
        msg.contains("TrainJob/team-c/qwen-lora: spec.queue: namespace team-c has no queue"),
        "{msg}"
    );
    // A queue in the cluster (seen by --check) is enough.
    let mut state = full_state();
    state
        .queues
        .insert("team-c".into(), BTreeSet::from(["team-a".to_string()]));
    state
        .claims
        .insert("team-c".into(), state.claims["team-a"].clone());
    render(
        &parse_all(&[QUEUES, &text]),
        &RenderOptions::default(),
        Some(&state),
    )
    .unwrap();
    // A wrong queue name in a namespace that has queues lists them.
    let text = SINGLE_NODE_LORA.replace("queue: team-a", "queue: gpu-heavy");
    let msg = rejected(&text);
    assert!(
        msg.contains("no queue \"gpu-heavy\" in namespace team-a; its queues are team-a"),
        "{msg}"
    );
}

fn full_state() -> ClusterState {
    let claims: BTreeSet<String> = ["ferry-data", "ferry-models", "ferry-checkpoints"]
        .map(String::from)
        .into();
    ClusterState {
        claims: BTreeMap::from([
            ("team-a".to_string(), claims.clone()),
            ("team-b".to_string(), claims),
        ]),
        queues: BTreeMap::new(),
    }
}

#[test]
fn missing_claim_with_check() {
    let resources = parse_all(&[QUEUES, SINGLE_NODE_LORA, DEPLOY_FIXED]);
    // Without --check nothing is known about claims: rendering works.
    render(&resources, &RenderOptions::default(), None).unwrap();
    render(&resources, &RenderOptions::default(), Some(&full_state())).unwrap();
    let mut state = full_state();
    state
        .claims
        .get_mut("team-a")
        .unwrap()
        .remove("ferry-checkpoints");
    let msg = message(render(&resources, &RenderOptions::default(), Some(&state)));
    assert!(
        msg.contains("claims.checkpoints: PersistentVolumeClaim \"ferry-checkpoints\" does not exist in namespace team-a"),
        "{msg}"
    );
    state.claims.remove("team-a");
    let msg = message(render(&resources, &RenderOptions::default(), Some(&state)));
    // Every problem at once: three claims for the job, one for the deployment.
    assert!(
        msg.starts_with("4 problem(s) found, nothing was created"),
        "{msg}"
    );
}

#[test]
fn name_too_long_for_pod_hostnames() {
    let long = "a".repeat(60);
    let text = TWO_NODE_FULL.replace("name: llama-sft", &format!("name: {long}"));
    let msg = rejected(&text);
    assert!(
        msg.contains("metadata.name: pod hostnames would be"),
        "{msg}"
    );
}

#[test]
fn builtin_engine_is_refused_on_kubernetes() {
    let text = SINGLE_NODE_LORA.replace("engine: torchrun", "engine: builtin");
    let msg = rejected(&text);
    assert!(
        msg.contains("spec.engine: builtin runs on the local runtime only"),
        "{msg}"
    );
}

#[test]
fn a_priority_class_may_not_take_the_name_of_ferrys_own() {
    let msg = rejected(
        "apiVersion: ferry.dev/v1alpha1\nkind: PriorityClass\nmetadata: {name: high}\nspec: {value: 7}\n",
    );
    assert!(
        msg.contains("PriorityClass/default/high")
            && msg.contains("metadata.name")
            && msg.contains("ferry-high")
            && msg.contains("choose another name"),
        "{msg}"
    );
}
