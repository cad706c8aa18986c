//! The scheduler on `ferry up --gpus 4`: graceful preemption by priority across a
//! control-plane restart, and queue / priority mistakes refused at apply time.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::harness::{OutputText, Plane};

const LIMIT: Duration = Duration::from_secs(120);

/// A job running `examples/sleeper.py STEPS` (one step a second, a checkpoint every five
/// steps and on SIGTERM, resumes from `FERRY_RESUME_FROM`) on `gpus` GPUs.
fn sleeper(name: &str, priority: &str, gpus: u32, steps: u32) -> String {
    format!(
        "apiVersion: ferry.dev/v1alpha1
kind: TrainJob
metadata: {{name: {name}}}
spec:
  engine: command
  command: [python3, examples/sleeper.py, '{steps}']
  priority: {priority}
  resources: {{nodes: 1, procsPerNode: 1, gpusPerNode: {gpus}}}
  onFailure: {{maxRestarts: 0, graceSeconds: 10}}
"
    )
}

/// `ferry apply` of `text` (written to `file`) must fail, saying each of `needles`.
fn refused(plane: &Plane, file: &str, text: &str, needles: &[&str]) {
    let path = plane.write(file, text);
    let out = plane.ferry(&["apply", "-f", &path]);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success(), "{file} was accepted");
    for n in needles {
        assert!(err.contains(n), "{file}: no {n:?} in {err}");
    }
}

/// The line of `listed` (a `ferry get` table) for `name`, its cells joined by single spaces.
fn listing_line(listed: &str, name: &str) -> Option<String> {
    listed
        .lines()
        .find(|l| l.split_whitespace().next() == Some(name))
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
}

/// Position of the first event matching `pred`, with a readable failure.
fn find(events: &[Value], what: &str, pred: impl Fn(&Value) -> bool) -> usize {
    events
        .iter()
        .position(pred)
        .unwrap_or_else(|| panic!("no {what} event in {events:#?}"))
}

fn at(events: &[Value], i: usize) -> chrono::DateTime<chrono::Utc> {
    events[i]["at"]
        .as_str()
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("event without time: {}", events[i]))
}

fn message(e: &Value) -> &str {
    e["message"].as_str().unwrap_or_default()
}

/// Waits until rank 0 of `name` has printed `step` metrics lines.
fn wait_for_step(plane: &Plane, name: &str, step: u32) {
    plane.wait_log(name, &format!("\"step\": {step},"), LIMIT);
}

#[test]
fn a_high_priority_job_preempts_a_low_one_which_resumes_from_its_checkpoint() {
    let mut plane = Plane::start(Some(4));
    plane.apply("low.yaml", &sleeper("low", "low", 4, 12));
    plane.wait_phase("low", "Running", LIMIT);
    wait_for_step(&plane, "low", 2);

    // The scheduler's books survive a crash: the restarted control plane re-registers the
    // running job where it runs, neither preempting it nor handing its GPUs out.
    plane.restart();
    plane.apply("mid.yaml", &sleeper("mid", "low", 1, 1));
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(plane.job("mid")["status"]["phase"], "Queued");
    assert_eq!(plane.job("low")["status"]["phase"], "Running");
    plane.ok(&["cancel", "job", "mid"]);

    wait_for_step(&plane, "low", 3);
    plane.apply("high.yaml", &sleeper("high", "high", 2, 2));
    let high_done = plane.wait_phase("high", "Succeeded", LIMIT);
    let low_done = plane.wait_phase("low", "Succeeded", LIMIT);

    let low_ev = plane.events("low");
    let high_ev = plane.events("high");
    let preempted = find(&low_ev, "Preempted", |e| e["to"] == "Preempted");
    assert!(
        message(&low_ev[preempted]).contains("default/high (priority high over low)"),
        "{}",
        low_ev[preempted]
    );
    assert_eq!(
        low_ev.iter().filter(|e| e["to"] == "Preempted").count(),
        1,
        "preempted once, never again: {low_ev:#?}"
    );
    // Graceful: the rank caught SIGTERM and wrote a checkpoint before exiting.
    let uid = low_done["metadata"]["uid"].as_str().unwrap();
    let first = plane
        .home
        .path()
        .join(format!("jobs/default/low/{uid}/attempt-1/rank-0.log"));
    let log = std::fs::read_to_string(&first).unwrap();
    let (sigterm, step) = sigterm_step(&log);
    assert!(step >= 3, "{sigterm}");
    let ckpt = format!("checkpoints/step-{step}");

    let requeued = find(&low_ev, "Requeued", |e| e["reason"] == "Requeued");
    assert!(requeued > preempted);
    assert!(
        message(&low_ev[requeued]).ends_with(&ckpt),
        "{}",
        low_ev[requeued]
    );
    // The high job starts only once the low one's ranks are gone, and finishes before the
    // low one is admitted again.
    let high_admitted = find(&high_ev, "Admitted", |e| e["to"] == "Admitted");
    let high_succeeded = find(&high_ev, "Succeeded", |e| e["to"] == "Succeeded");
    assert!(at(&high_ev, high_admitted) >= at(&low_ev, requeued));
    let readmitted = requeued
        + find(&low_ev[requeued..], "re-admission", |e| {
            e["to"] == "Admitted"
        });
    assert!(at(&low_ev, readmitted) >= at(&high_ev, high_succeeded));
    assert_eq!(
        high_done["status"]["gpus"].as_array().unwrap()[0]
            .as_array()
            .unwrap()
            .len(),
        2
    );

    // The second attempt resumed from that checkpoint on all four GPUs and finished the
    // remaining steps.
    assert_eq!(low_done["status"]["attempt"], 2);
    assert_eq!(
        low_done["status"]["restarts"], 0,
        "a preemption is not a failure"
    );
    assert!(
        low_done["status"]["resumedFrom"]
            .as_str()
            .unwrap()
            .ends_with(&ckpt)
    );
    assert_eq!(low_done["status"]["gpus"][0].as_array().unwrap().len(), 4);
    let second = plane.ok(&["logs", "low"]);
    assert!(second.contains(&format!("at step {step}")), "{second}");
    assert!(
        second.contains("\"step\": 12,") && second.contains("done"),
        "{second}"
    );
    assert!(
        !second.contains(&format!("\"step\": {step},")),
        "no step redone: {second}"
    );
}

#[test]
fn queue_and_priority_mistakes_are_refused_at_apply() {
    let plane = Plane::start(Some(4));
    refused(
        &plane,
        "missing-queue.yaml",
        &sleeper("lost", "normal", 1, 1).replace("  priority:", "  queue: research\n  priority:"),
        &["spec.queue", "queue `research` does not exist", "default"],
    );
    refused(
        &plane,
        "bad-priority.yaml",
        &sleeper("vip", "urgent", 1, 1),
        &["spec.priority", "`urgent`", "low, normal, high"],
    );
    let team = |name: &str, cohort: &str, nominal: u32, borrow: u32| {
        format!(
            "apiVersion: ferry.dev/v1alpha1\nkind: Queue\nmetadata: {{name: {name}}}\nspec: {{cohort: {cohort}, quotas: [{{flavor: any, nominal: {nominal}, borrowingLimit: {borrow}}}]}}\n"
        )
    };
    refused(
        &plane,
        "lonely.yaml",
        &team("a", "c1", 2, 1),
        &["spec.cohort", "cohort `c1`"],
    );
    refused(
        &plane,
        "greedy.yaml",
        &format!("{}---\n{}", team("a", "c1", 2, 9), team("b", "c1", 2, 0)),
        &["spec.quotas[0].borrowingLimit", "queue `a`"],
    );
    // A gang larger than its queue may ever use is refused, not left waiting forever.
    let both = format!(
        "{}---\n{}---\n{}",
        team("a", "c1", 1, 1),
        team("b", "c1", 1, 0),
        sleeper("big", "normal", 3, 1).replace("  priority:", "  queue: a\n  priority:")
    );
    refused(
        &plane,
        "too-big.yaml",
        &both,
        &["spec.resources", "at most 2"],
    );
    assert_eq!(plane.ok(&["get", "jobs", "-o", "json"]).trim(), "[]");
    assert!(
        !plane.ok(&["get", "queues"]).contains("c1"),
        "nothing stored"
    );
}

