//! Shape and indexing operators (MXNet Reshape, Flatten, transpose, expand_dims, Concat, SliceChannel, slice_axis, Embedding).

use super::OpDef;

/// The entries of this family.
pub static OPS: &[OpDef] = &[];
