//! `ferry sim --trace TRACE.csv [--cluster CLUSTER.yaml] [--queues QUEUES.yaml | --quota
//! TEAM=GPUS ...]`: replays a cluster trace under Ferry's scheduler and its peers (FIFO, EASY
//! backfill, Kueue StrictFIFO admitting onto nodes and admitting by quota alone, Slurm
//! multifactor) and prints the comparison, with each team's share against its entitlement.

use std::path::{Path, PathBuf};

use anyhow::Context as _;

use crate::args::Output;
use crate::output;

mod queues;

/// Options of `ferry sim`.
#[derive(Debug, clap::Args)]
pub struct SimArgs {
    /// Trace CSV with a header naming its columns: job_id,submit_s,duration_s,gpus,nodes,team,status in any order, optionally time_limit_s, topology (`rack` or `nvlinkDomain`: the gang must stay in one), split_slowdown_pct (how much longer the job runs split across racks; Ferry is told it) and priority (a priority class; empty for `normal`) (or give it with --trace).
    #[arg(value_name = "TRACE")]
    pub trace_file: Option<PathBuf>,
    /// Trace CSV with a header naming its columns: job_id,submit_s,duration_s,gpus,nodes,team,status in any order, optionally time_limit_s, topology (`rack` or `nvlinkDomain`: the gang must stay in one), split_slowdown_pct (how much longer the job runs split across racks; Ferry is told it) and priority (a priority class; empty for `normal`).
    #[arg(long, conflicts_with = "trace_file")]
    pub trace: Option<PathBuf>,
    /// Cluster YAML: `nodes: [{name, gpus, flavor, rack?, nvlinkDomain?}]`.
    #[arg(long, conflicts_with = "gpus")]
    pub cluster: Option<PathBuf>,
    /// Cluster size in GPUs (8-GPU nodes, at most 1048576 GPUs); sized from the trace when
    /// neither this nor --cluster.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=MAX_GPUS))]
    pub gpus: Option<u32>,
    /// Queues YAML, one per trace team: Ferry `Queue` documents (as `ferry apply` takes them,
    /// named after the team, in lowercase) and `Cohort` documents of their cohort trees,
    /// Kueue's ClusterQueues, LocalQueues and Cohorts (a team's work goes to the ClusterQueue
    /// of its name, or behind a LocalQueue of its name or in its namespace; `kubectl get
    /// clusterqueues,localqueues,cohorts -A -o yaml` as is; cohort trees replayed), Kubernetes
    /// ResourceQuotas (each namespace's `requests.nvidia.com/gpu` as a hard cap for the team
    /// of its name), Volcano Queues (one cohort, or a `spec.parent` tree with a cohort per
    /// parent queue; `deserved`, else a weighted share, as the nominal quota, `capability` and
    /// `guarantee` as limits; a team is the leaf Queue of its name), or a list of
    /// `{name, cohort?, quotas: [{flavor, nominal, borrowingLimit?, lendingLimit?}],
    /// fairShareWeight?}`; quotas from GPU-hours when omitted.
    #[arg(long)]
    pub queues: Option<PathBuf>,
    /// Priority classes the trace's `priority` column names, as `ferry up --priority-classes`
    /// takes them (Kubernetes PriorityClasses, Kueue WorkloadPriorityClasses, Ferry
    /// PriorityClass documents, or `{name: value}`); Ferry's `low`, `normal` and `high` when
    /// omitted. Ferry and Kueue order and preempt by them within a queue, the Slurm peer weighs
    /// them as QOS, FIFO and EASY order by age alone.
    #[arg(long, value_name = "FILE")]
    pub priority_classes: Option<PathBuf>,
    /// A team's nominal quota in GPUs, `TEAM=GPUS`, once per trace team (all in one cohort,
    /// borrowing unlimited): `--quota vcvGl=160 --quota vcvlY=16` instead of a queues file.
    #[arg(long, value_name = "TEAM=GPUS", value_parser = parse_quota, conflicts_with = "queues")]
    pub quota: Vec<(String, u32)>,
    /// Run Ferry's policy with fairness deficits of this half-life in seconds (e.g. 86400):
    /// nominal quota becomes a time-averaged guarantee (docs/scheduler.md); off when omitted.
    #[arg(long, value_name = "SECONDS")]
    pub fairness_half_life: Option<u64>,
    /// Run Ferry's policy with reclaims through reservations: an owner may take single-node
    /// borrowed jobs that outlast another gang's drain on its reserved nodes (docs/scheduler.md).
    #[arg(long)]
    pub reclaim_through_reservation: bool,
    /// Ferry's policy switches as YAML or JSON (`{drainOvershootPct: 25, holdForOwed: true}`;
    /// the `Options` fields of docs/scheduler.md, camelCase); those left out keep their
    /// defaults. Applied before --fairness-half-life and --reclaim-through-reservation.
    #[arg(long, value_name = "FILE")]
    pub options: Option<PathBuf>,
    /// Replay the trace's arrivals this many times as fast (2: submit times halved) on the
    /// cluster and quotas sized for the trace as given: how the policies hold up as demand grows.
    #[arg(long, value_name = "FACTOR", allow_negative_numbers = true)]
    pub load: Option<f64>,
    /// What every policy is told about run times at submit: `exact` (the trace's durations),
    /// `none`, `trace` (the trace's optional `time_limit_s` column), or users' time limits,
    /// `limits` (each run time rounded up to the next round limit: 15 min, 30 min, 1 h … 30
    /// days) or `limits:F` (padded F times first, F ≥ 1). Jobs always run their trace durations.
    #[arg(long, value_name = "MODE", default_value = "exact")]
    pub estimates: ferry_sched::Estimates,
    /// Once a job has run this many seconds (since it last started), every policy is told its
    /// true remaining time, as when Ferry measures a training job's step pace.
    #[arg(long, value_name = "SECONDS")]
    pub pace_after: Option<u64>,
    /// A gang split across racks, although one rack could hold it, runs this many percent
    /// longer under every policy (its collectives cross the slower links between racks).
    /// Ferry is told the same (`splitSlowdownPct`) unless --options sets it. Needs a --cluster
    /// whose nodes carry racks.
    #[arg(long, value_name = "PCT", value_parser = clap::value_parser!(u32).range(0..=1000))]
    pub split_slowdown: Option<u32>,
    /// Also forecast, whenever a job arrives and has to wait, when it starts (what `ferry up`
    /// tells every queued job) and report how well that held: `forecast, within 5 min` in the
    /// table, `forecast` in JSON. Slower: one replay of the queue per such arrival.
    #[arg(long)]
    pub forecast: bool,
    /// Also write the utilization timeline as an SVG chart here.
    #[arg(long)]
    pub svg: Option<PathBuf>,
    /// Also write every job's outcome under every policy here, as CSV (policy, job_id, team,
    /// gpus, submit_s, first_start_s, end_s, jct_s, wait_s, preemptions, priority).
    #[arg(long, value_name = "FILE.csv")]
    pub jobs: Option<PathBuf>,
    /// Output format (the table when omitted).
    #[arg(short, long, value_enum)]
    pub output: Option<Output>,
}

