//! Ferry vs FIFO and EASY backfill on two disjoint sets of traces:
//! `cargo run --release -p ferry-sched --example variants -- SET [TRACE.csv]`.
//!
//! * `tune`: the set the policy was tuned on — variants of the trace and generated traces with
//!   seeds 1–12 (job-size mixes Small / Mixed / Gangs, loads 0.8 / 1.0 / 1.3, 128 GPUs).
//! * `heldout`: never used while tuning — other variants and time windows of the trace, and
//!   generated traces with seeds 1001–1010 at other loads, cluster sizes and team counts.
//! * `wide`: a larger validation set, to judge a change on more than the tuning set's noise:
//!   40 random resamples of the trace (a random window of half to all of its submit span, a
//!   random half to all of its rows, 0.8–1.2× the default cluster) and 240 generated traces
//!   (seeds 2001–2040, loads 1.0 / 1.4, 64 / 128 / 256 GPUs, 2–6 teams).
//!
//! * `load`: the trace's arrivals replayed 1.25–10 times as fast on the cluster sized for it as
//!   given (`ferry sim --load`), and 20 of the `wide` resamples at twice their load: heavier
//!   demand than any trace above.
//! * `unseen`: give it `crates/sched/tests/data/helios_venus_2vc_2020-09b.csv`, the second half
//!   of the month, added after the policy was set and never used to choose anything: 1–10× its
//!   arrival rate, on its default cluster and on the teams' real virtual-cluster sizes.
//! * `shaped`: generated traces of another shape than every set above (`Shape::HeavyTailed`:
//!   log-normal run times up to a week, Zipf-like team volumes, sweeps of like jobs submitted
//!   at once; seeds 3001–3020, 3–20 teams, 128–512 GPUs, loads 1.0 / 1.4, 1,200 jobs), added
//!   after the policy was set (session 25), no trace file needed.
//! * `long`: give it the trace: 16 traces of 5,000–20,000 jobs drawn from its rows, shared by
//!   3–20 teams with Zipf-like volumes and arriving 2–6 times as often, on the default cluster
//!   (session 27): weeks of backlog, where what preemptions cost decides utilization.
//!
//! `FERRY_OPTS='{"durationWeight": 0}'` overrides Ferry's options (JSON, merged over the
//! defaults) for experiments, `SLURM_OPTS` the Slurm peer's; `ESTIMATES=limits:2` and
//! `PACE_AFTER=600` tell every policy run times as `ferry sim --estimates` / `--pace-after` do.
//! Prints one line per trace, the pass counts per comparison (and
//! `all five`: traces where Ferry wins all four and every team is in the band), the margins
//! behind them (geometric mean of Ferry's mean JCT over EASY's and the Slurm peer's, mean
//! utilization difference, median of the farthest team's distance from its entitlement), and
//! Ferry's out-of-band teams counted by main cause (`TeamShare::miss_cause`).
//! `BASELINE=FILE` (an earlier run's output on the same set) adds how many traces changed
//! their `all five` verdict each way and the sign test's p-value; `DIAG=1` prints
//! each of those teams with its breakdown, `DETAIL=1` the tables and a coarse timeline,
//! `JOBS=DIR` each trace's jobs under every policy (`ferry sim --jobs` columns) to
//! `DIR/<trace name>.csv`, for reading one job's fate (with `ONLY=` to pick the trace).
mod common;

use std::path::Path;

use ferry_sched::{
    Cluster, GenSpec, Knowledge, MissCause, Options, Policy, QueueSpec, Shape, SimReport, SizeMix,
    TraceJob, cluster_with_gpus, default_cluster, default_queues, generated_trace,
    simulate_knowing, with_load,
};

struct Case {
    name: String,
    group: &'static str,
    trace: Vec<TraceJob>,
    cluster: Option<Cluster>,
    /// Queues other than the default (GPU-hour) quotas.
    queues: Option<Vec<QueueSpec>>,
}

/// Causes of a team's miss, in the order `causes` counts them.
const CAUSES: [MissCause; 10] = MissCause::ALL;

#[derive(Default, Clone, Copy)]
struct Verdict {
    /// Ferry's out-of-band teams by dominant cause (see `cause`).
    causes: [usize; CAUSES.len()],
    jct_fifo: bool,
    jct_easy: bool,
    util_fifo: bool,
    util_easy: bool,
    /// Ferry ends at the shortest makespan any policy could reach (`SimReport::bound`): its
    /// utilization is the ceiling, which a peer can at most tie.
    util_ceiling: bool,
    /// Ferry's mean JCT equals FIFO's and EASY's (a lost comparison nothing could win: the
    /// schedules end every job at the same time).
    jct_tie: [bool; 2],
    /// `None`: no all-saturated window long enough to judge.
    fair: Option<bool>,
    /// The same check for EASY backfill (for context: whether the band is held at all).
    fair_easy: Option<bool>,
    /// The lowest team's `quota_kept` under Ferry, FIFO and EASY.
    kept: [f64; 3],
    /// Against Slurm's multifactor priority with backfill: mean JCT, utilization, and
    /// whether its teams are in the band.
    jct_slurm: bool,
    util_slurm: bool,
    fair_slurm: Option<bool>,
    /// Margins, not verdicts: Ferry's mean JCT over EASY's and over the Slurm peer's.
    jct_ratio: [f64; 2],
    /// Ferry's utilization minus EASY's and minus the Slurm peer's.
    util_gain: [f64; 2],
    /// The farthest team's |share / entitlement − 1| under Ferry, EASY and the Slurm peer
    /// (`None` where that policy's shares were not judged).
    worst_gap: [Option<f64>; 3],
}

