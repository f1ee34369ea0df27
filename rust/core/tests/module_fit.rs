//! Module::fit / score / predict on small synthetic data.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic

use mxfn_core::initializer::Initializer;
use mxfn_core::io::{DataIter, NDArrayIter, NDArrayIterOptions};
use mxfn_core::metric::EvalMetric;
use mxfn_core::module::{BatchEndParam, FitOptions, InitOptions, Module, ModuleOptions};
use mxfn_core::symbol::Symbol;
use mxfn_core::{Context, Error, NDArray};
use std::sync::{Arc, Mutex};
mod common;
use common::{argmax_arrays, mlp, sgd_momentum};

fn iter(x: &NDArray, y: &NDArray, batch_size: usize, shuffle: bool) -> NDArrayIter {
    NDArrayIter::new(
        vec![("data".into(), x.clone())],
        vec![("softmax_label".into(), y.clone())],
        NDArrayIterOptions {
            batch_size,
            shuffle,
            seed: Some(7),
            ..Default::default()
        },
    )
    .unwrap()
}

fn module(contexts: Vec<Context>) -> Module {
    Module::new(
        mlp(16),
        ModuleOptions {
            contexts,
            ..Default::default()
        },
    )
    .unwrap()
}

fn fit_opts(num_epoch: usize) -> FitOptions {
    FitOptions {
        num_epoch,
        optimizer: Some(sgd_momentum(0.2)),
        initializer: Some(Initializer::xavier_default()),
        ..Default::default()
    }
}

fn argmax_rows(p: &NDArray) -> Vec<usize> {
    let k = p.shape()[1];
    p.to_f64_vec()
        .chunks(k)
        .map(|r| (0..k).max_by(|&a, &b| r[a].total_cmp(&r[b])).unwrap())
        .collect()
}

#[test]
fn fit_learns_and_records_every_epoch() {
    mxfn_core::tensor::random::seed(1);
    let (x, y) = argmax_arrays(300, 1);
    let (vx, vy) = argmax_arrays(90, 2);
    let mut train = iter(&x, &y, 30, true);
    let mut val = iter(&vx, &vy, 30, false);
    let mut m = module(vec![Context::cpu(0)]);
    let batches = Arc::new(Mutex::new(Vec::new()));
    let seen = batches.clone();
    let epochs_seen = Arc::new(Mutex::new(Vec::new()));
    let e2 = epochs_seen.clone();
    let records = m
        .fit(
            &mut train,
            Some(&mut val),
            FitOptions {
                batch_end_callback: Some(Box::new(move |p: &BatchEndParam<'_>| {
                    seen.lock().unwrap().push((p.epoch, p.nbatch));
                })),
                epoch_end_callback: Some(Box::new(move |epoch: usize, m: &Module| {
                    assert!(m.params_initialized());
                    e2.lock().unwrap().push(epoch);
                    Ok(())
                })),
                ..fit_opts(8)
            },
        )
        .unwrap();
    assert_eq!(records.len(), 8);
    assert_eq!(*epochs_seen.lock().unwrap(), (0..8).collect::<Vec<_>>());
    let b = batches.lock().unwrap();
    assert_eq!(
        b.len(),
        8 * 10,
        "10 batches per epoch (train reset every epoch)"
    );
    assert_eq!(b[10], (1, 0));
    for r in &records {
        assert_eq!(r.train.len(), 1);
        assert_eq!(r.train[0].0, "accuracy");
        assert_eq!(r.validation[0].0, "accuracy");
        assert!(r.seconds >= 0.0);
    }
    let first = records[0].train[0].1;
    let last = records.last().unwrap();
    assert!(last.train[0].1 > 0.9, "train accuracy {:?}", last.train);
    assert!(last.train[0].1 >= first);
    assert!(
        last.validation[0].1 > 0.85,
        "validation {:?}",
        last.validation
    );
    // score gives what the last evaluation gave.
    let s = m
        .score(&mut val, &mut EvalMetric::accuracy(1), None)
        .unwrap();
    assert_eq!(s, last.validation);
    // predict agrees with score.
    let p = m.predict(&mut val, None).unwrap();
    assert_eq!(p.len(), 1);
    assert_eq!(p[0].shape(), &[90, 3]);
    let labels = vy.to_f64_vec();
    let right = argmax_rows(&p[0])
        .iter()
        .zip(&labels)
        .filter(|(a, b)| **a as f64 == **b)
        .count();
    assert!((right as f64 / 90.0 - s[0].1).abs() < 1e-12);
}

