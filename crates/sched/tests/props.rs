//! Property tests of the scheduler's invariants over random clusters, queues and workloads.

use std::collections::{BTreeMap, HashMap, HashSet};

use ferry_sched::{
    BorrowWithinCohort, Cluster, CohortSpec, Decision, FlavorQuota, Multifactor, Node, Options,
    PodPlacement, PreemptReason, PreemptionPolicy, PriorityClass, QueueSpec, QueueUsage,
    ReclaimWithinCohort, SchedError, Scheduler, StopPolicy, Topology, WithinQueue, Workload,
};
use proptest::prelude::*;

#[derive(Debug, Clone)]
struct Case {
    cluster: Cluster,
    queues: Vec<QueueSpec>,
    /// A cohort tree over the queues' cohorts, or none (flat cohorts).
    cohorts: Vec<CohortSpec>,
    jobs: Vec<(Workload, u64)>,
    opts: Options,
    stops: Stops,
}

/// Queues stopped for a while (`spec.stopPolicy`), as a control plane does it: the scheduler is
/// rebuilt with queue `i` under `policies[i]` at `hold_at` (0: built so), and rebuilt with every
/// queue released `release_after` seconds later, its running work restored where it runs and
/// its waiting work submitted again.
#[derive(Debug, Clone)]
struct Stops {
    policies: Vec<StopPolicy>,
    hold_at: u64,
    release_after: u64,
}

fn stops() -> impl Strategy<Value = Stops> {
    (
        prop::collection::vec(
            prop::sample::select(vec![
                StopPolicy::None,
                StopPolicy::Hold,
                StopPolicy::HoldAndDrain,
            ]),
            4,
        ),
        prop::sample::select(vec![0u64, 5, 20, 45]),
        1u64..80,
    )
        .prop_map(|(policies, hold_at, release_after)| Stops {
            policies,
            hold_at,
            release_after,
        })
}

fn flavors() -> [&'static str; 2] {
    ["a100", "h100"]
}

