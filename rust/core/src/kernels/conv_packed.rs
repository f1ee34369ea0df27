//! Convolution products over few output positions against a large weight — the deep layers of
//! a CNN at batch-1 inference: 512 filters × 4608 column rows over 2×2 positions in ResNet-18
//! at 64², 1024 → 2048 over 2×2 in ResNet-50. A general GEMM packs the whole weight on every
//! call and then runs a handful of columns through it (25 GFLOP/s measured); here the weight
//! is packed once ([`PackedFilters`], kept by the executor between passes) into panels of 16
//! filters, and each step of the product broadcasts one column value against a panel row:
//! the weight streams through once, the few positions stay in registers.

use super::conv::{im2col, split_pass, ConvGeom};
use super::par::SERIAL_BELOW;
use super::scratch::Scratch;
use super::tuning::{CONV_PACKED_L2_WEIGHT, CONV_PACKED_MAX_POSITIONS};
use crate::error::{Error, Result};
use rayon::prelude::*;

/// Filters per panel: one AVX-512 vector of float32.
const LANES: usize = 16;

/// Sums per position of one tile: at most 3 panels.
const ACC: usize = 3 * LANES;

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
/// ahead (inference): few output positions in all (batch-1 deep layers, see
/// [`CONV_PACKED_MAX_POSITIONS`] and [`CONV_PACKED_L2_WEIGHT`]), one group, not depthwise.
pub fn packs_weight(g: &ConvGeom) -> bool {
    let positions = g.batch * g.out_len();
    let few = positions <= CONV_PACKED_MAX_POSITIONS
        || (g.batch == 1
            && positions <= 2 * CONV_PACKED_MAX_POSITIONS
            && g.weight_len() <= CONV_PACKED_L2_WEIGHT);
    g.groups == 1 && !g.is_depthwise_2d() && few && g.col_rows() > 0
}

/// [`conv_forward`] with the weight packed ahead ([`PackedFilters`] of `(filters, col_rows)`):
/// the columns of the whole batch (for one sample of a 1×1 convolution, its input as it is)
/// through [`packed_product`], which writes the output in place with the bias; then
/// `epilogue`. For few positions against a large weight (see [`packs_weight`]).
pub fn conv_forward_packed(
    g: &ConvGeom,
    x: &[f32],
    w: &PackedFilters,
    bias: Option<&[f32]>,
    y: &mut [f32],
    epilogue: Option<&(dyn Fn(&mut [f32]) + Sync)>,
) -> Result<()> {
    check_packed(g, x, w, bias, y)?;
    let l = g.out_len();
    let positions = g.batch * l;
    if g.batch == 1 && g.is_pointwise() {
        packed_product(w, x, l, positions, l, bias, y, true);
    } else if panel_parts(w, positions, true) > 1 {
        // Each part unfolds its own copy of the (few) columns, in its own core's cache:
        // reading one copy from the other core's cache cost more than unfolding twice
        // (ResNet's 128 → 128 3×3 at 8²: 90 µs against 108; 256 → 256 at 4², 85 against 100).
        let parts = panel_parts(w, positions, true);
        let panels = w.panels();
        let out = OutLayout {
            filters: w.filters,
            l,
        };
        let yp = SendPtr(y.as_mut_ptr());
        (0..parts).into_par_iter().for_each(|part| {
            let mut cols = Scratch::take(positions * g.col_rows());
            im2col(g, x, g.batch, &mut cols, false);
            let (p0, p1) = (part * panels / parts, (part + 1) * panels / parts);
            // SAFETY: part `part` writes the outputs of its own filters only, inside `y`
            // (checked above); the columns and the panels were built to size.
            unsafe { product_panels(w, p0..p1, &cols, positions, positions, out, bias, yp.get()) };
        });
    } else {
        let mut cols = Scratch::take(positions * g.col_rows());
        let split = split_pass(true, cols.len());
        im2col(g, x, g.batch, &mut cols, split);
        packed_product(w, &cols, positions, positions, l, bias, y, true);
    }
    if let Some(e) = epilogue {
        e(y);
    }
    Ok(())
}

/// Where the product's outputs go: position `p` of the `positions` columns is sample `p / l`,
/// offset `p % l`, and filter `f`'s value for it lands at `(p / l) · filters · l + f · l + p % l`
/// of the `(samples, filters, l)` output (the NC(D)HW layout).
#[derive(Clone, Copy)]
struct OutLayout {
    filters: usize,
    l: usize,
}

