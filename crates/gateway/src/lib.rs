//! Ferry's gateway: an OpenAI-compatible router in front of engine replicas.
//!
//! Build a [`Gateway`] from a [`GatewayConfig`], add replicas through the returned
//! [`Registry`] (`upsert` / `remove` / `set_replicas`, safe under traffic), and
//! [`Gateway::serve`] it. `ferry gateway` and `ferry mock-engine` are thin wrappers
//! over [`cmd`].
#![forbid(unsafe_code)]

mod body;
pub mod cmd;
pub mod config;
mod conn;
mod date;
pub mod error;
mod h1;
pub mod health;
pub mod metrics;
mod peek;
pub mod proxy;
pub mod registry;
mod request;
pub mod route;
pub mod server;
pub mod tenancy;
mod upstream;

pub use config::{BackendConfig, GatewayConfig, KeyConfig, Policy, hash_key};
pub use error::{Error, Result};
pub use registry::{LoadSignal, Registry, ReplicaStatus};
pub use server::{Gateway, bind_workers};
