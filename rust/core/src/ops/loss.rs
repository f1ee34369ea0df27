//! Loss layers (MXNet SoftmaxOutput, LinearRegressionOutput, LogisticRegressionOutput, MAERegressionOutput).

use super::OpDef;

/// The entries of this family.
pub static OPS: &[OpDef] = &[];
