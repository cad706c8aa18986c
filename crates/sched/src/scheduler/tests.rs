//! Unit tests of the scheduler state machine: one scenario per rule, decisions asserted.

use super::*;
use crate::config::{
    ANY_FLAVOR, Cluster, FlavorQuota, Options, PreemptReason, PriorityClass, QueueSpec,
    ReclaimWithinCohort, StopPolicy, Topology, WithinQueue, Workload,
};
use crate::error::SchedError;

fn queue(name: &str, cohort: Option<&str>, nominal: u32) -> QueueSpec {
    QueueSpec {
        quotas: vec![FlavorQuota::unlimited("gpu", nominal)],
        ..QueueSpec::any_flavor(name, cohort, nominal)
    }
}

fn wl(id: &str, q: &str, pods: u32, g: u32, t: Time, dur: Option<u64>) -> Workload {
    Workload {
        id: id.into(),
        queue: q.into(),
        priority: None,
        pods,
        gpus_per_pod: g,
        flavor: None,
        expected_duration_s: dur,
        created_at: t,
        topology: None,
        split_slowdown_pct: None,
    }
}

fn admitted(d: &[Decision]) -> Vec<String> {
    d.iter()
        .filter_map(|x| match x {
            Decision::Admit { id, .. } => Some(id.clone()),
            _ => None,
        })
        .collect()
}

/// The nodes `d` admits `id` on, one per pod (none when it does not admit it).
fn nodes_of(d: &[Decision], id: &str) -> Vec<String> {
    d.iter()
        .find_map(|x| match x {
            Decision::Admit {
                id: i, placement, ..
            } if i == id => Some(placement.iter().map(|p| p.node.clone()).collect()),
            _ => None,
        })
        .unwrap_or_default()
}

fn local(gpus: u32) -> Scheduler {
    let q = QueueSpec::any_flavor("default", None, gpus);
    Scheduler::new(
        Cluster::local(gpus, "local"),
        vec![q],
        PriorityClass::standard(),
    )
    .unwrap()
}

fn on(gpus: &[u32]) -> Vec<PodPlacement> {
    vec![PodPlacement {
        node: "local".into(),
        gpus: gpus.to_vec(),
    }]
}

#[test]
fn restored_work_holds_its_gpus_and_can_still_be_preempted() {
    let mut s = local(4);
    let low = Workload::single("low", "default", Some("low"), 2, 0);
    s.restore(low, &on(&[1, 2]), 5).unwrap();
    assert!(s.cycle(10).is_empty(), "restoring emits no decision");
    assert_eq!(s.queue_usage()[0].usage, vec![("local".to_string(), 2)]);
    // The two GPUs left go to a normal job; the ones the restored job holds are not reused.
    s.submit(Workload::single("mid", "default", None, 2, 11))
        .unwrap();
    let d = s.cycle(12);
    let [Decision::Admit { placement, .. }] = &d[..] else {
        panic!("{d:?}")
    };
    assert_eq!(placement[0].gpus, [0, 3]);
    // A high-priority job still preempts the restored low one (the lowest priority).
    s.submit(Workload::single("high", "default", Some("high"), 2, 20))
        .unwrap();
    let d = s.cycle(21);
    assert!(
        matches!(&d[..], [Decision::Preempt { id, .. }] if id == "low"),
        "{d:?}"
    );
    s.evicted("low").unwrap();
    let d = s.cycle(22);
    assert!(
        matches!(&d[..], [Decision::Admit { id, placement, .. }] if id == "high" && placement[0].gpus == [1, 2]),
        "{d:?}"
    );
}

#[test]
fn restore_refuses_gpus_that_are_held_or_do_not_exist() {
    let mut s = local(4);
    s.restore(
        Workload::single("a", "default", None, 2, 0),
        &on(&[0, 1]),
        0,
    )
    .unwrap();
    let taken = s.restore(
        Workload::single("b", "default", None, 2, 0),
        &on(&[1, 2]),
        0,
    );
    assert!(
        matches!(&taken, Err(SchedError::InvalidWorkload { field, problem, .. })
            if field == "placement" && problem.contains("already held")),
        "{taken:?}"
    );
    let missing = s.restore(Workload::single("c", "default", None, 1, 0), &on(&[7]), 0);
    assert!(
        matches!(&missing, Err(SchedError::InvalidWorkload { problem, .. }) if problem.contains("no GPU 7")),
        "{missing:?}"
    );
    let wrong_node = s.restore(
        Workload::single("d", "default", None, 1, 0),
        &[PodPlacement {
            node: "elsewhere".into(),
            gpus: vec![3],
        }],
        0,
    );
    assert!(wrong_node.is_err());
    // Failed restores left nothing behind: the two free GPUs are still free.
    s.submit(Workload::single("e", "default", None, 2, 1))
        .unwrap();
    assert!(
        matches!(&s.cycle(2)[..], [Decision::Admit { placement, .. }] if placement[0].gpus == [2, 3])
    );
}

/// One node of `gpus` GPUs owned by queue `a`, with `busy` filling it until 100 s: the
/// critical-path tests queue work behind it and look at what starts when it ends.
fn one_busy_node(gpus: u32, opts: Options) -> Scheduler {
    let mut s = Scheduler::with_options(
        Cluster::uniform(1, gpus, "gpu"),
        vec![queue("a", None, gpus)],
        vec![],
        opts,
    )
    .unwrap();
    s.submit(wl("busy", "a", 1, gpus, 0, Some(100))).unwrap();
    assert_eq!(admitted(&s.cycle(0)), vec!["busy"]);
    s
}

#[test]
fn a_long_job_that_would_stretch_the_makespan_starts_before_shorter_ones() {
    let run = |pct: u32, gang: bool| {
        let opts = Options {
            critical_path_pct: pct,
            // The plain bar alone (the lower one for small jobs has its own test).
            critical_path_small_pct: 0,
            ..Options::default()
        };
        let mut s = one_busy_node(4, opts);
        if gang {
            s.submit(wl("gang", "a", 1, 4, 1, Some(50))).unwrap();
        }
        for i in 0..4 {
            s.submit(wl(&format!("short{i}"), "a", 1, 1, 2 + i, Some(100)))
                .unwrap();
        }
        s.submit(wl("long", "a", 1, 1, 6, Some(10_000))).unwrap();
        assert!(admitted(&s.cycle(6)).is_empty());
        s.finished("busy").unwrap();
        let mut got = admitted(&s.cycle(100));
        got.sort();
        got
    };
    // Duration weighting (and age) alone run the four short jobs first and leave the long one
    // (which alone needs 10,000 s, more than 1.5 times the 2,600 s the backlog takes) to the end.
    assert_eq!(run(0, false), ["short0", "short1", "short2", "short3"]);
    assert_eq!(run(150, false), ["long", "short0", "short1", "short2"]);
    // Four times the clearing time is a bar it does not pass.
    assert_eq!(run(400, false), ["short0", "short1", "short2", "short3"]);
    // It does not pass an older gang that holds the reservation.
    assert_eq!(run(150, true), ["gang"]);
}

/// A small long job meets a lower bar than the plain factor when nothing larger waits: it
/// costs the short work little and delays no gang. A larger waiting job restores the plain bar.
#[test]
fn a_small_long_job_is_critical_sooner_unless_a_larger_job_waits() {
    let run = |small_pct: u32, wider: bool| {
        let opts = Options {
            critical_path_pct: 200,
            critical_path_small_pct: small_pct,
            ..Options::default()
        };
        let mut s = one_busy_node(8, opts);
        for i in 0..8 {
            s.submit(wl(&format!("short{i}"), "a", 1, 1, 1 + i, Some(1000)))
                .unwrap();
        }
        s.submit(wl("long", "a", 1, 1, 9, Some(2000))).unwrap();
        if wider {
            s.submit(wl("wide", "a", 1, 2, 10, Some(100))).unwrap();
        }
        assert!(admitted(&s.cycle(10)).is_empty());
        s.finished("busy").unwrap();
        let got = admitted(&s.cycle(100));
        got.contains(&"long".to_string())
    };
    // 10,000 GPU-s of work clear in 1,250 s on 8 GPUs: 2,000 s is under the plain bar of twice
    // that (2,500 s) but over the small bar for a 1-GPU job (1.25 + 0.75 / 8 times: 1,680 s).
    assert!(
        !run(0, false),
        "the plain factor leaves it behind the short jobs"
    );
    assert!(run(125, false), "the small bar starts it first");
    // With a 2-GPU job waiting (10,200 GPU-s: plain bar 2,550 s) it waits again.
    assert!(!run(125, true), "a larger waiting job keeps the plain bar");
}

/// One queue `a` owning `nodes` 8-GPU nodes, without preemption or loans: only
/// reservations and backfill decide what runs.
fn backfill_only(nodes: usize) -> Scheduler {
    let opts = Options {
        preemption: false,
        lend_reserved_nodes: false,
        ..Options::default()
    };
    Scheduler::with_options(
        Cluster::uniform(nodes, 8, "gpu"),
        vec![queue("a", None, 8 * nodes as u32)],
        vec![],
        opts,
    )
    .unwrap()
}

#[test]
fn blocked_large_gang_gets_a_reservation_and_only_short_jobs_backfill() {
    let mut s = backfill_only(4);
    s.submit(wl("small-long", "a", 1, 8, 0, Some(1000)))
        .unwrap();
    assert_eq!(admitted(&s.cycle(0)), vec!["small-long"]);
    s.submit(wl("big", "a", 4, 8, 1, Some(100))).unwrap();
    s.submit(wl("short", "a", 1, 8, 2, Some(500))).unwrap();
    s.submit(wl("long", "a", 1, 8, 3, Some(5000))).unwrap();
    // big waits for small-long (ends at 1000); short ends at 510 < 1000 and may run.
    assert_eq!(admitted(&s.cycle(10)), vec!["short"]);
    assert_eq!(s.holders(), vec![Some("big")]);
    assert!(s.cycle(11).is_empty());
    s.finished("short").unwrap();
    assert!(admitted(&s.cycle(510)).is_empty());
    s.finished("small-long").unwrap();
    assert_eq!(admitted(&s.cycle(1000)), vec!["big"]);
    assert_eq!(
        s.holders(),
        vec![Some("long")],
        "the next blocked job holds now"
    );
}

