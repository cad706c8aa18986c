//! `get`, `describe`, `cancel`, `suspend`, `resume`, `delete`.

use std::time::Duration;

use anyhow::{anyhow, bail};
use ferry_spec::ResourceKind;
use reqwest::Method;
use serde_json::Value;

use crate::args::{CancelArgs, DeleteArgs, DescribeArgs, GetArgs, Output};
use crate::client::Client;
use crate::output::{self, age, cell, time_left};
use crate::table::Table;

/// The API path of one generic object (deployments, queues, priority classes). Queues and
/// priority classes are named across namespaces, so theirs names none.
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

pub async fn get(client: &Client, args: GetArgs) -> anyhow::Result<()> {
    let ns_query = if args.all_namespaces {
        String::new()
    } else {
        format!("?namespace={}", args.namespace)
    };
    match args.kind.to_ascii_lowercase().as_str() {
        "models" | "model" => {
            let models: Vec<Value> = client.get("/api/v1/models").await?;
            if !output::structured(&models, args.output)? {
                let mut t = Table::new(&["NAME", "FORMAT", "PATH", "SOURCE JOB", "AGE"]);
                for m in &models {
                    t.row(vec![
                        cell(&m["name"]),
                        cell(&m["format"]),
                        cell(&m["path"]),
                        cell(&m["sourceJobUid"]),
                        age(m["createdAt"].as_str()),
                    ]);
                }
                print!("{}", t.render());
            }
            return Ok(());
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
            "unknown resource type {:?}; use jobs, deployments, queues, priorityclasses, sweeps, models or gpus",
            args.kind
        )
    })?;
    if kind == ResourceKind::TrainJob {
        let jobs: Vec<Value> = match &args.name {
            Some(name) => vec![client.get(&job_path(&args.namespace, name)).await?],
            None => client.get(&format!("/api/v1/jobs{ns_query}")).await?,
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
        // Every queue and priority class, whatever -n says.
        None if kind.is_cluster_scoped() => {
            client.get(&format!("/api/v1/{}", kind.plural())).await?
        }
        None => {
            client
                .get(&format!("/api/v1/{}{ns_query}", kind.plural()))
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
    let mut t = match kind {
        ResourceKind::ModelDeployment => Table::new(&[
            "NAME",
            "MODEL",
            "ENGINE",
            "READY",
            "PHASE",
            "ENDPOINTS",
            "AGE",
        ]),
        ResourceKind::PriorityClass => Table::new(&[
            "NAME",
            "VALUE",
            "PREEMPTION",
            "SOURCE",
            "DESCRIPTION",
            "AGE",
        ]),
        _ => Table::new(&[
            "NAME", "STATE", "COHORT", "QUOTAS", "WEIGHT", "USED", "BORROWED", "RUNNING",
            "PENDING", "AGE",
        ]),
    };
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
        match kind {
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
                t.row(vec![
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
                ]);
            }
            ResourceKind::PriorityClass => {
                t.row(vec![
                    name,
                    cell(&spec["value"]),
                    spec["preemptionPolicy"]
                        .as_str()
                        .unwrap_or("PreemptLowerPriority")
                        .to_owned(),
                    if built_in { "ferry up" } else { "applied" }.to_owned(),
                    cell(&spec["description"]),
                    created,
                ]);
            }
            _ => {
                let quotas = spec["quotas"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|q| format!("{}={}", cell(&q["flavor"]), cell(&q["nominal"])))
                    .collect::<Vec<_>>()
                    .join(",");
                t.row(vec![
                    name,
                    cell(&o["doc"]["status"]["state"]),
                    cell(&spec["cohort"]),
                    quotas,
                    cell(&spec["weight"]),
                    cell(&o["doc"]["status"]["usedGpus"]),
                    cell(&o["doc"]["status"]["borrowedGpus"]),
                    cell(&o["doc"]["status"]["running"]),
                    cell(&o["doc"]["status"]["pending"]),
                    created,
                ]);
            }
        }
    }
    print!("{}", t.render());
    Ok(())
}

pub async fn describe(client: &Client, args: DescribeArgs) -> anyhow::Result<()> {
    let kind = ResourceKind::from_name(&args.kind).ok_or_else(|| {
        anyhow!(
            "unknown kind {:?}; use job, deployment, queue, priorityclass or sweep",
            args.kind
        )
    })?;
    if kind != ResourceKind::TrainJob {
        let o: Value = client
            .get(&object_path(kind, &args.namespace, &args.name))
            .await?;
        if kind == ResourceKind::Queue {
            print!("{}", describe_queue(&o["doc"]));
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

pub async fn cancel(client: &Client, args: CancelArgs) -> anyhow::Result<()> {
    job_action(client, "cancel", &args.target, &args.namespace).await
}

/// `ferry cancel|suspend|resume job NAME`: posts the action and prints the job's phase after it.
pub async fn job_action(
    client: &Client,
    action: &str,
    target: &[String],
    namespace: &str,
) -> anyhow::Result<()> {
    let name = job_name(action, target)?;
    let path = format!("{}/{action}", job_path(namespace, name));
    let job: Value = client.post(&path, &Value::Null, action).await?;
    println!(
        "trainjob/{name} {}",
        cell(&job["status"]["phase"]).to_lowercase()
    );
    Ok(())
}

pub async fn delete(client: &Client, args: DeleteArgs) -> anyhow::Result<()> {
    let kind = ResourceKind::from_name(&args.kind).ok_or_else(|| {
        anyhow!(
            "unknown kind {:?}; use job, deployment, queue, priorityclass or sweep",
            args.kind
        )
    })?;
    let (ns, name) = (&args.namespace, &args.name);
    if kind == ResourceKind::TrainJob {
        let path = job_path(ns, name);
        let job: Value = client.get(&path).await?;
        let phase = cell(&job["status"]["phase"]);
        if !matches!(phase.as_str(), "Succeeded" | "Failed" | "Cancelled") {
            let _: Value = client
                .post(&format!("{path}/cancel"), &Value::Null, "delete")
                .await?;
        }
        delete_when_stopped(client, &path, grace_of(&job["spec"])).await?;
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
        client.delete(&path).await?;
    }
    println!("{}/{name} deleted", kind.as_str().to_lowercase());
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
