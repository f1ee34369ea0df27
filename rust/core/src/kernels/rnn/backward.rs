//! Backward of the fused recurrent layers (backpropagation through time): per layer and
//! direction, one GEMM per step for the state gradient, then one GEMM each for the input
//! gradient and the two weight gradients over all steps at once.

use super::forward::Layer;
use super::{clip, prev_time, step_time, take_columns, RnnConfig, RnnFloat, RnnInputs, RnnMode};
use crate::error::{Error, Result};
use crate::kernels::gemm::{gemm, MatRef};

/// The gradients of one call.
#[derive(Clone, Debug, PartialEq)]
pub struct RnnGrads<T> {
    /// Of the data (seq, batch, input); empty when not asked for.
    pub dx: Vec<T>,
    /// Of the flat parameter vector.
    pub dparams: Vec<T>,
    /// Of the initial hidden states.
    pub dh0: Vec<T>,
    /// Of the initial cell states (LSTM; empty otherwise).
    pub dc0: Vec<T>,
}

/// Gradients of one direction of one layer.
struct LayerGrads<T> {
    dx: Vec<T>,
    dwx: Vec<T>,
    dwh: Vec<T>,
    dbx: Vec<T>,
    dbh: Vec<T>,
    dh0: Vec<T>,
    dc0: Vec<T>,
}

/// Backward of [`super::rnn_forward`]: `y` its output, `reserve` what it kept (with
/// `dropout` when it was given masks), `dy` the output gradient, `dhy` / `dcy` those of the
/// final states when they are outputs. `want_dx`: compute the data gradient.
#[allow(clippy::too_many_arguments)]
pub fn rnn_backward<T: RnnFloat>(
    cfg: &RnnConfig,
    inp: &RnnInputs<T>,
    y: &[T],
    reserve: &[T],
    dropout: bool,
    dy: &[T],
    dhy: Option<&[T]>,
    dcy: Option<&[T]>,
    want_dx: bool,
) -> Result<RnnGrads<T>> {
    let dm = cfg.dims;
    dm.check_sizes()?;
    inp.check(&dm)?;
    let lo = dm.layer_out_len();
    let lstm = dm.mode == RnnMode::Lstm;
    let sizes_ok = y.len() == lo
        && dy.len() == lo
        && reserve.len() == dm.reserve_len(dropout)
        && dhy.is_none_or(|g| g.len() == dm.state_len())
        && dcy.is_none_or(|g| g.len() == dm.state_len());
    if !sizes_ok {
        return Err(Error::Msg(
            "internal: RNN backward got arrays of the wrong sizes".into(),
        ));
    }
    let (nd, h, state) = (dm.dirs, dm.hidden, dm.batch * dm.hidden);
    let mut dparams = vec![T::zero(); dm.param_len()];
    let mut dh0 = vec![T::zero(); dm.state_len()];
    let mut dc0 = if lstm {
        vec![T::zero(); dm.state_len()]
    } else {
        Vec::new()
    };
    let mask = |l: usize| &reserve[dm.mask_offset(l)..dm.mask_offset(l) + lo];
    let ys = |l: usize| &reserve[dm.ys_offset(l)..dm.ys_offset(l) + lo];
    let mut dout = dy.to_vec();
    let mut dx = Vec::new();
    for l in (0..dm.layers).rev() {
        let x: Vec<T>;
        let xs: &[T] = if l == 0 {
            inp.x
        } else if dropout {
            x = ys(l - 1)
                .iter()
                .zip(mask(l - 1))
                .map(|(&v, &k)| v * k)
                .collect();
            &x
        } else {
            ys(l - 1)
        };
        let y_l = if l + 1 == dm.layers { y } else { ys(l) };
        let need_dx = l > 0 || want_dx;
        let run = |d: usize| -> Result<LayerGrads<T>> {
            let layer = Layer::new(cfg, inp, xs, l, d);
            let at = dm.cache_offset(l, d);
            let cache = &reserve[at..at + dm.cache_len()];
            let s = (l * nd + d) * state;
            let (yd, dyd);
            let (yd, dyd) = if nd == 1 {
                (y_l, &dout[..])
            } else {
                yd = take_columns(y_l, dm.out_width(), d, h);
                dyd = take_columns(&dout, dm.out_width(), d, h);
                (&yd[..], &dyd[..])
            };
            let dhy_d = dhy.map(|g| &g[s..s + state]);
            let dcy_d = dcy.map(|g| &g[s..s + state]);
            layer_backward(cfg, &layer, cache, yd, dyd, dhy_d, dcy_d, need_dx)
        };
        let grads = if nd == 1 {
            vec![run(0)?]
        } else {
            let (a, b) = rayon::join(|| run(0), || run(1));
            vec![a?, b?]
        };
        let mut next = Vec::new();
        for (d, g) in grads.into_iter().enumerate() {
            let (wx, wh) = dm.weights(l, d);
            let (bx, bh) = dm.biases(l, d);
            dparams[wx..wx + g.dwx.len()].copy_from_slice(&g.dwx);
            dparams[wh..wh + g.dwh.len()].copy_from_slice(&g.dwh);
            dparams[bx..bx + g.dbx.len()].copy_from_slice(&g.dbx);
            dparams[bh..bh + g.dbh.len()].copy_from_slice(&g.dbh);
            let s = (l * nd + d) * state;
            dh0[s..s + state].copy_from_slice(&g.dh0);
            if lstm {
                dc0[s..s + state].copy_from_slice(&g.dc0);
            }
            if next.is_empty() {
                next = g.dx;
            } else {
                next.iter_mut().zip(&g.dx).for_each(|(a, &b)| *a = *a + b);
            }
        }
        if l == 0 {
            dx = next;
        } else {
            if dropout {
                next.iter_mut()
                    .zip(mask(l - 1))
                    .for_each(|(g, &k)| *g = *g * k);
            }
            dout = next;
        }
    }
    Ok(RnnGrads {
        dx,
        dparams,
        dh0,
        dc0,
    })
}