#[test]
fn a_team_takes_back_the_quota_it_lent() {
    let plane = Plane::start(Some(4));
    plane.ok(&["apply", "-f", "examples/team-queues.yaml"]);
    plane.wait_phase("research-long", "Running", LIMIT);
    wait_for_step(&plane, "research-long", 1);
    plane.ok(&["apply", "-f", "examples/product-urgent.yaml"]);
    plane.wait_phase("product-urgent", "Running", LIMIT);
    let events = plane.events("research-long");
    let preempted = find(&events, "Preempted", |e| e["to"] == "Preempted");
    assert!(
        message(&events[preempted])
            .contains("queue product reclaims GPUs that queue research borrowed beyond its quota"),
        "{}",
        events[preempted]
    );
    // Research may still use its own two GPUs, but its gang needs four: it waits.
    let job = plane.wait_phase("research-long", "Queued", LIMIT);
    assert_eq!(job["status"]["restarts"], 0);
    let queues: Vec<Value> =
        serde_json::from_str(&plane.ok(&["get", "queues", "-o", "json"])).unwrap();
    let used = |name: &str| {
        queues
            .iter()
            .find(|q| q["metadata"]["name"] == name)
            .map(|q| q["status"]["usedGpus"].clone())
    };
    assert_eq!(used("product"), Some(2.into()), "{queues:?}");
    assert_eq!(used("research"), Some(0.into()), "{queues:?}");
    plane.ok(&["cancel", "job", "research-long"]);
}

/// A queue that never reclaims (`spec.preemption.reclaimWithinCohort: Never`, Kueue's default)
/// gets what it lent back as the borrower finishes: product's job waits while research's run
/// holds product's two GPUs, and starts when that run ends (by default it is taken back at
/// once: `a_team_takes_back_the_quota_it_lent`).
#[test]
fn a_queue_that_never_reclaims_waits_for_what_it_lent() {
    let plane = Plane::start(Some(4));
    let examples = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples");
    let queues = std::fs::read_to_string(examples.join("team-queues.yaml")).unwrap();
    let product = "metadata: {name: product}\nspec:\n";
    assert!(queues.contains(product));
    let never = queues.replace(
        product,
        &format!("{product}  preemption: {{reclaimWithinCohort: Never}}\n"),
    );
    let path = plane.write("never-reclaims.yaml", &never);
    product_waits_for_research(&plane, &path);
}

/// Research's 4-GPU run (`queues`: the two teams' Queues and that run) holds product's two
/// GPUs; product's 2-GPU job waits without preempting it, and starts once it is cancelled.
fn product_waits_for_research(plane: &Plane, queues: &str) {
    plane.ok(&["apply", "-f", queues]);
    plane.wait_phase("research-long", "Running", LIMIT);
    wait_for_step(plane, "research-long", 1);
    plane.ok(&["apply", "-f", "examples/product-urgent.yaml"]);
    // Several reconcile passes (one every 500 ms, and at once after an apply).
    std::thread::sleep(Duration::from_secs(4));
    assert_eq!(plane.job("product-urgent")["status"]["phase"], "Queued");
    assert_eq!(plane.job("research-long")["status"]["phase"], "Running");
    let events = plane.events("research-long");
    assert!(
        !events.iter().any(|e| e["to"] == "Preempted"),
        "{events:#?}"
    );
    plane.ok(&["cancel", "job", "research-long"]);
    plane.wait_phase("product-urgent", "Running", LIMIT);
    plane.ok(&["cancel", "job", "product-urgent"]);
}

/// The policy a platform team simulated (`ferry sim --options`) is the one `ferry up` runs:
/// with `reclaimMinBorrowedPct: 75` (take back only jobs mostly made of borrowed GPUs),
/// research's 4-GPU run, half of it borrowed, is not preempted for product's 2-GPU job, which
/// waits instead (by default it is taken back at once: `a_team_takes_back_the_quota_it_lent`).
/// A misspelt switch stops `ferry up` before it serves anything, naming the switch.
#[test]
fn ferry_up_runs_the_scheduler_switches_it_is_given() {
    let plane = Plane::start_with(
        Some(4),
        &[("--scheduler-options", "reclaimMinBorrowedPct: 75\n")],
    );
    product_waits_for_research(&plane, "examples/team-queues.yaml");

    let err = ferry_up_refuses("--scheduler-options", "reclaimMinBorowedPct: 75\n");
    assert!(
        err.contains("unknown switch `reclaimMinBorowedPct`")
            && err.contains("reclaimMinBorrowedPct"),
        "{err}"
    );
}