impl Verdict {
    /// Bar 2 as one trace asks it: every comparison with FIFO and EASY won and every team in
    /// the band (`all five`).
    fn all_five(&self) -> bool {
        self.jct_fifo
            && self.jct_easy
            && self.util_fifo
            && self.util_easy
            && self.fair == Some(true)
    }

    /// Why a trace misses `all five`, or that it does not: whether any comparison with FIFO
    /// or EASY is strictly lost (not a tie of equal mean JCTs, nor a utilization at the
    /// ceiling a peer can only equal), else whether a team is out of the band, else whether
    /// only ties and an unjudged band stand in the way.
    fn miss(&self) -> Miss {
        let jct_lost = (!self.jct_fifo && !self.jct_tie[0]) || (!self.jct_easy && !self.jct_tie[1]);
        let util_lost = !(self.util_ceiling || (self.util_fifo && self.util_easy));
        if jct_lost || util_lost {
            Miss::Loss
        } else if self.fair == Some(false) {
            Miss::Fairness
        } else if self.all_five() {
            Miss::None
        } else {
            Miss::Unjudgeable
        }
    }
}

/// The reason a trace misses `all five` (`Verdict::miss`), from the hardest to the softest.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Miss {
    /// Every comparison won and every team in the band.
    None,
    /// Only ties no policy could win, or shares with no all-saturated window to judge them.
    Unjudgeable,
    /// Every comparison won or tied, a team out of the band.
    Fairness,
    /// A comparison with FIFO or EASY strictly lost.
    Loss,
}

/// What every policy is told about run times: `ESTIMATES=limits:2` (`ferry sim --estimates`)
/// and `PACE_AFTER=SECONDS` (`--pace-after`); exact when unset.
fn knowledge() -> Knowledge {
    Knowledge {
        estimates: std::env::var("ESTIMATES")
            .map_or_else(|_| Default::default(), |e| e.parse().expect("ESTIMATES")),
        pace_after_s: std::env::var("PACE_AFTER")
            .ok()
            .map(|p| p.parse().expect("PACE_AFTER is whole seconds")),
        ..Knowledge::exact()
    }
}

