//! Normalisation and regularisation: MXNet `BatchNorm`, `LayerNorm`, `Dropout`, over the
//! kernels of `kernels::norm`.

use super::{
    check_or_fill, known, ChannelAffine, Epilogue, MaybeShape, OpCtx, OpDef, Operator, Params,
};
use crate::error::{Error, Result};
use crate::kernels::binary::{self, BinaryOp};
use crate::kernels::map::axis_dims;
use crate::kernels::norm::{self, channel_sums2, inv_std};
use crate::tensor::random::seeded_uniform;
use crate::tensor::{arith::broadcast_to, norm_axis, DType, NDArray};
use std::sync::Arc;

/// The entries of this family.
pub static OPS: &[OpDef] = &[
    OpDef {
        name: "BatchNorm",
        aliases: &[],
        py_name: None,
        doc: "Batch normalisation: y = (x − mean) / sqrt(var + eps) · gamma + beta per channel \
              (axis). Training uses the batch's mean and biased variance; inference and \
              use_global_stats use the moving statistics (auxiliary states moving_mean, \
              moving_var). A training step (forward with is_train, then backward) folds the \
              batch statistics into the moving ones as new = momentum·old + (1 − momentum)·batch, \
              during backward as MXNet 1.9.1 does, so forward-only calls leave them alone. With \
              fix_gamma=True gamma is treated as ones and gets a zero gradient.",
        params: BatchNormParams::DEFS,
        create: BatchNorm::create,
        variadic: None,
    },
    OpDef {
        name: "LayerNorm",
        aliases: &[],
        py_name: None,
        doc: "Layer normalisation: y = (x − mean) / sqrt(var + eps) · gamma + beta, with mean \
              and variance taken over `axis` for every position of the other axes, and gamma, \
              beta of shape (data.shape[axis],). Hidden outputs: the mean and the standard \
              deviation (visible with output_mean_var).",
        params: LayerNormParams::DEFS,
        create: LayerNorm::create,
        variadic: None,
    },
    OpDef {
        name: "Dropout",
        aliases: &[],
        py_name: None,
        doc: "Dropout: in training (or always, with mode=\"always\") each element is zeroed with \
              probability p and the others are scaled by 1/(1 − p); the mask comes from the \
              global seeded stream (mx.random.seed). `axes` share one mask value along the given \
              axes (variational dropout). In inference it is the identity and passes the \
              gradient unchanged.",
        params: DropoutParams::DEFS,
        create: Dropout::create,
        variadic: None,
    },
];

crate::op_params! {
    struct BatchNormParams {
        eps: Float = "0.001", "Added to the variance to avoid dividing by zero.";
        momentum: Float = "0.9", "Momentum of the moving average of the statistics.";
        fix_gamma: Bool = "True", "Treat gamma as ones (its gradient is zero).";
        use_global_stats: Bool = "False",
            "Use the moving statistics in training too (as constants; nothing is updated).";
        output_mean_var: Bool = "False", "Also output the mean and the variance used.";
        axis: Int = "1", "The channel axis; statistics are taken over all other axes.";
        cudnn_off: Bool = "False", "Do not use cuDNN (no effect on the CPU).";
        min_calib_range: OptFloat = "None",
            "Quantisation calibration minimum (accepted and ignored).";
        max_calib_range: OptFloat = "None",
            "Quantisation calibration maximum (accepted and ignored).";
    }
}

crate::op_params! {
    struct LayerNormParams {
        axis: Int = "-1", "The axis to normalise over.";
        eps: Float = "1e-05", "Added to the variance to avoid dividing by zero.";
        output_mean_var: Bool = "False", "Also output the mean and the standard deviation.";
    }
}

crate::op_params! {
    struct DropoutParams {
        p: Float = "0.5", "Fraction of the input that gets dropped out.";
        mode: Enum(&["training", "always"]) = "training",
            "Apply dropout only in training, or also in inference.";
        axes: Shape = "()", "Axes along which the dropout mask is shared.";
        cudnn_off: Bool = "False", "Do not use cuDNN (no effect on the CPU).";
    }
}

