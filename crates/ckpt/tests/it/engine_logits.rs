//! Bar 1 through the built-in engine: every converted fixture, loaded by `ferry-engine`'s
//! candle forward pass, reproduces Megatron's logits within 1e-3 (fp32).

use crate::common;

use ferry_ckpt::{ConvertOptions, convert};

#[test]
fn engine_forward_matches_megatron_logits_on_every_fixture() {
    let root = common::fixtures().join("megatron");
    let mut checked = 0;
    let mut dirs: Vec<_> = std::fs::read_dir(&root)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("fixture.json").is_file())
        .collect();
    dirs.sort();
    for fx in dirs {
        let (ids, want) = common::reference(&fx);
        for sub in ["legacy", "torch_dist"] {
            let src = fx.join(sub);
            if !src.is_dir() {
                continue;
            }
            let tmp = tempfile::tempdir().unwrap();
            let dst = tmp.path().join("hf");
            convert(&src, &dst, &ConvertOptions::default(), &|_| {}).unwrap();
            let mut got = Vec::new();
            for row in &ids {
                let ids32: Vec<u32> = row.iter().map(|&i| i as u32).collect();
                for pos in ferry_engine::logits(&dst, &ids32).unwrap() {
                    got.extend(pos);
                }
            }
            let diff = common::max_abs_diff(&got, &want);
            eprintln!("{}: engine max abs logit diff {diff:.2e}", src.display());
            assert!(
                diff < 1e-3,
                "{}: engine logits differ by {diff}",
                src.display()
            );
            checked += 1;
        }
    }
    assert_eq!(checked, 6);
}
