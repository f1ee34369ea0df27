//! Normalisation and regularisation: MXNet `BatchNorm`, `LayerNorm`, `Dropout`; also the
//! per-channel reduction and the seeded uniform draw that PReLU and RReLU (ops/activation.rs)
//! share.

use super::params::{param, ParamKind::*};
use super::{check_or_fill, known, MaybeShape, OpCtx, OpDef, Operator, Params};
use crate::error::{Error, Result};
use crate::kernels::map::axis_dims;
use crate::kernels::par;
use crate::tensor::{arith::broadcast_to, norm_axis, random, DType, NDArray};
use rand::Rng;
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
        params: &[
            param(
                "eps",
                Float,
                Some("0.001"),
                "Added to the variance to avoid dividing by zero.",
            ),
            param(
                "momentum",
                Float,
                Some("0.9"),
                "Momentum of the moving average of the statistics.",
            ),
            param(
                "fix_gamma",
                Bool,
                Some("True"),
                "Treat gamma as ones (its gradient is zero).",
            ),
            param(
                "use_global_stats",
                Bool,
                Some("False"),
                "Use the moving statistics in training too (as constants; nothing is updated).",
            ),
            param(
                "output_mean_var",
                Bool,
                Some("False"),
                "Also output the mean and the variance used.",
            ),
            param(
                "axis",
                Int,
                Some("1"),
                "The channel axis; statistics are taken over all other axes.",
            ),
            param(
                "cudnn_off",
                Bool,
                Some("False"),
                "Do not use cuDNN (no effect on the CPU).",
            ),
            param(
                "min_calib_range",
                OptFloat,
                Some("None"),
                "Quantisation calibration minimum (accepted and ignored).",
            ),
            param(
                "max_calib_range",
                OptFloat,
                Some("None"),
                "Quantisation calibration maximum (accepted and ignored).",
            ),
        ],
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
        params: &[
            param("axis", Int, Some("-1"), "The axis to normalise over."),
            param(
                "eps",
                Float,
                Some("1e-05"),
                "Added to the variance to avoid dividing by zero.",
            ),
            param(
                "output_mean_var",
                Bool,
                Some("False"),
                "Also output the mean and the standard deviation.",
            ),
        ],
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
        params: &[
            param(
                "p",
                Float,
                Some("0.5"),
                "Fraction of the input that gets dropped out.",
            ),
            param(
                "mode",
                Enum(&["training", "always"]),
                Some("training"),
                "Apply dropout only in training, or also in inference.",
            ),
            param(
                "axes",
                Shape,
                Some("()"),
                "Axes along which the dropout mask is shared.",
            ),
            param(
                "cudnn_off",
                Bool,
                Some("False"),
                "Do not use cuDNN (no effect on the CPU).",
            ),
        ],
        create: Dropout::create,
        variadic: None,
    },
];

/// Per-channel sums of the pair `f(i, ch, pos)` over an (outer, c, inner) layout, in f64: `i`
/// the flat index, `ch` its channel, `pos` = o·inner + j its position among the others.
/// The work is cut in a fixed partition (whole channels, or groups of rows when `inner` is 1
/// so that reads stay contiguous) combined in a fixed order: the same bits at any thread count.
pub(crate) fn channel_sums2(
    (outer, c, inner): (usize, usize, usize),
    f: impl Fn(usize, usize, usize) -> (f64, f64) + Sync + Send,
) -> (Vec<f64>, Vec<f64>) {
    let total = outer * c * inner;
    if inner == 1 {
        let group = (par::CHUNK / c.max(1)).max(1);
        let parts = par::map_indices(outer.div_ceil(group), total, |gi| {
            let (mut a, mut b) = (vec![0.0f64; c], vec![0.0f64; c]);
            for r in gi * group..((gi + 1) * group).min(outer) {
                for ch in 0..c {
                    let (x, y) = f(r * c + ch, ch, r);
                    a[ch] += x;
                    b[ch] += y;
                }
            }
            (a, b)
        });
        let (mut a, mut b) = (vec![0.0f64; c], vec![0.0f64; c]);
        for (pa, pb) in parts {
            a.iter_mut().zip(pa).for_each(|(s, v)| *s += v);
            b.iter_mut().zip(pb).for_each(|(s, v)| *s += v);
        }
        (a, b)
    } else {
        par::map_indices(c, total, |ch| {
            let (mut a, mut b) = (0.0f64, 0.0f64);
            for o in 0..outer {
                let base = (o * c + ch) * inner;
                for j in 0..inner {
                    let (x, y) = f(base + j, ch, o * inner + j);
                    a += x;
                    b += y;
                }
            }
            (a, b)
        })
        .into_iter()
        .unzip()
    }
}

