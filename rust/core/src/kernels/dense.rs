//! The backward of a dense layer (`FullyConnected`): y = x·Wᵀ + b with x (m × k), W (n × k),
//! b (n), from the output gradient g (m × n).
//!
//! Rows of g that are zero everywhere add nothing to the weight and bias gradients and give
//! zero rows of the data gradient. A language model's padding positions are such rows (its
//! loss ignores them: a fifth of the rows of the LSTM language model's vocabulary layer), so
//! when enough of them are zero the two products run over the other rows only, gathered into
//! contiguous matrices. A zero row is dropped only where that changes no value: its data row
//! and the weights must be finite (0 · ∞ would be NaN).

use super::gemm::{gemm, MatRef};
use super::par;
use super::scratch::Scratch;
use crate::error::Result;

/// Fraction of zero rows (1 / this) from which they are left out: the gather costs a pass
/// over the kept rows of g, about what the products spend on a sixteenth of the rows.
const SKIP_FROM: usize = 16;

/// Rows of g per partial sum of the bias gradient: fixed, so the sum's order (and bits) do
/// not depend on the thread count.
const BIAS_ROWS: usize = 256;

/// Which gradients to compute.
#[derive(Clone, Copy, Debug)]
pub struct DenseWant {
    /// Of the data.
    pub dx: bool,
    /// Of the weight.
    pub dw: bool,
    /// Of the bias.
    pub db: bool,
}

/// The gradients asked for (`None` where not).
#[derive(Clone, Debug, Default)]
pub struct DenseGrads {
    /// Of the data (m × k).
    pub dx: Option<Vec<f32>>,
    /// Of the weight (n × k).
    pub dw: Option<Vec<f32>>,
    /// Of the bias (n).
    pub db: Option<Vec<f32>>,
}

/// The gradients of a dense layer: `x` (m × k), `w` (n × k), `g` (m × n), all row-major.
pub fn dense_backward(
    x: &[f32],
    w: &[f32],
    g: &[f32],
    (m, k, n): (usize, usize, usize),
    want: DenseWant,
) -> Result<DenseGrads> {
    let Some(live) = live_rows(x, w, g, (m, k, n)) else {
        return products(x, w, g, (m, k, n), want);
    };
    let rows = live.len();
    let mut gc = Scratch::take(rows * n);
    let mut xc = Scratch::take(if want.dw { rows * k } else { 0 });
    par::for_each_row_mut(&mut gc, n.max(1), |i, r| {
        r.copy_from_slice(&g[live[i] * n..(live[i] + 1) * n]);
    });
    if want.dw {
        par::for_each_row_mut(&mut xc, k.max(1), |i, r| {
            r.copy_from_slice(&x[live[i] * k..(live[i] + 1) * k]);
        });
    }
    let mut out = products(&xc, w, &gc, (rows, k, n), want)?;
    // Back to every row: the left-out rows' data gradients are zero.
    if let Some(dc) = out.dx.take() {
        let mut dx = vec![0.0f32; m * k];
        for (i, &r) in live.iter().enumerate() {
            dx[r * k..(r + 1) * k].copy_from_slice(&dc[i * k..(i + 1) * k]);
        }
        out.dx = Some(dx);
    }
    Ok(out)
}

/// The rows of g to keep when at least 1 / [`SKIP_FROM`] of them can be left out (see the
/// module doc); `None`: keep every row.
fn live_rows(
    x: &[f32],
    w: &[f32],
    g: &[f32],
    (m, k, n): (usize, usize, usize),
) -> Option<Vec<usize>> {
    if m < SKIP_FROM || n == 0 {
        return None;
    }
    // A row with a nonzero value usually shows it in its first element: the test costs
    // little for the rows kept.
    let zero = |r: usize| g[r * n..(r + 1) * n].iter().all(|&v| v == 0.0);
    let finite = |v: &[f32]| v.iter().fold(true, |a, &b| a & b.is_finite());
    let dead = (0..m).filter(|&r| zero(r)).count();
    if dead * SKIP_FROM < m || !finite(w) {
        return None;
    }
    let live: Vec<usize> = (0..m)
        .filter(|&r| !zero(r) || !finite(&x[r * k..(r + 1) * k]))
        .collect();
    ((m - live.len()) * SKIP_FROM >= m).then_some(live)
}

