//! Reductions and index operators (MXNet `sum`, `mean`, `max`, `min`, `prod`, `nansum`,
//! `argmax`, `argmin`, `one_hot`).

use super::broadcast::{broadcast_strides, contiguous_strides, map_n, Operand};
use super::params::{param, ParamDef, ParamKind::*};
use super::{known, MaybeShape, OpCtx, OpDef, Operator, Params};
use crate::error::{Error, Result};
use crate::kernels::par;
use crate::tensor::reduce::argmax;
use crate::tensor::{DType, NDArray};
use std::sync::Arc;

fn dims(shape: &[usize]) -> Vec<isize> {
    shape.iter().map(|&d| d as isize).collect()
}

fn axis_error(op: &str, node: &str, ndim: usize, got: impl std::fmt::Display) -> Error {
    Error::invalid(
        format!("{op} node \"{node}\": parameter \"axis\""),
        format!(
            "axes in [{}, {}) for an input of {ndim} dimensions",
            -(ndim as i64),
            ndim
        ),
        got.to_string(),
    )
}

// ---------------------------------------------------------------------------------------------
// Kernel: fold over axes.

/// Outputs per task when whole rows accumulate: fixed, so the split never depends on the
/// thread count.
const OUT_BLOCK: usize = 1024;

/// (size, stride) of each axis group, outermost first.
type Groups = Vec<(usize, usize)>;

/// Offset of the `index`-th element (row-major) of the groups' index space.
fn offset_of(mut index: usize, groups: &[(usize, usize)]) -> usize {
    let mut off = 0;
    for &(d, s) in groups.iter().rev() {
        off += (index % d) * s;
        index /= d;
    }
    off
}

/// Calls `f(offset)` for every element of the groups' index space, in row-major order (once
/// with 0 when there are no groups).
fn for_each_offset(groups: &[(usize, usize)], mut f: impl FnMut(usize)) {
    let total: usize = groups.iter().map(|g| g.0).product();
    let mut idx = vec![0usize; groups.len()];
    let mut off = 0;
    for _ in 0..total {
        f(off);
        for (i, &(d, s)) in groups.iter().enumerate().rev() {
            idx[i] += 1;
            off += s;
            if idx[i] < d {
                break;
            }
            idx[i] = 0;
            off -= d * s;
        }
    }
}

/// Folds contiguous `x` of `shape` over the axes flagged in `reduced` (`fold(acc, v)` from
/// `init`, in f64), giving the kept elements in order. Size-1 axes are dropped and neighbours
/// with the same role merged; when the innermost group is reduced each output folds a
/// contiguous run, otherwise whole rows accumulate at once (vectorised). Each output folds its
/// inputs in one fixed order, so results do not depend on the thread count.
pub fn reduce_axes<A>(
    x: &[f32],
    shape: &[usize],
    reduced: &[bool],
    init: f64,
    fold: A,
) -> Result<Vec<f32>>
where
    A: Fn(f64, f32) -> f64 + Sync + Send,
{
    let n: usize = shape.iter().product();
    if x.len() != n || reduced.len() != shape.len() {
        return Err(Error::Msg(format!(
            "internal: reduce_axes over {} values of shape {shape:?} ({} flags)",
            x.len(),
            reduced.len()
        )));
    }
    if n == 0 {
        // Nothing to read: an empty kept axis gives no outputs; a reduction over an empty
        // axis gives `init` for each output.
        let n_out: usize = shape
            .iter()
            .zip(reduced)
            .filter(|(_, &r)| !r)
            .map(|(&d, _)| d)
            .product();
        return Ok(vec![init as f32; n_out]);
    }
    // Axis groups (size, reduced), then their strides.
    let mut groups: Vec<(usize, bool)> = Vec::new();
    for (&d, &r) in shape.iter().zip(reduced) {
        if d == 1 {
            continue;
        }
        match groups.last_mut() {
            Some((size, role)) if *role == r => *size *= d,
            _ => groups.push((d, r)),
        }
    }
    let mut kept: Groups = Vec::new();
    let mut red: Groups = Vec::new();
    let mut stride = 1;
    for &(d, r) in groups.iter().rev() {
        if r {
            red.insert(0, (d, stride));
        } else {
            kept.insert(0, (d, stride));
        }
        stride *= d;
    }
    let n_out: usize = kept.iter().map(|g| g.0).product();
    let out = match groups.last() {
        // Innermost group reduced: each output folds contiguous runs; one task per output.
        Some(&(run, true)) => {
            let outer_red = &red[..red.len() - 1];
            par::map_indices(n_out, n, |i| {
                let base = offset_of(i, &kept);
                let mut acc = init;
                for_each_offset(outer_red, |off| {
                    for &v in &x[base + off..base + off + run] {
                        acc = fold(acc, v);
                    }
                });
                acc as f32
            })
        }
        // Innermost group kept (or nothing left): rows of outputs accumulate elementwise, in
        // fixed blocks of OUT_BLOCK outputs (one task each), walked as runs within rows.
        _ => {
            let row_len = kept.last().map_or(1, |g| g.0);
            let outer_kept = &kept[..kept.len().saturating_sub(1)];
            let blocks = par::map_indices(n_out.div_ceil(OUT_BLOCK), n, |b| {
                let start = b * OUT_BLOCK;
                let len = OUT_BLOCK.min(n_out - start);
                let mut out = vec![0.0f32; len];
                let mut acc = vec![init; len.min(row_len)];
                let mut done = 0;
                while done < len {
                    let pos = start + done;
                    let (row, col) = (pos / row_len, pos % row_len);
                    let seg = (row_len - col).min(len - done);
                    let base = offset_of(row, outer_kept) + col;
                    let acc = &mut acc[..seg];
                    acc.fill(init);
                    for_each_offset(&red, |off| {
                        for (a, &v) in acc.iter_mut().zip(&x[base + off..base + off + seg]) {
                            *a = fold(*a, v);
                        }
                    });
                    for (o, a) in out[done..done + seg].iter_mut().zip(acc.iter()) {
                        *o = *a as f32;
                    }
                    done += seg;
                }
                out
            });
            blocks.concat()
        }
    };
    Ok(out)
}

