//! Binary, scalar and n-ary elementwise operators (MXNet `elemwise_add/sub/mul/div`,
//! `_maximum`, `_minimum`, `_power`, `broadcast_add/sub/mul/div/maximum/minimum/power`, the
//! `_*_scalar` family, `add_n`, `clip`, `where`, `zeros_like`, `ones_like`, `BlockGrad`,
//! `MakeLoss`), with the strided map kernel they share.

use super::params::{param, ParamDef, ParamKind::*};
use super::reduce::reduce_axes;
use super::{check_or_fill, known, unknown_input, MaybeShape, OpCtx, OpDef, Operator, Params};
use crate::error::{Error, Result};
use crate::kernels::par;
use crate::tensor::arith::broadcast_shape;
use crate::tensor::NDArray;
use std::sync::Arc;

// ---------------------------------------------------------------------------------------------
// Kernel: one strided elementwise map over K operands.

/// Row-major strides of `shape`.
pub fn contiguous_strides(shape: &[usize]) -> Vec<usize> {
    let mut strides = vec![0; shape.len()];
    let mut acc = 1;
    for (s, &d) in strides.iter_mut().zip(shape).rev() {
        *s = acc;
        acc *= d;
    }
    strides
}

/// The strides of an array of `shape` read in the index space of the broadcast shape `out`
/// (numpy rules: aligned on the right, missing and size-1 axes repeat with stride 0).
pub fn broadcast_strides(shape: &[usize], out: &[usize]) -> Vec<usize> {
    let own = contiguous_strides(shape);
    let pad = out.len().saturating_sub(shape.len());
    (0..out.len())
        .map(|i| match i.checked_sub(pad) {
            Some(j) if shape.get(j).is_some_and(|&d| d != 1) => own.get(j).copied().unwrap_or(0),
            _ => 0,
        })
        .collect()
}

/// One operand of [`map_n`]: its values and its strides in the output's index space (one per
/// output axis; 0 where the operand is repeated).
#[derive(Clone, Copy, Debug)]
pub struct Operand<'a> {
    /// The operand's values.
    pub data: &'a [f32],
    /// Its strides in the output's index space.
    pub strides: &'a [usize],
}

/// Drops size-1 axes of `shape` and merges neighbouring axes that every operand walks
/// contiguously (stride of the outer = stride of the inner × its size), so rows get long:
/// `(N, C, H, W)` with a `(1, C, 1, 1)` operand becomes `(N, C, H·W)`.
fn collapse<const K: usize>(
    shape: &[usize],
    strides: [&[usize]; K],
) -> (Vec<usize>, [Vec<usize>; K]) {
    let mut dims: Vec<usize> = Vec::with_capacity(shape.len());
    let mut st: [Vec<usize>; K] = std::array::from_fn(|_| Vec::with_capacity(shape.len()));
    for (i, &d) in shape.iter().enumerate() {
        if d == 1 {
            continue;
        }
        let merge = match dims.last_mut() {
            Some(last) if (0..K).all(|k| st[k].last() == Some(&(strides[k][i] * d))) => {
                *last *= d;
                true
            }
            _ => false,
        };
        for (s, src) in st.iter_mut().zip(&strides) {
            if merge {
                if let Some(l) = s.last_mut() {
                    *l = src[i];
                }
            } else {
                s.push(src[i]);
            }
        }
        if !merge {
            dims.push(d);
        }
    }
    if dims.is_empty() {
        dims.push(1);
        st.iter_mut().for_each(|s| s.push(0));
    }
    (dims, st)
}

/// Below this many elements a segment with repeated operands is mapped element by element;
/// above, it goes through 64-wide blocks where repeated values sit in a stack buffer.
const BLOCK: usize = 64;

/// Maps one run of the innermost axis: operand k starts at `offs[k]` and steps `last[k]`.
/// Unit and zero steps (the usual cases) take loops the compiler vectorises.
fn segment<const K: usize, F>(
    out: &mut [f32],
    data: [&[f32]; K],
    offs: [usize; K],
    last: [usize; K],
    f: &F,
) where
    F: Fn([f32; K]) -> f32,
{
    let len = out.len();
    if last.iter().all(|&s| s == 1) {
        let parts: [&[f32]; K] = std::array::from_fn(|k| &data[k][offs[k]..offs[k] + len]);
        for (j, o) in out.iter_mut().enumerate() {
            *o = f(std::array::from_fn(|k| parts[k][j]));
        }
    } else if len >= BLOCK / 4 && last.iter().all(|&s| s <= 1) {
        let bufs: [[f32; BLOCK]; K] = std::array::from_fn(|k| [data[k][offs[k]]; BLOCK]);
        for (bi, block) in out.chunks_mut(BLOCK).enumerate() {
            let (o0, bl) = (bi * BLOCK, block.len());
            let parts: [&[f32]; K] = std::array::from_fn(|k| {
                if last[k] == 1 {
                    &data[k][offs[k] + o0..offs[k] + o0 + bl]
                } else {
                    &bufs[k][..bl]
                }
            });
            for (j, o) in block.iter_mut().enumerate() {
                *o = f(std::array::from_fn(|k| parts[k][j]));
            }
        }
    } else {
        for (j, o) in out.iter_mut().enumerate() {
            *o = f(std::array::from_fn(|k| data[k][offs[k] + j * last[k]]));
        }
    }
}

