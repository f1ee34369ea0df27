//! Convolution products with the weight packed ahead into panels of 16 filters, each step
//! broadcasting one column value against a panel row: the few positions of a tile stay in
//! registers while the weight streams through.
//!
//! Two kinds of layer run here at inference. The deep layers of a CNN over one image have
//! few positions against a large weight: 512 filters × 4608 column rows over 2×2 positions
//! in ResNet-18 at 64², 1024 → 2048 over 2×2 in ResNet-50. A general GEMM packs the whole
//! weight on every call and then runs a handful of columns through it (25 GFLOP/s
//! measured); here the weight is packed once ([`PackedFilters`], kept by the executor
//! between passes) and streams through once. Mid-sized layers (7² to 40² per image, see
//! `tuning::CONV_GATHER_MAX_POSITIONS`) run here too: a block of the weight stays in L1
//! while every position passes over it. Over one image the threads split the filters, over
//! a batch the samples; either way they share nothing.
//!
//! No column matrix is written: the product reads each column value where it lies in the
//! (zero-padded) input ([`Gathered`]).

use super::conv::ConvGeom;
#[cfg(target_arch = "x86_64")]
use super::conv_packed_avx2 as avx2;
use super::par::serial_below;
use super::scratch::Scratch;
use super::tuning::{
    CONV_GATHER_FEW_FILTERS_POSITIONS, CONV_GATHER_MAX_POSITIONS, CONV_GATHER_MAX_WEIGHT,
    CONV_GATHER_MIN_FILTERS, CONV_GATHER_MIN_ROWS, CONV_GATHER_POINTWISE_BLOCK_POSITIONS,
    CONV_GATHER_POINTWISE_MIN_FILTERS, CONV_GATHER_POINTWISE_SMALL_IMAGE,
    CONV_GATHER_POINTWISE_SMALL_IMAGE_MIN_ROWS, CONV_PACKED_L2_WEIGHT, CONV_PACKED_MAX_POSITIONS,
    DIRECT_OWN_PAD_MAX, PACKED_SPLIT_WEIGHT,
};
use crate::error::{Error, Result};
use rayon::prelude::*;

/// Filters per panel: one AVX-512 vector of float32 (two AVX2 vectors).
pub(super) const LANES: usize = 16;

/// Sums per position of one tile: at most 3 panels.
pub(super) const ACC: usize = 3 * LANES;

/// A convolution weight `(filters, k)` (row-major, `k` = channels × kernel window) packed into
/// panels of `W` filters: element `(f, r)` at `(f / W) · k · W + r · W + f % W`, the last
/// panel zero-padded. Each product kernel reads a panel's row of `W` filters at a time.
#[derive(Clone, Debug)]
pub struct Panels<const W: usize> {
    pub(super) data: Vec<f32>,
    pub(super) filters: usize,
    pub(super) k: usize,
}

/// The weight in panels of [`LANES`] filters, for [`packed_product`].
pub type PackedFilters = Panels<LANES>;

impl<const W: usize> Panels<W> {
    /// Packs `w (filters, k)`. Panics if `w` is shorter than `filters · k`.
    pub fn new(w: &[f32], filters: usize, k: usize) -> Self {
        let panels = filters.div_ceil(W);
        let mut data = vec![0.0f32; panels * k * W];
        if k > 0 {
            for (p, panel) in data.chunks_exact_mut(k * W).enumerate() {
                for j in 0..(filters - p * W).min(W) {
                    let src = &w[(p * W + j) * k..][..k];
                    for (dst, &v) in panel[j..].iter_mut().step_by(W).zip(src) {
                        *dst = v;
                    }
                }
            }
        }
        Panels { data, filters, k }
    }

    /// Number of filters (rows of the weight).
    pub fn filters(&self) -> usize {
        self.filters
    }

    /// Values per filter (columns of the weight).
    pub fn k(&self) -> usize {
        self.k
    }

    pub(super) fn panels(&self) -> usize {
        self.filters.div_ceil(W)
    }
}

/// The operands of a convolution with its weight packed ahead: the lengths, and a weight of
/// the geometry's one group.
pub(super) fn check_packed<const W: usize>(
    g: &ConvGeom,
    x: &[f32],
    w: &Panels<W>,
    bias: Option<&[f32]>,
    y: &[f32],
) -> Result<()> {
    g.validate()?;
    let f = g.filters;
    g.check_len(
        "conv forward: data",
        x.len(),
        g.batch * g.channels * g.in_len(),
    )?;
    g.check_len("conv forward: output", y.len(), g.batch * f * g.out_len())?;
    if g.groups != 1 || w.filters() != f || w.k() != g.col_rows() {
        return Err(Error::invalid(
            "conv forward: packed weight",
            format!("{f} filters of {} values, one group", g.col_rows()),
            format!("{} filters of {} values", w.filters(), w.k()),
        ));
    }
    if let Some(b) = bias {
        g.check_len("conv forward: bias", b.len(), f)?;
    }
    Ok(())
}

