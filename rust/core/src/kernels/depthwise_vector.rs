//! Depthwise forward with AVX-512 vectors (or AVX2 ones, in `depthwise_vector_avx2`), straight
//! from the NCHW input without copying it:
//! - **Planes in a vector** (input and output planes of at most 16 values: 4×4, 2×2, 1×1;
//!   with AVX2, planes of 9 to 16 values take two vectors of 8 as one of 16):
//!   as many whole planes as fit are one load; each tap is one permutation of that vector
//!   (zeros where the window hangs over the padding) times the planes' weights.
//! - **Rows in vectors** (column stride 1 or 2, any width): each output row is one or more
//!   vectors and each tap one masked load of an input row (stride 2 keeps every other value
//!   of two loads; with AVX2, one load from the row split by column parity); four rows run
//!   side by side so the sums do not wait on each other. A plane's weights are broadcast
//!   once, the input rows of each tile chosen once (a row of zeros over the padding), and
//!   3×3 windows get fully unrolled taps. Stride-2 rows of at most half a vector go two to a
//!   vector.
//!
//! The stacked-plane layout of `depthwise::stack_forward` (for other CPUs and strides)
//! spends more on its padded copies, per-row moves and passes over an accumulator than on
//! the taps: MobileNet v2's 144-channel 3×3 at 56², batch 16, ran in 3.1 ms there against
//! 2.0 here. Both kernels sum the taps in its order with its operations (a padding tap adds
//! `w · 0` there too), so all paths give the same bits; the tests compare them exactly.

use super::conv::ConvGeom;
use super::depthwise::depthwise_planes_per_task;
use super::par;
use super::{has_avx2_fma, has_avx512};

/// Values in one AVX-512 vector, and the most of any vector the tables here describe.
pub(super) const LANES: usize = 16;

/// Values in one AVX2 vector.
pub(super) const LANES_AVX2: usize = 8;

/// Output rows the row kernel computes side by side.
pub(super) const ROWS: usize = 4;

/// The values per vector of the kernels this CPU runs: AVX-512F's 16, else AVX2's 8 (with
/// FMA, as x86-64-v3 has it), else none (the kernels here do not run).
fn lanes() -> Option<usize> {
    if has_avx512() {
        Some(LANES)
    } else if has_avx2_fma() {
        Some(LANES_AVX2)
    } else {
        None
    }
}

/// Which kernel of this module takes a depthwise geometry, if any.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum VectorKernel {
    PlanesInVector,
    RowsInVector,
}

/// The kernel for `g` (None: `depthwise::stack_forward` takes it), on a CPU with AVX-512 or
/// AVX2.
pub(super) fn vector_kernel(g: &ConvGeom) -> Option<VectorKernel> {
    // (None on a CPU with neither.)
    lanes()?;
    if g.in_len() <= LANES && g.out_len() <= LANES {
        Some(VectorKernel::PlanesInVector)
    } else if g.stride[2] <= 2 {
        Some(VectorKernel::RowsInVector)
    } else {
        None
    }
}