/// `opts`: Ferry's options, then the Slurm peer's.
fn run(case: &Case, opts: &[Options; 2]) -> (Verdict, String) {
    let cluster = case
        .cluster
        .clone()
        .unwrap_or_else(|| default_cluster(&case.trace));
    let queues = case
        .queues
        .clone()
        .unwrap_or_else(|| default_queues(&case.trace, &cluster));
    // FERRY_LAYOUT=single: Ferry's switches on one global queue (isolates the quota effects).
    let layout = if std::env::var("FERRY_LAYOUT").is_ok_and(|l| l == "single") {
        Policy::EasyBackfill
    } else {
        Policy::Ferry
    };
    let know = knowledge();
    let mut f = simulate_knowing(
        &case.trace,
        &cluster,
        &queues,
        layout,
        opts[0].clone(),
        know,
    )
    .expect("simulates");
    f.policy = "ferry".into();
    let r: Vec<SimReport> = [Policy::Fifo, Policy::EasyBackfill, Policy::SlurmMultifactor]
        .iter()
        .map(|p| {
            let o = match p {
                Policy::SlurmMultifactor => opts[1].clone(),
                _ => p.options(),
            };
            simulate_knowing(&case.trace, &cluster, &queues, *p, o, know).expect("simulates")
        })
        .collect();
    let (fifo, easy, slurm) = (&r[0], &r[1], &r[2]);
    if let Ok(dir) = std::env::var("JOBS") {
        let file: String = case
            .name
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .collect();
        std::fs::write(
            format!("{dir}/{file}.csv"),
            ferry_sched::render_jobs_csv(&[f.clone(), fifo.clone(), easy.clone()]),
        )
        .expect("writes jobs");
    }
    if std::env::var_os("DETAIL").is_some() {
        println!(
            "{}\n{}",
            case.name,
            ferry_sched::render_table(&[f.clone(), fifo.clone(), easy.clone()])
        );
        // Busy GPUs sampled every 4 hours, per policy.
        for r in [&f, fifo, easy] {
            let mut row = format!("{:<14}", r.policy);
            let end = r.timeline.last().map_or(0, |x| x.0);
            let mut t = r.timeline.first().map_or(0, |x| x.0);
            while t <= end {
                let busy = r
                    .timeline
                    .iter()
                    .rev()
                    .find(|x| x.0 <= t)
                    .map_or(0, |x| x.1);
                row.push_str(&format!(" {busy:>3}"));
                t += 14_400;
            }
            println!("{row}");
        }
    }
    let verdict = |r: &SimReport| {
        r.team_share
            .values()
            .map(|s| s.within_tolerance)
            .try_fold(true, |acc, w| w.map(|w| acc && w))
    };
    let (fair, fair_easy) = (verdict(&f), verdict(easy));
    let capacity = cluster.total_gpus() as f64;
    let mut causes = [0usize; CAUSES.len()];
    for (t, s) in &f.team_share {
        let Some(miss) = s.miss_cause else { continue };
        causes[CAUSES.iter().position(|&c| c == miss).expect("listed")] += 1;
        if std::env::var_os("DIAG").is_some() {
            let parts: Vec<String> = s
                .breakdown
                .contributions(s.ratio)
                .iter()
                .map(|(c, p)| format!("{} {p:+.2}", c.name()))
                .collect();
            println!(
                "DIAG {:<40} {t:<10} owed {:>5.1} GPUs ratio {:.2} sat {:>6.1} h  {:<19} {}",
                case.name,
                s.entitlement * capacity,
                s.ratio,
                f.saturated_s as f64 / 3600.0,
                miss.name(),
                parts.join(" ")
            );
        }
    }
    let v = Verdict {
        causes,
        jct_fifo: f.mean_jct_s < fifo.mean_jct_s,
        jct_easy: f.mean_jct_s < easy.mean_jct_s,
        jct_tie: [fifo, easy].map(|r| f.mean_jct_s == r.mean_jct_s),
        util_fifo: f.utilization > fifo.utilization,
        util_easy: f.utilization > easy.utilization,
        util_ceiling: f
            .bound
            .as_ref()
            .is_some_and(|b| f.makespan_s <= b.makespan_s),
        fair,
        fair_easy,
        kept: [&f, fifo, easy].map(|r| {
            r.team_share
                .values()
                .map(|s| s.quota_kept)
                .fold(1.0, f64::min)
        }),
        jct_slurm: f.mean_jct_s < slurm.mean_jct_s,
        util_slurm: f.utilization > slurm.utilization,
        fair_slurm: verdict(slurm),
        jct_ratio: [easy, slurm].map(|r| f.mean_jct_s / r.mean_jct_s.max(1.0)),
        util_gain: [easy, slurm].map(|r| f.utilization - r.utilization),
        worst_gap: [&f, easy, slurm].map(|r| {
            verdict(r)?;
            Some(
                r.team_share
                    .values()
                    .map(|s| (s.ratio - 1.0).abs())
                    .fold(0.0, f64::max),
            )
        }),
    };
    // Why a team is out of the band: most of its GPU-hours come in jobs larger than the GPUs it
    // is owed ("lumpy": it can hold its share only on average, through drains), or not.
    let lumpy = |team: &str, entitled: f64| {
        let (mut big, mut all) = (0.0, 0.0);
        for j in case.trace.iter().filter(|j| j.team == team) {
            let w = f64::from(j.gpus) * j.duration_s as f64;
            all += w;
            if f64::from(j.gpus) > entitled * capacity {
                big += w;
            }
        }
        all > 0.0 && big / all >= 0.5
    };
    let shares: Vec<String> = f
        .team_share
        .iter()
        .map(|(t, s)| {
            let why = match s.within_tolerance {
                Some(false) if lumpy(t, s.entitlement) => " OUT(lumpy)",
                Some(false) => " OUT",
                _ => "",
            };
            format!(
                "{t}:{:.3}/{:.3}={:.2}{why}",
                s.share, s.entitlement, s.ratio
            )
        })
        .collect();
    let line = format!(
        "{:<36} jct {:>8.0} {:>8.0} {:>8.0} {:>8.0} util {:.3} {:.3} {:.3} {:.3} ceil {:.3} pre {:>4} lost {:>6.1} sat {:>7} kept {:.3} {:.3} {:.3} {}{}{}{}{}{}{} {} [{}]",
        case.name,
        f.mean_jct_s,
        fifo.mean_jct_s,
        easy.mean_jct_s,
        slurm.mean_jct_s,
        f.utilization,
        fifo.utilization,
        easy.utilization,
        slurm.utilization,
        f.bound.as_ref().map_or(f64::NAN, |b| b.utilization),
        f.preemptions,
        f.lost_gpu_hours,
        f.saturated_s,
        v.kept[0],
        v.kept[1],
        v.kept[2],
        if v.jct_fifo { "" } else { "JCT<FIFO-LOSE " },
        if v.jct_easy { "" } else { "JCT<EASY-LOSE " },
        if v.util_fifo { "" } else { "U>FIFO-LOSE " },
        if v.util_easy { "" } else { "U>EASY-LOSE " },
        if v.jct_slurm { "" } else { "JCT<SLURM-LOSE " },
        if v.util_slurm { "" } else { "U>SLURM-LOSE " },
        if v.util_ceiling { "U@CEILING " } else { "" },
        match v.fair {
            Some(true) => "fair-ok",
            Some(false) => "FAIR-OUT",
            None => "fair-n/a",
        },
        shares.join(" ")
    );
    (v, line)
}

