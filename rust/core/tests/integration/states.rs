//! Optimizer-state files (`.states`): MXNet 1.9.1's `mlp-0001.states` and the Python writer's
//! fixture read and re-encode byte for byte; a Module saves and loads them, and resuming from
//! MXNet's states reproduces MXNet's next training step (`mlp-resume.npz`).
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic

use mxfn_core::io::{DataBatch, DataDesc};
use mxfn_core::module::{states_path, BindOptions, Module, ModuleOptions, OptimizerInit};
use mxfn_core::optimizer::{create, Hyper, OptimizerOptions, State};
use mxfn_core::tensor::states_file::{decode, encode, load};
use mxfn_core::{DType, Error};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use crate::common::{assert_close, read_npz};

fn ckpt_dir() -> PathBuf {
    if let Ok(d) = std::env::var("MXFN_CONFORMANCE_DIR") {
        return PathBuf::from(d).join("checkpoints");
    }
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/data/conformance/checkpoints")
}

/// A scratch directory for one test, emptied first.
fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("mxfn-states-{name}-{}", std::process::id()));
    std::fs::remove_dir_all(&d).ok();
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn sgd_momentum() -> Arc<Mutex<mxfn_core::optimizer::Optimizer>> {
    let hyper = [
        ("learning_rate", Hyper::Num(0.1)),
        ("momentum", Hyper::Num(0.9)),
    ];
    Arc::new(Mutex::new(
        create("sgd", OptimizerOptions::default(), hyper).unwrap(),
    ))
}

/// The mlp checkpoint with MXNet's states, bound for `batch` rows, optimizer initialised.
fn mlp_resumed(batch: usize) -> Module {
    let prefix = ckpt_dir().join("mlp").display().to_string();
    let mut m = Module::load_with_optimizer_states(&prefix, 1, ModuleOptions::default()).unwrap();
    m.bind(BindOptions {
        data_shapes: vec![DataDesc::new("data", &[batch, 784])],
        label_shapes: vec![DataDesc::new("softmax_label", &[batch])],
        ..Default::default()
    })
    .unwrap();
    m.init_optimizer(sgd_momentum(), OptimizerInit::default())
        .unwrap();
    m
}

#[test]
fn mxnet_states_file_reads_and_reencodes_byte_for_byte() {
    let path = ckpt_dir().join("mlp-0001.states");
    let bytes = std::fs::read(&path).unwrap();
    let st = decode(&bytes, "mlp-0001.states").unwrap();
    // SGD with momentum: one momentum buffer per parameter, by index (manifest index_to_name)
    let shapes: Vec<(usize, String)> = st.iter().map(|(&k, s)| (k, s.describe())).collect();
    let want = [
        "array (128, 784)",
        "array (128,)",
        "array (64, 128)",
        "array (64,)",
        "array (10, 64)",
        "array (10,)",
    ];
    assert_eq!(
        shapes,
        want.iter()
            .enumerate()
            .map(|(i, s)| (i, s.to_string()))
            .collect::<Vec<_>>()
    );
    // momentum after a full epoch of training: not all zeros
    let State::Array(m0) = &st[&0] else { panic!() };
    assert!(m0.to_f64_vec().iter().any(|&v| v != 0.0));
    assert_eq!(encode(&st), bytes);
    assert_eq!(load(&path).unwrap().len(), 6);
}

#[test]
fn python_writer_fixture_reencodes_byte_for_byte() {
    // Written by mxfn's former Python writer (tests/data/states/README.md): None, tuples of
    // every size, nested tuples, float64/float16/int32/int8/uint8/int64 arrays, keys needing
    // BININT2/BININT/LONG1, memo indices past 255, 1001 entries (two SETITEMS batches) and
    // frames ended by size and by a 64 KiB record.
    let path =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/data/states/pywriter.states");
    let bytes = std::fs::read(&path).unwrap();
    let st = decode(&bytes, "pywriter.states").unwrap();
    assert_eq!(st.len(), 1001);
    assert_eq!(st[&0].describe(), "(None, None)");
    assert_eq!(st[&302].describe(), "(array (40, 50), array (40, 50))");
    assert_eq!(st[&303].describe(), "(array (2,), None, (array (1, 1),))");
    assert_eq!(st[&305].describe(), "()");
    assert_eq!(st[&308].describe(), "array (16400,)");
    assert!(matches!(st[&((1usize << 31) + 5)], State::None));
    let State::Tuple(t) = &st[&304] else { panic!() };
    let dtypes: Vec<Option<DType>> = t
        .iter()
        .map(|s| match s {
            State::Array(a) => Some(a.dtype()),
            _ => None,
        })
        .collect();
    assert_eq!(
        dtypes,
        [
            None,
            Some(DType::Float64),
            Some(DType::Float16),
            Some(DType::Int32)
        ]
    );
    let State::Array(a) = &st[&306] else { panic!() };
    let v = a.to_f64_vec();
    assert_eq!((v[0], v[1], v[97], v.len()), (0.0, 0.125, 0.0, 8250));
    assert_eq!(encode(&st), bytes);
}

