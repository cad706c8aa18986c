use super::*;
use crate::train_job::EngineKind;

const HELLO: &str = r#"
apiVersion: ferry.dev/v1alpha1
kind: TrainJob
metadata: {name: hello}
spec:
  engine: command
  command: ["python3", "rank.py"]
  resources: {nodes: 2, procsPerNode: 2, gpusPerNode: 0}
  onFailure: {maxRestarts: 2}
"#;

fn problems(text: &str) -> Vec<String> {
    match parse_documents(text, "job.yaml") {
        Ok(r) => panic!("expected an error, parsed {r:?}"),
        Err(e) => e.problems().into_iter().map(ToString::to_string).collect(),
    }
}

#[test]
fn the_hello_gang_job_parses_with_defaults() {
    let docs = parse_documents(HELLO, "hello.yaml").unwrap();
    let Resource::TrainJob(job) = &docs[0] else {
        panic!("not a TrainJob")
    };
    assert_eq!(job.metadata.namespace, "default");
    assert_eq!(job.spec.engine, EngineKind::Command);
    assert_eq!(job.spec.resources.world_size(), 4);
    assert_eq!(job.spec.resources.total_gpus(), 0);
    assert_eq!(job.spec.on_failure.max_restarts, 2);
    assert_eq!(job.spec.on_failure.grace_seconds, 30.0);
}

#[test]
fn json_and_yaml_give_the_same_resource() {
    let yaml = parse_documents(HELLO, "a.yaml").unwrap();
    let json = serde_json::to_string(&yaml[0]).unwrap();
    let again = parse_documents(&json, "a.json").unwrap();
    assert_eq!(yaml, again);
}

#[test]
fn several_documents_parse_in_order() {
    let text = format!(
        "{HELLO}\n---\napiVersion: ferry.dev/v1alpha1\nkind: Queue\nmetadata: {{name: team-a}}\nspec:\n  quotas: [{{flavor: H100-80GB, nominal: 8}}]\n"
    );
    let docs = parse_documents(&text, "all.yaml").unwrap();
    assert_eq!(docs.len(), 2);
    assert_eq!(docs[1].kind(), ResourceKind::Queue);
}

/// A document in YAML's flow style starts with `{` as JSON does, and is read as YAML; broken
/// JSON still gets the JSON parser's message.
#[test]
fn flow_style_yaml_is_yaml_and_broken_json_is_json() {
    let flow = "{apiVersion: ferry.dev/v1alpha1, kind: Queue, metadata: {name: nlp}}";
    let docs = parse_documents(flow, "queue.yaml").unwrap();
    assert_eq!(docs[0].metadata().name, "nlp");
    let err = parse_documents(r#"{"kind": "Queue", "metadata": "#, "queue.json").unwrap_err();
    assert!(
        err.to_string().starts_with("queue.json: not valid JSON"),
        "{err}"
    );
}

#[test]
fn malformed_yaml_is_a_syntax_error_with_a_location() {
    let err = parse_documents("kind: TrainJob\nspec: [unclosed\n", "bad.yaml").unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, SpecError::Syntax { .. }), "{msg}");
    assert!(msg.starts_with("bad.yaml: not valid YAML"), "{msg}");
    assert!(!msg.contains('\n'), "one line: {msg}");
}

#[test]
fn negative_gpus_name_the_field_and_the_fix() {
    let p = problems(&HELLO.replace("gpusPerNode: 0", "gpusPerNode: -1"));
    assert_eq!(
        p,
        ["spec.resources.gpusPerNode: must be 0 or more (got -1)"]
    );
}

