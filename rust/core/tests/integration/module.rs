//! Module: bind / init / forward / backward / update, multi-context, checkpoints, MXNet
//! checkpoints, misuse errors.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic

use mxfn_core::initializer::Initializer;
use mxfn_core::io::{DataBatch, DataDesc};
use mxfn_core::metric::EvalMetric;
use mxfn_core::module::{
    split_input_slice, BindOptions, InitOptions, Module, ModuleOptions, OptimizerInit,
};
use mxfn_core::{Context, Error, NDArray};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use crate::common::{argmax_arrays, assert_close, mlp, read_npz, sgd_momentum};

fn ckpt_dir() -> PathBuf {
    if let Ok(d) = std::env::var("MXFN_CONFORMANCE_DIR") {
        return PathBuf::from(d).join("checkpoints");
    }
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/data/conformance/checkpoints")
}

fn bound(contexts: Vec<Context>, batch: usize) -> Module {
    let mut m = Module::new(
        mlp(16),
        ModuleOptions {
            contexts,
            ..Default::default()
        },
    )
    .unwrap();
    m.bind(BindOptions {
        data_shapes: vec![DataDesc::new("data", &[batch, 5])],
        label_shapes: vec![DataDesc::new("softmax_label", &[batch])],
        ..Default::default()
    })
    .unwrap();
    m
}

fn fixed_params(m: &Module) -> (BTreeMap<String, NDArray>, BTreeMap<String, NDArray>) {
    let mut args = BTreeMap::new();
    for (i, n) in m.param_names().iter().enumerate() {
        let shape: Vec<usize> = match n.as_str() {
            "fc1_weight" => vec![16, 5],
            "fc1_bias" => vec![16],
            "fc2_weight" => vec![3, 16],
            _ => vec![3],
        };
        let size: usize = shape.iter().product();
        let v: Vec<f32> = (0..size)
            .map(|k| (((k * 7 + i * 3) % 11) as f32 - 5.0) * 0.05)
            .collect();
        args.insert(n.clone(), NDArray::from_vec(&shape, v).unwrap());
    }
    (args, BTreeMap::new())
}

fn ce_loss(p: &NDArray, y: &NDArray) -> f64 {
    let p = p.to_f64_vec();
    let y = y.to_f64_vec();
    let k = p.len() / y.len();
    y.iter()
        .enumerate()
        .map(|(i, &c)| -(p[i * k + c as usize].max(1e-12)).ln())
        .sum::<f64>()
        / y.len() as f64
}

#[test]
fn training_reduces_loss() {
    let (x, y) = argmax_arrays(64, 12345);
    let mut m = bound(vec![Context::cpu(0)], 64);
    m.init_params(InitOptions {
        initializer: Some(Initializer::xavier_default()),
        ..Default::default()
    })
    .unwrap();
    m.init_optimizer(
        Arc::new(Mutex::new(sgd_momentum(0.5))),
        OptimizerInit::default(),
    )
    .unwrap();
    let batch = DataBatch {
        data: vec![x],
        label: vec![y.clone()],
        ..Default::default()
    };
    m.forward(&batch, Some(false)).unwrap();
    let before = ce_loss(&m.outputs_merged().unwrap()[0], &y);
    for _ in 0..30 {
        m.forward_backward(&batch).unwrap();
        m.update().unwrap();
    }
    m.forward(&batch, Some(false)).unwrap();
    let after = ce_loss(&m.outputs_merged().unwrap()[0], &y);
    assert!(after < before * 0.7, "loss {before} -> {after}");
    let mut metric = EvalMetric::create_json("acc", "{}").unwrap();
    m.update_metric(&mut metric, &[y]).unwrap();
    assert!(metric.get()[0].1 > 0.6);
    assert_eq!(m.grad_arrays().unwrap().len(), 4);
    let o = m.optimizer().unwrap();
    assert!((o.lock().unwrap().rescale_grad() - 1.0 / 64.0).abs() < 1e-12);
}

#[test]
fn split_slices_follow_mxnet() {
    assert_eq!(
        split_input_slice(10, &[1.0, 1.0]).unwrap(),
        vec![(0, 5), (5, 10)]
    );
    assert_eq!(
        split_input_slice(10, &[1.0, 1.0, 1.0]).unwrap(),
        vec![(0, 3), (3, 6), (6, 10)]
    );
    assert_eq!(
        split_input_slice(8, &[3.0, 1.0]).unwrap(),
        vec![(0, 6), (6, 8)]
    );
    assert!(split_input_slice(1, &[1.0, 1.0]).is_err());
}

