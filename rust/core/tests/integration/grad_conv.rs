//! Convolution, Deconvolution and Pooling: finite-difference gradient checks over attribute
//! combinations, shape inference (weights filled in from the data), error messages, and the
//! thread-count independence of the weight gradient.

// Test helpers outside #[test] functions unwrap too (clippy.toml only covers test bodies).
#![allow(clippy::unwrap_used)]

use mxfn_core::ops::testing::{random_array, GradCheck};
use mxfn_core::ops::{lookup, MaybeShape, OpCtx};
use mxfn_core::NDArray;
use std::collections::BTreeMap;

fn arr(shape: &[usize], seed: u64) -> NDArray {
    random_array(shape, -1.0, 1.0, seed)
}

/// Distinct values at least 0.05 apart (a shuffled ramp), so a finite-difference step of 0.01
/// never changes which element of a max-pooling window is largest.
fn spaced(shape: &[usize], seed: u64) -> NDArray {
    let n: usize = shape.iter().product();
    let keys = random_array(&[n], 0.0, 1.0, seed).to_f64_vec();
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|&a, &b| keys[a].total_cmp(&keys[b]));
    let mut v = vec![0.0f32; n];
    for (rank, &i) in order.iter().enumerate() {
        v[i] = rank as f32 * 0.05 - n as f32 * 0.025;
    }
    NDArray::from_vec(shape, v).unwrap()
}

fn check(op: &'static str, attrs: &[(&'static str, &str)], inputs: Vec<NDArray>) {
    GradCheck::new(op, attrs, inputs)
        .run()
        .unwrap_or_else(|e| panic!("{op} {attrs:?}: {e}"));
}

#[test]
fn convolution_gradients() {
    let cases: Vec<(Vec<(&str, &str)>, Vec<Vec<usize>>)> = vec![
        (
            vec![("kernel", "(3, 3)"), ("num_filter", "4"), ("pad", "(1, 1)")],
            vec![vec![2, 3, 5, 5], vec![4, 3, 3, 3], vec![4]],
        ),
        (
            vec![
                ("kernel", "(3, 2)"),
                ("num_filter", "4"),
                ("num_group", "2"),
                ("stride", "(2, 1)"),
                ("dilate", "(2, 2)"),
                ("pad", "(1, 0)"),
                ("no_bias", "True"),
            ],
            vec![vec![1, 4, 7, 6], vec![4, 2, 3, 2]],
        ),
        (
            vec![
                ("kernel", "(3,)"),
                ("num_filter", "3"),
                ("stride", "(2,)"),
                ("pad", "(1,)"),
            ],
            vec![vec![2, 2, 7], vec![3, 2, 3], vec![3]],
        ),
        (
            vec![
                ("kernel", "(1, 1)"),
                ("num_filter", "2"),
                ("layout", "NCHW"),
            ],
            vec![vec![2, 3, 4, 4], vec![2, 3, 1, 1], vec![2]],
        ),
        (
            vec![
                ("kernel", "(2, 2, 2)"),
                ("num_filter", "2"),
                ("pad", "(1, 0, 1)"),
            ],
            vec![vec![1, 2, 3, 3, 3], vec![2, 2, 2, 2, 2], vec![2]],
        ),
        (
            // Enough samples for several weight-gradient partial sums.
            vec![
                ("kernel", "(2, 2)"),
                ("num_filter", "2"),
                ("stride", "(2, 2)"),
            ],
            vec![vec![9, 1, 4, 4], vec![2, 1, 2, 2], vec![2]],
        ),
    ];
    for (attrs, shapes) in cases {
        let inputs = shapes
            .iter()
            .enumerate()
            .map(|(i, s)| arr(s, i as u64 + 11))
            .collect();
        check("Convolution", &attrs, inputs);
    }
}

