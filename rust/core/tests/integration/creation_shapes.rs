//! Creation nodes of unknown (0) sizes — MXNet's `_zeros(shape=(0, H))` begin states — take
//! their shape from the nodes that use them, at inference and at bind, as in MXNet.

// Helpers outside #[test] functions unwrap too: a failure here is a failed test.
#![allow(clippy::unwrap_used)]

use mxfn_core::context::Context;
use mxfn_core::executor::{Executor, GradReq};
use mxfn_core::symbol::Symbol;
use mxfn_core::tensor::NDArray;
use std::collections::HashMap;

fn op(name: &str, node: &str, attrs: &[(&str, &str)], inputs: Vec<Symbol>) -> Symbol {
    Symbol::create(
        name,
        Some(node),
        attrs,
        inputs.into_iter().map(|s| (None, s)).collect(),
    )
    .unwrap()
}

fn zeros(node: &str, shape: &str) -> Symbol {
    op("_zeros", node, &[("shape", shape)], vec![])
}

fn bind(sym: &Symbol, data: &[usize]) -> mxfn_core::error::Result<Executor> {
    let shapes = HashMap::from([("data".to_string(), data.to_vec())]);
    Executor::simple_bind(
        sym,
        Context::cpu(0),
        &shapes,
        &HashMap::new(),
        &HashMap::new(),
        GradReq::Null,
    )
}

#[test]
fn an_elementwise_partner_gives_the_unknown_size() {
    let data = Symbol::variable("data");
    let sum = op("elemwise_add", "sum", &[], vec![data, zeros("z", "(0, 3)")]);
    let (_, outs, _) = sum
        .infer_shape(&HashMap::from([("data".to_string(), vec![4, 3])]))
        .unwrap();
    assert_eq!(outs, vec![vec![4, 3]]);

    let mut exe = bind(&sum, &[4, 3]).unwrap();
    let x: Vec<f32> = (0..12).map(|v| v as f32).collect();
    exe.set_arg("data", NDArray::from_f32(&[4, 3], x.clone()).unwrap())
        .unwrap();
    exe.forward(false).unwrap();
    assert_eq!(exe.outputs()[0].shape(), &[4, 3]);
    assert_eq!(
        exe.outputs()[0].to_f64_vec(),
        x.iter().map(|&v| v as f64).collect::<Vec<_>>()
    );
    // Another batch size binds to another begin-state size.
    let mut exe = bind(&sum, &[7, 3]).unwrap();
    exe.forward(false).unwrap();
    assert_eq!(exe.outputs()[0].shape(), &[7, 3]);
}

#[test]
fn a_fully_connected_state_is_completed_from_its_output() {
    // MXNet's LSTM cell: i2h(x) + h2h(h0) with h0 = _zeros((0, H)) — the h2h layer cannot fill
    // its data in, so the batch size comes from its output, which the sum knows.
    let data = Symbol::variable("data");
    let i2h = op("FullyConnected", "i2h", &[("num_hidden", "8")], vec![data]);
    let h2h = op(
        "FullyConnected",
        "h2h",
        &[("num_hidden", "8")],
        vec![zeros("h0", "(0, 2)")],
    );
    let gates = op("elemwise_add", "gates", &[], vec![i2h, h2h]);
    let (args, outs, _) = gates
        .infer_shape(&HashMap::from([("data".to_string(), vec![5, 3])]))
        .unwrap();
    assert_eq!(
        gates.list_arguments(),
        ["data", "i2h_weight", "i2h_bias", "h2h_weight", "h2h_bias"]
    );
    assert_eq!(
        args,
        vec![vec![5, 3], vec![8, 3], vec![8], vec![8, 2], vec![8]]
    );
    assert_eq!(outs, vec![vec![5, 8]]);
    let mut exe = bind(&gates, &[5, 3]).unwrap();
    exe.forward(false).unwrap();
    assert_eq!(exe.outputs()[0].shape(), &[5, 8]);
}

#[test]
fn sizes_nothing_infers_or_that_disagree_are_errors_naming_the_node() {
    let alone = zeros("z", "(0, 3)");
    let e = alone.infer_shape(&HashMap::new()).unwrap_err().to_string();
    assert!(
        e.contains("_zeros node \"z\"") && e.contains("(0, 3)"),
        "{e}"
    );
    assert!(e.contains("nothing that infers them"), "{e}");

    let data = Symbol::variable("data");
    let sum = op("elemwise_add", "sum", &[], vec![data, zeros("z", "(0, 3)")]);
    let e = bind(&sum, &[4, 5]).err().unwrap().to_string();
    assert!(
        e.contains("_zeros node \"z\"") && e.contains("(4, 5)"),
        "{e}"
    );

    // A fully given shape is unchanged; a negative size is refused when the node is made.
    let full = zeros("z", "(2, 3)");
    let (_, outs, _) = full.infer_shape(&HashMap::new()).unwrap();
    assert_eq!(outs, vec![vec![2, 3]]);
    let e = Symbol::create("_zeros", Some("z"), &[("shape", "(-1, 3)")], vec![])
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("shape") && e.contains("sizes >= 0"), "{e}");
}

