//! Trace simulator: replays a job trace in virtual time through the same `Scheduler`,
//! under Ferry's policy and under baselines built from the same code (FIFO, EASY backfill).

mod bound;
mod check;
mod estimate;
mod generate;
mod miss;
mod placement;
mod pods;
mod render;
mod setup;
mod trace;

pub use bound::{MakespanBound, MakespanLimit, makespan_bound};
pub use check::check_replayable;
pub use estimate::{Estimates, Knowledge};
pub use generate::{GenSpec, Shape, SizeMix, generated_trace};
pub use miss::{MissCause, ShareBreakdown};
pub use render::{JOB_COLUMNS, render_jobs_csv, render_svg, render_table};
pub use setup::{
    DEFAULT_FLAVOR, DEFAULT_GPUS_PER_NODE, cluster_with_gpus, default_cluster, default_queues,
    describe_cohorts, describe_setup, entitlements, offered_load, requiring_one_rack, with_load,
    with_racks,
};
pub use trace::{
    MAX_DURATION_S, MAX_SECONDS, MAX_TRACE_ROWS, TRACE_COLUMNS, TraceJob, parse_trace, read_trace,
};

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap, VecDeque};

use serde::{Deserialize, Serialize};

use crate::config::{
    Cluster, CohortSpec, DEFAULT_PRIORITY, Decision, FlavorQuota, Multifactor, Options,
    PriorityClass, QueueSpec, StopPolicy, Time, Workload,
};
use crate::error::Result;
use crate::scheduler::{CYCLES_PER_INSTANT, FORECAST_CYCLES, Scheduler, stretched, unstretched};
use placement::GangLayouts;
use pods::PodLayer;
use trace::trace_err;

/// How often a running job checkpoints in the simulation (lost work on preemption is since then).
pub const CHECKPOINT_EVERY_S: u64 = 1800;

/// Grace period between SIGTERM and the victim's exit; the engine writes a checkpoint in it.
pub const GRACE_S: u64 = 60;

/// Time a resumed job spends reloading its checkpoint before it makes progress again.
pub const RESUME_OVERHEAD_S: u64 = 300;

/// Which policy a simulation runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Policy {
    /// Ferry: team queues, quota + borrowing, fair sharing, reservation + backfill, preemption.
    Ferry,
    /// One global queue, strict first-come first-served: the head blocks everything.
    Fifo,
    /// One global queue by age (Slurm-style priority), EASY backfill around one reservation.
    EasyBackfill,
    /// Kueue-style: team queues with quota and borrowing, StrictFIFO per queue, preemption
    /// (priority and reclaim), no reservation or backfill.
    KueueStrict,
    /// `KueueStrict` as Kueue runs without topology-aware scheduling: admission by quota
    /// alone, then a kube-scheduler places the pods one at a time, spreading them; a gang runs
    /// once all its pods are placed, and is evicted and requeued (`waitForPodsReady`) when
    /// they are not within 5 minutes.
    KueuePods,
    /// Slurm's multifactor priority (age + classic fair-share, each team's shares its nominal
    /// quota) with backfill around the top job's reservation; no quotas, no preemption.
    SlurmMultifactor,
}

impl Policy {
    /// Every policy, Ferry first.
    pub const ALL: [Policy; 6] = [
        Policy::Ferry,
        Policy::Fifo,
        Policy::EasyBackfill,
        Policy::KueueStrict,
        Policy::KueuePods,
        Policy::SlurmMultifactor,
    ];

    /// Stable name used in tables and JSON.
    pub fn name(self) -> &'static str {
        match self {
            Policy::Ferry => "ferry",
            Policy::Fifo => "fifo",
            Policy::EasyBackfill => "easy-backfill",
            Policy::KueueStrict => "kueue-strict",
            Policy::KueuePods => "kueue-pods",
            Policy::SlurmMultifactor => "slurm-multifactor",
        }
    }

    /// The scheduler switches this policy runs with (`Options::default()` for Ferry).
    pub fn options(self) -> Options {
        match self {
            Policy::Ferry => Options::default(),
            Policy::Fifo => Options {
                backfill: false,
                strict_fifo: true,
                preemption: false,
                fair_sharing: false,
                duration_weight: 0,
                critical_path_pct: 0,
                ..Options::default()
            },
            Policy::EasyBackfill => Options {
                backfill: true,
                strict_fifo: false,
                preemption: false,
                fair_sharing: false,
                duration_weight: 0,
                critical_path_pct: 0,
                ..Options::default()
            },
            Policy::KueueStrict | Policy::KueuePods => Options {
                backfill: false,
                strict_fifo: true,
                preemption: true,
                fair_sharing: true,
                lend_reserved_nodes: false,
                duration_weight: 0,
                reclaim_patience_s: 0,
                critical_path_pct: 0,
                fair_preemption: false,
                hold_for_owed: false,
                deficit_half_life_s: 0,
                ..Options::default()
            },
            Policy::SlurmMultifactor => Options {
                multifactor: Some(Multifactor::default()),
                ..Policy::EasyBackfill.options()
            },
        }
    }
}

/// Completion statistics of one job-size bucket.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub struct BucketStats {
    /// Bucket label, e.g. `9-16`.
    pub gpus: String,
    /// Jobs in it.
    pub jobs: usize,
    /// Mean job completion time (submit to end), seconds.
    pub mean_jct_s: f64,
    /// Median JCT.
    pub p50_jct_s: f64,
    /// 99th percentile JCT.
    pub p99_jct_s: f64,
    /// Mean queueing delay (time not running), seconds.
    pub mean_wait_s: f64,
}

/// How one priority class's jobs fared (`SimReport::classes`): whether urgent work got
/// through, and what the work it passed paid.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub struct ClassStats {
    /// The class's value (higher goes first).
    pub value: i32,
    /// Jobs of the class.
    pub jobs: usize,
    /// Mean job completion time (submit to end), seconds.
    pub mean_jct_s: f64,
    /// 99th percentile JCT.
    pub p99_jct_s: f64,
    /// Mean queueing delay (time not running), seconds.
    pub mean_wait_s: f64,
    /// 99th percentile queueing delay.
    pub p99_wait_s: f64,
    /// Times its jobs were preempted.
    pub preemptions: u64,
}

/// Largest relative gap between a team's share and its entitlement that counts as fair (10%).
pub const FAIRNESS_TOLERANCE: f64 = 0.10;

/// Shortest all-saturated time (seconds) over which shares are judged; a shorter window is
/// reported as not measurable rather than as pass or fail.
pub const MIN_SATURATED_S: u64 = 3600;