// ---------------------------------------------------------------------------------------------
// sum, mean, max, min, prod, nansum

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Red {
    Sum,
    Mean,
    Max,
    Min,
    Prod,
    NanSum,
}

#[derive(Debug)]
struct Reduce {
    op: &'static str,
    kind: Red,
    axis: Option<Vec<i64>>,
    keepdims: bool,
    exclude: bool,
}

/// What one reduction does to a given input shape.
struct Plan {
    /// The reduced axes, ascending.
    axes: Vec<usize>,
    /// The input shape with the reduced axes set to 1.
    keep: Vec<usize>,
    /// The output shape.
    out: Vec<usize>,
}

fn create_reduce(p: &Params) -> Result<Arc<dyn Operator>> {
    let (op, kind) = match p.op {
        "sum" => ("sum", Red::Sum),
        "mean" => ("mean", Red::Mean),
        "max" => ("max", Red::Max),
        "min" => ("min", Red::Min),
        "prod" => ("prod", Red::Prod),
        "nansum" => ("nansum", Red::NanSum),
        other => return Err(Error::Msg(format!("internal: no reduction {other}"))),
    };
    Ok(Arc::new(Reduce {
        op,
        kind,
        axis: p.opt_shape("axis")?,
        keepdims: p.bool("keepdims")?,
        exclude: p.bool("exclude")?,
    }))
}

impl Reduce {
    /// MXNet's ReduceAxesShapeImpl: no axis (or an empty tuple) reduces everything, exclude
    /// included; duplicates are an error; a reduction to nothing gives shape (1,), not a scalar.
    fn plan(&self, node: &str, shape: &[usize]) -> Result<Plan> {
        let nd = shape.len();
        let mut picked = vec![false; nd];
        match self.axis.as_deref() {
            None | Some([]) => picked.iter_mut().for_each(|p| *p = true),
            Some(list) => {
                for &a in list {
                    let i = if a < 0 { a + nd as i64 } else { a };
                    if i < 0 || i >= nd as i64 {
                        return Err(axis_error(self.op, node, nd, a));
                    }
                    let slot = &mut picked[i as usize];
                    if *slot {
                        return Err(Error::invalid(
                            format!("{} node \"{node}\": parameter \"axis\"", self.op),
                            "axes without duplicates",
                            format!("{list:?}"),
                        ));
                    }
                    *slot = true;
                }
                if self.exclude {
                    picked.iter_mut().for_each(|p| *p = !*p);
                }
            }
        }
        let axes: Vec<usize> = (0..nd).filter(|&i| picked[i]).collect();
        let keep: Vec<usize> = (0..nd)
            .map(|i| if picked[i] { 1 } else { shape[i] })
            .collect();
        let mut out: Vec<usize> = if self.keepdims {
            keep.clone()
        } else {
            (0..nd).filter(|&i| !picked[i]).map(|i| shape[i]).collect()
        };
        if out.is_empty() {
            out.push(1);
        }
        Ok(Plan { axes, keep, out })
    }
}

