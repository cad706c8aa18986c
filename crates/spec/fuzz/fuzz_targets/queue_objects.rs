//! Fuzz target: `ferry sim --queues` reads other systems' queue objects exported from
//! clusters (Kueue's ClusterQueues and LocalQueues, Kubernetes ResourceQuotas, Volcano's
//! Queues) and `ferry up --priority-classes` their priority classes (Kubernetes'
//! PriorityClasses, Kueue's WorkloadPriorityClasses), so any bytes
//! must be read or refused without a panic, and what is read holds the rules the scheduler
//! relies on (whole GPU quotas, lending within nominal, a positive weight, every LocalQueue
//! leading to a ClusterQueue of the file, caps lending and borrowing nothing; classes named
//! once with Ferry names, values in the user range, the global default one of them).
#![no_main]

use ferry_spec::{
    MAX_PRIORITY_VALUE, QueueSpec, read_kueue_queues, read_priority_classes, read_resource_quotas,
    read_volcano_queues, validate_name,
};

fn sound(name: &str, spec: &QueueSpec) {
    assert!(spec.weight > 0.0 && spec.weight.is_finite(), "{name}: {}", spec.weight);
    for q in &spec.quotas {
        assert!(q.nominal >= 0, "{name}: {q:?}");
        assert!(q.borrowing_limit.is_none_or(|b| b >= 0), "{name}: {q:?}");
        assert!(q.lending_limit.is_none_or(|l| (0..=q.nominal).contains(&l)), "{name}: {q:?}");
    }
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    if let Ok(read) = read_kueue_queues(&text, "fuzz.yaml") {
        assert!(!read.cluster_queues.is_empty());
        for (name, spec) in &read.cluster_queues {
            sound(name, spec);
        }
        for l in &read.local_queues {
            assert!(read.cluster_queues.iter().any(|(n, _)| *n == l.cluster_queue), "{l:?}");
            let _ = read.cluster_queue_of(&l.namespace);
        }
    }
    if let Ok(read) = read_resource_quotas(&text, "fuzz.yaml") {
        assert!(!read.queues.is_empty());
        for (name, spec) in &read.queues {
            sound(name, spec);
            assert!(spec.cohort.is_none(), "{name}: a cap shares nothing");
        }
    }
    if let Ok(read) = read_priority_classes(&text, "fuzz.yaml") {
        assert!(!read.classes.is_empty());
        let mut names = std::collections::BTreeSet::new();
        for c in &read.classes {
            assert!(validate_name(&c.name).is_ok() && !c.name.starts_with("system-"), "{c:?}");
            assert!(c.value.abs() <= MAX_PRIORITY_VALUE, "{c:?}");
            assert!(names.insert(c.name.as_str()), "{} twice", c.name);
        }
        assert!(read.global_default.as_deref().is_none_or(|d| names.contains(d)));
    }
    if let Ok(read) = read_volcano_queues(&text, "fuzz.yaml") {
        assert!(!read.queues.is_empty());
        // On clusters of every size the shares add up to no more than the cluster, unless the
        // queues' own `deserved` already do.
        for gpus in [0, 1, 7, 176, 1 << 20, u32::MAX] {
            let specs = read.queue_specs(gpus);
            let owed: i64 = specs.iter().map(|(_, s)| i64::from(s.quotas[0].nominal)).sum();
            let fixed: i64 = read
                .queues
                .iter()
                .map(|q| i64::from(q.deserved.or(q.guarantee).unwrap_or(0)))
                .sum();
            assert!(owed <= i64::from(gpus).max(fixed), "{owed} of {gpus}");
            for (name, spec) in &specs {
                sound(name, spec);
            }
        }
    }
});
