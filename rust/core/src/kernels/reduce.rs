//! Reductions over axes: one fold ([`fold_axes`]) that every sum, mean, max, min, prod,
//! nansum, broadcast-gradient sum and arg-reduction (argmax / argmin) runs through, for
//! every element type. Each output folds its inputs in one fixed order, so results do not
//! depend on the thread count.
//!
//! The dtype policy of sums and products: floating-point inputs accumulate in f64 (float32
//! data loses nothing to the accumulation order) and round once; integers accumulate in i64
//! with wrapping, which gives the same bits as MXNet's accumulation in the array's own type.
//! Max and min compare in the array's own type (exact for int64).

use super::par;
use super::tuning::REDUCE_OUT_BLOCK;
use crate::error::{Error, Result};
use crate::tensor::Element;

/// A reduction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReduceOp {
    /// Sum.
    Sum,
    /// Arithmetic mean (integers: the wrapped sum divided by the count, truncated).
    Mean,
    /// Maximum (NaN propagates).
    Max,
    /// Minimum (NaN propagates).
    Min,
    /// Product.
    Prod,
    /// Sum ignoring NaN.
    NanSum,
}

/// (size, stride) of each axis group, outermost first.
type Groups = Vec<(usize, usize)>;

/// Offset of the `index`-th element (row-major) of the groups' index space.
fn offset_of(mut index: usize, groups: &[(usize, usize)]) -> usize {
    let mut off = 0;
    for &(d, s) in groups.iter().rev() {
        off += (index % d) * s;
        index /= d;
    }
    off
}

/// Calls `f(offset)` for every element of the groups' index space, in row-major order (once
/// with 0 when there are no groups).
fn for_each_offset(groups: &[(usize, usize)], mut f: impl FnMut(usize)) {
    let total: usize = groups.iter().map(|g| g.0).product();
    let mut idx = vec![0usize; groups.len()];
    let mut off = 0;
    for _ in 0..total {
        f(off);
        for (i, &(d, s)) in groups.iter().enumerate().rev() {
            idx[i] += 1;
            off += s;
            if idx[i] < d {
                break;
            }
            idx[i] = 0;
            off -= d * s;
        }
    }
}

