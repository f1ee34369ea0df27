//! The fused recurrent layers of MXNet's `RNN` operator — LSTM, GRU and ReLU / tanh RNN,
//! stacked and optionally bidirectional — over (time, batch, features) data with MXNet's
//! flat parameter vector.
//!
//! Per layer and direction the input projection of every step is one GEMM; each step is then
//! one product of the state against the recurrent weights of all gates together (packed once
//! per call, see `panel`), followed by the gate math. Backward walks the steps in reverse
//! with one product per step for the state gradient, and builds the weight gradients of all
//! steps with one GEMM each. Within a step the hidden units are cut into slices that the
//! pool's threads take side by side (`par::lockstep`): a slice's gate math needs only its
//! own units' products, so the threads meet once per step.

mod backward;
mod cells;
mod forward;
mod packed;
mod panel;
#[cfg(test)]
mod tests;

pub use backward::{rnn_backward, RnnGrads};
pub use forward::{rnn_forward, rnn_forward_packed, RnnOutputs};
pub use packed::PackedWeights;

use super::gemm::GemmScalar;
use super::tuning::RNN_STEP_PARALLEL_ABOVE;
use crate::error::{Error, Result};
use num_traits::Float;
use panel::Panels;

/// The element types the recurrent kernels compute in (float32, and float64 for checks).
pub trait RnnFloat: GemmScalar + Float + Send + Sync + std::fmt::Debug {
    /// The logistic function.
    fn sigmoid(self) -> Self;
    /// tanh.
    fn tanh_act(self) -> Self;
    /// `c = a · b` against packed weights (see `panel::product_plain`).
    #[doc(hidden)]
    fn panel_product(a: &[Self], lda: usize, m: usize, b: &Panels<Self>, c: &mut [Self]);
    /// Runs `k`, compiled for the widest vectors the CPU has.
    #[doc(hidden)]
    fn wide<K: Wide>(k: K) {
        k.run()
    }
}

/// Loops that [`RnnFloat::wide`] compiles for wide vectors: `run` must be `#[inline(always)]`
/// so its body is generated inside the caller's target features.
#[doc(hidden)]
pub trait Wide {
    /// The work.
    fn run(self);
}

// Float32 gates use the branch-free exp / tanh of `kernels::unary` (a few ulp): with libm's
// the gate math of a step took longer than its GEMM.
impl RnnFloat for f32 {
    #[inline(always)]
    fn sigmoid(self) -> f32 {
        super::unary::sigmoid(self)
    }
    #[inline(always)]
    fn tanh_act(self) -> f32 {
        super::unary::fast_tanh(self)
    }
    fn panel_product(a: &[f32], lda: usize, m: usize, b: &Panels<f32>, c: &mut [f32]) {
        panel::product_f32(a, lda, m, b, c)
    }
    // The crate targets baseline x86-64: its 4-wide SSE2 left the exp-heavy gate math at a
    // third of AVX-512's speed. AVX2 where AVX-512 is missing; the same bits on every build
    // (Rust never contracts a multiply and an add into an FMA).
    fn wide<K: Wide>(k: K) {
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx512f") {
            #[target_feature(enable = "avx512f")]
            fn go<K: Wide>(k: K) {
                k.run()
            }
            // SAFETY: the CPU supports avx512f, the only feature `go` is compiled for.
            return unsafe { go(k) };
        }
        #[cfg(target_arch = "x86_64")]
        if super::has_avx2_fma() {
            #[target_feature(enable = "avx2,fma")]
            fn go256<K: Wide>(k: K) {
                k.run()
            }
            // SAFETY: the CPU supports avx2 and fma, the features `go256` is compiled for.
            return unsafe { go256(k) };
        }
        k.run()
    }
}

impl RnnFloat for f64 {
    #[inline(always)]
    fn sigmoid(self) -> f64 {
        1.0 / (1.0 + (-self).exp())
    }
    #[inline(always)]
    fn tanh_act(self) -> f64 {
        self.tanh()
    }
    fn panel_product(a: &[f64], lda: usize, m: usize, b: &Panels<f64>, c: &mut [f64]) {
        panel::product_plain(a, lda, m, b, c)
    }
}

