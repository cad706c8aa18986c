//! The gateway's Prometheus metrics: requests by status code, TTFT, inter-token and
//! end-to-end latency per model, replica and team, tokens in and out, and replica
//! health and load (rendered from the registry at scrape time).

use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry as PromRegistry;

use crate::registry::Registry;

/// Labels of a request series.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    /// Model name from the request (empty when unknown).
    pub model: String,
    /// Replica id (empty when none was reached).
    pub replica: String,
    /// Team of the API key.
    pub team: String,
    /// HTTP status sent to the client; `499` when the client went away.
    pub code: String,
}

/// Labels of latency histograms.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RouteLabels {
    /// Model name.
    pub model: String,
    /// Replica id.
    pub replica: String,
    /// Team.
    pub team: String,
}

/// Labels of token counters.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TokenLabels {
    /// Model name.
    pub model: String,
    /// Team.
    pub team: String,
}

/// Labels of upstream failures and replica gauges.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReplicaLabels {
    /// Replica id.
    pub replica: String,
}

/// Labels of upstream failures.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FailureLabels {
    /// Replica id.
    pub replica: String,
    /// `connect`, `first_byte_timeout`, `status_5xx`, `idle_timeout`, `body`.
    pub kind: String,
}

type Hist = Family<RouteLabels, Histogram, fn() -> Histogram>;

fn latency() -> Histogram {
    Histogram::new([
        0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24,
        20.48, 40.96, 81.92,
    ])
}

fn gaps() -> Histogram {
    Histogram::new([
        0.0005, 0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56,
    ])
}

/// The series of one (model, replica, team) route, looked up once and reused.
#[derive(Debug)]
pub(crate) struct RouteHandles {
    pub model: String,
    pub team: String,
    /// `requests{code="200"}`, the common case; other codes go through the family.
    pub ok: Counter,
    pub e2e: Histogram,
    pub ttft: Histogram,
    pub itl: Histogram,
    pub prompt_tokens: Counter,
    pub completion_tokens: Counter,
}

/// Every metric of one gateway.
#[derive(Debug)]
pub struct Metrics {
    registry: PromRegistry,
    pub(crate) requests: Family<RequestLabels, Counter>,
    pub(crate) ttft: Hist,
    pub(crate) itl: Hist,
    pub(crate) e2e: Hist,
    pub(crate) prompt_tokens: Family<TokenLabels, Counter>,
    pub(crate) completion_tokens: Family<TokenLabels, Counter>,
    pub(crate) failures: Family<FailureLabels, Counter>,
    pub(crate) retries: Family<ReplicaLabels, Counter>,
    healthy: Family<ReplicaLabels, Gauge>,
    in_flight: Family<ReplicaLabels, Gauge>,
    kv_usage: Family<ReplicaLabels, Gauge<f64, AtomicU64>>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Registers everything in a fresh registry.
    pub fn new() -> Self {
        let mut registry = PromRegistry::with_prefix("ferry_gateway");
        let requests = Family::<RequestLabels, Counter>::default();
        let ttft: Hist = Family::new_with_constructor(latency);
        let itl: Hist = Family::new_with_constructor(gaps);
        let e2e: Hist = Family::new_with_constructor(latency);
        let prompt_tokens = Family::<TokenLabels, Counter>::default();
        let completion_tokens = Family::<TokenLabels, Counter>::default();
        let failures = Family::<FailureLabels, Counter>::default();
        let retries = Family::<ReplicaLabels, Counter>::default();
        let healthy = Family::<ReplicaLabels, Gauge>::default();
        let in_flight = Family::<ReplicaLabels, Gauge>::default();
        let kv_usage = Family::<ReplicaLabels, Gauge<f64, AtomicU64>>::default();
        registry.register(
            "requests",
            "Requests by model, replica, team and status code",
            requests.clone(),
        );
        registry.register(
            "time_to_first_token_seconds",
            "Arrival to the first body byte from the replica",
            ttft.clone(),
        );
        registry.register(
            "inter_token_latency_seconds",
            "Gaps between streamed chunks",
            itl.clone(),
        );
        registry.register(
            "e2e_request_latency_seconds",
            "Arrival to the last byte",
            e2e.clone(),
        );
        registry.register(
            "prompt_tokens",
            "Prompt tokens (from usage, else estimated)",
            prompt_tokens.clone(),
        );
        registry.register(
            "completion_tokens",
            "Completion tokens (from usage, else counted chunks)",
            completion_tokens.clone(),
        );
        registry.register(
            "upstream_failures",
            "Failed attempts on a replica, by kind",
            failures.clone(),
        );
        registry.register(
            "retries",
            "Requests retried away from a replica",
            retries.clone(),
        );
        registry.register(
            "replica_healthy",
            "1 while the replica's circuit is closed",
            healthy.clone(),
        );
        registry.register(
            "replica_in_flight",
            "Requests in flight on the replica",
            in_flight.clone(),
        );
        registry.register(
            "replica_kv_cache_usage",
            "KV-cache usage the replica last reported",
            kv_usage.clone(),
        );
        Self {
            registry,
            requests,
            ttft,
            itl,
            e2e,
            prompt_tokens,
            completion_tokens,
            failures,
            retries,
            healthy,
            in_flight,
            kv_usage,
        }
    }

    /// Looks up (creating them) the series of one route.
    pub(crate) fn route_handles(&self, model: &str, replica: &str, team: &str) -> RouteHandles {
        let route = RouteLabels {
            model: model.to_owned(),
            replica: replica.to_owned(),
            team: team.to_owned(),
        };
        let tokens = TokenLabels {
            model: model.to_owned(),
            team: team.to_owned(),
        };
        RouteHandles {
            model: model.to_owned(),
            team: team.to_owned(),
            ok: self
                .requests
                .get_or_create(&RequestLabels {
                    model: model.to_owned(),
                    replica: replica.to_owned(),
                    team: team.to_owned(),
                    code: "200".to_owned(),
                })
                .clone(),
            e2e: self.e2e.get_or_create(&route).clone(),
            ttft: self.ttft.get_or_create(&route).clone(),
            itl: self.itl.get_or_create(&route).clone(),
            prompt_tokens: self.prompt_tokens.get_or_create(&tokens).clone(),
            completion_tokens: self.completion_tokens.get_or_create(&tokens).clone(),
        }
    }

    /// Counts an attempt that failed on `replica`.
    pub(crate) fn failure(&self, replica: &str, kind: &str) {
        self.failures
            .get_or_create(&FailureLabels {
                replica: replica.to_owned(),
                kind: kind.to_owned(),
            })
            .inc();
    }

    /// Prometheus text exposition, with replica gauges refreshed from `replicas`.
    pub fn render(&self, replicas: &Registry, signal_age: std::time::Duration) -> String {
        self.healthy.clear();
        self.in_flight.clear();
        self.kv_usage.clear();
        for r in replicas.snapshot().replicas.iter() {
            let l = ReplicaLabels {
                replica: r.id().to_owned(),
            };
            self.healthy
                .get_or_create(&l)
                .set(i64::from(r.is_healthy()));
            self.in_flight
                .get_or_create(&l)
                .set(i64::from(r.in_flight()));
            if let Some(kv) = r.signal(signal_age).and_then(|s| s.kv_cache_usage) {
                self.kv_usage.get_or_create(&l).set(kv);
            }
        }
        let mut out = String::new();
        if prometheus_client::encoding::text::encode(&mut out, &self.registry).is_err() {
            out.clear();
        }
        out
    }
}
