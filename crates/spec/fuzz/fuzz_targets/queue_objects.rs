//! Fuzz target: `ferry sim --queues` reads other systems' queue objects exported from
//! clusters (Kueue's ClusterQueues, LocalQueues and Cohort trees, Kubernetes ResourceQuotas,
//! Volcano's Queues) or Ferry's Queue and Cohort documents, and `ferry up --priority-classes`
//! their priority classes (Kubernetes' PriorityClasses, Kueue's WorkloadPriorityClasses), so any
//! bytes must be read or refused without a panic, and what is read holds the rules the
//! scheduler relies on (whole GPU quotas, lending within nominal, a positive weight, every
//! LocalQueue leading to a ClusterQueue of the file, caps lending and borrowing nothing; cohorts
//! named once with a positive weight, no cohort its own ancestor, limits only under a parent;
//! a Volcano queue tree's cohorts and queues under cohorts it defines or its root, and the
//! scheduler taking the whole of it; classes named once with Ferry names, values in the user
//! range, the global default one of them). What `ferry apply` adopts from those objects
//! (`adopt`) is Ferry's documents, each reading back as itself.
#![no_main]

use ferry_spec::{
    CohortSpec, MAX_PRIORITY_VALUE, QueueSpec, Resource, VOLCANO_COHORT, VOLCANO_ROOT,
    VolcanoQueues, adopt, parse_documents, parse_value, read_kueue_queues, read_priority_classes,
    read_resource_quotas, read_volcano_queues, validate_name,
};

#[path = "../../tests/support/sound.rs"]
mod check;

/// `check::queue_sound`, failing the run.
fn sound(name: &str, spec: &QueueSpec) {
    check::queue_sound(name, spec).unwrap();
}

/// `check::tree_sound`, failing the run.
fn tree_sound<'a>(cohorts: impl IntoIterator<Item = (&'a str, &'a CohortSpec)>) {
    check::tree_sound(cohorts).unwrap();
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    if let Ok(read) = read_kueue_queues(&text, "fuzz.yaml") {
        assert!(!read.cluster_queues.is_empty());
        for (name, spec) in &read.cluster_queues {
            sound(name, spec);
        }
        tree_sound(read.cohorts.iter().map(|(n, c)| (n.as_str(), c)));
        for l in &read.local_queues {
            assert!(
                read.cluster_queues
                    .iter()
                    .any(|(n, _)| *n == l.cluster_queue),
                "{l:?}"
            );
            let _ = read.cluster_queue_of(&l.namespace);
        }
    }
    // Ferry's own Queue and Cohort documents, as `ferry sim --queues` and `ferry apply` take
    // them: each Cohort valid on its own (a loop across documents is the scheduler's to refuse).
    if let Ok(resources) = parse_documents(&text, "fuzz.yaml") {
        for r in &resources {
            match r {
                Resource::Queue(q) => sound(&q.metadata.name, &q.spec),
                Resource::Cohort(c) => {
                    let name = c.metadata.name.as_str();
                    assert!(
                        c.spec.parent.as_deref() != Some(name),
                        "{name}: its own parent"
                    );
                    assert!(
                        c.spec
                            .parent
                            .as_deref()
                            .is_none_or(|p| validate_name(p).is_ok())
                    );
                    tree_sound([(name, &c.spec)]);
                }
                _ => {}
            }
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
            assert!(
                validate_name(&c.name).is_ok() && !c.name.starts_with("system-"),
                "{c:?}"
            );
            assert!(c.value.abs() <= MAX_PRIORITY_VALUE, "{c:?}");
            assert!(names.insert(c.name.as_str()), "{} twice", c.name);
        }
        assert!(
            read.global_default
                .as_deref()
                .is_none_or(|d| names.contains(d))
        );
    }
    for gpus in [None, Some(0), Some(176)] {
        if let Some(Ok(adopted)) = adopt(&text, "fuzz.yaml", gpus) {
            for r in &adopted.resources {
                let again =
                    parse_value(r.to_value(), "again").expect("an adopted document reads back");
                assert_eq!(&again, r);
                if let Resource::Queue(q) = r {
                    sound(&q.metadata.name, &q.spec);
                }
            }
        }
    }
    if let Ok(read) = read_volcano_queues(&text, "fuzz.yaml") {
        assert!(!read.queues.is_empty());
        for gpus in [0, 1, 7, 176, 1 << 20, u32::MAX] {
            volcano_sound(&read, gpus);
        }
    }
});

/// Volcano's Queues on a cluster of `gpus` GPUs: the GPUs owed (the leaf queues', and the
/// parent queues' own) add up to no more than the cluster, unless the `deserved` of the queues
/// under the root already do; every leaf queue is under a cohort of the tree (a parent queue)
/// or its root, every cohort under another or the root, once and no loop; and on clusters the
/// simulator builds, the scheduler takes the queues and cohorts as they are.
fn volcano_sound(read: &VolcanoQueues, gpus: u32) {
    let specs = read.queue_specs(gpus);
    let cohorts = read.cohort_specs(gpus);
    let owed: i64 = (specs.iter().map(|(_, s)| i64::from(s.quotas[0].nominal)))
        .chain(cohorts.iter().map(|(_, c)| i64::from(c.quotas[0].nominal)))
        .sum();
    let fixed: i64 = (read.queues.iter())
        .filter(|q| q.parent.is_none())
        .map(|q| i64::from(q.deserved.or(q.guarantee).unwrap_or(0)))
        .sum();
    assert!(owed <= i64::from(gpus).max(fixed), "{owed} of {gpus}");
    assert_eq!(
        specs.len() + cohorts.len(),
        if cohorts.is_empty() {
            specs.len()
        } else {
            read.queues.len()
        },
        "in a tree every queue is a leaf queue or a cohort"
    );
    let defined = |c: &str| c == VOLCANO_ROOT || cohorts.iter().any(|(n, _)| n == c);
    for (name, spec) in &specs {
        sound(name, spec);
        let cohort = spec.cohort.as_deref();
        if cohorts.is_empty() {
            assert!(
                cohort.is_none_or(|c| c == VOLCANO_COHORT),
                "{name}: {cohort:?}"
            );
        } else {
            assert!(cohort.is_some_and(defined), "{name}: {cohort:?}");
        }
    }
    for (name, c) in &cohorts {
        assert!(c.parent.as_deref().is_some_and(defined), "{name}: {c:?}");
    }
    tree_sound(cohorts.iter().map(|(n, c)| (n.as_str(), c)));
    if !(1..=4096).contains(&gpus) {
        return;
    }
    let queues = (specs.iter())
        .map(|(name, s)| ferry_sched::QueueSpec {
            name: name.clone(),
            cohort: s.cohort.clone(),
            quotas: s.quotas.iter().map(Into::into).collect(),
            fair_share_weight: s.weight,
            stop_policy: s.stop_policy.into(),
            preemption: s.preemption.into(),
        })
        .collect();
    let cohorts: Vec<ferry_sched::CohortSpec> =
        cohorts.iter().map(|(n, c)| c.to_sched(n)).collect();
    if let Err(e) = ferry_sched::Scheduler::with_cohorts(
        ferry_sched::cluster_with_gpus(gpus),
        queues,
        &cohorts,
        ferry_sched::PriorityClass::standard(),
        ferry_sched::Options::default(),
    ) {
        panic!("the scheduler refuses what was read on {gpus} GPUs: {e}");
    }
}
