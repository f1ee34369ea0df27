//! Binary, scalar and n-ary elementwise operators (MXNet `elemwise_add/sub/mul/div`,
//! `_maximum`, `_minimum`, `_power`, `broadcast_add/sub/mul/div/maximum/minimum/power`, the
//! `_*_scalar` family, `add_n`). They compute in their inputs' own dtype (every dtype) through
//! `kernels::map` and `kernels::binary`, the same code as NDArray arithmetic.

use super::{
    data, known, same_dtype, same_shape, Epilogue, MaybeShape, OpCtx, OpDef, Operator, Params,
};
use crate::error::{Error, Result};
use crate::kernels::binary::{self, BinaryOp};
use crate::kernels::map::{broadcast_shape, broadcast_strides, contiguous_strides, map_n, Operand};
use crate::kernels::{par, reduce};
use crate::tensor::DType;
use crate::tensor::{Element, NDArray, Storable};
use crate::with_dtype;
use std::sync::Arc;

/// `full` (a gradient of the broadcast shape `out_shape`) summed to an input of `shape`.
fn sum_to<T: Storable>(full: Vec<T>, out_shape: &[usize], shape: &[usize]) -> Result<NDArray> {
    NDArray::from_vec(shape, reduce::sum_to(full, out_shape, shape)?)
}

// ---------------------------------------------------------------------------------------------
// Binary operators, same-shape and broadcasting.

/// Full-shape gradients of lhs and rhs; `None` stands for the head gradient itself.
type GradPair<T> = (Option<Vec<T>>, Option<Vec<T>>);

#[derive(Debug)]
struct Binary {
    op: &'static str,
    kind: BinaryOp,
    broadcast: bool,
}

fn create_binary(p: &Params, kind: BinaryOp, broadcast: bool) -> Result<Arc<dyn Operator>> {
    Ok(Arc::new(Binary {
        op: p.op,
        kind,
        broadcast,
    }))
}

/// `f(x)` computed in f64 and rounded to `T`: the transcendental parts of gradients.
fn via_f64<T: Element>(x: T, f: impl Fn(f64) -> f64) -> T {
    T::from_f64(f(x.to_f64()))
}

impl Binary {
    /// Full-shape gradients of lhs and rhs (`None`: the head gradient itself). The formulas
    /// are MXNet's backward functors (div_grad = 1/b, div_rgrad = -a/b², power_rgrad =
    /// a^b·ln a; maximum sends ties to lhs: `ge` for lhs, `lt` for rhs).
    fn backward_values<T: Element>(
        &self,
        shape: &[usize],
        g: Operand<T>,
        a: Operand<T>,
        b: Operand<T>,
    ) -> Result<GradPair<T>> {
        let ins = [g, a, b];
        let (zero, one) = (T::zero(), T::one());
        let lhs = match self.kind {
            BinaryOp::Add | BinaryOp::Sub => None,
            BinaryOp::Mul => Some(map_n(shape, ins, |[g, _, y]| g.mul(y))?),
            BinaryOp::Div => Some(map_n(shape, ins, |[g, _, y]| g.mul(one.div(y)))?),
            BinaryOp::Maximum => Some(map_n(
                shape,
                ins,
                |[g, x, y]| if x >= y { g } else { zero },
            )?),
            BinaryOp::Minimum => Some(map_n(
                shape,
                ins,
                |[g, x, y]| if x <= y { g } else { zero },
            )?),
            _ => Some(map_n(shape, ins, |[g, x, y]| {
                g.mul(y.mul(via_f64(x, |x| x.powf(y.to_f64() - 1.0))))
            })?),
        };
        let rhs = match self.kind {
            BinaryOp::Add => None,
            BinaryOp::Sub => Some(map_n(shape, [g], |[g]| g.neg())?),
            BinaryOp::Mul => Some(map_n(shape, ins, |[g, x, _]| g.mul(x))?),
            BinaryOp::Div => Some(map_n(shape, ins, |[g, x, y]| g.mul(x.neg().div(y.mul(y))))?),
            BinaryOp::Maximum => Some(map_n(shape, ins, |[g, x, y]| if x < y { g } else { zero })?),
            BinaryOp::Minimum => Some(map_n(shape, ins, |[g, x, y]| if x > y { g } else { zero })?),
            _ => Some(map_n(shape, ins, |[g, x, y]| {
                g.mul(via_f64(x, |x| x.powf(y.to_f64()) * x.ln()))
            })?),
        };
        Ok((lhs, rhs))
    }

