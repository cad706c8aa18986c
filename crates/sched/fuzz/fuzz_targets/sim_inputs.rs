//! Fuzz target: `ferry sim` reads a trace CSV, a cluster YAML and a queues YAML that users
//! write by hand or export from other systems, so any bytes must be replayed or refused with
//! a fix, never panic or hang. `../sim_input.rs` says how the bytes are read.
#![no_main]

#[path = "../sim_input.rs"]
mod sim_input;

use ferry_sched::check_replayable;
use sim_input::{SimInput, check_report};

/// The most nodes a replay runs on here.
const MAX_REPLAYED_NODES: usize = 2048;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let Ok(input) = SimInput::decode(data, "fuzz.csv") else {
        return;
    };
    // Replays on large clusters take seconds each (the trace can size the default cluster to
    // over 100,000 nodes) and would starve the search; their inputs are still checked.
    if input.cluster.nodes.len() > MAX_REPLAYED_NODES {
        if let Err(e) = check_replayable(&input.trace, input.site(), "fuzz.csv") {
            assert!(e.to_string().contains("fix"), "{e}");
        }
        return;
    }
    match input.replay() {
        Ok(report) => check_report(&input.trace, &report).unwrap(),
        Err(e) => assert!(e.to_string().contains("fix"), "{:?}: {e}", input.policy),
    }
});
