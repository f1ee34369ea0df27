//! `SwapAxis` (`swapaxes`) and `broadcast_like`: operators that move values between axes or
//! repeat them along axes. Both only move values, so they work in every dtype.

use super::view::{AxisOrder, Permute};
use super::{bad_param, norm_axis, tup};
use crate::error::{Error, Result};
use crate::kernels::reduce;
use crate::ops::params::Params;
use crate::ops::{known, MaybeShape, OpCtx, Operator};
use crate::tensor::{arith, NDArray};
use crate::with_dtype;
use std::sync::Arc;

// ---------------------------------------------------------------------------------------------
// SwapAxis
// ---------------------------------------------------------------------------------------------

crate::op_params! {
    pub(crate) struct SwapAxis {
        dim1: Int = "0", "The first axis.";
        dim2: Int = "0", "The second axis.";
    }
}

impl SwapAxis {
    pub(crate) fn create(p: &Params) -> Result<Arc<dyn Operator>> {
        Ok(Arc::new(Permute(Self::from_params(p)?)))
    }
}

impl AxisOrder for SwapAxis {
    const OP: &'static str = "SwapAxis";

    /// The two axes swapped (a permutation that is its own inverse).
    fn perm(&self, node: &str, ndim: usize) -> Result<Vec<usize>> {
        let a = norm_axis(Self::OP, node, "dim1", self.dim1, ndim)?;
        let b = norm_axis(Self::OP, node, "dim2", self.dim2, ndim)?;
        let mut perm: Vec<usize> = (0..ndim).collect();
        perm.swap(a, b);
        Ok(perm)
    }
}

// ---------------------------------------------------------------------------------------------
// broadcast_like
// ---------------------------------------------------------------------------------------------

crate::op_params! {
    pub(crate) struct BroadcastLike {
        lhs_axes: OptShape = "None", "Axes of lhs to broadcast (None: all, to rhs's shape).";
        rhs_axes: OptShape = "None", "Axes of rhs whose sizes lhs_axes take.";
    }
}

impl BroadcastLike {
    pub(crate) fn create(p: &Params) -> Result<Arc<dyn Operator>> {
        Ok(Arc::new(Self::from_params(p)?))
    }

    /// The output shape for inputs of shapes `lhs` and `rhs` (MXNet's rule: without axes,
    /// `rhs`'s shape, which `lhs` must broadcast to; with axes, `lhs`'s shape with each
    /// `lhs_axes[i]` taking the size of `rhs_axes[i]`, where `lhs` has size 1).
    fn out_shape(&self, node: &str, lhs: &[usize], rhs: &[usize]) -> Result<Vec<usize>> {
        let out = match (&self.lhs_axes, &self.rhs_axes) {
            (None, None) => {
                if lhs.len() != rhs.len() {
                    return Err(Error::shape(
                        "broadcast_like",
                        format!(
                            "node \"{node}\": input \"lhs\" (as many axes as input \"rhs\", {})",
                            tup(rhs)
                        ),
                        rhs,
                        lhs,
                    ));
                }
                rhs.to_vec()
            }
            (Some(la), Some(ra)) if la.len() == ra.len() && !la.is_empty() => {
                let mut out = lhs.to_vec();
                for (&l, &r) in la.iter().zip(ra) {
                    let l = norm_axis("broadcast_like", node, "lhs_axes", l, lhs.len())?;
                    let r = norm_axis("broadcast_like", node, "rhs_axes", r, rhs.len())?;
                    out[l] = rhs[r];
                }
                out
            }
            (la, ra) => {
                return Err(bad_param(
                    "broadcast_like",
                    node,
                    "lhs_axes",
                    "lhs_axes and rhs_axes both None, or both tuples of one non-zero length",
                    format!(
                        "lhs_axes={}, rhs_axes={}",
                        la.as_deref().map_or("None".into(), tup),
                        ra.as_deref().map_or("None".into(), tup)
                    ),
                ))
            }
        };
        let fits = lhs.iter().zip(&out).all(|(&l, &o)| l == o || l == 1);
        if !fits {
            return Err(Error::shape(
                "broadcast_like",
                format!(
                    "node \"{node}\": input \"lhs\" (size 1 or the output's size {} on every axis)",
                    tup(&out)
                ),
                &out,
                lhs,
            ));
        }
        Ok(out)
    }
}

impl Operator for BroadcastLike {
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
        let names = ["lhs", "rhs"];
        let lhs = known("broadcast_like", node, &names, inputs, 0)?;
        let rhs = known("broadcast_like", node, &names, inputs, 1)?;
        Ok(vec![self.out_shape(node, lhs, rhs)?])
    }

    fn forward(
        &self,
        ctx: &OpCtx,
        inputs: &[NDArray],
        _aux: &mut [NDArray],
    ) -> Result<Vec<NDArray>> {
        let shape = self.out_shape(ctx.node, inputs[0].shape(), inputs[1].shape())?;
        Ok(vec![arith::broadcast_to(&inputs[0], &shape)?])
    }

    /// The head gradient summed back to `lhs`'s shape; `rhs` only gives a shape, so its
    /// gradient is zeros (as MXNet's `zeros_like` node).
    fn backward(
        &self,
        _ctx: &OpCtx,
        out_grads: &[NDArray],
        inputs: &[NDArray],
        _outputs: &[NDArray],
        _aux: &mut [NDArray],
    ) -> Result<Vec<Option<NDArray>>> {
        let (g, lhs, rhs) = (&out_grads[0], &inputs[0], &inputs[1]);
        let dl = if g.shape() == lhs.shape() {
            g.clone()
        } else {
            with_dtype!(g.dtype(), T => {
                let full = g.values::<T>("broadcast_like: output gradient")?.to_vec();
                NDArray::from_vec(lhs.shape(), reduce::sum_to(full, g.shape(), lhs.shape())?)?
            })
        };
        Ok(vec![
            Some(dl),
            Some(NDArray::zeros(rhs.shape(), rhs.dtype())),
        ])
    }
}