/// The gradients over every row of `x` and `g` (`m` rows).
fn products(
    x: &[f32],
    w: &[f32],
    g: &[f32],
    (m, k, n): (usize, usize, usize),
    want: DenseWant,
) -> Result<DenseGrads> {
    let gm = MatRef::row_major(g, m, n);
    let mut out = DenseGrads::default();
    if want.dx {
        let mut dx = vec![0.0f32; m * k];
        gemm(gm, MatRef::row_major(w, n, k), &mut dx, false)?;
        out.dx = Some(dx);
    }
    if want.dw {
        let mut dw = vec![0.0f32; n * k];
        gemm(gm.t(), MatRef::row_major(x, m, k), &mut dw, false)?;
        out.dw = Some(dw);
    }
    if want.db {
        out.db = Some(column_sums(g, m, n));
    }
    Ok(out)
}

/// Σ over the rows of g (m × n): partial sums of [`BIAS_ROWS`] rows side by side, added in
/// order.
fn column_sums(g: &[f32], m: usize, n: usize) -> Vec<f32> {
    let blocks = m.div_ceil(BIAS_ROWS);
    let partial = par::map_indices(blocks, m * n, |b| {
        let mut s = vec![0.0f32; n];
        for row in g[b * BIAS_ROWS * n..(m.min((b + 1) * BIAS_ROWS)) * n].chunks_exact(n) {
            s.iter_mut().zip(row).for_each(|(a, &v)| *a += v);
        }
        s
    });
    let mut db = vec![0.0f32; n];
    for s in partial {
        db.iter_mut().zip(&s).for_each(|(a, &v)| *a += v);
    }
    db
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fill(len: usize, seed: usize) -> Vec<f32> {
        (0..len)
            .map(|i| ((i * 7919 + seed * 104_729) % 1013) as f32 / 500.0 - 1.0)
            .collect()
    }

    /// With and without zero rows of g, against the direct sums in float64; a zero row whose
    /// data holds ∞ keeps its NaN weight gradient.
    #[test]
    fn matches_direct_sums_with_zero_rows() {
        let (m, k, n) = (300, 7, 11);
        let mut x = fill(m * k, 1);
        let w = fill(n * k, 2);
        for zeros in [0usize, 1, 3] {
            let mut g = fill(m * n, 3);
            // Every `zeros + 1`-th row zero (none when zeros is 0): a third to a half.
            for r in (0..m).filter(|r| zeros > 0 && r % (zeros + 1) != 0) {
                g[r * n..(r + 1) * n].fill(0.0);
            }
            let want = DenseWant {
                dx: true,
                dw: true,
                db: true,
            };
            let got = dense_backward(&x, &w, &g, (m, k, n), want).unwrap();
            let (dx, dw, db) = (got.dx.unwrap(), got.dw.unwrap(), got.db.unwrap());
            for r in 0..m {
                for c in 0..k {
                    let e: f64 = (0..n)
                        .map(|j| f64::from(g[r * n + j]) * f64::from(w[j * k + c]))
                        .sum();
                    assert!((f64::from(dx[r * k + c]) - e).abs() < 1e-4, "dx {r} {c}");
                }
            }
            for j in 0..n {
                let e: f64 = (0..m).map(|r| f64::from(g[r * n + j])).sum();
                assert!((f64::from(db[j]) - e).abs() < 1e-3, "db {j}");
                for c in 0..k {
                    let e: f64 = (0..m)
                        .map(|r| f64::from(g[r * n + j]) * f64::from(x[r * k + c]))
                        .sum();
                    assert!((f64::from(dw[j * k + c]) - e).abs() < 1e-3, "dw {j} {c}");
                }
            }
            if zeros == 3 {
                x[k] = f32::INFINITY; // row 1, a zero row of g
                let got = dense_backward(&x, &w, &g, (m, k, n), want).unwrap();
                assert!(got.dw.unwrap()[..n * k]
                    .iter()
                    .step_by(k)
                    .all(|v| v.is_nan()));
            }
        }
    }
}
