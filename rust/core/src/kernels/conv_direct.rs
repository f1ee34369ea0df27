//! Inference convolutions read straight from a zero-padded copy of the image, with no
//! column matrix at all, not even tile by tile.
//!
//! With stride and dilation 1, the column matrix's row for channel `c` and tap `(ty, tx)`
//! is the padded image shifted: in padded-width coordinates (output position `(oy, ox)` at
//! `p = oy · Wp + ox`, `Wp` the padded width) its value at `p` is
//! `xp[c · Hp · Wp + ty · Wp + tx + p]`. So a tile of positions loads each row's vectors
//! from the padded image itself, where [`super::conv_tiled`] first gathers them into L1 row
//! run by row run: DenseNet's 128 → 32 3×3 layers gathered 128 rows for every 4 panels of
//! filters that passed over them, about as long as the products took.
//!
//! A stride `(sh, sw)` splits the padded image into `sh · sw` phases first (rows `≡ a`,
//! columns `≡ b`): tap `(ty, tx)` then reads phase `(ty mod sh, tx mod sw)` shifted by
//! `(ty / sh, tx / sw)`, contiguous again. The first layers of most CNNs (3 channels,
//! stride 2) run this way.
//!
//! The price: the positions at the end of each padded row (`Wp − OW` of them, `(kw − 1) / sw`
//! with a stride) are computed and thrown away (2 of 58 at 56², 2 of 30 at 28²), and the
//! padded copy is written once per sample. The weight is the tiled path's
//! ([`FilterPanels`]); each tile runs every panel over all of `k` in registers, so the whole
//! weight is read per tile: only weights that stay in L2 take this path (see
//! [`runs_direct`]).

use super::conv::ConvGeom;
use super::conv_packed::SendPtr;
use super::conv_tiled::{
    copy_every_other, epilogue_tiles, run_ending_at, FilterPanels, InputMap, LANES, MR,
};
use super::par::{serial_below, SERIAL_BELOW};
use super::scratch::Scratch;
use super::tuning::{DIRECT_MAX_WEIGHT, DIRECT_OWN_PAD_MAX, DIRECT_STRIDED_MAX_ROWS};
use super::Isa;
use crate::error::{Error, Result};
use rayon::prelude::*;
use std::ops::Range;

/// Vectors of positions per tile (of `MR` filters, the tiled path's panels).
const NV: usize = 3;
/// Positions per tile.
const TILE: usize = NV * LANES;

/// Whether an inference convolution runs here, its weight packed as for the tiled path (see
/// [`super::conv_tiled::tiles_weight`]): 2-D, dilation 1, a window wider than 1×1, a phase
/// width of at least one vector (so a vector of positions spans at most two output rows)
/// of which at most an eighth is thrown away (Inception's 1×7 over 17² threw away 6 of 23
/// and ran 60% slower than on the GEMM), and a weight of at most [`DIRECT_MAX_WEIGHT`]
/// values. With a stride, only windows of 4 taps per phase or more, or columns of at most
/// [`DIRECT_STRIDED_MAX_ROWS`] rows: the tiled path's gather reads each input value once per
/// tap of its phase, which is what this path saves, and it then pays for the split copy.
/// The 7×7/2 first layer (3 → 64 over 224²) ran in 0.83 ms against 1.11 tiled at batch 1
/// and 13.0 against 21.7 on the GEMM at batch 16; 3×3/2 layers over many channels ran up to
/// 15% slower (64 → 128 over 56²).
/// Over 3 channels (27 rows) the gather was as long as the product of few panels: 3 → 8
/// over 64² at batch 16 took 0.12 ms here against 0.29 on the GEMM and 0.34 tiled in
/// MobileNet-0.25, 3 → 32 over 224² 0.22 against 0.27 tiled (one thread).
pub fn runs_direct(g: &ConvGeom) -> bool {
    let plain = g.input[0] == 1
        && g.kernel[0] == 1
        && g.output[0] == 1
        && g.pad[0] == 0
        && g.stride[0] == 1
        && g.stride[1] > 0
        && g.stride[2] > 0
        && g.dilate == [1, 1, 1]
        && g.groups == 1
        && g.kernel_len() > 1;
    // (The phase sizes need the strides and the window checked above.)
    plain && {
        let (phases, (_, wq)) = (phases(g), padded(g));
        (phases == 1 || g.kernel_len() >= 4 * phases || g.col_rows() <= DIRECT_STRIDED_MAX_ROWS)
            && wq >= LANES
            && 8 * (wq - g.output[2]) <= wq
            && g.filters * g.col_rows() <= DIRECT_MAX_WEIGHT
    }
}

