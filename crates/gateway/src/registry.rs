//! The live set of replicas per model, updated while traffic flows.
//!
//! Writers (flags and config at start, the control plane, a Kubernetes
//! EndpointSlice watcher, the gateway's own `/v1/models` poller) call
//! [`Registry::upsert`], [`Registry::remove`] or [`Registry::set_replicas`]; each
//! publishes a new immutable routing table. Requests read the table once and keep
//! an `Arc` to the replica they use, so removing a replica never cuts a request
//! already on it: it finishes, and new requests go elsewhere.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use http::Uri;
use http::header::HeaderValue;
use http::uri::{Authority, PathAndQuery};

use crate::error::{Error, Result};
use crate::metrics::RouteHandles;
use crate::upstream::ConnPool;

/// The paths the gateway forwards to replicas.
pub(crate) const FORWARD_PATHS: [&str; 3] =
    ["/v1/chat/completions", "/v1/completions", "/v1/embeddings"];

/// Where a replica listens: `http://authority/base_path`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Upstream {
    authority: Authority,
    base_path: String,
}

impl Upstream {
    /// Parses `http://host:port[/prefix]` (HTTPS is not supported between the
    /// gateway and replicas; put them on a private network).
    pub fn parse(model: &str, url: &str) -> Result<Self> {
        let bad = |message: &str| Error::BadUrl {
            model: model.to_owned(),
            url: url.to_owned(),
            message: message.to_owned(),
        };
        let uri: Uri = url
            .parse()
            .map_err(|_| bad("not a URL; write it as http://host:port"))?;
        match uri.scheme_str() {
            Some("http") => {}
            Some(_) => return Err(bad("only http:// replicas are supported")),
            None => return Err(bad("missing http:// scheme")),
        }
        let authority = uri
            .authority()
            .cloned()
            .ok_or_else(|| bad("missing host:port"))?;
        if authority.port_u16().is_none() {
            return Err(bad("missing port, e.g. http://10.0.0.5:8000"));
        }
        if uri.query().is_some() {
            return Err(bad("a replica URL cannot have a query string"));
        }
        let base_path = uri.path().trim_end_matches('/').to_owned();
        Ok(Self {
            authority,
            base_path,
        })
    }

    /// The URI of `path` (e.g. `/v1/chat/completions`) on this replica.
    pub fn uri(&self, path: &str) -> Uri {
        let pq = if self.base_path.is_empty() {
            PathAndQuery::try_from(path)
        } else {
            PathAndQuery::try_from(format!("{}{}", self.base_path, path))
        };
        let mut parts = http::uri::Parts::default();
        parts.scheme = Some(http::uri::Scheme::HTTP);
        parts.authority = Some(self.authority.clone());
        parts.path_and_query = Some(pq.unwrap_or_else(|_| PathAndQuery::from_static("/")));
        Uri::from_parts(parts).unwrap_or_default()
    }

    /// `host:port`, the default replica id.
    pub fn authority(&self) -> &str {
        self.authority.as_str()
    }
}

/// A replica's own view of its load, polled from its `/metrics`.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct LoadSignal {
    /// `vllm:num_requests_running`.
    pub running: Option<f64>,
    /// `vllm:num_requests_waiting`.
    pub waiting: Option<f64>,
    /// `vllm:kv_cache_usage_perc` or its older name `vllm:gpu_cache_usage_perc`, `0..=1`.
    pub kv_cache_usage: Option<f64>,
}

#[derive(Debug, Default)]
struct Health {
    consecutive_failures: u32,
    ejected_until: Option<Instant>,
    ejections: u32,
}

/// Ejection settings, from [`crate::GatewayConfig`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct EjectPolicy {
    pub after_failures: u32,
    pub base: Duration,
    pub max: Duration,
}

impl Default for EjectPolicy {
    fn default() -> Self {
        Self {
            after_failures: 3,
            base: Duration::from_secs(1),
            max: Duration::from_secs(30),
        }
    }
}

