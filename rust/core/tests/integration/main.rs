//! The integration tests, one module per area, linked as one binary: each binary links the
//! whole crate, and building twenty of them took minutes of CI. Apart stay `fuzz_readers`
//! (its counting global allocator would count every test's allocations) and the tests that
//! seed the global random stream and expect its numbers (`grad_norm_loss`, `initializer`,
//! `optimizer`, `module_fit`): other areas' draws in the same process would take tickets
//! between their seed and their draw.
//!
//! One area: `cargo test -p mxfn-core --test integration grad_conv::`.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic

#[path = "../common/mod.rs"]
mod common;

mod conformance_ops;
mod creation_shapes;
mod grad_broadcast;
mod grad_conv;
mod grad_rnn;
mod grad_shape;
mod io;
mod metric;
mod module;
mod module_dist;
mod ops_gradients;
mod params_file;
mod registry_coverage;
mod states;
mod symbol_json;