/// `n` values `f(u)`, u uniform in [0, 1), from the global seeded stream (mx.random.seed):
/// chunk k of `par::CHUNK` values comes from its own position of the draw, as in
/// `tensor::random`, so the result does not depend on the thread count.
pub(crate) fn seeded_uniform(n: usize, f: impl Fn(f32) -> f32 + Sync + Send) -> Vec<f32> {
    let key = random::next_key();
    let mut out = vec![0.0f32; n];
    par::for_each_chunk_mut(&mut out, |start, chunk| {
        for (k, sub) in chunk.chunks_mut(par::CHUNK).enumerate() {
            let mut rng = random::chunk_rng(key, start / par::CHUNK + k);
            sub.iter_mut().for_each(|v| *v = f(rng.gen::<f32>()));
        }
    });
    out
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

/// 1/sqrt(var + eps); MXNet's guard gives 0 for a zero variance with eps = 0.
fn inv_std(var: f64, eps: f64) -> f64 {
    if var == 0.0 && eps == 0.0 {
        0.0
    } else {
        1.0 / (var + eps).sqrt()
    }
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
        let eps = p.float("eps")?;
        if !(eps >= 0.0 && eps.is_finite()) {
            return Err(p.error("eps", "a finite number >= 0", eps));
        }
        Ok(Arc::new(BatchNorm {
            eps,
            momentum: p.float("momentum")?,
            fix_gamma: p.bool("fix_gamma")?,
            use_global_stats: p.bool("use_global_stats")?,
            output_mean_var: p.bool("output_mean_var")?,
            axis: p.int("axis")?,
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
        let mut out = vec![0.0f32; x.len()];
        par::for_each_row_mut(&mut out, c * inner, |o, row| {
            let xr = &x[o * c * inner..(o + 1) * c * inner];
            for ch in 0..c {
                let (mu, s, b) = (mean32[ch], scale[ch], beta[ch]);
                let r = ch * inner..(ch + 1) * inner;
                for (y, &v) in row[r.clone()].iter_mut().zip(&xr[r]) {
                    *y = (v - mu) * s + b;
                }
            }
        });
        Ok(vec![
            NDArray::from_f32(shape, out)?,
            NDArray::from_f32(&[c], mean32)?,
            NDArray::from_f32(&[c], f32_vec(&var))?,
        ])
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
        let mut dx = vec![0.0f32; x.len()];
        par::for_each_row_mut(&mut dx, c * inner, |o, row| {
            let span = o * c * inner..(o + 1) * c * inner;
            let (gr, xr) = (&g[span.clone()], &x[span]);
            for (ch, &(gm, k, iw)) in coef.iter().enumerate() {
                let (mu, r) = (mean[ch], ch * inner..(ch + 1) * inner);
                for ((d, &gv), &xv) in row[r.clone()].iter_mut().zip(&gr[r.clone()]).zip(&xr[r]) {
                    *d = (gv - gm - (xv - mu) * k) * iw;
                }
            }
        });
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
        let eps = p.float("eps")?;
        if !(eps >= 0.0 && eps.is_finite()) {
            return Err(p.error("eps", "a finite number >= 0", eps));
        }
        Ok(Arc::new(LayerNorm {
            axis: p.int("axis")?,
            eps,
            output_mean_var: p.bool("output_mean_var")?,
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
        // Mean and std = sqrt(var + eps) of every slice along the axis, in f64.
        let stats: Vec<(f32, f32)> = par::map_indices(outer * inner, x.len(), |p| {
            let base = (p / inner) * n * inner + p % inner;
            let at = |k: usize| x[base + k * inner] as f64;
            let mean = (0..n).map(at).sum::<f64>() / n.max(1) as f64;
            let var = (0..n).map(|k| (at(k) - mean).powi(2)).sum::<f64>() / n.max(1) as f64;
            (mean as f32, (var + self.eps).sqrt() as f32)
        });
        let mut out = vec![0.0f32; x.len()];
        par::for_each_row_mut(&mut out, n * inner, |o, block| {
            let xb = &x[o * n * inner..(o + 1) * n * inner];
            for k in 0..n {
                for j in 0..inner {
                    let (mu, sd) = stats[o * inner + j];
                    let i = k * inner + j;
                    block[i] = (xb[i] - mu) / sd * gamma[k] + beta[k];
                }
            }
        });
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
        let dims @ (_, n, inner) = axis_dims(shape, axis);
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
        let mut dx = vec![0.0f32; x.len()];
        par::for_each_row_mut(&mut dx, n * inner, |o, block| {
            let base = o * n * inner;
            for j in 0..inner {
                let (mu, sd) = (mean[o * inner + j], std[o * inner + j]);
                let (mut a, mut b) = (0.0f64, 0.0f64);
                for (k, &w) in gamma.iter().enumerate() {
                    let i = base + k * inner + j;
                    let gg = (g[i] * w) as f64;
                    a += gg;
                    b += gg * ((x[i] - mu) / sd) as f64;
                }
                let (a, b) = ((a / n as f64) as f32, (b / n as f64) as f32);
                for (k, &w) in gamma.iter().enumerate() {
                    let i = base + k * inner + j;
                    block[k * inner + j] = (g[i] * w - a - (x[i] - mu) / sd * b) / sd;
                }
            }
        });
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
}

impl Dropout {
    fn create(p: &Params) -> Result<Arc<dyn Operator>> {
        let prob = p.float("p")?;
        if !(0.0..=1.0).contains(&prob) {
            return Err(p.error("p", "a probability in [0, 1]", prob));
        }
        Ok(Arc::new(Dropout {
            p: prob as f32,
            always: p.str("mode")? == "always",
            axes: p.shape("axes")?,
        }))
    }

    fn active(&self, ctx: &OpCtx) -> bool {
        self.p > 0.0 && (ctx.is_train || self.always)
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
            return Ok(vec![
                inputs[0].clone(),
                NDArray::ones(shape, DType::Float32),
            ]);
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
        let mut out = vec![0.0f32; x.len()];
        par::for_each_chunk_mut(&mut out, |start, chunk| {
            for (i, o) in chunk.iter_mut().enumerate() {
                *o = x[start + i] * m[start + i];
            }
        });
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
        let mut dx = vec![0.0f32; g.len()];
        par::for_each_chunk_mut(&mut dx, |start, chunk| {
            for (i, d) in chunk.iter_mut().enumerate() {
                *d = g[start + i] * m[start + i];
            }
        });
        Ok(vec![Some(NDArray::from_f32(out_grads[0].shape(), dx)?)])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn channel_sums_same_for_both_partitions() {
        // (outer 3, c 2, inner 1) and the same numbers as (1, 2, 3) per channel transposed.
        let x = [1.0f32, 10.0, 2.0, 20.0, 3.0, 30.0];
        let (a, b) = channel_sums2((3, 2, 1), |i, _, _| (x[i] as f64, 1.0));
        assert_eq!(a, vec![6.0, 60.0]);
        assert_eq!(b, vec![3.0, 3.0]);
        let y = [1.0f32, 2.0, 3.0, 10.0, 20.0, 30.0];
        let (a, _) = channel_sums2((1, 2, 3), |i, _, _| (y[i] as f64, 0.0));
        assert_eq!(a, vec![6.0, 60.0]);
        // Many rows (several groups) still sum exactly.
        let n = par::CHUNK * 3 + 5;
        let (a, _) = channel_sums2((n, 2, 1), |_, ch, _| (ch as f64, 0.0));
        assert_eq!(a, vec![0.0, n as f64]);
    }

    #[test]
    fn inv_std_guard() {
        assert_eq!(inv_std(0.0, 0.0), 0.0);
        assert!((inv_std(3.0, 1.0) - 0.5).abs() < 1e-12);
    }
}
