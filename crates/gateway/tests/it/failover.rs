//! Bar 2 with real processes: three `mock_engine` replicas under steady load, one
//! killed with SIGKILL: no client-visible failure for requests that had not
//! started streaming, ejection within 2 s, readmission once it is back.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use ferry_gateway::{GatewayConfig, Policy};
use http_body_util::BodyExt;

use crate::common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_one_of_three_replicas_under_load_fails_no_request() {
    let bin = tokio::task::spawn_blocking(mock_engine_binary)
        .await
        .unwrap();
    let args = [
        "--model",
        "m",
        "--ttft-ms",
        "20",
        "--tokens",
        "8",
        "--itl-ms",
        "2",
    ];
    let mut procs: Vec<MockProc> = (0..3)
        .map(|_| MockProc::spawn(&bin, "127.0.0.1:0", &args))
        .collect();
    let gw = Gw::start(GatewayConfig {
        policy: Policy::LeastOutstanding,
        ..gw_cfg()
    })
    .await;
    for (i, p) in procs.iter().enumerate() {
        gw.registry
            .upsert("m", &format!("r{i}"), &format!("http://{}", p.addr))
            .unwrap();
    }

    let stop = Arc::new(AtomicBool::new(false));
    let ok = Arc::new(AtomicU64::new(0));
    let failed_before_stream = Arc::new(AtomicU64::new(0));
    let broken_mid_stream = Arc::new(AtomicU64::new(0));
    let mut workers = Vec::new();
    for w in 0..6 {
        let (stop, ok, failed, broken, addr) = (
            stop.clone(),
            ok.clone(),
            failed_before_stream.clone(),
            broken_mid_stream.clone(),
            gw.addr,
        );
        workers.push(tokio::spawn(async move {
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                i += 1;
                let stream = i.is_multiple_of(3);
                let resp = send(
                    addr,
                    "POST",
                    "/v1/chat/completions",
                    &chat("m", &format!("w{w} {i}"), 8, stream),
                    &[],
                )
                .await;
                if resp.status() != 200 {
                    failed.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
                match resp.into_body().collect().await {
                    Ok(b) => {
                        let text = String::from_utf8_lossy(&b.to_bytes()).into_owned();
                        if !stream
                            || text.ends_with("data: [DONE]\n\n") && !text.contains("\"error\"")
                        {
                            ok.fetch_add(1, Ordering::Relaxed);
                        } else {
                            // Only a stream already under way can break.
                            broken.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    Err(_) if stream => {
                        broken.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(_) => {
                        failed.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(800)).await;
    let before_kill = ok.load(Ordering::Relaxed);
    assert!(before_kill > 20, "load generator too slow: {before_kill}");
    let killed_addr = procs[1].addr;
    procs[1].kill();
    let killed_at = Instant::now();
    let ejected = eventually(Duration::from_secs(5), || {
        gw.registry
            .replicas()
            .iter()
            .any(|r| r.id == "r1" && !r.healthy)
    })
    .await;
    let eject_time = killed_at.elapsed();
    assert!(ejected, "r1 never ejected");
    assert!(
        eject_time <= Duration::from_secs(2),
        "ejected after {eject_time:?}"
    );
    tokio::time::sleep(Duration::from_millis(1_000)).await;

    // Back on the same port: readmitted by the health checks, and used again.
    procs[1] = MockProc::spawn(&bin, &killed_addr.to_string(), &args);
    let back_at = Instant::now();
    let readmitted = eventually(Duration::from_secs(10), || {
        gw.registry
            .replicas()
            .iter()
            .any(|r| r.id == "r1" && r.healthy)
    })
    .await;
    assert!(
        readmitted,
        "r1 not readmitted after {:?}",
        back_at.elapsed()
    );
    tokio::time::sleep(Duration::from_millis(800)).await;
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.await.unwrap();
    }
    let (_, _, stats) = call(killed_addr, "GET", "/mock/stats", "", &[]).await;
    let stats: serde_json::Value = serde_json::from_str(&stats).unwrap();
    assert!(
        stats["started"].as_u64().unwrap() > 0,
        "readmitted replica got no traffic: {stats}"
    );
    let failed = failed_before_stream.load(Ordering::Relaxed);
    let total = ok.load(Ordering::Relaxed);
    eprintln!(
        "ok {total}, failed before streaming {failed}, broken mid-stream {}, ejected after {eject_time:?}, readmitted after {:?}",
        broken_mid_stream.load(Ordering::Relaxed),
        back_at.elapsed()
    );
    assert_eq!(
        failed, 0,
        "client-visible failures of requests that had not started streaming"
    );
    assert!(total > before_kill + 50);
    let metrics = gw.gateway.metrics_text();
    assert!(
        metrics.contains("ferry_gateway_upstream_failures_total{replica=\"r1\""),
        "{metrics}"
    );
    assert!(
        metrics.contains("ferry_gateway_retries_total{replica=\"r1\"}"),
        "{metrics}"
    );
}
