//! The per-step products of a recurrence: a few rows of state times a weight matrix that stays
//! the same for every step. The weights are packed once per call into column panels, so each
//! step streams them in the order the micro-kernel reads them; a general GEMM repacks its
//! operands on every call, which cost a sixth of a training step at the LSTM language model's
//! sizes (32 × 200 · 200 × 800).

use num_traits::Float;

/// Columns per panel: one AVX-512 vector of float32.
pub(super) const LANES: usize = 16;

/// A `k × n` matrix packed into panels of [`LANES`] columns (the last one zero-padded), each
/// panel stored row after row: element (r, j) at `(j / LANES) · k · LANES + r · LANES + j %
/// LANES`. (Public in this private module only because [`super::RnnFloat`] names it.)
pub struct Panels<T> {
    data: Vec<T>,
    k: usize,
    panels: usize,
}

impl<T: Float> Panels<T> {
    /// Zeros for `n` columns of `k` rows.
    fn zeros(k: usize, n: usize) -> Self {
        let panels = n.div_ceil(LANES);
        Panels {
            data: vec![T::zero(); panels * k * LANES],
            k,
            panels,
        }
    }

    /// Packs the `k × n` matrix whose column j is `col(j)` (`k` values: a row of a weight
    /// matrix used transposed). Reads each source row once, in order.
    pub(super) fn from_columns<'a>(k: usize, n: usize, col: impl Fn(usize) -> &'a [T]) -> Self
    where
        T: 'a,
    {
        let mut b = Self::zeros(k, n);
        for (p, panel) in b.data.chunks_exact_mut(k * LANES).enumerate() {
            for j in 0..(n - p * LANES).min(LANES) {
                let src = &col(p * LANES + j)[..k];
                for (dst, &v) in panel[j..].iter_mut().step_by(LANES).zip(src) {
                    *dst = v;
                }
            }
        }
        b
    }

    /// Packs the `k × n` matrix whose row r is `row(r)` (`n` values).
    pub(super) fn from_rows<'a>(k: usize, n: usize, row: impl Fn(usize) -> &'a [T]) -> Self
    where
        T: 'a,
    {
        let mut b = Self::zeros(k, n);
        for r in 0..k {
            let src = &row(r)[..n];
            for (p, part) in src.chunks(LANES).enumerate() {
                b.data[(p * k + r) * LANES..][..part.len()].copy_from_slice(part);
            }
        }
        b
    }

    /// Columns of a product's output rows: the packed width, padding included.
    pub(super) fn width(&self) -> usize {
        self.panels * LANES
    }
}

/// `c = a · b`: `a` has `m` rows of `b.k()` values `lda` apart, `c` is `m × b.width()`
/// row-major. Plain loops (float64, and float32 without AVX-512 or AVX2); each output sums
/// its terms in order of k, as the vector kernels do.
pub(super) fn product_plain<T: Float>(a: &[T], lda: usize, m: usize, b: &Panels<T>, c: &mut [T]) {
    let (k, w) = (b.k, b.width());
    for (p, panel) in b.data.chunks_exact(k * LANES).enumerate() {
        for r in 0..m {
            let mut acc = [T::zero(); LANES];
            let ar = &a[r * lda..r * lda + k];
            for (&x, brow) in ar.iter().zip(panel.chunks_exact(LANES)) {
                acc.iter_mut().zip(brow).for_each(|(s, &y)| *s = *s + x * y);
            }
            c[r * w + p * LANES..r * w + (p + 1) * LANES].copy_from_slice(&acc);
        }
    }
}

/// The float32 product: the AVX-512 kernel when the CPU has it, else the AVX2 one when it has
/// AVX2 and FMA, else [`product_plain`]. The two kernels give the same bits (one FMA per term,
/// in order of k); the plain loops round the product and the sum apart.
pub(super) fn product_f32(a: &[f32], lda: usize, m: usize, b: &Panels<f32>, c: &mut [f32]) {
    let (k, w) = (b.k, b.width());
    assert!(
        m == 0 || (a.len() >= (m - 1) * lda + k && c.len() >= m * w),
        "panel product: operands too short"
    );
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx512f") {
        // SAFETY: the CPU has AVX-512F; the lengths were checked above.
        unsafe { avx512::product(a, lda, m, b, c) };
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if crate::kernels::has_avx2_fma() {
        // SAFETY: the CPU has AVX2 and FMA; the lengths were checked above.
        unsafe { avx2::product(a, lda, m, b, c) };
        return;
    }
    product_plain(a, lda, m, b, c);
}

