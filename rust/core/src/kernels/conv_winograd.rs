//! 3×3 stride-1 convolutions at inference as Winograd products (Lavin and Gray, "Fast
//! Algorithms for Convolutional Neural Networks", 2015), in two forms: F(2×2, 3×3) and
//! F(4×4, 3×3).
//!
//! Each `m × m` block of outputs ("tile", `m` = 2 or 4) reads an `a × a` patch of the input
//! (`a = m + 2`). Transformed, the patch's `a²` values (`Bᵀ d B`) times the filter's `a²`
//! transformed values (`G g Gᵀ`, once, at prepare time) sum over the channels into `a²`
//! values per filter and tile, and `Aᵀ M A` turns those into the tile's `m²` outputs: per
//! channel, 16 multiply-adds for 4 outputs (2.25 times fewer than the direct sum's 36), or 36
//! for 16 (4 times fewer than 144). The sums over the channels are `a²` products `(filters ×
//! channels) · (channels × tiles)`, one per transformed position, run by the tiled kernels'
//! register tiles (`conv_tiled::tile_on`) over blocks of [`TILE`] tiles; the transforms
//! around them are a few additions per value.
//!
//! The results differ from the direct sum's in the last bits (the transforms round, and
//! `G` spreads a weight over several products with fractions): inference only, where the
//! packed kernels already sum in their own order. The 4 × 4 form's larger transforms round
//! more (a few units in the sixth digit of a unit-scale output, against one for 2 × 2);
//! `MXFN_WINOGRAD=2` keeps every layer on the 2 × 2 form.

use super::conv::{copy_short, ConvGeom};
use super::conv_packed::SendPtr;
use super::conv_tiled::{
    k_blocks, tile_on, FilterPanels, InputMap, Tile, LANES as LANES16, MR, TILE,
};
#[cfg(target_arch = "x86_64")]
use super::conv_winograd_vector as vector;
use super::lanes8::LANES8;
use super::scratch::Scratch;
use super::tuning::{
    WINOGRAD_4X4_MAX_WASTE, WINOGRAD_4X4_MIN_TILES, WINOGRAD_FEW_FILTERS,
    WINOGRAD_FEW_FILTERS_MIN_WIDTH, WINOGRAD_MIN_CHANNELS, WINOGRAD_MIN_FILTERS,
    WINOGRAD_MIN_TILES, WINOGRAD_ODD_MIN_SIDE, WINOGRAD_PREFETCH_AHEAD,
};
use super::Isa;
use crate::error::{Error, Result};
use rayon::prelude::*;
#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::{__m256, __m512};

/// The output tile of a Winograd product: 2 × 2 or 4 × 4 outputs per tile.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WinogradForm {
    /// F(2×2, 3×3): 4 × 4 patches, 16 products.
    F2x2,
    /// F(4×4, 3×3): 6 × 6 patches, 36 products.
    F4x4,
}

impl WinogradForm {
    /// Outputs per tile side (`m`).
    fn side(self) -> usize {
        match self {
            WinogradForm::F2x2 => 2,
            WinogradForm::F4x4 => 4,
        }
    }

    /// Values per patch side (`a = m + 2`).
    fn patch(self) -> usize {
        self.side() + 2
    }

    /// Transformed values per patch, filter and product: `a²`.
    fn elems(self) -> usize {
        self.patch() * self.patch()
    }

    /// `G` (`a × 3`, row-major), the filter transform.
    fn g(self) -> &'static [f64] {
        const G2: [f64; 12] = [1.0, 0.0, 0.0, 0.5, 0.5, 0.5, 0.5, -0.5, 0.5, 0.0, 0.0, 1.0];
        const G4: [f64; 18] = [
            1.0 / 4.0,
            0.0,
            0.0,
            -1.0 / 6.0,
            -1.0 / 6.0,
            -1.0 / 6.0,
            -1.0 / 6.0,
            1.0 / 6.0,
            -1.0 / 6.0,
            1.0 / 24.0,
            1.0 / 12.0,
            1.0 / 6.0,
            1.0 / 24.0,
            -1.0 / 12.0,
            1.0 / 6.0,
            0.0,
            0.0,
            1.0,
        ];
        match self {
            WinogradForm::F2x2 => &G2,
            WinogradForm::F4x4 => &G4,
        }
    }
}

/// A 3×3 weight `(filters, channels, 3, 3)` transformed (`G g Gᵀ`) and packed for the
/// products of one form: element `e` of every filter and channel as [`FilterPanels`] of
/// `(filters, channels)`.
#[derive(Clone, Debug)]
pub struct WinogradFilters {
    elems: Vec<FilterPanels>,
    filters: usize,
    channels: usize,
    form: WinogradForm,
}

impl WinogradFilters {
    /// Transforms and packs `w (filters, channels, 3, 3)` for `form`. Panics if `w` is shorter.
    pub fn new(w: &[f32], filters: usize, channels: usize, form: WinogradForm) -> Self {
        let (per_elem, elems) = (filters * channels, form.elems());
        let mut u = vec![0.0f32; elems * per_elem];
        for (fc, g) in w.chunks_exact(9).take(per_elem).enumerate() {
            for (e, v) in transform_filter(g, form).into_iter().enumerate() {
                u[e * per_elem + fc] = v;
            }
        }
        let elems = u
            .chunks_exact(per_elem.max(1))
            .take(elems)
            .map(|w_e| FilterPanels::new(w_e, filters, channels))
            .collect();
        WinogradFilters {
            elems,
            filters,
            channels,
            form,
        }
    }
}

