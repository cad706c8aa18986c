//! The Volcano reader's tests: queues, their shares, the scheduler's ConfigMap, and refusals.

use super::*;
use crate::foreign::QueueObjects;

#[test]
fn queues_read_as_one_cohort_with_deserved_capability_and_guarantee() {
    let text = r#"
apiVersion: scheduling.volcano.sh/v1beta1
kind: Queue
metadata: {name: research}
spec:
  weight: 4
  reclaimable: false
  deserved: {cpu: "256", nvidia.com/gpu: "64"}
  capability: {nvidia.com/gpu: 96}
  guarantee: {resource: {nvidia.com/gpu: "16"}}
---
apiVersion: scheduling.volcano.sh/v1beta1
kind: Queue
metadata: {name: default}
spec: {weight: 1, parent: root}
---
apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata: {name: j}
"#;
    let q = read_volcano_queues(text, "vq.yaml").unwrap();
    let specs = q.queue_specs(160);
    let research = &specs[0].1;
    assert_eq!(specs[0].0, "research");
    assert_eq!(research.cohort.as_deref(), Some(VOLCANO_COHORT));
    assert_eq!(research.weight, 4.0);
    assert_eq!(
        research.quotas,
        [FlavorQuota {
            flavor: "any".into(),
            nominal: 64,
            borrowing_limit: Some(32),
            lending_limit: Some(48),
        }]
    );
    assert_eq!(
        research.preemption.reclaim_within_cohort,
        ReclaimWithinCohort::Never
    );
    // Nothing deserved: owed what no queue deserves (160 - 64), lending all of it.
    let default = &specs[1].1.quotas[0];
    assert_eq!(
        (
            default.nominal,
            default.borrowing_limit,
            default.lending_limit
        ),
        (96, None, None)
    );
    assert_eq!(
        q.not_modelled[1..],
        [
            "Queue/research: spec.reclaimable false (moot: reclaim is off, nothing is taken back)",
            "1 Job (batch.volcano.sh/v1alpha1) object(s) skipped",
        ]
    );
}

/// Without `deserved`, queues are owed shares by weight, filled up to their capabilities
/// (the GPUs a capped queue cannot take go to the others), rounded to whole GPUs that add
/// up to the cluster; a capability above what the others can lend is cut to it.
#[test]
fn weights_divide_what_no_queue_deserves() {
    let q = |name: &str, weight: u32, capability: Option<i32>| VolcanoQueue {
        name: name.into(),
        deserved: None,
        capability,
        guarantee: None,
        weight,
    };
    let nominal = |queues: Vec<VolcanoQueue>, gpus: u32| -> Vec<i32> {
        VolcanoQueues {
            queues,
            preemption: SchedulerConf::default().preemption(),
            replayed: Vec::new(),
            not_modelled: Vec::new(),
        }
        .queue_specs(gpus)
        .iter()
        .map(|(_, s)| s.quotas[0].nominal)
        .collect()
    };
    assert_eq!(
        nominal(vec![q("a", 1, None), q("b", 2, None)], 100),
        [33, 67]
    );
    assert_eq!(
        nominal(vec![q("a", 1, None), q("b", 1, None), q("c", 1, None)], 8),
        [3, 3, 2]
    );
    assert_eq!(
        nominal(vec![q("a", 1, Some(10)), q("b", 1, None)], 100),
        [10, 90]
    );
    let specs = VolcanoQueues {
        queues: vec![q("a", 1, Some(1000)), q("b", 1, None)],
        preemption: SchedulerConf::default().preemption(),
        replayed: Vec::new(),
        not_modelled: Vec::new(),
    }
    .queue_specs(100);
    assert_eq!(
        specs[0].1.quotas[0].borrowing_limit,
        Some(50),
        "b lends its 50"
    );
}

#[test]
fn bad_queues_are_refused_naming_the_field_and_the_fix() {
    let queue = |spec: &str| {
        let text = format!(
            "apiVersion: scheduling.volcano.sh/v1beta1\nkind: Queue\nmetadata: {{name: q}}\nspec: {spec}\n"
        );
        read_volcano_queues(&text, "vq.yaml")
            .unwrap_err()
            .to_string()
    };
    assert_eq!(
        queue("{capabilty: {nvidia.com/gpu: 8}}"),
        "vq.yaml: Queue/q: spec.capabilty: not a Volcano Queue field; did you mean `capability`?"
    );
    assert_eq!(
        queue("{deserved: {nvidia.com/gpu: 500m}}"),
        "vq.yaml: Queue/q: spec.deserved[nvidia.com/gpu]: must be a whole number of GPUs, 0 \
         or more, such as \"8\" (got \"500m\")"
    );
    assert!(
        queue("{deserved: {nvidia.com/gpu: 8}, capability: {nvidia.com/gpu: 4}}")
            .contains("raise it")
    );
    assert!(
        queue("{deserved: {nvidia.com/gpu: 8}, guarantee: {resource: {nvidia.com/gpu: 9}}}")
            .contains("lower it")
    );
    assert!(queue("{weight: 0}").contains("from 1 to 65535"));
    assert!(queue("{parent: org}").contains("queue trees are not modelled"));
    // A parent that is no name is refused too, not ignored.
    assert_eq!(
        queue("{parent: 7}"),
        "vq.yaml: Queue/q: spec.parent: must be a queue's name (got 7); queue trees are not \
         modelled, so only `root` is read: remove it or write root"
    );
    assert!(
        read_volcano_queues(
            "apiVersion: scheduling.volcano.sh/v1beta1\nkind: Queue\nmetadata: {name: q}\n\
         spec: {parent: root}\n",
            "vq.yaml"
        )
        .is_ok()
    );
}