/// Checks that a per-channel input holds `c` values (shape inference guarantees it for bound
/// graphs; direct calls get an error instead of a panic).
fn per_channel<'a>(a: &'a NDArray, c: usize, op: &str, node: &str, arg: &str) -> Result<&'a [f32]> {
    let v = a.f32s(op)?;
    if v.len() != c {
        return Err(Error::shape(
            op,
            format!("node \"{node}\": input \"{arg}\""),
            [c],
            a.shape(),
        ));
    }
    Ok(v)
}

fn f32_vec(v: &[f64]) -> Vec<f32> {
    v.iter().map(|&x| x as f32).collect()
}

#[derive(Debug)]
struct BatchNorm {
    eps: f64,
    momentum: f64,
    fix_gamma: bool,
    use_global_stats: bool,
    output_mean_var: bool,
    axis: i64,
}

impl BatchNorm {
    fn create(p: &Params) -> Result<Arc<dyn Operator>> {
        let q = BatchNormParams::from_params(p)?;
        let eps = q.eps;
        if !(eps >= 0.0 && eps.is_finite()) {
            return Err(p.error("eps", "a finite number >= 0", eps));
        }
        Ok(Arc::new(BatchNorm {
            eps,
            momentum: q.momentum,
            fix_gamma: q.fix_gamma,
            use_global_stats: q.use_global_stats,
            output_mean_var: q.output_mean_var,
            axis: q.axis,
        }))
    }

    fn dims(&self, node: &str, shape: &[usize]) -> Result<(usize, usize, usize)> {
        let axis = norm_axis(
            &format!("BatchNorm node \"{node}\": parameter \"axis\""),
            self.axis as isize,
            shape.len(),
        )?;
        Ok(axis_dims(shape, axis))
    }

    /// Batch statistics are used in a training pass unless use_global_stats.
    fn batch_stats(&self, ctx: &OpCtx) -> bool {
        ctx.is_train && !self.use_global_stats
    }

    /// Forward, with `epilogue` over the output's channel planes (see `forward_then`).
    fn forward_with(
        &self,
        ctx: &OpCtx,
        inputs: &[NDArray],
        aux: &mut [NDArray],
        epilogue: Option<&Epilogue>,
    ) -> Result<Vec<NDArray>> {
        let (op, node) = ("BatchNorm", ctx.node);
        let shape = inputs[0].shape();
        let x = inputs[0].f32s(op)?;
        let dims @ (outer, c, inner) = self.dims(node, shape)?;
        let gamma = per_channel(&inputs[1], c, op, node, "gamma")?;
        let beta = per_channel(&inputs[2], c, op, node, "beta")?;
        let m = (outer * inner).max(1) as f64;
        let (mean, var): (Vec<f64>, Vec<f64>) = if self.batch_stats(ctx) {
            let mean: Vec<f64> = channel_sums2(dims, |i, _, _| (x[i] as f64, 0.0))
                .0
                .iter()
                .map(|s| s / m)
                .collect();
            let var = channel_sums2(dims, |i, ch, _| {
                let d = x[i] as f64 - mean[ch];
                (d * d, 0.0)
            })
            .0
            .iter()
            .map(|s| s / m)
            .collect();
            (mean, var)
        } else {
            let mm = per_channel(&aux[0], c, op, node, "moving_mean")?;
            let mv = per_channel(&aux[1], c, op, node, "moving_var")?;
            (
                mm.iter().map(|&v| v as f64).collect(),
                mv.iter().map(|&v| v as f64).collect(),
            )
        };
        // Per channel: y = (x − mean)·scale + beta, scale = gamma / sqrt(var + eps).
        let scale: Vec<f32> = (0..c)
            .map(|ch| {
                let w = if self.fix_gamma {
                    1.0
                } else {
                    gamma[ch] as f64
                };
                (w * inv_std(var[ch], self.eps)) as f32
            })
            .collect();
        let mean32 = f32_vec(&mean);
        let out = norm::per_channel_affine(x, dims, &mean32, &scale, beta, epilogue);
        Ok(vec![
            NDArray::from_f32(shape, out)?,
            NDArray::from_f32(&[c], mean32)?,
            NDArray::from_f32(&[c], f32_vec(&var))?,
        ])
    }
}