/// A running job submitted without a duration reports its progress: the blocked gang's
/// reservation then knows when the job ends, and work that ends before then backfills.
/// Progress that moves the end later takes that room away again.
#[test]
fn measured_progress_sets_when_a_running_job_ends_and_what_may_backfill() {
    let mut s = backfill_only(2);
    s.submit(wl("unknown", "a", 1, 8, 0, None)).unwrap();
    assert_eq!(admitted(&s.cycle(0)), vec!["unknown"]);
    s.submit(wl("big", "a", 2, 8, 1, Some(100))).unwrap();
    s.submit(wl("short", "a", 1, 8, 2, Some(500))).unwrap();
    // Nobody knows when `unknown` ends: nothing may take the node held for `big`.
    assert!(s.cycle(10).is_empty());
    assert_eq!(s.holders(), vec![Some("big")]);
    // Its step rate says 2,000 s more (until 2,010): `short` ends at 510, before that.
    s.progress("unknown", 10, 2_000).unwrap();
    assert_eq!(admitted(&s.cycle(10)), vec!["short"]);
    s.finished("short").unwrap();
    s.submit(wl("short2", "a", 1, 8, 600, Some(500))).unwrap();
    // It slowed down: now ends at 700, and `short2` (600 + 500) would delay `big`.
    s.progress("unknown", 600, 100).unwrap();
    assert!(s.cycle(600).is_empty());
    s.finished("unknown").unwrap();
    assert_eq!(admitted(&s.cycle(700)), vec!["big"]);
    assert!(s.progress("big", 700, 50).is_ok());
    let err = s.progress("short2", 700, 50).unwrap_err().to_string();
    assert!(err.contains("not running"), "{err}");
    assert!(s.progress("nope", 700, 50).is_err());
}

/// A raised time limit is a longer expected duration: a job that could backfill before a
/// gang's reservation with its old limit no longer may, and a cut one may again; a running
/// job's new limit moves the end the reservation counts on.
#[test]
fn a_changed_time_limit_moves_backfill_and_the_reservation() {
    let mut s = backfill_only(2);
    s.submit(wl("running", "a", 1, 8, 0, Some(1000))).unwrap();
    assert_eq!(admitted(&s.cycle(0)), vec!["running"]);
    s.submit(wl("big", "a", 2, 8, 1, Some(100))).unwrap();
    s.submit(wl("short", "a", 1, 8, 2, Some(500))).unwrap();
    // Raised to 5,000 s before it started: it would now end after `running` (at 1,000).
    s.set_expected_duration("short", Some(5_000)).unwrap();
    assert!(s.cycle(10).is_empty());
    assert_eq!(s.holders(), vec![Some("big")]);
    // The running job's limit is raised to 10,000 s: room for `short` before the gang again.
    s.set_expected_duration("running", Some(10_000)).unwrap();
    assert_eq!(admitted(&s.cycle(20)), vec!["short"]);
    // Cut back: unchanged decisions (nothing is taken back), and the call is idempotent.
    s.set_expected_duration("running", Some(1_000)).unwrap();
    s.set_expected_duration("running", Some(1_000)).unwrap();
    assert!(s.cycle(30).is_empty());
    assert!(s.set_expected_duration("nope", Some(1)).is_err());
}

/// With duration weighting, a pending job whose limit was cut sorts as the shorter job it is.
#[test]
fn a_cut_time_limit_resorts_a_pending_job() {
    let mut s = local(8);
    s.submit(wl("hog", "default", 1, 8, 0, Some(100))).unwrap();
    assert_eq!(admitted(&s.cycle(0)), vec!["hog"]);
    s.submit(wl("long", "default", 1, 8, 1, Some(100_000)))
        .unwrap();
    s.submit(wl("quick", "default", 1, 8, 2, Some(10_000)))
        .unwrap();
    s.set_expected_duration("long", Some(60)).unwrap();
    s.finished("hog").unwrap();
    assert_eq!(admitted(&s.cycle(100)), vec!["long"]);
}

fn prios() -> Vec<PriorityClass> {
    PriorityClass::named(&[("low", 0), ("high", 10)])
}

fn with_prio(mut w: Workload, p: &str) -> Workload {
    w.priority = Some(p.into());
    w
}

fn preempted(d: &[Decision]) -> Vec<(String, PreemptReason)> {
    d.iter()
        .filter_map(|x| match x {
            Decision::Preempt { id, reason } => Some((id.clone(), reason.clone())),
            _ => None,
        })
        .collect()
}

/// A cluster's own classes rank among the standard ones (Kubernetes values here: `normal`
/// 10,000, a `production` class at 50,000); a workload that names none is `normal`, so a
/// `production` job preempts it, and a `low` job does not.
#[test]
fn cluster_priority_classes_rank_among_the_standard_ones() {
    let classes = PriorityClass::with_extra(
        PriorityClass::named(&[("low", 1_000), ("normal", 10_000), ("high", 100_000)]),
        PriorityClass::named(&[("production", 50_000), ("normal", 10_000)]),
    );
    assert_eq!(classes.len(), 4);
    let mut s = Scheduler::new(
        Cluster::uniform(1, 4, "gpu"),
        vec![queue("a", None, 4)],
        classes,
    )
    .unwrap();
    s.submit(wl("plain", "a", 1, 4, 0, None)).unwrap();
    assert_eq!(admitted(&s.cycle(0)), vec!["plain"]);
    s.submit(with_prio(wl("batch", "a", 1, 4, 10, None), "low"))
        .unwrap();
    assert!(s.cycle(10).is_empty(), "low does not preempt normal");
    s.submit(with_prio(wl("prod", "a", 1, 2, 20, None), "production"))
        .unwrap();
    assert_eq!(
        preempted(&s.cycle(20)),
        vec![(
            "plain".to_string(),
            PreemptReason::Priority {
                preemptor: "prod".into()
            }
        )]
    );
}

/// A class that does not preempt (Kubernetes' `preemptionPolicy: Never`) only goes first: its
/// job waits for the running `normal` one instead of preempting it, then starts ahead of an
/// older `normal` job.
#[test]
fn a_non_preempting_class_goes_first_without_preempting() {
    let batch = PriorityClass {
        preempting: false,
        ..PriorityClass::new("urgent-batch", 1_000)
    };
    let mut s = Scheduler::new(
        Cluster::uniform(1, 4, "gpu"),
        vec![queue("a", None, 4)],
        PriorityClass::with_extra(PriorityClass::standard(), [batch]),
    )
    .unwrap();
    s.submit(wl("plain", "a", 1, 4, 0, None)).unwrap();
    assert_eq!(admitted(&s.cycle(0)), vec!["plain"]);
    s.submit(wl("older", "a", 1, 4, 10, None)).unwrap();
    s.submit(with_prio(wl("batch", "a", 1, 4, 20, None), "urgent-batch"))
        .unwrap();
    assert!(s.cycle(20).is_empty(), "a non-preempting class waits");
    s.finished("plain").unwrap();
    assert_eq!(admitted(&s.cycle(30)), vec!["batch"]);
}

/// Kueue's `borrowWithinCohort: LowerPriority`: a `high` job that must borrow takes another
/// member's borrowed `low` work (Kueue's default `Never`, or a threshold below `low`, leaves it
/// waiting); the victim, of a lower class and short of quota, cannot take the GPUs back.
#[test]
fn a_borrowing_job_takes_lower_classes_borrowed_work_only_when_its_queue_says() {
    use crate::config::BorrowWithinCohort;
    for (bwc, preempts) in [
        (None, false),
        (Some(BorrowWithinCohort::default()), true),
        (
            Some(BorrowWithinCohort {
                max_priority_threshold: Some(-1),
            }),
            false,
        ),
        (
            Some(BorrowWithinCohort {
                max_priority_threshold: Some(0),
            }),
            true,
        ),
    ] {
        let mut a = queue("a", Some("c"), 4);
        a.preemption.borrow_within_cohort = bwc;
        let mut s = Scheduler::new(
            Cluster::uniform(1, 8, "gpu"),
            vec![a, queue("b", Some("c"), 4)],
            prios(),
        )
        .unwrap();
        s.submit(with_prio(wl("low", "b", 1, 8, 0, Some(3600)), "low"))
            .unwrap();
        assert_eq!(admitted(&s.cycle(0)), vec!["low"]);
        s.submit(with_prio(wl("high", "a", 1, 8, 10, Some(600)), "high"))
            .unwrap();
        let d = s.cycle(10);
        let want: Vec<(String, PreemptReason)> = if preempts {
            vec![(
                "low".into(),
                PreemptReason::Priority {
                    preemptor: "high".into(),
                },
            )]
        } else {
            Vec::new()
        };
        assert_eq!(preempted(&d), want, "{bwc:?}");
        if preempts {
            s.evicted("low").unwrap();
            assert_eq!(admitted(&s.cycle(70)), vec!["high"]);
            // `low` waits: it cannot take back what `high` borrowed.
            assert!(s.cycle(80).is_empty());
            s.finished("high").unwrap();
            assert_eq!(admitted(&s.cycle(670)), vec!["low"]);
        }
    }
}

/// `priorityPatienceS`: a more urgent job preempts only when it would otherwise wait at least
/// that long; work ending sooner is left to end, and work of unknown end is preempted as before.
#[test]
fn priority_patience_spares_work_that_ends_soon() {
    let sched = |patience| {
        Scheduler::with_options(
            Cluster::uniform(1, 4, "gpu"),
            vec![queue("a", None, 4)],
            prios(),
            Options {
                priority_patience_s: patience,
                ..Options::default()
            },
        )
        .unwrap()
    };
    // `low` runs 0..400 s on all four GPUs; `high` arrives at 200 s: 200 s from its GPUs.
    for (patience, low_ends, preempts) in [
        (0, Some(400), true),
        (300, Some(400), false),
        (100, Some(400), true),
        (300, None, true),
    ] {
        let mut s = sched(patience);
        s.submit(with_prio(wl("low", "a", 1, 4, 0, low_ends), "low"))
            .unwrap();
        assert_eq!(admitted(&s.cycle(0)), vec!["low"]);
        s.submit(with_prio(wl("high", "a", 1, 2, 200, Some(60)), "high"))
            .unwrap();
        let d = s.cycle(200);
        assert_eq!(
            !preempted(&d).is_empty(),
            preempts,
            "patience {patience}, low ends {low_ends:?}: {d:?}"
        );
        if !preempts {
            s.finished("low").unwrap();
            assert_eq!(admitted(&s.cycle(400)), vec!["high"]);
        }
    }
}

