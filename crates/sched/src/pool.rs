//! Per-flavor placement index: free GPUs bucketed by count, per topology domain.
//!
//! Nodes are kept in buckets keyed by their number of free GPUs, once per topology level
//! (NVLink domain, rack, whole flavor), so finding the fewest nodes for a gang is a walk over
//! at most `max GPUs per node` buckets rather than over every node.

use std::collections::{BTreeSet, HashMap};

/// A node as the index is built from it: (name, GPUs, NVLink domain, rack).
pub(crate) type NodeDesc = (String, u32, Option<String>, Option<String>);

/// Topology levels searched narrowest first; the last one is the whole flavor.
pub(crate) const LEVELS: usize = 3;

/// One node's GPU state.
#[derive(Debug, Clone)]
pub(crate) struct NodeState {
    pub name: String,
    pub cap: u32,
    /// Idle GPUs nobody has claimed.
    pub free: u64,
    /// GPUs promised to a preemptor (idle or still used by a victim).
    pub nominated: u64,
    /// Nominated GPUs that are already idle.
    pub held: u64,
    /// Whether the node is in the bucket index (reserved nodes are taken out for a cycle).
    pub in_index: bool,
    /// Domain index per level.
    pub dom: [u32; LEVELS],
}

#[derive(Debug, Clone, Default)]
struct Domain {
    /// `buckets[k]`: nodes with exactly `k` free GPUs (k >= 1).
    buckets: Vec<BTreeSet<u32>>,
    /// Free GPUs on its indexed nodes.
    free: u64,
}

#[derive(Debug, Clone, Default)]
struct Level {
    domains: Vec<Domain>,
    /// Every domain holds one node: the level adds nothing.
    trivial: bool,
}

/// All nodes of one flavor.
#[derive(Debug, Clone)]
pub(crate) struct Pool {
    pub name: String,
    pub nodes: Vec<NodeState>,
    pub max_cap: u32,
    /// (GPUs per node, nodes with that many), for quick feasibility checks.
    pub cap_hist: Vec<(u32, u64)>,
    /// Free GPUs on indexed nodes.
    pub free_total: u64,
    levels: Vec<Level>,
}

pub(crate) fn mask_all(cap: u32) -> u64 {
    if cap >= 64 {
        u64::MAX
    } else {
        (1u64 << cap) - 1
    }
}

impl Pool {
    /// Builds the index; `labels[i]` are node i's (nvlink, rack) labels.
    pub fn new(name: String, nodes: Vec<NodeDesc>) -> Pool {
        let max_cap = nodes.iter().map(|n| n.1).max().unwrap_or(0);
        let mut levels: Vec<Level> = (0..LEVELS).map(|_| Level::default()).collect();
        let mut names: [HashMap<String, u32>; 2] = [HashMap::new(), HashMap::new()];
        let mut states = Vec::with_capacity(nodes.len());
        for (name, cap, nv, rack) in nodes {
            let mut dom = [0u32; LEVELS];
            for (l, label) in [nv, rack].into_iter().enumerate() {
                let next = levels[l].domains.len() as u32;
                dom[l] = match label {
                    Some(s) => *names[l].entry(s).or_insert(next),
                    None => next,
                };
                if dom[l] == next {
                    levels[l].domains.push(Domain::default());
                }
            }
            if levels[2].domains.is_empty() {
                levels[2].domains.push(Domain::default());
            }
            dom[2] = 0;
            states.push(NodeState {
                name,
                cap,
                free: mask_all(cap),
                nominated: 0,
                held: 0,
                in_index: false,
                dom,
            });
        }
        let n = states.len();
        for level in &mut levels {
            level.trivial = level.domains.len() == n;
            for d in &mut level.domains {
                d.buckets = vec![BTreeSet::new(); max_cap as usize + 1];
            }
        }
        let mut cap_hist: Vec<(u32, u64)> = Vec::new();
        for st in &states {
            match cap_hist.iter_mut().find(|(c, _)| *c == st.cap) {
                Some((_, k)) => *k += 1,
                None => cap_hist.push((st.cap, 1)),
            }
        }
        let mut pool = Pool {
            name,
            nodes: states,
            max_cap,
            cap_hist,
            free_total: 0,
            levels,
        };
        for i in 0..n as u32 {
            pool.index_insert(i);
        }
        pool
    }

    pub fn index_remove(&mut self, n: u32) {
        let node = &mut self.nodes[n as usize];
        if !node.in_index {
            return;
        }
        node.in_index = false;
        let k = node.free.count_ones() as usize;
        self.free_total -= k as u64;
        if k > 0 {
            let dom = node.dom;
            for (l, level) in self.levels.iter_mut().enumerate() {
                let d = &mut level.domains[dom[l] as usize];
                d.buckets[k].remove(&n);
                d.free -= k as u64;
            }
        }
    }

