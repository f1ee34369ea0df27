//! Softmax family: MXNet `softmax`, `log_softmax` and `SoftmaxActivation`. The kernels here
//! (softmax over one axis of an (outer, n, inner) layout, and its exact backward) are also what
//! `SoftmaxOutput` (ops/loss.rs) computes, so the math exists once.

use super::params::{param, ParamKind::*};
use super::{check_or_fill, known, MaybeShape, OpCtx, OpDef, Operator, Params};
use crate::error::{Error, Result};
use crate::kernels::par;
use crate::kernels::scratch::Scratch;
use crate::kernels::unary::{fast_exp, EXP};
use crate::tensor::{norm_axis, NDArray};
use std::sync::Arc;

/// The entries of this family.
pub static OPS: &[OpDef] = &[
    OpDef {
        name: "softmax",
        aliases: &[],
        py_name: None,
        doc: "Applies the softmax function along one axis: exp(x/t) / sum(exp(x/t)), with t the \
              temperature. With use_length=True a second input `length` (the data shape without \
              the axis) says how many leading elements of each slice take part; the rest output 0.",
        params: SOFTMAX_PARAMS,
        create: |p| Softmax::create(p, false),
        variadic: None,
    },
    OpDef {
        name: "log_softmax",
        aliases: &[],
        py_name: None,
        doc: "Applies the logarithm of the softmax function along one axis: x/t - \
              log(sum(exp(x/t))), with t the temperature; numerically stable (the maximum is \
              subtracted first).",
        params: SOFTMAX_PARAMS,
        create: |p| Softmax::create(p, true),
        variadic: None,
    },
    OpDef {
        name: "SoftmaxActivation",
        aliases: &[],
        py_name: None,
        doc: "Applies softmax to the input (deprecated in MXNet in favour of softmax). \
              mode=\"instance\" computes it over all but the first axis of each sample; \
              mode=\"channel\" over axis 1 at every spatial position.",
        params: &[param(
            "mode",
            Enum(&["instance", "channel"]),
            Some("instance"),
            "Softmax over each instance (all but axis 0) or over the channel axis (1).",
        )],
        create: SoftmaxActivation::create,
        variadic: None,
    },
];

static SOFTMAX_PARAMS: &[super::ParamDef] = &[
    param(
        "axis",
        Int,
        Some("-1"),
        "The axis along which to compute softmax.",
    ),
    param(
        "temperature",
        OptFloat,
        Some("None"),
        "Temperature t: the input is divided by t (None means 1).",
    ),
    param(
        "dtype",
        Enum(&["None", "float16", "float32", "float64"]),
        Some("None"),
        "Output dtype in MXNet; mxfn computes in float32 and accepts it for compatibility.",
    ),
    param(
        "use_length",
        Bool,
        Some("False"),
        "Whether a second input `length` gives the number of valid elements of each slice.",
    ),
];

/// An (outer, n, inner) view of a shape around `axis`: the reduction runs over `n` elements
/// `inner` apart, for each of `outer * inner` positions.
pub(crate) fn axis_dims(shape: &[usize], axis: usize) -> (usize, usize, usize) {
    let outer = shape[..axis].iter().product();
    let n = shape.get(axis).copied().unwrap_or(1);
    let inner = shape.get(axis + 1..).map_or(1, |s| s.iter().product());
    (outer, n, inner)
}

/// The valid length of slice `pos` (all `n` without lengths; MXNet casts the length to int and
/// clamps it to the axis size).
fn slice_len(lengths: Option<&[f32]>, pos: usize, n: usize) -> usize {
    match lengths.and_then(|l| l.get(pos)) {
        Some(&v) if v > 0.0 => (v as usize).min(n),
        Some(_) => 0,
        None => n,
    }
}