fn case() -> impl Strategy<Value = Case> {
    let nodes = prop::collection::vec(
        (0usize..2, prop::sample::select(vec![1u32, 2, 4, 8]), 0u8..3),
        1..8,
    );
    let queues = prop::collection::vec(
        (
            prop::option::of(0u8..2),
            prop::collection::vec(
                (
                    0u32..12,
                    prop::option::of(0u32..12),
                    prop::option::of(0u32..12),
                ),
                2,
            ),
            1u8..4,
            // What its jobs may preempt (`QueueSpec::preemption`): the default in half the
            // queues, any of the 27 in the rest.
            prop_oneof![Just(None), (0u8..27).prop_map(Some)],
        ),
        1..4,
    );
    let jobs = prop::collection::vec(
        (
            0usize..4,
            0usize..3,
            1u32..4,
            prop::sample::select(vec![1u32, 2, 4, 8]),
            1u64..40,
            0u64..60,
            0u8..3,
            prop::option::of(0usize..2),
            // One gang in four must stay in one rack.
            0u8..4,
        ),
        1..30,
    );
    let opts = (
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
        prop::sample::select(vec![3u64, 900]),
        // Fairness deficits: off, or a half-life on the scale of the jobs (1-60 s).
        prop::sample::select(vec![0u64, 30]),
        // Reclaims through another gang's reservation: off (the default) or on; how far past
        // its quota a draining holder may go: unbounded, not at all, or the default half; how
        // much of a reclaim victim its queue must borrow: any part, or the default half;
        // Slurm's multifactor order (the simulator's peer) or not, on the jobs' time scale;
        // gangs split across racks expected to run 50% longer (waiting for a rack when that
        // pays) or not; preempting for priority at once, or only for a wait of 5 s or more.
        (
            any::<bool>(),
            prop::sample::select(vec![None, Some(0u32), Some(50)]),
            prop::sample::select(vec![0u32, 50]),
            any::<bool>(),
            prop::sample::select(vec![0u32, 50]),
            prop::sample::select(vec![0u64, 5]),
        ),
    );
    // A cohort tree over cohorts c0 and c1: both under a root `r`, c1 under c0, or both under
    // an `r` with GPUs of its own; each cohort with GPUs of its own and limits per flavor,
    // and a fair-share weight.
    let tree = prop::option::of((
        0u8..3,
        prop::collection::vec(
            (
                0u32..8,
                prop::option::of(0u32..12),
                prop::option::of(0u32..12),
            ),
            6,
        ),
        prop::collection::vec(prop::sample::select(vec![1.0, 0.25, 4.0]), 3),
    ));
    (nodes, queues, jobs, opts, stops(), tree).prop_map(
        |(
            nodes,
            queues,
            jobs,
            (
                backfill,
                preemption,
                fair,
                loan,
                deficit,
                (through, overshoot, borrowed, slurm, split, patience),
            ),
            stops,
            tree,
        )| {
            let cluster = Cluster {
                nodes: nodes
                    .iter()
                    .enumerate()
                    .map(|(i, (f, g, rack))| Node {
                        name: format!("n{i}"),
                        gpus: *g,
                        flavor: flavors()[*f].into(),
                        rack: (*rack > 0).then(|| format!("r{rack}")),
                        nvlink_domain: None,
                    })
                    .collect(),
            };
            let present: Vec<&str> = flavors()
                .into_iter()
                .filter(|f| cluster.nodes.iter().any(|n| n.flavor == *f))
                .collect();
            // Lending limits first, then borrowing limits within what the rest of the cohort lends.
            let mut specs: Vec<QueueSpec> = queues
                .iter()
                .enumerate()
                .map(|(i, (cohort, quotas, w, policy))| QueueSpec {
                    name: format!("q{i}"),
                    cohort: cohort.map(|c| format!("c{c}")),
                    quotas: present
                        .iter()
                        .zip(quotas)
                        .map(|(f, (nom, _, lend))| FlavorQuota {
                            flavor: (*f).into(),
                            nominal: *nom,
                            borrowing_limit: None,
                            lending_limit: lend.map(|l| l.min(*nom)),
                        })
                        .collect(),
                    fair_share_weight: f64::from(*w),
                    stop_policy: StopPolicy::None,
                    preemption: policy.map(preemption_policy).unwrap_or_default(),
                })
                .collect();
            // A cohort needs two members (one alone is refused as unknown), unless a tree
            // joins it to others (checked once the tree is built).
            for i in (0..specs.len()).filter(|_| tree.is_none()) {
                let Some(c) = specs[i].cohort.clone() else {
                    continue;
                };
                if specs
                    .iter()
                    .filter(|s| s.cohort.as_deref() == Some(c.as_str()))
                    .count()
                    < 2
                {
                    specs[i].cohort = None;
                }
            }
            for i in 0..specs.len() {
                let Some(c) = specs[i].cohort.clone() else {
                    continue;
                };
                for k in 0..specs[i].quotas.len() {
                    let f = specs[i].quotas[k].flavor.clone();
                    let others: u32 = specs
                        .iter()
                        .enumerate()
                        .filter(|(j, s)| *j != i && s.cohort.as_deref() == Some(c.as_str()))
                        .flat_map(|(_, s)| s.quotas.iter().filter(|q| q.flavor == f))
                        .map(|q| q.lending_limit.unwrap_or(q.nominal))
                        .sum();
                    specs[i].quotas[k].borrowing_limit = queues[i].1[k].1.map(|b| b.min(others));
                }
            }
            let mut cohorts = tree.map_or_else(Vec::new, |(shape, quotas, weights)| {
                let names = ["c0", "c1", "r"];
                let parents = match shape {
                    0 => [Some("r"), Some("r"), None],
                    1 => [None, Some("c0"), None],
                    _ => [Some("r"), Some("r"), None],
                };
                (0..3)
                    .filter(|&k| shape != 1 || k < 2)
                    .map(|k| CohortSpec {
                        quotas: present
                            .iter()
                            .enumerate()
                            .map(|(f, name)| {
                                let (own, borrow, lend) = quotas[k * 2 + f];
                                FlavorQuota {
                                    flavor: (*name).into(),
                                    nominal: if k == 2 && shape == 0 { 0 } else { own },
                                    borrowing_limit: borrow.filter(|_| parents[k].is_some()),
                                    lending_limit: lend,
                                }
                            })
                            .collect(),
                        fair_share_weight: weights[k],
                        ..CohortSpec::under(names[k], parents[k])
                    })
                    .collect()
            });
            let probe = |queues: &[QueueSpec], cohorts: &[CohortSpec]| {
                Scheduler::with_cohorts(
                    Cluster {
                        nodes: cluster.nodes.clone(),
                    },
                    queues.to_vec(),
                    cohorts,
                    Vec::new(),
                    Options::default(),
                )
            };
            // Limits the tree cannot honour, and queues it leaves alone, are dropped as a
            // control plane's user would fix them (the refusals are unit-tested).
            while let Err(SchedError::InvalidConfig { field, .. }) = probe(&specs, &cohorts) {
                let index = |at: &str| -> usize {
                    field[at.len()..]
                        .split(']')
                        .next()
                        .and_then(|n| n.parse().ok())
                        .expect("an indexed field")
                };
                if field.starts_with("cohorts[") && field.ends_with("borrowingLimit") {
                    let (k, j) = (
                        index("cohorts["),
                        field
                            .split("quotas[")
                            .nth(1)
                            .and_then(|x| x.split(']').next())
                            .and_then(|n| n.parse::<usize>().ok())
                            .expect("a quota index"),
                    );
                    cohorts[k].quotas[j].borrowing_limit = None;
                } else if field.starts_with("queues[") && field.ends_with(".cohort") {
                    specs[index("queues[")].cohort = None;
                } else {
                    panic!("generated an unexpected refusal at {field}");
                }
            }
            let jobs = jobs
                .into_iter()
                .enumerate()
                .map(|(i, (q, p, pods, g, dur, at, est, fl, topo))| {
                    let w = Workload {
                        id: format!("j{i}"),
                        queue: format!("q{}", q % specs.len()),
                        priority: Some(["low", "mid", "high"][p].into()),
                        pods,
                        gpus_per_pod: g,
                        flavor: fl.map(|f| flavors()[f].into()),
                        expected_duration_s: match est {
                            0 => None,
                            1 => Some(dur),
                            _ => Some(dur * 2),
                        },
                        created_at: at,
                        topology: (topo == 0).then_some(Topology::Rack),
                        split_slowdown_pct: None,
                    };
                    (w, dur)
                })
                .collect();
            let opts = Options {
                backfill,
                preemption,
                fair_sharing: fair,
                lend_reserved_nodes: preemption,
                min_loan_s: loan,
                priority_patience_s: patience,
                deficit_half_life_s: deficit,
                deficit_threshold_s: 1,
                reclaim_through_reservation: through,
                split_slowdown_pct: split,
                drain_overshoot_pct: overshoot,
                reclaim_min_borrowed_pct: borrowed,
                multifactor: slurm.then_some(Multifactor {
                    weight_age: 1_000,
                    weight_fairshare: 10_000,
                    weight_qos: 100_000,
                    max_age_s: 60,
                    decay_half_life_s: 30,
                }),
                ..Options::default()
            };
            Case {
                cluster,
                queues: specs,
                cohorts,
                jobs,
                opts,
                stops,
            }
        },
    )
}