    pub fn index_insert(&mut self, n: u32) {
        let node = &mut self.nodes[n as usize];
        if node.in_index {
            return;
        }
        node.in_index = true;
        let k = node.free.count_ones() as usize;
        self.free_total += k as u64;
        if k > 0 {
            let dom = node.dom;
            for (l, level) in self.levels.iter_mut().enumerate() {
                let d = &mut level.domains[dom[l] as usize];
                d.buckets[k].insert(n);
                d.free += k as u64;
            }
        }
    }

    /// Changes a node's free mask keeping the index consistent.
    pub fn set_free(&mut self, n: u32, free: u64) {
        let was = self.nodes[n as usize].in_index;
        self.index_remove(n);
        self.nodes[n as usize].free = free;
        if was {
            self.index_insert(n);
        }
    }

    /// GPUs of an ended or evicted pod come back: idle unless promised to a preemptor.
    pub fn release(&mut self, n: u32, bits: u64) {
        let node = &mut self.nodes[n as usize];
        let nominated = node.nominated;
        node.held |= bits & nominated;
        let free = node.free | (bits & !nominated);
        self.set_free(n, free);
    }

    fn pod_cap(&self, level: usize, dom: usize, g: u32) -> u64 {
        let b = &self.levels[level].domains[dom].buckets;
        (g as usize..b.len())
            .map(|k| b[k].len() as u64 * (k as u64 / u64::from(g)))
            .sum()
    }

    /// Fewest nodes (narrowest topology domain, best fit) that host `pods` pods of `g` GPUs,
    /// among indexed nodes, all in one domain of level `within` when given; returns (node,
    /// pods on it).
    pub fn find(&self, pods: u32, g: u32, within: Option<usize>) -> Option<Vec<(u32, u32)>> {
        if g == 0 || g > self.max_cap || u64::from(pods) * u64::from(g) > self.free_total {
            return None;
        }
        let need = u64::from(pods) * u64::from(g);
        if need <= u64::from(self.max_cap) {
            let b = &self.levels[2].domains[0].buckets;
            if let Some(k) = (need as usize..b.len()).find(|&k| !b[k].is_empty()) {
                return Some(vec![(self.tightest_in_fullest_domain(k), pods)]);
            }
        }
        if self.pod_cap(2, 0, g) < u64::from(pods) {
            return None;
        }
        if let Some(l) = within {
            // Every node its own domain: only one node could do, and none did above.
            if self.levels[l].trivial {
                return None;
            }
            let (_, d) = self.best_domain(l, pods, g)?;
            return self.greedy(l, d, pods, g);
        }
        for l in 0..2 {
            if self.levels[l].trivial {
                continue;
            }
            if let Some((_, d)) = self.best_domain(l, pods, g) {
                return self.greedy(l, d, pods, g);
            }
        }
        self.greedy(2, 0, pods, g)
    }

    /// A node with exactly `k` free GPUs (some must exist), in the topology domain with the
    /// fewest free GPUs at the narrowest level that has domains: work that fits one node
    /// fills domains already in use and leaves the emptiest whole for gangs.
    fn tightest_in_fullest_domain(&self, k: usize) -> u32 {
        let any = *self.levels[2].domains[0].buckets[k]
            .first()
            .expect("caller checked the bucket");
        let Some(level) = self.narrowest_level() else {
            return any;
        };
        self.levels[level]
            .domains
            .iter()
            .filter_map(|d| d.buckets[k].first().map(|&n| (d.free, n)))
            .min()
            .map_or(any, |(_, n)| n)
    }

    /// The most pods of `g` GPUs one domain of `level` could ever host (all its nodes idle);
    /// where nodes carry no label for the level, one node is a domain.
    pub fn largest_domain_pods(&self, level: usize, g: u32) -> u64 {
        let mut per = vec![0u64; self.levels[level].domains.len()];
        for n in &self.nodes {
            per[n.dom[level] as usize] += u64::from(n.cap / g.max(1));
        }
        per.into_iter().max().unwrap_or(0)
    }

    /// The narrowest topology level whose domains group nodes (NVLink domain, else rack), if
    /// any node carries such a label.
    fn narrowest_level(&self) -> Option<usize> {
        (0..2).find(|&l| !self.levels[l].trivial)
    }

    /// Whether some domain of topology level `level` holds more than one node (its label
    /// groups nodes).
    pub fn groups(&self, level: usize) -> bool {
        !self.levels[level].trivial
    }

    /// Whether `nodes` lie in more than one domain of topology level `level`.
    pub fn spans(&self, level: usize, mut nodes: impl Iterator<Item = u32>) -> bool {
        let Some(first) = nodes.next() else {
            return false;
        };
        let d = self.nodes[first as usize].dom[level];
        nodes.any(|n| self.nodes[n as usize].dom[level] != d)
    }

    /// How many domains topology level `level` has.
    pub fn domain_count(&self, level: usize) -> usize {
        self.levels[level].domains.len()
    }

