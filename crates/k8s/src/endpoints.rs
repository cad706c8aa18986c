//! Replica discovery from `discovery.k8s.io/v1` EndpointSlices for the gateway.
//!
//! Every Service rendered for a `ModelDeployment` carries the label
//! [`LABEL_SERVED_MODEL`]; the EndpointSlice controller copies it onto the Service's
//! slices. [`watch_replicas`] watches those slices and hands a sink, per model, the
//! complete set of ready replicas each time it changes, so the gateway can swap a
//! model's replica set in one step (`Registry::set_replicas`). The logic lives in the
//! pure [`replicas_by_model`] and the event-driven [`SliceState`]; the watch loop only
//! feeds events in.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use futures::StreamExt;
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointSlice};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client};

use crate::options::LABEL_SERVED_MODEL;

/// One replica of a model: a stable id and the base URL the gateway forwards to.
pub type Replica = (String, String);

/// The name of the port a vLLM Service exposes (see `serve.rs`); preferred when a
/// slice lists several ports.
pub const HTTP_PORT_NAME: &str = "http";

/// The ready replicas of every model that has a slice, from a set of slices.
///
/// A model is the value of the slice's [`LABEL_SERVED_MODEL`] label; slices without it
/// are skipped. A model whose slices have no routable endpoint (every pod unready, or
/// no usable port) maps to an empty list: it exists but cannot take requests now. An
/// endpoint counts when it is ready (`conditions.ready` true or absent, as the API
/// defines) and not terminating. Its replica id is
/// `NAMESPACE/POD` when the endpoint names a pod, else `NAMESPACE/SLICE/ADDRESS`; its
/// URL is `http://ADDRESS:PORT` with the port named `http`, else the slice's only port
/// (IPv6 addresses bracketed). The same id seen twice (a dual-stack pod in an IPv4 and
/// an IPv6 slice) is kept once, from the slice first by namespace and name, so the
/// result does not depend on the order of `slices`. Replicas are sorted by id.
pub fn replicas_by_model<'a>(
    slices: impl IntoIterator<Item = &'a EndpointSlice>,
) -> BTreeMap<String, Vec<Replica>> {
    let mut sorted: Vec<&EndpointSlice> = slices.into_iter().collect();
    sorted.sort_by(|a, b| slice_key(a).cmp(&slice_key(b)));
    let mut by_model: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    for slice in sorted {
        let Some(model) = model_of(slice) else {
            continue;
        };
        let replicas = by_model.entry(model.to_owned()).or_default();
        let Some(port) = http_port(slice) else {
            continue;
        };
        let namespace = slice.metadata.namespace.as_deref().unwrap_or_default();
        let slice_name = slice.metadata.name.as_deref().unwrap_or_default();
        for endpoint in &slice.endpoints {
            if !routable(endpoint) {
                continue;
            }
            // The API says addresses are fungible and consumers may use only the first.
            let Some(host) = endpoint
                .addresses
                .first()
                .and_then(|a| host(&slice.address_type, a))
            else {
                continue;
            };
            let pod = endpoint
                .target_ref
                .as_ref()
                .filter(|r| r.kind.as_deref().is_none_or(|k| k == "Pod"))
                .and_then(|r| r.name.as_deref())
                .filter(|n| !n.is_empty());
            let id = match pod {
                Some(pod) => format!("{namespace}/{pod}"),
                None => format!("{namespace}/{slice_name}/{host}"),
            };
            replicas
                .entry(id)
                .or_insert_with(|| format!("http://{host}:{port}"));
        }
    }
    by_model
        .into_iter()
        .map(|(m, r)| (m, r.into_iter().collect()))
        .collect()
}

fn slice_key(s: &EndpointSlice) -> (Option<&str>, Option<&str>) {
    (s.metadata.namespace.as_deref(), s.metadata.name.as_deref())
}

fn model_of(slice: &EndpointSlice) -> Option<&str> {
    slice
        .metadata
        .labels
        .as_ref()?
        .get(LABEL_SERVED_MODEL)
        .map(String::as_str)
        .filter(|m| !m.is_empty())
}

