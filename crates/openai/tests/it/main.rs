//! ferry-openai's integration tests, one binary (one link of the crate graph instead of two).

mod http;
mod python_client;