/// How one call cuts the hidden units of a step among the pool's threads.
#[derive(Clone, Debug)]
struct Slices {
    /// The unit ranges, in order.
    ranges: Vec<(usize, usize)>,
    /// Threads to run them on (1: the calling thread alone).
    workers: usize,
}

impl Slices {
    /// One slice per thread when a step's product (`rows` × `h` units × `k`) is big enough
    /// to share, else one slice on the calling thread.
    fn new(h: usize, rows: usize, k: usize, gates: usize) -> Self {
        let threads = rayon::current_num_threads();
        let parallel = rows * gates * h * k >= RNN_STEP_PARALLEL_ABOVE && threads > 1;
        let parts = if parallel { threads.min(h) } else { 1 };
        Slices {
            ranges: (0..parts)
                .map(|p| (p * h / parts, (p + 1) * h / parts))
                .collect(),
            workers: parts,
        }
    }
}

/// The recurrent cell.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RnnMode {
    /// Gates i, f, g, o; c = f·c' + i·g, h = o·tanh(c).
    Lstm,
    /// Gates r, z, n (cuDNN's variant): n = tanh(Wx_n·x + b_xn + r·(Wh_n·h' + b_hn)),
    /// h = (1 − z)·n + z·h'.
    Gru,
    /// h = relu(Wx·x + b_x + Wh·h' + b_h).
    RnnRelu,
    /// h = tanh(Wx·x + b_x + Wh·h' + b_h).
    RnnTanh,
}

impl RnnMode {
    /// Gates per hidden unit.
    pub fn gates(self) -> usize {
        match self {
            RnnMode::Lstm => 4,
            RnnMode::Gru => 3,
            RnnMode::RnnRelu | RnnMode::RnnTanh => 1,
        }
    }

    /// Values forward keeps per (step, sample) for backward, `h` hidden units: LSTM's four
    /// gate activations and its cell before clipping, GRU's three gates and Wh_n·h' + b_hn
    /// (its reset gate multiplies it). A plain RNN's derivative needs only its output.
    fn cache_width(self, h: usize) -> usize {
        match self {
            RnnMode::Lstm => 5 * h,
            RnnMode::Gru => 4 * h,
            RnnMode::RnnRelu | RnnMode::RnnTanh => 0,
        }
    }
}

/// The sizes of one call: `layers` × `dirs` (1 or 2) cells of `hidden` units over `seq` steps
/// of `batch` samples with `input` features.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RnnDims {
    /// The cell.
    pub mode: RnnMode,
    /// Stacked layers.
    pub layers: usize,
    /// Directions: 1, or 2 when bidirectional.
    pub dirs: usize,
    /// Steps (T).
    pub seq: usize,
    /// Samples (N).
    pub batch: usize,
    /// Features of the data (C).
    pub input: usize,
    /// Hidden units per direction (H, `state_size`).
    pub hidden: usize,
}

impl RnnDims {
    /// Rows of a weight matrix: all gates' units.
    pub fn gate_width(&self) -> usize {
        self.mode.gates() * self.hidden
    }

    /// Features entering layer `l`: the data's, then both directions' outputs.
    pub fn layer_input(&self, l: usize) -> usize {
        if l == 0 {
            self.input
        } else {
            self.dirs * self.hidden
        }
    }

    /// Weights of one direction of layer `l` (input-to-hidden, then hidden-to-hidden).
    fn block_len(&self, l: usize) -> usize {
        self.gate_width() * (self.layer_input(l) + self.hidden)
    }

    /// Every weight of every layer and direction; the biases follow.
    pub fn weight_len(&self) -> usize {
        (0..self.layers)
            .map(|l| self.dirs * self.block_len(l))
            .sum()
    }

    /// MXNet's layout: per layer, per direction, W_i2h (gates·H, in) then W_h2h (gates·H, H);
    /// these are the offsets of the two matrices of layer `l`, direction `d`.
    pub fn weights(&self, l: usize, d: usize) -> (usize, usize) {
        let before: usize =
            (0..l).map(|k| self.dirs * self.block_len(k)).sum::<usize>() + d * self.block_len(l);
        (before, before + self.gate_width() * self.layer_input(l))
    }

