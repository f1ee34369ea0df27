//! Forward of the fused recurrent layers: per layer and direction one input-projection GEMM,
//! then per step one recurrent product and the gate math, the hidden units cut among threads.

use super::packed::{folded_bias, wh_panels, PackedLayer, PackedWeights};
use super::panel::Panels;
use super::{cells, put_columns, step_time, CellClip, RnnConfig, RnnFloat, RnnInputs, RnnMode};
use super::{Slices, Wide};
use crate::error::Result;
use crate::kernels::gemm::{gemm, MatRef};
use crate::kernels::par::{self, lockstep, on_pool, Shared};

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
    /// Its weights packed by an earlier call ([`PackedWeights`]), if kept.
    pub packed: Option<&'a PackedLayer<T>>,
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
            packed: None,
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
    rnn_forward_packed(cfg, inp, masks, keep, None)
}

/// [`rnn_forward`] with the weights already packed (from `inp.params`, for `cfg.dims`: the
/// caller vouches that they are the same values; sizes that `packed` does not fit are
/// packed afresh).
pub fn rnn_forward_packed<T: RnnFloat>(
    cfg: &RnnConfig,
    inp: &RnnInputs<T>,
    masks: Option<&[T]>,
    keep: bool,
    packed: Option<&PackedWeights<T>>,
) -> Result<RnnOutputs<T>> {
    let packed = packed.filter(|p| p.fits(&cfg.dims));
    let run = || forward_layers(cfg, inp, masks, keep, packed);
    if cfg.dims.threaded() {
        // One hand-over into the pool for the whole call: from a caller's thread each
        // parallel part (two per layer) would pay one, 25–75 µs each.
        on_pool(run)
    } else {
        run()
    }
}

fn forward_layers<T: RnnFloat>(
    cfg: &RnnConfig,
    inp: &RnnInputs<T>,
    masks: Option<&[T]>,
    keep: bool,
    packed: Option<&PackedWeights<T>>,
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
        par::filled(dm.reserve_len(masks.is_some()), T::zero())
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
        let mut fwd = Layer::new(cfg, inp, x, l, 0);
        fwd.packed = packed.map(|p| p.layer(l, 0));
        let out = if nd == 1 {
            layer_forward(cfg, &fwd, keep.then_some(&mut c_a[..]), hy_a, cy_a)?
        } else {
            let mut bwd = Layer::new(cfg, inp, x, l, 1);
            bwd.packed = packed.map(|p| p.layer(l, 1));
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
    cache: Option<&mut [T]>,
    hy: &mut [T],
    cy: &mut [T],
) -> Result<Vec<T>> {
    let dm = &cfg.dims;
    let (steps, n, h, gw) = (dm.seq, dm.batch, dm.hidden, dm.gate_width());
    let gates = dm.mode.gates();
    let lstm = dm.mode == RnnMode::Lstm;
    // The input projection of every step at once, with the biases folded in.
    let xw = match a.packed {
        Some(p) => {
            // Against the kept panels of W_i2h, then the biases added row by row.
            let rows = steps * n;
            let w = p.wx.width();
            let mut product = vec![T::zero(); rows * w];
            T::panel_product(a.x, a.in_w, rows, &p.wx, &mut product);
            product
                .chunks_exact(w)
                .flat_map(|r| r[..gw].iter().zip(&p.bias).map(|(&v, &b)| v + b))
                .collect()
        }
        None => {
            // Added to rows of the biases (no zero fill, no second pass).
            let bias = folded_bias(dm, a.bx, a.bh);
            let mut xw = par::tiled(&bias, steps * n);
            gemm(
                MatRef::row_major(a.x, steps * n, a.in_w),
                MatRef::row_major(a.wx, gw, a.in_w).t(),
                &mut xw,
                true,
            )?;
            xw
        }
    };
    let slices = Slices::new(h, n, h, gates);
    let own: Vec<Panels<T>>;
    let panels: &[Panels<T>] = match a.packed {
        Some(p) if p.ranges == slices.ranges => &p.wh,
        _ => {
            own = wh_panels(a.wh, &slices, dm);
            &own
        }
    };
    let widest = panels.iter().map(Panels::width).max().unwrap_or(0);
    // The state by parity of the step: step i reads half i % 2 and writes the other.
    let mut states = vec![T::zero(); 2 * n * h];
    states[..n * h].copy_from_slice(a.h0);
    let mut cells = match a.c0 {
        Some(c) if lstm => c.to_vec(),
        _ => vec![T::zero(); if lstm { n * h } else { 0 }],
    };
    let mut y = par::filled(steps * n * h, T::zero());
    let mut products = vec![T::zero(); slices.ranges.len() * n * widest];
    let max_len = a.lens.iter().copied().max().unwrap_or(0);
    let mut no_cache: Vec<T> = Vec::new();
    let step = Step {
        cfg,
        a,
        xw: &xw,
        slices: &slices,
        panels,
        widest,
        states: Shared::new(&mut states),
        cells: Shared::new(&mut cells),
        y: Shared::new(&mut y),
        products: Shared::new(&mut products),
        keep: cache.is_some(),
        cache: Shared::new(cache.unwrap_or(&mut no_cache)),
    };
    lockstep(max_len, slices.ranges.len(), slices.workers, |i, p| {
        step.run(i, p)
    });
    hy.copy_from_slice(&states[max_len % 2 * n * h..][..n * h]);
    if lstm {
        cy.copy_from_slice(&cells);
    }
    Ok(y)
}

/// What the steps of one layer share (see [`layer_forward`]).
struct Step<'a, T> {
    cfg: &'a RnnConfig,
    a: &'a Layer<'a, T>,
    xw: &'a [T],
    slices: &'a Slices,
    panels: &'a [Panels<T>],
    widest: usize,
    states: Shared<'a, T>,
    cells: Shared<'a, T>,
    y: Shared<'a, T>,
    products: Shared<'a, T>,
    keep: bool,
    cache: Shared<'a, T>,
}