/// MXNet's order within an epoch: training batches, the epoch-end callback (parameters
/// final for the epoch), then the validation batches and the eval-end callback.
#[test]
fn callbacks_run_in_mxnets_order() {
    let (x, y) = argmax_arrays(60, 1);
    let (vx, vy) = argmax_arrays(40, 2);
    let mut train = iter(&x, &y, 30, false);
    let mut val = iter(&vx, &vy, 20, false);
    let mut m = module(vec![Context::cpu(0)]);
    let log = Arc::new(Mutex::new(Vec::<String>::new()));
    let (l1, l2, l3, l4) = (log.clone(), log.clone(), log.clone(), log.clone());
    m.fit(
        &mut train,
        Some(&mut val),
        FitOptions {
            batch_end_callback: Some(Box::new(move |p: &BatchEndParam<'_>| {
                l1.lock()
                    .unwrap()
                    .push(format!("train{}.{}", p.epoch, p.nbatch));
            })),
            epoch_end_callback: Some(Box::new(move |epoch: usize, _: &Module| {
                l2.lock().unwrap().push(format!("epoch_end{epoch}"));
                Ok(())
            })),
            eval_batch_end_callback: Some(Box::new(move |p: &BatchEndParam<'_>| {
                l3.lock()
                    .unwrap()
                    .push(format!("eval{}.{}", p.epoch, p.nbatch));
            })),
            eval_end_callback: Some(Box::new(move |p: &BatchEndParam<'_>| {
                assert_eq!(p.eval_metric.get()[0].0, "accuracy");
                l4.lock()
                    .unwrap()
                    .push(format!("eval_end{}.{}", p.epoch, p.nbatch));
            })),
            ..fit_opts(2)
        },
    )
    .unwrap();
    let want: Vec<String> = [
        "train0.0",
        "train0.1",
        "epoch_end0",
        "eval0.0",
        "eval0.1",
        "eval_end0.2",
        "train1.0",
        "train1.1",
        "epoch_end1",
        "eval1.0",
        "eval1.1",
        "eval_end1.2",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    assert_eq!(*log.lock().unwrap(), want);
}

#[test]
fn begin_epoch_and_empty_range() {
    let (x, y) = argmax_arrays(40, 3);
    let mut train = iter(&x, &y, 10, false);
    let mut m = module(vec![Context::cpu(0)]);
    let r = m
        .fit(
            &mut train,
            None,
            FitOptions {
                begin_epoch: 2,
                ..fit_opts(4)
            },
        )
        .unwrap();
    assert_eq!(r.iter().map(|e| e.epoch).collect::<Vec<_>>(), vec![2, 3]);
    assert!(r[0].validation.is_empty());
    // num_epoch <= begin_epoch: binds and initialises, trains nothing.
    let mut fresh = module(vec![Context::cpu(0)]);
    let r = fresh.fit(&mut train, None, fit_opts(0)).unwrap();
    assert!(r.is_empty());
    assert!(fresh.binded() && fresh.params_initialized() && fresh.optimizer_initialized());
}

#[test]
fn fit_continues_from_the_current_params() {
    // A second fit on a fitted module keeps training (no re-initialisation).
    let (x, y) = argmax_arrays(120, 4);
    let mut train = iter(&x, &y, 20, false);
    let mut m = module(vec![Context::cpu(0)]);
    m.fit(&mut train, None, fit_opts(3)).unwrap();
    let (before, _) = m.get_params().unwrap();
    let score_before = m
        .score(&mut train, &mut EvalMetric::accuracy(1), None)
        .unwrap()[0]
        .1;
    let r = m.fit(&mut train, None, fit_opts(1)).unwrap();
    assert_eq!(r.len(), 1);
    assert!(
        r[0].train[0].1 >= score_before - 0.1,
        "{} vs {score_before}",
        r[0].train[0].1
    );
    let (after, _) = m.get_params().unwrap();
    assert_ne!(
        before["fc1_weight"].to_f64_vec(),
        after["fc1_weight"].to_f64_vec()
    );
}