/// One engine replica: where it is, how loaded, whether it is healthy.
#[derive(Debug)]
pub struct Replica {
    id: String,
    url: String,
    upstream: Upstream,
    in_flight: AtomicU32,
    healthy: AtomicBool,
    health: Mutex<Health>,
    signal: Mutex<Option<(LoadSignal, Instant)>>,
    announced: Mutex<Vec<serde_json::Value>>,
    eject: EjectPolicy,
    conns: ConnPool,
    host: HeaderValue,
    id_header: Option<HeaderValue>,
    uris: [Uri; 3],
    handles: Mutex<Vec<Arc<RouteHandles>>>,
}

impl Replica {
    fn new(id: &str, url: &str, upstream: Upstream, eject: EjectPolicy) -> Self {
        Self {
            id: id.to_owned(),
            url: url.to_owned(),
            in_flight: AtomicU32::new(0),
            healthy: AtomicBool::new(true),
            health: Mutex::default(),
            signal: Mutex::new(None),
            announced: Mutex::default(),
            eject,
            conns: ConnPool::default(),
            host: crate::upstream::host_value(upstream.authority()),
            id_header: HeaderValue::from_str(id).ok(),
            uris: FORWARD_PATHS.map(|p| crate::upstream::path_uri(&upstream.base_path, p)),
            upstream,
            handles: Mutex::default(),
        }
    }

    /// Idle keep-alive connections to this replica.
    pub(crate) fn conns(&self) -> &ConnPool {
        &self.conns
    }

    /// `Host` header sent to the replica.
    pub(crate) fn host_header(&self) -> &HeaderValue {
        &self.host
    }

    /// The replica id as an `x-ferry-replica` header value (None if not a valid value).
    pub(crate) fn id_header(&self) -> Option<&HeaderValue> {
        self.id_header.as_ref()
    }

    /// Origin-form URI of a forwarded path (one of [`FORWARD_PATHS`]) on this replica.
    pub(crate) fn path_uri(&self, path: &str) -> Uri {
        match FORWARD_PATHS.iter().position(|p| *p == path) {
            Some(i) => self.uris[i].clone(),
            None => crate::upstream::path_uri(&self.upstream.base_path, "/"),
        }
    }

    /// Metric handles of (`model`, `team`) on this replica, made once and reused
    /// so a request does not rebuild and hash its label set for every series.
    pub(crate) fn route_handles(
        &self,
        metrics: &crate::metrics::Metrics,
        model: &str,
        team: &str,
    ) -> Arc<RouteHandles> {
        let mut cache = self.handles.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(h) = cache.iter().find(|h| h.model == model && h.team == team) {
            return h.clone();
        }
        let h = Arc::new(metrics.route_handles(model, &self.id, team));
        // Label sets come from configured keys and requested model names; cap
        // the cache so a flood of unknown adapter names cannot grow it forever.
        if cache.len() < 256 {
            cache.push(h.clone());
        }
        h
    }

    /// Replica id (metrics label, `x-ferry-replica` header).
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Base URL as registered.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Where to send requests.
    pub fn upstream(&self) -> &Upstream {
        &self.upstream
    }

    /// Requests this gateway has in flight on the replica.
    pub fn in_flight(&self) -> u32 {
        self.in_flight.load(Ordering::Relaxed)
    }

    /// Counts a request on the replica until the guard drops.
    pub(crate) fn start(self: &Arc<Self>) -> InFlightGuard {
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        InFlightGuard(self.clone())
    }

    /// False while ejected (circuit open).
    pub fn is_healthy(&self) -> bool {
        self.healthy.load(Ordering::Relaxed)
    }

    /// May take traffic at `now`: healthy, or ejected with the ejection elapsed
    /// (half-open: the next outcome closes or re-opens the circuit).
    pub(crate) fn available(&self, now: Instant) -> bool {
        if self.is_healthy() {
            return true;
        }
        let h = self.health.lock().unwrap_or_else(|p| p.into_inner());
        h.ejected_until.is_none_or(|t| t <= now)
    }

