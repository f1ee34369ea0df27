//! Optimizers and schedulers: one hand-computed step per rule, the recorded MXNet 1.9.1
//! cases (tests/data/conformance/optim and sched, including every scheduler call an
//! optimizer makes), SGLD's noise statistics, and the checks that reject nonsense.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use mxfn_core::optimizer::{
    create, lr_scheduler::Scheduler, Hyper, LrScheduler, Optimizer, OptimizerOptions, Rule,
    Schedule, SchedulerOptions, SgdOptions, SharedScheduler, State, WarmupMode,
};
use mxfn_core::tensor::random;
use mxfn_core::{NDArray, Result};
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
mod common;
use common::{conformance_dir, read_npz};

fn cases(area: &str) -> Vec<Value> {
    let text = std::fs::read_to_string(conformance_dir().join(area).join("cases.json")).unwrap();
    serde_json::from_str::<Value>(&text)
        .unwrap()
        .as_array()
        .unwrap()
        .clone()
}

fn arr(v: &[f32]) -> NDArray {
    NDArray::from_f32(&[v.len()], v.to_vec()).unwrap()
}

fn assert_close(what: &str, got: &[f64], want: &[f64], rtol: f64, atol: f64) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= atol + rtol * w.abs(),
            "{what}[{i}]: got {g}, expected {w}"
        );
    }
}

// ---------------------------------------------------------------- scheduler from JSON

fn sched_from_json(class: &str, kw: &Value) -> LrScheduler {
    let f = |k: &str, d: f64| kw.get(k).and_then(Value::as_f64).unwrap_or(d);
    let u = |k: &str| kw.get(k).and_then(Value::as_u64).unwrap();
    let opts = SchedulerOptions {
        base_lr: f("base_lr", 0.01),
        warmup_steps: kw.get("warmup_steps").and_then(Value::as_u64).unwrap_or(0),
        warmup_begin_lr: f("warmup_begin_lr", 0.0),
        warmup_mode: WarmupMode::parse(
            kw.get("warmup_mode")
                .and_then(Value::as_str)
                .unwrap_or("linear"),
        )
        .unwrap(),
    };
    let schedule = match class {
        "FactorScheduler" => Schedule::Factor {
            step: u("step"),
            factor: f("factor", 1.0),
            stop_factor_lr: f("stop_factor_lr", 1e-8),
        },
        "MultiFactorScheduler" => Schedule::MultiFactor {
            steps: kw["step"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_u64().unwrap())
                .collect(),
            factor: f("factor", 1.0),
        },
        "PolyScheduler" => Schedule::Poly {
            max_update: u("max_update"),
            pwr: f("pwr", 2.0),
            final_lr: f("final_lr", 0.0),
        },
        "CosineScheduler" => Schedule::Cosine {
            max_update: u("max_update"),
            final_lr: f("final_lr", 0.0),
        },
        other => panic!("unknown scheduler class {other}"),
    };
    LrScheduler::new(schedule, opts).unwrap()
}

