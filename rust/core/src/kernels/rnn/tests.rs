//! Float64 checks of the recurrent kernels: hand-computed single steps, sequence lengths
//! against truncated sequences, and central finite differences of every gradient.

#![allow(clippy::unwrap_used)]

use super::*;

fn dims(mode: RnnMode, layers: usize, dirs: usize, t: usize, n: usize, c: usize) -> RnnDims {
    RnnDims {
        mode,
        layers,
        dirs,
        seq: t,
        batch: n,
        input: c,
        hidden: 3,
    }
}

/// Deterministic values in [-1, 1).
fn values(len: usize, seed: u64) -> Vec<f64> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0
        })
        .collect()
}

/// A call's arrays, owned.
struct Case {
    cfg: RnnConfig,
    x: Vec<f64>,
    params: Vec<f64>,
    h0: Vec<f64>,
    c0: Vec<f64>,
    lens: Vec<usize>,
    masks: Option<Vec<f64>>,
}

impl Case {
    fn new(d: RnnDims, seed: u64) -> Self {
        let lstm = d.mode == RnnMode::Lstm;
        Case {
            cfg: RnnConfig {
                dims: d,
                clip: None,
            },
            x: values(d.seq * d.batch * d.input, seed),
            params: values(d.param_len(), seed + 1),
            h0: values(d.state_len(), seed + 2),
            c0: if lstm {
                values(d.state_len(), seed + 3)
            } else {
                vec![]
            },
            lens: vec![d.seq; d.batch],
            masks: None,
        }
    }

    fn inputs(&self) -> RnnInputs<'_, f64> {
        RnnInputs {
            x: &self.x,
            params: &self.params,
            h0: &self.h0,
            c0: (self.cfg.dims.mode == RnnMode::Lstm).then_some(&self.c0[..]),
            lens: &self.lens,
        }
    }

    fn forward(&self) -> RnnOutputs<f64> {
        rnn_forward(&self.cfg, &self.inputs(), self.masks.as_deref(), true).unwrap()
    }

    /// Σ w·(y, hy, cy) with fixed weights: the objective of the gradient checks.
    fn objective(&self, w: &[Vec<f64>; 3]) -> f64 {
        let o = self.forward();
        [&o.y, &o.hy, &o.cy]
            .iter()
            .zip(w)
            .map(|(v, w)| v.iter().zip(w).map(|(a, b)| a * b).sum::<f64>())
            .sum()
    }

    /// Checks every gradient against central differences.
    fn check_gradients(&mut self) {
        let o = self.forward();
        let w = [
            values(o.y.len(), 91),
            values(o.hy.len(), 92),
            values(o.cy.len(), 93),
        ];
        let g = rnn_backward(
            &self.cfg,
            &self.inputs(),
            &o.y,
            &o.reserve,
            self.masks.is_some(),
            &w[0],
            Some(&w[1]),
            (self.cfg.dims.mode == RnnMode::Lstm).then_some(&w[2][..]),
            true,
        )
        .unwrap();
        let eps = 1e-6;
        for (which, analytic) in [(0, &g.dx), (1, &g.dparams), (2, &g.dh0), (3, &g.dc0)] {
            for (j, &a) in analytic.iter().enumerate() {
                fn slot(c: &mut Case, which: usize, j: usize) -> &mut f64 {
                    match which {
                        0 => &mut c.x[j],
                        1 => &mut c.params[j],
                        2 => &mut c.h0[j],
                        _ => &mut c.c0[j],
                    }
                }
                let base = *slot(self, which, j);
                *slot(self, which, j) = base + eps;
                let plus = self.objective(&w);
                *slot(self, which, j) = base - eps;
                let minus = self.objective(&w);
                *slot(self, which, j) = base;
                let numeric = (plus - minus) / (2.0 * eps);
                assert!(
                    (numeric - a).abs() <= 1e-6 + 1e-5 * numeric.abs(),
                    "{:?}: input {which}[{j}]: backward {a}, finite difference {numeric}",
                    self.cfg
                );
            }
        }
    }
}

const MODES: [RnnMode; 4] = [
    RnnMode::Lstm,
    RnnMode::Gru,
    RnnMode::RnnRelu,
    RnnMode::RnnTanh,
];