/// The sizes of one phase of the padded image: rows, columns (each output row and column
/// plus the window's reach in the phase).
fn padded(g: &ConvGeom) -> (usize, usize) {
    (
        g.output[1] + (g.kernel[1] - 1) / g.stride[1],
        g.output[2] + (g.kernel[2] - 1) / g.stride[2],
    )
}

/// Phases of the padded image per channel.
fn phases(g: &ConvGeom) -> usize {
    g.stride[1] * g.stride[2]
}

/// Each column-matrix row's offset in the padded image: channel, then tap row, then tap
/// column (im2col's row order), each tap in its phase.
fn row_offsets(g: &ConvGeom) -> Vec<usize> {
    let (hq, wq) = padded(g);
    let [_, sh, sw] = g.stride;
    let [kh, kw] = [g.kernel[1], g.kernel[2]];
    let plane = phases(g) * hq * wq;
    (0..g.channels)
        .flat_map(|ci| {
            (0..kh * kw).map(move |t| {
                let (ty, tx) = (t / kw, t % kw);
                let phase = (ty % sh) * sw + tx % sw;
                ci * plane + phase * hq * wq + ty / sh * wq + tx / sw
            })
        })
        .collect()
}

/// Values of one sample's padded image with its slack: the last tile reads up to a tile
/// past the last row of the last phase.
fn padded_len(g: &ConvGeom) -> usize {
    let (hq, wq) = padded(g);
    g.channels * phases(g) * hq * wq + g.kernel[2] + TILE
}

/// [`super::conv::conv_forward`] for a geometry that [`runs_direct`], with the weight packed
/// ahead ([`FilterPanels`] of `(filters, col_rows)`, rows in im2col's order; the operands
/// checked by the caller, `conv_tiled::conv_forward_tiled`): per sample, a zero-padded copy
/// of its image, then tiles of positions through every panel — in the registers `isa`
/// names, else in plain loops — the bias added as they are stored;
/// `epilogue` runs over each part's outputs. Samples run side by side when that pays, else
/// each sample's tiles split across the pool.
pub(super) fn forward(
    g: &ConvGeom,
    (x, map): (&[f32], Option<&InputMap>),
    w: &FilterPanels,
    bias: Option<&[f32]>,
    y: &mut [f32],
    epilogue: Option<&(dyn Fn(&mut [f32]) + Sync)>,
    isa: Isa,
) -> Result<()> {
    if !runs_direct(g) {
        return Err(Error::Msg(format!(
            "internal: direct conv: geometry {g:?} does not run here"
        )));
    }
    let (c, f, l, il) = (g.channels, g.filters, g.out_len(), g.in_len());
    if f * l == 0 {
        return Ok(());
    }
    let offsets = row_offsets(g);
    let plen = padded_len(g);
    let sample = |(n, y_n): (usize, &mut [f32]), inner: bool| {
        let pr = Direct {
            g,
            w,
            src: (&x[n * c * il..(n + 1) * c * il], map),
            plen,
            offsets: &offsets,
            bias,
            epilogue,
        };
        pr.run(y_n, inner, isa);
        Ok(())
    };
    g.per_sample(y, sample)
}

