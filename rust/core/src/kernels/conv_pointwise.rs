//! A 1×1 convolution without padding, stride or dilation through the GEMM: a sample's input
//! is its own column matrix and its output the GEMM's `(filters, positions)` layout, so each
//! sample is one product per group straight from `x` into `y` — no unfolding copy and no
//! reordering pass.

use super::conv::{
    bias_then, conv_gemm, conv_gemm_split_above, group_weight, split_pass, ConvGeom,
};
use super::conv_packed::SendPtr;
use super::gemm::{bands, GemmScalar, MatRef};
use super::par::serial_below;
use super::tuning::{POINTWISE_BLOCKS_FROM, POINTWISE_BLOCK_VALUES};
use crate::error::Result;
use rayon::prelude::*;

/// `kernels::conv::conv_forward` of a pointwise geometry (lengths checked). Samples run side
/// by side when that pays, else each sample's work splits across the pool. A sample whose
/// output outgrows the cache, with a bias or an epilogue to run over it, goes by blocks of
/// positions ([`blocks`]).
pub(super) fn forward(
    g: &ConvGeom,
    x: &[f32],
    w: &[f32],
    bias: Option<&[f32]>,
    y: &mut [f32],
    epilogue: Option<&(dyn Fn(&mut [f32]) + Sync)>,
) -> Result<()> {
    let (c, f, l) = (g.channels, g.filters, g.out_len());
    let (cg, fg) = (g.channels_per_group(), g.filters_per_group());
    if f * l == 0 {
        return Ok(());
    }
    let by_blocks =
        g.groups == 1 && f * l >= POINTWISE_BLOCKS_FROM && (bias.is_some() || epilogue.is_some());
    let sample = |(n, y_n): (usize, &mut [f32]), inner: bool| -> Result<()> {
        let x_n = &x[n * c * l..(n + 1) * c * l];
        if by_blocks {
            let product = Product { w, x: x_n, c, l };
            blocks(&product, y_n, bias, epilogue, inner);
            return Ok(());
        }
        for grp in 0..g.groups {
            conv_gemm(
                group_weight(g, w, grp),
                MatRef::row_major(&x_n[grp * cg * l..(grp + 1) * cg * l], cg, l),
                &mut y_n[grp * fg * l..(grp + 1) * fg * l],
                false,
                inner,
            )?;
        }
        bias_then(y_n, l, bias, epilogue, split_pass(inner, y_n.len()));
        Ok(())
    };
    g.per_sample(y, sample)
}

/// One sample's product: `w (filters, c)` times `x (c, l)`.
struct Product<'a> {
    w: &'a [f32],
    x: &'a [f32],
    c: usize,
    l: usize,
}

/// One sample's output `y (filters, l)` of `p`, block of positions by block of positions: each
/// block's product, then its bias and `epilogue` while the block is still in cache. Written
/// whole and then passed over again, an output larger than the cache went out to memory and
/// back (MobileNet v2's 16 → 96 at 112², 4.8 MB). When the product or the pass over the
/// output would split (`inner`), each thread of the pool takes a band of filters through
/// every block (or, for few filters, a run of positions), as the GEMM's bands split: the
/// next layer (MobileNet's depthwise, split by channels) then finds its channels where they
/// were written. Each value sums the same terms in the same order as one product over every
/// position (the GEMM blocks along `c` alone), so the bits are the same.
fn blocks(
    p: &Product,
    y: &mut [f32],
    bias: Option<&[f32]>,
    epilogue: Option<&(dyn Fn(&mut [f32]) + Sync)>,
    inner: bool,
) {
    let (c, l) = (p.c, p.l);
    let f = y.len() / l;
    let split = inner && (f * c * l >= conv_gemm_split_above() || f * l >= serial_below());
    // Parts as the GEMM's bands split: bands of filters, or for few filters runs of
    // positions.
    let (by_filters, parts) = if split { bands(f, l) } else { (true, 1) };
    let yp = SendPtr(y.as_mut_ptr());
    let part = |i: usize| {
        let ((f0, f1), (q0, q1)) = match by_filters {
            true => ((i * f / parts, (i + 1) * f / parts), (0, l)),
            false => ((0, f), (i * l / parts, (i + 1) * l / parts)),
        };
        let a = MatRef::row_major(&p.w[f0 * c..f1 * c], f1 - f0, c);
        // Whole vectors of positions, the last block maybe short.
        let width = (POINTWISE_BLOCK_VALUES / (f1 - f0).max(1))
            .next_multiple_of(16)
            .max(16);
        for j0 in (q0..q1).step_by(width) {
            let j1 = (j0 + width).min(q1);
            let b = MatRef {
                data: &p.x[j0..],
                rows: c,
                cols: j1 - j0,
                row_stride: l,
                col_stride: 1,
            };
            // SAFETY: a and b fit their data (rows of x from j0, j1 - j0 ≤ l - j0 wide); this
            // part alone writes columns j0..j1 of y's rows f0..f1 (of l each), inside y.
            unsafe { f32::serial(a, b, yp.get().add(f0 * l + j0), l, 1, false) };
            for fi in f0..f1 {
                // SAFETY: as above, row fi's columns j0..j1.
                let row =
                    unsafe { std::slice::from_raw_parts_mut(yp.get().add(fi * l + j0), j1 - j0) };
                if let Some(b) = bias {
                    row.iter_mut().for_each(|v| *v += b[fi]);
                }
                if let Some(e) = epilogue {
                    e(row);
                }
            }
        }
    };
    if parts > 1 {
        (0..parts).into_par_iter().for_each(part);
    } else {
        part(0);
    }
}
