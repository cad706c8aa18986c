//! The scheduler: a deterministic state machine the control plane drives.
//!
//! Inputs are events (`submit`, `finished`, `evicted`, `checkpointed`); outputs are the
//! decisions returned by `cycle`. Nothing here reads a clock or touches a process.

mod build;
mod cycle;
mod events;
mod fairness;
mod forecast;
mod preempt;
mod reserve;
mod split;
mod stop;
mod tree;
mod waiting;

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, HashMap};

use crate::config::{
    Decision, Options, PodPlacement, PreemptionPolicy, StopPolicy, Time, Topology,
};
use crate::pool::{Pool, bits};
use fairness::{FairPath, Side};
use tree::{Cohort, room};

pub(crate) use forecast::CYCLES_PER_INSTANT;
pub use forecast::{FORECAST_CYCLES, Forecast, ForecastStart};
pub(crate) use split::{stretched, unstretched};
pub use waiting::{Forecasted, InLine, WaitCause, Waiting};

type PKey = (Reverse<i32>, Time, u64, u32);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum St {
    Pending,
    Nominated,
    Running,
    Evicting,
}

#[derive(Debug, Clone)]
struct Job {
    id: String,
    queue: u32,
    prio: i32,
    /// Its class preempts lower-priority work of its queue (`PriorityClass::preempting`).
    preempts: bool,
    created: Time,
    /// Sort key within its priority (see `order_of`).
    order: u64,
    seq: u64,
    pods: u32,
    g: u32,
    /// The topology domain all its pods must share (`Workload::topology`).
    topology: Option<Topology>,
    /// Flavors it can ever use (quota and node sizes allow), in preference order.
    flavors: Vec<u16>,
    expected: Option<u64>,
    state: St,
    flavor: u16,
    pods_at: Vec<(u32, u64)>,
    admitted_at: Time,
    last_ckpt: Option<Time>,
    borrowed: bool,
    preempted_by: Vec<u32>,
    victims_left: u32,
    preemptor: Option<u32>,
    on_loan: bool,
    /// Admitted by borrowing through a reservation: not reclaimable.
    protected: bool,
    /// How much longer (percent) it runs split across racks (`Workload::split_slowdown_pct`,
    /// else `Options::split_slowdown_pct`).
    split_pct: u32,
    /// Waits for one rack, though it does not require one: split across racks it would run
    /// longer (`split_pct`), which costs more than the wait.
    waits_for_rack: bool,
    /// Runs split across racks: its expected duration is stretched by this percentage.
    stretch_pct: u32,
}

impl Job {
    fn gpus(&self) -> u64 {
        u64::from(self.pods) * u64::from(self.g)
    }
    /// The pool level its pods must share one domain of (required, or waited for).
    fn within(&self) -> Option<usize> {
        self.topology
            .or(self.waits_for_rack.then_some(Topology::Rack))
            .map(Topology::level)
    }
    /// The pool level its pods must share by its spec alone (`Workload::topology`).
    fn required_within(&self) -> Option<usize> {
        self.topology.map(Topology::level)
    }
    fn key(&self, idx: u32) -> PKey {
        (Reverse(self.prio), self.order, self.seq, idx)
    }
    fn end(&self) -> Option<Time> {
        self.expected.map(|e| self.admitted_at + e)
    }
}

#[derive(Debug, Clone, Copy)]
struct Quota {
    nominal: u64,
    borrow: Option<u64>,
    lend: u64,
}

impl Quota {
    fn pooled(&self, usage: u64) -> u64 {
        usage.saturating_sub(self.nominal - self.lend)
    }
}

