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
}

/// A synthetic trace: teams with unequal volumes and their own size mixes, log-uniform run times
/// (1 minute to 1 day), and bursty arrivals (a daily cycle) scaled to the requested offered load.
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
    let volume: Vec<f64> = (0..teams).map(|_| 0.5 + 3.0 * rng.unit()).collect();
    // Each team leans towards part of the mix.
    let lean: Vec<Vec<f64>> = (0..teams)
        .map(|_| sizes.iter().map(|(_, w)| w * (0.3 + rng.unit())).collect())
        .collect();
    let mut jobs: Vec<(usize, u32, u64)> = Vec::with_capacity(spec.jobs);
    let (lo, hi) = (60f64.ln(), 86_400f64.ln());
    for _ in 0..spec.jobs {
        let team = rng.pick(&volume);
        let gpus = sizes[rng.pick(&lean[team])].0.min(cap);
        let dur = (lo + (hi - lo) * rng.unit()).exp().round() as u64;
        jobs.push((team, gpus, dur.max(1)));
    }
    let gpu_s: f64 = jobs.iter().map(|(_, g, d)| f64::from(*g) * *d as f64).sum();
    let span = gpu_s / (spec.load.max(0.01) * f64::from(cap));
    let mean_gap = span / spec.jobs.max(1) as f64;
    let mut t = 0f64;
    jobs.into_iter()
        .enumerate()
        .map(|(i, (team, gpus, dur))| {
            let submit = t.round() as u64;
            // Busier in the day than at night: the gap shrinks and grows over a 24 h cycle.
            let phase = (t / 86_400.0 * std::f64::consts::TAU).sin();
            t += -mean_gap * (1.0 - rng.unit()).ln() * (1.0 - 0.6 * phase);
            TraceJob {
                job_id: format!("g{}-{i}", spec.seed),
                submit_s: submit,
                duration_s: dur,
                gpus,
                nodes: gpus.div_ceil(DEFAULT_GPUS_PER_NODE),
                team: format!("team-{team}"),
                status: "COMPLETED".into(),
                time_limit_s: None,
            }
        })
        .collect()
}
