//! Reductions over axes (sum, mean, max, min, prod with MXNet's `axis` / `keepdims` /
//! `exclude`) and argmax / argmin on NDArrays, over the one fold in `kernels::reduce`.

use super::{norm_axis, NDArray};
use crate::error::{Error, Result};
use crate::kernels::reduce as kreduce;
use crate::with_dtype;

pub use crate::kernels::reduce::ReduceOp;

/// The axes a reduction covers: `axes` (None = all), complemented when `exclude`; sorted,
/// deduplicated, validated against `ndim`.
pub fn reduce_axes(
    op: &str,
    axes: Option<&[isize]>,
    exclude: bool,
    ndim: usize,
) -> Result<Vec<usize>> {
    let mut picked = vec![false; ndim];
    match axes {
        None => picked.iter_mut().for_each(|p| *p = true),
        Some(list) => {
            for &a in list {
                picked[norm_axis(&format!("{op}: axis"), a, ndim)?] = true;
            }
        }
    }
    if exclude && axes.is_some() {
        picked.iter_mut().for_each(|p| *p = !*p);
    }
    Ok((0..ndim).filter(|&i| picked[i]).collect())
}

/// The output shape of a reduction of `shape` over `axes`.
fn reduced_shape(shape: &[usize], axes: &[usize], keepdims: bool) -> Vec<usize> {
    (0..shape.len())
        .filter_map(|i| match (axes.contains(&i), keepdims) {
            (false, _) => Some(shape[i]),
            (true, true) => Some(1),
            (true, false) => None,
        })
        .collect()
}

/// Reduces `a` over `axes` (None = all); `keepdims` keeps them as size 1; `exclude` reduces
/// over every axis except those listed. Computes in `a`'s dtype through the same kernel as
/// the registry's `sum` / `mean` / … operators (integer sums wrap; a float mean of nothing
/// is NaN).
pub fn reduce(
    a: &NDArray,
    op: ReduceOp,
    axes: Option<&[isize]>,
    keepdims: bool,
    exclude: bool,
) -> Result<NDArray> {
    let name = format!("{op:?}").to_lowercase();
    let axes = reduce_axes(&name, axes, exclude, a.ndim())?;
    let inner: usize = axes.iter().map(|&i| a.shape()[i]).product();
    if inner == 0 && matches!(op, ReduceOp::Max | ReduceOp::Min) && a.size() > 0 {
        return Err(Error::invalid(
            format!("{name}: input"),
            "a non-empty reduction",
            format!("shape {:?}", a.shape()),
        ));
    }
    let flags: Vec<bool> = (0..a.ndim()).map(|i| axes.contains(&i)).collect();
    let shape = reduced_shape(a.shape(), &axes, keepdims);
    let out = with_dtype!(a.dtype(), T => {
        let v = kreduce::reduce::<T>(op, a.values(&name)?, a.shape(), &flags)?;
        NDArray::from_vec(&shape, v)?
    });
    Ok(out.as_in_context(a.context()))
}

/// Index of the largest value along `axis` (None = over the flattened array, giving shape
/// `(1,)` as MXNet does), returned as float32 like MXNet; the first index wins ties.
pub fn argmax(a: &NDArray, axis: Option<isize>, keepdims: bool) -> Result<NDArray> {
    arg_reduce(a, axis, keepdims, true)
}

/// [`argmax`], or its mirror argmin when `max` is false; compared in `a`'s dtype.
pub fn arg_reduce(a: &NDArray, axis: Option<isize>, keepdims: bool, max: bool) -> Result<NDArray> {
    let what = if max { "argmax" } else { "argmin" };
    let src = match axis {
        None => a.reshape(&[-1])?,
        Some(_) => a.clone(),
    };
    let ax = norm_axis(&format!("{what}: axis"), axis.unwrap_or(0), src.ndim())?;
    if src.shape()[ax] == 0 {
        return Err(Error::invalid(
            format!("{what}: input"),
            "a non-empty axis",
            format!("shape {:?}", a.shape()),
        ));
    }
    let out = with_dtype!(src.dtype(), T => kreduce::arg_reduce::<T>(src.values(what)?, src.shape(), ax, max)?);
    let shape = match axis {
        None if !keepdims => vec![1],
        _ => reduced_shape(src.shape(), &[ax], keepdims),
    };
    NDArray::from_vec(&shape, out).map(|r| r.as_in_context(a.context()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tensor::DType;

    fn m() -> NDArray {
        NDArray::arange(0.0, 24.0, 1.0, DType::Float32)
            .unwrap()
            .reshape(&[2, 3, 4])
            .unwrap()
    }

    #[test]
    fn sums_over_axes() {
        let a = m();
        assert_eq!(
            reduce(&a, ReduceOp::Sum, None, false, false)
                .unwrap()
                .to_f64_vec(),
            vec![276.0]
        );
        let s = reduce(&a, ReduceOp::Sum, Some(&[1]), false, false).unwrap();
        assert_eq!(s.shape(), &[2, 4]);
        assert_eq!(s.to_f64_vec()[..2], [12.0, 15.0]);
        let k = reduce(&a, ReduceOp::Mean, Some(&[0, 2]), true, false).unwrap();
        assert_eq!(k.shape(), &[1, 3, 1]);
        let e = reduce(&a, ReduceOp::Max, Some(&[1]), false, true).unwrap();
        assert_eq!(e.to_f64_vec(), vec![15.0, 19.0, 23.0]);
        assert!(reduce(&a, ReduceOp::Sum, Some(&[3]), false, false).is_err());
    }

    #[test]
    fn argmax_axis_and_flat() {
        let a = NDArray::from_vec(&[2, 3], vec![1.0f32, 5.0, 5.0, 9.0, 0.0, 2.0]).unwrap();
        assert_eq!(
            argmax(&a, Some(1), false).unwrap().to_f64_vec(),
            vec![1.0, 0.0]
        );
        let f = argmax(&a, None, false).unwrap();
        assert_eq!((f.shape().to_vec(), f.to_f64_vec()), (vec![1], vec![3.0]));
    }
}