/// The AVX2 version of [`avx512`]: a panel of 16 columns is two vectors of 8, and the 16
/// vector registers hold at most 12 accumulators.
#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::{Panels, LANES};
    use std::arch::x86_64::*;

    /// Vectors of 8 per panel.
    const HALVES: usize = LANES / 8;

    /// One `MR × NV·16` tile of c, as `avx512::tile`: per k, `NV · 2` panel loads and `MR`
    /// broadcasts feed `MR · NV · 2` FMAs.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    #[allow(clippy::too_many_arguments)]
    unsafe fn tile<const MR: usize, const NV: usize>(
        a: *const f32,
        lda: usize,
        k: usize,
        b: *const f32,
        ps: usize,
        c: *mut f32,
        ldc: usize,
    ) {
        let mut acc = [[[_mm256_setzero_ps(); HALVES]; NV]; MR];
        for kk in 0..k {
            let mut bv = [[_mm256_setzero_ps(); HALVES]; NV];
            for (v, x) in bv.iter_mut().enumerate() {
                for (h, x) in x.iter_mut().enumerate() {
                    // SAFETY: panel v of the tile holds k rows of LANES values.
                    *x = unsafe { _mm256_loadu_ps(b.add(v * ps + kk * LANES + h * 8)) };
                }
            }
            for (r, row) in acc.iter_mut().enumerate() {
                // SAFETY: row r of a holds k values.
                let x = _mm256_set1_ps(unsafe { *a.add(r * lda + kk) });
                for (s, y) in row.iter_mut().zip(&bv) {
                    for (s, &y) in s.iter_mut().zip(y) {
                        *s = _mm256_fmadd_ps(x, y, *s);
                    }
                }
            }
        }
        for (r, row) in acc.iter().enumerate() {
            for (v, s) in row.iter().enumerate() {
                for (h, &s) in s.iter().enumerate() {
                    // SAFETY: the tile lies inside c (rows < m, columns < width).
                    unsafe { _mm256_storeu_ps(c.add(r * ldc + v * LANES + h * 8), s) };
                }
            }
        }
    }

    /// Tiles of `MR` rows over every panel: `NV` panels at a time, then the rest one by one.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn rows<const MR: usize, const NV: usize>(
        a: *const f32,
        lda: usize,
        b: &Panels<f32>,
        c: *mut f32,
    ) {
        let (k, ps, ldc) = (b.k, b.k * LANES, b.width());
        let bp = b.data.as_ptr();
        let mut p = 0;
        // SAFETY (all tiles): panels p..p + NV exist, and the caller's rows fit a and c.
        unsafe {
            while p + NV <= b.panels {
                tile::<MR, NV>(a, lda, k, bp.add(p * ps), ps, c.add(p * LANES), ldc);
                p += NV;
            }
            while p < b.panels {
                tile::<MR, 1>(a, lda, k, bp.add(p * ps), ps, c.add(p * LANES), ldc);
                p += 1;
            }
        }
    }

    /// `c = a · b` (see `product_f32`). Blocks of 6 rows × 1 panel keep 12 of the 16 vector
    /// registers as accumulators; fewer rows take more panels at once, so at least 8
    /// independent FMA chains hide the FMA latency.
    ///
    /// # Safety
    /// The CPU supports AVX2 and FMA; `a` holds `m` rows of `b.k()` values `lda` apart and
    /// `c` holds `m × b.width()` values.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn product(a: &[f32], lda: usize, m: usize, b: &Panels<f32>, c: &mut [f32]) {
        let ldc = b.width();
        let (ap, cp) = (a.as_ptr(), c.as_mut_ptr());
        let mut r = 0;
        // SAFETY: each call covers rows r.. of a and c that exist (the caller's contract).
        unsafe {
            while r + 6 <= m {
                rows::<6, 1>(ap.add(r * lda), lda, b, cp.add(r * ldc));
                r += 6;
            }
            let (a_r, c_r) = (ap.add(r * lda), cp.add(r * ldc));
            match m - r {
                0 => {}
                1 => rows::<1, 4>(a_r, lda, b, c_r),
                2 => rows::<2, 2>(a_r, lda, b, c_r),
                3 => rows::<3, 2>(a_r, lda, b, c_r),
                4 => rows::<4, 1>(a_r, lda, b, c_r),
                _ => rows::<5, 1>(a_r, lda, b, c_r),
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use super::{Panels, LANES};
    use std::arch::x86_64::*;

    /// One `MR × NV·16` tile of c: `MR` rows of a (from `a`, `lda` apart) against `NV`
    /// consecutive panels (from `b`, `ps` apart), summed over `k`. The `MR · NV` accumulators
    /// stay in registers; per k, NV panel loads and MR broadcasts feed MR · NV FMAs.
    #[inline]
    #[target_feature(enable = "avx512f")]
    #[allow(clippy::too_many_arguments)]
    unsafe fn tile<const MR: usize, const NV: usize>(
        a: *const f32,
        lda: usize,
        k: usize,
        b: *const f32,
        ps: usize,
        c: *mut f32,
        ldc: usize,
    ) {
        let mut acc = [[_mm512_setzero_ps(); NV]; MR];
        for kk in 0..k {
            let mut bv = [_mm512_setzero_ps(); NV];
            for (v, x) in bv.iter_mut().enumerate() {
                // SAFETY: panel v of the tile holds k rows of LANES values.
                *x = unsafe { _mm512_loadu_ps(b.add(v * ps + kk * LANES)) };
            }
            for (r, row) in acc.iter_mut().enumerate() {
                // SAFETY: row r of a holds k values.
                let x = _mm512_set1_ps(unsafe { *a.add(r * lda + kk) });
                for (s, &y) in row.iter_mut().zip(&bv) {
                    *s = _mm512_fmadd_ps(x, y, *s);
                }
            }
        }
        for (r, row) in acc.iter().enumerate() {
            for (v, &s) in row.iter().enumerate() {
                // SAFETY: the tile lies inside c (rows < m, columns < width).
                unsafe { _mm512_storeu_ps(c.add(r * ldc + v * LANES), s) };
            }
        }
    }

    /// Tiles of `MR` rows over every panel: `NV` panels at a time, then the rest one by one.
    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn rows<const MR: usize, const NV: usize>(
        a: *const f32,
        lda: usize,
        b: &Panels<f32>,
        c: *mut f32,
    ) {
        let (k, ps, ldc) = (b.k, b.k * LANES, b.width());
        let bp = b.data.as_ptr();
        let mut p = 0;
        // SAFETY (all tiles): panels p..p + NV exist, and the caller's rows fit a and c.
        unsafe {
            while p + NV <= b.panels {
                tile::<MR, NV>(a, lda, k, bp.add(p * ps), ps, c.add(p * LANES), ldc);
                p += NV;
            }
            while p < b.panels {
                tile::<MR, 1>(a, lda, k, bp.add(p * ps), ps, c.add(p * LANES), ldc);
                p += 1;
            }
        }
    }

    /// `c = a · b` (see `product_f32`). Blocks of 8 rows × 3 panels keep 24 of the 32
    /// vector registers as accumulators; a single row (batch-1 inference) takes 8 panels at
    /// once, so 8 independent FMA chains hide the FMA latency.
    ///
    /// # Safety
    /// The CPU supports AVX-512F; `a` holds `m` rows of `b.k()` values `lda` apart and `c`
    /// holds `m × b.width()` values.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn product(a: &[f32], lda: usize, m: usize, b: &Panels<f32>, c: &mut [f32]) {
        let ldc = b.width();
        let (ap, cp) = (a.as_ptr(), c.as_mut_ptr());
        let mut r = 0;
        // SAFETY: each call covers rows r.. of a and c that exist (the caller's contract).
        unsafe {
            while r + 8 <= m {
                rows::<8, 3>(ap.add(r * lda), lda, b, cp.add(r * ldc));
                r += 8;
            }
            let (a_r, c_r) = (ap.add(r * lda), cp.add(r * ldc));
            match m - r {
                0 => {}
                1 => rows::<1, 8>(a_r, lda, b, c_r),
                2 => rows::<2, 6>(a_r, lda, b, c_r),
                3 => rows::<3, 6>(a_r, lda, b, c_r),
                4 => rows::<4, 4>(a_r, lda, b, c_r),
                5 => rows::<5, 4>(a_r, lda, b, c_r),
                6 => rows::<6, 3>(a_r, lda, b, c_r),
                _ => rows::<7, 3>(a_r, lda, b, c_r),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Both kernels against a direct sum, for every row remainder and panel count.
    #[test]
    fn products_match_direct_sums() {
        for (m, k, n) in [
            (1, 7, 5),
            (3, 20, 130),
            (8, 33, 48),
            (13, 17, 200),
            (32, 50, 400),
            // Every row remainder of the AVX2 kernel's blocks of 6.
            (2, 5, 64),
            (4, 11, 70),
            (5, 16, 33),
            (12, 9, 40),
        ] {
            let lda = k + 3;
            let a: Vec<f32> = (0..m * lda)
                .map(|i| ((i * 37) % 19) as f32 / 7.0 - 1.3)
                .collect();
            let bm = |r: usize, j: usize| ((r * 13 + j * 7) % 23) as f32 / 11.0 - 1.0;
            let rows: Vec<Vec<f32>> = (0..k).map(|r| (0..n).map(|j| bm(r, j)).collect()).collect();
            let cols: Vec<Vec<f32>> = (0..n).map(|j| (0..k).map(|r| bm(r, j)).collect()).collect();
            let b = Panels::from_rows(k, n, |r| &rows[r]);
            assert_eq!(b.data, Panels::from_columns(k, n, |j| &cols[j]).data);
            let w = b.width();
            let mut fast = vec![f32::NAN; m * w];
            let mut plain = vec![f32::NAN; m * w];
            product_f32(&a, lda, m, &b, &mut fast);
            product_plain(&a, lda, m, &b, &mut plain);
            for r in 0..m {
                for j in 0..w {
                    let want: f64 = if j < n {
                        (0..k)
                            .map(|q| f64::from(a[r * lda + q]) * f64::from(bm(q, j)))
                            .sum()
                    } else {
                        0.0
                    };
                    for (name, got) in [("fast", fast[r * w + j]), ("plain", plain[r * w + j])] {
                        assert!(
                            (f64::from(got) - want).abs() <= 1e-4 * (1.0 + want.abs()),
                            "{name} {m}x{k}x{n} ({r}, {j}): {got} vs {want}"
                        );
                    }
                }
            }
        }
    }
}