/// Whether a convolution runs through [`conv_forward_packed`] when its weight can be packed
/// ahead (inference): one group, not depthwise, and either few output positions in all
/// (batch-1 deep layers, see [`CONV_PACKED_MAX_POSITIONS`] and [`CONV_PACKED_L2_WEIGHT`]), or
/// a mid-sized layer ([`mid_sized`]).
pub fn packs_weight(g: &ConvGeom) -> bool {
    let positions = g.batch * g.out_len();
    let few = positions <= CONV_PACKED_MAX_POSITIONS
        || (g.batch == 1
            && positions <= 2 * CONV_PACKED_MAX_POSITIONS
            && g.weight_len() <= CONV_PACKED_L2_WEIGHT);
    g.groups == 1 && !g.is_depthwise_2d() && (few || mid_sized(g)) && g.col_rows() > 0
}

/// A mid-sized output with enough filters and column rows (see
/// [`CONV_GATHER_MAX_POSITIONS`]; a 1×1 window only into [`CONV_GATHER_POINTWISE_MIN_FILTERS`]
/// filters or more, over a batch only for small blocks of samples, see
/// [`CONV_GATHER_POINTWISE_BLOCK_POSITIONS`], and then into fewer filters over tiny images,
/// see [`CONV_GATHER_POINTWISE_SMALL_IMAGE`]; fewer filters over a small image, see
/// [`CONV_GATHER_FEW_FILTERS_POSITIONS`]): over a batch, each thread takes a block of samples
/// through every panel.
fn mid_sized(g: &ConvGeom) -> bool {
    let block = g.batch.div_ceil(rayon::current_num_threads()) * g.out_len();
    let small_batch = g.is_pointwise()
        && g.batch > 1
        && g.out_len() <= CONV_GATHER_POINTWISE_SMALL_IMAGE
        && g.col_rows() >= CONV_GATHER_POINTWISE_SMALL_IMAGE_MIN_ROWS;
    let pointwise = (g.filters >= CONV_GATHER_POINTWISE_MIN_FILTERS || small_batch)
        && (g.batch == 1 || block <= CONV_GATHER_POINTWISE_BLOCK_POSITIONS);
    (!g.is_pointwise() || pointwise)
        && g.out_len() <= CONV_GATHER_MAX_POSITIONS
        && (g.filters >= CONV_GATHER_MIN_FILTERS
            || (g.batch == 1 && g.out_len() <= CONV_GATHER_FEW_FILTERS_POSITIONS))
        && (g.col_rows() >= CONV_GATHER_MIN_ROWS || small_batch)
        && g.weight_len() <= CONV_GATHER_MAX_WEIGHT
}

/// [`conv_forward`] with the weight packed ahead ([`PackedFilters`] of `(filters, col_rows)`):
/// the product reads its columns straight from the input ([`Gathered`]; zero-padded first
/// when the geometry pads) and writes the output in place with the bias; `epilogue` runs
/// over each panel's filters as they are done, while they are in cache. For few positions
/// against a large weight, and mid-sized layers (see [`packs_weight`]).
pub fn conv_forward_packed(
    g: &ConvGeom,
    x: &[f32],
    w: &PackedFilters,
    bias: Option<&[f32]>,
    y: &mut [f32],
    epilogue: Option<&(dyn Fn(&mut [f32]) + Sync)>,
) -> Result<()> {
    check_packed(g, x, w, bias, y)?;
    let (f, l) = (g.filters, g.out_len());
    if g.batch * l == 0 || f == 0 {
        return Ok(());
    }
    let threads = rayon::current_num_threads();
    if g.batch > 1 && threads > 1 && mid_sized(g) {
        // A block of samples per thread, each through every panel: the threads share
        // nothing, and each sample's product is the one-image product's.
        let per = g.batch.div_ceil(threads);
        let (xs, ys) = (g.channels * g.in_len(), f * l);
        return y
            .par_chunks_mut(per * ys)
            .zip(x.par_chunks(per * xs))
            .try_for_each(|(y, x)| {
                let part = ConvGeom {
                    batch: y.len() / ys,
                    ..*g
                };
                packed_samples(&part, x, w, bias, y, epilogue, false)
            });
    }
    packed_samples(g, x, w, bias, y, epilogue, true)
}

