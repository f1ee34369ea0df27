//! Helpers the integration tests share: where the MXNet 1.9.1 reference data lives and how
//! to read its `.npz` files.
#![allow(dead_code)] // each test crate uses its own subset

use mxfn_core::optimizer::{create, Hyper, Optimizer, OptimizerOptions};
use mxfn_core::symbol::Symbol;
use mxfn_core::NDArray;
use ndarray_npy::NpzReader;
use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};

/// The conformance data copied into the repository (`MXFN_CONFORMANCE_DIR` overrides).
pub fn conformance_dir() -> PathBuf {
    if let Ok(d) = std::env::var("MXFN_CONFORMANCE_DIR") {
        return PathBuf::from(d);
    }
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/data/conformance")
}

/// Every float32 array of an `.npz` file, by name (without `.npy`).
pub fn read_npz(path: &Path) -> HashMap<String, NDArray> {
    let mut npz = NpzReader::new(File::open(path).unwrap()).unwrap();
    let mut out = HashMap::new();
    for n in npz.names().unwrap() {
        let a = npz
            .by_name::<ndarray::OwnedRepr<f32>, ndarray::IxDyn>(&n)
            .unwrap();
        out.insert(
            n.trim_end_matches(".npy").to_string(),
            NDArray::from_array(a),
        );
    }
    out
}

/// `got` matches `want` elementwise within `atol + rtol·|want|`.
pub fn assert_close(what: &str, got: &NDArray, want: &NDArray, rtol: f64, atol: f64) {
    assert_eq!(got.shape(), want.shape(), "{what}: shape");
    for (i, (g, w)) in got.to_f64_vec().iter().zip(want.to_f64_vec()).enumerate() {
        assert!(
            (g - w).abs() <= atol + rtol * w.abs(),
            "{what}[{i}]: {g}, expected {w}"
        );
    }
}

/// The two-layer MLP the Module tests train: FullyConnected(`hidden`) → relu →
/// FullyConnected(3) → SoftmaxOutput, named fc1 / relu1 / fc2 / softmax.
pub fn mlp(hidden: usize) -> Symbol {
    let x = Symbol::variable("data");
    let h = hidden.to_string();
    let fc = |name, num_hidden: &str, input| {
        Symbol::create(
            "FullyConnected",
            Some(name),
            &[("num_hidden", num_hidden)],
            vec![(None, input)],
        )
        .unwrap()
    };
    let fc1 = fc("fc1", h.as_str(), x);
    let a = Symbol::create(
        "Activation",
        Some("relu1"),
        &[("act_type", "relu")],
        vec![(None, fc1)],
    )
    .unwrap();
    let fc2 = fc("fc2", "3", a);
    Symbol::create("SoftmaxOutput", Some("softmax"), &[], vec![(None, fc2)]).unwrap()
}

/// A separable 3-class problem from a fixed generator: `n` rows of 5 features in [-1, 1),
/// class = argmax of the first three; returns the flat features and the labels.
pub fn argmax_problem(n: usize, seed: u64) -> (Vec<f32>, Vec<f32>) {
    let mut x = Vec::with_capacity(n * 5);
    let mut y = Vec::with_capacity(n);
    let mut s = seed;
    for _ in 0..n {
        let mut row = [0f32; 5];
        for v in &mut row {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            *v = ((s >> 33) as f32 / (1u64 << 31) as f32) * 2.0 - 1.0;
        }
        let c = (0..3).max_by(|&a, &b| row[a].total_cmp(&row[b])).unwrap();
        x.extend_from_slice(&row);
        y.push(c as f32);
    }
    (x, y)
}

/// [`argmax_problem`] as `(n, 5)` data and `(n,)` label arrays.
pub fn argmax_arrays(n: usize, seed: u64) -> (NDArray, NDArray) {
    let (x, y) = argmax_problem(n, seed);
    (
        NDArray::from_vec(&[n, 5], x).unwrap(),
        NDArray::from_vec(&[n], y).unwrap(),
    )
}

/// SGD with momentum 0.9 at learning rate `lr`.
pub fn sgd_momentum(lr: f64) -> Optimizer {
    create(
        "sgd",
        OptimizerOptions::default(),
        [
            ("learning_rate", Hyper::Num(lr)),
            ("momentum", Hyper::Num(0.9)),
        ],
    )
    .unwrap()
}
