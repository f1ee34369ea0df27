//! Reductions and index operators (MXNet sum, mean, max, min, argmax, one_hot).

use super::OpDef;

/// The entries of this family.
pub static OPS: &[OpDef] = &[];
