//! Prints what `ferry_runtime::discover()` finds on this machine, as JSON: the proof that
//! NVML discovery sees real GPUs (run on a GPU host) or degrades to zero (elsewhere).

fn main() {
    let inventory = ferry_runtime::gpu::discover();
    match serde_json::to_string_pretty(&inventory) {
        Ok(json) => println!("{json}"),
        Err(e) => eprintln!("cannot print the inventory: {e}"),
    }
}
