//! A small built-in catalogue of well-known model configs, so `ferry plan` works offline.
//!
//! Each entry is the architecture part of the model's public `config.json` (shapes are facts;
//! the text here is written for Ferry). Ids match the Hugging Face hub; instruct/chat variants
//! share their base model's shapes and resolve to it.

use crate::error::{PlanError, Result};
use crate::model::ModelShape;

/// (hub id, config.json) for every built-in model.
pub const CATALOG: &[(&str, &str)] = &[
    (
        "meta-llama/Llama-3.2-1B",
        include_str!("catalog/Llama-3.2-1B.json"),
    ),
    (
        "meta-llama/Llama-3.2-3B",
        include_str!("catalog/Llama-3.2-3B.json"),
    ),
    (
        "meta-llama/Meta-Llama-3-70B",
        include_str!("catalog/Meta-Llama-3-70B.json"),
    ),
    (
        "meta-llama/Meta-Llama-3-8B",
        include_str!("catalog/Meta-Llama-3-8B.json"),
    ),
    (
        "mistralai/Mistral-7B-v0.1",
        include_str!("catalog/Mistral-7B-v0.1.json"),
    ),
    (
        "mistralai/Mixtral-8x7B-v0.1",
        include_str!("catalog/Mixtral-8x7B-v0.1.json"),
    ),
    (
        "Qwen/Qwen1.5-MoE-A2.7B",
        include_str!("catalog/Qwen1.5-MoE-A2.7B.json"),
    ),
    (
        "Qwen/Qwen2.5-0.5B",
        include_str!("catalog/Qwen2.5-0.5B.json"),
    ),
    (
        "Qwen/Qwen2.5-1.5B",
        include_str!("catalog/Qwen2.5-1.5B.json"),
    ),
    ("Qwen/Qwen2.5-14B", include_str!("catalog/Qwen2.5-14B.json")),
    ("Qwen/Qwen2.5-32B", include_str!("catalog/Qwen2.5-32B.json")),
    ("Qwen/Qwen2.5-3B", include_str!("catalog/Qwen2.5-3B.json")),
    ("Qwen/Qwen2.5-72B", include_str!("catalog/Qwen2.5-72B.json")),
    ("Qwen/Qwen2.5-7B", include_str!("catalog/Qwen2.5-7B.json")),
    ("Qwen/Qwen3-0.6B", include_str!("catalog/Qwen3-0.6B.json")),
    (
        "Qwen/Qwen3-30B-A3B",
        include_str!("catalog/Qwen3-30B-A3B.json"),
    ),
    ("Qwen/Qwen3-8B", include_str!("catalog/Qwen3-8B.json")),
    ("google/gemma-2b", include_str!("catalog/gemma-2b.json")),
    ("google/gemma-7b", include_str!("catalog/gemma-7b.json")),
    ("openai-community/gpt2", include_str!("catalog/gpt2.json")),
];

/// Suffixes that do not change a model's shapes.
const VARIANT_SUFFIXES: &[&str] = &[
    "-Instruct-2507",
    "-Instruct",
    "-Chat",
    "-chat",
    "-it",
    "-Base",
    "-hf",
];

/// Finds the config of a hub id (case-insensitive; `-Instruct`/`-Chat`/`-it` variants resolve
/// to their base model; the organisation part may be omitted).
pub fn lookup(id: &str) -> Option<(&'static str, &'static str)> {
    let wanted = id.trim().to_ascii_lowercase();
    let mut candidates = vec![wanted.clone()];
    for suffix in VARIANT_SUFFIXES {
        if let Some(base) = wanted.strip_suffix(&suffix.to_ascii_lowercase()) {
            candidates.push(base.to_string());
        }
    }
    // Llama 3.1 shares the 3.0 shapes apart from RoPE scaling, which does not change memory.
    let extra: Vec<String> = candidates
        .iter()
        .filter(|c| c.contains("llama-3.1-"))
        .map(|c| c.replace("llama-3.1-", "meta-llama-3-"))
        .collect();
    candidates.extend(extra);
    CATALOG.iter().copied().find(|(known, _)| {
        let known = known.to_ascii_lowercase();
        let short = known.split('/').nth(1).unwrap_or(&known).to_string();
        candidates.iter().any(|c| {
            *c == known
                || (!c.contains('/') && *c == short)
                || c.split('/').nth(1).is_some_and(|tail| tail == short)
        })
    })
}

