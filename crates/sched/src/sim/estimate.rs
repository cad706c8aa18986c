//! What the simulated scheduler is told about run times. A trace gives each job's real run
//! time; by default every policy is told it exactly, which flatters every policy that sorts or
//! backfills by duration. The other models ask how much of a result survives the estimates a
//! real cluster has: none at all, or users' time limits (rounded up, often padded), optionally
//! corrected once a job has run a while (Ferry measures a running job's step pace).

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use super::TraceJob;

/// Time limits users pick, in seconds: 15 min, 30 min, 1, 2, 4, 6, 8, 12 h, 1, 2, 3, 5, 7,
/// 14 and 30 days. A limit past the last is whole days.
const LIMIT_LADDER_S: [u64; 15] = [
    900, 1800, 3600, 7200, 14_400, 21_600, 28_800, 43_200, 86_400, 172_800, 259_200, 432_000,
    604_800, 1_209_600, 2_592_000,
];

/// Largest padding factor `limits:F` accepts.
const MAX_PADDING: f64 = 100.0;

/// The run time every policy is told at submit, before a job has run.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "kind")]
pub enum Estimates {
    /// The trace's own duration (what a perfect predictor would say).
    #[default]
    Exact,
    /// Nothing: jobs are ordered by age and backfill has no end times to go by.
    None,
    /// A user's time limit: the duration times `padding`, rounded up to the next round limit
    /// (15 min, 30 min, 1 h … 30 days). Jobs end when their work is done, before their limit.
    Limits {
        /// How much longer than the run users ask for (1: the next round limit above it).
        padding: f64,
    },
    /// The trace's own `time_limit_s` column (a row without one: unknown). A limit below the
    /// run time is told as given; the job is not killed at it (the trace says it ran on).
    Trace,
}

impl Estimates {
    /// The estimate for `job` (`None`: unknown).
    pub fn for_job(self, job: &TraceJob) -> Option<u64> {
        let duration_s = job.duration_s;
        match self {
            Estimates::Exact => Some(duration_s.max(1)),
            Estimates::None => None,
            Estimates::Trace => job.time_limit_s,
            Estimates::Limits { padding } => {
                let asked = (duration_s.max(1) as f64 * padding).ceil() as u64;
                Some(
                    LIMIT_LADDER_S
                        .iter()
                        .copied()
                        .find(|&l| l >= asked)
                        .unwrap_or_else(|| asked.div_ceil(86_400) * 86_400),
                )
            }
        }
    }
}

impl fmt::Display for Estimates {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Estimates::Exact => f.write_str("exact"),
            Estimates::None => f.write_str("none"),
            Estimates::Trace => f.write_str("trace"),
            Estimates::Limits { padding } if *padding == 1.0 => f.write_str("limits"),
            Estimates::Limits { padding } => write!(f, "limits:{padding}"),
        }
    }
}

impl FromStr for Estimates {
    type Err = String;

    /// `exact`, `none`, `trace`, `limits` or `limits:F` (F from 1 to 100).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let usage =
            "expected `exact`, `none`, `trace`, `limits` or `limits:F` (F ≥ 1, e.g. limits:2)";
        match s.trim() {
            "exact" => Ok(Estimates::Exact),
            "none" => Ok(Estimates::None),
            "trace" => Ok(Estimates::Trace),
            "limits" => Ok(Estimates::Limits { padding: 1.0 }),
            other => {
                let Some(f) = other.strip_prefix("limits:") else {
                    return Err(format!("`{s}`: {usage}"));
                };
                let padding: f64 = f.trim().parse().map_err(|_| {
                    format!("`{s}`: the padding after `limits:` is not a number; {usage}")
                })?;
                if !(1.0..=MAX_PADDING).contains(&padding) {
                    return Err(format!(
                        "`{s}`: the padding must be from 1 to {MAX_PADDING} (a limit below the run \
                         time would have killed the job); {usage}"
                    ));
                }
                Ok(Estimates::Limits { padding })
            }
        }
    }
}

