//! What admitting gangs by quota alone costs: `cargo run --release -p ferry-sched --example
//! admission [TRACE.csv ...]`.
//!
//! Replays generated traces (job-size mixes Small / Mixed / Gangs, both shapes, seeds 1–6,
//! loads 1.0 / 1.4, 128 GPUs) and any trace files given, each on its default contended
//! cluster with racks of four 8-GPU nodes, under three policies:
//!
//! * `ferry`: admission places the gang whole, topology first;
//! * `kueue-strict`: Kueue's StrictFIFO with node-aware admission (as with topology-aware
//!   scheduling): the same placement as Ferry's;
//! * `kueue-pods`: the same queues, admitted by quota alone, the pods then placed one by one by
//!   a spreading kube-scheduler, with `waitForPodsReady` (5 min, then requeue with backoff).
//!
//! Prints, per group: the geometric mean of `kueue-pods`' mean JCT over `kueue-strict`'s and of
//! Ferry's over `kueue-pods`', the mean utilization difference, what quota-only admission
//! held idle (admissions not placeable, GPU-hours admitted to workloads not running, pods-ready
//! timeouts), and where gangs landed (starts on the fewest nodes, starts one rack could
//! have held, and of those the ones split across racks). The two peers differ only in when
//! pods are placed, so their ratio is the price of placing after admitting. Last, what
//! requiring one rack (`topology: rack`) for every multi-node gang that fits one costs Ferry
//! against preferring it.
mod common;

use std::path::Path;

use common::RACK_NODES;
use ferry_sched::{
    Policy, Shape, SimReport, SizeMix, TraceJob, default_cluster, default_queues, read_trace,
    requiring_one_rack, simulate, with_racks,
};

const POLICIES: [Policy; 3] = [Policy::Ferry, Policy::KueueStrict, Policy::KueuePods];

/// One group's sums.
#[derive(Default)]
struct Group {
    traces: u32,
    /// Σ ln(kueue-pods / kueue-strict mean JCT), Σ ln(ferry / kueue-pods).
    ln_pods_strict: f64,
    ln_ferry_pods: f64,
    /// Σ (kueue-pods − kueue-strict utilization).
    du: f64,
    /// Traces where kueue-pods' mean JCT is above kueue-strict's.
    pods_slower: u32,
    unplaced: u64,
    idle_gpu_h: f64,
    timeouts: u64,
    /// Per policy: gang starts, on the fewest nodes, one rack could hold, split across racks.
    gangs: [(u64, u64, u64, u64); 3],
    /// Σ ln(Ferry requiring one rack / Ferry preferring one, mean JCT), Σ utilization
    /// difference, and gangs it split.
    ln_required: f64,
    du_required: f64,
    split_required: u64,
}

impl Group {
    fn add(&mut self, r: &[SimReport], required: &SimReport) {
        self.ln_required += (required.mean_jct_s / r[0].mean_jct_s).ln();
        self.du_required += required.utilization - r[0].utilization;
        self.split_required += required.placement.split_across_racks.unwrap_or(0);
        let (ferry, strict, pods) = (&r[0], &r[1], &r[2]);
        self.traces += 1;
        self.ln_pods_strict += (pods.mean_jct_s / strict.mean_jct_s).ln();
        self.ln_ferry_pods += (ferry.mean_jct_s / pods.mean_jct_s).ln();
        self.du += pods.utilization - strict.utilization;
        self.pods_slower += u32::from(pods.mean_jct_s > strict.mean_jct_s);
        self.unplaced += pods.placement.admitted_unplaced;
        self.idle_gpu_h += pods.placement.admitted_idle_gpu_hours;
        self.timeouts += pods.placement.pods_ready_timeouts;
        for (g, x) in self.gangs.iter_mut().zip(r) {
            g.0 += x.placement.gang_starts;
            g.1 += x.placement.on_fewest_nodes;
            g.2 += x.placement.one_rack_fits.unwrap_or(0);
            g.3 += x.placement.split_across_racks.unwrap_or(0);
        }
    }

    fn print(&self, name: &str) {
        let n = f64::from(self.traces.max(1));
        let gangs: Vec<String> = POLICIES
            .iter()
            .zip(&self.gangs)
            .map(|(p, g)| format!("{} {}/{}/{}/{}", p.name(), g.0, g.1, g.2, g.3))
            .collect();
        println!(
            "{name:<22} {:>3} traces | pods/strict mean JCT {:.3} (slower on {}), util {:+.2} pts | \
             ferry/pods {:.3} | admitted unplaceable {}, {:.0} GPU-h admitted idle, {} timeouts | \
             gang starts/fewest nodes/one rack fits/split: {} | one rack required: mean JCT \
             {:.3}, util {:+.2} pts, split {}",
            self.traces,
            (self.ln_pods_strict / n).exp(),
            self.pods_slower,
            100.0 * self.du / n,
            (self.ln_ferry_pods / n).exp(),
            self.unplaced,
            self.idle_gpu_h,
            self.timeouts,
            gangs.join(", "),
            (self.ln_required / n).exp(),
            100.0 * self.du_required / n,
            self.split_required,
        );
    }
}

/// The three policies on `trace`, then Ferry with gangs required to stay in one rack.
fn replay(trace: &[TraceJob]) -> (Vec<SimReport>, SimReport) {
    let cluster = with_racks(default_cluster(trace), RACK_NODES);
    let queues = default_queues(trace, &cluster);
    let r = POLICIES
        .iter()
        .map(|&p| simulate(trace, &cluster, &queues, p).expect("simulates"))
        .collect();
    let required = simulate(
        &requiring_one_rack(trace, RACK_NODES),
        &cluster,
        &queues,
        Policy::Ferry,
    )
    .expect("simulates");
    (r, required)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut all = Group::default();
    let traces = common::generated();
    for mix in [SizeMix::Small, SizeMix::Mixed, SizeMix::Gangs] {
        for shape in [Shape::Uniform, Shape::HeavyTailed] {
            let mut group = Group::default();
            for (_, _, trace) in traces.iter().filter(|t| (t.0, t.1) == (mix, shape)) {
                let (r, required) = replay(trace);
                group.add(&r, &required);
                all.add(&r, &required);
            }
            group.print(&format!("{mix:?} {shape:?}"));
        }
    }
    all.print("all generated");
    for path in std::env::args().skip(1) {
        let trace = read_trace(Path::new(&path))?;
        let mut one = Group::default();
        let (r, required) = replay(&trace);
        one.add(&r, &required);
        let name = Path::new(&path)
            .file_name()
            .map_or(path.clone(), |f| f.to_string_lossy().into_owned());
        one.print(&name);
    }
    Ok(())
}