    /// The domain of `level` whose free nodes host `pods` pods of `g` GPUs with the least to
    /// spare, with its pod capacity.
    fn best_domain(&self, level: usize, pods: u32, g: u32) -> Option<(u64, usize)> {
        (0..self.levels[level].domains.len())
            .map(|d| (self.pod_cap(level, d, g), d))
            .filter(|(c, _)| *c >= u64::from(pods))
            .min()
    }

    /// Nodes of one domain for `pods` pods of `g` GPUs: the nodes hosting the most pods first,
    /// until the rest fits on one node, which is then the tightest that holds it. Each bucket is
    /// walked once in order, so the nodes taken are a prefix of each bucket's walk and a gang of
    /// thousands of nodes costs time linear in them.
    fn greedy(&self, level: usize, dom: usize, pods: u32, g: u32) -> Option<Vec<(u32, u32)>> {
        let b = &self.levels[level].domains[dom].buckets;
        let mut untaken: Vec<_> = b.iter().map(|nodes| nodes.iter().peekable()).collect();
        let mut chosen: Vec<(u32, u32)> = Vec::new();
        let mut remaining = pods;
        while remaining > 0 {
            let need = remaining as usize * g as usize;
            // The rest fits on one node: take the tightest such node.
            if let Some(n) = (need..b.len()).find_map(|k| untaken[k].peek().map(|&&n| n)) {
                chosen.push((n, remaining));
                return Some(chosen);
            }
            // Otherwise take the node hosting the most pods.
            let (n, k) = (g as usize..b.len())
                .rev()
                .find_map(|k| untaken[k].next().map(|&n| (n, k)))?;
            let here = (k as u32 / g).min(remaining);
            chosen.push((n, here));
            remaining -= here;
        }
        Some(chosen)
    }

    /// Claims GPUs for a plan from `find`: returns (node, mask) per pod.
    pub fn take(&mut self, plan: &[(u32, u32)], g: u32) -> Vec<(u32, u64)> {
        let mut pods = Vec::new();
        for &(n, count) in plan {
            let mut free = self.nodes[n as usize].free;
            for _ in 0..count {
                let mut m = 0u64;
                for _ in 0..g {
                    let bit = free & free.wrapping_neg();
                    m |= bit;
                    free &= !bit;
                }
                pods.push((n, m));
            }
            self.set_free(n, free);
        }
        pods
    }
}

/// GPU indices of a mask.
pub(crate) fn bits(mask: u64) -> Vec<u32> {
    (0..64).filter(|i| mask & (1u64 << i) != 0).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool(n: usize, racks: usize) -> Pool {
        Pool::new(
            "f".into(),
            (0..n)
                .map(|i| (format!("n{i}"), 8, None, Some(format!("r{}", i % racks))))
                .collect(),
        )
    }

    #[test]
    fn single_pod_best_fits_a_partly_used_node() {
        let mut p = pool(4, 1);
        p.set_free(2, 0b1111_0000);
        let plan = p.find(1, 4, None).unwrap();
        assert_eq!(plan, vec![(2, 1)]);
        let pods = p.take(&plan, 4);
        assert_eq!(pods, vec![(2, 0b1111_0000)]);
        assert_eq!(p.free_total, 24);
    }

    #[test]
    fn gang_uses_fewest_nodes_within_one_rack() {
        let mut p = pool(8, 2);
        // rack r0 = nodes 0,2,4,6 ; make rack r0 half used.
        p.set_free(0, 0b1111);
        let plan = p.find(4, 8, None).unwrap();
        let racks: Vec<_> = plan.iter().map(|(n, _)| n % 2).collect();
        assert_eq!(plan.len(), 4);
        assert!(racks.iter().all(|r| *r == 1), "{plan:?}");
        assert!(p.find(9, 8, None).is_none());
    }

    #[test]
    fn a_one_node_job_goes_to_the_rack_already_in_use() {
        let mut p = pool(8, 2);
        // Whole nodes everywhere; rack r1 (odd nodes) has one node half used.
        p.set_free(3, 0b1111);
        // A whole-node job takes a whole node of r1, leaving rack r0 whole for a gang.
        assert_eq!(p.find(1, 8, None).unwrap(), vec![(1, 1)]);
        // The tightest node still comes first: a 4-GPU job takes node 3's free half.
        assert_eq!(p.find(1, 4, None).unwrap(), vec![(3, 1)]);
        // Without rack labels the first whole node is taken, as before.
        let flat = Pool::new(
            "f".into(),
            (0..4).map(|i| (format!("n{i}"), 8, None, None)).collect(),
        );
        assert_eq!(flat.find(1, 8, None).unwrap(), vec![(0, 1)]);
    }

    #[test]
    fn not_enough_room_is_none() {
        let mut p = pool(2, 1);
        p.set_free(0, 0b1);
        p.set_free(1, 0b1);
        assert!(p.find(1, 2, None).is_none());
        assert_eq!(p.find(2, 1, None).unwrap().len(), 2);
    }
}
