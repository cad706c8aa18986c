//! The scheduler: a deterministic state machine the control plane drives.
//!
//! Inputs are events (`submit`, `finished`, `evicted`, `checkpointed`); outputs are the
//! decisions returned by `cycle`. Nothing here reads a clock or touches a process.

mod fairness;
mod preempt;
mod reserve;

use std::cmp::Reverse;
use std::collections::{BTreeSet, BinaryHeap, HashMap};
use std::ops::Bound;

use crate::config::{
    ANY_FLAVOR, Cluster, Decision, Options, PodPlacement, PriorityClass, QueueSpec, Time, Workload,
};
use crate::error::{Result, SchedError};
use crate::pool::{NodeDesc, Pool, bits};

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
    created: Time,
    /// Sort key within its priority (see `order_of`).
    order: u64,
    seq: u64,
    pods: u32,
    g: u32,
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
}

impl Job {
    fn gpus(&self) -> u64 {
        u64::from(self.pods) * u64::from(self.g)
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
    cohort: Option<u32>,
    weight: f64,
    quota: Vec<Option<Quota>>,
    usage: Vec<u64>,
    pending: BTreeSet<PKey>,
    running: BTreeSet<(i32, u32)>,
    dirty: bool,
    /// GPUs of its pending workloads (all flavors).
    pending_gpus: u64,
    /// GPUs it is owed when its whole cohort is saturated (see `Scheduler::accrue`).
    entitled: f64,
    /// Time-averaged GPU-seconds it was owed and did not get (negative: got more), decayed.
    deficit: f64,
    /// At the end of the last cycle: saturated, and GPUs in use (all flavors).
    saturated: bool,
    used: u64,
}

#[derive(Debug, Clone)]
struct Cohort {
    members: Vec<u32>,
    cap: Vec<u64>,
    used: Vec<u64>,
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
    /// The holder queue's weighted borrowed share when the reservation was made.
    holder_share: u64,
    /// The holder's claim binds the whole cohort (see `Scheduler::drains`).
    drain: bool,
}

/// What one queue holds right now (for `ferry get queues` and tests).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueUsage {
    /// Queue name.
    pub name: String,
    /// GPUs charged per flavor (admitted and nominated workloads).
    pub usage: Vec<(String, u64)>,
    /// Workloads waiting.
    pub pending: usize,
    /// Workloads admitted and not yet finished or evicted.
    pub running: usize,
}

/// Ferry's scheduler state machine.
#[derive(Debug, Clone)]
pub struct Scheduler {
    opts: Options,
    prio: HashMap<String, i32>,
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
    /// GPUs of the whole cluster.
    total_gpus: f64,
    /// Queues that already tried a fair-sharing preemption this cycle (one try each).
    fair_tried: Vec<bool>,
    /// When deficits were last brought up to date.
    last_accrual: Option<Time>,
    /// This cycle's critical-path jobs (`critical_jobs`): deficits do not hold them back.
    critical: Vec<u32>,
}

fn cfg_err(
    field: impl Into<String>,
    problem: impl Into<String>,
    fix: impl Into<String>,
) -> SchedError {
    SchedError::InvalidConfig {
        field: field.into(),
        problem: problem.into(),
        fix: fix.into(),
    }
}

impl Scheduler {
    /// Validates the configuration and builds an empty scheduler with Ferry's default policy.
    pub fn new(
        cluster: Cluster,
        queues: Vec<QueueSpec>,
        priorities: Vec<PriorityClass>,
    ) -> Result<Scheduler> {
        Scheduler::with_options(cluster, queues, priorities, Options::default())
    }

