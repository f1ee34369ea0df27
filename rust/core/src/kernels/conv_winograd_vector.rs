//! The Winograd transforms of `conv_winograd` in vectors of tiles, for both forms (`M` outputs
//! per tile side, `A = M + 2` patch values): written once over [`Vector`], compiled for AVX2 +
//! FMA (8 tiles at a time) and for AVX-512 (16; on a core with full-width AVX-512 units the
//! 8-lane transforms took as long as the products they feed). The 2 × 2 form does the same
//! additions in the same order as the plain loops (the same bits); the 4 × 4 form fuses its
//! scalings into FMAs, so it rounds a little differently, the same in both widths.

#![cfg(target_arch = "x86_64")]

use super::conv_tiled::LANES as LANES16;
use super::depthwise_vector::first_lanes;
use super::lanes8::{store_first, LANES8};
use std::arch::x86_64::*;

/// The operations of the transforms on one vector of tiles' values. Every method is an
/// intrinsic of the vector's instruction set: callers run with those features enabled.
pub(super) trait Vector: Copy {
    /// Tiles per vector.
    const LANES: usize;
    /// # Safety
    /// The CPU has the vector's instruction set (for every method).
    unsafe fn splat(x: f32) -> Self;
    /// # Safety
    /// `p` is readable for [`Vector::LANES`] values.
    unsafe fn load(p: *const f32) -> Self;
    /// # Safety
    /// `p` is writable for the first `n` lanes (all from `LANES` on).
    unsafe fn store_first(self, p: *mut f32, n: usize);
    /// # Safety
    /// See [`Vector::splat`].
    unsafe fn add(self, b: Self) -> Self;
    /// # Safety
    /// See [`Vector::splat`].
    unsafe fn sub(self, b: Self) -> Self;
    /// # Safety
    /// See [`Vector::splat`].
    unsafe fn mul(self, b: Self) -> Self;
    /// `self · b + c`, rounded once.
    ///
    /// # Safety
    /// See [`Vector::splat`].
    unsafe fn fmadd(self, b: Self, c: Self) -> Self;
    /// `c − self · b`, rounded once.
    ///
    /// # Safety
    /// See [`Vector::splat`].
    unsafe fn fnmadd(self, b: Self, c: Self) -> Self;
    /// Stores `M` vectors (value `c` of `LANES` tiles each) as the tiles' `M` values in turn:
    /// `LANES · M` values at `p`.
    ///
    /// # Safety
    /// `p` holds `LANES · M` values.
    unsafe fn store_interleaved<const M: usize>(p: *mut f32, o: [Self; M]);
}

/// The one-intrinsic methods of [`Vector`], by the intrinsics of a width.
macro_rules! arithmetic {
    ($splat:ident, $add:ident, $sub:ident, $mul:ident, $fmadd:ident, $fnmadd:ident) => {
        #[inline(always)]
        unsafe fn splat(x: f32) -> Self {
            $splat(x)
        }
        #[inline(always)]
        unsafe fn add(self, b: Self) -> Self {
            $add(self, b)
        }
        #[inline(always)]
        unsafe fn sub(self, b: Self) -> Self {
            $sub(self, b)
        }
        #[inline(always)]
        unsafe fn mul(self, b: Self) -> Self {
            $mul(self, b)
        }
        #[inline(always)]
        unsafe fn fmadd(self, b: Self, c: Self) -> Self {
            $fmadd(self, b, c)
        }
        #[inline(always)]
        unsafe fn fnmadd(self, b: Self, c: Self) -> Self {
            $fnmadd(self, b, c)
        }
    };
}