/// `G g Gᵀ` of one 3×3 filter `g` (row-major) as `a × a` values, row-major, computed in
/// float64 (the 4 × 4 form's sixths and twenty-fourths round once, at the end).
fn transform_filter(g: &[f32], form: WinogradForm) -> Vec<f32> {
    let (a, gm) = (form.patch(), form.g());
    // (G g): a × 3, then (G g) Gᵀ: a × a.
    let gg: Vec<f64> = (0..a * 3)
        .map(|ij| {
            let (i, j) = (ij / 3, ij % 3);
            (0..3)
                .map(|k| gm[3 * i + k] * f64::from(g[3 * k + j]))
                .sum()
        })
        .collect();
    (0..a * a)
        .map(|ij| {
            let (i, j) = (ij / a, ij % a);
            (0..3).map(|k| gg[3 * i + k] * gm[3 * j + k]).sum::<f64>() as f32
        })
        .collect()
}

/// The form an inference convolution runs as Winograd products in, if any: a 2-D 3×3
/// window of one group at stride and dilation 1, with at least [`WINOGRAD_MIN_CHANNELS`]
/// channels into [`WINOGRAD_MIN_FILTERS`] filters over [`WINOGRAD_MIN_TILES`] 2 × 2 tiles
/// in all. Fewer, and the transforms (per channel and per filter) weigh against products
/// too small to gain, or the transformed weight (16 values per filter and channel against
/// 9) streams through for a handful of tiles: the deep layers at batch 1 stay packed.
///
/// An odd output side below [`WINOGRAD_ODD_MIN_SIDE`] wastes too much of its last tiles
/// (13² outputs compute 14²); fewer than [`WINOGRAD_FEW_FILTERS`] filters need rows of at
/// least [`WINOGRAD_FEW_FILTERS_MIN_WIDTH`] outputs (the input transform per channel is then
/// shared by few filters, and short rows cost it more per tile).
///
/// Such a layer takes 4 × 4 tiles when they waste at most [`WINOGRAD_4X4_MAX_WASTE`] of
/// the outputs they compute and number [`WINOGRAD_4X4_MIN_TILES`] or more; `only` names the
/// form instead.
pub fn winograd_form(g: &ConvGeom, only: Option<WinogradForm>) -> Option<WinogradForm> {
    let side_fits = |side: usize| side.is_multiple_of(2) || side >= WINOGRAD_ODD_MIN_SIDE;
    let two = fits(g)
        && g.channels >= WINOGRAD_MIN_CHANNELS
        && g.filters >= WINOGRAD_MIN_FILTERS
        && Tiles::of(g, WinogradForm::F2x2).count >= WINOGRAD_MIN_TILES
        && side_fits(g.output[1])
        && side_fits(g.output[2])
        && (g.filters >= WINOGRAD_FEW_FILTERS || g.output[2] >= WINOGRAD_FEW_FILTERS_MIN_WIDTH);
    if !two {
        return None;
    }
    let (oh, ow) = (g.output[1], g.output[2]);
    let computed = oh.next_multiple_of(4) * ow.next_multiple_of(4);
    let waste = (computed - oh * ow) as f64 / computed as f64;
    let four = waste <= WINOGRAD_4X4_MAX_WASTE
        && Tiles::of(g, WinogradForm::F4x4).count >= WINOGRAD_4X4_MIN_TILES;
    Some(match (only, four) {
        (Some(form), _) => form,
        (None, true) => WinogradForm::F4x4,
        (None, false) => WinogradForm::F2x2,
    })
}

/// A 2-D 3×3 window of one group at stride and dilation 1 (any padding).
fn fits(g: &ConvGeom) -> bool {
    g.groups == 1
        && g.input[0] == 1
        && g.output[0] == 1
        && g.pad[0] == 0
        && g.kernel == [1, 3, 3]
        && g.stride == [1, 1, 1]
        && g.dilate == [1, 1, 1]
}

/// The convolution `y = conv(map(x), w) + bias`, then `epilogue` over the output as it is
/// written, in `w`'s form (`map`, when given, applied to each input value as the input
/// transform reads it; the padding stays zero), for any geometry that [`fits`]. Blocks of
/// [`TILE`] tiles run side by side on the pool.
pub fn conv_forward_winograd(
    g: &ConvGeom,
    x: &[f32],
    map: Option<&InputMap>,
    w: &WinogradFilters,
    bias: Option<&[f32]>,
    y: &mut [f32],
    epilogue: Option<&(dyn Fn(&mut [f32]) + Sync)>,
) -> Result<()> {
    forward_on(g, (x, map), w, bias, y, epilogue, Isa::detect())
}

