//! One scheduling cycle at scale: 100k pending workloads, 100 queues, 2,000 nodes x 8 GPUs.
//!
//! Run: `cargo bench -p ferry-sched --bench cycle`. Prints p50/p99 cycle time and decisions
//! per second for Ferry's incremental scheduler, and the same numbers for a peer in the same
//! process: the same scheduler with its per-cycle scan bound lifted, i.e. a rescan of all
//! pending work every cycle. The ratio is what the incremental design buys. Then one forecast
//! of every waiting job's start (`Scheduler::forecast`, what `ferry up` runs once a pass), as
//! a multiple of a steady cycle, and the copy of the scheduler it replays on. Also Ferry told
//! that split gangs run slower (`splitSlowdownPct`), and its cohorts in a tree (two
//! departments of five cohorts under one organisation, each department borrowing at most a
//! fifth of the cluster), against its default.

use std::time::{Duration, Instant};

use ferry_sched::{
    Cluster, CohortSpec, Decision, FORECAST_CYCLES, FlavorQuota, Node, Options, PriorityClass,
    QueueSpec, Scheduler, StopPolicy, Workload,
};

const NODES: usize = 2_000;
const GPUS: u32 = 8;
const QUEUES: usize = 100;
const COHORT_SIZE: usize = 10;
const PENDING: usize = 100_000;
const STEADY_CYCLES: usize = 200;
const CHURN: usize = 25;

/// Small deterministic generator (xorshift) so both runs see the same workload.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn cluster() -> Cluster {
    Cluster {
        nodes: (0..NODES)
            .map(|i| Node {
                name: format!("node-{i:04}"),
                gpus: GPUS,
                flavor: "H100-80GB".into(),
                rack: Some(format!("rack-{}", i / 32)),
                nvlink_domain: Some(format!("nvl-{}", i / 8)),
            })
            .collect(),
    }
}

fn queues() -> Vec<QueueSpec> {
    let per = (NODES as u32 * GPUS) / QUEUES as u32;
    (0..QUEUES)
        .map(|i| QueueSpec {
            name: format!("team-{i:03}"),
            cohort: Some(format!("cohort-{}", i / COHORT_SIZE)),
            quotas: vec![FlavorQuota {
                flavor: "H100-80GB".into(),
                nominal: per,
                borrowing_limit: None,
                lending_limit: None,
            }],
            fair_share_weight: 1.0 + (i % 3) as f64,
            stop_policy: StopPolicy::None,
            preemption: Default::default(),
        })
        .collect()
}

/// Cohorts 0-4 in department `dept-0`, 5-9 in `dept-1`, both under `org`; each department
/// borrows at most a fifth of the cluster from the other.
fn tree() -> Vec<CohortSpec> {
    let limit = NODES as u32 * GPUS / 5;
    let mut specs: Vec<CohortSpec> = (0..QUEUES / COHORT_SIZE)
        .map(|c| CohortSpec::under(&format!("cohort-{c}"), Some(&format!("dept-{}", c / 5))))
        .collect();
    specs.extend((0..2).map(|d| CohortSpec {
        quotas: vec![FlavorQuota {
            borrowing_limit: Some(limit),
            ..FlavorQuota::unlimited("H100-80GB", 0)
        }],
        ..CohortSpec::under(&format!("dept-{d}"), Some("org"))
    }));
    specs
}

fn priorities() -> Vec<PriorityClass> {
    PriorityClass::named(&[("low", 0), ("normal", 10), ("high", 100)])
}

fn workload(rng: &mut Rng, i: usize, now: u64) -> Workload {
    const SHAPES: [(u32, u32); 8] = [
        (1, 1),
        (1, 1),
        (1, 2),
        (1, 4),
        (1, 8),
        (1, 8),
        (2, 8),
        (4, 8),
    ];
    let (pods, g) = SHAPES[rng.below(SHAPES.len() as u64) as usize];
    let prio = match rng.below(10) {
        0 => "high",
        1..=3 => "low",
        _ => "normal",
    };
    Workload {
        id: format!("w{i}"),
        queue: format!("team-{:03}", rng.below(QUEUES as u64)),
        priority: Some(prio.into()),
        pods,
        gpus_per_pod: g,
        flavor: None,
        expected_duration_s: (rng.below(4) > 0).then(|| 600 + rng.below(36_000)),
        created_at: now,
        topology: None,
        split_slowdown_pct: None,
    }
}

struct Stats {
    first: Duration,
    cycles: Vec<Duration>,
    decisions: usize,
    submit: Duration,
    /// One `Scheduler::forecast` after the steady cycles: its time and what it told, and the
    /// time of the copy it replays on (all the Kubernetes operator holds its lock for).
    forecast: Option<(Duration, ferry_sched::Forecast, Duration)>,
}

