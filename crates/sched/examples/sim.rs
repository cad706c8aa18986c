//! Replays a trace under every policy: `cargo run --release -p ferry-sched --example sim -- TRACE.csv [OUT.svg]`.
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let path = args.get(1).ok_or("usage: sim TRACE.csv [OUT.svg]")?;
    let trace = ferry_sched::read_trace(std::path::Path::new(path))?;
    let cluster = ferry_sched::default_cluster(&trace);
    let queues = ferry_sched::default_queues(&trace, &cluster);
    println!(
        "{}",
        ferry_sched::describe_setup(&trace, &cluster, &queues, Default::default())
    );
    let mut reports = Vec::new();
    for p in ferry_sched::Policy::ALL {
        let t = std::time::Instant::now();
        reports.push(ferry_sched::simulate(&trace, &cluster, &queues, p)?);
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
    if let Some(out) = args.get(2) {
        std::fs::write(out, ferry_sched::render_svg(&reports, cluster.total_gpus()))?;
    }
    Ok(())
}
