//! Ferry against FIFO and EASY backfill on generated traces it was not tuned on: several seeds,
//! load levels and job-size mixes, each on a 128-GPU cluster with default (GPU-hour) quotas.

use ferry_sched::{
    GenSpec, Policy, SimReport, SizeMix, cluster_with_gpus, default_queues, generated_trace,
    render_table, simulate,
};

fn compare(spec: &GenSpec) -> (SimReport, SimReport, SimReport, String) {
    let trace = generated_trace(spec);
    let cluster = cluster_with_gpus(spec.gpus);
    let queues = default_queues(&trace, &cluster);
    let run = |p| simulate(&trace, &cluster, &queues, p).expect("simulation runs");
    let (f, fifo, easy) = (
        run(Policy::Ferry),
        run(Policy::Fifo),
        run(Policy::EasyBackfill),
    );
    let table = format!(
        "{spec:?}\n{}",
        render_table(&[f.clone(), fifo.clone(), easy.clone()])
    );
    (f, fifo, easy, table)
}

/// The bar is "lower mean JCT and higher utilization than FIFO and EASY on every trace".
/// On these twelve traces (seeds never used while tuning) it holds for every Mixed trace; the
/// assertions below are exactly what holds, and docs/scheduler.md lists the measured gaps
/// (Gangs: mean JCT 1-3% above EASY on seed 21; Small: utilization below EASY, once below FIFO).
#[test]
fn ferry_against_fifo_and_easy_on_generated_traces() {
    let mut failures = Vec::new();
    let mut runs = 0;
    for seed in [21u64, 22] {
        for mix in [SizeMix::Small, SizeMix::Mixed, SizeMix::Gangs] {
            for load in [0.9, 1.3] {
                let spec = GenSpec {
                    seed,
                    jobs: 300,
                    teams: 2 + (seed as usize % 3),
                    gpus: 128,
                    load,
                    mix,
                };
                let (f, fifo, easy, table) = compare(&spec);
                runs += 1;
                let line = format!(
                    "seed {seed} {mix:?} load {load}: mean JCT ferry {:.0} fifo {:.0} easy {:.0}; \
                     utilization ferry {:.3} fifo {:.3} easy {:.3}",
                    f.mean_jct_s,
                    fifo.mean_jct_s,
                    easy.mean_jct_s,
                    f.utilization,
                    fifo.utilization,
                    easy.utilization
                );
                println!("{line}");
                let mut check = |ok: bool, what: &str| {
                    if !ok {
                        failures.push(format!("{what}: {line}\n{table}"));
                    }
                };
                check(f.mean_jct_s < fifo.mean_jct_s, "mean JCT vs FIFO");
                if mix != SizeMix::Gangs {
                    check(f.mean_jct_s < easy.mean_jct_s, "mean JCT vs EASY");
                }
                if mix == SizeMix::Mixed {
                    check(f.utilization > fifo.utilization, "utilization vs FIFO");
                    check(f.utilization > easy.utilization, "utilization vs EASY");
                }
                if mix == SizeMix::Gangs {
                    check(f.utilization > fifo.utilization, "utilization vs FIFO");
                }
            }
        }
    }
    assert_eq!(runs, 12);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn saturated_teams_get_their_entitlement_within_ten_percent_on_generated_traces() {
    // Offered load twice the cluster: every team has a backlog for most of the trace.
    let mut failures = Vec::new();
    for (seed, mix) in [
        (41u64, SizeMix::Small),
        (42, SizeMix::Small),
        (43, SizeMix::Mixed),
    ] {
        let spec = GenSpec {
            seed,
            jobs: 300,
            teams: 3,
            gpus: 64,
            load: 2.0,
            mix,
        };
        let trace = generated_trace(&spec);
        let cluster = cluster_with_gpus(spec.gpus);
        let queues = default_queues(&trace, &cluster);
        let f = simulate(&trace, &cluster, &queues, Policy::Ferry).expect("simulation runs");
        let table = render_table(std::slice::from_ref(&f));
        println!("{spec:?}\n{table}");
        assert!(
            f.saturated_s > 20_000,
            "the trace must saturate every team\n{table}"
        );
        for (team, s) in &f.team_share {
            if s.within_tolerance != Some(true) {
                failures.push(format!(
                    "{spec:?} team {team}: share {:.3} vs entitlement {:.3}\n{table}",
                    s.share, s.entitlement
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
