//! What each queue is owed when every queue wants more than it has: the yardstick of fair
//! sharing, shared by the scheduler (time-averaged deficits) and the simulator (the 10% band).

use std::collections::{BTreeMap, BTreeSet};

use crate::config::{CohortSpec, QueueSpec};

/// A queue or a cohort, as a child of the cohort (or the whole cluster) splitting GPUs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Kid<'a> {
    Queue(usize),
    Cohort(&'a str),
}

/// Each queue's entitlement as a fraction of `capacity` GPUs. Going down the tree from the
/// cluster, each queue or cohort is owed its nominal GPUs (a cohort's: its own plus its
/// subtree's) plus a part of what its parent is owed beyond its children's nominal GPUs, by
/// fair-share weight against its siblings; when the children's nominal GPUs exceed what the
/// parent is owed, all are scaled down alike. A cohort no spec describes and no cohort names
/// as parent (a flat cohort) does not split: its queues are children of the cluster. Flat, in
/// symbols, with `n` a queue's nominal GPUs (all flavors), `N` their sum, `w` its weight, `W`
/// the sum of weights and `C` the capacity: `(n + w / W * max(0, C - N)) / max(C, N)`.
pub fn entitlements_in(queues: &[QueueSpec], cohorts: &[CohortSpec], capacity: f64) -> Vec<f64> {
    let spec: BTreeMap<&str, &CohortSpec> = cohorts.iter().map(|c| (c.name.as_str(), c)).collect();
    let mut kids: BTreeMap<&str, BTreeSet<Kid>> = BTreeMap::new();
    for c in cohorts {
        if let Some(p) = c.parent.as_deref() {
            kids.entry(p).or_default().insert(Kid::Cohort(&c.name));
        }
    }
    let mut top: BTreeSet<Kid> = BTreeSet::new();
    for (i, q) in queues.iter().enumerate() {
        match q.cohort.as_deref() {
            Some(c) if spec.contains_key(c) || kids.contains_key(c) => {
                kids.entry(c).or_default().insert(Kid::Queue(i));
            }
            _ => {
                top.insert(Kid::Queue(i));
            }
        }
    }
    let parent = |c: &str| spec.get(c).and_then(|s| s.parent.as_deref());
    for &c in kids.keys().chain(spec.keys()) {
        if parent(c).is_none() {
            top.insert(Kid::Cohort(c));
        }
    }
    let own = |c: &str| -> f64 {
        spec.get(c).map_or(0.0, |s| {
            s.quotas.iter().map(|x| f64::from(x.nominal)).sum::<f64>()
        })
    };
    // Nominal GPUs of each cohort's subtree, children before parents (a loop, which building
    // the scheduler refuses, is cut where it closes).
    let mut nominal: BTreeMap<&str, f64> = BTreeMap::new();
    fn subtree<'a>(
        c: &'a str,
        kids: &BTreeMap<&'a str, BTreeSet<Kid<'a>>>,
        queues: &[QueueSpec],
        own: &dyn Fn(&str) -> f64,
        nominal: &mut BTreeMap<&'a str, f64>,
    ) -> f64 {
        if let Some(&n) = nominal.get(c) {
            return n;
        }
        nominal.insert(c, 0.0);
        let mut n = own(c);
        for &k in kids.get(c).into_iter().flatten() {
            n += match k {
                Kid::Queue(i) => queue_nominal(&queues[i]),
                Kid::Cohort(d) => subtree(d, kids, queues, own, nominal),
            };
        }
        nominal.insert(c, n);
        n
    }
    let mut owed = vec![0.0; queues.len()];
    // Each set of siblings with the GPUs their parent is owed, and that as a fraction of
    // `capacity` (exactly 1 for the cluster's own children, so a flat split is exact).
    let mut stack: Vec<(BTreeSet<Kid>, f64, f64)> = vec![(top, capacity, 1.0)];
    while let Some((children, total, of_cluster)) = stack.pop() {
        let children: Vec<Kid> = children.into_iter().collect();
        let nom: Vec<f64> = children
            .iter()
            .map(|&k| match k {
                Kid::Queue(i) => queue_nominal(&queues[i]),
                Kid::Cohort(c) => subtree(c, &kids, queues, &own, &mut nominal),
            })
            .collect();
        let weight: Vec<f64> = children
            .iter()
            .map(|&k| match k {
                Kid::Queue(i) => queues[i].fair_share_weight,
                Kid::Cohort(c) => spec.get(c).map_or(1.0, |s| s.fair_share_weight),
            })
            .collect();
        for (&k, part) in children.iter().zip(split(total, &nom, &weight)) {
            match k {
                Kid::Queue(i) => owed[i] = part * of_cluster,
                Kid::Cohort(c) => {
                    if let Some(set) = kids.remove(c) {
                        stack.push((set, part * total, part * of_cluster));
                    }
                }
            }
        }
    }
    owed
}

