//! Gradient and behaviour tests for the norm, loss, softmax and LeakyReLU operators:
//! finite differences against backward (loss layers through the objective whose derivative is
//! what MXNet's backward computes), shape inference from the data shape, BatchNorm's moving
//! statistics, and the seeded randomness of Dropout and rrelu.

// Helpers outside #[test] functions unwrap too: a failure here is a failed test.
#![allow(clippy::unwrap_used, clippy::type_complexity)]

use mxfn_core::executor::{Executor, GradReq};
use mxfn_core::ops::testing::{random_array, GradCheck, Objective};
use mxfn_core::ops::{lookup, OpCtx, Operator};
use mxfn_core::symbol::Symbol;
use mxfn_core::tensor::random;
use mxfn_core::{Context, DType, NDArray};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

fn arr(shape: &[usize], seed: u64) -> NDArray {
    random_array(shape, -1.0, 1.0, seed)
}

/// Values in [-1, -0.1] ∪ [0.1, 1]: away from the kinks of the relu family.
fn away_from_zero(shape: &[usize], seed: u64) -> NDArray {
    let v: Vec<f32> = arr(shape, seed)
        .to_f64_vec()
        .iter()
        .map(|&x| (x * 0.9 + 0.1f64.copysign(x)) as f32)
        .collect();
    NDArray::from_vec(shape, v).unwrap()
}

fn from(shape: &[usize], v: &[f64]) -> NDArray {
    NDArray::from_vec(shape, v.iter().map(|&x| x as f32).collect()).unwrap()
}

/// Class labels in 0..classes.
fn labels(shape: &[usize], classes: usize, seed: u64) -> NDArray {
    let v: Vec<f64> = random_array(shape, 0.0, classes as f32, seed)
        .to_f64_vec()
        .iter()
        .map(|x| x.floor())
        .collect();
    from(shape, &v)
}

fn instance(op: &str, attrs: &[(&str, &str)]) -> Arc<dyn Operator> {
    let attrs: BTreeMap<String, String> = attrs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    lookup(op).unwrap().instantiate("t", &attrs).unwrap()
}

fn ctx(is_train: bool) -> OpCtx<'static> {
    OpCtx {
        is_train,
        node: "t",
        need_grad: &[],
    }
}

fn close(a: &[f64], b: &[f64], tol: f64) {
    assert_eq!(a.len(), b.len());
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        assert!((x - y).abs() <= tol * (1.0 + y.abs()), "[{i}]: {x} vs {y}");
    }
}

fn infer(sym: &Symbol, data: &[usize]) -> mxfn_core::symbol::InferredShapes {
    sym.infer_shape(&HashMap::from([("data".to_string(), data.to_vec())]))
        .unwrap()
}

fn data_op(op: &str, attrs: &[(&str, &str)]) -> Symbol {
    Symbol::create(
        op,
        Some("op"),
        attrs,
        vec![(None, Symbol::variable("data"))],
    )
    .unwrap()
}

// ---------------------------------------------------------------------------------------------
// BatchNorm, LayerNorm, Dropout

fn bn_aux(c: usize, seed: u64) -> Vec<NDArray> {
    vec![
        random_array(&[c], -0.5, 0.5, seed),
        random_array(&[c], 0.5, 1.5, seed + 1),
    ]
}

#[test]
fn batch_norm_gradients() {
    let cases: Vec<(Vec<(&str, &str)>, Vec<usize>, usize, bool)> = vec![
        (vec![("fix_gamma", "False")], vec![4, 3], 3, true),
        (vec![], vec![2, 3, 2, 2], 3, true),
        (
            vec![
                ("fix_gamma", "False"),
                ("axis", "-1"),
                ("eps", "1e-5"),
                ("momentum", "0.8"),
            ],
            vec![2, 4, 3],
            3,
            true,
        ),
        (
            vec![("fix_gamma", "False"), ("use_global_stats", "True")],
            vec![2, 3, 2, 2],
            3,
            true,
        ),
        (vec![("fix_gamma", "False")], vec![3, 2, 4], 2, false),
        (
            vec![("fix_gamma", "False"), ("output_mean_var", "True")],
            vec![5, 2],
            2,
            false,
        ),
    ];
    for (k, (attrs, shape, c, is_train)) in cases.into_iter().enumerate() {
        let seed = 10 * k as u64;
        let mut check = GradCheck::new(
            "BatchNorm",
            &attrs,
            vec![
                arr(&shape, seed + 1),
                random_array(&[c], 0.5, 1.5, seed + 2),
                arr(&[c], seed + 3),
            ],
        );
        check.aux = bn_aux(c, seed + 4);
        check.is_train = is_train;
        check
            .run()
            .unwrap_or_else(|e| panic!("BatchNorm {attrs:?} {shape:?}: {e}"));
    }
}

