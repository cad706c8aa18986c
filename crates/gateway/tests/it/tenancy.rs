//! Keys and limits end to end: 401 without a valid key, 429 with `Retry-After`
//! once a key's RPM or TPM is spent, and other keys unaffected.

use std::time::Duration;

use ferry_gateway::{GatewayConfig, KeyConfig};
use serde_json::Value;

use crate::common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_limit_keys_get_429_with_retry_after_and_others_are_unaffected() {
    let mock = Mock::start(mock_cfg("m", 64)).await;
    let dir = tempfile::tempdir().unwrap();
    // Through a config file, as an operator would write it: hashes only.
    let yaml = format!(
        "keys:\n  - {{team: small, sha256: {}, rpm: 3}}\n  - {{team: big, sha256: {}, rpm: 1000}}\n  - {{team: tokens, sha256: {}, tpm: 100}}\nbackends:\n  - {{model: m, url: \"{}\"}}\n",
        ferry_gateway::hash_key("sk-small"),
        ferry_gateway::hash_key("sk-big"),
        ferry_gateway::hash_key("sk-tokens"),
        mock.url()
    );
    let path = dir.path().join("gateway.yaml");
    std::fs::write(&path, yaml).unwrap();
    assert!(!std::fs::read_to_string(&path).unwrap().contains("sk-small"));
    let cfg = GatewayConfig::from_file(&path).unwrap();
    assert_eq!(
        cfg.keys[0],
        KeyConfig::from_plain("small", "sk-small", Some(3), None)
    );
    let gw = Gw::start(GatewayConfig { ..cfg }).await;
    let body = chat("m", "hello", 4, false);
    let path = "/v1/chat/completions";

    let (s, _, text) = call(gw.addr, "POST", path, &body, &[]).await;
    assert_eq!(s, 401, "{text}");
    assert!(text.contains("invalid_api_key"));
    let (s, _, text) = call(
        gw.addr,
        "POST",
        path,
        &body,
        &[("authorization", "Bearer sk-wrong")],
    )
    .await;
    assert_eq!(s, 401, "{text}");
    let (s, _, _) = call(gw.addr, "GET", "/v1/models", "", &[]).await;
    assert_eq!(s, 401);

    let small = [("authorization", "Bearer sk-small")];
    for _ in 0..3 {
        let (s, _, text) = call(gw.addr, "POST", path, &body, &small).await;
        assert_eq!(s, 200, "{text}");
    }
    let resp = send(gw.addr, "POST", path, &body, &small).await;
    assert_eq!(resp.status(), 429);
    let retry: u64 = resp.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    // 3 per minute refill one every 20 s.
    assert!((15..=20).contains(&retry), "Retry-After {retry}");
    let text = http_body_util::BodyExt::collect(resp.into_body())
        .await
        .unwrap()
        .to_bytes();
    let v: Value = serde_json::from_slice(&text).unwrap();
    assert_eq!(v["error"]["type"], "rate_limit_error");
    assert_eq!(v["error"]["code"], "rate_limit_exceeded");
    assert!(v["error"]["message"].as_str().unwrap().contains("small"));

    // Another key is unaffected.
    for _ in 0..10 {
        let (s, _, text) = call(
            gw.addr,
            "POST",
            path,
            &body,
            &[("authorization", "Bearer sk-big")],
        )
        .await;
        assert_eq!(s, 200, "{text}");
    }

    // Tokens per minute: 100; each request is estimated at prompt/4 + max_tokens
    // and then charged its real usage (6 prompt + 40 completion mock tokens): 100 - 46 - 46 leaves too little for a third.
    let tokens = [("authorization", "Bearer sk-tokens")];
    let heavy = chat("m", "count the boats", 40, false);
    let mut statuses = Vec::new();
    for _ in 0..4 {
        let resp = send(gw.addr, "POST", path, &heavy, &tokens).await;
        statuses.push(resp.status().as_u16());
        if resp.status() == 429 {
            let retry: u64 = resp.headers()["retry-after"]
                .to_str()
                .unwrap()
                .parse()
                .unwrap();
            assert!((1..=60).contains(&retry), "{retry}");
        }
        let _ = http_body_util::BodyExt::collect(resp.into_body()).await;
    }
    assert_eq!(statuses[..2], [200, 200], "{statuses:?}");
    assert!(statuses[2..].contains(&429), "{statuses:?}");
    eventually(Duration::from_secs(2), || {
        gw.gateway
            .metrics_text()
            .contains("team=\"small\",code=\"429\"} 1")
    })
    .await;
    let metrics = gw.gateway.metrics_text();
    assert!(
        metrics.contains("team=\"small\",code=\"429\"} 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("ferry_gateway_prompt_tokens_total{model=\"m\",team=\"big\"}"),
        "{metrics}"
    );
}
