//! Matrix products of NDArrays: MXNet's `dot` and `batch_dot` semantics over the GEMM kernel,
//! in the arrays' own dtype. The registry's `dot` / `batch_dot` forward through here.

use super::{DType, NDArray};
use crate::error::{Error, Result};
use crate::kernels::gemm::{batch_entry, per_batch, GemmScalar, Product};

fn check_dtypes(op: &str, a: &NDArray, b: &NDArray) -> Result<()> {
    if a.dtype() != b.dtype() {
        return Err(Error::invalid(
            format!("{op}: rhs dtype"),
            a.dtype().name(),
            b.dtype().name(),
        ));
    }
    Ok(())
}

/// Runs a product in the arrays' own dtype: float32 and float64 through the packed GEMM,
/// integers exactly (wrapping, as numpy's integer `dot`; MXNet 1.9 refuses integer `dot`),
/// float16 in float32 rounded back once (MXNet's CPU `dot` has no float16 kernel).
macro_rules! with_gemm_dtype {
    ($a:ident, $b:ident, $T:ident => $body:expr) => {
        $crate::with_dtype!($a.dtype(), $T => $body, float16 => {
            let (a32, b32) = (
                $a.astype($crate::tensor::DType::Float32),
                $b.astype($crate::tensor::DType::Float32),
            );
            let ($a, $b) = (&a32, &b32);
            type $T = f32;
            $crate::tensor::linalg::to_f16($body)
        })
    };
}

pub(crate) use with_gemm_dtype;

/// A float32 result (or results) of a float16 computation rounded back to float16.
pub(crate) fn to_f16<R: ToF16>(r: Result<R>) -> Result<R> {
    r.map(ToF16::to_f16)
}

/// Results that can be rounded to float16.
pub(crate) trait ToF16 {
    fn to_f16(self) -> Self;
}

impl ToF16 for NDArray {
    fn to_f16(self) -> Self {
        self.astype(DType::Float16)
    }
}

impl ToF16 for (NDArray, NDArray) {
    fn to_f16(self) -> Self {
        (self.0.to_f16(), self.1.to_f16())
    }
}

/// MXNet's `dot`: `a` is viewed as a matrix (all leading axes × last axis, or first axis ×
/// the rest when `transpose_a`), `b` as (first axis × the rest; transposed likewise), and
/// the result has shape `a.shape[:-1] + b.shape[1:]` (adjusted for the transposes).
pub fn dot(a: &NDArray, b: &NDArray, transpose_a: bool, transpose_b: bool) -> Result<NDArray> {
    check_dtypes("dot", a, b)?;
    if a.ndim() == 0 || b.ndim() == 0 {
        return Err(Error::invalid(
            "dot: operands",
            "arrays with at least one axis",
            format!("shapes {:?} and {:?}", a.shape(), b.shape()),
        ));
    }
    let (sa, sb) = (a.shape(), b.shape());
    // a as (rows_a, cols_a) in storage; logical (m, k).
    let (a_rows, a_cols, a_keep) = if transpose_a {
        (sa[0], sa[1..].iter().product::<usize>(), sa[1..].to_vec())
    } else {
        (
            sa[..sa.len() - 1].iter().product::<usize>(),
            sa[sa.len() - 1],
            sa[..sa.len() - 1].to_vec(),
        )
    };
    let (b_rows, b_cols, b_keep) = if transpose_b {
        (
            sb[..sb.len() - 1].iter().product::<usize>(),
            sb[sb.len() - 1],
            sb[..sb.len() - 1].to_vec(),
        )
    } else {
        (sb[0], sb[1..].iter().product::<usize>(), sb[1..].to_vec())
    };
    let (m, k) = if transpose_a {
        (a_cols, a_rows)
    } else {
        (a_rows, a_cols)
    };
    let (k2, n) = if transpose_b {
        (b_cols, b_rows)
    } else {
        (b_rows, b_cols)
    };
    if k != k2 {
        return Err(Error::shape(
            "dot",
            "rhs (inner dimensions must agree)",
            format!("{k} rows"),
            format!("{sb:?} giving {k2}"),
        ));
    }
    let mut out_shape = a_keep;
    out_shape.extend(b_keep);
    let p = Product {
        a: (a_rows, a_cols),
        b: (b_rows, b_cols),
        ta: transpose_a,
        tb: transpose_b,
    };
    with_gemm_dtype!(a, b, T => {
        let mut out = vec![<T as GemmScalar>::ZERO; m * n];
        p.forward::<T>(a.values("dot: lhs")?, b.values("dot: rhs")?, &mut out)?;
        NDArray::from_vec(&out_shape, out)
    })
}

