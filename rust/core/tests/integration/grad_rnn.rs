//! The fused `RNN` operator and `_rnn_param_concat`: float64 central finite differences of
//! every gradient through the operator (float64 data computes in float64) for each mode,
//! layer count, direction, sequence lengths and LSTM clipping; the float32 path through the
//! shared `GradCheck`; shape inference from the data shape alone; and the errors users see.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use mxfn_core::executor::{Executor, GradReq};
use mxfn_core::ops::testing::{random_array, GradCheck};
use mxfn_core::ops::{lookup, OpCtx};
use mxfn_core::{Context, DType, NDArray, Symbol};
use std::collections::{BTreeMap, HashMap};

fn attr_map(attrs: &[(&str, &str)]) -> BTreeMap<String, String> {
    attrs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Values in [-1, 1) as float64.
fn arr64(shape: &[usize], seed: u64) -> NDArray {
    random_array(shape, -1.0, 1.0, seed).astype(DType::Float64)
}

/// The inputs `RNN` with `attrs` takes for data (T, N, C): shapes from its own inference;
/// sequence lengths `lens` when given.
fn rnn_inputs(attrs: &[(&str, &str)], tnc: [usize; 3], lens: Option<&[f64]>) -> Vec<NDArray> {
    let inst = lookup("RNN")
        .unwrap()
        .instantiate("r", &attr_map(attrs))
        .unwrap();
    let mut shapes = vec![None; inst.arguments().len()];
    shapes[0] = Some(tnc.to_vec());
    inst.infer_shape("r", &mut shapes, &mut []).unwrap();
    shapes
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let s = s.as_ref().unwrap();
            match (inst.arguments()[i].as_str(), lens) {
                ("sequence_length", Some(l)) => {
                    NDArray::from_f64_slice(s, l, DType::Float32).unwrap()
                }
                _ => arr64(s, 7 * i as u64 + 3),
            }
        })
        .collect()
}

/// Central differences (float64) of Σ head·output over the visible outputs against the
/// operator's backward, for every input but the lengths.
fn check64(attrs: &[(&str, &str)], inputs: Vec<NDArray>) {
    let inst = lookup("RNN")
        .unwrap()
        .instantiate("r", &attr_map(attrs))
        .unwrap();
    let ctx = OpCtx {
        is_train: true,
        node: "r",
        need_grad: &[],
    };
    let visible = inst.output_names().len();
    let outs = inst.forward(&ctx, &inputs, &mut []).unwrap();
    let heads: Vec<NDArray> = outs
        .iter()
        .enumerate()
        .map(|(k, o)| {
            if k < visible {
                arr64(o.shape(), 100 + k as u64)
            } else {
                NDArray::zeros(o.shape(), o.dtype())
            }
        })
        .collect();
    let objective = |ins: &[NDArray]| -> f64 {
        let o = inst.forward(&ctx, ins, &mut []).unwrap();
        o.iter()
            .zip(&heads)
            .take(visible)
            .map(|(a, h)| {
                a.to_f64_vec()
                    .iter()
                    .zip(h.to_f64_vec())
                    .map(|(x, y)| x * y)
                    .sum::<f64>()
            })
            .sum()
    };
    let grads = inst
        .backward(&ctx, &heads, &inputs, &outs, &mut [])
        .unwrap();
    let names = inst.arguments();
    for (i, x) in inputs.iter().enumerate() {
        if names[i] == "sequence_length" {
            assert!(grads[i].is_none(), "lengths get no gradient");
            continue;
        }
        let g = grads[i].as_ref().unwrap();
        assert_eq!(g.dtype(), DType::Float64);
        assert_eq!(g.shape(), x.shape());
        let base = x.to_f64_vec();
        for (j, a) in g.to_f64_vec().into_iter().enumerate() {
            let at = |delta: f64| {
                let mut v = base.clone();
                v[j] += delta;
                let mut ins = inputs.clone();
                ins[i] = NDArray::from_f64_slice(x.shape(), &v, DType::Float64).unwrap();
                objective(&ins)
            };
            let numeric = (at(1e-6) - at(-1e-6)) / 2e-6;
            assert!(
                (numeric - a).abs() <= 1e-6 + 1e-5 * numeric.abs(),
                "{attrs:?}: d/d {}[{j}]: backward {a}, finite difference {numeric}",
                names[i]
            );
        }
    }
}

