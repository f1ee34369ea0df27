//! Optimizers (MXNet 1.9.1's `mx.optimizer`): the common machinery — learning rate and its
//! scheduler, weight decay, gradient rescaling and clipping, per-parameter multipliers, update
//! counts — and `create` by name. The update rules live in one file per family: `sgd.rs`
//! (sgd, nag, signum, dcasgd, sgld), `adam.rs` (adam, adamax, nadam), `adaptive.rs` (adagrad,
//! rmsprop, adadelta, ftrl); schedulers in `lr_scheduler.rs`.
//!
//! Each update is one fused pass over the elements of a float32 weight (in parallel for big
//! arrays), written in place through copy-on-write: a caller that kept the old `NDArray`
//! value still sees the old numbers.
//!
//! Optimizer state mirrors MXNet's Python state objects (so a Module can pickle it the way
//! MXNet writes `.states` files): [`State::None`], one array, or a tuple.
//!
//! | optimizer | state |
//! |---|---|
//! | sgd, nag, signum | momentum array; `None` when momentum is 0 |
//! | dcasgd | `(momentum or None, previous weight)` |
//! | sgld | `None` |
//! | adam, adamax, nadam | `(mean, variance)` (adamax: `(mean, u)`) |
//! | adagrad | history array |
//! | rmsprop | `(n,)`; centered: `(n, g, delta)` |
//! | adadelta | `(acc_g, acc_delta)` |
//! | ftrl | `(z, n)` |
//!
//! Nadam's `m_schedule` is one number per optimizer (a field, not state), as in MXNet.

pub mod adam;
pub mod adaptive;
pub mod lr_scheduler;
pub mod sgd;

mod options;
mod rule;
mod state;
mod update;

pub use options::*;
pub use rule::*;
pub use state::*;
pub(crate) use update::*;

pub use adam::{AdamOptions, AdamaxOptions, NadamOptions};
pub use adaptive::{AdaDeltaOptions, AdaGradOptions, FtrlOptions, RmsPropOptions};
pub use lr_scheduler::{
    LrScheduler, Schedule, Scheduler, SchedulerOptions, SharedScheduler, WarmupMode,
};
pub use sgd::{DcasgdOptions, NagOptions, SgdOptions, SignumOptions};

use crate::error::{Error, Result, ResultExt};
use crate::kernels::par::{FlushDenormals, CHUNK};
use crate::kernels::tuning::UPDATE_SERIAL_BELOW;
use crate::tensor::{DType, NDArray};
use rayon::prelude::*;
use std::collections::{BTreeMap, HashMap};

/// The registry names `create` accepts (MXNet's lower-cased class names).
pub const OPTIMIZERS: [&str; 12] = [
    "sgd", "nag", "signum", "dcasgd", "sgld", "adam", "adamax", "nadam", "adagrad", "rmsprop",
    "adadelta", "ftrl",
];

/// An optimizer: an update [`Rule`] plus MXNet's common machinery — learning rate (or a
/// shared scheduler), weight decay, gradient rescaling and clipping, per-name multipliers,
/// and per-index update counts.
///
/// Counting follows MXNet: each update of index `i` first increments `count[i]` (starting
/// at `begin_num_update`) and sets `num_update = max(num_update, count[i])`; the learning
/// rate is then `scheduler(num_update)` (or the fixed rate) times `lr_mult[name]`, and bias
/// corrections use `t = count[i]`.
///
/// ```
/// use mxfn_core::optimizer::{Optimizer, OptimizerOptions, Rule, SgdOptions};
/// use mxfn_core::NDArray;
/// let mut opt = Optimizer::new(
///     Rule::Sgd(SgdOptions { momentum: 0.9, ..Default::default() }),
///     OptimizerOptions { learning_rate: Some(0.1), ..Default::default() },
/// ).unwrap();
/// let mut w = NDArray::from_f32(&[2], vec![1.0, 2.0]).unwrap();
/// let g = NDArray::from_f32(&[2], vec![1.0, -1.0]).unwrap();
/// let mut state = opt.create_state(0, &w).unwrap();
/// let before = w.clone();
/// opt.update(0, &mut w, &g, &mut state).unwrap();
/// assert_eq!(w.to_f64_vec(), vec![0.9f32 as f64, 2.1f32 as f64]);
/// assert_eq!(before.to_f64_vec(), vec![1.0, 2.0]); // copy-on-write
/// assert_eq!(opt.num_update(), 1);
/// ```
#[derive(Clone, Debug)]
pub struct Optimizer {
    rule: Rule,
    /// MXNet's `self.lr`: None only when a scheduler decides and no rate was given.
    lr: Option<f64>,
    scheduler: Option<SharedScheduler>,
    wd: f64,
    rescale_grad: f64,
    clip_gradient: Option<f64>,
    begin_num_update: u64,
    num_update: u64,
    counts: HashMap<usize, u64>,
    idx2name: BTreeMap<usize, String>,
    /// The symbol-attribute layer of the multipliers (`OptimizerOptions::lr_mult` / `wd_mult`).
    sym_lr_mult: BTreeMap<String, f64>,
    sym_wd_mult: BTreeMap<String, f64>,
    /// The arguments of the last `set_lr_mult` / `set_wd_mult`.
    lr_mult_args: BTreeMap<String, f64>,
    wd_mult_args: BTreeMap<String, f64>,
    /// The effective maps (defaults, then symbol attributes, then the set_* arguments).
    lr_mult: BTreeMap<String, f64>,
    wd_mult: BTreeMap<String, f64>,
    multi_precision: bool,
    /// Nadam's momentum schedule: one number per optimizer, multiplied at every update.
    m_schedule: f64,
    warnings: Vec<String>,
}

