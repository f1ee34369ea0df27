//! Evaluation metrics, MXNet 1.9.1's `mx.metric`: accuracy, top-k, F1, MCC, perplexity, MAE,
//! MSE, RMSE, cross-entropy, NLL, Pearson r, loss, PCC, composites and custom functions.
//!
//! A metric is an accumulator with local sums (what [`EvalMetric::get`] reports, cleared by
//! [`EvalMetric::reset_local`]) and global sums (what [`EvalMetric::get_global`] reports,
//! cleared only by [`EvalMetric::reset`]). Each metric accumulates exactly as MXNet 1.9.1 does,
//! including the ones that average per batch (MAE/MSE/RMSE, macro F1/MCC/Pearson).
//!
//! ```
//! use mxfn_core::metric::EvalMetric;
//! use mxfn_core::NDArray;
//! let mut acc = EvalMetric::accuracy(1);
//! let label = NDArray::from_f32(&[2], vec![0.0, 1.0]).unwrap();
//! let pred = NDArray::from_f32(&[2, 2], vec![0.9, 0.1, 0.8, 0.2]).unwrap();
//! acc.update(&[label], &[pred]).unwrap();
//! assert_eq!(acc.get(), vec![("accuracy".to_string(), 0.5)]);
//! ```

use crate::error::{Error, Result};
use crate::kernels::par::{CHUNK, SERIAL_BELOW};
use crate::tensor::{norm_axis, DType, Element, NDArray};
use crate::with_data;
use rayon::prelude::*;
use serde_json::{Map, Value};
use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;

/// How F1, MCC and PearsonCorrelation combine batches (MXNet's `average`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Average {
    /// The mean of one value per `update` call.
    Macro,
    /// One value from the counts (or moments) pooled over every call.
    Micro,
}

impl Average {
    /// Parses `"macro"` / `"micro"`; `what` names the option in the error.
    pub fn parse(what: &str, s: &str) -> Result<Self> {
        match s {
            "macro" => Ok(Average::Macro),
            "micro" => Ok(Average::Micro),
            _ => Err(Error::invalid(
                what,
                "\"macro\" or \"micro\"",
                format!("\"{s}\""),
            )),
        }
    }

    /// `"macro"` or `"micro"`.
    pub fn name(self) -> &'static str {
        match self {
            Average::Macro => "macro",
            Average::Micro => "micro",
        }
    }
}

/// A user metric: `f(label, pred)` gives `(sum, count)` to add (MXNet's CustomMetric: a plain
/// number counts as `(number, 1)`).
pub type CustomFn = Arc<dyn Fn(&NDArray, &NDArray) -> Result<(f64, f64)> + Send + Sync>;

/// Running sums: the metric value is `sum / num` (or a kind-specific function of them).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct Sums {
    sum: f64,
    num: f64,
}

impl Sums {
    fn add(&mut self, sum: f64, num: f64) {
        self.sum += sum;
        self.num += num;
    }
}

/// Binary confusion counts (MXNet's `_BinaryClassificationMetrics`).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct Binary {
    tp: f64,
    fp: f64,
    fn_: f64,
    tn: f64,
}

impl Binary {
    fn add(&mut self, o: &Binary) {
        self.tp += o.tp;
        self.fp += o.fp;
        self.fn_ += o.fn_;
        self.tn += o.tn;
    }

    fn total(&self) -> f64 {
        self.tp + self.fp + self.fn_ + self.tn
    }