#[test]
fn deconvolution_gradients() {
    let cases: Vec<(Vec<(&str, &str)>, Vec<Vec<usize>>)> = vec![
        (
            // MXNet's default: no bias.
            vec![
                ("kernel", "(3, 3)"),
                ("num_filter", "2"),
                ("stride", "(2, 2)"),
                ("pad", "(1, 1)"),
                ("adj", "(1, 1)"),
            ],
            vec![vec![2, 3, 3, 3], vec![3, 2, 3, 3]],
        ),
        (
            vec![
                ("kernel", "(4, 4)"),
                ("num_filter", "4"),
                ("num_group", "2"),
                ("stride", "(2, 2)"),
                ("pad", "(1, 1)"),
                ("no_bias", "False"),
            ],
            vec![vec![1, 4, 3, 3], vec![4, 2, 4, 4], vec![4]],
        ),
        (
            vec![
                ("kernel", "(3,)"),
                ("num_filter", "3"),
                ("dilate", "(2,)"),
                ("no_bias", "False"),
            ],
            vec![vec![2, 2, 5], vec![2, 3, 3], vec![3]],
        ),
        (
            // target_shape 6: total = 2·(3−1) + 3 − 6 = 1 → pad 1, adj 1.
            vec![
                ("kernel", "(3, 3)"),
                ("num_filter", "2"),
                ("stride", "(2, 2)"),
                ("target_shape", "(6, 6)"),
            ],
            vec![vec![1, 2, 3, 3], vec![2, 2, 3, 3]],
        ),
    ];
    for (attrs, shapes) in cases {
        let inputs = shapes
            .iter()
            .enumerate()
            .map(|(i, s)| arr(s, i as u64 + 21))
            .collect();
        check("Deconvolution", &attrs, inputs);
    }
}

#[test]
fn pooling_gradients() {
    let two_d = [2, 2, 5, 6];
    let cases: Vec<(Vec<(&str, &str)>, Vec<usize>)> = vec![
        (
            vec![("kernel", "(2, 2)"), ("stride", "(2, 2)")],
            two_d.to_vec(),
        ),
        (
            vec![
                ("kernel", "(3, 3)"),
                ("pad", "(1, 1)"),
                ("pool_type", "max"),
            ],
            two_d.to_vec(),
        ),
        (
            vec![
                ("kernel", "(3, 3)"),
                ("stride", "(2, 2)"),
                ("pooling_convention", "full"),
            ],
            two_d.to_vec(),
        ),
        (
            vec![
                ("kernel", "(3, 3)"),
                ("pad", "(1, 1)"),
                ("pool_type", "avg"),
            ],
            two_d.to_vec(),
        ),
        (
            vec![
                ("kernel", "(3, 3)"),
                ("pad", "(1, 1)"),
                ("pool_type", "avg"),
                ("count_include_pad", "False"),
            ],
            two_d.to_vec(),
        ),
        (
            vec![
                ("kernel", "(3, 3)"),
                ("stride", "(2, 2)"),
                ("pool_type", "avg"),
                ("pooling_convention", "full"),
            ],
            two_d.to_vec(),
        ),
        (
            vec![
                ("kernel", "(3, 2)"),
                ("stride", "(2, 1)"),
                ("pad", "(1, 0)"),
                ("pool_type", "sum"),
            ],
            two_d.to_vec(),
        ),
        (
            vec![
                ("kernel", "(1, 1)"),
                ("global_pool", "True"),
                ("pool_type", "max"),
            ],
            two_d.to_vec(),
        ),
        (
            vec![("global_pool", "True"), ("pool_type", "avg")],
            two_d.to_vec(),
        ),
        (
            vec![("kernel", "(3,)"), ("stride", "(2,)"), ("pool_type", "max")],
            vec![2, 3, 9],
        ),
        (
            vec![("kernel", "(2,)"), ("pad", "(1,)"), ("pool_type", "avg")],
            vec![2, 3, 9],
        ),
        (
            vec![
                ("kernel", "(3,)"),
                ("stride", "(2,)"),
                ("pooling_convention", "same"),
            ],
            vec![2, 3, 8],
        ),
        (
            vec![
                ("kernel", "(2, 2, 2)"),
                ("pad", "(1, 0, 1)"),
                ("pool_type", "avg"),
            ],
            vec![1, 2, 3, 4, 3],
        ),
        (
            vec![
                ("kernel", "(2, 2, 2)"),
                ("stride", "(1, 2, 2)"),
                ("pool_type", "max"),
            ],
            vec![1, 2, 3, 4, 4],
        ),
    ];
    for (attrs, shape) in cases {
        check("Pooling", &attrs, vec![spaced(&shape, 5)]);
    }
    // Lp pooling on positive inputs (its gradient (x/y)^(p−1) is smooth there).
    for p in ["1", "2", "3"] {
        check(
            "Pooling",
            &[
                ("kernel", "(2, 2)"),
                ("stride", "(1, 2)"),
                ("pool_type", "lp"),
                ("p_value", p),
            ],
            vec![random_array(&[2, 2, 4, 4], 0.5, 1.5, 9)],
        );
    }
}

fn infer(
    op: &str,
    attrs: &[(&str, &str)],
    inputs: &mut [MaybeShape],
) -> mxfn_core::Result<Vec<Vec<usize>>> {
    let attrs: BTreeMap<String, String> = attrs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let inst = lookup(op)?.instantiate("net0", &attrs)?;
    inst.infer_shape("net0", inputs, &mut [])
}