#[test]
fn parameter_layout_is_mxnets() {
    // LSTM, 2 layers, bidirectional, input 5, hidden 3: per layer and direction W_i2h then
    // W_h2h, then all biases.
    let d = RnnDims {
        hidden: 3,
        ..dims(RnnMode::Lstm, 2, 2, 1, 1, 5)
    };
    let (i0, h0) = d.weights(0, 0);
    assert_eq!((i0, h0), (0, 12 * 5));
    assert_eq!(d.weights(0, 1), (12 * 8, 12 * 8 + 12 * 5));
    assert_eq!(d.weights(1, 0), (2 * 12 * 8, 2 * 12 * 8 + 12 * 6));
    assert_eq!(d.weight_len(), 2 * 12 * 8 + 2 * 12 * 9);
    assert_eq!(d.biases(0, 0), (d.weight_len(), d.weight_len() + 12));
    assert_eq!(d.biases(1, 1).1 + 12, d.param_len());
    // MXNet's GetRnnParamSize: (C + H + 2)·G·H·D + (L − 1)·(D·H + H + 2)·G·H·D.
    assert_eq!(d.param_len(), (5 + 3 + 2) * 24 + (6 + 3 + 2) * 24);
}

#[test]
fn one_step_matches_the_formulas() {
    // T = N = 1, one unit: every gate by hand.
    let sig = |v: f64| 1.0 / (1.0 + (-v).exp());
    for mode in MODES {
        let d = RnnDims {
            hidden: 1,
            ..dims(mode, 1, 1, 1, 1, 1)
        };
        let mut c = Case::new(d, 5);
        let g = mode.gates();
        c.x = vec![0.5];
        c.h0 = vec![-0.3];
        if mode == RnnMode::Lstm {
            c.c0 = vec![0.7];
        }
        // wx (g), wh (g), bx (g), bh (g)
        let wx: Vec<f64> = (0..g).map(|k| 0.1 * (k as f64 + 1.0)).collect();
        let wh: Vec<f64> = (0..g).map(|k| -0.2 * (k as f64 + 1.0)).collect();
        let bx: Vec<f64> = (0..g).map(|k| 0.05 * k as f64).collect();
        let bh: Vec<f64> = (0..g).map(|k| 0.3 - 0.1 * k as f64).collect();
        c.params = [wx.clone(), wh.clone(), bx.clone(), bh.clone()].concat();
        let o = c.forward();
        let (x, h) = (0.5, -0.3);
        let pre = |k: usize| wx[k] * x + bx[k] + wh[k] * h + bh[k];
        let want_h = match mode {
            RnnMode::Lstm => {
                let (i, f, gg, o) = (sig(pre(0)), sig(pre(1)), pre(2).tanh(), sig(pre(3)));
                let cell = f * 0.7 + i * gg;
                assert!((c.forward().cy[0] - cell).abs() < 1e-12);
                o * cell.tanh()
            }
            RnnMode::Gru => {
                let r = sig(pre(0));
                let z = sig(pre(1));
                let n = (wx[2] * x + bx[2] + r * (wh[2] * h + bh[2])).tanh();
                (1.0 - z) * n + z * h
            }
            RnnMode::RnnRelu => pre(0).max(0.0),
            RnnMode::RnnTanh => pre(0).tanh(),
        };
        assert!((o.y[0] - want_h).abs() < 1e-12, "{mode:?}");
        assert_eq!(o.hy, o.y);
    }
}

#[test]
fn gradients_match_finite_differences() {
    for (k, mode) in MODES.into_iter().enumerate() {
        for (layers, dirs, t, n) in [(1, 1, 1, 1), (1, 1, 4, 2), (2, 2, 3, 2), (2, 1, 1, 3)] {
            let mut c = Case::new(dims(mode, layers, dirs, t, n, 2), 10 * k as u64 + 1);
            c.check_gradients();
        }
    }
}

