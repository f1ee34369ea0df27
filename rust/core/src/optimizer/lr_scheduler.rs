//! Learning-rate schedulers (MXNet's `FactorScheduler`, `MultiFactorScheduler`,
//! `PolyScheduler`, `CosineScheduler`), stateful exactly as MXNet 1.9.1's.
//!
//! A scheduler is called with the optimizer's `num_update` and returns the learning rate.
//! Like MXNet's, it keeps state between calls: Factor and MultiFactor only ever decay (a
//! later call with a smaller `num_update` does not undo a decay), and Poly and Cosine store
//! the last value computed for `num_update <= max_update` and return it beyond.

use crate::error::{Error, Result};
use std::sync::{Arc, Mutex, MutexGuard};

/// How the learning rate rises during the first `warmup_steps` updates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WarmupMode {
    /// From `warmup_begin_lr` to `base_lr` in equal increments.
    Linear,
    /// `warmup_begin_lr` throughout the warmup.
    Constant,
}

impl WarmupMode {
    /// Parses MXNet's names `"linear"` / `"constant"`.
    pub fn parse(name: &str) -> Result<Self> {
        match name {
            "linear" => Ok(WarmupMode::Linear),
            "constant" => Ok(WarmupMode::Constant),
            _ => Err(Error::invalid(
                "lr_scheduler: warmup_mode",
                "\"linear\" or \"constant\"",
                format!("{name:?}"),
            )),
        }
    }

    /// MXNet's name of the mode.
    pub fn name(self) -> &'static str {
        match self {
            WarmupMode::Linear => "linear",
            WarmupMode::Constant => "constant",
        }
    }
}

/// Options every scheduler takes (MXNet's `LRScheduler` base): the defaults are MXNet's.
#[derive(Clone, Debug, PartialEq)]
pub struct SchedulerOptions {
    /// The learning rate after warmup (before any decay). Default 0.01.
    pub base_lr: f64,
    /// Number of warmup updates. Default 0.
    pub warmup_steps: u64,
    /// The learning rate warmup starts from. Default 0.
    pub warmup_begin_lr: f64,
    /// How warmup proceeds. Default linear.
    pub warmup_mode: WarmupMode,
}

impl Default for SchedulerOptions {
    fn default() -> Self {
        SchedulerOptions {
            base_lr: 0.01,
            warmup_steps: 0,
            warmup_begin_lr: 0.0,
            warmup_mode: WarmupMode::Linear,
        }
    }
}

/// Which decay a scheduler applies after warmup.
#[derive(Clone, Debug, PartialEq)]
pub enum Schedule {
    /// Multiply by `factor` every `step` updates (at `n = step+1, 2·step+1, …`), never below
    /// `stop_factor_lr`.
    Factor {
        /// Updates between decays (>= 1).
        step: u64,
        /// The decay factor, in [0, 1].
        factor: f64,
        /// The floor of the learning rate (MXNet's default 1e-8).
        stop_factor_lr: f64,
    },
    /// Multiply by `factor` once past each of the increasing `steps`.
    MultiFactor {
        /// Strictly increasing update counts (each >= 1).
        steps: Vec<u64>,
        /// The decay factor, in [0, 1].
        factor: f64,
    },
    /// `final_lr + (base_lr − final_lr)·(1 − (n − warmup)/(max_update − warmup))^pwr`.
    Poly {
        /// The update at which `final_lr` is reached (>= 1).
        max_update: u64,
        /// The power (MXNet's default 2).
        pwr: f64,
        /// The learning rate at `max_update` (default 0).
        final_lr: f64,
    },
    /// `final_lr + (base_lr − final_lr)·(1 + cos(π·(n − warmup)/(max_update − warmup)))/2`.
    Cosine {
        /// The update at which `final_lr` is reached (>= 1).
        max_update: u64,
        /// The learning rate at `max_update` (default 0).
        final_lr: f64,
    },
}