impl Optimizer {
    /// An optimizer with `rule` and the common `opts`. Nonsense raises here: a NaN or negative
    /// learning rate, weight decay, rescale or clip bound, negative multipliers, and each
    /// rule's own checks (momentum and betas in [0, 1), …).
    pub fn new(rule: Rule, opts: OptimizerOptions) -> Result<Self> {
        let what = format!("optimizer.{}", rule.name());
        rule.validate()?;
        if let Some(lr) = opts.learning_rate {
            check_range(&what, "learning_rate", lr, 0.0, None)?;
        }
        check_range(&what, "wd", opts.wd, 0.0, None)?;
        let rescale_grad = opts.rescale_grad.unwrap_or(1.0);
        check_range(&what, "rescale_grad", rescale_grad, 0.0, None)?;
        if let Some(c) = opts.clip_gradient {
            check_range(&what, "clip_gradient", c, 0.0, None)?;
        }
        check_mults(&format!("{what}: lr_mult"), &opts.lr_mult)?;
        check_mults(&format!("{what}: wd_mult"), &opts.wd_mult)?;

        let (lr, given) = match rule.lr_default() {
            LrDefault::Ftrl(d) => (Some(opts.learning_rate.unwrap_or(d)), None),
            LrDefault::Class(d) => {
                let lr = opts.learning_rate.unwrap_or(d);
                (Some(lr), Some(lr))
            }
            LrDefault::WhenGiven => (
                opts.learning_rate
                    .or(opts.lr_scheduler.is_none().then_some(0.01)),
                opts.learning_rate,
            ),
        };
        if matches!(rule, Rule::Ftrl(_)) && lr == Some(0.0) {
            return Err(Error::invalid(
                format!("{what}: learning_rate"),
                "a learning rate > 0 (Ftrl divides by it)",
                "0",
            ));
        }
        let mut warnings = vec![];
        if let (Some(s), Some(lr)) = (&opts.lr_scheduler, given) {
            let mut s = s.lock();
            // A scheduler without a base_lr (a user's own) is left alone.
            if let Some(base) = s.base_lr().filter(|&b| b != lr) {
                warnings.push(format!(
                    "learning rate from lr_scheduler ({base}) has been overwritten by \
                     learning_rate in optimizer ({lr})"
                ));
                s.set_base_lr(lr)?;
            }
        }
        let mut opt = Optimizer {
            rule,
            lr,
            scheduler: opts.lr_scheduler,
            wd: opts.wd,
            rescale_grad,
            clip_gradient: opts.clip_gradient,
            begin_num_update: opts.begin_num_update,
            num_update: opts.begin_num_update,
            counts: HashMap::new(),
            idx2name: opts.param_idx2name,
            sym_lr_mult: opts.lr_mult,
            sym_wd_mult: opts.wd_mult,
            lr_mult_args: BTreeMap::new(),
            wd_mult_args: BTreeMap::new(),
            lr_mult: BTreeMap::new(),
            wd_mult: BTreeMap::new(),
            multi_precision: opts.multi_precision,
            m_schedule: 1.0,
            warnings,
        };
        opt.rebuild_mults();
        Ok(opt)
    }

