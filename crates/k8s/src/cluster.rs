//! Reading the cluster (the only I/O outside the operator): which optional APIs it serves,
//! and which claims and queues exist, for `ferry render --check`.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::{Node, PersistentVolumeClaim};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams};
use kube::{Client, ResourceExt};

use crate::error::{K8sError, Result};
use crate::options::{Cluster, ClusterState};

/// A client from in-cluster config or `KUBECONFIG` (so callers need no kube dependency).
pub async fn connect() -> Result<Client> {
    Ok(Client::try_default().await?)
}

/// Finds which optional APIs (JobSet, Kueue, KEDA) the cluster serves.
pub async fn discover(client: &Client, cluster: &mut Cluster) -> Result<()> {
    let groups = client.list_api_groups().await?;
    let has = |g: &str| groups.groups.iter().any(|x| x.name == g);
    cluster.jobset = has("jobset.x-k8s.io");
    cluster.kueue = has("kueue.x-k8s.io");
    cluster.keda = has("keda.sh");
    Ok(())
}

async fn names(api: Api<DynamicObject>) -> Result<BTreeSet<String>> {
    match api.list(&ListParams::default()).await {
        Ok(list) => Ok(list.items.iter().map(|o| o.name_any()).collect()),
        // The CRD is not installed: no such objects.
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(BTreeSet::new()),
        Err(e) => Err(e.into()),
    }
}

/// Claims and queues (Ferry `Queue`s and Kueue `LocalQueue`s) in each of `namespaces`.
pub async fn state(client: &Client, namespaces: &[String]) -> Result<ClusterState> {
    let mut state = ClusterState::default();
    let ferry_queue = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(crate::crd::GROUP, crate::crd::VERSION, "Queue"),
        "queues",
    );
    let local_queue = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("kueue.x-k8s.io", "v1beta2", "LocalQueue"),
        "localqueues",
    );
    for ns in namespaces {
        let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), ns);
        let claims = pvcs
            .list(&ListParams::default())
            .await?
            .items
            .iter()
            .map(|p| p.name_any())
            .collect();
        state.claims.insert(ns.clone(), claims);
        let mut queues = names(Api::namespaced_with(client.clone(), ns, &ferry_queue)).await?;
        queues.extend(names(Api::namespaced_with(client.clone(), ns, &local_queue)).await?);
        state.queues.insert(ns.clone(), queues);
    }
    Ok(state)
}

/// What Ferry's scheduler is built from in a cluster; the operator rebuilds it when any part
/// changes.
#[derive(Debug, Clone, PartialEq)]
pub struct SchedulerInputs {
    /// The GPU nodes (see [`crate::admission::cluster_from_nodes`]).
    pub cluster: ferry_sched::Cluster,
    /// Every Ferry `Queue`, as a scheduler queue named `<namespace>/<queue>`.
    pub queues: Vec<ferry_sched::QueueSpec>,
    /// Every Ferry `Cohort` (cluster-scoped, named as Queues' `spec.cohort` names it): the
    /// cohort trees the queues are in.
    pub cohorts: Vec<ferry_sched::CohortSpec>,
    /// The priorities jobs may name (see [`priority_classes`]).
    pub priorities: Vec<ferry_sched::PriorityClass>,
}

/// The `spec` of a Ferry object read untyped (the default when it has none); `what` names the
/// object in an error.
fn spec_of<T: serde::de::DeserializeOwned + Default>(
    obj: &DynamicObject,
    what: impl FnOnce() -> String,
) -> Result<T> {
    match obj.data.get("spec") {
        Some(v) => serde_json::from_value(v.clone()).map_err(|source| K8sError::Json {
            what: format!("{} spec", what()),
            source,
        }),
        None => Ok(T::default()),
    }
}

/// What Ferry's scheduler needs from the cluster: GPU nodes, every Ferry `Queue` and `Cohort`,
/// and the cluster's `PriorityClass`es.
pub async fn scheduler_inputs(
    client: &Client,
    rack_label: Option<&str>,
) -> Result<SchedulerInputs> {
    let nodes: Api<Node> = Api::all(client.clone());
    let nodes = nodes.list(&ListParams::default()).await?.items;
    let cluster = crate::admission::cluster_from_nodes(&nodes, rack_label);
    let ferry_queue = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(crate::crd::GROUP, crate::crd::VERSION, "Queue"),
        "queues",
    );
    let mut queues = Vec::new();
    for q in all_objects(client, &ferry_queue).await? {
        let ns = q.namespace().unwrap_or_default();
        let name = q.name_any();
        let spec: ferry_spec::QueueSpec = spec_of(&q, || format!("Queue/{ns}/{name}"))?;
        queues.push(crate::admission::queue_spec(&ns, &name, &spec));
    }
    let ferry_cohort = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(crate::crd::GROUP, crate::crd::VERSION, "Cohort"),
        "cohorts",
    );
    let mut cohorts = Vec::new();
    for c in all_objects(client, &ferry_cohort).await? {
        let name = c.name_any();
        let spec: ferry_spec::CohortSpec = spec_of(&c, || format!("Cohort/{name}"))?;
        cohorts.push(spec.to_sched(&name));
    }
    // By name: a list in another order is no change that asks for a rebuild.
    cohorts.sort_by(|a, b| a.name.cmp(&b.name));
    let classes: Api<PriorityClass> = Api::all(client.clone());
    let classes = classes.list(&ListParams::default()).await?.items;
    Ok(SchedulerInputs {
        cluster,
        queues,
        cohorts,
        priorities: priority_classes(&classes),
    })
}

/// Every object of `resource` in the cluster (all namespaces); none when its CRD is not
/// installed.
async fn all_objects(client: &Client, resource: &ApiResource) -> Result<Vec<DynamicObject>> {
    let api: Api<DynamicObject> = Api::all_with(client.clone(), resource);
    match api.list(&ListParams::default()).await {
        Ok(list) => Ok(list.items),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(Vec::new()),
        Err(e) => Err(e.into()),
    }
}

/// The priorities a TrainJob may name, on the cluster's own scale: Ferry's `low`, `normal`
/// and `high` at the values of the `ferry-<name>` PriorityClasses its pods get, and every other
/// PriorityClass of the cluster under its own name and value (what `spec.priority` names is
/// what its pods' `priorityClassName` is), preempting unless its `preemptionPolicy` is
/// `Never`. Kubernetes' `system-` classes are for system pods and are left out, as are Ferry's
/// own `ferry-` classes (their names are the standard ones).
pub fn priority_classes(cluster: &[PriorityClass]) -> Vec<ferry_sched::PriorityClass> {
    ferry_sched::PriorityClass::with_extra(
        ferry_sched::PriorityClass::named(&crate::options::PRIORITIES),
        cluster.iter().filter_map(|c| {
            let name = c.name_any();
            (!name.starts_with("system-") && !name.starts_with("ferry-")).then(|| {
                ferry_sched::PriorityClass {
                    name,
                    value: c.value,
                    preempting: c.preemption_policy.as_deref() != Some("Never"),
                }
            })
        }),
    )
}
