//! Inference convolution products over many output positions with the weight packed ahead:
//! `y (filters × positions) = W · B + bias`, then the fused activation, in one pass.
//!
//! A general GEMM packs both operands on every call, reads a column matrix im2col wrote out
//! whole, and leaves the bias and the activation to passes of their own over the output.
//! Here the weight is packed once into panels of [`MR`] filters ([`FilterPanels`], kept by
//! the executor between passes), and each tile's block of the column matrix `B` is gathered
//! straight from the image into L1 ([`Columns::Image`]), its rows contiguous runs of
//! positions: exactly the vectors the tiles need. A tile holds `MR` filters × up to [`NV`] vectors of 16 positions in registers; each
//! row of `B` costs `NV` loads and `MR` broadcasts for `MR · NV` FMAs. The bias goes in as the
//! tile is stored and the activation runs over each output row while it is in cache.
//!
//! The loops: blocks of `k` (so a block of the weight stays in L2), then tiles of positions
//! (their `B` block stays in L1 across the filter panels), then panels. Every output sums
//! over `k` in order, whatever the thread split.

use super::conv::{copy_short, valid_range, ConvGeom};
use super::conv_direct::{self, runs_direct};
use super::conv_packed::{check_packed, packs_weight};
use super::conv_packed::{Panels, SendPtr};
use super::par::serial_below;
use super::tuning::{
    EPILOGUE_RUN_BYTES, MAPPED_POINTWISE_MAX_WEIGHT, POINTWISE_TILED_NARROW_FILTERS,
    TILED_MIN_WIDTH,
};
use super::unary::{affine_then, affine_then_in_place, AffineAct};
use super::{has_avx512, Isa};
use crate::error::{Error, Result};
use rayon::prelude::*;
use std::ops::Range;

/// Filters per panel (rows of a tile).
pub(super) const MR: usize = 8;
/// Vectors of positions per tile.
const NV: usize = 3;
/// Float32 lanes per vector.
pub(super) const LANES: usize = 16;
/// Positions per full tile.
pub(super) const TILE: usize = NV * LANES;
/// Rows of `k` per block at most: a tile's block of `B` (`KC × TILE` values, 24 KB) stays in
/// the core's L1 while every panel passes over it (256 rows measured no better).
const KC: usize = 128;

/// The weight in panels of [`MR`] filters, for [`tiled_product`].
pub type FilterPanels = Panels<MR>;

/// Whether an inference convolution runs with its weight packed ahead into [`FilterPanels`]
/// (through [`conv_forward_tiled`], or `kernels::conv_direct` where it [`runs_direct`]): one
/// group, and either
/// - a kernel window wider than 1×1 over output rows of at least [`TILED_MIN_WIDTH`]
///   positions, at batch 1 or into few filters: its columns are then gathered tile by tile
///   into L1 where the GEMM path writes the whole column matrix out and copies it once more
///   into its own panels. A batch with more filters stays on the GEMM, whose products span
///   a block of samples: at batch 16 SqueezeNet's first layer (3 → 64, 3×3/2 over 224²)
///   ran in 7.1 ms there against 10.4 tiled, 16 → 64 at 55² in 4.0 against 4.5, and
///   Inception v3 as a whole 8% faster; 128 → 32 at 56² (DenseNet) ran 23 ms tiled
///   against 26;
/// - a stride-1 window that [`runs_direct`] (`kernels::conv_direct` reads its columns
///   from a padded image: no gather), at any batch and width: it beat the GEMM at batch 16
///   too (16 → 64 3×3 at 55² 2.7 ms against 4.1, 48 → 64 5×5 at 35² 8.9 against 14.7) and
///   at 14² (128 → 32, 0.12 ms against 0.18);
/// - or a 1×1 window at batch 1 (see [`pointwise_tiles`]).
pub fn tiles_weight(g: &ConvGeom) -> bool {
    let shape = if g.is_pointwise() {
        g.batch == 1 && pointwise_tiles(g.filters, g.channels)
    } else {
        let few_filters = g.filters <= POINTWISE_TILED_NARROW_FILTERS;
        (g.output[2] >= TILED_MIN_WIDTH && (g.batch == 1 || few_filters)) || runs_direct(g)
    };
    g.groups == 1 && shape && !packs_weight(g) && g.col_rows() > 0
}

/// Whether an inference convolution whose input arrives through an [`InputMap`] runs tiled,
/// mapping each value as it gathers it: where [`tiles_weight`] puts it anyway, and 1×1
/// windows of one group with at most [`MAPPED_POINTWISE_MAX_WEIGHT`] weight values (the map
/// then costs a few percent of the product instead of a pass over the feature map:
/// DenseNet-121, every 1×1 layer after a Concat, BatchNorm and ReLU, ran 12% faster at batch
/// 1 and 16% at batch 16). Elsewhere the GEMM and packed kernels after the map's own pass
/// ran faster: ResNet-18 v2's 3×3 layers over 64² images at batch 16 took 23 ms tiled
/// against 18.
pub fn tiles_mapped(g: &ConvGeom) -> bool {
    let pointwise = g.is_pointwise() && g.weight_len() <= MAPPED_POINTWISE_MAX_WEIGHT;
    tiles_weight(g) || (pointwise && g.groups == 1 && g.col_rows() > 0)
}