fn helios_tune(trace: &[TraceJob], out: &mut Vec<Case>) {
    let mut add = |name: &str, t: Vec<TraceJob>, c: Option<Cluster>| {
        out.push(Case {
            name: format!("helios {name}"),
            group: "helios",
            trace: t,
            cluster: c,
            queues: None,
        })
    };
    add("original", trace.to_vec(), None);
    let half = trace.len() / 2;
    add("first half", trace[..half].to_vec(), None);
    add("second half", trace[half..].to_vec(), None);
    add("submit x0.7", scale_submit(trace, 7, 10), None);
    add("team split in three", split_team(trace, 3), None);
    let odd: Vec<TraceJob> = trace.iter().step_by(2).cloned().collect();
    add("every other row", odd, None);
    add(
        "original, 256 GPUs",
        trace.to_vec(),
        Some(cluster_with_gpus(256)),
    );
    add(
        "original, 136 GPUs",
        trace.to_vec(),
        Some(cluster_with_gpus(136)),
    );
}

fn helios_heldout(trace: &[TraceJob], out: &mut Vec<Case>) {
    let mut add = |name: String, t: Vec<TraceJob>, c: Option<Cluster>| {
        out.push(Case {
            name: format!("helios {name}"),
            group: "helios",
            trace: t,
            cluster: c,
            queues: None,
        })
    };
    // Time windows: four quarters of the submit span, and two overlapping middle windows.
    let span = trace.iter().map(|j| j.submit_s).max().unwrap_or(0) + 1;
    let window = |lo: u64, hi: u64| -> Vec<TraceJob> {
        trace
            .iter()
            .filter(|j| j.submit_s >= lo && j.submit_s < hi)
            .cloned()
            .collect()
    };
    for k in 0..4 {
        add(
            format!("window q{}", k + 1),
            window(span * k / 4, span * (k + 1) / 4),
            None,
        );
    }
    add(
        "window middle half".into(),
        window(span / 4, span * 3 / 4),
        None,
    );
    add("window 1/3..1".into(), window(span / 3, span), None);
    // Row subsets other than the tuning set's every-other-row.
    let thirds: Vec<TraceJob> = trace
        .iter()
        .enumerate()
        .filter(|(i, _)| i % 3 != 1)
        .map(|(_, j)| j.clone())
        .collect();
    add("two rows in three".into(), thirds, None);
    add("submit x0.85".into(), scale_submit(trace, 85, 100), None);
    add("submit x1.25".into(), scale_submit(trace, 125, 100), None);
    add("team split in two".into(), split_team(trace, 2), None);
    add(
        "original, 160 GPUs".into(),
        trace.to_vec(),
        Some(cluster_with_gpus(160)),
    );
    add(
        "original, 200 GPUs".into(),
        trace.to_vec(),
        Some(cluster_with_gpus(200)),
    );
}

fn helios_wide(trace: &[TraceJob], out: &mut Vec<Case>) {
    let span = trace.iter().map(|j| j.submit_s).max().unwrap_or(0) + 1;
    for k in 0..40u64 {
        let mut rng = fastrand::Rng::with_seed(7000 + k);
        let len = 0.5 + 0.5 * rng.f64();
        let lo = (rng.f64() * (1.0 - len) * span as f64) as u64;
        let hi = lo + (len * span as f64) as u64;
        let keep = 0.5 + 0.5 * rng.f64();
        let t: Vec<TraceJob> = trace
            .iter()
            .filter(|j| j.submit_s >= lo && j.submit_s < hi)
            .filter(|_| rng.f64() < keep)
            .cloned()
            .collect();
        let size = 0.8 + 0.4 * rng.f64();
        let gpus = (default_cluster(&t).total_gpus() as f64 * size / 8.0).round() as u32 * 8;
        let largest = t.iter().map(|j| j.gpus).max().unwrap_or(8);
        out.push(Case {
            name: format!("helios resample {k} x{size:.2}"),
            group: "helios",
            trace: t,
            cluster: Some(cluster_with_gpus(gpus.max(largest))),
            queues: None,
        });
    }
}

/// The `load` set: the trace and 20 of its resamples with arrivals sped up, clusters unchanged.
fn helios_load(trace: &[TraceJob], out: &mut Vec<Case>) {
    let cluster = default_cluster(trace);
    for load in [1.25, 1.5, 2.0, 3.0, 5.0, 10.0] {
        out.push(Case {
            name: format!("helios load {load}"),
            group: "helios",
            trace: with_load(trace, load),
            cluster: Some(cluster.clone()),
            queues: None,
        });
    }
    let mut resamples = Vec::new();
    helios_wide(trace, &mut resamples);
    for c in resamples.into_iter().take(20) {
        out.push(Case {
            name: format!("{} load 2", c.name),
            trace: with_load(&c.trace, 2.0),
            ..c
        });
    }
}