    /// Like `new`, with explicit policy switches (the simulator's baselines use these).
    pub fn with_options(
        cluster: Cluster,
        queues: Vec<QueueSpec>,
        priorities: Vec<PriorityClass>,
        opts: Options,
    ) -> Result<Scheduler> {
        let mut prio = HashMap::new();
        for (i, p) in priorities.iter().enumerate() {
            if prio.insert(p.name.clone(), p.value).is_some() {
                return Err(cfg_err(
                    format!("priorities[{i}].name"),
                    format!("priority class `{}` is defined twice", p.name),
                    "give each priority class a unique name",
                ));
            }
        }
        if cluster.nodes.is_empty() {
            return Err(cfg_err(
                "cluster.nodes",
                "the cluster has no nodes",
                "list at least one node",
            ));
        }
        let mut by_flavor: Vec<(String, Vec<NodeDesc>)> = Vec::new();
        let mut names = std::collections::HashSet::new();
        for (i, n) in cluster.nodes.iter().enumerate() {
            if n.gpus == 0 || n.gpus > 64 {
                return Err(cfg_err(
                    format!("cluster.nodes[{i}].gpus"),
                    format!("node `{}` has {} GPUs", n.name, n.gpus),
                    "give every node between 1 and 64 GPUs",
                ));
            }
            if !names.insert(n.name.clone()) {
                return Err(cfg_err(
                    format!("cluster.nodes[{i}].name"),
                    format!("node name `{}` is used twice", n.name),
                    "give each node a unique name",
                ));
            }
            let entry = (
                n.name.clone(),
                n.gpus,
                n.nvlink_domain.clone(),
                n.rack.clone(),
            );
            match by_flavor.iter_mut().find(|(f, _)| *f == n.flavor) {
                Some((_, v)) => v.push(entry),
                None => by_flavor.push((n.flavor.clone(), vec![entry])),
            }
        }
        let pools: Vec<Pool> = by_flavor
            .into_iter()
            .map(|(f, n)| Pool::new(f, n))
            .collect();
        let pool_idx: HashMap<String, u16> = pools
            .iter()
            .enumerate()
            .map(|(i, p)| (p.name.clone(), i as u16))
            .collect();
        let nf = pools.len();
        let mut cohort_idx: HashMap<String, u32> = HashMap::new();
        let mut cohorts: Vec<Cohort> = Vec::new();
        let mut qs = Vec::new();
        let mut queue_idx = HashMap::new();
        for (i, q) in queues.iter().enumerate() {
            if queue_idx.insert(q.name.clone(), i as u32).is_some() {
                return Err(cfg_err(
                    format!("queues[{i}].name"),
                    format!("queue `{}` is defined twice", q.name),
                    "give each queue a unique name",
                ));
            }
            if !(q.fair_share_weight.is_finite() && q.fair_share_weight > 0.0) {
                return Err(cfg_err(
                    format!("queues[{i}].fairShareWeight"),
                    format!(
                        "weight {} of queue `{}` is not a positive number",
                        q.fair_share_weight, q.name
                    ),
                    "set a weight greater than 0 (default 1)",
                ));
            }
            let mut quota = vec![None; nf];
            // Named flavors first; an `any` entry then covers every flavor not named.
            let order: Vec<usize> = (0..q.quotas.len())
                .filter(|&j| q.quotas[j].flavor != ANY_FLAVOR)
                .chain((0..q.quotas.len()).filter(|&j| q.quotas[j].flavor == ANY_FLAVOR))
                .collect();
            let mut seen_any = false;
            for j in order {
                let fq = &q.quotas[j];
                let field = format!("queues[{i}].quotas[{j}]");
                if fq.flavor == ANY_FLAVOR && seen_any {
                    return Err(cfg_err(
                        format!("{field}.flavor"),
                        format!("flavor `{ANY_FLAVOR}` appears twice in queue `{}`", q.name),
                        "merge the two quota entries",
                    ));
                }
                seen_any |= fq.flavor == ANY_FLAVOR;
                let targets: Vec<usize> = if fq.flavor == ANY_FLAVOR {
                    (0..nf).filter(|&f| quota[f].is_none()).collect()
                } else {
                    let Some(&f) = pool_idx.get(&fq.flavor) else {
                        let known: Vec<_> = pools.iter().map(|p| p.name.as_str()).collect();
                        return Err(cfg_err(
                            format!("{field}.flavor"),
                            format!(
                                "flavor `{}` of queue `{}` matches no node",
                                fq.flavor, q.name
                            ),
                            format!(
                                "use one of the cluster's flavors ({}) or `{ANY_FLAVOR}`",
                                known.join(", ")
                            ),
                        ));
                    };
                    if quota[usize::from(f)].is_some() {
                        return Err(cfg_err(
                            format!("{field}.flavor"),
                            format!("flavor `{}` appears twice in queue `{}`", fq.flavor, q.name),
                            "merge the two quota entries",
                        ));
                    }
                    vec![usize::from(f)]
                };
                let lend = u64::from(fq.lending_limit.unwrap_or(fq.nominal));
                if lend > u64::from(fq.nominal) {
                    return Err(cfg_err(
                        format!("{field}.lendingLimit"),
                        format!(
                            "lending limit {lend} exceeds the nominal quota {}",
                            fq.nominal
                        ),
                        format!("set lendingLimit to at most {}", fq.nominal),
                    ));
                }
                if q.cohort.is_none() && fq.borrowing_limit.is_some_and(|b| b > 0) {
                    return Err(cfg_err(
                        format!("{field}.borrowingLimit"),
                        format!(
                            "queue `{}` has a borrowing limit but no cohort to borrow from",
                            q.name
                        ),
                        format!("set queues[{i}].cohort or remove borrowingLimit"),
                    ));
                }
                for t in targets {
                    quota[t] = Some(Quota {
                        nominal: u64::from(fq.nominal),
                        borrow: fq.borrowing_limit.map(u64::from),
                        lend,
                    });
                }
            }
            let cohort = q.cohort.as_ref().map(|c| {
                let next = cohorts.len() as u32;
                let idx = *cohort_idx.entry(c.clone()).or_insert(next);
                if idx == next {
                    cohorts.push(Cohort {
                        members: vec![],
                        cap: vec![0; nf],
                        used: vec![0; nf],
                    });
                }
                cohorts[idx as usize].members.push(i as u32);
                for (f, qq) in quota.iter().enumerate() {
                    if let Some(qq) = qq {
                        cohorts[idx as usize].cap[f] += qq.lend;
                    }
                }
                idx
            });
            qs.push(QueueState {
                name: q.name.clone(),
                cohort,
                weight: q.fair_share_weight,
                quota,
                usage: vec![0; nf],
                pending: BTreeSet::new(),
                running: BTreeSet::new(),
                dirty: false,
                pending_gpus: 0,
                entitled: 0.0,
                deficit: 0.0,
                saturated: false,
                used: 0,
            });
        }
        // A cohort named by one queue only is a typo or a missing queue: nobody to borrow from.
        for (i, q) in queues.iter().enumerate() {
            let Some(c) = &q.cohort else { continue };
            if cohorts[cohort_idx[c] as usize].members.len() < 2 {
                let mut known: Vec<&str> = cohort_idx
                    .iter()
                    .filter(|(_, k)| cohorts[**k as usize].members.len() >= 2)
                    .map(|(n, _)| n.as_str())
                    .collect();
                known.sort();
                return Err(cfg_err(
                    format!("queues[{i}].cohort"),
                    format!(
                        "cohort `{c}` of queue `{}` is unknown: no other queue is in it",
                        q.name
                    ),
                    if known.is_empty() {
                        "put at least two queues in a cohort, or remove the cohort".to_string()
                    } else {
                        format!(
                            "use an existing cohort ({}) or remove the cohort",
                            known.join(", ")
                        )
                    },
                ));
            }
        }
        // Borrowing limits must be satisfiable by what the rest of the cohort lends.
        for (i, q) in qs.iter().enumerate() {
            let Some(c) = q.cohort else { continue };
            for (f, qq) in q.quota.iter().enumerate() {
                let Some(qq) = qq else { continue };
                let others = cohorts[c as usize].cap[f] - qq.lend;
                if let Some(b) = qq.borrow
                    && b > others
                {
                    let j = queues[i]
                        .quotas
                        .iter()
                        .position(|x| x.flavor == pools[f].name)
                        .unwrap_or(0);
                    return Err(cfg_err(
                        format!("queues[{i}].quotas[{j}].borrowingLimit"),
                        format!(
                            "queue `{}` may borrow {b} `{}` GPUs but the rest of cohort `{}` lends only {others}",
                            q.name,
                            pools[f].name,
                            queues[i].cohort.as_deref().unwrap_or_default()
                        ),
                        format!(
                            "lower borrowingLimit to at most {others} or add lending quota to the cohort"
                        ),
                    ));
                }
            }
        }
        // Entitlement in GPUs when the whole cohort is saturated: the nominal quota, plus a
        // weighted part of the cohort's GPUs no quota covers, scaled down alike when quotas add
        // up to more than the cohort's GPUs (the simulator's `entitlements`, per cohort).
        for co in &cohorts {
            let capacity: f64 = (0..nf)
                .filter(|&f| {
                    co.members
                        .iter()
                        .any(|&m| qs[m as usize].quota[f].is_some())
                })
                .map(|f| pools[f].nodes.iter().map(|n| f64::from(n.cap)).sum::<f64>())
                .sum();
            let nominal = |m: u32| -> f64 {
                qs[m as usize]
                    .quota
                    .iter()
                    .flatten()
                    .map(|x| x.nominal as f64)
                    .sum()
            };
            let total: f64 = co.members.iter().map(|&m| nominal(m)).sum();
            let weights: f64 = co.members.iter().map(|&m| qs[m as usize].weight).sum();
            let scale = if total > capacity && total > 0.0 {
                capacity / total
            } else {
                1.0
            };
            let spare = (capacity - total).max(0.0);
            let owed: Vec<(u32, f64)> = co
                .members
                .iter()
                .map(|&m| {
                    (
                        m,
                        (nominal(m) + qs[m as usize].weight / weights * spare) * scale,
                    )
                })
                .collect();
            for (m, e) in owed {
                qs[m as usize].entitled = e;
            }
        }
        Ok(Scheduler {
            last_accrual: None,
            critical: Vec::new(),
            opts,
            prio,
            long_pending: BTreeSet::new(),
            pending_work: 0.0,
            by_age: BTreeSet::new(),
            total_gpus: pools
                .iter()
                .flat_map(|p| p.nodes.iter().map(|n| f64::from(n.cap)))
                .sum(),
            holder: vec![None; nf],
            ends: vec![BTreeSet::new(); nf],
            loans: vec![BTreeSet::new(); nf],
            pools,
            pool_idx,
            queues: qs,
            queue_idx,
            cohorts,
            jobs: Vec::new(),
            ids: HashMap::new(),
            seq: 0,
            ready: Vec::new(),
            fair_tried: Vec::new(),
        })
    }

