//! Quota-only admission followed by pod-by-pod placement: how Kueue without topology-aware
//! scheduling runs gangs, for the `kueue-pods` peer.
//!
//! Kueue admits a workload when its queue has the quota; it does not look at nodes. The
//! kube-scheduler then places the workload's pods one at a time, and its default scoring
//! (`NodeResourcesFit`, `LeastAllocated`) prefers the node with the most free resources, which
//! spreads small jobs over many nodes. A gang whose pods cannot all be placed holds the GPUs of
//! the pods that were placed while it waits for the rest, doing no work: the "fragmentation
//! admits unschedulable gangs" failure. Kueue's `waitForPodsReady` bounds the wait: a workload
//! whose pods are not all running within the timeout is evicted, and requeued after a backoff.
//! Ferry's scheduler places a gang whole at admission, so under it none of this can happen;
//! this module exists to measure what that is worth on a trace.

use std::cell::RefCell;
use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, HashMap};

use crate::config::{Cluster, Time, Topology};

/// Kueue's `waitForPodsReady.timeout` default: a workload whose pods are not all running this
/// long after admission is evicted.
pub const PODS_READY_TIMEOUT_S: u64 = 300;

/// Kueue's `requeuingStrategy.backoffBaseSeconds` default: the first requeue waits this long,
/// each further one twice as long as the last.
pub const REQUEUE_BACKOFF_BASE_S: u64 = 60;

/// Kueue's `requeuingStrategy.backoffMaxSeconds` default: the longest requeue backoff.
pub const REQUEUE_BACKOFF_MAX_S: u64 = 3600;

/// The backoff before the `n`-th requeue of one workload (n ≥ 1), without Kueue's jitter.
pub fn requeue_backoff_s(n: u32) -> u64 {
    REQUEUE_BACKOFF_BASE_S
        .saturating_mul(1u64 << (n.saturating_sub(1)).min(32))
        .min(REQUEUE_BACKOFF_MAX_S)
}

/// Node `n` (of `flavor`) now has `gpus` free: `free` and the flavor's index by free GPUs
/// change together.
fn set_free(
    free: &mut [u32],
    by_free: &mut HashMap<String, BTreeSet<(u32, Reverse<usize>)>>,
    flavor: &str,
    n: usize,
    gpus: u32,
) {
    let index = by_free.get_mut(flavor).expect("every flavor is indexed");
    index.remove(&(free[n], Reverse(n)));
    free[n] = gpus;
    index.insert((gpus, Reverse(n)));
}

/// A gang admitted by quota and not yet running.
#[derive(Debug)]
struct Admitted {
    flavor: String,
    pods: u32,
    per: u32,
    /// All pods in the domain of the first placed, as a required pod affinity on the rack
    /// (or NVLink domain) label makes the kube-scheduler do.
    topology: Option<Topology>,
    admitted_at: Time,
    /// Admitted since the last placement pass.
    fresh: bool,
}

/// A pod's GPUs and the topology domain its gang must share.
type PodShape = (u32, Option<Topology>);

/// The kube-scheduler's view: real nodes, and the pods of admitted workloads.
#[derive(Debug)]
pub(super) struct PodLayer {
    flavors: Vec<String>,
    /// Each node's (NVLink domain, rack) labels.
    labels: Vec<[Option<String>; 2]>,
    /// Each node's GPUs.
    caps: Vec<u32>,
    free: Vec<u32>,
    /// Each flavor's nodes by free GPUs, fewest first, ties with the higher index first: the
    /// last is the node the kube-scheduler's spreading picks for a pod free to go anywhere.
    by_free: HashMap<String, BTreeSet<(u32, Reverse<usize>)>>,
    /// Admitted and not yet running, in admission order (admission time, job).
    waiting: BTreeMap<(Time, usize), Admitted>,
    /// Job → admission key in `waiting`.
    key: HashMap<usize, (Time, usize)>,
    /// Job → the GPUs each of its pods takes, and its placed pods' nodes.
    placed: HashMap<usize, (u32, Vec<usize>)>,
    /// GPUs freed or work admitted since the last placement pass (else nothing new can be
    /// placed).
    changed: bool,
    /// GPUs admitted to workloads not running yet: their placed pods' GPUs sit idle, and the
    /// rest of their quota can be admitted to no one else.
    held: u64,
    /// Evictions for pods not ready in time, per job (for the backoff).
    timeouts: HashMap<usize, u32>,
    /// Admissions whose pods could not all be placed in the pass right after.
    pub(super) admitted_unplaced: u64,
    /// By pod size and topology: the most such pods one domain of each flavor could host,
    /// computed once per shape since the nodes never change (`flavor_for`).
    largest: RefCell<BTreeMap<PodShape, BTreeMap<String, u64>>>,
}