/// One direction of one layer: `cache` what its forward kept, `y` its outputs and `dy` their
/// gradient (seq, batch, H).
#[allow(clippy::too_many_arguments)]
fn layer_backward<T: RnnFloat>(
    cfg: &RnnConfig,
    a: &Layer<T>,
    cache: &[T],
    y: &[T],
    dy: &[T],
    dhy: Option<&[T]>,
    dcy: Option<&[T]>,
    want_dx: bool,
) -> Result<LayerGrads<T>> {
    let dm = &cfg.dims;
    let (steps, n, h, gw) = (dm.seq, dm.batch, dm.hidden, dm.gate_width());
    let cw = dm.mode.cache_width(h);
    let gru = dm.mode == RnnMode::Gru;
    let zero = T::zero();
    // Gradients of the gates' pre-activations at every (step, sample): the input part, and
    // for GRU separately the recurrent part (its n gate sees r·(Wh_n·h' + b_hn)).
    let mut dgx = vec![zero; steps * n * gw];
    let mut dgh_gru = if gru {
        vec![zero; steps * n * gw]
    } else {
        Vec::new()
    };
    // The state each step read, for the recurrent weight gradient.
    let mut hprev = vec![zero; steps * n * h];
    let mut dh = dhy.map_or_else(|| vec![zero; n * h], <[T]>::to_vec);
    let mut dc = match (dm.mode, dcy) {
        (RnnMode::Lstm, Some(g)) => g.to_vec(),
        (RnnMode::Lstm, None) => vec![zero; n * h],
        _ => Vec::new(),
    };
    let mut dstep = vec![zero; n * gw];
    let mut direct = vec![zero; if gru { n * h } else { 0 }];
    let mut dhp = vec![zero; n * h];
    let no_cell = vec![zero; h];
    let max_len = a.lens.iter().copied().max().unwrap_or(0);
    for i in (0..max_len).rev() {
        dstep.iter_mut().for_each(|v| *v = zero);
        for s in 0..n {
            let len = a.lens[s];
            let Some(t) = step_time(a.reverse, i, len) else {
                continue;
            };
            let row = t * n + s;
            let dhs = &mut dh[s * h..(s + 1) * h];
            dhs.iter_mut()
                .zip(&dy[row * h..(row + 1) * h])
                .for_each(|(g, &v)| *g = *g + v);
            let tp = prev_time(a.reverse, t, len);
            let hp = match tp {
                Some(tp) => &y[(tp * n + s) * h..(tp * n + s + 1) * h],
                None => &a.h0[s * h..(s + 1) * h],
            };
            hprev[row * h..(row + 1) * h].copy_from_slice(hp);
            let kept = &cache[row * cw..(row + 1) * cw];
            let gx = &mut dgx[row * gw..(row + 1) * gw];
            let gh = &mut dstep[s * gw..(s + 1) * gw];
            match dm.mode {
                RnnMode::Lstm => {
                    // The previous cell: kept unclipped by the previous step, or given.
                    let (cprev, kept_raw) = match (tp, a.c0) {
                        (Some(tp), _) => {
                            let at = (tp * n + s) * cw + 4 * h;
                            (&cache[at..at + h], true)
                        }
                        (None, Some(c)) => (&c[s * h..(s + 1) * h], false),
                        (None, None) => (&no_cell[..], false),
                    };
                    let prev = |k: usize| {
                        if kept_raw {
                            clip(cfg.clip.as_ref(), cprev[k])
                        } else {
                            cprev[k]
                        }
                    };
                    let dcs = &mut dc[s * h..(s + 1) * h];
                    lstm_step(kept, prev, dhs, dcs, cfg.clip.as_ref(), gx);
                    gh.copy_from_slice(gx);
                }
                RnnMode::Gru => {
                    let dir = &mut direct[s * h..(s + 1) * h];
                    gru_step(kept, hp, dhs, gx, gh, dir);
                    dgh_gru[row * gw..(row + 1) * gw].copy_from_slice(gh);
                }
                RnnMode::RnnRelu | RnnMode::RnnTanh => {
                    let out = &y[row * h..(row + 1) * h];
                    let relu = dm.mode == RnnMode::RnnRelu;
                    for k in 0..h {
                        let d = if relu {
                            if out[k] > zero {
                                T::one()
                            } else {
                                zero
                            }
                        } else {
                            T::one() - out[k] * out[k]
                        };
                        gx[k] = dhs[k] * d;
                    }
                    gh.copy_from_slice(gx);
                }
            }
        }
        // The state gradient of the previous step, all gates and samples in one product.
        gemm(
            MatRef::row_major(&dstep, n, gw),
            MatRef::row_major(a.wh, gw, h),
            &mut dhp,
            false,
        )?;
        for s in 0..n {
            if step_time(a.reverse, i, a.lens[s]).is_none() {
                continue; // a finished sample's state did not change: its gradient stays
            }
            for k in s * h..(s + 1) * h {
                dh[k] = dhp[k] + if gru { direct[k] } else { zero };
            }
        }
    }
    let dgh = if gru { &dgh_gru } else { &dgx };
    let rows = steps * n;
    let mut dwx = vec![zero; gw * a.in_w];
    gemm(
        MatRef::row_major(&dgx, rows, gw).t(),
        MatRef::row_major(a.x, rows, a.in_w),
        &mut dwx,
        false,
    )?;
    let mut dwh = vec![zero; gw * h];
    gemm(
        MatRef::row_major(dgh, rows, gw).t(),
        MatRef::row_major(&hprev, rows, h),
        &mut dwh,
        false,
    )?;
    let col_sums = |g: &[T]| {
        let mut s = vec![zero; gw];
        for r in g.chunks_exact(gw) {
            s.iter_mut().zip(r).for_each(|(a, &b)| *a = *a + b);
        }
        s
    };
    let mut dx = Vec::new();
    if want_dx {
        dx = vec![zero; rows * a.in_w];
        gemm(
            MatRef::row_major(&dgx, rows, gw),
            MatRef::row_major(a.wx, gw, a.in_w),
            &mut dx,
            false,
        )?;
    }
    Ok(LayerGrads {
        dx,
        dbx: col_sums(&dgx),
        dbh: col_sums(dgh),
        dwx,
        dwh,
        dh0: dh,
        dc0: dc,
    })
}