/// `out[i] = f([op_0[i], …, op_K-1[i]])` over an output of `out_shape`, each operand read
/// through its strides (broadcasting without materialising). The output is cut into the fixed
/// chunks of `kernels::par`, each walked as runs of the (collapsed) innermost axis.
pub fn map_n<const K: usize, F>(
    out_shape: &[usize],
    ins: [Operand<'_>; K],
    f: F,
) -> Result<Vec<f32>>
where
    F: Fn([f32; K]) -> f32 + Sync + Send,
{
    let n: usize = out_shape.iter().product();
    let nd = out_shape.len();
    for op in &ins {
        // Every offset the loops below compute is at most `reach - 1`: checking it once here
        // keeps the inner loops free of failure paths.
        let reach: usize = out_shape
            .iter()
            .zip(op.strides)
            .map(|(&d, &s)| d.saturating_sub(1) * s)
            .sum::<usize>()
            + 1;
        if op.strides.len() != nd || (n > 0 && reach > op.data.len()) {
            return Err(Error::Msg(format!(
                "internal: operand of {} values with strides {:?} does not cover shape {:?}",
                op.data.len(),
                op.strides,
                out_shape
            )));
        }
    }
    let mut out = vec![0.0f32; n];
    if n == 0 {
        return Ok(out);
    }
    let (dims, st) = collapse::<K>(out_shape, std::array::from_fn(|k| ins[k].strides));
    let row_len = dims[dims.len() - 1];
    let outer = &dims[..dims.len() - 1];
    let last: [usize; K] = std::array::from_fn(|k| st[k][dims.len() - 1]);
    let data: [&[f32]; K] = std::array::from_fn(|k| ins[k].data);
    par::for_each_chunk_mut(&mut out, |start, chunk| {
        let mut done = 0;
        while done < chunk.len() {
            let pos = start + done;
            let (mut row, col) = (pos / row_len, pos % row_len);
            let mut offs = [0usize; K];
            for (ax, &d) in outer.iter().enumerate().rev() {
                let idx = row % d;
                row /= d;
                for (o, s) in offs.iter_mut().zip(&st) {
                    *o += idx * s[ax];
                }
            }
            for (o, l) in offs.iter_mut().zip(&last) {
                *o += col * l;
            }
            let seg = (row_len - col).min(chunk.len() - done);
            segment(&mut chunk[done..done + seg], data, offs, last, &f);
            done += seg;
        }
    });
    Ok(out)
}

/// Sums `full` (a gradient of the broadcast shape `out_shape`) over the axes along which an
/// input of `shape` was repeated, giving the input's gradient.
pub fn sum_to(full: Vec<f32>, out_shape: &[usize], shape: &[usize]) -> Result<NDArray> {
    if out_shape == shape {
        return NDArray::from_f32(shape, full);
    }
    let pad = out_shape.len().saturating_sub(shape.len());
    let reduced: Vec<bool> = (0..out_shape.len())
        .map(|i| match i.checked_sub(pad) {
            None => true,
            Some(j) => shape.get(j) == Some(&1),
        })
        .collect();
    let summed = reduce_axes(&full, out_shape, &reduced, 0.0, |acc, v| acc + v as f64)?;
    NDArray::from_f32(shape, summed)
}

fn data<'a>(x: &'a NDArray, op: &str, arg: &str) -> Result<&'a [f32]> {
    x.f32s(&format!("{op}: {arg}"))
}

/// Every input must have one shape: the first known one fills the unknown ones (MXNet's
/// elementwise shape rule, which runs in both directions).
fn same_shape(
    op: &str,
    node: &str,
    names: &[&str],
    inputs: &mut [MaybeShape],
) -> Result<Vec<usize>> {
    let Some(shape) = inputs.iter().flatten().next().cloned() else {
        return Err(unknown_input(
            op,
            node,
            names.first().copied().unwrap_or("data"),
        ));
    };
    for (i, slot) in inputs.iter_mut().enumerate() {
        let name = names.get(i).copied().unwrap_or("data");
        check_or_fill(op, node, name, slot, &shape)?;
    }
    Ok(shape)
}

// ---------------------------------------------------------------------------------------------
// Binary operators, same-shape and broadcasting.

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Bin {
    Add,
    Sub,
    Mul,
    Div,
    Maximum,
    Minimum,
    Power,
}

/// MXNet name, operation, broadcasting.
static BINARY: &[(&str, Bin, bool)] = &[
    ("elemwise_add", Bin::Add, false),
    ("elemwise_sub", Bin::Sub, false),
    ("elemwise_mul", Bin::Mul, false),
    ("elemwise_div", Bin::Div, false),
    ("_maximum", Bin::Maximum, false),
    ("_minimum", Bin::Minimum, false),
    ("_power", Bin::Power, false),
    ("broadcast_add", Bin::Add, true),
    ("broadcast_sub", Bin::Sub, true),
    ("broadcast_mul", Bin::Mul, true),
    ("broadcast_div", Bin::Div, true),
    ("broadcast_maximum", Bin::Maximum, true),
    ("broadcast_minimum", Bin::Minimum, true),
    ("broadcast_power", Bin::Power, true),
];

/// Full-shape gradients of lhs and rhs; `None` stands for the head gradient itself.
type GradPair = (Option<Vec<f32>>, Option<Vec<f32>>);

#[derive(Debug)]
struct Binary {
    op: &'static str,
    kind: Bin,
    broadcast: bool,
}

fn create_binary(p: &Params) -> Result<Arc<dyn Operator>> {
    let &(op, kind, broadcast) = BINARY
        .iter()
        .find(|(n, _, _)| *n == p.op)
        .ok_or_else(|| Error::Msg(format!("internal: no binary operator {}", p.op)))?;
    Ok(Arc::new(Binary {
        op,
        kind,
        broadcast,
    }))
}

impl Binary {
    fn forward_values(&self, shape: &[usize], a: Operand, b: Operand) -> Result<Vec<f32>> {
        let ins = [a, b];
        match self.kind {
            Bin::Add => map_n(shape, ins, |[x, y]| x + y),
            Bin::Sub => map_n(shape, ins, |[x, y]| x - y),
            Bin::Mul => map_n(shape, ins, |[x, y]| x * y),
            Bin::Div => map_n(shape, ins, |[x, y]| x / y),
            // mshadow's maximum / minimum: `a > b ? a : b`, `a < b ? a : b`.
            Bin::Maximum => map_n(shape, ins, |[x, y]| if x > y { x } else { y }),
            Bin::Minimum => map_n(shape, ins, |[x, y]| if x < y { x } else { y }),
            Bin::Power => map_n(shape, ins, |[x, y]| x.powf(y)),
        }
    }