    fn backward_typed<T: Element + Storable>(
        &self,
        g: &NDArray,
        a: &NDArray,
        b: &NDArray,
    ) -> Result<Vec<Option<NDArray>>> {
        let shape = g.shape().to_vec();
        let (sa, sb, sg) = (
            broadcast_strides(a.shape(), &shape),
            broadcast_strides(b.shape(), &shape),
            contiguous_strides(&shape),
        );
        let gs = data::<T>(g, self.op, "output gradient")?;
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
        let finish = |full: Option<Vec<T>>, like: &NDArray| -> Result<NDArray> {
            match full {
                None if like.shape() == shape.as_slice() => Ok(g.clone()),
                None => sum_to(gs.to_vec(), &shape, like.shape()),
                Some(v) => sum_to(v, &shape, like.shape()),
            }
        };
        Ok(vec![Some(finish(lhs, a)?), Some(finish(rhs, b)?)])
    }
}

/// The name of binary input `i` in errors.
fn lhs_rhs(i: usize) -> String {
    format!("input \"{}\"", ["lhs", "rhs", "output gradient"][i.min(2)])
}

impl Operator for Binary {
    fn dtype_generic(&self) -> bool {
        true
    }

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
        ctx: &OpCtx,
        inputs: &[NDArray],
        _aux: &mut [NDArray],
    ) -> Result<Vec<NDArray>> {
        let (a, b) = (&inputs[0], &inputs[1]);
        if !self.broadcast && a.shape() != b.shape() {
            return Err(Error::shape(self.op, "input \"rhs\"", a.shape(), b.shape()));
        }
        let dtype = same_dtype(self.op, ctx.node, inputs, lhs_rhs)?;
        let out = with_dtype!(dtype, T => {
            let (shape, v) = binary::binary::<T>(
                self.kind,
                data(a, self.op, "lhs")?,
                a.shape(),
                data(b, self.op, "rhs")?,
                b.shape(),
            )?;
            NDArray::from_vec(&shape, v)?
        });
        Ok(vec![out])
    }

    fn same_shape_add(&self) -> bool {
        self.kind == BinaryOp::Add && !self.broadcast
    }

    /// Same-shape float32 add, subtract and multiply with `epilogue` run on each chunk of the
    /// output as it is written: ResNet's residual add and the relu after it in one pass over
    /// memory instead of two. The same operations in the same order as `forward` and then the
    /// epilogue, so the same bits.
    fn forward_then(
        &self,
        _ctx: &OpCtx,
        inputs: &[NDArray],
        _aux: &mut [NDArray],
        epilogue: &Epilogue,
    ) -> Option<Result<Vec<NDArray>>> {
        let (a, b) = (&inputs[0], &inputs[1]);
        let kind = self.kind;
        let fusable = matches!(kind, BinaryOp::Add | BinaryOp::Sub | BinaryOp::Mul)
            && a.shape() == b.shape()
            && a.dtype() == DType::Float32
            && b.dtype() == DType::Float32;
        if !fusable {
            return None;
        }
        // One loop per op, so each inlines and vectorises (a function pointer would not).
        fn run(x: &[f32], y: &[f32], c: &mut [f32], f: impl Fn(f32, f32) -> f32) {
            c.iter_mut()
                .zip(x.iter().zip(y))
                .for_each(|(o, (&x, &y))| *o = f(x, y));
        }
        Some((|| {
            let (x, y) = (
                data::<f32>(a, self.op, "lhs")?,
                data::<f32>(b, self.op, "rhs")?,
            );
            let fill = |out: &mut [f32]| {
                par::for_each_chunk_mut(out, |start, c| {
                    let (x, y) = (&x[start..start + c.len()], &y[start..start + c.len()]);
                    match kind {
                        BinaryOp::Add => run(x, y, c, |x, y| x + y),
                        BinaryOp::Sub => run(x, y, c, |x, y| x - y),
                        _ => run(x, y, c, |x, y| x * y),
                    }
                    epilogue(start, c);
                });
                Ok::<(), Error>(())
            };
            // SAFETY: every chunk of the output is written before the epilogue reads it.
            let out = unsafe { par::overwritten(x.len(), fill)? };
            Ok(vec![NDArray::from_vec(a.shape(), out)?])
        })())
    }

    fn backward(
        &self,
        ctx: &OpCtx,
        out_grads: &[NDArray],
        inputs: &[NDArray],
        _outputs: &[NDArray],
        _aux: &mut [NDArray],
    ) -> Result<Vec<Option<NDArray>>> {
        let (a, b, g) = (&inputs[0], &inputs[1], &out_grads[0]);
        with_dtype!(same_dtype(self.op, ctx.node, &[a.clone(), b.clone(), g.clone()], lhs_rhs)?, T => {
            self.backward_typed::<T>(g, a, b)
        })
    }
}

