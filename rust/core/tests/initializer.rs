//! Initializers: the recorded MXNet 1.9.1 cases (tests/data/conformance/init) through the Rust
//! API — exact cases value for value, random ones by the statistics the case README gives —
//! plus the name rules, JSON specs and seeding.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use mxfn_core::initializer::{Initializer, NameMatcher};
use mxfn_core::tensor::random;
use mxfn_core::{DType, NDArray};
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
mod common;
use common::{conformance_dir, read_npz};

/// Tests that draw random numbers hold this, so `seed` → same numbers holds under parallel tests.
static RNG: Mutex<()> = Mutex::new(());

fn cases() -> Value {
    let p = conformance_dir().join("init/cases.json");
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

fn simple(spec: &Value) -> Initializer {
    Initializer::create(spec["class"].as_str().unwrap(), &spec["kwargs"]).unwrap()
}

/// The regexes of the recorded Mixed cases as Rust matchers (Python uses `re.match`).
fn matcher(pattern: &str) -> NameMatcher {
    match pattern {
        ".*" => NameMatcher::any(),
        p => NameMatcher::prefix(p.trim_start_matches('^')),
    }
}

fn make(spec: &Value, data: &HashMap<String, NDArray>) -> Initializer {
    match spec["class"].as_str().unwrap() {
        "Mixed" => Initializer::Mixed(
            spec["patterns"]
                .as_array()
                .unwrap()
                .iter()
                .zip(spec["initializers"].as_array().unwrap())
                .map(|(p, i)| (matcher(p.as_str().unwrap()), simple(i)))
                .collect(),
        ),
        "Load" => Initializer::Load {
            params: spec["param_names"]
                .as_array()
                .unwrap()
                .iter()
                .map(|n| {
                    let n = n.as_str().unwrap();
                    let key = n.trim_start_matches("arg:").trim_start_matches("aux:");
                    (key.to_string(), data[&format!("load:{n}")].clone())
                })
                .collect(),
            default: Some(Box::new(simple(&spec["default_init"]))),
        },
        _ => simple(spec),
    }
}

#[test]
fn recorded_exact_cases() {
    let dir = conformance_dir().join("init");
    for case in cases()["exact"].as_array().unwrap() {
        let id = case["id"].as_str().unwrap();
        let data = match case["npz"].as_str() {
            Some(f) => read_npz(&dir.join(f)),
            None => HashMap::new(),
        };
        let init = make(&case["init"], &data);
        let shape: Vec<usize> = case["shape"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d.as_u64().unwrap() as usize)
            .collect();
        let arr = NDArray::full(
            &shape,
            case["initial_fill"].as_f64().unwrap(),
            DType::Float32,
        );
        let attrs: Option<BTreeMap<String, String>> = case["attrs"].as_object().map(|m| {
            m.iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_string()))
                .collect()
        });
        let got = init.apply(case["name"].as_str().unwrap(), attrs.as_ref(), &arr);
        // SPEC §2 gives moving_mean 0 and moving_var 1 by name, where MXNet raised.
        let spec_value = match id {
            "uniform-default-bn_moving_mean-initdesc" => Some(0.0),
            "uniform-default-bn_moving_var-initdesc" => Some(1.0),
            _ => None,
        };
        if let Some(v) = spec_value {
            assert_eq!(got.unwrap().to_f64_vec(), vec![v; 6], "{id}");
        } else if case["expect"] == "error" {
            assert!(got.is_err(), "{id}: expected an error");
        } else {
            let got = got.unwrap_or_else(|e| panic!("{id}: {e}"));
            assert_eq!(got.shape(), &shape[..], "{id}");
            assert_eq!(got.to_f64_vec(), data["out"].to_f64_vec(), "{id}");
            assert_eq!(arr.to_f64_vec()[0], 123.0, "{id}: input changed");
        }
    }
}

fn pooled(init: &Initializer, name: &str, shape: &[usize], draws: usize) -> Vec<Vec<f64>> {
    let arr = NDArray::zeros(shape, DType::Float32);
    (0..draws)
        .map(|_| init.apply(name, None, &arr).unwrap().to_f64_vec())
        .collect()
}