#[test]
fn two_contexts_match_one() {
    // Same data, same initial params, same optimizer: the update is the same whether the
    // batch runs on one device or is split over two (gradients are summed).
    let (x, y) = argmax_arrays(64, 5);
    let mut one = module(vec![Context::cpu(0)]);
    let mut two = module(vec![Context::cpu(0), Context::cpu(1)]);
    let mut params = None;
    let mut results = vec![];
    for m in [&mut one, &mut two] {
        let mut train = iter(&x, &y, 16, false);
        let opts = match &params {
            None => fit_opts(2),
            Some((a, x)) => FitOptions {
                arg_params: Some(Clone::clone(a)),
                aux_params: Some(Clone::clone(x)),
                ..fit_opts(2)
            },
        };
        if params.is_none() {
            // Initialise first so both modules start from the same values.
            m.bind(mxfn_core::module::BindOptions {
                data_shapes: train.provide_data(),
                label_shapes: train.provide_label(),
                ..Default::default()
            })
            .unwrap();
            m.init_params(InitOptions {
                initializer: Some(Initializer::xavier_default()),
                ..Default::default()
            })
            .unwrap();
            params = Some(m.get_params().unwrap());
        }
        let r = m.fit(&mut train, None, opts).unwrap();
        results.push((r, m.get_params().unwrap().0));
    }
    let (r1, p1) = &results[0];
    let (r2, p2) = &results[1];
    assert_eq!(r1[1].train[0].1, r2[1].train[0].1);
    for (n, a) in p1 {
        for (u, v) in a.to_f64_vec().iter().zip(p2[n].to_f64_vec()) {
            assert!((u - v).abs() < 1e-5, "{n}: {u} vs {v}");
        }
    }
}

#[test]
fn padding_is_removed_from_predict_and_score() {
    // 25 samples in batches of 10: the last batch has 5 padding samples.
    let (x, y) = argmax_arrays(25, 6);
    let mut it = iter(&x, &y, 10, false);
    let mut m = module(vec![Context::cpu(0)]);
    m.fit(&mut it, None, fit_opts(2)).unwrap();
    let p = m.predict(&mut it, None).unwrap();
    assert_eq!(p[0].shape(), &[25, 3]);
    let every = m.predict_every_batch(&mut it, None).unwrap();
    assert_eq!(
        every.iter().map(|b| b[0].shape()[0]).collect::<Vec<_>>(),
        vec![10, 10, 5]
    );
    let two = m.predict(&mut it, Some(2)).unwrap();
    assert_eq!(two[0].shape(), &[20, 3]);
    assert_eq!(two[0].to_f64_vec(), p[0].to_f64_vec()[..60].to_vec());
    // score counts 25 samples, not 30.
    let labels = y.to_f64_vec();
    let right = argmax_rows(&p[0])
        .iter()
        .zip(&labels)
        .filter(|(a, b)| **a as f64 == **b)
        .count();
    let s = m
        .score(&mut it, &mut EvalMetric::accuracy(1), None)
        .unwrap();
    assert!((s[0].1 - right as f64 / 25.0).abs() < 1e-12);
    let none = m.predict(&mut it, Some(0)).unwrap();
    assert!(none.is_empty());
}

/// With one device, prediction runs two batches at a time on two threads: the outputs are
/// those of batch-by-batch forward passes bit for bit, and the module ends holding the last
/// batch's outputs (as after a sequential loop), for an odd number of batches, a padded last
/// batch and `num_batch` limits alike, and on a one-thread pool (no pairs).
#[test]
fn paired_prediction_matches_batch_by_batch_forward() {
    let (x, y) = argmax_arrays(47, 8);
    let mut it = iter(&x, &y, 10, false);
    let mut m = module(vec![Context::cpu(0)]);
    m.fit(&mut it, None, fit_opts(1)).unwrap();
    let bits = |a: &NDArray| {
        a.to_f64_vec()
            .iter()
            .map(|v| v.to_bits())
            .collect::<Vec<_>>()
    };
    it.reset().unwrap();
    let mut want = vec![];
    while let Some(b) = it.next_batch().unwrap() {
        m.forward(&b, Some(false)).unwrap();
        let o = m.outputs_merged().unwrap().remove(0);
        let keep = o.shape()[0] - b.pad;
        want.push(bits(&o.slice_axis(0, 0, Some(keep as isize)).unwrap()));
    }
    assert_eq!(want.len(), 5);
    for threads in [2, 1] {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        for limit in [None, Some(3), Some(4)] {
            let got = pool
                .install(|| m.predict_every_batch(&mut it, limit))
                .unwrap();
            let n = limit.unwrap_or(5);
            assert_eq!(
                got.iter().map(|b| bits(&b[0])).collect::<Vec<_>>(),
                want[..n]
            );
            let last = m.outputs_merged().unwrap().remove(0);
            assert_eq!(
                bits(&last)[..want[n - 1].len()],
                want[n - 1][..],
                "{threads} {limit:?}"
            );
        }
        let merged = pool.install(|| m.predict(&mut it, None)).unwrap();
        assert_eq!(bits(&merged[0]), want.concat());
    }
}

