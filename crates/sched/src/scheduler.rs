//! The scheduler: a deterministic state machine the control plane drives.
//!
//! Inputs are events (`submit`, `finished`, `evicted`, `checkpointed`); outputs are the
//! decisions returned by `cycle`. Nothing here reads a clock or touches a process.

use std::cmp::Reverse;
use std::collections::{BTreeSet, BinaryHeap, HashMap, HashSet};
use std::ops::Bound;

use crate::config::{
    ANY_FLAVOR, Cluster, Decision, Options, PodPlacement, PreemptReason, PriorityClass, QueueSpec,
    Time, Workload,
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
        let job = self.jobs[j as usize].as_mut().expect("just submitted");
        job.state = St::Running;
        job.flavor = f as u16;
        job.pods_at = pods;
        job.admitted_at = admitted_at;
        job.borrowed = borrowed;
        if let Some(e) = job.end() {
            self.ends[f].insert((e, j));
        }
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
        let (f, old_end) = (job.flavor as usize, job.end());
        let expected = now.saturating_sub(job.admitted_at) + remaining_s.max(1);
        if let Some(e) = old_end {
            self.ends[f].remove(&(e, j));
        }
        let job = self.jobs[j as usize].as_mut().expect("indexed job exists");
        job.expected = Some(expected);
        let end = job.end().expect("just set");
        self.ends[f].insert((end, j));
        if old_end != Some(end) {
            // A reservation's start (and what may backfill before it) depends on this end.
            self.mark_all_dirty();
        }
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

    /// Pending jobs on the critical path: expected to run longer than `critical_path_factor`
    /// times the time the cluster needs to clear all known work (running and pending), so
    /// starting them later stretches the makespan (longest first, at most 8).
    fn critical_jobs(&self, now: Time) -> Vec<u32> {
        if self.opts.critical_path_factor == 0 || self.long_pending.is_empty() {
            return Vec::new();
        }
        let mut work = self.pending_work;
        for ends in &self.ends {
            for &(e, r) in ends {
                let g = self.jobs[r as usize].as_ref().map_or(0, Job::gpus);
                work += (e.saturating_sub(now) * g) as f64;
            }
        }
        let clear = work / self.total_gpus.max(1.0) * f64::from(self.opts.critical_path_factor);
        // Priorities still come first, and a blocked gang keeps its claim: a critical job only
        // goes early when it is of the most urgent pending priority, and each flavor it may use
        // already has its reservation holder (who went before it this cycle) or the oldest
        // pending job is no larger than it (so no gang is passed before it could reserve).
        let oldest = self.by_age.first().copied();
        let top = oldest.map(|(Reverse(p), _, _)| p);
        let oldest_gpus =
            oldest.and_then(|(_, _, o)| self.jobs[o as usize].as_ref().map(Job::gpus));
        self.long_pending
            .iter()
            .take_while(|(Reverse(e), _)| *e as f64 > clear)
            .take(8)
            .map(|&(_, j)| j)
            .filter(|&j| {
                let job = self.jobs[j as usize].as_ref().expect("pending job exists");
                top.is_none_or(|t| job.prio >= t)
                    && (oldest_gpus.is_none_or(|g| g <= job.gpus())
                        || job
                            .flavors
                            .iter()
                            .all(|&f| self.holder[usize::from(f)].is_some()))
            })
            .collect()
    }

    fn share(&self, q: u32) -> u64 {
        let qs = &self.queues[q as usize];
        let borrowed: u64 = qs
            .quota
            .iter()
            .zip(&qs.usage)
            .map(|(qq, u)| u.saturating_sub(qq.map_or(0, |x| x.nominal)))
            .sum();
        ((borrowed as f64 / qs.weight) * 1000.0) as u64
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
        let job = self.jobs[j as usize].as_mut().expect("job exists");
        job.state = St::Running;
        job.flavor = f as u16;
        job.pods_at = pods;
        job.admitted_at = now;
        job.borrowed = borrowed;
        if let Some(e) = job.end() {
            self.ends[f].insert((e, j));
        }
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

    /// Picks nodes for the blocked head `j` and takes them out of the index for this cycle.
    fn reserve(&mut self, j: u32, f: usize, now: Time) -> Reservation {
        let job = self.jobs[j as usize].as_ref().expect("job exists");
        let (pods, g) = (u64::from(job.pods), job.g);
        let pool = &self.pools[f];
        let mut fs: Vec<u32> = pool
            .nodes
            .iter()
            .map(|n| if n.in_index { n.free.count_ones() } else { 0 })
            .collect();
        // Lent GPUs come back whenever the gang needs them.
        for &l in &self.loans[f] {
            let lj = self.jobs[l as usize].as_ref().expect("loaned job exists");
            for &(n, m) in &lj.pods_at {
                if pool.nodes[n as usize].in_index {
                    fs[n as usize] += m.count_ones();
                }
            }
        }
        let mut cap: u64 = fs.iter().map(|k| u64::from(k / g)).sum();
        let mut shadow = None;
        if cap >= pods {
            shadow = Some(now);
        } else {
            for &(end, r) in &self.ends[f] {
                let rj = self.jobs[r as usize].as_ref().expect("running job exists");
                if rj.on_loan {
                    continue;
                }
                for &(n, m) in &rj.pods_at {
                    let node = &pool.nodes[n as usize];
                    if !node.in_index {
                        continue;
                    }
                    let k = &mut fs[n as usize];
                    cap -= u64::from(*k / g);
                    *k = (*k + m.count_ones()).min(node.cap);
                    cap += u64::from(*k / g);
                }
                if cap >= pods {
                    shadow = Some(end.max(now));
                    break;
                }
            }
        }
        let mut order: Vec<u32> = (0..fs.len() as u32)
            .filter(|&n| fs[n as usize] >= g)
            .collect();
        order.sort_by_key(|&n| {
            (
                Reverse(fs[n as usize]),
                pool.nodes[n as usize].free.count_ones(),
                n,
            )
        });
        let mut got = 0u64;
        let mut nodes = Vec::new();
        for n in order {
            if got >= pods {
                break;
            }
            got += u64::from(fs[n as usize] / g);
            nodes.push(n);
        }
        for &n in &nodes {
            self.pools[f].index_remove(n);
        }
        Reservation {
            nodes,
            shadow,
            quota_queue: None,
            quota_shadow: None,
            quota_guaranteed: false,
            holder_share: 0,
            drain: false,
        }
    }

    /// Tries to preempt for `j` in flavor `f`; returns true if victims were chosen.
    /// With `loans_only`, the only victims are jobs running on nodes lent from `j`'s reservation.
    /// `reserved`: another gang's reserved nodes and start time this cycle (see
    /// `Options::reclaim_through_reservation`).
    fn try_preempt(
        &mut self,
        j: u32,
        f: usize,
        loans_only: bool,
        reserved: Option<(&[u32], Time)>,
        now: Time,
        out: &mut Vec<Decision>,
    ) -> bool {
        let job = self.jobs[j as usize].as_ref().expect("job exists");
        let (q, prio, r, pods, g) = (job.queue, job.prio, job.gpus(), job.pods, job.g);
        let guard = self.preemption_ancestors(j);
        let critical = self.critical.contains(&j);
        let qs = &self.queues[q as usize];
        let mut cands: Vec<(u32, Kind)> = Vec::new();
        if loans_only {
            cands.extend(self.loans[f].iter().map(|&v| (v, Kind::Loan)));
        } else {
            for &(_, v) in qs.running.range(..(prio, 0)) {
                cands.push((v, Kind::Priority));
            }
            let within_nominal = qs.quota[f].is_some_and(|qq| qs.usage[f] + r <= qq.nominal);
            // Fair sharing: a queue below its nominal quota whose head would take it over may
            // take borrowed work from a queue whose share of its own quota is higher than the
            // preemptor's will be (checked again on the final victim set below).
            let fair_after = (self.opts.fair_preemption && !within_nominal)
                .then(|| Self::ratio(qs, f, r as i64))
                .flatten()
                .filter(|_| qs.quota[f].is_some_and(|qq| qs.usage[f] < qq.nominal));
            if (within_nominal || fair_after.is_some())
                && let Some(c) = qs.cohort
            {
                for &m in &self.cohorts[c as usize].members {
                    let ms = &self.queues[m as usize];
                    if m == q || ms.quota[f].is_none_or(|qq| ms.usage[f] <= qq.nominal) {
                        continue;
                    }
                    if let Some(after) = fair_after
                        && Self::ratio(ms, f, 0).is_none_or(|v| v <= after)
                    {
                        continue;
                    }
                    for &(_, v) in &ms.running {
                        cands.push((v, Kind::Reclaim));
                    }
                }
            }
        }
        cands.retain(|&(v, kind)| {
            let vj = self.jobs[v as usize].as_ref().expect("running job exists");
            vj.state == St::Running
                && vj.flavor as usize == f
                && !guard.contains(&v)
                && !vj.preempted_by.contains(&j)
                && match kind {
                    Kind::Priority => true,
                    // Reclaiming never takes from more urgent work: with priority preemption
                    // only going strictly down, preemptions cannot chase each other in a circle.
                    // With deficits, nominal quota is a time-averaged guarantee: a queue does not
                    // reclaim from one owed more GPU-time than itself.
                    Kind::Reclaim => {
                        vj.borrowed
                            && !vj.protected
                            && vj.prio <= prio
                            && (critical || !self.deficit_ahead(vj.queue, q, vj.gpus()))
                    }
                    Kind::Loan => vj.on_loan && vj.prio <= prio,
                }
        });
        if cands.is_empty() {
            return false;
        }
        cands.sort_by_key(|&(v, _)| {
            let vj = self.jobs[v as usize].as_ref().expect("job exists");
            (
                vj.prio,
                Reverse(vj.last_ckpt.unwrap_or(vj.admitted_at)),
                Reverse(vj.admitted_at),
                v,
            )
        });
        cands.truncate(256);
        // Reclaiming within nominal quota may also use, on nodes reserved for another gang, the
        // GPUs of victims that would still run when that gang can start: the gang never counted
        // on them, so its start does not move.
        let qs = &self.queues[q as usize];
        let through = reserved.filter(|_| {
            !loans_only
                && self.opts.reclaim_through_reservation
                && qs.quota[f].is_some_and(|qq| qs.usage[f] + r <= qq.nominal)
        });
        let mut late: Vec<(u32, u64)> = Vec::new();
        // Add victims in order until quota and placement both fit.
        let mut freed: Vec<(u32, u64)> = Vec::new();
        let mut chosen: Vec<(u32, Kind)> = Vec::new();
        let mut touched: Vec<(u32, u64)> = Vec::new();
        let mut plan = None;
        for &(v, reclaim) in &cands {
            let vj = self.jobs[v as usize].as_ref().expect("job exists");
            freed.push((vj.queue, vj.gpus()));
            chosen.push((v, reclaim));
            // A single-node victim restarts by backfill; a gang would need a drain of its own.
            let runs_past =
                vj.pods == 1 && through.is_some_and(|(_, s)| vj.end().is_none_or(|e| e > s));
            for &(n, m) in &vj.pods_at.clone() {
                let node = &self.pools[f].nodes[n as usize];
                touched.push((n, node.free));
                let free = node.free | m;
                self.pools[f].set_free(n, free);
                if runs_past && through.is_some_and(|(rn, _)| rn.contains(&n)) {
                    match late.iter_mut().find(|(x, _)| *x == n) {
                        Some((_, b)) => *b |= m,
                        None => late.push((n, m)),
                    }
                }
            }
            if self.quota_fit(q, f, r, &freed) == Fit::No {
                continue;
            }
            if let Some(p) = self.pools[f].find(pods, g) {
                plan = Some(p);
                late.clear();
                break;
            }
            if !late.is_empty() {
                // Offer the reserved nodes with only those GPUs free.
                let saved: Vec<(u32, u64)> = late
                    .iter()
                    .map(|&(n, _)| (n, self.pools[f].nodes[n as usize].free))
                    .collect();
                for &(n, b) in &late {
                    self.pools[f].nodes[n as usize].free = b;
                    self.pools[f].index_insert(n);
                }
                let p = self.pools[f].find(pods, g);
                for &(n, old) in &saved {
                    self.pools[f].index_remove(n);
                    self.pools[f].nodes[n as usize].free = old;
                }
                if p.is_some() {
                    plan = p;
                    break;
                }
            }
        }
        // Undo the trial release (restore original free masks, oldest first wins).
        for &(n, old) in touched.iter().rev() {
            self.pools[f].set_free(n, old);
        }
        let Some(plan) = plan else { return false };
        // Drop victims whose GPUs the plan does not use, if quota still fits without them.
        let plan_nodes: Vec<u32> = plan.iter().map(|(n, _)| *n).collect();
        let mut keep: Vec<(u32, Kind)> = chosen.clone();
        for &(v, _) in chosen.iter().rev() {
            let vj = self.jobs[v as usize].as_ref().expect("job exists");
            // On a reserved node the plan uses only the GPUs of victims that outlast the gang.
            let used = |&(n, m): &(u32, u64)| {
                plan_nodes.contains(&n)
                    && late
                        .iter()
                        .find(|(x, _)| *x == n)
                        .is_none_or(|(_, b)| b & m != 0)
            };
            if vj.pods_at.iter().any(used) {
                continue;
            }
            let without: Vec<(u32, u64)> = keep
                .iter()
                .filter(|(x, _)| *x != v)
                .map(|&(x, _)| {
                    let xj = self.jobs[x as usize].as_ref().expect("job exists");
                    (xj.queue, xj.gpus())
                })
                .collect();
            if self.quota_fit(q, f, r, &without) != Fit::No {
                keep.retain(|(x, _)| *x != v);
            }
        }
        // Never take from another queue something it would at once reclaim: if the preemptor ends
        // up borrowing, no victim of another queue may fit back within its own nominal quota.
        let freed: Vec<(u32, u64)> = keep
            .iter()
            .map(|&(x, _)| {
                let xj = self.jobs[x as usize].as_ref().expect("job exists");
                (xj.queue, xj.gpus())
            })
            .collect();
        let qs = &self.queues[q as usize];
        if self.opts.fair_preemption
            && !loans_only
            && qs.quota[f].is_some_and(|qq| qs.usage[f] + r > qq.nominal)
            && let Some(after) = Self::ratio(qs, f, r as i64)
        {
            // No loop: every victim queue keeps at least the share the preemptor ends with, so
            // it could not preempt back under the same rule.
            for (&(vq, _), &(_, kind)) in freed.iter().zip(&keep) {
                if vq == q || kind != Kind::Reclaim {
                    continue;
                }
                let left: u64 = freed.iter().filter(|(y, _)| *y == vq).map(|(_, a)| a).sum();
                let vs = &self.queues[vq as usize];
                if Self::ratio(vs, f, -(left as i64)).is_none_or(|v| v < after) {
                    return false;
                }
            }
        }
        let drains = self.drains(j, f);
        if !drains && self.quota_fit(q, f, r, &freed) == Fit::Borrow {
            if self.reclaim_pending(q, f) {
                return false;
            }
            for &(vq, vg) in &freed {
                if vq == q {
                    continue;
                }
                let left: u64 = freed.iter().filter(|(y, _)| *y == vq).map(|(_, a)| a).sum();
                let vs = &self.queues[vq as usize];
                if vs.quota[f].is_some_and(|qq| vs.usage[f] - left + vg <= qq.nominal) {
                    return false;
                }
            }
        }
        // Commit: victims stop counting against quota now; their GPUs stay theirs until evicted.
        let mut unlaunched: Vec<String> = Vec::new();
        for &(v, reclaim) in &keep {
            self.stop_running(v);
            let vj = self.jobs[v as usize].as_mut().expect("job exists");
            vj.state = St::Evicting;
            vj.preemptor = Some(j);
            vj.preempted_by.push(j);
            if let Some(at) = out
                .iter()
                .position(|d| matches!(d, Decision::Admit { id, .. } if *id == vj.id))
            {
                // Admitted earlier in this very cycle: nothing was launched, so the admission is
                // taken back rather than a start followed by a preemption (no work lost, no
                // restart, and never "admitted into a slot that at once preempts it").
                out.remove(at);
                unlaunched.push(vj.id.clone());
                continue;
            }
            let preemptor = self.jobs[j as usize]
                .as_ref()
                .expect("job exists")
                .id
                .clone();
            let vj = self.jobs[v as usize].as_ref().expect("job exists");
            let reason = match reclaim {
                Kind::Reclaim => PreemptReason::Reclaim { preemptor },
                Kind::Priority => PreemptReason::Priority { preemptor },
                Kind::Loan => PreemptReason::LoanEnded { preemptor },
            };
            out.push(Decision::Preempt {
                id: vj.id.clone(),
                reason,
            });
        }
        // Nominate GPUs for the preemptor: idle ones first, then the victims' ones.
        let mut victim_bits: HashMap<u32, u64> = HashMap::new();
        for &(v, _) in &keep {
            for &(n, m) in &self.jobs[v as usize].as_ref().expect("job exists").pods_at {
                *victim_bits.entry(n).or_default() |= m;
            }
        }
        let mut pods_at = Vec::new();
        for &(n, count) in &plan {
            let node = &self.pools[f].nodes[n as usize];
            let mut avail_free = node.free;
            let mut avail_victim = victim_bits.get(&n).copied().unwrap_or(0) & !node.nominated;
            if let Some(&(_, b)) = late.iter().find(|(x, _)| *x == n) {
                // A reserved node: only the GPUs of victims that outlast the gang's start.
                avail_free = 0;
                avail_victim &= b;
            }
            let mut took_free = 0u64;
            let mut took_victim = 0u64;
            for _ in 0..count {
                let mut m = 0u64;
                for _ in 0..g {
                    let src = if avail_free != 0 {
                        &mut avail_free
                    } else {
                        &mut avail_victim
                    };
                    let bit = *src & src.wrapping_neg();
                    *src &= !bit;
                    m |= bit;
                }
                took_free |= m & node.free;
                took_victim |= m & !node.free;
                pods_at.push((n, m));
            }
            let new_free = node.free & !took_free;
            let node = &mut self.pools[f].nodes[n as usize];
            node.nominated |= took_free | took_victim;
            node.held |= took_free;
            self.pools[f].set_free(n, new_free);
        }
        let fit = self.quota_fit(q, f, r, &[]);
        let job = self.jobs[j as usize].as_mut().expect("job exists");
        let key = job.key(j);
        job.state = St::Nominated;
        job.flavor = f as u16;
        job.pods_at = pods_at;
        job.borrowed = fit == Fit::Borrow;
        job.protected = drains && fit == Fit::Borrow;
        job.victims_left = keep.len() as u32;
        self.queues[q as usize].pending.remove(&key);
        self.pend_remove(j);
        self.charge(q, f, r as i64);
        if keep.is_empty() {
            self.ready.push(j);
        }
        for h in &mut self.holder {
            if *h == Some(j) {
                *h = None;
            }
        }
        let undone = !unlaunched.is_empty();
        for id in unlaunched {
            self.evicted(&id).expect("an unlaunched victim is evicting");
        }
        if undone && let Some(at) = self.ready.iter().position(|&x| x == j) {
            self.ready.remove(at);
            self.start_nominated(j, now, out);
        }
        true
    }

    /// Every unfinished job that preempted `j`, or preempted one of those, and so on: `j` may
    /// not preempt any of them, so preemptions of any kind (priority, reclaim, fair share, loans)
    /// can never close a cycle. A completion ends a chain (finished jobs are gone).
    fn preemption_ancestors(&self, j: u32) -> HashSet<u32> {
        let mut seen: HashSet<u32> = HashSet::new();
        let mut stack: Vec<u32> = vec![j];
        while let Some(x) = stack.pop() {
            let Some(xj) = self.jobs[x as usize].as_ref() else {
                continue;
            };
            for &p in &xj.preempted_by {
                if p != j && seen.insert(p) {
                    stack.push(p);
                }
            }
        }
        seen
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

    /// Brings every queue's fairness deficit up to `now`, from the state the last cycle left
    /// (nothing changes between cycles but events, and a cycle follows each): within a cohort
    /// where at least two members were saturated, each saturated member is owed the busy GPUs
    /// of the saturated members split by entitlement, and accrues what it is owed minus what it
    /// used; all deficits decay with `deficit_half_life_s`.
    fn accrue(&mut self, now: Time) {
        let hl = self.opts.deficit_half_life_s;
        if hl == 0 {
            return;
        }
        let Some(last) = self.last_accrual.replace(now) else {
            return;
        };
        if now <= last {
            return;
        }
        let dt = (now - last) as f64;
        let decay = 0.5f64.powf(dt / hl as f64);
        // Exact integral of a constant rate under exponential decay over `dt`.
        let gain = hl as f64 / std::f64::consts::LN_2 * (1.0 - decay);
        for co in &self.cohorts {
            let sat: Vec<u32> = co
                .members
                .iter()
                .copied()
                .filter(|&m| self.queues[m as usize].saturated)
                .collect();
            let (mut busy, mut owed) = (0.0, 0.0);
            for &m in &sat {
                busy += self.queues[m as usize].used as f64;
                owed += self.queues[m as usize].entitled;
            }
            for &m in &co.members {
                let qs = &mut self.queues[m as usize];
                qs.deficit *= decay;
                if sat.len() >= 2 && owed > 0.0 && qs.saturated {
                    qs.deficit += (qs.entitled / owed * busy - qs.used as f64) * gain;
                }
            }
        }
    }

    /// Records, for `accrue`, which queues are saturated (work waiting, and running plus
    /// waiting GPUs at least the entitlement) and the GPUs each uses.
    fn snapshot(&mut self) {
        if self.opts.deficit_half_life_s == 0 {
            return;
        }
        for qs in &mut self.queues {
            qs.used = qs.usage.iter().sum();
            qs.saturated = qs.cohort.is_some()
                && qs.pending_gpus > 0
                && (qs.used + qs.pending_gpus) as f64 >= qs.entitled;
        }
    }

    /// Whether queue `a` is owed more GPU-time than `b` by more than `deficit_threshold_s`
    /// times `gpus` (then `b` may not reclaim a `gpus`-GPU job from `a`).
    fn deficit_ahead(&self, a: u32, b: u32, gpus: u64) -> bool {
        let t = self.opts.deficit_threshold_s;

        self.opts.deficit_half_life_s > 0
            && t > 0
            && self.queues[a as usize].deficit - self.queues[b as usize].deficit > (t * gpus) as f64
    }

    /// Whether queue `q` got more than its due by at least `deficit_threshold_s` times `gpus`
    /// (then a `gpus`-GPU job of it does not take a new reservation).
    fn deficit_overserved(&self, q: u32, gpus: u64) -> bool {
        let t = self.opts.deficit_threshold_s;
        self.opts.deficit_half_life_s > 0
            && t > 0
            && self.queues[q as usize].deficit <= -((t * gpus) as f64)
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

    /// When the quota `j` needs will be free, counting only known ends of work sharing it.
    fn quota_shadow(&self, j: u32, f: usize, now: Time) -> Option<Time> {
        let job = self.jobs[j as usize].as_ref().expect("job exists");
        let (q, r) = (job.queue, job.gpus());
        if self.quota_fit(q, f, r, &[]) != Fit::No {
            return Some(now);
        }
        let mut freed: Vec<(u32, u64)> = Vec::new();
        for &(end, x) in &self.ends[f] {
            let xq = self.jobs[x as usize]
                .as_ref()
                .expect("running job exists")
                .queue;
            if !self.shares_quota(q, xq) {
                continue;
            }
            let gpus = self.jobs[x as usize].as_ref().expect("job exists").gpus();
            match freed.iter_mut().find(|(y, _)| *y == xq) {
                Some((_, a)) => *a += gpus,
                None => freed.push((xq, gpus)),
            }
            if self.quota_fit(q, f, r, &freed) != Fit::No {
                return Some(end.max(now));
            }
        }
        None
    }

    /// Whether another cohort member below its nominal quota has a waiting head that fits in it
    /// (and so would reclaim anything lent now), or, with `hold_for_owed`, a single-pod head.
    fn reclaim_pending(&self, q: u32, f: usize) -> bool {
        let Some(c) = self.queues[q as usize].cohort else {
            return false;
        };
        let qs = &self.queues[q as usize];
        let at_quota = qs.quota[f].is_some_and(|qq| qs.usage[f] >= qq.nominal);
        self.cohorts[c as usize].members.iter().any(|&m| {
            let ms = &self.queues[m as usize];
            if m == q {
                return false;
            }
            let (Some(qq), Some(head)) = (ms.quota[f], ms.pending.first()) else {
                return false;
            };
            let hj = self.jobs[head.3 as usize]
                .as_ref()
                .expect("pending job exists");
            // A single-pod head of a queue below its quota can use the next GPUs that free up
            // on any node: they are kept for it rather than lent beyond the borrower's quota.
            // Only a queue already at its quota waits so (two owed queues never wait for each
            // other).
            let owed =
                self.opts.hold_for_owed && at_quota && ms.usage[f] < qq.nominal && hj.pods == 1;
            hj.flavors.contains(&(f as u16))
                && (ms.usage[f] + hj.gpus() <= qq.nominal || owed)
                // `m` would not reclaim from `q` if `q` is owed more GPU-time (see `try_preempt`).
                && !self.deficit_ahead(q, m, hj.gpus())
        })
    }

    /// Whether `j` holds (or, with no holder yet, would hold) flavor `f`'s reservation with a
    /// binding claim on its cohort: its queue gets less than its nominal quota, so it is owed
    /// capacity that others are using, and the gang would not take it further past that
    /// quota than `Options::drain_overshoot_pct` allows.
    fn drains(&self, j: u32, f: usize) -> bool {
        self.opts.drain_for_holder
            && self.opts.backfill
            && self.holder[f].is_none_or(|h| h == j)
            && self.jobs[j as usize].as_ref().is_some_and(|job| {
                let qs = &self.queues[job.queue as usize];
                let (u, r) = (qs.usage[f], job.gpus());
                qs.quota[f].is_some_and(|qq| {
                    u < qq.nominal
                        && self.opts.drain_overshoot_pct.is_none_or(|pct| {
                            u + r <= qq.nominal.max(r) + qq.nominal * u64::from(pct) / 100
                        })
                })
            })
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

    /// A queue's usage of flavor `f`, changed by `delta` GPUs, over its nominal quota there
    /// (weighted); `None` without a nominal quota.
    fn ratio(qs: &QueueState, f: usize, delta: i64) -> Option<f64> {
        let qq = qs.quota[f].filter(|x| x.nominal > 0)?;
        let u = (qs.usage[f] as i64 + delta).max(0) as f64;
        Some(u / qq.nominal as f64 / qs.weight)
    }

    fn may_reclaim(&self, q: u32, f: usize, r: u64, fair: bool) -> bool {
        let qs = &self.queues[q as usize];
        let (Some(c), Some(qq)) = (qs.cohort, qs.quota[f]) else {
            return false;
        };
        (qs.usage[f] + r <= qq.nominal || fair)
            && self.cohorts[c as usize].members.iter().any(|&m| {
                let ms = &self.queues[m as usize];
                m != q && ms.quota[f].is_some_and(|x| ms.usage[f] > x.nominal)
            })
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
mod tests {
    use super::*;
    use crate::config::{ANY_FLAVOR, FlavorQuota, Options};

    fn queue(name: &str, cohort: Option<&str>, nominal: u32) -> QueueSpec {
        QueueSpec {
            name: name.into(),
            cohort: cohort.map(Into::into),
            quotas: vec![FlavorQuota {
                flavor: "gpu".into(),
                nominal,
                borrowing_limit: None,
                lending_limit: None,
            }],
            fair_share_weight: 1.0,
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

    fn local(gpus: u32) -> Scheduler {
        let q = QueueSpec {
            name: "default".into(),
            cohort: None,
            quotas: vec![FlavorQuota {
                flavor: ANY_FLAVOR.into(),
                nominal: gpus,
                borrowing_limit: None,
                lending_limit: None,
            }],
            fair_share_weight: 1.0,
        };
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

    #[test]
    fn a_long_job_that_would_stretch_the_makespan_starts_before_shorter_ones() {
        let run = |factor: u32, gang: bool| {
            let opts = Options {
                critical_path_factor: factor,
                ..Options::default()
            };
            let mut s = Scheduler::with_options(
                Cluster::uniform(1, 4, "gpu"),
                vec![queue("a", None, 4)],
                vec![],
                opts,
            )
            .unwrap();
            s.submit(wl("busy", "a", 1, 4, 0, Some(100))).unwrap();
            assert_eq!(admitted(&s.cycle(0)), vec!["busy"]);
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
        // (which alone needs 10,000 s, more than twice the 2,600 s the backlog takes) to the end.
        assert_eq!(run(0, false), ["short0", "short1", "short2", "short3"]);
        assert_eq!(run(2, false), ["long", "short0", "short1", "short2"]);
        // It does not pass an older gang that holds the reservation.
        assert_eq!(run(2, true), ["gang"]);
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

    fn prios() -> Vec<PriorityClass> {
        vec![
            PriorityClass {
                name: "low".into(),
                value: 0,
            },
            PriorityClass {
                name: "high".into(),
                value: 10,
            },
        ]
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

    #[test]
    fn owner_reclaims_lent_quota_taking_the_least_work_first() {
        let mut s = Scheduler::new(
            Cluster::uniform(2, 4, "gpu"),
            vec![queue("a", Some("c"), 4), queue("b", Some("c"), 4)],
            prios(),
        )
        .unwrap();
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

    /// A gang that must borrow holds the machine; when it could start, an owner's job that
    /// waited through the drain would reclaim it at once. The admission is taken back inside
    /// the cycle: no `Admit` + `Preempt` pair, the owner starts, the gang waits and runs after.
    #[test]
    fn a_start_that_would_be_reclaimed_at_once_is_taken_back_not_preempted() {
        let mut s = Scheduler::new(
            Cluster::local(4, "gpu"),
            vec![queue("a", Some("c"), 3), queue("b", Some("c"), 1)],
            prios(),
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
        Scheduler::with_options(
            Cluster::uniform(2, 4, "gpu"),
            vec![queue("a", Some("c"), 4), queue("b", Some("c"), 4)],
            prios(),
            opts,
        )
        .unwrap()
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
    fn a_queue_below_its_quota_takes_from_one_far_above_it_but_never_below_its_own_share() {
        let cluster = Cluster::uniform(4, 8, "gpu");
        let queues: Vec<QueueSpec> = ["a", "b", "c", "d"]
            .iter()
            .map(|n| queue(n, Some("org"), 8))
            .collect();
        let run = |fair: bool, a_pods: u32| {
            let opts = Options {
                fair_preemption: fair,
                ..Options::default()
            };
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
        // 16 GPUs: a ends at 2x its quota, b keeps 16 = 2x: allowed, and the two most recently
        // checkpointed borrowed jobs go.
        let (d, mut s) = run(true, 2);
        let mut victims = preempted(&d);
        victims.sort_by(|x, y| x.0.cmp(&y.0));
        let reclaim = PreemptReason::Reclaim {
            preemptor: "a".into(),
        };
        assert_eq!(
            victims,
            vec![("b2".into(), reclaim.clone()), ("b3".into(), reclaim)]
        );
        s.evicted("b2").unwrap();
        s.evicted("b3").unwrap();
        assert_eq!(admitted(&s.cycle(61)), vec!["a"]);
        // b, now at its own share, does not preempt back.
        for t in 62..70 {
            assert!(preempted(&s.cycle(t)).is_empty());
        }
        // 24 GPUs: a would end at 3x its quota and b at 1x: refused, a waits.
        let (d, _) = run(true, 3);
        assert!(preempted(&d).is_empty(), "{d:?}");
        // Without fair-sharing preemption a waits in both cases.
        let (d, _) = run(false, 2);
        assert!(preempted(&d).is_empty(), "{d:?}");
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
        let nodes = |id: &str| -> Vec<String> {
            d.iter()
                .find_map(|x| match x {
                    Decision::Admit {
                        id: i, placement, ..
                    } if i == id => Some(placement.iter().map(|p| p.node.clone()).collect()),
                    _ => None,
                })
                .unwrap()
        };
        let gang = nodes("gang");
        assert_eq!(gang.len(), 3);
        let racks: std::collections::HashSet<_> = gang
            .iter()
            .map(|n| n.trim_start_matches("node-").parse::<usize>().unwrap() % 2)
            .collect();
        assert_eq!(racks.len(), 1, "gang split across racks: {gang:?}");
        // Small jobs share a node instead of fragmenting another.
        assert_eq!(nodes("small"), nodes("tiny"));
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
            msg.contains("workload.priority") && msg.contains("high, low"),
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
}
