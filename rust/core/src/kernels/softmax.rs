//! Softmax over one axis of an (outer, n, inner) layout (optionally log, with a temperature and
//! per-position valid lengths) and its exact backward: what `softmax`, `log_softmax`,
//! `SoftmaxActivation` and `SoftmaxOutput` compute.

use crate::kernels::par;
use crate::kernels::unary::fast_exp;
use std::mem::MaybeUninit;

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
/// whole block runs in one AVX-512 build of the loops when the CPU has it, else in one AVX2
/// build when it has that: dispatching row by row made 10-class outputs 20x slower. Every
/// build gives the same bits: the reductions' order is fixed by [`LANES`], not by the vector
/// width, and Rust never contracts `fast_exp`'s multiplies and adds into FMAs.
fn softmax_rows(
    xb: &[f32],
    ob: &mut [MaybeUninit<f32>],
    n: usize,
    r0: usize,
    lengths: Option<&[f32]>,
    inv_t: f32,
    log: bool,
) {
    super::unary::wide_dispatch!(
        rows_body,
        (
            xb: &[f32],
            ob: &mut [MaybeUninit<f32>],
            n: usize,
            r0: usize,
            lengths: Option<&[f32]>,
            inv_t: f32,
            log: bool
        )
    )(xb, ob, n, r0, lengths, inv_t, log)
}

/// Lanes of the row reductions: one AVX-512 vector of float32, two of float64 (two and four
/// AVX2 ones). It fixes the order of the sums, so it stays 16 on every build.
const LANES: usize = 16;

#[inline(always)]
fn rows_body(
    xb: &[f32],
    ob: &mut [MaybeUninit<f32>],
    n: usize,
    r0: usize,
    lengths: Option<&[f32]>,
    inv_t: f32,
    log: bool,
) {
    for (r, (xr, or)) in xb.chunks_exact(n).zip(ob.chunks_exact_mut(n)).enumerate() {
        let len = slice_len(lengths, r0 + r, n);
        let (ov, rest) = or.split_at_mut(len);
        rest.iter_mut().for_each(|o| {
            o.write(0.0);
        });
        let xv = &xr[..len];
        let m = scaled_max(xv, inv_t);
        let sum = exp_sum(xv, ov, inv_t, m);
        // SAFETY: exp_sum wrote every element of ov.
        let ov = unsafe { par::assume_written(ov) };
        if log {
            let lse = m + (sum as f32).ln();
            ov.iter_mut()
                .zip(xv)
                .for_each(|(o, &v)| *o = v * inv_t - lse);
        } else {
            let r = (1.0 / sum) as f32;
            ov.iter_mut().for_each(|o| *o *= r);
        }
    }
}

/// max(v · inv_t) over `xv` (NaNs skipped, as `f32::max` does), in [`LANES`] running maxima
/// so the loop vectorises; the maximum does not depend on the order.
#[inline(always)]
fn scaled_max(xv: &[f32], inv_t: f32) -> f32 {
    let mut acc = [f32::NEG_INFINITY; LANES];
    let chunks = xv.chunks_exact(LANES);
    let tail = chunks.remainder();
    for c in chunks {
        acc.iter_mut()
            .zip(c)
            .for_each(|(a, &v)| *a = a.max(v * inv_t));
    }
    let m = acc.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b));
    tail.iter().fold(m, |a, &v| a.max(v * inv_t))
}

