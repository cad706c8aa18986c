//! Prometheus metrics of the serving layer, under vLLM's names where vLLM has one,
//! so routers (Ferry's gateway, vLLM's production stack) read a Ferry replica like a
//! vLLM one.
//!
//! One registry owns everything; histogram buckets are fixed here, once.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use crate::backend::{FinishReason, Load};

/// Labels of the HTTP request counter.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RouteLabels {
    /// Matched route, e.g. `/v1/chat/completions`, or `unmatched`.
    pub route: String,
    /// HTTP status code.
    pub status: String,
}

/// Labels of per-model series (vLLM's `model_name`).
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ModelLabels {
    /// Served model id.
    pub model_name: String,
}

/// Labels of the finished-request counter (vLLM's `vllm:request_success_total`).
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FinishLabels {
    /// Served model id.
    pub model_name: String,
    /// `stop` or `length`.
    pub finished_reason: String,
}

fn latency_histogram() -> Histogram {
    Histogram::new([
        0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
        20.0, 40.0, 80.0,
    ])
}

fn token_gap_histogram() -> Histogram {
    Histogram::new([
        0.001, 0.005, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4,
        0.5, 0.75, 1.0, 2.5,
    ])
}

type HistogramFamily = Family<ModelLabels, Histogram, fn() -> Histogram>;

/// All metrics of one server; cheap to update from any task.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    requests: Family<RouteLabels, Counter>,
    prompt_tokens: Family<ModelLabels, Counter>,
    generation_tokens: Family<ModelLabels, Counter>,
    success: Family<FinishLabels, Counter>,
    cancelled: Family<ModelLabels, Counter>,
    ttft: HistogramFamily,
    inter_token: HistogramFamily,
    e2e: HistogramFamily,
    running: Family<ModelLabels, Gauge>,
    waiting: Family<ModelLabels, Gauge>,
    kv_cache_usage: Family<ModelLabels, Gauge<f64, AtomicU64>>,
    own_running: AtomicI64,
    own_waiting: AtomicI64,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Registers every metric in a fresh registry.
    pub fn new() -> Self {
        let mut registry = Registry::default();
        let requests = Family::<RouteLabels, Counter>::default();
        let prompt_tokens = Family::<ModelLabels, Counter>::default();
        let generation_tokens = Family::<ModelLabels, Counter>::default();
        let success = Family::<FinishLabels, Counter>::default();
        let cancelled = Family::<ModelLabels, Counter>::default();
        let ttft: HistogramFamily = Family::new_with_constructor(latency_histogram);
        let inter_token: HistogramFamily = Family::new_with_constructor(token_gap_histogram);
        let e2e: HistogramFamily = Family::new_with_constructor(latency_histogram);
        let running = Family::<ModelLabels, Gauge>::default();
        let waiting = Family::<ModelLabels, Gauge>::default();
        let kv_cache_usage = Family::<ModelLabels, Gauge<f64, AtomicU64>>::default();
        registry.register(
            "ferry:http_requests",
            "HTTP requests by route and status code",
            requests.clone(),
        );
        registry.register(
            "vllm:prompt_tokens",
            "Prompt tokens processed",
            prompt_tokens.clone(),
        );
        registry.register(
            "vllm:generation_tokens",
            "Tokens generated",
            generation_tokens.clone(),
        );
        registry.register(
            "vllm:request_success",
            "Requests that finished generating, by finish reason",
            success.clone(),
        );
        registry.register(
            "ferry:requests_cancelled",
            "Generations cancelled because the client went away",
            cancelled.clone(),
        );
        registry.register(
            "vllm:time_to_first_token_seconds",
            "Time from request arrival to the first generated text",
            ttft.clone(),
        );
        registry.register(
            "vllm:inter_token_latency_seconds",
            "Time between consecutive pieces of generated text",
            inter_token.clone(),
        );
        registry.register(
            "vllm:e2e_request_latency_seconds",
            "Time from request arrival to the end of generation",
            e2e.clone(),
        );
        registry.register(
            "vllm:num_requests_running",
            "Requests generating tokens",
            running.clone(),
        );
        registry.register(
            "vllm:num_requests_waiting",
            "Requests waiting for their first token",
            waiting.clone(),
        );
        registry.register(
            "vllm:kv_cache_usage_perc",
            "Fraction of KV-cache in use (0 to 1), when the engine reports it",
            kv_cache_usage.clone(),
        );
        Self {
            registry,
            requests,
            prompt_tokens,
            generation_tokens,
            success,
            cancelled,
            ttft,
            inter_token,
            e2e,
            running,
            waiting,
            kv_cache_usage,
            own_running: AtomicI64::new(0),
            own_waiting: AtomicI64::new(0),
        }
    }

    /// Counts one HTTP response.
    pub fn record_request(&self, route: &str, status: u16) {
        self.requests
            .get_or_create(&RouteLabels {
                route: route.to_owned(),
                status: status.to_string(),
            })
            .inc();
    }

    /// Counts the prompt tokens of an accepted request.
    pub fn record_prompt(&self, model: &str, tokens: u32) {
        self.prompt_tokens
            .get_or_create(&model_labels(model))
            .inc_by(u64::from(tokens));
    }

    /// Records time to first token.
    pub fn record_first_token(&self, model: &str, since_arrival: Duration) {
        self.ttft
            .get_or_create(&model_labels(model))
            .observe(since_arrival.as_secs_f64());
    }

    /// Records the gap between two pieces of text.
    pub fn record_token_gap(&self, model: &str, gap: Duration) {
        self.token_gap_histogram(model).observe(gap.as_secs_f64());
    }

    /// The inter-token histogram of `model`, as a handle a request keeps so the
    /// per-token path skips the label lookup.
    pub fn token_gap_histogram(&self, model: &str) -> Histogram {
        self.inter_token.get_or_create_owned(&model_labels(model))
    }

    /// Records a generation that finished normally.
    pub fn record_finished(
        &self,
        model: &str,
        reason: FinishReason,
        completion_tokens: u32,
        since_arrival: Duration,
    ) {
        let labels = model_labels(model);
        self.generation_tokens
            .get_or_create(&labels)
            .inc_by(u64::from(completion_tokens));
        self.e2e
            .get_or_create(&labels)
            .observe(since_arrival.as_secs_f64());
        self.success
            .get_or_create(&FinishLabels {
                model_name: model.to_owned(),
                finished_reason: reason.as_str().to_owned(),
            })
            .inc();
    }

    /// Counts a generation abandoned by its client.
    pub fn record_cancelled(&self, model: &str) {
        self.cancelled.get_or_create(&model_labels(model)).inc();
    }

    /// Tracks a request entering (`+1`) or leaving (`-1`) the waiting state.
    pub(crate) fn add_waiting(&self, delta: i64) {
        self.own_waiting.fetch_add(delta, Ordering::Relaxed);
    }

    /// Tracks a request entering (`+1`) or leaving (`-1`) the running state.
    pub(crate) fn add_running(&self, delta: i64) {
        self.own_running.fetch_add(delta, Ordering::Relaxed);
    }

    /// Prometheus text exposition (format 0.0.4). Gauges are labelled with
    /// `model_name`; they use the backend's [`Load`] when it reports one, else the
    /// server's own count of requests waiting for / receiving tokens.
    pub fn render(&self, model_name: &str, load: Option<Load>) -> String {
        let labels = model_labels(model_name);
        let (running, waiting) = match load {
            Some(l) => (i64::from(l.running), i64::from(l.waiting)),
            None => (
                self.own_running.load(Ordering::Relaxed).max(0),
                self.own_waiting.load(Ordering::Relaxed).max(0),
            ),
        };
        self.running.get_or_create(&labels).set(running);
        self.waiting.get_or_create(&labels).set(waiting);
        if let Some(kv) = load.and_then(|l| l.kv_cache_usage) {
            self.kv_cache_usage.get_or_create(&labels).set(kv);
        }
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::prometheus_text::encode(&mut out, &self.registry);
        out
    }
}