#[test]
fn shapes_are_inferred_like_mxnet() {
    let mut ins = vec![Some(vec![100, 1, 28, 28]), None, None];
    let out = infer(
        "Convolution",
        &[("kernel", "(5, 5)"), ("num_filter", "20")],
        &mut ins,
    )
    .unwrap();
    assert_eq!(out, vec![vec![100, 20, 24, 24]]);
    assert_eq!(ins[1], Some(vec![20, 1, 5, 5]));
    assert_eq!(ins[2], Some(vec![20]));

    let mut ins = vec![Some(vec![2, 6, 4, 4]), None];
    let out = infer(
        "Deconvolution",
        &[
            ("kernel", "(3, 3)"),
            ("num_filter", "4"),
            ("num_group", "2"),
            ("stride", "(2, 2)"),
            ("pad", "(1, 1)"),
            ("adj", "(1, 1)"),
        ],
        &mut ins,
    )
    .unwrap();
    assert_eq!(out, vec![vec![2, 4, 8, 8]]);
    assert_eq!(ins[1], Some(vec![6, 2, 3, 3]));

    let mut ins = vec![Some(vec![2, 3, 7, 7])];
    // Only the visible output: max pooling also has MXNet's hidden workspace output.
    let pool = |attrs: &[(&str, &str)], ins: &mut [MaybeShape]| {
        vec![infer("Pooling", attrs, ins).unwrap().remove(0)]
    };
    assert_eq!(
        pool(&[("kernel", "(2, 2)"), ("stride", "(2, 2)")], &mut ins),
        vec![vec![2, 3, 3, 3]]
    );
    assert_eq!(
        pool(
            &[
                ("kernel", "(2, 2)"),
                ("stride", "(2, 2)"),
                ("pooling_convention", "full")
            ],
            &mut ins
        ),
        vec![vec![2, 3, 4, 4]]
    );
    assert_eq!(
        pool(&[("global_pool", "True")], &mut ins),
        vec![vec![2, 3, 1, 1]]
    );
    let mut ins1 = vec![Some(vec![2, 3, 7])];
    assert_eq!(
        pool(
            &[
                ("kernel", "(3,)"),
                ("stride", "(2,)"),
                ("pooling_convention", "same")
            ],
            &mut ins1
        ),
        vec![vec![2, 3, 4]]
    );
}

#[test]
fn bad_attributes_and_shapes_are_clear_errors() {
    let msg = |r: mxfn_core::Result<Vec<Vec<usize>>>| r.unwrap_err().to_string();
    let e = msg(infer(
        "Convolution",
        &[
            ("kernel", "(3, 3)"),
            ("num_filter", "2"),
            ("layout", "NHWC"),
        ],
        &mut [None],
    ));
    assert!(e.contains("layout") && e.contains("NCHW"), "{e}");
    let e = msg(infer(
        "Convolution",
        &[("kernel", "(5, 5)"), ("num_filter", "2")],
        &mut [Some(vec![1, 1, 3, 3]), None, None],
    ));
    assert!(e.contains("net0") && e.contains("data"), "{e}");
    let e = msg(infer(
        "Convolution",
        &[("kernel", "(3, 3)"), ("num_filter", "2")],
        &mut [Some(vec![1, 1, 8]), None, None],
    ));
    assert!(e.contains("data"), "{e}");
    let e = msg(infer(
        "Convolution",
        &[
            ("kernel", "(3, 3)"),
            ("num_filter", "2"),
            ("stride", "(1, 1, 1)"),
        ],
        &mut [None],
    ));
    assert!(e.contains("stride"), "{e}");
    let e = msg(infer(
        "Convolution",
        &[
            ("kernel", "(3, 3)"),
            ("num_filter", "3"),
            ("num_group", "2"),
        ],
        &mut [None],
    ));
    assert!(e.contains("num_filter"), "{e}");
    let e = msg(infer(
        "Convolution",
        &[("kernel", "(3, 3)"), ("num_filter", "2")],
        &mut [Some(vec![1, 2, 5, 5]), Some(vec![2, 3, 3, 3]), None],
    ));
    assert!(e.contains("weight"), "{e}");
    let e = msg(infer(
        "Pooling",
        &[("pool_type", "avg")],
        &mut [Some(vec![1, 1, 4, 4])],
    ));
    assert!(e.contains("kernel"), "{e}");
    let e = msg(infer(
        "Pooling",
        &[("kernel", "(5, 5)")],
        &mut [Some(vec![1, 1, 4, 4])],
    ));
    assert!(e.contains("net0") && e.contains("data"), "{e}");
    let e = msg(infer(
        "Pooling",
        &[("kernel", "(2, 2)"), ("pool_type", "lp")],
        &mut [None],
    ));
    assert!(e.contains("p_value"), "{e}");
    let e = msg(infer(
        "Pooling",
        &[("kernel", "(2, 2)"), ("layout", "NHWC")],
        &mut [Some(vec![1, 1, 4, 4])],
    ));
    assert!(e.contains("layout"), "{e}");
    let e = msg(infer(
        "Deconvolution",
        &[
            ("kernel", "(3, 3)"),
            ("num_filter", "2"),
            ("target_shape", "(20, 20)"),
        ],
        &mut [Some(vec![1, 1, 3, 3]), None],
    ));
    assert!(e.contains("target_shape"), "{e}");
}

