//! Depthwise forward for small planes (MobileNet's 16×16 and below), with AVX-512, straight
//! from the NCHW input without copying it:
//! - **Planes in a vector** (input and output planes of at most 16 values: 4×4, 2×2, 1×1):
//!   as many whole planes as fit are one load; each tap is one permutation of that vector
//!   (zeros where the window hangs over the padding) times the planes' weights.
//! - **Rows in a vector** (outputs at most 16 wide, column stride 1 or 2): each output row
//!   is one vector and each tap one masked load of an input row (stride 2 keeps every other
//!   value of two loads); four rows run side by side so the sums do not wait on each other.
//!
//! The stacked-plane layout of `depthwise::stack_forward` spends more at these sizes on its
//! padded copies and per-row moves of a few values than on the taps. Both kernels sum the
//! taps in its order with its operations (a padding tap adds `w · 0` there too), so all
//! paths give the same bits; the tests compare them exactly.

use super::conv::ConvGeom;
use super::depthwise::depthwise_planes_per_task;
use super::has_avx512;
use super::par;

/// Values in one vector.
const LANES: usize = 16;

/// Output rows the row kernel computes side by side.
const ROWS: usize = 4;

/// Which kernel of this module takes a depthwise geometry, if any.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Narrow {
    PlanesInVector,
    RowsInVector,
}

/// The kernel for `g` (None: `depthwise::stack_forward` takes it), on a CPU with AVX-512.
pub(super) fn narrow_kernel(g: &ConvGeom) -> Option<Narrow> {
    if !has_avx512() {
        None
    } else if g.in_len() <= LANES && g.out_len() <= LANES {
        Some(Narrow::PlanesInVector)
    } else if g.output[2] <= LANES && g.stride[2] <= 2 {
        Some(Narrow::RowsInVector)
    } else {
        None
    }
}

/// `depthwise::depthwise_forward` through `kernel` (from [`narrow_kernel`] of `g`; lengths
/// checked, at least one output value): planes in parallel chunks, each chunk's output then
/// run through `epilogue` at once while it is in cache.
pub(super) fn narrow_forward(
    kernel: Narrow,
    g: &ConvGeom,
    x: &[f32],
    w: &[f32],
    bias: Option<&[f32]>,
    y: &mut [f32],
    epilogue: Option<&(dyn Fn(&mut [f32]) + Sync)>,
) {
    let l = g.out_len();
    // Chunks of whole vectors of planes.
    let per_vector = match kernel {
        Narrow::PlanesInVector => LANES / g.in_len().max(l),
        Narrow::RowsInVector => 1,
    };
    let per_task = depthwise_planes_per_task(g).next_multiple_of(per_vector);
    #[cfg(target_arch = "x86_64")]
    let weights = (kernel == Narrow::PlanesInVector).then(|| TapTable::new(g, w, bias));
    // Parallel when the multiply-adds are (as `depthwise::depthwise_parallel` counts them).
    let work = g.batch * g.channels * l * g.kernel_len();
    par::for_each_row_mut_by_work(y, per_task * l, work, |i, out| {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `narrow_kernel` checked the CPU for AVX-512F; the caller checked the
        // lengths, `out` holds whole planes from plane i · per_task.
        unsafe {
            match &weights {
                Some(t) => avx512::planes_in_vector(g, x, t, i * per_task, out),
                None => avx512::rows_in_vector(g, x, w, bias, i * per_task, out),
            }
        };
        if let Some(e) = epilogue {
            e(out);
        }
    });
}

/// What every vector of planes of one [`narrow_forward`] shares, made once per call.
/// - The weights (and bias) by tap: row `t` holds tap `t` of every channel, then the first
///   [`LANES`] channels again, so that the planes of one vector — consecutive channels, maybe
///   running past the last into the next sample's first — read theirs as one run.
/// - Per tap, which input lane each output lane reads, and whether it exists (else padding).
struct TapTable {
    taps: Vec<f32>,
    bias: Option<Vec<f32>>,
    row: usize,
    index: Vec<[i32; LANES]>,
    valid: Vec<u16>,
}