#[test]
fn batch_norm_fix_gamma_zero_gradient_and_moving_stats() {
    let sym = data_op("BatchNorm", &[("momentum", "0.75")]);
    let (args, outs, aux) = infer(&sym, &[4, 3, 2]);
    assert_eq!(sym.list_arguments(), ["data", "op_gamma", "op_beta"]);
    assert_eq!(
        sym.list_auxiliary_states(),
        ["op_moving_mean", "op_moving_var"]
    );
    assert_eq!(args, vec![vec![4, 3, 2], vec![3], vec![3]]);
    assert_eq!(aux, vec![vec![3], vec![3]]);
    assert_eq!(outs, vec![vec![4, 3, 2]]);

    let shapes = HashMap::from([("data".to_string(), vec![4, 3, 2])]);
    let mut exe = Executor::simple_bind(
        &sym,
        Context::cpu(0),
        &shapes,
        &HashMap::new(),
        &HashMap::new(),
        GradReq::Write,
    )
    .unwrap();
    let x = arr(&[4, 3, 2], 7);
    exe.set_arg("data", x.clone()).unwrap();
    exe.set_arg("op_gamma", from(&[3], &[3.0, -2.0, 5.0]))
        .unwrap();
    exe.set_arg("op_beta", from(&[3], &[0.1, 0.2, 0.3]))
        .unwrap();
    let (mm, mv) = (from(&[3], &[0.5, -0.5, 0.0]), from(&[3], &[2.0, 1.0, 0.5]));
    exe.set_aux("op_moving_mean", mm.clone()).unwrap();
    exe.set_aux("op_moving_var", mv.clone()).unwrap();

    // Forward-only calls (training or not) leave the moving statistics alone.
    exe.forward(true).unwrap();
    exe.forward(false).unwrap();
    assert_eq!(exe.aux_arrays[0].to_f64_vec(), mm.to_f64_vec());
    assert_eq!(exe.aux_arrays[1].to_f64_vec(), mv.to_f64_vec());

    // A training step folds the batch statistics (biased variance) in during backward.
    exe.forward(true).unwrap();
    let out = exe.outputs()[0].to_f64_vec();
    exe.backward(&[arr(&[4, 3, 2], 8)]).unwrap();
    let xv = x.to_f64_vec();
    for ch in 0..3 {
        let vals: Vec<f64> = (0..4)
            .flat_map(|n| (0..2).map(move |i| (n, i)))
            .map(|(n, i)| xv[n * 6 + ch * 2 + i])
            .collect();
        let mean = vals.iter().sum::<f64>() / 8.0;
        let var = vals.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / 8.0;
        let want_m = 0.75 * mm.to_f64_vec()[ch] + 0.25 * mean;
        let want_v = 0.75 * mv.to_f64_vec()[ch] + 0.25 * var;
        assert!((exe.aux_arrays[0].to_f64_vec()[ch] - want_m).abs() < 1e-5);
        assert!((exe.aux_arrays[1].to_f64_vec()[ch] - want_v).abs() < 1e-5);
        // fix_gamma: gamma is ones in forward whatever is stored.
        let b = [0.1, 0.2, 0.3][ch];
        for (k, v) in vals.iter().enumerate() {
            let (n, i) = (k / 2, k % 2);
            let y = (v - mean) / (var + 1e-3).sqrt() + b;
            assert!((out[n * 6 + ch * 2 + i] - y).abs() < 1e-4);
        }
    }
    assert_eq!(
        exe.grad("op_gamma").unwrap().unwrap().to_f64_vec(),
        vec![0.0; 3]
    );

    // With output_mean_var the batch mean and variance are visible outputs.
    let sym = data_op("BatchNorm", &[("output_mean_var", "True")]);
    assert_eq!(sym.list_outputs(), ["op_output", "op_mean", "op_var"]);
    let inst = instance("BatchNorm", &[("output_mean_var", "True")]);
    let outs = inst
        .forward(
            &ctx(true),
            &[
                from(&[2, 1], &[1.0, 3.0]),
                from(&[1], &[1.0]),
                from(&[1], &[0.0]),
            ],
            &mut bn_aux(1, 3),
        )
        .unwrap();
    assert_eq!(outs[1].to_f64_vec(), vec![2.0]);
    assert_eq!(outs[2].to_f64_vec(), vec![1.0]);
}

#[test]
fn batch_norm_bad_axis_names_node() {
    let sym = data_op("BatchNorm", &[("axis", "3")]);
    let err = sym
        .infer_shape(&HashMap::from([("data".to_string(), vec![2, 3])]))
        .unwrap_err()
        .to_string();
    assert!(err.contains("axis") && err.contains("op"), "{err}");
}

