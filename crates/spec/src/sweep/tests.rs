use super::*;
use crate::parse::{ResourceKind, parse_documents};
use crate::train_job::Method;

const LR_SWEEP: &str = r#"
apiVersion: ferry.dev/v1alpha1
kind: Sweep
metadata: {name: lr-sweep, namespace: team-a, labels: {owner: ana}}
spec:
  template:
    metadata: {labels: {project: x}}
    spec:
      engine: builtin
      task: pretrain
      model: {source: scratch, preset: tiny}
      data: {path: corpus.txt}
      train: {steps: 20, seqLen: 64}
  parameters:
    train.lr: [0.0001, 0.0003, 0.001]
    method: [lora, full]
  maxParallel: 2
"#;

fn sweep(text: &str) -> Sweep {
    match parse_documents(text, "sweep.yaml").unwrap().remove(0) {
        Resource::Sweep(s) => s,
        other => panic!("not a Sweep: {other:?}"),
    }
}

fn problems(text: &str) -> Vec<String> {
    match parse_documents(text, "sweep.yaml") {
        Ok(r) => panic!("expected an error, parsed {r:?}"),
        Err(e) => e.problems().into_iter().map(ToString::to_string).collect(),
    }
}

#[test]
fn a_sweep_parses_as_its_own_kind() {
    let s = sweep(LR_SWEEP);
    assert_eq!(s.spec.max_parallel, Some(2));
    assert_eq!(s.spec.metric, "loss");
    assert_eq!(ResourceKind::from_name("sweeps"), Some(ResourceKind::Sweep));
    assert_eq!(ResourceKind::from_name("sweep"), Some(ResourceKind::Sweep));
    assert!(!ResourceKind::Sweep.is_cluster_scoped());
    assert_eq!(s.combinations(), 6);
}

/// Every combination, paths in the order written (not alphabetical) with the last varying
/// fastest, each list in the order given; names `<sweep>-<index>`.
#[test]
fn expansion_is_the_cross_product_in_order() {
    let jobs = sweep(LR_SWEEP).expand().unwrap();
    let got: Vec<(String, String)> = jobs
        .iter()
        .map(|j| (j.job.metadata.name.clone(), j.combination()))
        .collect();
    let want = [
        ("lr-sweep-0", "train.lr=0.0001, method=lora"),
        ("lr-sweep-1", "train.lr=0.0001, method=full"),
        ("lr-sweep-2", "train.lr=0.0003, method=lora"),
        ("lr-sweep-3", "train.lr=0.0003, method=full"),
        ("lr-sweep-4", "train.lr=0.001, method=lora"),
        ("lr-sweep-5", "train.lr=0.001, method=full"),
    ];
    let want: Vec<(String, String)> = want
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
    assert_eq!(got, want);
    for (i, j) in jobs.iter().enumerate() {
        assert_eq!(j.index, i);
    }
    // The values land in the typed spec; what no parameter names is the template's.
    assert_eq!(jobs[3].job.spec.method, Method::Full);
    assert_eq!(jobs[3].job.spec.train.lr, Some(0.0003));
    assert_eq!(jobs[3].job.spec.train.steps, Some(20));
    assert_eq!(jobs[0].job.spec.method, Method::Lora);
}

/// The order of paths survives every form a sweep travels in: a JSON document, the stored
/// resource read back, and the API's JSON value of it.
#[test]
fn the_order_of_paths_survives_json_and_storage() {
    let s = sweep(LR_SWEEP);
    let paths = |s: &Sweep| s.spec.parameters.keys().cloned().collect::<Vec<_>>();
    assert_eq!(paths(&s), ["train.lr", "method"]);
    let stored = serde_json::to_string(&Resource::Sweep(s.clone())).unwrap();
    let again = sweep(&stored);
    assert_eq!(paths(&again), ["train.lr", "method"]);
    assert_eq!(again.expand().unwrap(), s.expand().unwrap());
    let value = Resource::Sweep(s).to_value();
    let keys: Vec<&String> = value["spec"]["parameters"]
        .as_object()
        .unwrap()
        .keys()
        .collect();
    assert_eq!(keys, ["train.lr", "method"]);
}

#[test]
fn each_job_is_labelled_with_its_sweep_index_and_the_templates_labels() {
    let jobs = sweep(LR_SWEEP).expand().unwrap();
    let meta = &jobs[3].job.metadata;
    assert_eq!(meta.namespace, "team-a");
    let labels: Vec<(&str, &str)> = meta
        .labels
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    assert_eq!(
        labels,
        [
            ("ferry.dev/sweep", "lr-sweep"),
            ("ferry.dev/sweep-index", "3"),
            ("project", "x"),
        ]
    );
    assert_eq!(
        meta.annotations[SWEEP_PARAMETERS_ANNOTATION],
        r#"{"train.lr":0.0003,"method":"full"}"#
    );
}