#[test]
fn sched_conformance_cases() {
    let all = cases("sched");
    assert!(all.len() >= 20);
    for case in all {
        let id = case["id"].as_str().unwrap();
        let mut s = sched_from_json(case["class"].as_str().unwrap(), &case["kwargs"]);
        let got: Vec<f64> = case["num_updates"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| s.call(n.as_u64().unwrap()))
            .collect();
        let want: Vec<f64> = case["lrs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_f64().unwrap())
            .collect();
        let (rtol, atol) = (
            case["rtol"].as_f64().unwrap(),
            case["atol"].as_f64().unwrap(),
        );
        assert_close(id, &got, &want, rtol, atol);
    }
}

// ---------------------------------------------------------------- optimizer cases

/// Wraps a scheduler and records every call, as the cases' `scheduler_calls` do.
#[derive(Debug)]
struct Recording {
    inner: LrScheduler,
    calls: Arc<Mutex<Vec<(u64, f64)>>>,
}

impl Scheduler for Recording {
    fn call(&mut self, n: u64) -> Result<f64> {
        let lr = self.inner.call(n);
        self.calls.lock().unwrap().push((n, lr));
        Ok(lr)
    }
    fn base_lr(&self) -> Option<f64> {
        Some(self.inner.base_lr())
    }
    fn set_base_lr(&mut self, lr: f64) -> Result<()> {
        self.inner.set_base_lr(lr)
    }
}

fn hyper(v: &Value) -> Hyper {
    match v {
        Value::Null => Hyper::None,
        Value::Bool(b) => Hyper::Bool(*b),
        v => Hyper::Num(v.as_f64().unwrap()),
    }
}

fn name_map(v: &Value) -> BTreeMap<String, f64> {
    v.as_object()
        .map(|m| {
            m.iter()
                .map(|(k, v)| (k.clone(), v.as_f64().unwrap()))
                .collect()
        })
        .unwrap_or_default()
}

type Calls = Arc<Mutex<Vec<(u64, f64)>>>;
/// An optimizer name, its parameters, and what to check.
type Case<'a, T> = (&'a str, Vec<(&'a str, Hyper)>, T);

fn optimizer_for(case: &Value) -> (Optimizer, Calls) {
    let calls: Calls = Arc::default();
    let mut opts = OptimizerOptions::default();
    if let Some(s) = case["lr_scheduler"].as_object() {
        let inner = sched_from_json(s["class"].as_str().unwrap(), &s["kwargs"]);
        opts.lr_scheduler = Some(SharedScheduler::new(Recording {
            inner,
            calls: calls.clone(),
        }));
    }
    if let Some(m) = case["param_idx2name"].as_object() {
        opts.param_idx2name = m
            .iter()
            .map(|(k, v)| (k.parse().unwrap(), v.as_str().unwrap().to_string()))
            .collect();
    }
    if let Some(vars) = case["sym_variables"].as_array() {
        for v in vars {
            let name = v["name"].as_str().unwrap().to_string();
            if let Some(m) = v.get("lr_mult").and_then(Value::as_f64) {
                opts.lr_mult.insert(name.clone(), m);
            }
            if let Some(m) = v.get("wd_mult").and_then(Value::as_f64) {
                opts.wd_mult.insert(name, m);
            }
        }
    }
    let params: Vec<(String, Hyper)> = case["kwargs"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.clone(), hyper(v)))
        .collect();
    let mut opt = create(case["optimizer"].as_str().unwrap(), opts, params).unwrap();
    if !case["set_lr_mult"].is_null() {
        opt.set_lr_mult(name_map(&case["set_lr_mult"])).unwrap();
    }
    if !case["set_wd_mult"].is_null() {
        opt.set_wd_mult(name_map(&case["set_wd_mult"])).unwrap();
    }
    (opt, calls)
}

#[test]
fn optim_conformance_cases() {
    let dir = conformance_dir().join("optim");
    let mut ran = 0;
    for case in cases("optim") {
        if case.get("kind").and_then(Value::as_str) == Some("sgld_stats") {
            continue;
        }
        let id = case["id"].as_str().unwrap();
        let data = read_npz(&dir.join(format!("{id}.npz")));
        let (mut opt, calls) = optimizer_for(&case);
        let (rtol, atol) = (
            case["rtol"].as_f64().unwrap(),
            case["atol"].as_f64().unwrap(),
        );
        let params = case["params"].as_array().unwrap();
        let idx: Vec<usize> = params
            .iter()
            .map(|p| p["index"].as_u64().unwrap() as usize)
            .collect();
        let mut w: HashMap<usize, NDArray> = idx
            .iter()
            .map(|&i| (i, data[&format!("weight0:{i}")].clone()))
            .collect();
        let mut states: HashMap<usize, State> = HashMap::new();
        let nu_after = case["num_update_after_step"].as_array().unwrap();
        for step in 0..case["steps"].as_u64().unwrap() as usize {
            for &i in &idx {
                let weight = w.get_mut(&i).unwrap();
                let st = states
                    .entry(i)
                    .or_insert_with(|| opt.create_state(i, weight).unwrap());

                let grad = &data[&format!("grad:{i}:{step}")];
                opt.update(i, weight, grad, st)
                    .unwrap_or_else(|e| panic!("{id}: {e}"));
            }
            for &i in &idx {
                assert_close(
                    &format!("{id} weight:{i}:{step}"),
                    &w[&i].to_f64_vec(),
                    &data[&format!("weight:{i}:{step}")].to_f64_vec(),
                    rtol,
                    atol,
                );
            }
            assert_eq!(opt.num_update(), nu_after[step].as_u64().unwrap(), "{id}");
        }
        if let Some(expected) = case.get("scheduler_calls").and_then(Value::as_array) {
            let got = calls.lock().unwrap().clone();
            assert_eq!(got.len(), expected.len(), "{id}: number of scheduler calls");
            for (k, (g, e)) in got.iter().zip(expected).enumerate() {
                assert_eq!(g.0, e[0].as_u64().unwrap(), "{id}: call {k} num_update");
                assert_close(
                    &format!("{id} call {k}"),
                    &[g.1],
                    &[e[1].as_f64().unwrap()],
                    1e-12,
                    1e-15,
                );
            }
        }
        ran += 1;
    }
    assert_eq!(ran, 45);
}

#[test]
fn sgld_noise_statistics_and_seeding() {
    // The only test of this binary that draws random numbers (the stream is global).
    let case = cases("optim")
        .into_iter()
        .find(|c| c["id"] == "sgld-noise-stats")
        .unwrap();
    let kw = &case["kwargs"];
    let (lr, wd, r) = (
        kw["learning_rate"].as_f64().unwrap(),
        kw["wd"].as_f64().unwrap(),
        kw["rescale_grad"].as_f64().unwrap(),
    );
    let shape: Vec<usize> = case["params"][0]["shape"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap() as usize)
        .collect();
    let n: usize = shape.iter().product();
    let expected_std = case["expected_noise_std"].as_f64().unwrap();
    let run = |seed: u64| {
        random::seed(seed);
        let (mut opt, _) = optimizer_for(&case);
        let mut w = NDArray::full(
            &shape,
            case["weight0_fill"].as_f64().unwrap(),
            mxfn_core::DType::Float32,
        );
        let mut st = opt.create_state(0, &w).unwrap();
        let mut out = vec![];
        for fill in case["grad_fills"].as_array().unwrap() {
            let g = fill.as_f64().unwrap();
            let old = w.to_f64_vec();
            let grad = NDArray::full(&shape, g, mxfn_core::DType::Float32);
            opt.update(0, &mut w, &grad, &mut st).unwrap();
            let noise: Vec<f64> = w
                .to_f64_vec()
                .iter()
                .zip(&old)
                .map(|(new, o)| new - (o - lr / 2.0 * (r * g + wd * o)))
                .collect();
            out.push(noise);
        }
        (out, w.to_f64_vec())
    };
    let (noises, final_a) = run(7);
    for (s, noise) in noises.iter().enumerate() {
        let mean = noise.iter().sum::<f64>() / n as f64;
        let std = (noise.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n as f64).sqrt();
        assert!(
            (std / expected_std - 1.0).abs() < 0.01,
            "step {s}: std {std}"
        );
        assert!(
            mean.abs() < 5.0 * expected_std / (n as f64).sqrt(),
            "step {s}: mean {mean}"
        );
    }
    assert_eq!(run(7).1, final_a, "same seed, same weights");
    assert_ne!(run(8).1, final_a);
}

// ---------------------------------------------------------------- hand-computed steps

/// One update from w = [1, −2] with g = [0.5, 1] (and a second, different gradient for the
/// rules whose first step degenerates), against values worked out by hand in f64.
#[test]
fn one_step_matches_hand_computation() {
    let w0 = [1.0f64, -2.0];
    let g = [0.5f64, 1.0];
    let sq = |x: f64| x * x;
    type Expect = Box<dyn Fn(f64, f64) -> f64>;
    let table: Vec<Case<Expect>> = vec![
        (
            "sgd",
            vec![("learning_rate", 0.1.into()), ("wd", 0.01.into())],
            Box::new(|w, g| (1.0 - 0.1 * 0.01) * w - 0.1 * g),
        ),
        (
            "sgd",
            vec![
                ("learning_rate", 0.1.into()),
                ("momentum", 0.9.into()),
                ("rescale_grad", 0.5.into()),
                ("clip_gradient", 0.3.into()),
            ],
            Box::new(|w, g| w - 0.1 * (0.5 * g).min(0.3)),
        ),
        (
            "nag",
            vec![
                ("learning_rate", 0.1.into()),
                ("momentum", 0.9.into()),
                ("wd", 0.1.into()),
            ],
            // m = 0: w' = w + 1.9·(−lr·(g + wd·w))
            Box::new(|w, g| w + 1.9 * (-0.1 * (g + 0.1 * w))),
        ),
        (
            "adam",
            vec![("learning_rate", 0.01.into())],
            Box::new(move |w, g| {
                let (m, v) = (0.1 * g, 0.001 * g * g);
                w - 0.01 * (0.001f64).sqrt() / 0.1 * m / (v.sqrt() + 1e-8)
            }),
        ),
        (
            "adamax",
            vec![],
            Box::new(|w, g| w - 0.002 / 0.1 * (0.1 * g) / g.abs()),
        ),
        (
            "adagrad",
            vec![("learning_rate", 0.1.into()), ("wd", 0.1.into())],
            Box::new(move |w, g| w - 0.1 * (g / (sq(g) + 1e-7).sqrt() + 0.1 * w)),
        ),
        (
            "rmsprop",
            vec![("learning_rate", 0.01.into())],
            Box::new(move |w, g| w - 0.01 * g / (0.1 * sq(g) + 1e-8).sqrt()),
        ),
        (
            "rmsprop",
            vec![("learning_rate", 0.01.into()), ("centered", true.into())],
            Box::new(move |w, g| w - 0.01 * g / (0.1 * sq(g) - sq(0.1 * g) + 1e-8).sqrt()),
        ),
        (
            "adadelta",
            vec![("wd", 0.1.into())],
            Box::new(move |w, g| w - (1e-5f64).sqrt() / (0.1 * sq(g) + 1e-5).sqrt() * g - 0.1 * w),
        ),
        (
            "signum",
            vec![("learning_rate", 0.1.into())],
            Box::new(|w, g| w - 0.1 * g.signum()),
        ),
        (
            "signum",
            vec![
                ("learning_rate", 0.1.into()),
                ("momentum", 0.0.into()),
                ("wd", 0.5.into()),
            ],
            Box::new(|w, g| (1.0 - 0.05) * w - 0.1 * g.signum()),
        ),
        (
            "dcasgd",
            vec![("learning_rate", 0.1.into())],
            // w_prev = w at the first step, so the compensation term vanishes.
            Box::new(|w, g| w - 0.1 * g),
        ),
        (
            "ftrl",
            vec![],
            Box::new(|w, g| {
                let z = g - g.abs() * w / 0.1;
                let n = g * g;
                if z.abs() > 0.01 {
                    (z.signum() * 0.01 - z) / ((1.0 + n.sqrt()) / 0.1)
                } else {
                    0.0
                }
            }),
        ),
        (
            "nadam",
            vec![("learning_rate", 0.01.into())],
            Box::new(move |w, g| {
                let mu = |t: f64| 0.9 * (1.0 - 0.5 * 0.96f64.powf(t * 0.004));
                let (mu1, mu2) = (mu(1.0), mu(2.0));
                let (m, v) = (0.1 * g, 0.001 * g * g);
                let m_bar = (1.0 - mu1) * g / (1.0 - mu1) + mu2 * m / (1.0 - mu1 * mu2);
                w - 0.01 * m_bar / ((v / 0.001).sqrt() + 1e-8)
            }),
        ),
    ];
    for (name, params, expect) in table {
        let mut opt = create(name, OptimizerOptions::default(), params.clone()).unwrap();
        let mut w = arr(&[w0[0] as f32, w0[1] as f32]);
        let mut st = opt.create_state(0, &w).unwrap();
        opt.update(0, &mut w, &arr(&[g[0] as f32, g[1] as f32]), &mut st)
            .unwrap();
        let want: Vec<f64> = w0.iter().zip(&g).map(|(&w, &g)| expect(w, g)).collect();
        assert_close(
            &format!("{name} {params:?}"),
            &w.to_f64_vec(),
            &want,
            1e-5,
            1e-7,
        );
    }
}

// ---------------------------------------------------------------- semantics

#[test]
fn state_shapes_mirror_mxnet() {
    let w = arr(&[1.0, 2.0, 3.0]);
    let shape = |name: &str, params: Vec<(&str, Hyper)>| {
        create(name, OptimizerOptions::default(), params)
            .unwrap()
            .create_state(0, &w)
            .unwrap()
            .describe()
    };
    assert_eq!(shape("sgd", vec![]), "None");
    assert_eq!(shape("sgd", vec![("momentum", 0.9.into())]), "array (3,)");
    assert_eq!(shape("adam", vec![]), "(array (3,), array (3,))");
    assert_eq!(shape("rmsprop", vec![]), "(array (3,),)");
    assert_eq!(
        shape("rmsprop", vec![("centered", true.into())]),
        "(array (3,), array (3,), array (3,))"
    );
    assert_eq!(shape("dcasgd", vec![]), "(None, array (3,))");
    assert_eq!(shape("sgld", vec![]), "None");
    assert_eq!(shape("adagrad", vec![]), "array (3,)");
    assert_eq!(shape("ftrl", vec![]), "(array (3,), array (3,))");
}

#[test]
fn update_is_copy_on_write_and_checks_before_counting() {
    let mut opt = create(
        "adam",
        OptimizerOptions::default(),
        [("learning_rate", Hyper::Num(0.1))],
    )
    .unwrap();
    let w0 = arr(&[1.0, 2.0]);
    let mut w = w0.clone();
    let mut st = opt.create_state(3, &w).unwrap();
    let st0 = st.clone();
    opt.update(3, &mut w, &arr(&[1.0, 1.0]), &mut st).unwrap();
    assert_eq!(w0.to_f64_vec(), vec![1.0, 2.0]);
    assert!(st0
        .arrays()
        .iter()
        .all(|a| a.to_f64_vec() == vec![0.0, 0.0]));
    assert_ne!(w.to_f64_vec(), vec![1.0, 2.0]);

    // Wrong grad shape, wrong state: errors, and nothing counted.
    let bad_grad = NDArray::from_f32(&[3], vec![1.0; 3]).unwrap();
    let e = opt
        .update(3, &mut w, &bad_grad, &mut st)
        .unwrap_err()
        .to_string();
    assert!(e.contains("grad of index 3"), "{e}");
    let e = opt
        .update(3, &mut w, &arr(&[1.0, 1.0]), &mut State::None)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("state of index 3") && e.contains("(array (2,), array (2,))"),
        "{e}"
    );
    let intw = NDArray::zeros(&[2], mxfn_core::DType::Int32);
    assert!(opt.create_state(0, &intw).is_err());
    assert_eq!(opt.num_update(), 1);
    assert_eq!(opt.update_count(3), Some(1));
}