/// Run times in one simulation: what every policy knows of them, and how placement changes
/// them.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub struct Knowledge {
    /// The estimate at submit.
    pub estimates: Estimates,
    /// Once a job has run this long since it (re)started, its true remaining time is known,
    /// as when the engine's step pace is measured (`None`: never corrected).
    pub pace_after_s: Option<u64>,
    /// A gang started across racks although one rack could hold it runs this much longer
    /// (percent), for every policy: its collectives cross the slower links between racks.
    #[serde(default)]
    pub split_slowdown_pct: u32,
    /// Ferry is not told the trace's per-job split slowdowns (`TraceJob::split_slowdown_pct`,
    /// still how those jobs run): what a cluster without them in its specs knows.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub per_job_slowdown_untold: bool,
}

impl Knowledge {
    /// Exact run times from the start (the default, and what `simulate` uses).
    pub fn exact() -> Knowledge {
        Knowledge::default()
    }

    /// When a running job's true remaining time is told (none with exact estimates: it
    /// would change nothing).
    pub(super) fn corrects(self) -> Option<u64> {
        self.pace_after_s
            .filter(|_| self.estimates != Estimates::Exact)
    }
}

impl Knowledge {
    /// What the policies are told, in words (`ferry sim` prints it with the setup).
    pub fn describe(self) -> String {
        let split = match self.split_slowdown_pct {
            0 => String::new(),
            p => format!(
                "; a gang split across racks although one rack could hold it runs {p}% longer"
            ),
        };
        let told = match self.estimates {
            Estimates::Exact => return format!("exact (the trace's durations){split}"),
            Estimates::None => "none (jobs go by age; backfill knows no ends)".into(),
            Estimates::Trace => "the trace's time limits (`time_limit_s`; none where empty)".into(),
            Estimates::Limits { padding } => format!(
                "users' time limits (each run time x {padding}, rounded up to the next of 15 \
                 min, 30 min, 1, 2, 4, 6, 8, 12 h, 1, 2, 3, 5, 7, 14, 30 days)"
            ),
        };
        let pace = self.pace_after_s.map_or(String::new(), |p| {
            format!(", then a running job's true remaining time once it has run {p} s")
        });
        format!("{told}{pace}; jobs still run their trace durations{split}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_time_limit_is_the_next_round_limit_above_the_padded_run() {
        let job = |duration_s, time_limit_s| TraceJob {
            job_id: "j".into(),
            submit_s: 0,
            duration_s,
            gpus: 8,
            nodes: 1,
            team: "t".into(),
            status: String::new(),
            time_limit_s,
            topology: None,
            split_slowdown_pct: None,
            priority: None,
        };
        let told = |e: Estimates, d: u64| e.for_job(&job(d, None));
        let l = Estimates::Limits { padding: 1.0 };
        assert_eq!(told(l, 0), Some(900));
        assert_eq!(told(l, 900), Some(900));
        assert_eq!(told(l, 901), Some(1800));
        assert_eq!(told(l, 5 * 3600), Some(6 * 3600));
        let l2 = Estimates::Limits { padding: 2.0 };
        assert_eq!(told(l2, 5 * 3600), Some(12 * 3600));
        // Past 30 days: whole days.
        assert_eq!(told(l, 31 * 86_400 + 1), Some(32 * 86_400));
        assert_eq!(told(Estimates::Exact, 0), Some(1));
        assert_eq!(told(Estimates::None, 100), None);
        assert_eq!(told(Estimates::Trace, 100), None);
        assert_eq!(Estimates::Trace.for_job(&job(100, Some(7200))), Some(7200));
    }

    #[test]
    fn estimates_parse_and_print_back() {
        for s in ["exact", "none", "trace", "limits", "limits:2.5"] {
            let e: Estimates = s.parse().unwrap();
            assert_eq!(e.to_string(), s);
        }
        assert_eq!(
            "limits:1".parse::<Estimates>(),
            Ok(Estimates::Limits { padding: 1.0 })
        );
        for (bad, says) in [
            ("limit", "expected `exact`"),
            ("limits:x", "not a number"),
            ("limits:0.5", "from 1 to 100"),
            ("limits:NaN", "from 1 to 100"),
            ("limits:1000", "from 1 to 100"),
        ] {
            let e = bad.parse::<Estimates>().unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }
}
