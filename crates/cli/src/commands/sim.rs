//! `ferry sim --trace TRACE.csv [--cluster CLUSTER.yaml] [--queues QUEUES.yaml]`: replays a
//! cluster trace under Ferry's scheduler and its peers (FIFO, EASY backfill, Kueue StrictFIFO)
//! and prints the comparison, with each team's share against its entitlement.

use std::path::{Path, PathBuf};

use anyhow::Context as _;

use crate::args::Output;
use crate::output;

/// Options of `ferry sim`.
#[derive(Debug, clap::Args)]
pub struct SimArgs {
    /// Trace CSV with a header naming its columns: job_id,submit_s,duration_s,gpus,nodes,team,status in any order (or give it with --trace).
    #[arg(value_name = "TRACE")]
    pub trace_file: Option<PathBuf>,
    /// Trace CSV with a header naming its columns: job_id,submit_s,duration_s,gpus,nodes,team,status in any order.
    #[arg(long, conflicts_with = "trace_file")]
    pub trace: Option<PathBuf>,
    /// Cluster YAML: `nodes: [{name, gpus, flavor, rack?, nvlinkDomain?}]`.
    #[arg(long, conflicts_with = "gpus")]
    pub cluster: Option<PathBuf>,
    /// Cluster size in GPUs (8-GPU nodes); sized from the trace when neither this nor --cluster.
    #[arg(long)]
    pub gpus: Option<u32>,
    /// Queues YAML: a list of `{name, cohort?, quotas: [{flavor, nominal, borrowingLimit?,
    /// lendingLimit?}], fairShareWeight?}`, one per trace team; quotas from GPU-hours when omitted.
    #[arg(long)]
    pub queues: Option<PathBuf>,
    /// Run Ferry's policy with fairness deficits of this half-life in seconds (e.g. 86400):
    /// nominal quota becomes a time-averaged guarantee (docs/scheduler.md); off when omitted.
    #[arg(long, value_name = "SECONDS")]
    pub fairness_half_life: Option<u64>,
    /// Run Ferry's policy with reclaims through reservations: an owner may take single-node
    /// borrowed jobs that outlast another gang's drain on its reserved nodes (docs/scheduler.md).
    #[arg(long)]
    pub reclaim_through_reservation: bool,
    /// Also write the utilization timeline as an SVG chart here.
    #[arg(long)]
    pub svg: Option<PathBuf>,
    /// Output format (the table when omitted).
    #[arg(short, long, value_enum)]
    pub output: Option<Output>,
}

fn read_yaml<T: serde::de::DeserializeOwned>(path: &Path, what: &str) -> anyhow::Result<T> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read {what} file {}", path.display()))?;
    serde_saphyr::from_str(&text).with_context(|| {
        format!(
            "{what} file {} is not valid: see `ferry sim --help` for its fields",
            path.display()
        )
    })
}

pub fn run(args: SimArgs) -> anyhow::Result<()> {
    let Some(trace_path) = args.trace.as_ref().or(args.trace_file.as_ref()) else {
        anyhow::bail!(
            "no trace given: pass --trace FILE.csv (columns job_id,submit_s,duration_s,gpus,nodes,team,status)"
        );
    };
    let trace = ferry_sched::read_trace(trace_path)?;
    let cluster = match (&args.cluster, args.gpus) {
        (Some(path), _) => read_yaml::<ferry_sched::Cluster>(path, "cluster")?,
        (None, Some(n)) => ferry_sched::cluster_with_gpus(n),
        (None, None) => ferry_sched::default_cluster(&trace),
    };
    let queues = match &args.queues {
        Some(path) => read_yaml::<Vec<ferry_sched::QueueSpec>>(path, "queues")?,
        None => ferry_sched::default_queues(&trace, &cluster),
    };
    let mut reports = Vec::new();
    for policy in ferry_sched::Policy::ALL {
        let mut options = policy.options();
        if policy == ferry_sched::Policy::Ferry {
            if let Some(half_life) = args.fairness_half_life {
                options.deficit_half_life_s = half_life;
            }
            options.reclaim_through_reservation |= args.reclaim_through_reservation;
        }
        reports.push(ferry_sched::simulate_with(
            &trace, &cluster, &queues, policy, options,
        )?);
    }
    if let Some(svg) = &args.svg {
        std::fs::write(svg, ferry_sched::render_svg(&reports, cluster.total_gpus()))
            .with_context(|| format!("cannot write {}", svg.display()))?;
    }
    for r in &mut reports {
        r.timeline.clear();
    }
    if output::structured(&reports, args.output)? {
        return Ok(());
    }
    println!("{}", ferry_sched::describe_setup(&trace, &cluster, &queues));
    if let Some(half_life) = args.fairness_half_life {
        println!("ferry runs with fairness deficits, half-life {half_life} s");
    }
    if args.reclaim_through_reservation {
        println!("ferry reclaims through reservations");
    }
    print!("{}", ferry_sched::render_table(&reports));
    Ok(())
}
