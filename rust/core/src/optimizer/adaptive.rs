//! Per-coordinate adaptive optimizers (MXNet 1.9.1): `adagrad`, `rmsprop` (plain and
//! centered), `adadelta`, `ftrl`.
//!
//! State: adagrad — the history array; rmsprop — `(n,)`, centered `(n, g, delta)`;
//! adadelta — `(acc_g, acc_delta)`; ftrl — `(z, n)`.

use super::{check_range, clip, each, sign, state_n, Params, State, Step};
use crate::error::Result;

/// AdaGrad hyperparameters (MXNet's `AdaGrad`).
#[derive(Clone, Debug, PartialEq)]
pub struct AdaGradOptions {
    /// Added inside the square root (default 1e-7; MXNet's keyword is `eps`).
    pub eps: f64,
}

impl Default for AdaGradOptions {
    fn default() -> Self {
        AdaGradOptions { eps: 1e-7 }
    }
}

/// RMSProp hyperparameters (MXNet's `RMSProp`; the learning rate defaults to 0.001).
#[derive(Clone, Debug, PartialEq)]
pub struct RmsPropOptions {
    /// Decay of the squared-gradient average, in [0, 1) (default 0.9).
    pub gamma1: f64,
    /// Momentum of the centered variant, in [0, 1) (default 0.9).
    pub gamma2: f64,
    /// Added inside the square root (default 1e-8).
    pub epsilon: f64,
    /// Graves' centered variant (default false).
    pub centered: bool,
    /// Clip weights to ±this after the update (None or 0: off, as in MXNet).
    pub clip_weights: Option<f64>,
}

impl Default for RmsPropOptions {
    fn default() -> Self {
        RmsPropOptions {
            gamma1: 0.9,
            gamma2: 0.9,
            epsilon: 1e-8,
            centered: false,
            clip_weights: None,
        }
    }
}

/// AdaDelta hyperparameters (MXNet's `AdaDelta`; there is no learning rate).
#[derive(Clone, Debug, PartialEq)]
pub struct AdaDeltaOptions {
    /// Decay of both running averages, in [0, 1) (default 0.9).
    pub rho: f64,
    /// Added inside both square roots, > 0 (default 1e-5).
    pub epsilon: f64,
}

impl Default for AdaDeltaOptions {
    fn default() -> Self {
        AdaDeltaOptions {
            rho: 0.9,
            epsilon: 1e-5,
        }
    }
}

/// Ftrl hyperparameters (MXNet's `Ftrl`; the learning rate defaults to 0.1).
#[derive(Clone, Debug, PartialEq)]
pub struct FtrlOptions {
    /// L1 strength (default 0.01).
    pub lamda1: f64,
    /// Added to sqrt(n) in the denominator (default 1).
    pub beta: f64,
}

impl Default for FtrlOptions {
    fn default() -> Self {
        FtrlOptions {
            lamda1: 0.01,
            beta: 1.0,
        }
    }
}

impl AdaGradOptions {
    pub(crate) fn validate(&self) -> Result<()> {
        check_range("optimizer.adagrad", "eps", self.eps, 0.0, None)
    }

    pub(crate) fn from_params(p: &mut Params) -> Result<Self> {
        Ok(AdaGradOptions {
            eps: p.num("eps", Self::default().eps)?,
        })
    }
}

impl RmsPropOptions {
    pub(crate) fn validate(&self) -> Result<()> {
        let what = "optimizer.rmsprop";
        check_range(what, "gamma1", self.gamma1, 0.0, Some(1.0))?;
        check_range(what, "gamma2", self.gamma2, 0.0, Some(1.0))?;
        check_range(what, "epsilon", self.epsilon, 0.0, None)?;
        if let Some(c) = self.clip_weights {
            check_range(what, "clip_weights", c, 0.0, None)?;
        }
        Ok(())
    }

    pub(crate) fn from_params(p: &mut Params) -> Result<Self> {
        let d = Self::default();
        Ok(RmsPropOptions {
            gamma1: p.num("gamma1", d.gamma1)?,
            gamma2: p.num("gamma2", d.gamma2)?,
            epsilon: p.num("epsilon", d.epsilon)?,
            centered: p.flag("centered", d.centered)?,
            clip_weights: p.opt_num("clip_weights", d.clip_weights)?,
        })
    }
}

impl AdaDeltaOptions {
    pub(crate) fn validate(&self) -> Result<()> {
        check_range("optimizer.adadelta", "rho", self.rho, 0.0, Some(1.0))?;
        // epsilon 0 makes the first step 0/0.
        check_range(
            "optimizer.adadelta",
            "epsilon",
            self.epsilon,
            f64::MIN_POSITIVE,
            None,
        )
    }

    pub(crate) fn from_params(p: &mut Params) -> Result<Self> {
        let d = Self::default();
        Ok(AdaDeltaOptions {
            rho: p.num("rho", d.rho)?,
            epsilon: p.num("epsilon", d.epsilon)?,
        })
    }
}

impl FtrlOptions {
    pub(crate) fn validate(&self) -> Result<()> {
        check_range("optimizer.ftrl", "lamda1", self.lamda1, 0.0, None)?;
        check_range("optimizer.ftrl", "beta", self.beta, 0.0, None)
    }

