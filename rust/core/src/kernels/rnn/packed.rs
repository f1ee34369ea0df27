//! The weights of every layer and direction packed for the forward products, kept from one
//! call to the next while the parameters stay the same (the operator keeps them for
//! inference). Packing is a transpose of every weight matrix: at one sequence of 35 steps it
//! took over a quarter of the call (the recurrent panels and the `gemm` crate's packing of
//! the input weights, both redone on every call).

use super::panel::Panels;
use super::{RnnDims, RnnFloat, RnnMode, Slices};
use crate::error::{Error, Result};

/// One direction of one layer.
pub(super) struct PackedLayer<T> {
    /// W_i2h as the right operand of the input projection (in × gates·H).
    pub wx: Panels<T>,
    /// Each slice's recurrent weights (see [`wh_panels`]), for the slices in `ranges`.
    pub wh: Vec<Panels<T>>,
    /// The unit ranges `wh` was cut for.
    pub ranges: Vec<(usize, usize)>,
    /// The biases folded into the input projection (see [`folded_bias`]).
    pub bias: Vec<T>,
}

/// The packed weights of every layer and direction of one parameter vector.
pub struct PackedWeights<T> {
    /// The sizes they were packed for (any number of steps).
    dims: RnnDims,
    /// Layer l, direction d at l·dirs + d.
    layers: Vec<PackedLayer<T>>,
}

impl<T: RnnFloat> PackedWeights<T> {
    /// Packs `params` (the flat vector of `dims`).
    pub fn new(dims: &RnnDims, params: &[T]) -> Result<Self> {
        dims.check_sizes()?;
        if params.len() != dims.param_len() {
            return Err(Error::invalid(
                "RNN kernel: parameters",
                format!("{} values", dims.param_len()),
                params.len().to_string(),
            ));
        }
        let (gw, h) = (dims.gate_width(), dims.hidden);
        let slices = Slices::new(h, dims.batch, h, dims.mode.gates());
        let mut layers = Vec::with_capacity(dims.layers * dims.dirs);
        for l in 0..dims.layers {
            let in_w = dims.layer_input(l);
            for d in 0..dims.dirs {
                let (wx, wh) = dims.weights(l, d);
                let (bx, bh) = dims.biases(l, d);
                let wx = &params[wx..wx + gw * in_w];
                layers.push(PackedLayer {
                    wx: Panels::from_columns(in_w, gw, |j| &wx[j * in_w..(j + 1) * in_w]),
                    wh: wh_panels(&params[wh..wh + gw * h], &slices, dims),
                    ranges: slices.ranges.clone(),
                    bias: folded_bias(dims, &params[bx..bx + gw], &params[bh..bh + gw]),
                });
            }
        }
        Ok(PackedWeights {
            dims: Self::key(dims),
            layers,
        })
    }

    /// Whether these weights serve calls of `dims` (any number of steps).
    pub fn fits(&self, dims: &RnnDims) -> bool {
        self.dims == Self::key(dims)
    }

    fn key(dims: &RnnDims) -> RnnDims {
        RnnDims { seq: 0, ..*dims }
    }

    /// Layer `l`, direction `d`.
    pub(super) fn layer(&self, l: usize, d: usize) -> &PackedLayer<T> {
        &self.layers[l * self.dims.dirs + d]
    }
}

/// Each slice's recurrent weights, its units of every gate side by side: column g·uc + j is
/// unit u0 + j of gate g (`wh` is W_h2h, gates·H × H).
pub(super) fn wh_panels<T: RnnFloat>(wh: &[T], slices: &Slices, dims: &RnnDims) -> Vec<Panels<T>> {
    let (h, gates) = (dims.hidden, dims.mode.gates());
    slices
        .ranges
        .iter()
        .map(|&(u0, u1)| {
            let uc = u1 - u0;
            Panels::from_columns(h, gates * uc, |j| {
                &wh[(j / uc * h + u0 + j % uc) * h..][..h]
            })
        })
        .collect()
}

/// The biases of the input projection: both of every gate, except GRU's n gate, whose
/// recurrent bias sits inside r·(Wh_n·h' + b_hn).
pub(super) fn folded_bias<T: RnnFloat>(dims: &RnnDims, bx: &[T], bh: &[T]) -> Vec<T> {
    let gw = dims.gate_width();
    let folded = if dims.mode == RnnMode::Gru {
        2 * dims.hidden
    } else {
        gw
    };
    (0..gw)
        .map(|j| bx[j] + if j < folded { bh[j] } else { T::zero() })
        .collect()
}
