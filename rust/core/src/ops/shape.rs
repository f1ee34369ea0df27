//! Shape and indexing operators: MXNet `Reshape`, `Flatten`, `transpose`, `expand_dims`,
//! `squeeze`, `Concat`, `stack`, `SliceChannel` (`split`), `slice_axis`, `slice`, `Embedding`.
//!
//! Everything but `Embedding` only moves values, so it works for every dtype: reshapes share
//! the input's storage, the rest copy contiguous blocks (`take_range`, `join_rows`) in parallel
//! over the leading (outer) rows.

use super::params::{param, ParamKind::*};
use super::{check_or_fill, known, unknown_input, MaybeShape, OpCtx, OpDef, Operator, Params};
use crate::error::{Error, Result};
use crate::kernels::par;
use crate::tensor::{DType, Element, NDArray, Storable};
use crate::with_dtype;
use std::sync::Arc;

// ---------------------------------------------------------------------------------------------
// Registry entries
// ---------------------------------------------------------------------------------------------

/// The entries of this family.
pub static OPS: &[OpDef] = &[
    OpDef {
        name: "Reshape",
        aliases: &["reshape"],
        py_name: None,
        doc: "Gives the data a new shape without changing its values. Besides positive sizes, \
              `shape` takes MXNet's special codes: 0 copies the next input dimension, -1 infers \
              one dimension from the remaining size, -2 copies all remaining input dimensions, \
              -3 merges the next two input dimensions into one, and -4 splits the next input \
              dimension into the two values that follow it (one of which may be -1). With \
              reverse=True the codes are matched against the input dimensions from right to left. \
              Example: data (2, 3, 4) with shape (0, -1) gives (2, 12); (-3, -2) gives (6, 4).",
        params: &[
            param(
                "shape",
                Shape,
                Some("()"),
                "The target shape, possibly with the special codes 0, -1, -2, -3, -4.",
            ),
            param(
                "reverse",
                Bool,
                Some("False"),
                "Apply the special codes from right to left.",
            ),
            param(
                "target_shape",
                Shape,
                Some("()"),
                "(Deprecated) target shape used when `shape` is empty; a single 0 is inferred.",
            ),
            param(
                "keep_highest",
                Bool,
                Some("False"),
                "(Deprecated, with target_shape) keep the first dimension of the input.",
            ),
        ],
        create: View::create_reshape,
        variadic: None,
    },
    OpDef {
        name: "Flatten",
        aliases: &["flatten"],
        py_name: None,
        doc: "Collapses every axis but the first: data of shape (N, d1, d2, …) becomes \
              (N, d1·d2·…). A 1-d input of shape (N,) becomes (N, 1).",
        params: &[],
        create: View::create_flatten,
        variadic: None,
    },
    OpDef {
        name: "expand_dims",
        aliases: &[],
        py_name: None,
        doc: "Inserts an axis of size 1 at position `axis`. A negative axis counts from \
              ndim + 1, so axis=-1 appends a trailing axis.",
        params: &[param(
            "axis",
            Int,
            None,
            "Position of the new axis, in [-ndim-1, ndim].",
        )],
        create: View::create_expand_dims,
        variadic: None,
    },
    OpDef {
        name: "squeeze",
        aliases: &[],
        py_name: None,
        doc: "Removes axes of size 1: the listed ones (each must have size 1), or every one \
              when axis is None. A result with no axes left has shape (1,), as in MXNet.",
        params: &[param(
            "axis",
            OptShape,
            Some("None"),
            "Axes to remove (None: every axis of size 1).",
        )],
        create: View::create_squeeze,
        variadic: None,
    },
    OpDef {
        name: "transpose",
        aliases: &[],
        py_name: None,
        doc: "Permutes the axes: output axis i is input axis axes[i]. With the default empty \
              axes the order of the axes is reversed (a matrix transpose for 2-d data).",
        params: &[param(
            "axes",
            Shape,
            Some("()"),
            "The permutation (negative values count from the end); empty reverses the axes.",
        )],
        create: Transpose::create,
        variadic: None,
    },
    OpDef {
        name: "Concat",
        aliases: &["concat"],
        py_name: None,
        doc: "Joins the inputs along axis `dim`; all other dimensions must agree. The inputs \
              are named arg0, arg1, …; the gradient is split back into the inputs' parts.",
        params: &[
            param(
                "num_args",
                Int,
                None,
                "Number of inputs (set automatically from the inputs given).",
            ),
            param(
                "dim",
                Int,
                Some("1"),
                "The axis to join along (negative counts from the end).",
            ),
        ],
        create: Concat::create,
        variadic: Some("num_args"),
    },
    OpDef {
        name: "stack",
        aliases: &[],
        py_name: None,
        doc: "Joins inputs of one shape along a new axis `axis`: k inputs of shape (a, b) \
              stacked on axis 1 give (a, k, b). The inputs are named arg0, arg1, ….",
        params: &[
            param(
                "axis",
                Int,
                Some("0"),
                "Position of the new axis in the output (negative counts from the end).",
            ),
            param(
                "num_args",
                Int,
                None,
                "Number of inputs (set automatically from the inputs given).",
            ),
        ],
        create: Stack::create,
        variadic: Some("num_args"),
    },
    OpDef {
        name: "SliceChannel",
        aliases: &["split"],
        py_name: None,
        doc: "Splits the data into `num_outputs` equal parts along `axis` (the size of that \
              axis must be divisible by num_outputs). With squeeze_axis=True the split axis, \
              which must then have size num_outputs, is removed from the outputs. Outputs are \
              named output0, output1, …; the gradient concatenates the outputs' gradients.",
        params: &[
            param("num_outputs", Int, None, "Number of parts to split into."),
            param(
                "axis",
                Int,
                Some("1"),
                "The axis to split along (negative counts from the end).",
            ),
            param(
                "squeeze_axis",
                Bool,
                Some("False"),
                "Remove the split axis from the outputs (its size must equal num_outputs).",
            ),
        ],
        create: SliceChannel::create,
        variadic: None,
    },
    OpDef {
        name: "slice_axis",
        aliases: &[],
        py_name: None,
        doc: "Takes elements begin … end-1 along one axis. Negative begin and end count from \
              the end of the axis; end=None means up to the end. The range must not be empty.",
        params: &[
            param(
                "axis",
                Int,
                None,
                "The axis to slice (negative counts from the end).",
            ),
            param(
                "begin",
                Int,
                None,
                "First index taken (negative counts from the end).",
            ),
            param(
                "end",
                OptInt,
                None,
                "One past the last index taken (negative counts from the end; None: the end).",
            ),
        ],
        create: SliceAxis::create,
        variadic: None,
    },
    OpDef {
        name: "slice",
        aliases: &[],
        py_name: None,
        doc: "Takes a strided region, one (begin, end, step) per leading axis, like Python's \
              x[b0:e0:s0, b1:e1:s1, …]. Entries may be None (the whole axis, reversed for a \
              negative step); negative values count from the end; out-of-range bounds are \
              clipped. Axes beyond the tuples are taken whole.",
        params: &[
            param(
                "begin",
                Str,
                None,
                "Tuple of start indices, entries int or None, e.g. \"(None, 1)\".",
            ),
            param(
                "end",
                Str,
                None,
                "Tuple of stop indices (exclusive), entries int or None; as long as begin.",
            ),
            param(
                "step",
                Str,
                Some("()"),
                "Tuple of steps, entries int or None (= 1); empty, or as long as begin.",
            ),
        ],
        create: Slice::create,
        variadic: None,
    },
    OpDef {
        name: "Embedding",
        aliases: &[],
        py_name: None,
        doc: "Maps integer indices to rows of a weight matrix: output[..., :] = \
              weight[data[...], :], shape data.shape + (output_dim,). The indices are float32 \
              values holding integers (the fraction is dropped). Unlike MXNet, which clips \
              silently, an index outside [0, input_dim) is an error. The weight gradient adds \
              up the head gradients of every occurrence of an index; the indices get no gradient.",
        params: &[
            param(
                "input_dim",
                Int,
                None,
                "Vocabulary size: indices lie in [0, input_dim).",
            ),
            param("output_dim", Int, None, "Size of each embedding vector."),
            param(
                "dtype",
                Enum(&[
                    "float32", "float64", "float16", "uint8", "int8", "int32", "int64",
                ]),
                Some("float32"),
                "Data type of the weight and the output.",
            ),
            param(
                "sparse_grad",
                Bool,
                Some("False"),
                "Accepted for compatibility; the weight gradient is always dense here.",
            ),
        ],
        create: Embedding::create,
        variadic: None,
    },
];

