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

/// Convolution → tanh, elemwise_add → relu and FullyConnected → sigmoid fuse (the activation
/// runs inside the producer's forward); a FullyConnected read by relu and by another op does
/// not.
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
    let sum_relu = op("Activation", &[("act_type", "relu")], vec![twice]);
    let g = op("FullyConnected", &[("num_hidden", "5")], vec![sum_relu]);
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
    assert_eq!(fused_steps, 3); // conv → tanh, add → relu and the last FC → sigmoid
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

/// `net` (input "data" of `shape`) bound with `req`, every argument set to a fixed pattern; a
/// monitor (which turns fusion off) when `monitor`.
fn filled_executor(net: &Symbol, shape: &[usize], req: GradReq, monitor: bool) -> Executor {
    let shapes = HashMap::from([("data".to_string(), shape.to_vec())]);
    let mut e = Executor::simple_bind(
        net,
        Context::cpu(0),
        &shapes,
        &HashMap::new(),
        &HashMap::new(),
        req,
    )
    .unwrap();
    for (k, name) in e.arg_names.clone().iter().enumerate() {
        let n = e.arg_arrays[k].size();
        let v: Vec<f32> = (0..n)
            .map(|i| ((i * 29 + k * 13) % 31) as f32 / 31.0 - 0.35)
            .collect();
        e.set_arg(name, NDArray::from_vec(e.arg_arrays[k].shape(), v).unwrap())
            .unwrap();
    }
    if monitor {
        e.set_monitor(Some(Box::new(|_: &str, _: &NDArray| {})));
    }
    e
}

/// Runs [`filled_executor`]: the output's bits (and, with gradients, the data gradient's and
/// the aux states' after backward) and how many steps ran fused.
fn fused_run(net: &Symbol, shape: &[usize], req: GradReq, monitor: bool) -> (Vec<u64>, usize) {
    let mut e = filled_executor(net, shape, req, monitor);
    e.forward(req != GradReq::Null).unwrap();
    let bits = |a: &NDArray| {
        a.to_f64_vec()
            .into_iter()
            .map(f64::to_bits)
            .collect::<Vec<_>>()
    };
    let mut out = bits(&e.outputs()[0]);
    if req != GradReq::Null {
        let head = NDArray::ones(e.outputs()[0].shape(), DType::Float32);
        e.backward(&[head]).unwrap();
        out.extend(bits(e.grad("data").unwrap().unwrap()));
        for a in e.aux_arrays.clone() {
            out.extend(bits(&a));
        }
    }
    (out, e.fused_last)
}

fn layer(op: &str, attrs: &[(&str, &str)], input: Symbol) -> Symbol {
    Symbol::create(op, None, attrs, vec![(None, input)]).unwrap()
}

/// relu6 (`clip` 0..6, MobileNet's activation) fuses into the convolution before it when no
/// gradient is taken, with the unfused run's bits; with gradients it does not fuse (its
/// gradient needs the unclipped input), so the gradient stays zero where the input was
/// clipped.
#[test]
fn clip_fuses_only_without_gradients() {
    let conv = layer(
        "Convolution",
        &[("kernel", "(3, 3)"), ("num_filter", "4")],
        Symbol::variable("data"),
    );
    let clip = layer("clip", &[("a_min", "0"), ("a_max", "0.3")], conv);
    let net = layer("FullyConnected", &[("num_hidden", "3")], clip);
    let shape = [2, 2, 5, 5];
    let (fused, n) = fused_run(&net, &shape, GradReq::Null, false);
    let (plain, m) = fused_run(&net, &shape, GradReq::Null, true);
    assert_eq!((n, m), (1, 0));
    assert_eq!(fused, plain);
    let (trained, n) = fused_run(&net, &shape, GradReq::Write, false);
    let (reference, _) = fused_run(&net, &shape, GradReq::Write, true);
    assert_eq!(n, 0);
    assert_eq!(trained, reference);
}