#[test]
fn resume_from_mxnet_states_reproduces_the_next_step() {
    let z = read_npz(&ckpt_dir().join("mlp-resume.npz"));
    let mut m = mlp_resumed(100);
    let batch = DataBatch {
        data: vec![z["data"].clone()],
        label: vec![z["softmax_label"].clone()],
        ..Default::default()
    };
    m.forward_backward(&batch).unwrap();
    assert_close(
        "train_out:0",
        &m.outputs_merged().unwrap()[0],
        &z["train_out:0"],
        1e-4,
        1e-6,
    );
    m.update().unwrap();
    let (args, _) = m.get_params().unwrap();
    let states = m.optimizer_states().unwrap();
    for (i, name) in m.param_names().iter().enumerate() {
        assert_close(name, &args[name], &z[&format!("arg:{name}")], 1e-4, 1e-6);
        let State::Array(mom) = &states[&i] else {
            panic!("{name}")
        };
        assert_close(
            &format!("state:{name}"),
            mom,
            &z[&format!("state:{name}")],
            1e-4,
            1e-6,
        );
    }
    // the resumed step differs from one without MXNet's momentum
    let prefix = ckpt_dir().join("mlp").display().to_string();
    let mut fresh = Module::load(&prefix, 1, ModuleOptions::default()).unwrap();
    fresh
        .bind(BindOptions {
            data_shapes: vec![DataDesc::new("data", &[100, 784])],
            label_shapes: vec![DataDesc::new("softmax_label", &[100])],
            ..Default::default()
        })
        .unwrap();
    fresh
        .init_optimizer(sgd_momentum(), OptimizerInit::default())
        .unwrap();
    fresh.forward_backward(&batch).unwrap();
    fresh.update().unwrap();
    let w0 = fresh.get_params().unwrap().0["fc1_weight"].to_f64_vec();
    let w = args["fc1_weight"].to_f64_vec();
    assert!(w0.iter().zip(&w).any(|(a, b)| (a - b).abs() > 1e-4));
}

#[test]
fn module_saves_what_it_loaded_and_loads_what_it_saved() {
    let dir = scratch("module");
    let m = mlp_resumed(10);
    let path = dir.join("x.states");
    m.save_optimizer_states(&path).unwrap();
    let mxnet = std::fs::read(ckpt_dir().join("mlp-0001.states")).unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), mxnet);
    // written atomically: nothing but the file is left in the directory
    let names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["x.states"]);

    // loaded after init_optimizer they apply at once; before it, at init_optimizer
    let prefix = ckpt_dir().join("mlp").display().to_string();
    let mut m2 = Module::load(&prefix, 1, ModuleOptions::default()).unwrap();
    m2.load_optimizer_states(&path).unwrap();
    m2.bind(BindOptions {
        data_shapes: vec![DataDesc::new("data", &[10, 784])],
        ..Default::default()
    })
    .unwrap();
    assert!(m2.save_optimizer_states(&dir.join("y.states")).is_err()); // no optimizer yet
    m2.init_optimizer(sgd_momentum(), OptimizerInit::default())
        .unwrap();
    m2.save_optimizer_states(&dir.join("y.states")).unwrap();
    assert_eq!(std::fs::read(dir.join("y.states")).unwrap(), mxnet);
    assert_eq!(states_path("a/mlp", 3), PathBuf::from("a/mlp-0003.states"));
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn module_errors_name_the_call_and_the_file() {
    let dir = scratch("errors");
    let prefix = ckpt_dir().join("mlp").display().to_string();
    let mut m = Module::load(&prefix, 1, ModuleOptions::default()).unwrap();

    let e = m.save_optimizer_states(&dir.join("x.states")).unwrap_err();
    assert!(matches!(e.root(), Error::Lifecycle { .. }), "{e}");
    assert!(
        e.to_string().contains("module.save_optimizer_states"),
        "{e}"
    );

    let missing = dir.join("missing.states");
    let e = m.load_optimizer_states(&missing).unwrap_err();
    assert!(matches!(e.root(), Error::Io { .. }), "{e}");
    assert!(
        e.to_string().starts_with("module.load_optimizer_states: "),
        "{e}"
    );
    assert!(e.to_string().contains("missing.states"), "{e}");

    // pickle.dumps({0: os.system}, protocol=4): refused, never run
    let evil = dir.join("evil.states");
    std::fs::write(&evil, b"\x80\x04\x95\x19\x00\x00\x00\x00\x00\x00\x00}\x94K\x00\x8c\x05posix\x94\x8c\x06system\x94\x93\x94s.").unwrap();
    let e = m.load_optimizer_states(&evil).unwrap_err().to_string();
    assert!(
        e.starts_with(&format!(
            "module.load_optimizer_states: {}: at byte 32: the pickle references posix.system",
            evil.display()
        )),
        "{e}"
    );

    // a truncated MXNet file, and a .params file passed by mistake
    let bytes = std::fs::read(ckpt_dir().join("mlp-0001.states")).unwrap();
    let cut = dir.join("cut.states");
    std::fs::write(&cut, &bytes[..bytes.len() / 2]).unwrap();
    let e = m.load_optimizer_states(&cut).unwrap_err().to_string();
    assert!(
        e.contains("cut.states: at byte") && e.contains("ends early"),
        "{e}"
    );
    let e = m
        .load_optimizer_states(&ckpt_dir().join("mlp-0001.params"))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("mlp-0001.params: at byte 0: pickle opcode 0x12"),
        "{e}"
    );
    std::fs::remove_dir_all(&dir).ok();
}
