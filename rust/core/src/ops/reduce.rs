//! Reductions and index operators (MXNet `sum`, `mean`, `max`, `min`, `prod`, `nansum`,
//! `argmax`, `argmin`, `one_hot`).

use super::{known, MaybeShape, OpCtx, OpDef, Operator, Params};
use crate::error::{Error, Result};
use crate::kernels::copy::one_hot_rows;
use crate::kernels::map::{broadcast_strides, contiguous_strides, map_n, Operand};
use crate::kernels::reduce::{reduce, ReduceOp};
use crate::tensor::reduce::arg_reduce;
use crate::tensor::{DType, NDArray, Storable};
use crate::with_dtype;
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
// sum, mean, max, min, prod, nansum

#[derive(Debug)]
struct Reduce {
    op: &'static str,
    kind: ReduceOp,
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

fn create_reduce(p: &Params, kind: ReduceOp) -> Result<Arc<dyn Operator>> {
    let q = ReduceParams::from_params(p)?;
    Ok(Arc::new(Reduce {
        op: p.op,
        kind,
        axis: q.axis,
        keepdims: q.keepdims,
        exclude: q.exclude,
    }))
}

impl Reduce {
    /// dx from the output gradient `g` and output `y`, both read in the input's index space
    /// (the keepdims shape has the same element order, repeated along the reduced axes).
    fn gradient<T: Storable>(
        &self,
        plan: &Plan,
        g: &NDArray,
        y: &NDArray,
        x: &NDArray,
        count: usize,
    ) -> Result<Vec<T>> {
        let shape = x.shape();
        let sk = broadcast_strides(&plan.keep, shape);
        let sx = contiguous_strides(shape);
        let what = format!("{}: output gradient", self.op);
        let ins = [
            Operand {
                data: g.values::<T>(&what)?,
                strides: &sk,
            },
            Operand {
                data: y.values::<T>(&what)?,
                strides: &sk,
            },
            Operand {
                data: x.values::<T>(&format!("{}: data", self.op))?,
                strides: &sx,
            },
        ];
        let zero = T::zero();
        match self.kind {
            ReduceOp::Sum => map_n(shape, ins, |[g, _, _]| g),
            ReduceOp::Mean => {
                let n = T::from_f64(count as f64);
                map_n(shape, ins, |[g, _, _]| g.div(n))
            }
            // MXNet's backward for max/min is ograd · (x == y): every position equal to the
            // extreme receives the whole gradient (ties are not split).
            ReduceOp::Max | ReduceOp::Min => {
                map_n(shape, ins, |[g, y, x]| if x == y { g } else { zero })
            }
            // ograd · y / x (mshadow_op::rdiv of data and output), as MXNet computes it.
            ReduceOp::Prod => map_n(shape, ins, |[g, y, x]| g.mul(y.div(x))),
            ReduceOp::NanSum => map_n(shape, ins, |[g, _, x]| if x.is_nan() { zero } else { g }),
        }
    }

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
        let mut reduced = vec![false; x.ndim()];
        plan.axes.iter().for_each(|&a| reduced[a] = true);
        let what = format!("{}: data", self.op);
        let out = with_dtype!(x.dtype(), T => {
            NDArray::from_vec(&plan.out, reduce::<T>(self.kind, x.values(&what)?, x.shape(), &reduced)?)?
        });
        Ok(vec![out])
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
        let count = plan.axes.iter().map(|&a| shape[a]).product::<usize>();
        let dx = with_dtype!(x.dtype(), T => {
            NDArray::from_vec(shape, self.gradient::<T>(&plan, g, y, x, count)?)?
        });
        Ok(vec![Some(dx)])
    }
}

crate::op_params! {
    struct ReduceParams {
        axis: OptShape = "None", "Axis or axes to reduce; None (or ()) reduces all of them.";
        keepdims: Bool = "False", "Whether to keep the reduced axes as size 1.";
        exclude: Bool = "False", "Whether to reduce over every axis except those in axis.";
    }
}