    fn max_quota(&self, q: u32, f: usize) -> u64 {
        let qs = &self.queues[q as usize];
        let Some(qq) = qs.quota[f] else { return 0 };
        match qs.cohort {
            None => qq.nominal,
            Some(c) => {
                let others = self.cohorts[c as usize].cap[f] - qq.lend;
                qq.nominal + qq.borrow.unwrap_or(others).min(others)
            }
        }
    }

    /// Accepts a workload, or says why it could never run (so it is not stuck forever).
    pub fn submit(&mut self, w: Workload) -> Result<()> {
        let bad = |field: &str, problem: String, fix: String| SchedError::InvalidWorkload {
            id: w.id.clone(),
            field: field.to_string(),
            problem,
            fix,
        };
        if self.ids.contains_key(&w.id) {
            return Err(bad(
                "workload.id",
                format!("id `{}` is already known", w.id),
                "use a fresh id".into(),
            ));
        }
        let Some(&q) = self.queue_idx.get(&w.queue) else {
            let mut known: Vec<_> = self.queues.iter().map(|q| q.name.as_str()).collect();
            known.sort();
            return Err(bad(
                "workload.queue",
                format!("queue `{}` does not exist", w.queue),
                format!("create the queue or use one of: {}", known.join(", ")),
            ));
        };
        let prio = match &w.priority {
            None => 0,
            Some(p) => match self.prio.get(p) {
                Some(v) => *v,
                None => {
                    let mut known: Vec<_> = self.prio.keys().map(String::as_str).collect();
                    known.sort();
                    return Err(bad(
                        "workload.priority",
                        format!("priority class `{p}` does not exist"),
                        format!("use one of: {}", known.join(", ")),
                    ));
                }
            },
        };
        if w.pods == 0 || w.gpus_per_pod == 0 {
            return Err(bad(
                "workload.pods",
                format!(
                    "gang of {} pods x {} GPUs asks for nothing",
                    w.pods, w.gpus_per_pod
                ),
                "ask for at least one pod with at least one GPU".into(),
            ));
        }
        let flavor_req = match &w.flavor {
            None => None,
            Some(f) if f == ANY_FLAVOR => None,
            Some(f) => match self.pool_idx.get(f) {
                Some(i) => Some(*i),
                None => {
                    return Err(bad(
                        "workload.flavor",
                        format!("no node has flavor `{f}`"),
                        "use a flavor present in the cluster or leave it unset".into(),
                    ));
                }
            },
        };
        let flavors: Vec<usize> = match flavor_req {
            Some(f) => vec![f as usize],
            None => (0..self.pools.len())
                .filter(|&f| self.queues[q as usize].quota[f].is_some())
                .collect(),
        };
        let gpus = w.gpus();
        let mut why = Vec::new();
        let feasible: Vec<u16> = flavors
            .iter()
            .copied()
            .filter(|&f| {
                let p = &self.pools[f];
                let fit_nodes: u64 = p
                    .cap_hist
                    .iter()
                    .map(|(cap, count)| u64::from(cap / w.gpus_per_pod) * count)
                    .sum();
                let quota = self.max_quota(q, f);
                if fit_nodes < u64::from(w.pods) {
                    why.push(format!(
                        "flavor `{}` can host at most {fit_nodes} pods of {} GPUs",
                        p.name, w.gpus_per_pod
                    ));
                    false
                } else if quota < gpus {
                    why.push(format!(
                        "queue `{}` can use at most {quota} `{}` GPUs including borrowing",
                        w.queue, p.name
                    ));
                    false
                } else {
                    true
                }
            })
            .map(|f| f as u16)
            .collect();
        if feasible.is_empty() {
            if flavors.is_empty() {
                why.push(format!("queue `{}` has no quota for this flavor", w.queue));
            }
            return Err(bad(
                "workload.pods",
                format!(
                    "gang of {} pods x {} GPUs can never be admitted: {}",
                    w.pods,
                    w.gpus_per_pod,
                    why.join("; ")
                ),
                "shrink the gang, raise the queue's quota, or add nodes".into(),
            ));
        }
        let idx = self.jobs.len() as u32;
        self.seq += 1;
        let job = Job {
            id: w.id.clone(),
            queue: q,
            prio,
            created: w.created_at,
            order: 0,
            seq: self.seq,
            pods: w.pods,
            g: w.gpus_per_pod,
            flavors: feasible,
            expected: w.expected_duration_s,
            state: St::Pending,
            flavor: 0,
            pods_at: Vec::new(),
            admitted_at: 0,
            last_ckpt: None,
            borrowed: false,
            preempted_by: Vec::new(),
            victims_left: 0,
            preemptor: None,
            on_loan: false,
            protected: false,
        };
        let mut job = job;
        job.order = self.order_of(&job);
        let qs = &mut self.queues[q as usize];
        qs.pending.insert(job.key(idx));
        qs.dirty = true;
        self.jobs.push(Some(job));
        self.pend_add(idx);
        self.ids.insert(w.id, idx);
        Ok(())
    }