/// [`conv_forward_winograd`] in the registers `isa` names (the CPU has them).
fn forward_on(
    g: &ConvGeom,
    (x, map): (&[f32], Option<&InputMap>),
    w: &WinogradFilters,
    bias: Option<&[f32]>,
    y: &mut [f32],
    epilogue: Option<&(dyn Fn(&mut [f32]) + Sync)>,
    isa: Isa,
) -> Result<()> {
    g.validate()?;
    let (c, f) = (g.channels, g.filters);
    g.check_len("conv forward: data", x.len(), g.batch * c * g.in_len())?;
    g.check_len("conv forward: output", y.len(), g.batch * f * g.out_len())?;
    if !fits(g) || w.filters != f || w.channels != c {
        return Err(Error::invalid(
            "conv forward: Winograd weight",
            format!("a 3×3 stride-1 window of {c} channels into {f} filters"),
            format!("{} channels into {} filters, {g:?}", w.channels, w.filters),
        ));
    }
    if let Some(b) = bias {
        g.check_len("conv forward: bias", b.len(), f)?;
    }
    if let Some(m) = map {
        m.check(c)?;
    }
    let tiles = Tiles::of(g, w.form);
    let threads = rayon::current_num_threads();
    let size = block_size(tiles.count, threads);
    let blocks = tiles.count.div_ceil(size);
    let yp = SendPtr(y.as_mut_ptr());
    let run = |b: usize| {
        let part = Part {
            g,
            x,
            map,
            w,
            bias,
            tiles,
            first: b * size,
            count: (tiles.count - b * size).min(size),
        };
        // SAFETY: block b writes only its own tiles' outputs, all inside `y` (checked above);
        // the CPU has `isa`.
        unsafe {
            match w.form {
                WinogradForm::F2x2 => run_part::<2, 4>(&part, yp.get(), epilogue, isa),
                WinogradForm::F4x4 => run_part::<4, 6>(&part, yp.get(), epilogue, isa),
            }
        }
    };
    if blocks > 1 && threads > 1 {
        (0..blocks).into_par_iter().for_each(run);
    } else {
        (0..blocks).for_each(run);
    }
    Ok(())
}

/// Tiles per block: [`TILE`], or with fewer than that per thread, a share per thread rounded
/// up to whole vectors. ResNet's 28² at batch 1 has 49 tiles of 4 × 4: blocks of 48 left one
/// thread a single tile while the other did the rest.
fn block_size(count: usize, threads: usize) -> usize {
    match count < threads * TILE {
        true => count
            .div_ceil(threads.max(1))
            .next_multiple_of(LANES8)
            .min(TILE),
        false => TILE,
    }
}

/// The grid of `m × m` output tiles over the batch.
#[derive(Clone, Copy)]
struct Tiles {
    /// Tile rows and columns per image.
    rows: usize,
    cols: usize,
    /// Tiles in all.
    count: usize,
}

impl Tiles {
    fn of(g: &ConvGeom, form: WinogradForm) -> Tiles {
        let m = form.side();
        let (rows, cols) = (g.output[1].div_ceil(m), g.output[2].div_ceil(m));
        Tiles {
            rows,
            cols,
            count: g.batch * rows * cols,
        }
    }
}

/// One block of consecutive tiles (in sample, row, column order) and the operands.
struct Part<'a> {
    g: &'a ConvGeom,
    x: &'a [f32],
    map: Option<&'a InputMap<'a>>,
    w: &'a WinogradFilters,
    bias: Option<&'a [f32]>,
    tiles: Tiles,
    first: usize,
    count: usize,
}

/// A run of a block's tiles along one tile row: sample `n`, tile row `i`, tile columns
/// `j0..j1`, at position `at` of the block.
#[derive(Clone, Copy)]
struct Segment {
    n: usize,
    i: usize,
    j0: usize,
    j1: usize,
    at: usize,
}

impl Part<'_> {
    fn segments(&self) -> impl Iterator<Item = Segment> + '_ {
        let Tiles { rows, cols, .. } = self.tiles;
        let mut t = self.first;
        let end = self.first + self.count;
        std::iter::from_fn(move || {
            (t < end).then(|| {
                let (n, i, j0) = (t / (rows * cols), t / cols % rows, t % cols);
                let j1 = cols.min(j0 + end - t);
                let s = Segment {
                    n,
                    i,
                    j0,
                    j1,
                    at: t - self.first,
                };
                t += j1 - j0;
                s
            })
        })
    }
}

/// The distance between the elements' matrices of `rows` rows of [`TILE`] (channels of the
/// transformed patches, filters of the products): a cache line more than the rows, so the
/// stores of one tile's transform land in different L1 sets. At 128 channels the plain
/// distance (24 KB) put all 16 of the 2 × 2 form's in one 8-way set, and the input
/// transform ran as long as the products.
fn elem_stride(rows: usize) -> usize {
    rows * TILE + 2 * LANES8
}