// ---------------------------------------------------------------------------------------------
// Shared helpers
// ---------------------------------------------------------------------------------------------

/// An error about parameter `name` of node `node` that only shows once the input shape is known.
fn bad_param(
    op: &str,
    node: &str,
    name: &str,
    expected: impl Into<String>,
    got: impl Into<String>,
) -> Error {
    Error::invalid(
        format!("{op} node \"{node}\": parameter \"{name}\""),
        expected,
        got,
    )
}

/// Python tuple text of a shape: `(2, 3)`, `(4,)`.
fn tup<T: std::fmt::Debug>(s: &[T]) -> String {
    crate::error::tuple_text(&format!("{s:?}"))
}

/// Normalises a possibly negative axis parameter against `ndim` axes.
fn norm_axis(op: &str, node: &str, pname: &str, axis: i64, ndim: usize) -> Result<usize> {
    let n = ndim as i64;
    let a = if axis < 0 { axis + n } else { axis };
    if a < 0 || a >= n {
        return Err(bad_param(
            op,
            node,
            pname,
            format!("an axis in [{}, {n}) for {ndim}-d input", -n),
            axis.to_string(),
        ));
    }
    Ok(a as usize)
}

/// The row-major values of `x` as `T`; an error naming `what` when the dtype differs.
fn values<'a, T: Storable>(x: &'a NDArray, what: &str) -> Result<&'a [T]> {
    x.typed::<T>()
        .and_then(|a| a.as_slice())
        .ok_or_else(|| Error::invalid(what, format!("a {} array", T::DTYPE), x.dtype().name()))
}

/// The input names of a variadic op: arg0, arg1, ….
fn arg_names(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("arg{i}")).collect()
}

/// Checks that every array has the dtype of the first (the block kernels copy one type);
/// `what` names them in the error (`input "arg"`, `output gradient `).
fn same_dtype(op: &str, node: &str, what: &str, inputs: &[NDArray]) -> Result<DType> {
    let t = inputs.first().map_or(DType::Float32, NDArray::dtype);
    for (i, x) in inputs.iter().enumerate() {
        if x.dtype() != t {
            return Err(Error::invalid(
                format!("{op} node \"{node}\": {what}{i} dtype"),
                t.name(),
                x.dtype().name(),
            ));
        }
    }
    Ok(t)
}

// ---------------------------------------------------------------------------------------------
// Block-copy kernels (generic over the element type)
// ---------------------------------------------------------------------------------------------

/// Elements `[begin, begin + len)` of the middle axis of `src` viewed as (outer, n, inner):
/// the result is (outer, len, inner), one contiguous copy per outer row.
fn take_range<T: Element>(
    src: &[T],
    outer: usize,
    n: usize,
    inner: usize,
    begin: usize,
    len: usize,
) -> Vec<T> {
    let row = len * inner;
    let mut out = vec![T::default(); outer * row];
    par::for_each_row_mut(&mut out, row, |o, dst| {
        let s = (o * n + begin) * inner;
        if let Some(part) = src.get(s..s + row) {
            dst.copy_from_slice(part);
        }
    });
    out
}

/// Joins rows: output row o is row o of `parts[0]`, then row o of `parts[1]`, …, where part
/// k has rows of `widths[k]` elements (the concatenation of (outer, w_k) blocks along axis 1).
fn join_rows<T: Element>(parts: &[&[T]], widths: &[usize], outer: usize) -> Vec<T> {
    let total: usize = widths.iter().sum();
    let mut out = vec![T::default(); outer * total];
    par::for_each_row_mut(&mut out, total, |o, dst| {
        let mut off = 0;
        for (p, &w) in parts.iter().zip(widths) {
            if let (Some(d), Some(s)) = (dst.get_mut(off..off + w), p.get(o * w..(o + 1) * w)) {
                d.copy_from_slice(s);
            }
            off += w;
        }
    });
    out
}

/// The inverse of `take_range`: (outer, n, inner) zeros with `g` (outer, len, inner) written
/// at `[begin, begin + len)` of the middle axis (the gradient of a slice).
fn place_range<T: Element>(
    g: &[T],
    outer: usize,
    n: usize,
    inner: usize,
    begin: usize,
    len: usize,
) -> Vec<T> {
    let row = n * inner;
    let glen = len * inner;
    let mut out = vec![T::default(); outer * row];
    par::for_each_row_mut(&mut out, row, |o, dst| {
        let at = begin * inner;
        if let (Some(d), Some(s)) = (dst.get_mut(at..at + glen), g.get(o * glen..(o + 1) * glen)) {
            d.copy_from_slice(s);
        }
    });
    out
}

/// (outer, n, inner) of `shape` around axis `ax`.
fn around(shape: &[usize], ax: usize) -> (usize, usize, usize) {
    let outer = shape[..ax].iter().product();
    let n = shape.get(ax).copied().unwrap_or(1);
    let inner = shape.get(ax + 1..).map_or(1, |s| s.iter().product());
    (outer, n, inner)
}

/// One axis of a strided region: first index, element count and step.
#[derive(Clone, Copy, Debug, PartialEq)]
struct AxisRange {
    start: usize,
    count: usize,
    step: isize,
}

/// Row-major offsets of the first element of each output row (the last axis being the row)
/// of the strided region `r` of an array of `shape`; the row's elements are then at
/// `base + (start + j·step)` along the last axis.
fn region_rows(shape: &[usize], r: &[AxisRange]) -> (Vec<usize>, AxisRange) {
    let nd = shape.len();
    let mut strides = vec![1usize; nd];
    for a in (0..nd.saturating_sub(1)).rev() {
        strides[a] = strides[a + 1] * shape[a + 1];
    }
    let Some((last, lead)) = r.split_last() else {
        // 0-d: one row of one element.
        return (
            vec![0],
            AxisRange {
                start: 0,
                count: 1,
                step: 1,
            },
        );
    };
    let mut bases = vec![0usize];
    for (a, ar) in lead.iter().enumerate() {
        let mut next = Vec::with_capacity(bases.len() * ar.count);
        for &b in &bases {
            for j in 0..ar.count {
                let idx = ar.start as isize + j as isize * ar.step;
                next.push(b + idx as usize * strides[a]);
            }
        }
        bases = next;
    }
    (bases, *last)
}

/// Copies the strided region `r` of `src` (shape `shape`) into a new row-major vector.
fn strided_gather<T: Element>(src: &[T], shape: &[usize], r: &[AxisRange]) -> Vec<T> {
    let (bases, last) = region_rows(shape, r);
    let mut out = vec![T::default(); bases.len() * last.count];
    par::for_each_row_mut(&mut out, last.count, |i, dst| {
        let b = bases[i] + last.start;
        if last.step == 1 {
            if let Some(s) = src.get(b..b + last.count) {
                dst.copy_from_slice(s);
            }
        } else {
            for (j, d) in dst.iter_mut().enumerate() {
                let at = (b as isize + j as isize * last.step) as usize;
                *d = src.get(at).copied().unwrap_or_default();
            }
        }
    });
    out
}