impl Operator for BatchNorm {
    fn arguments(&self) -> Vec<String> {
        vec!["data".into(), "gamma".into(), "beta".into()]
    }

    fn aux_states(&self) -> Vec<String> {
        vec!["moving_mean".into(), "moving_var".into()]
    }

    fn output_names(&self) -> Vec<String> {
        if self.output_mean_var {
            vec!["output".into(), "mean".into(), "var".into()]
        } else {
            vec!["output".into()]
        }
    }

    fn num_outputs(&self) -> usize {
        3
    }

    fn infer_shape(
        &self,
        node: &str,
        inputs: &mut [MaybeShape],
        aux: &mut [MaybeShape],
    ) -> Result<Vec<Vec<usize>>> {
        let d = known("BatchNorm", node, &["data"], inputs, 0)?.to_vec();
        let (_, c, _) = self.dims(node, &d)?;
        for (i, name) in [(1, "gamma"), (2, "beta")] {
            check_or_fill("BatchNorm", node, name, &mut inputs[i], &[c])?;
        }
        for (i, name) in [(0, "moving_mean"), (1, "moving_var")] {
            check_or_fill("BatchNorm", node, name, &mut aux[i], &[c])?;
        }
        Ok(vec![d, vec![c], vec![c]])
    }

    fn forward(
        &self,
        ctx: &OpCtx,
        inputs: &[NDArray],
        aux: &mut [NDArray],
    ) -> Result<Vec<NDArray>> {
        self.forward_with(ctx, inputs, aux, None)
    }

    fn forward_then(
        &self,
        ctx: &OpCtx,
        inputs: &[NDArray],
        aux: &mut [NDArray],
        epilogue: &Epilogue,
    ) -> Option<Result<Vec<NDArray>>> {
        // Backward reads the input and the saved statistics, never the first output, so the
        // activation may overwrite it.
        Some(self.forward_with(ctx, inputs, aux, Some(epilogue)))
    }

    fn inference_affine(
        &self,
        ctx: &OpCtx,
        params: &[NDArray],
        aux: &[NDArray],
    ) -> Option<Result<ChannelAffine>> {
        // Batch statistics depend on the data; an axis other than 1 is not the channel axis
        // of the convolution the map would fold into.
        if self.batch_stats(ctx) || self.axis != 1 {
            return None;
        }
        let (op, node) = ("BatchNorm", ctx.node);
        let affine = || -> Result<ChannelAffine> {
            let (gamma, beta) = match params {
                [g, b] => (g, b),
                _ => return Err(Error::Msg(format!("internal: {op} params of {node}"))),
            };
            let c = gamma.size();
            let gamma = per_channel(gamma, c, op, node, "gamma")?;
            let beta = per_channel(beta, c, op, node, "beta")?;
            let mean = per_channel(&aux[0], c, op, node, "moving_mean")?;
            let var = per_channel(&aux[1], c, op, node, "moving_var")?;
            // The factor as forward computes it; the offset folds the mean in:
            // (x − mean)·s + beta = x·s + (beta − mean·s).
            let scale: Vec<f32> = (0..c)
                .map(|ch| {
                    let w = if self.fix_gamma {
                        1.0
                    } else {
                        gamma[ch] as f64
                    };
                    (w * inv_std(var[ch] as f64, self.eps)) as f32
                })
                .collect();
            let shift = (0..c)
                .map(|ch| (beta[ch] as f64 - mean[ch] as f64 * scale[ch] as f64) as f32)
                .collect();
            Ok(ChannelAffine {
                scale,
                shift,
                other_outputs: vec![
                    NDArray::from_f32(&[c], mean.to_vec())?,
                    NDArray::from_f32(&[c], var.to_vec())?,
                ],
            })
        };
        Some(affine())
    }

