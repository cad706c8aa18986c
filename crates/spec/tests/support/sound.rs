//! What the queue readers hand the scheduler must hold, checked alike by the untrusted-input
//! proptest (`tests/untrusted.rs`) and the `queue_objects` fuzz target, which include this
//! file: an error says which rule a queue or cohort broke.

use ferry_spec::{CohortSpec, QueueSpec};

/// A queue as read: a positive weight, whole GPU counts, lending within nominal.
pub fn queue_sound(name: &str, spec: &QueueSpec) -> Result<(), String> {
    if !(spec.weight > 0.0 && spec.weight.is_finite()) {
        return Err(format!("{name}: weight {}", spec.weight));
    }
    for q in &spec.quotas {
        let whole = q.nominal >= 0 && q.borrowing_limit.is_none_or(|b| b >= 0);
        if !whole
            || q.lending_limit
                .is_some_and(|l| !(0..=q.nominal).contains(&l))
        {
            return Err(format!("{name}: {q:?}"));
        }
    }
    Ok(())
}

/// A cohort tree as read: each cohort once, a positive weight, whole counts, limits only under
/// a parent, and every walk up the parents ends (no cohort is its own ancestor).
pub fn tree_sound<'a>(
    cohorts: impl IntoIterator<Item = (&'a str, &'a CohortSpec)>,
) -> Result<(), String> {
    let mut parent_of = std::collections::BTreeMap::new();
    for (name, c) in cohorts {
        if parent_of.insert(name, c.parent.as_deref()).is_some() {
            return Err(format!("{name} twice"));
        }
        if !(c.weight > 0.0 && c.weight.is_finite()) {
            return Err(format!("{name}: weight {}", c.weight));
        }
        for q in &c.quotas {
            let limits = [q.borrowing_limit, q.lending_limit].into_iter().flatten();
            if q.nominal < 0 || limits.into_iter().any(|l| l < 0 || c.parent.is_none()) {
                return Err(format!("{name}: {q:?}"));
            }
        }
    }
    for &start in parent_of.keys() {
        let (mut at, mut steps) = (start, 0);
        while let Some(Some(p)) = parent_of.get(at) {
            (at, steps) = (*p, steps + 1);
            if steps > parent_of.len() {
                return Err(format!("{start} is its own ancestor"));
            }
        }
    }
    Ok(())
}