/// The port named `http`, else the only port; TCP (the default) and 1..=65535 only.
fn http_port(slice: &EndpointSlice) -> Option<u16> {
    let ports = slice.ports.as_deref().unwrap_or_default();
    let chosen = ports
        .iter()
        .find(|p| p.name.as_deref() == Some(HTTP_PORT_NAME))
        .or(match ports {
            [only] => Some(only),
            _ => None,
        })?;
    if chosen.protocol.as_deref().is_some_and(|p| p != "TCP") {
        return None;
    }
    u16::try_from(chosen.port?).ok().filter(|p| *p != 0)
}

fn routable(e: &Endpoint) -> bool {
    let c = e.conditions.as_ref();
    let ready = c.and_then(|c| c.ready).unwrap_or(true);
    let terminating = c.and_then(|c| c.terminating).unwrap_or(false);
    ready && !terminating
}

/// The URL host for `address`: IP addresses are parsed (IPv6 bracketed), FQDNs must be
/// DNS names; anything else is skipped rather than put into a URL.
fn host(address_type: &str, address: &str) -> Option<String> {
    match address_type {
        "IPv4" | "IPv6" => match address.parse::<IpAddr>().ok()? {
            IpAddr::V4(a) if address_type == "IPv4" => Some(a.to_string()),
            IpAddr::V6(a) if address_type == "IPv6" => Some(format!("[{a}]")),
            _ => None,
        },
        "FQDN" => {
            let ok = !address.is_empty()
                && address.len() <= 253
                && address.split('.').all(|label| {
                    !label.is_empty()
                        && label.len() <= 63
                        && !label.starts_with('-')
                        && !label.ends_with('-')
                        && label
                            .bytes()
                            .all(|b| b.is_ascii_alphanumeric() || b == b'-')
                });
            ok.then(|| address.to_ascii_lowercase())
        }
        _ => None,
    }
}

/// What one model's replica set became: `None` when no slice names it any more (its
/// Service is gone), else its complete ready set (possibly empty).
pub type Change = (String, Option<Vec<Replica>>);

/// The slices seen so far and what the sink was last told, driven by watcher events.
///
/// A relist (`Init`, `InitApply`…, `InitDone`) replaces the whole state at `InitDone`, so
/// slices deleted while the watch was down disappear and their models are removed.
#[derive(Debug, Default)]
pub struct SliceState {
    slices: BTreeMap<(String, String), EndpointSlice>,
    relist: Option<BTreeMap<(String, String), EndpointSlice>>,
    told: BTreeMap<String, Vec<Replica>>,
}

impl SliceState {
    /// Applies one watcher event; returns the models whose replica set changed, each
    /// with its complete new set (`None`: no slice names the model any more).
    pub fn apply(&mut self, event: Event<EndpointSlice>) -> Vec<Change> {
        match event {
            Event::Apply(s) => {
                self.slices.insert(key(&s), s);
            }
            Event::Delete(s) => {
                self.slices.remove(&key(&s));
            }
            Event::Init => {
                self.relist = Some(BTreeMap::new());
                return Vec::new();
            }
            Event::InitApply(s) => {
                self.relist.get_or_insert_default().insert(key(&s), s);
                return Vec::new();
            }
            Event::InitDone => {
                self.slices = self.relist.take().unwrap_or_default();
            }
        }
        self.diff()
    }

    /// What the sink has been told, per model (models without a slice are absent).
    pub fn replicas(&self) -> &BTreeMap<String, Vec<Replica>> {
        &self.told
    }

    fn diff(&mut self) -> Vec<Change> {
        let now = replicas_by_model(self.slices.values());
        let models: BTreeSet<&String> = self.told.keys().chain(now.keys()).collect();
        let changes: Vec<Change> = models
            .into_iter()
            .filter(|m| self.told.get(*m) != now.get(*m))
            .map(|m| (m.clone(), now.get(m).cloned()))
            .collect();
        self.told = now;
        changes
    }
}

fn key(s: &EndpointSlice) -> (String, String) {
    (
        s.metadata.namespace.clone().unwrap_or_default(),
        s.metadata.name.clone().unwrap_or_default(),
    )
}

