//! `get`, `describe`, `cancel`, `suspend`, `resume`, `delete`.

use std::time::Duration;

use anyhow::{anyhow, bail};
use ferry_spec::{JobPhase, ResourceKind};
use reqwest::Method;
use serde_json::Value;

use crate::args::{DeleteArgs, DescribeArgs, GetArgs, JobActionArgs, Output};
use crate::client::Client;
use crate::output::{self, age, cell, time_left};
use crate::table::Table;

/// The API path of one generic object (deployments, queues, priority classes, cohorts). Queues,
/// priority classes and cohorts are named across namespaces, so theirs names none.
fn object_path(kind: ResourceKind, ns: &str, name: &str) -> String {
    if kind.is_cluster_scoped() {
        format!("/api/v1/{}/{name}", kind.plural())
    } else {
        format!("/api/v1/namespaces/{ns}/{}/{name}", kind.plural())
    }
}

fn job_path(ns: &str, name: &str) -> String {
    format!("/api/v1/namespaces/{ns}/jobs/{name}")
}

/// The table's header, with LABELS last under `--show-labels`.
fn header<'a>(columns: &[&'a str], show_labels: bool) -> Vec<&'a str> {
    let mut header = columns.to_vec();
    if show_labels {
        header.push("LABELS");
    }
    header
}

/// The LABELS cell: `k=v,k2=v2` in key order, `-` for none.
fn labels_cell(labels: &Value) -> String {
    let pairs: Vec<String> = labels
        .as_object()
        .into_iter()
        .flatten()
        .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
        .collect();
    if pairs.is_empty() {
        "-".into()
    } else {
        pairs.join(",")
    }
}

