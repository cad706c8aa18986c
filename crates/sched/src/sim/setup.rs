//! The simulated cluster and queues when the user gives none: a contended cluster sized by the
//! trace's offered load, quotas proportional to each team's GPU-hours, and entitlements.

use std::collections::BTreeMap;

use super::pods::PODS_READY_TIMEOUT_S;
use super::{GRACE_S, Knowledge, MIN_SATURATED_S, RESUME_OVERHEAD_S, TraceJob};
use crate::config::{
    Cluster, CohortSpec, FlavorQuota, MAX_NODE_GPUS, QueueSpec, StopPolicy, Topology,
};

/// GPUs per node assumed for the default contended cluster.
pub const DEFAULT_GPUS_PER_NODE: u32 = 8;

/// Flavor name of the default cluster.
pub const DEFAULT_FLAVOR: &str = "gpu";

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

/// The trace with its arrivals `factor` times as fast: each submit time's distance from the
/// first divided by `factor` (rounded), durations and sizes unchanged. Replayed on the cluster
/// and quotas sized for the trace as given, it asks how the policies hold up as demand grows.
pub fn with_load(trace: &[TraceJob], factor: f64) -> Vec<TraceJob> {
    let first = trace.iter().map(|j| j.submit_s).min().unwrap_or(0);
    trace
        .iter()
        .map(|j| TraceJob {
            submit_s: first + ((j.submit_s - first) as f64 / factor).round() as u64,
            ..j.clone()
        })
        .collect()
}

/// The most GPUs the trace's jobs would hold at once if each started when submitted: a
/// cluster this large never makes a job wait.
fn peak_demand(trace: &[TraceJob]) -> u64 {
    // Ends sort before starts at the same instant: a job ending as another arrives frees its GPUs.
    let mut edges: Vec<(u64, bool, u64)> = Vec::with_capacity(2 * trace.len());
    // A job of no duration holds nothing (and its end would sort before its start).
    for j in trace.iter().filter(|j| j.duration_s > 0) {
        edges.push((j.submit_s, true, u64::from(j.gpus)));
        edges.push((
            j.submit_s.saturating_add(j.duration_s),
            false,
            u64::from(j.gpus),
        ));
    }
    edges.sort_unstable();
    let (mut now, mut peak) = (0u64, 0u64);
    for (_, start, gpus) in edges {
        if start {
            now += gpus;
            peak = peak.max(now);
        } else {
            now -= gpus;
        }
    }
    peak
}

/// A contended cluster for a trace: its mean offered load rounded up to whole nodes, and at
/// least its largest job. Nodes have 8 GPUs, or as many as the trace's largest job puts on
/// one node when that is more (up to [`MAX_NODE_GPUS`]: a job asking more on one node is
/// refused by `check_replayable`, naming it). It is never larger than the trace's peak demand
/// (its jobs each started on arrival): a trace whose jobs arrive together (a sweep, a burst)
/// has a tiny submit span and an offered load far above what it could use, and a cluster that
/// size would contend for nothing (and, at millions of nodes, not fit in memory).
pub fn default_cluster(trace: &[TraceJob]) -> Cluster {
    let per_node = trace
        .iter()
        .map(|j| j.shape().1)
        .max()
        .unwrap_or(0)
        .clamp(DEFAULT_GPUS_PER_NODE, MAX_NODE_GPUS);
    let g = f64::from(per_node);
    let by_peak = peak_demand(trace).div_ceil(u64::from(per_node));
    let by_load = ((offered_load(trace) / g).ceil() as u64).min(by_peak) as usize;
    let largest = trace
        .iter()
        .map(|j| {
            let (pods, per) = j.shape();
            // Pods that share a node: as many as fit, the rest on further nodes (a pod larger
            // than a node gets one, and `check_replayable` names it).
            pods.div_ceil((per_node / per.max(1)).max(1))
        })
        .max()
        .unwrap_or(1) as usize;
    Cluster::uniform(by_load.max(largest).max(1), per_node, DEFAULT_FLAVOR)
}

/// `cluster` with its nodes, in order, labelled with racks of `nodes_per_rack` (`rack-0`, …):
/// a racked cluster for placement experiments.
pub fn with_racks(mut cluster: Cluster, nodes_per_rack: usize) -> Cluster {
    for (i, n) in cluster.nodes.iter_mut().enumerate() {
        n.rack = Some(format!("rack-{}", i / nodes_per_rack.max(1)));
    }
    cluster
}