/// A Queue and the scheduler's ConfigMap as `kubectl get -o yaml` prints them, the
/// ConfigMap's `volcano-scheduler.conf` holding `conf`.
fn with_conf(queue_spec: &str, conf: &str) -> String {
    let conf = serde_json::to_string(conf).unwrap();
    format!(
        "apiVersion: scheduling.volcano.sh/v1beta1\nkind: Queue\nmetadata: {{name: a}}\n\
         spec: {queue_spec}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {{name: \
         volcano-scheduler-configmap, namespace: volcano-system}}\ndata:\n  \
         volcano-scheduler.conf: {conf}\n"
    )
}

#[test]
fn preempt_and_reclaim_actions_turn_preemption_on_for_every_queue() {
    let conf = "actions: \"enqueue, allocate, preempt, reclaim, backfill, shuffle\"\n\
                tiers:\n- plugins:\n  - name: priority\n  - name: gang\n    \
                enablePreemptable: false\n  - name: conformance\n- plugins:\n  - name: \
                drf\n  - name: proportion\n  - name: binpack\n";
    let text = format!(
        "{}---\napiVersion: scheduling.volcano.sh/v1beta1\nkind: Queue\nmetadata: {{name: \
         b}}\nspec: {{weight: 2}}\n",
        with_conf("{reclaimable: false}", conf)
    );
    assert_eq!(QueueObjects::of(&text), Some(QueueObjects::Volcano));
    let q = read_volcano_queues(&text, "vq.yaml").unwrap();
    let on = Preemption {
        within_queue: WithinQueue::LowerPriority,
        reclaim_within_cohort: ReclaimWithinCohort::Any,
        ..Default::default()
    };
    let specs = q.queue_specs(16);
    assert!(specs.iter().all(|(_, s)| s.preemption == on), "{specs:?}");
    assert_eq!(
        q.replayed,
        [
            "volcano-scheduler.conf actions \"enqueue, allocate, preempt, reclaim, backfill, \
             shuffle\": preempt on (a job preempts lower-priority jobs of its own queue), \
             reclaim on (a queue below its deserved GPUs takes back what others use beyond \
             theirs), for every queue; enqueue, allocate and backfill are what Ferry always \
             does"
        ]
    );
    assert_eq!(
        q.not_modelled,
        [
            "Queue/a: spec.reclaimable false (reclaim takes back what it uses beyond its \
             deserved GPUs, as from any queue: Ferry cannot exempt one borrower)",
            "volcano-scheduler.conf: plugins priority (Ferry orders and preempts by the \
             trace's priority classes), gang (Ferry always admits gangs whole), proportion \
             (the deserved and weight shares read from the Queues); plugins conformance, \
             drf, binpack not modelled; plugin options gang.enablePreemptable not modelled; \
             actions shuffle not modelled",
        ]
    );
    // Only `preempt`: within queues, nothing reclaimed.
    let q = read_volcano_queues(
        &with_conf("{}", "actions: allocate, gangpreempt"),
        "vq.yaml",
    )
    .unwrap();
    assert_eq!(
        q.preemption,
        Preemption {
            within_queue: WithinQueue::LowerPriority,
            reclaim_within_cohort: ReclaimWithinCohort::Never,
            ..Default::default()
        }
    );
    assert!(q.replayed[0].ends_with("; allocate is what Ferry always does"));
    assert_eq!(
        q.queue_specs(16)[0].1.cohort,
        None,
        "a lone queue has no cohort"
    );
    assert_eq!(q.not_modelled, Vec::<String>::new());
    // A ConfigMap alone is no queues file.
    let alone = with_conf("{}", "actions: allocate");
    assert_eq!(QueueObjects::of(&alone[alone.find("---").unwrap()..]), None);
}