#[derive(Debug, Clone)]
struct QueueState {
    name: String,
    /// The root of its cohort tree: whose queues it reclaims from, is measured against for
    /// fairness, and shares drains with.
    cohort: Option<u32>,
    /// The cohort its lent and borrowed GPUs are pooled in (its own; `cohort` is that tree's
    /// root).
    pool: Option<u32>,
    weight: f64,
    /// `StopPolicy::Hold` or `HoldAndDrain`: its waiting work is not tried, and is kept out of
    /// the indexes of pending work (`pend_add`), so it asks nothing of anyone. Fixed for the
    /// scheduler's life (a change rebuilds it).
    stop: StopPolicy,
    /// What its waiting work may preempt (`QueueSpec::preemption`).
    preemption: PreemptionPolicy,
    quota: Vec<Option<Quota>>,
    usage: Vec<u64>,
    pending: BTreeSet<PKey>,
    running: BTreeSet<(i32, u32)>,
    dirty: bool,
    /// GPUs of its pending workloads (all flavors; none while it is held).
    pending_gpus: u64,
    /// GPUs it is owed when its whole cohort is saturated (see `Scheduler::accrue`).
    entitled: f64,
    /// Time-averaged GPU-seconds it was owed and did not get (negative: got more), decayed.
    deficit: f64,
    /// At the end of the last cycle: saturated, and GPUs in use (all flavors).
    saturated: bool,
    used: u64,
    /// GPU-seconds it used, decayed with the multifactor half-life (`Options::multifactor`).
    decayed_use: f64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fit {
    No,
    Nominal,
    Borrow,
}

/// Nodes set aside this cycle for the head-of-line gang of a flavor.
#[derive(Debug, Clone, Default)]
struct Reservation {
    nodes: Vec<u32>,
    shadow: Option<Time>,
    /// Queue of a holder blocked by quota: others sharing that quota may only take what ends
    /// before `quota_shadow`.
    quota_queue: Option<u32>,
    quota_shadow: Option<Time>,
    /// The holder asks only for its own nominal quota, which the cohort must give back.
    quota_guaranteed: bool,
    /// The holder queue's fair-share path when the reservation was made.
    holder_path: FairPath,
    /// The holder's claim binds the whole cohort (see `Scheduler::drains`).
    drain: bool,
}

/// What one queue holds right now (for `ferry get queues` and tests).
#[derive(Debug, Clone, PartialEq)]
pub struct QueueUsage {
    /// Queue name.
    pub name: String,
    /// GPUs charged per flavor (admitted and nominated workloads).
    pub usage: Vec<(String, u64)>,
    /// Workloads waiting.
    pub pending: usize,
    /// Workloads admitted and not yet finished or told to stop.
    pub running: usize,
    /// Whether it admits work (`QueueSpec::stop_policy`).
    pub stop_policy: StopPolicy,
    /// GPUs it uses beyond its nominal quota (all flavors) over its fair-share weight: the
    /// lower, the sooner its work is tried against its siblings' (Kueue's `weightedShare`,
    /// in GPUs rather than a fraction of what the cohort lends).
    pub weighted_share: f64,
}

/// What one cohort's subtree holds right now (for `ferry get cohorts` and tests): how a
/// department stands against its siblings in fair sharing.
#[derive(Debug, Clone, PartialEq)]
pub struct CohortUsage {
    /// Cohort name.
    pub name: String,
    /// The cohort it borrows from (`None`: a root).
    pub parent: Option<String>,
    /// GPUs its subtree's queues use, per flavor.
    pub usage: Vec<(String, u64)>,
    /// Nominal GPUs of its subtree (its own, its child cohorts' and its queues'), per flavor.
    pub nominal: Vec<(String, u64)>,
    /// Its fair-share weight against its siblings.
    pub weight: f64,
    /// GPUs its subtree uses beyond its nominal GPUs (all flavors) over its weight, as
    /// [`QueueUsage::weighted_share`].
    pub weighted_share: f64,
}

/// A blocked workload first in line for a flavor's GPUs, and when the scheduler expects it
/// to start: what a user waiting for it wants to know (Slurm's `squeue --start`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExpectedStart {
    /// Workload id.
    pub id: String,
    /// Flavor whose GPUs are reserved for it.
    pub flavor: String,
    /// When the running work in its way ends, by its expected ends (and, for a workload
    /// blocked by quota, when that quota frees up); `None` when some of that work has no
    /// expected end.
    pub at: Option<Time>,
}

