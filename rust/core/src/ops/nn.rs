//! Dense layers: FullyConnected.

use super::{known, ChannelAffine, Epilogue, MaybeShape, OpCtx, OpDef, Operator, Params, Prepared};
use crate::error::{Error, Result};
use crate::kernels::conv_packed::{packed_product, PackedFilters};
use crate::kernels::dense::{dense_backward, dense_forward, DenseWant};
use crate::kernels::gemm::MatRef;
use crate::kernels::par;
use crate::kernels::scratch::Scratch;
use crate::kernels::tuning::DENSE_PACKED_MAX_ROWS;
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
    /// typical layers' outputs are still in cache). Inference over at most
    /// [`DENSE_PACKED_MAX_ROWS`] rows runs the packed product (the weight packed for this
    /// call), as an executor that prepared the weight ahead does: predicting through a
    /// training module's executor or an inference one gives the same bits.
    fn forward_with(
        &self,
        ctx: &OpCtx,
        inputs: &[NDArray],
        epilogue: Option<&Epilogue>,
    ) -> Result<Vec<NDArray>> {
        let (m, k) = self.matrix_dims(inputs[0].shape());
        if !ctx.is_train && m <= DENSE_PACKED_MAX_ROWS && k > 0 {
            let w = inputs[1].f32s("FullyConnected: weight")?;
            let packed = PackedFilters::new(w, self.num_hidden, k);
            return self.forward_packed(inputs, &packed, epilogue);
        }
        let x = inputs[0].f32s("FullyConnected: data")?;
        let w = inputs[1].f32s("FullyConnected: weight")?;
        let n = self.num_hidden;
        let xm = MatRef::row_major(x, m, k);
        let wm = MatRef::row_major(w, n, k);
        let bias = self.bias(inputs)?;
        let out = dense_forward(xm, wm, bias)?;
        self.finish(inputs, out, epilogue)
    }

    /// The bias, unless `no_bias`.
    fn bias<'a>(&self, inputs: &'a [NDArray]) -> Result<Option<&'a [f32]>> {
        match self.no_bias {
            true => Ok(None),
            false => Ok(Some(inputs[2].f32s("FullyConnected: bias")?)),
        }
    }

    /// `epilogue` over the product `out`, which becomes the output array.
    fn finish(
        &self,
        inputs: &[NDArray],
        mut out: Vec<f32>,
        epilogue: Option<&Epilogue>,
    ) -> Result<Vec<NDArray>> {
        if let Some(e) = epilogue {
            par::for_each_chunk_mut(&mut out, |start, c| e(start, c));
        }
        Ok(vec![NDArray::from_f32(
            &self.out_shape(inputs[0].shape()),
            out,
        )?])
    }

    /// The forward pass through the weight packed into panels of filters
    /// (`kernels::conv_packed`, as a 1×1 convolution over the rows), then `epilogue`.
    fn forward_packed(
        &self,
        inputs: &[NDArray],
        w: &PackedFilters,
        epilogue: Option<&Epilogue>,
    ) -> Result<Vec<NDArray>> {
        let (m, k) = self.matrix_dims(inputs[0].shape());
        let x = inputs[0].f32s("FullyConnected: data")?;
        let bias = self.bias(inputs)?;
        // The product reads its operand as (k × rows): the rows' transpose (for one row, the
        // row itself). Its output (rows, filters) is y's layout.
        let xt = if m > 1 {
            let mut xt = Scratch::take(m * k);
            for (i, row) in x.chunks_exact(k).enumerate() {
                for (r, &v) in row.iter().enumerate() {
                    xt[r * m + i] = v;
                }
            }
            Some(xt)
        } else {
            None
        };
        let b: &[f32] = xt.as_deref().unwrap_or(x);
        let mut out = vec![0.0f32; m * self.num_hidden];
        packed_product(w, b, m, m, 1, bias, &mut out, true);
        self.finish(inputs, out, epilogue)
    }
}

impl Operator for FullyConnected {
    /// At inference over at most [`DENSE_PACKED_MAX_ROWS`] rows: the weight packed once into
    /// panels of filters (`kernels::conv_packed`), which the product streams a block at a time
    /// through every row, instead of a GEMM that packs it on every call.
    fn prepare(
        &self,
        _ctx: &OpCtx,
        inputs: &[NDArray],
        affine: Option<&ChannelAffine>,
    ) -> Option<Result<Prepared>> {
        let (m, k) = self.matrix_dims(inputs.first()?.shape());
        if affine.is_some() || m > DENSE_PACKED_MAX_ROWS || k == 0 {
            return None;
        }
        let pack = || -> Result<Prepared> {
            let w = inputs
                .get(1)
                .ok_or_else(|| Error::Msg("internal: FullyConnected inputs".into()))?
                .f32s("FullyConnected: weight")?;
            Ok(Arc::new(PackedFilters::new(w, self.num_hidden, k)))
        };
        Some(pack())
    }

