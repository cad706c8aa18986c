//! Bar 4: a 2-node job's rendered objects start a working torchrun gang. The test plays
//! the Job (or JobSet) controller — one pod per completion index, with the hostname,
//! subdomain and completion-index annotation Kubernetes gives it — resolves every
//! environment variable through the downward API, and expands torchrun's local ranks.

use std::collections::BTreeMap;

use ferry_k8s::{Cluster, RenderOptions, render};
use serde_json::Value;

use crate::specs::*;

struct Pod {
    hostname: String,
    subdomain: String,
    labels: BTreeMap<String, String>,
    annotations: BTreeMap<String, String>,
    env: BTreeMap<String, String>,
    command: Vec<String>,
}

fn resolve_env(
    template: &Value,
    annotations: &BTreeMap<String, String>,
) -> BTreeMap<String, String> {
    let mut env = BTreeMap::new();
    for e in template["spec"]["containers"][0]["env"].as_array().unwrap() {
        let name = e["name"].as_str().unwrap().to_owned();
        let value = if let Some(v) = e["value"].as_str() {
            v.to_owned()
        } else {
            let path = e["valueFrom"]["fieldRef"]["fieldPath"]
                .as_str()
                .unwrap_or_else(|| panic!("{name}: no value"));
            let key = path
                .strip_prefix("metadata.annotations['")
                .and_then(|p| p.strip_suffix("']"))
                .unwrap_or_else(|| panic!("{name}: unsupported fieldPath {path}"));
            annotations
                .get(key)
                .unwrap_or_else(|| panic!("{name}: pod has no annotation {key}"))
                .clone()
        };
        assert!(
            env.insert(name.clone(), value).is_none(),
            "{name} set twice"
        );
    }
    env
}

/// The pods the controllers would create for the gang `gang`.
fn pods(gang: &Value) -> Vec<Pod> {
    let (job_spec, name_of, default_subdomain) = match gang["kind"].as_str().unwrap() {
        "Job" => (
            gang["spec"].clone(),
            gang["metadata"]["name"].as_str().unwrap().to_owned(),
            None,
        ),
        "JobSet" => {
            let rj = &gang["spec"]["replicatedJobs"][0];
            assert_eq!(rj["replicas"], 1);
            let js = gang["metadata"]["name"].as_str().unwrap();
            assert_eq!(gang["spec"]["network"]["enableDNSHostnames"], true);
            let sub = gang["spec"]["network"]["subdomain"]
                .as_str()
                .unwrap_or(js)
                .to_owned();
            (
                rj["template"]["spec"].clone(),
                format!("{js}-{}-0", rj["name"].as_str().unwrap()),
                Some(sub),
            )
        }
        k => panic!("unexpected gang kind {k}"),
    };
    assert_eq!(job_spec["completionMode"], "Indexed");
    assert_eq!(job_spec["completions"], job_spec["parallelism"]);
    let n = job_spec["completions"].as_u64().unwrap();
    let template = &job_spec["template"];
    (0..n)
        .map(|i| {
            let annotations = BTreeMap::from([(
                ferry_k8s::options::COMPLETION_INDEX_ANNOTATION.to_owned(),
                i.to_string(),
            )]);
            let labels: BTreeMap<String, String> =
                serde_json::from_value(template["metadata"]["labels"].clone()).unwrap();
            Pod {
                hostname: format!("{name_of}-{i}"),
                subdomain: default_subdomain.clone().unwrap_or_else(|| {
                    template["spec"]["subdomain"]
                        .as_str()
                        .expect("Indexed Job pods need a subdomain")
                        .to_owned()
                }),
                labels,
                env: resolve_env(template, &annotations),
                annotations,
                command: serde_json::from_value(
                    template["spec"]["containers"][0]["command"].clone(),
                )
                .unwrap(),
            }
        })
        .collect()
}