#[test]
fn two_contexts_match_one() {
    let (x, y) = argmax_arrays(12, 12345);
    let batch = DataBatch {
        data: vec![x],
        label: vec![y],
        ..Default::default()
    };
    let mut mods = vec![
        bound(vec![Context::cpu(0)], 12),
        bound(vec![Context::cpu(0), Context::cpu(1)], 12),
    ];
    let mut m3 = Module::new(
        mlp(16),
        ModuleOptions {
            contexts: vec![Context::cpu(0), Context::cpu(1)],
            workload_list: Some(vec![2.0, 1.0]),
            ..Default::default()
        },
    )
    .unwrap();
    m3.bind(BindOptions {
        data_shapes: vec![DataDesc::new("data", &[12, 5])],
        label_shapes: vec![DataDesc::new("softmax_label", &[12])],
        ..Default::default()
    })
    .unwrap();
    mods.push(m3);
    let (args, aux) = fixed_params(&mods[0]);
    for m in &mut mods {
        m.init_params(InitOptions {
            arg_params: Some(args.clone()),
            aux_params: Some(aux.clone()),
            ..Default::default()
        })
        .unwrap();
        m.init_optimizer(
            Arc::new(Mutex::new(sgd_momentum(0.1))),
            OptimizerInit::default(),
        )
        .unwrap();
        for _ in 0..3 {
            m.forward_backward(&batch).unwrap();
            m.update().unwrap();
        }
        m.forward(&batch, Some(false)).unwrap();
    }
    let want = mods[0].outputs_merged().unwrap();
    let (pw, _) = mods[0].get_params().unwrap();
    for m in &mods[1..] {
        assert_eq!(m.outputs().unwrap()[0].len(), 2);
        assert_close(
            "outputs_merged",
            &m.outputs_merged().unwrap()[0],
            &want[0],
            1e-5,
            1e-6,
        );
        let (p, _) = m.get_params().unwrap();
        for (n, v) in &pw {
            assert_close(n, &p[n], v, 1e-5, 1e-6);
        }
    }
}