    fn forward_prepared(
        &self,
        _ctx: &OpCtx,
        inputs: &[NDArray],
        prepared: &Prepared,
        epilogue: Option<&Epilogue>,
    ) -> Option<Result<Vec<NDArray>>> {
        let w = prepared.downcast_ref::<PackedFilters>()?;
        let (m, k) = self.matrix_dims(inputs.first()?.shape());
        if m > DENSE_PACKED_MAX_ROWS || w.k() != k || w.filters() != self.num_hidden {
            return None;
        }
        Some(self.forward_packed(inputs, w, epilogue))
    }

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
        ctx: &OpCtx,
        inputs: &[NDArray],
        _aux: &mut [NDArray],
    ) -> Result<Vec<NDArray>> {
        self.forward_with(ctx, inputs, None)
    }

    fn forward_then(
        &self,
        ctx: &OpCtx,
        inputs: &[NDArray],
        _aux: &mut [NDArray],
        epilogue: &Epilogue,
    ) -> Option<Result<Vec<NDArray>>> {
        Some(self.forward_with(ctx, inputs, Some(epilogue)))
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

#[cfg(test)]
mod tests {
    use super::super::{lookup, OpCtx};
    use crate::tensor::NDArray;
    use std::collections::BTreeMap;

    /// The packed inference path (one row, a batch, the most rows it takes, flatten on and
    /// off, with and without bias, a fused relu), prepared ahead and packed per call, against
    /// the GEMM forward of a training pass, within rounding (the products sum in another
    /// order); the two inference paths give the same bits.
    #[test]
    fn packed_inference_matches_the_gemm_forward() {
        let ctx = OpCtx {
            is_train: false,
            node: "fc",
            need_grad: &[],
        };
        let train = OpCtx {
            is_train: true,
            ..ctx
        };
        let relu = |_: usize, v: &mut [f32]| v.iter_mut().for_each(|x| *x = x.max(0.0));
        for (shape, hidden, flatten, no_bias) in [
            (vec![1, 300], 37, "True", "False"),
            (vec![5, 3, 4, 10], 50, "True", "True"),
            (vec![2, 32, 70], 19, "False", "False"),
            (vec![64, 33], 100, "True", "False"),
        ] {
            let attrs = BTreeMap::from([
                ("num_hidden".to_string(), hidden.to_string()),
                ("flatten".to_string(), flatten.to_string()),
                ("no_bias".to_string(), no_bias.to_string()),
            ]);
            let op = lookup("FullyConnected")
                .unwrap()
                .instantiate("fc", &attrs)
                .unwrap();
            let k = if flatten == "True" {
                shape[1..].iter().product()
            } else {
                shape[shape.len() - 1]
            };
            let fill = |n: usize, seed: usize| -> Vec<f32> {
                (0..n)
                    .map(|i| ((i * 31 + seed) % 29) as f32 / 29.0 - 0.45)
                    .collect()
            };
            let n_x = shape.iter().product();
            let mut inputs = vec![
                NDArray::from_f32(&shape, fill(n_x, 1)).unwrap(),
                NDArray::from_f32(&[hidden, k], fill(hidden * k, 2)).unwrap(),
            ];
            if no_bias == "False" {
                inputs.push(NDArray::from_f32(&[hidden], fill(hidden, 3)).unwrap());
            }
            let want = op
                .forward_then(&train, &inputs, &mut [], &relu)
                .unwrap()
                .unwrap();
            let prepared = op.prepare(&ctx, &inputs, None).unwrap().unwrap();
            let got = op
                .forward_prepared(&ctx, &inputs, &prepared, Some(&relu))
                .unwrap()
                .unwrap();
            let per_call = op
                .forward_then(&ctx, &inputs, &mut [], &relu)
                .unwrap()
                .unwrap();
            let bits = |a: &NDArray| {
                a.to_f64_vec()
                    .iter()
                    .map(|v| v.to_bits())
                    .collect::<Vec<_>>()
            };
            assert_eq!(bits(&got[0]), bits(&per_call[0]), "{shape:?}");
            assert_eq!(got[0].shape(), want[0].shape());
            let (g, w) = (got[0].f32s("got").unwrap(), want[0].f32s("want").unwrap());
            for (i, (a, b)) in g.iter().zip(w).enumerate() {
                assert!(
                    (a - b).abs() <= 1e-5 * (1.0 + b.abs()),
                    "{shape:?} [{i}] {a} vs {b}"
                );
            }
        }
        // More rows than the packed product takes: the GEMM forward runs instead.
        let attrs = BTreeMap::from([("num_hidden".to_string(), "3".to_string())]);
        let op = lookup("FullyConnected")
            .unwrap()
            .instantiate("fc", &attrs)
            .unwrap();
        let inputs = [
            NDArray::from_f32(&[65, 2], vec![0.5; 130]).unwrap(),
            NDArray::from_f32(&[3, 2], vec![1.0; 6]).unwrap(),
            NDArray::from_f32(&[3], vec![0.0; 3]).unwrap(),
        ];
        assert!(op.prepare(&ctx, &inputs, None).is_none());
    }
}