/// `depthwise::depthwise_forward` through `kernel` (from [`vector_kernel`] of `g`; lengths
/// checked, at least one output value): planes in parallel chunks, each chunk's output then
/// run through `epilogue` at once while it is in cache.
pub(super) fn vector_forward(
    kernel: VectorKernel,
    g: &ConvGeom,
    x: &[f32],
    w: &[f32],
    bias: Option<&[f32]>,
    y: &mut [f32],
    epilogue: Option<&(dyn Fn(&mut [f32]) + Sync)>,
) {
    let l = g.out_len();
    // (`vector_kernel` found some.)
    let lanes = lanes().unwrap_or(LANES);
    // AVX2 takes planes of more than 8 values as two vectors of 8: one of 16 lanes, as
    // AVX-512's (the rows kernel spent more on each 4×4 plane's rows than on its taps).
    let largest = g.in_len().max(l);
    let plane_lanes = if largest > lanes { LANES } else { lanes };
    // Chunks of whole vectors of planes.
    let per_vector = match kernel {
        VectorKernel::PlanesInVector => plane_lanes / largest,
        VectorKernel::RowsInVector => 1,
    };
    // Tasks of about `depthwise_planes_per_task` planes, as many as a multiple of the pool's
    // threads so that each thread gets the same share (MobileNet-0.25's 2048 planes of 4×4
    // made 10 tasks of 227, then 3 of 910 at stride 2: one thread did the most of them).
    let planes = y.len() / l.max(1);
    let threads = rayon::current_num_threads().max(1);
    let tasks = planes
        .div_ceil(depthwise_planes_per_task(g))
        .next_multiple_of(threads);
    let per_task = planes.div_ceil(tasks).next_multiple_of(per_vector);
    // What the kernel's vectors share, made once per call.
    #[cfg(target_arch = "x86_64")]
    let tables = match kernel {
        VectorKernel::PlanesInVector => Tables::Planes(TapTable::new(g, w, bias, plane_lanes)),
        VectorKernel::RowsInVector => Tables::Rows(row_columns(g, lanes)),
    };
    // Parallel when the multiply-adds are (as `depthwise::depthwise_parallel` counts them).
    let work = g.batch * g.channels * l * g.kernel_len();
    par::for_each_row_mut_by_work(y, per_task * l, work, |i, out| {
        let p0 = i * per_task;
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `vector_kernel` checked the CPU for AVX-512F (16 lanes) or AVX2 and FMA (8);
        // the tables are for those lanes (AVX2's planes table for 16 where a plane needs
        // them); the caller checked the lengths, `out` holds whole planes from plane p0.
        unsafe {
            match (&tables, lanes == LANES) {
                (Tables::Planes(t), true) => avx512::planes_in_vector(g, x, w, bias, t, p0, out),
                (Tables::Rows(c), true) => avx512::rows_in_vector(g, x, w, bias, c, p0, out),
                (Tables::Planes(t), false) => avx2::planes_in_vector(g, x, w, bias, t, p0, out),
                (Tables::Rows(c), false) => avx2::rows_in_vector(g, x, w, bias, c, p0, out),
            }
        };
        if let Some(e) = epilogue {
            e(out);
        }
    });
}

/// The tables of one [`vector_forward`], by kernel.
#[cfg(target_arch = "x86_64")]
enum Tables {
    Planes(TapTable),
    Rows(Vec<Column>),
}

/// What every vector of planes of one [`vector_forward`] shares, made once per call, for
/// vectors of `lanes` values (16, or 8 for AVX2's planes of at most 8 values).
/// - Per tap, which input lane each output lane reads: an index into the input vector, or
///   `lanes` (the first lane of a zero vector) where the window hangs over the padding. Only
///   the first `lanes` of each row count.
/// - With several planes to a vector (2×2, 1×1), the weights (and bias) by tap: row `t`
///   holds tap `t` of every channel, then the first [`LANES`] channels again, so that the
///   planes of one vector — consecutive channels, maybe running past the last into the next
///   sample's first — read theirs as one run. One plane to a vector (4×4) broadcasts its
///   channel's weights from the weight array instead.
pub(super) struct TapTable {
    pub(super) index: Vec<[i32; LANES]>,
    /// Planes per vector.
    pub(super) per: usize,
    /// The weight and bias rows, when `per` > 1.
    pub(super) taps: Vec<f32>,
    pub(super) bias: Option<Vec<f32>>,
    pub(super) row: usize,
}

