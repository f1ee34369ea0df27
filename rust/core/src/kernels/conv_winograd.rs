//! 3×3 stride-1 convolutions at inference as Winograd F(2×2, 3×3) products (Lavin and Gray,
//! "Fast Algorithms for Convolutional Neural Networks", 2015).
//!
//! Each 2×2 block of outputs ("tile") reads a 4×4 patch of the input. Transformed, the
//! patch's 16 values (`Bᵀ d B`) times the filter's 16 transformed values (`G g Gᵀ`, once, at
//! prepare time) sum over the channels into 16 values per filter and tile, and `Aᵀ m A`
//! turns those into the tile's 4 outputs: 16 multiply-adds per channel where the direct sum
//! takes 36, 2.25 times fewer. The sums over the channels are 16 products `(filters ×
//! channels) · (channels × tiles)`, one per transformed position, run by the tiled kernels'
//! register tiles (`conv_tiled::tile_on`) over blocks of [`TILE`] tiles; the transforms
//! around them are a few additions per value.
//!
//! The results differ from the direct sum's in the last bits (the transforms round, and
//! `G`'s halves spread a weight over several products): inference only, where the packed
//! kernels already sum in their own order.

use super::conv::{copy_short, ConvGeom};
use super::conv_packed::SendPtr;
use super::conv_tiled::{k_blocks, tile_on, FilterPanels, InputMap, Tile, MR, TILE};
#[cfg(target_arch = "x86_64")]
use super::conv_winograd_avx2 as avx2;
use super::lanes8::LANES8;
use super::scratch::Scratch;
use super::tuning::{
    WINOGRAD_FEW_FILTERS, WINOGRAD_FEW_FILTERS_MIN_WIDTH, WINOGRAD_MIN_CHANNELS,
    WINOGRAD_MIN_FILTERS, WINOGRAD_MIN_TILES, WINOGRAD_ODD_MIN_SIDE,
};
use super::Isa;
use crate::error::{Error, Result};
use rayon::prelude::*;

/// Values of a transformed patch (4 × 4), one product each.
const ELEMS: usize = 16;

/// A 3×3 weight `(filters, channels, 3, 3)` transformed (`G g Gᵀ`) and packed for the
/// products: element `e` of every filter and channel as [`FilterPanels`] of `(filters,
/// channels)`.
#[derive(Clone, Debug)]
pub struct WinogradFilters {
    elems: Vec<FilterPanels>,
    filters: usize,
    channels: usize,
}

impl WinogradFilters {
    /// Transforms and packs `w (filters, channels, 3, 3)`. Panics if `w` is shorter.
    pub fn new(w: &[f32], filters: usize, channels: usize) -> Self {
        let per_elem = filters * channels;
        let mut u = vec![0.0f32; ELEMS * per_elem];
        for (fc, g) in w.chunks_exact(9).take(per_elem).enumerate() {
            for (e, v) in transform_filter(g).into_iter().enumerate() {
                u[e * per_elem + fc] = v;
            }
        }
        let elems = u
            .chunks_exact(per_elem.max(1))
            .take(ELEMS)
            .map(|w_e| FilterPanels::new(w_e, filters, channels))
            .collect();
        WinogradFilters {
            elems,
            filters,
            channels,
        }
    }
}

/// `G g Gᵀ` of one 3×3 filter `g` (row-major), `G = [1 0 0; ½ ½ ½; ½ −½ ½; 0 0 1]`.
fn transform_filter(g: &[f32]) -> [f32; ELEMS] {
    let expand = |a: f32, b: f32, c: f32| [a, 0.5 * (a + b + c), 0.5 * (a - b + c), c];
    let cols: [[f32; 4]; 3] = [0, 1, 2].map(|j| expand(g[j], g[3 + j], g[6 + j]));
    let mut u = [0.0; ELEMS];
    for i in 0..4 {
        let row = expand(cols[0][i], cols[1][i], cols[2][i]);
        u[4 * i..4 * i + 4].copy_from_slice(&row);
    }
    u
}