    /// The registry name (`"adam"`, …).
    pub fn name(&self) -> &'static str {
        self.rule.name()
    }

    /// The update rule and its hyperparameters.
    pub fn rule(&self) -> &Rule {
        &self.rule
    }

    /// A new state for parameter `index` shaped like `weight` (zeros; DCASGD's previous
    /// weight starts as the weight itself).
    pub fn create_state(&self, index: usize, weight: &NDArray) -> Result<State> {
        if !weight.dtype().is_float() {
            return Err(Error::invalid(
                format!("optimizer.{}.create_state: weight {index}", self.name()),
                "a float16, float32 or float64 array",
                weight.dtype().name(),
            ));
        }
        Ok(match &self.rule {
            Rule::Dcasgd(o) => State::Tuple(vec![
                if o.momentum != 0.0 {
                    State::Array(NDArray::zeros(weight.shape(), DType::Float32))
                } else {
                    State::None
                },
                // Copy-on-write: sharing the buffer is a copy as far as anyone can tell.
                State::Array(weight.astype(DType::Float32)),
            ]),
            r => r.state_spec().zeros(weight.shape()),
        })
    }

    /// Applies one update to parameter `index`: `weight` and `state` change in place
    /// (copy-on-write), the index's update count and `num_update` advance. The weight and
    /// gradient must be float arrays of one shape and the state must be what `create_state`
    /// gives; all of that is checked before anything changes.
    pub fn update(
        &mut self,
        index: usize,
        weight: &mut NDArray,
        grad: &NDArray,
        state: &mut State,
    ) -> Result<()> {
        let what = format!("optimizer.{}.update", self.name());
        for (arg, a) in [("weight", &*weight), ("grad", grad)] {
            if !a.dtype().is_float() {
                return Err(Error::invalid(
                    format!("{what}: {arg} of index {index}"),
                    "a float16, float32 or float64 array",
                    a.dtype().name(),
                ));
            }
        }
        if grad.shape() != weight.shape() {
            return Err(Error::shape(
                what,
                format!("grad of index {index} (must match the weight)"),
                weight.shape(),
                grad.shape(),
            ));
        }
        let spec = self.rule.state_spec();
        if !spec.matches(state, weight.shape()) {
            let shape = crate::error::tuple_text(&format!("{:?}", weight.shape()));
            return Err(Error::invalid(
                format!("{what}: state of index {index}"),
                format!(
                    "the state create_state gives: {} of float32",
                    spec.describe(&shape)
                ),
                state.describe(),
            ));
        }

        let t = self.count(index);
        // MXNet's AdaDelta never asks for a learning rate (so never calls the scheduler).
        let lr = if self.rule.uses_lr() {
            self.index_lr(index)?
        } else {
            0.0
        };
        let step = Step {
            lr,
            wd: self.index_wd(index),
            rescale: self.rescale_grad,
            clip: self
                .clip_gradient
                .filter(|&c| !(self.rule.clip_zero_is_off() && c == 0.0)),
            t,
        };
        // States are float32 and so is the arithmetic: float16 / float64 weights are updated
        // through a float32 copy (MXNet's multi_precision for float16, float32 precision for
        // float64).
        let weight_dtype = weight.dtype();
        let mut weight32 = (weight_dtype != DType::Float32).then(|| weight.astype(DType::Float32));
        let grad32 = (grad.dtype() != DType::Float32).then(|| grad.astype(DType::Float32));
        let g = grad32.as_ref().unwrap_or(grad).f32s("grad")?;
        let w = match weight32.as_mut() {
            Some(w) => w.f32s_mut("weight")?,
            None => weight.f32s_mut("weight")?,
        };
        match &self.rule {
            Rule::Sgd(o) => sgd::sgd(o, &step, w, g, state),
            Rule::Nag(o) => sgd::nag(o, &step, w, g, state),
            Rule::Signum(o) => sgd::signum(o, &step, w, g, state),
            Rule::Dcasgd(o) => sgd::dcasgd(o, &step, w, g, state),
            Rule::Sgld => sgd::sgld(&step, w, g),
            Rule::Adam(o) => adam::adam(o, &step, w, g, state),
            Rule::Adamax(o) => adam::adamax(o, &step, w, g, state),
            Rule::Nadam(o) => adam::nadam(o, &step, &mut self.m_schedule, w, g, state),
            Rule::AdaGrad(o) => adaptive::adagrad(o, &step, w, g, state),
            Rule::RmsProp(o) => adaptive::rmsprop(o, &step, w, g, state),
            Rule::AdaDelta(o) => adaptive::adadelta(o, &step, w, g, state),
            Rule::Ftrl(o) => adaptive::ftrl(o, &step, w, g, state),
        }
        .context(what)?;
        if let Some(w) = weight32 {
            *weight = w.astype(weight_dtype);
        }
        Ok(())
    }

    /// `count[index] += 1` (from `begin_num_update`), `num_update = max(num_update, count)`.
    fn count(&mut self, index: usize) -> u64 {
        let c = self.counts.entry(index).or_insert(self.begin_num_update);
        *c += 1;
        let t = *c;
        self.num_update = self.num_update.max(t);
        t
    }

    fn base_lr(&self) -> Result<f64> {
        match &self.scheduler {
            Some(s) => s.call(self.num_update),
            None => Ok(self.lr.unwrap_or(0.01)),
        }
    }

    fn index_lr(&self, index: usize) -> Result<f64> {
        let mult = self
            .idx2name
            .get(&index)
            .and_then(|n| self.lr_mult.get(n))
            .copied()
            .unwrap_or(1.0);
        Ok(self.base_lr()? * mult)
    }

    fn index_wd(&self, index: usize) -> f64 {
        let mult = self
            .idx2name
            .get(&index)
            .and_then(|n| self.wd_mult.get(n))
            .copied()
            .unwrap_or(1.0);
        self.wd * mult
    }

    /// The largest update count of any index (MXNet's `num_update`).
    pub fn num_update(&self) -> u64 {
        self.num_update
    }

    /// How many updates `index` has had (counting from `begin_num_update`); None before its
    /// first update.
    pub fn update_count(&self, index: usize) -> Option<u64> {
        self.counts.get(&index).copied()
    }

    /// The current learning rate. With a scheduler this calls it with `num_update` (so it
    /// advances the scheduler's state, exactly like MXNet's `learning_rate` property).
    pub fn learning_rate(&self) -> Result<f64> {
        self.base_lr()
    }

    /// The fixed learning rate (MXNet's `opt.lr`): the given rate or the class default;
    /// None when a scheduler decides and no rate was given. Does not call the scheduler.
    pub fn fixed_learning_rate(&self) -> Option<f64> {
        self.lr
    }

    /// The scheduler, if any (shared: calling it advances the one state).
    pub fn lr_scheduler(&self) -> Option<&SharedScheduler> {
        self.scheduler.as_ref()
    }

    /// Sets the fixed learning rate. Fails when a scheduler is attached (MXNet raises too)
    /// or the rate is NaN or negative.
    pub fn set_learning_rate(&mut self, lr: f64) -> Result<()> {
        let what = format!("optimizer.{}.set_learning_rate", self.name());
        if self.scheduler.is_some() {
            return Err(Error::invalid(
                what,
                "an optimizer without lr_scheduler (the scheduler decides the rate)",
                "an optimizer with an lr_scheduler",
            ));
        }
        check_range(&what, "learning_rate", lr, 0.0, None)?;
        if matches!(self.rule, Rule::Ftrl(_)) && lr == 0.0 {
            return Err(Error::invalid(
                what,
                "a learning rate > 0 (Ftrl divides by it)",
                "0",
            ));
        }
        self.lr = Some(lr);
        Ok(())
    }

    /// Weight decay.
    pub fn wd(&self) -> f64 {
        self.wd
    }

    /// The gradient scale.
    pub fn rescale_grad(&self) -> f64 {
        self.rescale_grad
    }

    /// Sets the gradient scale (a Module sets 1/batch size); NaN or negative fails.
    pub fn set_rescale_grad(&mut self, r: f64) -> Result<()> {
        check_range(
            &format!("optimizer.{}.set_rescale_grad", self.name()),
            "rescale_grad",
            r,
            0.0,
            None,
        )?;
        self.rescale_grad = r;
        Ok(())
    }

    /// The clip bound, as given (None: off).
    pub fn clip_gradient(&self) -> Option<f64> {
        self.clip_gradient
    }

    /// The update count every index starts from.
    pub fn begin_num_update(&self) -> u64 {
        self.begin_num_update
    }

    /// Whether `multi_precision` was asked for (no effect on float32 weights).
    pub fn multi_precision(&self) -> bool {
        self.multi_precision
    }

    /// Nadam's momentum schedule (1.0 for the other rules).
    pub fn m_schedule(&self) -> f64 {
        self.m_schedule
    }

    /// Parameter names by index.
    pub fn idx2name(&self) -> &BTreeMap<usize, String> {
        &self.idx2name
    }

    /// Replaces the index→name map and recomputes the multipliers as if it had been given
    /// at creation (so the weight-decay rule for names not ending in `_weight` / `_gamma`
    /// applies; MXNet's Module assigns the map without that step — mxfn applies it, SPEC §8).
    /// The last `set_lr_mult` / `set_wd_mult` arguments still apply.
    pub fn set_idx2name(&mut self, idx2name: BTreeMap<usize, String>) {
        self.idx2name = idx2name;
        self.rebuild_mults();
    }

    /// Sets learning-rate multipliers by name. Like MXNet, the map is rebuilt from the
    /// defaults (the symbol's `__lr_mult__` layer) plus `mults`: an earlier call's entries are
    /// dropped.
    pub fn set_lr_mult(&mut self, mults: BTreeMap<String, f64>) -> Result<()> {
        check_mults(&format!("optimizer.{}.set_lr_mult", self.name()), &mults)?;
        self.lr_mult_args = mults;
        self.rebuild_mults();
        Ok(())
    }

    /// Sets weight-decay multipliers by name, rebuilt like `set_lr_mult` from the defaults
    /// (wd_mult 0 for named parameters not ending in `_weight` / `_gamma`, then the
    /// symbol's `__wd_mult__` layer) plus `mults`.
    pub fn set_wd_mult(&mut self, mults: BTreeMap<String, f64>) -> Result<()> {
        check_mults(&format!("optimizer.{}.set_wd_mult", self.name()), &mults)?;
        self.wd_mult_args = mults;
        self.rebuild_mults();
        Ok(())
    }

    /// Adds a symbol's `__lr_mult__` / `__wd_mult__` attributes under the multipliers this
    /// optimizer already has (which win): what a Module does with an optimizer value given to
    /// `init_optimizer`, so that it honours the attributes as one created by name does.
    pub fn merge_symbol_mults(
        &mut self,
        lr: BTreeMap<String, f64>,
        wd: BTreeMap<String, f64>,
    ) -> Result<()> {
        let what = format!("optimizer.{}: symbol multipliers", self.name());
        check_mults(&what, &lr)?;
        check_mults(&what, &wd)?;
        let mut merged_lr = lr;
        merged_lr.extend(std::mem::take(&mut self.sym_lr_mult));
        self.sym_lr_mult = merged_lr;
        let mut merged_wd = wd;
        merged_wd.extend(std::mem::take(&mut self.sym_wd_mult));
        self.sym_wd_mult = merged_wd;
        self.rebuild_mults();
        Ok(())
    }

    fn rebuild_mults(&mut self) {
        self.lr_mult = self.sym_lr_mult.clone();
        self.lr_mult.extend(self.lr_mult_args.clone());
        self.wd_mult = self
            .idx2name
            .values()
            .filter(|n| !(n.ends_with("_weight") || n.ends_with("_gamma")))
            .map(|n| (n.clone(), 0.0))
            .collect();
        self.wd_mult.extend(self.sym_wd_mult.clone());
        self.wd_mult.extend(self.wd_mult_args.clone());
    }

    /// The effective learning-rate multipliers by name.
    pub fn lr_mult(&self) -> &BTreeMap<String, f64> {
        &self.lr_mult
    }

    /// The effective weight-decay multipliers by name.
    pub fn wd_mult(&self) -> &BTreeMap<String, f64> {
        &self.wd_mult
    }

    /// Warnings from construction (a scheduler's base_lr overwritten by the learning rate).
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }
}