/// One cohort whose quotas add up to the cluster, teams of different sizes arriving in waves:
/// queues run far above their quota while others idle, then an idle one wants more than its
/// quota (where fair-sharing preemption applies); half the cases hold freed GPUs for owed teams,
/// half keep fairness deficits (a 30 s half-life, so they act within these short workloads),
/// half reclaim through other gangs' reservations, half judge fair-sharing preemption by
/// Kueue's rule alone, half weigh a reclaim against its restarts (20 s per GPU, so it acts
/// within these short workloads).
fn fair_case() -> impl Strategy<Value = Case> {
    let quotas = prop::collection::vec((1u32..5, 1u8..3), 2..5);
    let jobs = prop::collection::vec(
        (
            0usize..4,
            1u32..3,
            prop::sample::select(vec![1u32, 2, 4]),
            1u64..60,
            0u64..80,
        ),
        4..40,
    );
    let switches = (
        any::<bool>(),
        any::<bool>(),
        prop::sample::select(vec![0u64, 30]),
        (
            any::<bool>(),
            prop::sample::select(vec![None, Some(0u32), Some(50)]),
            prop::sample::select(vec![0u32, 50]),
            any::<bool>(),
            prop::sample::select(vec![0u64, 20]),
            any::<bool>(),
        ),
    );
    // Half the cases in departments: queues split between cohorts `d0` and `d1` under a root
    // `r` that owns a part of the cluster no queue has (the spare the departments share), the
    // departments weighted 0.25, 1 or 4.
    let departments = prop::option::of((
        1usize..4,
        prop::sample::select(vec![0.25f64, 1.0, 4.0]),
        prop::sample::select(vec![0.25f64, 1.0, 4.0]),
        1u32..3,
    ));
    (2usize..4, quotas, jobs, switches, stops(), departments).prop_map(
        |(
            nodes,
            quotas,
            jobs,
            (backfill, hold, deficit, (through, overshoot, borrowed, minimax, restart, by_key)),
            stops,
            departments,
        )| {
            let cluster = Cluster::uniform(nodes, 4, flavors()[0]);
            let cap = cluster.total_gpus() as u32;
            let total: u32 = quotas.iter().map(|(n, _)| n).sum();
            // With departments the queues hold a quarter or a half of the cluster (some of them
            // nothing), the root the rest.
            let (cap, spare) = match departments {
                Some((_, _, _, part)) => (cap * part / 4, cap - cap * part / 4),
                None => (cap, 0),
            };
            let mut left = cap;
            let queues: Vec<QueueSpec> = quotas
                .iter()
                .enumerate()
                .map(|(i, (n, w))| {
                    let nominal = if i + 1 == quotas.len() {
                        left
                    } else {
                        (n * cap / total).min(left)
                    };
                    left -= nominal;
                    let cohort = match departments {
                        Some((split, ..)) => format!("d{}", usize::from(i >= split)),
                        None => "all".into(),
                    };
                    QueueSpec {
                        name: format!("q{i}"),
                        cohort: Some(cohort),
                        quotas: vec![FlavorQuota {
                            flavor: flavors()[0].into(),
                            nominal,
                            borrowing_limit: None,
                            lending_limit: None,
                        }],
                        fair_share_weight: f64::from(*w),
                        stop_policy: StopPolicy::None,
                        preemption: Default::default(),
                    }
                })
                .collect();
            let nq = queues.len();
            let jobs = jobs
                .into_iter()
                .enumerate()
                .map(|(i, (q, pods, g, dur, at))| {
                    let q = q % nq;
                    let w = Workload {
                        id: format!("j{i}"),
                        queue: format!("q{q}"),
                        priority: None,
                        pods,
                        gpus_per_pod: g,
                        flavor: None,
                        expected_duration_s: Some(dur),
                        // Team q's work arrives around 20 q: waves, so some teams idle while others
                        // borrow everything.
                        created_at: at / 4 + 20 * q as u64,
                        topology: None,
                        split_slowdown_pct: None,
                    };
                    (w, dur)
                })
                .collect();
            let cohorts = match departments {
                Some((_, w0, w1, _)) => vec![
                    CohortSpec {
                        quotas: vec![FlavorQuota {
                            flavor: flavors()[0].into(),
                            nominal: spare,
                            borrowing_limit: None,
                            lending_limit: None,
                        }],
                        ..CohortSpec::under("r", None)
                    },
                    CohortSpec {
                        fair_share_weight: w0,
                        ..CohortSpec::under("d0", Some("r"))
                    },
                    CohortSpec {
                        fair_share_weight: w1,
                        ..CohortSpec::under("d1", Some("r"))
                    },
                ],
                None => Vec::new(),
            };
            Case {
                cluster,
                queues,
                cohorts,
                jobs,
                opts: Options {
                    backfill,
                    hold_for_owed: hold,
                    deficit_half_life_s: deficit,
                    deficit_threshold_s: 1,
                    reclaim_through_reservation: through,
                    drain_overshoot_pct: overshoot,
                    reclaim_min_borrowed_pct: borrowed,
                    fair_preemption_minimax: minimax,
                    reclaim_restart_cost_s: restart,
                    reserve_by_key: by_key,
                    ..Options::default()
                },
                stops,
            }
        },
    )
}

