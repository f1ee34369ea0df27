//! Elementwise arithmetic on NDArrays: binary ops with numpy broadcasting, scalar ops and
//! comparisons. Inputs of a binary op share one dtype (as in MXNet); results keep it.

use super::{Data, Element, NDArray, Storable};
use crate::error::{Error, Result};
use crate::kernels::par;
use crate::with_data;
use ndarray::{ArcArray, ArrayD, IxDyn, Zip};

/// A binary elementwise operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BinaryOp {
    /// a + b
    Add,
    /// a - b
    Sub,
    /// a * b
    Mul,
    /// a / b
    Div,
    /// a ** b
    Pow,
    /// a mod b
    Mod,
    /// max(a, b)
    Maximum,
    /// min(a, b)
    Minimum,
    /// a == b (1 or 0)
    Equal,
    /// a != b
    NotEqual,
    /// a < b
    Lesser,
    /// a <= b
    LesserEqual,
    /// a > b
    Greater,
    /// a >= b
    GreaterEqual,
}

impl BinaryOp {
    /// Applies the op to two elements.
    #[inline(always)]
    pub fn apply<T: Element>(self, a: T, b: T) -> T {
        let flag = |c: bool| if c { T::one() } else { T::zero() };
        match self {
            BinaryOp::Add => a.add(b),
            BinaryOp::Sub => a.sub(b),
            BinaryOp::Mul => a.mul(b),
            BinaryOp::Div => a.div(b),
            BinaryOp::Pow => a.pow(b),
            BinaryOp::Mod => a.rem(b),
            BinaryOp::Maximum => a.maximum(b),
            BinaryOp::Minimum => a.minimum(b),
            BinaryOp::Equal => flag(a == b),
            BinaryOp::NotEqual => flag(a != b),
            BinaryOp::Lesser => flag(a < b),
            BinaryOp::LesserEqual => flag(a <= b),
            BinaryOp::Greater => flag(a > b),
            BinaryOp::GreaterEqual => flag(a >= b),
        }
    }
}

/// The numpy broadcast of two shapes (aligned on the right), or a `Shape` error naming `op`.
pub fn broadcast_shape(op: &str, a: &[usize], b: &[usize]) -> Result<Vec<usize>> {
    let n = a.len().max(b.len());
    let mut out = vec![0; n];
    for i in 0..n {
        let da = if i + a.len() >= n {
            a[i + a.len() - n]
        } else {
            1
        };
        let db = if i + b.len() >= n {
            b[i + b.len() - n]
        } else {
            1
        };
        out[i] = if da == db || db == 1 {
            da
        } else if da == 1 {
            db
        } else {
            return Err(Error::shape(
                op,
                "rhs (shapes must be equal or 1 on each axis)",
                a,
                b,
            ));
        };
    }
    Ok(out)
}

// One kernel per op: the match on `op` sits outside the loop so the closure inlines and the
// same-shape path vectorises.
fn zip_with<T: Storable>(
    op: BinaryOp,
    a: &ArcArray<T, IxDyn>,
    b: &ArcArray<T, IxDyn>,
    shape: &[usize],
) -> Result<Data> {
    macro_rules! run {
        ($f:expr) => {{
            let f = $f;
            if a.shape() == b.shape() {
                if let (Some(x), Some(y)) = (a.as_slice(), b.as_slice()) {
                    let mut out = vec![T::zero(); x.len()];
                    par::for_each_chunk_mut(&mut out, |start, chunk| {
                        let xs = &x[start..start + chunk.len()];
                        let ys = &y[start..start + chunk.len()];
                        for ((o, &p), &q) in chunk.iter_mut().zip(xs).zip(ys) {
                            *o = f(p, q);
                        }
                    });
                    let arr = ArrayD::from_shape_vec(IxDyn(shape), out)
                        .map_err(|e| Error::Msg(format!("internal: {e}")))?;
                    return Ok(T::wrap(arr.into_shared()));
                }
            }
            // Broadcasting path: the shapes were checked by broadcast_shape.
            match (a.broadcast(IxDyn(shape)), b.broadcast(IxDyn(shape))) {
                (Some(x), Some(y)) => Ok(T::wrap(
                    Zip::from(&x)
                        .and(&y)
                        .map_collect(|&p, &q| f(p, q))
                        .into_shared(),
                )),
                _ => Err(Error::shape(
                    "broadcast",
                    "operands",
                    shape,
                    (a.shape(), b.shape()),
                )),
            }
        }};
    }
    match op {
        BinaryOp::Add => run!(|p: T, q: T| p.add(q)),
        BinaryOp::Sub => run!(|p: T, q: T| p.sub(q)),
        BinaryOp::Mul => run!(|p: T, q: T| p.mul(q)),
        BinaryOp::Div => run!(|p: T, q: T| p.div(q)),
        other => run!(move |p: T, q: T| other.apply(p, q)),
    }
}

/// `a op b` with numpy broadcasting. Both arrays must have the same dtype.
pub fn binary(op: BinaryOp, a: &NDArray, b: &NDArray) -> Result<NDArray> {
    let name = format!("{op:?}").to_lowercase();
    if a.dtype() != b.dtype() {
        return Err(Error::invalid(
            format!("{name}: rhs dtype"),
            format!("{} (the dtype of lhs)", a.dtype()),
            b.dtype().name(),
        ));
    }
    let shape = broadcast_shape(&name, a.shape(), b.shape())?;
    let data = with_data!(a.data(), x => {
        match Storable::unwrap_ref(b.data()) {
            Some(y) => zip_with(op, x, y, &shape)?,
            None => return Err(Error::Msg("internal: dtype dispatch".into())),
        }
    });
    Ok(NDArray::from_data(data).as_in_context(a.context()))
}

/// `a op s` (or `s op a` when `reverse`), the scalar cast to `a`'s dtype first, as MXNet does.
pub fn scalar(op: BinaryOp, a: &NDArray, s: f64, reverse: bool) -> Result<NDArray> {
    let sa = NDArray::full(&[], s, a.dtype());
    if reverse {
        binary(op, &sa, a)
    } else {
        binary(op, a, &sa)
    }
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

/// Applies `f` (given as f64 → f64) to every element, keeping the dtype.
pub fn map_f64(a: &NDArray, f: impl Fn(f64) -> f64 + Sync) -> NDArray {
    let data = with_data!(a.data(), x => Storable::wrap(x.mapv(|v| from_f64_like(v, f(v.to_f64()))).into_shared()));
    NDArray::from_data(data).as_in_context(a.context())
}

fn from_f64_like<T: Element>(_like: T, v: f64) -> T {
    T::from_f64(v)
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
