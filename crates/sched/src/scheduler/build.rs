//! Building a scheduler from its configuration, and the checks that refuse bad configuration
//! (an unknown cohort, a borrowing limit past the cohort's capacity) by field and fix.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use super::{Cohort, QueueState, Quota, Scheduler};
use crate::config::{ANY_FLAVOR, Cluster, MAX_NODE_GPUS, Options, PriorityClass, QueueSpec};
use crate::error::{Result, SchedError};
use crate::pool::{NodeDesc, Pool};

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
            if prio
                .insert(p.name.clone(), (p.value, p.preempting))
                .is_some()
            {
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
            if n.gpus == 0 || n.gpus > MAX_NODE_GPUS {
                return Err(cfg_err(
                    format!("cluster.nodes[{i}].gpus"),
                    format!("node `{}` has {} GPUs", n.name, n.gpus),
                    format!("give every node between 1 and {MAX_NODE_GPUS} GPUs"),
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
                stop: q.stop_policy,
                preemption: q.preemption,
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
                decayed_use: 0.0,
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
            pending_sizes: BTreeMap::new(),
            total_gpus: pools
                .iter()
                .flat_map(|p| p.nodes.iter().map(|n| f64::from(n.cap)))
                .sum(),
            holder: vec![None; nf],
            next_start: vec![None; nf],
            ends: vec![BTreeSet::new(); nf],
            endless: vec![0; nf],
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
}
