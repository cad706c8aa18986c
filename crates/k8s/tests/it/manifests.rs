//! Bar 1: every rendered manifest validates strictly against the official schemas, and
//! snapshots pin its content.

use ferry_k8s::{Cluster, RenderOptions, render, to_yaml};
use serde_json::{Value, json};

use crate::schema::assert_valid;
use crate::specs::*;

fn opts(cluster: Cluster) -> RenderOptions {
    RenderOptions {
        cluster,
        ..RenderOptions::default()
    }
}

fn rendered(texts: &[&str], cluster: Cluster) -> Vec<Value> {
    render(&parse_all(texts), &opts(cluster), None).unwrap_or_else(|e| panic!("{e}"))
}

fn kinds(objs: &[Value]) -> Vec<String> {
    objs.iter()
        .map(|o| {
            format!(
                "{}/{}",
                o["kind"].as_str().unwrap(),
                o["metadata"]["name"].as_str().unwrap()
            )
        })
        .collect()
}

#[test]
fn plain_cluster_jobs_are_indexed_jobs_with_headless_services() {
    let objs = rendered(
        &[
            QUEUES,
            SINGLE_NODE_LORA,
            TWO_NODE_FULL,
            SIXTEEN_NODE_MEGATRON,
            QLORA_SWIFT,
        ],
        Cluster::default(),
    );
    assert_valid(&objs);
    let k = kinds(&objs);
    for want in [
        "Job/qwen-lora-0",
        "Service/qwen-lora",
        "Job/llama-sft-0",
        "Service/llama-sft",
        "Job/llama70b-pt-0",
        "Job/qwen-qlora-0",
        "Namespace/team-a",
        "ResourceQuota/ferry-gpus",
        "LimitRange/ferry-limits",
        "PriorityClass/ferry-high",
    ] {
        assert!(k.contains(&want.to_string()), "{want} missing from {k:?}");
    }
    assert!(
        !k.iter()
            .any(|k| k.starts_with("JobSet/") || k.starts_with("ClusterQueue/")),
        "{k:?}"
    );
    insta::assert_snapshot!("plain_cluster_jobs", to_yaml(&objs).unwrap());
}