#[test]
fn high_priority_preempts_low_gracefully_and_low_resumes_after() {
    // The issue's end-to-end scenario on one 4-GPU machine.
    let mut s = Scheduler::new(
        Cluster::uniform(1, 4, "gpu"),
        vec![queue("a", None, 4)],
        prios(),
    )
    .unwrap();
    s.submit(with_prio(wl("low", "a", 1, 4, 0, None), "low"))
        .unwrap();
    let d = s.cycle(0);
    let Decision::Admit { placement, .. } = &d[0] else {
        panic!("{d:?}")
    };
    assert_eq!(placement[0].gpus, vec![0, 1, 2, 3]);
    s.checkpointed("low", 50).unwrap();
    s.submit(with_prio(wl("high", "a", 1, 2, 60, None), "high"))
        .unwrap();
    let d = s.cycle(60);
    assert_eq!(
        preempted(&d),
        vec![(
            "low".to_string(),
            PreemptReason::Priority {
                preemptor: "high".into()
            }
        )]
    );
    assert!(
        admitted(&d).is_empty(),
        "high must wait for the GPUs to be released"
    );
    // Until the runtime reports the exit, nothing else may take the GPUs.
    assert!(s.cycle(61).is_empty());
    s.evicted("low").unwrap();
    let d = s.cycle(90);
    assert_eq!(admitted(&d), vec!["high"]);
    let Decision::Admit { placement, .. } = &d[0] else {
        unreachable!()
    };
    assert_eq!(placement[0].gpus.len(), 2);
    // The low job needs 4 GPUs: it resumes only once high is done, and is not preempted again.
    assert!(s.cycle(91).is_empty());
    s.finished("high").unwrap();
    assert_eq!(admitted(&s.cycle(200)), vec!["low"]);
    assert!(
        s.evicted("low").is_err(),
        "evicted only applies after a Preempt"
    );
}

#[test]
fn preempt_is_emitted_once_per_victim_and_the_evicted_job_keeps_its_age() {
    let mut s = Scheduler::new(
        Cluster::local(4, "gpu"),
        vec![queue("a", None, 4)],
        PriorityClass::standard(),
    )
    .unwrap();
    s.submit(Workload::single("low", "a", Some("low"), 4, 0))
        .unwrap();
    assert_eq!(admitted(&s.cycle(0)), vec!["low"]);
    s.submit(Workload::single("high", "a", Some("high"), 2, 10))
        .unwrap();
    assert_eq!(preempted(&s.cycle(10)).len(), 1);
    // More urgent work arriving while the victim checkpoints adds no second Preempt for it.
    s.submit(Workload::single("high2", "a", Some("high"), 2, 11))
        .unwrap();
    for t in 11..20 {
        let d = s.cycle(t);
        assert!(
            preempted(&d).iter().all(|(id, _)| id != "low"),
            "second Preempt for low at {t}: {d:?}"
        );
        assert!(admitted(&d).is_empty(), "GPUs still held by low: {d:?}");
    }
    s.evicted("low").unwrap();
    let mut d = admitted(&s.cycle(20));
    d.sort();
    assert_eq!(d, vec!["high", "high2"]);
    // A younger low-priority job of the same size queues behind the evicted one.
    s.submit(Workload::single("low-young", "a", Some("low"), 4, 30))
        .unwrap();
    s.finished("high").unwrap();
    s.finished("high2").unwrap();
    assert_eq!(admitted(&s.cycle(40)), vec!["low"]);
}

#[test]
fn an_any_flavor_quota_covers_flavors_not_named() {
    let mut cluster = Cluster::uniform(1, 8, "h100");
    cluster.nodes.extend(Cluster::local(4, "a100").nodes);
    let mut q = queue("a", None, 6);
    q.quotas[0].flavor = ANY_FLAVOR.into();
    q.quotas.insert(
        0,
        FlavorQuota {
            flavor: "h100".into(),
            nominal: 8,
            borrowing_limit: None,
            lending_limit: None,
        },
    );
    let s = Scheduler::new(cluster.clone(), vec![q.clone()], vec![]).unwrap();
    assert_eq!(s.quota_limits("a", "h100"), Some((8, 8)));
    assert_eq!(s.quota_limits("a", "a100"), Some((6, 6)));
    let mut twice = q.clone();
    twice.quotas.push(twice.quotas[1].clone());
    let msg = Scheduler::new(cluster, vec![twice], vec![])
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("queues[0].quotas[2].flavor") && msg.contains("merge"),
        "{msg}"
    );
}

/// Teams `a` and `b` in cohort `c` with nominal quotas `a_b`, on `nodes` nodes of
/// `per_node` GPUs, with `prios()`: the cluster the reclaim tests share.
fn two_teams(nodes: usize, per_node: u32, a_b: (u32, u32), opts: Options) -> Scheduler {
    Scheduler::with_options(
        Cluster::uniform(nodes, per_node, "gpu"),
        vec![queue("a", Some("c"), a_b.0), queue("b", Some("c"), a_b.1)],
        prios(),
        opts,
    )
    .unwrap()
}

/// Queues `a` and `b` of 4 GPUs each in one cohort (two 4-GPU nodes), `a`'s waiting jobs
/// allowed to preempt as `a_policy` says.
fn two_teams_with(a_policy: PreemptionPolicy) -> Scheduler {
    Scheduler::new(
        Cluster::uniform(2, 4, "gpu"),
        vec![
            QueueSpec {
                preemption: a_policy,
                ..queue("a", Some("c"), 4)
            },
            queue("b", Some("c"), 4),
        ],
        prios(),
    )
    .unwrap()
}

/// A queue's `preemption` (Kueue's ClusterQueue field) decides what its waiting jobs may take.
/// Within the queue: by default a higher priority preempts a lower one and not its own;
/// `LowerOrNewerEqualPriority` also takes work of its own priority created after it; `Never`
/// takes nothing. From the cohort: lent quota comes back from a borrower of any priority
/// (`Any`, the default), only of a lower one (`LowerPriority`), or as it finishes (`Never`).
#[test]
fn a_queues_preemption_policy_decides_what_its_jobs_may_take() {
    // How many of a's two running low-priority jobs (created at 11 and 12; the second borrows
    // b's idle quota) a job of `prio` created at `created` preempts.
    let within = |within_queue, prio: &str, created: Time| {
        let mut s = two_teams_with(PreemptionPolicy {
            within_queue,
            ..PreemptionPolicy::default()
        });
        for (id, t) in [("first", 11), ("second", 12)] {
            s.submit(with_prio(wl(id, "a", 1, 4, t, None), "low"))
                .unwrap();
        }
        assert_eq!(admitted(&s.cycle(20)).len(), 2);
        s.submit(with_prio(wl("waiting", "a", 1, 4, created, None), prio))
            .unwrap();
        preempted(&s.cycle(30)).len()
    };
    assert_eq!(within(WithinQueue::LowerPriority, "high", 30), 1);
    assert_eq!(within(WithinQueue::Never, "high", 30), 0);
    // Same priority, created before both (a job back in its queue keeps its age).
    assert_eq!(within(WithinQueue::LowerPriority, "low", 5), 0);
    assert_eq!(within(WithinQueue::LowerOrNewerEqualPriority, "low", 5), 1);
    // Created after both: neither is newer.
    assert_eq!(within(WithinQueue::LowerOrNewerEqualPriority, "low", 25), 0);

    // b's urgent work runs on its own quota and on a's idle one; then a's low-priority job and
    // b's next one wait. Returns what a's job preempts, and what starts once it was evicted (or,
    // with nothing preempted, once b's own job ends).
    let reclaim = |reclaim_within_cohort| {
        let mut s = two_teams_with(PreemptionPolicy {
            reclaim_within_cohort,
            ..PreemptionPolicy::default()
        });
        s.submit(with_prio(wl("b-own", "b", 1, 4, 0, None), "high"))
            .unwrap();
        s.submit(with_prio(wl("b-lent", "b", 1, 4, 1, None), "high"))
            .unwrap();
        assert_eq!(admitted(&s.cycle(10)).len(), 2);
        s.submit(with_prio(wl("a-low", "a", 1, 4, 20, None), "low"))
            .unwrap();
        s.submit(with_prio(wl("b-next", "b", 1, 4, 21, None), "high"))
            .unwrap();
        let taken = preempted(&s.cycle(30));
        match taken.first() {
            Some((victim, _)) => s.evicted(victim).unwrap(),
            None => s.finished("b-own").unwrap(),
        }
        (taken, admitted(&s.cycle(40)))
    };
    let (taken, after) = reclaim(ReclaimWithinCohort::Any);
    assert_eq!(
        taken,
        [(
            "b-lent".to_string(),
            PreemptReason::Reclaim {
                preemptor: "a-low".into()
            }
        )]
    );
    assert_eq!(after, ["a-low"]);
    // Not lower: a's job waits for b's work to end, then its quota is its own again (b's next
    // job may not borrow it while a's waits).
    for policy in [
        ReclaimWithinCohort::LowerPriority,
        ReclaimWithinCohort::Never,
    ] {
        let (taken, after) = reclaim(policy);
        assert!(taken.is_empty(), "{policy:?}: {taken:?}");
        assert_eq!(after, ["a-low"], "{policy:?}");
    }
}

/// Two 8-GPU gangs that must borrow, on an 8-GPU cohort both teams fill to their quotas: an
/// older long one of team `a` and a newer short one of team `b`, with the two queues'
/// fairness deficits set to `deficits` once they wait. Returns the reservation's holder while
/// they wait and the gang that starts when the running work ends.
fn gang_order(opts: Options, deficits: (f64, f64)) -> (Vec<Option<String>>, Vec<String>) {
    let mut s = two_teams(2, 4, (4, 4), opts);
    s.submit(wl("a-run", "a", 1, 4, 0, Some(1000))).unwrap();
    s.submit(wl("b-run", "b", 1, 4, 0, Some(1000))).unwrap();
    assert_eq!(admitted(&s.cycle(0)).len(), 2);
    s.submit(wl("old-long", "a", 2, 4, 1, Some(10_000)))
        .unwrap();
    s.submit(wl("new-short", "b", 2, 4, 2, Some(100))).unwrap();
    (s.queues[0].deficit, s.queues[1].deficit) = deficits;
    for t in 2..5 {
        assert!(admitted(&s.cycle(t)).is_empty());
    }
    let holders = s
        .holders()
        .into_iter()
        .map(|h| h.map(String::from))
        .collect();
    s.finished("a-run").unwrap();
    s.finished("b-run").unwrap();
    (holders, admitted(&s.cycle(1000)))
}

#[test]
fn the_reservation_goes_to_the_oldest_gang_or_with_reserve_by_key_to_the_first_by_key() {
    let (holders, started) = gang_order(Options::default(), (0.0, 0.0));
    assert_eq!(holders, [Some("old-long".to_string())]);
    assert_eq!(started, ["old-long"]);
    // new-short sorts at 2 + 6 × 100 = 602, old-long at 1 + 6 × 10,000.
    let by_key = Options {
        reserve_by_key: true,
        ..Options::default()
    };
    let (holders, started) = gang_order(by_key, (0.0, 0.0));
    assert_eq!(holders, [Some("new-short".to_string())]);
    assert_eq!(started, ["new-short"]);
}

