//! GPU accounting for FIFO admission: which GPU ids are free, and how a gang's share
//! is split among its ranks. No GPU is ever handed to two live gangs.

use std::collections::BTreeSet;

use ferry_spec::Resources;

/// Picks `resources.total_gpus()` ids from `free` (lowest first, so a node's GPUs stay
/// together) and splits them per rank, or `None` when too few are free.
pub(crate) fn assign(
    resources: &Resources,
    free: &BTreeSet<usize>,
    ids: &[String],
) -> Option<Vec<Vec<String>>> {
    let need = resources.total_gpus() as usize;
    if need == 0 {
        return Some(Vec::new());
    }
    if free.len() < need {
        return None;
    }
    let chosen: Vec<String> = free.iter().take(need).map(|&i| ids[i].clone()).collect();
    let per_rank = resources.gpus_per_proc().max(1) as usize;
    Some(chosen.chunks(per_rank).map(<[String]>::to_vec).collect())
}

/// Indices of `ids` not in `taken`.
pub(crate) fn free_indices(ids: &[String], taken: &BTreeSet<String>) -> BTreeSet<usize> {
    ids.iter()
        .enumerate()
        .filter(|(_, id)| !taken.contains(*id))
        .map(|(i, _)| i)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn res(nodes: i32, gpus: i32, procs: Option<i32>) -> Resources {
        Resources {
            nodes,
            procs_per_node: procs,
            gpus_per_node: gpus,
            gpu: None,
        }
    }

    #[test]
    fn gangs_get_whole_shares_or_nothing() {
        let ids: Vec<String> = (0..4).map(|i| i.to_string()).collect();
        let taken: BTreeSet<String> = ["1".to_owned()].into();
        let free = free_indices(&ids, &taken);
        assert_eq!(
            assign(&res(1, 2, None), &free, &ids),
            Some(vec![vec!["0".into()], vec!["2".into()]])
        );
        assert_eq!(assign(&res(2, 2, None), &free, &ids), None);
        assert_eq!(
            assign(&res(1, 2, Some(1)), &free, &ids),
            Some(vec![vec!["0".into(), "2".into()]])
        );
        assert_eq!(assign(&res(2, 0, Some(2)), &free, &ids), Some(vec![]));
    }
}
