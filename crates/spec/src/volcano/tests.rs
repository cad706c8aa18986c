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
    assert_eq!(q.cohort_specs(160), [], "no tree, no cohort specs");
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
        parent: None,
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
    // A parent that is no name is refused too, not ignored.
    assert_eq!(
        queue("{parent: 7}"),
        "vq.yaml: Queue/q: spec.parent: must be its parent queue's name, or root (got 7); quote \
         a name YAML reads as a number or a boolean"
    );
    for root in ["root", "\"\""] {
        let text = format!(
            "apiVersion: scheduling.volcano.sh/v1beta1\nkind: Queue\nmetadata: {{name: q}}\n\
             spec: {{parent: {root}}}\n"
        );
        let read = read_volcano_queues(&text, "vq.yaml").unwrap();
        assert_eq!(read.queues[0].parent, None, "{root}");
    }
}

/// `Queue` objects of `(name, spec)`, one YAML document each.
fn queues(specs: &[(&str, &str)]) -> String {
    (specs.iter())
        .map(|(name, spec)| {
            format!(
                "apiVersion: scheduling.volcano.sh/v1beta1\nkind: Queue\nmetadata: {{name: \
                 {name}}}\nspec: {spec}\n"
            )
        })
        .collect::<Vec<_>>()
        .join("---\n")
}

/// Quotas of `any` GPUs: nominal, borrowing limit, lending limit.
fn any(nominal: i32, borrowing_limit: Option<i32>, lending_limit: Option<i32>) -> FlavorQuota {
    FlavorQuota {
        flavor: "any".into(),
        nominal,
        borrowing_limit,
        lending_limit,
    }
}

/// A tree under the root queue (exported too, as Volcano creates it): `research` deserves 96
/// GPUs, 80 of them its leaf queues' (16 its own, which they share), holds at most 128 and
/// keeps 16; `infra` deserves nothing, so it is owed a weighted share of what the root's
/// children do not deserve (half of 64, beside `default`), which its leaves divide by weight
/// up to their capabilities. Leaves are queues in their parent's cohort, parents cohorts under
/// theirs.
#[test]
fn a_two_level_tree_reads_as_cohorts_and_leaf_queues() {
    let text = queues(&[
        ("root", "{weight: 1, reclaimable: false}"),
        (
            "research",
            "{parent: root, weight: 2, deserved: {nvidia.com/gpu: 96}, capability: \
             {nvidia.com/gpu: 128}, guarantee: {resource: {nvidia.com/gpu: 16}}}",
        ),
        (
            "nlp",
            "{parent: research, deserved: {nvidia.com/gpu: 48}, capability: {nvidia.com/gpu: \
             96}, guarantee: {resource: {nvidia.com/gpu: 8}}}",
        ),
        (
            "vision",
            "{parent: research, deserved: {nvidia.com/gpu: 32}}",
        ),
        ("infra", "{}"),
        ("ci", "{parent: infra, weight: 3}"),
        (
            "batch",
            "{parent: infra, weight: 1, capability: {nvidia.com/gpu: 6}}",
        ),
        ("default", "{parent: root}"),
    ]);
    let q = read_volcano_queues(&text, "vq.yaml").unwrap();
    assert!(
        q.queues.iter().all(|q| q.name != "root"),
        "the root is no queue"
    );
    let specs = q.queue_specs(160);
    let got: Vec<(&str, Option<&str>, &FlavorQuota)> = (specs.iter())
        .map(|(n, s)| (n.as_str(), s.cohort.as_deref(), &s.quotas[0]))
        .collect();
    assert_eq!(
        got,
        [
            // 48 owed, 8 kept; it may hold 96: 48 more, which research's pool can lend.
            ("nlp", Some("research"), &any(48, Some(48), Some(40))),
            ("vision", Some("research"), &any(32, None, None)),
            // infra's 32 by weight 3 to 1, batch capped at 6.
            ("ci", Some("infra"), &any(26, None, None)),
            ("batch", Some("infra"), &any(6, Some(0), None)),
            ("default", Some("root"), &any(32, None, None)),
        ]
    );
    assert_eq!(specs[0].1.weight, 1.0);
    assert_eq!(
        q.cohort_specs(160),
        [
            (
                "research".to_owned(),
                CohortSpec {
                    parent: Some("root".into()),
                    // 16 of its own; it holds at most 128 (32 borrowed beyond its 96) and
                    // lends all but the 16 its subtree keeps.
                    quotas: vec![CohortQuota {
                        flavor: "any".into(),
                        nominal: 16,
                        borrowing_limit: Some(32),
                        lending_limit: Some(80),
                    }],
                    weight: 2.0,
                }
            ),
            (
                "infra".to_owned(),
                CohortSpec {
                    parent: Some("root".into()),
                    quotas: vec![CohortQuota {
                        flavor: "any".into(),
                        nominal: 0,
                        borrowing_limit: None,
                        lending_limit: None,
                    }],
                    weight: 1.0,
                }
            ),
        ]
    );
    // Jobs go to leaves only: a parent queue, or the root, is refused with the leaves to use.
    assert_eq!(q.queue_of("NLP"), Ok(Some("nlp")));
    assert_eq!(q.queue_of("nobody"), Ok(None));
    assert_eq!(
        q.queue_of("Research"),
        Err(
            "Queue/research is a parent queue (Queue/nlp and Queue/vision name it in \
             spec.parent) and Volcano runs jobs only in leaf queues; fix: rename the team in \
             the trace to a leaf queue under it (nlp, vision)"
                .into()
        )
    );
    assert_eq!(
        q.queue_of("root"),
        Err(
            "Queue/root is the top of Volcano's queue tree and runs no job; fix: rename the \
             team in the trace to a leaf queue (batch, ci, default, nlp, vision)"
                .into()
        )
    );
    // The root's `reclaimable: false` (as Volcano creates it) says nothing of a queue.
    assert_eq!(
        q.not_modelled,
        [
            "preemption and reclaim (volcano-scheduler.conf actions, off by default) are replayed \
          off: no queue preempts"
        ]
    );
}

