//! The running state metrics keep beyond plain sums: binary confusion counts and Welford
//! moments.

use super::*;

/// Running sums: the metric value is `sum / num` (or a kind-specific function of them).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(super) struct Sums {
    pub(super) sum: f64,
    pub(super) num: f64,
}

impl Sums {
    /// `num` instances of a value `score` (a metric whose value is recomputed from counters,
    /// expressed as sums so that `get` divides it back out).
    pub(super) fn weighted(score: f64, num: f64) -> Self {
        Sums {
            sum: score * num,
            num,
        }
    }

    pub(super) fn add(&mut self, sum: f64, num: f64) {
        self.sum += sum;
        self.num += num;
    }
}

/// Binary confusion counts (MXNet's `_BinaryClassificationMetrics`).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(super) struct Binary {
    pub(super) tp: f64,
    pub(super) fp: f64,
    pub(super) fn_: f64,
    pub(super) tn: f64,
}

impl Binary {
    pub(super) fn add(&mut self, o: &Binary) {
        self.tp += o.tp;
        self.fp += o.fp;
        self.fn_ += o.fn_;
        self.tn += o.tn;
    }

    pub(super) fn total(&self) -> f64 {
        self.tp + self.fp + self.fn_ + self.tn
    }

    /// The value of the metric named `tag` ("f1" or "mcc") over these counts.
    pub(super) fn score(&self, tag: &str) -> f64 {
        if tag == "f1" {
            self.fscore()
        } else {
            self.mcc()
        }
    }

    pub(super) fn fscore(&self) -> f64 {
        let precision = if self.tp + self.fp > 0.0 {
            self.tp / (self.tp + self.fp)
        } else {
            0.0
        };
        let recall = if self.tp + self.fn_ > 0.0 {
            self.tp / (self.tp + self.fn_)
        } else {
            0.0
        };
        if precision + recall > 0.0 {
            2.0 * precision * recall / (precision + recall)
        } else {
            0.0
        }
    }

    pub(super) fn mcc(&self) -> f64 {
        if self.total() == 0.0 {
            return 0.0;
        }
        // MXNet leaves zero factors out of the denominator's product.
        let denom: f64 = [
            self.tp + self.fp,
            self.tp + self.fn_,
            self.tn + self.fp,
            self.tn + self.fn_,
        ]
        .iter()
        .filter(|&&t| t != 0.0)
        .product();
        (self.tp * self.tn - self.fp * self.fn_) / denom.sqrt()
    }
}

/// Streaming means, squared deviations and co-moment of (label, pred) (MXNet's micro
/// PearsonCorrelation: batched Welford, exact).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(super) struct Welford {
    pub(super) n: f64,
    pub(super) mean_l: f64,
    pub(super) sse_l: f64,
    pub(super) mean_p: f64,
    pub(super) sse_p: f64,
    pub(super) cov: f64,
}

impl Welford {
    pub(super) fn update(&mut self, l: &[f64], p: &[f64]) {
        fn moments(x: &[f64], count: f64, mean: &mut f64, sse: &mut f64) {
            let m0 = *mean;
            *mean += ordered_sum(x.len(), |i| (x[i] - m0) / count);
            let m1 = *mean;
            *sse += ordered_sum(x.len(), |i| (x[i] - m0) * (x[i] - m1));
        }
        self.n += l.len() as f64;
        moments(l, self.n, &mut self.mean_l, &mut self.sse_l);
        // MXNet updates the co-moment between the label and the prediction mean updates:
        // Σ (l − new mean_l)(p − old mean_p), the exact batched co-moment update.
        let (ml, mp) = (self.mean_l, self.mean_p);
        self.cov += ordered_sum(l.len(), |i| (l[i] - ml) * (p[i] - mp));
        moments(p, self.n, &mut self.mean_p, &mut self.sse_p);
    }

    /// Pools another stream's moments into these (Chan et al.'s parallel update), as if
    /// this stream had also seen the other's samples.
    pub(super) fn merge(&mut self, o: &Welford) {
        if o.n == 0.0 {
            return;
        }
        if self.n == 0.0 {
            *self = *o;
            return;
        }
        let n = self.n + o.n;
        let (dl, dp) = (o.mean_l - self.mean_l, o.mean_p - self.mean_p);
        let f = self.n * o.n / n;
        self.sse_l += o.sse_l + dl * dl * f;
        self.sse_p += o.sse_p + dp * dp * f;
        self.cov += o.cov + dl * dp * f;
        self.mean_l += dl * o.n / n;
        self.mean_p += dp * o.n / n;
        self.n = n;
    }

    pub(super) fn r(&self) -> f64 {
        let d = self.n - 1.0;
        self.cov / (d * (self.sse_p / d).sqrt() * (self.sse_l / d).sqrt())
    }
}

/// A square confusion matrix `m[pred][label]` that grows with the largest class seen.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Confusion {
    pub(super) k: usize,
    pub(super) m: Vec<f64>,
}

impl Default for Confusion {
    fn default() -> Self {
        Confusion {
            k: 2,
            m: vec![0.0; 4],
        }
    }
}

impl Confusion {
    pub(super) fn grow(&mut self, k: usize) {
        if k <= self.k {
            return;
        }
        let mut m = vec![0.0; k * k];
        for r in 0..self.k {
            m[r * k..r * k + self.k].copy_from_slice(&self.m[r * self.k..(r + 1) * self.k]);
        }
        self.k = k;
        self.m = m;
    }

    pub(super) fn add(&mut self, o: &Confusion) {
        self.grow(o.k);
        for r in 0..o.k {
            for c in 0..o.k {
                self.m[r * self.k + c] += o.m[r * o.k + c];
            }
        }
    }

    /// MXNet's `PCC._calc_mcc`: multi-class MCC, NaN when either marginal is degenerate.
    pub(super) fn mcc(&self) -> f64 {
        let k = self.k;
        let n: f64 = self.m.iter().sum();
        let x: Vec<f64> = (0..k)
            .map(|r| self.m[r * k..(r + 1) * k].iter().sum())
            .collect();
        let y: Vec<f64> = (0..k)
            .map(|c| (0..k).map(|r| self.m[r * k + c]).sum())
            .collect();
        let cov_xx: f64 = x.iter().map(|v| v * (n - v)).sum();
        let cov_yy: f64 = y.iter().map(|v| v * (n - v)).sum();
        if cov_xx == 0.0 || cov_yy == 0.0 {
            return f64::NAN;
        }
        let cov_xy: f64 = (0..k).map(|i| self.m[i * k + i] * n - x[i] * y[i]).sum();
        cov_xy / (cov_xx * cov_yy).sqrt()
    }
}