/// `ferry up FLAG FILE` with `text` in the file, which must stop it before it serves; what it
/// printed.
fn ferry_up_refuses(flag: &str, text: &str) -> String {
    let home = tempfile::tempdir().unwrap();
    let file = home.path().join("settings.yaml");
    std::fs::write(&file, text).unwrap();
    let out = std::process::Command::new(crate::harness::ferry_bin())
        .args([
            "up",
            "--listen",
            "127.0.0.1:0",
            "--gateway",
            "off",
            "--gpus",
            "1",
        ])
        .arg(flag)
        .arg(&file)
        .env("FERRY_HOME", home.path())
        .output()
        .unwrap();
    assert!(!out.status.success(), "ferry up {flag} took {text:?}");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A platform team's own priorities (`ferry up --priority-classes`) rank among Ferry's: an
/// `overnight` job (2,000, `preempting: false`) waits for a running `high` one, a `production`
/// job (1,000, above `high`) preempts it, the preemption names both classes, and a job naming a
/// class nobody defined is refused at apply with the classes that exist. A class name Ferry
/// cannot use is refused when `ferry up` starts.
#[test]
fn a_clusters_own_priority_classes_rank_among_the_standard_ones() {
    let plane = Plane::start_with(
        Some(4),
        &[(
            "--priority-classes",
            "production: 1000\nbatch: -500\novernight: {value: 2000, preempting: false}\n",
        )],
    );
    plane.apply("big.yaml", &sleeper("big", "high", 4, 600));
    plane.wait_phase("big", "Running", LIMIT);
    wait_for_step(&plane, "big", 1);
    // `overnight` outranks `high` but never preempts: it waits for the GPUs.
    plane.apply("night.yaml", &sleeper("night", "overnight", 2, 600));
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(plane.job("night")["status"]["phase"], "Queued");
    assert_eq!(plane.job("big")["status"]["phase"], "Running");
    plane.ok(&["cancel", "job", "night"]);
    plane.apply("prod.yaml", &sleeper("prod", "production", 2, 600));
    plane.wait_phase("prod", "Running", LIMIT);
    let events = plane.events("big");
    let preempted = find(&events, "Preempted", |e| e["to"] == "Preempted");
    assert!(
        message(&events[preempted]).contains("default/prod (priority production over high)"),
        "{}",
        events[preempted]
    );
    refused(
        &plane,
        "odd.yaml",
        &sleeper("odd", "critical", 1, 1),
        &["spec.priority", "`critical` does not exist", "production"],
    );
    plane.ok(&["cancel", "job", "prod"]);
    plane.ok(&["cancel", "job", "big"]);

    let err = ferry_up_refuses("--priority-classes", "Production: 1000\n");
    assert!(err.contains("class `Production`"), "{err}");
}

/// A cluster's own class objects are a `--priority-classes` file too (`kubectl get
/// priorityclasses -o yaml`): Kubernetes' `system-` classes are left out, said so when `ferry up`
/// starts, and the `globalDefault` class is also Ferry's `normal`, what a job without a priority
/// gets; a different `normal` beside it is refused at start, naming both.
#[test]
fn a_clusters_priority_class_objects_are_read_as_exported() {
    let item = |name: &str, rest: &str| {
        format!(
            "- apiVersion: scheduling.k8s.io/v1\n  kind: PriorityClass\n  metadata: {{name: \
             {name}, uid: 5e1f}}\n{rest}"
        )
    };
    let list = |items: &[String]| format!("apiVersion: v1\nkind: List\nitems:\n{}", items.concat());
    let classes = [
        item("system-node-critical", "  value: 2000001000\n"),
        item("standard", "  value: 500\n  globalDefault: true\n"),
        item("production", "  value: 1000\n  preemptionPolicy: Never\n"),
    ];
    let plane = Plane::start_with(Some(1), &[("--priority-classes", &list(&classes))]);
    let listed = plane.ok(&["get", "priorityclasses"]);
    let line = |name: &str| listing_line(&listed, name);
    for (name, listing) in [
        ("normal", "normal 500 PreemptLowerPriority ferry up"),
        ("standard", "standard 500 PreemptLowerPriority ferry up"),
        ("production", "production 1000 Never ferry up"),
    ] {
        assert!(
            line(name).is_some_and(|l| l.starts_with(listing)),
            "{listed}"
        );
    }
    assert_eq!(line("system-node-critical"), None, "{listed}");
    let log = plane.server_log();
    assert!(
        log.contains("note: skipped Kubernetes' own system-node-critical"),
        "{log}"
    );
    assert!(
        log.contains(
            "note: `standard` is the globalDefault: a job without a priority gets `normal`"
        ),
        "{log}"
    );

    let err = ferry_up_refuses(
        "--priority-classes",
        &list(&[classes[1].clone(), item("normal", "  value: 0\n")]),
    );
    assert!(
        err.contains("`standard` is the globalDefault (value 500)")
            && err.contains("also defines `normal` (value 0); fix: "),
        "{err}"
    );
}

/// `kubectl get priorityclasses -o yaml` (and Kueue's WorkloadPriorityClasses) piped to
/// `ferry apply`: each class becomes Ferry's `PriorityClass`, Kubernetes' `system-` classes are
/// left out and the global default is said, on standard error; a job may then name a class.
/// A file with a class Ferry cannot take is refused as a whole, naming it.
#[test]
fn a_clusters_priority_classes_are_applied_as_exported() {
    let plane = Plane::start(Some(1));
    let exported = "apiVersion: v1\nkind: List\nitems:\n\
        - apiVersion: scheduling.k8s.io/v1\n  kind: PriorityClass\n  metadata: {name: \
          system-node-critical}\n  value: 2000001000\n\
        - apiVersion: scheduling.k8s.io/v1\n  kind: PriorityClass\n  metadata: {name: standard, \
          uid: 5e1f}\n  value: 500\n  globalDefault: true\n\
        - apiVersion: scheduling.k8s.io/v1\n  kind: PriorityClass\n  metadata: {name: \
          production}\n  value: 1000\n  preemptionPolicy: Never\n  description: paid work\n\
        - apiVersion: kueue.x-k8s.io/v1beta1\n  kind: WorkloadPriorityClass\n  metadata: {name: \
          batch}\n  value: -50\n";
    let path = plane.write("classes.yaml", exported);
    let out = plane.ferry(&["apply", "-f", &path]);
    let (stdout, stderr) = (out.stdout_text(), out.stderr_text());
    assert!(out.status.success(), "{stderr}");
    assert_eq!(
        stdout.lines().collect::<Vec<_>>(),
        [
            "priorityclass/standard created",
            "priorityclass/production created",
            "priorityclass/batch created"
        ],
        "{stdout}"
    );
    assert!(
        stderr.contains("note: skipped Kubernetes' own system-node-critical")
            && stderr.contains("note: `standard` is the cluster's globalDefault"),
        "{stderr}"
    );
    let listed = plane.ok(&["get", "priorityclasses"]);
    let line =
        |name: &str| listing_line(&listed, name).unwrap_or_else(|| panic!("no {name} in {listed}"));
    assert!(
        line("production").starts_with("production 1000 Never applied paid work"),
        "{listed}"
    );
    assert!(
        line("batch").starts_with("batch -50 PreemptLowerPriority applied"),
        "{listed}"
    );
    assert!(!listed.contains("system-node-critical"), "{listed}");
    plane.ok(&[
        "apply",
        "--dry-run",
        "-f",
        &plane.write("j.yaml", &sleeper("paid", "production", 1, 1)),
    ]);

    refused(
        &plane,
        "bad-classes.yaml",
        "apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {name: Huge}\nvalue: 5\n",
        &["Huge"],
    );
    let listed = plane.ok(&["get", "priorityclasses"]);
    assert!(!listed.to_lowercase().contains("huge"), "{listed}");
}

/// A platform team's Kueue ClusterQueues and Cohort, a namespace's ResourceQuota and Volcano
/// Queues, as `kubectl get -o yaml` prints them, piped to `ferry apply`: each becomes Ferry's
/// Queue (or Cohort) with the same quota, cohort and limits (Volcano's weighted shares of the
/// control plane's GPUs), what has no counterpart (a LocalQueue) is said, and a job naming the
/// queue runs.
#[test]
fn kueue_queues_and_resource_quotas_are_applied_as_queues() {
    let plane = Plane::start(Some(4));
    let cluster_queue = |name: &str, nominal: u32| {
        format!(
            "- apiVersion: kueue.x-k8s.io/v1beta2\n  kind: ClusterQueue\n  metadata: {{name: \
             {name}}}\n  spec:\n    cohortName: lab\n    resourceGroups:\n    - \
             coveredResources: [nvidia.com/gpu]\n      flavors:\n      - name: any\n        \
             resources:\n        - {{name: nvidia.com/gpu, nominalQuota: {nominal}}}\n"
        )
    };
    let exported = format!(
        "apiVersion: v1\nkind: List\nitems:\n{}{}- apiVersion: kueue.x-k8s.io/v1beta2\n  \
         kind: LocalQueue\n  metadata: {{name: main, namespace: research}}\n  spec: \
         {{clusterQueue: research}}\n",
        cluster_queue("research", 2),
        cluster_queue("product", 2)
    );
    let path = plane.write("kueue.yaml", &exported);
    let out = plane.ferry(&["apply", "-f", &path]);
    let (stdout, stderr) = (out.stdout_text(), out.stderr_text());
    assert!(out.status.success(), "{stderr}");
    assert_eq!(
        stdout.lines().collect::<Vec<_>>(),
        ["queue/research created", "queue/product created"],
        "{stdout}"
    );
    assert!(
        stderr.contains(
            "note: LocalQueue research/main: a Ferry job names its queue itself (spec.queue: \
             research)"
        ),
        "{stderr}"
    );
    let queues: Vec<Value> =
        serde_json::from_str(&plane.ok(&["get", "queues", "-o", "json"])).unwrap();
    let research = queues
        .iter()
        .find(|q| q["metadata"]["name"] == "research")
        .unwrap_or_else(|| panic!("{queues:?}"));
    assert_eq!(research["spec"]["cohort"], "lab", "{research}");
    assert_eq!(research["spec"]["quotas"][0]["nominal"], 2, "{research}");

    // A namespace's quota with a job of Ferry's beside it in the same file: both applied.
    let quota = format!(
        "apiVersion: v1\nkind: ResourceQuota\nmetadata: {{name: gpus, namespace: \
         vision}}\nspec: {{hard: {{requests.nvidia.com/gpu: \"1\"}}}}\n---\n{}",
        sleeper("v", "normal", 1, 1).replace("  priority:", "  queue: vision\n  priority:")
    );
    let path = plane.write("quota.yaml", &quota);
    let out = plane.ferry(&["apply", "-f", &path]);
    let (stdout, stderr) = (out.stdout_text(), out.stderr_text());
    assert!(out.status.success(), "{stderr}");
    assert_eq!(
        stdout.lines().collect::<Vec<_>>(),
        ["queue/vision created", "trainjob/v created"],
        "{stdout}"
    );
    assert!(
        stderr.contains("hard caps") && !stderr.contains("skipped"),
        "{stderr}"
    );
    plane.wait_phase("v", "Succeeded", LIMIT);

    // Volcano's queues are owed shares of the control plane's 4 GPUs, weighted 1:3.
    let volcano = |name: &str, weight: u32| {
        format!(
            "apiVersion: scheduling.volcano.sh/v1beta1\nkind: Queue\nmetadata: {{name: \
             {name}}}\nspec: {{weight: {weight}, reclaimable: true}}\n"
        )
    };
    let path = plane.write(
        "volcano.yaml",
        &format!("{}---\n{}", volcano("small", 1), volcano("large", 3)),
    );
    let out = plane.ferry(&["apply", "-f", &path]);
    assert!(out.status.success(), "{}", out.stderr_text());
    assert!(
        out.stderr_text().contains("4 GPUs"),
        "{}",
        out.stderr_text()
    );
    let queues: Vec<Value> =
        serde_json::from_str(&plane.ok(&["get", "queues", "-o", "json"])).unwrap();
    let nominal = |name: &str| {
        queues
            .iter()
            .find(|q| q["metadata"]["name"] == name)
            .map(|q| q["spec"]["quotas"][0]["nominal"].clone())
    };
    assert_eq!(
        (nominal("small"), nominal("large")),
        (Some(1.into()), Some(3.into())),
        "{queues:?}"
    );

    let job = plane.write(
        "job.yaml",
        &sleeper("r", "normal", 2, 1).replace("  priority:", "  queue: research\n  priority:"),
    );
    plane.ok(&["apply", "-f", &job]);
    plane.wait_phase("r", "Succeeded", LIMIT);

    // `ferry delete -f` takes away what the same files made, the job before its queue.
    let kueue = plane.home.path().join("kueue.yaml");
    let deleted = plane.ok(&["delete", "-f", kueue.to_str().unwrap(), "-f", &job]);
    assert_eq!(
        deleted.lines().collect::<Vec<_>>(),
        [
            "trainjob/r deleted",
            "queue/product deleted",
            "queue/research deleted"
        ],
        "{deleted}"
    );
    let listed = plane.ok(&["get", "queues"]);
    assert!(
        !listed.contains("research") && listed.contains("vision"),
        "{listed}"
    );
    let out = plane.ferry(&["delete", "-f", kueue.to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(
        out.stderr_text()
            .contains("2 of the 2 resources defined were not deleted"),
        "{}",
        out.stderr_text()
    );
}

/// A `PriorityClass` applied to a running `ferry up` takes effect without a restart: a job
/// naming it is refused until it exists, then preempts a `high` job; `ferry get
/// priorityclasses` lists it beside `ferry up`'s own classes; it cannot be deleted while a job
/// still names it, and can once none does. Classes and queues are named across namespaces: found,
/// listed and deleted whatever `-n` says; `ferry up`'s own classes are found by name and cannot be
/// deleted.
#[test]
fn a_priority_class_applied_to_a_running_control_plane_takes_effect() {
    let plane = Plane::start(Some(4));
    refused(
        &plane,
        "early.yaml",
        &sleeper("early", "urgent", 2, 1),
        &["spec.priority", "`urgent` does not exist"],
    );
    refused(
        &plane,
        "huge.yaml",
        "apiVersion: ferry.dev/v1alpha1\nkind: PriorityClass\nmetadata: {name: huge}\nspec: {value: 2000000000}\n",
        &["spec.value", "between -1000000000 and 1000000000"],
    );
    // Named across namespaces: the document's namespace is not the class's.
    let applied = plane.apply(
        "urgent.yaml",
        "apiVersion: ferry.dev/v1alpha1\nkind: PriorityClass\nmetadata: {name: urgent, namespace: team-a}\nspec: {value: 1000, description: deadline work}\n",
    );
    assert_eq!(applied.trim(), "priorityclass/urgent created");
    let listed = plane.ok(&["get", "priorityclasses", "-n", "other"]);
    let line =
        |name: &str| listing_line(&listed, name).unwrap_or_else(|| panic!("no {name} in {listed}"));
    assert!(
        line("urgent").starts_with("urgent 1000 PreemptLowerPriority applied deadline work"),
        "{listed}"
    );
    assert!(
        line("high").starts_with("high 100 PreemptLowerPriority ferry up"),
        "{listed}"
    );
    let one = |name: &str| {
        let got = plane.ok(&["get", "priorityclass", name, "-n", "other", "-o", "json"]);
        serde_json::from_str::<Value>(&got).unwrap()[0].clone()
    };
    assert_eq!(one("urgent")["spec"]["value"], 1000);
    assert!(one("urgent")["metadata"].get("namespace").is_none());
    assert_eq!(one("high")["status"]["builtIn"], true);
    let out = plane.ferry(&["delete", "priorityclass", "high", "-n", "other"]);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success(), "ferry up's own class was deleted");
    assert!(
        err.contains("PriorityClass `high` is ferry up's own")
            && err.contains("apply a PriorityClass named `high`"),
        "{err}"
    );

    plane.apply("big.yaml", &sleeper("big", "high", 4, 600));
    plane.wait_phase("big", "Running", LIMIT);
    wait_for_step(&plane, "big", 1);
    plane.apply("rush.yaml", &sleeper("rush", "urgent", 2, 600));
    plane.wait_phase("rush", "Running", LIMIT);
    let events = plane.events("big");
    let preempted = find(&events, "Preempted", |e| e["to"] == "Preempted");
    assert!(
        message(&events[preempted]).contains("default/rush (priority urgent over high)"),
        "{}",
        events[preempted]
    );

    let out = plane.ferry(&["delete", "priorityclass", "urgent"]);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success(), "a class in use was deleted");
    assert!(
        err.contains("PriorityClass urgent is named by") && err.contains("default/rush"),
        "{err}"
    );
    plane.ok(&["cancel", "job", "rush"]);
    plane.ok(&["cancel", "job", "big"]);
    plane.wait_phase("rush", "Cancelled", LIMIT);
    plane.ok(&["delete", "priorityclass", "urgent", "-n", "other"]);
    let listed = plane.ok(&["get", "priorityclasses"]);
    assert!(!listed.contains("urgent"), "{listed}");
    refused(
        &plane,
        "late.yaml",
        &sleeper("late", "urgent", 2, 1),
        &["spec.priority", "`urgent` does not exist"],
    );

    let queue = |ns: &str, nominal: u32| {
        format!(
            "apiVersion: ferry.dev/v1alpha1\nkind: Queue\nmetadata: {{name: a, namespace: {ns}}}\nspec: {{quotas: [{{flavor: any, nominal: {nominal}}}]}}\n"
        )
    };
    assert_eq!(
        plane.apply("a-x.yaml", &queue("team-x", 1)).trim(),
        "queue/a created"
    );
    assert_eq!(
        plane.apply("a-y.yaml", &queue("team-y", 2)).trim(),
        "queue/a configured"
    );
    let queues = plane.ok(&["get", "queues", "-n", "other"]);
    assert_eq!(
        queues.lines().filter(|l| l.starts_with("a ")).count(),
        1,
        "{queues}"
    );
    let described = plane.ok(&["describe", "queue", "a", "-n", "z"]);
    let nominal = described
        .lines()
        .find(|l| l.trim_start().starts_with("virtual"))
        .and_then(|l| l.split_whitespace().nth(1));
    assert_eq!(nominal, Some("2"), "{described}");
    plane.ok(&["delete", "queue", "a", "-n", "other"]);
    assert!(!plane.ok(&["get", "queues", "-A"]).contains("\na "));
}

/// A job on queue `queue` running `examples/sleeper.py STEPS` on `gpus` GPUs.
fn queued_sleeper(name: &str, queue: &str, gpus: u32, steps: u32) -> String {
    format!(
        "apiVersion: ferry.dev/v1alpha1\nkind: TrainJob\nmetadata: {{name: {name}}}\nspec:\n  \
         engine: command\n  command: [python3, examples/sleeper.py, '{steps}']\n  queue: {queue}\n  \
         resources: {{nodes: 1, procsPerNode: 1, gpusPerNode: {gpus}}}\n  \
         onFailure: {{maxRestarts: 0, graceSeconds: 10}}\n"
    )
}

/// A gang that must borrow drains the machine for itself. Nobody knows when `first` ends (no
/// time limit), so nobody knows when the gang can start: an owner's job that fits its own
/// quota runs meanwhile on a GPU held for the gang, on loan, and gives it back gracefully
/// (SIGTERM, checkpoint) when `first` ends. The gang, started by taking back that loan, is not
/// reclaimed by the owner: it is admitted once, never preempted, runs once; the owner resumes
/// from its checkpoint after it, and every job finishes. (The scheduler's unit tests cover the
/// same drain without loans: an owner that waited through it is started first, never a gang it
/// would reclaim at once.)
#[test]
fn an_owner_borrows_the_gpus_a_draining_gang_holds_and_gives_them_back() {
    let plane = Plane::start(Some(4));
    let queues = "apiVersion: ferry.dev/v1alpha1\nkind: Queue\nmetadata: {name: a}\nspec: {cohort: c, quotas: [{flavor: any, nominal: 2}]}\n---\napiVersion: ferry.dev/v1alpha1\nkind: Queue\nmetadata: {name: b}\nspec: {cohort: c, quotas: [{flavor: any, nominal: 2}]}\n";
    plane.apply("queues.yaml", queues);
    plane.apply("first.yaml", &queued_sleeper("first", "a", 1, 12));
    plane.wait_phase("first", "Running", LIMIT);
    // The 4-GPU gang needs 2 GPUs of b's quota: it waits for `first` and holds the machine.
    plane.apply("gang.yaml", &queued_sleeper("gang", "a", 4, 3));
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(plane.job("gang")["status"]["phase"], "Queued");
    plane.apply("owner.yaml", &queued_sleeper("owner", "b", 1, 30));
    plane.wait_phase("owner", "Running", LIMIT);
    for name in ["first", "gang", "owner"] {
        plane.wait_phase(name, "Succeeded", LIMIT);
    }
    let events = plane.events("gang");
    let transitions: Vec<(&str, &str)> = events
        .iter()
        .filter_map(|e| Some((e["from"].as_str()?, e["to"].as_str()?)))
        .collect();
    let count = |to: &str| transitions.iter().filter(|t| t.1 == to).count();
    assert_eq!(count("Preempted"), 0, "{events:#?}");
    assert_eq!(count("Admitted"), 1, "{events:#?}");
    assert_eq!(count("Running"), 1, "{events:#?}");
    let owner = plane.events("owner");
    let loan_ended = find(&owner, "Preempted", |e| e["to"] == "Preempted");
    assert!(
        message(&owner[loan_ended]).contains("it ran on GPUs held for that gang"),
        "{}",
        owner[loan_ended]
    );
    let runs: Vec<usize> = (0..owner.len())
        .filter(|&i| owner[i]["to"] == "Running")
        .collect();
    assert_eq!(runs.len(), 2, "lent, then resumed: {owner:#?}");
    let gang_done = find(&events, "Succeeded", |e| e["to"] == "Succeeded");
    assert!(
        at(&owner, runs[1]) >= at(&events, gang_done),
        "the owner did not take its GPU back from the running gang"
    );
}

/// A job in the default queue running `examples/sleeper.py STEPS` on `gpus` GPUs, with a time
/// limit of `limit` seconds when given (the scheduler's expected duration).
fn limited_sleeper(name: &str, gpus: u32, steps: u32, limit: Option<u64>) -> String {
    let limit = limit.map_or(String::new(), |l| format!("  maxRuntimeSeconds: {l}\n"));
    sleeper_with(name, "normal", gpus, steps, &limit)
}

/// `sleeper` with `extra` spec lines (time limits).
fn sleeper_with(name: &str, priority: &str, gpus: u32, steps: u32, extra: &str) -> String {
    format!("{}{extra}", sleeper(name, priority, gpus, steps))
}

/// A running job without a time limit gives the scheduler no end to plan around: work behind
/// the gang waiting for it may only borrow the free GPU, on loan, and gives it back when the
/// gang can start. Once `ferry apply` gives the running job a limit, the scheduler knows when
/// the gang can start at the latest, and a job that ends before then runs in that shadow as
/// plain backfill: when the running job ends early, the gang waits for it rather than
/// preempting it.
#[test]
fn a_limit_given_to_a_running_job_lets_short_work_backfill() {
    let plane = Plane::start(Some(2));
    plane.apply("first.yaml", &limited_sleeper("first", 1, 12, None));
    plane.wait_phase("first", "Running", LIMIT);
    plane.apply("gang.yaml", &limited_sleeper("gang", 2, 2, Some(600)));
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(plane.job("gang")["status"]["phase"], "Queued");
    let out = plane.apply("first.yaml", &limited_sleeper("first", 1, 12, Some(600)));
    assert!(out.contains("configured"), "{out}");
    // Ends well after `first` (12 steps) but before its 600 s limit.
    plane.apply("short.yaml", &limited_sleeper("short", 1, 30, Some(120)));
    for name in ["first", "short", "gang"] {
        plane.wait_phase(name, "Succeeded", LIMIT);
    }
    let short = plane.events("short");
    assert!(
        !short.iter().any(|e| e["to"] == "Preempted"),
        "backfill, not a loan: {short:#?}"
    );
    let gang = plane.events("gang");
    let gang_ran = find(&gang, "Running", |e| e["to"] == "Running");
    let short_done = find(&short, "Succeeded", |e| e["to"] == "Succeeded");
    assert!(
        at(&gang, gang_ran) >= at(&short, short_done),
        "the gang waited for the backfilled job"
    );
}

/// A job preempted and waiting in its queue when the control plane restarts is planned, by
/// the rebuilt scheduler, with what its first run left of `spec.maxTotalRuntimeSeconds`, not
/// the whole budget: the gang waiting for its GPU is due when that remainder is over, so a
/// job that would run longer than that only borrows the free GPU and gives it back
/// (preempted) when the gang's turn comes. Planned with the whole budget, the gang would look
/// due much later, that job would take the GPU as plain backfill, and the gang would wait
/// for it to finish.
#[test]
fn a_requeued_job_is_planned_with_what_is_left_of_its_budget_after_a_restart() {
    let mut plane = Plane::start(Some(2));
    // 14 steps within a 20 s budget; preempted after about 10 of them.
    plane.apply(
        "budgeted.yaml",
        &sleeper_with("budgeted", "low", 1, 14, "  maxTotalRuntimeSeconds: 20\n"),
    );
    plane.wait_phase("budgeted", "Running", LIMIT);
    wait_for_step(&plane, "budgeted", 10);
    plane.apply("urgent.yaml", &sleeper("urgent", "high", 2, 6));
    plane.wait_phase("urgent", "Running", LIMIT);
    assert_eq!(plane.job("budgeted")["status"]["phase"], "Queued");
    plane.restart();
    plane.apply(
        "gang.yaml",
        &sleeper_with("gang", "low", 2, 2, "  maxRuntimeSeconds: 60\n"),
    );
    plane.wait_phase("urgent", "Succeeded", LIMIT);
    plane.wait_phase("budgeted", "Running", LIMIT);
    // Left of the budget: about 10 s; the whole budget: 20 s. A 14 s limit falls between.
    plane.apply(
        "short.yaml",
        &sleeper_with("short", "low", 1, 8, "  maxRuntimeSeconds: 14\n"),
    );
    for name in ["budgeted", "gang", "short"] {
        plane.wait_phase(name, "Succeeded", LIMIT);
    }
    let budgeted = plane.events("budgeted");
    let runs = budgeted.iter().filter(|e| e["to"] == "Running").count();
    assert_eq!(runs, 2, "preempted once by `urgent`: {budgeted:#?}");
    let short = plane.events("short");
    let gang = plane.events("gang");
    let loan_ended = find(&short, "Preempted", |e| e["to"] == "Preempted");
    assert!(
        message(&short[loan_ended]).contains("default/gang: it ran on GPUs held for that gang"),
        "{}",
        short[loan_ended]
    );
    let gang_ran = find(&gang, "Running", |e| e["to"] == "Running");
    let short_done = find(&short, "Succeeded", |e| e["to"] == "Succeeded");
    assert!(
        at(&gang, gang_ran) < at(&short, short_done),
        "the gang started when `budgeted` ended, not after `short`"
    );
}

/// Polls `name` until `pred` holds of its JSON, failing after `LIMIT`; returns it.
fn wait_job(plane: &Plane, name: &str, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + LIMIT;
    loop {
        let job = plane.job(name);
        if pred(&job) {
            return job;
        }
        assert!(Instant::now() < deadline, "{name}: no {what}: {job:#}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn expected_start(job: &Value) -> Option<chrono::DateTime<chrono::Utc>> {
    job["status"]["estimatedStartTime"]
        .as_str()
        .map(|t| t.parse().expect("RFC 3339"))
}

/// A queued gang first in line for its GPUs is told when it starts (`status.estimatedStartTime`,
/// `ferry describe job`, `ferry get jobs -o wide`): when the running job in its way reaches its
/// time limit, moved when that limit changes; a job queued behind it is told whom it waits for
/// and when it starts, after the gang's limit; the estimate goes once the gang runs.
#[test]
fn the_job_first_in_line_is_told_when_it_starts() {
    let plane = Plane::start(Some(2));
    plane.apply("first.yaml", &limited_sleeper("first", 1, 300, Some(600)));
    plane.wait_phase("first", "Running", LIMIT);
    let events = plane.events("first");
    let admitted = at(
        &events,
        find(&events, "Admitted", |e| e["to"] == "Admitted"),
    );
    plane.apply("gang.yaml", &limited_sleeper("gang", 2, 2, Some(60)));
    let gang = wait_job(&plane, "gang", "expected start", |j| {
        expected_start(j).is_some()
    });
    let off = |job: &Value, limit: i64| {
        (expected_start(job).expect("expected start") - admitted).num_seconds() - limit
    };
    assert!(off(&gang, 600).abs() <= 2, "{gang:#}");
    assert!(
        message(&gang["status"]).contains("first in line: it starts when the running work"),
        "{gang:#}"
    );
    let described = plane.ok(&["describe", "job", "gang"]);
    assert!(described.contains("Expected start"), "{described}");
    // A shorter limit for the running job brings the start forward.
    plane.apply("first.yaml", &limited_sleeper("first", 1, 300, Some(200)));
    let gang = wait_job(&plane, "gang", "an earlier start", |j| {
        expected_start(j).is_some_and(|t| (t - admitted).num_seconds() < 400)
    });
    assert!(off(&gang, 200).abs() <= 2, "{gang:#}");
    // A job behind the gang is told whom it waits for, and when it starts: when the gang,
    // started then, reaches its own 60 s limit.
    plane.apply("later.yaml", &limited_sleeper("later", 2, 2, Some(60)));
    let later = wait_job(&plane, "later", "an expected start", |j| {
        expected_start(j).is_some()
    });
    let status = message(&later["status"]);
    assert!(
        status.contains("first in line: default/gang")
            && status.contains("expected to start after default/gang"),
        "{later:#}"
    );
    let gang = plane.job("gang");
    let (gang_at, later_at) = (
        expected_start(&gang).expect("the gang's start"),
        expected_start(&later).expect("the later job's start"),
    );
    assert!(later_at > gang_at, "{gang:#} {later:#}");
    assert!(off(&later, 260).abs() <= 2, "{later:#}");
    let described = plane.ok(&["describe", "job", "later"]);
    assert!(described.contains("Expected start"), "{described}");
    // The queue lists both in the order they are tried, each with its start.
    let queue: Value =
        serde_json::from_str(&plane.ok(&["get", "queue", "default", "-o", "json"])).unwrap();
    let status = &queue[0]["status"];
    assert_eq!(status["builtIn"], true, "{queue:#}");
    assert_eq!(
        (&status["usedGpus"], &status["running"], &status["pending"]),
        (&json!(1), &json!(1), &json!(2)),
        "{queue:#}"
    );
    let listed = status["pendingWorkloads"]
        .as_array()
        .expect("pendingWorkloads");
    let jobs: Vec<&str> = listed.iter().filter_map(|p| p["job"].as_str()).collect();
    assert_eq!(jobs, ["default/gang", "default/later"], "{queue:#}");
    for (p, at) in listed.iter().zip([gang_at, later_at]) {
        let told: chrono::DateTime<chrono::Utc> =
            p["estimatedStartTime"].as_str().unwrap().parse().unwrap();
        assert!((told - at).num_seconds().abs() <= 2, "{queue:#}");
    }
    let described = plane.ok(&["describe", "queue", "default"]);
    let order: Vec<&str> = described
        .lines()
        .filter_map(|l| {
            l.split_whitespace()
                .nth(1)
                .filter(|j| j.starts_with("default/"))
        })
        .collect();
    assert_eq!(order, ["default/gang", "default/later"], "{described}");
    let wide = plane.ok(&["get", "jobs", "-o", "wide"]);
    for name in ["gang", "later"] {
        let row = wide
            .lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_else(|| panic!("{wide}"));
        let starts = row.split_whitespace().nth(10).unwrap_or_default();
        assert!(starts.ends_with('s'), "STARTS of {name}: {wide}");
    }
    plane.ok(&["cancel", "job", "first"]);
    let gang = plane.wait_phase("gang", "Running", LIMIT);
    assert!(expected_start(&gang).is_none(), "{gang:#}");
    plane.wait_phase("later", "Succeeded", LIMIT);
}

/// A platform team stops a team's queue (`spec.stopPolicy`, Kueue's field): under `Hold` a job
/// of it stays queued, told why, while the other team runs, borrowing its idle quota; under
/// `HoldAndDrain` a running job is preempted gracefully, saying the queue was stopped, and
/// waits; released (`None`), both run and finish, the drained one from its checkpoint.
#[test]
fn a_stopped_queue_holds_its_jobs_and_drains_them_until_released() {
    let plane = Plane::start(Some(4));
    let team = |name: &str, policy: &str| {
        format!(
            "apiVersion: ferry.dev/v1alpha1\nkind: Queue\nmetadata: {{name: {name}}}\nspec: {{cohort: lab, quotas: [{{flavor: any, nominal: 2}}], stopPolicy: {policy}}}\n"
        )
    };
    let teams = |a: &str, b: &str| format!("{}---\n{}", team("team-a", a), team("team-b", b));
    let in_queue = |job: String, queue: &str| {
        job.replace("  priority:", &format!("  queue: {queue}\n  priority:"))
    };
    plane.apply("teams.yaml", &teams("Hold", "None"));
    plane.apply(
        "held.yaml",
        &in_queue(sleeper("held", "normal", 1, 2), "team-a"),
    );
    plane.apply(
        "wide.yaml",
        &in_queue(sleeper("wide", "normal", 3, 14), "team-b"),
    );
    plane.wait_phase("wide", "Running", LIMIT);
    wait_for_step(&plane, "wide", 2);
    let held = plane.job("held");
    assert_eq!(held["status"]["phase"], "Queued", "{held:#}");
    assert!(
        message(&held["status"]).contains(
            "queue team-a is held (spec.stopPolicy: Hold); it starts once the queue is released"
        ),
        "{held:#}"
    );
    let listed = plane.ok(&["get", "queues"]);
    let state = |listed: &str, name: &str| {
        listed
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1).map(str::to_owned))
    };
    assert_eq!(
        state(&listed, "team-a").as_deref(),
        Some("Held"),
        "{listed}"
    );
    assert_eq!(
        state(&listed, "team-b").as_deref(),
        Some("Active"),
        "{listed}"
    );

    plane.apply("teams.yaml", &teams("Hold", "HoldAndDrain"));
    let wide = wait_job(&plane, "wide", "held message", |j| {
        j["status"]["phase"] == "Queued"
            && message(&j["status"])
                .contains("queue team-b is held (spec.stopPolicy: HoldAndDrain)")
    });
    let events = plane.events("wide");
    let preempted = find(&events, "Preempted", |e| e["to"] == "Preempted");
    assert!(
        message(&events[preempted]).contains(
            "queue team-b was stopped (spec.stopPolicy: HoldAndDrain); it waits there and \
             resumes from its checkpoint once the queue is released"
        ),
        "{}",
        events[preempted]
    );
    assert_eq!(wide["status"]["restarts"], 0, "{wide:#}");
    let described = plane.ok(&["describe", "queue", "team-b"]);
    assert!(
        described.contains("State:        Held (spec.stopPolicy: HoldAndDrain)"),
        "{described}"
    );
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(plane.job("wide")["status"]["phase"], "Queued");

    plane.apply("teams.yaml", &teams("None", "None"));
    plane.wait_phase("held", "Succeeded", LIMIT);
    let wide = plane.wait_phase("wide", "Succeeded", LIMIT);
    let events = plane.events("wide");
    assert_eq!(
        events.iter().filter(|e| e["to"] == "Preempted").count(),
        1,
        "stopped once: {events:#?}"
    );
    assert!(
        wide["status"]["resumedFrom"]
            .as_str()
            .is_some_and(|c| c.contains("checkpoints/step-")),
        "{wide:#}"
    );
}

/// The line where the sleeper caught SIGTERM (`SIGTERM at step N: …`) and its step.
fn sigterm_step(log: &str) -> (&str, u32) {
    let line = log
        .lines()
        .find(|l| l.starts_with("SIGTERM at step"))
        .unwrap_or_else(|| panic!("no graceful stop in {log}"));
    let step = line
        .split_whitespace()
        .nth(3)
        .unwrap()
        .trim_end_matches(':')
        .parse()
        .unwrap();
    (line, step)
}

/// `ferry` with `args` must fail with an error saying `needle`.
fn refused_now(plane: &Plane, args: &[&str], needle: &str) {
    let out = plane.ferry(args);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success(), "{args:?} succeeded");
    assert!(err.contains(needle), "{args:?}: no {needle:?} in {err}");
}