    /// A request or probe succeeded: closes the circuit.
    pub(crate) fn record_success(&self) {
        if self.is_healthy() {
            let mut h = self.health.lock().unwrap_or_else(|p| p.into_inner());
            h.consecutive_failures = 0;
            return;
        }
        let mut h = self.health.lock().unwrap_or_else(|p| p.into_inner());
        h.consecutive_failures = 0;
        h.ejected_until = None;
        h.ejections = 0;
        self.healthy.store(true, Ordering::Relaxed);
        tracing::info!(replica = %self.id, url = %self.url, "replica readmitted");
    }

    /// A connect error, timeout or 5xx (never a 4xx): may open the circuit.
    /// Returns true when this failure ejected the replica.
    pub(crate) fn record_failure(&self, why: &str) -> bool {
        let mut h = self.health.lock().unwrap_or_else(|p| p.into_inner());
        h.consecutive_failures = h.consecutive_failures.saturating_add(1);
        let half_open = !self.is_healthy();
        if !half_open && h.consecutive_failures < self.eject.after_failures {
            return false;
        }
        let now = Instant::now();
        if half_open && h.ejected_until.is_some_and(|t| t > now) {
            return false; // already open; a late failure of an older request
        }
        let factor = 1u32 << h.ejections.min(5);
        let length = (self.eject.base * factor).min(self.eject.max);
        h.ejections = h.ejections.saturating_add(1);
        h.ejected_until = Some(now + length);
        self.healthy.store(false, Ordering::Relaxed);
        tracing::warn!(replica = %self.id, url = %self.url, why, ?length, "replica ejected");
        true
    }

    /// Stores a polled load signal.
    pub(crate) fn set_signal(&self, s: LoadSignal) {
        *self.signal.lock().unwrap_or_else(|p| p.into_inner()) = Some((s, Instant::now()));
    }

    /// The polled load signal if younger than `max_age`.
    pub fn signal(&self, max_age: Duration) -> Option<LoadSignal> {
        let s = self.signal.lock().unwrap_or_else(|p| p.into_inner());
        s.and_then(|(sig, at)| (at.elapsed() <= max_age).then_some(sig))
    }