/// The `unseen` set: a real window kept out of every tuning decision
/// (`tests/data/helios_venus_2vc_2020-09b.csv`), on its default contended cluster and on the
/// virtual-cluster sizes Venus gave these teams that month (vcvGl 160 GPUs, vcvlY 16), as given
/// and with arrivals sped up.
fn helios_unseen(trace: &[TraceJob], out: &mut Vec<Case>) {
    let venus = cluster_with_gpus(176);
    let vc = |name: &str, nominal: u32| QueueSpec::any_flavor(name, Some("venus"), nominal);
    let vcs = vec![vc("vcvGl", 160), vc("vcvlY", 16)];
    // As `ferry sim --load`: the cluster sized for the trace as given.
    let sized = default_cluster(trace);
    for load in [1.0, 1.5, 2.0, 3.0, 5.0, 10.0] {
        let t = with_load(trace, load);
        out.push(Case {
            name: format!("unseen load {load}"),
            group: "helios",
            trace: t.clone(),
            cluster: Some(sized.clone()),
            queues: None,
        });
        out.push(Case {
            name: format!("unseen VC sizes load {load}"),
            group: "helios",
            trace: t,
            cluster: Some(venus.clone()),
            queues: Some(vcs.clone()),
        });
    }
}

/// The `long` set: 16 traces of 5,000–20,000 jobs drawn with replacement from the trace's
/// rows (run time, GPUs, nodes), each given to one of 3–20 teams with Zipf-like volumes, and
/// submitted 2–6 times as often as the trace's own jobs, on the default contended cluster:
/// weeks of backlog under teams that all run the real job mix, a regime no other set reaches.
fn helios_long(trace: &[TraceJob], out: &mut Vec<Case>) {
    let span = trace.iter().map(|j| j.submit_s).max().unwrap_or(0) + 1;
    let gap = span as f64 / trace.len().max(1) as f64;
    for seed in 1..=16u64 {
        let mut rng = fastrand::Rng::with_seed(8000 + seed);
        let jobs = [5_000, 10_000, 20_000][rng.usize(..3)];
        let teams = [3, 5, 8, 12, 20][rng.usize(..5)];
        let density = [2.0, 4.0, 6.0][rng.usize(..3)];
        let alpha = [0.8, 1.2, 2.0][rng.usize(..3)];
        let mut at = 0.0;
        let t: Vec<TraceJob> = (0..jobs)
            .map(|i| {
                at += -(1.0 - rng.f64()).ln() * gap / density;
                // Pareto draw: team 0 the largest, each next one rarer.
                let rank = (1.0 - rng.f64()).powf(-1.0 / alpha) as usize;
                TraceJob {
                    job_id: format!("{i}"),
                    submit_s: at as u64,
                    team: format!("team{}", rank.clamp(1, teams) - 1),
                    ..trace[rng.usize(..trace.len())].clone()
                }
            })
            .collect();
        out.push(Case {
            name: format!("long s{seed} {jobs} jobs {teams} teams x{density}"),
            group: "helios",
            trace: t,
            cluster: None,
            queues: None,
        });
    }
}

fn scale_submit(trace: &[TraceJob], num: u64, den: u64) -> Vec<TraceJob> {
    trace
        .iter()
        .map(|j| TraceJob {
            submit_s: j.submit_s * num / den,
            ..j.clone()
        })
        .collect()
}

fn split_team(trace: &[TraceJob], parts: usize) -> Vec<TraceJob> {
    trace
        .iter()
        .enumerate()
        .map(|(i, j)| {
            let mut j = j.clone();
            if j.team == trace[0].team {
                j.team = format!("{}-{}", j.team, i % parts);
            }
            j
        })
        .collect()
}

const MIXES: [SizeMix; 3] = [SizeMix::Small, SizeMix::Mixed, SizeMix::Gangs];

fn group(m: SizeMix) -> &'static str {
    match m {
        SizeMix::Small => "gen-small",
        SizeMix::Mixed => "gen-mixed",
        SizeMix::Gangs => "gen-gangs",
    }
}

fn generated(set: &str, out: &mut Vec<Case>) {
    if set == "tune" {
        for seed in 1..=12u64 {
            for mix in MIXES {
                for load in [0.8, 1.0, 1.3] {
                    let spec = GenSpec {
                        seed,
                        jobs: 600,
                        teams: 2 + (seed as usize % 4),
                        gpus: 128,
                        load,
                        mix,
                        shape: Default::default(),
                    };
                    out.push(Case {
                        name: format!("gen s{seed} {mix:?} load {load}"),
                        group: group(mix),
                        trace: generated_trace(&spec),
                        cluster: Some(cluster_with_gpus(128)),
                        queues: None,
                    });
                }
            }
        }
    } else if set == "wide" {
        spread(2001..=2040, &[1.0, 1.4], Shape::Uniform, out);
    } else if set == "shaped" {
        spread(3001..=3020, &[1.0, 1.4], Shape::HeavyTailed, out);
    } else {
        spread(1001..=1010, &[0.9, 1.15, 1.5], Shape::Uniform, out);
    }
}

