//! The Winograd transforms of `conv_winograd` in AVX2 + FMA, 8 tiles at a time, for both
//! forms (`M` outputs per tile side, `A = M + 2` patch values). The 2 × 2 form does the same
//! additions in the same order as the plain loops (the same bits); the 4 × 4 form fuses its
//! scalings into FMAs, so it rounds a little differently.

#![cfg(target_arch = "x86_64")]

use super::lanes8::{store_first, LANES8};
use std::arch::x86_64::*;

/// `Bᵀ` over `A` values (see `conv_winograd::b_rows`).
#[inline]
#[target_feature(enable = "avx2,fma")]
fn b_rows<const A: usize>(x: [__m256; A]) -> [__m256; A] {
    let mut out = [_mm256_setzero_ps(); A];
    match A {
        4 => out.copy_from_slice(&[
            _mm256_sub_ps(x[0], x[2]),
            _mm256_add_ps(x[1], x[2]),
            _mm256_sub_ps(x[2], x[1]),
            _mm256_sub_ps(x[1], x[3]),
        ]),
        _ => {
            let (four, five, two) = (
                _mm256_set1_ps(4.0),
                _mm256_set1_ps(-5.0),
                _mm256_set1_ps(2.0),
            );
            let t0 = _mm256_fnmadd_ps(four, x[2], x[4]);
            let t1 = _mm256_fnmadd_ps(four, x[1], x[3]);
            let t2 = _mm256_sub_ps(x[4], x[2]);
            let t3 = _mm256_mul_ps(two, _mm256_sub_ps(x[3], x[1]));
            out.copy_from_slice(&[
                _mm256_fmadd_ps(four, x[0], _mm256_fmadd_ps(five, x[2], x[4])),
                _mm256_add_ps(t0, t1),
                _mm256_sub_ps(t0, t1),
                _mm256_add_ps(t2, t3),
                _mm256_sub_ps(t2, t3),
                _mm256_fmadd_ps(four, x[1], _mm256_fmadd_ps(five, x[3], x[5])),
            ]);
        }
    }
    out
}

/// `Aᵀ` over `A` values into `M` (see `conv_winograd::a_rows`).
#[inline]
#[target_feature(enable = "avx2,fma")]
fn a_rows<const M: usize, const A: usize>(m: [__m256; A]) -> [__m256; M] {
    let mut out = [_mm256_setzero_ps(); M];
    match M {
        2 => out.copy_from_slice(&[
            _mm256_add_ps(_mm256_add_ps(m[0], m[1]), m[2]),
            _mm256_sub_ps(_mm256_sub_ps(m[1], m[2]), m[3]),
        ]),
        _ => {
            let (s12, d12) = (_mm256_add_ps(m[1], m[2]), _mm256_sub_ps(m[1], m[2]));
            let (s34, d34) = (_mm256_add_ps(m[3], m[4]), _mm256_sub_ps(m[3], m[4]));
            out.copy_from_slice(&[
                _mm256_add_ps(_mm256_add_ps(m[0], s12), s34),
                _mm256_fmadd_ps(_mm256_set1_ps(2.0), d34, d12),
                _mm256_fmadd_ps(_mm256_set1_ps(4.0), s34, s12),
                _mm256_add_ps(_mm256_fmadd_ps(_mm256_set1_ps(8.0), d34, d12), m[5]),
            ]);
        }
    }
    out
}