/// BatchNorm (three outputs, two of them saved statistics) takes the activation after it in
/// training: outputs, gradients and the moving statistics keep the unfused run's bits.
#[test]
fn batchnorm_fuses_the_activation_after_it() {
    let conv = |act: Symbol| {
        layer(
            "Convolution",
            &[("kernel", "(3, 3)"), ("num_filter", "4")],
            act,
        )
    };
    let bn = |x: Symbol| layer("BatchNorm", &[("fix_gamma", "False")], x);
    let shape = [2, 2, 6, 6];
    let relu_net = layer(
        "FullyConnected",
        &[("num_hidden", "3")],
        layer(
            "Activation",
            &[("act_type", "relu")],
            bn(conv(Symbol::variable("data"))),
        ),
    );
    let (fused, n) = fused_run(&relu_net, &shape, GradReq::Write, false);
    let (plain, m) = fused_run(&relu_net, &shape, GradReq::Write, true);
    assert_eq!((n, m), (1, 0));
    assert_eq!(fused, plain);
}

/// At inference, BatchNorm folds into the convolution before it (weights and bias scaled,
/// with or without a bias of its own) and relu6 runs inside: the output matches the unfused
/// run to float32 rounding, three steps become one, and BatchNorm's other outputs are its
/// moving statistics. In training (batch statistics) nothing folds. Images 30 wide run the
/// tiled kernel (columns gathered per tile).
#[test]
fn batchnorm_folds_into_the_convolution_at_inference() {
    for (no_bias, shape) in [
        ("True", [2, 3, 6, 6]),
        ("False", [2, 3, 6, 6]),
        ("False", [1, 3, 30, 30]),
    ] {
        let conv = layer(
            "Convolution",
            &[
                ("kernel", "(3, 3)"),
                ("num_filter", "4"),
                ("no_bias", no_bias),
            ],
            Symbol::variable("data"),
        );
        let bn = layer(
            "BatchNorm",
            &[("fix_gamma", "False"), ("eps", "0.001")],
            conv,
        );
        let net = Symbol::group(&[layer(
            "clip",
            &[("a_min", "0"), ("a_max", "0.2")],
            bn.clone(),
        )]);
        let run = |monitor: bool, req: GradReq| {
            let mut e = filled_executor(&net, &shape, req, monitor);
            for name in e.aux_names.clone() {
                // Moving means around 0, variances in (0.5, 1.5).
                let v: Vec<f32> = (0..4)
                    .map(|i| {
                        if name.ends_with("var") {
                            0.5 + i as f32 / 4.0
                        } else {
                            0.1 * i as f32 - 0.15
                        }
                    })
                    .collect();
                e.set_aux(&name, NDArray::from_vec(&[4], v).unwrap())
                    .unwrap();
            }
            e.forward(false).unwrap();
            (e.outputs()[0].to_f64_vec(), e.fused_last, e.values.clone())
        };
        let (folded, n, values) = run(false, GradReq::Null);
        let (plain, m, _) = run(true, GradReq::Null);
        assert_eq!((n, m), (2, 0), "no_bias={no_bias}");
        let hi = 0.2f32 as f64;
        assert!(folded.contains(&hi) && folded.contains(&0.0));
        for (a, b) in folded.iter().zip(&plain) {
            assert!(
                (a - b).abs() <= 1e-5 * (1.0 + b.abs()),
                "{a} vs {b} (no_bias={no_bias})"
            );
        }
        // The BatchNorm step's outputs: y and its moving statistics.
        let bn_outs = values
            .iter()
            .find(|v| v.len() == 3)
            .expect("BatchNorm outputs");
        assert_eq!(bn_outs[2].to_f64_vec(), vec![0.5, 0.75, 1.0, 1.25]);
        let (_, n, _) = run(false, GradReq::Write);
        assert_eq!(n, 0);
    }
}

/// A 3×3 convolution padded by 1 (the size kept) with `filters` outputs.
fn conv3x3(x: Symbol, name: &str, filters: usize) -> Symbol {
    let filters = filters.to_string();
    Symbol::create(
        "Convolution",
        Some(name),
        &[
            ("kernel", "(3, 3)"),
            ("num_filter", filters.as_str()),
            ("pad", "(1, 1)"),
        ],
        vec![(None, x)],
    )
    .unwrap()
}

