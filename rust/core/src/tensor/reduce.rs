//! Reductions over axes (sum, mean, max, min, prod with MXNet's `axis` / `keepdims` /
//! `exclude`) and argmax. Each output sums its inputs sequentially, so results do not
//! depend on the thread count.

use super::{norm_axis, Element, NDArray, Storable};
use crate::error::{Error, Result};
use crate::kernels::par;
use crate::with_data;
use ndarray::IxDyn;

/// A reduction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReduceOp {
    /// Sum.
    Sum,
    /// Arithmetic mean.
    Mean,
    /// Maximum.
    Max,
    /// Minimum.
    Min,
    /// Product.
    Prod,
}

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

/// Moves the reduced axes last and returns (the permuted array, outer count, inner count,
/// output shape).
fn split_axes(
    a: &NDArray,
    axes: &[usize],
    keepdims: bool,
) -> Result<(NDArray, usize, usize, Vec<usize>)> {
    let shape = a.shape();
    let kept: Vec<usize> = (0..shape.len()).filter(|i| !axes.contains(i)).collect();
    let perm: Vec<usize> = kept.iter().chain(axes.iter()).copied().collect();
    let moved = a.transpose(Some(&perm))?;
    let outer: usize = kept.iter().map(|&i| shape[i]).product();
    let inner: usize = axes.iter().map(|&i| shape[i]).product();
    let out_shape: Vec<usize> = if keepdims {
        (0..shape.len())
            .map(|i| if axes.contains(&i) { 1 } else { shape[i] })
            .collect()
    } else {
        kept.iter().map(|&i| shape[i]).collect()
    };
    Ok((moved, outer, inner, out_shape))
}

fn reduce_slice<T: Element>(op: ReduceOp, xs: &[T]) -> T {
    match op {
        // Sums accumulate in f64: float32 inputs lose no precision to the accumulation order.
        ReduceOp::Sum => T::from_f64(xs.iter().map(|v| v.to_f64()).sum()),
        ReduceOp::Mean => T::from_f64(xs.iter().map(|v| v.to_f64()).sum::<f64>() / xs.len() as f64),
        ReduceOp::Prod => xs.iter().fold(T::one(), |acc, &v| acc.mul(v)),
        ReduceOp::Max => {
            xs.iter().fold(
                T::lowest(),
                |acc, &v| if acc.is_nan() { acc } else { v.maximum(acc) },
            )
        }
        ReduceOp::Min => xs.iter().fold(T::highest(), |acc, &v| {
            if acc.is_nan() {
                acc
            } else {
                v.minimum(acc)
            }
        }),
    }
}

/// Reduces `a` over `axes` (None = all); `keepdims` keeps them as size 1; `exclude` reduces
/// over every axis except those listed. Integer sums wrap; a mean of nothing is NaN.
pub fn reduce(
    a: &NDArray,
    op: ReduceOp,
    axes: Option<&[isize]>,
    keepdims: bool,
    exclude: bool,
) -> Result<NDArray> {
    let name = format!("{op:?}").to_lowercase();
    let axes = reduce_axes(&name, axes, exclude, a.ndim())?;
    let (moved, outer, inner, out_shape) = split_axes(a, &axes, keepdims)?;
    if inner == 0 && matches!(op, ReduceOp::Max | ReduceOp::Min) && outer > 0 {
        return Err(Error::invalid(
            format!("{name}: input"),
            "a non-empty reduction",
            format!("shape {:?}", a.shape()),
        ));
    }
    let data = with_data!(moved.data(), x => {
        let xs = x.as_slice().unwrap_or(&[]);
        let mut out = vec![Default::default(); outer];
        par::for_each_chunk_mut(&mut out, |start, chunk| {
            for (i, o) in chunk.iter_mut().enumerate() {
                let r = start + i;
                *o = reduce_slice(op, &xs[r * inner..(r + 1) * inner]);
            }
        });
        Storable::wrap(ndarray::ArrayD::from_shape_vec(IxDyn(&out_shape), out)
            .map_err(|e| Error::Msg(format!("internal: {e}")))?.into_shared())
    });
    Ok(NDArray::from_data(data).as_in_context(a.context()))
}

/// Index of the largest value along `axis` (None = over the flattened array, giving shape
/// `(1,)` as MXNet does), returned as float32 like MXNet; the first index wins ties.
pub fn argmax(a: &NDArray, axis: Option<isize>, keepdims: bool) -> Result<NDArray> {
    let (src, axis_list) = match axis {
        None => (a.reshape(&[-1])?, vec![0isize]),
        Some(ax) => (a.clone(), vec![ax]),
    };
    let axes = reduce_axes("argmax", Some(&axis_list), false, src.ndim())?;
    let (moved, outer, inner, mut out_shape) = split_axes(&src, &axes, keepdims)?;
    if inner == 0 {
        return Err(Error::invalid(
            "argmax: input",
            "a non-empty axis",
            format!("shape {:?}", a.shape()),
        ));
    }
    let out: Vec<f32> = with_data!(moved.data(), x => {
        let xs = x.as_slice().unwrap_or(&[]);
        (0..outer).map(|r| {
            let row = &xs[r * inner..(r + 1) * inner];
            let mut best = 0;
            for (i, v) in row.iter().enumerate() {
                if v.is_nan() { best = i; break; }
                if *v > row[best] { best = i; }
            }
            best as f32
        }).collect()
    });
    if axis.is_none() && !keepdims {
        out_shape = vec![1];
    }
    NDArray::from_vec(&out_shape, out).map(|r| r.as_in_context(a.context()))
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
