//! ferry-plan's integration tests, one binary (one link of the crate graph instead of two).

mod calibration;
mod plans;
mod trainer_hooks;
