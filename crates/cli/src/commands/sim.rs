//! `ferry sim TRACE.csv`: replays a cluster trace under Ferry's scheduler and its
//! peers (FIFO, EASY backfill, Kueue StrictFIFO) and prints the comparison.

use std::path::PathBuf;

use crate::args::Output;
use crate::output;

/// Options of `ferry sim`.
#[derive(Debug, clap::Args)]
pub struct SimArgs {
    /// Trace CSV: job_id,submit_s,duration_s,gpus,nodes,team,status.
    pub trace: PathBuf,
    /// Cluster size in GPUs; sized from the trace when omitted.
    #[arg(long)]
    pub gpus: Option<u32>,
    /// Also write the utilization timeline as an SVG chart here.
    #[arg(long)]
    pub svg: Option<PathBuf>,
    /// Output format (the table when omitted).
    #[arg(short, long, value_enum)]
    pub output: Option<Output>,
}

pub fn run(args: SimArgs) -> anyhow::Result<()> {
    let trace = ferry_sched::read_trace(&args.trace)?;
    let cluster = match args.gpus {
        Some(n) => ferry_sched::cluster_with_gpus(n),
        None => ferry_sched::default_cluster(&trace),
    };
    let queues = ferry_sched::default_queues(&trace, &cluster);
    let mut reports = Vec::new();
    for policy in ferry_sched::Policy::ALL {
        reports.push(ferry_sched::simulate(&trace, &cluster, &queues, policy)?);
    }
    if let Some(svg) = &args.svg {
        std::fs::write(svg, ferry_sched::render_svg(&reports, cluster.total_gpus()))?;
    }
    for r in &mut reports {
        r.timeline.clear();
    }
    if output::structured(&reports, args.output)? {
        return Ok(());
    }
    println!("{}", ferry_sched::describe_setup(&trace, &cluster, &queues));
    print!("{}", ferry_sched::render_table(&reports));
    Ok(())
}