/// A binary row: name, aliases, the operation, whether it broadcasts, doc.
macro_rules! binary_def {
    ($name:literal, [$($alias:literal),*], $kind:ident, $broadcast:literal, $doc:literal) => {
        OpDef {
            name: $name,
            aliases: &[$($alias),*],
            py_name: None,
            doc: $doc,
            params: &[],
            create: |p| create_binary(p, BinaryOp::$kind, $broadcast),
            variadic: None,
        }
    };
}

// ---------------------------------------------------------------------------------------------
// Scalar operators.

#[derive(Debug)]
struct ScalarOp {
    op: &'static str,
    kind: BinaryOp,
    reverse: bool,
    s: f64,
}

/// `reverse`: the scalar is the left operand (`2 - x`).
fn create_scalar(p: &Params, kind: BinaryOp, reverse: bool) -> Result<Arc<dyn Operator>> {
    Ok(Arc::new(ScalarOp {
        op: p.op,
        kind,
        reverse,
        s: ScalarParams::from_params(p)?.scalar,
    }))
}

impl ScalarOp {
    /// dx from (g, x, y); the functors are MXNet's: rdiv_grad = -s/x², power_grad =
    /// s·x^(s-1), rpower_grad = y·ln s (from the output), maximum/minimum pass ties (ge / le).
    fn gradient<T: Element + Storable>(
        &self,
        g: &NDArray,
        x: &NDArray,
        y: &NDArray,
    ) -> Result<Vec<T>> {
        let shape = g.shape();
        let st = contiguous_strides(shape);
        let operand = |a: &'_ NDArray, what: &str| -> Result<()> {
            if a.shape() != shape {
                return Err(Error::shape(self.op, what, shape, a.shape()));
            }
            Ok(())
        };
        operand(x, "data")?;
        operand(y, "output")?;
        let ins = [
            Operand {
                data: data::<T>(g, self.op, "output gradient")?,
                strides: &st,
            },
            Operand {
                data: data::<T>(x, self.op, "data")?,
                strides: &st,
            },
            Operand {
                data: data::<T>(y, self.op, "output")?,
                strides: &st,
            },
        ];
        let (s, sf) = (T::from_f64(self.s), self.s);
        let zero = T::zero();
        match (self.kind, self.reverse) {
            (BinaryOp::Sub, true) => map_n(shape, ins, |[g, _, _]| g.neg()),
            (BinaryOp::Add | BinaryOp::Sub, _) => map_n(shape, ins, |[g, _, _]| g),
            (BinaryOp::Mul, _) => map_n(shape, ins, |[g, _, _]| g.mul(s)),
            (BinaryOp::Div, false) => map_n(shape, ins, |[g, _, _]| g.div(s)),
            (BinaryOp::Div, true) => map_n(shape, ins, |[g, x, _]| g.mul(s.neg().div(x.mul(x)))),
            (BinaryOp::Pow, false) => map_n(shape, ins, |[g, x, _]| {
                g.mul(s.mul(via_f64(x, |x| x.powf(sf - 1.0))))
            }),
            (BinaryOp::Pow, true) => {
                let ln_s = T::from_f64(sf.ln());
                map_n(shape, ins, |[g, _, y]| g.mul(y.mul(ln_s)))
            }
            (BinaryOp::Maximum, _) => map_n(shape, ins, |[g, x, _]| if x >= s { g } else { zero }),
            _ => map_n(shape, ins, |[g, x, _]| if x <= s { g } else { zero }),
        }
    }
}

