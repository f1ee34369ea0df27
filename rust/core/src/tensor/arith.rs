//! Elementwise arithmetic on NDArrays: binary ops with numpy broadcasting, scalar ops and
//! comparisons. Inputs of a binary op share one dtype (as in MXNet); results keep it. The
//! arithmetic itself is `kernels::binary`, the same code the registry's operators run.

use super::{Element, NDArray, Storable};
use crate::error::{Error, Result};
use crate::kernels::binary;
pub use crate::kernels::binary::BinaryOp;
pub use crate::kernels::map::broadcast_shape;
use crate::{with_data, with_dtype};
use ndarray::IxDyn;

/// `a op b` with numpy broadcasting. Both arrays must have the same dtype.
pub fn binary(op: BinaryOp, a: &NDArray, b: &NDArray) -> Result<NDArray> {
    if a.dtype() != b.dtype() {
        return Err(Error::invalid(
            format!("{}: rhs dtype", op.name()),
            format!("{} (the dtype of lhs)", a.dtype()),
            b.dtype().name(),
        ));
    }
    let what = op.name();
    let out = with_dtype!(a.dtype(), T => {
        let (shape, v) = binary::binary::<T>(
            op,
            a.values(&what)?,
            a.shape(),
            b.values(&what)?,
            b.shape(),
        )?;
        NDArray::from_vec(&shape, v)?
    });
    Ok(out.as_in_context(a.context()))
}

/// `a op s` (or `s op a` when `reverse`), the scalar cast to `a`'s dtype first, as MXNet does.
pub fn scalar(op: BinaryOp, a: &NDArray, s: f64, reverse: bool) -> Result<NDArray> {
    let what = op.name();
    let out = with_dtype!(a.dtype(), T => {
        let v = binary::scalar::<T>(op, a.values(&what)?, Element::from_f64(s), reverse)?;
        NDArray::from_vec(a.shape(), v)?
    });
    Ok(out.as_in_context(a.context()))
}

/// `a` broadcast (numpy rules) to `shape`, materialised.
pub fn broadcast_to(a: &NDArray, shape: &[usize]) -> Result<NDArray> {
    let out = broadcast_shape("broadcast_to", a.shape(), shape)?;
    if out != shape {
        return Err(Error::shape("broadcast_to", "shape", shape, a.shape()));
    }
    let data = with_data!(a.data(), x => match x.broadcast(IxDyn(shape)) {
        Some(v) => Storable::wrap(v.to_owned().into_shared()),
        None => return Err(Error::shape("broadcast_to", "shape", shape, a.shape())),
    });
    Ok(NDArray::from_data(data).as_in_context(a.context()))
}

impl NDArray {
    /// self + other (broadcasting).
    pub fn add(&self, other: &NDArray) -> Result<NDArray> {
        binary(BinaryOp::Add, self, other)
    }
    /// self - other (broadcasting).
    pub fn sub(&self, other: &NDArray) -> Result<NDArray> {
        binary(BinaryOp::Sub, self, other)
    }
    /// self * other (broadcasting).
    pub fn mul(&self, other: &NDArray) -> Result<NDArray> {
        binary(BinaryOp::Mul, self, other)
    }
    /// self / other (broadcasting).
    pub fn div(&self, other: &NDArray) -> Result<NDArray> {
        binary(BinaryOp::Div, self, other)
    }
    /// self * s.
    pub fn mul_scalar(&self, s: f64) -> Result<NDArray> {
        scalar(BinaryOp::Mul, self, s, false)
    }
    /// self + s.
    pub fn add_scalar(&self, s: f64) -> Result<NDArray> {
        scalar(BinaryOp::Add, self, s, false)
    }
    /// -self.
    pub fn neg(&self) -> NDArray {
        let data = with_data!(self.data(), x => Storable::wrap(x.mapv(|v| v.neg()).into_shared()));
        NDArray::from_data(data).as_in_context(self.context())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tensor::DType;

    #[test]
    fn broadcasting_matches_numpy() {
        let a = NDArray::from_vec(&[2, 1], vec![1.0f32, 2.0]).unwrap();
        let b = NDArray::from_vec(&[3], vec![10.0f32, 20.0, 30.0]).unwrap();
        let c = a.add(&b).unwrap();
        assert_eq!(c.shape(), &[2, 3]);
        assert_eq!(c.to_f64_vec(), vec![11.0, 21.0, 31.0, 12.0, 22.0, 32.0]);
        let d = NDArray::from_vec(&[2], vec![1.0f32, 2.0]).unwrap();
        let e = NDArray::from_vec(&[3], vec![1.0f32, 2.0, 3.0]).unwrap();
        let err = d.add(&e).unwrap_err().to_string();
        assert!(err.contains("(2,)") && err.contains("(3,)"), "{err}");
    }

    #[test]
    fn scalars_and_reverse() {
        let a = NDArray::from_vec(&[3], vec![1i32, 2, 4]).unwrap();
        assert_eq!(
            scalar(BinaryOp::Div, &a, 8.0, true).unwrap().to_f64_vec(),
            vec![8.0, 4.0, 2.0]
        );
        assert_eq!(
            scalar(BinaryOp::Div, &a, 0.0, false).unwrap().to_f64_vec(),
            vec![0.0, 0.0, 0.0]
        );
        assert_eq!(
            scalar(BinaryOp::Greater, &a, 1.5, false)
                .unwrap()
                .to_f64_vec(),
            vec![0.0, 1.0, 1.0]
        );
        assert!(a.add(&a.astype(DType::Float32)).is_err());
    }

    #[test]
    fn large_same_shape_is_parallel_and_exact() {
        let n = 1 << 18;
        let a = NDArray::arange(0.0, n as f64, 1.0, DType::Float64).unwrap();
        let s = a.add(&a).unwrap().to_f64_vec();
        assert!(s.iter().enumerate().all(|(i, &v)| v == 2.0 * i as f64));
    }
}