impl Operator for Reduce {
    fn arguments(&self) -> Vec<String> {
        vec!["data".into()]
    }

    fn infer_shape(
        &self,
        node: &str,
        inputs: &mut [MaybeShape],
        _aux: &mut [MaybeShape],
    ) -> Result<Vec<Vec<usize>>> {
        let shape = known(self.op, node, &["data"], inputs, 0)?;
        Ok(vec![self.plan(node, shape)?.out])
    }

    fn forward(
        &self,
        ctx: &OpCtx,
        inputs: &[NDArray],
        _aux: &mut [NDArray],
    ) -> Result<Vec<NDArray>> {
        let x = &inputs[0];
        let plan = self.plan(ctx.node, x.shape())?;
        let xs = x.f32s(&format!("{}: data", self.op))?;
        let mut reduced = vec![false; x.ndim()];
        plan.axes.iter().for_each(|&a| reduced[a] = true);
        let (shape, r) = (x.shape(), &reduced);
        let vals = match self.kind {
            Red::Sum => reduce_axes(xs, shape, r, 0.0, |a, v| a + v as f64),
            Red::Mean => {
                let count: usize = plan.axes.iter().map(|&a| shape[a]).product();
                let mut v = reduce_axes(xs, shape, r, 0.0, |a, v| a + v as f64)?;
                v.iter_mut()
                    .for_each(|s| *s = (*s as f64 / count as f64) as f32);
                Ok(v)
            }
            // NaN propagates (once the accumulator is NaN no comparison replaces it).
            Red::Max => reduce_axes(xs, shape, r, f64::NEG_INFINITY, |a, v| {
                if v as f64 > a || v.is_nan() {
                    v as f64
                } else {
                    a
                }
            }),
            Red::Min => reduce_axes(xs, shape, r, f64::INFINITY, |a, v| {
                if (v as f64) < a || v.is_nan() {
                    v as f64
                } else {
                    a
                }
            }),
            Red::Prod => reduce_axes(xs, shape, r, 1.0, |a, v| a * v as f64),
            Red::NanSum => {
                reduce_axes(
                    xs,
                    shape,
                    r,
                    0.0,
                    |a, v| {
                        if v.is_nan() {
                            a
                        } else {
                            a + v as f64
                        }
                    },
                )
            }
        }?;
        Ok(vec![NDArray::from_f32(&plan.out, vals)?])
    }

    fn backward(
        &self,
        ctx: &OpCtx,
        out_grads: &[NDArray],
        inputs: &[NDArray],
        outputs: &[NDArray],
        _aux: &mut [NDArray],
    ) -> Result<Vec<Option<NDArray>>> {
        let x = &inputs[0];
        let shape = x.shape();
        let plan = self.plan(ctx.node, shape)?;
        let g = &out_grads[0];
        let y = &outputs[0];
        if g.size() != plan.out.iter().product::<usize>() || y.size() != g.size() {
            return Err(Error::shape(
                self.op,
                "output gradient",
                &plan.out,
                g.shape(),
            ));
        }
        // The output (and its gradient) read in the input's index space: the keepdims shape
        // has the same element order, repeated along the reduced axes.
        let sk = broadcast_strides(&plan.keep, shape);
        let sx = contiguous_strides(shape);
        let what = format!("{}: output gradient", self.op);
        let ins = [
            Operand {
                data: g.f32s(&what)?,
                strides: &sk,
            },
            Operand {
                data: y.f32s(&what)?,
                strides: &sk,
            },
            Operand {
                data: x.f32s(&format!("{}: data", self.op))?,
                strides: &sx,
            },
        ];
        let dx = match self.kind {
            Red::Sum => map_n(shape, ins, |[g, _, _]| g),
            Red::Mean => {
                let n = plan.axes.iter().map(|&a| shape[a]).product::<usize>() as f32;
                map_n(shape, ins, |[g, _, _]| g / n)
            }
            // MXNet's backward for max/min is ograd · (x == y): every position equal to the
            // extreme receives the whole gradient (ties are not split).
            Red::Max | Red::Min => map_n(shape, ins, |[g, y, x]| if x == y { g } else { 0.0 }),
            // ograd · y / x (mshadow_op::rdiv of data and output), as MXNet computes it.
            Red::Prod => map_n(shape, ins, |[g, y, x]| g * (y / x)),
            Red::NanSum => map_n(shape, ins, |[g, _, x]| if x.is_nan() { 0.0 } else { g }),
        }?;
        Ok(vec![Some(NDArray::from_f32(shape, dx)?)])
    }
}