/// A weight variable with Gluon's `__shape__` hint.
fn weight(name: &str, shape: &str) -> Symbol {
    let attrs = std::collections::BTreeMap::from([("__shape__".to_string(), shape.to_string())]);
    Symbol::variable_with_attrs(name, attrs)
}

/// Gluon's exported fused RNN layer: every weight flattened by `Reshape(-1)`, joined by
/// `_rnn_param_concat`, fed to `RNN` with the state `h0` as an input.
fn gluon_rnn(weights: &[(&str, &str)], bidirectional: bool) -> Symbol {
    let flat: Vec<Symbol> = weights
        .iter()
        .map(|(n, s)| {
            op(
                "Reshape",
                &format!("{n}_flat"),
                &[("shape", "-1")],
                vec![weight(n, s)],
            )
        })
        .collect();
    let n = flat.len().to_string();
    let params = op(
        "_rnn_param_concat",
        "concat",
        &[("dim", "0"), ("num_args", &n)],
        flat,
    );
    let bi = if bidirectional { "True" } else { "False" };
    let attrs = [
        ("mode", "gru"),
        ("state_size", "4"),
        ("num_layers", "1"),
        ("bidirectional", bi),
    ];
    op(
        "RNN",
        "rnn",
        &attrs,
        vec![Symbol::variable("data"), params, Symbol::variable("h0")],
    )
}

#[test]
fn a_gluon_weight_of_deferred_input_size_is_completed_through_reshape_and_concat() {
    // Gluon exports the first layer's i2h weight as (3 * 4, 0) until it sees data; MXNet
    // completes it from the RNN operator's parameter count, back through the concat (which
    // gives the unknown weight what the others leave) and the reshape (which keeps the size).
    let uni = gluon_rnn(
        &[
            ("i2h", "(12, 0)"),
            ("h2h", "(12, 4)"),
            ("i2h_b", "(12,)"),
            ("h2h_b", "(12,)"),
        ],
        false,
    );
    let known = |h0: &[usize]| {
        HashMap::from([
            ("data".to_string(), vec![5, 2, 3]),
            ("h0".to_string(), h0.to_vec()),
        ])
    };
    let (args, outs, _) = uni.infer_shape(&known(&[1, 2, 4])).unwrap();
    assert_eq!(
        args,
        vec![
            vec![5, 2, 3],
            vec![12, 3],
            vec![12, 4],
            vec![12],
            vec![12],
            vec![1, 2, 4]
        ]
    );
    assert_eq!(outs, vec![vec![5, 2, 4]]);

    // Bidirectional: both directions' i2h weights are unknown and share the remainder.
    let bi = gluon_rnn(
        &[
            ("l_i2h", "(12, 0)"),
            ("l_h2h", "(12, 4)"),
            ("r_i2h", "(12, 0)"),
            ("r_h2h", "(12, 4)"),
            ("l_i2h_b", "(12,)"),
            ("l_h2h_b", "(12,)"),
            ("r_i2h_b", "(12,)"),
            ("r_h2h_b", "(12,)"),
        ],
        true,
    );
    let (args, outs, _) = bi.infer_shape(&known(&[2, 2, 4])).unwrap();
    assert_eq!(
        (args[1].clone(), args[3].clone()),
        (vec![12, 3], vec![12, 3])
    );
    assert_eq!(outs, vec![vec![5, 2, 8]]);
    // Binding from the data alone (the RNN operator gives the state its shape) runs.
    let mut exe = bind(&bi, &[5, 2, 3]).unwrap();
    exe.forward(false).unwrap();
    assert_eq!(exe.outputs()[0].shape(), &[5, 2, 8]);
}

#[test]
fn a_weight_hint_that_disagrees_with_the_inferred_shape_is_an_error_naming_it() {
    let fc = op(
        "FullyConnected",
        "fc",
        &[("num_hidden", "8")],
        vec![Symbol::variable("data"), weight("w", "(0, 3)")],
    );
    let e = fc
        .infer_shape(&HashMap::from([("data".to_string(), vec![5, 4])]))
        .unwrap_err()
        .to_string();
    assert!(e.contains("variable \"w\"") && e.contains("(8, 4)"), "{e}");
    // a shape the caller gives stands over the hint
    let given = HashMap::from([
        ("data".to_string(), vec![5, 4]),
        ("w".to_string(), vec![8, 4]),
    ]);
    assert!(fc.infer_shape(&given).is_ok());
}
