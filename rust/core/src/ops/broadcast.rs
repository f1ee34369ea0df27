//! Binary, scalar and n-ary elementwise operators (MXNet elemwise_*, broadcast_*, _*_scalar, add_n, clip, where, zeros_like, ones_like, BlockGrad, MakeLoss).

use super::OpDef;

/// The entries of this family.
pub static OPS: &[OpDef] = &[];