/// Volcano's default actions replay as a file without the ConfigMap does, in a kubectl
/// `List` beside a ConfigMap of something else, which is skipped.
#[test]
fn default_actions_replay_as_without_the_config_map() {
    let text = r#"{"apiVersion": "v1", "kind": "List", "items": [
  {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue", "metadata": {"name": "a"},
   "spec": {"reclaimable": false, "deserved": {"nvidia.com/gpu": "8"}}},
  {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "kube-root-ca.crt"},
   "data": {"ca.crt": "..."}},
  {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "volcano-scheduler-configmap"},
   "data": {"volcano-scheduler.conf": "actions: \"enqueue, allocate, backfill\"\ntiers:\n- plugins:\n  - name: gang\n"}}
]}"#;
    let with = read_volcano_queues(text, "vq.json").unwrap();
    let without = read_volcano_queues(
        "apiVersion: scheduling.volcano.sh/v1beta1\nkind: Queue\nmetadata: {name: a}\n\
         spec: {reclaimable: false, deserved: {nvidia.com/gpu: \"8\"}}\n",
        "vq.yaml",
    )
    .unwrap();
    assert_eq!(with.queue_specs(16), without.queue_specs(16));
    assert_eq!(
        with.preemption.within_queue,
        WithinQueue::Never,
        "{:?}",
        with.preemption
    );
    assert!(
        with.replayed[0].contains("preempt off (") && with.replayed[0].contains("reclaim off ("),
        "{:?}",
        with.replayed
    );
    assert_eq!(
        with.not_modelled,
        [
            "Queue/a: spec.reclaimable false (moot: reclaim is off, nothing is taken back)",
            "volcano-scheduler.conf: plugins gang (Ferry always admits gangs whole)",
            "1 ConfigMap (v1) object(s) skipped",
        ]
    );
    assert!(without.replayed.is_empty());
    assert!(without.not_modelled[0].starts_with("preemption and reclaim"));
}

#[test]
fn bad_scheduler_config_maps_are_refused_naming_the_field_and_the_fix() {
    let refused = |conf: &str| {
        read_volcano_queues(&with_conf("{}", conf), "vq.yaml")
            .unwrap_err()
            .to_string()
    };
    let at = "ConfigMap/volcano-scheduler-configmap: data[volcano-scheduler.conf]";
    assert_eq!(
        refused("actions: \"enqueue, allocate, preemt, , backfil\""),
        format!(
            "vq.yaml: {at}.actions: `preemt` is not a Volcano action; did you mean `preempt`?; \
             {at}.actions: has an empty action between commas; remove the extra comma; \
             {at}.actions: `backfil` is not a Volcano action; did you mean `backfill`?"
        )
    );
    assert!(
        refused("actions: [enqueue, allocate]").starts_with(&format!(
            "vq.yaml: {at}.actions: must be one string of comma-separated actions"
        ))
    );
    assert!(refused("tiers: []").contains(".actions: is required"));
    assert!(refused("actions: \"zzz\"").contains("Volcano's: allocate, backfill"));
    assert!(
        refused("actions: [unclosed").starts_with(&format!("vq.yaml: {at}: not valid YAML")),
        "{}",
        refused("actions: [unclosed")
    );
    assert!(refused("just words").contains("must be a mapping with `actions`"));
    assert!(
        refused("actions: allocate\ntiers:\n- plugins: [{weight: 1}]")
            .contains("tiers[0].plugins[0].name: is required")
    );
    // The wrong ConfigMap, and two scheduler ConfigMaps.
    let wrong = with_conf("{}", "actions: allocate")
        .replace("volcano-scheduler.conf:", "volcano-admission.conf:");
    assert_eq!(
        read_volcano_queues(&wrong, "vq.yaml")
            .unwrap_err()
            .to_string(),
        "vq.yaml: ConfigMap/volcano-scheduler-configmap: data: has no \
         `volcano-scheduler.conf` key (its keys: `volcano-admission.conf`); fix: export the \
         scheduler's own ConfigMap with `kubectl get configmap volcano-scheduler-configmap \
         -n volcano-system -o yaml`"
    );
    let one = with_conf("{}", "actions: allocate");
    let two = format!("{one}---\n{}", &one[one.find("apiVersion: v1").unwrap()..]).replacen(
        "name: volcano-scheduler-configmap",
        "name: other",
        1,
    );
    assert_eq!(
        read_volcano_queues(&two, "vq.yaml")
            .unwrap_err()
            .to_string(),
        "vq.yaml: ConfigMap/volcano-scheduler-configmap: a second ConfigMap with \
         `volcano-scheduler.conf` (the first is ConfigMap/other); fix: keep only the one \
         the scheduler reads"
    );
}

/// Every Queue `spec` field of the Volcano release in the fixtures is one this reader knows.
#[test]
fn the_known_fields_are_volcanos() {
    let crd = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(
        "../../../shared/fixtures/k8s/crds/volcano/v1.15.1/scheduling.volcano.sh_queues.yaml",
    );
    let crd: Value = serde_saphyr::from_str(&std::fs::read_to_string(&crd).unwrap()).unwrap();
    let mut fields = std::collections::BTreeSet::new();
    for version in crd["spec"]["versions"].as_array().unwrap() {
        let spec = &version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"];
        fields.extend(spec.as_object().unwrap().keys().cloned());
    }
    let known: std::collections::BTreeSet<String> =
        VOLCANO_QUEUE_FIELDS.iter().map(|f| f.to_string()).collect();
    assert_eq!(fields, known);
}