impl Vector for __m256 {
    const LANES: usize = LANES8;
    arithmetic!(
        _mm256_set1_ps,
        _mm256_add_ps,
        _mm256_sub_ps,
        _mm256_mul_ps,
        _mm256_fmadd_ps,
        _mm256_fnmadd_ps
    );
    #[inline(always)]
    unsafe fn load(p: *const f32) -> Self {
        // SAFETY: the caller's contract.
        unsafe { _mm256_loadu_ps(p) }
    }
    #[inline(always)]
    unsafe fn store_first(self, p: *mut f32, n: usize) {
        // SAFETY: the caller's contract.
        unsafe { store_first(p, n, self) }
    }
    #[inline(always)]
    unsafe fn store_interleaved<const M: usize>(p: *mut f32, o: [Self; M]) {
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
            // Values 0 1 of tiles 0 1 | 4 5 (a) and 2 3 | 6 7 (b), values 2 3 likewise (c,
            // d); their 64-bit halves pair into tiles 0 | 4, 1 | 5, 2 | 6, 3 | 7.
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
}

impl Vector for __m512 {
    const LANES: usize = LANES16;
    arithmetic!(
        _mm512_set1_ps,
        _mm512_add_ps,
        _mm512_sub_ps,
        _mm512_mul_ps,
        _mm512_fmadd_ps,
        _mm512_fnmadd_ps
    );
    #[inline(always)]
    unsafe fn load(p: *const f32) -> Self {
        // SAFETY: the caller's contract.
        unsafe { _mm512_loadu_ps(p) }
    }
    #[inline(always)]
    unsafe fn store_first(self, p: *mut f32, n: usize) {
        // (AVX-512's masked stores are plain stores, unlike AVX2's VMASKMOVPS on AMD.)
        let mask = first_lanes(n.min(LANES16));
        // SAFETY: the caller's contract; the mask keeps the store to the first n lanes.
        unsafe { _mm512_mask_storeu_ps(p, mask, self) }
    }
    #[inline(always)]
    unsafe fn store_interleaved<const M: usize>(p: *mut f32, o: [Self; M]) {
        // Lanes i of x and y side by side: tiles 0..8 (low) or 8..16 (high) of the pair.
        let low = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
        let high = _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
        // SAFETY (whole body): the caller's contract.
        unsafe {
            let (ab_lo, ab_hi) = (
                _mm512_permutex2var_ps(o[0], low, o[1]),
                _mm512_permutex2var_ps(o[0], high, o[1]),
            );
            if M == 2 {
                _mm512_storeu_ps(p, ab_lo);
                _mm512_storeu_ps(p.add(LANES16), ab_hi);
                return;
            }
            // Values 2 3 likewise; then the pairs (64 bits) of a tile's values 0 1 and 2 3
            // side by side, four tiles per vector.
            let (cd_lo, cd_hi) = (
                _mm512_permutex2var_ps(o[2], low, o[3]),
                _mm512_permutex2var_ps(o[2], high, o[3]),
            );
            let first4 = _mm512_setr_epi64(0, 8, 1, 9, 2, 10, 3, 11);
            let last4 = _mm512_setr_epi64(4, 12, 5, 13, 6, 14, 7, 15);
            let pd = |x: __m512| _mm512_castps_pd(x);
            let pair = |x: __m512, i: __m512i, y: __m512| {
                _mm512_castpd_ps(_mm512_permutex2var_pd(pd(x), i, pd(y)))
            };
            _mm512_storeu_ps(p, pair(ab_lo, first4, cd_lo));
            _mm512_storeu_ps(p.add(LANES16), pair(ab_lo, last4, cd_lo));
            _mm512_storeu_ps(p.add(2 * LANES16), pair(ab_hi, first4, cd_hi));
            _mm512_storeu_ps(p.add(3 * LANES16), pair(ab_hi, last4, cd_hi));
        }
    }
}

/// `Bᵀ` over `A` values (see `conv_winograd::b_rows`).
#[inline(always)]
unsafe fn b_rows<V: Vector, const A: usize>(x: [V; A]) -> [V; A] {
    // SAFETY (whole body): the caller runs with V's instruction set.
    unsafe {
        let mut out = [V::splat(0.0); A];
        match A {
            4 => out.copy_from_slice(&[
                x[0].sub(x[2]),
                x[1].add(x[2]),
                x[2].sub(x[1]),
                x[1].sub(x[3]),
            ]),
            _ => {
                let (four, five, two) = (V::splat(4.0), V::splat(-5.0), V::splat(2.0));
                let t0 = four.fnmadd(x[2], x[4]);
                let t1 = four.fnmadd(x[1], x[3]);
                let t2 = x[4].sub(x[2]);
                let t3 = two.mul(x[3].sub(x[1]));
                out.copy_from_slice(&[
                    four.fmadd(x[0], five.fmadd(x[2], x[4])),
                    t0.add(t1),
                    t0.sub(t1),
                    t2.add(t3),
                    t2.sub(t3),
                    four.fmadd(x[1], five.fmadd(x[3], x[5])),
                ]);
            }
        }
        out
    }
}

/// `Aᵀ` over `A` values into `M` (see `conv_winograd::a_rows`).
#[inline(always)]
unsafe fn a_rows<V: Vector, const M: usize, const A: usize>(m: [V; A]) -> [V; M] {
    // SAFETY (whole body): the caller runs with V's instruction set.
    unsafe {
        let mut out = [V::splat(0.0); M];
        match M {
            2 => out.copy_from_slice(&[m[0].add(m[1]).add(m[2]), m[1].sub(m[2]).sub(m[3])]),
            _ => {
                let (s12, d12) = (m[1].add(m[2]), m[1].sub(m[2]));
                let (s34, d34) = (m[3].add(m[4]), m[3].sub(m[4]));
                out.copy_from_slice(&[
                    m[0].add(s12).add(s34),
                    V::splat(2.0).fmadd(d34, d12),
                    V::splat(4.0).fmadd(s34, s12),
                    V::splat(8.0).fmadd(d34, d12).add(m[5]),
                ]);
            }
        }
        out
    }
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
/// The CPU has `V`'s instruction set; each phase is readable to `⌈n / V::LANES⌉ · V::LANES
/// + 1` values; `v + e · stride` holds `n` values for each element `e < A²`.
#[inline(always)]
pub(super) unsafe fn patches<V: Vector, const M: usize, const A: usize>(
    rows: *const f32,
    half: usize,
    n: usize,
    v: *mut f32,
    stride: usize,
) {
    for g in (0..n).step_by(V::LANES) {
        // SAFETY (whole body): the caller's contract; the loads read values g + next .. g +
        // next + LANES of a phase, below its readable ⌈n / LANES⌉ · LANES + 1; the stores
        // write the tiles' n − g lanes of an element.
        unsafe {
            // Column k of tile j is phase k % M, value j + k / M; each combined down the rows.
            let mut cols = [[V::splat(0.0); A]; A];
            for (k, combined) in cols.iter_mut().enumerate() {
                let (phase, next) = (k % M, k / M);
                let x: [V; A] =
                    std::array::from_fn(|a| V::load(rows.add((a * M + phase) * half + g + next)));
                *combined = b_rows(x);
            }
            // Row a of each column's combinations: a transpose, hence the index.
            #[allow(clippy::needless_range_loop)]
            for a in 0..A {
                let out = b_rows::<V, A>(std::array::from_fn(|k| cols[k][a]));
                for (b, x) in out.into_iter().enumerate() {
                    x.store_first(v.add((A * a + b) * stride + g), n - g);
                }
            }
        }
    }
}

/// See `conv_winograd::outputs_plain`: the `M` output rows of tiles `0..n` of one filter
/// (row `r` at `out + r · row_len`, `M` values per tile) from its `A²` products (element `e`
/// of tile `j` at `m + e · stride + j`), plus `bias`.
///
/// # Safety
/// The CPU has `V`'s instruction set; each element of `m` is readable to `⌈n / V::LANES⌉ ·
/// V::LANES` values; each output row holds `M · ⌈n / V::LANES⌉ · V::LANES` values.
#[inline(always)]
pub(super) unsafe fn outputs<V: Vector, const M: usize, const A: usize>(
    m: *const f32,
    stride: usize,
    n: usize,
    bias: f32,
    out: *mut f32,
    row_len: usize,
) {
    // SAFETY (whole body): the caller's contract.
    unsafe {
        let b = V::splat(bias);
        for g in (0..n).step_by(V::LANES) {
            // Aᵀ's rows over each column, then over each resulting row's columns.
            let cols: [[V; M]; A] = std::array::from_fn(|c| {
                a_rows::<V, M, A>(std::array::from_fn(|r| {
                    V::load(m.add((A * r + c) * stride + g))
                }))
            });
            // Row r of each column's results: a transpose, hence the index.
            #[allow(clippy::needless_range_loop)]
            for r in 0..M {
                let o: [V; M] = a_rows::<V, M, A>(std::array::from_fn(|c| cols[c][r]));
                V::store_interleaved::<M>(out.add(r * row_len + M * g), o.map(|v| v.add(b)));
            }
        }
    }
}

/// [`outputs`] in AVX2 + FMA.
///
/// # Safety
/// The CPU supports AVX2 and FMA; [`outputs`]' contract for 8 lanes.
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn outputs_avx2<const M: usize, const A: usize>(
    m: *const f32,
    stride: usize,
    n: usize,
    bias: f32,
    out: *mut f32,
    row_len: usize,
) {
    // SAFETY: forwarded.
    unsafe { outputs::<__m256, M, A>(m, stride, n, bias, out, row_len) }
}

/// [`outputs`] in AVX-512.
///
/// # Safety
/// The CPU supports AVX-512F; [`outputs`]' contract for 16 lanes.
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn outputs_avx512<const M: usize, const A: usize>(
    m: *const f32,
    stride: usize,
    n: usize,
    bias: f32,
    out: *mut f32,
    row_len: usize,
) {
    // SAFETY: forwarded.
    unsafe { outputs::<__m512, M, A>(m, stride, n, bias, out, row_len) }
}