impl PodLayer {
    pub(super) fn new(cluster: &Cluster) -> PodLayer {
        PodLayer {
            flavors: cluster.nodes.iter().map(|n| n.flavor.clone()).collect(),
            labels: cluster
                .nodes
                .iter()
                .map(|n| [n.nvlink_domain.clone(), n.rack.clone()])
                .collect(),
            free: cluster.nodes.iter().map(|n| n.gpus).collect(),
            caps: cluster.nodes.iter().map(|n| n.gpus).collect(),
            by_free: cluster
                .nodes
                .iter()
                .enumerate()
                .fold(HashMap::new(), |mut m, (i, n)| {
                    m.entry(n.flavor.clone())
                        .or_insert_with(BTreeSet::new)
                        .insert((n.gpus, Reverse(i)));
                    m
                }),
            waiting: BTreeMap::new(),
            key: HashMap::new(),
            placed: HashMap::new(),
            changed: false,
            held: 0,
            timeouts: HashMap::new(),
            admitted_unplaced: 0,
            largest: RefCell::default(),
        }
    }

    /// The flavor a gang of `pods` pods of `per` GPUs must be pinned to (as a node selector
    /// would), when some flavor's nodes could never hold it even idle: Kueue admitting by
    /// quota alone would put it on the first flavor with quota, evict it there when its pods
    /// time out, and admit it there again, for ever. `None` when every flavor could.
    pub(super) fn flavor_for(
        &self,
        pods: u32,
        per: u32,
        topology: Option<Topology>,
    ) -> Option<&str> {
        let mut largest = self.largest.borrow_mut();
        let best = largest
            .entry((per, topology))
            .or_insert_with(|| self.largest_domains(per, topology));
        let holds = |f: &str| best[f] >= u64::from(pods);
        if best.keys().all(|f| holds(f)) {
            return None;
        }
        // Cluster order of flavors: the first node of each.
        self.flavors.iter().map(String::as_str).find(|f| holds(f))
    }

    /// The most pods of `per` GPUs one domain of each flavor could host, idle.
    fn largest_domains(&self, per: u32, topology: Option<Topology>) -> BTreeMap<String, u64> {
        // What each domain (every node its own where it has no label) could host, by flavor.
        let mut room: BTreeMap<(&str, Option<&str>, usize), u64> = BTreeMap::new();
        for (n, flavor) in self.flavors.iter().enumerate() {
            let domain = topology.and_then(|t| self.labels[n][t.level()].as_deref());
            let alone = if topology.is_some() && domain.is_none() {
                n
            } else {
                usize::MAX
            };
            *room.entry((flavor, domain, alone)).or_default() +=
                u64::from(self.caps[n] / per.max(1));
        }
        let mut best: BTreeMap<String, u64> = BTreeMap::new();
        for ((flavor, _, _), r) in room {
            let most = best.entry(flavor.to_owned()).or_default();
            *most = (*most).max(r);
        }
        best
    }

    /// Job `i`'s quota was reserved at `now`: its `pods` pods of `per` GPUs wait for nodes.
    pub(super) fn admit(
        &mut self,
        i: usize,
        flavor: &str,
        pods: u32,
        per: u32,
        topology: Option<Topology>,
        now: Time,
    ) {
        let key = (now, i);
        self.waiting.insert(
            key,
            Admitted {
                flavor: flavor.to_string(),
                pods,
                per,
                topology,
                admitted_at: now,
                fresh: true,
            },
        );
        self.key.insert(i, key);
        self.held += u64::from(pods) * u64::from(per);
        self.placed.insert(i, (per, Vec::new()));
        self.changed = true;
    }

