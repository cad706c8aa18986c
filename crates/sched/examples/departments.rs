//! Departments of unequal size sharing an organisation's GPUs: `cargo run --release -p
//! ferry-sched --example departments [SEEDS]`.
//!
//! Generated traces (seeds 1..=SEEDS, default 12; 3 or 4 teams, job-size mixes Small / Mixed /
//! Gangs, load 1.3, 128 GPUs), each team's nominal quota half what the trace's GPU-hours give
//! it, the other half of the cluster owned by the root cohort `org`. Department `big` holds
//! every team but the last, department `small` the last, each under `org` with fair-share
//! weight 1: the organisation's spare GPUs are owed half to each department, however many
//! teams each has (`entitlements`; `SMALL_WEIGHT=W` gives `small` weight `W`). Each trace runs under Ferry, Ferry without preemption
//! between departments (`ferry-no-dept`: `tree_fair_preemption` off) and Kueue StrictFIFO on
//! the tree, and under EASY backfill (one queue, no tree); every run is judged against the
//! tree's entitlements. `DUMP=DIR` writes each trace and its Kueue queues file (ClusterQueues and
//! Cohorts) to `DIR`, for `ferry sim --trace DIR/sN.csv --queues DIR/sN.yaml`.
//!
//! Prints, per trace and policy, each department's share of the busy GPUs while every team
//! was saturated against its entitlement (`ok` within 10%, `OUT`, `n/a` when that time is
//! under an hour) and the mean JCT; then per policy how many traces had both departments in
//! the band, the median of the small department's share / entitlement, the geometric mean
//! of each policy's mean JCT over Ferry's, its mean utilization, and its preemptions and
//! lost GPU-hours per trace.
use std::fmt::Write as _;

use ferry_sched::{
    CohortSpec, FlavorQuota, GenSpec, Knowledge, Options, Policy, PriorityClass, Probes, QueueSpec,
    Site, SizeMix, TraceJob, cluster_with_gpus, default_queues, generated_trace, simulate_probing,
};

/// The runs compared, Ferry first (the reference): name, policy, and for Ferry whether
/// departments preempt each other (`Options::tree_fair_preemption`).
const RUNS: [(&str, Policy, bool); 4] = [
    ("ferry", Policy::Ferry, true),
    ("ferry-no-dept", Policy::Ferry, false),
    ("kueue-strict", Policy::KueueStrict, true),
    ("easy-backfill", Policy::EasyBackfill, true),
];

/// The tree: each team at half its default quota, in `big` or (the last team) `small`, both
/// under `org`, which owns the rest of the cluster.
fn tree(queues: &[QueueSpec], gpus: u32) -> (Vec<QueueSpec>, Vec<CohortSpec>) {
    let last = queues.len() - 1;
    let queues: Vec<QueueSpec> = queues
        .iter()
        .enumerate()
        .map(|(i, q)| {
            let nominal: u32 = q.quotas.iter().map(|x| x.nominal).sum::<u32>() / 2;
            QueueSpec {
                cohort: Some(if i == last { "small" } else { "big" }.to_owned()),
                quotas: vec![FlavorQuota::unlimited(&q.quotas[0].flavor, nominal)],
                ..q.clone()
            }
        })
        .collect();
    let used: u32 = queues.iter().map(|q| q.quotas[0].nominal).sum();
    let org = CohortSpec {
        quotas: vec![FlavorQuota::unlimited(
            &queues[0].quotas[0].flavor,
            gpus - used,
        )],
        ..CohortSpec::under("org", None)
    };
    let cohorts = vec![
        org,
        CohortSpec::under("big", Some("org")),
        CohortSpec {
            fair_share_weight: small_weight(),
            ..CohortSpec::under("small", Some("org"))
        },
    ];
    (queues, cohorts)
}

/// Department `small`'s fair-share weight: `SMALL_WEIGHT`, else 1.
fn small_weight() -> f64 {
    std::env::var("SMALL_WEIGHT")
        .ok()
        .and_then(|w| w.parse().ok())
        .filter(|w: &f64| w.is_finite() && *w > 0.0)
        .unwrap_or(1.0)
}

/// The Kueue objects `ferry sim --queues` reads for this tree.
fn kueue_yaml(queues: &[QueueSpec], cohorts: &[CohortSpec]) -> String {
    let group = |flavor: &str, nominal: u32| {
        format!(
            "  resourceGroups:\n  - coveredResources: [nvidia.com/gpu]\n    flavors:\n    - name: {flavor}\n      resources:\n      - name: nvidia.com/gpu\n        nominalQuota: {nominal}\n"
        )
    };
    let mut out = String::new();
    for c in cohorts {
        let _ = write!(
            out,
            "---\napiVersion: kueue.x-k8s.io/v1beta2\nkind: Cohort\nmetadata:\n  name: {}\nspec:\n",
            c.name
        );
        if let Some(p) = &c.parent {
            let _ = writeln!(out, "  parentName: {p}");
        }
        if c.fair_share_weight != 1.0 {
            let _ = writeln!(
                out,
                "  fairSharing: {{weight: \"{}\"}}",
                c.fair_share_weight
            );
        }
        if let Some(q) = c.quotas.first() {
            out.push_str(&group(&q.flavor, q.nominal));
        }
    }
    for q in queues {
        let _ = write!(
            out,
            "---\napiVersion: kueue.x-k8s.io/v1beta1\nkind: ClusterQueue\nmetadata:\n  name: {}\nspec:\n  cohort: {}\n",
            q.name.to_lowercase(),
            q.cohort.as_deref().unwrap_or_default()
        );
        out.push_str(&group(&q.quotas[0].flavor, q.quotas[0].nominal));
    }
    out
}