/// Writes `x_n (channels, input)` (through `map`, if any) into `xp` zero-padded and split
/// into phases, `(channels, phases, Hq, Wq)`: phase `(a, b)`'s value `(i, j)` is the padded
/// image's `(i·sh + a, j·sw + b)`. Then zeros the slack after it; the phase planes split
/// across the pool when `split` and the copy is large (by channel, an image of 3 channels
/// left one thread a third of the work and the other two thirds).
fn pad_image(g: &ConvGeom, (x_n, map): (&[f32], Option<&InputMap>), xp: &mut [f32], split: bool) {
    let (hq, wq) = padded(g);
    let [_, ih, iw] = g.input;
    let [_, sh, sw] = g.stride;
    let [_, ph, pw] = g.pad;
    let phase_count = phases(g);
    let (planes, slack) = xp.split_at_mut(g.channels * phase_count * hq * wq);
    slack.fill(0.0);
    // The phase's columns j that fall inside the input (ix = j·sw + b − pw), as a range.
    let inside = |b: usize| {
        let lo = (pw.saturating_sub(b)).div_ceil(sw);
        let hi = (iw + pw).saturating_sub(b).div_ceil(sw).min(wq);
        (lo.min(hi), hi)
    };
    let phase_plane = |(u, q): (usize, &mut [f32])| {
        let (ci, phase) = (u / phase_count, u % phase_count);
        let src = &x_n[ci * ih * iw..(ci + 1) * ih * iw];
        let (a, b) = (phase / sw, phase % sw);
        let (lo, hi) = inside(b);
        for (i, row) in q.chunks_exact_mut(wq).enumerate() {
            let iy = (i * sh + a).checked_sub(ph).filter(|&iy| iy < ih);
            let Some(iy) = iy else {
                row.fill(0.0);
                continue;
            };
            row[..lo].fill(0.0);
            row[hi..].fill(0.0);
            if lo == hi {
                continue;
            }
            let first = lo * sw + b - pw;
            let run = &src[iy * iw + first..(iy + 1) * iw];
            match (sw, map) {
                (1, Some(m)) => m.apply_into(ci, run, &mut row[lo..hi]),
                (1, None) => row[lo..hi].copy_from_slice(&run[..hi - lo]),
                _ => {
                    if sw == 2 {
                        copy_every_other(&mut row[lo..hi], run);
                    } else {
                        for (d, v) in row[lo..hi].iter_mut().zip(run.iter().step_by(sw)) {
                            *d = *v;
                        }
                    }
                    if let Some(m) = map {
                        m.apply(ci, &mut row[lo..hi]);
                    }
                }
            }
        }
    };
    if split && planes.len() >= SERIAL_BELOW {
        planes
            .par_chunks_mut(hq * wq)
            .enumerate()
            .for_each(phase_plane);
    } else {
        planes.chunks_mut(hq * wq).enumerate().for_each(phase_plane);
    }
}

/// One sample's product: the operands its parts share.
struct Direct<'a> {
    g: &'a ConvGeom,
    w: &'a FilterPanels,
    /// The sample's image and the map it goes through, and the length of its padded copy
    /// (see [`pad_image`]).
    src: (&'a [f32], Option<&'a InputMap<'a>>),
    plen: usize,
    /// Each row's offset in `xp`.
    offsets: &'a [usize],
    bias: Option<&'a [f32]>,
    epilogue: Option<&'a (dyn Fn(&mut [f32]) + Sync)>,
}