/// Reads the shape of a catalogue model; an unknown id names `model.id` and suggests `model.path`.
pub fn shape_of(id: &str) -> Result<ModelShape> {
    match lookup(id) {
        Some((known, json)) => ModelShape::from_config_json(json, known),
        None => Err(PlanError::UnknownModelId {
            id: id.to_string(),
            known: CATALOG
                .iter()
                .map(|(k, _)| *k)
                .collect::<Vec<_>>()
                .join(", "),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_entry_parses() {
        for (id, json) in CATALOG {
            let shape = ModelShape::from_config_json(json, id).unwrap();
            assert!(shape.params().total > 100_000_000, "{id}");
        }
    }

    #[test]
    fn instruct_variants_resolve_to_base() {
        assert_eq!(
            lookup("Qwen/Qwen2.5-7B-Instruct").unwrap().0,
            "Qwen/Qwen2.5-7B"
        );
        assert_eq!(
            lookup("meta-llama/Llama-3.1-8B-Instruct").unwrap().0,
            "meta-llama/Meta-Llama-3-8B"
        );
        assert_eq!(lookup("qwen2.5-72b").unwrap().0, "Qwen/Qwen2.5-72B");
    }

    #[test]
    fn unknown_id_names_field_and_suggests_path() {
        let msg = shape_of("acme/NotAModel-9B").unwrap_err().to_string();
        assert!(
            msg.contains("`model.id`") && msg.contains("model.path"),
            "{msg}"
        );
    }
}

#[cfg(test)]
mod count_tests {
    use super::*;

    /// Published `num_parameters()` of each catalogue model (model cards / transformers).
    const PUBLISHED: &[(&str, u64)] = &[
        ("Qwen/Qwen2.5-0.5B", 494_032_768),
        ("Qwen/Qwen2.5-1.5B", 1_543_714_304),
        ("Qwen/Qwen2.5-3B", 3_085_938_688),
        ("Qwen/Qwen2.5-7B", 7_615_616_512),
        ("Qwen/Qwen2.5-14B", 14_770_033_664),
        ("Qwen/Qwen2.5-32B", 32_763_876_352),
        ("Qwen/Qwen2.5-72B", 72_706_203_648),
        ("meta-llama/Llama-3.2-1B", 1_235_814_400),
        ("meta-llama/Llama-3.2-3B", 3_212_749_824),
        ("meta-llama/Meta-Llama-3-8B", 8_030_261_248),
        ("meta-llama/Meta-Llama-3-70B", 70_553_706_496),
        ("mistralai/Mistral-7B-v0.1", 7_241_732_096),
        ("mistralai/Mixtral-8x7B-v0.1", 46_702_792_704),
        ("google/gemma-2b", 2_506_172_416),
        ("google/gemma-7b", 8_537_680_896),
        ("openai-community/gpt2", 124_439_808),
        ("Qwen/Qwen3-0.6B", 596_049_920),
        ("Qwen/Qwen3-8B", 8_190_735_360),
        ("Qwen/Qwen3-30B-A3B", 30_532_122_624),
        ("Qwen/Qwen1.5-MoE-A2.7B", 14_315_784_192),
    ];

    #[test]
    fn counts_match_published_figures() {
        let mut wrong = Vec::new();
        for (id, want) in PUBLISHED {
            let got = shape_of(id).unwrap().params().total;
            if got != *want {
                wrong.push(format!("{id}: computed {got}, published {want}"));
            }
        }
        assert!(wrong.is_empty(), "{}", wrong.join("\n"));
        assert_eq!(PUBLISHED.len(), CATALOG.len());
    }
}
