//! Control-plane crash and restart: a fresh runtime adopts gangs from persisted records,
//! `/proc` and exit records, and never mistakes a recycled pid for a rank.

use ferry_runtime::{GangRecord, GangStatus, LocalRuntime, RankState, Runtime, RuntimeError};
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

use super::*;

/// What the control plane would do: persist the record as JSON and read it back.
fn persisted(gang: &GangRecord) -> GangRecord {
    serde_json::from_str(&serde_json::to_string(gang).unwrap()).unwrap()
}

#[tokio::test]
async fn a_fresh_runtime_adopts_running_gangs_and_sees_them_to_completion() {
    let ok_dir = tempfile::tempdir().unwrap();
    let bad_dir = tempfile::tempdir().unwrap();
    let (ok, bad) = {
        let crashed = LocalRuntime::new();
        let ok = crashed
            .launch(sh(ok_dir.path(), 2, 1, "sleep 2; echo done"))
            .await
            .unwrap();
        let bad = crashed
            .launch(sh(
                bad_dir.path(),
                2,
                1,
                r#"sleep 2; [ "$RANK" = 1 ] && exit 7; exit 0"#,
            ))
            .await
            .unwrap();
        (persisted(&ok), persisted(&bad))
        // `crashed` is dropped here without terminating anything, like a killed control plane.
    };
    let restarted = LocalRuntime::new();
    assert_eq!(restarted.adopt(&ok).await.unwrap(), GangStatus::Running);
    assert_eq!(restarted.adopt(&bad).await.unwrap(), GangStatus::Running);
    assert!(alive(&ok, 0) && alive(&ok, 1));

    assert_eq!(wait_end(&restarted, &ok).await, GangStatus::Succeeded);
    match wait_end(&restarted, &bad).await {
        GangStatus::Failed {
            rank: 1,
            exit_code: Some(7),
            signal: None,
            ..
        } => {}
        other => panic!("expected rank 1 to fail with 7, got {other:?}"),
    }
    assert_eq!(
        wait_all_ranks(&restarted, &bad).await,
        [RankState::Exited { code: 0 }, RankState::Exited { code: 7 }]
    );
    assert_eq!(
        std::fs::read_to_string(ok.log_path(1).unwrap()).unwrap(),
        "done\n"
    );
}

