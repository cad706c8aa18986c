//! Fuzz target: `ferry sim` reads a trace CSV, a cluster YAML and a queues YAML that users
//! write by hand or export from other systems, so any bytes must be replayed or refused with
//! a fix, never panic or hang. The input is the three files separated by NUL bytes (an empty
//! or missing cluster or queues file means the defaults `ferry sim` picks); its first byte
//! picks the policy, what the policies are told of run times and whether starts are forecast.
#![no_main]

use ferry_sched::{
    Cluster, Estimates, Knowledge, Policy, Probes, QueueSpec, SimReport, TraceJob,
    check_replayable, default_cluster, default_queues, parse_trace, simulate_probing,
};

/// The most nodes a replay runs on here.
const MAX_REPLAYED_NODES: usize = 2048;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let Some((&switches, files)) = data.split_first() else {
        return;
    };
    let text = String::from_utf8_lossy(files);
    let mut parts = text.split('\0');
    let Ok(trace) = parse_trace(parts.next().unwrap_or_default(), "fuzz.csv") else {
        return;
    };
    let cluster = match parts.next().filter(|t| !t.trim().is_empty()) {
        None => default_cluster(&trace),
        Some(yaml) => match serde_saphyr::from_str::<Cluster>(yaml) {
            Ok(c) => c,
            Err(_) => return,
        },
    };
    let queues = match parts.next().filter(|t| !t.trim().is_empty()) {
        None => default_queues(&trace, &cluster),
        Some(yaml) => match serde_saphyr::from_str::<Vec<QueueSpec>>(yaml) {
            Ok(q) => q,
            Err(_) => return,
        },
    };
    // Replays on large clusters take seconds each (the trace can size the default cluster to
    // over 100,000 nodes) and would starve the search; their inputs are still checked.
    if cluster.nodes.len() > MAX_REPLAYED_NODES {
        if let Err(e) = check_replayable(&trace, &cluster, &queues, "fuzz.csv") {
            assert!(e.to_string().contains("fix"), "{e}");
        }
        return;
    }
    let policy = Policy::ALL[usize::from(switches) % Policy::ALL.len()];
    let knowledge = Knowledge {
        estimates: match (switches >> 3) % 4 {
            0 => Estimates::Exact,
            1 => Estimates::None,
            2 => Estimates::Trace,
            _ => Estimates::Limits { padding: 1.5 },
        },
        pace_after_s: (switches & 0x20 != 0).then_some(600),
        split_slowdown_pct: if switches & 0x40 != 0 { 20 } else { 0 },
        per_job_slowdown_untold: false,
    };
    let probes = Probes {
        forecast: switches & 0x80 != 0,
    };
    match simulate_probing(
        &trace,
        &cluster,
        &queues,
        policy,
        policy.options(),
        knowledge,
        probes,
    ) {
        Ok(report) => check(&trace, &report),
        Err(e) => assert!(e.to_string().contains("fix"), "{policy:?}: {e}"),
    }
});

/// What a finished replay holds whatever its inputs (as `tests/sim_inputs.rs` checks).
fn check(trace: &[TraceJob], r: &SimReport) {
    assert_eq!(
        r.jobs.len(),
        trace.len(),
        "{}: every job has an outcome",
        r.policy
    );
    for o in &r.jobs {
        assert!(
            o.first_start_s >= o.submit_s && o.end_s >= o.first_start_s,
            "{}: {o:?}",
            r.policy
        );
    }
    assert!(
        (0.0..=1.0 + 1e-9).contains(&r.utilization),
        "{}: {}",
        r.policy,
        r.utilization
    );
    for v in [r.mean_jct_s, r.p50_jct_s, r.p99_jct_s, r.mean_wait_s] {
        assert!(v.is_finite() && v >= 0.0, "{}: {v}", r.policy);
    }
}
