//! Forward of the fused recurrent layers: per layer and direction one input-projection GEMM,
//! then per step one recurrent GEMM and the gate math.

use super::{clip, put_columns, step_time, CellClip, RnnConfig, RnnFloat, RnnInputs, RnnMode};
use crate::error::Result;
use crate::kernels::gemm::{gemm, MatRef};

/// What forward computes.
#[derive(Clone, Debug, PartialEq)]
pub struct RnnOutputs<T> {
    /// The last layer's outputs (seq, batch, dirs·hidden); zeros past a sample's length.
    pub y: Vec<T>,
    /// Final hidden states (layers·dirs, batch, hidden).
    pub hy: Vec<T>,
    /// Final cell states (LSTM; empty otherwise).
    pub cy: Vec<T>,
    /// What backward needs ([`super::RnnDims::reserve_len`]); empty unless kept.
    pub reserve: Vec<T>,
}

/// One direction of one layer.
pub(super) struct Layer<'a, T> {
    /// The layer's input (seq·batch, in).
    pub x: &'a [T],
    /// Its width.
    pub in_w: usize,
    /// W_i2h (gates·H, in), W_h2h (gates·H, H), b_i2h, b_h2h.
    pub wx: &'a [T],
    pub wh: &'a [T],
    pub bx: &'a [T],
    pub bh: &'a [T],
    /// Initial states (batch, H).
    pub h0: &'a [T],
    pub c0: Option<&'a [T]>,
    /// Each sample's length.
    pub lens: &'a [usize],
    pub reverse: bool,
}

impl<'a, T: RnnFloat> Layer<'a, T> {
    /// Direction `d` of layer `l` reading `x`.
    pub(super) fn new(
        cfg: &RnnConfig,
        inp: &RnnInputs<'a, T>,
        x: &'a [T],
        l: usize,
        d: usize,
    ) -> Self {
        let dm = &cfg.dims;
        let (gw, h, in_w) = (dm.gate_width(), dm.hidden, dm.layer_input(l));
        let (wx, wh) = dm.weights(l, d);
        let (bx, bh) = dm.biases(l, d);
        let s = (l * dm.dirs + d) * dm.batch * h;
        let p = inp.params;
        Layer {
            x,
            in_w,
            wx: &p[wx..wx + gw * in_w],
            wh: &p[wh..wh + gw * h],
            bx: &p[bx..bx + gw],
            bh: &p[bh..bh + gw],
            h0: &inp.h0[s..s + dm.batch * h],
            c0: inp.c0.map(|c| &c[s..s + dm.batch * h]),
            lens: inp.lens,
            reverse: d == 1,
        }
    }
}