impl Operator for ScalarOp {
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
        let out = with_dtype!(x.dtype(), T => {
            let v = binary::scalar::<T>(self.kind, data(x, self.op, "data")?, T::from_f64(self.s), self.reverse)?;
            NDArray::from_vec(x.shape(), v)?
        });
        Ok(vec![out])
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
        if matches!(
            (self.kind, self.reverse),
            (BinaryOp::Add, _) | (BinaryOp::Sub, false)
        ) {
            return Ok(vec![Some(g.clone())]);
        }
        let dx = with_dtype!(g.dtype(), T => {
            NDArray::from_vec(g.shape(), self.gradient::<T>(g, &inputs[0], &outputs[0])?)?
        });
        Ok(vec![Some(dx)])
    }
}

crate::op_params! {
    /// MXNet parses the scalar as a double and casts it to the data type before applying it;
    /// is_int only records how the front end saw it.
    struct ScalarParams {
        scalar: Float = "1",
            "The scalar operand (cast to the data type before it is applied, as MXNet does).";
        is_int: Bool = "True",
            "Whether MXNet saw the scalar as an integer; accepted for MXNet 1.9 JSON (the \
             scalar is cast to the data type either way).";
    }
}

/// A scalar row: name, alias, the operation, whether the scalar is the left operand, doc.
macro_rules! scalar_def {
    ($name:literal, $alias:literal, $kind:ident, $reverse:literal, $doc:literal) => {
        OpDef {
            name: $name,
            aliases: &[$alias],
            py_name: None,
            doc: $doc,
            params: ScalarParams::DEFS,
            create: |p| create_scalar(p, BinaryOp::$kind, $reverse),
            variadic: None,
        }
    };
}

// ---------------------------------------------------------------------------------------------
// add_n

crate::op_params! {
    struct AddN {
        num_args: Count, "Number of inputs (set from the inputs given).";
    }
}

impl AddN {
    fn create(p: &Params) -> Result<Arc<dyn Operator>> {
        Ok(Arc::new(Self::from_params(p)?))
    }

    /// The inputs summed in argument order, element by element: the same bits at any
    /// thread count.
    fn sum<T: Element + Storable>(inputs: &[NDArray]) -> Result<Vec<T>> {
        let xs = inputs
            .iter()
            .enumerate()
            .map(|(i, x)| data::<T>(x, "add_n", &format!("arg{i}")))
            .collect::<Result<Vec<_>>>()?;
        let out = binary::sum_in_order(&xs);
        Ok(out)
    }
}

impl Operator for AddN {
    fn dtype_generic(&self) -> bool {
        true
    }