#[test]
fn layer_norm_gradients() {
    for (k, (attrs, shape, n)) in [
        (vec![], vec![3, 5], 5),
        (vec![("axis", "1")], vec![2, 4, 3], 4),
        (vec![("axis", "0"), ("eps", "0.001")], vec![3, 2, 2], 3),
        (vec![("axis", "-1")], vec![2, 3, 4], 4),
    ]
    .into_iter()
    .enumerate()
    {
        let seed = 100 + 10 * k as u64;
        GradCheck::new(
            "LayerNorm",
            &attrs,
            vec![
                arr(&shape, seed),
                random_array(&[n], 0.5, 1.5, seed + 1),
                arr(&[n], seed + 2),
            ],
        )
        .run()
        .unwrap_or_else(|e| panic!("LayerNorm {attrs:?}: {e}"));
    }
    // Hidden (or, with output_mean_var, visible) mean and std keep the axis as 1.
    let sym = data_op("LayerNorm", &[("axis", "1"), ("output_mean_var", "True")]);
    let (args, outs, _) = infer(&sym, &[2, 4, 3]);
    assert_eq!(args, vec![vec![2, 4, 3], vec![4], vec![4]]);
    assert_eq!(outs, vec![vec![2, 4, 3], vec![2, 1, 3], vec![2, 1, 3]]);
    let inst = instance("LayerNorm", &[]);
    let outs = inst
        .forward(
            &ctx(false),
            &[
                from(&[1, 2], &[1.0, 3.0]),
                from(&[2], &[1.0, 1.0]),
                from(&[2], &[0.0, 0.0]),
            ],
            &mut [],
        )
        .unwrap();
    assert_eq!(outs[1].to_f64_vec(), vec![2.0]);
    assert!((outs[2].to_f64_vec()[0] - (1.0f64 + 1e-5).sqrt()).abs() < 1e-6);
}

#[test]
fn dropout_inference_is_identity_with_gradient() {
    for (attrs, shape) in [
        (vec![("p", "0.5")], vec![3, 4]),
        (vec![("p", "0.2"), ("axes", "(1,)")], vec![2, 3, 2]),
    ] {
        let mut check = GradCheck::new("Dropout", &attrs, vec![arr(&shape, 5)]);
        check.is_train = false;
        check.run().unwrap();
    }
    // p = 0 in training is the identity too.
    GradCheck::new("Dropout", &[("p", "0")], vec![arr(&[2, 5], 6)])
        .run()
        .unwrap();
}

/// An inactive Dropout (inference, mode "training") passes its data through and gives a mask
/// of ones of the data's shape, whatever the shape of the pass before; a consumer writing to
/// the mask it got leaves the next pass's mask ones.
#[test]
fn inactive_dropout_masks_are_ones_of_each_shape() {
    let op = instance("Dropout", &[("p", "0.4")]);
    for shape in [vec![2, 3], vec![2, 3], vec![4, 5, 6], vec![2, 3]] {
        let x = arr(&shape, 4);
        let mut outs = op
            .forward(&ctx(false), std::slice::from_ref(&x), &mut [])
            .unwrap();
        assert_eq!(outs[0].to_f64_vec(), x.to_f64_vec());
        assert_eq!(outs[1].shape(), &shape[..]);
        assert!(outs[1].to_f64_vec().iter().all(|&m| m == 1.0));
        outs[1].f32s_mut("mask").unwrap().fill(7.0);
    }
}

