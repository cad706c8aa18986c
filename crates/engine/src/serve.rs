//! `BuiltinBackend`: the OpenAI [`Backend`] over this crate's model, for `ferry serve`.
//!
//! One scheduler thread owns the models. Requests are tokenized on the caller's thread,
//! queued in a bounded channel (full: `Overloaded`), and admitted into a running set of at
//! most `max_running` sequences. Each scheduler iteration advances every running sequence
//! by one token (prefill on its first turn) with its own KV cache, so new requests join
//! between tokens instead of waiting for others to finish. A sequence whose receiver was
//! dropped is removed at its next turn.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};

use candle_core::{Device, Tensor};
use ferry_openai::{
    Backend, BackendError, FinishReason, GenerateRequest, GenerationEvent, GenerationStream, Load,
    ModelInfo, Prompt, StopMatcher, StopStep,
};
use tokenizers::Tokenizer;
use tokio::sync::mpsc;

use crate::error::{EngineError, Result};
use crate::model::{KvCache, Model, last_row};
use crate::rng::Rng;
use crate::tokenize::{ChatTemplate, END_OF_TEXT, IM_END, load_tokenizer};
use crate::weights::load_model_with_adapter;

/// Serving limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServeOptions {
    /// Sequences generating at once (more wait in the queue).
    pub max_running: usize,
    /// Requests that may wait for a slot; beyond this `generate` answers `Overloaded`.
    pub max_waiting: usize,
}

impl Default for ServeOptions {
    fn default() -> Self {
        Self {
            max_running: 16,
            max_waiting: 256,
        }
    }
}

/// One loaded model (a base, or a base with a PEFT adapter merged in).
struct Served {
    info: ModelInfo,
    model: Model,
    eos: Vec<u32>,
}

/// Everything shared between request threads and the scheduler.
struct Shared {
    tokenizer: Tokenizer,
    template: ChatTemplate,
    models: Vec<Served>,
    running: AtomicU32,
    waiting: AtomicU32,
    seed_counter: AtomicU64,
}

/// A request after tokenization, waiting for the scheduler.
struct Job {
    model: usize,
    prompt: Vec<u32>,
    max_tokens: usize,
    temperature: f32,
    top_p: f32,
    top_k: Option<u32>,
    rng: Rng,
    stop: StopMatcher,
    tx: mpsc::Sender<GenerationEvent>,
}

/// The built-in engine behind the OpenAI API: loads Hugging Face model directories (and
/// PEFT adapters) and generates on a scheduler thread.
pub struct BuiltinBackend {
    shared: Arc<Shared>,
    queue: SyncSender<Job>,
}

