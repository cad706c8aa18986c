//! Synthetic traces (seeded, reproducible) for the held-out comparisons and tests.

use serde::{Deserialize, Serialize};

use super::{DEFAULT_GPUS_PER_NODE, TraceJob};

/// Job-size mix of a generated trace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SizeMix {
    /// Mostly 1–8 GPU jobs.
    Small,
    /// Helios-like: many small jobs and a tail of multi-node gangs up to the whole cluster.
    Mixed,
    /// Mostly multi-node gangs (8–64 GPUs, some whole-cluster).
    Gangs,
}

/// How run times, team volumes and arrivals of a generated trace are drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Shape {
    /// Log-uniform run times (1 minute to 1 day), team volumes within 7× of each other, one job
    /// per arrival: the shape every policy decision was tuned on.
    #[default]
    Uniform,
    /// What published cluster traces (Helios, Philly) report instead: log-normal run times
    /// (median ten minutes, longer for wider jobs, a tail up to a week), Zipf-like team volumes
    /// (a few teams submit most of the work), and sweeps (a fifth of arrivals are 2–20 like
    /// jobs of one team submitted at once). Added after the policy was tuned, to measure it on
    /// traces of another shape.
    HeavyTailed,
}

/// What `generated_trace` produces: a seeded synthetic trace for testing policies on traces
/// that were never tuned for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GenSpec {
    /// Seed of the generator (same seed, same trace).
    pub seed: u64,
    /// Number of jobs.
    pub jobs: usize,
    /// Number of teams (each with its own volume).
    pub teams: usize,
    /// GPUs of the cluster the load is computed against (8 per node); no job is larger.
    pub gpus: u32,
    /// Offered load: GPU-seconds over the submit span, as a fraction of `gpus`.
    pub load: f64,
    /// Job-size mix.
    pub mix: SizeMix,
    /// Run times, team volumes and arrivals.
    #[serde(default)]
    pub shape: Shape,
}

struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
    fn pick(&mut self, weights: &[f64]) -> usize {
        let total: f64 = weights.iter().sum();
        let mut x = self.unit() * total;
        for (i, w) in weights.iter().enumerate() {
            if x < *w {
                return i;
            }
            x -= w;
        }
        weights.len() - 1
    }
    /// A standard normal draw (Box–Muller).
    fn normal(&mut self) -> f64 {
        let u = 1.0 - self.unit();
        (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * self.unit()).cos()
    }
}

