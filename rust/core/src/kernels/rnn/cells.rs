//! The gate math of one sample over one slice of hidden units, forward and backward. Every
//! argument is a slice of the same length (the units), gate by gate, so the loops vectorise;
//! the callers run them through [`super::RnnFloat::wide`] (AVX-512 for float32).

use super::{CellClip, RnnFloat};

/// Cuts each slice to `n` values (lets the compiler drop the bounds checks in the loops).
macro_rules! cut {
    ($n:expr; $($s:ident),*) => { $(let $s = &$s[..$n];)* };
    (mut $n:expr; $($s:ident),*) => { $(let $s = &mut $s[..$n];)* };
}

/// LSTM forward: `x` the gates' input parts (both biases included), `p` their recurrent
/// products; updates the cell `c`, writes the new state to `h` and `y`, and to `keep` (when
/// training) i, f, g, o and the unclipped cell.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(super) fn lstm_forward<T: RnnFloat>(
    x: [&[T]; 4],
    p: [&[T]; 4],
    c: &mut [T],
    h: &mut [T],
    y: &mut [T],
    keep: Option<[&mut [T]; 5]>,
    clip_to: Option<&CellClip>,
) {
    // One loop per case, each without a branch inside: a loop-invariant Option test left in
    // the body kept the compiler from vectorising it (scalar gate math took a fifth of a
    // batch-1 inference).
    match clip_to {
        None => lstm_forward_by(x, p, c, h, y, keep, NoClip),
        Some(k) => lstm_forward_by(x, p, c, h, y, keep, k),
    }
}

/// The cell clip of [`lstm_forward_by`] as a type rather than a closure: closures were not
/// inlined into the AVX-512 build of the loop, which then stayed scalar.
trait Clip<T> {
    fn clip(&self, v: T) -> T;
}

struct NoClip;

impl<T> Clip<T> for NoClip {
    #[inline(always)]
    fn clip(&self, v: T) -> T {
        v
    }
}

impl<T: RnnFloat> Clip<T> for &CellClip {
    #[inline(always)]
    fn clip(&self, v: T) -> T {
        self.apply(v)
    }
}

/// The four gate activations of unit `k` (a macro: see [`Clip`]).
macro_rules! lstm_gates {
    ($k:ident, $xi:ident, $xf:ident, $xg:ident, $xo:ident, $pi:ident, $pf:ident, $pg:ident, $po:ident) => {
        (
            ($xi[$k] + $pi[$k]).sigmoid(),
            ($xf[$k] + $pf[$k]).sigmoid(),
            ($xg[$k] + $pg[$k]).tanh_act(),
            ($xo[$k] + $po[$k]).sigmoid(),
        )
    };
}

#[inline(always)]
fn lstm_forward_by<T: RnnFloat>(
    x: [&[T]; 4],
    p: [&[T]; 4],
    c: &mut [T],
    h: &mut [T],
    y: &mut [T],
    keep: Option<[&mut [T]; 5]>,
    clip: impl Clip<T>,
) {
    let n = c.len();
    let ([xi, xf, xg, xo], [pi, pf, pg, po]) = (x, p);
    cut!(n; xi, xf, xg, xo, pi, pf, pg, po);
    cut!(mut n; h, y);
    match keep {
        Some([ki, kf, kg, ko, kc]) => {
            cut!(mut n; ki, kf, kg, ko, kc);
            for k in 0..n {
                let (i, f, g, o) = lstm_gates!(k, xi, xf, xg, xo, pi, pf, pg, po);
                let raw = f * c[k] + i * g;
                let cc = clip.clip(raw);
                c[k] = cc;
                h[k] = o * cc.tanh_act();
                y[k] = h[k];
                (ki[k], kf[k], kg[k], ko[k], kc[k]) = (i, f, g, o, raw);
            }
        }
        None => {
            for k in 0..n {
                let (i, f, g, o) = lstm_gates!(k, xi, xf, xg, xo, pi, pf, pg, po);
                let cc = clip.clip(f * c[k] + i * g);
                c[k] = cc;
                h[k] = o * cc.tanh_act();
                y[k] = h[k];
            }
        }
    }
}

/// GRU forward: `x` the input parts (r and z with both biases, n with its input bias), `p`
/// the recurrent products, `bn` the recurrent bias of n, `hp` the previous state; writes the
/// new state to `h` and `y`, and to `keep` r, z, n and Wh_n·h' + b_hn.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(super) fn gru_forward<T: RnnFloat>(
    x: [&[T]; 3],
    p: [&[T]; 3],
    bn: &[T],
    hp: &[T],
    h: &mut [T],
    y: &mut [T],
    keep: Option<[&mut [T]; 4]>,
) {
    let n = h.len();
    let ([xr, xz, xn], [pr, pz, pn]) = (x, p);
    cut!(n; xr, xz, xn, pr, pz, pn, bn, hp);
    cut!(mut n; y);
    let one = T::one();
    // The new state of unit k and what backward keeps (a macro: see [`Clip`]).
    macro_rules! state {
        ($k:ident) => {{
            let r = (xr[$k] + pr[$k]).sigmoid();
            let z = (xz[$k] + pz[$k]).sigmoid();
            let m = pn[$k] + bn[$k];
            let nn = (xn[$k] + r * m).tanh_act();
            ((one - z) * nn + z * hp[$k], r, z, nn, m)
        }};
    }
    match keep {
        Some([kr, kz, kn, km]) => {
            cut!(mut n; kr, kz, kn, km);
            for k in 0..n {
                let (v, r, z, nn, m) = state!(k);
                (h[k], y[k]) = (v, v);
                (kr[k], kz[k], kn[k], km[k]) = (r, z, nn, m);
            }
        }
        None => {
            for k in 0..n {
                let v = state!(k).0;
                (h[k], y[k]) = (v, v);
            }
        }
    }
}