/// Whether an inference convolution runs as Winograd products: a 2-D 3×3 window of one
/// group at stride and dilation 1, with at least [`WINOGRAD_MIN_CHANNELS`] channels into
/// [`WINOGRAD_MIN_FILTERS`] filters over [`WINOGRAD_MIN_TILES`] tiles in all. Fewer, and the
/// transforms (per channel and per filter) weigh against products too small to gain, or the
/// transformed weight (16 values per filter and channel against 9) streams through for a
/// handful of tiles: the deep layers at batch 1 stay packed.
///
/// An odd output side below [`WINOGRAD_ODD_MIN_SIDE`] wastes too much of its last tiles
/// (13² outputs compute 14²); fewer than [`WINOGRAD_FEW_FILTERS`] filters need rows of at
/// least [`WINOGRAD_FEW_FILTERS_MIN_WIDTH`] outputs (the input transform per channel is then
/// shared by few filters, and short rows cost it more per tile).
pub fn runs_winograd(g: &ConvGeom) -> bool {
    let side_fits = |side: usize| side.is_multiple_of(2) || side >= WINOGRAD_ODD_MIN_SIDE;
    fits(g)
        && g.channels >= WINOGRAD_MIN_CHANNELS
        && g.filters >= WINOGRAD_MIN_FILTERS
        && Tiles::of(g).count >= WINOGRAD_MIN_TILES
        && side_fits(g.output[1])
        && side_fits(g.output[2])
        && (g.filters >= WINOGRAD_FEW_FILTERS || g.output[2] >= WINOGRAD_FEW_FILTERS_MIN_WIDTH)
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
/// written, for a geometry that [`runs_winograd`] (`map`, when given, applied to each input
/// value as the input transform reads it; the padding stays zero), for any geometry that
/// [`fits`]. Blocks of [`TILE`] tiles
/// run side by side on the pool.
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
    let tiles = Tiles::of(g);
    let blocks = tiles.count.div_ceil(TILE);
    let yp = SendPtr(y.as_mut_ptr());
    let run = |b: usize| {
        let part = Part {
            g,
            x,
            map,
            w,
            bias,
            tiles,
            first: b * TILE,
            count: (tiles.count - b * TILE).min(TILE),
        };
        // SAFETY: block b writes only its own tiles' outputs, all inside `y` (checked above);
        // the CPU has `isa`.
        unsafe { run_part(&part, yp.get(), epilogue, isa) }
    };
    if blocks > 1 && rayon::current_num_threads() > 1 {
        (0..blocks).into_par_iter().for_each(run);
    } else {
        (0..blocks).for_each(run);
    }
    Ok(())
}

/// The grid of 2×2 output tiles over the batch.
#[derive(Clone, Copy)]
struct Tiles {
    /// Tile rows and columns per image.
    rows: usize,
    cols: usize,
    /// Tiles in all.
    count: usize,
}