impl Schedule {
    /// `Factor` with MXNet's default `stop_factor_lr` 1e-8.
    pub fn factor(step: u64, factor: f64) -> Self {
        Schedule::Factor {
            step,
            factor,
            stop_factor_lr: 1e-8,
        }
    }

    /// `Poly` with MXNet's defaults `pwr` 2, `final_lr` 0.
    pub fn poly(max_update: u64) -> Self {
        Schedule::Poly {
            max_update,
            pwr: 2.0,
            final_lr: 0.0,
        }
    }

    /// `Cosine` with MXNet's default `final_lr` 0.
    pub fn cosine(max_update: u64) -> Self {
        Schedule::Cosine {
            max_update,
            final_lr: 0.0,
        }
    }

    /// MXNet's class name (`FactorScheduler`, …).
    pub fn class_name(&self) -> &'static str {
        match self {
            Schedule::Factor { .. } => "FactorScheduler",
            Schedule::MultiFactor { .. } => "MultiFactorScheduler",
            Schedule::Poly { .. } => "PolyScheduler",
            Schedule::Cosine { .. } => "CosineScheduler",
        }
    }
}

/// A learning-rate scheduler with MXNet's state: the current `base_lr` (decayed in place by
/// Factor/MultiFactor, the last computed value for Poly/Cosine), the decay counters, and the
/// constructor's `base_lr` kept for warmup (`warmup_final_lr`) and Poly/Cosine
/// (`base_lr_orig`).
///
/// ```
/// use mxfn_core::optimizer::lr_scheduler::{LrScheduler, Schedule, SchedulerOptions};
/// let mut s = LrScheduler::new(
///     Schedule::factor(10, 0.5),
///     SchedulerOptions { base_lr: 0.1, ..Default::default() },
/// ).unwrap();
/// assert_eq!(s.call(10), 0.1);
/// assert_eq!(s.call(11), 0.05); // drops at step + 1
/// assert_eq!(s.call(0), 0.05); // and never goes back up
/// ```
#[derive(Clone, Debug)]
pub struct LrScheduler {
    schedule: Schedule,
    base_lr: f64,
    /// The constructor's base_lr: warmup ends there (an optimizer's override does not move it).
    warmup_final_lr: f64,
    /// Poly/Cosine decay from the constructor's base_lr too (MXNet's `base_lr_orig`).
    base_lr_orig: f64,
    warmup_steps: u64,
    warmup_begin_lr: f64,
    warmup_mode: WarmupMode,
    /// Factor: updates already accounted for; MultiFactor: the last passed step.
    count: u64,
    /// MultiFactor: how many steps have been passed.
    cur_step_ind: usize,
}

fn check(ok: bool, what: &str, expected: &str, got: impl ToString) -> Result<()> {
    if ok {
        Ok(())
    } else {
        Err(Error::invalid(
            format!("lr_scheduler: {what}"),
            expected,
            got.to_string(),
        ))
    }
}

fn check_lr(what: &str, v: f64) -> Result<()> {
    check(
        v.is_finite() && v >= 0.0,
        what,
        "a finite learning rate >= 0",
        v,
    )
}