/// Generated traces for the held-out, wide and shaped sets: each seed picks a cluster size (64,
/// 128 or 256 GPUs; 128, 256 or 512 when heavy-tailed) and 2–6 teams (3, 6, 12 or 20, 1,200
/// jobs when heavy-tailed; else 500 jobs); every mix at every load.
fn spread(seeds: std::ops::RangeInclusive<u64>, loads: &[f64], shape: Shape, out: &mut Vec<Case>) {
    let heavy = shape == Shape::HeavyTailed;
    for seed in seeds {
        let s = seed as usize;
        let (gpus, teams, jobs) = if heavy {
            ([128, 256, 512][s % 3], [3, 6, 12, 20][s % 4], 1200)
        } else {
            ([64, 128, 256][s % 3], 2 + s % 5, 500)
        };
        for mix in MIXES {
            for &load in loads {
                let spec = GenSpec {
                    seed,
                    jobs,
                    teams,
                    gpus,
                    load,
                    mix,
                    shape,
                };
                out.push(Case {
                    name: format!("gen s{seed} {mix:?} load {load} {gpus} GPUs"),
                    group: group(mix),
                    trace: generated_trace(&spec),
                    cluster: Some(cluster_with_gpus(gpus)),
                    queues: None,
                });
            }
        }
    }
}