const MODES: [&str; 4] = ["lstm", "gru", "rnn_relu", "rnn_tanh"];

#[test]
fn float64_gradients_every_mode() {
    for mode in MODES {
        for (layers, bi, outs) in [("1", "False", "True"), ("2", "True", "False")] {
            let attrs = [
                ("mode", mode),
                ("state_size", "3"),
                ("num_layers", layers),
                ("bidirectional", bi),
                ("state_outputs", outs),
            ];
            check64(&attrs, rnn_inputs(&attrs, [3, 2, 2], None));
        }
    }
}

#[test]
fn float64_gradients_with_lengths_and_clipping() {
    for mode in MODES {
        let attrs = [
            ("mode", mode),
            ("state_size", "2"),
            ("num_layers", "2"),
            ("bidirectional", "True"),
            ("state_outputs", "True"),
            ("use_sequence_length", "True"),
        ];
        check64(
            &attrs,
            rnn_inputs(&attrs, [4, 3, 2], Some(&[2.0, 4.0, 1.0])),
        );
    }
    let attrs = [
        ("mode", "lstm"),
        ("state_size", "3"),
        ("num_layers", "2"),
        ("state_outputs", "True"),
        ("lstm_state_clip_min", "-0.2"),
        ("lstm_state_clip_max", "0.3"),
    ];
    check64(&attrs, rnn_inputs(&attrs, [4, 2, 3], None));
}

#[test]
fn float32_gradients_and_param_concat() {
    // The float32 path, through the shared check.
    for mode in MODES {
        let attrs = [
            ("mode", mode),
            ("state_size", "3"),
            ("num_layers", "2"),
            ("bidirectional", "True"),
            ("state_outputs", "True"),
        ];
        let inputs = rnn_inputs(&attrs, [2, 2, 2], None)
            .iter()
            .map(|a| a.astype(DType::Float32).mul_scalar(0.5).unwrap())
            .collect();
        // A small step: ReLU's kink must not fall inside it.
        let check = GradCheck {
            eps: 1e-3,
            ..GradCheck::new("RNN", &attrs, inputs)
        };
        check.run().unwrap_or_else(|e| panic!("RNN {mode}: {e}"));
    }
    let inputs = vec![
        random_array(&[6], -1.0, 1.0, 1),
        random_array(&[4], -1.0, 1.0, 2),
        random_array(&[3], -1.0, 1.0, 3),
    ];
    GradCheck::new(
        "_rnn_param_concat",
        &[("dim", "0"), ("num_args", "3")],
        inputs,
    )
    .run()
    .unwrap();
}

#[test]
fn dropout_only_in_training() {
    let attrs = [
        ("mode", "gru"),
        ("state_size", "4"),
        ("num_layers", "2"),
        ("p", "0.5"),
    ];
    let inputs: Vec<NDArray> = rnn_inputs(&attrs, [3, 2, 3], None)
        .iter()
        .map(|a| a.astype(DType::Float32))
        .collect();
    let inst = lookup("RNN")
        .unwrap()
        .instantiate("r", &attr_map(&attrs))
        .unwrap();
    let run = |is_train| {
        let ctx = OpCtx {
            is_train,
            node: "r",
            need_grad: &[],
        };
        inst.forward(&ctx, &inputs, &mut []).unwrap()[0].to_f64_vec()
    };
    let no_drop = lookup("RNN")
        .unwrap()
        .instantiate("r", &attr_map(&attrs[..3]))
        .unwrap();
    let ctx = OpCtx {
        is_train: true,
        node: "r",
        need_grad: &[],
    };
    let plain = no_drop.forward(&ctx, &inputs, &mut []).unwrap()[0].to_f64_vec();
    assert_eq!(run(false), plain, "inference: no dropout");
    assert_ne!(run(true), plain, "training: dropout between the layers");
}

