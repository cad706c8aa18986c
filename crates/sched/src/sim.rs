//! Trace simulator: replays a job trace in virtual time through the same `Scheduler`,
//! under Ferry's policy and under baselines built from the same code (FIFO, EASY backfill).

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap};
use std::fmt::Write as _;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::config::{Cluster, Decision, FlavorQuota, Options, QueueSpec, Time, Workload};
use crate::error::{Result, SchedError};
use crate::scheduler::Scheduler;

/// GPUs per node assumed for the default contended cluster.
pub const DEFAULT_GPUS_PER_NODE: u32 = 8;
/// Flavor name of the default cluster.
pub const DEFAULT_FLAVOR: &str = "gpu";
/// How often a running job checkpoints in the simulation (lost work on preemption is since then).
pub const CHECKPOINT_EVERY_S: u64 = 1800;
/// Grace period between SIGTERM and the victim's exit; the engine writes a checkpoint in it.
pub const GRACE_S: u64 = 60;
/// Time a resumed job spends reloading its checkpoint before it makes progress again.
pub const RESUME_OVERHEAD_S: u64 = 300;
/// Largest time value accepted in a trace (about 31,700 years), so sums cannot overflow.
pub const MAX_SECONDS: u64 = 1_000_000_000_000;
/// Largest trace the simulator accepts (rows), so an absurd file cannot exhaust memory.
pub const MAX_TRACE_ROWS: usize = 2_000_000;

/// One row of a trace: `job_id,submit_s,duration_s,gpus,nodes,team,status`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TraceJob {
    /// Job id from the source.
    pub job_id: String,
    /// Submit time, seconds from the trace start.
    pub submit_s: u64,
    /// Run time in seconds (not counting queueing).
    pub duration_s: u64,
    /// GPUs used.
    pub gpus: u32,
    /// Nodes used in the source cluster (gives the gang's shape).
    pub nodes: u32,
    /// Team (queue) the job belongs to.
    pub team: String,
    /// Final status in the source (informational).
    pub status: String,
}

impl TraceJob {
    /// The gang shape: one pod per source node when GPUs split evenly, else one GPU per pod.
    pub fn shape(&self) -> (u32, u32) {
        let nodes = self.nodes.max(1);
        if self.gpus.is_multiple_of(nodes) {
            (nodes, self.gpus / nodes)
        } else {
            (self.gpus, 1)
        }
    }
}

fn trace_err(
    file: &str,
    line: usize,
    problem: impl Into<String>,
    fix: impl Into<String>,
) -> SchedError {
    SchedError::Trace {
        file: file.to_string(),
        line,
        problem: problem.into(),
        fix: fix.into(),
    }
}

/// The trace columns, in the documented order; `ferry sim` reads them by name.
pub const TRACE_COLUMNS: [&str; 7] = [
    "job_id",
    "submit_s",
    "duration_s",
    "gpus",
    "nodes",
    "team",
    "status",
];

/// Where each trace column is in a file's header; `None` for an optional one left out.
struct Columns {
    at: [Option<usize>; 7],
}