/// Ferry's scheduler state machine.
#[derive(Debug, Clone)]
pub struct Scheduler {
    opts: Options,
    /// Each priority class's value, and whether its work preempts lower-priority work.
    prio: HashMap<String, (i32, bool)>,
    pools: Vec<Pool>,
    pool_idx: HashMap<String, u16>,
    queues: Vec<QueueState>,
    queue_idx: HashMap<String, u32>,
    cohorts: Vec<Cohort>,
    jobs: Vec<Option<Job>>,
    ids: HashMap<String, u32>,
    seq: u64,
    /// Persistent head-of-line holder per flavor.
    holder: Vec<Option<u32>>,
    /// Running jobs with a known end, per flavor.
    ends: Vec<BTreeSet<(Time, u32)>>,
    /// Running jobs without one, per flavor: while any runs, a blocked gang's start may be
    /// unknown rather than never.
    endless: Vec<u32>,
    /// Nominated jobs whose victims are all gone.
    ready: Vec<u32>,
    /// Running jobs on lent reserved nodes, per flavor.
    loans: Vec<BTreeSet<u32>>,
    /// Pending jobs with a known expected duration, longest first (critical-path pass).
    long_pending: BTreeSet<(Reverse<u64>, u32)>,
    /// GPU-seconds of pending work with a known expected duration.
    pending_work: f64,
    /// Every pending job by priority, then age (who a critical job must not pass).
    by_age: BTreeSet<(Reverse<i32>, Time, u32)>,
    /// How many pending jobs (those in `by_age`) ask for each GPU count: the largest tells
    /// whether a long job may pass on the critical path's lower bar for small jobs.
    pending_sizes: BTreeMap<u64, u32>,
    /// GPUs of the whole cluster.
    total_gpus: f64,
    /// Queues that already tried a fair-sharing preemption this cycle (one try each).
    fair_tried: Vec<bool>,
    /// When deficits were last brought up to date.
    last_accrual: Option<Time>,
    /// This cycle's critical-path jobs (`critical_jobs`): deficits do not hold them back.
    critical: Vec<u32>,
    /// Per flavor, the holder whose reservation the last cycle made and when it is expected
    /// to start (`None`: some work in its way has no expected end).
    next_start: Vec<Option<(u32, Option<Time>)>>,
}

impl Scheduler {
    fn max_quota(&self, q: u32, f: usize) -> u64 {
        let qs = &self.queues[q as usize];
        let Some(qq) = qs.quota[f] else { return 0 };
        match qs.pool {
            None => qq.nominal,
            Some(c) => {
                let others = room(&self.cohorts, c, f) - qq.lend;
                qq.nominal + qq.borrow.unwrap_or(others).min(others)
            }
        }
    }

    fn quota_fit(&self, q: u32, f: usize, r: u64, freed: &[(u32, u64)]) -> Fit {
        let qs = &self.queues[q as usize];
        let Some(qq) = qs.quota[f] else {
            return Fit::No;
        };
        let usage_of = |x: u32| {
            let base = self.queues[x as usize].usage[f];
            base - freed
                .iter()
                .filter(|(y, _)| *y == x)
                .map(|(_, a)| a)
                .sum::<u64>()
        };
        let u = usage_of(q);
        let new = u + r;
        let Some(c) = qs.pool else {
            return if new <= qq.nominal {
                Fit::Nominal
            } else {
                Fit::No
            };
        };
        if let Some(b) = qq.borrow
            && new > qq.nominal + b
        {
            return Fit::No;
        }
        let fits = if freed.is_empty() {
            self.binding_cohort(f, c, qq.pooled(u), qq.pooled(new))
                .is_none()
        } else {
            // What each cohort pools changes with every queue the victims free GPUs of.
            let mut changes: Vec<(u32, i64)> = Vec::new();
            let mut seen: Vec<u32> = Vec::new();
            for x in freed.iter().map(|(x, _)| *x).chain([q]) {
                if seen.contains(&x) {
                    continue;
                }
                seen.push(x);
                let xs = &self.queues[x as usize];
                if let (Some(p), Some(xq)) = (xs.pool, xs.quota[f]) {
                    let after = if x == q { new } else { usage_of(x) };
                    let d = xq.pooled(after) as i64 - xq.pooled(xs.usage[f]) as i64;
                    Self::add_change(&mut changes, p, d);
                }
            }
            self.changes_fit(f, changes)
        };
        if !fits {
            Fit::No
        } else if new <= qq.nominal {
            Fit::Nominal
        } else {
            Fit::Borrow
        }
    }

    /// Indexes pending job `j` as work waiting to run (by age, by length, its GPUs and
    /// GPU-seconds), unless its queue is held: held work waits in its queue (`pending`) but
    /// no critical path, fairness or priority counts it.
    fn pend_add(&mut self, j: u32) {
        let job = self.jobs[j as usize].as_ref().expect("job exists");
        if !self.queues[job.queue as usize].stop.is_none() {
            return;
        }
        self.queues[job.queue as usize].pending_gpus += job.gpus();
        if self.by_age.insert((Reverse(job.prio), job.created, j)) {
            *self.pending_sizes.entry(job.gpus()).or_default() += 1;
        }
        if let Some(e) = job.expected {
            self.pending_work += (e * job.gpus()) as f64;
            self.long_pending.insert((Reverse(e), j));
        }
    }

