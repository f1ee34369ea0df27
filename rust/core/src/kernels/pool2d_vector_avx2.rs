//! The vector rows of [`super::pool2d_vector`] in AVX2 vectors of 8, for CPUs without
//! AVX-512 (the crate targets baseline x86-64, whose compiled rows run 4 floats at a time and
//! most of a narrow row in their scalar remainder). The same two plans: padded row buffers
//! for horizontal strides 1 and 2, and the flat walk of a centred pooling. AVX2 has no mask
//! registers, so the row buffers here carry two vectors of room past each row (filled with the
//! reduction's start value), and every load and store inside them is a whole vector; only the
//! input's last vectors are loaded under a mask, and the output's last ones stored in part. The steps are those of the scalar rows,
//! in the same order (a sum starts from 0 and adds the rows top to bottom, then the taps left
//! to right; a maximum keeps the old value unless the new one is greater), so all three paths
//! give the same bits.
#![cfg(target_arch = "x86_64")]

use super::lanes8::{first_lanes, load_masked, store_first, Readable};
use super::pool::PoolGeom;
use super::pool2d::{start, Rows};
use std::arch::x86_64::*;

const LANES: usize = 8;

/// Values of one band of row buffers (16 KB), as in the AVX-512 kernel.
const BAND_VALUES: usize = 4096;

/// Values in a plane that [`Centred`] takes: its vertical sums stay in L1 (32 KB).
const CENTRED_MAX_PLANE: usize = 8192;

/// One step of a maximum or a sum, as the scalar `step`: `v` replaces `acc` only when
/// greater (MAXPS returns its second operand unless the first is greater, so a NaN in `v`
/// never wins).
#[inline(always)]
unsafe fn step<const MAX: bool>(acc: __m256, v: __m256) -> __m256 {
    if MAX {
        _mm256_max_ps(v, acc)
    } else {
        _mm256_add_ps(acc, v)
    }
}

/// One step of `acc` with `v` in the lanes of `m`; the other lanes keep `acc` (their `v` is
/// a masked load's 0 or a value outside the window).
#[inline(always)]
unsafe fn step_masked<const MAX: bool>(acc: __m256, m: __m256i, v: __m256) -> __m256 {
    _mm256_blendv_ps(acc, step::<MAX>(acc, v), _mm256_castsi256_ps(m))
}

/// The even elements of the 16 values `lo ++ hi`, in the order `[0 2 8 10 4 6 12 14]` of
/// their outputs: the in-lane shuffle is one instruction, and every tap of a vector of
/// outputs comes in that same order, so the accumulator is put back in order once, by
/// [`in_order`], rather than every tap.
#[inline(always)]
unsafe fn evens(lo: __m256, hi: __m256) -> __m256 {
    // Per 128-bit half: lo's evens, then hi's.
    _mm256_shuffle_ps::<0b10_00_10_00>(lo, hi)
}

/// The outputs of [`evens`]' order back in order: 64-bit pairs 0, 2, 1, 3.
#[inline(always)]
unsafe fn in_order(v: __m256) -> __m256 {
    _mm256_castpd_ps(_mm256_permute4x64_pd::<0b11_01_10_00>(_mm256_castps_pd(v)))
}

/// Row buffers, one per output row, laid out as the AVX-512 kernel's (see
/// `pool2d_vector::PaddedRows`: the window of output `o` covers `row[o · stride ..
/// o · stride + kw]`, the padding holding the start value of the reduction), with room past
/// each row for whole-vector loads and stores: the vertical pass stores its last vector
/// whole, the start value in its lanes past the input row, and the taps load whole vectors.
pub(super) struct PaddedRows {
    ext: Vec<f32>,
    /// Values per row buffer, the room past the row included.
    len: usize,
    /// Rows per band.
    band: usize,
    /// Where the input row starts in its row buffer (the padding before it).
    pad: usize,
    /// An average's count along the row of each output's window (1 for other kinds and for
    /// the lanes past the last output), read as whole vectors.
    columns: Vec<f32>,
}

impl PaddedRows {
    pub(super) fn new<const MAX: bool>(rows: &Rows) -> Self {
        let ow = rows.sx.len();
        let used = (rows.iw + rows.pad).max((ow.max(1) - 1) * rows.stride + rows.kw);
        // The taps of a vector of outputs j.. read from row[s·j + t] up to 8 values (16 for
        // stride 2), j ≤ ow − 1 and t < kw; the vertical pass writes up to 7 values past the
        // input row.
        let len = used + 2 * LANES;
        let mut columns: Vec<f32> = rows
            .sx
            .iter()
            .map(|xx| rows.count(xx).unwrap_or(1) as f32)
            .collect();
        columns.resize(ow.next_multiple_of(LANES), 1.0);
        let band = (BAND_VALUES / len).clamp(1, rows.sy.len().max(1));
        PaddedRows {
            ext: vec![start::<MAX>(); len * band],
            len,
            band,
            pad: rows.pad,
            columns,
        }
    }
}