/// Softmax (or log-softmax) of consecutive contiguous rows of length `n` (`xb` → `ob`), the
/// first being row `r0`; each row's first `slice_len` elements are valid, the rest 0. The
/// exponentials of the whole block go through one vectorised pass: row by row, 10-class
/// outputs ran 20x slower. Max, sum (f64, in order) and scaling stay per row.
fn softmax_rows(
    xb: &[f32],
    ob: &mut [f32],
    n: usize,
    r0: usize,
    lengths: Option<&[f32]>,
    inv_t: f32,
    log: bool,
) {
    let rows = xb.len() / n;
    let mut maxes = Vec::with_capacity(rows);
    let mut shifted = Scratch::take(xb.len());
    for (r, (xr, sr)) in xb
        .chunks_exact(n)
        .zip(shifted.chunks_exact_mut(n))
        .enumerate()
    {
        let len = slice_len(lengths, r0 + r, n);
        let m = xr[..len]
            .iter()
            .fold(f32::NEG_INFINITY, |m, &v| m.max(v * inv_t));
        sr.iter_mut().zip(xr).for_each(|(s, &v)| *s = v * inv_t - m);
        maxes.push((m, len));
    }
    EXP.map_into(&shifted, ob);
    for ((xr, or), &(m, len)) in xb.chunks_exact(n).zip(ob.chunks_exact_mut(n)).zip(&maxes) {
        let sum: f64 = or[..len].iter().map(|&e| e as f64).sum();
        if log {
            let lse = m + (sum as f32).ln();
            or.iter_mut()
                .zip(xr)
                .for_each(|(o, &v)| *o = v * inv_t - lse);
        } else {
            let r = (1.0 / sum) as f32;
            or[..len].iter_mut().for_each(|o| *o *= r);
        }
        or[len..].iter_mut().for_each(|o| *o = 0.0);
    }
}

/// Softmax (`log` = log-softmax) of `x` over the middle axis of an (outer, n, inner) layout, the
/// input scaled by `inv_t` (1 / temperature). `lengths` (outer·inner values) limits each slice.
pub(crate) fn softmax_forward(
    x: &[f32],
    (_, n, inner): (usize, usize, usize),
    inv_t: f32,
    log: bool,
    lengths: Option<&[f32]>,
) -> Vec<f32> {
    let mut out = vec![0.0f32; x.len()];
    if inner == 1 {
        let rows_per = (par::CHUNK / n.max(1)).max(1);
        par::for_each_row_mut(&mut out, rows_per * n, |c, ob| {
            let r0 = c * rows_per;
            softmax_rows(
                &x[r0 * n..r0 * n + ob.len()],
                ob,
                n,
                r0,
                lengths,
                inv_t,
                log,
            );
        });
        return out;
    }
    let block = n * inner;
    par::for_each_row_mut(&mut out, block, |o, ob| {
        let xb = &x[o * block..(o + 1) * block];
        let lens: Vec<usize> = (0..inner)
            .map(|j| slice_len(lengths, o * inner + j, n))
            .collect();
        let mut m = vec![f32::NEG_INFINITY; inner];
        for k in 0..n {
            for j in 0..inner {
                if k < lens[j] {
                    m[j] = m[j].max(xb[k * inner + j] * inv_t);
                }
            }
        }
        let mut s = vec![0.0f64; inner];
        for k in 0..n {
            for j in 0..inner {
                if k < lens[j] {
                    let e = fast_exp(xb[k * inner + j] * inv_t - m[j]);
                    s[j] += e as f64;
                    ob[k * inner + j] = e;
                }
            }
        }
        for k in 0..n {
            for j in 0..inner {
                let i = k * inner + j;
                ob[i] = if k >= lens[j] {
                    0.0
                } else if log {
                    xb[i] * inv_t - m[j] - (s[j] as f32).ln()
                } else {
                    ob[i] * (1.0 / s[j]) as f32
                };
            }
        }
    });
    out
}

/// The exact backward of `softmax_forward` from its output `y` and head gradient `g`:
/// softmax: inv_t · y · (g − Σ g·y); log-softmax: inv_t · (g − exp(y) · Σ g). Positions past a
/// slice's length get 0.
pub(crate) fn softmax_backward(
    y: &[f32],
    g: &[f32],
    (_, n, inner): (usize, usize, usize),
    inv_t: f32,
    log: bool,
    lengths: Option<&[f32]>,
) -> Vec<f32> {
    let mut dx = vec![0.0f32; y.len()];
    let block = n * inner;
    par::for_each_row_mut(&mut dx, block, |o, db| {
        let yb = &y[o * block..(o + 1) * block];
        let gb = &g[o * block..(o + 1) * block];
        for j in 0..inner {
            let len = slice_len(lengths, o * inner + j, n);
            let idx = |k: usize| k * inner + j;
            let s: f64 = if log {
                (0..len).map(|k| gb[idx(k)] as f64).sum()
            } else {
                (0..len)
                    .map(|k| gb[idx(k)] as f64 * yb[idx(k)] as f64)
                    .sum()
            };
            let s = s as f32;
            for k in 0..n {
                let i = idx(k);
                db[i] = if k >= len {
                    0.0
                } else if log {
                    inv_t * (gb[i] - yb[i].exp() * s)
                } else {
                    inv_t * yb[i] * (gb[i] - s)
                };
            }
        }
    });
    dx
}