    /// One pass of the kube-scheduler over every pending pod, oldest admission first: each goes
    /// to the node of its flavor with the most free GPUs that can hold it (ties to the first
    /// node). Returns the jobs whose pods are now all placed, with their nodes; they run from
    /// now and leave the waiting set.
    pub(super) fn place(&mut self) -> Vec<(usize, Vec<usize>)> {
        if !std::mem::take(&mut self.changed) {
            return Vec::new();
        }
        let mut ready = Vec::new();
        for (&(_, i), a) in &mut self.waiting {
            let (_, placed) = self
                .placed
                .get_mut(&i)
                .expect("admitted job has placements");
            while (placed.len() as u32) < a.pods {
                // The first pod's domain binds the rest (an unlabelled node is its own). The
                // first goes only to a domain that could hold the whole gang: the
                // kube-scheduler does not know, but it breaks ties at random and gets there
                // after some timeouts, where this first-node tie-break would never.
                let same = |l: usize, n: usize, f: usize| {
                    n == f || self.labels[n][l].is_some() && self.labels[n][l] == self.labels[f][l]
                };
                let with_first = |n: usize| match (a.topology, placed.first()) {
                    (None, _) => true,
                    (Some(t), Some(&f)) => same(t.level(), n, f),
                    (Some(t), None) => {
                        let room: u32 = (0..self.caps.len())
                            .filter(|&m| same(t.level(), m, n))
                            .map(|m| self.caps[m] / a.per.max(1))
                            .sum();
                        room >= a.pods
                    }
                };
                let best = match a.topology {
                    // Anywhere: the most free node of the flavor, at once.
                    None => self.by_free[&a.flavor]
                        .last()
                        .filter(|&&(free, _)| free >= a.per)
                        .map(|&(_, Reverse(n))| n),
                    Some(_) => (0..self.free.len())
                        .filter(|&n| {
                            self.flavors[n] == a.flavor && self.free[n] >= a.per && with_first(n)
                        })
                        .max_by_key(|&n| (self.free[n], Reverse(n))),
                };
                let Some(n) = best else { break };
                let left = self.free[n] - a.per;
                set_free(&mut self.free, &mut self.by_free, &a.flavor, n, left);
                placed.push(n);
            }
            if placed.len() as u32 == a.pods {
                ready.push((i, placed.clone()));
            } else if std::mem::take(&mut a.fresh) {
                self.admitted_unplaced += 1;
            }
        }
        for (i, _) in &ready {
            let key = self.key.remove(i).expect("ready job was waiting");
            let a = self.waiting.remove(&key).expect("ready job was waiting");
            self.held -= u64::from(a.pods) * u64::from(a.per);
        }
        ready
    }

    /// Whether job `i` waits for nodes (admitted, not all its pods placed).
    pub(super) fn is_waiting(&self, i: usize) -> bool {
        self.key.contains_key(&i)
    }

    /// Frees job `i`'s pods (it ended, was evicted or timed out); forgets it.
    pub(super) fn release(&mut self, i: usize) {
        let (per, nodes) = self.placed.remove(&i).unwrap_or_default();
        if let Some(key) = self.key.remove(&i)
            && let Some(a) = self.waiting.remove(&key)
        {
            self.held -= u64::from(a.pods) * u64::from(a.per);
        }
        for n in nodes {
            let back = self.free[n] + per;
            set_free(&mut self.free, &mut self.by_free, &self.flavors[n], n, back);
        }
        self.changed = true;
    }

    /// Jobs whose pods were not all running `PODS_READY_TIMEOUT_S` after admission, at `now`,
    /// each with the backoff before it may be admitted again. They are released.
    pub(super) fn timed_out(&mut self, now: Time) -> Vec<(usize, u64)> {
        let late: Vec<usize> = self
            .waiting
            .iter()
            .filter(|(_, a)| a.admitted_at + PODS_READY_TIMEOUT_S <= now)
            .map(|(&(_, i), _)| i)
            .collect();
        late.into_iter()
            .map(|i| {
                self.release(i);
                let n = self.timeouts.entry(i).or_insert(0);
                *n += 1;
                (i, requeue_backoff_s(*n))
            })
            .collect()
    }

    /// When the next waiting workload's pods-ready timeout falls.
    pub(super) fn next_timeout(&self) -> Option<Time> {
        self.waiting
            .values()
            .map(|a| a.admitted_at + PODS_READY_TIMEOUT_S)
            .min()
    }