fn queue_nominal(q: &QueueSpec) -> f64 {
    q.quotas.iter().map(|x| f64::from(x.nominal)).sum()
}

/// Splits `total` GPUs among children with these nominal GPUs and weights: each child's part,
/// as a fraction of `total`.
fn split(total: f64, nominal: &[f64], weight: &[f64]) -> Vec<f64> {
    let n: f64 = nominal.iter().sum();
    let w: f64 = weight.iter().sum();
    let spare = (total - n).max(0.0);
    let denom = total.max(n).max(1e-9);
    nominal
        .iter()
        .zip(weight)
        .map(|(nom, wt)| {
            let extra = if w > 0.0 { wt / w * spare } else { 0.0 };
            (nom + extra) / denom
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::entitlements_in;
    use crate::config::{CohortSpec, FlavorQuota, QueueSpec};

    fn queue(name: &str, cohort: Option<&str>, nominal: u32, weight: f64) -> QueueSpec {
        QueueSpec {
            fair_share_weight: weight,
            ..QueueSpec::any_flavor(name, cohort, nominal)
        }
    }

    fn close(got: &[f64], want: &[f64]) {
        assert_eq!(got.len(), want.len());
        for (g, w) in got.iter().zip(want) {
            assert!((g - w).abs() < 1e-12, "{got:?} != {want:?}");
        }
    }

    #[test]
    fn flat_queues_get_their_quota_and_a_weighted_part_of_the_rest() {
        let qs = [
            queue("a", Some("all"), 40, 1.0),
            queue("b", Some("all"), 20, 3.0),
        ];
        // 40 spare GPUs: a gets 10 of them, b 30.
        close(&entitlements_in(&qs, &[], 100.0), &[0.5, 0.5]);
        // Quotas past the cluster are scaled down alike.
        close(
            &entitlements_in(&qs, &[], 30.0),
            &[40.0 / 60.0, 20.0 / 60.0],
        );
    }

    #[test]
    fn a_tree_splits_at_each_cohort_by_the_siblings_weights() {
        // Department a has three queues, b one; the root owns the 16 GPUs no queue has.
        let qs = [
            queue("a1", Some("a"), 4, 1.0),
            queue("a2", Some("a"), 4, 1.0),
            queue("a3", Some("a"), 4, 1.0),
            queue("b1", Some("b"), 4, 1.0),
        ];
        let root = CohortSpec {
            quotas: vec![FlavorQuota::unlimited("gpu", 16)],
            ..CohortSpec::under("root", None)
        };
        let tree = |wb: f64| {
            vec![
                root.clone(),
                CohortSpec::under("a", Some("root")),
                CohortSpec {
                    fair_share_weight: wb,
                    ..CohortSpec::under("b", Some("root"))
                },
            ]
        };
        // Equal weights: each department gets 8 of the 16 (a's queues 4 + 8/3 each, b1 12).
        let a = (4.0 + 8.0 / 3.0) / 32.0;
        close(
            &entitlements_in(&qs, &tree(1.0), 32.0),
            &[a, a, a, 12.0 / 32.0],
        );
        // b weighs 3: it gets 12 of the 16.
        let a = (4.0 + 4.0 / 3.0) / 32.0;
        close(
            &entitlements_in(&qs, &tree(3.0), 32.0),
            &[a, a, a, 16.0 / 32.0],
        );
        // Without the tree, queue by queue: 4 + 4 each.
        let flat: Vec<QueueSpec> = qs
            .iter()
            .map(|q| queue(&q.name, Some("all"), 4, 1.0))
            .collect();
        close(&entitlements_in(&flat, &[], 32.0), &[0.25; 4]);
    }
}