#[test]
fn with_deficits_the_reservation_by_key_goes_first_to_the_queue_owed_more() {
    let opts = Options {
        reserve_by_key: true,
        deficit_half_life_s: 3600,
        deficit_threshold_s: 60,
        ..Options::default()
    };
    // a is owed far more GPU-time than b (past 60 s x 8 GPUs): its older, longer gang holds the
    // reservation although the short one sorts first by key; b is not over its due, so it is not
    // the rule that keeps an overserved queue from taking a reservation.
    let (holders, started) = gang_order(opts.clone(), (1e6, 0.0));
    assert_eq!(holders, [Some("old-long".to_string())]);
    assert_eq!(started, ["old-long"]);
    // Owed less than the threshold more: the key decides, as without deficits.
    let (holders, started) = gang_order(opts, (300.0, 0.0));
    assert_eq!(holders, [Some("new-short".to_string())]);
    assert_eq!(started, ["new-short"]);
}

#[test]
fn owner_reclaims_lent_quota_taking_the_least_work_first() {
    let mut s = two_teams(2, 4, (4, 4), Options::default());
    // b borrows a's idle quota with two 2-GPU jobs and its own.
    s.submit(wl("b-own", "b", 1, 4, 0, None)).unwrap();
    s.submit(wl("b-old", "b", 1, 2, 1, None)).unwrap();
    s.submit(wl("b-new", "b", 1, 2, 2, None)).unwrap();
    assert_eq!(admitted(&s.cycle(10)).len(), 3);
    s.checkpointed("b-old", 100).unwrap();
    s.checkpointed("b-new", 40).unwrap();
    // a wants 2 of its 4 GPUs back: exactly one borrowed job goes, the most recently checkpointed.
    s.submit(wl("a1", "a", 1, 2, 110, None)).unwrap();
    let d = s.cycle(110);
    assert_eq!(
        preempted(&d),
        vec![(
            "b-old".to_string(),
            PreemptReason::Reclaim {
                preemptor: "a1".into()
            }
        )]
    );
    s.evicted("b-old").unwrap();
    assert_eq!(admitted(&s.cycle(111)), vec!["a1"]);
    // b-old may not borrow again while a has waiting work that fits in a's quota.
    s.submit(wl("a2", "a", 1, 2, 112, None)).unwrap();
    let d = s.cycle(112);
    assert!(preempted(&d).iter().all(|(id, _)| id != "a1"));
    let usage = s.queue_usage();
    assert!(usage.iter().all(|u| u.usage[0].1 <= 8));
}

/// Team a borrows 2 GPUs, but in a 16-GPU gang admitted by borrowing; its small jobs run
/// within its quota. Team b's 8-GPU job, within b's quota, finds no free node. Taking the gang
/// would restart 16 GPUs to return 2 and leave a owed 14: by default b waits for a's own work
/// to end; with `reclaim_min_borrowed_pct: 0` (the policy before) the gang is preempted.
fn reclaim_of_a_barely_borrowing_gang(min_borrowed_pct: u32) -> (Vec<Decision>, Scheduler) {
    let mut s = two_teams(
        5,
        8,
        (32, 8),
        Options {
            reclaim_min_borrowed_pct: min_borrowed_pct,
            ..Options::default()
        },
    );
    s.submit(wl("s1", "a", 1, 8, 0, Some(100))).unwrap();
    s.submit(wl("s2", "a", 1, 8, 0, Some(5_000))).unwrap();
    s.submit(wl("s3", "a", 1, 2, 0, Some(5_000))).unwrap();
    assert_eq!(admitted(&s.cycle(0)).len(), 3);
    // The gang comes last, so it is the job that crosses a's quota.
    s.submit(wl("gang", "a", 2, 8, 1, Some(10_000))).unwrap();
    assert_eq!(admitted(&s.cycle(1)), ["gang"]);
    assert_eq!(s.queue_usage()[0].usage[0].1, 34, "a borrows 2 GPUs");
    s.submit(wl("owner", "b", 1, 8, 10, Some(1_000))).unwrap();
    let d = s.cycle(10);
    (d, s)
}

#[test]
fn a_reclaim_does_not_restart_a_gang_its_queue_barely_borrows() {
    let (d, mut s) = reclaim_of_a_barely_borrowing_gang(50);
    assert!(d.is_empty(), "{d:?}");
    // The owner starts on the GPUs a's own work returns.
    s.finished("s1").unwrap();
    assert_eq!(admitted(&s.cycle(100)), vec!["owner"]);

    let (d, _) = reclaim_of_a_barely_borrowing_gang(0);
    assert_eq!(
        preempted(&d),
        vec![(
            "gang".to_string(),
            PreemptReason::Reclaim {
                preemptor: "owner".into()
            }
        )]
    );
}

/// Team a's 24-GPU gang borrows 16 of team b's GPUs; b's own 8-GPU job `b1` ends at
/// `b1_end`. At t=10 b's 8-GPU job `owner` is short of quota: reclaiming the gang returns it
/// at once, waiting returns it when `b1` ends.
fn reclaim_weighed_against_restart(cost_s: u64, b1_end: u64) -> (Vec<Decision>, Scheduler) {
    let mut s = two_teams(
        4,
        8,
        (8, 24),
        Options {
            reclaim_restart_cost_s: cost_s,
            ..Options::default()
        },
    );
    s.submit(wl("gang", "a", 3, 8, 0, Some(50_000))).unwrap();
    s.submit(wl("b1", "b", 1, 8, 0, Some(b1_end))).unwrap();
    assert_eq!(admitted(&s.cycle(0)).len(), 2);
    s.submit(wl("owner", "b", 1, 8, 10, Some(1_000))).unwrap();
    let d = s.cycle(10);
    (d, s)
}

#[test]
fn a_reclaim_that_costs_more_in_restarts_than_the_owner_would_wait_goes_without() {
    let reclaimed = vec![(
        "gang".to_string(),
        PreemptReason::Reclaim {
            preemptor: "owner".into(),
        },
    )];
    // Restarting 24 GPUs at 360 s each is worth 1,080 s of the owner's 8: it waits 490 s.
    let (d, mut s) = reclaim_weighed_against_restart(360, 500);
    assert!(d.is_empty(), "{d:?}");
    s.finished("b1").unwrap();
    assert_eq!(admitted(&s.cycle(500)), ["owner"]);
    // A wait of 4,990 s is worth the restart; and without a cost every reclaim goes ahead.
    let (d, _) = reclaim_weighed_against_restart(360, 5_000);
    assert_eq!(preempted(&d), reclaimed);
    let (d, _) = reclaim_weighed_against_restart(0, 500);
    assert_eq!(preempted(&d), reclaimed);
}

/// A gang that must borrow holds the machine; when it could start, an owner's job that
/// waited through the drain would reclaim it at once. The admission is taken back inside
/// the cycle: no `Admit` + `Preempt` pair, the owner starts, the gang waits and runs after.
/// (Without lending: with it the owner runs on loan through the drain, see
/// `reserved_nodes_are_lent_while_the_work_in_the_way_has_no_expected_end`.)
#[test]
fn a_start_that_would_be_reclaimed_at_once_is_taken_back_not_preempted() {
    let opts = Options {
        lend_reserved_nodes: false,
        ..Options::default()
    };
    let mut s = Scheduler::with_options(
        Cluster::local(4, "gpu"),
        vec![queue("a", Some("c"), 2), queue("b", Some("c"), 2)],
        prios(),
        opts,
    )
    .unwrap();
    s.submit(wl("first", "a", 1, 1, 0, None)).unwrap();
    assert_eq!(admitted(&s.cycle(0)), vec!["first"]);
    s.submit(wl("gang", "a", 1, 4, 1, None)).unwrap();
    s.submit(wl("owner", "b", 1, 1, 2, None)).unwrap();
    assert!(s.cycle(2).is_empty(), "the gang holds the machine");
    s.finished("first").unwrap();
    let d = s.cycle(100);
    assert_eq!(admitted(&d), vec!["owner"], "{d:?}");
    assert!(preempted(&d).is_empty(), "{d:?}");
    assert_eq!(s.pending_len(), 1);
    s.finished("owner").unwrap();
    assert_eq!(admitted(&s.cycle(200)), vec!["gang"]);
}

/// A borrowed job on a node reserved for another team's gang, still running when the gang
/// can start, is reclaimed by an owner that fits in its nominal quota: with
/// `reclaim_through_reservation` at once, on that job's GPUs, without moving the gang's start;
/// without it the owner waits for the drain.
fn reclaim_through_a_reservation(on: bool) -> (Vec<Decision>, Scheduler, PodPlacement) {
    let opts = Options {
        reclaim_through_reservation: on,
        ..Options::default()
    };
    let mut s = Scheduler::with_options(
        Cluster::uniform(2, 8, "gpu"),
        vec![
            queue("a", Some("org"), 4),
            queue("b", Some("org"), 4),
            queue("c", Some("org"), 8),
        ],
        vec![],
        opts,
    )
    .unwrap();
    // One at a time, tightest node first: c1 and b1 share one node, b2 and c2 the other.
    let mut b2 = None;
    for (id, q, dur) in [
        ("c1", "c", 100),
        ("b1", "b", 10_000),
        ("b2", "b", 10_000),
        ("c2", "c", 100),
    ] {
        s.submit(wl(id, q, 1, 4, 0, Some(dur))).unwrap();
        let d = s.cycle(0);
        assert_eq!(admitted(&d), vec![id]);
        if let Decision::Admit { placement, .. } = &d[0]
            && id == "b2"
        {
            b2 = Some(placement[0].clone());
        }
    }
    let b2 = b2.expect("b2 admitted");
    // c's 8-GPU gang waits for c1 and c2 (t = 100) and reserves both nodes; b2 borrows a's
    // quota on one of them until t = 10,000.
    s.submit(wl("gang", "c", 2, 4, 1, Some(100))).unwrap();
    assert!(s.cycle(1).is_empty());
    assert_eq!(s.holders(), vec![Some("gang")]);
    s.submit(wl("a1", "a", 1, 4, 2, Some(50))).unwrap();
    (s.cycle(2), s, b2)
}

#[test]
fn an_owner_reclaims_a_borrower_on_reserved_nodes_that_outlasts_the_gangs_start() {
    let (d, mut s, b2) = reclaim_through_a_reservation(true);
    assert_eq!(
        preempted(&d),
        vec![(
            "b2".to_string(),
            PreemptReason::Reclaim {
                preemptor: "a1".into()
            }
        )]
    );
    s.evicted("b2").unwrap();
    let d = s.cycle(62);
    assert_eq!(admitted(&d), vec!["a1"]);
    let Decision::Admit { placement, .. } = &d[0] else {
        unreachable!()
    };
    // a1 runs on b2's GPUs: the node keeps the 4 GPUs the gang needs.
    assert_eq!(placement[0], b2);
    s.finished("c1").unwrap();
    s.finished("c2").unwrap();
    let d = s.cycle(100);
    assert_eq!(admitted(&d), vec!["gang"], "the gang starts on time");
    assert_eq!(s.pending_len(), 1, "b2 waits, requeued");

    let (d, _, _) = reclaim_through_a_reservation(false);
    assert!(d.is_empty(), "without the switch the owner waits: {d:?}");
}