#[test]
fn simple_bind_from_the_data_shape_alone() {
    // As MXNet: parameters, state and state_cell are inferred from the data's shape, and a
    // backward after an inference forward still works.
    let data = Symbol::variable("data");
    let sym = Symbol::create(
        "RNN",
        Some("rnn"),
        &[
            ("mode", "lstm"),
            ("state_size", "5"),
            ("num_layers", "2"),
            ("bidirectional", "True"),
            ("state_outputs", "True"),
        ],
        vec![(Some("data".into()), data)],
    )
    .unwrap();
    assert_eq!(
        sym.list_arguments(),
        ["data", "rnn_parameters", "rnn_state", "rnn_state_cell"]
    );
    assert_eq!(
        sym.list_outputs(),
        ["rnn_output", "rnn_state_output", "rnn_statecell_output"]
    );
    let shapes = HashMap::from([("data".to_string(), vec![4, 3, 6])]);
    let (args, outs, _) = sym.infer_shape(&shapes).unwrap();
    // (C + H + 2)·4H·D + (D·H + H + 2)·4H·D for C = 6, H = 5, D = 2.
    assert_eq!(args[1], vec![13 * 40 + 17 * 40]);
    assert_eq!(args[2], vec![4, 3, 5]);
    assert_eq!(outs, vec![vec![4, 3, 10], vec![4, 3, 5], vec![4, 3, 5]]);
    let mut exe = Executor::simple_bind(
        &sym,
        Context::cpu(0),
        &shapes,
        &HashMap::new(),
        &HashMap::new(),
        GradReq::Write,
    )
    .unwrap();
    exe.set_arg("data", random_array(&[4, 3, 6], -1.0, 1.0, 1))
        .unwrap();
    exe.set_arg("rnn_parameters", random_array(&args[1], -0.5, 0.5, 2))
        .unwrap();
    exe.forward(false).unwrap();
    let first = exe.outputs()[0].to_f64_vec();
    let heads: Vec<NDArray> = outs
        .iter()
        .map(|s| NDArray::ones(s, DType::Float32))
        .collect();
    exe.backward(&heads).unwrap();
    let g = exe.grad("rnn_parameters").unwrap().unwrap().to_f64_vec();
    exe.forward(true).unwrap();
    assert_eq!(exe.outputs()[0].to_f64_vec(), first);
    exe.backward(&heads).unwrap();
    assert_eq!(exe.grad("rnn_parameters").unwrap().unwrap().to_f64_vec(), g);
}

/// The message of the error of running RNN with `attrs` on inputs of `shapes`.
fn error_of(attrs: &[(&str, &str)], shapes: &[&[usize]]) -> String {
    let run = || -> mxfn_core::Result<()> {
        let inst = lookup("RNN")?.instantiate("rnn0", &attr_map(attrs))?;
        let mut s: Vec<_> = shapes.iter().map(|s| Some(s.to_vec())).collect();
        inst.infer_shape("rnn0", &mut s, &mut [])?;
        let ins: Vec<NDArray> = shapes
            .iter()
            .map(|s| NDArray::zeros(s, DType::Float32))
            .collect();
        let ctx = OpCtx {
            is_train: false,
            node: "rnn0",
            need_grad: &[],
        };
        inst.forward(&ctx, &ins, &mut [])?;
        Ok(())
    };
    run().expect_err("an error").to_string()
}