/// MXNet's `batch_dot`: `(B, m, k) × (B, k, n) → (B, m, n)`, with optional transposes of the
/// last two axes.
pub fn batch_dot(
    a: &NDArray,
    b: &NDArray,
    transpose_a: bool,
    transpose_b: bool,
) -> Result<NDArray> {
    check_dtypes("batch_dot", a, b)?;
    let (sa, sb) = (a.shape().to_vec(), b.shape().to_vec());
    if sa.len() != 3 || sb.len() != 3 || sa[0] != sb[0] {
        return Err(Error::shape(
            "batch_dot",
            "operands (both 3-D with one batch size)",
            "(B, m, k) and (B, k, n)",
            format!("{sa:?} and {sb:?}"),
        ));
    }
    let (m, k) = if transpose_a {
        (sa[2], sa[1])
    } else {
        (sa[1], sa[2])
    };
    let (k2, n) = if transpose_b {
        (sb[2], sb[1])
    } else {
        (sb[1], sb[2])
    };
    if k != k2 {
        return Err(Error::shape(
            "batch_dot",
            "rhs (inner dimensions must agree)",
            k,
            k2,
        ));
    }
    let p = Product {
        a: (sa[1], sa[2]),
        b: (sb[1], sb[2]),
        ta: transpose_a,
        tb: transpose_b,
    };
    let (size_a, size_b, size_c) = (sa[1] * sa[2], sb[1] * sb[2], m * n);
    with_gemm_dtype!(a, b, T => {
        let (x, y) = (a.values::<T>("batch_dot: lhs")?, b.values::<T>("batch_dot: rhs")?);
        let mut out = vec![<T as GemmScalar>::ZERO; sa[0] * size_c];
        // One GEMM per batch entry, the entries in parallel (each GEMM is small).
        per_batch(&mut out, size_c, |i, c| {
            p.forward(batch_entry(x, i, size_a)?, batch_entry(y, i, size_b)?, c)
        })?;
        NDArray::from_vec(&[sa[0], m, n], out)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dot_shapes_and_values() {
        let a = NDArray::arange(0.0, 6.0, 1.0, DType::Float32)
            .unwrap()
            .reshape(&[2, 3])
            .unwrap();
        let b = NDArray::arange(0.0, 6.0, 1.0, DType::Float32)
            .unwrap()
            .reshape(&[3, 2])
            .unwrap();
        let c = dot(&a, &b, false, false).unwrap();
        assert_eq!(c.shape(), &[2, 2]);
        assert_eq!(c.to_f64_vec(), vec![10.0, 13.0, 28.0, 40.0]);
        let d = dot(&a, &a, false, true).unwrap();
        assert_eq!(d.to_f64_vec(), vec![5.0, 14.0, 14.0, 50.0]);
        let e = dot(&a, &a, true, false).unwrap();
        assert_eq!(e.shape(), &[3, 3]);
        assert!(dot(&a, &a, false, false).is_err());
        let big = (1i64 << 40) + 1;
        let ia = NDArray::from_vec(&[1, 2], vec![big, 1i64]).unwrap();
        let ib = NDArray::from_vec(&[2, 1], vec![1i64, 1]).unwrap();
        assert_eq!(
            dot(&ia, &ib, false, false)
                .unwrap()
                .typed::<i64>()
                .unwrap()
                .as_slice()
                .unwrap(),
            &[big + 1]
        );
        let h = dot(
            &a.astype(DType::Float16),
            &b.astype(DType::Float16),
            false,
            false,
        )
        .unwrap();
        assert_eq!(h.dtype(), DType::Float16);
        assert_eq!(h.to_f64_vec(), vec![10.0, 13.0, 28.0, 40.0]);
    }

    #[test]
    fn batch_dot_matches_dot_per_batch() {
        let a = NDArray::arange(0.0, 12.0, 1.0, DType::Float64)
            .unwrap()
            .reshape(&[2, 2, 3])
            .unwrap();
        let c = batch_dot(&a, &a, false, true).unwrap();
        assert_eq!(c.shape(), &[2, 2, 2]);
        let first = dot(&a.at(0).unwrap(), &a.at(0).unwrap(), false, true).unwrap();
        assert_eq!(c.at(0).unwrap().to_f64_vec(), first.to_f64_vec());
    }
}