    fn backward(
        &self,
        ctx: &OpCtx,
        out_grads: &[NDArray],
        inputs: &[NDArray],
        outputs: &[NDArray],
        aux: &mut [NDArray],
    ) -> Result<Vec<Option<NDArray>>> {
        let (op, node) = ("BatchNorm", ctx.node);
        let shape = inputs[0].shape();
        let x = inputs[0].f32s(op)?;
        let g = out_grads[0].f32s(op)?;
        let dims @ (outer, c, inner) = self.dims(node, shape)?;
        let gamma = per_channel(&inputs[1], c, op, node, "gamma")?;
        let mm = per_channel(&aux[0], c, op, node, "moving_mean")?.to_vec();
        let mv = per_channel(&aux[1], c, op, node, "moving_var")?.to_vec();
        let train = self.batch_stats(ctx);
        // The statistics the forward pass used: the batch's (hidden outputs) or the moving ones.
        let (mean, var) = if train {
            (
                per_channel(&outputs[1], c, op, node, "mean")?.to_vec(),
                per_channel(&outputs[2], c, op, node, "var")?.to_vec(),
            )
        } else {
            (mm.clone(), mv.clone())
        };
        let (sum_g, dotp) = channel_sums2(dims, |i, ch, _| {
            let gi = g[i] as f64;
            (gi, (x[i] - mean[ch]) as f64 * gi)
        });
        let m = (outer * inner).max(1) as f64;
        let istd: Vec<f64> = var.iter().map(|&v| inv_std(v as f64, self.eps)).collect();
        let w = |ch: usize| {
            if self.fix_gamma {
                1.0
            } else {
                gamma[ch] as f64
            }
        };
        // dx = (g − mean(g) − x̂·mean(g·x̂))·w/σ in training; g·w/σ with constant statistics.
        let coef: Vec<(f32, f32, f32)> = (0..c)
            .map(|ch| {
                let iw = istd[ch] * w(ch);
                if train {
                    let k = dotp[ch] * istd[ch] * istd[ch] / m;
                    ((sum_g[ch] / m) as f32, k as f32, iw as f32)
                } else {
                    (0.0, 0.0, iw as f32)
                }
            })
            .collect();
        let dx = norm::batch_norm_dx(g, x, dims, &mean, &coef);
        let dgamma: Vec<f32> = (0..c)
            .map(|ch| {
                if self.fix_gamma {
                    0.0
                } else {
                    (dotp[ch] * istd[ch]) as f32
                }
            })
            .collect();
        if train {
            // MXNet 1.9.1 folds the batch statistics in here, during backward.
            let mo = self.momentum as f32;
            let fold = |old: &[f32], new: &[f32]| -> Vec<f32> {
                old.iter()
                    .zip(new)
                    .map(|(&a, &b)| a * mo + b * (1.0 - mo))
                    .collect()
            };
            aux[0] = NDArray::from_f32(&[c], fold(&mm, &mean))?;
            aux[1] = NDArray::from_f32(&[c], fold(&mv, &var))?;
        }
        Ok(vec![
            Some(NDArray::from_f32(shape, dx)?),
            Some(NDArray::from_f32(&[c], dgamma)?),
            Some(NDArray::from_f32(&[c], f32_vec(&sum_g))?),
        ])
    }
}

#[derive(Debug)]
struct LayerNorm {
    axis: i64,
    eps: f64,
    output_mean_var: bool,
}

impl LayerNorm {
    fn create(p: &Params) -> Result<Arc<dyn Operator>> {
        let q = LayerNormParams::from_params(p)?;
        let eps = q.eps;
        if !(eps >= 0.0 && eps.is_finite()) {
            return Err(p.error("eps", "a finite number >= 0", eps));
        }
        Ok(Arc::new(LayerNorm {
            axis: q.axis,
            eps,
            output_mean_var: q.output_mean_var,
        }))
    }

    fn axis(&self, node: &str, ndim: usize) -> Result<usize> {
        norm_axis(
            &format!("LayerNorm node \"{node}\": parameter \"axis\""),
            self.axis as isize,
            ndim,
        )
    }
}

impl Operator for LayerNorm {
    fn arguments(&self) -> Vec<String> {
        vec!["data".into(), "gamma".into(), "beta".into()]
    }

