//! What the rank wrapper, exit records, pid files and `/proc` checks cost: launches a
//! 2 × 2 gang of `true` through `LocalRuntime` and waits for it, against the peer of
//! spawning the same four processes directly (own process groups, no wrapper, no records)
//! and reaping them, and the same under the `/bin/sh` exit-record wrapper alone. Prints
//! the means and their ratios. Run: `cargo bench -p ferry-runtime`.

use std::time::{Duration, Instant};

use ferry_runtime::{GangStatus, LaunchRequest, LocalRuntime, Runtime};

const ROUNDS: u32 = 30;
const RANKS: u32 = 4;

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let dir = tempfile::tempdir().expect("temp dir");
    let runtime = LocalRuntime::new();
    // Warm-up of both paths (page cache, binary loading).
    direct_round().await;
    gang_round(&runtime, dir.path(), u32::MAX).await;

    let started = Instant::now();
    for _ in 0..ROUNDS {
        direct_round().await;
    }
    let direct = started.elapsed() / ROUNDS;

    let started = Instant::now();
    for _ in 0..ROUNDS {
        wrapper_round(dir.path()).await;
    }
    let wrapped = started.elapsed() / ROUNDS;

    let started = Instant::now();
    for attempt in 0..ROUNDS {
        gang_round(&runtime, dir.path(), attempt).await;
    }
    let gang = started.elapsed() / ROUNDS;

    println!("{RANKS} ranks of `true`, mean of {ROUNDS} rounds");
    println!("  direct spawn + wait (peer)        {:>8.2} ms", ms(direct));
    println!(
        "  the same under the sh wrapper     {:>8.2} ms",
        ms(wrapped)
    );
    println!("  LocalRuntime launch + wait        {:>8.2} ms", ms(gang));
    println!(
        "  ratio wrapper / direct            {:>8.2}x",
        ms(wrapped) / ms(direct)
    );
    println!(
        "  ratio LocalRuntime / direct       {:>8.2}x",
        ms(gang) / ms(direct)
    );
}

/// The peer: the same processes, spawned and reaped with nothing recorded.
async fn direct_round() {
    let mut children = Vec::new();
    for rank in 0..RANKS {
        let child = tokio::process::Command::new("true")
            .env("RANK", rank.to_string())
            .process_group(0)
            .spawn()
            .expect("spawn true");
        children.push(child);
    }
    for mut child in children {
        assert!(child.wait().await.expect("wait").success());
    }
}

/// The wrapper's share: the same processes under `/bin/sh -c WRAPPER`, nothing else.
async fn wrapper_round(dir: &std::path::Path) {
    let mut children = Vec::new();
    for rank in 0..RANKS {
        let child = tokio::process::Command::new("/bin/sh")
            .args(["-c", ferry_runtime::local::WRAPPER, "bench"])
            .arg(dir.join(format!("wrapper-{rank}.exit")))
            .arg("true")
            .process_group(0)
            .spawn()
            .expect("spawn sh");
        children.push(child);
    }
    for mut child in children {
        assert!(child.wait().await.expect("wait").success());
    }
}

/// One gang through the runtime, polled every millisecond until it ends.
async fn gang_round(runtime: &LocalRuntime, dir: &std::path::Path, attempt: u32) {
    let req = LaunchRequest {
        job: "bench".into(),
        attempt,
        nodes: 2,
        procs_per_node: RANKS / 2,
        argv: vec!["true".into()],
        env: Default::default(),
        working_dir: None,
        gpus_per_rank: Vec::new(),
        run_dir: dir.to_path_buf(),
    };
    let gang = runtime.launch(req).await.expect("launch");
    let status = ferry_runtime::wait(runtime, &gang, Duration::from_millis(1))
        .await
        .expect("observe");
    assert_eq!(status, GangStatus::Succeeded);
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}
