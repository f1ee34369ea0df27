//! Numeric kernels over plain slices and ndarray views; no graph or registry types here.
//!
//! A kernel that takes an `epilogue` (a fused activation, a residual add) runs it over runs
//! of the output slice it was given, never over scratch copies: the op layer tells each run's
//! place in the output from its address (`ops::over_output`).

pub mod binary;
pub mod conv;
mod conv_direct;
pub mod conv_packed;
mod conv_pointwise;
pub mod conv_tiled;
mod conv_trim;
pub mod copy;
pub mod dense;
mod depthwise;
mod depthwise_vector;
pub mod gemm;
pub mod map;
pub mod norm;
pub mod par;
pub mod pool;
mod pool2d;
#[cfg(target_arch = "x86_64")]
mod pool2d_vector;
pub mod reduce;
pub mod rnn;
pub mod scratch;
pub mod softmax;
pub mod tuning;
pub mod unary;

/// Whether the CPU has AVX-512F, which the hand-written vector kernels (tiled convolution,
/// small-plane depthwise) need; the crate itself targets baseline x86-64.
pub(crate) fn has_avx512() -> bool {
    #[cfg(target_arch = "x86_64")]
    return std::arch::is_x86_feature_detected!("avx512f");
    #[cfg(not(target_arch = "x86_64"))]
    false
}