/// `trace` with every multi-node gang that one rack of `nodes_per_rack` default-sized nodes
/// can hold required to stay in one (`topology: rack`).
pub fn requiring_one_rack(trace: &[TraceJob], nodes_per_rack: usize) -> Vec<TraceJob> {
    trace
        .iter()
        .map(|t| {
            let (pods, per) = t.shape();
            let per_rack = nodes_per_rack as u32 * (DEFAULT_GPUS_PER_NODE / per.max(1));
            TraceJob {
                topology: (t.nodes > 1 && pods <= per_rack).then_some(Topology::Rack),
                ..t.clone()
            }
        })
        .collect()
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
            quotas[i].push(FlavorQuota::unlimited(flavor, n as u32));
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
            stop_policy: StopPolicy::None,
            preemption: Default::default(),
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
pub fn describe_setup(
    trace: &[TraceJob],
    cluster: &Cluster,
    queues: &[QueueSpec],
    knowledge: Knowledge,
) -> String {
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
        "trace: {} jobs, offered load {:.1} GPUs; cluster: {} GPUs on {} nodes{}; nominal quotas: {}; \
         run times told to every policy: {}; preemption is graceful \
         (SIGTERM, {GRACE_S} s grace to checkpoint, {RESUME_OVERHEAD_S} s to resume); \
         a team is saturated while it has work waiting and asks for at least its entitled GPUs; \
         shares are judged (ok / OUT of 10%) over the time all teams are saturated together, \
         when that is at least {MIN_SATURATED_S} s (else n/a); kueue-strict admits gangs onto \
         nodes, kueue-pods by quota alone, its pods then placed one by one by a spreading \
         kube-scheduler, and evicted and requeued when not all running within \
         {PODS_READY_TIMEOUT_S} s (waitForPodsReady)",
        trace.len(),
        offered_load(trace),
        cluster.total_gpus(),
        cluster.nodes.len(),
        node_sizes(cluster),
        quotas.join(", "),
        knowledge.describe()
    )
}

/// The line saying which cohort tree Ferry and the Kueue peers replay, each cohort with its
/// parent, its own GPUs and its limits per flavor; `None` without cohort specs.
pub fn describe_cohorts(cohorts: &[CohortSpec]) -> Option<String> {
    if cohorts.is_empty() {
        return None;
    }
    let per_flavor = |pick: fn(&FlavorQuota) -> Option<u32>, c: &CohortSpec| {
        (c.quotas.iter())
            .filter_map(|q| pick(q).map(|n| format!("{n} {}", q.flavor)))
            .collect::<Vec<_>>()
            .join(" + ")
    };
    let described: Vec<String> = cohorts
        .iter()
        .map(|c| {
            let mut parts: Vec<String> = c.parent.iter().map(|p| format!("under {p}")).collect();
            let own = per_flavor(|q| Some(q.nominal).filter(|n| *n > 0), c);
            if !own.is_empty() {
                parts.push(format!("{own} GPU(s) of its own"));
            }
            let borrows = per_flavor(|q| q.borrowing_limit, c);
            if !borrows.is_empty() {
                parts.push(format!("borrows at most {borrows}"));
            }
            let lends = per_flavor(|q| q.lending_limit, c);
            if !lends.is_empty() {
                parts.push(format!("lends at most {lends}"));
            }
            if parts.is_empty() {
                c.name.clone()
            } else {
                format!("{} ({})", c.name, parts.join(", "))
            }
        })
        .collect();
    Some(format!(
        "cohort trees replayed (ferry and kueue; the other policies share no quota): {}",
        described.join("; ")
    ))
}

/// ` of 8 GPUs` when every node has the same number of GPUs, else ` of 4–8 GPUs`.
fn node_sizes(cluster: &Cluster) -> String {
    let sizes = cluster.nodes.iter().map(|n| n.gpus);
    match (sizes.clone().min(), sizes.max()) {
        (Some(lo), Some(hi)) if lo == hi => format!(" of {hi} GPUs"),
        (Some(lo), Some(hi)) => format!(" of {lo}–{hi} GPUs"),
        _ => String::new(),
    }
}

/// Each queue's entitlement: the fraction of the cluster's GPUs it is owed when every queue is
/// saturated. A queue is owed its nominal quota; GPUs no quota covers are split by fair-share
/// weight; when the quotas add up to more than the cluster, every quota is scaled down alike.
/// In symbols, with `n` a queue's nominal GPUs (all flavors), `N` their sum, `w` its weight, `W`
/// the sum of weights and `C` the cluster's GPUs: `(n + w / W * max(0, C - N)) / max(C, N)`.
/// In a cohort tree the same split is made at each cohort, between its queues and child cohorts
/// (by their own weights), of what the cohort is owed.
pub fn entitlements(queues: &[QueueSpec], cohorts: &[CohortSpec], cluster: &Cluster) -> Vec<f64> {
    crate::entitlement::entitlements_in(queues, cohorts, cluster.total_gpus() as f64)
}