impl OutLayout {
    fn base(&self, p: usize) -> usize {
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
        unsafe { product_panels(w, p0..p1, b, ldb, positions, out, bias, yp.get()) };
    };
    if parts > 1 {
        (0..parts).into_par_iter().for_each(run);
    } else {
        run(0);
    }
}

/// How many parts (of equal numbers of panels) a product over `positions` shares among the
/// pool's threads, with `split`: two panels a part at least, since a part of one runs tiles
/// of one panel, whose loads outweigh their arithmetic (DenseNet's 128 → 32 3×3 at 7²: 58 µs
/// split in two, 46 on one thread).
fn panel_parts(w: &PackedFilters, positions: usize, split: bool) -> usize {
    let threads = rayon::current_num_threads();
    if split && positions * w.filters * w.k >= SERIAL_BELOW * 4 {
        threads.min(w.panels() / 2).max(1)
    } else {
        1
    }
}

/// A raw pointer the parts share; each writes its own filters' outputs.
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
/// else plain loops.
///
/// # Safety
/// `y` holds the `(samples, filters, l)` output; `b` holds `k` rows of `positions` values
/// `ldb` apart.
#[allow(clippy::too_many_arguments)]
unsafe fn product_panels(
    w: &PackedFilters,
    panels: std::ops::Range<usize>,
    b: &[f32],
    ldb: usize,
    positions: usize,
    out: OutLayout,
    bias: Option<&[f32]>,
    y: *mut f32,
) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx512f") {
        // SAFETY: the CPU has AVX-512F; the caller's contract covers the operands.
        unsafe { avx512::product(w, panels, b, ldb, positions, out, bias, y) };
        return;
    }
    // SAFETY: the caller's contract.
    unsafe { product_plain(w, panels, b, ldb, positions, out, bias, y) };
}

/// Writes a tile's sums `acc[r][j]` (position `q + r`, filter `f0 + j`, `width` filters) into
/// the output, adding the bias.
///
/// # Safety
/// The positions and filters lie inside the output `y` describes (filters < out.filters).
unsafe fn store(
    acc: &[[f32; ACC]],
    q: usize,
    f0: usize,
    width: usize,
    out: OutLayout,
    bias: Option<&[f32]>,
    y: *mut f32,
) {
    let width = width.min(out.filters - f0);
    for (r, row) in acc.iter().enumerate() {
        let base = out.base(q + r);
        for (j, &v) in row[..width].iter().enumerate() {
            let f = f0 + j;
            let v = v + bias.map_or(0.0, |b| b[f]);
            // SAFETY: (f, q + r) is inside the output (the caller's contract).
            unsafe { *y.add(base + f * out.l) = v };
        }
    }
}