/// Watches EndpointSlices labelled [`LABEL_SERVED_MODEL`] in `namespace` (every
/// namespace when `None`) and calls `sink(model, replicas)` with a model's complete
/// ready set whenever it changes: an empty set while no pod is ready (the gateway
/// answers 503), `None` once no slice names the model (404).
///
/// Runs until the future is dropped. Watch errors are logged and retried with kube's
/// default backoff (0.8 s doubling to 30 s); the sink is not called meanwhile, so the
/// gateway keeps its last known replicas. After a reconnect the watcher relists and the
/// state converges to what the cluster holds.
pub async fn watch_replicas<S>(client: Client, namespace: Option<&str>, mut sink: S)
where
    S: FnMut(&str, Option<&[Replica]>) + Send,
{
    let api: Api<EndpointSlice> = match namespace {
        Some(ns) => Api::namespaced(client, ns),
        None => Api::all(client),
    };
    let config = watcher::Config::default().labels(LABEL_SERVED_MODEL);
    let mut events = std::pin::pin!(watcher::watcher(api, config).default_backoff());
    let mut state = SliceState::default();
    tracing::info!(
        namespace = namespace.unwrap_or("(all)"),
        label = LABEL_SERVED_MODEL,
        "watching EndpointSlices for replicas"
    );
    while let Some(event) = events.next().await {
        match event {
            Ok(event) => {
                for (model, replicas) in state.apply(event) {
                    match &replicas {
                        Some(r) => {
                            tracing::info!(
                                model,
                                replicas = r.len(),
                                "replicas from EndpointSlices"
                            )
                        }
                        None => tracing::info!(model, "no EndpointSlice names the model any more"),
                    }
                    sink(&model, replicas.as_deref());
                }
            }
            Err(e) => tracing::warn!(
                namespace = namespace.unwrap_or("(all)"),
                error = %e,
                "EndpointSlice watch failed; keeping the last known replicas and retrying"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::{Value, json};

    fn slice(
        ns: &str,
        name: &str,
        model: Option<&str>,
        ports: Value,
        endpoints: Value,
    ) -> EndpointSlice {
        let mut labels = json!({"kubernetes.io/service-name": "svc"});
        if let Some(m) = model {
            labels[LABEL_SERVED_MODEL] = json!(m);
        }
        serde_json::from_value(json!({
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": name, "namespace": ns, "labels": labels},
            "addressType": "IPv4", "ports": ports, "endpoints": endpoints,
        }))
        .unwrap()
    }

    fn ep(ip: &str, pod: &str, ready: Option<bool>) -> Value {
        let mut e = json!({"addresses": [ip], "targetRef": {"kind": "Pod", "name": pod, "namespace": "ns"}});
        if let Some(r) = ready {
            e["conditions"] = json!({"ready": r});
        }
        e
    }

    fn http() -> Value {
        json!([{"name": "http", "port": 8000, "protocol": "TCP"}])
    }

    fn pairs(v: &[(&str, &str)]) -> Vec<Replica> {
        v.iter().map(|(a, b)| ((*a).into(), (*b).into())).collect()
    }

    #[test]
    fn ready_or_unset_endpoints_are_routed_not_ready_and_terminating_are_not() {
        let mut terminating = ep("10.0.0.4", "d", None);
        terminating["conditions"] = json!({"ready": false, "serving": true, "terminating": true});
        let s = slice(
            "ns",
            "qwen-abc",
            Some("qwen"),
            http(),
            json!([
                ep("10.0.0.1", "a", Some(true)),
                ep("10.0.0.2", "b", None),
                ep("10.0.0.3", "c", Some(false)),
                terminating
            ]),
        );
        let got = replicas_by_model([&s]);
        assert_eq!(
            got["qwen"],
            pairs(&[
                ("ns/a", "http://10.0.0.1:8000"),
                ("ns/b", "http://10.0.0.2:8000")
            ])
        );
    }

    #[test]
    fn the_http_port_wins_else_the_only_port_else_the_slice_is_skipped() {
        let two = json!([{"name": "metrics", "port": 9000}, {"name": "http", "port": 8000}]);
        let only = json!([{"name": "web", "port": 7000}]);
        let ambiguous = json!([{"name": "a", "port": 1}, {"name": "b", "port": 2}]);
        let udp = json!([{"name": "http", "port": 53, "protocol": "UDP"}]);
        let got = replicas_by_model(&[
            slice(
                "ns",
                "s1",
                Some("m1"),
                two,
                json!([ep("10.0.0.1", "a", None)]),
            ),
            slice(
                "ns",
                "s2",
                Some("m2"),
                only,
                json!([ep("10.0.0.2", "b", None)]),
            ),
            slice(
                "ns",
                "s3",
                Some("m3"),
                ambiguous,
                json!([ep("10.0.0.3", "c", None)]),
            ),
            slice(
                "ns",
                "s4",
                Some("m4"),
                udp,
                json!([ep("10.0.0.4", "d", None)]),
            ),
            slice(
                "ns",
                "s5",
                Some("m5"),
                json!([]),
                json!([ep("10.0.0.5", "e", None)]),
            ),
            slice("ns", "s6", None, http(), json!([ep("10.0.0.6", "f", None)])),
        ]);
        // m3-m5 exist but no port can be routed: known, with no replica.
        assert_eq!(
            got.keys().collect::<Vec<_>>(),
            ["m1", "m2", "m3", "m4", "m5"]
        );
        assert_eq!(got["m1"][0].1, "http://10.0.0.1:8000");
        assert_eq!(got["m2"][0].1, "http://10.0.0.2:7000");
        assert!(got["m3"].is_empty() && got["m4"].is_empty() && got["m5"].is_empty());
    }

    #[test]
    fn ipv6_is_bracketed_fqdn_checked_and_ids_without_a_pod_use_slice_and_address() {
        let mut v6 = slice(
            "ns",
            "v6",
            Some("m"),
            http(),
            json!([{"addresses": ["fd00::1"]}]),
        );
        v6.address_type = "IPv6".into();
        let mut fqdn = slice(
            "ns",
            "dns",
            Some("m"),
            http(),
            json!([{"addresses": ["Vllm-0.svc.cluster.local"]}, {"addresses": ["bad host/x"]}]),
        );
        fqdn.address_type = "FQDN".into();
        let wrong = slice(
            "ns",
            "wrong",
            Some("m"),
            http(),
            json!([{"addresses": ["fd00::2"]}]),
        );
        let got = replicas_by_model([&v6, &fqdn, &wrong]);
        assert_eq!(
            got["m"],
            pairs(&[
                (
                    "ns/dns/vllm-0.svc.cluster.local",
                    "http://vllm-0.svc.cluster.local:8000"
                ),
                ("ns/v6/[fd00::1]", "http://[fd00::1]:8000"),
            ])
        );
    }

    #[test]
    fn a_dual_stack_pod_is_one_replica_whatever_the_order() {
        let v4 = slice(
            "ns",
            "a-v4",
            Some("m"),
            http(),
            json!([ep("10.0.0.1", "p", None)]),
        );
        let mut v6 = slice(
            "ns",
            "b-v6",
            Some("m"),
            http(),
            json!([ep("fd00::1", "p", None)]),
        );
        v6.address_type = "IPv6".into();
        let one = replicas_by_model([&v4, &v6]);
        assert_eq!(one, replicas_by_model([&v6, &v4]));
        assert_eq!(one["m"], pairs(&[("ns/p", "http://10.0.0.1:8000")]));
    }

    #[test]
    fn state_reports_only_changes_and_a_relist_removes_what_vanished() {
        let a = slice(
            "ns",
            "qwen-a",
            Some("qwen"),
            http(),
            json!([ep("10.0.0.1", "a", None)]),
        );
        let b = slice(
            "ns",
            "llama-a",
            Some("llama"),
            http(),
            json!([ep("10.0.0.2", "b", None)]),
        );
        let mut st = SliceState::default();
        assert!(st.apply(Event::Init).is_empty());
        assert!(st.apply(Event::InitApply(a.clone())).is_empty());
        assert!(st.apply(Event::InitApply(b.clone())).is_empty());
        let first = st.apply(Event::InitDone);
        assert_eq!(first.len(), 2);
        // The same object again changes nothing.
        assert!(st.apply(Event::Apply(a.clone())).is_empty());
        // The watch restarts; llama's slice was deleted meanwhile.
        assert!(st.apply(Event::Init).is_empty());
        assert!(st.apply(Event::InitApply(a.clone())).is_empty());
        assert_eq!(st.apply(Event::InitDone), vec![("llama".to_owned(), None)]);
        assert_eq!(st.replicas().keys().collect::<Vec<_>>(), ["qwen"]);
        // Its only pod turns unready: the model stays, with no replica.
        let mut unready = a.clone();
        unready.endpoints[0].conditions = serde_json::from_value(json!({"ready": false})).ok();
        assert_eq!(
            st.apply(Event::Apply(unready)),
            vec![("qwen".to_owned(), Some(vec![]))]
        );
        assert_eq!(st.apply(Event::Delete(a)), vec![("qwen".to_owned(), None)]);
        assert!(st.replicas().is_empty());
    }

    fn arb_slice() -> impl Strategy<Value = EndpointSlice> {
        let endpoint = (
            prop::sample::select(vec![
                "10.0.0.1",
                "10.0.0.2",
                "fd00::1",
                "x..y",
                "",
                "a.b",
                "300.1.1.1",
            ]),
            prop::option::of(prop::sample::select(vec!["p1", "p2", ""])),
            prop::option::of(any::<bool>()),
            prop::option::of(any::<bool>()),
        )
            .prop_map(|(addr, pod, ready, terminating)| {
                let mut e = json!({"addresses": [addr], "conditions": {}});
                if let Some(p) = pod {
                    e["targetRef"] = json!({"kind": "Pod", "name": p});
                }
                if let Some(r) = ready {
                    e["conditions"]["ready"] = json!(r);
                }
                if let Some(t) = terminating {
                    e["conditions"]["terminating"] = json!(t);
                }
                e
            });
        let port = (
            prop::option::of(prop::sample::select(vec!["http", "metrics"])),
            prop::option::of(-5i32..70_000),
            prop::option::of(prop::sample::select(vec!["TCP", "UDP"])),
        )
            .prop_map(
                |(name, port, protocol)| json!({"name": name, "port": port, "protocol": protocol}),
            );
        (
            prop::sample::select(vec!["ns1", "ns2"]),
            prop::sample::select(vec!["s1", "s2", "s3"]),
            prop::option::of(prop::sample::select(vec!["qwen", "llama", ""])),
            prop::sample::select(vec!["IPv4", "IPv6", "FQDN", "Other"]),
            prop::collection::vec(port, 0..3),
            prop::collection::vec(endpoint, 0..5),
        )
            .prop_map(|(ns, name, model, at, ports, eps)| {
                let mut s = slice(ns, name, model, json!(ports), json!(eps));
                s.address_type = at.into();
                s
            })
    }

    proptest! {
        #[test]
        fn arbitrary_slices_give_unique_ids_and_only_ready_endpoints(
            slices in prop::collection::vec(arb_slice(), 0..6)
        ) {
            // The API never holds two slices with one namespace and name.
            let slices: Vec<EndpointSlice> = slices.into_iter().map(|s| (key(&s), s)).collect::<BTreeMap<_, _>>().into_values().collect();
            let got = replicas_by_model(&slices);
            let mut ids = BTreeSet::new();
            for (model, replicas) in &got {
                prop_assert!(!model.is_empty());
                for (id, url) in replicas {
                    prop_assert!(ids.insert((model.clone(), id.clone())), "duplicate id {id}");
                    prop_assert!(url.starts_with("http://"));
                    // Every replica comes from a ready, non-terminating endpoint of a
                    // slice of this model.
                    let host = url.trim_start_matches("http://").rsplit_once(':').unwrap().0;
                    let from_ready = slices.iter().filter(|s| model_of(s) == Some(model.as_str())).any(|s| {
                        s.endpoints.iter().any(|e| routable(e) && e.addresses.first().and_then(|a| super::host(&s.address_type, a)).as_deref() == Some(host))
                    });
                    prop_assert!(from_ready, "{url} is not a ready endpoint of {model}");
                }
            }
            // The order of the input does not matter.
            let reversed: Vec<&EndpointSlice> = slices.iter().rev().collect();
            prop_assert_eq!(replicas_by_model(reversed), got);
        }
    }
}