pub async fn get(client: &Client, args: GetArgs) -> anyhow::Result<()> {
    if let (Some(name), Some(selector)) = (&args.name, &args.selector) {
        bail!(
            "give a name or -l, not both (got {name:?} and -l {selector:?}); `ferry get {} -l \
             SELECTOR` lists what the labels select",
            args.kind
        );
    }
    // A list's query: the namespace unless -A, the selector with -l.
    let mut query: Vec<(&str, &str)> = Vec::new();
    if !args.all_namespaces {
        query.push(("namespace", &args.namespace));
    }
    if let Some(selector) = &args.selector {
        query.push(("labelSelector", selector));
    }
    let show_labels = args.show_labels;
    match args.kind.to_ascii_lowercase().as_str() {
        "models" | "model" => {
            let selector: Vec<_> = query
                .into_iter()
                .filter(|(k, _)| *k != "namespace")
                .collect();
            let models: Vec<Value> = client.get_query("/api/v1/models", &selector).await?;
            if !output::structured(&models, args.output)? {
                let columns = ["NAME", "FORMAT", "PATH", "SOURCE JOB", "AGE"];
                let mut t = Table::new(&header(&columns, show_labels));
                for m in &models {
                    let mut row = vec![
                        cell(&m["name"]),
                        cell(&m["format"]),
                        cell(&m["path"]),
                        cell(&m["sourceJobUid"]),
                        age(m["createdAt"].as_str()),
                    ];
                    if show_labels {
                        row.push(labels_cell(&m["labels"]));
                    }
                    t.row(row);
                }
                print!("{}", t.render());
            }
            return Ok(());
        }
        "gpus" | "gpu" if args.selector.is_some() || show_labels => {
            bail!(
                "GPUs carry no labels; -l and --show-labels are for jobs, deployments, queues, \
                 priorityclasses, cohorts and models"
            );
        }
        "gpus" | "gpu" => {
            let inv: Value = client.get("/api/v1/gpus").await?;
            if !output::structured(&inv, args.output)? {
                // CUDA: what a rank given this GPU finds in CUDA_VISIBLE_DEVICES.
                let mut t = Table::new(&["INDEX", "NAME", "MEMORY", "CUDA", "ID"]);
                for g in inv["gpus"].as_array().into_iter().flatten() {
                    let gib = g["memory_bytes"].as_u64().unwrap_or(0) as f64 / (1u64 << 30) as f64;
                    let cuda = g.get("cuda_ordinal").unwrap_or(&g["id"]);
                    t.row(vec![
                        cell(&g["index"]),
                        cell(&g["name"]),
                        format!("{gib:.0} GiB"),
                        cell(cuda),
                        cell(&g["id"]),
                    ]);
                }
                print!("{}", t.render());
            }
            return Ok(());
        }
        _ => {}
    }
    let kind = ResourceKind::from_name(&args.kind).ok_or_else(|| {
        anyhow!(
            "unknown resource type {:?}; use jobs, deployments, queues, priorityclasses, sweeps, cohorts, models or gpus",
            args.kind
        )
    })?;
    if kind == ResourceKind::TrainJob {
        let jobs: Vec<Value> = match &args.name {
            Some(name) => vec![client.get(&job_path(&args.namespace, name)).await?],
            None => client.get_query("/api/v1/jobs", &query).await?,
        };
        if output::structured(&jobs, args.output)? {
            return Ok(());
        }
        let wide = args.output == Some(Output::Wide);
        let mut header = vec!["NAME", "PHASE", "RESTARTS", "GPUS", "AGE"];
        if args.all_namespaces {
            header.insert(0, "NAMESPACE");
        }
        if wide {
            header.extend([
                "ENGINE", "RANKS", "ATTEMPT", "STEP", "LOSS", "STARTS", "LEFT", "MESSAGE",
            ]);
        }
        if show_labels {
            header.push("LABELS");
        }
        let mut t = Table::new(&header);
        for j in &jobs {
            let status = &j["status"];
            let res = &j["spec"]["resources"];
            let gpus =
                res["nodes"].as_i64().unwrap_or(1) * res["gpusPerNode"].as_i64().unwrap_or(0);
            let mut row = vec![
                cell(&j["metadata"]["name"]),
                cell(&status["phase"]),
                cell(&status["restarts"]),
                gpus.to_string(),
                age(j["metadata"]["creationTimestamp"].as_str()),
            ];
            if args.all_namespaces {
                row.insert(0, cell(&j["metadata"]["namespace"]));
            }
            if wide {
                let procs = res["procsPerNode"]
                    .as_i64()
                    .unwrap_or(res["gpusPerNode"].as_i64().unwrap_or(0).max(1));
                row.extend([
                    cell(&j["spec"]["engine"]),
                    (res["nodes"].as_i64().unwrap_or(1) * procs).to_string(),
                    cell(&status["attempt"]),
                    cell(&status["progress"]["step"]),
                    cell(&status["progress"]["loss"]),
                    time_left(status["estimatedStartTime"].as_str()),
                    time_left(status["estimatedCompletionTime"].as_str()),
                    cell(&status["message"]),
                ]);
            }
            if show_labels {
                row.push(labels_cell(&j["metadata"]["labels"]));
            }
            t.row(row);
        }
        print!("{}", t.render());
        return Ok(());
    }
    let objects: Vec<Value> = match &args.name {
        Some(name) => vec![
            client
                .get(&object_path(kind, &args.namespace, name))
                .await?,
        ],
        // Every queue, priority class and cohort, whatever -n says.
        None => {
            if kind.is_cluster_scoped() {
                query.retain(|(k, _)| *k != "namespace");
            }
            client
                .get_query(&format!("/api/v1/{}", kind.plural()), &query)
                .await?
        }
    };
    let docs: Vec<&Value> = objects.iter().map(|o| &o["doc"]).collect();
    if output::structured(&docs, args.output)? {
        return Ok(());
    }
    if kind == ResourceKind::Sweep {
        match (&args.name, docs.as_slice()) {
            (Some(_), [doc]) => print!("{}", sweep_jobs_table(doc)),
            _ => print!("{}", sweeps_table(&objects)),
        }
        return Ok(());
    }
    let columns: &[&str] = match kind {
        ResourceKind::ModelDeployment => &[
            "NAME",
            "MODEL",
            "ENGINE",
            "READY",
            "PHASE",
            "ENDPOINTS",
            "AGE",
        ],
        ResourceKind::PriorityClass => &[
            "NAME",
            "VALUE",
            "PREEMPTION",
            "SOURCE",
            "DESCRIPTION",
            "AGE",
        ],
        ResourceKind::Cohort => &[
            "NAME",
            "PARENT",
            "WEIGHT",
            "QUOTAS",
            "BORROWING LIMIT",
            "LENDING LIMIT",
            "USED",
            "SHARE",
            "AGE",
        ],
        _ => &[
            "NAME", "STATE", "COHORT", "QUOTAS", "WEIGHT", "USED", "BORROWED", "SHARE", "RUNNING",
            "PENDING", "AGE",
        ],
    };
    let mut t = Table::new(&header(columns, show_labels));
    for o in &objects {
        let spec = &o["doc"]["spec"];
        let name = cell(&o["name"]);
        // `ferry up`'s own (a priority class, the `default` queue) is not stored: no age.
        let built_in = o["doc"]["status"]["builtIn"] == Value::Bool(true);
        let created = if built_in {
            String::new()
        } else {
            age(o["createdAt"].as_str())
        };
        let mut row = match kind {
            ResourceKind::ModelDeployment => {
                let m = &spec["model"];
                let model = [&m["id"], &m["path"], &m["artifact"], &m["preset"]]
                    .into_iter()
                    .find(|v| v.is_string())
                    .map(cell)
                    .unwrap_or_default();
                let status = &o["doc"]["status"];
                let endpoints = status["endpoints"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(cell)
                    .collect::<Vec<_>>()
                    .join(",");
                vec![
                    name,
                    model,
                    cell(&spec["engine"]),
                    format!(
                        "{}/{}",
                        cell(&status["readyReplicas"]),
                        cell(&spec["replicas"])
                    ),
                    cell(&status["phase"]),
                    endpoints,
                    created,
                ]
            }
            ResourceKind::Cohort => {
                vec![
                    name,
                    cell(&spec["parent"]),
                    // One stored before cohorts had weights has none: weight 1.
                    cell(spec.get("weight").unwrap_or(&Value::from(1.0))),
                    per_flavor(&spec["quotas"], "nominal"),
                    per_flavor(&spec["quotas"], "borrowingLimit"),
                    per_flavor(&spec["quotas"], "lendingLimit"),
                    used_of_nominal(&o["doc"]["status"]),
                    share(&o["doc"]["status"]),
                    created,
                ]
            }
            ResourceKind::PriorityClass => {
                vec![
                    name,
                    cell(&spec["value"]),
                    spec["preemptionPolicy"]
                        .as_str()
                        .unwrap_or("PreemptLowerPriority")
                        .to_owned(),
                    if built_in { "ferry up" } else { "applied" }.to_owned(),
                    cell(&spec["description"]),
                    created,
                ]
            }
            _ => {
                let quotas = spec["quotas"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|q| format!("{}={}", cell(&q["flavor"]), cell(&q["nominal"])))
                    .collect::<Vec<_>>()
                    .join(",");
                vec![
                    name,
                    cell(&o["doc"]["status"]["state"]),
                    cell(&spec["cohort"]),
                    quotas,
                    cell(&spec["weight"]),
                    cell(&o["doc"]["status"]["usedGpus"]),
                    cell(&o["doc"]["status"]["borrowedGpus"]),
                    share(&o["doc"]["status"]),
                    cell(&o["doc"]["status"]["running"]),
                    cell(&o["doc"]["status"]["pending"]),
                    created,
                ]
            }
        };
        if show_labels {
            row.push(labels_cell(&o["doc"]["metadata"]["labels"]));
        }
        t.row(row);
    }
    print!("{}", t.render());
    Ok(())
}

/// `3/4`: a cohort's subtree's (or a queue's) GPUs in use over its nominal GPUs (all flavors).
fn used_of_nominal(status: &Value) -> String {
    format!(
        "{}/{}",
        cell(&status["usedGpus"]),
        cell(&status["nominalGpus"])
    )
}

/// A queue's or cohort's weighted share (GPUs borrowed over its weight), 1 decimal; `-` when
/// the server reports none.
fn share(status: &Value) -> String {
    status["weightedShare"]
        .as_f64()
        .map_or_else(|| "-".into(), |s| format!("{s:.1}"))
}

/// A cohort's quota `field` per flavor, `flavor=N` comma-separated, those without it left out;
/// `-` when none has it (no limit: borrows or lends all it may).
fn per_flavor(quotas: &Value, field: &str) -> String {
    let set: Vec<String> = quotas
        .as_array()
        .into_iter()
        .flatten()
        .filter(|q| !q[field].is_null())
        .map(|q| format!("{}={}", cell(&q["flavor"]), cell(&q[field])))
        .collect();
    if set.is_empty() {
        "-".into()
    } else {
        set.join(",")
    }
}

pub async fn describe(client: &Client, args: DescribeArgs) -> anyhow::Result<()> {
    let kind = ResourceKind::from_name(&args.kind).ok_or_else(|| {
        anyhow!(
            "unknown kind {:?}; use job, deployment, queue, priorityclass, sweep or cohort",
            args.kind
        )
    })?;
    if kind != ResourceKind::TrainJob {
        let o: Value = client
            .get(&object_path(kind, &args.namespace, &args.name))
            .await?;
        if kind == ResourceKind::Queue {
            print!("{}", describe_queue(&o["doc"]));
        } else if kind == ResourceKind::Cohort {
            let cohorts: Vec<Value> = client.get("/api/v1/cohorts").await?;
            let queues: Vec<Value> = client.get("/api/v1/queues").await?;
            print!("{}", describe_cohort(&o["doc"], &cohorts, &queues));
        } else if kind == ResourceKind::Sweep {
            print!("{}", describe_sweep(&o["doc"]));
        } else {
            print!("{}", serde_saphyr::to_string(&o["doc"])?);
        }
        return Ok(());
    }
    let path = job_path(&args.namespace, &args.name);
    let job: Value = client.get(&path).await?;
    let events: Vec<Value> = client.get(&format!("{path}/events")).await?;
    let s = &job["status"];
    let spec = &job["spec"];
    let res = &spec["resources"];
    let field = |k: &str, v: String| println!("{:<14}{v}", format!("{k}:"));
    field("Name", cell(&job["metadata"]["name"]));
    field("Namespace", cell(&job["metadata"]["namespace"]));
    field("UID", cell(&job["metadata"]["uid"]));
    field("Phase", cell(&s["phase"]));
    field("Message", cell(&s["message"]));
    field("Engine", cell(&spec["engine"]));
    if let Some(cmd) = spec["command"].as_array() {
        field(
            "Command",
            cmd.iter().map(cell).collect::<Vec<_>>().join(" "),
        );
    }
    field(
        "Resources",
        format!(
            "{} node(s) × {} proc(s), {} GPU(s) per node",
            cell(&res["nodes"]),
            res["procsPerNode"]
                .as_i64()
                .map_or("auto".into(), |p| p.to_string()),
            cell(&res["gpusPerNode"])
        ),
    );
    field(
        "Queue",
        spec["queue"].as_str().unwrap_or("default").to_owned(),
    );
    field("Attempt", cell(&s["attempt"]));
    field(
        "Restarts",
        format!(
            "{} (max {})",
            cell(&s["restarts"]),
            cell(&spec["onFailure"]["maxRestarts"])
        ),
    );
    if let Some(gpus) = s["gpus"].as_array().filter(|g| !g.is_empty()) {
        field(
            "GPUs",
            gpus.iter()
                .map(|r| r.to_string())
                .collect::<Vec<_>>()
                .join(" "),
        );
    }
    field("Started", cell(&s["startTime"]));
    field("Finished", cell(&s["completionTime"]));
    if !s["resumedFrom"].is_null() {
        field("Resumed from", cell(&s["resumedFrom"]));
    }
    if !s["progress"].is_null() {
        field("Progress", s["progress"].to_string());
    }
    if let Some(limit) = spec["maxRuntimeSeconds"].as_u64() {
        field(
            "Time limit",
            format!("{limit} s per run (spec.maxRuntimeSeconds)"),
        );
    }
    if let Some(budget) = spec["maxTotalRuntimeSeconds"].as_u64() {
        field(
            "Run time",
            format!(
                "{} s of {budget} s (spec.maxTotalRuntimeSeconds, all runs together)",
                cell(&s["runSeconds"])
            ),
        );
    }
    if let Some(at) = s["estimatedStartTime"].as_str() {
        field(
            "Expected start",
            format!(
                "{at} (in {}, when the work ahead of it ends by its time limits or pace)",
                time_left(Some(at))
            ),
        );
    }
    if let Some(eta) = s["estimatedCompletionTime"].as_str() {
        field(
            "Expected done",
            format!("{eta} (in {}, at the measured pace)", time_left(Some(eta))),
        );
    }
    println!("Events:");
    let mut t = Table::new(&["  TIME", "FROM", "TO", "REASON", "MESSAGE"]);
    for e in &events {
        let at = e["at"].as_str().unwrap_or("-");
        t.row(vec![
            format!("  {at}"),
            cell(&e["from"]),
            cell(&e["to"]),
            cell(&e["reason"]),
            cell(&e["message"]),
        ]);
    }
    print!("{}", t.render());
    Ok(())
}

/// `ferry describe queue`: its quota and what it holds per flavor, then its waiting jobs in
/// the order the scheduler tries them, each with its expected start.
fn describe_queue(doc: &Value) -> String {
    use std::fmt::Write as _;
    let (spec, status) = (&doc["spec"], &doc["status"]);
    let mut out = String::new();
    let mut field = |k: &str, v: String| {
        let _ = writeln!(out, "{:<14}{v}", format!("{k}:"));
    };
    field("Name", cell(&doc["metadata"]["name"]));
    if status["builtIn"] == Value::Bool(true) {
        field(
            "Source",
            "ferry up (jobs without spec.queue wait here; apply a Queue named default to set its quota)".into(),
        );
    }
    field("State", queue_state(status["state"].as_str(), spec));
    field("Cohort", cell(&spec["cohort"]));
    field("Weight", spec["weight"].as_f64().unwrap_or(1.0).to_string());
    field(
        "Running",
        format!("{} job(s)", status["running"].as_u64().unwrap_or(0)),
    );
    let pending = status["pending"].as_u64().unwrap_or(0);
    field("Waiting", format!("{pending} job(s)"));
    let mut flavors = Table::new(&["FLAVOR", "NOMINAL", "MAX", "USED", "BORROWED"]);
    for f in status["flavors"].as_array().into_iter().flatten() {
        flavors.row(vec![
            cell(&f["flavor"]),
            cell(&f["nominal"]),
            cell(&f["maxGpus"]),
            cell(&f["usedGpus"]),
            cell(&f["borrowedGpus"]),
        ]);
    }
    out.push_str("GPUs (MAX: nominal plus what it may borrow in its cohort):\n");
    for line in flavors.render().lines() {
        let _ = writeln!(out, "  {line}");
    }
    let listed = status["pendingWorkloads"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    if listed.is_empty() {
        return out;
    }
    let _ = writeln!(
        out,
        "Waiting jobs, in the order they are tried{}:",
        if (listed.len() as u64) < pending {
            format!(" (first {} of {pending})", listed.len())
        } else {
            String::new()
        }
    );
    let mut t = Table::new(&[
        "#",
        "JOB",
        "PRIORITY",
        "GPUS",
        "WAITING",
        "STARTS IN",
        "WHY",
    ]);
    for p in &listed {
        t.row(vec![
            cell(&p["position"]),
            cell(&p["job"]),
            cell(&p["priority"]),
            cell(&p["gpus"]),
            age(p["createdAt"].as_str()),
            time_left(p["estimatedStartTime"].as_str()),
            cell(&p["message"]),
        ]);
    }
    for line in t.render().lines() {
        let _ = writeln!(out, "  {line}");
    }
    out
}

/// `ferry describe cohort`: its parent, weight, what its subtree uses and borrows and its
/// weighted share, then its child cohorts and queues (from `cohorts` and `queues`, as listed)
/// with the same figures: the child with the lowest share is offered spare GPUs first.
fn describe_cohort(doc: &Value, cohorts: &[Value], queues: &[Value]) -> String {
    use std::fmt::Write as _;
    let (spec, status) = (&doc["spec"], &doc["status"]);
    let name = cell(&doc["metadata"]["name"]);
    let weight = |spec: &Value| spec["weight"].as_f64().unwrap_or(1.0).to_string();
    let mut out = String::new();
    let mut field = |k: &str, v: String| {
        let _ = writeln!(out, "{:<14}{v}", format!("{k}:"));
    };
    field("Name", name.clone());
    field("Parent", cell(&spec["parent"]));
    field("Weight", weight(spec));
    field(
        "GPUs",
        format!(
            "{} used of {} nominal (its own, its child cohorts' and its queues'), {} borrowed",
            cell(&status["usedGpus"]),
            cell(&status["nominalGpus"]),
            cell(&status["borrowedGpus"])
        ),
    );
    field(
        "Share",
        format!("{} (GPUs borrowed over its weight)", share(status)),
    );
    let mut t = Table::new(&["KIND", "NAME", "WEIGHT", "USED", "BORROWED", "SHARE"]);
    let children = cohorts
        .iter()
        .filter(|c| c["doc"]["spec"]["parent"] == name.as_str())
        .map(|c| ("Cohort", c))
        .chain(
            queues
                .iter()
                .filter(|q| q["doc"]["spec"]["cohort"] == name.as_str())
                .map(|q| ("Queue", q)),
        );
    for (kind, o) in children {
        let status = &o["doc"]["status"];
        t.row(vec![
            kind.into(),
            cell(&o["name"]),
            weight(&o["doc"]["spec"]),
            used_of_nominal(status),
            cell(&status["borrowedGpus"]),
            share(status),
        ]);
    }
    out.push_str("Children (spare GPUs go to the lowest SHARE first; USED: used/nominal GPUs):\n");
    for line in t.render().lines() {
        let _ = writeln!(out, "  {line}");
    }
    out
}

/// `ferry get sweeps`: one line per sweep, its jobs per phase and its best job so far.
fn sweeps_table(objects: &[Value]) -> String {
    let mut t = Table::new(&["NAME", "JOBS", "PHASES", "MAX PARALLEL", "BEST", "AGE"]);
    for o in objects {
        let (spec, status) = (&o["doc"]["spec"], &o["doc"]["status"]);
        let jobs = status["jobs"].as_array().map_or(0, Vec::len);
        t.row(vec![
            cell(&o["name"]),
            jobs.to_string(),
            sweep_phases(status),
            spec["maxParallel"]
                .as_i64()
                .map_or_else(|| "all".to_owned(), |n| n.to_string()),
            sweep_best(spec, status),
            age(o["createdAt"].as_str()),
        ]);
    }
    t.render()
}

/// `2 Succeeded, 1 Running`: a sweep's jobs per phase, in life order.
fn sweep_phases(status: &Value) -> String {
    let phases = &status["phases"];
    ferry_spec::JobPhase::ALL
        .into_iter()
        .filter_map(|p| {
            let n = phases[p.as_str()].as_u64().filter(|n| *n > 0)?;
            Some(format!("{n} {p}"))
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// `lr-sweep-3 (loss 0.4123)`, or `-` while no job has succeeded with the metric.
fn sweep_best(spec: &Value, status: &Value) -> String {
    let best = &status["best"];
    if best.is_null() {
        return "-".into();
    }
    format!(
        "{} ({} {})",
        cell(&best["job"]),
        spec["metric"].as_str().unwrap_or("loss"),
        cell(&best["value"])
    )
}

/// `ferry get sweep NAME`: one row per job, by index: its name, one column per parameter
/// (headed by its path), phase, latest step and metric; the best succeeded job's metric is
/// marked `*`.
fn sweep_jobs_table(doc: &Value) -> String {
    let (spec, status) = (&doc["spec"], &doc["status"]);
    let paths: Vec<&str> = spec["parameters"]
        .as_object()
        .map(|m| m.keys().map(String::as_str).collect())
        .unwrap_or_default();
    let metric = spec["metric"].as_str().unwrap_or("loss").to_uppercase();
    let mut header = vec!["NAME"];
    header.extend(&paths);
    header.extend(["PHASE", "STEP", metric.as_str()]);
    let mut t = Table::new(&header);
    let best = status["best"]["job"].as_str();
    for job in status["jobs"].as_array().into_iter().flatten() {
        let mut row = vec![cell(&job["name"])];
        row.extend(paths.iter().map(|p| {
            job["parameters"]
                .get(*p)
                .map_or_else(|| "-".to_owned(), ferry_spec::show_value)
        }));
        let mut value = cell(&job["value"]);
        if best.is_some() && job["name"].as_str() == best {
            value.push_str(" *");
        }
        row.extend([
            job["phase"].as_str().unwrap_or("(deleted)").to_owned(),
            cell(&job["step"]),
            value,
        ]);
        t.row(row);
    }
    t.render()
}

/// `ferry describe sweep`: what it sweeps and how, its jobs per phase and best job, then the
/// table `ferry get sweep` prints.
fn describe_sweep(doc: &Value) -> String {
    use std::fmt::Write as _;
    let (spec, status) = (&doc["spec"], &doc["status"]);
    let mut out = String::new();
    let mut field = |k: &str, v: String| {
        let _ = writeln!(out, "{:<14}{v}", format!("{k}:"));
    };
    field("Name", cell(&doc["metadata"]["name"]));
    field("Namespace", cell(&doc["metadata"]["namespace"]));
    let template = &spec["template"]["spec"];
    field(
        "Template",
        format!(
            "engine {}, queue {}",
            template["engine"].as_str().unwrap_or("auto"),
            template["queue"].as_str().unwrap_or("default")
        ),
    );
    for (path, values) in spec["parameters"].as_object().into_iter().flatten() {
        let values: Vec<String> = values
            .as_array()
            .into_iter()
            .flatten()
            .map(ferry_spec::show_value)
            .collect();
        field("Parameter", format!("{path}: {}", values.join(", ")));
    }
    let jobs = status["jobs"].as_array().map_or(0, Vec::len);
    field(
        "Phases",
        format!("{} (of {jobs} jobs)", sweep_phases(status)),
    );
    field(
        "Max parallel",
        spec["maxParallel"]
            .as_i64()
            .map_or_else(|| "all".to_owned(), |n| n.to_string()),
    );
    field(
        "Metric",
        format!(
            "{} (latest value of a succeeded job; lower is better)",
            spec["metric"].as_str().unwrap_or("loss")
        ),
    );
    field("Best", sweep_best(spec, status));
    out.push_str("Jobs:\n");
    for line in sweep_jobs_table(doc).lines() {
        let _ = writeln!(out, "  {line}");
    }
    out
}

/// `ferry describe queue`'s State line: whether the queue admits work, and what its
/// `spec.stopPolicy` means for its jobs.
fn queue_state(state: Option<&str>, spec: &Value) -> String {
    let policy = spec["stopPolicy"].as_str().unwrap_or("None");
    match state {
        Some("Held") => {
            format!("Held (spec.stopPolicy: {policy}): its waiting jobs start once it is released")
        }
        Some("Draining") => format!(
            "Draining (spec.stopPolicy: {policy}): its running jobs are being stopped to wait \
             until it is released"
        ),
        Some(other) => other.to_owned(),
        None => "Active".to_owned(),
    }
}

/// The job `ferry ACTION job NAME` (or `ferry ACTION NAME`) names.
fn job_name<'a>(action: &str, target: &'a [String]) -> anyhow::Result<&'a str> {
    match target {
        [name] => Ok(name),
        [kind, name] if ResourceKind::from_name(kind) == Some(ResourceKind::TrainJob) => Ok(name),
        [kind, _] => {
            bail!(
                "`ferry {action}` acts on jobs only (got {kind:?}); use `ferry {action} job NAME`"
            )
        }
        _ => bail!("give the job to {action}: `ferry {action} job NAME`"),
    }
}

/// Checks what `ferry ACTION -l SELECTOR` was given besides: nothing, or the kind `jobs`.
fn check_selected_target(action: &str, target: &[&str]) -> anyhow::Result<()> {
    let kind = target.first().and_then(|k| ResourceKind::from_name(k));
    match (kind, target) {
        (_, []) | (Some(ResourceKind::TrainJob), [_]) => Ok(()),
        (Some(kind), [given, ..]) if kind != ResourceKind::TrainJob => bail!(
            "`ferry {action} -l` acts on jobs only (got {given:?}); use `ferry {action} jobs -l \
             SELECTOR`"
        ),
        (_, [.., name]) => bail!(
            "give a name or -l, not both (got {name:?}); `ferry {action} jobs -l SELECTOR` acts \
             on every job the labels select"
        ),
    }
}

/// The jobs `-l` selects: in `namespace`, or in every namespace with `-A`.
async fn selected_jobs(
    client: &Client,
    selector: &str,
    namespace: &str,
    all_namespaces: bool,
) -> anyhow::Result<Vec<Value>> {
    let mut query = vec![("labelSelector", selector)];
    if !all_namespaces {
        query.push(("namespace", namespace));
    }
    client.get_query("/api/v1/jobs", &query).await
}

/// `no jobs match …`: what a bulk command says when the selector picks nothing.
fn none_selected(selector: &str, namespace: &str, all_namespaces: bool) -> String {
    if all_namespaces {
        format!("no jobs match {selector:?} in any namespace")
    } else {
        format!("no jobs match {selector:?} in namespace {namespace}")
    }
}

/// How a bulk command names one job in its lines: `trainjob/NAME`, with the namespace under -A.
fn job_label(job: &Value, all_namespaces: bool) -> String {
    let name = cell(&job["metadata"]["name"]);
    if all_namespaces {
        format!(
            "trainjob/{name} (namespace {})",
            cell(&job["metadata"]["namespace"])
        )
    } else {
        format!("trainjob/{name}")
    }
}

/// A listed job's phase.
fn phase_of(job: &Value) -> Option<JobPhase> {
    serde_json::from_value(job["status"]["phase"].clone()).ok()
}

/// Why a job `-l` selected is left out of `action`, by the phase it was listed in: a finished
/// job has nothing to cancel or suspend, a job not suspended nothing to resume. The control
/// plane still decides: a job whose phase changes after the listing gets its own answer.
fn nothing_to_do(action: &str, phase: Option<JobPhase>) -> Option<String> {
    let phase = phase?;
    match action {
        "resume" if phase != JobPhase::Suspended => Some(format!("not suspended ({phase})")),
        _ if phase.is_terminal() => Some(format!("already finished ({phase})")),
        _ => None,
    }
}

/// `ferry cancel|suspend|resume job NAME`: posts the action and prints the job's phase after
/// it. With `-l`, the same for every selected job, one line each; the jobs that fail are
/// named and the others still acted on, and the command fails at the end.
pub async fn job_action(client: &Client, action: &str, args: &JobActionArgs) -> anyhow::Result<()> {
    let (target, namespace, select) = (&args.target, args.namespace.as_str(), &args.select);
    let act = |ns: String, name: String| async move {
        let path = format!("{}/{action}", job_path(&ns, &name));
        let job: Value = client.post(&path, &Value::Null, action).await?;
        let phase = cell(&job["status"]["phase"]).to_lowercase();
        anyhow::Ok(if action == "resume" && phase == "suspended" {
            // Its ranks still stop: it goes back to its queue once they have exited.
            "resume requested: queued once its ranks have exited".to_owned()
        } else {
            phase
        })
    };
    let Some(selector) = &select.selector else {
        let name = job_name(action, target)?;
        let phase = act(namespace.to_owned(), name.to_owned()).await?;
        println!("trainjob/{name} {phase}");
        return Ok(());
    };
    let target: Vec<&str> = target.iter().map(String::as_str).collect();
    check_selected_target(action, &target)?;
    let all = select.all_namespaces;
    let jobs = selected_jobs(client, selector, namespace, all).await?;
    if jobs.is_empty() {
        println!("{}", none_selected(selector, namespace, all));
        return Ok(());
    }
    let mut failed = 0;
    for job in &jobs {
        let label = job_label(job, all);
        if let Some(why) = nothing_to_do(action, phase_of(job)) {
            println!("{label} skipped: {why}");
            continue;
        }
        let (ns, name) = (
            cell(&job["metadata"]["namespace"]),
            cell(&job["metadata"]["name"]),
        );
        match act(ns, name).await {
            Ok(phase) => println!("{label} {phase}"),
            Err(e) => {
                eprintln!("error: {label}: {e}");
                failed += 1;
            }
        }
    }
    if failed > 0 {
        bail!(
            "{failed} of the {} selected jobs failed to {action}",
            jobs.len()
        );
    }
    Ok(())
}

/// Asks the control plane to cancel `job` unless it has finished: a job is deleted only once
/// it has ended.
async fn cancel_before_delete(client: &Client, job: &Value) -> anyhow::Result<()> {
    if phase_of(job).is_some_and(JobPhase::is_terminal) {
        return Ok(());
    }
    let path = job_path(
        &cell(&job["metadata"]["namespace"]),
        &cell(&job["metadata"]["name"]),
    );
    let _: Value = client
        .post(&format!("{path}/cancel"), &Value::Null, "delete")
        .await?;
    Ok(())
}

/// Deletes an ended (or cancelled) job, waiting while its ranks stop (SIGTERM, grace, SIGKILL).
async fn delete_job_when_stopped(client: &Client, job: &Value) -> anyhow::Result<()> {
    let path = job_path(
        &cell(&job["metadata"]["namespace"]),
        &cell(&job["metadata"]["name"]),
    );
    delete_when_stopped(client, &path, grace_of(&job["spec"])).await
}

/// `ferry delete KIND NAME`, `ferry delete jobs -l SELECTOR`, or `ferry delete -f FILE`: a job
/// not finished is cancelled first (all selected ones before any is waited for).
pub async fn delete(client: &Client, args: DeleteArgs) -> anyhow::Result<()> {
    if !args.files.is_empty() {
        return delete_defined(client, &args.files).await;
    }
    let Some(kind_name) = args.kind.as_deref() else {
        bail!("give the kind and name to delete: `ferry delete KIND NAME`, or -f FILE");
    };
    if matches!(kind_name.to_ascii_lowercase().as_str(), "model" | "models") {
        return delete_model(client, &args).await;
    }
    let kind = ResourceKind::from_name(kind_name).ok_or_else(|| {
        anyhow!(
            "unknown kind {kind_name:?}; use job, deployment, queue, priorityclass, sweep, cohort \
             or model"
        )
    })?;
    let ns = &args.namespace;
    if let Some(selector) = &args.select.selector {
        let mut target = vec![kind_name];
        target.extend(args.name.as_deref());
        check_selected_target("delete", &target)?;
        return delete_selected(client, selector, ns, args.select.all_namespaces).await;
    }
    let Some(name) = &args.name else {
        bail!("give the name to delete: `ferry delete {kind_name} NAME`");
    };
    delete_one(client, kind, ns, name, &[]).await
}

/// Deletes one resource, saying so: a job cancelled and its ranks stopped first, a sweep's
/// jobs with it. `along` (`queue/a`) are the queues and cohorts the same command deletes after
/// it, which the control plane judges gone when it checks what is left.
async fn delete_one(
    client: &Client,
    kind: ResourceKind,
    ns: &str,
    name: &str,
    along: &[String],
) -> anyhow::Result<()> {
    if kind == ResourceKind::TrainJob {
        let job: Value = client.get(&job_path(ns, name)).await?;
        cancel_before_delete(client, &job).await?;
        delete_job_when_stopped(client, &job).await?;
        println!("trainjob/{name} deleted");
        return Ok(());
    }
    let path = object_path(kind, ns, name);
    if kind == ResourceKind::Sweep {
        // The control plane cancels its jobs; their ranks stop within the template's grace.
        let sweep: Value = client.get(&path).await?;
        let grace = grace_of(&sweep["doc"]["spec"]["template"]["spec"]);
        delete_when_stopped(client, &path, grace).await?;
    } else {
        let query = if along.is_empty() {
            String::new()
        } else {
            format!("?along={}", along.join(","))
        };
        client.delete(&format!("{path}{query}")).await?;
    }
    println!("{}/{name} deleted", kind.as_str().to_lowercase());
    Ok(())
}

/// `ferry delete -f FILE`: every resource the files define, as `ferry apply -f` reads them:
/// work first (jobs, sweeps, deployments), then queues, cohorts and priority classes, each the
/// last defined first, so nothing is deleted while something left names it; one line per
/// resource, failing at the end if any was not deleted.
async fn delete_defined(client: &Client, files: &[std::path::PathBuf]) -> anyhow::Result<()> {
    let mut defined = Vec::new();
    for path in files {
        let (text, source) = super::apply::read(path)?;
        defined.extend(super::apply::resources(client, &text, &source, false).await?);
    }
    defined.reverse();
    defined.sort_by_key(|r| match r.kind() {
        ResourceKind::TrainJob | ResourceKind::Sweep | ResourceKind::ModelDeployment => 0,
        ResourceKind::Queue => 1,
        ResourceKind::Cohort => 2,
        ResourceKind::PriorityClass => 3,
    });
    let mut failed = 0;
    for (i, r) in defined.iter().enumerate() {
        let meta = r.metadata();
        // The queues and cohorts still to go: two queues of one cohort leave each other alone
        // in it, which the control plane refuses unless both go.
        let along: Vec<String> = (defined[i + 1..].iter())
            .filter(|o| matches!(o.kind(), ResourceKind::Queue | ResourceKind::Cohort))
            .map(|o| format!("{}/{}", o.kind().as_str().to_lowercase(), o.metadata().name))
            .collect();
        if let Err(e) = delete_one(client, r.kind(), &meta.namespace, &meta.name, &along).await {
            eprintln!(
                "error: {}/{}: {e:#}",
                r.kind().as_str().to_lowercase(),
                meta.name
            );
            failed += 1;
        }
    }
    if failed > 0 {
        bail!(
            "{failed} of the {} resources defined were not deleted",
            defined.len()
        );
    }
    Ok(())
}

/// `ferry delete model NAME`: unregisters a registered model; the control plane removes its
/// files when it wrote them (under `$FERRY_HOME/models/`) and refuses while anything uses it.
async fn delete_model(client: &Client, args: &DeleteArgs) -> anyhow::Result<()> {
    if args.select.selector.is_some() {
        bail!(
            "models are deleted one by name: `ferry delete model NAME` (`ferry get models -l SELECTOR` lists the selected ones)"
        );
    }
    let Some(name) = &args.name else {
        bail!("give the name to delete: `ferry delete model NAME` (`ferry get models` lists them)");
    };
    let answer = client.delete(&format!("/api/v1/models/{name}")).await?;
    let files = if answer["filesRemoved"] == true {
        format!("files removed: {}", cell(&answer["path"]))
    } else {
        cell(&answer["note"])
    };
    println!("model {name} deleted ({files})");
    Ok(())
}

/// `ferry delete jobs -l SELECTOR`: every selected job cancelled unless finished, then each
/// deleted once its ranks have stopped; one line per job, failing at the end if any failed.
async fn delete_selected(
    client: &Client,
    selector: &str,
    namespace: &str,
    all: bool,
) -> anyhow::Result<()> {
    let jobs = selected_jobs(client, selector, namespace, all).await?;
    if jobs.is_empty() {
        println!("{}", none_selected(selector, namespace, all));
        return Ok(());
    }
    let mut failed = 0;
    let mut cancelled = Vec::new();
    for job in &jobs {
        match cancel_before_delete(client, job).await {
            Ok(()) => cancelled.push(job),
            Err(e) => {
                eprintln!("error: {}: {e}", job_label(job, all));
                failed += 1;
            }
        }
    }
    for job in cancelled {
        let label = job_label(job, all);
        match delete_job_when_stopped(client, job).await {
            Ok(()) => println!("{label} deleted"),
            Err(e) => {
                eprintln!("error: {label}: {e}");
                failed += 1;
            }
        }
    }
    if failed > 0 {
        bail!(
            "{failed} of the {} selected jobs failed to delete",
            jobs.len()
        );
    }
    Ok(())
}

/// A job spec's `onFailure.graceSeconds` (30 when left out).
fn grace_of(spec: &Value) -> f64 {
    spec["onFailure"]["graceSeconds"].as_f64().unwrap_or(30.0)
}

/// `DELETE path`, again while the control plane answers that ranks are still stopping
/// (SIGTERM, grace, SIGKILL), for at most `grace` seconds and 15 more.
async fn delete_when_stopped(client: &Client, path: &str, grace: f64) -> anyhow::Result<()> {
    let deadline = std::time::Instant::now() + Duration::from_secs_f64(grace.max(0.0) + 15.0);
    loop {
        match client.send(Method::DELETE, path, None).await {
            Ok(_) => return Ok(()),
            Err(e)
                if std::time::Instant::now() < deadline
                    && e.to_string().contains("still stopping") =>
            {
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
            Err(e) => return Err(e),
        }
    }
}
