//! `take` and `pick`: values chosen by an index array (MXNet's semantics: indices are cast to
//! int; `mode` "clip" clamps them into range, "wrap" takes them modulo the axis size, "raise"
//! makes an out-of-range index an error). The indices get no gradient (zeros, as MXNet's).

use super::{bad_param, norm_axis, tup};
use crate::error::{Error, Result};
use crate::kernels::copy;
use crate::ops::params::Params;
use crate::ops::{known, MaybeShape, OpCtx, Operator};
use crate::tensor::NDArray;
use std::sync::Arc;

/// How an index outside `[0, n)` is treated.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Mode {
    Clip,
    Wrap,
    Raise,
}

fn mode(name: &str) -> Mode {
    match name {
        "wrap" => Mode::Wrap,
        "raise" => Mode::Raise,
        _ => Mode::Clip,
    }
}

/// The indices (float values, cast to int as MXNet does) as positions in `[0, n)`.
fn positions(op: &str, node: &str, idx: &[f32], n: usize, mode: Mode) -> Result<Vec<usize>> {
    idx.iter()
        .map(|&v| {
            let i = v as i64; // truncation toward zero, as MXNet's cast
            let n = n as i64;
            match mode {
                Mode::Clip => Ok(i.clamp(0, n - 1) as usize),
                Mode::Wrap => Ok(i.rem_euclid(n) as usize),
                Mode::Raise if (0..n).contains(&i) => Ok(i as usize),
                Mode::Raise => Err(Error::invalid(
                    format!("{op} node \"{node}\": indices"),
                    format!("indices in [0, {n}) (mode=\"raise\")"),
                    v.to_string(),
                )),
            }
        })
        .collect()
}

/// `(outer, n, inner)`: the sizes before, at and after `axis`.
fn split(shape: &[usize], axis: usize) -> (usize, usize, usize) {
    (
        shape[..axis].iter().product(),
        shape[axis],
        shape[axis + 1..].iter().product(),
    )
}

// ---------------------------------------------------------------------------------------------
// take
// ---------------------------------------------------------------------------------------------

crate::op_params! {
    pub(crate) struct TakeParams {
        axis: Int = "0", "The axis to take along.";
        mode: Enum(&["clip", "wrap", "raise"]) = "clip", "What an index outside the axis does.";
    }
}

#[derive(Debug)]
pub(crate) struct Take {
    axis: i64,
    mode: Mode,
}

impl Take {
    pub(crate) fn create(p: &Params) -> Result<Arc<dyn Operator>> {
        let q = TakeParams::from_params(p)?;
        Ok(Arc::new(Take {
            axis: q.axis,
            mode: mode(&q.mode),
        }))
    }

    fn axis(&self, node: &str, ndim: usize) -> Result<usize> {
        norm_axis("take", node, "axis", self.axis, ndim)
    }
}

impl Operator for Take {
    fn arguments(&self) -> Vec<String> {
        vec!["a".into(), "indices".into()]
    }

    fn infer_shape(
        &self,
        node: &str,
        inputs: &mut [MaybeShape],
        _aux: &mut [MaybeShape],
    ) -> Result<Vec<Vec<usize>>> {
        let names = ["a", "indices"];
        let a = known("take", node, &names, inputs, 0)?.to_vec();
        let idx = known("take", node, &names, inputs, 1)?.to_vec();
        let ax = self.axis(node, a.len())?;
        if a[ax] == 0 {
            return Err(bad_param(
                "take",
                node,
                "axis",
                "an axis of input \"a\" with at least one element",
                format!("{} of shape {}", self.axis, tup(&a)),
            ));
        }
        Ok(vec![[&a[..ax], &idx[..], &a[ax + 1..]].concat()])
    }

    fn forward(
        &self,
        ctx: &OpCtx,
        inputs: &[NDArray],
        _aux: &mut [NDArray],
    ) -> Result<Vec<NDArray>> {
        let (a, idx) = (&inputs[0], &inputs[1]);
        let ax = self.axis(ctx.node, a.ndim())?;
        let (outer, n, inner) = split(a.shape(), ax);
        let rows = positions("take", ctx.node, idx.f32s("take: indices")?, n, self.mode)?;
        let out = copy::take_along(a.f32s("take: a")?, outer, n, inner, &rows);
        let shape = [&a.shape()[..ax], idx.shape(), &a.shape()[ax + 1..]].concat();
        Ok(vec![NDArray::from_vec(&shape, out)?])
    }