#[test]
fn float16_and_float64_weights_update_in_their_dtype() {
    for dt in [mxfn_core::DType::Float16, mxfn_core::DType::Float64] {
        let mut opt = Optimizer::new(
            Rule::Sgd(Default::default()),
            OptimizerOptions {
                learning_rate: Some(0.5),
                ..Default::default()
            },
        )
        .unwrap();
        let mut w = NDArray::from_f64_slice(&[2], &[1.0, 2.0], dt).unwrap();
        let g = NDArray::from_f64_slice(&[2], &[1.0, -1.0], dt).unwrap();
        let mut st = opt.create_state(0, &w).unwrap();
        opt.update(0, &mut w, &g, &mut st).unwrap();
        assert_eq!(w.dtype(), dt);
        assert_eq!(w.to_f64_vec(), vec![0.5, 2.5]);
    }
}

#[test]
fn multipliers_follow_mxnet_layering() {
    let idx2name: BTreeMap<usize, String> = [
        (0, "fc_weight"),
        (1, "fc_bias"),
        (2, "bn_gamma"),
        (3, "bn_beta"),
    ]
    .into_iter()
    .map(|(i, n)| (i, n.to_string()))
    .collect();
    let mut opt = Optimizer::new(
        Rule::Sgd(SgdOptions::default()),
        OptimizerOptions {
            learning_rate: Some(0.1),
            wd: 0.1,
            param_idx2name: idx2name,
            wd_mult: [("fc_bias".to_string(), 0.5)].into(),
            lr_mult: [("fc_weight".to_string(), 2.0)].into(),
            ..Default::default()
        },
    )
    .unwrap();
    // Biases and betas are not decayed, unless the symbol layer says so.
    assert_eq!(opt.wd_mult().get("bn_beta"), Some(&0.0));
    assert_eq!(opt.wd_mult().get("fc_bias"), Some(&0.5));
    assert_eq!(opt.wd_mult().get("fc_weight"), None);
    opt.set_lr_mult([("bn_gamma".to_string(), 3.0)].into())
        .unwrap();
    assert_eq!(opt.lr_mult().get("fc_weight"), Some(&2.0));
    opt.set_lr_mult([("bn_beta".to_string(), 0.0)].into())
        .unwrap();
    assert_eq!(
        opt.lr_mult().get("bn_gamma"),
        None,
        "a new call does not merge"
    );
    // lr_mult 0 freezes: w unchanged.
    let mut w = arr(&[1.0]);
    let mut st = opt.create_state(3, &w).unwrap();
    opt.update(3, &mut w, &arr(&[1.0]), &mut st).unwrap();
    assert_eq!(w.to_f64_vec(), vec![1.0]);
    assert!(opt
        .set_wd_mult([("x".to_string(), f64::NAN)].into())
        .is_err());
}

