use super::*;
use crate::queue::StopPolicy;

/// What a platform team exports today: a v1beta1 setup with CPU and memory beside GPUs, a
/// flavor without node labels, LocalQueues in team namespaces and a namespace object.
const EXPORTED: &str = r#"
apiVersion: v1
kind: Namespace
metadata: {name: vision}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ResourceFlavor
metadata: {name: default-flavor}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ResourceFlavor
metadata: {name: h100}
spec:
  nodeLabels: {gpu.product: H100-80GB}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {name: vision-cq}
spec:
  cohort: research
  namespaceSelector: {}
  queueingStrategy: BestEffortFIFO
  resourceGroups:
  - coveredResources: [cpu, memory, nvidia.com/gpu]
    flavors:
    - name: h100
      resources:
      - {name: cpu, nominalQuota: 640}
      - {name: memory, nominalQuota: 4Ti}
      - {name: nvidia.com/gpu, nominalQuota: "64", borrowingLimit: "32"}
  preemption:
    withinClusterQueue: LowerPriority
    reclaimWithinCohort: Any
  fairSharing: {weight: "2"}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {name: nlp}
spec:
  cohort: research
  resourceGroups:
  - coveredResources: [nvidia.com/gpu]
    flavors:
    - name: default-flavor
      resources:
      - {name: nvidia.com/gpu, nominalQuota: 16, lendingLimit: 8}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata: {name: team-queue, namespace: vision}
spec: {clusterQueue: vision-cq}
"#;

fn problems(text: &str) -> Vec<String> {
    match read_kueue_queues(text, "q.yaml") {
        Ok(q) => panic!("accepted: {q:?}"),
        Err(e) => e.problems().into_iter().map(ToString::to_string).collect(),
    }
}

#[test]
fn an_exported_setup_reads_with_kueues_defaults() {
    let q = read_kueue_queues(EXPORTED, "q.yaml").unwrap();
    let vision = QueueSpec {
        cohort: Some("research".into()),
        quotas: vec![FlavorQuota {
            flavor: "h100".into(),
            nominal: 64,
            borrowing_limit: Some(32),
            lending_limit: None,
        }],
        weight: 2.0,
        stop_policy: StopPolicy::None,
        preemption: Preemption {
            within_queue: WithinQueue::LowerPriority,
            reclaim_within_cohort: ReclaimWithinCohort::Any,
            ..Default::default()
        },
    };
    // No preemption field: Kueue preempts nothing, where a Ferry Queue would.
    let nlp = QueueSpec {
        cohort: Some("research".into()),
        quotas: vec![FlavorQuota {
            flavor: "any".into(),
            nominal: 16,
            borrowing_limit: None,
            lending_limit: Some(8),
        }],
        weight: 1.0,
        stop_policy: StopPolicy::None,
        preemption: Preemption {
            within_queue: WithinQueue::Never,
            reclaim_within_cohort: ReclaimWithinCohort::Never,
            ..Default::default()
        },
    };
    assert_eq!(
        q.cluster_queues,
        [("vision-cq".to_owned(), vision), ("nlp".to_owned(), nlp)]
    );
    assert_eq!(
        q.local_queues,
        [LocalQueue {
            namespace: "vision".into(),
            name: "team-queue".into(),
            cluster_queue: "vision-cq".into()
        }]
    );
    assert_eq!(
        q.not_modelled,
        [
            "ClusterQueue/vision-cq: quotas of cpu, memory (the trace asks for GPUs only)",
            "1 Namespace (v1) object(s) skipped"
        ]
    );
    // Teams find their ClusterQueue by its name, a LocalQueue's name or its namespace.
    assert_eq!(q.cluster_queue_of("NLP"), Ok(Some("nlp")));
    assert_eq!(q.cluster_queue_of("vision"), Ok(Some("vision-cq")));
    assert_eq!(q.cluster_queue_of("team-queue"), Ok(Some("vision-cq")));
    assert_eq!(q.cluster_queue_of("audio"), Ok(None));
}

#[test]
fn a_kubectl_list_in_json_reads_like_the_documents() {
    let yaml: Vec<Value> = serde_saphyr::from_multiple(EXPORTED).unwrap();
    let list = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": yaml});
    let from_list = read_kueue_queues(&list.to_string(), "list.json").unwrap();
    assert_eq!(from_list, read_kueue_queues(EXPORTED, "q.yaml").unwrap());
}