impl TapTable {
    fn new(g: &ConvGeom, w: &[f32], bias: Option<&[f32]>) -> TapTable {
        let (c, k) = (g.channels, g.kernel_len());
        let row = c + LANES;
        // Channel i % c at position i of a row.
        let channels = || (0..c).cycle().take(row);
        let taps = (0..k)
            .flat_map(|t| channels().map(move |ch| w[ch * k + t]))
            .collect();
        let bias = bias.map(|b| channels().map(|ch| b[ch]).collect());
        let [_, ih, iw] = g.input;
        let ow = g.output[2];
        let kw = g.kernel[2];
        let (l, il) = (g.out_len(), g.in_len());
        let per = LANES / il.max(l);
        let mut index = vec![[0i32; LANES]; k];
        let mut valid = vec![0u16; k];
        for (t, (idx, ok)) in index.iter_mut().zip(&mut valid).enumerate() {
            let (a, e) = (t / kw, t % kw);
            for (j, yo, xo) in (0..per).flat_map(|j| (0..l).map(move |o| (j, o / ow, o % ow))) {
                let iy = (yo * g.stride[1] + a * g.dilate[1]).checked_sub(g.pad[1]);
                let ix = (xo * g.stride[2] + e * g.dilate[2]).checked_sub(g.pad[2]);
                if let (Some(iy), Some(ix)) = (iy.filter(|&v| v < ih), ix.filter(|&v| v < iw)) {
                    let lane = j * l + yo * ow + xo;
                    idx[lane] = (j * il + iy * iw + ix) as i32;
                    *ok |= 1 << lane;
                }
            }
        }
        TapTable {
            taps,
            bias,
            row,
            index,
            valid,
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use super::{ConvGeom, TapTable, LANES, ROWS};
    use std::arch::x86_64::*;

    /// The mask of the first `n` lanes.
    fn first_lanes(n: usize) -> __mmask16 {
        ((1u32 << n) - 1) as u16
    }

    /// Output planes `p0..` (as many as `out` holds) with `v = 16 / max(input, output plane)`
    /// planes per vector: lane `j·out_len + o` of tap `t`'s permutation holds the input
    /// value plane `j`'s output `o` sees through tap `t` (lane masked to 0 over padding).
    ///
    /// # Safety
    /// The CPU supports AVX-512F; `x` has the length `g` gives it, `taps` is `g`'s table, and
    /// `out` holds whole output planes `p0..` of `g`.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn planes_in_vector(
        g: &ConvGeom,
        x: &[f32],
        taps: &TapTable,
        p0: usize,
        out: &mut [f32],
    ) {
        let (c, l, il) = (g.channels, g.out_len(), g.in_len());
        let per = LANES / il.max(l);
        let valid = &taps.valid;
        let index: Vec<__m512i> = taps
            .index
            .iter()
            // SAFETY: reads 16 i32 from the array.
            .map(|i| unsafe { _mm512_loadu_si512(i.as_ptr().cast()) })
            .collect();
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
            let mut acc = _mm512_setzero_ps();
            for (t, (&idx, &ok)) in index.iter().zip(valid).enumerate() {
                // SAFETY: a table row holds c + 16 values from any channel's start.
                let wv = unsafe { _mm512_loadu_ps(taps.taps.as_ptr().add(t * taps.row + c0)) };
                let v = _mm512_maskz_permutexvar_ps(ok, idx, src);
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

    /// Where tap column `e` reads, relative to the start of an input row, and which loaded
    /// values exist (outside them: padding, loaded as 0).
    struct Column {
        offset: isize,
        /// Stride 1: the lanes; stride 2: the two halves of the 32 values loaded.
        masks: [__mmask16; 2],
    }

    /// The mask of the values `j` (of `LANES` from `first`) with `0 ≤ offset + j < len`.
    fn inside(offset: isize, first: usize, len: usize) -> __mmask16 {
        (0..LANES)
            .filter(|&j| {
                let at = offset + (first + j) as isize;
                at >= 0 && (at as usize) < len
            })
            .fold(0, |m, j| m | (1 << j))
    }

    /// Output planes `p0..` (as many as `out` holds), each output row one vector: the sum
    /// over the taps in order, then the bias.
    ///
    /// # Safety
    /// The CPU supports AVX-512F; `x`, `w` and `bias` have the lengths `g` gives them, and
    /// `out` holds whole output planes `p0..` of `g`.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn rows_in_vector(
        g: &ConvGeom,
        x: &[f32],
        w: &[f32],
        bias: Option<&[f32]>,
        p0: usize,
        out: &mut [f32],
    ) {
        let [_, ih, iw] = g.input;
        let [_, oh, ow] = g.output;
        let [_, kh, kw] = g.kernel;
        let [_, sh, sw] = g.stride;
        let [_, dh, dw] = g.dilate;
        let [_, ph, pw] = g.pad;
        let (c, l, il, k) = (g.channels, g.out_len(), g.in_len(), g.kernel_len());
        // Lane x of the stride-2 result is value 2x of the 32 loaded.
        let evens = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
        let columns: Vec<Column> = (0..kw)
            .map(|e| {
                let offset = (e * dw) as isize - pw as isize;
                let masks = if sw == 1 {
                    [inside(offset, 0, iw) & first_lanes(ow), 0]
                } else {
                    [inside(offset, 0, iw), inside(offset, LANES, iw)]
                };
                Column { offset, masks }
            })
            .collect();
        let store = first_lanes(ow);
        for (j, plane_out) in out.chunks_exact_mut(l).enumerate() {
            let p = p0 + j;
            let ch = p % c;
            let plane = x[p * il..(p + 1) * il].as_ptr();
            let wk = &w[ch * k..(ch + 1) * k];
            for y0 in (0..oh).step_by(ROWS) {
                // ROWS independent sums side by side: one alone would wait on each add.
                let rows = (oh - y0).min(ROWS);
                let mut acc = [_mm512_setzero_ps(); ROWS];
                for a in 0..kh {
                    for (e, col) in columns.iter().enumerate() {
                        let wv = _mm512_set1_ps(wk[a * kw + e]);
                        for (r, acc) in acc.iter_mut().enumerate().take(rows) {
                            let iy = ((y0 + r) * sh + a * dh) as isize - ph as isize;
                            let v = if iy < 0 || iy as usize >= ih {
                                _mm512_setzero_ps()
                            } else {
                                let at = plane.wrapping_offset(iy * iw as isize + col.offset);
                                // SAFETY: only the lanes under the masks are read, all inside
                                // the input row; the masked-off ones do not fault.
                                unsafe {
                                    if sw == 1 {
                                        _mm512_maskz_loadu_ps(col.masks[0], at)
                                    } else {
                                        let lo = _mm512_maskz_loadu_ps(col.masks[0], at);
                                        let hi = _mm512_maskz_loadu_ps(
                                            col.masks[1],
                                            at.wrapping_add(LANES),
                                        );
                                        _mm512_permutex2var_ps(lo, evens, hi)
                                    }
                                }
                            };
                            let t = _mm512_mul_ps(wv, v);
                            *acc = if a == 0 && e == 0 {
                                t
                            } else {
                                _mm512_add_ps(*acc, t)
                            };
                        }
                    }
                }
                for (r, mut acc) in acc.into_iter().enumerate().take(rows) {
                    if let Some(b) = bias {
                        acc = _mm512_add_ps(acc, _mm512_set1_ps(b[ch]));
                    }
                    let dst = &mut plane_out[(y0 + r) * ow..(y0 + r + 1) * ow];
                    // SAFETY: the store mask covers the row's `ow` values.
                    unsafe { _mm512_mask_storeu_ps(dst.as_mut_ptr(), store, acc) };
                }
            }
        }
    }
}
