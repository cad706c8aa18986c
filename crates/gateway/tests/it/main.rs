//! Integration tests of the gateway over real loopback sockets: in-process mock
//! replicas and gateways, mock engine child processes, and the official `openai`
//! Python client.

mod api;
mod common;
mod failover;
mod python;
mod routing;
mod server;
mod tenancy;
mod upstream;
mod workers;