/// Every cohort of `case` within what it holds, by a model of cohort trees written apart from
/// the scheduler's: a queue pools in its cohort what it uses beyond what it does not lend; a
/// cohort holds its own GPUs plus what its queues and child cohorts lend, pools in its parent
/// what its members pool beyond what it does not lend, and may take beyond what it holds at
/// most its borrowing limit (a root: nothing).
fn check_cohorts(case: &Case, usage: &[QueueUsage]) -> Result<(), TestCaseError> {
    let quota = |quotas: &[FlavorQuota], f: &str| -> (u64, Option<u64>, Option<u64>) {
        quotas
            .iter()
            .find(|q| q.flavor == f)
            .map_or((0, None, None), |q| {
                (
                    u64::from(q.nominal),
                    q.borrowing_limit.map(u64::from),
                    q.lending_limit.map(u64::from),
                )
            })
    };
    let spec = |c: &str| case.cohorts.iter().find(|x| x.name == c);
    let mut names: Vec<String> = case
        .queues
        .iter()
        .filter_map(|q| q.cohort.clone())
        .collect();
    for c in &case.cohorts {
        names.push(c.name.clone());
        names.extend(c.parent.clone());
    }
    names.sort();
    names.dedup();
    for f in flavors() {
        // (what it holds, what it lends, what its members pool in it), children first.
        fn held(
            c: &str,
            f: &str,
            case: &Case,
            usage: &[QueueUsage],
            out: &mut BTreeMap<String, (u64, u64, u64)>,
        ) -> (u64, u64, u64) {
            let spec = case.cohorts.iter().find(|x| x.name == c);
            let own: (u64, Option<u64>) = spec
                .and_then(|s| s.quotas.iter().find(|q| q.flavor == f))
                .map_or((0, None), |q| {
                    (u64::from(q.nominal), q.lending_limit.map(u64::from))
                });
            let (mut cap, mut pooled) = (own.0, 0);
            for q in case
                .queues
                .iter()
                .filter(|q| q.cohort.as_deref() == Some(c))
            {
                let Some(x) = q.quotas.iter().find(|x| x.flavor == f) else {
                    continue;
                };
                let lend = u64::from(x.lending_limit.unwrap_or(x.nominal));
                let used = usage
                    .iter()
                    .find(|u| u.name == q.name)
                    .and_then(|u| u.usage.iter().find(|(g, _)| g == f))
                    .map_or(0, |(_, n)| *n);
                cap += lend;
                pooled += used.saturating_sub(u64::from(x.nominal) - lend);
            }
            for child in case
                .cohorts
                .iter()
                .filter(|x| x.parent.as_deref() == Some(c))
            {
                let (ccap, clend, cpooled) = held(&child.name, f, case, usage, out);
                cap += clend;
                pooled += cpooled.saturating_sub(ccap - clend);
            }
            let lend = own.1.map_or(cap, |l| l.min(cap));
            out.insert(c.to_owned(), (cap, lend, pooled));
            (cap, lend, pooled)
        }
        let mut out = BTreeMap::new();
        for root in names
            .iter()
            .filter(|c| spec(c).is_none_or(|s| s.parent.is_none()))
        {
            held(root, f, case, usage, &mut out);
        }
        for (c, (cap, _, pooled)) in out {
            let limit = match spec(&c) {
                Some(s) if s.parent.is_some() => {
                    quota(&s.quotas, f).1.map_or(u64::MAX, |b| cap + b)
                }
                _ => cap,
            };
            prop_assert!(
                pooled <= limit,
                "cohort {c} pools {pooled} {f} GPUs of {cap} (limit {limit})"
            );
        }
    }
    Ok(())
}

/// Three classes; `mid` goes before `low` but never preempts it (`preemptionPolicy: Never`).
/// The `i`-th (of nine) combination of what a queue's jobs may preempt.
fn preemption_policy(i: u8) -> PreemptionPolicy {
    PreemptionPolicy {
        within_queue: [
            WithinQueue::LowerPriority,
            WithinQueue::LowerOrNewerEqualPriority,
            WithinQueue::Never,
        ][usize::from(i % 3)],
        reclaim_within_cohort: [
            ReclaimWithinCohort::Any,
            ReclaimWithinCohort::LowerPriority,
            ReclaimWithinCohort::Never,
        ][usize::from(i / 3 % 3)],
        // Kueue's borrowWithinCohort: off, any lower class, or classes up to `mid`.
        borrow_within_cohort: [
            None,
            Some(BorrowWithinCohort::default()),
            Some(BorrowWithinCohort {
                max_priority_threshold: Some(5),
            }),
        ][usize::from(i / 9 % 3)],
    }
}

fn priorities() -> Vec<PriorityClass> {
    let mut classes = PriorityClass::named(&[("low", 0), ("mid", 5), ("high", 10)]);
    classes[1].preempting = false;
    classes
}

/// The case's queues, stopped as `case.stops` says (`held`) or all released.
fn queues_at(case: &Case, held: bool) -> Vec<QueueSpec> {
    let policies = &case.stops.policies;
    case.queues
        .iter()
        .enumerate()
        .map(|(i, q)| QueueSpec {
            stop_policy: if held {
                policies[i % policies.len()]
            } else {
                StopPolicy::None
            },
            ..q.clone()
        })
        .collect()
}

/// An empty scheduler over `queues`; every generated config is valid by construction.
fn build(case: &Case, queues: Vec<QueueSpec>) -> Result<Scheduler, TestCaseError> {
    Scheduler::with_cohorts(
        case.cluster.clone(),
        queues,
        &case.cohorts,
        priorities(),
        case.opts.clone(),
    )
    .map_err(|e| TestCaseError::fail(format!("valid config refused: {e}")))
}

/// The policy of the queue `id` was submitted to, among `queues`.
fn policy_of(queues: &[QueueSpec], accepted: &[(Workload, u64)], id: &str) -> StopPolicy {
    let (w, _) = accepted
        .iter()
        .find(|(w, _)| w.id == id)
        .expect("known job");
    queues
        .iter()
        .find(|q| q.name == w.queue)
        .expect("its queue")
        .stop_policy
}