/// `ferry suspend` / `ferry resume` on `ferry up --gpus 2`: a queued job suspended by applying
/// `spec.suspend: true` leaves the queue; a running one checkpoints on SIGTERM, gives its GPUs
/// to the job waiting behind it, stays suspended across a control-plane restart, and once
/// resumed continues from that checkpoint without counting a restart. Misuses get a 409.
#[test]
fn a_suspended_job_frees_its_gpus_and_resumes_from_its_checkpoint() {
    let mut plane = Plane::start(Some(2));
    plane.apply("long.yaml", &sleeper("long", "normal", 2, 10));
    plane.wait_phase("long", "Running", LIMIT);
    wait_for_step(&plane, "long", 3);
    plane.apply("short.yaml", &sleeper("short", "normal", 2, 1));
    plane.apply("held.yaml", &sleeper("held", "normal", 1, 1));
    plane.wait_phase("held", "Queued", LIMIT);
    refused_now(
        &plane,
        &["resume", "job", "long"],
        "job default/long is not suspended (Running); nothing to resume",
    );

    // A queued job suspended through its spec leaves the scheduler at once.
    let held = sleeper("held", "normal", 1, 1) + "  suspend: true\n";
    assert!(plane.apply("held.yaml", &held).contains("configured"));
    assert_eq!(plane.job("held")["status"]["phase"], "Suspended");

    // The running job stops as if preempted; the job behind it takes the GPUs.
    assert_eq!(
        plane.ok(&["suspend", "job", "long"]).trim(),
        "trainjob/long suspended"
    );
    plane.wait_phase("short", "Succeeded", LIMIT);
    plane.restart();
    std::thread::sleep(Duration::from_secs(2));
    for name in ["long", "held"] {
        assert_eq!(plane.job(name)["status"]["phase"], "Suspended", "{name}");
    }
    let table = plane.ok(&["get", "jobs"]);
    assert!(
        table
            .lines()
            .any(|l| l.contains("long") && l.contains("Suspended")),
        "{table}"
    );
    let log = plane.ok(&["logs", "long"]);
    let (_, step) = sigterm_step(&log);
    let ckpt = format!("checkpoints/step-{step}");

    assert_eq!(
        plane.ok(&["resume", "job", "long"]).trim(),
        "trainjob/long queued"
    );
    let done = plane.wait_phase("long", "Succeeded", LIMIT);
    assert_eq!(
        done["status"]["restarts"], 0,
        "a suspension is not a failure"
    );
    assert_eq!(done["status"]["attempt"], 2);
    let resumed = done["status"]["resumedFrom"].as_str().unwrap();
    assert!(resumed.ends_with(&ckpt), "{resumed} is not {ckpt}");
    let second = plane.ok(&["logs", "long"]);
    assert!(second.contains(&format!("at step {step}")), "{second}");
    assert!(second.contains("\"step\": 10,"), "{second}");

    let events = plane.events("long");
    let suspended = find(&events, "Suspended", |e| e["to"] == "Suspended");
    assert!(
        message(&events[suspended]).starts_with("suspended by request; its ranks get SIGTERM"),
        "{}",
        events[suspended]
    );
    let resumed = find(&events, "Resumed", |e| e["reason"] == "Resumed");
    assert!(resumed > suspended);
    assert!(
        message(&events[resumed]).ends_with(&ckpt),
        "{}",
        events[resumed]
    );
    refused_now(
        &plane,
        &["resume", "job", "long"],
        "job default/long already finished (Succeeded); nothing to resume",
    );
    refused_now(
        &plane,
        &["suspend", "job", "long"],
        "already finished (Succeeded)",
    );

    // A suspended job is cancelled like any other; it never ran.
    assert_eq!(plane.job("held")["status"]["phase"], "Suspended");
    assert_eq!(
        plane.ok(&["cancel", "job", "held"]).trim(),
        "trainjob/held cancelled"
    );
    let held_events = plane.events("held");
    assert!(
        held_events.iter().all(|e| e["to"] != "Admitted"),
        "{held_events:#?}"
    );
}