/// One block in the form of `M` outputs per tile side (`A = M + 2`): its patches
/// transformed into `v` (`A²` matrices `channels × TILE`, see [`elem_stride`]), the `A²`
/// products into `m` (`A²` of `filters × TILE`), and `m` transformed into the outputs.
///
/// # Safety
/// `y` holds the whole output; the block's tiles are written by no one else meanwhile; the
/// CPU has `isa`.
unsafe fn run_part<const M: usize, const A: usize>(
    p: &Part,
    y: *mut f32,
    epilogue: Option<&(dyn Fn(&mut [f32]) + Sync)>,
    isa: Isa,
) {
    let (c, f, elems) = (p.g.channels, p.g.filters, A * A);
    // The AVX2 transforms run whole vectors of tiles past the block's last element.
    let (vs, ms) = (elem_stride(c), elem_stride(f));
    let mut v = Scratch::take(elems * vs + LANES8);
    let mut m = Scratch::take(elems * ms + LANES8);
    transform_input::<M, A>(p, &mut v, isa);
    let panels = f.div_ceil(MR);
    for (e, u) in p.w.elems.iter().enumerate().take(elems) {
        let u = &u.data;
        for kb in k_blocks(c) {
            let block = &v[e * vs + kb.start * TILE..];
            for panel in 0..panels {
                let out = &mut m[e * ms + panel * MR * TILE..];
                let tile = Tile {
                    w: u[(panel * c + kb.start) * MR..].as_ptr(),
                    block: block.as_ptr(),
                    kc: kb.len(),
                    n: p.count,
                    rows: MR.min(f - panel * MR),
                    first: kb.start == 0,
                    bias: None,
                };
                // SAFETY: the panel holds c rows of MR values, the block kb.len() ≤ KC rows
                // of TILE, the output MR rows of TILE (the last panel's spare rows unused);
                // the CPU has `isa`.
                unsafe { tile_on(isa, &tile, out.as_mut_ptr(), TILE) };
            }
        }
    }
    // SAFETY: forwarded.
    unsafe { transform_output::<M, A>(p, &m, y, epilogue, isa) };
}

/// `Bᵀ` over `A` values: for 4, `Bᵀ = [1 0 −1 0; 0 1 1 0; 0 −1 1 0; 0 1 0 −1]`; for 6,
/// `Bᵀ = [4 0 −5 0 1 0; 0 −4 −4 1 1 0; 0 4 −4 −1 1 0; 0 −2 −1 2 1 0; 0 2 −1 −2 1 0;
/// 0 4 0 −5 0 1]`.
#[inline(always)]
fn b_rows<const A: usize>(x: [f32; A]) -> [f32; A] {
    let mut out = [0.0; A];
    match A {
        4 => out.copy_from_slice(&[x[0] - x[2], x[1] + x[2], x[2] - x[1], x[1] - x[3]]),
        _ => {
            let (t0, t1) = (x[4] - 4.0 * x[2], x[3] - 4.0 * x[1]);
            let (t2, t3) = (x[4] - x[2], 2.0 * (x[3] - x[1]));
            out.copy_from_slice(&[
                4.0 * x[0] + (x[4] - 5.0 * x[2]),
                t0 + t1,
                t0 - t1,
                t2 + t3,
                t2 - t3,
                4.0 * x[1] + (x[5] - 5.0 * x[3]),
            ]);
        }
    }
    out
}

/// `Aᵀ` over `A` values into `M`: for 2, `Aᵀ = [1 1 1 0; 0 1 −1 −1]`; for 4,
/// `Aᵀ = [1 1 1 1 1 0; 0 1 −1 2 −2 0; 0 1 1 4 4 0; 0 1 −1 8 −8 1]`.
#[inline(always)]
fn a_rows<const M: usize, const A: usize>(m: [f32; A]) -> [f32; M] {
    let mut out = [0.0; M];
    match M {
        2 => out.copy_from_slice(&[m[0] + m[1] + m[2], m[1] - m[2] - m[3]]),
        _ => {
            let (s12, d12, s34, d34) = (m[1] + m[2], m[1] - m[2], m[3] + m[4], m[3] - m[4]);
            out.copy_from_slice(&[
                m[0] + s12 + s34,
                2.0 * d34 + d12,
                4.0 * s34 + s12,
                (8.0 * d34 + d12) + m[5],
            ]);
        }
    }
    out
}

/// Every patch of the block as `Bᵀ d B` into `v`: element `e` of channel `ch` and block tile
/// `t` at `e · elem_stride(channels) + ch · TILE + t`. Per channel and segment, its `A`
/// input rows are copied once, split by column modulo `M` (see [`fill_rows`]), then each
/// tile combines their rows, then the combinations' columns: tile `j`'s column `k` is value
/// `j + k / M` of phase `k % M`, so the transform runs on plain loads.
fn transform_input<const M: usize, const A: usize>(p: &Part, v: &mut [f32], isa: Isa) {
    assert!(
        v.len() >= A * A * elem_stride(p.g.channels),
        "Winograd input transform: buffer"
    );
    match isa {
        // SAFETY: the CPU has AVX-512F.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => unsafe { transform_input_avx512::<M, A>(p, v) },
        // SAFETY: the CPU has AVX2 and FMA.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => unsafe { transform_input_avx2::<M, A>(p, v) },
        _ => input_loop::<M, A, 1>(p, v),
    }
}