#[test]
fn jobset_cluster_with_racks_renders_jobsets() {
    let cluster = Cluster {
        jobset: true,
        rack_label: Some("topology.kubernetes.io/rack".into()),
        ..Cluster::default()
    };
    // The 16-node job must stay in one rack; the 2-node one prefers to.
    let one_rack =
        SIXTEEN_NODE_MEGATRON.replace("gpu: H100-80GB}", "gpu: H100-80GB, topology: rack}");
    assert_ne!(one_rack, SIXTEEN_NODE_MEGATRON);
    let objs = rendered(
        &[QUEUES, SINGLE_NODE_LORA, TWO_NODE_FULL, one_rack.as_str()],
        cluster,
    );
    assert_valid(&objs);
    let k = kinds(&objs);
    assert!(k.contains(&"JobSet/llama70b-pt-0".to_string()), "{k:?}");
    let two = objs
        .iter()
        .find(|o| o["kind"] == "JobSet" && o["metadata"]["name"] == "llama-sft-0")
        .unwrap();
    let term = &two["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["affinity"]
        ["podAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0];
    assert_eq!(
        (&term["weight"], &term["podAffinityTerm"]["topologyKey"]),
        (&json!(100), &json!("topology.kubernetes.io/rack")),
        "{two}"
    );
    assert!(
        !k.iter()
            .any(|k| k.starts_with("Job/") || k.starts_with("Service/")),
        "{k:?}"
    );
    let js = objs
        .iter()
        .find(|o| o["metadata"]["name"] == "llama70b-pt-0")
        .unwrap();
    let pod = &js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"];
    assert_eq!(
        pod["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]["topologyKey"],
        "topology.kubernetes.io/rack"
    );
    assert_eq!(
        js["spec"]["replicatedJobs"][0]["template"]["spec"]["completions"],
        16
    );
    insta::assert_snapshot!("jobset_cluster_jobs", to_yaml(&objs).unwrap());
}

#[test]
fn kueue_cluster_renders_kueue_queues_and_labels() {
    let cluster = Cluster {
        jobset: true,
        kueue: true,
        ..Cluster::default()
    };
    let objs = rendered(&[QUEUES, TWO_NODE_FULL, DEPLOY_AUTOSCALED], cluster);
    assert_valid(&objs);
    let k = kinds(&objs);
    for want in [
        "ClusterQueue/team-a",
        "LocalQueue/team-a",
        "ResourceFlavor/h100-80gb",
        "ResourceFlavor/any",
        "WorkloadPriorityClass/ferry-high",
        "JobSet/llama-sft-0",
    ] {
        assert!(k.contains(&want.to_string()), "{want} missing from {k:?}");
    }
    let js = objs.iter().find(|o| o["kind"] == "JobSet").unwrap();
    assert_eq!(
        js["metadata"]["labels"]["kueue.x-k8s.io/queue-name"],
        "team-a"
    );
    assert_eq!(js["spec"]["suspend"], true, "Kueue admits by unsuspending");
    insta::assert_snapshot!("kueue_cluster", to_yaml(&objs).unwrap());
}

/// A stopped Ferry Queue is a stopped Kueue ClusterQueue: `spec.stopPolicy`, Kueue's own
/// field and values, valid against Kueue's schema (which refuses any other value).
#[test]
fn a_stopped_queue_is_a_stopped_cluster_queue() {
    let cluster = Cluster {
        kueue: true,
        ..Cluster::default()
    };
    let held = QUEUES.replace("  weight: 2\n", "  weight: 2\n  stopPolicy: HoldAndDrain\n");
    let mut objs = rendered(&[&held], cluster);
    assert_valid(&objs);
    let cq = |objs: &[Value], name: &str| {
        objs.iter()
            .find(|o| o["kind"] == "ClusterQueue" && o["metadata"]["name"] == name)
            .unwrap()
            .clone()
    };
    assert_eq!(cq(&objs, "team-b")["spec"]["stopPolicy"], "HoldAndDrain");
    assert!(cq(&objs, "team-a")["spec"].get("stopPolicy").is_none());
    let b = objs
        .iter_mut()
        .find(|o| o["kind"] == "ClusterQueue" && o["metadata"]["name"] == "team-b")
        .unwrap();
    b["spec"]["stopPolicy"] = "Drain".into();
    assert!(crate::schema::validate(b).is_err());
}

/// A Queue's `preemption` is the ClusterQueue's, under Kueue's names (`withinQueue` is its
/// `withinClusterQueue`), valid against Kueue's schema.
#[test]
fn a_queues_preemption_policy_is_the_cluster_queues() {
    let cluster = Cluster {
        kueue: true,
        ..Cluster::default()
    };
    let strict = QUEUES.replace(
        "  weight: 2\n",
        "  weight: 2\n  preemption: {withinQueue: Never, reclaimWithinCohort: LowerPriority, \
         borrowWithinCohort: {policy: LowerPriority, maxPriorityThreshold: 100}}\n",
    );
    assert_ne!(strict, QUEUES);
    let objs = rendered(&[&strict], cluster);
    assert_valid(&objs);
    let preemption = |name: &str| {
        objs.iter()
            .find(|o| o["kind"] == "ClusterQueue" && o["metadata"]["name"] == name)
            .unwrap()["spec"]["preemption"]
            .clone()
    };
    assert_eq!(
        preemption("team-b"),
        json!({
            "withinClusterQueue": "Never",
            "reclaimWithinCohort": "LowerPriority",
            "borrowWithinCohort": {"policy": "LowerPriority", "maxPriorityThreshold": 100},
        })
    );
    assert_eq!(
        preemption("team-a"),
        json!({"withinClusterQueue": "LowerPriority", "reclaimWithinCohort": "Any"}),
        "borrowWithinCohort Never is Kueue's default and left out"
    ); // Ferry's own scheduler (no Kueue) is given the same policy.
    let team_b = crate::specs::parse(&strict)
        .into_iter()
        .find_map(|r| match r {
            ferry_spec::Resource::Queue(q) if q.metadata.name == "team-b" => Some(q),
            _ => None,
        })
        .unwrap();
    let spec = ferry_k8s::admission::queue_spec("team-b", "team-b", &team_b.spec);
    assert_eq!(
        spec.preemption,
        ferry_sched::PreemptionPolicy {
            within_queue: ferry_sched::WithinQueue::Never,
            reclaim_within_cohort: ferry_sched::ReclaimWithinCohort::LowerPriority,
            borrow_within_cohort: Some(ferry_sched::BorrowWithinCohort {
                max_priority_threshold: Some(100),
            }),
        }
    );
}

#[test]
fn deployments_with_and_without_autoscaling() {
    let objs = rendered(
        &[QUEUES, DEPLOY_FIXED, DEPLOY_AUTOSCALED],
        Cluster::default(),
    );
    assert_valid(&objs);
    let fixed = objs
        .iter()
        .find(|o| o["kind"] == "Deployment" && o["metadata"]["name"] == "qwen-chat")
        .unwrap();
    assert_eq!(fixed["spec"]["replicas"], 2);
    let hpas: Vec<&Value> = objs
        .iter()
        .filter(|o| o["kind"] == "HorizontalPodAutoscaler")
        .collect();
    assert_eq!(hpas.len(), 1, "only the annotated deployment scales");
    assert_eq!(
        hpas[0]["spec"]["metrics"][0]["pods"]["metric"]["name"],
        "vllm:num_requests_waiting"
    );
    assert_eq!(hpas[0]["spec"]["maxReplicas"], 6);
    let auto = objs
        .iter()
        .find(|o| o["kind"] == "Deployment" && o["metadata"]["name"] == "llama70b-chat")
        .unwrap();
    let args: Vec<&str> = auto["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    let after = |flag: &str| {
        args[args
            .iter()
            .position(|a| *a == flag)
            .unwrap_or_else(|| panic!("{flag} in {args:?}"))
            + 1]
    };
    assert_eq!(after("--tensor-parallel-size"), "4");
    assert_eq!(after("--max-model-len"), "8192");
    assert_eq!(after("--served-model-name"), "llama-70b");
    assert_eq!(after("--lora-modules"), "llama-sft-v1=/models/llama-sft-v1");
    assert!(
        args.contains(&"--enable-lora") && args.contains(&"--gpu-memory-utilization"),
        "{args:?}"
    );
    let probe =
        &auto["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["httpGet"]["path"];
    assert_eq!(probe, "/health");
    insta::assert_snapshot!("deployments", to_yaml(&objs).unwrap());
}

#[test]
fn keda_replaces_the_hpa_when_present() {
    let cluster = Cluster {
        keda: true,
        ..Cluster::default()
    };
    let objs = rendered(&[QUEUES, DEPLOY_AUTOSCALED], cluster);
    let scaled: Vec<&Value> = objs
        .iter()
        .filter(|o| o["kind"] == "ScaledObject")
        .collect();
    assert_eq!(scaled.len(), 1);
    assert!(!objs.iter().any(|o| o["kind"] == "HorizontalPodAutoscaler"));
    assert_eq!(scaled[0]["spec"]["maxReplicaCount"], 6);
    // KEDA's own CRD schema, strictly (an unknown field is an error).
    assert_valid(&objs);
    let trigger = &scaled[0]["spec"]["triggers"][0];
    assert_eq!(trigger["metadata"]["threshold"], "4");
    assert!(
        trigger["metadata"]["query"]
            .as_str()
            .unwrap()
            .starts_with("sum(vllm:num_requests_waiting{namespace=\"team-a\""),
        "{trigger}"
    );
    let mut bad = scaled[0].clone();
    bad["spec"]["triggers"][0]["surprise"] = true.into();
    let errs = crate::schema::validate(&bad).unwrap_err();
    assert!(errs.iter().any(|e| e.contains("surprise")), "{errs:?}");
}

#[test]
fn an_explicit_provider_wins_over_the_clusters_default() {
    // provider: keda on a cluster without KEDA discovered: still a ScaledObject, to zero.
    let objs = rendered(
        &[QUEUES, DEPLOY_KEDA, DEPLOY_AUTOSCALED],
        Cluster::default(),
    );
    assert_valid(&objs);
    let scaled: Vec<&Value> = objs
        .iter()
        .filter(|o| o["kind"] == "ScaledObject")
        .collect();
    assert_eq!(scaled.len(), 1);
    assert_eq!(scaled[0]["metadata"]["name"], "qwen-chat");
    assert_eq!(scaled[0]["spec"]["minReplicaCount"], 0);
    assert_eq!(
        scaled[0]["spec"]["triggers"][0]["metadata"]["threshold"],
        "2500m"
    );
    let hpa = objs
        .iter()
        .find(|o| o["kind"] == "HorizontalPodAutoscaler")
        .expect("the other deployment gets an HPA");
    assert_eq!(hpa["metadata"]["name"], "llama70b-chat");
    assert_eq!(
        hpa["spec"]["metrics"][0]["pods"]["target"]["averageValue"],
        "4"
    );
    // Autoscaled deployments leave the replica count to the autoscaler.
    for d in objs.iter().filter(|o| o["kind"] == "Deployment") {
        assert!(
            d["spec"].get("replicas").is_none(),
            "{}",
            d["metadata"]["name"]
        );
    }
}

#[test]
fn strict_validation_rejects_an_unknown_field() {
    let mut objs = rendered(&[QUEUES, SINGLE_NODE_LORA], Cluster::default());
    let job = objs.iter_mut().find(|o| o["kind"] == "Job").unwrap();
    job["spec"]["template"]["spec"]["containers"][0]["gpuCount"] = 1.into();
    let errs = crate::schema::validate(job).unwrap_err();
    assert!(errs.iter().any(|e| e.contains("gpuCount")), "{errs:?}");
    // Strict in the CRD-based schemas too (JobSet, Kueue), metadata included.
    let cluster = Cluster {
        jobset: true,
        kueue: true,
        ..Cluster::default()
    };
    let mut objs = rendered(&[QUEUES, TWO_NODE_FULL], cluster);
    for o in objs
        .iter_mut()
        .filter(|o| o["kind"] == "JobSet" || o["kind"] == "ClusterQueue")
    {
        crate::schema::validate(o).unwrap();
        o["spec"]["surprise"] = true.into();
        let errs = crate::schema::validate(o).unwrap_err();
        assert!(errs.iter().any(|e| e.contains("surprise")), "{errs:?}");
        o["spec"].as_object_mut().unwrap().remove("surprise");
        o["metadata"]["labelz"] = serde_json::json!({});
        assert!(crate::schema::validate(o).is_err());
    }
}

/// A Ferry `PriorityClass` becomes the cluster's class of the same name (what a job's
/// `spec.priority` puts in its pods' `priorityClassName`), with Kueue's class beside it.
#[test]
fn an_applied_priority_class_becomes_the_clusters_own() {
    const URGENT: &str = "apiVersion: ferry.dev/v1alpha1\nkind: PriorityClass\nmetadata: {name: urgent}\nspec: {value: 500000, preemptionPolicy: Never, description: deadline work}\n";
    let job = TWO_NODE_FULL.replace("priority: high", "priority: urgent");
    let cluster = Cluster {
        jobset: true,
        kueue: true,
        ..Cluster::default()
    };
    let objs = rendered(&[QUEUES, URGENT, &job], cluster);
    assert_valid(&objs);
    let class = |kind: &str| {
        objs.iter()
            .find(|o| o["kind"] == kind && o["metadata"]["name"] == "urgent")
            .unwrap_or_else(|| panic!("no {kind}/urgent in {:?}", kinds(&objs)))
    };
    let pc = class("PriorityClass");
    assert_eq!(pc["apiVersion"], "scheduling.k8s.io/v1");
    assert_eq!(pc["value"], 500000);
    assert_eq!(pc["preemptionPolicy"], "Never");
    assert_eq!(pc["description"], "deadline work");
    assert_eq!(class("WorkloadPriorityClass")["value"], 500000);
    let js = objs.iter().find(|o| o["kind"] == "JobSet").unwrap();
    assert_eq!(
        js["metadata"]["labels"]["kueue.x-k8s.io/priority-class"],
        "urgent"
    );
    let pods = js.to_string();
    assert!(pods.contains(r#""priorityClassName":"urgent""#), "{pods}");
}

/// A sweep renders as its jobs, each the template with its combination, valid against the
/// official schemas; its `maxParallel`, which only `ferry up` enforces, is warned about.
#[test]
fn a_sweep_renders_as_its_jobs() {
    let sweep = r#"
apiVersion: ferry.dev/v1alpha1
kind: Sweep
metadata: {name: rank-sweep, namespace: team-a}
spec:
  template:
    spec:
      model: {source: hf, id: Qwen/Qwen2.5-7B}
      engine: torchrun
      method: lora
      data: {path: sft/chat.jsonl, format: chat}
      resources: {nodes: 1, gpusPerNode: 1, gpu: H100-80GB}
      train: {seqLen: 2048, globalBatch: 32, epochs: 1}
      queue: team-a
  parameters:
    lora.rank: [8, 32]
    train.lr: [0.0001, 0.0002]
  maxParallel: 2
"#;
    let resources = parse_all(&[QUEUES, sweep]);
    let objs =
        render(&resources, &opts(Cluster::default()), None).unwrap_or_else(|e| panic!("{e}"));
    assert_valid(&objs);
    let jobs: Vec<&Value> = objs.iter().filter(|o| o["kind"] == "Job").collect();
    let names: Vec<&str> = jobs
        .iter()
        .map(|j| j["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "rank-sweep-0-0",
            "rank-sweep-1-0",
            "rank-sweep-2-0",
            "rank-sweep-3-0"
        ]
    );
    let command =
        |i: usize| jobs[i]["spec"]["template"]["spec"]["containers"][0]["command"].to_string();
    // lora.rank varies slowest, train.lr fastest.
    assert!(
        command(1).contains("--learning_rate 2e-4"),
        "{}",
        command(1)
    );
    assert!(command(1).contains("--lora_r 8 "), "{}", command(1));
    assert!(
        command(2).contains("--learning_rate 1e-4"),
        "{}",
        command(2)
    );
    assert!(command(2).contains("--lora_r 32 "), "{}", command(2));
    let warnings = ferry_k8s::warnings(&resources);
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].starts_with("Sweep team-a/rank-sweep: spec.maxParallel (2) is enforced only by `ferry up`; all 4 of its jobs are rendered"),
        "{warnings:?}"
    );
}

/// What Ferry renders for Kueue reads back as the same queues (`ferry sim --queues` takes
/// Kueue's objects): each ClusterQueue is its Queue's spec, held and strict variants too,
/// with flavors under their ResourceFlavor names and `any` (no node labels) as `any`, and
/// each LocalQueue leads to its ClusterQueue.
#[test]
fn rendered_kueue_queues_read_back_as_the_queues() {
    let cluster = Cluster {
        kueue: true,
        ..Cluster::default()
    };
    let variant = QUEUES.replace(
        "  weight: 2\n",
        "  weight: 2\n  stopPolicy: Hold\n  preemption: {withinQueue: Never}\n",
    );
    // A queue whose jobs may preempt to borrow, with and without a threshold.
    let borrowing = QUEUES
        .replace(
            "  weight: 2\n",
            "  weight: 2\n  preemption: {borrowWithinCohort: {policy: LowerPriority}}\n",
        )
        .replace(
            "  cohort: research\n  quotas: [{flavor: H100-80GB, nominal: 128",
            "  cohort: research\n  preemption: {reclaimWithinCohort: LowerPriority, \
             borrowWithinCohort: {policy: LowerPriority, maxPriorityThreshold: 10000}}\n  \
             quotas: [{flavor: H100-80GB, nominal: 128",
        );
    for text in [QUEUES, variant.as_str(), borrowing.as_str()] {
        let objs = rendered(&[text], cluster.clone());
        let back = ferry_spec::read_kueue_queues(&to_yaml(&objs).unwrap(), "rendered.yaml")
            .unwrap_or_else(|e| panic!("{e}"));
        let queues: Vec<ferry_spec::Queue> = parse_all(&[text])
            .into_iter()
            .filter_map(|r| match r {
                ferry_spec::Resource::Queue(q) => Some(q),
                _ => None,
            })
            .collect();
        assert_eq!(back.cluster_queues.len(), queues.len());
        for q in &queues {
            let name = ferry_k8s::tenancy::cluster_queue_name(q);
            let mut want = q.spec.clone();
            for f in &mut want.quotas {
                f.flavor = ferry_k8s::options::flavor_object_name(&f.flavor);
            }
            let got = back.cluster_queues.iter().find(|(n, _)| *n == name);
            assert_eq!(got.map(|(_, s)| s), Some(&want), "{name}");
            assert_eq!(
                back.cluster_queue_of(&q.metadata.name),
                Ok(Some(name.as_str()))
            );
        }
        // Every rendered ClusterQueue carries its fair-sharing weight, which Kueue does not
        // combine with borrowWithinCohort: said once per borrowing queue, nothing else.
        let borrowers = queues
            .iter()
            .filter(|q| !q.spec.preemption.borrow_within_cohort.is_never())
            .count();
        let (notes, other): (Vec<&String>, Vec<&String>) = back
            .not_modelled
            .iter()
            .filter(|n| !n.ends_with("skipped"))
            .partition(|n| n.contains("borrowWithinCohort beside spec.fairSharing"));
        assert!(other.is_empty(), "{:?}", back.not_modelled);
        assert_eq!(notes.len(), borrowers, "{:?}", back.not_modelled);
    }
}

/// A cohort tree under the teams' cohort `research`: `org` with GPUs of its own, `research`
/// under it held to a borrowing limit, lending more than its own (its queues' GPUs are its
/// subtree's) and weighted 2 against its sibling, and `platform` with no quota, weighted 0.5.
const COHORTS: &str = r#"
apiVersion: ferry.dev/v1alpha1
kind: Cohort
metadata: {name: research}
spec:
  parent: org
  weight: 2
  quotas:
  - {flavor: H100-80GB, nominal: 8, borrowingLimit: 40, lendingLimit: 40}
  - {flavor: any, nominal: 0}
---
apiVersion: ferry.dev/v1alpha1
kind: Cohort
metadata: {name: org}
spec:
  quotas: [{flavor: H100-80GB, nominal: 40}]
---
apiVersion: ferry.dev/v1alpha1
kind: Cohort
metadata: {name: platform}
spec: {parent: org, weight: 0.5}
"#;

/// Ferry Cohorts render to Kueue's (valid against its CRD, parents before children, before the
/// ClusterQueues naming them, each with its weight as `fairSharing.weight`) and read back with
/// the Kueue reader as the same cohort specs, weights included;
/// a team's GPU ResourceQuota counts its tree's GPUs, the cohorts' own included.
#[test]
fn rendered_kueue_cohorts_read_back_as_the_cohorts() {
    let cluster = Cluster {
        kueue: true,
        ..Cluster::default()
    };
    let objs = rendered(&[QUEUES, COHORTS], cluster.clone());
    assert_valid(&objs);
    let k = kinds(&objs);
    let at = |name: &str| {
        k.iter()
            .position(|x| x == name)
            .unwrap_or_else(|| panic!("{name}: {k:?}"))
    };
    assert!(at("Cohort/org") < at("Cohort/research"), "{k:?}");
    assert!(at("Cohort/org") < at("Cohort/platform"), "{k:?}");
    assert!(at("Cohort/research") < at("ClusterQueue/team-a"), "{k:?}");
    let research = &objs[at("Cohort/research")];
    assert_eq!(research["apiVersion"], ferry_k8s::tenancy::KUEUE_API);
    assert_eq!(research["spec"]["parentName"], "org");
    assert_eq!(research["spec"]["fairSharing"], json!({"weight": "2"}));
    assert_eq!(
        objs[at("Cohort/org")]["spec"]["fairSharing"],
        json!({"weight": "1"})
    );
    assert_eq!(
        research["spec"]["resourceGroups"][0]["flavors"][0],
        json!({"name": "h100-80gb", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": "8",
            "borrowingLimit": "40", "lendingLimit": "40"}]})
    );
    assert_eq!(
        objs[at("Cohort/platform")]["spec"],
        json!({"parentName": "org", "fairSharing": {"weight": "0.5"}})
    );

    let back = ferry_spec::read_kueue_queues(&to_yaml(&objs).unwrap(), "rendered.yaml")
        .unwrap_or_else(|e| panic!("{e}"));
    let mut want: Vec<(String, ferry_spec::CohortSpec)> = parse(COHORTS)
        .into_iter()
        .filter_map(|r| match r {
            ferry_spec::Resource::Cohort(c) => Some((c.metadata.name, c.spec)),
            _ => None,
        })
        .collect();
    for (_, c) in &mut want {
        for f in &mut c.quotas {
            f.flavor = ferry_k8s::options::flavor_object_name(&f.flavor);
        }
    }
    let mut got = back.cohorts.clone();
    want.sort_by(|a, b| a.0.cmp(&b.0));
    got.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(got, want);
    let weights: Vec<f64> = got.iter().map(|(_, c)| c.weight).collect();
    assert_eq!(weights, [1.0, 0.5, 2.0], "org, platform, research");
    // What is read back builds the scheduler as the Ferry documents do.
    let sched = |cohorts: Vec<ferry_sched::CohortSpec>| {
        let cluster = ferry_sched::Cluster {
            nodes: (0..64)
                .map(|i| ferry_sched::Node {
                    name: format!("n{i}"),
                    gpus: 8,
                    flavor: "h100-80gb".into(),
                    rack: None,
                    nvlink_domain: None,
                })
                .collect(),
        };
        let queues = back
            .cluster_queues
            .iter()
            .map(|(n, q)| ferry_k8s::admission::queue_spec("", n, q))
            .collect();
        ferry_sched::Scheduler::with_cohorts(
            cluster,
            queues,
            &cohorts,
            ferry_sched::PriorityClass::standard(),
            ferry_sched::Options::default(),
        )
        .map(|_| ())
    };
    sched(got.iter().map(|(n, c)| c.to_sched(n)).collect()).unwrap();

    let gpus = |objs: &[Value], ns: &str| {
        let rq = objs
            .iter()
            .find(|o| o["kind"] == "ResourceQuota" && o["metadata"]["namespace"] == ns)
            .unwrap();
        rq["spec"]["hard"]["requests.nvidia.com/gpu"]
            .as_str()
            .unwrap()
            .parse::<i64>()
            .unwrap()
    };
    let flat = rendered(&[QUEUES], cluster);
    // team-b borrows without a limit in both of its flavors: each may reach the tree's GPUs,
    // 48 more with the cohorts' own; team-a's borrowing limit caps it either way.
    assert_eq!(gpus(&objs, "team-b"), gpus(&flat, "team-b") + 2 * 48);
    assert_eq!(gpus(&objs, "team-a"), gpus(&flat, "team-a"));
}

/// A Cohort that is its own ancestor through the file is refused before anything renders,
/// once, at the loop's first Cohort.
#[test]
fn a_cohort_loop_is_refused_at_render() {
    let looped = COHORTS.replace(
        "metadata: {name: org}\nspec:\n",
        "metadata: {name: org}\nspec:\n  parent: platform\n",
    );
    assert_ne!(looped, COHORTS);
    let e = render(
        &parse_all(&[QUEUES, &looped]),
        &opts(Cluster::default()),
        None,
    )
    .unwrap_err()
    .to_string();
    assert_eq!(
        e,
        "Cohort/org: spec.parent: cohort `org` is its own ancestor (org -> platform -> org); \
         remove or change one spec.parent in the loop"
    );
}
