//! Finite-difference gradient checks (and forward spot checks) for the elementwise-binary,
//! scalar, n-ary, reduction, index and matrix-product operators: ops/broadcast.rs,
//! ops/reduce.rs and ops/linalg.rs.

// Test helpers outside #[test] functions fail loudly on bad fixtures, like the tests do.
#![allow(clippy::unwrap_used)]

use mxfn_core::executor::{Executor, GradReq};
use mxfn_core::ops::testing::{random_array, GradCheck};
use mxfn_core::ops::{lookup, OpCtx};
use mxfn_core::{Context, NDArray, Symbol};
use std::collections::{BTreeMap, HashMap};

fn arr(shape: &[usize], seed: u64) -> NDArray {
    random_array(shape, -1.0, 1.0, seed)
}

fn from(shape: &[usize], v: Vec<f32>) -> NDArray {
    NDArray::from_vec(shape, v).unwrap()
}

/// Values in [lo, hi).
fn range(shape: &[usize], lo: f32, hi: f32, seed: u64) -> NDArray {
    random_array(shape, lo, hi, seed)
}

/// Values in [-1, -0.1] ∪ [0.1, 1]: away from zero.
fn away_from_zero(shape: &[usize], seed: u64) -> NDArray {
    let v = arr(shape, seed)
        .to_f64_vec()
        .iter()
        .map(|&x| (x * 0.9 + 0.1f64.copysign(x)) as f32)
        .collect();
    from(shape, v)
}

/// Distinct values at least 0.05 apart (a shuffled ladder), so a finite-difference step never
/// changes which element is the maximum or minimum.
fn distinct(shape: &[usize], seed: u64) -> NDArray {
    let n: usize = shape.iter().product();
    let keys = arr(&[n], seed).to_f64_vec();
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|&a, &b| keys[a].total_cmp(&keys[b]));
    let mut v = vec![0.0f32; n];
    for (rank, &i) in order.iter().enumerate() {
        v[i] = rank as f32 * 0.05 - 1.0;
    }
    from(shape, v)
}

/// `b` = `a` shifted by ±[0.1, 0.5]: the two never tie within a finite-difference step.
fn apart(a: &NDArray, seed: u64) -> NDArray {
    let shift = away_from_zero(a.shape(), seed).to_f64_vec();
    let v = a
        .to_f64_vec()
        .iter()
        .zip(shift)
        .map(|(x, s)| (x + s * 0.5) as f32)
        .collect();
    from(a.shape(), v)
}

fn check(op: &'static str, attrs: &[(&'static str, &str)], inputs: Vec<NDArray>) {
    GradCheck::new(op, attrs, inputs)
        .run()
        .unwrap_or_else(|e| panic!("{op} {attrs:?}: {e}"));
}

/// Forward of one op on `inputs`; the first output.
fn run(op: &str, attrs: &[(&str, &str)], inputs: &[NDArray]) -> NDArray {
    let attrs: BTreeMap<String, String> = attrs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let inst = lookup(op).unwrap().instantiate("t", &attrs).unwrap();
    let ctx = OpCtx {
        is_train: true,
        node: "t",
        need_grad: &[],
    };
    inst.forward(&ctx, inputs, &mut []).unwrap().remove(0)
}

