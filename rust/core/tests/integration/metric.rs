//! Evaluation metrics: the recorded MXNet 1.9.1 cases (tests/data/conformance/metric) through
//! the Rust API, local and global values per step, plus hand-computed checks.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use mxfn_core::metric::{Average, CustomFn, EvalMetric};
use mxfn_core::NDArray;
use serde_json::{json, Value};
use std::sync::Arc;

use crate::common::{conformance_dir, read_npz};

/// The case's custom functions, written in Rust (the Python versions run in pytest).
fn custom(name: &str) -> CustomFn {
    match name {
        "mean_abs_diff" => Arc::new(|l: &NDArray, p: &NDArray| {
            let (l, p) = (l.to_f64_vec(), p.to_f64_vec());
            let s: f64 = l.iter().zip(&p).map(|(a, b)| (a - b).abs()).sum();
            Ok((s / l.len() as f64, 1.0))
        }),
        "sum_sq_and_count" => Arc::new(|l: &NDArray, p: &NDArray| {
            let (l, p) = (l.to_f64_vec(), p.to_f64_vec());
            let s: f64 = l.iter().zip(&p).map(|(a, b)| (a - b) * (a - b)).sum();
            Ok((s, l.len() as f64))
        }),
        other => panic!("no Rust version of {other}"),
    }
}

/// MXNet class name + kwargs → metric, through `EvalMetric::create`.
fn make(case: &Value) -> EvalMetric {
    let kwargs = &case["kwargs"];
    let class = case["metric"].as_str().unwrap();
    match class {
        "CompositeEvalMetric" => {
            let children = case["children"]
                .as_array()
                .unwrap()
                .iter()
                .map(make)
                .collect();
            EvalMetric::composite(children)
        }
        "CustomMetric" => {
            let fname = case["feval_name"].as_str().unwrap();
            let name = kwargs["name"].as_str().unwrap_or(fname);
            EvalMetric::custom(name, custom(fname), false)
        }
        _ => {
            let name = match class {
                "Accuracy" => "acc",
                "TopKAccuracy" => "top_k_accuracy",
                "NegativeLogLikelihood" => "nll_loss",
                "CrossEntropy" => "ce",
                "PearsonCorrelation" => "pearsonr",
                other => other,
            };
            EvalMetric::create(name, kwargs).unwrap()
        }
    }
}

fn close(got: f64, want: &Value, rtol: f64, atol: f64) -> bool {
    match want.as_f64() {
        None => got.is_nan(),
        Some(w) => (got - w).abs() <= atol + rtol * w.abs(),
    }
}

fn values(want: &Value) -> Vec<Value> {
    match want {
        Value::Array(v) => v.clone(),
        v => vec![v.clone()],
    }
}