#[test]
fn gradients_with_lengths_dropout_and_clipping() {
    for (k, mode) in MODES.into_iter().enumerate() {
        let mut c = Case::new(dims(mode, 2, 2, 4, 3, 2), 50 + k as u64);
        c.lens = vec![2, 4, 1];
        c.check_gradients();
        // Fixed dropout masks between the layers (0 or 1/(1 − p), p = 0.4).
        let d = c.cfg.dims;
        c.masks = Some(
            values(d.layer_out_len(), 77)
                .iter()
                .map(|&u| if u < 0.2 { 1.0 / 0.6 } else { 0.0 })
                .collect(),
        );
        c.check_gradients();
    }
    let mut c = Case::new(dims(RnnMode::Lstm, 2, 2, 4, 2, 2), 60);
    c.cfg.clip = Some(CellClip {
        lo: -0.3,
        hi: 0.25,
        nan: false,
    });
    let o = c.forward();
    assert!(o.cy.iter().all(|&v| (-0.3..=0.25).contains(&v)));
    assert!(
        o.cy.iter().any(|&v| v == -0.3 || v == 0.25),
        "the clip bites"
    );
    c.check_gradients();
}

#[test]
fn lengths_act_like_truncated_sequences() {
    // Each sample of a padded batch gives what it gives alone over its own steps: outputs
    // past its length are zeros, its final states are those at its last step, and the
    // reverse direction starts there.
    for mode in MODES {
        let d = dims(mode, 2, 2, 4, 3, 2);
        let mut c = Case::new(d, 70);
        c.lens = vec![2, 4, 1];
        let all = c.forward();
        let (n, h, ow) = (d.batch, d.hidden, d.out_width());
        for s in 0..n {
            let len = c.lens[s];
            let one = RnnDims {
                seq: len,
                batch: 1,
                ..d
            };
            let pick = |v: &[f64], width: usize, rows: usize| -> Vec<f64> {
                (0..rows)
                    .flat_map(|r| v[(r * n + s) * width..(r * n + s + 1) * width].to_vec())
                    .collect()
            };
            let mut alone = Case::new(one, 1);
            alone.x = pick(&c.x, d.input, len);
            alone.params = c.params.clone();
            alone.h0 = pick(&c.h0, h, d.layers * d.dirs);
            if mode == RnnMode::Lstm {
                alone.c0 = pick(&c.c0, h, d.layers * d.dirs);
            }
            let o = alone.forward();
            let close = |a: &[f64], b: &[f64]| a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-12);
            assert!(close(&pick(&all.y, ow, len), &o.y), "{mode:?} sample {s}");
            let padded = pick(&all.y, ow, d.seq);
            assert!(padded[len * ow..].iter().all(|&v| v == 0.0));
            assert!(close(&pick(&all.hy, h, d.layers * d.dirs), &o.hy));
            if mode == RnnMode::Lstm {
                assert!(close(&pick(&all.cy, h, d.layers * d.dirs), &o.cy));
            }
        }
    }
}

#[test]
fn inference_keeps_nothing_and_matches_training() {
    let c = Case::new(dims(RnnMode::Gru, 2, 2, 3, 2, 4), 80);
    let kept = c.forward();
    let inf = rnn_forward(&c.cfg, &c.inputs(), None, false).unwrap();
    assert!(inf.reserve.is_empty());
    assert_eq!(kept.reserve.len(), c.cfg.dims.reserve_len(false));
    assert_eq!((inf.y, inf.hy), (kept.y, kept.hy));
}

#[test]
fn clip_nan_option() {
    let k = CellClip {
        lo: -1.0,
        hi: 2.0,
        nan: true,
    };
    assert_eq!(k.apply(f64::NAN), -1.0);
    assert!(CellClip { nan: false, ..k }.apply(f64::NAN).is_nan());
    assert_eq!(
        (k.apply(-3.0), k.apply(0.5), k.apply(9.0)),
        (-1.0, 0.5, 2.0)
    );
    assert!(k.passes(2.0) && !k.passes(2.5) && !k.passes(f64::NAN));
}

#[test]
fn bad_lengths_are_errors() {
    let mut c = Case::new(dims(RnnMode::RnnTanh, 1, 1, 3, 2, 2), 90);
    c.lens = vec![0, 3];
    let e = rnn_forward(&c.cfg, &c.inputs(), None, false).unwrap_err();
    assert!(e.to_string().contains("sequence_length"), "{e}");
    c.lens = vec![1];
    assert!(rnn_forward(&c.cfg, &c.inputs(), None, false).is_err());
}