/// Runs forward and backward of one node on arrays.
fn run(
    op: &str,
    attrs: &[(&str, &str)],
    inputs: &[NDArray],
) -> (Vec<NDArray>, Vec<Option<NDArray>>) {
    let attrs: BTreeMap<String, String> = attrs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let inst = lookup(op).unwrap().instantiate("net0", &attrs).unwrap();
    let ctx = OpCtx {
        is_train: true,
        node: "net0",
        need_grad: &[],
    };
    let outs = inst.forward(&ctx, inputs, &mut []).unwrap();
    let heads: Vec<NDArray> = outs.iter().map(|o| arr(o.shape(), 77)).collect();
    let grads = inst.backward(&ctx, &heads, inputs, &outs, &mut []).unwrap();
    (outs, grads)
}

#[test]
fn results_do_not_depend_on_the_thread_count() {
    let inputs = vec![
        arr(&[37, 3, 12, 12], 1),
        arr(&[8, 3, 5, 5], 2),
        arr(&[8], 3),
    ];
    let attrs = [("kernel", "(5, 5)"), ("num_filter", "8"), ("pad", "(1, 1)")];
    let bits = |threads: usize| {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        let (outs, grads) = pool.install(|| run("Convolution", &attrs, &inputs));
        outs.iter()
            .chain(grads.iter().flatten())
            .flat_map(|a| a.to_f64_vec())
            .map(f64::to_bits)
            .collect::<Vec<_>>()
    };
    assert_eq!(bits(1), bits(2));
    assert_eq!(bits(1), bits(3));
}

/// LeNet-sized timing (batch 100: conv 5×5×20 on 28×28×1, pool, conv 5×5×50 on 12×12×20):
/// `cargo test --release -p mxfn-core --test integration grad_conv -- --ignored --nocapture`.
#[test]
#[ignore]
fn lenet_sized_timing() {
    let layers: [(&str, Vec<(&str, &str)>, Vec<Vec<usize>>); 3] = [
        (
            "Convolution",
            vec![("kernel", "(5, 5)"), ("num_filter", "20")],
            vec![vec![100, 1, 28, 28], vec![20, 1, 5, 5], vec![20]],
        ),
        (
            "Pooling",
            vec![("kernel", "(2, 2)"), ("stride", "(2, 2)")],
            vec![vec![100, 20, 24, 24]],
        ),
        (
            "Convolution",
            vec![("kernel", "(5, 5)"), ("num_filter", "50")],
            vec![vec![100, 20, 12, 12], vec![50, 20, 5, 5], vec![50]],
        ),
    ];
    for (op, attrs, shapes) in layers {
        let inputs: Vec<NDArray> = shapes
            .iter()
            .enumerate()
            .map(|(i, s)| arr(s, i as u64))
            .collect();
        let attrs: BTreeMap<String, String> = attrs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let inst = lookup(op).unwrap().instantiate("net0", &attrs).unwrap();
        let ctx = OpCtx {
            is_train: true,
            node: "net0",
            need_grad: &[],
        };
        let outs = inst.forward(&ctx, &inputs, &mut []).unwrap();
        let heads: Vec<NDArray> = outs.iter().map(|o| arr(o.shape(), 77)).collect();
        let reps = 20;
        let (mut fwd, mut bwd) = (0.0, 0.0);
        for _ in 0..reps {
            let t = std::time::Instant::now();
            let outs = inst.forward(&ctx, &inputs, &mut []).unwrap();
            fwd += t.elapsed().as_secs_f64();
            let t = std::time::Instant::now();
            inst.backward(&ctx, &heads, &inputs, &outs, &mut [])
                .unwrap();
            bwd += t.elapsed().as_secs_f64();
        }
        let ms = |s: f64| s * 1e3 / reps as f64;
        println!(
            "{op} {:?}: forward {:.2} ms, backward {:.2} ms",
            shapes[0],
            ms(fwd),
            ms(bwd)
        );
    }
}
