//! Tokenizers: training a byte-level BPE when none is given, and the ChatML chat template.
//!
//! The template is fixed (documented in the crate README section of the report):
//! `<|im_start|>{role}\n{content}<|im_end|>\n` per message, and generation continues after
//! `<|im_start|>assistant\n`. Tokenizers without these special tokens fall back to a plain
//! `Role: content` transcript.

use std::path::Path;

use tokenizers::models::bpe::{BPE, BpeTrainerBuilder};
use tokenizers::normalizers::NormalizerWrapper;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::{AddedToken, Tokenizer, TokenizerBuilder};

use crate::error::{EngineError, Result};

/// End of a document; also the padding token.
pub const END_OF_TEXT: &str = "<|endoftext|>";
/// Opens a chat turn (ChatML).
pub const IM_START: &str = "<|im_start|>";
/// Closes a chat turn (ChatML); generation of an assistant turn stops here.
pub const IM_END: &str = "<|im_end|>";

/// The ChatML template in Jinja, written to `tokenizer_config.json` so Hugging Face tools agree.
pub const CHATML_JINJA: &str = "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

fn tok_err(path: &Path, e: impl std::fmt::Display) -> EngineError {
    EngineError::Tokenizer {
        path: path.display().to_string(),
        message: e.to_string(),
    }
}

/// Trains a byte-level BPE of at most `vocab_size` tokens on the text files `corpus`,
/// with the special tokens above, and writes it to `out` (`tokenizer.json`).
pub fn train_bpe(corpus: &[&Path], vocab_size: usize, out: &Path) -> Result<Tokenizer> {
    let specials = [END_OF_TEXT, IM_START, IM_END]
        .iter()
        .map(|s| AddedToken::from(s.to_string(), true))
        .collect();
    let mut trainer = BpeTrainerBuilder::new()
        .show_progress(false)
        .vocab_size(vocab_size)
        .min_frequency(2)
        .special_tokens(specials)
        .initial_alphabet(ByteLevel::alphabet().into_iter().collect())
        .build();
    let mut builder = TokenizerBuilder::new()
        .with_model(BPE::default())
        .with_normalizer(None::<NormalizerWrapper>)
        .with_pre_tokenizer(Some(ByteLevel::new(false, true, true)))
        .with_post_processor(Some(ByteLevel::new(false, true, true)))
        .with_decoder(Some(ByteLevel::default()))
        .build()
        .map_err(|e| tok_err(out, e))?;
    let files: Vec<String> = corpus.iter().map(|p| p.display().to_string()).collect();
    builder
        .train_from_files(&mut trainer, files)
        .map_err(|e| tok_err(corpus[0], format!("BPE training failed: {e}")))?
        .save(out, false)
        .map_err(|e| tok_err(out, e))?;
    load_tokenizer(out)
}

/// Loads a `tokenizer.json`, naming the file on failure.
pub fn load_tokenizer(path: &Path) -> Result<Tokenizer> {
    if !path.exists() {
        return Err(tok_err(
            path,
            "file not found; give a tokenizer.json or omit `tokenizer` to train a BPE",
        ));
    }
    Tokenizer::from_file(path).map_err(|e| tok_err(path, e))
}

/// Encodes text without adding special tokens.
pub fn encode(tok: &Tokenizer, text: &str) -> Result<Vec<u32>> {
    let enc = tok
        .encode(text, false)
        .map_err(|e| EngineError::Tokenizer {
            path: "<in memory>".into(),
            message: e.to_string(),
        })?;
    Ok(enc.get_ids().to_vec())
}

/// A chat transcript rendered to token ids, with a per-token training weight
/// (1 for assistant content and its closing marker, 0 elsewhere).
#[derive(Debug, Clone, PartialEq)]
pub struct ChatTokens {
    /// Token ids of the whole transcript.
    pub ids: Vec<u32>,
    /// 1.0 where the token is something the assistant must learn to produce.
    pub train: Vec<f32>,
}

/// How a tokenizer renders chats: ChatML when it knows the markers, otherwise a plain transcript.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChatTemplate {
    im_start: Option<u32>,
    im_end: Option<u32>,
}

impl ChatTemplate {
    /// The template suited to `tok`.
    pub fn for_tokenizer(tok: &Tokenizer) -> Self {
        match (tok.token_to_id(IM_START), tok.token_to_id(IM_END)) {
            (Some(s), Some(e)) => Self {
                im_start: Some(s),
                im_end: Some(e),
            },
            _ => Self {
                im_start: None,
                im_end: None,
            },
        }
    }

    /// The token that ends an assistant turn, if the template has one.
    pub fn end_of_turn(&self) -> Option<u32> {
        self.im_end
    }