/// Plain loops in the tiles' order (each output sums over `r` in order).
///
/// # Safety
/// See [`product_panels`].
#[allow(clippy::too_many_arguments)]
unsafe fn product_plain(
    w: &PackedFilters,
    panels: std::ops::Range<usize>,
    b: &[f32],
    ldb: usize,
    positions: usize,
    out: OutLayout,
    bias: Option<&[f32]>,
    y: *mut f32,
) {
    let k = w.k;
    for p in panels {
        let panel = &w.data[p * k * LANES..(p + 1) * k * LANES];
        for q in 0..positions {
            let mut acc = [[0.0f32; ACC]; 1];
            for (r, wrow) in panel.chunks_exact(LANES).enumerate() {
                let x = b[r * ldb + q];
                acc[0][..LANES]
                    .iter_mut()
                    .zip(wrow)
                    .for_each(|(s, &v)| *s += x * v);
            }
            // SAFETY: the caller's contract.
            unsafe { store(&acc, q, p * LANES, LANES, out, bias, y) };
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use super::{store, OutLayout, PackedFilters, ACC, LANES};
    use std::arch::x86_64::*;

    /// Rows of `k` per block: a block of 3 panels (12 KB) stays in the core's L1 cache while
    /// every tile of positions runs over it, so the weight streams in from memory or L3 once
    /// however many positions there are.
    const KC: usize = 64;

    /// Rows of a panel ahead of the current one that the first tile of a block asks the
    /// cache for: each block starts a new 4 KB page of every panel, where the hardware's
    /// stream prefetcher stops and must find the stream again.
    const FETCH_ROWS: usize = 32;

    /// Positions per tile: with 3 panels, 24 of the 32 vector registers hold sums.
    const MR: usize = 8;

    /// One tile: `MR` consecutive positions (column values `b[r · ldb + i]`, i < MR) against
    /// `NV` consecutive panels (`w`, `ps` apart) over `kc` rows, the `MR · NV` accumulators in
    /// registers: per row NV panel loads and MR broadcasts feed MR · NV FMAs. The sums start
    /// from `acc` (or 0 when `fresh`) and go back to it, so a product over several blocks of
    /// rows adds them in order, as one pass over all rows would.
    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn tile<const MR: usize, const NV: usize, const FETCH: bool>(
        b: *const f32,
        ldb: usize,
        kc: usize,
        w: *const f32,
        ps: usize,
        acc: &mut [[f32; ACC]],
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
            for (i, row) in sums.iter_mut().enumerate() {
                // SAFETY: row r of the column matrix holds the tile's MR positions.
                let x = _mm512_set1_ps(unsafe { *b.add(r * ldb + i) });
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
    unsafe fn panels<const NV: usize>(
        w: &PackedFilters,
        p: usize,
        b: *const f32,
        ldb: usize,
        positions: usize,
        acc: &mut [[f32; ACC]],
    ) {
        let (k, ps) = (w.k, w.k * LANES);
        // SAFETY: panel p + NV - 1 exists (the caller's contract).
        let wp = unsafe { w.data.as_ptr().add(p * ps) };
        for k0 in (0..k).step_by(KC) {
            let kc = KC.min(k - k0);
            let fresh = k0 == 0;
            // SAFETY (all tiles): rows k0..k0 + kc of the panels and of b exist, positions
            // q..q + MR are columns of b, and acc holds a row per position.
            unsafe {
                let (bk, wk) = (b.add(k0 * ldb), wp.add(k0 * LANES));
                let mut q = 0;
                // The first tile of a block brings its weight in (and fetches ahead of it);
                // the others find it in L1.
                if positions >= MR {
                    tile::<MR, NV, true>(bk, ldb, kc, wk, ps, &mut acc[..MR], fresh);
                    q = MR;
                }
                while q + MR <= positions {
                    tile::<MR, NV, false>(bk.add(q), ldb, kc, wk, ps, &mut acc[q..q + MR], fresh);
                    q += MR;
                }
                let rest = &mut acc[q..positions];
                let bq = bk.add(q);
                match positions - q {
                    0 => {}
                    1 => tile::<1, NV, true>(bq, ldb, kc, wk, ps, rest, fresh),
                    2 => tile::<2, NV, true>(bq, ldb, kc, wk, ps, rest, fresh),
                    3 => tile::<3, NV, true>(bq, ldb, kc, wk, ps, rest, fresh),
                    4 => tile::<4, NV, true>(bq, ldb, kc, wk, ps, rest, fresh),
                    5 => tile::<5, NV, true>(bq, ldb, kc, wk, ps, rest, fresh),
                    6 => tile::<6, NV, true>(bq, ldb, kc, wk, ps, rest, fresh),
                    _ => tile::<7, NV, true>(bq, ldb, kc, wk, ps, rest, fresh),
                }
            }
        }
    }

    /// See `product_panels`. Tiles of 8 positions × 3 panels keep 24 of the 32 vector
    /// registers as accumulators (6 × 4 ran no faster). Panels go 3 at a time, the rest 2 or 1
    /// at once, each group's weight a block of rows at a time through every tile of positions.
    ///
    /// # Safety
    /// The CPU supports AVX-512F, and `product_panels`' contract.
    #[target_feature(enable = "avx512f")]
    #[allow(clippy::too_many_arguments)]
    pub(super) unsafe fn product(
        w: &PackedFilters,
        panels_range: std::ops::Range<usize>,
        b: &[f32],
        ldb: usize,
        positions: usize,
        out: OutLayout,
        bias: Option<&[f32]>,
        y: *mut f32,
    ) {
        let bp = b.as_ptr();
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
                    3 => panels::<3>(w, p, bp, ldb, positions, &mut acc),
                    2 => panels::<2>(w, p, bp, ldb, positions, &mut acc),
                    _ => panels::<1>(w, p, bp, ldb, positions, &mut acc),
                }
                store(&acc, 0, p * LANES, nv * LANES, out, bias, y);
            }
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
                    ldb,
                    positions,
                    out,
                    Some(&bias),
                    plain.as_mut_ptr(),
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
}