#[test]
fn scheduler_base_lr_override_rules() {
    let fresh = || {
        SharedScheduler::new(
            LrScheduler::new(
                Schedule::factor(10, 0.5),
                SchedulerOptions {
                    base_lr: 0.5,
                    ..Default::default()
                },
            )
            .unwrap(),
        )
    };
    let with = |name: &str, lr: Option<f64>| {
        let s = fresh();
        let opt = create(
            name,
            OptimizerOptions {
                lr_scheduler: Some(s.clone()),
                learning_rate: lr,
                ..Default::default()
            },
            [] as [(&str, Hyper); 0],
        )
        .unwrap();
        (s.base_lr().unwrap(), opt.warnings().len())
    };
    assert_eq!(with("sgd", None), (0.5, 0));
    assert_eq!(with("sgd", Some(0.2)), (0.2, 1));
    assert_eq!(with("adam", None), (0.001, 1));
    assert_eq!(with("signum", None), (0.01, 1));
    assert_eq!(with("ftrl", Some(0.3)), (0.5, 0));
    assert_eq!(with("adagrad", Some(0.5)), (0.5, 0));

    // set_learning_rate is refused while a scheduler decides; AdaDelta never asks it.
    let s = fresh();
    let mut opt = create(
        "adadelta",
        OptimizerOptions {
            lr_scheduler: Some(s.clone()),
            ..Default::default()
        },
        [] as [(&str, Hyper); 0],
    )
    .unwrap();
    assert!(opt.set_learning_rate(0.1).is_err());
    let mut w = arr(&[1.0]);
    let mut st = opt.create_state(0, &w).unwrap();
    for _ in 0..30 {
        opt.update(0, &mut w, &arr(&[1.0]), &mut st).unwrap();
    }
    assert_eq!(s.base_lr(), Some(0.5), "the scheduler was never called");
    // learning_rate() asks the scheduler with num_update (and so advances it).
    assert_eq!(opt.learning_rate().unwrap(), 0.5 * 0.5 * 0.5);
}