/// Creates an optimizer by registry name (case-insensitive, like MXNet's
/// `mx.optimizer.create`). `params` holds numbers, flags and Nones by MXNet's keyword names:
/// the rule's own (`momentum`, `beta1`, `centered`, …) and the common numeric ones
/// (`learning_rate`, `wd`, `rescale_grad`, `clip_gradient`, `begin_num_update`,
/// `multi_precision`), which override `opts`. Unknown names fail with the closest valid ones.
///
/// ```
/// use mxfn_core::optimizer::{create, Hyper, OptimizerOptions};
/// let opt = create("Adam", OptimizerOptions::default(), [("beta1", Hyper::Num(0.8))]).unwrap();
/// assert_eq!(opt.learning_rate().unwrap(), 0.001);
/// assert!(create("sdg", OptimizerOptions::default(), [] as [(&str, Hyper); 0]).is_err());
/// ```
pub fn create<K: AsRef<str>>(
    name: &str,
    opts: OptimizerOptions,
    params: impl IntoIterator<Item = (K, Hyper)>,
) -> Result<Optimizer> {
    let items = params
        .into_iter()
        .map(|(k, v)| (k.as_ref().to_string(), v))
        .collect();
    let mut p = Params::new(format!("optimizer.{}", name.to_ascii_lowercase()), items);
    let mut opts = opts;
    opts.learning_rate = p.opt_num("learning_rate", opts.learning_rate)?;
    opts.wd = p.num("wd", opts.wd)?;
    opts.rescale_grad = Some(p.num("rescale_grad", opts.rescale_grad.unwrap_or(1.0))?);
    opts.clip_gradient = p.opt_num("clip_gradient", opts.clip_gradient)?;
    let begin = p.num("begin_num_update", opts.begin_num_update as f64)?;
    if !(begin >= 0.0 && begin.fract() == 0.0 && begin < 2f64.powi(63)) {
        return Err(Error::invalid(
            format!("optimizer.{}: begin_num_update", name.to_ascii_lowercase()),
            "a whole number >= 0",
            begin.to_string(),
        ));
    }
    opts.begin_num_update = begin as u64;
    opts.multi_precision = p.flag("multi_precision", opts.multi_precision)?;
    let rule = Rule::from_params(name, &mut p)?;
    p.finish()?;
    Optimizer::new(rule, opts)
}