/// [`input_loop`] in AVX2 (its helpers inlined into one loop).
///
/// # Safety
/// The CPU supports AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn transform_input_avx2<const M: usize, const A: usize>(p: &Part, v: &mut [f32]) {
    input_loop::<M, A, 8>(p, v)
}

/// [`input_loop`] in AVX-512 (the phases split in AVX2).
///
/// # Safety
/// The CPU supports AVX-512F (and so AVX2 and FMA).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn transform_input_avx512<const M: usize, const A: usize>(p: &Part, v: &mut [f32]) {
    input_loop::<M, A, 16>(p, v)
}

/// See [`transform_input`]: the patches `LANES` tiles at a time, 1 for the plain loops, 8
/// when the CPU has AVX2 and FMA, 16 when it has AVX-512F.
#[inline(always)]
fn input_loop<const M: usize, const A: usize, const LANES: usize>(p: &Part, v: &mut [f32]) {
    let c = p.g.channels;
    let stride = elem_stride(c);
    // Values j0..=j1 of each phase, with room for whole vectors of 16 past them.
    let half = (p.tiles.cols + 1).next_multiple_of(LANES16) + LANES16;
    let mut rows = Scratch::take(A * M * half);
    let mut line = Scratch::take(M * half);
    for s in p.segments() {
        let n = s.j1 - s.j0;
        for ch in 0..c {
            fill_rows::<M, A, LANES>(p, &s, ch, &mut rows, &mut line, half);
            let at = ch * TILE + s.at;
            #[cfg(target_arch = "x86_64")]
            if LANES > 1 {
                // SAFETY: the CPU has the lanes' instruction set; the phases hold n + 1
                // values and are readable to ⌈n / 16⌉ · 16 + 1 (`half`); element e's n
                // values at at + e · stride lie inside `v` (checked by the caller; the last
                // vector's stores cut to them).
                unsafe {
                    let (r, out) = (rows.as_ptr(), v[at..].as_mut_ptr());
                    // (A segment of at most 8 tiles, on ResNet's 8² and 16² images, runs
                    // as fast in 8 lanes as in 16.)
                    match LANES {
                        16 if n > LANES8 => {
                            vector::patches::<__m512, M, A>(r, half, n, out, stride)
                        }
                        _ => vector::patches::<__m256, M, A>(r, half, n, out, stride),
                    }
                }
                continue;
            }
            patches_plain::<M, A>(&rows, half, n, &mut v[at..], stride);
        }
    }
}

/// Copies input rows `M·i − pad .. M·i − pad + A` of channel `ch` for segment `s` into
/// `rows`, split by column modulo `M`: padded column `M·j0 + M·q + φ` of row `a` at
/// `rows[(a·M + φ) · half + q]`, for `q ≤ j1 − j0`; zero outside the input, through the
/// part's map if it has one. Each row goes through `line` (its padded columns in order),
/// then splits. `LANES` as [`input_loop`]'s (the split in AVX2 above 1).
#[inline(always)]
fn fill_rows<const M: usize, const A: usize, const LANES: usize>(
    p: &Part,
    s: &Segment,
    ch: usize,
    rows: &mut [f32],
    line: &mut [f32],
    half: usize,
) {
    let g = p.g;
    let (c, ih, iw) = (g.channels, g.input[1], g.input[2]);
    let (ph, pw) = (g.pad[1], g.pad[2]);
    let count = s.j1 - s.j0 + 1;
    let width = M * count;
    // Padded column first + k is input column first + k − pw: inside for k in lo..hi.
    let first = M * s.j0;
    let lo = pw.saturating_sub(first).min(width);
    let hi = (iw + pw).saturating_sub(first).clamp(lo, width);
    let plane = &p.x[(s.n * c + ch) * ih * iw..][..ih * iw];
    for (a, phases) in rows.chunks_exact_mut(M * half).take(A).enumerate() {
        let input_row = (M * s.i + a).checked_sub(ph).filter(|&r| r < ih);
        match input_row {
            Some(r) if lo < hi => {
                line[..lo].fill(0.0);
                line[hi..width].fill(0.0);
                let at = r * iw + first + lo - pw;
                copy_short(&mut line[lo..hi], &plane[at..at + hi - lo]);
                if let Some(m) = p.map {
                    m.apply(ch, &mut line[lo..hi]);
                }
            }
            _ => line[..width].fill(0.0),
        }
        // The same row of a channel further on, ahead of its turn: a segment's rows are a
        // few cache lines each, a plane apart, too short for the stream prefetchers.
        #[cfg(target_arch = "x86_64")]
        if let (Some(r), true) = (input_row, lo < hi && ch + WINOGRAD_PREFETCH_AHEAD < c) {
            let at = ((s.n * c + ch + WINOGRAD_PREFETCH_AHEAD) * ih + r) * iw + first + lo - pw;
            prefetch_run(&p.x[at..at + hi - lo]);
        }
        #[cfg(target_arch = "x86_64")]
        if LANES > 1 {
            // SAFETY: the CPU has AVX2 and FMA; `line` holds M · half ≥ M · ⌈count / 8⌉ · 8
            // values (those past `width` unread by the patches), each phase `half`.
            unsafe { vector::split_phases::<M>(line.as_ptr(), count, phases.as_mut_ptr(), half) };
            continue;
        }
        for (phase, dst) in phases.chunks_exact_mut(half).enumerate() {
            for (q, d) in dst[..count].iter_mut().enumerate() {
                *d = line[M * q + phase];
            }
        }
    }
}

