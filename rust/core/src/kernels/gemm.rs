//! Matrix product through the `gemm` crate (packed, SIMD, rayon-parallel): the one door to
//! GEMM for `dot`, `FullyConnected` and convolution.

use super::par;
use super::tuning::{GEMM_MIN_BAND, GEMM_PARALLEL_ABOVE};
use crate::error::{Error, Result};
use rayon::prelude::*;
use std::sync::Mutex;

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

/// Element types the GEMM kernel supports: float32 and float64 through the `gemm` crate's
/// packed SIMD kernels, the integer types through a plain loop that wraps like the type (as
/// numpy's integer `dot` does).
pub trait GemmScalar: Copy + Send + Sync + 'static {
    /// Zero.
    const ZERO: Self;
    /// One-thread kernel: `c (+)= a·b`, c being `a.rows × b.cols` with the given row and
    /// column strides.
    ///
    /// # Safety
    /// `a` and `b` must satisfy `fits`, and `c` must point to a writable a.rows × b.cols
    /// matrix with these strides that nothing else reads or writes meanwhile.
    unsafe fn serial(
        a: MatRef<'_, Self>,
        b: MatRef<'_, Self>,
        c: *mut Self,
        c_row_stride: usize,
        c_col_stride: usize,
        accumulate: bool,
    );
}

macro_rules! float_gemm {
    ($t:ty) => {
        impl GemmScalar for $t {
            const ZERO: Self = 0.0;
            unsafe fn serial(
                a: MatRef<'_, Self>,
                b: MatRef<'_, Self>,
                c: *mut Self,
                c_row_stride: usize,
                c_col_stride: usize,
                accumulate: bool,
            ) {
                // SAFETY: the caller's contract (see the trait) is the crate's.
                unsafe {
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
                        1.0,
                        1.0,
                        false,
                        false,
                        false,
                        gemm::Parallelism::None,
                    )
                }
            }
        }
    };
}
float_gemm!(f32);
float_gemm!(f64);

macro_rules! int_gemm {
    ($t:ty) => {
        impl GemmScalar for $t {
            const ZERO: Self = 0;
            unsafe fn serial(
                a: MatRef<'_, Self>,
                b: MatRef<'_, Self>,
                c: *mut Self,
                c_row_stride: usize,
                c_col_stride: usize,
                accumulate: bool,
            ) {
                for i in 0..a.rows {
                    for j in 0..b.cols {
                        let mut acc: $t = 0;
                        for p in 0..a.cols {
                            let x = a.data[i * a.row_stride + p * a.col_stride];
                            let y = b.data[p * b.row_stride + j * b.col_stride];
                            acc = acc.wrapping_add(x.wrapping_mul(y));
                        }
                        // SAFETY: (i, j) lies inside the a.rows × b.cols matrix the caller
                        // handed over.
                        let slot = unsafe { &mut *c.add(i * c_row_stride + j * c_col_stride) };
                        *slot = if accumulate {
                            slot.wrapping_add(acc)
                        } else {
                            acc
                        };
                    }
                }
            }
        }
    };
}
int_gemm!(u8);
int_gemm!(i8);
int_gemm!(i32);
int_gemm!(i64);

/// `c = a × b` (or `c += a × b` when `accumulate`), `c` row-major `a.rows × b.cols`.
pub fn gemm<T: GemmScalar>(
    a: MatRef<'_, T>,
    b: MatRef<'_, T>,
    c: &mut [T],
    accumulate: bool,
) -> Result<()> {
    gemm_split(a, b, c, accumulate, GEMM_PARALLEL_ABOVE)
}

/// [`gemm`], splitting across the pool's threads from `parallel_above` multiply-adds (`usize::MAX`:
/// never) instead of [`GEMM_PARALLEL_ABOVE`].
pub fn gemm_split<T: GemmScalar>(
    a: MatRef<'_, T>,
    b: MatRef<'_, T>,
    c: &mut [T],
    accumulate: bool,
    parallel_above: usize,
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
    if m * n * k < parallel_above || threads < 2 {
        // SAFETY: c is a unique row-major m × n borrow; a and b were checked by `fits`.
        unsafe { T::serial(a, b, c.as_mut_ptr(), n, 1, accumulate) };
        return Ok(());
    }
    // Each thread takes a band of rows (or, for few rows, of columns) of c and runs the
    // serial kernel on it: the crate's own rayon mode ran LeNet's 100×800×500 product at
    // 185 GFLOP/s against 267 for bands, and never faster. Bands don't change any value's
    // summation order (the crate's blocking along k depends on k alone), so results stay
    // bit-identical for any thread count (tested below).
    // Column bands of c are row bands of cᵀ = bᵀ·aᵀ (c viewed column-major).
    let (by_rows, parts) = bands(m, n);
    let (a, b, m, c_rs, c_cs) = match by_rows {
        true => (a, b, m, n, 1),
        false => (b.t(), a.t(), n, 1, n),
    };
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
        unsafe { T::serial(a_p, b, cp.get().add(r0 * c_rs), c_rs, c_cs, accumulate) };
    });
    Ok(())
}