    /// After all weights, in the same order: b_i2h then b_h2h (gates·H each); the offsets of
    /// the two vectors of layer `l`, direction `d`.
    pub fn biases(&self, l: usize, d: usize) -> (usize, usize) {
        let b = self.weight_len() + (l * self.dirs + d) * 2 * self.gate_width();
        (b, b + self.gate_width())
    }

    /// Whether the steps run on several threads (see `Slices`), so the call is worth one
    /// hand-over into the pool.
    fn threaded(&self) -> bool {
        Slices::new(self.hidden, self.batch, self.hidden, self.mode.gates()).workers > 1
    }

    /// Length of the flat parameter vector.
    pub fn param_len(&self) -> usize {
        self.weight_len() + self.layers * self.dirs * 2 * self.gate_width()
    }

    /// Values of a state array (layers·dirs, batch, hidden).
    pub fn state_len(&self) -> usize {
        self.layers * self.dirs * self.batch * self.hidden
    }

    /// Features of each output step: both directions' units.
    pub fn out_width(&self) -> usize {
        self.dirs * self.hidden
    }

    /// Values of one layer's output (seq, batch, dirs·hidden).
    fn layer_out_len(&self) -> usize {
        self.seq * self.batch * self.out_width()
    }

    /// Values forward keeps per layer and direction (see [`RnnMode::cache_width`]).
    fn cache_len(&self) -> usize {
        self.seq * self.batch * self.mode.cache_width(self.hidden)
    }

    /// Length of what a training forward keeps for backward: every layer's and direction's
    /// cache, the outputs of all layers but the last (the next layer's input and the states
    /// backward needs), and with dropout the masks applied to them.
    pub fn reserve_len(&self, dropout: bool) -> usize {
        let inner = self.layers.saturating_sub(1) * self.layer_out_len();
        self.layers * self.dirs * self.cache_len() + inner * (1 + usize::from(dropout))
    }

    fn cache_offset(&self, l: usize, d: usize) -> usize {
        (l * self.dirs + d) * self.cache_len()
    }

    /// Where the output of layer `l` (< layers − 1) sits in the reserve.
    fn ys_offset(&self, l: usize) -> usize {
        self.layers * self.dirs * self.cache_len() + l * self.layer_out_len()
    }

    /// Where the dropout mask applied to the output of layer `l` sits in the reserve.
    fn mask_offset(&self, l: usize) -> usize {
        self.ys_offset(self.layers.saturating_sub(1)) + l * self.layer_out_len()
    }

    /// Checks that every size this call derives fits in memory indices (absurd `num_layers`
    /// or `state_size` values fail here instead of overflowing).
    pub fn check_sizes(&self) -> Result<()> {
        let big = |v: u128| v > isize::MAX as u128 / 8;
        let (l, d, t, n, c, h) = (
            self.layers as u128,
            self.dirs as u128,
            self.seq as u128,
            self.batch as u128,
            self.input as u128,
            self.hidden as u128,
        );
        let g = self.mode.gates() as u128;
        let params = g * h * d * ((c + h + 2) + l.saturating_sub(1) * (d * h + h + 2));
        let reserve = l * d * t * n * 5 * h + 2 * l * t * n * d * h;
        if big(params) || big(reserve) || big(l * d * n * h) {
            return Err(Error::invalid(
                "RNN: sizes",
                "num_layers, state_size and the data shape small enough to index in memory",
                format!(
                    "{} layers × {} directions of {} units over ({}, {}, {}) data",
                    self.layers, self.dirs, self.hidden, self.seq, self.batch, self.input
                ),
            ));
        }
        Ok(())
    }
}

/// MXNet's `lstm_state_clip_min` / `_max` / `_nan` (cuDNN's cell clipping): the cell state is
/// clipped to [lo, hi] after each update, before h = o·tanh(c), and the clipped value is the
/// state carried on (and returned as the final cell state).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CellClip {
    /// Lower bound.
    pub lo: f64,
    /// Upper bound.
    pub hi: f64,
    /// NaN becomes `lo` instead of propagating.
    pub nan: bool,
}