    fn arguments(&self) -> Vec<String> {
        (0..self.num_args).map(|i| format!("arg{i}")).collect()
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
        ctx: &OpCtx,
        inputs: &[NDArray],
        _aux: &mut [NDArray],
    ) -> Result<Vec<NDArray>> {
        let Some(first) = inputs.first() else {
            return Err(Error::Msg("internal: add_n without inputs".into()));
        };
        let shape = first.shape();
        for (i, x) in inputs.iter().enumerate() {
            if x.shape() != shape {
                return Err(Error::shape(
                    "add_n",
                    format!("input \"arg{i}\""),
                    shape,
                    x.shape(),
                ));
            }
        }
        let t = same_dtype("add_n", ctx.node, inputs, |i| format!("input \"arg{i}\""))?;
        let out = with_dtype!(t, T => {
            NDArray::from_vec(shape, Self::sum::<T>(inputs)?)?
        });
        Ok(vec![out])
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
// The registry entries.

/// The entries of this family.
pub static OPS: &[OpDef] = &[
    binary_def!(
        "elemwise_add",
        ["_add", "_plus", "_Plus"],
        Add,
        false,
        "Adds two arrays of the same shape elementwise: lhs + rhs. Symbol arithmetic `a + b` \
         writes this op (as `_plus` / `_Plus` in some MXNet versions)."
    ),
    binary_def!(
        "elemwise_sub",
        ["_sub", "_minus", "_Minus"],
        Sub,
        false,
        "Subtracts two arrays of the same shape elementwise: lhs - rhs."
    ),
    binary_def!(
        "elemwise_mul",
        ["_mul", "_Mul"],
        Mul,
        false,
        "Multiplies two arrays of the same shape elementwise: lhs * rhs."
    ),
    binary_def!(
        "elemwise_div",
        ["_div", "_Div"],
        Div,
        false,
        "Divides two arrays of the same shape elementwise: lhs / rhs."
    ),
    binary_def!(
        "_maximum",
        ["_Maximum"],
        Maximum,
        false,
        "Elementwise maximum of two arrays of the same shape; the gradient of a tie goes to lhs."
    ),
    binary_def!(
        "_minimum",
        ["_Minimum"],
        Minimum,
        false,
        "Elementwise minimum of two arrays of the same shape; the gradient of a tie goes to lhs."
    ),
    binary_def!(
        "_power",
        ["_Power"],
        Pow,
        false,
        "Elementwise power of two arrays of the same shape: lhs ** rhs (symbol `a ** b`)."
    ),
    binary_def!(
        "broadcast_add",
        ["broadcast_plus"],
        Add,
        true,
        "Adds two arrays with numpy broadcasting (shapes aligned on the right, equal or 1 on \
         each axis). The gradient of an input is summed over the axes it was repeated along."
    ),
    binary_def!(
        "broadcast_sub",
        ["broadcast_minus"],
        Sub,
        true,
        "Subtracts two arrays with broadcasting: lhs - rhs."
    ),
    binary_def!(
        "broadcast_mul",
        [],
        Mul,
        true,
        "Multiplies two arrays with broadcasting: lhs * rhs."
    ),
    binary_def!(
        "broadcast_div",
        [],
        Div,
        true,
        "Divides two arrays with broadcasting: lhs / rhs."
    ),
    binary_def!(
        "broadcast_maximum",
        [],
        Maximum,
        true,
        "Elementwise maximum with broadcasting; the gradient of a tie goes to lhs."
    ),
    binary_def!(
        "broadcast_minimum",
        [],
        Minimum,
        true,
        "Elementwise minimum with broadcasting; the gradient of a tie goes to lhs."
    ),
    binary_def!(
        "broadcast_power",
        [],
        Pow,
        true,
        "Elementwise power with broadcasting: lhs ** rhs; d/d rhs = lhs ** rhs · ln(lhs)."
    ),
    scalar_def!(
        "_plus_scalar",
        "_PlusScalar",
        Add,
        false,
        "Adds a scalar: data + scalar (symbol `x + 2`)."
    ),
    scalar_def!(
        "_minus_scalar",
        "_MinusScalar",
        Sub,
        false,
        "Subtracts a scalar: data - scalar (symbol `x - 2`)."
    ),
    scalar_def!(
        "_rminus_scalar",
        "_RMinusScalar",
        Sub,
        true,
        "Subtracts from a scalar: scalar - data (symbol `2 - x`)."
    ),
    scalar_def!(
        "_mul_scalar",
        "_MulScalar",
        Mul,
        false,
        "Multiplies by a scalar: data * scalar (symbol `x * 2`; `-x` is scalar -1.0)."
    ),
    scalar_def!(
        "_div_scalar",
        "_DivScalar",
        Div,
        false,
        "Divides by a scalar: data / scalar (symbol `x / 2`)."
    ),
    scalar_def!(
        "_rdiv_scalar",
        "_RDivScalar",
        Div,
        true,
        "Divides a scalar: scalar / data (symbol `2 / x`)."
    ),
    scalar_def!(
        "_power_scalar",
        "_PowerScalar",
        Pow,
        false,
        "Raises to a scalar power: data ** scalar (symbol `x ** 2`)."
    ),
    scalar_def!(
        "_rpower_scalar",
        "_RPowerScalar",
        Pow,
        true,
        "Raises a scalar to the data: scalar ** data (symbol `2 ** x`)."
    ),
    scalar_def!(
        "_maximum_scalar",
        "_MaximumScalar",
        Maximum,
        false,
        "Elementwise maximum with a scalar; the gradient passes where data >= scalar."
    ),
    scalar_def!(
        "_minimum_scalar",
        "_MinimumScalar",
        Minimum,
        false,
        "Elementwise minimum with a scalar; the gradient passes where data <= scalar."
    ),
    OpDef {
        name: "add_n",
        aliases: &["ElementWiseSum"],
        py_name: None,
        doc: "Adds any number of arrays of the same shape elementwise (inputs arg0, arg1, …). \
              Every input receives the output gradient.",
        params: AddN::DEFS,
        create: AddN::create,
        variadic: Some("num_args"),
    },
];
