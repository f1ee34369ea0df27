//! Shape and indexing operators (Reshape, Flatten, transpose, expand_dims, squeeze, Concat,
//! stack, SliceChannel, slice_axis, slice, Embedding): finite-difference gradients on small
//! random inputs over several attribute combinations, shape inference through symbols, and
//! the errors users see.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use mxfn_core::executor::{Executor, GradReq};
use mxfn_core::ops::testing::{random_array, GradCheck};
use mxfn_core::ops::{lookup, OpCtx};
use mxfn_core::{Context, NDArray, Symbol};
use std::collections::{BTreeMap, HashMap};

fn arr(shape: &[usize], seed: u64) -> NDArray {
    random_array(shape, -1.0, 1.0, seed)
}

fn attr_map(attrs: &[(&str, &str)]) -> BTreeMap<String, String> {
    attrs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// One gradient-check row: attributes and input shapes.
type Row<'a> = (&'a [(&'static str, &'a str)], &'a [&'a [usize]]);

/// Runs the gradient check of `op` for each (attributes, input shapes) row.
fn check(op: &'static str, rows: &[Row]) {
    for (k, (attrs, shapes)) in rows.iter().enumerate() {
        let inputs = shapes
            .iter()
            .enumerate()
            .map(|(i, s)| arr(s, 10 * k as u64 + i as u64 + 1))
            .collect();
        GradCheck::new(op, attrs, inputs)
            .run()
            .unwrap_or_else(|e| panic!("{op} {attrs:?} {shapes:?}: {e}"));
    }
}

/// The output shapes of `op` on inputs of `shapes`, through the operator's own inference.
fn out_shapes(
    op: &str,
    attrs: &[(&str, &str)],
    shapes: &[&[usize]],
) -> mxfn_core::Result<Vec<Vec<usize>>> {
    let inst = lookup(op)?.instantiate("node1", &attr_map(attrs))?;
    let mut ins: Vec<_> = shapes.iter().map(|s| Some(s.to_vec())).collect();
    inst.infer_shape("node1", &mut ins, &mut [])
}

/// Runs `op` forward on `ins` (node name "n").
fn forward(op: &str, attrs: &[(&str, &str)], ins: Vec<NDArray>) -> mxfn_core::Result<Vec<NDArray>> {
    let inst = lookup(op)?.instantiate("n", &attr_map(attrs))?;
    let ctx = OpCtx {
        is_train: false,
        node: "n",
        need_grad: &[],
    };
    inst.forward(&ctx, &ins, &mut [])
}

#[test]
fn reshape_gradients_and_codes() {
    check(
        "Reshape",
        &[
            (&[("shape", "(0, -1)")], &[&[2, 3, 2]]),
            (&[("shape", "(-3, -2)")], &[&[2, 3, 2]]),
            (&[("shape", "(0, -4, 2, -1, -2)")], &[&[2, 4, 3]]),
            (&[("shape", "(-1, 0)"), ("reverse", "True")], &[&[3, 2, 2]]),
            (&[("shape", "(4, 3)")], &[&[2, 6]]),
            (&[("target_shape", "(0, 3)")], &[&[2, 6]]),
        ],
    );
    check("reshape", &[(&[("shape", "(-2, 1)")], &[&[2, 3]])]);
    let cases: &[(&str, &[usize], bool, &[usize])] = &[
        ("(4, 0, 2)", &[2, 3, 4], false, &[4, 3, 2]),
        ("(6, 1, -1)", &[2, 3, 4], false, &[6, 1, 4]),
        ("(-3, -3)", &[2, 3, 4, 5], false, &[6, 20]),
        ("(-4, 1, 2, -2)", &[2, 3, 4], false, &[1, 2, 3, 4]),
        ("(-1, 0)", &[10, 5, 4], false, &[40, 5]),
        ("(-1, 0)", &[10, 5, 4], true, &[50, 4]),
        // Reversed, the codes read (0, -4, 2, -1) against (3, 8): 0 copies 3, -4 splits 8 into
        // (2, 4), and the result (3, 2, 4) is reversed back, as MXNet does.
        ("(-1, 2, -4, 0)", &[8, 3], true, &[4, 2, 3]),
    ];
    for &(shape, d, rev, want) in cases {
        let rev = if rev { "True" } else { "False" };
        let got = out_shapes("Reshape", &[("shape", shape), ("reverse", rev)], &[d]);
        assert_eq!(
            got.map_err(|e| e.to_string()),
            Ok(vec![want.to_vec()]),
            "shape {shape} reverse {rev} on {d:?}"
        );
    }
    let e = out_shapes("Reshape", &[("shape", "(5, -1)")], &[&[2, 3]])
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("node1") && e.contains("\"shape\"") && e.contains("(2, 3)"),
        "{e}"
    );
    assert!(out_shapes("Reshape", &[("shape", "(-5, 2)")], &[&[2, 3]]).is_err());
    assert!(out_shapes("Reshape", &[], &[&[2, 3]]).is_err());
    // The output shares the input's storage: no copy for a reshape.
    let x = arr(&[2, 3], 1);
    let y = forward("Reshape", &[("shape", "(3, 2)")], vec![x.clone()]).unwrap();
    assert_eq!(y[0].to_f64_vec(), x.to_f64_vec());
}