#[test]
fn errors_name_the_parameter_expected_and_actual() {
    let lstm = [("mode", "lstm"), ("state_size", "2"), ("num_layers", "1")];
    // LSTM, C = 3, H = 2: (3 + 2 + 2)·8 = 56 parameters.
    let e = error_of(&lstm, &[&[2, 1, 3], &[50], &[1, 1, 2], &[1, 1, 2]]);
    assert!(
        e.contains("rnn0") && e.contains("parameters") && e.contains("56") && e.contains("50"),
        "{e}"
    );
    let e = error_of(&lstm, &[&[2, 1, 3], &[56], &[2, 1, 2], &[1, 1, 2]]);
    assert!(
        e.contains("\"state\"") && e.contains("(1, 1, 2)") && e.contains("(2, 1, 2)"),
        "{e}"
    );
    let e = error_of(&lstm, &[&[2, 3], &[56], &[1, 1, 2], &[1, 1, 2]]);
    assert!(e.contains("data") && e.contains("(2, 3)"), "{e}");
    let e = error_of(
        &[("mode", "lstmx"), ("state_size", "2"), ("num_layers", "1")],
        &[],
    );
    assert!(
        e.contains("mode") && e.contains("'gru'") && e.contains("lstmx"),
        "{e}"
    );
    let e = error_of(&[("mode", "gru"), ("num_layers", "1")], &[]);
    assert!(e.contains("state_size") && e.contains("required"), "{e}");
    let e = error_of(&[lstm[0], lstm[1], lstm[2], ("projection_size", "2")], &[]);
    assert!(e.contains("projection_size") && e.contains("None"), "{e}");
    let clip = [("lstm_state_clip_min", "-1"), ("lstm_state_clip_max", "1")];
    let e = error_of(&[("mode", "gru"), lstm[1], lstm[2], clip[0], clip[1]], &[]);
    assert!(
        e.contains("lstm_state_clip_min") && e.contains("lstm"),
        "{e}"
    );
    let e = error_of(&[lstm[0], lstm[1], lstm[2], clip[0]], &[]);
    assert!(e.contains("lstm_state_clip_max"), "{e}");
    let e = error_of(&[lstm[0], lstm[1], lstm[2], ("p", "1.5")], &[]);
    assert!(e.contains("\"p\"") && e.contains("1.5"), "{e}");
    // Lengths outside [1, T].
    let attrs = [
        ("mode", "rnn_tanh"),
        ("state_size", "2"),
        ("num_layers", "1"),
        ("use_sequence_length", "True"),
    ];
    let inst = lookup("RNN")
        .unwrap()
        .instantiate("rnn0", &attr_map(&attrs))
        .unwrap();
    let mut ins = rnn_inputs(&attrs, [3, 2, 2], Some(&[2.0, 5.0]));
    let ctx = OpCtx {
        is_train: false,
        node: "rnn0",
        need_grad: &[],
    };
    let e = inst.forward(&ctx, &ins, &mut []).unwrap_err().to_string();
    assert!(
        e.contains("sequence_length") && e.contains("[1, 3]") && e.contains('5'),
        "{e}"
    );
    ins[3] = NDArray::zeros(&[3], DType::Float32);
    let e = inst.forward(&ctx, &ins, &mut []).unwrap_err().to_string();
    assert!(e.contains("sequence_length") && e.contains("(2,)"), "{e}");
}

/// Not a check: prints the time of a forward + backward of the language-model layer of
/// issue #13 (2-layer LSTM, 200 units, batch 32, 35 steps). Run with
/// `cargo test --release -p mxfn-core --test integration grad_rnn -- --ignored --nocapture`.
#[test]
#[ignore]
fn lstm_lm_layer_timing() {
    let attrs = [
        ("mode", "lstm"),
        ("state_size", "200"),
        ("num_layers", "2"),
        ("state_outputs", "True"),
    ];
    let inputs: Vec<NDArray> = rnn_inputs(&attrs, [35, 32, 200], None)
        .iter()
        .map(|a| a.astype(DType::Float32).mul_scalar(0.1).unwrap())
        .collect();
    let inst = lookup("RNN")
        .unwrap()
        .instantiate("r", &attr_map(&attrs))
        .unwrap();
    let ctx = OpCtx {
        is_train: true,
        node: "r",
        need_grad: &[],
    };
    let pass = || {
        let t0 = std::time::Instant::now();
        let outs = inst.forward(&ctx, &inputs, &mut []).unwrap();
        let t1 = std::time::Instant::now();
        let heads: Vec<NDArray> = outs
            .iter()
            .map(|o| NDArray::ones(o.shape(), o.dtype()))
            .collect();
        inst.backward(&ctx, &heads, &inputs, &outs, &mut [])
            .unwrap();
        (t1 - t0, t1.elapsed())
    };
    pass();
    let runs = 20;
    let (mut f, mut b) = (0.0, 0.0);
    for _ in 0..runs {
        let (tf, tb) = pass();
        f += tf.as_secs_f64();
        b += tb.as_secs_f64();
    }
    println!(
        "2-layer LSTM, T=35 N=32 C=H=200: forward {:.2} ms, backward {:.2} ms ({} threads)",
        1e3 * f / runs as f64,
        1e3 * b / runs as f64,
        rayon::current_num_threads()
    );
}
