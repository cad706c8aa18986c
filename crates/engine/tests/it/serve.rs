//! Backend tests: concurrency, greedy decoding against the reference forward, errors, cancel.

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use ferry_engine::serve::{BuiltinBackend, ServeOptions};
use ferry_engine::{Architecture, ModelSource, load_tokenizer, logits, train_until};
use ferry_openai::{
    Backend, BackendError, ChatMessage, FinishReason, GenerateRequest, GenerationEvent, Prompt,
    Role,
};

use crate::common::{Capture, TempDir, corpus, tiny_arch, tiny_config};

/// One small trained model shared by the serving tests.
pub fn model_dir() -> &'static Path {
    static DIR: OnceLock<(TempDir, PathBuf)> = OnceLock::new();
    &DIR.get_or_init(|| {
        let dir = TempDir::new("serve-model");
        let (text, tok) = corpus(dir.path(), 20_000, 320);
        let cfg = tiny_config(
            ModelSource::Arch(tiny_arch(Architecture::Llama, false)),
            &text,
            Some(&tok),
            &dir.path().join("ck"),
            4,
        );
        let s = train_until(&cfg, None, &mut Capture::new(None), &AtomicBool::new(false)).unwrap();
        let ck = s.checkpoint.clone();
        (dir, ck)
    })
    .1
}

fn request(model: &str, prompt: Prompt, max_tokens: u32, temperature: f32) -> GenerateRequest {
    GenerateRequest {
        request_id: "test".into(),
        model: model.into(),
        prompt,
        max_tokens,
        temperature,
        top_p: 0.9,
        top_k: Some(50),
        seed: Some(7),
        stop: vec![],
    }
}

/// Drains a stream: (prompt_tokens, text, finish reason, completion_tokens).
fn collect(mut rx: ferry_openai::GenerationStream) -> (u32, String, FinishReason, u32) {
    let mut prompt_tokens = None;
    let mut text = String::new();
    loop {
        match rx.blocking_recv().expect("stream ended without Finished") {
            GenerationEvent::Started { prompt_tokens: p } => {
                assert!(prompt_tokens.is_none(), "two Started events");
                prompt_tokens = Some(p);
            }
            GenerationEvent::Text { delta } => {
                assert!(prompt_tokens.is_some(), "text before Started");
                text.push_str(&delta);
            }
            GenerationEvent::Finished {
                reason,
                completion_tokens,
            } => {
                return (
                    prompt_tokens.expect("Started first"),
                    text,
                    reason,
                    completion_tokens,
                );
            }
            GenerationEvent::Error(e) => panic!("generation failed: {e}"),
        }
    }
}

#[test]
fn greedy_generation_matches_argmax_of_the_reference_forward() {
    let dir = model_dir();
    let backend = BuiltinBackend::load("tiny", dir, &[], ServeOptions::default()).unwrap();
    let tok = load_tokenizer(&dir.join("tokenizer.json")).unwrap();
    let prompt = "Tom had a red dog.";
    let mut ids = tok.encode(prompt, true).unwrap().get_ids().to_vec();
    let n_prompt = ids.len() as u32;
    let (p, text, _, n) = collect(
        backend
            .generate(request("tiny", Prompt::Text(prompt.into()), 8, 0.0))
            .unwrap(),
    );
    assert_eq!(p, n_prompt);
    // Recompute greedily without a cache, one full forward per token.
    let mut expect = Vec::new();
    for _ in 0..n {
        let rows = logits(dir, &ids).unwrap();
        let last = rows.last().unwrap();
        let best = (0..last.len())
            .max_by(|&a, &b| last[a].total_cmp(&last[b]))
            .unwrap() as u32;
        ids.push(best);
        expect.push(best);
    }
    assert_eq!(text, tok.decode(&expect, true).unwrap());
}