impl LrScheduler {
    /// Builds a scheduler, checking the options as MXNet does (steps >= 1, factor <= 1,
    /// increasing MultiFactor steps, `warmup_begin_lr <= base_lr`) and a little more: no
    /// NaN or negative rates, factor >= 0, and for Poly/Cosine `warmup_steps < max_update`
    /// (MXNet divides by `max_update − warmup_steps`).
    pub fn new(schedule: Schedule, opts: SchedulerOptions) -> Result<Self> {
        check_lr("base_lr", opts.base_lr)?;
        check_lr("warmup_begin_lr", opts.warmup_begin_lr)?;
        check(
            opts.warmup_begin_lr <= opts.base_lr,
            "warmup_begin_lr",
            &format!("at most base_lr ({})", opts.base_lr),
            opts.warmup_begin_lr,
        )?;
        match &schedule {
            Schedule::Factor {
                step,
                factor,
                stop_factor_lr,
            } => {
                check(*step >= 1, "step", "an update count >= 1", step)?;
                check(
                    (0.0..=1.0).contains(factor),
                    "factor",
                    "a factor in [0, 1] (it must reduce the rate)",
                    factor,
                )?;
                check_lr("stop_factor_lr", *stop_factor_lr)?;
            }
            Schedule::MultiFactor { steps, factor } => {
                check(
                    !steps.is_empty(),
                    "step",
                    "a non-empty list of update counts",
                    "[]",
                )?;
                check(
                    steps.iter().all(|&s| s >= 1) && steps.windows(2).all(|w| w[0] < w[1]),
                    "step",
                    "a strictly increasing list of update counts >= 1",
                    format!("{steps:?}"),
                )?;
                check(
                    (0.0..=1.0).contains(factor),
                    "factor",
                    "a factor in [0, 1] (it must reduce the rate)",
                    factor,
                )?;
            }
            Schedule::Poly {
                max_update,
                pwr,
                final_lr,
            } => {
                check(
                    *max_update >= 1,
                    "max_update",
                    "an update count >= 1",
                    max_update,
                )?;
                check(pwr.is_finite(), "pwr", "a finite power", pwr)?;
                check_lr("final_lr", *final_lr)?;
            }
            Schedule::Cosine {
                max_update,
                final_lr,
            } => {
                check(
                    *max_update >= 1,
                    "max_update",
                    "an update count >= 1",
                    max_update,
                )?;
                check_lr("final_lr", *final_lr)?;
            }
        }
        if let Schedule::Poly { max_update, .. } | Schedule::Cosine { max_update, .. } = &schedule {
            check(
                opts.warmup_steps < *max_update,
                "warmup_steps",
                &format!("fewer warmup steps than max_update ({max_update})"),
                opts.warmup_steps,
            )?;
        }
        Ok(LrScheduler {
            schedule,
            base_lr: opts.base_lr,
            warmup_final_lr: opts.base_lr,
            base_lr_orig: opts.base_lr,
            warmup_steps: opts.warmup_steps,
            warmup_begin_lr: opts.warmup_begin_lr,
            warmup_mode: opts.warmup_mode,
            count: 0,
            cur_step_ind: 0,
        })
    }

    /// The learning rate for `num_update`, advancing the scheduler's state as MXNet's
    /// `__call__` does.
    pub fn call(&mut self, num_update: u64) -> f64 {
        if num_update < self.warmup_steps {
            return self.warmup_lr(num_update);
        }
        match &self.schedule {
            Schedule::Factor {
                step,
                factor,
                stop_factor_lr,
            } => {
                // `while`, not `if`: a resumed run jumps several steps at once. The rate is
                // multiplied repeatedly (not computed as a power), exactly like MXNet.
                while num_update > self.count.saturating_add(*step) {
                    let mut next = self.base_lr * factor;
                    if next < *stop_factor_lr {
                        next = *stop_factor_lr;
                    }
                    if next == self.base_lr {
                        // A fixed point (the floor, or factor 1): the remaining steps only
                        // move the count, so jump there instead of looping (MXNet loops).
                        self.count += (num_update - self.count - 1) / step * step;
                        break;
                    }
                    self.count += step;
                    self.base_lr = next;
                }
            }
            Schedule::MultiFactor { steps, factor } => {
                while let Some(&s) = steps.get(self.cur_step_ind) {
                    if num_update > s {
                        self.count = s;
                        self.cur_step_ind += 1;
                        self.base_lr *= factor;
                    } else {
                        break;
                    }
                }
            }
            Schedule::Poly {
                max_update,
                pwr,
                final_lr,
            } => {
                if num_update <= *max_update {
                    let frac = (num_update - self.warmup_steps) as f64
                        / (*max_update - self.warmup_steps) as f64;
                    self.base_lr =
                        final_lr + (self.base_lr_orig - final_lr) * (1.0 - frac).powf(*pwr);
                }
            }
            Schedule::Cosine {
                max_update,
                final_lr,
            } => {
                if num_update <= *max_update {
                    let frac = (num_update - self.warmup_steps) as f64
                        / (*max_update - self.warmup_steps) as f64;
                    self.base_lr = final_lr
                        + (self.base_lr_orig - final_lr)
                            * (1.0 + (std::f64::consts::PI * frac).cos())
                            / 2.0;
                }
            }
        }
        self.base_lr
    }

