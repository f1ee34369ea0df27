//! Numeric kernels over plain slices and ndarray views; no graph or registry types here.
//!
//! A kernel that takes an `epilogue` (a fused activation, a residual add) runs it over runs
//! of the output slice it was given, never over scratch copies: the op layer tells each run's
//! place in the output from its address (`ops::over_output`).

pub mod binary;
pub mod conv;
mod conv_direct;
pub mod conv_packed;
mod conv_packed_avx2;
mod conv_pointwise;
pub mod conv_tiled;
mod conv_trim;
pub mod conv_winograd;
mod conv_winograd_vector;
pub mod copy;
pub mod dense;
mod depthwise;
mod depthwise_vector;
#[cfg(target_arch = "x86_64")]
mod depthwise_vector_avx2;
pub mod gemm;
mod lanes8;
pub mod map;
pub mod norm;
pub mod par;
pub mod pool;
mod pool2d;
#[cfg(target_arch = "x86_64")]
mod pool2d_vector;
mod pool2d_vector_avx2;
pub mod reduce;
pub mod rnn;
pub mod scratch;
pub mod softmax;
mod sub_tile_avx2;
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

/// Whether the CPU has AVX2 and FMA (x86-64-v3: every x86 server core since about 2015 and
/// the desktops without AVX-512), which the hand-written kernels' 8-lane versions need where
/// [`has_avx512`] is false. The crate targets baseline x86-64, whose plain loops run one
/// float (or four) at a time: on such a CPU, every convolution that skipped the GEMM ran 10
/// to 20 times slower than ONNX Runtime.
pub(crate) fn has_avx2_fma() -> bool {
    #[cfg(target_arch = "x86_64")]
    return std::arch::is_x86_feature_detected!("avx2")
        && std::arch::is_x86_feature_detected!("fma");
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// The widest registers a hand-written kernel may use on this CPU.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Isa {
    /// 16 float lanes and 32 registers ([`has_avx512`]).
    Avx512,
    /// 8 float lanes and 16 registers, with FMA ([`has_avx2_fma`]).
    Avx2,
    /// Plain loops (any CPU).
    Plain,
}

impl Isa {
    /// The CPU's widest.
    pub(crate) fn detect() -> Isa {
        if has_avx512() {
            Isa::Avx512
        } else if has_avx2_fma() {
            Isa::Avx2
        } else {
            Isa::Plain
        }
    }

    /// This one and every narrower one the CPU has, widest first (for tests that compare
    /// each kernel with the plain loops).
    #[cfg(test)]
    pub(crate) fn available() -> Vec<Isa> {
        [Isa::Avx512, Isa::Avx2, Isa::Plain]
            .into_iter()
            .filter(|&i| match i {
                Isa::Avx512 => has_avx512(),
                Isa::Avx2 => has_avx2_fma(),
                Isa::Plain => true,
            })
            .collect()
    }
}