#[test]
fn nonsense_is_rejected_at_creation() {
    let bad: Vec<Case<&str>> = vec![
        (
            "sgd",
            vec![("learning_rate", f64::NAN.into())],
            "learning_rate",
        ),
        (
            "sgd",
            vec![("learning_rate", (-0.1).into())],
            "learning_rate",
        ),
        ("sgd", vec![("momentum", (-0.5).into())], "momentum"),
        ("sgd", vec![("momentum", 1.0.into())], "momentum"),
        ("sgd", vec![("wd", f64::INFINITY.into())], "wd"),
        (
            "sgd",
            vec![("clip_gradient", (-1.0).into())],
            "clip_gradient",
        ),
        (
            "sgd",
            vec![("rescale_grad", f64::NAN.into())],
            "rescale_grad",
        ),
        (
            "sgd",
            vec![("begin_num_update", 1.5.into())],
            "begin_num_update",
        ),
        (
            "sgd",
            vec![("momentun", 0.9.into())],
            "did you mean \"momentum\"",
        ),
        ("sgd", vec![("momentum", true.into())], "momentum"),
        ("adam", vec![("beta1", 1.0.into())], "beta1"),
        ("adam", vec![("beta2", (-0.1).into())], "beta2"),
        ("nadam", vec![("beta1", 1.5.into())], "beta1"),
        ("adamax", vec![("beta2", 1.0.into())], "beta2"),
        ("rmsprop", vec![("gamma1", 1.0.into())], "gamma1"),
        (
            "rmsprop",
            vec![("clip_weights", (-1.0).into())],
            "clip_weights",
        ),
        ("adadelta", vec![("rho", 2.0.into())], "rho"),
        ("adadelta", vec![("epsilon", 0.0.into())], "epsilon"),
        (
            "signum",
            vec![("momentum", 0.0.into()), ("wd_lh", 0.1.into())],
            "wd_lh",
        ),
        ("ftrl", vec![("learning_rate", 0.0.into())], "learning_rate"),
        ("sdg", vec![], "did you mean \"sgd\""),
    ];
    for (name, params, needle) in bad {
        let e = create(name, OptimizerOptions::default(), params.clone())
            .err()
            .unwrap_or_else(|| panic!("{name} {params:?} was accepted"))
            .to_string();
        assert!(e.contains(needle), "{name} {params:?}: {e}");
    }
    // Names are case-insensitive, like MXNet's registry.
    assert_eq!(
        create(
            "RMSProp",
            OptimizerOptions::default(),
            [] as [(&str, Hyper); 0]
        )
        .unwrap()
        .name(),
        "rmsprop"
    );
}