#[test]
fn what_ferry_does_not_model_is_listed() {
    let q = read_kueue_queues(
        r#"
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: a}
spec:
  cohortName: all
  queueingStrategy: StrictFIFO
  admissionChecksStrategy: {admissionChecks: [{name: prov}]}
  flavorFungibility: {whenCanBorrow: TryNextFlavor}
  resourceGroups:
  - coveredResources: [nvidia.com/gpu]
    flavors: [{name: gpu, resources: [{name: nvidia.com/gpu, nominalQuota: 8}]}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: WorkloadPriorityClass
metadata: {name: urgent}
value: 1000
"#,
        "q.yaml",
    )
    .unwrap();
    assert_eq!(q.cluster_queues[0].1.cohort.as_deref(), Some("all"));
    let notes = q.not_modelled.join("\n");
    for expected in [
        "ClusterQueue/a: spec.admissionChecksStrategy",
        "ClusterQueue/a: spec.flavorFungibility",
        "spec.queueingStrategy StrictFIFO",
        "1 WorkloadPriorityClass object(s) skipped",
    ] {
        assert!(
            notes.contains(expected),
            "{expected} missing from:\n{notes}"
        );
    }
}

/// `borrowWithinCohort` is read in Kueue's shape in both versions; a threshold without
/// `LowerPriority` does nothing in Kueue and is dropped; beside `fairSharing` it is noted.
#[test]
fn borrow_within_cohort_is_read_as_the_queues_policy() {
    let cq = |version: &str, preemption: &str, rest: &str| {
        format!(
            "apiVersion: kueue.x-k8s.io/{version}\nkind: ClusterQueue\nmetadata: {{name: a}}\n\
             spec: {{cohort: all, preemption: {preemption}{rest}}}\n"
        )
    };
    let borrow = |q: &KueueQueues| q.cluster_queues[0].1.preemption.borrow_within_cohort;
    let lower = |t: Option<i32>| BorrowWithinCohort {
        policy: BorrowPolicy::LowerPriority,
        max_priority_threshold: t,
    };
    for version in ["v1beta1", "v1beta2"] {
        let text = cq(
            version,
            "{reclaimWithinCohort: Any, borrowWithinCohort: {policy: LowerPriority, \
             maxPriorityThreshold: 100}}",
            "",
        );
        let q = read_kueue_queues(&text, "q.yaml").unwrap();
        assert_eq!(borrow(&q), lower(Some(100)), "{version}");
        assert!(
            q.not_modelled
                .iter()
                .all(|n| !n.contains("borrowWithinCohort")),
            "{:?}",
            q.not_modelled
        );
    }
    let q = read_kueue_queues(
        &cq(
            "v1beta2",
            "{reclaimWithinCohort: LowerPriority, borrowWithinCohort: {policy: LowerPriority}}",
            ", fairSharing: {weight: 2}",
        ),
        "q.yaml",
    )
    .unwrap();
    assert_eq!(borrow(&q), lower(None));
    assert_eq!(
        q.not_modelled,
        [
            "ClusterQueue/a: spec.preemption.borrowWithinCohort beside spec.fairSharing (Kueue \
             allows borrowWithinCohort only with classical preemption, not with fair sharing \
             enabled; Ferry's fair sharing always runs, and it applies borrowWithinCohort as \
             well)"
        ]
    );
    // Absent, or `Never` (with a threshold Kueue ignores): Kueue's default.
    for preemption in [
        "{reclaimWithinCohort: Any}",
        "{borrowWithinCohort: {policy: Never, maxPriorityThreshold: 5}}",
        "{borrowWithinCohort: {maxPriorityThreshold: 5}}",
    ] {
        let q = read_kueue_queues(&cq("v1beta2", preemption, ""), "q.yaml").unwrap();
        assert!(borrow(&q).is_never(), "{preemption}: {:?}", borrow(&q));
        assert!(q.not_modelled.is_empty(), "{:?}", q.not_modelled);
    }
    // What Kueue refuses, and typos, name the field and the fix.
    assert_eq!(
        problems(&cq(
            "v1beta2",
            "{borrowWithinCohort: {policy: LowerPriority}}",
            ""
        )),
        [
            "ClusterQueue/a: spec.preemption.borrowWithinCohort.policy: LowerPriority with \
             reclaimWithinCohort Never (Kueue's default) is refused by Kueue; set \
             reclaimWithinCohort to Any or LowerPriority, or the policy to Never"
        ]
    );
    let p = problems(&cq(
        "v1beta2",
        "{reclaimWithinCohort: Any, borrowWithinCohort: {policy: Lower, maxPriority: 1}}",
        "",
    ));
    assert_eq!(p.len(), 2, "{p:?}");
    assert!(
        p.iter().any(|e| e.starts_with(
            "ClusterQueue/a: spec.preemption.borrowWithinCohort.maxPriority: not a \
             borrowWithinCohort field of Kueue; did you mean `maxPriorityThreshold`?"
        )),
        "{p:?}"
    );
    assert!(
        p.iter()
            .any(|e| e.starts_with("ClusterQueue/a: spec.preemption.borrowWithinCohort.policy:")),
        "{p:?}"
    );
    assert_eq!(
        problems(&cq(
            "v1beta2",
            "{reclaimWithinCohort: Any, borrowWithinCohort: {policy: LowerPriority, \
             maxPriorityThreshold: high}}",
            ""
        )),
        [
            "ClusterQueue/a: spec.preemption.borrowWithinCohort.maxPriorityThreshold: must be a \
             whole priority value, a 32-bit integer such as 100 (got \"high\")"
        ]
    );
}