#[test]
fn flatten_expand_dims_squeeze() {
    check(
        "Flatten",
        &[
            (&[], &[&[3]]),
            (&[], &[&[2, 3, 2]]),
            (&[], &[&[2, 1, 2, 2]]),
        ],
    );
    check("flatten", &[(&[], &[&[2, 3]])]);
    assert_eq!(
        out_shapes("Flatten", &[], &[&[4]]).unwrap(),
        vec![vec![4, 1]]
    );
    check(
        "expand_dims",
        &[
            (&[("axis", "0")], &[&[2, 3]]),
            (&[("axis", "1")], &[&[2, 3]]),
            (&[("axis", "-1")], &[&[2, 3]]),
            (&[("axis", "-3")], &[&[2, 3]]),
        ],
    );
    assert_eq!(
        out_shapes("expand_dims", &[("axis", "-1")], &[&[2, 3]]).unwrap(),
        vec![vec![2, 3, 1]]
    );
    assert!(out_shapes("expand_dims", &[("axis", "3")], &[&[2, 3]]).is_err());
    check(
        "squeeze",
        &[
            (&[], &[&[2, 1, 3, 1]]),
            (&[("axis", "(1,)")], &[&[2, 1, 3, 1]]),
            (&[("axis", "(-1, 1)")], &[&[2, 1, 3, 1]]),
        ],
    );
    assert_eq!(
        out_shapes("squeeze", &[], &[&[1, 1]]).unwrap(),
        vec![vec![1]]
    );
    assert!(out_shapes("squeeze", &[("axis", "(0,)")], &[&[2, 1]]).is_err());
    assert!(out_shapes("squeeze", &[("axis", "(1, 1)")], &[&[2, 1]]).is_err());
}

#[test]
fn transpose_gradients() {
    check(
        "transpose",
        &[
            (&[], &[&[2, 3]]),
            (&[], &[&[2, 3, 4]]),
            (&[("axes", "(0, 2, 1)")], &[&[2, 3, 4]]),
            (&[("axes", "(1, 0, 2, 3)")], &[&[2, 3, 1, 2]]),
            (&[("axes", "(2, -3, 1)")], &[&[2, 3, 4]]),
        ],
    );
    assert_eq!(
        out_shapes("transpose", &[("axes", "(2, 0, 1)")], &[&[2, 3, 4]]).unwrap(),
        vec![vec![4, 2, 3]]
    );
    assert!(out_shapes("transpose", &[("axes", "(0, 0, 1)")], &[&[2, 3, 4]]).is_err());
    assert!(out_shapes("transpose", &[("axes", "(1, 0)")], &[&[2, 3, 4]]).is_err());
}