fn check_gang(objs: &[Value], ns: &str) {
    let gang = objs
        .iter()
        .find(|o| o["kind"] == "Job" || o["kind"] == "JobSet")
        .unwrap();
    let pods = pods(gang);
    assert_eq!(pods.len(), 2);
    let master: Vec<&str> = pods.iter().map(|p| p.env["MASTER_ADDR"].as_str()).collect();
    assert!(
        master.iter().all(|m| *m == master[0]),
        "one MASTER_ADDR: {master:?}"
    );
    let ports: Vec<&str> = pods.iter().map(|p| p.env["MASTER_PORT"].as_str()).collect();
    assert!(
        ports.iter().all(|p| *p == ports[0]),
        "one MASTER_PORT: {ports:?}"
    );

    // MASTER_ADDR = <index-0 hostname>.<headless service>.<namespace>.svc
    let parts: Vec<&str> = master[0].split('.').collect();
    assert_eq!(parts.len(), 4, "{}", master[0]);
    assert_eq!(
        parts[0], pods[0].hostname,
        "MASTER_ADDR names the index-0 pod"
    );
    assert_eq!(
        pods[0].annotations[ferry_k8s::options::COMPLETION_INDEX_ANNOTATION],
        "0"
    );
    assert_eq!(parts[1], pods[0].subdomain, "through the pods' subdomain");
    assert_eq!((parts[2], parts[3]), (ns, "svc"));
    if gang["kind"] == "Job" {
        let svc = objs
            .iter()
            .find(|o| o["kind"] == "Service" && o["metadata"]["name"] == parts[1])
            .expect("a Service named like the subdomain");
        assert_eq!(svc["spec"]["clusterIP"], "None", "headless");
        assert_eq!(svc["metadata"]["namespace"], ns);
        let selector: BTreeMap<String, String> =
            serde_json::from_value(svc["spec"]["selector"].clone()).unwrap();
        for p in &pods {
            assert!(
                selector.iter().all(|(k, v)| p.labels.get(k) == Some(v)),
                "service selects pod {}",
                p.hostname
            );
        }
        assert!(
            svc["spec"]["ports"]
                .as_array()
                .unwrap()
                .iter()
                .any(
                    |port| port["port"].as_u64().map(|p| p.to_string()).as_deref()
                        == Some(ports[0])
                )
        );
    }

    // torchrun: RANK = NODE_RANK * NPROC_PER_NODE + LOCAL_RANK.
    let mut ranks = Vec::new();
    for p in &pods {
        let world: u64 = p.env["WORLD_SIZE"].parse().unwrap();
        let nnodes: u64 = p.env["NNODES"].parse().unwrap();
        let nproc: u64 = p.env["NPROC_PER_NODE"].parse().unwrap();
        assert_eq!(world, nnodes * nproc);
        let node_rank: u64 = p.env["NODE_RANK"].parse().unwrap();
        ranks.extend((0..nproc).map(|local| node_rank * nproc + local));
        let script = p.command.join(" ");
        assert!(
            script.contains("--node-rank $NODE_RANK") || script.contains("NODE_RANK=$NODE_RANK"),
            "{script}"
        );
        assert!(script.contains("$MASTER_ADDR"), "{script}");
        assert!(
            script.contains("--master-port $MASTER_PORT"),
            "the launcher uses MASTER_PORT: {script}"
        );
        assert!(
            !script.contains("29500"),
            "no port but MASTER_PORT's: {script}"
        );
    }
    ranks.sort();
    let world: u64 = pods[0].env["WORLD_SIZE"].parse().unwrap();
    assert_eq!(
        ranks,
        (0..world).collect::<Vec<_>>(),
        "every RANK 0..N-1 exactly once"
    );
}

#[test]
fn two_node_indexed_job_wires_every_rank() {
    let objs = render(
        &parse_all(&[QUEUES, TWO_NODE_FULL]),
        &RenderOptions::default(),
        None,
    )
    .unwrap();
    check_gang(&objs, "team-a");
}

#[test]
fn two_node_jobset_wires_every_rank() {
    let opts = RenderOptions {
        cluster: Cluster {
            jobset: true,
            ..Cluster::default()
        },
        ..RenderOptions::default()
    };
    let objs = render(&parse_all(&[QUEUES, TWO_NODE_FULL]), &opts, None).unwrap();
    check_gang(&objs, "team-a");
}

#[test]
fn node_rank_never_comes_from_the_pod_name() {
    let objs = render(
        &parse_all(&[QUEUES, TWO_NODE_FULL]),
        &RenderOptions::default(),
        None,
    )
    .unwrap();
    let job = objs.iter().find(|o| o["kind"] == "Job").unwrap();
    let env = job["spec"]["template"]["spec"]["containers"][0]["env"]
        .as_array()
        .unwrap();
    let node_rank = env.iter().find(|e| e["name"] == "NODE_RANK").unwrap();
    assert_eq!(
        node_rank["valueFrom"]["fieldRef"]["fieldPath"],
        "metadata.annotations['batch.kubernetes.io/job-completion-index']"
    );
}