/// Runs every layer. `masks` (with dropout, in training): per layer but the last, the
/// multiplier (0 or 1/(1 − p)) of each of its outputs as the next layer reads them. `keep`:
/// fill the reserve for backward.
pub fn rnn_forward<T: RnnFloat>(
    cfg: &RnnConfig,
    inp: &RnnInputs<T>,
    masks: Option<&[T]>,
    keep: bool,
) -> Result<RnnOutputs<T>> {
    let dm = cfg.dims;
    dm.check_sizes()?;
    inp.check(&dm)?;
    let (nd, lo) = (dm.dirs, dm.layer_out_len());
    if let Some(m) = masks {
        if m.len() != dm.layers.saturating_sub(1) * lo {
            return Err(crate::error::Error::Msg(
                "internal: RNN dropout masks of the wrong length".into(),
            ));
        }
    }
    let lstm = dm.mode == RnnMode::Lstm;
    let state = dm.batch * dm.hidden;
    let mut reserve = if keep {
        vec![T::zero(); dm.reserve_len(masks.is_some())]
    } else {
        Vec::new()
    };
    let mut hy = vec![T::zero(); dm.state_len()];
    let mut cy = if lstm {
        vec![T::zero(); dm.state_len()]
    } else {
        Vec::new()
    };
    let mut input: Vec<T> = Vec::new();
    let mut y = Vec::new();
    for l in 0..dm.layers {
        let x = if l == 0 { inp.x } else { &input[..] };
        let cl = dm.cache_len();
        let (c_a, c_b): (&mut [T], &mut [T]) = if keep {
            let at = dm.cache_offset(l, 0);
            reserve[at..at + nd * cl].split_at_mut(cl)
        } else {
            (&mut [], &mut [])
        };
        let at = l * nd * state;
        let (hy_a, hy_b) = hy[at..at + nd * state].split_at_mut(state);
        let (cy_a, cy_b) = if lstm {
            cy[at..at + nd * state].split_at_mut(state)
        } else {
            (&mut [][..], &mut [][..])
        };
        let fwd = Layer::new(cfg, inp, x, l, 0);
        let out = if nd == 1 {
            layer_forward(cfg, &fwd, keep.then_some(&mut c_a[..]), hy_a, cy_a)?
        } else {
            let bwd = Layer::new(cfg, inp, x, l, 1);
            // The two directions only share their input: run them side by side.
            let (a, b) = rayon::join(
                || layer_forward(cfg, &fwd, keep.then_some(&mut c_a[..]), hy_a, cy_a),
                || layer_forward(cfg, &bwd, keep.then_some(&mut c_b[..]), hy_b, cy_b),
            );
            let (a, b) = (a?, b?);
            let mut out = vec![T::zero(); lo];
            put_columns(&mut out, dm.out_width(), 0, dm.hidden, &a);
            put_columns(&mut out, dm.out_width(), 1, dm.hidden, &b);
            out
        };
        if l + 1 == dm.layers {
            y = out;
            break;
        }
        if keep {
            let at = dm.ys_offset(l);
            reserve[at..at + lo].copy_from_slice(&out);
        }
        input = match masks {
            Some(m) => {
                let m = &m[l * lo..(l + 1) * lo];
                if keep {
                    let at = dm.mask_offset(l);
                    reserve[at..at + lo].copy_from_slice(m);
                }
                out.iter().zip(m).map(|(&v, &k)| v * k).collect()
            }
            None => out,
        };
    }
    Ok(RnnOutputs { y, hy, cy, reserve })
}

/// One direction of one layer: returns its outputs (seq, batch, H), writes its final states
/// and (when given) its cache for backward.
pub(super) fn layer_forward<T: RnnFloat>(
    cfg: &RnnConfig,
    a: &Layer<T>,
    mut cache: Option<&mut [T]>,
    hy: &mut [T],
    cy: &mut [T],
) -> Result<Vec<T>> {
    let dm = &cfg.dims;
    let (steps, n, h, gw) = (dm.seq, dm.batch, dm.hidden, dm.gate_width());
    let cw = dm.mode.cache_width(h);
    // The input projection of every step at once, with the input bias folded in.
    let mut xw = vec![T::zero(); steps * n * gw];
    gemm(
        MatRef::row_major(a.x, steps * n, a.in_w),
        MatRef::row_major(a.wx, gw, a.in_w).t(),
        &mut xw,
        false,
    )?;
    for row in xw.chunks_exact_mut(gw) {
        row.iter_mut().zip(a.bx).for_each(|(v, &b)| *v = *v + b);
    }
    let mut hs = a.h0.to_vec();
    let mut cs = a.c0.map(<[T]>::to_vec).unwrap_or_default();
    let mut hw = vec![T::zero(); n * gw];
    let mut y = vec![T::zero(); steps * n * h];
    let wh = MatRef::row_major(a.wh, gw, h).t();
    let max_len = a.lens.iter().copied().max().unwrap_or(0);
    for i in 0..max_len {
        gemm(MatRef::row_major(&hs, n, h), wh, &mut hw, false)?;
        for s in 0..n {
            let Some(t) = step_time(a.reverse, i, a.lens[s]) else {
                continue;
            };
            let row = t * n + s;
            let px = &xw[row * gw..(row + 1) * gw];
            let ph = &mut hw[s * gw..(s + 1) * gw];
            if dm.mode == RnnMode::Lstm {
                // LSTM gates add everything up front: the sums go in place of the product.
                for ((p, &x), &b) in ph.iter_mut().zip(px).zip(a.bh) {
                    *p = *p + x + b;
                }
            }
            let cell = Cell {
                px,
                ph,
                bh: a.bh,
                h,
            };
            let hrow = &mut hs[s * h..(s + 1) * h];
            let keep = cache
                .as_deref_mut()
                .map(|c| &mut c[row * cw..(row + 1) * cw]);
            match dm.mode {
                RnnMode::Lstm => {
                    cell.lstm(hrow, &mut cs[s * h..(s + 1) * h], cfg.clip.as_ref(), keep)
                }
                RnnMode::Gru => cell.gru(hrow, keep),
                RnnMode::RnnRelu => cell.plain(hrow, |v| v.max(T::zero())),
                RnnMode::RnnTanh => cell.plain(hrow, T::tanh_act),
            }
            y[row * h..(row + 1) * h].copy_from_slice(hrow);
        }
    }
    hy.copy_from_slice(&hs);
    if dm.mode == RnnMode::Lstm {
        cy.copy_from_slice(&cs);
    }
    Ok(y)
}