fn with_deficits(half_life: u64) -> Scheduler {
    let opts = Options {
        deficit_half_life_s: half_life,
        deficit_threshold_s: 60,
        ..Options::default()
    };
    two_teams(2, 4, (4, 4), opts)
}

#[test]
fn deficits_accrue_while_two_queues_are_saturated_and_decay_otherwise() {
    let mut s = with_deficits(3600);
    // b takes the whole cluster and keeps work waiting; a's 8-GPU gang cannot reclaim.
    for id in ["b1", "b2"] {
        s.submit(wl(id, "b", 1, 4, 0, Some(1000))).unwrap();
    }
    assert_eq!(admitted(&s.cycle(0)).len(), 2);
    s.submit(wl("a1", "a", 2, 4, 0, Some(1000))).unwrap();
    s.submit(wl("b3", "b", 1, 4, 1, Some(1000))).unwrap();
    assert!(s.cycle(1).is_empty());
    s.cycle(501);
    // Both saturated for 500 s; each is owed 4 of the 8 busy GPUs: a got 0, b got 8.
    let owed = 4.0 * 3600.0 / std::f64::consts::LN_2 * (1.0 - 0.5f64.powf(500.0 / 3600.0));
    let (da, db) = (s.queues[0].deficit, s.queues[1].deficit);
    assert!(
        (da - owed).abs() < 1.0 && (db + owed).abs() < 1.0,
        "{da} {db} {owed}"
    );
    s.finished("b1").unwrap();
    s.finished("b2").unwrap();
    assert_eq!(admitted(&s.cycle(1000)), vec!["a1"]);
    let (da, db) = (s.queues[0].deficit, s.queues[1].deficit);
    assert!(da > owed && db < -owed);
    // Only b is saturated now: nothing accrues, both decay by half in one half-life.
    s.cycle(1000 + 3600);
    assert!((s.queues[0].deficit - da / 2.0).abs() < 1e-6);
    assert!((s.queues[1].deficit - db / 2.0).abs() < 1e-6);
}

#[test]
fn with_deficits_a_queue_does_not_reclaim_from_one_owed_more_gpu_time() {
    for (half_life, a_deficit, reclaims) in [
        (0, 0.0, true),      // deficits off: plain reclaim
        (3600, 0.0, true),   // on, nobody owed: plain reclaim
        (3600, -1e6, false), // a had far more than its due: b keeps its borrowed job
    ] {
        let mut s = with_deficits(half_life);
        s.submit(wl("b-own", "b", 1, 4, 0, None)).unwrap();
        s.submit(wl("b-lent", "b", 1, 4, 1, None)).unwrap();
        assert_eq!(admitted(&s.cycle(10)).len(), 2);
        s.queues[0].deficit = a_deficit;
        s.queues[1].deficit = -a_deficit;
        s.submit(wl("a1", "a", 1, 4, 20, None)).unwrap();
        let d = s.cycle(20);
        assert_eq!(
            preempted(&d).iter().any(|(id, _)| id == "b-lent"),
            reclaims,
            "half-life {half_life}, a's deficit {a_deficit}: {d:?}"
        );
        if !reclaims {
            // a's job still runs as soon as b's work ends.
            s.finished("b-lent").unwrap();
            assert_eq!(admitted(&s.cycle(30)), vec!["a1"]);
        }
    }
}

#[test]
fn a_queue_below_its_quota_takes_from_one_far_above_it_only_when_it_comes_out_fairer() {
    let cluster = Cluster::uniform(4, 8, "gpu");
    let queues: Vec<QueueSpec> = ["a", "b", "c", "d"]
        .iter()
        .map(|n| queue(n, Some("org"), 8))
        .collect();
    let run = |opts: Options, a_pods: u32| {
        let mut s =
            Scheduler::with_options(cluster.clone(), queues.clone(), prios(), opts).unwrap();
        // b uses the whole cluster: 4x its quota (c and d are idle).
        for i in 0..4 {
            s.submit(wl(&format!("b{i}"), "b", 1, 8, i, None)).unwrap();
        }
        assert_eq!(admitted(&s.cycle(10)).len(), 4);
        s.checkpointed("b3", 50).unwrap();
        s.checkpointed("b2", 40).unwrap();
        // a (0 of 8) wants a gang larger than its quota.
        s.submit(wl("a", "a", a_pods, 8, 60, None)).unwrap();
        (s.cycle(60), s)
    };
    let kueue = Options {
        fair_preemption_minimax: false,
        ..Options::default()
    };
    let reclaim = PreemptReason::Reclaim {
        preemptor: "a".into(),
    };
    let victims = |d: &[Decision]| {
        let mut v = preempted(d);
        v.sort_by(|x, y| x.0.cmp(&y.0));
        v
    };
    // 16 GPUs: a ends at 2x its quota, b keeps 16 = 2x: allowed by both rules, and the two most
    // recently checkpointed borrowed jobs go.
    for opts in [kueue.clone(), Options::default()] {
        let (d, mut s) = run(opts, 2);
        assert_eq!(
            victims(&d),
            vec![
                ("b2".into(), reclaim.clone()),
                ("b3".into(), reclaim.clone())
            ]
        );
        s.evicted("b2").unwrap();
        s.evicted("b3").unwrap();
        assert_eq!(admitted(&s.cycle(61)), vec!["a"]);
        // b, now at a's share, does not preempt back.
        for t in 62..70 {
            assert!(preempted(&s.cycle(t)).is_empty());
        }
    }
    // 24 GPUs: a would end at 3x its quota and b at 1x. Kueue's rule refuses (b would end below
    // a); by default it goes ahead, as the largest gap to quota shrinks from b's 3x over to a's
    // 2x over, and b's jobs are single-node.
    let (d, _) = run(kueue, 3);
    assert!(preempted(&d).is_empty(), "{d:?}");
    let (d, mut s) = run(Options::default(), 3);
    assert_eq!(
        victims(&d),
        ["b1", "b2", "b3"]
            .map(|v| (v.to_string(), reclaim.clone()))
            .to_vec()
    );
    for v in ["b1", "b2", "b3"] {
        s.evicted(v).unwrap();
    }
    assert_eq!(admitted(&s.cycle(61)), vec!["a"]);
    // b (8 of 8) does not take a gang back: that would widen the gap again.
    s.submit(wl("b4", "b", 1, 8, 62, None)).unwrap();
    for t in 62..70 {
        assert!(preempted(&s.cycle(t)).is_empty());
    }
    // 32 GPUs: a would end 3x over and b 1x under; the largest gap stays 3x: refused.
    let (d, _) = run(Options::default(), 4);
    assert!(preempted(&d).is_empty(), "{d:?}");
    // Without fair-sharing preemption a waits in every case.
    for pods in [2, 3] {
        let (d, _) = run(
            Options {
                fair_preemption: false,
                ..Options::default()
            },
            pods,
        );
        assert!(preempted(&d).is_empty(), "{d:?}");
    }
}

#[test]
fn a_quota_remainder_goes_back_to_the_team_it_brings_closest_to_its_quota() {
    // Quotas of 23 and 9 GPUs on four 8-GPU nodes, jobs of 8 GPUs: the 32 GPUs can be split
    // 24 / 8 (3% over, 11% under) or 16 / 16 (30% under, 78% over).
    let run = |minimax: bool| {
        let opts = Options {
            fair_preemption_minimax: minimax,
            ..Options::default()
        };
        let mut s = Scheduler::with_options(
            Cluster::uniform(4, 8, "gpu"),
            vec![queue("big", Some("c"), 23), queue("small", Some("c"), 9)],
            prios(),
            opts,
        )
        .unwrap();
        // small borrows while big has nothing waiting; then big takes the rest.
        for (i, q) in ["small", "small", "big", "big"].iter().enumerate() {
            s.submit(wl(&format!("{q}{i}"), q, 1, 8, i as Time, Some(1_000)))
                .unwrap();
            assert_eq!(admitted(&s.cycle(i as Time)).len(), 1);
        }
        // big (16 of 23) wants 8 more: 24 is past its quota, so it is not a plain reclaim.
        s.submit(wl("big-next", "big", 1, 8, 10, Some(1_000)))
            .unwrap();
        (s.cycle(10), s)
    };
    // Kueue's rule refuses: small would end at 8/9 of its quota, below big's 24/23.
    let (d, _) = run(false);
    assert!(preempted(&d).is_empty(), "{d:?}");
    let (d, mut s) = run(true);
    assert_eq!(
        preempted(&d),
        vec![(
            "small1".to_string(),
            PreemptReason::Reclaim {
                preemptor: "big-next".into()
            }
        )]
    );
    s.evicted("small1").unwrap();
    assert_eq!(admitted(&s.cycle(11)), vec!["big-next"]);
    // small (8 of 9) does not take it back: 16 / 16 is further from both quotas.
    for t in 12..20 {
        assert!(preempted(&s.cycle(t)).is_empty());
    }
}

#[test]
fn with_hold_for_owed_a_team_at_its_quota_does_not_take_the_gpu_an_owed_team_waits_for() {
    let run = |hold: bool| {
        let opts = Options {
            hold_for_owed: hold,
            ..Options::default()
        };
        let mut s = Scheduler::with_options(
            Cluster::uniform(2, 4, "gpu"),
            vec![queue("a", Some("c"), 4), queue("b", Some("c"), 4)],
            prios(),
            opts,
        )
        .unwrap();
        s.submit(wl("a-run", "a", 1, 3, 0, Some(100))).unwrap();
        s.submit(wl("b-run", "b", 1, 4, 0, Some(100))).unwrap();
        assert_eq!(admitted(&s.cycle(0)).len(), 2);
        // a (3 of 4) waits for 2 GPUs; b (at its 4) would borrow the one idle GPU.
        s.submit(wl("a-next", "a", 1, 2, 10, Some(100))).unwrap();
        s.submit(wl("b-next", "b", 1, 1, 11, Some(100))).unwrap();
        let first = admitted(&s.cycle(12));
        s.finished("a-run").unwrap();
        (first, admitted(&s.cycle(100)))
    };
    assert_eq!(run(false).0, vec!["b-next"]);
    let (first, then) = run(true);
    assert!(first.is_empty(), "{first:?}");
    assert!(then.contains(&"a-next".to_string()), "{then:?}");
}