#[test]
fn a_split_slowdown_out_of_range_or_beside_a_required_rack_is_refused() {
    let with =
        |extra: &str| HELLO.replace("gpusPerNode: 0}", &format!("gpusPerNode: 0, {extra}}}"));
    let ok = parse_documents(&with("splitSlowdownPct: 30"), "job.yaml").unwrap();
    let Resource::TrainJob(job) = &ok[0] else {
        panic!("{ok:?}")
    };
    assert_eq!(job.spec.resources.split_slowdown_pct, Some(30));
    assert_eq!(
        problems(&with("splitSlowdownPct: 1001")),
        [
            "spec.resources.splitSlowdownPct: must be 0 to 1000 (percent longer run time split \
          across racks; got 1001)"
        ]
    );
    assert_eq!(
        problems(&with("splitSlowdownPct: 20, topology: rack")),
        [
            "spec.resources.splitSlowdownPct: has no effect with topology: rack (the gang always \
          waits for one); drop one of them"
        ]
    );
}

#[test]
fn bad_label_keys_and_values_name_the_label() {
    let text = HELLO.replace(
        "metadata: {name: hello}",
        "metadata: {name: hello, labels: {team: nlp, bad key: x, tier: a b}}",
    );
    assert_eq!(
        problems(&text),
        [
            "metadata.labels[\"bad key\"]: invalid key: its name must be letters, digits, '-', \
             '_' and '.', starting and ending with a letter or digit (got \"bad key\")",
            "metadata.labels[\"tier\"]: invalid value \"a b\": must be letters, digits, '-', \
             '_' and '.', starting and ending with a letter or digit (got \"a b\")",
        ]
    );
    let ok = HELLO.replace(
        "metadata: {name: hello}",
        "metadata: {name: hello, labels: {ferry.dev/sweep: lr-3, draft: ''}}",
    );
    assert!(parse_documents(&ok, "job.yaml").is_ok());
}

#[test]
fn unknown_fields_suggest_the_closest_name() {
    let p = problems(&HELLO.replace("gpusPerNode: 0", "gpusPerNod: 0"));
    assert_eq!(
        p,
        ["spec.resources.gpusPerNod: unknown field; did you mean `gpusPerNode`?"]
    );
    let p = problems(&HELLO.replace("onFailure", "onFailur"));
    assert_eq!(
        p,
        ["spec.onFailur: unknown field; did you mean `onFailure`?"]
    );
}

#[test]
fn unknown_engine_lists_the_engines() {
    let p = problems(&HELLO.replace("engine: command", "engine: comand"));
    assert_eq!(p.len(), 1, "{p:?}");
    assert!(
        p[0].starts_with("spec.engine: must be one of auto, builtin,"),
        "{}",
        p[0]
    );
    assert!(p[0].ends_with("did you mean `command`?"), "{}", p[0]);
}

#[test]
fn every_problem_is_reported_at_once() {
    let text = HELLO
        .replace("gpusPerNode: 0", "gpusPerNode: -1, nodez: 3")
        .replace("maxRestarts: 2", "maxRestarts: -2")
        .replace("name: hello", "name: Hello_World");
    let p = problems(&text);
    assert!(
        p.contains(&"spec.resources.nodez: unknown field; did you mean `nodes`?".to_owned()),
        "{p:?}"
    );
    assert!(
        p.contains(&"spec.resources.gpusPerNode: must be 0 or more (got -1)".to_owned()),
        "{p:?}"
    );
    assert!(
        p.contains(&"spec.onFailure.maxRestarts: must be 0 or more (got -2)".to_owned()),
        "{p:?}"
    );
    assert!(
        p.iter()
            .any(|m| m.starts_with("metadata.name: must be lowercase")),
        "{p:?}"
    );
    assert_eq!(p.len(), 4, "{p:?}");
}

#[test]
fn wrong_types_say_what_was_expected() {
    let p = problems(&HELLO.replace("nodes: 2", "nodes: two"));
    assert_eq!(
        p,
        ["spec.resources.nodes: must be a whole number (got string \"two\")"]
    );
}

#[test]
fn a_command_job_needs_a_command() {
    let p = problems(&HELLO.replace("  command: [\"python3\", \"rank.py\"]\n", ""));
    assert_eq!(p.len(), 1);
    assert!(
        p[0].starts_with("spec.command: is required for engine: command"),
        "{}",
        p[0]
    );
}