/// A team's share of used GPU time while every team was saturated, against its entitlement.
///
/// A team is *saturated* while it has work waiting and its running plus waiting GPUs are at
/// least its entitlement times the cluster's GPUs. Over the time every team is saturated, its
/// *share* is its busy GPU-seconds over all teams' busy GPU-seconds; its *entitlement* is
/// `entitlements()` (nominal quota, plus a weighted part of any GPUs no quota covers, over the
/// cluster).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub struct TeamShare {
    /// Fraction of busy GPU-seconds the team got while all teams were saturated.
    pub share: f64,
    /// Fraction of the cluster the team is owed when all teams are saturated.
    pub entitlement: f64,
    /// `share / entitlement` (1.0 is exact).
    pub ratio: f64,
    /// Whether `ratio` is within `FAIRNESS_TOLERANCE` of 1; `None` when all teams were saturated
    /// together for less than `MIN_SATURATED_S`.
    pub within_tolerance: Option<bool>,
    /// Over the whole replay, not only while every team is saturated: the part of the
    /// GPU-time owed within the team's nominal quota that it got. Owed, at each moment, is
    /// what it runs plus what it waits for, capped at its nominal quota, while its smallest
    /// waiting job fits in what is left of that quota (a waiting job larger than that cannot
    /// be owed within quota). 1.0 means the quota was honoured whenever the team asked.
    pub quota_kept: f64,
    /// Why the share differs from the entitlement (diagnosis only, not serialized).
    #[serde(skip)]
    pub breakdown: ShareBreakdown,
    /// For a team out of the band: the situation that explains most of its gap.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub miss_cause: Option<MissCause>,
}

/// A cohort's share of a tree (a department: every team under it) against the sum of its
/// teams' entitlements, over the same all-saturated time as the teams'.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub struct CohortShare {
    /// Fraction of busy GPU-seconds its teams got while all teams were saturated.
    pub share: f64,
    /// The sum of its teams' entitlements.
    pub entitlement: f64,
    /// `share / entitlement` (1.0 is exact).
    pub ratio: f64,
    /// Whether `ratio` is within `FAIRNESS_TOLERANCE` of 1; `None` when not judged.
    pub within_tolerance: Option<bool>,
    /// The teams under it that ran jobs.
    pub teams: Vec<String>,
}

/// Each cohort of a tree (`cohorts` given) with the share of the teams under it, from their
/// `team_share`s; empty without a tree.
pub fn cohort_shares(
    team_share: &BTreeMap<String, TeamShare>,
    queues: &[QueueSpec],
    cohorts: &[CohortSpec],
) -> BTreeMap<String, CohortShare> {
    if cohorts.is_empty() {
        return BTreeMap::new();
    }
    let parent = |c: &str| {
        cohorts
            .iter()
            .find(|x| x.name == c)
            .and_then(|x| x.parent.as_deref())
    };
    let mut out: BTreeMap<String, CohortShare> = BTreeMap::new();
    for q in queues {
        let (Some(first), Some(t)) = (q.cohort.as_deref(), team_share.get(&q.name)) else {
            continue;
        };
        // Up the tree (a loop, refused before any replay, would stop at its length).
        let mut at = Some(first);
        for _ in 0..=cohorts.len() {
            let Some(c) = at else { break };
            let e = out.entry(c.to_owned()).or_insert_with(|| CohortShare {
                share: 0.0,
                entitlement: 0.0,
                ratio: 0.0,
                within_tolerance: t.within_tolerance.map(|_| true),
                teams: Vec::new(),
            });
            e.share += t.share;
            e.entitlement += t.entitlement;
            e.teams.push(q.name.clone());
            at = parent(c);
        }
    }
    for c in out.values_mut() {
        c.ratio = if c.entitlement > 0.0 {
            c.share / c.entitlement
        } else {
            0.0
        };
        c.within_tolerance = c
            .within_tolerance
            .map(|_| (c.ratio - 1.0).abs() <= FAIRNESS_TOLERANCE);
    }
    out
}

/// The outcome of one simulated policy.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub struct SimReport {
    /// Policy name.
    pub policy: String,
    /// Useful GPU-seconds over (GPUs x makespan).
    pub utilization: f64,
    /// Useful busy GPU-seconds between the first and the last submit over (GPUs x that span):
    /// the steady state, without the drain at the end that `utilization` includes.
    pub utilization_in_window: f64,
    /// Busy GPUs over capacity, averaged over the time some job was waiting.
    pub utilization_while_waiting: f64,
    /// Mean job completion time, seconds.
    pub mean_jct_s: f64,
    /// Median JCT.
    pub p50_jct_s: f64,
    /// 99th percentile JCT.
    pub p99_jct_s: f64,
    /// Mean queueing delay.
    pub mean_wait_s: f64,
    /// Per size bucket.
    pub buckets: Vec<BucketStats>,
    /// Preemptions issued.
    pub preemptions: u64,
    /// GPU-hours of work lost to preemption (since the victims' last checkpoints).
    pub lost_gpu_hours: f64,
    /// Where gangs landed, and GPUs held by gangs admitted before they could be placed.
    #[serde(default)]
    pub placement: PlacementStats,
    /// Team → share vs entitlement while all teams were saturated (each had work waiting).
    pub team_share: BTreeMap<String, TeamShare>,
    /// Cohort of a tree → the share of the teams under it (`cohort_shares`); empty without one.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub cohort_share: BTreeMap<String, CohortShare>,
    /// Priority class → how its jobs fared; empty when no trace row names a class.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub classes: BTreeMap<String, ClassStats>,
    /// Team → mean job completion time of its jobs, seconds.
    #[serde(default)]
    pub team_mean_jct_s: BTreeMap<String, f64>,
    /// Seconds all teams were saturated together.
    pub saturated_s: u64,
    /// What every policy was told about run times (`ferry sim --estimates`, `--pace-after`).
    #[serde(default)]
    pub knowledge: Knowledge,
    /// First submit to last completion, seconds.
    pub makespan_s: u64,
    /// The makespan no policy can beat on this trace and cluster (the same for every
    /// policy): `utilization` can be at most its `utilization`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bound: Option<MakespanBound>,
    /// How well the policy told waiting jobs when they would start (`Scheduler::expected_starts`).
    #[serde(default)]
    pub start_estimates: StartEstimates,
    /// How well every waiting job's forecast start held (`Probes::forecast`; absent when not
    /// asked).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forecast: Option<ForecastAccuracy>,
    /// Busy GPUs over time: (time, busy GPUs) at each change.
    pub timeline: Vec<(Time, u64)>,
    /// What happened to each job, in trace order (`ferry sim --jobs`; not in the JSON report,
    /// which stays one small object per policy).
    #[serde(skip)]
    pub jobs: Vec<JobOutcome>,
}