/// A file whose queues are all under the root reads as before trees: one cohort, no cohort
/// specs, the same shares; so does a tree of one leaf and no GPUs of a parent's own (nobody to
/// borrow from), while one whose parent has GPUs of its own is a tree.
#[test]
fn flat_files_and_a_lone_leaf_read_as_before() {
    let flat = queues(&[
        ("a", "{parent: root, deserved: {nvidia.com/gpu: 8}}"),
        ("b", "{weight: 3, capability: {nvidia.com/gpu: 100}}"),
    ]);
    let read = read_volcano_queues(&flat, "vq.yaml").unwrap();
    assert_eq!(read.cohort_specs(40), []);
    let cohort = Some(VOLCANO_COHORT.to_owned());
    assert_eq!(
        read.queue_specs(40)
            .into_iter()
            .map(|(n, s)| (n, s.cohort, s.quotas[0].clone()))
            .collect::<Vec<_>>(),
        [
            ("a".to_owned(), cohort.clone(), any(8, None, None)),
            // Owed the 32 no queue deserves; may hold 100, but a lends only 8.
            ("b".to_owned(), cohort, any(32, Some(8), None)),
        ]
    );
    let lone = |org_gpus: u32| {
        let text = queues(&[
            (
                "org",
                &format!("{{deserved: {{nvidia.com/gpu: {org_gpus}}}}}"),
            ),
            ("a", "{parent: org, deserved: {nvidia.com/gpu: 8}}"),
        ]);
        read_volcano_queues(&text, "vq.yaml").unwrap()
    };
    let read = lone(8);
    assert_eq!(read.cohort_specs(16), []);
    assert_eq!(read.queue_specs(16)[0].1.cohort, None);
    let read = lone(12);
    assert_eq!(read.cohort_specs(16)[0].1.quotas[0].nominal, 4);
    assert_eq!(read.queue_specs(16)[0].1.cohort.as_deref(), Some("org"));
}