    fn pend_remove(&mut self, j: u32) {
        let job = self.jobs[j as usize].as_ref().expect("job exists");
        let qs = &mut self.queues[job.queue as usize];
        if !qs.stop.is_none() {
            return;
        }
        qs.pending_gpus = qs.pending_gpus.saturating_sub(job.gpus());
        if self.by_age.remove(&(Reverse(job.prio), job.created, j))
            && let Some(n) = self.pending_sizes.get_mut(&job.gpus())
        {
            *n -= 1;
            if *n == 0 {
                self.pending_sizes.remove(&job.gpus());
            }
        }
        if let Some(e) = job.expected
            && self.long_pending.remove(&(Reverse(e), j))
        {
            self.pending_work = (self.pending_work - (e * job.gpus()) as f64).max(0.0);
        }
    }

    fn admit(
        &mut self,
        j: u32,
        f: usize,
        plan: &[(u32, u32)],
        fit: Fit,
        now: Time,
        out: &mut Vec<Decision>,
    ) {
        let job = self.jobs[j as usize].as_ref().expect("job exists");
        let (q, g, key, gpus, prio) = (job.queue, job.g, job.key(j), job.gpus(), job.prio);
        let pods = self.pools[f].take(plan, g);
        self.queues[q as usize].pending.remove(&key);
        self.pend_remove(j);
        self.charge(q, f, gpus as i64);
        let protect = fit == Fit::Borrow && self.drains(j, f);
        self.jobs[j as usize]
            .as_mut()
            .expect("job exists")
            .protected = protect;
        self.start(j, f, pods, fit == Fit::Borrow, now, out);
        self.queues[q as usize].running.insert((prio, j));
    }

    fn start(
        &mut self,
        j: u32,
        f: usize,
        pods: Vec<(u32, u64)>,
        borrowed: bool,
        now: Time,
        out: &mut Vec<Decision>,
    ) {
        let pool = &self.pools[f];
        let placement = pods
            .iter()
            .map(|(n, m)| PodPlacement {
                node: pool.nodes[*n as usize].name.clone(),
                gpus: bits(*m),
            })
            .collect();
        let flavor = pool.name.clone();
        self.mark_running(j, f, pods, now, borrowed);
        let job = self.jobs[j as usize].as_ref().expect("job exists");
        out.push(Decision::Admit {
            id: job.id.clone(),
            flavor,
            placement,
        });
        if self.holder.contains(&Some(j)) {
            // Work held back by this reservation may now run.
            for h in &mut self.holder {
                if *h == Some(j) {
                    *h = None;
                }
            }
            self.mark_all_dirty();
        }
    }

    /// Records `j` as running on `pods` of flavor `f` since `at` (its end, if known, indexed).
    fn mark_running(&mut self, j: u32, f: usize, pods: Vec<(u32, u64)>, at: Time, borrowed: bool) {
        let stretch = self.split_stretch(j, f, pods.iter().map(|&(n, _)| n));
        let job = self.jobs[j as usize].as_mut().expect("job exists");
        job.stretch(stretch);
        job.waits_for_rack = false;
        job.state = St::Running;
        job.flavor = f as u16;
        job.pods_at = pods;
        job.admitted_at = at;
        job.borrowed = borrowed;
        let end = job.end();
        self.track_end(f, j, end, true);
    }

    /// Indexes running job `j`'s end in flavor `f` (or counts it among those without one);
    /// with `running` false, takes it out again.
    fn track_end(&mut self, f: usize, j: u32, end: Option<Time>, running: bool) {
        match (end, running) {
            (Some(e), true) => {
                self.ends[f].insert((e, j));
            }
            (Some(e), false) => {
                self.ends[f].remove(&(e, j));
            }
            (None, true) => self.endless[f] += 1,
            (None, false) => self.endless[f] -= 1,
        }
    }

    /// Flavors a job may use, in preference order.
    fn flavors_of(&self, j: u32) -> Vec<usize> {
        let job = self.jobs[j as usize].as_ref().expect("job exists");
        job.flavors.iter().map(|&f| usize::from(f)).collect()
    }