    /// Full-shape gradients of lhs and rhs (`None`: the head gradient itself). The formulas
    /// are MXNet's backward functors (div_grad = 1/b, div_rgrad = -a/b², power_rgrad =
    /// a^b·ln a; maximum sends ties to lhs: `ge` for lhs, `lt` for rhs).
    fn backward_values(
        &self,
        shape: &[usize],
        g: Operand,
        a: Operand,
        b: Operand,
    ) -> Result<GradPair> {
        let ins = [g, a, b];
        let lhs = match self.kind {
            Bin::Add | Bin::Sub => None,
            Bin::Mul => Some(map_n(shape, ins, |[g, _, y]| g * y)?),
            Bin::Div => Some(map_n(shape, ins, |[g, _, y]| g * (1.0 / y))?),
            Bin::Maximum => Some(map_n(shape, ins, |[g, x, y]| if x >= y { g } else { 0.0 })?),
            Bin::Minimum => Some(map_n(shape, ins, |[g, x, y]| if x <= y { g } else { 0.0 })?),
            Bin::Power => Some(map_n(shape, ins, |[g, x, y]| g * (y * x.powf(y - 1.0)))?),
        };
        let rhs = match self.kind {
            Bin::Add => None,
            Bin::Sub => Some(map_n(shape, [g], |[g]| -g)?),
            Bin::Mul => Some(map_n(shape, ins, |[g, x, _]| g * x)?),
            Bin::Div => Some(map_n(shape, ins, |[g, x, y]| g * (-x / (y * y)))?),
            Bin::Maximum => Some(map_n(shape, ins, |[g, x, y]| if x < y { g } else { 0.0 })?),
            Bin::Minimum => Some(map_n(shape, ins, |[g, x, y]| if x > y { g } else { 0.0 })?),
            Bin::Power => Some(map_n(shape, ins, |[g, x, y]| g * (x.powf(y) * x.ln()))?),
        };
        Ok((lhs, rhs))
    }
}

impl Operator for Binary {
    fn arguments(&self) -> Vec<String> {
        vec!["lhs".into(), "rhs".into()]
    }

    fn infer_shape(
        &self,
        node: &str,
        inputs: &mut [MaybeShape],
        _aux: &mut [MaybeShape],
    ) -> Result<Vec<Vec<usize>>> {
        if !self.broadcast {
            return Ok(vec![same_shape(self.op, node, &["lhs", "rhs"], inputs)?]);
        }
        let names = ["lhs", "rhs"];
        let l = known(self.op, node, &names, inputs, 0)?;
        let r = known(self.op, node, &names, inputs, 1)?;
        let out = broadcast_shape(self.op, l, r).map_err(|_| {
            Error::shape(
                self.op,
                format!("node \"{node}\": input \"rhs\""),
                format_args!(
                    "a shape broadcastable with lhs {} (equal or 1 on each axis)",
                    crate::error::tuple_text(&format!("{l:?}"))
                ),
                r,
            )
        })?;
        Ok(vec![out])
    }

    fn forward(
        &self,
        _ctx: &OpCtx,
        inputs: &[NDArray],
        _aux: &mut [NDArray],
    ) -> Result<Vec<NDArray>> {
        let (a, b) = (&inputs[0], &inputs[1]);
        let shape = if self.broadcast {
            broadcast_shape(self.op, a.shape(), b.shape())?
        } else {
            if a.shape() != b.shape() {
                return Err(Error::shape(self.op, "input \"rhs\"", a.shape(), b.shape()));
            }
            a.shape().to_vec()
        };
        let (sa, sb) = (
            broadcast_strides(a.shape(), &shape),
            broadcast_strides(b.shape(), &shape),
        );
        let out = self.forward_values(
            &shape,
            Operand {
                data: data(a, self.op, "lhs")?,
                strides: &sa,
            },
            Operand {
                data: data(b, self.op, "rhs")?,
                strides: &sb,
            },
        )?;
        Ok(vec![NDArray::from_f32(&shape, out)?])
    }

    fn backward(
        &self,
        _ctx: &OpCtx,
        out_grads: &[NDArray],
        inputs: &[NDArray],
        _outputs: &[NDArray],
        _aux: &mut [NDArray],
    ) -> Result<Vec<Option<NDArray>>> {
        let (a, b, g) = (&inputs[0], &inputs[1], &out_grads[0]);
        let shape = g.shape().to_vec();
        let (sa, sb, sg) = (
            broadcast_strides(a.shape(), &shape),
            broadcast_strides(b.shape(), &shape),
            contiguous_strides(&shape),
        );
        let gs = data(g, self.op, "output gradient")?;
        let (lhs, rhs) = self.backward_values(
            &shape,
            Operand {
                data: gs,
                strides: &sg,
            },
            Operand {
                data: data(a, self.op, "lhs")?,
                strides: &sa,
            },
            Operand {
                data: data(b, self.op, "rhs")?,
                strides: &sb,
            },
        )?;
        let finish = |full: Option<Vec<f32>>, like: &NDArray| -> Result<NDArray> {
            match full {
                None if like.shape() == shape.as_slice() => Ok(g.clone()),
                None => sum_to(gs.to_vec(), &shape, like.shape()),
                Some(v) => sum_to(v, &shape, like.shape()),
            }
        };
        Ok(vec![Some(finish(lhs, a)?), Some(finish(rhs, b)?)])
    }
}

macro_rules! binary_def {
    ($name:literal, [$($alias:literal),*], $doc:literal) => {
        OpDef {
            name: $name,
            aliases: &[$($alias),*],
            py_name: None,
            doc: $doc,
            params: &[],
            create: create_binary,
            variadic: None,
        }
    };
}

// ---------------------------------------------------------------------------------------------
// Scalar operators.

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Sc {
    Plus,
    Minus,
    RMinus,
    Mul,
    Div,
    RDiv,
    Power,
    RPower,
    Maximum,
    Minimum,
}

static SCALAR: &[(&str, Sc)] = &[
    ("_plus_scalar", Sc::Plus),
    ("_minus_scalar", Sc::Minus),
    ("_rminus_scalar", Sc::RMinus),
    ("_mul_scalar", Sc::Mul),
    ("_div_scalar", Sc::Div),
    ("_rdiv_scalar", Sc::RDiv),
    ("_power_scalar", Sc::Power),
    ("_rpower_scalar", Sc::RPower),
    ("_maximum_scalar", Sc::Maximum),
    ("_minimum_scalar", Sc::Minimum),
];

#[derive(Debug)]
struct ScalarOp {
    op: &'static str,
    kind: Sc,
    s: f32,
}