impl BuiltinBackend {
    /// Loads `model_dir` as model `name`, plus each `(adapter_name, adapter_dir)` as a model
    /// whose `parent` is `name`, and starts the scheduler thread.
    ///
    /// Errors name the missing directory or corrupt file.
    pub fn load(
        name: &str,
        model_dir: &Path,
        adapters: &[(String, PathBuf)],
        opts: ServeOptions,
    ) -> Result<Self> {
        if !model_dir.is_dir() {
            return Err(EngineError::weights(
                model_dir,
                "model directory does not exist; pass a directory with config.json, model.safetensors and tokenizer.json",
            ));
        }
        let tokenizer = load_tokenizer(&model_dir.join("tokenizer.json"))?;
        let base = load_model_with_adapter(model_dir, None)?;
        let eos = eos_ids(model_dir, &base, &tokenizer);
        let info = |id: &str, parent: Option<String>, m: &Model| ModelInfo {
            max_model_len: Some(m.config().max_position_embeddings as u32),
            parent,
            ..ModelInfo::new(id)
        };
        let mut models = vec![Served {
            info: info(name, None, &base),
            model: base,
            eos: eos.clone(),
        }];
        for (aname, adir) in adapters {
            if models.iter().any(|m| m.info.id == *aname) {
                return Err(EngineError::config(
                    "adapter",
                    format!("name `{aname}` is used twice"),
                ));
            }
            let m = load_model_with_adapter(model_dir, Some(adir))?;
            models.push(Served {
                info: info(aname.as_str(), Some(name.to_string()), &m),
                model: m,
                eos: eos.clone(),
            });
        }
        let shared = Arc::new(Shared {
            template: ChatTemplate::for_tokenizer(&tokenizer),
            tokenizer,
            models,
            running: AtomicU32::new(0),
            waiting: AtomicU32::new(0),
            seed_counter: AtomicU64::new(
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_nanos() as u64)
                    .unwrap_or(0),
            ),
        });
        let (queue, jobs) = sync_channel(opts.max_waiting.max(1));
        let worker = Arc::clone(&shared);
        std::thread::Builder::new()
            .name("ferry-engine-scheduler".into())
            .spawn(move || schedule(&worker, &jobs, opts.max_running.max(1)))
            .map_err(|e| EngineError::io("<scheduler thread>", e))?;
        Ok(Self { shared, queue })
    }

    fn tokenize(&self, prompt: &Prompt) -> std::result::Result<Vec<u32>, BackendError> {
        let tok = &self.shared.tokenizer;
        let ids = match prompt {
            Prompt::Text(text) => tok
                .encode(text.as_str(), true)
                .map_err(|e| {
                    BackendError::InvalidRequest(format!("prompt cannot be tokenized: {e}"))
                })?
                .get_ids()
                .to_vec(),
            Prompt::Chat(messages) => {
                self.shared
                    .template
                    .render(
                        tok,
                        messages
                            .iter()
                            .map(|m| (m.role.as_str(), m.content.as_str())),
                        true,
                    )
                    .map_err(|e| BackendError::InvalidRequest(e.to_string()))?
                    .ids
            }
        };
        if ids.is_empty() {
            // An empty completion prompt starts from the end-of-text token, like a new document.
            return match tok.token_to_id(END_OF_TEXT) {
                Some(id) => Ok(vec![id]),
                None => Err(BackendError::InvalidRequest("prompt is empty".into())),
            };
        }
        Ok(ids)
    }
}

/// End-of-sequence ids from config.json, generation_config.json and the chat template.
fn eos_ids(dir: &Path, model: &Model, tok: &Tokenizer) -> Vec<u32> {
    let mut ids: Vec<u32> = model.config().eos_token_id.into_iter().collect();
    if let Ok(text) = std::fs::read_to_string(dir.join("generation_config.json"))
        && let Ok(v) = serde_json::from_str::<serde_json::Value>(&text)
    {
        match v.get("eos_token_id") {
            Some(serde_json::Value::Number(n)) => ids.extend(n.as_u64().map(|x| x as u32)),
            Some(serde_json::Value::Array(a)) => {
                ids.extend(a.iter().filter_map(|x| x.as_u64()).map(|x| x as u32))
            }
            _ => {}
        }
    }
    ids.extend(tok.token_to_id(IM_END));
    ids.extend(tok.token_to_id(END_OF_TEXT));
    ids.sort_unstable();
    ids.dedup();
    ids
}

impl Backend for BuiltinBackend {
    fn models(&self) -> Vec<ModelInfo> {
        self.shared.models.iter().map(|m| m.info.clone()).collect()
    }

