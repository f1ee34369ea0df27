//! Depthwise convolution (one filter per channel, each seeing only its own channel —
//! MobileNet's 3×3 layers): forward, data gradient and weight gradient looping directly over
//! NCHW planes in parallel, where one im2col + single-row GEMM per group would be the wrong
//! algorithm. `kernels::conv` sends a [`ConvGeom`] here when it is a 2-D depthwise one.

use super::conv::{copy_short, valid_range, ConvGeom};
use super::depthwise_vector::{vector_forward, vector_kernel};
use super::par::{serial_below, Shared};
use super::scratch::Scratch;
use rayon::prelude::*;
use std::ops::Range;

/// Planes of a depthwise pass per parallel task: enough multiply-adds (about 32k) that a task
/// outweighs handing it to the pool.
pub(super) fn depthwise_planes_per_task(g: &ConvGeom) -> usize {
    (32768 / (g.out_len() * g.kernel_len()).max(1)).max(1)
}

/// Whether a depthwise pass goes to the pool (a rough multiply-add count).
pub(super) fn depthwise_parallel(g: &ConvGeom) -> bool {
    g.batch * g.channels * g.out_len() * g.kernel_len() >= serial_below()
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

/// Where a depthwise forward reads its input: each plane zero-padded and split by stride
/// phase, so that every kernel tap is one contiguous run. Padded row `r`, column `q` of a
/// plane lands in phase `(r % sh, q % sw)` at row `r / sh`, column `q / sw`; the planes of
/// one stack (the same channel of consecutive samples, sharing the filter) follow each other
/// in every phase. Output `(y, x)` of stack plane `j` then sits at flat position
/// `(j·hq + y)·wq + x`, and tap `(a, e)` adds the run of phase `(a·dh % sh, e·dw % sw)`
/// starting `(a·dh / sh)·wq + e·dw / sw` further on. Positions with `x ≥ ow` or `y ≥ oh`
/// are computed and dropped: a few columns per row buy loops without any clipping.
#[derive(Clone, Copy)]
struct PhaseLayout {
    /// Rows and columns of one plane in one phase.
    hq: usize,
    wq: usize,
    /// Planes in a full stack.
    stack: usize,
    /// Values of one phase of a full stack, with the zero slack the last taps run into.
    phase_len: usize,
}

/// Values of the phase buffers of one stack at most: a stack stays in the core's L2 cache
/// while its taps run over it, yet is long enough that the per-tap loop overhead vanishes
/// for MobileNet's 2×2 and 4×4 planes.
const STACK_VALUES: usize = 1 << 15;

impl PhaseLayout {
    fn new(g: &ConvGeom) -> PhaseLayout {
        let [_, ih, iw] = g.input;
        let [_, kh, _] = g.kernel;
        let [_, sh, sw] = g.stride;
        let [_, dh, _] = g.dilate;
        let [_, ph, pw] = g.pad;
        let (hq, wq) = ((ih + 2 * ph).div_ceil(sh), (iw + 2 * pw).div_ceil(sw));
        let plane = (hq * wq).max(1);
        let stack = (STACK_VALUES / (plane * sh * sw)).clamp(1, g.batch.max(1));
        // The last taps read up to (kh-1)·dh/sh rows and one row's worth of columns past the
        // stack's end (garbage positions only).
        let slack = ((kh - 1) * dh / sh + 1) * wq;
        PhaseLayout {
            hq,
            wq,
            stack,
            phase_len: stack * plane + slack,
        }
    }
}

/// Depthwise forward: `y[n, c] = Σ_taps w[c, tap] · shifted x[n, c]` (+ `bias[c]`), then
/// `epilogue` over the output while it is in cache: through the AVX-512 or AVX2 kernels of
/// `depthwise_vector` where the CPU has them (column stride 1 or 2), else stacked
/// ([`stacked_forward`]). The taps are summed in the
/// same order as the transposes below see them; the padding contributes `w · 0` (as MXNet's
/// unfolding does).
pub(super) fn depthwise_forward(
    g: &ConvGeom,
    x: &[f32],
    w: &[f32],
    bias: Option<&[f32]>,
    y: &mut [f32],
    epilogue: Option<&(dyn Fn(&mut [f32]) + Sync)>,
) {
    if g.out_len() == 0 || g.batch == 0 {
        return;
    }
    match vector_kernel(g) {
        Some(kernel) => vector_forward(kernel, g, x, w, bias, y, epilogue),
        None => stacked_forward(g, x, w, bias, y, epilogue),
    }
}

/// [`depthwise_forward`] over stacked planes: the same channel of up to [`STACK_VALUES`]
/// worth of samples is laid out by [`PhaseLayout`] and every tap is one multiply-add over
/// the whole stack; stacks run in parallel.
pub(super) fn stacked_forward(
    g: &ConvGeom,
    x: &[f32],
    w: &[f32],
    bias: Option<&[f32]>,
    y: &mut [f32],
    epilogue: Option<&(dyn Fn(&mut [f32]) + Sync)>,
) {
    let layout = PhaseLayout::new(g);
    let stacks_per_channel = g.batch.div_ceil(layout.stack);
    let items = g.channels * stacks_per_channel;
    let pass = ForwardPass {
        g,
        layout,
        x,
        w,
        bias,
        out: Shared::new(y),
        epilogue,
    };
    let item = |i: usize| {
        let (ch, s) = (i / stacks_per_channel, i % stacks_per_channel);
        let samples = s * layout.stack..((s + 1) * layout.stack).min(g.batch);
        stack_forward(&pass, ch, samples);
    };
    if depthwise_parallel(g) {
        let per_task = depthwise_planes_per_task(g).div_ceil(layout.stack).max(1);
        (0..items)
            .into_par_iter()
            .with_min_len(per_task)
            .for_each(item);
    } else {
        (0..items).for_each(item);
    }
}

/// What every stack of one [`depthwise_forward`] shares.
struct ForwardPass<'a> {
    g: &'a ConvGeom,
    layout: PhaseLayout,
    x: &'a [f32],
    w: &'a [f32],
    bias: Option<&'a [f32]>,
    /// The output; each stack writes its own planes.
    out: Shared<'a, f32>,
    epilogue: Option<&'a (dyn Fn(&mut [f32]) + Sync)>,
}