/// What the live state of a run is, for a rebuild.
struct Live<'a> {
    accepted: &'a [(Workload, u64)],
    done: &'a HashSet<String>,
    /// id -> (start, end).
    running: &'a HashMap<String, (u64, u64)>,
    placements: &'a HashMap<String, Vec<PodPlacement>>,
    /// Each job's expected duration as the scheduler was last told it.
    expected: &'a HashMap<String, Option<u64>>,
}

/// A control plane's rebuild for a changed queue set (`ferry up`'s `Admission::build`, the
/// operator's `SchedAdmission::rebuild`): running work restored where it runs, then waiting
/// work submitted again in its order of arrival (no job is being evicted: evictions are
/// reported before).
fn rebuild(case: &Case, queues: Vec<QueueSpec>, live: &Live) -> Result<Scheduler, TestCaseError> {
    let mut s = build(case, queues)?;
    let open = || {
        live.accepted
            .iter()
            .filter(|(w, _)| !live.done.contains(&w.id))
            .map(|(w, _)| Workload {
                expected_duration_s: live.expected[&w.id],
                ..w.clone()
            })
    };
    for w in open().filter(|w| live.running.contains_key(&w.id)) {
        let (start, _) = live.running[&w.id];
        let placement = &live.placements[&w.id];
        s.restore(w, placement, start)
            .map_err(|e| TestCaseError::fail(format!("restore refused: {e}")))?;
    }
    for w in open().filter(|w| !live.running.contains_key(&w.id)) {
        s.submit(w)
            .map_err(|e| TestCaseError::fail(format!("submit again refused: {e}")))?;
    }
    Ok(s)
}