#[test]
fn other_engines_need_a_model() {
    let p = problems(
        "apiVersion: ferry.dev/v1alpha1\nkind: TrainJob\nmetadata: {name: a}\nspec: {engine: builtin}\n",
    );
    assert_eq!(p.len(), 1);
    assert!(
        p[0].starts_with("spec.model: is required for engine: builtin"),
        "{}",
        p[0]
    );
}

#[test]
fn api_version_and_kind_are_checked() {
    let p = problems(&HELLO.replace("ferry.dev/v1alpha1", "ferry.dev/v2"));
    assert!(
        p[0].starts_with("apiVersion: must be ferry.dev/v1alpha1"),
        "{p:?}"
    );
    let p = problems(&HELLO.replace("kind: TrainJob", "kind: TrainJobs"));
    assert!(p[0].contains("did you mean `TrainJob`?"), "{p:?}");
}

#[test]
fn parallelism_auto_is_the_empty_layout() {
    let text = HELLO.replace("  onFailure", "  parallelism: auto\n  onFailure");
    let docs = parse_documents(&text, "a.yaml").unwrap();
    let Resource::TrainJob(job) = &docs[0] else {
        panic!()
    };
    assert!(job.spec.parallelism.is_auto());
}

#[test]
fn status_in_input_is_ignored() {
    let text = format!("{HELLO}status: {{phase: Succeeded}}\n");
    let docs = parse_documents(&text, "a.yaml").unwrap();
    let Resource::TrainJob(job) = &docs[0] else {
        panic!()
    };
    assert!(job.status.is_none());
}

#[test]
fn queues_check_lending_against_nominal() {
    let text = "apiVersion: ferry.dev/v1alpha1\nkind: Queue\nmetadata: {name: team-a}\nspec:\n  quotas: [{flavor: A100, nominal: 4, lendingLimit: 8}]\n";
    let p = problems(text);
    assert_eq!(
        p,
        ["spec.quotas[0].lendingLimit: must not exceed nominal (4) (got 8)"]
    );
}

#[test]
fn empty_input_says_so() {
    let p = problems("# nothing here\n");
    assert!(p[0].contains("no resource found"), "{p:?}");
}