// Every test that draws from the global stream lives here, so no other test in this binary
// can take tickets in between a seed and the draws it should reproduce.
#[test]
fn seeded_randomness_dropout_and_rrelu() {
    let shape = [100, 200];
    let x = away_from_zero(&shape, 1);
    let g = arr(&shape, 2);
    let xv = x.to_f64_vec();
    let gv = g.to_f64_vec();
    for (attrs, train) in [
        (vec![("p", "0.3")], true),
        (vec![("p", "0.3"), ("mode", "always")], false),
    ] {
        let op = instance("Dropout", &attrs);
        random::seed(7);
        let outs = op
            .forward(&ctx(train), std::slice::from_ref(&x), &mut [])
            .unwrap();
        let (y, mask) = (outs[0].to_f64_vec(), outs[1].to_f64_vec());
        let scale = 1.0 / 0.7;
        assert!(mask.iter().all(|&m| m == 0.0 || (m - scale).abs() < 1e-6));
        let kept = mask.iter().filter(|&&m| m > 0.0).count() as f64 / mask.len() as f64;
        assert!((kept - 0.7).abs() < 0.02, "kept {kept}");
        close(
            &y,
            &xv.iter().zip(&mask).map(|(a, m)| a * m).collect::<Vec<_>>(),
            1e-6,
        );
        let dx = op
            .backward(
                &ctx(train),
                &[g.clone(), NDArray::zeros(&shape, DType::Float32)],
                std::slice::from_ref(&x),
                &outs,
                &mut [],
            )
            .unwrap();
        close(
            &dx[0].as_ref().unwrap().to_f64_vec(),
            &gv.iter().zip(&mask).map(|(a, m)| a * m).collect::<Vec<_>>(),
            1e-6,
        );
        // Same seed, same mask; the next draw differs.
        random::seed(7);
        let again = op
            .forward(&ctx(train), std::slice::from_ref(&x), &mut [])
            .unwrap();
        assert_eq!(again[1].to_f64_vec(), mask);
        let next = op
            .forward(&ctx(train), std::slice::from_ref(&x), &mut [])
            .unwrap();
        assert_ne!(next[1].to_f64_vec(), mask);
    }
    // Shared axes: one mask value along axis 1.
    let op = instance("Dropout", &[("p", "0.5"), ("axes", "(1,)")]);
    let outs = op
        .forward(&ctx(true), &[arr(&[4, 3, 5], 3)], &mut [])
        .unwrap();
    let m = outs[1].to_f64_vec();
    for n in 0..4 {
        for i in 0..5 {
            let v: Vec<f64> = (0..3).map(|c| m[n * 15 + c * 5 + i]).collect();
            assert!(v.iter().all(|&a| a == v[0]));
        }
    }

    // rrelu in training: a slope per element in [lower, upper), reproducible by seed; backward
    // uses the same slopes.
    let op = instance(
        "LeakyReLU",
        &[
            ("act_type", "rrelu"),
            ("lower_bound", "0.1"),
            ("upper_bound", "0.3"),
        ],
    );
    random::seed(11);
    let outs = op
        .forward(&ctx(true), std::slice::from_ref(&x), &mut [])
        .unwrap();
    let (y, s) = (outs[0].to_f64_vec(), outs[1].to_f64_vec());
    assert!(s.iter().all(|&v| (0.1..0.3 + 1e-7).contains(&v)));
    let mean = s.iter().sum::<f64>() / s.len() as f64;
    assert!((mean - 0.2).abs() < 0.01, "mean slope {mean}");
    for i in 0..xv.len() {
        let want = if xv[i] > 0.0 { xv[i] } else { s[i] * xv[i] };
        assert!((y[i] - want).abs() < 1e-6);
    }
    let dx = op
        .backward(
            &ctx(true),
            &[g.clone(), NDArray::zeros(&shape, DType::Float32)],
            std::slice::from_ref(&x),
            &outs,
            &mut [],
        )
        .unwrap();
    let dx = dx[0].as_ref().unwrap().to_f64_vec();
    for i in 0..xv.len() {
        let want = if xv[i] > 0.0 { gv[i] } else { s[i] * gv[i] };
        assert!((dx[i] - want).abs() < 1e-6);
    }
    random::seed(11);
    let again = op
        .forward(&ctx(true), std::slice::from_ref(&x), &mut [])
        .unwrap();
    assert_eq!(again[1].to_f64_vec(), s);
}

// ---------------------------------------------------------------------------------------------
// softmax, log_softmax, SoftmaxActivation

#[test]
fn softmax_gradients() {
    for op in ["softmax", "log_softmax"] {
        for (k, (attrs, shape)) in [
            (vec![], vec![3, 5]),
            (vec![("axis", "1")], vec![2, 4, 3]),
            (vec![("axis", "0")], vec![3, 2, 2]),
            (vec![("temperature", "2.0")], vec![4, 3]),
            (vec![("axis", "-2"), ("temperature", "0.5")], vec![2, 3, 2]),
        ]
        .into_iter()
        .enumerate()
        {
            GradCheck::new(op, &attrs, vec![arr(&shape, 200 + k as u64)])
                .run()
                .unwrap_or_else(|e| panic!("{op} {attrs:?}: {e}"));
        }
        // use_length: a length per slice; the masked tail outputs 0 and gets no gradient.
        for (attrs, shape, len) in [
            (vec![("use_length", "True")], vec![2, 5], vec![3.0, 5.0]),
            (
                vec![("use_length", "True"), ("axis", "1")],
                vec![2, 4, 2],
                vec![2.0, 4.0, 1.0, 3.0],
            ),
        ] {
            let lshape: Vec<usize> = if shape.len() == 2 {
                vec![2]
            } else {
                vec![2, 2]
            };
            let mut check = GradCheck::new(op, &attrs, vec![arr(&shape, 9), from(&lshape, &len)]);
            check.skip = vec![1];
            check
                .run()
                .unwrap_or_else(|e| panic!("{op} {attrs:?}: {e}"));
        }
    }
    let inst = instance("softmax", &[("use_length", "True")]);
    let y = inst
        .forward(
            &ctx(false),
            &[arr(&[2, 4], 3), from(&[2], &[2.0, 0.0])],
            &mut [],
        )
        .unwrap()[0]
        .to_f64_vec();
    assert!((y[0] + y[1] - 1.0).abs() < 1e-6 && y[2..].iter().all(|&v| v == 0.0));
    for (attrs, shape) in [
        (vec![], vec![2, 3, 2]),
        (vec![("mode", "channel")], vec![2, 3, 2, 2]),
    ] {
        GradCheck::new("SoftmaxActivation", &attrs, vec![arr(&shape, 13)])
            .run()
            .unwrap_or_else(|e| panic!("SoftmaxActivation {attrs:?}: {e}"));
    }
}