    fn generate(
        &self,
        req: GenerateRequest,
    ) -> std::result::Result<GenerationStream, BackendError> {
        let model = self
            .shared
            .models
            .iter()
            .position(|m| m.info.id == req.model)
            .ok_or_else(|| BackendError::ModelNotFound(req.model.clone()))?;
        if req.max_tokens == 0 {
            return Err(BackendError::InvalidRequest(
                "max_tokens must be at least 1".into(),
            ));
        }
        let prompt = self.tokenize(&req.prompt)?;
        let ctx = self.shared.models[model]
            .model
            .config()
            .max_position_embeddings;
        if prompt.len() >= ctx {
            return Err(BackendError::PromptTooLong {
                prompt_tokens: prompt.len() as u32,
                max_context: ctx as u32,
            });
        }
        let max_tokens = (req.max_tokens as usize).min(ctx - prompt.len());
        // One event per token plus Started and the end: sends from the scheduler never block.
        let (tx, rx) = mpsc::channel(max_tokens + 3);
        let seed = req.seed.unwrap_or_else(|| {
            self.shared
                .seed_counter
                .fetch_add(0x9e37_79b9, Ordering::Relaxed)
        });
        tx.try_send(GenerationEvent::Started {
            prompt_tokens: prompt.len() as u32,
        })
        .map_err(|_| BackendError::Internal("fresh channel refused an event".into()))?;
        let job = Job {
            model,
            prompt,
            max_tokens,
            temperature: req.temperature,
            top_p: req.top_p,
            top_k: req.top_k,
            rng: Rng::new(seed),
            stop: StopMatcher::new(req.stop),
            tx,
        };
        self.shared.waiting.fetch_add(1, Ordering::SeqCst);
        match self.queue.try_send(job) {
            Ok(()) => Ok(rx),
            Err(TrySendError::Full(_)) => {
                self.shared.waiting.fetch_sub(1, Ordering::SeqCst);
                Err(BackendError::Overloaded)
            }
            Err(TrySendError::Disconnected(_)) => {
                self.shared.waiting.fetch_sub(1, Ordering::SeqCst);
                Err(BackendError::Unavailable(
                    "the scheduler thread has stopped".into(),
                ))
            }
        }
    }

    fn load(&self) -> Option<Load> {
        Some(Load {
            running: self.shared.running.load(Ordering::SeqCst),
            waiting: self.shared.waiting.load(Ordering::SeqCst),
            kv_cache_usage: None,
        })
    }
}

/// A running sequence.
struct Seq {
    job: Job,
    cache: KvCache,
    generated: Vec<u32>,
    /// Tokens already turned into text: `generated[..read]`; `prefix..read` is re-decoded
    /// with each new token so multi-byte characters are emitted only once complete.
    prefix: usize,
    read: usize,
}

enum Turn {
    Continue,
    /// The sequence is over; these events go to its client once it has left the running
    /// set, so a client that saw `Finished` never observes itself still counted as running.
    Done(Vec<GenerationEvent>),
}

fn schedule(shared: &Shared, jobs: &Receiver<Job>, max_running: usize) {
    let mut running: Vec<Seq> = Vec::new();
    loop {
        if running.is_empty() {
            match jobs.recv() {
                Ok(job) => admit(shared, &mut running, job),
                Err(_) => return, // backend dropped
            }
        }
        while running.len() < max_running {
            match jobs.try_recv() {
                Ok(job) => admit(shared, &mut running, job),
                Err(_) => break,
            }
        }
        let mut i = 0;
        while i < running.len() {
            let last = match step(shared, &mut running[i]) {
                Ok(Turn::Continue) => {
                    i += 1;
                    continue;
                }
                Ok(Turn::Done(events)) => events,
                Err(e) => vec![GenerationEvent::Error(BackendError::Internal(
                    e.to_string(),
                ))],
            };
            let seq = running.swap_remove(i);
            shared.running.fetch_sub(1, Ordering::SeqCst);
            for event in last {
                let _ = seq.job.tx.try_send(event);
            }
        }
    }
}

fn admit(shared: &Shared, running: &mut Vec<Seq>, job: Job) {
    shared.waiting.fetch_sub(1, Ordering::SeqCst);
    shared.running.fetch_add(1, Ordering::SeqCst);
    running.push(Seq {
        job,
        cache: KvCache::default(),
        generated: Vec::new(),
        prefix: 0,
        read: 0,
    });
}