/// Drives the scheduler like a runtime would and checks every invariant along the way.
fn run(case: &Case) -> Result<(), TestCaseError> {
    let mut queues = queues_at(case, case.stops.hold_at == 0);
    let mut s = build(case, queues.clone())?;
    let release_at = case.stops.hold_at + case.stops.release_after;
    let mut placements: HashMap<String, Vec<PodPlacement>> = HashMap::new();
    let mut expected: HashMap<String, Option<u64>> = HashMap::new();
    let gpus_of: HashMap<&str, u32> = case
        .cluster
        .nodes
        .iter()
        .map(|n| (n.name.as_str(), n.gpus))
        .collect();
    let rack_of: HashMap<&str, Option<&str>> = case
        .cluster
        .nodes
        .iter()
        .map(|n| (n.name.as_str(), n.rack.as_deref()))
        .collect();
    let mut accepted: Vec<(Workload, u64)> = Vec::new();
    let mut pending_submit: Vec<&(Workload, u64)> = case.jobs.iter().collect();
    pending_submit.sort_by_key(|(w, _)| w.created_at);
    let mut owner: HashMap<(String, u32), String> = HashMap::new();
    let mut running: HashMap<String, (u64, u64)> = HashMap::new(); // id -> (start, end)
    let mut remaining: HashMap<String, u64> = HashMap::new();
    let mut evicting: Vec<String> = Vec::new();
    let mut done: HashSet<String> = HashSet::new();
    let mut edges: Vec<(String, String)> = Vec::new();
    let mut all_edges: Vec<(String, String)> = Vec::new();
    let mut t = 0u64;
    while t < 20_000 {
        // Finish and evict first, then submit, then cycle.
        let ended: Vec<String> = running
            .iter()
            .filter(|(id, (_, e))| *e <= t && !evicting.contains(id))
            .map(|(id, _)| id.clone())
            .collect();
        for id in ended {
            running.remove(&id);
            owner.retain(|_, o| *o != id);
            s.finished(&id)
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
            done.insert(id);
            // Progress was made: a loop is a cycle of preemptions with no completion between.
            check_acyclic(&edges)?;
            all_edges.append(&mut edges);
        }
        for id in std::mem::take(&mut evicting) {
            let (start, _) = running.remove(&id).expect("evicting job runs");
            owner.retain(|_, o| *o != id);
            let r = remaining.get_mut(&id).expect("known");
            *r = r.saturating_sub(t - start).max(1);
            s.checkpointed(&id, t)
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
            s.evicted(&id)
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
        }
        // Queues are stopped, then released: each change rebuilds the scheduler.
        let change = if t == case.stops.hold_at && t > 0 {
            Some(true)
        } else if t == release_at {
            Some(false)
        } else {
            None
        };
        if let Some(held) = change {
            queues = queues_at(case, held);
            let live = Live {
                accepted: &accepted,
                done: &done,
                running: &running,
                placements: &placements,
                expected: &expected,
            };
            s = rebuild(case, queues.clone(), &live)?;
            check_acyclic(&edges)?;
            all_edges.append(&mut edges);
            check_no_ping_pong(&all_edges)?;
            all_edges.clear();
        }
        while let Some((w, d)) = pending_submit
            .first()
            .copied()
            .filter(|(w, _)| w.created_at <= t)
        {
            pending_submit.remove(0);
            match s.submit(w.clone()) {
                Ok(()) => {
                    accepted.push((w.clone(), *d));
                    remaining.insert(w.id.clone(), *d);
                    expected.insert(w.id.clone(), w.expected_duration_s);
                }
                Err(SchedError::InvalidWorkload { field, .. }) => {
                    prop_assert!(field.starts_with("workload."))
                }
                Err(e) => return Err(TestCaseError::fail(format!("unexpected error {e}"))),
            }
        }
        // Some time limits change after submit (`ferry apply`): half of them grow, half shrink,
        // whether the job waits, runs or is being preempted.
        for (w, _) in accepted
            .iter()
            .filter(|(w, _)| w.created_at + 7 == t && !done.contains(&w.id))
        {
            let changed = match w.expected_duration_s {
                Some(e) if e % 2 == 0 => Some(e / 2),
                Some(e) => Some(e * 3),
                None => Some(5),
            };
            s.set_expected_duration(&w.id, changed)
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
            expected.insert(w.id.clone(), changed);
        }
        let before = s.queue_usage();
        let decisions = s.cycle(t);
        check_department_preemption(case, &s, &before, &decisions, &placements)?;
        let mut admitted_now: HashSet<&str> = HashSet::new();
        for d in &decisions {
            match d {
                Decision::Admit { id, placement, .. } => {
                    let (w, _) = accepted
                        .iter()
                        .find(|(w, _)| &w.id == id)
                        .expect("admitted job was accepted");
                    prop_assert!(!running.contains_key(id), "{id} admitted twice");
                    prop_assert!(
                        policy_of(&queues, &accepted, id).is_none(),
                        "{id} admitted from a held queue"
                    );
                    placements.insert(id.clone(), placement.clone());
                    prop_assert_eq!(
                        placement.len(),
                        w.pods as usize,
                        "gang {} partially admitted",
                        id
                    );
                    // A gang required to stay in one rack is on one node, or on nodes of one
                    // labelled rack.
                    if w.topology == Some(Topology::Rack) {
                        let nodes: HashSet<&str> =
                            placement.iter().map(|p| p.node.as_str()).collect();
                        let racks: HashSet<Option<&str>> =
                            nodes.iter().map(|n| rack_of[n]).collect();
                        prop_assert!(
                            nodes.len() == 1 || (racks.len() == 1 && !racks.contains(&None)),
                            "{} required one rack, placed on {:?}",
                            id,
                            placement
                        );
                    }
                    for p in placement {
                        prop_assert_eq!(p.gpus.len(), w.gpus_per_pod as usize);
                        let cap = gpus_of[p.node.as_str()];
                        for g in &p.gpus {
                            prop_assert!(*g < cap, "gpu {} beyond node {}", g, p.node);
                            let prev = owner.insert((p.node.clone(), *g), id.clone());
                            prop_assert!(
                                prev.is_none(),
                                "GPU {}:{} given to {} while {:?} holds it",
                                p.node,
                                g,
                                id,
                                prev
                            );
                        }
                    }
                    running.insert(id.clone(), (t, t + remaining[id]));
                    admitted_now.insert(id);
                }
                Decision::Preempt { id, reason } => {
                    prop_assert!(running.contains_key(id), "preempted {id} is not running");
                    prop_assert!(!evicting.contains(id));
                    // Never admitted into a slot that at once preempts it (a wasted start).
                    prop_assert!(
                        !admitted_now.contains(id.as_str()),
                        "{id} admitted and preempted in one cycle"
                    );
                    evicting.push(id.clone());
                    let by = match reason {
                        PreemptReason::Priority { preemptor }
                        | PreemptReason::Reclaim { preemptor } => {
                            check_policy_allows(&queues, &accepted, preemptor, id, reason)?;
                            preemptor.clone()
                        }
                        PreemptReason::LoanEnded { preemptor } => preemptor.clone(),
                        PreemptReason::QueueStopped { queue } => {
                            let (w, _) = accepted.iter().find(|(w, _)| &w.id == id).expect("known");
                            prop_assert_eq!(&w.queue, queue);
                            prop_assert_eq!(
                                policy_of(&queues, &accepted, id),
                                StopPolicy::HoldAndDrain
                            );
                            continue;
                        }
                    };
                    edges.push((by, id.clone()));
                }
            }
        }
        // A draining queue runs nothing once a cycle has passed: all of it was told to stop.
        for id in running.keys().filter(|id| !evicting.contains(id)) {
            prop_assert_ne!(
                policy_of(&queues, &accepted, id),
                StopPolicy::HoldAndDrain,
                "{} still runs in a drained queue",
                id
            );
        }
        // Where a cycle decided something, and every few seconds besides (each is a replay).
        if !decisions.is_empty() || t.is_multiple_of(5) {
            let held = |id: &str| !policy_of(&queues, &accepted, id).is_none();
            check_forecast(&s, t, &accepted, &done, &running, held)?;
        }
        // Quota: usage within nominal + permitted borrowing, and cohorts within what they hold.
        let usage = s.queue_usage();
        for u in &usage {
            let spec = case
                .queues
                .iter()
                .find(|q| q.name == u.name)
                .expect("queue");
            for (flavor, used) in &u.usage {
                let Some((nominal, max)) = s.quota_limits(&u.name, flavor) else {
                    prop_assert_eq!(*used, 0);
                    continue;
                };
                prop_assert!(
                    *used <= max,
                    "{} uses {} {} > limit {} (nominal {})",
                    u.name,
                    used,
                    flavor,
                    max,
                    nominal
                );
                if let Some(b) = spec
                    .quotas
                    .iter()
                    .find(|q| &q.flavor == flavor)
                    .and_then(|q| q.borrowing_limit)
                {
                    prop_assert!(*used <= nominal + u64::from(b));
                }
            }
        }
        check_cohorts(case, &usage)?;
        if pending_submit.is_empty()
            && running.is_empty()
            && evicting.is_empty()
            && s.pending_len() == 0
        {
            break;
        }
        t += 1;
    }
    // Liveness: under finite load every accepted job ran to completion.
    for (w, _) in &accepted {
        prop_assert!(
            done.contains(&w.id),
            "{} never completed (t = {t}, pending {})",
            w.id,
            s.pending_len()
        );
    }
    check_acyclic(&edges)?;
    all_edges.append(&mut edges);
    check_no_ping_pong(&all_edges)
}