// ---------------------------------------------------------------------------------------------
// SoftmaxOutput and the regression outputs

/// The cross-entropy whose derivative is SoftmaxOutput's gradient: scale/norm · Σ over
/// labelled positions of −Σ_c t_c·ln p_c, t the (smoothed) one-hot of the label; positions
/// labelled `ignore` are left out. `(outer, classes, inner)` is the softmax layout.
fn cross_entropy(
    (outer, n, inner): (usize, usize, usize),
    scale: f64,
    norm: f64,
    alpha: f64,
    ignore: Option<i64>,
) -> Objective {
    Box::new(move |outs: &[NDArray], ins: &[NDArray]| {
        let p = outs[0].to_f64_vec();
        let l = ins[1].to_f64_vec();
        let mut total = 0.0;
        for o in 0..outer {
            for j in 0..inner {
                let k = l[o * inner + j] as i64;
                if ignore == Some(k) {
                    continue;
                }
                for c in 0..n {
                    let t = if c as i64 == k {
                        1.0 - alpha
                    } else {
                        alpha / (n - 1) as f64
                    };
                    total -= t * p[o * n * inner + c * inner + j].ln();
                }
            }
        }
        total * scale / norm
    })
}

#[test]
fn softmax_output_gradients() {
    // (attrs, data shape, label, layout, scale, normaliser, alpha, ignore)
    type Case = (
        Vec<(&'static str, &'static str)>,
        Vec<usize>,
        NDArray,
        (usize, usize, usize),
        f64,
        f64,
        f64,
        Option<i64>,
    );
    let ignore_labels = from(&[6], &[0.0, 1.0, 1.0, 3.0, 2.0, 1.0]);
    let cases: Vec<Case> = vec![
        (
            vec![],
            vec![4, 5],
            labels(&[4], 5, 1),
            (4, 5, 1),
            1.0,
            1.0,
            0.0,
            None,
        ),
        (
            vec![("grad_scale", "2.0")],
            vec![4, 3],
            labels(&[4], 3, 2),
            (4, 3, 1),
            2.0,
            1.0,
            0.0,
            None,
        ),
        (
            vec![("normalization", "batch")],
            vec![5, 3],
            labels(&[5], 3, 3),
            (5, 3, 1),
            1.0,
            5.0,
            0.0,
            None,
        ),
        (
            vec![("use_ignore", "True"), ("ignore_label", "1")],
            vec![6, 4],
            ignore_labels.clone(),
            (6, 4, 1),
            1.0,
            1.0,
            0.0,
            Some(1),
        ),
        (
            // "valid" divides by the labels that are not ignore_label (3 of 6 here).
            vec![
                ("use_ignore", "True"),
                ("ignore_label", "1"),
                ("normalization", "valid"),
            ],
            vec![6, 4],
            ignore_labels,
            (6, 4, 1),
            1.0,
            3.0,
            0.0,
            Some(1),
        ),
        (
            vec![("multi_output", "True")],
            vec![2, 4, 3],
            labels(&[2, 3], 4, 4),
            (2, 4, 3),
            1.0,
            3.0,
            0.0,
            None,
        ),
        (
            vec![
                ("multi_output", "True"),
                ("normalization", "batch"),
                ("grad_scale", "3"),
            ],
            vec![2, 3, 2, 2],
            labels(&[2, 4], 3, 5),
            (2, 3, 4),
            3.0,
            8.0,
            0.0,
            None,
        ),
        (
            vec![("preserve_shape", "True"), ("normalization", "batch")],
            vec![2, 3, 4],
            labels(&[2, 3], 4, 6),
            (6, 4, 1),
            1.0,
            6.0,
            0.0,
            None,
        ),
        (
            // Rank > 2 without multi_output / preserve_shape: flattened to (N, −1).
            vec![],
            vec![2, 2, 3],
            labels(&[2], 6, 7),
            (2, 6, 1),
            1.0,
            1.0,
            0.0,
            None,
        ),
        (
            vec![("smooth_alpha", "0.2")],
            vec![3, 4],
            labels(&[3], 4, 8),
            (3, 4, 1),
            1.0,
            1.0,
            0.2,
            None,
        ),
    ];
    for (k, (attrs, shape, label, layout, scale, norm, alpha, ignore)) in
        cases.into_iter().enumerate()
    {
        let mut check = GradCheck::new(
            "SoftmaxOutput",
            &attrs,
            vec![arr(&shape, 300 + k as u64), label],
        );
        check.skip = vec![1];
        check.objective = Some(cross_entropy(layout, scale, norm, alpha, ignore));
        check
            .run()
            .unwrap_or_else(|e| panic!("SoftmaxOutput {attrs:?}: {e}"));
    }

    // Probability labels (the data's shape): gradient scale·(p − label), no normaliser.
    let probs = from(&[2, 3], &[0.2, 0.5, 0.3, 0.6, 0.1, 0.3]);
    let mut check = GradCheck::new(
        "SoftmaxOutput",
        &[("grad_scale", "1.5"), ("normalization", "batch")],
        vec![arr(&[2, 3], 9), probs],
    );
    check.skip = vec![1];
    check.objective = Some(Box::new(|outs: &[NDArray], ins: &[NDArray]| {
        let (p, t) = (outs[0].to_f64_vec(), ins[1].to_f64_vec());
        -1.5 * p.iter().zip(&t).map(|(p, t)| t * p.ln()).sum::<f64>()
    }));
    check.run().unwrap();

    // out_grad multiplies by the head gradient; otherwise head gradients are ignored.
    for out_grad in ["False", "True"] {
        let op = instance("SoftmaxOutput", &[("out_grad", out_grad)]);
        assert!(op.is_loss());
        let ins = [arr(&[2, 3], 10), from(&[2], &[1.0, 2.0])];
        let outs = op.forward(&ctx(true), &ins, &mut []).unwrap();
        let head = from(&[2, 3], &[2.0; 6]);
        let g = op
            .backward(&ctx(true), &[head], &ins, &outs, &mut [])
            .unwrap();
        assert!(g[1].is_none(), "the label gets no gradient");
        let p = outs[0].to_f64_vec();
        let f = if out_grad == "True" { 2.0 } else { 1.0 };
        let want: Vec<f64> = (0..6)
            .map(|i| f * (p[i] - if i == 1 || i == 5 { 1.0 } else { 0.0 }))
            .collect();
        close(&g[0].as_ref().unwrap().to_f64_vec(), &want, 1e-6);
    }
}

