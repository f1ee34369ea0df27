//! The Winograd transforms of `conv_winograd` in AVX2, 8 tiles at a time: the same
//! additions in the same order as its plain loops, so the same bits.

#![cfg(target_arch = "x86_64")]

use super::lanes8::{store_first, LANES8};
use std::arch::x86_64::*;

/// `Bᵀ`'s rows over four values: `x0 − x2, x1 + x2, x2 − x1, x1 − x3`.
#[inline]
#[target_feature(enable = "avx2")]
fn b_rows(x: &[__m256; 4]) -> [__m256; 4] {
    [
        _mm256_sub_ps(x[0], x[2]),
        _mm256_add_ps(x[1], x[2]),
        _mm256_sub_ps(x[2], x[1]),
        _mm256_sub_ps(x[1], x[3]),
    ]
}

/// `dst[q] = src[2q]` for `q < n`, 8 values from two loads at a time while `src` holds 16;
/// returns how many it wrote.
///
/// # Safety
/// The CPU supports AVX2; `dst` holds `n` values, `src` `src_len`.
#[inline]
#[target_feature(enable = "avx2")]
pub(super) unsafe fn every_other(
    dst: *mut f32,
    src: *const f32,
    n: usize,
    src_len: usize,
) -> usize {
    let whole = (n / LANES8).min(src_len / (2 * LANES8));
    for i in 0..whole {
        // SAFETY: vector i reads src[16i..16i + 16] and writes dst[8i..8i + 8] (`whole`).
        unsafe {
            let at = src.add(2 * LANES8 * i);
            let (lo, hi) = (_mm256_loadu_ps(at), _mm256_loadu_ps(at.add(LANES8)));
            // Evens of each 128-bit half: lo0 lo2 hi0 hi2 | lo4 lo6 hi4 hi6; then the
            // 64-bit pairs in order.
            let evens = _mm256_shuffle_ps::<0b10_00_10_00>(lo, hi);
            let v = _mm256_permute4x64_pd::<0b11_01_10_00>(_mm256_castps_pd(evens));
            _mm256_storeu_ps(dst.add(LANES8 * i), _mm256_castpd_ps(v));
        }
    }
    whole * LANES8
}

/// See `conv_winograd::patches_plain`: tiles `0..n` of one channel and segment from its four
/// input rows split by parity (`rows`, halves `half` apart), element `e` of tile `j` stored
/// at `v + e · stride + j`.
///
/// # Safety
/// The CPU supports AVX2; each half holds `n + 1` values and is readable to `⌈n / 8⌉ · 8 + 1`;
/// `v + e · stride` holds `n` values for each element `e < 16`.
#[inline]
#[target_feature(enable = "avx2")]
pub(super) unsafe fn patches(rows: *const f32, half: usize, n: usize, v: *mut f32, stride: usize) {
    for g in (0..n).step_by(LANES8) {
        // Columns 2j, 2j + 1, 2j + 2, 2j + 3 of the four rows (evens j, odds j, evens j + 1,
        // odds j + 1), each combined down the rows.
        let mut cols = [[_mm256_setzero_ps(); 4]; 4];
        for (col, combined) in cols.iter_mut().enumerate() {
            let (odd, next) = (col % 2, col / 2);
            let mut x = [_mm256_setzero_ps(); 4];
            for (a, x) in x.iter_mut().enumerate() {
                // SAFETY: reads values g + next .. g + next + 8 of a half, below its
                // readable ⌈n / 8⌉ · 8 + 1.
                *x = unsafe { _mm256_loadu_ps(rows.add((2 * a + odd) * half + g + next)) };
            }
            *combined = b_rows(&x);
        }
        // Row a of each column's combinations: a transpose, hence the index.
        #[allow(clippy::needless_range_loop)]
        for a in 0..4 {
            let out = b_rows(&[cols[0][a], cols[1][a], cols[2][a], cols[3][a]]);
            for (b, x) in out.into_iter().enumerate() {
                // SAFETY: stores the tiles' n − g lanes of element 4a + b.
                unsafe { store_first(v.add((4 * a + b) * stride + g), n - g, x) };
            }
        }
    }
}

/// See `conv_winograd::outputs_plain`: the two output rows of tiles `0..n` of one filter
/// (`o0`, `o1`, two values per tile) from its 16 products (element `e` of tile `j` at
/// `m + e · stride + j`), plus `bias`.
///
/// # Safety
/// The CPU supports AVX2; each element of `m` is readable to `⌈n / 8⌉ · 8` values; `o0` and
/// `o1` hold `2 · ⌈n / 8⌉ · 8` values.
#[target_feature(enable = "avx2")]
pub(super) unsafe fn outputs(
    m: *const f32,
    stride: usize,
    n: usize,
    bias: f32,
    o0: *mut f32,
    o1: *mut f32,
) {
    let b = _mm256_set1_ps(bias);
    for g in (0..n).step_by(LANES8) {
        // SAFETY (whole body): the caller's contract.
        unsafe {
            let mv = |e: usize| _mm256_loadu_ps(m.add(e * stride + g));
            let sum3 = |x: __m256, y: __m256, z: __m256| _mm256_add_ps(_mm256_add_ps(x, y), z);
            let diff3 = |x: __m256, y: __m256, z: __m256| _mm256_sub_ps(_mm256_sub_ps(x, y), z);
            // Aᵀ's rows over each column, then over the two results' columns.
            let t0 = [0, 1, 2, 3].map(|c| sum3(mv(c), mv(4 + c), mv(8 + c)));
            let t1 = [0, 1, 2, 3].map(|c| diff3(mv(4 + c), mv(8 + c), mv(12 + c)));
            for (t, o) in [(t0, o0), (t1, o1)] {
                let left = _mm256_add_ps(sum3(t[0], t[1], t[2]), b);
                let right = _mm256_add_ps(diff3(t[1], t[2], t[3]), b);
                // Interleaved per 128-bit half: tiles 0 1 | 4 5 and 2 3 | 6 7; then in order.
                let (lo, hi) = (
                    _mm256_unpacklo_ps(left, right),
                    _mm256_unpackhi_ps(left, right),
                );
                _mm256_storeu_ps(o.add(2 * g), _mm256_permute2f128_ps::<0x20>(lo, hi));
                _mm256_storeu_ps(
                    o.add(2 * g + LANES8),
                    _mm256_permute2f128_ps::<0x31>(lo, hi),
                );
            }
        }
    }
}