/// Where gangs landed, and what admitting them before they could be placed cost.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub struct PlacementStats {
    /// Starts of jobs with more than one pod.
    pub gang_starts: u64,
    /// Of those, how many ran on the fewest nodes their pods fit on.
    pub on_fewest_nodes: u64,
    /// Of those, how many one rack could have held (by its GPUs); `None` when no node has a
    /// rack label.
    pub one_rack_fits: Option<u64>,
    /// Of those one rack could have held, how many were split across racks.
    pub split_across_racks: Option<u64>,
    /// Admissions whose pods could not all be placed at once (quota-only admission).
    pub admitted_unplaced: u64,
    /// GPU-hours admitted to workloads whose pods were not all placed: the placed pods' GPUs
    /// idle, the rest of the quota unusable by anyone else.
    pub admitted_idle_gpu_hours: f64,
    /// Workloads evicted and requeued because their pods were not all running within Kueue's
    /// `waitForPodsReady` timeout.
    pub pods_ready_timeouts: u64,
}

/// How close the start the scheduler first told a job first in line for GPUs came to when it
/// started (the first estimate, not a later corrected one: what a user planned around).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub struct StartEstimates {
    /// Jobs told a start time.
    pub told: u64,
    /// Of those, started within 5 minutes of it.
    pub within_5_min: u64,
    /// Of those, started more than 5 minutes later than told.
    pub later: u64,
    /// Median of |started − told|, seconds.
    pub p50_error_s: f64,
    /// 90th percentile of |started − told|, seconds.
    pub p90_error_s: f64,
}

/// Measurements a simulation takes only when asked, because they cost more than the replay
/// itself (`ferry sim --forecast`); the scheduler decides the same with or without them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Probes {
    /// Forecast every start when a job arrives and has to wait (`Scheduler::forecast`), and
    /// compare with when it started (`SimReport::forecast`).
    pub forecast: bool,
}

/// How close the start `Scheduler::forecast` told each job that had to wait when it arrived
/// came to when it started: new arrivals, preemptions' grace periods and work lost to them
/// are what the forecast cannot know.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub struct ForecastAccuracy {
    /// Jobs that had to wait when they arrived (each was forecast once, then).
    pub waited: u64,
    /// Those told a start (the others waited behind work without an expected end, or beyond
    /// `FORECAST_CYCLES`), and how it held.
    #[serde(flatten)]
    pub starts: StartEstimates,
}

/// One job's fate under one policy: lets a user compare their own jobs across policies.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobOutcome {
    /// The trace's `job_id`.
    pub job_id: String,
    /// The trace's `team`.
    pub team: String,
    /// Its priority class (`normal` when the trace names none), whether or not the policy
    /// heeds it.
    pub class: String,
    /// GPUs the job asked for.
    pub gpus: u64,
    /// When it was submitted.
    pub submit_s: Time,
    /// When it first started.
    pub first_start_s: Time,
    /// When it completed.
    pub end_s: Time,
    /// Seconds it waited in all (completion minus submit minus its run time).
    pub wait_s: u64,
    /// How many times it was preempted.
    pub preemptions: u32,
}

impl JobOutcome {
    /// Job completion time: submit to completion.
    pub fn jct_s(&self) -> u64 {
        self.end_s - self.submit_s
    }
}

/// One thing the replay does at an instant, in the order the scheduler decided it.
enum Step {
    /// Job `.0` starts, one pod on each of nodes `.1` (indices into the cluster's nodes).
    Run(usize, Vec<usize>),
    /// Job `.0` is told to stop.
    Stop(usize),
}

/// The cluster as quota-only admission sees it: one one-GPU node per GPU, so that only the
/// quota and the count of GPUs can keep a job out.
fn quota_view(cluster: &Cluster) -> Cluster {
    Cluster {
        nodes: cluster
            .nodes
            .iter()
            .flat_map(|n| {
                (0..n.gpus).map(move |g| crate::config::Node {
                    name: format!("{}/{g}", n.name),
                    gpus: 1,
                    flavor: n.flavor.clone(),
                    rack: None,
                    nvlink_domain: None,
                })
            })
            .collect(),
    }
}

struct SimJob {
    team: usize,
    gpus: u64,
    submit: Time,
    remaining: u64,
    duration: u64,
    start: Option<Time>,
    first_start: Option<Time>,
    preemptions: u32,
    epoch: u64,
    end: Option<Time>,
    /// Told to stop (SIGTERM) and not yet gone: no longer running for the scheduler.
    signalled: bool,
    /// How much longer (percent) its current run takes for being split across racks.
    slow_pct: u32,
}

impl SimJob {
    /// Wall-clock seconds its remaining work takes at its current run's pace.
    fn wall(&self) -> u64 {
        stretched(self.remaining, self.slow_pct)
    }

    /// Work (at the unsplit pace) done in `elapsed` wall-clock seconds of its current run.
    fn work_in(&self, elapsed: u64) -> u64 {
        unstretched(elapsed, self.slow_pct)
    }
}

fn pct(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i]
}

const BUCKETS: [(u32, u32, &str); 9] = [
    (1, 1, "1"),
    (2, 2, "2"),
    (3, 4, "3-4"),
    (5, 8, "5-8"),
    (9, 16, "9-16"),
    (17, 32, "17-32"),
    (33, 64, "33-64"),
    (65, 128, "65-128"),
    (129, u32::MAX, ">128"),
];

/// `StartEstimates` of (told, started) pairs.
fn start_estimates(pairs: &[(Time, Time)]) -> StartEstimates {
    let mut errors: Vec<f64> = pairs.iter().map(|&(t, s)| t.abs_diff(s) as f64).collect();
    errors.sort_by(f64::total_cmp);
    StartEstimates {
        told: pairs.len() as u64,
        within_5_min: pairs.iter().filter(|&&(t, s)| t.abs_diff(s) <= 300).count() as u64,
        later: pairs.iter().filter(|&&(t, s)| s > t + 300).count() as u64,
        p50_error_s: pct(&errors, 0.5),
        p90_error_s: pct(&errors, 0.9),
    }
}

