//! `Reshape`, `Flatten`, `expand_dims`, `squeeze` (views sharing the input's storage) and
//! `transpose`.

use super::{bad_param, norm_axis, tup, Text};
use crate::error::{Error, Result};
use crate::ops::params::Params;
use crate::ops::{known, MaybeShape, OpCtx, Operator};
use crate::tensor::NDArray;
use std::sync::Arc;

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

crate::op_params! {
    pub(crate) struct ReshapeParams {
        shape: Shape = "()", "The target shape, possibly with the special codes 0, -1, -2, -3, -4.";
        reverse: Bool = "False", "Apply the special codes from right to left.";
        target_shape: Shape = "()",
            "(Deprecated) target shape used when `shape` is empty; a single 0 is inferred.";
        keep_highest: Bool = "False",
            "(Deprecated, with target_shape) keep the first dimension of the input.";
    }
}

crate::op_params! {
    pub(crate) struct ExpandDimsParams {
        axis: Int, "Position of the new axis, in [-ndim-1, ndim].";
    }
}

crate::op_params! {
    pub(crate) struct SqueezeParams {
        axis: OptShape = "None", "Axes to remove (None: every axis of size 1).";
    }
}

/// An op whose output is the input with another shape; backward reshapes the gradient back.
#[derive(Debug)]
pub(crate) struct View {
    op: &'static str,
    kind: ViewKind,
}

impl View {
    pub(crate) fn create_reshape(p: &Params) -> Result<Arc<dyn Operator>> {
        let q = ReshapeParams::from_params(p)?;
        let shape = q.shape;
        if let Some(bad) = shape.iter().find(|&&d| d < -4) {
            return Err(p.error(
                "shape",
                "sizes >= 0 or the codes -1, -2, -3, -4",
                format!("{} in {}", bad, tup(&shape)),
            ));
        }
        let target_shape = q.target_shape;
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
                reverse: q.reverse,
                target_shape,
                keep_highest: q.keep_highest,
            },
        }))
    }

    pub(crate) fn create_flatten(_p: &Params) -> Result<Arc<dyn Operator>> {
        Ok(Arc::new(View {
            op: "Flatten",
            kind: ViewKind::Flatten,
        }))
    }

    pub(crate) fn create_expand_dims(p: &Params) -> Result<Arc<dyn Operator>> {
        Ok(Arc::new(View {
            op: "expand_dims",
            kind: ViewKind::ExpandDims(ExpandDimsParams::from_params(p)?.axis),
        }))
    }

    pub(crate) fn create_squeeze(p: &Params) -> Result<Arc<dyn Operator>> {
        Ok(Arc::new(View {
            op: "squeeze",
            kind: ViewKind::Squeeze(SqueezeParams::from_params(p)?.axis),
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
pub(crate) fn reshape_codes(
    node: &str,
    codes: &[i64],
    d: &[usize],
    reverse: bool,
) -> Result<Vec<usize>> {
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
pub(crate) fn legacy_target_shape(
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
        if rest == 0 || !size.is_multiple_of(rest) {
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

pub(crate) fn isizes(s: &[usize]) -> Vec<isize> {
    s.iter().map(|&d| d as isize).collect()
}

// ---------------------------------------------------------------------------------------------
// transpose
// ---------------------------------------------------------------------------------------------

crate::op_params! {
    pub(crate) struct Transpose {
        axes: Shape = "()",
            "The permutation (negative values count from the end); empty reverses the axes.";
    }
}

impl Transpose {
    pub(crate) fn create(p: &Params) -> Result<Arc<dyn Operator>> {
        Ok(Arc::new(Permute(Self::from_params(p)?)))
    }
}

impl AxisOrder for Transpose {
    const OP: &'static str = "transpose";

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

/// How an operator that only reorders axes orders them, for an input of `ndim` axes.
pub(crate) trait AxisOrder: std::fmt::Debug + Send + Sync + 'static {
    /// The operator's MXNet name, for errors.
    const OP: &'static str;
    /// `perm[i]`: the input axis that becomes output axis `i`.
    fn perm(&self, node: &str, ndim: usize) -> Result<Vec<usize>>;
}

/// An operator that reorders the axes of its input (`transpose`, `SwapAxis`): the output is a
/// view in the new order; backward applies the inverse order to the gradient.
#[derive(Debug)]
pub(crate) struct Permute<A>(pub(crate) A);

impl<A: AxisOrder> Operator for Permute<A> {
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
        let d = known(A::OP, node, &["data"], inputs, 0)?;
        let perm = self.0.perm(node, d.len())?;
        Ok(vec![perm.iter().map(|&a| d[a]).collect()])
    }

    fn forward(
        &self,
        ctx: &OpCtx,
        inputs: &[NDArray],
        _aux: &mut [NDArray],
    ) -> Result<Vec<NDArray>> {
        let perm = self.0.perm(ctx.node, inputs[0].ndim())?;
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
        let perm = self.0.perm(ctx.node, inputs[0].ndim())?;
        let mut inv = vec![0; perm.len()];
        for (i, &p) in perm.iter().enumerate() {
            inv[p] = i;
        }
        Ok(vec![Some(out_grads[0].transpose(Some(&inv))?)])
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
}
