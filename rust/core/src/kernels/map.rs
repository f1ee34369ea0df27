//! The strided elementwise walk every elementwise and broadcasting kernel shares: `map_n`
//! applies a K-operand formula over an output shape, each operand read through its own
//! strides (numpy broadcasting without materialising), for any element type.

use super::par;
use crate::error::{Error, Result};

/// The numpy broadcast of two shapes (aligned on the right), or a `Shape` error naming `op`.
pub fn broadcast_shape(op: &str, a: &[usize], b: &[usize]) -> Result<Vec<usize>> {
    let n = a.len().max(b.len());
    let dim = |s: &[usize], i: usize| {
        if i + s.len() >= n {
            s[i + s.len() - n]
        } else {
            1
        }
    };
    let mut out = vec![0; n];
    for (i, o) in out.iter_mut().enumerate() {
        let (da, db) = (dim(a, i), dim(b, i));
        *o = if da == db || db == 1 {
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

/// Row-major strides of `shape`.
pub fn contiguous_strides(shape: &[usize]) -> Vec<usize> {
    let mut strides = vec![0; shape.len()];
    let mut acc = 1;
    for (s, &d) in strides.iter_mut().zip(shape).rev() {
        *s = acc;
        acc *= d;
    }
    strides
}

/// The strides of an array of `shape` read in the index space of the broadcast shape `out`
/// (numpy rules: aligned on the right, missing and size-1 axes repeat with stride 0).
pub fn broadcast_strides(shape: &[usize], out: &[usize]) -> Vec<usize> {
    let own = contiguous_strides(shape);
    let pad = out.len().saturating_sub(shape.len());
    (0..out.len())
        .map(|i| match i.checked_sub(pad) {
            Some(j) if shape.get(j).is_some_and(|&d| d != 1) => own.get(j).copied().unwrap_or(0),
            _ => 0,
        })
        .collect()
}

/// An (outer, n, inner) view of a shape around `axis`: `n` elements `inner` apart along the
/// axis, for each of `outer * inner` positions (`n` is 1 past the last axis).
pub fn axis_dims(shape: &[usize], axis: usize) -> (usize, usize, usize) {
    let outer = shape[..axis.min(shape.len())].iter().product();
    let n = shape.get(axis).copied().unwrap_or(1);
    let inner = shape.get(axis + 1..).map_or(1, |s| s.iter().product());
    (outer, n, inner)
}

/// `out[i] = f([a_0[i], …, a_K-1[i]])` over `K` slices of one length: [`map_n`] for the common
/// case of same-shape contiguous operands.
pub fn zip_map<T, const K: usize, F>(ins: [&[T]; K], f: F) -> Result<Vec<T>>
where
    T: Copy + Default + Send + Sync,
    F: Fn([T; K]) -> T + Sync + Send,
{
    let n = ins.first().map_or(0, |a| a.len());
    if let Some(bad) = ins.iter().find(|a| a.len() != n) {
        return Err(Error::Msg(format!(
            "internal: zip_map operands of {n} and {} values",
            bad.len()
        )));
    }
    map_n(
        &[n],
        ins.map(|data| Operand {
            data,
            strides: &[1],
        }),
        f,
    )
}

/// One operand of [`map_n`]: its values and its strides in the output's index space (one per
/// output axis; 0 where the operand is repeated).
#[derive(Clone, Copy, Debug)]
pub struct Operand<'a, T> {
    /// The operand's values.
    pub data: &'a [T],
    /// Its strides in the output's index space.
    pub strides: &'a [usize],
}

/// Drops size-1 axes of `shape` and merges neighbouring axes that every operand walks
/// contiguously (stride of the outer = stride of the inner × its size), so rows get long:
/// `(N, C, H, W)` with a `(1, C, 1, 1)` operand becomes `(N, C, H·W)`.
fn collapse<const K: usize>(
    shape: &[usize],
    strides: [&[usize]; K],
) -> (Vec<usize>, [Vec<usize>; K]) {
    let mut dims: Vec<usize> = Vec::with_capacity(shape.len());
    let mut st: [Vec<usize>; K] = std::array::from_fn(|_| Vec::with_capacity(shape.len()));
    for (i, &d) in shape.iter().enumerate() {
        if d == 1 {
            continue;
        }
        let merge = match dims.last_mut() {
            Some(last) if (0..K).all(|k| st[k].last() == Some(&(strides[k][i] * d))) => {
                *last *= d;
                true
            }
            _ => false,
        };
        for (s, src) in st.iter_mut().zip(&strides) {
            if merge {
                if let Some(l) = s.last_mut() {
                    *l = src[i];
                }
            } else {
                s.push(src[i]);
            }
        }
        if !merge {
            dims.push(d);
        }
    }
    if dims.is_empty() {
        dims.push(1);
        st.iter_mut().for_each(|s| s.push(0));
    }
    (dims, st)
}

/// Below this many elements a segment with repeated operands is mapped element by element;
/// above, it goes through 64-wide blocks where repeated values sit in a stack buffer.
const BLOCK: usize = 64;

/// Maps one run of the innermost axis: operand k starts at `offs[k]` and steps `last[k]`.
/// Unit and zero steps (the usual cases) take loops the compiler vectorises.
fn segment<T: Copy, const K: usize, F>(
    out: &mut [T],
    data: [&[T]; K],
    offs: [usize; K],
    last: [usize; K],
    f: &F,
) where
    F: Fn([T; K]) -> T,
{
    let len = out.len();
    if last.iter().all(|&s| s == 1) {
        let parts: [&[T]; K] = std::array::from_fn(|k| &data[k][offs[k]..offs[k] + len]);
        for (j, o) in out.iter_mut().enumerate() {
            *o = f(std::array::from_fn(|k| parts[k][j]));
        }
    } else if len >= BLOCK / 4 && last.iter().all(|&s| s <= 1) {
        let bufs: [[T; BLOCK]; K] = std::array::from_fn(|k| [data[k][offs[k]]; BLOCK]);
        for (bi, block) in out.chunks_mut(BLOCK).enumerate() {
            let (o0, bl) = (bi * BLOCK, block.len());
            let parts: [&[T]; K] = std::array::from_fn(|k| {
                if last[k] == 1 {
                    &data[k][offs[k] + o0..offs[k] + o0 + bl]
                } else {
                    &bufs[k][..bl]
                }
            });
            for (j, o) in block.iter_mut().enumerate() {
                *o = f(std::array::from_fn(|k| parts[k][j]));
            }
        }
    } else {
        for (j, o) in out.iter_mut().enumerate() {
            *o = f(std::array::from_fn(|k| data[k][offs[k] + j * last[k]]));
        }
    }
}

/// `out[i] = f([op_0[i], …, op_K-1[i]])` over an output of `out_shape`, each operand read
/// through its strides (broadcasting without materialising). The output is cut into the fixed
/// chunks of `kernels::par`, each walked as runs of the (collapsed) innermost axis.
pub fn map_n<T, const K: usize, F>(
    out_shape: &[usize],
    ins: [Operand<'_, T>; K],
    f: F,
) -> Result<Vec<T>>
where
    T: Copy + Default + Send + Sync,
    F: Fn([T; K]) -> T + Sync + Send,
{
    let n: usize = out_shape.iter().product();
    let nd = out_shape.len();
    for op in &ins {
        // Every offset the loops below compute is at most `reach - 1`: checking it once here
        // keeps the inner loops free of failure paths.
        let reach: usize = out_shape
            .iter()
            .zip(op.strides)
            .map(|(&d, &s)| d.saturating_sub(1) * s)
            .sum::<usize>()
            + 1;
        if op.strides.len() != nd || (n > 0 && reach > op.data.len()) {
            return Err(Error::Msg(format!(
                "internal: operand of {} values with strides {:?} does not cover shape {:?}",
                op.data.len(),
                op.strides,
                out_shape
            )));
        }
    }
    let mut out = vec![T::default(); n];
    if n == 0 {
        return Ok(out);
    }
    let (dims, st) = collapse::<K>(out_shape, std::array::from_fn(|k| ins[k].strides));
    let row_len = dims[dims.len() - 1];
    let outer = &dims[..dims.len() - 1];
    let last: [usize; K] = std::array::from_fn(|k| st[k][dims.len() - 1]);
    let data: [&[T]; K] = std::array::from_fn(|k| ins[k].data);
    par::for_each_chunk_mut(&mut out, |start, chunk| {
        let mut done = 0;
        while done < chunk.len() {
            let pos = start + done;
            let (mut row, col) = (pos / row_len, pos % row_len);
            let mut offs = [0usize; K];
            for (ax, &d) in outer.iter().enumerate().rev() {
                let idx = row % d;
                row /= d;
                for (o, s) in offs.iter_mut().zip(&st) {
                    *o += idx * s[ax];
                }
            }
            for (o, l) in offs.iter_mut().zip(&last) {
                *o += col * l;
            }
            let seg = (row_len - col).min(chunk.len() - done);
            segment(&mut chunk[done..done + seg], data, offs, last, &f);
            done += seg;
        }
    });
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::reduce::sum_to;

    #[test]
    fn axis_dims_views_a_shape_around_an_axis() {
        assert_eq!(axis_dims(&[2, 3, 4], 1), (2, 3, 4));
        assert_eq!(axis_dims(&[5], 0), (1, 5, 1));
        assert_eq!(axis_dims(&[2, 3], 2), (6, 1, 1));
    }

    #[test]
    fn strides_follow_numpy_broadcasting() {
        assert_eq!(contiguous_strides(&[2, 3, 4]), vec![12, 4, 1]);
        assert_eq!(broadcast_strides(&[3, 1], &[2, 3, 4]), vec![0, 1, 0]);
        assert_eq!(broadcast_strides(&[4], &[2, 3, 4]), vec![0, 0, 1]);
        assert_eq!(broadcast_strides(&[], &[2]), vec![0]);
        assert_eq!(broadcast_shape("t", &[2, 1], &[3]).unwrap(), vec![2, 3]);
        assert!(broadcast_shape("t", &[2], &[3]).is_err());
    }

    #[test]
    fn map_n_broadcasts_and_matches_flat_path() {
        let a: Vec<f32> = (0..6).map(|v| v as f32).collect(); // (2, 3)
        let b = vec![10.0f32, 20.0]; // (2, 1)
        let (sa, sb) = (
            broadcast_strides(&[2, 3], &[2, 3]),
            broadcast_strides(&[2, 1], &[2, 3]),
        );
        let out = map_n(
            &[2, 3],
            [
                Operand {
                    data: &a,
                    strides: &sa,
                },
                Operand {
                    data: &b,
                    strides: &sb,
                },
            ],
            |[x, y]| x + y,
        )
        .unwrap();
        assert_eq!(out, vec![10.0, 11.0, 12.0, 23.0, 24.0, 25.0]);
        // Too short an operand is an error, not a panic.
        let short = [1.0f32];
        assert!(map_n(
            &[2, 3],
            [Operand {
                data: &short,
                strides: &sa
            }],
            |[x]| x
        )
        .is_err());
        // A large broadcast agrees with the flat path and is exact.
        let n = par::SERIAL_BELOW * 2 + 5;
        let big: Vec<f32> = (0..n).map(|v| (v % 97) as f32).collect();
        let one = [2.0f32];
        let s1 = contiguous_strides(&[n]);
        let s0 = broadcast_strides(&[1], &[n]);
        let got = map_n(
            &[n],
            [
                Operand {
                    data: &big,
                    strides: &s1,
                },
                Operand {
                    data: &one,
                    strides: &s0,
                },
            ],
            |[x, y]| x * y,
        )
        .unwrap();
        assert!(got.iter().zip(&big).all(|(g, v)| *g == v * 2.0));
    }

    /// Element `i` of the output read the naive way: decode, drop broadcast axes, re-encode.
    fn naive_index(i: usize, out: &[usize], shape: &[usize]) -> usize {
        let pad = out.len() - shape.len();
        let mut rem = i;
        let mut idx = vec![0; out.len()];
        for ax in (0..out.len()).rev() {
            idx[ax] = rem % out[ax];
            rem /= out[ax];
        }
        let mut off = 0;
        for (j, &d) in shape.iter().enumerate() {
            off = off * d + if d == 1 { 0 } else { idx[j + pad] };
        }
        off
    }

    #[test]
    fn map_n_agrees_with_naive_broadcasting() {
        let big = par::SERIAL_BELOW / 64 + 3;
        let cases: Vec<(Vec<usize>, Vec<usize>)> = vec![
            (vec![2, 3, 4, 5], vec![1, 3, 1, 1]),
            (vec![2, 3, 4, 5], vec![3, 1, 5]),
            (vec![5, 1, 7], vec![1, 6, 1]),
            (vec![4, 1], vec![1, 70]),
            (vec![big, 2, 64], vec![1, 2, 1]),
            (vec![big, 3, 33], vec![33]),
            (vec![3, big, 17], vec![3, 1, 1]),
            (vec![1], vec![big, 40]),
        ];
        for (sa, sb) in cases {
            let out = broadcast_shape("t", &sa, &sb).unwrap();
            let a: Vec<f32> = (0..sa.iter().product::<usize>())
                .map(|v| (v % 1013) as f32)
                .collect();
            let b: Vec<f32> = (0..sb.iter().product::<usize>())
                .map(|v| (v % 17) as f32 * 0.5)
                .collect();
            let (ta, tb) = (broadcast_strides(&sa, &out), broadcast_strides(&sb, &out));
            let got = map_n(
                &out,
                [
                    Operand {
                        data: &a,
                        strides: &ta,
                    },
                    Operand {
                        data: &b,
                        strides: &tb,
                    },
                ],
                |[x, y]| x * 3.0 - y,
            )
            .unwrap();
            for (i, g) in got.iter().enumerate() {
                let want = a[naive_index(i, &out, &sa)] * 3.0 - b[naive_index(i, &out, &sb)];
                assert_eq!(*g, want, "{sa:?} x {sb:?} at {i}");
            }
            // The gradient of b, summed back, matches a naive accumulation.
            let g = sum_to(got.clone(), &out, &sb).unwrap();
            let mut want = vec![0.0f64; b.len()];
            for (i, v) in got.iter().enumerate() {
                want[naive_index(i, &out, &sb)] += *v as f64;
            }
            for (x, y) in g.iter().zip(&want) {
                assert!(
                    (*x as f64 - y).abs() <= 1e-6 * y.abs().max(1.0),
                    "{sa:?} x {sb:?}"
                );
            }
        }
    }

    #[test]
    fn sum_to_reduces_repeated_axes() {
        let full: Vec<f32> = (0..24).map(|v| v as f32).collect(); // (2, 3, 4)
        let g = sum_to(full.clone(), &[2, 3, 4], &[3, 1]).unwrap();
        let want: Vec<f64> = (0..3)
            .map(|j| {
                (0..2)
                    .flat_map(|i| (0..4).map(move |k| (i * 12 + j * 4 + k) as f64))
                    .sum()
            })
            .collect();
        assert_eq!(g.iter().map(|&v| v as f64).collect::<Vec<_>>(), want);
        let same = sum_to(full.clone(), &[2, 3, 4], &[2, 3, 4]).unwrap();
        assert_eq!(same, full);
    }

    #[test]
    fn map_n_broadcasts_in_any_element_type() {
        let (a, b) = (vec![1i64 << 40, 2], vec![1i64, 10, 100]);
        let out = [2, 3];
        let (sa, sb) = (
            broadcast_strides(&[2, 1], &out),
            broadcast_strides(&[3], &out),
        );
        let ins = [
            Operand {
                data: &a,
                strides: &sa,
            },
            Operand {
                data: &b,
                strides: &sb,
            },
        ];
        let c = map_n(&out, ins, |[x, y]| x + y).unwrap();
        let big = 1i64 << 40;
        assert_eq!(c, vec![big + 1, big + 10, big + 100, 3, 12, 102]);
    }
}