/// Every output row of one plane (see `pool2d::plane_rows`) for a horizontal stride of 1 or
/// 2: a band of rows reduced vertically into their row buffers (a tap loading what a store
/// still in flight wrote waits for it), then each vector of 8 outputs of a row through its
/// `kw` taps, divided by its counts for an average, and stored.
///
/// # Safety
/// The CPU supports AVX2 and FMA; `x_p` is one `ih × iw` plane, `y_p` its `oh × ow` outputs,
/// and `bufs` was made by [`PaddedRows::new`] for `rows` with the same `MAX`.
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn plane_rows<const MAX: bool>(
    rows: &Rows,
    x_p: &[f32],
    y_p: &mut [f32],
    bufs: &mut PaddedRows,
) {
    let (iw, s, ow) = (rows.iw, rows.stride, rows.sx.len());
    debug_assert!(s == 1 || s == 2);
    debug_assert!(x_p.len() >= rows.sy.last().map_or(0, |yy| yy.hi * iw));
    debug_assert!(y_p.len() >= rows.sy.len() * ow);
    let (len, band) = (bufs.len, bufs.band);
    let xp = x_p.as_ptr();
    let init = _mm256_set1_ps(start::<MAX>());
    // The columns in whole vectors, then the rest of the row under a mask.
    let whole = iw - iw % LANES;
    let tail = first_lanes(iw - whole);
    let read = [Readable::of(x_p)];
    for (sy, y_band) in rows.sy.chunks(band).zip(y_p.chunks_mut(band * ow)) {
        for (yy, ext) in sy.iter().zip(bufs.ext.chunks_exact_mut(len)) {
            let rp = ext.as_mut_ptr().wrapping_add(bufs.pad);
            for c in (0..whole).step_by(LANES) {
                let mut acc = init;
                for r in yy.lo..yy.hi {
                    // SAFETY: row r of the plane has iw ≥ c + 8 values from r · iw.
                    acc = unsafe { step::<MAX>(acc, _mm256_loadu_ps(xp.add(r * iw + c))) };
                }
                // SAFETY: the row buffer holds iw values from `pad` and room past them.
                unsafe { _mm256_storeu_ps(rp.add(c), acc) };
            }
            if whole < iw {
                let mut acc = init;
                for r in yy.lo..yy.hi {
                    // SAFETY: the lanes of `tail` are row r's last values; the others are
                    // not read.
                    let v = unsafe { load_masked(xp.add(r * iw + whole), tail, &read) };
                    // SAFETY: register arithmetic (AVX2, this function's target).
                    acc = unsafe { step::<MAX>(acc, v) };
                }
                // The lanes past the row take the start value, which the padding and the
                // room past the row hold (a maximum of the masked loads' zeros would not be).
                let acc = _mm256_blendv_ps(init, acc, _mm256_castsi256_ps(tail));
                // SAFETY: the row buffer has room for 8 values from `pad + whole` (see
                // `PaddedRows::new`).
                unsafe { _mm256_storeu_ps(rp.add(whole), acc) };
            }
        }
        let rows_out = sy
            .iter()
            .zip(bufs.ext.chunks_exact(len))
            .zip(y_band.chunks_exact_mut(ow));
        for ((yy, ext), y_row) in rows_out {
            let count = rows.count(yy);
            // SAFETY: the CPU has AVX2 (this function's target); `ext` is the row buffer of
            // `bufs` for this row, `y_row` its ow outputs.
            unsafe {
                if s == 1 {
                    horizontal::<MAX, 1>(rows, bufs, ext, count, y_row);
                } else {
                    horizontal::<MAX, 2>(rows, bufs, ext, count, y_row);
                }
            }
        }
    }
}