impl Columns {
    /// Columns are matched by name (any order, any case, surrounding spaces ignored);
    /// other columns are ignored. `submit_s`, `duration_s`, `gpus` and `team` are
    /// required; `job_id` defaults to the row's line, `nodes` to the fewest 8-GPU
    /// nodes, `status` to empty.
    fn from_header(header: &csv::StringRecord, file: &str) -> Result<Self> {
        let mut at = [None; 7];
        for (i, name) in header.iter().enumerate() {
            let name = name
                .trim_start_matches('\u{feff}')
                .trim()
                .to_ascii_lowercase();
            if let Some(k) = TRACE_COLUMNS.iter().position(|c| *c == name) {
                if at[k].is_some() {
                    return Err(trace_err(
                        file,
                        1,
                        format!("column `{name}` appears twice in the header"),
                        "keep one column of each name",
                    ));
                }
                at[k] = Some(i);
            }
        }
        let missing: Vec<&str> = [1, 2, 3, 5]
            .into_iter()
            .filter(|k| at[*k].is_none())
            .map(|k| TRACE_COLUMNS[k])
            .collect();
        if !missing.is_empty() {
            return Err(trace_err(
                file,
                1,
                format!(
                    "the header `{}` has no column {}",
                    header.iter().collect::<Vec<_>>().join(","),
                    missing
                        .iter()
                        .map(|m| format!("`{m}`"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                format!(
                    "start the file with a header naming its columns, e.g. `{}`",
                    TRACE_COLUMNS.join(",")
                ),
            ));
        }
        Ok(Self { at })
    }
}

/// Parses trace CSV text: a header naming the columns ([`TRACE_COLUMNS`], in any order;
/// others ignored), then one job per row. Quoted fields and CRLF line ends are accepted;
/// times may have a fraction (rounded to whole seconds).
pub fn parse_trace(text: &str, file: &str) -> Result<Vec<TraceJob>> {
    let mut reader = csv::ReaderBuilder::new()
        .flexible(true)
        .trim(csv::Trim::All)
        .from_reader(text.as_bytes());
    let csv_err = |e: csv::Error| {
        let line = e.position().map_or(0, |p| p.line() as usize);
        trace_err(
            file,
            line,
            format!("not readable as CSV: {e}"),
            "write the trace as comma-separated UTF-8 text",
        )
    };
    let header = reader.headers().map_err(csv_err)?.clone();
    if header.iter().all(str::is_empty) {
        return Err(trace_err(
            file,
            0,
            "the file is empty",
            format!("start it with the header `{}`", TRACE_COLUMNS.join(",")),
        ));
    }
    let cols = Columns::from_header(&header, file)?;
    let mut jobs = Vec::new();
    for record in reader.records() {
        let record = record.map_err(csv_err)?;
        let ln = record.position().map_or(0, |p| p.line() as usize);
        if record.iter().all(str::is_empty) {
            continue;
        }
        if jobs.len() >= MAX_TRACE_ROWS {
            return Err(trace_err(
                file,
                ln,
                format!("more than {MAX_TRACE_ROWS} rows"),
                "split the trace",
            ));
        }
        let field = |k: usize| -> Result<Option<&str>> {
            let Some(i) = cols.at[k] else {
                return Ok(None);
            };
            match record.get(i) {
                Some(v) => Ok(Some(v)),
                None => Err(trace_err(
                    file,
                    ln,
                    format!("{} columns, the header has {}", record.len(), header.len()),
                    "give every row a value for each column of the header",
                )),
            }
        };
        let seconds =
            |k: usize| -> Result<u64> {
                let v = field(k)?.unwrap_or_default();
                v.parse::<f64>()
                .ok()
                .filter(|x| x.is_finite() && *x >= 0.0 && x.round() <= MAX_SECONDS as f64)
                .map(|x| x.round() as u64)
                .ok_or_else(|| {
                    trace_err(
                        file,
                        ln,
                        format!(
                            "column `{}` is `{v}`, not a number of seconds from 0 to {MAX_SECONDS}",
                            TRACE_COLUMNS[k]
                        ),
                        format!("write `{}` as non-negative seconds, e.g. 3600", TRACE_COLUMNS[k]),
                    )
                })
            };
        let count = |k: usize, v: &str| -> Result<u32> {
            v.parse::<u32>()
                .ok()
                .filter(|v| *v > 0 && *v <= 1_000_000)
                .ok_or_else(|| {
                    trace_err(
                        file,
                        ln,
                        format!("column `{}` is `{v}`", TRACE_COLUMNS[k]),
                        format!(
                            "`{}` must be a whole number between 1 and 1000000 (drop CPU-only jobs)",
                            TRACE_COLUMNS[k]
                        ),
                    )
                })
        };
        let gpus = count(3, field(3)?.unwrap_or_default())?;
        let nodes = match field(4)? {
            Some(v) => count(4, v)?,
            None => gpus.div_ceil(8),
        };
        let team = field(5)?.unwrap_or_default();
        if team.is_empty() {
            return Err(trace_err(
                file,
                ln,
                "column `team` is empty",
                "name the team (queue) of every job",
            ));
        }
        jobs.push(TraceJob {
            job_id: match field(0)? {
                Some(id) => id.to_string(),
                None => format!("line-{ln}"),
            },
            submit_s: seconds(1)?,
            duration_s: seconds(2)?,
            gpus,
            nodes,
            team: team.to_string(),
            status: field(6)?.unwrap_or_default().to_string(),
        });
    }
    if jobs.is_empty() {
        return Err(trace_err(
            file,
            0,
            "the trace has no jobs",
            "add at least one row",
        ));
    }
    Ok(jobs)
}

/// Reads and parses a trace file.
pub fn read_trace(path: &Path) -> Result<Vec<TraceJob>> {
    let name = path.display().to_string();
    let meta = std::fs::metadata(path)
        .map_err(|e| trace_err(&name, 0, format!("cannot read: {e}"), "check the path"))?;
    if meta.len() > 256 << 20 {
        return Err(trace_err(
            &name,
            0,
            format!("file is {} bytes", meta.len()),
            "use a trace under 256 MiB",
        ));
    }
    let text = std::fs::read_to_string(path).map_err(|e| {
        trace_err(
            &name,
            0,
            format!("cannot read: {e}"),
            "check the path and that it is UTF-8 text",
        )
    })?;
    parse_trace(&text, &name)
}

/// Offered load of a trace: GPU-seconds over the submit span, in GPUs.
pub fn offered_load(trace: &[TraceJob]) -> f64 {
    let gpu_s: f64 = trace
        .iter()
        .map(|j| f64::from(j.gpus) * j.duration_s as f64)
        .sum();
    let first = trace.iter().map(|j| j.submit_s).min().unwrap_or(0);
    let last = trace.iter().map(|j| j.submit_s).max().unwrap_or(0);
    gpu_s / ((last - first).max(1) as f64)
}

/// A contended cluster for a trace: its mean offered load rounded up to whole 8-GPU nodes,
/// and at least its largest job.
pub fn default_cluster(trace: &[TraceJob]) -> Cluster {
    let g = f64::from(DEFAULT_GPUS_PER_NODE);
    let by_load = (offered_load(trace) / g).ceil() as usize;
    let largest = trace
        .iter()
        .map(|j| j.gpus.div_ceil(DEFAULT_GPUS_PER_NODE))
        .max()
        .unwrap_or(1) as usize;
    Cluster::uniform(
        by_load.max(largest).max(1),
        DEFAULT_GPUS_PER_NODE,
        DEFAULT_FLAVOR,
    )
}

/// One queue per team, nominal quota proportional to its share of the trace's GPU-hours
/// (largest remainder, summing to the cluster), all in one cohort with unlimited borrowing.
pub fn default_queues(trace: &[TraceJob], cluster: &Cluster) -> Vec<QueueSpec> {
    let mut hours: BTreeMap<&str, f64> = BTreeMap::new();
    for j in trace {
        *hours.entry(&j.team).or_default() += f64::from(j.gpus) * j.duration_s as f64;
    }
    let total: f64 = hours.values().sum::<f64>().max(1.0);
    let mut flavors: Vec<(String, u64)> = Vec::new();
    for n in &cluster.nodes {
        match flavors.iter_mut().find(|(f, _)| *f == n.flavor) {
            Some((_, c)) => *c += u64::from(n.gpus),
            None => flavors.push((n.flavor.clone(), u64::from(n.gpus))),
        }
    }
    let teams: Vec<&str> = hours.keys().copied().collect();
    // One team alone has nobody to borrow from: no cohort.
    let cohort = (teams.len() > 1).then(|| "all".to_string());
    let mut quotas: Vec<Vec<FlavorQuota>> = vec![Vec::new(); teams.len()];
    for (flavor, cap) in &flavors {
        let exact: Vec<f64> = teams
            .iter()
            .map(|t| hours[t] / total * *cap as f64)
            .collect();
        let mut base: Vec<u64> = exact.iter().map(|x| x.floor() as u64).collect();
        let mut left = cap - base.iter().sum::<u64>();
        let mut order: Vec<usize> = (0..teams.len()).collect();
        order.sort_by(|&a, &b| {
            (exact[b] - exact[b].floor())
                .total_cmp(&(exact[a] - exact[a].floor()))
                .then(a.cmp(&b))
        });
        for i in order {
            if left == 0 {
                break;
            }
            base[i] += 1;
            left -= 1;
        }
        for (i, n) in base.into_iter().enumerate() {
            quotas[i].push(FlavorQuota {
                flavor: flavor.clone(),
                nominal: n as u32,
                borrowing_limit: None,
                lending_limit: None,
            });
        }
    }
    teams
        .into_iter()
        .zip(quotas)
        .map(|(t, q)| QueueSpec {
            name: t.to_string(),
            cohort: cohort.clone(),
            quotas: q,
            fair_share_weight: 1.0,
        })
        .collect()
}

/// A cluster of `gpus` GPUs in 8-GPU nodes (the last node smaller if needed), for `--gpus N`.
pub fn cluster_with_gpus(gpus: u32) -> Cluster {
    let full = (gpus / DEFAULT_GPUS_PER_NODE) as usize;
    let mut c = Cluster::uniform(full, DEFAULT_GPUS_PER_NODE, DEFAULT_FLAVOR);
    let rest = gpus % DEFAULT_GPUS_PER_NODE;
    if rest > 0 {
        let mut last = Cluster::uniform(1, rest, DEFAULT_FLAVOR).nodes.remove(0);
        last.name = format!("node-{full}");
        c.nodes.push(last);
    }
    c
}

/// One paragraph stating the simulation's setup (cluster size, quotas, assumptions).
pub fn describe_setup(trace: &[TraceJob], cluster: &Cluster, queues: &[QueueSpec]) -> String {
    let quotas: Vec<String> = queues
        .iter()
        .map(|q| {
            let n: u32 = q.quotas.iter().map(|x| x.nominal).sum();
            format!(
                "{}={}{}",
                q.name,
                n,
                q.cohort
                    .as_ref()
                    .map_or(String::new(), |c| format!(" (cohort {c})"))
            )
        })
        .collect();
    format!(
        "trace: {} jobs, offered load {:.1} GPUs; cluster: {} GPUs on {} nodes; nominal quotas: {}; \
         expected durations given to the schedulers are exact; preemption is graceful \
         (SIGTERM, {GRACE_S} s grace to checkpoint, {RESUME_OVERHEAD_S} s to resume); \
         a team is saturated while it has work waiting and asks for at least its entitled GPUs; \
         shares are judged (ok / OUT of 10%) over the time all teams are saturated together, \
         when that is at least {MIN_SATURATED_S} s (else n/a)",
        trace.len(),
        offered_load(trace),
        cluster.total_gpus(),
        cluster.nodes.len(),
        quotas.join(", ")
    )
}

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
}

impl Policy {
    /// Every policy, Ferry first.
    pub const ALL: [Policy; 4] = [
        Policy::Ferry,
        Policy::Fifo,
        Policy::EasyBackfill,
        Policy::KueueStrict,
    ];

    /// Stable name used in tables and JSON.
    pub fn name(self) -> &'static str {
        match self {
            Policy::Ferry => "ferry",
            Policy::Fifo => "fifo",
            Policy::EasyBackfill => "easy-backfill",
            Policy::KueueStrict => "kueue-strict",
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
                critical_path_factor: 0,
                ..Options::default()
            },
            Policy::EasyBackfill => Options {
                backfill: true,
                strict_fifo: false,
                preemption: false,
                fair_sharing: false,
                duration_weight: 0,
                critical_path_factor: 0,
                ..Options::default()
            },
            Policy::KueueStrict => Options {
                backfill: false,
                strict_fifo: true,
                preemption: true,
                fair_sharing: true,
                lend_reserved_nodes: false,
                duration_weight: 0,
                reclaim_patience_s: 0,
                critical_path_factor: 0,
                fair_preemption: false,
                hold_for_owed: false,
                deficit_half_life_s: 0,
                ..Options::default()
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
    /// Why the share differs from the entitlement (diagnosis only, not serialized).
    #[serde(skip)]
    pub breakdown: ShareBreakdown,
}

/// Where a team's deviation from its entitlement came from, over the all-saturated window:
/// GPU-seconds it used minus GPU-seconds it was owed (its entitlement times all teams' busy
/// GPUs), split by the team's situation in each interval. The parts sum to `(share −
/// entitlement)` times all teams' busy GPU-seconds in the window. For diagnosing fairness misses;
/// not part of the JSON output. "Fits" means its smallest waiting job fits in the GPUs left of
/// its entitlement.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ShareBreakdown {
    /// Under its due while every job it had waiting was larger than the GPUs left of its
    /// entitlement (a lumpy team waiting for a drain).
    pub lumpy_wait: f64,
    /// Under its due, a waiting job fits and idle GPUs would hold it, but another team's job
    /// held the reservation (the idle GPUs were kept for that gang).
    pub behind_reservation: f64,
    /// Under its due, a waiting job fits and idle GPUs would hold it, no other team holding the
    /// reservation (fragmentation: no node had room).
    pub fits_not_placed: f64,
    /// Under its due, a waiting job fits but too few GPUs were idle: others held them (only
    /// reclaiming or preempting would have served it).
    pub cluster_full: f64,
    /// Over its due in share terms while using no more than its entitlement in GPUs: others
    /// left GPUs idle (drains, fragments), so the same GPUs are a larger share.
    pub over_within_entitlement: f64,
    /// Over its entitlement in GPUs while a team under its due had a waiting job that fits
    /// (borrowing that was not reclaimed).
    pub over_while_owed_fits: f64,
    /// Over its entitlement in GPUs while every team under its due waited only for jobs larger
    /// than the GPUs left of its entitlement (using GPUs no owed team could use then).
    pub over_filling: f64,
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
    /// Team → share vs entitlement while all teams were saturated (each had work waiting).
    pub team_share: BTreeMap<String, TeamShare>,
    /// Seconds all teams were saturated together.
    pub saturated_s: u64,
    /// First submit to last completion, seconds.
    pub makespan_s: u64,
    /// Busy GPUs over time: (time, busy GPUs) at each change.
    pub timeline: Vec<(Time, u64)>,
}

struct SimJob {
    team: usize,
    gpus: u64,
    submit: Time,
    remaining: u64,
    duration: u64,
    start: Option<Time>,
    epoch: u64,
    end: Option<Time>,
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

/// Replays `trace` on `cluster` under `policy`. `queues` define teams' entitlements (and, for
/// Ferry, the real queues; every trace team needs a queue of the same name); the baselines run
/// one queue holding the whole cluster. Expected durations given to the scheduler are exact.
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
    let team_idx: HashMap<&str, usize> = queues
        .iter()
        .enumerate()
        .map(|(i, q)| (q.name.as_str(), i))
        .collect();
    let entitled = entitlements(queues, cluster);
    let team_queues = matches!(policy, Policy::Ferry | Policy::KueueStrict);
    let sched_queues = match policy {
        Policy::Ferry | Policy::KueueStrict => queues.to_vec(),
        _ => {
            let mut caps: Vec<(String, u64)> = Vec::new();
            for n in &cluster.nodes {
                match caps.iter_mut().find(|(f, _)| *f == n.flavor) {
                    Some((_, c)) => *c += u64::from(n.gpus),
                    None => caps.push((n.flavor.clone(), u64::from(n.gpus))),
                }
            }
            vec![QueueSpec {
                name: "all".into(),
                cohort: None,
                quotas: caps
                    .into_iter()
                    .map(|(f, c)| FlavorQuota {
                        flavor: f,
                        nominal: c as u32,
                        borrowing_limit: None,
                        lending_limit: None,
                    })
                    .collect(),
                fair_share_weight: 1.0,
            }]
        }
    };
    let mut sched = Scheduler::with_options(cluster.clone(), sched_queues, Vec::new(), options)?;
    let mut order: Vec<usize> = (0..trace.len()).collect();
    order.sort_by_key(|&i| (trace[i].submit_s, i));
    let mut jobs: Vec<SimJob> = Vec::with_capacity(trace.len());
    for (i, t) in trace.iter().enumerate() {
        let Some(&team) = team_idx.get(t.team.as_str()) else {
            return Err(trace_err(
                "<trace>",
                i + 2,
                format!("team `{}` has no queue", t.team),
                "add a queue with that name or omit --queues",
            ));
        };
        jobs.push(SimJob {
            team,
            gpus: u64::from(t.gpus),
            submit: t.submit_s,
            remaining: t.duration_s,
            duration: t.duration_s,
            start: None,
            epoch: 0,
            end: None,
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
    let mut next = 0usize;
    let mut now: Time = trace.iter().map(|t| t.submit_s).min().unwrap_or(0);
    let t0 = now;
    let nteams = queues.len();
    let mut busy: u64 = 0;
    let mut team_busy = vec![0u64; nteams];
    let mut team_pending = vec![0usize; nteams];
    // Sizes of each team's waiting jobs (GPUs → count), for the share breakdown.
    let mut pend_sizes: Vec<BTreeMap<u64, usize>> = vec![BTreeMap::new(); nteams];
    let mut breakdown = vec![ShareBreakdown::default(); nteams];
    let mut pending_total = 0usize;
    let mut team_sat_gpu_s = vec![0f64; nteams];
    let mut sat_gpu_s = 0f64;
    let mut saturated_s = 0u64;
    let mut waiting_busy = 0f64;
    let last_submit = trace.iter().map(|t| t.submit_s).max().unwrap_or(0);
    let mut window_busy = 0f64;
    let mut waiting_s = 0u64;
    let mut timeline = vec![(now, 0u64)];
    let mut preemptions = 0u64;
    let mut lost_gpu_s = 0f64;
    let mut running: Vec<usize> = Vec::new();
    let active_teams: Vec<bool> = (0..nteams)
        .map(|q| jobs.iter().any(|j| j.team == q))
        .collect();
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
            busy -= jobs[i].gpus;
            team_busy[jobs[i].team] -= jobs[i].gpus;
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
            let j = &mut jobs[i];
            j.start = None;
            busy -= j.gpus;
            team_busy[j.team] -= j.gpus;
            team_pending[j.team] += j.gpus as usize;
            *pend_sizes[j.team].entry(j.gpus).or_default() += 1;
            pending_total += 1;
            running.retain(|&r| r != i);
        }
        while next < order.len() && trace[order[next]].submit_s <= now {
            let i = order[next];
            next += 1;
            let t = &trace[i];
            let (pods, per) = t.shape();
            let queue = if team_queues {
                t.team.clone()
            } else {
                "all".into()
            };
            sched.submit(Workload {
                id: format!("{i}"),
                queue,
                priority: None,
                pods,
                gpus_per_pod: per,
                flavor: None,
                expected_duration_s: Some(t.duration_s.max(1)),
                created_at: t.submit_s,
            })?;
            team_pending[jobs[i].team] += jobs[i].gpus as usize;
            *pend_sizes[jobs[i].team].entry(jobs[i].gpus).or_default() += 1;
            pending_total += 1;
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
        for _ in 0..64 {
            let decisions = sched.cycle(now);
            if decisions.is_empty() {
                break;
            }
            for d in decisions {
                match d {
                    Decision::Admit { id, .. } => {
                        let i = ids[&id];
                        let j = &mut jobs[i];
                        j.start = Some(now);
                        j.epoch += 1;
                        completions.push(Reverse((now + j.remaining, i, j.epoch)));
                        busy += j.gpus;
                        team_busy[j.team] += j.gpus;
                        team_pending[j.team] -= j.gpus as usize;
                        if let Some(c) = pend_sizes[j.team].get_mut(&j.gpus) {
                            *c -= 1;
                            if *c == 0 {
                                pend_sizes[j.team].remove(&j.gpus);
                            }
                        }
                        pending_total -= 1;
                        running.push(i);
                    }
                    Decision::Preempt { id, .. } => {
                        // SIGTERM now; the engine checkpoints and exits after the grace period.
                        let i = ids[&id];
                        let j = &mut jobs[i];
                        let s = j.start.expect("preempted job was running");
                        preemptions += 1;
                        if s + j.remaining > now + GRACE_S {
                            j.remaining = j.remaining - (now - s) + RESUME_OVERHEAD_S;
                            j.epoch += 1;
                            let lost = (GRACE_S + RESUME_OVERHEAD_S) as f64 * j.gpus as f64;
                            lost_gpu_s += lost;
                            if now < last_submit {
                                window_busy -= lost;
                            }
                            evictions.push(Reverse((now + GRACE_S, i)));
                        } else {
                            // Finishes within the grace period: its completion stands.
                            evictions.push(Reverse((s + j.remaining, i)));
                        }
                    }
                }
            }
        }
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
            .min();
        let t_next = match (next_submit, next_done) {
            (None, None) => break,
            (a, b) => a.into_iter().chain(b).min().expect("one is set"),
        };
        let dt = t_next - now;
        if pending_total > 0 {
            waiting_s += dt;
            waiting_busy += busy as f64 * dt as f64;
        }
        if now < last_submit {
            window_busy += busy as f64 * (t_next.min(last_submit) - now) as f64;
        }
        // A team is saturated when it asks for at least its entitled GPUs (running + waiting).
        let all_sat = (0..nteams).all(|q| {
            !active_teams[q]
                || (team_pending[q] > 0
                    && (team_busy[q] + team_pending[q] as u64) as f64 >= entitled[q] * capacity)
        });
        if all_sat && dt > 0 {
            saturated_s += dt;
            sat_gpu_s += busy as f64 * dt as f64;
            for q in 0..nteams {
                team_sat_gpu_s[q] += team_busy[q] as f64 * dt as f64;
            }
            // Attribute each team's deviation in this interval to its situation.
            let holder_teams: Vec<usize> = sched
                .holders()
                .into_iter()
                .flatten()
                .filter_map(|id| ids.get(id).map(|&i| jobs[i].team))
                .collect();
            let under = |q: usize| (team_busy[q] as f64) < entitled[q] * busy as f64;
            let fits = |q: usize| {
                pend_sizes[q]
                    .keys()
                    .next()
                    .is_some_and(|&g| g as f64 <= entitled[q] * capacity - team_busy[q] as f64)
            };
            for q in (0..nteams).filter(|&q| active_teams[q]) {
                let d = (team_busy[q] as f64 - entitled[q] * busy as f64) * dt as f64;
                let b = &mut breakdown[q];
                let smallest = pend_sizes[q].keys().next().copied().unwrap_or(u64::MAX);
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
                } else if team_busy[q] as f64 <= entitled[q] * capacity {
                    b.over_within_entitlement += d;
                } else if (0..nteams).any(|p| p != q && active_teams[p] && under(p) && fits(p)) {
                    b.over_while_owed_fits += d;
                } else {
                    b.over_filling += d;
                }
            }
        }
        now = t_next;
    }
    if pending_total > 0 {
        return Err(trace_err(
            "<trace>",
            0,
            format!("{pending_total} jobs never started under {}", policy.name()),
            "this is a scheduler bug; report it with the trace",
        ));
    }
    // The last completion, not the last event: a preempted job's stale completion event (from
    // before it was preempted) may come later and must not stretch the makespan.
    let makespan = jobs.iter().filter_map(|j| j.end).max().unwrap_or(t0) - t0;
    let useful: f64 = jobs.iter().map(|j| j.gpus as f64 * j.duration as f64).sum();
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
            let end = j.end.expect("every job completed");
            b.push((end - j.submit) as f64);
            bw += (end - j.submit) as f64 - j.duration as f64;
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
    let n = jct.len().max(1) as f64;
    let team_share = queues
        .iter()
        .enumerate()
        .filter(|(q, _)| active_teams[*q])
        .map(|(q, spec)| {
            let share = if sat_gpu_s > 0.0 {
                team_sat_gpu_s[q] / sat_gpu_s
            } else {
                0.0
            };
            let entitlement = entitled[q];
            let ratio = if entitlement > 0.0 {
                share / entitlement
            } else {
                0.0
            };
            (
                spec.name.clone(),
                TeamShare {
                    share,
                    entitlement,
                    ratio,
                    within_tolerance: (saturated_s >= MIN_SATURATED_S)
                        .then_some((ratio - 1.0).abs() <= FAIRNESS_TOLERANCE),
                    breakdown: breakdown[q],
                },
            )
        })
        .collect();
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
        team_share,
        saturated_s,
        makespan_s: makespan,
        timeline,
    })
}

/// Side-by-side table of the policies' headline numbers, size buckets and team shares.
pub fn render_table(reports: &[SimReport]) -> String {
    let mut s = String::new();
    let _ = write!(s, "{:<28}", "metric");
    for r in reports {
        let _ = write!(s, "{:>16}", r.policy);
    }
    s.push('\n');
    let row = |s: &mut String, name: &str, f: &dyn Fn(&SimReport) -> String| {
        let _ = write!(s, "{name:<28}");
        for r in reports {
            let _ = write!(s, "{:>16}", f(r));
        }
        s.push('\n');
    };
    row(&mut s, "utilization", &|r| format!("{:.3}", r.utilization));
    row(&mut s, "utilization first-last submit", &|r| {
        format!("{:.3}", r.utilization_in_window)
    });
    row(&mut s, "utilization while waiting", &|r| {
        format!("{:.3}", r.utilization_while_waiting)
    });
    row(&mut s, "mean JCT (s)", &|r| format!("{:.0}", r.mean_jct_s));
    row(&mut s, "p50 JCT (s)", &|r| format!("{:.0}", r.p50_jct_s));
    row(&mut s, "p99 JCT (s)", &|r| format!("{:.0}", r.p99_jct_s));
    row(&mut s, "mean wait (s)", &|r| {
        format!("{:.0}", r.mean_wait_s)
    });
    row(&mut s, "preemptions", &|r| r.preemptions.to_string());
    row(&mut s, "lost GPU-hours", &|r| {
        format!("{:.1}", r.lost_gpu_hours)
    });
    row(&mut s, "makespan (s)", &|r| r.makespan_s.to_string());
    row(&mut s, "all-saturated time (s)", &|r| {
        r.saturated_s.to_string()
    });
    if let Some(first) = reports.first() {
        for b in &first.buckets {
            let label = b.gpus.clone();
            row(&mut s, &format!("mean JCT {label} GPUs (s)"), &|r| {
                r.buckets
                    .iter()
                    .find(|x| x.gpus == label)
                    .map_or("-".into(), |x| format!("{:.0}", x.mean_jct_s))
            });
            row(&mut s, &format!("mean wait {label} GPUs (s)"), &|r| {
                r.buckets
                    .iter()
                    .find(|x| x.gpus == label)
                    .map_or("-".into(), |x| format!("{:.0}", x.mean_wait_s))
            });
        }
        for team in first.team_share.keys() {
            row(&mut s, &format!("share/entitled {team}"), &|r| {
                r.team_share.get(team).map_or("-".into(), |t| {
                    let verdict = match t.within_tolerance {
                        Some(true) => "ok",
                        Some(false) => "OUT",
                        None => "n/a",
                    };
                    format!("{:.3}/{:.3} {verdict}", t.share, t.entitlement)
                })
            });
        }
    }
    if let [first, peers @ ..] = reports
        && !peers.is_empty()
    {
        let _ = writeln!(
            s,
            "{} / peer (mean JCT and wait: lower is better; utilization: higher is better)",
            first.policy
        );
        let ratio = |a: f64, b: f64| {
            if b > 0.0 {
                format!("{:.3}x", a / b)
            } else {
                "-".to_owned()
            }
        };
        for peer in peers {
            let _ = writeln!(
                s,
                "  vs {:<16} mean JCT {}  p99 JCT {}  mean wait {}  utilization {}",
                peer.policy,
                ratio(first.mean_jct_s, peer.mean_jct_s),
                ratio(first.p99_jct_s, peer.p99_jct_s),
                ratio(first.mean_wait_s, peer.mean_wait_s),
                ratio(first.utilization, peer.utilization),
            );
        }
    }
    s
}

/// An SVG line plot of busy-GPU fraction over time, one line per policy.
pub fn render_svg(reports: &[SimReport], capacity: u64) -> String {
    let (w, h, pad) = (900.0, 300.0, 40.0);
    let t_end = reports
        .iter()
        .filter_map(|r| r.timeline.last().map(|x| x.0))
        .max()
        .unwrap_or(1)
        .max(1) as f64;
    let t_start = reports
        .iter()
        .filter_map(|r| r.timeline.first().map(|x| x.0))
        .min()
        .unwrap_or(0) as f64;
    let span = (t_end - t_start).max(1.0);
    let colors = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd"];
    let mut s = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" font-family=\"sans-serif\" font-size=\"12\">\n"
    );
    let _ = writeln!(s, "<rect width=\"{w}\" height=\"{h}\" fill=\"white\"/>");
    let _ = writeln!(
        s,
        "<text x=\"{pad}\" y=\"20\">GPU utilization over time ({capacity} GPUs, {:.1} days)</text>",
        span / 86400.0
    );
    for (k, r) in reports.iter().enumerate() {
        let mut pts = String::new();
        let mut last_y = h - pad;
        for &(t, b) in &r.timeline {
            let x = pad + (t as f64 - t_start) / span * (w - 2.0 * pad);
            let y = h - pad - (b as f64 / capacity.max(1) as f64) * (h - 2.0 * pad);
            let _ = write!(pts, "{x:.1},{last_y:.1} {x:.1},{y:.1} ");
            last_y = y;
        }
        let c = colors[k % colors.len()];
        let _ = writeln!(
            s,
            "<polyline fill=\"none\" stroke=\"{c}\" stroke-width=\"1\" opacity=\"0.7\" points=\"{pts}\"/>"
        );
        let _ = writeln!(
            s,
            "<text x=\"{}\" y=\"{}\" fill=\"{c}\">{} ({:.3})</text>",
            w - 220.0,
            40.0 + 16.0 * k as f64,
            r.policy,
            r.utilization
        );
    }
    s.push_str("</svg>\n");
    s
}