#[test]
fn a_cohorts_own_quota_is_the_cohorts() {
    let q = read_kueue_queues(
        r#"
apiVersion: kueue.x-k8s.io/v1beta2
kind: Cohort
metadata: {name: all}
spec:
  resourceGroups:
  - coveredResources: [nvidia.com/gpu]
    flavors: [{name: gpu, resources: [{name: nvidia.com/gpu, nominalQuota: 32}]}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: a}
spec: {cohortName: all}
"#,
        "q.yaml",
    )
    .unwrap();
    // No pseudo-queue: the ClusterQueue is the only queue, the GPUs are the Cohort's.
    assert_eq!(q.cluster_queues.len(), 1);
    assert_eq!(q.cluster_queues[0].0, "a");
    assert_eq!(
        q.cohorts,
        [(
            "all".to_owned(),
            CohortSpec {
                parent: None,
                quotas: vec![CohortQuota {
                    flavor: "gpu".into(),
                    nominal: 32,
                    borrowing_limit: None,
                    lending_limit: None,
                }],
                weight: 1.0,
            }
        )]
    );
}

/// A cohort tree as Kueue's documentation draws one: an organisation's root with GPUs of its
/// own, two departments under it, one held to a borrowing limit and lending only part of its
/// subtree, the other with no quota of its own; an unlabelled flavor is Ferry's `any`.
const TREE: &str = r#"
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: default-flavor}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: Cohort
metadata: {name: org}
spec:
  resourceGroups:
  - coveredResources: [cpu, nvidia.com/gpu]
    flavors:
    - name: default-flavor
      resources:
      - {name: cpu, nominalQuota: 64}
      - {name: nvidia.com/gpu, nominalQuota: 8}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: Cohort
metadata: {name: research}
spec:
  parentName: org
  fairSharing: {weight: "2"}
  resourceGroups:
  - coveredResources: [nvidia.com/gpu]
    flavors:
    - name: default-flavor
      resources:
      - {name: nvidia.com/gpu, nominalQuota: 4, borrowingLimit: 2, lendingLimit: 10}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: Cohort
metadata: {name: prod}
spec: {parentName: org, fairSharing: {weight: 500m}}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: nlp}
spec:
  cohortName: research
  resourceGroups:
  - coveredResources: [nvidia.com/gpu]
    flavors: [{name: default-flavor, resources: [{name: nvidia.com/gpu, nominalQuota: 8}]}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: serving}
spec:
  cohortName: prod
  resourceGroups:
  - coveredResources: [nvidia.com/gpu]
    flavors: [{name: default-flavor, resources: [{name: nvidia.com/gpu, nominalQuota: 16}]}]
"#;

#[test]
fn a_cohort_tree_reads_with_parents_and_limits() {
    let q = read_kueue_queues(TREE, "tree.yaml").unwrap();
    let gpus = |nominal, borrowing_limit, lending_limit| CohortQuota {
        flavor: "any".into(),
        nominal,
        borrowing_limit,
        lending_limit,
    };
    assert_eq!(
        q.cohorts,
        [
            (
                "org".to_owned(),
                CohortSpec {
                    parent: None,
                    quotas: vec![gpus(8, None, None)],
                    weight: 1.0,
                }
            ),
            (
                "research".to_owned(),
                CohortSpec {
                    parent: Some("org".into()),
                    // Lending more than its own 4: its queue's GPUs are its subtree's too.
                    quotas: vec![gpus(4, Some(2), Some(10))],
                    // Twice prod's share of org's spare GPUs.
                    weight: 2.0,
                }
            ),
            (
                "prod".to_owned(),
                CohortSpec {
                    parent: Some("org".into()),
                    quotas: vec![],
                    weight: 0.5,
                }
            ),
        ]
    );
    let names: Vec<&str> = q.cluster_queues.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["nlp", "serving"]);
    // The weights are modelled: only the CPU quota is noted.
    assert_eq!(
        q.not_modelled,
        ["Cohort/org: quotas of cpu (the trace asks for GPUs only)"]
    );
}

