//! Ferry vs FIFO and EASY backfill on variants of a trace and on generated traces:
//! `cargo run --release -p ferry-sched --example variants -- [TRACE.csv]`.
use ferry_sched::{
    Cluster, Policy, SimReport, TraceJob, default_cluster, default_queues, simulate,
};
use ferry_sched::{GenSpec, SizeMix, generated_trace};

fn run(name: &str, trace: &[TraceJob], cluster: Option<Cluster>) -> bool {
    let cluster = cluster.unwrap_or_else(|| default_cluster(trace));
    let queues = default_queues(trace, &cluster);
    let t = std::time::Instant::now();
    let r: Vec<SimReport> = [Policy::Ferry, Policy::Fifo, Policy::EasyBackfill]
        .iter()
        .map(|p| simulate(trace, &cluster, &queues, *p).expect("simulates"))
        .collect();
    let (f, fifo, easy) = (&r[0], &r[1], &r[2]);
    let ok_jct = f.mean_jct_s < fifo.mean_jct_s && f.mean_jct_s < easy.mean_jct_s;
    let ok_util = f.utilization > fifo.utilization && f.utilization > easy.utilization;
    let ok_win = f.utilization_in_window > fifo.utilization_in_window
        && f.utilization_in_window > easy.utilization_in_window;
    let fair: Vec<String> = f
        .team_share
        .iter()
        .map(|(t, s)| format!("{t}:{:.3}/{:.3}", s.share, s.entitlement))
        .collect();
    let ok_fair = f
        .team_share
        .values()
        .all(|s| s.within_tolerance != Some(false));
    println!(
        "{name:<34} jct {:>8.0} {:>8.0} {:>8.0} util {:.3} {:.3} {:.3} win {:.3} {:.3} {:.3} pre {:>4} sat {:>7} {} {} {} {} [{}] {:?}",
        f.mean_jct_s,
        fifo.mean_jct_s,
        easy.mean_jct_s,
        f.utilization,
        fifo.utilization,
        easy.utilization,
        f.utilization_in_window,
        fifo.utilization_in_window,
        easy.utilization_in_window,
        f.preemptions,
        f.saturated_s,
        if ok_jct { "JCT-ok" } else { "JCT-LOSE" },
        if ok_util { "U-ok" } else { "U-LOSE" },
        if ok_win { "W-ok" } else { "W-LOSE" },
        if ok_fair { "F-ok/na" } else { "F-OUT" },
        fair.join(" "),
        t.elapsed()
    );
    ok_jct && ok_util && ok_fair
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let mut all = true;
    if let Some(path) = args.get(1).filter(|_| std::env::var("ONLY").is_err()) {
        let trace = ferry_sched::read_trace(std::path::Path::new(path))?;
        all &= run("original", &trace, None);
        let half = trace.len() / 2;
        all &= run("first half", &trace[..half], None);
        all &= run("second half", &trace[half..], None);
        let fast: Vec<TraceJob> = trace
            .iter()
            .map(|j| TraceJob {
                submit_s: j.submit_s * 7 / 10,
                ..j.clone()
            })
            .collect();
        all &= run("submit x0.7", &fast, None);
        let split: Vec<TraceJob> = trace
            .iter()
            .enumerate()
            .map(|(i, j)| {
                let mut j = j.clone();
                if j.team == trace[0].team {
                    j.team = format!("{}-{}", j.team, i % 3);
                }
                j
            })
            .collect();
        all &= run("team split in three", &split, None);
        let odd: Vec<TraceJob> = trace.iter().step_by(2).cloned().collect();
        all &= run("every other row", &odd, None);
        all &= run(
            "every other row, 128 GPUs",
            &odd,
            Some(ferry_sched::cluster_with_gpus(128)),
        );
        all &= run(
            "original, 256 GPUs",
            &trace,
            Some(ferry_sched::cluster_with_gpus(256)),
        );
        all &= run(
            "original, 136 GPUs",
            &trace,
            Some(ferry_sched::cluster_with_gpus(136)),
        );
    }
    let only = std::env::var("ONLY").ok();
    for seed in 1..=12u64 {
        for mix in [SizeMix::Small, SizeMix::Mixed, SizeMix::Gangs] {
            for load in [0.8, 1.0, 1.3] {
                if let Some(o) = &only
                    && *o != format!("{seed}{mix:?}{load}")
                {
                    continue;
                }
                let spec = GenSpec {
                    seed,
                    jobs: 600,
                    teams: 2 + (seed as usize % 4),
                    gpus: 128,
                    load,
                    mix,
                };
                let trace = generated_trace(&spec);
                all &= run(
                    &format!("gen s{seed} {mix:?} load {load}"),
                    &trace,
                    Some(ferry_sched::cluster_with_gpus(128)),
                );
            }
        }
    }
    println!("{}", if all { "ALL OK" } else { "SOME FAILED" });
    Ok(())
}