    fn warmup_lr(&self, num_update: u64) -> f64 {
        match self.warmup_mode {
            WarmupMode::Linear => {
                self.warmup_begin_lr
                    + (self.warmup_final_lr - self.warmup_begin_lr) * num_update as f64
                        / self.warmup_steps as f64
            }
            WarmupMode::Constant => self.warmup_begin_lr,
        }
    }

    /// The current `base_lr` (MXNet's attribute: decayed in place by Factor/MultiFactor, the
    /// last computed value for Poly/Cosine).
    pub fn base_lr(&self) -> f64 {
        self.base_lr
    }

    /// Overwrites `base_lr`, as an optimizer with its own learning rate does. Only `base_lr`
    /// changes: warmup still ends at the constructor's value, and Poly/Cosine still decay from
    /// it (MXNet's `warmup_final_lr` and `base_lr_orig`).
    pub fn set_base_lr(&mut self, lr: f64) -> Result<()> {
        check_lr("base_lr", lr)?;
        self.base_lr = lr;
        Ok(())
    }

    /// The decay this scheduler applies.
    pub fn schedule(&self) -> &Schedule {
        &self.schedule
    }

    /// The warmup options and the constructor's `base_lr`, as given.
    pub fn options(&self) -> SchedulerOptions {
        SchedulerOptions {
            base_lr: self.warmup_final_lr,
            warmup_steps: self.warmup_steps,
            warmup_begin_lr: self.warmup_begin_lr,
            warmup_mode: self.warmup_mode,
        }
    }
}

/// Anything that gives a learning rate for an update count: mxfn's [`LrScheduler`], or a
/// user's own (the Python binding wraps a Python callable, as MXNet accepts any
/// `LRScheduler` subclass).
pub trait Scheduler: Send + std::fmt::Debug {
    /// The learning rate for `num_update` (may advance the scheduler's state).
    fn call(&mut self, num_update: u64) -> Result<f64>;
    /// The current `base_lr`, if the scheduler has one.
    fn base_lr(&self) -> Option<f64>;
    /// Overwrites `base_lr` (an optimizer's own learning rate wins over it, as in MXNet).
    fn set_base_lr(&mut self, lr: f64) -> Result<()>;
    /// This scheduler as an [`LrScheduler`], when it is one.
    fn as_lr_scheduler(&self) -> Option<&LrScheduler> {
        None
    }
}

impl Scheduler for LrScheduler {
    fn call(&mut self, num_update: u64) -> Result<f64> {
        Ok(LrScheduler::call(self, num_update))
    }
    fn base_lr(&self) -> Option<f64> {
        Some(LrScheduler::base_lr(self))
    }
    fn set_base_lr(&mut self, lr: f64) -> Result<()> {
        LrScheduler::set_base_lr(self, lr)
    }
    fn as_lr_scheduler(&self) -> Option<&LrScheduler> {
        Some(self)
    }
}

/// A scheduler shared between its owner and the optimizers it is attached to: cloning the
/// handle shares the one scheduler state, as passing an MXNet scheduler object does.
#[derive(Clone, Debug)]
pub struct SharedScheduler(Arc<Mutex<Box<dyn Scheduler>>>);

impl SharedScheduler {
    /// Wraps a scheduler for sharing.
    pub fn new(s: impl Scheduler + 'static) -> Self {
        SharedScheduler(Arc::new(Mutex::new(Box::new(s))))
    }

    /// Locks the scheduler. A poisoned lock is recovered: a scheduler's state is a few
    /// numbers updated by single assignments, so it is always usable.
    pub fn lock(&self) -> MutexGuard<'_, Box<dyn Scheduler>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The lock itself, for callers with their own locking discipline (the Python binding
    /// never waits for a lock while holding the GIL).
    pub fn mutex(&self) -> &Mutex<Box<dyn Scheduler>> {
        &self.0
    }

