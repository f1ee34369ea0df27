//! Unit tests of the executor (memory plan, fusion, gradients).

use super::*;

fn chain() -> Symbol {
    let x = Symbol::variable("x");
    let a = Symbol::create("relu", Some("a"), &[], vec![(None, x)]).unwrap();
    let b = Symbol::create("square", Some("b"), &[], vec![(None, a)]).unwrap();
    Symbol::create("exp", Some("c"), &[], vec![(None, b)]).unwrap()
}

#[test]
fn inference_releases_intermediates_and_training_keeps_them() {
    let shapes = HashMap::from([("x".to_string(), vec![4])]);
    let x = NDArray::from_vec(&[4], vec![-1.0f32, 0.5, 1.0, 2.0]).unwrap();
    let mut inf = Executor::simple_bind(
        &chain(),
        Context::cpu(0),
        &shapes,
        &HashMap::new(),
        &HashMap::new(),
        GradReq::Null,
    )
    .unwrap();
    inf.set_arg("x", x.clone()).unwrap();
    inf.forward(false).unwrap();
    // a and b are freed and c (the output) stays; x, a variable, is read from its
    // bound array and never held in the values.
    let kept: Vec<bool> = inf.values.iter().map(|v| !v.is_empty()).collect();
    assert_eq!(kept, vec![false, false, false, true]);
    let mut tr = Executor::simple_bind(
        &chain(),
        Context::cpu(0),
        &shapes,
        &HashMap::new(),
        &HashMap::new(),
        GradReq::Write,
    )
    .unwrap();
    tr.set_arg("x", x).unwrap();
    tr.forward(true).unwrap();
    assert!(tr.values.iter().skip(1).all(|v| !v.is_empty()));
    assert_eq!(inf.outputs()[0].to_f64_vec(), tr.outputs()[0].to_f64_vec());
    // c is not a loss layer: its head gradient is given, as MXNet requires.
    let err = tr.backward(&[]).unwrap_err().to_string();
    assert!(err.contains("\"c_output\" is not a loss layer"), "{err}");
    tr.backward(&[NDArray::ones(&[4], DType::Float32)]).unwrap();
    let g = tr.grad("x").unwrap().unwrap().to_f64_vec();
    let want = [
        0.0,
        2.0 * 0.5 * (0.25f64).exp(),
        2.0 * 1.0f64.exp(),
        4.0 * 4.0f64.exp(),
    ];
    for (a, b) in g.iter().zip(want) {
        assert!((a - b).abs() < 1e-3 * b.abs().max(1.0), "{a} vs {b}");
    }
}

/// Convolution → tanh and FullyConnected → sigmoid fuse (the activation runs inside the
/// producer's forward); a FullyConnected read by relu and by another op does not.
/// Outputs and gradients are the same bits as the unfused run (a monitor turns fusion
/// off).
#[test]
fn fused_activations_match_the_unfused_run() {
    let op = |name: &str, attrs: &[(&str, &str)], ins: Vec<Symbol>| {
        Symbol::create(
            name,
            None,
            attrs,
            ins.into_iter().map(|s| (None, s)).collect(),
        )
        .unwrap()
    };
    let x = Symbol::variable("data");
    let c = op(
        "Convolution",
        &[("kernel", "(3, 3)"), ("num_filter", "4")],
        vec![x],
    );
    let t = op("Activation", &[("act_type", "tanh")], vec![c]);
    let f = op("FullyConnected", &[("num_hidden", "7")], vec![t]);
    let r = op("Activation", &[("act_type", "relu")], vec![f.clone()]);
    let twice = op("elemwise_add", &[], vec![r.clone(), f]); // f read twice: no fusion
    let g = op("FullyConnected", &[("num_hidden", "5")], vec![twice]);
    let s = op("Activation", &[("act_type", "sigmoid")], vec![g]);
    let net = Symbol::group(&[s, r]);
    let shapes = HashMap::from([("data".to_string(), vec![3, 2, 6, 6])]);
    let bind = || {
        let mut e = Executor::simple_bind(
            &net,
            Context::cpu(0),
            &shapes,
            &HashMap::new(),
            &HashMap::new(),
            GradReq::Write,
        )
        .unwrap();
        for (k, name) in e.arg_names.clone().iter().enumerate() {
            let n = e.arg_arrays[k].size();
            let v: Vec<f32> = (0..n)
                .map(|i| ((i * 37 + k * 11) % 23) as f32 / 23.0 - 0.4)
                .collect();
            e.set_arg(name, NDArray::from_vec(e.arg_arrays[k].shape(), v).unwrap())
                .unwrap();
        }
        e
    };
    let fused_steps = bind().fuse_into.iter().filter(|f| f.is_some()).count();
    assert_eq!(fused_steps, 2); // conv → tanh and the last FC → sigmoid
    let run = |monitor: bool| {
        let mut e = bind();
        if monitor {
            e.set_monitor(Some(Box::new(|_: &str, _: &NDArray| {})));
        }
        e.forward(true).unwrap();
        let heads: Vec<NDArray> = e
            .outputs()
            .iter()
            .map(|o| NDArray::ones(o.shape(), o.dtype()))
            .collect();
        e.backward(&heads).unwrap();
        let mut bits: Vec<u64> = e
            .outputs()
            .iter()
            .flat_map(|o| o.to_f64_vec())
            .map(f64::to_bits)
            .collect();
        for name in e.arg_names.clone() {
            bits.extend(
                e.grad(&name)
                    .unwrap()
                    .unwrap()
                    .to_f64_vec()
                    .iter()
                    .map(|v| v.to_bits()),
            );
        }
        bits
    };
    assert_eq!(run(false), run(true));
}

/// The profiler counts every node's forward and backward calls while it runs, nothing while
/// it is stopped. (The table is process-wide and other tests run executors concurrently, so
/// this test looks only at its own uniquely named nodes.)
#[test]
fn profiler_counts_forward_and_backward_calls_per_node() {
    let x = Symbol::variable("x");
    let a = Symbol::create("relu", Some("prof_zz_a"), &[], vec![(None, x)]).unwrap();
    let b = Symbol::create("square", Some("prof_zz_b"), &[], vec![(None, a)]).unwrap();
    let shapes = HashMap::from([("x".to_string(), vec![4])]);
    let mut exe = Executor::simple_bind(
        &b,
        Context::cpu(0),
        &shapes,
        &HashMap::new(),
        &HashMap::new(),
        GradReq::Write,
    )
    .unwrap();
    exe.forward(true).unwrap();
    let before = profile::snapshot();
    assert!(!before.nodes.contains_key("prof_zz_a"));
    profile::set_running(true);
    for _ in 0..3 {
        exe.forward(true).unwrap();
        exe.backward(&[NDArray::ones(&[4], DType::Float32)])
            .unwrap();
    }
    exe.forward(false).unwrap();
    profile::set_running(false);
    exe.forward(false).unwrap();
    let p = profile::snapshot();
    let row = p.nodes["prof_zz_b"];
    assert_eq!(row[0].0, Some("square"));
    assert_eq!((row[0].1.count, row[1].1.count), (4, 3));
    assert_eq!(p.nodes["prof_zz_a"][0].1.count, 4);
    assert!(p.ops[&("square", profile::Pass::Forward)].count >= 4);
    let table = profile::render(&p);
    assert!(table.contains("prof_zz_b"), "{table}");
    assert!(table.contains("square"), "{table}");
}
