//! The update rules (one variant per optimizer, with its own hyperparameters) and how each
//! defaults its learning rate.

use super::*;

/// The update rule of an optimizer and its own hyperparameters (the options every optimizer
/// shares are in [`OptimizerOptions`]).
#[derive(Clone, Debug, PartialEq)]
pub enum Rule {
    /// SGD, with optional momentum.
    Sgd(SgdOptions),
    /// Nesterov accelerated gradient.
    Nag(NagOptions),
    /// Signum (signSGD when momentum is 0).
    Signum(SignumOptions),
    /// Delay-compensated asynchronous SGD.
    Dcasgd(DcasgdOptions),
    /// Stochastic gradient Langevin dynamics (Gaussian noise from the global seeded stream).
    Sgld,
    /// Adam (L2 weight decay, bias correction folded into the learning rate).
    Adam(AdamOptions),
    /// Adamax (Adam with the infinity norm).
    Adamax(AdamaxOptions),
    /// Nesterov Adam.
    Nadam(NadamOptions),
    /// AdaGrad.
    AdaGrad(AdaGradOptions),
    /// RMSProp, plain or centered (Graves).
    RmsProp(RmsPropOptions),
    /// AdaDelta (no learning rate).
    AdaDelta(AdaDeltaOptions),
    /// FTRL-proximal.
    Ftrl(FtrlOptions),
}

/// How an optimizer's learning rate defaults, and whether it overwrites a scheduler's base_lr.
pub(super) enum LrDefault {
    /// `learning_rate` only when given (then it overwrites the scheduler's base_lr); else 0.01
    /// without a scheduler.
    WhenGiven,
    /// A class default that behaves as if given (Adam, RMSProp, Adamax, Nadam, Signum).
    Class(f64),
    /// Ftrl: its own default, and it never touches a scheduler.
    Ftrl(f64),
}