    fn backward(
        &self,
        ctx: &OpCtx,
        out_grads: &[NDArray],
        inputs: &[NDArray],
        _outputs: &[NDArray],
        _aux: &mut [NDArray],
    ) -> Result<Vec<Option<NDArray>>> {
        let (a, idx) = (&inputs[0], &inputs[1]);
        let ax = self.axis(ctx.node, a.ndim())?;
        let (outer, n, inner) = split(a.shape(), ax);
        let rows = positions("take", ctx.node, idx.f32s("take: indices")?, n, self.mode)?;
        let g = copy::take_along_grad(out_grads[0].f32s("take: gradient")?, outer, n, inner, &rows);
        Ok(vec![Some(NDArray::from_vec(a.shape(), g)?), None])
    }
}

// ---------------------------------------------------------------------------------------------
// pick
// ---------------------------------------------------------------------------------------------

crate::op_params! {
    pub(crate) struct PickParams {
        axis: OptInt = "-1", "The axis to pick along.";
        keepdims: Bool = "False", "Keep the axis with size 1.";
        mode: Enum(&["clip", "wrap"]) = "clip", "What an index outside the axis does.";
    }
}

#[derive(Debug)]
pub(crate) struct Pick {
    axis: Option<i64>,
    keepdims: bool,
    mode: Mode,
}

impl Pick {
    pub(crate) fn create(p: &Params) -> Result<Arc<dyn Operator>> {
        let q = PickParams::from_params(p)?;
        Ok(Arc::new(Pick {
            axis: q.axis,
            keepdims: q.keepdims,
            mode: mode(&q.mode),
        }))
    }

    /// The picking axis and the output (= index) shape for data of `shape`.
    fn plan(&self, node: &str, shape: &[usize]) -> Result<(usize, Vec<usize>)> {
        let Some(axis) = self.axis else {
            return Err(bad_param(
                "pick",
                node,
                "axis",
                "an axis (mxfn does not pick from the flattened data)",
                "None",
            ));
        };
        let ax = norm_axis("pick", node, "axis", axis, shape.len())?;
        let mut out = shape.to_vec();
        if self.keepdims {
            out[ax] = 1;
        } else {
            out.remove(ax);
        }
        Ok((ax, out))
    }
}

impl Operator for Pick {
    fn arguments(&self) -> Vec<String> {
        vec!["data".into(), "index".into()]
    }

    fn infer_shape(
        &self,
        node: &str,
        inputs: &mut [MaybeShape],
        _aux: &mut [MaybeShape],
    ) -> Result<Vec<Vec<usize>>> {
        let names = ["data", "index"];
        let d = known("pick", node, &names, inputs, 0)?.to_vec();
        let (_, out) = self.plan(node, &d)?;
        match &inputs[1] {
            Some(i) if i.iter().product::<usize>() != out.iter().product::<usize>() => {
                return Err(Error::shape(
                    "pick",
                    format!("node \"{node}\": input \"index\""),
                    &out,
                    i,
                ))
            }
            Some(_) => {}
            None => inputs[1] = Some(out.clone()),
        }
        Ok(vec![out])
    }

    fn forward(
        &self,
        ctx: &OpCtx,
        inputs: &[NDArray],
        _aux: &mut [NDArray],
    ) -> Result<Vec<NDArray>> {
        let (d, idx) = (&inputs[0], &inputs[1]);
        let (ax, out) = self.plan(ctx.node, d.shape())?;
        let (outer, n, inner) = split(d.shape(), ax);
        let pos = positions("pick", ctx.node, idx.f32s("pick: index")?, n, self.mode)?;
        let v = copy::pick_along(d.f32s("pick: data")?, outer, n, inner, &pos);
        Ok(vec![NDArray::from_vec(&out, v)?])
    }

    fn backward(
        &self,
        ctx: &OpCtx,
        out_grads: &[NDArray],
        inputs: &[NDArray],
        _outputs: &[NDArray],
        _aux: &mut [NDArray],
    ) -> Result<Vec<Option<NDArray>>> {
        let (d, idx) = (&inputs[0], &inputs[1]);
        let (ax, _) = self.plan(ctx.node, d.shape())?;
        let (outer, n, inner) = split(d.shape(), ax);
        let pos = positions("pick", ctx.node, idx.f32s("pick: index")?, n, self.mode)?;
        let g = copy::pick_along_grad(out_grads[0].f32s("pick: gradient")?, outer, n, inner, &pos);
        Ok(vec![Some(NDArray::from_vec(d.shape(), g)?), None])
    }
}