/// At inference a convolution's prepared parameters (BatchNorm folded in; the weight packed
/// for its few output positions) are kept between passes and made again exactly when a
/// parameter or statistic changes — replaced by `set_arg` / `set_aux` or written in place —
/// each pass matching the unfused run (a monitor turns folding and preparing off).
/// One inference pass of `fast` (prepared state kept) and `plain` (a monitor turns it off):
/// their outputs agree within `tol`; the addresses of `fast`'s kept states.
fn prepared_pass(fast: &mut Executor, plain: &mut Executor, tol: f64) -> Vec<Option<usize>> {
    fast.forward(false).unwrap();
    plain.forward(false).unwrap();
    let (a, b) = (
        fast.outputs()[0].to_f64_vec(),
        plain.outputs()[0].to_f64_vec(),
    );
    for (x, y) in a.iter().zip(&b) {
        assert!((x - y).abs() <= tol * (1.0 + y.abs()), "{x} vs {y}");
    }
    let folded = fast.folded.addresses();
    let own = fast.prepared.addresses();
    own.into_iter().zip(folded).map(|(a, b)| a.or(b)).collect()
}

/// Convolutions wide enough for the direct kernel (stride 1 from a padded image), BatchNorm
/// folded in and a ReLU run inside, match the unprepared pass, over a batch too.
#[test]
fn prepared_wide_convolutions_match_the_plain_pass() {
    let c1 = conv3x3(Symbol::variable("data"), "c1", 12);
    let bn = layer("BatchNorm", &[("fix_gamma", "False")], c1);
    let act = layer("Activation", &[("act_type", "relu")], bn);
    let net = conv3x3(act, "c2", 40);
    for shape in [[1, 8, 30, 30], [3, 8, 14, 14]] {
        let mut fast = filled_executor(&net, &shape, GradReq::Null, false);
        let mut plain = filled_executor(&net, &shape, GradReq::Null, true);
        let kept = prepared_pass(&mut fast, &mut plain, 1e-4);
        assert_eq!(kept.iter().flatten().count(), 2, "{shape:?}");
    }
}

/// A convolution whose output goes straight into an activation or an add (nothing to fold)
/// runs from its own prepared weight: the fold tried first declines without standing for
/// it. (It did, and SqueezeNet's convolutions, all followed by a ReLU, ran im2col + GEMM.)
#[test]
fn convolutions_with_nothing_to_fold_are_prepared() {
    let c1 = conv3x3(Symbol::variable("data"), "c1", 12);
    let act = layer("Activation", &[("act_type", "relu")], c1);
    let c2 = conv3x3(act.clone(), "c2", 12);
    let net = Symbol::create("elemwise_add", None, &[], vec![(None, c2), (None, act)]).unwrap();
    // 2×2 outputs: 4 positions, the packed kernel's range.
    let shape = [1, 8, 2, 2];
    let mut fast = filled_executor(&net, &shape, GradReq::Null, false);
    let mut plain = filled_executor(&net, &shape, GradReq::Null, true);
    for _ in 0..2 {
        let kept = prepared_pass(&mut fast, &mut plain, 1e-4);
        assert_eq!(kept.iter().flatten().count(), 2, "{kept:?}");
    }
}