fn create_scalar(p: &Params) -> Result<Arc<dyn Operator>> {
    let &(op, kind) = SCALAR
        .iter()
        .find(|(n, _)| *n == p.op)
        .ok_or_else(|| Error::Msg(format!("internal: no scalar operator {}", p.op)))?;
    // MXNet parses the scalar as a double and casts it to the data type (float32) before
    // applying it; is_int only matters for integer arrays.
    let _ = p.bool("is_int")?;
    Ok(Arc::new(ScalarOp {
        op,
        kind,
        s: p.float("scalar")? as f32,
    }))
}

impl Operator for ScalarOp {
    fn arguments(&self) -> Vec<String> {
        vec!["data".into()]
    }

    fn infer_shape(
        &self,
        node: &str,
        inputs: &mut [MaybeShape],
        _aux: &mut [MaybeShape],
    ) -> Result<Vec<Vec<usize>>> {
        Ok(vec![same_shape(self.op, node, &["data"], inputs)?])
    }

    fn forward(
        &self,
        _ctx: &OpCtx,
        inputs: &[NDArray],
        _aux: &mut [NDArray],
    ) -> Result<Vec<NDArray>> {
        let x = &inputs[0];
        let shape = x.shape();
        let st = contiguous_strides(shape);
        let ins = [Operand {
            data: data(x, self.op, "data")?,
            strides: &st,
        }];
        let s = self.s;
        let out = match self.kind {
            Sc::Plus => map_n(shape, ins, |[x]| x + s),
            Sc::Minus => map_n(shape, ins, |[x]| x - s),
            Sc::RMinus => map_n(shape, ins, |[x]| s - x),
            Sc::Mul => map_n(shape, ins, |[x]| x * s),
            Sc::Div => map_n(shape, ins, |[x]| x / s),
            Sc::RDiv => map_n(shape, ins, |[x]| s / x),
            Sc::Power => map_n(shape, ins, |[x]| x.powf(s)),
            Sc::RPower => map_n(shape, ins, |[x]| s.powf(x)),
            Sc::Maximum => map_n(shape, ins, |[x]| if x > s { x } else { s }),
            Sc::Minimum => map_n(shape, ins, |[x]| if x < s { x } else { s }),
        }?;
        Ok(vec![NDArray::from_f32(shape, out)?])
    }

    fn backward(
        &self,
        _ctx: &OpCtx,
        out_grads: &[NDArray],
        inputs: &[NDArray],
        outputs: &[NDArray],
        _aux: &mut [NDArray],
    ) -> Result<Vec<Option<NDArray>>> {
        let g = &out_grads[0];
        if matches!(self.kind, Sc::Plus | Sc::Minus) {
            return Ok(vec![Some(g.clone())]);
        }
        let shape = g.shape();
        let st = contiguous_strides(shape);
        fn op<'a>(
            name: &str,
            a: &'a NDArray,
            st: &'a [usize],
            shape: &[usize],
            what: &str,
        ) -> Result<Operand<'a>> {
            if a.shape() != shape {
                return Err(Error::shape(name, what, shape, a.shape()));
            }
            Ok(Operand {
                data: data(a, name, what)?,
                strides: st,
            })
        }
        // (g, x, y); the functors are MXNet's: rdiv_grad = -s/x², power_grad = s·x^(s-1),
        // rpower_grad = y·ln s (from the output), maximum/minimum pass ties (ge / le).
        let ins = [
            op(self.op, g, &st, shape, "output gradient")?,
            op(self.op, &inputs[0], &st, shape, "data")?,
            op(self.op, &outputs[0], &st, shape, "output")?,
        ];
        let s = self.s;
        let dx = match self.kind {
            Sc::Plus | Sc::Minus => map_n(shape, ins, |[g, _, _]| g),
            Sc::RMinus => map_n(shape, ins, |[g, _, _]| -g),
            Sc::Mul => map_n(shape, ins, |[g, _, _]| g * s),
            Sc::Div => map_n(shape, ins, |[g, _, _]| g / s),
            Sc::RDiv => map_n(shape, ins, |[g, x, _]| g * (-s / (x * x))),
            Sc::Power => map_n(shape, ins, |[g, x, _]| g * (s * x.powf(s - 1.0))),
            Sc::RPower => map_n(shape, ins, |[g, _, y]| g * (y * s.ln())),
            Sc::Maximum => map_n(shape, ins, |[g, x, _]| if x >= s { g } else { 0.0 }),
            Sc::Minimum => map_n(shape, ins, |[g, x, _]| if x <= s { g } else { 0.0 }),
        }?;
        Ok(vec![Some(NDArray::from_f32(shape, dx)?)])
    }
}

const SCALAR_PARAMS: &[ParamDef] = &[
    param(
        "scalar",
        Float,
        Some("1"),
        "The scalar operand (applied in the data type, float32).",
    ),
    param(
        "is_int",
        Bool,
        Some("True"),
        "Whether MXNet saw the scalar as an integer; accepted for MXNet 1.9 JSON, no effect on float32 data.",
    ),
];

macro_rules! scalar_def {
    ($name:literal, $alias:literal, $doc:literal) => {
        OpDef {
            name: $name,
            aliases: &[$alias],
            py_name: None,
            doc: $doc,
            params: SCALAR_PARAMS,
            create: create_scalar,
            variadic: None,
        }
    };
}

// ---------------------------------------------------------------------------------------------
// add_n

#[derive(Debug)]
struct AddN {
    n: usize,
}

impl AddN {
    fn create(p: &Params) -> Result<Arc<dyn Operator>> {
        Ok(Arc::new(AddN {
            n: p.usize_min("num_args", 1)?,
        }))
    }
}

impl Operator for AddN {
    fn arguments(&self) -> Vec<String> {
        (0..self.n).map(|i| format!("arg{i}")).collect()
    }

    fn infer_shape(
        &self,
        node: &str,
        inputs: &mut [MaybeShape],
        _aux: &mut [MaybeShape],
    ) -> Result<Vec<Vec<usize>>> {
        let names = self.arguments();
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        Ok(vec![same_shape("add_n", node, &names, inputs)?])
    }