fn infer(op: &str, attrs: &[(&str, &str)], shapes: &[Option<Vec<usize>>]) -> String {
    let attrs: BTreeMap<String, String> = attrs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let inst = lookup(op).unwrap().instantiate("node1", &attrs).unwrap();
    let mut s = shapes.to_vec();
    match inst.infer_shape("node1", &mut s, &mut []) {
        Ok(out) => format!("ok {out:?} {s:?}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn elementwise_binary_same_shape() {
    for (k, shape) in [vec![3, 4], vec![2, 3, 2]].iter().enumerate() {
        let s = k as u64 * 10;
        let a = arr(shape, s + 1);
        for op in [
            "elemwise_add",
            "elemwise_sub",
            "elemwise_mul",
            "_plus",
            "_minus",
            "_mul",
        ] {
            check(op, &[], vec![a.clone(), arr(shape, s + 2)]);
        }
        for op in ["elemwise_div", "_div"] {
            check(op, &[], vec![a.clone(), away_from_zero(shape, s + 3)]);
        }
        for op in ["_maximum", "_minimum"] {
            check(op, &[], vec![a.clone(), apart(&a, s + 4)]);
        }
        check(
            "_power",
            &[],
            vec![range(shape, 0.5, 2.0, s + 5), arr(shape, s + 6)],
        );
    }
}

#[test]
fn broadcast_binary() {
    let pairs: [(Vec<usize>, Vec<usize>); 5] = [
        (vec![4, 1, 5], vec![1, 3, 5]),
        (vec![2, 3], vec![1, 3]),
        (vec![2, 3], vec![3]),
        (vec![3, 1], vec![2, 3, 4]),
        (vec![3, 4], vec![3, 4]),
    ];
    for (k, (sa, sb)) in pairs.iter().enumerate() {
        let s = k as u64 * 10;
        let a = arr(sa, s + 1);
        for op in [
            "broadcast_add",
            "broadcast_plus",
            "broadcast_sub",
            "broadcast_minus",
            "broadcast_mul",
        ] {
            check(op, &[], vec![a.clone(), arr(sb, s + 2)]);
        }
        check(
            "broadcast_div",
            &[],
            vec![a.clone(), away_from_zero(sb, s + 3)],
        );
        // Distinct ladders a and b never tie: b is offset by a quarter step.
        let b_vals = distinct(sb, s + 4)
            .to_f64_vec()
            .iter()
            .map(|v| (v + 0.0125) as f32)
            .collect();
        let b = from(sb, b_vals);
        for op in ["broadcast_maximum", "broadcast_minimum"] {
            check(op, &[], vec![distinct(sa, s + 5), b.clone()]);
        }
        check(
            "broadcast_power",
            &[],
            vec![range(sa, 0.5, 2.0, s + 6), arr(sb, s + 7)],
        );
    }
}

#[test]
fn broadcast_forward_values_and_shape_errors() {
    let a = from(&[2, 1], vec![1.0, 2.0]);
    let b = from(&[3], vec![10.0, 20.0, 30.0]);
    let c = run("broadcast_add", &[], &[a.clone(), b.clone()]);
    assert_eq!(c.shape(), &[2, 3]);
    assert_eq!(c.to_f64_vec(), vec![11.0, 21.0, 31.0, 12.0, 22.0, 32.0]);
    let m = run(
        "broadcast_maximum",
        &[],
        &[a, from(&[3], vec![0.0, 1.5, 3.0])],
    );
    assert_eq!(m.to_f64_vec(), vec![1.0, 1.5, 3.0, 2.0, 2.0, 3.0]);
    let e = infer("broadcast_mul", &[], &[Some(vec![2, 3]), Some(vec![4, 3])]);
    assert!(
        e.contains("broadcast_mul") && e.contains("node1") && e.contains("rhs"),
        "{e}"
    );
    // Same-shape ops fill an unknown operand from the known one, and name a mismatch.
    let ok = infer("elemwise_add", &[], &[None, Some(vec![2, 5])]);
    assert_eq!(ok, "ok [[2, 5]] [Some([2, 5]), Some([2, 5])]");
    let e = infer("elemwise_mul", &[], &[Some(vec![2, 5]), Some(vec![5, 2])]);
    assert!(e.contains("node1") && e.contains("rhs"), "{e}");
    let e = infer("broadcast_add", &[], &[Some(vec![2, 5]), None]);
    assert!(e.contains("rhs"), "{e}");
}

#[test]
fn scalar_ops() {
    let x = away_from_zero(&[3, 4], 21);
    for (op, s) in [
        ("_plus_scalar", "2"),
        ("_minus_scalar", "-1.5"),
        ("_rminus_scalar", "2"),
        ("_mul_scalar", "3"),
        ("_mul_scalar", "-1.0"),
        ("_div_scalar", "4"),
        ("_rdiv_scalar", "4"),
        ("_rpower_scalar", "2"),
        ("_PlusScalar", "0.5"),
    ] {
        check(op, &[("scalar", s)], vec![x.clone()]);
    }
    let pos = range(&[2, 2, 3], 0.5, 2.0, 22);
    for s in ["2", "0.5", "-1", "3"] {
        check("_power_scalar", &[("scalar", s)], vec![pos.clone()]);
    }
    // Away from the scalar, so the finite difference never crosses it.
    let near = apart(&from(&[2, 4], vec![0.3; 8]), 23);
    for op in ["_maximum_scalar", "_minimum_scalar"] {
        check(op, &[("scalar", "0.3")], vec![near.clone()]);
    }
    check(
        "_plus_scalar",
        &[("scalar", "2"), ("is_int", "True")],
        vec![x.clone()],
    );
    let y = run(
        "_rminus_scalar",
        &[("scalar", "2")],
        &[from(&[2], vec![1.0, 5.0])],
    );
    assert_eq!(y.to_f64_vec(), vec![1.0, -3.0]);
    let y = run(
        "_mul_scalar",
        &[("scalar", "-1.0")],
        &[from(&[2], vec![1.0, -5.0])],
    );
    assert_eq!(y.to_f64_vec(), vec![-1.0, 5.0]);
}

#[test]
fn add_n() {
    for n in [1usize, 2, 3, 5] {
        let inputs: Vec<NDArray> = (0..n).map(|i| arr(&[2, 3], 30 + i as u64)).collect();
        let count = n.to_string();
        check("add_n", &[("num_args", count.as_str())], inputs.clone());
        check("ElementWiseSum", &[("num_args", count.as_str())], inputs);
    }
    let s = run(
        "add_n",
        &[("num_args", "3")],
        &[
            from(&[2], vec![1.0, 2.0]),
            from(&[2], vec![10.0, 20.0]),
            from(&[2], vec![100.0, 200.0]),
        ],
    );
    assert_eq!(s.to_f64_vec(), vec![111.0, 222.0]);
}

#[test]
fn clip() {
    for (lo, hi, seed) in [("-0.5", "0.5", 40), ("0.0", "0.3", 41), ("-2", "2", 42)] {
        let (l, h): (f64, f64) = (lo.parse().unwrap(), hi.parse().unwrap());
        // Nudge values off the bounds so a finite-difference step never crosses one.
        let v = arr(&[4, 5], seed)
            .to_f64_vec()
            .iter()
            .map(|&x| {
                let mut x = x;
                for b in [l, h] {
                    if (x - b).abs() < 0.05 {
                        x = b + 0.05f64.copysign(x - b);
                    }
                }
                x as f32
            })
            .collect();
        check(
            "clip",
            &[("a_min", lo), ("a_max", hi)],
            vec![from(&[4, 5], v)],
        );
    }
    let y = run(
        "clip",
        &[("a_min", "-1"), ("a_max", "1")],
        &[from(&[3], vec![-3.0, 0.5, 3.0])],
    );
    assert_eq!(y.to_f64_vec(), vec![-1.0, 0.5, 1.0]);
}

#[test]
fn where_op() {
    let cond = from(
        &[3, 4],
        (0..12).map(|i| (i % 3 == 0) as u8 as f32).collect(),
    );
    let mut g = GradCheck::new("where", &[], vec![cond, arr(&[3, 4], 51), arr(&[3, 4], 52)]);
    g.skip = vec![0];
    g.run().unwrap();
    // A (N,) condition selects whole rows.
    let rows = from(&[3], vec![1.0, 0.0, 2.0]);
    let mut g = GradCheck::new(
        "where",
        &[],
        vec![rows.clone(), arr(&[3, 2, 2], 53), arr(&[3, 2, 2], 54)],
    );
    g.skip = vec![0];
    g.run().unwrap();
    let out = run(
        "where",
        &[],
        &[
            rows,
            from(&[3, 2], vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]),
            from(&[3, 2], vec![-1.0, -2.0, -3.0, -4.0, -5.0, -6.0]),
        ],
    );
    assert_eq!(out.to_f64_vec(), vec![1.0, 2.0, -3.0, -4.0, 5.0, 6.0]);
    let e = infer("where", &[], &[Some(vec![2]), Some(vec![3, 2]), None]);
    assert!(e.contains("condition") && e.contains("node1"), "{e}");
    let ok = infer("where", &[], &[None, None, Some(vec![3, 2])]);
    assert_eq!(ok, "ok [[3, 2]] [Some([3, 2]), Some([3, 2]), Some([3, 2])]");
}

#[test]
fn zeros_ones_like_and_block_grad() {
    let x = arr(&[3, 4], 60);
    check("zeros_like", &[], vec![x.clone()]);
    check("ones_like", &[], vec![x.clone()]);
    assert_eq!(
        run("zeros_like", &[], std::slice::from_ref(&x)).to_f64_vec(),
        vec![0.0; 12]
    );
    assert_eq!(
        run("ones_like", &[], std::slice::from_ref(&x)).to_f64_vec(),
        vec![1.0; 12]
    );
    // BlockGrad passes values through and stops gradients: against a constant objective the
    // finite difference is zero, as the backward must be.
    for op in ["BlockGrad", "stop_gradient"] {
        let mut g = GradCheck::new(op, &[], vec![x.clone()]);
        g.objective = Some(Box::new(|_, _| 0.0));
        g.run().unwrap();
        assert_eq!(
            run(op, &[], std::slice::from_ref(&x)).to_f64_vec(),
            x.to_f64_vec()
        );
    }
}

#[test]
fn make_loss() {
    // (attrs, shape, d loss / d x): grad_scale, divided by the rows for "batch".
    for (attrs, shape, factor) in [
        (vec![], vec![3, 4], 1.0),
        (vec![("normalization", "batch")], vec![4, 3], 0.25),
        (vec![("grad_scale", "0.5")], vec![2, 5], 0.5),
        (
            vec![("grad_scale", "2.0"), ("normalization", "batch")],
            vec![5, 2],
            0.4,
        ),
        // FlatTo2D rows: prod(shape[:-1]) = 6.
        (vec![("normalization", "batch")], vec![2, 3, 4], 1.0 / 6.0),
    ] {
        let mut g = GradCheck::new("MakeLoss", &attrs, vec![arr(&shape, 70)]);
        g.objective = Some(Box::new(move |outs, _| {
            outs[0].to_f64_vec().iter().sum::<f64>() * factor
        }));
        g.run().unwrap_or_else(|e| panic!("{attrs:?}: {e}"));
    }
    // "valid": divided by the count of elements above valid_thresh (at least 1).
    let x = away_from_zero(&[3, 4], 71);
    let valid = x.to_f64_vec().iter().filter(|&&v| v > 0.0).count().max(1) as f64;
    let mut g = GradCheck::new(
        "MakeLoss",
        &[("normalization", "valid"), ("grad_scale", "3")],
        vec![x],
    );
    g.objective = Some(Box::new(move |outs, _| {
        outs[0].to_f64_vec().iter().sum::<f64>() * 3.0 / valid
    }));
    g.run().unwrap();
}

#[test]
fn reductions() {
    let shape = [3, 4, 5];
    let axes_cases: Vec<Vec<(&'static str, &'static str)>> = vec![
        vec![],
        vec![("axis", "1")],
        vec![("axis", "(0, 2)")],
        vec![("axis", "-1")],
        vec![("axis", "1"), ("keepdims", "True")],
        vec![("axis", "1"), ("exclude", "True")],
        vec![
            ("axis", "(0, 1)"),
            ("exclude", "True"),
            ("keepdims", "True"),
        ],
        vec![("keepdims", "True")],
        vec![("axis", "()")],
    ];
    for attrs in &axes_cases {
        for op in ["sum", "mean", "sum_axis"] {
            check(op, attrs, vec![arr(&shape, 80)]);
        }
        for op in ["max", "min", "max_axis", "min_axis"] {
            check(op, attrs, vec![distinct(&shape, 81)]);
        }
        check("prod", attrs, vec![range(&[2, 3, 2], 0.5, 1.5, 82)]);
        let mut v = arr(&[3, 4, 5], 83).to_f64_vec();
        v[7] = f64::NAN;
        check(
            "nansum",
            attrs,
            vec![from(&shape, v.iter().map(|&x| x as f32).collect())],
        );
    }
}

#[test]
fn reduction_shapes_values_and_errors() {
    let x = from(&[2, 3], vec![1.0, 5.0, 3.0, 4.0, 2.0, 6.0]);
    let s = run("sum", &[], std::slice::from_ref(&x));
    assert_eq!((s.shape().to_vec(), s.to_f64_vec()), (vec![1], vec![21.0]));
    let k = run("sum", &[("keepdims", "True")], std::slice::from_ref(&x));
    assert_eq!(k.shape(), &[1, 1]);
    let m = run("max", &[("axis", "1")], std::slice::from_ref(&x));
    assert_eq!(m.to_f64_vec(), vec![5.0, 6.0]);
    let e = run(
        "mean",
        &[("axis", "1"), ("exclude", "True")],
        std::slice::from_ref(&x),
    );
    assert_eq!(e.to_f64_vec(), vec![2.5, 3.5, 4.5]);
    let n = run("nansum", &[], &[from(&[3], vec![1.0, f32::NAN, 2.0])]);
    assert_eq!(n.to_f64_vec(), vec![3.0]);
    // Ties: every position equal to the maximum receives the whole gradient.
    let t = from(&[4], vec![2.0, 1.0, 2.0, 0.0]);
    let inst = lookup("max")
        .unwrap()
        .instantiate("t", &BTreeMap::new())
        .unwrap();
    let ctx = OpCtx {
        is_train: true,
        node: "t",
        need_grad: &[],
    };
    let y = inst
        .forward(&ctx, std::slice::from_ref(&t), &mut [])
        .unwrap();
    let g = inst
        .backward(&ctx, &[from(&[1], vec![3.0])], &[t], &y, &mut [])
        .unwrap();
    assert_eq!(
        g[0].as_ref().unwrap().to_f64_vec(),
        vec![3.0, 0.0, 3.0, 0.0]
    );
    let e = infer("sum", &[("axis", "2")], &[Some(vec![2, 3])]);
    assert!(e.contains("axis") && e.contains("node1"), "{e}");
    let e = infer("sum", &[("axis", "(1, -1)")], &[Some(vec![2, 3])]);
    assert!(e.contains("duplicates"), "{e}");
    let e = infer("sum", &[], &[None]);
    assert!(e.contains("data"), "{e}");
}

#[test]
fn index_ops_have_no_gradient() {
    for (op, attrs, shape) in [
        ("argmax", vec![("axis", "1")], vec![3, 5]),
        (
            "argmax",
            vec![("axis", "1"), ("keepdims", "True")],
            vec![2, 4, 3],
        ),
        ("argmax", vec![], vec![2, 3]),
        ("argmax", vec![("keepdims", "True")], vec![2, 3]),
        ("argmin", vec![("axis", "0")], vec![3, 5]),
        (
            "argmin",
            vec![("axis", "-1"), ("keepdims", "True")],
            vec![2, 4, 3],
        ),
    ] {
        let mut g = GradCheck::new(op, &attrs, vec![distinct(&shape, 90)]);
        g.skip = vec![0];
        g.run().unwrap_or_else(|e| panic!("{op} {attrs:?}: {e}"));
    }
    let x = from(&[2, 3], vec![1.0, 5.0, 5.0, 9.0, 0.0, 2.0]);
    assert_eq!(
        run("argmax", &[("axis", "1")], std::slice::from_ref(&x)).to_f64_vec(),
        vec![1.0, 0.0]
    );
    assert_eq!(
        run("argmin", &[("axis", "1")], std::slice::from_ref(&x)).to_f64_vec(),
        vec![0.0, 1.0]
    );
    let flat = run("argmax", &[], std::slice::from_ref(&x));
    assert_eq!(
        (flat.shape().to_vec(), flat.to_f64_vec()),
        (vec![1], vec![3.0])
    );
    let kd = run("argmin", &[("keepdims", "True")], &[x]);
    assert_eq!(
        (kd.shape().to_vec(), kd.to_f64_vec()),
        (vec![1, 1], vec![4.0])
    );
    let v = run(
        "argmax",
        &[("axis", "0")],
        &[from(&[3], vec![0.0, 2.0, 1.0])],
    );
    assert_eq!(v.shape(), &[1]);

    for (attrs, shape) in [
        (vec![("depth", "5")], vec![4]),
        (
            vec![("depth", "4"), ("on_value", "2.0"), ("off_value", "-1.0")],
            vec![2, 3],
        ),
    ] {
        let ind = from(
            &shape,
            (0..shape.iter().product::<usize>())
                .map(|i| (i % 4) as f32)
                .collect(),
        );
        let mut g = GradCheck::new("one_hot", &attrs, vec![ind]);
        g.skip = vec![0];
        g.run().unwrap();
    }
    let oh = run(
        "one_hot",
        &[("depth", "3"), ("on_value", "2"), ("off_value", "-1")],
        &[from(&[4], vec![0.0, 2.0, 5.0, -1.0])],
    );
    assert_eq!(oh.shape(), &[4, 3]);
    assert_eq!(
        oh.to_f64_vec(),
        vec![2.0, -1.0, -1.0, -1.0, -1.0, 2.0, -1.0, -1.0, -1.0, -1.0, -1.0, -1.0]
    );
    let oh64 = run(
        "one_hot",
        &[("depth", "2"), ("dtype", "float64")],
        &[from(&[1], vec![1.0])],
    );
    assert_eq!(oh64.dtype(), mxfn_core::DType::Float64);
}

#[test]
fn dot() {
    for (attrs, sa, sb) in [
        (vec![], vec![3, 4], vec![4, 5]),
        (vec![("transpose_a", "True")], vec![4, 3], vec![4, 5]),
        (vec![("transpose_b", "True")], vec![3, 4], vec![5, 4]),
        (
            vec![("transpose_a", "True"), ("transpose_b", "True")],
            vec![6, 2],
            vec![3, 6],
        ),
        (vec![], vec![2, 3, 4], vec![4, 2]),
        (vec![], vec![3, 4], vec![4, 2, 2]),
        (vec![("transpose_a", "True")], vec![4, 2, 3], vec![4, 5]),
        (vec![("transpose_b", "True")], vec![3, 4], vec![2, 3, 4]),
        (vec![], vec![4], vec![4]),
        (vec![], vec![4], vec![4, 3]),
        (vec![], vec![3, 4], vec![4]),
    ] {
        check("dot", &attrs, vec![arr(&sa, 100), arr(&sb, 101)]);
    }
    let v = run(
        "dot",
        &[],
        &[
            from(&[3], vec![1.0, 2.0, 3.0]),
            from(&[3], vec![4.0, 5.0, 6.0]),
        ],
    );
    assert_eq!((v.shape().to_vec(), v.to_f64_vec()), (vec![1], vec![32.0]));
    let e = infer("dot", &[], &[Some(vec![3, 4]), Some(vec![5, 2])]);
    assert!(e.contains("node1") && e.contains("rhs"), "{e}");
    let e = infer(
        "dot",
        &[("transpose_a", "True")],
        &[Some(vec![3]), Some(vec![3])],
    );
    assert!(e.contains("transpose"), "{e}");
}

#[test]
fn batch_dot() {
    for (attrs, sa, sb) in [
        (vec![], vec![2, 3, 4], vec![2, 4, 5]),
        (vec![("transpose_b", "True")], vec![2, 3, 4], vec![2, 5, 4]),
        (vec![("transpose_a", "True")], vec![3, 4, 2], vec![3, 4, 3]),
        (
            vec![("transpose_a", "True"), ("transpose_b", "True")],
            vec![2, 4, 3],
            vec![2, 2, 4],
        ),
    ] {
        check("batch_dot", &attrs, vec![arr(&sa, 110), arr(&sb, 111)]);
    }
    // Larger than the serial threshold: the parallel batch loop agrees with per-batch dot.
    let (b, m, k, n) = (64, 24, 16, 32);
    let x = arr(&[b, m, k], 112);
    let y = arr(&[b, k, n], 113);
    let z = run("batch_dot", &[], &[x.clone(), y.clone()]);
    assert_eq!(z.shape(), &[b, m, n]);
    for i in [0, 17, 63] {
        let want = run("dot", &[], &[x.at(i).unwrap(), y.at(i).unwrap()]);
        assert_eq!(z.at(i).unwrap().to_f64_vec(), want.to_f64_vec());
    }
    let e = infer(
        "batch_dot",
        &[],
        &[Some(vec![2, 3, 4]), Some(vec![3, 4, 5])],
    );
    assert!(e.contains("node1") && e.contains("rhs"), "{e}");
    let e = infer("batch_dot", &[], &[Some(vec![3, 4]), Some(vec![3, 4, 5])]);
    assert!(e.contains("lhs") && e.contains("3-D"), "{e}");
}

#[test]
fn symbol_arithmetic_names_exist() {
    for name in [
        "_plus",
        "_add",
        "_Plus",
        "_minus",
        "_sub",
        "_Minus",
        "_mul",
        "_Mul",
        "_div",
        "_Div",
        "_power",
        "_Power",
        "_maximum",
        "_minimum",
        "_plus_scalar",
        "_minus_scalar",
        "_rminus_scalar",
        "_mul_scalar",
        "_div_scalar",
        "_rdiv_scalar",
        "_power_scalar",
        "_rpower_scalar",
        "_maximum_scalar",
        "_minimum_scalar",
        "broadcast_plus",
        "broadcast_minus",
        "ElementWiseSum",
        "stop_gradient",
        "sum_axis",
        "max_axis",
        "min_axis",
    ] {
        assert!(lookup(name).is_ok(), "{name} is not registered");
    }
    assert_eq!(lookup("_plus").unwrap().name, "elemwise_add");
    assert_eq!(lookup("BlockGrad").unwrap().python_name(), "block_grad");
    assert_eq!(lookup("MakeLoss").unwrap().python_name(), "make_loss");
}

#[test]
fn symbol_arithmetic_graph() {
    // loss = MakeLoss(sum(add_n(-x * y, x + 2, BlockGrad(y)))): d/dx = 1 - y, d/dy = -x.
    let (x, y) = (Symbol::variable("x"), Symbol::variable("y"));
    let neg = Symbol::create(
        "_mul_scalar",
        None,
        &[("scalar", "-1.0")],
        vec![(None, x.clone())],
    )
    .unwrap();
    let prod = Symbol::create("_mul", None, &[], vec![(None, neg), (None, y.clone())]).unwrap();
    let plus = Symbol::create("_plus_scalar", None, &[("scalar", "2")], vec![(None, x)]).unwrap();
    let bg = Symbol::create("BlockGrad", None, &[], vec![(None, y)]).unwrap();
    let total = Symbol::create(
        "add_n",
        Some("total"),
        &[],
        vec![(None, prod), (None, plus), (None, bg)],
    )
    .unwrap();
    let s = Symbol::create("sum", Some("s"), &[], vec![(None, total)]).unwrap();
    let loss = Symbol::create("MakeLoss", Some("loss"), &[], vec![(None, s)]).unwrap();
    assert_eq!(loss.list_arguments(), vec!["x", "y"]);
    // Elementwise ops fill y's shape from x's.
    let known: HashMap<String, Vec<usize>> = [("x".to_string(), vec![2, 3])].into_iter().collect();
    let (args, outs, _) = loss.infer_shape(&known).unwrap();
    assert_eq!(args, vec![vec![2, 3], vec![2, 3]]);
    assert_eq!(outs, vec![vec![1]]);
    let xv = arr(&[2, 3], 120);
    let yv = arr(&[2, 3], 121);
    let mut exe = Executor::bind(
        &loss,
        Context::cpu(0),
        vec![xv.clone(), yv.clone()],
        vec![None, None],
        vec![GradReq::Write, GradReq::Write],
        vec![],
    )
    .unwrap();
    exe.forward(true).unwrap();
    let (xs, ys) = (xv.to_f64_vec(), yv.to_f64_vec());
    let want: f64 = xs.iter().zip(&ys).map(|(a, b)| -a * b + a + 2.0 + b).sum();
    assert!((exe.outputs()[0].to_f64_vec()[0] - want).abs() < 1e-4);
    exe.backward(&[]).unwrap();
    let dx = exe.grad_arrays[0].as_ref().unwrap().to_f64_vec();
    let dy = exe.grad_arrays[1].as_ref().unwrap().to_f64_vec();
    for i in 0..6 {
        assert!((dx[i] - (1.0 - ys[i])).abs() < 1e-6, "dx[{i}]");
        assert!((dy[i] + xs[i]).abs() < 1e-6, "dy[{i}]");
    }
}