/// `phases[φ][q] = line[M·q + φ]` for `q < n` rounded up to whole vectors: the line split by
/// column modulo `M` (2 or 4), phase `φ` at `dst + φ · half`.
///
/// # Safety
/// The CPU supports AVX2; `line` is readable to `M · ⌈n / 8⌉ · 8` values; each phase holds
/// `⌈n / 8⌉ · 8`.
#[inline]
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn split_phases<const M: usize>(
    line: *const f32,
    n: usize,
    dst: *mut f32,
    half: usize,
) {
    for q in (0..n).step_by(LANES8) {
        // SAFETY (whole body): reads line[M·q..M·(q + 8)], writes values q..q + 8 of each
        // phase, inside the caller's bounds.
        unsafe {
            let at = line.add(M * q);
            let load = |i: usize| _mm256_loadu_ps(at.add(LANES8 * i));
            if M == 2 {
                let (lo, hi) = (load(0), load(1));
                // Evens (odds) of each 128-bit half: lo0 lo2 hi0 hi2 | lo4 lo6 hi4 hi6; then
                // the 64-bit pairs in order.
                let evens = _mm256_shuffle_ps::<0b10_00_10_00>(lo, hi);
                let odds = _mm256_shuffle_ps::<0b11_01_11_01>(lo, hi);
                for (p, v) in [evens, odds].into_iter().enumerate() {
                    let v = _mm256_permute4x64_pd::<0b11_01_10_00>(_mm256_castps_pd(v));
                    _mm256_storeu_ps(dst.add(p * half + q), _mm256_castpd_ps(v));
                }
                continue;
            }
            // Four vectors hold values q..q + 8 as groups of four (one per 128-bit half):
            // [q q+1] [q+2 q+3] [q+4 q+5] [q+6 q+7]. A 4 × 4 transpose within the halves
            // gives each phase as q q+2 q+4 q+6 | q+1 q+3 q+5 q+7; a lane permutation orders it.
            let (v0, v1, v2, v3) = (load(0), load(1), load(2), load(3));
            let (a, b) = (_mm256_unpacklo_ps(v0, v1), _mm256_unpackhi_ps(v0, v1));
            let (c, d) = (_mm256_unpacklo_ps(v2, v3), _mm256_unpackhi_ps(v2, v3));
            let pd = |x: __m256| _mm256_castps_pd(x);
            let phases = [
                _mm256_unpacklo_pd(pd(a), pd(c)),
                _mm256_unpackhi_pd(pd(a), pd(c)),
                _mm256_unpacklo_pd(pd(b), pd(d)),
                _mm256_unpackhi_pd(pd(b), pd(d)),
            ];
            let order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
            for (p, v) in phases.into_iter().enumerate() {
                let v = _mm256_permutevar8x32_ps(_mm256_castpd_ps(v), order);
                _mm256_storeu_ps(dst.add(p * half + q), v);
            }
        }
    }
}

/// See `conv_winograd::patches_plain`: tiles `0..n` of one channel and segment from its `A`
/// input rows split into `M` phases (phase `φ` of row `a` at `rows + (a·M + φ) · half`),
/// element `e` of tile `j` stored at `v + e · stride + j`.
///
/// # Safety
/// The CPU supports AVX2; each phase is readable to `⌈n / 8⌉ · 8 + 1` values; `v + e ·
/// stride` holds `n` values for each element `e < A²`.
#[inline]
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn patches<const M: usize, const A: usize>(
    rows: *const f32,
    half: usize,
    n: usize,
    v: *mut f32,
    stride: usize,
) {
    for g in (0..n).step_by(LANES8) {
        // Column k of tile j is phase k % M, value j + k / M; each combined down the rows.
        let mut cols = [[_mm256_setzero_ps(); A]; A];
        for (k, combined) in cols.iter_mut().enumerate() {
            let (phase, next) = (k % M, k / M);
            let x: [__m256; A] = std::array::from_fn(|a| {
                // SAFETY: reads values g + next .. g + next + 8 of a phase, below its
                // readable ⌈n / 8⌉ · 8 + 1.
                unsafe { _mm256_loadu_ps(rows.add((a * M + phase) * half + g + next)) }
            });
            *combined = b_rows(x);
        }
        // Row a of each column's combinations: a transpose, hence the index.
        #[allow(clippy::needless_range_loop)]
        for a in 0..A {
            let out = b_rows::<A>(std::array::from_fn(|k| cols[k][a]));
            for (b, x) in out.into_iter().enumerate() {
                // SAFETY: stores the tiles' n − g lanes of element A·a + b.
                unsafe { store_first(v.add((A * a + b) * stride + g), n - g, x) };
            }
        }
    }
}