    /// Re-registers a workload that is already running on exactly `placement` (one entry per
    /// pod), as a restarted control plane finds it: no decision is emitted and nothing is
    /// preempted; its GPUs and quota are charged as if it had been admitted at `admitted_at`.
    pub fn restore(
        &mut self,
        w: Workload,
        placement: &[PodPlacement],
        admitted_at: Time,
    ) -> Result<()> {
        let id = w.id.clone();
        let bad = |problem: String| SchedError::InvalidWorkload {
            id: id.clone(),
            field: "placement".into(),
            problem,
            fix: "restore a workload only where it really runs, on GPUs nobody else holds".into(),
        };
        if placement.len() != w.pods as usize {
            return Err(bad(format!(
                "{} pods placed for a gang of {}",
                placement.len(),
                w.pods
            )));
        }
        // Resolve every pod to (flavor, node, mask) before changing anything.
        let mut flavor: Option<usize> = None;
        let mut pods: Vec<(u32, u64)> = Vec::with_capacity(placement.len());
        for p in placement {
            let found = self.pools.iter().enumerate().find_map(|(f, pool)| {
                pool.nodes
                    .iter()
                    .position(|n| n.name == p.node)
                    .map(|n| (f, n as u32))
            });
            let Some((f, n)) = found else {
                return Err(bad(format!("node `{}` is not in the cluster", p.node)));
            };
            if flavor.is_some_and(|x| x != f) {
                return Err(bad("a gang's pods span two flavors".into()));
            }
            flavor = Some(f);
            let node = &self.pools[f].nodes[n as usize];
            if p.gpus.len() != w.gpus_per_pod as usize {
                return Err(bad(format!(
                    "pod on `{}` lists {} GPUs, the gang asks {} per pod",
                    p.node,
                    p.gpus.len(),
                    w.gpus_per_pod
                )));
            }
            let mut mask = 0u64;
            for &g in &p.gpus {
                if g >= node.cap {
                    return Err(bad(format!("node `{}` has no GPU {g}", p.node)));
                }
                mask |= 1u64 << g;
            }
            let claimed: u64 = pods
                .iter()
                .filter(|(node_ix, _)| *node_ix == n)
                .fold(0, |acc, (_, bits)| acc | bits);
            if node.free & mask != mask || claimed & mask != 0 {
                return Err(bad(format!(
                    "GPUs {:?} of node `{}` are already held",
                    p.gpus, p.node
                )));
            }
            pods.push((n, mask));
        }
        let f = flavor.ok_or_else(|| bad("an empty placement".into()))?;
        self.submit(w)?;
        let j = self.ids[&id];
        let job = self.jobs[j as usize].as_ref().expect("just submitted");
        if !job.flavors.contains(&(f as u16)) {
            let name = self.pools[f].name.clone();
            self.finished(&id)?;
            return Err(bad(format!(
                "its queue has no quota for flavor `{name}` where it runs"
            )));
        }
        let (q, key, gpus, prio) = (job.queue, job.key(j), job.gpus(), job.prio);
        for &(n, m) in &pods {
            let free = self.pools[f].nodes[n as usize].free & !m;
            self.pools[f].set_free(n, free);
        }
        self.queues[q as usize].pending.remove(&key);
        self.pend_remove(j);
        self.charge(q, f, gpus as i64);
        let qs = &self.queues[q as usize];
        let borrowed = qs.quota[f].is_some_and(|x| qs.usage[f] > x.nominal);
        self.mark_running(j, f, pods, admitted_at, borrowed);
        self.queues[q as usize].running.insert((prio, j));
        self.mark_all_dirty();
        Ok(())
    }

    /// Where a pending job sorts within its priority level: its creation time, pushed back by
    /// `Options::duration_weight` times its expected duration (unknown: by age alone).
    fn order_of(&self, job: &Job) -> u64 {
        let w = u64::from(self.opts.duration_weight);
        job.created
            .saturating_add(job.expected.unwrap_or(0).saturating_mul(w))
    }

    fn lookup(&self, id: &str, event: &'static str) -> Result<u32> {
        self.ids
            .get(id)
            .copied()
            .ok_or_else(|| SchedError::UnknownWorkload {
                id: id.to_string(),
                event,
                problem: "no such workload (never submitted, or already finished)".into(),
            })
    }

    /// Records that a running workload saved a checkpoint at `at` (victims lose least work).
    pub fn checkpointed(&mut self, id: &str, at: Time) -> Result<()> {
        let j = self.lookup(id, "checkpointed")?;
        let job = self.jobs[j as usize].as_mut().expect("indexed job exists");
        job.last_ckpt = Some(job.last_ckpt.map_or(at, |c| c.max(at)));
        Ok(())
    }

