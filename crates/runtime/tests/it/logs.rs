//! Per-rank log files and the `logs` stream (`ferry logs JOB --rank N [-f]`).

use futures_util::StreamExt;

use ferry_runtime::{GangStatus, LocalRuntime, LogStream, Runtime, RuntimeError};

use super::*;

async fn collect(mut stream: LogStream) -> String {
    let mut out = Vec::new();
    let all = tokio::time::timeout(HANG_GUARD, async {
        while let Some(chunk) = stream.next().await {
            out.extend_from_slice(&chunk.unwrap());
        }
    })
    .await;
    assert!(all.is_ok(), "log stream did not end");
    String::from_utf8(out).unwrap()
}

#[tokio::test]
async fn following_a_log_streams_output_as_it_comes_and_ends_with_the_rank() {
    let dir = tempfile::tempdir().unwrap();
    let script = r#"for i in 1 2 3 4 5; do echo "rank $RANK line $i"; sleep 0.1; done; echo "rank $RANK done" >&2"#;
    let rt = LocalRuntime::new();
    let gang = rt.launch(sh(dir.path(), 1, 2, script)).await.unwrap();
    // Started while the ranks are still writing.
    let followed = collect(rt.logs(&gang, 1, true).unwrap()).await;
    let want: String = (1..=5)
        .map(|i| format!("rank 1 line {i}\n"))
        .collect::<String>()
        + "rank 1 done\n";
    assert_eq!(followed, want);

    assert_eq!(wait_end(&rt, &gang).await, GangStatus::Succeeded);
    let rank0 = collect(rt.logs(&gang, 0, false).unwrap()).await;
    assert!(
        rank0.starts_with("rank 0 line 1\n") && rank0.ends_with("rank 0 done\n"),
        "{rank0}"
    );
    assert_eq!(
        rank0,
        std::fs::read_to_string(gang.log_path(0).unwrap()).unwrap()
    );
}

#[tokio::test]
async fn logs_of_a_rank_outside_the_gang_are_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let rt = LocalRuntime::new();
    let gang = rt.launch(sh(dir.path(), 1, 2, "exit 0")).await.unwrap();
    match rt.logs(&gang, 2, false) {
        Err(RuntimeError::NoSuchRank {
            rank: 2,
            world_size: 2,
            ..
        }) => {}
        Err(other) => panic!("wrong error {other}"),
        Ok(_) => panic!("rank 2 of a 2-rank gang must be refused"),
    }
    wait_end(&rt, &gang).await;
}

#[tokio::test]
async fn a_restart_appends_to_a_new_attempt_directory() {
    let dir = tempfile::tempdir().unwrap();
    let rt = LocalRuntime::new();
    let first = rt.launch(sh(dir.path(), 1, 1, "echo first")).await.unwrap();
    wait_end(&rt, &first).await;
    let mut again = sh(dir.path(), 1, 1, "echo second");
    again.attempt = 1;
    let second = rt.launch(again).await.unwrap();
    wait_end(&rt, &second).await;
    assert_eq!(collect(rt.logs(&first, 0, true).unwrap()).await, "first\n");
    assert_eq!(
        collect(rt.logs(&second, 0, true).unwrap()).await,
        "second\n"
    );
}

#[tokio::test]
async fn merged_logs_prefix_every_line_with_its_rank() {
    let dir = tempfile::tempdir().unwrap();
    let rt = LocalRuntime::new();
    let gang = rt
        .launch(sh(
            dir.path(),
            2,
            1,
            r#"echo "hello from $RANK"; sleep 0.2; echo "bye from $RANK""#,
        ))
        .await
        .unwrap();
    let merged = collect(ferry_runtime::merged_logs(&rt, &gang, true).unwrap()).await;
    let mut lines: Vec<&str> = merged.lines().collect();
    lines.sort_unstable();
    assert_eq!(
        lines,
        [
            "[rank 0] bye from 0",
            "[rank 0] hello from 0",
            "[rank 1] bye from 1",
            "[rank 1] hello from 1"
        ]
    );
}