#[derive(Debug)]
struct Softmax {
    op: &'static str,
    axis: i64,
    inv_t: f32,
    log: bool,
    use_length: bool,
}

impl Softmax {
    fn create(p: &Params, log: bool) -> Result<Arc<dyn Operator>> {
        let t = p.opt_float("temperature")?.unwrap_or(1.0);
        if !(t.is_finite() && t > 0.0) {
            return Err(p.error("temperature", "a positive number", t));
        }
        Ok(Arc::new(Softmax {
            op: p.op,
            axis: p.int("axis")?,
            inv_t: (1.0 / t) as f32,
            log,
            use_length: p.bool("use_length")?,
        }))
    }

    fn axis(&self, node: &str, ndim: usize) -> Result<usize> {
        norm_axis(
            &format!("{} node \"{node}\": parameter \"axis\"", self.op),
            self.axis as isize,
            ndim,
        )
    }
}

impl Operator for Softmax {
    fn arguments(&self) -> Vec<String> {
        if self.use_length {
            vec!["data".into(), "length".into()]
        } else {
            vec!["data".into()]
        }
    }

    fn infer_shape(
        &self,
        node: &str,
        inputs: &mut [MaybeShape],
        _aux: &mut [MaybeShape],
    ) -> Result<Vec<Vec<usize>>> {
        let d = known(self.op, node, &["data"], inputs, 0)?.to_vec();
        let axis = self.axis(node, d.len())?;
        if self.use_length {
            let mut l = d.clone();
            l.remove(axis);
            check_or_fill(self.op, node, "length", &mut inputs[1], &l)?;
        }
        Ok(vec![d])
    }

    fn forward(
        &self,
        ctx: &OpCtx,
        inputs: &[NDArray],
        _aux: &mut [NDArray],
    ) -> Result<Vec<NDArray>> {
        let x = inputs[0].f32s(self.op)?;
        let dims = axis_dims(inputs[0].shape(), self.axis(ctx.node, inputs[0].ndim())?);
        let lengths = match (self.use_length, inputs.get(1)) {
            (true, Some(l)) => Some(l.f32s(self.op)?),
            _ => None,
        };
        let y = softmax_forward(x, dims, self.inv_t, self.log, lengths);
        Ok(vec![NDArray::from_f32(inputs[0].shape(), y)?])
    }

    fn backward(
        &self,
        ctx: &OpCtx,
        out_grads: &[NDArray],
        inputs: &[NDArray],
        outputs: &[NDArray],
        _aux: &mut [NDArray],
    ) -> Result<Vec<Option<NDArray>>> {
        let dims = axis_dims(inputs[0].shape(), self.axis(ctx.node, inputs[0].ndim())?);
        let lengths = match (self.use_length, inputs.get(1)) {
            (true, Some(l)) => Some(l.f32s(self.op)?),
            _ => None,
        };
        let dx = softmax_backward(
            outputs[0].f32s(self.op)?,
            out_grads[0].f32s(self.op)?,
            dims,
            self.inv_t,
            self.log,
            lengths,
        );
        let mut grads = vec![Some(NDArray::from_f32(inputs[0].shape(), dx)?)];
        if self.use_length {
            // The length is an index-like input: no gradient.
            grads.push(None);
        }
        Ok(grads)
    }
}

#[derive(Debug)]
struct SoftmaxActivation {
    channel: bool,
}

impl SoftmaxActivation {
    fn create(p: &Params) -> Result<Arc<dyn Operator>> {
        Ok(Arc::new(SoftmaxActivation {
            channel: p.str("mode")? == "channel",
        }))
    }

