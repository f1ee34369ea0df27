//! Depthwise convolution (one filter per channel, each seeing only its own channel —
//! MobileNet's 3×3 layers): forward, data gradient and weight gradient looping directly over
//! NCHW planes in parallel, where one im2col + single-row GEMM per group would be the wrong
//! algorithm. `kernels::conv` sends a [`ConvGeom`] here when it is a 2-D depthwise one.

use super::conv::{valid_range, ConvGeom};
use super::par::SERIAL_BELOW;
use rayon::prelude::*;

/// Planes of a depthwise pass per parallel task: enough multiply-adds (about 32k) that a task
/// outweighs handing it to the pool.
fn depthwise_planes_per_task(g: &ConvGeom) -> usize {
    (32768 / (g.out_len() * g.kernel_len()).max(1)).max(1)
}

/// Whether a depthwise pass goes to the pool (a rough multiply-add count).
pub(super) fn depthwise_parallel(g: &ConvGeom) -> bool {
    g.batch * g.channels * g.out_len() * g.kernel_len() >= SERIAL_BELOW
}

/// Calls `f(plane index, tap (a, e), output row y, input row iy, output range [lo, hi), first
/// input column)` for every tap of every output row of one depthwise plane whose input row
/// exists: the loop the forward and both gradients share, so they stay exact transposes.
#[inline(always)]
fn depthwise_taps(g: &ConvGeom, mut f: impl FnMut(usize, usize, usize, usize, usize, usize)) {
    let [_, ih, _] = g.input;
    let [_, oh, ow] = g.output;
    let [_, kh, kw] = g.kernel;
    let [_, sh, sw] = g.stride;
    let [_, dh, dw] = g.dilate;
    let [_, ph, pw] = g.pad;
    let iw = g.input[2];
    let ranges: Vec<(usize, usize, usize)> = (0..kw)
        .map(|e| {
            let (lo, hi) = valid_range(ow, sw, e * dw, pw, iw);
            (lo, hi, (lo * sw + e * dw).saturating_sub(pw))
        })
        .collect();
    for y in 0..oh {
        for a in 0..kh {
            let iy = (y * sh + a * dh) as isize - ph as isize;
            if iy < 0 || iy as usize >= ih {
                continue;
            }
            for (e, &(lo, hi, first)) in ranges.iter().enumerate() {
                if lo < hi {
                    f(a * kw + e, y, iy as usize, lo, hi, first);
                }
            }
        }
    }
}

/// Depthwise forward over whole planes: `y[n, c] = Σ_taps w[c, tap] · shifted x[n, c]`
/// (+ `bias[c]`), one output row at a time (stride 1: each tap is a contiguous multiply-add
/// over the row), then `epilogue` over the plane while it is in cache. Planes run in parallel.
pub(super) fn depthwise_forward(
    g: &ConvGeom,
    x: &[f32],
    w: &[f32],
    bias: Option<&[f32]>,
    y: &mut [f32],
    epilogue: Option<&(dyn Fn(&mut [f32]) + Sync)>,
) {
    let (c, l, il, k) = (g.channels, g.out_len(), g.in_len(), g.kernel_len());
    let (ow, iw, sw) = (g.output[2], g.input[2], g.stride[2]);
    let plane = |(p, out): (usize, &mut [f32])| {
        let ch = p % c;
        let img = &x[p * il..(p + 1) * il];
        let wk = &w[ch * k..(ch + 1) * k];
        out.fill(0.0);
        depthwise_taps(g, |tap, oy, iy, lo, hi, first| {
            let wv = wk[tap];
            let row = &mut out[oy * ow + lo..oy * ow + hi];
            let src = &img[iy * iw + first..(iy + 1) * iw];
            if sw == 1 {
                row.iter_mut().zip(src).for_each(|(d, s)| *d += wv * s);
            } else {
                row.iter_mut()
                    .zip(src.iter().step_by(sw))
                    .for_each(|(d, s)| *d += wv * s);
            }
        });
        if let Some(b) = bias {
            out.iter_mut().for_each(|v| *v += b[ch]);
        }
        if let Some(e) = epilogue {
            e(out);
        }
    };
    if l == 0 {
        return;
    }
    if depthwise_parallel(g) {
        y.par_chunks_mut(l)
            .with_min_len(depthwise_planes_per_task(g))
            .enumerate()
            .for_each(plane);
    } else {
        y.chunks_mut(l).enumerate().for_each(plane);
    }
}

