//! Dense layers: FullyConnected.

use super::{known, Epilogue, MaybeShape, OpCtx, OpDef, Operator, Params};
use crate::error::Result;
use crate::kernels::dense::{dense_backward, dense_forward, DenseWant};
use crate::kernels::gemm::MatRef;
use crate::kernels::par;
use crate::tensor::NDArray;
use std::sync::Arc;

/// The entries of this family.
pub static OPS: &[OpDef] = &[OpDef {
    name: "FullyConnected",
    aliases: &[],
    py_name: None,
    doc: "Applies a linear transformation: Y = X·Wᵀ + b. With flatten=True the input is \
          reshaped to (batch, -1) first; with flatten=False the transformation applies to the \
          last axis. Weight shape (num_hidden, input_dim), bias shape (num_hidden,).",
    params: FullyConnected::DEFS,
    create: FullyConnected::create,
    variadic: None,
}];

crate::op_params! {
    struct FullyConnected {
        num_hidden: Positive, "Number of hidden units (output features).";
        no_bias: Bool = "False", "Whether to leave out the bias term.";
        flatten: Bool = "True", "Whether to collapse all but the first axis of the input.";
    }
}

impl FullyConnected {
    fn create(p: &Params) -> Result<Arc<dyn Operator>> {
        Ok(Arc::new(Self::from_params(p)?))
    }

    /// (rows, input_dim) of the data viewed as a matrix.
    fn matrix_dims(&self, shape: &[usize]) -> (usize, usize) {
        match shape.len() {
            0 => (1, 1),
            _ if self.flatten => (shape[0], shape[1..].iter().product()),
            n => (shape[..n - 1].iter().product(), shape[n - 1]),
        }
    }

    fn out_shape(&self, data: &[usize]) -> Vec<usize> {
        if self.flatten {
            vec![data.first().copied().unwrap_or(1), self.num_hidden]
        } else {
            let mut s = data[..data.len().saturating_sub(1)].to_vec();
            s.push(self.num_hidden);
            s
        }
    }

    /// The forward pass, then `epilogue` over the output (a fused activation, applied while
    /// typical layers' outputs are still in cache).
    fn forward_with(
        &self,
        inputs: &[NDArray],
        epilogue: Option<&Epilogue>,
    ) -> Result<Vec<NDArray>> {
        let x = inputs[0].f32s("FullyConnected: data")?;
        let w = inputs[1].f32s("FullyConnected: weight")?;
        let (m, k) = self.matrix_dims(inputs[0].shape());
        let n = self.num_hidden;
        let xm = MatRef::row_major(x, m, k);
        let wm = MatRef::row_major(w, n, k);
        let bias = match self.no_bias {
            true => None,
            false => Some(inputs[2].f32s("FullyConnected: bias")?),
        };
        let mut out = dense_forward(xm, wm, bias)?;
        if let Some(e) = epilogue {
            par::for_each_chunk_mut(&mut out, |_, c| e(c));
        }
        Ok(vec![NDArray::from_f32(
            &self.out_shape(inputs[0].shape()),
            out,
        )?])
    }
}

impl Operator for FullyConnected {
    fn arguments(&self) -> Vec<String> {
        if self.no_bias {
            vec!["data".into(), "weight".into()]
        } else {
            vec!["data".into(), "weight".into(), "bias".into()]
        }
    }

    fn infer_shape(
        &self,
        node: &str,
        inputs: &mut [MaybeShape],
        _aux: &mut [MaybeShape],
    ) -> Result<Vec<Vec<usize>>> {
        let data = known("FullyConnected", node, &["data"], inputs, 0)?.to_vec();
        let (_, k) = self.matrix_dims(&data);
        let want_w = vec![self.num_hidden, k];
        super::check_or_fill("FullyConnected", node, "weight", &mut inputs[1], &want_w)?;
        if !self.no_bias {
            super::check_or_fill(
                "FullyConnected",
                node,
                "bias",
                &mut inputs[2],
                &[self.num_hidden],
            )?;
        }
        Ok(vec![self.out_shape(&data)])
    }

    fn forward(
        &self,
        _ctx: &OpCtx,
        inputs: &[NDArray],
        _aux: &mut [NDArray],
    ) -> Result<Vec<NDArray>> {
        self.forward_with(inputs, None)
    }

    fn forward_then(
        &self,
        _ctx: &OpCtx,
        inputs: &[NDArray],
        _aux: &mut [NDArray],
        epilogue: &Epilogue,
    ) -> Option<Result<Vec<NDArray>>> {
        Some(self.forward_with(inputs, Some(epilogue)))
    }

    fn backward(
        &self,
        ctx: &OpCtx,
        out_grads: &[NDArray],
        inputs: &[NDArray],
        _outputs: &[NDArray],
        _aux: &mut [NDArray],
    ) -> Result<Vec<Option<NDArray>>> {
        let x = inputs[0].f32s("FullyConnected: data")?;
        let w = inputs[1].f32s("FullyConnected: weight")?;
        let g = out_grads[0].f32s("FullyConnected: output gradient")?;
        let (m, k) = self.matrix_dims(inputs[0].shape());
        let n = self.num_hidden;
        // A first layer's data gradient (a third of the layer's backward work) is skipped
        // when nothing consumes it.
        let want = DenseWant {
            dx: ctx.needs_grad(0),
            dw: ctx.needs_grad(1),
            db: !self.no_bias,
        };
        let d = dense_backward(x, w, g, (m, k, n), want)?;
        let mut grads = vec![
            d.dx.map(|v| NDArray::from_f32(inputs[0].shape(), v))
                .transpose()?,
            d.dw.map(|v| NDArray::from_f32(inputs[1].shape(), v))
                .transpose()?,
        ];
        if let Some(db) = d.db {
            grads.push(Some(NDArray::from_f32(&[n], db)?));
        }
        Ok(grads)
    }
}