/// Whether a 1×1 convolution of `channels → filters` at batch 1 runs tiled: when it
/// narrows to at most [`POINTWISE_TILED_NARROW_FILTERS`] filters from at least 4 inputs
/// each (MobileNet v2's and SqueezeNet's squeeze layers). The GEMM's register tile spans
/// more filters than these have and ran mostly empty: 128 → 16 at 55² took 75 µs tiled
/// against 140, 144 → 24 at 56² 82 against 106; MobileNet v2 1.0 at batch 1 ran about 4%
/// faster. Elsewhere the GEMM kept the lead or tied in whole networks, though some layers
/// ran faster tiled alone: few positions (960 → 160 at 7², where the GEMM packs the whole
/// weight per call: 55 µs against 115 alone, yet DenseNet's 7² layers ran 20% slower
/// tiled), widening layers over small images (96 → 576 at 14²), deep narrowing ones
/// (1024 → 128 at 14²: 0.19 ms for the GEMM against 0.26).
fn pointwise_tiles(filters: usize, channels: usize) -> bool {
    filters <= POINTWISE_TILED_NARROW_FILTERS && channels >= 4 * filters
}

/// [`conv_forward`] with the weight packed ahead ([`FilterPanels`] of `(filters, col_rows)`):
/// per sample, its columns (gathered tile by tile from the input, never written out) through
/// [`tiled_product`], which writes the output with the bias and runs `epilogue` over it in
/// cache. Samples run side by side when that pays, else each sample's passes split across
/// the pool. A geometry that [`runs_direct`] reads its columns straight from a padded image
/// instead (`kernels::conv_direct`).
pub fn conv_forward_tiled(
    g: &ConvGeom,
    x: &[f32],
    map: Option<&InputMap>,
    w: &FilterPanels,
    bias: Option<&[f32]>,
    y: &mut [f32],
    epilogue: Option<&(dyn Fn(&mut [f32]) + Sync)>,
) -> Result<()> {
    check_packed(g, x, w, bias, y)?;
    if let Some(m) = map {
        m.check(g.channels)?;
    }
    if runs_direct(g) {
        return conv_direct::forward(g, (x, map), w, bias, y, epilogue, Isa::detect());
    }
    let (c, f, l, il) = (g.channels, g.filters, g.out_len(), g.in_len());
    if f * l == 0 {
        return Ok(());
    }
    let taps = if g.is_pointwise() {
        Vec::new()
    } else {
        row_taps(g)
    };
    let sample = |(n, y_n): (usize, &mut [f32]), inner: bool| {
        let x_n = &x[n * c * il..(n + 1) * c * il];
        let cols = if g.is_pointwise() {
            Columns::Matrix { b: x_n, ldb: l }
        } else {
            Columns::Image {
                g,
                x: x_n,
                taps: &taps,
            }
        };
        let pr = Product {
            w,
            cols,
            map,
            l,
            bias,
        };
        tiled_product(&pr, epilogue, y_n, inner);
        Ok(())
    };
    g.per_sample(y, sample)
}

/// A per-channel map on a convolution's input, applied as the kernel reads it: `act(x ·
/// scale[c] + shift[c])`. This is an inference BatchNorm and the activation after it in
/// pre-activation networks (DenseNet, ResNet v2), whose own pass over the feature map would
/// otherwise write it out whole for the convolution to read back. The padding stays zero:
/// the convolution pads the map's output.
#[derive(Clone, Copy)]
pub struct InputMap<'a> {
    /// Per-channel factor.
    pub scale: &'a [f32],
    /// Per-channel offset, added after the factor.
    pub shift: &'a [f32],
    /// The activation after the affine map.
    pub act: AffineAct,
}

impl InputMap<'_> {
    /// The map has a factor and an offset for each of `channels` channels.
    pub(super) fn check(&self, channels: usize) -> Result<()> {
        if self.scale.len() != channels || self.shift.len() != channels {
            return Err(Error::invalid(
                "conv forward: input map",
                format!("{channels} factors and offsets, one per channel"),
                format!("{} and {}", self.scale.len(), self.shift.len()),
            ));
        }
        Ok(())
    }

    /// Maps `v`, values of channel `c`, in place.
    pub(super) fn apply(&self, c: usize, v: &mut [f32]) {
        affine_then_in_place(v, (self.scale[c], self.shift[c]), self.act);
    }

    /// `dst` = `src` (values of channel `c`) mapped.
    pub(super) fn apply_into(&self, c: usize, src: &[f32], dst: &mut [f32]) {
        affine_then(src, dst, (self.scale[c], self.shift[c]), self.act);
    }
}

/// Where the product's right operand `B (k × l)` comes from.
#[derive(Clone, Copy)]
enum Columns<'a> {
    /// A column matrix (for a 1×1 convolution, the input itself): element `(r, q)` at
    /// `b[r · ldb + q]`.
    Matrix {
        /// The values.
        b: &'a [f32],
        /// The distance between rows.
        ldb: usize,
    },
    /// One sample's image `(channels, input)` of convolution `g`, unfolded tile by tile as
    /// im2col would (row `c · kernel_len + tap`, zero in the padding): the column matrix is
    /// never written out, each tile's block of it is gathered straight into L1.
    Image {
        /// The convolution (its batch is not used).
        g: &'a ConvGeom,
        /// The sample's image.
        x: &'a [f32],
        /// Every row's tap ([`row_taps`] of `g`, the same for every sample).
        taps: &'a [RowTap],
    },
}