impl Tiles {
    fn of(g: &ConvGeom) -> Tiles {
        let (rows, cols) = (g.output[1].div_ceil(2), g.output[2].div_ceil(2));
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

/// The distance between the 16 elements' matrices of `rows` rows of [`TILE`] (channels of
/// the transformed patches, filters of the products): a cache line more than the rows, so
/// the 16 stores of one tile's transform land in 16 different L1 sets. At 128 channels the
/// plain distance (24 KB) put all 16 in one 8-way set, and the input transform ran as long
/// as the products.
fn elem_stride(rows: usize) -> usize {
    rows * TILE + 2 * LANES8
}

/// One block: its patches transformed into `v` (16 matrices `channels × TILE`, see
/// [`elem_stride`]), the 16 products into `m` (16 of `filters × TILE`), and `m` transformed
/// into the outputs.
///
/// # Safety
/// `y` holds the whole output; the block's tiles are written by no one else meanwhile; the
/// CPU has `isa`.
unsafe fn run_part(
    p: &Part,
    y: *mut f32,
    epilogue: Option<&(dyn Fn(&mut [f32]) + Sync)>,
    isa: Isa,
) {
    let (c, f) = (p.g.channels, p.g.filters);
    // The AVX2 transforms run whole vectors of tiles past the block's last element.
    let (vs, ms) = (elem_stride(c), elem_stride(f));
    let mut v = Scratch::take(ELEMS * vs + LANES8);
    let mut m = Scratch::take(ELEMS * ms + LANES8);
    transform_input(p, &mut v, isa);
    let panels = f.div_ceil(MR);
    for e in 0..ELEMS {
        let u = &p.w.elems[e].data;
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
    unsafe { transform_output(p, &m, y, epilogue, isa) };
}

/// Every patch of the block as `Bᵀ d B` into `v`: element `e` of channel `ch` and block tile
/// `t` at `e · elem_stride(channels) + ch · TILE + t`. `Bᵀ = [1 0 −1 0; 0 1 1 0; 0 −1 1 0; 0 1 0 −1]`.
/// Per channel and segment, its four input rows are copied once, split by column parity
/// (see [`fill_rows`]), then each tile combines their rows, then the combinations' columns:
/// tile `j`'s columns `2j..2j + 4` are values `j` and `j + 1` of both halves, so the
/// transform runs on plain loads.
fn transform_input(p: &Part, v: &mut [f32], isa: Isa) {
    assert!(
        v.len() >= ELEMS * elem_stride(p.g.channels),
        "Winograd input transform: buffer"
    );
    match isa {
        // SAFETY: the CPU has AVX2.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 | Isa::Avx512 => unsafe { transform_input_avx2(p, v) },
        _ => input_loop::<false>(p, v),
    }
}

/// [`input_loop`] in AVX2 (its helpers inlined into one loop).
///
/// # Safety
/// The CPU supports AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn transform_input_avx2(p: &Part, v: &mut [f32]) {
    input_loop::<true>(p, v)
}

/// See [`transform_input`]; `AVX2`: the CPU has it.
#[inline(always)]
fn input_loop<const AVX2: bool>(p: &Part, v: &mut [f32]) {
    let c = p.g.channels;
    let stride = elem_stride(c);
    // Values j0..=j1 of each parity, with room for a whole vector past them.
    let half = p.tiles.cols + 1 + LANES8;
    let mut rows = Scratch::take(8 * half);
    for s in p.segments() {
        let n = s.j1 - s.j0;
        for ch in 0..c {
            fill_rows::<AVX2>(p, &s, ch, &mut rows, half);
            let at = ch * TILE + s.at;
            #[cfg(target_arch = "x86_64")]
            if AVX2 {
                // SAFETY: the CPU has AVX2; the halves hold n + 1 values and are readable
                // to n + 9 (`half`); element e's n values at at + e · stride lie inside
                // `v` (checked by the caller; the last vector's stores masked to them).
                unsafe { avx2::patches(rows.as_ptr(), half, n, v[at..].as_mut_ptr(), stride) };
                continue;
            }
            patches_plain(&rows, half, n, &mut v[at..], stride);
        }
    }
}

/// Copies input rows `2i − pad .. 2i − pad + 4` of channel `ch` for segment `s` into `rows`:
/// row `a`'s padded columns `2 · j0 + 2q` at `rows[2a · half + q]` and `2 · j0 + 2q + 1` at
/// `rows[(2a + 1) · half + q]`, for `q ≤ j1 − j0`; zero outside the input, through the part's
/// map if it has one. `AVX2`: the CPU has it.
#[inline(always)]
fn fill_rows<const AVX2: bool>(p: &Part, s: &Segment, ch: usize, rows: &mut [f32], half: usize) {
    let g = p.g;
    let (c, ih, iw) = (g.channels, g.input[1], g.input[2]);
    let (ph, pw) = (g.pad[1], g.pad[2]);
    let count = s.j1 - s.j0 + 1;
    let plane = &p.x[(s.n * c + ch) * ih * iw..][..ih * iw];
    for (a, parities) in rows.chunks_exact_mut(2 * half).take(4).enumerate() {
        let input_row = (2 * s.i + a).checked_sub(ph).filter(|&r| r < ih);
        for (parity, dst) in parities.chunks_exact_mut(half).enumerate() {
            let dst = &mut dst[..count];
            // Value q reads input column 2q + first − pw (first = 2·j0 + parity): inside
            // for q in lo..hi.
            let first = 2 * s.j0 + parity;
            let lo = pw.saturating_sub(first).div_ceil(2).min(count);
            let hi = (iw + pw).saturating_sub(first).div_ceil(2).clamp(lo, count);
            match input_row {
                Some(r) if lo < hi => {
                    dst[..lo].fill(0.0);
                    dst[hi..].fill(0.0);
                    let src = &plane[r * iw + 2 * lo + first - pw..(r + 1) * iw];
                    let part = &mut dst[lo..hi];
                    #[cfg(target_arch = "x86_64")]
                    let done = match AVX2 {
                        // SAFETY: the CPU has AVX2; `part` and `src` bound the lengths.
                        true => unsafe {
                            avx2::every_other(
                                part.as_mut_ptr(),
                                src.as_ptr(),
                                part.len(),
                                src.len(),
                            )
                        },
                        false => 0,
                    };
                    #[cfg(not(target_arch = "x86_64"))]
                    let done = 0;
                    for (d, x) in part[done..]
                        .iter_mut()
                        .zip(src[2 * done..].iter().step_by(2))
                    {
                        *d = *x;
                    }
                    if let Some(m) = p.map {
                        m.apply(ch, part);
                    }
                }
                _ => dst.fill(0.0),
            }
        }
    }
}

/// Tiles `0..n` of one channel and segment from its four rows split by parity (see
/// [`fill_rows`]; row `a`'s evens at `rows[2a · half..]`, odds at `rows[(2a + 1) · half..]`):
/// element `4a + b` of tile `j` (at `v[e · stride + j]`) is `Bᵀ`'s row `b` over columns
/// `2j..2j + 4` of `Bᵀ`'s row `a` over the four rows.
fn patches_plain(rows: &[f32], half: usize, n: usize, v: &mut [f32], stride: usize) {
    let b_rows = |[x0, x1, x2, x3]: [f32; 4]| [x0 - x2, x1 + x2, x2 - x1, x1 - x3];
    for j in 0..n {
        // Columns 2j, 2j + 1, 2j + 2, 2j + 3 of each row: evens j, odds j, evens j + 1, odds
        // j + 1.
        let at = |a: usize, col: usize| rows[(2 * a + col % 2) * half + j + col / 2];
        let cols: [[f32; 4]; 4] =
            std::array::from_fn(|col| b_rows([0, 1, 2, 3].map(|a| at(a, col))));
        for a in 0..4 {
            let out = b_rows([cols[0][a], cols[1][a], cols[2][a], cols[3][a]]);
            for (b, x) in out.into_iter().enumerate() {
                v[(4 * a + b) * stride + j] = x;
            }
        }
    }
}

/// The block's outputs from its products `m` (element `e` of filter `k` and block tile `t`
/// at `e · elem_stride(filters) + k · TILE + t`) as `Aᵀ m A + bias`, `Aᵀ = [1 1 1 0; 0 1 −1 −1]`, then
/// `epilogue` over each filter's rows of a segment while they are in cache.
///
/// # Safety
/// `y` holds the whole output, the block's tiles written by no one else meanwhile; the CPU
/// has `isa`; `m` is readable a vector past its last element.
unsafe fn transform_output(
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
        m.len() >= ELEMS * elem_stride(f) + LANES8,
        "Winograd output transform: buffer"
    );
    let segments: Vec<Segment> = p.segments().collect();
    let runs = epilogue_runs(p, &segments);
    // A segment's (up to) two output rows for one filter, whole vectors of tiles.
    let mut out = [[0.0f32; 2 * TILE + 2 * LANES8]; 2];
    for k in 0..f {
        let b = p.bias.map_or(0.0, |b| b[k]);
        for s in &segments {
            let n = s.j1 - s.j0;
            let (x0, x1) = (2 * s.j0, (2 * s.j1).min(ow));
            let y0 = 2 * s.i;
            let at = k * TILE + s.at;
            let [o0, o1] = &mut out;
            match isa {
                // SAFETY: the CPU has AVX2; each element's run of m is readable a vector
                // past its n values (the slack at m's end), the rows hold 2n rounded up to
                // whole vectors.
                #[cfg(target_arch = "x86_64")]
                Isa::Avx2 | Isa::Avx512 => unsafe {
                    avx2::outputs(
                        m[at..].as_ptr(),
                        elem_stride(f),
                        n,
                        b,
                        o0.as_mut_ptr(),
                        o1.as_mut_ptr(),
                    )
                },
                _ => outputs_plain(&m[at..], elem_stride(f), n, b, [o0, o1]),
            }
            let plane = (s.n * f + k) * oh * ow;
            for (r, src) in out.iter().enumerate().take((oh - y0).min(2)) {
                // SAFETY: row y0 + r < oh of filter k, columns x0..x1 ≤ ow: inside `y`, this
                // block's own.
                let dst = unsafe {
                    std::slice::from_raw_parts_mut(y.add(plane + (y0 + r) * ow + x0), x1 - x0)
                };
                copy_short(dst, &src[..x1 - x0]);
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

/// The block's outputs of one filter as runs `(sample, offset in the plane, length)`, as
/// long as they are contiguous: whole tile rows of a sample merge into one run (two output
/// rows each), a partial one gives a run per output row. An epilogue called per segment and
/// filter ran on 16 to 32 values at a time over ResNet's 8² and 16² images.
fn epilogue_runs(p: &Part, segments: &[Segment]) -> Vec<(usize, usize, usize)> {
    let (oh, ow) = (p.g.output[1], p.g.output[2]);
    let mut runs: Vec<(usize, usize, usize)> = Vec::new();
    for s in segments {
        let (x0, x1) = (2 * s.j0, (2 * s.j1).min(ow));
        let (y0, rows) = (2 * s.i, (oh - 2 * s.i).min(2));
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

/// The two output rows of tiles `0..n` of one filter from its 16 products (element `e` of
/// tile `j` at `m[e · stride + j]`): `Aᵀ`'s rows over each column of the 4 × 4, then over
/// the two results' columns, plus `bias`.
fn outputs_plain(m: &[f32], stride: usize, n: usize, bias: f32, out: [&mut [f32]; 2]) {
    let sum3 = |x: f32, y: f32, z: f32| x + y + z;
    let diff3 = |x: f32, y: f32, z: f32| x - y - z;
    let [o0, o1] = out;
    for j in 0..n {
        let mv = |e: usize| m[e * stride + j];
        let t0: [f32; 4] = std::array::from_fn(|c| sum3(mv(c), mv(4 + c), mv(8 + c)));
        let t1: [f32; 4] = std::array::from_fn(|c| diff3(mv(4 + c), mv(8 + c), mv(12 + c)));
        for (t, o) in [(t0, &mut *o0), (t1, &mut *o1)] {
            o[2 * j] = sum3(t[0], t[1], t[2]) + bias;
            o[2 * j + 1] = diff3(t[1], t[2], t[3]) + bias;
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

    /// Within float32 rounding of the direct sum: odd and even sizes (a last tile row or
    /// column of one output), pads 0–2, filter counts off the panel width, channel counts
    /// past one block of the products, blocks spanning rows and samples, a bias, a fused
    /// epilogue and an input map.
    #[test]
    fn winograd_matches_the_direct_sum() {
        let cases = [
            (1, 16, 16, 14, 14, 1),
            (2, 16, 20, 9, 11, 1),
            (3, 17, 16, 7, 6, 0),
            (1, 130, 24, 12, 13, 2),
            (2, 32, 33, 15, 16, 1),
            (1, 16, 16, 40, 5, 1),
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
                let wf = WinogradFilters::new(&w, f, c);
                let m = mapped.then_some(&map);
                for isa in Isa::available() {
                    let mut y = vec![f32::NAN; want.len()];
                    let b = Some(bias.as_slice());
                    forward_on(&g, (&x, m), &wf, b, &mut y, Some(&relu), isa).unwrap();
                    for (i, (a, b)) in y.iter().zip(&want).enumerate() {
                        assert!(
                            (a - b).abs() <= 1e-5 * (c as f32).sqrt() * 4.0,
                            "{g:?} {isa:?} mapped {mapped} at {i}: {a} against {b}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn a_mismatched_weight_is_refused() {
        let g = geom(1, 16, 16, 14, 14, 1);
        let x = values(16 * 14 * 14, 1);
        let wf = WinogradFilters::new(&values(16 * 8 * 9, 2), 16, 8);
        let mut y = vec![0.0; 16 * 14 * 14];
        assert!(conv_forward_winograd(&g, &x, None, &wf, None, &mut y, None).is_err());
        let wf = WinogradFilters::new(&values(16 * 16 * 9, 2), 16, 16);
        let mut short = vec![0.0; 10];
        assert!(conv_forward_winograd(&g, &x, None, &wf, None, &mut short, None).is_err());
    }
}