impl Direct<'_> {
    /// The zero-padded image ([`pad_image`]), then all tiles into `y (filters, out_len)`; with
    /// `split`, the tiles are shared among the pool's threads when the work is large enough,
    /// each part padding its own copy of a small image. `isa`: see [`Direct::part`].
    fn run(&self, y: &mut [f32], split: bool, isa: Isa) {
        let (_, wp) = padded(self.g);
        let positions = self.g.output[1] * wp;
        let tiles = positions.div_ceil(TILE);
        let (f, k) = (self.w.filters(), self.w.k());
        let threads = rayon::current_num_threads();
        let big = split && f * positions * k >= serial_below() * 4 && tiles >= 2 * threads;
        let yp = SendPtr(y.as_mut_ptr());
        let part = |ts: Range<usize>, xp: &[f32]| {
            // SAFETY: parts cover disjoint positions of `y`, which holds (filters, out_len).
            unsafe { self.part(xp, ts, yp.get(), isa) }
        };
        if big && self.plen <= DIRECT_OWN_PAD_MAX {
            // Each part pads its own copy, in its own core's cache: reading the whole of one
            // copy from the other core's cache cost more than padding twice (DenseNet's 128 →
            // 32 at 14²: 79 µs against 90; 64 → 64 at 16², 67 against 82).
            (0..threads).into_par_iter().for_each(|i| {
                let mut xp = Scratch::take(self.plen);
                pad_image(self.g, self.src, &mut xp, false);
                part(i * tiles / threads..(i + 1) * tiles / threads, &xp)
            });
        } else if big {
            let mut xp = Scratch::take(self.plen);
            pad_image(self.g, self.src, &mut xp, split);
            (0..threads)
                .into_par_iter()
                .for_each(|i| part(i * tiles / threads..(i + 1) * tiles / threads, &xp));
        } else {
            let mut xp = Scratch::take(self.plen);
            pad_image(self.g, self.src, &mut xp, split);
            part(0..tiles, &xp);
        }
    }

    /// Tiles `ts` through every panel, the epilogue over their outputs run by run.
    ///
    /// # Safety
    /// `y` holds the `(filters, out_len)` output; the CPU has `isa`.
    unsafe fn part(&self, xp: &[f32], ts: Range<usize>, y: *mut f32, isa: Isa) {
        let (_, wp) = padded(self.g);
        let [_, oh, ow] = self.g.output;
        let positions = oh * wp;
        let (f, l) = (self.w.filters(), self.g.out_len());
        let run = epilogue_tiles(f);
        #[cfg(target_arch = "x86_64")]
        let mut sums = Scratch::take(match isa {
            Isa::Avx2 => avx2::sums_len(self.w.panels()),
            _ => 0,
        });
        for t in ts.clone() {
            let p0 = t * TILE;
            let n = (positions - p0).min(TILE);
            let out = Stores { p0, n, wp, ow, oh };
            // Where each vector's lanes go, worked out once for all the panels (two
            // divisions a vector cost a fifth of a 27-row layer's time when made per panel).
            let stores: [_; NV] = std::array::from_fn(|v| out.vector(v * LANES));
            let tile = |panel: usize| {
                let f0 = panel * MR;
                Tile {
                    w: self.w.data[panel * self.w.k() * MR..].as_ptr(),
                    xp: xp[p0..].as_ptr(),
                    offsets: self.offsets,
                    rows: MR.min(f - f0),
                    bias: self.bias.map(|b| b[f0..].as_ptr()),
                    out,
                    stores: &stores,
                }
            };
            // SAFETY (both arms): the tiles' outputs lie inside `y` (the caller's contract);
            // their loads inside the padded image and its slack (see `forward`).
            match isa {
                #[cfg(target_arch = "x86_64")]
                Isa::Avx2 => unsafe {
                    let shape = (self.w.panels(), self.w.k() * MR, f);
                    avx2::tile(&tile(0), shape, sums.as_mut_ptr(), y, l)
                },
                _ => {
                    for panel in 0..self.w.panels() {
                        let (t, yt) = (tile(panel), unsafe { y.add(panel * MR * l) });
                        unsafe {
                            match isa {
                                #[cfg(target_arch = "x86_64")]
                                Isa::Avx512 => avx512::tile(&t, yt, l),
                                _ => tile_plain(&t, yt, l),
                            }
                        }
                    }
                }
            }
            // The epilogue over runs of tiles while they are in cache (see `epilogue_tiles`).
            // A run's kept positions are one run of the output's flat ones.
            if let (Some(e), Some(from)) = (self.epilogue, run_ending_at(&ts, t, run)) {
                let first = Stores::flat_from(from * TILE, wp, ow, oh);
                let end = Stores::flat_from(p0 + n, wp, ow, oh);
                for fi in 0..f {
                    // SAFETY: row fi's positions first..end belong to this part alone.
                    e(unsafe {
                        std::slice::from_raw_parts_mut(y.add(fi * l + first), end - first)
                    });
                }
            }
        }
    }
}

/// Where a tile's positions go in the output: `p0 + i` (padded-width coordinates) is output
/// row `(p0 + i) / Wp`, column `(p0 + i) % Wp`, kept when the column is below `OW`.
#[derive(Clone, Copy)]
struct Stores {
    p0: usize,
    /// Positions in the tile.
    n: usize,
    wp: usize,
    ow: usize,
    oh: usize,
}

impl Stores {
    /// The flat output position of padded position `p`, or of the first kept one after it.
    fn flat_from(p: usize, wp: usize, ow: usize, oh: usize) -> usize {
        let (oy, ox) = (p / wp, p % wp);
        if ox < ow {
            oy * ow + ox
        } else {
            ((oy + 1) * ow).min(oh * ow)
        }
    }