impl Columns<'_> {
    /// Whether the source holds `k` rows of `l` positions.
    fn holds(&self, k: usize, l: usize) -> bool {
        match *self {
            Columns::Matrix { b, ldb } => k == 0 || (ldb >= l && b.len() >= (k - 1) * ldb + l),
            Columns::Image { g, x, taps } => {
                g.col_rows() == k
                    && taps.len() == k
                    && g.out_len() == l
                    && x.len() >= g.channels * g.in_len()
            }
        }
    }
}

/// What gathering one row of an image's column matrix needs, worked out once per
/// convolution (the divisions cost more than a tile's row of multiply-adds at 7×7).
#[derive(Clone, Copy)]
struct RowTap {
    /// The row's channel.
    channel: usize,
    /// Offset of the row's channel plane in the image.
    plane: usize,
    /// The tap's dilated offsets along the three axes.
    off: [usize; 3],
    /// Output columns whose tap lands inside the input row.
    cols: (usize, usize),
}

fn row_taps(g: &ConvGeom) -> Vec<RowTap> {
    let [_, kh, kw] = g.kernel;
    (0..g.col_rows())
        .map(|r| {
            let (c, tap) = (r / g.kernel_len(), r % g.kernel_len());
            let (td, ty, tx) = (tap / (kh * kw), tap / kw % kh, tap % kw);
            let off = [td * g.dilate[0], ty * g.dilate[1], tx * g.dilate[2]];
            RowTap {
                channel: c,
                plane: c * g.in_len(),
                off,
                cols: valid_range(g.output[2], g.stride[2], off[2], g.pad[2], g.input[2]),
            }
        })
        .collect()
}

/// Copies rows `rows` of positions `q..q + n` of `cols` into `block` (rows [`TILE`] apart),
/// through the product's input map if it has one.
fn pack(pr: &Product, rows: Range<usize>, q: usize, n: usize, block: &mut [f32]) {
    match pr.cols {
        Columns::Matrix { b, ldb } => {
            for (r, dst) in rows.zip(block.chunks_exact_mut(TILE)) {
                let src = &b[r * ldb + q..r * ldb + q + n];
                match pr.map {
                    Some(m) => m.apply_into(r, src, &mut dst[..n]),
                    None => copy_short(&mut dst[..n], src),
                }
            }
        }
        Columns::Image { g, x, taps } => {
            let [_, oh, ow] = g.output;
            let at = (q / (oh * ow), q / ow % oh, q % ow);
            for (r, dst) in rows.zip(block.chunks_exact_mut(TILE)) {
                gather_row(g, (x, pr.map), &taps[r], at, &mut dst[..n]);
            }
        }
    }
}

/// One row of `g`'s column matrix of image `x` (through `map`, if any) from output position
/// `at` (depth, row, column) on, into `dst`: run by run along the output's rows (each a
/// strided run of one input row, zeros where the tap falls into the padding).
fn gather_row(
    g: &ConvGeom,
    (x, map): (&[f32], Option<&InputMap>),
    tap: &RowTap,
    at: (usize, usize, usize),
    dst: &mut [f32],
) {
    let [_, oh, ow] = g.output;
    let [id, ih, iw] = g.input;
    let (xlo, xhi) = tap.cols;
    // Input coordinate along `axis` of output coordinate `o`, if inside the input.
    let inside = |o: usize, axis: usize, size: usize| {
        (o * g.stride[axis] + tap.off[axis])
            .checked_sub(g.pad[axis])
            .filter(|&i| i < size)
    };
    let (mut od, mut oy, mut ox0) = at;
    let mut done = 0;
    while done < dst.len() {
        let len = (ow - ox0).min(dst.len() - done);
        let run = &mut dst[done..done + len];
        done += len;
        let (z, y) = (inside(od, 0, id), inside(oy, 1, ih));
        let (a, b) = (xlo.clamp(ox0, ox0 + len), xhi.clamp(ox0, ox0 + len));
        match (z, y) {
            (Some(iz), Some(iy)) if a < b => {
                run[..a - ox0].fill(0.0);
                run[b - ox0..].fill(0.0);
                let row = &x[tap.plane + (iz * ih + iy) * iw..][..iw];
                // In the input: valid_range put column a's tap inside it.
                let first = a * g.stride[2] + tap.off[2] - g.pad[2];
                let part = &mut run[a - ox0..b - ox0];
                match (g.stride[2], map) {
                    (1, Some(m)) => m.apply_into(tap.channel, &row[first..], part),
                    (1, None) => copy_short(part, &row[first..first + part.len()]),
                    (s, _) => {
                        if s == 2 {
                            copy_every_other(part, &row[first..]);
                        } else {
                            for (d, v) in part.iter_mut().zip(row[first..].iter().step_by(s)) {
                                *d = *v;
                            }
                        }
                        if let Some(m) = map {
                            m.apply(tap.channel, part);
                        }
                    }
                }
            }
            _ => run.fill(0.0),
        }
        ox0 = 0;
        oy += 1;
        if oy == oh {
            (oy, od) = (0, od + 1);
        }
    }
}

