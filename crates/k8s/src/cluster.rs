//! Reading the cluster (the only I/O outside the operator): which optional APIs it serves,
//! and which claims and queues exist, for `ferry render --check`.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams};
use kube::{Client, ResourceExt};

use crate::error::Result;
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
