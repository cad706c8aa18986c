//! `terminate`: SIGTERM to every rank's process group first, SIGKILL after the grace period.

use std::time::Instant;

use ferry_runtime::{GangStatus, LocalRuntime, RankState, Runtime};

use super::*;

/// Rank 0 handles SIGTERM by writing a marker file and exiting 0; rank 1 ignores SIGTERM.
const RANKS: &str = r#"
import os, pathlib, signal, sys, time
marker = pathlib.Path(sys.argv[1])
def on_term(signum, frame):
    marker.write_text("got SIGTERM\n")
    os._exit(0)
if os.environ["RANK"] == "0":
    signal.signal(signal.SIGTERM, on_term)
else:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
print("ready", flush=True)
time.sleep(60)
"#;

#[tokio::test]
async fn terminate_sends_sigterm_then_sigkills_ranks_that_ignore_it() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("marker");
    let marker_arg = marker.to_str().unwrap();
    let rt = LocalRuntime::new();
    let gang = rt
        .launch(request(
            dir.path(),
            1,
            2,
            &["python3", "-c", RANKS, marker_arg],
        ))
        .await
        .unwrap();
    wait_for_log(&gang, 0, "ready").await;
    wait_for_log(&gang, 1, "ready").await;
    assert_eq!(rt.observe(&gang).await.unwrap(), GangStatus::Running);

    let grace = Duration::from_secs(2);
    let started = Instant::now();
    rt.terminate(&gang, grace).await.unwrap();
    // Rank 1 ignored SIGTERM, so it could only have died of the SIGKILL sent after the grace.
    assert!(started.elapsed() >= grace);

    assert_eq!(std::fs::read_to_string(&marker).unwrap(), "got SIGTERM\n");
    let ranks = rt.observe_ranks(&gang).await.unwrap();
    assert_eq!(ranks[0].state, RankState::Exited { code: 0 });
    assert_eq!(ranks[1].state, RankState::Signaled { signal: 9 });
    assert!(!alive(&gang, 0) && !alive(&gang, 1));
    // The SIGKILL is on disk too, so a restarted control plane reads the same.
    assert_eq!(
        std::fs::read_to_string(&gang.rank(1).unwrap().exit_path).unwrap(),
        "signal 9\n"
    );
    match rt.observe(&gang).await.unwrap() {
        GangStatus::Failed {
            rank: 1,
            signal: Some(9),
            exit_code: None,
            ..
        } => {}
        other => panic!("expected rank 1 killed by SIGKILL, got {other:?}"),
    }
}

#[tokio::test]
async fn terminate_reaches_the_ranks_children_through_the_process_group() {
    let dir = tempfile::tempdir().unwrap();
    // The rank starts a background child and waits; both are in the rank's process group.
    let script = r#"sleep 30 & echo "child $!"; wait"#;
    let rt = LocalRuntime::new();
    let gang = rt.launch(sh(dir.path(), 1, 1, script)).await.unwrap();
    wait_for_log(&gang, 0, "child ").await;
    let log = std::fs::read_to_string(gang.log_path(0).unwrap()).unwrap();
    let child_pid: u32 = log.trim().strip_prefix("child ").unwrap().parse().unwrap();
    assert!(proc_state(child_pid).is_some());
    rt.terminate(&gang, Duration::from_secs(5)).await.unwrap();
    // `sleep` died of SIGTERM; it was not our child, so its parent shell reaped it.
    let gone = tokio::time::timeout(HANG_GUARD, async {
        while proc_state(child_pid).is_some_and(|s| s != 'Z') {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(gone.is_ok(), "the rank's child survived terminate");
    assert!(rt.observe(&gang).await.unwrap().is_terminal());
}

#[tokio::test]
async fn terminating_a_finished_gang_is_a_no_op() {
    let dir = tempfile::tempdir().unwrap();
    let rt = LocalRuntime::new();
    let gang = rt.launch(sh(dir.path(), 1, 2, "exit 0")).await.unwrap();
    assert_eq!(wait_end(&rt, &gang).await, GangStatus::Succeeded);
    rt.terminate(&gang, Duration::from_secs(5)).await.unwrap();
    assert_eq!(rt.observe(&gang).await.unwrap(), GangStatus::Succeeded);
}