#[test]
fn large_arrays_update_in_parallel_like_small_ones() {
    // Every element is independent, so a big array equals its pieces updated alone.
    let n = 100_003;
    let w0: Vec<f32> = (0..n).map(|i| ((i % 97) as f32 - 48.0) / 10.0).collect();
    let g: Vec<f32> = (0..n).map(|i| ((i % 31) as f32 - 15.0) / 7.0).collect();
    let mk = || {
        create(
            "adam",
            OptimizerOptions::default(),
            [("wd", Hyper::Num(0.01))],
        )
        .unwrap()
    };
    let mut big = NDArray::from_f32(&[n], w0.clone()).unwrap();
    let mut opt = mk();
    let mut st = opt.create_state(0, &big).unwrap();
    opt.update(
        0,
        &mut big,
        &NDArray::from_f32(&[n], g.clone()).unwrap(),
        &mut st,
    )
    .unwrap();
    let big = big.to_f64_vec();
    for start in [0usize, 50_000, 100_000] {
        let end = (start + 3).min(n);
        let mut small = NDArray::from_f32(&[end - start], w0[start..end].to_vec()).unwrap();
        let mut opt = mk();
        let mut st = opt.create_state(0, &small).unwrap();
        let gs = NDArray::from_f32(&[end - start], g[start..end].to_vec()).unwrap();
        opt.update(0, &mut small, &gs, &mut st).unwrap();
        assert_eq!(small.to_f64_vec(), big[start..end].to_vec());
    }
}
