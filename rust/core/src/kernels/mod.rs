//! Numeric kernels over plain slices and ndarray views; no graph or registry types here.

pub mod conv;
pub mod gemm;
pub mod par;
pub mod pool;
pub mod scratch;
