//! End-to-end tests of the `ferry` binary: a real control plane process, real rank
//! processes, a real SQLite file, real HTTP on loopback. All modules build as one
//! test binary.

mod control_plane;
mod convert;
mod gateway;
mod harness;
mod labels;
mod launchers;
mod preemption;
mod serve;
mod sim;
mod sweep;
