//! Integration tests of the built-in engine, compiled as one binary (see STYLE.md).

mod common;
mod http;
mod serve;
mod sigterm;
mod train;
