//! The demo's engine half, timed: train the demo model on the bundled corpus, compare the final
//! loss with the corpus's unigram entropy, then load it in `BuiltinBackend` and stream a chat
//! answer. `ferry demo` wraps the same calls with the control plane around them.
//!
//! `cargo run --release -p ferry-engine --example demo -- OUT_DIR [STEPS]`

use std::path::PathBuf;
use std::time::Instant;

use ferry_engine::{BuiltinBackend, ServeOptions, demo_train_config, train, write_demo_corpus};
use ferry_openai::{Backend, ChatMessage, GenerateRequest, GenerationEvent, Prompt, Role};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let out = PathBuf::from(
        std::env::args()
            .nth(1)
            .ok_or("usage: demo OUT_DIR [STEPS]")?,
    );
    let corpus = write_demo_corpus(&out)?;
    let mut cfg = demo_train_config(&corpus, &out.join("checkpoints"));
    if let Some(steps) = std::env::args().nth(2) {
        cfg.steps = Some(steps.parse()?);
    }
    let t0 = Instant::now();
    let mut stdout = std::io::stdout();
    let summary = train(&cfg, None, &mut stdout)?;
    let train_s = t0.elapsed().as_secs_f64();
    eprintln!(
        "trained {} params for {} steps in {train_s:.1}s: final loss {:.3} nats/token vs unigram entropy {:.3} nats/token (ratio {:.2})",
        summary.parameters,
        summary.steps,
        summary.final_loss,
        summary.unigram_entropy,
        summary.final_loss / summary.unigram_entropy
    );
    let t1 = Instant::now();
    let backend = BuiltinBackend::load("demo", &summary.checkpoint, &[], ServeOptions::default())?;
    for prompt in [
        Prompt::Chat(vec![ChatMessage {
            role: Role::User,
            content: "What is 3 plus 4?".into(),
        }]),
        Prompt::Chat(vec![ChatMessage {
            role: Role::User,
            content: "What does the owl do?".into(),
        }]),
        Prompt::Text("Lily had a white rabbit.".into()),
    ] {
        let mut rx = backend.generate(GenerateRequest {
            request_id: "demo".into(),
            model: "demo".into(),
            prompt: prompt.clone(),
            max_tokens: 48,
            temperature: 0.0,
            top_p: 1.0,
            top_k: None,
            seed: Some(1),
            stop: vec![],
        })?;
        let mut text = String::new();
        while let Some(ev) = rx.blocking_recv() {
            match ev {
                GenerationEvent::Text { delta } => text.push_str(&delta),
                GenerationEvent::Finished {
                    reason,
                    completion_tokens,
                } => {
                    eprintln!(
                        "{prompt:?}\n  -> {text:?} ({completion_tokens} tokens, {})",
                        reason.as_str()
                    );
                }
                GenerationEvent::Error(e) => return Err(e.into()),
                GenerationEvent::Started { .. } => {}
            }
        }
    }
    eprintln!(
        "serve load + 3 generations: {:.1}s; total {:.1}s",
        t1.elapsed().as_secs_f64(),
        t0.elapsed().as_secs_f64()
    );
    Ok(())
}