impl TapTable {
    fn new(g: &ConvGeom, w: &[f32], bias: Option<&[f32]>, lanes: usize) -> TapTable {
        let (c, k) = (g.channels, g.kernel_len());
        let [_, ih, iw] = g.input;
        let ow = g.output[2];
        let kw = g.kernel[2];
        let (l, il) = (g.out_len(), g.in_len());
        let per = lanes / il.max(l);
        let mut index = vec![[lanes as i32; LANES]; k];
        for (t, idx) in index.iter_mut().enumerate() {
            let (a, e) = (t / kw, t % kw);
            for (j, yo, xo) in (0..per).flat_map(|j| (0..l).map(move |o| (j, o / ow, o % ow))) {
                let iy = (yo * g.stride[1] + a * g.dilate[1]).checked_sub(g.pad[1]);
                let ix = (xo * g.stride[2] + e * g.dilate[2]).checked_sub(g.pad[2]);
                if let (Some(iy), Some(ix)) = (iy.filter(|&v| v < ih), ix.filter(|&v| v < iw)) {
                    idx[j * l + yo * ow + xo] = (j * il + iy * iw + ix) as i32;
                }
            }
        }
        // Channel i % c at position i of a row.
        let row = c + LANES;
        let (mut taps, mut rows_bias) = (Vec::new(), None);
        // (Built on every call: a division per value here took longer than the taps of
        // MobileNet-0.25's 4×4 layers at batch 1.)
        if per > 1 {
            let channels = || (0..c).chain((0..LANES).map(move |i| i % c));
            taps.reserve(k * row);
            for t in 0..k {
                taps.extend(channels().map(|ch| w[ch * k + t]));
            }
            rows_bias = bias.map(|b| channels().map(|ch| b[ch]).collect());
        }
        TapTable {
            index,
            per,
            taps,
            bias: rows_bias,
            row,
        }
    }
}

/// The mask of the first `n` lanes (`n` ≤ [`LANES`]).
pub(super) fn first_lanes(n: usize) -> u16 {
    ((1u32 << n) - 1) as u16
}

/// Where tap column `e` of a row vector reads, relative to the start of an input row, and
/// which loaded values exist (outside them: padding, loaded as 0).
pub(super) struct Column {
    pub(super) offset: isize,
    /// Lane masks (bit j: lane j); stride 1: the lanes; stride 2: the two vectors loaded.
    pub(super) masks: [u16; 2],
}

/// The mask of the values `j` (of `lanes` from `first`) with `0 ≤ offset + j < len`.
fn inside(offset: isize, first: usize, len: usize, lanes: usize) -> u16 {
    (0..lanes)
        .filter(|&j| {
            let at = offset + (first + j) as isize;
            at >= 0 && (at as usize) < len
        })
        .fold(0, |m, j| m | (1 << j))
}

/// The tap columns of every vector of `lanes` values of an output row (vector-major, `kw`
/// per vector) of the row kernels: where each reads relative to its input row's start, and
/// which of the values loaded exist.
fn row_columns(g: &ConvGeom, lanes: usize) -> Vec<Column> {
    let [_, _, iw] = g.input;
    let [_, _, ow] = g.output;
    let (kw, sw, dw, pw) = (g.kernel[2], g.stride[2], g.dilate[2], g.pad[2]);
    (0..ow.div_ceil(lanes))
        .flat_map(|v| (0..kw).map(move |e| (v * lanes, e)))
        .map(|(x0, e)| {
            let offset = (x0 * sw + e * dw) as isize - pw as isize;
            let masks = if sw == 1 {
                [
                    inside(offset, 0, iw, lanes) & first_lanes((ow - x0).min(lanes)),
                    0,
                ]
            } else {
                [
                    inside(offset, 0, iw, lanes),
                    inside(offset, lanes, iw, lanes),
                ]
            };
            Column { offset, masks }
        })
        .collect()
}

