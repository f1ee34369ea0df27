//! Matrix products of NDArrays: MXNet's `dot` and `batch_dot` semantics over the GEMM kernel.

use super::{DType, NDArray};
use crate::error::{Error, Result};
use crate::kernels::gemm::{gemm, GemmScalar, MatRef};

fn check_float(op: &str, a: &NDArray, b: &NDArray) -> Result<()> {
    if a.dtype() != b.dtype() {
        return Err(Error::invalid(
            format!("{op}: rhs dtype"),
            a.dtype().name(),
            b.dtype().name(),
        ));
    }
    if !a.dtype().is_float() {
        return Err(Error::invalid(
            format!("{op}: dtype"),
            "float32, float64 or float16",
            a.dtype().name(),
        ));
    }
    Ok(())
}

// Runs a product in the array's float type; float16 computes in float32 and rounds back.
fn with_float<F>(a: &NDArray, b: &NDArray, f: F) -> Result<NDArray>
where
    F: Fn(&NDArray, &NDArray) -> Result<NDArray>,
{
    if a.dtype() == DType::Float16 {
        let out = f(&a.astype(DType::Float32), &b.astype(DType::Float32))?;
        return Ok(out.astype(DType::Float16));
    }
    f(a, b)
}

fn product<T: GemmScalar + super::Storable>(
    a: &[T],
    am: (usize, usize),
    b: &[T],
    bm: (usize, usize),
    ta: bool,
    tb: bool,
    out: &mut [T],
) -> Result<()> {
    let ma = MatRef::row_major(a, am.0, am.1);
    let mb = MatRef::row_major(b, bm.0, bm.1);
    gemm(
        if ta { ma.t() } else { ma },
        if tb { mb.t() } else { mb },
        out,
        false,
    )
}

macro_rules! typed_slices {
    ($a:expr, $b:expr, $T:ty) => {
        match (
            $a.typed::<$T>().and_then(|x| x.as_slice()),
            $b.typed::<$T>().and_then(|x| x.as_slice()),
        ) {
            (Some(x), Some(y)) => (x, y),
            _ => return Err(Error::Msg("internal: non-contiguous operand".into())),
        }
    };
}

/// MXNet's `dot`: `a` is viewed as a matrix (all leading axes × last axis, or first axis ×
/// the rest when `transpose_a`), `b` as (first axis × the rest; transposed likewise), and
/// the result has shape `a.shape[:-1] + b.shape[1:]` (adjusted for the transposes).
pub fn dot(a: &NDArray, b: &NDArray, transpose_a: bool, transpose_b: bool) -> Result<NDArray> {
    check_float("dot", a, b)?;
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
    with_float(a, b, |a, b| {
        macro_rules! go {
            ($T:ty) => {{
                let (x, y) = typed_slices!(a, b, $T);
                let mut out = vec![<$T as GemmScalar>::ZERO; m * n];
                product(
                    x,
                    (a_rows, a_cols),
                    y,
                    (b_rows, b_cols),
                    transpose_a,
                    transpose_b,
                    &mut out,
                )?;
                NDArray::from_vec(&out_shape, out)
            }};
        }
        match a.dtype() {
            DType::Float64 => go!(f64),
            _ => go!(f32),
        }
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
    check_float("batch_dot", a, b)?;
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
    let batch = sa[0];
    with_float(a, b, |a, b| {
        macro_rules! go {
            ($T:ty) => {{
                let (x, y) = typed_slices!(a, b, $T);
                let mut out = vec![<$T as GemmScalar>::ZERO; batch * m * n];
                let (sx, sy) = (sa[1] * sa[2], sb[1] * sb[2]);
                for (i, o) in out.chunks_mut((m * n).max(1)).enumerate().take(batch) {
                    product(
                        &x[i * sx..(i + 1) * sx],
                        (sa[1], sa[2]),
                        &y[i * sy..(i + 1) * sy],
                        (sb[1], sb[2]),
                        transpose_a,
                        transpose_b,
                        o,
                    )?;
                }
                NDArray::from_vec(&[batch, m, n], out)
            }};
        }
        match a.dtype() {
            DType::Float64 => go!(f64),
            _ => go!(f32),
        }
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
