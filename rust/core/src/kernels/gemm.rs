//! Matrix product through the `gemm` crate (packed, SIMD, rayon-parallel): the one door to
//! GEMM for `dot`, `FullyConnected` and convolution.

use crate::error::{Error, Result};
use rayon::prelude::*;

/// A read-only matrix over a slice: element (i, j) is `data[i * row_stride + j * col_stride]`.
/// A transposed view is the same data with the strides swapped.
#[derive(Clone, Copy, Debug)]
pub struct MatRef<'a, T> {
    /// The backing values.
    pub data: &'a [T],
    /// Number of rows.
    pub rows: usize,
    /// Number of columns.
    pub cols: usize,
    /// Step between rows.
    pub row_stride: usize,
    /// Step between columns.
    pub col_stride: usize,
}

impl<'a, T> MatRef<'a, T> {
    /// A row-major `rows × cols` matrix.
    pub fn row_major(data: &'a [T], rows: usize, cols: usize) -> Self {
        MatRef {
            data,
            rows,
            cols,
            row_stride: cols,
            col_stride: 1,
        }
    }

    /// The transpose (no copy).
    pub fn t(self) -> Self {
        MatRef {
            data: self.data,
            rows: self.cols,
            cols: self.rows,
            row_stride: self.col_stride,
            col_stride: self.row_stride,
        }
    }

    fn fits(&self) -> bool {
        self.rows == 0
            || self.cols == 0
            || (self.rows - 1) * self.row_stride + (self.cols - 1) * self.col_stride
                < self.data.len()
    }
}

/// Element types the GEMM kernel supports.
pub trait GemmScalar: Copy + Send + Sync + 'static {
    /// Zero.
    const ZERO: Self;
    /// One.
    const ONE: Self;
}
impl GemmScalar for f32 {
    const ZERO: Self = 0.0;
    const ONE: Self = 1.0;
}
impl GemmScalar for f64 {
    const ZERO: Self = 0.0;
    const ONE: Self = 1.0;
}

/// Work (m·n·k) below which GEMM runs on one thread. Waking the pool's threads for a product
/// costs tens of microseconds on a busy 2-core machine, more than splitting saves until the
/// product takes about half a millisecond: measured on the MLP benchmark (largest product
/// 100×784×128 ≈ 10M), training ran 30% faster with every product on one thread, while
/// LeNet's (up to 160M) still gain from two threads.
const PARALLEL_ABOVE: usize = 1 << 25;

/// `c = a × b` (or `c += a × b` when `accumulate`), `c` row-major `a.rows × b.cols`.
pub fn gemm<T: GemmScalar>(
    a: MatRef<'_, T>,
    b: MatRef<'_, T>,
    c: &mut [T],
    accumulate: bool,
) -> Result<()> {
    let (m, k, n) = (a.rows, a.cols, b.cols);
    if b.rows != k || c.len() != m * n || !a.fits() || !b.fits() {
        return Err(Error::shape(
            "gemm",
            "operands",
            format!("({m}, {k}) x ({k}, {n}) -> {} values", m * n),
            format!(
                "({}, {}) x ({}, {}) -> {} values",
                a.rows,
                a.cols,
                b.rows,
                b.cols,
                c.len()
            ),
        ));
    }
    if m == 0 || n == 0 {
        return Ok(());
    }
    if k == 0 {
        if !accumulate {
            c.iter_mut().for_each(|v| *v = T::ZERO);
        }
        return Ok(());
    }
    let threads = rayon::current_num_threads();
    if m * n * k < PARALLEL_ABOVE || threads < 2 {
        // SAFETY: c is a unique row-major m × n borrow; a and b were checked by `fits`.
        unsafe { serial(a, b, c.as_mut_ptr(), n, 1, accumulate) };
        return Ok(());
    }
    // Each thread takes a band of rows (or, for few rows, of columns) of c and runs the
    // serial kernel on it: the crate's own rayon mode ran LeNet's 100×800×500 product at
    // 185 GFLOP/s against 267 for bands, and never faster. Bands don't change any value's
    // summation order (the crate's blocking along k depends on k alone), so results stay
    // bit-identical for any thread count (tested below).
    // Column bands of c are row bands of cᵀ = bᵀ·aᵀ (c viewed column-major).
    let (a, b, m, c_rs, c_cs) = if m >= MIN_BAND * threads || m >= n {
        (a, b, m, n, 1)
    } else {
        (b.t(), a.t(), n, 1, n)
    };
    let parts = threads.min(m.div_ceil(MIN_BAND));
    let cp = SendPtr(c.as_mut_ptr());
    (0..parts).into_par_iter().for_each(|p| {
        let (r0, r1) = (p * m / parts, (p + 1) * m / parts);
        let a_p = MatRef {
            data: &a.data[r0 * a.row_stride..],
            rows: r1 - r0,
            ..a
        };
        // SAFETY: band p covers rows r0..r1 of the (possibly transposed) c only; the bands
        // are disjoint.
        unsafe { serial(a_p, b, cp.get().add(r0 * c_rs), c_rs, c_cs, accumulate) };
    });
    Ok(())
}

