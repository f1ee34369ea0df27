//! Binary, scalar and n-ary elementwise operators (MXNet `elemwise_add/sub/mul/div`,
//! `_maximum`, `_minimum`, `_power`, `broadcast_add/sub/mul/div/maximum/minimum/power`, the
//! `_*_scalar` family, `add_n`, `clip`, `where`, `zeros_like`, `ones_like`, `BlockGrad`,
//! `MakeLoss`). They compute in their inputs' own dtype (every dtype) through
//! `kernels::map` and `kernels::binary`, the same code as NDArray arithmetic.

use super::params::{param, ParamDef, ParamKind::*};
use super::{
    check_or_fill, known, same_dtype, unknown_input, MaybeShape, OpCtx, OpDef, Operator, Params,
};
use crate::error::{Error, Result};
use crate::kernels::binary::{self, BinaryOp};
use crate::kernels::map::{broadcast_shape, broadcast_strides, contiguous_strides, map_n, Operand};
use crate::kernels::{par, reduce};
use crate::tensor::{DType, Element, NDArray, Storable};
use crate::with_dtype;
use std::sync::Arc;

/// `full` (a gradient of the broadcast shape `out_shape`) summed to an input of `shape`.
fn sum_to<T: Storable>(full: Vec<T>, out_shape: &[usize], shape: &[usize]) -> Result<NDArray> {
    NDArray::from_vec(shape, reduce::sum_to(full, out_shape, shape)?)
}

fn data<'a, T: Storable>(x: &'a NDArray, op: &str, arg: &str) -> Result<&'a [T]> {
    x.values(&format!("{op}: {arg}"))
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

/// MXNet name, operation, broadcasting.
static BINARY: &[(&str, BinaryOp, bool)] = &[
    ("elemwise_add", BinaryOp::Add, false),
    ("elemwise_sub", BinaryOp::Sub, false),
    ("elemwise_mul", BinaryOp::Mul, false),
    ("elemwise_div", BinaryOp::Div, false),
    ("_maximum", BinaryOp::Maximum, false),
    ("_minimum", BinaryOp::Minimum, false),
    ("_power", BinaryOp::Pow, false),
    ("broadcast_add", BinaryOp::Add, true),
    ("broadcast_sub", BinaryOp::Sub, true),
    ("broadcast_mul", BinaryOp::Mul, true),
    ("broadcast_div", BinaryOp::Div, true),
    ("broadcast_maximum", BinaryOp::Maximum, true),
    ("broadcast_minimum", BinaryOp::Minimum, true),
    ("broadcast_power", BinaryOp::Pow, true),
];

/// Full-shape gradients of lhs and rhs; `None` stands for the head gradient itself.
type GradPair<T> = (Option<Vec<T>>, Option<Vec<T>>);