/// `TEAM=GPUS` of `--quota`.
fn parse_quota(s: &str) -> Result<(String, u32), String> {
    let (team, gpus) = s
        .rsplit_once('=')
        .ok_or_else(|| format!("`{s}`: expected TEAM=GPUS, e.g. vcvGl=160"))?;
    let gpus = gpus
        .trim()
        .parse()
        .map_err(|_| format!("`{s}`: the GPUs after `=` must be a whole number, e.g. {team}=16"))?;
    if team.trim().is_empty() {
        return Err(format!(
            "`{s}`: the team before `=` is empty, e.g. vcvGl={gpus}"
        ));
    }
    Ok((team.trim().to_string(), gpus))
}

/// Largest `--gpus`: the scheduler's most nodes, of 8 GPUs.
const MAX_GPUS: i64 = ferry_sched::MAX_CLUSTER_NODES as i64 * 8;

/// Largest `--load`: beyond it the whole trace arrives within seconds anyway.
const MAX_LOAD: f64 = 1000.0;

fn read_yaml<T: serde::de::DeserializeOwned>(path: &Path, what: &str) -> anyhow::Result<T> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read {what} file {}", path.display()))?;
    parse_yaml(&text, path, what)
}

/// `text`, read from the `what` file `path`, as YAML.
fn parse_yaml<T: serde::de::DeserializeOwned>(
    text: &str,
    path: &Path,
    what: &str,
) -> anyhow::Result<T> {
    serde_saphyr::from_str(text).with_context(|| {
        format!(
            "{what} file {} is not valid: see `ferry sim --help` for its fields",
            path.display()
        )
    })
}

