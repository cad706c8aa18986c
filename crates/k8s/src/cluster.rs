//! Reading the cluster (the only I/O outside the operator): which optional APIs it serves,
//! and which claims and queues exist, for `ferry render --check`.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::{Node, PersistentVolumeClaim};
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

/// What Ferry's scheduler needs from the cluster: GPU nodes (see
/// [`crate::admission::cluster_from_nodes`]) and every Ferry `Queue`, as scheduler queues
/// named `<namespace>/<queue>`.
pub async fn scheduler_inputs(
    client: &Client,
    rack_label: Option<&str>,
) -> Result<(ferry_sched::Cluster, Vec<ferry_sched::QueueSpec>)> {
    let nodes: Api<Node> = Api::all(client.clone());
    let nodes = nodes.list(&ListParams::default()).await?.items;
    let cluster = crate::admission::cluster_from_nodes(&nodes, rack_label);
    let ferry_queue = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(crate::crd::GROUP, crate::crd::VERSION, "Queue"),
        "queues",
    );
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &ferry_queue);
    let mut queues = Vec::new();
    let list = match api.list(&ListParams::default()).await {
        Ok(list) => list.items,
        Err(kube::Error::Api(s)) if s.code == 404 => Vec::new(),
        Err(e) => return Err(e.into()),
    };
    for q in list {
        let ns = q.namespace().unwrap_or_default();
        let name = q.name_any();
        let spec: ferry_spec::QueueSpec = match q.data.get("spec") {
            Some(v) => serde_json::from_value(v.clone()).map_err(|source| K8sError::Json {
                what: format!("Queue/{ns}/{name} spec"),
                source,
            })?,
            None => ferry_spec::QueueSpec::default(),
        };
        queues.push(crate::admission::queue_spec(&ns, &name, &spec));
    }
    Ok((cluster, queues))
}
