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

mod pairs;
mod pool;
mod state;

use pairs::*;
use state::*;

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
                match average {
                    Average::Macro => {
                        // MXNet resets all counters after each macro update, so each call's
                        // score comes from its own samples only.
                        add(batch.score(tag), 1.0);
                        None
                    }
                    Average::Micro => {
                        local.add(&batch);
                        global.add(&batch);
                        let sums = |b: &Binary| Sums::weighted(b.score(tag), b.total());
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
                    Sums::weighted(local.mcc(), ln),
                    Sums::weighted(global.mcc(), gn),
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
