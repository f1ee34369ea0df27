//! Normalisation and regularisation (MXNet BatchNorm, LayerNorm, Dropout).

use super::OpDef;

/// The entries of this family.
pub static OPS: &[OpDef] = &[];
