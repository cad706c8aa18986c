//! Training progress from the engines' metrics lines: rank 0 prints one JSON object with a
//! numeric `step` per line (the same lines the local runtime ingests), and the operator
//! reads the tail of rank 0's log through the `pods/log` subresource.

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, LogParams};
use kube::{Client, ResourceExt};
use serde_json::Value;

use crate::error::Result;
use crate::options::{LABEL_ATTEMPT, LABEL_TRAIN_JOB};

/// Label the Job controller puts on every pod of an Indexed Job (JobSet's pods too).
pub const COMPLETION_INDEX_LABEL: &str = "batch.kubernetes.io/job-completion-index";
/// Lines of rank 0's log read per reconcile.
pub const TAIL_LINES: i64 = 200;
/// Most bytes of log read per reconcile, however long its lines are.
pub const LIMIT_BYTES: i64 = 256 * 1024;
/// The last complete metrics line of a log tail (a final line without a newline may be cut
/// off by the byte limit, so it counts only when it parses).
pub fn latest_metrics(log: &str) -> Option<Value> {
    log.lines()
        .rev()
        .find_map(|l| ferry_spec::parse_metrics_line(l.as_bytes()))
}

/// The latest metrics line of rank 0 of `attempt` of `job`, or `None` when no rank-0 pod
/// exists yet or its container has not started (its log is then unreadable).
pub async fn read(client: &Client, ns: &str, job: &str, attempt: u32) -> Result<Option<Value>> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let lp = ListParams::default().labels(&format!(
        "{LABEL_TRAIN_JOB}={job},{LABEL_ATTEMPT}={attempt},{COMPLETION_INDEX_LABEL}=0"
    ));
    let Some(pod) = pods.list(&lp).await?.items.into_iter().next() else {
        return Ok(None);
    };
    let params = LogParams {
        container: Some("trainer".into()),
        tail_lines: Some(TAIL_LINES),
        limit_bytes: Some(LIMIT_BYTES),
        ..LogParams::default()
    };
    match pods.logs(&pod.name_any(), &params).await {
        Ok(log) => Ok(latest_metrics(&log)),
        // 400: the container is still waiting to start; 404: the pod just went away.
        Err(kube::Error::Api(s)) if s.code == 400 || s.code == 404 => Ok(None),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_metrics_line_wins_and_noise_is_skipped() {
        let log = "starting\n{\"step\":1,\"loss\":2.5}\n{\"no_step\":1}\n{\"step\":2,\"loss\":2.0}\n[rank0] done\n{\"step\":3,";
        assert_eq!(
            latest_metrics(log),
            Some(serde_json::json!({"step": 2, "loss": 2.0}))
        );
        assert_eq!(latest_metrics("no metrics here\n"), None);
        assert_eq!(
            latest_metrics("{\"step\":\"7\"}\n"),
            None,
            "step must be a number"
        );
        let huge = format!(
            "{{\"step\":1,\"pad\":\"{}\"}}",
            "x".repeat(ferry_spec::MAX_METRICS_LINE)
        );
        assert_eq!(latest_metrics(&huge), None);
    }
}
