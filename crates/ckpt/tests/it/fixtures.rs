//! Bar 1: every Megatron fixture (legacy and torch_dist) converts to HF, the config matches
//! the expected one, and a reference forward pass over the converted weights reproduces
//! Megatron's own logits within 1e-3.

use crate::common;

use std::path::Path;

use ferry_ckpt::{ConvertOptions, Format, convert, detect, inspect};

fn fixture_dirs() -> Vec<std::path::PathBuf> {
    let root = common::fixtures().join("megatron");
    let mut v: Vec<_> = std::fs::read_dir(&root)
        .unwrap_or_else(|e| panic!("{}: {e}", root.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("fixture.json").is_file())
        .collect();
    v.sort();
    assert!(
        v.len() >= 4,
        "expected the four Megatron fixtures in {}",
        root.display()
    );
    v
}

fn check_config(hf: &Path, fixture: &Path) {
    let got: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(hf.join("config.json")).unwrap()).unwrap();
    let want: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(fixture.join("expected_config.json")).unwrap(),
    )
    .unwrap();
    for (k, v) in want.as_object().unwrap() {
        let g = &got[k];
        let same = match (g.as_f64(), v.as_f64()) {
            (Some(a), Some(b)) => (a - b).abs() <= 1e-12 * b.abs().max(1.0),
            _ => g == v,
        };
        assert!(
            same,
            "{}: config `{k}` is {g}, expected {v}",
            fixture.display()
        );
    }
}

#[test]
fn every_fixture_converts_and_matches_megatron_logits() {
    let mut checked = 0;
    for fx in fixture_dirs() {
        for (sub, fmt) in [
            ("legacy", Format::MegatronLegacy),
            ("torch_dist", Format::MegatronDist),
        ] {
            let src = fx.join(sub);
            if !src.is_dir() {
                continue;
            }
            assert_eq!(detect(&src).unwrap(), fmt, "{}", src.display());
            let out = tempfile::tempdir().unwrap();
            let dst = out.path().join("hf");
            let calls = std::cell::Cell::new(0usize);
            let report = convert(&src, &dst, &ConvertOptions::default(), &|_| {
                calls.set(calls.get() + 1)
            })
            .unwrap();
            assert!(calls.get() > 0, "progress was never reported");
            assert_eq!(report.source_format, fmt);
            check_config(&dst, &fx);
            let diff = common::logits_diff(&dst, &fx);
            eprintln!("{}: max abs logit diff {diff:.2e}", src.display());
            assert!(diff < 1e-3, "{}: max abs logit diff {diff}", src.display());
            checked += 1;
        }
    }
    assert_eq!(checked, 6, "4 legacy + 2 torch_dist fixtures");
}

#[test]
fn legacy_and_torch_dist_give_identical_tensors() {
    for name in ["llama-tp2-pp2", "qwen2-tp2-pp1"] {
        let fx = common::fixtures().join("megatron").join(name);
        let out = tempfile::tempdir().unwrap();
        let a = out.path().join("a");
        let b = out.path().join("b");
        convert(&fx.join("legacy"), &a, &ConvertOptions::default(), &|_| {}).unwrap();
        convert(
            &fx.join("torch_dist"),
            &b,
            &ConvertOptions::default(),
            &|_| {},
        )
        .unwrap();
        let (ta, tb) = (common::load_hf(&a), common::load_hf(&b));
        assert_eq!(ta.len(), tb.len());
        for (k, v) in &ta {
            assert_eq!(Some(v), tb.get(k), "{name}: {k}");
        }
    }
}

/// The logit check is sharp: a deliberately wrong mapping (gate and up swapped) is caught.
#[test]
fn logit_check_catches_a_wrong_mapping() {
    let fx = common::fixtures().join("megatron/llama-tp2-pp2");
    let out = tempfile::tempdir().unwrap();
    let dst = out.path().join("hf");
    convert(
        &fx.join("legacy"),
        &dst,
        &ConvertOptions::default(),
        &|_| {},
    )
    .unwrap();
    let cfg = common::Cfg::read(&dst);
    let mut w = common::load_hf(&dst);
    let g = w.remove("model.layers.1.mlp.gate_proj.weight").unwrap();
    let u = w.remove("model.layers.1.mlp.up_proj.weight").unwrap();
    w.insert("model.layers.1.mlp.gate_proj.weight".into(), u);
    w.insert("model.layers.1.mlp.up_proj.weight".into(), g);
    let (ids, want) = common::reference(&fx);
    let got: Vec<f32> = ids
        .iter()
        .flat_map(|r| common::forward(&cfg, &w, r))
        .collect();
    assert!(common::max_abs_diff(&got, &want) > 1e-2);
}

#[test]
fn inspect_reports_layout_without_converting() {
    let fx = common::fixtures().join("megatron/llama-tied-tp2-pp2/legacy");
    let i = inspect(&fx, &ConvertOptions::default()).unwrap();
    assert_eq!(i.format, Format::MegatronLegacy);
    let p = i.parallel.unwrap();
    assert_eq!((p.tp, p.pp, p.vpp), (2, 2, 1));
    assert!(i.spec.tied);
    assert_eq!(i.spec.padded_vocab, 256);
    assert_eq!(i.spec.vocab, 250);
    assert!(i.tensors.iter().all(|t| t.name != "lm_head.weight"));
    // 250*64 embedding + 4 layers + final norm
    let per_layer = 64 + (64 + 32 + 32) * 64 + 64 * 64 + 64 + 2 * 176 * 64 + 64 * 176;
    assert_eq!(i.parameters, (250 * 64 + 4 * per_layer + 64) as u64);
    let table = i.render_table();
    assert!(table.contains("tp=2 pp=2 vpp=1"), "{table}");
    let row = table
        .lines()
        .find(|l| l.starts_with("model.layers.3.mlp.down_proj.weight"))
        .unwrap();
    assert!(row.contains("[64, 176]") && row.ends_with("F32"), "{row}");
}

#[test]
fn refuses_a_non_empty_destination() {
    let fx = common::fixtures().join("megatron/llama-tp1-pp1/legacy");
    let out = tempfile::tempdir().unwrap();
    std::fs::write(out.path().join("keep.txt"), "x").unwrap();
    let e = convert(&fx, out.path(), &ConvertOptions::default(), &|_| {}).unwrap_err();
    assert!(e.to_string().contains("not empty"), "{e}");
}