/// [`conv_forward_packed`] over `g`'s samples at once, the panels split among the threads
/// when `split` and the work is large enough.
fn packed_samples(
    g: &ConvGeom,
    x: &[f32],
    w: &PackedFilters,
    bias: Option<&[f32]>,
    y: &mut [f32],
    epilogue: Option<&(dyn Fn(&mut [f32]) + Sync)>,
    split: bool,
) -> Result<()> {
    let (f, l) = (g.filters, g.out_len());
    let positions = g.batch * l;
    let cols = Gathered::new(g);
    let out = OutLayout { filters: f, l };
    let yp = SendPtr(y.as_mut_ptr());
    let padded = g.batch * g.channels * padded_dims(g).iter().product::<usize>();
    let pads = g.pad != [0; 3];
    if cols.reach() >= if pads { padded } else { x.len() } {
        return Err(Error::Msg(format!(
            "internal: packed conv: columns past the input of {g:?}"
        )));
    }
    let panels = w.panels();
    let threads = rayon::current_num_threads();
    let (parts, by_positions) = match panel_parts(w, positions, split) {
        // Too few panels for every thread over one image: the threads take runs of
        // positions through every panel instead.
        p if p < threads && g.batch == 1 && splits_positions(w, positions, split) => {
            (threads, true)
        }
        p => (p, false),
    };
    // The epilogue over filters f0..f1 of every sample's positions q0..q1 once they are
    // written.
    let done = |(f0, f1): (usize, usize), (q0, q1): (usize, usize)| {
        let Some(e) = epilogue else { return };
        // SAFETY (each run): these outputs were written by this part alone, inside `y` (of
        // g's output size: checked by `conv_forward_packed`).
        let run = |start: usize, len: usize| {
            e(unsafe { std::slice::from_raw_parts_mut(yp.get().add(start), len) })
        };
        for n in 0..g.batch {
            let rows = (n * f + f0) * l;
            if (q0, q1) == (0, l) {
                run(rows, (f1 - f0) * l);
            } else {
                (0..f1 - f0).for_each(|i| run(rows + i * l + q0, q1 - q0));
            }
        }
    };
    let run = |part: usize, src: &[f32]| {
        // SAFETY (both): each part writes its own filters' or positions' outputs only,
        // inside `y`; every column offset lies inside `src` (checked above), and the panels
        // were built to size.
        if by_positions {
            // One image: position q's outputs are at q + f·l, so a run from q0 is the
            // product over positions 0.. of the columns and the output shifted by q0.
            let (q0, q1) = (part * positions / parts, (part + 1) * positions / parts);
            let shifted = Shifted { cols: &cols, q0 };
            let done = |f0, f1| done((f0, f1), (q0, q1));
            let y = yp.get().wrapping_add(q0);
            unsafe { product_panels(w, 0..panels, src, &shifted, q1 - q0, out, bias, y, &done) };
        } else {
            let (p0, p1) = (part * panels / parts, (part + 1) * panels / parts);
            let done = |f0, f1| done((f0, f1), (0, l));
            unsafe { product_panels(w, p0..p1, src, &cols, positions, out, bias, yp.get(), &done) };
        }
    };
    if !pads {
        each_part(parts, |part| run(part, x));
    } else if parts > 1 && padded <= DIRECT_OWN_PAD_MAX {
        // Each part pads its own copy, in its own core's cache, as the direct path does
        // (`conv_direct`): reading one copy from the other core's cache cost more than
        // padding twice.
        each_part(parts, |part| {
            let mut xp = Scratch::take(padded);
            pad_input(g, x, &mut xp);
            run(part, &xp)
        });
    } else {
        let mut xp = Scratch::take(padded);
        pad_input(g, x, &mut xp);
        each_part(parts, |part| run(part, &xp));
    }
    Ok(())
}

/// Runs `part(i)` for each of `parts` parts: side by side on the pool, or on the caller
/// alone for one part.
fn each_part(parts: usize, part: impl Fn(usize) + Sync + Send) {
    if parts > 1 {
        (0..parts).into_par_iter().for_each(part);
    } else {
        part(0);
    }
}

/// The sizes of `g`'s input with its padding on both sides of each axis.
pub(super) fn padded_dims(g: &ConvGeom) -> [usize; 3] {
    std::array::from_fn(|i| g.input[i] + 2 * g.pad[i])
}

/// Writes `x (batch, channels, input)` into `xp` with `g.pad` zeros on both sides of each
/// spatial axis ([`padded_dims`]).
pub(super) fn pad_input(g: &ConvGeom, x: &[f32], xp: &mut [f32]) {
    let [_, hp, wp] = padded_dims(g);
    let [id, ih, iw] = g.input;
    let [pd, ph, pw] = g.pad;
    let planes = x.chunks_exact(g.in_len().max(1));
    for (src, dst) in planes.zip(xp.chunks_exact_mut(padded_dims(g).iter().product())) {
        for (i, row) in dst.chunks_exact_mut(wp).enumerate() {
            let z = (i / hp).checked_sub(pd).filter(|&z| z < id);
            let yy = (i % hp).checked_sub(ph).filter(|&yy| yy < ih);
            let (Some(z), Some(yy)) = (z, yy) else {
                row.fill(0.0);
                continue;
            };
            row[..pw].fill(0.0);
            row[pw..pw + iw].copy_from_slice(&src[(z * ih + yy) * iw..][..iw]);
            row[pw + iw..].fill(0.0);
        }
    }
}