    /// The flat output position of the tile's `i`-th position, if kept.
    fn flat(&self, i: usize) -> Option<usize> {
        let p = self.p0 + i;
        let (oy, ox) = (p / self.wp, p % self.wp);
        (i < self.n && ox < self.ow && oy < self.oh).then_some(oy * self.ow + ox)
    }

    /// For the vector of positions `i..i + 16`: the two stores that put its kept lanes in
    /// place, `(flat position of lane 0, lane mask)` for the lanes in its first output row
    /// and in the next (a vector spans at most two rows: `OW ≥ 16`). The flat positions are
    /// those lane 0 would have, so lane `j` lands at `base + j`.
    fn vector(&self, i: usize) -> [(isize, u16); 2] {
        let p = self.p0 + i;
        let (oy, ox) = (p / self.wp, p % self.wp);
        let lanes = self.n.saturating_sub(i).min(LANES);
        let upto = |n: usize| ((1u32 << n) - 1) as u16;
        let live = upto(lanes);
        // First row: lanes j with ox + j < OW.
        let first = upto(self.ow.saturating_sub(ox).min(LANES)) & live;
        // Next row: lanes j ≥ Wp − ox (its columns from 0), while that row exists.
        let next_from = self.wp - ox;
        let next = if next_from < LANES && oy + 1 < self.oh {
            !upto(next_from) & live
        } else {
            0
        };
        let base = (oy * self.ow) as isize + ox as isize;
        [
            (base, first),
            (base + self.ow as isize - self.wp as isize, next),
        ]
    }
}

/// One tile: a panel of `rows` filters over `TILE` positions.
struct Tile<'a> {
    /// The panel: `k` rows of `MR` filters.
    w: *const f32,
    /// The padded image from the tile's first position on.
    xp: *const f32,
    offsets: &'a [usize],
    rows: usize,
    bias: Option<*const f32>,
    out: Stores,
    /// `out.vector` of each vector of the tile.
    stores: &'a [[(isize, u16); 2]; NV],
}