/// The gate math of one sample at one step: `px` the input projection (input bias included),
/// `ph` the recurrent product, each gates·H wide (for LSTM, `ph` holds the whole
/// pre-activations).
struct Cell<'a, T> {
    px: &'a [T],
    ph: &'a [T],
    bh: &'a [T],
    h: usize,
}

impl<T: RnnFloat> Cell<'_, T> {
    /// Updates `hs` and `cs` in place; `keep` receives i, f, g, o and the unclipped cell.
    fn lstm(&self, hs: &mut [T], cs: &mut [T], clip_to: Option<&CellClip>, keep: Option<&mut [T]>) {
        let h = self.h;
        // Each gate's pre-activation (`ph` holds them, see `layer_forward`); per-gate slices
        // of exactly h values let the loops below vectorise.
        let (gi, rest) = self.ph[..4 * h].split_at(h);
        let (gf, rest) = rest.split_at(h);
        let (gg, go) = rest.split_at(h);
        let (hs, cs) = (&mut hs[..h], &mut cs[..h]);
        match keep {
            Some(kp) => {
                let (ki, rest) = kp.split_at_mut(h);
                let (kf, rest) = rest.split_at_mut(h);
                let (kg, rest) = rest.split_at_mut(h);
                let (ko, kc) = rest.split_at_mut(h);
                for k in 0..h {
                    let (i, f, g, o) = (
                        gi[k].sigmoid(),
                        gf[k].sigmoid(),
                        gg[k].tanh_act(),
                        go[k].sigmoid(),
                    );
                    let raw = f * cs[k] + i * g;
                    let c = clip(clip_to, raw);
                    cs[k] = c;
                    hs[k] = o * c.tanh_act();
                    (ki[k], kf[k], kg[k], ko[k], kc[k]) = (i, f, g, o, raw);
                }
            }
            None => {
                for k in 0..h {
                    let (i, f, g, o) = (
                        gi[k].sigmoid(),
                        gf[k].sigmoid(),
                        gg[k].tanh_act(),
                        go[k].sigmoid(),
                    );
                    let c = clip(clip_to, f * cs[k] + i * g);
                    cs[k] = c;
                    hs[k] = o * c.tanh_act();
                }
            }
        }
    }

    /// Updates `hs` in place; `keep` receives r, z, n and Wh_n·h' + b_hn.
    fn gru(&self, hs: &mut [T], keep: Option<&mut [T]>) {
        let h = self.h;
        let one = T::one();
        let mut keep = keep;
        for k in 0..h {
            let r = (self.px[k] + self.ph[k] + self.bh[k]).sigmoid();
            let z = (self.px[h + k] + self.ph[h + k] + self.bh[h + k]).sigmoid();
            let m = self.ph[2 * h + k] + self.bh[2 * h + k];
            let n = (self.px[2 * h + k] + r * m).tanh_act();
            hs[k] = (one - z) * n + z * hs[k];
            if let Some(kp) = keep.as_deref_mut() {
                kp[k] = r;
                kp[h + k] = z;
                kp[2 * h + k] = n;
                kp[3 * h + k] = m;
            }
        }
    }

    /// A single-gate cell with activation `act`.
    fn plain(&self, hs: &mut [T], act: impl Fn(T) -> T) {
        for (k, v) in hs.iter_mut().enumerate() {
            *v = act(self.px[k] + self.ph[k] + self.bh[k]);
        }
    }
}
