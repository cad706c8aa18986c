//! Training data: plain text (pretraining windows) and chat JSONL (SFT, assistant-only loss).
//!
//! Examples are fixed once tokenized; the order in epoch `e` is a shuffle seeded by
//! `(seed, e)`, so the data position of a run is a single counter (`samples_seen`) that a
//! checkpoint stores and a resumed run continues from.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use candle_core::{Device, Tensor};
use serde::{Deserialize, Serialize};
use tokenizers::Tokenizer;

use crate::error::{EngineError, Result};
use crate::rng::Rng;
use crate::tokenize::{ChatTemplate, END_OF_TEXT, encode};

/// How the data file is laid out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DataFormat {
    /// Plain UTF-8 text, learned as one stream of tokens (pretraining).
    Text,
    /// JSON lines `{"messages":[{"role":…,"content":…}]}`; only assistant tokens are learned.
    Chat,
}

/// Where the training data is and how to read it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DataConfig {
    /// The data file.
    pub path: PathBuf,
    /// `text` or `chat`.
    pub format: DataFormat,
}

/// One training example: `seq_len + 1` token ids and a weight per predicted token.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Example {
    pub ids: Vec<u32>,
    /// Weight of predicting `ids[i + 1]` from `ids[..=i]`; length `seq_len`.
    pub weights: Vec<f32>,
}

/// A tokenized data set with a deterministic, resumable order.
#[derive(Debug, Clone)]
pub(crate) struct Dataset {
    examples: Vec<Example>,
    seq_len: usize,
    seed: u64,
    /// Token ids of the whole corpus (text format), for the unigram entropy.
    pub stream: Vec<u32>,
}

#[derive(Deserialize)]
struct ChatLine {
    messages: Vec<ChatMsg>,
}

#[derive(Deserialize)]
struct ChatMsg {
    role: String,
    content: String,
}

/// Reads a chat JSONL file into `(role, content)` conversations, naming the bad line on error.
pub(crate) fn read_chat_jsonl(path: &Path) -> Result<Vec<Vec<(String, String)>>> {
    let text = std::fs::read_to_string(path).map_err(|e| EngineError::io(path, e))?;
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let parsed: ChatLine = serde_json::from_str(line).map_err(|e| EngineError::Json {
            path: format!("{}:{}", path.display(), n + 1),
            message: format!("{e}; expected {{\"messages\":[{{\"role\":…,\"content\":…}}]}}"),
        })?;
        for m in &parsed.messages {
            if !["system", "user", "assistant", "developer", "tool"].contains(&m.role.as_str()) {
                return Err(EngineError::Data {
                    path: format!("{}:{}", path.display(), n + 1),
                    message: format!("unknown role `{}`; use system, user or assistant", m.role),
                });
            }
        }
        out.push(
            parsed
                .messages
                .into_iter()
                .map(|m| (m.role, m.content))
                .collect(),
        );
    }
    Ok(out)
}

impl Dataset {
    /// Tokenizes `cfg.path` into examples of `seq_len + 1` tokens.
    pub fn load(cfg: &DataConfig, tok: &Tokenizer, seq_len: usize, seed: u64) -> Result<Self> {
        let path = &cfg.path;
        let mut examples = Vec::new();
        let mut stream = Vec::new();
        match cfg.format {
            DataFormat::Text => {
                let text = std::fs::read_to_string(path).map_err(|e| EngineError::io(path, e))?;
                // Encode paragraph by paragraph: bounded memory per call, same ids as one call
                // would give at the paragraph boundaries the pre-tokenizer already splits on.
                for para in text.split_inclusive("\n\n") {
                    stream.extend(encode(tok, para)?);
                }
                if let Some(eot) = tok.token_to_id(END_OF_TEXT) {
                    stream.push(eot);
                }
                let mut start = 0;
                while start + seq_len < stream.len() {
                    examples.push(Example {
                        ids: stream[start..start + seq_len + 1].to_vec(),
                        weights: vec![1.0; seq_len],
                    });
                    start += seq_len;
                }
            }
            DataFormat::Chat => {
                let tmpl = ChatTemplate::for_tokenizer(tok);
                let pad = tok.token_to_id(END_OF_TEXT).unwrap_or(0);
                for conv in read_chat_jsonl(path)? {
                    let r = tmpl.render(
                        tok,
                        conv.iter().map(|(r, c)| (r.as_str(), c.as_str())),
                        false,
                    )?;
                    let mut ids = r.ids;
                    let mut train = r.train;
                    ids.truncate(seq_len + 1);
                    train.truncate(seq_len + 1);
                    ids.resize(seq_len + 1, pad);
                    train.resize(seq_len + 1, 0.0);
                    let weights = train[1..].to_vec();
                    if weights.iter().any(|w| *w > 0.0) {
                        examples.push(Example { ids, weights });
                    }
                }
            }
        }
        if examples.is_empty() {
            return Err(EngineError::Data {
                path: path.display().to_string(),
                message: format!(
                    "yields no training example of {seq_len}+1 tokens (text too short, or no assistant turn within seqLen); add data or lower seqLen"
                ),
            });
        }
        Ok(Self {
            examples,
            seq_len,
            seed,
            stream,
        })
    }