/// One LSTM step of one sample: from the kept gates and unclipped cell, the previous
/// (clipped) cell `cprev` and the gradients `dh`, `dc` of this step's states, writes the
/// gate pre-activation gradients to `g` and the previous cell's gradient to `dc`.
fn lstm_step<T: RnnFloat>(
    kept: &[T],
    cprev: impl Fn(usize) -> T,
    dh: &[T],
    dc: &mut [T],
    clip_to: Option<&super::CellClip>,
    g: &mut [T],
) {
    let h = dh.len();
    let one = T::one();
    for k in 0..h {
        let (i, f, gg, o, raw) = (
            kept[k],
            kept[h + k],
            kept[2 * h + k],
            kept[3 * h + k],
            kept[4 * h + k],
        );
        let tc = clip(clip_to, raw).tanh_act();
        let d_c = dc[k] + dh[k] * o * (one - tc * tc);
        // The clip passes no gradient where it bit.
        let d_raw = if clip_to.is_none_or(|c| c.passes(raw)) {
            d_c
        } else {
            T::zero()
        };
        g[k] = d_raw * gg * i * (one - i);
        g[h + k] = d_raw * cprev(k) * f * (one - f);
        g[2 * h + k] = d_raw * i * (one - gg * gg);
        g[3 * h + k] = dh[k] * tc * o * (one - o);
        dc[k] = d_raw * f;
    }
}

/// One GRU step of one sample: gradients of the input part (`gx`) and the recurrent part
/// (`gh`) of the pre-activations, and `direct` = the part of the previous state's gradient
/// that bypasses the weights (z·dh).
fn gru_step<T: RnnFloat>(
    kept: &[T],
    hp: &[T],
    dh: &[T],
    gx: &mut [T],
    gh: &mut [T],
    direct: &mut [T],
) {
    let h = hp.len();
    let one = T::one();
    for k in 0..h {
        let (r, z, nn, m) = (kept[k], kept[h + k], kept[2 * h + k], kept[3 * h + k]);
        let dn = dh[k] * (one - z) * (one - nn * nn);
        let dr = dn * m * r * (one - r);
        let dz = dh[k] * (hp[k] - nn) * z * (one - z);
        gx[k] = dr;
        gx[h + k] = dz;
        gx[2 * h + k] = dn;
        gh[k] = dr;
        gh[h + k] = dz;
        gh[2 * h + k] = dn * r;
        direct[k] = dh[k] * z;
    }
}
