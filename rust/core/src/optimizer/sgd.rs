//! The SGD family (MXNet 1.9.1): `sgd` (plain and momentum), `nag`, `signum` (signSGD when
//! momentum is 0), `dcasgd`, `sgld`. `r` is rescale_grad, `clip` applies only when set.
//!
//! State: sgd / nag / signum — the momentum array, or None when momentum is 0;
//! dcasgd — `(momentum or None, previous weight)`; sgld — None.

use super::{check_range, chunked, clip, each, sign, state_n, Params, State, Step};
use crate::error::{Error, Result};
use crate::tensor::random;
use rand::Rng;
use rand_distr::Normal;

/// SGD hyperparameters (MXNet's `SGD`).
#[derive(Clone, Debug, PartialEq)]
pub struct SgdOptions {
    /// Momentum in [0, 1) (default 0: no momentum state).
    pub momentum: f64,
    /// Accepted for MXNet compatibility (it only changes sparse updates).
    pub lazy_update: bool,
}

impl Default for SgdOptions {
    fn default() -> Self {
        SgdOptions {
            momentum: 0.0,
            lazy_update: true,
        }
    }
}

/// NAG hyperparameters (MXNet's `NAG`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NagOptions {
    /// Momentum in [0, 1) (default 0: plain SGD).
    pub momentum: f64,
}

/// Signum hyperparameters (MXNet's `Signum`; the learning rate defaults to 0.01).
#[derive(Clone, Debug, PartialEq)]
pub struct SignumOptions {
    /// Momentum in [0, 1) (default 0.9; 0 gives signSGD).
    pub momentum: f64,
    /// Decoupled weight decay (default 0; needs momentum > 0, as in MXNet).
    pub wd_lh: f64,
}

impl Default for SignumOptions {
    fn default() -> Self {
        SignumOptions {
            momentum: 0.9,
            wd_lh: 0.0,
        }
    }
}

/// DCASGD hyperparameters (MXNet's `DCASGD`).
#[derive(Clone, Debug, PartialEq)]
pub struct DcasgdOptions {
    /// Momentum in [0, 1) (default 0).
    pub momentum: f64,
    /// Delay-compensation strength (default 0.04).
    pub lamda: f64,
}

impl Default for DcasgdOptions {
    fn default() -> Self {
        DcasgdOptions {
            momentum: 0.0,
            lamda: 0.04,
        }
    }
}

fn momentum_ok(name: &str, m: f64) -> Result<()> {
    check_range(&format!("optimizer.{name}"), "momentum", m, 0.0, Some(1.0))
}

impl SgdOptions {
    pub(crate) fn validate(&self) -> Result<()> {
        momentum_ok("sgd", self.momentum)
    }

    pub(crate) fn from_params(p: &mut Params) -> Result<Self> {
        let d = Self::default();
        Ok(SgdOptions {
            momentum: p.num("momentum", d.momentum)?,
            lazy_update: p.flag("lazy_update", d.lazy_update)?,
        })
    }
}

impl NagOptions {
    pub(crate) fn validate(&self) -> Result<()> {
        momentum_ok("nag", self.momentum)
    }

    pub(crate) fn from_params(p: &mut Params) -> Result<Self> {
        Ok(NagOptions {
            momentum: p.num("momentum", 0.0)?,
        })
    }
}

impl SignumOptions {
    pub(crate) fn validate(&self) -> Result<()> {
        momentum_ok("signum", self.momentum)?;
        check_range("optimizer.signum", "wd_lh", self.wd_lh, 0.0, None)?;
        if self.momentum == 0.0 && self.wd_lh != 0.0 {
            // MXNet's signsgd_update has no wd_lh and raises.
            return Err(Error::invalid(
                "optimizer.signum: wd_lh",
                "0 when momentum is 0 (signSGD has no decoupled weight decay)",
                self.wd_lh.to_string(),
            ));
        }
        Ok(())
    }

    pub(crate) fn from_params(p: &mut Params) -> Result<Self> {
        let d = Self::default();
        Ok(SignumOptions {
            momentum: p.num("momentum", d.momentum)?,
            wd_lh: p.num("wd_lh", d.wd_lh)?,
        })
    }
}

impl DcasgdOptions {
    pub(crate) fn validate(&self) -> Result<()> {
        momentum_ok("dcasgd", self.momentum)?;
        check_range("optimizer.dcasgd", "lamda", self.lamda, 0.0, None)
    }

    pub(crate) fn from_params(p: &mut Params) -> Result<Self> {
        let d = Self::default();
        Ok(DcasgdOptions {
            momentum: p.num("momentum", d.momentum)?,
            lamda: p.num("lamda", d.lamda)?,
        })
    }
}

/// momentum 0: `w = (1 − lr·wd)·w − lr·clip(r·g)`; else
/// `m = momentum·m − lr·wd·w − lr·clip(r·g)`, `w = w + m`.
pub(crate) fn sgd(
    o: &SgdOptions,
    s: &Step,
    w: &mut [f32],
    g: &[f32],
    st: &mut State,
) -> Result<()> {
    momentum_sgd(o.momentum, s, w, g, st)
}

