//! ferry-k8s integration tests, one binary (see STYLE.md).

mod admission;
mod bad_input;
mod chart;
mod crds;
mod e2e;
mod endpoints;
mod leader;
mod manifests;
mod mock;
mod operator;
mod ranks;
mod schema;
mod specs;