    /// Usage of every queue (GPUs charged per flavor, pending and running counts).
    pub fn queue_usage(&self) -> Vec<QueueUsage> {
        self.queues
            .iter()
            .enumerate()
            .map(|(i, q)| QueueUsage {
                name: q.name.clone(),
                usage: self
                    .pools
                    .iter()
                    .zip(&q.usage)
                    .map(|(p, u)| (p.name.clone(), *u))
                    .collect(),
                pending: q.pending.len(),
                running: q.running.len(),
                stop_policy: q.stop,
                weighted_share: self.weighted_share(Side::Queue(i as u32)),
            })
            .collect()
    }

    /// What every cohort's subtree holds (a flat cohort's: its queues').
    pub fn cohort_usage(&self) -> Vec<CohortUsage> {
        let per_flavor = |v: &[u64]| -> Vec<(String, u64)> {
            self.pools
                .iter()
                .zip(v)
                .map(|(p, &u)| (p.name.clone(), u))
                .collect()
        };
        self.cohorts
            .iter()
            .enumerate()
            .map(|(c, co)| CohortUsage {
                name: co.name.clone(),
                parent: co.parent.map(|p| self.cohorts[p as usize].name.clone()),
                usage: per_flavor(&co.usage),
                nominal: per_flavor(&co.nominal),
                weight: co.weight,
                weighted_share: self.weighted_share(Side::Cohort(c as u32)),
            })
            .collect()
    }

    /// Nominal quota, borrowing limit (resolved against the cohort) per queue and flavor.
    pub fn quota_limits(&self, queue: &str, flavor: &str) -> Option<(u64, u64)> {
        let q = *self.queue_idx.get(queue)?;
        let f = *self.pool_idx.get(flavor)? as usize;
        let qq = self.queues[q as usize].quota[f]?;
        Some((qq.nominal, self.max_quota(q, f)))
    }

    /// Id of each flavor's reservation holder (the blocked workload the scheduler drains nodes
    /// for), so a simulator or operator can tell whom waiting work is queued behind.
    pub fn holders(&self) -> Vec<Option<&str>> {
        self.holder
            .iter()
            .map(|h| {
                h.and_then(|j| self.jobs[j as usize].as_ref())
                    .map(|job| job.id.as_str())
            })
            .collect()
    }

    /// Each flavor's reservation holder as of the last cycle, with its expected start (the jobs
    /// behind it: `forecast`).
    pub fn expected_starts(&self) -> Vec<ExpectedStart> {
        self.holder_starts()
            .map(|(id, f, at)| ExpectedStart {
                id: id.to_owned(),
                flavor: self.pools[f].name.clone(),
                at,
            })
            .collect()
    }

    /// `expected_starts` without copies, for the simulator's every cycle: (id, flavor, start).
    pub(crate) fn holder_starts(&self) -> impl Iterator<Item = (&str, usize, Option<Time>)> {
        self.next_start.iter().enumerate().filter_map(|(f, s)| {
            let (j, at) = (*s)?;
            let job = self.jobs[j as usize].as_ref()?;
            (job.state == St::Pending).then_some((job.id.as_str(), f, at))
        })
    }

    /// The workloads waiting in `queue`, in the order the scheduler tries them (priority, then
    /// duration-weighted age): who is ahead of whom within one team's queue, as Kueue's pending
    /// workloads view shows it. `None` for a queue it does not know.
    pub fn pending_order(&self, queue: &str) -> Option<impl Iterator<Item = &str>> {
        let q = *self.queue_idx.get(queue)?;
        Some(
            self.queues[q as usize]
                .pending
                .iter()
                .filter_map(|&(.., j)| self.jobs[j as usize].as_ref().map(|job| job.id.as_str())),
        )
    }

    /// Number of workloads waiting in all queues.
    pub fn pending_len(&self) -> usize {
        self.queues.iter().map(|q| q.pending.len()).sum()
    }

    /// The options this scheduler runs with.
    pub fn options(&self) -> &Options {
        &self.opts
    }
}

/// Why a victim may be taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// Lower-class work of the preemptor's own queue.
    Priority,
    /// Lent quota taken back for its owner (or by fair sharing).
    Reclaim,
    /// Lower-class borrowed work of another cohort member, taken by a job that must borrow
    /// (`PreemptionPolicy::borrow_within_cohort`).
    Borrow,
    /// Work on the preemptor's reserved nodes on loan.
    Loan,
}

#[cfg(test)]
mod tests;