#[test]
fn concat_and_stack_gradients() {
    check(
        "Concat",
        &[
            (
                &[("num_args", "3"), ("dim", "1")],
                &[&[2, 1, 2], &[2, 3, 2], &[2, 2, 2]],
            ),
            (&[("num_args", "2"), ("dim", "0")], &[&[1, 3], &[2, 3]]),
            (&[("num_args", "2"), ("dim", "-1")], &[&[2, 2], &[2, 3]]),
            (&[("num_args", "1")], &[&[2, 3]]),
        ],
    );
    check("concat", &[(&[("num_args", "2")], &[&[2, 1], &[2, 2]])]);
    let e = out_shapes("Concat", &[("num_args", "2")], &[&[2, 3], &[3, 3]])
        .unwrap_err()
        .to_string();
    assert!(e.contains("node1") && e.contains("arg1"), "{e}");
    check(
        "stack",
        &[
            (&[("num_args", "2")], &[&[2, 3], &[2, 3]]),
            (
                &[("num_args", "3"), ("axis", "1")],
                &[&[2, 3], &[2, 3], &[2, 3]],
            ),
            (&[("num_args", "2"), ("axis", "-1")], &[&[2, 3], &[2, 3]]),
        ],
    );
    assert_eq!(
        out_shapes(
            "stack",
            &[("num_args", "3"), ("axis", "1")],
            &[&[2, 4], &[2, 4], &[2, 4]]
        )
        .unwrap(),
        vec![vec![2, 3, 4]]
    );
    assert!(out_shapes("stack", &[("num_args", "2")], &[&[2, 4], &[2, 3]]).is_err());
}

#[test]
fn slice_channel_gradients() {
    check(
        "SliceChannel",
        &[
            (&[("num_outputs", "2")], &[&[2, 4, 3]]),
            (
                &[("num_outputs", "3"), ("squeeze_axis", "True")],
                &[&[2, 3, 2]],
            ),
            (&[("num_outputs", "3"), ("axis", "-1")], &[&[2, 2, 6]]),
            (&[("num_outputs", "2"), ("axis", "0")], &[&[4, 3]]),
        ],
    );
    check("split", &[(&[("num_outputs", "2")], &[&[1, 2]])]);
    assert_eq!(
        out_shapes(
            "SliceChannel",
            &[("num_outputs", "3"), ("squeeze_axis", "True")],
            &[&[2, 3, 4]]
        )
        .unwrap(),
        vec![vec![2, 4]; 3]
    );
    let e = out_shapes("SliceChannel", &[("num_outputs", "3")], &[&[2, 4]])
        .unwrap_err()
        .to_string();
    assert!(e.contains("node1") && e.contains("num_outputs"), "{e}");
    assert!(out_shapes(
        "SliceChannel",
        &[("num_outputs", "2"), ("squeeze_axis", "True")],
        &[&[2, 4]]
    )
    .is_err());
    let x = Symbol::variable("data");
    let s = Symbol::create(
        "SliceChannel",
        Some("sc"),
        &[("num_outputs", "3")],
        vec![(None, x)],
    )
    .unwrap();
    assert_eq!(
        s.list_outputs(),
        vec!["sc_output0", "sc_output1", "sc_output2"]
    );
}