#[test]
fn a_bad_cohort_tree_is_refused_naming_the_cohort_and_the_fix() {
    let cohort = |name: &str, spec: &str| {
        format!(
            "apiVersion: kueue.x-k8s.io/v1beta2\nkind: Cohort\nmetadata: {{name: {name}}}\n\
             spec: {spec}\n---\n"
        )
    };
    let cq = "apiVersion: kueue.x-k8s.io/v1beta2\nkind: ClusterQueue\nmetadata: {name: a}\n\
              spec: {cohortName: x}\n";
    let gpus = |limits: &str| {
        format!(
            "resourceGroups: [{{coveredResources: [nvidia.com/gpu], flavors: [{{name: f, \
             resources: [{{name: nvidia.com/gpu, nominalQuota: 4, {limits}}}]}}]}}]"
        )
    };
    // A loop, reported once at its first Cohort; one leading into it is not in it.
    let text = [
        cohort("x", "{parentName: org}"),
        cohort("org", "{parentName: lab}"),
        cohort("lab", "{parentName: org}"),
        cq.to_owned(),
    ]
    .concat();
    assert_eq!(
        problems(&text),
        [
            "Cohort/org: spec.parentName: Cohort `org` is its own ancestor (org -> lab -> org); \
             Kueue admits nothing to the queues of such a tree; remove or change one parentName in \
             the loop"
        ]
    );
    assert_eq!(
        problems(&[cohort("x", "{parentName: x}"), cq.to_owned()].concat()),
        [
            "Cohort/x: spec.parentName: Cohort `x` is its own ancestor (x -> x); Kueue admits \
             nothing to the queues of such a tree; remove or change one parentName in the loop"
        ]
    );
    // Limits on a root: Kueue's webhook refuses them; under a parent they are read.
    let at = "Cohort/x: spec.resourceGroups[0].flavors[0].resources[0]";
    assert_eq!(
        problems(
            &[
                cohort(
                    "x",
                    &format!("{{{}}}", gpus("borrowingLimit: 1, lendingLimit: 2"))
                ),
                cq.to_owned()
            ]
            .concat()
        ),
        [
            format!(
                "{at}.borrowingLimit: is only allowed on a Cohort with spec.parentName (Kueue \
                 refuses it on a root); set spec.parentName or remove borrowingLimit"
            ),
            format!(
                "{at}.lendingLimit: is only allowed on a Cohort with spec.parentName (Kueue \
                 refuses it on a root); set spec.parentName or remove lendingLimit"
            ),
        ]
    );
    assert_eq!(
        problems(
            &[
                cohort("x", "{}"),
                cohort("x", "{parentName: root}"),
                cq.to_owned()
            ]
            .concat()
        ),
        ["Cohort/x: metadata.name: Cohort `x` is defined twice; keep one"]
    );
    assert_eq!(
        problems(&[cohort("x", "{parent: org}"), cq.to_owned()].concat()),
        [
            "Cohort/x: spec.parent: not a Cohort field of Kueue v1beta1 or v1beta2; did you \
             mean `parentName`?"
        ]
    );
    assert_eq!(
        problems(&[cohort("x", "{parentName: 7}"), cq.to_owned()].concat()),
        [
            r#"Cohort/x: spec.parentName: must be a cohort's name (got 7); quote a name YAML reads as a boolean or number, e.g. "on""#
        ]
    );
}