#[test]
fn reserved_nodes_are_lent_and_taken_back_when_the_gang_can_start() {
    let opts = Options {
        min_loan_s: 100,
        ..Options::default()
    };
    let mut s = Scheduler::with_options(
        Cluster::uniform(2, 8, "gpu"),
        vec![queue("a", None, 16)],
        vec![],
        opts,
    )
    .unwrap();
    s.submit(wl("runner", "a", 1, 8, 0, Some(1000))).unwrap();
    assert_eq!(admitted(&s.cycle(0)), vec!["runner"]);
    s.submit(wl("gang", "a", 2, 8, 1, Some(100))).unwrap();
    s.submit(wl("long", "a", 1, 8, 2, Some(5000))).unwrap();
    // gang waits for runner (ends at 1000); long would not finish in time but borrows the node.
    assert_eq!(admitted(&s.cycle(10)), vec!["long"]);
    s.finished("runner").unwrap();
    let d = s.cycle(1000);
    assert_eq!(
        preempted(&d),
        vec![(
            "long".to_string(),
            PreemptReason::LoanEnded {
                preemptor: "gang".into()
            }
        )]
    );
    s.checkpointed("long", 1030).unwrap();
    s.evicted("long").unwrap();
    assert_eq!(admitted(&s.cycle(1030)), vec!["gang"]);
}

/// A gang blocked by its own queue's work lends its nodes; meanwhile the other team borrows
/// from its quota. When its queue's work ends, the gang fits its nominal quota only once its
/// loan is back, and its nodes only once the borrowed job is too: it takes back both at once,
/// rather than waiting for a borrower that may run for days.
#[test]
fn a_holder_takes_back_its_loans_and_lent_quota_together() {
    let mut s = Scheduler::new(
        Cluster::uniform(5, 8, "gpu"),
        vec![queue("a", Some("c"), 24), queue("b", Some("c"), 16)],
        vec![],
    )
    .unwrap();
    s.submit(wl("a-run", "a", 1, 8, 0, Some(1000))).unwrap();
    for (i, b) in ["b1", "b2", "b-borrow"].into_iter().enumerate() {
        s.submit(wl(b, "b", 1, 8, i as u64, None)).unwrap();
    }
    assert_eq!(admitted(&s.cycle(0)).len(), 4);
    // a's gang needs its queue's work to end first (8 + 24 > 24): it holds the cluster.
    s.submit(wl("gang", "a", 3, 8, 1, Some(100))).unwrap();
    s.submit(wl("a-long", "a", 1, 8, 2, Some(5000))).unwrap();
    assert_eq!(
        admitted(&s.cycle(10)),
        vec!["a-long"],
        "the idle node goes out on loan"
    );
    assert_eq!(s.holders(), vec![Some("gang")]);
    s.finished("a-run").unwrap();
    let mut stops = preempted(&s.cycle(1000));
    stops.sort_by(|x, y| x.0.cmp(&y.0));
    let by_gang = "gang".to_string();
    assert_eq!(
        stops,
        vec![
            (
                "a-long".to_string(),
                PreemptReason::LoanEnded {
                    preemptor: by_gang.clone()
                }
            ),
            (
                "b-borrow".to_string(),
                PreemptReason::Reclaim { preemptor: by_gang }
            ),
        ]
    );
    s.evicted("a-long").unwrap();
    s.evicted("b-borrow").unwrap();
    assert_eq!(admitted(&s.cycle(1030)), vec!["gang"]);
}

/// Work of a blocked holder's queue that would outlast the holder's turn may run only on loan.
/// When its only way in is to reclaim lent quota (the free GPUs are split across nodes), it
/// still starts on loan, so the holder takes it back at its turn instead of waiting for it.
#[test]
fn work_that_reclaims_to_start_on_loan_is_still_a_loan() {
    let mut s = Scheduler::new(
        Cluster::uniform(4, 8, "gpu"),
        vec![queue("a", Some("c"), 16), queue("b", Some("c"), 16)],
        vec![],
    )
    .unwrap();
    // One at a time, so packing pairs each 4-GPU filler with a long 4-GPU job.
    let steps = [
        ("b1", "b", 8, None),
        ("b2", "b", 8, None),
        ("f1", "a", 4, Some(10)),
        ("b-borrow", "b", 4, None),
        ("f2", "a", 4, Some(10)),
        ("a-run", "a", 4, Some(1000)),
    ];
    let mut nodes = Vec::new();
    for (t, (id, q, g, ends)) in steps.into_iter().enumerate() {
        s.submit(wl(id, q, 1, g, t as u64, ends)).unwrap();
        match s.cycle(t as u64).as_slice() {
            [Decision::Admit { placement, .. }] => nodes.push(placement[0].node.clone()),
            other => panic!("{id}: {other:?}"),
        }
    }
    assert_eq!(nodes[2], nodes[3], "f1 shares a node with b-borrow");
    assert_eq!(nodes[4], nodes[5], "f2 shares a node with a-run");
    s.submit(wl("gang", "a", 2, 8, 6, Some(100))).unwrap();
    s.submit(wl("a-long", "a", 1, 8, 7, Some(5000))).unwrap();
    assert!(s.cycle(7).is_empty());
    assert_eq!(s.holders(), vec![Some("gang")]);
    // The fillers end: 4 GPUs free on each of two nodes. a-long fits a's quota but no node:
    // it reclaims b's borrowed job, and runs on loan.
    s.finished("f1").unwrap();
    s.finished("f2").unwrap();
    assert_eq!(
        preempted(&s.cycle(10)),
        vec![(
            "b-borrow".to_string(),
            PreemptReason::Reclaim {
                preemptor: "a-long".into()
            }
        )]
    );
    s.evicted("b-borrow").unwrap();
    let started = admitted(&s.cycle(11));
    assert!(started.contains(&"a-long".to_string()), "{started:?}");
    // a's own work ends: the gang takes its loans back (b's job came back on one too) rather
    // than wait 5000 s for a-long.
    s.finished("a-run").unwrap();
    let mut stops = preempted(&s.cycle(1000));
    stops.sort_by(|x, y| x.0.cmp(&y.0));
    let loan_ended = |id: &str| {
        let preemptor = "gang".into();
        (id.to_string(), PreemptReason::LoanEnded { preemptor })
    };
    assert_eq!(stops, vec![loan_ended("a-long"), loan_ended("b-borrow")]);
    s.evicted("a-long").unwrap();
    s.evicted("b-borrow").unwrap();
    assert_eq!(admitted(&s.cycle(1001)), vec!["gang"]);
}

/// Nobody knows when the work in a blocked gang's way ends (no time limit, no pace yet): its
/// reserved node is lent rather than left idle for as long as that work runs (an unknown start
/// counts as far off), and the loan is taken back when the gang can start.
#[test]
fn reserved_nodes_are_lent_while_the_work_in_the_way_has_no_expected_end() {
    let lending = |runner_ends: Option<u64>| {
        let opts = Options {
            min_loan_s: 1000,
            ..Options::default()
        };
        let mut s = Scheduler::with_options(
            Cluster::uniform(2, 8, "gpu"),
            vec![queue("a", Some("c"), 8), queue("b", Some("c"), 8)],
            vec![],
            opts,
        )
        .unwrap();
        s.submit(wl("runner", "b", 1, 8, 0, runner_ends)).unwrap();
        assert_eq!(admitted(&s.cycle(0)), vec!["runner"]);
        // The gang must borrow b's quota, held by `runner`: it drains the cohort.
        s.submit(wl("gang", "a", 2, 8, 1, None)).unwrap();
        s.submit(wl("other", "a", 1, 8, 2, None)).unwrap();
        let d = s.cycle(10);
        assert_eq!(s.holders(), vec![Some("gang")]);
        (s, admitted(&d))
    };
    let (mut s, first) = lending(None);
    assert_eq!(first, vec!["other"], "the idle node goes out on loan");
    s.finished("runner").unwrap();
    let d = s.cycle(5000);
    assert_eq!(
        preempted(&d),
        vec![(
            "other".to_string(),
            PreemptReason::LoanEnded {
                preemptor: "gang".into()
            }
        )]
    );
    s.checkpointed("other", 5030).unwrap();
    s.evicted("other").unwrap();
    assert_eq!(admitted(&s.cycle(5030)), vec!["gang"]);
    // A known start 90 s away is not worth a loan (`min_loan_s`).
    let (_, first) = lending(Some(100));
    assert!(first.is_empty(), "{first:?}");
}

#[test]
fn gangs_land_on_the_fewest_nodes_in_one_rack() {
    let mut cluster = Cluster::uniform(8, 8, "gpu");
    for (i, n) in cluster.nodes.iter_mut().enumerate() {
        n.rack = Some(format!("r{}", i % 2));
    }
    let mut s = Scheduler::new(cluster, vec![queue("a", None, 64)], vec![]).unwrap();
    s.submit(wl("small", "a", 1, 2, 0, None)).unwrap();
    s.submit(wl("gang", "a", 3, 8, 1, None)).unwrap();
    s.submit(wl("tiny", "a", 1, 2, 2, None)).unwrap();
    let d = s.cycle(0);
    let nodes = |id: &str| nodes_of(&d, id);
    let gang = nodes("gang");
    assert_eq!(gang.len(), 3);
    let racks: std::collections::HashSet<_> = gang
        .iter()
        .map(|n| n.trim_start_matches("node-").parse::<usize>().unwrap() % 2)
        .collect();
    assert_eq!(racks.len(), 1, "gang split across racks: {gang:?}");
    // Small jobs share a node instead of fragmenting another.
    assert_eq!(nodes("small").len(), 1);
    assert_eq!(nodes("small"), nodes("tiny"));
}

/// Two racks of two 8-GPU nodes, one node of each busy (ending at 100 and 300): two whole
/// nodes are free, in different racks.
fn half_busy_racks(opts: Options) -> Scheduler {
    let mut cluster = Cluster::uniform(4, 8, "gpu");
    for (i, n) in cluster.nodes.iter_mut().enumerate() {
        n.rack = Some(format!("r{}", i / 2));
    }
    let mut s = Scheduler::with_options(cluster, vec![queue("a", None, 32)], vec![], opts).unwrap();
    for (id, node, end) in [("early", "node-0", 100), ("late", "node-2", 300)] {
        let place = [PodPlacement {
            node: node.into(),
            gpus: (0..8).collect(),
        }];
        s.restore(wl(id, "a", 1, 8, 0, Some(end)), &place, 0)
            .unwrap();
    }
    s
}