/// Float32 (the AVX-512 product and gate math, hidden units cut among two threads) against
/// float64 (the plain loops, one thread) at sizes that take the threaded path, with ragged
/// lengths and both directions; float32 on one thread and on two gives the same bits.
#[test]
fn float32_threads_match_float64() {
    let pool = |t: usize| {
        rayon::ThreadPoolBuilder::new()
            .num_threads(t)
            .build()
            .unwrap()
    };
    for (mode, ragged) in MODES.into_iter().flat_map(|m| [(m, false), (m, true)]) {
        let d = RnnDims {
            hidden: 128,
            ..dims(mode, 2, 2, 5, 24, 9)
        };
        let mut c = Case::new(d, 100);
        c.params.iter_mut().for_each(|v| *v *= 0.2);
        if ragged {
            c.lens = (0..d.batch).map(|s| 1 + s % d.seq).collect();
        }
        let o = c.forward();
        let dy = values(o.y.len(), 101);
        let dhy = values(o.hy.len(), 102);
        let lstm = mode == RnnMode::Lstm;
        let g = rnn_backward(
            &c.cfg,
            &c.inputs(),
            &o.y,
            &o.reserve,
            false,
            &dy,
            Some(&dhy),
            lstm.then_some(&dhy[..]),
            true,
        )
        .unwrap();
        let f = |v: &[f64]| v.iter().map(|&x| x as f32).collect::<Vec<f32>>();
        let (x, params, h0, c0, dy32, dhy32) =
            (f(&c.x), f(&c.params), f(&c.h0), f(&c.c0), f(&dy), f(&dhy));
        let run32 = || {
            let inp = RnnInputs {
                x: &x,
                params: &params,
                h0: &h0,
                c0: lstm.then_some(&c0[..]),
                lens: &c.lens,
            };
            let o = rnn_forward(&c.cfg, &inp, None, true).unwrap();
            let g = rnn_backward(
                &c.cfg,
                &inp,
                &o.y,
                &o.reserve,
                false,
                &dy32,
                Some(&dhy32),
                lstm.then_some(&dhy32[..]),
                true,
            )
            .unwrap();
            (o, g)
        };
        let (o1, g1) = pool(1).install(run32);
        let (o2, g2) = pool(2).install(run32);
        assert_eq!(
            (&o1, &g1),
            (&o2, &g2),
            "{mode:?} {ragged}: one thread against two"
        );
        let near = |what: &str, a: &[f32], b: &[f64]| {
            assert_eq!(a.len(), b.len(), "{mode:?} {ragged} {what}");
            for (j, (&x, &y)) in a.iter().zip(b).enumerate() {
                assert!(
                    (f64::from(x) - y).abs() <= 2e-4 * (1.0 + y.abs()),
                    "{mode:?} {ragged} {what}[{j}]: float32 {x}, float64 {y}"
                );
            }
        };
        near("y", &o2.y, &o.y);
        near("hy", &o2.hy, &o.hy);
        near("cy", &o2.cy, &o.cy);
        near("dx", &g2.dx, &g.dx);
        near("dparams", &g2.dparams, &g.dparams);
        near("dh0", &g2.dh0, &g.dh0);
        near("dc0", &g2.dc0, &g.dc0);
    }
}

/// Weights packed once serve any number of steps of every mode and direction, with the
/// same results as packing per call; they fit only the sizes they were packed for.
#[test]
fn packed_weights_match_packing_per_call() {
    for mode in [RnnMode::Lstm, RnnMode::Gru, RnnMode::RnnTanh] {
        let mut c = Case::new(dims(mode, 2, 2, 4, 2, 5), 120);
        let packed = PackedWeights::new(&c.cfg.dims, &c.params).unwrap();
        let close = |a: &[f64], b: &[f64]| {
            a.len() == b.len() && a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-12)
        };
        for seq in [4, 1, 7] {
            c.cfg.dims.seq = seq;
            c.x = values(seq * 2 * 5, 121);
            c.lens = vec![seq, seq.div_ceil(2)];
            let fresh = rnn_forward(&c.cfg, &c.inputs(), None, false).unwrap();
            let kept = rnn_forward_packed(&c.cfg, &c.inputs(), None, false, Some(&packed)).unwrap();
            assert!(
                close(&fresh.y, &kept.y) && close(&fresh.hy, &kept.hy),
                "{mode:?} T={seq}"
            );
            assert!(close(&fresh.cy, &kept.cy));
        }
        assert!(!packed.fits(&RnnDims {
            batch: 3,
            ..c.cfg.dims
        }));
        assert!(PackedWeights::new(&c.cfg.dims, &c.params[1..]).is_err());
    }
}