fn trace_csv(trace: &[TraceJob]) -> String {
    let mut out = String::from("job_id,submit_s,duration_s,gpus,nodes,team,status\n");
    for t in trace {
        let _ = writeln!(
            out,
            "{},{},{},{},{},{},{}",
            t.job_id, t.submit_s, t.duration_s, t.gpus, t.nodes, t.team, t.status
        );
    }
    out
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let seeds: u64 = std::env::args().nth(1).map_or(Ok(12), |s| s.parse())?;
    let dump = std::env::var_os("DUMP").map(std::path::PathBuf::from);
    let gpus = 128;
    let cluster = cluster_with_gpus(gpus);
    // Per policy: traces with both departments in the band, judged traces, the small
    // department's share / entitlement per judged trace, and mean JCT over Ferry's (log).
    let mut both_ok = [0usize; RUNS.len()];
    let mut judged = [0usize; RUNS.len()];
    let mut small: [Vec<f64>; RUNS.len()] = Default::default();
    let mut log_jct = [0f64; RUNS.len()];
    // Summed over traces: preemptions, lost GPU-hours, utilization.
    let mut cost = [(0u64, 0f64, 0f64); RUNS.len()];
    for seed in 1..=seeds {
        let mix = [SizeMix::Small, SizeMix::Mixed, SizeMix::Gangs][seed as usize % 3];
        let trace = generated_trace(&GenSpec {
            seed: 9000 + seed,
            jobs: 800,
            teams: 3 + seed as usize % 2,
            gpus,
            load: 1.3,
            mix,
            shape: Default::default(),
        });
        let (queues, cohorts) = tree(&default_queues(&trace, &cluster), gpus);
        if let Some(dir) = &dump {
            std::fs::create_dir_all(dir)?;
            std::fs::write(dir.join(format!("s{seed}.csv")), trace_csv(&trace))?;
            std::fs::write(
                dir.join(format!("s{seed}.yaml")),
                kueue_yaml(&queues, &cohorts),
            )?;
        }
        let mut line = format!(
            "s{seed:<3} {:<6} {} teams",
            format!("{mix:?}"),
            queues.len()
        );
        let mut ferry_jct = 0.0;
        for (i, &(name, p, dept)) in RUNS.iter().enumerate() {
            let r = simulate_probing(
                &trace,
                Site {
                    cluster: &cluster,
                    queues: &queues,
                    cohorts: &cohorts,
                    classes: &PriorityClass::standard(),
                },
                p,
                Options {
                    tree_fair_preemption: dept,
                    ..p.options()
                },
                Knowledge::exact(),
                Probes::default(),
            )?;
            if i == 0 {
                ferry_jct = r.mean_jct_s;
            }
            log_jct[i] += (r.mean_jct_s / ferry_jct).ln();
            cost[i].0 += r.preemptions;
            cost[i].1 += r.lost_gpu_hours;
            cost[i].2 += r.utilization;
            let _ = write!(line, " | {name:<13}");
            let mut all_ok = true;
            for d in ["big", "small"] {
                let c = &r.cohort_share[d];
                let verdict = match c.within_tolerance {
                    None => "n/a",
                    Some(true) => "ok",
                    Some(false) => "OUT",
                };
                all_ok &= c.within_tolerance == Some(true);
                let _ = write!(
                    line,
                    " {d} {:.3}/{:.3} {verdict:<3}",
                    c.share, c.entitlement
                );
            }
            let _ = write!(line, " jct {:>7.0}", r.mean_jct_s);
            if let Some(ok) = r.cohort_share["small"].within_tolerance {
                judged[i] += 1;
                both_ok[i] += usize::from(all_ok && ok);
                small[i].push(r.cohort_share["small"].ratio);
            }
        }
        println!("{line}");
    }
    println!(
        "policy          both departments in the band / judged   small share/entitled (median)   mean JCT / Ferry's (geo mean)   utilization   preemptions, lost GPU-h per trace"
    );
    for (i, (name, ..)) in RUNS.iter().enumerate() {
        small[i].sort_by(f64::total_cmp);
        let median = small[i]
            .get(small[i].len() / 2)
            .copied()
            .unwrap_or(f64::NAN);
        println!(
            "{name:<15} {:>3} / {:<3}                                  {median:.3}                           {:.3}                          {:.3}         {:.1}, {:.1}",
            both_ok[i],
            judged[i],
            (log_jct[i] / seeds as f64).exp(),
            cost[i].2 / seeds as f64,
            cost[i].0 as f64 / seeds as f64,
            cost[i].1 / seeds as f64,
        );
    }
    Ok(())
}