    /// Records a running workload's measured progress: it expects to run `remaining_s` more
    /// seconds from `now` (from its step rate). Its expected end moves there, so reservations
    /// are planned, and work backfilled, around when it will really end; a job submitted
    /// without an expected duration gets one.
    pub fn progress(&mut self, id: &str, now: Time, remaining_s: u64) -> Result<()> {
        let j = self.lookup(id, "progress")?;
        let job = self.jobs[j as usize].as_ref().expect("indexed job exists");
        if job.state != St::Running {
            return Err(SchedError::UnknownWorkload {
                id: id.to_string(),
                event: "progress",
                problem: "the workload is not running".into(),
            });
        }
        let expected = now.saturating_sub(job.admitted_at) + remaining_s.max(1);
        if self.set_running_expected(j, Some(expected)) {
            // A reservation's start (and what may backfill before it) depends on this end.
            self.mark_all_dirty();
        }
        Ok(())
    }

    /// Gives the running job `j` a new expected duration and keeps the index of running ends
    /// in step; returns whether its expected end moved.
    fn set_running_expected(&mut self, j: u32, expected: Option<u64>) -> bool {
        let job = self.jobs[j as usize].as_ref().expect("indexed job exists");
        let (f, old_end) = (job.flavor as usize, job.end());
        if let Some(e) = old_end {
            self.ends[f].remove(&(e, j));
        }
        let job = self.jobs[j as usize].as_mut().expect("indexed job exists");
        job.expected = expected;
        let end = job.end();
        if let Some(e) = end {
            self.ends[f].insert((e, j));
        }
        old_end != end
    }

    /// Replaces a workload's expected duration, as when its time limit is raised or cut after
    /// submit: a pending one re-sorts (duration weighting) and is backfilled by the new
    /// duration; a running one is expected to end `expected_s` after its admission (`None`:
    /// unknown, so reservations no longer count on its end). A measured pace
    /// (`Scheduler::progress`) is the better estimate for a running job; callers give this
    /// only while there is none.
    pub fn set_expected_duration(&mut self, id: &str, expected_s: Option<u64>) -> Result<()> {
        let j = self.lookup(id, "expected duration")?;
        let job = self.jobs[j as usize].as_ref().expect("indexed job exists");
        let expected_s = expected_s.map(|e| e.max(1));
        if job.expected == expected_s {
            return Ok(());
        }
        match job.state {
            St::Pending => {
                let (q, old_key) = (job.queue, job.key(j));
                self.pend_remove(j);
                self.queues[q as usize].pending.remove(&old_key);
                let mut job = self.jobs[j as usize].take().expect("indexed job exists");
                job.expected = expected_s;
                job.order = self.order_of(&job);
                self.queues[q as usize].pending.insert(job.key(j));
                self.jobs[j as usize] = Some(job);
                self.pend_add(j);
            }
            St::Running => {
                self.set_running_expected(j, expected_s);
            }
            // Not indexed by duration while it waits for victims or stops.
            St::Nominated | St::Evicting => {
                self.jobs[j as usize]
                    .as_mut()
                    .expect("indexed job exists")
                    .expected = expected_s;
            }
        }
        self.mark_all_dirty();
        Ok(())
    }

    fn charge(&mut self, q: u32, f: usize, delta: i64) {
        let qs = &mut self.queues[q as usize];
        let old = qs.usage[f];
        let new = old
            .checked_add_signed(delta)
            .expect("usage stays non-negative");
        qs.usage[f] = new;
        if let (Some(c), Some(qq)) = (qs.cohort, qs.quota[f]) {
            let co = &mut self.cohorts[c as usize];
            co.used[f] = co.used[f] + qq.pooled(new) - qq.pooled(old);
        }
    }

    fn mark_all_dirty(&mut self) {
        for q in &mut self.queues {
            q.dirty = true;
        }
    }

    /// Frees a running or evicting job's GPUs and quota bookkeeping.
    fn release_gpus(&mut self, j: u32) {
        let job = self.jobs[j as usize].as_mut().expect("job exists");
        let f = job.flavor as usize;
        let pods = std::mem::take(&mut job.pods_at);
        for (n, m) in pods {
            self.pools[f].release(n, m);
        }
    }

    fn stop_running(&mut self, j: u32) {
        // Quota and indexes of a running job (not its GPUs).
        let job = self.jobs[j as usize].as_ref().expect("job exists");
        let (q, f, gpus, prio, end) = (
            job.queue,
            job.flavor as usize,
            job.gpus(),
            job.prio,
            job.end(),
        );
        self.charge(q, f, -(gpus as i64));
        self.queues[q as usize].running.remove(&(prio, j));
        if let Some(e) = end {
            self.ends[f].remove(&(e, j));
        }
        self.loans[f].remove(&j);
    }

    fn victim_gone(&mut self, victim: u32) {
        let Some(p) = self.jobs[victim as usize]
            .as_mut()
            .and_then(|v| v.preemptor.take())
        else {
            return;
        };
        if let Some(pj) = self.jobs[p as usize].as_mut()
            && pj.state == St::Nominated
        {
            pj.victims_left -= 1;
            if pj.victims_left == 0 {
                self.ready.push(p);
            }
        }
    }

    /// The workload ended (completed, failed or cancelled) in any state; its GPUs are free.
    pub fn finished(&mut self, id: &str) -> Result<()> {
        let j = self.lookup(id, "finished")?;
        let state = self.jobs[j as usize].as_ref().expect("job exists").state;
        match state {
            St::Pending => {
                let job = self.jobs[j as usize].as_ref().expect("job exists");
                let key = job.key(j);
                self.queues[job.queue as usize].pending.remove(&key);
                self.pend_remove(j);
            }
            St::Nominated => {
                let job = self.jobs[j as usize].as_mut().expect("job exists");
                let (q, f, gpus) = (job.queue, job.flavor as usize, job.gpus());
                let pods = std::mem::take(&mut job.pods_at);
                for (n, m) in pods {
                    let node = &mut self.pools[f].nodes[n as usize];
                    let idle = m & node.held;
                    node.held &= !m;
                    node.nominated &= !m;
                    let free = node.free | idle;
                    self.pools[f].set_free(n, free);
                }
                self.ready.retain(|&r| r != j);
                self.charge(q, f, -(gpus as i64));
            }
            St::Running => {
                self.stop_running(j);
                self.release_gpus(j);
            }
            St::Evicting => {
                self.release_gpus(j);
                self.victim_gone(j);
            }
        }
        for h in &mut self.holder {
            if *h == Some(j) {
                *h = None;
            }
        }
        self.jobs[j as usize] = None;
        self.ids.remove(id);
        self.mark_all_dirty();
        Ok(())
    }