    /// Models the replica announced on its `/v1/models` (base models and adapters).
    pub fn announced(&self) -> Vec<serde_json::Value> {
        self.announced
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

/// Decrements the replica's in-flight count when the request ends.
#[derive(Debug)]
pub(crate) struct InFlightGuard(Arc<Replica>);

impl Drop for InFlightGuard {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Virtual nodes per replica on a model's hash ring.
const VNODES: u32 = 64;

/// The replicas of one model and their hash ring.
#[derive(Debug)]
pub struct Pool {
    /// Replicas, ordered by id.
    pub(crate) replicas: Vec<Arc<Replica>>,
    /// `(point, index into replicas)`, sorted by point.
    pub(crate) ring: Vec<(u64, u32)>,
    /// Round-robin cursor, carried over when the table is republished.
    pub(crate) cursor: Arc<AtomicUsize>,
}

impl Pool {
    fn new(replicas: Vec<Arc<Replica>>, cursor: Arc<AtomicUsize>) -> Self {
        let mut ring = Vec::with_capacity(replicas.len() * VNODES as usize);
        for (i, r) in replicas.iter().enumerate() {
            for v in 0..VNODES {
                ring.push((
                    crate::route::hash_parts(&[r.id.as_bytes(), &v.to_le_bytes()]),
                    i as u32,
                ));
            }
        }
        ring.sort_unstable();
        Self {
            replicas,
            ring,
            cursor,
        }
    }

    /// The replicas of the model.
    pub fn replicas(&self) -> &[Arc<Replica>] {
        &self.replicas
    }
}

/// An immutable routing table: model → pool.
#[derive(Debug, Default)]
pub struct Table {
    pub(crate) models: HashMap<String, Arc<Pool>>,
    pub(crate) replicas: Vec<Arc<Replica>>,
}

impl Table {
    /// The pool serving `model`, if any.
    pub fn pool(&self, model: &str) -> Option<&Arc<Pool>> {
        self.models.get(model)
    }

    /// Models with at least one replica, sorted: what `/v1/models` lists.
    pub fn served_models(&self) -> Vec<String> {
        let mut m: Vec<String> = self
            .models
            .iter()
            .filter(|(_, p)| !p.replicas.is_empty())
            .map(|(m, _)| m.clone())
            .collect();
        m.sort();
        m
    }
}

#[derive(Debug)]
struct Entry {
    replica: Arc<Replica>,
    models: BTreeSet<String>,
}

#[derive(Debug)]
struct Inner {
    table: RwLock<Arc<Table>>,
    entries: Mutex<BTreeMap<String, Entry>>,
    /// Models whose replica set is managed as a whole ([`Registry::set_replicas`]):
    /// they stay known with no replica (503, not 404) until [`Registry::forget_model`].
    /// Locked only while `entries` is held.
    declared: Mutex<BTreeSet<String>>,
    eject: EjectPolicy,
}

/// Handle to the gateway's replica set; cheap to clone, safe to call from any task.
#[derive(Debug, Clone)]
pub struct Registry {
    inner: Arc<Inner>,
}

/// One replica as [`Registry::replicas`] reports it.
#[derive(Debug, Clone, PartialEq)]
pub struct ReplicaStatus {
    /// Replica id.
    pub id: String,
    /// Base URL.
    pub url: String,
    /// Models registered for it (by the control plane, flags or config).
    pub models: Vec<String>,
    /// Models it announced on `/v1/models`.
    pub announced: Vec<String>,
    /// Circuit closed.
    pub healthy: bool,
    /// Requests in flight through this gateway.
    pub in_flight: u32,
}

impl Default for Registry {
    fn default() -> Self {
        Self::new(EjectPolicy::default())
    }
}

impl Registry {
    pub(crate) fn new(eject: EjectPolicy) -> Self {
        Self {
            inner: Arc::new(Inner {
                table: RwLock::new(Arc::default()),
                entries: Mutex::default(),
                declared: Mutex::default(),
                eject,
            }),
        }
    }

    /// Adds replica `replica_id` at `url` to `model` (or updates its URL). A replica
    /// may serve several models; an id keeps its health and load across models.
    pub fn upsert(&self, model: &str, replica_id: &str, url: &str) -> Result<()> {
        let upstream = Upstream::parse(model, url)?;
        if model.is_empty() {
            return Err(Error::config("model", "a model name must not be empty"));
        }
        let mut entries = self.lock_entries();
        let entry = entries
            .entry(replica_id.to_owned())
            .or_insert_with(|| Entry {
                replica: Arc::new(Replica::new(
                    replica_id,
                    url,
                    upstream.clone(),
                    self.inner.eject,
                )),
                models: BTreeSet::new(),
            });
        if entry.replica.url != url {
            entry.replica = Arc::new(Replica::new(replica_id, url, upstream, self.inner.eject));
        }
        entry.models.insert(model.to_owned());
        self.publish(&entries);
        Ok(())
    }

    /// Removes `model` from replica `replica_id` (the replica goes when it serves
    /// nothing else). Requests already on it finish. Returns whether it was there.
    pub fn remove(&self, model: &str, replica_id: &str) -> bool {
        let mut entries = self.lock_entries();
        let Some(entry) = entries.get_mut(replica_id) else {
            return false;
        };
        let was = entry.models.remove(model);
        if entry.models.is_empty() {
            entries.remove(replica_id);
        }
        self.publish(&entries);
        was
    }

    /// Removes a replica from every model. Returns whether it was there.
    pub fn remove_replica(&self, replica_id: &str) -> bool {
        let mut entries = self.lock_entries();
        let was = entries.remove(replica_id).is_some();
        self.publish(&entries);
        was
    }

    /// Makes `(id, url)` pairs the exact replica set of `model` (what an
    /// EndpointSlice or a ModelDeployment's status lists), in one update. An empty set
    /// keeps the model known, so its requests get 503 (retry) rather than 404, until
    /// [`Registry::forget_model`].
    pub fn set_replicas(&self, model: &str, replicas: &[(String, String)]) -> Result<()> {
        for (_, url) in replicas {
            Upstream::parse(model, url)?;
        }
        let mut entries = self.lock_entries();
        self.lock_declared().insert(model.to_owned());
        let keep: BTreeSet<&str> = replicas.iter().map(|(id, _)| id.as_str()).collect();
        entries.retain(|id, e| {
            if !keep.contains(id.as_str()) {
                e.models.remove(model);
            }
            !e.models.is_empty()
        });
        for (id, url) in replicas {
            let upstream = Upstream::parse(model, url)?;
            let entry = entries.entry(id.clone()).or_insert_with(|| Entry {
                replica: Arc::new(Replica::new(id, url, upstream.clone(), self.inner.eject)),
                models: BTreeSet::new(),
            });
            if entry.replica.url != *url {
                entry.replica = Arc::new(Replica::new(id, url, upstream, self.inner.eject));
            }
            entry.models.insert(model.to_owned());
        }
        self.publish(&entries);
        Ok(())
    }

    /// Records what a replica announced on `/v1/models`; adapters it lists become
    /// routable to it. Returns whether the set changed.
    pub(crate) fn set_announced(
        &self,
        replica: &Arc<Replica>,
        models: Vec<serde_json::Value>,
    ) -> bool {
        {
            let mut a = replica.announced.lock().unwrap_or_else(|p| p.into_inner());
            if *a == models {
                return false;
            }
            *a = models;
        }
        let entries = self.lock_entries();
        self.publish(&entries);
        true
    }

    /// Every replica with its models and state.
    pub fn replicas(&self) -> Vec<ReplicaStatus> {
        let entries = self.lock_entries();
        entries
            .values()
            .map(|e| ReplicaStatus {
                id: e.replica.id.clone(),
                url: e.replica.url.clone(),
                models: e.models.iter().cloned().collect(),
                announced: announced_ids(&e.replica),
                healthy: e.replica.is_healthy(),
                in_flight: e.replica.in_flight(),
            })
            .collect()
    }

    /// Routable model names (with at least one replica), sorted.
    pub fn models(&self) -> Vec<String> {
        self.snapshot().served_models()
    }

    /// The current routing table.
    pub fn snapshot(&self) -> Arc<Table> {
        self.inner
            .table
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    fn lock_entries(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Entry>> {
        self.inner.entries.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn lock_declared(&self) -> std::sync::MutexGuard<'_, BTreeSet<String>> {
        self.inner
            .declared
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    /// Forgets a model declared by [`Registry::set_replicas`] and drops it from every
    /// replica: requests for it get 404 again. Returns whether it was declared.
    pub fn forget_model(&self, model: &str) -> bool {
        let mut entries = self.lock_entries();
        let was = self.lock_declared().remove(model);
        entries.retain(|_, e| {
            e.models.remove(model);
            !e.models.is_empty()
        });
        self.publish(&entries);
        was
    }

    fn publish(&self, entries: &BTreeMap<String, Entry>) {
        let mut by_model: BTreeMap<String, Vec<Arc<Replica>>> = BTreeMap::new();
        for e in entries.values() {
            let mut names: BTreeSet<String> = e.models.clone();
            names.extend(announced_ids(&e.replica));
            for m in names {
                by_model.entry(m).or_default().push(e.replica.clone());
            }
        }
        for m in self.lock_declared().iter() {
            by_model.entry(m.clone()).or_default();
        }
        let old = self.snapshot();
        let table = Table {
            models: by_model
                .into_iter()
                .map(|(m, rs)| {
                    let cursor = old
                        .models
                        .get(&m)
                        .map(|p| p.cursor.clone())
                        .unwrap_or_default();
                    (m, Arc::new(Pool::new(rs, cursor)))
                })
                .collect(),
            replicas: entries.values().map(|e| e.replica.clone()).collect(),
        };
        *self.inner.table.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(table);
    }
}

fn announced_ids(r: &Replica) -> Vec<String> {
    r.announced()
        .iter()
        .filter_map(|m| m.get("id").and_then(|v| v.as_str()).map(str::to_owned))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upstream_urls() {
        let u = Upstream::parse("m", "http://127.0.0.1:8000/").unwrap();
        assert_eq!(
            u.uri("/v1/models").to_string(),
            "http://127.0.0.1:8000/v1/models"
        );
        let u = Upstream::parse("m", "http://h:1/prefix/").unwrap();
        assert_eq!(
            u.uri("/v1/models").to_string(),
            "http://h:1/prefix/v1/models"
        );
        for bad in ["h:1", "https://h:1", "http://h", "http://h:1/?q=1", "::"] {
            assert!(Upstream::parse("m", bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn upsert_remove_and_set_replicas_publish_new_tables() {
        let reg = Registry::default();
        reg.upsert("a", "r1", "http://127.0.0.1:1").unwrap();
        reg.upsert("a", "r2", "http://127.0.0.1:2").unwrap();
        reg.upsert("b", "r2", "http://127.0.0.1:2").unwrap();
        let old = reg.snapshot();
        assert_eq!(old.pool("a").unwrap().replicas().len(), 2);
        assert_eq!(reg.models(), vec!["a", "b"]);
        let r2 = old.pool("b").unwrap().replicas()[0].clone();
        assert!(reg.remove("a", "r2"));
        assert!(!reg.remove("a", "r2"));
        // r2 still serves b, with the same state object.
        assert!(Arc::ptr_eq(
            &reg.snapshot().pool("b").unwrap().replicas()[0],
            &r2
        ));
        assert_eq!(reg.snapshot().pool("a").unwrap().replicas().len(), 1);
        // The old table is untouched (requests holding it keep their replica).
        assert_eq!(old.pool("a").unwrap().replicas().len(), 2);
        reg.set_replicas(
            "a",
            &[
                ("r3".into(), "http://127.0.0.1:3".into()),
                ("r4".into(), "http://127.0.0.1:4".into()),
            ],
        )
        .unwrap();
        let ids: Vec<_> = reg
            .snapshot()
            .pool("a")
            .unwrap()
            .replicas()
            .iter()
            .map(|r| r.id().to_owned())
            .collect();
        assert_eq!(ids, vec!["r3", "r4"]);
        assert!(reg.remove_replica("r2"));
        assert_eq!(reg.models(), vec!["a"]);
        assert!(reg.upsert("a", "x", "ftp://nope").is_err());
    }

    #[test]
    fn circuit_opens_after_failures_and_closes_on_success() {
        let r = Replica::new(
            "r",
            "http://h:1",
            Upstream::parse("m", "http://h:1").unwrap(),
            EjectPolicy {
                after_failures: 2,
                base: Duration::from_millis(40),
                max: Duration::from_secs(1),
            },
        );
        assert!(!r.record_failure("x"));
        assert!(r.record_failure("x"));
        assert!(!r.is_healthy());
        assert!(!r.available(Instant::now()));
        std::thread::sleep(Duration::from_millis(50));
        assert!(r.available(Instant::now()), "half-open after the ejection");
        assert!(
            r.record_failure("x"),
            "a failure while half-open re-ejects at once"
        );
        assert!(!r.available(Instant::now()));
        r.record_success();
        assert!(r.is_healthy());
        assert!(r.available(Instant::now()));
    }

    #[test]
    fn announced_adapters_become_routable() {
        let reg = Registry::default();
        reg.upsert("base", "r1", "http://127.0.0.1:1").unwrap();
        let r1 = reg.snapshot().pool("base").unwrap().replicas()[0].clone();
        let changed = reg.set_announced(
            &r1,
            vec![
                serde_json::json!({"id": "base"}),
                serde_json::json!({"id": "base-lora", "parent": "base"}),
            ],
        );
        assert!(changed);
        assert_eq!(reg.models(), vec!["base", "base-lora"]);
        assert!(!reg.set_announced(&r1, r1.announced()));
    }
}
