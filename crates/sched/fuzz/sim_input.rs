//! The input of the fuzz target `sim_inputs`, and what a finished replay must hold: one file
//! that the target and `tests/sim_inputs.rs` (which replays the seed corpus and generated
//! inputs) both include, so a seed means the same to both.
//!
//! An input is a byte of switches, then the trace CSV, the cluster YAML, the queues YAML and
//! the cohorts YAML (a list of cohort specs: a cohort tree) separated by NUL bytes; an empty or
//! missing cluster or queues file means the defaults `ferry sim` picks, and no cohorts file
//! flat cohorts. The switches pick the policy, what the policies are told of run times,
//! whether pace corrects them, whether split gangs run slower, and whether starts are forecast.

use ferry_sched::{
    Cluster, CohortSpec, Estimates, Knowledge, Policy, PriorityClass, Probes, QueueSpec,
    SchedError, SimReport, Site, TraceJob, default_cluster, default_queues, parse_trace,
    simulate_probing,
};

/// One decoded input.
pub struct SimInput {
    /// The trace.
    pub trace: Vec<TraceJob>,
    /// The cluster given, else the default one for the trace.
    pub cluster: Cluster,
    /// The queues given, else the default ones for the trace and cluster.
    pub queues: Vec<QueueSpec>,
    /// The cohort tree given, else none.
    pub cohorts: Vec<CohortSpec>,
    /// The priority classes a trace row may name: Ferry's standard `low`, `normal`, `high`.
    pub classes: Vec<PriorityClass>,
    /// The policy the switches pick.
    pub policy: Policy,
    /// What the policies are told, as the switches say.
    pub knowledge: Knowledge,
    /// Whether starts are forecast.
    pub probes: Probes,
}

impl SimInput {
    /// `data` decoded, its trace called `file` in errors; `Err` says which part does not parse.
    pub fn decode(data: &[u8], file: &str) -> Result<SimInput, String> {
        let (&switches, files) = data.split_first().ok_or("no switches byte")?;
        let text = String::from_utf8_lossy(files);
        let mut parts = text.split('\0');
        let trace =
            parse_trace(parts.next().unwrap_or_default(), file).map_err(|e| e.to_string())?;
        let cluster = match parts.next().filter(|t| !t.trim().is_empty()) {
            None => default_cluster(&trace),
            Some(yaml) => serde_saphyr::from_str(yaml).map_err(|e| format!("cluster: {e}"))?,
        };
        let queues = match parts.next().filter(|t| !t.trim().is_empty()) {
            None => default_queues(&trace, &cluster),
            Some(yaml) => serde_saphyr::from_str(yaml).map_err(|e| format!("queues: {e}"))?,
        };
        let cohorts = match parts.next().filter(|t| !t.trim().is_empty()) {
            None => Vec::new(),
            Some(yaml) => serde_saphyr::from_str(yaml).map_err(|e| format!("cohorts: {e}"))?,
        };
        Ok(SimInput {
            trace,
            cluster,
            queues,
            cohorts,
            classes: PriorityClass::standard(),
            policy: Policy::ALL[usize::from(switches) % Policy::ALL.len()],
            knowledge: Knowledge {
                estimates: match (switches >> 3) % 4 {
                    0 => Estimates::Exact,
                    1 => Estimates::None,
                    2 => Estimates::Trace,
                    _ => Estimates::Limits { padding: 1.5 },
                },
                pace_after_s: (switches & 0x20 != 0).then_some(600),
                split_slowdown_pct: if switches & 0x40 != 0 { 20 } else { 0 },
                per_job_slowdown_untold: false,
            },
            probes: Probes {
                forecast: switches & 0x80 != 0,
            },
        })
    }

    /// Where the trace replays: the cluster, queues and classes.
    pub fn site(&self) -> Site<'_> {
        Site {
            cluster: &self.cluster,
            queues: &self.queues,
            cohorts: &self.cohorts,
            classes: &self.classes,
        }
    }

    /// The replay under the policy picked, with its default switches.
    pub fn replay(&self) -> Result<SimReport, SchedError> {
        simulate_probing(
            &self.trace,
            self.site(),
            self.policy,
            self.policy.options(),
            self.knowledge,
            self.probes,
        )
    }
}

/// What a finished replay must hold whatever its inputs: each job ran once to its end, after
/// it arrived, and the figures are numbers in their ranges; `Err` says what does not.
pub fn check_report(trace: &[TraceJob], r: &SimReport) -> Result<(), String> {
    let fail = |what: String| Err(format!("{}: {what}", r.policy));
    if r.jobs.len() != trace.len() {
        return fail(format!(
            "every job has an outcome: {} outcomes of {} jobs",
            r.jobs.len(),
            trace.len()
        ));
    }
    if let Some(o) = r
        .jobs
        .iter()
        .find(|o| o.first_start_s < o.submit_s || o.end_s < o.first_start_s)
    {
        return fail(format!("{o:?}"));
    }
    if !(0.0..=1.0 + 1e-9).contains(&r.utilization) {
        return fail(format!("utilization {}", r.utilization));
    }
    if let Some(v) = [r.mean_jct_s, r.p50_jct_s, r.p99_jct_s, r.mean_wait_s]
        .into_iter()
        .find(|v| !(v.is_finite() && *v >= 0.0))
    {
        return fail(format!("{v}"));
    }
    // Each job is counted in its class, when the trace names classes.
    let classed: usize = r.classes.values().map(|c| c.jobs).sum();
    let named = trace.iter().any(|t| t.priority.is_some());
    if named && classed != trace.len() || !named && !r.classes.is_empty() {
        return fail(format!("{classed} jobs in classes of {}", trace.len()));
    }
    Ok(())
}
