//! Integration tests of the local runtime with real processes, built as one binary.
//! Each test gets its own temp directory and finishes in a few seconds.

mod adopt;
mod gang;
mod logs;
mod terminate;
mod validate;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use ferry_runtime::{GangRecord, GangStatus, LaunchRequest, Runtime};

/// Upper bound for any gang in these tests to end; a hang guard, not a performance check.
pub const HANG_GUARD: Duration = Duration::from_secs(60);

/// A CPU-only request for `nodes × procs` ranks running `argv`, logging under `dir`.
pub fn request(dir: &Path, nodes: u32, procs: u32, argv: &[&str]) -> LaunchRequest {
    LaunchRequest {
        job: "job-1".to_string(),
        attempt: 0,
        nodes,
        procs_per_node: procs,
        argv: argv.iter().map(|s| s.to_string()).collect(),
        env: BTreeMap::new(),
        working_dir: None,
        gpus_per_rank: Vec::new(),
        run_dir: dir.to_path_buf(),
    }
}

/// A request whose ranks run the shell snippet `script`.
pub fn sh(dir: &Path, nodes: u32, procs: u32, script: &str) -> LaunchRequest {
    request(dir, nodes, procs, &["/bin/sh", "-c", script])
}

/// Waits (polling) until the gang ends; fails the test if it never does.
pub async fn wait_end(runtime: &dyn Runtime, gang: &GangRecord) -> GangStatus {
    tokio::time::timeout(
        HANG_GUARD,
        ferry_runtime::wait(runtime, gang, Duration::from_millis(20)),
    )
    .await
    .expect("gang did not end within the hang guard")
    .expect("observe failed")
}

/// Waits until `rank`'s log contains `needle` (the rank reached a known point).
pub async fn wait_for_log(gang: &GangRecord, rank: u32, needle: &str) {
    let path = gang.log_path(rank).unwrap().to_path_buf();
    let found = tokio::time::timeout(HANG_GUARD, async {
        loop {
            if std::fs::read_to_string(&path)
                .unwrap_or_default()
                .contains(needle)
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(
        found.is_ok(),
        "rank {rank} never logged {needle:?}: {:?}",
        std::fs::read_to_string(&path)
    );
}

/// Whether `/proc` still shows the rank's wrapper as a live (non-zombie) process.
pub fn alive(gang: &GangRecord, rank: u32) -> bool {
    let r = gang.rank(rank).unwrap();
    ferry_runtime::local::procfs::liveness(r.pid, r.start_time)
        == ferry_runtime::local::procfs::Liveness::Alive
}

/// The state letter `/proc` shows for `pid`, if it exists.
pub fn proc_state(pid: u32) -> Option<char> {
    ferry_runtime::local::procfs::read_stat(pid).map(|s| s.state)
}

/// Waits until every rank has ended (a gang is `Failed` as soon as one rank fails, while
/// the others may still be finishing) and returns their states.
pub async fn wait_all_ranks(
    runtime: &dyn Runtime,
    gang: &GangRecord,
) -> Vec<ferry_runtime::RankState> {
    tokio::time::timeout(HANG_GUARD, async {
        loop {
            let ranks = runtime.observe_ranks(gang).await.expect("observe failed");
            if ranks.iter().all(|r| r.is_finished()) {
                return ranks.into_iter().map(|r| r.state).collect();
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("ranks did not all end within the hang guard")
}
