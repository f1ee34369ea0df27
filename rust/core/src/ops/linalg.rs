//! Matrix products (MXNet dot, batch_dot).

use super::OpDef;

/// The entries of this family.
pub static OPS: &[OpDef] = &[];
