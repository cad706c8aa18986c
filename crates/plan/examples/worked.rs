//! Prints the three worked examples of docs/planner.md (7B on 1×, 14B on 8×, 72B on 16× H100-80GB)
//! with their rendered launch commands: `cargo run -p ferry-plan --example worked`.

use ferry_plan::{
    GpuKind, PlanRequest, RenderOptions, deepspeed_config, default_launcher, plan, render_train,
    shape_of,
};

fn main() {
    for (id, nodes, gpus, seq, global) in [
        ("Qwen/Qwen2.5-7B-Instruct", 1, 1, 4096, 64),
        ("Qwen/Qwen2.5-14B-Instruct", 1, 8, 4096, 128),
        ("Qwen/Qwen2.5-72B-Instruct", 2, 8, 4096, 128),
    ] {
        let mut req = PlanRequest::new(shape_of(id).unwrap(), id, GpuKind::H100, gpus, seq);
        req.nodes = nodes;
        req.global_batch = global;
        let report = plan(&req).unwrap();
        println!("{report}");
        let launcher = default_launcher(&report);
        println!(
            "{launcher:?}:\n{}",
            render_train(&report, launcher, &RenderOptions::default()).unwrap()
        );
        if launcher == ferry_plan::Launcher::Deepspeed
            && let Ok(ds) = deepspeed_config(&report)
        {
            println!("ds_config.json:\n{ds}");
        }
        println!("------------------------------------------------------------");
    }
}
