//! The Adam family (MXNet 1.9.1): `adam`, `adamax`, `nadam`. Weight decay is L2 (added to
//! the rescaled gradient before clipping), not AdamW. `t` is the index's update count.
//!
//! State: `(mean, variance)` for all three (Adamax's second array is the infinity norm `u`).

use super::{check_range, clip, each, state_n, Params, State, Step};
use crate::error::Result;

/// Adam hyperparameters (MXNet's `Adam`; the learning rate defaults to 0.001).
#[derive(Clone, Debug, PartialEq)]
pub struct AdamOptions {
    /// First-moment decay in [0, 1) (default 0.9).
    pub beta1: f64,
    /// Second-moment decay in [0, 1) (default 0.999).
    pub beta2: f64,
    /// Added to sqrt(v) (default 1e-8).
    pub epsilon: f64,
    /// Accepted for MXNet compatibility (it only changes sparse updates).
    pub lazy_update: bool,
}

impl Default for AdamOptions {
    fn default() -> Self {
        AdamOptions {
            beta1: 0.9,
            beta2: 0.999,
            epsilon: 1e-8,
            lazy_update: true,
        }
    }
}

/// Adamax hyperparameters (MXNet's `Adamax`; the learning rate defaults to 0.002).
#[derive(Clone, Debug, PartialEq)]
pub struct AdamaxOptions {
    /// First-moment decay in [0, 1) (default 0.9).
    pub beta1: f64,
    /// Infinity-norm decay in [0, 1) (default 0.999).
    pub beta2: f64,
}

impl Default for AdamaxOptions {
    fn default() -> Self {
        AdamaxOptions {
            beta1: 0.9,
            beta2: 0.999,
        }
    }
}

/// Nadam hyperparameters (MXNet's `Nadam`; the learning rate defaults to 0.001).
#[derive(Clone, Debug, PartialEq)]
pub struct NadamOptions {
    /// First-moment decay in [0, 1) (default 0.9).
    pub beta1: f64,
    /// Second-moment decay in [0, 1) (default 0.999).
    pub beta2: f64,
    /// Added to sqrt(v̂) (default 1e-8).
    pub epsilon: f64,
    /// Decay of the momentum schedule (default 0.004).
    pub schedule_decay: f64,
}

impl Default for NadamOptions {
    fn default() -> Self {
        NadamOptions {
            beta1: 0.9,
            beta2: 0.999,
            epsilon: 1e-8,
            schedule_decay: 0.004,
        }
    }
}

fn betas(name: &str, b1: f64, b2: f64) -> Result<()> {
    let what = format!("optimizer.{name}");
    check_range(&what, "beta1", b1, 0.0, Some(1.0))?;
    check_range(&what, "beta2", b2, 0.0, Some(1.0))
}

impl AdamOptions {
    pub(crate) fn validate(&self) -> Result<()> {
        betas("adam", self.beta1, self.beta2)?;
        check_range("optimizer.adam", "epsilon", self.epsilon, 0.0, None)
    }

    pub(crate) fn from_params(p: &mut Params) -> Result<Self> {
        let d = Self::default();
        Ok(AdamOptions {
            beta1: p.num("beta1", d.beta1)?,
            beta2: p.num("beta2", d.beta2)?,
            epsilon: p.num("epsilon", d.epsilon)?,
            lazy_update: p.flag("lazy_update", d.lazy_update)?,
        })
    }
}

impl AdamaxOptions {
    pub(crate) fn validate(&self) -> Result<()> {
        betas("adamax", self.beta1, self.beta2)
    }

    pub(crate) fn from_params(p: &mut Params) -> Result<Self> {
        let d = Self::default();
        Ok(AdamaxOptions {
            beta1: p.num("beta1", d.beta1)?,
            beta2: p.num("beta2", d.beta2)?,
        })
    }
}

impl NadamOptions {
    pub(crate) fn validate(&self) -> Result<()> {
        betas("nadam", self.beta1, self.beta2)?;
        check_range("optimizer.nadam", "epsilon", self.epsilon, 0.0, None)?;
        check_range(
            "optimizer.nadam",
            "schedule_decay",
            self.schedule_decay,
            0.0,
            None,
        )
    }

    pub(crate) fn from_params(p: &mut Params) -> Result<Self> {
        let d = Self::default();
        Ok(NadamOptions {
            beta1: p.num("beta1", d.beta1)?,
            beta2: p.num("beta2", d.beta2)?,
            epsilon: p.num("epsilon", d.epsilon)?,
            schedule_decay: p.num("schedule_decay", d.schedule_decay)?,
        })
    }
}