    /// Number of examples in one epoch.
    pub fn len(&self) -> usize {
        self.examples.len()
    }

    fn order(&self, epoch: usize) -> Vec<usize> {
        let mut idx: Vec<usize> = (0..self.examples.len()).collect();
        let mut rng = Rng::new(self.seed.wrapping_mul(1_000_003).wrapping_add(epoch as u64));
        rng.shuffle(&mut idx);
        idx
    }

    /// The batch of `batch` examples starting at data position `position`:
    /// `(inputs [b, seq], targets [b*seq], weights [b*seq])`.
    pub fn batch(&self, position: usize, batch: usize) -> Result<(Tensor, Tensor, Tensor)> {
        let n = self.examples.len();
        let mut cached: Option<(usize, Vec<usize>)> = None;
        let (mut inputs, mut targets, mut weights) = (Vec::new(), Vec::new(), Vec::new());
        for k in position..position + batch {
            let epoch = k / n;
            if cached.as_ref().is_none_or(|(e, _)| *e != epoch) {
                cached = Some((epoch, self.order(epoch)));
            }
            let ex = &self.examples[cached.as_ref().expect("set above").1[k % n]];
            inputs.extend_from_slice(&ex.ids[..self.seq_len]);
            targets.extend_from_slice(&ex.ids[1..]);
            weights.extend_from_slice(&ex.weights);
        }
        let dev = Device::Cpu;
        Ok((
            Tensor::from_vec(inputs, (batch, self.seq_len), &dev)?,
            Tensor::from_vec(targets, batch * self.seq_len, &dev)?,
            Tensor::from_vec(weights, batch * self.seq_len, &dev)?,
        ))
    }
}

/// Entropy in nats of the token unigram distribution of `ids`: the loss a model that ignores
/// context would reach, so a trained model's loss must end clearly below it.
pub fn unigram_entropy(ids: &[u32]) -> f64 {
    if ids.is_empty() {
        return 0.0;
    }
    let mut counts: HashMap<u32, usize> = HashMap::new();
    for id in ids {
        *counts.entry(*id).or_default() += 1;
    }
    let n = ids.len() as f64;
    counts
        .values()
        .map(|&c| {
            let p = c as f64 / n;
            -p * p.ln()
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unigram_entropy_matches_closed_forms() {
        assert_eq!(unigram_entropy(&[]), 0.0);
        assert_eq!(unigram_entropy(&[5, 5, 5]), 0.0);
        let h = unigram_entropy(&[1, 2, 3, 4]);
        assert!((h - 4f64.ln()).abs() < 1e-12);
        let h = unigram_entropy(&[1, 1, 1, 2]);
        let expect = -(0.75f64 * 0.75f64.ln() + 0.25 * 0.25f64.ln());
        assert!((h - expect).abs() < 1e-12);
    }

    #[test]
    fn chat_jsonl_errors_name_the_line() {
        let dir = std::env::temp_dir().join(format!("ferry-engine-data-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("bad.jsonl");
        std::fs::write(
            &p,
            "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}\n{oops}\n",
        )
        .unwrap();
        let err = read_chat_jsonl(&p).unwrap_err().to_string();
        assert!(err.contains("bad.jsonl:2"), "{err}");
        std::fs::write(
            &p,
            "{\"messages\":[{\"role\":\"robot\",\"content\":\"hi\"}]}\n",
        )
        .unwrap();
        let err = read_chat_jsonl(&p).unwrap_err().to_string();
        assert!(
            err.contains("bad.jsonl:1") && err.contains("robot"),
            "{err}"
        );
        std::fs::remove_dir_all(&dir).ok();
    }
}