#[cfg(target_arch = "x86_64")]
use super::depthwise_vector_avx2 as avx2;

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use super::{first_lanes, Column, ConvGeom, TapTable, LANES, ROWS};
    use std::arch::x86_64::*;

    /// Output planes `p0..` (as many as `out` holds) with `v = 16 / max(input, output plane)`
    /// planes per vector: lane `j·out_len + o` of tap `t`'s permutation holds the input
    /// value plane `j`'s output `o` sees through tap `t` (0 over padding, taken from a zero
    /// vector by the same permutation, so no mask waits on a load).
    ///
    /// # Safety
    /// The CPU supports AVX-512F; `x`, `w` and `bias` have the lengths `g` gives them,
    /// `taps` is `g`'s table for 16 lanes, and `out` holds whole output planes `p0..` of `g`.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn planes_in_vector(
        g: &ConvGeom,
        x: &[f32],
        w: &[f32],
        bias: Option<&[f32]>,
        taps: &TapTable,
        p0: usize,
        out: &mut [f32],
    ) {
        let index: Vec<__m512i> = taps
            .index
            .iter()
            // SAFETY: reads 16 i32 from the array.
            .map(|i| unsafe { _mm512_loadu_si512(i.as_ptr().cast()) })
            .collect();
        // SAFETY: the caller's contract.
        unsafe {
            match (taps.per, index.len()) {
                (1, 9) => one_plane::<9>(g, x, w, bias, &index, p0, out),
                (1, _) => one_plane::<0>(g, x, w, bias, &index, p0, out),
                _ => several_planes(g, x, taps, &index, p0, out),
            }
        }
    }

    /// [`planes_in_vector`] with one plane to a vector: its channel's weights broadcast from
    /// `w`. `K` > 0 says the window has `K` taps (so the loop unrolls); 0 reads it from
    /// `index`.
    ///
    /// # Safety
    /// As for [`planes_in_vector`]; `index` holds the table's rows.
    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn one_plane<const K: usize>(
        g: &ConvGeom,
        x: &[f32],
        w: &[f32],
        bias: Option<&[f32]>,
        index: &[__m512i],
        p0: usize,
        out: &mut [f32],
    ) {
        let (c, l, il) = (g.channels, g.out_len(), g.in_len());
        let k = if K > 0 { K } else { index.len() };
        let zero = _mm512_setzero_ps();
        for (q, dst) in out.chunks_exact_mut(l).enumerate() {
            let p = p0 + q;
            let ch = p % c;
            // SAFETY: plane p of x lies inside it (the caller's lengths).
            let src = unsafe { _mm512_maskz_loadu_ps(first_lanes(il), x.as_ptr().add(p * il)) };
            let wp = &w[ch * k..(ch + 1) * k];
            let mut acc = zero;
            for (t, (&idx, &wt)) in index.iter().zip(wp).enumerate().take(k) {
                let v = _mm512_permutex2var_ps(src, idx, zero);
                let prod = _mm512_mul_ps(_mm512_set1_ps(wt), v);
                acc = if t == 0 {
                    prod
                } else {
                    _mm512_add_ps(acc, prod)
                };
            }
            if let Some(b) = bias {
                acc = _mm512_add_ps(acc, _mm512_set1_ps(b[ch]));
            }
            // SAFETY: the mask covers the plane's l values of `dst`.
            unsafe { _mm512_mask_storeu_ps(dst.as_mut_ptr(), first_lanes(l), acc) };
        }
    }

    /// [`planes_in_vector`] with several planes to a vector: each lane takes its plane's
    /// weight from the table's rows.
    ///
    /// # Safety
    /// As for [`planes_in_vector`]; `index` holds the table's rows.
    #[target_feature(enable = "avx512f")]
    unsafe fn several_planes(
        g: &ConvGeom,
        x: &[f32],
        taps: &TapTable,
        index: &[__m512i],
        p0: usize,
        out: &mut [f32],
    ) {
        let (c, l, il) = (g.channels, g.out_len(), g.in_len());
        let per = taps.per;
        let zero = _mm512_setzero_ps();
        // Lane j·l + o takes the weight of plane j.
        let spread: [i32; LANES] =
            std::array::from_fn(|lane| (lane / l.max(1)).min(per - 1) as i32);
        // SAFETY: reads 16 i32 from the array.
        let spread = unsafe { _mm512_loadu_si512(spread.as_ptr().cast()) };
        let planes = out.len() / l;
        for q0 in (0..planes).step_by(per) {
            let n = (planes - q0).min(per);
            let p = p0 + q0;
            let c0 = p % c;
            // SAFETY: planes p..p + n of x lie inside it (the caller's lengths).
            let src = unsafe { _mm512_maskz_loadu_ps(first_lanes(n * il), x.as_ptr().add(p * il)) };
            let mut acc = zero;
            for (t, &idx) in index.iter().enumerate() {
                // SAFETY: a table row holds c + 16 values from any channel's start.
                let wv = unsafe { _mm512_loadu_ps(taps.taps.as_ptr().add(t * taps.row + c0)) };
                let v = _mm512_permutex2var_ps(src, idx, zero);
                let prod = _mm512_mul_ps(_mm512_permutexvar_ps(spread, wv), v);
                acc = if t == 0 {
                    prod
                } else {
                    _mm512_add_ps(acc, prod)
                };
            }
            if let Some(b) = &taps.bias {
                // SAFETY: as for the weight rows.
                let bv = unsafe { _mm512_loadu_ps(b.as_ptr().add(c0)) };
                acc = _mm512_add_ps(acc, _mm512_permutexvar_ps(spread, bv));
            }
            let dst = &mut out[q0 * l..(q0 + n) * l];
            // SAFETY: the mask covers the n planes' values of `dst`.
            unsafe { _mm512_mask_storeu_ps(dst.as_mut_ptr(), first_lanes(n * l), acc) };
        }
    }

    /// Output planes `p0..` (as many as `out` holds), each output row one vector or more
    /// (`columns` from `row_columns`): the sum over the taps in order, then the bias. Per
    /// plane its weights are broadcast once; per tile of [`ROWS`] output rows the input rows
    /// each tap row reads are chosen once (a row of zeros above and below the image), so the
    /// taps run without branches.
    ///
    /// # Safety
    /// The CPU supports AVX-512F; `x`, `w` and `bias` have the lengths `g` gives them,
    /// `columns` are `g`'s for 16 lanes, and `out` holds whole output planes `p0..` of `g`.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn rows_in_vector(
        g: &ConvGeom,
        x: &[f32],
        w: &[f32],
        bias: Option<&[f32]>,
        columns: &[Column],
        p0: usize,
        out: &mut [f32],
    ) {
        let [_, ih, iw] = g.input;
        let [_, oh, ow] = g.output;
        let [_, kh, kw] = g.kernel;
        let (sh, dh, ph) = (g.stride[1], g.dilate[1], g.pad[1]);
        let (c, l, il, k) = (g.channels, g.out_len(), g.in_len(), g.kernel_len());
        let zeros = vec![0.0f32; iw];
        let stride2 = g.stride[2] == 2;
        // Stride-2 output rows of at most half a vector go two to a vector (see
        // `Tile::pairs`; at stride 1 the second load cost what the halved arithmetic saved).
        let paired = stride2 && ow <= LANES / 2;
        let tile_rows = if paired { 2 * ROWS } else { ROWS };
        let mut rows = vec![zeros.as_ptr(); tile_rows * kh];
        let mut wv = vec![_mm512_setzero_ps(); k];
        // 3×3 windows (nearly all of them) get loops the compiler unrolls.
        let square3 = (kh, kw) == (3, 3);
        for (j, plane_out) in out.chunks_exact_mut(l).enumerate() {
            let p = p0 + j;
            let ch = p % c;
            let plane = x[p * il..(p + 1) * il].as_ptr();
            for (v, &wt) in wv.iter_mut().zip(&w[ch * k..(ch + 1) * k]) {
                *v = _mm512_set1_ps(wt);
            }
            let bias = bias.map(|b| _mm512_set1_ps(b[ch]));
            for y0 in (0..oh).step_by(tile_rows) {
                for (r, window) in rows.chunks_exact_mut(kh).enumerate() {
                    for (a, row) in window.iter_mut().enumerate() {
                        let iy = ((y0 + r) * sh + a * dh) as isize - ph as isize;
                        *row = if iy < 0 || iy as usize >= ih {
                            zeros.as_ptr()
                        } else {
                            plane.wrapping_add(iy as usize * iw)
                        };
                    }
                }
                let left = oh - y0;
                for (vi, cols) in columns.chunks_exact(kw).enumerate() {
                    let x0 = vi * LANES;
                    let tile = Tile {
                        rows: &rows,
                        kh,
                        wv: &wv,
                        cols,
                        bias,
                        store: first_lanes((ow - x0).min(LANES)),
                    };
                    // SAFETY: rows y0.. of vector x0 lie inside the output plane; the
                    // columns' masks keep the reads inside the rows (or `zeros`).
                    unsafe {
                        let dst = plane_out.as_mut_ptr().add(y0 * ow + x0);
                        match (paired, square3) {
                            (true, true) => tile.pairs_left::<3>(left, dst, ow),
                            (true, false) => tile.pairs_left::<0>(left, dst, ow),
                            (false, true) => tile.rows_left::<3>(left, stride2, dst, ow),
                            (false, false) => tile.rows_left::<0>(left, stride2, dst, ow),
                        }
                    }
                }
            }
        }
    }

    /// One vector of columns over up to [`ROWS`] output rows of [`rows_in_vector`].
    struct Tile<'a> {
        /// Input row `a` of the window of output row `r` at `r · kh + a` (or a row of zeros).
        rows: &'a [*const f32],
        kh: usize,
        /// The plane's weights, one broadcast vector per tap.
        wv: &'a [__m512],
        /// The vector's tap columns.
        cols: &'a [Column],
        bias: Option<__m512>,
        /// The output lanes that exist.
        store: __mmask16,
    }

    impl Tile<'_> {
        /// [`Tile::run`] over the `left` rows that remain (up to [`ROWS`]), with `K` as in it.
        ///
        /// # Safety
        /// As for [`Tile::run`].
        #[inline]
        #[target_feature(enable = "avx512f")]
        unsafe fn rows_left<const K: usize>(
            &self,
            left: usize,
            stride2: bool,
            dst: *mut f32,
            ow: usize,
        ) {
            // SAFETY: the caller's contract.
            unsafe {
                match (left.min(ROWS), stride2) {
                    (1, false) => self.run::<1, false, K>(dst, ow),
                    (2, false) => self.run::<2, false, K>(dst, ow),
                    (3, false) => self.run::<3, false, K>(dst, ow),
                    (_, false) => self.run::<ROWS, false, K>(dst, ow),
                    (1, true) => self.run::<1, true, K>(dst, ow),
                    (2, true) => self.run::<2, true, K>(dst, ow),
                    (3, true) => self.run::<3, true, K>(dst, ow),
                    (_, true) => self.run::<ROWS, true, K>(dst, ow),
                }
            }
        }

        /// The first `R` rows' sums over the taps in order, plus the bias, stored at `dst`
        /// and `ow` apart; columns at stride 2 when `STRIDE2`, else 1. `K` > 0 says the
        /// window is `K`×`K` (so its loops unroll); 0 reads it from the tile. `R` sums run
        /// side by side (one alone would wait on each add) and stay in registers.
        ///
        /// # Safety
        /// AVX-512F; the rows' pointers and the columns' masks read inside their rows, and
        /// the `R` stores lie inside the output.
        #[inline]
        #[target_feature(enable = "avx512f")]
        unsafe fn run<const R: usize, const STRIDE2: bool, const K: usize>(
            &self,
            dst: *mut f32,
            ow: usize,
        ) {
            let (kh, kw) = if K > 0 {
                (K, K)
            } else {
                (self.kh, self.cols.len())
            };
            // Lane x of the stride-2 result is value 2x of the 32 loaded.
            let evens =
                _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
            let mut acc = [_mm512_setzero_ps(); R];
            for a in 0..kh {
                for (e, col) in self.cols.iter().enumerate().take(kw) {
                    let wv = self.wv[a * kw + e];
                    for (r, acc) in acc.iter_mut().enumerate() {
                        let at = self.rows[r * kh + a].wrapping_offset(col.offset);
                        // SAFETY: only the lanes under the masks are read (the caller's
                        // contract); masked-off ones do not fault.
                        let v = unsafe {
                            if STRIDE2 {
                                let lo = _mm512_maskz_loadu_ps(col.masks[0], at);
                                let hi =
                                    _mm512_maskz_loadu_ps(col.masks[1], at.wrapping_add(LANES));
                                _mm512_permutex2var_ps(lo, evens, hi)
                            } else {
                                _mm512_maskz_loadu_ps(col.masks[0], at)
                            }
                        };
                        let p = _mm512_mul_ps(wv, v);
                        *acc = if a == 0 && e == 0 {
                            p
                        } else {
                            _mm512_add_ps(*acc, p)
                        };
                    }
                }
            }
            for (r, mut acc) in acc.into_iter().enumerate() {
                if let Some(b) = self.bias {
                    acc = _mm512_add_ps(acc, b);
                }
                // SAFETY: the caller's contract.
                unsafe { _mm512_mask_storeu_ps(dst.add(r * ow), self.store, acc) };
            }
        }

        /// [`Tile::pairs`] over the `left` rows that remain (up to 2·[`ROWS`]), with `K` as
        /// in it.
        ///
        /// # Safety
        /// As for [`Tile::pairs`].
        #[inline]
        #[target_feature(enable = "avx512f")]
        unsafe fn pairs_left<const K: usize>(&self, left: usize, dst: *mut f32, ow: usize) {
            // SAFETY: the caller's contract.
            unsafe {
                match left.min(2 * ROWS) {
                    1 => self.pairs::<1, K>(dst, ow),
                    2 => self.pairs::<2, K>(dst, ow),
                    3 => self.pairs::<3, K>(dst, ow),
                    4 => self.pairs::<4, K>(dst, ow),
                    5 => self.pairs::<5, K>(dst, ow),
                    6 => self.pairs::<6, K>(dst, ow),
                    7 => self.pairs::<7, K>(dst, ow),
                    _ => self.pairs::<{ 2 * ROWS }, K>(dst, ow),
                }
            }
        }

        /// [`Tile::run`] at column stride 2 for output rows of at most half a vector
        /// (`ow` ≤ 8: MobileNet's stride-2 layers into 8² and 7²), two to a vector: rows 2i
        /// and 2i + 1 in its low and high halves, so one permutation takes the even values of
        /// both rows' loads and each tap is one multiply and add for both (a third faster).
        /// The first `N` rows of the tile; `K` as in [`Tile::run`]. The same operations on
        /// each value as [`Tile::run`].
        ///
        /// # Safety
        /// As for [`Tile::run`] over `N` rows, each at most 8 wide.
        #[inline]
        #[target_feature(enable = "avx512f")]
        unsafe fn pairs<const N: usize, const K: usize>(&self, dst: *mut f32, ow: usize) {
            let (kh, kw) = if K > 0 {
                (K, K)
            } else {
                (self.kh, self.cols.len())
            };
            const HALF: usize = LANES / 2;
            // Lanes 0..8 the even values of the first load, 8..16 those of the second.
            let evens =
                _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
            let pairs = N.div_ceil(2);
            let mut acc = [_mm512_setzero_ps(); ROWS];
            for a in 0..kh {
                for (e, col) in self.cols.iter().enumerate().take(kw) {
                    let wv = self.wv[a * kw + e];
                    for (i, acc) in acc.iter_mut().enumerate().take(pairs) {
                        let (r0, r1) = (2 * i, 2 * i + 1);
                        let at0 = self.rows[r0 * kh + a].wrapping_offset(col.offset);
                        // A missing second row (N odd) reads the first again; its half is
                        // never stored.
                        let r1 = if r1 < N { r1 } else { r0 };
                        let at1 = self.rows[r1 * kh + a].wrapping_offset(col.offset);
                        // SAFETY: only the lanes under the mask are read (the caller's
                        // contract); masked-off ones do not fault. The first 16 values
                        // loaded hold the 8 outputs' windows.
                        let v = unsafe {
                            let lo = _mm512_maskz_loadu_ps(col.masks[0], at0);
                            let hi = _mm512_maskz_loadu_ps(col.masks[0], at1);
                            _mm512_permutex2var_ps(lo, evens, hi)
                        };
                        let p = _mm512_mul_ps(wv, v);
                        *acc = if a == 0 && e == 0 {
                            p
                        } else {
                            _mm512_add_ps(*acc, p)
                        };
                    }
                }
            }
            let store = self.store & first_lanes(HALF);
            for (i, mut acc) in acc.into_iter().enumerate().take(pairs) {
                if let Some(b) = self.bias {
                    acc = _mm512_add_ps(acc, b);
                }
                // SAFETY: the caller's contract; row 2i + 1 is stored only if it exists.
                unsafe {
                    let row = dst.add(2 * i * ow);
                    _mm512_mask_storeu_ps(row, store, acc);
                    if 2 * i + 1 < N {
                        _mm512_mask_storeu_ps(row.add(ow).wrapping_sub(HALF), store << HALF, acc);
                    }
                }
            }
        }
    }
}