#[derive(Debug)]
struct Binary {
    op: &'static str,
    kind: BinaryOp,
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

/// MXNet name, operation, and whether the scalar is the left operand.
static SCALAR: &[(&str, BinaryOp, bool)] = &[
    ("_plus_scalar", BinaryOp::Add, false),
    ("_minus_scalar", BinaryOp::Sub, false),
    ("_rminus_scalar", BinaryOp::Sub, true),
    ("_mul_scalar", BinaryOp::Mul, false),
    ("_div_scalar", BinaryOp::Div, false),
    ("_rdiv_scalar", BinaryOp::Div, true),
    ("_power_scalar", BinaryOp::Pow, false),
    ("_rpower_scalar", BinaryOp::Pow, true),
    ("_maximum_scalar", BinaryOp::Maximum, false),
    ("_minimum_scalar", BinaryOp::Minimum, false),
];

#[derive(Debug)]
struct ScalarOp {
    op: &'static str,
    kind: BinaryOp,
    reverse: bool,
    s: f64,
}

fn create_scalar(p: &Params) -> Result<Arc<dyn Operator>> {
    let &(op, kind, reverse) = SCALAR
        .iter()
        .find(|(n, _, _)| *n == p.op)
        .ok_or_else(|| Error::Msg(format!("internal: no scalar operator {}", p.op)))?;
    // MXNet parses the scalar as a double and casts it to the data type before applying it;
    // is_int only records how the front end saw it.
    let _ = p.bool("is_int")?;
    Ok(Arc::new(ScalarOp {
        op,
        kind,
        reverse,
        s: p.float("scalar")?,
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

const SCALAR_PARAMS: &[ParamDef] = &[
    param(
        "scalar",
        Float,
        Some("1"),
        "The scalar operand (cast to the data type before it is applied, as MXNet does).",
    ),
    param(
        "is_int",
        Bool,
        Some("True"),
        "Whether MXNet saw the scalar as an integer; accepted for MXNet 1.9 JSON (the scalar is cast to the data type either way).",
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

    /// The inputs summed in argument order, element by element: the same bits at any
    /// thread count.
    fn sum<T: Element + Storable>(inputs: &[NDArray]) -> Result<Vec<T>> {
        let xs = inputs
            .iter()
            .enumerate()
            .map(|(i, x)| data::<T>(x, "add_n", &format!("arg{i}")))
            .collect::<Result<Vec<_>>>()?;
        let mut out = vec![T::zero(); xs.first().map_or(0, |x| x.len())];
        par::for_each_chunk_mut(&mut out, |start, chunk| {
            let end = start + chunk.len();
            chunk.copy_from_slice(&xs[0][start..end]);
            for x in &xs[1..] {
                for (o, &v) in chunk.iter_mut().zip(&x[start..end]) {
                    *o = o.add(v);
                }
            }
        });
        Ok(out)
    }
}

impl Operator for AddN {
    fn dtype_generic(&self) -> bool {
        true
    }

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
// clip

#[derive(Debug)]
struct Clip {
    lo: f64,
    hi: f64,
}

impl Clip {
    fn create(p: &Params) -> Result<Arc<dyn Operator>> {
        Ok(Arc::new(Clip {
            lo: p.float("a_min")?,
            hi: p.float("a_max")?,
        }))
    }

    /// The bounds cast to the data type, as MXNet casts them.
    fn bounds<T: Element>(&self) -> (T, T) {
        (T::from_f64(self.lo), T::from_f64(self.hi))
    }

    fn clip<T: Element + Storable>(&self, x: &NDArray) -> Result<Vec<T>> {
        let st = contiguous_strides(x.shape());
        let (lo, hi) = self.bounds::<T>();
        // mshadow_op::clip: the upper bound is tested first, NaN passes through.
        map_n(
            x.shape(),
            [Operand {
                data: data::<T>(x, "clip", "data")?,
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
        )
    }

    /// The gradient passes where a_min <= x <= a_max (bounds included, as MXNet's clip_grad).
    fn gradient<T: Element + Storable>(&self, g: &NDArray, x: &NDArray) -> Result<Vec<T>> {
        let st = contiguous_strides(x.shape());
        let (lo, hi) = self.bounds::<T>();
        let zero = T::zero();
        map_n(
            x.shape(),
            [
                Operand {
                    data: data::<T>(g, "clip", "output gradient")?,
                    strides: &st,
                },
                Operand {
                    data: data::<T>(x, "clip", "data")?,
                    strides: &st,
                },
            ],
            |[g, v]| if v > hi || v < lo { zero } else { g },
        )
    }
}

impl Operator for Clip {
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
        Ok(vec![same_shape("clip", node, &["data"], inputs)?])
    }

    fn forward(
        &self,
        _ctx: &OpCtx,
        inputs: &[NDArray],
        _aux: &mut [NDArray],
    ) -> Result<Vec<NDArray>> {
        let x = &inputs[0];
        let out = with_dtype!(x.dtype(), T => NDArray::from_vec(x.shape(), self.clip::<T>(x)?)?);
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
        let (x, g) = (&inputs[0], &out_grads[0]);
        if x.shape() != g.shape() {
            return Err(Error::shape(
                "clip",
                "output gradient",
                x.shape(),
                g.shape(),
            ));
        }
        let dx =
            with_dtype!(x.dtype(), T => NDArray::from_vec(x.shape(), self.gradient::<T>(g, x)?)?);
        Ok(vec![Some(dx)])
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

impl Where {
    /// The condition as ones and zeros of the data type, read in x's index space (any
    /// nonzero condition value selects x, whatever the condition's own dtype).
    fn mask<T: Element + Storable>(
        &self,
        node: &str,
        c: &NDArray,
        shape: &[usize],
    ) -> Result<(Vec<T>, Vec<usize>)> {
        let sc = Self::cond_strides(c.shape(), shape)
            .ok_or_else(|| Self::cond_error(node, shape, c.shape()))?;
        let flags = c
            .astype(DType::Float64)
            .to_f64_vec()
            .into_iter()
            .map(|v| if v != 0.0 { T::one() } else { T::zero() })
            .collect();
        Ok((flags, sc))
    }

    fn select<T: Element + Storable>(
        &self,
        node: &str,
        c: &NDArray,
        x: &NDArray,
        y: &NDArray,
    ) -> Result<Vec<T>> {
        let shape = x.shape();
        let (mask, sc) = self.mask::<T>(node, c, shape)?;
        let st = contiguous_strides(shape);
        let zero = T::zero();
        map_n(
            shape,
            [
                Operand {
                    data: &mask,
                    strides: &sc,
                },
                Operand {
                    data: data::<T>(x, "where", "x")?,
                    strides: &st,
                },
                Operand {
                    data: data::<T>(y, "where", "y")?,
                    strides: &st,
                },
            ],
            |[c, x, y]| if c != zero { x } else { y },
        )
    }

    /// The gradients of x and y: the output gradient where the condition picks each.
    fn gradients<T: Element + Storable>(
        &self,
        node: &str,
        c: &NDArray,
        g: &NDArray,
    ) -> Result<[Vec<T>; 2]> {
        let shape = g.shape();
        let (mask, sc) = self.mask::<T>(node, c, shape)?;
        let st = contiguous_strides(shape);
        let ins = [
            Operand {
                data: &mask,
                strides: &sc,
            },
            Operand {
                data: data::<T>(g, "where", "output gradient")?,
                strides: &st,
            },
        ];
        let zero = T::zero();
        Ok([
            map_n(shape, ins, |[c, g]| if c != zero { g } else { zero })?,
            map_n(shape, ins, |[c, g]| if c != zero { zero } else { g })?,
        ])
    }
}

impl Operator for Where {
    fn dtype_generic(&self) -> bool {
        true
    }

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

    /// MXNet's WhereOpType: x, y and the output share one dtype; the condition keeps its own
    /// (float32 when nothing says otherwise).
    fn infer_type(
        &self,
        inputs: &mut [Option<DType>],
        _aux: &mut [Option<DType>],
    ) -> Result<Vec<DType>> {
        let t = inputs[1].or(inputs[2]).unwrap_or(DType::Float32);
        inputs[1] = Some(t);
        inputs[2] = Some(t);
        inputs[0] = Some(inputs[0].unwrap_or(t));
        Ok(vec![t])
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
        let dtype = same_dtype("where", ctx.node, &inputs[1..], |i| {
            format!("input \"{}\"", ["x", "y"][i])
        })?;
        let out = with_dtype!(dtype, T => NDArray::from_vec(shape, self.select::<T>(ctx.node, c, x, y)?)?);
        Ok(vec![out])
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
        let [dx, dy] = with_dtype!(g.dtype(), T => {
            let [dx, dy] = self.gradients::<T>(ctx.node, c, g)?;
            [NDArray::from_vec(shape, dx)?, NDArray::from_vec(shape, dy)?]
        });
        // The condition is an index-like input: no gradient.
        Ok(vec![None, Some(dx), Some(dy)])
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
                let t = t as f64;
                let count = x.to_f64_vec().iter().filter(|&&v| t < v).count();
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