/// Jobs past `maxParallel` start suspended and are the sweep's to release; a template that is
/// suspended holds every job, and none is the sweep's.
#[test]
fn jobs_past_max_parallel_are_held() {
    let jobs = sweep(LR_SWEEP).expand().unwrap();
    let held: Vec<(bool, bool)> = jobs.iter().map(|j| (j.held, j.job.spec.suspend)).collect();
    assert_eq!(
        held,
        [
            (false, false),
            (false, false),
            (true, true),
            (true, true),
            (true, true),
            (true, true)
        ]
    );
    let all = sweep(&LR_SWEEP.replace("  maxParallel: 2\n", ""))
        .expand()
        .unwrap();
    assert!(all.iter().all(|j| !j.held && !j.job.spec.suspend));
    let suspended = sweep(&LR_SWEEP.replace("train: {steps", "suspend: true\n      train: {steps"))
        .expand()
        .unwrap();
    assert!(suspended.iter().all(|j| !j.held && j.job.spec.suspend));
}

#[test]
fn any_field_of_the_spec_can_be_swept() {
    let text = LR_SWEEP.replace(
        "    train.lr: [0.0001, 0.0003, 0.001]\n    method: [lora, full]\n",
        "    resources.gpusPerNode: [0]\n    data.path: [a.txt, b.txt]\n    env.SEED: ['1', '2']\n    lora.rank: [4]\n    method: [lora]\n",
    );
    let jobs = sweep(&text).expand().unwrap();
    assert_eq!(jobs.len(), 4);
    let j = &jobs[3].job.spec;
    assert_eq!(j.data.as_ref().unwrap().path, "b.txt");
    assert_eq!(j.env["SEED"], "2");
    assert_eq!(j.lora.as_ref().unwrap().rank, 4);
}

#[test]
fn an_unknown_path_names_the_closest_field() {
    let p = problems(&LR_SWEEP.replace("train.lr:", "train.lrr:"));
    assert_eq!(
        p,
        [
            r#"spec.parameters["train.lrr"]: TrainJob spec has no field train.lrr; did you mean train.lr?"#
        ]
    );
    let p = problems(&LR_SWEEP.replace("train.lr:", "zzz.qqq:"));
    assert_eq!(p.len(), 1, "{p:?}");
    assert!(
        p[0].starts_with(
            r#"spec.parameters["zzz.qqq"]: TrainJob spec has no field zzz.qqq; give a dotted path"#
        ),
        "{p:?}"
    );
}

