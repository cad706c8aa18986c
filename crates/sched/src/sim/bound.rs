//! The shortest makespan any policy could reach on a trace and cluster, and so the highest
//! utilization: when every policy ends at it, the trace's tail, not the policy, decides
//! `utilization`, and no policy can be "higher".

use serde::{Deserialize, Serialize};

use super::TraceJob;

/// What limits the makespan from below, whatever the policy.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum MakespanLimit {
    /// One job cannot end before its submit plus its run time.
    LastJob {
        /// The trace's `job_id`.
        job_id: String,
        /// When it was submitted (seconds after the first submit).
        submit_s: u64,
        /// How long it runs.
        duration_s: u64,
    },
    /// The work submitted from some moment on needs the whole cluster for at least this long.
    Work {
        /// From when (seconds after the first submit).
        from_s: u64,
        /// GPU-hours submitted from then on.
        gpu_hours: f64,
    },
    /// Jobs wider than half the cluster can never run side by side: from some moment on,
    /// those submitted then run one after another.
    WideChain {
        /// From when (seconds after the first submit).
        from_s: u64,
        /// How many such jobs.
        jobs: usize,
        /// Their run times, summed.
        chain_s: u64,
    },
}

/// The makespan no policy can beat on this trace and cluster, and why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MakespanBound {
    /// First submit to the earliest possible last completion, seconds.
    pub makespan_s: u64,
    /// Useful GPU-seconds over (GPUs x that makespan): the most `utilization` can be.
    pub utilization: f64,
    /// The reason.
    pub limit: MakespanLimit,
}

/// Lower bound on any policy's makespan: the latest submit-plus-run-time, the work submitted
/// from each moment on spread over every GPU, and the chain of jobs too wide to run side by
/// side submitted from each moment on (each a valid bound; preemption only adds time).
pub fn makespan_bound(trace: &[TraceJob], gpus: u64) -> MakespanBound {
    let t0 = trace.iter().map(|t| t.submit_s).min().unwrap_or(0);
    let cap = gpus.max(1) as f64;
    let useful: f64 = trace
        .iter()
        .map(|t| f64::from(t.gpus) * t.duration_s as f64)
        .sum();
    let mut best = (0u64, None::<MakespanLimit>);
    let mut consider = |end: u64, limit: MakespanLimit| {
        if best.1.is_none() || end > best.0 {
            best = (end, Some(limit));
        }
    };
    for t in trace {
        consider(
            (t.submit_s - t0).saturating_add(t.duration_s),
            MakespanLimit::LastJob {
                job_id: t.job_id.clone(),
                submit_s: t.submit_s - t0,
                duration_s: t.duration_s,
            },
        );
    }
    // Suffixes by submit time, latest first: every job of a suffix starts at or after its
    // first submit.
    let mut order: Vec<&TraceJob> = trace.iter().collect();
    order.sort_by_key(|t| std::cmp::Reverse(t.submit_s));
    let (mut work, mut chain, mut wide) = (0.0f64, 0u64, 0usize);
    for (i, t) in order.iter().enumerate() {
        work += f64::from(t.gpus) * t.duration_s as f64;
        if u64::from(t.gpus) * 2 > gpus {
            chain = chain.saturating_add(t.duration_s);
            wide += 1;
        }
        if order.get(i + 1).is_some_and(|n| n.submit_s == t.submit_s) {
            continue;
        }
        let from = t.submit_s - t0;
        consider(
            from.saturating_add((work / cap).ceil() as u64),
            MakespanLimit::Work {
                from_s: from,
                gpu_hours: work / 3600.0,
            },
        );
        if wide > 1 {
            consider(
                from.saturating_add(chain),
                MakespanLimit::WideChain {
                    from_s: from,
                    jobs: wide,
                    chain_s: chain,
                },
            );
        }
    }
    let (makespan_s, limit) = best;
    MakespanBound {
        makespan_s,
        utilization: useful / (cap * makespan_s.max(1) as f64),
        limit: limit.unwrap_or(MakespanLimit::Work {
            from_s: 0,
            gpu_hours: 0.0,
        }),
    }
}

impl MakespanBound {
    /// One sentence for the `ferry sim` table: the ceiling and what sets it.
    pub fn describe(&self) -> String {
        let why = match &self.limit {
            MakespanLimit::LastJob {
                job_id,
                submit_s,
                duration_s,
            } => format!("job `{job_id}`, submitted at {submit_s} s, runs {duration_s} s"),
            MakespanLimit::Work { from_s, gpu_hours } => format!(
                "the {gpu_hours:.0} GPU-hours submitted from {from_s} s on need every GPU that long"
            ),
            MakespanLimit::WideChain {
                from_s,
                jobs,
                chain_s,
            } => format!(
                "the {jobs} jobs wider than half the cluster submitted from {from_s} s on run one \
                 at a time, {chain_s} s in all"
            ),
        };
        format!(
            "no policy can end before {} s, so utilization is at most {:.3}: {why}",
            self.makespan_s, self.utilization
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(id: &str, submit: u64, dur: u64, gpus: u32) -> TraceJob {
        TraceJob {
            job_id: id.into(),
            submit_s: submit,
            duration_s: dur,
            gpus,
            nodes: gpus.div_ceil(8),
            team: "a".into(),
            status: String::new(),
            time_limit_s: None,
            topology: None,
            split_slowdown_pct: None,
            priority: None,
        }
    }

    #[test]
    fn a_late_long_job_sets_the_bound() {
        let b = makespan_bound(&[job("a", 100, 10, 1), job("b", 150, 1000, 1)], 8);
        assert_eq!(b.makespan_s, 1050);
        assert!(matches!(b.limit, MakespanLimit::LastJob { ref job_id, .. } if job_id == "b"));
        assert!((b.utilization - 1010.0 / (8.0 * 1050.0)).abs() < 1e-12);
    }

    #[test]
    fn work_from_a_moment_on_sets_the_bound() {
        // 4 jobs of 8 GPUs x 100 s at 50 s on an 8-GPU cluster: 400 s of whole-cluster work.
        let mut t = vec![job("early", 0, 10, 1)];
        t.extend((0..4).map(|i| job(&format!("w{i}"), 50, 100, 8)));
        let b = makespan_bound(&t, 8);
        assert_eq!(b.makespan_s, 450);
        assert!(matches!(b.limit, MakespanLimit::Work { from_s: 50, .. }));
    }

    #[test]
    fn wide_jobs_run_one_at_a_time() {
        // Two 5-GPU jobs of 100 s on 8 GPUs: 80 GPU-s of spare room, yet 200 s in a row.
        let b = makespan_bound(&[job("x", 0, 100, 5), job("y", 0, 100, 5)], 8);
        assert_eq!(b.makespan_s, 200);
        assert!(matches!(
            b.limit,
            MakespanLimit::WideChain {
                jobs: 2,
                chain_s: 200,
                ..
            }
        ));
        assert!(b.describe().contains("at most 0.625"), "{}", b.describe());
        // Half the cluster exactly is not wide: two 4-GPU jobs fit side by side.
        let b = makespan_bound(&[job("x", 0, 100, 4), job("y", 0, 100, 4)], 8);
        assert_eq!(b.makespan_s, 100);
    }
}
