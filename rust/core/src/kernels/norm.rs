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
/// beta[ch]`, then `epilogue(start, planes)` (a fused activation) over each group of planes
/// while it is in cache. Planes run in parallel in groups of about [`par::CHUNK`] values, so one image's
/// channels spread over the threads too, and DenseNet's 7² planes (49 values, a thousand of
/// them after its last Concat) do not each pay for a task and an epilogue call. The output is
/// written once, not zeroed first: the pass is bound by memory traffic.
pub fn per_channel_affine(
    x: &[f32],
    (_, c, inner): (usize, usize, usize),
    mean: &[f32],
    scale: &[f32],
    beta: &[f32],
    epilogue: Option<&(dyn Fn(usize, &mut [f32]) + Sync)>,
) -> Vec<f32> {
    let group = (par::CHUNK / inner.max(1)).max(1);
    let fill = |out: &mut [MaybeUninit<f32>]| {
        par::for_each_row_mut(out, group * inner, |g, planes| {
            let p0 = g * group;
            for (j, plane) in planes.chunks_mut(inner).enumerate() {
                let (p, ch) = (p0 + j, (p0 + j) % c);
                affine_plane(
                    &x[p * inner..(p + 1) * inner],
                    (mean[ch], scale[ch], beta[ch]),
                    plane,
                );
            }
            // SAFETY: the loop above wrote every plane of the group.
            let planes = unsafe { par::assume_written(planes) };
            if let Some(e) = epilogue {
                e(p0 * inner, planes);
            }
        });
    };
    // SAFETY: x.len() is a whole number of planes (inner > 0) or 0, each plane written above.
    unsafe { par::written(x.len(), fill) }
}

/// `out = (x − mu)·s + b` over one plane, in AVX-512 vectors when the CPU has them, else in
/// AVX2 ones when it has those (the crate targets baseline x86-64, whose 4-wide loop left this
/// pass at half the memory's speed). Subtract, multiply, add: no fused multiply-add (Rust
/// never contracts a multiply and an add into one, even compiled for FMA), the same bits on
/// every path.
fn affine_plane(x: &[f32], (mu, s, b): (f32, f32, f32), out: &mut [MaybeUninit<f32>]) {
    #[inline(always)]
    fn body(x: &[f32], (mu, s, b): (f32, f32, f32), out: &mut [MaybeUninit<f32>]) {
        for (y, &v) in out.iter_mut().zip(x) {
            y.write((v - mu) * s + b);
        }
    }
    super::unary::wide_dispatch!(
        body,
        (x: &[f32], m: (f32, f32, f32), out: &mut [MaybeUninit<f32>])
    )(x, (mu, s, b), out)
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

    /// The affine map and its epilogue over planes in groups (several groups, a partial last
    /// one, channels crossing group and sample ends): the bits of the plain formula.
    #[test]
    fn grouped_affine_planes_match_the_formula() {
        for (outer, c, inner) in [(2, 1500, 7), (3, 5, 49), (1, 3, par::CHUNK + 3), (2, 4, 1)] {
            let n = outer * c * inner;
            let x: Vec<f32> = (0..n)
                .map(|i| ((i * 37) % 101) as f32 * 0.03 - 1.4)
                .collect();
            let mean: Vec<f32> = (0..c).map(|i| i as f32 * 0.01 - 0.2).collect();
            let scale: Vec<f32> = (0..c).map(|i| 1.5 - i as f32 * 0.001).collect();
            let beta: Vec<f32> = (0..c).map(|i| (i % 7) as f32 * 0.1 - 0.3).collect();
            let relu = |_: usize, v: &mut [f32]| v.iter_mut().for_each(|x| *x = x.max(0.0));
            let got = per_channel_affine(&x, (outer, c, inner), &mean, &scale, &beta, Some(&relu));
            let want: Vec<u32> = (0..n)
                .map(|i| {
                    let ch = i / inner % c;
                    ((x[i] - mean[ch]) * scale[ch] + beta[ch])
                        .max(0.0)
                        .to_bits()
                })
                .collect();
            let got: Vec<u32> = got.iter().map(|v| v.to_bits()).collect();
            assert_eq!(got, want, "({outer}, {c}, {inner})");
        }
    }

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