fn momentum_sgd(momentum: f64, s: &Step, w: &mut [f32], g: &[f32], st: &mut State) -> Result<()> {
    let (lr, wd, r, c) = (s.lr as f32, s.wd as f32, s.rescale as f32, s.clip32());
    if momentum > 0.0 {
        let mom = momentum as f32;
        each(w, g, state_n::<1>(st)?, move |w, g, [m]| {
            *m = mom * *m - lr * wd * *w - lr * clip(r * g, c);
            *w += *m;
        });
    } else {
        each(w, g, [], move |w, g, []| {
            *w = (1.0 - lr * wd) * *w - lr * clip(r * g, c);
        });
    }
    Ok(())
}

/// momentum 0: plain SGD; else `g' = clip(r·g)`, `m1 = momentum·m`,
/// `w' = w − m1 + (1 + momentum)·(m1 − lr·(g' + wd·w))`, `m = m1 − lr·(g' + wd·w')` (MXNet's
/// kernel writes the weight before the momentum, so the momentum sees the new weight).
pub(crate) fn nag(
    o: &NagOptions,
    s: &Step,
    w: &mut [f32],
    g: &[f32],
    st: &mut State,
) -> Result<()> {
    if o.momentum <= 0.0 {
        return momentum_sgd(0.0, s, w, g, st);
    }
    let (lr, wd, r, c) = (s.lr as f32, s.wd as f32, s.rescale as f32, s.clip32());
    let mom = o.momentum as f32;
    each(w, g, state_n::<1>(st)?, move |w, g, [m]| {
        let gc = clip(r * g, c);
        let m1 = mom * *m;
        *w = *w - m1 + (mom + 1.0) * (m1 - lr * (gc + wd * *w));
        *m = m1 - lr * (gc + wd * *w);
    });
    Ok(())
}

/// momentum > 0: `m = momentum·m − (1 − momentum)·(wd·w + clip(r·g))`,
/// `w = (1 − lr·wd_lh)·w + lr·sign(m)`; momentum 0 (signSGD):
/// `w = (1 − lr·wd)·w − lr·sign(clip(r·g))`.
pub(crate) fn signum(
    o: &SignumOptions,
    s: &Step,
    w: &mut [f32],
    g: &[f32],
    st: &mut State,
) -> Result<()> {
    let (lr, wd, r, c) = (s.lr as f32, s.wd as f32, s.rescale as f32, s.clip32());
    if o.momentum > 0.0 {
        let mom = o.momentum as f32;
        let wd_lh = o.wd_lh as f32;
        each(w, g, state_n::<1>(st)?, move |w, g, [m]| {
            *m = mom * *m - (1.0 - mom) * wd * *w - (1.0 - mom) * clip(r * g, c);
            *w = (1.0 - lr * wd_lh) * *w + lr * sign(*m);
        });
    } else {
        each(w, g, [], move |w, g, []| {
            *w = (1.0 - lr * wd) * *w - lr * sign(clip(r * g, c));
        });
    }
    Ok(())
}

/// `g' = clip(r·g)`, `step = −lr·(g' + wd·w + lamda·g'²·(w − w_prev))`; with momentum
/// `m = momentum·m + step` and the step is m; then `w_prev = w`, `w = w + step`.
/// MXNet 1.9.1 raises for momentum > 0 (its `if mom:` tests an array's truth value); mxfn
/// applies the momentum as the class documents.
pub(crate) fn dcasgd(
    o: &DcasgdOptions,
    s: &Step,
    w: &mut [f32],
    g: &[f32],
    st: &mut State,
) -> Result<()> {
    let (lr, wd, r, c) = (s.lr as f32, s.wd as f32, s.rescale as f32, s.clip32());
    let lamda = o.lamda as f32;
    let step = move |w: f32, g: f32, prev: f32| {
        let gc = clip(r * g, c);
        -lr * (gc + wd * w + lamda * gc * gc * (w - prev))
    };
    if o.momentum > 0.0 {
        let mom = o.momentum as f32;
        each(w, g, state_n::<2>(st)?, move |w, g, [m, prev]| {
            *m = mom * *m + step(*w, g, *prev);
            *prev = *w;
            *w += *m;
        });
    } else {
        each(w, g, state_n::<1>(st)?, move |w, g, [prev]| {
            let d = step(*w, g, *prev);
            *prev = *w;
            *w += d;
        });
    }
    Ok(())
}

/// `w = w − lr/2·(clip(r·g) + wd·w) + noise`, noise ~ Normal(0, sqrt(lr)) drawn from the
/// global seeded stream (the same numbers `random::normal(0, sqrt(lr), shape)` would give).
pub(crate) fn sgld(s: &Step, w: &mut [f32], g: &[f32]) -> Result<()> {
    let (wd, r, c) = (s.wd as f32, s.rescale as f32, s.clip32());
    let half = (-s.lr / 2.0) as f32;
    let normal = Normal::new(0.0, s.lr.sqrt()).map_err(|_| {
        Error::invalid(
            "optimizer.sgld: learning rate",
            "a finite learning rate >= 0 (the noise has std sqrt(lr))",
            s.lr.to_string(),
        )
    })?;
    let key = random::next_key();
    chunked(w, g, [], |chunk, wc, gc, []| {
        let mut rng = random::chunk_rng(key, chunk);
        for (w, &g) in wc.iter_mut().zip(gc) {
            let x = *w + half * (clip(r * g, c) + wd * *w);
            *w = x + rng.sample(normal) as f32;
        }
    });
    Ok(())
}