/// `base` with the JSON object in environment variable `var` merged over it.
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let set = args.get(1).map_or("tune", String::as_str);
    if ![
        "tune", "heldout", "wide", "load", "unseen", "shaped", "long",
    ]
    .contains(&set)
    {
        return Err("usage: variants tune|heldout|wide|load|unseen|shaped|long [TRACE.csv]".into());
    }
    if ["load", "unseen", "long"].contains(&set) && args.get(2).is_none() {
        return Err(
            format!("the {set} set is built from a trace: variants {set} TRACE.csv").into(),
        );
    }
    let opts = [
        common::overridden(Options::default(), "FERRY_OPTS")?,
        common::overridden(Policy::SlurmMultifactor.options(), "SLURM_OPTS")?,
    ];
    let mut cases = Vec::new();
    if let Some(path) = args.get(2).filter(|_| set != "shaped") {
        let trace = ferry_sched::read_trace(Path::new(path))?;
        if set == "tune" {
            helios_tune(&trace, &mut cases);
        } else if set == "load" {
            helios_load(&trace, &mut cases);
        } else if set == "unseen" {
            helios_unseen(&trace, &mut cases);
        } else if set == "long" {
            helios_long(&trace, &mut cases);
        } else if set == "wide" {
            helios_wide(&trace, &mut cases);
        } else {
            helios_heldout(&trace, &mut cases);
        }
    }
    if !["load", "unseen", "long"].contains(&set) {
        generated(set, &mut cases);
    }
    if let Ok(only) = std::env::var("ONLY") {
        // A trailing `$` asks for the exact name ("helios resample 1$").
        match only.strip_suffix('$') {
            Some(exact) => cases.retain(|c| c.name == exact),
            None => cases.retain(|c| c.name.contains(&only)),
        }
    }
    let threads = std::env::var("THREADS")
        .ok()
        .and_then(|t| t.parse().ok())
        .unwrap_or(2usize)
        .max(1);
    let mut results: Vec<Option<(Verdict, String)>> = vec![None; cases.len()];
    std::thread::scope(|s| {
        let chunks: Vec<_> = results
            .chunks_mut(cases.len().div_ceil(threads).max(1))
            .collect();
        let mut start = 0;
        for chunk in chunks {
            let (cases, opts) = (&cases, &opts);
            let lo = start;
            start += chunk.len();
            s.spawn(move || {
                for (k, slot) in chunk.iter_mut().enumerate() {
                    *slot = Some(run(&cases[lo + k], opts));
                }
            });
        }
    });
    let mut groups: Vec<&str> = Vec::new();
    for c in &cases {
        if !groups.contains(&c.group) {
            groups.push(c.group);
        }
    }
    for (c, r) in cases.iter().zip(&results) {
        println!("{}", r.as_ref().expect("ran").1);
        let _ = c;
    }
    // Each group's verdicts, trace by trace, and with several groups the whole set's (`all`).
    let mut rows: Vec<(&str, Vec<Verdict>)> = groups
        .iter()
        .map(|&g| {
            let vs = cases
                .iter()
                .zip(&results)
                .filter(|(c, _)| c.group == g)
                .map(|(_, r)| r.as_ref().expect("ran").0)
                .collect();
            (g, vs)
        })
        .collect();
    if rows.len() > 1 {
        let all = rows.iter().flat_map(|(_, vs)| vs.iter().copied()).collect();
        rows.push(("all", all));
    }
    println!(
        "{:<10} {:>6} {:>10} {:>10} {:>10} {:>10} {:>14} {:>20} {:>8} {:>12}",
        "set",
        "traces",
        "JCT<FIFO",
        "JCT<EASY",
        "U>FIFO",
        "U>EASY",
        "fair ok/OUT/na",
        "EASY fair ok/OUT/na",
        "all five",
        "U@ceiling"
    );
    for (g, vs) in &rows {
        let n = vs.len();
        let count = |f: &dyn Fn(&Verdict) -> bool| vs.iter().filter(|v| f(v)).count();
        println!(
            "{g:<10} {n:>6} {:>10} {:>10} {:>10} {:>10} {:>6}/{}/{} {:>14}/{}/{} {:>8} {:>12}",
            count(&|v| v.jct_fifo),
            count(&|v| v.jct_easy),
            count(&|v| v.util_fifo),
            count(&|v| v.util_easy),
            count(&|v| v.fair == Some(true)),
            count(&|v| v.fair == Some(false)),
            count(&|v| v.fair.is_none()),
            count(&|v| v.fair_easy == Some(true)),
            count(&|v| v.fair_easy == Some(false)),
            count(&|v| v.fair_easy.is_none()),
            count(&|v| v.all_five()),
            // Utilization comparisons not won although Ferry ends at the shortest possible
            // makespan: the trace's tail, not the policy, sets them.
            count(&|v| v.util_ceiling && !(v.util_fifo && v.util_easy)),
        );
    }
    // What stands between each trace and `all five`: a strict loss, the band alone, or only
    // what no policy can win (equal mean JCTs, a utilization at the ceiling, no window to judge
    // shares in).
    println!(
        "{:<10} {:>6} {:>9} {:>18} {:>14} {:>12}",
        "set", "traces", "all five", "only ties or n/a", "only the band", "a loss"
    );
    for (g, vs) in &rows {
        let count = |m: Miss| vs.iter().filter(|v| v.miss() == m).count();
        println!(
            "{g:<10} {:>6} {:>9} {:>18} {:>14} {:>12}",
            vs.len(),
            count(Miss::None),
            count(Miss::Unjudgeable),
            count(Miss::Fairness),
            count(Miss::Loss),
        );
    }
    // Against Slurm's multifactor priority (age + fair-share) with backfill, the peer the
    // bar's "Slurm-style backfill" names most closely: `all seven` is `all five` and both.
    println!(
        "{:<10} {:>6} {:>10} {:>10} {:>20} {:>10}",
        "set", "traces", "JCT<SLURM", "U>SLURM", "SLURM fair ok/OUT/na", "all seven"
    );
    for (g, vs) in &rows {
        let count = |f: &dyn Fn(&Verdict) -> bool| vs.iter().filter(|v| f(v)).count();
        println!(
            "{g:<10} {:>6} {:>10} {:>10} {:>14}/{}/{} {:>10}",
            vs.len(),
            count(&|v| v.jct_slurm),
            count(&|v| v.util_slurm),
            count(&|v| v.fair_slurm == Some(true)),
            count(&|v| v.fair_slurm == Some(false)),
            count(&|v| v.fair_slurm.is_none()),
            count(&|v| v.all_five() && v.jct_slurm && v.util_slurm),
        );
    }
    // The lowest team's share of the GPU-time owed within its nominal quota that it got, over
    // the whole replay (`TeamShare::quota_kept`).
    println!(
        "{:<10} {:>6} {:>22} {:>14} {:>14}",
        "set", "traces", "quota kept ferry/fifo/easy", ">= EASY", ">= FIFO"
    );
    for (g, vs) in &rows {
        let n = vs.len();
        let mean = |k: usize| vs.iter().map(|v| v.kept[k]).sum::<f64>() / n.max(1) as f64;
        println!(
            "{g:<10} {n:>6} {:>8.3}/{:.3}/{:.3} {:>14} {:>14}",
            mean(0),
            mean(1),
            mean(2),
            vs.iter().filter(|v| v.kept[0] >= v.kept[2]).count(),
            vs.iter().filter(|v| v.kept[0] >= v.kept[1]).count(),
        );
    }
    // Margins: how far, not only whether. A verdict flips on a trace that a change moves by a
    // hair, so two policies are compared better by these and by `BASELINE`'s sign test.
    println!(
        "{:<10} {:>6} {:>16} {:>16} {:>18} {:>32}",
        "set",
        "traces",
        "JCT/EASY geomean",
        "JCT/SLURM gmean",
        "U-EASY / U-SLURM",
        "worst band gap p50 ferry/easy/slurm"
    );
    for (g, vs) in &rows {
        let n = vs.len().max(1) as f64;
        let gmean = |k: usize| (vs.iter().map(|v| v.jct_ratio[k].ln()).sum::<f64>() / n).exp();
        let gain = |k: usize| vs.iter().map(|v| v.util_gain[k]).sum::<f64>() / n;
        let median = |k: usize| {
            let mut x: Vec<f64> = vs.iter().filter_map(|v| v.worst_gap[k]).collect();
            x.sort_by(f64::total_cmp);
            median_of(&x).map_or_else(|| "n/a".to_string(), |m| format!("{m:.3}"))
        };
        println!(
            "{g:<10} {:>6} {:>16.3} {:>16.3} {:>+9.4}/{:<+8.4} {:>14}/{}/{}",
            vs.len(),
            gmean(0),
            gmean(1),
            gain(0),
            gain(1),
            median(0),
            median(1),
            median(2),
        );
    }
    if let Ok(path) = std::env::var("BASELINE") {
        let now: Vec<(&str, bool)> = cases
            .iter()
            .zip(&results)
            .map(|(c, r)| (c.name.as_str(), r.as_ref().expect("ran").0.all_five()))
            .collect();
        println!(
            "{}",
            against_baseline(&std::fs::read_to_string(&path)?, &now)
        );
    }
    let total = |k: usize| {
        results
            .iter()
            .map(|r| r.as_ref().expect("ran").0.causes[k])
            .sum::<usize>()
    };
    println!(
        "OUT teams by cause: {}",
        CAUSES
            .iter()
            .enumerate()
            .map(|(k, c)| format!("{} {}", c.name(), total(k)))
            .collect::<Vec<_>>()
            .join(", ")
    );
    Ok(())
}