#[test]
fn slice_axis_and_slice_gradients() {
    check(
        "slice_axis",
        &[
            (
                &[("axis", "1"), ("begin", "1"), ("end", "3")],
                &[&[2, 4, 2]],
            ),
            (
                &[("axis", "-1"), ("begin", "-3"), ("end", "None")],
                &[&[2, 5]],
            ),
            (&[("axis", "0"), ("begin", "0"), ("end", "1")], &[&[3, 2]]),
            (&[("axis", "0"), ("begin", "1"), ("end", "-1")], &[&[4]]),
        ],
    );
    assert_eq!(
        out_shapes(
            "slice_axis",
            &[("axis", "-1"), ("begin", "-3"), ("end", "None")],
            &[&[2, 5]]
        )
        .unwrap(),
        vec![vec![2, 3]]
    );
    // MXNet rejects an empty range and an end past the axis.
    assert!(out_shapes(
        "slice_axis",
        &[("axis", "0"), ("begin", "2"), ("end", "2")],
        &[&[4]]
    )
    .is_err());
    assert!(out_shapes(
        "slice_axis",
        &[("axis", "0"), ("begin", "0"), ("end", "5")],
        &[&[4]]
    )
    .is_err());
    check(
        "slice",
        &[
            (&[("begin", "(None, 1)"), ("end", "(None, 3)")], &[&[2, 4]]),
            (
                &[("begin", "(1,)"), ("end", "(None,)"), ("step", "(2,)")],
                &[&[5, 2]],
            ),
            (
                &[
                    ("begin", "(None, None)"),
                    ("end", "(None, None)"),
                    ("step", "(-1, -2)"),
                ],
                &[&[2, 5]],
            ),
            (
                &[
                    ("begin", "(0, -1, 1)"),
                    ("end", "(2, 0, None)"),
                    ("step", "(1, -1, 2)"),
                ],
                &[&[2, 3, 4]],
            ),
        ],
    );
    assert_eq!(
        out_shapes(
            "slice",
            &[("begin", "(None, 1)"), ("end", "(None, 3)")],
            &[&[2, 4, 5]]
        )
        .unwrap(),
        vec![vec![2, 2, 5]]
    );
    // Forward values against Python's x[1::2, ::-2] on arange(12).reshape(3, 4).
    let x = NDArray::from_vec(&[3, 4], (0..12).map(|v| v as f32).collect()).unwrap();
    let y = forward(
        "slice",
        &[
            ("begin", "(1, None)"),
            ("end", "(None, None)"),
            ("step", "(2, -2)"),
        ],
        vec![x],
    )
    .unwrap();
    assert_eq!(y[0].shape(), &[1, 2]);
    assert_eq!(y[0].to_f64_vec(), vec![7.0, 5.0]);
    let bad = |b: &str, e: &str, s: &str| {
        lookup("slice")
            .unwrap()
            .instantiate("s", &attr_map(&[("begin", b), ("end", e), ("step", s)]))
            .is_err()
    };
    assert!(bad("(0, 1)", "(1,)", "()"));
    assert!(bad("(0,)", "(1,)", "(0,)"));
    assert!(bad("(0,)", "(1,)", "(1, 1)"));
    assert!(bad("(x,)", "(1,)", "()"));
}

/// Indices as float32 holding integers in [0, input_dim), with repeats.
fn indices(shape: &[usize], input_dim: usize, seed: u64) -> NDArray {
    let r = random_array(shape, 0.0, input_dim as f32, seed);
    let v: Vec<f32> = r.to_f64_vec().iter().map(|x| x.floor() as f32).collect();
    NDArray::from_vec(shape, v).unwrap()
}

#[test]
fn embedding_gradients() {
    let rows: [((usize, usize), &[usize]); 3] =
        [((5, 3), &[4]), ((4, 2), &[3, 4]), ((3, 4), &[2, 2, 2])];
    for (k, ((input_dim, output_dim), data_shape)) in rows.into_iter().enumerate() {
        let (i, o) = (input_dim.to_string(), output_dim.to_string());
        let mut gc = GradCheck::new(
            "Embedding",
            &[("input_dim", &i), ("output_dim", &o)],
            vec![
                indices(data_shape, input_dim, k as u64 + 3),
                arr(&[input_dim, output_dim], k as u64 + 7),
            ],
        );
        gc.skip = vec![0];
        gc.run()
            .unwrap_or_else(|e| panic!("Embedding {input_dim}x{output_dim} {data_shape:?}: {e}"));
    }
    // Repeated indices accumulate; the indices get no gradient.
    let inst = lookup("Embedding")
        .unwrap()
        .instantiate("emb", &attr_map(&[("input_dim", "3"), ("output_dim", "2")]))
        .unwrap();
    let ctx = OpCtx {
        is_train: true,
        node: "emb",
        need_grad: &[],
    };
    let data = NDArray::from_vec(&[4], vec![2.0f32, 0.0, 2.0, 2.0]).unwrap();
    let w = NDArray::from_vec(&[3, 2], vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0]).unwrap();
    let y = inst
        .forward(&ctx, &[data.clone(), w.clone()], &mut [])
        .unwrap();
    assert_eq!(
        y[0].to_f64_vec(),
        vec![5.0, 6.0, 1.0, 2.0, 5.0, 6.0, 5.0, 6.0]
    );
    let g = NDArray::from_vec(&[4, 2], vec![1.0f32, 1.0, 2.0, 2.0, 3.0, 3.0, 4.0, 4.0]).unwrap();
    let grads = inst
        .backward(&ctx, &[g], &[data, w.clone()], &y, &mut [])
        .unwrap();
    assert!(grads[0].is_none());
    assert_eq!(
        grads[1].as_ref().unwrap().to_f64_vec(),
        vec![2.0, 2.0, 0.0, 0.0, 8.0, 8.0]
    );
    // An index outside [0, input_dim) is an error naming node, index and input_dim (MXNet
    // clips silently).
    for bad in [3.0f32, -1.0, f32::NAN] {
        let data = NDArray::from_vec(&[2], vec![0.0f32, bad]).unwrap();
        let e = inst
            .forward(&ctx, &[data, w.clone()], &mut [])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("\"emb\"")
                && e.contains("input_dim=3")
                && e.contains(&format!("index {bad}")),
            "{e}"
        );
    }
}