#[test]
fn prepared_parameters_are_kept_until_they_change() {
    let conv = |x: Symbol, name: &str| conv3x3(x, name, 20);
    let bn = layer(
        "BatchNorm",
        &[("fix_gamma", "False")],
        conv(Symbol::variable("data"), "c1"),
    );
    let act = layer("Activation", &[("act_type", "relu")], bn);
    // The second convolution has no BatchNorm after it: prepared (packed) alone.
    let net = conv(act, "c2");
    // 2×2 outputs: 4 positions, the packed kernel's range.
    let shape = [1, 8, 2, 2];
    let mut fast = filled_executor(&net, &shape, GradReq::Null, false);
    let mut plain = filled_executor(&net, &shape, GradReq::Null, true);
    let check = |fast: &mut Executor, plain: &mut Executor| prepared_pass(fast, plain, 1e-4);
    let first = check(&mut fast, &mut plain);
    assert_eq!(first.iter().flatten().count(), 2);
    assert_eq!(check(&mut fast, &mut plain), first, "kept between passes");
    // Replaced: c1's weight.
    let w = NDArray::from_vec(&[20, 8, 3, 3], vec![0.01f32; 20 * 72]).unwrap();
    fast.set_arg("c1_weight", w.clone()).unwrap();
    plain.set_arg("c1_weight", w).unwrap();
    let second = check(&mut fast, &mut plain);
    assert!(
        second[0..]
            .iter()
            .zip(&first)
            .filter(|(a, b)| a != b)
            .count()
            == 1
    );
    // Written in place: c2's weight (copy-on-write gives it new storage).
    for e in [&mut fast, &mut plain] {
        let w = e.arg_mut("c2_weight").unwrap();
        w.f32s_mut("w").unwrap()[5] += 1.0;
    }
    let third = check(&mut fast, &mut plain);
    assert!(third.iter().zip(&second).filter(|(a, b)| a != b).count() == 1);
    // A new moving variance refolds c1.
    let var = NDArray::from_vec(&[20], vec![2.0f32; 20]).unwrap();
    let name = fast
        .aux_names
        .iter()
        .find(|n| n.ends_with("var"))
        .unwrap()
        .clone();
    fast.set_aux(&name, var.clone()).unwrap();
    plain.set_aux(&name, var).unwrap();
    let fourth = check(&mut fast, &mut plain);
    assert!(fourth.iter().zip(&third).filter(|(a, b)| a != b).count() == 1);
}

/// Over a 1×1 image a 3×3 window padded by 1 sees the input with its centre tap only: the
/// prepared (packed) weights keep that tap alone, folded BatchNorm included, and the pass
/// matches the unprepared one.
#[test]
fn prepared_weights_keep_only_the_taps_that_see_the_input() {
    let conv = |x: Symbol, name: &str| conv3x3(x, name, 12);
    let bn = layer(
        "BatchNorm",
        &[("fix_gamma", "False")],
        conv(Symbol::variable("data"), "c1"),
    );
    let net = conv(layer("Activation", &[("act_type", "relu")], bn), "c2");
    let shape = [1, 8, 1, 1];
    let mut fast = filled_executor(&net, &shape, GradReq::Null, false);
    let mut plain = filled_executor(&net, &shape, GradReq::Null, true);
    let kept = prepared_pass(&mut fast, &mut plain, 1e-5);
    assert_eq!(kept.iter().flatten().count(), 2);
}