#[test]
fn recorded_stats_cases() {
    let _g = RNG.lock().unwrap_or_else(|p| p.into_inner());
    for case in cases()["stats"].as_array().unwrap() {
        let id = case["id"].as_str().unwrap();
        random::seed(case["seed"].as_u64().unwrap());
        let shape: Vec<usize> = case["shape"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d.as_u64().unwrap() as usize)
            .collect();
        let draws = pooled(
            &simple(&case["init"]),
            case["name"].as_str().unwrap(),
            &shape,
            case["num_draws"].as_u64().unwrap() as usize,
        );
        let all: Vec<f64> = draws.iter().flatten().copied().collect();
        let n = all.len() as f64;
        let mean = all.iter().sum::<f64>() / n;
        let std = (all.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / n).sqrt();
        let (min, max) = all
            .iter()
            .fold((f64::MAX, f64::MIN), |(a, b), &v| (a.min(v), b.max(v)));
        let th = &case["theory"];
        match case["distribution"].as_str().unwrap() {
            "uniform" => {
                let b = th["bound"].as_f64().unwrap();
                let sigma = b / 3f64.sqrt();
                assert!(all.iter().all(|v| v.abs() <= b * (1.0 + 1e-6)), "{id}");
                assert!(max >= b * (1.0 - 2e-3) && min <= -b * (1.0 - 2e-3), "{id}");
                assert!(mean.abs() <= 5.0 * sigma / n.sqrt(), "{id}: mean {mean}");
                assert!((std / sigma - 1.0).abs() <= 0.01, "{id}: std {std}");
            }
            "normal" => {
                let sigma = th["std"].as_f64().unwrap();
                assert!(mean.abs() <= 5.0 * sigma / n.sqrt(), "{id}: mean {mean}");
                assert!((std / sigma - 1.0).abs() <= 0.01, "{id}: std {std}");
                assert!(min.abs().max(max.abs()) <= 7.0 * sigma, "{id}");
            }
            _ => {
                let scale = th["scale"].as_f64().unwrap();
                let (nout, nin) = (
                    th["nout"].as_u64().unwrap() as usize,
                    th["nin"].as_u64().unwrap() as usize,
                );
                let tol = 1e-5 * scale.powi(2).max(1.0);
                for w in &draws {
                    let (rows, k, len) = if nout <= nin {
                        (true, nout, nin)
                    } else {
                        (false, nin, nout)
                    };
                    let at =
                        |a: usize, t: usize| if rows { w[a * nin + t] } else { w[t * nin + a] };
                    for i in 0..k {
                        for j in 0..k {
                            let g: f64 = (0..len).map(|t| at(i, t) * at(j, t)).sum();
                            let want = if i == j { scale * scale } else { 0.0 };
                            assert!((g - want).abs() <= tol, "{id}: gram[{i},{j}] = {g}");
                        }
                    }
                    let fro = w.iter().map(|v| v * v).sum::<f64>().sqrt();
                    let want = th["frobenius_norm"].as_f64().unwrap();
                    assert!((fro / want - 1.0).abs() <= 1e-5, "{id}: frobenius {fro}");
                }
                let es = th["entry_std"].as_f64().unwrap();
                assert!((std / es - 1.0).abs() <= 0.01, "{id}: entry std {std}");
            }
        }
    }
}