#[test]
fn softmax_output_label_shapes_from_data() {
    for (attrs, data, label) in [
        (vec![], vec![4, 5], vec![4]),
        (
            vec![("multi_output", "True")],
            vec![2, 3, 4, 5],
            vec![2, 20],
        ),
        (vec![("preserve_shape", "True")], vec![2, 3, 4], vec![2, 3]),
        (vec![], vec![2, 3, 4], vec![2, 3]),
    ] {
        let sym = Symbol::create(
            "SoftmaxOutput",
            Some("softmax"),
            &attrs,
            vec![(None, Symbol::variable("data"))],
        )
        .unwrap();
        assert_eq!(sym.list_arguments(), ["data", "softmax_label"]);
        assert_eq!(sym.list_outputs(), ["softmax_output"]);
        let (args, outs, _) = infer(&sym, &data);
        assert_eq!(args, vec![data.clone(), label]);
        assert_eq!(outs, vec![data]);
    }
    // The alias and a wrong label shape (naming node and argument).
    let sym = Symbol::create(
        "Softmax",
        Some("sm"),
        &[],
        vec![(None, Symbol::variable("data"))],
    )
    .unwrap();
    let err = sym
        .infer_shape(&HashMap::from([
            ("data".to_string(), vec![4, 5]),
            ("sm_label".to_string(), vec![5]),
        ]))
        .unwrap_err()
        .to_string();
    assert!(err.contains("sm") && err.contains("label"), "{err}");
}

fn regression_objective(kind: &'static str, scale: f64, per_sample: f64) -> Objective {
    Box::new(move |outs: &[NDArray], ins: &[NDArray]| {
        let (y, l) = (outs[0].to_f64_vec(), ins[1].to_f64_vec());
        let s: f64 = y
            .iter()
            .zip(&l)
            .map(|(y, l)| match kind {
                "linear" => 0.5 * (y - l).powi(2),
                "logistic" => -(l * y.ln() + (1.0 - l) * (1.0 - y).ln()),
                _ => (y - l).abs(),
            })
            .sum();
        s * scale / per_sample
    })
}

