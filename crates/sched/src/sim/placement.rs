//! Where each started gang landed: on how many nodes, and across how many racks, against the
//! fewest it could have used (`PlacementStats`).

use std::collections::{BTreeSet, HashMap};

use super::PlacementStats;
use crate::config::Cluster;

/// The cluster's nodes as placements name them, and the tally so far.
pub(super) struct GangLayouts {
    index: HashMap<String, usize>,
    flavor: Vec<String>,
    rack: Vec<Option<String>>,
    /// Per flavor: each rack's node sizes (unlabelled nodes are in no rack).
    racks: HashMap<String, HashMap<String, Vec<u32>>>,
    /// Per flavor: its largest node.
    largest: HashMap<String, u32>,
    pub(super) stats: PlacementStats,
}

impl GangLayouts {
    pub(super) fn new(cluster: &Cluster) -> GangLayouts {
        let mut racks: HashMap<String, HashMap<String, Vec<u32>>> = HashMap::new();
        let mut largest: HashMap<String, u32> = HashMap::new();
        for n in &cluster.nodes {
            let l = largest.entry(n.flavor.clone()).or_default();
            *l = (*l).max(n.gpus);
            if let Some(r) = &n.rack {
                racks
                    .entry(n.flavor.clone())
                    .or_default()
                    .entry(r.clone())
                    .or_default()
                    .push(n.gpus);
            }
        }
        let labelled = cluster.nodes.iter().any(|n| n.rack.is_some());
        GangLayouts {
            index: cluster
                .nodes
                .iter()
                .enumerate()
                .map(|(i, n)| (n.name.clone(), i))
                .collect(),
            flavor: cluster.nodes.iter().map(|n| n.flavor.clone()).collect(),
            rack: cluster.nodes.iter().map(|n| n.rack.clone()).collect(),
            racks,
            largest,
            stats: PlacementStats {
                one_rack_fits: labelled.then_some(0),
                split_across_racks: labelled.then_some(0),
                ..PlacementStats::default()
            },
        }
    }

    /// The index of the node named `name`.
    pub(super) fn node(&self, name: &str) -> usize {
        self.index[name]
    }

    /// Counts a start of `pods` pods of `per` GPUs on `nodes` (one entry per pod); returns
    /// whether it is split across racks although one rack could hold it.
    pub(super) fn record(&mut self, pods: u32, per: u32, nodes: &[usize]) -> bool {
        if pods < 2 || nodes.is_empty() {
            return false;
        }
        let flavor = &self.flavor[nodes[0]];
        self.stats.gang_starts += 1;
        let used: BTreeSet<usize> = nodes.iter().copied().collect();
        let per_node = (self.largest[flavor] / per.max(1)).max(1);
        if used.len() as u32 <= pods.div_ceil(per_node) {
            self.stats.on_fewest_nodes += 1;
        }
        if let (Some(fits), Some(split)) = (
            self.stats.one_rack_fits.as_mut(),
            self.stats.split_across_racks.as_mut(),
        ) {
            let racks: BTreeSet<Option<&String>> =
                used.iter().map(|&n| self.rack[n].as_ref()).collect();
            let fits_one = self.racks.get(flavor).is_some_and(|rs| {
                rs.values()
                    .any(|caps| caps.iter().map(|&c| c / per.max(1)).sum::<u32>() >= pods)
            });
            if fits_one {
                *fits += 1;
                if racks.len() > 1 || racks.contains(&None) {
                    *split += 1;
                    return true;
                }
            }
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Node;

    fn racked(racks: usize, per_rack: usize) -> Cluster {
        Cluster {
            nodes: (0..racks * per_rack)
                .map(|i| Node {
                    name: format!("n{i}"),
                    gpus: 8,
                    flavor: "gpu".into(),
                    rack: Some(format!("r{}", i / per_rack)),
                    nvlink_domain: None,
                })
                .collect(),
        }
    }

    #[test]
    fn a_gang_counts_as_split_only_when_one_rack_could_have_held_it() {
        let mut l = GangLayouts::new(&racked(2, 2));
        // Two 8-GPU pods: one rack holds them; nodes 1 and 2 are in different racks.
        assert!(!l.record(2, 8, &[0, 1]));
        assert!(l.record(2, 8, &[1, 2]));
        // Four 8-GPU pods cannot fit one rack: never counted as split.
        assert!(!l.record(4, 8, &[0, 1, 2, 3]));
        // Four 4-GPU pods fit two nodes; spread over four they are not on the fewest.
        l.record(4, 4, &[0, 0, 1, 1]);
        l.record(4, 4, &[0, 1, 2, 3]);
        // One pod is not a gang.
        l.record(1, 8, &[3]);
        assert_eq!(l.stats.gang_starts, 5);
        assert_eq!(l.stats.on_fewest_nodes, 4);
        assert_eq!(l.stats.one_rack_fits, Some(4));
        assert_eq!(l.stats.split_across_racks, Some(2));
    }

    #[test]
    fn without_rack_labels_splits_are_not_counted() {
        let mut l = GangLayouts::new(&Cluster::uniform(4, 8, "gpu"));
        l.record(2, 8, &[0, 3]);
        assert_eq!(l.node("node-3"), 3);
        assert_eq!(l.stats.split_across_racks, None);
        assert_eq!(l.stats.one_rack_fits, None);
        assert_eq!(l.stats.on_fewest_nodes, 1);
    }
}
