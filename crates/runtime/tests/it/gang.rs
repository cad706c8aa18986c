//! A gang's shape: every rank's environment, rank-to-rank connectivity, reaping, and
//! the records left on disk.

use std::collections::BTreeMap;

use ferry_runtime::{GangStatus, LocalRuntime, RankState, Runtime};

use super::*;

const PRINT_ENV: &str = "import os, json; print(json.dumps({k: v for k, v in os.environ.items() if k in \
    ('MASTER_ADDR','MASTER_PORT','NNODES','NODE_RANK','NPROC_PER_NODE','WORLD_SIZE','RANK','LOCAL_RANK',\
    'CUDA_VISIBLE_DEVICES','FERRY_JOB','FERRY_ATTEMPT','EXTRA')}))";

#[tokio::test]
async fn every_rank_of_a_2x2_gang_gets_the_distributed_environment() {
    let dir = tempfile::tempdir().unwrap();
    let mut req = request(dir.path(), 2, 2, &["python3", "-c", PRINT_ENV]);
    req.attempt = 3;
    req.env.insert("EXTRA".into(), "from the spec".into());
    req.gpus_per_rank = vec![
        vec!["0".into()],
        vec!["1".into()],
        vec!["GPU-a".into(), "GPU-b".into()],
        vec![],
    ];
    let rt = LocalRuntime::new();
    let gang = rt.launch(req).await.unwrap();
    assert_eq!(wait_end(&rt, &gang).await, GangStatus::Succeeded);

    let gpus = ["0", "1", "GPU-a,GPU-b", ""];
    for rank in 0..4u32 {
        let log = std::fs::read_to_string(gang.log_path(rank).unwrap()).unwrap();
        let env: BTreeMap<String, String> = serde_json::from_str(log.trim()).unwrap();
        let want: BTreeMap<String, String> = [
            ("MASTER_ADDR", "127.0.0.1".to_string()),
            ("MASTER_PORT", gang.master_port.to_string()),
            ("NNODES", "2".into()),
            ("NODE_RANK", (rank / 2).to_string()),
            ("NPROC_PER_NODE", "2".into()),
            ("WORLD_SIZE", "4".into()),
            ("RANK", rank.to_string()),
            ("LOCAL_RANK", (rank % 2).to_string()),
            ("CUDA_VISIBLE_DEVICES", gpus[rank as usize].to_string()),
            ("FERRY_JOB", "job-1".into()),
            ("FERRY_ATTEMPT", "3".into()),
            ("EXTRA", "from the spec".into()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        assert_eq!(env, want, "rank {rank}");
        let record = gang.rank(rank).unwrap();
        assert_eq!((record.node_rank, record.local_rank), (rank / 2, rank % 2));
        assert!(
            record
                .log_path
                .ends_with(format!("attempt-3/rank-{rank}.log"))
        );
        assert_eq!(std::fs::read_to_string(&record.exit_path).unwrap(), "0\n");
        assert_eq!(
            std::fs::read_to_string(&record.pid_path).unwrap(),
            format!("{} {}\n", record.pid, record.start_time)
        );
        // Reaped: the wrapper is gone, not a zombie of this process.
        assert_ne!(
            proc_state(record.pid),
            Some('Z'),
            "rank {rank} left a zombie"
        );
    }
    assert_eq!(LocalRuntime::recover(&gang.attempt_dir).unwrap(), gang);
    let ranks = rt.observe_ranks(&gang).await.unwrap();
    assert!(
        ranks
            .iter()
            .all(|r| r.state == RankState::Exited { code: 0 } && r.ended_at_unix_ms.is_some())
    );
}

#[tokio::test]
async fn ranks_meet_at_master_addr_and_rank_0_collects_every_rank() {
    let dir = tempfile::tempdir().unwrap();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/hello_gang.py");
    let rt = LocalRuntime::new();
    let gang = rt
        .launch(request(dir.path(), 2, 2, &["python3", script]))
        .await
        .unwrap();
    assert_eq!(wait_end(&rt, &gang).await, GangStatus::Succeeded);
    let rank0 = std::fs::read_to_string(gang.log_path(0).unwrap()).unwrap();
    assert!(
        rank0.lines().any(|l| l == "[0, 1, 2, 3]"),
        "rank 0 log: {rank0}"
    );
    for rank in 1..4 {
        let log = std::fs::read_to_string(gang.log_path(rank).unwrap()).unwrap();
        assert!(
            log.contains(&format!("RANK={rank}\n")),
            "rank {rank} log: {log}"
        );
        assert!(
            log.contains(&format!("rank {rank} reported to rank 0: ok")),
            "rank {rank} log: {log}"
        );
    }
}

#[tokio::test]
async fn a_failing_rank_fails_the_gang_and_supervise_stops_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    // Rank 1 fails once the others run their command (so past the wrapper's trap).
    let script = r#"if [ "$RANK" = 1 ]; then
        while [ "$(ls "$READY" | wc -l)" -lt 3 ]; do sleep 0.02; done
        echo "rank 1 gives up" >&2; exit 3
    fi
    touch "$READY/$RANK"; exec sleep 30"#;
    let ready = dir.path().join("ready");
    std::fs::create_dir(&ready).unwrap();
    let mut req = sh(dir.path(), 2, 2, script);
    req.env
        .insert("READY".into(), ready.to_str().unwrap().into());
    let rt = LocalRuntime::new();
    let gang = rt.launch(req).await.unwrap();
    let status = tokio::time::timeout(
        HANG_GUARD,
        ferry_runtime::supervise(
            &rt,
            &gang,
            Duration::from_millis(20),
            Duration::from_secs(5),
        ),
    )
    .await
    .unwrap()
    .unwrap();
    match &status {
        GangStatus::Failed {
            rank: 1,
            exit_code: Some(3),
            signal: None,
            message,
        } => {
            assert!(message.contains("rank-1.log"), "{message}");
        }
        other => panic!("expected rank 1 to fail the gang with status 3, got {other:?}"),
    }
    // The survivors were stopped by SIGTERM (`sleep` dies of it; the shell reports 128+15).
    let ranks = rt.observe_ranks(&gang).await.unwrap();
    for rank in [0, 2, 3] {
        assert_eq!(
            ranks[rank].state,
            RankState::Exited { code: 143 },
            "rank {rank}"
        );
        assert!(!alive(&gang, rank as u32));
    }
    // The gang still reads as failed by rank 1, the first to end.
    assert_eq!(rt.observe(&gang).await.unwrap(), status);
    let log = std::fs::read_to_string(gang.log_path(1).unwrap()).unwrap();
    assert_eq!(log, "rank 1 gives up\n");
}

#[tokio::test]
async fn a_missing_command_fails_with_status_127_and_a_hint() {
    let dir = tempfile::tempdir().unwrap();
    let rt = LocalRuntime::new();
    let gang = rt
        .launch(request(dir.path(), 1, 1, &["ferry-no-such-command-xyz"]))
        .await
        .unwrap();
    match wait_end(&rt, &gang).await {
        GangStatus::Failed {
            rank: 0,
            exit_code: Some(127),
            message,
            ..
        } => {
            assert!(message.contains("command not found"), "{message}")
        }
        other => panic!("expected exit 127, got {other:?}"),
    }
    let log = std::fs::read_to_string(gang.log_path(0).unwrap()).unwrap();
    assert!(log.contains("ferry-no-such-command-xyz"), "{log}");
}

#[tokio::test]
async fn working_dir_is_applied() {
    let dir = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let mut req = sh(dir.path(), 1, 1, "pwd; echo made > here.txt");
    req.working_dir = Some(work.path().to_path_buf());
    let rt = LocalRuntime::new();
    let gang = rt.launch(req).await.unwrap();
    assert_eq!(wait_end(&rt, &gang).await, GangStatus::Succeeded);
    assert_eq!(
        std::fs::read_to_string(work.path().join("here.txt")).unwrap(),
        "made\n"
    );
}