#[test]
fn sixteen_concurrent_streams_all_complete_with_consistent_usage() {
    let backend = Arc::new(
        BuiltinBackend::load(
            "tiny",
            model_dir(),
            &[],
            ServeOptions {
                max_running: 8,
                max_waiting: 64,
            },
        )
        .unwrap(),
    );
    let handles: Vec<_> = (0..16)
        .map(|i| {
            let b = Arc::clone(&backend);
            std::thread::spawn(move || {
                let prompt = if i % 2 == 0 {
                    Prompt::Text(format!("Mia went to the park {i} times."))
                } else {
                    Prompt::Chat(vec![ChatMessage {
                        role: Role::User,
                        content: format!("What is {i} plus 1?"),
                    }])
                };
                let mut req = request("tiny", prompt, 12, 1.0);
                req.seed = Some(i);
                collect(b.generate(req).unwrap())
            })
        })
        .collect();
    for h in handles {
        let (p, _text, reason, n) = h.join().unwrap();
        assert!(p > 0);
        assert!((1..=12).contains(&n), "completion_tokens {n}");
        if reason == FinishReason::Length {
            assert_eq!(n, 12);
        }
    }
    let load = backend.load().unwrap();
    assert_eq!((load.running, load.waiting), (0, 0));
}

#[test]
fn bad_inputs_give_clear_errors_and_the_backend_keeps_serving() {
    let dir = model_dir();
    let backend = BuiltinBackend::load("tiny", dir, &[], ServeOptions::default()).unwrap();
    assert!(matches!(
        backend.generate(request("other", Prompt::Text("hi".into()), 4, 0.0)),
        Err(BackendError::ModelNotFound(m)) if m == "other"
    ));
    assert!(matches!(
        backend.generate(request("tiny", Prompt::Text("hi".into()), 0, 0.0)),
        Err(BackendError::InvalidRequest(_))
    ));
    let long = "the dog ran. ".repeat(100);
    assert!(matches!(
        backend.generate(request("tiny", Prompt::Text(long), 4, 0.0)),
        Err(BackendError::PromptTooLong {
            max_context: 64,
            ..
        })
    ));
    // Cancel: drop the stream after the first event; the slot is freed.
    let mut rx = backend
        .generate(request("tiny", Prompt::Text("Ben".into()), 50, 1.0))
        .unwrap();
    assert!(matches!(
        rx.blocking_recv(),
        Some(GenerationEvent::Started { .. })
    ));
    drop(rx);
    let (_, _, _, n) = collect(
        backend
            .generate(request("tiny", Prompt::Text("Zoe".into()), 3, 0.0))
            .unwrap(),
    );
    assert!(n >= 1);
    for _ in 0..100 {
        if backend.load().unwrap().running == 0 {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(
        backend.load().unwrap().running,
        0,
        "cancelled stream still running"
    );

    // Load errors name the path.
    let missing = BuiltinBackend::load(
        "x",
        Path::new("/definitely/not/here"),
        &[],
        ServeOptions::default(),
    );
    let err = missing.err().unwrap().to_string();
    assert!(err.contains("/definitely/not/here"), "{err}");
    let broken = TempDir::new("corrupt");
    for f in ["config.json", "tokenizer.json"] {
        std::fs::copy(dir.join(f), broken.path().join(f)).unwrap();
    }
    let bytes = std::fs::read(dir.join("model.safetensors")).unwrap();
    std::fs::write(
        broken.path().join("model.safetensors"),
        &bytes[..bytes.len() / 2],
    )
    .unwrap();
    let err = BuiltinBackend::load("x", broken.path(), &[], ServeOptions::default())
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("model.safetensors"), "{err}");
}

#[test]
fn an_end_of_sequence_token_is_counted_in_completion_tokens_and_never_shown() {
    let dir = model_dir();
    let tok = load_tokenizer(&dir.join("tokenizer.json")).unwrap();
    let prompt = "Tom had a red dog.";
    let ids = tok.encode(prompt, true).unwrap().get_ids().to_vec();
    let rows = logits(dir, &ids).unwrap();
    let last = rows.last().unwrap();
    let first = (0..last.len())
        .max_by(|&a, &b| last[a].total_cmp(&last[b]))
        .unwrap();
    // The same model, told that its greedy first answer token ends the sequence.
    let eos = TempDir::new("eos-first");
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_file() {
            std::fs::copy(&path, eos.path().join(path.file_name().unwrap())).unwrap();
        }
    }
    std::fs::write(
        eos.path().join("generation_config.json"),
        format!("{{\"eos_token_id\": [{first}]}}"),
    )
    .unwrap();
    let backend = BuiltinBackend::load("tiny", eos.path(), &[], ServeOptions::default()).unwrap();
    let (_, text, reason, n) = collect(
        backend
            .generate(request("tiny", Prompt::Text(prompt.into()), 8, 0.0))
            .unwrap(),
    );
    assert_eq!((text.as_str(), reason, n), ("", FinishReason::Stop, 1));
}