    pub(crate) fn from_params(p: &mut Params) -> Result<Self> {
        let d = Self::default();
        Ok(FtrlOptions {
            lamda1: p.num("lamda1", d.lamda1)?,
            beta: p.num("beta", d.beta)?,
        })
    }
}

/// `g' = clip(r·g)`, `h = h + g'²`, `w = w − lr·(g'/sqrt(h + eps) + wd·w)` (wd outside the
/// adaptive term).
pub(crate) fn adagrad(
    o: &AdaGradOptions,
    s: &Step,
    w: &mut [f32],
    g: &[f32],
    st: &mut State,
) -> Result<()> {
    let (lr, wd, r, c) = (s.lr as f32, s.wd as f32, s.rescale as f32, s.clip32());
    let eps = o.eps as f32;
    each(w, g, state_n::<1>(st)?, move |w, g, [h]| {
        let gc = clip(g * r, c);
        *h += gc * gc;
        *w += (gc / (*h + eps).sqrt() + *w * wd) * -lr;
    });
    Ok(())
}

/// `g' = clip(r·g + wd·w)`, `n = (1−γ1)·g'² + γ1·n`; plain: `w = w − lr·g'/sqrt(n + ε)`;
/// centered: `gm = (1−γ1)·g' + γ1·gm`, `δ = γ2·δ − lr·g'/sqrt(n − gm² + ε)`, `w = w + δ`;
/// then `clip_weights` when it is > 0.
pub(crate) fn rmsprop(
    o: &RmsPropOptions,
    s: &Step,
    w: &mut [f32],
    g: &[f32],
    st: &mut State,
) -> Result<()> {
    let (lr, wd, r, c) = (s.lr as f32, s.wd as f32, s.rescale as f32, s.clip32());
    let (g1, g2, eps) = (o.gamma1 as f32, o.gamma2 as f32, o.epsilon as f32);
    let cw = o.clip_weights.filter(|&x| x > 0.0).map(|x| x as f32);
    if o.centered {
        each(w, g, state_n::<3>(st)?, move |w, g, [n, gm, delta]| {
            let gc = clip(r * g + wd * *w, c);
            *n = (1.0 - g1) * gc * gc + g1 * *n;
            *gm = (1.0 - g1) * gc + g1 * *gm;
            *delta = g2 * *delta - lr * (gc / (*n - *gm * *gm + eps).sqrt());
            *w = clip(*w + *delta, cw);
        });
    } else {
        each(w, g, state_n::<1>(st)?, move |w, g, [n]| {
            let gc = clip(r * g + wd * *w, c);
            *n = (1.0 - g1) * gc * gc + g1 * *n;
            *w = clip(*w - lr * (gc / (*n + eps).sqrt()), cw);
        });
    }
    Ok(())
}

/// `g' = clip(r·g)`, `acc_g = ρ·acc_g + (1−ρ)·g'²`,
/// `d = sqrt(acc_δ + ε)/sqrt(acc_g + ε)·g'`, `acc_δ = ρ·acc_δ + (1−ρ)·d²`, `w = w − d − wd·w`.
/// No learning rate. (MXNet also rescales the caller's gradient array in place; mxfn leaves
/// the gradient alone.)
pub(crate) fn adadelta(
    o: &AdaDeltaOptions,
    s: &Step,
    w: &mut [f32],
    g: &[f32],
    st: &mut State,
) -> Result<()> {
    let (wd, r, c) = (s.wd as f32, s.rescale as f32, s.clip32());
    let (rho, eps) = (o.rho as f32, o.epsilon as f32);
    each(w, g, state_n::<2>(st)?, move |w, g, [acc_g, acc_d]| {
        let gc = clip(g * r, c);
        *acc_g = rho * *acc_g + (1.0 - rho) * gc * gc;
        let d = (*acc_d + eps).sqrt() / (*acc_g + eps).sqrt() * gc;
        *acc_d = rho * *acc_d + (1.0 - rho) * d * d;
        *w -= d + wd * *w;
    });
    Ok(())
}

/// `g' = clip(r·g)`, `z = z + g' − (sqrt(n + g'²) − sqrt(n))·w/lr`, `n = n + g'²`,
/// `w = (sign(z)·λ1 − z)/((β + sqrt(n))/lr + wd)` where `|z| > λ1`, else 0 (the weight is
/// recomputed from z and n, not incremented).
pub(crate) fn ftrl(
    o: &FtrlOptions,
    s: &Step,
    w: &mut [f32],
    g: &[f32],
    st: &mut State,
) -> Result<()> {
    let (lr, wd, r, c) = (s.lr as f32, s.wd as f32, s.rescale as f32, s.clip32());
    let (l1, beta) = (o.lamda1 as f32, o.beta as f32);
    each(w, g, state_n::<2>(st)?, move |w, g, [z, n]| {
        let gc = clip(g * r, c);
        *z += gc - ((*n + gc * gc).sqrt() - n.sqrt()) * *w / lr;
        *n += gc * gc;
        // MXNet multiplies by the 0/1 mask rather than branching.
        let keep = if z.abs() > l1 { 1.0 } else { 0.0 };
        *w = (sign(*z) * l1 - *z) / ((beta + n.sqrt()) / lr + wd) * keep;
    });
    Ok(())
}
