//! Selection operators: `clip` (bounds) and `where` (a condition picks x or y). They compute in
//! their inputs' own dtype through `kernels::map`.

use super::{data, same_dtype, same_shape, InPlace, MaybeShape, OpCtx, OpDef, Operator, Params};
use crate::error::{Error, Result};
use crate::kernels::map::{contiguous_strides, map_n, Operand};
use crate::kernels::unary;
use crate::tensor::{DType, Element, NDArray, Storable};
use crate::with_dtype;
use std::sync::Arc;

// ---------------------------------------------------------------------------------------------
// clip

crate::op_params! {
    /// The bounds, cast to the data type as MXNet casts them.
    struct Clip {
        a_min: Float, "Lower bound.";
        a_max: Float, "Upper bound.";
    }
}

impl Clip {
    fn create(p: &Params) -> Result<Arc<dyn Operator>> {
        Ok(Arc::new(Self::from_params(p)?))
    }

    /// The bounds cast to the data type, as MXNet casts them.
    fn bounds<T: Element>(&self) -> (T, T) {
        (T::from_f64(self.a_min), T::from_f64(self.a_max))
    }

    fn clip<T: Element + Storable>(&self, x: &NDArray) -> Result<Vec<T>> {
        let (lo, hi) = self.bounds::<T>();
        Ok(unary::clip(data::<T>(x, "clip", "data")?, lo, hi))
    }

    fn gradient<T: Element + Storable>(&self, g: &NDArray, x: &NDArray) -> Result<Vec<T>> {
        let (lo, hi) = self.bounds::<T>();
        Ok(unary::clip_grad(
            data::<T>(g, "clip", "output gradient")?,
            data::<T>(x, "clip", "data")?,
            lo,
            hi,
            T::zero(),
        ))
    }
}

impl Operator for Clip {
    fn dtype_generic(&self) -> bool {
        true
    }

    fn in_place(&self) -> Option<InPlace> {
        // relu6 (clip 0..6) follows most convolutions of MobileNet: at inference it runs in
        // the convolution's output while in cache instead of as a pass of its own.
        let (lo, hi) = self.bounds::<f32>();
        Some(InPlace::Clip { lo, hi })
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
// The registry entries.

/// The entries of this family.
pub static OPS: &[OpDef] = &[
    OpDef {
        name: "clip",
        aliases: &[],
        py_name: None,
        doc: "Clips values to [a_min, a_max]. The gradient passes only where \
              a_min <= data <= a_max.",
        params: Clip::DEFS,
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
];