    fn dims(&self, shape: &[usize]) -> (usize, usize, usize) {
        let n0 = shape.first().copied().unwrap_or(1);
        if self.channel {
            axis_dims(shape, 1)
        } else {
            (n0, shape.iter().skip(1).product(), 1)
        }
    }
}

impl Operator for SoftmaxActivation {
    fn arguments(&self) -> Vec<String> {
        vec!["data".into()]
    }

    fn infer_shape(
        &self,
        node: &str,
        inputs: &mut [MaybeShape],
        _aux: &mut [MaybeShape],
    ) -> Result<Vec<Vec<usize>>> {
        let d = known("SoftmaxActivation", node, &["data"], inputs, 0)?.to_vec();
        let need = if self.channel { 2 } else { 1 };
        if d.len() < need {
            return Err(Error::shape(
                "SoftmaxActivation",
                format!("node \"{node}\": input \"data\" (rank)"),
                format!(">= {need}"),
                d.len(),
            ));
        }
        Ok(vec![d])
    }

    fn forward(
        &self,
        _ctx: &OpCtx,
        inputs: &[NDArray],
        _aux: &mut [NDArray],
    ) -> Result<Vec<NDArray>> {
        let x = inputs[0].f32s("SoftmaxActivation: data")?;
        let y = softmax_forward(x, self.dims(inputs[0].shape()), 1.0, false, None);
        Ok(vec![NDArray::from_f32(inputs[0].shape(), y)?])
    }

    fn backward(
        &self,
        _ctx: &OpCtx,
        out_grads: &[NDArray],
        inputs: &[NDArray],
        outputs: &[NDArray],
        _aux: &mut [NDArray],
    ) -> Result<Vec<Option<NDArray>>> {
        let dx = softmax_backward(
            outputs[0].f32s("SoftmaxActivation: output")?,
            out_grads[0].f32s("SoftmaxActivation: output gradient")?,
            self.dims(inputs[0].shape()),
            1.0,
            false,
            None,
        );
        Ok(vec![Some(NDArray::from_f32(inputs[0].shape(), dx)?)])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reference(x: &[f64], t: f64) -> Vec<f64> {
        let m = x.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let e: Vec<f64> = x.iter().map(|v| ((v - m) / t).exp()).collect();
        let s: f64 = e.iter().sum();
        e.iter().map(|v| v / s).collect()
    }

    #[test]
    fn rows_and_strided_axes_agree_with_reference() {
        let x: Vec<f32> = (0..24).map(|i| ((i * 7 % 11) as f32 - 5.0) * 0.3).collect();
        // (2, 3, 4) over axis 1: outer 2, n 3, inner 4.
        let y = softmax_forward(&x, (2, 3, 4), 0.5, false, None);
        let ly = softmax_forward(&x, (2, 3, 4), 0.5, true, None);
        for o in 0..2 {
            for j in 0..4 {
                let col: Vec<f64> = (0..3).map(|k| x[o * 12 + k * 4 + j] as f64).collect();
                let r = reference(&col, 2.0);
                for (k, &rk) in r.iter().enumerate() {
                    let i = o * 12 + k * 4 + j;
                    assert!((y[i] as f64 - rk).abs() < 1e-6);
                    assert!((ly[i] as f64 - rk.ln()).abs() < 1e-5);
                }
            }
        }
        // Last axis, with lengths 2 and 0 (the masked tail is 0).
        let y = softmax_forward(&x[..8], (2, 4, 1), 1.0, false, Some(&[2.0, 0.0]));
        let r = reference(&[x[0] as f64, x[1] as f64], 1.0);
        assert!((y[0] as f64 - r[0]).abs() < 1e-6 && (y[1] as f64 - r[1]).abs() < 1e-6);
        assert!(y[2..].iter().all(|&v| v == 0.0));
    }

    #[test]
    fn backward_of_uniform_head_is_zero() {
        // Σ_k y_k = 1, so a constant head gradient has zero softmax gradient.
        let x = [0.3f32, -1.0, 2.0, 0.5, 0.1, -0.4];
        let y = softmax_forward(&x, (2, 3, 1), 1.0, false, None);
        let dx = softmax_backward(&y, &[1.0; 6], (2, 3, 1), 1.0, false, None);
        assert!(dx.iter().all(|v| v.abs() < 1e-6));
    }
}