/// `g' = clip(r·g + wd·w)`, `m = β1·m + (1−β1)·g'`, `v = β2·v + (1−β2)·g'²`,
/// `w = w − lr_t·m/(sqrt(v) + ε)` with `lr_t = lr·sqrt(1 − β2^t)/(1 − β1^t)`: the bias
/// correction is folded into the rate, so ε meets the uncorrected sqrt(v), as in MXNet.
pub(crate) fn adam(
    o: &AdamOptions,
    s: &Step,
    w: &mut [f32],
    g: &[f32],
    st: &mut State,
) -> Result<()> {
    let t = s.t as f64;
    let lr_t = (s.lr * (1.0 - o.beta2.powf(t)).sqrt() / (1.0 - o.beta1.powf(t))) as f32;
    let (wd, r, c) = (s.wd as f32, s.rescale as f32, s.clip32());
    let (b1, b2, eps) = (o.beta1 as f32, o.beta2 as f32, o.epsilon as f32);
    each(w, g, state_n::<2>(st)?, move |w, g, [m, v]| {
        let gc = clip(g * r + *w * wd, c);
        *m = b1 * *m + (1.0 - b1) * gc;
        *v = b2 * *v + (1.0 - b2) * gc * gc;
        *w -= lr_t * *m / (v.sqrt() + eps);
    });
    Ok(())
}

/// `lr_t = lr/(1 − β1^t)`, `g' = clip(r·g + wd·w)`, `m = β1·m + (1−β1)·g'`,
/// `u = max(β2·u, |g'|)`, `w = w − lr_t·m/u` (no epsilon, as in MXNet).
pub(crate) fn adamax(
    o: &AdamaxOptions,
    s: &Step,
    w: &mut [f32],
    g: &[f32],
    st: &mut State,
) -> Result<()> {
    let lr_t = (s.lr / (1.0 - o.beta1.powf(s.t as f64))) as f32;
    let (wd, r, c) = (s.wd as f32, s.rescale as f32, s.clip32());
    let (b1, b2) = (o.beta1 as f32, o.beta2 as f32);
    each(w, g, state_n::<2>(st)?, move |w, g, [m, u]| {
        let gc = clip(g * r + wd * *w, c);
        *m = b1 * *m + (1.0 - b1) * gc;
        // mshadow's maximum is `a > b ? a : b` (a NaN gradient propagates, unlike f32::max).
        let (a, b) = (b2 * *u, gc.abs());
        *u = if a > b { a } else { b };
        *w -= lr_t * *m / *u;
    });
    Ok(())
}

/// Nesterov Adam with MXNet's momentum schedule: `μ_t = β1·(1 − 0.5·0.96^(t·decay))`,
/// `m_schedule *= μ_t` (one number per optimizer, shared by every index), and
/// `w = w − lr·m̄/(sqrt(v̂) + ε)` with `m̄ = (1−μ_t)·g'/(1 − m_schedule) +
/// μ_{t+1}·m/(1 − m_schedule·μ_{t+1})`, `v̂ = v/(1 − β2^t)`.
pub(crate) fn nadam(
    o: &NadamOptions,
    s: &Step,
    m_schedule: &mut f64,
    w: &mut [f32],
    g: &[f32],
    st: &mut State,
) -> Result<()> {
    let t = s.t as f64;
    let mu_t = o.beta1 * (1.0 - 0.5 * 0.96f64.powf(t * o.schedule_decay));
    let mu_t1 = o.beta1 * (1.0 - 0.5 * 0.96f64.powf((t + 1.0) * o.schedule_decay));
    *m_schedule *= mu_t;
    let m_schedule_next = *m_schedule * mu_t1;
    let (wd, r, c) = (s.wd as f32, s.rescale as f32, s.clip32());
    let (b1, b2, eps, lr) = (
        o.beta1 as f32,
        o.beta2 as f32,
        o.epsilon as f32,
        s.lr as f32,
    );
    let g_div = (1.0 - *m_schedule) as f32;
    let m_div = (1.0 - m_schedule_next) as f32;
    let v_div = (1.0 - o.beta2.powf(t)) as f32;
    let (k_g, k_m) = ((1.0 - mu_t) as f32, mu_t1 as f32);
    each(w, g, state_n::<2>(st)?, move |w, g, [m, v]| {
        let gc = clip(g * r + wd * *w, c);
        *m = b1 * *m + (1.0 - b1) * gc;
        *v = b2 * *v + (1.0 - b2) * gc * gc;
        let m_bar = k_g * (gc / g_div) + k_m * (*m / m_div);
        *w -= lr * m_bar / ((*v / v_div).sqrt() + eps);
    });
    Ok(())
}
