//! How urgent work gets through: `cargo run --release -p ferry-sched --example classes
//! [TRACE.csv ...]`.
//!
//! Replays the generated traces the placement examples use (job-size mixes Small / Mixed /
//! Gangs, both shapes, seeds 1–6, loads 1.0 / 1.4, 128 GPUs) and any trace files given, each
//! on its default contended cluster with default quotas, with every job given a class at
//! random (seeded by its row): a tenth `high`, three tenths `low`, the rest `normal` — the
//! seed articles' urgent jobs next to batch work. Each trace runs under Ferry, EASY backfill
//! (classes ignored), Kueue StrictFIFO and the Slurm multifactor peer (classes as QOS), and
//! under Ferry again without classes (`ferry-flat`): what heeding classes costs the rest.
//!
//! Prints each trace file's figures, then, per group and in all: the geometric means over
//! traces of each run's mean JCT of `high` jobs, of `low` jobs and of all jobs over Ferry's
//! (above 1: Ferry's is lower), the mean utilization difference from Ferry in points, and
//! preemptions and lost GPU-hours per trace.
mod common;

use std::path::Path;

use ferry_sched::{
    Knowledge, Policy, PriorityClass, Probes, SimReport, Site, TraceJob, default_cluster,
    default_queues, read_trace, simulate_probing,
};

/// The runs compared, Ferry first (the reference).
const RUNS: [&str; 5] = [
    "ferry",
    "easy-backfill",
    "kueue-strict",
    "slurm-multifactor",
    "ferry-flat",
];

/// `trace` with a class drawn for each job from its row number (a tenth `high`, three
/// tenths `low`, the rest the default class).
fn with_classes(trace: &[TraceJob]) -> Vec<TraceJob> {
    trace
        .iter()
        .enumerate()
        .map(|(i, t)| {
            // A fixed mix of the row's number: the same trace, the same classes.
            let h = (i as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 54;
            let priority = match h % 10 {
                0 => Some("high".to_string()),
                1..=3 => Some("low".to_string()),
                _ => None,
            };
            TraceJob {
                priority,
                ..t.clone()
            }
        })
        .collect()
}

/// One run's figures: mean JCT of `high` jobs, of `low` jobs and of all jobs, utilization,
/// preemptions, lost GPU-hours. Jobs are judged by the class drawn for them in `classed`
/// (also in the run that did not tell the scheduler).
type Figures = [f64; 6];

fn figures(r: &SimReport, classed: &[TraceJob]) -> Figures {
    let class_jct = |c: &str| {
        let jcts: Vec<f64> = r
            .jobs
            .iter()
            .zip(classed)
            .filter(|(_, t)| t.priority.as_deref() == Some(c))
            .map(|(j, _)| j.jct_s() as f64)
            .collect();
        jcts.iter().sum::<f64>() / jcts.len().max(1) as f64
    };
    [
        class_jct("high"),
        class_jct("low"),
        r.mean_jct_s,
        r.utilization,
        r.preemptions as f64,
        r.lost_gpu_hours,
    ]
}

/// Every run's figures on `trace` (with classes drawn), in `RUNS` order.
fn replay(trace: &[TraceJob]) -> Vec<Figures> {
    let classed = with_classes(trace);
    let cluster = default_cluster(trace);
    let queues = default_queues(trace, &cluster);
    let classes = PriorityClass::standard();
    let site = Site {
        cluster: &cluster,
        queues: &queues,
        cohorts: &[],
        classes: &classes,
    };
    let run = |t: &[TraceJob], p: Policy| {
        let options = if p == Policy::Ferry {
            common::overridden(p.options(), "FERRY_OPTS").expect("FERRY_OPTS is Options JSON")
        } else {
            p.options()
        };
        let r = simulate_probing(t, site, p, options, Knowledge::exact(), Probes::default())
            .expect("the trace replays");
        figures(&r, &classed)
    };
    let unclassed: Vec<TraceJob> = trace
        .iter()
        .map(|t| TraceJob {
            priority: None,
            ..t.clone()
        })
        .collect();
    let mut out: Vec<Figures> = [
        Policy::Ferry,
        Policy::EasyBackfill,
        Policy::KueueStrict,
        Policy::SlurmMultifactor,
    ]
    .into_iter()
    .map(|p| run(&classed, p))
    .collect();
    out.push(run(&unclassed, Policy::Ferry));
    out
}

/// One group's sums: per run Σ ln(mean JCT of high / Ferry's), the same of low and of all
/// jobs, Σ (utilization − Ferry's), Σ preemptions, Σ lost GPU-hours.
#[derive(Default)]
struct Group {
    traces: u32,
    runs: [[f64; 6]; RUNS.len()],
}

impl Group {
    fn add(&mut self, runs: &[Figures]) {
        self.traces += 1;
        let ferry = runs[0];
        let ln = |a: f64, b: f64| (a.max(1.0) / b.max(1.0)).ln();
        for (sum, f) in self.runs.iter_mut().zip(runs) {
            for k in 0..3 {
                sum[k] += ln(f[k], ferry[k]);
            }
            sum[3] += (f[3] - ferry[3]) * 100.0;
            sum[4] += f[4];
            sum[5] += f[5];
        }
    }

    fn print(&self, name: &str) {
        let n = f64::from(self.traces.max(1));
        println!("{name} ({} traces)", self.traces);
        println!(
            "  {:<18} {:>10} {:>10} {:>10} {:>8} {:>12} {:>12}",
            "run", "high JCT", "low JCT", "all JCT", "ΔU", "preempt/tr", "lost GPU-h"
        );
        for (run, r) in RUNS.iter().zip(&self.runs) {
            println!(
                "  {:<18} {:>9.3}x {:>9.3}x {:>9.3}x {:>+8.2} {:>12.1} {:>12.1}",
                run,
                (r[0] / n).exp(),
                (r[1] / n).exp(),
                (r[2] / n).exp(),
                r[3] / n,
                r[4] / n,
                r[5] / n
            );
        }
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut groups: Vec<(String, Group)> = Vec::new();
    let mut all = Group::default();
    let mut add = |name: String, runs: &[Figures]| {
        all.add(runs);
        match groups.iter_mut().find(|(g, _)| *g == name) {
            Some((_, g)) => g.add(runs),
            None => {
                let mut g = Group::default();
                g.add(runs);
                groups.push((name, g));
            }
        }
    };
    for path in std::env::args().skip(1) {
        let trace = read_trace(Path::new(&path))?;
        let runs = replay(&trace);
        println!("{path}: mean JCT of high / low / all jobs (s), utilization");
        for (run, f) in RUNS.iter().zip(&runs) {
            println!(
                "  {run:<18} {:>10.0} {:>10.0} {:>10.0} {:>6.3}",
                f[0], f[1], f[2], f[3]
            );
        }
        add(path, &runs);
    }
    for (mix, shape, trace) in common::generated() {
        add(format!("{mix:?} {shape:?}"), &replay(&trace));
    }
    println!(
        "each run's mean JCT over Ferry's (geometric means; above 1: Ferry's is lower), \
         utilization difference from Ferry (points), per trace"
    );
    for (name, g) in &groups {
        g.print(name);
    }
    all.print("all");
    Ok(())
}