#[test]
fn regression_output_gradients() {
    for (op, kind) in [
        ("LinearRegressionOutput", "linear"),
        ("LogisticRegressionOutput", "logistic"),
        ("MAERegressionOutput", "mae"),
    ] {
        for (k, (attrs, data, label, scale)) in [
            (vec![], vec![4, 3], vec![4, 3], 1.0),
            (vec![("grad_scale", "2.5")], vec![3, 2, 2], vec![3, 4], 2.5),
            (vec![], vec![5, 1], vec![5], 1.0),
        ]
        .into_iter()
        .enumerate()
        {
            let x = arr(&data, 400 + k as u64);
            // Labels: in (0, 1) for the logistic loss; elsewhere x ± 0.3, away from MAE's kink.
            let lv: Vec<f64> = if kind == "logistic" {
                random_array(&label, 0.05, 0.95, 7).to_f64_vec()
            } else {
                x.to_f64_vec()
                    .iter()
                    .enumerate()
                    .map(|(i, v)| v + if i % 2 == 0 { 0.3 } else { -0.3 })
                    .collect()
            };
            let per_sample = (label.iter().product::<usize>() / label[0]) as f64;
            let mut check = GradCheck::new(op, &attrs, vec![x, from(&label, &lv)]);
            check.skip = vec![1];
            check.objective = Some(regression_objective(kind, scale, per_sample));
            check
                .run()
                .unwrap_or_else(|e| panic!("{op} {attrs:?} {data:?}: {e}"));
        }
        // Label shapes inferred from the data: (N,) for (N, 1), else the data's shape.
        let sym =
            Symbol::create(op, Some("reg"), &[], vec![(None, Symbol::variable("data"))]).unwrap();
        assert_eq!(sym.list_arguments(), ["data", "reg_label"]);
        assert_eq!(infer(&sym, &[6, 1]).0, vec![vec![6, 1], vec![6]]);
        assert_eq!(infer(&sym, &[6, 2]).0, vec![vec![6, 2], vec![6, 2]]);
        assert!(instance(op, &[]).is_loss());
    }
}

// ---------------------------------------------------------------------------------------------
// LeakyReLU

#[test]
fn leaky_relu_gradients() {
    for (k, attrs) in [
        vec![],
        vec![("act_type", "leaky"), ("slope", "0.1")],
        vec![("act_type", "elu")],
        vec![("act_type", "elu"), ("slope", "0.5")],
        vec![("act_type", "gelu")],
        vec![("act_type", "rrelu")],
    ]
    .into_iter()
    .enumerate()
    {
        // rrelu checked in inference: the fixed slope (lower + upper) / 2.
        let mut check = GradCheck::new(
            "LeakyReLU",
            &attrs,
            vec![away_from_zero(&[3, 4], 500 + k as u64)],
        );
        check.is_train = !attrs.contains(&("act_type", "rrelu"));
        check
            .run()
            .unwrap_or_else(|e| panic!("LeakyReLU {attrs:?}: {e}"));
    }
    // gelu across zero (smooth there) and in 3-D.
    GradCheck::new(
        "LeakyReLU",
        &[("act_type", "gelu")],
        vec![arr(&[2, 3, 4], 9)],
    )
    .run()
    .unwrap();
    // selu: the true derivative for x > 0; for x ≤ 0 MXNet's λ·(y + α) (not y + λ·α).
    GradCheck::new(
        "LeakyReLU",
        &[("act_type", "selu")],
        vec![random_array(&[3, 4], 0.1, 2.0, 3)],
    )
    .run()
    .unwrap();
    let (lambda, alpha) = (1.0507009873554805f64, 1.6732632423543772f64);
    let op = instance("LeakyReLU", &[("act_type", "selu")]);
    let x = random_array(&[8], -2.0, -0.1, 4);
    let y = op
        .forward(&ctx(true), std::slice::from_ref(&x), &mut [])
        .unwrap();
    let g = op
        .backward(
            &ctx(true),
            &[NDArray::ones(&[8], DType::Float32)],
            std::slice::from_ref(&x),
            &y,
            &mut [],
        )
        .unwrap();
    let yv = y[0].to_f64_vec();
    let want_y: Vec<f64> = x
        .to_f64_vec()
        .iter()
        .map(|v| lambda * alpha * v.exp_m1())
        .collect();
    close(&yv, &want_y, 1e-6);
    let want_g: Vec<f64> = yv.iter().map(|y| lambda * (y + alpha)).collect();
    close(&g[0].as_ref().unwrap().to_f64_vec(), &want_g, 1e-6);

    // prelu: gamma (C,) along axis 1, inferred from the data; or a single broadcast value.
    for (shape, gshape) in [
        (vec![5, 4], vec![4]),
        (vec![2, 3, 2, 2], vec![3]),
        (vec![2, 3, 2], vec![1]),
    ] {
        GradCheck::new(
            "LeakyReLU",
            &[("act_type", "prelu")],
            vec![
                away_from_zero(&shape, 600),
                random_array(&gshape, 0.1, 0.5, 601),
            ],
        )
        .run()
        .unwrap_or_else(|e| panic!("prelu {shape:?}: {e}"));
    }
    let sym = Symbol::create(
        "LeakyReLU",
        Some("lrelu"),
        &[("act_type", "prelu")],
        vec![(None, Symbol::variable("data"))],
    )
    .unwrap();
    assert_eq!(sym.list_arguments(), ["data", "lrelu_gamma"]);
    assert_eq!(
        infer(&sym, &[2, 3, 4, 4]).0,
        vec![vec![2, 3, 4, 4], vec![3]]
    );
    assert_eq!(lookup("LeakyReLU").unwrap().python_name(), "leaky_relu");
}