#[test]
fn symbol_shape_inference() {
    // Embedding fills in its weight from the parameters.
    let data = Symbol::variable("data");
    let emb = Symbol::create(
        "Embedding",
        Some("embed"),
        &[("input_dim", "10"), ("output_dim", "4")],
        vec![(None, data)],
    )
    .unwrap();
    assert_eq!(emb.list_arguments(), vec!["data", "embed_weight"]);
    let known: HashMap<String, Vec<usize>> =
        [("data".to_string(), vec![3, 5])].into_iter().collect();
    let (args, outs, _) = emb.infer_shape(&known).unwrap();
    assert_eq!(args, vec![vec![3, 5], vec![10, 4]]);
    assert_eq!(outs, vec![vec![3, 5, 4]]);
    // stack completes an unknown input from a known one; Concat cannot (nor can MXNet: the
    // unknown input's size along `dim` stays open).
    let (a, b) = (Symbol::variable("a"), Symbol::variable("b"));
    let st = Symbol::create(
        "stack",
        Some("st"),
        &[("axis", "1")],
        vec![(None, a.clone()), (None, b.clone())],
    )
    .unwrap();
    let known: HashMap<String, Vec<usize>> = [("a".to_string(), vec![2, 3])].into_iter().collect();
    let (args, outs, _) = st.infer_shape(&known).unwrap();
    assert_eq!(args, vec![vec![2, 3], vec![2, 3]]);
    assert_eq!(outs, vec![vec![2, 2, 3]]);
    let cc = Symbol::create("Concat", Some("cc"), &[], vec![(None, a), (None, b)]).unwrap();
    assert_eq!(cc.list_arguments(), vec!["a", "b"]);
    assert!(cc.infer_shape(&known).is_err());
}

#[test]
fn executor_split_with_one_output_used() {
    // Only output 1 of the split is used: the executor passes zeros for output 0.
    let x = Symbol::variable("x");
    let sc = Symbol::create(
        "SliceChannel",
        Some("sc"),
        &[("num_outputs", "2"), ("axis", "0")],
        vec![(None, x)],
    )
    .unwrap();
    let y = sc.output(1).unwrap();
    let xv = NDArray::from_vec(&[2, 2], vec![1.0f32, 2.0, 3.0, 4.0]).unwrap();
    let mut exe = Executor::bind(
        &y,
        Context::cpu(0),
        vec![xv],
        vec![None],
        vec![GradReq::Write],
        vec![],
    )
    .unwrap();
    exe.forward(true).unwrap();
    assert_eq!(exe.outputs()[0].to_f64_vec(), vec![3.0, 4.0]);
    exe.backward(&[NDArray::from_vec(&[1, 2], vec![5.0f32, 6.0]).unwrap()])
        .unwrap();
    assert_eq!(
        exe.grad_arrays[0].as_ref().unwrap().to_f64_vec(),
        vec![0.0, 0.0, 5.0, 6.0]
    );
}