/// See `conv_winograd::outputs_plain`: the `M` output rows of tiles `0..n` of one filter
/// (row `r` at `out + r · row_len`, `M` values per tile) from its `A²` products (element `e`
/// of tile `j` at `m + e · stride + j`), plus `bias`.
///
/// # Safety
/// The CPU supports AVX2; each element of `m` is readable to `⌈n / 8⌉ · 8` values; each
/// output row holds `M · ⌈n / 8⌉ · 8` values.
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn outputs<const M: usize, const A: usize>(
    m: *const f32,
    stride: usize,
    n: usize,
    bias: f32,
    out: *mut f32,
    row_len: usize,
) {
    let b = _mm256_set1_ps(bias);
    for g in (0..n).step_by(LANES8) {
        // SAFETY (whole body): the caller's contract.
        unsafe {
            // Aᵀ's rows over each column, then over each resulting row's columns.
            let cols: [[__m256; M]; A] = std::array::from_fn(|c| {
                a_rows::<M, A>(std::array::from_fn(|r| {
                    _mm256_loadu_ps(m.add((A * r + c) * stride + g))
                }))
            });
            // Row r of each column's results: a transpose, hence the index.
            #[allow(clippy::needless_range_loop)]
            for r in 0..M {
                let o: [__m256; M] = a_rows::<M, A>(std::array::from_fn(|c| cols[c][r]));
                let o = o.map(|v| _mm256_add_ps(v, b));
                store_interleaved::<M>(out.add(r * row_len + M * g), o);
            }
        }
    }
}

/// Stores `M` vectors (value `c` of 8 tiles each) as the tiles' `M` values in turn: `8 · M`
/// values at `p`.
///
/// # Safety
/// The CPU supports AVX2; `p` holds `8 · M` values.
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn store_interleaved<const M: usize>(p: *mut f32, o: [__m256; M]) {
    // SAFETY (whole body): the caller's contract.
    unsafe {
        if M == 2 {
            // Interleaved per 128-bit half: tiles 0 1 | 4 5 and 2 3 | 6 7; then in order.
            let (lo, hi) = (
                _mm256_unpacklo_ps(o[0], o[1]),
                _mm256_unpackhi_ps(o[0], o[1]),
            );
            _mm256_storeu_ps(p, _mm256_permute2f128_ps::<0x20>(lo, hi));
            _mm256_storeu_ps(p.add(LANES8), _mm256_permute2f128_ps::<0x31>(lo, hi));
            return;
        }
        // Values 0 1 of tiles 0 1 | 4 5 (a) and 2 3 | 6 7 (b), values 2 3 likewise (c, d);
        // their 64-bit halves pair into tiles 0 | 4, 1 | 5, 2 | 6, 3 | 7.
        let (a, b) = (
            _mm256_unpacklo_ps(o[0], o[1]),
            _mm256_unpackhi_ps(o[0], o[1]),
        );
        let (c, d) = (
            _mm256_unpacklo_ps(o[2], o[3]),
            _mm256_unpackhi_ps(o[2], o[3]),
        );
        let pd = |x: __m256| _mm256_castps_pd(x);
        let ps = _mm256_castpd_ps;
        let t04 = ps(_mm256_unpacklo_pd(pd(a), pd(c)));
        let t15 = ps(_mm256_unpackhi_pd(pd(a), pd(c)));
        let t26 = ps(_mm256_unpacklo_pd(pd(b), pd(d)));
        let t37 = ps(_mm256_unpackhi_pd(pd(b), pd(d)));
        _mm256_storeu_ps(p, _mm256_permute2f128_ps::<0x20>(t04, t15));
        _mm256_storeu_ps(p.add(LANES8), _mm256_permute2f128_ps::<0x20>(t26, t37));
        _mm256_storeu_ps(p.add(2 * LANES8), _mm256_permute2f128_ps::<0x31>(t04, t15));
        _mm256_storeu_ps(p.add(3 * LANES8), _mm256_permute2f128_ps::<0x31>(t26, t37));
    }
}