/// Advances one sequence by one token.
fn step(shared: &Shared, seq: &mut Seq) -> Result<Turn> {
    if seq.job.tx.is_closed() {
        return Ok(Turn::Done(Vec::new())); // client went away: cancel
    }
    let served = &shared.models[seq.job.model];
    let input: &[u32] = if seq.cache.is_empty() {
        &seq.job.prompt
    } else {
        std::slice::from_ref(seq.generated.last().expect("a token follows prefill"))
    };
    let ids = Tensor::new(input, &Device::Cpu)?.unsqueeze(0)?;
    let logits = served.model.forward(&ids, Some(&mut seq.cache), None)?;
    let row = last_row(&logits)?;
    let mut rng = seq.job.rng;
    let next = sample(&row, &seq.job, &mut rng).unwrap_or(0);
    seq.job.rng = rng;
    // The end-of-sequence token is generated (and paid for) like any other, so it is
    // pushed and counted in `completion_tokens` as vLLM and OpenAI count it; it is
    // never decoded into text.
    seq.generated.push(next);
    if served.eos.contains(&next) {
        let tail = seq.job.stop.flush();
        return finish(seq, tail, FinishReason::Stop);
    }
    let delta = decode_delta(&shared.tokenizer, seq)?;
    match seq.job.stop.push(&delta) {
        StopStep::Stopped(text) => finish(seq, text, FinishReason::Stop),
        StopStep::Continue(text) => {
            if seq.generated.len() >= seq.job.max_tokens {
                let mut text = text;
                text.push_str(&seq.job.stop.flush());
                return finish(seq, text, FinishReason::Length);
            }
            if !text.is_empty()
                && seq
                    .job
                    .tx
                    .try_send(GenerationEvent::Text { delta: text })
                    .is_err()
            {
                return Ok(Turn::Done(Vec::new()));
            }
            Ok(Turn::Continue)
        }
    }
}

fn finish(seq: &Seq, text: String, reason: FinishReason) -> Result<Turn> {
    let mut events = Vec::with_capacity(2);
    if !text.is_empty() {
        events.push(GenerationEvent::Text { delta: text });
    }
    events.push(GenerationEvent::Finished {
        reason,
        completion_tokens: seq.generated.len() as u32,
    });
    Ok(Turn::Done(events))
}

/// Text completed by the newest token, holding back incomplete UTF-8 sequences.
fn decode_delta(tok: &Tokenizer, seq: &mut Seq) -> Result<String> {
    let dec = |ids: &[u32]| {
        tok.decode(ids, true).map_err(|e| EngineError::Tokenizer {
            path: "<serving tokenizer>".into(),
            message: e.to_string(),
        })
    };
    let before = dec(&seq.generated[seq.prefix..seq.read])?;
    let after = dec(&seq.generated[seq.prefix..])?;
    if after.len() > before.len()
        && after.is_char_boundary(before.len())
        && !after.ends_with('\u{FFFD}')
    {
        let delta = after[before.len()..].to_string();
        seq.prefix = seq.read;
        seq.read = seq.generated.len();
        Ok(delta)
    } else {
        Ok(String::new())
    }
}

/// Picks the next token: greedy at temperature 0, else temperature, top-k and top-p sampling.
fn sample(logits: &[f32], job: &Job, rng: &mut Rng) -> Option<u32> {
    let argmax = || {
        logits
            .iter()
            .enumerate()
            .max_by(|a, b| a.1.total_cmp(b.1))
            .map(|(i, _)| i as u32)
    };
    if job.temperature <= 0.0 {
        return argmax();
    }
    let t = job.temperature as f64;
    let mut order: Vec<usize> = (0..logits.len())
        .filter(|&i| logits[i].is_finite())
        .collect();
    order.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]));
    if let Some(k) = job.top_k
        && k > 0
    {
        order.truncate(k as usize);
    }
    let max = *logits.get(*order.first()?)? as f64;
    let mut probs: Vec<f64> = order
        .iter()
        .map(|&i| ((logits[i] as f64 - max) / t).exp())
        .collect();
    let total: f64 = probs.iter().sum();
    probs.iter_mut().for_each(|p| *p /= total);
    let mut keep = probs.len();
    if job.top_p < 1.0 {
        let mut acc = 0.0;
        for (n, p) in probs.iter().enumerate() {
            acc += p;
            if acc >= job.top_p as f64 {
                keep = n + 1;
                break;
            }
        }
    }
    let mass: f64 = probs[..keep].iter().sum();
    let mut u = rng.uniform() * mass;
    for (n, p) in probs[..keep].iter().enumerate() {
        u -= p;
        if u <= 0.0 {
            return Some(order[n] as u32);
        }
    }
    Some(order[keep - 1] as u32)
}