const REDUCE_PARAMS: &[ParamDef] = &[
    param(
        "axis",
        OptShape,
        Some("None"),
        "Axis or axes to reduce; None (or ()) reduces all of them.",
    ),
    param(
        "keepdims",
        Bool,
        Some("False"),
        "Whether to keep the reduced axes as size 1.",
    ),
    param(
        "exclude",
        Bool,
        Some("False"),
        "Whether to reduce over every axis except those in axis.",
    ),
];

macro_rules! reduce_def {
    ($name:literal, [$($alias:literal),*], $doc:literal) => {
        OpDef {
            name: $name,
            aliases: &[$($alias),*],
            py_name: None,
            doc: $doc,
            params: REDUCE_PARAMS,
            create: create_reduce,
            variadic: None,
        }
    };
}

// ---------------------------------------------------------------------------------------------
// argmax, argmin

#[derive(Debug)]
struct Arg {
    op: &'static str,
    max: bool,
    axis: Option<i64>,
    keepdims: bool,
}

fn create_arg(p: &Params) -> Result<Arc<dyn Operator>> {
    let (op, max) = match p.op {
        "argmax" => ("argmax", true),
        "argmin" => ("argmin", false),
        other => return Err(Error::Msg(format!("internal: no index reduction {other}"))),
    };
    Ok(Arc::new(Arg {
        op,
        max,
        axis: p.opt_int("axis")?,
        keepdims: p.bool("keepdims")?,
    }))
}

impl Arg {
    /// The normalised axis and the output shape (MXNet's ReduceAxisShapeImpl: without an
    /// axis, or for 1-D input, (1,) — all ones of the input's rank with keepdims).
    fn plan(&self, node: &str, shape: &[usize]) -> Result<(Option<usize>, Vec<usize>)> {
        let nd = shape.len();
        let axis = match self.axis {
            None => None,
            Some(a) => {
                let i = if a < 0 { a + nd as i64 } else { a };
                if i < 0 || i >= nd as i64 {
                    return Err(axis_error(self.op, node, nd, a));
                }
                Some(i as usize)
            }
        };
        let out = match axis {
            Some(ax) if nd > 1 => {
                if self.keepdims {
                    let mut s = shape.to_vec();
                    s[ax] = 1;
                    s
                } else {
                    let mut s = shape.to_vec();
                    s.remove(ax);
                    s
                }
            }
            _ if self.keepdims && nd > 0 => vec![1; nd],
            _ => vec![1],
        };
        if shape.iter().product::<usize>() == 0 {
            return Err(Error::invalid(
                format!("{} node \"{node}\": input \"data\"", self.op),
                "a non-empty array",
                format!("shape {}", crate::error::tuple_text(&format!("{shape:?}"))),
            ));
        }
        Ok((axis, out))
    }
}

impl Operator for Arg {
    fn arguments(&self) -> Vec<String> {
        vec!["data".into()]
    }

    fn infer_shape(
        &self,
        node: &str,
        inputs: &mut [MaybeShape],
        _aux: &mut [MaybeShape],
    ) -> Result<Vec<Vec<usize>>> {
        let shape = known(self.op, node, &["data"], inputs, 0)?;
        Ok(vec![self.plan(node, shape)?.1])
    }

    /// Indices are returned as float32, whatever the input type (as MXNet does).
    fn infer_type(
        &self,
        inputs: &mut [Option<DType>],
        _aux: &mut [Option<DType>],
    ) -> Result<Vec<DType>> {
        if let Some(slot) = inputs.first_mut() {
            *slot = Some(slot.unwrap_or(DType::Float32));
        }
        Ok(vec![DType::Float32])
    }

