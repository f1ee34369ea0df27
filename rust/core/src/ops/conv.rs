//! Convolution and Deconvolution.

use super::OpDef;

/// The entries of this family.
pub static OPS: &[OpDef] = &[];