#[test]
fn shape_ops_keep_integer_dtypes() {
    let x = NDArray::from_vec(&[2, 3], (0..6).collect::<Vec<i32>>()).unwrap();
    let c = forward(
        "Concat",
        &[("num_args", "2"), ("dim", "0")],
        vec![x.clone(), x.clone()],
    )
    .unwrap();
    assert_eq!(c[0].dtype(), mxfn_core::DType::Int32);
    assert_eq!(c[0].shape(), &[4, 3]);
    let t = forward("transpose", &[], vec![x.clone()]).unwrap();
    assert_eq!(t[0].to_f64_vec(), vec![0.0, 3.0, 1.0, 4.0, 2.0, 5.0]);
    let s = forward(
        "slice_axis",
        &[("axis", "1"), ("begin", "1"), ("end", "None")],
        vec![x.clone()],
    )
    .unwrap();
    assert_eq!(s[0].to_f64_vec(), vec![1.0, 2.0, 4.0, 5.0]);
    let r = forward("Reshape", &[("shape", "(-1,)")], vec![x]).unwrap();
    assert_eq!(r[0].shape(), &[6]);
}

#[test]
fn reverse_gradients_and_values() {
    check(
        "reverse",
        &[
            (&[("axis", "(0,)")], &[&[3, 4]]),
            (&[("axis", "(1, -1)")], &[&[2, 3, 4]]),
            (&[("axis", "(1,)")], &[&[2, 0]]),
        ],
    );
    let x = NDArray::from_f32(&[2, 2], vec![1.0, 2.0, 3.0, 4.0]).unwrap();
    let r = forward("flip", &[("axis", "1")], vec![x.clone()]).unwrap();
    assert_eq!(r[0].to_f64_vec(), vec![2.0, 1.0, 4.0, 3.0]);
    let r = forward("reverse", &[("axis", "(0, 1)")], vec![x]).unwrap();
    assert_eq!(r[0].to_f64_vec(), vec![4.0, 3.0, 2.0, 1.0]);
    assert!(out_shapes("reverse", &[("axis", "(2,)")], &[&[2, 3]]).is_err());
}

#[test]
fn swap_axis_and_broadcast_like_gradients() {
    check(
        "SwapAxis",
        &[
            (&[("dim1", "0"), ("dim2", "2")], &[&[2, 3, 4]]),
            (&[("dim1", "-1"), ("dim2", "1")], &[&[2, 3, 2, 3]]),
            (&[], &[&[3, 2]]),
        ],
    );
    assert_eq!(
        out_shapes("SwapAxis", &[("dim1", "0"), ("dim2", "2")], &[&[2, 3, 4]]).unwrap(),
        vec![vec![4, 3, 2]]
    );
    assert!(out_shapes("SwapAxis", &[("dim1", "3")], &[&[2, 3]]).is_err());
    // rhs only gives a shape: its gradient is zero, which the finite differences confirm.
    check(
        "broadcast_like",
        &[
            (&[], &[&[2, 1, 4], &[2, 3, 4]]),
            (&[], &[&[1, 1], &[3, 2]]),
            (
                &[("lhs_axes", "(0, 2)"), ("rhs_axes", "(1, 0)")],
                &[&[1, 3, 1], &[5, 2]],
            ),
        ],
    );
    assert_eq!(
        out_shapes(
            "broadcast_like",
            &[("lhs_axes", "(0,)"), ("rhs_axes", "(1,)")],
            &[&[1, 3], &[2, 4]]
        )
        .unwrap(),
        vec![vec![4, 3]]
    );
    assert!(out_shapes("broadcast_like", &[], &[&[2, 3], &[2, 4]]).is_err());
    assert!(out_shapes("broadcast_like", &[], &[&[3], &[2, 3]]).is_err());
    assert!(out_shapes(
        "broadcast_like",
        &[("lhs_axes", "(0,)")],
        &[&[1, 3], &[2, 4]]
    )
    .is_err());
}

