//! `ferry sim` as a user runs it: the shared Helios trace through every policy, the JSON
//! fields the issue names, the SVG, the opt-in fairness deficits, switches from a file, and a
//! bad trace.

use std::process::Command;

use serde_json::Value;

use crate::harness::{ferry_bin, repo_root};

fn sim(args: &[&str]) -> std::process::Output {
    Command::new(ferry_bin())
        .arg("sim")
        .args(args)
        .current_dir(repo_root())
        .output()
        .unwrap()
}

/// `ferry sim` that must succeed; its standard output.
fn sim_ok(args: &[&str]) -> String {
    let out = sim(args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn the_helios_trace_compares_every_policy_and_bad_traces_name_the_line() {
    let trace = repo_root().join("../shared/fixtures/traces/helios_venus_2vc_2020-09a.csv");
    let trace = trace.to_str().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let svg = dir.path().join("util.svg");
    let out = sim_ok(&[
        "--trace",
        trace,
        "-o",
        "json",
        "--svg",
        svg.to_str().unwrap(),
    ]);
    let reports: Vec<Value> = serde_json::from_str(&out).unwrap();
    let names: Vec<&str> = reports
        .iter()
        .filter_map(|r| r["policy"].as_str())
        .collect();
    assert_eq!(
        names,
        [
            "ferry",
            "fifo",
            "easy-backfill",
            "kueue-strict",
            "kueue-pods",
            "slurm-multifactor"
        ]
    );
    for r in &reports {
        for field in [
            "utilization",
            "mean_jct_s",
            "p99_jct_s",
            "mean_wait_s",
            "preemptions",
            "lost_gpu_hours",
        ] {
            assert!(r[field].is_number(), "{field} missing in {r}");
        }
        for field in [
            "gang_starts",
            "on_fewest_nodes",
            "admitted_unplaced",
            "admitted_idle_gpu_hours",
            "pods_ready_timeouts",
        ] {
            assert!(r["placement"][field].is_number(), "{field} missing in {r}");
        }
        assert!(
            r["team_share"].as_object().is_some_and(|t| t.len() == 2),
            "{r}"
        );
        // The ceiling no policy can beat on this trace and cluster, with its reason.
        let bound = &r["bound"];
        assert!(
            bound["makespan_s"].as_u64() <= r["makespan_s"].as_u64()
                && bound["utilization"].as_f64() >= r["utilization"].as_f64()
                && bound["limit"]["kind"].is_string(),
            "{r}"
        );
    }
    let metric = |policy: usize, field: &str| reports[policy][field].as_f64().unwrap();
    // Bar 2 on the shared trace, as printed: Ferry's mean JCT is below FIFO's, EASY's and the
    // Slurm peer's; its utilization is above FIFO's and ties the backfilling peers' at the
    // ceiling the last long job sets.
    for baseline in [1, 2, 5] {
        assert!(metric(0, "mean_jct_s") < metric(baseline, "mean_jct_s"));
        assert!(metric(0, "utilization") >= metric(baseline, "utilization"));
    }
    assert!(metric(0, "utilization") > metric(1, "utilization"));
    assert_eq!(
        reports[0]["makespan_s"].as_u64(),
        reports[0]["bound"]["makespan_s"].as_u64()
    );
    let chart = std::fs::read_to_string(&svg).unwrap();
    assert!(
        chart.starts_with("<svg") && chart.contains("ferry"),
        "{chart:.200}"
    );

    let text = sim_ok(&["--trace", trace, "--fairness-half-life", "86400"]);
    assert!(
        text.contains("fairness deficits, half-life 86400 s"),
        "{text}"
    );
    assert!(text.contains("easy-backfill"), "{text}");
    assert!(
        text.contains("utilization ceiling: no policy can end before ")
            && text.contains("  of the shortest possible"),
        "{text}"
    );
    // Ferry serves both teams so fast that they are saturated together for minutes only: the
    // table says so and how to judge shares under contention.
    let saturated: u64 = text
        .split_once("ferry: the teams were all saturated together for ")
        .and_then(|(_, rest)| rest.split_once(" s (under 3600 s)"))
        .and_then(|(n, _)| n.parse().ok())
        .unwrap_or_else(|| panic!("no saturation line: {text}"));
    assert!(saturated < 3600 && text.contains("`--load 2`"), "{text}");

    let text = sim_ok(&["--trace", trace, "--reclaim-through-reservation"]);
    assert!(
        text.contains("ferry reclaims through reservations"),
        "{text}"
    );

    // Any switch from a file: with Kueue's fair-sharing condition alone (the policy before
    // session 16) Ferry's figures change and the baselines' do not; a misspelt switch is refused.
    let kueue_rule = dir.path().join("kueue-rule.yaml");
    std::fs::write(&kueue_rule, "fairPreemptionMinimax: false\n").unwrap();
    let out = sim_ok(&[
        "--trace",
        trace,
        "-o",
        "json",
        "--options",
        kueue_rule.to_str().unwrap(),
    ]);
    let before: Vec<Value> = serde_json::from_str(&out).unwrap();
    assert_ne!(before[0]["mean_jct_s"], reports[0]["mean_jct_s"]);
    let text = sim_ok(&["--trace", trace, "--options", kueue_rule.to_str().unwrap()]);
    assert!(
        text.contains("kueue-rule.yaml: fairPreemptionMinimax=false\n"),
        "{text}"
    );
    assert_eq!(before[2]["mean_jct_s"], reports[2]["mean_jct_s"]);
    let typo = dir.path().join("typo.yaml");
    std::fs::write(&typo, "holdForOwd: true\n").unwrap();
    let out = sim(&["--trace", trace, "--options", typo.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("unknown switch `holdForOwd`") && err.contains("holdForOwed"),
        "{err}"
    );

    let bad = dir.path().join("bad.csv");
    std::fs::write(
        &bad,
        "job_id,submit_s,duration_s,gpus,nodes,team,status\n1,0,10,8,1,a,COMPLETED\n2,5,ten,8,1,b,COMPLETED\n",
    )
    .unwrap();
    let out = sim(&["--trace", bad.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("bad.csv") && err.contains("duration_s"),
        "{err}"
    );
}

/// `--load 5`: the same jobs arriving five times as fast on the cluster and quotas sized for
/// the trace as given. Every team is then saturated for days (at load 1 under Ferry, minutes),
/// so the 10% fairness check has a window to judge instead of `n/a`; a factor that is not a
/// positive number is refused by name.
#[test]
fn a_load_factor_replays_the_trace_faster_on_the_same_cluster() {
    let trace = repo_root().join("../shared/fixtures/traces/helios_venus_2vc_2020-09a.csv");
    let trace = trace.to_str().unwrap();
    let text = sim_ok(&["--trace", trace, "--load", "5"]);
    assert!(
        text.contains("load: arrivals 5x as fast as the trace's")
            && text.contains("cluster: 176 GPUs")
            && !text.contains("`--load 2`"),
        "{text}"
    );
    let out = sim_ok(&["--trace", trace, "--load", "5", "-o", "json"]);
    let reports: Vec<Value> = serde_json::from_str(&out).unwrap();
    let ferry = &reports[0];
    assert_eq!(ferry["policy"], "ferry");
    assert!(
        ferry["saturated_s"].as_u64().unwrap() > 86_400,
        "{}",
        ferry["saturated_s"]
    );
    for share in ferry["team_share"].as_object().unwrap().values() {
        assert!(share["within_tolerance"].is_boolean(), "{share}");
    }
    for bad in ["0", "-2", "NaN"] {
        let out = sim(&["--trace", trace, "--load", bad]);
        assert!(!out.status.success(), "--load {bad} was taken");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("--load"), "{err}");
    }
}

/// `--jobs` writes every job's outcome under every policy; the rows add up to the report's
/// own figures (mean JCT overall and per team, preemptions), and a job id or team holding a
/// comma survives the round trip.
#[test]
fn every_jobs_outcome_is_written_for_every_policy() {
    let trace = repo_root().join("../shared/fixtures/traces/helios_venus_2vc_2020-09a.csv");
    let dir = tempfile::tempdir().unwrap();
    let jobs = dir.path().join("jobs.csv");
    let out = sim_ok(&[
        "--trace",
        trace.to_str().unwrap(),
        "--jobs",
        jobs.to_str().unwrap(),
        "-o",
        "json",
    ]);
    let reports: Vec<Value> = serde_json::from_str(&out).unwrap();
    let mut given = csv::Reader::from_path(&trace).unwrap();
    let duration: std::collections::HashMap<String, u64> = given
        .records()
        .map(|r| {
            let r = r.unwrap();
            (r[0].to_string(), r[2].parse().unwrap())
        })
        .collect();
    let mut rd = csv::Reader::from_path(&jobs).unwrap();
    assert_eq!(
        rd.headers().unwrap().iter().collect::<Vec<_>>(),
        ferry_sched::JOB_COLUMNS
    );
    let rows: Vec<csv::StringRecord> = rd.records().map(Result::unwrap).collect();
    assert_eq!(rows.len(), reports.len() * duration.len());
    let num = |r: &csv::StringRecord, k: usize| -> u64 { r[k].parse().unwrap() };
    for report in &reports {
        let policy = report["policy"].as_str().unwrap();
        let mine: Vec<&csv::StringRecord> = rows.iter().filter(|r| &r[0] == policy).collect();
        assert_eq!(mine.len(), duration.len(), "{policy}");
        let (mut jct_sum, mut preemptions) = (0u64, 0u64);
        for r in &mine {
            let (submit, start, end, jct, wait) =
                (num(r, 4), num(r, 5), num(r, 6), num(r, 7), num(r, 8));
            assert!(submit <= start && start <= end, "{policy} {r:?}");
            assert_eq!(jct, end - submit, "{policy} {r:?}");
            assert_eq!(
                jct - wait,
                duration[&r[1]],
                "{policy} {r:?}: JCT is wait plus run"
            );
            jct_sum += jct;
            preemptions += num(r, 9);
        }
        for (team, got) in report["team_mean_jct_s"].as_object().unwrap() {
            let theirs: Vec<u64> = mine
                .iter()
                .filter(|r| &r[2] == team.as_str())
                .map(|r| num(r, 7))
                .collect();
            let want = theirs.iter().sum::<u64>() as f64 / theirs.len() as f64;
            let got = got.as_f64().unwrap();
            assert!(
                (got - want).abs() < 1e-6 * want,
                "{policy} {team}: {got} vs {want}"
            );
        }
        let mean = jct_sum as f64 / mine.len() as f64;
        let reported = report["mean_jct_s"].as_f64().unwrap();
        assert!(
            (mean - reported).abs() < 1e-6 * reported,
            "{policy}: {mean} vs {reported}"
        );
        assert_eq!(
            preemptions,
            report["preemptions"].as_u64().unwrap(),
            "{policy}"
        );
    }
    assert!(
        rows.iter().any(|r| &r[0] == "ferry" && num(r, 9) > 0),
        "Ferry preempts on this trace; its rows should show it"
    );
    // The table counts, per peer, the jobs Ferry finished sooner and later: the same rows.
    let table = sim_ok(&["--trace", trace.to_str().unwrap()]);
    let jct = |policy: &str| -> std::collections::HashMap<String, u64> {
        rows.iter()
            .filter(|r| &r[0] == policy)
            .map(|r| (r[1].to_string(), num(r, 7)))
            .collect()
    };
    let mine = jct("ferry");
    for report in &reports[1..] {
        let peer = report["policy"].as_str().unwrap();
        let theirs = jct(peer);
        let sooner = mine.iter().filter(|(k, v)| **v < theirs[*k]).count();
        let later = mine.iter().filter(|(k, v)| **v > theirs[*k]).count();
        let line = format!("jobs done sooner {sooner}, later {later}");
        assert!(
            table
                .lines()
                .any(|l| l.contains(&format!("vs {peer} ")) && l.ends_with(&line)),
            "{line} missing for {peer}:\n{table}"
        );
    }

    let odd = dir.path().join("odd.csv");
    std::fs::write(
        &odd,
        "job_id,submit_s,duration_s,gpus,nodes,team,status\n\"a,1\",0,60,8,1,\"team, one\",COMPLETED\n",
    )
    .unwrap();
    sim_ok(&[
        "--trace",
        odd.to_str().unwrap(),
        "--jobs",
        jobs.to_str().unwrap(),
    ]);
    let mut rd = csv::Reader::from_path(&jobs).unwrap();
    let first = rd.records().next().unwrap().unwrap();
    assert_eq!((&first[1], &first[2]), ("a,1", "team, one"));
}

/// A team out of the 10% band is named with the situation that explains most of its gap, in
/// the table and in JSON (`miss_cause`), for every policy; a team within it has none. The
/// shared trace on 128 GPUs (the size of the big team's largest gangs) starves the small team
/// under every policy.
#[test]
fn a_team_out_of_the_band_is_named_with_its_cause() {
    let trace = repo_root().join("../shared/fixtures/traces/helios_venus_2vc_2020-09a.csv");
    let trace = trace.to_str().unwrap();
    let out = sim_ok(&["--trace", trace, "--gpus", "128", "-o", "json"]);
    let reports: Vec<Value> = serde_json::from_str(&out).unwrap();
    let text = sim_ok(&["--trace", trace, "--gpus", "128"]);
    assert!(text.contains("out of the band, and why:"), "{text}");
    let mut misses = 0;
    for r in &reports {
        for (team, share) in r["team_share"].as_object().unwrap() {
            let cause = share.get("miss_cause").and_then(Value::as_str);
            if share["within_tolerance"] == false {
                misses += 1;
                let cause = cause.unwrap_or_else(|| panic!("{team} out without a cause: {r}"));
                let line = format!(
                    "  {:<17} {team} at {:.2} of its entitlement: {cause}",
                    r["policy"].as_str().unwrap(),
                    share["ratio"].as_f64().unwrap()
                );
                assert!(text.contains(&line), "{line:?} not in {text}");
                assert!(text.contains(&format!("\n  {cause}: ")), "{text}");
            } else {
                assert_eq!(cause, None, "{team} within the band: {r}");
            }
        }
    }
    assert!(misses >= reports.len(), "{out}");
}

/// `--quota TEAM=GPUS` sets the queues without a file: the unseen window of
/// `crates/sched/tests/data` on the teams' real virtual-cluster sizes gives the same report as
/// the equivalent queues YAML (a plain list's names matched to the teams ignoring case), the
/// setup line names the quotas, and a team left out, a team the trace lacks, a malformed value or
/// `--queues` alongside are refused by name.
#[test]
fn quotas_given_on_the_command_line_match_a_queues_file() {
    let trace = repo_root().join("crates/sched/tests/data/helios_venus_2vc_2020-09b.csv");
    let trace = trace.to_str().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let queues = dir.path().join("venus.yaml");
    // A plain list's names are matched to the teams ignoring case, as documents' are.
    std::fs::write(
        &queues,
        "- {name: vcvgl, cohort: all, quotas: [{flavor: any, nominal: 160}]}\n\
         - {name: vcvlY, cohort: all, quotas: [{flavor: any, nominal: 16}]}\n",
    )
    .unwrap();
    let args = ["--trace", trace, "--gpus", "176", "-o", "json"];
    let from_flags =
        sim_ok(&[&args[..], &["--quota", "vcvGl=160", "--quota", "vcvlY=16"]].concat());
    let from_file = sim_ok(&[&args[..], &["--queues", queues.to_str().unwrap()]].concat());
    // The Queue documents `ferry apply` takes, named after the trace's teams (Ferry names are
    // lowercase), are the same queues.
    let applied = dir.path().join("venus-queues.yaml");
    let queue_doc = |team: &str, gpus: u32| {
        format!(
            "apiVersion: ferry.dev/v1alpha1\nkind: Queue\nmetadata: {{name: {}, namespace: \
             research}}\nspec:\n  cohort: all\n  quotas: [{{flavor: any, nominal: {gpus}}}]\n",
            team.to_lowercase()
        )
    };
    std::fs::write(
        &applied,
        format!("{}---\n{}", queue_doc("vcvGl", 160), queue_doc("vcvlY", 16)),
    )
    .unwrap();
    let from_documents = sim_ok(&[&args[..], &["--queues", applied.to_str().unwrap()]].concat());
    let (a, b, c): (Vec<Value>, Vec<Value>, Vec<Value>) = (
        serde_json::from_str(&from_flags).unwrap(),
        serde_json::from_str(&from_file).unwrap(),
        serde_json::from_str(&from_documents).unwrap(),
    );
    assert_eq!(a, b);
    assert_eq!(a, c);
    let ferry = &a[0];
    assert!(
        (ferry["team_share"]["vcvlY"]["entitlement"]
            .as_f64()
            .unwrap()
            - 16.0 / 176.0)
            .abs()
            < 1e-9,
        "{ferry}"
    );
    let text = sim_ok(&[
        "--trace",
        trace,
        "--gpus",
        "176",
        "--quota",
        "vcvGl=160",
        "--quota",
        "vcvlY=16",
    ]);
    assert!(
        text.contains("vcvGl=160") && text.contains("vcvlY=16"),
        "{text}"
    );

    let only_one = dir.path().join("one.yaml");
    std::fs::write(&only_one, queue_doc("vcvGl", 160)).unwrap();
    let only_one = only_one.to_str().unwrap().to_owned();
    let negative = dir.path().join("negative.yaml");
    std::fs::write(
        &negative,
        format!("{}---\n{}", queue_doc("vcvGl", 160), queue_doc("vcvlY", 16))
            .replace("nominal: 16}", "nominal: -16}"),
    )
    .unwrap();
    let negative = negative.to_str().unwrap().to_owned();
    for (bad, expect) in [
        (vec!["--quota", "vcvGl=160"], "team `vcvlY` has none"),
        (
            vec![
                "--quota",
                "vcvGl=160",
                "--quota",
                "vcvlY=16",
                "--quota",
                "nope=8",
            ],
            "no team `nope`",
        ),
        (
            vec![
                "--quota",
                "vcvGl=160",
                "--quota",
                "vcvGl=8",
                "--quota",
                "vcvlY=16",
            ],
            "given twice",
        ),
        (vec!["--quota", "vcvGl:160"], "expected TEAM=GPUS"),
        (vec!["--quota", "vcvGl=lots"], "whole number"),
        (
            vec!["--quota", "vcvGl=160", "--queues", queues.to_str().unwrap()],
            "--queues",
        ),
        // A queue file that leaves a team out: named with one of its jobs.
        (
            vec!["--queues", &only_one],
            "team `vcvlY` has no queue (queues: vcvGl)",
        ),
        // Quotas the cluster cannot honour are refused when applied, as by `ferry apply`.
        (vec!["--queues", &negative], "spec.quotas[0].nominal"),
    ] {
        let out = sim(&[&["--trace", trace][..], &bad].concat());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains(expect),
            "{bad:?}: {err}"
        );
    }
}

/// A cluster too small for some of the trace's jobs is refused before anything runs, naming
/// one of them by its trace id, how many there are and the size that fits them all; a job
/// placing more GPUs on one node than the simulated nodes have asks for larger nodes, and the
/// default cluster is built of nodes that large.
#[test]
fn jobs_no_policy_could_start_are_named_with_the_fix() {
    let trace = repo_root().join("../shared/fixtures/traces/helios_venus_2vc_2020-09a.csv");
    let out = sim(&["--trace", trace.to_str().unwrap(), "--gpus", "64"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("helios_venus_2vc_2020-09a.csv")
            && err.contains("of its 1014 jobs can never start on the simulated cluster of 64 GPUs")
            && err.contains("(128 GPUs on 16 nodes, team `vcvGl`)")
            && err.contains("fix: simulate at least 128 GPUs (--gpus 128"),
        "{err}"
    );
    assert!(!err.contains("workload `"), "{err}");

    let dir = tempfile::tempdir().unwrap();
    let wide = dir.path().join("wide.csv");
    std::fs::write(
        &wide,
        "job_id,submit_s,duration_s,gpus,nodes,team,status\n\
         a,0,600,8,1,x,COMPLETED\nwide-1,60,600,16,1,x,COMPLETED\n",
    )
    .unwrap();
    let wide = wide.to_str().unwrap();
    let out = sim(&["--trace", wide, "--gpus", "32"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success()
            && err.contains("job `wide-1`")
            && err.contains("nodes of at least 16 GPUs"),
        "{err}"
    );
    let text = sim_ok(&["--trace", wide]);
    assert!(text.contains("nodes of 16 GPUs"), "{text}");

    // A sweep submitted at once: the default cluster is what it uses at once (before, its
    // offered load over a one-second span asked for millions of GPUs and the replay ran out
    // of memory), and a cluster past the simulator's size is refused by its flag.
    let sweep = dir.path().join("sweep.csv");
    let rows: String = (0..12)
        .map(|i| {
            format!(
                "s{i},0,{},8,1,team-{},COMPLETED\n",
                3600 * (1 + i % 3),
                i % 2
            )
        })
        .collect();
    std::fs::write(
        &sweep,
        format!("job_id,submit_s,duration_s,gpus,nodes,team,status\n{rows}"),
    )
    .unwrap();
    let text = sim_ok(&["--trace", sweep.to_str().unwrap()]);
    assert!(text.contains("cluster: 96 GPUs on 12 nodes"), "{text}");
    let out = sim(&["--trace", sweep.to_str().unwrap(), "--gpus", "2000000"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("--gpus") && err.contains("1..=1048576"),
        "{err}"
    );
}

/// `--estimates` and `--pace-after` change what every policy is told about run times, not how
/// long jobs run: the setup says so; without estimates EASY has no ends to backfill by, so its
/// mean JCT rises to about FIFO's, while Ferry's (which on this trace owes its lead to quotas and
/// fair sharing, not to known durations) stays below both; time limits corrected once a job
/// has run ten minutes bring EASY back near its exact-estimate figure. Bad modes are refused
/// with the accepted forms.
#[test]
fn run_time_estimates_are_stated_and_change_what_every_policy_knows() {
    let trace = repo_root().join("../shared/fixtures/traces/helios_venus_2vc_2020-09a.csv");
    let trace = trace.to_str().unwrap();
    let mean_jct = |extra: &[&str]| -> Vec<f64> {
        let out = sim_ok(&[&["--trace", trace, "-o", "json"][..], extra].concat());
        let reports: Vec<Value> = serde_json::from_str(&out).unwrap();
        // Each report says what its policy was told.
        let told = &reports[3]["knowledge"];
        match extra {
            [] => assert_eq!(told["estimates"]["kind"], "exact", "{told}"),
            ["--estimates", "none"] => assert_eq!(told["estimates"]["kind"], "none", "{told}"),
            _ => assert_eq!(
                (&told["estimates"]["padding"], &told["pace_after_s"]),
                (&Value::from(2.0), &Value::from(600)),
                "{told}"
            ),
        }
        reports
            .iter()
            .map(|r| r["mean_jct_s"].as_f64().unwrap())
            .collect()
    };
    // ferry, fifo, easy-backfill, kueue-strict, kueue-pods, slurm-multifactor
    let exact = mean_jct(&[]);
    let none = mean_jct(&["--estimates", "none"]);
    let limits = mean_jct(&["--estimates", "limits:2", "--pace-after", "600"]);
    assert_eq!(exact[1], none[1], "FIFO uses no durations");
    assert!(
        none[2] > 1.5 * exact[2],
        "EASY without ends: {none:?} vs {exact:?}"
    );
    assert!(none[0] < none[1] && none[0] < none[2], "{none:?}");
    assert!(limits[2] < 1.1 * exact[2], "{limits:?} vs {exact:?}");
    assert!(limits[0] < limits[1] && limits[0] < limits[2], "{limits:?}");

    let text = sim_ok(&[
        "--trace",
        trace,
        "--estimates",
        "limits:2",
        "--pace-after",
        "600",
    ]);
    assert!(
        text.contains("run times told to every policy: users' time limits (each run time x 2")
            && text.contains("once it has run 600 s"),
        "{text}"
    );
    assert!(
        sim_ok(&["--trace", trace]).contains("run times told to every policy: exact"),
        "the default is stated"
    );
    for (bad, expect) in [
        (
            "limit",
            "expected `exact`, `none`, `trace`, `limits` or `limits:F`",
        ),
        ("trace", "no job has a `time_limit_s`"),
        ("limits:0.5", "from 1 to 100"),
        ("limits:x", "not a number"),
    ] {
        let out = sim(&["--trace", trace, "--estimates", bad]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success()
                && err.contains(expect)
                && (err.contains("--estimates") || err.contains("fix:")),
            "{bad}: {err}"
        );
    }
}

/// `--forecast` tells each job that has to wait, when it arrives, when it starts (what `ferry
/// up` shows every queued job), and reports how that held: three 8-GPU jobs in a row on 8
/// GPUs, the second told 100 (when the first ends), the third 150, both kept. Without the flag
/// nothing is measured, in the table or in JSON.
#[test]
fn forecast_starts_are_measured_when_asked() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("row.csv");
    std::fs::write(
        &trace,
        "job_id,submit_s,duration_s,gpus,nodes,team,status\n\
         a,0,100,8,1,t,COMPLETED\n\
         b,10,50,8,1,t,COMPLETED\n\
         c,20,30,8,1,t,COMPLETED\n",
    )
    .unwrap();
    let trace = trace.to_str().unwrap();
    let out = sim_ok(&["--trace", trace, "--gpus", "8", "--forecast", "-o", "json"]);
    let reports: Vec<Value> = serde_json::from_str(&out).unwrap();
    for r in &reports {
        let f = &r["forecast"];
        assert_eq!(
            (&f["waited"], &f["told"], &f["within_5_min"], &f["later"]),
            (
                &Value::from(2),
                &Value::from(2),
                &Value::from(2),
                &Value::from(0)
            ),
            "{}: {f}",
            r["policy"]
        );
        assert_eq!(f["p90_error_s"], 0.0, "{f}");
    }
    let text = sim_ok(&["--trace", trace, "--gpus", "8", "--forecast"]);
    let row = text
        .lines()
        .find(|l| l.starts_with("forecast, within 5 min"))
        .unwrap_or_else(|| panic!("{text}"));
    assert_eq!(row.matches("2/2 of 2").count(), 6, "{row}");
    let plain = sim_ok(&["--trace", trace, "--gpus", "8", "-o", "json"]);
    assert!(!plain.contains("forecast"), "{plain}");
    assert!(!sim_ok(&["--trace", trace, "--gpus", "8"]).contains("forecast"));
}

/// A cluster file of two racks of two 8-GPU nodes in `dir`.
fn two_racks(dir: &std::path::Path) -> String {
    let path = dir.join("racks.yaml");
    std::fs::write(
        &path,
        "nodes:\n\
         - {name: n0, gpus: 8, flavor: gpu, rack: r0}\n\
         - {name: n1, gpus: 8, flavor: gpu, rack: r0}\n\
         - {name: n2, gpus: 8, flavor: gpu, rack: r1}\n\
         - {name: n3, gpus: 8, flavor: gpu, rack: r1}\n",
    )
    .unwrap();
    path.to_str().unwrap().to_owned()
}

/// A trace file in `dir` for `two_racks`: one-node jobs a (100 s), b (1,000 s) and c (500 s)
/// at 0 — a and b fill rack r0 (single-node jobs go to the fullest rack), c takes half of r1,
/// so at 150 one node is free in each rack and r1 frees at 500 — then `gang`, two nodes for
/// `gang_s` seconds, at 150, with `value` in column `column` (empty for the others).
fn racked_trace(dir: &std::path::Path, gang_s: u64, column: &str, value: &str) -> String {
    let path = dir.join(format!("{gang_s}-{column}-{value}.csv"));
    std::fs::write(
        &path,
        format!(
            "job_id,submit_s,duration_s,gpus,nodes,team,status,{column}\n\
             a,0,100,8,1,t,COMPLETED,\nb,0,1000,8,1,t,COMPLETED,\n\
             c,0,500,8,1,t,COMPLETED,\ngang,150,{gang_s},16,2,t,COMPLETED,{value}\n"
        ),
    )
    .unwrap();
    path.to_str().unwrap().to_owned()
}

/// A trace's `topology` column: on a cluster of two racks, a two-node gang that only prefers
/// one rack starts at once across both (and `ferry sim` counts it split), while the same gang
/// required to stay in one waits for a rack to free (none split, a later end); a gang no rack
/// can ever hold is refused before anything runs, naming the job and the rack's size.
#[test]
fn a_trace_can_require_one_rack_and_split_gangs_are_counted() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = two_racks(dir.path());
    let cluster = cluster.as_str();
    let trace = |topology: &str| racked_trace(dir.path(), 100, "topology", topology);
    let ferry = |topology: &str| -> Value {
        let out = sim_ok(&[
            "--trace",
            &trace(topology),
            "--cluster",
            cluster,
            "-o",
            "json",
        ]);
        let reports: Vec<Value> = serde_json::from_str(&out).unwrap();
        reports[0].clone()
    };
    let preferred = ferry("");
    let required = ferry("rack");
    assert_eq!(preferred["placement"]["one_rack_fits"], 1, "{preferred}");
    assert_eq!(
        preferred["placement"]["split_across_racks"], 1,
        "{preferred}"
    );
    assert_eq!(required["placement"]["split_across_racks"], 0, "{required}");
    // The required gang starts when c ends (500) instead of at 150.
    let jct = |r: &Value| r["mean_jct_s"].as_f64().unwrap();
    assert!(
        (jct(&required) - jct(&preferred) - 350.0 / 4.0).abs() < 1e-6,
        "{preferred} {required}"
    );
    let text = sim_ok(&["--trace", &trace(""), "--cluster", cluster]);
    assert!(text.contains("one rack fit / split"), "{text}");

    let wide = dir.path().join("wide.csv");
    std::fs::write(
        &wide,
        "job_id,submit_s,duration_s,gpus,nodes,team,status,topology\n\
         big,0,100,24,3,t,COMPLETED,rack\n",
    )
    .unwrap();
    let out = sim(&["--trace", wide.to_str().unwrap(), "--cluster", cluster]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success()
            && err.contains("job `big`")
            && err.contains("one rack of flavor `gpu` can host at most 2 pods of 8 GPUs"),
        "{err}"
    );
    let bad = dir.path().join("bad.csv");
    std::fs::write(
        &bad,
        "job_id,submit_s,duration_s,gpus,nodes,team,status,topology\n\
         x,0,100,8,1,t,COMPLETED,zone\n",
    )
    .unwrap();
    let out = sim(&["--trace", bad.to_str().unwrap(), "--cluster", cluster]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("line 2") && err.contains("`zone` is not a topology"),
        "{err}"
    );
}

/// `--split-slowdown`: on two racks, a gang that only prefers one rack and would run twice as
/// long split waits for a rack under Ferry (told the slowdown) when that costs less, while the
/// baselines start it split at once and pay the slowdown; a cluster without racks is refused.
#[test]
fn a_split_slowdown_makes_ferry_wait_for_one_rack_when_that_costs_less() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = two_racks(dir.path());
    let trace = racked_trace(dir.path(), 1000, "topology", "");
    let (trace, cluster) = (trace.as_str(), cluster.as_str());
    let out = sim_ok(&[
        "--trace",
        trace,
        "--cluster",
        cluster,
        "--split-slowdown",
        "100",
        "-o",
        "json",
    ]);
    let reports: Vec<Value> = serde_json::from_str(&out).unwrap();
    let policy = |name: &str| {
        reports
            .iter()
            .find(|r| r["policy"] == name)
            .unwrap_or_else(|| panic!("{name}: {out}"))
    };
    let (ferry, easy) = (policy("ferry"), policy("easy-backfill"));
    assert_eq!(ferry["knowledge"]["split_slowdown_pct"], 100, "{ferry}");
    // Ferry: the gang waits 350 s for r1 and runs 1,000 s; EASY: split at once, 2,000 s.
    assert_eq!(ferry["placement"]["split_across_racks"], 0, "{ferry}");
    assert_eq!(easy["placement"]["split_across_racks"], 1, "{easy}");
    assert_eq!(ferry["mean_jct_s"], (100.0 + 1000.0 + 500.0 + 1350.0) / 4.0);
    assert_eq!(easy["mean_jct_s"], (100.0 + 1000.0 + 500.0 + 2000.0) / 4.0);
    let text = sim_ok(&[
        "--trace",
        trace,
        "--cluster",
        cluster,
        "--split-slowdown",
        "100",
    ]);
    assert!(
        text.contains("a gang split across racks although one rack could hold it runs 100% longer"),
        "{text}"
    );
    let too_slow = dir.path().join("too-slow.yaml");
    std::fs::write(&too_slow, "splitSlowdownPct: 2000\n").unwrap();
    let out = sim(&["--trace", trace, "--options", too_slow.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("splitSlowdownPct 2000 is more than 1000"),
        "{err}"
    );
    let out = sim(&["--trace", trace, "--gpus", "32", "--split-slowdown", "10"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("the cluster has no racks") && err.contains("fix:"),
        "{err}"
    );
    // A job's own figure in the trace's `split_slowdown_pct` column: the gang runs 100% slower
    // split whatever the run's figure, and Ferry, told it as a spec would, waits the same way.
    let own = |value: &str| racked_trace(dir.path(), 1000, "split_slowdown_pct", value);
    let out = sim_ok(&["--trace", &own("100"), "--cluster", cluster, "-o", "json"]);
    let own_reports: Vec<Value> = serde_json::from_str(&out).unwrap();
    let jct = |name: &str| {
        own_reports
            .iter()
            .find(|r| r["policy"] == name)
            .map(|r| r["mean_jct_s"].clone())
    };
    assert_eq!(jct("ferry"), ferry.get("mean_jct_s").cloned(), "{out}");
    assert_eq!(
        jct("easy-backfill"),
        easy.get("mean_jct_s").cloned(),
        "{out}"
    );
    let out = sim(&["--trace", &own("fast"), "--cluster", cluster]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("line 5") && err.contains("column `split_slowdown_pct`: `fast`"),
        "{err}"
    );
}

/// `ferry sim -o json` that must succeed: its reports, and the notes it wrote to stderr.
fn sim_json_with_notes(args: &[&str]) -> (Vec<Value>, String) {
    let out = sim(args);
    let notes = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{notes}");
    (serde_json::from_slice(&out.stdout).unwrap(), notes)
}

/// Two runs' reports agree on every policy's figures and shares.
fn assert_same_figures(a: &[Value], b: &[Value]) {
    assert_eq!(a.len(), b.len());
    for (a, b) in a.iter().zip(b) {
        for key in [
            "team_share",
            "utilization",
            "mean_jct_s",
            "p99_jct_s",
            "preemptions",
        ] {
            assert_eq!(a[key], b[key], "{}: {key}", a["policy"]);
        }
    }
}

/// `--queues` takes Kueue's own objects as a cluster runs them: the unseen window on the
/// teams' real virtual-cluster sizes, written as ClusterQueues that teams reach through
/// LocalQueues in their namespaces, replays exactly as the same quotas given with `--quota`
/// (shares then reported per ClusterQueue). What is not replayed (CPU quotas, StrictFIFO) is
/// said, the nodes take the queues' one flavor, and a team with no ClusterQueue is refused.
#[test]
fn kueue_cluster_queues_replay_as_the_same_quotas() {
    let trace = repo_root().join("crates/sched/tests/data/helios_venus_2vc_2020-09b.csv");
    let trace = trace.to_str().unwrap();
    let dir = tempfile::tempdir().unwrap();
    // Kueue's defaults preempt nothing; these match Ferry's (what `--quota` gives).
    let cq = |name: &str, gpus: u32, extra: &str| {
        format!(
            "apiVersion: kueue.x-k8s.io/v1beta2\nkind: ClusterQueue\nmetadata: {{name: {name}}}\n\
             spec:\n  cohortName: all\n{extra}  preemption: {{withinClusterQueue: LowerPriority, \
             reclaimWithinCohort: Any}}\n  resourceGroups:\n  - coveredResources: [cpu, \
             nvidia.com/gpu]\n    flavors:\n    - name: a100\n      resources:\n      - {{name: \
             cpu, nominalQuota: \"1k\"}}\n      - {{name: nvidia.com/gpu, nominalQuota: \"{gpus}\"}}\n"
        )
    };
    let lq = |ns: &str, cq: &str| {
        format!(
            "apiVersion: kueue.x-k8s.io/v1beta2\nkind: LocalQueue\nmetadata: {{name: main, \
             namespace: {ns}}}\nspec: {{clusterQueue: {cq}}}\n"
        )
    };
    let objects = [
        "apiVersion: kueue.x-k8s.io/v1beta2\nkind: ResourceFlavor\nmetadata: {name: a100}\n\
         spec: {nodeLabels: {gpu: a100}}\n"
            .to_owned(),
        cq("a-vision", 160, ""),
        cq("b-speech", 16, "  queueingStrategy: StrictFIFO\n"),
        lq("vcvgl", "a-vision"),
        lq("vcvly", "b-speech"),
    ];
    let kueue = dir.path().join("kueue.yaml");
    std::fs::write(&kueue, objects.join("---\n")).unwrap();
    let args = ["--trace", trace, "--gpus", "176", "-o", "json"];
    let from_flags =
        sim_ok(&[&args[..], &["--quota", "vcvGl=160", "--quota", "vcvlY=16"]].concat());
    let (from_kueue, notes) =
        sim_json_with_notes(&[&args[..], &["--queues", kueue.to_str().unwrap()]].concat());
    for said in [
        "kueue, not replayed: ClusterQueue/a-vision: quotas of cpu",
        "kueue, not replayed: ClusterQueue/b-speech: spec.queueingStrategy StrictFIFO",
        "the cluster's nodes are of flavor a100",
    ] {
        assert!(notes.contains(said), "{said}: {notes}");
    }
    let renamed: Vec<Value> = serde_json::from_str(
        &serde_json::to_string(&from_kueue)
            .unwrap()
            .replace("\"a-vision\"", "\"vcvGl\"")
            .replace("\"b-speech\"", "\"vcvlY\""),
    )
    .unwrap();
    let from_flags: Vec<Value> = serde_json::from_str(&from_flags).unwrap();
    assert_same_figures(&from_flags, &renamed);

    // A team no LocalQueue leads from: refused, naming the team and the fix.
    let partial = dir.path().join("partial.yaml");
    std::fs::write(&partial, objects[..4].join("---\n")).unwrap();
    let out = sim(&["--trace", trace, "--queues", partial.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success()
            && err.contains("trace team `vcvlY`")
            && err.contains("fix: add a LocalQueue for the team"),
        "{err}"
    );
    // A bad object is refused with its field path.
    let bad = dir.path().join("bad.yaml");
    std::fs::write(
        &bad,
        cq("a-vision", 160, "").replace("\"160\"", "\"1500m\""),
    )
    .unwrap();
    let out = sim(&["--trace", trace, "--queues", bad.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success()
            && err.contains("ClusterQueue/a-vision: spec.resourceGroups[0].flavors[0].resources[1].nominalQuota: must be a whole number of GPUs"),
        "{err}"
    );
}

/// `--queues` takes the ResourceQuotas teams run today, written as the articles write them
/// (`nvidia.com/gpu` without the `requests.` prefix Kubernetes wants, said in a note): each
/// namespace's cap replays exactly as a Ferry Queue of that quota in no cohort, and the note
/// says how to replay the same quotas shared. A team without a quota is refused.
#[test]
fn resource_quotas_replay_as_hard_caps() {
    let trace = repo_root().join("crates/sched/tests/data/helios_venus_2vc_2020-09b.csv");
    let trace = trace.to_str().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let rq = |ns: &str, gpus: u32| {
        format!(
            "apiVersion: v1\nkind: ResourceQuota\nmetadata: {{name: gpu-quota, namespace: {ns}}}\n\
             spec:\n  hard: {{nvidia.com/gpu: \"{gpus}\", memory: 500Gi, cpu: \"64\"}}\n"
        )
    };
    let quotas = dir.path().join("rq.yaml");
    std::fs::write(
        &quotas,
        format!("{}---\n{}", rq("vcvgl", 160), rq("vcvly", 16)),
    )
    .unwrap();
    let queue = |team: &str, gpus: u32| {
        format!(
            "apiVersion: ferry.dev/v1alpha1\nkind: Queue\nmetadata: {{name: {team}, namespace: \
             {team}}}\nspec:\n  quotas: [{{flavor: any, nominal: {gpus}}}]\n"
        )
    };
    let hard = dir.path().join("hard.yaml");
    std::fs::write(
        &hard,
        format!("{}---\n{}", queue("vcvgl", 160), queue("vcvly", 16)),
    )
    .unwrap();
    let args = ["--trace", trace, "--gpus", "176", "-o", "json"];
    let (from_quotas, notes) =
        sim_json_with_notes(&[&args[..], &["--queues", quotas.to_str().unwrap()]].concat());
    for said in [
        "ResourceQuota, not replayed: ResourceQuota/vcvgl/gpu-quota: spec.hard[nvidia.com/gpu] \
         read as requests.nvidia.com/gpu",
        "ResourceQuotas are hard caps: no namespace lends or borrows",
    ] {
        assert!(notes.contains(said), "{said}: {notes}");
    }
    let from_queues: Vec<Value> = serde_json::from_str(
        &sim_ok(&[&args[..], &["--queues", hard.to_str().unwrap()]].concat())
            .replace("\"vcvGl\"", "\"vcvgl\"")
            .replace("\"vcvlY\"", "\"vcvly\""),
    )
    .unwrap();
    assert_same_figures(&from_quotas, &from_queues);
    let partial = dir.path().join("partial.yaml");
    std::fs::write(&partial, rq("vcvgl", 160)).unwrap();
    let out = sim(&["--trace", trace, "--queues", partial.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success()
            && err.contains("trace team `vcvlY`")
            && err.contains("has no namespace (namespaces: vcvgl); fix: add a ResourceQuota"),
        "{err}"
    );
}

/// `--queues` takes Volcano's Queues: one cohort, `deserved` as the nominal quota (else the
/// weight's share of what no queue deserves), `capability` as the most a queue holds, no
/// preemption (Volcano's default actions). They replay exactly as the Ferry Queues they
/// amount to, and the note says preemption is off.
#[test]
fn volcano_queues_replay_as_one_cohort() {
    let trace = repo_root().join("crates/sched/tests/data/helios_venus_2vc_2020-09b.csv");
    let trace = trace.to_str().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let volcano = dir.path().join("volcano.yaml");
    std::fs::write(
        &volcano,
        "apiVersion: scheduling.volcano.sh/v1beta1\nkind: Queue\nmetadata: {name: vcvgl}\n\
         spec: {weight: 10, deserved: {nvidia.com/gpu: \"160\"}}\n---\n\
         apiVersion: scheduling.volcano.sh/v1beta1\nkind: Queue\nmetadata: {name: vcvly}\n\
         spec: {capability: {nvidia.com/gpu: \"64\"}}\n",
    )
    .unwrap();
    // What they amount to on 176 GPUs: vcvly owed the 16 no queue deserves, borrowing up to
    // 48 more; nothing preempts.
    let queue = |team: &str, weight: u32, quota: &str| {
        format!(
            "apiVersion: ferry.dev/v1alpha1\nkind: Queue\nmetadata: {{name: {team}, namespace: \
             {team}}}\nspec:\n  cohort: volcano\n  weight: {weight}\n  preemption: \
             {{withinQueue: Never, reclaimWithinCohort: Never}}\n  quotas: [{{flavor: any, \
             {quota}}}]\n"
        )
    };
    let ferry = dir.path().join("ferry.yaml");
    std::fs::write(
        &ferry,
        format!(
            "{}---\n{}",
            queue("vcvgl", 10, "nominal: 160"),
            queue("vcvly", 1, "nominal: 16, borrowingLimit: 48")
        ),
    )
    .unwrap();
    let args = ["--trace", trace, "--gpus", "176", "-o", "json"];
    let (from_volcano, notes) =
        sim_json_with_notes(&[&args[..], &["--queues", volcano.to_str().unwrap()]].concat());
    assert!(
        notes.contains("volcano, not replayed: preemption and reclaim"),
        "{notes}"
    );
    let from_queues: Vec<Value> = serde_json::from_str(
        &sim_ok(&[&args[..], &["--queues", ferry.to_str().unwrap()]].concat())
            .replace("\"vcvGl\"", "\"vcvgl\"")
            .replace("\"vcvlY\"", "\"vcvly\""),
    )
    .unwrap();
    assert_same_figures(&from_volcano, &from_queues);
}

/// A Volcano queue tree (`spec.parent`, as `kubectl get queues -o yaml` exports it, the root
/// queue included) replays as a cohort tree: the leaf queue vcvgl in cohort `research`, the
/// parent queue, which owns the 40 GPUs it deserves beyond vcvgl's 120 and may borrow 8 more
/// (capability 168), and vcvly, owed the 16 GPUs no queue deserves, under the root. It replays
/// exactly as the same tree written as Ferry Cohort and Queue documents; the setup says which
/// tree was replayed and the table has a share row per cohort. A team sent to a parent queue
/// is refused before any replay.
#[test]
fn a_volcano_queue_tree_replays_as_a_cohort_tree() {
    let trace = repo_root().join("crates/sched/tests/data/helios_venus_2vc_2020-09b.csv");
    let trace = trace.to_str().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let queue = |name: &str, spec: &str| {
        format!(
            "apiVersion: scheduling.volcano.sh/v1beta1\nkind: Queue\nmetadata: {{name: \
             {name}}}\nspec: {spec}\n"
        )
    };
    let tree = [
        queue("root", "{weight: 1, reclaimable: false}"),
        queue(
            "research",
            "{parent: root, weight: 2, deserved: {nvidia.com/gpu: \"160\"}, capability: \
             {nvidia.com/gpu: \"168\"}}",
        ),
        queue(
            "vcvgl",
            "{parent: research, weight: 10, deserved: {nvidia.com/gpu: \"120\"}}",
        ),
        queue(
            "vcvly",
            "{parent: root, capability: {nvidia.com/gpu: \"64\"}}",
        ),
    ];
    let volcano = dir.path().join("volcano.yaml");
    std::fs::write(&volcano, tree.join("---\n")).unwrap();
    let doc = |kind: &str, name: &str, spec: &str| {
        format!(
            "apiVersion: ferry.dev/v1alpha1\nkind: {kind}\nmetadata: {{name: {name}}}\nspec: \
             {spec}\n"
        )
    };
    let never = "preemption: {withinQueue: Never, reclaimWithinCohort: Never}";
    let ferry = dir.path().join("ferry.yaml");
    std::fs::write(
        &ferry,
        [
            doc(
                "Cohort",
                "research",
                "{parent: root, weight: 2, quotas: [{flavor: any, nominal: 40, borrowingLimit: \
                 8}]}",
            ),
            doc(
                "Queue",
                "vcvgl",
                &format!(
                    "{{cohort: research, weight: 10, {never}, quotas: [{{flavor: any, nominal: \
                     120}}]}}"
                ),
            ),
            doc(
                "Queue",
                "vcvly",
                &format!(
                    "{{cohort: root, {never}, quotas: [{{flavor: any, nominal: 16, \
                     borrowingLimit: 48}}]}}"
                ),
            ),
        ]
        .join("---\n"),
    )
    .unwrap();
    let args = ["--trace", trace, "--gpus", "176"];
    let json = [&args[..], &["-o", "json"]].concat();
    let (from_volcano, notes) =
        sim_json_with_notes(&[&json[..], &["--queues", volcano.to_str().unwrap()]].concat());
    let described = "cohort trees replayed (ferry and kueue; the other policies share no \
                     quota): research (under root, 40 any GPU(s) of its own, borrows at most 8 \
                     any)";
    assert!(notes.contains(described), "{notes}");
    let (from_documents, notes) =
        sim_json_with_notes(&[&json[..], &["--queues", ferry.to_str().unwrap()]].concat());
    assert!(notes.contains(described), "{notes}");
    let from_documents: Vec<Value> = serde_json::from_str(
        &serde_json::to_string(&from_documents)
            .unwrap()
            .replace("\"vcvGl\"", "\"vcvgl\"")
            .replace("\"vcvlY\"", "\"vcvly\""),
    )
    .unwrap();
    assert_same_figures(&from_volcano, &from_documents);
    for (a, b) in from_volcano.iter().zip(&from_documents) {
        assert_eq!(a["cohort_share"], b["cohort_share"], "{}", a["policy"]);
    }
    let ferry_report = &from_volcano[0];
    for cohort in ["research", "root"] {
        assert!(
            ferry_report["cohort_share"][cohort].is_object(),
            "{cohort}: {ferry_report}"
        );
    }
    let table = sim_ok(&[&args[..], &["--queues", volcano.to_str().unwrap()]].concat());
    for row in ["share of cohort research", "share of cohort root"] {
        assert!(table.contains(row), "{row}: {table}");
    }

    // vcvly with a child queue is no leaf: its team's work has nowhere to run.
    let parent = dir.path().join("parent.yaml");
    std::fs::write(
        &parent,
        [tree.join("---\n"), queue("vcvly-dev", "{parent: vcvly}")].join("---\n"),
    )
    .unwrap();
    let out = sim(&["--trace", trace, "--queues", parent.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success()
            && err.contains(
                "trace team `vcvlY`: Queue/vcvly is a parent queue (Queue/vcvly-dev names it in \
                 spec.parent) and Volcano runs jobs only in leaf queues; fix: rename the team \
                 in the trace to a leaf queue under it (vcvly-dev)"
            ),
        "{err}"
    );
}

/// A trace's `priority` column replays with the cluster's own classes, read from what
/// `kubectl get priorityclasses -o yaml` prints: Ferry and Kueue preempt a lower class for
/// work of a higher one (unless it is `Never`), the Slurm peer orders by them as QOS, FIFO and
/// EASY by age; each class's figures come out per policy, and a class no one defined is
/// refused before any replay.
#[test]
fn a_traces_priority_classes_replay_with_the_clusters_own_classes() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("urgent.csv");
    std::fs::write(
        &trace,
        "job_id,submit_s,duration_s,gpus,nodes,team,status,priority\n\
         scav1,0,36000,8,1,a,COMPLETED,scavenger\n\
         scav2,0,72000,8,1,a,COMPLETED,scavenger\n\
         b3,50,3600,8,1,a,COMPLETED,\n\
         urgent,100,3600,8,1,a,COMPLETED,urgent\n",
    )
    .unwrap();
    let classes = dir.path().join("classes.yaml");
    let class = |name: &str, value: i64, extra: &str| {
        format!(
            "- apiVersion: scheduling.k8s.io/v1\n  kind: PriorityClass\n  metadata: {{name: \
             {name}}}\n  value: {value}\n{extra}"
        )
    };
    std::fs::write(
        &classes,
        format!(
            "apiVersion: v1\nkind: List\nitems:\n{}{}{}{}",
            class("system-node-critical", 2_000_001_000, ""),
            class("batch", 0, "  globalDefault: true\n"),
            class("urgent", 1000, "  preemptionPolicy: Never\n"),
            class("scavenger", -10, ""),
        ),
    )
    .unwrap();
    let (trace, classes) = (trace.to_str().unwrap(), classes.to_str().unwrap());
    let table = sim_ok(&[
        "--trace",
        trace,
        "--gpus",
        "16",
        "--priority-classes",
        classes,
    ]);
    assert!(
        table.contains("priority classes: urgent=1000 (never preempts)")
            && table.contains("3 of 4 jobs name one"),
        "{table}"
    );
    assert!(
        table.contains("skipped Kubernetes' own system-node-critical"),
        "{table}"
    );
    assert!(table.contains("mean wait urgent (s)"), "{table}");
    let (reports, _) = sim_json_with_notes(&[
        "--trace",
        trace,
        "--gpus",
        "16",
        "--priority-classes",
        classes,
        "-o",
        "json",
    ]);
    let report = |p: &str| {
        reports
            .iter()
            .find(|r| r["policy"] == p)
            .unwrap_or_else(|| panic!("{p}"))
    };
    let wait = |p: &str, class: &str| report(p)["classes"][class]["mean_wait_s"].as_f64().unwrap();
    // Ferry: the job of the default class (`batch`, read as `normal`) stops a scavenger; the
    // urgent one never preempts, so it takes the next free node, before the scavenger resumes.
    assert_eq!(report("ferry")["preemptions"], 1);
    assert_eq!(report("ferry")["classes"]["scavenger"]["preemptions"], 1);
    assert_eq!(report("ferry")["classes"]["urgent"]["value"], 1000);
    assert!(wait("ferry", "normal") <= 120.0);
    assert!(
        wait("ferry", "urgent") <= 3_700.0,
        "{}",
        wait("ferry", "urgent")
    );
    // Slurm's QOS puts the urgent job first at the first free node; FIFO and EASY do not.
    assert!(wait("slurm-multifactor", "urgent") < wait("fifo", "urgent"));
    assert!(wait("slurm-multifactor", "urgent") < wait("slurm-multifactor", "normal"));
    assert!(wait("easy-backfill", "urgent") > wait("easy-backfill", "normal"));
    for p in ["fifo", "easy-backfill", "slurm-multifactor"] {
        assert_eq!(report(p)["preemptions"], 0, "{p}");
    }
    // Without the file, `urgent` and `scavenger` are no class Ferry knows.
    let out = sim(&["--trace", trace, "--gpus", "16"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("job `scav1`: priority class `scavenger` is not defined (3 jobs")
            && err.contains("--priority-classes"),
        "{err}"
    );
}

/// Volcano's scheduler ConfigMap in the `--queues` file replays its actions: with `preempt` on,
/// a `high` job arriving while `low` jobs of its queue fill the cluster preempts one, and the
/// notes say which actions were read; with Volcano's default actions nothing preempts.
#[test]
fn volcano_scheduler_actions_turn_preemption_on() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("urgent.csv");
    std::fs::write(
        &trace,
        "job_id,submit_s,duration_s,gpus,nodes,team,status,priority\n\
         low1,0,36000,8,1,a,COMPLETED,low\n\
         low2,0,36000,8,1,a,COMPLETED,low\n\
         high,100,3600,8,1,a,COMPLETED,high\n",
    )
    .unwrap();
    let volcano = |actions: &str| {
        let path = dir.path().join(format!("volcano-{}.yaml", actions.len()));
        std::fs::write(
            &path,
            format!(
                "apiVersion: scheduling.volcano.sh/v1beta1\nkind: Queue\nmetadata: {{name: a}}\n\
                 spec: {{weight: 1}}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {{name: \
                 volcano-scheduler-configmap, namespace: volcano-system}}\ndata:\n  \
                 volcano-scheduler.conf: |\n    actions: \"{actions}\"\n    tiers:\n    - \
                 plugins:\n      - name: priority\n      - name: gang\n"
            ),
        )
        .unwrap();
        path
    };
    let run = |actions: &str| {
        let path = volcano(actions);
        let args = [
            "--trace",
            trace.to_str().unwrap(),
            "--gpus",
            "16",
            "-o",
            "json",
        ];
        let (reports, notes) =
            sim_json_with_notes(&[&args[..], &["--queues", path.to_str().unwrap()]].concat());
        let ferry = reports.iter().find(|r| r["policy"] == "ferry").unwrap();
        (ferry["preemptions"].as_u64().unwrap(), notes)
    };
    let (preemptions, notes) = run("enqueue, allocate, preempt, reclaim, backfill");
    assert!(preemptions > 0, "{notes}");
    assert!(
        notes.contains(
            "volcano: volcano-scheduler.conf actions \"enqueue, allocate, preempt, reclaim, \
             backfill\": preempt on"
        ),
        "{notes}"
    );
    assert!(!notes.contains("replayed off"), "{notes}");
    let (preemptions, notes) = run("enqueue, allocate, backfill");
    assert_eq!(preemptions, 0, "{notes}");
    assert!(notes.contains("preempt off"), "{notes}");
}

/// A Kueue cohort tree replays as one: `nlp` (4 GPUs of its own) sits in cohort `research`
/// under `org` (8 GPUs of its own), and research's borrowing limit is what nlp's two 4-GPU
/// jobs meet. Held to 0, the second waits for the first though GPUs are idle; at 4 both run at
/// once. The notes say which tree was replayed, and the same tree as Ferry `Cohort` documents
/// replays the same.
#[test]
fn a_kueue_cohort_tree_holds_a_queue_to_its_subtrees_limit() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("tree.csv");
    std::fs::write(
        &trace,
        "job_id,submit_s,duration_s,gpus,nodes,team,status\n\
         1,0,100,4,1,nlp,COMPLETED\n\
         2,0,100,4,1,nlp,COMPLETED\n\
         3,1000,100,1,1,serving,COMPLETED\n",
    )
    .unwrap();
    let kueue = |borrowing: u32| {
        let gpus = |nominal: u32, limits: &str| {
            format!(
                "resourceGroups: [{{coveredResources: [nvidia.com/gpu], flavors: [{{name: \
                 default-flavor, resources: [{{name: nvidia.com/gpu, nominalQuota: {nominal}{limits}}}]}}]}}]"
            )
        };
        let object = |kind: &str, name: &str, spec: String| {
            format!(
                "apiVersion: kueue.x-k8s.io/v1beta2\nkind: {kind}\nmetadata: {{name: {name}}}\n\
                 spec: {{{spec}}}\n"
            )
        };
        [
            object("ResourceFlavor", "default-flavor", String::new()),
            object("Cohort", "org", gpus(8, "")),
            object(
                "Cohort",
                "research",
                format!(
                    "parentName: org, {}",
                    gpus(0, &format!(", borrowingLimit: {borrowing}"))
                ),
            ),
            object(
                "ClusterQueue",
                "nlp",
                format!("cohortName: research, {}", gpus(4, "")),
            ),
            object(
                "ClusterQueue",
                "serving",
                format!("cohortName: org, {}", gpus(4, "")),
            ),
        ]
        .join("---\n")
    };
    let run = |name: &str, text: String| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        let args = [
            "--trace",
            trace.to_str().unwrap(),
            "--gpus",
            "16",
            "--queues",
            path.to_str().unwrap(),
            "-o",
            "json",
        ];
        sim_json_with_notes(&args)
    };
    let (held, notes) = run("held.yaml", kueue(0));
    let (free, _) = run("free.yaml", kueue(4));
    assert!(
        notes.contains(
            "cohort trees replayed (ferry and kueue; the other policies share no quota): org (8 \
             any GPU(s) of its own); research (under org, borrows at most 0 any)"
        ),
        "{notes}"
    );
    let mean = |reports: &[Value], policy: &str| {
        reports
            .iter()
            .find(|r| r["policy"] == policy)
            .and_then(|r| r["mean_jct_s"].as_f64())
            .unwrap_or_else(|| panic!("{policy}: {reports:?}"))
    };
    // nlp's jobs: 100 s and 200 s held to its own 4 GPUs, 100 s each borrowing 4 more; the
    // serving job runs 100 s either way.
    assert_eq!(mean(&held, "ferry"), (100.0 + 200.0 + 100.0) / 3.0);
    assert_eq!(mean(&free, "ferry"), 100.0);
    // FIFO shares no quota: the tree changes nothing there.
    assert_eq!(mean(&held, "fifo"), mean(&free, "fifo"));

    // Ferry's own documents for the same tree (Kueue's defaults preempt nothing; nothing here
    // needs to) replay the same.
    let ferry = |borrowing: u32| {
        let doc = |kind: &str, name: &str, spec: &str| {
            format!(
                "apiVersion: ferry.dev/v1alpha1\nkind: {kind}\nmetadata: {{name: {name}}}\nspec: {spec}\n"
            )
        };
        [
            doc("Cohort", "org", "{quotas: [{flavor: any, nominal: 8}]}"),
            doc(
                "Cohort",
                "research",
                &format!(
                    "{{parent: org, quotas: [{{flavor: any, nominal: 0, borrowingLimit: {borrowing}}}]}}"
                ),
            ),
            doc("Queue", "nlp", "{cohort: research, quotas: [{flavor: any, nominal: 4}]}"),
            doc("Queue", "serving", "{cohort: org, quotas: [{flavor: any, nominal: 4}]}"),
        ]
        .join("---\n")
    };
    let (documents, notes) = run("ferry.yaml", ferry(0));
    assert!(
        notes.contains("research (under org, borrows at most 0 any)"),
        "{notes}"
    );
    assert_same_figures(&held, &documents);
    let (documents, _) = run("ferry-free.yaml", ferry(4));
    assert_same_figures(&free, &documents);

    // A loop is refused before any replay, naming the Cohort.
    let looped = kueue(4).replace(
        "kind: Cohort\nmetadata: {name: org}\nspec: {",
        "kind: Cohort\nmetadata: {name: org}\nspec: {parentName: research, ",
    );
    let path = dir.path().join("loop.yaml");
    std::fs::write(&path, looped).unwrap();
    let out = sim(&[
        "--trace",
        trace.to_str().unwrap(),
        "--queues",
        path.to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success()
            && err.contains("Cohort/org: spec.parentName: Cohort `org` is its own ancestor"),
        "{err}"
    );
}