/// `dst[i] = src[2i]` (a stride-2 row of the column matrix: the first layers of most CNNs),
/// 16 values from two vector loads at a time where the CPU has AVX-512. `src` holds at least
/// `2·dst.len() − 1` values.
pub(super) fn copy_every_other(dst: &mut [f32], src: &[f32]) {
    assert!(dst.is_empty() || src.len() > 2 * (dst.len() - 1));
    #[cfg(target_arch = "x86_64")]
    if has_avx512() {
        // SAFETY: the CPU has AVX-512F; the lengths were checked above.
        return unsafe { avx512::copy_every_other(dst, src) };
    }
    // Whole vectors in AVX2 where the CPU has it, the rest one by one.
    #[cfg(target_arch = "x86_64")]
    let done = match super::has_avx2_fma() {
        // SAFETY: the CPU has AVX2; the lengths were checked above.
        true => unsafe { avx2::copy_every_other(dst, src) },
        false => 0,
    };
    #[cfg(not(target_arch = "x86_64"))]
    let done = 0;
    for (d, v) in dst[done..]
        .iter_mut()
        .zip(src[2 * done..].iter().step_by(2))
    {
        *d = *v;
    }
}

/// The operands of one product, shared by its parts.
struct Product<'a> {
    w: &'a FilterPanels,
    cols: Columns<'a>,
    /// The map `cols`' rows go through as they are packed.
    map: Option<&'a InputMap<'a>>,
    l: usize,
    bias: Option<&'a [f32]>,
}

/// `y (filters, l) = W · B (+ bias[f] per filter)`, then `epilogue` over each output row,
/// for `B (w.k() × l)` from `cols` and `y`'s rows `l` apart. With `split`, the positions (or,
/// when they are few, the panels) are shared among the pool's threads when the work is
/// large enough.
fn tiled_product(
    pr: &Product,
    epilogue: Option<&(dyn Fn(&mut [f32]) + Sync)>,
    y: &mut [f32],
    split: bool,
) {
    let (w, cols, l, bias) = (pr.w, pr.cols, pr.l, pr.bias);
    let (f, k) = (w.filters, w.k);
    assert!(
        l == 0
            || f == 0
            || (cols.holds(k, l) && y.len() >= f * l && bias.is_none_or(|b| b.len() >= f)),
        "tiled conv product: operands too short"
    );
    if l == 0 || f == 0 {
        return;
    }
    let (tiles, panels) = (l.div_ceil(TILE), w.panels());
    let threads = rayon::current_num_threads();
    let big = split && f * l * k.max(1) >= serial_below() * 4;
    // By positions when each thread gets two tiles or more (a thread with one full tile
    // against one with a sliver would wait), else by panels.
    let parts: Vec<(Range<usize>, Range<usize>)> = if big && tiles >= 2 * threads {
        (0..threads)
            .map(|i| (0..panels, i * tiles / threads..(i + 1) * tiles / threads))
            .collect()
    } else if big && panels >= threads {
        (0..threads)
            .map(|i| (i * panels / threads..(i + 1) * panels / threads, 0..tiles))
            .collect()
    } else {
        vec![(0..panels, 0..tiles)]
    };
    let yp = SendPtr(y.as_mut_ptr());
    let run = |(ps, ts): (Range<usize>, Range<usize>)| {
        // SAFETY: the parts cover disjoint (filters, positions) blocks of `y`, all inside it
        // (checked above).
        unsafe { product_part(pr, ps, ts, yp.get(), Isa::detect(), epilogue) };
    };
    if parts.len() > 1 {
        parts.into_par_iter().for_each(run);
    } else {
        parts.into_iter().for_each(run);
    }
}

/// Blocks of `k` of at most [`KC`] rows, sizes differing by at most one.
pub(super) fn k_blocks(k: usize) -> impl Iterator<Item = Range<usize>> {
    let count = k.div_ceil(KC).max(1);
    (0..count).map(move |i| i * k / count..(i + 1) * k / count)
}

/// One tile in the registers `isa` names, else in plain loops (also for kernels that build
/// their own blocks, `conv_winograd`).
///
/// # Safety
/// The CPU has `isa`; `tile_plain`'s contract, with `t.kc ≤ KC`, `t.n ≤ TILE`, `t.rows ≤ MR`.
pub(super) unsafe fn tile_on(isa: Isa, t: &Tile, y: *mut f32, ldy: usize) {
    assert!(
        t.kc <= KC && t.n <= TILE && t.rows <= MR,
        "conv tile: sizes"
    );
    // SAFETY: the caller's contract.
    unsafe {
        match isa {
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => avx512::tile(t, y, ldy),
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => avx2::tile(t, y, ldy),
            _ => tile_plain(t, y, ldy),
        }
    }
}

/// One tile's place: its panel's rows of the block, the packed block of `B`, the block's
/// length, the positions' count, and whether the block is the first (the sums start from 0)
/// or the last (the bias goes in) of `k`.
pub(super) struct Tile {
    pub(super) w: *const f32,
    pub(super) block: *const f32,
    pub(super) kc: usize,
    pub(super) n: usize,
    pub(super) rows: usize,
    pub(super) first: bool,
    pub(super) bias: Option<*const f32>,
}