/// Asks for `run` in the core's L1 cache ahead of its reading: a hint, which reads nothing.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn prefetch_run(run: &[f32]) {
    use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
    // One per cache line (16 values), and the last value's.
    for i in (0..run.len()).step_by(16).chain(run.len().checked_sub(1)) {
        // SAFETY: SSE is part of baseline x86-64; a prefetch reads no memory.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(run[i..].as_ptr().cast()) };
    }
}

/// Tiles `0..n` of one channel and segment from its `A` rows split into `M` phases (see
/// [`fill_rows`]; phase `φ` of row `a` at `rows[(a·M + φ) · half..]`): element `A·a + b` of
/// tile `j` (at `v[e · stride + j]`) is `Bᵀ`'s row `b` over the tile's columns of `Bᵀ`'s row
/// `a` over the `A` rows.
fn patches_plain<const M: usize, const A: usize>(
    rows: &[f32],
    half: usize,
    n: usize,
    v: &mut [f32],
    stride: usize,
) {
    for j in 0..n {
        let at = |a: usize, k: usize| rows[(a * M + k % M) * half + j + k / M];
        let cols: [[f32; A]; A] =
            std::array::from_fn(|k| b_rows(std::array::from_fn(|a| at(a, k))));
        for a in 0..A {
            let out = b_rows::<A>(std::array::from_fn(|k| cols[k][a]));
            for (b, x) in out.into_iter().enumerate() {
                v[(A * a + b) * stride + j] = x;
            }
        }
    }
}

/// The block's outputs from its products `m` (element `e` of filter `k` and block tile `t`
/// at `e · elem_stride(filters) + k · TILE + t`) as `Aᵀ m A + bias` (see [`a_rows`]), then
/// `epilogue` over each filter's rows of a segment while they are in cache.
///
/// # Safety
/// `y` holds the whole output, the block's tiles written by no one else meanwhile; the CPU
/// has `isa`; `m` is readable a vector past its last element.
unsafe fn transform_output<const M: usize, const A: usize>(
    p: &Part,
    m: &[f32],
    y: *mut f32,
    epilogue: Option<&(dyn Fn(&mut [f32]) + Sync)>,
    isa: Isa,
) {
    let g = p.g;
    let f = g.filters;
    let (oh, ow) = (g.output[1], g.output[2]);
    assert!(
        m.len() >= A * A * elem_stride(f) + LANES8,
        "Winograd output transform: buffer"
    );
    let segments: Vec<Segment> = p.segments().collect();
    let runs = epilogue_runs(p, &segments, M);
    // A segment's M output rows for one filter, whole vectors of tiles.
    let row_len = M * (TILE + LANES8);
    let mut out = Scratch::take(M * row_len);
    for k in 0..f {
        let b = p.bias.map_or(0.0, |b| b[k]);
        for s in &segments {
            let n = s.j1 - s.j0;
            let (x0, x1) = (M * s.j0, (M * s.j1).min(ow));
            let y0 = M * s.i;
            let at = k * TILE + s.at;
            match isa {
                // SAFETY: the CPU has AVX-512F; each element's run of m is readable to its
                // n values rounded up to 16 (a run ends at most TILE + 15 past the element's
                // last filter row, inside the slack of `elem_stride`), the rows hold M · n
                // rounded up to whole vectors of 16 (at most M · TILE). Segments of at most 8
                // tiles run as fast in 8 lanes.
                #[cfg(target_arch = "x86_64")]
                Isa::Avx512 if n > LANES8 => unsafe {
                    vector::outputs_avx512::<M, A>(
                        m[at..].as_ptr(),
                        elem_stride(f),
                        n,
                        b,
                        out.as_mut_ptr(),
                        row_len,
                    )
                },
                // SAFETY: as above, with AVX2 and FMA (AVX-512's CPUs have them) and vectors
                // of 8.
                #[cfg(target_arch = "x86_64")]
                Isa::Avx2 | Isa::Avx512 => unsafe {
                    vector::outputs_avx2::<M, A>(
                        m[at..].as_ptr(),
                        elem_stride(f),
                        n,
                        b,
                        out.as_mut_ptr(),
                        row_len,
                    )
                },
                _ => outputs_plain::<M, A>(&m[at..], elem_stride(f), n, b, &mut out, row_len),
            }
            let plane = (s.n * f + k) * oh * ow;
            for r in 0..(oh - y0).min(M) {
                // SAFETY: row y0 + r < oh of filter k, columns x0..x1 ≤ ow: inside `y`, this
                // block's own.
                let dst = unsafe {
                    std::slice::from_raw_parts_mut(y.add(plane + (y0 + r) * ow + x0), x1 - x0)
                };
                copy_short(dst, &out[r * row_len..][..x1 - x0]);
            }
        }
        if let Some(e) = epilogue {
            for &(n, off, len) in &runs {
                // SAFETY: a run of the block's outputs of filter k (see `epilogue_runs`),
                // all written above.
                e(unsafe {
                    std::slice::from_raw_parts_mut(y.add((n * f + k) * oh * ow + off), len)
                });
            }
        }
    }
}