    fn forward(
        &self,
        _ctx: &OpCtx,
        inputs: &[NDArray],
        _aux: &mut [NDArray],
    ) -> Result<Vec<NDArray>> {
        let Some(first) = inputs.first() else {
            return Err(Error::Msg("internal: add_n without inputs".into()));
        };
        let shape = first.shape();
        let mut xs = Vec::with_capacity(inputs.len());
        for (i, x) in inputs.iter().enumerate() {
            if x.shape() != shape {
                return Err(Error::shape(
                    "add_n",
                    format!("input \"arg{i}\""),
                    shape,
                    x.shape(),
                ));
            }
            xs.push(data(x, "add_n", &format!("arg{i}"))?);
        }
        let mut out = vec![0.0f32; first.size()];
        // Summed in argument order, element by element: the same bits at any thread count.
        par::for_each_chunk_mut(&mut out, |start, chunk| {
            let end = start + chunk.len();
            chunk.copy_from_slice(&xs[0][start..end]);
            for x in &xs[1..] {
                for (o, v) in chunk.iter_mut().zip(&x[start..end]) {
                    *o += v;
                }
            }
        });
        Ok(vec![NDArray::from_f32(shape, out)?])
    }

    fn backward(
        &self,
        _ctx: &OpCtx,
        out_grads: &[NDArray],
        inputs: &[NDArray],
        _outputs: &[NDArray],
        _aux: &mut [NDArray],
    ) -> Result<Vec<Option<NDArray>>> {
        Ok(inputs.iter().map(|_| Some(out_grads[0].clone())).collect())
    }
}

// ---------------------------------------------------------------------------------------------
// clip

#[derive(Debug)]
struct Clip {
    lo: f32,
    hi: f32,
}

impl Clip {
    fn create(p: &Params) -> Result<Arc<dyn Operator>> {
        Ok(Arc::new(Clip {
            lo: p.float("a_min")? as f32,
            hi: p.float("a_max")? as f32,
        }))
    }
}

impl Operator for Clip {
    fn arguments(&self) -> Vec<String> {
        vec!["data".into()]
    }

    fn infer_shape(
        &self,
        node: &str,
        inputs: &mut [MaybeShape],
        _aux: &mut [MaybeShape],
    ) -> Result<Vec<Vec<usize>>> {
        Ok(vec![same_shape("clip", node, &["data"], inputs)?])
    }

    fn forward(
        &self,
        _ctx: &OpCtx,
        inputs: &[NDArray],
        _aux: &mut [NDArray],
    ) -> Result<Vec<NDArray>> {
        let x = &inputs[0];
        let st = contiguous_strides(x.shape());
        let (lo, hi) = (self.lo, self.hi);
        // mshadow_op::clip: the upper bound is tested first, NaN passes through.
        let out = map_n(
            x.shape(),
            [Operand {
                data: data(x, "clip", "data")?,
                strides: &st,
            }],
            |[v]| {
                if v > hi {
                    hi
                } else if v < lo {
                    lo
                } else {
                    v
                }
            },
        )?;
        Ok(vec![NDArray::from_f32(x.shape(), out)?])
    }

    fn backward(
        &self,
        _ctx: &OpCtx,
        out_grads: &[NDArray],
        inputs: &[NDArray],
        _outputs: &[NDArray],
        _aux: &mut [NDArray],
    ) -> Result<Vec<Option<NDArray>>> {
        let (x, g) = (&inputs[0], &out_grads[0]);
        if x.shape() != g.shape() {
            return Err(Error::shape(
                "clip",
                "output gradient",
                x.shape(),
                g.shape(),
            ));
        }
        let st = contiguous_strides(x.shape());
        let (lo, hi) = (self.lo, self.hi);
        // The gradient passes where a_min <= x <= a_max (bounds included, as MXNet's clip_grad).
        let dx = map_n(
            x.shape(),
            [
                Operand {
                    data: data(g, "clip", "output gradient")?,
                    strides: &st,
                },
                Operand {
                    data: data(x, "clip", "data")?,
                    strides: &st,
                },
            ],
            |[g, v]| if v > hi || v < lo { 0.0 } else { g },
        )?;
        Ok(vec![Some(NDArray::from_f32(x.shape(), dx)?)])
    }
}

// ---------------------------------------------------------------------------------------------
// where

#[derive(Debug)]
struct Where;

impl Where {
    /// Strides of the condition in x's index space: the same shape, or (N,) selecting rows.
    fn cond_strides(cond: &[usize], x: &[usize]) -> Option<Vec<usize>> {
        if cond == x {
            Some(contiguous_strides(x))
        } else if cond.len() == 1 && x.first() == cond.first() {
            let mut s = vec![0; x.len()];
            s[0] = 1;
            Some(s)
        } else {
            None
        }
    }

    fn cond_error(node: &str, x: &[usize], cond: &[usize]) -> Error {
        Error::shape(
            "where",
            format!("node \"{node}\": input \"condition\""),
            format_args!(
                "the shape of x {} or ({},)",
                crate::error::tuple_text(&format!("{x:?}")),
                x.first().copied().unwrap_or(0)
            ),
            cond,
        )
    }
}

impl Operator for Where {
    fn arguments(&self) -> Vec<String> {
        vec!["condition".into(), "x".into(), "y".into()]
    }

    fn infer_shape(
        &self,
        node: &str,
        inputs: &mut [MaybeShape],
        _aux: &mut [MaybeShape],
    ) -> Result<Vec<Vec<usize>>> {
        let shape = same_shape("where", node, &["x", "y"], &mut inputs[1..])?;
        match &inputs[0] {
            None => inputs[0] = Some(shape.clone()),
            Some(c) if Self::cond_strides(c, &shape).is_none() => {
                return Err(Self::cond_error(node, &shape, c))
            }
            Some(_) => {}
        }
        Ok(vec![shape])
    }