/// Panels `ps` × position tiles `ts` of the product: for each block of `k` and each tile,
/// the tile's block of `B` is packed once (rows made contiguous, into L1), then every panel
/// passes over it — in the registers `isa` names, else in plain loops.
/// `epilogue` runs as the last block stores the outputs, over runs of tiles (see
/// [`epilogue_tiles`]) while they are in cache.
///
/// # Safety
/// `y` holds the `(filters, l)` output; the CPU has `isa`.
unsafe fn product_part(
    pr: &Product,
    ps: Range<usize>,
    ts: Range<usize>,
    y: *mut f32,
    isa: Isa,
    epilogue: Option<&(dyn Fn(&mut [f32]) + Sync)>,
) {
    let (f, k, l) = (pr.w.filters, pr.w.k, pr.l);
    let blocks: Vec<Range<usize>> = k_blocks(k).collect();
    let mut block = vec![0.0f32; KC * TILE];
    let rows = ps.start * MR..(ps.end * MR).min(f);
    let run = epilogue_tiles(rows.len());
    for (bi, kb) in blocks.iter().enumerate() {
        let last = bi + 1 == blocks.len();
        for t in ts.clone() {
            let q = t * TILE;
            let n = (l - q).min(TILE);
            pack(pr, kb.clone(), q, n, &mut block);
            for p in ps.clone() {
                let f0 = p * MR;
                let tile = Tile {
                    w: pr.w.data[(p * k + kb.start) * MR..].as_ptr(),
                    block: block.as_ptr(),
                    kc: kb.len(),
                    n,
                    rows: MR.min(f - f0),
                    first: bi == 0,
                    bias: pr.bias.filter(|_| last).map(|b| b[f0..].as_ptr()),
                };
                // SAFETY: the tile's outputs (rows f0.., positions q..q + n) lie inside `y`
                // (the caller's contract); its panel rows and block were built to size.
                unsafe { tile_on(isa, &tile, y.add(f0 * l + q), l) };
            }
            let first = run_ending_at(&ts, t, run).filter(|_| last);
            if let (Some(e), Some(first)) = (epilogue, first) {
                let (q0, q1) = (first * TILE, q + n);
                for fi in rows.clone() {
                    // SAFETY: row fi's positions q0..q1 belong to this part (the caller's
                    // contract), their tiles all stored.
                    e(unsafe { std::slice::from_raw_parts_mut(y.add(fi * l + q0), q1 - q0) });
                }
            }
        }
    }
}

/// Tiles of positions per run of an epilogue over `filters` output rows: as many as keep the
/// run's outputs within [`EPILOGUE_RUN_BYTES`], so they are still in L2 when it reads them. A
/// pass over a whole part afterwards read them back from memory (MobileNet v2's 16 → 96 at
/// 112², a 4.8 MB output, took half again as long); one call per tile and row ran most of
/// the activation's 48 values in its loop's scalar tail (3 → 8 filters 3×3/2 at batch 16:
/// 0.44 ms against 0.31).
pub(super) fn epilogue_tiles(filters: usize) -> usize {
    (EPILOGUE_RUN_BYTES / (TILE * filters.max(1) * std::mem::size_of::<f32>())).max(1)
}

/// When tile `t` of a part's tiles `ts` ends a run of `run` tiles (see [`epilogue_tiles`]),
/// or the part: the run's first tile.
pub(super) fn run_ending_at(ts: &Range<usize>, t: usize, run: usize) -> Option<usize> {
    let ends = (t + 1 - ts.start).is_multiple_of(run) || t + 1 == ts.end;
    ends.then(|| ts.start + (t - ts.start) / run * run)
}

