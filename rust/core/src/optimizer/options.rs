//! The options every optimizer shares, and the reading of named hyperparameters given to
//! `create` (leftovers reported with the valid names).

use super::*;

/// The options every optimizer takes (MXNet's `Optimizer` base class). Defaults are MXNet's.
#[derive(Clone, Debug, Default)]
pub struct OptimizerOptions {
    /// The learning rate. None: the optimizer's class default (Adam, RMSProp, Nadam 0.001;
    /// Adamax 0.002; Signum 0.01; Ftrl 0.1), else 0.01 — or, with a scheduler, the
    /// scheduler's base_lr. A given rate (or a class default) overwrites a scheduler's
    /// differing base_lr, as in MXNet; Ftrl never does.
    pub learning_rate: Option<f64>,
    /// Weight decay (default 0).
    pub wd: f64,
    /// Gradient scale, applied before clipping (default 1; a Module sets 1/batch size).
    pub rescale_grad: Option<f64>,
    /// Clip rescaled gradients to ±this (None: no clipping).
    pub clip_gradient: Option<f64>,
    /// A learning-rate scheduler, shared with whoever else holds it.
    pub lr_scheduler: Option<SharedScheduler>,
    /// The update count every index starts from (default 0).
    pub begin_num_update: u64,
    /// Parameter names by index: turns on MXNet's weight-decay rule (names not ending in
    /// `_weight` / `_gamma` get wd_mult 0) and the name-keyed multipliers.
    pub param_idx2name: BTreeMap<usize, String>,
    /// Learning-rate multipliers by name, as a symbol's `__lr_mult__` attributes give them.
    pub lr_mult: BTreeMap<String, f64>,
    /// Weight-decay multipliers by name, as a symbol's `__wd_mult__` attributes give them.
    pub wd_mult: BTreeMap<String, f64>,
    /// Accepted for MXNet compatibility: it only matters for float16 weights, and mxfn's
    /// optimizers update float32 weights.
    pub multi_precision: bool,
}

/// A value given to [`create`] by name: a number, a flag, or None.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Hyper {
    /// A number.
    Num(f64),
    /// A flag (`centered`, `lazy_update`, `multi_precision`).
    Bool(bool),
    /// None (`clip_gradient`, `clip_weights`, `learning_rate`).
    None,
}

impl From<f64> for Hyper {
    fn from(v: f64) -> Self {
        Hyper::Num(v)
    }
}

impl From<bool> for Hyper {
    fn from(v: bool) -> Self {
        Hyper::Bool(v)
    }
}

impl From<Option<f64>> for Hyper {
    fn from(v: Option<f64>) -> Self {
        v.map_or(Hyper::None, Hyper::Num)
    }
}

/// Named hyperparameters being read by an options struct: remembers which keys were asked
/// for, so leftovers can be reported with the valid names.
pub(crate) struct Params {
    what: String,
    items: Vec<(String, Hyper)>,
    used: Vec<bool>,
    known: Vec<&'static str>,
}

impl Params {
    pub(super) fn new(what: String, items: Vec<(String, Hyper)>) -> Self {
        let used = vec![false; items.len()];
        Params {
            what,
            items,
            used,
            known: vec![],
        }
    }

    pub(super) fn take(&mut self, key: &'static str) -> Option<Hyper> {
        self.known.push(key);
        let mut found = None;
        for (i, (k, v)) in self.items.iter().enumerate() {
            if k == key {
                self.used[i] = true;
                found = Some(*v); // the last one given wins
            }
        }
        found
    }

    pub(super) fn bad(&self, key: &str, expected: &str, got: Hyper) -> Error {
        Error::invalid(
            format!("{}: {key}", self.what),
            expected,
            format!("{got:?}"),
        )
    }

    /// A number (default when absent).
    pub(crate) fn num(&mut self, key: &'static str, default: f64) -> Result<f64> {
        match self.take(key) {
            None => Ok(default),
            Some(Hyper::Num(v)) => Ok(v),
            Some(h) => Err(self.bad(key, "a number", h)),
        }
    }

    /// A number or None (default when absent).
    pub(crate) fn opt_num(
        &mut self,
        key: &'static str,
        default: Option<f64>,
    ) -> Result<Option<f64>> {
        match self.take(key) {
            None => Ok(default),
            Some(Hyper::Num(v)) => Ok(Some(v)),
            Some(Hyper::None) => Ok(None),
            Some(h) => Err(self.bad(key, "a number or None", h)),
        }
    }

    /// A flag (default when absent).
    pub(crate) fn flag(&mut self, key: &'static str, default: bool) -> Result<bool> {
        match self.take(key) {
            None => Ok(default),
            Some(Hyper::Bool(b)) => Ok(b),
            Some(h) => Err(self.bad(key, "true or false", h)),
        }
    }

    pub(super) fn finish(self) -> Result<()> {
        for (i, (k, _)) in self.items.iter().enumerate() {
            if !self.used[i] {
                let close = close_matches(k, &self.known);
                let expected = if close.is_empty() {
                    format!("one of {}", self.known.join(", "))
                } else {
                    format!("a known option (did you mean {}?)", quoted_or(&close))
                };
                return Err(Error::invalid(
                    format!("{}: option", self.what),
                    expected,
                    format!("{k:?}"),
                ));
            }
        }
        Ok(())
    }
}

/// Fails unless `v` is a finite number in `[lo, hi)` (`hi` None: no upper bound).
pub(crate) fn check_range(what: &str, key: &str, v: f64, lo: f64, hi: Option<f64>) -> Result<()> {
    let ok = v.is_finite() && v >= lo && hi.is_none_or(|h| v < h);
    if ok {
        return Ok(());
    }
    let expected = match hi {
        Some(h) => format!("a number in [{lo}, {h})"),
        None => format!("a finite number >= {lo}"),
    };
    Err(Error::invalid(
        format!("{what}: {key}"),
        expected,
        v.to_string(),
    ))
}

/// A per-parameter multiplier map must hold finite non-negative numbers.
pub(super) fn check_mults(what: &str, m: &BTreeMap<String, f64>) -> Result<()> {
    for (k, &v) in m {
        check_range(what, &format!("multiplier of {k:?}"), v, 0.0, None)?;
    }
    Ok(())
}
