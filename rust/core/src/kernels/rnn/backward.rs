//! Backward of the fused recurrent layers (backpropagation through time): per layer and
//! direction, one product per step for the state gradient (the hidden units cut among
//! threads), then one GEMM each for the input gradient and the two weight gradients over all
//! steps at once.

use super::forward::Layer;
use super::panel::Panels;
use super::{cells, prev_time, step_time, take_columns, RnnConfig, RnnFloat, RnnInputs, RnnMode};
use super::{Slices, Wide};
use crate::error::{Error, Result};
use crate::kernels::gemm::{gemm, MatRef};
use crate::kernels::par::{self, lockstep, on_pool, Shared};

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
    let run = || backward_layers(cfg, inp, y, reserve, dropout, dy, dhy, dcy, want_dx);
    if cfg.dims.threaded() {
        // One hand-over into the pool (see `rnn_forward`).
        on_pool(run)
    } else {
        run()
    }
}

#[allow(clippy::too_many_arguments)]
fn backward_layers<T: RnnFloat>(
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
    let gru = dm.mode == RnnMode::Gru;
    let zero = T::zero();
    // Gradients of the gates' pre-activations at every (step, sample): the input part, and
    // for GRU separately the recurrent part (its n gate sees r·(Wh_n·h' + b_hn)).
    let mut dgx = par::filled(steps * n * gw, zero);
    let mut dgh_gru = vec![zero; if gru { steps * n * gw } else { 0 }];
    // The state each step read, for the recurrent weight gradient.
    let mut hprev = par::filled(steps * n * h, zero);
    let mut dh = dhy.map_or_else(|| vec![zero; n * h], <[T]>::to_vec);
    let mut dc = match (dm.mode, dcy) {
        (RnnMode::Lstm, Some(g)) => g.to_vec(),
        (RnnMode::Lstm, None) => vec![zero; n * h],
        _ => Vec::new(),
    };
    let mut direct = vec![zero; if gru { n * h } else { 0 }];
    // With equal lengths a step's gradients are consecutive rows of dgx (dgh), the left
    // operand of its product; otherwise they are gathered by step parity, finished samples
    // as zero rows.
    let ragged = a.lens.iter().any(|&l| l != a.lens[0]);
    let mut gathered = vec![zero; if ragged { 2 * n * gw } else { 0 }];
    // Each slice's columns of W_h2h (all gates' rows).
    let slices = Slices::new(h, n, h, dm.mode.gates());
    let panels: Vec<Panels<T>> = slices
        .ranges
        .iter()
        .map(|&(u0, u1)| Panels::from_rows(gw, u1 - u0, |r| &a.wh[r * h + u0..r * h + u1]))
        .collect();
    let widest = panels.iter().map(Panels::width).max().unwrap_or(0);
    let mut products = vec![zero; slices.ranges.len() * n * widest];
    let no_cell = vec![zero; h];
    let max_len = a.lens.iter().copied().max().unwrap_or(0);
    let step = Step {
        cfg,
        a,
        cache,
        y,
        dy,
        no_cell: &no_cell,
        slices: &slices,
        panels: &panels,
        widest,
        ragged,
        dgx: Shared::new(&mut dgx),
        dgh: Shared::new(&mut dgh_gru),
        hprev: Shared::new(&mut hprev),
        dh: Shared::new(&mut dh),
        dc: Shared::new(&mut dc),
        direct: Shared::new(&mut direct),
        gathered: Shared::new(&mut gathered),
        products: Shared::new(&mut products),
    };
    // Set j: the product of iteration max_len − j (j ≥ 1), then the gate gradients of the
    // iteration before it, whose units need only this slice's product.
    lockstep(max_len + 1, slices.ranges.len(), slices.workers, |j, p| {
        if j > 0 {
            step.product(max_len - j, p);
        }
        if j < max_len {
            T::wide(Gates {
                s: &step,
                i: max_len - 1 - j,
                units: slices.ranges[p],
            });
        }
    });
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
        dx = par::filled(rows * a.in_w, zero);
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

/// What the steps of one layer's backward share (see [`layer_backward`]).
struct Step<'a, T> {
    cfg: &'a RnnConfig,
    a: &'a Layer<'a, T>,
    cache: &'a [T],
    y: &'a [T],
    dy: &'a [T],
    no_cell: &'a [T],
    slices: &'a Slices,
    panels: &'a [Panels<T>],
    widest: usize,
    ragged: bool,
    dgx: Shared<'a, T>,
    dgh: Shared<'a, T>,
    hprev: Shared<'a, T>,
    dh: Shared<'a, T>,
    dc: Shared<'a, T>,
    direct: Shared<'a, T>,
    gathered: Shared<'a, T>,
    products: Shared<'a, T>,
}