/// A Cohort's `fairSharing` is read as a ClusterQueue's, through the same code: a positive
/// quantity, Kueue's 0 refused with the nearest weight Ferry takes, a misspelt field or a
/// weight that is no quantity refused by its path, on either kind alike.
#[test]
fn a_bad_fair_sharing_weight_is_refused_on_a_cohort_as_on_a_cluster_queue() {
    let cq = "apiVersion: kueue.x-k8s.io/v1beta2\nkind: ClusterQueue\nmetadata: {name: a}\n\
              spec: {cohortName: x}\n";
    let cohort = |fair_sharing: &str| {
        format!(
            "apiVersion: kueue.x-k8s.io/v1beta2\nkind: Cohort\nmetadata: {{name: x}}\n\
             spec: {{fairSharing: {fair_sharing}}}\n---\n{cq}"
        )
    };
    let weights = |fair_sharing: &str| {
        read_kueue_queues(&cohort(fair_sharing), "q.yaml")
            .map(|q| (q.cohorts[0].1.weight, q.not_modelled))
    };
    for (fair_sharing, weight) in [
        ("{weight: 3}", 3.0),
        ("{weight: \"1.5\"}", 1.5),
        ("{weight: 250m}", 0.25),
        ("{}", 1.0),
        ("{weight: null}", 1.0),
    ] {
        let (got, notes) = weights(fair_sharing).unwrap_or_else(|e| panic!("{fair_sharing}: {e}"));
        assert_eq!(got, weight, "{fair_sharing}");
        assert!(notes.is_empty(), "{fair_sharing}: {notes:?}");
    }
    let refused = |fair_sharing: &str| {
        let on_cohort = problems(&cohort(fair_sharing));
        let on_queue = problems(&format!(
            "apiVersion: kueue.x-k8s.io/v1beta2\nkind: ClusterQueue\nmetadata: {{name: x}}\n\
             spec: {{fairSharing: {fair_sharing}}}\n"
        ));
        // The same problem, at the same path of either kind.
        let at_queue: Vec<String> = on_queue
            .iter()
            .map(|p| p.replacen("ClusterQueue/x", "Cohort/x", 1))
            .collect();
        assert_eq!(on_cohort, at_queue, "{fair_sharing}");
        on_cohort
    };
    for zero in ["{weight: 0}", "{weight: \"0\"}", "{weight: -2}"] {
        let p = refused(zero);
        assert_eq!(p.len(), 1, "{p:?}");
        assert!(
            p[0].starts_with("Cohort/x: spec.fairSharing.weight: must be a positive quantity")
                && p[0].ends_with("write e.g. \"10m\" for almost none"),
            "{p:?}"
        );
    }
    assert!(refused("{weight: heavy}")[0].contains("(got \"heavy\")"));
    assert_eq!(
        refused("{wieght: 2}"),
        [
            "Cohort/x: spec.fairSharing.wieght: not a fairSharing field of Kueue; did you mean \
             `weight`?"
        ]
    );
    assert_eq!(
        refused("2"),
        [r#"Cohort/x: spec.fairSharing: must be a mapping such as {weight: "2"} (got 2)"#]
    );
}

/// Every Cohort `spec` field of the Kueue release in the fixtures (both served versions) is
/// one this reader knows.
#[test]
fn the_known_cohort_fields_are_kueues() {
    let crd = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/fixtures/k8s/crds/kueue/v0.19.2/kueue.x-k8s.io_cohorts.yaml");
    let crd: Value = serde_saphyr::from_str(&std::fs::read_to_string(&crd).unwrap()).unwrap();
    let mut fields = BTreeSet::new();
    for version in crd["spec"]["versions"].as_array().unwrap() {
        let spec = &version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"];
        fields.extend(spec.as_object().unwrap().keys().cloned());
        // The quota fields this reader takes are the Cohort's too.
        let resource = &spec["resourceGroups"]["items"]["properties"]["flavors"]["items"]["properties"]
            ["resources"]["items"]["properties"];
        for field in ["nominalQuota", "borrowingLimit", "lendingLimit", "name"] {
            assert!(resource.get(field).is_some(), "{field}");
        }
        // As a ClusterQueue's: the weight alone.
        let fair: Vec<&String> = spec["fairSharing"]["properties"]
            .as_object()
            .unwrap()
            .keys()
            .collect();
        assert_eq!(fair, FAIR_SHARING_FIELDS);
    }
    let known: BTreeSet<String> = COHORT_FIELDS.iter().map(|f| f.to_string()).collect();
    assert_eq!(fields, known);
}

#[test]
fn bad_objects_are_refused_naming_the_field_and_the_fix() {
    let cq = |spec: &str| {
        format!(
            "apiVersion: kueue.x-k8s.io/v1beta2\nkind: ClusterQueue\nmetadata: {{name: a}}\nspec: {spec}\n"
        )
    };
    let gpu = |res: &str| {
        cq(&format!(
            "{{resourceGroups: [{{coveredResources: [nvidia.com/gpu], flavors: [{{name: f, \
             resources: [{{name: nvidia.com/gpu, {res}}}]}}]}}]}}"
        ))
    };
    assert_eq!(
        problems(&cq("{cohortname: x}")),
        [
            "ClusterQueue/a: spec.cohortname: not a ClusterQueue field of Kueue v1beta1 or v1beta2; did you mean `cohortName`?"
        ]
    );
    assert_eq!(
        problems(&gpu("nominalQuota: 500m")),
        [
            r#"ClusterQueue/a: spec.resourceGroups[0].flavors[0].resources[0].nominalQuota: must be a whole number of GPUs, 0 or more, such as 8 or "8" (got "500m")"#
        ]
    );
    assert_eq!(
        problems(&gpu("nominalQuota: 4, lendingLimit: 6")),
        [
            "ClusterQueue/a: spec.resourceGroups[0].flavors[0].resources[0].lendingLimit: must not exceed nominalQuota (4) (got 6)"
        ]
    );
    assert_eq!(
        problems(&gpu("borrowingLimit: 4")),
        [
            "ClusterQueue/a: spec.resourceGroups[0].flavors[0].resources[0].nominalQuota: is required"
        ]
    );
    assert!(problems(&cq("{fairSharing: {weight: \"0\"}}"))[0].contains("write e.g. \"10m\""));
    assert_eq!(
        problems(&cq("{preemption: {withinClusterQueue: Sometimes}}")),
        [
            r#"ClusterQueue/a: spec.preemption.withinClusterQueue: "Sometimes": unknown variant `Sometimes`, expected one of `LowerPriority`, `LowerOrNewerEqualPriority`, `Never`"#
        ]
    );
    assert!(
        problems(&cq("{stopPolicy: Drain}"))[0]
            .starts_with(r#"ClusterQueue/a: spec.stopPolicy: "Drain": unknown variant"#)
    );
    assert_eq!(
        problems(&cq("{cohort: x, cohortName: z}")),
        ["ClusterQueue/a: spec.cohortName: names cohort `z` but spec.cohort names `x`; keep one"]
    );
    // YAML reads a bare `y` as true.
    assert_eq!(
        problems(&cq("{cohort: y}")),
        [
            r#"ClusterQueue/a: spec.cohort: must be a cohort's name (got true); quote a name YAML reads as a boolean or number, e.g. "on""#
        ]
    );
    assert_eq!(
        problems(&cq("{}").replace("v1beta2", "v1alpha1")),
        [
            "ClusterQueue/a: apiVersion: kueue.x-k8s.io/v1alpha1 is not read; write kueue.x-k8s.io/v1beta2 or v1beta1"
        ]
    );
    assert_eq!(
        problems(&format!(
            "{}---\napiVersion: kueue.x-k8s.io/v1beta2\nkind: LocalQueue\nmetadata: {{name: l, namespace: t}}\nspec: {{clusterQueue: b}}\n",
            cq("{}")
        )),
        [
            "LocalQueue/l: spec.clusterQueue: ClusterQueue `b` is not in the file; add it, or fix the name (ClusterQueues: a)"
        ]
    );
    assert_eq!(
        problems("apiVersion: v1\nkind: Namespace\nmetadata: {name: x}\n"),
        [
            ": no kueue.x-k8s.io ClusterQueue found; the file needs at least one"
                .trim_start_matches(": ")
        ]
    );
}

/// Every ClusterQueue `spec` field of the Kueue release in the fixtures (both served
/// versions) is one this reader knows: a new one would be refused as a typo.
#[test]
fn the_known_fields_are_kueues() {
    let crd = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/fixtures/k8s/crds/kueue/v0.19.2/kueue.x-k8s.io_clusterqueues.yaml");
    let crd: Value = serde_saphyr::from_str(&std::fs::read_to_string(&crd).unwrap()).unwrap();
    let mut fields = BTreeSet::new();
    for version in crd["spec"]["versions"].as_array().unwrap() {
        let spec = &version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"];
        fields.extend(spec.as_object().unwrap().keys().cloned());
        let fair: Vec<&String> = spec["fairSharing"]["properties"]
            .as_object()
            .unwrap()
            .keys()
            .collect();
        assert_eq!(fair, FAIR_SHARING_FIELDS);
    }
    let known: BTreeSet<String> = CLUSTER_QUEUE_FIELDS.iter().map(|f| f.to_string()).collect();
    assert_eq!(fields, known);
}
