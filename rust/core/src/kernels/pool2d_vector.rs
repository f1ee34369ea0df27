//! The rows of [`super::pool2d`] in explicit AVX-512 vectors, for horizontal strides 1 and 2.
//! A pooled plane is often narrow (Inception's 3×3 average pools run over 35², 17² and 8²
//! planes): a compiler-vectorized loop then spends most of each row in its scalar remainder.
//! Here every row pass is whole vectors of 16 with a mask on the last one, and the
//! horizontal windows of a vector of outputs (those clipped at the borders too) are reduced
//! and divided in registers before one store. The steps are those of the scalar rows, in the same order (a sum starts from 0 and
//! adds the rows top to bottom, then the taps left to right; a maximum keeps the old value
//! unless the new one is greater), so both give the same bits.

use super::pool::PoolGeom;
use super::pool2d::{start, Rows};
use std::arch::x86_64::*;

const LANES: usize = 16;

/// Values of one band of row buffers (8 KB).
const BAND_VALUES: usize = 4096;

/// The first `n` lanes (all of them from 16 on).
#[inline(always)]
fn first(n: usize) -> __mmask16 {
    if n >= LANES {
        0xFFFF
    } else {
        ((1u32 << n) - 1) as __mmask16
    }
}

/// One step of a maximum or a sum, as the scalar `step`: `v` replaces `acc` only when
/// greater (MAXPS returns its second operand unless the first is greater, so a NaN in `v`
/// never wins).
#[inline(always)]
unsafe fn step<const MAX: bool>(acc: __m512, v: __m512) -> __m512 {
    if MAX {
        _mm512_max_ps(v, acc)
    } else {
        _mm512_add_ps(acc, v)
    }
}

/// Loads the lanes of `p[..n]` that exist (`n` may exceed 16); the others are 0 and never
/// stored. The pointer is only formed with wrapping arithmetic: lanes past the row are masked
/// off and not read.
#[inline(always)]
unsafe fn load(p: *const f32, n: usize) -> __m512 {
    // SAFETY: only the first min(n, 16) lanes are read, and the caller says they exist.
    unsafe { _mm512_maskz_loadu_ps(first(n), p) }
}

/// Row buffers, one per output row, with room for the padding on both sides of the
/// vertically reduced row: the window of output `o` covers `row[o · stride .. o · stride +
/// kw]`, the padding (and a `Full` convention's last window past it) holding the start value
/// of the reduction. Adding 0 or comparing with the lowest float changes nothing, so a window
/// clipped at a border gives the bits of the scalar rows' clipped fold, and every output takes
/// the same vector path. A band of rows is reduced vertically before any of them is read
/// back: a load overlapping a store still in flight (the taps read a row at offsets 1, 2, …
/// from where it was written) waits for the store to complete; the band stays small enough
/// for the core's L1 cache beside the input rows.
pub(super) struct PaddedRows {
    ext: Vec<f32>,
    /// Values per row.
    len: usize,
    /// Rows per band.
    band: usize,
    /// Where the input row starts in its row buffer (the padding before it).
    pad: usize,
    /// An average's count along the row of each output's window (1 for other kinds), read
    /// as vectors (a vector built lane by lane just before its use stalls the load).
    columns: Vec<f32>,
}

impl PaddedRows {
    pub(super) fn new<const MAX: bool>(rows: &Rows) -> Self {
        let ow = rows.sx.len();
        let len = (rows.iw + rows.pad).max((ow.max(1) - 1) * rows.stride + rows.kw);
        let columns = rows.sx.iter().map(|xx| rows.count(xx).unwrap_or(1) as f32);
        let band = (BAND_VALUES / len).clamp(1, rows.sy.len().max(1));
        PaddedRows {
            ext: vec![start::<MAX>(); len * band],
            len,
            band,
            pad: rows.pad,
            columns: columns.collect(),
        }
    }
}

