//! When staying in one rack pays: `cargo run --release -p ferry-sched --example racks
//! [TRACE.csv ...]`.
//!
//! A gang split across racks runs longer when its collectives cross the slower links between
//! racks. The simulator can make it so (`Knowledge::split_slowdown_pct`, for every policy
//! alike); this replays generated traces (job-size mixes Small / Mixed / Gangs, both shapes,
//! seeds 1–6, loads 1.0 / 1.4, 128 GPUs) and any trace files given, each on its default
//! contended cluster with racks of four 8-GPU nodes, at several slowdowns, under:
//!
//! * `prefer`: Ferry's default, one rack when one has room, else across racks at once;
//! * `require`: every multi-node gang that fits one rack required to stay in one
//!   (`topology: rack`), so it waits for one;
//! * `aware`: Ferry told the slowdown (`Options::split_slowdown_pct`), so a gang waits for one
//!   rack only when that ends it sooner than starting split;
//! * `easy`: the EASY backfill baseline, for scale.
//!
//! Prints, per slowdown and group: the geometric means of `require`'s, `aware`'s and `easy`'s
//! mean JCT over `prefer`'s, their utilization differences from `prefer` (points), and the
//! gang starts split across racks of those one rack could hold.
//!
//! Then the same traces with gangs unlike each other: every other multi-node gang runs twice
//! the slowdown split, the rest no slower (the same mean), under `prefer`, Ferry told the mean
//! for the whole cluster (`cluster`), and Ferry told each gang's own (`per-job`, as
//! `spec.resources.splitSlowdownPct` would).
mod common;

use std::path::Path;

use common::RACK_NODES;
use ferry_sched::{
    Knowledge, Options, Policy, SimReport, SizeMix, TraceJob, default_cluster, default_queues,
    read_trace, requiring_one_rack, simulate_knowing, with_racks,
};

/// Split slowdowns replayed (percent).
const SLOWDOWNS: [u32; 6] = [0, 5, 10, 25, 50, 100];

/// The runs compared, `prefer` first (the reference).
const RUNS: [&str; 4] = ["prefer", "require", "aware", "easy"];

/// The runs compared on gangs unlike each other, `prefer` first.
const MIXED_RUNS: [&str; 3] = ["prefer", "cluster", "per-job"];