/// Each queue's entitlement: the fraction of the cluster's GPUs it is owed when every queue is
/// saturated. A queue is owed its nominal quota; GPUs no quota covers are split by fair-share
/// weight; when the quotas add up to more than the cluster, every quota is scaled down alike.
/// In symbols, with `n` a queue's nominal GPUs (all flavors), `N` their sum, `w` its weight, `W`
/// the sum of weights and `C` the cluster's GPUs: `(n + w / W * max(0, C - N)) / max(C, N)`.
pub fn entitlements(queues: &[QueueSpec], cluster: &Cluster) -> Vec<f64> {
    let nominal: Vec<f64> = queues
        .iter()
        .map(|q| q.quotas.iter().map(|x| f64::from(x.nominal)).sum::<f64>())
        .collect();
    let n: f64 = nominal.iter().sum();
    let c = cluster.total_gpus() as f64;
    let w: f64 = queues.iter().map(|q| q.fair_share_weight).sum::<f64>();
    let spare = (c - n).max(0.0);
    let denom = c.max(n).max(1e-9);
    queues
        .iter()
        .zip(&nominal)
        .map(|(q, nom)| {
            let extra = if w > 0.0 {
                q.fair_share_weight / w * spare
            } else {
                0.0
            };
            (nom + extra) / denom
        })
        .collect()
}

