//! Background work on replicas: active health checks (`GET /health`), and polling
//! of load signals (`GET /metrics`) and served models (`GET /v1/models`).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::watch;

use crate::proxy::Shared;
use crate::registry::{LoadSignal, Replica};

/// Largest `/metrics` or `/v1/models` body read from a replica.
const POLL_BODY_LIMIT: usize = 4 * 1024 * 1024;

/// Reads vLLM's load gauges from a Prometheus text exposition. Accepts both
/// `vllm:kv_cache_usage_perc` (vLLM ≥ 0.10) and `vllm:gpu_cache_usage_perc` (older);
/// values of several series (one per model) are summed, usage takes the maximum.
/// Never fails: unknown or malformed lines are skipped.
pub fn parse_load(text: &str) -> LoadSignal {
    let mut s = LoadSignal::default();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let name_end = line.find(['{', ' ']).unwrap_or(line.len());
        let name = &line[..name_end];
        let value = line
            .rsplit_once('}')
            .map_or(&line[name_end..], |(_, v)| v)
            .split_whitespace()
            .next()
            .and_then(|v| v.parse::<f64>().ok())
            .filter(|v| v.is_finite());
        let Some(v) = value else { continue };
        match name {
            "vllm:num_requests_running" => *s.running.get_or_insert(0.0) += v,
            "vllm:num_requests_waiting" => *s.waiting.get_or_insert(0.0) += v,
            "vllm:kv_cache_usage_perc" | "vllm:gpu_cache_usage_perc" => {
                let u = s.kv_cache_usage.get_or_insert(0.0);
                *u = u.max(v.clamp(0.0, 1.0));
            }
            _ => {}
        }
    }
    s
}

async fn get(
    sh: &Shared,
    replica: &Replica,
    path: &str,
    timeout: Duration,
) -> Result<(u16, Bytes), String> {
    let fut = crate::upstream::get(
        replica,
        path,
        POLL_BODY_LIMIT,
        sh.cfg.connect_timeout(),
        sh.cfg.pool_idle_timeout(),
    );
    tokio::time::timeout(timeout, fut)
        .await
        .map_err(|_| format!("no answer within {timeout:?}"))?
}

async fn probe(sh: Arc<Shared>, replica: Arc<Replica>) {
    match get(&sh, &replica, "/health", sh.cfg.health_timeout()).await {
        Ok((s, _)) if s < 500 && s != 404 => replica.record_success(),
        Ok((404, _)) => replica.record_success(), // no /health route: reachable is enough
        Ok((s, _)) => {
            sh.metrics.failure(replica.id(), "health_check");
            replica.record_failure(if s >= 500 {
                "health_check_5xx"
            } else {
                "health_check"
            });
        }
        Err(e) => {
            tracing::debug!(replica = %replica.id(), error = %e, "health check failed");
            sh.metrics.failure(replica.id(), "health_check");
            replica.record_failure("health_check");
        }
    }
}

async fn poll(sh: Arc<Shared>, replica: Arc<Replica>) {
    let timeout = sh.cfg.metrics_interval();
    if let Ok((200, body)) = get(&sh, &replica, "/metrics", timeout).await {
        replica.set_signal(parse_load(&String::from_utf8_lossy(&body)));
    }
    if let Ok((200, body)) = get(&sh, &replica, "/v1/models", timeout).await
        && let Ok(v) = serde_json::from_slice::<serde_json::Value>(&body)
        && let Some(data) = v.get("data").and_then(|d| d.as_array())
    {
        let models: Vec<serde_json::Value> = data
            .iter()
            .filter(|m| {
                m.get("id")
                    .and_then(|i| i.as_str())
                    .is_some_and(|s| !s.is_empty())
            })
            .take(1024)
            .cloned()
            .collect();
        sh.registry.set_announced(&replica, models);
    }
}

/// Runs health checks and polls until `stop` flips to true.
pub(crate) async fn run(sh: Arc<Shared>, mut stop: watch::Receiver<bool>) {
    let mut health = tokio::time::interval(sh.cfg.health_interval());
    let mut load = tokio::time::interval(sh.cfg.metrics_interval());
    // Idle upstream connections past `poolIdleTimeoutMs` are closed by this sweep.
    let mut sweep =
        tokio::time::interval((sh.cfg.pool_idle_timeout() / 2).max(Duration::from_millis(50)));
    health.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    load.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    sweep.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stop.changed() => if *stop.borrow() { return },
            _ = health.tick() => {
                for r in sh.registry.snapshot().replicas.iter() {
                    tokio::spawn(probe(sh.clone(), r.clone()));
                }
            }
            _ = sweep.tick() => {
                for r in sh.registry.snapshot().replicas.iter() {
                    r.conns().sweep(sh.cfg.pool_idle_timeout());
                }
            }
            _ = load.tick() => {
                for r in sh.registry.snapshot().replicas.iter() {
                    tokio::spawn(poll(sh.clone(), r.clone()));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_cache_gauge_names_and_junk() {
        let new = "# HELP x\nvllm:num_requests_running{model_name=\"a\"} 3\nvllm:num_requests_waiting{model_name=\"a\"} 2\nvllm:num_requests_waiting{model_name=\"b\"} 1\nvllm:kv_cache_usage_perc{model_name=\"a\"} 0.4\n";
        let s = parse_load(new);
        assert_eq!(s.running, Some(3.0));
        assert_eq!(s.waiting, Some(3.0));
        assert_eq!(s.kv_cache_usage, Some(0.4));
        let old = "vllm:gpu_cache_usage_perc{model_name=\"a\",engine=\"0\"} 0.75 1700000000\n";
        assert_eq!(parse_load(old).kv_cache_usage, Some(0.75));
        let junk = "vllm:num_requests_waiting{\nvllm:num_requests_waiting NaN\n{}}} 1\n\u{0}\nvllm:kv_cache_usage_perc 7\n";
        let s = parse_load(junk);
        assert_eq!(s.waiting, None);
        assert_eq!(s.kv_cache_usage, Some(1.0));
        assert_eq!(parse_load(""), LoadSignal::default());
    }
}