/// Rows (or columns) below which a band is not worth its own thread.
const MIN_BAND: usize = 32;

/// A raw pointer the bands share; each band writes its own disjoint part.
#[derive(Clone, Copy)]
struct SendPtr<T>(*mut T);
// SAFETY: only used to hand disjoint parts of one buffer to scoped parallel bands.
unsafe impl<T> Send for SendPtr<T> {}
unsafe impl<T> Sync for SendPtr<T> {}
impl<T> SendPtr<T> {
    fn get(self) -> *mut T {
        self.0
    }
}

/// The crate's kernel on one thread: `c (+)= a·b`, c being `a.rows × b.cols` with the given
/// row and column strides.
///
/// # Safety
/// `a` and `b` must satisfy `fits`, and `c` must point to a writable a.rows × b.cols matrix
/// with these strides that nothing else reads or writes meanwhile.
unsafe fn serial<T: GemmScalar>(
    a: MatRef<'_, T>,
    b: MatRef<'_, T>,
    c: *mut T,
    c_row_stride: usize,
    c_col_stride: usize,
    accumulate: bool,
) {
    gemm::gemm(
        a.rows,
        b.cols,
        a.cols,
        c,
        c_col_stride as isize,
        c_row_stride as isize,
        accumulate,
        a.data.as_ptr(),
        a.col_stride as isize,
        a.row_stride as isize,
        b.data.as_ptr(),
        b.col_stride as isize,
        b.row_stride as isize,
        T::ONE,
        T::ONE,
        false,
        false,
        false,
        gemm::Parallelism::None,
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn naive(a: &[f64], b: &[f64], m: usize, k: usize, n: usize) -> Vec<f64> {
        let mut c = vec![0.0; m * n];
        for i in 0..m {
            for j in 0..n {
                c[i * n + j] = (0..k).map(|p| a[i * k + p] * b[p * n + j]).sum();
            }
        }
        c
    }

    #[test]
    fn matches_naive_plain_and_transposed() {
        let (m, k, n) = (70, 33, 81);
        let a: Vec<f64> = (0..m * k).map(|i| ((i * 7) % 13) as f64 - 6.0).collect();
        let b: Vec<f64> = (0..k * n).map(|i| ((i * 5) % 11) as f64 - 5.0).collect();
        let want = naive(&a, &b, m, k, n);
        let mut c = vec![0.0; m * n];
        gemm(
            MatRef::row_major(&a, m, k),
            MatRef::row_major(&b, k, n),
            &mut c,
            false,
        )
        .unwrap();
        assert_eq!(c, want);
        // (bᵀ)ᵀ: b stored transposed, viewed back.
        let bt: Vec<f64> = (0..n * k).map(|i| b[(i % k) * n + i / k]).collect();
        let mut c2 = vec![1.0; m * n];
        gemm(
            MatRef::row_major(&a, m, k),
            MatRef::row_major(&bt, n, k).t(),
            &mut c2,
            true,
        )
        .unwrap();
        assert!(c2.iter().zip(&want).all(|(x, y)| *x == y + 1.0));
        assert!(gemm(
            MatRef::row_major(&a, m, k),
            MatRef::row_major(&b, k + 1, n - 1),
            &mut c,
            false
        )
        .is_err());
    }

    /// Row bands, column bands and the single-thread kernel give the same bits.
    #[test]
    fn bands_match_one_thread_bit_for_bit() {
        for (m, k, n) in [(300, 400, 300), (40, 2000, 600), (1000, 300, 120)] {
            assert!(m * n * k >= PARALLEL_ABOVE);
            let a: Vec<f32> = (0..m * k)
                .map(|i| ((i * 7919) % 1017) as f32 * 0.013 - 6.0)
                .collect();
            let b: Vec<f32> = (0..k * n)
                .map(|i| ((i * 104729) % 1013) as f32 * 0.011 - 5.0)
                .collect();
            let run = |threads: usize| {
                let pool = rayon::ThreadPoolBuilder::new()
                    .num_threads(threads)
                    .build()
                    .unwrap();
                let mut c = vec![0.5f32; m * n];
                pool.install(|| {
                    gemm(
                        MatRef::row_major(&a, m, k),
                        MatRef::row_major(&b, n, k).t(),
                        &mut c,
                        true,
                    )
                })
                .unwrap();
                c
            };
            let one = run(1);
            assert_eq!(one, run(2), "{m}x{k}x{n}");
            assert_eq!(one, run(3), "{m}x{k}x{n}");
        }
    }
}