/// Every output row of one plane (see `pool2d::plane_rows`) for a horizontal stride of 1 or
/// 2: the vertical reduction of each window's input rows into its row buffer, then each
/// vector of 16 outputs through its `kw` taps, divided by its counts for an average, and
/// stored.
///
/// # Safety
/// The CPU supports AVX-512F; `x_p` is one `ih × iw` plane, `y_p` its `oh × ow` outputs, and
/// `bufs` was made by [`PaddedRows::new`] for `rows` with the same `MAX`.
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn plane_rows<const MAX: bool>(
    rows: &Rows,
    x_p: &[f32],
    y_p: &mut [f32],
    bufs: &mut PaddedRows,
) {
    let (iw, s, ow) = (rows.iw, rows.stride, rows.sx.len());
    debug_assert!(s == 1 || s == 2);
    let (len, band) = (bufs.len, bufs.band);
    let xp = x_p.as_ptr();
    let even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    for (sy, y_band) in rows.sy.chunks(band).zip(y_p.chunks_mut(band * ow)) {
        for (yy, ext) in sy.iter().zip(bufs.ext.chunks_exact_mut(len)) {
            let rp = ext.as_mut_ptr().wrapping_add(bufs.pad);
            for c in (0..iw).step_by(LANES) {
                let mut acc = _mm512_set1_ps(start::<MAX>());
                for r in yy.lo..yy.hi {
                    // SAFETY: row r of the plane has iw values from r · iw; lanes past it
                    // are off.
                    acc = unsafe { step::<MAX>(acc, load(xp.add(r * iw + c), iw - c)) };
                }
                // SAFETY: the row buffer holds iw values from `pad`; lanes past them are off.
                unsafe { _mm512_mask_storeu_ps(rp.add(c), first(iw - c), acc) };
            }
        }
        for ((yy, ext), y_row) in sy
            .iter()
            .zip(bufs.ext.chunks_exact(len))
            .zip(y_band.chunks_exact_mut(ow))
        {
            horizontal::<MAX>(rows, bufs, ext, rows.count(yy), y_row, even);
        }
    }
}

/// The outputs of one row from its row buffer `ext`: each vector of 16 through its `kw` taps,
/// divided by its counts for an average (`row_count`: the window's count along the columns),
/// and stored.
#[inline(always)]
unsafe fn horizontal<const MAX: bool>(
    rows: &Rows,
    bufs: &PaddedRows,
    ext: &[f32],
    row_count: Option<usize>,
    y_row: &mut [f32],
    even: __m512i,
) {
    let (kw, s, ow, len) = (rows.kw, rows.stride, rows.sx.len(), bufs.len);
    let ep = ext.as_ptr();
    let row_count = row_count.map(|r| r as f32);
    for j in (0..ow).step_by(LANES) {
        let mut acc = _mm512_set1_ps(start::<MAX>());
        for t in 0..kw {
            // Output j + i reads row[s·(j + i) + t], inside the row buffer for every
            // output; the lanes after the last output are off (or, for stride 2, dropped).
            let from = s * j + t;
            let v = if s == 1 {
                // SAFETY: see above.
                unsafe { load(ep.wrapping_add(from), len - from) }
            } else {
                // SAFETY: 32 values from `from`, those past the buffer masked off; the
                // even ones are the taps of 16 consecutive outputs.
                let (lo, hi) = unsafe {
                    (
                        load(ep.wrapping_add(from), len - from),
                        load(
                            ep.wrapping_add(from + LANES),
                            len.saturating_sub(from + LANES),
                        ),
                    )
                };
                // SAFETY: register arithmetic (AVX-512F, the caller's target).
                unsafe { _mm512_permutex2var_ps(lo, even, hi) }
            };
            // SAFETY: register arithmetic.
            acc = unsafe { step::<MAX>(acc, v) };
        }
        let live = first(ow - j);
        if let Some(r) = row_count {
            // Each window's count, as the scalar rows compute it (`(rows · columns) as f32`,
            // exact for any real window), then one vector division.
            // SAFETY: `columns` holds ow values; lanes past them are off.
            let columns = unsafe { _mm512_maskz_loadu_ps(live, bufs.columns.as_ptr().add(j)) };
            // SAFETY: register arithmetic.
            acc = unsafe { _mm512_div_ps(acc, _mm512_mul_ps(_mm512_set1_ps(r), columns)) };
        }
        // SAFETY: the row holds ow outputs; lanes past them are off.
        unsafe { _mm512_mask_storeu_ps(y_row.as_mut_ptr().add(j), live, acc) };
    }
}

/// A pooling whose windows are centred on their outputs: stride 1 and a window of `2·pad + 1`
/// along both axes, so the output plane has the input's shape and output `i` (flat, row-major)
/// reads the input around flat `i`. Inception's 3×3 average pools are these, over planes of
/// 35², 17² and 8²: walked row by row, a 17-wide row takes a whole vector and a mostly empty
/// one, and the bookkeeping per row costs as much as the sums. Walked flat, every vector is
/// whole but the plane's last, and a lane's window is clipped at the plane's borders by a mask
/// per tap: rows by the flat index of the tap, columns by a vector of column indices.
pub(super) struct Centred {
    ih: usize,
    iw: usize,
    ph: usize,
    pw: usize,
    /// An average's divisor for each output of a plane (`None`: not an average).
    counts: Option<Vec<f32>>,
}