/// Waits for `name` to succeed, resumed from the checkpoint of `step` with no restart counted.
fn finished_from_checkpoint(plane: &Plane, name: &str, step: u32) {
    let done = plane.wait_phase(name, "Succeeded", LIMIT);
    assert_eq!(done["status"]["restarts"], 0, "{done:#}");
    let resumed = done["status"]["resumedFrom"].as_str().unwrap();
    assert!(
        resumed.ends_with(&format!("checkpoints/step-{step}")),
        "{resumed} is not step {step}"
    );
}

/// Queue `team-a`, 2 GPUs of quota, stopped by `policy`.
fn team_a(policy: &str) -> String {
    format!(
        "apiVersion: ferry.dev/v1alpha1\nkind: Queue\nmetadata: {{name: team-a}}\nspec: {{quotas: [{{flavor: any, nominal: 2}}], stopPolicy: {policy}}}\n"
    )
}

/// `job` put in queue `team-a`.
fn in_team_a(job: String) -> String {
    job.replace("  priority:", "  queue: team-a\n  priority:")
}

/// A 12-step, 2-GPU sleeper in `team-a` whose SIGTERM checkpoint takes 8 s (its grace is 10).
fn slow_to_stop(name: &str, priority: &str) -> String {
    in_team_a(sleeper_with(
        name,
        priority,
        2,
        12,
        "  env: {SLEEPER_TERM_DELAY: '8'}\n",
    ))
}

