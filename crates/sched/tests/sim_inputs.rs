//! `ferry sim` runs on users' files (a trace, a cluster, queues): whatever they hold, every policy
//! either simulates the trace to its end or refuses the inputs with an error that says what to
//! fix. Generated inputs reach the edges the parsers let through (empty and oversized nodes,
//! gangs wider than the cluster, a trillion seconds, unknown flavors and cohorts, racks on some
//! nodes only, time limits below the run).

use ferry_sched::{
    Cluster, CohortSpec, Estimates, FlavorQuota, Knowledge, Node, Policy, PriorityClass, Probes,
    QueueSpec, SimReport, Site, StopPolicy, Topology, TraceJob, default_cluster, default_queues,
    simulate_probing, with_load,
};
use proptest::prelude::*;

#[path = "../fuzz/sim_input.rs"]
mod sim_input;

use sim_input::{SimInput, check_report};

/// Seconds up to `max` (what the trace parser accepts), at its edges and ordinary ones.
fn seconds(max: u64) -> impl Strategy<Value = u64> {
    prop_oneof![
        4 => 0u64..20_000,
        1 => Just(0u64),
        1 => Just(max),
        1 => max - 1_000_000..=max,
    ]
}

fn job() -> impl Strategy<Value = TraceJob> {
    (
        (seconds(1_000_000_000_000), seconds(366 * 86_400), 0usize..3),
        (
            prop_oneof![16 => 1u32..=16, 3 => 17u32..=200, 1 => Just(4096u32)],
            prop_oneof![12 => Just(None), 8 => (1u32..=6).prop_map(Some), 1 => Just(Some(4096))],
        ),
        (
            prop::option::of(seconds(1_000_000_000_000)),
            prop_oneof![
                12 => Just(None),
                1 => Just(Some(Topology::Rack)),
                1 => Just(Some(Topology::NvlinkDomain)),
            ],
            prop::option::of(0u32..=1000),
            // A class the standard set has, or one it lacks (refused, naming the fix).
            prop_oneof![
                8 => Just(None),
                2 => Just(Some("high")),
                1 => Just(Some("low")),
                1 => Just(Some("urgent")),
            ],
        ),
    )
        .prop_map(
            |(
                (submit_s, duration_s, team),
                (gpus, nodes),
                (limit, topology, slowdown, priority),
            )| TraceJob {
                job_id: String::new(),
                submit_s,
                duration_s,
                gpus,
                nodes: nodes.unwrap_or(gpus.div_ceil(8)),
                team: ["a", "b", "c"][team].into(),
                status: "COMPLETED".into(),
                time_limit_s: limit.map(|l| l.max(1)),
                topology,
                split_slowdown_pct: slowdown,
                priority: priority.map(str::to_string),
            },
        )
}

/// A node; names repeat only when `dup` (the scheduler refuses the cluster then).
fn node() -> impl Strategy<Value = (Node, bool)> {
    (
        prop_oneof![40 => 1u32..=8, 1 => Just(0u32), 1 => 9u32..=80],
        prop_oneof![12 => Just("gpu"), 1 => Just("other"), 1 => Just("")],
        prop::option::of(0usize..3),
        prop::option::of(0usize..2),
        prop::bool::weighted(0.01),
    )
        .prop_map(|(gpus, flavor, rack, domain, dup)| {
            let node = Node {
                name: String::new(),
                gpus,
                flavor: flavor.into(),
                rack: rack.map(|r| format!("r{r}")),
                nvlink_domain: domain.map(|d| format!("d{d}")),
            };
            (node, dup)
        })
}

fn cluster() -> impl Strategy<Value = Option<Cluster>> {
    prop::option::of(prop::collection::vec(node(), 1..16).prop_map(|nodes| {
        Cluster {
            nodes: nodes
                .into_iter()
                .enumerate()
                .map(|(i, (node, dup))| Node {
                    name: format!("n{}", if dup { 0 } else { i }),
                    ..node
                })
                .collect(),
        }
    }))
}

fn quota() -> impl Strategy<Value = FlavorQuota> {
    (
        prop_oneof![12 => Just("gpu"), 1 => Just("*"), 1 => Just("missing")],
        prop_oneof![12 => 0u32..=40, 1 => Just(u32::MAX)],
        prop::option::weighted(0.2, 0u32..=40),
        prop::option::weighted(0.2, 0u32..=40),
    )
        .prop_map(
            |(flavor, nominal, borrowing_limit, lending_limit)| FlavorQuota {
                flavor: flavor.into(),
                nominal,
                borrowing_limit,
                lending_limit,
            },
        )
}

fn queue(name: &'static str) -> impl Strategy<Value = QueueSpec> {
    (
        prop_oneof![12 => Just(Some("all")), 1 => Just(None), 1 => Just(Some("other"))],
        prop_oneof![1 => Just(Vec::new()), 8 => prop::collection::vec(quota(), 1..=1), 1 => prop::collection::vec(quota(), 2..3)],
        prop_oneof![24 => Just(1.0f64), 1 => Just(0.0), 1 => Just(-1.0), 1 => Just(f64::NAN), 8 => 0.1f64..10.0],
        prop_oneof![Just(StopPolicy::None), Just(StopPolicy::Hold), Just(StopPolicy::HoldAndDrain)],
    )
        .prop_map(move |(cohort, quotas, weight, stop_policy)| QueueSpec {
            name: name.into(),
            cohort: cohort.map(Into::into),
            quotas,
            fair_share_weight: weight,
            stop_policy,
            preemption: Default::default(),
        })
}

