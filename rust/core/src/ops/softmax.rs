//! Softmax family (MXNet softmax, log_softmax).

use super::OpDef;

/// The entries of this family.
pub static OPS: &[OpDef] = &[];