impl Centred {
    /// The plan for `rows` when its windows are centred and a plane's vertical sums (`ih ·
    /// iw` values) fit in the core's L1 cache beside the input; `None` otherwise.
    pub(super) fn new(g: &PoolGeom, rows: &Rows) -> Option<Self> {
        let (ih, kh, ph) = (g.input[1], g.kernel[1], g.pad[1]);
        let (iw, kw, pw) = (rows.iw, rows.kw, rows.pad);
        let centred = g.stride[1] == 1 && rows.stride == 1 && kh == 2 * ph + 1 && kw == 2 * pw + 1;
        let same = rows.sy.len() == ih && rows.sx.len() == iw;
        if !(centred && same && ih * iw <= CENTRED_MAX_PLANE) {
            return None;
        }
        let counts = rows.sy.iter().map(|yy| {
            let row = rows.sx.iter().map(move |xx| rows.divisor(yy, xx));
            row.map(|n| n.map(|n| n as f32))
        });
        let counts: Option<Vec<f32>> = counts.flatten().collect();
        Some(Centred {
            ih,
            iw,
            ph,
            pw,
            counts,
        })
    }

    /// Room for one plane's vertical reductions.
    pub(super) fn buffer(&self) -> Vec<f32> {
        vec![0.0; self.ih * self.iw]
    }
}

/// Values in a plane that [`Centred`] takes: its vertical sums stay in L1 (32 KB).
const CENTRED_MAX_PLANE: usize = 8192;

/// One step of `acc` with `v` in the lanes of `m`; the other lanes keep `acc`.
#[inline(always)]
unsafe fn step_masked<const MAX: bool>(acc: __m512, m: __mmask16, v: __m512) -> __m512 {
    if MAX {
        _mm512_mask_max_ps(acc, m, v, acc)
    } else {
        _mm512_mask_add_ps(acc, m, acc, v)
    }
}

/// Every output of one plane of a centred pooling: the vertical reduction of the plane into
/// `vert` (flat, the window's rows top to bottom), then the horizontal one (its columns left
/// to right), an average's division, and the store. The steps are those of the scalar rows,
/// in the same order, so the bits are the same.
///
/// # Safety
/// The CPU supports AVX-512F; `x_p` and `y_p` are one plane's `ih × iw` input and output,
/// `vert` at least that long.
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn centred_plane<const MAX: bool>(
    c: &Centred,
    x_p: &[f32],
    y_p: &mut [f32],
    vert: &mut [f32],
) {
    let (iw, il) = (c.iw, c.ih * c.iw);
    debug_assert!(x_p.len() >= il && y_p.len() >= il && vert.len() >= il);
    let lanes = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    let plane = _mm512_set1_epi32(il as i32);
    let (xp, vp) = (x_p.as_ptr(), vert.as_mut_ptr());
    let (ph, pw) = (c.ph as isize, c.pw as isize);
    for i in (0..il).step_by(LANES) {
        let live = first(il - i);
        let index = _mm512_add_epi32(_mm512_set1_epi32(i as i32), lanes);
        let mut acc = _mm512_set1_ps(start::<MAX>());
        for dy in -ph..=ph {
            // A lane's tap is in the plane when its flat index is (row r + dy exists); a
            // negative index wraps to a large unsigned one.
            let off = dy * iw as isize;
            let tap = _mm512_add_epi32(index, _mm512_set1_epi32(off as i32));
            let m = live & _mm512_cmplt_epu32_mask(tap, plane);
            // SAFETY: only the lanes of m are read, each inside the plane.
            let v = unsafe { _mm512_maskz_loadu_ps(m, xp.wrapping_offset(i as isize + off)) };
            // SAFETY: register arithmetic.
            acc = unsafe { step_masked::<MAX>(acc, m, v) };
        }
        // SAFETY: vert holds il values; lanes past them are off.
        unsafe { _mm512_mask_storeu_ps(vp.add(i), live, acc) };
    }
    // The column of each lane, advanced by 16 (mod iw) per vector.
    let width = _mm512_set1_epi32(iw as i32);
    let columns: [i32; LANES] = std::array::from_fn(|l| (l % iw) as i32);
    // SAFETY: 16 values.
    let mut column = unsafe { _mm512_loadu_si512(columns.as_ptr().cast()) };
    let advance = _mm512_set1_epi32((LANES % iw) as i32);
    let (vp, yp) = (vert.as_ptr(), y_p.as_mut_ptr());
    for i in (0..il).step_by(LANES) {
        let live = first(il - i);
        let mut acc = _mm512_set1_ps(start::<MAX>());
        for dx in -pw..=pw {
            let tap = _mm512_add_epi32(column, _mm512_set1_epi32(dx as i32));
            let m = live & _mm512_cmplt_epu32_mask(tap, width);
            // SAFETY: a lane whose column + dx is in its row reads inside the plane.
            let v = unsafe { _mm512_maskz_loadu_ps(m, vp.wrapping_offset(i as isize + dx)) };
            // SAFETY: register arithmetic.
            acc = unsafe { step_masked::<MAX>(acc, m, v) };
        }
        if let Some(counts) = &c.counts {
            // SAFETY: counts holds il values; lanes past them are off.
            let n = unsafe { _mm512_maskz_loadu_ps(live, counts.as_ptr().add(i)) };
            acc = _mm512_div_ps(acc, n);
        }
        // SAFETY: y_p holds il outputs; lanes past them are off.
        unsafe { _mm512_mask_storeu_ps(yp.add(i), live, acc) };
        column = _mm512_add_epi32(column, advance);
        let wrapped = _mm512_cmpge_epi32_mask(column, width);
        column = _mm512_mask_sub_epi32(column, wrapped, column, width);
    }
}