/// The gradient of `strided_gather`: zeros of `shape` with `g` written back into region `r`
/// (the region's positions are distinct, so writing is the same as adding).
fn strided_scatter<T: Element>(g: &[T], shape: &[usize], r: &[AxisRange]) -> Vec<T> {
    let (bases, last) = region_rows(shape, r);
    let mut out = vec![T::default(); shape.iter().product()];
    if last.count == 0 {
        return out;
    }
    for (row, &base) in g.chunks(last.count).zip(&bases) {
        let b = base + last.start;
        for (j, &v) in row.iter().enumerate() {
            let at = (b as isize + j as isize * last.step) as usize;
            if let Some(d) = out.get_mut(at) {
                *d = v;
            }
        }
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Reshape, Flatten, expand_dims, squeeze: views that share the input's storage
// ---------------------------------------------------------------------------------------------

#[derive(Debug)]
enum ViewKind {
    Reshape {
        shape: Vec<i64>,
        reverse: bool,
        target_shape: Vec<i64>,
        keep_highest: bool,
    },
    Flatten,
    ExpandDims(i64),
    Squeeze(Option<Vec<i64>>),
}

/// An op whose output is the input with another shape; backward reshapes the gradient back.
#[derive(Debug)]
struct View {
    op: &'static str,
    kind: ViewKind,
}

impl View {
    fn create_reshape(p: &Params) -> Result<Arc<dyn Operator>> {
        let shape = p.shape("shape")?;
        if let Some(bad) = shape.iter().find(|&&d| d < -4) {
            return Err(p.error(
                "shape",
                "sizes >= 0 or the codes -1, -2, -3, -4",
                format!("{} in {}", bad, tup(&shape)),
            ));
        }
        let target_shape = p.shape("target_shape")?;
        if let Some(bad) = target_shape.iter().find(|&&d| d < 0) {
            return Err(p.error(
                "target_shape",
                "sizes >= 0 (0: inferred)",
                format!("{} in {}", bad, tup(&target_shape)),
            ));
        }
        if shape.is_empty() && target_shape.is_empty() {
            return Err(p.error("shape", "a non-empty shape", "()"));
        }
        Ok(Arc::new(View {
            op: "Reshape",
            kind: ViewKind::Reshape {
                shape,
                reverse: p.bool("reverse")?,
                target_shape,
                keep_highest: p.bool("keep_highest")?,
            },
        }))
    }

    fn create_flatten(_p: &Params) -> Result<Arc<dyn Operator>> {
        Ok(Arc::new(View {
            op: "Flatten",
            kind: ViewKind::Flatten,
        }))
    }

    fn create_expand_dims(p: &Params) -> Result<Arc<dyn Operator>> {
        Ok(Arc::new(View {
            op: "expand_dims",
            kind: ViewKind::ExpandDims(p.int("axis")?),
        }))
    }

    fn create_squeeze(p: &Params) -> Result<Arc<dyn Operator>> {
        Ok(Arc::new(View {
            op: "squeeze",
            kind: ViewKind::Squeeze(p.opt_shape("axis")?),
        }))
    }

    /// The output shape for input shape `d`.
    fn out_shape(&self, node: &str, d: &[usize]) -> Result<Vec<usize>> {
        let op = self.op;
        let out = match &self.kind {
            ViewKind::Reshape {
                shape,
                reverse,
                target_shape,
                keep_highest,
            } => {
                let out = if shape.is_empty() {
                    legacy_target_shape(node, target_shape, *keep_highest, d)?
                } else {
                    reshape_codes(node, shape, d, *reverse)?
                };
                let (n_in, n_out) = (d.iter().product::<usize>(), out.iter().product::<usize>());
                if n_in != n_out {
                    let pname = if shape.is_empty() {
                        "target_shape"
                    } else {
                        "shape"
                    };
                    let given = if shape.is_empty() {
                        target_shape
                    } else {
                        shape
                    };
                    return Err(bad_param(
                        op,
                        node,
                        pname,
                        format!(
                            "a shape with {n_in} elements for input \"data\" of shape {}",
                            tup(d)
                        ),
                        format!("{} (giving {} = {n_out} elements)", tup(given), tup(&out)),
                    ));
                }
                out
            }
            ViewKind::Flatten => match d.split_first() {
                Some((&n, rest)) => vec![n, rest.iter().product()],
                None => {
                    return Err(Error::shape(
                        op,
                        format!("node \"{node}\": input \"data\""),
                        Text("at least one axis".into()),
                        d,
                    ))
                }
            },
            ViewKind::ExpandDims(axis) => {
                let n = d.len() as i64;
                let a = if *axis < 0 { axis + n + 1 } else { *axis };
                if a < 0 || a > n {
                    return Err(bad_param(
                        op,
                        node,
                        "axis",
                        format!("an axis in [{}, {n}] for {n}-d input \"data\"", -n - 1),
                        axis.to_string(),
                    ));
                }
                let mut s = d.to_vec();
                s.insert(a as usize, 1);
                s
            }
            ViewKind::Squeeze(axes) => {
                let mut drop = vec![false; d.len()];
                match axes {
                    None => drop.iter_mut().zip(d).for_each(|(x, &n)| *x = n == 1),
                    Some(list) => {
                        for &a in list {
                            let ax = norm_axis(op, node, "axis", a, d.len())?;
                            if d[ax] != 1 || drop[ax] {
                                return Err(bad_param(
                                    op,
                                    node,
                                    "axis",
                                    format!(
                                        "distinct axes of size 1 of input \"data\" of shape {}",
                                        tup(d)
                                    ),
                                    tup(list),
                                ));
                            }
                            drop[ax] = true;
                        }
                    }
                }
                let s: Vec<usize> = d
                    .iter()
                    .zip(&drop)
                    .filter(|(_, &x)| !x)
                    .map(|(&n, _)| n)
                    .collect();
                // MXNet never produces a 0-d array here.
                if s.is_empty() {
                    vec![1]
                } else {
                    s
                }
            }
        };
        Ok(out)
    }
}

/// MXNet's `InferReshapeShape`: applies the codes 0, -1, -2, -3, -4 of `codes` to input shape
/// `d` (both read right to left when `reverse`).
fn reshape_codes(node: &str, codes: &[i64], d: &[usize], reverse: bool) -> Result<Vec<usize>> {
    let bad = |expected: String, got: String| bad_param("Reshape", node, "shape", expected, got);
    let mut src: Vec<i64> = d.iter().map(|&x| x as i64).collect();
    let mut p = codes.to_vec();
    if reverse {
        src.reverse();
        p.reverse();
    }
    let mut out: Vec<i64> = Vec::with_capacity(p.len() + src.len());
    let mut s = 0usize;
    let mut infer: Option<usize> = None;
    let mut i = 0;
    let ctx = || format!("{} for input \"data\" of shape {}", tup(codes), tup(d));
    while i < p.len() {
        match p[i] {
            0 => {
                let v = src.get(s).ok_or_else(|| {
                    bad(
                        "a 0 only where an input dimension is left to copy".into(),
                        ctx(),
                    )
                })?;
                out.push(*v);
                s += 1;
            }
            -1 => {
                if infer.is_some() {
                    return Err(bad("at most one -1".into(), ctx()));
                }
                // MXNet records the code's position in the parameter tuple, which misplaces the
                // inferred size after a -2/-4 that emits a different number of dimensions (an
                // error or worse there); the output position is what the code means.
                infer = Some(out.len());
                out.push(1);
                s += 1;
            }
            -2 => {
                while s < src.len() {
                    out.push(src[s]);
                    s += 1;
                }
            }
            -3 => {
                if s + 1 >= src.len() {
                    return Err(bad(
                        "a -3 only where two input dimensions are left to merge".into(),
                        ctx(),
                    ));
                }
                out.push(src[s] * src[s + 1]);
                s += 2;
            }
            -4 => {
                let (Some(&d0), Some(&a), Some(&b)) = (src.get(s), p.get(i + 1), p.get(i + 2))
                else {
                    return Err(bad(
                        "a -4 followed by two sizes, where an input dimension is left to split"
                            .into(),
                        ctx(),
                    ));
                };
                s += 1;
                i += 2;
                let (mut d1, mut d2) = (a, b);
                if d1 == -1 && d2 == -1 {
                    return Err(bad("a -4 split with at most one -1".into(), ctx()));
                }
                if d1 == -1 && d2 > 0 {
                    d1 = d0 / d2;
                }
                if d2 == -1 && d1 > 0 {
                    d2 = d0 / d1;
                }
                if d1 < 0 || d2 < 0 || d1 * d2 != d0 {
                    return Err(bad(
                        format!("a -4 split ({a}, {b}) whose product is the dimension {d0}"),
                        ctx(),
                    ));
                }
                // Pushed in this order even when reversed (MXNet does the same).
                out.extend([d1, d2]);
            }
            v => {
                out.push(v);
                s += 1;
            }
        }
        i += 1;
    }
    if let Some(k) = infer {
        let size: i64 = src.iter().product();
        let rest: i64 = out.iter().product();
        if rest == 0 || size % rest != 0 {
            return Err(bad(
                format!("a shape whose -1 divides the {size} elements evenly"),
                ctx(),
            ));
        }
        out[k] = size / rest;
    }
    if reverse {
        out.reverse();
    }
    Ok(out.into_iter().map(|v| v.max(0) as usize).collect())
}

/// The deprecated `target_shape` form: a single 0 is inferred; keep_highest copies dimension 0.
fn legacy_target_shape(
    node: &str,
    target: &[i64],
    keep_highest: bool,
    d: &[usize],
) -> Result<Vec<usize>> {
    let mut out: Vec<usize> = target.iter().map(|&v| v.max(0) as usize).collect();
    let start = usize::from(keep_highest);
    if keep_highest {
        if let (Some(o), Some(&d0)) = (out.first_mut(), d.first()) {
            *o = d0;
        }
    }
    let zeros: Vec<usize> = (start..out.len()).filter(|&i| out[i] == 0).collect();
    if let [k] = zeros[..] {
        out[k] = 1;
        let rest: usize = out.iter().product();
        let size: usize = d.iter().product();
        if rest == 0 || size % rest != 0 {
            return Err(bad_param(
                "Reshape",
                node,
                "target_shape",
                format!("a shape whose 0 divides the {size} elements evenly"),
                tup(target),
            ));
        }
        out[k] = size / rest;
    }
    Ok(out)
}

impl Operator for View {
    fn dtype_generic(&self) -> bool {
        true
    }
    fn arguments(&self) -> Vec<String> {
        vec!["data".into()]
    }

    fn infer_shape(
        &self,
        node: &str,
        inputs: &mut [MaybeShape],
        _aux: &mut [MaybeShape],
    ) -> Result<Vec<Vec<usize>>> {
        let d = known(self.op, node, &["data"], inputs, 0)?;
        Ok(vec![self.out_shape(node, d)?])
    }

    fn forward(
        &self,
        ctx: &OpCtx,
        inputs: &[NDArray],
        _aux: &mut [NDArray],
    ) -> Result<Vec<NDArray>> {
        let x = &inputs[0];
        let s = self.out_shape(ctx.node, x.shape())?;
        Ok(vec![x.reshape(&isizes(&s))?])
    }

    fn backward(
        &self,
        _ctx: &OpCtx,
        out_grads: &[NDArray],
        inputs: &[NDArray],
        _outputs: &[NDArray],
        _aux: &mut [NDArray],
    ) -> Result<Vec<Option<NDArray>>> {
        Ok(vec![Some(
            out_grads[0].reshape(&isizes(inputs[0].shape()))?,
        )])
    }
}

fn isizes(s: &[usize]) -> Vec<isize> {
    s.iter().map(|&d| d as isize).collect()
}

// ---------------------------------------------------------------------------------------------
// transpose
// ---------------------------------------------------------------------------------------------

#[derive(Debug)]
struct Transpose {
    axes: Vec<i64>,
}

impl Transpose {
    fn create(p: &Params) -> Result<Arc<dyn Operator>> {
        Ok(Arc::new(Transpose {
            axes: p.shape("axes")?,
        }))
    }

    /// The permutation for an input of `ndim` axes.
    fn perm(&self, node: &str, ndim: usize) -> Result<Vec<usize>> {
        if self.axes.is_empty() {
            return Ok((0..ndim).rev().collect());
        }
        let bad = || {
            bad_param(
                "transpose",
                node,
                "axes",
                format!("a permutation of the {ndim} axes of input \"data\""),
                tup(&self.axes),
            )
        };
        if self.axes.len() != ndim {
            return Err(bad());
        }
        let mut seen = vec![false; ndim];
        let mut perm = Vec::with_capacity(ndim);
        for &a in &self.axes {
            let ax = norm_axis("transpose", node, "axes", a, ndim)?;
            if std::mem::replace(&mut seen[ax], true) {
                return Err(bad());
            }
            perm.push(ax);
        }
        Ok(perm)
    }
}

impl Operator for Transpose {
    fn dtype_generic(&self) -> bool {
        true
    }
    fn arguments(&self) -> Vec<String> {
        vec!["data".into()]
    }

    fn infer_shape(
        &self,
        node: &str,
        inputs: &mut [MaybeShape],
        _aux: &mut [MaybeShape],
    ) -> Result<Vec<Vec<usize>>> {
        let d = known("transpose", node, &["data"], inputs, 0)?;
        let perm = self.perm(node, d.len())?;
        Ok(vec![perm.iter().map(|&a| d[a]).collect()])
    }

    fn forward(
        &self,
        ctx: &OpCtx,
        inputs: &[NDArray],
        _aux: &mut [NDArray],
    ) -> Result<Vec<NDArray>> {
        let perm = self.perm(ctx.node, inputs[0].ndim())?;
        Ok(vec![inputs[0].transpose(Some(&perm))?])
    }

    fn backward(
        &self,
        ctx: &OpCtx,
        out_grads: &[NDArray],
        inputs: &[NDArray],
        _outputs: &[NDArray],
        _aux: &mut [NDArray],
    ) -> Result<Vec<Option<NDArray>>> {
        let perm = self.perm(ctx.node, inputs[0].ndim())?;
        let mut inv = vec![0; perm.len()];
        for (i, &p) in perm.iter().enumerate() {
            inv[p] = i;
        }
        Ok(vec![Some(out_grads[0].transpose(Some(&inv))?)])
    }
}

// ---------------------------------------------------------------------------------------------
// Concat and stack
// ---------------------------------------------------------------------------------------------

#[derive(Debug)]
struct Concat {
    dim: i64,
    num_args: usize,
}

impl Concat {
    fn create(p: &Params) -> Result<Arc<dyn Operator>> {
        Ok(Arc::new(Concat {
            dim: p.int("dim")?,
            num_args: p.usize_min("num_args", 1)?,
        }))
    }

    /// The concatenation axis and the output shape.
    fn plan(&self, node: &str, shapes: &[&[usize]]) -> Result<(usize, Vec<usize>)> {
        let first = shapes.first().copied().unwrap_or(&[]);
        if first.is_empty() {
            return Err(Error::shape(
                "Concat",
                format!("node \"{node}\": input \"arg0\""),
                Text("at least one axis".into()),
                first,
            ));
        }
        let ax = norm_axis("Concat", node, "dim", self.dim, first.len())?;
        let mut out = first.to_vec();
        out[ax] = 0;
        for (i, s) in shapes.iter().enumerate() {
            let fits = s.len() == first.len()
                && s.iter()
                    .zip(first)
                    .enumerate()
                    .all(|(k, (a, b))| k == ax || a == b);
            if !fits {
                let mut want: Vec<String> = first.iter().map(usize::to_string).collect();
                want[ax] = "_".into();
                return Err(Error::shape(
                    "Concat",
                    format!("node \"{node}\": input \"arg{i}\" (dimensions other than dim={ax} must match input \"arg0\")"),
                    Text(format!("({})", want.join(", "))),
                    s,
                ));
            }
            out[ax] += s[ax];
        }
        Ok((ax, out))
    }
}

/// Debug-prints as its text (for `Error::shape` expectations that are not plain shapes).
struct Text(String);

impl std::fmt::Debug for Text {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl Operator for Concat {
    fn dtype_generic(&self) -> bool {
        true
    }
    fn arguments(&self) -> Vec<String> {
        arg_names(self.num_args)
    }

    fn infer_shape(
        &self,
        node: &str,
        inputs: &mut [MaybeShape],
        _aux: &mut [MaybeShape],
    ) -> Result<Vec<Vec<usize>>> {
        // MXNet cannot complete an unknown input from the others either (its size along `dim`
        // stays open), so every input must be known.
        let shapes = inputs
            .iter()
            .enumerate()
            .map(|(i, s)| {
                s.as_deref()
                    .ok_or_else(|| unknown_input("Concat", node, &format!("arg{i}")))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(vec![self.plan(node, &shapes)?.1])
    }

    fn forward(
        &self,
        ctx: &OpCtx,
        inputs: &[NDArray],
        _aux: &mut [NDArray],
    ) -> Result<Vec<NDArray>> {
        let shapes: Vec<&[usize]> = inputs.iter().map(NDArray::shape).collect();
        let (ax, out_shape) = self.plan(ctx.node, &shapes)?;
        let (outer, _, inner) = around(&out_shape, ax);
        let widths: Vec<usize> = shapes.iter().map(|s| s[ax] * inner).collect();
        let t = same_dtype("Concat", ctx.node, "input arg", inputs)?;
        let out = with_dtype!(t, T => {
            let parts = inputs
                .iter()
                .map(|x| values::<T>(x, "Concat: input"))
                .collect::<Result<Vec<_>>>()?;
            NDArray::from_vec::<T>(&out_shape, join_rows(&parts, &widths, outer))?
        });
        Ok(vec![out])
    }

    fn backward(
        &self,
        ctx: &OpCtx,
        out_grads: &[NDArray],
        inputs: &[NDArray],
        _outputs: &[NDArray],
        _aux: &mut [NDArray],
    ) -> Result<Vec<Option<NDArray>>> {
        let shapes: Vec<&[usize]> = inputs.iter().map(NDArray::shape).collect();
        let (ax, out_shape) = self.plan(ctx.node, &shapes)?;
        let (outer, n, inner) = around(&out_shape, ax);
        let g = &out_grads[0];
        with_dtype!(g.dtype(), T => {
            let gs = values::<T>(g, "Concat: output gradient")?;
            let mut begin = 0;
            shapes
                .iter()
                .map(|s| {
                    let part = take_range(gs, outer, n, inner, begin, s[ax]);
                    begin += s[ax];
                    NDArray::from_vec::<T>(s, part).map(Some)
                })
                .collect()
        })
    }
}

#[derive(Debug)]
struct Stack {
    axis: i64,
    num_args: usize,
}

impl Stack {
    fn create(p: &Params) -> Result<Arc<dyn Operator>> {
        Ok(Arc::new(Stack {
            axis: p.int("axis")?,
            num_args: p.usize_min("num_args", 1)?,
        }))
    }

    /// The new axis and the output shape for inputs of shape `s`.
    fn plan(&self, node: &str, s: &[usize]) -> Result<(usize, Vec<usize>)> {
        let ax = norm_axis("stack", node, "axis", self.axis, s.len() + 1)?;
        let mut out = s.to_vec();
        out.insert(ax, self.num_args);
        Ok((ax, out))
    }
}

impl Operator for Stack {
    fn dtype_generic(&self) -> bool {
        true
    }
    fn arguments(&self) -> Vec<String> {
        arg_names(self.num_args)
    }

    fn infer_shape(
        &self,
        node: &str,
        inputs: &mut [MaybeShape],
        _aux: &mut [MaybeShape],
    ) -> Result<Vec<Vec<usize>>> {
        // Like MXNet, one known input fixes the shape of all the others.
        let s = inputs
            .iter()
            .flatten()
            .next()
            .cloned()
            .ok_or_else(|| unknown_input("stack", node, "arg0"))?;
        for (i, slot) in inputs.iter_mut().enumerate() {
            check_or_fill("stack", node, &format!("arg{i}"), slot, &s)?;
        }
        Ok(vec![self.plan(node, &s)?.1])
    }

    fn forward(
        &self,
        ctx: &OpCtx,
        inputs: &[NDArray],
        _aux: &mut [NDArray],
    ) -> Result<Vec<NDArray>> {
        let s = inputs.first().map_or(&[][..], NDArray::shape);
        for (i, x) in inputs.iter().enumerate() {
            if x.shape() != s {
                return Err(Error::shape(
                    "stack",
                    format!("node \"{}\": input \"arg{i}\"", ctx.node),
                    s,
                    x.shape(),
                ));
            }
        }
        let (ax, out_shape) = self.plan(ctx.node, s)?;
        let (outer, _, _) = around(&out_shape, ax);
        let width: usize = s[ax..].iter().product();
        let t = same_dtype("stack", ctx.node, "input arg", inputs)?;
        let out = with_dtype!(t, T => {
            let parts = inputs
                .iter()
                .map(|x| values::<T>(x, "stack: input"))
                .collect::<Result<Vec<_>>>()?;
            NDArray::from_vec::<T>(&out_shape, join_rows(&parts, &vec![width; parts.len()], outer))?
        });
        Ok(vec![out])
    }

    fn backward(
        &self,
        ctx: &OpCtx,
        out_grads: &[NDArray],
        inputs: &[NDArray],
        _outputs: &[NDArray],
        _aux: &mut [NDArray],
    ) -> Result<Vec<Option<NDArray>>> {
        let s = inputs.first().map_or(&[][..], NDArray::shape);
        let (ax, out_shape) = self.plan(ctx.node, s)?;
        let (outer, n, inner) = around(&out_shape, ax);
        let g = &out_grads[0];
        with_dtype!(g.dtype(), T => {
            let gs = values::<T>(g, "stack: output gradient")?;
            (0..inputs.len())
                .map(|k| NDArray::from_vec::<T>(s, take_range(gs, outer, n, inner, k, 1)).map(Some))
                .collect()
        })
    }
}

// ---------------------------------------------------------------------------------------------
// SliceChannel (split)
// ---------------------------------------------------------------------------------------------

#[derive(Debug)]
struct SliceChannel {
    num_outputs: usize,
    axis: i64,
    squeeze_axis: bool,
}

impl SliceChannel {
    fn create(p: &Params) -> Result<Arc<dyn Operator>> {
        Ok(Arc::new(SliceChannel {
            num_outputs: p.usize_min("num_outputs", 1)?,
            axis: p.int("axis")?,
            squeeze_axis: p.bool("squeeze_axis")?,
        }))
    }

    /// The split axis, the part size along it, and each output's shape.
    fn plan(&self, node: &str, d: &[usize]) -> Result<(usize, usize, Vec<usize>)> {
        let op = "SliceChannel";
        let ax = norm_axis(op, node, "axis", self.axis, d.len())?;
        let k = self.num_outputs;
        if d[ax] % k != 0 {
            return Err(bad_param(
                op,
                node,
                "num_outputs",
                format!(
                    "a divisor of dimension {ax} (size {}) of input \"data\" of shape {}",
                    d[ax],
                    tup(d)
                ),
                k.to_string(),
            ));
        }
        if self.squeeze_axis && d[ax] != k {
            return Err(bad_param(
                op,
                node,
                "num_outputs",
                format!(
                    "the size {} of dimension {ax} of input \"data\" (squeeze_axis=True)",
                    d[ax]
                ),
                k.to_string(),
            ));
        }
        let part = d[ax] / k;
        let mut s = d.to_vec();
        if self.squeeze_axis {
            s.remove(ax);
        } else {
            s[ax] = part;
        }
        Ok((ax, part, s))
    }
}

impl Operator for SliceChannel {
    fn dtype_generic(&self) -> bool {
        true
    }
    fn arguments(&self) -> Vec<String> {
        vec!["data".into()]
    }

    fn output_names(&self) -> Vec<String> {
        (0..self.num_outputs)
            .map(|i| format!("output{i}"))
            .collect()
    }

    fn infer_shape(
        &self,
        node: &str,
        inputs: &mut [MaybeShape],
        _aux: &mut [MaybeShape],
    ) -> Result<Vec<Vec<usize>>> {
        let d = known("SliceChannel", node, &["data"], inputs, 0)?;
        let (_, _, s) = self.plan(node, d)?;
        Ok(vec![s; self.num_outputs])
    }

    fn forward(
        &self,
        ctx: &OpCtx,
        inputs: &[NDArray],
        _aux: &mut [NDArray],
    ) -> Result<Vec<NDArray>> {
        let x = &inputs[0];
        let (ax, part, s) = self.plan(ctx.node, x.shape())?;
        let (outer, n, inner) = around(x.shape(), ax);
        with_dtype!(x.dtype(), T => {
            let xs = values::<T>(x, "SliceChannel: data")?;
            (0..self.num_outputs)
                .map(|k| NDArray::from_vec::<T>(&s, take_range(xs, outer, n, inner, k * part, part)))
                .collect()
        })
    }

    fn backward(
        &self,
        ctx: &OpCtx,
        out_grads: &[NDArray],
        inputs: &[NDArray],
        _outputs: &[NDArray],
        _aux: &mut [NDArray],
    ) -> Result<Vec<Option<NDArray>>> {
        let x = &inputs[0];
        let (ax, part, _) = self.plan(ctx.node, x.shape())?;
        let (outer, _, inner) = around(x.shape(), ax);
        let t = same_dtype("SliceChannel", ctx.node, "gradient of output", out_grads)?;
        let g = with_dtype!(t, T => {
            let parts = out_grads
                .iter()
                .map(|g| values::<T>(g, "SliceChannel: output gradient"))
                .collect::<Result<Vec<_>>>()?;
            let widths = vec![part * inner; parts.len()];
            NDArray::from_vec::<T>(x.shape(), join_rows(&parts, &widths, outer))?
        });
        Ok(vec![Some(g)])
    }
}

// ---------------------------------------------------------------------------------------------
// slice_axis and slice
// ---------------------------------------------------------------------------------------------

#[derive(Debug)]
struct SliceAxis {
    axis: i64,
    begin: i64,
    end: Option<i64>,
}

impl SliceAxis {
    fn create(p: &Params) -> Result<Arc<dyn Operator>> {
        Ok(Arc::new(SliceAxis {
            axis: p.int("axis")?,
            begin: p.int("begin")?,
            end: p.opt_int("end")?,
        }))
    }

    /// MXNet's `GetSliceAxisParams`: the axis and the (non-empty) range [begin, end).
    fn plan(&self, node: &str, d: &[usize]) -> Result<(usize, usize, usize)> {
        let op = "slice_axis";
        let ax = norm_axis(op, node, "axis", self.axis, d.len())?;
        let n = d[ax] as i64;
        if n == 0 {
            return Ok((ax, 0, 0));
        }
        let b = if self.begin < 0 {
            self.begin + n
        } else {
            self.begin
        };
        let e = match self.end {
            None => n,
            Some(e) if e < 0 => e + n,
            Some(e) => e,
        };
        if !(0 <= b && b < e && e <= n) {
            let end = self.end.map_or("None".to_string(), |e| e.to_string());
            return Err(bad_param(
                op,
                node,
                "begin",
                format!("0 <= begin < end <= {n} (after counting negatives from the end of axis {ax} of input \"data\")"),
                format!("begin={}, end={end}", self.begin),
            ));
        }
        Ok((ax, b as usize, e as usize))
    }
}

impl Operator for SliceAxis {
    fn dtype_generic(&self) -> bool {
        true
    }
    fn arguments(&self) -> Vec<String> {
        vec!["data".into()]
    }

    fn infer_shape(
        &self,
        node: &str,
        inputs: &mut [MaybeShape],
        _aux: &mut [MaybeShape],
    ) -> Result<Vec<Vec<usize>>> {
        let d = known("slice_axis", node, &["data"], inputs, 0)?;
        let (ax, b, e) = self.plan(node, d)?;
        let mut s = d.to_vec();
        s[ax] = e - b;
        Ok(vec![s])
    }

    fn forward(
        &self,
        ctx: &OpCtx,
        inputs: &[NDArray],
        _aux: &mut [NDArray],
    ) -> Result<Vec<NDArray>> {
        let x = &inputs[0];
        let (ax, b, e) = self.plan(ctx.node, x.shape())?;
        let (outer, n, inner) = around(x.shape(), ax);
        let mut s = x.shape().to_vec();
        s[ax] = e - b;
        let out = with_dtype!(x.dtype(), T => {
            let xs = values::<T>(x, "slice_axis: data")?;
            NDArray::from_vec::<T>(&s, take_range(xs, outer, n, inner, b, e - b))?
        });
        Ok(vec![out])
    }

    fn backward(
        &self,
        ctx: &OpCtx,
        out_grads: &[NDArray],
        inputs: &[NDArray],
        _outputs: &[NDArray],
        _aux: &mut [NDArray],
    ) -> Result<Vec<Option<NDArray>>> {
        let x = &inputs[0];
        let (ax, b, e) = self.plan(ctx.node, x.shape())?;
        let (outer, n, inner) = around(x.shape(), ax);
        let g = &out_grads[0];
        let dx = with_dtype!(g.dtype(), T => {
            let gs = values::<T>(g, "slice_axis: output gradient")?;
            NDArray::from_vec::<T>(x.shape(), place_range(gs, outer, n, inner, b, e - b))?
        });
        Ok(vec![Some(dx)])
    }
}

/// Parses MXNet's tuple text whose entries may be None: `"(None, 1)"`, `"[0, -2]"`, `"(3,)"`,
/// `"()"`, or a bare `"2"` / `"None"`.
pub fn parse_opt_tuple(s: &str) -> Option<Vec<Option<i64>>> {
    let t = s.trim();
    let inner =
        if (t.starts_with('(') && t.ends_with(')')) || (t.starts_with('[') && t.ends_with(']')) {
            &t[1..t.len() - 1]
        } else {
            t
        };
    inner
        .split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(|p| match p {
            "None" => Some(None),
            p => p.trim_end_matches('L').parse::<i64>().ok().map(Some),
        })
        .collect()
}

#[derive(Debug)]
struct Slice {
    begin: Vec<Option<i64>>,
    end: Vec<Option<i64>>,
    step: Vec<Option<i64>>,
}

impl Slice {
    fn create(p: &Params) -> Result<Arc<dyn Operator>> {
        let get = |name: &str| -> Result<Vec<Option<i64>>> {
            let text = p.str(name)?;
            parse_opt_tuple(&text).ok_or_else(|| {
                p.error(
                    name,
                    "a tuple of ints or None, e.g. (None, 1)",
                    format!("\"{text}\""),
                )
            })
        };
        let (begin, end, step) = (get("begin")?, get("end")?, get("step")?);
        if end.len() != begin.len() {
            return Err(p.error(
                "end",
                &format!("{} entries, like begin", begin.len()),
                end.len(),
            ));
        }
        if !step.is_empty() && step.len() != begin.len() {
            return Err(p.error(
                "step",
                &format!("no entries or {}, like begin", begin.len()),
                step.len(),
            ));
        }
        if step.contains(&Some(0)) {
            return Err(p.error("step", "non-zero steps", "a step of 0"));
        }
        Ok(Arc::new(Slice { begin, end, step }))
    }

    /// MXNet's `GetIndexRange` + `SetSliceOpOutputDimSize`: the region on every axis.
    fn plan(&self, node: &str, d: &[usize]) -> Result<Vec<AxisRange>> {
        if self.begin.len() > d.len() {
            return Err(bad_param(
                "slice",
                node,
                "begin",
                format!("at most {} entries (the axes of input \"data\")", d.len()),
                self.begin.len().to_string(),
            ));
        }
        let mut out = Vec::with_capacity(d.len());
        for (i, &len) in d.iter().enumerate() {
            if i >= self.begin.len() {
                out.push(AxisRange {
                    start: 0,
                    count: len,
                    step: 1,
                });
                continue;
            }
            let s = self.step.get(i).copied().flatten().unwrap_or(1);
            let len = len as i64;
            let (mut b, mut e) = (0i64, 0i64);
            if len > 0 {
                let end_given = self.end[i];
                b = self.begin[i].unwrap_or(if s < 0 { len - 1 } else { 0 });
                e = end_given.unwrap_or(if s < 0 { -1 } else { len });
                if b < 0 {
                    b += len;
                }
                if e < 0 && end_given.is_some() {
                    e += len;
                }
                if b < 0 && s > 0 {
                    b = 0;
                }
                if b > len - 1 && s < 0 {
                    b = len - 1;
                }
                if b < 0 || b > len - 1 {
                    b = -1;
                }
                e = e.clamp(-1, len);
            }
            let count = if e != b && b >= 0 {
                if s > 0 && e > b {
                    (e - b - 1) / s + 1
                } else if s < 0 && e < b {
                    (b - e - 1) / (-s) + 1
                } else {
                    0
                }
            } else {
                0
            };
            out.push(AxisRange {
                start: if count > 0 { b as usize } else { 0 },
                count: count as usize,
                step: s as isize,
            });
        }
        Ok(out)
    }
}

impl Operator for Slice {
    fn dtype_generic(&self) -> bool {
        true
    }
    fn arguments(&self) -> Vec<String> {
        vec!["data".into()]
    }

    fn infer_shape(
        &self,
        node: &str,
        inputs: &mut [MaybeShape],
        _aux: &mut [MaybeShape],
    ) -> Result<Vec<Vec<usize>>> {
        let d = known("slice", node, &["data"], inputs, 0)?;
        Ok(vec![self.plan(node, d)?.iter().map(|r| r.count).collect()])
    }

    fn forward(
        &self,
        ctx: &OpCtx,
        inputs: &[NDArray],
        _aux: &mut [NDArray],
    ) -> Result<Vec<NDArray>> {
        let x = &inputs[0];
        let r = self.plan(ctx.node, x.shape())?;
        let s: Vec<usize> = r.iter().map(|a| a.count).collect();
        let out = with_dtype!(x.dtype(), T => {
            let xs = values::<T>(x, "slice: data")?;
            NDArray::from_vec::<T>(&s, strided_gather(xs, x.shape(), &r))?
        });
        Ok(vec![out])
    }

    fn backward(
        &self,
        ctx: &OpCtx,
        out_grads: &[NDArray],
        inputs: &[NDArray],
        _outputs: &[NDArray],
        _aux: &mut [NDArray],
    ) -> Result<Vec<Option<NDArray>>> {
        let x = &inputs[0];
        let r = self.plan(ctx.node, x.shape())?;
        let g = &out_grads[0];
        let dx = with_dtype!(g.dtype(), T => {
            let gs = values::<T>(g, "slice: output gradient")?;
            NDArray::from_vec::<T>(x.shape(), strided_scatter(gs, x.shape(), &r))?
        });
        Ok(vec![Some(dx)])
    }
}

// ---------------------------------------------------------------------------------------------
// Embedding
// ---------------------------------------------------------------------------------------------

#[derive(Debug)]
struct Embedding {
    input_dim: usize,
    output_dim: usize,
    dtype: DType,
}

impl Embedding {
    fn create(p: &Params) -> Result<Arc<dyn Operator>> {
        Ok(Arc::new(Embedding {
            input_dim: p.usize_min("input_dim", 1)?,
            output_dim: p.usize_min("output_dim", 1)?,
            dtype: DType::parse(&p.str("dtype")?)?,
        }))
    }

    /// The weight row of every index. MXNet truncates the float index and clips it into
    /// [0, input_dim) silently; an index outside that range is an error here (SPEC §8).
    fn rows(&self, node: &str, idx: &[f32]) -> Result<Vec<usize>> {
        idx.iter()
            .enumerate()
            .map(|(pos, &v)| {
                // `v >= 0.0` also rejects NaN.
                let j = if v >= 0.0 { v as usize } else { usize::MAX };
                if j < self.input_dim {
                    Ok(j)
                } else {
                    Err(Error::invalid(
                        format!("Embedding node \"{node}\": input \"data\""),
                        format!("indices in [0, input_dim={})", self.input_dim),
                        format!("index {v} at position {pos}"),
                    ))
                }
            })
            .collect()
    }

    fn check_weight(&self, node: &str, w: &NDArray) -> Result<()> {
        let want = [self.input_dim, self.output_dim];
        if w.shape() != want {
            return Err(Error::shape(
                "Embedding",
                format!("node \"{node}\": input \"weight\""),
                want,
                w.shape(),
            ));
        }
        Ok(())
    }
}

impl Operator for Embedding {
    fn arguments(&self) -> Vec<String> {
        vec!["data".into(), "weight".into()]
    }

    fn infer_shape(
        &self,
        node: &str,
        inputs: &mut [MaybeShape],
        _aux: &mut [MaybeShape],
    ) -> Result<Vec<Vec<usize>>> {
        let want = [self.input_dim, self.output_dim];
        check_or_fill("Embedding", node, "weight", &mut inputs[1], &want)?;
        let mut s = known("Embedding", node, &["data", "weight"], inputs, 0)?.to_vec();
        s.push(self.output_dim);
        Ok(vec![s])
    }

    fn infer_type(
        &self,
        inputs: &mut [Option<DType>],
        _aux: &mut [Option<DType>],
    ) -> Result<Vec<DType>> {
        if let Some(d) = inputs.get_mut(0) {
            d.get_or_insert(DType::Float32);
        }
        if let Some(w) = inputs.get_mut(1) {
            match w {
                Some(t) if *t != self.dtype => {
                    return Err(Error::invalid(
                        "Embedding: input \"weight\" dtype",
                        self.dtype.name(),
                        t.name(),
                    ))
                }
                _ => *w = Some(self.dtype),
            }
        }
        Ok(vec![self.dtype])
    }

    fn forward(
        &self,
        ctx: &OpCtx,
        inputs: &[NDArray],
        _aux: &mut [NDArray],
    ) -> Result<Vec<NDArray>> {
        let (x, w) = (&inputs[0], &inputs[1]);
        self.check_weight(ctx.node, w)?;
        let rows = self.rows(ctx.node, x.f32s("Embedding: data")?)?;
        let ws = w.f32s("Embedding: weight")?;
        let d = self.output_dim;
        let mut out = vec![0.0f32; rows.len() * d];
        par::for_each_row_mut(&mut out, d, |i, dst| {
            let r = rows[i] * d;
            if let Some(src) = ws.get(r..r + d) {
                dst.copy_from_slice(src);
            }
        });
        let mut s = x.shape().to_vec();
        s.push(d);
        Ok(vec![NDArray::from_f32(&s, out)?])
    }

    fn backward(
        &self,
        ctx: &OpCtx,
        out_grads: &[NDArray],
        inputs: &[NDArray],
        _outputs: &[NDArray],
        _aux: &mut [NDArray],
    ) -> Result<Vec<Option<NDArray>>> {
        let rows = self.rows(ctx.node, inputs[0].f32s("Embedding: data")?)?;
        let g = out_grads[0].f32s("Embedding: output gradient")?;
        let (k, d) = (self.input_dim, self.output_dim);
        // Group the positions by weight row (a stable counting sort), then let each row add its
        // positions' gradients in position order: parallel over rows, and the same sum order
        // at any thread count.
        let mut start = vec![0usize; k + 1];
        for &r in &rows {
            start[r + 1] += 1;
        }
        for i in 0..k {
            start[i + 1] += start[i];
        }
        let mut fill = start.clone();
        let mut order = vec![0usize; rows.len()];
        for (pos, &r) in rows.iter().enumerate() {
            order[fill[r]] = pos;
            fill[r] += 1;
        }
        let mut dw = vec![0.0f32; k * d];
        par::for_each_row_mut(&mut dw, d, |r, dst| {
            for &pos in &order[start[r]..start[r + 1]] {
                if let Some(src) = g.get(pos * d..(pos + 1) * d) {
                    dst.iter_mut().zip(src).for_each(|(a, b)| *a += b);
                }
            }
        });
        Ok(vec![None, Some(NDArray::from_f32(&[k, d], dw)?)])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn codes(c: &[i64], d: &[usize], rev: bool) -> Vec<usize> {
        reshape_codes("r", c, d, rev).unwrap()
    }

    #[test]
    fn reshape_codes_like_mxnet_docs() {
        assert_eq!(codes(&[4, 0, 2], &[2, 3, 4], false), vec![4, 3, 2]);
        assert_eq!(codes(&[2, 0, 0], &[2, 3, 4], false), vec![2, 3, 4]);
        assert_eq!(codes(&[6, 1, -1], &[2, 3, 4], false), vec![6, 1, 4]);
        assert_eq!(codes(&[3, -1, 8], &[2, 3, 4], false), vec![3, 1, 8]);
        assert_eq!(codes(&[-1], &[2, 3, 4], false), vec![24]);
        assert_eq!(codes(&[-2], &[2, 3, 4], false), vec![2, 3, 4]);
        assert_eq!(codes(&[2, -2], &[2, 3, 4], false), vec![2, 3, 4]);
        assert_eq!(codes(&[-2, 1, 1], &[2, 3, 4], false), vec![2, 3, 4, 1, 1]);
        assert_eq!(codes(&[-3, 4], &[2, 3, 4], false), vec![6, 4]);
        assert_eq!(codes(&[-3, -3], &[2, 3, 4, 5], false), vec![6, 20]);
        assert_eq!(codes(&[0, -3], &[2, 3, 4], false), vec![2, 12]);
        assert_eq!(codes(&[-3, -2], &[2, 3, 4], false), vec![6, 4]);
        assert_eq!(codes(&[-4, 1, 2, -2], &[2, 3, 4], false), vec![1, 2, 3, 4]);
        assert_eq!(
            codes(&[2, -4, -1, 3, -2], &[2, 3, 4], false),
            vec![2, 1, 3, 4]
        );
        assert_eq!(codes(&[-1, 0], &[10, 5, 4], false), vec![40, 5]);
        assert_eq!(codes(&[-1, 0], &[10, 5, 4], true), vec![50, 4]);
        assert!(reshape_codes("r", &[-1, -1], &[2, 3], false).is_err());
        assert!(reshape_codes("r", &[0, 0, 0], &[2, 3], false).is_err());
        assert!(reshape_codes("r", &[-3, -3], &[2, 3, 4], false).is_err());
        assert!(reshape_codes("r", &[-4, 4, -1], &[6], false).is_err());
        assert!(reshape_codes("r", &[-4, -1, 0], &[6], false).is_err());
        assert!(reshape_codes("r", &[-4, 2], &[6], false).is_err());
        assert!(reshape_codes("r", &[5, -1], &[2, 3], false).is_err());
        assert!(reshape_codes("r", &[0, -1], &[0, 3], false).is_err());
    }

    #[test]
    fn legacy_target_shape_infers_one_zero() {
        assert_eq!(
            legacy_target_shape("r", &[0, 4], false, &[2, 3, 4]).unwrap(),
            vec![6, 4]
        );
        assert_eq!(
            legacy_target_shape("r", &[5, 0], true, &[2, 3, 4]).unwrap(),
            vec![2, 12]
        );
    }

    #[test]
    fn block_kernels() {
        // (2, 3, 2) viewed around axis 1.
        let x: Vec<i32> = (0..12).collect();
        assert_eq!(
            take_range(&x, 2, 3, 2, 1, 2),
            vec![2, 3, 4, 5, 8, 9, 10, 11]
        );
        let a = [1, 2, 3, 4];
        let b = [5, 6];
        assert_eq!(
            join_rows(&[&a[..], &b[..]], &[2, 1], 2),
            vec![1, 2, 5, 3, 4, 6]
        );
        assert_eq!(place_range(&[7, 8], 2, 3, 1, 2, 1), vec![0, 0, 7, 0, 0, 8]);
        assert_eq!(around(&[2, 3, 4], 1), (2, 3, 4));
        assert_eq!(around(&[5], 0), (1, 5, 1));
    }

    #[test]
    fn block_kernels_parallel_round_trip() {
        // Large enough for the parallel path: split (4, 3, 8192) along axis 1 and join back.
        let (outer, n, inner) = (4, 3, 8192);
        let x: Vec<i32> = (0..(outer * n * inner) as i32).collect();
        let parts: Vec<Vec<i32>> = (0..n)
            .map(|k| take_range(&x, outer, n, inner, k, 1))
            .collect();
        let refs: Vec<&[i32]> = parts.iter().map(Vec::as_slice).collect();
        assert_eq!(join_rows(&refs, &[inner; 3], outer), x);
        let mid = place_range(&parts[1], outer, n, inner, 1, 1);
        assert!(mid
            .iter()
            .enumerate()
            .all(|(i, &v)| v == if (i / inner) % n == 1 { i as i32 } else { 0 }));
        let r = [
            AxisRange {
                start: 0,
                count: outer,
                step: 1,
            },
            AxisRange {
                start: 2,
                count: 2,
                step: -1,
            },
            AxisRange {
                start: inner - 1,
                count: inner,
                step: -1,
            },
        ];
        let g = strided_gather(&x, &[outer, n, inner], &r);
        assert_eq!(g[0], (2 * inner + inner - 1) as i32);
        let back = strided_scatter(&g, &[outer, n, inner], &r);
        // Positions in the region get their own value back; axis-1 index 0 stays zero.
        assert!(back
            .iter()
            .enumerate()
            .all(|(i, &v)| v == if (i / inner) % n == 0 { 0 } else { i as i32 }));
    }

    #[test]
    fn strided_region_round_trip() {
        // x = arange(24).reshape(2, 3, 4); x[1:2, ::-2, 1:4:2]
        let x: Vec<i32> = (0..24).collect();
        let r = [
            AxisRange {
                start: 1,
                count: 1,
                step: 1,
            },
            AxisRange {
                start: 2,
                count: 2,
                step: -2,
            },
            AxisRange {
                start: 1,
                count: 2,
                step: 2,
            },
        ];
        let got = strided_gather(&x, &[2, 3, 4], &r);
        assert_eq!(got, vec![21, 23, 13, 15]);
        let back = strided_scatter(&got, &[2, 3, 4], &r);
        for (i, &v) in back.iter().enumerate() {
            assert!(v == 0 || v == i as i32);
        }
        assert_eq!(back.iter().filter(|&&v| v != 0).count(), 4);
    }

    #[test]
    fn slice_plan_follows_mxnet_index_range() {
        let s = |b: &str, e: &str, st: &str, d: &[usize]| {
            let sl = Slice {
                begin: parse_opt_tuple(b).unwrap(),
                end: parse_opt_tuple(e).unwrap(),
                step: parse_opt_tuple(st).unwrap(),
            };
            sl.plan("s", d)
                .unwrap()
                .iter()
                .map(|r| (r.start, r.count))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            s("(None, 1)", "(None, 3)", "()", &[2, 4]),
            vec![(0, 2), (1, 2)]
        );
        assert_eq!(s("(-1,)", "(None,)", "(-1,)", &[5]), vec![(4, 5)]);
        assert_eq!(s("(None,)", "(None,)", "(-2,)", &[5]), vec![(4, 3)]);
        assert_eq!(s("(7,)", "(9,)", "()", &[5]), vec![(0, 0)]);
        assert_eq!(s("(-9,)", "(2,)", "()", &[5]), vec![(0, 2)]);
        assert_eq!(s("(1,)", "(-1,)", "(None,)", &[5, 2]), vec![(1, 3), (0, 2)]);
        assert_eq!(s("(3,)", "(1,)", "()", &[5]), vec![(0, 0)]);
    }

    #[test]
    fn opt_tuples_parse() {
        assert_eq!(parse_opt_tuple("(None, 1)"), Some(vec![None, Some(1)]));
        assert_eq!(parse_opt_tuple("[0, -2]"), Some(vec![Some(0), Some(-2)]));
        assert_eq!(parse_opt_tuple("(3,)"), Some(vec![Some(3)]));
        assert_eq!(parse_opt_tuple("()"), Some(vec![]));
        assert_eq!(parse_opt_tuple("2"), Some(vec![Some(2)]));
        assert_eq!(parse_opt_tuple("(a, 1)"), None);
    }
}