    /// The learning rate for `num_update`, advancing the shared state.
    pub fn call(&self, num_update: u64) -> Result<f64> {
        self.lock().call(num_update)
    }

    /// The current `base_lr`, if the scheduler has one.
    pub fn base_lr(&self) -> Option<f64> {
        self.lock().base_lr()
    }

    /// Overwrites `base_lr`.
    pub fn set_base_lr(&self, lr: f64) -> Result<()> {
        self.lock().set_base_lr(lr)
    }

    /// Whether both handles share one scheduler.
    pub fn same(&self, other: &SharedScheduler) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sched(s: Schedule, base_lr: f64) -> LrScheduler {
        LrScheduler::new(
            s,
            SchedulerOptions {
                base_lr,
                ..Default::default()
            },
        )
        .unwrap()
    }

    #[test]
    fn factor_decays_after_step_and_never_recovers() {
        let mut s = sched(Schedule::factor(10, 0.5), 0.1);
        let lrs: Vec<f64> = [0, 10, 11, 21, 5, 35].iter().map(|&n| s.call(n)).collect();
        assert_eq!(lrs, vec![0.1, 0.1, 0.05, 0.025, 0.025, 0.0125]);
    }

    #[test]
    fn multifactor_passes_each_step_once() {
        let mut s = sched(
            Schedule::MultiFactor {
                steps: vec![10, 20, 30],
                factor: 0.5,
            },
            0.1,
        );
        let lrs: Vec<f64> = [25, 5, 31, 0].iter().map(|&n| s.call(n)).collect();
        assert_eq!(lrs, vec![0.025, 0.025, 0.0125, 0.0125]);
    }

    #[test]
    fn poly_and_cosine_keep_the_last_value_beyond_max_update() {
        let mut p = sched(Schedule::poly(50), 0.1);
        assert_eq!(p.call(200), 0.1);
        let v = p.call(25);
        assert!((v - 0.025).abs() < 1e-15);
        assert_eq!(p.call(300), v);
        let mut c = sched(Schedule::cosine(40), 0.01);
        assert!((c.call(20) - 0.005).abs() < 1e-15);
        assert_eq!(c.call(41), c.call(1000));
    }

    #[test]
    fn warmup_and_base_lr_override() {
        let mut s = LrScheduler::new(
            Schedule::factor(20, 0.7),
            SchedulerOptions {
                base_lr: 0.2,
                warmup_steps: 10,
                warmup_begin_lr: 0.01,
                warmup_mode: WarmupMode::Linear,
            },
        )
        .unwrap();
        s.set_base_lr(0.5).unwrap();
        // Warmup still ends at the constructor's base_lr; after it, the overridden one.
        assert!((s.call(5) - 0.105).abs() < 1e-12);
        assert_eq!(s.call(10), 0.5);
    }

    #[test]
    fn nonsense_is_rejected() {
        let bad = [
            (Schedule::factor(0, 0.5), SchedulerOptions::default()),
            (Schedule::factor(1, 1.5), SchedulerOptions::default()),
            (
                Schedule::MultiFactor {
                    steps: vec![5, 5],
                    factor: 0.5,
                },
                SchedulerOptions::default(),
            ),
            (Schedule::poly(0), SchedulerOptions::default()),
            (
                Schedule::cosine(10),
                SchedulerOptions {
                    warmup_steps: 10,
                    ..Default::default()
                },
            ),
            (
                Schedule::factor(1, 0.5),
                SchedulerOptions {
                    base_lr: f64::NAN,
                    ..Default::default()
                },
            ),
            (
                Schedule::factor(1, 0.5),
                SchedulerOptions {
                    warmup_begin_lr: 0.5,
                    ..Default::default()
                },
            ),
        ];
        for (s, o) in bad {
            assert!(LrScheduler::new(s.clone(), o).is_err(), "{s:?}");
        }
    }
}