    fn forward(
        &self,
        ctx: &OpCtx,
        inputs: &[NDArray],
        _aux: &mut [NDArray],
    ) -> Result<Vec<NDArray>> {
        let (c, x, y) = (&inputs[0], &inputs[1], &inputs[2]);
        let shape = x.shape();
        if y.shape() != shape {
            return Err(Error::shape("where", "input \"y\"", shape, y.shape()));
        }
        let sc = Self::cond_strides(c.shape(), shape)
            .ok_or_else(|| Self::cond_error(ctx.node, shape, c.shape()))?;
        let st = contiguous_strides(shape);
        let out = map_n(
            shape,
            [
                Operand {
                    data: data(c, "where", "condition")?,
                    strides: &sc,
                },
                Operand {
                    data: data(x, "where", "x")?,
                    strides: &st,
                },
                Operand {
                    data: data(y, "where", "y")?,
                    strides: &st,
                },
            ],
            |[c, x, y]| if c != 0.0 { x } else { y },
        )?;
        Ok(vec![NDArray::from_f32(shape, out)?])
    }

    fn backward(
        &self,
        ctx: &OpCtx,
        out_grads: &[NDArray],
        inputs: &[NDArray],
        _outputs: &[NDArray],
        _aux: &mut [NDArray],
    ) -> Result<Vec<Option<NDArray>>> {
        let (c, g) = (&inputs[0], &out_grads[0]);
        let shape = g.shape();
        let sc = Self::cond_strides(c.shape(), shape)
            .ok_or_else(|| Self::cond_error(ctx.node, shape, c.shape()))?;
        let st = contiguous_strides(shape);
        let ins = [
            Operand {
                data: data(c, "where", "condition")?,
                strides: &sc,
            },
            Operand {
                data: data(g, "where", "output gradient")?,
                strides: &st,
            },
        ];
        let dx = map_n(shape, ins, |[c, g]| if c != 0.0 { g } else { 0.0 })?;
        let dy = map_n(shape, ins, |[c, g]| if c != 0.0 { 0.0 } else { g })?;
        // The condition is an index-like input: no gradient.
        Ok(vec![
            None,
            Some(NDArray::from_f32(shape, dx)?),
            Some(NDArray::from_f32(shape, dy)?),
        ])
    }
}

// ---------------------------------------------------------------------------------------------
// zeros_like, ones_like, BlockGrad, MakeLoss: one-input ops whose backward ignores the chain.

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Passive {
    ZerosLike,
    OnesLike,
    BlockGrad,
}

#[derive(Debug)]
struct PassiveOp {
    op: &'static str,
    kind: Passive,
}

fn create_passive(p: &Params) -> Result<Arc<dyn Operator>> {
    let kind = match p.op {
        "zeros_like" => Passive::ZerosLike,
        "ones_like" => Passive::OnesLike,
        "BlockGrad" => Passive::BlockGrad,
        other => return Err(Error::Msg(format!("internal: no operator {other}"))),
    };
    Ok(Arc::new(PassiveOp { op: p.op, kind }))
}

impl Operator for PassiveOp {
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
        Ok(vec![same_shape(self.op, node, &["data"], inputs)?])
    }

    fn forward(
        &self,
        _ctx: &OpCtx,
        inputs: &[NDArray],
        _aux: &mut [NDArray],
    ) -> Result<Vec<NDArray>> {
        let x = &inputs[0];
        Ok(vec![match self.kind {
            Passive::ZerosLike => NDArray::zeros(x.shape(), x.dtype()),
            Passive::OnesLike => NDArray::ones(x.shape(), x.dtype()),
            // Shares the input's storage: arrays are copy-on-write.
            Passive::BlockGrad => x.clone(),
        }])
    }

    fn backward(
        &self,
        _ctx: &OpCtx,
        _out_grads: &[NDArray],
        inputs: &[NDArray],
        _outputs: &[NDArray],
        _aux: &mut [NDArray],
    ) -> Result<Vec<Option<NDArray>>> {
        let x = &inputs[0];
        Ok(vec![Some(NDArray::zeros(x.shape(), x.dtype()))])
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Norm {
    Null,
    Batch,
    Valid,
}

#[derive(Debug)]
struct MakeLoss {
    grad_scale: f32,
    valid_thresh: f32,
    norm: Norm,
}

impl MakeLoss {
    fn create(p: &Params) -> Result<Arc<dyn Operator>> {
        let norm = match p.str("normalization")?.as_str() {
            "batch" => Norm::Batch,
            "valid" => Norm::Valid,
            _ => Norm::Null,
        };
        Ok(Arc::new(MakeLoss {
            grad_scale: p.float("grad_scale")? as f32,
            valid_thresh: p.float("valid_thresh")? as f32,
            norm,
        }))
    }
}

impl Operator for MakeLoss {
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
        Ok(vec![same_shape("MakeLoss", node, &["data"], inputs)?])
    }

    fn forward(
        &self,
        _ctx: &OpCtx,
        inputs: &[NDArray],
        _aux: &mut [NDArray],
    ) -> Result<Vec<NDArray>> {
        Ok(vec![inputs[0].clone()])
    }

    fn backward(
        &self,
        _ctx: &OpCtx,
        _out_grads: &[NDArray],
        inputs: &[NDArray],
        _outputs: &[NDArray],
        _aux: &mut [NDArray],
    ) -> Result<Vec<Option<NDArray>>> {
        let x = &inputs[0];
        let shape = x.shape();
        let value = match self.norm {
            Norm::Null => self.grad_scale,
            // MXNet views the data as FlatTo2D (all leading axes × last axis) and divides by
            // the rows: the batch size for 2-D data, prod(shape[:-1]) in general.
            Norm::Batch => {
                let rows: usize = shape[..shape.len().saturating_sub(1)].iter().product();
                self.grad_scale / rows.max(1) as f32
            }
            // Elements of the input above valid_thresh, at least 1 ("avoid zero" in MXNet).
            Norm::Valid => {
                let t = self.valid_thresh;
                let count = data(x, "MakeLoss", "data")?
                    .iter()
                    .filter(|&&v| t < v)
                    .count();
                self.grad_scale / count.max(1) as f32
            }
        };
        Ok(vec![Some(NDArray::full(shape, value as f64, x.dtype()))])
    }

    fn is_loss(&self) -> bool {
        true
    }
}

// ---------------------------------------------------------------------------------------------
// The registry entries.

