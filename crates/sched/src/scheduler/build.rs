//! Building a scheduler from its configuration, and the checks that refuse bad configuration
//! (an unknown cohort, a borrowing limit past the cohort's capacity) by field and fix.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, HashMap};

use super::{Cohort, QueueState, Quota, Scheduler, room};
use crate::config::{
    ANY_FLAVOR, Cluster, CohortSpec, FlavorQuota, MAX_NODE_GPUS, Options, PriorityClass, QueueSpec,
};
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

/// The quota entry of `owner` (`at`: its field path) for each flavor it covers: the flavor's
/// index, the entry's index and the entry; named flavors first, then an `any` entry for every
/// flavor not named.
fn per_flavor<'a>(
    at: &str,
    owner: &str,
    quotas: &'a [FlavorQuota],
    pools: &[Pool],
    pool_idx: &HashMap<String, u16>,
) -> Result<Vec<(usize, usize, &'a FlavorQuota)>> {
    let mut out = vec![None; pools.len()];
    let order = (0..quotas.len())
        .filter(|&j| quotas[j].flavor != ANY_FLAVOR)
        .chain((0..quotas.len()).filter(|&j| quotas[j].flavor == ANY_FLAVOR));
    let mut seen_any = false;
    for j in order {
        let fq = &quotas[j];
        let field = format!("{at}.quotas[{j}].flavor");
        if fq.flavor == ANY_FLAVOR {
            if seen_any {
                return Err(cfg_err(
                    field,
                    format!("flavor `{ANY_FLAVOR}` appears twice in {owner}"),
                    "merge the two quota entries",
                ));
            }
            seen_any = true;
            for slot in out.iter_mut().filter(|x| x.is_none()) {
                *slot = Some((j, fq));
            }
            continue;
        }
        let Some(&f) = pool_idx.get(&fq.flavor) else {
            let known: Vec<_> = pools.iter().map(|p| p.name.as_str()).collect();
            return Err(cfg_err(
                field,
                format!("flavor `{}` of {owner} matches no node", fq.flavor),
                format!(
                    "use one of the cluster's flavors ({}) or `{ANY_FLAVOR}`",
                    known.join(", ")
                ),
            ));
        };
        if out[usize::from(f)].replace((j, fq)).is_some() {
            return Err(cfg_err(
                field,
                format!("flavor `{}` appears twice in {owner}", fq.flavor),
                "merge the two quota entries",
            ));
        }
    }
    Ok(out
        .into_iter()
        .enumerate()
        .filter_map(|(f, x)| x.map(|(j, fq)| (f, j, fq)))
        .collect())
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
        Scheduler::with_cohorts(cluster, queues, &[], priorities, opts)
    }

    /// Like `with_options`, with cohort trees: `cohort_specs` gives cohorts GPUs of their own,
    /// parents, and limits on what they borrow from and lend to them.
    pub fn with_cohorts(
        cluster: Cluster,
        queues: Vec<QueueSpec>,
        cohort_specs: &[CohortSpec],
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
        let mut cohort_of = |name: &str, cohorts: &mut Vec<Cohort>| -> u32 {
            let next = cohorts.len() as u32;
            let c = *cohort_idx.entry(name.to_owned()).or_insert(next);
            if c == next {
                cohorts.push(Cohort {
                    name: name.to_owned(),
                    parent: None,
                    depth: 0,
                    members: Vec::new(),
                    cap: vec![0; nf],
                    lend: vec![0; nf],
                    borrow: vec![None; nf],
                    used: vec![0; nf],
                    weight: 1.0,
                    nominal: vec![0; nf],
                    usage: vec![0; nf],
                });
            }
            c
        };
        // Cohort specs first: their names and parents (a parent no spec names is a root with
        // no GPUs of its own, as Kueue creates it).
        let mut specced: HashMap<u32, usize> = HashMap::new();
        for (i, cs) in cohort_specs.iter().enumerate() {
            let c = cohort_of(&cs.name, &mut cohorts);
            if specced.insert(c, i).is_some() {
                return Err(cfg_err(
                    format!("cohorts[{i}].name"),
                    format!("cohort `{}` is defined twice", cs.name),
                    "give each cohort a unique name",
                ));
            }
            if !(cs.fair_share_weight.is_finite() && cs.fair_share_weight > 0.0) {
                return Err(cfg_err(
                    format!("cohorts[{i}].fairShareWeight"),
                    format!(
                        "weight {} of cohort `{}` is not a positive number",
                        cs.fair_share_weight, cs.name
                    ),
                    "set a weight greater than 0 (default 1)",
                ));
            }
            cohorts[c as usize].weight = cs.fair_share_weight;
            if let Some(p) = &cs.parent {
                let p = cohort_of(p, &mut cohorts);
                cohorts[c as usize].parent = Some(p);
            }
        }
        let mut qs = Vec::new();
        // Per queue and flavor, the index of the quota entry that gives it (for messages).
        let mut entry_of: Vec<Vec<Option<usize>>> = Vec::new();
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
            entry_of.push(vec![None; nf]);
            for (f, j, fq) in per_flavor(
                &format!("queues[{i}]"),
                &format!("queue `{}`", q.name),
                &q.quotas,
                &pools,
                &pool_idx,
            )? {
                let field = format!("queues[{i}].quotas[{j}]");
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
                entry_of[i][f] = Some(j);
                quota[f] = Some(Quota {
                    nominal: u64::from(fq.nominal),
                    borrow: fq.borrowing_limit.map(u64::from),
                    lend,
                });
            }
            let pool = q.cohort.as_deref().map(|c| cohort_of(c, &mut cohorts));
            if let Some(c) = pool {
                for (f, qq) in quota.iter().enumerate() {
                    if let Some(qq) = qq {
                        cohorts[c as usize].cap[f] += qq.lend;
                    }
                }
            }
            qs.push(QueueState {
                name: q.name.clone(),
                cohort: None,
                pool,
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
        let names: Vec<&str> = {
            let mut n = vec![""; cohorts.len()];
            for (name, &c) in &cohort_idx {
                n[c as usize] = name;
            }
            n
        };
        // Depths (refusing a cohort that is its own ancestor), then each tree's root.
        for c in 0..cohorts.len() {
            let (mut depth, mut at) = (0u32, c);
            while let Some(p) = cohorts[at].parent {
                depth += 1;
                at = p as usize;
                if depth as usize > cohorts.len() {
                    let i = specced[&(c as u32)];
                    return Err(cfg_err(
                        format!("cohorts[{i}].parent"),
                        format!("cohort `{}` is its own ancestor", names[c]),
                        "make the parents form a tree: remove or change one parent in the loop",
                    ));
                }
            }
            cohorts[c].depth = depth;
        }
        let root = |mut c: u32| {
            while let Some(p) = cohorts[c as usize].parent {
                c = p;
            }
            c
        };
        let roots: Vec<u32> = (0..cohorts.len() as u32).map(root).collect();
        for (i, q) in qs.iter_mut().enumerate() {
            q.cohort = q.pool.map(|c| roots[c as usize]);
            if let Some(r) = q.cohort {
                cohorts[r as usize].members.push(i as u32);
            }
        }
        // Each cohort's own GPUs, then bottom-up what each lends to its parent.
        let mut own = vec![0u64; cohorts.len()];
        let mut lend_limits: Vec<Vec<Option<u64>>> = vec![vec![None; nf]; cohorts.len()];
        let mut cohort_entry: Vec<Vec<Option<usize>>> = vec![vec![None; nf]; cohorts.len()];
        for (&c, &i) in &specced {
            let cs = &cohort_specs[i];
            for (f, j, fq) in per_flavor(
                &format!("cohorts[{i}]"),
                &format!("cohort `{}`", cs.name),
                &cs.quotas,
                &pools,
                &pool_idx,
            )? {
                if cs.parent.is_none() && fq.borrowing_limit.is_some_and(|b| b > 0) {
                    return Err(cfg_err(
                        format!("cohorts[{i}].quotas[{j}].borrowingLimit"),
                        format!(
                            "cohort `{}` has a borrowing limit but no parent to borrow from",
                            cs.name
                        ),
                        format!("set cohorts[{i}].parent or remove borrowingLimit"),
                    ));
                }
                let co = &mut cohorts[c as usize];
                co.cap[f] += u64::from(fq.nominal);
                co.nominal[f] += u64::from(fq.nominal);
                co.borrow[f] = fq.borrowing_limit.map(u64::from);
                own[c as usize] += u64::from(fq.nominal);
                lend_limits[c as usize][f] = fq.lending_limit.map(u64::from);
                cohort_entry[c as usize][f] = Some(j);
            }
        }
        for q in &qs {
            if let Some(c) = q.pool {
                for (f, qq) in q.quota.iter().enumerate() {
                    cohorts[c as usize].nominal[f] += qq.map_or(0, |x| x.nominal);
                }
            }
        }
        let mut bottom_up: Vec<usize> = (0..cohorts.len()).collect();
        bottom_up.sort_by_key(|&c| Reverse(cohorts[c].depth));
        for &c in &bottom_up {
            for (f, limit) in lend_limits[c].iter().enumerate() {
                let cap = cohorts[c].cap[f];
                let lend = limit.map_or(cap, |l| l.min(cap));
                cohorts[c].lend[f] = lend;
                if let Some(p) = cohorts[c].parent {
                    cohorts[p as usize].cap[f] += lend;
                    cohorts[p as usize].nominal[f] += cohorts[c].nominal[f];
                }
            }
        }
        // A tree with one queue and no GPUs of its own is a typo or a missing queue (nobody to
        // borrow from), unless a Cohort document defines one of its cohorts: a tree declared
        // ahead of its second team, or left by a team that went.
        let mut tree_own = vec![0u64; cohorts.len()];
        let mut tree_defined = vec![false; cohorts.len()];
        for c in 0..cohorts.len() {
            tree_own[roots[c] as usize] += own[c];
            tree_defined[roots[c] as usize] |= specced.contains_key(&(c as u32));
        }
        let lone = |r: u32| {
            cohorts[r as usize].members.len() < 2
                && tree_own[r as usize] == 0
                && !tree_defined[r as usize]
        };
        for (i, q) in queues.iter().enumerate() {
            let Some(r) = qs[i].cohort else { continue };
            if lone(r) {
                let mut known: Vec<&str> = (0..cohorts.len())
                    .filter(|&k| !lone(roots[k]) && !cohorts[roots[k] as usize].members.is_empty())
                    .map(|k| names[k])
                    .collect();
                known.sort();
                return Err(cfg_err(
                    format!("queues[{i}].cohort"),
                    format!(
                        "cohort `{}` of queue `{}` is unknown: no other queue is in it",
                        q.cohort.as_deref().unwrap_or_default(),
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
        // Borrowing limits must be satisfiable by what the rest of the tree lends.
        for (i, q) in qs.iter().enumerate() {
            let Some(c) = q.pool else { continue };
            for (f, qq) in q.quota.iter().enumerate() {
                let Some(qq) = qq else { continue };
                let others = room(&cohorts, c, f) - qq.lend;
                if let Some(b) = qq.borrow
                    && b > others
                {
                    let j = entry_of[i][f].unwrap_or_default();
                    return Err(cfg_err(
                        format!("queues[{i}].quotas[{j}].borrowingLimit"),
                        format!(
                            "queue `{}` may borrow {b} `{}` GPUs but the rest of cohort `{}` lends only {others}",
                            q.name, pools[f].name, names[c as usize]
                        ),
                        format!(
                            "lower borrowingLimit to at most {others} or add lending quota to the cohort"
                        ),
                    ));
                }
            }
        }
        for (&c, &i) in &specced {
            let co = &cohorts[c as usize];
            let Some(p) = co.parent else { continue };
            for (f, pool) in pools.iter().enumerate() {
                let others = room(&cohorts, p, f) - co.lend[f];
                if let Some(b) = co.borrow[f]
                    && b > others
                {
                    let j = cohort_entry[c as usize][f].unwrap_or_default();
                    return Err(cfg_err(
                        format!("cohorts[{i}].quotas[{j}].borrowingLimit"),
                        format!(
                            "cohort `{}` may borrow {b} `{}` GPUs but the rest of cohort `{}`'s tree lends only {others}",
                            names[c as usize], pool.name, names[p as usize]
                        ),
                        format!(
                            "lower borrowingLimit to at most {others} or add lending quota to the tree"
                        ),
                    ));
                }
            }
        }
        // Entitlement in GPUs when the whole tree is saturated, of the GPUs of the flavors its
        // queues have quota in (the simulator's `entitlements`, per tree).
        for r in (0..cohorts.len()).filter(|&c| !cohorts[c].members.is_empty()) {
            let capacity: f64 = (0..nf)
                .filter(|&f| {
                    cohorts[r]
                        .members
                        .iter()
                        .any(|&m| qs[m as usize].quota[f].is_some())
                })
                .map(|f| pools[f].nodes.iter().map(|n| f64::from(n.cap)).sum::<f64>())
                .sum();
            let members = &cohorts[r].members;
            let in_tree: Vec<QueueSpec> = members
                .iter()
                .map(|&m| queues[m as usize].clone())
                .collect();
            let tree: Vec<CohortSpec> = cohort_specs
                .iter()
                .filter(|cs| roots[cohort_idx[&cs.name] as usize] == r as u32)
                .cloned()
                .collect();
            let owed = crate::entitlement::entitlements_in(&in_tree, &tree, capacity);
            for (&m, e) in members.iter().zip(owed) {
                qs[m as usize].entitled = e * capacity;
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
