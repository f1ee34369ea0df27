//! Every registry operator is covered: by a conformance case recorded from MXNet 1.9.1
//! (`tests/data/conformance/ops/cases.json`, the op of any node of a case's symbol) or by a
//! finite-difference gradient check in the tests (this folder and `grad_norm_loss.rs`). A
//! new operator without either fails here.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic

use crate::common;
use mxfn_core::ops::registry;
use std::collections::BTreeSet;

/// The test files whose `GradCheck`s / gradient helpers name the operators they check.
const GRADIENT_SOURCES: &[&str] = &[
    include_str!("ops_gradients.rs"),
    include_str!("grad_broadcast.rs"),
    include_str!("grad_conv.rs"),
    include_str!("../grad_norm_loss.rs"),
    include_str!("grad_rnn.rs"),
    include_str!("grad_shape.rs"),
];

/// Operators every node of some conformance case's symbol uses.
fn conformance_ops() -> BTreeSet<String> {
    let path = common::conformance_dir().join("ops/cases.json");
    let cases: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let mut ops = BTreeSet::new();
    for case in cases.as_array().unwrap() {
        ops.insert(case["op"].as_str().unwrap().to_string());
        let symbol: serde_json::Value =
            serde_json::from_str(case["symbol"].as_str().unwrap()).unwrap();
        for node in symbol["nodes"].as_array().unwrap() {
            ops.insert(node["op"].as_str().unwrap().to_string());
        }
    }
    ops
}

/// Whether a gradient test names `name` as a quoted string.
fn gradient_checked(name: &str) -> bool {
    let quoted = format!("\"{name}\"");
    GRADIENT_SOURCES.iter().any(|src| src.contains(&quoted))
}

#[test]
fn every_operator_has_conformance_or_gradient_coverage() {
    let conformance = conformance_ops();
    let mut missing = Vec::new();
    let defs: BTreeSet<&str> = registry().values().map(|d| d.name).collect();
    for name in defs {
        let def = registry()[name];
        let names: Vec<String> = std::iter::once(def.name.to_string())
            .chain(def.aliases.iter().map(|a| a.to_string()))
            .chain(std::iter::once(def.python_name()))
            .collect();
        let covered = names
            .iter()
            .any(|n| conformance.contains(n) || gradient_checked(n));
        if !covered {
            missing.push(name);
        }
    }
    assert!(
        missing.is_empty(),
        "operators without a conformance case or a gradient check: {missing:?}"
    );
}