    /// Renders `(role, content)` messages; with `generation_prompt`, appends the assistant header.
    pub fn render<'a>(
        &self,
        tok: &Tokenizer,
        messages: impl IntoIterator<Item = (&'a str, &'a str)>,
        generation_prompt: bool,
    ) -> Result<ChatTokens> {
        let mut out = ChatTokens {
            ids: Vec::new(),
            train: Vec::new(),
        };
        let push = |ids: Vec<u32>, w: f32, out: &mut ChatTokens| {
            out.train.extend(std::iter::repeat_n(w, ids.len()));
            out.ids.extend(ids);
        };
        for (role, content) in messages {
            let learn = if role == "assistant" { 1.0 } else { 0.0 };
            match (self.im_start, self.im_end) {
                (Some(s), Some(e)) => {
                    let mut head = vec![s];
                    head.extend(encode(tok, &format!("{role}\n"))?);
                    push(head, 0.0, &mut out);
                    push(encode(tok, content)?, learn, &mut out);
                    push(vec![e], learn, &mut out);
                    push(encode(tok, "\n")?, 0.0, &mut out);
                }
                _ => {
                    push(encode(tok, &format!("{}: ", title(role)))?, 0.0, &mut out);
                    push(encode(tok, &format!("{content}\n"))?, learn, &mut out);
                }
            }
        }
        if generation_prompt {
            match self.im_start {
                Some(s) => {
                    let mut head = vec![s];
                    head.extend(encode(tok, "assistant\n")?);
                    push(head, 0.0, &mut out);
                }
                None => push(encode(tok, "Assistant:")?, 0.0, &mut out),
            }
        }
        Ok(out)
    }
}

fn title(role: &str) -> String {
    let mut c = role.chars();
    match c.next() {
        Some(f) => f.to_uppercase().chain(c).collect(),
        None => String::new(),
    }
}

/// Writes `tokenizer_config.json` with the ChatML template and special tokens.
pub fn write_tokenizer_config(dir: &Path, tok: &Tokenizer) -> Result<()> {
    let mut v = serde_json::json!({
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": 1_000_000,
        "clean_up_tokenization_spaces": false,
    });
    let obj = v.as_object_mut().expect("object literal");
    if tok.token_to_id(END_OF_TEXT).is_some() {
        obj.insert("eos_token".into(), END_OF_TEXT.into());
        obj.insert("pad_token".into(), END_OF_TEXT.into());
    }
    if ChatTemplate::for_tokenizer(tok).im_start.is_some() {
        obj.insert("chat_template".into(), CHATML_JINJA.into());
    }
    let path = dir.join("tokenizer_config.json");
    std::fs::write(&path, serde_json::to_vec_pretty(&v).expect("json value"))
        .map_err(|e| EngineError::io(&path, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trains_bpe_and_renders_chatml_with_assistant_only_weights() {
        let dir = std::env::temp_dir().join(format!("ferry-engine-tok-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let corpus = dir.join("c.txt");
        let text = "the cat sat on the mat. the dog sat on the log.\n".repeat(50);
        std::fs::write(&corpus, &text).unwrap();
        let out = dir.join("tokenizer.json");
        let tok = train_bpe(&[&corpus], 300, &out).unwrap();
        assert!(out.exists());
        assert!(tok.get_vocab_size(true) <= 300);
        let ids = encode(&tok, "the cat sat on the mat.").unwrap();
        assert!(
            ids.len() < "the cat sat on the mat.".len(),
            "BPE merged nothing"
        );
        assert_eq!(tok.decode(&ids, false).unwrap(), "the cat sat on the mat.");
        // Bytes never seen in training still round-trip (byte-level alphabet).
        let odd = "héllo ✓";
        let odd_ids = encode(&tok, odd).unwrap();
        assert_eq!(tok.decode(&odd_ids, false).unwrap(), odd);

        let tmpl = ChatTemplate::for_tokenizer(&tok);
        let chat = tmpl
            .render(&tok, [("user", "hi"), ("assistant", "the cat")], false)
            .unwrap();
        assert_eq!(chat.ids.len(), chat.train.len());
        let learned: Vec<u32> = chat
            .ids
            .iter()
            .zip(&chat.train)
            .filter(|(_, w)| **w > 0.0)
            .map(|(i, _)| *i)
            .collect();
        assert_eq!(
            tok.decode(&learned, false).unwrap(),
            format!("the cat{IM_END}")
        );
        let text = tok.decode(&chat.ids, false).unwrap();
        assert_eq!(
            text,
            "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\nthe cat<|im_end|>\n"
        );
        std::fs::remove_dir_all(&dir).ok();
    }
}