/// Where a product reads its columns `B (k × positions)`: value `(r, q)` at
/// `src[row(r) + at(q)]`, `src` the slice the caller checked these offsets against.
pub(super) trait Columns: Sync {
    /// The offset of row `r` (a channel and kernel tap).
    fn row(&self, r: usize) -> usize;
    /// The offset of position `q` (a sample and output position).
    fn at(&self, q: usize) -> usize;
}

/// A column matrix, or the input of a fully-connected layer: rows `ldb` apart.
#[derive(Clone, Copy)]
pub(super) struct Matrix {
    pub(super) ldb: usize,
}

impl Columns for Matrix {
    #[inline(always)]
    fn row(&self, r: usize) -> usize {
        r * self.ldb
    }

    #[inline(always)]
    fn at(&self, q: usize) -> usize {
        q
    }
}

/// A convolution's columns read where they lie in its (padded) input, so no column matrix is
/// written: row `(c, tap)` is channel `c`'s plane shifted by the tap, position `(n, o)` is
/// sample `n`'s image at output position `o`'s window corner, any stride or dilation.
pub(super) struct Gathered {
    rows: Vec<usize>,
    at: Vec<usize>,
}

impl Gathered {
    /// The offsets of `g`'s columns in its input padded to [`padded_dims`] (the input itself
    /// when `g` does not pad), in im2col's row order (the weight's). Built on every call, so
    /// without divisions or regrowth: at batch 1 a small layer's call spent as long here as
    /// in half its product.
    pub(super) fn new(g: &ConvGeom) -> Self {
        let [_, hp, wp] = padded_dims(g);
        let plane = padded_dims(g).iter().product::<usize>();
        let ([kd, kh, kw], [dd, dh, dw]) = (g.kernel, g.dilate);
        let ([od, oh, ow], [sd, sh, sw]) = (g.output, g.stride);
        let mut taps = Vec::with_capacity(kd * kh * kw);
        for a in 0..kd {
            for b in 0..kh {
                taps.extend((0..kw).map(|e| (a * dd * hp + b * dh) * wp + e * dw));
            }
        }
        let mut rows = Vec::with_capacity(g.channels * taps.len());
        for c in 0..g.channels {
            rows.extend(taps.iter().map(|t| c * plane + t));
        }
        let mut corners = Vec::with_capacity(od * oh * ow);
        for z in 0..od {
            for y in 0..oh {
                corners.extend((0..ow).map(|x| (z * sd * hp + y * sh) * wp + x * sw));
            }
        }
        let image = g.channels * plane;
        let mut at = Vec::with_capacity(g.batch * corners.len());
        for n in 0..g.batch {
            at.extend(corners.iter().map(|o| n * image + o));
        }
        Gathered { rows, at }
    }

    /// The largest offset any value is read at (both offset lists grow along their order).
    fn reach(&self) -> usize {
        let last = |v: &[usize]| v.last().copied().unwrap_or(0);
        last(&self.rows) + last(&self.at)
    }
}

impl Columns for Gathered {
    #[inline(always)]
    fn row(&self, r: usize) -> usize {
        self.rows[r]
    }

    #[inline(always)]
    fn at(&self, q: usize) -> usize {
        self.at[q]
    }
}

/// [`Gathered`] columns from position `q0` on.
pub(super) struct Shifted<'a> {
    pub(super) cols: &'a Gathered,
    pub(super) q0: usize,
}

impl Columns for Shifted<'_> {
    #[inline(always)]
    fn row(&self, r: usize) -> usize {
        self.cols.row(r)
    }

    #[inline(always)]
    fn at(&self, q: usize) -> usize {
        self.cols.at(self.q0 + q)
    }
}

/// Where the product's outputs go: position `p` of the `positions` columns is sample `p / l`,
/// offset `p % l`, and filter `f`'s value for it lands at `(p / l) · filters · l + f · l + p % l`
/// of the `(samples, filters, l)` output (the NC(D)HW layout).
#[derive(Clone, Copy)]
pub(super) struct OutLayout {
    pub(super) filters: usize,
    pub(super) l: usize,
}

impl OutLayout {
    pub(super) fn base(&self, p: usize) -> usize {
        p / self.l * self.filters * self.l + p % self.l
    }
}