/// The outputs of one row from its row buffer `ext`: each vector of 8 through its `kw` taps,
/// divided by its counts for an average (`row_count`: the window's count along the columns),
/// and stored.
#[inline(always)]
unsafe fn horizontal<const MAX: bool, const S: usize>(
    rows: &Rows,
    bufs: &PaddedRows,
    ext: &[f32],
    row_count: Option<usize>,
    y_row: &mut [f32],
) {
    let (kw, ow) = (rows.kw, rows.sx.len());
    debug_assert!(ext.len() >= S * (ow.max(1) - 1) + kw + S * LANES);
    let ep = ext.as_ptr();
    let row_count = row_count.map(|r| _mm256_set1_ps(r as f32));
    for j in (0..ow).step_by(LANES) {
        let mut acc = _mm256_set1_ps(start::<MAX>());
        for t in 0..kw {
            // Output j + i reads row[S·(j + i) + t]; the lanes after the last output read
            // the room past the row and are not stored.
            let from = ep.wrapping_add(S * j + t);
            // SAFETY: 8 (S = 1) or 16 values from `from` lie in the row buffer (see
            // `PaddedRows::new`).
            let v = unsafe {
                if S == 1 {
                    _mm256_loadu_ps(from)
                } else {
                    evens(_mm256_loadu_ps(from), _mm256_loadu_ps(from.add(LANES)))
                }
            };
            // SAFETY: register arithmetic.
            acc = unsafe { step::<MAX>(acc, v) };
        }
        if S == 2 {
            // SAFETY: register arithmetic.
            acc = unsafe { in_order(acc) };
        }
        if let Some(r) = row_count {
            // Each window's count, as the scalar rows compute it (`(rows · columns) as f32`,
            // exact for any real window), then one vector division.
            // SAFETY: `columns` is padded to whole vectors.
            let columns = unsafe { _mm256_loadu_ps(bufs.columns.as_ptr().add(j)) };
            acc = _mm256_div_ps(acc, _mm256_mul_ps(r, columns));
        }
        // SAFETY: the row holds ow outputs; lanes past them are not written.
        unsafe { store_first(y_row.as_mut_ptr().add(j), ow - j, acc) };
    }
}

/// A pooling whose windows are centred on their outputs (see `pool2d_vector::Centred`),
/// walked flat in vectors of 8: on Inception's 17² and 8² planes a row is two or three
/// vectors and mostly their masked tails.
pub(super) struct Centred {
    ih: usize,
    iw: usize,
    ph: usize,
    pw: usize,
    /// An average's divisor for each output of a plane, padded with 1 to whole vectors
    /// (`None`: not an average).
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
        let counts = counts.map(|mut c| {
            c.resize((ih * iw).next_multiple_of(LANES), 1.0);
            c
        });
        Some(Centred {
            ih,
            iw,
            ph,
            pw,
            counts,
        })
    }

    /// Room for one plane's vertical reductions, in whole vectors, with `pw` values on either
    /// side: the horizontal taps load whole vectors and drop the lanes outside the row.
    pub(super) fn buffer(&self) -> Vec<f32> {
        vec![0.0; (self.ih * self.iw).next_multiple_of(LANES) + 2 * self.pw]
    }
}

