//! ckpt's integration tests, one binary (each test binary links the whole crate graph;
//! one binary keeps CI's link time and disk use down).

mod common;
mod dist_common_pt;
mod engine_logits;
mod fixtures;
mod hostile;
mod older_names;
mod roundtrip;