/// `y = W · B (+ bias[f] per filter)` for `B (w.k() × positions)`, element `(r, p)` at
/// `b[r · ldb + p]` (a column matrix, or for a 1×1 convolution the input itself), written into
/// `y (samples, filters, l)` with `positions = samples · l` (see [`OutLayout`]). With `split`,
/// the filters are shared among the pool's threads when the work is large enough. The
/// products sum over `r` in order for every output, whatever the split.
#[allow(clippy::too_many_arguments)]
pub fn packed_product(
    w: &PackedFilters,
    b: &[f32],
    ldb: usize,
    positions: usize,
    l: usize,
    bias: Option<&[f32]>,
    y: &mut [f32],
    split: bool,
) {
    let (f, k) = (w.filters, w.k);
    assert!(
        positions == 0
            || (l > 0
                && positions.is_multiple_of(l)
                && (k == 0 || b.len() >= (k - 1) * ldb + positions)
                && y.len() >= positions * f
                && bias.is_none_or(|b| b.len() >= f)),
        "packed conv product: operands too short"
    );
    if positions == 0 || f == 0 {
        return;
    }
    let out = OutLayout { filters: f, l };
    let panels = w.panels();
    // Parts of equal numbers of panels (a part's last tiles may then take fewer panels at
    // once; the sums are the same). Parts of whole groups of 3 left one thread up to 3 panels
    // more: ResNet's 512 filters (32 panels) split 17 / 15, 128 filters 5 / 3.
    let parts = panel_parts(w, positions, split);
    let yp = SendPtr(y.as_mut_ptr());
    let run = |part: usize| {
        let (p0, p1) = (part * panels / parts, (part + 1) * panels / parts);
        // SAFETY: part `part` writes the outputs of filters p0·16.. only (disjoint parts), all
        // inside `y` (checked above); `b` and the panels were checked or built to size.
        unsafe {
            product_panels(
                w,
                p0..p1,
                b,
                &Matrix { ldb },
                positions,
                out,
                bias,
                yp.get(),
                &|_, _| {},
            )
        };
    };
    each_part(parts, run);
}

/// How many parts (of equal numbers of panels) a product over `positions` shares among the
/// pool's threads, with `split`: two panels a part at least, since a part of one runs tiles
/// of one panel, whose loads outweigh their arithmetic (DenseNet's 128 → 32 3×3 at 7²: 58 µs
/// split in two, 46 on one thread).
fn panel_parts(w: &PackedFilters, positions: usize, split: bool) -> usize {
    let threads = rayon::current_num_threads();
    if worth_splitting(w, positions, split) {
        threads.min(w.panels() / 2).max(1)
    } else {
        1
    }
}

/// Whether a product over one image's `positions` is worth splitting among the pool's
/// threads by positions (see `packed_samples`): with `split`, as much work as
/// [`panel_parts`] splits, and 16 positions a thread at least.
fn splits_positions(w: &PackedFilters, positions: usize, split: bool) -> bool {
    worth_splitting(w, positions, split) && positions >= 16 * rayon::current_num_threads()
}

/// Whether a product over `positions` has the work to share among the pool's threads, with
/// `split`: enough multiply-adds, or a weight of [`PACKED_SPLIT_WEIGHT`] values to stream.
fn worth_splitting(w: &PackedFilters, positions: usize, split: bool) -> bool {
    let weight = w.filters * w.k;
    split && (positions * weight >= serial_below() * 4 || weight >= PACKED_SPLIT_WEIGHT)
}

/// A raw pointer the parts share; each writes its own filters' (or positions') outputs.
#[derive(Clone, Copy)]
pub(super) struct SendPtr(pub(super) *mut f32);
// SAFETY: only used to hand disjoint outputs of one buffer to scoped parallel parts.
unsafe impl Send for SendPtr {}
unsafe impl Sync for SendPtr {}
impl SendPtr {
    pub(super) fn get(self) -> *mut f32 {
        self.0
    }
}

/// The outputs of panels `panels` for every position: AVX-512 tiles when the CPU has them,
/// else AVX2 + FMA tiles (`conv_packed_avx2`) when it has those, else plain loops.
/// `done(f0, f1)` is called once filters `f0..f1` are written for every position.
///
/// # Safety
/// `y` holds the `(samples, filters, l)` output; `cols` reads `k` rows of `positions` values
/// inside `b`.
#[allow(clippy::too_many_arguments)]
unsafe fn product_panels<C: Columns>(
    w: &PackedFilters,
    panels: std::ops::Range<usize>,
    b: &[f32],
    cols: &C,
    positions: usize,
    out: OutLayout,
    bias: Option<&[f32]>,
    y: *mut f32,
    done: &(dyn Fn(usize, usize) + Sync),
) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx512f") {
        // SAFETY: the CPU has AVX-512F; the caller's contract covers the operands.
        unsafe { avx512::product(w, panels, b, cols, positions, out, bias, y, done) };
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if super::has_avx2_fma() {
        // SAFETY: the CPU has AVX2 and FMA; the caller's contract covers the operands.
        unsafe { avx2::product(w, panels, b, cols, positions, out, bias, y, done) };
        return;
    }
    // SAFETY: the caller's contract.
    unsafe { product_plain(w, panels, b, cols, positions, out, bias, y, done) };
}