fn model_labels(model: &str) -> ModelLabels {
    ModelLabels {
        model_name: model.to_owned(),
    }
}

/// `Content-Type` of [`Metrics::render`]'s output.
pub const CONTENT_TYPE: &str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn render_uses_vllm_names_and_backend_load() {
        let m = Metrics::new();
        m.record_request("/v1/completions", 200);
        m.record_prompt("tiny", 7);
        m.record_finished("tiny", FinishReason::Length, 5, Duration::from_millis(30));
        m.record_first_token("tiny", Duration::from_millis(3));
        let text = m.render(
            "tiny",
            Some(Load {
                running: 3,
                waiting: 2,
                kv_cache_usage: Some(0.5),
            }),
        );
        for line in [
            "ferry:http_requests_total{route=\"/v1/completions\",status=\"200\"} 1",
            "vllm:prompt_tokens_total{model_name=\"tiny\"} 7",
            "vllm:generation_tokens_total{model_name=\"tiny\"} 5",
            "vllm:request_success_total{model_name=\"tiny\",finished_reason=\"length\"} 1",
            "vllm:num_requests_running{model_name=\"tiny\"} 3",
            "vllm:num_requests_waiting{model_name=\"tiny\"} 2",
            "vllm:kv_cache_usage_perc{model_name=\"tiny\"} 0.5",
            "vllm:time_to_first_token_seconds_count{model_name=\"tiny\"} 1",
            "vllm:e2e_request_latency_seconds_count{model_name=\"tiny\"} 1",
        ] {
            assert!(text.contains(line), "missing {line:?} in\n{text}");
        }
    }

    #[test]
    fn own_counts_are_used_without_backend_load() {
        let m = Metrics::new();
        m.add_waiting(1);
        m.add_waiting(1);
        m.add_waiting(-1);
        m.add_running(1);
        let text = m.render("x", None);
        assert!(
            text.contains("vllm:num_requests_running{model_name=\"x\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("vllm:num_requests_waiting{model_name=\"x\"} 1"),
            "{text}"
        );
    }
}