/// A synthetic trace: teams with unequal volumes and their own size mixes, run times and volumes
/// as `spec.shape` says, and bursty arrivals (a daily cycle) scaled to the requested offered load.
pub fn generated_trace(spec: &GenSpec) -> Vec<TraceJob> {
    let mut rng = SplitMix(spec.seed.wrapping_mul(0x2545_F491_4F6C_DD1D) ^ 0x5EED);
    let cap = spec.gpus.max(1);
    let sizes: &[(u32, f64)] = match spec.mix {
        SizeMix::Small => &[(1, 0.35), (2, 0.25), (4, 0.25), (8, 0.15)],
        SizeMix::Mixed => &[
            (1, 0.2),
            (2, 0.15),
            (4, 0.15),
            (8, 0.25),
            (16, 0.1),
            (32, 0.07),
            (64, 0.05),
            (u32::MAX, 0.03),
        ],
        SizeMix::Gangs => &[(8, 0.3), (16, 0.3), (32, 0.2), (64, 0.15), (u32::MAX, 0.05)],
    };
    let teams = spec.teams.max(1);
    let heavy = spec.shape == Shape::HeavyTailed;
    let volume: Vec<f64> = (0..teams)
        .map(|i| {
            let spread = 0.5 + 3.0 * rng.unit();
            if heavy {
                spread / (i as f64 + 1.0).powf(1.1)
            } else {
                spread
            }
        })
        .collect();
    // Each team leans towards part of the mix.
    let lean: Vec<Vec<f64>> = (0..teams)
        .map(|_| sizes.iter().map(|(_, w)| w * (0.3 + rng.unit())).collect())
        .collect();
    // (team, GPUs, run time, submitted with the job before it)
    let mut jobs: Vec<(usize, u32, u64, bool)> = Vec::with_capacity(spec.jobs);
    let (lo, hi) = (60f64.ln(), 86_400f64.ln());
    while jobs.len() < spec.jobs {
        let team = rng.pick(&volume);
        let gpus = sizes[rng.pick(&lean[team])].0.min(cap);
        if !heavy {
            let dur = (lo + (hi - lo) * rng.unit()).exp().round() as u64;
            jobs.push((team, gpus, dur.max(1), false));
            continue;
        }
        let median = 600.0 * (1.0 + f64::from(gpus).log2());
        let dur = (median.ln() + 2.0 * rng.normal())
            .exp()
            .clamp(10.0, 7.0 * 86_400.0);
        let sweep = if rng.unit() < 0.2 {
            2 + (rng.unit() * 19.0) as usize
        } else {
            1
        };
        for k in 0..sweep.min(spec.jobs - jobs.len()) {
            let d = (dur * (0.7 + 0.6 * rng.unit())).round() as u64;
            jobs.push((team, gpus, d.max(1), k > 0));
        }
    }
    let gpu_s: f64 = jobs
        .iter()
        .map(|(_, g, d, _)| f64::from(*g) * *d as f64)
        .sum();
    let span = gpu_s / (spec.load.max(0.01) * f64::from(cap));
    let arrivals = jobs.iter().filter(|j| !j.3).count();
    let mean_gap = span / arrivals.max(1) as f64;
    let (mut t, mut submit) = (0f64, 0u64);
    jobs.into_iter()
        .enumerate()
        .map(|(i, (team, gpus, dur, follows))| {
            if !follows {
                submit = t.round() as u64;
                // Busier in the day than at night: the gap shrinks and grows over a 24 h cycle.
                let phase = (t / 86_400.0 * std::f64::consts::TAU).sin();
                t += -mean_gap * (1.0 - rng.unit()).ln() * (1.0 - 0.6 * phase);
            }
            TraceJob {
                job_id: format!("g{}-{i}", spec.seed),
                submit_s: submit,
                duration_s: dur,
                gpus,
                nodes: gpus.div_ceil(DEFAULT_GPUS_PER_NODE),
                team: format!("team-{team}"),
                status: "COMPLETED".into(),
                time_limit_s: None,
                topology: None,
                split_slowdown_pct: None,
                priority: None,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(shape: Shape) -> GenSpec {
        GenSpec {
            seed: 7,
            jobs: 3000,
            teams: 12,
            gpus: 256,
            load: 1.2,
            mix: SizeMix::Mixed,
            shape,
        }
    }

    /// The heavy-tailed shape has what it promises: a long tail of run times, sweeps of like
    /// jobs submitted together, a few teams submitting most jobs, and the offered load asked for.
    #[test]
    fn a_heavy_tailed_trace_has_long_runs_sweeps_and_dominant_teams() {
        let s = spec(Shape::HeavyTailed);
        let t = generated_trace(&s);
        assert_eq!(t, generated_trace(&s), "same seed, same trace");
        assert_eq!(t.len(), s.jobs);
        let mut runs: Vec<u64> = t.iter().map(|j| j.duration_s).collect();
        runs.sort_unstable();
        let (median, p99) = (runs[runs.len() / 2], runs[runs.len() * 99 / 100]);
        assert!(p99 > 50 * median, "median {median} s, p99 {p99} s");
        assert!(runs[runs.len() - 1] <= (7.0 * 86_400.0 * 1.3) as u64);
        // Sweeps: consecutive jobs of one team and size, submitted in the same second.
        let together = t
            .windows(2)
            .filter(|w| {
                w[0].submit_s == w[1].submit_s && w[0].team == w[1].team && w[0].gpus == w[1].gpus
            })
            .count();
        assert!(
            together > s.jobs / 5,
            "{together} jobs arrived with a like job"
        );
        let mut per_team = std::collections::HashMap::new();
        for j in &t {
            *per_team.entry(&j.team).or_insert(0usize) += 1;
        }
        let mut counts: Vec<usize> = per_team.into_values().collect();
        counts.sort_unstable();
        let (top, mid) = (counts[counts.len() - 1], counts[counts.len() / 2]);
        assert!(top > 3 * mid, "largest team {top} jobs, median team {mid}");
        // Offered load as the uniform shape gives it (the same arrival process: its daily
        // cycle makes the measured span shorter than the nominal one for both).
        let offered = |t: &[TraceJob]| {
            let gpu_s: f64 = t
                .iter()
                .map(|j| f64::from(j.gpus) * j.duration_s as f64)
                .sum();
            gpu_s / (t[t.len() - 1].submit_s - t[0].submit_s) as f64 / f64::from(s.gpus)
        };
        let (heavy, uniform) = (
            offered(&t),
            offered(&generated_trace(&spec(Shape::Uniform))),
        );
        assert!((heavy / uniform - 1.0).abs() < 0.15, "{heavy} vs {uniform}");
    }

    /// The uniform shape (every tuned set) has none of that: one job per arrival, run times
    /// within a day.
    #[test]
    fn a_uniform_trace_has_one_job_per_arrival_and_runs_within_a_day() {
        let t = generated_trace(&spec(Shape::Uniform));
        assert!(t.iter().all(|j| (60..=86_400).contains(&j.duration_s)));
        let together = t
            .windows(2)
            .filter(|w| w[0].submit_s == w[1].submit_s)
            .count();
        assert!(together < t.len() / 50, "{together}");
    }
}