/// One stack of [`depthwise_forward`]: channel `ch` of `samples`; its loops compiled for
/// AVX-512, else AVX2, when the CPU has it (the crate targets baseline x86-64, whose 4-wide
/// loops ran the taps at a third of the speed). The loops multiply and add apart (Rust never
/// fuses them into FMAs), so every build gives the same bits.
fn stack_forward(pass: &ForwardPass<'_>, ch: usize, samples: Range<usize>) {
    super::unary::wide_dispatch!(
        stack_body,
        (pass: &ForwardPass<'_>, ch: usize, samples: Range<usize>)
    )(pass, ch, samples)
}

#[inline(always)]
fn stack_body(pass: &ForwardPass<'_>, ch: usize, samples: Range<usize>) {
    let ForwardPass {
        g,
        layout,
        x,
        w,
        bias,
        ref out,
        epilogue,
    } = *pass;
    let [_, ih, iw] = g.input;
    let [_, oh, ow] = g.output;
    let [_, kh, kw] = g.kernel;
    let [_, sh, sw] = g.stride;
    let [_, dh, dw] = g.dilate;
    let [_, ph, pw] = g.pad;
    let (c, l, il, k) = (g.channels, g.out_len(), g.in_len(), g.kernel_len());
    let PhaseLayout { hq, wq, .. } = layout;
    let m = samples.len();
    let phase_len = layout.phase_len;
    let mut phases = Scratch::take(phase_len * sh * sw);
    phases.fill(0.0);
    // (An empty input row leaves only padding: the zeroed phases.)
    for (j, n) in samples.clone().enumerate().filter(|_| iw > 0) {
        let img = &x[(n * c + ch) * il..(n * c + ch + 1) * il];
        for (iy, src) in img.chunks_exact(iw).take(ih).enumerate() {
            let r = iy + ph;
            let row = (r % sh * sw) * phase_len + (j * hq + r / sh) * wq;
            scatter_row(&mut phases[row..], phase_len, src, sw, pw);
        }
    }
    // Output rows of the last plane past oh are never read: the flat run stops at its row oh.
    let run = ((m - 1) * hq + oh) * wq;
    let mut acc = Scratch::take(run);
    let wk = &w[ch * k..(ch + 1) * k];
    let tap_run = |a: usize, e: usize| {
        let phase = (a * dh % sh * sw + e * dw % sw) * phase_len;
        let start = phase + (a * dh / sh) * wq + e * dw / sw;
        (&phases[start..start + run], wk[a * kw + e])
    };
    for a in 0..kh {
        // Up to three taps of a kernel row per pass over the accumulator, added in tap order.
        let mut e = 0;
        while e < kw {
            let (s0, w0) = tap_run(a, e);
            let first = a == 0 && e == 0;
            match kw - e {
                1 => {
                    for (d, v0) in acc.iter_mut().zip(s0) {
                        *d = if first { w0 * v0 } else { *d + w0 * v0 };
                    }
                    e += 1;
                }
                2 => {
                    let (s1, w1) = tap_run(a, e + 1);
                    for ((d, v0), v1) in acc.iter_mut().zip(s0).zip(s1) {
                        let base = if first { w0 * v0 } else { *d + w0 * v0 };
                        *d = base + w1 * v1;
                    }
                    e += 2;
                }
                _ => {
                    let (s1, w1) = tap_run(a, e + 1);
                    let (s2, w2) = tap_run(a, e + 2);
                    for (((d, v0), v1), v2) in acc.iter_mut().zip(s0).zip(s1).zip(s2) {
                        let base = if first { w0 * v0 } else { *d + w0 * v0 };
                        *d = base + w1 * v1 + w2 * v2;
                    }
                    e += 3;
                }
            }
        }
    }
    // The bias over the whole stack at once (the dropped positions too); the epilogue over
    // each plane once it is in the output, the only place a kernel's epilogue may run.
    if let Some(b) = bias {
        acc.iter_mut().for_each(|v| *v += b[ch]);
    }
    for (j, n) in samples.enumerate() {
        // SAFETY: plane (n, ch) belongs to this stack alone.
        let plane = unsafe { out.get_mut((n * c + ch) * l, l) };
        for (y, dst) in plane.chunks_exact_mut(ow).enumerate() {
            copy_short(dst, &acc[(j * hq + y) * wq..][..ow]);
        }
        if let Some(e) = epilogue {
            e(plane);
        }
    }
}

/// Writes one input row into its [`PhaseLayout`] rows: value `ix` goes to phase
/// `(ix + pad) % stride` (phases `phase_len` apart, starting at `dst`), column
/// `(ix + pad) / stride`. Stride 1 is a plain copy and stride 2 one deinterleaving pass.
#[inline(always)]
fn scatter_row(dst: &mut [f32], phase_len: usize, src: &[f32], stride: usize, pad: usize) {
    match stride {
        1 => copy_short(&mut dst[pad..pad + src.len()], src),
        2 => {
            let (even, odd) = dst.split_at_mut(phase_len);
            // An odd pad puts the first value alone in phase 1; pairs follow from there.
            let skip = pad % 2;
            if skip == 1 {
                if let Some(&v) = src.first() {
                    odd[pad / 2] = v;
                }
            }
            let col = (skip + pad) / 2;
            let rest = &src[skip.min(src.len())..];
            let pairs = rest.chunks_exact(2);
            if let Some(&v) = pairs.remainder().first() {
                even[col + rest.len() / 2] = v;
            }
            let n = rest.len() / 2;
            for ((e, o), p) in even[col..col + n]
                .iter_mut()
                .zip(&mut odd[col..col + n])
                .zip(pairs)
            {
                *e = p[0];
                *o = p[1];
            }
        }
        _ => {
            for (ix, &v) in src.iter().enumerate() {
                dst[(ix + pad) % stride * phase_len + (ix + pad) / stride] = v;
            }
        }
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