/// One group's sums over `N` runs named `names`.
struct Group<const N: usize> {
    names: [&'static str; N],
    traces: u32,
    /// Per run: Σ ln(mean JCT / prefer's), Σ (utilization − prefer's), traces with a lower mean
    /// JCT than prefer's, gang starts one rack could hold, of those split.
    runs: [(f64, f64, u32, u64, u64); N],
}

impl<const N: usize> Group<N> {
    fn new(names: [&'static str; N]) -> Self {
        Group {
            names,
            traces: 0,
            runs: [(0.0, 0.0, 0, 0, 0); N],
        }
    }

    fn add(&mut self, r: &[SimReport; N]) {
        self.traces += 1;
        for (sum, x) in self.runs.iter_mut().zip(r) {
            sum.0 += (x.mean_jct_s / r[0].mean_jct_s).ln();
            sum.1 += x.utilization - r[0].utilization;
            sum.2 += u32::from(x.mean_jct_s < r[0].mean_jct_s);
            sum.3 += x.placement.one_rack_fits.unwrap_or(0);
            sum.4 += x.placement.split_across_racks.unwrap_or(0);
        }
    }

    fn print(&self, name: &str) {
        let n = f64::from(self.traces.max(1));
        let cols: Vec<String> = self
            .names
            .iter()
            .zip(&self.runs)
            .skip(1)
            .map(|(run, s)| {
                format!(
                    "{run} {:.3} ({:>2} lower) {:+.2} pts",
                    (s.0 / n).exp(),
                    s.2,
                    100.0 * s.1 / n
                )
            })
            .collect();
        let split: Vec<String> = self
            .names
            .iter()
            .zip(&self.runs)
            .map(|(run, s)| format!("{run} {}/{}", s.4, s.3))
            .collect();
        println!(
            "{name:<28} {:>3} traces | mean JCT / prefer's, util − prefer's: {} | split/one rack \
             fits: {}",
            self.traces,
            cols.join(", "),
            split.join(", ")
        );
    }
}

/// The four runs on `trace` with gangs split across racks `pct` percent slower.
fn replay(trace: &[TraceJob], pct: u32) -> [SimReport; 4] {
    let cluster = with_racks(default_cluster(trace), RACK_NODES);
    let queues = default_queues(trace, &cluster);
    let know = Knowledge {
        split_slowdown_pct: pct,
        ..Knowledge::exact()
    };
    let aware = Options {
        split_slowdown_pct: pct,
        ..Options::default()
    };
    let required = requiring_one_rack(trace, RACK_NODES);
    let run = |t: &[TraceJob], p: Policy, o: Options| {
        simulate_knowing(t, &cluster, &queues, p, o, know).expect("simulates")
    };
    [
        run(trace, Policy::Ferry, Options::default()),
        run(&required, Policy::Ferry, Options::default()),
        run(trace, Policy::Ferry, aware),
        run(trace, Policy::EasyBackfill, Policy::EasyBackfill.options()),
    ]
}

/// `trace` with every other multi-node gang slowed `2 × pct` split and the rest not at all.
fn unlike(trace: &[TraceJob], pct: u32) -> Vec<TraceJob> {
    let mut gangs = 0u32;
    trace
        .iter()
        .map(|t| {
            let gang = t.shape().0 > 1;
            gangs += u32::from(gang);
            TraceJob {
                split_slowdown_pct: gang.then_some(if gangs.is_multiple_of(2) {
                    2 * pct
                } else {
                    0
                }),
                ..t.clone()
            }
        })
        .collect()
}

/// `prefer`, `cluster` and `per-job` on `trace` with gangs unlike each other (mean `pct`).
fn replay_unlike(trace: &[TraceJob], pct: u32) -> [SimReport; 3] {
    let cluster = with_racks(default_cluster(trace), RACK_NODES);
    let queues = default_queues(trace, &cluster);
    let unlike = unlike(trace, pct);
    // Every gang runs its own slowdown; Ferry is told each one only in the per-job run.
    let untold = Knowledge {
        per_job_slowdown_untold: true,
        ..Knowledge::exact()
    };
    let told_mean = Options {
        split_slowdown_pct: pct,
        ..Options::default()
    };
    let run = |o: Options, k: Knowledge| {
        simulate_knowing(&unlike, &cluster, &queues, Policy::Ferry, o, k).expect("simulates")
    };
    [
        run(Options::default(), untold),
        run(told_mean, untold),
        run(Options::default(), Knowledge::exact()),
    ]
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let files: Vec<(String, Vec<TraceJob>)> = std::env::args()
        .skip(1)
        .map(|path| {
            let trace = read_trace(Path::new(&path))?;
            let name = Path::new(&path)
                .file_name()
                .map_or(path.clone(), |f| f.to_string_lossy().into_owned());
            Ok((name, trace))
        })
        .collect::<Result<_, Box<dyn std::error::Error>>>()?;
    let generated = common::generated();
    for pct in SLOWDOWNS {
        println!("split slowdown {pct}%");
        let mut all = Group::new(RUNS);
        for mix in [SizeMix::Small, SizeMix::Mixed, SizeMix::Gangs] {
            let mut group = Group::new(RUNS);
            for (_, _, trace) in generated.iter().filter(|t| t.0 == mix) {
                let r = replay(trace, pct);
                group.add(&r);
                all.add(&r);
            }
            group.print(&format!("  {mix:?}"));
        }
        all.print("  all generated");
        for (name, trace) in &files {
            let mut one = Group::new(RUNS);
            one.add(&replay(trace, pct));
            one.print(&format!("  {name}"));
        }
    }
    for pct in SLOWDOWNS.into_iter().filter(|&p| p > 0) {
        println!(
            "gangs unlike each other: every other one {}% slower split, the rest 0%",
            2 * pct
        );
        let mut all = Group::new(MIXED_RUNS);
        for (_, _, trace) in generated.iter().filter(|t| t.0 != SizeMix::Small) {
            all.add(&replay_unlike(trace, pct));
        }
        all.print("  Mixed and Gangs");
        for (name, trace) in &files {
            let mut one = Group::new(MIXED_RUNS);
            one.add(&replay_unlike(trace, pct));
            one.print(&format!("  {name}"));
        }
    }
    Ok(())
}