/// The entries of this family.
pub static OPS: &[OpDef] = &[
    binary_def!(
        "elemwise_add",
        ["_add", "_plus", "_Plus"],
        "Adds two arrays of the same shape elementwise: lhs + rhs. Symbol arithmetic `a + b` \
         writes this op (as `_plus` / `_Plus` in some MXNet versions)."
    ),
    binary_def!(
        "elemwise_sub",
        ["_sub", "_minus", "_Minus"],
        "Subtracts two arrays of the same shape elementwise: lhs - rhs."
    ),
    binary_def!(
        "elemwise_mul",
        ["_mul", "_Mul"],
        "Multiplies two arrays of the same shape elementwise: lhs * rhs."
    ),
    binary_def!(
        "elemwise_div",
        ["_div", "_Div"],
        "Divides two arrays of the same shape elementwise: lhs / rhs."
    ),
    binary_def!(
        "_maximum",
        ["_Maximum"],
        "Elementwise maximum of two arrays of the same shape; the gradient of a tie goes to lhs."
    ),
    binary_def!(
        "_minimum",
        ["_Minimum"],
        "Elementwise minimum of two arrays of the same shape; the gradient of a tie goes to lhs."
    ),
    binary_def!(
        "_power",
        ["_Power"],
        "Elementwise power of two arrays of the same shape: lhs ** rhs (symbol `a ** b`)."
    ),
    binary_def!(
        "broadcast_add",
        ["broadcast_plus"],
        "Adds two arrays with numpy broadcasting (shapes aligned on the right, equal or 1 on \
         each axis). The gradient of an input is summed over the axes it was repeated along."
    ),
    binary_def!(
        "broadcast_sub",
        ["broadcast_minus"],
        "Subtracts two arrays with broadcasting: lhs - rhs."
    ),
    binary_def!(
        "broadcast_mul",
        [],
        "Multiplies two arrays with broadcasting: lhs * rhs."
    ),
    binary_def!(
        "broadcast_div",
        [],
        "Divides two arrays with broadcasting: lhs / rhs."
    ),
    binary_def!(
        "broadcast_maximum",
        [],
        "Elementwise maximum with broadcasting; the gradient of a tie goes to lhs."
    ),
    binary_def!(
        "broadcast_minimum",
        [],
        "Elementwise minimum with broadcasting; the gradient of a tie goes to lhs."
    ),
    binary_def!(
        "broadcast_power",
        [],
        "Elementwise power with broadcasting: lhs ** rhs; d/d rhs = lhs ** rhs · ln(lhs)."
    ),
    scalar_def!(
        "_plus_scalar",
        "_PlusScalar",
        "Adds a scalar: data + scalar (symbol `x + 2`)."
    ),
    scalar_def!(
        "_minus_scalar",
        "_MinusScalar",
        "Subtracts a scalar: data - scalar (symbol `x - 2`)."
    ),
    scalar_def!(
        "_rminus_scalar",
        "_RMinusScalar",
        "Subtracts from a scalar: scalar - data (symbol `2 - x`)."
    ),
    scalar_def!(
        "_mul_scalar",
        "_MulScalar",
        "Multiplies by a scalar: data * scalar (symbol `x * 2`; `-x` is scalar -1.0)."
    ),
    scalar_def!(
        "_div_scalar",
        "_DivScalar",
        "Divides by a scalar: data / scalar (symbol `x / 2`)."
    ),
    scalar_def!(
        "_rdiv_scalar",
        "_RDivScalar",
        "Divides a scalar: scalar / data (symbol `2 / x`)."
    ),
    scalar_def!(
        "_power_scalar",
        "_PowerScalar",
        "Raises to a scalar power: data ** scalar (symbol `x ** 2`)."
    ),
    scalar_def!(
        "_rpower_scalar",
        "_RPowerScalar",
        "Raises a scalar to the data: scalar ** data (symbol `2 ** x`)."
    ),
    scalar_def!(
        "_maximum_scalar",
        "_MaximumScalar",
        "Elementwise maximum with a scalar; the gradient passes where data >= scalar."
    ),
    scalar_def!(
        "_minimum_scalar",
        "_MinimumScalar",
        "Elementwise minimum with a scalar; the gradient passes where data <= scalar."
    ),
    OpDef {
        name: "add_n",
        aliases: &["ElementWiseSum"],
        py_name: None,
        doc: "Adds any number of arrays of the same shape elementwise (inputs arg0, arg1, …). \
              Every input receives the output gradient.",
        params: &[param(
            "num_args",
            Int,
            None,
            "Number of inputs (set from the inputs given).",
        )],
        create: AddN::create,
        variadic: Some("num_args"),
    },
    OpDef {
        name: "clip",
        aliases: &[],
        py_name: None,
        doc: "Clips values to [a_min, a_max]. The gradient passes only where \
              a_min <= data <= a_max.",
        params: &[
            param("a_min", Float, None, "Lower bound."),
            param("a_max", Float, None, "Upper bound."),
        ],
        create: Clip::create,
        variadic: None,
    },
    OpDef {
        name: "where",
        aliases: &[],
        py_name: None,
        doc: "Takes x where condition is non-zero and y elsewhere. condition has the shape of x, \
              or shape (N,) to select whole rows (N = x.shape[0]); x and y have one shape. \
              condition receives no gradient.",
        params: &[],
        create: |_| Ok(Arc::new(Where)),
        variadic: None,
    },
    OpDef {
        name: "zeros_like",
        aliases: &[],
        py_name: None,
        doc: "An array of zeros with the shape and type of the input; its gradient is zero.",
        params: &[],
        create: create_passive,
        variadic: None,
    },
    OpDef {
        name: "ones_like",
        aliases: &[],
        py_name: None,
        doc: "An array of ones with the shape and type of the input; its gradient is zero.",
        params: &[],
        create: create_passive,
        variadic: None,
    },
    OpDef {
        name: "BlockGrad",
        aliases: &["stop_gradient"],
        py_name: None,
        doc: "Passes the input through unchanged and stops the gradient: the input's gradient \
              is zero.",
        params: &[],
        create: create_passive,
        variadic: None,
    },
    OpDef {
        name: "MakeLoss",
        aliases: &[],
        py_name: None,
        doc: "Marks its input as a loss: the output equals the input and backward ignores the \
              head gradient, giving grad_scale everywhere (\"null\"), grad_scale / batch \
              (\"batch\"; the rows of the input seen as (prod(shape[:-1]), shape[-1])), or \
              grad_scale / the number of input elements above valid_thresh (\"valid\").",
        params: &[
            param("grad_scale", Float, Some("1"), "Scale of the gradient."),
            param(
                "valid_thresh",
                Float,
                Some("0"),
                "Elements above this count as valid for normalization=\"valid\".",
            ),
            param(
                "normalization",
                Enum(&["null", "batch", "valid"]),
                Some("null"),
                "How the gradient is normalised: not, by the batch size, or by the valid count.",
            ),
        ],
        create: MakeLoss::create,
        variadic: None,
    },
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strides_follow_numpy_broadcasting() {
        assert_eq!(contiguous_strides(&[2, 3, 4]), vec![12, 4, 1]);
        assert_eq!(broadcast_strides(&[3, 1], &[2, 3, 4]), vec![0, 1, 0]);
        assert_eq!(broadcast_strides(&[4], &[2, 3, 4]), vec![0, 0, 1]);
        assert_eq!(broadcast_strides(&[], &[2]), vec![0]);
    }

    #[test]
    fn map_n_broadcasts_and_matches_flat_path() {
        let a: Vec<f32> = (0..6).map(|v| v as f32).collect(); // (2, 3)
        let b = vec![10.0f32, 20.0]; // (2, 1)
        let (sa, sb) = (
            broadcast_strides(&[2, 3], &[2, 3]),
            broadcast_strides(&[2, 1], &[2, 3]),
        );
        let out = map_n(
            &[2, 3],
            [
                Operand {
                    data: &a,
                    strides: &sa,
                },
                Operand {
                    data: &b,
                    strides: &sb,
                },
            ],
            |[x, y]| x + y,
        )
        .unwrap();
        assert_eq!(out, vec![10.0, 11.0, 12.0, 23.0, 24.0, 25.0]);
        // Too short an operand is an error, not a panic.
        let short = [1.0f32];
        assert!(map_n(
            &[2, 3],
            [Operand {
                data: &short,
                strides: &sa
            }],
            |[x]| x
        )
        .is_err());
        // A large broadcast agrees with the flat path and is exact.
        let n = par::SERIAL_BELOW * 2 + 5;
        let big: Vec<f32> = (0..n).map(|v| (v % 97) as f32).collect();
        let one = [2.0f32];
        let s1 = contiguous_strides(&[n]);
        let s0 = broadcast_strides(&[1], &[n]);
        let got = map_n(
            &[n],
            [
                Operand {
                    data: &big,
                    strides: &s1,
                },
                Operand {
                    data: &one,
                    strides: &s0,
                },
            ],
            |[x, y]| x * y,
        )
        .unwrap();
        assert!(got.iter().zip(&big).all(|(g, v)| *g == v * 2.0));
    }

    /// Element `i` of the output read the naive way: decode, drop broadcast axes, re-encode.
    fn naive_index(i: usize, out: &[usize], shape: &[usize]) -> usize {
        let pad = out.len() - shape.len();
        let mut rem = i;
        let mut idx = vec![0; out.len()];
        for ax in (0..out.len()).rev() {
            idx[ax] = rem % out[ax];
            rem /= out[ax];
        }
        let mut off = 0;
        for (j, &d) in shape.iter().enumerate() {
            off = off * d + if d == 1 { 0 } else { idx[j + pad] };
        }
        off
    }

    #[test]
    fn map_n_agrees_with_naive_broadcasting() {
        let big = par::SERIAL_BELOW / 64 + 3;
        let cases: Vec<(Vec<usize>, Vec<usize>)> = vec![
            (vec![2, 3, 4, 5], vec![1, 3, 1, 1]),
            (vec![2, 3, 4, 5], vec![3, 1, 5]),
            (vec![5, 1, 7], vec![1, 6, 1]),
            (vec![4, 1], vec![1, 70]),
            (vec![big, 2, 64], vec![1, 2, 1]),
            (vec![big, 3, 33], vec![33]),
            (vec![3, big, 17], vec![3, 1, 1]),
            (vec![1], vec![big, 40]),
        ];
        for (sa, sb) in cases {
            let out = broadcast_shape("t", &sa, &sb).unwrap();
            let a: Vec<f32> = (0..sa.iter().product::<usize>())
                .map(|v| (v % 1013) as f32)
                .collect();
            let b: Vec<f32> = (0..sb.iter().product::<usize>())
                .map(|v| (v % 17) as f32 * 0.5)
                .collect();
            let (ta, tb) = (broadcast_strides(&sa, &out), broadcast_strides(&sb, &out));
            let got = map_n(
                &out,
                [
                    Operand {
                        data: &a,
                        strides: &ta,
                    },
                    Operand {
                        data: &b,
                        strides: &tb,
                    },
                ],
                |[x, y]| x * 3.0 - y,
            )
            .unwrap();
            for (i, g) in got.iter().enumerate() {
                let want = a[naive_index(i, &out, &sa)] * 3.0 - b[naive_index(i, &out, &sb)];
                assert_eq!(*g, want, "{sa:?} x {sb:?} at {i}");
            }
            // The gradient of b, summed back, matches a naive accumulation.
            let g = sum_to(got.clone(), &out, &sb).unwrap().to_f64_vec();
            let mut want = vec![0.0f64; b.len()];
            for (i, v) in got.iter().enumerate() {
                want[naive_index(i, &out, &sb)] += *v as f64;
            }
            for (x, y) in g.iter().zip(&want) {
                assert!((x - y).abs() <= 1e-6 * y.abs().max(1.0), "{sa:?} x {sb:?}");
            }
        }
    }

    #[test]
    fn sum_to_reduces_repeated_axes() {
        let full: Vec<f32> = (0..24).map(|v| v as f32).collect(); // (2, 3, 4)
        let g = sum_to(full.clone(), &[2, 3, 4], &[3, 1]).unwrap();
        assert_eq!(g.shape(), &[3, 1]);
        let want: Vec<f64> = (0..3)
            .map(|j| {
                (0..2)
                    .flat_map(|i| (0..4).map(move |k| (i * 12 + j * 4 + k) as f64))
                    .sum()
            })
            .collect();
        assert_eq!(g.to_f64_vec(), want);
        let same = sum_to(full, &[2, 3, 4], &[2, 3, 4]).unwrap();
        assert_eq!(same.shape(), &[2, 3, 4]);
    }
}