    fn forward(
        &self,
        ctx: &OpCtx,
        inputs: &[NDArray],
        _aux: &mut [NDArray],
    ) -> Result<Vec<NDArray>> {
        let x = &inputs[0];
        let (axis, out) = self.plan(ctx.node, x.shape())?;
        // argmin is argmax of the negation: the first index still wins ties.
        let src = if self.max { x.clone() } else { x.neg() };
        let idx = argmax(&src, axis.map(|a| a as isize), false)?.astype(DType::Float32);
        Ok(vec![idx.reshape(&dims(&out))?])
    }

    /// Indices are piecewise constant: no gradient.
    fn backward(
        &self,
        _ctx: &OpCtx,
        _out_grads: &[NDArray],
        _inputs: &[NDArray],
        _outputs: &[NDArray],
        _aux: &mut [NDArray],
    ) -> Result<Vec<Option<NDArray>>> {
        Ok(vec![None])
    }
}

const ARG_PARAMS: &[ParamDef] = &[
    param(
        "axis",
        OptInt,
        Some("None"),
        "The axis to search; None searches the flattened array.",
    ),
    param(
        "keepdims",
        Bool,
        Some("False"),
        "Whether to keep the searched axis as size 1.",
    ),
];

// ---------------------------------------------------------------------------------------------
// one_hot

const DTYPES: &[&str] = &[
    "float32", "float64", "float16", "uint8", "int8", "int32", "int64",
];

#[derive(Debug)]
struct OneHot {
    depth: usize,
    on: f32,
    off: f32,
    dtype: DType,
}

impl OneHot {
    fn create(p: &Params) -> Result<Arc<dyn Operator>> {
        Ok(Arc::new(OneHot {
            depth: p.usize_min("depth", 0)?,
            on: p.float("on_value")? as f32,
            off: p.float("off_value")? as f32,
            dtype: DType::parse(&p.str("dtype")?)?,
        }))
    }
}

impl Operator for OneHot {
    fn arguments(&self) -> Vec<String> {
        vec!["indices".into()]
    }

    fn infer_shape(
        &self,
        node: &str,
        inputs: &mut [MaybeShape],
        _aux: &mut [MaybeShape],
    ) -> Result<Vec<Vec<usize>>> {
        let mut shape = known("one_hot", node, &["indices"], inputs, 0)?.to_vec();
        shape.push(self.depth);
        Ok(vec![shape])
    }

    fn infer_type(
        &self,
        inputs: &mut [Option<DType>],
        _aux: &mut [Option<DType>],
    ) -> Result<Vec<DType>> {
        if let Some(slot) = inputs.first_mut() {
            *slot = Some(slot.unwrap_or(DType::Float32));
        }
        Ok(vec![self.dtype])
    }

    fn forward(
        &self,
        _ctx: &OpCtx,
        inputs: &[NDArray],
        _aux: &mut [NDArray],
    ) -> Result<Vec<NDArray>> {
        let ind = &inputs[0];
        let idx = ind.f32s("one_hot: indices")?;
        let depth = self.depth;
        let mut out = vec![self.off; idx.len() * depth];
        let on = self.on;
        // MXNet casts each index to int (truncating) and leaves rows of indices outside
        // [0, depth) at off_value.
        par::for_each_row_mut(&mut out, depth, |r, row| {
            let j = idx.get(r).map_or(-1, |&v| v as i64);
            if j >= 0 && (j as usize) < row.len() {
                row[j as usize] = on;
            }
        });
        let mut shape = ind.shape().to_vec();
        shape.push(depth);
        Ok(vec![NDArray::from_f32(&shape, out)?.astype(self.dtype)])
    }

    fn backward(
        &self,
        _ctx: &OpCtx,
        _out_grads: &[NDArray],
        _inputs: &[NDArray],
        _outputs: &[NDArray],
        _aux: &mut [NDArray],
    ) -> Result<Vec<Option<NDArray>>> {
        Ok(vec![None])
    }
}

// ---------------------------------------------------------------------------------------------
// The registry entries.