/// Candidates within a small edit distance of `word`, closest first (at most three).
fn close_matches<'a>(word: &str, candidates: &[&'a str]) -> Vec<&'a str> {
    let mut scored: Vec<(usize, &str)> = candidates
        .iter()
        .map(|c| (edit_distance(word, c), *c))
        .filter(|(d, c)| *d <= 2.max(c.len() / 3))
        .collect();
    scored.sort();
    scored.dedup();
    scored.into_iter().take(3).map(|(_, c)| c).collect()
}

fn quoted_or(words: &[&str]) -> String {
    let q: Vec<String> = words.iter().map(|w| format!("\"{w}\"")).collect();
    match q.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} or {last}", rest.join(", ")),
        _ => q.join(""),
    }
}

/// Optimal-string-alignment distance: insertions, deletions, substitutions and swaps of
/// neighbours (`"sdg"` is one swap from `"sgd"`).
fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let mut d = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, v) in d[0].iter_mut().enumerate() {
        *v = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut v = (d[i - 1][j] + 1)
                .min(d[i][j - 1] + 1)
                .min(d[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                v = v.min(d[i - 2][j - 2] + 1);
            }
            d[i][j] = v;
        }
    }
    d[a.len()][b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunked_covers_every_element_once_with_aligned_states() {
        for n in [0, 5, CHUNK, UPDATE_SERIAL_BELOW + 3] {
            let mut w = vec![0.0f32; n];
            let g: Vec<f32> = (0..n).map(|i| i as f32).collect();
            let mut s = vec![0.0f32; n];
            each(&mut w, &g, [&mut s], |w, g, [s]| {
                *w += g;
                *s = 2.0 * g;
            });
            assert!(w.iter().zip(&g).all(|(a, b)| a == b));
            assert!(s.iter().zip(&g).all(|(a, b)| *a == 2.0 * b));
        }
    }

    #[test]
    fn clip_and_sign_keep_nan() {
        assert_eq!(clip(3.0, Some(1.0)), 1.0);
        assert_eq!(clip(-3.0, Some(1.0)), -1.0);
        assert_eq!(clip(3.0, None), 3.0);
        assert!(clip(f32::NAN, Some(1.0)).is_nan());
        assert_eq!([sign(2.0), sign(-0.5), sign(0.0)], [1.0, -1.0, 0.0]);
    }

    #[test]
    fn close_matches_suggest_names() {
        assert_eq!(close_matches("sdg", &OPTIMIZERS)[0], "sgd");
        assert_eq!(close_matches("adamw", &OPTIMIZERS)[0], "adam");
        assert!(close_matches("zzzzzzzz", &OPTIMIZERS).is_empty());
    }

    #[test]
    fn counting_is_per_index_from_begin_num_update() {
        let mut o = create(
            "sgd",
            OptimizerOptions::default(),
            [("begin_num_update", Hyper::Num(10.0))],
        )
        .unwrap();
        assert_eq!((o.count(0), o.count(0), o.count(1)), (11, 12, 11));
        assert_eq!(o.num_update(), 12);
        assert_eq!(o.update_count(1), Some(11));
        assert_eq!(o.update_count(2), None);
    }
}