#[cfg(test)]
mod tests {
    use super::super::pool::{pool_out_size, PoolConvention, PoolGeom, PoolKind};
    use super::super::pool2d::{plane_rows as scalar_rows, Rows};
    use super::{centred_plane, plane_rows, Centred, PaddedRows};

    /// Every row width from 1 to 40 (masked tails, one and several vectors), strides 1 and
    /// 2, windows 1 to 4 with and without padding, every kind, NaNs in the input: the same
    /// bits as the scalar rows.
    #[test]
    fn vector_rows_match_scalar_rows_bit_for_bit() {
        if !std::arch::is_x86_feature_detected!("avx512f") {
            return;
        }
        let kinds = [
            PoolKind::Max,
            PoolKind::Sum,
            PoolKind::Avg {
                count_include_pad: true,
            },
            PoolKind::Avg {
                count_include_pad: false,
            },
        ];
        let (mut cases, mut centred_cases) = (0, 0);
        for w in 1..=40 {
            for (k, s, p) in [
                (3, 1, 1),
                (3, 2, 1),
                (3, 2, 0),
                (2, 2, 0),
                (1, 1, 0),
                (4, 1, 2),
                (5, 1, 2),
            ] {
                for (conv, h) in [
                    (PoolConvention::Valid, 5),
                    (PoolConvention::Full, 5),
                    (PoolConvention::Valid, 1),
                    (PoolConvention::Valid, 8),
                ] {
                    let (Some(oh), Some(ow)) = (
                        pool_out_size(h, k, s, p, conv),
                        pool_out_size(w, k, s, p, conv),
                    ) else {
                        continue;
                    };
                    let g = PoolGeom {
                        planes: 1,
                        input: [1, h, w],
                        output: [1, oh, ow],
                        kernel: [1, k, k],
                        stride: [1, s, s],
                        pad: [0, p, p],
                    };
                    let x: Vec<f32> = (0..h * w)
                        .map(|i| {
                            if i % 11 == 7 {
                                f32::NAN
                            } else {
                                ((i * 37) % 17) as f32 * 0.37 - 2.5
                            }
                        })
                        .collect();
                    let (sy, sx) = (g.spans(1), g.spans(2));
                    for kind in kinds {
                        let rows = Rows::new(&g, kind, &sy, &sx);
                        let mut want = vec![0.0f32; oh * ow];
                        let mut got = vec![0.0f32; oh * ow];
                        let mut buf = vec![0.0f32; w];
                        let mut phases = vec![0.0f32; w + 1];
                        if kind == PoolKind::Max {
                            scalar_rows::<true>(&rows, &x, &mut want, &mut buf, &mut phases);
                            let mut row = PaddedRows::new::<true>(&rows);
                            // SAFETY: the CPU has AVX-512F; x and got are one plane.
                            unsafe { plane_rows::<true>(&rows, &x, &mut got, &mut row) };
                        } else {
                            scalar_rows::<false>(&rows, &x, &mut want, &mut buf, &mut phases);
                            let mut row = PaddedRows::new::<false>(&rows);
                            // SAFETY: as above.
                            unsafe { plane_rows::<false>(&rows, &x, &mut got, &mut row) };
                        }
                        let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
                        assert_eq!(bits(&got), bits(&want), "w{w} k{k} s{s} p{p} {kind:?}");
                        cases += 1;
                        if let Some(c) = Centred::new(&g, &rows) {
                            let mut vert = c.buffer();
                            got.fill(0.0);
                            // SAFETY: the CPU has AVX-512F; x and got are one plane.
                            unsafe {
                                if kind == PoolKind::Max {
                                    centred_plane::<true>(&c, &x, &mut got, &mut vert);
                                } else {
                                    centred_plane::<false>(&c, &x, &mut got, &mut vert);
                                }
                            }
                            let what = format!("centred h{h} w{w} k{k} p{p} {kind:?}");
                            assert_eq!(bits(&got), bits(&want), "{what}");
                            centred_cases += 1;
                        }
                    }
                }
            }
        }
        assert!(
            cases > 3000 && centred_cases > 900,
            "{cases} {centred_cases}"
        );
    }
}