/// A suspended job whose ranks take long to checkpoint (`SLEEPER_TERM_DELAY`) keeps its GPUs
/// until they exit, through everything that can happen meanwhile: `ferry resume` is taken (and
/// done once they have exited), its queue is stopped with `HoldAndDrain` (a suspended job is
/// not preempted a second time), and the control plane is killed and restarted. After the
/// restart the job is still suspended until its ranks have exited, then back in its held
/// queue; once the queue is released the job behind it and then it run, and it continues from
/// the checkpoint its slow SIGTERM wrote, with no restart counted.
#[test]
fn a_suspended_job_still_checkpointing_survives_a_drain_and_a_restart() {
    let mut plane = Plane::start(Some(2));
    let queue = team_a;
    plane.apply("team.yaml", &queue("None"));
    plane.apply("slow.yaml", &slow_to_stop("slow", "normal"));
    plane.wait_phase("slow", "Running", LIMIT);
    wait_for_step(&plane, "slow", 3);
    plane.apply("next.yaml", &in_team_a(sleeper("next", "normal", 2, 1)));

    assert_eq!(
        plane.ok(&["suspend", "job", "slow"]).trim(),
        "trainjob/slow suspended"
    );
    plane.wait_log("slow", "SIGTERM: checkpointing step", LIMIT);
    // A resume is taken now and done once the ranks have exited: applying the job's file
    // (without `spec.suspend`) asks for it, and `ferry resume` then finds it asked for.
    let applied = plane.apply("slow.yaml", &slow_to_stop("slow", "normal"));
    assert!(applied.contains("configured"), "{applied}");
    assert_eq!(plane.job("slow")["status"]["phase"], "Suspended");
    assert_eq!(
        plane.ok(&["resume", "job", "slow"]).trim(),
        "trainjob/slow resume requested: queued once its ranks have exited"
    );
    plane.apply("team.yaml", &queue("HoldAndDrain"));
    plane.restart();
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(plane.job("slow")["status"]["phase"], "Suspended");
    assert_eq!(plane.job("next")["status"]["phase"], "Queued");

    let log = plane.wait_log("slow", "checkpoint written", LIMIT);
    let (_, step) = sigterm_step(&log);
    // The resume asked for before the restart holds: back in its queue, which is held, so
    // the GPUs the slow ranks gave back wait for its release.
    plane.wait_phase("slow", "Queued", LIMIT);
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(plane.job("next")["status"]["phase"], "Queued");
    assert_eq!(plane.job("slow")["status"]["phase"], "Queued");
    plane.apply("team.yaml", &queue("None"));
    plane.wait_phase("next", "Succeeded", LIMIT);
    finished_from_checkpoint(&plane, "slow", step);
    let events = plane.events("slow");
    let count = |reason: &str| events.iter().filter(|e| e["reason"] == reason).count();
    assert_eq!(
        (
            count("Suspended"),
            count("ResumeRequested"),
            count("Preempted")
        ),
        (1, 1, 0),
        "suspended once, one resume recorded, never preempted by the drain: {events:#?}"
    );
    assert!(
        events
            .iter()
            .any(|e| e["reason"] == "ControlPlaneRestarted"),
        "{events:#?}"
    );
}

