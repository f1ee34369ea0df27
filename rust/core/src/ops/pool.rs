//! Pooling (max, avg, sum; global; valid and full conventions).

use super::OpDef;

/// The entries of this family.
pub static OPS: &[OpDef] = &[];
