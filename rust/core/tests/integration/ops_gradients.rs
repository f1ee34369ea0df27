//! Registry-wide checks: every operator's inferred shapes equal its forward output shapes,
//! and central finite differences agree with backward, on small random inputs.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic

use mxfn_core::ops::testing::{random_array, GradCheck};

fn arr(shape: &[usize], seed: u64) -> mxfn_core::NDArray {
    random_array(shape, -1.0, 1.0, seed)
}

/// Values in [-1, -0.1] ∪ [0.1, 1]: away from the kinks of abs, relu and friends, where a
/// finite difference straddling 0 is meaningless.
fn away_from_zero(shape: &[usize], seed: u64) -> mxfn_core::NDArray {
    let a = random_array(shape, -0.9, 0.9, seed);
    let v: Vec<f32> = a
        .to_f64_vec()
        .iter()
        .map(|&x| (x + 0.1f64.copysign(x)) as f32)
        .collect();
    mxfn_core::NDArray::from_vec(shape, v).unwrap()
}

#[test]
fn fully_connected() {
    for (attrs, shapes) in [
        (
            vec![("num_hidden", "3")],
            vec![vec![2, 4], vec![3, 4], vec![3]],
        ),
        (
            vec![("num_hidden", "3"), ("no_bias", "True")],
            vec![vec![2, 2, 2], vec![3, 4]],
        ),
        (
            vec![("num_hidden", "2"), ("flatten", "False")],
            vec![vec![2, 3, 4], vec![2, 4], vec![2]],
        ),
    ] {
        let inputs = shapes
            .iter()
            .enumerate()
            .map(|(i, s)| arr(s, i as u64 + 1))
            .collect();
        GradCheck::new("FullyConnected", &attrs, inputs)
            .run()
            .unwrap();
    }
}

#[test]
fn unary_and_activation() {
    for op in [
        "exp", "square", "abs", "negative", "relu", "sigmoid", "tanh",
    ] {
        GradCheck::new(op, &[], vec![away_from_zero(&[3, 4], 7)])
            .run()
            .unwrap();
    }
    for op in ["log", "sqrt"] {
        GradCheck::new(op, &[], vec![random_array(&[3, 4], 0.5, 2.0, 8)])
            .run()
            .unwrap();
    }
    for act in ["relu", "sigmoid", "tanh", "softrelu", "softsign"] {
        GradCheck::new(
            "Activation",
            &[("act_type", act)],
            vec![away_from_zero(&[2, 5], 9)],
        )
        .run()
        .unwrap();
    }
}