/// ReLU / tanh RNN forward: h = act(x + p) (both biases in `x`).
#[inline(always)]
pub(super) fn plain_forward<T: RnnFloat>(x: &[T], p: &[T], relu: bool, h: &mut [T], y: &mut [T]) {
    let n = h.len();
    cut!(n; x, p);
    cut!(mut n; y);
    for k in 0..n {
        let v = x[k] + p[k];
        h[k] = if relu { v.max(T::zero()) } else { v.tanh_act() };
        y[k] = h[k];
    }
}

/// LSTM backward of one step: from the kept i, f, g, o and unclipped cell, the previous cell
/// `cp` (clipped with `clip_prev` when it is a kept unclipped value) and the gradients `dh`,
/// `dc` of this step's states, writes the gate pre-activation gradients to `g` and the
/// previous cell's gradient to `dc`.
#[inline(always)]
pub(super) fn lstm_backward<T: RnnFloat>(
    kept: [&[T]; 5],
    cp: &[T],
    clip_prev: bool,
    dh: &[T],
    dc: &mut [T],
    clip_to: Option<&CellClip>,
    g: [&mut [T]; 4],
) {
    let n = dc.len();
    let [ki, kf, kg, ko, kc] = kept;
    let [gi, gf, gg, go] = g;
    cut!(n; ki, kf, kg, ko, kc, cp, dh);
    cut!(mut n; gi, gf, gg, go);
    let one = T::one();
    // Without clipping: a loop without the clip's branches, which vectorises.
    let (clip_to, clip_prev) = match clip_to {
        Some(c) => (c, clip_prev),
        None => {
            for k in 0..n {
                let (i, f, gv, o) = (ki[k], kf[k], kg[k], ko[k]);
                let tc = kc[k].tanh_act();
                let d_c = dc[k] + dh[k] * o * (one - tc * tc);
                gi[k] = d_c * gv * i * (one - i);
                gf[k] = d_c * cp[k] * f * (one - f);
                gg[k] = d_c * i * (one - gv * gv);
                go[k] = dh[k] * tc * o * (one - o);
                dc[k] = d_c * f;
            }
            return;
        }
    };
    for k in 0..n {
        let (i, f, gv, o, raw) = (ki[k], kf[k], kg[k], ko[k], kc[k]);
        let tc = clip_to.apply(raw).tanh_act();
        let d_c = dc[k] + dh[k] * o * (one - tc * tc);
        // The clip passes no gradient where it bit.
        let d_raw = if clip_to.passes(raw) { d_c } else { T::zero() };
        gi[k] = d_raw * gv * i * (one - i);
        let cpk = if clip_prev {
            clip_to.apply(cp[k])
        } else {
            cp[k]
        };
        gf[k] = d_raw * cpk * f * (one - f);
        gg[k] = d_raw * i * (one - gv * gv);
        go[k] = dh[k] * tc * o * (one - o);
        dc[k] = d_raw * f;
    }
}

/// GRU backward of one step: gradients of the input part (`gx`) and the recurrent part
/// (`gh`) of the pre-activations, and `direct` = the part of the previous state's gradient
/// that bypasses the weights (z·dh).
#[inline(always)]
pub(super) fn gru_backward<T: RnnFloat>(
    kept: [&[T]; 4],
    hp: &[T],
    dh: &[T],
    gx: [&mut [T]; 3],
    gh: [&mut [T]; 3],
    direct: &mut [T],
) {
    let n = direct.len();
    let [kr, kz, kn, km] = kept;
    let ([xr, xz, xn], [hr, hz, hn]) = (gx, gh);
    cut!(n; kr, kz, kn, km, hp, dh);
    cut!(mut n; xr, xz, xn, hr, hz, hn);
    let one = T::one();
    for k in 0..n {
        let (r, z, nn, m) = (kr[k], kz[k], kn[k], km[k]);
        let dn = dh[k] * (one - z) * (one - nn * nn);
        let dr = dn * m * r * (one - r);
        let dz = dh[k] * (hp[k] - nn) * z * (one - z);
        (xr[k], xz[k], xn[k]) = (dr, dz, dn);
        (hr[k], hz[k], hn[k]) = (dr, dz, dn * r);
        direct[k] = dh[k] * z;
    }
}

/// ReLU / tanh RNN backward: the pre-activation gradient from the output `out` and `dh`.
#[inline(always)]
pub(super) fn plain_backward<T: RnnFloat>(out: &[T], dh: &[T], relu: bool, g: &mut [T]) {
    let n = g.len();
    cut!(n; out, dh);
    let (zero, one) = (T::zero(), T::one());
    for k in 0..n {
        let d = if relu {
            if out[k] > zero {
                one
            } else {
                zero
            }
        } else {
            one - out[k] * out[k]
        };
        g[k] = dh[k] * d;
    }
}