/// Folds contiguous `x` of `shape` over the axes flagged in `reduced` (`fold(acc, v)` from
/// `init`, then `finish(acc)` per output), giving the kept elements in order. The reduced
/// elements of one output are visited in row-major order. Size-1 axes are dropped and neighbours
/// with the same role merged; when the innermost group is reduced each output folds a
/// contiguous run, otherwise whole rows accumulate at once (vectorised). Each output folds its
/// inputs in one fixed order, so results do not depend on the thread count.
pub fn fold_axes<T, A, R, F, G>(
    x: &[T],
    shape: &[usize],
    reduced: &[bool],
    init: A,
    fold: F,
    finish: G,
) -> Result<Vec<R>>
where
    T: Copy + Sync,
    A: Copy + Send + Sync,
    R: Copy + Default + Send,
    F: Fn(A, T) -> A + Sync + Send,
    G: Fn(A) -> R + Sync + Send,
{
    let n: usize = shape.iter().product();
    if x.len() != n || reduced.len() != shape.len() {
        return Err(Error::Msg(format!(
            "internal: fold_axes over {} values of shape {shape:?} ({} flags)",
            x.len(),
            reduced.len()
        )));
    }
    if n == 0 {
        // Nothing to read: an empty kept axis gives no outputs; a reduction over an empty
        // axis gives `init` for each output.
        let n_out: usize = shape
            .iter()
            .zip(reduced)
            .filter(|(_, &r)| !r)
            .map(|(&d, _)| d)
            .product();
        return Ok(vec![finish(init); n_out]);
    }
    // Axis groups (size, reduced), then their strides.
    let mut groups: Vec<(usize, bool)> = Vec::new();
    for (&d, &r) in shape.iter().zip(reduced) {
        if d == 1 {
            continue;
        }
        match groups.last_mut() {
            Some((size, role)) if *role == r => *size *= d,
            _ => groups.push((d, r)),
        }
    }
    let mut kept: Groups = Vec::new();
    let mut red: Groups = Vec::new();
    let mut stride = 1;
    for &(d, r) in groups.iter().rev() {
        if r {
            red.insert(0, (d, stride));
        } else {
            kept.insert(0, (d, stride));
        }
        stride *= d;
    }
    let n_out: usize = kept.iter().map(|g| g.0).product();
    let out = match groups.last() {
        // Innermost group reduced: each output folds contiguous runs; one task per output.
        Some(&(run, true)) => {
            let outer_red = &red[..red.len() - 1];
            par::map_indices(n_out, n, |i| {
                let base = offset_of(i, &kept);
                let mut acc = init;
                for_each_offset(outer_red, |off| {
                    for &v in &x[base + off..base + off + run] {
                        acc = fold(acc, v);
                    }
                });
                finish(acc)
            })
        }
        // Innermost group kept (or nothing left): rows of outputs accumulate elementwise, in
        // fixed blocks of REDUCE_OUT_BLOCK outputs (one task each), walked as runs within rows.
        _ => {
            let row_len = kept.last().map_or(1, |g| g.0);
            let outer_kept = &kept[..kept.len().saturating_sub(1)];
            let blocks = par::map_indices(n_out.div_ceil(REDUCE_OUT_BLOCK), n, |b| {
                let start = b * REDUCE_OUT_BLOCK;
                let len = REDUCE_OUT_BLOCK.min(n_out - start);
                let mut out = vec![R::default(); len];
                let mut acc = vec![init; len.min(row_len)];
                let mut done = 0;
                while done < len {
                    let pos = start + done;
                    let (row, col) = (pos / row_len, pos % row_len);
                    let seg = (row_len - col).min(len - done);
                    let base = offset_of(row, outer_kept) + col;
                    let acc = &mut acc[..seg];
                    acc.fill(init);
                    for_each_offset(&red, |off| {
                        for (a, &v) in acc.iter_mut().zip(&x[base + off..base + off + seg]) {
                            *a = fold(*a, v);
                        }
                    });
                    for (o, a) in out[done..done + seg].iter_mut().zip(acc.iter()) {
                        *o = finish(*a);
                    }
                    done += seg;
                }
                out
            });
            blocks.concat()
        }
    };
    Ok(out)
}

/// Reduces `x` (contiguous, of `shape`) over the axes flagged in `reduced` with `op`, in
/// `T` under the policy in the module doc. An empty reduction gives the op's identity (NaN
/// for a float mean, 0 for an integer one).
pub fn reduce<T: Element>(
    op: ReduceOp,
    x: &[T],
    shape: &[usize],
    reduced: &[bool],
) -> Result<Vec<T>> {
    let count = shape
        .iter()
        .zip(reduced)
        .filter(|(_, &r)| r)
        .map(|(&d, _)| d)
        .product::<usize>();
    let float = T::DTYPE.is_float();
    let f = |v: f64| T::from_f64(v);
    let int = |v: i64| T::from_i64(v);
    match op {
        ReduceOp::Sum if float => fold_axes(x, shape, reduced, 0.0, |a, v: T| a + v.to_f64(), f),
        ReduceOp::Sum => fold_axes(
            x,
            shape,
            reduced,
            0i64,
            |a, v: T| a.wrapping_add(v.to_i64()),
            int,
        ),
        ReduceOp::NanSum if float => fold_axes(
            x,
            shape,
            reduced,
            0.0,
            |a, v: T| if v.is_nan() { a } else { a + v.to_f64() },
            f,
        ),
        ReduceOp::NanSum => reduce(ReduceOp::Sum, x, shape, reduced),
        ReduceOp::Mean if float => {
            let n = count as f64;
            fold_axes(
                x,
                shape,
                reduced,
                0.0,
                |a, v: T| a + v.to_f64(),
                |a| f(a / n),
            )
        }
        ReduceOp::Mean => {
            let n = count.max(1) as i64;
            fold_axes(
                x,
                shape,
                reduced,
                0i64,
                |a, v: T| a.wrapping_add(v.to_i64()),
                |a| int(int(a).to_i64() / n),
            )
        }
        ReduceOp::Prod if float => fold_axes(x, shape, reduced, 1.0, |a, v: T| a * v.to_f64(), f),
        ReduceOp::Prod => fold_axes(
            x,
            shape,
            reduced,
            1i64,
            |a, v: T| a.wrapping_mul(v.to_i64()),
            int,
        ),
        // Once the accumulator is NaN no comparison replaces it.
        ReduceOp::Max => fold_axes(
            x,
            shape,
            reduced,
            T::lowest(),
            |a, v: T| {
                if v > a || v.is_nan() {
                    v
                } else {
                    a
                }
            },
            |a| a,
        ),
        ReduceOp::Min => fold_axes(
            x,
            shape,
            reduced,
            T::highest(),
            |a, v: T| {
                if v < a || v.is_nan() {
                    v
                } else {
                    a
                }
            },
            |a| a,
        ),
    }
}