/// The median of sorted values (the mean of the middle two for an even count).
fn median_of(sorted: &[f64]) -> Option<f64> {
    let n = sorted.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(sorted[n / 2]),
        _ => Some((sorted[n / 2 - 1] + sorted[n / 2]) / 2.0),
    }
}

/// `BASELINE=FILE`: the traces whose `all five` verdict changed against an earlier run's
/// output, and the two-sided sign test's p-value for that many going one way (a change that
/// moves as many traces down as up is noise, however the counts end).
fn against_baseline(before: &str, now: &[(&str, bool)]) -> String {
    let (mut up, mut down) = (0u32, 0u32);
    for line in before.lines() {
        let Some((name, rest)) = line.split_once(" jct ") else {
            continue;
        };
        // A line passes `all five` when it names no lost FIFO or EASY comparison and its teams
        // are in the band (the tags `run` writes).
        let passed = [
            "JCT<FIFO-LOSE",
            "JCT<EASY-LOSE",
            "U>FIFO-LOSE",
            "U>EASY-LOSE",
        ]
        .iter()
        .all(|t| !rest.contains(t))
            && rest.contains(" fair-ok [");
        match now.iter().find(|(n, _)| *n == name.trim_end()) {
            Some((_, true)) if !passed => up += 1,
            Some((_, false)) if passed => down += 1,
            _ => {}
        }
    }
    let n = up + down;
    // P(X <= min) for X ~ Binomial(n, 1/2), doubled.
    let (mut pmf, mut tail) = (0.5f64.powi(n as i32), 0.0);
    for k in 0..=up.min(down) {
        tail += pmf;
        pmf *= f64::from(n - k) / f64::from(k + 1);
    }
    format!(
        "all five against BASELINE: {up} traces now pass that did not, {down} fail that passed; \
         sign test p = {:.3}",
        (2.0 * tail).min(1.0)
    )
}

#[cfg(test)]
mod tests {
    use super::{against_baseline, median_of};

    #[test]
    fn the_median_of_an_even_count_is_the_mean_of_the_middle_two() {
        assert_eq!(median_of(&[]), None);
        assert_eq!(median_of(&[0.1, 0.3, 0.9]), Some(0.3));
        let even = median_of(&[0.1, 0.2, 0.4, 0.9]).expect("four values");
        assert!((even - 0.3).abs() < 1e-12, "{even}");
    }

    /// Two lines as `run` writes them: one passing `all five`, one losing a comparison.
    const BEFORE: &str = "\
gen s1 Small load 1.0                jct      100      200      150      160 util 0.9 0.8 0.8 0.8 ceil 0.9 pre 0 lost 0.0 sat 9000 kept 1.000 1.000 1.000  fair-ok [a:0.5/0.5=1.00]
gen s2 Small load 1.0                jct      100      200       90      160 util 0.9 0.8 0.8 0.8 ceil 0.9 pre 0 lost 0.0 sat 9000 kept 1.000 1.000 1.000 JCT<EASY-LOSE  fair-ok [a:0.5/0.5=1.00]
set        traces
";

    #[test]
    fn the_baseline_comparison_counts_verdicts_that_changed_each_way() {
        let now = |s1: bool, s2: bool| {
            against_baseline(
                BEFORE,
                &[("gen s1 Small load 1.0", s1), ("gen s2 Small load 1.0", s2)],
            )
        };
        let flipped = now(false, true);
        assert!(
            flipped.contains(" 1 traces now pass that did not, 1 fail")
                && flipped.ends_with("p = 1.000"),
            "{flipped}"
        );
        let same = now(true, false);
        assert!(
            same.contains(" 0 traces now pass that did not, 0 fail"),
            "{same}"
        );
    }

    #[test]
    fn the_sign_test_is_the_binomial_tail_doubled() {
        // Ten traces up and none down: 2 × 0.5^10.
        let lines: String = (0..10)
            .map(|i| format!("t{i} jct 1 util 0 JCT<EASY-LOSE  fair-ok [a:1/1=1.00]\n"))
            .collect();
        let names: Vec<String> = (0..10).map(|i| format!("t{i}")).collect();
        let now: Vec<(&str, bool)> = names.iter().map(|n| (n.as_str(), true)).collect();
        let r = against_baseline(&lines, &now);
        assert!(
            r.contains("10 traces now pass") && r.ends_with("p = 0.002"),
            "{r}"
        );
        // Six up and four down is no evidence: P(X <= 4) for n = 10 is 386/1024, doubled.
        let mixed: String = (0..10)
            .map(|i| {
                let lost = if i < 4 { "" } else { "JCT<EASY-LOSE " };
                format!("t{i} jct 1 util 0 {lost} fair-ok [a:1/1=1.00]\n")
            })
            .collect();
        let now: Vec<(&str, bool)> = names
            .iter()
            .enumerate()
            .map(|(i, n)| (n.as_str(), i >= 4))
            .collect();
        let r = against_baseline(&mixed, &now);
        assert!(
            r.contains("6 traces now pass") && r.ends_with("p = 0.754"),
            "{r}"
        );
    }
}