// SAFETY (every access to the shared buffers below): `lockstep` runs set j only after set
// j − 1 has finished. The gate gradients of iteration i (set max_len − 1 − i) write this
// slice's units of dh, dc, direct, hprev and of the rows of dgx / dgh / gathered that
// belong to iteration i; the product of iteration i (the next set) reads those rows whole,
// writes its own product buffer and this slice's units of dh. `gathered` alternates by
// parity, so a product never reads the half the gate gradients of the next iteration write.
impl<T: RnnFloat> Step<'_, T> {
    /// The state gradient of iteration `i`'s inputs, units of slice `p`: the step's gate
    /// gradients times this slice's columns of W_h2h.
    fn product(&self, i: usize, p: usize) {
        let dm = &self.cfg.dims;
        let (n, h, gw) = (dm.batch, dm.hidden, dm.gate_width());
        let b = &self.panels[p];
        let grads = if dm.mode == RnnMode::Gru {
            &self.dgh
        } else {
            &self.dgx
        };
        let rows = match self.ragged {
            true => unsafe { self.gathered.get(i % 2 * n * gw, n * gw) },
            false => {
                let t = step_time(self.a.reverse, i, self.a.lens[0]).unwrap_or(0);
                unsafe { grads.get(t * n * gw, n * gw) }
            }
        };
        let product = unsafe { self.products.get_mut(p * n * self.widest, n * b.width()) };
        T::panel_product(rows, gw, n, b, product);
        let (u0, u1) = self.slices.ranges[p];
        let w = b.width();
        for s in 0..n {
            if step_time(self.a.reverse, i, self.a.lens[s]).is_none() {
                continue; // a finished sample's state did not change: its gradient stays
            }
            let dh = unsafe { self.dh.get_mut(s * h + u0, u1 - u0) };
            dh.copy_from_slice(&product[s * w..s * w + u1 - u0]);
            if dm.mode == RnnMode::Gru {
                let direct = unsafe { self.direct.get(s * h + u0, u1 - u0) };
                dh.iter_mut().zip(direct).for_each(|(g, &d)| *g = *g + d);
            }
        }
    }
}

/// The gate gradients of one slice at one iteration, for every sample.
struct Gates<'s, 'a, T> {
    s: &'s Step<'a, T>,
    i: usize,
    units: (usize, usize),
}

impl<T: RnnFloat> Wide for Gates<'_, '_, T> {
    #[inline(always)]
    fn run(self) {
        let st = self.s;
        let (a, dm) = (st.a, &st.cfg.dims);
        let (n, h, gw) = (dm.batch, dm.hidden, dm.gate_width());
        let cw = dm.mode.cache_width(h);
        let (u0, u1) = self.units;
        let uc = u1 - u0;
        let half = self.i % 2 * n * gw;
        for s in 0..n {
            let len = a.lens[s];
            let Some(t) = step_time(a.reverse, self.i, len) else {
                if st.ragged {
                    for g in 0..dm.mode.gates() {
                        let at = half + s * gw + g * h + u0;
                        unsafe { st.gathered.get_mut(at, uc) }.fill(T::zero());
                    }
                }
                continue;
            };
            let row = t * n + s;
            let dh = unsafe { st.dh.get_mut(s * h + u0, uc) };
            dh.iter_mut()
                .zip(&st.dy[row * h + u0..row * h + u1])
                .for_each(|(g, &v)| *g = *g + v);
            let dh: &[T] = dh;
            let tp = prev_time(a.reverse, t, len);
            let hp = match tp {
                Some(tp) => &st.y[(tp * n + s) * h + u0..][..uc],
                None => &a.h0[s * h + u0..s * h + u1],
            };
            unsafe { st.hprev.get_mut(row * h + u0, uc) }.copy_from_slice(hp);
            let kept = |g: usize| &st.cache[row * cw + g * h + u0..][..uc];
            let gx = |g: usize| unsafe { st.dgx.get_mut(row * gw + g * h + u0, uc) };
            match dm.mode {
                RnnMode::Lstm => {
                    // The previous cell: kept unclipped by the previous step, or given.
                    let (cp, clip_prev) = match (tp, a.c0) {
                        (Some(tp), _) => (&st.cache[(tp * n + s) * cw + 4 * h + u0..][..uc], true),
                        (None, Some(c)) => (&c[s * h + u0..s * h + u1], false),
                        (None, None) => (&st.no_cell[..uc], false),
                    };
                    let dc = unsafe { st.dc.get_mut(s * h + u0, uc) };
                    cells::lstm_backward(
                        [kept(0), kept(1), kept(2), kept(3), kept(4)],
                        cp,
                        clip_prev,
                        dh,
                        dc,
                        st.cfg.clip.as_ref(),
                        [gx(0), gx(1), gx(2), gx(3)],
                    );
                }
                RnnMode::Gru => {
                    let gh = |g: usize| unsafe { st.dgh.get_mut(row * gw + g * h + u0, uc) };
                    let direct = unsafe { st.direct.get_mut(s * h + u0, uc) };
                    cells::gru_backward(
                        [kept(0), kept(1), kept(2), kept(3)],
                        hp,
                        dh,
                        [gx(0), gx(1), gx(2)],
                        [gh(0), gh(1), gh(2)],
                        direct,
                    );
                }
                RnnMode::RnnRelu | RnnMode::RnnTanh => {
                    let out = &st.y[row * h + u0..row * h + u1];
                    cells::plain_backward(out, dh, dm.mode == RnnMode::RnnRelu, gx(0));
                }
            }
            if st.ragged {
                let grads = if dm.mode == RnnMode::Gru {
                    &st.dgh
                } else {
                    &st.dgx
                };
                for g in 0..dm.mode.gates() {
                    let from = unsafe { grads.get(row * gw + g * h + u0, uc) };
                    let at = half + s * gw + g * h + u0;
                    unsafe { st.gathered.get_mut(at, uc) }.copy_from_slice(from);
                }
            }
        }
    }
}