    fn fscore(&self) -> f64 {
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

    fn mcc(&self) -> f64 {
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
struct Welford {
    n: f64,
    mean_l: f64,
    sse_l: f64,
    mean_p: f64,
    sse_p: f64,
    cov: f64,
}

impl Welford {
    fn update(&mut self, l: &[f64], p: &[f64]) {
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

    fn r(&self) -> f64 {
        let d = self.n - 1.0;
        self.cov / (d * (self.sse_p / d).sqrt() * (self.sse_l / d).sqrt())
    }
}

/// A square confusion matrix `m[pred][label]` that grows with the largest class seen.
#[derive(Clone, Debug, PartialEq)]
struct Confusion {
    k: usize,
    m: Vec<f64>,
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
    fn grow(&mut self, k: usize) {
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

    fn add(&mut self, o: &Confusion) {
        self.grow(o.k);
        for r in 0..o.k {
            for c in 0..o.k {
                self.m[r * self.k + c] += o.m[r * o.k + c];
            }
        }
    }

    /// MXNet's `PCC._calc_mcc`: multi-class MCC, NaN when either marginal is degenerate.
    fn mcc(&self) -> f64 {
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

/// What a metric computes, with the state beyond plain sums that some kinds keep.
#[derive(Clone)]
enum Kind {
    Accuracy {
        axis: isize,
    },
    TopK {
        k: usize,
    },
    F1 {
        average: Average,
        local: Binary,
        global: Binary,
    },
    Mcc {
        average: Average,
        local: Binary,
        global: Binary,
    },
    Perplexity {
        ignore_label: Option<f64>,
        axis: isize,
    },
    Mae,
    Mse,
    Rmse,
    CrossEntropy {
        eps: f64,
    },
    Nll {
        eps: f64,
    },
    Pearson {
        average: Average,
        local: Welford,
        global: Welford,
    },
    Loss,
    Pcc {
        local: Confusion,
        global: Confusion,
    },
    Composite(Vec<EvalMetric>),
    Custom {
        f: CustomFn,
        allow_extra_outputs: bool,
    },
}

/// An evaluation metric: a mutable accumulator updated with (labels, predictions) batches.
///
/// ```
/// use mxfn_core::metric::EvalMetric;
/// use mxfn_core::NDArray;
/// let mut m = EvalMetric::create("mse", &serde_json::Value::Null).unwrap();
/// let l = NDArray::from_f32(&[2], vec![1.0, 2.0]).unwrap();
/// let p = NDArray::from_f32(&[2], vec![1.5, 2.0]).unwrap();
/// m.update(&[l], &[p]).unwrap();
/// assert_eq!(m.get()[0].1, 0.125);
/// m.reset_local();
/// assert!(m.get()[0].1.is_nan() && m.get_global()[0].1 == 0.125);
/// ```
#[derive(Clone)]
pub struct EvalMetric {
    name: String,
    kind: Kind,
    local: Sums,
    global: Sums,
}

impl fmt::Debug for EvalMetric {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EvalMetric")
            .field("name", &self.name)
            .field("kind", &self.kind_name())
            .field("value", &self.get())
            .finish()
    }
}

/// Canonical metric kinds and every name `create` accepts for each (MXNet's registry names,
/// the SPEC names and the mxfn function names; matched case-insensitively).
const NAMES: &[(&str, &[&str])] = &[
    ("accuracy", &["accuracy", "acc"]),
    (
        "top_k_accuracy",
        &["top_k_accuracy", "top_k_acc", "topkaccuracy"],
    ),
    ("f1", &["f1"]),
    ("mcc", &["mcc"]),
    ("perplexity", &["perplexity"]),
    ("mae", &["mae"]),
    ("mse", &["mse"]),
    ("rmse", &["rmse"]),
    (
        "cross_entropy",
        &["ce", "cross-entropy", "crossentropy", "cross_entropy"],
    ),
    (
        "nll_loss",
        &[
            "nll_loss",
            "nll-loss",
            "negativeloglikelihood",
            "negative_log_likelihood",
        ],
    ),
    (
        "pearson_correlation",
        &["pearsonr", "pearsoncorrelation", "pearson_correlation"],
    ),
    ("pcc", &["pcc"]),
    ("loss", &["loss"]),
    ("composite", &["composite", "compositeevalmetric"]),
];

/// The canonical kind for a metric name or alias (`"acc"` → `"accuracy"`, `"ce"` →
/// `"cross_entropy"`); an unknown name is an error suggesting the closest names.
pub fn canonical_name(name: &str) -> Result<&'static str> {
    let lower = name.to_lowercase();
    for (kind, aliases) in NAMES {
        if aliases.contains(&lower.as_str()) {
            return Ok(kind);
        }
    }
    let all: Vec<&str> = NAMES.iter().flat_map(|(_, a)| a.iter().copied()).collect();
    Err(Error::invalid(
        "eval_metric.create: metric",
        crate::metric::suggest(&lower, &all),
        format!("\"{name}\""),
    ))
}

/// "a known name; did you mean "x" or "y"?" text for an unknown name among `valid`.
pub(crate) fn suggest(name: &str, valid: &[&str]) -> String {
    let mut scored: Vec<(usize, &str)> = valid.iter().map(|v| (levenshtein(name, v), *v)).collect();
    scored.sort_by_key(|(d, _)| *d);
    let limit = (name.chars().count() / 3).max(2);
    let best = scored.first().map(|(d, _)| *d).unwrap_or(usize::MAX);
    let close: Vec<String> = scored
        .iter()
        .filter(|(d, _)| *d <= limit && *d <= best + 1)
        .take(3)
        .map(|(_, v)| format!("\"{v}\""))
        .collect();
    if close.is_empty() {
        let all: Vec<String> = valid.iter().map(|v| format!("\"{v}\"")).collect();
        format!("one of {}", all.join(", "))
    } else {
        format!("a known name (did you mean {}?)", close.join(" or "))
    }
}

fn levenshtein(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            let sub = prev[j] + usize::from(ca != *cb);
            cur[j + 1] = sub.min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

/// Reads typed options out of a JSON object for `create`, rejecting unknown keys.
struct Params<'a> {
    fname: String,
    map: Option<&'a Map<String, Value>>,
}

impl<'a> Params<'a> {
    fn new(fname: String, v: &'a Value, allowed: &[&str]) -> Result<Self> {
        let map = match v {
            Value::Null => None,
            Value::Object(m) => Some(m),
            other => {
                return Err(Error::invalid(
                    format!("{fname}: options"),
                    "a JSON object",
                    other.to_string(),
                ))
            }
        };
        if let Some(m) = map {
            for k in m.keys() {
                if !allowed.contains(&k.as_str()) && k != "name" {
                    let mut valid: Vec<&str> = allowed.to_vec();
                    valid.push("name");
                    return Err(Error::invalid(
                        format!("{fname}: option \"{k}\""),
                        suggest(k, &valid),
                        format!("\"{k}\""),
                    ));
                }
            }
        }
        Ok(Params { fname, map })
    }

    fn get(&self, key: &str) -> Option<&'a Value> {
        self.map.and_then(|m| m.get(key)).filter(|v| !v.is_null())
    }

    fn f64(&self, key: &str, default: f64) -> Result<f64> {
        match self.get(key) {
            None => Ok(default),
            Some(v) => v.as_f64().ok_or_else(|| {
                Error::invalid(format!("{}: {key}", self.fname), "a number", v.to_string())
            }),
        }
    }

    fn opt_f64(&self, key: &str) -> Result<Option<f64>> {
        self.get(key).map(|_| self.f64(key, 0.0)).transpose()
    }

    fn int(&self, key: &str, default: Option<i64>) -> Result<i64> {
        match (self.get(key), default) {
            (None, Some(d)) => Ok(d),
            (None, None) => Err(Error::invalid(
                format!("{}: {key}", self.fname),
                "a value (this option is required)",
                "nothing",
            )),
            (Some(v), _) => v.as_i64().ok_or_else(|| {
                Error::invalid(
                    format!("{}: {key}", self.fname),
                    "an integer",
                    v.to_string(),
                )
            }),
        }
    }

    fn average(&self) -> Result<Average> {
        match self.get("average") {
            None => Ok(Average::Macro),
            Some(Value::String(s)) => Average::parse(&format!("{}: average", self.fname), s),
            Some(v) => Err(Error::invalid(
                format!("{}: average", self.fname),
                "\"macro\" or \"micro\"",
                v.to_string(),
            )),
        }
    }

    fn name(&self) -> Result<Option<String>> {
        match self.get("name") {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(v) => Err(Error::invalid(
                format!("{}: name", self.fname),
                "a string",
                v.to_string(),
            )),
        }
    }
}

impl EvalMetric {
    fn new(name: &str, kind: Kind) -> Self {
        EvalMetric {
            name: name.to_string(),
            kind,
            local: Sums::default(),
            global: Sums::default(),
        }
    }

    /// Accuracy (`accuracy`): predictions of another shape than the label are reduced with
    /// argmax along `axis` (MXNet's default 1); both are then cast to int32 and compared.
    pub fn accuracy(axis: isize) -> Self {
        Self::new("accuracy", Kind::Accuracy { axis })
    }

    /// Top-k accuracy (`top_k_accuracy_<k>`): a sample is right when its label is among the
    /// `k` largest scores of its row. MXNet requires `k > 1` (use accuracy for k = 1).
    pub fn top_k_accuracy(k: usize) -> Result<Self> {
        if k < 2 {
            return Err(Error::invalid(
                "eval_metric.top_k_accuracy: top_k",
                "an integer > 1 (use accuracy for top_k = 1)",
                k.to_string(),
            ));
        }
        Ok(Self::new(&format!("top_k_accuracy_{k}"), Kind::TopK { k }))
    }

    /// Binary F1 (`f1`) of the class-1 predictions (argmax over axis 1).
    pub fn f1(average: Average) -> Self {
        Self::new(
            "f1",
            Kind::F1 {
                average,
                local: Binary::default(),
                global: Binary::default(),
            },
        )
    }

    /// Binary Matthews correlation coefficient (`mcc`).
    pub fn mcc(average: Average) -> Self {
        Self::new(
            "mcc",
            Kind::Mcc {
                average,
                local: Binary::default(),
                global: Binary::default(),
            },
        )
    }

    /// Perplexity (`perplexity`): exp of the mean negative log probability of the label,
    /// picked along `axis` (default -1); labels equal to `ignore_label` are left out.
    pub fn perplexity(ignore_label: Option<f64>, axis: isize) -> Self {
        Self::new("perplexity", Kind::Perplexity { ignore_label, axis })
    }

    /// Mean absolute error (`mae`), averaged per (label, pred) pair.
    pub fn mae() -> Self {
        Self::new("mae", Kind::Mae)
    }

    /// Mean squared error (`mse`), averaged per (label, pred) pair.
    pub fn mse() -> Self {
        Self::new("mse", Kind::Mse)
    }

    /// Root mean squared error (`rmse`): the mean of per-pair RMSEs, as MXNet.
    pub fn rmse() -> Self {
        Self::new("rmse", Kind::Rmse)
    }

    /// Cross-entropy (`cross-entropy`): mean of −log(p[label] + eps) over samples.
    pub fn cross_entropy(eps: f64) -> Self {
        Self::new("cross-entropy", Kind::CrossEntropy { eps })
    }

    /// Negative log-likelihood (`nll-loss`): the same formula as cross-entropy.
    pub fn nll_loss(eps: f64) -> Self {
        Self::new("nll-loss", Kind::Nll { eps })
    }

    /// Pearson correlation (`pearsonr`) of flattened labels and predictions.
    pub fn pearson_correlation(average: Average) -> Self {
        Self::new(
            "pearsonr",
            Kind::Pearson {
                average,
                local: Welford::default(),
                global: Welford::default(),
            },
        )
    }

    /// Loss (`loss`): the mean of the prediction values; labels are ignored.
    pub fn loss() -> Self {
        Self::new("loss", Kind::Loss)
    }

    /// PCC (`pcc`): multi-class MCC from a confusion matrix summed over all calls.
    pub fn pcc() -> Self {
        Self::new(
            "pcc",
            Kind::Pcc {
                local: Confusion::default(),
                global: Confusion::default(),
            },
        )
    }

    /// A composite (`composite`): every update goes to each child; values are listed in
    /// child order (nested composites flattened).
    pub fn composite(children: Vec<EvalMetric>) -> Self {
        Self::new("composite", Kind::Composite(children))
    }

    /// A custom metric named `name`: `f(label, pred)` returns `(sum, count)` per pair.
    /// With `allow_extra_outputs`, unequal numbers of labels and predictions are allowed
    /// (the extra ones are ignored).
    pub fn custom(name: &str, f: CustomFn, allow_extra_outputs: bool) -> Self {
        Self::new(
            name,
            Kind::Custom {
                f,
                allow_extra_outputs,
            },
        )
    }

    /// Adds a child to a composite metric; an error for any other metric.
    pub fn add(&mut self, child: EvalMetric) -> Result<()> {
        match &mut self.kind {
            Kind::Composite(c) => {
                c.push(child);
                Ok(())
            }
            _ => Err(Error::invalid(
                "eval_metric.add: metric",
                "a composite metric",
                format!("\"{}\"", self.name),
            )),
        }
    }

    /// The same metric under another display name (MXNet's `name=` argument).
    pub fn with_name(mut self, name: &str) -> Self {
        self.name = name.to_string();
        self
    }

    /// A metric by name or alias (see [`canonical_name`]) with options from a JSON object
    /// (`axis`, `top_k`, `average`, `ignore_label`, `eps`, `name`; `Null` for none).
    pub fn create(name: &str, params: &Value) -> Result<Self> {
        let kind = canonical_name(name)?;
        let fname = format!("eval_metric.{kind}");
        let allowed: &[&str] = match kind {
            "accuracy" => &["axis"],
            "top_k_accuracy" => &["top_k"],
            "f1" | "mcc" | "pearson_correlation" => &["average"],
            "perplexity" => &["ignore_label", "axis"],
            "cross_entropy" | "nll_loss" => &["eps"],
            _ => &[],
        };
        let p = Params::new(fname, params, allowed)?;
        let m = match kind {
            "accuracy" => Self::accuracy(p.int("axis", Some(1))? as isize),
            "top_k_accuracy" => {
                let k = p.int("top_k", None)?;
                Self::top_k_accuracy(usize::try_from(k).unwrap_or(0))?
            }
            "f1" => Self::f1(p.average()?),
            "mcc" => Self::mcc(p.average()?),
            "perplexity" => Self::perplexity(
                p.opt_f64("ignore_label")?,
                p.int("axis", Some(-1))? as isize,
            ),
            "mae" => Self::mae(),
            "mse" => Self::mse(),
            "rmse" => Self::rmse(),
            "cross_entropy" => Self::cross_entropy(p.f64("eps", 1e-12)?),
            "nll_loss" => Self::nll_loss(p.f64("eps", 1e-12)?),
            "pearson_correlation" => Self::pearson_correlation(p.average()?),
            "pcc" => Self::pcc(),
            "loss" => Self::loss(),
            _ => Self::composite(Vec::new()),
        };
        Ok(match p.name()? {
            Some(n) => m.with_name(&n),
            None => m,
        })
    }

    /// [`create`](Self::create) with the options as JSON text (`"{\"axis\": 2}"`; empty
    /// text or `null` for none).
    pub fn create_json(name: &str, params: &str) -> Result<Self> {
        let v: Value = if params.trim().is_empty() {
            Value::Null
        } else {
            serde_json::from_str(params).map_err(|e| {
                Error::invalid(
                    format!("eval_metric.{name}: options"),
                    "a JSON object",
                    format!("{params} ({e})"),
                )
            })?
        };
        Self::create(name, &v)
    }

    /// The display name (`accuracy`, `top_k_accuracy_5`, …).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The kind of metric (`"accuracy"`, `"composite"`, `"custom"`, …).
    pub fn kind_name(&self) -> &'static str {
        match &self.kind {
            Kind::Accuracy { .. } => "accuracy",
            Kind::TopK { .. } => "top_k_accuracy",
            Kind::F1 { .. } => "f1",
            Kind::Mcc { .. } => "mcc",
            Kind::Perplexity { .. } => "perplexity",
            Kind::Mae => "mae",
            Kind::Mse => "mse",
            Kind::Rmse => "rmse",
            Kind::CrossEntropy { .. } => "cross_entropy",
            Kind::Nll { .. } => "nll_loss",
            Kind::Pearson { .. } => "pearson_correlation",
            Kind::Loss => "loss",
            Kind::Pcc { .. } => "pcc",
            Kind::Composite(_) => "composite",
            Kind::Custom { .. } => "custom",
        }
    }

    /// Whether this is a composite metric.
    pub fn is_composite(&self) -> bool {
        matches!(self.kind, Kind::Composite(_))
    }

    /// Accumulates one batch: `labels[i]` goes with `preds[i]`. All-or-nothing: on error the
    /// metric is left as it was.
    pub fn update(&mut self, labels: &[NDArray], preds: &[NDArray]) -> Result<()> {
        let mut next = self.clone();
        next.update_in_place(labels, preds)?;
        *self = next;
        Ok(())
    }

    /// Clears local and global sums.
    pub fn reset(&mut self) {
        self.local = Sums::default();
        self.global = Sums::default();
        match &mut self.kind {
            Kind::F1 { local, global, .. } | Kind::Mcc { local, global, .. } => {
                *local = Binary::default();
                *global = Binary::default();
            }
            Kind::Pearson { local, global, .. } => {
                *local = Welford::default();
                *global = Welford::default();
            }
            Kind::Pcc { local, global } => {
                *local = Confusion::default();
                *global = Confusion::default();
            }
            Kind::Composite(c) => c.iter_mut().for_each(EvalMetric::reset),
            _ => {}
        }
    }

    /// Clears what [`get`](Self::get) reports and keeps what [`get_global`](Self::get_global)
    /// reports.
    pub fn reset_local(&mut self) {
        self.local = Sums::default();
        match &mut self.kind {
            Kind::F1 { local, .. } | Kind::Mcc { local, .. } => *local = Binary::default(),
            // MXNet 1.9.1 keeps the micro moments on reset_local, so a later get() still
            // pools pre-reset samples; mxfn clears them, as "reset local" promises.
            Kind::Pearson { local, .. } => *local = Welford::default(),
            Kind::Pcc { local, .. } => *local = Confusion::default(),
            Kind::Composite(c) => c.iter_mut().for_each(EvalMetric::reset_local),
            _ => {}
        }
    }

    /// `[(name, value)]` from the local sums: one pair, or one per leaf of a composite.
    /// A metric with no instances reports NaN.
    pub fn get(&self) -> Vec<(String, f64)> {
        self.read(false)
    }

    /// Like [`get`](Self::get), from the global sums (not cleared by `reset_local`).
    pub fn get_global(&self) -> Vec<(String, f64)> {
        self.read(true)
    }

    /// The value of a non-composite metric (the first leaf's value for a composite, NaN if
    /// it has none).
    pub fn value(&self) -> f64 {
        self.get().first().map(|p| p.1).unwrap_or(f64::NAN)
    }

    fn read(&self, global: bool) -> Vec<(String, f64)> {
        if let Kind::Composite(c) = &self.kind {
            return c.iter().flat_map(|m| m.read(global)).collect();
        }
        let s = if global { self.global } else { self.local };
        let v = if s.num == 0.0 {
            f64::NAN
        } else {
            match &self.kind {
                Kind::Perplexity { .. } => (s.sum / s.num).exp(),
                // MXNet 1.9.1's get_global() gives 0.0 in micro mode (its global sum is never
                // filled); mxfn reports the pooled r of every sample since the last reset.
                Kind::Pearson {
                    average: Average::Micro,
                    local,
                    global: g,
                } => {
                    if global {
                        g.r()
                    } else {
                        local.r()
                    }
                }
                _ => s.sum / s.num,
            }
        };
        vec![(self.name.clone(), v)]
    }

    fn check_pairs(&self, labels: &[NDArray], preds: &[NDArray]) -> Result<()> {
        if labels.len() != preds.len() {
            return Err(Error::invalid(
                format!("{}.update: labels", self.name),
                format!("one label array per prediction array ({})", preds.len()),
                format!("{} label arrays", labels.len()),
            ));
        }
        Ok(())
    }

    fn update_in_place(&mut self, labels: &[NDArray], preds: &[NDArray]) -> Result<()> {
        let name = self.name.clone();
        match &self.kind {
            Kind::Loss | Kind::Composite(_) => {}
            Kind::Custom {
                allow_extra_outputs: true,
                ..
            } => {}
            _ => self.check_pairs(labels, preds)?,
        }
        let tag = self.kind_name();
        let (loc, glob) = (self.local, self.global);
        let pairs = labels.iter().zip(preds);
        let mut t = (0.0, 0.0);
        let mut add = |s: f64, n: f64| {
            t = (t.0 + s, t.1 + n);
        };
        // Either sums to add to both local and global, or both replaced outright.
        let set: Option<(Sums, Sums)> = match &mut self.kind {
            Kind::Accuracy { axis } => {
                for (l, p) in pairs {
                    let (c, n) = accuracy_pair(&name, l, p, *axis)?;
                    add(c, n);
                }
                None
            }
            Kind::TopK { k } => {
                for (l, p) in pairs {
                    let (c, n) = top_k_pair(&name, l, p, *k)?;
                    add(c, n);
                }
                None
            }
            Kind::F1 {
                average,
                local,
                global,
            }
            | Kind::Mcc {
                average,
                local,
                global,
            } => {
                let mut batch = Binary::default();
                for (l, p) in pairs {
                    batch.add(&binary_pair(&name, l, p)?);
                }
                let score = |b: &Binary| if tag == "f1" { b.fscore() } else { b.mcc() };
                match average {
                    Average::Macro => {
                        // MXNet resets all counters after each macro update, so each call's
                        // score comes from its own samples only.
                        add(score(&batch), 1.0);
                        None
                    }
                    Average::Micro => {
                        local.add(&batch);
                        global.add(&batch);
                        let sums = |b: &Binary| Sums {
                            sum: score(b) * b.total(),
                            num: b.total(),
                        };
                        Some((sums(local), sums(global)))
                    }
                }
            }
            Kind::Perplexity { ignore_label, axis } => {
                for (l, p) in pairs {
                    let (loss, n) = perplexity_pair(&name, l, p, *ignore_label, *axis)?;
                    add(loss, n);
                }
                None
            }
            Kind::Mae | Kind::Mse | Kind::Rmse => {
                for (l, p) in pairs {
                    add(regression_pair(&name, tag, l, p)?, 1.0);
                }
                None
            }
            Kind::CrossEntropy { eps } | Kind::Nll { eps } => {
                for (l, p) in pairs {
                    let (loss, n) = log_loss_pair(&name, l, p, *eps)?;
                    add(loss, n);
                }
                None
            }
            Kind::Pearson {
                average,
                local,
                global,
            } => {
                for (l, p) in pairs {
                    if l.shape() != p.shape() {
                        return Err(Error::shape(
                            format!("{name}.update"),
                            "prediction (must have the label's shape)",
                            l.shape(),
                            p.shape(),
                        ));
                    }
                    let (lv, pv) = (f64s(l), f64s(p));
                    let (lv, pv) = (lv.to_f64(), pv.to_f64());
                    match average {
                        Average::Macro => add(corrcoef(&pv, &lv), 1.0),
                        Average::Micro => {
                            local.update(&lv, &pv);
                            global.update(&lv, &pv);
                            add(0.0, 1.0);
                        }
                    }
                }
                None
            }
            Kind::Loss => {
                for p in preds {
                    let v = f64s(p);
                    add(ordered_sum(v.len(), |i| v.at(i)), v.len() as f64);
                }
                None
            }
            Kind::Pcc { local, global } => {
                let mut batch = Confusion::default();
                for (l, p) in pairs {
                    pcc_pair(&name, l, p, &mut batch)?;
                }
                local.add(&batch);
                global.add(&batch);
                // One instance per update call; the value is the MCC of the summed matrix.
                let (ln, gn) = (loc.num + 1.0, glob.num + 1.0);
                Some((
                    Sums {
                        sum: local.mcc() * ln,
                        num: ln,
                    },
                    Sums {
                        sum: global.mcc() * gn,
                        num: gn,
                    },
                ))
            }
            Kind::Composite(children) => {
                for c in children.iter_mut() {
                    c.update_in_place(labels, preds)?;
                }
                None
            }
            Kind::Custom { f, .. } => {
                for (l, p) in pairs {
                    let (s, n) = f(l, p)?;
                    add(s, n);
                }
                None
            }
        };
        match set {
            Some((l, g)) => {
                self.local = l;
                self.global = g;
            }
            None => {
                self.local.add(t.0, t.1);
                self.global.add(t.0, t.1);
            }
        }
        Ok(())
    }
}

// ---- kernels -------------------------------------------------------------------------------

/// An array's values read as f64: float32 and float64 storage is read in place (no copy);
/// other dtypes are converted once.
enum Vals<'a> {
    F32(&'a [f32]),
    F64(Cow<'a, [f64]>),
}

impl Vals<'_> {
    #[inline]
    fn at(&self, i: usize) -> f64 {
        match self {
            Vals::F32(x) => f64::from(x[i]),
            Vals::F64(x) => x[i],
        }
    }

    fn len(&self) -> usize {
        match self {
            Vals::F32(x) => x.len(),
            Vals::F64(x) => x.len(),
        }
    }

    /// All values as one f64 slice (converting float32 in parallel).
    fn to_f64(&self) -> Cow<'_, [f64]> {
        match self {
            Vals::F32(x) => Cow::Owned(conv(x)),
            Vals::F64(x) => Cow::Borrowed(x),
        }
    }
}

fn conv<T: Element>(x: &[T]) -> Vec<f64> {
    let mut out = vec![0.0; x.len()];
    crate::kernels::par::for_each_chunk_mut(&mut out, |start, chunk| {
        for (o, v) in chunk.iter_mut().zip(&x[start..]) {
            *o = v.to_f64();
        }
    });
    out
}

fn f64s(a: &NDArray) -> Vals<'_> {
    if let Some(s) = a.typed::<f32>().and_then(|x| x.as_slice()) {
        return Vals::F32(s);
    }
    if let Some(s) = a.typed::<f64>().and_then(|x| x.as_slice()) {
        return Vals::F64(Cow::Borrowed(s));
    }
    Vals::F64(Cow::Owned(with_data!(a.data(), x => match x.as_slice() {
        Some(s) => conv(s),
        None => x.iter().map(|v| v.to_f64()).collect(),
    })))
}

/// numpy's `astype('int32')` of a float: truncation toward zero (NaN → INT_MIN as on x86).
fn as_i32(v: f64) -> i64 {
    if v.is_nan() {
        i64::from(i32::MIN)
    } else {
        i64::from(v as i32)
    }
}

/// Σ f(i) for i in 0..n, in fixed chunks combined in order: the same bits at any thread count.
fn ordered_sum(n: usize, f: impl Fn(usize) -> f64 + Sync) -> f64 {
    let chunks = n.div_ceil(CHUNK);
    let part = |c: usize| (c * CHUNK..((c + 1) * CHUNK).min(n)).map(&f).sum::<f64>();
    let parts: Vec<f64> = if n < SERIAL_BELOW {
        (0..chunks).map(part).collect()
    } else {
        (0..chunks).into_par_iter().map(part).collect()
    };
    parts.iter().sum()
}

/// How many i in 0..n satisfy `f` (in parallel when n is large).
fn count(n: usize, f: impl Fn(usize) -> bool + Sync) -> usize {
    if n < SERIAL_BELOW {
        (0..n).filter(|&i| f(i)).count()
    } else {
        (0..n).into_par_iter().filter(|&i| f(i)).count()
    }
}

/// `(outer, n, inner)`: the sizes before, at and after `axis`.
fn split(shape: &[usize], axis: usize) -> (usize, usize, usize) {
    let outer = shape[..axis].iter().product();
    let inner = shape[axis + 1..].iter().product();
    (outer, shape[axis], inner)
}

/// Argmax along `axis` (first maximum wins; a NaN wins as numpy's argmax), in output order.
fn argmax_axis(what: &str, x: &Vals<'_>, shape: &[usize], axis: usize) -> Result<Vec<i64>> {
    let (outer, n, inner) = split(shape, axis);
    if n == 0 {
        return Err(Error::invalid(
            format!("{what}: prediction"),
            "a non-empty class axis",
            format!("shape {}", crate::error::tuple_text(&format!("{shape:?}"))),
        ));
    }
    let f = |j: usize| {
        let (o, i) = (j / inner, j % inner);
        let base = o * n * inner + i;
        let mut best = 0usize;
        let mut bv = x.at(base);
        if !bv.is_nan() {
            for k in 1..n {
                let v = x.at(base + k * inner);
                if v.is_nan() {
                    best = k;
                    break;
                }
                if v > bv {
                    best = k;
                    bv = v;
                }
            }
        }
        best as i64
    };
    let m = outer * inner;
    Ok(if x.len() < SERIAL_BELOW {
        (0..m).map(f).collect()
    } else {
        (0..m).into_par_iter().map(f).collect()
    })
}

/// numpy's `astype('int32')` of every value.
fn ints(v: &Vals<'_>) -> Vec<i64> {
    (0..v.len()).map(|i| as_i32(v.at(i))).collect()
}

fn shape_text(s: &[usize]) -> String {
    crate::error::tuple_text(&format!("{s:?}"))
}

fn accuracy_pair(name: &str, l: &NDArray, p: &NDArray, axis: isize) -> Result<(f64, f64)> {
    let what = format!("{name}.update");
    let lv = f64s(l);
    let pv = f64s(p);
    let correct = if p.shape() != l.shape() {
        if p.ndim() == 0 {
            return Err(Error::shape(what, "prediction", l.shape(), p.shape()));
        }
        let ax = norm_axis(&format!("{what}: axis"), axis, p.ndim())?;
        let idx = argmax_axis(&what, &pv, p.shape(), ax)?;
        if idx.len() != lv.len() {
            return Err(Error::invalid(
                format!("{what}: labels"),
                format!(
                    "{} values (prediction {} reduced over axis {axis})",
                    idx.len(),
                    shape_text(p.shape())
                ),
                format!("{} values (shape {})", lv.len(), shape_text(l.shape())),
            ));
        }
        count(idx.len(), |i| idx[i] == as_i32(lv.at(i)))
    } else {
        count(lv.len(), |i| as_i32(pv.at(i)) == as_i32(lv.at(i)))
    };
    Ok((correct as f64, lv.len() as f64))
}

fn top_k_pair(name: &str, l: &NDArray, p: &NDArray, k: usize) -> Result<(f64, f64)> {
    let what = format!("{name}.update");
    if p.ndim() != 2 {
        return Err(Error::invalid(
            format!("{what}: prediction"),
            "a 2-D (batch, classes) array",
            format!("shape {}", shape_text(p.shape())),
        ));
    }
    let (n, c) = (p.shape()[0], p.shape()[1]);
    if l.size() != n {
        return Err(Error::invalid(
            format!("{what}: labels"),
            format!("{n} values, one per prediction row"),
            format!("shape {}", shape_text(l.shape())),
        ));
    }
    let top = k.min(c);
    let (lv, pv) = (f64s(l), f64s(p));
    let right = count(n, |r| {
        let lab = as_i32(lv.at(r));
        if lab < 0 || lab as usize >= c {
            return false;
        }
        let v = pv.at(r * c + lab as usize);
        (0..c).filter(|&j| pv.at(r * c + j) > v).count() < top
    });
    Ok((right as f64, n as f64))
}

fn binary_pair(name: &str, l: &NDArray, p: &NDArray) -> Result<Binary> {
    let what = format!("{name}.update");
    if p.ndim() != 2 {
        return Err(Error::invalid(
            format!("{what}: prediction"),
            "a 2-D (batch, classes) array",
            format!("shape {}", shape_text(p.shape())),
        ));
    }
    let n = p.shape()[0];
    if l.size() != n {
        return Err(Error::invalid(
            format!("{what}: labels"),
            format!("{n} values, one per prediction row"),
            format!("shape {}", shape_text(l.shape())),
        ));
    }
    let lv = ints(&f64s(l));
    let mut distinct: Vec<i64> = Vec::new();
    for &v in &lv {
        if !distinct.contains(&v) {
            distinct.push(v);
            if distinct.len() > 2 {
                return Err(Error::invalid(
                    format!("{what}: labels"),
                    format!("at most two classes ({name} supports binary classification only)"),
                    format!("the classes {distinct:?}"),
                ));
            }
        }
    }
    let pred = argmax_axis(&what, &f64s(p), p.shape(), 1)?;
    let mut b = Binary::default();
    for (&pl, &ll) in pred.iter().zip(&lv) {
        match (pl == 1, ll == 1) {
            (true, true) => b.tp += 1.0,
            (true, false) => b.fp += 1.0,
            (false, true) => b.fn_ += 1.0,
            (false, false) => b.tn += 1.0,
        }
    }
    Ok(b)
}

fn perplexity_pair(
    name: &str,
    l: &NDArray,
    p: &NDArray,
    ignore: Option<f64>,
    axis: isize,
) -> Result<(f64, f64)> {
    let what = format!("{name}.update");
    if p.ndim() == 0 {
        return Err(Error::shape(what, "prediction", l.shape(), p.shape()));
    }
    let ax = norm_axis(&format!("{what}: axis"), axis, p.ndim())?;
    let (outer, c, inner) = split(p.shape(), ax);
    let m = outer * inner;
    if l.size() != m || c == 0 {
        return Err(Error::invalid(
            format!("{what}: labels"),
            format!(
                "{m} values (one per prediction position, prediction {})",
                shape_text(p.shape())
            ),
            format!("shape {}", shape_text(l.shape())),
        ));
    }
    let (lv, pv) = (f64s(l), f64s(p));
    let ignored = |j: usize| ignore.is_some_and(|v| lv.at(j) == v);
    let loss = ordered_sum(m, |j| {
        if ignored(j) {
            return 0.0;
        }
        // ndarray.pick's default mode clips the index into [0, classes).
        let k = as_i32(lv.at(j)).clamp(0, c as i64 - 1) as usize;
        let (o, i) = (j / inner, j % inner);
        -pv.at(o * c * inner + k * inner + i).max(1e-10).ln()
    });
    let kept = m - count(m, ignored);
    Ok((loss, kept as f64))
}

fn regression_pair(name: &str, which: &str, l: &NDArray, p: &NDArray) -> Result<f64> {
    // MXNet reshapes a 1-D array to (n, 1) before the (numpy-broadcast) difference.
    let col = |a: &NDArray| -> Vec<usize> {
        if a.ndim() == 1 {
            vec![a.shape()[0], 1]
        } else {
            a.shape().to_vec()
        }
    };
    let (ls, ps) = (col(l), col(p));
    let (lv, pv) = (f64s(l), f64s(p));
    let term = |d: f64| if which == "mae" { d.abs() } else { d * d };
    let (total, n) = if ls == ps {
        (
            ordered_sum(lv.len(), |i| term(lv.at(i) - pv.at(i))),
            lv.len(),
        )
    } else {
        let out = crate::tensor::arith::broadcast_shape(&format!("{name}.update"), &ls, &ps)?;
        let (sl, sp) = (broadcast_strides(&ls, &out), broadcast_strides(&ps, &out));
        let n: usize = out.iter().product();
        let total = ordered_sum(n, |j| {
            let (mut rem, mut il, mut ip) = (j, 0, 0);
            for d in (0..out.len()).rev() {
                let k = rem % out[d];
                rem /= out[d];
                il += k * sl[d];
                ip += k * sp[d];
            }
            term(lv.at(il) - pv.at(ip))
        });
        (total, n)
    };
    // An empty pair gives NaN, as numpy's mean of nothing.
    let mean = total / n as f64;
    Ok(if which == "rmse" { mean.sqrt() } else { mean })
}

/// Row-major strides of `shape` broadcast (numpy rules, aligned right) to `out`: 0 on the
/// axes it is repeated along.
fn broadcast_strides(shape: &[usize], out: &[usize]) -> Vec<usize> {
    let mut strides = vec![0; out.len()];
    let mut step = 1;
    for (i, &d) in shape.iter().enumerate().rev() {
        let o = out.len() - shape.len() + i;
        strides[o] = if d == 1 { 0 } else { step };
        step *= d;
    }
    strides
}

fn log_loss_pair(name: &str, l: &NDArray, p: &NDArray, eps: f64) -> Result<(f64, f64)> {
    let what = format!("{name}.update");
    if p.ndim() != 2 {
        return Err(Error::invalid(
            format!("{what}: prediction"),
            "a 2-D (batch, classes) array",
            format!("shape {}", shape_text(p.shape())),
        ));
    }
    let (n, c) = (p.shape()[0], p.shape()[1]);
    if l.size() != n {
        return Err(Error::invalid(
            format!("{what}: labels"),
            format!("{n} values, one per prediction row"),
            format!("shape {}", shape_text(l.shape())),
        ));
    }
    let (lv, pv) = (f64s(l), f64s(p));
    // numpy indexing: the label truncated to int64, negative values counting from the end.
    let mut idx = Vec::with_capacity(n);
    for r in 0..n {
        let v = lv.at(r);
        let t = v.trunc();
        let k = if t < 0.0 { t + c as f64 } else { t };
        if !(k >= 0.0 && k < c as f64) {
            return Err(Error::invalid(
                format!("{what}: labels"),
                format!("class indices in [0, {c})"),
                v.to_string(),
            ));
        }
        idx.push(k as usize);
    }
    // MXNet adds eps, takes the log and sums in the prediction's dtype (float32 for float32
    // predictions); mxfn sums the float32 terms in f64 and rounds the total to float32.
    let f32_math = p.dtype() != DType::Float64;
    let loss = ordered_sum(n, |r| {
        let prob = pv.at(r * c + idx[r]);
        if f32_math {
            -f64::from((prob as f32 + eps as f32).ln())
        } else {
            -(prob + eps).ln()
        }
    });
    let loss = if f32_math {
        f64::from(loss as f32)
    } else {
        loss
    };
    Ok((loss, n as f64))
}

/// numpy's `corrcoef(pred, label)[0, 1]`: covariance over the product of deviations, clipped
/// to [-1, 1]; NaN for a constant input or a single sample.
fn corrcoef(p: &[f64], l: &[f64]) -> f64 {
    let n = p.len();
    let mp = ordered_sum(n, |i| p[i]) / n as f64;
    let ml = ordered_sum(n, |i| l[i]) / n as f64;
    let d = n as f64 - 1.0;
    let cpl = ordered_sum(n, |i| (p[i] - mp) * (l[i] - ml)) / d;
    let cpp = ordered_sum(n, |i| (p[i] - mp) * (p[i] - mp)) / d;
    let cll = ordered_sum(n, |i| (l[i] - ml) * (l[i] - ml)) / d;
    let r = cpl / cpp.sqrt() / cll.sqrt();
    if r.is_nan() {
        r
    } else {
        r.clamp(-1.0, 1.0)
    }
}

fn pcc_pair(name: &str, l: &NDArray, p: &NDArray, cm: &mut Confusion) -> Result<()> {
    let what = format!("{name}.update");
    let lv = ints(&f64s(l));
    let pv: Vec<i64> = if p.shape() != l.shape() {
        if p.ndim() < 2 {
            return Err(Error::shape(what, "prediction", l.shape(), p.shape()));
        }
        argmax_axis(&what, &f64s(p), p.shape(), 1)?
    } else {
        ints(&f64s(p))
    };
    if pv.len() != lv.len() {
        return Err(Error::invalid(
            format!("{what}: labels"),
            format!("{} values, one per prediction", pv.len()),
            format!("shape {}", shape_text(l.shape())),
        ));
    }
    let mut top = 0i64;
    for &v in pv.iter().chain(&lv) {
        if v < 0 {
            return Err(Error::invalid(
                format!("{what}: classes"),
                "non-negative class indices",
                v.to_string(),
            ));
        }
        top = top.max(v);
    }
    cm.grow(top as usize + 1);
    let k = cm.k;
    for (&pi, &li) in pv.iter().zip(&lv) {
        cm.m[pi as usize * k + li as usize] += 1.0;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(shape: &[usize], v: &[f32]) -> NDArray {
        NDArray::from_f32(shape, v.to_vec()).unwrap()
    }

    #[test]
    fn argmax_along_middle_axis() {
        let x: Vec<f64> = vec![0., 5., 2., 1., 3., 0., 9., 9., 1., 1., 0., 0.];
        // shape (2, 3, 2): argmax over axis 1
        assert_eq!(
            argmax_axis("t", &Vals::F64(Cow::Borrowed(&x)), &[2, 3, 2], 1).unwrap(),
            vec![2, 0, 0, 0]
        );
        assert_eq!(
            argmax_axis("t", &Vals::F64(Cow::Borrowed(&x)), &[3, 4], 1).unwrap(),
            vec![1, 2, 0]
        );
    }

    #[test]
    fn broadcast_strides_repeat_unit_axes() {
        assert_eq!(broadcast_strides(&[5, 1], &[5, 3]), vec![1, 0]);
        assert_eq!(broadcast_strides(&[3], &[2, 3]), vec![0, 1]);
        assert_eq!(broadcast_strides(&[2, 3], &[2, 3]), vec![3, 1]);
    }

    #[test]
    fn ordered_sum_is_chunk_stable() {
        let n = SERIAL_BELOW + 123;
        let s = ordered_sum(n, |i| i as f64 * 0.1);
        assert_eq!(s, ordered_sum(n, |i| i as f64 * 0.1));
        assert!((s - 0.1 * (n as f64 - 1.0) * n as f64 / 2.0).abs() < 1e-3);
    }

    #[test]
    fn suggestions_name_close_metrics() {
        let e = canonical_name("acuracy").unwrap_err().to_string();
        assert!(e.contains("did you mean \"accuracy\""), "{e}");
        assert_eq!(canonical_name("CE").unwrap(), "cross_entropy");
    }

    #[test]
    fn confusion_grows_and_keeps_counts() {
        let mut c = Confusion::default();
        c.m[1] = 3.0; // pred 0, label 1
        c.grow(3);
        assert_eq!(c.m[1], 3.0);
        assert_eq!(c.m.len(), 9);
    }

    #[test]
    fn failed_update_leaves_metric_unchanged() {
        let mut m = EvalMetric::accuracy(1);
        m.update(&[a(&[2], &[0., 1.])], &[a(&[2, 2], &[1., 0., 0., 1.])])
            .unwrap();
        let before = m.get();
        assert!(m
            .update(
                &[a(&[2], &[0., 1.]), a(&[3], &[0., 1., 1.])],
                &[a(&[2, 2], &[1., 0., 0., 1.]), a(&[2, 2], &[1., 0., 0., 1.])]
            )
            .is_err());
        assert_eq!(m.get(), before);
    }
}