impl CellClip {
    #[inline(always)]
    fn apply<T: Float>(&self, c: T) -> T {
        let lo = T::from(self.lo).unwrap_or(c);
        let hi = T::from(self.hi).unwrap_or(c);
        if c.is_nan() {
            if self.nan {
                lo
            } else {
                c
            }
        } else if c < lo {
            lo
        } else if c > hi {
            hi
        } else {
            c
        }
    }

    /// Whether the gradient passes the clip at `c` (zero where the clip bit).
    #[inline(always)]
    fn passes<T: Float>(&self, c: T) -> bool {
        T::from(self.lo).is_some_and(|lo| c >= lo) && T::from(self.hi).is_some_and(|hi| c <= hi)
    }
}

/// One call's configuration.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RnnConfig {
    /// Sizes.
    pub dims: RnnDims,
    /// LSTM cell clipping.
    pub clip: Option<CellClip>,
}

/// The arrays of one call, all contiguous.
#[derive(Clone, Copy, Debug)]
pub struct RnnInputs<'a, T> {
    /// Data (seq, batch, input).
    pub x: &'a [T],
    /// The flat parameter vector ([`RnnDims::param_len`]).
    pub params: &'a [T],
    /// Initial hidden states (layers·dirs, batch, hidden).
    pub h0: &'a [T],
    /// Initial cell states, LSTM only (same shape).
    pub c0: Option<&'a [T]>,
    /// Each sample's length in [1, seq]: steps at or past it produce zeros and leave the
    /// state alone (the reverse direction starts at the sample's last valid step).
    pub lens: &'a [usize],
}

impl<T> RnnInputs<'_, T> {
    /// Checks every array's length against `d` (the operator checks shapes first; this
    /// guards the kernel's own indexing).
    fn check(&self, d: &RnnDims) -> Result<()> {
        let want = [
            ("data", d.seq * d.batch * d.input, self.x.len()),
            ("parameters", d.param_len(), self.params.len()),
            ("state", d.state_len(), self.h0.len()),
            ("sequence_length", d.batch, self.lens.len()),
        ];
        for (name, w, g) in want {
            if w != g {
                return Err(Error::invalid(
                    format!("RNN kernel: {name}"),
                    format!("{w} values"),
                    format!("{g}"),
                ));
            }
        }
        match (d.mode, self.c0) {
            (RnnMode::Lstm, Some(c)) if c.len() == d.state_len() => {}
            (RnnMode::Lstm, c) => {
                return Err(Error::invalid(
                    "RNN kernel: state_cell",
                    format!("{} values", d.state_len()),
                    format!("{}", c.map_or(0, <[T]>::len)),
                ))
            }
            _ => {}
        }
        if let Some(&bad) = self.lens.iter().find(|&&n| n == 0 || n > d.seq) {
            return Err(Error::invalid(
                "RNN kernel: sequence_length",
                format!("lengths in [1, {}]", d.seq),
                bad.to_string(),
            ));
        }
        Ok(())
    }
}

/// The time index a direction processes at its iteration `i` over a sample of `len` steps
/// (`None` once the sample has ended).
fn step_time(reverse: bool, i: usize, len: usize) -> Option<usize> {
    (i < len).then(|| if reverse { len - 1 - i } else { i })
}

/// The step whose state feeds step `t` (`None`: the initial state).
fn prev_time(reverse: bool, t: usize, len: usize) -> Option<usize> {
    if reverse {
        (t + 1 < len).then_some(t + 1)
    } else {
        t.checked_sub(1)
    }
}

/// Columns `[d·h, (d + 1)·h)` of each `width`-wide row: one direction's part of a layer's
/// output.
fn take_columns<T: Copy>(src: &[T], width: usize, d: usize, h: usize) -> Vec<T> {
    src.chunks_exact(width)
        .flat_map(|row| row[d * h..(d + 1) * h].iter().copied())
        .collect()
}

/// Writes `part` (rows of `h`) into columns `[d·h, (d + 1)·h)` of the `width`-wide rows of
/// `dst`.
fn put_columns<T: Copy>(dst: &mut [T], width: usize, d: usize, h: usize, part: &[T]) {
    for (row, p) in dst.chunks_exact_mut(width).zip(part.chunks_exact(h)) {
        row[d * h..(d + 1) * h].copy_from_slice(p);
    }
}