/// What Volcano refuses of a tree is refused, naming the queue, the field and the fix.
#[test]
fn bad_trees_are_refused_naming_the_field_and_the_fix() {
    let refused = |specs: &[(&str, &str)]| {
        read_volcano_queues(&queues(specs), "vq.yaml")
            .unwrap_err()
            .to_string()
    };
    assert_eq!(
        refused(&[("q", "{parent: org}")]),
        "vq.yaml: Queue/q: spec.parent: names queue `org`, which no Queue of the file defines \
         (Volcano refuses a queue whose parent does not exist); fix: add Queue `org`, correct \
         the name, or write root"
    );
    let loop_of = |path: &str| {
        format!(
            "vq.yaml: Queue/a: spec.parent: Queue `a` is its own ancestor ({path}); Volcano's \
             capacity plugin schedules nothing while the tree has a loop; fix: remove or change \
             one spec.parent in the loop"
        )
    };
    assert_eq!(
        refused(&[
            ("a", "{parent: b}"),
            ("b", "{parent: a}"),
            ("c", "{parent: b}")
        ]),
        loop_of("a -> b -> a")
    );
    assert_eq!(refused(&[("a", "{parent: a}")]), loop_of("a -> a"));
    assert_eq!(
        refused(&[("a", "{}"), ("a", "{}")]),
        "vq.yaml: Queue/a: metadata.name: Queue `a` is defined twice; keep one"
    );
    let gpus = |n: u32| format!("{{nvidia.com/gpu: {n}}}");
    assert_eq!(
        refused(&[
            ("org", &format!("{{deserved: {}}}", gpus(8))),
            ("a", &format!("{{parent: org, deserved: {}}}", gpus(6))),
            ("b", &format!("{{parent: org, deserved: {}}}", gpus(4))),
            ("c", "{parent: org}"),
        ]),
        "vq.yaml: Queue/org: spec.deserved: 8 GPUs, fewer than what its child queues deserve \
         together (a 6 + b 4 = 10), which Volcano's webhook refuses; fix: raise it to at least \
         10 GPUs, or lower theirs"
    );
    assert!(
        refused(&[
            ("org", "{}"),
            ("a", &format!("{{parent: org, deserved: {}}}", gpus(6))),
        ])
        .starts_with("vq.yaml: Queue/org: spec.deserved: is unset, less than what its child")
    );
    assert_eq!(
        refused(&[
            (
                "org",
                &format!(
                    "{{deserved: {}, guarantee: {{resource: {}}}}}",
                    gpus(8),
                    gpus(2)
                ),
            ),
            (
                "a",
                &format!(
                    "{{parent: org, deserved: {}, guarantee: {{resource: {}}}}}",
                    gpus(6),
                    gpus(3)
                ),
            ),
        ]),
        "vq.yaml: Queue/org: spec.guarantee.resource: 2 GPUs, fewer than what its child queues \
         are guaranteed together (a 3 = 3), which Volcano's webhook refuses; fix: raise it to \
         at least 3 GPUs, or lower theirs"
    );
    // The nearest ancestor with a capability bounds its descendants'.
    assert_eq!(
        refused(&[
            ("org", &format!("{{capability: {}}}", gpus(16))),
            ("team", "{parent: org}"),
            ("a", &format!("{{parent: team, capability: {}}}", gpus(24))),
            ("b", "{parent: team}"),
        ]),
        "vq.yaml: Queue/a: spec.capability: 24 GPUs, more than its ancestor queue `org` may \
         hold (16); Volcano's webhook refuses it; fix: lower it to at most 16"
    );
    assert_eq!(
        refused(&[("root", "{weight: 1}")]),
        "vq.yaml: only the root queue found (Volcano runs no job in it); the file needs at least \
         one other scheduling.volcano.sh Queue"
    );
    assert_eq!(
        refused(&[("root", "{parent: org}"), ("org", "{}")]),
        "vq.yaml: Queue/root: spec.parent: the root queue is the top of the tree and has no \
         parent (got `org`); remove spec.parent"
    );
}

/// A tree replayed though the scheduler's configuration leaves trees off is said, and the
/// `capacity` plugin's option that turns them on is not listed as not modelled.
#[test]
fn a_tree_without_enable_hierarchy_is_said() {
    let tree = "{}\n---\napiVersion: scheduling.volcano.sh/v1beta1\nkind: Queue\n\
                metadata: {name: b}\nspec: {parent: a}\n---\napiVersion: \
                scheduling.volcano.sh/v1beta1\nkind: Queue\nmetadata: {name: c}\nspec: \
                {parent: a}";
    let conf = |capacity: &str| {
        format!(
            "actions: \"enqueue, allocate, reclaim\"\ntiers:\n- plugins:\n  - name: capacity\n{capacity}"
        )
    };
    let off = read_volcano_queues(&with_conf(tree, &conf("")), "vq.yaml").unwrap();
    assert!(
        off.not_modelled[0].starts_with("volcano-scheduler.conf leaves queue trees off"),
        "{:?}",
        off.not_modelled
    );
    let on = read_volcano_queues(
        &with_conf(tree, &conf("    enableHierarchy: true\n")),
        "vq.yaml",
    )
    .unwrap();
    assert_eq!(
        on.not_modelled,
        [
            "volcano-scheduler.conf: plugins capacity (the deserved, capability and guarantee read \
          from the Queues)"
        ]
    );
    assert_eq!(on.cohort_specs(8).len(), 1);
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