impl Rule {
    /// The registry name (`"sgd"`, `"rmsprop"`, …).
    pub fn name(&self) -> &'static str {
        match self {
            Rule::Sgd(_) => "sgd",
            Rule::Nag(_) => "nag",
            Rule::Signum(_) => "signum",
            Rule::Dcasgd(_) => "dcasgd",
            Rule::Sgld => "sgld",
            Rule::Adam(_) => "adam",
            Rule::Adamax(_) => "adamax",
            Rule::Nadam(_) => "nadam",
            Rule::AdaGrad(_) => "adagrad",
            Rule::RmsProp(_) => "rmsprop",
            Rule::AdaDelta(_) => "adadelta",
            Rule::Ftrl(_) => "ftrl",
        }
    }

    /// MXNet's class name (`"SGD"`, `"RMSProp"`, …).
    pub fn class_name(&self) -> &'static str {
        match self {
            Rule::Sgd(_) => "SGD",
            Rule::Nag(_) => "NAG",
            Rule::Signum(_) => "Signum",
            Rule::Dcasgd(_) => "DCASGD",
            Rule::Sgld => "SGLD",
            Rule::Adam(_) => "Adam",
            Rule::Adamax(_) => "Adamax",
            Rule::Nadam(_) => "Nadam",
            Rule::AdaGrad(_) => "AdaGrad",
            Rule::RmsProp(_) => "RMSProp",
            Rule::AdaDelta(_) => "AdaDelta",
            Rule::Ftrl(_) => "Ftrl",
        }
    }

    pub(super) fn lr_default(&self) -> LrDefault {
        match self {
            Rule::Adam(_) | Rule::RmsProp(_) | Rule::Nadam(_) => LrDefault::Class(0.001),
            Rule::Adamax(_) => LrDefault::Class(0.002),
            Rule::Signum(_) => LrDefault::Class(0.01),
            Rule::Ftrl(_) => LrDefault::Ftrl(0.1),
            _ => LrDefault::WhenGiven,
        }
    }

    /// AdaDelta has no learning rate: MXNet never asks the scheduler for it.
    pub(super) fn uses_lr(&self) -> bool {
        !matches!(self, Rule::AdaDelta(_))
    }

    /// MXNet passes `clip_gradient` to the fused kernels only when it is truthy (so 0 means
    /// off), while the optimizers written in NDArray operations clip whenever it is not None.
    pub(super) fn clip_zero_is_off(&self) -> bool {
        matches!(
            self,
            Rule::Sgd(_)
                | Rule::Nag(_)
                | Rule::Adam(_)
                | Rule::RmsProp(_)
                | Rule::Ftrl(_)
                | Rule::Signum(_)
        )
    }

    pub(super) fn validate(&self) -> Result<()> {
        match self {
            Rule::Sgd(o) => o.validate(),
            Rule::Nag(o) => o.validate(),
            Rule::Signum(o) => o.validate(),
            Rule::Dcasgd(o) => o.validate(),
            Rule::Sgld => Ok(()),
            Rule::Adam(o) => o.validate(),
            Rule::Adamax(o) => o.validate(),
            Rule::Nadam(o) => o.validate(),
            Rule::AdaGrad(o) => o.validate(),
            Rule::RmsProp(o) => o.validate(),
            Rule::AdaDelta(o) => o.validate(),
            Rule::Ftrl(o) => o.validate(),
        }
    }

    /// The structure of this rule's per-parameter state.
    pub fn state_spec(&self) -> StateSpec {
        use StateSpec::{Array, Tuple};
        let mom = |m: f64| if m != 0.0 { Array } else { StateSpec::None };
        match self {
            Rule::Sgd(o) => mom(o.momentum),
            Rule::Nag(o) => mom(o.momentum),
            Rule::Signum(o) => mom(o.momentum),
            Rule::Dcasgd(o) => Tuple(vec![mom(o.momentum), Array]),
            Rule::Sgld => StateSpec::None,
            Rule::Adam(_) | Rule::Adamax(_) | Rule::Nadam(_) => Tuple(vec![Array, Array]),
            Rule::AdaGrad(_) => Array,
            Rule::RmsProp(o) if o.centered => Tuple(vec![Array, Array, Array]),
            Rule::RmsProp(_) => Tuple(vec![Array]),
            Rule::AdaDelta(_) | Rule::Ftrl(_) => Tuple(vec![Array, Array]),
        }
    }

    /// This rule's hyperparameters by MXNet's names (numbers; booleans as 0/1; a None
    /// `clip_weights` left out), for display and introspection.
    pub fn params(&self) -> Vec<(&'static str, f64)> {
        let b = |x: bool| if x { 1.0 } else { 0.0 };
        match self {
            Rule::Sgd(o) => vec![("momentum", o.momentum), ("lazy_update", b(o.lazy_update))],
            Rule::Nag(o) => vec![("momentum", o.momentum)],
            Rule::Signum(o) => vec![("momentum", o.momentum), ("wd_lh", o.wd_lh)],
            Rule::Dcasgd(o) => vec![("momentum", o.momentum), ("lamda", o.lamda)],
            Rule::Sgld => vec![],
            Rule::Adam(o) => vec![
                ("beta1", o.beta1),
                ("beta2", o.beta2),
                ("epsilon", o.epsilon),
                ("lazy_update", b(o.lazy_update)),
            ],
            Rule::Adamax(o) => vec![("beta1", o.beta1), ("beta2", o.beta2)],
            Rule::Nadam(o) => vec![
                ("beta1", o.beta1),
                ("beta2", o.beta2),
                ("epsilon", o.epsilon),
                ("schedule_decay", o.schedule_decay),
            ],
            Rule::AdaGrad(o) => vec![("eps", o.eps)],
            Rule::RmsProp(o) => {
                let mut v = vec![
                    ("gamma1", o.gamma1),
                    ("gamma2", o.gamma2),
                    ("epsilon", o.epsilon),
                    ("centered", b(o.centered)),
                ];
                if let Some(c) = o.clip_weights {
                    v.push(("clip_weights", c));
                }
                v
            }
            Rule::AdaDelta(o) => vec![("rho", o.rho), ("epsilon", o.epsilon)],
            Rule::Ftrl(o) => vec![("lamda1", o.lamda1), ("beta", o.beta)],
        }
    }

    /// The rule named `name` (case-insensitive) with hyperparameters from `p`.
    pub(super) fn from_params(name: &str, p: &mut Params) -> Result<Rule> {
        Ok(match name.to_ascii_lowercase().as_str() {
            "sgd" => Rule::Sgd(SgdOptions::from_params(p)?),
            "nag" => Rule::Nag(NagOptions::from_params(p)?),
            "signum" => Rule::Signum(SignumOptions::from_params(p)?),
            "dcasgd" => Rule::Dcasgd(DcasgdOptions::from_params(p)?),
            "sgld" => Rule::Sgld,
            "adam" => Rule::Adam(AdamOptions::from_params(p)?),
            "adamax" => Rule::Adamax(AdamaxOptions::from_params(p)?),
            "nadam" => Rule::Nadam(NadamOptions::from_params(p)?),
            "adagrad" => Rule::AdaGrad(AdaGradOptions::from_params(p)?),
            "rmsprop" => Rule::RmsProp(RmsPropOptions::from_params(p)?),
            "adadelta" => Rule::AdaDelta(AdaDeltaOptions::from_params(p)?),
            "ftrl" => Rule::Ftrl(FtrlOptions::from_params(p)?),
            _ => {
                let close = close_matches(&name.to_ascii_lowercase(), &OPTIMIZERS);
                let hint = if close.is_empty() {
                    String::new()
                } else {
                    format!(" (did you mean {}?)", quoted_or(&close))
                };
                return Err(Error::invalid(
                    "optimizer.create: name",
                    format!("one of {}", OPTIMIZERS.join(", ")),
                    format!("{name:?}{hint}"),
                ));
            }
        })
    }
}