/// The transpose of [`depthwise_forward`] (no bias): `dx` plane by plane, overwritten.
pub(super) fn depthwise_backward_data(g: &ConvGeom, dy: &[f32], w: &[f32], dx: &mut [f32]) {
    let (c, l, il, k) = (g.channels, g.out_len(), g.in_len(), g.kernel_len());
    let (ow, iw, sw) = (g.output[2], g.input[2], g.stride[2]);
    let plane = |(p, img): (usize, &mut [f32])| {
        let ch = p % c;
        let src = &dy[p * l..(p + 1) * l];
        let wk = &w[ch * k..(ch + 1) * k];
        img.fill(0.0);
        depthwise_taps(g, |tap, oy, iy, lo, hi, first| {
            let wv = wk[tap];
            let d_row = &src[oy * ow + lo..oy * ow + hi];
            let dst = &mut img[iy * iw + first..(iy + 1) * iw];
            if sw == 1 {
                dst.iter_mut().zip(d_row).for_each(|(d, s)| *d += wv * s);
            } else {
                dst.iter_mut()
                    .step_by(sw)
                    .zip(d_row)
                    .for_each(|(d, s)| *d += wv * s);
            }
        });
    };
    if il == 0 {
        return;
    }
    if depthwise_parallel(g) {
        dx.par_chunks_mut(il)
            .with_min_len(depthwise_planes_per_task(g))
            .enumerate()
            .for_each(plane);
    } else {
        dx.chunks_mut(il).enumerate().for_each(plane);
    }
}

/// The weight (and bias) gradient of [`depthwise_forward`]: per channel, the sums over the
/// samples in order (deterministic at any thread count); channels run in parallel.
pub(super) fn depthwise_backward_weight(
    g: &ConvGeom,
    x: &[f32],
    dy: &[f32],
    dw: &mut [f32],
    db: Option<&mut [f32]>,
) {
    let (c, l, il, k) = (g.channels, g.out_len(), g.in_len(), g.kernel_len());
    let (ow, iw, sw) = (g.output[2], g.input[2], g.stride[2]);
    let channel = |ch: usize| -> (Vec<f32>, f32) {
        let mut acc = vec![0.0f32; k];
        let mut sum = 0.0f32;
        for n in 0..g.batch {
            let p = n * c + ch;
            let img = &x[p * il..(p + 1) * il];
            let d = &dy[p * l..(p + 1) * l];
            depthwise_taps(g, |tap, oy, iy, lo, hi, first| {
                let d_row = &d[oy * ow + lo..oy * ow + hi];
                let src = &img[iy * iw + first..(iy + 1) * iw];
                acc[tap] += if sw == 1 {
                    d_row.iter().zip(src).map(|(a, b)| a * b).sum::<f32>()
                } else {
                    d_row
                        .iter()
                        .zip(src.iter().step_by(sw))
                        .map(|(a, b)| a * b)
                        .sum::<f32>()
                };
            });
            sum += d.iter().sum::<f32>();
        }
        (acc, sum)
    };
    let per: Vec<(Vec<f32>, f32)> = if depthwise_parallel(g) {
        (0..c).into_par_iter().map(channel).collect()
    } else {
        (0..c).map(channel).collect()
    };
    for (row, (acc, _)) in dw.chunks_exact_mut(k.max(1)).zip(&per) {
        row.copy_from_slice(acc);
    }
    if let Some(db) = db {
        db.iter_mut().zip(&per).for_each(|(d, (_, s))| *d = *s);
    }
}
