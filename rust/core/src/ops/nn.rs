//! Dense layers: FullyConnected.

use super::{known, Epilogue, MaybeShape, OpCtx, OpDef, Operator, Params};
use crate::error::Result;
use crate::kernels::dense::{dense_backward, DenseWant};
use crate::kernels::gemm::{gemm, MatRef};
use crate::kernels::par;
use crate::kernels::scratch::Scratch;
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
        let mut out = if self.no_bias {
            let mut out = par::filled(m * n, 0.0f32);
            gemm(xm, wm.t(), &mut out, false)?;
            out
        } else {
            let b = inputs[2].f32s("FullyConnected: bias")?;
            biased_product(xm, wm, b)?
        };
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

/// x·Wᵀ + b. With many rows (a language model's vocabulary layer over a whole batch of
/// steps) the bias is one more inner term, [x | 1]·[W | b]ᵀ, so the product only writes its
/// output: adding the product to rows of the bias read and wrote that output (tens of MB)
/// once more. The sum is the same either way (the bias is the last term). With few rows
/// (one sequence at inference) copying W for the extra term costs more than it saves.
fn biased_product(x: MatRef<'_, f32>, w: MatRef<'_, f32>, b: &[f32]) -> Result<Vec<f32>> {
    let (m, k, n) = (x.rows, x.cols, w.rows);
    if 2 * m <= k + 1 {
        let mut out = par::tiled(b, m);
        gemm(x, w.t(), &mut out, true)?;
        return Ok(out);
    }
    let mut x1 = Scratch::take(m * (k + 1));
    for (r, row) in x1.chunks_exact_mut(k + 1).enumerate() {
        row[..k].copy_from_slice(&x.data[r * k..(r + 1) * k]);
        row[k] = 1.0;
    }
    let mut w1 = Scratch::take(n * (k + 1));
    for (j, row) in w1.chunks_exact_mut(k + 1).enumerate() {
        row[..k].copy_from_slice(&w.data[j * k..(j + 1) * k]);
        row[k] = b[j];
    }
    let mut out = par::filled(m * n, 0.0f32);
    gemm(
        MatRef::row_major(&x1, m, k + 1),
        MatRef::row_major(&w1, n, k + 1).t(),
        &mut out,
        false,
    )?;
    Ok(out)
}