/// The same for a preempted job: while its ranks still checkpoint, the control plane is
/// restarted (the rebuilt scheduler takes it for running) and then its queue is drained. It
/// is not told to stop a second time, keeps its GPUs until its ranks exit, waits in the held
/// queue, and once the queue is released resumes from the checkpoint its one SIGTERM wrote,
/// after the job that preempted it.
#[test]
fn a_preempted_job_still_checkpointing_survives_a_restart_and_a_drain() {
    let mut plane = Plane::start(Some(2));
    plane.apply("team.yaml", &team_a("None"));
    plane.apply("slow.yaml", &slow_to_stop("slow", "low"));
    plane.wait_phase("slow", "Running", LIMIT);
    wait_for_step(&plane, "slow", 3);
    plane.apply("urgent.yaml", &in_team_a(sleeper("urgent", "high", 2, 1)));
    plane.wait_log("slow", "SIGTERM: checkpointing step", LIMIT);
    plane.restart();
    plane.apply("team.yaml", &team_a("HoldAndDrain"));
    let log = plane.wait_log("slow", "checkpoint written", LIMIT);
    let (_, step) = sigterm_step(&log);
    assert_eq!(plane.job("urgent")["status"]["phase"], "Queued");
    plane.apply("team.yaml", &team_a("None"));
    plane.wait_phase("urgent", "Succeeded", LIMIT);
    finished_from_checkpoint(&plane, "slow", step);
    let events = plane.events("slow");
    let preempted: Vec<&str> = events
        .iter()
        .filter(|e| e["reason"] == "Preempted")
        .map(message)
        .collect();
    assert_eq!(preempted.len(), 1, "{events:#?}");
    assert!(preempted[0].contains("urgent"), "{preempted:?}");
}