#[test]
fn an_empty_value_list_or_grid_is_refused() {
    let p = problems(&LR_SWEEP.replace("[lora, full]", "[]"));
    assert_eq!(
        p,
        [r#"spec.parameters["method"]: has no values; give at least one, or remove the path"#]
    );
    let p = problems(&LR_SWEEP.replace(
        "    train.lr: [0.0001, 0.0003, 0.001]\n    method: [lora, full]\n",
        "    {}\n",
    ));
    assert_eq!(p.len(), 1, "{p:?}");
    assert!(p[0].starts_with("spec.parameters: is empty;"), "{p:?}");
}

#[test]
fn a_repeated_value_is_refused() {
    let p = problems(&LR_SWEEP.replace("[lora, full]", "[lora, lora]"));
    assert_eq!(
        p,
        [
            r#"spec.parameters["method"]: lists lora twice; remove the repeat (each value makes a job)"#
        ]
    );
}

/// A value of the wrong type is reported as the expanded job's own validation error, at the
/// parameter, naming the first combination that has it and how many more do.
#[test]
fn a_wrong_value_names_its_combination() {
    let p = problems(&LR_SWEEP.replace("[0.0001, 0.0003, 0.001]", "[0.0001, fast]"));
    assert_eq!(
        p,
        [
            r#"spec.parameters["train.lr"]: in job lr-sweep-2 (train.lr=fast, method=lora) and 1 more: spec.train.lr: must be a number (got string "fast")"#
        ]
    );
    let p = problems(&LR_SWEEP.replace("[lora, full]", "[lora, fulll]"));
    assert_eq!(p.len(), 1, "{p:?}");
    assert!(
        p[0].starts_with(r#"spec.parameters["method"]: in job lr-sweep-1 (train.lr=0.0001, method=fulll) and 2 more: spec.method: must be one of"#),
        "{p:?}"
    );
    // A value the typed rules refuse (a negative rate), and a cross-field rule a value breaks.
    let p = problems(&LR_SWEEP.replace("0.001]", "-1]"));
    assert_eq!(
        p,
        [
            r#"spec.parameters["train.lr"]: in job lr-sweep-4 (train.lr=-1, method=lora) and 1 more: spec.train.lr: must be a positive number (got -1)"#
        ]
    );
    let p = problems(&LR_SWEEP.replace("train: {steps", "lora: {rank: 4}\n      train: {steps"));
    assert_eq!(
        p,
        [
            "spec.template.spec.lora: in job lr-sweep-1 (train.lr=0.0001, method=full) and 2 more: spec.lora: is set but method is full; remove it or set method: lora"
        ]
    );
}

/// A problem of the template itself, whatever the combination, is reported once, at the
/// template's field, without a combination.
#[test]
fn a_template_problem_is_reported_once() {
    let p = problems(&LR_SWEEP.replace("      model: {source: scratch, preset: tiny}\n", ""));
    assert_eq!(p.len(), 1, "{p:?}");
    assert!(
        p[0].starts_with("spec.template.spec.model: is required for engine: builtin"),
        "{p:?}"
    );
    let p = problems(&LR_SWEEP.replace("seqLen: 64", "seqLenn: 64"));
    assert_eq!(
        p,
        ["spec.template.spec.train.seqLenn: unknown field; did you mean `seqLen`?"]
    );
}

#[test]
fn a_grid_over_the_cap_is_refused() {
    let many: Vec<String> = (1..=17).map(|i| i.to_string()).collect();
    let text = LR_SWEEP.replace(
        "    train.lr: [0.0001, 0.0003, 0.001]\n    method: [lora, full]\n",
        &format!(
            "    train.steps: [{}]\n    train.seqLen: [{}]\n",
            many.join(", "),
            many.join(", ")
        ),
    );
    let p = problems(&text);
    assert_eq!(
        p,
        [
            "spec.parameters: expands to 289 jobs (17 train.steps × 17 train.seqLen), over the limit of 256; drop values or split it into several sweeps"
        ]
    );
}

#[test]
fn max_parallel_must_be_at_least_one() {
    let p = problems(&LR_SWEEP.replace("maxParallel: 2", "maxParallel: 0"));
    assert_eq!(p, ["spec.maxParallel: must be 1 or more (got 0)"]);
}

#[test]
fn a_name_too_long_for_its_jobs_says_how_long_it_may_be() {
    let name = "a".repeat(62);
    let p = problems(&LR_SWEEP.replace("name: lr-sweep", &format!("name: {name}")));
    assert_eq!(
        p,
        [format!(
            "metadata.name: is too long for its jobs' names: `{name}-5` has 64 characters, over the 63 allowed; shorten the name to at most 61 characters"
        )]
    );
    let p = problems(&LR_SWEEP.replace("name: lr-sweep", "name: LR"));
    assert_eq!(p.len(), 1, "{p:?}");
    assert!(
        p[0].starts_with("metadata.name: must be lowercase"),
        "{p:?}"
    );
}

#[test]
fn the_sweep_keeps_its_labels_and_suspend_to_itself() {
    let p = problems(&LR_SWEEP.replace("{project: x}", "{ferry.dev/sweep: other}"));
    assert_eq!(
        p,
        [
            "spec.template.metadata.labels[\"ferry.dev/sweep\"]: is set by the sweep on each of its jobs; remove it"
        ]
    );
    let p = problems(&LR_SWEEP.replace("method: [lora, full]", "suspend: [true, false]"));
    assert_eq!(p.len(), 1, "{p:?}");
    assert!(
        p[0].starts_with(r#"spec.parameters["suspend"]: suspend is the sweep's to set"#),
        "{p:?}"
    );
}

#[test]
fn a_non_list_value_is_a_shape_error() {
    let p = problems(&LR_SWEEP.replace("[lora, full]", "lora"));
    assert_eq!(
        p,
        [r#"spec.parameters.method: must be a list (got string "lora")"#]
    );
}

#[test]
fn parallelism_auto_works_in_a_template() {
    let s = sweep(&LR_SWEEP.replace("train: {steps", "parallelism: auto\n      train: {steps"));
    assert!(s.spec.template.spec.parallelism.is_auto());
}

/// Each job registers its own model: the template's export name gets the job's index, a
/// parameter over `export.register` is kept as given, and without a name each job exports
/// under its own.
#[test]
fn every_job_of_a_sweep_registers_a_model_of_its_own() {
    let registers = |text: &str| -> Vec<Option<String>> {
        let jobs = sweep(text).expand().unwrap();
        jobs.iter()
            .map(|j| j.job.spec.export.as_ref().and_then(|e| e.register.clone()))
            .collect()
    };
    let named = LR_SWEEP.replace(
        "      train: {steps: 20, seqLen: 64}\n",
        "      train: {steps: 20, seqLen: 64}\n      export: {format: hf, register: lr}\n",
    );
    let want: Vec<Option<String>> = (0..6).map(|i| Some(format!("lr-{i}"))).collect();
    assert_eq!(registers(&named), want);

    let by_parameter = named.replace(
        "    method: [lora, full]\n",
        "    method: [lora, full]\n    export.register: [a, b]\n",
    );
    assert_eq!(
        problems(&by_parameter),
        [
            "spec.parameters[\"export.register\"]: jobs 0 and 2 would both register model \"a\"; a name must be unique: sweep export.register alone, or leave it to the template (each job then registers NAME-<index>)"
        ]
    );
    let alone = by_parameter
        .replace("    train.lr: [0.0001, 0.0003, 0.001]\n", "")
        .replace("    method: [lora, full]\n", "");
    assert_eq!(
        registers(&alone),
        [Some("a".to_owned()), Some("b".to_owned())]
    );

    let unnamed = named.replace("export: {format: hf, register: lr}", "export: {format: hf}");
    assert_eq!(registers(&unnamed), vec![None; 6]);
}