/// An unknown field whose name has dots is one field: named quoted, and dropped alone before
/// the typed checks (read as a path, `spec.resources` would have dropped the job's resources).
#[test]
fn an_unknown_field_with_dots_is_one_field() {
    let text = format!("spec.resources: {{gpus: 1}}\n{HELLO}");
    assert_eq!(
        problems(&text),
        [r#"["spec.resources"]: unknown field; did you mean `spec`?"#]
    );
    // Without the checks above, `apiVersion` would be reported missing twice.
    let p = problems(&HELLO.replace("apiVersion: ferry.dev/v1alpha1\n", ""));
    assert_eq!(p.len(), 1, "{p:?}");
    assert!(p[0].starts_with("apiVersion: is required; use"), "{p:?}");
}

/// `spec.stopPolicy` takes Kueue's values; another is refused, naming the field and the
/// values allowed.
#[test]
fn a_queue_stop_policy_takes_kueues_values() {
    let queue = |policy: &str| {
        format!(
            "apiVersion: ferry.dev/v1alpha1\nkind: Queue\nmetadata: {{name: team-a}}\nspec: {{stopPolicy: {policy}}}\n"
        )
    };
    let docs = parse_documents(&queue("HoldAndDrain"), "queue.yaml").unwrap();
    let Resource::Queue(q) = &docs[0] else {
        panic!("not a Queue")
    };
    assert_eq!(q.spec.stop_policy, crate::StopPolicy::HoldAndDrain);
    let p = problems(&queue("Drain"));
    assert_eq!(
        p,
        ["spec.stopPolicy: must be one of None, Hold, HoldAndDrain (got \"Drain\")"],
    );
    let p = problems(&queue("hold"));
    assert_eq!(p.len(), 1, "{p:?}");
    assert!(p[0].ends_with("did you mean `Hold`?"), "{p:?}");
}

/// A Queue document whose `spec.preemption` is `preemption` (YAML flow mapping).
fn queue_with_preemption(preemption: &str) -> String {
    format!(
        "apiVersion: ferry.dev/v1alpha1\nkind: Queue\nmetadata: {{name: team-a}}\nspec: {{preemption: {preemption}}}\n"
    )
}

/// The preemption policy of the one Queue in `text`.
fn preemption_of(text: &str) -> crate::Preemption {
    match &parse_documents(text, "queue.yaml").unwrap()[0] {
        Resource::Queue(q) => q.spec.preemption,
        other => panic!("not a Queue: {other:?}"),
    }
}

/// `spec.preemption` takes Kueue's values; a wrong one names the field and the values, and an
/// unknown key suggests the right one.
#[test]
fn a_queue_preemption_policy_takes_kueues_values() {
    let queue = queue_with_preemption;
    assert_eq!(
        preemption_of(&queue(
            "{withinQueue: LowerOrNewerEqualPriority, reclaimWithinCohort: Never}"
        )),
        crate::Preemption {
            within_queue: crate::WithinQueue::LowerOrNewerEqualPriority,
            reclaim_within_cohort: crate::ReclaimWithinCohort::Never,
            ..Default::default()
        }
    );
    // Left out, each keeps Ferry's default, and a default policy is not printed back.
    assert_eq!(
        preemption_of(&queue("{withinQueue: Never}")).reclaim_within_cohort,
        crate::ReclaimWithinCohort::Any
    );
    let docs = parse_documents(&queue("{}"), "queue.yaml").unwrap();
    assert!(docs[0].to_value()["spec"].get("preemption").is_none());
    assert_eq!(
        problems(&queue("{reclaimWithinCohort: Lower}")),
        [
            "spec.preemption.reclaimWithinCohort: must be one of Any, LowerPriority, Never (got \"Lower\"); did you mean `LowerPriority`?"
        ],
    );
    let p = problems(&queue("{withinClusterQueue: Never}"));
    assert_eq!(p.len(), 1, "{p:?}");
    assert!(p[0].ends_with("did you mean `withinQueue`?"), "{p:?}");
}

/// `spec.preemption.borrowWithinCohort` takes Kueue's shape, is left out when `Never`, and
/// is held to Kueue's rules: a threshold needs `LowerPriority`, which needs reclaiming.
#[test]
fn a_queue_may_preempt_to_borrow_as_kueue_allows() {
    let queue = queue_with_preemption;
    let text = queue("{borrowWithinCohort: {policy: LowerPriority, maxPriorityThreshold: -5}}");
    assert_eq!(
        preemption_of(&text).borrow_within_cohort,
        crate::BorrowWithinCohort {
            policy: crate::BorrowPolicy::LowerPriority,
            max_priority_threshold: Some(-5),
        }
    );
    let docs = parse_documents(&text, "queue.yaml").unwrap();
    assert_eq!(
        docs[0].to_value()["spec"]["preemption"],
        serde_json::json!({
            "withinQueue": "LowerPriority",
            "reclaimWithinCohort": "Any",
            "borrowWithinCohort": {"policy": "LowerPriority", "maxPriorityThreshold": -5},
        })
    );
    // `Never` is the default, and left out.
    let docs = parse_documents(
        &queue("{borrowWithinCohort: {policy: Never}}"),
        "queue.yaml",
    )
    .unwrap();
    assert!(docs[0].to_value()["spec"].get("preemption").is_none());
    let at = "spec.preemption.borrowWithinCohort";
    assert_eq!(
        problems(&queue("{borrowWithinCohort: {maxPriorityThreshold: 100}}")),
        [format!(
            "{at}.maxPriorityThreshold: is only used with policy LowerPriority (got 100 with \
             policy Never); set {at}.policy to LowerPriority or remove the threshold"
        )]
    );
    assert_eq!(
        problems(&queue(
            "{reclaimWithinCohort: Never, borrowWithinCohort: {policy: LowerPriority}}"
        )),
        [format!(
            "{at}.policy: LowerPriority needs spec.preemption.reclaimWithinCohort to preempt in \
             the cohort at all (Kueue refuses it with Never); set reclaimWithinCohort to Any or \
             LowerPriority, or borrowWithinCohort.policy to Never"
        )]
    );
    let p = problems(&queue(
        "{borrowWithinCohort: {policy: LowerPriority, maxPriorityThreshold: 1000000001}}",
    ));
    assert_eq!(p.len(), 1, "{p:?}");
    assert!(
        p[0].starts_with(&format!(
            "{at}.maxPriorityThreshold: must be between -1000000000 and 1000000000 (got 1000000001)"
        )),
        "{p:?}"
    );
    let p = problems(&queue("{borrowWithinCohort: {policy: Lower}}"));
    assert_eq!(p.len(), 1, "{p:?}");
    assert!(p[0].ends_with("did you mean `LowerPriority`?"), "{p:?}");
}

#[test]
fn a_queue_without_spec_gets_weight_one_and_passes() {
    let docs = parse_documents(
        "apiVersion: ferry.dev/v1alpha1\nkind: Queue\nmetadata: {name: team-a}\n",
        "queue.yaml",
    )
    .unwrap();
    let Resource::Queue(q) = &docs[0] else {
        panic!("not a Queue")
    };
    assert_eq!(q.spec.weight, 1.0);
    assert!(q.spec.quotas.is_empty());
    assert_eq!(q.spec.stop_policy, crate::StopPolicy::None);
}

#[test]
fn a_priority_class_parses_and_preempts_unless_told_never() {
    let docs = parse_documents(
        "apiVersion: ferry.dev/v1alpha1\nkind: PriorityClass\nmetadata: {name: urgent}\nspec: {value: 500, description: deadline work}\n---\napiVersion: ferry.dev/v1alpha1\nkind: PriorityClass\nmetadata: {name: polite}\nspec: {value: 50, preemptionPolicy: Never}\n",
        "classes.yaml",
    )
    .unwrap();
    let [
        Resource::PriorityClass(urgent),
        Resource::PriorityClass(polite),
    ] = &docs[..]
    else {
        panic!("not two PriorityClasses: {docs:?}")
    };
    assert_eq!(urgent.spec.value, 500);
    assert!(urgent.preempting());
    assert_eq!(urgent.spec.description.as_deref(), Some("deadline work"));
    assert!(!polite.preempting());
    assert_eq!(
        ResourceKind::from_name("pc"),
        Some(ResourceKind::PriorityClass)
    );
}

#[test]
fn a_priority_class_names_each_bad_field_and_the_fix() {
    let p = problems(
        "apiVersion: ferry.dev/v1alpha1\nkind: PriorityClass\nmetadata: {name: system-top}\nspec: {value: 2000000000}\n",
    );
    assert_eq!(p.len(), 2, "{p:?}");
    assert!(
        p[0].starts_with("metadata.name: names starting with `system-` are reserved"),
        "{p:?}"
    );
    assert!(
        p[1].starts_with("spec.value: must be between -1000000000 and 1000000000 (got 2000000000)"),
        "{p:?}"
    );
    let p = problems(
        "apiVersion: ferry.dev/v1alpha1\nkind: PriorityClass\nmetadata: {name: top}\nspec: {value: 1, preemptionPolicy: Sometimes}\n",
    );
    assert_eq!(p.len(), 1, "{p:?}");
    assert!(p[0].starts_with("spec.preemptionPolicy:"), "{p:?}");
    assert!(
        p[0].contains("PreemptLowerPriority") && p[0].contains("Never"),
        "{p:?}"
    );
    let p =
        problems("apiVersion: ferry.dev/v1alpha1\nkind: PriorityClass\nmetadata: {name: top}\n");
    assert!(p[0].starts_with("spec:") || p[0].contains("spec"), "{p:?}");
}

#[test]
fn queues_priority_classes_and_cohorts_are_the_cluster_scoped_kinds() {
    let scoped: Vec<&str> = ResourceKind::ALL
        .into_iter()
        .filter(|k| k.is_cluster_scoped())
        .map(ResourceKind::as_str)
        .collect();
    assert_eq!(scoped, ["Queue", "PriorityClass", "Cohort"]);
}

/// A cohort tree in Ferry's documents: a root with GPUs of its own, a child under it with
/// limits and a weight; a Cohort without `spec` is a root with none, of weight 1.
#[test]
fn a_cohort_tree_parses() {
    let docs = parse_documents(
        r#"
apiVersion: ferry.dev/v1alpha1
kind: Cohort
metadata: {name: org}
spec:
  quotas: [{flavor: H100-80GB, nominal: 16}]
---
apiVersion: ferry.dev/v1alpha1
kind: Cohort
metadata: {name: research}
spec:
  parent: org
  weight: 2.5
  quotas: [{flavor: any, nominal: 4, borrowingLimit: 8, lendingLimit: 10}]
---
apiVersion: ferry.dev/v1alpha1
kind: Cohort
metadata: {name: empty}
"#,
        "cohorts.yaml",
    )
    .unwrap();
    let [
        Resource::Cohort(org),
        Resource::Cohort(research),
        Resource::Cohort(empty),
    ] = &docs[..]
    else {
        panic!("not three Cohorts: {docs:?}")
    };
    assert_eq!(org.spec.parent, None);
    assert_eq!(org.spec.quotas[0].nominal, 16);
    assert_eq!(research.spec.parent.as_deref(), Some("org"));
    assert_eq!(research.spec.quotas[0].borrowing_limit, Some(8));
    // A subtree lends what its queues lend too: more than its own nominal is fine.
    assert_eq!(research.spec.quotas[0].lending_limit, Some(10));
    assert_eq!((org.spec.weight, research.spec.weight), (1.0, 2.5));
    assert_eq!(empty.spec, crate::CohortSpec::default());
    assert_eq!(empty.spec.weight, 1.0);
    assert_eq!(docs[1].kind(), ResourceKind::Cohort);
    assert_eq!(
        ResourceKind::from_name("cohorts"),
        Some(ResourceKind::Cohort)
    );
    // What is accepted prints back as itself.
    let again = parse_value(docs[1].to_value(), "again").unwrap();
    assert_eq!(again, docs[1]);
}

#[test]
fn a_cohort_names_each_bad_field_and_the_fix() {
    let cohort = |spec: &str| {
        problems(&format!(
            "apiVersion: ferry.dev/v1alpha1\nkind: Cohort\nmetadata: {{name: nlp}}\nspec: {spec}\n"
        ))
    };
    assert_eq!(
        cohort("{parnt: org}"),
        ["spec.parnt: unknown field; did you mean `parent`?"]
    );
    assert_eq!(
        cohort("{parent: org, quotas: [{flavor: any, nominal: 1, borrowLimit: 2}]}"),
        ["spec.quotas[0].borrowLimit: unknown field; did you mean `borrowingLimit`?"]
    );
    assert_eq!(
        cohort("{parent: nlp}"),
        [
            "spec.parent: a cohort cannot be its own parent (got \"nlp\"); name another cohort, \
             or remove spec.parent to make it a root"
        ]
    );
    assert!(cohort("{parent: Org_1}")[0].starts_with("spec.parent: "));
    assert_eq!(
        cohort("{quotas: [{flavor: any, nominal: 4, borrowingLimit: 2, lendingLimit: 1}]}"),
        [
            "spec.quotas[0].borrowingLimit: is only allowed on a cohort with a parent (got 2 on \
             a root); set spec.parent or remove borrowingLimit",
            "spec.quotas[0].lendingLimit: is only allowed on a cohort with a parent (got 1 on a \
             root); set spec.parent or remove lendingLimit"
        ]
    );
    assert_eq!(
        cohort(
            "{parent: org, quotas: [{flavor: a, nominal: -1}, {flavor: a, nominal: 1, \
             borrowingLimit: -2}]}"
        ),
        [
            "spec.quotas[0].nominal: must be 0 or more (got -1)",
            "spec.quotas[1].flavor: \"a\" is listed twice; merge the entries",
            "spec.quotas[1].borrowingLimit: must be 0 or more (got -2)"
        ]
    );
    assert!(
        cohort("{quotas: [{nominal: 1}]}")[0].starts_with("spec.quotas[0]"),
        "a quota without its flavor is named"
    );
    // A weight is positive, as a Queue's: the fix names the default and a small one.
    for bad in ["0", "-1", "-0.5"] {
        let p = cohort(&format!("{{parent: org, weight: {bad}}}"));
        assert_eq!(p.len(), 1, "{bad}: {p:?}");
        assert!(
            p[0].starts_with("spec.weight: must be a positive number such as 1 (the default)")
                && p[0].ends_with("write a small one such as 0.01"),
            "{bad}: {p:?}"
        );
    }
    assert!(
        cohort("{weight: heavy}")[0].starts_with("spec.weight: "),
        "a weight that is no number is named"
    );
    // The rule and its words are a Queue's weight's.
    assert_eq!(
        problems(
            "apiVersion: ferry.dev/v1alpha1\nkind: Queue\nmetadata: {name: nlp}\n\
             spec: {weight: 0}\n"
        ),
        cohort("{weight: 0}")
    );
}

#[test]
fn every_kind_is_found_by_its_plural() {
    for kind in ResourceKind::ALL {
        assert_eq!(ResourceKind::from_name(kind.plural()), Some(kind));
    }
}

/// Every resource file in `examples/` parses and validates, so the examples stay true as the
/// types change.
#[test]
fn every_example_parses() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples");
    let mut checked = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if !matches!(
            path.extension().and_then(|e| e.to_str()),
            Some("yaml" | "yml")
        ) {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        if let Err(e) = parse_documents(&text, &path.display().to_string()) {
            panic!("{e}");
        }
        checked += 1;
    }
    assert!(
        checked >= 5,
        "only {checked} example files in {}",
        dir.display()
    );
}

#[test]
fn every_refused_document_of_a_file_is_reported_with_its_number() {
    let bad_queue = "apiVersion: ferry.dev/v1alpha1\nkind: Queue\nmetadata: {name: q}\n\
                     spec: {quotas: [{flavor: any, nominal: -2}], wieght: 2}\n";
    let text = format!(
        "{bad_queue}---\n{HELLO}---\n{}",
        HELLO.replace("nodes:", "nodez:")
    );
    let err = parse_documents(&text, "all.yaml").unwrap_err();
    let shown = err.to_string();
    let (first, third) = shown.split_once("; all.yaml (document 3): ").expect(&shown);
    assert!(
        first.starts_with("all.yaml (document 1): ")
            && first.contains("spec.wieght: unknown field; did you mean `weight`?")
            && first.contains("spec.quotas[0].nominal: must be 0 or more (got -2)"),
        "{shown}"
    );
    assert!(third.starts_with("spec.resources.nodez"), "{shown}");
    assert_eq!(err.problems().len(), 3, "{shown}");
    // One refused document is reported as before, on its own.
    let one = parse_documents(&format!("{bad_queue}---\n{HELLO}"), "one.yaml").unwrap_err();
    assert!(matches!(one, SpecError::Invalid { .. }), "{one}");
}