/// Job-size mix of a generated trace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SizeMix {
    /// Mostly 1–8 GPU jobs.
    Small,
    /// Helios-like: many small jobs and a tail of multi-node gangs up to the whole cluster.
    Mixed,
    /// Mostly multi-node gangs (8–64 GPUs, some whole-cluster).
    Gangs,
}

/// What `generated_trace` produces: a seeded synthetic trace for testing policies on traces
/// that were never tuned for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GenSpec {
    /// Seed of the generator (same seed, same trace).
    pub seed: u64,
    /// Number of jobs.
    pub jobs: usize,
    /// Number of teams (each with its own volume).
    pub teams: usize,
    /// GPUs of the cluster the load is computed against (8 per node); no job is larger.
    pub gpus: u32,
    /// Offered load: GPU-seconds over the submit span, as a fraction of `gpus`.
    pub load: f64,
    /// Job-size mix.
    pub mix: SizeMix,
}

struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
    fn pick(&mut self, weights: &[f64]) -> usize {
        let total: f64 = weights.iter().sum();
        let mut x = self.unit() * total;
        for (i, w) in weights.iter().enumerate() {
            if x < *w {
                return i;
            }
            x -= w;
        }
        weights.len() - 1
    }
}

/// A synthetic trace: teams with unequal volumes and their own size mixes, log-uniform run times
/// (1 minute to 1 day), and bursty arrivals (a daily cycle) scaled to the requested offered load.
pub fn generated_trace(spec: &GenSpec) -> Vec<TraceJob> {
    let mut rng = SplitMix(spec.seed.wrapping_mul(0x2545_F491_4F6C_DD1D) ^ 0x5EED);
    let cap = spec.gpus.max(1);
    let sizes: &[(u32, f64)] = match spec.mix {
        SizeMix::Small => &[(1, 0.35), (2, 0.25), (4, 0.25), (8, 0.15)],
        SizeMix::Mixed => &[
            (1, 0.2),
            (2, 0.15),
            (4, 0.15),
            (8, 0.25),
            (16, 0.1),
            (32, 0.07),
            (64, 0.05),
            (u32::MAX, 0.03),
        ],
        SizeMix::Gangs => &[(8, 0.3), (16, 0.3), (32, 0.2), (64, 0.15), (u32::MAX, 0.05)],
    };
    let teams = spec.teams.max(1);
    let volume: Vec<f64> = (0..teams).map(|_| 0.5 + 3.0 * rng.unit()).collect();
    // Each team leans towards part of the mix.
    let lean: Vec<Vec<f64>> = (0..teams)
        .map(|_| sizes.iter().map(|(_, w)| w * (0.3 + rng.unit())).collect())
        .collect();
    let mut jobs: Vec<(usize, u32, u64)> = Vec::with_capacity(spec.jobs);
    let (lo, hi) = (60f64.ln(), 86_400f64.ln());
    for _ in 0..spec.jobs {
        let team = rng.pick(&volume);
        let gpus = sizes[rng.pick(&lean[team])].0.min(cap);
        let dur = (lo + (hi - lo) * rng.unit()).exp().round() as u64;
        jobs.push((team, gpus, dur.max(1)));
    }
    let gpu_s: f64 = jobs.iter().map(|(_, g, d)| f64::from(*g) * *d as f64).sum();
    let span = gpu_s / (spec.load.max(0.01) * f64::from(cap));
    let mean_gap = span / spec.jobs.max(1) as f64;
    let mut t = 0f64;
    jobs.into_iter()
        .enumerate()
        .map(|(i, (team, gpus, dur))| {
            let submit = t.round() as u64;
            // Busier in the day than at night: the gap shrinks and grows over a 24 h cycle.
            let phase = (t / 86_400.0 * std::f64::consts::TAU).sin();
            t += -mean_gap * (1.0 - rng.unit()).ln() * (1.0 - 0.6 * phase);
            TraceJob {
                job_id: format!("g{}-{i}", spec.seed),
                submit_s: submit,
                duration_s: dur,
                gpus,
                nodes: gpus.div_ceil(DEFAULT_GPUS_PER_NODE),
                team: format!("team-{team}"),
                status: "COMPLETED".into(),
            }
        })
        .collect()
}
