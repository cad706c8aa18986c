//! `ferry`: the one binary. Parses the command line, runs the command, and turns any
//! error into a message on stderr (`report`) and a non-zero exit code.
#![forbid(unsafe_code)]

mod args;
mod client;
mod commands;
mod output;
mod report;
mod table;

use std::process::ExitCode;

use clap::Parser;

/// mimalloc as the allocator: the gateway's hot path (many small per-request allocations on
/// several threads) costs fewer cycles with it, as `bench/gateway` measured.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = args::Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(commands::run(cli)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {}", report::report(&e));
            ExitCode::FAILURE
        }
    }
}