/// A reduction row: name, aliases, the reduction, doc.
macro_rules! reduce_def {
    ($name:literal, [$($alias:literal),*], $kind:ident, $doc:literal) => {
        OpDef {
            name: $name,
            aliases: &[$($alias),*],
            py_name: None,
            doc: $doc,
            params: ReduceParams::DEFS,
            create: |p| create_reduce(p, ReduceOp::$kind),
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

/// `max`: argmax (else argmin).
fn create_arg(p: &Params, max: bool) -> Result<Arc<dyn Operator>> {
    let q = ArgParams::from_params(p)?;
    Ok(Arc::new(Arg {
        op: p.op,
        max,
        axis: q.axis,
        keepdims: q.keepdims,
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
        let idx = arg_reduce(x, axis.map(|a| a as isize), false, self.max)?;
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

crate::op_params! {
    struct ArgParams {
        axis: OptInt = "None", "The axis to search; None searches the flattened array.";
        keepdims: Bool = "False", "Whether to keep the searched axis as size 1.";
    }
}

// ---------------------------------------------------------------------------------------------
// one_hot

const DTYPES: &[&str] = &[
    "float32", "float64", "float16", "uint8", "int8", "int32", "int64",
];

crate::op_params! {
    struct OneHotParams {
        depth: Usize, "Length of the one-hot axis.";
        on_value: Float = "1", "Value at the index.";
        off_value: Float = "0", "Value elsewhere.";
        dtype: Enum(DTYPES) = "float32", "Type of the output.";
    }
}

#[derive(Debug)]
struct OneHot {
    depth: usize,
    on: f32,
    off: f32,
    dtype: DType,
}

impl OneHot {
    fn create(p: &Params) -> Result<Arc<dyn Operator>> {
        let q = OneHotParams::from_params(p)?;
        Ok(Arc::new(OneHot {
            depth: q.depth,
            on: q.on_value as f32,
            off: q.off_value as f32,
            dtype: DType::parse(&q.dtype)?,
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
        let out = one_hot_rows(idx, depth, self.on, self.off);
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
        Sum,
        "Sums over the given axes. A reduction over every axis returns shape (1,), not a \
         scalar. The gradient is the output gradient repeated along the reduced axes."
    ),
    reduce_def!(
        "mean",
        [],
        Mean,
        "Averages over the given axes (shape (1,) for a full reduction)."
    ),
    reduce_def!(
        "max",
        ["max_axis"],
        Max,
        "Maximum over the given axes. The gradient flows to every position equal to the \
         maximum (ties each receive the whole gradient, as in MXNet)."
    ),
    reduce_def!(
        "min",
        ["min_axis"],
        Min,
        "Minimum over the given axes. The gradient flows to every position equal to the minimum."
    ),
    reduce_def!(
        "prod",
        [],
        Prod,
        "Product over the given axes; the gradient is output gradient · output / input."
    ),
    reduce_def!(
        "nansum",
        [],
        NanSum,
        "Sum over the given axes treating NaN as zero; NaN positions get no gradient."
    ),
    OpDef {
        name: "argmax",
        aliases: &[],
        py_name: None,
        doc: "Index of the largest value along an axis (the first on ties), as float32. Without \
              an axis the flattened array is searched and the result has shape (1,). No \
              gradient.",
        params: ArgParams::DEFS,
        create: |p| create_arg(p, true),
        variadic: None,
    },
    OpDef {
        name: "argmin",
        aliases: &[],
        py_name: None,
        doc: "Index of the smallest value along an axis (the first on ties), as float32. \
              No gradient.",
        params: ArgParams::DEFS,
        create: |p| create_arg(p, false),
        variadic: None,
    },
    OpDef {
        name: "one_hot",
        aliases: &[],
        py_name: None,
        doc: "One-hot encoding: output shape indices.shape + (depth,), on_value at each index \
              (truncated to an integer) and off_value elsewhere; indices outside [0, depth) \
              give a row of off_value. No gradient for indices.",
        params: OneHotParams::DEFS,
        create: OneHot::create,
        variadic: None,
    },
];