/// Never ping-pong: no two jobs preempt each other, whatever happened in between, within one
/// scheduler's life (a rebuild forgets who preempted whom, as it does on a control plane).
/// A preemption by priority or a reclaim is one the preemptor's queue allows
/// (`QueueSpec::preemption`): within the queue, a lower priority or (when it says so) its own
/// priority created after it; from the cohort, anything borrowed, or only a lower priority, or
/// nothing.
fn check_policy_allows(
    queues: &[QueueSpec],
    accepted: &[(Workload, u64)],
    preemptor: &str,
    victim: &str,
    reason: &PreemptReason,
) -> Result<(), TestCaseError> {
    let find = |id: &str| {
        accepted
            .iter()
            .map(|(w, _)| w)
            .find(|w| w.id == id)
            .expect("a known job")
    };
    let (p, v) = (find(preemptor), find(victim));
    let rank = |w: &Workload| match w.priority.as_deref() {
        Some("low") => 0,
        Some("high") => 2,
        _ => 1,
    };
    let policy = queues
        .iter()
        .find(|q| q.name == p.queue)
        .expect("its queue")
        .preemption;
    // The classes' values (`priorities()`), for a threshold.
    let value = |w: &Workload| [0, 5, 10][rank(w)];
    let allowed = match reason {
        // Kueue's borrowWithinCohort: another member's lower class, where reclaims are allowed.
        PreemptReason::Priority { .. } if p.queue != v.queue => {
            policy
                .borrow_within_cohort
                .is_some_and(|b| b.may_take(value(v), value(p)))
                && policy.reclaim_within_cohort != ReclaimWithinCohort::Never
        }
        PreemptReason::Priority { .. } => {
            p.queue == v.queue
                && match policy.within_queue {
                    WithinQueue::LowerPriority => rank(v) < rank(p),
                    WithinQueue::LowerOrNewerEqualPriority => {
                        rank(v) < rank(p) || (rank(v) == rank(p) && v.created_at > p.created_at)
                    }
                    WithinQueue::Never => false,
                }
        }
        _ => {
            p.queue != v.queue
                && match policy.reclaim_within_cohort {
                    ReclaimWithinCohort::Any => true,
                    ReclaimWithinCohort::LowerPriority => rank(v) < rank(p),
                    ReclaimWithinCohort::Never => false,
                }
        }
    };
    prop_assert!(
        allowed,
        "{preemptor} ({} {:?}) took {victim} ({} {:?}) as {reason:?} against {policy:?}",
        p.queue,
        p.priority,
        v.queue,
        v.priority
    );
    Ok(())
}

/// One side of a fair-sharing comparison in `case`'s cohort tree, by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side<'a> {
    Queue(&'a str),
    Cohort(&'a str),
}

/// Queue `q` and the cohorts above it, from the queue up to its tree's root.
fn path_up<'a>(case: &'a Case, q: &'a str) -> Vec<Side<'a>> {
    let mut path = vec![Side::Queue(q)];
    let spec = case.queues.iter().find(|x| x.name == q).expect("a queue");
    let mut up = spec.cohort.as_deref();
    while let Some(c) = up {
        path.push(Side::Cohort(c));
        up = case
            .cohorts
            .iter()
            .find(|x| x.name == c)
            .and_then(|x| x.parent.as_deref());
    }
    path
}

/// Where the paths of queues `a` and `b` part: on each, the child of the lowest cohort both are
/// under (`None`: no cohort in common).
fn parting<'a>(case: &'a Case, a: &'a str, b: &'a str) -> Option<(Side<'a>, Side<'a>)> {
    let (pa, pb) = (path_up(case, a), path_up(case, b));
    let i = pa
        .iter()
        .position(|x| matches!(x, Side::Cohort(_)) && pb.contains(x))?;
    let j = pb.iter().position(|x| *x == pa[i]).expect("common cohort");
    Some((pa[i - 1], pb[j - 1]))
}

/// Fair sharing between departments, by a model apart from the scheduler's: when a queue at or
/// over its nominal quota takes borrowed work of another department (where the two queues'
/// paths part, one side is a cohort), the victim's department still borrows at least as much
/// as the preemptor's after the move, each over its weight, in the victims' flavor (Kueue's
/// `LessThanOrEqualToFinalShare`: the move could not be made back). Judged on cycles whose
/// only decisions are one preemptor's reclaims, so the state after the cycle is the state
/// after the move (a preemptor is charged when its victims are told to stop).
fn check_department_preemption(
    case: &Case,
    s: &Scheduler,
    before: &[QueueUsage],
    decisions: &[Decision],
    placements: &HashMap<String, Vec<PodPlacement>>,
) -> Result<(), TestCaseError> {
    let mut preemptor = None;
    let mut victims = Vec::new();
    for d in decisions {
        let Decision::Preempt {
            id,
            reason: PreemptReason::Reclaim { preemptor: p },
        } = d
        else {
            return Ok(());
        };
        if preemptor.is_some_and(|x| x != p) {
            return Ok(());
        }
        preemptor = Some(p);
        victims.push(id);
    }
    let Some(p) = preemptor else { return Ok(()) };
    let queue_of = |id: &str| {
        case.jobs
            .iter()
            .find(|(w, _)| w.id == id)
            .map(|(w, _)| w.queue.as_str())
            .expect("a known job")
    };
    let pq = queue_of(p);
    let flavor_of = |id: &str| {
        let node = &placements[id][0].node;
        case.cluster
            .nodes
            .iter()
            .find(|n| &n.name == node)
            .map(|n| n.flavor.as_str())
            .expect("a node")
    };
    let used = |usage: &[QueueUsage], q: &str, f: &str| {
        usage
            .iter()
            .find(|u| u.name == q)
            .and_then(|u| u.usage.iter().find(|(x, _)| x == f))
            .map_or(0, |(_, n)| *n)
    };
    let after = s.queue_usage();
    let cohorts = s.cohort_usage();
    // GPUs a side borrows beyond its nominal ones in flavor `f`, over its weight.
    let borrowed = |side: Side, f: &str| -> f64 {
        let (u, n, w) = match side {
            Side::Queue(q) => {
                let nominal = s.quota_limits(q, f).map_or(0, |(n, _)| n);
                let w = case
                    .queues
                    .iter()
                    .find(|x| x.name == q)
                    .expect("a queue")
                    .fair_share_weight;
                (used(&after, q, f), nominal, w)
            }
            Side::Cohort(c) => {
                let cu = cohorts.iter().find(|x| x.name == c).expect("a cohort");
                let of = |v: &[(String, u64)]| v.iter().find(|(x, _)| x == f).map_or(0, |x| x.1);
                (of(&cu.usage), of(&cu.nominal), cu.weight)
            }
        };
        u.saturating_sub(n) as f64 / w
    };
    for v in victims {
        let f = flavor_of(v);
        let at_quota = s
            .quota_limits(pq, f)
            .is_some_and(|(n, _)| used(before, pq, f) >= n);
        let Some((a, b)) = parting(case, pq, queue_of(v)) else {
            continue;
        };
        if !at_quota || matches!((a, b), (Side::Queue(_), Side::Queue(_))) {
            continue;
        }
        prop_assert!(
            borrowed(b, f) + 1e-9 >= borrowed(a, f),
            "{p} ({pq}, at or over its quota of {f}) took {v} from {b:?}, which then borrows \
             {} against {a:?}'s {} (weighted)",
            borrowed(b, f),
            borrowed(a, f)
        );
    }
    Ok(())
}

