//! Trains the MLP 784-128-64-10 on MNIST from Rust alone (no Python): SGD (learning rate
//! 0.1, momentum 0.9), Xavier initialisation, batches of 100, 3 epochs; prints the training
//! and validation accuracy of every epoch.
//!
//! ```text
//! cargo run --release --example mnist_mlp [-- DATA_DIR]
//! ```
//!
//! `DATA_DIR` (default: the repository's `data/mnist`) holds `train-images-idx3-ubyte.gz`,
//! `train-labels-idx1-ubyte.gz`, `t10k-images-idx3-ubyte.gz` and `t10k-labels-idx1-ubyte.gz`.

use mxfn_core::initializer::Initializer;
use mxfn_core::io::{MnistIter, MnistOptions};
use mxfn_core::metric::EvalMetric;
use mxfn_core::module::{BatchEndParam, EpochRecord, FitOptions, Module, ModuleOptions};
use mxfn_core::optimizer::{create, Hyper, OptimizerOptions};
use mxfn_core::symbol::Symbol;
use mxfn_core::Result;
use std::path::PathBuf;

/// `FullyConnected(num_hidden)` followed by a ReLU, both named after `name`.
fn dense_relu(x: Symbol, name: &str, num_hidden: usize) -> Result<Symbol> {
    let n = num_hidden.to_string();
    let fc = Symbol::create(
        "FullyConnected",
        Some(name),
        &[("num_hidden", n.as_str())],
        vec![(None, x)],
    )?;
    Symbol::create(
        "Activation",
        Some(&format!("{name}_relu")),
        &[("act_type", "relu")],
        vec![(None, fc)],
    )
}

/// data → fc1 (128, relu) → fc2 (64, relu) → fc3 (10) → softmax.
fn mlp() -> Result<Symbol> {
    let x = Symbol::variable("data");
    let h1 = dense_relu(x, "fc1", 128)?;
    let h2 = dense_relu(h1, "fc2", 64)?;
    let fc3 = Symbol::create(
        "FullyConnected",
        Some("fc3"),
        &[("num_hidden", "10")],
        vec![(None, h2)],
    )?;
    Symbol::create("SoftmaxOutput", Some("softmax"), &[], vec![(None, fc3)])
}

fn mnist(dir: &std::path::Path, set: &str, shuffle: bool) -> Result<MnistIter> {
    MnistIter::new(MnistOptions {
        image: dir
            .join(format!("{set}-images-idx3-ubyte.gz"))
            .display()
            .to_string(),
        label: dir
            .join(format!("{set}-labels-idx1-ubyte.gz"))
            .display()
            .to_string(),
        batch_size: 100,
        shuffle,
        flat: true,
        ..Default::default()
    })
}

fn main() -> Result<()> {
    let dir = std::env::args_os()
        .nth(1)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../data/mnist"));
    let load = std::time::Instant::now();
    let mut train = mnist(&dir, "train", true)?;
    let mut val = mnist(&dir, "t10k", false)?;
    println!(
        "MNIST: {} training and {} validation images from {} ({:.2}s)",
        train.num_data(),
        val.num_data(),
        dir.display(),
        load.elapsed().as_secs_f64()
    );

    let sgd = create(
        "sgd",
        OptimizerOptions::default(),
        [
            ("learning_rate", Hyper::Num(0.1)),
            ("momentum", Hyper::Num(0.9)),
        ],
    )?;
    let mut module = Module::new(mlp()?, ModuleOptions::default())?;
    let show = |name: &str, values: &[(String, f64)]| -> String {
        values
            .iter()
            .map(|(n, v)| format!("{name}-{n}={v:.6}"))
            .collect::<Vec<_>>()
            .join(" ")
    };
    let started = std::time::Instant::now();
    let records: Vec<EpochRecord> = module.fit(
        &mut train,
        Some(&mut val),
        FitOptions {
            num_epoch: 3,
            eval_metric: EvalMetric::accuracy(1),
            optimizer: Some(sgd),
            initializer: Some(Initializer::xavier_default()),
            eval_end_callback: Some(Box::new(move |p: &BatchEndParam<'_>| {
                println!(
                    "Epoch[{}] {}",
                    p.epoch,
                    show("Validation", &p.eval_metric.get())
                );
            })),
            ..Default::default()
        },
    )?;
    for r in &records {
        println!(
            "Epoch[{}] {} {} Time cost={:.3}s",
            r.epoch,
            show("Train", &r.train),
            show("Validation", &r.validation),
            r.seconds
        );
    }
    let last = records.last().and_then(|r| r.validation.first());
    println!(
        "trained {} epochs in {:.2}s; final validation accuracy {}",
        records.len(),
        started.elapsed().as_secs_f64(),
        last.map_or("n/a".to_string(), |(_, v)| format!("{v:.4}"))
    );
    Ok(())
}