#[test]
fn a_gang_required_in_one_rack_waits_for_one_and_work_that_ends_in_time_backfills() {
    // Preferred: the gang starts at once across the racks.
    let mut s = half_busy_racks(Options::default());
    s.submit(wl("gang", "a", 2, 8, 10, Some(1000))).unwrap();
    assert_eq!(nodes_of(&s.cycle(10), "gang"), vec!["node-1", "node-3"]);
    // Required: it waits for rack r0 (free first, at 100), and says why and when.
    let mut s = half_busy_racks(Options::default());
    let mut gang = wl("gang", "a", 2, 8, 10, Some(1000));
    gang.topology = Some(Topology::Rack);
    s.submit(gang).unwrap();
    assert!(s.cycle(10).is_empty());
    let why = s.waiting("gang").expect("it waits").to_string();
    assert!(
        why.starts_with(
            "needs 16 GPU(s) in one rack (spec.resources.topology: rack); enough are free, but \
             not in any one rack; first in line"
        ),
        "{why}"
    );
    // A job ending before 100 may use r0's free node; one ending later goes to r1's.
    s.submit(wl("short", "a", 1, 8, 11, Some(50))).unwrap();
    s.submit(wl("long", "a", 1, 8, 12, Some(5000))).unwrap();
    let d = s.cycle(20);
    let mut started = admitted(&d);
    started.sort();
    assert_eq!(started, vec!["long", "short"], "{d:?}");
    assert_eq!(nodes_of(&d, "short"), vec!["node-1"]);
    assert_eq!(nodes_of(&d, "long"), vec!["node-3"]);
    let starts = s.expected_starts();
    assert_eq!(starts.len(), 1, "{starts:?}");
    assert_eq!((starts[0].id.as_str(), starts[0].at), ("gang", Some(100)));
    s.finished("short").unwrap();
    s.finished("early").unwrap();
    let d = s.cycle(100);
    assert_eq!(nodes_of(&d, "gang"), vec!["node-0", "node-1"]);
}

#[test]
fn a_gang_waits_for_one_rack_only_when_that_ends_sooner_than_running_split() {
    let slowdown = |pct| Options {
        split_slowdown_pct: pct,
        ..Options::default()
    };
    // Split now it would run 200 s longer; rack r0 frees at 100, 90 s from now.
    let mut s = half_busy_racks(slowdown(20));
    s.submit(wl("gang", "a", 2, 8, 10, Some(1000))).unwrap();
    assert!(s.cycle(10).is_empty());
    let why = s.waiting("gang").expect("it waits").to_string();
    assert!(
        why.starts_with(
            "needs 16 GPU(s); enough are free, but only across racks, where it would run 20% \
             longer (splitSlowdownPct): it waits for one rack, which frees sooner than that \
             would cost; first in line"
        ),
        "{why}"
    );
    // It holds r0's free node: work that would outlast 100 goes to r1's.
    s.submit(wl("long", "a", 1, 8, 11, Some(5000))).unwrap();
    assert_eq!(nodes_of(&s.cycle(20), "long"), vec!["node-3"]);
    s.finished("early").unwrap();
    assert_eq!(nodes_of(&s.cycle(100), "gang"), vec!["node-0", "node-1"]);
    // At 5% split costs 50 s, and nothing waits behind it: it starts at once across racks,
    // expected to run 1,050 s, so a whole-cluster gang behind it is told 1,060.
    let mut s = half_busy_racks(slowdown(5));
    s.submit(wl("gang", "a", 2, 8, 10, Some(1000))).unwrap();
    assert_eq!(nodes_of(&s.cycle(10), "gang"), vec!["node-1", "node-3"]);
    s.submit(wl("whole", "a", 4, 8, 11, Some(10))).unwrap();
    assert!(s.cycle(11).is_empty());
    let starts = s.expected_starts();
    assert_eq!((starts[0].id.as_str(), starts[0].at), ("whole", Some(1060)));
    // A workload's own figure replaces the options': 20% waits where the cluster says 0, and
    // 0 starts split where it says 20%.
    for (cluster, own, waits) in [(0, 20, true), (20, 0, false)] {
        let mut s = half_busy_racks(slowdown(cluster));
        let mut gang = wl("gang", "a", 2, 8, 10, Some(1000));
        gang.split_slowdown_pct = Some(own);
        s.submit(gang).unwrap();
        assert_eq!(s.cycle(10).is_empty(), waits, "{cluster} {own}");
    }
    let mut s = half_busy_racks(slowdown(0));
    let mut gang = wl("gang", "a", 2, 8, 10, Some(1000));
    gang.split_slowdown_pct = Some(1001);
    let err = s.submit(gang).unwrap_err().to_string();
    assert!(err.contains("workload.splitSlowdownPct"), "{err}");
}

#[test]
fn a_gang_no_rack_can_hold_is_refused_with_the_fix() {
    let mut s = half_busy_racks(Options::default());
    let mut gang = wl("gang", "a", 3, 8, 0, None);
    gang.topology = Some(Topology::Rack);
    let err = s.submit(gang).unwrap_err().to_string();
    assert!(
        err.contains("one rack of flavor `gpu` can host at most 2 pods of 8 GPUs")
            && err.contains("drop its topology requirement"),
        "{err}"
    );
    // Without labels a node is its own domain: two pods of 4 GPUs fit one node, three do not.
    let mut s = Scheduler::new(
        Cluster::uniform(2, 8, "gpu"),
        vec![queue("a", None, 16)],
        vec![],
    )
    .unwrap();
    let mut pair = wl("pair", "a", 2, 4, 0, None);
    pair.topology = Some(Topology::Rack);
    s.submit(pair).unwrap();
    assert_eq!(admitted(&s.cycle(0)), vec!["pair"]);
    let mut three = wl("three", "a", 3, 4, 0, None);
    three.topology = Some(Topology::NvlinkDomain);
    let err = s.submit(three).unwrap_err().to_string();
    assert!(
        err.contains("one NVLink domain of flavor `gpu` can host at most 2 pods"),
        "{err}"
    );
}

#[test]
fn bad_config_names_the_field_and_the_fix() {
    let c = || Cluster::uniform(2, 8, "gpu");
    let mut q = queue("a", Some("c"), 8);
    q.quotas[0].borrowing_limit = Some(9);
    let err = Scheduler::new(c(), vec![q, queue("b", Some("c"), 8)], vec![]).unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("queues[0].quotas[0].borrowingLimit") && msg.contains("at most 8"),
        "{msg}"
    );
    let mut q = queue("a", None, 8);
    q.quotas[0].flavor = "h100".into();
    let msg = Scheduler::new(c(), vec![q], vec![])
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("queues[0].quotas[0].flavor") && msg.contains("gpu"),
        "{msg}"
    );
    let mut q = queue("a", None, 8);
    q.quotas[0].borrowing_limit = Some(2);
    let msg = Scheduler::new(c(), vec![q], vec![])
        .unwrap_err()
        .to_string();
    assert!(msg.contains("no cohort"), "{msg}");
    let msg = Scheduler::new(c(), vec![queue("a", None, 8), queue("a", None, 8)], vec![])
        .unwrap_err()
        .to_string();
    assert!(msg.contains("queues[1].name"), "{msg}");
    let msg = Scheduler::new(
        c(),
        vec![
            queue("a", Some("org"), 8),
            queue("b", Some("org"), 8),
            queue("x", Some("orgg"), 8),
        ],
        vec![],
    )
    .unwrap_err()
    .to_string();
    assert!(
        msg.contains("queues[2].cohort") && msg.contains("`orgg`") && msg.contains("(org)"),
        "{msg}"
    );
    let msg = Scheduler::new(Cluster::default(), vec![], vec![])
        .unwrap_err()
        .to_string();
    assert!(msg.contains("cluster.nodes"), "{msg}");
}

#[test]
fn workloads_that_could_never_run_are_refused_at_submit() {
    let mut s = Scheduler::new(
        Cluster::uniform(2, 8, "gpu"),
        vec![queue("a", Some("c"), 8), queue("b", Some("c"), 4)],
        prios(),
    )
    .unwrap();
    let msg = s
        .submit(wl("x", "nope", 1, 1, 0, None))
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("workload.queue") && msg.contains("a, b"),
        "{msg}"
    );
    let msg = s
        .submit(wl("x", "a", 3, 8, 0, None))
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("can never be admitted") && msg.contains("at most 2 pods"),
        "{msg}"
    );
    let msg = s
        .submit(wl("x", "a", 1, 16, 0, None))
        .unwrap_err()
        .to_string();
    assert!(msg.contains("at most 0 pods"), "{msg}");
    let msg = s
        .submit(with_prio(wl("x", "a", 1, 1, 0, None), "urgent"))
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("workload.priority") && msg.contains("use one of: low, high"),
        "{msg}"
    );
    // b may use 4 + 8 lent by a = 12, not 16.
    let msg = s
        .submit(wl("x", "b", 2, 8, 0, None))
        .unwrap_err()
        .to_string();
    assert!(msg.contains("at most 12"), "{msg}");
    s.submit(wl("ok", "b", 1, 8, 0, None)).unwrap();
    assert!(
        s.submit(wl("ok", "b", 1, 8, 0, None)).is_err(),
        "duplicate id"
    );
    assert!(s.finished("ghost").is_err());
    assert!(s.checkpointed("ghost", 1).is_err());
}