/// See [`product_part`]: one tile in plain loops, each output summing over the block's
/// rows in order.
///
/// # Safety
/// The tile's rows `..t.rows` of `y` (`ldy` apart) hold its `t.n` positions.
unsafe fn tile_plain(t: &Tile, y: *mut f32, ldy: usize) {
    for i in 0..t.rows {
        for j in 0..t.n {
            // SAFETY: the caller's contract; the panel and block hold kc rows.
            unsafe {
                let out = &mut *y.add(i * ldy + j);
                let mut s = if t.first { 0.0 } else { *out };
                for r in 0..t.kc {
                    s += *t.w.add(r * MR + i) * *t.block.add(r * TILE + j);
                }
                *out = s + t.bias.map_or(0.0, |b| *b.add(i));
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
pub(super) mod avx512 {
    use super::{Tile, LANES, MR, TILE};
    use std::arch::x86_64::*;

    /// See `super::copy_every_other`: 32 values in, the even ones out; the loads and the
    /// store masked at the ends.
    ///
    /// # Safety
    /// The CPU supports AVX-512F; `src` holds at least `2·dst.len() − 1` values.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn copy_every_other(dst: &mut [f32], src: &[f32]) {
        let evens = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
        let upto = |n: usize| -> __mmask16 { ((1u32 << n.min(LANES)) - 1) as u16 };
        for (i, out) in dst.chunks_mut(LANES).enumerate() {
            let at = 2 * LANES * i;
            let left = src.len() - at;
            // SAFETY: the masks keep the loads inside `src` and the store inside `out`.
            unsafe {
                let lo = _mm512_maskz_loadu_ps(upto(left), src.as_ptr().add(at));
                let hi = _mm512_maskz_loadu_ps(
                    upto(left.saturating_sub(LANES)),
                    src.as_ptr().add(at + LANES.min(left)),
                );
                let v = _mm512_permutex2var_ps(lo, evens, hi);
                _mm512_mask_storeu_ps(out.as_mut_ptr(), upto(out.len()), v);
            }
        }
    }

    /// One row of `k` into a tile's sums: `acc[i][v] += w[i] · b[v·16..]` for the panel row's
    /// `MR` filters `w` and `V` vectors of positions from `b` (the step both the tiled and the
    /// direct kernels repeat over `k`).
    ///
    /// # Safety
    /// The CPU supports AVX-512F; `w` holds `MR` values and `b` `V · 16`.
    #[inline]
    #[target_feature(enable = "avx512f")]
    pub(in crate::kernels) unsafe fn panel_row<const V: usize>(
        acc: &mut [[__m512; V]; MR],
        w: *const f32,
        b: *const f32,
    ) {
        // SAFETY: the caller's contract.
        unsafe {
            let mut bv = [_mm512_setzero_ps(); V];
            for (v, x) in bv.iter_mut().enumerate() {
                *x = _mm512_loadu_ps(b.add(v * LANES));
            }
            for (i, row) in acc.iter_mut().enumerate() {
                let wv = _mm512_set1_ps(*w.add(i));
                for (a, &x) in row.iter_mut().zip(&bv) {
                    *a = _mm512_fmadd_ps(wv, x, *a);
                }
            }
        }
    }

    /// See `product_part`: one tile in registers, by its count of vectors.
    ///
    /// # Safety
    /// The CPU supports AVX-512F; `tile_plain`'s contract.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn tile(t: &Tile, y: *mut f32, ldy: usize) {
        let vectors = t.n.div_ceil(LANES);
        let rem = t.n - (vectors - 1) * LANES;
        let tail: __mmask16 = if rem == LANES {
            0xffff
        } else {
            (1u16 << rem) - 1
        };
        // SAFETY: forwarded.
        unsafe {
            match vectors {
                1 => tile_of::<1>(t, tail, y, ldy),
                2 => tile_of::<2>(t, tail, y, ldy),
                _ => tile_of::<3>(t, tail, y, ldy),
            }
        }
    }

    /// `MR` filters × `V` vectors of positions over the block's rows: starts from the
    /// output's partial sums unless first, adds the bias when given, stores rows `..rows`
    /// (the last vector under the `tail` mask).
    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn tile_of<const V: usize>(t: &Tile, tail: __mmask16, y: *mut f32, ldy: usize) {
        const { assert!(V * LANES <= TILE) };
        let mask = |v: usize| if v + 1 == V { tail } else { 0xffff };
        let mut acc = [[_mm512_setzero_ps(); V]; MR];
        // SAFETY (whole body): rows ..t.rows of the output hold the tile's positions under
        // the masks; the panel holds kc rows of MR values, the block kc rows of TILE.
        unsafe {
            if !t.first {
                for (i, row) in acc.iter_mut().enumerate().take(t.rows) {
                    for (v, a) in row.iter_mut().enumerate() {
                        *a = _mm512_maskz_loadu_ps(mask(v), y.add(i * ldy + v * LANES));
                    }
                }
            }
            for r in 0..t.kc {
                panel_row(&mut acc, t.w.add(r * MR), t.block.add(r * TILE));
            }
            for (i, row) in acc.iter().enumerate().take(t.rows) {
                let add = t
                    .bias
                    .map_or(_mm512_setzero_ps(), |b| _mm512_set1_ps(*b.add(i)));
                for (v, &a) in row.iter().enumerate() {
                    let at = y.add(i * ldy + v * LANES);
                    _mm512_mask_storeu_ps(at, mask(v), _mm512_add_ps(a, add));
                }
            }
        }
    }
}

/// The tile kernels in AVX2 registers, for CPUs without AVX-512. A tile (`MR` filters ×
/// `TILE` positions) would need 48 sums in 8-lane registers, three times the 16 there are, so
/// it runs as sub-tiles of [`avx2::SUB_ROWS`] filters × [`avx2::SUB_VECTORS`] vectors: 12
/// sums, 3 loads and a broadcast. Each output still sums over `k` in order, through the same
/// FMAs as the AVX-512 kernel: the same bits.
#[cfg(target_arch = "x86_64")]
pub(super) mod avx2 {
    use super::{Tile, KC, MR, TILE};
    use crate::kernels::lanes8::{first_lanes, store_first, LANES8};
    use crate::kernels::sub_tile_avx2;
    use std::arch::x86_64::*;

    /// See `super::copy_every_other`: 16 values in, the even 8 out, while whole vectors
    /// remain in both; returns how many values of `dst` it wrote (a multiple of 8).
    ///
    /// # Safety
    /// The CPU supports AVX2.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn copy_every_other(dst: &mut [f32], src: &[f32]) -> usize {
        let whole = (dst.len() / LANES8).min(src.len() / (2 * LANES8));
        for i in 0..whole {
            // SAFETY: vector i reads src[16i..16i + 16] and writes dst[8i..8i + 8], inside
            // both (`whole`).
            unsafe {
                let at = src.as_ptr().add(2 * LANES8 * i);
                let (lo, hi) = (_mm256_loadu_ps(at), _mm256_loadu_ps(at.add(LANES8)));
                // Evens of each 128-bit half: lo0 lo2 hi0 hi2 | lo4 lo6 hi4 hi6; then the
                // 64-bit pairs in order.
                let evens = _mm256_shuffle_ps::<0b10_00_10_00>(lo, hi);
                let v = _mm256_permute4x64_pd::<0b11_01_10_00>(_mm256_castps_pd(evens));
                _mm256_storeu_ps(dst.as_mut_ptr().add(LANES8 * i), _mm256_castpd_ps(v));
            }
        }
        whole * LANES8
    }

    /// Where each row of a tile's block starts (`r · TILE`), for [`sum_rows`].
    const BLOCK_ROWS: [usize; KC] = {
        let mut rows = [0; KC];
        let mut r = 0;
        while r < KC {
            rows[r] = r * TILE;
            r += 1;
        }
        rows
    };

    /// Filters per sub-tile.
    pub(in crate::kernels) const SUB_ROWS: usize = sub_tile_avx2::ROWS;
    /// Vectors of positions per sub-tile.
    pub(in crate::kernels) const SUB_VECTORS: usize = sub_tile_avx2::VECTORS;
    /// Positions per sub-tile.
    pub(in crate::kernels) const SUB_POSITIONS: usize = SUB_VECTORS * LANES8;

    /// One row of `k` into a sub-tile's sums: `acc[i][v] += w[i] · b[v·8..]` for
    /// `SUB_ROWS` filters `w` and `V` vectors of positions from `b`.
    ///
    /// # Safety
    /// The CPU supports AVX2 and FMA; `w` holds `SUB_ROWS` values and `b` `V · 8`.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn panel_row<const V: usize>(
        acc: &mut [[__m256; V]; SUB_ROWS],
        w: *const f32,
        b: *const f32,
    ) {
        // SAFETY: the caller's contract.
        unsafe {
            let mut bv = [_mm256_setzero_ps(); V];
            for (v, x) in bv.iter_mut().enumerate() {
                *x = _mm256_loadu_ps(b.add(v * LANES8));
            }
            for (i, row) in acc.iter_mut().enumerate() {
                let wv = _mm256_broadcast_ss(&*w.add(i));
                for (a, &x) in row.iter_mut().zip(&bv) {
                    *a = _mm256_fmadd_ps(wv, x, *a);
                }
            }
        }
    }

    /// The rows of `offsets` in order into a sub-tile's sums: row `r` is `w + r · MR`'s
    /// filters times the `V` vectors at `b + offsets[r]` (see [`panel_row`]). A full
    /// sub-tile runs `sub_tile_avx2`'s assembly loop, a narrower one (a tile's last
    /// positions) `panel_row`.
    ///
    /// # Safety
    /// The CPU supports AVX2 and FMA; every row's `w` holds `SUB_ROWS` values and `b`
    /// `V · 8` from its offset.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    pub(in crate::kernels) unsafe fn sum_rows<const V: usize>(
        acc: &mut [[__m256; V]; SUB_ROWS],
        w: *const f32,
        b: *const f32,
        offsets: &[usize],
    ) {
        // SAFETY: the caller's contract; with V = VECTORS, `acc` is a full sub-tile's 12
        // vectors in the assembly loop's order.
        unsafe {
            if V == SUB_VECTORS {
                sub_tile_avx2::offset_rows(acc.as_mut_ptr().cast(), false, w, MR, b, offsets);
            } else {
                for (r, &off) in offsets.iter().enumerate() {
                    panel_row(acc, w.add(r * MR), b.add(off));
                }
            }
        }
    }

    /// See `product_part`: one tile as sub-tiles, positions half by half (each half's block
    /// rows stay in L1 while both filter halves pass over them).
    ///
    /// # Safety
    /// The CPU supports AVX2 and FMA; `tile_plain`'s contract.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn tile(t: &Tile, y: *mut f32, ldy: usize) {
        const { assert!(2 * SUB_POSITIONS == TILE && 2 * SUB_ROWS == MR) };
        let vectors = t.n.div_ceil(LANES8);
        for half in 0..2 {
            let q = half * SUB_POSITIONS;
            for r0 in (0..t.rows).step_by(SUB_ROWS) {
                // SAFETY: forwarded; the sub-tile's rows and positions lie in the tile.
                unsafe {
                    match vectors.saturating_sub(half * SUB_VECTORS) {
                        0 => return,
                        1 => sub_tile::<1>(t, r0, q, y, ldy),
                        2 => sub_tile::<2>(t, r0, q, y, ldy),
                        _ => sub_tile::<3>(t, r0, q, y, ldy),
                    }
                }
            }
        }
    }

    /// Filters `r0..` (up to `SUB_ROWS`, the tile's rows) × `V` vectors of positions from
    /// `q` over the block's rows: starts from the output's partial sums unless first, adds
    /// the bias when given, stores the tile's positions only.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn sub_tile<const V: usize>(t: &Tile, r0: usize, q: usize, y: *mut f32, ldy: usize) {
        let rows = (t.rows - r0).min(SUB_ROWS);
        let left = t.n - q;
        let mask = |v: usize| first_lanes(left - v * LANES8);
        let mut acc = [[_mm256_setzero_ps(); V]; SUB_ROWS];
        // SAFETY (whole body): rows r0..r0 + rows of the output hold the sub-tile's positions
        // under the masks; the panel holds kc rows of MR values (r0 + SUB_ROWS ≤ MR), the
        // block kc rows of TILE (q + V · 8 ≤ TILE).
        unsafe {
            let y = y.add(r0 * ldy + q);
            if !t.first {
                for (i, row) in acc.iter_mut().enumerate().take(rows) {
                    for (v, a) in row.iter_mut().enumerate() {
                        *a = _mm256_maskload_ps(y.add(i * ldy + v * LANES8), mask(v));
                    }
                }
            }
            sum_rows(&mut acc, t.w.add(r0), t.block.add(q), &BLOCK_ROWS[..t.kc]);
            for (i, row) in acc.iter().enumerate().take(rows) {
                let add = t
                    .bias
                    .map_or(_mm256_setzero_ps(), |b| _mm256_set1_ps(*b.add(r0 + i)));
                for (v, &a) in row.iter().enumerate() {
                    let at = y.add(i * ldy + v * LANES8);
                    store_first(at, left - v * LANES8, _mm256_add_ps(a, add));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The stride-2 copy at every length around the vector edges, from sources as short as
    /// allowed (the last odd value missing) and longer.
    #[test]
    fn every_other_value_is_copied() {
        for n in 0..70 {
            for extra in [0, 1, 5] {
                let src: Vec<f32> = (0..(2 * n).max(1) - 1 + extra).map(|i| i as f32).collect();
                let mut dst = vec![f32::NAN; n + 3];
                copy_every_other(&mut dst[..n], &src);
                let want: Vec<f32> = (0..n).map(|i| (2 * i) as f32).collect();
                assert_eq!(dst[..n], want[..], "n={n} extra={extra}");
                assert!(dst[n..].iter().all(|v| v.is_nan()), "wrote past the end");
            }
        }
    }

    /// Every kernel the CPU has against direct sums: position tails of every vector count,
    /// filter tails, several k blocks, a row stride wider than the positions, bias, an
    /// epilogue, and a thread split (by positions and by panels), which keeps the bits.
    #[test]
    fn products_match_direct_sums() {
        for (f, k, l, extra) in [
            (1, 1, 1, 0),
            (5, 7, 3, 0),
            (8, 20, 16, 2),
            (13, 33, 47, 0),
            (16, 300, 49, 5),
            (50, 600, 100, 0),
            // every count of 8-lane vectors in a tile's halves, filter halves cut short
            (9, 70, 20, 1),
            (6, 130, 30, 0),
            (12, 40, 44, 0),
            // large enough to split: by positions, then by panels
            (64, 700, 200, 3),
            (200, 900, 40, 0),
            // the epilogue in runs of tiles (2 tiles a run at 600 filters), in parts
            (600, 3, 300, 1),
        ] {
            let ldb = l + extra;
            let w: Vec<f32> = (0..f * k)
                .map(|i| ((i * 37) % 19) as f32 / 7.0 - 1.3)
                .collect();
            let b: Vec<f32> = (0..k * ldb)
                .map(|i| ((i * 13) % 23) as f32 / 11.0 - 1.0)
                .collect();
            let bias: Vec<f32> = (0..f).map(|i| i as f32 * 0.25 - 2.0).collect();
            let packed = FilterPanels::new(&w, f, k);
            let want: Vec<f64> = (0..f * l)
                .map(|i| {
                    let (fi, q) = (i / l, i % l);
                    let s: f64 = (0..k)
                        .map(|r| f64::from(w[fi * k + r]) * f64::from(b[r * ldb + q]))
                        .sum();
                    (s + f64::from(bias[fi])).max(0.0) + 0.5
                })
                .collect();
            // Not idempotent: an output the epilogue passed over twice (or never) shows.
            let relu = |v: &mut [f32]| v.iter_mut().for_each(|x| *x = x.max(0.0) + 0.5);
            let mut fast = vec![f32::NAN; f * l];
            let cols = Columns::Matrix { b: &b, ldb };
            let pr = Product {
                w: &packed,
                cols,
                map: None,
                l,
                bias: Some(&bias),
            };
            tiled_product(&pr, Some(&relu), &mut fast, true);
            let (panels, tiles) = (packed.panels(), l.div_ceil(TILE));
            for isa in Isa::available() {
                let mut one = vec![f32::NAN; f * l];
                // SAFETY: `one` holds the (f, l) output; the CPU has `isa`.
                unsafe {
                    product_part(&pr, 0..panels, 0..tiles, one.as_mut_ptr(), isa, Some(&relu))
                };
                for (i, &want) in want.iter().enumerate() {
                    let got = one[i];
                    assert!(
                        (f64::from(got) - want).abs() <= 1e-4 * (1.0 + want.abs()),
                        "{isa:?} f{f} k{k} l{l} [{i}]: {got} vs {want}"
                    );
                }
                // The thread split leaves each output's sum as it was.
                if isa == Isa::detect() {
                    assert_eq!(
                        fast.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                        one.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                        "split f{f} k{k} l{l}"
                    );
                }
            }
        }
    }
}