/// A recurrent layer's packed weights are kept while its parameter vector stays; its states,
/// which change from call to call, are not part of the key.
#[test]
fn rnn_weights_are_prepared_from_the_parameters_alone() {
    let inputs = ["data", "parameters", "state", "state_cell"]
        .map(|n| (None, Symbol::variable(n)))
        .to_vec();
    let net = Symbol::create(
        "RNN",
        Some("lstm"),
        &[("mode", "lstm"), ("state_size", "4"), ("num_layers", "2")],
        inputs,
    )
    .unwrap();
    let shape = [5, 2, 3];
    let mut fast = filled_executor(&net, &shape, GradReq::Null, false);
    let mut plain = filled_executor(&net, &shape, GradReq::Null, true);
    // (The packed product adds the biases after the product: rounding differs.)
    let check = |fast: &mut Executor, plain: &mut Executor| prepared_pass(fast, plain, 1e-5);
    let first = check(&mut fast, &mut plain);
    assert_eq!(first.iter().flatten().count(), 1);
    let state = NDArray::from_vec(&[2, 2, 4], vec![0.25f32; 16]).unwrap();
    fast.set_arg("state", state.clone()).unwrap();
    plain.set_arg("state", state).unwrap();
    assert_eq!(
        check(&mut fast, &mut plain),
        first,
        "a new state keeps them"
    );
    for e in [&mut fast, &mut plain] {
        e.arg_mut("parameters").unwrap().f32s_mut("p").unwrap()[3] += 1.0;
    }
    let second = check(&mut fast, &mut plain);
    assert_ne!(second, first, "a parameter written in place repacks them");
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

/// DenseNet's blocks at inference: each Concat (channels, batch 1) takes over its first
/// input's buffer at that input's last use and appends the rest. The outputs are those of a
/// pass that keeps every value (gradients requested), at batch 1 and at batch 2 (where the
/// joined axis is not outermost and the inputs are copied); a backward after the inference
/// pass has nothing to do and succeeds.
#[test]
fn concat_appends_to_its_first_input_at_inference() {
    let conv = |x: Symbol, filters: &str| {
        layer(
            "Convolution",
            &[
                ("kernel", "(3, 3)"),
                ("pad", "(1, 1)"),
                ("num_filter", filters),
            ],
            x,
        )
    };
    let bn = |x: Symbol| layer("BatchNorm", &[("use_global_stats", "True")], x);
    let concat = |a: Symbol, b: Symbol| {
        Symbol::create("Concat", None, &[("dim", "1")], vec![(None, a), (None, b)]).unwrap()
    };
    let mut x = conv(Symbol::variable("data"), "3");
    for _ in 0..3 {
        let relu = layer("Activation", &[("act_type", "relu")], bn(x.clone()));
        x = concat(x, conv(relu, "2"));
    }
    let net = layer("FullyConnected", &[("num_hidden", "4")], x);
    for shape in [[1, 2, 5, 5], [2, 2, 5, 5]] {
        let mut inf = filled_executor(&net, &shape, GradReq::Null, false);
        let mut kept = filled_executor(&net, &shape, GradReq::Write, false);
        inf.forward(false).unwrap();
        kept.forward(false).unwrap();
        let (a, b) = (
            inf.outputs()[0].to_f64_vec(),
            kept.outputs()[0].to_f64_vec(),
        );
        assert_eq!(a, b);
        inf.backward(&[NDArray::ones(&[shape[0], 4], DType::Float32)])
            .unwrap();
        // Run again: the taken-over buffers belong to this pass alone.
        inf.forward(false).unwrap();
        assert_eq!(inf.outputs()[0].to_f64_vec(), b);
    }
}

/// An inference pass in blocks of samples matches the whole-batch pass (within rounding:
/// kernels may differ with the batch size) and follows parameter changes; training passes,
/// gradients and a monitor run whole; a size that does not divide the batch is refused.
#[test]
fn sample_blocks_match_the_whole_batch() {
    let c1 = conv3x3(Symbol::variable("data"), "c1", 12);
    let bn = layer("BatchNorm", &[("fix_gamma", "False")], c1);
    let act = layer("Activation", &[("act_type", "relu")], bn);
    let pool = layer(
        "Pooling",
        &[("kernel", "(2, 2)"), ("stride", "(2, 2)")],
        act,
    );
    let net = layer("FullyConnected", &[("num_hidden", "5")], pool);
    let shape = [6, 3, 10, 10];
    let mut whole = filled_executor(&net, &shape, GradReq::Null, false);
    let mut blocked = filled_executor(&net, &shape, GradReq::Null, false);
    let data = vec!["data".to_string()];
    assert!(
        blocked.set_sample_blocks(&data, 4).is_err(),
        "4 does not divide 6"
    );
    assert!(
        blocked.set_sample_blocks(&["nope".into()], 2).is_err(),
        "no such argument"
    );
    // A scalar argument carries no batch.
    let scalar = Symbol::create(
        "elemwise_add",
        None,
        &[],
        vec![(None, Symbol::variable("s")), (None, Symbol::variable("t"))],
    )
    .unwrap();
    let scalars = HashMap::from([("s".to_string(), vec![]), ("t".to_string(), vec![])]);
    let none = HashMap::new();
    let mut e = Executor::simple_bind(
        &scalar,
        Context::cpu(0),
        &scalars,
        &none,
        &HashMap::new(),
        GradReq::Null,
    )
    .unwrap();
    assert!(e.set_sample_blocks(&["s".into()], 1).is_err(), "scalar");
    blocked.set_sample_blocks(&data, 2).unwrap();
    assert!(blocked.runs_in_blocks(false) && !blocked.runs_in_blocks(true));
    let close = |a: &Executor, b: &Executor| {
        let (a, b) = (a.outputs()[0].to_f64_vec(), b.outputs()[0].to_f64_vec());
        assert_eq!(a.len(), 30);
        for (x, y) in a.iter().zip(&b) {
            assert!((x - y).abs() <= 1e-4 * (1.0 + y.abs()), "{x} vs {y}");
        }
    };
    for step in 0..3 {
        if step == 2 {
            // New parameters reach the blocks' executor.
            let w = NDArray::from_vec(&[5, 12 * 25], vec![0.02f32; 5 * 12 * 25]).unwrap();
            whole.set_arg("fullyconnected0_weight", w.clone()).unwrap();
            blocked.set_arg("fullyconnected0_weight", w).unwrap();
        }
        whole.forward(false).unwrap();
        blocked.forward(false).unwrap();
        assert_eq!(blocked.outputs()[0].shape(), &[6, 5]);
        close(&blocked, &whole);
    }
    // A twin runs in the same blocks.
    let mut twin = blocked.inference_twin().unwrap();
    assert!(twin.runs_in_blocks(false));
    twin.forward(false).unwrap();
    close(&twin, &whole);
    // A monitor sees every op's whole-batch output: no blocks.
    blocked.set_monitor(Some(Box::new(|_: &str, _: &NDArray| {})));
    assert!(!blocked.runs_in_blocks(false));
    let training = filled_executor(&net, &shape, GradReq::Write, false);
    let mut training = training;
    training.set_sample_blocks(&data, 3).unwrap();
    assert!(!training.runs_in_blocks(false), "gradients requested");
}

/// A 1×1 convolution with `filters` outputs.
fn conv1x1(x: Symbol, name: &str, filters: usize) -> Symbol {
    let filters = filters.to_string();
    Symbol::create(
        "Convolution",
        Some(name),
        &[("kernel", "(1, 1)"), ("num_filter", filters.as_str())],
        vec![(None, x)],
    )
    .unwrap()
}

/// `filled_executor` with every BatchNorm's moving statistics set apart from 0 and 1 (means
/// around 0, variances in (0.5, 1.5)), so a map applied to the padding would show.
fn with_statistics(mut e: Executor) -> Executor {
    for (k, name) in e.aux_names.clone().iter().enumerate() {
        let n = e.aux_arrays[k].size();
        let v: Vec<f32> = (0..n)
            .map(|i| match name.ends_with("var") {
                true => 0.5 + (i % 5) as f32 / 5.0,
                false => 0.1 * (i % 4) as f32 - 0.15,
            })
            .collect();
        e.set_aux(name, NDArray::from_vec(&[n], v).unwrap())
            .unwrap();
    }
    e
}

/// At inference, BatchNorm → activation → convolution (pre-activation networks: DenseNet,
/// ResNet v2) runs as one step, the convolution mapping its input as it reads it: 1×1
/// windows, a 3×3 window on the direct kernel's padded image, relu, clip or no activation, a
/// BatchNorm after the convolution folded in as well (DenseNet's layer). Each matches the
/// plain pass (a monitor turns the plans off), twice in a row (the prepared state kept).
/// Where the convolution declines — tanh between, a 3×3 window over 5² images (not tiled)
/// — the BatchNorm and activation run first and the output is the same.
#[test]
fn batchnorm_maps_the_input_of_the_convolution_after_it() {
    let bn = |x: Symbol| layer("BatchNorm", &[("fix_gamma", "False")], x);
    let relu = |x: Symbol| layer("Activation", &[("act_type", "relu")], x);
    // (A ReLU after the stem: a BatchNorm right after a convolution folds into it instead.)
    let stem = |c| relu(conv3x3(Symbol::variable("data"), "stem", c));
    let clip = |x| layer("clip", &[("a_min", "-0.1"), ("a_max", "0.3")], x);
    let tanh = |x| layer("Activation", &[("act_type", "tanh")], x);
    let dense = |x| conv3x3(relu(bn(conv1x1(relu(bn(x)), "c1", 16))), "c2", 4);
    let cases: Vec<(&str, Symbol, [usize; 4], bool)> = vec![
        (
            "1x1 relu",
            conv1x1(relu(bn(stem(12))), "c", 20),
            [1, 3, 9, 9],
            true,
        ),
        (
            "1x1 batch",
            conv1x1(relu(bn(stem(12))), "c", 20),
            [3, 3, 9, 9],
            true,
        ),
        (
            "1x1 clip",
            conv1x1(clip(bn(stem(12))), "c", 20),
            [1, 3, 9, 9],
            true,
        ),
        (
            "1x1 alone",
            conv1x1(bn(stem(12)), "c", 20),
            [1, 3, 9, 9],
            true,
        ),
        (
            "3x3 direct",
            conv3x3(relu(bn(stem(6))), "c", 8),
            [2, 3, 20, 20],
            true,
        ),
        ("dense layer", dense(stem(12)), [1, 3, 30, 30], true),
        (
            "tanh",
            conv1x1(tanh(bn(stem(12))), "c", 20),
            [1, 3, 9, 9],
            false,
        ),
        (
            "3x3 small",
            conv3x3(relu(bn(stem(6))), "c", 8),
            [1, 3, 5, 5],
            false,
        ),
    ];
    for (what, net, shape, maps) in cases {
        let mut fast = with_statistics(filled_executor(&net, &shape, GradReq::Null, false));
        let mut plain = with_statistics(filled_executor(&net, &shape, GradReq::Null, true));
        for pass in 0..2 {
            let kept = [&fast.mapped, &fast.mapped_folded].map(|c| c.addresses());
            prepared_pass(&mut fast, &mut plain, 1e-5);
            let now = [&fast.mapped, &fast.mapped_folded].map(|c| c.addresses());
            let made = now.iter().flatten().flatten().count();
            assert_eq!(made > 0, maps, "{what}");
            if pass == 1 {
                assert_eq!(kept, now, "{what}: the mapped state was made again");
            }
        }
        // Nothing is mapped in a pass that keeps values for a backward.
        let mut train = with_statistics(filled_executor(&net, &shape, GradReq::Write, false));
        train.forward(false).unwrap();
        assert!(
            train.mapped.addresses().iter().all(Option::is_none),
            "{what}"
        );
    }
}

/// At inference, a same-shape add reading a convolution's (or another op's) output runs inside
/// that op's forward, over its output while in cache: ResNet's joins (BatchNorm folded between,
/// ReLU after), the shortcut on either side, a downsampling shortcut computed after the body,
/// a pre-activation block whose sum feeds the next block's mapped BatchNorm, depthwise kernels
/// (planes and rows in vectors, stacked planes at stride 3), a lone BatchNorm and a dense
/// layer. The output is the same bits as the same pass without the plan and matches the plain
/// pass (a monitor turns the plans off); an output with two readers is not fused, and a
/// training pass never fuses.
#[test]
fn residual_adds_run_inside_the_op_before_them() {
    let bn = |x: Symbol| layer("BatchNorm", &[("fix_gamma", "False")], x);
    let relu = |x: Symbol| layer("Activation", &[("act_type", "relu")], x);
    let add = |a: Symbol, b: Symbol| {
        Symbol::create("elemwise_add", None, &[], vec![(None, a), (None, b)]).unwrap()
    };
    let stem = || relu(conv3x3(Symbol::variable("data"), "stem", 8));
    let grouped = |x: Symbol, name: &str, stride: &str, pad: &str| {
        let attrs = [
            ("kernel", "(3, 3)"),
            ("num_filter", "8"),
            ("num_group", "8"),
            ("stride", stride),
            ("pad", pad),
        ];
        Symbol::create("Convolution", Some(name), &attrs, vec![(None, x)]).unwrap()
    };
    let strided1x1 = |x: Symbol| {
        let attrs = [
            ("kernel", "(1, 1)"),
            ("num_filter", "8"),
            ("stride", "(3, 3)"),
        ];
        Symbol::create("Convolution", Some("o"), &attrs, vec![(None, x)]).unwrap()
    };
    let v1 = || {
        let x = stem();
        let body = bn(conv1x1(relu(bn(conv3x3(x.clone(), "b1", 8))), "b2", 8));
        relu(add(body, x))
    };
    let v2 = || {
        let x = stem();
        let sum = add(conv3x3(relu(bn(x.clone())), "c", 8), x);
        conv1x1(relu(bn(sum)), "next", 8)
    };
    let downsample = || {
        let x = stem();
        add(bn(conv3x3(x.clone(), "body", 16)), bn(conv1x1(x, "ds", 16)))
    };
    let two_readers = || {
        let x = stem();
        let c = conv3x3(x.clone(), "c", 8);
        Symbol::group(&[add(c.clone(), x), relu(c)])
    };
    let head_and_read = || {
        let x = stem();
        let sum = add(conv3x3(x.clone(), "c", 8), x);
        Symbol::group(&[sum.clone(), relu(sum)])
    };
    // `f` of the stem and the stem itself, added (the shortcut second, or first).
    let join = |f: &dyn Fn(Symbol) -> Symbol, shortcut_first: bool| {
        let x = stem();
        match shortcut_first {
            true => add(x.clone(), f(x)),
            false => add(f(x.clone()), x),
        }
    };
    let dense = || {
        let fc = layer(
            "FullyConnected",
            &[("num_hidden", "10")],
            layer("Flatten", &[], stem()),
        );
        add(Symbol::variable("r"), fc)
    };
    let cases: Vec<(&str, Symbol, [usize; 4], usize)> = vec![
        ("v1 few positions", v1(), [1, 3, 9, 9], 1),
        ("v1 batch", v1(), [2, 3, 20, 20], 1),
        ("v1 wide", v1(), [1, 3, 30, 30], 1),
        (
            "shortcut first",
            join(&|x| conv3x3(x, "c", 8), true),
            [1, 3, 9, 9],
            1,
        ),
        ("downsample after the body", downsample(), [2, 3, 9, 9], 1),
        ("v2 mapped", v2(), [1, 3, 20, 20], 1),
        ("v2 batch", v2(), [2, 3, 9, 9], 1),
        (
            "depthwise planes",
            join(&|x| grouped(x, "dw", "(1, 1)", "(1, 1)"), false),
            [2, 3, 4, 4],
            1,
        ),
        (
            "depthwise rows",
            join(&|x| grouped(x, "dw", "(1, 1)", "(1, 1)"), false),
            [1, 3, 20, 20],
            1,
        ),
        (
            "depthwise stacked",
            {
                let x = stem();
                add(strided1x1(x.clone()), grouped(x, "dw", "(3, 3)", "(0, 0)"))
            },
            [2, 3, 12, 12],
            1,
        ),
        (
            "batchnorm",
            join(&|x| bn(relu(conv3x3(x, "c", 8))), false),
            [2, 3, 9, 9],
            1,
        ),
        ("dense", dense(), [2, 3, 5, 5], 1),
        ("two readers", two_readers(), [1, 3, 9, 9], 0),
        ("a head read on", head_and_read(), [1, 3, 9, 9], 1),
    ];
    let outputs =
        |e: &Executor| -> Vec<Vec<f64>> { e.outputs().iter().map(NDArray::to_f64_vec).collect() };
    for (what, net, shape, adds) in cases {
        let executor = |req, monitor| with_statistics(filled_executor(&net, &shape, req, monitor));
        let mut fast = executor(GradReq::Null, false);
        let mut unplanned = executor(GradReq::Null, false);
        unplanned.residual_into.iter_mut().for_each(|r| *r = None);
        let mut plain = executor(GradReq::Null, true);
        for _ in 0..2 {
            for e in [&mut fast, &mut unplanned, &mut plain] {
                e.forward(false).unwrap();
            }
            let got = outputs(&fast);
            assert_eq!(
                got,
                outputs(&unplanned),
                "{what}: not the unplanned pass's bits"
            );
            for (a, b) in got.iter().flatten().zip(outputs(&plain).iter().flatten()) {
                assert!(
                    (a - b).abs() <= 1e-5 * (1.0 + b.abs()),
                    "{what}: {a} vs {b}"
                );
            }
            assert_eq!(fast.fused_last, unplanned.fused_last + adds, "{what}");
        }
        let mut train = executor(GradReq::Write, false);
        let mut train_unplanned = executor(GradReq::Write, false);
        train_unplanned
            .residual_into
            .iter_mut()
            .for_each(|r| *r = None);
        train.forward(true).unwrap();
        train_unplanned.forward(true).unwrap();
        assert_eq!(
            train.fused_last, train_unplanned.fused_last,
            "{what}: training"
        );
        assert_eq!(
            outputs(&train),
            outputs(&train_unplanned),
            "{what}: training"
        );
    }
}
