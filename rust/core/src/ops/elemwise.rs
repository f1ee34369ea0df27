//! Unary elementwise operators (MXNet `exp`, `log`, `sqrt`, `square`, `abs`, `negative`,
//! `relu`, `sigmoid`, `tanh`, …): one table row each, the value and its derivative side by side.

use super::params::ParamDef;
use super::{MaybeShape, OpCtx, OpDef, Operator, Params};
use crate::error::Result;
use crate::kernels::par;
use crate::tensor::NDArray;
use std::sync::Arc;

/// A unary function: its value, and its derivative given the input `x` and output `y`.
#[derive(Clone, Copy)]
pub struct UnaryFn {
    /// MXNet's op name.
    pub name: &'static str,
    /// y = f(x).
    pub f: fn(f32) -> f32,
    /// dy/dx from x and y.
    pub df: fn(f32, f32) -> f32,
}

impl std::fmt::Debug for UnaryFn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name)
    }
}

fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

// log(1 + e^x) without overflow for large x.
fn softrelu(x: f32) -> f32 {
    if x > 20.0 {
        x
    } else {
        x.exp().ln_1p()
    }
}

/// The table: value formula and derivative formula side by side.
pub static UNARY: &[UnaryFn] = &[
    UnaryFn {
        name: "exp",
        f: |x| x.exp(),
        df: |_, y| y,
    },
    UnaryFn {
        name: "log",
        f: |x| x.ln(),
        df: |x, _| 1.0 / x,
    },
    UnaryFn {
        name: "sqrt",
        f: |x| x.sqrt(),
        df: |_, y| 0.5 / y,
    },
    UnaryFn {
        name: "square",
        f: |x| x * x,
        df: |x, _| 2.0 * x,
    },
    UnaryFn {
        name: "abs",
        f: |x| x.abs(),
        df: |x, _| {
            if x > 0.0 {
                1.0
            } else if x < 0.0 {
                -1.0
            } else {
                0.0
            }
        },
    },
    UnaryFn {
        name: "negative",
        f: |x| -x,
        df: |_, _| -1.0,
    },
    UnaryFn {
        name: "relu",
        f: |x| if x > 0.0 { x } else { 0.0 },
        df: |x, _| if x > 0.0 { 1.0 } else { 0.0 },
    },
    UnaryFn {
        name: "sigmoid",
        f: sigmoid,
        df: |_, y| y * (1.0 - y),
    },
    UnaryFn {
        name: "tanh",
        f: |x| x.tanh(),
        df: |_, y| 1.0 - y * y,
    },
    UnaryFn {
        name: "softrelu",
        f: softrelu,
        df: |x, _| sigmoid(x),
    },
    UnaryFn {
        name: "softsign",
        f: |x| x / (1.0 + x.abs()),
        df: |x, _| 1.0 / ((1.0 + x.abs()) * (1.0 + x.abs())),
    },
];

/// The table row named `name`.
pub fn unary_fn(name: &str) -> Option<UnaryFn> {
    UNARY.iter().copied().find(|u| u.name == name)
}

/// y = f(x) elementwise, in parallel chunks.
pub fn map_unary(x: &NDArray, f: fn(f32) -> f32, what: &str) -> Result<NDArray> {
    let xs = x.f32s(what)?;
    let mut out = vec![0.0f32; xs.len()];
    par::for_each_chunk_mut(&mut out, |start, chunk| {
        for (o, &v) in chunk.iter_mut().zip(&xs[start..]) {
            *o = f(v);
        }
    });
    NDArray::from_f32(x.shape(), out)
}

/// dx = g · df(x, y) elementwise.
pub fn unary_grad(
    x: &NDArray,
    y: &NDArray,
    g: &NDArray,
    df: fn(f32, f32) -> f32,
    what: &str,
) -> Result<NDArray> {
    let (xs, ys, gs) = (x.f32s(what)?, y.f32s(what)?, g.f32s(what)?);
    let mut out = vec![0.0f32; xs.len()];
    par::for_each_chunk_mut(&mut out, |start, chunk| {
        for (i, o) in chunk.iter_mut().enumerate() {
            let j = start + i;
            *o = gs[j] * df(xs[j], ys[j]);
        }
    });
    NDArray::from_f32(x.shape(), out)
}

/// An operator applying one `UnaryFn`.
#[derive(Debug)]
pub struct Unary(pub UnaryFn);

impl Operator for Unary {
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
        Ok(vec![map_unary(&inputs[0], self.0.f, self.0.name)?])
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
            self.0.df,
            self.0.name,
        )?)])
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