#[test]
fn checkpoint_round_trip_and_reshape() {
    let (x, y) = argmax_arrays(8, 12345);
    let mut m = bound(vec![Context::cpu(0)], 8);
    m.init_params(InitOptions::default()).unwrap();
    let batch = DataBatch {
        data: vec![x.clone()],
        label: vec![y],
        ..Default::default()
    };
    m.forward(&batch, Some(false)).unwrap();
    let want = m.outputs_merged().unwrap();
    let dir = std::env::temp_dir().join(format!("mxfn-module-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let prefix = dir.join("net").display().to_string();
    m.save_checkpoint(&prefix, 3).unwrap();
    assert!(dir.join("net-symbol.json").exists() && dir.join("net-0003.params").exists());
    let mut l = Module::load(&prefix, 3, ModuleOptions::default()).unwrap();
    l.bind(BindOptions {
        data_shapes: vec![DataDesc::new("data", &[8, 5])],
        for_training: false,
        ..Default::default()
    })
    .unwrap();
    l.init_params(InitOptions::default()).unwrap(); // no-op: loaded params count as initialised
    l.forward(
        &DataBatch {
            data: vec![x.clone()],
            ..Default::default()
        },
        None,
    )
    .unwrap();
    assert_close(
        "reloaded",
        &l.outputs_merged().unwrap()[0],
        &want[0],
        0.0,
        0.0,
    );
    // A smaller batch reshapes the module and keeps the params.
    let x4 = x.slice_axis(0, 0, Some(4)).unwrap();
    l.forward(
        &DataBatch {
            data: vec![x4],
            ..Default::default()
        },
        None,
    )
    .unwrap();
    let got = l.outputs_merged().unwrap();
    assert_close(
        "reshaped",
        &got[0],
        &want[0].slice_axis(0, 0, Some(4)).unwrap(),
        0.0,
        0.0,
    );
    assert_eq!(l.data_shapes().unwrap()[0].shape, vec![4, 5]);
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn mxnet_checkpoints_predict_their_outputs() {
    let d = ckpt_dir();
    for (name, epoch) in [
        ("mlp", 1),
        ("lenet", 2),
        ("bnnet", 3),
        ("legacy_v0800", 0),
        ("legacy_v0903", 0),
    ] {
        let io = read_npz(&d.join(format!("{name}-io.npz")));
        let prefix = d.join(name).display().to_string();
        let mut m = Module::load(&prefix, epoch, ModuleOptions::default()).unwrap();
        let data = io["data"].clone();
        m.bind(BindOptions {
            data_shapes: vec![DataDesc::new("data", data.shape())],
            label_shapes: vec![DataDesc::new("softmax_label", io["softmax_label"].shape())],
            for_training: false,
            ..Default::default()
        })
        .unwrap();
        let batch = DataBatch {
            data: vec![data],
            label: vec![io["softmax_label"].clone()],
            ..Default::default()
        };
        m.forward(&batch, Some(false)).unwrap();
        let outs = m.outputs_merged().unwrap();
        for (i, o) in outs.iter().enumerate() {
            assert_close(
                &format!("{name} out:{i}"),
                o,
                &io[&format!("out:{i}")],
                1e-4,
                1e-5,
            );
        }
    }
}

#[test]
fn misuse_errors() {
    let (x, y) = argmax_arrays(4, 12345);
    let batch = DataBatch {
        data: vec![x],
        label: vec![y],
        ..Default::default()
    };
    let mut m = Module::new(mlp(16), ModuleOptions::default()).unwrap();
    let e = m.forward(&batch, None).unwrap_err();
    assert!(matches!(e, Error::Lifecycle { .. }));
    assert!(e.to_string().contains("bind"), "{e}");
    assert!(m.update().is_err());
    assert!(m.outputs().is_err());
    m.bind(BindOptions {
        data_shapes: vec![DataDesc::new("data", &[4, 5])],
        label_shapes: vec![DataDesc::new("softmax_label", &[4])],
        ..Default::default()
    })
    .unwrap();
    let e = m.forward(&batch, None).unwrap_err();
    assert!(e.to_string().contains("init_params"), "{e}");
    let (mut args, aux) = fixed_params(&m);
    args.remove("fc2_bias");
    let e = m
        .init_params(InitOptions {
            arg_params: Some(args.clone()),
            aux_params: Some(aux.clone()),
            ..Default::default()
        })
        .unwrap_err();
    assert!(e.to_string().contains("fc2_bias"), "{e}");
    let mut extra = args.clone();
    extra.insert(
        "fc2_bias".into(),
        NDArray::zeros(&[3], mxfn_core::DType::Float32),
    );
    extra.insert(
        "bogus_weight".into(),
        NDArray::zeros(&[3], mxfn_core::DType::Float32),
    );
    let e = m
        .init_params(InitOptions {
            arg_params: Some(extra.clone()),
            ..Default::default()
        })
        .unwrap_err();
    assert!(e.to_string().contains("bogus_weight"), "{e}");
    let mut wrong = extra.clone();
    wrong.remove("bogus_weight");
    wrong.insert(
        "fc1_weight".into(),
        NDArray::zeros(&[4, 4], mxfn_core::DType::Float32),
    );
    let e = m
        .init_params(InitOptions {
            arg_params: Some(wrong),
            ..Default::default()
        })
        .unwrap_err();
    let s = e.to_string();
    assert!(
        s.contains("fc1_weight") && s.contains("(16, 5)") && s.contains("(4, 4)"),
        "{s}"
    );
    assert!(!m.params_initialized());
    m.init_params(InitOptions {
        arg_params: Some(args),
        allow_missing: true,
        ..Default::default()
    })
    .unwrap();
    m.forward(&batch, None).unwrap();
    let e = m.update().unwrap_err();
    assert!(e.to_string().contains("init_optimizer"), "{e}");
    // bind twice is a no-op; labels the symbol lacks are dropped.
    m.bind(BindOptions {
        data_shapes: vec![DataDesc::new("data", &[9, 5])],
        ..Default::default()
    })
    .unwrap();
    assert_eq!(m.data_shapes().unwrap()[0].shape, vec![4, 5]);
    let m2 = Module::new(
        mlp(16),
        ModuleOptions {
            label_names: vec!["softmax_label".into(), "nolabel".into()],
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(m2.label_names(), &["softmax_label".to_string()]);
}

#[test]
fn fixed_params_are_not_updated() {
    let (x, y) = argmax_arrays(8, 12345);
    let mut m = Module::new(
        mlp(16),
        ModuleOptions {
            fixed_param_names: vec!["fc1_weight".into()],
            ..Default::default()
        },
    )
    .unwrap();
    m.bind(BindOptions {
        data_shapes: vec![DataDesc::new("data", &[8, 5])],
        label_shapes: vec![DataDesc::new("softmax_label", &[8])],
        ..Default::default()
    })
    .unwrap();
    m.init_params(InitOptions::default()).unwrap();
    m.init_optimizer(
        Arc::new(Mutex::new(sgd_momentum(0.5))),
        OptimizerInit::default(),
    )
    .unwrap();
    let (before, _) = m.get_params().unwrap();
    m.forward_backward(&DataBatch {
        data: vec![x],
        label: vec![y],
        ..Default::default()
    })
    .unwrap();
    m.update().unwrap();
    let (after, _) = m.get_params().unwrap();
    assert_eq!(
        before["fc1_weight"].to_f64_vec(),
        after["fc1_weight"].to_f64_vec()
    );
    assert_ne!(
        before["fc2_weight"].to_f64_vec(),
        after["fc2_weight"].to_f64_vec()
    );
}
