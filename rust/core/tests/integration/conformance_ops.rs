//! Runs the recorded MXNet 1.9.1 operator cases (tests/data/conformance/ops): load the case's
//! symbol JSON, bind the recorded arguments, compare forward outputs, gradients and auxiliary
//! states at the case's tolerances.
//!
//! `MXFN_OPS=Convolution,Pooling` limits the run to cases of those ops (while developing).

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic

use mxfn_core::executor::{Executor, GradReq};
use mxfn_core::symbol::json::load_json;
use mxfn_core::{Context, DType, NDArray};
use serde_json::Value;

use crate::common::{conformance_dir, read_npz};

fn close(what: &str, got: &NDArray, want: &NDArray, rtol: f64, atol: f64) -> Result<(), String> {
    if got.shape() != want.shape() {
        return Err(format!(
            "{what}: shape {:?}, expected {:?}",
            got.shape(),
            want.shape()
        ));
    }
    for (i, (g, w)) in got.to_f64_vec().iter().zip(want.to_f64_vec()).enumerate() {
        let ok = (g - w).abs() <= atol + rtol * w.abs() || (g.is_nan() && w.is_nan());
        if !ok {
            return Err(format!("{what}[{i}]: {g}, expected {w}"));
        }
    }
    Ok(())
}

fn run_case(case: &Value, dir: &std::path::Path) -> Result<(), String> {
    let id = case["id"].as_str().unwrap();
    let sym = load_json(case["symbol"].as_str().unwrap()).map_err(|e| format!("load_json: {e}"))?;
    let data = read_npz(&dir.join(format!("{id}.npz")));
    let rtol = case["rtol"].as_f64().unwrap_or(1e-4);
    let atol = case["atol"].as_f64().unwrap_or(1e-5);
    let arg_names = sym.list_arguments();
    let aux_names = sym.list_auxiliary_states();
    let args: Vec<NDArray> = arg_names
        .iter()
        .map(|n| {
            data.get(&format!("arg:{n}"))
                .cloned()
                .ok_or(format!("no arg:{n}"))
        })
        .collect::<Result<_, _>>()?;
    let aux: Vec<NDArray> = aux_names
        .iter()
        .map(|n| {
            data.get(&format!("aux:{n}"))
                .cloned()
                .ok_or(format!("no aux:{n}"))
        })
        .collect::<Result<_, _>>()?;
    let reqs: Vec<GradReq> = arg_names
        .iter()
        .map(|n| match &case["grad_req"] {
            Value::String(s) => GradReq::parse(s).unwrap(),
            Value::Object(m) => m
                .get(n)
                .and_then(Value::as_str)
                .map(|s| GradReq::parse(s).unwrap())
                .unwrap_or(GradReq::Write),
            _ => GradReq::Write,
        })
        .collect();
    let backward = case["backward"].as_bool().unwrap_or(true);
    let reqs = if backward {
        reqs
    } else {
        vec![GradReq::Null; arg_names.len()]
    };
    let mut exe = Executor::bind(
        &sym,
        Context::cpu(0),
        args,
        vec![None; arg_names.len()],
        reqs.clone(),
        aux,
    )
    .map_err(|e| format!("bind: {e}"))?;
    exe.forward(case["is_train"].as_bool().unwrap_or(false))
        .map_err(|e| format!("forward: {e}"))?;
    for (i, o) in exe.outputs().iter().enumerate() {
        let want = data.get(&format!("out:{i}")).ok_or(format!("no out:{i}"))?;
        close(
            &format!("out:{i}"),
            &o.astype(DType::Float32),
            &want.astype(DType::Float32),
            rtol,
            atol,
        )?;
    }
    if !backward {
        return Ok(());
    }
    let heads: Vec<NDArray> = (0..exe.outputs().len())
        .filter_map(|i| data.get(&format!("head_grad:{i}")).cloned())
        .collect();
    exe.backward(&heads).map_err(|e| format!("backward: {e}"))?;
    for (i, n) in arg_names.iter().enumerate() {
        if reqs[i] == GradReq::Null {
            continue;
        }
        if let Some(want) = data.get(&format!("grad:{n}")) {
            let got = exe.grad_arrays[i]
                .clone()
                .ok_or(format!("no gradient for {n}"))?;
            close(
                &format!("grad:{n}"),
                &got.astype(DType::Float32),
                &want.astype(DType::Float32),
                rtol,
                atol,
            )?;
        }
    }
    for (i, n) in aux_names.iter().enumerate() {
        if let Some(want) = data.get(&format!("aux_after:{n}")) {
            close(
                &format!("aux_after:{n}"),
                &exe.aux_arrays[i].astype(DType::Float32),
                &want.astype(DType::Float32),
                rtol,
                atol,
            )?;
        }
    }
    Ok(())
}

#[test]
fn mxnet_operator_cases() {
    let dir = conformance_dir().join("ops");
    let cases: Vec<Value> =
        serde_json::from_str(&std::fs::read_to_string(dir.join("cases.json")).unwrap()).unwrap();
    let only: Option<Vec<String>> = std::env::var("MXFN_OPS")
        .ok()
        .map(|s| s.split(',').map(str::to_string).collect());
    let (mut passed, mut skipped, mut failures) = (0, Vec::new(), Vec::new());
    for case in &cases {
        let op = case["op"].as_str().unwrap_or("");
        let id = case["id"].as_str().unwrap_or("");
        if only.as_ref().is_some_and(|o| !o.iter().any(|x| x == op)) {
            continue;
        }
        // Cases whose graph uses an operator not registered yet are counted, not run.
        let text = case["symbol"].as_str().unwrap_or("");
        let graph: Value = serde_json::from_str(text).unwrap();
        let missing: Vec<String> = graph["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|n| n["op"].as_str())
            .filter(|o| *o != "null" && mxfn_core::ops::lookup(o).is_err())
            .map(str::to_string)
            .collect();
        if !missing.is_empty() {
            skipped.push(format!("{id} ({})", missing.join(", ")));
            continue;
        }
        match run_case(case, &dir) {
            Ok(()) => passed += 1,
            Err(e) => failures.push(format!("{id}: {e}")),
        }
    }
    println!(
        "conformance ops: {passed} passed, {} failed, {} not yet registered",
        failures.len(),
        skipped.len()
    );
    for s in &skipped {
        println!("  not registered: {s}");
    }
    assert!(
        failures.is_empty(),
        "{} cases failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