/// The single queue holding the whole cluster that the baselines run with.
fn whole_cluster_queue(cluster: &Cluster) -> QueueSpec {
    let mut caps: Vec<(String, u64)> = Vec::new();
    for n in &cluster.nodes {
        match caps.iter_mut().find(|(f, _)| *f == n.flavor) {
            Some((_, c)) => *c += u64::from(n.gpus),
            None => caps.push((n.flavor.clone(), u64::from(n.gpus))),
        }
    }
    QueueSpec {
        name: "all".into(),
        cohort: None,
        // Twice the flavor's GPUs: the quota never binds before the nodes do. At exactly the
        // cluster, a head short of GPUs would also be short of quota, and its quota
        // reservation would hold back every job, even on nodes it will never use (EASY lets
        // those run: docs/scheduler-lab.md, "A Slurm multifactor peer").
        quotas: caps
            .into_iter()
            .map(|(f, c)| FlavorQuota::unlimited(&f, (2 * c).min(u64::from(u32::MAX)) as u32))
            .collect(),
        fair_share_weight: 1.0,
        stop_policy: StopPolicy::None,
        preemption: Default::default(),
    }
}

/// Slurm accounts for the multifactor baseline: one queue per team that may use the whole
/// cluster (no limits), its fair-share weight (Slurm's shares) the team's nominal quota in
/// GPUs, at least one.
fn fair_share_accounts(queues: &[QueueSpec], cluster: &Cluster) -> Vec<QueueSpec> {
    let all = whole_cluster_queue(cluster);
    queues
        .iter()
        .map(|q| {
            let shares: u32 = q.quotas.iter().map(|x| x.nominal).sum();
            QueueSpec {
                name: q.name.clone(),
                fair_share_weight: f64::from(shares.max(1)) * q.fair_share_weight,
                ..all.clone()
            }
        })
        .collect()
}

/// What each team runs and has waiting, as the replay goes.
struct Teams {
    busy: Vec<u64>,
    pending: Vec<usize>,
    /// Sizes of each team's waiting jobs (GPUs → count), for the share breakdown.
    pend_sizes: Vec<BTreeMap<u64, usize>>,
    pending_total: usize,
}

impl Teams {
    fn new(n: usize) -> Teams {
        Teams {
            busy: vec![0; n],
            pending: vec![0; n],
            pend_sizes: vec![BTreeMap::new(); n],
            pending_total: 0,
        }
    }

    /// A job of `team` on `gpus` GPUs waits (submitted, or requeued after preemption).
    fn queued(&mut self, team: usize, gpus: u64) {
        self.pending[team] += gpus as usize;
        *self.pend_sizes[team].entry(gpus).or_default() += 1;
        self.pending_total += 1;
    }

    /// A waiting job of `team` started.
    fn started(&mut self, team: usize, gpus: u64) {
        self.busy[team] += gpus;
        self.pending[team] -= gpus as usize;
        if let Some(c) = self.pend_sizes[team].get_mut(&gpus) {
            *c -= 1;
            if *c == 0 {
                self.pend_sizes[team].remove(&gpus);
            }
        }
        self.pending_total -= 1;
    }
}

/// Shares measured while every team is saturated, and where each team's deviation came from.
struct Fairness {
    entitled: Vec<f64>,
    capacity: f64,
    /// Teams with at least one job in the trace (the others are never saturated).
    active: Vec<bool>,
    saturated_s: u64,
    sat_gpu_s: f64,
    team_sat_gpu_s: Vec<f64>,
    breakdown: Vec<ShareBreakdown>,
    /// Each team's nominal quota (GPUs, all flavors) and the GPU-seconds owed within it and
    /// got (`TeamShare::quota_kept`).
    nominal: Vec<u64>,
    owed_gpu_s: Vec<f64>,
    kept_gpu_s: Vec<f64>,
}

impl Fairness {
    fn new(entitled: Vec<f64>, capacity: f64, jobs: &[SimJob], queues: &[QueueSpec]) -> Fairness {
        let n = entitled.len();
        Fairness {
            nominal: queues
                .iter()
                .map(|q| q.quotas.iter().map(|x| u64::from(x.nominal)).sum())
                .collect(),
            owed_gpu_s: vec![0.0; n],
            kept_gpu_s: vec![0.0; n],
            active: (0..n).map(|q| jobs.iter().any(|j| j.team == q)).collect(),
            entitled,
            capacity,
            saturated_s: 0,
            sat_gpu_s: 0.0,
            team_sat_gpu_s: vec![0.0; n],
            breakdown: vec![ShareBreakdown::default(); n],
        }
    }

    /// A team is saturated when it has work waiting and asks for at least its entitled GPUs
    /// (running + waiting); this is whether every active team is.
    fn all_saturated(&self, teams: &Teams) -> bool {
        (0..self.entitled.len()).all(|q| {
            !self.active[q]
                || (teams.pending[q] > 0
                    && (teams.busy[q] + teams.pending[q] as u64) as f64
                        >= self.entitled[q] * self.capacity)
        })
    }

    /// Adds an interval of `dt` seconds to each team's owed and kept quota GPU-time.
    fn keep_quota(&mut self, teams: &Teams, dt: u64) {
        for q in 0..self.nominal.len() {
            let (busy, nominal) = (teams.busy[q], self.nominal[q]);
            let room = nominal.saturating_sub(busy);
            let fits = teams.pend_sizes[q]
                .keys()
                .next()
                .is_some_and(|&g| g <= room);
            let owed = if fits {
                (busy + teams.pending[q] as u64).min(nominal)
            } else {
                busy.min(nominal)
            };
            self.owed_gpu_s[q] += (owed * dt) as f64;
            self.kept_gpu_s[q] += (busy.min(owed) * dt) as f64;
        }
    }