/// Every output of one plane of a centred pooling: the vertical reduction of the plane into
/// `vert` (flat, the window's rows top to bottom), then the horizontal one (its columns left
/// to right), an average's division, and the store. The steps are those of the scalar rows,
/// in the same order, so the bits are the same.
///
/// # Safety
/// The CPU supports AVX2 and FMA; `x_p` and `y_p` are one plane's `ih × iw` input and
/// output, `vert` was made by `c.buffer()`.
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn centred_plane<const MAX: bool>(
    c: &Centred,
    x_p: &[f32],
    y_p: &mut [f32],
    vert: &mut [f32],
) {
    let (iw, il) = (c.iw, c.ih * c.iw);
    assert!(
        x_p.len() >= il && y_p.len() >= il && vert.len() >= il.next_multiple_of(LANES) + 2 * c.pw
    );
    let init = _mm256_set1_ps(start::<MAX>());
    let lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    let (below, plane) = (_mm256_set1_epi32(-1), _mm256_set1_epi32(il as i32));
    let xp = x_p.as_ptr();
    let read = [Readable::of(x_p)];
    // The plane's vertical reductions start after pw values of room.
    let vp = vert.as_mut_ptr().wrapping_add(c.pw);
    // The flat distance of the farthest row of a window: a vector whose taps all lie inside
    // the plane loads them whole, the others (the first and last rows, and the plane's last
    // vector) under a mask per tap.
    let reach = c.ph * iw;
    let (ph, iw_i) = (c.ph as isize, iw as isize);
    for i in (0..il).step_by(LANES) {
        let mut acc = init;
        if i >= reach && i + LANES + reach <= il {
            for dy in -ph..=ph {
                // SAFETY: every lane's tap i + l + dy·iw lies in 0..il (see `reach`).
                let v = unsafe { _mm256_loadu_ps(xp.offset(i as isize + dy * iw_i)) };
                // SAFETY: register arithmetic (AVX2, this function's target).
                acc = unsafe { step::<MAX>(acc, v) };
            }
        } else {
            let index = _mm256_add_epi32(_mm256_set1_epi32(i as i32), lanes);
            for dy in -ph..=ph {
                // A lane's tap is in the plane when its flat index is in 0..il (its row r + dy
                // exists, and it is not past the plane's last value).
                let off = dy * iw_i;
                let tap = _mm256_add_epi32(index, _mm256_set1_epi32(off as i32));
                let m = _mm256_and_si256(
                    _mm256_cmpgt_epi32(tap, below),
                    _mm256_cmpgt_epi32(plane, tap),
                );
                // SAFETY: only the lanes of m are read, each inside the plane.
                let v = unsafe { load_masked(xp.wrapping_offset(i as isize + off), m, &read) };
                // SAFETY: register arithmetic.
                acc = unsafe { step_masked::<MAX>(acc, m, v) };
            }
        }
        // SAFETY: vert holds il values rounded up to whole vectors after vp.
        unsafe { _mm256_storeu_ps(vp.add(i), acc) };
    }
    // The column of each lane, advanced by 8 (mod iw) per vector. A tap dx < 0 is in the row
    // when column ≥ −dx, a tap dx > 0 when column < iw − dx (a column is in 0..iw).
    let width = _mm256_set1_epi32(iw as i32);
    let last = _mm256_set1_epi32(iw as i32 - 1);
    let columns: [i32; LANES] = std::array::from_fn(|l| (l % iw) as i32);
    // SAFETY: 8 values.
    let mut column = unsafe { _mm256_loadu_si256(columns.as_ptr().cast()) };
    let advance = _mm256_set1_epi32((LANES % iw) as i32);
    let (vp, yp) = (vp.cast_const(), y_p.as_mut_ptr());
    let pw = c.pw as isize;
    for i in (0..il).step_by(LANES) {
        let mut acc = init;
        for dx in -pw..=pw {
            // SAFETY: vp is pw values into `vert`, and −pw ≤ i + dx and i + dx + 8 ≤ il rounded
            // up to whole vectors + pw: inside it.
            let v = unsafe { _mm256_loadu_ps(vp.offset(i as isize + dx)) };
            if dx == 0 {
                // SAFETY: register arithmetic.
                acc = unsafe { step::<MAX>(acc, v) };
                continue;
            }
            let m = if dx < 0 {
                _mm256_cmpgt_epi32(column, _mm256_set1_epi32(-dx as i32 - 1))
            } else {
                _mm256_cmpgt_epi32(_mm256_set1_epi32((iw as isize - dx) as i32), column)
            };
            // SAFETY: register arithmetic.
            acc = unsafe { step_masked::<MAX>(acc, m, v) };
        }
        if let Some(counts) = &c.counts {
            // SAFETY: counts is padded to whole vectors.
            let n = unsafe { _mm256_loadu_ps(counts.as_ptr().add(i)) };
            acc = _mm256_div_ps(acc, n);
        }
        // SAFETY: y_p holds il outputs; lanes past them are not written.
        unsafe { store_first(yp.add(i), il - i, acc) };
        column = _mm256_add_epi32(column, advance);
        let wrapped = _mm256_cmpgt_epi32(column, last);
        column = _mm256_sub_epi32(column, _mm256_and_si256(wrapped, width));
    }
}

#[cfg(test)]
mod tests {
    use super::super::pool::{pool_out_size, PoolConvention, PoolGeom, PoolKind};
    use super::super::pool2d::{plane_rows as scalar_rows, Rows};
    use super::{centred_plane, plane_rows, Centred, PaddedRows};

    const KINDS: [PoolKind; 4] = [
        PoolKind::Max,
        PoolKind::Sum,
        PoolKind::Avg {
            count_include_pad: true,
        },
        PoolKind::Avg {
            count_include_pad: false,
        },
    ];

