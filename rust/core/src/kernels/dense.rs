//! A dense layer (`FullyConnected`): y = x·Wᵀ + b with x (m × k), W (n × k), b (n); its
//! forward, and its backward from the output gradient g (m × n).
//!
//! Rows of g that are zero everywhere add nothing to the weight and bias gradients and give
//! zero rows of the data gradient. A language model's padding positions are such rows (its
//! loss ignores them: a fifth of the rows of the LSTM language model's vocabulary layer), so
//! when enough of them are zero the two products run over the other rows only, gathered into
//! contiguous matrices. A zero row is dropped only where that changes no value: its data row
//! and the weights must be finite (0 · ∞ would be NaN).

use super::gemm::{gemm, gemm_split, MatRef};
use super::par;
use super::scratch::Scratch;
use super::tuning::{DENSE_SPLIT_WEIGHT, GEMM_PARALLEL_ABOVE};
use crate::error::Result;

/// Outputs per row (n / m) from which the forward computes yᵀ = W·xᵀ and transposes it: the
/// GEMM runs a few rows against a wide weight at half the speed of the transposed product
/// (16 × 256 → 1000: 139 µs against 69; 16 × 1024 → 1000: 938 against 297), and equal
/// speed at n = 4m (10 × 784 → 128).
const TRANSPOSED_FROM: usize = 4;

/// Rows up to which the transposed product is used: its copy back is a pass over the output,
/// which the large outputs of a language model's vocabulary layer (1120 × 10000) would pay
/// for no gain (25.5 ms against 25.2 for the product).
const TRANSPOSED_MAX_ROWS: usize = 64;

/// `y (m × n) = x (m × k) · wᵀ (w: n × k)`, plus `b (n)` on every row when given.
pub fn dense_forward(
    x: MatRef<'_, f32>,
    w: MatRef<'_, f32>,
    b: Option<&[f32]>,
) -> Result<Vec<f32>> {
    let (m, k, n) = (x.rows, x.cols, w.rows);
    let above = if n * k >= DENSE_SPLIT_WEIGHT {
        0
    } else {
        GEMM_PARALLEL_ABOVE
    };
    if n >= TRANSPOSED_FROM * m && (2..=TRANSPOSED_MAX_ROWS).contains(&m) {
        return transposed_product(x, w, b, above);
    }
    match b {
        None => {
            let mut y = par::filled(m * n, 0.0f32);
            gemm_split(x, w.t(), &mut y, false, above)?;
            Ok(y)
        }
        Some(b) => biased_product(x, w, b, above),
    }
}

/// [`dense_forward`] as yᵀ = W·xᵀ (+ b on every column), copied back into y.
fn transposed_product(
    x: MatRef<'_, f32>,
    w: MatRef<'_, f32>,
    b: Option<&[f32]>,
    above: usize,
) -> Result<Vec<f32>> {
    let (m, n) = (x.rows, w.rows);
    let mut yt = Scratch::take(n * m);
    if let Some(b) = b {
        for (row, &v) in yt.chunks_exact_mut(m).zip(b) {
            row.fill(v);
        }
    }
    gemm_split(w, x.t(), &mut yt, b.is_some(), above)?;
    // Blocks of 16 outputs: their columns of yᵀ stay in L1 while each row of y gets a
    // contiguous run.
    let mut y = vec![0.0f32; m * n];
    for (jb, block) in yt.chunks(16 * m).enumerate() {
        for (i, row) in y.chunks_exact_mut(n).enumerate() {
            for (d, col) in row[jb * 16..].iter_mut().zip(block.chunks_exact(m)) {
                *d = col[i];
            }
        }
    }
    Ok(y)
}

/// x·Wᵀ + b. With many rows (a language model's vocabulary layer over a whole batch of
/// steps) the bias is one more inner term, [x | 1]·[W | b]ᵀ, so the product only writes its
/// output: adding the product to rows of the bias read and wrote that output (tens of MB)
/// once more. The sum is the same either way (the bias is the last term). With few rows
/// (one sequence at inference) copying W for the extra term costs more than it saves.
fn biased_product(
    x: MatRef<'_, f32>,
    w: MatRef<'_, f32>,
    b: &[f32],
    above: usize,
) -> Result<Vec<f32>> {
    let (m, k, n) = (x.rows, x.cols, w.rows);
    if 2 * m <= k + 1 {
        let mut out = par::tiled(b, m);
        gemm_split(x, w.t(), &mut out, true, above)?;
        return Ok(out);
    }
    let mut x1 = Scratch::take(m * (k + 1));
    for (r, row) in x1.chunks_exact_mut(k + 1).enumerate() {
        row[..k].copy_from_slice(&x.data[r * k..(r + 1) * k]);
        row[k] = 1.0;
    }
    let mut w1 = Scratch::take(n * (k + 1));
    for (j, row) in w1.chunks_exact_mut(k + 1).enumerate() {
        row[..k].copy_from_slice(&w.data[j * k..(j + 1) * k]);
        row[k] = b[j];
    }
    let mut out = par::filled(m * n, 0.0f32);
    gemm_split(
        MatRef::row_major(&x1, m, k + 1),
        MatRef::row_major(&w1, n, k + 1).t(),
        &mut out,
        false,
        above,
    )?;
    Ok(out)
}

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

    /// Every way the forward runs — transposed (a few rows, many outputs; output blocks of
    /// 16 with a tail), the bias tiled in, the bias as an extra inner term, one row, a weight
    /// large enough to split — with and without bias, against direct sums in float64.
    #[test]
    fn forward_matches_direct_sums() {
        for (m, k, n) in [
            (4, 9, 37),
            (64, 5, 300),
            (3, 20, 12),
            (30, 7, 40),
            (1, 6, 50),
            (2, 1024, 1025),
            (65, 3, 400),
        ] {
            let (x, w, b) = (fill(m * k, 1), fill(n * k, 2), fill(n, 3));
            for bias in [None, Some(&b[..])] {
                let y = dense_forward(
                    MatRef::row_major(&x, m, k),
                    MatRef::row_major(&w, n, k),
                    bias,
                )
                .unwrap();
                for i in 0..m {
                    for j in 0..n {
                        let want = (0..k)
                            .map(|t| x[i * k + t] as f64 * w[j * k + t] as f64)
                            .sum::<f64>()
                            + bias.map_or(0.0, |b| b[j] as f64);
                        let got = y[i * n + j] as f64;
                        assert!(
                            (got - want).abs() <= 1e-4 * (1.0 + want.abs()),
                            "{m}×{k}→{n} [{i}, {j}]: {got} vs {want}"
                        );
                    }
                }
            }
        }
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
