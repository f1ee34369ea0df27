//! Data-parallel Modules: workers as threads of a `ThreadGroup` train to the same parameters
//! on every worker, equal (within float tolerance) to one module on the whole batch; rank 0's
//! initial values win; mismatched parameters are found at init_optimizer.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic

use mxfn_core::initializer::Initializer;
use mxfn_core::io::{DataBatch, DataDesc};
use mxfn_core::module::{
    BindOptions, Collective, InitOptions, Module, ModuleOptions, OptimizerInit, ThreadGroup,
};
use mxfn_core::optimizer::{create, Hyper, OptimizerOptions};
use mxfn_core::NDArray;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common::{argmax_problem, mlp, sgd_momentum};

fn module(hidden: usize, batch: usize, c: Option<Arc<dyn Collective>>, seed: f32) -> Module {
    let mut m = Module::new(mlp(hidden), ModuleOptions::default()).unwrap();
    m.bind(BindOptions {
        data_shapes: vec![DataDesc::new("data", &[batch, 5])],
        label_shapes: vec![DataDesc::new("softmax_label", &[batch])],
        ..Default::default()
    })
    .unwrap();
    m.set_collective(c);
    // Different initial values per worker: the broadcast must make rank 0's win.
    m.init_params(InitOptions {
        initializer: Some(Initializer::uniform(0.3 + seed as f64).unwrap()),
        ..Default::default()
    })
    .unwrap();
    m
}

/// Steps of batch `batch` over the `part` of `parts` of every global batch.
fn train(m: &mut Module, steps: usize, global: usize, part: usize, parts: usize) {
    let (x, y) = argmax_problem(steps * global, 99);
    let local = global / parts;
    for s in 0..steps {
        let b = s * global + part * local;
        let xb = NDArray::from_vec(&[local, 5], x[b * 5..(b + local) * 5].to_vec()).unwrap();
        let yb = NDArray::from_vec(&[local], y[b..b + local].to_vec()).unwrap();
        let batch = DataBatch {
            data: vec![xb],
            label: vec![yb],
            ..Default::default()
        };
        m.forward_backward(&batch).unwrap();
        m.update().unwrap();
    }
}

fn params(m: &Module) -> BTreeMap<String, Vec<f32>> {
    m.get_params()
        .unwrap()
        .0
        .into_iter()
        .map(|(k, v)| (k, v.f32s("p").unwrap().to_vec()))
        .collect()
}

