//! Normalisation kernels: per-channel f64 sums in a fixed partition (bit-identical at any
//! thread count), BatchNorm's per-channel affine map and input gradient, LayerNorm's slice
//! statistics, affine map and input gradient. Everything reads and writes float32 with f64
//! accumulation, as the normalisation ops compute.

use super::par;
use std::mem::MaybeUninit;

/// Per-channel sums of the pair `f(i, ch, pos)` over an (outer, c, inner) layout, in f64: `i`
/// the flat index, `ch` its channel, `pos` = o·inner + j its position among the others.
/// The work is cut in a fixed partition (whole channels, or groups of rows when `inner` is 1
/// so that reads stay contiguous) combined in a fixed order: the same bits at any thread count.
pub fn channel_sums2(
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

/// 1/sqrt(var + eps); MXNet's guard gives 0 for a zero variance with eps = 0.
pub fn inv_std(var: f64, eps: f64) -> f64 {
    if var == 0.0 && eps == 0.0 {
        0.0
    } else {
        1.0 / (var + eps).sqrt()
    }
}

/// BatchNorm's forward map over an (outer, c, inner) layout: `(x − mean[ch])·scale[ch] +
/// beta[ch]`, then `epilogue` (a fused activation) over each channel's plane while it is in
/// cache. Planes run in parallel, so one image's channels spread over the threads too. The
/// output is written once, not zeroed first: the pass is bound by memory traffic.
pub fn per_channel_affine(
    x: &[f32],
    (_, c, inner): (usize, usize, usize),
    mean: &[f32],
    scale: &[f32],
    beta: &[f32],
    epilogue: Option<&(dyn Fn(&mut [f32]) + Sync)>,
) -> Vec<f32> {
    let fill = |out: &mut [MaybeUninit<f32>]| {
        par::for_each_row_mut(out, inner, |p, plane| {
            let ch = p % c;
            let (mu, s, b) = (mean[ch], scale[ch], beta[ch]);
            for (y, &v) in plane.iter_mut().zip(&x[p * inner..(p + 1) * inner]) {
                y.write((v - mu) * s + b);
            }
            // SAFETY: the loop above wrote the whole plane.
            let plane = unsafe { par::assume_written(plane) };
            if let Some(e) = epilogue {
                e(plane);
            }
        });
    };
    // SAFETY: x.len() is a whole number of planes (inner > 0) or 0, each plane written above.
    unsafe { par::written(x.len(), fill) }
}

/// BatchNorm's input gradient: `(g − gm − (x − mean)·k)·iw` with `(gm, k, iw)` per channel.
pub fn batch_norm_dx(
    g: &[f32],
    x: &[f32],
    (_, c, inner): (usize, usize, usize),
    mean: &[f32],
    coef: &[(f32, f32, f32)],
) -> Vec<f32> {
    let mut dx = vec![0.0f32; x.len()];
    par::for_each_row_mut(&mut dx, c * inner, |o, row| {
        let span = o * c * inner..(o + 1) * c * inner;
        let (gr, xr) = (&g[span.clone()], &x[span]);
        for (ch, &(gm, k, iw)) in coef.iter().enumerate().take(c) {
            let (mu, r) = (mean[ch], ch * inner..(ch + 1) * inner);
            for ((d, &gv), &xv) in row[r.clone()].iter_mut().zip(&gr[r.clone()]).zip(&xr[r]) {
                *d = (gv - gm - (xv - mu) * k) * iw;
            }
        }
    });
    dx
}

/// Mean and std = sqrt(var + eps) of every slice along the middle axis of an (outer, n,
/// inner) layout, in f64, one per (outer, inner) position.
pub fn slice_mean_std(
    x: &[f32],
    (outer, n, inner): (usize, usize, usize),
    eps: f64,
) -> Vec<(f32, f32)> {
    par::map_indices(outer * inner, x.len(), |p| {
        let base = (p / inner) * n * inner + p % inner;
        let at = |k: usize| x[base + k * inner] as f64;
        let mean = (0..n).map(at).sum::<f64>() / n.max(1) as f64;
        let var = (0..n).map(|k| (at(k) - mean).powi(2)).sum::<f64>() / n.max(1) as f64;
        (mean as f32, (var + eps).sqrt() as f32)
    })
}

/// LayerNorm's forward map: `(x − mean)/std·gamma[k] + beta[k]` along the middle axis.
pub fn layer_norm_apply(
    x: &[f32],
    (_, n, inner): (usize, usize, usize),
    stats: &[(f32, f32)],
    gamma: &[f32],
    beta: &[f32],
) -> Vec<f32> {
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
    out
}

/// LayerNorm's input gradient (of the normalised output only, as MXNet propagates it).
pub fn layer_norm_dx(
    g: &[f32],
    x: &[f32],
    (_, n, inner): (usize, usize, usize),
    mean: &[f32],
    std: &[f32],
    gamma: &[f32],
) -> Vec<f32> {
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
    dx
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