    /// Adds an all-saturated interval of `dt` seconds with `busy` GPUs in use, attributing each
    /// team's deviation to its situation (`holder_teams`: teams holding a reservation).
    fn account(&mut self, teams: &Teams, busy: u64, dt: u64, holder_teams: &[usize]) {
        let (entitled, capacity) = (&self.entitled, self.capacity);
        let nteams = entitled.len();
        self.saturated_s += dt;
        self.sat_gpu_s += busy as f64 * dt as f64;
        for q in 0..nteams {
            self.team_sat_gpu_s[q] += teams.busy[q] as f64 * dt as f64;
        }
        let under = |q: usize| (teams.busy[q] as f64) < entitled[q] * busy as f64;
        let fits = |q: usize| {
            teams.pend_sizes[q]
                .keys()
                .next()
                .is_some_and(|&g| g as f64 <= entitled[q] * capacity - teams.busy[q] as f64)
        };
        for q in (0..nteams).filter(|&q| self.active[q]) {
            let d = (teams.busy[q] as f64 - entitled[q] * busy as f64) * dt as f64;
            let b = &mut self.breakdown[q];
            let smallest = teams.pend_sizes[q]
                .keys()
                .next()
                .copied()
                .unwrap_or(u64::MAX);
            if d < 0.0 {
                if !fits(q) {
                    b.lumpy_wait += d;
                } else if (capacity as u64).saturating_sub(busy) < smallest {
                    b.cluster_full += d;
                } else if holder_teams.iter().any(|&h| h != q) {
                    b.behind_reservation += d;
                } else {
                    b.fits_not_placed += d;
                }
            } else if teams.busy[q] as f64 <= entitled[q] * capacity {
                b.over_within_entitlement += d;
            } else if (0..nteams).any(|p| p != q && self.active[p] && under(p) && fits(p)) {
                b.over_while_owed_fits += d;
            } else {
                b.over_filling += d;
            }
        }
    }

    /// Each active team's share against its entitlement over the all-saturated time.
    fn shares(&self, queues: &[QueueSpec]) -> BTreeMap<String, TeamShare> {
        queues
            .iter()
            .enumerate()
            .filter(|(q, _)| self.active[*q])
            .map(|(q, spec)| {
                let share = if self.sat_gpu_s > 0.0 {
                    self.team_sat_gpu_s[q] / self.sat_gpu_s
                } else {
                    0.0
                };
                let entitlement = self.entitled[q];
                let ratio = if entitlement > 0.0 {
                    share / entitlement
                } else {
                    0.0
                };
                let mut t = TeamShare {
                    share,
                    entitlement,
                    ratio,
                    within_tolerance: (self.saturated_s >= MIN_SATURATED_S)
                        .then_some((ratio - 1.0).abs() <= FAIRNESS_TOLERANCE),
                    quota_kept: if self.owed_gpu_s[q] > 0.0 {
                        self.kept_gpu_s[q] / self.owed_gpu_s[q]
                    } else {
                        1.0
                    },
                    breakdown: self.breakdown[q],
                    miss_cause: None,
                };
                if t.within_tolerance == Some(false) {
                    t.miss_cause = Some(MissCause::of(&t, self.capacity, self.saturated_s));
                }
                (spec.name.clone(), t)
            })
            .collect()
    }
}

/// Every job's completion time (sorted), the summed waits, and the per-size-bucket rows.
fn completion_times(jobs: &[JobOutcome]) -> (Vec<f64>, f64, Vec<BucketStats>) {
    let mut jct: Vec<f64> = Vec::new();
    let mut wait = 0f64;
    let mut bucket_rows = Vec::new();
    for (lo, hi, label) in BUCKETS {
        let mut b: Vec<f64> = Vec::new();
        let mut bw = 0f64;
        for j in jobs
            .iter()
            .filter(|j| j.gpus >= u64::from(lo) && j.gpus <= u64::from(hi))
        {
            b.push(j.jct_s() as f64);
            bw += j.wait_s as f64;
        }
        if b.is_empty() {
            continue;
        }
        b.sort_by(f64::total_cmp);
        let n = b.len() as f64;
        bucket_rows.push(BucketStats {
            gpus: label.into(),
            jobs: b.len(),
            mean_jct_s: b.iter().sum::<f64>() / n,
            p50_jct_s: pct(&b, 0.5),
            p99_jct_s: pct(&b, 0.99),
            mean_wait_s: bw / n,
        });
        jct.extend(b);
        wait += bw;
    }
    jct.sort_by(f64::total_cmp);
    (jct, wait, bucket_rows)
}

/// How each priority class's jobs fared (`SimReport::classes`).
fn class_stats(jobs: &[JobOutcome], classes: &[PriorityClass]) -> BTreeMap<String, ClassStats> {
    let mut by_class: BTreeMap<&str, Vec<&JobOutcome>> = BTreeMap::new();
    for j in jobs {
        by_class.entry(j.class.as_str()).or_default().push(j);
    }
    by_class
        .into_iter()
        .map(|(name, js)| {
            let sorted = |f: fn(&JobOutcome) -> u64| {
                let mut v: Vec<f64> = js.iter().map(|j| f(j) as f64).collect();
                v.sort_by(f64::total_cmp);
                v
            };
            let (jct, wait) = (sorted(JobOutcome::jct_s), sorted(|j| j.wait_s));
            let n = js.len() as f64;
            let stats = ClassStats {
                value: classes
                    .iter()
                    .find(|c| c.name == name)
                    .map_or(0, |c| c.value),
                jobs: js.len(),
                mean_jct_s: jct.iter().sum::<f64>() / n,
                p99_jct_s: pct(&jct, 0.99),
                mean_wait_s: wait.iter().sum::<f64>() / n,
                p99_wait_s: pct(&wait, 0.99),
                preemptions: js.iter().map(|j| u64::from(j.preemptions)).sum(),
            };
            (name.to_string(), stats)
        })
        .collect()
}

/// Replays `trace` on `cluster` under `policy`. `queues` define teams' entitlements (and, for
/// Ferry, the real queues; every trace team needs a queue of the same name); the baselines run
/// one queue holding the whole cluster. Expected durations given to the scheduler are exact
/// (`simulate_knowing` for other estimates).
pub fn simulate(
    trace: &[TraceJob],
    cluster: &Cluster,
    queues: &[QueueSpec],
    policy: Policy,
) -> Result<SimReport> {
    simulate_with(trace, cluster, queues, policy, policy.options())
}

/// `simulate` with explicit scheduler switches (for policy experiments): `policy` decides the
/// queue layout (team queues for Ferry and Kueue, one global queue for the others) and the name.
pub fn simulate_with(
    trace: &[TraceJob],
    cluster: &Cluster,
    queues: &[QueueSpec],
    policy: Policy,
    options: Options,
) -> Result<SimReport> {
    simulate_knowing(trace, cluster, queues, policy, options, Knowledge::exact())
}

/// `simulate_with` where every policy is told run times as `knowledge` says (jobs still run
/// their trace durations): how much of a comparison survives the estimates a real cluster has.
pub fn simulate_knowing(
    trace: &[TraceJob],
    cluster: &Cluster,
    queues: &[QueueSpec],
    policy: Policy,
    options: Options,
    knowledge: Knowledge,
) -> Result<SimReport> {
    let classes = PriorityClass::standard();
    simulate_probing(
        trace,
        Site {
            cluster,
            queues,
            cohorts: &[],
            classes: &classes,
        },
        policy,
        options,
        knowledge,
        Probes::default(),
    )
}