/// How a split `m × n` product shares its output among the pool's threads: bands of rows
/// (`true`) or, for few rows, of columns, and how many.
pub(super) fn bands(m: usize, n: usize) -> (bool, usize) {
    let threads = rayon::current_num_threads();
    let by_rows = m >= GEMM_MIN_BAND * threads || m >= n;
    let len = if by_rows { m } else { n };
    (by_rows, threads.min(len.div_ceil(GEMM_MIN_BAND)))
}

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

/// One product `op(A) · op(B)` as stored matrices: A is `a.0 × a.1`, B is `b.0 × b.1`
/// (row-major), `op` transposes when `ta` / `tb`; the result is `m × n` with inner size `k`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Product {
    /// Rows and columns of A as stored.
    pub a: (usize, usize),
    /// Rows and columns of B as stored.
    pub b: (usize, usize),
    /// Whether A is transposed.
    pub ta: bool,
    /// Whether B is transposed.
    pub tb: bool,
}

impl Product {
    /// Rows of the result.
    pub fn m(&self) -> usize {
        if self.ta {
            self.a.1
        } else {
            self.a.0
        }
    }
    /// Columns of the result.
    pub fn n(&self) -> usize {
        if self.tb {
            self.b.0
        } else {
            self.b.1
        }
    }
    /// Inner size as seen from A.
    pub fn k(&self) -> usize {
        if self.ta {
            self.a.0
        } else {
            self.a.1
        }
    }
    /// Inner size as seen from B.
    pub fn k_b(&self) -> usize {
        if self.tb {
            self.b.1
        } else {
            self.b.0
        }
    }

    fn op_a<'a, T>(&self, a: &'a [T]) -> MatRef<'a, T> {
        let m = MatRef::row_major(a, self.a.0, self.a.1);
        if self.ta {
            m.t()
        } else {
            m
        }
    }

    fn op_b<'a, T>(&self, b: &'a [T]) -> MatRef<'a, T> {
        let m = MatRef::row_major(b, self.b.0, self.b.1);
        if self.tb {
            m.t()
        } else {
            m
        }
    }

    /// `c = op(A) · op(B)`.
    pub fn forward<T: GemmScalar>(&self, a: &[T], b: &[T], c: &mut [T]) -> Result<()> {
        gemm(self.op_a(a), self.op_b(b), c, false)
    }

    /// The gradient of A given the output gradient `g` (m × n): G·op(B)ᵀ, transposed back
    /// to A's storage when `ta` (op(B)·Gᵀ).
    pub fn grad_a<T: GemmScalar>(&self, g: &[T], b: &[T], da: &mut [T]) -> Result<()> {
        let gm = MatRef::row_major(g, self.m(), self.n());
        if self.ta {
            gemm(self.op_b(b), gm.t(), da, false)
        } else {
            gemm(gm, self.op_b(b).t(), da, false)
        }
    }

    /// The gradient of B: op(A)ᵀ·G, or Gᵀ·op(A) in B's storage when `tb`.
    pub fn grad_b<T: GemmScalar>(&self, g: &[T], a: &[T], db: &mut [T]) -> Result<()> {
        let gm = MatRef::row_major(g, self.m(), self.n());
        if self.tb {
            gemm(gm.t(), self.op_a(a), db, false)
        } else {
            gemm(self.op_a(a).t(), gm, db, false)
        }
    }
}

/// Runs `f(i, out_i)` for each of the `out.len() / size` batch entries in parallel; the first
/// error (if any) is returned.
pub fn per_batch<T: Send>(
    out: &mut [T],
    size: usize,
    f: impl Fn(usize, &mut [T]) -> Result<()> + Sync + Send,
) -> Result<()> {
    if size == 0 {
        return Ok(());
    }
    let failed: Mutex<Option<Error>> = Mutex::new(None);
    par::for_each_row_mut(out, size, |i, chunk| {
        if let Err(e) = f(i, chunk) {
            if let Ok(mut slot) = failed.lock() {
                slot.get_or_insert(e);
            }
        }
    });
    match failed.into_inner() {
        Ok(Some(e)) => Err(e),
        Ok(None) => Ok(()),
        Err(_) => Err(Error::Msg("internal: a batched product panicked".into())),
    }
}

/// Entry `i` of a batch of `size`-long entries.
pub fn batch_entry<T>(x: &[T], i: usize, size: usize) -> Result<&[T]> {
    x.get(i * size..(i + 1) * size)
        .ok_or_else(|| Error::Msg("internal: batch slice out of range".into()))
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
            assert!(m * n * k >= GEMM_PARALLEL_ABOVE);
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