/// The entries of this family.
pub static OPS: &[OpDef] = &[
    reduce_def!(
        "sum",
        ["sum_axis"],
        "Sums over the given axes. A reduction over every axis returns shape (1,), not a \
         scalar. The gradient is the output gradient repeated along the reduced axes."
    ),
    reduce_def!(
        "mean",
        [],
        "Averages over the given axes (shape (1,) for a full reduction)."
    ),
    reduce_def!(
        "max",
        ["max_axis"],
        "Maximum over the given axes. The gradient flows to every position equal to the \
         maximum (ties each receive the whole gradient, as in MXNet)."
    ),
    reduce_def!(
        "min",
        ["min_axis"],
        "Minimum over the given axes. The gradient flows to every position equal to the minimum."
    ),
    reduce_def!(
        "prod",
        [],
        "Product over the given axes; the gradient is output gradient · output / input."
    ),
    reduce_def!(
        "nansum",
        [],
        "Sum over the given axes treating NaN as zero; NaN positions get no gradient."
    ),
    OpDef {
        name: "argmax",
        aliases: &[],
        py_name: None,
        doc: "Index of the largest value along an axis (the first on ties), as float32. Without \
              an axis the flattened array is searched and the result has shape (1,). No \
              gradient.",
        params: ARG_PARAMS,
        create: create_arg,
        variadic: None,
    },
    OpDef {
        name: "argmin",
        aliases: &[],
        py_name: None,
        doc: "Index of the smallest value along an axis (the first on ties), as float32. \
              No gradient.",
        params: ARG_PARAMS,
        create: create_arg,
        variadic: None,
    },
    OpDef {
        name: "one_hot",
        aliases: &[],
        py_name: None,
        doc: "One-hot encoding: output shape indices.shape + (depth,), on_value at each index \
              (truncated to an integer) and off_value elsewhere; indices outside [0, depth) \
              give a row of off_value. No gradient for indices.",
        params: &[
            param("depth", Int, None, "Length of the one-hot axis."),
            param("on_value", Float, Some("1"), "Value at the index."),
            param("off_value", Float, Some("0"), "Value elsewhere."),
            param(
                "dtype",
                Enum(DTYPES),
                Some("float32"),
                "Type of the output.",
            ),
        ],
        create: OneHot::create,
        variadic: None,
    },
];

#[cfg(test)]
mod tests {
    use super::*;

    fn naive(x: &[f32], shape: &[usize], reduced: &[bool]) -> Vec<f64> {
        let kept: Vec<usize> = (0..shape.len()).filter(|&i| !reduced[i]).collect();
        let n_out: usize = kept.iter().map(|&i| shape[i]).product();
        let mut out = vec![0.0f64; n_out];
        for (i, &v) in x.iter().enumerate() {
            let mut rem = i;
            let mut idx = vec![0; shape.len()];
            for ax in (0..shape.len()).rev() {
                idx[ax] = rem % shape[ax];
                rem /= shape[ax];
            }
            let o = kept.iter().fold(0, |acc, &ax| acc * shape[ax] + idx[ax]);
            out[o] += v as f64;
        }
        out
    }

    #[test]
    fn reduce_axes_agrees_with_naive_sums() {
        let long = par::SERIAL_BELOW / 8 + 5;
        let cases: Vec<(Vec<usize>, Vec<bool>)> = vec![
            (vec![3, 4, 5], vec![true, false, false]),
            (vec![3, 4, 5], vec![false, true, false]),
            (vec![3, 4, 5], vec![false, false, true]),
            (vec![3, 4, 5], vec![true, false, true]),
            (vec![3, 4, 5], vec![false, true, true]),
            (vec![3, 4, 5], vec![true, true, true]),
            (vec![3, 4, 5], vec![false, false, false]),
            (vec![2, 1, 3, 1], vec![false, true, true, false]),
            (vec![1, 1], vec![true, true]),
            (vec![long, 9], vec![true, false]),
            (vec![9, long], vec![true, false]),
            (vec![long, 3, 4], vec![false, true, false]),
            (vec![4, long], vec![false, true]),
        ];
        for (shape, reduced) in cases {
            let x: Vec<f32> = (0..shape.iter().product::<usize>())
                .map(|v| ((v * 7) % 23) as f32 - 11.0)
                .collect();
            let got = reduce_axes(&x, &shape, &reduced, 0.0, |a, v| a + v as f64).unwrap();
            let want = naive(&x, &shape, &reduced);
            assert_eq!(got.len(), want.len(), "{shape:?} {reduced:?}");
            for (g, w) in got.iter().zip(&want) {
                assert_eq!(*g as f64, *w, "{shape:?} {reduced:?}");
            }
        }
        // Empty inputs and mismatched lengths.
        assert_eq!(
            reduce_axes(&[], &[3, 0], &[false, true], 1.0, |a, _| a).unwrap(),
            vec![1.0; 3]
        );
        assert!(reduce_axes(&[1.0], &[2], &[true], 0.0, |a, _| a).is_err());
    }
}