/// What a trace is replayed on: the cluster, the team queues and the priority classes its
/// jobs name (`TraceJob::priority`), as a cluster's `PriorityClass`es are to its pods.
#[derive(Debug, Clone, Copy)]
pub struct Site<'a> {
    /// Nodes and their GPUs.
    pub cluster: &'a Cluster,
    /// One queue per trace team (entitlements; Ferry's and Kueue's real queues).
    pub queues: &'a [QueueSpec],
    /// Cohorts of a cohort tree the queues are in (Ferry's and Kueue's; none: flat cohorts).
    pub cohorts: &'a [CohortSpec],
    /// Every class a trace row may name; a row without one is `normal` (`DEFAULT_PRIORITY`).
    pub classes: &'a [PriorityClass],
}

/// Whether `policy` orders work by the jobs' priority classes: Ferry and Kueue (within a
/// queue, and preempting for them), the Slurm peer (a QOS factor); FIFO and EASY order by age
/// alone.
pub fn heeds_priorities(policy: Policy) -> bool {
    !matches!(policy, Policy::Fifo | Policy::EasyBackfill)
}

/// `simulate_knowing` on a `site` with priority classes, that also takes the costlier
/// measurements `probes` asks for (what the scheduler does is the same either way).
pub fn simulate_probing(
    trace: &[TraceJob],
    site: Site<'_>,
    policy: Policy,
    options: Options,
    knowledge: Knowledge,
    probes: Probes,
) -> Result<SimReport> {
    let Site {
        cluster,
        queues,
        cohorts,
        classes,
    } = site;
    if knowledge.estimates == Estimates::Trace && trace.iter().all(|t| t.time_limit_s.is_none()) {
        return Err(trace_err(
            "<trace>",
            1,
            "no job has a `time_limit_s` (the run-time estimates asked for)",
            "add a time_limit_s column (seconds; empty or UNLIMITED for none), or tell the \
             policies `limits` or `none` instead",
        ));
    }
    check_replayable(trace, site, "<trace>")?;
    let team_idx: HashMap<&str, usize> = queues
        .iter()
        .enumerate()
        .map(|(i, q)| (q.name.as_str(), i))
        .collect();
    let team_queues = matches!(
        policy,
        Policy::Ferry | Policy::KueueStrict | Policy::KueuePods
    );
    let sched_queues = match policy {
        _ if team_queues => queues.to_vec(),
        Policy::SlurmMultifactor => fair_share_accounts(queues, cluster),
        _ => vec![whole_cluster_queue(cluster)],
    };
    // Quota-only admission: the scheduler sees one-GPU nodes and one-GPU pods, so only
    // quota and the GPU count bind; the pod layer places the real pods on the real nodes.
    let quota_only = policy == Policy::KueuePods;
    let mut pod_layer = quota_only.then(|| PodLayer::new(cluster));
    let sched_cluster = if quota_only {
        quota_view(cluster)
    } else {
        cluster.clone()
    };
    let tree = if team_queues { cohorts } else { &[] };
    let mut sched =
        Scheduler::with_cohorts(sched_cluster, sched_queues, tree, classes.to_vec(), options)?;
    let mut layouts = GangLayouts::new(cluster);
    // Workloads evicted for pods not ready in time: (admissible again at, job, evicted at).
    let mut requeues: BinaryHeap<Reverse<(Time, usize, Time)>> = BinaryHeap::new();
    let mut admitted_idle_gpu_s = 0f64;
    let mut pods_ready_timeouts = 0u64;
    let mut order: Vec<usize> = (0..trace.len()).collect();
    order.sort_by_key(|&i| (trace[i].submit_s, i));
    let mut jobs: Vec<SimJob> = Vec::with_capacity(trace.len());
    for t in trace {
        jobs.push(SimJob {
            team: team_idx[t.team.as_str()],
            gpus: u64::from(t.gpus),
            submit: t.submit_s,
            remaining: t.duration_s,
            duration: t.duration_s,
            start: None,
            first_start: None,
            preemptions: 0,
            epoch: 0,
            end: None,
            signalled: false,
            slow_pct: 0,
        });
    }
    let ids: HashMap<String, usize> = trace
        .iter()
        .enumerate()
        .map(|(i, _)| (format!("{i}"), i))
        .collect();
    let capacity = cluster.total_gpus() as f64;
    let mut completions: BinaryHeap<Reverse<(Time, usize, u64)>> = BinaryHeap::new();
    let mut evictions: BinaryHeap<Reverse<(Time, usize)>> = BinaryHeap::new();
    // When a running job's true remaining time becomes known (its run's epoch).
    let mut corrections: BinaryHeap<Reverse<(Time, usize, u64)>> = BinaryHeap::new();
    let correct_after = knowledge.corrects();
    let mut next = 0usize;
    let mut now: Time = trace.iter().map(|t| t.submit_s).min().unwrap_or(0);
    let t0 = now;
    let mut busy: u64 = 0;
    let mut teams = Teams::new(queues.len());
    let mut fair = Fairness::new(
        entitlements(queues, cohorts, cluster),
        capacity,
        &jobs,
        queues,
    );
    let mut waiting_busy = 0f64;
    let last_submit = trace.iter().map(|t| t.submit_s).max().unwrap_or(0);
    let mut window_busy = 0f64;
    let mut waiting_s = 0u64;
    let mut timeline = vec![(now, 0u64)];
    let mut preemptions = 0u64;
    let mut lost_gpu_s = 0f64;
    // The start each job was first told when it first stood first in line.
    let mut told: HashMap<usize, Time> = HashMap::new();
    let mut start_errors: Vec<(Time, Time)> = Vec::new();
    // The start the forecast told each job that had to wait when it arrived (`Probes`).
    let mut arrived: Vec<usize> = Vec::new();
    let mut forecast_waited = 0u64;
    let mut forecast_told: HashMap<usize, Time> = HashMap::new();
    let mut forecast_errors: Vec<(Time, Time)> = Vec::new();
    let mut running: Vec<usize> = Vec::new();
    loop {
        // Handle everything at `now`.
        while let Some(&Reverse((t, i, epoch))) = completions.peek() {
            if t > now {
                break;
            }
            completions.pop();
            if jobs[i].epoch != epoch || jobs[i].end.is_some() {
                continue;
            }
            jobs[i].end = Some(t);
            if let Some(l) = pod_layer.as_mut() {
                l.release(i);
            }
            busy -= jobs[i].gpus;
            teams.busy[jobs[i].team] -= jobs[i].gpus;
            running.retain(|&r| r != i);
            sched.finished(&format!("{i}"))?;
        }
        while let Some(&Reverse((t, i))) = evictions.peek() {
            if t > now {
                break;
            }
            evictions.pop();
            if jobs[i].end.is_some() {
                continue;
            }
            let id = format!("{i}");
            sched.checkpointed(&id, t)?;
            sched.evicted(&id)?;
            if let Some(l) = pod_layer.as_mut() {
                l.release(i);
            }
            let j = &mut jobs[i];
            j.start = None;
            busy -= j.gpus;
            teams.busy[j.team] -= j.gpus;
            teams.queued(j.team, j.gpus);
            running.retain(|&r| r != i);
        }
        while let Some(&Reverse((t, i, epoch))) = corrections.peek() {
            if t > now {
                break;
            }
            corrections.pop();
            // Only the run it was set for, while the job still runs for the scheduler.
            let j = &jobs[i];
            if let Some(s) = j.start
                && j.epoch == epoch
                && j.end.is_none()
                && !j.signalled
            {
                sched.progress(&format!("{i}"), now, (s + j.wall()).saturating_sub(now))?;
            }
        }
        if let Some(l) = pod_layer.as_mut() {
            for (i, backoff) in l.timed_out(now) {
                // Kueue evicts the workload, releasing its quota, and requeues it ordered by
                // the eviction's time once the backoff is over.
                sched.finished(&format!("{i}"))?;
                requeues.push(Reverse((now + backoff, i, now)));
                pods_ready_timeouts += 1;
            }
        }
        let workload = |i: usize, created_at: Time| {
            let t = &trace[i];
            let (pods, per) = t.shape();
            let queue = if team_queues || policy == Policy::SlurmMultifactor {
                t.team.clone()
            } else {
                "all".into()
            };
            // Admitted by quota alone, a gang's topology is the pod layer's to keep (a
            // required pod affinity), not admission's.
            let (pods, per, topology, flavor) = match &pod_layer {
                Some(l) => (
                    pods * per,
                    1,
                    None,
                    l.flavor_for(pods, per, t.topology).map(str::to_string),
                ),
                None => (pods, per, t.topology, None),
            };
            Workload {
                id: format!("{i}"),
                queue,
                priority: t.priority.clone().filter(|_| heeds_priorities(policy)),
                pods,
                gpus_per_pod: per,
                flavor,
                expected_duration_s: knowledge.estimates.for_job(t),
                created_at,
                topology,
                // A job's own figure is what its spec would tell Ferry; the peers know nothing
                // of racks' links.
                split_slowdown_pct: t
                    .split_slowdown_pct
                    .filter(|_| policy == Policy::Ferry && !knowledge.per_job_slowdown_untold),
            }
        };
        while let Some(&Reverse((t, i, evicted_at))) = requeues.peek() {
            if t > now {
                break;
            }
            requeues.pop();
            sched.submit(workload(i, evicted_at))?;
        }
        while next < order.len() && trace[order[next]].submit_s <= now {
            let i = order[next];
            next += 1;
            sched.submit(workload(i, trace[i].submit_s))?;
            teams.queued(jobs[i].team, jobs[i].gpus);
            arrived.push(i);
        }
        if team_queues {
            for &i in &running {
                if let Some(s) = jobs[i].start {
                    let done = now - s;
                    if done >= CHECKPOINT_EVERY_S {
                        sched.checkpointed(
                            &format!("{i}"),
                            s + done / CHECKPOINT_EVERY_S * CHECKPOINT_EVERY_S,
                        )?;
                    }
                }
            }
        }
        sched.settle(now, CYCLES_PER_INSTANT, |sched, decisions| {
            for (id, _, at) in sched.holder_starts() {
                if let Some(at) = at {
                    told.entry(ids[id]).or_insert(at);
                }
            }
            // What to do, in order: a job starts on nodes, or is stopped. Under quota-only
            // admission an admitted job starts only once the pod layer has placed its pods.
            let mut steps: VecDeque<Step> = VecDeque::new();
            for d in decisions {
                match d {
                    Decision::Admit {
                        id,
                        flavor,
                        placement,
                    } => {
                        let i = ids[&id];
                        match pod_layer.as_mut() {
                            Some(l) => {
                                let (pods, per) = trace[i].shape();
                                l.admit(i, &flavor, pods, per, trace[i].topology, now);
                            }
                            None => steps.push_back(Step::Run(
                                i,
                                placement.iter().map(|p| layouts.node(&p.node)).collect(),
                            )),
                        }
                    }
                    Decision::Preempt { id, .. } => steps.push_back(Step::Stop(ids[&id])),
                }
            }
            // Once the scheduler's steps are done, the pod layer places what it can.
            let mut placed = pod_layer.is_none();
            loop {
                let step = match steps.pop_front() {
                    Some(step) => step,
                    None if !placed => {
                        placed = true;
                        let l = pod_layer
                            .as_mut()
                            .expect("placement pass needs the pod layer");
                        steps.extend(l.place().into_iter().map(|(i, nodes)| Step::Run(i, nodes)));
                        continue;
                    }
                    None => break,
                };
                match step {
                    Step::Run(i, nodes) => {
                        let (pods, per) = trace[i].shape();
                        let split = layouts.record(pods, per, &nodes);
                        if let Some(at) = told.remove(&i) {
                            start_errors.push((at, now));
                        }
                        if let Some(at) = forecast_told.remove(&i) {
                            forecast_errors.push((at, now));
                        }
                        let j = &mut jobs[i];
                        j.start = Some(now);
                        j.signalled = false;
                        j.first_start.get_or_insert(now);
                        j.epoch += 1;
                        j.slow_pct = if split {
                            trace[i]
                                .split_slowdown_pct
                                .unwrap_or(knowledge.split_slowdown_pct)
                        } else {
                            0
                        };
                        completions.push(Reverse((now + j.wall(), i, j.epoch)));
                        if let Some(after) = correct_after.filter(|&a| a < j.wall()) {
                            corrections.push(Reverse((now + after, i, j.epoch)));
                        }
                        busy += j.gpus;
                        teams.started(j.team, j.gpus);
                        running.push(i);
                    }
                    Step::Stop(i) if pod_layer.as_ref().is_some_and(|l| l.is_waiting(i)) => {
                        // Admitted, its pods not all placed: nothing runs yet, so it goes at
                        // once and loses no work.
                        pod_layer.as_mut().expect("checked").release(i);
                        sched
                            .evicted(&format!("{i}"))
                            .expect("a preempted job can be evicted");
                        preemptions += 1;
                        jobs[i].preemptions += 1;
                    }
                    Step::Stop(i) => {
                        // SIGTERM now; the engine checkpoints and exits after the grace period.
                        let j = &mut jobs[i];
                        let s = j.start.expect("preempted job was running");
                        preemptions += 1;
                        j.preemptions += 1;
                        j.signalled = true;
                        if s + j.wall() > now + GRACE_S {
                            j.remaining = j.remaining - j.work_in(now - s) + RESUME_OVERHEAD_S;
                            j.epoch += 1;
                            let lost = (GRACE_S + RESUME_OVERHEAD_S) as f64 * j.gpus as f64;
                            lost_gpu_s += lost;
                            if now < last_submit {
                                window_busy -= lost;
                            }
                            evictions.push(Reverse((now + GRACE_S, i)));
                        } else {
                            // Finishes within the grace period: its completion stands.
                            evictions.push(Reverse((s + j.wall(), i)));
                        }
                    }
                }
            }
        });
        // Jobs submitted now that must wait: what the forecast tells them.
        arrived.retain(|&i| jobs[i].first_start.is_none());
        if probes.forecast && !arrived.is_empty() {
            let forecast = sched.forecast(now, FORECAST_CYCLES);
            forecast_waited += arrived.len() as u64;
            for &i in &arrived {
                if let Some(at) = forecast.start_of(&format!("{i}")) {
                    forecast_told.insert(i, at);
                }
            }
        }
        arrived.clear();
        if timeline.last().is_some_and(|l| l.1 != busy) {
            timeline.push((now, busy));
        }
        // Advance to the next event.
        let next_submit = order.get(next).map(|&i| trace[i].submit_s);
        let next_done = completions
            .peek()
            .map(|Reverse((t, _, _))| *t)
            .into_iter()
            .chain(evictions.peek().map(|Reverse((t, _))| *t))
            .chain(corrections.peek().map(|Reverse((t, _, _))| *t))
            .chain(requeues.peek().map(|Reverse((t, _, _))| *t))
            .chain(pod_layer.as_ref().and_then(PodLayer::next_timeout))
            .min();
        let t_next = match (next_submit, next_done) {
            (None, None) => break,
            (a, b) => a.into_iter().chain(b).min().expect("one is set"),
        };
        let dt = t_next - now;
        if let Some(l) = &pod_layer {
            admitted_idle_gpu_s += l.held() as f64 * dt as f64;
        }
        if teams.pending_total > 0 {
            waiting_s += dt;
            waiting_busy += busy as f64 * dt as f64;
        }
        if now < last_submit {
            window_busy += busy as f64 * (t_next.min(last_submit) - now) as f64;
        }
        fair.keep_quota(&teams, dt);
        if dt > 0 && fair.all_saturated(&teams) {
            let holder_teams: Vec<usize> = sched
                .holders()
                .into_iter()
                .flatten()
                .filter_map(|id| ids.get(id).map(|&i| jobs[i].team))
                .collect();
            fair.account(&teams, busy, dt, &holder_teams);
        }
        now = t_next;
    }
    if teams.pending_total > 0 {
        return Err(trace_err(
            "<trace>",
            0,
            format!(
                "{} jobs never started under {}",
                teams.pending_total,
                policy.name()
            ),
            "this is a scheduler bug; report it with the trace",
        ));
    }
    // The last completion, not the last event: a preempted job's stale completion event (from
    // before it was preempted) may come later and must not stretch the makespan.
    let makespan = jobs.iter().filter_map(|j| j.end).max().unwrap_or(t0) - t0;
    let useful: f64 = jobs.iter().map(|j| j.gpus as f64 * j.duration as f64).sum();
    let outcomes: Vec<JobOutcome> = trace
        .iter()
        .zip(&jobs)
        .map(|(t, j)| {
            let end = j.end.expect("every job completed");
            JobOutcome {
                job_id: t.job_id.clone(),
                team: t.team.clone(),
                class: t
                    .priority
                    .clone()
                    .unwrap_or_else(|| DEFAULT_PRIORITY.to_string()),
                gpus: j.gpus,
                submit_s: j.submit,
                first_start_s: j.first_start.expect("every job started"),
                end_s: end,
                wait_s: (end - j.submit).saturating_sub(j.duration),
                preemptions: j.preemptions,
            }
        })
        .collect();
    let (jct, wait, bucket_rows) = completion_times(&outcomes);
    let n = jct.len().max(1) as f64;
    let mut per_team: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    for o in &outcomes {
        let e = per_team.entry(o.team.clone()).or_default();
        *e = (e.0 + o.jct_s(), e.1 + 1);
    }
    let team_share = fair.shares(queues);
    Ok(SimReport {
        policy: policy.name().into(),
        utilization: useful / (capacity * makespan.max(1) as f64),
        utilization_in_window: window_busy.max(0.0) / (capacity * (last_submit - t0).max(1) as f64),
        utilization_while_waiting: if waiting_s > 0 {
            waiting_busy / (capacity * waiting_s as f64)
        } else {
            0.0
        },
        mean_jct_s: jct.iter().sum::<f64>() / n,
        p50_jct_s: pct(&jct, 0.5),
        p99_jct_s: pct(&jct, 0.99),
        mean_wait_s: wait / n,
        buckets: bucket_rows,
        preemptions,
        lost_gpu_hours: lost_gpu_s / 3600.0,
        placement: PlacementStats {
            admitted_unplaced: pod_layer.as_ref().map_or(0, |l| l.admitted_unplaced),
            admitted_idle_gpu_hours: admitted_idle_gpu_s / 3600.0,
            pods_ready_timeouts,
            ..layouts.stats
        },
        classes: if trace.iter().any(|t| t.priority.is_some()) {
            class_stats(&outcomes, classes)
        } else {
            BTreeMap::new()
        },
        cohort_share: cohort_shares(&team_share, queues, cohorts),
        team_share,
        saturated_s: fair.saturated_s,
        knowledge,
        makespan_s: makespan,
        start_estimates: start_estimates(&start_errors),
        forecast: probes.forecast.then(|| ForecastAccuracy {
            waited: forecast_waited,
            starts: start_estimates(&forecast_errors),
        }),
        bound: Some(makespan_bound(trace, cluster.total_gpus())),
        timeline,
        team_mean_jct_s: per_team
            .into_iter()
            .map(|(team, (sum, n))| (team, sum as f64 / n as f64))
            .collect(),
        jobs: outcomes,
    })
}