#[test]
fn take_and_pick_gradients() {
    let idx = |v: &[f32], shape: &[usize]| NDArray::from_vec(shape, v.to_vec()).unwrap();
    // Repeated and out-of-range (clipped / wrapped) indices; the indices get no gradient.
    let rows: [(&[(&str, &str)], &[usize], NDArray); 3] = [
        (&[], &[4, 3], idx(&[3.0, 0.0, 0.0, 9.0], &[4])),
        (
            &[("axis", "1")],
            &[2, 3, 2],
            idx(&[0.0, 2.0, -1.0, 1.0], &[2, 2]),
        ),
        (
            &[("axis", "-1"), ("mode", "wrap")],
            &[2, 3],
            idx(&[4.0, -1.0], &[2]),
        ),
    ];
    for (k, (attrs, shape, indices)) in rows.into_iter().enumerate() {
        let mut gc = GradCheck::new("take", attrs, vec![arr(shape, k as u64 + 1), indices]);
        gc.skip = vec![1];
        gc.run().unwrap_or_else(|e| panic!("take {attrs:?}: {e}"));
    }
    let rows: [(&[(&str, &str)], &[usize], NDArray); 3] = [
        (&[], &[3, 4], idx(&[0.0, 3.0, 1.0], &[3])),
        (
            &[("axis", "0"), ("keepdims", "True")],
            &[3, 2, 2],
            idx(&[2.0, 0.0, 1.0, 7.0], &[1, 2, 2]),
        ),
        (
            &[("axis", "1"), ("mode", "wrap")],
            &[2, 3],
            idx(&[-1.0, 4.0], &[2]),
        ),
    ];
    for (k, (attrs, shape, index)) in rows.into_iter().enumerate() {
        let mut gc = GradCheck::new("pick", attrs, vec![arr(shape, k as u64 + 5), index]);
        gc.skip = vec![1];
        gc.run().unwrap_or_else(|e| panic!("pick {attrs:?}: {e}"));
    }
    assert_eq!(
        out_shapes("take", &[("axis", "1")], &[&[2, 3, 4], &[5, 6]]).unwrap(),
        vec![vec![2, 5, 6, 4]]
    );
    assert_eq!(
        out_shapes("pick", &[("axis", "0")], &[&[3, 2], &[2]]).unwrap(),
        vec![vec![2]]
    );
    assert!(out_shapes("pick", &[("axis", "0")], &[&[3, 2], &[3]]).is_err());
    // mode "raise": an index outside the axis is an error naming it
    let e = forward(
        "take",
        &[("mode", "raise")],
        vec![arr(&[2, 2], 1), idx(&[2.0], &[1])],
    )
    .unwrap_err();
    assert!(e.to_string().contains("mode=\"raise\""), "{e}");
}

#[test]
fn sequence_op_gradients() {
    let lens = || NDArray::from_vec(&[3], vec![2.0f32, 4.0, 1.0]).unwrap();
    for op in ["SequenceMask", "SequenceLast", "SequenceReverse"] {
        let mut gc = GradCheck::new(
            op,
            &[("use_sequence_length", "True")],
            vec![arr(&[4, 3, 2], 1), lens()],
        );
        gc.skip = vec![1];
        gc.run().unwrap_or_else(|e| panic!("{op}: {e}"));
        check(op, &[(&[], &[&[3, 2]])]);
    }
    for op in ["SequenceMask", "SequenceLast"] {
        let mut gc = GradCheck::new(
            op,
            &[("use_sequence_length", "True"), ("axis", "1")],
            vec![arr(&[3, 4, 2], 2), lens()],
        );
        gc.skip = vec![1];
        gc.run().unwrap_or_else(|e| panic!("{op} axis 1: {e}"));
    }
    assert_eq!(
        out_shapes("SequenceLast", &[("axis", "1")], &[&[3, 4, 2]]).unwrap(),
        vec![vec![3, 2]]
    );
    assert!(lookup("SequenceReverse")
        .unwrap()
        .instantiate("r", &attr_map(&[("axis", "1")]))
        .is_err());
    // a length past the time axis is an error naming sequence_length
    let e = forward(
        "SequenceLast",
        &[("use_sequence_length", "True")],
        vec![
            arr(&[2, 1], 1),
            NDArray::from_vec(&[1], vec![3.0f32]).unwrap(),
        ],
    )
    .unwrap_err();
    assert!(e.to_string().contains("sequence_length"), "{e}");
}