    /// Checks both AVX2 plans (the centred one where it applies) against the scalar rows
    /// for one geometry and every kind; returns the (row, centred) cases run.
    fn check(
        h: usize,
        w: usize,
        (k, s, p): (usize, usize, usize),
        conv: PoolConvention,
    ) -> (usize, usize) {
        let (Some(oh), Some(ow)) = (
            pool_out_size(h, k, s, p, conv),
            pool_out_size(w, k, s, p, conv),
        ) else {
            return (0, 0);
        };
        let g = PoolGeom {
            planes: 1,
            input: [1, h, w],
            output: [1, oh, ow],
            kernel: [1, k, k],
            stride: [1, s, s],
            pad: [0, p, p],
        };
        // NaNs, and values past the lowest and highest a maximum starts from.
        let x: Vec<f32> = (0..h * w)
            .map(|i| match i % 23 {
                7 => f32::NAN,
                13 => f32::NEG_INFINITY,
                _ => ((i * 37) % 17) as f32 * 0.37 - 2.5,
            })
            .collect();
        let (sy, sx) = (g.spans(1), g.spans(2));
        let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
        let (mut cases, mut centred_cases) = (0, 0);
        for kind in KINDS {
            let rows = Rows::new(&g, kind, &sy, &sx);
            // The outputs sit between guards, which no path may write.
            let guard = 8;
            let mut want = vec![0.0f32; oh * ow];
            let mut got = vec![-7.0f32; oh * ow + 2 * guard];
            let mut buf = vec![0.0f32; w];
            let mut phases = vec![0.0f32; w + 1];
            let out = &mut got[guard..guard + oh * ow];
            if kind == PoolKind::Max {
                scalar_rows::<true>(&rows, &x, &mut want, &mut buf, &mut phases);
                let mut row = PaddedRows::new::<true>(&rows);
                // SAFETY: the CPU has AVX2 and FMA; x and out are one plane.
                unsafe { plane_rows::<true>(&rows, &x, out, &mut row) };
            } else {
                scalar_rows::<false>(&rows, &x, &mut want, &mut buf, &mut phases);
                let mut row = PaddedRows::new::<false>(&rows);
                // SAFETY: as above.
                unsafe { plane_rows::<false>(&rows, &x, out, &mut row) };
            }
            let what = format!("h{h} w{w} k{k} s{s} p{p} {conv:?} {kind:?}");
            assert_eq!(bits(&got[guard..guard + oh * ow]), bits(&want), "{what}");
            let mut guards = got[..guard].iter().chain(&got[guard + oh * ow..]);
            assert!(guards.all(|&v| v == -7.0), "guards: {what}");
            cases += 1;
            if let Some(c) = Centred::new(&g, &rows) {
                let mut vert = c.buffer();
                got.fill(-7.0);
                let out = &mut got[guard..guard + oh * ow];
                // SAFETY: the CPU has AVX2 and FMA; x and out are one plane.
                unsafe {
                    if kind == PoolKind::Max {
                        centred_plane::<true>(&c, &x, out, &mut vert);
                    } else {
                        centred_plane::<false>(&c, &x, out, &mut vert);
                    }
                }
                assert_eq!(
                    bits(&got[guard..guard + oh * ow]),
                    bits(&want),
                    "centred {what}"
                );
                let mut guards = got[..guard].iter().chain(&got[guard + oh * ow..]);
                assert!(guards.all(|&v| v == -7.0), "centred guards: {what}");
                centred_cases += 1;
            }
        }
        (cases, centred_cases)
    }

    /// Every row width from 1 to 40 (rows of 7, 8, 9, 15, 17 outputs: one vector, one short
    /// of it, one past it; masked tails), strides 1 and 2 over odd and even widths, windows
    /// 1 to 7 with and without padding, every kind, NaNs and −∞ in the input: the same bits
    /// as the scalar rows, and nothing written outside the outputs.
    #[test]
    fn avx2_rows_match_scalar_rows_bit_for_bit() {
        if !super::super::has_avx2_fma() {
            return;
        }
        let (mut cases, mut centred_cases) = (0, 0);
        for w in 1..=40 {
            for ksp in [
                (3, 1, 1),
                (3, 2, 1),
                (3, 2, 0),
                (2, 2, 0),
                (1, 1, 0),
                (2, 1, 0),
                (4, 1, 2),
                (5, 1, 2),
                (5, 2, 2),
                (4, 2, 1),
                (7, 1, 3),
            ] {
                for (conv, h) in [
                    (PoolConvention::Valid, 5),
                    (PoolConvention::Full, 5),
                    (PoolConvention::Valid, 1),
                    (PoolConvention::Valid, 8),
                    (PoolConvention::Valid, 17),
                ] {
                    let (r, c) = check(h, w, ksp, conv);
                    cases += r;
                    centred_cases += c;
                }
            }
        }
        // Rows wider than a band's buffers (several bands per plane), and planes past what
        // the centred plan takes.
        for (h, w) in [(12, 1000), (9, 1031), (100, 100)] {
            for ksp in [(3, 1, 1), (3, 2, 1), (3, 2, 0), (2, 2, 0)] {
                for conv in [PoolConvention::Valid, PoolConvention::Full] {
                    let (r, c) = check(h, w, ksp, conv);
                    cases += r;
                    centred_cases += c;
                }
            }
        }
        assert!(
            cases > 6000 && centred_cases > 1500,
            "{cases} {centred_cases}"
        );
    }
}