/// Sums `full` (a gradient of the broadcast shape `out_shape`) over the axes along which an
/// input of `shape` was repeated, giving the input's gradient (in `shape`'s element order).
pub fn sum_to<T: Element>(full: Vec<T>, out_shape: &[usize], shape: &[usize]) -> Result<Vec<T>> {
    if out_shape == shape {
        return Ok(full);
    }
    let pad = out_shape.len().saturating_sub(shape.len());
    let reduced: Vec<bool> = (0..out_shape.len())
        .map(|i| match i.checked_sub(pad) {
            None => true,
            Some(j) => shape.get(j) == Some(&1),
        })
        .collect();
    reduce(ReduceOp::Sum, &full, out_shape, &reduced)
}

/// The index along `axis` of the largest (`max`) or smallest value of each lane of `x`
/// (contiguous, of `shape`), compared in `T`; the first index wins ties and the first NaN
/// wins over everything. Indices come back as float32, as MXNet returns them.
pub fn arg_reduce<T: Element>(
    x: &[T],
    shape: &[usize],
    axis: usize,
    max: bool,
) -> Result<Vec<f32>> {
    let reduced: Vec<bool> = (0..shape.len()).map(|i| i == axis).collect();
    let init = (0usize, 0usize, if max { T::lowest() } else { T::highest() });
    fold_axes(
        x,
        shape,
        &reduced,
        init,
        |(i, best_i, best), v: T| {
            let better = if max { v > best } else { v < best };
            if !best.is_nan() && (v.is_nan() || better) {
                (i + 1, i, v)
            } else {
                (i + 1, best_i, best)
            }
        },
        |(_, best_i, _)| best_i as f32,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integer_sums_are_exact_and_wrap_like_the_dtype() {
        let big = (1i64 << 40) + 1;
        let x = vec![big, 1, 2, 3];
        assert_eq!(
            reduce(ReduceOp::Sum, &x, &[2, 2], &[true, false]).unwrap(),
            vec![big + 2, 4]
        );
        let y = vec![i32::MAX, 1];
        assert_eq!(
            reduce(ReduceOp::Sum, &y, &[2], &[true]).unwrap(),
            vec![i32::MIN]
        );
        assert_eq!(
            reduce(ReduceOp::Mean, &[7i32, 8], &[2], &[true]).unwrap(),
            vec![7]
        );
        assert_eq!(
            reduce(ReduceOp::Max, &[big, big - 1], &[2], &[true]).unwrap(),
            vec![big]
        );
    }

    #[test]
    fn float_reductions_propagate_nan_and_skip_it_in_nansum() {
        let x = [1.0f64, f64::NAN, 3.0];
        assert!(reduce(ReduceOp::Max, &x, &[3], &[true]).unwrap()[0].is_nan());
        assert_eq!(
            reduce(ReduceOp::NanSum, &x, &[3], &[true]).unwrap(),
            vec![4.0]
        );
        assert!(reduce(ReduceOp::Mean, &[0.0f32; 0], &[0], &[true]).unwrap()[0].is_nan());
    }

    #[test]
    fn arg_reduce_first_index_wins() {
        let x = [1.0f32, 5.0, 5.0, 9.0, 0.0, 2.0];
        assert_eq!(arg_reduce(&x, &[2, 3], 1, true).unwrap(), vec![1.0, 0.0]);
        assert_eq!(
            arg_reduce(&x, &[2, 3], 0, false).unwrap(),
            vec![0.0, 1.0, 1.0]
        );
        let big = [i64::MAX - 1, i64::MAX, i64::MAX];
        assert_eq!(arg_reduce(&big, &[3], 0, true).unwrap(), vec![1.0]);
    }

    fn naive(x: &[f32], shape: &[usize], reduced: &[bool]) -> Vec<f64> {
        let kept: Vec<usize> = (0..shape.len()).filter(|&i| !reduced[i]).collect();
        let n_out: usize = kept.iter().map(|&i| shape[i]).product();
        let mut out = vec![0.0f64; n_out];
        for (i, &v) in x.iter().enumerate() {
            let mut rem = i;
            let mut idx = vec![0; shape.len()];
            for ax in (0..shape.len()).rev() {
                idx[ax] = rem % shape[ax];
                rem /= shape[ax];
            }
            let o = kept.iter().fold(0, |acc, &ax| acc * shape[ax] + idx[ax]);
            out[o] += v as f64;
        }
        out
    }

    #[test]
    fn fold_axes_agrees_with_naive_sums() {
        let long = par::SERIAL_BELOW / 8 + 5;
        let cases: Vec<(Vec<usize>, Vec<bool>)> = vec![
            (vec![3, 4, 5], vec![true, false, false]),
            (vec![3, 4, 5], vec![false, true, false]),
            (vec![3, 4, 5], vec![false, false, true]),
            (vec![3, 4, 5], vec![true, false, true]),
            (vec![3, 4, 5], vec![false, true, true]),
            (vec![3, 4, 5], vec![true, true, true]),
            (vec![3, 4, 5], vec![false, false, false]),
            (vec![2, 1, 3, 1], vec![false, true, true, false]),
            (vec![1, 1], vec![true, true]),
            (vec![long, 9], vec![true, false]),
            (vec![9, long], vec![true, false]),
            (vec![long, 3, 4], vec![false, true, false]),
            (vec![4, long], vec![false, true]),
        ];
        for (shape, reduced) in cases {
            let x: Vec<f32> = (0..shape.iter().product::<usize>())
                .map(|v| ((v * 7) % 23) as f32 - 11.0)
                .collect();
            let got =
                fold_axes(&x, &shape, &reduced, 0.0, |a, v| a + v as f64, |a| a as f32).unwrap();
            let want = naive(&x, &shape, &reduced);
            assert_eq!(got.len(), want.len(), "{shape:?} {reduced:?}");
            for (g, w) in got.iter().zip(&want) {
                assert_eq!(*g as f64, *w, "{shape:?} {reduced:?}");
            }
        }
        // Empty inputs and mismatched lengths.
        assert_eq!(
            fold_axes(
                &[] as &[f32],
                &[3, 0],
                &[false, true],
                1.0,
                |a, _| a,
                |a: f64| a as f32
            )
            .unwrap(),
            vec![1.0; 3]
        );
        assert!(fold_axes(&[1.0f32], &[2], &[true], 0.0, |a, _| a, |a: f64| a as f32).is_err());
    }
}
