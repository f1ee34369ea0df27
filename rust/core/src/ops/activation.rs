//! Activation functions: MXNet `Activation` (relu, sigmoid, tanh, softrelu, softsign).

use super::elemwise::{unary_fn, Unary};
use super::params::{param, ParamKind::*};
use super::{OpDef, Operator, Params};
use crate::error::{Error, Result};
use std::sync::Arc;

/// The entries of this family.
pub static OPS: &[OpDef] = &[OpDef {
    name: "Activation",
    aliases: &[],
    py_name: None,
    doc: "Applies an activation function elementwise: relu max(x, 0), sigmoid 1/(1+e^-x), \
          tanh, softrelu log(1+e^x), softsign x/(1+|x|).",
    params: &[param(
        "act_type",
        Enum(&["relu", "sigmoid", "tanh", "softrelu", "softsign"]),
        None,
        "Activation function to apply.",
    )],
    create: create_activation,
    variadic: None,
}];

fn create_activation(p: &Params) -> Result<Arc<dyn Operator>> {
    let t = p.str("act_type")?;
    let f = unary_fn(&t).ok_or_else(|| Error::Msg(format!("internal: no activation {t}")))?;
    Ok(Arc::new(Unary(f)))
}