#[test]
fn config_types_use_camel_case_json() {
    let q = QueueSpec {
        name: "team-a".into(),
        cohort: Some("org".into()),
        quotas: vec![FlavorQuota {
            flavor: "H100-80GB".into(),
            nominal: 16,
            borrowing_limit: Some(8),
            lending_limit: Some(4),
        }],
        fair_share_weight: 2.0,
        stop_policy: StopPolicy::None,
        preemption: Default::default(),
    };
    let json = serde_json::to_string(&q).unwrap();
    assert!(
        json.contains("\"borrowingLimit\":8") && json.contains("\"fairShareWeight\":2.0"),
        "{json}"
    );
    let back: QueueSpec =
        serde_json::from_str(r#"{"name":"t","quotas":[{"flavor":"f","nominal":4}]}"#).unwrap();
    assert_eq!(back.fair_share_weight, 1.0);
    assert_eq!(back.cohort, None);
    let d = Decision::Preempt {
        id: "w".into(),
        reason: PreemptReason::LoanEnded {
            preemptor: "g".into(),
        },
    };
    let json = serde_json::to_string(&d).unwrap();
    assert_eq!(
        json,
        r#"{"type":"preempt","id":"w","reason":{"kind":"loanEnded","preemptor":"g"}}"#
    );
}

#[test]
fn the_job_first_in_line_is_told_when_it_will_start() {
    let mut s = local(4);
    s.submit(wl("long", "default", 1, 3, 0, Some(600))).unwrap();
    assert_eq!(admitted(&s.cycle(0)), ["long"]);
    // Two GPUs are needed, one is free: the gang holds the reservation and starts when `long`
    // ends, by its expected end.
    s.submit(wl("gang", "default", 1, 2, 10, Some(100)))
        .unwrap();
    assert!(s.cycle(10).is_empty());
    let expected = |s: &Scheduler| {
        s.expected_starts()
            .into_iter()
            .map(|e| (e.id, e.flavor, e.at))
            .collect::<Vec<_>>()
    };
    assert_eq!(expected(&s), [("gang".into(), "local".into(), Some(600))]);
    // A later estimate moves it; a running job without one makes it unknown.
    s.set_expected_duration("long", Some(300)).unwrap();
    s.cycle(20);
    assert_eq!(expected(&s), [("gang".into(), "local".into(), Some(300))]);
    s.set_expected_duration("long", None).unwrap();
    s.cycle(30);
    assert_eq!(expected(&s), [("gang".into(), "local".into(), None)]);
    // Once it starts, nothing is first in line.
    s.finished("long").unwrap();
    assert_eq!(admitted(&s.cycle(40)), ["gang"]);
    assert!(expected(&s).is_empty());
}

#[test]
fn a_job_blocked_by_its_quota_starts_when_its_queue_frees_enough() {
    // A queue of 2 GPUs (no cohort) on a 4-GPU node: nodes are free, quota is not.
    let mut s = Scheduler::new(
        Cluster::local(4, "local"),
        vec![QueueSpec::any_flavor("small", None, 2)],
        PriorityClass::standard(),
    )
    .unwrap();
    s.submit(wl("a", "small", 1, 2, 0, Some(500))).unwrap();
    assert_eq!(admitted(&s.cycle(0)), ["a"]);
    s.submit(wl("b", "small", 1, 1, 5, Some(50))).unwrap();
    assert!(s.cycle(5).is_empty());
    let e = s.expected_starts();
    assert_eq!((e[0].id.as_str(), e[0].at), ("b", Some(500)), "{e:?}");
}

/// `forecast` as (id, start) pairs, in its order.
fn forecast_at(s: &Scheduler, now: Time) -> Vec<(String, Option<Time>)> {
    let f = s.forecast(now, FORECAST_CYCLES);
    assert!(!f.capped, "{f:?}");
    f.starts.into_iter().map(|x| (x.id, x.at)).collect()
}

#[test]
fn every_waiting_job_is_told_when_it_starts_in_turn() {
    let mut s = local(4);
    s.submit(wl("run", "default", 1, 4, 0, Some(100))).unwrap();
    assert_eq!(admitted(&s.cycle(0)), ["run"]);
    for (id, t, d) in [("a", 1, 50), ("b", 2, 60), ("c", 3, 70)] {
        s.submit(wl(id, "default", 1, 4, t, Some(d))).unwrap();
    }
    assert!(s.cycle(5).is_empty());
    let starts = forecast_at(&s, 5);
    assert_eq!(
        starts,
        [
            ("a".into(), Some(100)),
            ("b".into(), Some(150)),
            ("c".into(), Some(210))
        ]
    );
    // The job first in line is told what its reservation says.
    let first = s.expected_starts();
    assert_eq!((first[0].id.as_str(), first[0].at), ("a", Some(100)));
    let f = s.forecast(5, FORECAST_CYCLES);
    assert_eq!(
        [f.before("a"), f.before("b"), f.before("c")],
        [None, Some("a"), Some("b")]
    );
    // With too few cycles to reach them, the last jobs get no start, and the forecast says so.
    let short = s.forecast(5, 3);
    assert!(short.capped, "{short:?}");
    assert_eq!(short.start_of("a"), Some(100));
    assert_eq!(short.start_of("c"), None);
}

#[test]
fn a_job_behind_work_without_an_expected_end_is_not_told_a_start() {
    let mut s = local(4);
    s.submit(wl("endless", "default", 1, 2, 0, None)).unwrap();
    s.submit(wl("timed", "default", 1, 2, 0, Some(100)))
        .unwrap();
    let mut both = admitted(&s.cycle(0));
    both.sort();
    assert_eq!(both, ["endless", "timed"]);
    // `all` needs the GPUs `endless` never gives back; `pair` needs only those `timed` frees.
    s.submit(wl("all", "default", 1, 4, 1, Some(10))).unwrap();
    s.submit(wl("pair", "default", 1, 2, 2, Some(50))).unwrap();
    assert!(s.cycle(5).is_empty());
    assert_eq!(
        forecast_at(&s, 5),
        [("pair".into(), Some(100)), ("all".into(), None)]
    );
    // Behind a whole cluster of work without an end, nobody is told anything.
    let mut s = local(4);
    s.submit(wl("endless", "default", 1, 4, 0, None)).unwrap();
    assert_eq!(admitted(&s.cycle(0)), ["endless"]);
    s.submit(wl("a", "default", 1, 4, 1, Some(10))).unwrap();
    s.submit(wl("b", "default", 1, 1, 2, Some(10))).unwrap();
    assert!(s.cycle(5).is_empty());
    assert_eq!(forecast_at(&s, 5), [("a".into(), None), ("b".into(), None)]);
}

#[test]
fn the_forecast_follows_priorities_and_backfill() {
    let mut s = local(4);
    s.submit(wl("run3", "default", 1, 3, 0, Some(100))).unwrap();
    s.submit(wl("run1", "default", 1, 1, 0, Some(20))).unwrap();
    assert_eq!(admitted(&s.cycle(0)), ["run1", "run3"]);
    // Oldest and shortest, but of low priority: it goes last.
    s.submit(with_prio(wl("low", "default", 1, 4, 1, Some(10)), "low"))
        .unwrap();
    s.submit(wl("gang", "default", 1, 4, 2, Some(10))).unwrap();
    // Behind the gang, but it ends (20 + 50) before the gang can start (100): it backfills
    // as soon as `run1` ends.
    s.submit(wl("short", "default", 1, 1, 3, Some(50))).unwrap();
    assert!(s.cycle(5).is_empty());
    assert_eq!(
        forecast_at(&s, 5),
        [
            ("short".into(), Some(20)),
            ("gang".into(), Some(100)),
            ("low".into(), Some(110))
        ]
    );
    assert_eq!(s.expected_starts()[0].id, "gang");
    // And so it goes.
    s.finished("run1").unwrap();
    assert_eq!(admitted(&s.cycle(20)), ["short"]);
}

#[test]
fn a_preemption_under_way_plays_out_in_the_forecast() {
    let mut s = local(4);
    s.submit(with_prio(wl("low", "default", 1, 4, 0, Some(100)), "low"))
        .unwrap();
    assert_eq!(admitted(&s.cycle(0)), ["low"]);
    s.submit(with_prio(wl("high", "default", 1, 2, 10, Some(30)), "high"))
        .unwrap();
    s.submit(wl("next", "default", 1, 4, 11, Some(10))).unwrap();
    let d = s.cycle(11);
    assert!(
        matches!(&d[..], [Decision::Preempt { id, .. }] if id == "low"),
        "{d:?}"
    );
    // `low` leaves at once (as far as the forecast knows), `high` starts on its GPUs, and the
    // 4-GPU job starts when `high` ends; `low`, running now, is not waiting and not told.
    assert_eq!(
        forecast_at(&s, 11),
        [("high".into(), Some(11)), ("next".into(), Some(41))]
    );
}

#[test]
fn forecasting_leaves_the_scheduler_as_it_was() {
    let mut s = local(4);
    s.submit(wl("run3", "default", 1, 3, 0, Some(100))).unwrap();
    s.submit(wl("run1", "default", 1, 1, 0, Some(20))).unwrap();
    assert_eq!(admitted(&s.cycle(0)), ["run1", "run3"]);
    s.submit(wl("gang", "default", 1, 4, 2, Some(10))).unwrap();
    s.submit(wl("short", "default", 1, 1, 3, Some(50))).unwrap();
    assert!(s.cycle(5).is_empty());
    let mut untouched = s.clone();
    let first = s.forecast(5, FORECAST_CYCLES);
    // Asked again, it says the same; the real cycles that follow decide as if never asked.
    assert_eq!(s.forecast(5, FORECAST_CYCLES), first);
    assert_eq!(s.expected_starts(), untouched.expected_starts());
    let mut starts = Vec::new();
    for (t, ended) in [(20, "run1"), (70, "short"), (100, "run3")] {
        s.finished(ended).unwrap();
        untouched.finished(ended).unwrap();
        let d = s.cycle(t);
        assert_eq!(d, untouched.cycle(t), "t = {t}");
        assert_eq!(s.queue_usage(), untouched.queue_usage());
        starts.extend(admitted(&d).into_iter().map(|id| (id, t)));
    }
    // As forecast.
    let told: Vec<_> = first.starts.into_iter().map(|f| (f.id, f.at)).collect();
    let started: Vec<_> = starts.into_iter().map(|(id, t)| (id, Some(t))).collect();
    assert_eq!(told, started);
}

/// A queue's waiting work is listed in the order it is tried: priority first, then the
/// duration-weighted age (a short job passes a long one created a little earlier).
#[test]
fn a_queues_waiting_work_is_listed_in_the_order_it_is_tried() {
    let mut s = local(2);
    let mut running = wl("running", "default", 1, 2, 0, Some(1_000));
    running.priority = Some("high".into());
    s.submit(running).unwrap();
    assert_eq!(admitted(&s.cycle(0)), vec!["running"]);
    s.submit(wl("long", "default", 1, 2, 1, Some(36_000)))
        .unwrap();
    s.submit(wl("short", "default", 1, 2, 2, Some(600)))
        .unwrap();
    let mut urgent = wl("urgent", "default", 1, 2, 3, Some(36_000));
    urgent.priority = Some("high".into());
    s.submit(urgent).unwrap();
    s.cycle(4);
    let order: Vec<&str> = s.pending_order("default").unwrap().collect();
    assert_eq!(order, vec!["urgent", "short", "long"]);
    assert!(s.pending_order("nobody").is_none());
}

#[test]
fn slurm_multifactor_puts_the_team_that_used_less_first_whatever_the_age() {
    // One 8-GPU node, two teams of equal shares that may each use all of it (Slurm accounts,
    // no limits). Team a runs first; then a's older job and b's newer one both wait for it.
    let run = |multifactor: Option<crate::config::Multifactor>| {
        let mut s = Scheduler::with_options(
            Cluster::uniform(1, 8, "gpu"),
            vec![queue("a", None, 8), queue("b", None, 8)],
            prios(),
            Options {
                preemption: false,
                fair_sharing: false,
                duration_weight: 0,
                critical_path_pct: 0,
                multifactor,
                ..Options::default()
            },
        )
        .unwrap();
        s.submit(wl("a1", "a", 1, 8, 0, Some(1_000))).unwrap();
        assert_eq!(admitted(&s.cycle(0)), ["a1"]);
        s.submit(wl("a2", "a", 1, 8, 10, Some(100))).unwrap();
        s.submit(wl("b1", "b", 1, 8, 20, Some(100))).unwrap();
        assert!(admitted(&s.cycle(20)).is_empty());
        s.finished("a1").unwrap();
        admitted(&s.cycle(1_000))
    };
    // By age alone (EASY's order) a's older job goes first; with the fair-share factor, b's.
    assert_eq!(run(None), ["a2"]);
    assert_eq!(run(Some(crate::config::Multifactor::default())), ["b1"]);
}
