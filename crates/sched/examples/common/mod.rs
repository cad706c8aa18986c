//! What the policy examples share: the generated traces `admission`, `racks` and `classes`
//! replay (the placement ones on clusters with racks of `RACK_NODES` nodes), and Ferry's
//! switches overridden from the environment (`classes`, `variants`).
#![allow(dead_code, reason = "each example uses a part of it")]

use ferry_sched::{GenSpec, Options, Shape, SizeMix, TraceJob, generated_trace};

/// Nodes per rack in the replayed clusters.
pub const RACK_NODES: usize = 4;

/// The 72 generated traces: job-size mixes Small / Mixed / Gangs, both shapes, seeds 1–6 (2–5
/// teams), loads 1.0 / 1.4, 600 jobs for 128 GPUs; each with its mix and shape.
pub fn generated() -> Vec<(SizeMix, Shape, Vec<TraceJob>)> {
    let mut traces = Vec::new();
    for mix in [SizeMix::Small, SizeMix::Mixed, SizeMix::Gangs] {
        for shape in [Shape::Uniform, Shape::HeavyTailed] {
            for seed in 1..=6u64 {
                for load in [1.0, 1.4] {
                    let spec = GenSpec {
                        seed,
                        jobs: 600,
                        teams: 2 + (seed as usize % 4),
                        gpus: 128,
                        load,
                        mix,
                        shape,
                    };
                    traces.push((mix, shape, generated_trace(&spec)));
                }
            }
        }
    }
    traces
}

/// `base` with the fields of the JSON object in environment variable `var` replaced, when set
/// (`FERRY_OPTS='{"priorityPatienceS": 900}'`): a policy experiment without a rebuild.
pub fn overridden(base: Options, var: &str) -> Result<Options, Box<dyn std::error::Error>> {
    let mut opts = serde_json::to_value(base)?;
    if let Ok(o) = std::env::var(var) {
        let over: serde_json::Value = serde_json::from_str(&o)?;
        for (k, v) in over
            .as_object()
            .ok_or(format!("{var} must be a JSON object"))?
        {
            opts[k] = v.clone();
        }
    }
    Ok(serde_json::from_value(opts)?)
}