    /// A preempted workload's processes have exited: its GPUs go to the preemptor and it is requeued.
    pub fn evicted(&mut self, id: &str) -> Result<()> {
        let j = self.lookup(id, "evicted")?;
        let job = self.jobs[j as usize].as_ref().expect("job exists");
        if job.state != St::Evicting {
            return Err(SchedError::UnknownWorkload {
                id: id.to_string(),
                event: "evicted",
                problem: "the workload was not asked to stop by a Preempt decision".into(),
            });
        }
        self.release_gpus(j);
        self.victim_gone(j);
        let job = self.jobs[j as usize].as_mut().expect("job exists");
        job.state = St::Pending;
        job.borrowed = false;
        job.on_loan = false;
        job.protected = false;
        // Work up to the last checkpoint is kept: expect only the rest.
        if let (Some(e), Some(c)) = (job.expected, job.last_ckpt)
            && c >= job.admitted_at
        {
            job.expected = Some(e.saturating_sub(c - job.admitted_at).max(1));
        }
        let order = self.order_of(self.jobs[j as usize].as_ref().expect("job exists"));
        let job = self.jobs[j as usize].as_mut().expect("job exists");
        job.order = order;
        let (q, key) = (job.queue, job.key(j));
        self.queues[q as usize].pending.insert(key);
        self.pend_add(j);
        self.mark_all_dirty();
        Ok(())
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
        let Some(c) = qs.cohort else {
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
        let co = &self.cohorts[c as usize];
        let mut used = co.used[f];
        let mut seen: Vec<u32> = Vec::new();
        for (x, _) in freed {
            if seen.contains(x) {
                continue;
            }
            seen.push(*x);
            let xs = &self.queues[*x as usize];
            if xs.cohort == Some(c)
                && let Some(xq) = xs.quota[f]
            {
                used = used - xq.pooled(xs.usage[f]) + xq.pooled(usage_of(*x));
            }
        }
        used = used - qq.pooled(u) + qq.pooled(new);
        if used > co.cap[f] {
            Fit::No
        } else if new <= qq.nominal {
            Fit::Nominal
        } else {
            Fit::Borrow
        }
    }

    fn pend_add(&mut self, j: u32) {
        let job = self.jobs[j as usize].as_ref().expect("job exists");
        self.queues[job.queue as usize].pending_gpus += job.gpus();
        self.by_age.insert((Reverse(job.prio), job.created, j));
        if let Some(e) = job.expected {
            self.pending_work += (e * job.gpus()) as f64;
            self.long_pending.insert((Reverse(e), j));
        }
    }

    fn pend_remove(&mut self, j: u32) {
        let job = self.jobs[j as usize].as_ref().expect("job exists");
        let qs = &mut self.queues[job.queue as usize];
        qs.pending_gpus = qs.pending_gpus.saturating_sub(job.gpus());
        self.by_age.remove(&(Reverse(job.prio), job.created, j));
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
        let job = self.jobs[j as usize].as_mut().expect("job exists");
        job.state = St::Running;
        job.flavor = f as u16;
        job.pods_at = pods;
        job.admitted_at = at;
        job.borrowed = borrowed;
        if let Some(e) = job.end() {
            self.ends[f].insert((e, j));
        }
    }

    /// Flavors a job may use, in preference order.
    fn flavors_of(&self, j: u32) -> Vec<usize> {
        let job = self.jobs[j as usize].as_ref().expect("job exists");
        job.flavors.iter().map(|&f| usize::from(f)).collect()
    }

    /// Runs one scheduling pass at time `now` and returns what to start and what to stop.
    pub fn cycle(&mut self, now: Time) -> Vec<Decision> {
        let mut out = Vec::new();
        self.accrue(now);
        self.fair_tried.clear();
        self.fair_tried.resize(self.queues.len(), false);
        // Preemptors whose victims are gone start first, on the GPUs promised to them.
        for j in std::mem::take(&mut self.ready) {
            self.start_nominated(j, now, &mut out);
        }
        let mut budget = self.opts.max_candidates_per_cycle.max(1);
        let mut preempt_budget = self.opts.max_preemption_attempts_per_cycle;
        let mut resv: Vec<Option<Reservation>> = vec![None; self.pools.len()];
        // The persistent head-of-line holder of each flavor goes first.
        for f in 0..self.pools.len() {
            let Some(h) = self.holder[f] else { continue };
            // Whatever the outcome, the holder has had its turn (and its reservation, if blocked).
            self.try_one(h, now, &mut resv, &mut preempt_budget, &mut out, Some(f));
        }
        // Jobs on the critical path go next: deferring them would stretch the makespan.
        self.critical = self.critical_jobs(now);
        for j in self.critical.clone() {
            if budget == 0 {
                break;
            }
            budget -= 1;
            self.try_one(j, now, &mut resv, &mut preempt_budget, &mut out, None);
        }
        // Merge queue heads: fair share, then priority, then age.
        let mut heap: BinaryHeap<Reverse<(u64, PKey, u32)>> = BinaryHeap::new();
        let mut cursor: Vec<Option<PKey>> = vec![None; self.queues.len()];
        for q in 0..self.queues.len() as u32 {
            if self.queues[q as usize].dirty {
                self.push_next(q, None, &mut heap);
            }
        }
        let mut stopped = false;
        while let Some(Reverse((_, key, q))) = heap.pop() {
            if budget == 0 {
                stopped = true;
                break;
            }
            budget -= 1;
            cursor[q as usize] = Some(key);
            let j = key.3;
            let outcome = self.try_one(j, now, &mut resv, &mut preempt_budget, &mut out, None);
            if self.opts.strict_fifo && matches!(outcome, Outcome::Blocked) {
                // StrictFIFO: a blocked head blocks the rest of its queue.
                continue;
            }
            self.push_next(q, Some(key), &mut heap);
        }
        if !stopped {
            for q in &mut self.queues {
                q.dirty = false;
            }
        } else {
            // Queues whose scan completed are clean; the others resume next cycle.
            let open: Vec<u32> = heap.iter().map(|Reverse((_, _, q))| *q).collect();
            for (i, q) in self.queues.iter_mut().enumerate() {
                if !open.contains(&(i as u32)) && cursor[i].is_some() {
                    q.dirty = false;
                }
            }
        }
        for (f, r) in resv.into_iter().enumerate() {
            if let Some(r) = r {
                for n in r.nodes {
                    self.pools[f].index_insert(n);
                }
            }
        }
        self.snapshot();
        out
    }

    /// Starts a preemptor whose victims are gone on the GPUs nominated for it.
    fn start_nominated(&mut self, j: u32, now: Time, out: &mut Vec<Decision>) {
        let Some(job) = self.jobs[j as usize].as_ref() else {
            return;
        };
        if job.state != St::Nominated {
            return;
        }
        let (f, q, prio, borrowed) = (job.flavor as usize, job.queue, job.prio, job.borrowed);
        let pods = job.pods_at.clone();
        for &(n, m) in &pods {
            let node = &mut self.pools[f].nodes[n as usize];
            debug_assert_eq!(node.held & m, m);
            node.held &= !m;
            node.nominated &= !m;
        }
        self.start(j, f, pods, borrowed, now, out);
        self.queues[q as usize].running.insert((prio, j));
    }

    fn push_next(
        &self,
        q: u32,
        after: Option<PKey>,
        heap: &mut BinaryHeap<Reverse<(u64, PKey, u32)>>,
    ) {
        let qs = &self.queues[q as usize];
        let next = match after {
            None => qs.pending.iter().next(),
            Some(k) => qs
                .pending
                .range((Bound::Excluded(k), Bound::Unbounded))
                .next(),
        };
        if let Some(k) = next {
            let share = if self.opts.fair_sharing {
                self.share(q)
            } else {
                0
            };
            heap.push(Reverse((share, *k, q)));
        }
    }

    fn shares_quota(&self, a: u32, b: u32) -> bool {
        a == b
            || self.queues[a as usize]
                .cohort
                .is_some_and(|c| self.queues[b as usize].cohort == Some(c))
    }

    fn try_one(
        &mut self,
        j: u32,
        now: Time,
        resv: &mut [Option<Reservation>],
        preempt_budget: &mut usize,
        out: &mut Vec<Decision>,
        only: Option<usize>,
    ) -> Outcome {
        let Some(job) = self.jobs[j as usize].as_ref() else {
            return Outcome::Skipped;
        };
        if job.state != St::Pending {
            return Outcome::Skipped;
        }
        let (q, r, pods, g, prio, expected, created) = (
            job.queue,
            job.gpus(),
            job.pods,
            job.g,
            job.prio,
            job.expected,
            job.created,
        );
        let flavors = match only {
            Some(f) => vec![f],
            None => self.flavors_of(j),
        };
        let ends_by = |s: Option<Time>| expected.is_some_and(|e| s.is_some_and(|s| now + e <= s));
        let mut blocked = false;
        for f in flavors {
            let fit = self.quota_fit(q, f, r, &[]);
            // A holder blocked by quota keeps that quota: work sharing it (same queue, or
            // borrowing from the same cohort) may only take what it returns before the holder's
            // turn, or take it on loan until then.
            let lend_ok = |shadow: Option<Time>| {
                self.opts.lend_reserved_nodes
                    && self.opts.preemption
                    && shadow.is_some_and(|s| s >= now + self.opts.min_loan_s)
            };
            let (quota_ok, loan) = if fit == Fit::No {
                (false, false)
            } else if fit == Fit::Borrow
                && self.opts.preemption
                && !self.drains(j, f)
                && self.reclaim_pending(q, f)
            {
                // Lending this would be reclaimed at once (a preemption loop in the making): the
                // owner's waiting work goes first, and this does not hold a reservation against it.
                continue;
            } else {
                match &resv[f] {
                    Some(rv) if self.holder[f] != Some(j) => match rv.quota_queue {
                        Some(hq)
                            if hq == q
                                || (rv.drain && self.shares_quota(hq, q))
                                || (fit == Fit::Borrow
                                    && self.shares_quota(hq, q)
                                    && (rv.quota_guaranteed
                                        || (self.opts.fair_sharing
                                            && rv.holder_share <= self.share(q)))) =>
                        {
                            if ends_by(rv.quota_shadow) {
                                (true, false)
                            } else {
                                let l = lend_ok(rv.quota_shadow);
                                (l, l)
                            }
                        }
                        _ => (true, false),
                    },
                    _ => (true, false),
                }
            };
            let outcome =
                self.place_or_preempt(j, f, fit, quota_ok, loan, now, resv, preempt_budget, out);
            if let Some(o) = outcome {
                return o;
            }
            if resv[f].is_some() && fit != Fit::No {
                // Held back by another holder's quota reservation: not itself a head.
                continue;
            }
            // A queue that got more than its due for a while does not take a new reservation:
            // draining the cluster for it would widen the gap (its deficit recovers by decay).
            let hold_ok = self.holder[f] == Some(j)
                || self.critical.contains(&j)
                || !self.deficit_overserved(q, r);
            if self.opts.backfill
                && resv[f].is_none()
                && self.holder[f].is_none_or(|h| h == j)
                && hold_ok
            {
                self.holder[f] = Some(j);
                let mut rv = if fit != Fit::No || self.pools[f].find(pods, g).is_none() {
                    self.reserve(j, f, now)
                } else {
                    Reservation::default()
                };
                if fit == Fit::No {
                    let qs = &self.queues[q as usize];
                    rv.quota_queue = Some(q);
                    rv.quota_guaranteed = qs.quota[f].is_some_and(|x| qs.usage[f] + r <= x.nominal);
                    rv.quota_shadow = self.quota_shadow(j, f, now);
                    rv.holder_share = self.share(q);
                }
                // Only a holder that must borrow needs others' nominal quota; one within its own
                // nominal gets it back through reclaim.
                let qs = &self.queues[q as usize];
                let must_borrow = qs.quota[f].is_some_and(|x| qs.usage[f] + r > x.nominal);
                rv.drain = must_borrow && self.drains(j, f);
                resv[f] = Some(rv);
                blocked = true;
            } else {
                if self.opts.backfill
                    && let Some(h) = self.holder[f]
                    && h != j
                    && let Some(hj) = self.jobs[h as usize].as_ref()
                    && (Reverse(prio), created) < (Reverse(hj.prio), hj.created)
                    && hold_ok
                {
                    // An older (or more urgent) blocked job takes the reservation from next cycle:
                    // fair-share order picks what runs, not who waits longest.
                    self.holder[f] = Some(j);
                }
                if fit != Fit::No || self.opts.strict_fifo {
                    blocked = true;
                }
            }
        }
        if only.is_some() && !blocked {
            for h in &mut self.holder {
                if *h == Some(j) {
                    *h = None;
                }
            }
        }
        if blocked {
            Outcome::Blocked
        } else {
            Outcome::Skipped
        }
    }

    /// Places `j` in flavor `f` (normally, before a reservation's start, or on loan), or
    /// preempts for it; `None` when neither is possible.
    #[allow(clippy::too_many_arguments)]
    fn place_or_preempt(
        &mut self,
        j: u32,
        f: usize,
        fit: Fit,
        quota_ok: bool,
        mut loan: bool,
        now: Time,
        resv: &[Option<Reservation>],
        preempt_budget: &mut usize,
        out: &mut Vec<Decision>,
    ) -> Option<Outcome> {
        let job = self.jobs[j as usize].as_ref().expect("job exists");
        let (q, r, pods, g, prio, expected) = (
            job.queue,
            job.gpus(),
            job.pods,
            job.g,
            job.prio,
            job.expected,
        );
        let ends_by = |s: Option<Time>| expected.is_some_and(|e| s.is_some_and(|s| now + e <= s));
        let lend_ok = |shadow: Option<Time>| {
            self.opts.lend_reserved_nodes
                && self.opts.preemption
                && shadow.is_some_and(|s| s >= now + self.opts.min_loan_s)
        };
        if quota_ok {
            let mut plan = self.pools[f].find(pods, g);
            if plan.is_none()
                && let Some(rv) = &resv[f]
                && !rv.nodes.is_empty()
                && self.holder[f] != Some(j)
            {
                // Ends before the reserved gang can start: may use the reserved nodes. Or will
                // not, but the gang is far off: borrow the nodes until its turn.
                let in_time = ends_by(rv.shadow);
                if in_time || lend_ok(rv.shadow) {
                    let nodes = rv.nodes.clone();
                    for &n in &nodes {
                        self.pools[f].index_insert(n);
                    }
                    plan = self.pools[f].find(pods, g);
                    for &n in &nodes {
                        self.pools[f].index_remove(n);
                    }
                    loan |= plan.is_some() && !in_time;
                }
            }
            if let Some(plan) = plan {
                self.admit(j, f, &plan, fit, now, out);
                if loan {
                    self.jobs[j as usize].as_mut().expect("job exists").on_loan = true;
                    self.loans[f].insert(j);
                }
                return Some(Outcome::Admitted);
            }
        }
        if self.holder[f] == Some(j)
            && self.opts.preemption
            && !self.loans[f].is_empty()
            && self.try_preempt(j, f, true, None, now, out)
        {
            return Some(Outcome::Preempting);
        }
        let min_running = self.queues[q as usize].running.first().map(|x| x.0);
        let by_priority = min_running.is_some_and(|m| m < prio);
        // Reclaiming costs the victims their grace period and a restart: not worth it when the
        // quota comes back by itself soon.
        let patient = !by_priority
            && self.opts.reclaim_patience_s > 0
            && self
                .quota_shadow(j, f, now)
                .is_some_and(|s| s < now + self.opts.reclaim_patience_s);
        let fair = !by_priority
            && self.opts.fair_preemption
            && self.fair_tried.get(q as usize) == Some(&false)
            && self.queues[q as usize].quota[f].is_some_and(|qq| {
                let u = self.queues[q as usize].usage[f];
                u < qq.nominal && u + r > qq.nominal
            });
        let may_preempt = self.opts.preemption
            && *preempt_budget > 0
            && (by_priority || (!patient && self.may_reclaim(q, f, r, fair)));
        if fair && may_preempt {
            // A queue's fair-sharing claim is tried once a cycle (its first blocked head), so
            // failed tries cannot use up the preemption budget of reclaims and priorities.
            self.fair_tried[q as usize] = true;
        }
        if may_preempt {
            *preempt_budget -= 1;
            let reserved = resv[f]
                .as_ref()
                .filter(|_| self.holder[f] != Some(j))
                .and_then(|rv| Some((rv.nodes.clone(), rv.shadow?)));
            if self.try_preempt(
                j,
                f,
                false,
                reserved.as_ref().map(|(n, s)| (n.as_slice(), *s)),
                now,
                out,
            ) {
                return Some(Outcome::Preempting);
            }
        }
        None
    }

    /// Usage of every queue (GPUs charged per flavor, pending and running counts).
    pub fn queue_usage(&self) -> Vec<QueueUsage> {
        self.queues
            .iter()
            .map(|q| QueueUsage {
                name: q.name.clone(),
                usage: self
                    .pools
                    .iter()
                    .zip(&q.usage)
                    .map(|(p, u)| (p.name.clone(), *u))
                    .collect(),
                pending: q.pending.len(),
                running: q.running.len(),
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

    /// Number of workloads waiting in all queues.
    pub fn pending_len(&self) -> usize {
        self.queues.iter().map(|q| q.pending.len()).sum()
    }

    /// The options this scheduler runs with.
    pub fn options(&self) -> &Options {
        &self.opts
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Priority,
    Reclaim,
    Loan,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Admitted,
    Preempting,
    Blocked,
    Skipped,
}

#[cfg(test)]
mod tests;