    /// GPUs admitted to workloads that are not running yet (`held`).
    pub(super) fn held(&self) -> u64 {
        self.held
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gang_is_pinned_only_to_a_flavor_that_could_ever_hold_it() {
        use crate::config::Node;
        let node = |name: &str, gpus: u32, flavor: &str, rack: Option<&str>| Node {
            name: name.into(),
            gpus,
            flavor: flavor.into(),
            rack: rack.map(Into::into),
            nvlink_domain: None,
        };
        // Flavor `a`: two 8-GPU nodes in two racks; flavor `b`: two 8-GPU nodes in one rack.
        let cluster = Cluster {
            nodes: vec![
                node("a0", 8, "a", Some("r0")),
                node("a1", 8, "a", Some("r1")),
                node("b0", 8, "b", Some("r2")),
                node("b1", 8, "b", Some("r2")),
            ],
        };
        let layer = PodLayer::new(&cluster);
        // Any flavor holds a 16-GPU gang that may span racks: admission chooses.
        assert_eq!(layer.flavor_for(2, 8, None), None);
        // Required in one rack, only `b` ever holds it: Kueue admitting it on `a` would evict
        // and readmit it there for ever.
        assert_eq!(layer.flavor_for(2, 8, Some(Topology::Rack)), Some("b"));
        // An unlabelled node is a rack of its own.
        let cluster = Cluster {
            nodes: vec![node("a0", 4, "a", None), node("b0", 8, "b", None)],
        };
        let layer = PodLayer::new(&cluster);
        assert_eq!(layer.flavor_for(2, 4, Some(Topology::Rack)), Some("b"));
        assert_eq!(layer.flavor_for(1, 4, Some(Topology::Rack)), None);
    }

    #[test]
    fn pods_spread_and_a_gang_waits_on_the_gpus_it_placed() {
        let cluster = Cluster::uniform(2, 8, "gpu");
        let mut layer = PodLayer::new(&cluster);
        // Two 4-GPU jobs spread: one per node.
        layer.admit(0, "gpu", 1, 4, None, 0);
        layer.admit(1, "gpu", 1, 4, None, 0);
        let ready = layer.place();
        assert_eq!(ready, vec![(0, vec![0]), (1, vec![1])]);
        // A one-pod 8-GPU job fits no node while both are half used.
        layer.admit(2, "gpu", 1, 8, None, 10);
        assert!(layer.place().is_empty());
        assert!(layer.is_waiting(2));
        assert_eq!(layer.admitted_unplaced, 1);
        // Its 8 GPUs of quota are admitted, and nothing runs on them.
        assert_eq!(layer.held(), 8);
        layer.release(0);
        assert_eq!(layer.place(), vec![(2, vec![0])]);
        assert_eq!(layer.held(), 0);
        // A gang of two 4-GPU pods places one pod on node 1's free half and waits for the
        // other, holding those 4 GPUs idle.
        layer.admit(3, "gpu", 2, 4, None, 20);
        assert!(layer.place().is_empty());
        assert_eq!(layer.held(), 8);
        assert_eq!(layer.free, vec![0, 0]);
        assert_eq!(layer.admitted_unplaced, 2);
        assert_eq!(layer.next_timeout(), Some(20 + PODS_READY_TIMEOUT_S));
        assert_eq!(layer.timed_out(319), vec![]);
        assert_eq!(layer.timed_out(320), vec![(3, 60)]);
        assert_eq!(layer.held(), 0);
        assert!(!layer.is_waiting(3));
    }

    #[test]
    fn a_gang_with_a_rack_affinity_places_its_pods_in_the_first_pods_rack() {
        let mut cluster = Cluster::uniform(4, 8, "gpu");
        for (i, n) in cluster.nodes.iter_mut().enumerate() {
            // r0 holds one node, r1 three.
            n.rack = Some(if i == 0 { "r0" } else { "r1" }.into());
        }
        let mut layer = PodLayer::new(&cluster);
        // Three pods of 4 GPUs: node 0 (r0, the first of the emptiest) could not hold them all,
        // so every pod lands in r1, and on distinct nodes (spreading).
        layer.admit(1, "gpu", 3, 4, Some(Topology::Rack), 0);
        assert_eq!(layer.place(), vec![(1, vec![1, 2, 3])]);
        // Without the affinity the first pod takes node 0.
        layer.admit(2, "gpu", 2, 4, None, 0);
        assert_eq!(layer.place(), vec![(2, vec![0, 0])]);
    }

    #[test]
    fn the_requeue_backoff_doubles_up_to_an_hour() {
        let b: Vec<u64> = (1..=8).map(requeue_backoff_s).collect();
        assert_eq!(b, vec![60, 120, 240, 480, 960, 1920, 3600, 3600]);
        assert_eq!(requeue_backoff_s(200), 3600);
    }
}
