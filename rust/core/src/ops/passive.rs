//! One-input operators whose backward ignores the chain: `zeros_like`, `ones_like`,
//! `BlockGrad` (the gradient stops) and `MakeLoss` (the gradient is a constant).

use super::{same_shape, MaybeShape, OpCtx, OpDef, Operator, Params};
use crate::error::Result;
use crate::tensor::NDArray;
use std::sync::Arc;

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

fn create_passive(p: &Params, kind: Passive) -> Result<Arc<dyn Operator>> {
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

crate::op_params! {
    struct MakeLossParams {
        grad_scale: Float = "1", "Scale of the gradient.";
        valid_thresh: Float = "0",
            "Elements above this count as valid for normalization=\"valid\".";
        normalization: Enum(&["null", "batch", "valid"]) = "null",
            "How the gradient is normalised: not, by the batch size, or by the valid count.";
    }
}

#[derive(Debug)]
struct MakeLoss {
    grad_scale: f32,
    valid_thresh: f32,
    norm: Norm,
}

impl MakeLoss {
    fn create(p: &Params) -> Result<Arc<dyn Operator>> {
        let q = MakeLossParams::from_params(p)?;
        let norm = match q.normalization.as_str() {
            "batch" => Norm::Batch,
            "valid" => Norm::Valid,
            _ => Norm::Null,
        };
        Ok(Arc::new(MakeLoss {
            grad_scale: q.grad_scale as f32,
            valid_thresh: q.valid_thresh as f32,
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
    OpDef {
        name: "zeros_like",
        aliases: &[],
        py_name: None,
        doc: "An array of zeros with the shape and type of the input; its gradient is zero.",
        params: &[],
        create: |p| create_passive(p, Passive::ZerosLike),
        variadic: None,
    },
    OpDef {
        name: "ones_like",
        aliases: &[],
        py_name: None,
        doc: "An array of ones with the shape and type of the input; its gradient is zero.",
        params: &[],
        create: |p| create_passive(p, Passive::OnesLike),
        variadic: None,
    },
    OpDef {
        name: "BlockGrad",
        aliases: &["stop_gradient"],
        py_name: None,
        doc: "Passes the input through unchanged and stops the gradient: the input's gradient \
              is zero.",
        params: &[],
        create: |p| create_passive(p, Passive::BlockGrad),
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
        params: MakeLossParams::DEFS,
        create: MakeLoss::create,
        variadic: None,
    },
];