    fn output_names(&self) -> Vec<String> {
        if self.output_mean_var {
            vec!["output".into(), "mean".into(), "std".into()]
        } else {
            vec!["output".into()]
        }
    }

    fn num_outputs(&self) -> usize {
        3
    }

    fn infer_shape(
        &self,
        node: &str,
        inputs: &mut [MaybeShape],
        _aux: &mut [MaybeShape],
    ) -> Result<Vec<Vec<usize>>> {
        let d = known("LayerNorm", node, &["data"], inputs, 0)?.to_vec();
        let axis = self.axis(node, d.len())?;
        for (i, name) in [(1, "gamma"), (2, "beta")] {
            check_or_fill("LayerNorm", node, name, &mut inputs[i], &[d[axis]])?;
        }
        let mut stat = d.clone();
        stat[axis] = 1;
        Ok(vec![d, stat.clone(), stat])
    }

    fn forward(
        &self,
        ctx: &OpCtx,
        inputs: &[NDArray],
        _aux: &mut [NDArray],
    ) -> Result<Vec<NDArray>> {
        let (op, node) = ("LayerNorm", ctx.node);
        let shape = inputs[0].shape();
        let axis = self.axis(node, shape.len())?;
        let (outer, n, inner) = axis_dims(shape, axis);
        let x = inputs[0].f32s(op)?;
        let gamma = per_channel(&inputs[1], n, op, node, "gamma")?;
        let beta = per_channel(&inputs[2], n, op, node, "beta")?;
        let dims = (outer, n, inner);
        let stats = norm::slice_mean_std(x, dims, self.eps);
        let out = norm::layer_norm_apply(x, dims, &stats, gamma, beta);
        let mut stat_shape = shape.to_vec();
        stat_shape[axis] = 1;
        let (mean, std): (Vec<f32>, Vec<f32>) = stats.into_iter().unzip();
        Ok(vec![
            NDArray::from_f32(shape, out)?,
            NDArray::from_f32(&stat_shape, mean)?,
            NDArray::from_f32(&stat_shape, std)?,
        ])
    }

    fn backward(
        &self,
        ctx: &OpCtx,
        out_grads: &[NDArray],
        inputs: &[NDArray],
        outputs: &[NDArray],
        _aux: &mut [NDArray],
    ) -> Result<Vec<Option<NDArray>>> {
        // Like MXNet, only the gradient of the normalised output is propagated (not those of
        // the mean and std outputs).
        let (op, node) = ("LayerNorm", ctx.node);
        let shape = inputs[0].shape();
        let axis = self.axis(node, shape.len())?;
        let dims @ (_, n, _) = axis_dims(shape, axis);
        let x = inputs[0].f32s(op)?;
        let g = out_grads[0].f32s(op)?;
        let gamma = per_channel(&inputs[1], n, op, node, "gamma")?;
        let mean = outputs[1].f32s(op)?;
        let std = outputs[2].f32s(op)?;
        if mean.len() * n != x.len() || std.len() != mean.len() {
            return Err(Error::shape(
                op,
                format!("node \"{node}\": output \"mean\""),
                x.len() / n.max(1),
                mean.len(),
            ));
        }
        let dx = norm::layer_norm_dx(g, x, dims, mean, std, gamma);
        let (dgamma, dbeta) = channel_sums2(dims, |i, _, p| {
            ((g[i] * (x[i] - mean[p]) / std[p]) as f64, g[i] as f64)
        });
        Ok(vec![
            Some(NDArray::from_f32(shape, dx)?),
            Some(NDArray::from_f32(&[n], f32_vec(&dgamma))?),
            Some(NDArray::from_f32(&[n], f32_vec(&dbeta))?),
        ])
    }
}

#[derive(Debug)]
struct Dropout {
    p: f32,
    always: bool,
    axes: Vec<i64>,
    /// The mask an inactive pass returns (ones), kept from the last such pass: nothing reads
    /// it but a user asking for the output, and filling it anew cost SqueezeNet 1.1 about 1%
    /// of an inference pass. Shared storage, so a consumer that writes to it copies first.
    ones: std::sync::Mutex<Option<NDArray>>,
}