/// `examples/cohort-tree.yaml` on `ferry up --gpus 4`: `ferry get cohorts` lists the tree,
/// weights included, and while jobs run what each subtree uses and its weighted share (as
/// `ferry get queues` and `ferry describe cohort` do); queue nlp (1 GPU of its own) runs a 2-GPU job by borrowing through its
/// cohort `research`, whose borrowing limit of 1 then holds a third nlp GPU back: that job
/// waits while a GPU stays idle beside serving's 1-GPU job, admitted after it. A cohort whose deletion would leave nlp
/// alone in an empty cohort is refused; its parent may go.
#[test]
fn a_cohort_tree_holds_a_queue_to_its_borrowing_limit() {
    let plane = Plane::start(Some(4));
    plane.ok(&["apply", "-f", "examples/cohort-tree.yaml"]);
    let listed = plane.ok(&["get", "cohorts"]);
    let rows: Vec<Vec<&str>> = listed
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        rows[0],
        [
            "NAME",
            "PARENT",
            "WEIGHT",
            "QUOTAS",
            "BORROWING",
            "LIMIT",
            "LENDING",
            "LIMIT",
            "USED",
            "SHARE",
            "AGE"
        ],
        "{listed}"
    );
    assert_eq!(
        rows[1][..6],
        ["org", "-", "1.0000", "any=1", "-", "-"],
        "{listed}"
    );
    assert_eq!(
        rows[2][..6],
        ["research", "org", "2.0000", "any=0", "any=1", "-"],
        "{listed}"
    );

    let in_queue = |name: &str, queue: &str, gpus: u32, steps: u32| {
        sleeper(name, "normal", gpus, steps)
            .replace("  priority:", &format!("  queue: {queue}\n  priority:"))
    };
    plane.apply("wide.yaml", &in_queue("wide", "nlp", 2, 60));
    plane.wait_phase("wide", "Running", LIMIT);
    plane.apply("more.yaml", &in_queue("more", "nlp", 1, 1));
    plane.apply("serve.yaml", &in_queue("serve", "serving", 1, 60));
    plane.wait_phase("serve", "Running", LIMIT);
    let more = plane.job("more");
    assert_eq!(more["status"]["phase"], "Queued");
    // While they run: research's subtree uses 2 GPUs on its 1 nominal (nlp's), 1 borrowed over
    // its weight 2; org's whole tree 3 of its 4 (its own 1, nlp's 1, serving's 2).
    let listed = plane.ok(&["get", "cohorts"]);
    let row = |listed: &str, name: &str, at: std::ops::Range<usize>| -> Vec<String> {
        let line = listed.lines().find(|l| l.starts_with(&format!("{name} ")));
        let cells: Vec<&str> = line.unwrap_or_default().split_whitespace().collect();
        cells
            .get(at)
            .unwrap_or_default()
            .iter()
            .map(|c| c.to_string())
            .collect()
    };
    assert_eq!(row(&listed, "org", 6..8), ["3/4", "0.0"], "{listed}");
    assert_eq!(row(&listed, "research", 6..8), ["2/1", "0.5"], "{listed}");
    // nlp itself borrows the same GPU over its weight 1; serving borrows none.
    let queues = plane.ok(&["get", "queues"]);
    assert!(queues.starts_with("NAME "), "{queues}");
    assert_eq!(row(&queues, "nlp", 5..8), ["2", "1", "1.0"], "{queues}");
    assert_eq!(row(&queues, "serving", 5..8), ["1", "0", "0.0"], "{queues}");
    let described = plane.ok(&["describe", "cohort", "org"]);
    for line in ["GPUs:         3 used of 4 nominal", "Share:        0.0"] {
        assert!(described.contains(line), "{line:?} in {described}");
    }
    assert_eq!(
        row(&described.replace("  Cohort", "Cohort"), "Cohort", 1..6),
        ["research", "2", "2/1", "1", "0.5"],
        "{described}"
    );
    assert_eq!(
        row(&described.replace("  Queue", "Queue"), "Queue", 1..6),
        ["serving", "1", "1/2", "0", "0.0"],
        "{described}"
    );
    // The department's limit is nlp's: it may never use more than 2 GPUs, and the reason says so.
    let why = more["status"]["message"].as_str().unwrap_or_default();
    assert!(
        why.contains("queue nlp uses 2 of the 2 it may use"),
        "{more}"
    );

    refused_now(
        &plane,
        &["delete", "cohort", "research"],
        "Cohort research is named by Queue nlp",
    );
    plane.ok(&["delete", "cohort", "org"]);
    let listed = plane.ok(&["get", "cohorts"]);
    assert!(
        !listed.contains("\norg ") && listed.contains("\nresearch "),
        "{listed}"
    );
    for job in ["wide", "more", "serve"] {
        plane.ok(&["cancel", "job", job]);
    }
}