/// Queues for the trace's teams `a`, `b` and `c`, one of them sometimes missing and a queue no
/// job uses sometimes added; `None`: the default quotas from the trace.
fn queues() -> impl Strategy<Value = Option<Vec<QueueSpec>>> {
    prop::option::of(
        (
            [queue("a"), queue("b"), queue("c"), queue("nobody")],
            prop::bool::weighted(0.1),
            prop::bool::weighted(0.3),
        )
            .prop_map(|(queues, drop_c, keep_nobody)| {
                let mut queues = Vec::from(queues);
                if !keep_nobody {
                    queues.pop();
                }
                if drop_c {
                    queues.remove(2);
                }
                queues
            }),
    )
}

/// A cohort tree over the queues' cohorts (`all`, `other`) and cohorts no queue names, with
/// parents drawn among them all (loops included: refused, naming the fix).
fn cohorts() -> impl Strategy<Value = Vec<CohortSpec>> {
    let names = ["all", "other", "org", "ghost"];
    prop::collection::vec(
        (
            0usize..4,
            prop::option::weighted(0.7, 0usize..4),
            prop::collection::vec(quota(), 0..2),
        ),
        0..4,
    )
    .prop_map(move |specs| {
        specs
            .into_iter()
            .map(|(name, parent, quotas)| CohortSpec {
                name: names[name].into(),
                parent: parent.map(|p| names[p].into()),
                quotas,
                fair_share_weight: 1.0,
            })
            .collect()
    })
}

fn knowledge() -> impl Strategy<Value = Knowledge> {
    (
        prop_oneof![
            Just(Estimates::Exact),
            Just(Estimates::None),
            Just(Estimates::Trace),
            (1.0f64..4.0).prop_map(|padding| Estimates::Limits { padding }),
        ],
        prop::option::of(prop_oneof![Just(0u64), 1u64..5_000]),
        prop_oneof![3 => Just(0u32), 1 => 1u32..=1000],
    )
        .prop_map(|(estimates, pace_after_s, split_slowdown_pct)| Knowledge {
            estimates,
            pace_after_s,
            split_slowdown_pct,
            per_job_slowdown_untold: false,
        })
}

/// `check_report` of the fuzz target's input file, as a property's failure.
fn report_holds(trace: &[TraceJob], r: &SimReport) -> Result<(), TestCaseError> {
    check_report(trace, r).map_err(TestCaseError::fail)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Every policy replays what the parsers accept, or refuses it naming a fix; nothing panics.
    #[test]
    fn every_policy_replays_or_refuses_what_users_can_write(
        trace in prop::collection::vec(job(), 1..10),
        cluster in cluster(),
        queues in queues(),
        cohorts in prop_oneof![Just(Vec::new()), cohorts()],
        knowledge in knowledge(),
        load in prop::option::of(prop_oneof![Just(0.001f64), Just(1000.0), 0.5f64..4.0]),
        forecast in any::<bool>(),
    ) {
        let cluster = cluster.unwrap_or_else(|| default_cluster(&trace));
        let queues = queues.unwrap_or_else(|| default_queues(&trace, &cluster));
        let trace = match load {
            Some(f) => with_load(&trace, f),
            None => trace,
        };
        for policy in Policy::ALL {
            match simulate_probing(
                &trace,
                Site { cluster: &cluster, queues: &queues, cohorts: &cohorts, classes: &PriorityClass::standard() },
                policy,
                policy.options(),
                knowledge,
                Probes { forecast },
            ) {
                Ok(report) => report_holds(&trace, &report)?,
                Err(e) => {
                    let text = e.to_string();
                    prop_assert!(text.contains("fix"), "{policy:?}: {text}");
                }
            }
        }
    }
}

/// The seeds of the fuzz target `sim_inputs` (`crates/sched/fuzz/corpus/sim_inputs`: a byte of
/// switches, then trace, cluster, queues and cohorts files split by NUL bytes) replay under the policy
/// their first byte picks, or are refused naming a fix, as their names say.
#[test]
fn the_fuzz_seeds_replay_or_refuse_as_named() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/sim_inputs");
    let mut n = 0;
    for entry in std::fs::read_dir(&root).expect("the seed corpus") {
        let path = entry.expect("a seed").path();
        let name = path
            .file_name()
            .expect("a name")
            .to_string_lossy()
            .into_owned();
        let data = std::fs::read(&path).expect("a seed");
        let input = SimInput::decode(&data, &name).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(std::str::from_utf8(&data[1..]).is_ok(), "{name}: not text");
        match input.replay() {
            Ok(report) if name.starts_with("ok_") => {
                check_report(&input.trace, &report).unwrap_or_else(|e| panic!("{name}: {e}"))
            }
            Err(e) if name.starts_with("err_") => {
                assert!(e.to_string().contains("fix"), "{name}: {e}");
            }
            other => panic!("{name}: {other:?}"),
        }
        n += 1;
    }
    assert!(n >= 6, "seeds under {}", root.display());
}