// ---------------------------------------------------------------------------------------------
// Large inputs: the parallel paths (several row groups, parallel channels) agree with a plain
// float64 computation.

#[test]
fn large_inputs_take_parallel_paths_and_agree_with_reference() {
    for shape in [vec![3000usize, 20], vec![8, 4, 40, 40]] {
        let c = shape[1];
        let inner: usize = shape[2..].iter().product();
        let x = arr(&shape, 21);
        let g = arr(&shape, 22);
        let (xv, gv) = (x.to_f64_vec(), g.to_f64_vec());
        let op = instance("BatchNorm", &[("fix_gamma", "False")]);
        let ins = [
            x.clone(),
            NDArray::ones(&[c], DType::Float32),
            NDArray::zeros(&[c], DType::Float32),
        ];
        let mut aux = bn_aux(c, 5);
        let outs = op.forward(&ctx(true), &ins, &mut aux).unwrap();
        let zeros = NDArray::zeros(&[c], DType::Float32);
        let grads = op
            .backward(
                &ctx(true),
                &[g.clone(), zeros.clone(), zeros],
                &ins,
                &outs,
                &mut aux,
            )
            .unwrap();
        let y = outs[0].to_f64_vec();
        let dbeta = grads[2].as_ref().unwrap().to_f64_vec();
        let channel = |i: usize| (i / inner) % c;
        for ch in [0, c / 2, c - 1] {
            let idx: Vec<usize> = (0..xv.len()).filter(|&i| channel(i) == ch).collect();
            let m = idx.len() as f64;
            let mean = idx.iter().map(|&i| xv[i]).sum::<f64>() / m;
            let var = idx.iter().map(|&i| (xv[i] - mean).powi(2)).sum::<f64>() / m;
            for &i in idx.iter().step_by(97) {
                assert!((y[i] - (xv[i] - mean) / (var + 1e-3).sqrt()).abs() < 1e-4);
            }
            let sum_g: f64 = idx.iter().map(|&i| gv[i]).sum();
            assert!((dbeta[ch] - sum_g).abs() < 1e-3, "{} vs {sum_g}", dbeta[ch]);
        }
    }
    // LayerNorm and softmax over the last axis of many rows.
    let x = arr(&[5000, 12], 23);
    let xv = x.to_f64_vec();
    let ln = instance("LayerNorm", &[])
        .forward(
            &ctx(true),
            &[
                x.clone(),
                NDArray::ones(&[12], DType::Float32),
                NDArray::zeros(&[12], DType::Float32),
            ],
            &mut [],
        )
        .unwrap()[0]
        .to_f64_vec();
    let sm = instance("softmax", &[])
        .forward(&ctx(true), std::slice::from_ref(&x), &mut [])
        .unwrap()[0]
        .to_f64_vec();
    for r in (0..5000).step_by(499) {
        let row = &xv[r * 12..(r + 1) * 12];
        let mean = row.iter().sum::<f64>() / 12.0;
        let sd = (row.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / 12.0 + 1e-5).sqrt();
        let mx = row.iter().cloned().fold(f64::MIN, f64::max);
        let z: f64 = row.iter().map(|v| (v - mx).exp()).sum();
        for k in 0..12 {
            assert!((ln[r * 12 + k] - (row[k] - mean) / sd).abs() < 1e-4);
            assert!((sm[r * 12 + k] - (row[k] - mx).exp() / z).abs() < 1e-6);
        }
    }
}
