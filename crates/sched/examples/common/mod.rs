//! What the examples replaying generated traces (`admission`, `racks`, `classes`) share: the
//! traces, and for the placement ones clusters with racks of `RACK_NODES` nodes.

use ferry_sched::{GenSpec, Shape, SizeMix, TraceJob, generated_trace};

/// Nodes per rack in the replayed clusters.
#[allow(dead_code, reason = "`classes` replays without racks")]
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
