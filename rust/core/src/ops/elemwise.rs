//! Unary elementwise operators (MXNet `exp`, `log`, `sqrt`, `square`, `abs`, `negative`,
//! `relu`, `sigmoid`, `tanh`): registry rows over the `kernels::unary` table. float32 and
//! float64 compute in their own type; float16 through float32; integers in their own type
//! where the function maps integers to integers, else through float32 and truncated back (as
//! MXNet does).

use super::params::ParamDef;
use super::{InPlace, MaybeShape, OpCtx, OpDef, Operator, Params};
use crate::error::Result;
use crate::kernels::map::zip_map;
pub use crate::kernels::unary::{unary_fn, UnaryFn};
use crate::tensor::{DType, NDArray};
use crate::with_dtype;
use std::sync::Arc;

/// y = f(x) elementwise, in `x`'s dtype under the policy in the module doc.
pub fn map_unary(x: &NDArray, u: &UnaryFn, what: &str) -> Result<NDArray> {
    match x.dtype() {
        DType::Float32 => NDArray::from_f32(x.shape(), u.map_f32(x.f32s(what)?)),
        DType::Float64 => NDArray::from_vec(x.shape(), u.map_f64(x.values(what)?)),
        dt => match u.int {
            Some(rule) if !dt.is_float() => with_dtype!(dt, T => {
                NDArray::from_vec(x.shape(), zip_map([x.values::<T>(what)?], |[v]| rule.apply(v))?)
            }),
            _ => Ok(map_unary(&x.astype(DType::Float32), u, what)?.astype(dt)),
        },
    }
}

/// dx = g · df(x, y) elementwise, in `x`'s dtype under the policy in the module doc.
pub fn unary_grad(
    x: &NDArray,
    y: &NDArray,
    g: &NDArray,
    u: &UnaryFn,
    what: &str,
) -> Result<NDArray> {
    match x.dtype() {
        DType::Float32 => NDArray::from_f32(
            x.shape(),
            u.grad_f32(x.f32s(what)?, y.f32s(what)?, g.f32s(what)?),
        ),
        DType::Float64 => NDArray::from_vec(
            x.shape(),
            u.grad_f64(x.values(what)?, y.values(what)?, g.values(what)?),
        ),
        dt => match u.int {
            Some(rule) if !dt.is_float() => with_dtype!(dt, T => {
                let (xs, gs) = (x.values::<T>(what)?, g.values::<T>(what)?);
                NDArray::from_vec(x.shape(), xs.iter().zip(gs).map(|(&v, &gv)| rule.grad(v, gv)).collect())
            }),
            _ => {
                let f = |a: &NDArray| a.astype(DType::Float32);
                Ok(unary_grad(&f(x), &f(y), &f(g), u, what)?.astype(dt))
            }
        },
    }
}

/// An operator applying one `UnaryFn`.
#[derive(Debug)]
pub struct Unary(pub UnaryFn);

impl Operator for Unary {
    fn dtype_generic(&self) -> bool {
        true
    }
    fn arguments(&self) -> Vec<String> {
        vec!["data".into()]
    }
    fn infer_shape(
        &self,
        node: &str,
        inputs: &mut [MaybeShape],
        _aux: &mut [MaybeShape],
    ) -> Result<Vec<Vec<usize>>> {
        Ok(vec![
            super::known(self.0.name, node, &["data"], inputs, 0)?.to_vec()
        ])
    }
    fn forward(
        &self,
        _ctx: &OpCtx,
        inputs: &[NDArray],
        _aux: &mut [NDArray],
    ) -> Result<Vec<NDArray>> {
        Ok(vec![map_unary(&inputs[0], &self.0, self.0.name)?])
    }
    fn backward(
        &self,
        _ctx: &OpCtx,
        g: &[NDArray],
        inputs: &[NDArray],
        outputs: &[NDArray],
        _aux: &mut [NDArray],
    ) -> Result<Vec<Option<NDArray>>> {
        Ok(vec![Some(unary_grad(
            &inputs[0],
            &outputs[0],
            &g[0],
            &self.0,
            self.0.name,
        )?)])
    }
    fn in_place(&self) -> Option<InPlace> {
        // Derivatives from the output (tanh, sigmoid), or the same from either (relu: x > 0
        // exactly when relu(x) > 0), stay right when the input is overwritten by the output.
        matches!(self.0.name, "relu" | "tanh" | "sigmoid").then_some(InPlace::Unary(self.0))
    }
}

macro_rules! unary_def {
    ($name:literal, $doc:literal) => {
        OpDef {
            name: $name,
            aliases: &[],
            py_name: None,
            doc: $doc,
            params: &[] as &[ParamDef],
            create: |p: &Params| {
                Ok(Arc::new(Unary(unary_fn(p.op).ok_or_else(|| {
                    crate::error::Error::Msg(format!("internal: no unary {}", p.op))
                })?)) as Arc<dyn Operator>)
            },
            variadic: None,
        }
    };
}

/// The entries of this family.
pub static OPS: &[OpDef] = &[
    unary_def!("exp", "Elementwise exponential, e^x."),
    unary_def!("log", "Elementwise natural logarithm."),
    unary_def!("sqrt", "Elementwise square root."),
    unary_def!("square", "Elementwise square, x·x."),
    unary_def!("abs", "Elementwise absolute value."),
    unary_def!("negative", "Elementwise negation, -x."),
    unary_def!("relu", "Rectified linear unit, max(x, 0)."),
    unary_def!("sigmoid", "Logistic sigmoid, 1 / (1 + e^-x)."),
    unary_def!("tanh", "Hyperbolic tangent."),
];