/// The block's outputs of one filter as runs `(sample, offset in the plane, length)` for
/// tiles of `m × m`, as long as they are contiguous: whole tile rows of a sample merge into
/// one run (`m` output rows each), a partial one gives a run per output row. An epilogue
/// called per segment and filter ran on 16 to 32 values at a time over ResNet's 8² and 16²
/// images.
fn epilogue_runs(p: &Part, segments: &[Segment], m: usize) -> Vec<(usize, usize, usize)> {
    let (oh, ow) = (p.g.output[1], p.g.output[2]);
    let mut runs: Vec<(usize, usize, usize)> = Vec::new();
    for s in segments {
        let (x0, x1) = (m * s.j0, (m * s.j1).min(ow));
        let (y0, rows) = (m * s.i, (oh - m * s.i).min(m));
        if x0 == 0 && x1 == ow {
            let (off, len) = (y0 * ow, rows * ow);
            match runs.last_mut() {
                Some(last) if last.0 == s.n && last.1 + last.2 == off => last.2 += len,
                _ => runs.push((s.n, off, len)),
            }
        } else {
            runs.extend((0..rows).map(|r| (s.n, (y0 + r) * ow + x0, x1 - x0)));
        }
    }
    runs
}

/// The `M` output rows (row `r` at `out[r · row_len..]`) of tiles `0..n` of one filter from
/// its `A²` products (element `e` of tile `j` at `m[e · stride + j]`): `Aᵀ`'s rows over each
/// column of the `A × A`, then over each result's columns, plus `bias`.
fn outputs_plain<const M: usize, const A: usize>(
    m: &[f32],
    stride: usize,
    n: usize,
    bias: f32,
    out: &mut [f32],
    row_len: usize,
) {
    for j in 0..n {
        let mv = |e: usize| m[e * stride + j];
        let cols: [[f32; M]; A] =
            std::array::from_fn(|c| a_rows::<M, A>(std::array::from_fn(|r| mv(A * r + c))));
        for r in 0..M {
            let o: [f32; M] = a_rows::<M, A>(std::array::from_fn(|c| cols[c][r]));
            for (c, x) in o.into_iter().enumerate() {
                out[r * row_len + M * j + c] = x + bias;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::conv::conv_forward;
    use crate::kernels::unary::AffineAct;

    fn values(len: usize, seed: u32) -> Vec<f32> {
        let mut s = seed.wrapping_mul(2654435761).wrapping_add(1);
        (0..len)
            .map(|_| {
                s = s.wrapping_mul(1664525).wrapping_add(1013904223);
                (s >> 8) as f32 / (1u32 << 24) as f32 - 0.5
            })
            .collect()
    }

    fn geom(batch: usize, c: usize, f: usize, h: usize, w: usize, pad: usize) -> ConvGeom {
        ConvGeom {
            batch,
            channels: c,
            filters: f,
            groups: 1,
            input: [1, h, w],
            output: [1, h + 2 * pad - 2, w + 2 * pad - 2],
            kernel: [1, 3, 3],
            stride: [1, 1, 1],
            dilate: [1, 1, 1],
            pad: [0, pad, pad],
        }
    }

    /// Within float32 rounding of the direct sum, in both forms: sizes off the tile sides
    /// (last tile rows and columns of 1 to 3 outputs), pads 0–2, filter counts off the panel
    /// width, channel counts past one block of the products, blocks spanning rows and
    /// samples, rows wider than a vector of tiles, a bias, a fused epilogue and an input map.
    #[test]
    fn winograd_matches_the_direct_sum() {
        let cases = [
            (1, 16, 16, 14, 14, 1),
            (2, 16, 20, 9, 11, 1),
            (3, 17, 16, 7, 6, 0),
            (1, 130, 24, 12, 13, 2),
            (2, 32, 33, 15, 16, 1),
            (1, 16, 16, 40, 5, 1),
            (1, 16, 16, 7, 75, 1),
        ];
        for (n, c, f, h, wd, pad) in cases {
            let g = geom(n, c, f, h, wd, pad);
            assert!(fits(&g), "{g:?}");
            let x = values(n * c * h * wd, 1);
            let w = values(f * c * 9, 2);
            let bias = values(f, 3);
            let scale = values(c, 4);
            let shift = values(c, 5);
            for mapped in [false, true] {
                let map = InputMap {
                    scale: &scale,
                    shift: &shift,
                    act: AffineAct::Relu,
                };
                let input: Vec<f32> = match mapped {
                    false => x.clone(),
                    true => x
                        .chunks(h * wd)
                        .enumerate()
                        .flat_map(|(i, p)| {
                            let (sc, sh) = (scale[i % c], shift[i % c]);
                            p.iter().map(move |&v| (v * sc + sh).max(0.0))
                        })
                        .collect(),
                };
                let mut want = vec![0.0; n * f * g.out_len()];
                conv_forward(&g, &input, &w, Some(&bias), &mut want, None).unwrap();
                want.iter_mut().for_each(|v| *v = v.max(0.0));
                let relu = |v: &mut [f32]| v.iter_mut().for_each(|v| *v = v.max(0.0));
                let m = mapped.then_some(&map);
                for form in FORMS {
                    let wf = WinogradFilters::new(&w, f, c, form);
                    for isa in Isa::available() {
                        let mut y = vec![f32::NAN; want.len()];
                        let b = Some(bias.as_slice());
                        forward_on(&g, (&x, m), &wf, b, &mut y, Some(&relu), isa).unwrap();
                        for (i, (a, b)) in y.iter().zip(&want).enumerate() {
                            assert!(
                                (a - b).abs() <= 1e-5 * (c as f32).sqrt() * 4.0,
                                "{g:?} {form:?} {isa:?} mapped {mapped} at {i}: {a} against {b}"
                            );
                        }
                    }
                }
            }
        }
    }

    const FORMS: [WinogradForm; 2] = [WinogradForm::F2x2, WinogradForm::F4x4];

    /// `G g Gᵀ` in float64 against the transforms' definition: `Aᵀ ((G g Gᵀ) ⊙ (Bᵀ d B)) A`
    /// of one patch is the direct 3×3 sum, for every output of the tile.
    #[test]
    fn one_tile_of_each_form_is_the_direct_sum() {
        for form in FORMS {
            let (m, a) = (form.side(), form.patch());
            let d = values(a * a, 7);
            let g = values(9, 8);
            let u = transform_filter(&g, form);
            // Bᵀ d B: the rows, then the columns.
            let by_rows: Vec<[f32; 6]> = (0..a)
                .map(|col| {
                    let x: Vec<f32> = (0..a).map(|r| d[r * a + col]).collect();
                    let mut out = [0.0; 6];
                    out[..a].copy_from_slice(&rows_b(&x));
                    out
                })
                .collect();
            let v: Vec<f32> = (0..a * a)
                .map(|ab| {
                    rows_b(&(0..a).map(|col| by_rows[col][ab / a]).collect::<Vec<_>>())[ab % a]
                })
                .collect();
            let prod: Vec<f32> = u.iter().zip(&v).map(|(u, v)| u * v).collect();
            for (r, c) in (0..m * m).map(|i| (i / m, i % m)) {
                let want: f32 = (0..9).map(|k| g[k] * d[(r + k / 3) * a + c + k % 3]).sum();
                let got = rows_a(
                    m,
                    &(0..a)
                        .map(|cc| {
                            rows_a(m, &(0..a).map(|rr| prod[rr * a + cc]).collect::<Vec<_>>())[r]
                        })
                        .collect::<Vec<_>>(),
                )[c];
                assert!(
                    (got - want).abs() < 1e-5,
                    "{form:?} ({r}, {c}): {got} against {want}"
                );
            }
        }
    }

    fn rows_b(x: &[f32]) -> Vec<f32> {
        match x.len() {
            4 => b_rows::<4>(x.try_into().unwrap_or_default()).to_vec(),
            _ => b_rows::<6>(x.try_into().unwrap_or_default()).to_vec(),
        }
    }

    fn rows_a(m: usize, x: &[f32]) -> Vec<f32> {
        match m {
            2 => a_rows::<2, 4>(x.try_into().unwrap_or_default()).to_vec(),
            _ => a_rows::<4, 6>(x.try_into().unwrap_or_default()).to_vec(),
        }
    }

    /// 4 × 4 tiles where they waste little and number enough; 2 × 2 otherwise, or when
    /// asked; none outside the 2 × 2 form's rule.
    #[test]
    fn the_form_follows_the_waste_and_the_tiles() {
        let form = |n, c, f, hw, only| winograd_form(&geom(n, c, f, hw, hw, 1), only);
        let (two, four) = (Some(WinogradForm::F2x2), Some(WinogradForm::F4x4));
        assert_eq!(form(1, 64, 64, 56, None), four);
        assert_eq!(form(1, 64, 64, 56, two), two);
        // 14² computes 16²: a quarter wasted.
        assert_eq!(form(16, 64, 64, 14, None), two);
        assert_eq!(form(16, 64, 64, 14, four), four);
        assert_eq!(form(1, 8, 64, 56, None), None);
        assert_eq!(form(1, 8, 64, 56, four), None);
    }

    #[test]
    fn a_mismatched_weight_is_refused() {
        let g = geom(1, 16, 16, 14, 14, 1);
        let x = values(16 * 14 * 14, 1);
        let wf = WinogradFilters::new(&values(16 * 8 * 9, 2), 16, 8, WinogradForm::F4x4);
        let mut y = vec![0.0; 16 * 14 * 14];
        assert!(conv_forward_winograd(&g, &x, None, &wf, None, &mut y, None).is_err());
        let wf = WinogradFilters::new(&values(16 * 16 * 9, 2), 16, 16, WinogradForm::F2x2);
        let mut short = vec![0.0; 10];
        assert!(conv_forward_winograd(&g, &x, None, &wf, None, &mut short, None).is_err());
    }
}