/// Writes a tile's sums `acc[r][j]` (position `q + r`, filter `f0 + j`, `width` filters) into
/// the output, adding the bias.
///
/// # Safety
/// The positions and filters lie inside the output `y` describes (filters < out.filters).
pub(super) unsafe fn store(
    acc: &[[f32; ACC]],
    q: usize,
    f0: usize,
    width: usize,
    out: OutLayout,
    bias: Option<&[f32]>,
    y: *mut f32,
) {
    let width = width.min(out.filters - f0);
    // Run by run of positions within one sample, filter by filter: each filter's outputs for
    // a run are contiguous.
    let mut r = 0;
    while r < acc.len() {
        let p = q + r;
        let run = (out.l - p % out.l).min(acc.len() - r);
        let base = out.base(p);
        for j in 0..width {
            let f = f0 + j;
            let b = bias.map_or(0.0, |b| b[f]);
            // SAFETY: filter f's outputs for positions p..p + run are inside the output (the
            // caller's contract), and only this call writes them.
            let dst = unsafe { std::slice::from_raw_parts_mut(y.add(base + f * out.l), run) };
            for (d, sums) in dst.iter_mut().zip(&acc[r..r + run]) {
                *d = sums[j] + b;
            }
        }
        r += run;
    }
}

/// Plain loops in the tiles' order (each output sums over `r` in order).
///
/// # Safety
/// See [`product_panels`].
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn product_plain<C: Columns>(
    w: &PackedFilters,
    panels: std::ops::Range<usize>,
    b: &[f32],
    cols: &C,
    positions: usize,
    out: OutLayout,
    bias: Option<&[f32]>,
    y: *mut f32,
    done: &(dyn Fn(usize, usize) + Sync),
) {
    let k = w.k;
    for p in panels {
        let panel = &w.data[p * k * LANES..(p + 1) * k * LANES];
        for q in 0..positions {
            let mut acc = [[0.0f32; ACC]; 1];
            for (r, wrow) in panel.chunks_exact(LANES).enumerate() {
                let x = b[cols.row(r) + cols.at(q)];
                acc[0][..LANES]
                    .iter_mut()
                    .zip(wrow)
                    .for_each(|(s, &v)| *s += x * v);
            }
            // SAFETY: the caller's contract.
            unsafe { store(&acc, q, p * LANES, LANES, out, bias, y) };
        }
        done(p * LANES, ((p + 1) * LANES).min(w.filters));
    }
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use super::{store, Columns, OutLayout, PackedFilters, ACC, LANES};
    use std::arch::x86_64::*;

    /// Rows of `k` per block: a block of 3 panels (12 KB) stays in the core's L1 cache while
    /// every tile of positions runs over it, so the weight streams in from memory or L3 once
    /// however many positions there are.
    const KC: usize = 64;

    /// Rows of a panel ahead of the current one that the first tile of a block asks the
    /// cache for: each block starts a new 4 KB page of every panel, where the hardware's
    /// stream prefetcher stops and must find the stream again.
    const FETCH_ROWS: usize = 32;

    /// Positions per tile: with 3 panels, 21 sums, 3 panel rows and 7 broadcast values fill
    /// the 32 vector registers. With 8 the compiler kept some sums on the stack, reloading and
    /// storing them on every row (SqueezeNet's 64 → 256 3×3 at 13²: 174 µs against 150).
    const MR: usize = 7;

    /// One tile: `MR` consecutive positions `q..` against `NV` consecutive panels (`w`, `ps`
    /// apart) over rows `k0..k0 + kc` of the columns (panel rows from `w` on), the `MR · NV`
    /// accumulators in registers: per row NV panel loads and MR broadcasts feed MR · NV FMAs.
    /// The sums start from `acc` (or 0 when `fresh`) and go back to it, so a product over
    /// several blocks of rows adds them in order, as one pass over all rows would.
    #[inline]
    #[target_feature(enable = "avx512f")]
    #[allow(clippy::too_many_arguments)]
    unsafe fn tile<C: Columns, const MR: usize, const NV: usize, const FETCH: bool>(
        (b, cols): (*const f32, &C),
        (k0, q): (usize, usize),
        kc: usize,
        w: *const f32,
        ps: usize,
        acc: &mut [[f32; ACC]; MR],
        fresh: bool,
    ) {
        let mut sums = [[_mm512_setzero_ps(); NV]; MR];
        if !fresh {
            for (row, sum) in acc.iter().zip(sums.iter_mut()) {
                for (v, s) in sum.iter_mut().enumerate() {
                    // SAFETY: acc rows hold 3 · LANES ≥ NV · LANES values.
                    *s = unsafe { _mm512_loadu_ps(row.as_ptr().add(v * LANES)) };
                }
            }
        }
        // SAFETY (the pointers and the loads through them): the caller's contract puts every
        // column value inside `b`.
        let at: [*const f32; MR] = std::array::from_fn(|i| unsafe { b.add(cols.at(q + i)) });
        for r in 0..kc {
            if FETCH {
                for v in 0..NV {
                    // A hint only: the address may lie past the weight, which is never read.
                    let ahead = w.wrapping_add(v * ps + (r + FETCH_ROWS) * LANES);
                    _mm_prefetch::<_MM_HINT_T0>(ahead as *const i8);
                }
            }
            let mut wv = [_mm512_setzero_ps(); NV];
            for (v, x) in wv.iter_mut().enumerate() {
                // SAFETY: panel v holds kc rows of LANES values from w.
                *x = unsafe { _mm512_loadu_ps(w.add(v * ps + r * LANES)) };
            }
            let off = cols.row(k0 + r);
            for (i, row) in sums.iter_mut().enumerate() {
                // SAFETY: see `at`.
                let x = _mm512_set1_ps(unsafe { *at[i].add(off) });
                for (s, &y) in row.iter_mut().zip(&wv) {
                    *s = _mm512_fmadd_ps(x, y, *s);
                }
            }
        }
        for (row, sum) in acc.iter_mut().zip(&sums) {
            for (v, &s) in sum.iter().enumerate() {
                // SAFETY: as above.
                unsafe { _mm512_storeu_ps(row.as_mut_ptr().add(v * LANES), s) };
            }
        }
    }

    /// Every tile of positions (`MR` at a time, then the rest) against the `NV` panels from `p`,
    /// block of rows by block of rows; `acc` holds a row of sums per position.
    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn panels<C: Columns, const NV: usize>(
        w: &PackedFilters,
        p: usize,
        (b, cols): (*const f32, &C),
        positions: usize,
        acc: &mut [[f32; ACC]],
    ) {
        let (k, ps) = (w.k, w.k * LANES);
        // SAFETY: panel p + NV - 1 exists (the caller's contract).
        let wp = unsafe { w.data.as_ptr().add(p * ps) };
        for k0 in (0..k).step_by(KC) {
            let kc = KC.min(k - k0);
            let fresh = k0 == 0;
            let bc = (b, cols);
            // SAFETY (all tiles): rows k0..k0 + kc of the panels and of the columns exist,
            // and the tiles' positions are columns.
            unsafe {
                let wk = wp.add(k0 * LANES);
                let (tiles, rest) = acc[..positions].as_chunks_mut::<MR>();
                let q = tiles.len() * MR;
                for (t, a) in tiles.iter_mut().enumerate() {
                    // The first tile of a block brings its weight in (and fetches ahead of
                    // it); the others find it in L1.
                    match t {
                        0 => tile::<C, MR, NV, true>(bc, (k0, 0), kc, wk, ps, a, fresh),
                        _ => tile::<C, MR, NV, false>(bc, (k0, t * MR), kc, wk, ps, a, fresh),
                    }
                }
                // The last positions, fewer than MR, as a tile of their own size.
                macro_rules! last {
                    ($($n:literal)*) => {
                        match rest.len() {
                            $($n => if let Some(a) = rest.first_chunk_mut::<$n>() {
                                tile::<C, $n, NV, true>(bc, (k0, q), kc, wk, ps, a, fresh)
                            },)*
                            _ => {}
                        }
                    };
                }
                last!(1 2 3 4 5 6);
            }
        }
    }

    /// See `product_panels`. Tiles of `MR` positions × 3 panels. Panels go 3 at a time, the
    /// rest 2 or 1 at once, each group's weight a block of rows at a time through every tile of positions.
    ///
    /// # Safety
    /// The CPU supports AVX-512F, and `product_panels`' contract.
    #[target_feature(enable = "avx512f")]
    #[allow(clippy::too_many_arguments)]
    pub(super) unsafe fn product<C: Columns>(
        w: &PackedFilters,
        panels_range: std::ops::Range<usize>,
        b: &[f32],
        cols: &C,
        positions: usize,
        out: OutLayout,
        bias: Option<&[f32]>,
        y: *mut f32,
        done: &(dyn Fn(usize, usize) + Sync),
    ) {
        let bc = (b.as_ptr(), cols);
        let mut acc = vec![[0.0f32; ACC]; positions];
        let mut p = panels_range.start;
        while p < panels_range.end {
            // Four panels left go as two pairs, not three and a single.
            let nv = match panels_range.end - p {
                4 => 2,
                left => left.min(3),
            };
            // SAFETY: panels p..p + nv exist, the positions are columns of b (the caller's
            // contract), acc holds a row per position, and the stores stay in the output.
            unsafe {
                match nv {
                    3 => panels::<C, 3>(w, p, bc, positions, &mut acc),
                    2 => panels::<C, 2>(w, p, bc, positions, &mut acc),
                    _ => panels::<C, 1>(w, p, bc, positions, &mut acc),
                }
                store(&acc, 0, p * LANES, nv * LANES, out, bias, y);
            }
            done(p * LANES, ((p + nv) * LANES).min(w.filters));
            p += nv;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Both kernels against direct sums over every position remainder, panel remainder,
    /// several samples, a column stride wider than the positions, and a thread split.
    #[test]
    fn products_match_direct_sums() {
        for (f, k, samples, l, extra) in [
            (5, 7, 1, 3, 0),
            (16, 20, 1, 4, 2),
            (50, 33, 2, 9, 0),
            (97, 64, 3, 4, 5),
            (48, 130, 1, 17, 0),
            // large enough to split among threads
            (97, 600, 3, 4, 1),
        ] {
            let positions = samples * l;
            let ldb = positions + extra;
            let w: Vec<f32> = (0..f * k)
                .map(|i| ((i * 37) % 19) as f32 / 7.0 - 1.3)
                .collect();
            let b: Vec<f32> = (0..k * ldb)
                .map(|i| ((i * 13) % 23) as f32 / 11.0 - 1.0)
                .collect();
            let bias: Vec<f32> = (0..f).map(|i| i as f32 * 0.25 - 2.0).collect();
            let packed = PackedFilters::new(&w, f, k);
            let out = OutLayout { filters: f, l };
            let mut want = vec![0.0f64; positions * f];
            for fi in 0..f {
                for q in 0..positions {
                    let s: f64 = (0..k)
                        .map(|r| f64::from(w[fi * k + r]) * f64::from(b[r * ldb + q]))
                        .sum();
                    want[out.base(q) + fi * l] = s + f64::from(bias[fi]);
                }
            }
            let mut fast = vec![f32::NAN; positions * f];
            packed_product(&packed, &b, ldb, positions, l, Some(&bias), &mut fast, true);
            let mut plain = vec![f32::NAN; positions * f];
            // SAFETY: the operands have the sizes product_panels needs.
            unsafe {
                product_plain(
                    &packed,
                    0..packed.panels(),
                    &b,
                    &Matrix { ldb },
                    positions,
                    out,
                    Some(&bias),
                    plain.as_mut_ptr(),
                    &|_, _| {},
                )
            };
            for (i, &want) in want.iter().enumerate() {
                for (name, got) in [("fast", fast[i]), ("plain", plain[i])] {
                    assert!(
                        (f64::from(got) - want).abs() <= 1e-4 * (1.0 + want.abs()),
                        "{name} f{f} k{k} n{samples}x{l} [{i}]: {got} vs {want}"
                    );
                }
            }
        }
    }

    /// A classifier's weight at one position (MobileNet-0.25's 256 → 1000), off the pool, has
    /// too little work to split by its multiply-adds, but a weight of `PACKED_SPLIT_WEIGHT`
    /// values to stream: it splits by panels, with the same bits as one part.
    #[test]
    fn large_weights_split_at_one_position_with_the_same_bits() {
        use crate::kernels::tuning::SERIAL_BELOW;
        let (f, k) = (1000, 256);
        assert!(f * k >= PACKED_SPLIT_WEIGHT && f * k < SERIAL_BELOW * 4);
        let w: Vec<f32> = (0..f * k)
            .map(|i| ((i * 29) % 31) as f32 / 9.0 - 1.6)
            .collect();
        let x: Vec<f32> = (0..k).map(|i| ((i * 7) % 13) as f32 / 5.0 - 1.1).collect();
        let bias: Vec<f32> = (0..f).map(|i| i as f32 * 0.01).collect();
        let packed = PackedFilters::new(&w, f, k);
        assert!(rayon::current_thread_index().is_none());
        assert!(worth_splitting(&packed, 1, true));
        let mut whole = vec![f32::NAN; f];
        packed_product(&packed, &x, 1, 1, 1, Some(&bias), &mut whole, false);
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .unwrap();
        let (parts, split) = pool.install(|| {
            let mut y = vec![f32::NAN; f];
            packed_product(&packed, &x, 1, 1, 1, Some(&bias), &mut y, true);
            (panel_parts(&packed, 1, true), y)
        });
        assert_eq!(parts, 2);
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&split), bits(&whole));
    }
}