/// The simulator calls the trace `<trace>` in its errors; the user knows it by its path.
fn in_file(e: ferry_sched::SchedError, path: &Path) -> ferry_sched::SchedError {
    match e {
        ferry_sched::SchedError::Trace {
            file,
            line,
            problem,
            fix,
        } if file == "<trace>" => ferry_sched::SchedError::Trace {
            file: path.display().to_string(),
            line,
            problem,
            fix,
        },
        e => e,
    }
}

pub fn run(args: SimArgs) -> anyhow::Result<()> {
    let Some(trace_path) = args.trace.as_ref().or(args.trace_file.as_ref()) else {
        anyhow::bail!(
            "no trace given: pass --trace FILE.csv (columns job_id,submit_s,duration_s,gpus,nodes,team,status)"
        );
    };
    let mut given = ferry_sched::read_trace(trace_path)?;
    let mut cluster = match (&args.cluster, args.gpus) {
        (Some(path), _) => read_yaml::<ferry_sched::Cluster>(path, "cluster")?,
        (None, Some(n)) => ferry_sched::cluster_with_gpus(n),
        (None, None) => ferry_sched::default_cluster(&given),
    };
    let mut notes = Vec::new();
    let mut cohorts = Vec::new();
    let queues = match &args.queues {
        Some(path) => {
            let file = queues::queues_file(path, &given, &cluster)?;
            for job in &mut given {
                if let Some(cq) = file.teams.get(&job.team) {
                    job.team.clone_from(cq);
                }
            }
            notes = file.notes;
            if args.cluster.is_none()
                && let Some(flavor) = queues::flavor_to_assume(&file.queues, &file.cohorts)
            {
                notes.push(format!(
                    "the cluster's nodes are of flavor {flavor}, the one GPU flavor the queues name"
                ));
                for n in &mut cluster.nodes {
                    n.flavor.clone_from(&flavor);
                }
            }
            cohorts = file.cohorts;
            file.queues
        }
        None if !args.quota.is_empty() => queues::quota_queues(&given, &args.quota)?,
        None => ferry_sched::default_queues(&given, &cluster),
    };
    let classes = match &args.priority_classes {
        Some(path) => {
            let (classes, class_notes) = super::scheduler_options::priority_classes(path)?;
            notes.extend(class_notes);
            classes
        }
        None => ferry_sched::PriorityClass::standard(),
    };
    let trace = match args.load {
        None => given,
        Some(f) if f.is_finite() && f > 0.0 && f <= MAX_LOAD => ferry_sched::with_load(&given, f),
        Some(f) => anyhow::bail!(
            "--load {f}: expected a factor above 0 and at most {MAX_LOAD} (2 replays the \
             arrivals twice as fast); fix: pass e.g. --load 2"
        ),
    };
    let mut ferry_options = match &args.options {
        Some(path) => super::scheduler_options::read(path)?,
        None => ferry_sched::Options::default(),
    };
    let split_slowdown_pct = args.split_slowdown.unwrap_or(0);
    if split_slowdown_pct > 0 && !cluster.nodes.iter().any(|n| n.rack.is_some()) {
        anyhow::bail!(
            "--split-slowdown {split_slowdown_pct}: the cluster has no racks, so no gang is \
             ever split across racks; fix: pass a --cluster file whose nodes have `rack` labels"
        );
    }
    if ferry_options.split_slowdown_pct == 0 {
        ferry_options.split_slowdown_pct = split_slowdown_pct;
    }
    let knowledge = ferry_sched::Knowledge {
        estimates: args.estimates,
        pace_after_s: args.pace_after,
        split_slowdown_pct,
        per_job_slowdown_untold: false,
    };
    let site = ferry_sched::Site {
        cluster: &cluster,
        queues: &queues,
        cohorts: &cohorts,
        classes: &classes,
    };
    let mut reports = Vec::new();
    for policy in ferry_sched::Policy::ALL {
        let mut options = policy.options();
        if policy == ferry_sched::Policy::Ferry {
            options = ferry_options.clone();
            if let Some(half_life) = args.fairness_half_life {
                options.deficit_half_life_s = half_life;
            }
            options.reclaim_through_reservation |= args.reclaim_through_reservation;
        }
        let probes = ferry_sched::Probes {
            forecast: args.forecast,
        };
        reports.push(
            ferry_sched::simulate_probing(&trace, site, policy, options, knowledge, probes)
                .map_err(|e| in_file(e, trace_path))?,
        );
    }
    if let Some(svg) = &args.svg {
        std::fs::write(svg, ferry_sched::render_svg(&reports, cluster.total_gpus()))
            .with_context(|| format!("cannot write {}", svg.display()))?;
    }
    if let Some(path) = &args.jobs {
        std::fs::write(path, ferry_sched::render_jobs_csv(&reports))
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    for r in &mut reports {
        r.timeline.clear();
    }
    if output::structured(&reports, args.output)? {
        for note in &notes {
            eprintln!("note: {note}");
        }
        return Ok(());
    }
    println!(
        "{}",
        ferry_sched::describe_setup(&trace, &cluster, &queues, knowledge)
    );
    let named = trace.iter().filter(|t| t.priority.is_some()).count();
    if named > 0 {
        println!(
            "priority classes: {} ({named} of {} jobs name one, the others are {}); ferry and \
             kueue order and preempt by them within a queue, slurm-multifactor weighs them as \
             QOS, fifo and easy-backfill order by age alone",
            super::scheduler_options::describe_classes(&classes),
            trace.len(),
            ferry_sched::DEFAULT_PRIORITY
        );
    }
    for note in &notes {
        println!("{note}");
    }
    if let Some(f) = args.load {
        println!(
            "load: arrivals {f}x as fast as the trace's (submit times / {f}); the cluster and \
             quotas are sized for the trace as given"
        );
    }
    if let Some(path) = &args.options {
        println!(
            "ferry runs with the switches in {}: {}",
            path.display(),
            super::scheduler_options::changed(&ferry_options)
        );
    }
    if let Some(half_life) = args.fairness_half_life {
        println!("ferry runs with fairness deficits, half-life {half_life} s");
    }
    if args.reclaim_through_reservation {
        println!("ferry reclaims through reservations");
    }
    print!("{}", ferry_sched::render_table(&reports));
    if let Some(ferry) = reports.first()
        && args.load.is_none()
        && ferry
            .team_share
            .values()
            .any(|t| t.within_tolerance.is_none())
    {
        println!(
            "{}: the teams were all saturated together for {} s (under {} s), so shares are not \
             judged (n/a); `--load 2` replays the arrivals twice as fast to judge them under \
             contention",
            ferry.policy,
            ferry.saturated_s,
            ferry_sched::MIN_SATURATED_S
        );
    }
    Ok(())
}