#[test]
fn score_and_predict_before_init_fail_clearly() {
    let (x, y) = argmax_arrays(10, 7);
    let mut it = iter(&x, &y, 5, false);
    let mut m = module(vec![Context::cpu(0)]);
    let e = m
        .score(&mut it, &mut EvalMetric::accuracy(1), None)
        .unwrap_err();
    assert!(matches!(e, Error::Lifecycle { .. }), "{e}");
    assert!(e.to_string().contains("bind"), "{e}");
    let e = m.predict(&mut it, None).unwrap_err();
    assert!(matches!(e, Error::Lifecycle { .. }), "{e}");
}

#[test]
fn validation_metric_and_mse() {
    let (x, y) = argmax_arrays(40, 8);
    let mut train = iter(&x, &y, 10, false);
    let mut val = iter(&x, &y, 10, false);
    let mut m = module(vec![Context::cpu(0)]);
    let r = m
        .fit(
            &mut train,
            Some(&mut val),
            FitOptions {
                validation_metric: Some(EvalMetric::composite(vec![
                    EvalMetric::accuracy(1),
                    EvalMetric::cross_entropy(1e-12),
                ])),
                ..fit_opts(1)
            },
        )
        .unwrap();
    let names: Vec<&str> = r[0].validation.iter().map(|p| p.0.as_str()).collect();
    assert_eq!(names, vec!["accuracy", "cross-entropy"]);
    assert_eq!(r[0].train.len(), 1);
}

#[test]
fn tnc_layout_splits_and_merges_along_axis_1() {
    // Clojure's test-module-layout: an output whose node carries __layout__ = TNC is split
    // over the devices along axis 1 and merged back along it.
    let act = Symbol::create(
        "Activation",
        Some("act"),
        &[("act_type", "relu"), ("__layout__", "TNC")],
        vec![(None, Symbol::variable("data"))],
    )
    .unwrap();
    let mut m = Module::new(
        act,
        ModuleOptions {
            label_names: vec![],
            contexts: vec![Context::cpu(0), Context::cpu(1)],
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(m.output_batch_axes(), vec![Some(1)]);
    m.bind(mxfn_core::module::BindOptions {
        data_shapes: vec![mxfn_core::io::DataDesc::new("data", &[3, 8, 7]).with_layout("TNC")],
        inputs_need_grad: true,
        ..Default::default()
    })
    .unwrap();
    m.init_params(InitOptions::default()).unwrap();
    let x = NDArray::from_f32(&[3, 8, 7], (0..168).map(|i| i as f32 - 80.0).collect()).unwrap();
    let batch = mxfn_core::io::DataBatch {
        data: vec![x.clone()],
        ..Default::default()
    };
    m.forward(&batch, None).unwrap();
    for per in m.outputs().unwrap() {
        for o in per {
            assert_eq!(o.shape(), &[3, 4, 7]);
        }
    }
    let merged = m.outputs_merged().unwrap();
    assert_eq!(merged[0].shape(), &[3, 8, 7]);
    let want: Vec<f64> = x.to_f64_vec().iter().map(|v| v.max(0.0)).collect();
    assert_eq!(merged[0].to_f64_vec(), want);
    m.backward(&[NDArray::ones(&[3, 8, 7], mxfn_core::DType::Float32)])
        .unwrap();
    let g = m.input_grads_merged().unwrap();
    assert_eq!(g[0].shape(), &[3, 8, 7]);
    let want: Vec<f64> = x
        .to_f64_vec()
        .iter()
        .map(|v| if *v > 0.0 { 1.0 } else { 0.0 })
        .collect();
    assert_eq!(g[0].to_f64_vec(), want);
}
