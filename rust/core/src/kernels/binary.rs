//! Binary elementwise arithmetic and comparisons for every element type: the formulas of
//! `a + b`, `broadcast_add`, `elemwise_add`, `_plus_scalar` and their relatives, applied
//! with numpy broadcasting through [`map_n`]. NDArray methods and the registry operators
//! both compute here, in the operands' own dtype (float16 rounds once per operation).

use super::map::{broadcast_shape, broadcast_strides, map_n, Operand};
use super::par;
use crate::error::Result;
use crate::tensor::Element;

/// A binary elementwise operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BinaryOp {
    /// a + b
    Add,
    /// a - b
    Sub,
    /// a * b
    Mul,
    /// a / b (integers truncate toward zero; division by zero gives 0)
    Div,
    /// a ** b
    Pow,
    /// a mod b, with the sign of b (Python's and MXNet's `mod`)
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
    /// Applies the op to two elements. Maximum and minimum are mshadow's `a > b ? a : b` and
    /// `a < b ? a : b`, as MXNet computes them (a NaN in `a` gives `b`).
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
            BinaryOp::Maximum => {
                if a > b {
                    a
                } else {
                    b
                }
            }
            BinaryOp::Minimum => {
                if a < b {
                    a
                } else {
                    b
                }
            }
            BinaryOp::Equal => flag(a == b),
            BinaryOp::NotEqual => flag(a != b),
            BinaryOp::Lesser => flag(a < b),
            BinaryOp::LesserEqual => flag(a <= b),
            BinaryOp::Greater => flag(a > b),
            BinaryOp::GreaterEqual => flag(a >= b),
        }
    }

    /// The op's lower-case name, for error messages.
    pub fn name(self) -> String {
        format!("{self:?}").to_lowercase()
    }
}

/// `a op b` over contiguous operands of shapes `sa` and `sb`, broadcast (numpy rules) to
/// their common shape, which is returned with the values.
pub fn binary<T: Element>(
    op: BinaryOp,
    a: &[T],
    sa: &[usize],
    b: &[T],
    sb: &[usize],
) -> Result<(Vec<usize>, Vec<T>)> {
    let shape = broadcast_shape(&op.name(), sa, sb)?;
    let (st_a, st_b) = (broadcast_strides(sa, &shape), broadcast_strides(sb, &shape));
    let ins = [
        Operand {
            data: a,
            strides: &st_a,
        },
        Operand {
            data: b,
            strides: &st_b,
        },
    ];
    // One closure per op, the match outside the loop, so the common ones inline and
    // vectorise.
    let out = match op {
        BinaryOp::Add => map_n(&shape, ins, |[x, y]| x.add(y)),
        BinaryOp::Sub => map_n(&shape, ins, |[x, y]| x.sub(y)),
        BinaryOp::Mul => map_n(&shape, ins, |[x, y]| x.mul(y)),
        BinaryOp::Div => map_n(&shape, ins, |[x, y]| x.div(y)),
        other => map_n(&shape, ins, move |[x, y]| other.apply(x, y)),
    }?;
    Ok((shape, out))
}

/// `a op s` (or `s op a` when `reverse`) for a scalar already in `a`'s type.
pub fn scalar<T: Element>(op: BinaryOp, a: &[T], s: T, reverse: bool) -> Result<Vec<T>> {
    let shape = [a.len()];
    let ins = [Operand {
        data: a,
        strides: &[1],
    }];
    match (op, reverse) {
        (BinaryOp::Add, _) => map_n(&shape, ins, |[x]| x.add(s)),
        (BinaryOp::Mul, _) => map_n(&shape, ins, |[x]| x.mul(s)),
        (BinaryOp::Sub, false) => map_n(&shape, ins, |[x]| x.sub(s)),
        (BinaryOp::Div, false) => map_n(&shape, ins, |[x]| x.div(s)),
        (_, false) => map_n(&shape, ins, |[x]| op.apply(x, s)),
        (_, true) => map_n(&shape, ins, |[x]| op.apply(s, x)),
    }
}

/// The slices summed element by element in slice order (`add_n`): the same bits at any
/// thread count. All slices have the first one's length.
pub fn sum_in_order<T: Element>(xs: &[&[T]]) -> Vec<T> {
    let Some(first) = xs.first() else {
        return vec![];
    };
    let mut out = first.to_vec();
    par::for_each_chunk_mut(&mut out, |start, chunk| {
        let end = start + chunk.len();
        for x in &xs[1..] {
            for (o, &v) in chunk.iter_mut().zip(&x[start..end]) {
                *o = o.add(v);
            }
        }
    });
    out
}

/// `acc[i] = acc[i] + x[i]` over float32 (a residual add fused into the op writing `acc`; the
/// same bits as `binary(Add, ..)` with either operand first), in AVX-512 vectors when the CPU
/// has them. The slices are of one length.
pub fn add_in_place(acc: &mut [f32], x: &[f32]) {
    #[inline(always)]
    fn body(acc: &mut [f32], x: &[f32]) {
        for (a, &v) in acc.iter_mut().zip(x) {
            *a += v;
        }
    }
    assert_eq!(acc.len(), x.len(), "add_in_place: operand lengths");
    super::unary::wide_dispatch!(body, (acc: &mut [f32], x: &[f32]))(acc, x)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn int64_arithmetic_is_exact() {
        let big = (1i64 << 40) + 1;
        let (shape, v) = binary(BinaryOp::Add, &[big, 2], &[2], &[1], &[1]).unwrap();
        assert_eq!((shape, v), (vec![2], vec![big + 1, 3]));
        assert_eq!(
            scalar(BinaryOp::Div, &[7i32, -7], 2, false).unwrap(),
            vec![3, -3]
        );
        assert_eq!(scalar(BinaryOp::Sub, &[1i64], 10, true).unwrap(), vec![9]);
    }

    #[test]
    fn comparisons_give_ones_and_zeros_in_the_dtype() {
        let (_, v) = binary(BinaryOp::Greater, &[1.0f64, 3.0], &[2], &[2.0], &[1]).unwrap();
        assert_eq!(v, vec![0.0, 1.0]);
        assert_eq!(BinaryOp::Maximum.apply(f32::NAN, 1.0), 1.0);
    }
}