fn run(opts: Options, cohorts: &[CohortSpec], forecast: bool) -> Stats {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut s = Scheduler::with_cohorts(cluster(), queues(), cohorts, priorities(), opts)
        .expect("valid config");
    let t = Instant::now();
    for i in 0..PENDING {
        s.submit(workload(&mut rng, i, i as u64 / 100))
            .expect("feasible workload");
    }
    let submit = t.elapsed();
    let mut running: Vec<String> = Vec::new();
    let mut now = 1_000u64;
    let t = Instant::now();
    let first = s.cycle(now);
    let first_t = t.elapsed();
    for d in first {
        if let Decision::Admit { id, .. } = d {
            running.push(id);
        }
    }
    let mut next_id = PENDING;
    let mut cycles = Vec::with_capacity(STEADY_CYCLES);
    let mut decisions = 0;
    for _ in 0..STEADY_CYCLES {
        now += 10;
        // Some work ends (completed or evicted), new work arrives.
        for _ in 0..CHURN.min(running.len()) {
            let k = rng.below(running.len() as u64) as usize;
            let id = running.swap_remove(k);
            if s.finished(&id).is_err() {
                continue;
            }
        }
        for _ in 0..CHURN {
            s.submit(workload(&mut rng, next_id, now))
                .expect("feasible workload");
            next_id += 1;
        }
        let t = Instant::now();
        let out = s.cycle(now);
        cycles.push(t.elapsed());
        decisions += out.len();
        for d in out {
            match d {
                Decision::Admit { id, .. } => running.push(id),
                Decision::Preempt { id, .. } => {
                    running.retain(|r| *r != id);
                    s.evicted(&id).expect("preempted workload is evicting");
                }
            }
        }
    }
    let forecast = forecast.then(|| {
        let t = Instant::now();
        let f = s.forecast(now, FORECAST_CYCLES);
        let took = t.elapsed();
        let t = Instant::now();
        let copy = std::hint::black_box(s.clone());
        let copied = t.elapsed();
        drop(copy);
        (took, f, copied)
    });
    Stats {
        first: first_t,
        cycles,
        decisions,
        submit,
        forecast,
    }
}

fn pct(v: &mut [Duration], p: f64) -> Duration {
    v.sort();
    v[((v.len() as f64 * p).ceil() as usize).clamp(1, v.len()) - 1]
}

fn report(name: &str, st: &mut Stats) -> (Duration, Duration) {
    let total: Duration = st.cycles.iter().sum();
    let p50 = pct(&mut st.cycles, 0.50);
    let p99 = pct(&mut st.cycles, 0.99);
    println!(
        "{name:<28} submit {:>6.0} ms | first (fill) cycle {:>7.1} ms | steady p50 {:>7.2} ms  p99 {:>7.2} ms | {:>9.0} decisions/s",
        st.submit.as_secs_f64() * 1e3,
        st.first.as_secs_f64() * 1e3,
        p50.as_secs_f64() * 1e3,
        p99.as_secs_f64() * 1e3,
        st.decisions as f64 / total.as_secs_f64().max(1e-9),
    );
    (p50, p99)
}

fn main() {
    println!(
        "{PENDING} pending workloads, {QUEUES} queues in cohorts of {COHORT_SIZE}, {NODES} nodes x {GPUS} GPUs; \
         {STEADY_CYCLES} steady cycles, {CHURN} finishes + {CHURN} submits before each"
    );
    let mut ferry = run(Options::default(), &[], true);
    let (f50, f99) = report("ferry (incremental)", &mut ferry);
    if let Some((took, f, copied)) = &ferry.forecast {
        let told = f.starts.iter().filter(|x| x.at.is_some()).count();
        println!(
            "forecast of every waiting job: {:.0} ms = {:.0}x a steady p50 cycle, {} cycles replayed \
             ({:.1}x a p50 cycle each, the copy included){}; {told} of {} waiting told a start",
            took.as_secs_f64() * 1e3,
            took.as_secs_f64() / f50.as_secs_f64().max(1e-9),
            f.cycles,
            took.as_secs_f64() / f.cycles.max(1) as f64 / f50.as_secs_f64().max(1e-9),
            if f.capped { ", capped" } else { "" },
            f.starts.len(),
        );
        println!(
            "  the copy it replays on: {:.1} ms = {:.1}x a steady p50 cycle ({:.1}% of the forecast; \
             the operator holds its lock for the copy only)",
            copied.as_secs_f64() * 1e3,
            copied.as_secs_f64() / f50.as_secs_f64().max(1e-9),
            100.0 * copied.as_secs_f64() / took.as_secs_f64().max(1e-9),
        );
    }
    // Told that gangs split across racks run 25% longer, gangs weigh waiting for one rack
    // against splitting: the extra walks over expected ends, timed against the default.
    let mut split = run(
        Options {
            split_slowdown_pct: 25,
            ..Options::default()
        },
        &[],
        false,
    );
    let (s50, s99) = report("ferry, splitSlowdownPct 25", &mut split);
    println!(
        "ratio split-aware/ferry: p50 {:.2}x  p99 {:.2}x",
        s50.as_secs_f64() / f50.as_secs_f64().max(1e-9),
        s99.as_secs_f64() / f99.as_secs_f64().max(1e-9)
    );
    // The same queues with their cohorts in a tree: every quota check walks up to the root.
    let mut treed = run(Options::default(), &tree(), false);
    let (t50, t99) = report("ferry, cohort tree", &mut treed);
    println!(
        "ratio tree/ferry: p50 {:.2}x  p99 {:.2}x",
        t50.as_secs_f64() / f50.as_secs_f64().max(1e-9),
        t99.as_secs_f64() / f99.as_secs_f64().max(1e-9)
    );
    let mut peer = run(
        Options {
            max_candidates_per_cycle: usize::MAX,
            max_preemption_attempts_per_cycle: usize::MAX,
            ..Options::default()
        },
        &[],
        false,
    );
    let (p50, p99) = report("peer (rescan all pending)", &mut peer);
    println!(
        "ratio peer/ferry: p50 {:.1}x  p99 {:.1}x   (goal: ferry p99 < 50 ms)",
        p50.as_secs_f64() / f50.as_secs_f64().max(1e-9),
        p99.as_secs_f64() / f99.as_secs_f64().max(1e-9)
    );
}