/// See [`Direct::part`]: one tile in plain loops, each output summing over `k` in order.
///
/// # Safety
/// The tile's rows `..t.rows` of `y` (`ldy` apart) hold its kept positions; `t.xp` reads
/// `offsets[r] + i` for every row and position.
unsafe fn tile_plain(t: &Tile, y: *mut f32, ldy: usize) {
    for i in 0..t.rows {
        for j in 0..TILE {
            let Some(q) = t.out.flat(j) else { continue };
            let mut s = 0.0f32;
            for (r, &off) in t.offsets.iter().enumerate() {
                // SAFETY: the caller's contract.
                s += unsafe { *t.w.add(r * MR + i) * *t.xp.add(off + j) };
            }
            // SAFETY: the caller's contract.
            unsafe { *y.add(i * ldy + q) = s + t.bias.map_or(0.0, |b| *b.add(i)) };
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use super::{Tile, MR, NV};
    use crate::kernels::conv_tiled::avx512::panel_row;
    use std::arch::x86_64::*;

    /// See `super::tile_plain`: `MR` filters × `NV` vectors in registers over all of `k`,
    /// the bias added, each vector's kept lanes stored in its one or two output rows.
    ///
    /// # Safety
    /// The CPU supports AVX-512F; `tile_plain`'s contract.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn tile(t: &Tile, y: *mut f32, ldy: usize) {
        let mut acc = [[_mm512_setzero_ps(); NV]; MR];
        // SAFETY (whole body): the caller's contract; the panel holds k rows of MR values.
        unsafe {
            for (r, &off) in t.offsets.iter().enumerate() {
                panel_row(&mut acc, t.w.add(r * MR), t.xp.add(off));
            }
            for (i, row) in acc.iter().enumerate().take(t.rows) {
                let add = t
                    .bias
                    .map_or(_mm512_setzero_ps(), |b| _mm512_set1_ps(*b.add(i)));
                let yr = y.add(i * ldy);
                for (&a, st) in row.iter().zip(t.stores) {
                    let v = _mm512_add_ps(a, add);
                    for &(base, mask) in st {
                        if mask != 0 {
                            _mm512_mask_storeu_ps(yr.wrapping_offset(base), mask, v);
                        }
                    }
                }
            }
        }
    }
}

/// See `conv_tiled::avx2`: the tiles as sub-tiles of 4 filters × 3 vectors of 8 positions
/// in AVX2 registers, the same FMAs in the same order as the AVX-512 kernel.
#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::{Tile, MR, TILE};
    use crate::kernels::conv_tiled::avx2::{sum_rows, SUB_POSITIONS, SUB_ROWS, SUB_VECTORS};
    use crate::kernels::lanes8::{store_lanes, LANES8};
    use crate::kernels::sub_tile_avx2::offset_rows;
    use std::arch::x86_64::*;

    /// Rows of `k` per chunk. A sub-tile reads its rows of the padded image (3 vectors a
    /// row) once per four filters; over all of `k` at once (1152 rows for DenseNet's
    /// 128 → 32 3×3) they came from L2 every time, which held a core to half the FMA rate
    /// and kept a second core from adding anything. A chunk's rows stay in L1 while every
    /// panel passes over them.
    const KC: usize = 64;

    /// Values of the sums a tile keeps between chunks: every panel's `MR × TILE`.
    pub(super) fn sums_len(panels: usize) -> usize {
        panels * MR * TILE
    }

    /// See `super::tile_plain`, for all `panels` at once: `t` is panel 0's tile, panel `p`
    /// reads its weight from `t.w + p · panel_len` and writes filters `p · MR..` of the
    /// `filters`; `k` runs in chunks of [`KC`] rows, filters by fours, positions by halves
    /// of the tile, the sums between chunks in `sums` ([`sums_len`] values), each vector's
    /// kept lanes stored in its one or two output rows after the last.
    ///
    /// # Safety
    /// The CPU supports AVX2 and FMA; `tile_plain`'s contract for every panel; `sums` holds
    /// [`sums_len`]`(panels)` values.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn tile(
        t: &Tile,
        (panels, panel_len, filters): (usize, usize, usize),
        sums: *mut f32,
        y: *mut f32,
        ldy: usize,
    ) {
        const { assert!(2 * SUB_POSITIONS == TILE && 2 * SUB_ROWS == MR) };
        let vectors = t.out.n.div_ceil(LANES8);
        let chunks = t.offsets.len().div_ceil(KC);
        for (c, offsets) in t.offsets.chunks(KC).enumerate() {
            let (first, last) = (c == 0, c + 1 == chunks);
            for p in 0..panels {
                let f0 = p * MR;
                let part = Part {
                    // SAFETY (these three): panel p's weight, bias and output rows.
                    w: unsafe { t.w.add(p * panel_len + c * KC * MR) },
                    rows: MR.min(filters - f0),
                    bias: t.bias.map(|b| unsafe { b.add(f0) }),
                    y: unsafe { y.add(f0 * ldy) },
                    offsets,
                    first,
                    last,
                };
                for half in 0..2 {
                    for r0 in (0..part.rows).step_by(SUB_ROWS) {
                        let slot = ((p * 2 + half) * 2 + r0 / SUB_ROWS) * SUB_POSITIONS * SUB_ROWS;
                        // SAFETY: forwarded; the sub-tile's rows and positions lie in the
                        // tile, its slot in `sums`.
                        unsafe {
                            let s = sums.add(slot);
                            match vectors.saturating_sub(half * SUB_VECTORS) {
                                0 => break,
                                1 => sub_tile::<1>(t, &part, r0, half, s, ldy),
                                2 => sub_tile::<2>(t, &part, r0, half, s, ldy),
                                _ => sub_tile::<3>(t, &part, r0, half, s, ldy),
                            }
                        }
                    }
                }
            }
        }
    }

    /// One panel's share of one chunk of `k`.
    struct Part<'a> {
        /// The panel's weight from the chunk's first row.
        w: *const f32,
        rows: usize,
        bias: Option<*const f32>,
        /// The panel's first output row.
        y: *mut f32,
        offsets: &'a [usize],
        first: bool,
        last: bool,
    }

    /// Filters `r0..` (up to `SUB_ROWS`, the panel's rows) × `V` vectors from the tile's
    /// half `half` over the chunk's rows: from zero on the first chunk, else from `sums`;
    /// into `sums`, and after the last chunk from there into the output with the bias.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn sub_tile<const V: usize>(
        t: &Tile,
        p: &Part,
        r0: usize,
        half: usize,
        sums: *mut f32,
        ldy: usize,
    ) {
        let q = half * SUB_POSITIONS;
        let slot = |i: usize, v: usize| (i * SUB_VECTORS + v) * LANES8;
        // SAFETY (whole body): the caller's contract; the panel holds the chunk's rows of MR
        // values (r0 + SUB_ROWS ≤ MR), every row's loads stay in the tile's positions, and
        // `sums` holds SUB_ROWS × SUB_POSITIONS values.
        unsafe {
            let (w, b) = (p.w.add(r0), t.xp.add(q));
            if V == SUB_VECTORS {
                // A full sub-tile's sums stay in `sums` (see `offset_rows`).
                offset_rows(sums, p.first, w, MR, b, p.offsets);
            } else {
                let mut acc = [[_mm256_setzero_ps(); V]; SUB_ROWS];
                if !p.first {
                    for (i, row) in acc.iter_mut().enumerate() {
                        for (v, a) in row.iter_mut().enumerate() {
                            *a = _mm256_loadu_ps(sums.add(slot(i, v)));
                        }
                    }
                }
                sum_rows(&mut acc, w, b, p.offsets);
                for (i, row) in acc.iter().enumerate() {
                    for (v, &a) in row.iter().enumerate() {
                        _mm256_storeu_ps(sums.add(slot(i, v)), a);
                    }
                }
            }
            if !p.last {
                return;
            }
            // Plain loops: built from closures (`array::map`), the stores' bookkeeping was not
            // inlined and took a tenth of a 27-row first layer's time.
            let rows = (p.rows - r0).min(SUB_ROWS);
            let mut add = [_mm256_setzero_ps(); SUB_ROWS];
            if let Some(b) = p.bias {
                for (i, a) in add.iter_mut().enumerate().take(rows) {
                    *a = _mm256_set1_ps(*b.add(r0 + i));
                }
            }
            // Vector v of the half is lanes (v8 % 2)·8.. of the tile's 16-lane vector v8 / 2.
            let mut stores = [[(0isize, 0u16); 2]; V];
            for (v, st) in stores.iter_mut().enumerate() {
                let v8 = half * SUB_VECTORS + v;
                let shift = v8 % 2 * LANES8;
                for (s, &(base, mask)) in st.iter_mut().zip(&t.stores[v8 / 2]) {
                    *s = (base + shift as isize, (mask >> shift) & 0xff);
                }
            }
            for (i, &a) in add.iter().enumerate().take(rows) {
                let yr = p.y.add((r0 + i) * ldy);
                for (v, st) in stores.iter().enumerate() {
                    let out = _mm256_add_ps(_mm256_loadu_ps(sums.add(slot(i, v))), a);
                    for &(base, bits) in st {
                        store_lanes(yr.wrapping_offset(base), bits, out);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::conv::tests::mk;
    use crate::kernels::conv::{conv_forward, conv_forward_tiled};

    fn geom(
        c: usize,
        f: usize,
        hw: [usize; 2],
        k: [usize; 2],
        pad: [usize; 2],
        s: [usize; 2],
    ) -> ConvGeom {
        let to3 = |v: [usize; 2], lead| [lead, v[0], v[1]];
        let (input, kernel) = (to3(hw, 1), to3(k, 1));
        mk(1, c, f, 1, input, kernel, to3(s, 1), [1; 3], to3(pad, 0))
    }

    /// Every tile kernel the CPU has against the im2col path (and the widest, through
    /// `conv_forward_tiled`, bit for bit against itself called here): strides (even and odd widths, a window wider than the stride), filter tails,
    /// positions ending mid-vector and mid-row, no padding and more padding than the window
    /// needs, a batch, bias and an epilogue; what lies outside the output is never written.
    #[test]
    fn direct_matches_the_gemm_path() {
        // Not idempotent: an output the epilogue passed over twice (or never) shows.
        let relu = |v: &mut [f32]| v.iter_mut().for_each(|x| *x = x.max(0.0) + 0.5);
        for (batch, c, f, hw, k, pad, stride) in [
            // strided: phases of the padded image (the first layers of most CNNs)
            (2, 3, 10, [40, 60], [7, 7], [3, 3], [2, 2]),
            (1, 3, 64, [41, 41], [4, 4], [0, 0], [2, 2]),
            (1, 5, 9, [33, 37], [5, 5], [1, 1], [2, 2]),
            (1, 4, 6, [20, 50], [7, 4], [2, 1], [3, 2]),
            (1, 4, 6, [20, 31], [3, 3], [1, 1], [2, 1]),
            // a 3×3/2 window over 3 channels (few column rows), many filters: the
            // epilogue in runs of tiles
            (2, 3, 300, [64, 64], [3, 3], [1, 1], [2, 2]),
            // a padded image large enough that its phase planes split across the pool
            (1, 3, 8, [224, 224], [3, 3], [1, 1], [2, 2]),
            // stride 1
            (1, 3, 5, [20, 24], [3, 3], [1, 1], [1, 1]),
            (1, 16, 64, [55, 55], [3, 3], [1, 1], [1, 1]),
            (2, 7, 13, [9, 30], [3, 5], [1, 2], [1, 1]),
            (1, 4, 8, [26, 26], [3, 3], [0, 0], [1, 1]),
            (3, 5, 9, [17, 40], [5, 5], [2, 2], [1, 1]),
            (1, 2, 3, [16, 20], [3, 3], [3, 3], [1, 1]),
            (1, 130, 17, [28, 28], [3, 3], [1, 1], [1, 1]),
            // split across the pool over one padded image shared by the parts (large) or
            // padded by each part (small)
            (1, 40, 8, [60, 60], [3, 3], [1, 1], [1, 1]),
            (1, 16, 64, [40, 40], [3, 3], [1, 1], [1, 1]),
            // rows narrower than a vector (a vector spans the end of one and the next)
            (1, 9, 10, [14, 14], [3, 3], [1, 1], [1, 1]),
            (2, 6, 7, [17, 17], [7, 1], [3, 0], [1, 1]),
            (1, 6, 7, [17, 17], [1, 3], [0, 1], [1, 1]),
        ] {
            let g = ConvGeom {
                batch,
                ..geom(c, f, hw, k, pad, stride)
            };
            assert!(runs_direct(&g), "{g:?}");
            let x: Vec<f32> = (0..batch * c * g.in_len())
                .map(|i| ((i * 7) % 13) as f32 / 6.0 - 1.0)
                .collect();
            let w: Vec<f32> = (0..f * g.col_rows())
                .map(|i| ((i * 5) % 11) as f32 / 10.0 - 0.5)
                .collect();
            let b: Vec<f32> = (0..f).map(|i| i as f32 * 0.1 - 0.4).collect();
            let mut want = vec![0.0f32; batch * f * g.out_len()];
            conv_forward(&g, &x, &w, Some(&b), &mut want, None).unwrap();
            relu(&mut want);
            let panels = FilterPanels::new(&w, f, g.col_rows());
            // Through the packed-weight entry point, which hands the geometry here.
            let mut entry = vec![f32::NAN; batch * f * g.out_len()];
            conv_forward_tiled(&g, &x, None, &panels, Some(&b), &mut entry, Some(&relu)).unwrap();
            for isa in Isa::available() {
                let mut got = vec![f32::NAN; batch * f * g.out_len() + 5];
                let out = &mut got[..batch * f * g.out_len()];
                forward(&g, (&x, None), &panels, Some(&b), out, Some(&relu), isa).unwrap();
                for (i, (a, e)) in got.iter().zip(&want).enumerate() {
                    assert!(
                        (a - e).abs() <= 1e-4 * (1.0 + e.abs()),
                        "{isa:?} {g:?} [{i}]: {a} vs {e}"
                    );
                }
                if isa == Isa::detect() {
                    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                    assert_eq!(bits(&entry), bits(&got[..entry.len()]), "{g:?}");
                }
                assert!(
                    got[want.len()..].iter().all(|v| v.is_nan()),
                    "wrote past the end"
                );
            }
        }
    }
}