#[test]
fn two_workers_match_each_other_bitwise_and_one_module_on_the_global_batch() {
    let (global, steps) = (16, 12);
    let group = ThreadGroup::with_timeout(2, Duration::from_secs(20)).unwrap();
    let results: Vec<(BTreeMap<String, Vec<f32>>, BTreeMap<String, Vec<f32>>)> =
        std::thread::scope(|s| {
            let hs: Vec<_> = group
                .into_iter()
                .map(|w| {
                    s.spawn(move || {
                        let rank = w.rank();
                        let c: Arc<dyn Collective> = Arc::new(w);
                        let mut m = module(8, global / 2, Some(c), rank as f32);
                        m.set_bucket_bytes(64); // several buckets, some packed
                        m.init_optimizer(
                            Arc::new(Mutex::new(sgd_momentum(0.5))),
                            OptimizerInit::default(),
                        )
                        .unwrap();
                        let start = params(&m);
                        train(&mut m, steps, global, rank, 2);
                        assert_eq!(m.comm_stats().steps, steps);
                        assert!(m.comm_stats().calls > steps, "{:?}", m.comm_stats());
                        (start, params(&m))
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
    assert_eq!(results[0], results[1], "the workers' parameters differ");
    // Rank 0 initialised within ±0.3, rank 1 within ±1.3: the broadcast gave rank 0's.
    let start_max = results[0]
        .0
        .values()
        .flatten()
        .fold(0.0f32, |m, v| m.max(v.abs()));
    assert!(
        start_max <= 0.3,
        "rank 0's initial values were not broadcast ({start_max})"
    );
    // One module, the whole global batch, the same initial values.
    let mut one = module(8, global, None, 0.0);
    let start: BTreeMap<String, NDArray> = results[0]
        .0
        .iter()
        .map(|(k, v)| {
            (
                k.clone(),
                NDArray::from_vec(one.get_params().unwrap().0[k].shape(), v.clone()).unwrap(),
            )
        })
        .collect();
    one.init_params(InitOptions {
        arg_params: Some(start),
        force_init: true,
        ..Default::default()
    })
    .unwrap();
    one.init_optimizer(
        Arc::new(Mutex::new(sgd_momentum(0.5))),
        OptimizerInit::default(),
    )
    .unwrap();
    train(&mut one, steps, global, 0, 1);
    let single = params(&one);
    for (name, want) in &single {
        let got = &results[0].1[name];
        let diff = got
            .iter()
            .zip(want)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0f32, f32::max);
        assert!(diff < 1e-4, "{name}: max difference {diff}");
    }
}

#[test]
fn mismatched_parameter_shapes_fail_on_every_worker_naming_the_parameter() {
    let group = ThreadGroup::with_timeout(2, Duration::from_secs(20)).unwrap();
    let errors: Vec<String> = std::thread::scope(|s| {
        let hs: Vec<_> = group
            .into_iter()
            .map(|w| {
                s.spawn(move || {
                    let hidden = if w.rank() == 0 { 8 } else { 6 };
                    let c: Arc<dyn Collective> = Arc::new(w);
                    let mut m = Module::new(mlp(hidden), ModuleOptions::default()).unwrap();
                    m.bind(BindOptions {
                        data_shapes: vec![DataDesc::new("data", &[4, 5])],
                        label_shapes: vec![DataDesc::new("softmax_label", &[4])],
                        ..Default::default()
                    })
                    .unwrap();
                    m.init_params(InitOptions::default()).unwrap();
                    m.set_collective(Some(c));
                    m.init_optimizer(
                        Arc::new(Mutex::new(sgd_momentum(0.5))),
                        OptimizerInit::default(),
                    )
                    .unwrap_err()
                    .to_string()
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for e in errors {
        assert!(
            e.contains("\"fc1_weight\"") && e.contains("(8, 5)") && e.contains("(6, 5)"),
            "{e}"
        );
    }
}

#[test]
fn module_fit_on_two_workers_reports_pooled_metrics_and_ends_identical() {
    use mxfn_core::io::{NDArrayIter, NDArrayIterOptions};
    use mxfn_core::metric::EvalMetric;
    use mxfn_core::module::FitOptions;
    let (n, local) = (64usize, 8usize);
    let (x, y) = argmax_problem(n, 99);
    let part = |rank: usize, parts: usize| {
        let (b, e) = (rank * n / parts, (rank + 1) * n / parts);
        let it = |batch| {
            NDArrayIter::new(
                vec![(
                    "data".into(),
                    NDArray::from_vec(&[e - b, 5], x[b * 5..e * 5].to_vec()).unwrap(),
                )],
                vec![(
                    "softmax_label".into(),
                    NDArray::from_vec(&[e - b], y[b..e].to_vec()).unwrap(),
                )],
                NDArrayIterOptions {
                    batch_size: batch,
                    ..Default::default()
                },
            )
            .unwrap()
        };
        (it(local), it(local))
    };
    let group = ThreadGroup::with_timeout(2, Duration::from_secs(20)).unwrap();
    let out: Vec<_> = std::thread::scope(|s| {
        let hs: Vec<_> = group
            .into_iter()
            .map(|w| {
                let part = &part;
                s.spawn(move || {
                    let rank = w.rank();
                    let (mut train, mut eval) = part(rank, 2);
                    let mut m = Module::new(mlp(8), ModuleOptions::default()).unwrap();
                    m.set_collective(Some(Arc::new(w)));
                    let opt = create(
                        "sgd",
                        OptimizerOptions::default(),
                        [("learning_rate", Hyper::Num(0.5))],
                    )
                    .unwrap();
                    let records = m
                        .fit(
                            &mut train,
                            Some(&mut eval),
                            FitOptions {
                                num_epoch: 2,
                                optimizer: Some(opt),
                                ..Default::default()
                            },
                        )
                        .unwrap();
                    let score = m
                        .score(
                            &mut eval,
                            &mut EvalMetric::create("acc", &serde_json::Value::Null).unwrap(),
                            None,
                        )
                        .unwrap();
                    (records, score, m.get_params().unwrap().0)
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let ((r0, s0, p0), (r1, s1, p1)) = (&out[0], &out[1]);
    let strip = |r: &Vec<mxfn_core::module::EpochRecord>| -> Vec<_> {
        r.iter()
            .map(|e| (e.train.clone(), e.validation.clone()))
            .collect()
    };
    assert_eq!(strip(r0), strip(r1), "the workers report different metrics");
    assert_eq!(s0, s1);
    for (k, v) in p0 {
        assert_eq!(v.f32s("p").unwrap(), p1[k].f32s("p").unwrap(), "{k}");
    }
    // The pooled score is the score of the whole data with those parameters.
    let (mut all, _) = part(0, 1);
    let mut one = Module::new(mlp(8), ModuleOptions::default()).unwrap();
    one.bind(BindOptions {
        data_shapes: vec![DataDesc::new("data", &[local, 5])],
        label_shapes: vec![DataDesc::new("softmax_label", &[local])],
        for_training: false,
        ..Default::default()
    })
    .unwrap();
    one.init_params(InitOptions {
        arg_params: Some(p0.clone()),
        ..Default::default()
    })
    .unwrap();
    let whole = one
        .score(
            &mut all,
            &mut EvalMetric::create("acc", &serde_json::Value::Null).unwrap(),
            None,
        )
        .unwrap();
    assert!((whole[0].1 - s0[0].1).abs() < 1e-12, "{whole:?} vs {s0:?}");
}