#[tokio::test]
async fn an_adopted_gang_can_be_terminated_and_a_rank_gone_without_record_is_lost() {
    let dir = tempfile::tempdir().unwrap();
    let gang = {
        let crashed = LocalRuntime::new();
        persisted(
            &crashed
                .launch(sh(dir.path(), 1, 2, "echo up; exec sleep 30"))
                .await
                .unwrap(),
        )
    };
    wait_for_log(&gang, 0, "up").await;
    wait_for_log(&gang, 1, "up").await;
    // Rank 1 dies together with its wrapper (as under the OOM killer): no exit record.
    let rank1 = gang.rank(1).unwrap();
    killpg(Pid::from_raw(rank1.pid as i32), Signal::SIGKILL).unwrap();
    let restarted = LocalRuntime::new();
    let lost = tokio::time::timeout(HANG_GUARD, async {
        loop {
            let status = restarted.adopt(&gang).await.unwrap();
            if status != GangStatus::Running {
                return status;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .unwrap();
    assert!(matches!(lost, GangStatus::Lost { rank: 1, .. }), "{lost:?}");
    assert!(alive(&gang, 0));

    // Rank 0 is not our child, yet terminate stops it through /proc-verified signals.
    restarted
        .terminate(&gang, Duration::from_secs(5))
        .await
        .unwrap();
    assert!(!alive(&gang, 0));
    let ranks = restarted.observe_ranks(&gang).await.unwrap();
    assert_eq!(ranks[0].state, RankState::Exited { code: 143 });
    assert_eq!(ranks[1].state, RankState::Lost);
}

#[tokio::test]
async fn a_recycled_pid_is_never_taken_for_the_rank_nor_signalled() {
    let dir = tempfile::tempdir().unwrap();
    let owner = LocalRuntime::new();
    let gang = owner
        .launch(sh(dir.path(), 1, 1, "exec sleep 30"))
        .await
        .unwrap();
    // The same pid with another start time: what a record looks like once the rank is gone
    // and the kernel has given its pid to an unrelated process.
    let mut stale = persisted(&gang);
    stale.ranks[0].start_time += 1;

    let restarted = LocalRuntime::new();
    match restarted.adopt(&stale).await {
        Err(RuntimeError::InvalidRecord { problem, .. }) => {
            assert!(problem.contains("rank-0.pid"), "{problem}")
        }
        other => {
            panic!("adopt must refuse a record that disagrees with the pid file, got {other:?}")
        }
    }
    assert!(matches!(
        restarted.observe(&stale).await.unwrap(),
        GangStatus::Lost { rank: 0, .. }
    ));
    restarted
        .terminate(&stale, Duration::from_millis(100))
        .await
        .unwrap();
    // The "unrelated" process survived.
    assert!(alive(&gang, 0));
    assert_eq!(owner.observe(&gang).await.unwrap(), GangStatus::Running);
    owner
        .terminate(&gang, Duration::from_secs(5))
        .await
        .unwrap();
    assert!(!alive(&gang, 0));
}

#[tokio::test]
async fn records_of_another_backend_or_a_vanished_directory_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let rt = LocalRuntime::new();
    let gang = rt.launch(sh(dir.path(), 1, 1, "exit 0")).await.unwrap();
    assert_eq!(wait_end(&rt, &gang).await, GangStatus::Succeeded);

    let mut foreign = gang.clone();
    foreign.backend = "kube".into();
    let err = rt.observe(&foreign).await.unwrap_err();
    assert!(err.to_string().contains("`kube` runtime"), "{err}");

    let mut moved = gang.clone();
    moved.attempt_dir = dir.path().join("nowhere");
    let err = LocalRuntime::new().adopt(&moved).await.unwrap_err();
    assert!(err.to_string().contains("nowhere"), "{err}");
}

#[tokio::test]
async fn sweep_stops_ranks_of_a_launch_whose_record_was_never_persisted() {
    let dir = tempfile::tempdir().unwrap();
    let gang = {
        let crashed = LocalRuntime::new();
        crashed
            .launch(sh(dir.path(), 1, 2, "echo up; exec sleep 30"))
            .await
            .unwrap()
    };
    // The control plane died before persisting the record, and gang.json was lost too.
    std::fs::remove_file(gang.attempt_dir.join("gang.json")).unwrap();
    assert!(LocalRuntime::recover(&gang.attempt_dir).is_err());
    assert!(alive(&gang, 0) && alive(&gang, 1));
    let swept = LocalRuntime::sweep(&gang.attempt_dir, Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(swept, [0, 1]);
    assert!(!alive(&gang, 0) && !alive(&gang, 1));
    // A second sweep finds nothing left to stop.
    assert!(
        LocalRuntime::sweep(&gang.attempt_dir, Duration::from_secs(5))
            .await
            .unwrap()
            .is_empty()
    );
}

/// Set in the environment of the copy of this test binary that plays the control plane.
const CONTROL_PLANE_ROLE: &str = "FERRY_RUNTIME_TEST_CONTROL_PLANE_DIR";

#[tokio::test]
async fn kill_9_of_the_launching_process_loses_nothing() {
    if let Ok(dir) = std::env::var(CONTROL_PLANE_ROLE) {
        // Control-plane role: launch, persist the record, then wait to be SIGKILLed.
        let dir = std::path::PathBuf::from(dir);
        let rt = LocalRuntime::new();
        let script = r#"echo started; sleep 3; [ "$RANK" = 2 ] && exit 5; exit 0"#;
        let gang = rt.launch(sh(&dir, 1, 3, script)).await.unwrap();
        std::fs::write(
            dir.join("record.tmp"),
            serde_json::to_string(&gang).unwrap(),
        )
        .unwrap();
        std::fs::rename(dir.join("record.tmp"), dir.join("record.json")).unwrap();
        tokio::time::sleep(HANG_GUARD).await;
        panic!("the test should have killed this control plane");
    }
    let dir = tempfile::tempdir().unwrap();
    let mut control_plane = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "adopt::kill_9_of_the_launching_process_loses_nothing",
            "--test-threads=1",
            "-q",
        ])
        .env(CONTROL_PLANE_ROLE, dir.path())
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let record = dir.path().join("record.json");
    let persisted = tokio::time::timeout(HANG_GUARD, async {
        while !record.exists() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(
        persisted.is_ok(),
        "the control-plane process never launched the gang"
    );
    control_plane.kill().unwrap(); // SIGKILL
    control_plane.wait().unwrap();
    let gang: GangRecord =
        serde_json::from_str(&std::fs::read_to_string(&record).unwrap()).unwrap();

    // The ranks outlived their parent, and a new control plane sees them through.
    let restarted = LocalRuntime::new();
    assert_eq!(restarted.adopt(&gang).await.unwrap(), GangStatus::Running);
    match wait_end(&restarted, &gang).await {
        GangStatus::Failed {
            rank: 2,
            exit_code: Some(5),
            ..
        } => {}
        other => panic!("expected rank 2 to fail with 5, got {other:?}"),
    }
    let states = wait_all_ranks(&restarted, &gang).await;
    assert_eq!(
        states,
        [
            RankState::Exited { code: 0 },
            RankState::Exited { code: 0 },
            RankState::Exited { code: 5 }
        ]
    );
    for rank in 0..3 {
        assert_eq!(
            std::fs::read_to_string(gang.log_path(rank).unwrap()).unwrap(),
            "started\n"
        );
    }
}

/// A one-rank gang running `on_term` as its SIGTERM trap (a file `terms` in its directory is
/// there for the trap to write to), whose control plane started stopping it with `grace` and
/// died `after` that; then a fresh runtime adopts it and stops it with the same `grace`.
/// Returns the gang, what the trap wrote, and the restarted runtime.
async fn stopped_across_a_restart(
    dir: &std::path::Path,
    on_term: &str,
    grace: Duration,
    after: Duration,
) -> (GangRecord, String, String, LocalRuntime) {
    let terms = dir.join("terms");
    let script = format!(
        "trap '{}' TERM; echo up; while :; do sleep 0.1; done",
        on_term.replace("TERMS", &terms.display().to_string())
    );
    let gang = {
        let crashed = LocalRuntime::new();
        let gang = persisted(&crashed.launch(sh(dir, 1, 1, &script)).await.unwrap());
        wait_for_log(&gang, 0, "up").await;
        // The stop starts, then the control plane dies mid-grace (the future is dropped).
        let _ = tokio::time::timeout(after, crashed.terminate(&gang, grace)).await;
        gang
    };
    let read = || std::fs::read_to_string(&terms).unwrap_or_default();
    let before = read();
    let restarted = LocalRuntime::new();
    assert_eq!(restarted.adopt(&gang).await.unwrap(), GangStatus::Running);
    tokio::time::timeout(HANG_GUARD, restarted.terminate(&gang, grace))
        .await
        .expect("stopped")
        .unwrap();
    (gang, before, read(), restarted)
}

/// A control plane that dies while a rank checkpoints after SIGTERM: the restarted one's
/// `terminate` sends no second SIGTERM (the rank's handler runs once and finishes its
/// checkpoint) and waits out what is left of the first grace period, not a new one.
#[tokio::test]
async fn a_restarted_runtime_does_not_signal_ranks_already_told_to_stop() {
    let dir = tempfile::tempdir().unwrap();
    let (gang, before, after, restarted) = stopped_across_a_restart(
        dir.path(),
        "echo term >> TERMS; sleep 2; echo saved >> TERMS; exit 143",
        Duration::from_secs(30),
        Duration::from_millis(500),
    )
    .await;
    assert_eq!(before, "term\n", "the first SIGTERM reached the rank");
    assert_eq!(after, "term\nsaved\n", "one SIGTERM, one whole checkpoint");
    let ranks = restarted.observe_ranks(&gang).await.unwrap();
    assert_eq!(ranks[0].state, RankState::Exited { code: 143 });

    // A rank that keeps running after SIGTERM gets no second one either: once the grace
    // period that began before the restart is over, SIGKILL.
    let dir = tempfile::tempdir().unwrap();
    let (stubborn, _, after, _) = stopped_across_a_restart(
        dir.path(),
        "echo term >> TERMS",
        Duration::from_secs(1),
        Duration::from_millis(300),
    )
    .await;
    assert!(!alive(&stubborn, 0));
    assert_eq!(after, "term\n", "one SIGTERM");
}