#[test]
fn recorded_mxnet_cases() {
    let dir = conformance_dir().join("metric");
    let cases: Vec<Value> =
        serde_json::from_str(&std::fs::read_to_string(dir.join("cases.json")).unwrap()).unwrap();
    let mut failures = Vec::new();
    for case in &cases {
        let id = case["id"].as_str().unwrap();
        let data = read_npz(&dir.join(format!("{id}.npz")));
        let (rtol, atol) = (
            case["rtol"].as_f64().unwrap(),
            case["atol"].as_f64().unwrap(),
        );
        let mut m = make(case);
        for (s, step) in case["steps"].as_array().unwrap().iter().enumerate() {
            if step["op"] == "update" {
                let k = step["num_arrays"].as_u64().unwrap() as usize;
                let labels: Vec<NDArray> = (0..k)
                    .map(|j| data[&format!("label:{s}:{j}")].clone())
                    .collect();
                let preds: Vec<NDArray> = (0..k)
                    .map(|j| data[&format!("pred:{s}:{j}")].clone())
                    .collect();
                m.update(&labels, &preds).unwrap();
            } else {
                m.reset_local();
            }
            let want = &case["results"][s];
            let (names, vals): (Vec<String>, Vec<f64>) = m.get().into_iter().unzip();
            let want_names: Vec<String> = values(&want["name"])
                .iter()
                .map(|v| v.as_str().unwrap().to_string())
                .collect();
            if names != want_names {
                failures.push(format!(
                    "{id} step {s}: names {names:?}, expected {want_names:?}"
                ));
            }
            for (g, w) in vals.iter().zip(values(&want["value"])) {
                if !close(*g, &w, rtol, atol) {
                    failures.push(format!("{id} step {s}: value {g}, expected {w}"));
                }
            }
            // Micro Pearson: MXNet's get_global() is 0.0 (never filled); mxfn pools all samples.
            if id == "pearson-micro" {
                continue;
            }
            let gvals: Vec<f64> = m.get_global().into_iter().map(|p| p.1).collect();
            for (g, w) in gvals.iter().zip(values(&want["global_value"])) {
                if !close(*g, &w, rtol, atol) {
                    failures.push(format!("{id} step {s}: global {g}, expected {w}"));
                }
            }
        }
        if id == "pearson-micro" {
            let pooled = case["pooled_pearson_after_last_update"].as_f64().unwrap();
            let g = m.get_global()[0].1;
            if (g - pooled).abs() > 1e-9 {
                failures.push(format!("pearson-micro: global {g}, pooled {pooled}"));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

fn a(shape: &[usize], v: &[f32]) -> NDArray {
    NDArray::from_f32(shape, v.to_vec()).unwrap()
}

#[test]
fn mxnet_docstring_examples() {
    // Values computed with MXNet 1.9.1 on the inputs of the examples in mxnet/metric.py.
    let preds = [a(&[3, 2], &[0.3, 0.7, 0.0, 1.0, 0.4, 0.6])];
    let labels = [a(&[3], &[0.0, 1.0, 1.0])];
    let mut acc = EvalMetric::accuracy(1);
    acc.update(&labels, &preds).unwrap();
    assert!((acc.value() - 2.0 / 3.0).abs() < 1e-12);

    let mut f1 = EvalMetric::f1(Average::Macro);
    f1.update(&labels, &preds).unwrap();
    assert!((f1.value() - 0.8).abs() < 1e-12);

    let mut ppl = EvalMetric::perplexity(None, -1);
    ppl.update(&labels, &preds).unwrap();
    assert!((ppl.value() - 1.771_097_628_515_585_3).abs() < 1e-6);

    let mut top = EvalMetric::top_k_accuracy(3).unwrap();
    let p = a(
        &[5, 4],
        &[
            0.1, 0.2, 0.3, 0.4, 0.4, 0.3, 0.2, 0.1, 0.2, 0.1, 0.4, 0.3, 0.3, 0.4, 0.1, 0.2, 0.2,
            0.3, 0.4, 0.1,
        ],
    );
    top.update(&[a(&[5], &[2.0, 0.0, 1.0, 3.0, 0.0])], &[p])
        .unwrap();
    // Top-3 excludes the smallest score per row: row 0 keeps {1,2,3}, row 1 {0,1,2},
    // row 2 {0,2,3}, row 3 {0,1,3}, row 4 {0,1,2}: labels 2, 0, (1 ✗), 3, 0.
    assert_eq!(top.value(), 0.8);
    assert_eq!(top.name(), "top_k_accuracy_3");
}

#[test]
fn per_batch_averages_and_resets() {
    // RMSE is the mean of per-pair RMSEs, each pair weighing 1 whatever its size.
    let mut r = EvalMetric::rmse();
    r.update(&[a(&[1], &[0.0])], &[a(&[1], &[2.0])]).unwrap();
    r.update(&[a(&[4], &[0.0; 4])], &[a(&[4], &[0.0; 4])])
        .unwrap();
    assert_eq!(r.value(), 1.0);
    // A 1-D label against (n, k) predictions broadcasts as (n, 1).
    let mut m = EvalMetric::mae();
    m.update(
        &[a(&[2], &[1.0, 2.0])],
        &[a(&[2, 2], &[1.0, 2.0, 2.0, 2.0])],
    )
    .unwrap();
    assert_eq!(m.value(), 0.25);

    let mut l = EvalMetric::loss();
    l.update(&[], &[a(&[2], &[1.0, 3.0])]).unwrap();
    assert_eq!(l.value(), 2.0);
    l.reset_local();
    assert!(l.value().is_nan());
    assert_eq!(l.get_global()[0].1, 2.0);
    l.reset();
    assert!(l.get_global()[0].1.is_nan());
}

#[test]
fn bad_input_is_an_error_not_a_panic() {
    let mut acc = EvalMetric::accuracy(1);
    let err = acc
        .update(&[a(&[2], &[0.0, 1.0])], &[])
        .unwrap_err()
        .to_string();
    assert!(err.contains("one label array per prediction"), "{err}");
    assert!(acc
        .update(&[a(&[3], &[0.0, 1.0, 1.0])], &[a(&[2, 2], &[0.0; 4])])
        .is_err());
    let mut f1 = EvalMetric::f1(Average::Micro);
    let err = f1
        .update(&[a(&[3], &[0.0, 1.0, 2.0])], &[a(&[3, 2], &[0.0; 6])])
        .unwrap_err()
        .to_string();
    assert!(err.contains("binary"), "{err}");
    let mut ce = EvalMetric::cross_entropy(1e-12);
    assert!(ce
        .update(&[a(&[1], &[5.0])], &[a(&[1, 2], &[0.5, 0.5])])
        .is_err());
    assert!(EvalMetric::top_k_accuracy(1).is_err());
    let e = EvalMetric::create("acuracy", &Value::Null)
        .unwrap_err()
        .to_string();
    assert!(e.contains("did you mean \"accuracy\""), "{e}");
    let e = EvalMetric::create("f1", &json!({"averge": "micro"}))
        .unwrap_err()
        .to_string();
    assert!(e.contains("average"), "{e}");
}

#[test]
fn large_predictions_match_a_serial_reference() {
    // Big enough for the parallel paths; the reference is a plain loop.
    let (n, c) = (50_000, 7);
    let pred: Vec<f32> = (0..n * c).map(|i| ((i * 7919) % 1013) as f32).collect();
    let label: Vec<f32> = (0..n).map(|i| (i % c) as f32).collect();
    let mut want = 0;
    for r in 0..n {
        let row = &pred[r * c..(r + 1) * c];
        let mut best = 0;
        for k in 1..c {
            if row[k] > row[best] {
                best = k;
            }
        }
        want += usize::from(best == r % c);
    }
    let mut acc = EvalMetric::accuracy(1);
    acc.update(&[a(&[n], &label)], &[a(&[n, c], &pred)])
        .unwrap();
    assert_eq!(acc.value(), want as f64 / n as f64);
}

/// Workers' states merged (data-parallel training's global metric) give what one metric that
/// saw every batch gives, for every kind of state: sums, binary counts, moments, confusion
/// matrices that grew differently, composites.
#[test]
fn merged_worker_states_equal_one_metric_over_all_batches() {
    let binary_preds = |v: &[f32]| {
        let n = v.len();
        NDArray::from_vec(&[n, 2], v.iter().flat_map(|&p| [1.0 - p, p]).collect()).unwrap()
    };
    let batches: Vec<(NDArray, NDArray)> = vec![
        (
            NDArray::from_vec(&[4], vec![1.0, 0.0, 1.0, 1.0]).unwrap(),
            binary_preds(&[0.9, 0.2, 0.4, 0.7]),
        ),
        (
            NDArray::from_vec(&[3], vec![0.0, 0.0, 1.0]).unwrap(),
            binary_preds(&[0.6, 0.1, 0.8]),
        ),
        (
            NDArray::from_vec(&[2], vec![1.0, 0.0]).unwrap(),
            binary_preds(&[0.3, 0.4]),
        ),
    ];
    let pearson_batches: Vec<(NDArray, NDArray)> = vec![
        (
            NDArray::from_vec(&[3], vec![1.0, 2.0, 3.5]).unwrap(),
            NDArray::from_vec(&[3], vec![1.1, 1.7, 3.0]).unwrap(),
        ),
        (
            NDArray::from_vec(&[2], vec![0.5, 4.0]).unwrap(),
            NDArray::from_vec(&[2], vec![0.9, 3.2]).unwrap(),
        ),
    ];
    let kinds: Vec<(&str, Value)> = vec![
        ("acc", Value::Null),
        ("ce", Value::Null),
        ("f1", json!({"average": "micro"})),
        ("f1", json!({"average": "macro"})),
        ("mcc", json!({"average": "micro"})),
        ("pcc", Value::Null),
    ];
    for (kind, params) in kinds {
        let new = || EvalMetric::create(kind, &params).unwrap();
        let mut whole = new();
        let mut workers = [new(), new()];
        for (i, (l, p)) in batches.iter().enumerate() {
            whole
                .update(std::slice::from_ref(l), std::slice::from_ref(p))
                .unwrap();
            workers[i % 2]
                .update(std::slice::from_ref(l), std::slice::from_ref(p))
                .unwrap();
        }
        let mut pooled = new();
        for w in &workers {
            pooled.merge_state(&w.state()).unwrap();
        }
        for (got, want) in [
            (pooled.get(), whole.get()),
            (pooled.get_global(), whole.get_global()),
        ] {
            assert!(
                (got[0].1 - want[0].1).abs() < 1e-12,
                "{kind} {params}: {got:?} vs {want:?}"
            );
        }
    }
    let new = || EvalMetric::create("pearsonr", &json!({"average": "micro"})).unwrap();
    let (mut whole, mut a, mut b) = (new(), new(), new());
    for (i, (l, p)) in pearson_batches.iter().enumerate() {
        whole
            .update(std::slice::from_ref(l), std::slice::from_ref(p))
            .unwrap();
        [&mut a, &mut b][i % 2]
            .update(std::slice::from_ref(l), std::slice::from_ref(p))
            .unwrap();
    }
    let mut pooled = new();
    pooled.merge_state(&a.state()).unwrap();
    pooled.merge_state(&b.state()).unwrap();
    assert!((pooled.get()[0].1 - whole.get()[0].1).abs() < 1e-12);
    let mut comp = EvalMetric::composite(vec![
        new(),
        EvalMetric::create("mae", &Value::Null).unwrap(),
    ]);
    let state = comp.state();
    comp.merge_state(&state).unwrap();
    assert!(comp.merge_state(&state[..state.len() - 1]).is_err());
}