/// Writes e^(v · inv_t − m) to every element of `ov` and returns their sum, accumulated in float64 in
/// [`LANES`] partial sums (a vectorised loop; the in-order sum, one dependent add per
/// element, took longer than the exponentials). float64 keeps the sum exact to far below a
/// float32 ulp either way, and each row is summed in a fixed order whatever the threads.
#[inline(always)]
fn exp_sum(xv: &[f32], ov: &mut [MaybeUninit<f32>], inv_t: f32, m: f32) -> f64 {
    let mut acc = [0.0f64; LANES];
    let mut xs = xv.chunks_exact(LANES);
    let mut os = ov.chunks_exact_mut(LANES);
    for (xc, oc) in (&mut xs).zip(&mut os) {
        for ((o, &v), a) in oc.iter_mut().zip(xc).zip(acc.iter_mut()) {
            let e = fast_exp(v * inv_t - m);
            o.write(e);
            *a += f64::from(e);
        }
    }
    let mut tail = 0.0f64;
    for (o, &v) in os.into_remainder().iter_mut().zip(xs.remainder()) {
        let e = fast_exp(v * inv_t - m);
        o.write(e);
        tail += f64::from(e);
    }
    // Halving sums of the partial sums: a fixed order.
    let mut w = LANES;
    while w > 1 {
        w /= 2;
        for i in 0..w {
            acc[i] += acc[i + w];
        }
    }
    acc[0] + tail
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
    if inner == 1 {
        let rows_per = (par::CHUNK / n.max(1)).max(1);
        let fill = |out: &mut [MaybeUninit<f32>]| {
            par::for_each_row_mut(out, rows_per * n, |c, ob| {
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
        };
        // SAFETY: softmax_rows writes every element of each row (zeros past its length).
        return unsafe { par::written(x.len(), fill) };
    }
    let mut out = vec![0.0f32; x.len()];
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

/// Cross-entropy gradient of softmax outputs `out` (an (outer, n, inner) layout, one label per
/// outer·inner position): (out − target)·scale, target the (smoothed) one-hot of the label cast
/// to int like MXNet; positions whose label equals `ignore` get 0. Labels out of range subtract
/// nothing (MXNet compares every class with the label).
pub(crate) fn softmax_ce_grad(
    out: &[f32],
    label: &[f32],
    (_, n, inner): (usize, usize, usize),
    scale: f32,
    alpha: f32,
    ignore: Option<i64>,
) -> Vec<f32> {
    let (on, off) = if alpha > 0.0 && n > 1 {
        (1.0 - alpha, alpha / (n - 1) as f32)
    } else {
        (1.0, 0.0)
    };
    let block = n * inner;
    let fill = |dx: &mut [MaybeUninit<f32>]| {
        par::for_each_row_mut(dx, block, |o, db| {
            let ob = &out[o * block..(o + 1) * block];
            if inner == 1 {
                // One label per row (classifiers, language models over the vocabulary): a
                // vectorisable pass against `off`, then the label's class alone.
                let k = label.get(o).map_or(-1, |&l| l as i64);
                let ignored = ignore == Some(k);
                db.iter_mut().zip(ob).for_each(|(d, &p)| {
                    d.write(if ignored { 0.0 } else { (p - off) * scale });
                });
                if let Some(c) = usize::try_from(k).ok().filter(|&c| c < n && !ignored) {
                    db[c].write((ob[c] - on) * scale);
                }
                return;
            }
            for j in 0..inner {
                let k = label.get(o * inner + j).map_or(-1, |&l| l as i64);
                let ignored = ignore == Some(k);
                for c in 0..n {
                    let i = c * inner + j;
                    let t = if c as i64 == k { on } else { off };
                    db[i].write(if ignored { 0.0 } else { (ob[i] - t) * scale });
                }
            }
        });
    };
    // SAFETY: every row writes each of its elements (zeros where the label is ignored).
    unsafe { par::written(out.len(), fill) }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The one-label-per-row path against the definition: smoothing, an ignored row, a label
    /// out of range (subtracts nothing) and a negative one.
    #[test]
    fn ce_grad_rows_match_the_definition() {
        let (rows, n) = (5, 7);
        let out: Vec<f32> = (0..rows * n).map(|i| (i * 13 % 17) as f32 / 17.0).collect();
        let label = [3.0f32, 0.0, 9.0, -1.0, 6.0];
        for alpha in [0.0f32, 0.1] {
            let got = softmax_ce_grad(&out, &label, (rows, n, 1), 0.5, alpha, Some(0));
            let (on, off) = if alpha > 0.0 {
                (1.0 - alpha, alpha / (n - 1) as f32)
            } else {
                (1.0, 0.0)
            };
            for r in 0..rows {
                for c in 0..n {
                    let k = label[r] as i64;
                    let want = if k == 0 {
                        0.0
                    } else {
                        let t = if c as i64 == k { on } else { off };
                        (out[r * n + c] - t) * 0.5
                    };
                    assert_eq!(got[r * n + c], want, "row {r} class {c} alpha {alpha}");
                }
            }
        }
    }

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

    /// The vector builds of the row loops (AVX-512 or AVX2, whichever this CPU has) give the
    /// bits of the baseline build: rows shorter than, as long as and longer than the lanes,
    /// with and without lengths, log and not.
    #[test]
    fn row_builds_agree_bit_for_bit() {
        for n in [1, 7, 8, 9, 15, 16, 17, 31, 33, 100, 1000] {
            let rows = 5;
            let x: Vec<f32> = (0..rows * n)
                .map(|i| ((i * 37 % 101) as f32 - 50.0) * 0.173)
                .collect();
            let lens = [n as f32, 0.0, (n / 2) as f32, 3.0, n as f32 + 4.0];
            for (log, inv_t, lengths) in [
                (false, 1.0, None),
                (true, 0.7, None),
                (false, 2.5, Some(&lens[..])),
                (true, 1.0, Some(&lens[..])),
            ] {
                let mut wide = vec![MaybeUninit::new(f32::NAN); x.len()];
                let mut plain = vec![MaybeUninit::new(f32::NAN); x.len()];
                softmax_rows(&x, &mut wide, n, 0, lengths, inv_t, log);
                rows_body(&x, &mut plain, n, 0, lengths, inv_t, log);
                let bits = |v: &[MaybeUninit<f32>]| -> Vec<u32> {
                    // SAFETY: every element was initialised before the calls.
                    v.iter()
                        .map(|e| unsafe { e.assume_init() }.to_bits())
                        .collect()
                };
                assert_eq!(bits(&wide), bits(&plain), "n {n} log {log} {lengths:?}");
            }
        }
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