#[test]
fn same_seed_same_weights() {
    let _g = RNG.lock().unwrap_or_else(|p| p.into_inner());
    let init = Initializer::from_json(r#"["orthogonal", {"rand_type": "normal"}]"#).unwrap();
    let arr = NDArray::zeros(&[6, 4], DType::Float32);
    random::seed(11);
    let a = init.apply("w_weight", None, &arr).unwrap().to_f64_vec();
    random::seed(11);
    assert_eq!(init.apply("w_weight", None, &arr).unwrap().to_f64_vec(), a);
}

#[test]
fn name_rules_attrs_and_errors() {
    let _g = RNG.lock().unwrap_or_else(|p| p.into_inner());
    let u = Initializer::uniform(0.07).unwrap();
    let arr = NDArray::full(&[3], 9.0, DType::Float64);
    for (name, want) in [
        ("fc_bias", 0.0),
        ("bn_moving_mean", 0.0),
        ("bn_running_mean", 0.0),
        ("x_moving_inv_var", 0.0),
        ("x_moving_avg", 0.0),
        ("q_min", 0.0),
        ("bn_gamma", 1.0),
        ("bn_moving_var", 1.0),
        ("bn_running_var", 1.0),
        ("q_max", 1.0),
    ] {
        let out = u.apply(name, None, &arr).unwrap();
        assert_eq!(out.to_f64_vec(), vec![want; 3], "{name}");
        assert_eq!(out.dtype(), DType::Float64);
    }
    let err = u.apply("data", None, &arr).unwrap_err().to_string();
    assert!(err.contains("\"data\""), "{err}");
    let attrs: BTreeMap<String, String> = [("__init__".to_string(), "ones".to_string())].into();
    assert_eq!(
        u.apply("data", Some(&attrs), &arr).unwrap().to_f64_vec(),
        vec![1.0; 3]
    );
    let attrs: BTreeMap<String, String> = [(
        "__init__".to_string(),
        r#"["constant", {"value": 2.5}]"#.to_string(),
    )]
    .into();
    assert_eq!(
        u.apply("fc_bias", Some(&attrs), &arr).unwrap().to_f64_vec(),
        vec![2.5; 3]
    );
    let bad: BTreeMap<String, String> = [("__init__".to_string(), "xavierr".to_string())].into();
    let e = u.apply("w", Some(&bad), &arr).unwrap_err().to_string();
    assert!(e.contains("did you mean \"xavier\""), "{e}");
    // Xavier needs 2-D weights.
    let e = Initializer::xavier_default()
        .apply("v_weight", None, &arr)
        .unwrap_err()
        .to_string();
    assert!(e.contains("v_weight"), "{e}");
    assert!(Initializer::create("normal", &serde_json::json!({"sigma": -1})).is_err());
    assert!(Initializer::create("uniform", &serde_json::json!({"scal": 1})).is_err());
    // Load: a shape mismatch names the parameter; a miss without default too.
    let load = Initializer::Load {
        params: [("w".to_string(), NDArray::zeros(&[2], DType::Float32))].into(),
        default: None,
    };
    assert!(load
        .apply("w", None, &arr)
        .unwrap_err()
        .to_string()
        .contains("\"w\""));
    assert!(load
        .apply("z", None, &arr)
        .unwrap_err()
        .to_string()
        .contains("\"z\""));
}

#[test]
fn json_specs_round_trip() {
    for spec in [
        r#"["uniform", {"scale": 0.07}]"#,
        r#"["normal", {"sigma": 0.5}]"#,
        r#"["xavier", {"rnd_type": "gaussian", "factor_type": "in", "magnitude": 2.0}]"#,
        r#"["msraprelu", {"factor_type": "avg", "slope": 0.25}]"#,
        r#"["constant", {"value": 0.5}]"#,
        r#"["zero", {}]"#,
        r#"["one", {}]"#,
        r#"["orthogonal", {"scale": 1.414, "rand_type": "uniform"}]"#,
        r#"["bilinear", {}]"#,
        r#"["lstmbias", {"forget_bias": 1.0}]"#,
    ] {
        assert_eq!(
            Initializer::from_json(spec).unwrap().to_json().unwrap(),
            spec
        );
    }
    // MXNet's rnd_type and mxfn's alias rand_type; plain names and aliases.
    let x = Initializer::from_json(r#"["xavier", {"rand_type": "gaussian"}]"#).unwrap();
    assert!(x.to_json().unwrap().contains("\"rnd_type\": \"gaussian\""));
    assert_eq!(
        Initializer::from_json("zeros").unwrap().to_json().unwrap(),
        r#"["zero", {}]"#
    );
}