impl<T: RnnFloat> Step<'_, T> {
    /// Step `i`, units of slice `p`: the slice's product, then its gate math.
    fn run(&self, i: usize, p: usize) {
        let (n, h) = (self.cfg.dims.batch, self.cfg.dims.hidden);
        let b = &self.panels[p];
        // SAFETY (the accesses here and in `Cells::run`): step i reads state half i % 2,
        // written by step i − 1 (which `lockstep` finished before this step began), and
        // writes only this slice's units of the other half, of the cells, outputs and cache;
        // the product buffer is this slice's own.
        let prev = unsafe { self.states.get(i % 2 * n * h, n * h) };
        let product = unsafe { self.products.get_mut(p * n * self.widest, n * b.width()) };
        T::panel_product(prev, h, n, b, product);
        T::wide(Cells {
            s: self,
            i,
            units: self.slices.ranges[p],
            prev,
            product,
        });
    }
}

/// The gate math of one slice at one step, for every sample.
struct Cells<'s, 'a, T> {
    s: &'s Step<'a, T>,
    i: usize,
    units: (usize, usize),
    prev: &'s [T],
    product: &'s [T],
}

impl<T: RnnFloat> Wide for Cells<'_, '_, T> {
    #[inline(always)]
    fn run(self) {
        let st = self.s;
        let dm = &st.cfg.dims;
        let (n, h, gw) = (dm.batch, dm.hidden, dm.gate_width());
        let cw = dm.mode.cache_width(h);
        let (u0, u1) = self.units;
        let uc = u1 - u0;
        let w = self.product.len() / n.max(1);
        let out = (self.i + 1) % 2 * n * h;
        for s in 0..n {
            // SAFETY: see `Step::run`.
            let h_new = unsafe { st.states.get_mut(out + s * h + u0, uc) };
            let Some(t) = step_time(st.a.reverse, self.i, st.a.lens[s]) else {
                // A finished sample keeps its state.
                h_new.copy_from_slice(&self.prev[s * h + u0..s * h + u1]);
                continue;
            };
            let row = t * n + s;
            let x = |g: usize| &st.xw[row * gw + g * h + u0..][..uc];
            let pr = |g: usize| &self.product[s * w + g * uc..][..uc];
            // SAFETY: see `Step::run`.
            let y = unsafe { st.y.get_mut(row * h + u0, uc) };
            let kept = |g: usize| unsafe { st.cache.get_mut(row * cw + g * h + u0, uc) };
            match dm.mode {
                RnnMode::Lstm => {
                    let keep = st
                        .keep
                        .then(|| [kept(0), kept(1), kept(2), kept(3), kept(4)]);
                    // SAFETY: see `Step::run`.
                    let c = unsafe { st.cells.get_mut(s * h + u0, uc) };
                    let clip_to: Option<&CellClip> = st.cfg.clip.as_ref();
                    cells::lstm_forward(
                        [x(0), x(1), x(2), x(3)],
                        [pr(0), pr(1), pr(2), pr(3)],
                        c,
                        h_new,
                        y,
                        keep,
                        clip_to,
                    );
                }
                RnnMode::Gru => {
                    let keep = st.keep.then(|| [kept(0), kept(1), kept(2), kept(3)]);
                    cells::gru_forward(
                        [x(0), x(1), x(2)],
                        [pr(0), pr(1), pr(2)],
                        &st.a.bh[2 * h + u0..2 * h + u1],
                        &self.prev[s * h + u0..s * h + u1],
                        h_new,
                        y,
                        keep,
                    );
                }
                RnnMode::RnnRelu | RnnMode::RnnTanh => {
                    let relu = dm.mode == RnnMode::RnnRelu;
                    cells::plain_forward(x(0), pr(0), relu, h_new, y);
                }
            }
        }
    }
}