impl Dropout {
    fn create(p: &Params) -> Result<Arc<dyn Operator>> {
        let q = DropoutParams::from_params(p)?;
        let prob = q.p;
        if !(0.0..=1.0).contains(&prob) {
            return Err(p.error("p", "a probability in [0, 1]", prob));
        }
        Ok(Arc::new(Dropout {
            p: prob as f32,
            always: q.mode == "always",
            axes: q.axes,
            ones: std::sync::Mutex::new(None),
        }))
    }

    fn active(&self, ctx: &OpCtx) -> bool {
        self.p > 0.0 && (ctx.is_train || self.always)
    }

    /// Ones of `shape`: the kept mask when it has that shape, else a new one (kept).
    fn inactive_mask(&self, shape: &[usize]) -> NDArray {
        // A poisoned lock only means another pass panicked while it held it; the value is
        // either a complete array or none.
        let mut kept = self.ones.lock().unwrap_or_else(|e| e.into_inner());
        match &*kept {
            Some(m) if m.shape() == shape => m.clone(),
            _ => {
                let m = NDArray::ones(shape, DType::Float32);
                *kept = Some(m.clone());
                m
            }
        }
    }

    /// The mask's shape: the data's, with the shared axes set to 1.
    fn mask_shape(&self, node: &str, d: &[usize]) -> Result<Vec<usize>> {
        let mut s = d.to_vec();
        for &a in &self.axes {
            let a = norm_axis(
                &format!("Dropout node \"{node}\": parameter \"axes\""),
                a as isize,
                d.len(),
            )?;
            s[a] = 1;
        }
        Ok(s)
    }
}

impl Operator for Dropout {
    fn arguments(&self) -> Vec<String> {
        vec!["data".into()]
    }

    fn num_outputs(&self) -> usize {
        2
    }

    fn infer_shape(
        &self,
        node: &str,
        inputs: &mut [MaybeShape],
        _aux: &mut [MaybeShape],
    ) -> Result<Vec<Vec<usize>>> {
        let d = known("Dropout", node, &["data"], inputs, 0)?.to_vec();
        self.mask_shape(node, &d)?;
        Ok(vec![d.clone(), d])
    }

    fn forward(
        &self,
        ctx: &OpCtx,
        inputs: &[NDArray],
        _aux: &mut [NDArray],
    ) -> Result<Vec<NDArray>> {
        let shape = inputs[0].shape();
        if !self.active(ctx) {
            return Ok(vec![inputs[0].clone(), self.inactive_mask(shape)]);
        }
        let x = inputs[0].f32s("Dropout: data")?;
        let keep = 1.0 - self.p;
        let scale = if keep > 0.0 { 1.0 / keep } else { 0.0 };
        let ms = self.mask_shape(ctx.node, shape)?;
        let draw = seeded_uniform(ms.iter().product(), |u| if u < keep { scale } else { 0.0 });
        let mask = if ms.as_slice() == shape {
            NDArray::from_f32(shape, draw)?
        } else {
            broadcast_to(&NDArray::from_f32(&ms, draw)?, shape)?
        };
        let m = mask.f32s("Dropout: mask")?;
        let out = binary::binary(BinaryOp::Mul, x, &[x.len()], m, &[m.len()])?.1;
        Ok(vec![NDArray::from_f32(shape, out)?, mask])
    }

    fn backward(
        &self,
        ctx: &OpCtx,
        out_grads: &[NDArray],
        _inputs: &[NDArray],
        outputs: &[NDArray],
        _aux: &mut [NDArray],
    ) -> Result<Vec<Option<NDArray>>> {
        if !self.active(ctx) {
            return Ok(vec![Some(out_grads[0].clone())]);
        }
        let g = out_grads[0].f32s("Dropout: output gradient")?;
        let m = outputs[1].f32s("Dropout: mask")?;
        let dx = binary::binary(BinaryOp::Mul, g, &[g.len()], m, &[m.len()])?.1;
        Ok(vec![Some(NDArray::from_f32(out_grads[0].shape(), dx)?)])
    }
}