fn check_no_ping_pong(edges: &[(String, String)]) -> Result<(), TestCaseError> {
    for (a, b) in edges {
        prop_assert!(
            !edges.contains(&(b.clone(), a.clone())),
            "{a} and {b} preempted each other"
        );
    }
    Ok(())
}

/// `Scheduler::forecast` after a cycle at `t`: every waiting job once, those told a start
/// first, by start, none before `t`; the jobs first in line told the start their reservations
/// know; a job of a held queue no start, and marked so; and, while every job has an expected
/// duration, a start for each other (nothing is stuck, held work holds nothing back).
fn check_forecast(
    s: &Scheduler,
    t: u64,
    accepted: &[(Workload, u64)],
    done: &HashSet<String>,
    running: &HashMap<String, (u64, u64)>,
    held: impl Fn(&str) -> bool,
) -> Result<(), TestCaseError> {
    let forecast = s.forecast(t, ferry_sched::FORECAST_CYCLES);
    let waiting: HashSet<&str> = accepted
        .iter()
        .map(|(w, _)| w.id.as_str())
        .filter(|id| !done.contains(*id) && !running.contains_key(*id))
        .collect();
    let told: HashSet<&str> = forecast.starts.iter().map(|f| f.id.as_str()).collect();
    prop_assert_eq!(told.len(), forecast.starts.len(), "{:?}", forecast);
    prop_assert_eq!(&told, &waiting);
    let times: Vec<Option<u64>> = forecast.starts.iter().map(|f| f.at).collect();
    prop_assert!(
        times.windows(2).all(|w| match (w[0], w[1]) {
            (Some(a), Some(b)) => a <= b,
            (a, b) => a.is_some() || b.is_none(),
        }),
        "{:?}",
        forecast
    );
    prop_assert!(times.iter().flatten().all(|&at| at >= t), "{:?}", forecast);
    for start in &forecast.starts {
        prop_assert_eq!(start.held, held(&start.id), "{:?}", forecast);
        prop_assert!(!start.held || start.at.is_none(), "{:?}", forecast);
    }
    // First in line (for several flavors: the earliest start known).
    let mut promised: HashMap<String, u64> = HashMap::new();
    for e in s.expected_starts() {
        if let Some(at) = e.at {
            let p = promised.entry(e.id).or_insert(at);
            *p = (*p).min(at);
        }
    }
    for (id, at) in promised {
        prop_assert_eq!(forecast.start_of(&id), Some(at), "{}: {:?}", id, forecast);
    }
    let every_end_known = accepted.iter().all(|(w, _)| {
        done.contains(&w.id) || w.expected_duration_s.is_some() || t >= w.created_at + 7
    });
    if every_end_known && !forecast.capped {
        prop_assert!(
            forecast.starts.iter().all(|f| f.held || f.at.is_some()),
            "{:?}",
            forecast
        );
    }
    Ok(())
}

/// The preemptor -> victim graph has no cycle.
fn check_acyclic(edges: &[(String, String)]) -> Result<(), TestCaseError> {
    let mut graph: HashMap<&str, Vec<&str>> = HashMap::new();
    for (a, b) in edges {
        graph.entry(a.as_str()).or_default().push(b.as_str());
    }
    fn dfs<'a>(
        n: &'a str,
        g: &HashMap<&'a str, Vec<&'a str>>,
        state: &mut HashMap<&'a str, u8>,
    ) -> bool {
        match state.get(n) {
            Some(1) => return false,
            Some(2) => return true,
            _ => {}
        }
        state.insert(n, 1);
        for m in g.get(n).into_iter().flatten() {
            if !dfs(m, g, state) {
                return false;
            }
        }
        state.insert(n, 2);
        true
    }
    let mut state = HashMap::new();
    for n in graph.keys() {
        prop_assert!(
            dfs(n, &graph, &mut state),
            "preemption cycle through {n}: {edges:?}"
        );
    }
    Ok(())
}

proptest! {
    // 384 cases in CI; PROPTEST_CASES=20000 for a deep run.
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|c| c.parse().ok()).unwrap_or(384),
        ..ProptestConfig::default()
    })]

    #[test]
    fn scheduler_invariants_hold(case in case()) {
        run(&case)?;
    }

    #[test]
    fn fair_sharing_preemption_keeps_the_invariants(case in fair_case()) {
        run(&case)?;
    }
}
