//! Replays a trace under every policy: `cargo run --release -p ferry-sched --example sim --
//! TRACE.csv [OUT.svg] [--forecast]` (`--forecast`: also measure how well every waiting job's
//! forecast start held).
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let forecast = args.iter().any(|a| a == "--forecast");
    args.retain(|a| a != "--forecast");
    let path = args
        .first()
        .ok_or("usage: sim TRACE.csv [OUT.svg] [--forecast]")?;
    let trace = ferry_sched::read_trace(std::path::Path::new(path))?;
    let cluster = ferry_sched::default_cluster(&trace);
    let queues = ferry_sched::default_queues(&trace, &cluster);
    println!(
        "{}",
        ferry_sched::describe_setup(&trace, &cluster, &queues, Default::default())
    );
    let probes = ferry_sched::Probes { forecast };
    let mut reports = Vec::new();
    for p in ferry_sched::Policy::ALL {
        let t = std::time::Instant::now();
        reports.push(ferry_sched::simulate_probing(
            &trace,
            ferry_sched::Site {
                cluster: &cluster,
                queues: &queues,
                cohorts: &[],
                classes: &ferry_sched::PriorityClass::standard(),
            },
            p,
            p.options(),
            ferry_sched::Knowledge::exact(),
            probes,
        )?);
        eprintln!("{} simulated in {:?}", p.name(), t.elapsed());
    }
    print!("{}", ferry_sched::render_table(&reports));
    if std::env::var_os("SIM_JSON").is_some() {
        for r in &reports {
            let mut r = r.clone();
            r.timeline.clear();
            println!("{}", serde_json::to_string(&r)?);
        }
    }
    if let Some(out) = args.get(1) {
        std::fs::write(out, ferry_sched::render_svg(&reports, cluster.total_gpus()))?;
    }
    Ok(())
}
