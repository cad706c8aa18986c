//! Checkpoint conversion for Ferry: safe readers for PyTorch `torch.save` archives and DCP
//! metadata (a pickle machine that never executes anything), Megatron legacy and
//! `torch_dist` checkpoints ⇄ Hugging Face safetensors, streamed one tensor at a time.
//!
//! Start with [`convert`] (the `ferry convert` front) or [`inspect`].

#![forbid(unsafe_code)]

pub mod blob;
pub mod convert;
pub mod dtype;
pub mod error;
pub mod fuzzing;
pub mod hf;
pub mod megatron;
pub mod model;
pub mod pickle;
pub mod pool;
pub mod safetensors;
pub mod torch;
pub mod torch_write;
pub mod zip;

pub use convert::{
    ConvertOptions, ConvertReport, Format, Inspection, Target, convert, detect, inspect,
};
pub use dtype::DType;
pub use error::CkptError;
pub use hf::{Progress, write_hf};
pub use megatron::CanonicalSource;
pub use model::{Arch, ModelSpec};
