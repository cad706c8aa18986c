//! Bad launch requests are refused before anything starts, naming the field and the fix.

use ferry_runtime::{LocalRuntime, Runtime, RuntimeError};

use super::*;

async fn refused(req: ferry_runtime::LaunchRequest) -> (String, String) {
    match LocalRuntime::new().launch(req).await {
        Err(RuntimeError::InvalidRequest { field, problem }) => (field, problem),
        Err(other) => panic!("expected InvalidRequest, got {other}"),
        Ok(gang) => panic!("expected a refusal, launched {gang:?}"),
    }
}

#[tokio::test]
async fn each_bad_field_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let base = || sh(dir.path(), 1, 2, "exit 0");

    let mut r = base();
    r.env.insert("RANK".into(), "7".into());
    assert_eq!(refused(r).await.0, "env.RANK");

    let mut r = base();
    r.nodes = 0;
    assert_eq!(refused(r).await.0, "nodes");

    let mut r = base();
    r.procs_per_node = 0;
    assert_eq!(refused(r).await.0, "procs_per_node");

    let mut r = base();
    r.nodes = 1 << 20;
    assert_eq!(refused(r).await.0, "procs_per_node");

    let mut r = base();
    r.argv.clear();
    assert_eq!(refused(r).await.0, "argv");

    let mut r = base();
    r.job = "../etc".into();
    assert_eq!(refused(r).await.0, "job");

    let mut r = base();
    r.gpus_per_rank = vec![vec!["0".into()]];
    let (field, problem) = refused(r).await;
    assert_eq!(field, "gpus_per_rank");
    assert!(problem.contains("2 ranks"), "{problem}");

    let mut r = base();
    r.gpus_per_rank = vec![vec!["0".into()], vec!["1,2".into()]];
    assert_eq!(refused(r).await.0, "gpus_per_rank[1]");

    let mut r = base();
    r.working_dir = Some(dir.path().join("missing"));
    assert_eq!(refused(r).await.0, "working_dir");

    // Nothing was launched by any of them.
    assert!(!dir.path().join("attempt-0").join("gang.json").exists());
}

#[tokio::test]
async fn an_attempt_directory_is_never_reused() {
    let dir = tempfile::tempdir().unwrap();
    let rt = LocalRuntime::new();
    let gang = rt.launch(sh(dir.path(), 1, 1, "exit 0")).await.unwrap();
    wait_end(&rt, &gang).await;
    let (field, problem) = refused(sh(dir.path(), 1, 1, "exit 0")).await;
    assert_eq!(field, "attempt");
    assert!(problem.contains("attempt 1"), "{problem}");
}
